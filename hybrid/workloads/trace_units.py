"""From parsed trace events to *units*: the ops of one rank's trace that become nodes of the task graph.

Walking each thread's op tree from the top (:func:`trace_units`), an op the family mapping
(:mod:`hybrid.data.traces.opmap`) can cost becomes one unit (``aten::linear`` is one GEMM, whatever it calls
inside); an op it cannot cost is looked into, and only a leaf nobody maps is an *unmodelled* unit. Views and
allocations are host-only units; collectives are units that synchronise ranks. Whatever time on a thread is not
inside a unit (Python, the autograd engine, dispatch of composite ops) is kept as measured host *gaps* between
units by the graph builder (:mod:`hybrid.workloads.trace_graph`).

Everything here is per op or per tree level in numpy; only the walk that decides where to cut the tree visits
ops one by one (each op once).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from hybrid.data.traces.opmap import VIEW_OPS, OpMapping, base_name, map_op
from hybrid.data.traces.overhead import input_counts
from hybrid.data.traces.parse import RankTrace, et_tensor_devices
from hybrid.data.traces.precision import tf32_kernels
from hybrid.errors import InvalidInputError

#: Phase of an op, from its nearest enclosing marker (name prefix -> phase).
PHASE_MARKERS = (("Optimizer.step", "optimizer"), ("Optimizer.zero_grad", "zero_grad"),
                 ("autograd::engine::evaluate_function", "backward"), ("DistributedDataParallel.forward", "forward"))
#: Unit kinds.
UNIT_KINDS = ("op", "collective", "view", "unmodelled")
#: Breakdown labels of host time that is not an op.
GAP_LABEL, VIEW_LABEL, UNMODELLED_LABEL = "host gaps", "view/host ops", "unmodelled"
#: Columns of :func:`trace_units`.
UNIT_COLUMNS = ("op_id", "tid", "name", "ts", "dur", "kind", "label", "row", "phase", "pg", "math_attention",
                "device_us", "kstream", "n_events", "n_inputs", "n_launch", "n_tf32")
#: :func:`trace_units`'s ``attrs`` key: the unmapped ATen ops it looked into because they call costed ops, with the
#: time they spent outside their children (:meth:`hybrid.workloads.trace_graph.TraceIteration.own_time`).
OWN_TIME_ATTR = "own_time"
#: torch.compile's call of an Inductor-compiled graph (a ``user_annotation``): the code Inductor generated (its
#: fused C++ kernels on a CPU) runs between the ATen ops (library calls) inside it, and records nothing of its own
#: unless ``torch._inductor.config.cpp.enable_kernel_profile`` is set (``graph_<n>_cpp_fused_*`` events).
COMPILED_GRAPH_PREFIX = "## Call CompiledFxGraph"
#: SDPA's math fallback: with 16-bit inputs it upcasts them and computes in fp32 (what a CPU or meta-device trace of
#: a bf16 model records; :func:`hybrid.data.traces.precision.apply_math_attention_dtype`).
MATH_ATTENTION_OPS = frozenset({"aten::_scaled_dot_product_attention_math"})
_HALF = ("bf16", "fp16")
#: Breakdown labels of the costed ops a kernel with helpers calls before its own work (zero-filling or allocating
#: its output, a contiguous copy of its input): an unmapped op that calls anything else is a composite.
HELPER_LABELS = frozenset({"copy"})
#: Breakdown labels of ops priced by a first-order count that no profile measures (LAPACK factorisations and
#: solves, CTC losses: :mod:`hybrid.data.traces.opmap`): on the traced device they keep their traced time, which is
#: a measurement of the target (the count is a lower bound, 0.1-0.7x of it on the project's CPU), elsewhere the
#: cost model prices the count; nor are their kernels measurement rows of the family their row borrows
#: (``hybrid trace kernels``).
FIRST_ORDER_LABELS = frozenset({"linalg", "ctc"})
#: Helpers (base names) that write without reading a tensor: fills, factories and samplers. A kernel hands its
#: own argument to one of them to initialise it (``x.zero_()`` before accumulating into ``x``), so unlike a copy
#: of the op's arguments, one called with the op's own argument shapes is no sign that the op forwards its call.
WRITE_ONLY_HELPERS = frozenset(
    "fill fill_ zero zero_ zeros zeros_like ones ones_like full full_like new_zeros new_ones new_full new_empty "
    "empty empty_like arange linspace logspace random random_ uniform uniform_ normal normal_ bernoulli bernoulli_ "
    "rand randn randint exponential_ geometric_ cauchy_ log_normal_".split())
#: Backwards of indexing ops (base names) that PyTorch writes as a zero-filled gradient and one write into it (a copy
#: into a view, a scatter, an index fill): composites whatever one call's self share says, so always looked into. A
#: step calls some of them once, and one call descheduled between its helpers (``trace_backward``: 613 against
#: ~200 us on a loaded CI machine) looked like a kernel of its own: one unmodelled unit, 0 us on another device.
ZERO_FILLED_COMPOSITES = frozenset(
    "slice_backward select_backward diagonal_backward unfold_backward trace_backward "
    "value_selecting_reduction_backward gather_backward index_select_backward masked_select_backward".split())


def ops_by_depth(depth: np.ndarray) -> list[np.ndarray]:
    """Row positions per tree depth, shallowest first (every op's parent sits one level above it)."""
    if not len(depth):
        return []
    order = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(int(depth.max()) + 2))
    return [order[bounds[d]:bounds[d + 1]] for d in range(int(depth.max()) + 1)]


