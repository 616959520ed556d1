"""Kernel-only prices on a GPU the fit never saw (``XGBCorrection.envelope_kernel_us``, ``HybridPredictor.predict(
kernel_bound=True)``, ``KernelTimeModel(learned_dispatch=True)``; docs/corrections.md, "An unseen GPU is priced no
further from its roofline than the fitted GPUs").

The unseen-GPU envelope leaves host-bound rows (roofline under the host dispatch the prediction includes) to the
trees: for eager timings the host sets their time, and the measured machines' hosts say nothing of an unseen one's.
LLM inference prices kernels only (CUDA graphs: the dispatch is taken off), and there those rows' trees, less a
learned dispatch, were still 13-23x the roofline for an H20's decode attention at batch 1-32 (the fitted H200 at
1-8x); the batch envelope then carried that up to batch 64. With the host part taken off, the kernel time is bounded
by the fitted GPUs' kernel time per roofline, host-bound rows included.

Fitted on the project's own eager profiles (datasets/H100-SXM, datasets/H200), as quickstart does."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections.kernel_xgb import GemmXGB, PointwiseXGB, XGBParams
from hybrid.corrections.predictor import HybridPredictor
from hybrid.data.bundle import bundle_catalog, load_bundle
from hybrid.engine.costs import KernelTimeModel
from hybrid.ops.roofline import roofline
from hybrid.workloads.llm.inference import make_setup, predict_static

DATASETS = Path(__file__).resolve().parents[1] / "datasets"
FITTED = ["H200", "H100-SXM"]
BATCHES = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]


@pytest.fixture(scope="module")
def fitted():
    paths = [DATASETS / "H100-SXM", DATASETS / "H200"]
    catalog = bundle_catalog(paths)
    table = pd.concat([load_bundle(p)[0] for p in paths], ignore_index=True, sort=False)
    pred = HybridPredictor(catalog, corrections=[PointwiseXGB(XGBParams(seed=0, n_estimators=150)),
                                                 GemmXGB(XGBParams(seed=0, n_estimators=150))]).fit(table)
    return pred, catalog


def _decode(device: str, kv_len: float) -> pd.DataFrame:
    """Llama-3-70B's fp16 decode attention at TP 4 (16 query heads over 2 KV heads per GPU) at the batch grid."""
    return pd.DataFrame({"device": device, "op": "attention", "dtype": "fp16", "batch": BATCHES, "heads": 16.0,
                         "kv_heads": 2.0, "q_len": 1.0, "kv_len": kv_len, "head_dim": 128.0, "causal": False})


def _kernel_ratio(model, rows: pd.DataFrame) -> np.ndarray:
    out = model.predict(rows)
    return out["time_us"].to_numpy() / out["roofline_us"].to_numpy()


@pytest.mark.parametrize("kv_len", [192.0, 2112.0])
def test_host_bound_decode_attention_on_an_unseen_gpu_no_further_from_roofline_than_fitted_gpus(fitted, kv_len):
    pred, _ = fitted
    kernel = KernelTimeModel(pred, learned_dispatch=True)
    rows = _decode("H20", kv_len)
    full = pred.predict(rows, host=True)
    roof = full["roofline_us"].to_numpy()
    host = (full["host_us"] + full["learned_host_us"]).to_numpy()
    # the case: every small batch is host-bound (a few us of KV cache under ~20-30 us of learned dispatch)
    assert (roof[:4] < host[:4]).all()
    got = _kernel_ratio(kernel, rows)
    worst = np.max([_kernel_ratio(kernel, rows.assign(device=d)) for d in FITTED], axis=0)
    assert (got <= worst * (1 + 1e-6)).all(), (got, worst)
    assert (got >= 1.0 - 1e-9).all()  # never under the roofline
    # what the trees less their learned dispatch gave before: 13-23x the roofline, several times the fitted GPUs'
    before = np.maximum(full["time_us"].to_numpy() - host, roof) / roof
    assert (before[:4] > 2.5 * worst[:4]).all() and (before[:4] > 10.0).all(), (before, worst)


