"""The hybrid predictor: roofline / alpha-beta baseline plus learned corrections, dispatched by op family.

>>> pred = HybridPredictor().fit(measurements)            # doctest: +SKIP
>>> pred.predict(new_ops)[["time_us", "method"]]          # doctest: +SKIP

Every row gets the analytical estimate; rows of a family whose correction is fitted get the correction's
prediction instead (per family, vectorised). ``method`` says which was used: ``kernel-xgb``,
``embedding-xgb``, ``collective-sigmoid`` (curves of a measured system), ``collective-transfer`` (the
cross-system model, for a system or collective never measured), ``alpha-beta`` (a collective no model covers)
or ``roofline``.
Saved predictors are a directory: ``manifest.json`` (versions, feature names, training-data digest,
few-shot offsets), ``catalog.json`` (the devices and systems it was fitted on) and one sub-directory per
correction in its native format. No pickles.
"""

from __future__ import annotations

import copy
import hashlib
import numbers
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid.atomic import atomic_directory
from hybrid.corrections import adapt as adapt_mod
from hybrid.corrections import bounds as bounds_mod
from hybrid.corrections.base import (
    Correction,
    device_dtype_pairs,
    family_mask,
    isin_fast,
    read_json,
    write_json,
)
from hybrid.corrections.collective_sigmoid import CollectiveSigmoid, _group_key
from hybrid.corrections.embedding_xgb import EmbeddingXGB
from hybrid.corrections.intervals import (
    ADAPT_SHOTS,
    APPLIED_BAND_NAMES,
    BAND_NAMES,
    DEFAULT_COVERAGE,
    EDGE,
    FEW,
    MIN_ROWS_FOR_SPLIT,
    SEEN,
    SIBLING,
    UNSEEN,
    IntervalCalibration,
    adapted_code,
    default_lodo_devices,
    fitted_sibling,
    interval_keys,
    keep_few_rows,
    stratified_split,
)
from hybrid.corrections.kernel_xgb import (
    AttentionXGB,
    ConvXGB,
    GemmXGB,
    PointwiseXGB,
    XGBCorrection,
    XGBParams,
    floored_devices,
    square_attention,
)
from hybrid.data.schema import as_category, validate
from hybrid.errors import DataQualityWarning, HybridError, InvalidInputError, TransferWarning
from hybrid.hardware.catalog import Catalog, default_catalog
from hybrid.hardware.device import Device, System
from hybrid.ops.families import family_array
from hybrid.ops.roofline import resolve_system, roofline
from hybrid.units import normalize_dtype

#: Format version of a saved predictor directory.
FORMAT_VERSION = 1
#: Correction classes a saved predictor may name.
CORRECTION_CLASSES: dict[str, type[Correction]] = {
    c.__name__: c for c in (GemmXGB, PointwiseXGB, AttentionXGB, ConvXGB, EmbeddingXGB, CollectiveSigmoid)
}
#: :meth:`HybridPredictor.predict` predicts identical rows once when at most this share of rows is distinct
DEDUP_MAX_FRACTION = 0.7
#: ... and the table has at least this many rows (below, the check costs more than it saves)
DEDUP_MIN_ROWS = 64
#: A table of at least this many rows is first checked on a random sample of :data:`DEDUP_SAMPLE_ROWS` rows: when
#: no two sampled rows are identical the full check (about 0.3 us per row and column) is skipped. Only a matter
#: of speed: a table with at most 70% distinct rows has many identical pairs among 2,048 random rows (over a
#: dozen expected for 200,000 rows), and the answer is the same either way.
DEDUP_SAMPLE_MIN_ROWS = 16_384
DEDUP_SAMPLE_ROWS = 2_048
#: ``method`` of rows no correction covers.
ROOFLINE, ALPHA_BETA = "roofline", "alpha-beta"
#: Columns the prediction path leaves out of its normalised table once validated: provenance and the spread of a
#: measurement, which no correction reads when predicting.
UNREAD_COLUMNS = frozenset({"time_us_std", "time_us_min", "time_us_max", "repeats", "wrong", "source",
                            "framework_version", "library_version", "kernel_name"})
#: Columns of the training table that define the data digest.
_DIGEST_COLUMNS = ("device", "op", "dtype", "time_us", "b", "m", "n", "k", "elements", "rows", "hidden",
                   "num_embeddings", "embedding_dim", "pooling_factor", "batch_size", "size_bytes", "n_ranks",
                   "n_nodes", "system", "direction", "variant", "in_channels", "out_channels", "height", "width",
                   "kernel_h", "kernel_w", "stride", "padding", "groups")


def default_corrections(seed: int = 0, collective_transfer: bool = True) -> list[Correction]:
    """One correction per family group: GEMM XGBoost, pointwise XGBoost, attention XGBoost (fitted only where the
    data has at least 50 attention rows; it answers square prefill/training attention in place of the pointwise
    model, :class:`~hybrid.corrections.kernel_xgb.AttentionXGB`), convolution XGBoost (fitted only where
    the data has convolution rows), embedding XGBoost, collective sigmoids (``collective_transfer``, default on:
    with the cross-system transfer model for systems never measured, which beats the alpha-beta estimate on
    leave-one-system-out, ``experiments/collectives_accuracy/results.md``)."""
    emb = EmbeddingXGB()
    emb.params.seed = seed
    return [GemmXGB(XGBParams(seed=seed)), PointwiseXGB(XGBParams(seed=seed)), AttentionXGB(XGBParams(seed=seed)),
            ConvXGB(XGBParams(seed=seed)), emb, CollectiveSigmoid(transfer=collective_transfer)]


