"""Prediction-error figures, the same everywhere in the tool (CLI, MLflow metrics, benchmarks, reports).

All errors are relative: ``|pred - meas| / meas``. The geometric mean is taken over the relative errors
(with a 1e-6 floor so an exact hit does not zero it), as in the literature this tool compares against.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from hybrid.errors import InvalidInputError

#: Keys of every error summary, in display order.
ERROR_KEYS = ("n_rows", "geomean_pct", "mape_pct", "median_pct", "p90_pct")

_FLOOR = 1e-6


def relative_errors(predicted: np.ndarray | pd.Series, measured: np.ndarray | pd.Series) -> np.ndarray:
    """``|pred - meas| / meas`` per row; rejects non-positive or non-finite measurements."""
    p = np.asarray(predicted, dtype=np.float64)
    m = np.asarray(measured, dtype=np.float64)
    if p.shape != m.shape:
        raise InvalidInputError(f"predicted and measured differ in length ({p.shape} vs {m.shape})")
    if len(m) == 0:
        raise InvalidInputError("no rows to compare")
    if not np.all(np.isfinite(m)) or np.any(m <= 0):
        raise InvalidInputError("measured times must be positive and finite")
    if not np.all(np.isfinite(p)):
        raise InvalidInputError("predictions contain NaN or infinite values")
    return np.abs(p - m) / m


def _summary(err: np.ndarray) -> dict[str, Any]:
    return {
        "n_rows": int(len(err)),
        "geomean_pct": float(np.exp(np.mean(np.log(np.maximum(err, _FLOOR)))) * 100),
        "mape_pct": float(np.mean(err) * 100),
        "median_pct": float(np.median(err) * 100),
        "p90_pct": float(np.percentile(err, 90) * 100),
    }


def error_summary(
    predicted: np.ndarray | pd.Series,
    measured: np.ndarray | pd.Series,
    groups: dict[str, np.ndarray | pd.Series] | None = None,
) -> dict[str, Any]:
    """Overall error figures plus, for each named grouping (e.g. ``{"by_op": ops, "by_device": devs}``),
    a mapping from group value to the same figures."""
    err = relative_errors(predicted, measured)
    out: dict[str, Any] = _summary(err)
    for name, labels in (groups or {}).items():
        lab = np.asarray(labels, dtype=object)
        if len(lab) != len(err):
            raise InvalidInputError(f"grouping {name!r} has {len(lab)} labels for {len(err)} rows")
        codes, uniques = pd.factorize(lab, sort=True)
        out[name] = {str(u): _summary(err[codes == i]) for i, u in enumerate(uniques)}
    return out
