"""Kernel time per annotated region of a trace: what a ``record_function`` range launched on the GPU.

``torch.profiler.record_function(name)`` marks a host time range. :func:`annotation_kernel_us` sums, per
top-level range whose name starts with a prefix, the CUPTI durations of the kernels (and memcpy / memset) whose
launching op started inside that range, on any thread: a backward pass runs on autograd's own thread, outside
the annotation's op tree but inside its time. Ranges must not overlap (each timed call is marked once, one after
the other). The profiler's kernel-time pass (:mod:`hybrid.data.profiler.kernel_times`) marks each timed call so.
"""

from __future__ import annotations

import numpy as np

from hybrid.data.traces.parse import RankTrace


def annotation_kernel_us(trace: RankTrace, prefix: str) -> dict[str, float]:
    """Summed kernel time (us) launched inside each top-level range whose name starts with ``prefix``, by
    range name (every such range appears, with 0.0 when it launched nothing; repeated names add up)."""
    ops = trace.ops
    if ops.empty:
        return {}
    names = ops["name"].astype(str).to_numpy()
    top = np.flatnonzero((ops["parent"].to_numpy() < 0) & np.char.startswith(names.astype(str), prefix))
    out = {str(names[i]): 0.0 for i in top}
    k = trace.kernels
    if not out or k.empty:
        return out
    start = ops["ts"].to_numpy(dtype=np.float64)[top]
    end = start + ops["dur"].to_numpy(dtype=np.float64)[top]
    order = np.argsort(start, kind="stable")
    start, end, top = start[order], end[order], top[order]
    kop = k["op"].to_numpy(dtype=np.int64)
    launched = np.where(kop >= 0, ops["ts"].to_numpy(dtype=np.float64)[np.maximum(kop, 0)], np.nan)
    slot = np.searchsorted(start, launched, side="right") - 1  # the last range starting at or before the launch
    ok = (kop >= 0) & (slot >= 0)
    ok &= launched < end[np.maximum(slot, 0)]
    sums = np.bincount(slot[ok], weights=k["dur"].to_numpy(dtype=np.float64)[ok], minlength=len(top))
    for j, i in enumerate(top):
        out[str(names[i])] += float(sums[j])
    return out
