"""Host ops of the DLRM harness, recorded phase by phase, against the counts the engine's DLRM graph gives them.

The engine prices a GPU run's eager host op by op (``Overheads.host_op_us`` per ATen op / autograd node /
annotation, ``kernel_launch_us`` per launch: the host model fitted on traced H100 / H200 steps,
``experiments/trace_gpu/host_model.py``). For the harness (:mod:`hybrid.bench.dlrm_harness`) the DLRM graph gives
its nodes the host ops of :data:`hybrid.workloads.dlrm_graph.HARNESS_HOST_OPS`, integer counts per element of the
config. This script records them: for every (config, plan) of the GPU campaigns it runs the harness's own training
loop on this machine's CPU under ``torch.profiler`` (one rank, gloo; tables cut to 2,000 rows and the batch to 32, which
changes no op but a few data-dependent ones; :func:`hybrid.bench.dlrm_harness.host_ops_per_phase`) and sets the
recorded ops per phase beside :func:`hybrid.workloads.dlrm_graph.harness_host_op_counts` for a CPU (the GPU counts
less what only a CPU's kernels run). Nothing here is timed: only ops are counted.

    python experiments/dlrm_validation/harness_host_ops.py [--runs datasets/dlrm-h100-1gpu ...] [--out FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

RUNS = ("datasets/dlrm-h100-1gpu", "datasets/dlrm-h200-1gpu")
PHASES = ("input_dist", "lookup_fwd", "exchange_fwd", "dense_fwd", "backward", "optimizer")
ROWS_CAP, BATCH = 2000, 32


def small(config):  # noqa: ANN001, ANN201 - a DLRMConfig
    """The config with tables cut to ROWS_CAP rows and the batch to BATCH (the ops it runs are the same)."""
    d = config.to_dict()
    for t in d["tables"]:
        t["num_embeddings"] = min(int(t["num_embeddings"]), ROWS_CAP)
    d["batch_size_per_gpu"] = BATCH
    d["system"] = "local-cpu"
    return type(config).from_dict(d)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", nargs="+", default=list(RUNS))
    ap.add_argument("--out", default=None, help="write the markdown table here (default: stdout)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    import torch

    from hybrid.bench.campaign import load_pair, read_results
    from hybrid.bench.dlrm_harness import host_ops_per_phase
    from hybrid.workloads.dlrm_graph import harness_host_op_counts

    t0 = time.time()
    rows = []
    for runs in args.runs:
        base = ROOT / runs if not Path(runs).is_absolute() else Path(runs)
        table = read_results(base)
        for _, r in table.drop_duplicates(["config_name", "plan_name"]).iterrows():
            cfg, plan = load_pair(base, r)
            rec = host_ops_per_phase(small(cfg), plan)
            cpu = harness_host_op_counts(cfg, plan, "cpu")
            gpu = harness_host_op_counts(cfg, plan, "gpu")
            rows.append({"runs": base.name, "config": r["config_name"], "plan": r["plan_name"],
                         "recorded": {k: rec[k] for k in PHASES}, "counted_cpu": cpu, "counted_gpu": gpu})
    lines = ["# DLRM harness host ops: recorded on a CPU vs the engine's counts", "",
             f"Command: `python experiments/dlrm_validation/harness_host_ops.py` (torch {torch.__version__}, "
             f"{time.time() - t0:.0f} s). Recorded: `torch.profiler` on the harness's loop, one rank on this CPU, median "
             "of 3 iterations after a warm-up. Counted: `harness_host_op_counts(config, plan, 'cpu')`; the GPU column is "
             "what the graph charges on a GPU (the CPU count less what only a CPU's kernels run).", "",
             "| phase | recorded (median over runs) | counted for a CPU | mean abs error % | max abs error (ops) | "
             "counted for a GPU |", "|---|---|---|---|---|---|"]
    summary = {}
    for ph in PHASES:
        rec = np.array([r["recorded"][ph] for r in rows])
        cnt = np.array([r["counted_cpu"][ph] for r in rows])
        gpu = np.array([r["counted_gpu"][ph] for r in rows])
        err = np.abs(cnt - rec)
        rel = float(np.mean(err / np.maximum(rec, 1.0)) * 100)
        summary[ph] = {"mean_abs_pct": rel, "max_abs_ops": float(err.max())}
        lines.append(f"| {ph} | {np.median(rec):.0f} | {np.median(cnt):.0f} | {rel:.1f} | {err.max():.0f} | "
                     f"{np.median(gpu):.0f} |")
    tot_r = np.array([sum(r["recorded"].values()) for r in rows])
    tot_c = np.array([sum(r["counted_cpu"].values()) for r in rows])
    lines += ["", f"Whole iteration: recorded {np.median(tot_r):.0f} ops (median over {len(rows)} runs), counted "
              f"{np.median(tot_c):.0f}; mean abs error {np.mean(np.abs(tot_c - tot_r) / tot_r) * 100:.1f}%."]
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(json.dumps({"runs": rows, "summary": summary}, indent=1) if args.json else text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
