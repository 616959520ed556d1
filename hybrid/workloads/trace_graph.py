"""A traced training/inference step (one PyTorch trace per rank) as a task graph of the ONE engine.

Every rank's host ops are cut into *units* (:func:`trace_units`): walking each thread's op tree from the top,
an op the family mapping (:mod:`hybrid.data.traces.opmap`) can cost becomes one unit (``aten::linear`` is one
GEMM, whatever it calls inside); an op it cannot cost is looked into, and only a leaf nobody maps is an
*unmodelled* unit. Views and allocations are host-only units; collectives are units that synchronise ranks.
Whatever time on a thread is not inside a unit (Python, the autograd engine, dispatch of composite ops) is kept
as measured host *gaps* between units: "CPU ops and launch gaps" of the trace.

:func:`build_trace_graph` turns the units into a :class:`~hybrid.engine.graph.TaskGraph` for a target:

* on a CPU target the host executes every op itself: units and gaps run one after another on the thread's stream
  (``TaskGraph.synchronous_host`` semantics), collectives block it (gloo);
* on a GPU target each costed unit is a kernel on the compute stream with its launch on the host stream (the
  host runs ahead, as CUDA does); collectives run on the comm stream after the kernels before them; host
  syncs (``aten::item``) wait for the GPU.

Costed units carry a canonical op row for the target device (predicted by any
:class:`~hybrid.engine.costs.OpCostModel`); host units carry their measured time; unmodelled units carry the
trace's own time when the target is the traced device and nothing otherwise (they are listed in
:attr:`TraceIteration.unmodelled` either way, never dropped silently).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hybrid.data.traces.opmap import VIEW_OPS, OpMapping, base_name, map_op
from hybrid.data.traces.parse import RankTrace
from hybrid.engine.graph import COMM_STREAM, COMPUTE_STREAM, HOST, TaskGraph
from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import Catalog, default_catalog
from hybrid.workloads.dlrm_graph import Target, resolve_target

#: Phase of an op, from its nearest enclosing marker (name prefix -> phase).
PHASE_MARKERS = (("Optimizer.step", "optimizer"), ("Optimizer.zero_grad", "zero_grad"),
                 ("autograd::engine::evaluate_function", "backward"), ("DistributedDataParallel.forward", "forward"))
#: Host ops that wait for the device (a GPU target's host stream waits for its compute stream).
SYNC_OPS = frozenset({"aten::item", "aten::_local_scalar_dense", "aten::nonzero", "cudaDeviceSynchronize",
                      "cudaStreamSynchronize"})
#: Unit kinds.
UNIT_KINDS = ("op", "collective", "view", "unmodelled")
#: Breakdown labels of host time that is not an op.
GAP_LABEL, VIEW_LABEL, UNMODELLED_LABEL = "host gaps", "view/host ops", "unmodelled"


def _phase_of(ops: pd.DataFrame) -> np.ndarray:
    """Phase per op: its own marker, else its parent's (rows come parent-first on each thread)."""
    names = ops["name"].astype(str).to_numpy()
    parent = ops["parent"].to_numpy()
    phase = np.empty(len(ops), dtype=object)
    for i in range(len(ops)):
        own = next((ph for prefix, ph in PHASE_MARKERS if names[i].startswith(prefix)), None)
        phase[i] = own or (phase[parent[i]] if parent[i] >= 0 else "forward")
    return phase


def _view_named(name: str) -> bool:
    """An op that launches no kernel by itself: ATen views/allocations and autograd bookkeeping."""
    if name.startswith("aten::"):
        return base_name(name) in VIEW_OPS or base_name(name).rstrip("_") in VIEW_OPS
    return "::" not in name and (name in VIEW_OPS or name.endswith("Backward0") or name.endswith("Backward1"))