def op_depths(ops: pd.DataFrame, parent: np.ndarray) -> np.ndarray:
    """Depth of every op (the parser's ``depth`` column; recomputed from the parent pointers where it does not
    put every parent one level above its child)."""
    depth = ops["depth"].to_numpy(dtype=np.int64) if "depth" in ops.columns else np.zeros(len(parent), np.int64)
    has = parent >= 0
    if np.array_equal(depth[has], depth[parent[has]] + 1):
        return depth
    depth = np.zeros(len(parent), dtype=np.int64)
    for i in np.flatnonzero(has):  # parent-first order: one pass settles every row
        depth[i] = depth[parent[i]] + 1
    return depth


def _phase_of(names: np.ndarray, parent: np.ndarray, levels: list[np.ndarray]) -> np.ndarray:
    """Phase per op: its own marker, else its parent's (``"forward"`` at the roots)."""
    s = pd.Series(names, dtype=object)
    own = np.full(len(names), None, dtype=object)
    for prefix, ph in reversed(PHASE_MARKERS):  # the first marker of the list wins
        own[s.str.startswith(prefix).to_numpy(dtype=bool)] = ph
    phase = own.copy()
    for lvl in levels:
        unset = lvl[pd.isna(phase[lvl])]
        par = parent[unset]
        phase[unset] = np.where(par >= 0, phase[np.maximum(par, 0)], "forward")
    return phase


def _view_named(name: str) -> bool:
    """An op that launches no kernel by itself: ATen views/allocations and autograd bookkeeping."""
    if name.startswith("aten::"):
        return base_name(name) in VIEW_OPS or base_name(name).rstrip("_") in VIEW_OPS
    return "::" not in name and (name in VIEW_OPS or name.endswith("Backward0") or name.endswith("Backward1"))


