"""Embedding-lookup correction accuracy on the project's committed CPU profile bundle(s).

    python experiments/embedding_accuracy/run.py [--bundle datasets/cpu-...] [--out results.md]

Two splits of the embedding_bag rows (fwd and bwd): a seeded random 25% hold-out, and a harder split that
holds out every configuration whose table size (rows per table) is in the top 25% (the model must
extrapolate to larger tables than it was trained on). Roofline-only error beside corrected error, for the
current model (boosted trees on top of a fitted physical cost model, ``reference="linear"``) and the previous
one (the same trees against the roofline + dense-gradient passes, ``reference="roofline"``), with a break-down by
variant, and the fitted cost-model constants.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.corrections import EmbeddingXGB, HybridPredictor
from hybrid.corrections.embedding_xgb import COST_TERMS
from hybrid.data.bundle import load_bundle
from hybrid.data.paths import project_datasets_dir
from hybrid.errors import InvalidInputError
from hybrid.reports.markdown import write_benchmark_results
from hybrid.reports.metrics import error_summary

#: Split seeds of the repeated random split.
SEEDS = 5


def find_bundles(explicit: list[str]) -> list[Path]:
    if explicit:
        return [Path(p) for p in explicit]
    found = sorted(p for p in project_datasets_dir().glob("cpu-*") if (p / "measurements.csv").is_file())
    if not found:
        raise InvalidInputError("no CPU profile bundle under datasets/cpu-* (run `hybrid profile` first)")
    return found


def fmt(s: dict) -> str:
    return f"{s['geomean_pct']:.1f} / {s['median_pct']:.1f} / {s['p90_pct']:.1f}"


def score(table: pd.DataFrame, test: np.ndarray, catalog, reference: str, select: bool = False) -> dict:
    pred = HybridPredictor(catalog, [EmbeddingXGB(reference=reference, select=select)]).fit(table[~test])
    out = pred.predict(table[test])
    meas = table.loc[test, "time_us"]
    variants = table.loc[test, "variant"].astype("string").fillna("-")
    by_variant = {v: fmt(error_summary(out["time_us"][m], meas[m]))
                  for v in sorted(variants.unique()) if (m := (variants == v).to_numpy()).any()}
    by_dir = {d: (fmt(error_summary(out["roofline_us"][m], meas[m])), fmt(error_summary(out["time_us"][m], meas[m])))
              for d in ("fwd", "bwd") if (m := (table.loc[test, "direction"] == d).to_numpy()).any()}
    return {"n_train": int((~test).sum()), "n_test": int(test.sum()),
            "roofline": fmt(error_summary(out["roofline_us"], meas)),
            "corrected": fmt(error_summary(out["time_us"], meas)),
            "corrected_geomean": error_summary(out["time_us"], meas)["geomean_pct"], "by_direction": by_dir,
            "by_variant": by_variant, "constants": pred.corrections[0].reference_constants(),
            "selection": pred.corrections[0].selection}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", action="append", default=[])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.md")))
    args = ap.parse_args()
    t0 = time.time()
    lines = ["# Embedding-bag correction accuracy (project CPU profile)", "",
             "Command: `python experiments/embedding_accuracy/run.py`", ""]
    for bundle in find_bundles(args.bundle):
        table, catalog = load_bundle(bundle)
        table = table[table["op"] == "embedding_bag"].reset_index(drop=True)
        if "direction" not in table.columns:
            table["direction"] = "fwd"
        table["direction"] = table["direction"].fillna("fwd")
        sizes = np.sort(table["num_embeddings"].unique())
        rng = np.random.default_rng(args.seed)
        splits = {"random 25%": rng.random(len(table)) < 0.25}
        cut = float(np.quantile(table["num_embeddings"], 0.75))
        splits[f"held-out largest tables (rows/table > {cut:,.0f}, top 25%)"] = (table["num_embeddings"] > cut).to_numpy()
        lines += [f"## {bundle.name} ({len(table)} embedding_bag rows, {len(sizes)} table sizes)", "",
                  "| split | model | train / test rows | roofline only | corrected | fwd (roofline -> corrected) | "
                  "bwd (roofline -> corrected) |", "|---|---|---|---|---|---|---|"]
        variant_lines = []
        for name, test in splits.items():
            for reference, select in (("linear", False), ("linear", True), ("roofline", False)):
                r = score(table, test, catalog, reference, select)
                d = r["by_direction"]
                model = {("linear", False): "current (fitted cost model)",
                         ("linear", True): "variant: cost model or roofline per group by inner CV (select=True)",
                         ("roofline", False): "previous (roofline reference)"}[(reference, select)]
                if reference == "linear" and name.startswith("random"):
                    if select:
                        selection = r["selection"]
                    else:
                        constants = r["constants"]
                lines.append(f"| {name} | {model} | {r['n_train']} / {r['n_test']} | {r['roofline']} | {r['corrected']} | "
                             f"{' -> '.join(d['fwd']) if 'fwd' in d else '-'} | "
                             f"{' -> '.join(d['bwd']) if 'bwd' in d else '-'} |")
                variant_lines.append(f"| {name} | {model} | " + " | ".join(
                    f"{v}: {e}" for v, e in r["by_variant"].items()) + " |")
        seed_rows = []
        for reference in ("linear", "roofline"):
            vals = [score(table, np.random.default_rng(sd).random(len(table)) < 0.25, catalog, reference)["corrected_geomean"]
                    for sd in range(SEEDS)]
            seed_rows.append(f"| {'current (fitted cost model)' if reference == 'linear' else 'previous (roofline reference)'}"
                             f" | " + " | ".join(f"{v:.1f}" for v in vals) + f" | **{np.mean(vals):.1f}** |")
        lines += ["", f"Random 25% split repeated with split seeds 0-{SEEDS - 1} (corrected geomean %; the first table uses "
                  f"seed {args.seed}):", "", "| model | " + " | ".join(f"seed {i}" for i in range(SEEDS)) + " | mean |",
                  "|---|" + "---|" * (SEEDS + 1), *seed_rows]
        lines += ["", "Corrected error by variant (geomean / median / p90):", "",
                  "| split | model | variants |", "|---|---|---|", *variant_lines, ""]
        lines += ["Fitted cost model of the current model on the random split's training rows (coefficients of the "
                  "cost terms: byte terms in passes at memory bandwidth, count terms in 64-byte line transfers per "
                  "event, launches in kernel launches):", "",
                  "| direction / variant | " + " | ".join(COST_TERMS) + " |", "|---|" + "---|" * len(COST_TERMS)]
        for group, vals in constants.items():
            lines.append(f"| {group.replace('|', ' / ')} | " + " | ".join(f"{vals[t]:.3g}" for t in COST_TERMS) + " |")
        lines += ["", "The select=True variant: reference chosen per group by 3-fold cross-validation inside the training "
                  "rows (mean |ln error|):",
                  "", "| direction / variant | fitted cost model | roofline reference | used |", "|---|---|---|---|"]
        for group, e in selection.items():
            lin, roof = e["cv_mean_abs_log_err_linear"], e["cv_mean_abs_log_err_roofline"]
            lines.append(f"| {group.replace('|', ' / ')} | {lin:.3f} | {roof:.3f} | "
                         f"{'cost model' if lin <= roof else 'roofline'} |")
        lines.append("")
    lines += ["Errors: |pred - meas| / meas in %, geomean / median / p90.", "",
              f"Total wall time: {time.time() - t0:.0f} s"]
    text = "\n".join(lines) + "\n"
    print(text)
    write_benchmark_results(args.out, text)


if __name__ == "__main__":
    main()
