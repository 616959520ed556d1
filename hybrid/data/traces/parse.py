"""Read PyTorch's own traces: the profiler's Chrome/Kineto JSON and the execution trace (ET), alone or linked.

* **Kineto** (``torch.profiler.profile(record_shapes=True)`` + ``export_chrome_trace``): complete (``"X"``)
  events. ``cpu_op`` / ``user_annotation`` events on host threads carry ``Input Dims`` / ``Input type`` and a
  ``Record function id``; ``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` events run on GPU streams and point back
  to their CPU op through ``External id``; ``distributedInfo`` names the rank, the world size and the process
  groups (``pg_config``); ``record_param_comms`` events (NCCL) name a collective's process group.
* **Execution trace** (``torch.profiler.ExecutionTraceObserver``, the format Chakra converts): ``nodes`` with a
  parent (``ctrl_deps``), input and output shapes and types, and attributes (``rf_id``, ``tid``). It has no
  times of its own; linked with a Kineto trace of the same run (``rf_id`` = ``Record function id``) it adds
  the output shapes, alone it gives the structure and shapes (predictions only, nothing measured).

Everything is normalised into one table of host ops per rank (:class:`RankTrace`), nested by time on each
thread, plus a table of device kernels. Files that are not JSON, truncated JSON, or JSON of another kind
raise :class:`TraceFormatError` naming the file and the problem.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid.data.traces.precision import METADATA_KEY as PRECISION_KEY
from hybrid.errors import ImportFormatError, InvalidInputError

#: Host-side Kineto event categories that are ops or annotations.
HOST_CATEGORIES = ("cpu_op", "user_annotation", "python_function", "cpu_instant_event")
#: Device-side categories that are work on a stream (``gpu_user_annotation`` spans only mirror host annotations
#: on the GPU timeline: counting them would double device time and stretch the step window).
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
#: CUDA (and HIP, on ROCm) runtime calls that block the host until the device is done: kept as host ops (the
#: engine makes them wait for the rank's streams). Other runtime calls (launches, memsets) stay inside the ATen op
#: that made them.
CUDA_SYNC_CALLS = frozenset({"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
                             "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
                             "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize"})
#: Categories of Kineto's first exports (PyTorch 1.8-1.9) -> today's names (their kernels carry ``external id``).
_OLD_CATEGORIES = {"Operator": "cpu_op", "Kernel": "kernel", "Runtime": "cuda_runtime", "Memcpy": "gpu_memcpy",
                   "Memset": "gpu_memset"}
#: Longest duration an event may have (us): one day. A traced step is seconds; a longer event is a corrupted
#: ``dur`` (it would become the step, or swallow the ops after it on its thread).
MAX_EVENT_US = 86_400e6
#: An op may end after the op enclosing it on its thread by timer rounding only: today's exports write times to the
#: nanosecond (no child ends after its parent in the project's H100 / H200 traces), exports of whole microseconds
#: (PyTorch 1.x) round the start and the duration of both ops, 2 us at most. A child that ends later (us) sticks out
#: of its parent: one of the two has a corrupted ``dur`` (a truncated parent, or a child longer than it), and the
#: ops after the child would be taken as its children (swallowed: never costed).
NEST_TOLERANCE_US = 2.0
#: A CUDA runtime call kept as a host op (a synchronisation) is timed by CUPTI's clock, not the profiler's: it may
#: end after the op enclosing it by clock conversion too, so it is refused only when it ends later by more than
#: that op's whole duration and by more than this (us).
MAX_OVERRUN_US = 1000.0
#: Name prefixes of a collective backend's own work (gloo's, NCCL's record functions). gloo records a send's or
#: receive's work on the calling thread: it starts inside the ``c10d::`` call and ends when the transfer does, after
#: the call returned (``irecv``: while the program runs on), so it may end after the op enclosing it and is never
#: the parent of the ops that start during it.
BACKEND_WORK_PREFIXES = ("gloo:", "nccl:")
#: Columns of :attr:`RankTrace.ops`.
OP_COLUMNS = ("id", "tid", "name", "cat", "ts", "dur", "parent", "depth", "dims", "types", "out_dims",
              "rf_id", "ext_id", "pg", "extra", "seq")
#: Names of an ET's synthetic root nodes.
_ET_ROOTS = ("[pytorch|profiler|execution_trace|process]", "[pytorch|profiler|execution_trace|thread]")
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


class TraceFormatError(ImportFormatError):
    """A trace file that cannot be read: not JSON, truncated, or JSON of another kind."""


class MissingStepError(TraceFormatError):
    """A ``--step`` the trace file does not have (``path``, ``steps``: the step numbers it has, ``kind``: "kineto"
    or "et"); :func:`load_traces`
    words it for the files given together (a Chrome trace and its execution trace)."""

    def __init__(self, path: str, step: int, steps: list[int], kind: str) -> None:
        self.path, self.step, self.steps, self.kind = path, int(step), list(steps), kind
        super().__init__(f"{path}: no ProfilerStep#{step} in the trace ({self.has()})")

    def has(self) -> str:
        return (f"it has {', '.join(f'#{n}' for n in self.steps)}" if self.steps
                else "it has no ProfilerStep annotation: leave --step out")


@dataclass
class RankTrace:
    """One rank's trace, normalised.

    ``ops``: one row per host op / annotation (:data:`OP_COLUMNS`; times in microseconds from the trace start,
    NaN when the trace has no times, ``parent`` = row position of the enclosing op or -1); ``kernels``: device
    kernels (``name, stream, ts, dur, op`` = row position of the launching op or -1).
    """

    path: str
    format: str  # "kineto", "et" or "kineto+et"
    rank: int
    world_size: int
    device: str  # "cpu", "cuda" or "meta" (where the traced ops ran)
    device_name: str  # GPU name from deviceProperties, else ""
    ops: pd.DataFrame
    kernels: pd.DataFrame
    process_groups: dict[str, tuple[int, ...]] = field(default_factory=dict)
    window: tuple[float, float] = (0.0, 0.0)  # the measured step: [start, end) in us (NaN without times)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def has_times(self) -> bool:
        return bool(np.isfinite(self.window[1] - self.window[0]))

    @property
    def step_us(self) -> float:
        """Measured length of the traced step (NaN for an execution trace alone)."""
        return float(self.window[1] - self.window[0])


# ---------------------------------------------------------------------------------------------------- loading
def read_json(path: str | os.PathLike) -> Any:
    """JSON of ``path`` (``.gz`` transparently); a clear :class:`TraceFormatError` for anything unreadable."""
    p = Path(path)
    if not p.is_file():
        raise TraceFormatError(f"trace file not found: {p}")
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except EOFError:
        raise TraceFormatError(f"{p}: truncated gzip file (the file ends early)") from None
    except (OSError, gzip.BadGzipFile) as exc:
        raise TraceFormatError(f"{p}: cannot read ({exc})") from None
    if not raw.strip():
        raise TraceFormatError(f"{p}: file is empty")
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise TraceFormatError(f"{p}: not a JSON text file (binary content)") from None
    except json.JSONDecodeError as exc:
        end = exc.pos >= len(raw.rstrip()) - 1 or (exc.msg.startswith("Unterminated")
                                                   and exc.pos >= len(raw.rstrip()) - 4096)
        why = "truncated JSON (the file ends early)" if end else "invalid JSON"
        raise TraceFormatError(f"{p}: {why}: {exc.msg} at line {exc.lineno} column {exc.colno}") from None


def trace_kind(doc: Any) -> str:
    """``"kineto"`` or ``"et"`` for a loaded JSON document; :class:`TraceFormatError` for anything else."""
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        return "kineto"
    if isinstance(doc, dict) and isinstance(doc.get("nodes"), list) and ("schema" in doc or "pid" in doc):
        return "et"
    if isinstance(doc, dict) and doc.get("format") == "hybrid-trace-graph":
        raise TraceFormatError("not a PyTorch trace but the op units `hybrid trace import` wrote (an output for "
                               "reading, not an input); give the traces it was imported from")
    for key, kind in (("traceEvents", "Chrome trace"), ("nodes", "execution trace")):
        if (isinstance(doc, dict) and key in doc and not isinstance(doc[key], list)
                and (key == "traceEvents" or "schema" in doc)):
            raise TraceFormatError(f"malformed {kind}: its '{key}' is {type(doc[key]).__name__}, not a list of "
                                   "events")
    what = type(doc).__name__ if not isinstance(doc, dict) else f"an object with keys {sorted(doc)[:6]}"
    raise TraceFormatError(f"not a PyTorch trace: expected a torch.profiler Chrome trace (with 'traceEvents') or an "
                           f"execution trace (with 'nodes'), got {what}")


def _num(v: Any, what: str, path: str) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise TraceFormatError(f"{path}: event {what} is not a number ({v!r})") from None
    if not np.isfinite(x):
        raise TraceFormatError(f"{path}: event {what} is not finite ({v!r})")
    return x


def _dist_info(doc: dict, path: str) -> tuple[dict, int, int]:
    """A trace's ``distributedInfo`` (an object, or absent), its rank (default 0) and world size (default 1):
    a value that is no whole number (``"x"``, ``1.5``), a negative rank or a world size below one is a
    :class:`TraceFormatError` naming the file, not a bare ``int()`` error."""
    dist = doc.get("distributedInfo") or {}
    if not isinstance(dist, dict):
        raise TraceFormatError(f"{path}: distributedInfo is not an object ({type(dist).__name__})")
    out = []
    for key, default, low in (("rank", 0, 0), ("world_size", 1, 1)):
        v = dist.get(key, default)
        v = default if v is None or v == "" else v
        try:
            n = int(v) if not isinstance(v, bool) and float(v) == int(float(v)) else None
        except (TypeError, ValueError, OverflowError):
            n = None
        if n is None or n < low:
            raise TraceFormatError(f"{path}: distributedInfo {key} is {v!r}, not a whole number >= {low}")
        out.append(n)
    return dist, out[0], out[1]


def _nest(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Parent row and depth of every op, by time containment on its thread (ops sorted by tid, ts, -dur)."""
    n = len(ops)
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    tids = ops["tid"].to_numpy()
    ts = ops["ts"].to_numpy(dtype=np.float64)
    end = ts + ops["dur"].to_numpy(dtype=np.float64)
    backend = ops["name"].astype(str).str.startswith(BACKEND_WORK_PREFIXES).to_numpy(dtype=bool)
    stack: list[int] = []
    last_tid: Any = object()
    for i in range(n):
        if tids[i] != last_tid:
            stack, last_tid = [], tids[i]
        while stack and ts[i] >= end[stack[-1]]:
            stack.pop()
        # an op that starts inside the top of the stack but ends after it is clipped into it (timer rounding)
        if stack:
            parent[i] = stack[-1]
            depth[i] = depth[stack[-1]] + 1
            if backend[i] and end[i] > end[stack[-1]] + NEST_TOLERANCE_US:
                continue  # a backend's work that outlasts its call (BACKEND_WORK_PREFIXES): encloses nothing
        stack.append(i)
    return parent, depth


