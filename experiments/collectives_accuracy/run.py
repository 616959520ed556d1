"""Collective-correction accuracy: held-out message sizes and held-out rank/node counts.

    python experiments/collectives_accuracy/run.py [--data-dir DIR] [--out results.md]

Data: nccl-tests logs (ALCF Polaris 2..540 nodes, Sophia DGX A100, Sirius; xxrjun H100 1 and 10 nodes),
Vidur A100 DGX / pairwise NVLink / A40, and the XLA H100x8 collective table, via the project importers.
Rows with nccl-tests #wrong > 0 are dropped by the model. Each split prints the alpha-beta (roofline) error
beside the sigmoid error.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.corrections import CollectiveSigmoid
from hybrid.data.importers import import_paths
from hybrid.data.paths import public_data_dir
from hybrid.hardware.catalog import default_catalog
from hybrid.ops.roofline import roofline
from hybrid.reports.metrics import error_summary


def load(data_dir: Path) -> pd.DataFrame:
    cat = default_catalog()
    frames = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fmt in ("nccl-tests", "vidur-network", "xla-collectives"):
            frames.append(import_paths(fmt, data_dir, catalog=cat))
    table = pd.concat(frames, ignore_index=True, sort=False)
    if "wrong" in table.columns:
        table = table[~(pd.to_numeric(table["wrong"], errors="coerce").fillna(0) > 0)]
    table["algorithm"] = table["algorithm"].astype("string").fillna("") if "algorithm" in table else ""
    return table.reset_index(drop=True)


def fmt(s: dict) -> str:
    return f"{s['geomean_pct']:.1f} / {s['median_pct']:.1f} / {s['p90_pct']:.1f}"


def held_out_sizes(table: pd.DataFrame, cat) -> pd.DataFrame:
    """Every third distinct size of each configuration held out (interpolation along the curve)."""
    keys = ["system", "op", "algorithm", "n_ranks", "n_nodes"]
    rank = table.groupby(keys)["size_bytes"].rank(method="dense").astype(int)
    test = (rank % 3 == 0).to_numpy()
    base = roofline(table, cat)
    model = CollectiveSigmoid().fit(table[~test], base[~test], cat)
    pred = model.predict(table[test], base[test], cat)
    out = table[test].assign(pred=pred, ab=base.loc[test, "time_us"].to_numpy())
    return out[np.isfinite(out["pred"])]


def held_out_ranks(table: pd.DataFrame, cat) -> pd.DataFrame:
    """Leave one rank count out per (system, collective, setting, GPUs per node) ladder."""
    base = roofline(table, cat)
    gpn = (table["n_ranks"] / table["n_nodes"].fillna(1)).round(3)
    ladder = table["system"].astype(str) + "|" + table["op"] + "|" + table["algorithm"].astype(str) + "|" + gpn.astype(str)
    results = []
    for system in sorted(table["system"].unique()):
        in_sys = (table["system"] == system).to_numpy()
        for r in sorted(table.loc[in_sys, "n_ranks"].unique()):
            test = in_sys & (table["n_ranks"] == r).to_numpy()
            train = in_sys & ~test
            lad_test = set(ladder[test])
            if not train.any():
                continue
            model = CollectiveSigmoid().fit(table[train], base[train], cat)
            pred = model.predict(table[test], base[test], cat)
            out = table[test].assign(pred=pred, ab=base.loc[test, "time_us"].to_numpy(), ladder=ladder[test].to_numpy())
            # interior: the ladder has measured rank counts on both sides of r
            kinds = {}
            for lad in lad_test:
                others = table.loc[train & (ladder == lad).to_numpy(), "n_ranks"]
                if len(others) == 0:
                    kinds[lad] = "other layout (alpha-beta rescaled)"
                elif others.min() < r < others.max():
                    kinds[lad] = "interpolated"
                else:
                    kinds[lad] = "extrapolated"
            out["kind"] = out["ladder"].map(kinds)
            results.append(out[np.isfinite(out["pred"])])
    return pd.concat(results, ignore_index=True)


def section(title: str, df: pd.DataFrame, by: str) -> list[str]:
    lines = [f"## {title}", "", f"| {by} | rows | alpha-beta (roofline) | sigmoid |", "|---|---|---|---|"]
    for key, g in df.groupby(by, sort=True):
        lines.append(f"| {key} | {len(g)} | {fmt(error_summary(g['ab'], g['time_us']))} | "
                     f"{fmt(error_summary(g['pred'], g['time_us']))} |")
    lines.append(f"| **all** | {len(df)} | {fmt(error_summary(df['ab'], df['time_us']))} | "
                 f"{fmt(error_summary(df['pred'], df['time_us']))} |")
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.md")))
    args = ap.parse_args()
    t0 = time.time()
    cat = default_catalog()
    table = load(public_data_dir(args.data_dir))
    sizes = held_out_sizes(table, cat)
    ranks = held_out_ranks(table, cat)
    lines = ["# Collective correction accuracy (sigmoid busbw curves vs alpha-beta)", "",
             "Command: `python experiments/collectives_accuracy/run.py`", "",
             f"{len(table)} rows after dropping #wrong > 0; systems: {', '.join(sorted(table['system'].unique()))}.",
             "Errors: |pred - meas| / meas in %, geomean / median / p90.", ""]
    lines += section("Held-out message sizes (every 3rd size of each curve)", sizes, "system")
    lines += section("Held-out rank counts, by kind", ranks, "kind")
    lines += section("Held-out rank counts, interpolated only, by system",
                     ranks[ranks["kind"] == "interpolated"], "system")
    lines += section("Held-out rank counts, extrapolated (capped at one doubling), by system",
                     ranks[ranks["kind"] == "extrapolated"], "system")
    lines.append(f"Total wall time: {time.time() - t0:.0f} s")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
