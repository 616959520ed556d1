"""Critical-path engine on hand-built graphs with known answers, and the Chrome trace export."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hybrid.engine import Overheads, TaskGraph, simulate, simulate_durations, write_chrome_trace
from hybrid.engine.costs import RooflineCostModel
from hybrid.errors import InvalidInputError, SchemaError

NO = Overheads.zero()


def test_serial_chain_is_the_sum():
    g = TaskGraph(1)
    for d in (3.0, 5.0, 7.5):
        g.add(0, "compute", f"k{d}", duration_us=d)
    r = simulate(g, overheads=NO)
    assert r.iteration_us == pytest.approx(15.5)
    assert r.breakdown.loc[0, "compute_us"] == pytest.approx(15.5)
    assert r.breakdown.loc[0, "idle_us"] == pytest.approx(0.0)


def test_two_independent_streams_overlap_to_the_max():
    g = TaskGraph(1)
    g.add(0, "compute", "a", duration_us=10.0)
    g.add(0, "compute", "b", duration_us=10.0)
    g.add(0, "comm", "c", duration_us=12.0, kind="comm")
    r = simulate(g, overheads=NO)
    assert r.iteration_us == pytest.approx(20.0)
    row = r.breakdown.loc[0]
    assert row["comm_us"] == pytest.approx(12.0)
    assert row["exposed_comm_us"] == pytest.approx(0.0)
    assert row["overlapped_comm_us"] == pytest.approx(12.0)


def test_dependency_across_streams_serialises_and_exposes_comm():
    g = TaskGraph(1)
    a = g.add(0, "compute", "a", duration_us=10.0)
    c = g.add(0, "comm", "c", duration_us=6.0, kind="comm", deps=[a])
    g.add(0, "compute", "b", duration_us=4.0, deps=[c])
    r = simulate(g, overheads=NO)
    assert r.iteration_us == pytest.approx(20.0)
    assert r.breakdown.loc[0, "exposed_comm_us"] == pytest.approx(6.0)
    assert [r.graph.names[i] for i in r.critical_path()] == ["a", "c", "b"]


def test_collective_waits_for_its_slowest_participant():
    g = TaskGraph(3)
    prev = {r: g.add(r, "compute", "work", duration_us=10.0 * (r + 1)) for r in range(3)}
    coll = g.collective("sync", [0, 1, 2], duration_us=2.0, deps={r: [prev[r]] for r in range(3)}, launch=False)
    for r in range(3):
        g.add(r, "compute", "after", duration_us=1.0, deps=[coll[r]])
    r = simulate(g, overheads=NO)
    starts = r.start[list(coll.values())]
    assert np.allclose(starts, 30.0)  # every member starts when rank 2 (the slowest) arrives
    assert r.iteration_us == pytest.approx(33.0)
    wait = r.breakdown["collective_wait_us"].to_numpy()
    assert wait == pytest.approx([20.0, 10.0, 0.0])


def test_overlapped_iterations_are_timed_by_the_busiest_stream():
    """A program that overlaps consecutive iterations (a software pipeline) runs at the rate of each rank's busiest
    stream, not one iteration's critical path: compute 10 -> exchange 6 -> compute 4 is 20 us alone, 14 us (the
    compute stream) overlapped; with the exchange at 30 us the network bounds it (30 us, not 44)."""
    def graph(comm_us: float, overlap: bool) -> TaskGraph:
        g = TaskGraph(2, overlap_iterations=overlap)
        for r in range(2):
            a = g.add(r, "compute", "a", duration_us=10.0)
            c = g.add(r, "comm", "exchange", duration_us=comm_us * (1 + r), kind="comm", deps=[a])
            g.add(r, "compute", "b", duration_us=4.0, deps=[c])
        return g

    assert simulate(graph(6.0, False), overheads=NO).iteration_us == pytest.approx(26.0)  # rank 1: 10 + 12 + 4
    r = simulate(graph(6.0, True), overheads=NO)
    assert r.iteration_us == pytest.approx(14.0)
    assert r.info["single_iteration_us"] == pytest.approx(26.0)
    assert r.info["bound_by"] in ("rank 0 compute", "rank 1 compute")
    assert r.breakdown["iteration_us"].to_numpy() == pytest.approx([14.0, 14.0])
    r = simulate(graph(15.0, True), overheads=NO)
    assert r.iteration_us == pytest.approx(30.0)
    assert r.info["bound_by"] == "rank 1 network"
    # a second exchange on a stream of its own still uses the rank's one network: 30 + 9 us, not max(30, 9)
    g = graph(15.0, True)
    g.add(1, "side comm", "prefetch", duration_us=9.0, kind="comm")
    assert simulate(g, overheads=NO).iteration_us == pytest.approx(39.0)
    # on a CPU device (the host waits for each kernel) dispatch and compute share the cores: they add up
    cpu = TaskGraph(1, overlap_iterations=True, synchronous_host=True)
    cpu.kernel(0, "k", duration_us=10.0)
    cpu.add(0, "comm", "exchange", duration_us=12.0, kind="comm")
    r = simulate(cpu, overheads=Overheads(kernel_launch_us=5.0, framework_us=0.0))
    assert r.iteration_us == pytest.approx(15.0)  # 5 us launch + 10 us kernel > 12 us network
    assert r.info["bound_by"] == "rank 0 compute"
    # the critical path and the phases describe one iteration's schedule (26 us on rank 1), not the steady state
    g = TaskGraph(2, overlap_iterations=True)
    g.phase = "x"
    for rank in range(2):
        a = g.add(rank, "compute", "a", duration_us=10.0)
        c = g.add(rank, "comm", "exchange", duration_us=6.0 * (1 + rank), kind="comm", deps=[a])
        g.add(rank, "compute", "b", duration_us=4.0, deps=[c])
    r = simulate(g, overheads=NO)
    assert r.schedule_us == pytest.approx(26.0) and r.iteration_us == pytest.approx(14.0)
    assert sum(r.critical_path_summary().values()) == pytest.approx(26.0)
    phases = r.phase_times(steady_state=True)
    assert (phases.to_numpy() >= 0).all() and phases["x"].max() == pytest.approx(26.0)
    row = r.breakdown.loc[0]  # compute + exposed comm + idle = the one-iteration schedule (rank 0 idles 6 us)
    assert row["compute_us"] + row["exposed_comm_us"] + row["idle_us"] == pytest.approx(26.0)
    # a graph compiled from the builder keeps the flag (and the engine's other entry point honours it)
    compiled = graph(15.0, True).compile()
    assert compiled.overlap_iterations
    assert simulate_durations(compiled, np.array([10.0, 15.0, 4.0, 10.0, 30.0, 4.0])).iteration_us == \
        pytest.approx(30.0)


@pytest.mark.parametrize("kwargs, match", [
    ({"ranks": [0, 5]}, "rank 5 out of range"),
    ({"ranks": [0, 1], "deps": {1: [99]}}, "dependency 99 of rank 1"),
    ({"ranks": [0, 1], "ops": [None, "gemm"]}, "op of rank 1 must be a mapping"),
])
def test_refused_collective_leaves_the_graph_unchanged(kwargs, match):
    """A collective refused at its second rank had already added the first rank's launch and member: a caller who
    caught the error simulated a one-member collective (and its launch) it never asked for."""
    g = TaskGraph(2)
    g.add(0, "compute", "a", duration_us=10.0)
    g.add(1, "compute", "b", duration_us=20.0)
    with pytest.raises(InvalidInputError, match=match):
        g.collective("ar", duration_us=50.0, **kwargs)
    assert len(g) == 2
    assert simulate(g, overheads=NO).iteration_us == pytest.approx(20.0)


@pytest.mark.parametrize("kwargs, match", [
    ({"deps": [99]}, "dependency 99"), ({"op": "gemm"}, "op must be a mapping"),
    ({"duration_us": float("nan")}, "duration must be finite"),
])
def test_refused_kernel_leaves_no_launch_behind(kwargs, match):
    """``kernel`` added the CPU launch first: a kernel refused after it left a launch without its kernel on the
    host stream, which the next kernel's launch then queued behind."""
    g = TaskGraph(1)
    with pytest.raises(InvalidInputError, match=match):
        g.kernel(0, "k", **kwargs)
    assert len(g) == 0


