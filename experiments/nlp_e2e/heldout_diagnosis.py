"""Where a held-out GPU's end-to-end error comes from: op family by op family, and GEMM shape by GEMM shape.

    python experiments/nlp_e2e/heldout_diagnosis.py [--gpus V100-PCIE-32GB,T4,MI210] [--trace-dir DIR]

For each GPU: the NLP model of ``run.py`` fitted with every GPU (in distribution: 3.7% on the labels, so its op
times stand in for the measured ones, which no label has) and fitted without that GPU (``--leave-one-gpu-out``).
Printed per GPU:

* the op rows of four label steps (BERT-large / GPT-2 L / OPT inference, BERT-large training) priced by both,
  summed per op: held-out / in-distribution is the share of the held-out step error each op family carries;
* NeuSight's large GEMMs (over 2e10 FLOP, every dimension a multiple of 64, as the NLP layers' GEMMs are) that
  the GPU and each fitted NeuSight GPU both timed: measured time on the held-out GPU / on the other, and the
  held-out model's prediction / the other's measurement. Where the two ratios differ the model has not learned
  how the GPUs compare on the same work; the datasheet peaks' ratio is printed beside them.

Kernel times are the model's prediction less the host dispatch it includes (``predict(host=True)``), as the engine
takes them (``KernelTimeModel``). Traces are recorded by ``run.py`` into ``--trace-dir`` if absent (minutes each).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as nlp  # noqa: E402

#: label steps whose op rows are priced (model, mode, sequence, batch)
STEPS = (("bert_large", "inf", 512, 16), ("gpt2_large", "inf", 1024, 8), ("opt_13", "inf", 2048, 2),
         ("bert_large", "train", 512, 8))
#: the NeuSight GPUs a held-out GPU's GEMMs are compared with, shape by shape
NEUSIGHT_GPUS = ("P4", "T4", "P100-PCIE-16GB", "V100-PCIE-32GB", "A100-PCIE-40GB", "A100-PCIE-80GB", "MI100",
                 "MI210")
#: a GEMM above this many FLOP is compute-bound on every GPU here (the NLP layers' GEMMs are 1e10-1e12)
LARGE_GEMM_FLOP = 2e10


def kernel_us(model, rows: pd.DataFrame) -> np.ndarray:
    """The model's time of each row less the host dispatch it includes (what the engine puts on the GPU)."""
    p = model.predict(rows, intervals=False, host=True)
    learned = p["learned_host_us"].to_numpy() if "learned_host_us" in p.columns else 0.0
    return p["time_us"].to_numpy() - p["host_us"].to_numpy() - learned


def step_ops(gpu: str, cat, trace_dir: Path) -> pd.DataFrame:
    """The costed op rows of :data:`STEPS` as traced, for ``gpu`` (column ``step`` names the step)."""
    from hybrid.data.traces import load_trace
    from hybrid.workloads.trace_graph import build_trace_graph

    frames = []
    for name, mode, seq, batch in STEPS:
        path = nlp.record_trace(name, mode, seq, batch, trace_dir, None, None, nlp.accumulates_gradients(mode, ""))
        units = build_trace_graph([load_trace(path)], gpu, cat, same_device=False).units
        rows = pd.DataFrame([r for r in units.loc[units["kind"] == "op", "row"] if isinstance(r, dict)])
        frames.append(rows.assign(device=gpu, step=f"{name}-{mode}-{seq}-{batch}"))
    return pd.concat(frames, ignore_index=True)


def large_aligned_gemms(table: pd.DataFrame) -> pd.DataFrame:
    g = table[table["op"].isin(["bmm", "linear"])].copy()
    g["b"] = g["b"].fillna(1)
    dims = g[["m", "n", "k"]].to_numpy(dtype=np.int64)
    keep = (2 * g["b"] * g["m"] * g["n"] * g["k"] > LARGE_GEMM_FLOP) & (dims % 64 == 0).all(axis=1)
    return g[keep]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="V100-PCIE-32GB,T4,MI210", help="catalog names, comma-separated")
    ap.add_argument("--trace-dir", default="/tmp/tr_units")
    ap.add_argument("--rows-per-gpu", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    from hybrid.data.importers import import_paths
    from hybrid.data.importers.neusight import collections
    from hybrid.data.paths import public_data_dir

    full, cat, _, _ = nlp.calibrated_model(None, args.rows_per_gpu, args.seed)
    base = public_data_dir(None)
    kernels = large_aligned_gemms(import_paths("neusight", collections(base, "train") + collections(base, "test"),
                                               catalog=cat))
    key = ["op", "b", "m", "n", "k"]
    for gpu in [cat.resolve_device(g) for g in args.gpus.split(",")]:
        held, _, _, _ = nlp.calibrated_model(None, args.rows_per_gpu, args.seed, exclude_devices=(gpu,))
        ops = step_ops(gpu, cat, Path(args.trace_dir))
        ops["in_distribution_ms"] = kernel_us(full, ops) / 1e3
        ops["held_out_ms"] = kernel_us(held, ops) / 1e3
        per = ops.groupby(["step", "op"])[["in_distribution_ms", "held_out_ms"]].sum()
        per["held_out / in_distribution"] = per["held_out_ms"] / per["in_distribution_ms"]
        print(f"\n## {gpu} held out: op rows of the label steps\n")
        print(per.round(3).to_string())
        mine = kernels[kernels["device"] == gpu].copy()
        if mine.empty:
            continue
        mine["pred_us"] = held.predict(mine, intervals=False)["time_us"].to_numpy()
        print(f"\n## {gpu} held out: NeuSight's large aligned GEMMs against each fitted GPU's, same shapes\n")
        for other in NEUSIGHT_GPUS:
            if other == gpu:
                continue
            theirs = kernels[kernels["device"] == other].groupby(key, as_index=False)["time_us"].median()
            pair = mine.merge(theirs, on=key, suffixes=("", "_other"))
            if len(pair) < 20:
                continue
            peaks = cat.device(other).peak("fp32") / cat.device(gpu).peak("fp32")
            print(f"vs {other:15s} shapes {len(pair):5d}  measured {np.median(pair['time_us'] / pair['time_us_other']):.3f}"
                  f"  predicted {np.median(pair['pred_us'] / pair['time_us_other']):.3f}  peaks {peaks:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
