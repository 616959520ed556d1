"""Is a missing all-gather / reduce-scatter better priced from its sibling's curve at the same layout?

    python experiments/collectives_accuracy/borrow_check.py [--data-dir DIR] [--out borrow_results.md]

On every (system, setting, ranks, nodes) of the public data where both ``all_gather`` and ``reduce_scatter`` were
measured, one of the two is hidden and its measured rows predicted

* **borrow**: by the sibling's fitted sigmoid at the same system, setting and layout, at the same ``size_bytes``
  (bus bandwidth equal). The schema's size is nccl-tests' total buffer: the all-gather's whole output, the
  reduce-scatter's whole input; both move ``(n - 1) / n x size`` per rank over the same rings and share the bus
  factor ``(n - 1) / n``, so equal bus bandwidth at equal ``size_bytes`` is equal time. As a check of that convention
  the table also scores the sibling read at the size that equates *per-rank inputs* instead (reduce-scatter at
  ``s`` from the all-gather at ``n x s``, all-gather at ``s`` from the reduce-scatter at ``s / n``);
* **today**: by :class:`~hybrid.corrections.CollectiveSigmoid` refitted without those rows (``sibling=False``:
  the model before siblings priced each other), in two scenarios:
  *layout* (the op hidden only at that layout: the op's layout model across its other measured layouts answers) and
  *system* (the op hidden at every layout of the system, i.e. never measured there: the transfer model answers, as
  in the predictor's default corrections; the alpha-beta roofline, what a model without the transfer model falls
  back to, beside it).

Errors: |pred - meas| / meas in %, geomean / median / p90 over the measured rows (in- and out-of-place).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import load  # noqa: E402  (this folder's loader: the same rows as results.md)

from hybrid.corrections import CollectiveSigmoid  # noqa: E402
from hybrid.data.paths import public_data_dir  # noqa: E402
from hybrid.hardware.catalog import default_catalog  # noqa: E402
from hybrid.ops.roofline import roofline  # noqa: E402
from hybrid.reports.metrics import error_summary  # noqa: E402

SIBLING = {"all_gather": "reduce_scatter", "reduce_scatter": "all_gather"}
LAYOUT = ["system", "algorithm", "n_ranks", "n_nodes"]


def both_measured(table: pd.DataFrame) -> pd.DataFrame:
    """(system, setting, ranks, nodes) layouts with both all_gather and reduce_scatter rows."""
    sub = table[table["op"].isin(list(SIBLING))]
    ops = sub.groupby(LAYOUT)["op"].nunique()
    return ops[ops == 2].reset_index()[LAYOUT]


def _rows(table: pd.DataFrame, layout: pd.Series, op: str) -> np.ndarray:
    m = table["op"].to_numpy() == op
    for k in LAYOUT:
        m &= (table[k] == layout[k]).to_numpy()
    return m


def borrowed(model: CollectiveSigmoid, rows: pd.DataFrame, cat, scale: np.ndarray | float = 1.0) -> np.ndarray:
    """The rows priced as their sibling op at ``size_bytes x scale`` (scale 1: the same total buffer)."""
    alt = rows.copy()
    alt["op"] = alt["op"].map(SIBLING)
    alt["size_bytes"] = alt["size_bytes"] * scale
    return model.predict(alt, roofline(alt, cat), cat)


def _scored(model: CollectiveSigmoid, table: pd.DataFrame, base: pd.DataFrame, test: np.ndarray, cat,
            scenario: str, target: str) -> pd.DataFrame:
    """The hidden ``test`` rows with today's prediction (and its source), alpha-beta, the sibling's curve at the same
    total buffer and at the per-rank-input convention."""
    rows = table[test]
    today, source = model.predict_with_source(rows, base[test], cat)
    n = rows["n_ranks"].to_numpy(dtype=float)
    return rows.assign(scenario=scenario, target=target, today=today, today_source=source,
                       ab=base.loc[test, "time_us"].to_numpy(), borrow=borrowed(model, rows, cat),
                       wrong_size=borrowed(model, rows, cat, n if target == "reduce_scatter" else 1.0 / n))


def score(table: pd.DataFrame, cat) -> pd.DataFrame:
    layouts = both_measured(table)
    base = roofline(table, cat)
    out = []
    systems = layouts["system"].unique()
    # scenario "system": the op never measured on the system (every layout hidden); the default corrections' model
    for system in systems:
        in_sys = (table["system"] == system).to_numpy()
        for target in SIBLING:
            hide = in_sys & (table["op"] == target).to_numpy()
            model = CollectiveSigmoid(transfer=True, sibling=False).fit(table[~hide], base[~hide], cat)
            for _, lay in layouts[layouts["system"] == system].iterrows():
                test = _rows(table, lay, target)
                out.append(_scored(model, table, base, test, cat, "system", target))
    # scenario "layout": the op hidden at this layout only; its other layouts stay (per-system curves only, so the
    # fit takes the system's rows)
    for _, lay in layouts.iterrows():
        in_sys = (table["system"] == lay["system"]).to_numpy()
        for target in SIBLING:
            test = _rows(table, lay, target)
            train = in_sys & ~test
            model = CollectiveSigmoid(sibling=False).fit(table[train], base[train], cat)
            out.append(_scored(model, table, base, test, cat, "layout", target))
    res = pd.concat(out, ignore_index=True)
    res["layout"] = (res["system"].astype(str) + " " + res["n_ranks"].astype(int).astype(str) + "r/"
                     + res["n_nodes"].astype(int).astype(str) + "n")
    return res


def fmt(pred: pd.Series, meas: pd.Series) -> str:
    ok = np.isfinite(pred.to_numpy(dtype=float))
    if not ok.any():
        return "-"
    s = error_summary(pred[ok], meas[ok])
    miss = "" if ok.all() else f" ({int((~ok).sum())} rows NaN)"
    return f"{s['geomean_pct']:.1f} / {s['median_pct']:.1f} / {s['p90_pct']:.1f}{miss}"


DIRECTION = {"reduce_scatter": "RS from AG", "all_gather": "AG from RS"}


def report(res: pd.DataFrame, seconds: float) -> str:
    lines = ["# Borrowing a sibling's curve: all-gather <-> reduce-scatter at the same layout", "",
             "Command: `python experiments/collectives_accuracy/borrow_check.py`", "",
             f"Date: {dt.date.today().isoformat()}. Layouts with both ops measured: "
             + ", ".join(sorted(res["layout"].unique())) + ".",
             "Errors: |pred - meas| / meas in %, geomean / median / p90 over the hidden op's measured rows.",
             "borrow = the sibling's sigmoid at the same system, setting, layout and `size_bytes`; "
             "per-rank-input size = the sibling read at the size with equal per-rank input (the wrong convention); "
             "today = `CollectiveSigmoid` refitted without the hidden rows (layout: its layout model over the op's "
             "other layouts; system: the transfer model, `transfer=True` as in the default corrections).", ""]
    lines += ["## Pooled, per direction and scenario", "",
              "| direction | scenario | rows | borrow (same size_bytes) | borrow (per-rank-input size) | today | "
              "today's model | alpha-beta |", "|---|---|---|---|---|---|---|---|"]
    for (target, scen), g in res.groupby(["target", "scenario"], sort=False):
        src = ", ".join(f"{k or 'none'} {v}" for k, v in g["today_source"].value_counts().items())
        lines.append(f"| {DIRECTION[target]} | {scen} | {len(g)} | {fmt(g['borrow'], g['time_us'])} | "
                     f"{fmt(g['wrong_size'], g['time_us'])} | {fmt(g['today'], g['time_us'])} | {src} | "
                     f"{fmt(g['ab'], g['time_us'])} |")
    lines += ["", "## Mean over layouts (each layout weighted equally; geomean % per layout, averaged)", "",
              "| direction | scenario | layouts | borrow | today | borrow better at |", "|---|---|---|---|---|---|"]
    for (target, scen), g in res.groupby(["target", "scenario"], sort=False):
        per = {lay: (_geo(h["borrow"], h["time_us"]), _geo(h["today"], h["time_us"])) for lay, h in g.groupby("layout")}
        wins = sum(b < t for b, t in per.values())
        lines.append(f"| {DIRECTION[target]} | {scen} | {len(per)} | {np.mean([b for b, _ in per.values()]):.1f} | "
                     f"{np.mean([t for _, t in per.values()]):.1f} | {wins} of {len(per)} layouts |")
    lines += ["", "## Pooled by system (both directions)", "",
              "| system | scenario | rows | borrow | today |", "|---|---|---|---|---|"]
    for (system, scen), g in res.groupby(["system", "scenario"], sort=True):
        lines.append(f"| {system} | {scen} | {len(g)} | {fmt(g['borrow'], g['time_us'])} | "
                     f"{fmt(g['today'], g['time_us'])} |")
    lines += ["", "## Per layout (borrow vs today)", "",
              "| layout | direction | rows | borrow | today, layout scenario | today, system scenario |",
              "|---|---|---|---|---|---|"]
    for (lay, target), g in res.groupby(["layout", "target"], sort=True):
        gl, gs = g[g["scenario"] == "layout"], g[g["scenario"] == "system"]
        lines.append(f"| {lay} | {DIRECTION[target]} | {len(gl)} | {fmt(gl['borrow'], gl['time_us'])} | "
                     f"{fmt(gl['today'], gl['time_us'])} | {fmt(gs['today'], gs['time_us'])} |")
    # the borrow residuals (log measured / borrowed): what an interval band for borrowed rows would be calibrated on
    b = res[res["scenario"] == "layout"]
    r = np.log(b["time_us"].to_numpy() / b["borrow"].to_numpy())
    lines += ["", "## Borrow residuals ln(measured / borrowed), both directions pooled", "",
              f"{len(r)} rows: 10% / 50% / 90% quantiles {np.quantile(r, 0.1):.3f} / {np.quantile(r, 0.5):.3f} / "
              f"{np.quantile(r, 0.9):.3f}; by size: below 1 MiB "
              + _q(r[b["size_bytes"].to_numpy() < 2**20]) + ", 1 MiB and up " + _q(r[b["size_bytes"].to_numpy() >= 2**20])
              + ".", "", f"Wall time: {seconds:.0f} s"]
    return "\n".join(lines) + "\n"


def _geo(pred: pd.Series, meas: pd.Series) -> float:
    ok = np.isfinite(pred.to_numpy(dtype=float))
    return float(error_summary(pred[ok], meas[ok])["geomean_pct"]) if ok.any() else float("nan")


def _q(r: np.ndarray) -> str:
    if not len(r):
        return "(no rows)"
    return f"({len(r)} rows) {np.quantile(r, 0.1):.3f} / {np.quantile(r, 0.5):.3f} / {np.quantile(r, 0.9):.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default=str(Path(__file__).with_name("borrow_results.md")))
    args = ap.parse_args()
    t0 = time.time()
    cat = default_catalog()
    table = load(public_data_dir(args.data_dir))
    res = score(table, cat)
    text = report(res, time.time() - t0)
    print(text)
    Path(args.out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
