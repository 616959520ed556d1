"""Collectives across N local processes with ``torch.distributed`` (gloo on the CPU, NCCL on GPUs).

Processes are spawned with :mod:`torch.multiprocessing` and rendezvous through a ``FileStore`` in a private
temporary directory (no network port needed). For each op and message size every rank: agrees on a repeat
count, then per repeat waits at a barrier, times the collective (on GPUs: CUDA synchronise around it), and the
per-repeat times are max-reduced over ranks, so a repeat costs as long as its slowest rank. ``size_bytes``
follows nccl-tests: all_reduce = buffer, all_gather = total output, reduce_scatter = total input, all_to_all =
per-rank send buffer. Elements are fp32.

A collective the backend does not support is never emulated: it is reported in ``unsupported`` (op ->
error message) and the bundle's ``meta.json`` records it.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
import warnings
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from hybrid.data.profiler.backend import Backend
from hybrid.data.profiler.timing import Timing
from hybrid.errors import HybridError

#: Collectives measured, in order.
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
#: Message sizes (bytes, nccl-tests convention): powers of 4 from 16 B to 64 MiB; quick: a subset to 16 MiB.
FULL_SIZES = tuple(4**k for k in range(2, 14))
QUICK_SIZES = (16, 1024, 65536, 2**20, 2**24)
#: Per-size timing budget: (min repeats, max repeats, target seconds), full / quick.
REPEATS = {False: (5, 100, 0.25), True: (3, 20, 0.04)}
#: How long a rank waits for its peers before giving up (a hung peer must not hang the profiler).
RENDEZVOUS_TIMEOUT_S = 180


@dataclass
class CollectiveResult:
    """Rows (canonical columns without device/system) and per-op notes from one world size."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    unsupported: dict[str, str] = field(default_factory=dict)
    calls: dict[str, str] = field(default_factory=dict)
    #: (op, size) points left out because ``skip`` held them (``hybrid profile --skip-existing``)
    already: int = 0


def run_collectives(backend: Backend, world: int, *, quick: bool, progress: bool = True,
                    ops: tuple[str, ...] = COLLECTIVE_OPS, sizes: tuple[int, ...] | None = None,
                    skip: Collection[tuple[str, float]] = ()) -> CollectiveResult:
    """Spawn ``world`` processes and measure ``ops`` over ``sizes``; returns rank 0's results. ``skip``: (op,
    ``size_bytes``) points measured before with this many ranks, left out (no process is started when that is
    every point)."""
    torch = backend.torch
    if world < 2:
        raise HybridError(f"collectives need at least 2 ranks, got {world}")
    if backend.is_cuda and torch.cuda.device_count() < world:
        raise HybridError(f"{world} ranks need {world} GPUs; this machine has {torch.cuda.device_count()}")
    sizes = tuple(sizes or (QUICK_SIZES if quick else FULL_SIZES))
    every = {op: distinct_sizes(op, sizes, world) for op in ops}
    plan = {op: [s for s in ss if not _held(op, message_bytes(op, s, world), skip)] for op, ss in every.items()}
    already = sum(len(every[op]) - len(plan[op]) for op in ops)
    plan = {op: ss for op, ss in plan.items() if ss}
    if not plan:
        return CollectiveResult(already=already)
    threads = max(1, backend.threads // world) if not backend.is_cuda else 1
    with tempfile.TemporaryDirectory(prefix="hybrid-collectives-") as tmp:
        out = Path(tmp) / "rank0.json"
        args = (world, str(Path(tmp) / "store"), str(out), plan, threads, backend.kind, quick, progress)
        ctx = None
        try:
            # daemonic, and stopped below: an interrupted parent (Ctrl-C, the SIGTERM of a time limit) neither
            # leaves ranks running nor waits at exit for ranks whose peers are gone
            ctx = torch.multiprocessing.start_processes(_worker, args=args, nprocs=world, join=False, daemon=True,
                                                        start_method="spawn")
            while not ctx.join():
                pass
        except Exception as exc:  # ProcessRaisedException / ProcessExitedException: one line for the user
            msg = str(exc).strip().splitlines()
            raise HybridError(f"collective benchmark with {world} processes failed: {msg[-1] if msg else exc}") from None
        finally:
            if ctx is not None:
                _stop(ctx.processes)
        data = json.loads(out.read_text())
    return CollectiveResult(rows=data["rows"], unsupported=data["unsupported"], calls=data["calls"], already=already)


def _stop(processes: list[Any]) -> None:
    """Terminate the ranks still running (none after a normal join), then kill any that ignores it."""
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join()


def _worker(rank: int, world: int, store_path: str, out_path: str, plan: dict[str, list[int]], threads: int,
            kind: str, quick: bool, progress: bool) -> None:
    import signal

    # Ctrl-C reaches the whole process group: the parent stops the ranks (run_collectives), which need not each
    # print a KeyboardInterrupt traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")
    torch.set_num_threads(threads)
    cuda = kind == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    store = dist.FileStore(store_path, world)
    dist.init_process_group("nccl" if cuda else "gloo", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=RENDEZVOUS_TIMEOUT_S))
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    gen = torch.Generator(device=device).manual_seed(1000 + rank)
    rows: list[dict[str, Any]] = []
    unsupported: dict[str, str] = {}
    calls: dict[str, str] = {}
    bar = None
    if progress and rank == 0:
        from tqdm import tqdm

        bar = tqdm(total=sum(len(ss) for ss in plan.values()), desc=f"collective x{world}", unit="cfg", leave=False)
    try:
        for op, sizes in plan.items():
            fn, call = _collective(dist, op, world)
            calls[op] = call
            # probe on a small buffer: an unsupported op raises on every rank alike
            try:
                bufs = _buffers(torch, op, 4 * world * 4, world, device, gen)
                fn(*bufs)
                _sync(torch, cuda)
            except (RuntimeError, NotImplementedError, ValueError) as exc:
                unsupported[op] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                dist.barrier()
                if bar is not None:
                    bar.update(len(sizes))
                continue
            for size in sizes:
                bufs = _buffers(torch, op, size, world, device, gen)
                timing = _time_op(torch, dist, fn, bufs, op, world, cuda, quick)
                if rank == 0:
                    rows.append({"op": op, "dtype": "fp32", "size_bytes": message_bytes(op, size, world),
                                 "n_ranks": world,
                                 "n_nodes": 1, "in_place": op == "all_reduce", "algorithm": call,
                                 "wrong": 0, **timing.as_row()})
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    if rank == 0:
        tmp = out_path + ".tmp"
        Path(tmp).write_text(json.dumps({"rows": rows, "unsupported": unsupported, "calls": calls}))
        os.replace(tmp, out_path)
    dist.barrier()
    dist.destroy_process_group()