def _math_attention(ops: pd.DataFrame, names: np.ndarray, parent: np.ndarray, levels: list[np.ndarray]
                    ) -> np.ndarray:
    """Per op, the 16-bit dtype of the SDPA math fallback (:data:`MATH_ATTENTION_OPS`) it runs in: the ops inside a
    math fallback whose query is bf16 / fp16, and the autograd nodes (matched by sequence number) that run the
    backward of those ops, with what they call; "" for every other op."""
    n = len(names)
    own = np.full(n, "", dtype=object)
    math = np.flatnonzero(np.isin(names, list(MATH_ATTENTION_OPS)))
    if not len(math):
        return own
    types = ops["types"].to_numpy(dtype=object)
    for i in math:
        q = next((t for t in (types[i] or []) if t is not None), None)
        if q in _HALF:
            own[i] = q
    if not (own != "").any():
        return own
    scope = own.copy()
    for lvl in levels[1:]:  # inherited down the tree
        par = parent[lvl]
        inherit = (scope[lvl] == "") & (scope[par] != "")
        scope[lvl[inherit]] = scope[par[inherit]]
    seq = ops["seq"].to_numpy(dtype=np.int64) if "seq" in ops.columns else np.full(n, -1, dtype=np.int64)
    fwd = {int(q): str(d) for q, d in zip(seq[scope != ""], scope[scope != ""], strict=True) if q >= 0}
    if fwd:
        node = pd.Series(names, dtype=object).str.startswith("autograd::engine::evaluate_function").to_numpy(bool)
        for i in np.flatnonzero(node & (scope == "")):
            d = fwd.get(int(seq[i]))
            if d:
                own[i] = scope[i] = d
        for lvl in levels[1:]:
            par = parent[lvl]
            inherit = (scope[lvl] == "") & (scope[par] != "")
            scope[lvl[inherit]] = scope[par[inherit]]
    return scope


def _compiled_code_units(ops: pd.DataFrame, names: np.ndarray, cats: np.ndarray, parent: np.ndarray,
                         kids_order: np.ndarray, starts: np.ndarray, phase: np.ndarray, on_gpu: bool = False
                         ) -> pd.DataFrame:
    """Unmodelled units for the code an Inductor-compiled graph ran between its ATen ops (:data:`
    COMPILED_GRAPH_PREFIX`; a CPU trace): each stretch of the graph call's time outside the ops it calls is one
    unit (named ``CompiledFxGraph <hash> (generated code)``) with exactly that time, so it is no host gap but the
    graph's fused kernels: costed at the trace's time on the traced CPU, listed as unmodelled elsewhere. A graph
    recorded with kernel profiling has its kernels as ops of their own (unmodelled units already): not split.

    An execution trace alone has no times to split by: each graph call is one such unit there (no time, listed
    and priced at 0 like every unmodelled op of it), on a GPU too (its kernels are not in the file), so that the
    generated code is said to be left out rather than silently missing from the step."""
    cols = list(UNIT_COLUMNS)
    graphs = np.flatnonzero(pd.Series(names, dtype=object).str.startswith(COMPILED_GRAPH_PREFIX).to_numpy(bool))
    if not len(graphs):
        return pd.DataFrame(columns=cols)
    ts = ops["ts"].to_numpy(dtype=np.float64)
    dur = ops["dur"].to_numpy(dtype=np.float64)
    rows: list[dict[str, Any]] = []
    for g in graphs:
        kids = kids_order[starts[g]:starts[g + 1]]
        if any(not str(names[k]).startswith("aten::") and cats[k] == "cpu_op" for k in kids):
            continue
        key = str(names[g])[len(COMPILED_GRAPH_PREFIX):].strip(" #")
        label = f"CompiledFxGraph {key[:8]} (generated code)".replace("  ", " ")
        if not np.isfinite(dur[g]):  # an execution trace alone: the whole call, untimed
            spans = [(ts[g], np.nan)]
        elif on_gpu:
            continue  # a GPU trace with times: the graph's kernels are units already
        else:
            kids = kids[np.argsort(ts[kids], kind="stable")]
            edges = [ts[g], *np.ravel(np.column_stack([ts[kids], ts[kids] + dur[kids]])), ts[g] + dur[g]]
            spans = [(a, b - a) for a, b in zip(edges[::2], edges[1::2], strict=True) if b - a > 0]
        for a, d in spans:
            rows.append({"op_id": int(g), "tid": ops["tid"].iat[g], "name": label, "ts": float(a), "dur": float(d),
                         "kind": "unmodelled", "label": UNMODELLED_LABEL, "row": None, "phase": phase[g], "pg": "",
                         "math_attention": "", "device_us": np.nan, "kstream": "", "n_events": 0.0,
                         "n_inputs": 0.0, "n_launch": 0.0, "n_tf32": 0.0})
    return pd.DataFrame(rows, columns=cols)


