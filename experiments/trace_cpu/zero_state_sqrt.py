"""Measured, not modelled (2026-11-30): AdamW's square root over zero-valued optimizer state is slow on this CPU.

PyTorch's CPU ``sqrt`` takes ~8x longer per element on zeros than on positive values here (and longer still on
negatives). The Llama of ``run.py`` does not tie its input embedding to its output layer, so the embedding's
gradient is zero on every vocabulary row the batch does not use (97% of its 8192 rows with 2 x 128 tokens), and
so is most of its AdamW ``exp_avg_sq`` after a few steps: the step's ``exp_avg_sq.sqrt()`` over that table then
costs several times what the profile's rows (random data) predict. BERT and GPT-2 tie their embedding to the
output layer, whose gradient is dense, so they do not hit it.

    python experiments/trace_cpu/zero_state_sqrt.py

Prints: sqrt per million elements on positive values / zeros / negatives; after ``--steps`` (default 8) training
steps of run.py's Llama, the share of zeros in each large parameter's gradient and AdamW state, and the time of
``exp_avg_sq.sqrt()`` on the real state beside the same shape filled with positive values. Results and what they
mean for the self-check are in results.md (Discussion).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import run as tc  # noqa: E402  (this benchmark's model builders)


def per_call_ms(fn, repeats: int = 20) -> float:
    """Median wall time of ``fn()`` in ms over ``repeats`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    n = 1 << 20
    values = {"positive": torch.rand(n) + 0.1, "zeros": torch.zeros(n), "negative": -torch.rand(n) - 0.1}
    print("sqrt per 2^20 fp32 elements (ms): " + ", ".join(
        f"{k} {per_call_ms(lambda v=v: v.sqrt()):.2f}" for k, v in values.items()))
    step = tc.make_step("llama")
    for _ in range(args.steps):
        step()
    opt = next(o for o in gc.get_objects() if isinstance(o, torch.optim.AdamW))
    extra = 0.0
    for p, st in opt.state.items():
        if p.numel() < (1 << 20):
            continue
        v = st["exp_avg_sq"]
        real = per_call_ms(lambda v=v: v.sqrt())
        ref = torch.rand_like(v) + 0.1
        rand = per_call_ms(lambda r=ref: r.sqrt())
        extra += real - rand
        zeros = {k: float((x == 0).float().mean()) for k, x in
                 (("grad", p.grad if p.grad is not None else torch.zeros(1)), ("exp_avg", st["exp_avg"]),
                  ("exp_avg_sq", v))}
        print(f"{tuple(p.shape)}: zeros " + ", ".join(f"{k} {z:.0%}" for k, z in zeros.items())
              + f"; exp_avg_sq.sqrt() {real:.2f} ms, on positive values {rand:.2f} ms")
    print(f"extra time per step from the zero-valued state (large parameters): {extra:.1f} ms")


if __name__ == "__main__":
    main()