def test_collective_members_take_the_longest_estimate(catalog):
    g = TaskGraph(2)
    op = {"op": "all_reduce", "device": "H100-SXM", "system": "DGX-H100", "dtype": "fp32", "n_ranks": 2}
    coll = g.collective("ar", [0, 1], [dict(op, size_bytes=1e6), dict(op, size_bytes=1e8)], launch=False)
    r = simulate(g, RooflineCostModel(catalog), NO)
    d0, d1 = r.durations[coll[0]], r.durations[coll[1]]
    assert d0 == d1 > 0
    # the 100 MB all-reduce on NVLink takes hundreds of microseconds: the big member sets the time
    assert d0 > 100


def test_ops_are_costed_in_one_batch_and_deduplicated(catalog):
    calls = []

    class Counting(RooflineCostModel):
        def predict(self, table):
            calls.append(len(table))
            return super().predict(table)

    g = TaskGraph(4)
    for r in range(4):
        for _ in range(3):
            g.kernel(r, "gemm", {"op": "gemm", "device": "H100-SXM", "dtype": "fp16", "m": 1024, "n": 1024,
                                 "k": 1024})
    r = simulate(g, Counting(catalog), Overheads(kernel_launch_us=2.0, framework_us=0.0))
    assert calls == [1]  # 12 identical kernels -> one row, one call
    assert r.breakdown["kernels"].tolist() == [3, 3, 3, 3]
    # each kernel waits for its 2 us launch; launches run ahead on the host stream
    assert r.breakdown.loc[0, "host_us"] == pytest.approx(6.0)