def trace_units(trace: RankTrace) -> pd.DataFrame:
    """The units of one rank's trace (see the module docstring), in time order per thread.

    Columns: ``op_id, tid, name, ts, dur, kind, label, row, phase, pg, device_us`` (``device_us``: measured
    time of the unit's GPU kernels; NaN where the trace has no kernels) and ``kstream`` (its kernels' stream).
    """
    ops = trace.ops
    if ops.empty:
        raise InvalidInputError(f"{trace.path}: no ops inside the traced step")
    n = len(ops)
    children: list[list[int]] = [[] for _ in range(n)]
    for i, p in enumerate(ops["parent"].to_numpy()):
        if p >= 0:
            children[p].append(i)
    phase = _phase_of(ops)
    names = ops["name"].astype(str).to_numpy()
    cats = ops["cat"].astype(str).to_numpy()
    dims, types, outs, extra = ops["dims"].to_numpy(), ops["types"].to_numpy(), ops["out_dims"].to_numpy(), \
        ops["extra"].to_numpy()
    has_c10d = bool(np.any(np.char.startswith(names.astype(str), "c10d::")))
    group_size = max([len(v) for v in trace.process_groups.values()] + [trace.world_size])
    transparent = np.array([c in ("user_annotation", "python_function") or nm.startswith("ProfilerStep#")
                            for c, nm in zip(cats, names, strict=True)])
    mapped: list[Any] = [None if transparent[i] else
                         map_op(names[i], dims[i] or [], types[i] or [], outs[i] or [], extra[i] or {},
                                leaf=not children[i], group_size=group_size) for i in range(n)]
    # does an op's subtree hold anything the families cost? (children come after their parent)
    costed = np.array([m is not None and m.kind in ("op", "collective") for m in mapped])
    # ... or work nobody models (a leaf that is neither mapped nor a view)?
    opaque = np.array([mapped[i] is None and not transparent[i] and not _view_named(names[i]) for i in range(n)])
    parent = ops["parent"].to_numpy()
    for i in range(n - 1, -1, -1):
        if parent[i] >= 0:
            costed[parent[i]] |= costed[i]
            opaque[parent[i]] |= opaque[i]
    dur = ops["dur"].to_numpy(dtype=np.float64)
    child_sum = np.zeros(n)
    has_parent = parent >= 0
    np.add.at(child_sum, parent[has_parent], dur[has_parent])
    with np.errstate(invalid="ignore", divide="ignore"):
        self_share = np.where(dur > 0, 1.0 - child_sum / dur, 0.0)
    units: list[dict[str, Any]] = []
    roots = [i for i in range(n) if ops["parent"].iat[i] < 0]
    stack = list(reversed(roots))
    while stack:
        i = stack.pop()
        name = names[i]
        kids = children[i]
        if transparent[i]:
            stack.extend(reversed(kids))
            continue
        if has_c10d and (name.startswith("gloo:") or name.startswith("nccl:")):
            continue  # backend work of a c10d collective that is a unit on the calling thread (kept there)
        mp = mapped[i]
        if mp is None and kids:
            aten = name.startswith("aten::")
            # an ATen op that spends most of its time outside its children is a kernel with helpers (a pooling
            # backward that zeroes its output first): one unit; a composite that only calls others is looked into
            own = self_share[i] > 0.5 and aten and not _view_named(name)
            if (costed[i] and not own) or (opaque[i] and not aten):
                stack.extend(reversed(kids))  # look inside (wrappers like autograd nodes are looked through)
                continue
            if not opaque[i] or _view_named(name):
                mp = OpMapping("view", "view")  # views and wrappers of views: host time only
        # else an ATen op nobody maps whose inside holds nothing costable is ONE unmodelled unit (its whole time)
        kind, label, row = ("unmodelled", UNMODELLED_LABEL, None) if mp is None else (mp.kind, mp.label, mp.row)
        if kind == "view":
            label = VIEW_LABEL
        units.append({"op_id": i, "tid": ops["tid"].iat[i], "name": name, "ts": float(ops["ts"].iat[i]),
                      "dur": float(ops["dur"].iat[i]), "kind": kind, "label": label, "row": row,
                      "phase": phase[i], "pg": str(ops["pg"].iat[i] or "")})
    out = pd.DataFrame(units, columns=["op_id", "tid", "name", "ts", "dur", "kind", "label", "row", "phase", "pg"])
    out["device_us"] = np.nan
    out["kstream"] = ""
    if len(trace.kernels) and len(out):
        # kernels of a unit: those launched by the unit's op or any op inside it
        top = np.arange(n)
        unit_of_op = np.full(n, -1)
        unit_of_op[out["op_id"].to_numpy()] = np.arange(len(out))
        par = ops["parent"].to_numpy()
        owner = unit_of_op.copy()
        for i in range(n):  # parent-first order: inherit the enclosing unit
            if owner[i] < 0 and par[i] >= 0:
                owner[i] = owner[par[i]]
        del top
        k = trace.kernels
        ku = owner[np.clip(k["op"].to_numpy(dtype=np.int64), 0, n - 1)]
        ku = np.where(k["op"].to_numpy() >= 0, ku, -1)
        ok = ku >= 0
        sums = np.bincount(ku[ok], k["dur"].to_numpy(dtype=np.float64)[ok], minlength=len(out))
        has = np.bincount(ku[ok], minlength=len(out)) > 0
        out["device_us"] = np.where(has, sums, np.nan)
        first_stream = pd.Series(k["stream"].to_numpy()[ok]).groupby(ku[ok]).first()
        out.loc[first_stream.index, "kstream"] = first_stream.astype(str).to_numpy()
    return out.sort_values(["tid", "ts"], kind="stable").reset_index(drop=True)


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

    @property
    def measured_step_us(self) -> float:
        """The traced step time: the slowest rank's step (NaN without times)."""
        return float(max(t.step_us for t in self.traces))

    def unmodelled(self) -> pd.DataFrame:
        """Ops no family covers, per name: count, measured time (us, all ranks) and how they were costed."""
        u = self.units[self.units["kind"] == "unmodelled"]
        cols = ["name", "count", "measured_us", "costed_as"]
        if u.empty:
            return pd.DataFrame(columns=cols)
        t = u.groupby("name").agg(count=("dur", "size"), measured_us=("dur", "sum")).reset_index()
        t["costed_as"] = "trace time (target = traced device)" if self.same_device else "unmodelled (0 us)"
        return t.sort_values("measured_us", ascending=False, kind="stable")[cols].reset_index(drop=True)


