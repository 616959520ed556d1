"""Kernel time of each profiled configuration: its CUPTI kernels alone, without the host (``--kernel-times``).

The profile's own timing brackets one eager op with CUDA events (:mod:`hybrid.data.profiler.timing`): the
op's Python and ATen dispatch and its launch are inside the bracket, so an op whose kernel is shorter than the
host's dispatch floor (15-25 us per op on the GPU machines measured so far) is timed at the floor, which belongs
to the host, not the GPU (``experiments/trace_gpu``: predictors fitted on such timings miss single traced ops by
84-121%). This pass runs every configuration once more under ``torch.profiler`` (CPU and CUDA activities, one
session for a whole family), marks each of :data:`KERNEL_CALLS` calls with ``record_function``, and reads back
the CUPTI durations of the kernels each call launched (:func:`hybrid.data.traces.annotations.annotation_kernel_us`,
by time range, so autograd's backward thread counts too). The median over the calls is the row's ``time_us``,
``framework = "cupti"`` (kernel-only timing, which the kernel models read as such).

It runs after the family's eager timings, so the profiler's own overhead never touches them. A failure here
(profiler unavailable, trace export or parse error) costs the kernel rows, never the eager ones: the runner logs
it and goes on.
"""

from __future__ import annotations

import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hybrid.data.profiler.backend import Backend
from hybrid.data.profiler.cases import Case

#: ``record_function`` name prefix of a marked call: ``<MARK><case index>:<call>``.
MARK = "hybrid-kernel-time:"
#: Marked calls per configuration (after :data:`WARMUP` unmarked ones).
KERNEL_CALLS = 3
WARMUP = 1
#: ``framework`` of kernel-only rows read from CUPTI activity records (this pass's and
#: :func:`hybrid.workloads.trace_kernels.kernel_rows`'): one of ``KERNEL_TIMING_FRAMEWORKS`` of the kernel models.
KERNEL_FRAMEWORK = "cupti"
#: Default cap (s) on one family's pass: cases not reached by then get no kernel row (a lent GPU's session gives
#: each family a fixed time; the eager rows come first and must not be lost to this pass).
MAX_PASS_S = 60.0


def kernel_pass(backend: Backend, cases: list[Case], *, calls: int = KERNEL_CALLS, warmup: int = WARMUP,
                skip: Callable[[BaseException], bool] | None = None, max_s: float | None = MAX_PASS_S
                ) -> dict[int, float]:
    """Median summed kernel time (us) of each case's marked calls, by position in ``cases``; cases that launched
    no kernel (a CPU backend: no CUDA activity), failed to build / run (``skip(exc)`` true: out of memory) or
    were not reached within ``max_s`` seconds are absent."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from hybrid.data.traces.annotations import annotation_kernel_us
    from hybrid.data.traces.parse import load_trace

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if backend.is_cuda else [])
    started = time.perf_counter()
    marked = 0
    with profile(activities=activities, record_shapes=True) as prof:
        for idx, case in enumerate(cases):
            if max_s is not None and time.perf_counter() - started > max_s:
                break
            run = prepare = None
            try:
                run, prepare = case.build()
                for i in range(warmup):
                    _call(run, prepare, i)
                backend.synchronize()
                for j in range(calls):
                    if prepare is not None:
                        prepare(warmup + j)
                    with record_function(f"{MARK}{idx}:{j}"):
                        run(warmup + j)
                    backend.synchronize()
                    marked += 1
            except Exception as exc:  # noqa: BLE001 - a case that cannot run here has no kernel row
                if skip is None or not skip(exc):
                    raise
            finally:
                run = prepare = None
    if not marked:  # nothing ran (no case reached, or every one skipped): an empty trace has nothing to read
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel_times.json"
        prof.export_chrome_trace(str(path))
        trace = load_trace(path)
    per: dict[int, list[float]] = defaultdict(list)
    for name, us in annotation_kernel_us(trace, MARK).items():
        per[int(name[len(MARK):].split(":", 1)[0])].append(us)
    return {i: float(np.median(v)) for i, v in per.items() if v and np.median(v) > 0}


def _call(run: Callable[[int], Any], prepare: Callable[[int], Any] | None, i: int) -> None:
    if prepare is not None:
        prepare(i)
    run(i)


def kernel_time_rows(cases: list[Case], times: dict[int, float], calls: int = KERNEL_CALLS
                     ) -> list[dict[str, Any]]:
    """The rows of ``cases`` that :func:`kernel_pass` timed: each case's shape columns, ``time_us`` the median
    kernel time, ``repeats`` the marked calls (the runner adds device, provenance and :data:`KERNEL_FRAMEWORK`)."""
    return [{**cases[i].row, "time_us": us, "repeats": calls} for i, us in sorted(times.items())]
