"""Default unseen interval band of collectives: where a calibration cannot calibrate it from the user's data.

    python experiments/interval_coverage/collective_default_band.py [--data-dir DIR] [--out collective_default_band.md]

A calibration on one system's logs (``hybrid calibrate my.csv`` after ``hybrid data import nccl-tests``) has no
held-out system or layout to calibrate the unseen band of its collective models on, yet predicts layouts it never
measured (80 ranks on 10 nodes from single-node runs) and, through the transfer model, systems it never measured.
Those rows then get :data:`hybrid.corrections.intervals.DEFAULT_COLLECTIVE_UNSEEN_BAND`, computed here from the
public collective measurements (nccl-tests logs: ALCF Polaris / Sophia / Sirius, xxrjun H100 clusters; the XLA H100x8
collective table), as the 10% / 90% quantiles of ``log(measured / predicted)`` pooled over two kinds of hold-out:

* leave one system out: the collective model (``CollectiveSigmoid(transfer=True)``, what ``hybrid calibrate``
  fits) fitted on every other system answers the held-out system's rows (transfer model);
* leave one node count out: per system with several node counts, the model fitted on that system's rows at the
  *other* node counts only (a user's own logs, nothing public) answers the held-out node count's rows; only rows
  the model flags as extrapolated (``CollectiveSigmoid.extrapolated``: the rows that get the unseen band) count.

Every held-out unit (a system, a (system, node count)) weighs the same; the two kinds weigh half each. No
conformal finite-sample correction: the band is a fixed constant, not a per-calibration quantile. Deterministic
(no sampling), so a rerun on the same data reproduces the constant.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.corrections import CollectiveSigmoid
from hybrid.corrections.intervals import DEFAULT_COLLECTIVE_UNSEEN_BAND, weighted_quantile
from hybrid.data.importers import import_paths
from hybrid.data.paths import public_data_dir
from hybrid.hardware.catalog import default_catalog
from hybrid.ops.roofline import roofline

SOURCES = ("nccl-tests", "xla-collectives")
COVERAGE = 0.8
#: The system whose single-node logs the repro (a calibration on them alone) uses.
CHECK = "xxrjun-H100-NDR"


def load(data_dir: Path, cat) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = pd.concat([import_paths(fmt, data_dir, catalog=cat) for fmt in SOURCES], ignore_index=True, sort=False)
    if "wrong" in table.columns:
        table = table[~(pd.to_numeric(table["wrong"], errors="coerce").fillna(0) > 0)]
    table = table[table["system"].notna() & (pd.to_numeric(table["time_us"], errors="coerce") > 0)]
    return table.reset_index(drop=True)


def _scored(table: pd.DataFrame, test: np.ndarray, train: np.ndarray, cat, unit: str, kind: str,
            only_extrapolated: bool) -> pd.DataFrame:
    base = roofline(table, cat)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = CollectiveSigmoid(transfer=True).fit(table[train], base[train], cat)
        held, hbase = table[test].reset_index(drop=True), base[test].reset_index(drop=True)
        pred = np.asarray(model.predict(held, hbase, cat), dtype=np.float64)
        keep = np.isfinite(pred) & (pred > 0)
        if only_extrapolated:
            keep &= np.asarray(model.extrapolated(held), dtype=bool)
    r = np.log(held["time_us"].to_numpy(np.float64)) - np.log(np.where(keep, pred, 1.0))
    return pd.DataFrame({"kind": kind, "unit": unit, "op": held["op"].astype(str), "r": r})[keep]


def residuals(table: pd.DataFrame, cat) -> pd.DataFrame:
    parts = []
    systems = sorted(map(str, table["system"].unique()))
    for system in systems:  # leave one system out (transfer model)
        test = (table["system"] == system).to_numpy()
        parts.append(_scored(table, test, ~test, cat, system, "system", only_extrapolated=False))
    nodes = pd.to_numeric(table["n_nodes"], errors="coerce").fillna(1).to_numpy()
    for system in systems:  # leave one node count out, fitted on that system's other node counts only
        in_sys = (table["system"] == system).to_numpy()
        for n in sorted(np.unique(nodes[in_sys])):
            test = in_sys & (nodes == n)
            if (in_sys & ~test).any():
                parts.append(_scored(table, test, in_sys & ~test, cat, f"{system} @ {int(n)} node(s)", "layout",
                                     only_extrapolated=True))
    return pd.concat(parts, ignore_index=True)


def weights(res: pd.DataFrame) -> np.ndarray:
    """Every unit the same weight, each kind (system / layout) the same share of the total."""
    unit_rows = res.groupby("unit")["r"].transform("size").to_numpy(np.float64)
    units_per_kind = res.groupby("kind")["unit"].transform("nunique").to_numpy(np.float64)
    return 1.0 / (unit_rows * units_per_kind * res["kind"].nunique())


def covered(res: pd.DataFrame, lo: float, hi: float) -> float:
    """Share (%) of ``res`` inside ``[lo, hi]`` under :func:`weights`."""
    inside = ((res["r"] >= lo) & (res["r"] <= hi)).to_numpy()
    w = weights(res)
    return float(100 * np.sum(w * inside) / np.sum(w))


def band(res: pd.DataFrame) -> tuple[float, float]:
    """10% / 90% quantiles under :func:`weights`."""
    w = weights(res)
    lo_q, hi_q = (1 - COVERAGE) / 2, (1 + COVERAGE) / 2
    n = int(1e9)  # no finite-sample correction (a constant, not a per-run conformal quantile)
    v = res["r"].to_numpy()
    return weighted_quantile(v, lo_q, w, n), weighted_quantile(v, hi_q, w, n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("collective_default_band.md"))
    args = ap.parse_args()
    cat = default_catalog()
    table = load(args.data_dir or public_data_dir(), cat)
    res = residuals(table, cat)
    lo, hi = band(res)
    lines = ["# Default unseen band of collectives", "",
             "`python experiments/interval_coverage/collective_default_band.py` (nccl-tests + XLA collectives, "
             f"{len(table):,} rows, {table['system'].nunique()} systems). Factors on the prediction: "
             "`[exp(lo), exp(hi)]`; covered: share inside the pooled band, every unit the same weight "
             f"(rows: share of the rows). `{CHECK}`: the repro system of the band's test "
             "(tests/test_intervals.py), left out to show the constant does not hinge on it.", "",
             "| hold-out | units | rows | 10% factor | 90% factor | covered (units) | covered (rows) |",
             "|---|---|---|---|---|---|---|"]
    for kind, g in [("leave one system out", res[res["kind"] == "system"]),
                    ("leave one node count out", res[res["kind"] == "layout"]), ("pooled", res),
                    (f"pooled without {CHECK}", res[~res["unit"].str.startswith(CHECK)])]:
        glo, ghi = band(g)
        cov_rows = 100 * np.mean((g["r"] >= lo) & (g["r"] <= hi))
        lines.append(f"| {kind} | {g['unit'].nunique()} | {len(g):,} | {np.exp(glo):.3f} | {np.exp(ghi):.3f} | "
                     f"{covered(g, lo, hi):.0f}% | {cov_rows:.0f}% |")
    lines += ["", "| unit | kind | rows | median factor | covered |", "|---|---|---|---|---|"]
    for (unit, kind), g in res.groupby(["unit", "kind"], sort=True):
        lines.append(f"| {unit} | {kind} | {len(g):,} | {np.exp(np.median(g['r'])):.3f} | "
                     f"{100 * np.mean((g['r'] >= lo) & (g['r'] <= hi)):.0f}% |")
    lines += ["", f"Pooled band (log residuals): `({lo:.4f}, {hi:.4f})`, factors "
              f"[{np.exp(lo):.3f}, {np.exp(hi):.3f}].",
              f"`DEFAULT_COLLECTIVE_UNSEEN_BAND` in `hybrid/corrections/intervals.py`: "
              f"`{DEFAULT_COLLECTIVE_UNSEEN_BAND}`."]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