def test_cpu_bound_when_launches_dominate():
    g = TaskGraph(1)
    for i in range(10):
        g.kernel(0, f"tiny{i}", duration_us=1.0)
    r = simulate(g, overheads=Overheads(kernel_launch_us=5.0, framework_us=5.0))
    assert r.iteration_us == pytest.approx(10 * 10.0 + 1.0)
    assert r.critical_path_summary()["cpu"] == pytest.approx(100.0)


def test_cycle_and_bad_input_are_errors():
    g = TaskGraph(1)
    a = g.add(0, "compute", "a", duration_us=1.0)
    compiled = g.compile()
    compiled.edges_src = np.append(compiled.edges_src, a)
    compiled.edges_dst = np.append(compiled.edges_dst, a)
    compiled.own_dst = np.append(compiled.own_dst, a)
    with pytest.raises(InvalidInputError, match="cycle"):
        simulate_durations(compiled, np.array([1.0]))
    with pytest.raises(InvalidInputError):
        g.add(0, "compute", "neg", duration_us=-1.0)
    with pytest.raises(InvalidInputError):
        g.add(5, "compute", "bad rank", duration_us=1.0)
    with pytest.raises(InvalidInputError, match="empty"):
        TaskGraph(2).compile()


def test_refused_node_leaves_the_graph_as_it_was():
    """A node refused for its kind, overhead, op or a missing dependency left the graph half-appended (its name,
    rank and stream in, the rest not: per-node lists of unequal lengths), and an unknown kind was a bare ValueError
    ("tuple.index(x): x not in tuple"). Each is an InvalidInputError now, the graph still compiles and simulates."""
    g = TaskGraph(1)
    g.add(0, "compute", "a", duration_us=2.0)
    for bad, match in ((dict(kind="gpu"), "kind must be one of compute"),
                       (dict(overhead="launch"), "overhead must be one of none"),
                       (dict(op=[("op", "gemm")]), "op must be a mapping"),
                       (dict(deps=[5]), "dependency 5 does not exist yet")):
        with pytest.raises(InvalidInputError, match=match):
            g.add(0, "compute", "bad", duration_us=1.0, **bad)
    assert len(g) == 1
    g.add(0, "compute", "b", duration_us=3.0)
    res = simulate_durations(g.compile(), np.array([2.0, 3.0]))
    assert res.iteration_us == 5.0
    for n in (1.5, "2", 0, True):
        with pytest.raises(InvalidInputError, match="whole number of ranks"):
            TaskGraph(n)
    assert TaskGraph(np.int64(2)).n_ranks == 2


def test_negative_op_shape_is_refused_not_priced_as_one(catalog):
    """``integral_shapes`` raised every integer column to at least 1, so a GEMM node given m=-1 was priced as a
    1 x 1 x 1 GEMM (4 us on an H100); the predictor's validation refuses it now. Fractional shares still round."""
    from hybrid.engine.costs import integral_shapes

    g = TaskGraph(1)
    g.kernel(0, "mm", {"op": "gemm", "device": "H100", "dtype": "bf16", "m": -1, "n": 64, "k": 64})
    with pytest.raises(SchemaError, match="column .m.: must be positive"):
        simulate(g, overheads=NO)
    import pandas as pd

    shares = integral_shapes(pd.DataFrame({"m": [0.4, 2.6, np.nan, 0.0], "n": [1, 1, 1, 1]}))
    assert shares["m"].tolist()[:2] == [1.0, 3.0] and np.isnan(shares["m"].iloc[2]) and shares["m"].iloc[3] == 1.0


