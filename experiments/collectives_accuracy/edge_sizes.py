"""Collectives at message sizes beyond a measured layout's own sizes: held-out edge sizes.

    python experiments/collectives_accuracy/edge_sizes.py [--data-dir DIR] [--window 16] [--intervals]

Data as ``run.py`` (nccl-tests, Vidur, XLA, DeepBench). The measured layouts (system, collective, setting, ranks,
nodes) of each (system, collective) are split into two folds (alternate layouts); per fold and side the sizes of
the fold's layouts within ``--window`` x of their smallest (``low``) or largest (``high``) measured size are held
out, as long as at least ``MIN_SIZES`` distinct sizes stay in the fit, and every other row stays in (the other
fold's layouts keep the system's full size range, as layouts measured over different sizes do). Each held-out row
is scored by its distance beyond its layout's remaining sizes (``factor``, 2x = one doubling) with

* ``model``: what ``CollectiveSigmoid(transfer=True)`` predicts (the code under test);
* ``curve``: the layout's own sigmoid, extrapolated (the rule before 2026-12-05 above the sizes, and below them to
  the system's smallest size);
* ``anchored``: the alpha-beta (roofline) time scaled by the curve's ratio to it at the layout's nearest measured
  size (``CollectiveSigmoid._anchor``), below the smallest capped at that size's time;
* ``transfer`` / ``transfer anchored``: the cross-system model as is, and scaled to the curve at the edge;
* ``alpha-beta``: the roofline.

``--intervals`` also fits ``HybridPredictor(None, [CollectiveSigmoid(transfer=True)]).fit(intervals=True)`` on a
sub-sample of each fold's training rows and reports the held-out rows' interval coverage per band.
Prints markdown to stdout (a run is kept in ``edge_results.md``); nothing is written.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import load  # noqa: E402

from hybrid.corrections import CollectiveSigmoid, HybridPredictor  # noqa: E402
from hybrid.corrections.collective_sigmoid import MIN_SIZES, _group_key  # noqa: E402
from hybrid.corrections.intervals import coverage_pct  # noqa: E402
from hybrid.data.paths import public_data_dir  # noqa: E402
from hybrid.hardware.catalog import default_catalog  # noqa: E402
from hybrid.ops.families import col  # noqa: E402
from hybrid.ops.roofline import roofline  # noqa: E402
from hybrid.reports.metrics import error_summary  # noqa: E402

KEYS = ["system", "op", "algorithm", "n_ranks", "n_nodes"]
COLS = {"model": "model", "curve": "curve (extrapolated)", "anchored": "alpha-beta anchored at the edge",
        "transfer": "transfer model", "transfer_anchored": "transfer anchored at the edge", "ab": "alpha-beta"}
BUCKETS = [(1.0, 2.0, "<= 2x"), (2.0, 4.0, "2-4x"), (4.0, 8.0, "4-8x"), (8.0, np.inf, "> 8x")]


def holdouts(table: pd.DataFrame, window: float) -> list[tuple[str, int, np.ndarray, np.ndarray]]:
    """(side, fold, test mask, edge size per row) for both sides and folds."""
    lay = table.groupby(KEYS, sort=True).ngroup().to_numpy()
    first = table.assign(_l=lay).groupby(KEYS, sort=True)["_l"].first().reset_index()
    first["fold"] = first.groupby(["system", "op"]).cumcount() % 2
    fold = first.set_index("_l")["fold"].reindex(lay).to_numpy()
    size = col(table, "size_bytes")
    out = []
    for side in ("low", "high"):
        for f in (0, 1):
            g = pd.Series(size).groupby(lay)
            lo, hi = g.transform("min").to_numpy(), g.transform("max").to_numpy()
            test = (size < lo * window) if side == "low" else (size > hi / window)
            test &= fold == f
            keep = pd.Series(size[~test]).groupby(lay[~test]).agg(["nunique", "min", "max"])
            ok = keep["nunique"].reindex(lay).fillna(0).to_numpy() >= MIN_SIZES
            test &= ok
            edge = (keep["min"] if side == "low" else keep["max"]).reindex(lay).to_numpy()
            out.append((side, f, test, edge))
    return out


def score(table: pd.DataFrame, cat, window: float, intervals: bool, per_system: int) -> pd.DataFrame:
    base = roofline(table, cat)
    res = []
    for side, f, test, edge in holdouts(table, window):
        t0 = time.time()
        train = ~test
        m = CollectiveSigmoid(transfer=True).fit(table[train], base[train], cat)
        sub, bsub = table[test], base[test]
        pred, source = m.predict_with_source(sub, bsub, cat)
        curve = m._predict_curves(sub, bsub, cat)
        at = sub.copy()
        at["size_bytes"] = edge[test]
        bat = roofline(at, cat)
        c_at = m._predict_curves(at, bat, cat)
        ratio = c_at / bat["time_us"].to_numpy()
        anchored = bsub["time_us"].to_numpy() * ratio
        if side == "low":
            anchored = np.minimum(anchored, c_at)
        tr_args = (_group_key(sub).to_numpy(), sub["op"].astype(str).to_numpy(), col(sub, "n_ranks"),
                   col(sub, "n_nodes", 1.0))
        tr = m.transfer.predict_us(cat, *tr_args, col(sub, "size_bytes"))
        tr_at = m.transfer.predict_us(cat, *tr_args, edge[test])
        factor = np.where(side == "low", edge[test] / col(sub, "size_bytes"), col(sub, "size_bytes") / edge[test])
        out = sub[KEYS + ["size_bytes", "time_us"]].assign(
            side=side, fold=f, factor=factor, model=pred, source=source, curve=curve, anchored=anchored,
            transfer=tr, transfer_anchored=c_at * tr / tr_at, ab=bsub["time_us"].to_numpy(),
            extrapolated=m.extrapolated(sub))
        if intervals:
            fit_rows = table[train].sample(frac=1.0, random_state=f).groupby("system").head(per_system)
            hp = HybridPredictor(None, [CollectiveSigmoid(transfer=True)], seed=0).fit(fit_rows, intervals=True)
            p = hp.predict(sub)
            out = out.assign(hp=p["time_us"].to_numpy(), method=p["method"].to_numpy(),
                             band=p.get("interval_band", pd.Series("", index=p.index)).to_numpy(),
                             low=p["time_us_low"].to_numpy(), high=p["time_us_high"].to_numpy())
        res.append(out)
        print(f"  {side} fold {f}: {int(test.sum())} rows, {time.time() - t0:.0f}s", file=sys.stderr)
    return pd.concat(res, ignore_index=True)


def fmt(s: dict) -> str:
    return f"{s['geomean_pct']:.1f} / {s['p90_pct']:.0f}"


def table_by(df: pd.DataFrame, by: str | list[str], title: str) -> list[str]:
    cols = [c for c in COLS if c in df.columns]
    lines = [f"### {title}", "", "geomean % / p90 % error", "",
             f"| {by} | rows | " + " | ".join(COLS[c] for c in cols) + " |", "|---" * (len(cols) + 2) + "|"]
    for key, g in df.groupby(by, sort=True):
        lines.append(f"| {key} | {len(g)} | " + " | ".join(fmt(error_summary(g[c], g["time_us"])) for c in cols) + " |")
    lines.append(f"| **all rows** | {len(df)} | " + " | ".join(fmt(error_summary(df[c], df["time_us"])) for c in cols)
                 + " |")
    means = [np.mean([error_summary(g[c], g["time_us"])["geomean_pct"] for _, g in df.groupby("system")]) for c in cols]
    lines.append("| **mean over systems** | | " + " | ".join(f"{v:.1f}" for v in means) + " |")
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--window", type=float, default=16.0)
    ap.add_argument("--intervals", action="store_true")
    ap.add_argument("--rows-per-system", type=int, default=400)
    ap.add_argument("--save", default=None, help="also write the scored rows to this parquet file")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    t0 = time.time()
    cat = default_catalog()
    table = load(public_data_dir(args.data_dir))
    df = score(table, cat, args.window, args.intervals, args.rows_per_system)
    if args.save:
        df.to_parquet(args.save)
    df["bucket"] = pd.cut(df["factor"], [b[0] for b in BUCKETS] + [np.inf], labels=[b[2] for b in BUCKETS],
                          include_lowest=True).astype(str)
    lines = [f"## Held-out edge sizes (window {args.window:g}x; {time.time() - t0:.0f}s)", ""]
    for side in ("low", "high"):
        d = df[df["side"] == side]
        lines += table_by(d, "bucket", f"{side} edge, by distance beyond the layout's measured sizes")
        lines += table_by(d, "system", f"{side} edge, by system")
        lines += table_by(d, "op", f"{side} edge, by collective")
    lines += ["### Labels", "", "| side | distance | rows | extrapolated (unseen band) % | source |", "|---|---|---|---|---|"]
    for (side, b), g in df.groupby(["side", "bucket"], sort=True):
        src = ", ".join(f"{k} {v}" for k, v in g["source"].value_counts().items())
        lines.append(f"| {side} | {b} | {len(g)} | {100 * g['extrapolated'].mean():.1f} | {src} |")
    if args.intervals:
        lines += ["", "### Interval coverage (80% nominal)", "",
                  "| side | distance | band | rows | inside % | median width |", "|---|---|---|---|---|---|"]
        for (side, b, band), g in df.groupby(["side", "bucket", "band"], sort=True):
            cov = coverage_pct(g["time_us"].to_numpy(), g["low"].to_numpy(), g["high"].to_numpy())
            lines.append(f"| {side} | {b} | {band} | {len(g)} | {cov:.1f} | {np.median(g['high'] / g['low']):.2f}x |")
        for side, g in df.groupby("side"):
            cov = coverage_pct(g["time_us"].to_numpy(), g["low"].to_numpy(), g["high"].to_numpy())
            lines.append(f"| {side} | all | all | {len(g)} | **{cov:.1f}** | {np.median(g['high'] / g['low']):.2f}x |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
