"""Few-shot adaptation of a fitted predictor to a new device from a handful (5-50) of its measurements.

Four strategies, compared in ``experiments/few_shot`` (see ``docs/corrections.md``):

``residual``
    Keep the transferred model and learn one multiplicative scale per (device, correction):
    ``offset = sum(log(measured / predicted)) / (n + SHRINK)``, i.e. the mean log residual shrunk towards 0
    when there are few rows. One parameter cannot over-fit 5 rows.
``scale``
    The same single efficiency scale, estimated robustly: a Huber M-estimate of the log residual (outlying rows
    get weight ``HUBER_C * spread / |r - offset|``), shrunk towards 0 (scale 1) by ``SHRINK`` pseudo-rows. One
    badly predicted shape among 5 rows moves it far less than the mean.
``boost``
    Continue boosting the transferred XGBoost model with the new rows (shallow trees, low learning rate,
    ``BOOST_ROUNDS`` rounds); the resulting model is used only for that device. Collective and roofline rows
    fall back to ``residual``.
``auto`` (the default)
    ``scale`` first; with at least ``AUTO_BOOST_MIN_ROWS`` rows of a family, extra trees are then grown on the
    residuals left after the scale (the scale absorbs the device-wide bias, the trees only the shape-dependent
    part). Below that, the scale alone: low variance where there is little data.
``shift``
    One *additive* time per (device, correction), in microseconds: the per-op host cost (framework dispatch,
    launch, synchronise) of the new machine minus what the model learned from the training hosts. Eager-framework
    timings of small ops are mostly that cost, which differs by host (13-18 us on the project's H100 VM, 14-67 us
    on the public hosts), so a multiplicative scale fitted on a mix of small and large ops fits neither
    (``experiments/h100_transfer``). :func:`robust_shift`: the shift on :data:`SHIFT_GRID_US` minimising a capped
    absolute log error, shrunk towards 0 like the scale; a shifted prediction never drops below the row's
    roofline.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Pseudo-count shrinking the residual offset towards 0 (n rows give weight n / (n + SHRINK)).
SHRINK = 2.0
#: Extra trees grown on the new device's rows by the ``boost`` strategy.
BOOST_ROUNDS = 30
#: Learning rate of those trees.
BOOST_LEARNING_RATE = 0.1
#: Huber threshold of the ``scale`` strategy, in units of the residuals' robust spread (1.4826 x MAD).
HUBER_C = 1.5
#: Floor of that spread (log units): below it every row counts fully (a near-uniform bias is just averaged).
MIN_SPREAD = 0.05
#: Rows of one family from which ``auto`` also grows trees on the residuals left after the scale.
AUTO_BOOST_MIN_ROWS = 20
#: Strategies :meth:`HybridPredictor.adapt` accepts.
STRATEGIES = ("residual", "scale", "boost", "auto", "shift")
#: Additive shifts (us) the ``shift`` strategy chooses from: host per-op costs differ by tens of microseconds.
SHIFT_GRID_US = np.arange(-100.0, 100.0 + 0.125, 0.25)
#: Absolute log error at which one row's loss stops growing in :func:`robust_shift` (a badly predicted shape
#: among a few rows cannot drag the shift).
SHIFT_LOSS_CAP = 1.0


def residual_offsets(log_residual: np.ndarray, groups: pd.Series, shrink: float = SHRINK) -> dict[str, float]:
    """Shrunken mean log residual per group label (vectorised over rows)."""
    frame = pd.DataFrame({"g": groups.astype(str).to_numpy(), "r": np.asarray(log_residual, dtype=np.float64)})
    frame = frame[np.isfinite(frame["r"])]
    agg = frame.groupby("g")["r"].agg(["sum", "count"])
    return {str(g): float(row["sum"] / (row["count"] + shrink)) for g, row in agg.iterrows()}


def robust_offset(log_residual: np.ndarray, shrink: float = SHRINK, c: float = HUBER_C,
                  iterations: int = 20) -> float:
    """Huber M-estimate of the location of ``log_residual``, shrunk towards 0 by ``shrink`` pseudo-rows.

    Iteratively re-weighted from the median: weight ``min(1, c * spread / |r - offset|)`` with spread the
    residuals' 1.4826 x median absolute deviation (at least :data:`MIN_SPREAD`); the result is
    ``sum(w r) / (sum(w) + shrink)``, so few (or down-weighted) rows pull the scale towards 1.
    """
    r = np.asarray(log_residual, dtype=np.float64)
    r = r[np.isfinite(r)]
    if len(r) == 0:
        return 0.0
    mu = float(np.median(r))
    spread = max(1.4826 * float(np.median(np.abs(r - mu))), MIN_SPREAD)
    w = np.ones(len(r))
    for _ in range(iterations):
        w = np.minimum(1.0, c * spread / np.maximum(np.abs(r - mu), 1e-12))
        new = float(np.sum(w * r) / np.sum(w))
        if abs(new - mu) < 1e-9:
            mu = new
            break
        mu = new
    return float(np.sum(w * r) / (np.sum(w) + shrink))


def robust_offsets(log_residual: np.ndarray, groups: pd.Series, shrink: float = SHRINK) -> dict[str, float]:
    """:func:`robust_offset` per group label."""
    r = np.asarray(log_residual, dtype=np.float64)
    labels = groups.astype(str).to_numpy()
    codes, uniques = pd.factorize(labels)
    return {str(g): robust_offset(r[codes == i], shrink) for i, g in enumerate(uniques)}


def robust_shift(measured: np.ndarray, predicted: np.ndarray, floor: np.ndarray, shrink: float = SHRINK) -> float:
    """Additive time (us) that best moves ``predicted`` onto ``measured``: the ``a`` of :data:`SHIFT_GRID_US`
    minimising ``sum(min(|log(measured / max(predicted + a, floor))|, SHIFT_LOSS_CAP))`` (ties: the smallest
    ``|a|``), shrunk towards 0 by ``n / (n + shrink)``. ``floor`` (the roofline) bounds a negative shift.
    Rows with a non-positive or non-finite value are ignored; none left gives 0."""
    m, p, f = (np.asarray(x, dtype=np.float64) for x in (measured, predicted, floor))
    ok = np.isfinite(m) & np.isfinite(p) & np.isfinite(f) & (m > 0) & (p > 0)
    m, p, f = m[ok], p[ok], np.maximum(np.where(f[ok] > 0, f[ok], 0.0), 1e-6)
    if len(m) == 0:
        return 0.0
    cand = np.maximum(p[None, :] + SHIFT_GRID_US[:, None], f[None, :])
    loss = np.minimum(np.abs(np.log(m)[None, :] - np.log(cand)), SHIFT_LOSS_CAP).sum(axis=1)
    best = np.flatnonzero(loss <= loss.min() + 1e-9)
    a = float(SHIFT_GRID_US[best[np.argmin(np.abs(SHIFT_GRID_US[best]))]])
    return a * len(m) / (len(m) + shrink)


def robust_shifts(measured: np.ndarray, predicted: np.ndarray, floor: np.ndarray, groups: pd.Series,
                  shrink: float = SHRINK) -> dict[str, float]:
    """:func:`robust_shift` per group label."""
    m, p, f = (np.asarray(x, dtype=np.float64) for x in (measured, predicted, floor))
    codes, uniques = pd.factorize(groups.astype(str).to_numpy())
    return {str(g): robust_shift(m[codes == i], p[codes == i], f[codes == i], shrink) for i, g in enumerate(uniques)}
