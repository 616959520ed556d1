"""Chrome trace (Trace Event Format) export of a simulated timeline: opens in Perfetto or chrome://tracing.

One process (``pid``) per rank and one thread (``tid``) per stream of that rank; every node is a complete
("X") event with its op name and the op's shape columns, predicted duration and costing method as ``args``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from hybrid.atomic import atomic_file
from hybrid.engine.graph import KINDS, SYNC
from hybrid.engine.simulate import SimResult
from hybrid.json_ready import json_ready

#: Stable thread ids for the usual streams (others follow in order of appearance).
STREAM_TIDS = {"host": 0, "compute": 1, "comm": 2}


#: Decimals (of a microsecond) the trace's ``ts`` and event ends are rounded to.
TS_DECIMALS = 4


def _rounded_spans(start: np.ndarray, finish: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``ts`` and ``dur`` per node with start and END rounded (not start and duration apart, whose rounding errors
    add up: an event could end 1e-4 us after the next one on its stream began, an improperly nested slice), and
    ``dur`` trimmed by an ulp where ``ts + dur`` in floating point would still pass the rounded end."""
    ts = np.round(np.asarray(start, dtype=np.float64), TS_DECIMALS)
    end = np.maximum(np.round(np.asarray(finish, dtype=np.float64), TS_DECIMALS), ts)
    dur = end - ts
    for _ in range(8):  # one or two steps at most: the sum is within an ulp of ``end``
        over = ts + dur > end
        if not over.any():
            break
        dur[over] = np.nextafter(dur[over], 0.0)
    return ts, dur


def chrome_trace(result: SimResult, name: str = "hybrid simulation") -> dict[str, Any]:
    """The trace as a JSON-ready dict ``{"traceEvents": [...], "displayTimeUnit": "ns", "metadata": ...}``."""
    g = result.graph
    events: list[dict[str, Any]] = []
    tids: dict[int, int] = {}
    for sid, (rank, stream) in enumerate(g.stream_names):
        tid = STREAM_TIDS.get(stream)
        if tid is None:
            tid = len(STREAM_TIDS) + sid
        tids[sid] = tid
        events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": stream}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid, "args": {"sort_index": tid}})
    for rank in range(g.n_ranks):
        events.append({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}})
    ops = g.ops.to_dict(orient="records") if len(g.ops) else []
    ts, dur = _rounded_spans(result.start, result.finish)
    for i in range(len(g)):
        if g.kind[i] == SYNC:
            continue
        args: dict[str, Any] = {"kind": KINDS[g.kind[i]], "duration_us": round(float(result.durations[i]), 4)}
        if g.op_index[i] >= 0:
            args.update({k: json_ready(v) for k, v in ops[g.op_index[i]].items() if json_ready(v) is not None})
            if result.methods is not None:
                args["method"] = str(result.methods[i])
        if g.group[i] >= 0:
            args["collective_id"] = int(g.group[i])
        if g.args[i]:
            args.update({k: json_ready(v) for k, v in g.args[i].items()})
        events.append({
            "ph": "X", "name": g.names[i], "cat": KINDS[g.kind[i]], "pid": int(g.rank[i]),
            "tid": tids[int(g.stream[i])], "ts": float(ts[i]), "dur": float(dur[i]), "args": args,
        })
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "metadata": {"name": name, "iteration_us": result.iteration_us, "n_ranks": g.n_ranks}}


def write_chrome_trace(result: SimResult, path: str | os.PathLike, name: str = "hybrid simulation") -> Path:
    """Write :func:`chrome_trace` to ``path`` atomically (:func:`hybrid.atomic.atomic_file`: usual permissions,
    a clear error for an unwritable path, no temporary left behind)."""
    p = Path(path)
    trace = chrome_trace(result, name)
    with atomic_file(p) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        json.dump(trace, fh, separators=(",", ":"))
    return p
