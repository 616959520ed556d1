"""A traced training/inference step (one PyTorch trace per rank) as a task graph of the ONE engine.

Three steps, one module each:

1. :mod:`hybrid.workloads.trace_units`: the parsed events of every rank cut into *units* (ops the families cost,
   collectives, views, unmodelled ops);
2. :mod:`hybrid.workloads.trace_deps`: their streams, host gaps, cross-thread dependencies and asynchronous
   collectives, inferred from the trace;
3. this module: nodes of a :class:`~hybrid.engine.graph.TaskGraph` for a target, costed as
   :mod:`hybrid.workloads.trace_costing` decides (and predicted there by :func:`predict_trace`).

:func:`build_trace_graph` semantics:

* on a CPU target the host executes every op itself: units and gaps run one after another on the thread's
  stream. A blocking collective sits on the caller's stream; an asynchronous one (gloo's thread does the work,
  the call only enqueues it) runs on the rank's comm stream from the call on, and the caller waits for it where
  the trace shows the wait (:mod:`hybrid.workloads.trace_deps`);
* on a GPU target each costed unit is a kernel on its traced stream (else the compute stream) after its launch
  on the calling thread's host stream: the launch node carries the op's traced host time (dispatch +
  ``cudaLaunchKernel``), and the host runs ahead, as CUDA does. A collective runs on the comm stream after its
  launch and after the kernels launched before it on *every* kernel stream of its rank (see
  :func:`build_trace_graph`); optimizer kernels wait for the collectives before them (DDP's ``work.wait()``);
  host syncs (``aten::item``) wait for every stream.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hybrid.data.traces.parse import CUDA_SYNC_CALLS, RankTrace
from hybrid.data.traces.precision import (
    SWITCH_OPS,
    Fp32Precision,
    apply_fp32_precision,
    apply_math_attention_dtype,
)
from hybrid.engine.graph import COMM_STREAM, COMPUTE_STREAM, HOST, TaskGraph
from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import Catalog, default_catalog
from hybrid.ops.roofline import cpu_collective_system
from hybrid.workloads.dlrm_graph import Target, resolve_target
from hybrid.workloads.trace_costing import (
    GPU_HOST_OPS_PER_UNIT,
    HostCosting,
    TracePrediction,
    is_same_device,
    kind_conflict,
    measured_durations,
    predict_trace,
    same_device_conflict,
    traced_gpu,
)
from hybrid.workloads.trace_deps import cross_dep_nodes, main_tid, rank_schedule
from hybrid.workloads.trace_fusion import FUSED_COLUMN
from hybrid.workloads.trace_units import (
    FIRST_ORDER_LABELS,
    GAP_LABEL,
    OWN_TIME_ATTR,
    PHASE_MARKERS,
    UNIT_KINDS,
    UNMODELLED_LABEL,
    VIEW_LABEL,
    job_units,
    trace_units,
)

__all__ = ["GAP_LABEL", "PHASE_MARKERS", "SYNC_OPS", "UNIT_KINDS", "UNMODELLED_LABEL", "VIEW_LABEL", "WAIT_LABEL",
           "TraceIteration", "TracePrediction", "build_trace_graph", "job_units", "main_tid", "measured_durations",
           "predict_trace", "trace_units"]

#: Host ops that wait for the device (a GPU target's host stream waits for its kernel and comm streams).
SYNC_OPS = frozenset({"aten::item", "aten::_local_scalar_dense", "aten::nonzero"}) | CUDA_SYNC_CALLS
#: Breakdown label of traced time a thread spent waiting (for another thread, or for an asynchronous collective's
#: work): measured, never predicted as host work (the dependency stands for it).
WAIT_LABEL = "waiting"


@dataclass
class TraceIteration:
    """A built graph: the task graph, per-node measured times and labels, and the account of what was costed."""

    graph: TaskGraph
    traces: list[RankTrace]
    target: Target
    same_device: bool
    units: pd.DataFrame  # all ranks, with a ``rank`` and a ``node`` column
    node_label: list[str]
    node_measured_us: list[float]
    info: dict[str, Any] = field(default_factory=dict)
    #: the catalog the graph was built with (the target's device and system are its entries): what the roofline
    #: prices it with when no model is given
    catalog: Catalog | None = None

    @property
    def measured_step_us(self) -> float:
        """The traced step time: the slowest rank's step (NaN without times)."""
        return float(max(t.step_us for t in self.traces))

    def unmodelled(self) -> pd.DataFrame:
        """Ops no family covers, per name: count, measured time (us, all ranks: its kernels' on a GPU trace, else
        its host time) and how they were costed."""
        u = self.units[self.units["kind"] == "unmodelled"]
        cols = ["name", "count", "measured_us", "costed_as"]
        if u.empty:
            return pd.DataFrame(columns=cols)
        dev = u["device_us"] if "device_us" in u.columns else pd.Series(np.nan, index=u.index)
        u = u.assign(traced=dev.where(np.isfinite(dev.astype(float)), u["dur"]))
        t = u.groupby("name").agg(count=("dur", "size"), measured_us=("traced", "sum")).reset_index()
        t["costed_as"] = "trace time (target = traced device)" if self.same_device else "unmodelled (0 us)"
        return t.sort_values("measured_us", ascending=False, kind="stable")[cols].reset_index(drop=True)

    def own_time(self) -> pd.DataFrame:
        """Unmapped ATen ops looked into for the costed ops they call, per name: count and the traced time they
        spent outside those (``own_us``, all ranks: a composite op's dispatch, or work of its own, e.g. an
        upsampling that first copies its input to a contiguous one). That time is in the host gaps: costed at the
        trace's time where the traced host is kept, else not (kernels such an op launched itself are an unmodelled
        unit of its own)."""
        o = self.info.get("own_time")
        cols = ["name", "count", "own_us"]
        if o is None or not len(o):
            return pd.DataFrame(columns=cols)
        t = o.groupby("name").agg(count=("own_us", "size"), own_us=("own_us", "sum")).reset_index()
        return t.sort_values("own_us", ascending=False, kind="stable")[cols].reset_index(drop=True)


