"""Predictions against measurements: the per-row prediction frame and its error figures.

The *prediction frame* is what calibration runs store (``predictions/<split>.csv``), ``hybrid evaluate -o``
writes and reports plot: one row per measured op with ``split``, ``device``, ``op``, ``family``, ``size`` (the
natural problem size of the family: FLOPs for GEMM/attention, message bytes for collectives, bytes moved
otherwise), ``measured_us``, ``predicted_us``, ``predicted_us_low`` / ``predicted_us_high`` (the 80% interval, NaN when the
model has none), ``roofline_us``, ``method``, ``bound``, ``interval_band`` (the band of the row's interval: seen / unseen / few /
adapted-k / sibling / edge, empty without one) and, when a base model was adapted, ``base_us``; plus the table's shape columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from hybrid.errors import InvalidInputError
from hybrid.ops.families import FAMILIES, family_array
from hybrid.reports.metrics import error_summary

#: Columns of the prediction frame, in order (shape columns follow).
PREDICTION_COLUMNS = ("split", "device", "system", "op", "family", "dtype", "direction", "size", "size_unit",
                      "measured_us", "predicted_us", "predicted_us_low", "predicted_us_high", "roofline_us", "base_us",
                      "method", "bound", "interval_band")
#: Which prediction column each compared model lives in.
MODEL_COLUMNS = {"model": "predicted_us", "roofline": "roofline_us", "base": "base_us"}
#: Families whose size is counted in FLOPs (the others in bytes).
_FLOP_FAMILIES = ("gemm", "attention")
_SHAPE_COLUMNS = tuple(dict.fromkeys(c for f in FAMILIES.values() for c in (*f.shape_columns, *f.optional_columns)))


def prediction_frame(table: pd.DataFrame, predicted: pd.DataFrame, split: str = "all",
                     base: np.ndarray | None = None) -> pd.DataFrame:
    """Join a measured canonical ``table`` with ``predicted`` (the output of ``HybridPredictor.predict`` for
    it: same index, columns time_us, roofline_us, method, bound)."""
    if "time_us" not in table.columns:
        raise InvalidInputError("the table has no measured time_us column to compare against")
    if len(predicted) != len(table):
        raise InvalidInputError(f"{len(predicted)} predictions for {len(table)} rows")
    fams = np.asarray(family_array(table["op"]), dtype=object)
    out = pd.DataFrame(index=table.index)
    out["split"] = split
    for c in ("device", "system", "op"):
        out[c] = table[c].astype(object) if c in table.columns else None
    out["family"] = fams
    out["dtype"] = table["dtype"].astype(object) if "dtype" in table.columns else "fp32"
    out["direction"] = table["direction"].astype(object) if "direction" in table.columns else None
    work = work_of(table, fams)
    is_flops = np.isin(fams, _FLOP_FAMILIES)
    is_coll = fams == "collective"
    size_bytes = pd.to_numeric(table["size_bytes"], errors="coerce").to_numpy(np.float64) \
        if "size_bytes" in table.columns else np.full(len(table), np.nan)
    out["size"] = np.where(is_flops, work["flops"], np.where(is_coll, size_bytes, work["bytes"]))
    out["size_unit"] = np.where(is_flops, "FLOP", "B")
    out["measured_us"] = pd.to_numeric(table["time_us"], errors="coerce").to_numpy(np.float64)
    out["predicted_us"] = predicted["time_us"].to_numpy(np.float64)
    for src, dst in (("time_us_low", "predicted_us_low"), ("time_us_high", "predicted_us_high")):
        out[dst] = predicted[src].to_numpy(np.float64) if src in predicted.columns else np.nan
    out["roofline_us"] = predicted["roofline_us"].to_numpy(np.float64)
    out["base_us"] = np.asarray(base, dtype=np.float64) if base is not None else np.nan
    out["method"] = predicted["method"].astype(str).to_numpy() if "method" in predicted.columns else "roofline"
    out["bound"] = predicted["bound"].astype(str).to_numpy() if "bound" in predicted.columns else None
    # the interval band the row got (seen / unseen / few / adapted-k / sibling / edge); None without calibrated intervals
    out["interval_band"] = (predicted["interval_band"].astype(object).to_numpy()
                            if "interval_band" in predicted.columns else None)
    for c in _SHAPE_COLUMNS:
        if c in table.columns and c not in out.columns and table[c].notna().any():
            out[c] = table[c].to_numpy()
    return out.reset_index(drop=True)


def work_of(table: pd.DataFrame, fams: np.ndarray) -> dict[str, np.ndarray]:
    """FLOPs and bytes per row from the family formulas (no catalog lookups); ``fams`` = family per row."""
    flops = np.full(len(table), np.nan)
    nbytes = np.full(len(table), np.nan)
    for name in pd.unique(fams):
        mask = fams == name
        sub = table.loc[mask]
        flops[mask] = FAMILIES[str(name)].flops(sub)
        nbytes[mask] = FAMILIES[str(name)].bytes(sub)
    return {"flops": flops, "bytes": nbytes}


def summarize(frame: pd.DataFrame, model: str = "model") -> dict[str, Any]:
    """Error figures of one compared model (``model``, ``roofline`` or ``base``) over a prediction frame:
    :func:`hybrid.reports.metrics.error_summary` with ``by_op`` (op family) and ``by_device`` (and ``by_shots``,
    rows adapted to, for the ``adapted`` split of ``hybrid calibrate``)."""
    column = MODEL_COLUMNS[model]
    if len(frame) == 0:
        raise InvalidInputError("no rows to evaluate")
    if column not in frame.columns or frame[column].isna().all():
        raise InvalidInputError(f"the prediction frame has no {model} predictions")
    groups = {"by_op": frame["family"].astype(str).to_numpy(), "by_device": frame["device"].astype(str).to_numpy()}
    if "shots" in frame.columns and frame["shots"].notna().any():  # the adapted split: per number of rows adapted to
        shots = frame["shots"]
        groups["by_shots"] = shots.map({v: f"{int(v)} rows" for v in shots.dropna().unique()}).fillna("-").to_numpy(
            dtype=object)
    return error_summary(frame[column].to_numpy(np.float64), frame["measured_us"].to_numpy(np.float64), groups=groups)


def interval_coverage(frame: pd.DataFrame) -> dict[str, Any]:
    """``coverage_pct`` (share of rows whose measurement is inside its 80% interval) overall,
    ``coverage_by_device`` and ``coverage_by_band`` (per interval band, ``interval_band``: whether the unseen band
    holds on a new GPU is a different question from whether the seen one does; ``{band: {"n_rows", "coverage_pct"}}``);
    NaN / empty when the frame has no intervals."""
    from hybrid.corrections.intervals import coverage_pct

    if "predicted_us_low" not in frame.columns or frame["predicted_us_low"].isna().all():
        return {"coverage_pct": float("nan"), "coverage_by_device": {}, "coverage_by_band": {}}
    cols = ("measured_us", "predicted_us_low", "predicted_us_high")
    by_dev = {str(d): coverage_pct(*(g[c].to_numpy() for c in cols)) for d, g in frame.groupby("device", sort=True)}
    by_band: dict[str, dict[str, Any]] = {}
    if "interval_band" in frame.columns:
        banded = frame[frame["interval_band"].notna() & frame["predicted_us_low"].notna()]
        by_band = {str(b): {"n_rows": len(g), "coverage_pct": coverage_pct(*(g[c].to_numpy() for c in cols))}
                   for b, g in banded.groupby("interval_band", sort=True)}
    return {"coverage_pct": coverage_pct(*(frame[c].to_numpy() for c in cols)), "coverage_by_device": by_dev,
            "coverage_by_band": by_band}


def compared_models(frame: pd.DataFrame) -> list[str]:
    """The models a prediction frame holds predictions of (``model``, ``roofline``, and ``base`` if any)."""
    return [m for m, c in MODEL_COLUMNS.items() if c in frame.columns and frame[c].notna().any()]


def split_summaries(frame: pd.DataFrame) -> dict[str, dict[str, dict[str, Any]]]:
    """``{split: {model: error_summary}}`` for every split and compared model in ``frame``."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for split, sub in frame.groupby("split", sort=False):
        out[str(split)] = {m: summarize(sub, m) for m in compared_models(sub)}
    return out