def _check_overrun(ops: pd.DataFrame, parent: np.ndarray, path: str) -> None:
    """Refuse an op that ends after the op enclosing it on its thread (it started inside that op) by more than
    :data:`NEST_TOLERANCE_US`: one of the two has a corrupted ``dur``, and the ops after it would be swallowed as its
    children. Python frames (which may cross step annotations) and a backend's asynchronous work
    (:data:`BACKEND_WORK_PREFIXES`) aside; a runtime call (another clock) only past the op's whole duration and
    :data:`MAX_OVERRUN_US`. The error names both ops, their thread and their times."""
    if not len(ops):
        return
    kid = np.flatnonzero(parent >= 0)
    par = parent[kid]
    ts = ops["ts"].to_numpy(dtype=np.float64)
    dur = ops["dur"].to_numpy(dtype=np.float64)
    cats = ops["cat"].to_numpy()
    over = (ts[kid] + dur[kid]) - (ts[par] + dur[par])
    runtime = np.char.startswith(cats[kid].astype(str), "cuda_") | np.char.startswith(cats[par].astype(str), "cuda_")
    limit = np.where(runtime, np.maximum(dur[par], MAX_OVERRUN_US), NEST_TOLERANCE_US)
    backend = ops["name"].astype(str).str.startswith(BACKEND_WORK_PREFIXES).to_numpy(dtype=bool)[kid]
    bad = (over > limit) & (cats[kid] != "python_function") & (cats[par] != "python_function") & ~backend
    if bad.any():
        # the first in time: an op sticking out of its parent swallows the next op, which then sticks out of it
        idx = np.flatnonzero(bad)
        i = int(idx[np.argmin(ts[kid[idx]])])
        c, p = kid[i], par[i]
        raise TraceFormatError(
            f"{path}: event {ops['name'].iat[c]!r} (ts {ts[c]:.3f}) lasts {dur[c]:.4g} us and ends {over[i]:.4g} us "
            f"after {ops['name'].iat[p]!r} (ts {ts[p]:.3f}, {dur[p]:.4g} us) that encloses its start, on thread "
            f"{ops['tid'].iat[c]} (ends at ts {ts[c] + dur[c]:.3f} and {ts[p] + dur[p]:.3f}): a corrupted 'dur' (a "
            "truncated enclosing op, or a child longer than it: the ops after it would be taken as its children)")