def test_chrome_trace_has_one_track_per_rank_and_stream(tmp_path, catalog):
    g = TaskGraph(2)
    for r in range(2):
        k = g.kernel(r, "gemm", {"op": "gemm", "device": "H100-SXM", "dtype": "bf16", "m": 256, "n": 256, "k": 256})
    g.collective("ar", [0, 1], {"op": "all_reduce", "device": "H100-SXM", "system": "DGX-H100", "dtype": "bf16",
                                "size_bytes": 4e6, "n_ranks": 2}, deps={0: [k], 1: [k - 2]})
    r = simulate(g, RooflineCostModel(catalog))
    path = write_chrome_trace(r, tmp_path / "trace.json")
    data = json.loads(path.read_text())
    events = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert len(events) == r.graph.n_real
    tracks = {(e["pid"], e["tid"]) for e in events}
    assert tracks == {(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)}  # host, compute, comm per rank
    names = {(m["pid"], m["tid"]): m["args"]["name"] for m in data["traceEvents"]
             if m["ph"] == "M" and m["name"] == "thread_name"}
    assert names[(1, 2)] == "comm"
    gemm = next(e for e in events if e["name"] == "gemm")
    assert gemm["args"]["m"] == 256 and gemm["args"]["method"] in ("roofline", "kernel-xgb")
    assert max(e["ts"] + e["dur"] for e in events) == pytest.approx(r.iteration_us, rel=1e-6)
    assert not list(tmp_path.glob(".trace.json*"))  # no temp file left behind


def test_chrome_trace_events_on_one_stream_never_overlap(tmp_path):
    """Back-to-back nodes on one stream stay back to back in the trace: ``ts`` and ``dur`` were rounded apart (4
    decimals each), so an event could end up to 1e-4 us after the next one on its track began (a strict reader, or
    Perfetto at ns resolution, sees an improperly nested slice)."""
    g = TaskGraph(1)
    durations = np.random.default_rng(0).uniform(0.0, 10.0, 200)
    for i, d in enumerate(durations):
        g.add(0, "compute", f"k{i}", duration_us=float(d))
    r = simulate(g, overheads=NO)
    data = json.loads(write_chrome_trace(r, tmp_path / "t.json").read_text())
    events = sorted((e["ts"], e["dur"]) for e in data["traceEvents"] if e["ph"] == "X")
    assert len(events) == len(durations)
    for (ts, dur), (nxt, _) in zip(events, events[1:], strict=False):
        assert dur >= 0 and ts + dur <= nxt
    last_ts, last_dur = events[-1]
    assert last_ts + last_dur == pytest.approx(r.iteration_us, abs=1e-4)


def _launch_bound_runs(model: RooflineCostModel) -> tuple[list, list[float]]:
    """Graphs of 5, 20 and 60 tiny kernels after an iteration overhead, and their iterations simulated with known
    overheads (launch 12 us, iteration 50 us; no collectives or optimizer step: those constants touch no critical
    path)."""
    truth = Overheads(kernel_launch_us=12.0, framework_us=0.0, collective_launch_us=15.0, optimizer_step_us=80.0,
                      iteration_us=50.0)
    graphs, measured = [], []
    for n in (5, 20, 60):
        g = TaskGraph(1)
        g.add(0, "host", "iter", kind="cpu", overhead="iteration")
        for i in range(n):
            g.kernel(0, f"k{i}", {"op": "elementwise", "device": "H100-SXM", "dtype": "fp32", "elements": 1000})
        c = g.compile()
        graphs.append(c)
        measured.append(simulate(c, model, truth).iteration_us)
    return graphs, measured


def test_overheads_fit_recovers_launch_cost(catalog):
    model = RooflineCostModel(catalog)
    graphs, measured = _launch_bound_runs(model)
    fitted = Overheads.fit(graphs, measured, model, start=Overheads(framework_us=0.0))
    assert fitted.kernel_launch_us + fitted.framework_us == pytest.approx(12.0, rel=0.05)
    assert fitted.iteration_us == pytest.approx(50.0, rel=0.2)


