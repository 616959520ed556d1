"""Kernel times for workloads that model host time themselves.

A kernel model fitted on eager per-op timings (CUDA events around one op: host dispatch + launch + kernel)
predicts dispatch + kernel and reports the dispatch part as ``host_us``; :class:`KernelTimeModel` takes it off, and
the trace engine costs GPU-stream ops that way, since its host stream already carries every op's dispatch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections import GemmXGB, HybridPredictor, XGBParams
from hybrid.data.bundle import load_bundle
from hybrid.data.traces import load_traces, trace_files
from hybrid.engine.costs import KernelTimeModel, RooflineCostModel
from hybrid.ops.roofline import roofline
from hybrid.workloads.trace_graph import build_trace_graph, predict_trace

ROOT = Path(__file__).resolve().parents[1]


def test_kernel_time_recovers_the_kernel_of_eager_timings():
    """Known truth: kernels at 80% of their roofline rate; eager rows pay 20 us of dispatch on top, kernel-only
    rows do not. The predictor says how much of each prediction is dispatch, and the kernel time it leaves is the
    kernel. (The fitted dispatch also absorbs the smallest kernels' excess over their roofline, here 1 us.)"""
    catalog = load_bundle(ROOT / "datasets" / "cpu-amd-epyc-1c")[1]  # the packaged GPUs + this project's CPU
    cpu = next(k for k, d in catalog.devices.items() if d.kind == "cpu")
    rng = np.random.default_rng(1)
    n = 400
    size = rng.choice([64, 128, 256, 512, 1024, 2048], n).astype(float)
    rows = pd.DataFrame({"op": "gemm", "device": rng.choice(["A100-SXM4-80GB", "V100-PCIE-32GB"], n),
                         "dtype": "fp16", "b": 1, "m": size, "n": size, "k": size,
                         "framework": np.where(np.arange(n) % 2 == 0, "pytorch", "deepbench")})
    kernel = 1.25 * roofline(rows, catalog)["time_us"].to_numpy()
    eager = (rows["framework"] == "pytorch").to_numpy()
    rows["time_us"] = kernel + 20.0 * eager
    model = HybridPredictor(catalog, corrections=[GemmXGB(XGBParams(n_estimators=80, max_depth=4))]).fit(rows)
    dispatch = model.corrections[0].dispatch_us
    assert 15.0 < dispatch < 25.0

    query = rows.drop(columns="time_us")
    assert "host_us" not in model.predict(query).columns  # only when asked: the plain prediction pays nothing
    out = model.predict(query, host=True)
    assert (out["host_us"].to_numpy() <= out["time_us"].to_numpy()).all()
    np.testing.assert_allclose(out.loc[eager, "host_us"], dispatch)
    assert (out.loc[~eager, "host_us"] == 0).all()

    k = KernelTimeModel(model).predict(query)
    assert (k["host_us"] == 0).all() and (k["time_us"] <= out["time_us"]).all()
    assert (k["time_us"] >= out["roofline_us"] * (1 - 1e-12)).all()
    # the eager rows' kernel time is the kernel, to the dispatch estimate's bias (about 1 us here); as fitted, the
    # prediction carries the whole 20 us (more than the kernel itself for every shape up to 1024^3)
    gap = np.abs(k.loc[eager, "time_us"].to_numpy() - kernel[eager])
    assert gap.max() < (dispatch - 20.0) + 0.5
    assert (out.loc[eager, "time_us"].to_numpy() - kernel[eager]).min() > 19.0
    # kernel-only rows and intervals: unchanged, and the interval moves with the time
    np.testing.assert_allclose(k.loc[~eager, "time_us"], out.loc[~eager, "time_us"])
    ratio = (k["time_us"] / out["time_us"]).to_numpy()
    for c in ("time_us_low", "time_us_high"):
        np.testing.assert_allclose(k[c].to_numpy(), out[c].to_numpy() * ratio, equal_nan=True)
    # a CPU row pays no GPU dispatch: nothing to take off
    on_cpu = query.iloc[:4].assign(device=cpu, dtype="fp32")
    assert (model.predict(on_cpu, host=True)["host_us"] == 0).all()
    # a cost model that reports no host part passes through unchanged
    roof = RooflineCostModel(catalog)
    pd.testing.assert_frame_equal(KernelTimeModel(roof).predict(query), roof.predict(query))


def test_pointwise_kernel_time_takes_off_the_dispatch_the_trees_learned(tmp_path):
    """Known truth for a correction without the dispatch in its reference (the pointwise default, version 3): norms
    at 70% of their roofline rate; one GPU timed eager (+18 us of dispatch per op), the other by its kernels. The
    trees learn the eager GPU's floor as part of its times; the fitted ``learned_dispatch`` says how much, per GPU
    (nothing on the kernel-timed one), so an op costed as kernel time loses the floor on the eager GPU only; a GPU
    never fitted gets the typical dispatch only when most fitted rows were eager. Saved and loaded with the model."""
    from hybrid.corrections import PointwiseXGB

    catalog = load_bundle(ROOT / "datasets" / "cpu-amd-epyc-1c")[1]
    rng = np.random.default_rng(2)
    n = 600
    rows = pd.DataFrame({"op": "layernorm", "dtype": "fp16", "rows": rng.choice([1, 8, 64, 512, 4096, 32768], n),
                         "hidden": rng.choice([1024, 4096, 8192], n),
                         "device": np.where(np.arange(n) % 3 == 0, "V100-PCIE-32GB", "A100-SXM4-80GB")})
    eager = (rows["device"] == "A100-SXM4-80GB").to_numpy()
    rows["framework"] = np.where(eager, "pytorch", "cupti")
    kernel = roofline(rows, catalog)["time_us"].to_numpy() / 0.7
    rows["time_us"] = kernel + 18.0 * eager
    corr = PointwiseXGB(XGBParams(n_estimators=150, max_depth=5))
    assert not corr.uses_dispatch
    model = HybridPredictor(catalog, corrections=[corr]).fit(rows).calibrate_intervals(rows, seed=0)
    learned = model.corrections[0].learned_dispatch
    assert 15.0 < learned["A100-SXM4-80GB"] < 21.0 and learned["V100-PCIE-32GB"] == 0.0
    assert learned["*"] == learned["A100-SXM4-80GB"]  # two rows in three were eager
    query = rows.drop(columns=["time_us", "framework"])
    out = model.predict(query, host=True)
    assert (out["host_us"] == 0).all()  # no fitted constant: the learned part is apart, taken off where asked
    np.testing.assert_allclose(KernelTimeModel(model).predict(query)["time_us"], out["time_us"])
    k = KernelTimeModel(model, learned_dispatch=True).predict(query)
    assert "learned_host_us" not in k.columns
    small = roofline(query, catalog)["time_us"].to_numpy() < 5.0
    # on the eager GPU the floor goes: the kernel, to the trees' error, and never under the roofline (the dispatch
    # estimate absorbs the tiny kernels' excess over it, as the GEMM one does); on the kernel-timed GPU nothing moves
    roof = out["roofline_us"].to_numpy()
    assert (out.loc[eager & small, "time_us"].to_numpy() > kernel[eager & small] + 17.0).all()
    kt = k["time_us"].to_numpy()
    assert (kt >= roof * (1 - 1e-9)).all() and (kt[eager & small] < kernel[eager & small] + 1.5).all()
    # the interval moves with it, its low end never under the kernel's floor (on GPUs, the roofline)
    low, high = k["time_us_low"].to_numpy(), k["time_us_high"].to_numpy()
    assert np.isfinite(low).all() and np.isfinite(high).all()
    assert (low >= np.minimum(roof, kt) * (1 - 1e-9)).all()
    assert (low <= kt * (1 + 1e-9)).all() and (high >= kt * (1 - 1e-9)).all()
    np.testing.assert_allclose(k.loc[~eager, "time_us"], out.loc[~eager, "time_us"])
    unseen = query.iloc[:5].assign(device="H100-SXM")
    assert (model.predict(unseen, host=True)["learned_host_us"].to_numpy() > 0).all()
    model.save(tmp_path / "m")
    again = HybridPredictor.load(tmp_path / "m", catalog=catalog)
    assert again.corrections[0].learned_dispatch == learned
    np.testing.assert_allclose(KernelTimeModel(again, learned_dispatch=True).predict(query)["time_us"], k["time_us"])
    # the LLM builders ask for it: a decode step's norms on the eager GPU cost their kernels, not the floor
    from hybrid.workloads.llm.inference import cost_ops
    ops = query.iloc[:40].assign(device="A100-SXM4-80GB")
    costed = cost_ops(ops, model, catalog)["time_us"].to_numpy()
    np.testing.assert_allclose(costed, KernelTimeModel(model, learned_dispatch=True).predict(ops)["time_us"])
    # and so does the engine (DLRM, traces): its host stream carries each op's launch and dispatch, so the GPU stream
    # holds the kernel alone; before 2026-12-07 it kept the learned floor, 18 us of every small eager op twice
    from hybrid.engine import Overheads, TaskGraph, simulate

    g = TaskGraph(1)
    small_rows = query[eager & small].iloc[:6]
    for i, row in enumerate(small_rows.to_dict("records")):
        g.kernel(0, f"norm{i}", row)
    r = simulate(g, model, Overheads.zero())
    want = KernelTimeModel(model, learned_dispatch=True).predict(small_rows)["time_us"].sum()
    assert r.iteration_us == pytest.approx(want, rel=1e-9)
    assert r.iteration_us < out.loc[small_rows.index, "time_us"].sum() - 6 * 15.0
    # with the engine's default host constants, one launch costs the host the dispatch the fit measured on that GPU
    # (not the generic 15 us): six back-to-back tiny kernels are host-bound at six of them plus the last kernel
    from hybrid.engine.overheads import DEFAULT_KERNEL_LAUNCH_US, measured_dispatch_us

    assert measured_dispatch_us(model, ["A100-SXM4-80GB"]) == pytest.approx(learned["A100-SXM4-80GB"])
    assert measured_dispatch_us(model, ["A100-SXM4-80GB", "V100-PCIE-32GB"]) is None  # one device only
    cpu = str(load_bundle(ROOT / "datasets" / "cpu-amd-epyc-1c")[0]["device"].iloc[0])
    assert catalog.devices[cpu].kind == "cpu"
    assert measured_dispatch_us(model, [cpu]) is None  # not the unseen GPUs' "*": a CPU's times carry none
    r = simulate(g, model)
    last = KernelTimeModel(model, learned_dispatch=True).predict(small_rows)["time_us"].iloc[-1]
    assert r.iteration_us == pytest.approx(6 * learned["A100-SXM4-80GB"] + last, rel=1e-9)
    assert learned["A100-SXM4-80GB"] > DEFAULT_KERNEL_LAUNCH_US + 10.0
    # and the sharding search's estimate prices the launches as that simulation does
    from hybrid.sharding.search import estimate_costs
    from hybrid.workloads.dlrm import DLRMConfig
    from hybrid.workloads.dlrm_graph import resolve_target

    target = resolve_target("A100-SXM4-80GB", catalog)
    config = DLRMConfig.from_dict({"system": "A100-SXM4-80GB", "gpus": 2, "batch_size_per_gpu": 256, "num_tables": 4,
                                   "table_generator": {"seed": 0, "rows": [1000, 10000], "pooling": [1, 4]}})
    est = estimate_costs(config, model, target, target.device.mem_capacity).overheads
    assert est.kernel_launch_us + est.framework_us == pytest.approx(learned["A100-SXM4-80GB"])


def test_kernel_rows_joined_to_an_eager_profile_keep_their_kernel_time():
    """Real data: the H100 profile's eager pointwise rows (CUDA events around one op: dispatch + kernel) joined by
    the kernel rows of the H100's own traced steps (``hybrid trace kernels``: CUPTI kernel durations, no dispatch),
    as ``hybrid trace predict --bundle`` with kernel rows and ``experiments/trace_gpu --cross-traces`` fit them.
    The pointwise trees cannot tell the two timings apart, and the kernel time the engine costs is the prediction
    less the H100's learned dispatch (~20 us) whatever the row; so a kernel row is learned lifted by that dispatch
    (``DispatchXGB.label_lift_us``) and the kernel time of the traced ops is their CUPTI time again. Before, the
    trees learned the kernel rows as measured and the dispatch came off them a second time: the traced ops of the
    8 steps (weighted by how often each runs) summed to 0.93x their measured kernel time, ops of 20 us or more
    20% geomean off (now 1.00x and 11%). Eager rows learn what they did."""
    from hybrid.corrections import PointwiseXGB
    from hybrid.workloads.trace_kernels import step_kernel_rows

    table, cat = load_bundle(ROOT / "datasets" / "H100-SXM")
    kernels = step_kernel_rows([ROOT / "datasets" / "traces-h100"], cat)
    families = ("elementwise", "norm", "softmax", "attention")
    table = table[roofline(table, cat)["family"].isin(families).to_numpy()].reset_index(drop=True)
    kernels = kernels[roofline(kernels, cat)["family"].isin(families).to_numpy()].reset_index(drop=True)
    assert len(table) > 1000 and len(kernels) > 300 and (kernels["framework"] == "cupti").all()
    both = pd.concat([table, kernels], ignore_index=True, sort=False)
    corr = PointwiseXGB(XGBParams(n_estimators=150, max_depth=6))
    model = HybridPredictor(cat, corrections=[corr]).fit(both)
    dispatch = corr.learned_dispatch["H100-SXM"]
    assert 15.0 < dispatch < 25.0 and corr.learned_dispatch["*"] == dispatch  # 1301 eager rows against 313
    # the labels: kernel rows lifted by the H100's dispatch, eager rows as measured
    base = roofline(both, cat)
    lift = corr.label_lift_us(both, base, cat)
    kernel_row = (both["framework"] == "cupti").to_numpy()
    np.testing.assert_allclose(lift[kernel_row], dispatch)
    assert (lift[~kernel_row] == 0).all()
    measured = both["time_us"].to_numpy(dtype=np.float64)
    roof = base["time_us"].to_numpy(dtype=np.float64)
    np.testing.assert_allclose(corr._target(both, base, cat), np.log((measured + lift) / roof), rtol=1e-12)

    query = kernels.drop(columns=["time_us", "framework"])
    kt = KernelTimeModel(model, learned_dispatch=True).predict(query)["time_us"].to_numpy()
    truth = kernels["time_us"].to_numpy(dtype=np.float64)
    runs = kernels["repeats"].to_numpy(dtype=np.float64)
    assert (kt * runs).sum() / (truth * runs).sum() == pytest.approx(1.0, abs=0.03)
    big = truth >= 20.0  # over the dispatch: a kernel the trees price, not a floor less a constant
    assert big.sum() > 150
    assert np.exp(np.mean(np.abs(np.log(kt[big] / truth[big])))) - 1 < 0.15


def test_kernel_rows_do_not_outvote_a_gpu_that_measured_its_dispatch():
    """Real data: the H100 profile's 168 eager softmax rows (75 tiny: their eager time is the ~20 us dispatch floor)
    joined by the 313 pointwise kernel rows of the H100's traces, as a profile's ``kernel_times.csv`` (the same
    configurations again) or a few traced steps may outnumber an eager family. Before, the GPU counted as
    kernel-timed (most rows kernel-only) and no dispatch was learned at all: the trees kept the eager floor at the
    softmax shapes and the engine's kernel time kept it too (the tiny softmax ops 26 us median, now 4.9; roofline 4.2).
    A GPU that measured its own floor is eager whatever joins it; its kernel rows are lifted by that floor, so
    the floor comes off the eager rows' kernel time and the kernel rows keep theirs."""
    from hybrid.corrections import PointwiseXGB
    from hybrid.workloads.trace_kernels import step_kernel_rows

    table, cat = load_bundle(ROOT / "datasets" / "H100-SXM")
    kernels = step_kernel_rows([ROOT / "datasets" / "traces-h100"], cat)
    families = ("elementwise", "norm", "softmax", "attention")
    soft = table[(table["op"] == "softmax").to_numpy()].reset_index(drop=True)
    kernels = kernels[roofline(kernels, cat)["family"].isin(families).to_numpy()].reset_index(drop=True)
    assert len(kernels) > len(soft) > 150
    corr = PointwiseXGB(XGBParams(n_estimators=150, max_depth=6))
    model = HybridPredictor(cat, corrections=[corr]).fit(pd.concat([soft, kernels], ignore_index=True, sort=False))
    dispatch = corr.learned_dispatch.get("H100-SXM", 0.0)
    assert 15.0 < dispatch < 25.0
    assert corr.learned_dispatch["*"] == dispatch  # every row learned with it: the eager ones and the lifted ones
    roof = roofline(soft, cat)["time_us"].to_numpy()
    tiny = roof < 5.0
    assert tiny.sum() >= 50
    kt = KernelTimeModel(model, learned_dispatch=True).predict(soft.drop(columns="time_us"))["time_us"].to_numpy()
    eager = soft["time_us"].to_numpy(dtype=np.float64)
    assert np.median(eager[tiny] - kt[tiny]) > 15.0  # the floor is off the tiny eager ops' kernel time
    query = kernels.drop(columns=["time_us", "framework"])
    kk = KernelTimeModel(model, learned_dispatch=True).predict(query)["time_us"].to_numpy()
    truth, runs = kernels["time_us"].to_numpy(dtype=np.float64), kernels["repeats"].to_numpy(dtype=np.float64)
    assert (kk * runs).sum() / (truth * runs).sum() == pytest.approx(1.0, abs=0.05)


@pytest.fixture(scope="module")
def h100_gemm_predictor():
    table, cat = load_bundle(ROOT / "datasets" / "H100-SXM")
    gemms = table[table["op"].isin(["gemm", "gemv", "bmm", "linear"])]
    return HybridPredictor(cat, corrections=[GemmXGB(XGBParams(n_estimators=120, max_depth=5))]).fit(gemms)


def test_trace_engine_costs_gpu_kernels_without_the_fitted_dispatch(h100_gemm_predictor):
    """On a GPU-bound H100 trace (GPT-2 fp32), costing with kernel times takes the fitted dispatch off every GEMM
    node (the host stream already launches each one): the GEMM total drops by about n x dispatch, the
    roofline-only model is unchanged, and the default for a GPU target is kernel times."""
    model = h100_gemm_predictor
    dispatch = model.corrections[0].dispatch_us
    assert 5.0 < dispatch < 40.0  # the bundle's eager floor on that VM was 12-14 us per op
    traces = load_traces(trace_files([ROOT / "datasets" / "traces-h100" / "gpt2-fp32"]))
    it = build_trace_graph(traces, "H100-SXM", model.catalog, host="model")
    fitted = predict_trace(it, model, kernel_times=False)
    kernel = predict_trace(it, model, kernel_times=True)
    default = predict_trace(it, model)
    assert default.predicted_us == kernel.predicted_us

    def gemm_total(p) -> tuple[float, int]:
        bd = p.breakdown().set_index("label")
        return float(bd.loc["gemm", "predicted_us"]), int(bd.loc["gemm", "nodes"])

    (g_fit, n_gemm), (g_kernel, _) = gemm_total(fitted), gemm_total(kernel)
    assert n_gemm > 50
    assert 0.7 * n_gemm * dispatch <= g_fit - g_kernel <= n_gemm * dispatch * (1 + 1e-9)
    assert kernel.predicted_us < fitted.predicted_us
    roof = RooflineCostModel(model.catalog)
    assert predict_trace(it, roof, kernel_times=True).predicted_us == predict_trace(it, roof,
                                                                                    kernel_times=False).predicted_us


def test_cli_trace_predict_kernel_times_flag(tmp_path, capsys):
    """`hybrid trace predict --kernel-times` (default) and `--as-fitted` on a one-GEMM H100 snippet with the
    H100 profile: the kernel-time step is shorter by at most the fitted dispatch, and the JSON says which."""
    import json

    from hybrid.cli.main import main as cli_main

    snippet = str(ROOT / "tests" / "data" / "traces-h100-snippets" / "autocast-linear")
    args = ["trace", "predict", snippet, "--device", "H100-SXM", "--bundle", str(ROOT / "datasets" / "H100-SXM"),
            "--host", "model", "--json"]
    assert cli_main(args) == 0
    kernel = json.loads(capsys.readouterr().out)
    assert cli_main([*args, "--as-fitted"]) == 0
    fitted = json.loads(capsys.readouterr().out)
    assert kernel["kernel_times"] is True and fitted["kernel_times"] is False
    gap_us = (fitted["predicted_ms"] - kernel["predicted_ms"]) * 1e3
    assert 0.0 < gap_us < 40.0  # one GEMM's dispatch (the casts are pointwise: no dispatch constant)


def test_llm_inference_ops_cost_kernel_times(h100_gemm_predictor):
    """Serving runtimes enqueue kernels asynchronously: an LLM decode pass costed with a model calibrated on eager
    H100 timings pays no fitted per-op dispatch on its GEMMs (the kernel time, never below the roofline), unless
    asked for the eager semantics."""
    from hybrid.workloads.llm.inference import cost_ops, make_setup, pass_ops

    model = h100_gemm_predictor
    dispatch = model.corrections[0].dispatch_us
    s = make_setup("llama2-7b", "H100-SXM", dtype="bf16", catalog=model.catalog)
    one = np.array([1.0])
    ops = pass_ops(s, np.array([8.0]), np.array([8.0]), one, np.array([512.0]))  # decode step, batch 8
    kernel = cost_ops(ops, model, model.catalog)
    eager = cost_ops(ops, model, model.catalog, kernel_times=False)
    gemm = (kernel["op"].astype(str).isin(["gemm", "gemv", "linear", "bmm"])).to_numpy()
    assert gemm.sum() >= 4
    gap = (eager["time_us"] - kernel["time_us"]).to_numpy()
    assert (gap[gemm] > 0).all() and (gap[gemm] <= dispatch * (1 + 1e-9)).all()
    assert (kernel["time_us"].to_numpy() >= np.minimum(kernel["roofline_us"], eager["time_us"]).to_numpy() - 1e-9).all()
    np.testing.assert_allclose(gap[~gemm], 0.0, atol=1e-9)  # the GEMM model carries the dispatch here


def test_llm_training_costs_kernel_times_unless_eager(h100_gemm_predictor):
    """A Megatron-style iteration costed with a model calibrated on eager H100 timings: kernel times by default
    (the fitted per-op dispatch taken off every GEMM), eager per-op costs with ``kernel_times=False``; the
    roofline-only model is the same either way."""
    from hybrid.engine.costs import RooflineCostModel
    from hybrid.workloads.llm.config import TrainingConfig
    from hybrid.workloads.llm.model import load_model
    from hybrid.workloads.llm.train import predict_training

    model = h100_gemm_predictor
    gpt = load_model("gpt3-1.3b")
    cfg = TrainingConfig(gpus=8, global_batch=16, micro_batch=2, dtype="bf16")
    kernel = predict_training(gpt, cfg, "DGX-H100", model, engine=False)
    eager = predict_training(gpt, cfg.with_(kernel_times=False), "DGX-H100", model, engine=False)
    assert kernel.iteration_s < eager.iteration_s
    roof = RooflineCostModel(model.catalog)
    a = predict_training(gpt, cfg, "DGX-H100", roof, engine=False).iteration_s
    b = predict_training(gpt, cfg.with_(kernel_times=False), "DGX-H100", roof, engine=False).iteration_s
    assert a == b
    with pytest.raises(Exception, match="kernel_times"):
        TrainingConfig(gpus=1, global_batch=1, kernel_times="yes")


def test_embedding_kernel_time_takes_off_the_eager_dispatch(tmp_path):
    """The embedding correction is fitted on eager-timed lookups (a GPU profile's ``embedding_bag`` rows: ~20-30
    us of Python, dispatcher and launch in every row), and reported none of it as host time: the engine, which puts
    host work on the host stream, costed the H200's traced token-embedding lookups at 3-10x their CUPTI kernels.
    Now it fits the dispatch per (direction, variant) from its almost-pure-overhead rows and reports it as
    ``host_us`` on GPU rows not timed as kernels; the prediction itself is unchanged, and it survives save/load."""
    from hybrid.corrections.embedding_xgb import EmbeddingXGB
    from hybrid.workloads.trace_kernels import step_kernel_rows

    table, cat = load_bundle(Path(__file__).resolve().parents[1] / "datasets" / "H200")
    emb = table[table["op"] == "embedding_bag"]
    model = HybridPredictor(catalog=cat, corrections=[EmbeddingXGB()]).fit(emb)
    corr = next(c for c in model.corrections if isinstance(c, EmbeddingXGB))
    assert 15 < corr.group_dispatch_us["fwd|sum"] < 45  # an eager lookup's host time on the H200's host
    assert corr.group_dispatch_us["bwd|sparse_sgd"] > corr.group_dispatch_us["fwd|sum"]  # the autograd call and the update
    rows = step_kernel_rows([Path(__file__).resolve().parents[1] / "datasets" / "traces-h200"], cat)
    rows = rows[rows["op"] == "embedding_bag"]
    traced = rows["time_us"].to_numpy()
    engine = rows.drop(columns=["framework"])  # as the engine's op rows: no kernel-timed framework
    eager = model.predict(engine)["time_us"].to_numpy()
    kernel = KernelTimeModel(model, learned_dispatch=True).predict(engine)["time_us"].to_numpy()
    assert (kernel < eager).all()
    assert np.exp(np.mean(np.abs(np.log(kernel / traced)))) < 2.5 < np.exp(np.mean(np.abs(np.log(eager / traced))))
    # kernel-timed rows (CUPTI) report no dispatch
    assert (model.predict(rows, host=True)["host_us"] == 0).all()
    corr.save(tmp_path / "emb")
    assert EmbeddingXGB.load(tmp_path / "emb").group_dispatch_us == corr.group_dispatch_us