#: Ops whose operands' strides the trace keeps (``Input Strides``): a GEMM's row strides decide which kernels can run
#: it (:mod:`hybrid.ops.gemm_paths`); every other op's would only multiply the distinct ops to map.
STRIDED_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})


def _extra_args(name: str, args: dict) -> dict:
    """The recorded arguments an op's mapping reads besides its shapes: ``Concrete Inputs`` (scalars), and for
    :data:`STRIDED_OPS` their ``Input Strides``."""
    out = {"concrete": args["Concrete Inputs"]} if "Concrete Inputs" in args else {}
    if name in STRIDED_OPS and isinstance(args.get("Input Strides"), list):
        out["strides"] = args["Input Strides"]
    return out


def _seq(v: Any) -> int:
    """An op's autograd sequence number (-1 where the trace gives none, or something else)."""
    return v if isinstance(v, int) and not isinstance(v, bool) else -1


def _dtype_of(t: Any) -> str | None:
    """Kineto/ET input type -> our dtype name (None for non-tensors)."""
    if not isinstance(t, str) or not t:
        return None
    s = t
    if s.startswith("GenericList[Tensor(") and s.endswith(")]"):
        s = s[len("GenericList["):].split(",", 1)[0].rstrip("]")  # a TensorList: its first tensor's dtype
    if s.startswith("Tensor(") and s.endswith(")"):
        s = s[7:-1]
    elif s[:1].isupper():
        return None  # "Scalar", "ScalarList" (Chrome trace); "Int", "Double", "GenericList[...]" (ET)
    s = s.replace("c10::", "").strip().lower()
    return {"float": "fp32", "double": "fp64", "half": "fp16", "bfloat16": "bf16", "long int": "int64",
            "long": "int64", "int": "int32", "bool": "bool", "signed char": "int8", "unsigned char": "uint8",
            "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}.get(s)


def _parse_kineto(doc: dict, path: str, step: int | None) -> RankTrace:
    events = doc["traceEvents"]
    dist, rank, world = _dist_info(doc, path)
    groups: dict[str, tuple[int, ...]] = {}
    for pg in dist.get("pg_config", []) or []:
        try:
            groups[str(pg.get("pg_name"))] = tuple(int(r) for r in pg.get("ranks", []))
        except (TypeError, ValueError):
            continue
    if world > 1 and not groups:
        groups["0"] = tuple(range(world))
    host_rows: list[dict[str, Any]] = []
    kern_rows: list[dict[str, Any]] = []
    comm_params: list[dict[str, Any]] = []
    launches: list[tuple[str, float, Any]] = []  # runtime calls: (thread, start, correlation id)
    for k, e in enumerate(events):
        if not isinstance(e, dict):
            raise TraceFormatError(f"{path}: traceEvents[{k}] is not an object")
        if e.get("ph") != "X":
            continue
        cat = str(e.get("cat", ""))
        cat = _OLD_CATEGORIES.get(cat, cat)
        if "ts" not in e or "dur" not in e:
            raise TraceFormatError(f"{path}: traceEvents[{k}] ({e.get('name')!r}) has no 'ts'/'dur'")
        ts, dur = _num(e["ts"], "ts", path), _num(e["dur"], "dur", path)
        if dur < 0:
            raise TraceFormatError(f"{path}: traceEvents[{k}] ({e.get('name')!r}) has a negative duration")
        if dur > MAX_EVENT_US:
            raise TraceFormatError(f"{path}: traceEvents[{k}] ({e.get('name')!r}) lasts {dur:.4g} us, more than a day "
                                   "(a corrupted 'dur')")
        args = e.get("args") or {}
        if cat in DEVICE_CATEGORIES:
            kern_rows.append({"name": str(e.get("name", "")), "cat": cat, "stream": str(args.get("stream", e.get("tid"))),
                              "ts": ts, "dur": dur, "ext_id": args.get("External id", args.get("external id", -1)),
                              "device": args.get("device", 0), "corr": args.get("correlation", -1)})
            continue
        name = str(e.get("name", ""))
        if cat in ("cuda_runtime", "cuda_driver") and "correlation" in args:
            launches.append((str(e.get("tid")), ts, args["correlation"]))
        if cat not in HOST_CATEGORIES and not (cat in ("cuda_runtime", "cuda_driver") and name in CUDA_SYNC_CALLS):
            continue
        if name == "record_param_comms":
            comm_params.append({"ts": ts, "tid": e.get("tid"), **args})
        dims = args.get("Input Dims")
        types = args.get("Input type")
        host_rows.append({"tid": str(e.get("tid")), "name": name, "cat": cat, "ts": ts, "dur": dur,
                          "dims": dims if isinstance(dims, list) else [],
                          "types": [_dtype_of(t) for t in types] if isinstance(types, list) else [],
                          "out_dims": [], "rf_id": args.get("Record function id", -1),
                          # a runtime call shares its op's External id: only the op owns the kernels
                          "ext_id": -1 if cat.startswith("cuda_") else args.get("External id", -1), "pg": "",
                          "extra": _extra_args(name, args),
                          # autograd's sequence number: a backward node carries its forward op's
                          "seq": _seq(args.get("Sequence number"))})
    if not host_rows and not kern_rows:
        meta = doc.get("metadata")
        if isinstance(meta, dict) and "iteration_us" in meta and "n_ranks" in meta:  # hybrid.engine.trace's export
            raise TraceFormatError(f"{path}: a timeline hybrid simulated (`simulate` / `llm train --trace`), not a "
                                   "PyTorch trace: its events are the engine's predictions, with no ops to re-cost")
        raise TraceFormatError(f"{path}: the Chrome trace has no op events (was it recorded by torch.profiler with "
                               "activities=[CPU]?)")
    if not host_rows:  # kernels without the ops that launched them: nothing has shapes to re-cost, no step window
        raise TraceFormatError(f"{path}: the Chrome trace has {len(kern_rows)} GPU kernel/copy event(s) but no host "
                               "op: recorded with activities=[CUDA] only? Record with activities=[CPU, CUDA] (the ops "
                               "and their shapes are the CPU side's)")
    if host_rows and not doc.get("record_shapes", 1) and all(not r["dims"] for r in host_rows):
        raise TraceFormatError(f"{path}: recorded without shapes; record with torch.profiler.profile(record_shapes=True)")
    # newer exports leave the flag out when it is off: no ATen op with input shapes says the same (an execution
    # trace of the same step can still supply them, so :func:`load_traces` decides)
    no_shapes = not any(r["dims"] for r in host_rows if r["name"].startswith("aten::"))
    no_shapes &= any(r["name"].startswith("aten::") for r in host_rows)
    ops = pd.DataFrame(host_rows, columns=[c for c in OP_COLUMNS if c not in ("id", "parent", "depth")])
    ops = ops.sort_values(["tid", "ts", "dur"], ascending=[True, True, False], kind="stable").reset_index(drop=True)
    # record_param_comms (NCCL): attach the process group to the enclosing collective op
    if comm_params:
        _attach_comm_params(ops, comm_params)
    kernels = pd.DataFrame(kern_rows, columns=["name", "cat", "stream", "ts", "dur", "ext_id", "device", "corr"])
    device = "cuda" if len(kernels) else str(doc.get("hybrid_traced_device") or "cpu")
    props = doc.get("deviceProperties") or []
    device_name = str(props[0].get("name", "")) if props and isinstance(props[0], dict) else ""
    pid = next((e.get("pid") for e in events if isinstance(e, dict) and e.get("ph") == "X"
                and e.get("cat") in HOST_CATEGORIES), None)
    tr = RankTrace(path, "kineto", rank, world, device, device_name, ops, kernels, groups,
                   meta={**{k: v for k, v in doc.items() if k != "traceEvents"}, "pid": pid,
                         **({"no_shapes": True} if no_shapes else {})})
    _check_metadata(tr.meta, path)
    return _finish(tr, step, launches)


def _check_metadata(meta: dict[str, Any], path: str) -> None:
    """Read the metadata ``trace_step`` stores (untraced step times, step memory, recording cost, fp32 switches,
    thread count) once as the file is loaded, so that a malformed entry is refused naming the file (the readers
    that use it later know only the metadata, and said "in the trace" of a job of several files)."""
    from hybrid.data.traces.memory import memory_of
    from hybrid.data.traces.overhead import overhead_of
    from hybrid.data.traces.precision import recorded_switches
    from hybrid.data.traces.record import untraced_step_us

    for read in (untraced_step_us, memory_of, overhead_of, recorded_switches):
        try:
            read(meta)
        except InvalidInputError as exc:
            raise TraceFormatError(f"{path}: {exc}") from None
    threads = meta.get("hybrid_torch_threads")
    if threads not in (None, "") and not (str(threads).isdigit() and int(str(threads)) >= 1):
        raise TraceFormatError(f"{path}: trace metadata 'hybrid_torch_threads' must be a thread count >= 1, got "
                               f"{threads!r}")


def _attach_comm_params(ops: pd.DataFrame, params: list[dict[str, Any]]) -> None:
    ts = ops["ts"].to_numpy()
    end = ts + ops["dur"].to_numpy()
    names = ops["name"].to_numpy()
    tids = ops["tid"].to_numpy()
    for p in params:
        inside = np.flatnonzero((tids == str(p.get("tid"))) & (ts <= p["ts"]) & (end >= p["ts"])
                                & np.char.startswith(names.astype(str), "c10d::"))
        if inside.size:
            i = int(inside[-1])
            ops.at[i, "pg"] = str(p.get("Process Group Name", ""))
            ops.at[i, "extra"] = {**ops.at[i, "extra"], "comm": {k: p[k] for k in p if k not in ("ts", "tid")}}


def _et_tensor_device(v: Any) -> str | None:
    """The device of one execution-trace tensor value (``[tensor id, storage id, offset, numel, element size,
    device]``), else None."""
    if isinstance(v, list) and len(v) == 6 and isinstance(v[5], str) and all(isinstance(x, int) for x in v[:5]):
        return v[5]
    return None


def et_tensor_devices(values: Any) -> list[str]:
    """The devices of the tensors among an execution-trace op's input ``values`` (a TensorList's tensors each
    counted; scalars and other arguments left out): ``cpu``, ``cuda:0``, ``meta``..."""
    out: list[str] = []
    for v in values if isinstance(values, list) else []:
        d = _et_tensor_device(v)
        if d is not None:
            out.append(d)
        elif isinstance(v, list):
            out.extend(d for d in map(_et_tensor_device, v) if d is not None)
    return out


def _parse_et(doc: dict, path: str) -> RankTrace:
    nodes = doc["nodes"]
    rows: list[dict[str, Any]] = []
    ids: dict[int, int] = {}
    for k, nd in enumerate(nodes):
        if not isinstance(nd, dict) or "id" not in nd or "name" not in nd:
            raise TraceFormatError(f"{path}: nodes[{k}] is not an execution-trace node (needs 'id' and 'name')")
        try:
            attrs = {a.get("name"): a.get("value") for a in nd.get("attrs", []) if isinstance(a, dict)}
            inputs = nd.get("inputs") or {}
            outputs = nd.get("outputs") or {}
            if isinstance(inputs, list):  # older ET schema: flat lists
                inputs = {"shapes": nd.get("input_shapes", []), "types": nd.get("input_types", [])}
                outputs = {"shapes": nd.get("output_shapes", []), "types": nd.get("output_types", [])}
            ids[int(nd["id"])] = len(rows)
            rows.append({"et_id": int(nd["id"]), "et_parent": int(nd.get("ctrl_deps", nd.get("parent", -1)) or -1),
                         "tid": str(attrs.get("tid", nd.get("tid", 0))), "name": str(nd["name"]),
                         "cat": "cpu_op" if "::" in str(nd["name"]) else "user_annotation",
                         "dims": list(inputs.get("shapes", [])),
                         "types": [_dtype_of(t) for t in inputs.get("types", [])],
                         "out_dims": list(outputs.get("shapes", [])), "rf_id": attrs.get("rf_id", -1), "ext_id": -1,
                         "pg": str(attrs.get("pg_name", "") or ""),
                         "extra": ({"values": inputs.get("values", [])} if "values" in inputs else {})
                         | ({"out_values": outputs.get("values", [])} if "values" in outputs else {})
                         | ({"strides": inputs["strides"]} if str(nd["name"]) in STRIDED_OPS
                            and isinstance(inputs.get("strides"), list) else {}),
                         "dur": float(attrs["dur"]) if "dur" in attrs else np.nan,
                         "seq": _seq(attrs.get("seq_id"))})
        except (TypeError, ValueError, AttributeError) as exc:  # a field of the wrong kind: no bare int() error
            raise TraceFormatError(f"{path}: nodes[{k}] ({str(nd['name'])!r}) is not a valid execution-trace node "
                                   f"({type(exc).__name__}: {exc})") from None
    if not rows:
        raise TraceFormatError(f"{path}: the execution trace has no nodes")
    et = pd.DataFrame(rows)
    et = et[~et["name"].isin(_ET_ROOTS)].sort_values("et_id", kind="stable").reset_index(drop=True)
    pos = {int(i): k for k, i in enumerate(et["et_id"])}
    parent = np.array([pos.get(int(p), -1) for p in et["et_parent"]], dtype=np.int64)
    depth = np.zeros(len(et), dtype=np.int64)
    for i in range(len(et)):  # ids increase from parent to child
        if parent[i] >= 0:
            depth[i] = depth[parent[i]] + 1
    et["parent"], et["depth"], et["id"] = parent, depth, np.arange(len(et))
    et["ts"] = et["et_id"].astype(np.float64)  # order only
    _, rank, world = _dist_info(doc, path)
    devices = {d for vals in et["extra"] for d in et_tensor_devices(vals.get("values", []))}
    device = "meta" if devices == {"meta"} else ("cuda" if any(d.startswith("cuda") for d in devices) else "cpu")
    tr = RankTrace(path, "et", rank, world, device, "",
                   et[list(OP_COLUMNS)].copy(), pd.DataFrame(columns=["name", "cat", "stream", "ts", "dur", "ext_id",
                                                                       "device", "op"]),
                   {"0": tuple(range(world))} if world > 1 else {}, (np.nan, np.nan), {"schema": doc.get("schema"), "pid": doc.get("pid")})
    if PRECISION_KEY in doc:  # the fp32 math switches ``trace_step`` stamps into its execution traces
        tr.meta[PRECISION_KEY] = doc[PRECISION_KEY]
    tr.meta["et_ops"] = et
    return tr


def _top_level(transparent: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Per op, whether every op enclosing it is ``transparent`` (none at all included); level by level from the
    roots (``depth`` from :func:`_nest`)."""
    top = np.ones(len(parent), dtype=bool)
    for d in range(1, int(depth.max(initial=0)) + 1):
        lvl = np.flatnonzero(depth == d)
        top[lvl] = top[parent[lvl]] & transparent[parent[lvl]]
    return top


def _launching_ops(ops: pd.DataFrame, parent: np.ndarray, kernels: pd.DataFrame,
                   launches: list[tuple[str, float, Any]]) -> np.ndarray:
    """Per kernel, the row of the innermost op whose runtime call launched it, found through the kernel's
    ``correlation`` id and the call's time on its thread; -1 where none. Older Kineto exports (PyTorch 1.x) give a
    kernel the External id of its runtime call, not of its op, so this is how their kernels find their ops."""
    out = np.full(len(kernels), -1, dtype=np.int64)
    if not launches or "corr" not in kernels.columns or ops.empty:
        return out
    calls = pd.DataFrame(launches, columns=["tid", "ts", "corr"]).drop_duplicates("corr", keep="last")
    hit = kernels[["corr"]].reset_index(drop=True).merge(calls, on="corr", how="left")
    tids = ops["tid"].astype(str).to_numpy()
    ts = ops["ts"].to_numpy(dtype=np.float64)
    end = ts + ops["dur"].to_numpy(dtype=np.float64)
    call_tid, call_ts = hit["tid"].to_numpy(dtype=object), hit["ts"].to_numpy(dtype=np.float64)
    for tid in pd.unique(call_tid[pd.notna(call_tid)]):
        rows = np.flatnonzero(tids == tid)  # ops sorted by (tid, ts): one thread's rows in start order
        if not len(rows):
            continue
        k = np.flatnonzero(call_tid == tid)
        i = rows[np.maximum(np.searchsorted(ts[rows], call_ts[k], side="right") - 1, 0)]
        # the last op that started before the call, or its nearest ancestor still running at the call
        outside = ~((ts[i] <= call_ts[k]) & (call_ts[k] < end[i]))
        while outside.any():
            i[outside] = parent[i[outside]]
            outside &= i >= 0
            outside[outside] = ~((ts[i[outside]] <= call_ts[k][outside]) & (call_ts[k][outside] < end[i[outside]]))
        out[k] = i
    return out


def _finish(tr: RankTrace, step: int | None, launches: list[tuple[str, float, Any]] | None = None) -> RankTrace:
    """Nest ops, pick the measured step window, link kernels to their ops (by External id, else through the
    runtime call that launched them: ``launches``, see :func:`_launching_ops`)."""
    ops = tr.ops
    parent, depth = _nest(ops)
    _check_overrun(ops, parent, tr.path)
    ops.insert(0, "id", np.arange(len(ops)))
    ops["parent"], ops["depth"] = parent, depth
    names = ops["name"].astype(str)
    # top level: no enclosing op but Python frames (a trace recorded with_stack=True nests everything in them) and
    # other steps (a frame of ``prof.step()`` that starts inside one step and ends in the next carries the next
    # step's annotation into the previous one)
    is_step = names.str.match(_STEP_RE).to_numpy(dtype=bool)
    top_level = _top_level((ops["cat"] == "python_function").to_numpy(dtype=bool) | is_step, parent, depth)
    steps = ops[is_step & top_level]
    steps = _pick_step(tr.path, names, steps, step, "kineto")
    if len(steps):
        s = steps.iloc[0]
        lo, hi = float(s["ts"]), float(s["ts"] + s["dur"])
        tr.meta["step"] = str(s["name"])
    else:
        top = ops[_top_level((ops["cat"] == "python_function").to_numpy(dtype=bool), parent, depth)
                  & (ops["cat"] != "python_function").to_numpy(dtype=bool)]
        lo, hi = float(top["ts"].min()), float((top["ts"] + top["dur"]).max())
    if len(tr.kernels):
        k = tr.kernels
        linked = ops["ext_id"] >= 0  # ops without an External id launch nothing we can attribute
        ext = dict(zip(ops.loc[linked, "ext_id"], ops.loc[linked, "id"], strict=False))
        k["op"] = [int(ext.get(e, -1)) for e in k["ext_id"]]
        unlinked = (k["op"] < 0).to_numpy()
        if unlinked.any() and launches:
            k.loc[unlinked, "op"] = _launching_ops(ops, parent, k[unlinked], launches)
        inside = (k["ts"] >= lo) & (k["op"] >= 0)
        inside &= k["op"].map(lambda i: lo <= ops.at[i, "ts"] < hi if i >= 0 else False).astype(bool)
        tr.kernels = k[inside].reset_index(drop=True)
        if len(tr.kernels):
            hi = max(hi, float((tr.kernels["ts"] + tr.kernels["dur"]).max()))
    tr.window = (lo, hi)
    # keep only ops inside the window (the step annotation itself stays as a root)
    keep = (ops["ts"] >= lo - 1e-3) & (ops["ts"] < hi)
    tr.ops = _reindex(ops[keep])
    if len(tr.kernels):
        # kernels point at their op's row: renumber them like the ops (an op dropped before the window shifts rows)
        new_of = pd.Series(np.arange(int(keep.sum())), index=ops.loc[keep, "id"].to_numpy())
        k = tr.kernels
        k["op"] = new_of.reindex(k["op"].to_numpy()).fillna(-1).astype(np.int64).to_numpy()
        tr.kernels = k[k["op"] >= 0].reset_index(drop=True)
    return tr


def _reindex(ops: pd.DataFrame) -> pd.DataFrame:
    """Renumber ``id``/``parent`` after dropping rows (a parent that was dropped becomes -1)."""
    old = ops["id"].to_numpy()
    new_of = pd.Series(np.arange(len(ops)), index=old)
    out = ops.copy()
    out["id"] = np.arange(len(ops))
    par = out["parent"].to_numpy()
    out["parent"] = new_of.reindex(par).fillna(-1).astype(np.int64).to_numpy()
    return out.reset_index(drop=True)


def _is_shape_list(d: Any) -> bool:
    return isinstance(d, list) and bool(d) and all(isinstance(x, list) and all(isinstance(v, int) for v in x)
                                                   for x in d)


def _fill_lists(dims: list, types: list, et_dims: list, et_types: list) -> tuple[list, list]:
    """Kineto records a TensorList argument (the parameter lists of ``_foreach_*`` and fused optimizer ops) as
    ``[]``; the execution trace has its shapes. Those arguments take the ET's shapes (and dtype). A TensorList whose
    shapes Kineto did record (``torch.cat``'s inputs) has no dtype there: it takes the ET's."""
    if not isinstance(et_dims, list) or not any(_is_shape_list(x) for x in et_dims):
        return dims, types
    if len(dims) != len(et_dims):
        return dims, types
    d_out, t_out = list(dims), list(types) + [None] * max(0, len(dims) - len(types))
    for i, (d, e) in enumerate(zip(dims, et_dims, strict=True)):
        et_type = et_types[i] if i < len(et_types) else None
        if d == [] and _is_shape_list(e):
            d_out[i] = e
            if et_type is not None:
                t_out[i] = et_type
        elif t_out[i] is None and et_type is not None and _is_shape_list(d) and _is_shape_list(e):
            t_out[i] = et_type
    return d_out, t_out[:max(len(types), len(dims))]


def _et_only_ops(kineto_ops: pd.DataFrame, et: RankTrace) -> dict[str, int]:
    """ATen ops of the execution trace's step that the Chrome trace did not record (no op of it has their
    record-function id), outermost ones per name: ops run on a thread the profiler's CPU activity did not follow
    (torch.profiler records the thread that started it and autograd's; the observer every thread), e.g. a Python
    thread of the step's own. None in the project's traces of single-threaded steps."""
    have = {int(r) for r in kineto_ops["rf_id"] if r is not None and int(r) > 0}
    eo = et.ops
    rf = np.array([int(r) if r is not None else -1 for r in eo["rf_id"]], dtype=np.int64)
    aten = eo["name"].astype(str).str.startswith("aten::").to_numpy(dtype=bool)
    lost = aten & (rf > 0) & ~np.isin(rf, list(have))
    parent = eo["parent"].to_numpy(dtype=np.int64)
    outer = lost & ~np.where(parent >= 0, lost[np.maximum(parent, 0)], False)
    counts = eo.loc[outer, "name"].astype(str).value_counts()
    return {str(k): int(v) for k, v in counts.items()}


def link(kineto: RankTrace, et: RankTrace) -> RankTrace:
    """Kineto times with the execution trace's output shapes, and the shapes of TensorList inputs Kineto leaves
    empty (matched by record-function id); an op Kineto recorded without shapes takes all of the ET's inputs."""
    if kineto.format != "kineto" or et.format != "et":
        raise TraceFormatError("link needs one Chrome (Kineto) trace and one execution trace")
    et_ops = et.meta.get("et_ops", et.ops)
    by_rf = {int(r): (o, p, d, t) for r, o, p, d, t in zip(et_ops["rf_id"], et_ops["out_dims"], et_ops["pg"],
                                                          et_ops["dims"], et_ops["types"], strict=True)
             if int(r or -1) > 0}
    ops = kineto.ops.copy()
    matched = 0
    outs, pgs, dims, types = [], [], [], []
    for rf, od, pg, d, t in zip(ops["rf_id"], ops["out_dims"], ops["pg"], ops["dims"], ops["types"], strict=True):
        hit = by_rf.get(int(rf)) if rf is not None and int(rf) > 0 else None
        if hit:
            matched += 1
            outs.append(hit[0])
            pgs.append(pg or hit[1])
            if not d and hit[2]:  # Kineto recorded without shapes: the execution trace's
                d, t = list(hit[2]), list(hit[3])
            else:
                d, t = _fill_lists(d, t, hit[2], hit[3])
        else:
            outs.append(od)
            pgs.append(pg)
        dims.append(d)
        types.append(t)
    if matched == 0:
        raise TraceFormatError(f"{kineto.path} and {et.path} share no record-function ids: they are not from the same "
                               "profiled step (record both inside the same profiler window)")
    ops["out_dims"], ops["pg"], ops["dims"], ops["types"] = outs, pgs, dims, types
    meta = {**kineto.meta, "linked_et": et.path, "et_matched": matched}
    missing = _et_only_ops(ops, et)
    if missing:
        meta["et_only_ops"] = missing
    return RankTrace(kineto.path, "kineto+et", kineto.rank, kineto.world_size, kineto.device, kineto.device_name, ops,
                     kineto.kernels, kineto.process_groups or et.process_groups, kineto.window, meta)


def load_trace(path: str | os.PathLike, step: int | None = None) -> RankTrace:
    """One trace file (Kineto or ET, detected from its content)."""
    doc = read_json(path)
    try:
        kind = trace_kind(doc)
    except TraceFormatError as exc:
        raise TraceFormatError(f"{path}: {exc}") from None
    return _parse_kineto(doc, str(path), step) if kind == "kineto" else _et_step(_parse_et(doc, str(path)), step)


def _pick_step(path: str, names: pd.Series, steps: pd.DataFrame, step: int | None, kind: str) -> pd.DataFrame:
    """The ``ProfilerStep#N`` rows among ``steps`` that ``step`` asks for (all of them without one); a step the
    trace does not have is a :class:`TraceFormatError` listing those it has."""
    if step is None:
        return steps
    numbers = names[steps.index].str.extract(_STEP_RE)[0].astype(int)
    if not (numbers == int(step)).any():
        raise MissingStepError(path, int(step), sorted(set(numbers.tolist())), kind)
    return steps[(numbers == int(step)).to_numpy()]


def _et_step(tr: RankTrace, step: int | None) -> RankTrace:
    """An execution trace's ops cut to one step, as a Chrome trace's are: the first ``ProfilerStep#N`` (or
    ``step``) and the ops under it. An execution trace recorded with a profiler schedule
    (``profile(execution_trace_observer=...)``) holds every active step; alone, all of them were predicted as one
    step (two steps: twice the time) and ``--step`` was ignored. The full op list stays in ``meta["et_ops"]``
    for linking with a Chrome trace (:func:`link`), which picks the step itself."""
    ops = tr.ops
    names = ops["name"].astype(str)
    is_step = names.str.match(_STEP_RE).to_numpy(dtype=bool) & (ops["parent"].to_numpy() < 0)
    steps = ops[is_step]
    steps = _pick_step(tr.path, names, steps, step, "et")
    if not len(steps):
        return tr
    root = int(steps.index[0])
    tr.meta["step"] = str(names.iat[root])
    parent = ops["parent"].to_numpy()
    depth = ops["depth"].to_numpy()
    keep = np.zeros(len(ops), dtype=bool)
    keep[root] = True
    # Ops of other threads recorded during the step are the step's too, as a Chrome trace's step window keeps them:
    # a GPU step's backward runs on the autograd engine's device thread, whose ops hang off that thread's root, not
    # the step annotation (alone, a GPU execution trace lost its whole backward pass). Node ids count up in
    # recording order; the step ends where its thread records its next top-level op.
    tids, order = ops["tid"].astype(str).to_numpy(), ops["ts"].to_numpy(dtype=np.float64)
    top = parent < 0
    after = top & (tids == tids[root]) & (order > order[root])
    end = order[after].min() if after.any() else np.inf
    keep[top & (tids != tids[root]) & (order > order[root]) & (order < end)] = True
    for d in range(int(depth[root]) + 1, int(depth.max(initial=0)) + 1):  # the kept roots' subtrees, level by level
        lvl = np.flatnonzero((depth == d) & (parent >= 0))
        keep[lvl] = keep[parent[lvl]]
    new_pos = np.cumsum(keep) - 1
    cut = ops[keep].reset_index(drop=True)
    old_parent = cut["parent"].to_numpy()
    cut["parent"] = np.where(old_parent >= 0, new_pos[np.maximum(old_parent, 0)], -1)
    cut["depth"] = cut["depth"] - int(ops["depth"].iat[root])
    cut["id"] = np.arange(len(cut))
    tr.ops = cut
    return tr


#: File names a trace directory is searched for (gzipped traces are read transparently).
TRACE_GLOBS = ("*.json", "*.json.gz")


def trace_files(paths: Iterable[str | os.PathLike]) -> list[str]:
    """Files of ``paths``: a file as given, a directory's ``*.json`` and ``*.json.gz`` files (sorted); a directory
    without any is an error naming it."""
    files: list[str] = []
    for p in paths:
        q = Path(p)
        if q.is_dir():
            found = sorted({str(f) for g in TRACE_GLOBS for f in q.glob(g) if f.is_file()})
            if not found:
                raise TraceFormatError(f"{q}: no trace files (*.json, *.json.gz) in this directory")
            files += found
        else:
            files.append(str(p))
    return files


#: Ops of a process group (c10d's ops and their backends' spans): a step of a rank of a distributed job calls one.
PG_OP_RE = re.compile(r"^(c10d::|nccl:|gloo:|c10d_functional::|_c10d_functional::)")


def _says(t: RankTrace) -> str:
    """How a trace names its rank: its ``distributedInfo`` (rank of world size), or none (one process)."""
    if t.format == "et":
        return f"{t.path}: an execution trace (names no rank)"
    if not isinstance(t.meta.get("distributedInfo"), dict):
        return f"{t.path}: no distributedInfo (a single-process run)"
    return f"{t.path}: rank {t.rank} of world size {t.world_size} (its distributedInfo)"


def _check_one_job(traces: list[RankTrace]) -> None:
    """Refuse traces that cannot be the ranks of one job, naming the files and why: several single-process
    recordings (world size 1: no ``distributedInfo``, or one of a one-rank job; e.g. the same model recorded twice,
    or on two machines), traces that disagree on the world size, two that claim the same rank, traces that disagree
    on the ranks of a process group of the same name (e.g. one rank of a 2-rank recording given with ranks of a
    3-rank one), and ranks none of whose steps calls a process-group op (ranks of one job meet in collectives;
    without any, nothing says they are one job, and each predicts alone the same)."""
    if len(traces) < 2:
        return
    tail = "; give one trace per rank of one recording"
    pids = {t.meta.get("pid") for t in traces}
    if (all(t.world_size == 1 and t.format == "kineto" for t in traces) and len(pids) == 1 and None not in pids
            and _disjoint([t.window for t in traces])):
        where = ", ".join(f"{t.meta.get('step') or 'no step annotation'} in {t.path}"
                          for t in sorted(traces, key=lambda t: t.window[0]))
        raise TraceFormatError(f"the traces are not of one job: they are {len(traces)} profiler windows of one process "
                               f"(process {pids.pop()}; {where}): a schedule with repeat > 1, or several profile() "
                               "calls, writes one file per window. Predict one file at a time (--step N picks a step "
                               "within it)")
    if all(t.world_size == 1 for t in traces):
        detail = "; ".join(_says(t) for t in traces)
        raise TraceFormatError(f"the traces are not of one job: each is a single-process run (world size 1), not a "
                               f"rank of a distributed job ({detail}): the same model recorded twice, or on two "
                               "machines? Predict each on its own (its Chrome trace, with its execution trace), or "
                               "record the job under torch.distributed (one trace per rank)")
    if len({t.world_size for t in traces}) > 1:
        detail = ", ".join(f"{t.path}: rank {t.rank} of {t.world_size}" for t in traces)
        raise TraceFormatError(f"the traces are not of one job: they disagree on its world size ({detail}){tail}")
    first: dict[int, str] = {}
    for t in traces:
        if t.rank in first:
            raise TraceFormatError(f"two traces claim rank {t.rank}: {first[t.rank]} and {t.path} (the same rank "
                                   "twice, or ranks of different jobs); give one trace per rank")
        first[t.rank] = t.path
    seen: dict[str, tuple[tuple[int, ...], str]] = {}
    for t in traces:
        for name, members in t.process_groups.items():
            ranks, where = seen.setdefault(name, (members, t.path))
            if ranks != members:
                raise TraceFormatError(f"the traces are not of one job: process group {name!r} is ranks "
                                       f"{list(ranks)} in {where} but {list(members)} in {t.path}{tail}")
    if not any(t.ops["name"].astype(str).str.match(PG_OP_RE).any() for t in traces):
        detail = "; ".join(_says(t) for t in traces)
        raise TraceFormatError(f"the traces are not of one job: no rank's traced step calls a process-group "
                               f"collective ({detail}), so nothing ties them together (ranks of one job meet in "
                               "their collectives: traces of separate runs?). Predict each on its own (a rank that "
                               "communicates nothing predicts alone the same), or give the ranks of a step that "
                               "communicates")


def _disjoint(windows: list[tuple[float, float]]) -> bool:
    """Whether time windows (on one clock) follow one another without overlapping (NaN windows never do)."""
    ws = sorted(windows)
    return all(np.isfinite(a[1]) and np.isfinite(b[0]) and a[1] <= b[0] for a, b in zip(ws, ws[1:], strict=False))


def _content_key(path: str | os.PathLike) -> tuple[int, str] | None:
    """Length and digest of a file's content, gunzipped (a trace and its gzipped copy agree); None where it cannot
    be read (:func:`load_trace` then says why)."""
    try:
        raw = Path(path).read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error):
        return None
    return len(raw), hashlib.sha1(raw, usedforsecurity=False).hexdigest()


def _refuse_copies(paths: list[str | os.PathLike]) -> None:
    """Refuse two files of the same content (a directory holding ``x.json`` and its ``x.json.gz``, a backup copy),
    naming the pair: read as two traces, they were refused as two single-process runs or two claims of one rank."""
    seen: dict[tuple[int, str], str] = {}
    for p in paths:
        key = _content_key(p)
        if key is None or not key[0]:
            continue
        if key in seen:
            first = seen[key]
            how = (" (the one gzipped, the other not)" if str(p).removesuffix(".gz") == first.removesuffix(".gz")
                   else "")
            raise TraceFormatError(f"{first} and {p} hold the same content{how}: one trace given twice; keep "
                                   "one of them (a directory's every *.json and *.json.gz is read as a trace)")
        seen[key] = str(p)


def _missing_step(missing: list[MissingStepError], loaded: list[RankTrace]) -> TraceFormatError:
    """One error for a ``--step`` some of the files given together lack, naming the file that decides: a Chrome
    trace before an execution trace (a directory lists ``et_rank0.json`` first, and the error named it, not the
    trace whose step is predicted), and the files that do have the step (an execution trace of other steps than
    its Chrome trace's: two recordings' files)."""
    missing = sorted(missing, key=lambda e: (e.kind != "kineto", e.path))
    first, rest = missing[0], missing[1:]
    msg = str(first)
    if rest:
        msg += "; nor has " + "; ".join(f"{e.path} ({e.has()})" for e in rest[:4])
    if loaded:
        have = ", ".join(t.path for t in loaded[:4])
        msg += (f"; {have} {'has' if len(loaded) == 1 else 'have'} it: files of different profiler windows (two "
                "recordings?) given together; give the files of one recording"
                + (", or leave the execution trace out" if any(t.format == "et" for t in loaded)
                   or any(e.kind != "kineto" for e in missing) else ""))
    return TraceFormatError(msg)


def load_traces(paths: Sequence[str | os.PathLike] | Iterable[str | os.PathLike], step: int | None = None
                ) -> list[RankTrace]:
    """Traces of one job: one per rank. A Kineto and an ET file of the same rank are linked."""
    paths = list(paths)
    given: dict[str, str] = {}
    for p in paths:
        real = os.path.realpath(p)
        if real in given:
            raise TraceFormatError(f"{p} is given twice (as {given[real]} too): give each rank's trace once")
        given[real] = str(p)
    if len(paths) > 1:
        _refuse_copies(paths)
    loaded, missing = [], []
    for p in paths:
        try:
            loaded.append(load_trace(p, step))
        except MissingStepError as exc:
            missing.append(exc)
    if missing:
        raise _missing_step(missing, loaded)
    if not loaded:
        raise TraceFormatError("no trace files given")
    kin = [t for t in loaded if t.format == "kineto"]
    ets = [t for t in loaded if t.format == "et"]
    if kin and ets:
        # an execution trace has no rank of its own: pair it with the Chrome trace of the same process (pid)
        by_pid = {t.meta.get("pid"): t for t in ets}
        if len(by_pid) != len(ets) or None in by_pid:
            # name the files: several recordings of one process (each its own pair) given together, most often
            shared = [t for t in ets if t.meta.get("pid") is None
                      or sum(u.meta.get("pid") == t.meta.get("pid") for u in ets) > 1]
            what = ", ".join(f"{t.path} (process {t.meta.get('pid', 'not named')})" for t in shared)
            raise TraceFormatError(f"cannot pair the execution traces with the Chrome traces by process: {what} "
                                   f"{'share a process id' if len(shared) > 1 else 'names no process'} (several "
                                   "recordings given together? predict each recording on its own: its Chrome trace "
                                   "with its execution trace, one job's ranks together)")
        out = []
        lone: list[RankTrace] = []  # Chrome traces without an execution trace of their process
        for k in kin:
            e = by_pid.pop(k.meta.get("pid"), None)
            out.append(link(k, e) if e is not None else k)
            if e is None:
                lone.append(k)
        if by_pid and lone:  # both kinds left unpaired: files of different recordings given together
            def pids(ts: Iterable[RankTrace]) -> str:
                return ", ".join(f"{t.path} (process {t.meta.get('pid')})" for t in ts)

            raise TraceFormatError(f"the execution trace(s) {pids(by_pid.values())} and the Chrome trace(s) "
                                   f"{pids(lone)} are of different processes: files of two recordings mixed? Give "
                                   "each rank's kineto_rank<r>.json with the et_rank<r>.json of the same recording")
        if by_pid:
            raise TraceFormatError(f"execution trace(s) {[t.path for t in by_pid.values()]} have no Chrome trace of "
                                   "the same process to link to: an execution trace alone has no times and names no "
                                   "rank, so it cannot stand for a rank beside ranks given with their Chrome traces; "
                                   "give that rank's Chrome trace (kineto_rank<r>.json of the same recording) too, or "
                                   "leave the execution trace out")
        loaded = out
    elif len(ets) > 1:
        raise TraceFormatError(f"{len(ets)} execution traces without their Chrome traces: an execution trace names no "
                               "rank, so several cannot be the ranks of one job; give each rank's Chrome trace "
                               "(kineto_rank<r>.json) with its execution trace (one execution trace alone predicts "
                               "one process)")
    for t in loaded:
        if t.format == "kineto" and t.meta.get("no_shapes"):
            raise TraceFormatError(f"{t.path}: recorded without shapes (no ATen op has input shapes); record with "
                                   "torch.profiler.profile(record_shapes=True), or give the execution trace of the "
                                   "same step beside it")
    _check_one_job(loaded)
    ranks = [t.rank for t in loaded]
    world = max(t.world_size for t in loaded)
    if sorted(ranks) != list(range(len(loaded))) or (world != len(loaded)):
        raise TraceFormatError(f"traces cover rank(s) {sorted(ranks)} of a {world}-rank job; give one trace per rank")
    return sorted(loaded, key=lambda t: t.rank)