#: Columns of a prediction frame that identify a measured row (shape, device, measured time).
ROW_KEY_COLUMNS = ("device", "op", "dtype", "direction", "size", "measured_us")


def row_keys(frame: pd.DataFrame) -> pd.Series:
    """One hashable key per row of a prediction frame (numbers to 12 significant digits, so a CSV round trip
    of the run's artifacts gives the same key)."""
    parts = []
    for c in ROW_KEY_COLUMNS:
        if c not in frame.columns:
            continue
        col = frame[c]
        if pd.api.types.is_numeric_dtype(col):  # formatted once per distinct value, not per row
            codes, uniques = pd.factorize(col, use_na_sentinel=True)
            text = np.array([f"{float(v):.12g}" for v in uniques] + [""], dtype=object)
            parts.append(pd.Series(text[codes], index=col.index))
        else:
            parts.append(col.astype("string").fillna("").astype(str))
    key = parts[0]
    for p in parts[1:]:
        key = key + "\x1f" + p
    return key


def in_training_data(frame: pd.DataFrame, training: pd.DataFrame) -> np.ndarray:
    """Boolean mask of the rows of ``frame`` (a prediction frame) that are also rows of ``training`` (the
    ``train`` split of the run that fitted the model)."""
    if len(frame) == 0 or len(training) == 0:
        return np.zeros(len(frame), dtype=bool)
    return row_keys(frame).isin(set(row_keys(training))).to_numpy()