def _host_op_graph(ops_per_kernel: float, kernels: int = 20, kernel_us: float = 4.0) -> TaskGraph:
    """A traced-step-like graph: each kernel's launch node stands for ``ops_per_kernel`` host ops and one launch."""
    g = TaskGraph(1)
    for i in range(kernels):
        h = g.add(0, "host", f"launch {i}", kind="cpu", host_ops=ops_per_kernel, launches=1)
        g.add(0, "compute", f"k{i}", duration_us=kernel_us, deps=[h])
    return g


def test_host_ops_and_launches_of_a_node_are_priced_by_the_overheads():
    o = Overheads(kernel_launch_us=5.0, framework_us=10.0, host_op_us=3.0)
    r = simulate(_host_op_graph(4.0, kernels=10), overheads=o)
    # host-bound: 10 x (4 ops x 3 us + 1 launch x 5 us) = 170 us, then the last kernel (4 us); the launch category
    # (framework_us) is not charged: the node carries counts, not the kernel_launch overhead
    assert r.iteration_us == pytest.approx(174.0)
    assert simulate(_host_op_graph(0.5, kernels=10), overheads=o).iteration_us == pytest.approx(10 * 6.5 + 4.0)
    assert simulate(_host_op_graph(4.0, kernels=10), overheads=Overheads.zero()).iteration_us == pytest.approx(40.0)
    with pytest.raises(InvalidInputError, match="host_ops"):
        TaskGraph(1).add(0, "host", "x", kind="cpu", host_ops=-1.0)


def test_price_host_by_ops_replaces_the_category_lumps_with_counts():
    """A builder's graph switched to the op-by-op host model: each kernel launch is one launch plus the host ops
    given it, the per-iteration / optimizer.step / host-wait lumps only their host ops, a collective's launch keeps
    its category; other nodes are untouched."""
    def build() -> tuple[TaskGraph, dict[str, int]]:
        g = TaskGraph(1)
        ids = {"iter": g.add(0, "host", "iteration", kind="cpu", overhead="iteration")}
        ids["k1"] = g.kernel(0, "k1", duration_us=4.0)
        ids["wait"] = g.add(0, "host", "wait", kind="cpu", overhead="kernel_launch", deps=[ids["k1"]])
        ids["step"] = g.add(0, "host", "optimizer.step", kind="cpu", overhead="optimizer_step")
        ids["k2"] = g.kernel(0, "k2", duration_us=4.0)
        ids["coll"] = g.collective("ar", [0], duration_us=3.0)[0]
        ids["fixed"] = g.add(0, "host", "fixed", kind="cpu", duration_us=7.0)
        return g, ids

    o = Overheads(kernel_launch_us=5.0, framework_us=10.0, collective_launch_us=15.0, optimizer_step_us=80.0,
                  iteration_us=100.0, host_op_us=3.0)
    g, ids = build()
    before = simulate(g, overheads=o).durations
    g.price_host_by_ops({ids["k1"] - 1: 4.0, ids["wait"]: 2.0, ids["step"]: 1.0, ids["coll"] - 1: 2.0})
    d = simulate(g, overheads=o).durations
    assert d[ids["iter"]] == pytest.approx(0.0) and before[ids["iter"]] == pytest.approx(100.0)
    assert d[ids["k1"] - 1] == pytest.approx(4 * 3.0 + 5.0)  # 4 host ops + 1 launch; was 15 (launch + dispatch)
    assert d[ids["k2"] - 1] == pytest.approx(5.0)  # a launch given no host op: the launch alone
    assert d[ids["wait"]] == pytest.approx(6.0) and d[ids["step"]] == pytest.approx(3.0)
    assert d[ids["coll"] - 1] == pytest.approx(15.0 + 6.0)  # the collective's launch keeps its 15 us
    assert d[ids["fixed"]] == pytest.approx(7.0) and d[ids["k1"]] == pytest.approx(4.0)
    g, ids = build()
    with pytest.raises(InvalidInputError, match="does not exist"):
        g.price_host_by_ops({len(g) + 5: 1.0})
    with pytest.raises(InvalidInputError, match="host_ops"):
        g.price_host_by_ops({ids["wait"]: -1.0})


