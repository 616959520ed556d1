"""Few-shot adaptation curve: error on a held-out GPU vs number of its measurements used (GEMM or pointwise family).

    python experiments/few_shot/run.py [--data-dir DIR] [--rows-per-group 400] [--seeds 3] [--group gemm|pointwise]
                                       [--out results.md]

Training data: every public kernel source together (the loader of ``experiments/kernel_accuracy``: NeuSight
de-duplicated, XLA H100, Vidur A100/A40, DeepBench, LLMCompass, own CPU profile), GEMM family, sub-sampled to
``--rows-per-group`` rows per (source, device, dtype); ``--group pointwise`` does the same for the elementwise /
norm / softmax family on the four GPUs with public pointwise rows (``pointwise_results.md``). For each held-out GPU
(three NeuSight GPUs as before, plus Vidur's A40 and XLA's H100), the default GEMM model is fitted on every other device, then adapted with k = 0,
5, 10, 20, 50 random rows of the held-out GPU by each strategy of ``HybridPredictor.adapt`` (``auto``: a scale,
a per-op shift or both, chosen by cross-validation on the k rows, plus trees on what it leaves from 20 rows;
``scale-trees``: the previous default, a robust shrunken scale plus those trees; ``scale``: that scale alone;
``boost``: extra XGBoost trees for that device; ``residual``: one shrunken mean log-scale; ``shift``: one
additive per-op time), and scored on the held-out GPU's remaining rows. Mean (std) over seeds.

Beside the adaptations of a fitted model, the *refit* rows: the model fitted again on the training rows plus the
k new rows, which is what ``hybrid calibrate PUBLIC... NEW.csv`` does when the public tables are at hand (``refit``:
the default fit, whose device floor weighs a device with under 100 rows as if it had 100,
``hybrid.corrections.kernel_xgb.MIN_DEVICE_ROWS``; ``refit, unweighted``: every row weighing 1).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernel_accuracy"))
import run as kernel_run  # noqa: E402  (the shared all-sources loader)

from hybrid.corrections import GemmXGB, HybridPredictor, PointwiseXGB, XGBParams  # noqa: E402
from hybrid.corrections.kernel_xgb import MIN_DEVICE_ROWS  # noqa: E402
from hybrid.data.paths import public_data_dir  # noqa: E402
from hybrid.reports.markdown import write_benchmark_results  # noqa: E402
from hybrid.reports.metrics import error_summary  # noqa: E402

HELD_OUT = ("T4", "V100-PCIE-32GB", "MI210", "A40", "H100-SXM")
#: ``--group``: model class, held-out GPUs, title, model description, default results file. Pointwise: the GPUs
#: with public elementwise / norm / softmax rows (NeuSight, Vidur's A40; the H100 has none, the MI210 22 rows).
GROUPS = {
    "gemm": (GemmXGB, HELD_OUT, "GEMM family", "GEMM model (feature version 4, one booster)", "results.md"),
    "pointwise": (PointwiseXGB, ("T4", "V100-PCIE-32GB", "A40", "P100-PCIE-16GB"),
                  "elementwise / norm / softmax family", "pointwise model (feature version 3, transfer booster)",
                  "pointwise_results.md"),
}
SHOTS = (0, 5, 10, 20, 50)
#: strategies of HybridPredictor.adapt, the default first
STRATEGIES = ("auto", "scale-trees", "scale", "boost", "residual", "shift")
#: refits on the training rows + the k new rows: name -> the GEMM model's minimum device rows (the fit's default;
#: 0 = unweighted)
REFITS = {"refit": MIN_DEVICE_ROWS, "refit, unweighted": 0}
ROWS = (*REFITS, *STRATEGIES)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--rows-per-group", type=int, default=400)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--group", choices=tuple(GROUPS), default="gemm")
    ap.add_argument("--out", default=None, help="default: results.md (gemm), pointwise_results.md (pointwise)")
    args = ap.parse_args()
    model_cls, held_out, title, model_name, out_name = GROUPS[args.group]
    out = args.out or str(Path(__file__).with_name(out_name))
    t0 = time.time()
    table, cat = kernel_run.load(public_data_dir(args.data_dir), args.rows_per_group, 0)
    table = table[table["group"] == args.group].drop(columns=["group", "family", "src"]).reset_index(drop=True)
    results = []
    for held in held_out:
        train = table[table["device"] != held]
        base = HybridPredictor(cat, [model_cls(XGBParams(seed=0))]).fit(train)
        target = table[table["device"] == held].reset_index(drop=True)
        roof = None
        for seed in range(args.seeds):
            order = np.random.default_rng(seed).permutation(len(target))
            pool, test = target.iloc[order[:50]], target.iloc[order[50:]]
            if roof is None:
                roof = error_summary(base.predict(test)["roofline_us"], test["time_us"])["geomean_pct"]
            for k in SHOTS:
                for strategy in STRATEGIES:
                    model = base if k == 0 else base.adapt(pool.iloc[:k], strategy=strategy)
                    err = error_summary(model.predict_time(test), test["time_us"])["geomean_pct"]
                    results.append({"gpu": held, "seed": seed, "k": k, "strategy": strategy, "err": err, "roof": roof})
                for name, floor in REFITS.items():
                    corr = model_cls(XGBParams(seed=0, min_device_rows=floor))
                    model = HybridPredictor(cat, [corr]).fit(pd.concat([train, pool.iloc[:k]], ignore_index=True))
                    err = error_summary(model.predict_time(test), test["time_us"])["geomean_pct"]
                    results.append({"gpu": held, "seed": seed, "k": k, "strategy": name, "err": err, "roof": roof})
        print(f"{held} done ({time.time() - t0:.0f} s)", file=sys.stderr)
    df = pd.DataFrame(results)
    order = {s: i for i, s in enumerate(ROWS)}
    piv = df.groupby(["gpu", "strategy", "k"])["err"].agg(["mean", "std"]).reset_index()
    piv = piv.sort_values(["gpu", "strategy"], key=lambda c: c.map(order) if c.name == "strategy" else c)
    group_arg = f" --group {args.group}" if args.group != "gemm" else ""
    lines = [f"# Few-shot adaptation to a held-out GPU ({title}, all public kernel sources)", "",
             f"Command: `python experiments/few_shot/run.py --rows-per-group {args.rows_per_group} --seeds {args.seeds}"
             f"{group_arg}`",
             "", f"Rows ({title}, the held-out GPUs' included): {len(table):,} in all. The default "
             f"{model_name} is the base; adaptation rows are drawn at random from "
             "the held-out GPU, scoring uses its other rows. `refit`: the model fitted again on the training rows "
             f"plus the k new ones (what `hybrid calibrate PUBLIC... NEW.csv` does; a device with under "
             f"{MIN_DEVICE_ROWS} rows weighs as if it had {MIN_DEVICE_ROWS}); `refit, unweighted`: the same with "
             "every row weighing 1; the other rows adapt the fitted base (`hybrid calibrate NEW.csv --base MODEL "
             "--strategy S`), without the training rows.",
             "", "Geomean % error on the held-out GPU's rows not used for adaptation; mean (std) over "
             f"{args.seeds} seeds drawing the k adaptation rows.", "",
             "| held-out GPU | roofline only | strategy | " + " | ".join(f"k={k}" for k in SHOTS) + " |",
             "|---|---|---|" + "---|" * len(SHOTS)]
    for (gpu, strategy), g in piv.groupby(["gpu", "strategy"], sort=False):
        cells = [f"{r['mean']:.1f} ({r['std']:.1f})" for _, r in g.sort_values("k").iterrows()]
        roof = df[df["gpu"] == gpu]["roof"].iloc[0]
        lines.append(f"| {gpu} | {roof:.1f} | {strategy} | " + " | ".join(cells) + " |")
    mean = df.groupby(["strategy", "k"])["err"].mean().unstack().loc[list(ROWS)]
    # spread over seeds of the mean-over-GPUs error (how much one draw of k rows moves the headline)
    per_seed = df.groupby(["strategy", "k", "seed"])["err"].mean().groupby(["strategy", "k"]).std().unstack()
    lines += ["", "Mean over GPUs (std over seeds of that mean):", "", "| strategy | " + " | ".join(f"k={k}" for k in SHOTS) + " |",
              "|---|" + "---|" * len(SHOTS)]
    for strategy, row in mean.iterrows():
        lines.append(f"| {strategy} | " + " | ".join(
            f"{v:.1f} ({sd:.1f})" for v, sd in zip(row, per_seed.loc[strategy].reindex(row.index), strict=True)) + " |")
    lines += ["", f"Total wall time: {time.time() - t0:.0f} s"]
    text = "\n".join(lines) + "\n"
    print(text)
    write_benchmark_results(out, text)


if __name__ == "__main__":
    main()
