"""Streams and dependencies of a traced step, inferred from the trace's threads, times and backend work.

For one rank's units (:func:`hybrid.workloads.trace_units.trace_units`) :func:`rank_schedule` works out, in
numpy over the whole table at once:

* the **stream** of every unit: the thread that ran the step (the one holding ``ProfilerStep#``, else the
  busiest) is the engine's ``host`` stream, every other thread its own ``host:<tid>`` stream;
* the **host gap** before every unit: the traced time on its thread since the previous unit ended (the first
  unit of the main thread: since the step began), i.e. the "CPU ops and launch gaps" of the trace;
* **cross-thread dependencies**: a unit waits for the latest unit of each other thread of its rank that had
  ended before it started in the trace (sort + searchsorted per pair of threads; a dependency that the
  previous unit of the same thread already had is not repeated); in an execution trace alone (no times), for the
  latest recorded before it (its node ids order the ops across threads: the forward, then the autograd thread's
  backward, then the optimizer);
* **waits for other threads**: where a unit's cross-thread dependency ended inside the host gap before it,
  the thread idled in that gap until then (the main thread of a CUDA job inside ``loss.backward()`` while the
  autograd thread runs): ``wait_us`` is that part of the gap, traced time that is no host work;
* **host ops in the gaps**: the traced host ops no unit holds (autograd nodes, composite ops whose children are
  the units, annotations), each counted in the gap before the first unit of its thread that starts at or after
  it (``gap_events``; those after the main thread's last unit in ``attrs["trailing_events"]``): the host work
  of the gaps, op by op, where the traced gap time itself is dropped (``host="model"``);
* **asynchronous collectives** (gloo on a CPU): a ``c10d::`` call whose backend work (the ``gloo:*`` op on
  gloo's own thread) outlasts the call is only the enqueue. The work runs beside the caller, and the rank waits
  for it only where the trace shows a wait: the first unit of the calling thread that started after the work
  ended, with the work's end falling in the host gap before it (DDP's ``finalize_backward`` before the
  optimizer, an explicit ``work.wait()``). A work whose end falls inside a running unit was not waited for
  there; the rank then waits for it at the end of the step. A call that lasts as long as its work (a blocking
  ``broadcast``) blocks the caller.

Units are placed in time order across the threads of a rank (the order that makes every inferred dependency
point to a node that already exists).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from hybrid.data.traces.parse import RankTrace
from hybrid.engine.graph import HOST
from hybrid.workloads.trace_units import op_depths, ops_by_depth

#: Tolerance (us) of "ended before it started" between threads (timer rounding).
TIME_EPS_US = 1e-3
#: A collective call counts as blocking (it waited for its work) when it ends less than this before its backend
#: work ends: the wake-up of the waiting thread, and the backend closing its own record after completing the work
#: (us, or this share of the work's duration where that is longer).
BLOCKING_SLACK_US, BLOCKING_SLACK_SHARE = 100.0, 0.05


def main_tid(trace: RankTrace, units: pd.DataFrame) -> str:
    """The thread that ran the step: the one with the ``ProfilerStep#`` annotation, else the busiest."""
    ops = trace.ops
    step = ops[ops["name"].astype(str).str.startswith("ProfilerStep#")]
    if len(step):
        return str(step["tid"].iat[0])
    busy = units.groupby("tid")["dur"].sum()
    return str(busy.idxmax()) if len(busy) else str(ops["tid"].iat[0])


def backend_work(trace: RankTrace) -> pd.DataFrame:
    """The backend's own work of the trace's collectives (``gloo:*`` / ``nccl:*`` host ops), in start order:
    columns ``name, tid, ts, end``."""
    ops = trace.ops
    names = ops["name"].astype(str)
    w = ops[names.str.startswith("gloo:") | names.str.startswith("nccl:")]
    out = pd.DataFrame({"name": w["name"].astype(str).to_numpy(), "tid": w["tid"].astype(str).to_numpy(),
                        "ts": w["ts"].to_numpy(dtype=np.float64),
                        "end": (w["ts"] + w["dur"]).to_numpy(dtype=np.float64)})
    return out.sort_values("ts", kind="stable").reset_index(drop=True)