def test_overheads_fit_recovers_the_host_op_cost_of_traced_steps(catalog):
    """Steps of 2-12 host ops per kernel measured with 7 us per op: the fit finds 7 us (its default is 5.7)."""
    graphs = [_host_op_graph(k).compile() for k in (2.0, 4.0, 8.0, 12.0)]
    truth = Overheads(optimizer_step_us=0.0, iteration_us=0.0, host_op_us=7.0)
    measured = [simulate(g, overheads=truth).iteration_us for g in graphs]
    model = RooflineCostModel(catalog)
    fitted, report = Overheads.fit_report(graphs, measured, model, start=Overheads(optimizer_step_us=0.0,
                                                                                  iteration_us=0.0),
                                          fit=["host_op_us"])
    assert fitted.host_op_us == pytest.approx(7.0, rel=0.02) and report["identified"]["host_op_us"]
    # fitted by default only where a graph has host ops
    _, default = Overheads.fit_report(graphs, measured, model)
    assert "host_op_us" in default["params"]
    _, plain = Overheads.fit_report(*_launch_bound_runs(model), model)
    assert "host_op_us" not in plain["params"]


def _two_rank_phased_graph() -> TaskGraph:
    """rank 0: a (p1, 10) then collective (p2, 5) then tail (p3, 7); rank 1: a (p1, 20) then the collective."""
    g = TaskGraph(2)
    g.phase = "p1"
    a0 = g.add(0, "compute", "a", duration_us=10.0)
    a1 = g.add(1, "compute", "a", duration_us=20.0)
    g.phase = "p2"
    c = g.collective("c", [0, 1], duration_us=5.0, deps={0: [a0], 1: [a1]}, launch=False)
    g.phase = "p3"
    g.add(0, "compute", "tail", duration_us=7.0, deps=[c[0]])
    return g


def test_phase_times_cut_the_timeline_like_a_host_timer():
    r = simulate(_two_rank_phased_graph(), overheads=NO)
    assert r.iteration_us == pytest.approx(32.0)
    pt = r.phase_times(["p1", "p2", "p3"])
    # rank 0 waits 10 us for rank 1 inside the collective: that wait belongs to p2, where it happens
    assert pt.loc[0].tolist() == pytest.approx([10.0, 15.0, 7.0])
    assert pt.loc[1].tolist() == pytest.approx([20.0, 5.0, 0.0])
    # back to back iterations: rank 1 finishes 7 us early and waits in the next iteration's first phase
    steady = r.phase_times(["p1", "p2", "p3"], steady_state=True)
    assert steady.loc[1, "p1"] == pytest.approx(27.0) and steady.loc[0, "p1"] == pytest.approx(10.0)
    # a nested phase is part of its parent for the cut and reported as its own nodes' time (+ their waiting)
    nested = r.phase_times(["p1", "p3"], nested={"p2": "p1"})
    assert nested.loc[0].tolist() == pytest.approx([25.0, 7.0, 15.0])
    with pytest.raises(InvalidInputError, match="unknown phase"):
        r.phase_times(["p1"], nested={"p2": "nope"})
    with pytest.raises(InvalidInputError, match="no phase tags"):
        g = TaskGraph(1)
        g.add(0, "compute", "x", duration_us=1.0)
        simulate(g, overheads=NO).phase_times()


@pytest.mark.parametrize("overlap, expected", [(1.0, 20.0), (0.5, 26.0), (0.0, 32.0)])
def test_comm_overlap_blocks_compute_for_the_unhidden_share(overlap, expected):
    """20 us of compute beside a 12 us collective: hidden on a GPU, serialised where they share the cores."""
    g = TaskGraph(1)
    g.add(0, "compute", "a", duration_us=10.0)
    g.collective("c", [0], duration_us=12.0, launch=False, comm_overlap=overlap)
    g.add(0, "compute", "b", duration_us=10.0)
    r = simulate(g, overheads=NO)
    assert r.iteration_us == pytest.approx(expected)
    assert r.breakdown.loc[0, "collectives"] == 1  # the interference node is not a second collective
    with pytest.raises(InvalidInputError, match="comm_overlap"):
        g.collective("bad", [0], duration_us=1.0, comm_overlap=1.5)


@pytest.mark.parametrize("overlap, expected", [(1.0, 100.0), (0.999, 100.05), (0.5, 125.0), (0.0, 150.0)])
def test_partial_comm_overlap_does_not_hold_the_collective_behind_compute(overlap, expected):
    """A 50 us collective beside an independent 100 us kernel on each rank: the compute pays the unhidden share,
    ``(1 - overlap) x 50`` us. The interference node was a member of the collective, so the collective waited for
    the compute stream: any overlap below 1 (even 0.999) serialised it behind the kernel (150 us, as overlap 0)."""
    g = TaskGraph(2)
    for r in range(2):
        g.add(r, "compute", "long", duration_us=100.0)
    ids = g.collective("ar", [0, 1], duration_us=50.0, launch=False, comm_overlap=overlap)
    r = simulate(g, overheads=NO)
    assert r.iteration_us == pytest.approx(expected)
    assert r.start[ids[0]] == pytest.approx(0.0) and r.start[ids[1]] == pytest.approx(0.0)
    assert r.breakdown["collective_wait_us"].tolist() == pytest.approx([0.0, 0.0])


