"""Kernel-correction accuracy on NeuSight: leave-one-GPU-out and an in-distribution random split.

    python experiments/kernel_accuracy/run.py [--data-dir DIR] [--rows-per-gpu 6000] [--out results.md]

GEMM configurations compared: the current default (feature version 2: main booster with device descriptors
for training GPUs, *transfer* booster without them for the held-out GPU) and the previous default (feature
version 1, one booster, descriptors on) and version 1 with descriptors off.

GEMM family (bmm, linear) over P4, P100, T4, V100, A100-PCIE-40GB, MI100, MI210 (AMD: GEMM only) and the
pointwise group (elementwise, layernorm, softmax) over the five NVIDIA GPUs. Each training set is
sub-sampled to ``--rows-per-gpu`` rows per GPU and family group (seeded) so the whole run takes a few minutes
on 2 cores. Prints and writes a markdown table: roofline-only vs corrected error (geomean / median / p90 %).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.corrections import GemmXGB, PointwiseXGB, XGBParams
from hybrid.data.importers import import_paths
from hybrid.data.paths import public_data_dir
from hybrid.hardware.catalog import default_catalog
from hybrid.ops.roofline import roofline
from hybrid.reports.markdown import write_benchmark_results
from hybrid.reports.metrics import error_summary

GEMM_OPS = ("bmm", "linear")
NVIDIA = ("P4", "P100-PCIE-16GB", "T4", "V100-PCIE-32GB", "A100-PCIE-40GB")
AMD = ("MI100", "MI210")


def load(data_dir: Path, rows_per_gpu: int, seed: int) -> pd.DataFrame:
    cat = default_catalog()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = import_paths("neusight", data_dir, catalog=cat)
    table = table[table["device"].isin(NVIDIA + AMD)]
    table = table.assign(group=np.where(table["op"].isin(GEMM_OPS), "gemm", "pointwise"))
    table = table.sample(frac=1.0, random_state=seed).groupby(["device", "group"]).head(rows_per_gpu)
    return table.reset_index(drop=True)


def fmt(s: dict) -> str:
    return f"{s['geomean_pct']:.1f} / {s['median_pct']:.1f} / {s['p90_pct']:.1f}"


#: name -> (use_device_features, feature_version, transfer booster)
CONFIGS = {"default (v2, device descriptors ON)": (True, 2, False),
           "v2 + transfer booster for unseen GPUs": (True, 2, True),
           "v1, device descriptors ON": (True, 1, False),
           "v1, device descriptors OFF": (False, 1, False)}


def evaluate(table: pd.DataFrame, group: str, config: str, seed: int, trees: int) -> list[dict]:
    cat = default_catalog()
    sub = table[table["group"] == group]
    base = roofline(sub, cat)
    klass = GemmXGB if group == "gemm" else PointwiseXGB
    use_device, version, transfer = CONFIGS[config]
    rows = []
    for held in sorted(sub["device"].unique()):
        train = (sub["device"] != held).to_numpy()
        t0 = time.time()
        model = klass(XGBParams(seed=seed, n_estimators=trees), use_device, version,
                      transfer=transfer).fit(sub[train], base[train], cat)
        pred = model.predict(sub[~train], base[~train], cat)
        meas = sub.loc[~train, "time_us"]
        rows.append({"split": f"held-out {held}", "n": int((~train).sum()),
                     "roofline": error_summary(base.loc[~train, "time_us"], meas),
                     "corrected": error_summary(pred, meas), "fit_s": time.time() - t0})
        print(f"  {group} {config} {held}: {rows[-1]['corrected']['geomean_pct']:.1f}%", file=sys.stderr)
    rng = np.random.default_rng(seed)
    test = rng.random(len(sub)) < 0.2
    t0 = time.time()
    model = klass(XGBParams(seed=seed, n_estimators=trees), use_device, version,
                      transfer=transfer).fit(sub[~test], base[~test], cat)
    pred = model.predict(sub[test], base[test], cat)
    meas = sub.loc[test, "time_us"]
    rows.append({"split": "in-distribution (random 20%)", "n": int(test.sum()),
                 "roofline": error_summary(base.loc[test, "time_us"], meas),
                 "corrected": error_summary(pred, meas), "fit_s": time.time() - t0})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--rows-per-gpu", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trees", type=int, default=400)
    ap.add_argument("--pointwise-configs", type=int, default=1,
                    help="how many of the configurations to run for the pointwise group (1 = default only)")
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.md")))
    args = ap.parse_args()
    t_start = time.time()
    table = load(public_data_dir(args.data_dir), args.rows_per_gpu, args.seed)
    lines = [
        "# Kernel correction accuracy (NeuSight FP32 PyTorch kernels)", "",
        f"Command: `python experiments/kernel_accuracy/run.py --rows-per-gpu {args.rows_per_gpu} --seed {args.seed} "
        f"--trees {args.trees} --pointwise-configs {args.pointwise_configs}`",
        "", f"Rows used (after sub-sampling to {args.rows_per_gpu} per GPU and group): "
        + ", ".join(f"{g}={n}" for g, n in table.groupby("group").size().items()),
        "", "Errors are |pred - meas| / meas in %, shown as geomean / median / p90 "
        "(hybrid.reports.metrics.error_summary).", "",
    ]
    for group in ("gemm", "pointwise"):
        for config in list(CONFIGS)[: len(CONFIGS) if group == "gemm" else args.pointwise_configs]:
            rows = evaluate(table, group, config, args.seed, args.trees)
            lines += [f"## {group} family, {config}", "",
                      "| split | rows | roofline only | corrected | fit s |", "|---|---|---|---|---|"]
            for r in rows:
                lines.append(f"| {r['split']} | {r['n']} | {fmt(r['roofline'])} | {fmt(r['corrected'])} | {r['fit_s']:.0f} |")
            held = [r["corrected"]["geomean_pct"] for r in rows if r["split"].startswith("held-out")]
            lines += ["", f"Mean held-out-GPU geomean: {np.mean(held):.1f}%", ""]
    lines.append(f"Total wall time: {time.time() - t_start:.0f} s")
    text = "\n".join(lines) + "\n"
    print(text)
    write_benchmark_results(args.out, text)


if __name__ == "__main__":
    main()
