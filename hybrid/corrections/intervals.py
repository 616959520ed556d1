"""Prediction intervals: split-conformal bands on the log residuals of held-out predictions.

A corrected prediction ``t`` gets the interval ``[t * exp(q_lo), t * exp(q_hi)]`` where ``q_lo`` / ``q_hi`` are
the ``(1 - coverage) / 2`` and ``(1 + coverage) / 2`` quantiles of ``log(measured / predicted)`` over rows the
model had *not* been fitted on, taken separately for

* the model that answered and the op family (``method:family``, e.g. ``kernel-xgb:gemm``,
  ``collective-sigmoid:collective``, ``alpha-beta:collective``, ``roofline:embedding``), and
* whether the row's device (and system, for collectives) was in the training data (``seen``: residuals of a
  random hold-out split) or not (``unseen``: residuals of leave-one-device-out fits), or was in it with only a
  few rows that the fit up-weighted (``few``: residuals of fits that keep that many rows of a held-out device,
  :meth:`HybridPredictor.few_row_splits <hybrid.corrections.predictor.HybridPredictor.few_row_splits>`;
  calibrated only when the training data has such a device).

So a GPU the model never measured gets the wider leave-one-device-out band, a measured one the narrow band, and
one measured with a handful of rows (``hybrid calibrate PUBLIC NEW``) the band in between that its own
situation calibrates.
Within the unseen residuals every held-out device carries the same total weight (a GPU with 30,000 rows does
not set the band alone). Quantiles use the conformal finite-sample level ``ceil((n + 1) q) / n`` with ``n`` the
number of residuals. ``unseen_units="devices"`` counts held-out *devices* instead for the unseen band (a new GPU
is one more device, not one more row: the strict device-level guarantee); with D devices the upper 90% level is
``ceil(0.9 (D + 1)) / D``, the largest residual for D <= 18, so with the few devices a calibration holds out that
band is the extreme residuals and over-covers (measured in ``experiments/interval_coverage``); not the default.

A method qualified in parentheses (``collective-sigmoid (all_gather curve)``: which curve of the model answered)
takes its model's bands where it has none of its own.

Where a key has no residuals the band falls back to the widest band of the same method on other families of
the same kind (kernels or collectives), then, for collectives, to the widest unseen-system band of another
collective model, then to the widest band calibrated for any model of the same kind; where there is none (a
model calibrated without any collective measurement, asked for a collective) the row gets no interval (NaN)
rather than one borrowed from unrelated errors. Every fall-back is
flagged ``calibrated=False`` in :meth:`IntervalCalibration.bounds` and ``interval_calibrated`` in
:meth:`HybridPredictor.predict <hybrid.corrections.predictor.HybridPredictor.predict>`. A device adapted with n rows
of a correction's families (``HybridPredictor.adapt``, strategy ``auto``) gets the ``adapted-<k>`` band of the
largest :data:`ADAPT_SHOTS` k <= n, calibrated by adapting each held-out device of the leave-one-device-out fits
with k rows and scoring its other rows (``HybridPredictor.adaptation_holdouts``); other strategies, fewer than 5
rows, or a model calibrated before these bands, the unseen band (conservative, see ``docs/corrections.md``). Training
devices whose few rows the fit up-weighted (``kernel_xgb.floored_devices``: ``HybridPredictor.devices_sparse``)
get the ``few`` band, or the unseen band where it was not calibrated (a model saved before it existed).

A GPU a correction never fitted whose die it fitted in another variant of the same power class
(``Catalog.same_die``: the same vendor, architecture and SM count, power limits within
:data:`SIBLING_MAX_TDP_RATIO`; e.g. an A100 SXM4 40GB when the SXM4 80GB was measured, an H200 from H100 SXM rows),
measured there in a dtype on the same units as the row's (``HybridPredictor.sibling_rows``), gets the ``sibling``
band: the leave-one-device-out residuals of held-out devices that had such a sibling in their fit (at least
:data:`MIN_SIBLING_DEVICES` of them; else the unseen band). The unseen band is then calibrated on the
held-out devices *without* a sibling (on all of them where none lacked one): on public kernel data the pooled band
covered 82% of held-out GPUs with a sibling and 74% of those without (``experiments/interval_coverage``), so one
band was too wide for the first and too narrow for the second. A calibration that could not calibrate the sibling
band (fewer than two of its held-out devices had a sibling) gives sibling rows the band halfway between its seen and
unseen bands (:data:`SIBLING_FALLBACK_WEIGHT`, flagged not calibrated) rather than the unseen one.

A collective row more than 4x beyond the message sizes of the curve measured at its layout, on a measured system
(``CollectiveSigmoid.edge_extrapolated``: the time anchored at the curve's nearest measured size), gets the ``edge``
band: the residuals of the edge sizes of measured layouts held out (``HybridPredictor.edge_splits``, split ``edge``;
scored where they lie more than 4x beyond the sizes left to their curve), every row the same weight, from at least
:data:`MIN_UNSEEN_COLLECTIVE_UNITS` held-out units (devices; device and system in ``hybrid calibrate``), stored
under the model's key; where not calibrated (fewer, or a model saved before it existed) such rows get the unseen
band, which is calibrated on systems never measured and over-covered them (91-98% inside at 3.9-4.3x wide,
``experiments/collectives_accuracy/edge_sizes.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hybrid.errors import InvalidInputError

#: Nominal coverage of the intervals.
DEFAULT_COVERAGE = 0.8
#: Fewest residuals for a key's own band (fewer: the fall-back chain).
MIN_RESIDUALS = 10
#: What ``n`` of the conformal level ``ceil((n + 1) q) / n`` counts for the unseen band: "rows" (default) or
#: "devices" (the held-out devices: the exchangeable units of a leave-one-device-out band). "devices" is the
#: strict device-level guarantee but, with the <= 8 devices a calibration holds out, it is the extreme residuals
#: (level 1 for D <= 18 at 80%): held-out GPUs were then 98-100% covered instead of 80%
#: (``experiments/interval_coverage/results.md``), so the default stays "rows".
UNSEEN_UNITS = ("rows", "devices")

#: Prediction-frame splits whose rows count as seen / unseen / few-row / adapted devices.
SEEN_SPLITS = ("random",)
UNSEEN_SPLITS = ("lodo",)
FEW_SPLITS = ("few",)
ADAPTED_SPLITS = ("adapted",)
#: Prediction-frame splits whose rows calibrate the band of collectives far beyond their curve's measured sizes.
EDGE_SPLITS = ("edge",)
#: Rows per correction with which held-out devices are adapted (``HybridPredictor.adapt``, strategy ``auto``) to
#: calibrate the bands of adapted devices: a device adapted with n rows of a correction's families gets the band
#: of the largest of these <= n (fewer than the first: the unseen band).
ADAPT_SHOTS = (5, 10, 20, 50)
#: Band codes (``seen`` arguments below take these, or booleans: True = seen, False = unseen); ``ADAPTED`` is the
#: code of the first adapted band (``ADAPTED + i`` for ``ADAPT_SHOTS[i]``); ``SIBLING`` the last one (a device never
#: measured whose die was measured in another variant, ``Catalog.same_die``).
UNSEEN, SEEN, FEW, ADAPTED = 0, 1, 2, 3
SIBLING = ADAPTED + len(ADAPT_SHOTS)
#: Code of a collective row more than ``CollectiveSigmoid.SIZE_MARGIN`` x beyond the sizes its curve measured at its
#: layout (``CollectiveSigmoid.edge_extrapolated``: anchored at the curve's nearest measured size), calibrated on the
#: held-out edge sizes of measured layouts (``HybridPredictor.edge_splits``); not calibrated: the unseen band.
EDGE = SIBLING + 1
#: Band name per code.
BAND_NAMES = ("unseen", "seen", "few", *(f"adapted-{k}" for k in ADAPT_SHOTS), "sibling", "edge")
#: Code and name (``interval_band`` of predictions) of a collective row whose unseen band the calibration could not
#: calibrate and which got :data:`DEFAULT_COLLECTIVE_UNSEEN_BAND` instead; only in :meth:`IntervalCalibration.applied_bands`
#: (never a band calibrated from residuals). :data:`APPLIED_BAND_NAMES`: the names of the codes it returns.
UNSEEN_DEFAULT = EDGE + 1
DEFAULT_BAND_NAME = "unseen (default)"
APPLIED_BAND_NAMES = (*BAND_NAMES, DEFAULT_BAND_NAME)
#: Fewest held-out devices whose residuals calibrate the sibling band (fewer: such devices get the unseen band; one
#: device's errors are one draw, not a distribution of chips).
MIN_SIBLING_DEVICES = 2
#: Fewest distinct held-out units (device and system; in ``hybrid calibrate`` a held-out device of the
#: leave-one-device-out fits) whose residuals calibrate the unseen band of a model of :data:`DEFAULT_BAND_METHODS` (fewer: the band is not
#: calibrated from the data and such rows fall back to :data:`DEFAULT_COLLECTIVE_UNSEEN_BAND`). One held-out system
#: is one draw of "how wrong is a system or layout never measured", not a distribution of them.
MIN_UNSEEN_COLLECTIVE_UNITS = 2
#: Log-residual band (10% / 90% quantiles of ``log(measured / predicted)``) of collective rows at a system or a
#: layout never measured, for calibrations that cannot calibrate that band themselves (a user's single-system logs:
#: no held-out system, or fewer than :data:`MIN_UNSEEN_COLLECTIVE_UNITS`). From public data:
#: ``experiments/interval_coverage/collective_default_band.py`` (output ``collective_default_band.md``): nccl-tests
#: and XLA collectives, leave one system out (transfer model) pooled with leave one node count out (a system's other
#: node counts only), every held-out unit the same weight. Applied as the band ``unseen (default)``, never narrower
#: than the key's own seen band, flagged not calibrated.
DEFAULT_COLLECTIVE_UNSEEN_BAND = (-0.491, 0.865)
#: The collective models whose unseen rows take :data:`DEFAULT_COLLECTIVE_UNSEEN_BAND` (what the experiment scored:
#: the per-system curves with their layout model and the transfer model); alpha-beta estimates keep the fall-back
#: chain, and a calibration without any collective band gives collectives no interval at all.
DEFAULT_BAND_METHODS = ("collective-sigmoid", "collective-transfer")
#: Largest ratio of power limits (TDP) between a GPU and another variant of its die for that variant to count as
#: its sibling: a chip's sustained clock under load follows its power limit, so the PCIe cards of one power class
#: (A100 PCIe 250 / 300 W, V100 PCIe 250 W and SXM2 300 W) are siblings, a 400 W SXM4 A100 is not one of them, nor
#: a 1000 W MI325X one of the 750 W MI300X. A judgement, not fitted.
SIBLING_MAX_TDP_RATIO = 1.25
#: Where a calibration could not calibrate the sibling band (fewer than :data:`MIN_SIBLING_DEVICES` held-out devices
#: had a sibling in their fit: e.g. one fitted on an A100 and an H100 only), a sibling row's band lies this far from
#: its key's seen band towards its unseen band, endpoint by endpoint (0: a measured GPU, 1: one never measured), and
#: is flagged not calibrated. Measured on public kernel data (every source, 19 GPUs; ``experiments/interval_coverage``):
#: the sibling band's width over that of the halfway band is 0.97 (GEMM), 0.91 (norms), 0.88 (softmax) and 0.44
#: (elementwise); before it, such rows took the unseen band, which the held-out siblings over-filled.
SIBLING_FALLBACK_WEIGHT = 0.5


def fitted_sibling(catalog: Any, device: str, dtype: str, fitted: Mapping[str, Iterable[str]]) -> str:
    """The first GPU in ``fitted`` (device -> dtypes it was fitted in) that is another product of ``device``'s die
    and power class (``catalog.same_die(device,`` :data:`SIBLING_MAX_TDP_RATIO` ``)``) and was fitted in a dtype
    that runs on the same units as ``dtype`` on that chip (the same compute peak: fp16 and bf16 on an A100 are one
    path, fp32 another); "" when none is, or the catalog knows neither the device nor the dtype's units. What makes
    a row a ``sibling`` row of the intervals and what the GEMM model's sibling rule prices from."""
    from hybrid.errors import HybridError

    try:
        dies = catalog.same_die(device, SIBLING_MAX_TDP_RATIO)
    except HybridError:  # a device the catalog does not know: no sibling known either
        return ""
    for sib in dies:
        if sib not in fitted:
            continue
        try:
            chip = catalog.device(sib)
            rate = chip.compute_peak(dtype)
            if any(np.isclose(chip.compute_peak(t), rate, rtol=0.01) for t in fitted[sib]):
                return sib
        except HybridError:  # a dtype the chip has no units for
            continue
    return ""


