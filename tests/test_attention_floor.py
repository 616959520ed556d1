"""Decode attention streams its KV cache from DRAM: the pointwise correction never predicts it faster than the
roofline, whatever the trees extrapolate (no training source has attention timings)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections import HybridPredictor, PointwiseXGB, XGBParams
from hybrid.corrections.kernel_xgb import ATTENTION_DRAM_FLOOR_L2
from hybrid.ops.roofline import roofline


@pytest.fixture(scope="module")
def vidur_pointwise(shared_datasets, catalog) -> pd.DataFrame:
    from hybrid.data.importers import import_paths

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = import_paths("vidur-compute", shared_datasets / "vidur", catalog=catalog)
    table = table[table["op"].isin(["elementwise", "rmsnorm", "layernorm"])]
    return table.sample(n=min(20000, len(table)), random_state=0).reset_index(drop=True)


def _attention(device: str, batch: int, kv_len: int) -> pd.DataFrame:
    """One decode step of Llama-2-7B's attention (32 heads of 128, one new token per sequence), fp16."""
    return pd.DataFrame({"op": ["attention"], "device": device, "dtype": "fp16", "batch": batch, "heads": 32,
                         "kv_heads": 32, "q_len": 1, "kv_len": kv_len, "head_dim": 128, "causal": True})


def test_large_decode_attention_is_never_faster_than_its_roofline(vidur_pointwise, catalog):
    model = PointwiseXGB(XGBParams(n_estimators=120, max_depth=6))
    pred = HybridPredictor(catalog, [model]).fit(vidur_pointwise)
    rows = pd.concat([_attention(d, b, kv) for d in ("A100-SXM4-80GB", "H100-SXM", "H200", "B200")
                      for b, kv in ((32, 1100), (8, 4000), (256, 200))], ignore_index=True)
    out = pred.predict(rows)
    base = roofline(rows, catalog)
    l2 = np.array([catalog.device(d).l2_cache for d in rows["device"]])
    big = base["bytes"].to_numpy() > ATTENTION_DRAM_FLOOR_L2 * l2
    assert big.all()  # hundreds of MB of KV cache against tens of MB of L2
    ratio = out["time_us"].to_numpy() / base["time_us"].to_numpy()
    assert (ratio >= 1 - 1e-9).all(), ratio
    # the floor is a bound, not the prediction: the A100, like the Vidur rows it was fitted on, stays above it
    assert ratio[(rows["device"] == "A100-SXM4-80GB").to_numpy()].min() > 1.05
    # and the bound of the 80% interval's low end too (it used to apply to GEMMs only)
    with_intervals = HybridPredictor(catalog, [PointwiseXGB(XGBParams(n_estimators=60, max_depth=6))]).fit(
        vidur_pointwise, intervals=True)
    low = with_intervals.predict(rows)["time_us_low"].to_numpy()
    assert np.isfinite(low).all() and (low >= base["time_us"].to_numpy() * (1 - 1e-9)).all()


def test_small_attention_and_other_pointwise_ops_are_not_floored(vidur_pointwise, catalog):
    """A KV cache that fits in L2, and elementwise ops (whose roofline bytes a cache may serve), keep the trees'
    prediction: the floor is only for DRAM streams."""
    model = PointwiseXGB(XGBParams(n_estimators=120, max_depth=6)).fit(
        vidur_pointwise, roofline(vidur_pointwise, catalog), catalog)
    small = _attention("H100-SXM", 1, 16)
    base = roofline(small, catalog)
    assert base["bytes"].iloc[0] < ATTENTION_DRAM_FLOOR_L2 * catalog.device("H100-SXM").l2_cache
    assert model.floor_us(small, base, catalog)[0] == 0.0
    ew = vidur_pointwise.head(200)
    assert not model.floor_us(ew, roofline(ew, catalog), catalog).any()


def test_a_chunk_between_prefill_and_decode_costs_at_most_its_square_pieces(catalog):
    """Attention is measured at q = kv (prefill) and q = 1 (decode). A prompt chunk of q queries over kv keys
    (chunked prefill) lies between them; the trees alone priced 128 queries over 4096 keys slower than 2048 over
    the same keys. Bounded by the chunk run as square pieces, time grows with the queries."""
    from pathlib import Path

    from hybrid.corrections.kernel_xgb import CHUNK_MIN_QUERIES

    table = pd.read_csv(Path(__file__).resolve().parents[1] / "datasets/H200/measurements.csv", low_memory=False)
    fit = table[table["op"].isin(["attention", "softmax", "layernorm", "elementwise"])].reset_index(drop=True)
    model = PointwiseXGB(XGBParams(seed=0, n_estimators=80)).fit(fit, roofline(fit, catalog), catalog)
    qs = [1, 8, 16, 128, 256, 512, 1024, 2048, 4096]
    q = pd.DataFrame({"op": "attention", "device": "H200", "dtype": "bf16", "direction": "fwd", "batch": 1,
                      "heads": 32, "kv_heads": 32, "q_len": qs, "kv_len": 4096, "head_dim": 128, "causal": True})
    base = roofline(q, catalog)
    bound = model.chunk_bound_us(q, base, catalog)
    inside = (np.array(qs) >= CHUNK_MIN_QUERIES) & (np.array(qs) < 4096)
    assert np.isfinite(bound[inside]).all() and np.isnan(bound[~inside]).all()
    t = model.predict(q, base, catalog)
    assert np.all(t[inside] <= bound[inside] * (1 + 1e-9))
    chunks = t[np.array(qs) >= 128]
    assert np.all(chunks[1:] >= 0.85 * chunks[:-1]), chunks  # more queries over the same keys: not faster
    assert np.all(t >= base["time_us"].to_numpy() * 0.5)