class _Builder:
    """Adds the nodes of every rank's units to one task graph (one instance per :func:`build_trace_graph`)."""

    def __init__(self, traces: list[RankTrace], tgt: Target, costing: HostCosting,
                 scheds: list[pd.DataFrame]) -> None:
        self.traces, self.tgt, self.cost = traces, tgt, costing
        self.on_cpu = tgt.device.kind == "cpu"
        self.g = TaskGraph(n_ranks=len(traces))
        self.labels: list[str] = []
        self.measured: list[float] = []
        self.scheds = scheds
        self.rows = [s.to_dict("records") for s in scheds]
        self.node = [np.full(len(s), -1, dtype=np.int64) for s in scheds]  # the unit's node (kernel / member)
        self.host_node = [np.full(len(s), -1, dtype=np.int64) for s in scheds]  # its node on the host thread
        self.kstreams: list[dict[str, None]] = [{} for _ in traces]  # kernel streams used so far, per rank
        self.last_comm: dict[int, int | None] = defaultdict(lambda: None)
        #: the last inserted collective whose result the next kernel consumes (TP all-reduce, PP transfer)
        self.blocking: dict[int, int | None] = defaultdict(lambda: None)
        self.pending: list[dict[int, int]] = [{} for _ in traces]  # async collective unit -> comm node
        self.has_times = all(t.has_times for t in traces)
        #: ranks whose units a compiler fused (trace_fusion): compiled code dispatches no views or ATen ops of its
        #: own; each kernel it calls costs one launch overhead (``kernel_launch``: launch + the wrapper's call)
        self.compiled = [FUSED_COLUMN in s.columns for s in scheds]
        #: the engine's host model prices each unit's host ops and launches (the traced host time is dropped)
        self.model_host = not self.on_cpu and not costing.keep_host
        #: ranks whose trace recorded its kernels (an execution trace alone, or a CPU / meta trace, did not)
        self.gpu_traced = [t.device == "cuda" and len(t.kernels) > 0 for t in traces]
        #: ranks whose ops ran on a GPU (their nested host ops are a GPU step's; a CPU / meta trace's are its own
        #: kernels' decompositions: GPU_HOST_OPS_PER_UNIT per unit instead)
        self.gpu_ops = [t.device == "cuda" for t in traces]

    def host_counts(self, rank: int, u: dict[str, Any], kernels: bool) -> dict[str, float]:
        """The host ops and kernel launches the engine's host model charges unit ``u`` (``host="model"`` on a GPU
        target; none otherwise): its traced ops and the gap's before it (each op the profiler recorded,
        :data:`~hybrid.engine.overheads.DEFAULT_HOST_OP_US`; a CPU / meta trace's unit
        :data:`~hybrid.workloads.trace_costing.GPU_HOST_OPS_PER_UNIT` instead of its own), and its kernels (as traced
        on a GPU; one per costed op from a CPU / meta trace, whose ops launched none). None on a compiled rank (see
        :attr:`compiled`)."""
        if not self.model_host or self.compiled[rank]:
            return {}
        own = float(u.get("n_events", 0.0) or 0.0)
        if not self.gpu_ops[rank] and own > 0:
            own = GPU_HOST_OPS_PER_UNIT
        ops = own + float(u.get("gap_events", 0.0) or 0.0)
        launches = float(u.get("n_launch", 0.0) or 0.0) if self.gpu_traced[rank] else float(kernels)
        return {"host_ops": ops, "launches": launches if kernels else 0.0}

    # ------------------------------------------------------------------------------------------------ nodes
    def add(self, rank: int, stream: str, name: str, label: str, meas: float, **kw: Any) -> int:
        nid = self.g.add(rank, stream, name, **kw)
        self.labels.append(label)
        self.measured.append(float(meas) if np.isfinite(meas) else 0.0)
        return nid

    def _record_new(self, label: str, meas: float) -> None:
        for _ in range(len(self.g) - len(self.labels)):
            self.labels.append(label)
            self.measured.append(meas)

    def gap(self, rank: int, u: dict[str, Any], deps: list[int]) -> None:
        """The traced host gap before unit ``u``; the part of it the thread spent waiting (for another thread of
        the rank, or for an asynchronous collective's work) is a wait node: traced time, no predicted host work."""
        gap = float(u["gap_us"]) if self.has_times and np.isfinite(u["gap_us"]) else 0.0
        wait = float(u.get("wait_us", 0.0) or 0.0) if self.has_times else 0.0
        comms = [self.pending[rank].pop(c) for c in u["waits_for"] if c in self.pending[rank]]
        if comms and self.has_times:
            e = max(self.scheds[rank].at[c, "backend_end"] for c in u["waits_for"])
            wait = max(wait, float(np.clip(e - (u["ts"] - gap), 0.0, gap)))
        if wait > 0 or comms:
            # the wait lasts until what it waits for ends (its dependencies), in the re-simulation too
            on = [*comms, *deps]
            self.add(rank, u["stream"], "wait", WAIT_LABEL, 0.0 if on else wait, duration_us=0.0, kind="cpu", deps=on)
        rest = gap - wait  # host work after what the thread waited for (dependencies) had ended
        if self.cost.keep_host and rest > 0:
            self.add(rank, u["stream"], "host gap", GAP_LABEL, rest, duration_us=self.cost.gap_us(rank, rest),
                     kind="cpu", deps=deps)

    def kernel_stream(self, rank: int, u: dict[str, Any]) -> str:
        s = f"stream {u['kstream']}" if u.get("kstream") else COMPUTE_STREAM
        self.kstreams[rank][s] = None
        return s

    def launch(self, rank: int, u: dict[str, Any], deps: list[int], what: str = "kernel_launch") -> int:
        """The host side of a GPU op or collective: its traced host time (dispatch + launch) where the traced host
        is kept, else the engine's host model (:meth:`host_counts`; a collective call: its launch overhead)."""
        if what == "kernel_launch" and self.model_host and not self.compiled[rank]:  # the host model, op by op
            return self.add(rank, u["stream"], f"launch {u['name']}", "launch", u["dur"], kind="cpu", deps=deps,
                            phase=u["phase"], **self.host_counts(rank, u, kernels=True))
        gap_ops = {"host_ops": float(u.get("gap_events", 0.0) or 0.0)} \
            if self.model_host and not self.compiled[rank] else {}
        return self.add(rank, u["stream"], f"launch {u['name']}", "launch", u["dur"],
                        duration_us=self.cost.host_us(rank, u["dur"], *_recorded(u)), kind="cpu",
                        overhead="none" if self.cost.keep_host else what, deps=deps, phase=u["phase"], **gap_ops)

    def place(self, rank: int, i: int) -> None:
        """Unit ``i`` of ``rank`` (not a collective)."""
        u = self.rows[rank][i]
        deps = cross_dep_nodes(u["xdeps"], self.host_node[rank])
        self.gap(rank, u, deps)
        meas = u["device_us"] if np.isfinite(u.get("device_us", np.nan)) else u["dur"]
        kind, name, stream = u["kind"], u["name"], u["stream"]
        if kind == "op" and self.cost.same_device and self.has_times and u["label"] in FIRST_ORDER_LABELS:
            kind = "unmodelled"  # its traced time, a measurement of the target (costed as an unmodelled op's)
        if kind == "op":
            row = {**u["row"], "device": self.tgt.device.key}
            if self.on_cpu:
                nid = host = self.add(rank, stream, name, u["label"], u["dur"], op=row, kind="compute", deps=deps,
                                      phase=u["phase"])
            else:
                host = self.launch(rank, u, deps)
                kdeps = [host]
                if u["phase"] == "optimizer" and self.last_comm[rank] is not None:
                    kdeps.append(self.last_comm[rank])
                if self.blocking[rank] is not None:  # the result of an inserted TP / PP collective is consumed
                    kdeps.append(self.blocking[rank])
                    self.blocking[rank] = None
                nid = self.add(rank, self.kernel_stream(rank, u), name, u["label"], meas, op=row, kind="compute",
                               deps=kdeps, phase=u["phase"])
        elif kind == "unmodelled" and not self.on_cpu and np.isfinite(u.get("device_us", np.nan)):
            # a GPU op nobody maps: its kernels' measured time on its stream (traced device only)
            host = self.launch(rank, u, deps)
            nid = self.add(rank, self.kernel_stream(rank, u), name, u["label"], meas,
                           duration_us=meas if self.cost.same_device else 0.0, kind="compute", deps=[host],
                           phase=u["phase"])
        else:  # view / unmodelled: host time (unmodelled: the trace's time only on the traced device)
            dur = (self.cost.unmodelled_us if kind == "unmodelled" else self.cost.host_us)(rank, u["dur"], *_recorded(u))
            if u.get(FUSED_COLUMN):  # fused away by a compiler (trace_fusion): no dispatch of its own
                dur = 0.0
            host_meas = u["dur"]
            if not self.on_cpu and name in SYNC_OPS:
                # the host waits for the device: the wait comes from the dependency (its traced time is that wait)
                streams = [*self.kstreams[rank], COMM_STREAM]
                deps = [*deps, *[w for w in (self.g.last(rank, s) for s in streams) if w is not None]]
                dur = host_meas = 0.0
            nid = host = self.add(rank, stream, name, u["label"] if kind == "unmodelled" else VIEW_LABEL, host_meas,
                                  duration_us=dur, kind="cpu" if kind == "view" or not self.on_cpu else "compute",
                                  deps=deps, phase=u["phase"], **self.host_counts(rank, u, kernels=False))
        self.node[rank][i], self.host_node[rank][i] = nid, host

    def collective(self, members: tuple[int, ...], pos: list[int]) -> None:
        """The collective every member of a group has reached (unit ``pos[m]`` of each member ``m``)."""
        g, tgt = self.g, self.tgt
        us = {m: self.rows[m][pos[m]] for m in members}
        u0 = us[members[0]]
        rows, deps, meas, launches = [], {}, [], {}
        asynchronous = self.on_cpu and all(us[m]["async_comm"] for m in members)
        for m in members:
            um = us[m]
            d = cross_dep_nodes(um["xdeps"], self.host_node[m])
            self.gap(m, um, d)
            n_coll = max(len(members), int(um["row"].get("n_ranks", 1)))
            rows.append({**{k: v for k, v in um["row"].items() if k != "blocking"}, "device": tgt.device.key,
                         "system": tgt.system, "n_ranks": n_coll,
                         "n_nodes": tgt.nodes(n_coll)})
            if self.on_cpu:
                if asynchronous:  # gloo's thread picks the work up as the call starts
                    prev = g.last(m, um["stream"])
                    d += [prev] if prev is not None else []
                    meas.append(um["backend_end"] - um["ts"])  # from the call on: pick-up + work
                else:
                    meas.append(um["dur"])
            else:
                # NCCL: the comm stream waits on an event of the caller's stream; a trace does not say which of
                # the rank's kernel streams that is, or which side streams were joined into it, so the
                # collective waits for the kernels launched before it on every kernel stream of the rank
                launches[m] = self.launch(m, um, d, "collective_launch")
                d.append(launches[m])
                d += [k for k in (g.last(m, s) for s in self.kstreams[m]) if k is not None]
                meas.append(um["device_us"] if np.isfinite(um.get("device_us", np.nan)) else um["dur"])
            deps[m] = d
        name = u0["name"]
        if self.on_cpu and not asynchronous:
            # a blocking gloo call: the calling thread waits (the collective sits on the caller's stream)
            streams = {us[m]["stream"] for m in members}
            if len(streams) != 1:
                raise InvalidInputError(f"collective {name} is called from different threads on different ranks; "
                                        "not supported")
            ids = g.collective(name, list(members), rows, deps=deps, stream=streams.pop(), launch=False)
        else:
            ids = g.collective(name, list(members), rows, deps=deps, stream=COMM_STREAM, launch=False)
        timed = [x for x in meas if np.isfinite(x)]  # none in an execution trace alone (no times)
        coll_meas = float(min(timed)) if timed else (float("nan") if len(meas) else 0.0)
        self._record_new("collective", coll_meas)
        for m in members:
            um, nid = us[m], ids[m]
            host = nid
            if asynchronous:  # the call itself: enqueue on the caller's thread
                host = self.add(m, um["stream"], f"enqueue {name}", "collective enqueue", um["dur"],
                                duration_us=self.cost.host_us(m, um["dur"], *_recorded(um)), kind="cpu",
                                phase=um["phase"])
                self.pending[m][pos[m]] = nid
            elif not self.on_cpu:
                host = launches[m]
            self.node[m][pos[m]], self.host_node[m][pos[m]] = nid, host
            self.last_comm[m] = nid
            if um["row"].get("blocking"):
                self.blocking[m] = nid

    def finish(self) -> None:
        """Trailing host time of each rank's main thread; the step waits for collectives nobody waited for."""
        for r in range(len(self.traces)):
            waits = list(self.pending[r].values())
            self.pending[r].clear()
            trailing = float(self.scheds[r].attrs.get("trailing_gap_us", 0.0))
            events = float(self.scheds[r].attrs.get("trailing_events", 0.0))
            if self.has_times and self.cost.keep_host and trailing > 0:
                self.add(r, HOST, "host gap", GAP_LABEL, trailing, duration_us=self.cost.gap_us(r, trailing),
                         kind="cpu", deps=waits)
            elif self.model_host and events > 0 and not self.compiled[r]:  # host ops after the last unit
                self.add(r, HOST, "host gap", GAP_LABEL, trailing if self.has_times else 0.0, kind="cpu", deps=waits,
                         host_ops=events)
            elif waits:
                self.add(r, HOST, "wait", WAIT_LABEL, 0.0, kind="cpu", deps=waits)


