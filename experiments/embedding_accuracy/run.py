"""Embedding-lookup correction accuracy on the project's committed CPU profile bundle(s).

    python experiments/embedding_accuracy/run.py [--bundle datasets/cpu-...] [--out results.md]

Two splits of the embedding_bag rows (fwd and bwd): a seeded random 25% hold-out, and a harder split that
holds out every configuration whose table size (rows per table) is in the top 25% (the model must
extrapolate to larger tables than it was trained on). Roofline-only error beside corrected error, for the
current model (feature version 2: optimizer-state feature, dense-gradient table passes in the reference) and
the previous one (version 1), with a break-down by variant.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.corrections import EmbeddingXGB, HybridPredictor
from hybrid.data.bundle import load_bundle
from hybrid.data.paths import project_datasets_dir
from hybrid.errors import InvalidInputError
from hybrid.reports.markdown import write_benchmark_results
from hybrid.reports.metrics import error_summary


def find_bundles(explicit: list[str]) -> list[Path]:
    if explicit:
        return [Path(p) for p in explicit]
    found = sorted(p for p in project_datasets_dir().glob("cpu-*") if (p / "measurements.csv").is_file())
    if not found:
        raise InvalidInputError("no CPU profile bundle under datasets/cpu-* (run `hybrid profile` first)")
    return found


def fmt(s: dict) -> str:
    return f"{s['geomean_pct']:.1f} / {s['median_pct']:.1f} / {s['p90_pct']:.1f}"


def score(table: pd.DataFrame, test: np.ndarray, catalog, version: int) -> dict:
    pred = HybridPredictor(catalog, [EmbeddingXGB(feature_version=version)]).fit(table[~test])
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
            "by_variant": by_variant}


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
            for version in (2, 1):
                r = score(table, test, catalog, version)
                d = r["by_direction"]
                model = "current (v2)" if version == 2 else "previous (v1)"
                lines.append(f"| {name} | {model} | {r['n_train']} / {r['n_test']} | {r['roofline']} | {r['corrected']} | "
                             f"{' -> '.join(d['fwd']) if 'fwd' in d else '-'} | "
                             f"{' -> '.join(d['bwd']) if 'bwd' in d else '-'} |")
                variant_lines.append(f"| {name} | {model} | " + " | ".join(
                    f"{v}: {e}" for v, e in r["by_variant"].items()) + " |")
        lines += ["", "Corrected error by variant (geomean / median / p90):", "",
                  "| split | model | variants |", "|---|---|---|", *variant_lines, ""]
    lines += ["Errors: |pred - meas| / meas in %, geomean / median / p90.", "",
              f"Total wall time: {time.time() - t0:.0f} s"]
    text = "\n".join(lines) + "\n"
    print(text)
    write_benchmark_results(args.out, text)


if __name__ == "__main__":
    main()