def _main_tid(trace: RankTrace, units: pd.DataFrame) -> str:
    ops = trace.ops
    step = ops[ops["name"].astype(str).str.startswith("ProfilerStep#")]
    if len(step):
        return str(step["tid"].iat[0])
    busy = units.groupby("tid")["dur"].sum()
    return str(busy.idxmax()) if len(busy) else str(ops["tid"].iat[0])


def _is_same_device(traces: list[RankTrace], target: Target, catalog: Catalog) -> bool:
    dev = {t.device for t in traces}
    if dev == {"cpu"}:
        return target.device.kind == "cpu"
    if dev == {"cuda"}:
        names = {t.device_name for t in traces}
        if len(names) != 1 or not next(iter(names)):
            return False
        key = catalog.resolve_device(next(iter(names)).replace("NVIDIA ", ""), missing_ok=True)
        return key == target.device.key
    return False


def build_trace_graph(traces: list[RankTrace], target: str, catalog: Catalog | None = None, *,
                      same_device: bool | None = None, host_scale: float | list[float] = 1.0,
                      host: str = "auto", transform: Any = None) -> TraceIteration:
    """The task graph of the traced step on ``target`` (a catalog device or system; see module docstring).

    ``same_device`` says whether ``target`` is the hardware the traces were recorded on (default: decided from
    the traces: a CPU trace and a CPU target, or a GPU trace whose device name resolves to the target device).
    ``host_scale`` (one value, or one per rank) multiplies every host time taken from the trace (gaps, views,
    unmodelled ops): the share of the traced wall time the traced process actually ran on a core, when the
    trace was recorded on a shared, loaded machine (CPU time / wall time of the traced step; 1 = idle machine).
    ``host``: ``"trace"`` keeps the traced host time (gaps, views) as the target's host time (right when the
    target host is the traced one: same device, or a GPU trace for another GPU of the same kind of host);
    ``"model"`` drops it and lets the engine's per-launch overheads stand for the target's host (a trace recorded
    on a CPU or on the meta device for a GPU target); ``"auto"`` picks ``"trace"`` for the same device or a GPU
    trace, else ``"model"``. ``transform(trace, units) -> units`` may rewrite each rank's units first (parallel
    modes, see :mod:`hybrid.workloads.trace_parallel`).
    """
    if host not in ("auto", "trace", "model"):
        raise InvalidInputError(f"host must be auto, trace or model, got {host!r}")
    scales = [float(host_scale)] * len(traces) if np.isscalar(host_scale) else [float(x) for x in host_scale]
    if len(scales) != len(traces) or not all(np.isfinite(x) and 0 < x <= 1.5 for x in scales):
        raise InvalidInputError(f"host_scale must be one value in (0, 1.5] or one per rank, got {host_scale!r}")
    if not traces:
        raise InvalidInputError("no traces given")
    cat = catalog or default_catalog()
    tgt = resolve_target(target, cat)
    same = _is_same_device(traces, tgt, cat) if same_device is None else bool(same_device)
    if same and any(t.device == "meta" for t in traces):
        raise InvalidInputError("a trace recorded on the meta device has no hardware to compare with: predict a real "
                                "device (not --same-device)")
    if same and not all(t.has_times for t in traces):
        raise InvalidInputError("an execution trace alone has no times: it cannot be costed as the traced device "
                                "(link it with the Chrome trace of the same step, or predict another device)")
    n_ranks = len(traces)
    on_cpu = tgt.device.kind == "cpu"
    if host == "auto":
        host = "trace" if same or all(t.device == "cuda" for t in traces) else "model"
    keep_host = host == "trace"
    g = TaskGraph(n_ranks=n_ranks)
    labels: list[str] = []
    measured: list[float] = []
    all_units = []
    seqs: list[list[dict[str, Any]]] = []
    for tr in traces:
        u = trace_units(tr)
        if transform is not None:
            u = transform(tr, u).reset_index(drop=True)
        u["rank"] = tr.rank
        main = _main_tid(tr, u)
        u["stream"] = np.where(u["tid"].astype(str) == main, HOST, "host:" + u["tid"].astype(str))
        all_units.append(u)
        seqs.append(u.to_dict("records"))
    units = pd.concat(all_units, ignore_index=True)
    units["node"] = -1
    system = tgt.system
    dev_key = tgt.device.key

    def add(rank: int, stream: str, name: str, label: str, meas: float, **kw: Any) -> int:
        nid = g.add(rank, stream, name, **kw)
        labels.append(label)
        measured.append(float(meas) if np.isfinite(meas) else 0.0)
        return nid

    # per rank: host-stream cursor (end time of the previous unit per thread, for gaps) and cross-thread deps
    trace_of = {tr.rank: tr for tr in traces}
    prev_end: dict[tuple[int, str], float] = {}
    last_comm: dict[int, int | None] = defaultdict(lambda: None)
    node_ends: dict[tuple[int, str], list[tuple[float, int]]] = defaultdict(list)
    has_times = all(t.has_times for t in traces)

    def host_gap(rank: int, stream: str, ts: float) -> None:
        if not has_times or not keep_host:
            return
        key = (rank, stream)
        start = prev_end.get(key, trace_of[rank].window[0] if stream == HOST else ts)
        gap = ts - start
        if gap > 0:  # measured: the traced gap; predicted: deflated by host_scale
            add(rank, stream, "host gap", GAP_LABEL, gap, duration_us=gap * scales[rank], kind="cpu")

    def cross_deps(rank: int, stream: str, ts: float) -> list[int]:
        """Latest node of each other thread of the rank that ended before ``ts`` (trace order across threads)."""
        out = []
        for (r, s), ends in node_ends.items():
            if r != rank or s == stream or not ends:
                continue
            k = int(np.searchsorted([e for e, _ in ends], ts + 1e-6, side="right")) - 1
            if k >= 0:
                out.append(ends[k][1])
        return out

    def place(rank: int, u: dict[str, Any], idx: int) -> None:
        stream = u["stream"]
        host_gap(rank, stream, u["ts"])
        deps = cross_deps(rank, stream, u["ts"]) if has_times else []
        meas = u["device_us"] if np.isfinite(u.get("device_us", np.nan)) else u["dur"]
        kind = u["kind"]
        name = u["name"]
        if kind == "op":
            row = {**u["row"], "device": dev_key}
            if on_cpu:
                nid = add(rank, stream, name, u["label"], u["dur"], op=row, kind="compute", deps=deps,
                          phase=u["phase"])
            else:
                launch = add(rank, stream, f"launch {name}", "launch", 0.0, kind="cpu", overhead="kernel_launch",
                             deps=deps, phase=u["phase"])
                kdeps = [launch]
                if u["phase"] == "optimizer" and last_comm[rank] is not None:
                    kdeps.append(last_comm[rank])
                kstream = f"stream {u['kstream']}" if u.get("kstream") else COMPUTE_STREAM
                nid = add(rank, kstream, name, u["label"], meas, op=row, kind="compute", deps=kdeps,
                          phase=u["phase"])
                node_ends[(rank, stream)].append((u["ts"] + u["dur"], launch))
                prev_end[(rank, stream)] = u["ts"] + u["dur"]
                units.loc[idx, "node"] = nid
                return
        else:  # view / unmodelled: host time (unmodelled: the trace's time only on the traced device)
            if (kind == "unmodelled" and not same) or (kind == "view" and not keep_host):
                dur = 0.0
            else:
                dur = float(u["dur"]) * scales[rank] if np.isfinite(u["dur"]) else 0.0
            host_kind = "cpu" if kind == "view" or on_cpu else "compute"
            host_meas = u["dur"]
            if not on_cpu and name in SYNC_OPS:
                # the host waits for the device: the wait comes from the dependency (its traced time is that wait)
                waits = [g.last(rank, s_) for (r_, s_) in g._streams if r_ == rank and s_ != stream
                         and not s_.startswith("host")]
                deps = [*deps, *[w for w in waits if w is not None]]
                dur = host_meas = 0.0
            if kind == "unmodelled" and not on_cpu and np.isfinite(u.get("device_us", np.nan)):
                # a GPU op nobody maps: its kernels' measured time on the compute stream (traced device only)
                kstream = f"stream {u['kstream']}" if u.get("kstream") else COMPUTE_STREAM
                launch = add(rank, stream, f"launch {name}", "launch", 0.0, kind="cpu", overhead="kernel_launch",
                             deps=deps, phase=u["phase"])
                nid = add(rank, kstream, name, u["label"], meas, duration_us=meas if same else 0.0,
                          kind="compute", deps=[launch], phase=u["phase"])
            else:
                nid = add(rank, stream, name, u["label"] if kind == "unmodelled" else VIEW_LABEL, host_meas,
                          duration_us=dur, kind=host_kind, deps=deps, phase=u["phase"])
        node_ends[(rank, stream)].append((u["ts"] + u["dur"], nid))
        prev_end[(rank, stream)] = u["ts"] + u["dur"]
        units.loc[idx, "node"] = nid

    # walk all ranks together; collectives are added once every member of their group has reached them
    offsets = np.cumsum([0] + [len(s) for s in seqs])
    pos = [0] * n_ranks
    coll_count: dict[tuple[int, str], int] = defaultdict(int)

    def group_of(rank: int, pg: str, n_row: int) -> tuple[str, tuple[int, ...]]:
        groups = trace_of[rank].process_groups
        if pg and pg in groups:
            return pg, groups[pg]
        if len(groups) == 1:
            k, v = next(iter(groups.items()))
            return k, v
        return pg or "0", tuple(range(n_ranks)) if n_row >= n_ranks else (rank,)

    while True:
        progressed = False
        waiting: dict[int, tuple[str, int]] = {}
        for r in range(n_ranks):
            s = seqs[r]
            while pos[r] < len(s) and s[pos[r]]["kind"] != "collective":
                place(r, s[pos[r]], int(offsets[r] + pos[r]))
                pos[r] += 1
                progressed = True
            if pos[r] < len(s):
                u = s[pos[r]]
                pg, _ = group_of(r, u["pg"], int(u["row"]["n_ranks"]))
                waiting[r] = (pg, coll_count[(r, pg)])
        if not waiting:
            break
        added = False
        for r, (pg, k) in sorted(waiting.items()):
            u = seqs[r][pos[r]]
            _, members = group_of(r, u["pg"], int(u["row"]["n_ranks"]))
            members = tuple(m for m in members if m < n_ranks)
            if not all(waiting.get(m) == (pg, k) for m in members):
                continue
            rows, deps, meas = [], {}, []
            for m in members:
                um = seqs[m][pos[m]]
                stream = um["stream"]
                host_gap(m, stream, um["ts"])
                n_coll = max(len(members), int(um["row"].get("n_ranks", 1)))
                rows.append({**um["row"], "device": dev_key, "system": system, "n_ranks": n_coll,
                             "n_nodes": tgt.nodes(n_coll)})
                d = cross_deps(m, stream, um["ts"]) if has_times else []
                if not on_cpu and g.last(m, COMPUTE_STREAM) is not None:
                    d.append(g.last(m, COMPUTE_STREAM))
                deps[m] = d
                meas.append(um["device_us"] if np.isfinite(um.get("device_us", np.nan)) else um["dur"])
            name = u["name"]
            if on_cpu:
                # gloo on a CPU: the calling thread blocks (the collective sits on the caller's stream)
                streams = {seqs[m][pos[m]]["stream"] for m in members}
                if len(streams) != 1:
                    raise InvalidInputError(f"collective {name} is called from different threads on different "
                                            "ranks; not supported")
                ids = g.collective(name, list(members), rows, deps=deps, stream=streams.pop(), launch=False)
            else:
                ids = g.collective(name, list(members), rows, deps=deps, stream=COMM_STREAM, launch=True)
            coll_meas = float(np.nanmin(meas)) if len(meas) else 0.0
            n_before = len(labels)
            # collective() adds launch and member nodes itself: record their labels / measured times
            for _ in range(len(g) - n_before):
                labels.append("collective launch")
                measured.append(0.0)
            for m in members:
                nid = ids[m]
                labels[nid] = "collective"
                measured[nid] = coll_meas
                um = seqs[m][pos[m]]
                units.loc[int(offsets[m] + pos[m]), "node"] = nid
                node_ends[(m, um["stream"])].append((um["ts"] + um["dur"], nid))
                prev_end[(m, um["stream"])] = um["ts"] + um["dur"]
                last_comm[m] = nid
                coll_count[(m, pg)] += 1
                pos[m] += 1
            added = progressed = True
            break
        if not added and not progressed:
            detail = ", ".join(f"rank {r} at {seqs[r][pos[r]]['name']} #{k} of group {pg}"
                               for r, (pg, k) in sorted(waiting.items()))
            raise InvalidInputError(f"collectives do not match across the ranks' traces ({detail})")
    # trailing host time of the measured step on each rank's main thread
    if has_times and keep_host:
        for tr in traces:
            end = prev_end.get((tr.rank, HOST))
            if end is not None and tr.window[1] - end > 0:
                add(tr.rank, HOST, "host gap", GAP_LABEL, tr.window[1] - end,
                    duration_us=(tr.window[1] - end) * scales[tr.rank], kind="cpu")
    if len(g) == 0:
        raise InvalidInputError("the traces hold no ops to simulate")
    return TraceIteration(g, traces, tgt, same, units, labels, measured,
                          info={"target": tgt.system, "device": dev_key, "same_device": same, "host": host,
                                "traced_device": sorted({t.device for t in traces})})


