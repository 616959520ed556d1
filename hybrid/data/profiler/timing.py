"""Timing discipline: warm-up, adaptive repeats, median and spread, cache-busting buffer rotation.

Every profiler measurement goes through :func:`measure`. On the CPU each repeat is bracketed by
``time.perf_counter_ns`` (``clock="wall"``) or by ``time.thread_time_ns`` (``clock="thread"``: the time the
measuring thread spent on a core, so a profile on a shared machine does not count the time a neighbour held the
core; only meaningful with one intra-op thread, where the op runs on the calling thread); on a GPU by CUDA
events, after synchronising so queued work is not counted and before reading the elapsed time. Repeats continue until ``policy.target_s`` of timed work and ``policy.min_repeats``
are reached (or ``policy.max_repeats`` / ``policy.max_s``). Callers pass ``run(i)``, which should use input
set ``i % n_sets`` from :func:`rotation_sets`, so small working sets are not timed as cache hits.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hybrid.data.profiler.backend import Backend
from hybrid.errors import InvalidInputError


@dataclass(frozen=True)
class TimingPolicy:
    """How long to measure one configuration."""

    warmup: int = 2
    min_repeats: int = 5
    max_repeats: int = 200
    target_s: float = 0.15  # stop once this much timed work is collected (and min_repeats reached)
    max_s: float = 1.5  # hard cap on timed work for one configuration


#: Full-profile and ``--quick`` policies.
FULL_POLICY = TimingPolicy()
QUICK_POLICY = TimingPolicy(warmup=1, min_repeats=3, max_repeats=40, target_s=0.02, max_s=0.3)

#: Clocks :func:`measure` knows: CUDA events (GPU), wall clock, on-core time of the calling thread (CPU).
CLOCKS = ("cuda-events", "wall", "thread")


def choose_clock(backend: Backend, requested: str = "auto") -> str:
    """The clock a profile uses: CUDA events on a GPU; on a CPU the on-core ``thread`` clock when one intra-op
    thread runs the ops (``auto``), else the wall clock. ``requested`` = auto, wall or thread."""
    req = requested.strip().lower()
    if req not in ("auto", "wall", "thread"):
        raise InvalidInputError(f"--clock must be auto, wall or thread, got {requested!r}")
    if backend.is_cuda:
        return "cuda-events"
    if req == "thread" and backend.threads != 1:
        raise InvalidInputError(f"--clock thread measures the calling thread only: it needs --threads 1 (got "
                                f"{backend.threads} threads)")
    if req == "auto":
        return "thread" if backend.threads == 1 else "wall"
    return req


@dataclass(frozen=True)
class Timing:
    """Summary of the repeats of one measurement, in microseconds."""

    median_us: float
    std_us: float
    min_us: float
    max_us: float
    repeats: int

    def as_row(self) -> dict[str, float | int]:
        """The canonical-table timing columns."""
        return {"time_us": self.median_us, "time_us_std": self.std_us, "time_us_min": self.min_us,
                "time_us_max": self.max_us, "repeats": self.repeats}

    @classmethod
    def from_samples(cls, samples_us: list[float] | np.ndarray) -> Timing:
        s = np.asarray(samples_us, dtype=np.float64)
        if s.size == 0:
            raise ValueError("no timing samples")
        # A timer tick can read 0 for the tiniest op; the table needs time_us > 0.
        s = np.maximum(s, 1e-3)
        return cls(float(np.median(s)), float(s.std(ddof=1)) if s.size > 1 else 0.0, float(s.min()),
                   float(s.max()), int(s.size))


def measure(
    backend: Backend,
    run: Callable[[int], Any],
    *,
    prepare: Callable[[int], Any] | None = None,
    policy: TimingPolicy = FULL_POLICY,
    clock: str = "wall",
) -> Timing:
    """Time ``run(i)`` for i = 0, 1, ...; ``prepare(i)`` (untimed) runs before each call if given.

    Warm-up calls are not recorded. Returns the median and spread of the timed repeats. ``clock`` (CPU only):
    ``wall`` or ``thread`` (see the module docstring); a GPU always uses CUDA events.
    """
    now = time.thread_time_ns if clock == "thread" else time.perf_counter_ns
    for i in range(policy.warmup):
        if prepare is not None:
            prepare(i)
        run(i)
    backend.synchronize()
    samples: list[float] = []
    total = 0.0
    i = policy.warmup
    if backend.is_cuda:
        torch = backend.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    while True:
        if prepare is not None:
            prepare(i)
        if backend.is_cuda:
            torch.cuda.synchronize()  # nothing queued before the start event
            start.record()
            run(i)
            end.record()
            end.synchronize()
            dt_us = start.elapsed_time(end) * 1e3
        else:
            t0 = now()
            run(i)
            dt_us = (now() - t0) / 1e3
        samples.append(dt_us)
        total += dt_us * 1e-6
        i += 1
        n = len(samples)
        if n >= policy.max_repeats or total >= policy.max_s:
            break
        if n >= policy.min_repeats and total >= policy.target_s:
            break
    return Timing.from_samples(samples)


def last_level_cache_bytes(backend: Backend | None = None) -> int:
    """Size of the last-level cache: the GPU's L2, or the CPU's largest cache level (32 MiB if unknown)."""
    if backend is not None and backend.is_cuda:
        props = backend.torch.cuda.get_device_properties(backend.torch.cuda.current_device())
        return int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            size = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:], 1)
        digits = size.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * mult)
    return best or 32 * 2**20


def rotation_sets(working_set_bytes: float, llc_bytes: float, *, max_sets: int = 16,
                  max_bytes: float = 1 * 2**30) -> int:
    """How many independent input sets to rotate through so their total exceeds twice the last-level cache.

    A working set already larger than the cache needs 1; the count is capped by ``max_sets`` and by
    ``max_bytes`` of total memory.
    """
    if working_set_bytes <= 0:
        return 1
    want = math.ceil(2.0 * llc_bytes / working_set_bytes) + 1 if working_set_bytes < 2.0 * llc_bytes else 1
    by_memory = max(1, int(max_bytes // working_set_bytes))
    return int(max(1, min(want, max_sets, by_memory)))
