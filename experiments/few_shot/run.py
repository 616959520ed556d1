"""Few-shot adaptation curve: error on a held-out GPU vs number of its measurements used (GEMM family).

    python experiments/few_shot/run.py [--data-dir DIR] [--rows-per-gpu 2500] [--seeds 3] [--out results.md]

For each held-out GPU, the GEMM-family model is fitted on the other NeuSight GPUs (sub-sampled to
``--rows-per-gpu`` rows each), then adapted with k = 0, 5, 10, 20, 50 random rows of the held-out GPU by the
two strategies of ``HybridPredictor.adapt`` (``residual``: one shrunken log-scale per device; ``boost``:
extra XGBoost trees for that device), and scored on the held-out GPU's remaining rows. Mean over seeds.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.corrections import GemmXGB, HybridPredictor, XGBParams
from hybrid.data.importers import import_paths
from hybrid.data.paths import public_data_dir
from hybrid.hardware.catalog import default_catalog
from hybrid.reports.markdown import write_benchmark_results
from hybrid.reports.metrics import error_summary

GPUS = ("P4", "P100-PCIE-16GB", "T4", "V100-PCIE-32GB", "A100-PCIE-40GB", "MI100", "MI210")
HELD_OUT = ("T4", "V100-PCIE-32GB", "MI210")
SHOTS = (0, 5, 10, 20, 50)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--rows-per-gpu", type=int, default=2500)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.md")))
    args = ap.parse_args()
    t0 = time.time()
    cat = default_catalog()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = import_paths("neusight", public_data_dir(args.data_dir), catalog=cat)
    table = table[table["device"].isin(GPUS) & table["op"].isin(["bmm", "linear"])]
    table = table.sample(frac=1.0, random_state=0).groupby("device").head(args.rows_per_gpu).reset_index(drop=True)
    results = []
    for held in HELD_OUT:
        base = HybridPredictor(cat, [GemmXGB(XGBParams(seed=0))]).fit(table[table["device"] != held])
        target = table[table["device"] == held].reset_index(drop=True)
        roof = None
        for seed in range(args.seeds):
            order = np.random.default_rng(seed).permutation(len(target))
            pool, test = target.iloc[order[:50]], target.iloc[order[50:]]
            if roof is None:
                roof = error_summary(base.predict(test)["roofline_us"], test["time_us"])["geomean_pct"]
            for k in SHOTS:
                for strategy in ("residual", "boost"):
                    model = base if k == 0 else base.adapt(pool.iloc[:k], strategy=strategy)
                    err = error_summary(model.predict_time(test), test["time_us"])["geomean_pct"]
                    results.append({"gpu": held, "seed": seed, "k": k, "strategy": strategy, "err": err, "roof": roof})
        print(f"{held} done ({time.time() - t0:.0f} s)")
    df = pd.DataFrame(results)
    piv = df.groupby(["gpu", "strategy", "k"])["err"].agg(["mean", "std"]).reset_index()
    lines = ["# Few-shot adaptation to a held-out GPU (GEMM family, NeuSight)", "",
             f"Command: `python experiments/few_shot/run.py --rows-per-gpu {args.rows_per_gpu} --seeds {args.seeds}`",
             "", "Geomean % error on the held-out GPU's rows not used for adaptation; mean (std) over "
             f"{args.seeds} seeds drawing the k adaptation rows.", "",
             "| held-out GPU | roofline only | strategy | " + " | ".join(f"k={k}" for k in SHOTS) + " |",
             "|---|---|---|" + "---|" * len(SHOTS)]
    for (gpu, strategy), g in piv.groupby(["gpu", "strategy"]):
        cells = [f"{r['mean']:.1f} ({r['std']:.1f})" for _, r in g.sort_values("k").iterrows()]
        roof = df[df["gpu"] == gpu]["roof"].iloc[0]
        lines.append(f"| {gpu} | {roof:.1f} | {strategy} | " + " | ".join(cells) + " |")
    mean = df.groupby(["strategy", "k"])["err"].mean().unstack()
    lines += ["", "Mean over GPUs:", "", "| strategy | " + " | ".join(f"k={k}" for k in SHOTS) + " |",
              "|---|" + "---|" * len(SHOTS)]
    for strategy, row in mean.iterrows():
        lines.append(f"| {strategy} | " + " | ".join(f"{v:.1f}" for v in row) + " |")
    lines += ["", f"Total wall time: {time.time() - t0:.0f} s"]
    text = "\n".join(lines) + "\n"
    print(text)
    write_benchmark_results(args.out, text)


if __name__ == "__main__":
    main()
