"""How much memory bandwidth the whole CPU sustains when every core streams at once.

``hybrid profile`` times each op in one process, so a CPU's measured ``mem_bw`` is one core's stream. Ranks of a
multi-process run on one host (the DLRM harness, DDP on CPU) stream together and share what the memory system
delivers in total. This measures it: a large copy (the ceiling's) timed in one process alone and in ``procs``
processes at once, each pinned to one thread; the shared bandwidth is ``mem_bw`` times the ratio of the summed
concurrent stream rates to the lone stream rate (medians both, so the ratio compares like with like). The result is
the device's ``mem_bw_shared_gbps`` (``hybrid.engine.costs.SharedMemoryBandwidth`` uses it).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SharedBandwidth:
    """Stream rates (bytes/s, medians) of one process alone and of each of ``procs`` concurrent processes."""

    procs: int
    alone: float
    concurrent: tuple[float, ...]

    @property
    def ratio(self) -> float:
        """Total concurrent stream rate over the lone stream rate (1 = no more bandwidth than one core uses)."""
        return float(sum(self.concurrent) / self.alone)


def _stream(nbytes: int, repeats: int, start, out) -> None:
    import torch

    torch.set_num_threads(1)
    src = torch.rand(nbytes // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    start.wait()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t0)
    out.put(2.0 * nbytes / float(np.median(times)))


def _run(nbytes: int, repeats: int, procs: int) -> list[float]:
    ctx = mp.get_context("spawn")
    start, out = ctx.Barrier(procs), ctx.Queue()
    workers = [ctx.Process(target=_stream, args=(nbytes, repeats, start, out)) for _ in range(procs)]
    for w in workers:
        w.start()
    rates = [out.get(timeout=600) for _ in workers]
    for w in workers:
        w.join()
    return rates


def measure_shared_bandwidth(nbytes: int, repeats: int = 10, procs: int | None = None,
                             trials: int = 3) -> SharedBandwidth | None:
    """Lone and concurrent stream rates of a ``nbytes`` copy (the trial with the median ratio of ``trials``
    alternating lone/concurrent pairs: on a shared VM the bandwidth other tenants leave moves from minute to
    minute, 1.0-1.9x for two streams on this project's 2-core VMs); None on a machine with one core."""
    procs = procs or len(os.sched_getaffinity(0))
    if procs < 2:
        return None
    found = []
    for _ in range(max(1, int(trials))):
        alone = _run(nbytes, repeats, 1)[0]
        found.append(SharedBandwidth(procs=procs, alone=alone, concurrent=tuple(_run(nbytes, repeats, procs))))
    found.sort(key=lambda r: r.ratio)
    return found[len(found) // 2]