def test_synchronous_host_waits_for_each_kernel():
    """3 kernels of 10 us with 5 us launches: a GPU host runs ahead (5 + 30), a CPU's does not (3 x 15)."""
    ov = Overheads(kernel_launch_us=5.0, framework_us=0.0, collective_launch_us=0.0, optimizer_step_us=0.0,
                   iteration_us=0.0)
    times = {}
    for sync in (False, True):
        g = TaskGraph(1, synchronous_host=sync)
        for i in range(3):
            g.kernel(0, f"k{i}", duration_us=10.0)
        times[sync] = simulate(g, overheads=ov).iteration_us
    assert times[False] == pytest.approx(35.0) and times[True] == pytest.approx(45.0)


def test_kernel_scale_multiplies_the_op_time(catalog):
    g = TaskGraph(1)
    op = {"op": "gemm", "device": "H100-SXM", "dtype": "bf16", "b": 1, "m": 4096, "n": 4096, "k": 4096}
    g.kernel(0, "full", op)
    g.kernel(0, "share", op, scale=0.25)
    r = simulate(g, RooflineCostModel(catalog), NO)
    d = r.nodes().set_index("name")["duration_us"]
    assert d["share"] == pytest.approx(0.25 * d["full"]) and d["full"] > 0
    with pytest.raises(InvalidInputError, match="scale"):
        g.kernel(0, "bad", op, scale=-1.0)


def test_overheads_fit_report_says_what_the_data_identify(catalog):
    model = RooflineCostModel(catalog)
    graphs, measured = _launch_bound_runs(model)
    start = Overheads(framework_us=0.0, collective_launch_us=40.0)
    fitted, rep = Overheads.fit_report(graphs, measured, model, start=start)
    assert rep["identified"]["launch_us"] and rep["params"]["launch_us"] == pytest.approx(12.0, rel=0.05)
    assert not rep["identified"]["collective_launch_us"] and not rep["identified"]["optimizer_step_us"]
    assert fitted.collective_launch_us == pytest.approx(40.0, rel=1e-3)  # stays at its prior
    assert rep["se_us"]["optimizer_step_us"] == float("inf")
    # said in words: 'se inf' read as a number
    line = Overheads.describe_fit(rep)
    assert "inf" not in line and "optimizer_step_us 80.0 us (on no run's critical path, not identified" in line
    # a per-iteration constant can never exceed half the shortest measured iteration
    _, rep2 = Overheads.fit_report(graphs, np.array(measured) * 20, model, start=start, fit=("iteration_us",))
    assert rep2["params"]["iteration_us"] <= 0.5 * min(measured) * 20 + 1e-6
    with pytest.raises(InvalidInputError, match="unknown overhead"):
        Overheads.fit_report(graphs, measured, model, fit=("gpu_speed",))


def test_ranks_sharing_a_cpu_memory_system_split_its_bandwidth():
    """SharedMemoryBandwidth: streaming ops of ranks on one CPU share the measured all-core bandwidth; ops that
    fit in cache, latency-bound ops, collectives and devices without a measurement are left alone."""
    from dataclasses import replace

    import pandas as pd

    from hybrid.engine.costs import RooflineCostModel, SharedMemoryBandwidth
    from hybrid.hardware.catalog import default_catalog
    from hybrid.hardware.cpu import describe_local_cpu

    cpu = describe_local_cpu(cores=1, measured_mem_bw=20e9)
    cat = default_catalog().with_device(replace(cpu, mem_bw_shared=24e9, l2_cache=32 * 2**20))
    rows = pd.DataFrame({
        "op": ["elementwise", "elementwise", "gemm", "elementwise"],
        "variant": ["copy", "copy", None, "copy"],
        "elements": [2**27, 2**18, None, 2**27],  # 1 GiB streamed, 2 MiB (in cache), a GEMM, the same on a GPU
        "m": [None, None, 2048, None], "n": [None, None, 2048, None], "k": [None, None, 2048, None],
        "dtype": "fp32", "device": [cpu.key, cpu.key, cpu.key, "A100-SXM4-80GB"]})
    base = RooflineCostModel(cat)
    alone = base.predict(rows)["time_us"].to_numpy()
    two = SharedMemoryBandwidth(base, 2).predict(rows)
    # the streaming copy runs at the single-core 20 GB/s alone; two ranks want 40 GB/s of the 24 GB/s there is
    assert two["time_us"].iloc[0] == pytest.approx(alone[0] * 2 * 20 / 24, rel=0.02)
    assert two["memory_sharing"].iloc[0] == pytest.approx(40 / 24, rel=0.02)
    # in-cache copy, compute-bound GEMM (low DRAM demand) and the GPU row: unchanged
    assert np.allclose(two["time_us"].to_numpy()[1:], alone[1:])
    assert np.allclose(SharedMemoryBandwidth(base, 1).predict(rows)["time_us"], alone)
    # without a measured shared bandwidth nothing changes
    plain = RooflineCostModel(default_catalog().with_device(cpu))
    assert np.allclose(SharedMemoryBandwidth(plain, 2).predict(rows)["time_us"], plain.predict(rows)["time_us"])