@pytest.fixture(scope="module")
def h200_fit():
    """The default predictor fitted on the committed H200 profile (its 352 SDPA rows, 272 of them square)."""
    from hybrid.data.bundle import load_bundle

    table, catalog = load_bundle(Path(__file__).resolve().parents[1] / "datasets" / "H200")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return HybridPredictor(catalog).fit(table), table, catalog


def _prefill(device: str, dtype: str, batch: int, heads: int, kv_heads: int, seq: int, **extra) -> pd.DataFrame:
    return pd.DataFrame({"op": ["attention"], "device": device, "dtype": dtype, "direction": "fwd", "batch": batch,
                         "heads": heads, "kv_heads": kv_heads, "q_len": seq, "kv_len": seq, "head_dim": 128,
                         "causal": True, **extra})


def test_prefill_attention_is_learned_from_attention_rows_and_transfers(h200_fit):
    """The attention model (AttentionXGB) learns fused attention from the profile's SDPA rows with head size,
    causal flag and query tiles per SM. Before it, the pointwise trees priced it from rows = batch x heads x q by
    hidden = kv: Llama-2-7B's 2048-token A100 prefill attention at 4.6x its roofline (647 us; FlashAttention-2
    runs such shapes at 50-73% of the A100's fp16 peak, i.e. 1.2-1.8x this roofline with its exps), and the
    H200's own traced Llama SDPA forward (CUPTI, datasets/traces-h200) +80% off."""
    pred, _, _ = h200_fit
    a100 = pred.predict(_prefill("A100-SXM4-80GB", "fp16", 1, 32, 32, 2048), intervals=False, host=True)
    ratio = float(a100["time_us"].iloc[0] / a100["roofline_us"].iloc[0])
    assert 1.0 <= ratio <= 2.5, ratio
    assert float(a100["host_us"].iloc[0] + a100["learned_host_us"].iloc[0]) == 0.0  # no framework: a kernel
    # the traced Llama step's SDPA forward on the H200 (4 x 16 query / 8 KV heads x 1024, d 128, causal, bf16):
    # 46.6 us of CUPTI kernel time per call (`hybrid trace kernels datasets/traces-h200/llama-bf16-sdpa`)
    traced = pred.predict(_prefill("H200", "bf16", 4, 16, 8, 1024, framework="cupti"), intervals=False, host=True)
    kernel = float(traced["time_us"].iloc[0] - traced["host_us"].iloc[0] - traced["learned_host_us"].iloc[0])
    assert abs(kernel / 46.6 - 1) < 0.2, kernel


def test_attention_model_answers_square_rows_and_leaves_decode_and_other_ops_to_the_pointwise_model(h200_fit):
    """Square prefill/training rows are the attention model's (fitted on them alone); decode steps stay with the
    pointwise model. Rows joined to a calibration for the attention model alone (``load_project_attention``, tagged
    ``source`` = ATTENTION_ONLY_SOURCE) move no elementwise price (learned, they had: the trees split the eager
    attention rows' dispatch into other ops); a profile's own attention rows are still learned by the pointwise
    trees, whose other prices stay those of a fit without the attention model (leaving them out had moved the H200
    bundle's H100 steps 8.6 -> 10.7%)."""
    from hybrid.corrections.kernel_xgb import ATTENTION_ONLY_SOURCE, AttentionXGB
    from hybrid.corrections.predictor import default_corrections

    pred, table, catalog = h200_fit
    att = next(c for c in pred.corrections if isinstance(c, AttentionXGB))
    assert att.fitted and att.summary.rows == 272 and att.dispatch_us > 5.0  # tiny decode calls: the dispatch
    decode = _prefill("H200", "bf16", 8, 32, 8, 1).assign(kv_len=4096)
    rows = pd.concat([_prefill("H200", "bf16", 1, 32, 32, 2048), decode], ignore_index=True)
    base = roofline(rows, catalog)
    mine = att.predict(rows, base, catalog)
    assert np.isfinite(mine[0]) and np.isnan(mine[1])
    assert pred.predict(rows, intervals=False)["time_us"].iloc[0] == pytest.approx(mine[0])
    # the same predictor fitted without the square attention rows prices every non-attention op the same
    other = table[table["op"] == "elementwise"].head(200)
    square = (table["op"] == "attention") & (table["q_len"] == table["kv_len"]) & (table["q_len"] >= 16)
    own = table[table["op"].isin(["elementwise", "softmax"])]
    joined = pd.concat([own, table[square].assign(source=ATTENTION_ONLY_SOURCE)], ignore_index=True)
    profile = pd.concat([own, table[square]], ignore_index=True)
    no_attention_model = [c for c in default_corrections() if not isinstance(c, AttentionXGB)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        both = HybridPredictor(catalog).fit(joined)
        alone = HybridPredictor(catalog).fit(own)
        as_profile = HybridPredictor(catalog).fit(profile)
        before = HybridPredictor(catalog, no_attention_model).fit(profile)
    np.testing.assert_allclose(both.predict(other, intervals=False)["time_us"],
                               alone.predict(other, intervals=False)["time_us"], rtol=1e-9)
    mine, theirs = (p.predict(other, intervals=False)["time_us"] for p in (as_profile, before))
    np.testing.assert_allclose(mine, theirs, rtol=1e-9)
    assert not np.allclose(mine, alone.predict(other, intervals=False)["time_us"], rtol=1e-3)  # they were learned
    assert as_profile.predict(rows, intervals=False)["time_us"].iloc[0] != pytest.approx(
        before.predict(rows, intervals=False)["time_us"].iloc[0], rel=1e-3)  # the square row: the attention model
