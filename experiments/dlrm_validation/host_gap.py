"""Host work the profile does not measure: small dense ops timed alone (as `hybrid profile` does) vs inside a
training step (autograd recording, backward, optimizer), same shapes, 1 torch thread.

    python experiments/dlrm_validation/host_gap.py [--batch 256 512 1024] [--repeats 200]

Prints, per batch size, the sum of the ops timed alone, the measured training step, and the difference per op
(the per-op host cost the engine must add: dispatch + autograd bookkeeping + Python). The load average is printed
with it: on a loaded machine every number is inflated, the per-op gap most.
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial

import numpy as np


def median_us(fn, repeats: int, warmup: int = 20) -> float:
    for _ in range(warmup):
        fn()
    t = np.empty(repeats)
    for i in range(repeats):
        t0 = time.perf_counter()
        fn()
        t[i] = time.perf_counter() - t0
    return float(np.median(t) * 1e6)


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    widths = [13, 64, 32, 64, 32, 1]  # a bottom + top MLP of the size the CPU campaign draws
    print(f"load average {' '.join(open('/proc/loadavg').read().split()[:3])} on {os.cpu_count()} cores; "
          f"torch {torch.__version__}, 1 thread\n")
    print("| batch | ops | ops timed alone, sum (us) | training step (us) | gap per op (us) | step / sum |")
    print("|---|---|---|---|---|---|")
    for B in args.batch:
        layers = [torch.nn.Linear(i, o) for i, o in zip(widths[:-1], widths[1:], strict=True)]
        opt = torch.optim.SGD([p for lyr in layers for p in lyr.parameters()], lr=1e-3)
        x = torch.randn(B, widths[0])
        # alone: every kernel of the step with plain tensors, no autograd (what the profile rows time)
        alone = 0.0
        ops = 0
        h = x
        with torch.no_grad():
            for i, lyr in enumerate(layers):
                w, b = lyr.weight.detach(), lyr.bias.detach()
                hin = h
                alone += median_us(partial(torch.nn.functional.linear, hin, w, b), args.repeats)
                out = torch.nn.functional.linear(hin, w, b)
                g = torch.randn_like(out)
                alone += median_us(partial(torch.matmul, g.t(), hin), args.repeats)  # wgrad
                ops += 2
                if i > 0:
                    alone += median_us(partial(torch.matmul, g, w), args.repeats)  # dgrad
                    ops += 1
                if i < len(layers) - 1:
                    alone += median_us(partial(torch.relu, out), args.repeats)
                    alone += median_us(partial(torch.ops.aten.threshold_backward, g, out, 0.0), args.repeats)
                    ops += 2
                h = torch.relu(out)
            for lyr in layers:
                for p in lyr.parameters():
                    gp = torch.randn_like(p)
                    pp = p.detach().clone()
                    alone += median_us(partial(pp.add_, gp, alpha=-1e-3), args.repeats)
                    ops += 1

        def step(layers: list, opt, x) -> None:
            opt.zero_grad(set_to_none=True)
            h = x
            for i, lyr in enumerate(layers):
                h = lyr(h)
                if i < len(layers) - 1:
                    h = torch.relu(h)
            h.sum().backward()
            opt.step()

        full = median_us(partial(step, layers, opt, x), args.repeats)
        print(f"| {B} | {ops} | {alone:.0f} | {full:.0f} | {(full - alone) / ops:.1f} | {full / alone:.2f} |")


if __name__ == "__main__":
    main()
