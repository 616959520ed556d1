"""Critical-path simulation of a multi-rank task graph.

Node times are costed in one batch (:func:`node_durations`), then the graph is evaluated as a max-plus
longest-path problem (a node starts when all its predecessors, stream predecessor included, have finished) by a
frontier-at-a-time topological sweep: each step handles every node whose inputs are all known, across all ranks,
with numpy. A 64-rank DLRM iteration (~10k nodes) takes a few milliseconds; see experiments/engine_scaling.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hybrid.engine.costs import (
    KernelTimeModel,
    OpCostModel,
    SharedMemoryBandwidth,
    default_cost_model,
    interval_note,
    predict_bounds_flagged,
    predict_times,
)
from hybrid.engine.graph import COMM, COMPUTE, CPU, KINDS, SYNC, CompiledGraph, TaskGraph
from hybrid.engine.overheads import Overheads, dispatch_overheads, measured_dispatch_us
from hybrid.errors import InvalidInputError

#: Columns of :attr:`SimResult.breakdown` (one row per rank).
BREAKDOWN_COLUMNS = ("rank", "iteration_us", "compute_us", "comm_us", "exposed_comm_us", "overlapped_comm_us",
                     "idle_us", "host_us", "collective_wait_us", "kernels", "collectives")


def node_durations(graph: CompiledGraph, model: OpCostModel | None, overheads: Overheads | None = None,
                   _methods: list | None = None,
                   _times: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Duration (us) of every node: fixed part + predicted op time + host overhead of its category.

    All op rows of the graph are predicted in ONE ``model.predict`` call (or taken from ``_times``: per op row
    of ``graph.ops``, (time_us, method)). Members of a collective all take the longest member's time (a
    collective completes together).
    """
    dur = graph.fixed_us.copy()
    if len(graph.ops):
        if _times is not None:
            times, method = _times
        else:
            times, method = predict_times(model if model is not None else default_cost_model(), graph.ops)
        has = graph.op_index >= 0
        dur[has] += times[graph.op_index[has]]
        if _methods is not None:
            _methods.append(method)
    if overheads is not None:
        dur += overheads.node_us(graph)
    grouped = (graph.group >= 0) & (graph.kind != SYNC)
    if grouped.any():
        gmax = np.zeros(int(graph.group.max()) + 1)
        np.maximum.at(gmax, graph.group[grouped], dur[grouped])
        dur[grouped] = gmax[graph.group[grouped]]
    if graph.scale is not None:
        dur *= graph.scale
    return dur


