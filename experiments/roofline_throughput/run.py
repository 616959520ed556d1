"""Throughput of the vectorised roofline: predictions per second on large random tables.

Cases: GEMM rows on one device passed as an argument; GEMM rows with per-row device and dtype columns (every
GPU in the catalog, five dtypes); a mixed-family table (GEMM, elementwise, norm, softmax, embedding, attention,
collectives) with per-row devices/systems. Each case is timed ``--repeats`` times and the best run is reported
(the first call also pays for loading the catalog, which is excluded by building it once up front).

    python experiments/roofline_throughput/run.py                  # 1M and 4M rows, writes results.md
    python experiments/roofline_throughput/run.py --rows 100000 --out -   # quick look, print only
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.hardware.catalog import default_catalog
from hybrid.hardware.cpu import cpu_model_name
from hybrid.ops.roofline import roofline
from hybrid.reports.markdown import write_benchmark_results

#: Target from the project brief: GEMM predictions per second on a 2-core machine.
TARGET_PER_S = 1_000_000
DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")


def gemm_table(n: int, rng: np.random.Generator, devices: list[str] | None = None) -> pd.DataFrame:
    """Random GEMM/BMM shapes (log-uniform 1..16384, batch 1..64); per-row device/dtype when ``devices``."""
    dims = np.exp(rng.uniform(0, np.log(16384), size=(n, 3))).round().astype(np.int64) + 1
    df = pd.DataFrame({
        "op": pd.Categorical(rng.choice(["gemm", "bmm", "linear"], n)),
        "b": rng.integers(1, 65, n),
        "m": dims[:, 0], "n": dims[:, 1], "k": dims[:, 2],
    })
    if devices is None:
        df["dtype"] = "bf16"
    else:
        df["dtype"] = pd.Categorical(rng.choice(DTYPES, n))
        df["device"] = pd.Categorical(rng.choice(devices, n))
    return df


def mixed_table(n: int, rng: np.random.Generator, devices: list[str], systems: list[str]) -> pd.DataFrame:
    """Equal shares of seven families, shuffled, with per-row devices (and systems for collectives)."""
    per = n // 7
    parts = [
        gemm_table(per, rng, devices),
        pd.DataFrame({"op": "elementwise", "elements": rng.integers(1, 1 << 28, per),
                      "variant": rng.choice(["add", "gelu", "mul", "silu"], per)}),
        pd.DataFrame({"op": rng.choice(["layernorm", "rmsnorm"], per), "rows": rng.integers(1, 65536, per),
                      "hidden": rng.integers(64, 16384, per), "direction": rng.choice(["fwd", "bwd"], per)}),
        pd.DataFrame({"op": "softmax", "rows": rng.integers(1, 65536, per), "hidden": rng.integers(64, 32768, per)}),
        pd.DataFrame({"op": "embedding_bag", "num_embeddings": rng.integers(1000, 10_000_000, per),
                      "embedding_dim": rng.choice([32, 64, 128, 256], per), "pooling_factor": rng.integers(1, 100, per),
                      "batch_size": rng.integers(1, 65536, per), "num_tables": rng.integers(1, 32, per),
                      "zipf_alpha": rng.choice([0.0, 1.05], per), "direction": rng.choice(["fwd", "bwd"], per)}),
        pd.DataFrame({"op": "attention", "batch": rng.integers(1, 64, per), "heads": rng.choice([8, 16, 32], per),
                      "q_len": rng.integers(1, 8192, per), "kv_len": rng.integers(1, 8192, per),
                      "head_dim": rng.choice([64, 128], per), "causal": rng.integers(0, 2, per)}),
        pd.DataFrame({"op": rng.choice(["all_reduce", "all_gather", "reduce_scatter", "all_to_all"], per),
                      "size_bytes": rng.integers(1 << 10, 1 << 32, per), "n_ranks": rng.choice([2, 4, 8, 16, 64], per),
                      "system": rng.choice(systems, per)}),
    ]
    for p in parts[1:]:
        p["dtype"] = rng.choice(["fp16", "bf16", "fp32"], len(p))
        p["device"] = rng.choice(devices, len(p))
    df = pd.concat(parts, ignore_index=True)
    for c in ("op", "device", "dtype", "system", "variant", "direction"):
        df[c] = df[c].astype("category")
    return df.sample(frac=1.0, random_state=0).reset_index(drop=True)


def best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 4_000_000])
    ap.add_argument("--device", default="H100-SXM", help="device for the single-device case")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.md")), help="markdown file, or - for stdout")
    args = ap.parse_args(argv)

    load_before = os.getloadavg()[0]
    cat = default_catalog()
    gpus = [d.key for d in cat if d.kind == "gpu"]
    systems = list(cat.systems)
    rng = np.random.default_rng(args.seed)
    rows = []
    for n in args.rows:
        cases = {
            f"GEMM, one device ({args.device}, bf16) via argument": (gemm_table(n, rng), {"device": args.device}),
            f"GEMM, per-row device ({len(gpus)} GPUs) x dtype ({len(DTYPES)})": (gemm_table(n, rng, gpus), {}),
            "mixed 7 families, per-row device/system": (mixed_table(n, rng, gpus, systems), {}),
        }
        for name, (table, kw) in cases.items():
            out = roofline(table, cat, **kw)  # warm-up, and a sanity check of the result
            if not np.isfinite(out["time_us"].to_numpy()).all() or len(out) != len(table):
                raise SystemExit(f"non-finite or missing predictions in case {name!r}")
            secs = best_time(lambda t=table, k=kw: roofline(t, cat, **k), args.repeats)
            rows.append((name, len(table), secs, len(table) / secs))
            print(f"{name:<60} {len(table):>10,} rows  {secs:7.3f} s  {len(table) / secs:>14,.0f} rows/s",
                  file=sys.stderr)

    gemm_rates = [r[3] for r in rows if r[0].startswith("GEMM")]
    verdict = "met" if min(gemm_rates) >= TARGET_PER_S else "NOT met"
    lines = [
        "# Roofline throughput",
        "",
        "Command (from the repository root):",
        "",
        "```",
        " ".join(["python experiments/roofline_throughput/run.py", *(argv if argv is not None else sys.argv[1:])]),
        "```",
        "",
        f"Machine: {cpu_model_name()}, {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} "
        f"cores available, Python {platform.python_version()}, numpy {np.__version__}, pandas {pd.__version__}.",
        f"Best of {args.repeats} runs per case, catalog loaded once beforehand; random shapes, seed {args.seed}.",
        f"Load average while running: {load_before:.1f} before, {os.getloadavg()[0]:.1f} after (other processes share "
        "the cores, so treat the numbers as a lower bound).",
        "",
        "| case | rows | seconds | predictions/s |",
        "|---|---:|---:|---:|",
        *[f"| {name} | {n:,} | {secs:.3f} | {rate:,.0f} |" for name, n, secs, rate in rows],
        "",
        f"Target: >= {TARGET_PER_S:,} GEMM predictions/s: **{verdict}** "
        f"(slowest GEMM case {min(gemm_rates):,.0f}/s).",
        "",
    ]
    text = "\n".join(lines)
    if args.out == "-":
        print(text)
    else:
        write_benchmark_results(args.out, text)  # keeps a hand-written "## Notes" tail
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