def test_fitted_gpus_and_eager_consumers_keep_their_prices(fitted):
    """Fitted devices get no kernel bound (their own trees answer); the trace engine's kernel times (the learned
    dispatch left in) do not ask for one."""
    pred, _ = fitted
    rows = pd.concat([_decode(d, 2112.0) for d in FITTED], ignore_index=True)
    assert np.isinf(pred.predict(rows, kernel_bound=True)["kernel_bound_us"].to_numpy()).all()
    h20 = _decode("H20", 192.0)
    eager = KernelTimeModel(pred).predict(h20)
    full = pred.predict(h20, host=True)
    np.testing.assert_allclose(eager["time_us"].to_numpy(),
                               np.maximum(full["time_us"] - full["host_us"],
                                          np.minimum(full["roofline_us"], full["time_us"])).to_numpy())


def test_pruned_kernel_bound_gives_the_same_prices_as_the_full_one(fitted):
    """``kernel_us`` only saves work: min(kernel, pruned bound) == min(kernel, full bound)."""
    pred, catalog = fitted
    pw = next(c for c in pred.corrections if isinstance(c, PointwiseXGB))
    rows = pd.concat([_decode(d, kv).assign(dtype=t) for d in ("H20", "L40S", "A100-SXM4-80GB")
                      for kv in (192.0, 4096.0) for t in ("fp16", "bf16")], ignore_index=True)
    base = roofline(rows, catalog)
    now = pw.predict(rows, base, catalog) - pw.host_part_us(rows, base, catalog)
    full = pw.envelope_kernel_us(rows, base, catalog)
    pruned = pw.envelope_kernel_us(rows, base, catalog, now)
    assert np.isfinite(full).sum() > 10 and np.isinf(full).any()  # host-bound rows and the others
    assert (now > full).sum() > 5  # some rows bounded
    np.testing.assert_array_equal(np.minimum(now, pruned), np.minimum(now, full))


def test_llm_decode_attention_on_an_unseen_gpu_priced_like_the_fitted_gpus(fitted):
    """`llm infer llama3-70b --device H20 --tp 4 --batch 64`: the decode attention at 1.9x its roofline (the fitted
    H200 1.8x, H100 2.7x) where the batch envelope over host-bound smaller batches made it ~20x."""
    pred, _ = fitted

    def attention_ratio(device: str) -> float:
        r = predict_static(make_setup("llama3-70b", device=device, tp=4, dtype="fp16"), 64, 128, 128, pred)
        row = r.ops[(r.ops["phase"] == "decode") & (r.ops["name"] == "attention")].iloc[0]
        return float(row["time_us"] / row["roofline_us"])

    h20 = attention_ratio("H20")
    assert h20 <= 1.05 * max(attention_ratio(d) for d in FITTED), h20
    assert h20 < 3.0


def test_only_host_bound_rows_get_a_kernel_bound(fitted):
    """The rows the envelope bounds itself keep its bound (and what the prediction did after it: the GEMM sibling
    blend): the kernel bound is for host-bound rows only, so a kernel-timed fit (no host part) is unchanged."""
    pred, catalog = fitted
    pw = next(c for c in pred.corrections if isinstance(c, PointwiseXGB))
    rows = pd.concat([_decode(d, kv) for d in ("H20", "L40S") for kv in (192.0, 2112.0)], ignore_index=True)
    base = roofline(rows, catalog)
    # under its own host part or a fitted GPU's (the envelope's host allowance is the larger)
    host_bound = base["time_us"].to_numpy() < np.maximum(pw.host_part_us(rows, base, catalog),
                                                         pw.fitted_host_max_us())
    assert host_bound.any() and not host_bound.all()
    kernel = pw.envelope_kernel_us(rows, base, catalog)
    assert np.isfinite(kernel[host_bound]).all() and np.isinf(kernel[~host_bound]).all()
    # a row over the unseen GPU's own host part but under the fitted H200's: no envelope bound, a kernel bound
    gap = _decode("H20", 2112.0).assign(batch=40.0).iloc[:1]
    gap_base = roofline(gap, catalog)
    assert pw.host_part_us(gap, gap_base, catalog)[0] < gap_base["time_us"].iloc[0] < pw.fitted_host_max_us()
    assert np.isinf(pw.envelope_log_ratio(gap, gap_base, catalog)).all()
    assert np.isfinite(pw.envelope_kernel_us(gap, gap_base, catalog)).all()
    learned, pw.learned_dispatch = pw.learned_dispatch, {}
    try:
        assert np.isinf(pw.envelope_kernel_us(rows, base, catalog)).all()
    finally:
        pw.learned_dispatch = learned