def adapted_code(rows: np.ndarray | int) -> np.ndarray:
    """Band code of devices adapted with ``rows`` rows of a correction's families: ``ADAPTED + i`` for the largest
    ``ADAPT_SHOTS[i] <= rows`` (conservative: a band calibrated on no more rows than the device had), ``UNSEEN``
    below ``ADAPT_SHOTS[0]``."""
    i = np.searchsorted(np.asarray(ADAPT_SHOTS), np.asarray(rows, dtype=np.float64), side="right") - 1
    return np.where(i >= 0, ADAPTED + i, UNSEEN).astype(np.int64)


def weighted_quantile(values: np.ndarray, q: float, weights: np.ndarray | None = None,
                      n: int | None = None) -> float:
    """Quantile ``q`` of ``values`` (with conformal finite-sample correction ``ceil((n + 1) q) / n`` towards the
    tail) under ``weights`` (normalised; default equal). ``n``: the number of exchangeable units the sample
    holds (default: the number of values); with weights that give each of D groups the same total weight (the
    devices of a leave-one-device-out band) the units are the D groups, not the rows."""
    v = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(v)
    v = v[ok]
    if len(v) == 0:
        return float("nan")
    w = np.ones(len(v)) if weights is None else np.asarray(weights, dtype=np.float64)[ok]
    n = len(v) if n is None else max(int(n), 1)
    level = min(1.0, np.ceil((n + 1) * q) / n) if q >= 0.5 else max(0.0, np.floor((n + 1) * q) / n)
    order = np.argsort(v)
    v, w = v[order], w[order]
    cum = (np.cumsum(w) - 0.5 * w) / w.sum()
    return float(np.interp(level, cum, v))


