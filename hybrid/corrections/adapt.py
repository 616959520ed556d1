"""Few-shot adaptation of a fitted predictor to a new device from a handful (5-50) of its measurements.

Six strategies, compared in ``experiments/few_shot`` (see ``docs/corrections.md``):

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
``scale-trees`` (the default until the form choice below)
    ``scale`` first; with at least ``AUTO_BOOST_MIN_ROWS`` rows of a family, extra trees are then grown on the
    residuals left after the scale (the scale absorbs the device-wide bias, the trees only the shape-dependent
    part). Below that, the scale alone: low variance where there is little data.
``auto`` (the default)
    Per (device, correction), the form of the error is chosen from the adaptation rows alone
    (:func:`choose_form`): ``scale`` (efficiency ratio a: time = a * pred), ``shift`` (per-op host time b in
    us: time = max(pred + b, roofline)) or ``affine`` (both: time = max(a * pred + b, roofline), a joint grid
    fit :func:`robust_affine`), by leave-one-out (10-fold beyond 10 rows) capped log error with the
    one-standard-error rule (the simpler form unless the other is clearly better); every constant is shrunk
    towards the identity by ``SHRINK`` pseudo-rows and ``b`` kept physical (:func:`shift_bounds`: at most the
    fastest measured op, at least minus the model's own overhead above the roofline on the lightest op). Then,
    like ``scale-trees``, extra trees on what that form leaves from ``AUTO_BOOST_MIN_ROWS`` rows of a family.
    A new GPU on a familiar host mostly needs the scale, a new host (another framework dispatch cost) the shift;
    the error on a new device is a mix of the two (``experiments/few_shot``, ``experiments/h100_transfer``).
    A fourth form, ``tilt`` (time = a * pred * (roofline / r0)^c, :func:`robust_tilt`), is a scale that drifts
    with the op's size: a GPU whose efficiency falls (or rises) with the work relative to the training GPUs',
    e.g. a board held under a low power limit (T4, P4) whose clock drops on large ops. ``c`` is the slope of the
    log residual against the log roofline time of the adaptation rows, shrunk towards 0, and held constant
    beyond the sizes they span (no extrapolation of the drift).
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

from dataclasses import dataclass, field
from typing import Any

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
#: Rows of one family from which ``auto`` (and ``scale-trees``) also grow trees on what the fitted form leaves.
AUTO_BOOST_MIN_ROWS = 20
#: Strategies :meth:`HybridPredictor.adapt` accepts.
STRATEGIES = ("residual", "scale", "boost", "auto", "shift", "scale-trees")
#: Additive shifts (us) the ``shift`` strategy chooses from: host per-op costs differ by tens of microseconds.
SHIFT_GRID_US = np.arange(-100.0, 100.0 + 0.125, 0.25)
#: Absolute log error at which one row's loss stops growing in :func:`robust_shift` (a badly predicted shape
#: among a few rows cannot drag the shift).
SHIFT_LOSS_CAP = 1.0
#: Shrinkage of the ``tilt`` form's slope towards 0, in pseudo-rows one ln unit (2.7x in roofline time) from the
#: rows' centre: a slope needs rows spread over sizes to move away from "no drift".
TILT_SHRINK = 4.0
#: Lowest slope the ``tilt`` form takes: 0, efficiency that falls with the op's size (a clock held down by the
#: power limit on long, heavy kernels; working sets beyond a cache). The other sign, small ops relatively slower,
#: is what a per-op host time (the ``shift`` form) does, and a tilt fitted to it extrapolates it wrongly.
TILT_MIN_SLOPE = 0.0


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


def robust_shift(measured: np.ndarray, predicted: np.ndarray, floor: np.ndarray, shrink: float = SHRINK,
                 bounded: bool = False) -> float:
    """Additive time (us) that best moves ``predicted`` onto ``measured``: the ``a`` of :data:`SHIFT_GRID_US`
    minimising ``sum(min(|log(measured / max(predicted + a, floor))|, SHIFT_LOSS_CAP))`` (ties: the smallest
    ``|a|``), shrunk towards 0 by ``n / (n + shrink)``. ``floor`` (the roofline) bounds a negative shift.
    Rows with a non-positive or non-finite value are ignored; none left gives 0. ``bounded``: only physical
    shifts, :func:`shift_bounds` (used by strategy ``auto``)."""
    m, p, f = _clean(measured, predicted, floor)
    if len(m) == 0:
        return 0.0
    cand = np.maximum(p[None, :] + SHIFT_GRID_US[:, None], f[None, :])
    loss = np.minimum(np.abs(np.log(m)[None, :] - np.log(cand)), SHIFT_LOSS_CAP).sum(axis=1)
    if bounded:
        lo, hi = shift_bounds(m, p, f)
        loss[(SHIFT_GRID_US < lo) | (SHIFT_GRID_US > hi)] = np.inf
    best = np.flatnonzero(loss <= loss.min() + 1e-9)
    a = float(SHIFT_GRID_US[best[np.argmin(np.abs(SHIFT_GRID_US[best]))]])
    return a * len(m) / (len(m) + shrink)


def shift_bounds(measured: np.ndarray, predicted: np.ndarray, floor: np.ndarray,
                 scale: float | np.ndarray = 1.0) -> tuple[np.ndarray, float]:
    """Physical range of a per-op host time ``b`` added to ``scale * predicted``: at most the fastest measured
    op (every op pays it), at least minus the predicted time above the roofline of the lightest op (the model's
    own per-op overhead cannot be removed twice). Lower bound per scale (array when ``scale`` is), 0 included."""
    a = np.atleast_1d(np.asarray(scale, dtype=np.float64))
    lo = -np.maximum((a[:, None] * predicted[None, :] - floor[None, :]).min(axis=1), 0.0)
    hi = max(float(measured.min()), 0.0)
    return (lo if np.ndim(scale) else lo[0]), hi


def robust_shifts(measured: np.ndarray, predicted: np.ndarray, floor: np.ndarray, groups: pd.Series,
                  shrink: float = SHRINK) -> dict[str, float]:
    """:func:`robust_shift` per group label."""
    m, p, f = (np.asarray(x, dtype=np.float64) for x in (measured, predicted, floor))
    codes, uniques = pd.factorize(groups.astype(str).to_numpy())
    return {str(g): robust_shift(m[codes == i], p[codes == i], f[codes == i], shrink) for i, g in enumerate(uniques)}


@dataclass(frozen=True)
class Tilt:
    """Size drift of a few-shot scale: ln factor ``slope * (clip(ln roofline_us, lo, hi) - ref)``.

    ``ref`` is the adaptation rows' mean ln roofline time (us), where the drift is 0; ``lo`` / ``hi`` the range
    they span: beyond it the factor is held at its edge value, so an op far larger or smaller than any adaptation
    row is not extrapolated along the slope."""

    slope: float
    ref: float
    lo: float
    hi: float

    def log_factor(self, roofline_us: np.ndarray) -> np.ndarray:
        x = np.log(np.maximum(np.asarray(roofline_us, dtype=np.float64), 1e-12))
        return self.slope * (np.clip(x, self.lo, self.hi) - self.ref)

    def to_json(self) -> dict[str, float]:
        return {"slope": self.slope, "ref": self.ref, "lo": self.lo, "hi": self.hi}

    @classmethod
    def from_json(cls, obj: dict[str, Any] | None) -> Tilt | None:
        if not obj:
            return None
        return cls(float(obj["slope"]), float(obj["ref"]), float(obj["lo"]), float(obj["hi"]))


def robust_tilt(measured: np.ndarray, predicted: np.ndarray, floor: np.ndarray, shrink: float = SHRINK,
                slope_shrink: float = TILT_SHRINK, c: float = HUBER_C, iterations: int = 20
                ) -> tuple[float, Tilt | None]:
    """``(log a, tilt)`` of ``ln(measured / predicted) = ln a + slope * (ln floor - ref)``: a Huber-weighted
    ridge regression on the log roofline time ``floor`` (centred at the rows' mean ``ref``), the intercept shrunk
    towards 0 by ``shrink`` pseudo-rows (as :func:`robust_offset`), the slope by ``slope_shrink``
    (:data:`TILT_SHRINK`). Rows with a non-positive or non-finite value are ignored; none left gives ``(0, None)``."""
    m, p, f = _clean(measured, predicted, floor)
    if len(m) == 0:
        return 0.0, None
    r = np.log(m) - np.log(p)
    x = np.log(f)
    ref = float(x.mean())
    xc = x - ref
    w = np.ones(len(r))
    a = slope = 0.0
    for _ in range(iterations):
        lhs = np.array([[w.sum() + shrink, (w * xc).sum()], [(w * xc).sum(), (w * xc * xc).sum() + slope_shrink]])
        rhs = np.array([(w * r).sum(), (w * xc * r).sum()])
        new_a, new_slope = (float(v) for v in np.linalg.solve(lhs, rhs))
        res = r - new_a - new_slope * xc
        spread = max(1.4826 * float(np.median(np.abs(res - np.median(res)))), MIN_SPREAD)
        w = np.minimum(1.0, c * spread / np.maximum(np.abs(res), 1e-12))
        done = abs(new_a - a) < 1e-9 and abs(new_slope - slope) < 1e-9
        a, slope = new_a, new_slope
        if done:
            break
    if slope < TILT_MIN_SLOPE:  # small ops relatively slower is a per-op host time: the shift's case, not a tilt
        return robust_offset(r, shrink), Tilt(0.0, ref, float(x.min()), float(x.max()))
    return a, Tilt(slope, ref, float(x.min()), float(x.max()))


# ------------------------------------------------------------------------------------ chosen form (strategy auto)
#: Forms :func:`choose_form` picks from per (correction, device), simplest first (ties go to the earlier one):
#: ``scale`` (efficiency ratio ``a``, time = a * pred), ``shift`` (per-op host time ``b`` in us,
#: time = max(pred + b, roofline)), ``tilt`` (a scale drifting with size, time = a * pred * (roofline / r0)^c,
#: :func:`robust_tilt`) and ``affine`` (scale and shift, time = max(a * pred + b, roofline)). The tilt comes
#: before the shift: of two forms the cross-validation cannot tell apart, the smooth generalisation of the
#: scale is preferred to an additive host time (``experiments/few_shot``).
FORMS = ("scale", "tilt", "shift", "affine")
#: log(a) grid of the ``affine`` form's joint fit (a from 0.1x to 10x, 1% steps: a coarser grid lets the joint
#: fit trade grid rounding of a against a spurious b).
AFFINE_LOG_SCALE_GRID = np.arange(-2.3, 2.3 + 1e-9, 0.01)
#: b grid (us) of the ``affine`` form's joint fit (coarser than :data:`SHIFT_GRID_US`: the two axes together).
AFFINE_SHIFT_GRID_US = np.arange(-100.0, 100.0 + 1e-9, 0.5)
#: Rows per block of the affine grid evaluation (memory ~ 40 x this many MB).
AFFINE_BLOCK_ROWS = 8
#: Fewest rows of a (correction, device) pair from which the form is chosen by cross-validation; below, ``scale``.
MIN_SELECT_ROWS = 3
#: Folds of that cross-validation: leave-one-out up to this many rows, this many folds beyond.
CV_FOLDS = 10


@dataclass(frozen=True)
class AffineFit:
    """One (correction, device) pair's adaptation: time = max(exp(log_scale) * pred + shift_us, roofline).

    ``form`` is the one chosen (an ``affine`` fit that kept b = 0 or a = 1 is named ``scale`` / ``shift``);
    ``cv_loss`` the mean held-out capped absolute log error of each form tried
    (empty when there were too few rows to cross-validate); ``rows`` the rows it was fitted on; ``tilt`` the
    size drift of the ``tilt`` form (None for the others): time = a * pred * exp(tilt.log_factor(roofline))."""

    form: str
    log_scale: float
    shift_us: float
    rows: int
    cv_loss: dict[str, float] = field(default_factory=dict)
    tilt: Tilt | None = None

    @property
    def scale(self) -> float:
        """The efficiency ratio ``a`` (measured / predicted for large ops)."""
        return float(np.exp(self.log_scale))

    def to_json(self) -> dict[str, Any]:
        out = {"form": self.form, "scale": self.scale, "shift_us": self.shift_us, "rows": self.rows,
               "cv_loss": dict(self.cv_loss)}
        if self.tilt is not None:
            out["tilt"] = self.tilt.to_json()
        return out


def _clean(measured: np.ndarray, predicted: np.ndarray, floor: np.ndarray) -> tuple[np.ndarray, ...]:
    m, p, f = (np.asarray(x, dtype=np.float64) for x in (measured, predicted, floor))
    ok = np.isfinite(m) & np.isfinite(p) & np.isfinite(f) & (m > 0) & (p > 0)
    return m[ok], p[ok], np.maximum(np.where(f[ok] > 0, f[ok], 0.0), 1e-6)


def apply_form(predicted: np.ndarray, floor: np.ndarray, log_scale: float, shift_us: float,
               tilt: Tilt | None = None) -> np.ndarray:
    """What :meth:`HybridPredictor.predict` does with a scale, a tilt and a shift: ``a * pred`` (times the
    tilt's size factor), then ``+ b`` bounded below by the roofline (only when there is a shift)."""
    t = np.asarray(predicted, dtype=np.float64) * np.exp(log_scale)
    if tilt is not None:
        t = t * np.exp(tilt.log_factor(floor))
    return np.maximum(t + shift_us, floor) if shift_us != 0.0 else t


def _capped_loss(measured: np.ndarray, time: np.ndarray) -> np.ndarray:
    return np.minimum(np.abs(np.log(measured) - np.log(time)), SHIFT_LOSS_CAP)


def _affine_loss_grid(m: np.ndarray, p: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Summed capped log loss of the rows for every (log a, b) of the affine grids, shape (A, B); rows are taken
    :data:`AFFINE_BLOCK_ROWS` at a time (bounded memory for any number of rows)."""
    a = np.exp(AFFINE_LOG_SCALE_GRID)[:, None, None]
    b = AFFINE_SHIFT_GRID_US[None, :, None]
    total = np.zeros((len(AFFINE_LOG_SCALE_GRID), len(AFFINE_SHIFT_GRID_US)))
    for i in range(0, len(m), AFFINE_BLOCK_ROWS):
        sl = slice(i, i + AFFINE_BLOCK_ROWS)
        t = a * p[None, None, sl] + b
        t = np.where(b != 0.0, np.maximum(t, f[None, None, sl]), t)  # the roofline bounds a shift (as in predict)
        total += _capped_loss(m[None, None, sl], t).sum(axis=2)
    return total


def _affine_argmin(loss: np.ndarray, n: int, shrink: float, m: np.ndarray, p: np.ndarray,
                   f: np.ndarray) -> tuple[float, float]:
    """Grid minimiser of ``loss`` within :func:`shift_bounds` of the fit rows ``m, p, f`` (ties: nearest the
    identity), shrunk towards (a=1, b=0) by n / (n + shrink)."""
    lo, hi = shift_bounds(m, p, f, np.exp(AFFINE_LOG_SCALE_GRID))
    b = AFFINE_SHIFT_GRID_US[None, :]
    loss = np.where((b >= lo[:, None]) & (b <= hi), loss, np.inf)
    best = np.argwhere(loss <= loss.min() + 1e-9)
    la, b = AFFINE_LOG_SCALE_GRID[best[:, 0]], AFFINE_SHIFT_GRID_US[best[:, 1]]
    i = int(np.argmin(np.abs(la) / AFFINE_LOG_SCALE_GRID.max() + np.abs(b) / AFFINE_SHIFT_GRID_US.max()))
    w = n / (n + shrink)
    return float(la[i]) * w, float(b[i]) * w


def robust_affine(measured: np.ndarray, predicted: np.ndarray, floor: np.ndarray,
                  shrink: float = SHRINK) -> tuple[float, float]:
    """Joint ``(log a, b)`` minimising ``sum(min(|log(measured / max(a * predicted + b, floor))|, SHIFT_LOSS_CAP))``
    over :data:`AFFINE_LOG_SCALE_GRID` x :data:`AFFINE_SHIFT_GRID_US`, both shrunk towards the identity by
    ``n / (n + shrink)``; only physical ``b`` (:func:`shift_bounds`). No usable row gives (0, 0)."""
    m, p, f = _clean(measured, predicted, floor)
    if len(m) == 0:
        return 0.0, 0.0
    return _affine_argmin(_affine_loss_grid(m, p, f), len(m), shrink, m, p, f)


def _fit(form: str, m: np.ndarray, p: np.ndarray, f: np.ndarray, shrink: float
         ) -> tuple[float, float, Tilt | None]:
    if form == "scale":
        return robust_offset(np.log(m) - np.log(p), shrink), 0.0, None
    if form == "shift":
        return 0.0, robust_shift(m, p, f, shrink, bounded=True), None
    if form == "tilt":
        ls, tilt = robust_tilt(m, p, f, shrink)
        return ls, 0.0, (tilt if tilt is not None and tilt.slope != 0.0 else None)  # no drift: a plain scale
    return (*robust_affine(m, p, f, shrink), None)


def choose_form(measured: np.ndarray, predicted: np.ndarray, floor: np.ndarray, shrink: float = SHRINK,
                forms: tuple[str, ...] = FORMS) -> AffineFit:
    """Fit each of ``forms`` on the rows and keep the one with the lowest cross-validated error.

    Error: mean capped absolute log error (:data:`SHIFT_LOSS_CAP`) of the held-out rows, each form refitted
    (shrinkage and :func:`shift_bounds` included) without them; leave-one-out up to :data:`CV_FOLDS` rows,
    :data:`CV_FOLDS` folds beyond. One-standard-error rule: the simplest form (order of ``forms``) whose mean
    per-row error exceeds the lowest by at most the standard error of that difference wins, so a form with
    more constants must be clearly better on the few rows there are. Fewer than :data:`MIN_SELECT_ROWS` usable rows: the first
    form, not cross-validated. The chosen form is then refitted on all rows."""
    unknown = set(forms) - set(FORMS)
    if unknown or not forms:
        raise ValueError(f"forms must be among {FORMS}, got {forms}")
    m, p, f = _clean(measured, predicted, floor)
    n = len(m)
    if n < MIN_SELECT_ROWS or len(forms) == 1:
        ls, b, tilt = _fit(forms[0], m, p, f, shrink) if n else (0.0, 0.0, None)
        return AffineFit(forms[0], ls, b, n, tilt=tilt)
    folds = np.arange(n) % min(n, CV_FOLDS)
    k = int(folds.max()) + 1
    losses = {form: np.zeros(n) for form in forms}
    grid_total = grid_folds = None
    if "affine" in forms:  # the grid losses of each fold, summed once: a fold's fit is the total minus its own
        grid_folds = np.stack([_affine_loss_grid(m[folds == j], p[folds == j], f[folds == j]) for j in range(k)])
        grid_total = grid_folds.sum(axis=0)
    for j in range(k):
        test, train = folds == j, folds != j
        n_train = int(train.sum())
        for form in forms:
            tilt = None
            if form == "affine":
                ls, b = _affine_argmin(grid_total - grid_folds[j], n_train, shrink,  # type: ignore[operator,index]
                                       m[train], p[train], f[train])
            else:
                ls, b, tilt = _fit(form, m[train], p[train], f[train], shrink)
            losses[form][test] = _capped_loss(m[test], apply_form(p[test], f[test], ls, b, tilt))
    cv = {form: float(loss.mean()) for form, loss in losses.items()}
    lowest = min(forms, key=lambda fm: (cv[fm], forms.index(fm)))
    best = next(fm for fm in forms if _within_one_se(losses[fm] - losses[lowest]))
    tilt = None
    if best == "affine":
        ls, b = _affine_argmin(grid_total, n, shrink, m, p, f)  # type: ignore[arg-type]
        # named by what was fitted: a joint fit that kept one constant at the identity is that simpler form
        best = "scale" if b == 0.0 else "shift" if ls == 0.0 else best
    else:
        ls, b, tilt = _fit(best, m, p, f, shrink)
        best = "scale" if best == "tilt" and tilt is None else best  # a tilt without drift is the scale
    return AffineFit(best, ls, b, n, cv, tilt)


def _within_one_se(diff: np.ndarray) -> bool:
    """One-standard-error rule: the mean per-row loss difference to the lowest form is within its standard error."""
    mean = float(diff.mean())
    se = float(diff.std(ddof=1)) / np.sqrt(len(diff)) if len(diff) > 1 else 0.0
    return mean <= se + 1e-12


def choose_forms(measured: np.ndarray, predicted: np.ndarray, floor: np.ndarray, groups: pd.Series,
                 shrink: float = SHRINK, forms: tuple[str, ...] = FORMS) -> dict[str, AffineFit]:
    """:func:`choose_form` per group label."""
    m, p, f = (np.asarray(x, dtype=np.float64) for x in (measured, predicted, floor))
    codes, uniques = pd.factorize(groups.astype(str).to_numpy())
    return {str(g): choose_form(m[codes == i], p[codes == i], f[codes == i], shrink, forms)
            for i, g in enumerate(uniques)}
