"""What the DLRM harness's per-table views cost in the backward pass on this CPU, and what the engine charges.

    python experiments/dlrm_validation/view_gradients.py [--repeats 30]

The harness (``hybrid.bench.dlrm_harness``) hands every table's pooled output to the dense module as a view of a
bigger tensor: a column slice ``block[:, a:b]`` of the block received from a rank (table-/column-wise tables), a
column slice of the reduce-scatter output (row-wise tables), and on the owner a ``out[:, j]`` select of the
fused lookup output per row-wise piece. In the backward pass autograd turns every such view into a zero gradient
of the WHOLE viewed tensor plus a copy of the slice, and accumulates them. ``build_dlrm_graph(..., harness=True)``
charges per view ``zeros(whole) + copy(slice) + add_(whole)`` (the first ``add_`` omitted), each costed as
``hybrid profile`` measures it alone.

For each shape this times (1 torch thread, median of ``--repeats``): the backward of K views feeding a
``torch.stack`` (as the harness), the same with the block unbound in one op (``block.view(b, K, d).unbind(1)``:
one gradient, no per-view zeros), their difference (the measured cost of the views), and the engine's charge
(the ops timed alone in this process, summed as the graph adds them).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def _median_us(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    t = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return float(np.median(t) * 1e6)


def measure(b: int, k: int, d: int, lead: int, repeats: int) -> dict[str, float]:
    """``lead`` > 1: the owner's ``out[:, j]`` selects of a (lead, k, b, d) fused output; else column slices of
    a (b, k*d) block."""
    import torch

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    src = torch.randn(lead * b * k * d, generator=g)
    w = torch.randn(k, *([1] * (3 if lead > 1 else 2)), generator=g)  # per-view weights (K, 1, ...)

    def run(views: bool) -> None:
        x = src.clone().requires_grad_()  # a leaf standing for the received block / fused output
        if lead > 1:
            out = x.view(lead, k, b, d)
            feats = [out[:, j] for j in range(k)] if views else list(out.unbind(1))
        else:
            block = x.view(b, k * d)
            feats = ([block[:, j * d:(j + 1) * d] for j in range(k)] if views
                     else list(block.view(b, k, d).unbind(1)))
        (torch.stack(feats, 0) * w).sum().backward()

    whole, piece = lead * b * k * d, lead * b * d
    zeros = _median_us(lambda: torch.zeros(whole), repeats)
    a, c = torch.randn(whole, generator=g), torch.randn(whole, generator=g)
    add_ = _median_us(lambda: a.add_(c), repeats)
    s, t = torch.randn(piece, generator=g), torch.empty(piece)
    copy = _median_us(lambda: t.copy_(s), repeats)
    with_views = _median_us(lambda: run(True), repeats)
    without = _median_us(lambda: run(False), repeats)
    return {"views_us": with_views, "unbound_us": without, "measured_us": with_views - without,
            "charged_us": k * (zeros + copy) + (k - 1) * add_}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    load = " ".join(open("/proc/loadavg").read().split()[:3]) if os.path.exists("/proc/loadavg") else "n/a"
    print(f"load average before: {load}\n")
    print("| views of | batch | views K | dim | backward with views us | unbound us | views cost (measured) us | "
          "engine charge us | charge / measured |")
    print("|---|---|---|---|---|---|---|---|---|")
    for what, lead in (("received block (b, K*d)", 1), ("fused output (2, K, b, d), owner selects", 2)):
        for b, k, d in ((256, 8, 16), (256, 18, 64), (256, 36, 64), (1024, 12, 32)):
            r = measure(b, k, d, lead, args.repeats)
            print(f"| {what} | {b} | {k} | {d} | {r['views_us']:.0f} | {r['unbound_us']:.0f} | "
                  f"{r['measured_us']:.0f} | {r['charged_us']:.0f} | {r['charged_us'] / r['measured_us']:.2f} |")
    load = " ".join(open("/proc/loadavg").read().split()[:3]) if os.path.exists("/proc/loadavg") else "n/a"
    print(f"\nload average after: {load}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
