"""Memory-system sharing between the two CPU ranks: memory-bound DLRM ops timed in one process alone (as
`hybrid profile` measures them) and in two processes at once (as the 2-rank harness runs them), 1 torch thread each.

    python experiments/dlrm_validation/memory_sharing.py [--rows 2000000] [--dim 64] [--lookups 65536] [--repeats 30]

Ops: the sparse SGD update of an embedding table (``weight.index_add_(0, rows, grad)``, random rows: the optimizer
phase of the sharded tables), an embedding-bag forward (random gathers) and a streaming copy of the table (a
dense optimizer pass). Prints per op the median time alone, the median time with the other process running the
same loop, their ratio, and the load average before and after: on a loaded machine both are inflated and the
ratio is a lower bound of the interference of two ranks that own the cores.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os

import numpy as np
from host_gap import median_us


def _ops(rows: int, dim: int, lookups: int, seed: int) -> dict:
    import torch

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(rows, dim, generator=g)
    idx = torch.randint(0, rows, (lookups,), generator=g)
    grad = torch.randn(lookups, dim, generator=g)
    offsets = torch.arange(0, lookups, 4)
    dst = torch.empty_like(weight)
    return {
        "sparse sgd update (index_add_)": lambda: weight.index_add_(0, idx, grad, alpha=-0.01),
        "embedding_bag fwd (4 lookups/bag)": lambda: torch.nn.functional.embedding_bag(idx, weight, offsets,
                                                                                       mode="sum"),
        "table copy (dense optimizer pass)": lambda: dst.copy_(weight),
    }


def _worker(args: tuple, start, out) -> None:
    rows, dim, lookups, repeats, seed = args
    ops = _ops(rows, dim, lookups, seed)
    start.wait()
    out.put({name: median_us(fn, repeats, warmup=3) for name, fn in ops.items()})


def measure(rows: int, dim: int, lookups: int, repeats: int, procs: int) -> list[dict]:
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(procs)
    out = ctx.Queue()
    ps = [ctx.Process(target=_worker, args=((rows, dim, lookups, repeats, 100 + i), start, out)) for i in range(procs)]
    for p in ps:
        p.start()
    res = [out.get() for _ in ps]
    for p in ps:
        p.join()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--lookups", type=int, default=65536)
    ap.add_argument("--repeats", type=int, default=30)
    a = ap.parse_args()
    load0 = os.getloadavg()[0]
    alone = measure(a.rows, a.dim, a.lookups, a.repeats, 1)[0]
    both = measure(a.rows, a.dim, a.lookups, a.repeats, 2)
    load1 = os.getloadavg()[0]
    print(f"table {a.rows:,} x {a.dim} fp32 ({a.rows * a.dim * 4 / 2**20:,.0f} MiB), {a.lookups:,} lookups; "
          f"cores {os.cpu_count()}; load average {load0:.1f} before, {load1:.1f} after")
    print("| op | alone us | two processes us (median of both) | ratio |")
    print("|---|---|---|---|")
    for name, t in alone.items():
        t2 = float(np.median([b[name] for b in both]))
        print(f"| {name} | {t:,.0f} | {t2:,.0f} | {t2 / t:.2f} |")


if __name__ == "__main__":
    main()
