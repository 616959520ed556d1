"""Convolution / batch-norm / pooling families, the profiler sweeps that measure them (real torch timing), the
on-core clock, vocabulary-sized GEMMs, the trace mapping of a real CNN step, and the extended CPU bundle."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from hybrid.data.bundle import load_bundle  # noqa: E402
from hybrid.data.profiler.backend import open_backend  # noqa: E402
from hybrid.data.profiler.cases import config_key  # noqa: E402
from hybrid.data.profiler.kernels import VOCAB_LAYOUTS, vocab_gemm_shapes  # noqa: E402
from hybrid.data.profiler.runner import ProfileOptions, run_profile  # noqa: E402
from hybrid.data.profiler.timing import QUICK_POLICY, choose_clock, measure  # noqa: E402
from hybrid.data.schema import read_table  # noqa: E402
from hybrid.data.traces import load_traces  # noqa: E402
from hybrid.data.traces.opmap import map_op  # noqa: E402
from hybrid.data.traces.record import record_step  # noqa: E402
from hybrid.errors import InvalidInputError  # noqa: E402
from hybrid.ops.families import FAMILIES, pool_row  # noqa: E402
from hybrid.ops.roofline import roofline  # noqa: E402
from hybrid.workloads.trace_graph import trace_units  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "datasets" / "cpu-amd-epyc-1c"
CPU = "cpu-amd-epyc-1c"


def _conv(**kw) -> dict:
    row = {"op": "conv2d", "batch": 8, "in_channels": 32, "out_channels": 64, "height": 28, "width": 28,
           "kernel_h": 3, "kernel_w": 3, "padding": 1, "device": CPU}
    row.update(kw)
    return row


def test_conv_family_flops_bytes_and_gradients():
    df = pd.DataFrame([_conv(), _conv(direction="bwd", variant="input_weight"), _conv(direction="bwd", variant="weight"),
                       _conv(stride=2), _conv(groups=32, out_channels=32)])
    fam = FAMILIES["conv"]
    flops = fam.flops(df)
    one = 2.0 * 8 * 28 * 28 * 64 * 32 * 9
    assert flops[0] == pytest.approx(one)
    assert flops[1] == pytest.approx(2 * one) and flops[2] == pytest.approx(one)
    assert flops[3] == pytest.approx(2.0 * 8 * 14 * 14 * 64 * 32 * 9)  # stride 2 halves each output side
    assert flops[4] == pytest.approx(2.0 * 8 * 28 * 28 * 32 * 1 * 9)  # depthwise: one input channel per output
    nbytes = fam.bytes(df)
    x, w, y = 8 * 32 * 28 * 28, 64 * 32 * 9, 8 * 64 * 28 * 28
    assert nbytes[0] == pytest.approx(4 * (x + w + y))
    assert nbytes[2] == pytest.approx(4 * (y + x + w))  # weight grad: read dy, x; write dw
    base = roofline(df, load_bundle(BUNDLE)[1])
    assert (base["family"] == "conv").all() and (base["time_us"] > 0).all()


def test_pool_row_passes_and_batchnorm_params():
    fwd = pool_row("max", "fwd", 16 * 32 * 64 * 64, 16 * 32 * 32 * 32, 4)
    bwd = pool_row("max", "bwd", 16 * 32 * 64 * 64, 16 * 32 * 32 * 32, 4)
    # output is a quarter of the input; int64 indices are two fp32 words per output
    assert fwd["n_inputs"] == 1.0 and fwd["n_outputs"] == pytest.approx(0.75)
    assert bwd["n_inputs"] == pytest.approx(0.75) and bwd["n_outputs"] == 1.0 and bwd["direction"] == "bwd"
    assert pool_row("avg", "fwd", 100, 25, 4)["n_outputs"] == pytest.approx(0.25)
    with pytest.raises(InvalidInputError):
        pool_row("max", "fwd", 0, 1, 4)
    bn = pd.DataFrame([{"op": "batchnorm", "rows": 64, "hidden": 4096}, {"op": "layernorm", "rows": 64,
                                                                          "hidden": 4096}])
    b = FAMILIES["norm"].bytes(bn)
    assert b[0] == pytest.approx(4 * (64 * 4096 * 2 + 64 * 2))  # gamma/beta per channel (= rows)
    assert b[1] == pytest.approx(4 * (64 * 4096 * 2 + 4096 * 2))


def test_thread_clock_counts_only_time_on_a_core():
    backend = open_backend(threads=1, force_cpu=True)
    assert choose_clock(backend, "auto") == "thread"
    with pytest.raises(InvalidInputError, match="auto, wall or thread"):
        choose_clock(backend, "sundial")
    sleepy = lambda _i: time.sleep(0.01)  # noqa: E731  (off the core: the thread clock barely moves)
    wall = measure(backend, sleepy, policy=QUICK_POLICY, clock="wall")
    on_core = measure(backend, sleepy, policy=QUICK_POLICY, clock="thread")
    assert wall.median_us >= 9000
    assert on_core.median_us < 0.2 * wall.median_us


def test_vocab_gemm_shapes_cover_linear_forward_and_both_gradients():
    backend = open_backend(threads=1, force_cpu=True)
    shapes = vocab_gemm_shapes(backend, quick=False, seed=0)
    assert {s[0] for s in shapes} == set(VOCAB_LAYOUTS)
    triples = {}
    for layout, m, n, k in shapes:
        assert 2.0 * m * n * k <= 1.8e10
        triples.setdefault(layout, set())
        triples[layout].add((m, n, k))
    # the three GEMMs of one linear: fwd (t, V, d), input grad (t, d, V), weight grad (V, d, t)
    for t, v, d in triples["linear"]:
        assert (t, d, v) in triples["mm"] and (v, d, t) in triples["mm_tn"]
    assert max(v for _, v, _ in triples["linear"]) >= 50257
    assert min(v for _, v, _ in triples["linear"]) >= 8192


def test_profile_conv_and_pool_tiny_sweep(tmp_path):
    opts = ProfileOptions(quick=True, families=("conv", "pool"), threads=1, progress=False, force_cpu=True)
    res = run_profile(opts, tmp_path / "b")
    t = read_table(tmp_path / "b" / "measurements.csv", load_bundle(tmp_path / "b")[1])
    assert res.meta["clock"]["name"] == "thread"
    assert (t["time_us"] > 0).all()
    conv = t[t["op"] == "conv2d"]
    assert set(conv["direction"]) == {"fwd", "bwd"} and {"input_weight", "weight"} <= set(conv["variant"])
    # on the same layer, both gradients cost more than the forward (twice the FLOPs)
    key = ["batch", "in_channels", "out_channels", "height", "kernel_h", "stride", "groups"]
    fwd = conv[conv["direction"] == "fwd"].set_index(key)["time_us"]
    both = conv[conv["variant"] == "input_weight"].set_index(key)["time_us"]
    assert (both / fwd).median() > 1.2
    bn = t[t["op"] == "batchnorm"]
    assert set(bn["direction"]) == {"fwd", "bwd"}
    pool = t[t["variant"].isin(["maxpool", "avgpool"])]
    assert set(pool["direction"]) == {"fwd", "bwd"} and (pool["op"] == "elementwise").all()
    up = t[t["variant"].isin(["upsample_nearest", "upsample_bilinear"])]
    modes = ("upsample_nearest", "upsample_bilinear")
    assert set(zip(up["variant"], up["direction"], strict=True)) == {(v, d) for v in modes for d in ("fwd", "bwd")}
    assert (up["n_inputs"].where(up["direction"] == "fwd", up["n_outputs"]) == 0.25).all()  # 2x: a quarter map
    assert (up["rows"] * up["hidden"] == up["elements"]).all()
    # extending: nothing is measured again
    with pytest.raises(Exception, match="already in --skip-existing"):
        run_profile(ProfileOptions(quick=True, families=("conv",), threads=1, progress=False, force_cpu=True,
                                   skip_existing=(str(tmp_path / "b"),)), tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_opmap_costs_a_real_cnn_trace(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3, stride=2, padding=1),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Dropout(0.1),
                                torch.nn.Linear(16, 4))
    model.train()
    x = torch.randn(2, 3, 16, 16)
    paths = record_step(lambda: model(x).sum().backward(), tmp_path, warmup=1)
    units = trace_units(load_traces([paths["kineto"], paths["et"]])[0])
    assert (units["kind"] != "unmodelled").all(), units[units["kind"] == "unmodelled"]["name"].tolist()
    conv = [r for r in units[units["label"] == "conv"]["row"]]
    fwd = [r for r in conv if r["direction"] == "fwd"]
    bwd = {r["in_channels"]: r["variant"] for r in conv if r["direction"] == "bwd"}
    assert {(r["in_channels"], r["out_channels"], r["stride"], r["padding"]) for r in fwd} == {(3, 8, 1, 1),
                                                                                              (8, 16, 2, 1)}
    assert bwd == {3: "weight", 8: "input_weight"}  # the first layer's input needs no gradient
    norm = [r for r in units[units["label"] == "norm"]["row"]]
    assert {(r["op"], r["rows"], r["hidden"], r["direction"]) for r in norm} == {
        ("batchnorm", 8, 2 * 16 * 16, "fwd"), ("batchnorm", 8, 2 * 16 * 16, "bwd")}
    pools = [r for r in units[units["label"] == "pool"]["row"]]
    # (a global average pool's backward is the backward of the mean it runs on a CPU: elementwise)
    assert {(r["variant"], r["direction"], r["elements"]) for r in pools} == {
        ("maxpool", "fwd", 2 * 8 * 16 * 16), ("maxpool", "bwd", 2 * 8 * 16 * 16), ("avgpool", "fwd", 2 * 16 * 4 * 4)}
    drop = [r for r in units[units["label"] == "dropout"]["row"]]
    assert len(drop) == 1 and drop[0]["elements"] == 2 * 16 and drop[0]["direction"] == "fwd"


def test_dropout_variants_map_to_one_row():
    a = map_op("aten::dropout", [[4, 64], [], []], ["fp32", None, None], [], {"concrete": ["", "0.1", "True"]})
    b = map_op("aten::native_dropout", [[4, 64], [], []], ["fp32", None, None], [], {"concrete": ["", "0.1", "True"]})
    assert a.row == b.row and a.label == b.label == "dropout"
    assert map_op("aten::dropout", [[4, 64], [], []], ["fp32", None, None], [],
                  {"concrete": ["", "0.0", "True"]}).kind == "view"  # p = 0 returns the input
    inference = map_op("aten::feature_dropout", [[4, 64], [], []], ["fp32", None, None], [],
                       {"concrete": ["", "0.1", "False"]})
    assert inference.kind == "view"
    back = map_op("aten::native_dropout_backward", [[4, 64], [4, 64], []], ["fp32", "bool", None])
    assert back.row["direction"] == "bwd" and back.row["variant"] == "dropout"
    # a factory op sized by its argument: zero elements launch nothing; otherwise an allocate-and-fill row
    assert map_op("aten::zeros", [[], [], [], [], []], [None] * 5, [], {"concrete": ["[0]", "6", "0", "", ""]}
                  ).kind == "view"
    z = map_op("aten::zeros", [[], [], [], [], []], [None] * 5, [], {"concrete": ["[4, 8]", "6", "0", "", ""]})
    assert z.row["elements"] == 32 and z.row["n_inputs"] == 0.0
    # in-place elementwise ops are marked (no output allocated)
    assert map_op("aten::mul_", [[1024], []], ["fp32", None]).row["variant"].endswith("_")
    assert not map_op("aten::mul", [[1024], []], ["fp32", None]).row["variant"].endswith("_")


def test_cpu_bundle_with_added_rows_validates_and_has_no_duplicates():
    table, cat = load_bundle(BUNDLE)
    t = read_table(BUNDLE / "measurements.csv", cat)
    assert len(t) == len(table)
    keys = [config_key({k: v for k, v in r.items() if k != "device"}) for r in t.to_dict("records")]
    assert len(set(keys)) == len(keys)
    conv = t[t["op"] == "conv2d"]
    assert len(conv) >= 100 and set(conv["direction"]) == {"fwd", "bwd"}
    assert (t["op"] == "batchnorm").sum() >= 50
    vocab = t[(t["op"] == "gemm") & (t["variant"] == "mm_tn")]
    assert len(vocab) >= 30 and vocab["m"].max() >= 50257
    assert (t["variant"].astype(str).str.endswith("_")).sum() >= 40  # in-place elementwise
    # what a vocabulary-sized GEMM runs at on this core: within the measured sgemm ceiling's reach
    lin = t[(t["variant"] == "linear") & (t["n"] >= 30000)]
    gflops = 2.0 * lin["m"] * lin["n"] * lin["k"] / (lin["time_us"] * 1e3)
    assert gflops.median() > 50


def test_conv_correction_fits_the_bundle_conv_rows():
    from hybrid.corrections.kernel_xgb import ConvXGB, XGBParams
    from hybrid.corrections.predictor import HybridPredictor

    table, cat = load_bundle(BUNDLE)
    conv = table[table["op"] == "conv2d"].reset_index(drop=True)
    train, test = conv.iloc[::2], conv.iloc[1::2]
    pred = HybridPredictor(cat, corrections=[ConvXGB(XGBParams(n_estimators=150))]).fit(train)
    out = pred.predict(test.drop(columns=["time_us"]))
    assert (out["method"] == "kernel-xgb").all()
    err = np.abs(np.log(out["time_us"].to_numpy() / test["time_us"].to_numpy()))
    roof = roofline(test, cat)["time_us"].to_numpy()
    roof_err = np.abs(np.log(roof / test["time_us"].to_numpy()))
    # held-out layers: better than the roofline, median within 30%
    assert np.median(err) < np.median(roof_err) and np.exp(np.median(err)) < 1.3


def test_embedding_backward_zero_fills_the_whole_table_gradient():
    """The dense table gradient is zeroed, then the looked-up rows added: num_weights is argument 2 of
    embedding_dense_backward and 5 of _embedding_bag_dense_backward (it was read from 2 there, a 2048-element
    row for a 10000 x 64 table)."""
    grad = [32, 64]
    bag = map_op("aten::_embedding_bag_dense_backward",
                 [grad, [2048], [2048], [32], [32], [], [], [], [], []],
                 ["fp32", "int64", "int64", "int64", "int64", None, None, None, None, None], [],
                 {"concrete": ["", "", "", "", "", "10000", "False", "0", "", "-1"]})
    assert bag is not None and bag.row["elements"] == 10000 * 64 + 32 * 64
    dense = map_op("aten::embedding_dense_backward", [[2048, 64], [2048], [], [], []],
                   ["fp32", "int64", None, None, None], [], {"concrete": ["", "", "10000", "-1", "False"]})
    assert dense is not None and dense.row["elements"] == 10000 * 64 + 2048 * 64
