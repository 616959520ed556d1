"""Trace engine semantics: GPU streams and NCCL, host launch time, asynchronous gloo collectives, threads.

Every trace goes through the real parser (``load_traces``): hand-written Chrome traces in Kineto's layout, and a
step recorded here whose backward is moved to a second thread (as CUDA's autograd thread runs it).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid.data.traces import load_trace, load_traces
from hybrid.engine.costs import RooflineCostModel
from hybrid.workloads.trace_deps import _cross_thread_deps, rank_schedule
from hybrid.workloads.trace_graph import WAIT_LABEL, build_trace_graph, predict_trace, trace_units

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cpu_catalog():
    from hybrid.data.bundle import load_bundle

    return load_bundle(ROOT / "datasets" / "cpu-amd-epyc-1c")[1]


class FixedCosts:
    """A cost model with one time per op family (us): what the tests below reason with."""

    def __init__(self, **us: float) -> None:
        self.us = us

    def predict(self, table: pd.DataFrame) -> pd.DataFrame:
        fam = np.where(table["op"].isin(["all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all",
                                         "send_recv", "reduce"]), "collective", table["op"].astype(str))
        t = np.array([self.us.get(f, 1.0) for f in fam], dtype=np.float64)
        return pd.DataFrame({"time_us": t, "method": "fixed"}, index=table.index)


def _x(name, ts, dur, tid=1, cat="cpu_op", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _k(name, ts, dur, stream, ext):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"External id": ext, "stream": stream, "device": 0}}


MM = {"Input Dims": [[1024, 1024], [1024, 1024]], "Input type": ["float", "float"]}


def _write(path: Path, events: list, rank: int = 0, world: int = 1, gpu: str | None = None) -> Path:
    doc = {"schemaVersion": 1, "record_shapes": 1, "traceEvents": events}
    if gpu:
        doc["deviceProperties"] = [{"id": 0, "name": gpu}]
    if world > 1:
        doc["distributedInfo"] = {"rank": rank, "world_size": world,
                                  "pg_config": [{"pg_name": "0", "ranks": list(range(world))}]}
    path.write_text(json.dumps(doc))
    return path


# ------------------------------------------------------------------------------------ GPU: NCCL on a side stream
def _nccl_rank(path: Path, rank: int) -> Path:
    """A DDP-like CUDA step: a GEMM on stream 7, a long GEMM on side stream 20, then an all-reduce whose NCCL
    kernel (stream 30) starts only after the side-stream kernel ended, then a host sync."""
    ev = [
        _x("ProfilerStep#0", 0, 2000, cat="user_annotation"),
        _x("aten::mm", 10, 20, **{"External id": 1, "Record function id": 1, **MM}),
        _k("gemm_main", 30, 100, 7, 1),
        _x("aten::mm", 40, 20, **{"External id": 2, "Record function id": 2, **MM}),
        _k("gemm_side", 60, 900, 20, 2),
        _x("c10d::allreduce_", 70, 30, **{"External id": 3, "Record function id": 3,
                                          "Input Dims": [[[1024]], [], [], [], [], []],
                                          "Input type": ["GenericList[Tensor(float)]", "", "", "", "Int", "Int"]}),
        _x("record_param_comms", 75, 10, **{"External id": 4, "Process Group Name": "0", "Group size": 2,
                                            "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float"}),
        _k("ncclKernel_AllReduce", 960, 200, 30, 3),
        _x("aten::item", 110, 1060, **{"External id": 5, "Record function id": 5, "Input Dims": [[]],
                                       "Input type": ["float"]}),
    ]
    return _write(path, ev, rank, 2, "NVIDIA A100-SXM4-80GB")


def test_nccl_collective_waits_for_every_kernel_stream(tmp_path):
    traces = load_traces([_nccl_rank(tmp_path / f"r{r}.json", r) for r in range(2)])
    u = trace_units(traces[0])
    assert sorted(u.loc[u["label"] == "gemm", "kstream"]) == ["20", "7"]
    it = build_trace_graph(traces, "A100-SXM4-80GB", host="trace")
    assert it.same_device
    g = it.graph.compile()
    pred = predict_trace(it, RooflineCostModel())
    names = np.array(g.names)
    side = np.flatnonzero(names == "aten::mm")
    coll = np.flatnonzero((names == "c10d::allreduce_") & (g.rank == 0))[0]
    side_kernel = side[np.argmax(pred.measured.finish[side])]
    # the comm stream waits for the side stream's kernel (NCCL syncs with the caller's stream, joined with the side)
    assert pred.measured.start[coll] >= pred.measured.finish[side_kernel] - 1e-6
    assert pred.predicted.start[coll] >= pred.predicted.finish[side_kernel] - 1e-6
    # traced times reproduce the traced step: 60 us of host before the side kernel, 900 us of it, the all-reduce's
    # 200 us, item's sync, then the host's rest of the step (2000 - 1170 us)
    assert pred.measured.finish[coll] == pytest.approx(60 + 900 + 200)
    assert pred.measured.iteration_us == pytest.approx(1160 + (2000 - 1170), abs=1e-6)
    assert pred.measured.iteration_us == pytest.approx(traces[0].step_us, rel=0.01)


def test_gpu_launch_nodes_carry_traced_host_time(tmp_path):
    """Host-bound GPU step: 50 tiny kernels launched by 40 us ops; the launches, not the kernels, set the step."""
    ev = [_x("ProfilerStep#0", 0, 2100, cat="user_annotation")]
    for i in range(50):
        ev.append(_x("aten::add", 10 + 40 * i, 40, **{"External id": 100 + i, "Record function id": 100 + i,
                                                     "Input Dims": [[256], [256], []],
                                                     "Input type": ["float", "float", "Scalar"]}))
        ev.append(_k("add_kernel", 45 + 40 * i, 2, 7, 100 + i))
    tr = load_traces([_write(tmp_path / "t.json", ev, gpu="NVIDIA A100-SXM4-80GB")])
    it = build_trace_graph(tr, "A100-SXM4-80GB", host="trace")
    pred = predict_trace(it, RooflineCostModel())
    bd = pred.breakdown().set_index("label")
    assert bd.loc["launch", "measured_us"] == pytest.approx(50 * 40)
    assert bd.loc["launch", "predicted_us"] == pytest.approx(50 * 40)  # traced host kept on the traced GPU
    assert pred.measured.iteration_us == pytest.approx(2100, rel=0.01)
    assert pred.predicted_us == pytest.approx(2100, rel=0.01)
    # predicted for a GPU with the host time dropped: the engine's launch overhead per kernel instead
    model = build_trace_graph(tr, "H100-SXM", host="model")
    assert predict_trace(model, RooflineCostModel()).breakdown().set_index("label").loc["launch", "predicted_us"] \
        < 50 * 40


def test_the_host_model_counts_each_recorded_op_once_where_it_runs(tmp_path):
    """host="model": a unit's host node is charged its own recorded ops and launches, plus the ops recorded between
    it and the unit before (an autograd node around it, a composite op whose children are the units); ops after
    the last unit go to a trailing host node. 3 ops x 5.7 us + launches at 5 us, every count exactly once."""
    add = {"Input Dims": [[256], [256], []], "Input type": ["float", "float", "Scalar"]}
    ev = [_x("ProfilerStep#0", 0, 3000, cat="user_annotation"),
          # an autograd node (not an op any family maps) holding a costed add and its kernel
          _x("autograd::engine::evaluate_function: AddBackward0", 10, 200),
          _x("aten::add", 20, 100, **{"External id": 1, "Record function id": 1, **add}),
          _x("aten::empty", 30, 10, **{"External id": 2, "Input Dims": [[]], "Input type": [""]}),
          _k("add_kernel", 200, 2, 7, 1),
          _x("aten::view", 300, 20, **{"External id": 3, "Input Dims": [[256], [1]], "Input type": ["float", ""]}),
          _x("aten::add", 400, 100, **{"External id": 4, "Record function id": 4, **add}),
          _k("add_kernel", 600, 2, 7, 4),
          _k("add_kernel", 610, 2, 7, 4),
          _x("Optimizer.zero_grad#SGD.zero_grad", 900, 50, cat="user_annotation")]
    tr = load_traces([_write(tmp_path / "t.json", ev, gpu="NVIDIA A100-SXM4-80GB")])
    assert len(tr[0].ops) == 7  # the step annotation, the autograd node, 2 adds, empty, view, zero_grad
    it = build_trace_graph(tr, "H100-SXM", host="model")
    g = it.graph.compile()
    charged = [(n, h, la) for n, h, la in zip(g.names, g.host_ops, g.launches, strict=False) if h or la]
    # first add: itself + its aten::empty, and the step annotation + autograd node recorded before it; the view;
    # the second add with its 2 kernels; zero_grad after the last unit
    assert charged == [("launch aten::add", 4.0, 1.0), ("aten::view", 1.0, 0.0), ("launch aten::add", 1.0, 2.0),
                       ("host gap", 1.0, 0.0)]
    r = predict_trace(it, FixedCosts(elementwise=1.0))
    # host-bound: (7 x 5.7 + 3 x 5) us of host, then the last kernel
    assert r.predicted_us == pytest.approx(7 * 5.7 + 3 * 5.0 + 1.0, rel=0.02)
    # the traced host kept instead (A100, the traced GPU): none of the counts
    kept = build_trace_graph(tr, "A100-SXM4-80GB", host="trace").graph.compile()
    assert kept.host_ops is None


# ------------------------------------------------------------------------------- CPU: gloo's thread does the work
def _gloo_rank(path: Path, rank: int, work_us: float = 3000.0) -> Path:
    """A DDP-like CPU step: backward GEMM, an all-reduce whose call only enqueues (gloo's thread works for
    ``work_us``), more backward, the thread waits in a gap until the work ends, then the optimizer."""
    end = 1300 + work_us
    ev = [
        _x("ProfilerStep#0", 0, end + 1300, cat="user_annotation"),
        _x("aten::mm", 100, 1000, **MM),
        _x("c10d::allreduce_", 1200, 50, **{"Input Dims": [[[1024]], [], [], [], [], []],
                                            "Input type": ["GenericList[Tensor(float)]", "", "", "", "Int", "Int"]}),
        _x("gloo:all_reduce", 1300, work_us, tid=2),
        _x("aten::mm", 1300, 1000, **MM),
        _x("Optimizer.step#AdamW.step", end + 100, 1100, cat="user_annotation"),
        _x("aten::add_", end + 150, 1000, **{"Input Dims": [[1024, 1024], [1024, 1024], []],
                                             "Input type": ["float", "float", "Scalar"]}),
    ]
    return _write(path, ev, rank, 2)


def test_gloo_collective_runs_beside_the_caller_and_is_waited_for_where_the_trace_waits(tmp_path, cpu_catalog):
    traces = load_traces([_gloo_rank(tmp_path / f"r{r}.json", r) for r in range(2)])
    s = rank_schedule(traces[0], trace_units(traces[0]))
    coll = s.index[s["kind"] == "collective"][0]
    assert bool(s.at[coll, "async_comm"]) and s.at[coll, "backend_end"] == pytest.approx(4300)
    waiter = s.index[[coll in w for w in s["waits_for"]]]
    assert list(s.loc[waiter, "name"]) == ["aten::add_"]  # the optimizer, after the gap in which it waited
    it = build_trace_graph(traces, "cpu-amd-epyc-1c-gloo", cpu_catalog, same_device=True)
    g = it.graph.compile()
    member = it.units.loc[(it.units["kind"] == "collective") & (it.units["rank"] == 0), "node"].iloc[0]
    assert g.stream_names[g.stream[member]] == (0, "comm")
    pred = predict_trace(it, FixedCosts(gemm=1000.0, elementwise=1000.0, collective=3000.0))
    # re-simulation at traced times reproduces the step; the traced wait is a wait node, not host work
    assert pred.measured.iteration_us == pytest.approx(traces[0].step_us, rel=0.01)
    bd = pred.breakdown().set_index("label")
    assert WAIT_LABEL not in bd.index or bd.loc[WAIT_LABEL, "predicted_us"] == 0
    # a short all-reduce hides behind the second GEMM: the step is the host work alone
    short = predict_trace(it, FixedCosts(gemm=1000.0, elementwise=1000.0, collective=500.0)).predicted_us
    host = 100 + 1000 + 100 + 50 + 50 + 1000 + 100 + 50 + 1000 + 150  # gaps, mm, enqueue, mm, add_, trailing gaps
    assert short == pytest.approx(host, rel=0.02)
    # a long one delays the optimizer (not the second GEMM), by what it outlasts the GEMM
    long = predict_trace(it, FixedCosts(gemm=1000.0, elementwise=1000.0, collective=5000.0)).predicted_us
    assert long == pytest.approx(1200 + 5000 + 50 + 1000 + 150, rel=0.02)
    assert long - short == pytest.approx(5000 - (50 + 1000 + 100) - 50 - 50, rel=0.05)


def test_a_blocking_gloo_call_blocks_its_thread(tmp_path, cpu_catalog):
    """A call that lasts as long as its work (the caller waited inside it) stays on the caller's stream."""
    ev = [
        _x("ProfilerStep#0", 0, 3000, cat="user_annotation"),
        _x("c10d::broadcast_", 100, 2000, **{"Input Dims": [[[1024]], [], [], [], []],
                                             "Input type": ["GenericList[Tensor(float)]", "", "", "", ""]}),
        _x("gloo:broadcast", 150, 1940, tid=2),
        _x("aten::mm", 2200, 700, **MM),
    ]
    traces = load_traces([_write(tmp_path / f"r{r}.json", ev, r, 2) for r in range(2)])
    it = build_trace_graph(traces, "cpu-amd-epyc-1c-gloo", cpu_catalog, same_device=True)
    assert not it.units.loc[it.units["kind"] == "collective", "async_comm"].any()
    g = it.graph.compile()
    member = it.units.loc[(it.units["kind"] == "collective") & (it.units["rank"] == 0), "node"].iloc[0]
    assert g.stream_names[g.stream[member]] == (0, "host")
    pred = predict_trace(it, FixedCosts(gemm=700.0, collective=4000.0))
    assert pred.predicted_us == pytest.approx(100 + 4000 + 100 + 700 + 100, rel=0.01)