@dataclass
class TracePrediction:
    """A predicted (and, where the trace has times, re-simulated with measured times) traced step."""

    iteration: TraceIteration
    predicted: Any  # SimResult with the cost model's op times
    measured: Any | None  # SimResult with every node at its traced time (None without times)
    model_name: str = ""

    @property
    def predicted_us(self) -> float:
        return float(self.predicted.iteration_us)

    def breakdown(self) -> pd.DataFrame:
        """Predicted (and measured) time per breakdown label summed over nodes, plus node counts (rank 0..n)."""
        lab = np.asarray(self.iteration.node_label + [""] * (len(self.predicted.durations)
                                                               - len(self.iteration.node_label)), dtype=object)
        n = self.predicted.graph.n_real
        df = pd.DataFrame({"label": lab[:n], "predicted_us": self.predicted.durations[:n]})
        if self.measured is not None:
            df["measured_us"] = self.measured.durations[:n]
        out = df.groupby("label").agg(nodes=("predicted_us", "size"), predicted_us=("predicted_us", "sum"),
                                      **({"measured_us": ("measured_us", "sum")} if self.measured is not None
                                         else {}))
        out = out[out.index != "launch"] if (out.loc[["launch"], "predicted_us"].sum() == 0
                                              if "launch" in out.index else False) else out
        return out.sort_values("predicted_us", ascending=False).reset_index()

    def summary(self) -> dict[str, Any]:
        it = self.iteration
        meas = it.measured_step_us
        out: dict[str, Any] = {
            "target": it.info["target"], "device": it.info["device"], "model": self.model_name,
            "ranks": it.graph.n_ranks, "nodes": int(self.predicted.graph.n_real),
            "predicted_ms": self.predicted_us / 1e3,
            "traced_device": it.info["traced_device"], "same_device": it.same_device,
        }
        if it.same_device and np.isfinite(meas):
            out["measured_ms"] = meas / 1e3
            out["error_pct"] = (self.predicted_us / meas - 1.0) * 100.0
        if self.measured is not None and it.same_device:
            out["resimulated_measured_ms"] = float(self.measured.iteration_us) / 1e3
        unm = it.unmodelled()
        out["unmodelled"] = {"ops": int(unm["count"].sum()) if len(unm) else 0,
                             "measured_ms": float(unm["measured_us"].sum()) / 1e3 if len(unm) else 0.0,
                             "costed_as": ("trace time" if it.same_device else "not costed (0)"),
                             "by_name": unm.head(20).to_dict(orient="records")}
        bd = self.breakdown()
        out["breakdown_ms"] = {str(r["label"]): round(float(r["predicted_us"]) / 1e3, 6) for _, r in bd.iterrows()}
        if self.measured is not None and it.same_device:
            out["breakdown_measured_ms"] = {str(r["label"]): round(float(r["measured_us"]) / 1e3, 6)
                                            for _, r in bd.iterrows()}
        out["critical_path_ms"] = {k: v / 1e3 for k, v in self.predicted.critical_path_summary().items()}
        return out