class HybridPredictor:
    """Analytical baseline + learned corrections, scikit-learn style (``fit`` / ``predict``)."""

    def __init__(self, catalog: Catalog | None = None, corrections: Sequence[Correction] | None = None,
                 seed: int = 0, collective_transfer: bool = True, sibling_blend: bool | None = None):
        """``collective_transfer`` (only without explicit ``corrections``; default on): collectives of systems
        never measured get the cross-system transfer model instead of alpha-beta (``CollectiveSigmoid(transfer=
        True)``); False keeps the alpha-beta estimate for them. ``sibling_blend``: True / False switches the GEMM
        model's sibling rule on / off (a GPU it never saw is priced from a fitted product of the same die and power
        class as well, :meth:`GemmXGB.sibling_proxy_us <hybrid.corrections.kernel_xgb.GemmXGB.sibling_proxy_us>`);
        None (default) keeps the GEMM correction's own setting (on for a new ``GemmXGB``)."""
        # a bad seed was XGBoost's "Invalid Parameter format" at fit, numpy's error later, or (None) a model that
        # fitted but failed to load or adapt ("int() argument must be ... not 'NoneType'")
        _check_seed(seed, "seed", allow_none=False)
        # the arguments as given, for scikit-learn's estimator protocol (get_params / set_params / clone)
        self._init_params: dict[str, Any] = {"catalog": catalog, "corrections": corrections, "seed": seed,
                                             "collective_transfer": collective_transfer,
                                             "sibling_blend": sibling_blend}
        self.catalog: Catalog = catalog if catalog is not None else default_catalog()
        self.corrections: list[Correction] = (list(corrections) if corrections is not None
                                              else default_corrections(seed, collective_transfer))
        if sibling_blend is not None:
            for c in self.corrections:
                if isinstance(c, GemmXGB):
                    c.sibling_blend = bool(sibling_blend)
        keys = [c.key for c in self.corrections]
        if len(set(keys)) != len(keys):
            raise InvalidInputError(f"corrections must have distinct keys, got {keys}")
        self.seed = seed
        #: few-shot residual offsets: correction key (or "roofline" / "alpha-beta": kernel rows / collectives no
        #: correction answers) -> device -> log scale
        self.offsets: dict[str, dict[str, float]] = {}
        #: few-shot additive host shifts (strategy ``shift``): correction key (or "roofline" / "alpha-beta") -> device
        #: -> us
        self.shifts: dict[str, dict[str, float]] = {}
        #: few-shot size drift of the scale (strategy ``auto``'s ``tilt`` form): correction key -> device ->
        #: :meth:`hybrid.corrections.adapt.Tilt.to_json` (slope, ref, lo, hi in ln roofline us)
        self.tilts: dict[str, dict[str, dict[str, float]]] = {}
        #: few-shot form chosen by strategy ``auto``: correction key -> device -> AffineFit.to_json() (form,
        #: scale, shift_us, rows, cross-validated loss per form)
        self.adapt_forms: dict[str, dict[str, dict[str, Any]]] = {}
        #: few-shot boosted models used for one device only: (correction key, device) -> correction
        self.device_models: dict[tuple[str, str], XGBCorrection] = {}
        self.fit_info: dict[str, dict[str, Any]] = {}
        self.data_digest: str = ""
        self.devices_seen: list[str] = []
        #: correction key -> devices with rows of its families in the fit: a device the fit saw only in other
        #: families (e.g. only in collective measurements) is unseen for this correction's intervals
        self.devices_fitted: dict[str, list[str]] = {}
        #: correction key -> device -> the dtypes of its rows that correction was fitted on (what the sibling band
        #: reads: a die measured in another variant counts only in a dtype on the same units, :meth:`sibling_rows`)
        self.dtypes_fitted: dict[str, dict[str, list[str]]] = {}
        #: correction key -> training devices with fewer rows of its families than its device floor (their
        #: predictions get the unseen interval band, :meth:`_sparse_devices`)
        self.devices_sparse: dict[str, list[str]] = {}
        #: op families (:data:`hybrid.ops.families.FAMILIES`) with rows in the training table: a family outside it
        #: is priced by a correction that never saw it (extrapolated) or by the roofline
        self.families_seen: list[str] = []
        #: op family -> device -> the dtypes of its rows in the training table: a row of the family in a dtype its
        #: device was never measured in is priced from the others' (a trace prediction says so)
        self.family_dtypes: dict[str, dict[str, list[str]]] = {}
        self.systems_seen: list[str] = []
        #: conformal prediction-interval bands (:mod:`hybrid.corrections.intervals`); None = not calibrated
        self.intervals: IntervalCalibration | None = None

    @classmethod
    def roofline_only(cls, catalog: Catalog | None = None) -> HybridPredictor:
        """A predictor with no corrections: every row gets the roofline / alpha-beta estimate."""
        return cls(catalog, corrections=[])

    # ------------------------------------------------------------------ input handling
    def _prepare(self, table: pd.DataFrame, training: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
        if not isinstance(table, pd.DataFrame):
            raise InvalidInputError(f"expected a DataFrame, got {type(table).__name__}")
        if len(table) == 0:
            raise InvalidInputError("table is empty (no rows)")
        for c in ("device", "op"):
            if c not in table.columns:
                raise InvalidInputError(f"table has no {c!r} column")
        dup = table.columns[table.columns.duplicated()]
        if len(dup):
            raise InvalidInputError(f"table has the column {str(dup[0])!r} more than once")
        # unknown devices / systems: UnknownDeviceError naming the closest catalog entries (each distinct name
        # once, in order of first appearance)
        for name in _distinct_text(table["device"]):
            self.catalog.resolve_device(name)
        if "system" in table.columns:
            for name in _distinct_text(table["system"]):
                resolve_system(self.catalog, name)
        work = table
        if not training and "time_us" not in table.columns:
            work = table.assign(time_us=1.0)
        elif not training:
            t = pd.to_numeric(table["time_us"], errors="coerce")
            work = table.assign(time_us=t.where(t > 0, 1.0).fillna(1.0))
        norm = validate(work, self.catalog, source="fit" if training else "predict", prediction=not training)
        norm.index = table.index
        if not training:
            # Prediction path only: columns no prediction reads (provenance, the spread of a measurement) are left
            # out once validated; text columns (few distinct values in many rows) become categoricals, so every
            # later factorize / isin / row selection works on integer codes; nullable integer columns become
            # float64 (the op formulas and features compute in float anyway). Values are unchanged.
            norm = norm[[c for c in norm.columns if c not in UNREAD_COLUMNS]]
            for c in norm.columns:
                kind = norm[c].dtype
                if isinstance(kind, pd.CategoricalDtype) or c == "time_us":
                    continue
                if pd.api.types.is_object_dtype(kind) or pd.api.types.is_string_dtype(kind):
                    norm[c] = as_category(norm[c])
                elif isinstance(kind, pd.Int64Dtype):
                    norm[c] = norm[c].astype("float64")
        if "system" in norm.columns:  # catalog keys for systems too (curves are keyed by system)
            system = norm["system"]
            sys_codes, sys_uniques = pd.factorize(system if isinstance(system.dtype, pd.CategoricalDtype)
                                                  else system.astype("string"))
            # catalog keys; a generic node (a bare device name, or the "<device>-node" key of
            # hybrid.ops.roofline.system_for_device) keeps its device key, which resolves again later
            systems = [resolve_system(self.catalog, str(s)) for s in sys_uniques]
            keys = np.array([so.key if so.key in self.catalog.systems else so.device for so in systems] + [None],
                            dtype=object)
            norm["system"] = keys[np.where(sys_codes < 0, len(sys_uniques), sys_codes)]
        return norm, roofline(norm, self.catalog)

    # ------------------------------------------------------------------ fit
    def fit(self, table: pd.DataFrame, progress: bool = False, intervals: bool = False) -> HybridPredictor:
        """Fit every correction the data supports (at least its ``min_rows`` rows); records what was fitted.

        ``intervals=True`` also calibrates 80% prediction intervals (:meth:`calibrate_intervals`: one extra fit
        per held-out device plus one random split, so several times the fit cost)."""
        if isinstance(table, pd.DataFrame) and len(table) and "time_us" not in table.columns:
            raise InvalidInputError("training table has no 'time_us' column")
        norm, base = self._prepare(table, training=True)
        from tqdm.auto import tqdm

        self.fit_info = {}
        norm, base = self._drop_implausible(norm, base)
        # an attention model that will be fitted takes the square attention rows from the pointwise model's fit
        def fit_rows(corr: Correction) -> int:  # the attention model fits square attention rows only
            rows = square_attention(norm, base) if isinstance(corr, AttentionXGB) else family_mask(base, corr.families)
            return int(rows.sum())

        attention = any(isinstance(c, AttentionXGB) and fit_rows(c) >= c.min_rows for c in self.corrections)
        for corr in self.corrections:
            if isinstance(corr, PointwiseXGB):
                corr.square_attention_elsewhere = attention
        for corr in tqdm(self.corrections, desc="fit corrections", unit="model", disable=not progress, leave=False):
            n = fit_rows(corr)
            if n < corr.min_rows:
                self.fit_info[corr.key] = {"fitted": False, "rows": n,
                                           "reason": f"{n} rows of {'/'.join(corr.families)} (need {corr.min_rows})"}
                corr._fitted = False  # a refit replaces every fitted state: no family keeps an earlier fit's model
                continue
            corr.fit(norm, base, self.catalog)
            self.fit_info[corr.key] = {"fitted": True, "rows": n}
        self.devices_fitted = {c.key: sorted(map(str, pd.unique(norm.loc[family_mask(base, c.families), "device"])))
                               for c in self.corrections if self.fit_info.get(c.key, {}).get("fitted")}
        self.dtypes_fitted = {key: self._dtypes_by_device(norm, base, key) for key in self.devices_fitted}
        self.devices_sparse = self._sparse_devices(norm, base)
        self.offsets, self.device_models, self.shifts, self.adapt_forms, self.tilts = {}, {}, {}, {}, {}
        self.data_digest = table_digest(norm)
        self.devices_seen = sorted(map(str, pd.unique(norm["device"])))
        self.families_seen = sorted(map(str, pd.unique(base["family"]))) if "family" in base.columns else []
        self.family_dtypes = self._family_dtypes(norm, base)
        self.systems_seen = sorted(map(str, pd.unique(norm["system"].dropna()))) if "system" in norm.columns else []
        self.intervals = None
        if intervals:
            self.calibrate_intervals(table, progress=progress)
        return self

    def implausible(self, table: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
        """(mask of the rows of ``table`` a fit leaves out, their groups): GPU GEMMs faster than the datasheet peak
        allows (:func:`hybrid.data.quality.implausible_rows`)."""
        from hybrid.data.quality import implausible_rows

        norm, base = self._prepare(table, training=True)
        return implausible_rows(norm, base, self.catalog)

    def implausible_collectives(self, table: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
        """(mask of the rows of ``table``, their groups): collectives far faster than the catalog's fabric allows
        (:func:`hybrid.data.quality.implausible_collectives`: times in another unit, or the wrong system)."""
        from hybrid.data.quality import implausible_collectives

        norm, base = self._prepare(table, training=True)
        return implausible_collectives(norm, base)

    def _drop_implausible(self, norm: pd.DataFrame, base: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """``norm``/``base`` without GPU GEMM groups that beat the datasheet peak (:mod:`hybrid.data.quality`),
        with a warning naming them; recorded in ``fit_info['implausible']`` (rows left out, the groups)."""
        from hybrid.data.quality import describe, implausible_rows, nothing_plausible

        drop, bad = implausible_rows(norm, base, self.catalog)
        if not drop.any():
            return norm, base
        if drop.all():
            raise nothing_plausible(bad)
        warnings.warn("left out of the fit, GEMMs faster than the datasheet peak allows (hybrid.data.quality): "
                      f"{describe(bad, rows=False)}", DataQualityWarning, stacklevel=3)
        self.fit_info["implausible"] = {"fitted": False, "rows": int(drop.sum()), "groups": bad.to_dict("records"),
                                        "reason": "GEMMs faster than the datasheet peak allows (hybrid.data.quality)"}
        return norm.loc[~drop], base.loc[~drop]

    def calibrate_intervals(self, table: pd.DataFrame, coverage: float = DEFAULT_COVERAGE, max_devices: int = 8,
                            test_fraction: float = 0.2, seed: int | None = None,
                            progress: bool = False) -> HybridPredictor:
        """Calibrate the prediction intervals on ``table`` (normally the training table) by refitting copies of
        this predictor's corrections on the hold-outs ``hybrid calibrate`` uses (:meth:`calibration_splits`):
        the stratified random ``test_fraction`` hold-out (bands of seen devices), one fit per held-out device,
        at most ``max_devices`` of them (bands of unseen devices; each of those fits is also adapted with
        :data:`~hybrid.corrections.intervals.ADAPT_SHOTS` of the held-out device's rows, :meth:`adaptation_holdouts`:
        bands of adapted devices) and, when the fit up-weighted few-row devices (:attr:`devices_sparse`), one fit
        per held-out device that keeps as many of its rows (band of few-row devices, :meth:`few_row_splits`).
        The residuals come from :meth:`holdout_residuals`. ``self``'s fitted models are not changed."""
        res = self.holdout_residuals(table, max_devices, test_fraction, seed, progress=progress)
        if len(res):
            self.intervals = IntervalCalibration.from_residuals(
                res["log_residual"].to_numpy(), res["key"].to_numpy(), res["band"].to_numpy(),
                res["device"].to_numpy(), coverage)
        else:
            self.intervals = IntervalCalibration(coverage, {})
        return self

    def holdout_residuals(self, table: pd.DataFrame, max_devices: int = 8, test_fraction: float = 0.2,
                          seed: int | None = None, adapted: bool = True, progress: bool = False) -> pd.DataFrame:
        """The held-out predictions the 80% bands are calibrated on (:meth:`calibrate_intervals`), one row per
        scored op: ``split`` (``random``, ``lodo``, ``few``, ``adapted``), ``band`` (the code of the band the row
        calibrates, :data:`~hybrid.corrections.intervals.BAND_NAMES`; ``band_name``), ``device`` (catalog key),
        ``key`` (``method:family``), ``row`` (the row's index label in ``table``), ``measured_us``,
        ``predicted_us`` and ``log_residual`` (``log(measured / predicted)``). Rows the fit leaves out as
        implausible are not scored. ``adapted=False`` skips the adapted-device fits (the slowest part). Each
        hold-out refits copies of this predictor's corrections; ``self`` is not changed."""
        from tqdm.auto import tqdm

        # before any fit: a bad fraction was numpy's "Cannot take a larger sample than population" (1.5), an empty
        # hold-out (1.0, a negative one) or "cannot convert float NaN to integer"; a negative max_devices held none out
        if not (isinstance(test_fraction, numbers.Real) and 0 < test_fraction < 1):
            raise InvalidInputError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
        if not isinstance(max_devices, numbers.Integral) or isinstance(max_devices, bool) or max_devices < 0:
            raise InvalidInputError(f"max_devices must be a whole number >= 0, got {max_devices!r}")
        _check_seed(seed, "seed")
        labels = table.index.to_numpy()  # the caller's index labels
        work = table.reset_index(drop=True)
        drop, _ = self.implausible(work)  # the rows a fit leaves out are not scored either
        if drop.any():
            work, labels = work.loc[~drop].reset_index(drop=True), labels[~drop]
        devices = self._device_keys(work["device"])
        parts: list[pd.DataFrame] = []

        def part(split: str, rows: np.ndarray, pred: pd.DataFrame, band: np.ndarray) -> pd.DataFrame:
            held = work.loc[rows]
            meas = pd.to_numeric(held["time_us"]).to_numpy(np.float64)
            p = pred["time_us"].to_numpy(np.float64)
            return pd.DataFrame({"split": split, "band": band, "device": devices[rows], "row": labels[rows],
                                 "key": interval_keys(pred["method"].to_numpy(), family_array(held["op"])),
                                 "measured_us": meas, "predicted_us": p, "log_residual": np.log(meas) - np.log(p)})

        jobs = self.calibration_splits(work, max_devices, test_fraction, seed)
        band = {"random": SEEN, "lodo": UNSEEN, "few": FEW}
        for split, mask in tqdm(jobs, desc="calibrate intervals", unit="fit", disable=not progress, leave=False):
            if mask.all() or not mask.any():
                continue
            if split == "edge":  # edge sizes of measured layouts: the collective corrections alone, refitted
                clone = self.edge_clone(work.loc[~mask])
                sub = work.loc[mask]
                keep = clone.edge_rows(sub)  # far beyond the curve that prices them (within 4x: the seen band)
                if keep.any():
                    rows = np.flatnonzero(mask)[keep]
                    parts.append(part("edge", rows, clone.predict(sub.loc[keep], intervals=False),
                                      np.full(int(keep.sum()), EDGE)))
                continue
            clone = HybridPredictor(self.catalog, [copy.deepcopy(c) for c in self.corrections], seed=self.seed)
            clone.fit(work.loc[~mask])
            sub = work.loc[mask]
            codes = np.full(len(sub), band[split])
            if split == "lodo":  # a held-out GPU whose die the fit measured in another variant: the sibling band
                codes[clone.sibling_rows(sub)] = SIBLING
            rows = np.flatnonzero(mask)
            parts.append(part(split, rows, clone.predict(sub, intervals=False), codes))
            if split == "lodo" and adapted:  # the held-out device adapted with k of its rows: adapted bands
                for shots, fit_rows, scored in clone.adaptation_holdouts(sub, seed):
                    pred = clone.adapt(sub.loc[fit_rows]).predict(sub.loc[scored], intervals=False)
                    parts.append(part("adapted", rows[np.asarray(scored)], pred,
                                      np.full(int(np.count_nonzero(scored)), int(adapted_code(shots)))))
        cols = ["split", "band", "band_name", "device", "key", "row", "measured_us", "predicted_us", "log_residual"]
        if not parts:
            return pd.DataFrame(columns=cols)
        out = pd.concat(parts, ignore_index=True)
        out["band"] = out["band"].astype(np.int64)
        out["band_name"] = np.asarray(BAND_NAMES, dtype=object)[out["band"].to_numpy()]
        return out[cols]

    def _device_keys(self, devices: pd.Series) -> np.ndarray:
        """Catalog key per row (aliases resolved once per distinct name)."""
        codes, uniques = pd.factorize(devices.astype(str))
        return np.array([self.catalog.device(str(u)).key for u in uniques], dtype=object)[codes]

    def calibration_splits(self, table: pd.DataFrame, max_devices: int = 8, test_fraction: float = 0.2,
                           seed: int | None = None) -> list[tuple[str, np.ndarray]]:
        """The hold-outs of :meth:`calibrate_intervals` as (split, held-out row mask) for the rows of ``table``:
        ``("random", ...)``: :func:`~hybrid.corrections.intervals.stratified_split` (``test_fraction`` of every
        (device, op) group), then ``("lodo", ...)`` per device of
        :func:`~hybrid.corrections.intervals.default_lodo_devices`, then ``("few", ...)`` per device of
        :meth:`few_row_splits` on the same devices: the same rules, seed and defaults as ``hybrid calibrate``, so
        both calibrate their bands on the same rows."""
        seed = self.seed if seed is None else seed
        work = table.reset_index(drop=True)
        devices = pd.Series(self._device_keys(work["device"]))
        jobs: list[tuple[str, np.ndarray]] = []
        if len(work) >= MIN_ROWS_FOR_SPLIT:
            _, test = stratified_split(work.assign(device=devices.to_numpy()), test_fraction, seed)
            mask = np.zeros(len(work), dtype=bool)
            mask[test] = True
            jobs.append(("random", mask))
        kinds = {d: self.catalog.device(d).kind for d in pd.unique(devices)}
        holdouts = default_lodo_devices(devices, kinds, max_devices, family_array(work["op"]) == "collective")
        for d in holdouts:
            jobs.append(("lodo", (devices == d).to_numpy()))
        jobs += [("few", mask) for _, mask in self.few_row_splits(work, holdouts, seed)]
        jobs += [("edge", mask) for mask in self.edge_splits(work)]
        return jobs

    def edge_splits(self, table: pd.DataFrame) -> list[np.ndarray]:
        """The ``edge`` hold-outs of :meth:`calibration_splits` (row masks of ``table``): the edge sizes of
        measured collective layouts, two folds of layouts (:func:`~hybrid.corrections.collective_sigmoid.
        edge_holdouts`), whose held-out rows far beyond the sizes left to their curve (:meth:`edge_rows`) calibrate
        the ``edge`` band; none without a fitted correction that anchors sizes at a curve's edge
        (``edge_extrapolated``)."""
        from hybrid.corrections.collective_sigmoid import edge_holdouts

        if not any(getattr(c, "edge_extrapolated", None) is not None for c in self.corrections):
            return []
        return edge_holdouts(table.reset_index(drop=True))

    def edge_clone(self, table: pd.DataFrame) -> HybridPredictor:
        """A copy of this predictor's collective corrections (unfitted settings) fitted on ``table``'s collective
        rows: what an ``edge`` hold-out (:meth:`edge_splits`) is predicted with (the kernel models do not price
        collectives, so they are not refitted)."""
        coll = [copy.deepcopy(c) for c in self.corrections if "collective" in c.families]
        rows = table[family_array(table["op"]) == "collective"].reset_index(drop=True)
        return HybridPredictor(self.catalog, coll, seed=self.seed).fit(rows)

    def edge_rows(self, table: pd.DataFrame) -> np.ndarray:
        """Per row of ``table``, whether a fitted collective correction prices it more than ``SIZE_MARGIN`` x beyond
        the sizes of the curve measured at its layout (``CollectiveSigmoid.edge_extrapolated``): the rows of the
        ``edge`` interval band."""
        out = np.zeros(len(table), dtype=bool)
        fns = [(c, f) for c in self.corrections if c.fitted and (f := getattr(c, "edge_extrapolated", None))]
        if not fns or not len(table):
            return out
        norm, base = self._prepare(table.reset_index(drop=True), training=False)
        for corr, f in fns:
            fam = family_mask(base, corr.families)
            if fam.any():
                out[fam] |= f(norm.loc[fam])
        return out

    def adaptation_holdouts(self, table: pd.DataFrame, seed: int | None = None
                            ) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """(k, adaptation row mask, scored row mask) per k of :data:`~hybrid.corrections.intervals.ADAPT_SHOTS`
        for ``table``, the rows of one device this predictor was not fitted on: of each group of rows one
        correction answers (or the roofline; collectives excluded, their adaptation is per system) with at least
        ``k + MIN_RESIDUALS`` rows, k random rows to adapt with (:meth:`adapt`, strategy ``auto``) and the others
        to score. What calibrates the bands of adapted devices (:meth:`calibrate_intervals`, ``hybrid calibrate``'s
        ``adapted`` split)."""
        work = table.reset_index(drop=True)
        if len(work) == 0 or not any(c.fitted for c in self.corrections):
            return []
        norm, base = self._prepare(work, training=True)
        _, _, _, group, _ = self._raw_codes(norm, base)
        group = np.where(isin_fast(base["family"], ("collective",)), -1, group)
        rng = np.random.default_rng(self.seed if seed is None else seed)
        out: list[tuple[int, np.ndarray, np.ndarray]] = []
        rows = [np.flatnonzero(group == g) for g in np.unique(group[group >= 0])]
        for k in ADAPT_SHOTS:
            fit_rows, scored = keep_few_rows([(r, k) for r in rows], len(work), rng)
            if fit_rows.any():
                out.append((k, fit_rows, scored))
        return out

    def few_rows(self, table: pd.DataFrame) -> dict[str, int]:
        """Per correction with few-row devices (:attr:`devices_sparse`), how many rows of its families those
        devices have in ``table`` (median over them): the rows a held-out device keeps in the fits that calibrate
        the few-row band (:meth:`few_row_splits`)."""
        if not self.devices_sparse or len(table) == 0:
            return {}
        devices = self._device_keys(table["device"])
        family = family_array(table["op"])
        out: dict[str, int] = {}
        for corr in self.corrections:
            few = self.devices_sparse.get(corr.key)
            if not few:
                continue
            in_family = np.isin(family, list(corr.families))
            keys = {self.catalog.device(d).key for d in few}
            counts = [int((in_family & (devices == d)).sum()) for d in sorted(keys)]
            counts = [c for c in counts if c > 0]
            if counts:
                out[corr.key] = int(np.median(counts))
        return out

    def few_row_splits(self, table: pd.DataFrame, devices: Sequence[str], seed: int | None = None
                       ) -> list[tuple[str, np.ndarray]]:
        """(device, held-out row mask) per device of ``devices`` for the band of few-row devices: of each
        correction that up-weighted few-row devices in this fit (:attr:`devices_sparse`), the device keeps
        :meth:`few_rows` random rows of that correction's families in the fit (so the fit floors it, as it did
        them) and its other rows of those families are held out and scored; its rows of other families stay in
        the fit. A device with fewer than that many rows plus ``MIN_RESIDUALS`` of a correction's families is
        skipped for it. Empty when no device was up-weighted: the band is then not calibrated (nor needed)."""
        keep = self.few_rows(table)
        if not keep:
            return []
        seed = self.seed if seed is None else seed
        work = table.reset_index(drop=True)
        keys = self._device_keys(work["device"])
        family = family_array(work["op"])
        groups = [(np.isin(family, list(c.families)), keep[c.key]) for c in self.corrections if c.key in keep]
        rng = np.random.default_rng(seed)
        out: list[tuple[str, np.ndarray]] = []
        for d in devices:
            on_device = keys == self.catalog.device(str(d)).key
            _, mask = keep_few_rows([(np.flatnonzero(in_family & on_device), k) for in_family, k in groups],
                                    len(work), rng)
            if mask.any():
                out.append((str(d), mask))
        return out

    def _sparse_devices(self, norm: pd.DataFrame, base: pd.DataFrame) -> dict[str, list[str]]:
        """Per fitted XGBoost correction, the training devices its device floor up-weighted
        (:func:`~hybrid.corrections.kernel_xgb.floored_devices` of its rows): the random split that calibrates the
        seen band holds a handful of their rows, so their predictions get the band of few-row devices
        (:meth:`_bands`, calibrated by :meth:`few_row_splits`; the unseen band where it was not calibrated)."""
        out: dict[str, list[str]] = {}
        for corr in self.corrections:
            if not (isinstance(corr, XGBCorrection) and corr.fitted):
                continue
            few = floored_devices(norm.loc[family_mask(base, corr.families), "device"], corr.params.min_device_rows)
            if len(few):
                out[corr.key] = sorted(map(str, few.index))
        return out

    def _other_units(self, device: str, dtype: str, per_device: dict[str, set[str]]) -> bool:
        """Whether ``device`` runs ``dtype`` on units (a peak rate) none of its fitted dtypes ran on; False for a
        device the correction did not fit (its band is decided elsewhere) or a name the catalog lacks."""
        fitted = per_device.get(device)
        if not fitted:
            return False
        try:
            d = self.catalog.device(device)
            rate = d.compute_peak(normalize_dtype(dtype))
            return not any(abs(d.compute_peak(normalize_dtype(f)) / rate - 1.0) < 1e-6 for f in fitted)
        except Exception:  # noqa: BLE001 - an unknown dtype or device is the roofline's error to raise
            return False

    def _bands(self, norm: pd.DataFrame, base: pd.DataFrame,
               groups: tuple[np.ndarray, list[str]] | None = None) -> np.ndarray:
        """Interval band per row (:data:`~hybrid.corrections.intervals.BAND_NAMES` codes): seen when its device (and
        system, for collectives) was in the fit and the row's correction was not adapted to it (a collective also at a layout measured in the setting that
        prices it and within a few doublings of the message sizes measured for its system and op:
        ``CollectiveSigmoid.extrapolated``); few when the device's few rows of the row's
        correction were up-weighted by the fit (:meth:`_sparse_devices`); adapted-k when the device was adapted
        (strategy ``auto``) with n rows of the row's group (``groups``: group code per row and group keys, as
        :meth:`_raw_codes` gives them; :func:`~hybrid.corrections.intervals.adapted_code` of n); else unseen. A
        GEMM in a dtype its correction was never fitted on is unseen too, and so is a row whose correction never
        saw its device (the device was in the fit only with other families' rows, :attr:`devices_fitted`). An
        unseen kernel row whose correction fitted another variant of its die (:meth:`sibling_rows`) is sibling."""
        adapted = self._adapted_devices()
        seen = isin_fast(norm["device"], set(self.devices_seen))
        if adapted and groups is not None:
            # adapted where the row's own correction was adapted to its device: a base-measured GPU adapted with
            # GEMM rows keeps the seen band on its softmax rows, which the adaptation leaves as the base had them
            codes, keys = groups
            devices = norm["device"].to_numpy(dtype=object)
            for key, dev in self._adapted_pairs():
                if key in keys:
                    seen &= ~((codes == keys.index(key)) & (devices == dev))
        elif adapted:
            seen &= ~isin_fast(norm["device"], adapted)
        band = np.where(seen, SEEN, UNSEEN).astype(np.int64)
        odd_dtype = np.zeros(len(norm), dtype=bool)
        for corr in self.corrections:
            few = self.devices_sparse.get(corr.key)
            if few:
                band[seen & family_mask(base, corr.families) & isin_fast(norm["device"], few)] = FEW
            mine = self.devices_fitted.get(corr.key)  # None: a save from before it was recorded
            if mine is not None:  # a device this correction never fitted (seen only in other families' rows)
                band[family_mask(base, corr.families) & ~isin_fast(norm["device"], mine)
                     & ((band == SEEN) | (band == FEW))] = UNSEEN
            # a collective far beyond the message sizes measured on its system, or at a layout (ranks, nodes) never
            # measured in the setting that prices it: the curves extrapolate
            outside = getattr(corr, "extrapolated", None)
            if outside is not None and corr.fitted:
                fam = family_mask(base, corr.families)
                if fam.any():
                    far = np.zeros(len(norm), dtype=bool)
                    far[fam] = outside(norm.loc[fam])
                    # only far beyond its own curve's sizes: the edge band (the unseen one where not calibrated)
                    edge = np.zeros(len(norm), dtype=bool)
                    if (edge_of := getattr(corr, "edge_extrapolated", None)) is not None and far.any():
                        edge[fam] = edge_of(norm.loc[fam])
                    sure = (band == SEEN) | (band == FEW)
                    band[far & sure] = np.where(edge[far & sure], EDGE, UNSEEN)
            # a GEMM in a dtype the fit never saw is priced through another dtype (GemmXGB.dtype_proxy_us): as
            # uncertain as a device never seen (held-out 16-bit dtypes: 23-66% geomean, experiments/kernel_accuracy)
            fitted = getattr(corr, "fitted_dtypes", None)
            if fitted and "dtype" in norm.columns:
                unseen_dtype = family_mask(base, corr.families) & ~isin_fast(norm["dtype"], fitted)
                band[unseen_dtype & ((band == SEEN) | (band == FEW))] = UNSEEN
                odd_dtype |= unseen_dtype
            # a fitted GPU's GEMM on units none of its fitted dtypes ran on (fp16 tensor cores of a GPU measured in
            # fp32 only): as unseen as the GPU in that dtype (DeepBench's T4 fp16 rows fell 1.9% inside the seen band)
            per_device = getattr(corr, "device_dtypes", None)
            if per_device and "dtype" in norm.columns:
                fam = family_mask(base, corr.families) & ((band == SEEN) | (band == FEW))
                if fam.any():
                    pairs, index = device_dtype_pairs(norm)
                    other = np.array([self._other_units(dev, dt, per_device) for dev, dt in pairs], dtype=bool)
                    band[fam & other[index]] = UNSEEN
                    odd_dtype |= fam & other[index]
        # a GPU never fitted whose die was, in another variant (not in a dtype never fitted: that stays unseen);
        # only where some key gives them a band of their own (else such rows get the unseen band anyway); the die
        # lookup only on the rows that could be siblings
        if self.intervals is not None and self.intervals.marks_siblings():
            maybe = np.flatnonzero((band == UNSEEN) & ~odd_dtype)
            if len(maybe):
                cols = [c for c in ("device", "dtype") if c in norm.columns]
                narrow = pd.DataFrame({c: norm[c].iloc[maybe].reset_index(drop=True) for c in cols})
                fam = pd.DataFrame({"family": base["family"].iloc[maybe].reset_index(drop=True)})
                band[maybe[self._sibling_mask(narrow, fam)]] = SIBLING
        if self.adapt_forms and groups is not None:
            codes, keys = groups
            devices = norm["device"].to_numpy(dtype=object)
            for key, per in self.adapt_forms.items():
                if key not in keys:
                    continue
                in_group = codes == keys.index(key)
                for dev, fit in per.items():
                    rows = in_group & (devices == dev)
                    if rows.any():
                        band[rows] = adapted_code(int(fit.get("rows") or 0))
        is_coll = isin_fast(base["family"], ("collective",))
        if is_coll.any():
            # the collective curves are keyed on the system, or on the GPU for rows that name none (logs imported
            # without --system): a row of such a measured GPU is as seen as one of a measured system
            keyed = set(self.systems_seen)
            for corr in self.corrections:
                keyed |= {str(f.system) for f in getattr(corr, "fits", None) or () if hasattr(f, "system")}
            # the system key of the collective rows only (text per row: a few percent of a mixed table)
            coll = np.flatnonzero(is_coll)
            cols = [c for c in ("system", "device") if c in norm.columns]
            sys_seen = np.zeros(len(norm), dtype=bool)
            sys_seen[coll] = isin_fast(_group_key(norm[cols].iloc[coll]), sorted(keyed))
            band = np.where(is_coll & ~(seen & sys_seen), UNSEEN, band)
        return band

    def sibling_rows(self, table: pd.DataFrame) -> np.ndarray:
        """Per row of ``table``: a kernel row (not a collective) whose device the correction answering its family
        never fitted (:attr:`devices_fitted`), while that correction fitted another variant of the same die and
        power class (:meth:`Catalog.same_die <hybrid.hardware.catalog.Catalog.same_die>` within
        :data:`~hybrid.corrections.intervals.SIBLING_MAX_TDP_RATIO`: an A100 SXM4 40GB when the SXM4 80GB was
        measured, not when only the 250 W PCIe cards were) in a dtype that runs on the same units as the row's
        (the same compute peak on that chip: fp16 and bf16 on an A100 are one path, fp32 another;
        :attr:`dtypes_fitted`). Those rows get the ``sibling`` interval band where it was calibrated (the
        leave-one-device-out fits of :meth:`calibrate_intervals` and ``hybrid calibrate`` mark their held-out rows
        with this); all False for a model saved before :attr:`dtypes_fitted` was recorded."""
        norm, base = self._prepare(table.reset_index(drop=True), training=False)
        return self._sibling_mask(norm, base)

    @staticmethod
    def _family_dtypes(norm: pd.DataFrame, base: pd.DataFrame) -> dict[str, dict[str, list[str]]]:
        """Op family -> device -> the dtypes of its rows (:attr:`family_dtypes`)."""
        if "family" not in base.columns or not len(norm):
            return {}
        dtypes = norm["dtype"].astype(str).to_numpy() if "dtype" in norm.columns else np.full(len(norm), "fp32")
        pairs = pd.DataFrame({"family": base["family"].astype(str).to_numpy(),
                              "device": norm["device"].astype(str).to_numpy(), "dtype": dtypes}).drop_duplicates()
        out: dict[str, dict[str, list[str]]] = {}
        for (fam, dev), g in pairs.groupby(["family", "device"], sort=True):
            out.setdefault(str(fam), {})[str(dev)] = sorted(map(str, g["dtype"]))
        return out

    def _dtypes_by_device(self, norm: pd.DataFrame, base: pd.DataFrame, key: str) -> dict[str, list[str]]:
        corr = next(c for c in self.corrections if c.key == key)
        rows = norm.loc[family_mask(base, corr.families)]
        dtypes = rows["dtype"].astype(str) if "dtype" in rows.columns else pd.Series("fp32", index=rows.index)
        pairs = pd.DataFrame({"device": rows["device"].astype(str), "dtype": dtypes}).drop_duplicates()
        return {str(d): sorted(map(str, g["dtype"])) for d, g in pairs.groupby("device", sort=True)}

    def _sibling_mask(self, norm: pd.DataFrame, base: pd.DataFrame) -> np.ndarray:
        out = np.zeros(len(norm), dtype=bool)
        if not self.dtypes_fitted or not len(norm):
            return out
        pairs, codes = device_dtype_pairs(norm)
        for corr in self.corrections:
            per = self.dtypes_fitted.get(corr.key)
            if not per:
                continue
            has = np.array([dev not in per and bool(fitted_sibling(self.catalog, dev, dt, per)) for dev, dt in pairs],
                           dtype=bool)
            if has.any():
                out |= family_mask(base, corr.families) & has[codes]
        return out & ~isin_fast(base["family"], ("collective",))

    def fitted_devices(self) -> set[str]:
        """Devices whose measurements the corrections were fitted or adapted on: their catalog entries are part of
        the model (its corrections are relative to those entries' rooflines; :meth:`save` keeps them)."""
        return set(self.devices_seen) | self._adapted_devices()

    def collective_reasons(self, table: pd.DataFrame) -> list[str]:
        """Per row of ``table``, why a collective's prediction is not read off a curve measured for it ('' where it
        is): the collective correction's :meth:`~hybrid.corrections.collective_sigmoid.CollectiveSigmoid.
        extrapolation_reason`, and, where a few-shot adaptation (:meth:`adapt`, ``hybrid calibrate --base``) of the
        row's device moves the answer, that too: a system the base fit never logged is then priced by the transfer
        model or the alpha-beta estimate scaled to the user's own measurements, not by "no log" alone."""
        corr = next((c for c in self.corrections if c.fitted and hasattr(c, "extrapolation_reason")), None)
        if corr is None or not len(table):
            return [""] * len(table)
        reasons = list(corr.extrapolation_reason(table))
        adapted = self._adapted_devices()
        if not adapted or not any(reasons):
            return reasons
        norm, base = self._prepare(table, training=False)
        _, _, _, codes, keys = self._raw_codes(norm, base)
        fits = self.adaptation()
        devices = norm["device"].astype(str).to_numpy()
        for i, why in enumerate(reasons):
            fit = fits.get(keys[codes[i]], {}).get(devices[i]) if why else None
            if fit is None:
                continue
            rows = f"{int(fit['rows'])} measured rows" if fit.get("rows") else "measured rows"
            what = f" ({fit['form']})" if fit.get("form") else ""
            if why.startswith("no log of system "):
                why = why.replace("no log of system ", "system ", 1).replace(": ", " was not in the base fit: ", 1)
            reasons[i] = f"{why}, adapted{what} to {rows} of {devices[i]} (few-shot)"
        return reasons

    def _adapted_devices(self) -> set[str]:
        """Devices with a few-shot scale, tilt, shift or device model."""
        return {d for _, d in self._adapted_pairs()}

    def _adapted_pairs(self) -> set[tuple[str, str]]:
        """(few-shot group key, device) of each few-shot scale, tilt, shift or device model."""
        return ({(k, d) for store in (self.offsets, self.shifts, self.tilts) for k, per in store.items() for d in per}
                | {(str(k), str(d)) for k, d in self.device_models})

    def _cross_kind_rows(self, norm: pd.DataFrame, group: tuple[np.ndarray, list[str]]
                           ) -> tuple[np.ndarray, dict[str, list[str]]]:
        """Rows answered by a correction fitted on no device of their device's kind (a CPU priced by kernel trees
        fitted on GPUs only, a GPU's collectives by curves of gloo on CPUs), and per such device the corrections
        that did it. ``norm``: validated rows; ``group``: (correction code per row, keys) as :meth:`_raw_codes`
        gives them.

        Such a row is a transfer across kinds of processor, which helps some op families and hurts others
        (docs/corrections.md: CPU-fitted embedding lookups beat the roofline on an H100; an H100-fitted model
        priced the committed CPU profile worse than the roofline alone): the prediction says so
        (:class:`~hybrid.errors.TransferWarning`) and its interval is not calibrated for it."""
        rows = np.zeros(len(norm), dtype=bool)
        odd: dict[str, list[str]] = {}
        if not self.devices_fitted:
            return rows, odd
        devices = _distinct_text(norm["device"])
        kind = {d: self.catalog.device(d).kind for d in devices}
        for corr in self.corrections:
            fitted = self.devices_fitted.get(corr.key)
            if not corr.fitted or not fitted:
                continue
            kinds = {self.catalog.devices[d].kind for d in fitted if d in self.catalog.devices}
            other = [d for d in devices if kinds and kind[d] not in kinds]
            if not other:
                continue
            mine = _group_rows(group, corr.key) & isin_fast(norm["device"], other)
            if not mine.any():
                continue
            rows |= mine
            for d in pd.unique(norm["device"].to_numpy(dtype=object)[mine]):
                odd.setdefault(str(d), []).append(corr.key)
        return rows, odd

    # ------------------------------------------------------------------ predict
    def _raw(self, norm: pd.DataFrame, base: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(time_us, method, group key used for offsets) before few-shot offsets."""
        time, method, methods, group, groups = self._raw_codes(norm, base)
        return time, np.array(methods, dtype=object)[method], np.array(groups, dtype=object)[group]

    def _raw_codes(self, norm: pd.DataFrame, base: pd.DataFrame
                   ) -> tuple[np.ndarray, np.ndarray, list[Any], np.ndarray, list[str]]:
        """:meth:`_raw` as codes: (time_us, method code per row, method names, group code per row, group keys);
        ``methods[method]`` and ``groups[group]`` are :meth:`_raw`'s arrays (no per-row text here)."""
        time = base["time_us"].to_numpy(dtype=np.float64).copy()
        is_coll = isin_fast(base["family"], ("collective",))
        methods: list[Any] = [ROOFLINE, ALPHA_BETA]
        method = is_coll.astype(np.int64)
        # few-shot group keys: kernel rows no correction answers ("roofline") and collectives none answers
        # ("alpha-beta") apart, so a scale or shift adapted on one never moves the other (a device's alpha-beta
        # collectives moved its roofline layernorms by their +52 us, and the reverse)
        groups: list[str] = [ROOFLINE, ALPHA_BETA]
        group = is_coll.astype(np.int64)
        devices = norm["device"].to_numpy(dtype=object) if self.device_models else None

        def global_codes(codes: np.ndarray, names: list[Any]) -> np.ndarray:
            """Codes into ``names`` -> codes into ``methods`` (-1 stays -1)."""
            index = {}
            for i, name in enumerate(methods):
                index.setdefault(name, i)
            for name in names:
                if name not in index:
                    index[name] = len(methods)
                    methods.append(name)
            return np.array([index[name] for name in names] + [-1], dtype=np.int64)[codes]

        for corr in self.corrections:
            if not corr.fitted:
                continue
            mask = family_mask(base, corr.families)
            if not mask.any():
                continue
            # every correction names the model that answered each row (one name, or several: per-system curves
            # and the cross-system model of the collectives)
            pred, codes, names = corr.predict_coded(norm, base, self.catalog)
            codes = global_codes(codes, names)
            for (key, dev), model in self.device_models.items():
                rows = mask & (devices == dev)  # type: ignore[operator]
                if key == corr.key and rows.any():
                    pred[rows], dcodes, dnames = model.predict_coded(norm.loc[rows], base.loc[rows], self.catalog)
                    codes[rows] = global_codes(dcodes, dnames)
            ok = mask & np.isfinite(pred)
            time[ok] = pred[ok]
            method[ok] = codes[ok]
            if ok.any():
                if corr.key not in groups:
                    groups.append(corr.key)
                group[ok] = groups.index(corr.key)
        return time, method, methods, group, groups

    def predict(self, table: pd.DataFrame, intervals: bool = True, host: bool = False,
                kernel_bound: bool = False) -> pd.DataFrame:
        """Per row (same index): ``time_us``, ``roofline_us``, ``method``, ``bound``; with ``intervals``,
        ``time_us_low`` / ``time_us_high`` (the calibrated 80% interval; NaN when the predictor has no interval
        calibration, see :meth:`calibrate_intervals`, or none for that kind of op: a collective of a model
        calibrated without collectives) and ``interval_calibrated`` (False where the band was borrowed from
        another op family or model, or is missing: :meth:`IntervalCalibration.bounds
        <hybrid.corrections.intervals.IntervalCalibration.bounds>`) and, when calibrated, ``interval_band`` (the band
        the row got: ``seen``, ``unseen``, ``few``, ``adapted-k`` or ``sibling``, :meth:`_bands`; a band never
        calibrated for the row is named as the unseen one it falls back to, and a collective's unseen band the
        calibration could not calibrate, replaced by the public default, ``unseen (default)``); with ``host``, ``host_us`` (the part of ``time_us`` that
        is the fitted per-op framework dispatch on the host, for framework-timed GPU rows of the kernel models
        with a dispatch constant; 0 elsewhere; what :class:`hybrid.engine.costs.KernelTimeModel` takes off) and
        ``learned_host_us`` (the dispatch that corrections without that constant learned inside the times of GPUs
        fitted on eager timings, ``DispatchXGB.learned_dispatch``; taken off only where asked); with
        ``kernel_bound``, ``kernel_bound_us``: for the host-bound rows the unseen-GPU envelope leaves to the trees,
        the most kernel time (``time_us`` less both host parts) the row may take (``XGBCorrection.
        envelope_kernel_us``; ``inf`` elsewhere and on few-shot adapted devices), for consumers that price kernels
        only (:class:`hybrid.engine.costs.KernelTimeModel` with ``learned_dispatch``).

        Identical rows are predicted once (every step is row-wise, so the answer is the same): a table where at
        most :data:`DEDUP_MAX_FRACTION` of the rows are distinct (repeated layers, ranks, search candidates) is
        reduced to its distinct rows first, see :func:`distinct_rows`.

        On GPUs, ``time_us`` and ``time_us_low`` of a floored family (convolutions) are never below its physical
        floor, a multiple of ``roofline_us`` set by what measurements show (:mod:`hybrid.corrections.bounds`); nor does a
        few-shot scale (:meth:`adapt`) take ``time_us`` below the floor of the correction that answered the row
        (``floor_us``: a GPU GEMM's roofline), where ``time_us_low`` stops: the interval contains its point."""
        if isinstance(table, pd.DataFrame) and len(table) >= DEDUP_MIN_ROWS:
            # measured columns are not inputs: a measured table (evaluate, hold-outs) de-duplicates too
            inputs = table.drop(columns=[c for c in MEASURED_COLUMNS if c in table.columns])
            found = None if _sample_all_distinct(inputs) else distinct_rows(inputs)
            if found is not None:
                first, codes = found
                try:
                    unique = self._predict_rows(table.iloc[first], intervals, host, kernel_bound)
                except HybridError:
                    pass  # bad input: the full table below raises the error naming the offending row exactly
                else:
                    return pd.DataFrame({c: unique[c].to_numpy()[codes] for c in unique.columns}, index=table.index)
        return self._predict_rows(table, intervals, host, kernel_bound)

    def _predict_rows(self, table: pd.DataFrame, intervals: bool, host: bool = False,
                      kernel_bound: bool = False) -> pd.DataFrame:
        """:meth:`predict` without the de-duplication of identical rows."""
        norm, base = self._prepare(table, training=False)
        time, method, methods, group_codes, groups = self._raw_codes(norm, base)
        cross, odd = self._cross_kind_rows(norm, (group_codes, groups))
        if odd:
            warnings.warn(cross_kind_note(odd, self.catalog), TransferWarning, stacklevel=3)
        group = (np.array(groups, dtype=object)[group_codes] if (self.offsets or self.shifts or self.tilts)
                 else None)
        corr_floor = None  # the answering correction's floor per row (``_interval_floor``), once computed
        if self.offsets or self.tilts:
            devices = norm["device"].to_numpy(dtype=object)
            roof = base["time_us"].to_numpy(dtype=np.float64)
            scale = np.zeros(len(norm))
            for key, per_dev in self.offsets.items():
                for dev, off in per_dev.items():
                    scale[(group == key) & (devices == dev)] = off
            for key, per_tilt in self.tilts.items():
                for dev, obj in per_tilt.items():
                    rows = (group == key) & (devices == dev)
                    scale[rows] += adapt_mod.Tilt.from_json(obj).log_factor(roof[rows])  # type: ignore[union-attr]
            time = time * np.exp(scale)
            # a scale below one moves the point, not the physics: the answering correction's floor (``floor_us``: a
            # GPU GEMM does not beat its roofline) holds the point as it holds the interval's low end below
            corr_floor = self._interval_floor(norm, base, (group_codes, groups))
            time = np.maximum(time, corr_floor)
        if self.shifts:
            devices = norm["device"].to_numpy(dtype=object)
            roof = base["time_us"].to_numpy(dtype=np.float64)
            for key, per_dev in self.shifts.items():
                for dev, shift in per_dev.items():
                    rows = (group == key) & (devices == dev)
                    time[rows] = np.maximum(time[rows] + shift, roof[rows])  # never below the roofline
        # the physical floor of the row's family on GPUs (hybrid.corrections.bounds: conv), after every correction
        # and few-shot adaptation, so the CLI, the engine and the LLM builders get it; the interval's low end too
        physical = bounds_mod.floor_us(norm, base, self.catalog)
        if physical.any():
            time = np.maximum(time, physical)
        bound = base["bound"].array
        out = {"time_us": time, "roofline_us": base["time_us"].to_numpy(dtype=np.float64),
               "method": _text_array(methods, method), "bound": _text_array(list(bound.categories), bound.codes)}
        if intervals:
            if self.intervals is None:  # the calibrated path's column order, without its band
                out["interval_calibrated"] = np.zeros(len(time), dtype=bool)
                out["time_us_low"] = out["time_us_high"] = np.full(len(time), np.nan)
            else:
                bands = self._bands(norm, base, (group_codes, groups))
                lo, hi, calibrated = self.intervals.coded_bounds(method, methods, base["family"], bands)
                out["interval_calibrated"] = calibrated & ~cross  # no band was calibrated across kinds of processor
                # which band the row got (seen / unseen / few / adapted-k / sibling): why one interval is wider than
                # another; a few-row, adapted or sibling band never calibrated for the row is the unseen one it got
                out["interval_band"] = _text_array(list(APPLIED_BAND_NAMES), self.intervals.applied_bands(
                    method, methods, base["family"], bands))
                out["time_us_low"], out["time_us_high"] = time * np.exp(lo), time * np.exp(hi)
                if corr_floor is None:
                    corr_floor = self._interval_floor(norm, base, (group_codes, groups))
                floor = np.maximum(corr_floor, physical)
                out["time_us_low"] = np.where(floor > 0, np.maximum(out["time_us_low"], floor), out["time_us_low"])
        if host or kernel_bound:
            fitted_host = np.minimum(self._host(norm, base, (group_codes, groups)), time)
            learned_host = np.minimum(self._host(norm, base, (group_codes, groups), learned=True), time - fitted_host)
            if host:
                out["host_us"], out["learned_host_us"] = fitted_host, learned_host
            if kernel_bound:
                out["kernel_bound_us"] = self._kernel_bound(norm, base, (group_codes, groups),
                                                            time - fitted_host - learned_host)
        return pd.DataFrame(out, index=table.index)

    def _kernel_bound(self, norm: pd.DataFrame, base: pd.DataFrame, group: tuple[np.ndarray, list[str]],
                      kernel_us: np.ndarray) -> np.ndarray:
        """Per row, the envelope's bound on its kernel time (us) where the correction that answered it has one
        (``XGBCorrection.envelope_kernel_us``: GPUs the fit never saw); ``inf`` elsewhere and on devices with a
        few-shot adaptation (their own rows say how they run). ``kernel_us`` only saves work (rows already under
        the bound so far are priced on no further fitted GPU)."""
        bound = np.full(len(norm), np.inf)
        adapted = self._adapted_devices()
        keep = ~isin_fast(norm["device"], adapted) if adapted else np.ones(len(norm), dtype=bool)
        for corr in self.corrections:
            if not corr.fitted or not hasattr(corr, "envelope_kernel_us"):
                continue
            rows = _group_rows(group, corr.key) & keep
            if rows.any():
                bound[rows] = corr.envelope_kernel_us(norm[rows], base[rows], self.catalog, kernel_us[rows])
        return bound

    def _interval_floor(self, norm: pd.DataFrame, base: pd.DataFrame,
                        group: np.ndarray | tuple[np.ndarray, list[str]]) -> np.ndarray:
        """Per row, the physical lower bound of the interval (us): the floor of the correction that answered it
        (``floor_us``: a GPU GEMM does not beat its datasheet roofline, nor GPU attention streaming its K/V from
        DRAM its memory roofline); 0 elsewhere."""
        floor = np.zeros(len(norm))
        for corr in self.corrections:
            if not (corr.fitted and hasattr(corr, "floor_us")):
                continue
            rows = _group_rows(group, corr.key)
            if rows.any():
                floor[rows] = corr.floor_us(norm[rows], base[rows], self.catalog)
        return floor

    def _host(self, norm: pd.DataFrame, base: pd.DataFrame,
              group: np.ndarray | tuple[np.ndarray, list[str]], learned: bool = False) -> np.ndarray:
        """Per row, the fitted framework host dispatch (us) included in the prediction of the correction that
        answered it (``DispatchXGB.host_us``; 0 for the others and for kernel-only or CPU rows); ``learned``: the
        dispatch its trees learned inside the fitted GPUs' times instead (``DispatchXGB.learned_host_us``)."""
        host = np.zeros(len(norm))
        name = "learned_host_us" if learned else "host_us"
        for corr in self.corrections:
            if not corr.fitted or not hasattr(corr, name):
                continue
            rows = _group_rows(group, corr.key)
            if rows.any():
                host[rows] = getattr(corr, name)(norm, base, self.catalog)[rows]
        return host

    def predict_time(self, table: pd.DataFrame) -> np.ndarray:
        """Predicted ``time_us`` per row as a numpy array."""
        return self.predict(table, intervals=False)["time_us"].to_numpy()

    # ------------------------------------------------------------------ few-shot adaptation
    def adapt(self, table: pd.DataFrame, strategy: str = "auto") -> HybridPredictor:
        """A copy adapted to the device(s) in ``table`` (typically 5-50 measured rows of a new GPU).

        ``strategy`` (see :mod:`hybrid.corrections.adapt`, ``experiments/few_shot`` and
        ``experiments/h100_transfer``): ``"auto"`` (default: per device and correction, a scale, an additive per-op
        time or both, time = max(a * pred + b, roofline), the form chosen by cross-validation on ``table``'s
        rows, :func:`hybrid.corrections.adapt.choose_form`; plus extra trees on what it leaves from
        ``AUTO_BOOST_MIN_ROWS`` rows of a family on), ``"scale-trees"`` (the default before: a robust shrunken
        scale, plus those trees), ``"scale"`` (the scale alone), ``"boost"`` (extra XGBoost trees for that
        device; other corrections, or fewer than 3 rows of a family, use ``residual``), ``"residual"`` (one
        shrunken mean log-scale) or ``"shift"`` (one additive per-op time in us, for a new *host* whose framework
        dispatch differs from the training hosts'; :func:`hybrid.corrections.adapt.robust_shift`). The fitted
        constants are in :meth:`adaptation` and the saved manifest. ``self`` is not modified.
        """
        if strategy not in adapt_mod.STRATEGIES:
            raise InvalidInputError(f"unknown adaptation strategy {strategy!r}; known: {adapt_mod.STRATEGIES}")
        if isinstance(table, pd.DataFrame) and len(table) and "time_us" not in table.columns:
            raise InvalidInputError("adapt: the table of the new device's measurements has no 'time_us' column")
        norm, base = self._prepare(table, training=True)
        new = self.copy()
        devices = norm["device"].astype(str)
        if strategy != "auto":  # the record of an earlier auto fit (its form, its rows: its interval band) goes
            for per in new.adapt_forms.values():
                for dev in pd.unique(devices):
                    per.pop(dev, None)
        if strategy == "shift":
            time, _, group = new._raw(norm, base)
            labels = pd.Series(group.astype(str), index=norm.index) + "\x00" + devices
            shifts = adapt_mod.robust_shifts(norm["time_us"].to_numpy(dtype=np.float64), time,
                                             base["time_us"].to_numpy(dtype=np.float64), labels)
            for label, shift in shifts.items():
                key, dev = label.split("\x00")
                new.shifts.setdefault(key, {})[dev] = shift
                new.offsets.get(key, {}).pop(dev, None)  # the shift replaces an earlier scale of that pair
                new.tilts.get(key, {}).pop(dev, None)
                new.adapt_forms.get(key, {}).pop(dev, None)
            return new
        if strategy == "auto":
            time, _, group = new._raw(norm, base)
            labels = pd.Series(group.astype(str), index=norm.index) + "\x00" + devices
            fits = adapt_mod.choose_forms(norm["time_us"].to_numpy(dtype=np.float64), time,
                                          base["time_us"].to_numpy(dtype=np.float64), labels)
            new._boost_devices(norm, base, devices, adapt_mod.AUTO_BOOST_MIN_ROWS,
                               {lab: f.log_scale for lab, f in fits.items()},
                               {lab: f.shift_us for lab, f in fits.items()},
                               {lab: f.tilt for lab, f in fits.items() if f.tilt is not None})
            for label, fit in fits.items():
                key, dev = label.split("\x00")
                for store, value in ((new.offsets, fit.log_scale), (new.shifts, fit.shift_us)):
                    if value != 0.0:
                        store.setdefault(key, {})[dev] = value
                    else:
                        store.get(key, {}).pop(dev, None)
                if fit.tilt is not None:
                    new.tilts.setdefault(key, {})[dev] = fit.tilt.to_json()
                else:
                    new.tilts.get(key, {}).pop(dev, None)
                new.adapt_forms.setdefault(key, {})[dev] = fit.to_json()
            return new
        if strategy in ("scale", "scale-trees"):
            time, _, group = new._raw(norm, base)
            resid = np.log(norm["time_us"].to_numpy(dtype=np.float64)) - np.log(time)
            labels = pd.Series(group.astype(str), index=norm.index) + "\x00" + devices
            offs = adapt_mod.robust_offsets(resid, labels)
            if strategy == "scale-trees":
                new._boost_devices(norm, base, devices, adapt_mod.AUTO_BOOST_MIN_ROWS, offs)
        else:
            if strategy == "boost":
                new._boost_devices(norm, base, devices, 3, None)
            time, _, group = new._raw(norm, base)
            resid = np.log(norm["time_us"].to_numpy(dtype=np.float64)) - np.log(time)
            boosted = np.array([(g, d) in new.device_models for g, d in zip(group, devices, strict=True)], dtype=bool)
            labels = pd.Series(group.astype(str), index=norm.index) + "\x00" + devices
            offs = adapt_mod.residual_offsets(resid[~boosted], labels[~boosted])
        for label, off in offs.items():
            key, dev = label.split("\x00")
            new.offsets.setdefault(key, {})[dev] = off
            new.shifts.get(key, {}).pop(dev, None)  # the scale replaces an earlier shift of that pair
            new.tilts.get(key, {}).pop(dev, None)
            new.adapt_forms.get(key, {}).pop(dev, None)
        return new

    def _boost_devices(self, norm: pd.DataFrame, base: pd.DataFrame, devices: pd.Series, min_rows: int,
                       offsets: dict[str, float] | None, shifts: dict[str, float] | None = None,
                       tilts: dict[str, adapt_mod.Tilt] | None = None) -> None:
        """Per (XGBoost correction, device) with at least ``min_rows`` rows: a device model with extra trees,
        fitted to the residuals left after ``offsets[key + NUL + device]`` (log scale) when given, after
        ``tilts[key + NUL + device]`` (the measured times divided by its size factor) when given, and after
        ``shifts[key + NUL + device]`` (us, subtracted from the measured time first, which is kept above a tenth
        of itself) when given: prediction = trees * scale * tilt factor + shift."""
        for corr in self.corrections:
            if not (isinstance(corr, XGBCorrection) and corr.fitted):
                continue
            for dev in pd.unique(devices):
                rows = (devices == dev).to_numpy() & family_mask(base, corr.families)
                if rows.sum() >= min_rows:
                    shift = 0.0 if offsets is None else offsets.get(f"{corr.key}\x00{dev}", 0.0)
                    add = 0.0 if shifts is None else shifts.get(f"{corr.key}\x00{dev}", 0.0)
                    tilt = None if tilts is None else tilts.get(f"{corr.key}\x00{dev}")
                    fit_rows = norm.loc[rows]
                    if add != 0.0:
                        meas = fit_rows["time_us"].to_numpy(dtype=np.float64)
                        fit_rows = fit_rows.assign(time_us=np.maximum(meas - add, 0.1 * meas))
                    if tilt is not None:
                        factor = np.exp(tilt.log_factor(base.loc[rows, "time_us"].to_numpy(dtype=np.float64)))
                        fit_rows = fit_rows.assign(time_us=fit_rows["time_us"].to_numpy(dtype=np.float64) / factor)
                    base_model = self.device_models.get((corr.key, str(dev)), corr)
                    self.device_models[(corr.key, str(dev))] = base_model.continue_boosting(
                        fit_rows, base.loc[rows], self.catalog, rounds=adapt_mod.BOOST_ROUNDS,
                        learning_rate=adapt_mod.BOOST_LEARNING_RATE, target_offset=shift)

    def copy(self) -> HybridPredictor:
        """An independent copy (through the save format, so it is exactly what ``load`` would give)."""
        with tempfile.TemporaryDirectory(prefix="hybrid-copy-") as tmp:
            self.save(Path(tmp) / "p")
            return HybridPredictor.load(Path(tmp) / "p", catalog=self.catalog)

    # ------------------------------------------------------------------ scikit-learn's estimator protocol
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's arguments as given (scikit-learn's protocol: ``sklearn.base.clone(pred)`` builds a new,
        unfitted predictor from them). ``corrections`` given explicitly are the objects passed (a clone deep-copies
        them, fitted or not, as scikit-learn copies any parameter that is no estimator); the default (None) builds
        fresh ones. ``deep`` is accepted for the protocol; no parameter is an estimator itself."""
        return dict(self._init_params)

    def set_params(self, **params: Any) -> HybridPredictor:
        """Set constructor arguments (scikit-learn's protocol) and start over from them, as a new predictor of those
        arguments: the default corrections are built afresh (what was fitted or adapted is dropped); correction
        objects given explicitly are the same objects again (fit changes them in place: fitted ones stay fitted).
        An unknown name is refused."""
        unknown = sorted(set(params) - set(self._init_params))
        if unknown:
            raise InvalidInputError(f"HybridPredictor has no parameter(s) {unknown}; it has "
                                    f"{sorted(self._init_params)}")
        fresh = HybridPredictor(**{**self._init_params, **params})
        self.__dict__.clear()
        self.__dict__.update(fresh.__dict__)
        return self

    # ------------------------------------------------------------------ persistence
    def save(self, directory: str | os.PathLike) -> Path:
        """Write the predictor to ``directory`` (created or replaced atomically); returns its path.

        Only an empty directory or an earlier saved predictor (its ``manifest.json``) is replaced: anything else
        there (a file, a directory of other things) raises :class:`InvalidInputError` and is left as it was. The
        replacement deletes the old directory, so ``save("results")`` on a directory of one's own deleted it, and
        ``save("notes.txt")`` replaced the file with a directory (and left the file hidden beside it)."""
        target = Path(directory)
        if target.exists() and not target.is_dir():
            raise InvalidInputError(f"cannot save the predictor to {target}: it exists and is not a directory")
        if target.is_dir() and not (target / "manifest.json").is_file() and any(target.iterdir()):
            held = ", ".join(sorted(p.name for p in target.iterdir())[:5])
            raise InvalidInputError(f"cannot save the predictor to {target}: the directory is not a saved predictor "
                                    f"(it holds {held}) and saving replaces it; choose another directory")
        with atomic_directory(target) as tmp:
            entries = []
            for corr in self.corrections:
                entry = {"class": type(corr).__name__, "key": corr.key, "name": corr.name,
                         "families": list(corr.families), "fitted": corr.fitted}
                if corr.fitted:
                    corr.save(tmp / corr.key)
                    entry["dir"] = corr.key
                    if isinstance(corr, XGBCorrection):
                        entry["feature_names"] = corr.feature_names
                entries.append(entry)
            dev_models = []
            for i, ((key, dev), model) in enumerate(sorted(self.device_models.items())):
                sub = f"adapted-{i:03d}"
                model.save(tmp / sub)
                dev_models.append({"key": key, "device": dev, "class": type(model).__name__, "dir": sub})
            write_json(tmp / "manifest.json", {
                "format_version": FORMAT_VERSION, "versions": versions(), "seed": self.seed,
                "corrections": entries, "device_models": dev_models, "offsets": self.offsets, "shifts": self.shifts,
                "tilts": self.tilts, "adapt_forms": self.adapt_forms,
                "fit_info": self.fit_info, "data_digest": self.data_digest,
                "devices_seen": self.devices_seen, "systems_seen": self.systems_seen,
                "devices_fitted": self.devices_fitted, "dtypes_fitted": self.dtypes_fitted,
                "families_seen": self.families_seen, "family_dtypes": self.family_dtypes,
                "devices_sparse": self.devices_sparse,
                "intervals": None if self.intervals is None else self.intervals.to_json(),
            })
            write_json(tmp / "catalog.json", self._catalog_payload())
        return target

    def _catalog_payload(self) -> dict[str, Any]:
        devs = self.fitted_devices()
        systems = [self.catalog.systems[s] for s in self.systems_seen if s in self.catalog.systems]
        devs |= {s.device for s in systems}
        devices = [self.catalog.device(d) for d in sorted(devs) if self.catalog.resolve_device(d, missing_ok=True)]
        return {"devices": {d.key: d.to_entry() for d in devices}, "systems": {s.key: s.to_entry() for s in systems}}

    @classmethod
    def load(cls, directory: str | os.PathLike, catalog: Catalog | None = None) -> HybridPredictor:
        """Read a predictor written by :meth:`save`. Devices/systems it was fitted on that ``catalog`` (default:
        the packaged catalog) lacks are added from the saved ``catalog.json``."""
        d = Path(directory)
        if not d.is_dir():
            raise InvalidInputError(f"no saved predictor at {d}")
        manifest = read_json(d / "manifest.json")
        if manifest.get("format_version") != FORMAT_VERSION:
            raise InvalidInputError(f"{d}: unsupported predictor format {manifest.get('format_version')!r}")
        cat = catalog if catalog is not None else default_catalog()
        bundled = read_json(d / "catalog.json") if (d / "catalog.json").is_file() else {"devices": {}, "systems": {}}
        devices, systems = dict(cat.devices), dict(cat.systems)
        for key, entry in bundled.get("devices", {}).items():
            if cat.resolve_device(key, missing_ok=True) is None:
                devices[key] = Device.from_entry(key, entry)
        for key, entry in bundled.get("systems", {}).items():
            if cat.resolve_system(key, missing_ok=True) is None:
                systems[key] = System.from_entry(key, entry)
        if len(devices) != len(cat.devices) or len(systems) != len(cat.systems):
            cat = Catalog(devices, systems)
        corrections: list[Correction] = []
        for entry in manifest["corrections"]:
            klass = CORRECTION_CLASSES.get(entry["class"])
            if klass is None:
                raise InvalidInputError(f"{d}: unknown correction class {entry['class']!r}")
            corrections.append(klass.load(d / entry["dir"]) if entry.get("fitted") else klass())
        obj = cls(cat, corrections, seed=int(manifest.get("seed", 0)))
        for entry in manifest.get("device_models", []):
            klass = CORRECTION_CLASSES[entry["class"]]
            obj.device_models[(entry["key"], entry["device"])] = klass.load(d / entry["dir"])  # type: ignore[assignment]
        obj.offsets = {k: {dk: float(v) for dk, v in per.items()} for k, per in manifest.get("offsets", {}).items()}
        obj.shifts = {k: {dk: float(v) for dk, v in per.items()} for k, per in manifest.get("shifts", {}).items()}
        obj.tilts = {k: {dk: {n: float(x) for n, x in t.items()} for dk, t in per.items()}
                     for k, per in manifest.get("tilts", {}).items()}  # saves before the tilt form: none
        obj.adapt_forms = manifest.get("adapt_forms", {})
        obj.fit_info = manifest.get("fit_info", {})
        obj.data_digest = manifest.get("data_digest", "")
        obj.devices_seen = list(manifest.get("devices_seen", []))
        obj.systems_seen = list(manifest.get("systems_seen", []))
        obj.devices_fitted = {k: list(v) for k, v in manifest.get("devices_fitted", {}).items()}
        obj.dtypes_fitted = {k: {d: list(t) for d, t in per.items()}  # saves before it: no sibling band rows
                             for k, per in manifest.get("dtypes_fitted", {}).items()}
        obj.families_seen = list(manifest.get("families_seen", []))  # empty for saves before it was recorded
        obj.family_dtypes = {f: {d: list(t) for d, t in per.items()}  # likewise
                             for f, per in manifest.get("family_dtypes", {}).items()}
        # saves before the device floor: every fitted device counts as seen
        obj.devices_sparse = {k: list(v) for k, v in manifest.get("devices_sparse", {}).items()}
        obj.intervals = IntervalCalibration.from_json(manifest.get("intervals"))
        return obj

    # ------------------------------------------------------------------ reporting
    def adaptation(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Few-shot state per correction key and device: ``scale`` (efficiency ratio), ``shift_us`` (per-op host
        time, us), ``tilt`` (the scale's drift with size: the exponent ``c`` of (roofline / r0)^c, 0 without),
        ``boosted`` (extra trees) and, for strategy ``auto``, the chosen ``form`` and ``cv_loss``."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for key, per in self.offsets.items():
            for dev, off in per.items():
                out.setdefault(key, {}).setdefault(dev, {})["scale"] = float(np.exp(off))
        for key, per in self.shifts.items():
            for dev, b in per.items():
                out.setdefault(key, {}).setdefault(dev, {})["shift_us"] = float(b)
        for key, per in self.tilts.items():
            for dev, t in per.items():
                out.setdefault(key, {}).setdefault(dev, {})["tilt"] = float(t["slope"])
        for key, dev in self.device_models:
            out.setdefault(key, {}).setdefault(dev, {})["boosted"] = True
        for key, per in self.adapt_forms.items():
            for dev, fit in per.items():
                if dev in out.get(key, {}) or fit.get("form"):
                    entry = out.setdefault(key, {}).setdefault(dev, {})
                    entry.update({"form": fit.get("form"), "rows": fit.get("rows"), "cv_loss": fit.get("cv_loss", {})})
        for per in out.values():
            for entry in per.values():
                entry.setdefault("scale", 1.0)
                entry.setdefault("shift_us", 0.0)
                entry.setdefault("tilt", 0.0)
                entry.setdefault("boosted", False)
        return out

    def summary(self) -> dict[str, Any]:
        """What is fitted: families, devices and systems seen, row counts, adaptation state, versions."""
        fitted = [c for c in self.corrections if c.fitted]
        return {
            "fitted_families": sorted({f for c in fitted for f in c.families}),
            "corrections": {c.key: c.describe() for c in self.corrections},
            "fit_info": self.fit_info,
            "devices_seen": self.devices_seen,
            "systems_seen": self.systems_seen,
            "families_seen": self.families_seen,
            "devices_fitted": self.devices_fitted,
            "adapted_devices": sorted(self._adapted_devices()),
            # training devices with too few rows for the seen interval band, per correction (device floor)
            "devices_sparse": self.devices_sparse,
            "adaptation": self.adaptation(),
            "data_digest": self.data_digest,
            "versions": versions(),
        }


#: Columns of a measurement table that prediction never reads (the measured outcome and its spread).
MEASURED_COLUMNS = ("time_us", "time_us_std", "time_us_min", "time_us_max", "repeats")


def _check_seed(seed: Any, what: str, allow_none: bool = True) -> None:
    """A random seed: a whole number in [0, 2^63) (what numpy and XGBoost both take), or None where allowed (an
    argument that defaults to the predictor's own seed)."""
    if seed is None and allow_none:
        return
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise InvalidInputError(f"{what} must be a whole number >= 0{' (or None)' if allow_none else ''}, "
                                f"got {seed!r}")


def distinct_rows(table: pd.DataFrame, max_fraction: float | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """(position of the first row of every group of identical rows, group code per row), or None when more than
    ``max_fraction`` (default :data:`DEDUP_MAX_FRACTION`) of the rows are distinct or the check cannot be exact.

    Exact, no hashing: every column is factorised (missing values are one value) and the codes are combined into
    one integer per row. Text columns of Python objects must hold only strings (``1`` and ``1.0`` would compare
    equal in a factorisation although they are different inputs); otherwise None. Costs about 0.3 us per row and
    column; stops early once every row is known to be distinct."""
    limit = DEDUP_MAX_FRACTION if max_fraction is None else max_fraction
    n = len(table)
    if not table.columns.is_unique:
        return None
    combined = np.zeros(n, dtype=np.int64)
    size = 1
    for name in table.columns:
        try:
            codes, uniques = pd.factorize(table[name], use_na_sentinel=True)
        except TypeError:  # unhashable cells (lists, dicts): no de-duplication
            return None
        if uniques.dtype == object and not all(isinstance(u, str) for u in uniques):
            return None
        if len(uniques) > limit * n:  # one column already has too many distinct values: so do the rows
            return None
        k = len(uniques) + 1
        if size * k >= 2**62:  # keep the mixed-radix code inside int64: renumber the combinations seen so far
            combined, seen = pd.factorize(combined)
            size = len(seen)
            if size == n:
                return None
        combined = combined * k + (codes.astype(np.int64) + 1)
        size *= k
    codes, uniques = pd.factorize(combined)
    if len(uniques) > limit * n:
        return None
    _, first = np.unique(codes, return_index=True)
    return first, codes


def cross_kind_note(odd: dict[str, list[str]], catalog: Catalog) -> str:
    """The warning for :meth:`HybridPredictor._cross_kind_rows`' devices (``{device: correction keys}``)."""
    parts = []
    for dev, keys in odd.items():
        kind = catalog.device(dev).kind
        other = "GPUs" if kind == "cpu" else "CPUs" if kind == "gpu" else "other kinds of processor"
        parts.append(f"{dev} (a {kind.upper() if kind in ('cpu', 'gpu') else kind}: {', '.join(keys)} fitted on "
                     f"{other} only)")
    return (f"{'; '.join(parts)}: the model never measured a processor of this kind, so these corrections transfer "
            "across kinds (an H100's embedding lookups from a CPU profile came out 26-62% off, the roofline 72-97%; a "
            "CPU's kernels from an H100 profile worse than the roofline: docs/corrections.md) and their intervals are "
            "not calibrated for it: calibrate with measurements of one (`hybrid profile` on it)")


def _group_rows(group: np.ndarray | tuple[np.ndarray, list[str]], key: str) -> np.ndarray:
    """Rows whose group key (an array of keys, or (codes, keys) of :meth:`HybridPredictor._raw_codes`) is ``key``."""
    if isinstance(group, tuple):
        codes, keys = group
        return codes == keys.index(key) if key in keys else np.zeros(len(codes), dtype=bool)
    return group == key


def _text_array(names: list[Any], codes: np.ndarray) -> Any:
    """``np.array(names, dtype=object)[codes]`` (-1: missing) as the array a DataFrame would make of it (pandas'
    default text type), built from the few names instead of converting every row."""
    small = pd.Series(np.array(names, dtype=object)).array
    return small.take(np.asarray(codes, dtype=np.int64), allow_fill=True)


def _sample_all_distinct(table: pd.DataFrame) -> bool:
    """True when ``table`` (at least :data:`DEDUP_SAMPLE_MIN_ROWS` rows) has no two identical rows among a fixed
    random sample of :data:`DEDUP_SAMPLE_ROWS` rows (or cannot be de-duplicated at all): the full
    :func:`distinct_rows` check would then almost surely find too many distinct rows, so it is not worth running."""
    n = len(table)
    if n < DEDUP_SAMPLE_MIN_ROWS:
        return False
    pos = np.unique(np.random.default_rng(0).integers(0, n, DEDUP_SAMPLE_ROWS))
    found = distinct_rows(table.iloc[pos], max_fraction=1.0)
    return found is None or len(found[0]) == len(pos)


def _distinct_text(values: pd.Series) -> list[str]:
    """``pd.unique(values.dropna().astype(str))``: each distinct non-missing value as text, in order of first
    appearance, converted once per distinct value rather than per row."""
    _, uniques = pd.factorize(values, use_na_sentinel=True)
    return list(dict.fromkeys(str(u) for u in uniques))


def table_digest(table: pd.DataFrame) -> str:
    """SHA-256 over the defining columns of a canonical table (row order matters)."""
    cols = [c for c in _DIGEST_COLUMNS if c in table.columns]
    frame = table[cols].astype("string").fillna("")
    h = hashlib.sha256(",".join(cols).encode())
    h.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return h.hexdigest()


def versions() -> dict[str, str]:
    """Versions of the packages a saved predictor depends on."""
    import scipy
    import xgboost

    from hybrid import __version__

    return {"hybrid": __version__, "xgboost": xgboost.__version__, "numpy": np.__version__,
            "pandas": pd.__version__, "scipy": scipy.__version__}
