"""End-to-end form error: how far measured iterations fall outside the op-cost interval, and a margin for it.

An iteration's 80% interval from :mod:`hybrid.engine.simulate` schedules the graph with every op at the low / high
end of its own interval: it says how far the *op costs* can be off. A real run also differs from the graph in ways
no op-cost model describes (the framework's own host work, kernels fused or split differently, runtime overheads,
the knobs a published table leaves unstated). This module measures that part on published end-to-end runs and
turns it into one margin:

* the **score** of a run is how far (in log) its measured time falls outside the op-cost interval, and minus how
  far inside it from the nearer end where it falls inside (:func:`signed_scores`);
* the **margin** is the 80% quantile of the scores (the conformal quantile of the op bands,
  :func:`hybrid.corrections.intervals.weighted_quantile`), each source (one harness / table / paper) weighing the
  same however many rows it has;
* the **end-to-end interval** is the op-cost interval widened by the margin on both sides:
  ``[low * exp(-m), high * exp(m)]``; a negative margin narrows it (more than 80% of the runs fell inside the
  op-cost interval: setting every op at the low / high end of its own 80% band together assumes their errors move
  as one, and they partly cancel), never past the point prediction.

The margin is calibrated by ``experiments/e2e_intervals/run.py`` from the per-row outputs of the end-to-end
benchmarks and packaged in ``form_error.toml``; its leave-one-source-out coverage (each source scored with the
margin of the others) is recorded beside it, so a caller can say how often the widened interval held on a source
it never saw. The op-cost interval stays what rankings use (the sharding and mapping searches compare candidates
run by the same software, whose form error they share).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources

import numpy as np
import pandas as pd

from hybrid.errors import InvalidInputError

#: Columns of a per-row end-to-end table (what the benchmarks write): the source it comes from, the workload
#: kind ("training" / "inference"), the measured figure, the point prediction and its op-cost 80% interval (any
#: unit, the same for the five numbers of a row; a throughput's interval is fine too: scores are in log).
ROW_COLUMNS = ("source", "kind", "measured", "predicted", "low", "high")
#: Nominal coverage of the intervals the margin widens.
LEVEL = 0.8
KINDS = ("training", "inference")


@dataclass(frozen=True)
class FormMargin:
    """A calibrated end-to-end margin (log-space) and what it was calibrated on."""

    kind: str
    log_margin: float
    n_rows: int
    n_sources: int
    #: share of rows inside the widened interval, each source scored with the margin of the others (mean over
    #: sources) and the same for the op-cost interval alone
    loso_coverage_pct: float = float("nan")
    op_only_coverage_pct: float = float("nan")
    calibrated_on: str = ""
    #: the lowest and highest held-out coverage of one source (the spread behind the mean)
    loso_min_pct: float = float("nan")
    loso_max_pct: float = float("nan")

    @property
    def factor(self) -> float:
        """The widening factor on each side (``exp(log_margin)``)."""
        return float(np.exp(self.log_margin))

    def widen(self, low, high, point=None):
        """The op-cost interval ``[low, high]`` widened by the margin (scalars or arrays; NaN stays NaN). A negative
        margin narrows it: an interval narrower than the narrowing shrinks to its geometric middle, and with the
        point prediction ``point`` given the interval keeps it inside (narrowed no further than the point)."""
        low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
        f = self.factor
        lo, hi = low / f, high * f
        if self.log_margin < 0:
            mid = np.sqrt(low * high)
            crossed = lo > hi
            lo, hi = np.where(crossed, mid, lo), np.where(crossed, mid, hi)
        if point is not None:
            point = np.asarray(point, dtype=float)
            lo = np.where(np.isfinite(point), np.minimum(lo, point), lo)
            hi = np.where(np.isfinite(point), np.maximum(hi, point), hi)
        return (lo, hi) if lo.ndim else (lo[()], hi[()])


def _check_rows(rows: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in ROW_COLUMNS if c not in rows.columns]
    if missing:
        raise InvalidInputError(f"end-to-end rows lack column(s) {missing} (need {list(ROW_COLUMNS)})")
    if rows.empty:
        raise InvalidInputError("no end-to-end rows to calibrate a form margin on")
    num = rows[["measured", "predicted", "low", "high"]].astype(float)
    bad = ~np.isfinite(num).all(axis=1) | (num <= 0).any(axis=1)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise InvalidInputError(f"end-to-end row {i} ({rows['source'].iloc[i]}): measured, predicted, low and high "
                                f"must be finite and > 0, got {num.iloc[i].tolist()}")
    if (num["low"] > num["high"]).any():
        i = int(np.flatnonzero((num["low"] > num["high"]).to_numpy())[0])
        raise InvalidInputError(f"end-to-end row {i} ({rows['source'].iloc[i]}): low > high")
    return rows


def scores(measured, low, high) -> np.ndarray:
    """How far each measured value falls outside its interval, in log (0 inside)."""
    return np.maximum(0.0, signed_scores(measured, low, high))


def signed_scores(measured, low, high) -> np.ndarray:
    """:func:`scores`, negative inside the interval: minus the log distance to its nearer end (the margin that
    narrows the interval until the value sits on its edge)."""
    m, lo, hi = (np.asarray(a, dtype=float) for a in (measured, low, high))
    return np.maximum(np.log(lo / m), np.log(m / hi))


def fit_margin(rows: pd.DataFrame, kind: str = "all", level: float = LEVEL) -> FormMargin:
    """The margin that puts ``level`` of the rows inside, each source weighing the same: positive where fewer
    than ``level`` of them fell inside the op-cost interval (it widens), negative where more did (it narrows)."""
    from hybrid.corrections.intervals import weighted_quantile  # the conformal quantile the op bands use

    rows = _check_rows(rows)
    s = signed_scores(rows["measured"], rows["low"], rows["high"])
    n_src = rows.groupby("source")["source"].transform("size").to_numpy(dtype=float)
    m = float(weighted_quantile(s, level, weights=1.0 / n_src))
    return FormMargin(kind, m, int(len(rows)), int(rows["source"].nunique()),
                      calibrated_on="; ".join(sorted(rows["source"].unique())))


def coverage(rows: pd.DataFrame, log_margin: float) -> float:
    """Share of rows (%) inside their op-cost interval widened (narrowed, a negative ``log_margin``) by
    ``log_margin``, the point prediction kept inside (:meth:`FormMargin.widen`)."""
    from hybrid.corrections.intervals import coverage_pct

    lo, hi = FormMargin("", float(log_margin), 0, 0).widen(rows["low"].to_numpy(float), rows["high"].to_numpy(float),
                                                           rows["predicted"].to_numpy(float))
    eps = 1 + 1e-12
    return coverage_pct(rows["measured"].to_numpy(float), lo / eps, hi * eps)


def leave_one_source_out(rows: pd.DataFrame, level: float = LEVEL) -> pd.DataFrame:
    """Each source scored with the margin calibrated on the others: its rows, margin, coverage with the margin
    and with the op-cost interval alone, median widened width."""
    rows = _check_rows(rows)
    if rows["source"].nunique() < 2:
        raise InvalidInputError("leave-one-source-out needs rows from at least two sources")
    out = []
    for src, held in rows.groupby("source", sort=True):
        m = fit_margin(rows[rows["source"] != src], level=level).log_margin
        width = np.median(held["high"].to_numpy(float) / held["low"].to_numpy(float)) * np.exp(2 * m)
        out.append({"source": src, "kind": held["kind"].iloc[0], "rows": len(held), "log_margin": m,
                    "coverage_pct": coverage(held, m), "op_only_coverage_pct": coverage(held, 0.0),
                    "median_width": float(width)})
    return pd.DataFrame(out)


def calibrate(rows: pd.DataFrame, kind: str = "all", level: float = LEVEL) -> FormMargin:
    """:func:`fit_margin` on every row, with its leave-one-source-out coverage (mean over sources) recorded."""
    fitted = fit_margin(rows, kind, level)
    loso = leave_one_source_out(rows, level)
    return FormMargin(kind, fitted.log_margin, fitted.n_rows, fitted.n_sources,
                      float(loso["coverage_pct"].mean()), float(loso["op_only_coverage_pct"].mean()),
                      fitted.calibrated_on, float(loso["coverage_pct"].min()), float(loso["coverage_pct"].max()))


def e2e_interval(values: dict, kind: str, margin: FormMargin | None = None) -> dict:
    """The end-to-end intervals of a result's op-cost intervals: for every ``X_low`` / ``X_high`` pair in
    ``values``, ``X_e2e_low`` / ``X_e2e_high`` (widened by the packaged margin of ``kind`` unless ``margin`` is
    given), plus ``e2e_margin_factor``, ``e2e_heldout_coverage_pct`` (how often the widened interval held on
    software it was not calibrated on, mean over held-out sources) and ``e2e_heldout_coverage_range_pct`` (the
    lowest and highest source). Empty when there is no pair or no margin."""
    margin = margin if margin is not None else packaged_margin(kind)
    pairs = [k[:-4] for k in values if k.endswith("_low") and not k.endswith("_e2e_low") and f"{k[:-4]}_high" in values]
    if margin is None or not pairs:
        return {}
    out: dict = {}
    for base in pairs:
        lo, hi = margin.widen(values[f"{base}_low"], values[f"{base}_high"], values.get(base))
        out[f"{base}_e2e_low"], out[f"{base}_e2e_high"] = float(lo), float(hi)
    out["e2e_margin_factor"] = margin.factor
    out["e2e_heldout_coverage_pct"] = margin.loso_coverage_pct
    out["e2e_heldout_coverage_range_pct"] = [margin.loso_min_pct, margin.loso_max_pct]
    return out


def packaged_margin(kind: str = "all") -> FormMargin | None:
    """The margin packaged with hybrid (``form_error.toml``) for ``kind`` (falls back to ``all``); None if absent."""
    try:
        text = resources.files("hybrid.engine").joinpath("form_error.toml").read_text()
    except FileNotFoundError:
        return None
    table = tomllib.loads(text).get("margins", {})
    entry = table.get(kind) or table.get("all")
    if entry is None:
        return None
    return FormMargin(entry.get("kind", kind), float(entry["log_margin"]), int(entry["n_rows"]),
                      int(entry["n_sources"]), float(entry.get("loso_coverage_pct", np.nan)),
                      float(entry.get("op_only_coverage_pct", np.nan)), str(entry.get("calibrated_on", "")),
                      float(entry.get("loso_min_pct", np.nan)), float(entry.get("loso_max_pct", np.nan)))