#: A device argument of an execution-trace op (``aten::to``'s ``cuda:0``)
_DEVICE_ARG = re.compile(r"^(cpu|cuda|hip|xpu|mps|meta)(:\d+)?$")


def _host_tensors_only(extra: Any) -> bool:
    """Whether an execution-trace op's recorded tensors, inputs and outputs, are all on the CPU and no argument
    names another device (a CPU tensor's ``_to_copy`` to ``cuda:0`` copies it to the GPU). False without tensors or
    where the trace records no devices."""
    if not isinstance(extra, dict):
        return False
    values = extra.get("values")
    devices = et_tensor_devices(values) + et_tensor_devices(extra.get("out_values"))
    named = [v for v in values if isinstance(v, str) and _DEVICE_ARG.match(v)] if isinstance(values, list) else []
    return bool(devices) and all(d == "cpu" for d in devices + named)


def _map_all(names: np.ndarray, dims: np.ndarray, types: np.ndarray, outs: np.ndarray, extra: np.ndarray,
             leaf: np.ndarray, skip: np.ndarray, group_size: int) -> list[OpMapping | None]:
    """:func:`map_op` of every op, each distinct (name, shapes, types, arguments, leaf) mapped once (a model's
    layers repeat the same ops)."""
    cache: dict[tuple, OpMapping | None] = {}
    out: list[OpMapping | None] = [None] * len(names)
    for i in np.flatnonzero(~skip):
        key = (names[i], repr(dims[i]), repr(types[i]), repr(outs[i]), repr(extra[i]), bool(leaf[i]))
        hit = cache.get(key, cache)
        if hit is cache:
            hit = cache[key] = map_op(names[i], dims[i] or [], types[i] or [], outs[i] or [], extra[i] or {},
                                      leaf=bool(leaf[i]), group_size=group_size)
        out[i] = hit
    return out


def _write_only(name: str) -> bool:
    """Whether an op is a helper that writes without reading (:data:`WRITE_ONLY_HELPERS`)."""
    return str(name).rsplit("::", 1)[-1] in WRITE_ONLY_HELPERS


def _same_family(a: str, b: str) -> bool:
    """Whether two op names are one op's layers: one's base name (no namespace, no leading or trailing
    underscores) holds the other's (``nll_loss`` in ``nll_loss_nd``; ``dropout`` in ``native_dropout``)."""
    x, y = (str(v).rsplit("::", 1)[-1].strip("_") for v in (a, b))
    return bool(x) and bool(y) and (x in y or y in x)


