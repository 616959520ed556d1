"""Tried, not adopted (2026-11-29): GEMM alignment counted in bytes instead of elements.

The default GEMM features count how many of m, n, k are multiples of 8 *elements* (``align8``). The hardware
rule is in bytes: BLAS kernels load 16-byte vectors (Hopper's TMA requires 16-byte aligned strides), so an
fp32 dimension is aligned at a multiple of 4, a 16-bit one at 8, an 8-bit one at 16. This script fits the
default GEMM model (feature version 4, one booster) leave-one-GPU-out on exactly the data and splits of
``run.py --groups gemm`` with ``align8`` as defined (``elements``) or replaced by the byte rule (``bytes``),
and prints the mean over held-out GPUs, per GPU, per source and dtype, and the in-distribution error.

    python experiments/kernel_accuracy/alignment_variant.py elements [SEED]
    python experiments/kernel_accuracy/alignment_variant.py bytes [SEED]

SEED (default 0, the benchmark's) draws the sub-sampled rows, the in-distribution split and the trees.

Results and the decision are in results.md (Discussion).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import run as ka  # noqa: E402  (this benchmark's loaders and splits)

from hybrid.corrections import features  # noqa: E402

DEFAULT_GEMM = (True, 4, False)


def byte_alignment(mode: str) -> None:
    """Replace the ``align8`` column of every GEMM feature table by the byte rule (``mode == "bytes"``)."""
    if mode == "elements":
        return
    original = features.gemm_arrays

    def patched(table, catalog):
        out = original(table, catalog)
        nbytes = features.dtype_bytes_vec(table)
        dims = [features.col(table, d) for d in ("m", "n", "k")]
        out["align8"] = sum(((d * nbytes) % 16 == 0).astype(np.float64) for d in dims)
        return out

    features.gemm_arrays = patched
    features._OWN_ARRAYS["gemm"] = patched


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "elements"
    if mode not in ("elements", "bytes"):
        raise SystemExit(f"mode must be 'elements' or 'bytes', not {mode!r}")
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    byte_alignment(mode)
    table, catalog = ka.load(ka.public_data_dir(None), 1200, seed)
    sub = table[table["group"] == "gemm"].reset_index(drop=True)
    base = ka.roofline(sub, catalog)
    t0 = time.time()
    pred = ka.logo_predictions(sub, base, catalog, ka.GemmXGB, DEFAULT_GEMM, seed, 400, mode)
    meas = sub["time_us"].to_numpy(float)
    err = np.abs(pred - meas) / meas
    per_dev = sub[["device"]].assign(err=err).dropna().groupby("device")["err"].agg(ka._geo)
    print(f"{mode} (seed {seed}): leave-one-GPU-out mean over {len(per_dev)} GPUs {per_dev.mean():.2f}%")
    print(per_dev.round(1).to_string())
    print(ka.per_source_dtype(sub, err).round(1).to_string())
    in_dist = ka.in_distribution(sub, base, catalog, ka.GemmXGB, DEFAULT_GEMM, seed, 400)
    print(f"{mode} (seed {seed}): in distribution {in_dist:.2f}% ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
