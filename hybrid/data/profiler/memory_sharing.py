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
import queue
import time
from dataclasses import dataclass

import numpy as np

from hybrid.errors import HybridError


@dataclass(frozen=True)
class SharedBandwidth:
    """Stream rates (bytes/s, medians) of one process alone and of each of ``procs`` concurrent processes."""

    procs: int
    alone: float
    concurrent: tuple[float, ...]
    nbytes: int = 0  #: copy size of each stream (:func:`shared_copy_bytes`)

    @property
    def ratio(self) -> float:
        """Total concurrent stream rate over the lone stream rate (1 = no more bandwidth than one core uses)."""
        return float(sum(self.concurrent) / self.alone)

    @property
    def bandwidth_ratio(self) -> float:
        """:attr:`ratio`, at most ``procs``: what the memory system gives ``procs`` streams together over what it
        gives one. ``procs`` one-thread copies cannot together stream more than ``procs`` times the lone copy; a
        larger ratio means the lone copy was slowed by another tenant (2.86 for 2 streams seen on a shared 2-core
        VM), and ``mem_bw_shared_gbps`` = ``mem_bw`` x ratio claimed 30 GB/s for two cores of 9.8 GB/s each."""
        return float(min(self.ratio, self.procs))

    def details(self, mem_bw: float) -> dict[str, float | int]:
        """The ceilings' ``details`` of this measurement, with the device's lone-copy bandwidth ``mem_bw``
        (bytes/s): ``mem_bw_shared`` (bytes/s) = ``mem_bw`` x :attr:`bandwidth_ratio`; ``shared_ratio_measured``
        is the raw :attr:`ratio`."""
        return {"shared_procs": self.procs, "shared_ratio": self.bandwidth_ratio,
                "shared_ratio_measured": self.ratio, "mem_bw_shared": mem_bw * self.bandwidth_ratio,
                "shared_copy_bytes": self.nbytes}


#: Share of the memory available when the step starts that the streaming processes' buffers may take together.
MEMORY_SHARE = 0.5


def shared_copy_bytes(nbytes: int, procs: int, available: float | None) -> int:
    """The copy each of ``procs`` streaming processes times: ``nbytes`` (the ceiling's), or less so that their
    source and destination buffers together (``2 * procs * size``) take at most :data:`MEMORY_SHARE` of
    ``available`` bytes (None: unknown, no cap), yet never under ``nbytes // 4`` (the ceiling's copy is at least
    8x the last-level cache, so still 2x). Each process held two copies of the ceiling's buffer: 15 GiB on a
    2-core, 23 GiB VM whose 480 MiB L3 makes a 3.75 GiB ceiling copy, where the OOM killer picks any process.
    :class:`HybridError` when even the smallest size does not fit."""
    nbytes = int(nbytes)
    if available is None or nbytes <= 0:
        return nbytes
    fits = int(MEMORY_SHARE * float(available) / (2 * procs)) // 4 * 4
    if fits >= nbytes:
        return nbytes
    if fits < nbytes // 4:
        raise HybridError(f"{procs} processes each copying {nbytes / 2**20:.0f} MiB (at least {nbytes / 4 / 2**20:.0f}"
                          f" MiB) need {2 * procs * nbytes / 4 / 2**30:.1f} GiB or more; "
                          f"{float(available) / 2**30:.1f} GiB of memory is available")
    return fits


#: How long the streaming processes may take before the measurement is given up (spawn, torch import, copies).
RUN_TIMEOUT_S = 600.0


def _stream(nbytes: int, repeats: int, start, out) -> None:
    import signal

    # Ctrl-C reaches the whole process group: the parent stops and terminates the workers, which need not each
    # print a KeyboardInterrupt traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch

    torch.set_num_threads(1)
    src = torch.rand(nbytes // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    start.wait(timeout=RUN_TIMEOUT_S)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t0)
    out.put(2.0 * nbytes / float(np.median(times)))


def _run(nbytes: int, repeats: int, procs: int) -> list[float]:
    """Stream rates of ``procs`` processes copying at once. A worker that dies (killed for memory: ``procs`` copies
    of the ceiling's buffer are in memory together) is a :class:`HybridError` as soon as it is seen, never a wait
    for a rate that will not come: the others would wait at the barrier for it, the parent on the queue and then,
    at exit, on them."""
    ctx = mp.get_context("spawn")
    start, out = ctx.Barrier(procs), ctx.Queue()
    workers = [ctx.Process(target=_stream, args=(nbytes, repeats, start, out), daemon=True) for _ in range(procs)]
    try:
        for w in workers:
            w.start()
        rates: list[float] = []
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while len(rates) < procs:
            try:
                rates.append(out.get(timeout=0.5))
            except queue.Empty:
                dead = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
                if dead:
                    raise HybridError(f"a memory-streaming process exited with code {dead[0]} (out of memory? "
                                      f"{procs} processes each copy {nbytes / 2**20:.0f} MiB)") from None
                if time.monotonic() > deadline:
                    raise HybridError(f"the {procs} memory-streaming processes did not finish in "
                                      f"{RUN_TIMEOUT_S:.0f} s") from None
        for w in workers:
            w.join()
        return rates
    finally:
        for w in workers:
            if w.is_alive():
                w.terminate()
        for w in workers:
            if w.pid is not None:
                w.join(timeout=10)


def measure_shared_bandwidth(nbytes: int, repeats: int = 10, procs: int | None = None,
                             trials: int = 3, available: float | None = -1.0) -> SharedBandwidth | None:
    """Lone and concurrent stream rates of a ``nbytes`` copy (the trial with the median ratio of ``trials``
    alternating lone/concurrent pairs: on a shared VM the bandwidth other tenants leave moves from minute to
    minute, 1.0-1.9x for two streams on this project's 2-core VMs); None on a machine with one core. A streaming
    process that dies or hangs is a :class:`HybridError`. The copy may be smaller than ``nbytes`` so that every
    process's buffers fit in the ``available`` memory (default: what the host has available now; None: no cap):
    :func:`shared_copy_bytes`, the size used is the result's ``nbytes``."""
    procs = procs or len(os.sched_getaffinity(0))
    if procs < 2:
        return None
    if available is not None and available < 0:
        from hybrid.hardware.cpu import available_memory_bytes

        available = available_memory_bytes()
    nbytes = shared_copy_bytes(nbytes, procs, available)
    found = []
    for _ in range(max(1, int(trials))):
        alone = _run(nbytes, repeats, 1)[0]
        found.append(SharedBandwidth(procs=procs, alone=alone, concurrent=tuple(_run(nbytes, repeats, procs)),
                                     nbytes=nbytes))
    found.sort(key=lambda r: r.ratio)
    return found[len(found) // 2]