def _collective(dist: Any, op: str, world: int) -> tuple[Any, str]:
    """(callable taking the op's buffers, name of the torch.distributed call)."""
    if op == "all_reduce":
        return (lambda x: dist.all_reduce(x)), "all_reduce"
    if op == "all_gather":
        return (lambda out, x: dist.all_gather_into_tensor(out, x)), "all_gather_into_tensor"
    if op == "reduce_scatter":
        rs = getattr(dist, "reduce_scatter_single", None)
        if rs is not None:
            return (lambda out, x: rs(out, x)), "reduce_scatter_single"
        return (lambda out, x: dist.reduce_scatter_tensor(out, x)), "reduce_scatter_tensor"
    if op == "all_to_all":
        return (lambda out, x: dist.all_to_all_single(out, x)), "all_to_all_single"
    raise HybridError(f"unknown collective {op!r}; known: {', '.join(COLLECTIVE_OPS)}")


def _held(op: str, nbytes: int, skip: Collection[tuple[str, float]]) -> bool:
    """Whether ``skip`` holds ``(op, nbytes)``; to 6 significant digits, as tables are compared
    (:func:`hybrid.data.profiler.cases.config_key`: 16 MiB reads back as 1.67772e7)."""
    return any(o == op and abs(float(b) - nbytes) <= 1e-5 * nbytes for o, b in skip)


def _elements(size: int, world: int) -> tuple[int, int]:
    """(fp32 elements of an all_reduce buffer, elements per rank's chunk of the other ops) for ``size`` bytes."""
    n = max(1, size // 4)
    return n, max(1, n // world)


def message_bytes(op: str, size: int, world: int) -> int:
    """``size_bytes`` of the buffers :func:`_buffers` builds for a requested ``size`` (nccl-tests convention).
    The other ops move whole chunks of ``size / world`` elements: with 8 ranks a 16 B all_gather is 8 x 4 B =
    32 B, with 3 ranks a 1 KiB one 1020 B; rows recorded the requested size instead."""
    n, chunk = _elements(size, world)
    return 4 * (n if op == "all_reduce" else chunk * world)


def distinct_sizes(op: str, sizes: Sequence[int], world: int) -> list[int]:
    """``sizes`` less those whose buffers (:func:`message_bytes`) repeat an earlier one's: with 16 or more ranks
    the 16 B and 64 B points of an all_gather are both one element per rank, which would be one configuration
    measured twice (two rows ``hybrid data merge`` refuses)."""
    seen: set[int] = set()
    out = []
    for size in sizes:
        b = message_bytes(op, size, world)
        if b not in seen:
            seen.add(b)
            out.append(size)
    return out


def _buffers(torch: Any, op: str, size: int, world: int, device: Any, gen: Any) -> tuple[Any, ...]:
    n, chunk = _elements(size, world)

    def rnd(k: int) -> Any:
        return torch.rand(k, generator=gen, device=device).add_(0.5)

    if op == "all_reduce":
        return (rnd(n),)
    if op == "all_gather":
        return (torch.empty(chunk * world, device=device), rnd(chunk))
    if op == "reduce_scatter":
        return (torch.empty(chunk, device=device), rnd(chunk * world))
    return (torch.empty(chunk * world, device=device), rnd(chunk * world))


def _sync(torch: Any, cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def _time_op(torch: Any, dist: Any, fn: Any, bufs: tuple[Any, ...], op: str, world: int, cuda: bool,
             quick: bool) -> Timing:
    lo, hi, target = REPEATS[quick]
    for _ in range(2):  # warm-up (connections, buffers)
        fn(*bufs)
    _sync(torch, cuda)
    dist.barrier()
    t0 = time.perf_counter()
    fn(*bufs)
    _sync(torch, cuda)
    probe = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    probe = probe.to(bufs[0].device) if cuda else probe
    dist.all_reduce(probe, op=dist.ReduceOp.MAX)
    reps = int(min(hi, max(lo, math.ceil(target / max(float(probe.item()), 1e-7)))))
    times = torch.zeros(reps, dtype=torch.float64)
    scale = 1.0 / world
    for i in range(reps):
        dist.barrier()
        _sync(torch, cuda)
        t0 = time.perf_counter()
        fn(*bufs)
        _sync(torch, cuda)
        times[i] = time.perf_counter() - t0
        if op == "all_reduce":
            bufs[0].mul_(scale)  # keep the in-place sums bounded (untimed)
    times = times.to(bufs[0].device) if cuda else times
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    return Timing.from_samples((times.cpu().numpy() * 1e6).tolist())