@pytest.mark.parametrize("values, message", [
    ({"kernel_launch_us": "abc"}, "kernel_launch_us must be a number of us"),
    ({"kernel_launch_us": None}, "kernel_launch_us must be a number of us"),
    ({"iteration_us": True}, "iteration_us must be a number of us"),
])
def test_overheads_from_dict_names_a_value_that_is_no_number(values, message):
    """A constant that is no number was a bare ``could not convert string to float: 'abc'`` (or a TypeError)."""
    with pytest.raises(InvalidInputError, match=message):
        Overheads.from_dict(values)


def test_engine_refuses_inputs_of_the_wrong_type_by_name():
    g = TaskGraph(1)
    with pytest.raises(InvalidInputError, match="duration must be a number"):
        g.add(0, "compute", "a", duration_us="3")  # was "'<' not supported between instances of 'str' and 'int'"
    with pytest.raises(InvalidInputError, match="duration must be a number"):
        g.kernel(0, "k", duration_us="3")
    assert len(g) == 0
    g.add(0, "compute", "a", duration_us=1.0)
    with pytest.raises(InvalidInputError, match="overheads must be an Overheads"):
        simulate(g, overheads={"kernel_launch_us": 1.0})  # was "'dict' object has no attribute 'vector'"


def test_chrome_trace_writes_node_args_json_cannot_hold_as_text(tmp_path):
    """A node's ``args`` with a set, a numpy array or an object were a bare "Object of type set is not JSON
    serializable" once the whole simulation had run; NaN inside a list was written as NaN (invalid JSON)."""
    g = TaskGraph(1)
    g.add(0, "compute", "a", duration_us=3.0,
          args={"s": {2}, "arr": np.array([1.5, 2.5]), "path": tmp_path, "nested": [1.0, float("nan")], "n": np.int64(4)})
    data = json.loads(write_chrome_trace(simulate(g, overheads=NO), tmp_path / "t.json").read_text(),
                      parse_constant=lambda c: pytest.fail(f"invalid JSON constant {c}"))
    args = next(e for e in data["traceEvents"] if e["ph"] == "X")["args"]
    assert args["s"] == [2] and args["arr"] == [1.5, 2.5] and args["path"] == str(tmp_path)
    assert args["nested"] == [1.0, None] and args["n"] == 4


def test_summary_counts_ops_not_their_cpu_launches(catalog):
    """``n_ops`` of ``hybrid simulate``/``shard`` counted every real node, the host's launch events among them: a
    graph of 2 kernels and one 2-rank collective said 8 ops (4 launches + 4 ops)."""
    g = TaskGraph(2)
    for r in range(2):
        k = g.kernel(r, "gemm", {"op": "gemm", "device": "H100-SXM", "dtype": "bf16", "m": 256, "n": 256, "k": 256})
    g.collective("ar", [0, 1], {"op": "all_reduce", "device": "H100-SXM", "system": "DGX-H100", "dtype": "bf16",
                                "size_bytes": 4e6, "n_ranks": 2}, deps={0: [k], 1: [k - 2]})
    g.add(0, "host", "optimizer.step", kind="cpu", overhead="optimizer_step")
    r = simulate(g, RooflineCostModel(catalog))
    assert r.graph.n_real == 9
    assert r.summary()["n_ops"] == 4  # 2 gemms + the all-reduce on each of its 2 ranks