@dataclass
class IntervalCalibration:
    """Conformal log-residual quantiles per ``method:family`` key and band (:data:`BAND_NAMES`: seen, unseen,
    few-row and adapted devices)."""

    coverage: float = DEFAULT_COVERAGE
    #: key -> {"seen": [lo, hi], "unseen": [lo, hi], "n_seen": int, "n_unseen": int, "devices_unseen": int} and,
    #: where calibrated, the same for "few" and "adapted-<k>" (:data:`BAND_NAMES`; a band is absent when it had
    #: fewer than MIN_RESIDUALS rows)
    bands: dict[str, dict[str, Any]] = field(default_factory=dict)

    # ------------------------------------------------------------------ calibration
    @classmethod
    def from_residuals(cls, log_residual: np.ndarray, key: np.ndarray, seen: np.ndarray, device: np.ndarray,
                       coverage: float = DEFAULT_COVERAGE, unseen_units: str = "rows",
                       held_out: np.ndarray | None = None) -> IntervalCalibration:
        """Bands from held-out log residuals ``log(measured / predicted)`` with their key, which band the row
        calibrates (``seen``: a band code per row, an index into :data:`BAND_NAMES`: :data:`SEEN`, :data:`UNSEEN`,
        :data:`FEW` or :func:`adapted_code`; or a boolean "device was in the fit"), and the device (rows of every
        band but the seen one are weighted 1 / rows of their device). ``unseen_units``: what the conformal ``n`` of
        the unseen band counts (:data:`UNSEEN_UNITS`). ``held_out``: the held-out unit per row (default: the
        device; ``from_prediction_frames`` gives device and system): a collective key's unseen band is calibrated only
        from at least :data:`MIN_UNSEEN_COLLECTIVE_UNITS` of them (``units_unseen``; else its rows get
        :data:`DEFAULT_COLLECTIVE_UNSEEN_BAND`)."""
        if not 0 < coverage < 1:
            raise InvalidInputError(f"coverage must be in (0, 1), got {coverage}")
        if unseen_units not in UNSEEN_UNITS:
            raise InvalidInputError(f"unseen_units must be one of {UNSEEN_UNITS}, got {unseen_units!r}")
        band = np.asarray(seen).astype(np.int64)
        if len(band) and not np.isin(band, np.arange(len(BAND_NAMES))).all():
            raise InvalidInputError(f"band codes must be 0 to {len(BAND_NAMES) - 1} ({', '.join(BAND_NAMES)})")
        key = np.asarray(key, dtype=str).astype(object)
        if (edge := band == EDGE).any():  # "collective-sigmoid (edge-anchored):collective": its model's band
            key[edge] = [_base_key(str(k)) for k in key[edge]]
        frame = pd.DataFrame({"r": np.asarray(log_residual, dtype=np.float64), "key": key.astype(str),
                              "band": band, "device": np.asarray(device, dtype=str),
                              "unit": np.asarray(device if held_out is None else held_out, dtype=str)})
        frame = frame[np.isfinite(frame["r"])]
        lo_q, hi_q = (1 - coverage) / 2, (1 + coverage) / 2
        bands: dict[str, dict[str, Any]] = {}
        for k, g in frame.groupby("key", sort=True):
            entry: dict[str, Any] = {}
            for code, name in enumerate(BAND_NAMES):
                sub = g[g["band"] == code]
                if code == UNSEEN and len(sub) < MIN_RESIDUALS:
                    # every held-out device had a sibling in its fit: the unseen band from all of them (narrower
                    # than a band of devices without one would be; nothing better is measured)
                    sub = g[g["band"].isin([UNSEEN, SIBLING])]
                if code in (SEEN, UNSEEN) or len(sub):  # (no n_few etc. in calibrations without those bands)
                    entry[f"n_{name}"] = int(len(sub))
                if len(sub) < MIN_RESIDUALS:
                    continue
                if code == SIBLING and sub["device"].nunique() < MIN_SIBLING_DEVICES:
                    continue
                if code == EDGE:  # one system's edges are one draw: at least as many systems as an unseen band
                    entry["units_edge"] = int(sub["unit"].nunique())
                    if entry["units_edge"] < MIN_UNSEEN_COLLECTIVE_UNITS:
                        continue
                if code == UNSEEN and _takes_default(str(k)):
                    # a collective's band for systems / layouts never measured, from one held-out system: one draw,
                    # not a distribution (the rows get DEFAULT_COLLECTIVE_UNSEEN_BAND instead)
                    entry["units_unseen"] = int(sub["unit"].nunique())
                    if entry["units_unseen"] < MIN_UNSEEN_COLLECTIVE_UNITS:
                        entry["devices_unseen"] = int(sub["device"].nunique())
                        continue
                w, units = None, None
                if code not in (SEEN, EDGE):  # every held-out device weighs the same (edge sizes: every row)
                    w = 1.0 / sub.groupby("device")["r"].transform("size").to_numpy(dtype=np.float64)
                    entry[f"devices_{name}"] = int(sub["device"].nunique())
                    units = entry[f"devices_{name}"] if unseen_units == "devices" and code == UNSEEN else None
                entry[name] = [weighted_quantile(sub["r"].to_numpy(), lo_q, w, units),
                               weighted_quantile(sub["r"].to_numpy(), hi_q, w, units)]
            bands[str(k)] = entry
        return cls(coverage, bands)

    @classmethod
    def from_prediction_frames(cls, frame: pd.DataFrame, coverage: float = DEFAULT_COVERAGE) -> IntervalCalibration:
        """Bands from a calibration run's prediction frame (:mod:`hybrid.tracking.evaluation`): rows of the
        ``random`` split are seen devices, rows of the ``lodo`` split unseen ones (sibling ones where the frame's
        ``sibling`` column is true: ``HybridPredictor.sibling_rows`` of the fold's predictor), rows of the ``few``
        split few-row ones, rows of the ``adapted`` split (column ``shots``) adapted ones."""
        use = frame[frame["split"].isin(SEEN_SPLITS + UNSEEN_SPLITS + FEW_SPLITS + ADAPTED_SPLITS + EDGE_SPLITS)]
        if len(use) == 0:
            return cls(coverage, {})
        r = np.log(use["measured_us"].to_numpy(np.float64)) - np.log(use["predicted_us"].to_numpy(np.float64))
        key = interval_keys(use["method"].to_numpy(), use["family"].to_numpy())
        split = use["split"].to_numpy()
        band = np.where(np.isin(split, SEEN_SPLITS), SEEN, np.where(np.isin(split, FEW_SPLITS), FEW, UNSEEN))
        band = np.where(np.isin(split, EDGE_SPLITS), EDGE, band)
        if "sibling" in use.columns:
            sibling = use["sibling"].astype("boolean").fillna(False).to_numpy(dtype=bool)
            band = np.where(np.isin(split, UNSEEN_SPLITS) & sibling, SIBLING, band)
        if np.isin(split, ADAPTED_SPLITS).any():
            shots = use["shots"].to_numpy(np.float64) if "shots" in use.columns else np.zeros(len(use))
            band = np.where(np.isin(split, ADAPTED_SPLITS), adapted_code(np.nan_to_num(shots)), band)
        device = use["device"].astype(str).to_numpy()
        held_out = device
        if "system" in use.columns:  # collectives: a held-out (device, system) is one unit of the unseen band
            held_out = (use["device"].astype(str) + "|" + use["system"].astype(str)).to_numpy()
        return cls.from_residuals(r, key, band, device, coverage, held_out=held_out)

    # ------------------------------------------------------------------ prediction
    def _band(self, key: str, band: int) -> tuple[float, float, bool]:
        key = self._resolve(key)
        entry = self.bands.get(key, {})
        if band == SIBLING and self.sibling_fallback(key):
            # a sibling band this calibration could not calibrate: between the seen and the unseen band
            w = SIBLING_FALLBACK_WEIGHT
            return (float((1 - w) * entry["seen"][0] + w * entry["unseen"][0]),
                    float((1 - w) * entry["seen"][1] + w * entry["unseen"][1]), False)
        if band >= FEW:  # few-row or adapted devices
            if BAND_NAMES[band] in entry:
                return float(entry[BAND_NAMES[band]][0]), float(entry[BAND_NAMES[band]][1]), True
            band = UNSEEN  # not calibrated for such a device: the conservative unseen band
        name = BAND_NAMES[band]
        kind = _is_collective(key)
        if band == UNSEEN and self._defaultable(key):
            # a collective at a system or layout never measured, whose unseen band the data could not calibrate:
            # another collective model's calibrated one, else the public default; never narrower than the seen band
            lo, hi = self._collective_unseen(key)
            return lo, hi, False
        if name in entry:
            return float(entry[name][0]), float(entry[name][1]), True
        if band == SEEN and "unseen" in entry:  # a seen device with no random-split residuals: the wider band
            return float(entry["unseen"][0]), float(entry["unseen"][1]), True
        method = key.partition(":")[0]
        # borrowed bands stay within one kind of op: a collective never takes a kernel's band (their errors have
        # nothing in common: a kernel model's +-30% says nothing about an alpha-beta estimate of an unmeasured
        # fabric) and a kernel never takes a collective's
        alike = {k: e for k, e in self.bands.items() if _is_collective(k) == kind}
        same = [e[name] for k, e in alike.items() if k.partition(":")[0] == method and name in e]
        if same:  # the same model on another family of the same kind
            return min(b[0] for b in same), max(b[1] for b in same), False
        lent = self._lent_collective_unseen() if kind else None
        if lent is not None:  # another collective model's band for systems it never measured (the widest such band)
            return lent[0], lent[1], False
        # the widest band calibrated for any model of the same kind (a model fitted on one device or without its
        # leave-one-out fits, asked about another: not calibrated for that case, flagged)
        every = [e[n] for e in alike.values() for n in BAND_NAMES if n in e]
        if every:
            return min(b[0] for b in every), max(b[1] for b in every), False
        return np.nan, np.nan, False  # nothing calibrated for this kind of prediction: no interval

    def _collective_unseen(self, key: str) -> tuple[float, float]:
        """Band of a collective row at a system or layout never measured whose key has no calibrated unseen band
        (:func:`_unseen_calibrated`): the widest calibrated unseen band of another collective model, else
        :data:`DEFAULT_COLLECTIVE_UNSEEN_BAND`; widened to cover the key's seen band (the widest collective seen band
        where the key has none)."""
        lo, hi = self._lent_collective_unseen() or DEFAULT_COLLECTIVE_UNSEEN_BAND
        entry = self.bands.get(self._resolve(key), {})
        seen = [entry["seen"]] if "seen" in entry else \
            [e["seen"] for k, e in self.bands.items() if _is_collective(k) and "seen" in e]
        if seen:
            lo, hi = min(lo, *(b[0] for b in seen)), max(hi, *(b[1] for b in seen))
        return float(lo), float(hi)

    def _defaultable(self, key: str) -> bool:
        """Whether unseen rows of ``key`` take :meth:`_collective_unseen`: a key of :data:`DEFAULT_BAND_METHODS`
        without a calibrated unseen band (:func:`_unseen_calibrated`) in a calibration with some collective band."""
        key = self._resolve(key)
        return (_takes_default(key) and not _unseen_calibrated(key, self.bands.get(key, {}))
                and any(_is_collective(k) for k in self.bands))

    def default_unseen(self, key: str) -> bool:
        """Whether unseen rows of ``key`` get :data:`DEFAULT_COLLECTIVE_UNSEEN_BAND` (:meth:`_defaultable`, and no
        other collective model has a calibrated unseen band to lend)."""
        return self._defaultable(key) and self._lent_collective_unseen() is None

    def _lent_collective_unseen(self) -> tuple[float, float] | None:
        """The widest unseen band calibrated (:func:`_unseen_calibrated`) for any collective model, which a collective
        key without one of its own borrows; None when there is none."""
        other = [e["unseen"] for k, e in self.bands.items() if _is_collective(k) and _unseen_calibrated(k, e)]
        return (float(min(b[0] for b in other)), float(max(b[1] for b in other))) if other else None

    def _resolve(self, key: str) -> str:
        """``key``, or its model's key (:func:`_base_key`) where a qualified method (``collective-sigmoid (all_gather
        curve)``) has no bands of its own: it takes its model's bands, calibrated as such (no fall-back)."""
        if key in self.bands:
            return key
        base = _base_key(key)
        return base if base in self.bands else key

    def bounds(self, key: np.ndarray, seen: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(log low factor, log high factor, calibrated) per row, vectorised over distinct (key, band); ``seen``
        as in :meth:`from_residuals` (band codes or booleans)."""
        key = np.asarray(key, dtype=object)
        band = np.asarray(seen).astype(np.int64)
        # (numpy drops trailing NUL characters from strings, so the band is a printable suffix)
        codes, uniques = pd.factorize(pd.Series(key.astype(str)) + "|" + pd.Series(band.astype(str)))
        table = np.array([self._band(u.rsplit("|", 1)[0], int(u.rsplit("|", 1)[1])) for u in uniques],
                         dtype=np.float64).reshape(-1, 3)
        rows = table[codes]
        return rows[:, 0], rows[:, 1], rows[:, 2].astype(bool)

    def row_bounds(self, method: np.ndarray, family: pd.Series | np.ndarray, seen: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`bounds` for rows given as ``method`` and ``family`` columns: keys are built once per
        distinct (method, family, seen) combination, not per row."""
        # NaN is a value of its own here (code -1 would decode to another key)
        m_codes, m_uniques = pd.factorize(np.asarray(method, dtype=object), use_na_sentinel=False)
        return self.coded_bounds(m_codes, list(m_uniques), family, seen)

    def coded_bounds(self, method_codes: np.ndarray, methods: list[Any], family: pd.Series | np.ndarray,
                     seen: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`row_bounds` with the method given as codes into ``methods`` (every code >= 0)."""
        keys, si, inverse = _distinct_keys(method_codes, methods, family, seen)
        lo, hi, ok = self.bounds(keys, si)
        return lo[inverse], hi[inverse], ok[inverse]

    def applied_bands(self, method_codes: np.ndarray, methods: list[Any], family: pd.Series | np.ndarray,
                      seen: np.ndarray) -> np.ndarray:
        """The band each row's interval actually comes from (codes into :data:`APPLIED_BAND_NAMES`, arguments as
        :meth:`coded_bounds`): a few-row, adapted or sibling band that was not calibrated for the row's key is the
        unseen band it falls back to (a sibling row whose key has a seen and an unseen band keeps the name: it gets
        the band between them, :meth:`sibling_fallback`); an unseen collective row given the public default band
        (:meth:`default_unseen`) is :data:`UNSEEN_DEFAULT`."""
        keys, si, inverse = _distinct_keys(method_codes, methods, family, seen)
        used = np.array([b if b < FEW or BAND_NAMES[b] in self.bands.get(self._resolve(str(k)), {})
                         or (b == SIBLING and self.sibling_fallback(str(k))) else UNSEEN
                         for k, b in zip(keys, si, strict=True)], dtype=np.int64)
        default = np.array([u == UNSEEN and self.default_unseen(str(k)) for k, u in zip(keys, used, strict=True)],
                           dtype=bool)
        return np.where(default, UNSEEN_DEFAULT, used)[inverse]

    def sibling_fallback(self, key: str) -> bool:
        """Whether a sibling row of ``key`` gets the band between its seen and unseen bands
        (:data:`SIBLING_FALLBACK_WEIGHT`, flagged not calibrated): the key has both but no sibling band."""
        entry = self.bands.get(self._resolve(key), {})
        return "sibling" not in entry and "seen" in entry and "unseen" in entry

    def one_device_band(self, key: str, band: str) -> bool:
        """Whether ``band`` (a name of :data:`BAND_NAMES` other than ``seen``: unseen, few, adapted-k), as rows of
        ``key`` (``method:family``) get it, was calibrated on the residuals of one held-out device
        (``devices_<band>`` 1; a collective key's unseen band excepted, which takes
        :data:`DEFAULT_COLLECTIVE_UNSEEN_BAND` instead): that device's errors, bias included, not a spread of devices,
        so another device need not fall inside it as often (``hybrid evaluate`` says so)."""
        if band == "seen" or (band == "unseen" and _is_collective(key)):
            return False
        entry = self.bands.get(self._resolve(key), {})
        return band in entry and entry.get(f"devices_{band}") == 1

    def marks_siblings(self) -> bool:
        """Whether any key gives sibling rows a band of their own (calibrated, or :meth:`sibling_fallback`)."""
        return any("sibling" in e or ("seen" in e and "unseen" in e) for e in self.bands.values())

    # ------------------------------------------------------------------ persistence
    def to_json(self) -> dict[str, Any]:
        return {"coverage": self.coverage, "bands": self.bands}

    @classmethod
    def from_json(cls, payload: dict[str, Any] | None) -> IntervalCalibration | None:
        if not payload:
            return None
        return cls(float(payload.get("coverage", DEFAULT_COVERAGE)), dict(payload.get("bands", {})))


def _distinct_keys(method_codes: np.ndarray, methods: list[Any], family: pd.Series | np.ndarray, seen: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(``method:family`` key, band code) per distinct combination of the rows and the row -> combination index."""
    m_codes = np.asarray(method_codes, dtype=np.int64)
    f_codes, f_uniques = pd.factorize(family, use_na_sentinel=False)
    nf = max(len(f_uniques), 1)
    nb = len(BAND_NAMES)
    combo = (m_codes * nf + f_codes) * nb + np.asarray(seen).astype(np.int64)
    uniq, inverse = np.unique(combo, return_inverse=True)
    mi, rest = np.divmod(uniq, nb * nf)
    fi, si = np.divmod(rest, nb)
    keys = np.array([f"{methods[a]}:{f_uniques[b]}" for a, b in zip(mi, fi, strict=True)], dtype=object)
    return keys, si, inverse.reshape(-1)


# ------------------------------------------------------------------------------------------ calibration splits
#: Fewest rows for the random hold-out split (below it, only leave-one-device-out residuals are used).
MIN_ROWS_FOR_SPLIT = 10


#: What the random hold-out of collective rows holds out together (:func:`stratified_split`): every measurement of
#: one message size at one layout of one system (in-place / out-of-place twins, repeated logs and runs on other
#: nodes of that point), so no held-out point has a copy in the fit; the smallest and largest size of each layout
#: and setting (``algorithm``: each has a curve of its own) stay in the fit (a held-out point is interpolated along
#: its curve, as a seen row is). Not whole layouts (system, op, ranks, nodes):
#: a layout held out is one the fit never measured, which the predictor prices by extrapolation and gives the
#: unseen band (``CollectiveSigmoid.unmeasured_layouts``), so its rows would calibrate the seen band with unseen
#: errors (and a single-node calibration has only two layouts per collective to spare); nor source files: one log
#: usually holds a whole layout, and the twins of a point in another node's log stay in the fit. Columns a table
#: lacks are left out of the key. Logged by ``hybrid calibrate`` as the run's ``split.collective_groups`` param.
COLLECTIVE_SPLIT_GROUPS = ("system", "op", "dtype", "n_ranks", "n_nodes", "size_bytes")


def stratified_split(table: pd.DataFrame, test_fraction: float, seed: int,
                     collective_groups: tuple[str, ...] | None = COLLECTIVE_SPLIT_GROUPS
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Row positions (train, test): ``test_fraction`` of every (device, op) group with at least 5 rows.

    Collective rows (with ``collective_groups``, default :data:`COLLECTIVE_SPLIT_GROUPS`) are held out by group, not
    by row: ``test_fraction`` of the distinct ``collective_groups`` values of each (device, op) group with at least 5
    rows and 2 such values, but never the smallest or largest ``size_bytes`` of a layout (and setting), every row of a chosen value
    held out (drawn from a random stream of their own, so kernel rows
    are split as before). ``None``: every row on its own (the split before 2026-12).

    The random hold-out of both ``hybrid calibrate`` (:mod:`hybrid.tracking.calibrate`) and
    :meth:`HybridPredictor.calibrate_intervals <hybrid.corrections.predictor.HybridPredictor.calibrate_intervals>`,
    so the two calibrate the seen-device band on the same rows."""
    rng = np.random.default_rng(seed)
    grouped = collective_groups is not None and "op" in table.columns and len(table) > 0
    is_coll = np.zeros(len(table), dtype=bool)
    if grouped:
        from hybrid.ops.families import family_array

        is_coll = np.asarray(family_array(table["op"])) == "collective"
        cols = [c for c in collective_groups if c in table.columns]  # type: ignore[union-attr]
        group_codes = pd.MultiIndex.from_frame(table[cols].astype(str)).factorize()[0] if cols \
            else np.arange(len(table))
        # the smallest and largest message size of each layout stay in the fit: a held-out point lies between
        # measured ones, as a seen row does (sizes beyond the measured range are ``CollectiveSigmoid.outside_sizes``)
        edge = np.zeros(len(table), dtype=bool)
        if "size_bytes" in cols and len(cols) > 1:
            # plain float64 (a nullable Int64 column's <NA> would make the comparisons <NA>: kernel rows have none)
            size = pd.to_numeric(table["size_bytes"], errors="coerce").astype(np.float64)
            # per curve: a layout's settings (``algorithm``) have curves of their own, each with its own edges
            # (beyond them ``CollectiveSigmoid`` anchors the time at the edge: no interpolation along a curve)
            setting = ([table["algorithm"].astype("string").fillna("").astype(str)] if "algorithm" in table.columns
                       else [])
            by = size.groupby([table[c].astype(str) for c in cols if c != "size_bytes"] + setting)
            edge = ((size == by.transform("min")) | (size == by.transform("max"))).to_numpy(dtype=bool)
        group_codes = np.where(edge, -1, group_codes)
        rng_coll = np.random.default_rng([seed, 1])
    test: list[np.ndarray] = []
    for _, idx in sorted(table.groupby(["device", "op"], sort=True, dropna=False).indices.items(),
                         key=lambda kv: str(kv[0])):
        if len(idx) < 5:
            continue
        k = max(1, int(round(test_fraction * len(idx))))
        rows = rng.choice(idx, size=k, replace=False)  # (drawn for collectives too: the kernels' stream as before)
        if grouped and is_coll[idx].all():
            groups = np.unique(group_codes[idx][group_codes[idx] >= 0])
            if len(groups) < 2:
                continue
            k = max(1, int(round(test_fraction * len(groups))))
            held = rng_coll.choice(groups, size=k, replace=False)
            test.append(idx[np.isin(group_codes[idx], held)])
            continue
        test.append(rows)
    test_idx = np.sort(np.concatenate(test)) if test else np.array([], dtype=np.int64)
    train_mask = np.ones(len(table), dtype=bool)
    train_mask[test_idx] = False
    return np.flatnonzero(train_mask), test_idx


def keep_few_rows(groups: list[tuple[np.ndarray, int]], n: int, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held out) row masks over ``n`` rows: of each ``(row positions, k)`` group with at least
    ``k + MIN_RESIDUALS`` rows, k random rows kept (in the fit, or to adapt with) and the others held out to score;
    smaller groups are left out of both. What the few-row and adapted bands are calibrated on
    (``HybridPredictor.few_row_splits``, ``HybridPredictor.adaptation_holdouts``)."""
    kept, held = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    for rows, k in groups:
        if len(rows) < k + MIN_RESIDUALS:
            continue
        chosen = rng.choice(rows, size=k, replace=False)
        kept[chosen] = True
        held[np.setdiff1d(rows, chosen)] = True
    return kept, held


def default_lodo_devices(devices: pd.Series, kinds: dict[str, str], max_devices: int,
                         collective: np.ndarray | None = None) -> list[str]:
    """Devices held out one at a time (most rows first): only a device whose kind (``kinds[device]``: GPU /
    CPU) keeps another device in the fit (a CPU predicted from GPU-only data measures nothing a user would do),
    at most ``max_devices``. With ``collective`` (a mask of the collective rows) the devices are chosen per kind
    of op: at most ``max_devices`` by their kernel rows, then at most ``max_devices`` more by their collective
    rows (a device already chosen is held out once), so that adding collective measurements to a calibration
    never pushes a kernel device out of the hold-outs that calibrate the kernels' unseen bands (and the
    reverse). Shared by ``hybrid calibrate`` and ``calibrate_intervals``."""
    if collective is not None:
        mask = np.asarray(collective, dtype=bool)
        picks: list[str] = []
        for rows in (~mask, mask):
            if rows.any():
                picks += [d for d in default_lodo_devices(devices[rows], kinds, max_devices) if d not in picks]
        return picks
    counts = devices.astype(str).value_counts()
    if len(counts) < 2:
        return []
    per_kind = pd.Series({d: kinds[d] for d in counts.index}).value_counts()
    return [str(d) for d in counts.index if per_kind[kinds[d]] >= 2][:max_devices]


def interval_keys(method: np.ndarray, family: np.ndarray) -> np.ndarray:
    """``method:family`` per row."""
    return (pd.Series(np.asarray(method, dtype=str)) + ":" + pd.Series(np.asarray(family, dtype=str))).to_numpy(dtype=object)


def _base_key(key: str) -> str:
    """The ``method:family`` key of a qualified method's model: ``collective-sigmoid (all_gather curve):collective``
    -> ``collective-sigmoid:collective`` (a method named with a qualifier in parentheses says which curve of the
    model answered; it takes the model's bands where it has none of its own)."""
    method, _, family = key.partition(":")
    return f"{method.split(' (', 1)[0]}:{family}"


def _is_collective(key: str) -> bool:
    """Whether a ``method:family`` band key is a collective's (the kinds bands are never borrowed across)."""
    return key.partition(":")[2] == "collective"


def _takes_default(key: str) -> bool:
    """Whether ``key`` is a collective key of :data:`DEFAULT_BAND_METHODS` (a qualified method by its model): the
    keys whose unseen band needs :data:`MIN_UNSEEN_COLLECTIVE_UNITS` held-out units and else takes the default."""
    method, _, family = key.partition(":")
    return family == "collective" and method.split(" (", 1)[0] in DEFAULT_BAND_METHODS


def _unseen_calibrated(key: str, entry: Mapping[str, Any]) -> bool:
    """Whether ``entry`` (the bands of ``key``) has an unseen band calibrated on enough held-out units: for a
    collective key at least :data:`MIN_UNSEEN_COLLECTIVE_UNITS` (a model saved before that count was recorded: its
    held-out devices)."""
    if "unseen" not in entry:
        return False
    if not _takes_default(key):
        return True
    units = entry.get("units_unseen", entry.get("devices_unseen", MIN_UNSEEN_COLLECTIVE_UNITS))
    return int(units) >= MIN_UNSEEN_COLLECTIVE_UNITS


def coverage_pct(measured: np.ndarray, low: np.ndarray, high: np.ndarray) -> float:
    """Share (%) of rows whose measurement lies inside ``[low, high]`` (rows without an interval ignored)."""
    m, lo, hi = (np.asarray(a, dtype=np.float64) for a in (measured, low, high))
    ok = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(m)
    if not ok.any():
        return float("nan")
    return float(np.mean((m[ok] >= lo[ok]) & (m[ok] <= hi[ok])) * 100.0)