def _self_shares(names: np.ndarray, parent: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per op, the share of its time outside its children (0 for an op without time), and the time its children
    took."""
    has_parent = parent >= 0
    child_sum = np.bincount(parent[has_parent], dur[has_parent], minlength=len(names))
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(dur > 0, 1.0 - child_sum / np.where(dur > 0, dur, 1.0), 0.0)
    return share, child_sum


def least_self_shares(trace: RankTrace) -> dict[str, float]:
    """Per op name, the least share of an op's time outside its children over its calls that have children, in one
    rank's trace: what :func:`trace_units` tells a kernel with helpers from a composite by (:func:`job_units` pools
    it over a job's ranks)."""
    ops = trace.ops
    if ops.empty:
        return {}
    parent = ops["parent"].to_numpy(dtype=np.int64)
    names = ops["name"].astype(str).to_numpy(dtype=object)
    share, _ = _self_shares(names, parent, ops["dur"].to_numpy(dtype=np.float64))
    with_kids = np.bincount(parent[parent >= 0], minlength=len(names)) > 0
    if not with_kids.any():
        return {}
    least = pd.Series(share[with_kids]).groupby(names[with_kids]).min()
    return {str(k): float(v) for k, v in least.items()}


def job_units(traces: list[RankTrace]) -> list[pd.DataFrame]:
    """:func:`trace_units` of each rank of one job, an op name judged by its calls on every rank: a composite
    called once per step on each rank, one rank's call descheduled, is looked into on that rank too (it was one
    unmodelled unit there, its ops priced at 0 on another device, while the other ranks costed them)."""
    if len(traces) < 2:
        return [trace_units(t) for t in traces]
    pooled: dict[str, float] = {}
    for t in traces:
        for name, share in least_self_shares(t).items():
            pooled[name] = min(pooled.get(name, np.inf), share)
    return [trace_units(t, peer_self_shares=pooled) for t in traces]


def trace_units(trace: RankTrace, peer_self_shares: dict[str, float] | None = None) -> pd.DataFrame:
    """The units of one rank's trace (see the module docstring), in time order per thread. ``peer_self_shares``:
    per op name, the least self share of its calls on the job's other ranks (:func:`job_units`), which the op's
    own calls are judged with.

    Columns (:data:`UNIT_COLUMNS`): ``op_id, tid, name, ts, dur, kind, label, row, phase, pg, device_us`` (measured
    time of the unit's GPU kernels; NaN where the trace has no kernels), ``kstream`` (its kernels' stream) and
    what the profiler recorded inside the unit's op (itself included): ``n_events`` host events, ``n_inputs``
    their recorded inputs, ``n_launch`` kernels (what recording cost there, :mod:`hybrid.data.traces.overhead`),
    ``n_tf32`` of those kernels running TF32 math (:func:`hybrid.data.traces.precision.tf32_kernels`).
    """
    ops = trace.ops
    if ops.empty:
        raise InvalidInputError(f"{trace.path}: no ops inside the traced step")
    n = len(ops)
    parent = ops["parent"].to_numpy(dtype=np.int64)
    levels = ops_by_depth(op_depths(ops, parent))
    names = ops["name"].astype(str).to_numpy(dtype=object)
    cats = ops["cat"].astype(str).to_numpy(dtype=object)
    tids = ops["tid"].to_numpy(dtype=object)
    ts_all = ops["ts"].to_numpy(dtype=np.float64)
    dur = ops["dur"].to_numpy(dtype=np.float64)
    pgs = ops["pg"].to_numpy(dtype=object)
    has_parent = parent >= 0
    n_children = np.bincount(parent[has_parent], minlength=n)
    phase = _phase_of(names, parent, levels)
    sname = pd.Series(names, dtype=object)
    has_c10d = bool(sname.str.startswith("c10d::").any())
    group_size = max([len(v) for v in trace.process_groups.values()] + [trace.world_size])
    transparent = np.isin(cats, ["user_annotation", "python_function"]) \
        | sname.str.startswith("ProfilerStep#").to_numpy(dtype=bool)
    mapped = _map_all(names, ops["dims"].to_numpy(), ops["types"].to_numpy(), ops["out_dims"].to_numpy(),
                      ops["extra"].to_numpy(), n_children == 0, transparent, group_size)
    name_codes, distinct = pd.factorize(names)  # names judged once per distinct name
    view_named = np.array([_view_named(x) for x in distinct] + [False], dtype=bool)[name_codes]
    zero_filled = np.array([base_name(x) in ZERO_FILLED_COMPOSITES for x in distinct] + [False], dtype=bool)[name_codes]
    is_mapped = np.fromiter((m is not None for m in mapped), dtype=bool, count=n)
    # does an op's subtree hold anything the families cost? ... or work nobody models (a leaf that is neither
    # mapped nor a view)? Children pass it up, deepest level first.
    costed = np.fromiter((m is not None and m.kind in ("op", "collective") for m in mapped), dtype=bool, count=n)
    # ... and a costed op that is more than a helper (an allocation, fill or copy: what a kernel with helpers calls
    # before doing its own work)? An op calling one is a composite, whatever its self time
    computes = np.fromiter((m is not None and m.kind in ("op", "collective") and m.label not in HELPER_LABELS
                            for m in mapped), dtype=bool, count=n)
    opaque = ~is_mapped & ~transparent & ~view_named
    # (what a costed op calls inside is part of its one unit, not work of the op above it: ``aten::repeat``, a copy,
    # adds index tensors on a CPU, which made ``aten::tile`` calling only it look like a composite that computes)
    unit_op = costed.copy()
    for lvl in reversed(levels[1:]):
        np.logical_or.at(costed, parent[lvl], costed[lvl])
        up = lvl[~unit_op[parent[lvl]]]
        np.logical_or.at(computes, parent[up], computes[up])
        np.logical_or.at(opaque, parent[lvl], opaque[lvl])
    # an op that calls itself (autocast re-dispatches ``aten::linear`` in fp32 as casts + ``aten::linear`` in bf16;
    # ``aten::softmax`` with a dtype argument likewise) is a wrapper: its inner call and the casts are the units
    kid = np.flatnonzero(has_parent)
    redispatch = np.zeros(n, dtype=bool)
    redispatch[parent[kid[names[kid] == names[parent[kid]]]]] = True
    # an op whose one child is an op of its own family called with the op's own argument shapes forwards the
    # call (``nll_loss_nd`` -> ``nll_loss`` -> ``nll_loss_forward``, ``dropout`` -> ``native_dropout``): the callee
    # does the work, whatever one call's self time says (a call descheduled for 70 us gave a 133 us
    # ``nll_loss_nd`` a self share of 0.52). So does one whose one child is a costed copy of the op's own
    # arguments (``tile`` -> ``repeat``, shapes and dtypes alike): the copy moves the op's data, and a single call
    # descheduled before it made ``tile`` one unmodelled unit, priced at 0 on another device. A kernel with helpers
    # calls other ops (``_ctc_loss``, a pooling backward zeroing its output first), or a fill of its own argument
    # (:data:`WRITE_ONLY_HELPERS`)
    forwards = np.zeros(n, dtype=bool)
    only = kid[n_children[parent[kid]] == 1]
    if len(only):
        op_dims, op_types = ops["dims"].to_numpy(), ops["types"].to_numpy()

        def forwarded(c: int, p: int) -> bool:
            if not op_dims[c] or repr(op_dims[c]) != repr(op_dims[p]):
                return False
            if _same_family(names[p], names[c]):
                return True
            mc = mapped[c]
            return (mc is not None and mc.kind == "op" and mc.label in HELPER_LABELS and not _write_only(names[c])
                    and repr(op_types[c]) == repr(op_types[p]))

        same = np.fromiter((forwarded(c, p) for c, p in zip(only, parent[only], strict=True)), dtype=bool,
                           count=len(only))
        forwards[parent[only[same]]] = True
    self_share, child_sum = _self_shares(names, parent, dur)
    # judged per op name (the least over its calls that have children, on every rank of the job): one slow call
    # (a first call's dispatch and recording, 155 of a CPU `slice_backward`'s 232 us against 20 us on its later
    # calls; a call descheduled on a loaded machine) does not make a composite a kernel of its own, while a kernel
    # with helpers spends most of every call outside them (and a composite looked into keeps its own time,
    # accounted, not lost). The least, not the median: descheduling only ever adds to a call's self share
    with_kids = n_children > 0
    if with_kids.any():
        least = pd.Series(self_share[with_kids]).groupby(names[with_kids]).min()
        if peer_self_shares:
            peers = pd.Series(peer_self_shares, dtype=np.float64).reindex(least.index).fillna(np.inf)
            least = np.minimum(least, peers)
        self_share[with_kids] = least.reindex(names[with_kids]).to_numpy(dtype=np.float64)
    is_aten = sname.str.startswith("aten::").to_numpy(dtype=bool)
    backend = (sname.str.startswith("gloo:") | sname.str.startswith("nccl:")).to_numpy(dtype=bool) & has_c10d
    # children lists in row order (rows are parent-first, time-ordered per thread)
    kids_order = np.argsort(parent, kind="stable")
    starts = np.searchsorted(parent[kids_order], np.arange(n + 1))
    units: list[int] = []
    kinds: list[str] = []
    labels: list[str] = []
    rows: list[Any] = []
    inside: list[int] = []  # unmapped ATen ops looked into for the costed ops they call
    stack = list(reversed(np.flatnonzero(~has_parent).tolist()))
    while stack:
        i = stack.pop()
        kids = kids_order[starts[i]:starts[i + 1]]
        if transparent[i]:
            stack.extend(reversed(kids.tolist()))
            continue
        if backend[i]:
            continue  # backend work of a c10d collective that is a unit on the calling thread (kept there)
        mp = mapped[i]
        if redispatch[i]:
            stack.extend(reversed(kids.tolist()))
            continue
        if mp is None and len(kids):
            # an ATen op that spends most of its time outside its children is a kernel with helpers (a pooling
            # backward that zeroes its output first): one unit; a composite that only calls others is looked into,
            # and so is one that calls more than helpers (a softmax, a GEMM, a gather): a call of it descheduled
            # between its children (the only call of ``cross_entropy_loss`` in a step, 460 of its 520 us) made it
            # one unmodelled unit, priced at 0 on another device with the softmax and gather it calls
            own = (self_share[i] > 0.5 and is_aten[i] and not view_named[i] and not forwards[i]
                   and not computes[i] and not zero_filled[i])
            if (costed[i] and not own) or (opaque[i] and not is_aten[i]):
                if costed[i] and is_aten[i] and not view_named[i]:
                    inside.append(i)  # its time outside its children is accounted (own_time), not lost
                stack.extend(reversed(kids.tolist()))  # look inside (wrappers like autograd nodes are looked through)
                continue
            if not opaque[i] or view_named[i]:
                mp = OpMapping("view", "view")  # views and wrappers of views: host time only
        # else an ATen op nobody maps whose inside holds nothing costable is ONE unmodelled unit (its whole time)
        if mp is None:
            kind, label, row = "unmodelled", UNMODELLED_LABEL, None
        else:
            kind, label, row = mp.kind, (VIEW_LABEL if mp.kind == "view" else mp.label), mp.row
        units.append(i)
        kinds.append(kind)
        labels.append(label)
        rows.append(dict(row) if isinstance(row, dict) else row)
    idx = np.asarray(units, dtype=np.int64)
    out = pd.DataFrame({"op_id": idx, "tid": tids[idx], "name": names[idx], "ts": ts_all[idx], "dur": dur[idx],
                        "kind": kinds, "label": labels, "row": pd.Series(rows, dtype=object),
                        "phase": phase[idx], "pg": [str(p or "") for p in pgs[idx]]},
                       columns=list(UNIT_COLUMNS[:-7]))
    out["math_attention"] = _math_attention(ops, names, parent, levels)[idx]
    out["device_us"] = np.nan
    out["kstream"] = ""
    # what was recorded inside each unit's op: its subtree's events, inputs and kernel launches (and how many of
    # those ran TF32 math, hybrid.data.traces.precision)
    sub = np.stack([np.ones(n), input_counts(ops["dims"].to_numpy()), np.zeros(n), np.zeros(n)])
    if len(trace.kernels):
        kop = trace.kernels["op"].to_numpy(dtype=np.int64)
        sub[2] = np.bincount(kop[kop >= 0], minlength=n)[:n]
        tf32 = tf32_kernels(trace.kernels["name"])
        sub[3] = np.bincount(kop[(kop >= 0) & tf32], minlength=n)[:n]
    for lvl in reversed(levels[1:]):
        for row in sub:
            np.add.at(row, parent[lvl], row[lvl])
    for name, counts in zip(UNIT_COLUMNS[-4:], sub, strict=True):  # n_events, n_inputs, n_launch, n_tf32
        out[name] = counts[idx]
    ins = np.asarray(inside, dtype=np.int64)
    own_us = np.clip(dur[ins] - child_sum[ins], 0.0, None)
    if len(trace.kernels) and len(out):
        # kernels an op looked into launched itself (a kernel whose helpers, e.g. zeroing its output, are costed
        # ops): no unit holds them, so each such op is one more unmodelled unit for its own kernels, placed at its
        # end with no host time of its own (its time outside its children stays in the host gaps)
        holder = np.full(n, -1, dtype=np.int64)
        holder[idx] = -2  # inside a unit
        holder[ins] = ins
        for lvl in levels[1:]:
            inherit = lvl[holder[lvl] == -1]
            holder[inherit] = holder[parent[inherit]]
        kop = trace.kernels["op"].to_numpy(dtype=np.int64)
        kh = np.where(kop >= 0, holder[np.clip(kop, 0, n - 1)], -1)
        extra = np.unique(kh[kh >= 0])
        if len(extra):
            end = ts_all[extra] + dur[extra]
            more = pd.DataFrame({"op_id": extra, "tid": tids[extra], "name": names[extra], "ts": end,
                                 "dur": np.zeros(len(extra)), "kind": "unmodelled", "label": UNMODELLED_LABEL,
                                 "row": pd.Series([None] * len(extra), dtype=object), "phase": phase[extra],
                                 "pg": "", "math_attention": "", "device_us": np.nan, "kstream": "",
                                 "n_events": 0.0, "n_inputs": 0.0, "n_launch": 0.0, "n_tf32": 0.0})
            more["n_launch"] = [float((kh == e).sum()) for e in extra]
            out = pd.concat([out, more], ignore_index=True)
            idx = np.concatenate([idx, extra])
    if trace.device == "cuda" and not len(trace.kernels) and len(out):
        # an execution trace alone (no kernels): an op whose tensors are all on the host ran there (AdamW's 0-d step
        # counters when the optimizer is not capturable, a mask built on the CPU), as a GPU trace with kernels
        # shows by its launching none: host time only, whatever its family
        extra_all = ops["extra"].to_numpy(dtype=object)
        cpu_side = np.fromiter((k in ("op", "unmodelled") and _host_tensors_only(extra_all[i])
                                for i, k in zip(idx, out["kind"], strict=True)), dtype=bool, count=len(out))
        out.loc[cpu_side, "kind"] = "view"
        out.loc[cpu_side, "label"] = VIEW_LABEL
        out.loc[cpu_side, "row"] = pd.Series([{}] * int(cpu_side.sum()), index=out.index[cpu_side], dtype=object)
    if trace.device != "cuda" or not trace.has_times:
        compiled = _compiled_code_units(ops, names, cats, parent, kids_order, starts, phase,
                                        on_gpu=trace.device == "cuda")
        if len(compiled):
            out = pd.concat([out, compiled], ignore_index=True)
            idx = np.concatenate([idx, compiled["op_id"].to_numpy(dtype=np.int64)])
    # (plain lists: pandas compares the attrs of frames it concatenates)
    out.attrs[OWN_TIME_ATTR] = {"name": [str(x) for x in names[ins]], "tid": [str(x) for x in tids[ins]],
                                "ts": ts_all[ins].tolist(), "own_us": own_us.tolist()}
    if len(trace.kernels) and len(out):
        # kernels of a unit: those launched by the unit's op or any op inside it (inherited level by level; an op
        # looked into holds the kernels it launched itself, above)
        owner = np.full(n, -1, dtype=np.int64)
        owner[idx] = np.arange(len(out))
        for lvl in levels[1:]:
            inherit = lvl[owner[lvl] < 0]
            owner[inherit] = owner[parent[inherit]]
        k = trace.kernels
        kop = k["op"].to_numpy(dtype=np.int64)
        ku = np.where(kop >= 0, owner[np.clip(kop, 0, n - 1)], -1)
        ok = ku >= 0
        sums = np.bincount(ku[ok], k["dur"].to_numpy(dtype=np.float64)[ok], minlength=len(out))
        has = np.bincount(ku[ok], minlength=len(out)) > 0
        out["device_us"] = np.where(has, sums, np.nan)
        first_stream = pd.Series(k["stream"].to_numpy()[ok]).groupby(ku[ok]).first()
        ks = out["kstream"].to_numpy(dtype=object).copy()
        ks[first_stream.index.to_numpy()] = first_stream.astype(str).to_numpy()
        out["kstream"] = ks
        # on a GPU trace, an op that launched no kernel ran on the host (a CPU tensor's op: AdamW's step counters,
        # a mask built on the CPU): host time only, whatever its family
        cpu_side = ~has & out["kind"].isin(["op", "unmodelled"]).to_numpy()
        out.loc[cpu_side, "kind"] = "view"
        out.loc[cpu_side, "label"] = VIEW_LABEL
    return out.sort_values(["tid", "ts"], kind="stable").reset_index(drop=True)