def _schedule(n: int, src: np.ndarray, dst: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Earliest start/finish of every node of a DAG (frontier-wise Kahn sweep, vectorised per frontier)."""
    order = np.argsort(src, kind="stable")
    succ = dst[order]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    indeg = np.bincount(dst, minlength=n)
    ready = np.zeros(n)
    start = np.zeros(n)
    finish = np.zeros(n)
    frontier = np.flatnonzero(indeg == 0)
    done = 0
    while frontier.size:
        done += frontier.size
        s = ready[frontier]
        f = s + dur[frontier]
        start[frontier] = s
        finish[frontier] = f
        lo = ptr[frontier]
        cnt = ptr[frontier + 1] - lo
        total = int(cnt.sum())
        if total == 0:
            break
        first = np.cumsum(cnt) - cnt
        idx = np.repeat(lo - first, cnt) + np.arange(total)
        targets = succ[idx]
        np.maximum.at(ready, targets, np.repeat(f, cnt))
        np.subtract.at(indeg, targets, 1)
        cand = np.unique(targets)
        frontier = cand[indeg[cand] == 0]
    if done < n:
        raise InvalidInputError(f"task graph has a dependency cycle ({n - done} nodes never become ready)")
    return start, finish


def _union_length(rank: np.ndarray, start: np.ndarray, finish: np.ndarray, n_ranks: int) -> np.ndarray:
    """Per rank, the length of the union of intervals ``[start, finish)``."""
    if rank.size == 0:
        return np.zeros(n_ranks)
    order = np.lexsort((start, rank))
    r, s, f = rank[order], start[order], finish[order]
    big = float(max(finish.max(), 0.0)) * 2.0 + 1.0
    off = r * big
    s2, f2 = s + off, f + off
    run = np.maximum.accumulate(f2)
    prev = np.concatenate([[-np.inf], run[:-1]])
    contrib = np.clip(f2 - np.maximum(s2, prev), 0.0, None)
    return np.bincount(r, contrib, minlength=n_ranks)


@dataclass
class SimResult:
    """Timeline of one simulated iteration: per-node start/finish and the per-rank breakdown."""

    graph: CompiledGraph
    durations: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    iteration_us: float
    breakdown: pd.DataFrame
    methods: np.ndarray | None = None  # per node: how its op was costed ("" if no op)
    info: dict[str, Any] = field(default_factory=dict)
    #: 80% interval of the iteration time: the schedule re-run with every op at the low / high end of its own
    #: interval (errors on one system are strongly correlated, so the ends move together); NaN without intervals
    iteration_us_low: float = float("nan")
    iteration_us_high: float = float("nan")

    def critical_path(self) -> list[int]:
        """Node ids on one critical path, first to last (a predecessor that finishes exactly at the start)."""
        g = self.graph
        node = int(np.argmax(np.where(g.kind != SYNC, self.finish, -np.inf)))
        order = np.argsort(g.edges_dst, kind="stable")
        dsts = g.edges_dst[order]
        srcs = g.edges_src[order]
        path = [node]
        while True:
            lo, hi = np.searchsorted(dsts, [node, node + 1])
            if lo == hi:
                break
            preds = srcs[lo:hi]
            tight = preds[np.isclose(self.finish[preds], self.start[node], rtol=1e-9, atol=1e-6)]
            if tight.size == 0:
                break
            node = int(tight[np.argmax(self.durations[tight])])
            path.append(node)
        path.reverse()
        return [p for p in path if g.kind[p] != SYNC]

    @property
    def schedule_us(self) -> float:
        """Length (us) of the one-iteration schedule: ``iteration_us``, except for a graph of overlapped iterations,
        whose steady state is shorter than the schedule of one iteration (``info["single_iteration_us"]``)."""
        return float(self.info.get("single_iteration_us", self.iteration_us))

    def critical_path_summary(self) -> dict[str, float]:
        """Time on the critical path by node kind (compute / comm / cpu) and the waiting in between; they sum to
        :attr:`schedule_us` (one iteration's schedule, also for overlapped iterations)."""
        path = self.critical_path()
        out = {k: 0.0 for k in KINDS if k != "sync"}
        for p in path:
            out[KINDS[self.graph.kind[p]]] += float(self.durations[p])
        out["gaps"] = max(0.0, self.schedule_us - sum(out.values()))
        return out

    def nodes(self) -> pd.DataFrame:
        """Every real node as a row: name, rank, stream, kind, start_us, end_us, duration_us, method."""
        g = self.graph
        n = g.n_real
        streams = [g.stream_names[s][1] for s in g.stream[:n]]
        return pd.DataFrame({
            "name": g.names[:n], "rank": g.rank[:n], "stream": streams,
            "kind": np.asarray(KINDS, dtype=object)[g.kind[:n]], "start_us": self.start[:n],
            "end_us": self.finish[:n], "duration_us": self.durations[:n],
            "method": self.methods[:n] if self.methods is not None else "",
        })

    def phase_times(self, order: Sequence[str] | None = None,
                    nested: Mapping[str, str] | None = None, steady_state: bool = False,
                    host_clock: bool = False) -> pd.DataFrame:
        """Simulated time per phase and rank (us), cut the way a host-side timer cuts a real run.

        Phases run one after the other in ``order`` (default: the order they first appear in the graph); the
        end of phase ``p`` on a rank is the latest finish of that rank's nodes tagged ``p`` or an earlier phase,
        and the phase lasts from the previous phase's end to its own (so waiting for a peer counts where it
        happens). A *nested* phase (``{"exchange_bwd": "backward"}``) belongs to its parent for that cut and is
        reported separately as the time its own nodes took (duration plus waiting inside collectives).
        With ``steady_state``, iterations run back to back without a barrier (as a training loop does): a rank
        that finishes early waits for the others in the next iteration's first phase, so its idle time at the
        end (``iteration_us`` minus its last finish) is added to the first phase.
        With ``host_clock`` (a GPU job timed by a host-side clock that does not synchronise inside the
        iteration), a phase ends when the rank's HOST has finished that phase's nodes (launches, host work, host
        waits), not when the GPU has run them: GPU work still queued spills into the later phases, and the last
        phase ends with the iteration (the end-of-iteration synchronisation). A nested phase is then the time of
        its own host nodes.
        Returns a DataFrame indexed by rank with one column per phase (nested ones last).
        """
        g = self.graph
        nested = dict(nested or {})
        names = list(g.phase_names)
        if g.phase is None or not names:
            raise InvalidInputError("the graph has no phase tags (build it with TaskGraph.phase set)")
        top = [p for p in (order if order is not None else names) if p not in nested]
        unknown = [p for p in nested.values() if p not in top]
        if unknown:
            raise InvalidInputError(f"unknown phase(s) {unknown}; the graph has {names}")
        R = g.n_ranks
        real = (g.kind != SYNC) & (g.phase >= 0)
        # position of every node's (parent) phase in the top-level order
        pos_of = np.full(len(names), -1, dtype=np.int64)
        for i, p in enumerate(names):
            q = nested.get(p, p)
            pos_of[i] = top.index(q) if q in top else -1
        pos = np.where(real, pos_of[np.maximum(g.phase, 0)], -1)
        keep = pos >= 0
        if host_clock:
            keep &= g.kind == CPU
        ends = np.zeros((R, len(top)))
        np.maximum.at(ends, (g.rank[keep].astype(np.int64), pos[keep]), self.finish[keep])
        if host_clock and top:
            ends[:, -1] = self.schedule_us
        ends = np.maximum.accumulate(ends, axis=1)
        out = pd.DataFrame(np.diff(ends, axis=1, prepend=0.0), columns=top)
        if steady_state and top:  # (overlapped iterations: the phases of one iteration's schedule, not interleaved)
            out[top[0]] += self.schedule_us - ends[:, -1]
        own_ready = np.zeros(len(g))
        not_sync_edge = g.kind[g.edges_src] != SYNC
        np.maximum.at(own_ready, g.own_dst[not_sync_edge], self.finish[g.edges_src[not_sync_edge]])
        has_pred = np.bincount(g.own_dst[not_sync_edge], minlength=len(g)) > 0
        for child in nested:
            if child not in names:
                out[child] = 0.0
                continue
            if host_clock:
                sel = real & (g.phase == names.index(child)) & (g.kind == CPU)
                took = self.durations[sel]
            else:
                sel = real & (g.phase == names.index(child)) & has_pred
                took = self.durations[sel] + np.maximum(self.start[sel] - own_ready[sel], 0.0)
            out[child] = np.bincount(g.rank[sel].astype(np.int64), took, minlength=R)
        out.index.name = "rank"
        return out

    def summary(self) -> dict[str, Any]:
        """JSON-ready: iteration time, per-rank breakdown, critical-path composition."""
        ranks = self.breakdown.to_dict(orient="records")
        interval = {} if not np.isfinite(self.iteration_us_low) else {
            "iteration_us_low": float(self.iteration_us_low), "iteration_us_high": float(self.iteration_us_high)}
        return {
            "iteration_us": float(self.iteration_us),
            **interval,
            "n_ranks": int(self.graph.n_ranks),
            # ops of the graph, every rank's: its kernels and collectives, not the host's launch events
            "n_ops": int(np.isin(self.graph.kind[:self.graph.n_real], (COMPUTE, COMM)).sum()),
            # microseconds by node kind (compute / comm / cpu, and the gaps between): ``critical_path_us`` names the
            # unit as every other time key does; ``critical_path`` is the same dict, kept for existing readers
            "critical_path_us": (cp := self.critical_path_summary()),
            "critical_path": cp,
            "max_exposed_comm_us": float(self.breakdown["exposed_comm_us"].max()),
            "ranks": [{k: (int(v) if k in ("rank", "kernels", "collectives") else round(float(v), 3))
                       for k, v in r.items()} for r in ranks],
            **self.info,
        }


#: The resources of a rank whose per-iteration busy time bounds overlapped iterations (:func:`resource_busy_us`).
RESOURCES = ("compute", "network", "host")


def resource_busy_us(graph: CompiledGraph, durations: np.ndarray) -> np.ndarray:
    """Per rank (rows) and resource (columns, :data:`RESOURCES`), the time (us) it is busy in one iteration: its
    GPU's (or CPU's) compute, every kernel on any of its streams, and the compute-stream share of collectives that
    compute cannot overlap with; its network, every collective on any of its communication streams (one NIC / fabric
    port: exchanges on two streams share it); its host, every host node. A graph whose host waits for every
    kernel (``synchronous_host``: a CPU device, whose cores run both) counts host and compute as one resource, the
    compute column (the host column then 0)."""
    real = (graph.kind != SYNC) & (graph.rank >= 0)
    interfering = graph.interference if graph.interference is not None else np.zeros(len(graph), dtype=bool)
    col = np.full(len(graph), -1, dtype=np.int64)
    col[(graph.kind == COMPUTE) | interfering] = 0
    col[(graph.kind == COMM) & ~interfering] = 1
    col[graph.kind == CPU] = 2
    use = real & (col >= 0)
    busy = np.zeros((graph.n_ranks, len(RESOURCES)))
    np.add.at(busy, (graph.rank[use].astype(np.int64), col[use]), durations[use])
    if graph.synchronous_host:  # one set of cores dispatches and computes: the two add up
        busy[:, 0] += busy[:, 2]
        busy[:, 2] = 0.0
    return busy


def simulate_durations(graph: CompiledGraph, durations: np.ndarray) -> SimResult:
    """Schedule ``graph`` with the given node durations (us) and compute the per-rank breakdown.

    A graph built with ``overlap_iterations`` (a program that overlaps consecutive iterations) is timed in its
    steady state: the busiest resource of any rank per iteration (its compute, network or host:
    :func:`resource_busy_us`), the rate such a software pipeline approaches when nothing but its resources limits
    it; ``info`` keeps the one-iteration critical path (``single_iteration_us``) and which resource bounds the
    iteration (``bound_by``).
    """
    n = len(graph)
    if durations.shape != (n,):
        raise InvalidInputError(f"need {n} durations, got {durations.shape}")
    if not np.all(np.isfinite(durations) & (durations >= 0)):
        raise InvalidInputError("node durations must be finite and >= 0")
    start, finish = _schedule(n, graph.edges_src, graph.edges_dst, durations)
    real = graph.kind != SYNC
    iteration = float(finish[real].max()) if real.any() else 0.0
    info: dict[str, Any] = {}
    if graph.overlap_iterations and real.any():
        busy = resource_busy_us(graph, durations)
        rank_of, what = np.unravel_index(int(np.argmax(busy)), busy.shape)
        info = {"overlap_iterations": True, "single_iteration_us": iteration,
                "bound_by": f"rank {int(rank_of)} {RESOURCES[int(what)]}"}
        # (never beyond the critical path: concurrent kernels of one rank can sum to more than the iteration)
        iteration = min(iteration, float(busy.max()))
    R = graph.n_ranks
    rank = graph.rank.astype(np.int64)
    comp = graph.kind == COMPUTE
    comm = graph.kind == COMM
    gpu = comp | comm
    compute_u = _union_length(rank[comp], start[comp], finish[comp], R)
    comm_u = _union_length(rank[comm], start[comm], finish[comm], R)
    busy_u = _union_length(rank[gpu], start[gpu], finish[gpu], R)
    cpu = graph.kind == CPU
    host = np.bincount(rank[cpu], durations[cpu], minlength=R)
    # waiting inside collectives: sync start minus the moment this member itself was ready
    own_ready = np.zeros(n)
    not_sync_edge = graph.kind[graph.edges_src] != SYNC
    np.maximum.at(own_ready, graph.own_dst[not_sync_edge], finish[graph.edges_src[not_sync_edge]])
    members = comm & (graph.group >= 0)
    if graph.interference is not None:  # interference nodes (comm_overlap < 1) are not collectives of their own
        members &= ~graph.interference
    wait = np.bincount(rank[members], np.maximum(start[members] - own_ready[members], 0.0), minlength=R)
    breakdown = pd.DataFrame({
        "rank": np.arange(R),
        "iteration_us": np.full(R, iteration),
        "compute_us": compute_u,
        "comm_us": comm_u,
        "exposed_comm_us": busy_u - compute_u,
        "overlapped_comm_us": comm_u - (busy_u - compute_u),
        # (of the one-iteration schedule, so that compute + exposed comm + idle is its length; for overlapped
        # iterations that is the single iteration's, ``info["single_iteration_us"]``, not the steady state's)
        "idle_us": np.maximum(float(info.get("single_iteration_us", iteration)) - busy_u, 0.0),
        "host_us": host,
        "collective_wait_us": wait,
        "kernels": np.bincount(rank[comp], minlength=R),
        "collectives": np.bincount(rank[members], minlength=R),
    })
    return SimResult(graph, durations, start, finish, iteration, breakdown, info=info)


def simulate(
    graph: TaskGraph | CompiledGraph,
    model: OpCostModel | None = None,
    overheads: Overheads | None = None,
    kernel_times: bool = True,
    shared_memory: bool = True,
) -> SimResult:
    """Cost every op of ``graph`` with ``model`` (one batch), add host ``overheads`` and schedule it.

    ``model`` defaults to :func:`hybrid.engine.costs.default_cost_model` (roofline-only predictor),
    ``overheads`` to :class:`Overheads` defaults. When the model gives 80% intervals for every op, the result
    also carries ``iteration_us_low`` / ``iteration_us_high`` (two more schedules, no more predictions).

    ``kernel_times`` (default): op nodes cost the model's kernel time, its prediction less the per-op framework
    dispatch it includes (:class:`~hybrid.engine.costs.KernelTimeModel` with ``learned_dispatch``: the fitted
    dispatch constant and the dispatch the pointwise trees learned inside eager-timed GPUs' times alike; only
    kernel models fitted on eager per-op GPU timings include one), because the graph puts that host work on its
    host stream (``overheads``, or traced host time). False costs ops as the model predicts them (the dispatch
    counted twice on GPUs).

    ``shared_memory`` (default): when several ranks run on one CPU whose catalog entry has a measured
    ``mem_bw_shared``, their streaming ops share that bandwidth (:class:`~hybrid.engine.costs.SharedMemoryBandwidth`:
    all ranks of a graph on a CPU device are taken to share one host). GPU devices are unaffected.
    """
    if not isinstance(graph, TaskGraph | CompiledGraph) and isinstance(getattr(graph, "graph", None),
                                                                      TaskGraph | CompiledGraph):
        graph = graph.graph  # a workload builder's result (DLRMIteration, ...) holding its graph
    if not isinstance(graph, TaskGraph | CompiledGraph):
        raise InvalidInputError(f"simulate needs a TaskGraph (or a builder's result with .graph), got "
                                f"{type(graph).__name__}")
    if overheads is not None and not isinstance(overheads, Overheads):
        raise InvalidInputError(f"overheads must be an Overheads (Overheads.from_dict for a mapping of us), got "
                                f"{type(overheads).__name__}")
    compiled = graph.compile() if isinstance(graph, TaskGraph) else graph
    methods: list = []
    over = overheads
    if over is None:  # defaults, one kernel's host time as the model measured it on the graph's GPU where it did
        over = Overheads()
        if len(compiled.ops) and "device" in compiled.ops.columns and model is not None:
            devs = pd.unique(compiled.ops["device"].astype(str))
            over = dispatch_overheads(over, measured_dispatch_us(model, devs))
    low = high = None
    times = None
    if shared_memory and compiled.n_ranks > 1:
        model = SharedMemoryBandwidth(model if model is not None else default_cost_model(), compiled.n_ranks)
    if kernel_times and model is not None:
        model = KernelTimeModel(model, learned_dispatch=True)
    if len(compiled.ops):
        t, low, high, method, borrowed = predict_bounds_flagged(model if model is not None else default_cost_model(),
                                                                compiled.ops)
        times = (t, method)
    dur = node_durations(compiled, model, over, methods, _times=times)
    result = simulate_durations(compiled, dur)
    if low is not None and high is not None and times is not None:
        result.iteration_us_low = simulate_durations(
            compiled, node_durations(compiled, model, over, _times=(low, times[1]))).iteration_us
        result.iteration_us_high = simulate_durations(
            compiled, node_durations(compiled, model, over, _times=(high, times[1]))).iteration_us
        note = interval_note(compiled.ops, borrowed)
        if note:
            result.info["interval_note"] = note
    node_method = np.full(len(compiled), "", dtype=object)
    if methods:
        has = compiled.op_index >= 0
        node_method[has] = methods[0][compiled.op_index[has]]
    result.methods = node_method
    return result