def _recorded(u: dict[str, Any]) -> tuple[float, float, float]:
    """Events, inputs and kernel launches the profiler recorded inside unit ``u`` (0 where a transform made it)."""
    return tuple(float(u.get(c, 0.0) or 0.0) for c in ("n_events", "n_inputs", "n_launch"))  # type: ignore[return-value]


#: Collectives whose message is the same size on every member (an all-to-all's splits may differ).
SAME_SIZE_COLLECTIVES = frozenset({"all_reduce", "broadcast", "all_gather", "reduce_scatter", "reduce", "send_recv"})


def _check_collective(traces: list[RankTrace], units: list[dict[str, Any]], members: tuple[int, ...], pg: str,
                      k: int) -> None:
    """Refuse the ``k``-th collective of group ``pg`` where its members disagree on what it is (another op, or
    another message size): ranks of different jobs (another model, another batch) or of different steps."""
    ops = [(u["row"].get("op"), u["row"].get("size_bytes")) for u in units]
    kinds = {op for op, _ in ops}
    if len(kinds) == 1 and (kinds.pop() not in SAME_SIZE_COLLECTIVES or len({size for _, size in ops}) == 1):
        return
    detail = ", ".join(f"rank {traces[m].rank}: {u['name']} of {size} bytes"
                       for m, u, (_, size) in zip(members, units, ops, strict=True))
    raise InvalidInputError(f"collective #{k} of process group {pg} differs across the ranks ({detail}): the traces "
                            "are not of one job (another model or batch) or not of the same step; give one trace "
                            "per rank of one recording")