# ------------------------------------------------------------------------------------------- threads of a rank
def test_cross_thread_deps_match_a_brute_force_reading():
    rng = np.random.default_rng(3)
    n = 400
    tid = rng.choice(np.array(["a", "b", "c"], dtype=object), n)
    # per thread: back-to-back non-overlapping units with random gaps
    ts, end = np.zeros(n), np.zeros(n)
    for t in ("a", "b", "c"):
        rows = np.flatnonzero(tid == t)
        d = rng.uniform(1, 20, len(rows))
        gaps = rng.uniform(0, 30, len(rows))
        ts[rows] = np.cumsum(gaps + d) - d
        end[rows] = ts[rows] + d
    order = np.lexsort((tid.astype(str), ts))
    tid, ts, end = tid[order], ts[order], end[order]
    got = _cross_thread_deps(tid, ts, end)
    prev: dict[tuple[str, str], int] = {}
    for i in range(n):
        want = []
        for s in ("a", "b", "c"):
            if s == tid[i]:
                continue
            done = [j for j in range(n) if tid[j] == s and end[j] <= ts[i] + 1e-3]
            d = done[-1] if done else -1
            if d >= 0 and prev.get((tid[i], s)) != d:
                want.append(d)
            prev[(tid[i], s)] = d
        assert sorted(got[i]) == sorted(want), i