def _cross_thread_deps(tid: np.ndarray, ts: np.ndarray, end: np.ndarray) -> list[list[int]]:
    """Per unit (rows in placement order): the units of other threads it waits for (see the module docstring)."""
    n = len(ts)
    out: list[list[int]] = [[] for _ in range(n)]
    threads = pd.unique(tid)
    if len(threads) < 2:
        return out
    rows_of = {t: np.flatnonzero(tid == t) for t in threads}
    for t in threads:
        mine = rows_of[t]
        for s in threads:
            if s == t:
                continue
            other = rows_of[s]
            ends = np.maximum.accumulate(end[other])
            k = np.searchsorted(ends, ts[mine] + TIME_EPS_US, side="right") - 1
            dep = np.where(k >= 0, other[np.maximum(k, 0)], -1)
            new = dep >= 0
            new[1:] &= dep[1:] != dep[:-1]  # the previous unit of this thread already waited for it
            for i, d in zip(mine[new].tolist(), dep[new].tolist(), strict=True):
                if d < i:
                    out[i].append(d)
    return out


def rank_schedule(trace: RankTrace, units: pd.DataFrame) -> pd.DataFrame:
    """``units`` of one rank in placement order (time order across threads), with the inferred columns
    ``stream`` (engine stream of the calling thread), ``gap_us`` (host gap before the unit on its thread; NaN
    without times), ``wait_us`` (the part of that gap spent waiting for another thread), ``xdeps`` (positions of units on other threads it waits for), and for collectives
    ``backend_ts``/``backend_end`` (their backend work; NaN where none is traced), ``async_comm`` (the call
    only enqueued the work) and ``waits_for`` (per unit: positions of the asynchronous collectives it is the
    first to wait for). ``trailing_gap_us`` (host time after the last unit of the main thread) is in
    ``attrs``."""
    u = units.copy()
    main = main_tid(trace, u)
    tid = u["tid"].astype(str).to_numpy(dtype=object)
    u["stream"] = np.where(tid == main, HOST, "host:" + pd.Series(tid, dtype=object)).astype(object)
    n = len(u)
    ts = u["ts"].to_numpy(dtype=np.float64)
    end = ts + u["dur"].to_numpy(dtype=np.float64)
    has_times = trace.has_times and bool(np.isfinite(end).all())
    # an execution trace alone has no times, but its ops' order across threads (``ts`` = the node id)
    ordered = not has_times and n > 0 and bool(np.isfinite(ts).all())
    if has_times or ordered:
        order = np.lexsort((tid.astype(str), ts))  # time order, threads apart at equal times
        u = u.iloc[order].reset_index(drop=True)
        tid, ts, end = tid[order], ts[order], end[order]
    u["gap_us"] = np.nan
    u["wait_us"] = 0.0
    u["xdeps"] = pd.Series([[] for _ in range(n)], dtype=object)
    u["backend_ts"] = np.nan
    u["backend_end"] = np.nan
    u["async_comm"] = False
    u["waits_for"] = pd.Series([[] for _ in range(n)], dtype=object)
    u.attrs["trailing_gap_us"] = 0.0
    u.attrs["main_tid"] = main
    u["gap_events"], u.attrs["trailing_events"] = _gap_events(trace, u, tid, main, has_times)
    if ordered:  # each unit waits for the units of other threads recorded before it (no times to say more)
        u["xdeps"] = pd.Series(_cross_thread_deps(tid, ts, ts), dtype=object)
    if not has_times or n == 0:
        return u
    xdeps = _cross_thread_deps(tid, ts, end)
    u["xdeps"] = pd.Series(xdeps, dtype=object)
    src = np.fromiter((i for i, d in enumerate(xdeps) for _ in d), dtype=np.int64)
    dst = np.fromiter((j for d in xdeps for j in d), dtype=np.int64)
    dep_end = np.full(n, -np.inf)
    np.maximum.at(dep_end, src, end[dst])
    # host gaps: time on the unit's thread since the previous unit there ended (main thread: since the step began;
    # another thread's first unit: since the other thread's work it waits for ended, e.g. the autograd thread
    # picking up the backward that the main thread started)
    gap = np.zeros(n)
    prev_end = np.full(n, np.nan)
    for t in pd.unique(tid):
        rows = np.flatnonzero(tid == t)
        pe = np.empty(len(rows))
        pe[1:] = np.maximum.accumulate(end[rows])[:-1]
        first = rows[0]
        pe[0] = trace.window[0] if t == main else min(ts[first], dep_end[first]) if np.isfinite(dep_end[first]) \
            else ts[first]
        prev_end[rows] = pe
        gap[rows] = np.maximum(ts[rows] - pe, 0.0)
    u["gap_us"] = gap
    main_rows = np.flatnonzero(tid == main)
    if len(main_rows):
        u.attrs["trailing_gap_us"] = max(float(trace.window[1] - end[main_rows].max()), 0.0)
    # the part of a gap before the last cross-thread dependency ended is waiting for that thread
    u["wait_us"] = np.clip(dep_end - prev_end, 0.0, gap)
    _async_collectives(trace, u, tid, ts, end, prev_end)
    return u