def _group_of(trace: RankTrace, n_ranks: int, rank: int, pg: str, n_row: int) -> tuple[str, tuple[int, ...]]:
    groups = trace.process_groups
    if pg and pg in groups:
        return pg, groups[pg]
    if len(groups) == 1:
        k, v = next(iter(groups.items()))
        return k, v
    return pg or "0", tuple(range(n_ranks)) if n_row >= n_ranks else (rank,)


def _overhead_info(costing: HostCosting) -> dict[str, Any]:
    """What recording cost the traced host, as the traces measured it (``measured: False``: they do not say)."""
    measured = [(r, o) for r, o in enumerate(costing.overheads) if o is not None]
    if not measured:
        return {"measured": False}
    first = measured[0][1]
    return {"measured": True, "ranks": len(measured), "per_event_us": first.per_event_us,
            "per_input_us": first.per_input_us, "per_launch_us": first.per_launch_us,
            "execution_trace": first.execution_trace, "gap_share": list(costing.gap_shares),
            "in_units_ms": [costing.unit_costs_us[r] / 1e3 for r, _ in measured], "kept": costing.keep_host}


def _traced_tf32(trace: RankTrace, catalog: Catalog) -> bool:
    """Whether the GPU a trace was recorded on has TF32 units (True when the trace names no GPU the catalog
    knows: its kernels are then taken at their word)."""
    key = traced_gpu(trace, catalog)
    return key is None or "tf32" in catalog.device(key).peak_flops