def _tiny_step():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64),
                                torch.nn.LayerNorm(64))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64)

    def step() -> None:
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    return step


def _backward_to_second_thread(src: Path, dst: Path) -> int:
    """Move every op inside a top-level autograd node of a recorded CPU trace to another thread id (as the autograd
    device thread of a CUDA job runs them): the speed benchmark's own transform, loaded from its script."""
    path = Path(__file__).resolve().parents[1] / "experiments" / "trace_engine_speed" / "run.py"
    spec = importlib.util.spec_from_file_location("trace_engine_speed_run", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.backward_to_second_thread(src, dst)


def test_backward_on_another_thread_predicts_like_one_thread(tmp_path, cpu_catalog):
    torch = pytest.importorskip("torch")
    from hybrid.data.traces.record import record_step

    torch.set_num_threads(1)
    paths = record_step(_tiny_step(), tmp_path, warmup=1, execution_trace=False)
    two = tmp_path / "two_threads.json"
    assert _backward_to_second_thread(Path(paths["kineto"]), two) > 10
    one_t, two_t = load_trace(paths["kineto"]), load_trace(two)
    assert two_t.ops["tid"].nunique() == 2
    cpu = "cpu-amd-epyc-1c"
    roof = RooflineCostModel(cpu_catalog)
    a = predict_trace(build_trace_graph([one_t], cpu, cpu_catalog, same_device=True), roof)
    b = predict_trace(build_trace_graph([two_t], cpu, cpu_catalog, same_device=True), roof)
    # both re-simulate the traced step; the main thread's idle time during backward is waiting, not host work
    assert a.measured.iteration_us == pytest.approx(one_t.step_us, rel=0.01)
    assert b.measured.iteration_us == pytest.approx(two_t.step_us, rel=0.02)
    assert b.predicted_us == pytest.approx(a.predicted_us, rel=0.02)
