"""Vidur's compute rows are kernel times; LLM calibrations label them so (``kernel_timed``).

Checked on public data: a GEMM model fitted on Vidur's A100 layer GEMMs plus XLA's H100 matmul table prices the
H100 GEMMs of an LLM builder's rows (no ``framework``) as XLA measured the H100's kernels when Vidur is
kernel-labelled; with the importer's default label it adds a fitted "dispatch" Vidur's rows never paid.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections import GemmXGB, HybridPredictor, XGBParams
from hybrid.corrections.features import kernel_timing
from hybrid.data.importers import import_paths
from hybrid.data.importers.vidur import KERNEL_TIMED_FRAMEWORK, kernel_timed


@pytest.fixture(scope="module")
def vidur_and_xla(shared_datasets):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vidur = import_paths("vidur-compute", [shared_datasets / "vidur/data/profiling/compute/a100"])
        xla = import_paths("xla-matmul", [shared_datasets / "xla/matmul_sm90_H100.csv"])
    vidur = vidur[vidur["op"].isin(["gemm", "gemv"])].sample(2500, random_state=0)
    xla = xla[xla["dtype"].isin(["bf16", "f32", "fp32", "tf32"])]
    return vidur.reset_index(drop=True), xla.reset_index(drop=True)


def test_kernel_timed_relabels_only_vidur_compute_rows(vidur_and_xla):
    vidur, xla = vidur_and_xla
    assert (vidur["framework"] == "pytorch").all() and (kernel_timing(vidur) == 0).all()  # the importer's label
    raw = pd.concat([vidur, xla], ignore_index=True)
    both = kernel_timed(raw)
    is_vidur = both["source"].astype(str).str.startswith("vidur-compute:").to_numpy()
    assert (both.loc[is_vidur, "framework"] == KERNEL_TIMED_FRAMEWORK).all()
    assert (kernel_timing(both) == 1).all()
    pd.testing.assert_frame_equal(both.loc[~is_vidur], raw.loc[~is_vidur])  # other rows untouched
    pd.testing.assert_frame_equal(both.drop(columns="framework"), raw.drop(columns="framework"))
    assert kernel_timed(xla.drop(columns="source")) is not None  # no source column: returned as is


def _builder_over_kernel(train: pd.DataFrame, xla: pd.DataFrame) -> np.ndarray:
    """Per XLA bf16 row: the model's price of the row asked as an LLM builder asks (no framework) over its price
    asked as XLA timed it (kernel only)."""
    model = HybridPredictor(corrections=[GemmXGB(XGBParams(n_estimators=120, max_depth=6))]).fit(train)
    bf16 = xla[xla["dtype"] == "bf16"].drop(columns="time_us")
    builder = model.predict(bf16.drop(columns="framework"), intervals=False)["time_us"].to_numpy()
    kernel = model.predict(bf16, intervals=False)["time_us"].to_numpy()
    small = (xla.loc[xla["dtype"] == "bf16", "time_us"] < 20).to_numpy()
    return (builder / kernel)[small]


def test_llm_builder_rows_are_priced_as_h100_kernels_once_vidur_is_kernel_timed(vidur_and_xla):
    vidur, xla = vidur_and_xla
    train = pd.concat([vidur, xla], ignore_index=True)
    default = _builder_over_kernel(train, xla)
    relabelled = _builder_over_kernel(kernel_timed(train), xla)
    assert np.median(default) > 1.2  # a fitted dispatch of ~10-20 us on kernels of 5-20 us
    assert abs(np.median(relabelled) - 1.0) < 0.03


def test_cli_import_kernel_times_flag(shared_datasets, tmp_path):
    """`hybrid data import vidur-compute --kernel-times` writes the rows kernel-labelled; the default keeps the
    framework-timed label; another format refuses the flag with a clear error and writes nothing."""
    from hybrid.cli.main import main as cli_main
    from hybrid.data.schema import read_table

    src = next((shared_datasets / "vidur/data/profiling/compute/a100").rglob("mlp.csv"))
    out, plain = tmp_path / "k.csv", tmp_path / "p.csv"
    assert cli_main(["data", "import", "vidur-compute", str(src), "-o", str(out), "--kernel-times", "--quiet"]) == 0
    assert cli_main(["data", "import", "vidur-compute", str(src), "-o", str(plain), "--quiet"]) == 0
    k, p = read_table(out), read_table(plain)
    assert (k["framework"] == KERNEL_TIMED_FRAMEWORK).all() and (kernel_timing(k) == 1).all()
    assert (p["framework"] == "pytorch").all() and len(k) == len(p)
    bad = tmp_path / "x.csv"
    xla = shared_datasets / "xla/matmul_sm90_H100.csv"
    assert cli_main(["data", "import", "xla-matmul", str(xla), "-o", str(bad), "--kernel-times", "--quiet"]) != 0
    assert not bad.exists()


def test_kernel_times_leave_the_custom_allreduce_constants_alone(shared_datasets):
    """A model without a dispatch constant costs the same with and without kernel times, including the custom
    (one-shot, NVLink) all-reduce, whose fitted intra-node constants are read from the model itself."""
    from hybrid.corrections.collective_transfer import intra_fabric_constants
    from hybrid.workloads.llm.inference import cost_ops, make_setup, pass_ops

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        coll = import_paths("xla-collectives", [shared_datasets / "xla/collectives_sm90_H100.csv"])
    model = HybridPredictor().fit(coll)
    assert intra_fabric_constants(model, "nvswitch") != intra_fabric_constants(None, "nvswitch")  # fitted, not priors
    s = make_setup("llama3-70b", "H100-SXM", tp=4, dtype="fp8", allreduce="custom")
    ops = pass_ops(s, np.array([64.0]), np.array([64.0]), np.array([1.0]), np.array([1024.0]))
    assert (ops.get("p2p_allreduce", pd.Series(0.0)) > 0).any()
    a = cost_ops(ops, model, model.catalog)
    b = cost_ops(ops, model, model.catalog, kernel_times=False)
    np.testing.assert_allclose(a["time_us"], b["time_us"], rtol=0, atol=0)