def _gap_events(trace: RankTrace, u: pd.DataFrame, tid: np.ndarray, main: str, has_times: bool
                ) -> tuple[np.ndarray, float]:
    """Per unit, the traced host ops outside every unit that fall in the host gap before it (see the module
    docstring; without times, those recorded between the previous unit's op and its own), and those after the main
    thread's last unit."""
    ops = trace.ops
    n_ops, n = len(ops), len(u)
    out = np.zeros(n)
    if n_ops == 0:
        return out, 0.0
    parent = ops["parent"].to_numpy(dtype=np.int64)
    inside = np.zeros(n_ops, dtype=bool)
    own = u["op_id"].to_numpy(dtype=np.int64)
    # an op a unit stands for (its events counted in the unit); an op kept only for kernels it launched itself
    # (n_events 0) holds the units of its children, its own event is a gap's
    own = own[(own >= 0) & (own < n_ops) & (u["n_events"].to_numpy(dtype=np.float64) > 0)]
    inside[own] = True
    for lvl in ops_by_depth(op_depths(ops, parent))[1:]:  # descendants of a unit's op, level by level
        inside[lvl] |= inside[parent[lvl]]
    outside = np.flatnonzero(~inside)
    if n == 0:
        return out, float(len(outside))
    ev_tid = ops["tid"].astype(str).to_numpy(dtype=object)[outside]
    if has_times:  # the gap an op starts in
        ev_key, key = ops["ts"].to_numpy(dtype=np.float64)[outside] - TIME_EPS_US, u["ts"].to_numpy(dtype=np.float64)
    else:  # no times (an execution trace alone): the op order, a parent before its children
        ev_key, key = outside.astype(np.float64), u["op_id"].to_numpy(dtype=np.float64)
        key = np.where(key >= 0, key, np.nan)
    trailing = 0.0
    for t in pd.unique(tid):
        rows = np.flatnonzero((tid == t) & np.isfinite(key))
        if not len(rows):
            continue
        rows = rows[np.argsort(key[rows], kind="stable")]
        k = np.searchsorted(key[rows], ev_key[ev_tid == t], side="left")
        after = k >= len(rows)
        np.add.at(out, rows[k[~after]], 1.0)
        if t == main:
            trailing += float(after.sum())
        else:  # after another thread's last unit: counted there
            out[rows[-1]] += float(after.sum())
    return out, trailing


def _async_collectives(trace: RankTrace, u: pd.DataFrame, tid: np.ndarray, ts: np.ndarray, end: np.ndarray,
                       prev_end: np.ndarray) -> None:
    """Fill ``backend_*``, ``async_comm`` and ``waits_for`` (see the module docstring): the k-th traced
    collective call is the k-th piece of backend work, when the trace has as many of each."""
    coll = np.flatnonzero((u["kind"].to_numpy() == "collective") & (u["op_id"].to_numpy() >= 0))
    work = backend_work(trace)
    if not len(coll) or len(work) != len(coll) or len(trace.kernels):
        return  # GPU traces: NCCL's work is its kernels; no backend ops, or an ambiguous count: calls block
    coll = coll[np.argsort(ts[coll], kind="stable")]
    b_ts, b_end = work["ts"].to_numpy(), work["end"].to_numpy()
    u.loc[coll, "backend_ts"] = b_ts
    u.loc[coll, "backend_end"] = b_end
    is_async = end[coll] < b_end - np.maximum(BLOCKING_SLACK_US, BLOCKING_SLACK_SHARE * (b_end - b_ts))
    u.loc[coll, "async_comm"] = is_async
    waits: dict[int, list[int]] = {}
    for c, e in zip(coll[is_async].tolist(), b_end[is_async].tolist(), strict=True):
        rows = np.flatnonzero(tid == tid[c])
        later = rows[ts[rows] >= e - TIME_EPS_US]
        if len(later) and prev_end[later[0]] <= e + TIME_EPS_US:
            waits.setdefault(int(later[0]), []).append(c)
    wf = list(u["waits_for"])
    for j, cs in waits.items():
        wf[j] = cs
    u["waits_for"] = pd.Series(wf, index=u.index, dtype=object)


def cross_dep_nodes(xdeps: list[int], host_node: np.ndarray) -> list[Any]:
    """Node ids of the units a unit waits for (those already placed)."""
    return [int(host_node[j]) for j in xdeps if host_node[j] >= 0]
