"""GEMMs in a dtype the fit never saw (fp8, fp4 today) are priced at the efficiency of the nearest fitted dtype."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections import GemmXGB, XGBParams
from hybrid.corrections.kernel_xgb import UNSEEN_DTYPE_PROXY
from hybrid.ops.roofline import roofline


@pytest.fixture(scope="module")
def xla(shared_datasets, catalog) -> pd.DataFrame:
    from hybrid.data.importers import import_paths

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return import_paths("xla-matmul", shared_datasets / "xla", catalog=catalog)


def _query(dtype: str, sizes=(1024, 4096, 8192), framework: str = "xla") -> pd.DataFrame:
    return pd.DataFrame({"device": "H100-SXM", "op": "gemm", "dtype": dtype, "b": 1, "m": list(sizes),
                         "n": list(sizes), "k": list(sizes), "framework": framework})


def test_fp8_is_priced_at_the_bf16_efficiency_of_the_same_shape(xla, catalog):
    """Fitted on XLA's H100 bf16 / tf32 rows (no fp8 row: none is plausible), an fp8 GEMM costs the bf16
    prediction of its shape times the fp8 / bf16 roofline ratio: twice the bf16 rate where compute-bound, never
    above the fp8 peak. Without the proxy the trees price it from their own leaves."""
    fit = xla[xla["dtype"].isin(["bf16", "tf32"])].reset_index(drop=True)
    model = GemmXGB(XGBParams(seed=0, n_estimators=60)).fit(fit, roofline(fit, catalog), catalog)
    assert model.fitted_dtypes == {"bf16", "tf32"}
    q8, q16 = _query("fp8"), _query("bf16")
    b8, b16 = roofline(q8, catalog), roofline(q16, catalog)
    t8, t16 = model.predict(q8, b8, catalog), model.predict(q16, b16, catalog)
    # kernel-timed rows (no dispatch): exactly the bf16 efficiency on the fp8 roofline
    np.testing.assert_allclose(t8, t16 * b8["time_us"].to_numpy() / b16["time_us"].to_numpy(), rtol=1e-9)
    flops = 2.0 * q8["m"].to_numpy(float) ** 3
    tflops8, tflops16 = flops / t8 / 1e6, flops / t16 / 1e6
    assert tflops8[-1] > 1.9 * tflops16[-1]  # compute-bound: the 2x peak carries over
    assert np.all(tflops8 <= catalog.device("H100-SXM").peak("fp8") / 1e12 * 1.0001)
    assert np.all(t8 >= b8["time_us"].to_numpy() * (1 - 1e-9))  # the roofline floor of its own dtype
    # the proxy is the library's rule, not the trees: without it the same model answers differently
    model.dtype_proxy = {}
    assert np.isnan(model.dtype_proxy_us(q8, b8, catalog)).all()
    assert not np.allclose(model.predict(q8, b8, catalog), t8)


def test_dispatch_is_not_scaled_and_fitted_dtypes_answer_for_themselves(xla, catalog):
    """A framework-timed fp8 row keeps its own dispatch (the scale applies to the kernel time only); once fp8
    rows are in the fit the trees answer for fp8 themselves; a fit with no dtype of the chain has no proxy."""
    fit = xla[xla["dtype"].isin(["bf16", "tf32"])].reset_index(drop=True)
    eager = fit.assign(framework="pytorch", time_us=fit["time_us"] + 12.0)  # as a framework-timed collection
    model = GemmXGB(XGBParams(seed=0, n_estimators=60)).fit(eager, roofline(eager, catalog), catalog)
    q8, q16 = _query("fp8", framework="pytorch"), _query("bf16", framework="pytorch")
    b8, b16 = roofline(q8, catalog), roofline(q16, catalog)
    h8, h16 = model.host_us(q8, b8, catalog), model.host_us(q16, b16, catalog)
    assert np.all(h8 > 0) and np.allclose(h8, h16)
    t8, t16 = model.predict(q8, b8, catalog), model.predict(q16, b16, catalog)
    expected = np.maximum((t16 - h16) * b8["time_us"].to_numpy() / b16["time_us"].to_numpy() + h8,
                          model.floor_us(q8, b8, catalog))
    np.testing.assert_allclose(t8, expected, rtol=1e-9)

    # fp8 in the fit (GemmXGB.fit does not apply the predictor's plausibility check): no proxy for fp8
    with_fp8 = xla.reset_index(drop=True)
    own = GemmXGB(XGBParams(seed=0, n_estimators=60)).fit(with_fp8, roofline(with_fp8, catalog), catalog)
    assert "fp8" in own.fitted_dtypes
    assert np.isnan(own.dtype_proxy_us(_query("fp8"), roofline(_query("fp8"), catalog), catalog)).all()

    # only tf32 fitted: fp8's chain (bf16, fp16) has nothing fitted, so the trees answer
    tf = xla[xla["dtype"] == "tf32"].reset_index(drop=True)
    only = GemmXGB(XGBParams(seed=0, n_estimators=60)).fit(tf, roofline(tf, catalog), catalog)
    assert only.fitted_dtypes == {"tf32"}
    assert np.isnan(only.dtype_proxy_us(_query("fp8"), roofline(_query("fp8"), catalog), catalog)).all()
    assert set(UNSEEN_DTYPE_PROXY["fp8"]) == {"bf16", "fp16"} and "tf32" not in UNSEEN_DTYPE_PROXY


def test_a_gpu_without_units_of_the_dtype_is_priced_on_the_units_it_runs_on(catalog):
    """fp8 and fp4 on a V100 run on its fp16 tensor cores: priced at the fitted fp16 efficiency on that GPU, not at
    the bf16 one (which there runs on the FP32 units at nearly 100% of that slow roofline and, carried to the
    tensor-core roofline, made fp8 faster than fp16)."""
    from pathlib import Path

    table = pd.read_csv(Path(__file__).resolve().parents[1] / "datasets/H100-SXM/measurements.csv",
                        low_memory=False)
    fit = table[table["op"].isin(["gemm", "linear", "bmm"])].reset_index(drop=True)
    model = GemmXGB(XGBParams(seed=0, n_estimators=60)).fit(fit, roofline(fit, catalog), catalog)
    assert {"fp16", "bf16"} <= model.fitted_dtypes and "fp8" not in model.fitted_dtypes
    q = pd.DataFrame({"device": "V100-SXM2-32GB", "op": "gemm", "b": 1, "m": [2048, 8192], "n": [2048, 8192],
                      "k": [2048, 8192], "dtype": "fp16"})
    t16 = model.predict(q, roofline(q, catalog), catalog)
    for dt in ("fp8", "fp4"):
        qd = q.assign(dtype=dt)
        td = model.predict(qd, roofline(qd, catalog), catalog)
        assert td[-1] == pytest.approx(t16[-1], rel=0.02), dt  # compute-bound: the same units, the same time
        assert np.all(td >= t16 * 0.5)
    # on a GPU with fp8 units the fp8 proxy stays bf16 (the nearest fitted dtype of the chain)
    assert model._device_proxy("H100-SXM", "fp8", catalog) == "bf16"
    assert model._device_proxy("V100-SXM2-32GB", "fp8", catalog) == "fp16"