def _precision_info(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """One account of the fp32 math over the ranks (:func:`hybrid.data.traces.precision.apply_fp32_precision`):
    op counts summed; a mode or source that differs between ranks reads ``mixed``."""
    out: dict[str, Any] = {"target_has_tf32": per_rank[0]["target_has_tf32"]}
    for switch in SWITCH_OPS:
        accs = [p[switch] for p in per_rank]
        modes, sources = {a["mode"] for a in accs}, {a["source"] for a in accs}
        out[switch] = {"mode": modes.pop() if len(modes) == 1 else "mixed",
                       "source": sources.pop() if len(sources) == 1 else "mixed",
                       "fp32_ops": sum(a["fp32_ops"] for a in accs), "tf32_ops": sum(a["tf32_ops"] for a in accs)}
    return out


def build_trace_graph(traces: list[RankTrace], target: str, catalog: Catalog | None = None, *,
                      same_device: bool | None = None, host_scale: float | list[float] = 1.0,
                      host: str = "auto", transform: Any = None,
                      fp32_precision: Fp32Precision | None = None) -> TraceIteration:
    """The task graph of the traced step on ``target`` (a catalog device or system; see module docstring).

    ``same_device`` says whether ``target`` is the hardware the traces were recorded on (default: decided from
    the traces, :func:`hybrid.workloads.trace_costing.is_same_device`). ``host_scale`` (one value, or one per
    rank) multiplies every host time taken from the trace (gaps, views, launches, unmodelled ops): the share of
    the traced wall time the traced process actually ran on a core, when the trace was recorded on a shared,
    loaded machine (CPU time / wall time of the traced step; 1 = idle machine). ``host``: ``"trace"`` keeps the
    traced host time as the target's host time, ``"model"`` drops it for the engine's host model (every recorded
    host op and kernel launch at the overheads' ``host_op_us`` / ``kernel_launch_us``),
    ``"auto"`` picks ``"trace"`` for a CPU trace on its own CPU or a GPU trace that says what recording cost its
    host, else ``"model"``
    (:class:`hybrid.workloads.trace_costing.HostCosting`). ``transform(trace, units) -> units`` may rewrite each
    rank's units first (parallel modes, see :mod:`hybrid.workloads.trace_parallel`). ``fp32_precision``: whether
    fp32 matmuls and convolutions run on TF32 tensor cores (default: as the trace says, else PyTorch's defaults;
    :mod:`hybrid.data.traces.precision`); the account is ``info["fp32_precision"]``.
    """
    if not traces:
        raise InvalidInputError("no traces given")
    cat = catalog or default_catalog()
    tgt = resolve_target(target, cat)
    named = tgt.system  # the target as named; the collectives of a bare CPU may run on its catalog system
    coll_sys, coll_note = cpu_collective_system(cat, tgt.device, tgt.system, len(traces))
    if coll_sys is not None:
        tgt = Target(tgt.device, coll_sys.key, coll_sys.gpus_per_node)
    same = is_same_device(traces, tgt, cat) if same_device is None else bool(same_device)
    if same_device:
        conflict = same_device_conflict(traces, tgt, cat)
        if conflict:
            raise InvalidInputError(f"--same-device (same_device=True) cannot hold: {conflict}; the target would "
                                    "be priced with the traced times (use --other-device, or let the traces decide)")
    if host == "trace" and not all(t.has_times for t in traces):
        # (auto resolves to model there: nothing to keep; asked for explicitly, it was accepted and dropped silently)
        raise InvalidInputError("--host trace keeps the traced host time, but an execution trace alone has no times "
                                "(no host gaps or op durations to keep): link it with the Chrome trace of the same "
                                "step, or use --host model")
    kind = kind_conflict(traces, tgt) if host == "trace" else None
    if kind:  # the traced host time as the target's: only meaningful on the same kind of hardware
        raise InvalidInputError(f"--host trace keeps the traced host time, but {kind}: a CPU trace's op times are "
                                "its compute, not the launches of a GPU step (use --host model, the default there)")
    costing, host = HostCosting.resolve(traces, same, host, host_scale)
    if same and any(t.device == "meta" for t in traces):
        raise InvalidInputError("a trace recorded on the meta device has no hardware to compare with: predict a real "
                                "device (not --same-device)")
    if same and not all(t.has_times for t in traces):
        raise InvalidInputError("an execution trace alone has no times: it cannot be costed as the traced device "
                                "(link it with the Chrome trace of the same step, or predict another device; "
                                "--other-device prices this one from the ops alone)")
    n_ranks = len(traces)
    scheds = []
    has_tf32 = "tf32" in tgt.device.peak_flops
    precision_info = []
    math_info: list[dict[str, Any]] = []
    own_time: list[pd.DataFrame] = []
    for tr, u in zip(traces, job_units(traces), strict=True):
        own = u.attrs.pop(OWN_TIME_ATTR, None)
        if own and len(own["name"]):
            own_time.append(pd.DataFrame(own).assign(rank=tr.rank))
        # a 16-bit attention's math fallback first: its ops are no fp32 matmuls of the program on a GPU
        u, math_acc = apply_math_attention_dtype(u, tr.device, tgt.device.kind != "cpu")
        math_info.append(math_acc)
        u, acc = apply_fp32_precision(u, tr.meta, has_tf32, fp32_precision, kernels_tell=_traced_tf32(tr, cat))
        precision_info.append(acc)
        if transform is not None:
            u = transform(tr, u).reset_index(drop=True)
        scheds.append(rank_schedule(tr, u))
    costing = costing.with_gaps(traces, scheds)
    et_only = [(tr, tr.meta["et_only_ops"]) for tr in traces if tr.meta.get("et_only_ops")]
    b = _Builder(traces, tgt, costing, scheds)
    # walk all ranks together; collectives are added once every member of their group has reached them
    pos = [0] * n_ranks
    kind_of = [s["kind"].to_numpy() for s in scheds]
    coll_count: dict[tuple[int, str], int] = defaultdict(int)

    def group(r: int) -> tuple[str, tuple[int, ...]]:
        u = b.rows[r][pos[r]]
        return _group_of(traces[r], n_ranks, r, u["pg"], int(u["row"]["n_ranks"]))

    while True:
        progressed = False
        waiting: dict[int, tuple[str, int]] = {}
        for r in range(n_ranks):
            n_r = len(kind_of[r])
            while pos[r] < n_r and kind_of[r][pos[r]] != "collective":
                b.place(r, pos[r])
                pos[r] += 1
                progressed = True
            if pos[r] < n_r:
                pg, _ = group(r)
                waiting[r] = (pg, coll_count[(r, pg)])
        if not waiting:
            break
        added = False
        for r, (pg, k) in sorted(waiting.items()):
            members = tuple(m for m in group(r)[1] if m < n_ranks)
            if not all(waiting.get(m) == (pg, k) for m in members):
                continue
            _check_collective(traces, [b.rows[m][pos[m]] for m in members], members, pg, k)
            b.collective(members, pos)
            for m in members:
                coll_count[(m, pg)] += 1
                pos[m] += 1
            added = progressed = True
            break
        if not added and not progressed:
            detail = ", ".join(f"rank {r} at {b.rows[r][pos[r]]['name']} #{k} of group {pg}"
                               for r, (pg, k) in sorted(waiting.items()))
            raise InvalidInputError(f"collectives do not match across the ranks' traces ({detail})")
    b.finish()
    if len(b.g) == 0:
        raise InvalidInputError("the traces hold no ops to simulate")
    has_collectives = any(str(lab).startswith("collective") for lab in b.labels)
    units = []
    for r, (tr, s) in enumerate(zip(traces, scheds, strict=True)):
        s = s.drop(columns=["xdeps", "waits_for"])
        s["rank"] = tr.rank
        s["node"] = b.node[r]
        units.append(s)
    it = TraceIteration(b.g, traces, tgt, same, pd.concat(units, ignore_index=True), b.labels, b.measured,
                          info={"target": named, "device": tgt.device.key, "same_device": same, "host": host,
                                # where the collectives are priced, and what to know about it (a bare CPU device)
                                **({"collective_system": tgt.system, "notes": [coll_note] if coll_note else []}
                                   if has_collectives else {"notes": []}),
                                **({"et_only_ops": {tr.rank: ops for tr, ops in et_only}} if et_only else {}),
                                "traced_device": sorted({t.device for t in traces}),
                                "recording_overhead": _overhead_info(costing),
                                "fp32_precision": _precision_info(precision_info),
                                "own_time": (pd.concat(own_time, ignore_index=True) if own_time
                                             else pd.DataFrame(columns=["name", "tid", "ts", "own_us", "rank"])),
                                # a 16-bit attention's math fallback, upcast to fp32 on the traced CPU / meta
                                # device, priced in its own dtype on a GPU (ops and casts summed over ranks)
                                "math_attention": {"dtype": "/".join(sorted({m["dtype"] for m in math_info
                                                                              if m["dtype"]})),
                                                   "ops": sum(m["ops"] for m in math_info),
                                                   "casts": sum(m["casts"] for m in math_info),
                                                   # on a CPU target: kept in fp32 as traced
                                                   "fp32_ops": sum(m["fp32_ops"] for m in math_info)},
                                # a transform that splits the traced tensors over ranks (tensor / pipeline
                                # parallelism): the memory measured when recording is not any rank's
                                "memory_as_traced": not getattr(transform, "splits_memory", False)},
                          catalog=cat)
    for tr in traces:
        if "step" not in tr.meta:
            # no ``ProfilerStep#N`` to cut one iteration from (a ``torch.profiler.profile`` without a schedule's
            # ``prof.step()``): the whole recorded window is the "step", a profile of 3 iterations 3x one
            span = f" ({tr.step_us / 1e3:.3f} ms)" if tr.has_times else ""
            it.info["notes"].append(
                f"{tr.path}: no ProfilerStep#N annotation, so everything it recorded{span} is predicted as one step "
                "(a profile of several iterations gives their sum); record one step with `hybrid trace record`, or "
                "call prof.step() after each iteration (a torch.profiler schedule) to predict one")
    if transform is None and has_collectives and all(tr.format == "et" for tr in traces):
        n = sum(lab == "collective" for lab in b.labels)
        it.info["notes"].append(
            f"{traces[0].path}: an execution trace alone names no rank or world size: its {n} collective(s) are "
            "priced as one process's (a group of one, exchanging nothing), not as the job's; give each rank's "
            "Chrome trace (kineto_rank<r>.json) with its execution trace")
    for tr, ops in et_only:
        n = sum(ops.values())
        names = ", ".join(f"{k} x{v}" for k, v in list(ops.items())[:3]) + (", ..." if len(ops) > 3 else "")
        it.info["notes"].append(
            f"rank {tr.rank}: its execution trace ({tr.meta.get('linked_et')}) holds {n} ATen op(s) its Chrome trace "
            f"did not record ({names}), left out of this prediction: ops of a thread the profiler did not follow "
            "(torch.profiler records the thread that started it and autograd's; the execution trace every thread), "
            "e.g. a Python thread the step starts or hands work to, or ops recorded outside the Chrome trace's "
            "step; the execution trace alone prices them (without times)")
    return it