def measured_durations(iteration: TraceIteration) -> np.ndarray:
    """Every node of the compiled graph at its traced time (collective members: the fastest member's time, so
    that waiting for the slowest rank comes out of the synchronisation, not twice)."""
    compiled = iteration.graph.compile()
    dur = np.zeros(len(compiled))
    dur[: len(iteration.node_measured_us)] = iteration.node_measured_us
    grouped = (compiled.group >= 0) & (compiled.kind != 3)
    if grouped.any():
        gmin = np.full(int(compiled.group.max()) + 1, np.inf)
        np.minimum.at(gmin, compiled.group[grouped], dur[grouped])
        dur[grouped] = gmin[compiled.group[grouped]]
    return dur


def predict_trace(iteration: TraceIteration, model: Any, overheads: Any | None = None,
                  model_name: str = "") -> TracePrediction:
    """Simulate ``iteration`` with ``model``'s op times (and, if the trace has times, with measured ones).

    ``overheads`` default: none on a CPU target (the traced host time already holds dispatch), the engine's
    kernel-launch and collective-launch costs on a GPU target (framework time is in the traced host gaps)."""
    from hybrid.engine.overheads import Overheads
    from hybrid.engine.simulate import simulate, simulate_durations

    if overheads is None:
        if iteration.target.device.kind == "cpu":
            overheads = Overheads.zero()
        elif iteration.info.get("host") == "trace":
            overheads = Overheads(framework_us=0.0, optimizer_step_us=0.0, iteration_us=0.0)
        else:  # the traced host time was dropped: dispatch + launch per kernel from the engine's defaults
            overheads = Overheads(optimizer_step_us=0.0, iteration_us=0.0)
    compiled = iteration.graph.compile()
    pred = simulate(compiled, model, overheads)
    meas = None
    if all(t.has_times for t in iteration.traces):
        meas = simulate_durations(compiled, measured_durations(iteration))
    return TracePrediction(iteration, pred, meas, model_name)
