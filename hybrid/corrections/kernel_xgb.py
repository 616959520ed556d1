"""XGBoost kernel-efficiency corrections: learn ``log(measured / roofline)`` from op and device features.

Two instances are used by default: one for the GEMM family (gemm, bmm, linear, gemv, matmul) and one for the
bandwidth-bound row/pointwise kernels (elementwise, norm, softmax, attention). The target is the log of the
ratio of the measured time to the roofline time, so the model only has to learn the *efficiency* of a kernel
(which transfers across devices far better than absolute times), and the prediction is
``roofline_us * exp(model(features))`` (or ``reference_us``: a subclass may refine the analytical reference the
ratio is taken against, see :class:`~hybrid.corrections.embedding_xgb.EmbeddingXGB`).

With ``transfer=True`` (off by default) a second, *transfer* booster is fitted on features without the raw
device descriptors (only the vendor); rows of devices absent from the training data are predicted by it, rows
of training devices by the main booster. Device descriptors help in distribution but act as a device
identifier on an unseen GPU (``experiments/kernel_accuracy/results.md``), so each device gets the model that
is better for it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import xgboost as xgb

from hybrid.corrections.base import (
    Correction,
    device_dtype_pairs,
    family_mask,
    isin_fast,
    measured_log_ratio,
    read_json,
    str_codes,
    write_json,
)
from hybrid.corrections.features import (
    LATEST_FEATURE_VERSION,
    feature_arrays,
    feature_frame,
    feature_matrix,
    feature_names,
    kernel_timing,
)
from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import Catalog
from hybrid.ops.families import col, dtype_bytes_vec, factor_map
from hybrid.units import normalize_dtype

#: Feature-set version (:func:`~hybrid.corrections.features.feature_names`) each kernel model is fitted with
#: by default: one constant per model. GEMMs: version 4 (version 3's dtype path, power per SM and integer
#: arithmetic, plus the timing method and a fitted host-dispatch overhead in the reference); pointwise ops and
#: convolutions: version 3. Each gave the lowest mean leave-one-GPU-out error on the public sources
#: (``experiments/kernel_accuracy/results.md``). A saved
#: model records its own version and is rebuilt with it. (The embedding model's is
#: :data:`hybrid.corrections.embedding_xgb.EMBEDDING_FEATURE_VERSION`.)
GEMM_FEATURE_VERSION = 4
POINTWISE_FEATURE_VERSION = 3
CONV_FEATURE_VERSION = 3

#: Clip on the learned log-ratio: a kernel is never predicted faster than 1/20 of, or slower than 400x, the
#: roofline (guards extrapolation far outside the training data).
LOG_RATIO_CLIP = (np.log(1 / 20), np.log(400.0))
#: GPU attention rows moving more than this many times the last-level cache are DRAM streams: floored at their
#: roofline (:meth:`PointwiseXGB.floor_us`).
ATTENTION_DRAM_FLOOR_L2 = 2.0
#: Quantile of (measured - roofline) over the framework-timed GPU rows of one (device, framework) that estimates
#: the host dispatch overhead: the smallest kernels are almost pure overhead.
DISPATCH_QUANTILE = 0.05
#: Roofline time (us) under which a framework-timed GPU op is almost pure host dispatch: the ops whose measured
#: time estimates the dispatch (:meth:`DispatchXGB.fit_dispatch`), and how many a group needs.
DISPATCH_TINY_US = 5.0
DISPATCH_MIN_ROWS = 5
#: Largest measured GEMM shapes kept per dtype and kind for the sub-problem bound (:meth:`GemmXGB.split_bound_us`).
EXTENT_SHAPES = 32
#: Rows :func:`split_pieces` compares with the measured shapes at a time (bounds its memory: shapes x 4 x rows).
SPLIT_BLOCK_ROWS = 16384
#: Where the size extents of the GEMMs a model was fitted on are saved beside it.
EXTENTS_FILE = "extents.json"
#: A fitted GPU bounds the predictions of GPUs the fit never saw for a kind of op (family, dtype, roofline bound:
#: :func:`envelope_keys`) once it had at least this many rows of it (:meth:`XGBCorrection.envelope_log_ratio`).
ENVELOPE_MIN_ROWS = 5
#: Where the fitted GPUs of each kind of op (the envelope of unseen GPUs) are saved beside a model.
ENVELOPE_FILE = "envelope.json"
#: Dtypes one kind of op for the envelope (:func:`envelope_keys`): fp16 and bf16 run on the same units at the same
#: rate (the 16-bit tensor-core path; two bytes an element) on every catalog GPU that has both, so a GPU measured
#: in one bounds an unseen GPU in the other. Without it, a bf16 kernel was bounded by the few GPUs with bf16 rows
#: (Hopper profiles and XLA's H100) while fp16 ones of A100/A40 (Vidur) and nine DeepBench GPUs stood aside.
ENVELOPE_DTYPE_CLASS = {"fp16": "fp16/bf16", "bf16": "fp16/bf16"}
#: Rows one pricing call of the envelope costs in fixed overhead (roofline, features and booster calls of a few
#: rows: ~15 ms, the time of pricing ~6,000 rows, on the 2-core VM): once the rows still to price on every
#: remaining fitted GPU at once are fewer than this many per remaining round, they are priced in one call
#: (:meth:`XGBCorrection.envelope_log_ratio`; the bound is the same, only the number of calls changes).
ENVELOPE_CALL_ROWS = 4096
#: Margin key of the kinds of op with a single fitted GPU (:meth:`XGBCorrection.fit_envelope_margins`).
ENVELOPE_POOLED_KEY = "*"
#: Rows of each fitted GPU and kind of op the envelope's margin is measured on (:meth:`XGBCorrection.
#: fit_envelope_margins`; a fixed random draw: bounds the fit's extra pricing calls).
ENVELOPE_MARGIN_ROWS = 256
#: GEMM predictions (feature version 4 on) are at least this multiple of the roofline time.
GEMM_ROOFLINE_FLOOR = 1.0
#: A GEMM in a dtype the fit has no GEMM of is priced at the efficiency the model predicts for the same shape on
#: the same device in the first of these dtypes it was fitted on (:meth:`GemmXGB.dtype_proxy_us`): the same kind of
#: unit (tensor-core floating point), the next wider format. No public source times fp8 or fp4 GEMMs (XLA's fp8
#: rows run faster than the datasheet allows and are left out), so without it 1-byte floats were priced through
#: the trees' int8 leaves (DeepBench: the T4's IMMA GEMMs at 18% of peak).
UNSEEN_DTYPE_PROXY: dict[str, tuple[str, ...]] = {
    "fp8": ("bf16", "fp16"),
    "fp4": ("fp8", "bf16", "fp16"),
    "bf16": ("fp16",),
    "fp16": ("bf16",),
}


#: Rows below which a device's rows are up-weighted in a fit (:func:`device_floor_weights`). The few rows a user
#: measured on a new GPU (5-50), fitted beside thousands of public rows, otherwise barely move the trees: a
#: device with n < 100 rows (and under half the median device's) weighs 100 / n per row, as if it had 100. Not a physical constant: a statistical
#: weight chosen on the few-shot benchmark (`experiments/few_shot/results.md`: held-out GPUs refitted with 20 of
#: their rows, 10.0% unweighted, 9.1% with this floor; scratch runs with 3 seeds put 100 and 200 within 0.3 points
#: of each other, and only 100 left the error without any row of the GPU unchanged, 16.1%).
MIN_DEVICE_ROWS = 100


def floored_devices(devices: pd.Series, min_rows: int) -> pd.Series:
    """Rows per device, for the devices a fit up-weights: fewer than ``min_rows`` rows *and* fewer than half the
    median device's (where every device has about as few rows, none is singled out); empty when ``min_rows`` <= 0."""
    counts = devices.astype(str).value_counts()
    if min_rows <= 0 or counts.empty:
        return counts.iloc[:0]
    return counts[(counts < min_rows) & (counts < 0.5 * float(np.median(counts.to_numpy())))]


def device_floor_weights(devices: pd.Series, min_rows: int) -> np.ndarray | None:
    """Per-row weights that make every floored device (:func:`floored_devices`) count as ``min_rows`` rows
    (``min_rows / n`` for each of its ``n`` rows, 1 elsewhere); None when no device is floored."""
    few = floored_devices(devices, min_rows)
    if few.empty:
        return None
    n = devices.astype(str).map(few).to_numpy(np.float64)  # NaN for devices not floored
    return np.where(np.isnan(n), 1.0, float(min_rows) / np.where(np.isnan(n), 1.0, n))


@dataclass
class XGBParams:
    """Boosting hyper-parameters (defaults tuned lightly on NeuSight leave-one-GPU-out, see docs)."""

    n_estimators: int = 400
    max_depth: int = 7
    learning_rate: float = 0.06
    subsample: float = 0.8
    colsample_bytree: float = 0.8
    min_child_weight: float = 3.0
    reg_lambda: float = 1.0
    seed: int = 0
    #: XGBoost threads. 1 by default: on a shared 2-core machine OpenMP barriers with 2 threads made fits up to
    #: 50x slower (measured 9.6 s vs 0.18 s for 100 trees on 600 rows while other jobs ran)
    n_jobs: int = 1
    #: fit on at most this many rows (uniform random sub-sample, seeded); None = all rows
    max_rows: int | None = None
    #: a device with fewer rows than this in a fit weighs as if it had this many (:func:`device_floor_weights`);
    #: 0 = every row weighs 1
    min_device_rows: int = MIN_DEVICE_ROWS

    def __post_init__(self) -> None:
        """Refuse what would fit nonsense: n_estimators -3 fitted no tree (every prediction the same), a NaN
        learning rate predicted near the roofline, max_rows -5 was numpy's "negative dimensions are not allowed" and
        subsample 2 or a negative learning rate XGBoost's errors at fit."""
        def whole(name: str, low: int) -> None:
            v = getattr(self, name)
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < low:
                raise InvalidInputError(f"XGBParams.{name} must be a whole number >= {low}, got {v!r}")

        def real(name: str, low: float, high: float = np.inf, open_low: bool = False) -> None:
            v = getattr(self, name)
            ok = (isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
                  and (v > low if open_low else v >= low) and v <= high)
            if not ok:
                span = f"in ({low:g}, {high:g}]" if high < np.inf else (f"> {low:g}" if open_low else f">= {low:g}")
                raise InvalidInputError(f"XGBParams.{name} must be a finite number {span}, got {v!r}")

        whole("n_estimators", 1)
        whole("max_depth", 0)  # XGBoost: 0 = no depth limit
        whole("seed", 0)
        whole("min_device_rows", 0)
        if self.max_rows is not None:
            whole("max_rows", 1)
        real("learning_rate", 0.0, open_low=True)
        real("subsample", 0.0, 1.0, open_low=True)
        real("colsample_bytree", 0.0, 1.0, open_low=True)
        real("min_child_weight", 0.0)
        real("reg_lambda", 0.0)

    def booster_params(self) -> dict[str, Any]:
        return {
            "objective": "reg:squarederror", "tree_method": "hist", "max_depth": self.max_depth,
            "eta": self.learning_rate, "subsample": self.subsample, "colsample_bytree": self.colsample_bytree,
            "min_child_weight": self.min_child_weight, "lambda": self.reg_lambda, "seed": self.seed,
            "nthread": self.n_jobs,
        }


@dataclass
class _TrainingSummary:
    rows: int = 0
    devices: list[str] = field(default_factory=list)
    ops: dict[str, int] = field(default_factory=dict)
    train_rmse_log: float = float("nan")


def _booster_predict(booster: xgb.Booster, x: pd.DataFrame) -> np.ndarray:
    """Booster output for a feature frame (columns in the booster's feature order): ``inplace_predict`` on a
    contiguous float32 array, without building a DMatrix (about a third of the predict time on 200k rows)."""
    return _booster_array_predict(booster, np.ascontiguousarray(x.to_numpy(dtype=np.float32)))


def _booster_file(directory: Path, stem: str) -> Path:
    """A saved booster: ``STEM.ubj`` (binary, written since 2026-11-25), else ``STEM.json`` (older saves)."""
    ubj = Path(directory) / f"{stem}.ubj"
    if ubj.is_file():
        return ubj
    legacy = Path(directory) / f"{stem}.json"
    if legacy.is_file():
        return legacy
    raise InvalidInputError(f"{directory}: no saved booster {stem}.ubj (or {stem}.json)")


#: Blocks of at least this many rows are predicted on every core XGBoost's OpenMP runtime gives it (``nthread``
#: 0: all cores, or ``OMP_NUM_THREADS``); smaller ones on one thread. Measured on the 2-core VM with a loaded
#: model (every family, ``experiments/corrected_throughput``'s table of distinct rows): 200,000 rows 1.41 s on
#: one thread, 0.87 s on two; 20,000 rows 0.18 / 0.14 s; a block of a few hundred rows or fewer gains nothing
#: in wall time from a second thread, whose spinning costs up to 60% more CPU time. Fits keep
#: :attr:`XGBParams.n_jobs` (1).
PARALLEL_PREDICT_MIN_ROWS = 1_024


def prediction_threads(n_rows: int) -> int:
    """XGBoost ``nthread`` for predicting ``n_rows`` rows at once: 1 below :data:`PARALLEL_PREDICT_MIN_ROWS`,
    else 0 (all cores). Fits keep :attr:`XGBParams.n_jobs`; this applies to prediction only."""
    return 0 if n_rows >= PARALLEL_PREDICT_MIN_ROWS else 1


#: Feature blocks of at least this many rows are checked for repeated feature rows (:func:`repeated_feature_rows`).
FEATURE_DEDUP_MIN_ROWS = 4_096
#: Rows sampled (at fixed, distinct positions) to judge whether a block repeats enough feature rows to be worth
#: reducing to its distinct ones.
FEATURE_DEDUP_SAMPLE_ROWS = 2_048
#: A block is reduced when its estimated distinct feature rows are at most this fraction of its rows. Reducing
#: costs about 0.35 us per row (an exact sort of the rows' bytes); the trees cost 3-7 us per row (400 trees of
#: ~150 nodes, one or two cores), so the reduction pays from ~10% repeats on; 0.7 leaves a margin for the estimate.
FEATURE_DEDUP_MAX_FRACTION = 0.7


def repeated_feature_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(distinct rows of the C-contiguous float32 block ``x``, index of each row's distinct row), or None when the
    block is small or a sample says it repeats too few rows to gain from the reduction.

    Rows are compared by their bytes, so the reduction is exact: a tree ensemble's output is a function of the
    feature values alone, and rows with the same bytes have the same values (two spellings of one value, ``0.0``
    and ``-0.0``, count as different rows: a lost saving, never a wrong answer). The tables this matters for are
    distinct as rows but not as features: trace ops named per layer, a table with a row id or a rank column, the
    same shape on several GPUs of one kind of op in the unseen-GPU envelope. The estimate: ``c`` repeats among
    ``s`` sampled rows suggest about ``s**2 / (2 c)`` distinct rows (the birthday bound); no repeat, no
    reduction (a table of distinct shapes pays only the sample, ~0.5 ms)."""
    n = len(x)
    if n < FEATURE_DEDUP_MIN_ROWS or x.ndim != 2 or x.shape[1] == 0:
        return None
    rows = x.view(np.dtype((np.void, x.dtype.itemsize * x.shape[1]))).reshape(n)
    s = min(FEATURE_DEDUP_SAMPLE_ROWS, n)
    pos = np.random.default_rng(0).choice(n, s, replace=False)
    repeats = s - len(np.unique(rows[pos]))
    if repeats == 0 or s * s / (2.0 * repeats) > FEATURE_DEDUP_MAX_FRACTION * n:
        return None
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    if len(first) > FEATURE_DEDUP_MAX_FRACTION * n:
        return None
    return x[first], inverse.reshape(n)


def _booster_array_predict(booster: xgb.Booster, x: np.ndarray) -> np.ndarray:
    """Booster output for a float32 feature block (columns in the booster's feature order), on the threads of
    :func:`prediction_threads`. The thread count is the booster's own parameter (a booster loaded from a file
    has none, i.e. all cores; one fitted here has :attr:`XGBParams.n_jobs`), so it is set before every
    prediction (about 2 us) and a model predicts the same way however it was obtained. A large block that
    repeats feature rows has the trees walked once per distinct row (:func:`repeated_feature_rows`; exact)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    found = repeated_feature_rows(x)
    if found is not None:
        distinct, inverse = found
        return _booster_array_predict(booster, distinct)[inverse]
    booster.set_param({"nthread": prediction_threads(len(x))})
    return np.asarray(booster.inplace_predict(x, validate_features=False), dtype=np.float64)


def _sorted_codes(codes: np.ndarray, n: int) -> np.ndarray:
    """``np.unique(codes)`` for integer codes in ``[0, n)``, by marking instead of sorting (linear time)."""
    seen = np.zeros(n, dtype=bool)
    seen[codes] = True
    return np.flatnonzero(seen)


def _gpu_rows(table: pd.DataFrame, catalog: Catalog) -> np.ndarray:
    """True for the rows of ``table`` on a GPU."""
    return catalog.device_column(table["device"], lambda d: d.kind == "gpu", False).astype(bool)


def _dtype_codes(table: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """(code per row, normalised dtype name per code): ``fp32`` for a missing dtype or a table without the column
    (the schema's default); the names are normalised once per distinct string, not per row."""
    if "dtype" not in table.columns:
        return np.zeros(len(table), dtype=np.int64), ["fp32"]
    dt_codes, dt_raw = str_codes(table["dtype"])
    dt_names = [normalize_dtype(d) for d in dt_raw] + ["fp32"]
    return np.where(dt_codes < 0, len(dt_names) - 1, dt_codes), dt_names


def envelope_keys(table: pd.DataFrame, baseline: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """(code per row, its ``family|dtype|bound`` key per code): the kind of op an unseen GPU's prediction is
    bounded within (:meth:`XGBCorrection.envelope_log_ratio`): the op family, the dtype (normalised; ``fp32``
    without a ``dtype`` column) and which roofline term bounds the row on its own device (``compute``,
    ``memory``, ``latency``); the strings are built once per distinct triple, not per row. fp16 and bf16 are one
    dtype here (``fp16/bf16``, :data:`ENVELOPE_DTYPE_CLASS`)."""
    dt_codes, dt_raw = _dtype_codes(table)
    cls_codes, cls_names = pd.factorize(np.array([ENVELOPE_DTYPE_CLASS.get(d, d) for d in dt_raw], dtype=object))
    dt_codes, dt_names = np.asarray(cls_codes, dtype=np.int64)[dt_codes], [str(d) for d in cls_names]
    fam = pd.Categorical(baseline["family"])
    bound = pd.Categorical(baseline["bound"])
    nd, nb = len(dt_names), max(len(bound.categories), 1)
    combo = (np.asarray(fam.codes, dtype=np.int64) * nd + dt_codes.astype(np.int64)) * nb \
        + np.asarray(bound.codes, dtype=np.int64)
    uniques, codes = np.unique(combo, return_inverse=True)
    keys = [f"{fam.categories[u // (nd * nb)]}|{dt_names[(u // nb) % nd]}|{bound.categories[u % nb]}"
            for u in uniques]
    return np.asarray(codes).reshape(-1), keys


def envelope_classes(envelope: dict[str, list[str]]) -> dict[str, list[str]]:
    """Saved envelope devices with their keys' dtypes in :data:`ENVELOPE_DTYPE_CLASS`: a model saved before fp16
    and bf16 were one kind of op has ``gemm|fp16|compute`` and ``gemm|bf16|compute``; they become one
    ``gemm|fp16/bf16|compute`` listing the GPUs of both (each once, in order of appearance: the order only saves
    work, :func:`fit_envelope`)."""
    out: dict[str, list[str]] = {}
    for key, devices in envelope.items():
        parts = str(key).split("|")
        if len(parts) == 3:
            parts[1] = ENVELOPE_DTYPE_CLASS.get(parts[1], parts[1])
        merged = out.setdefault("|".join(parts), [])
        merged.extend(str(d) for d in devices if str(d) not in merged)
    return dict(sorted(out.items()))


def fit_envelope(table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
                 min_rows: int = ENVELOPE_MIN_ROWS) -> dict[str, list[str]]:
    """Per kind of op (:func:`envelope_keys`), the GPUs of ``table`` with at least ``min_rows`` rows of it:
    the measured GPUs whose predictions bound those of GPUs the fit never saw. Each kind lists its GPUs from the
    least efficient (highest median measured time over roofline) to the most, ties by name: the order only saves
    work (:meth:`XGBCorrection.envelope_log_ratio` visits the loosest bounds first), the bound is the same."""
    gpu = _gpu_rows(table, catalog)
    if not gpu.any():
        return {}
    codes, keys = envelope_keys(table, baseline)
    ratio = np.log(np.maximum(pd.to_numeric(table["time_us"], errors="coerce").to_numpy(dtype=np.float64), 1e-30)
                   / np.maximum(baseline["time_us"].to_numpy(dtype=np.float64), 1e-30))
    stats = pd.DataFrame({"k": codes[gpu], "d": table["device"].astype(str).to_numpy()[gpu],
                          "r": ratio[gpu]}).groupby(["k", "d"])["r"].agg(["size", "median"]).reset_index()
    stats = stats[stats["size"] >= min_rows].sort_values(["k", "median", "d"], ascending=[True, False, True],
                                                         kind="stable")
    out: dict[str, list[str]] = {}
    for k, d in zip(stats["k"].to_numpy(), stats["d"].to_numpy(), strict=True):
        out.setdefault(keys[int(k)], []).append(str(d))
    return dict(sorted(out.items()))


class XGBCorrection(Correction):
    """Shared machinery of the XGBoost corrections: features -> log-ratio -> roofline * exp(prediction)."""

    kind: ClassVar[str] = ""
    name = "kernel-xgb"
    families: tuple[str, ...] = ()
    #: default of the ``transfer`` argument (a second booster for devices absent from the training data)
    default_transfer: ClassVar[bool] = False
    #: default of the ``feature_version`` argument: each model class names its own constant
    #: (:data:`GEMM_FEATURE_VERSION`, :data:`POINTWISE_FEATURE_VERSION`, ``EMBEDDING_FEATURE_VERSION``)
    default_feature_version: ClassVar[int] = LATEST_FEATURE_VERSION
    #: whether a fit records the envelope of GPUs it never saw (:meth:`envelope_log_ratio`)
    default_envelope: ClassVar[bool] = False

    def __init__(self, params: XGBParams | None = None, use_device_features: bool = True,
                 feature_version: int | None = None, transfer: bool | None = None):
        #: record the envelope at :meth:`fit` and apply it at predict (:meth:`envelope_log_ratio`); an experiment
        #: may switch it off on a fitted model to compare
        self.use_envelope = self.default_envelope
        #: per kind of op (``family|dtype|bound``, :func:`envelope_keys`), the fitted GPUs with at least
        #: :data:`ENVELOPE_MIN_ROWS` rows of it (:func:`fit_envelope`); empty: no envelope
        self.envelope_devices: dict[str, list[str]] = {}
        #: per kind of op, the factor on kernel time per roofline an unseen GPU may sit beyond the fitted GPUs
        #: (:meth:`XGBCorrection.fit_envelope_margins`; key :data:`ENVELOPE_POOLED_KEY` for the kinds it has no spread of);
        #: empty (a model saved before margins): 1, the fitted GPUs' own bound
        self.envelope_margins: dict[str, float] = {}
        self.params = params or XGBParams()
        self.use_device_features = use_device_features
        self.feature_version = int(self.default_feature_version if feature_version is None else feature_version)
        feature_names(self.kind, use_device_features, self.feature_version)  # validates the version
        self.transfer = (self.default_transfer if transfer is None else bool(transfer)) and self.feature_version >= 2
        self.booster: xgb.Booster | None = None
        self.transfer_booster: xgb.Booster | None = None
        self.summary = _TrainingSummary()
        self._fitted = False

    # ------------------------------------------------------------------ features
    def features(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
                 transfer: bool = False) -> pd.DataFrame:
        names = self.transfer_feature_names if transfer else self.feature_names
        return feature_frame(self.feature_arrays(table, baseline, catalog, transfer), names, table.index)

    def feature_arrays(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
                       transfer: bool = False) -> dict[str, np.ndarray]:
        """Every feature :meth:`features` may return, by name, as per-row arrays (no frame)."""
        return feature_arrays(self.kind, table, baseline, catalog, self.use_device_features, self.feature_version,
                              transfer)

    def _blocks(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog, transfer: bool,
                picks: list[tuple[np.ndarray | None, list[str]]]) -> list[np.ndarray]:
        """Float32 booster inputs (the values of ``features(...).to_numpy(np.float32)``): one block per
        (rows, feature names) in ``picks``, all read from one feature computation over ``table``'s rows."""
        if type(self).features is not XGBCorrection.features:  # a subclass building its own frame: use it
            frame = self.features(table, baseline, catalog, transfer)
            return [np.ascontiguousarray((frame if rows is None else frame[rows])[names].to_numpy(dtype=np.float32))
                    for rows, names in picks]
        arrays = self.feature_arrays(table, baseline, catalog, transfer)
        return [feature_matrix(arrays, names, rows) for rows, names in picks]

    @property
    def feature_names(self) -> list[str]:
        return feature_names(self.kind, self.use_device_features, self.feature_version)

    @property
    def transfer_feature_names(self) -> list[str]:
        return feature_names(self.kind, self.use_device_features, self.feature_version, transfer=True)

    def reference_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Analytical time the learned log-ratio is relative to (the roofline here)."""
        return baseline["time_us"].to_numpy(dtype=np.float64)

    def label_lift_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Per row, what the fit adds to its measured time to make it the time the trees learn (us): none here
        (:meth:`DispatchXGB.label_lift_us`: the learned dispatch, on kernel-timed rows of eager-timed GPUs)."""
        return np.zeros(len(table))

    def _target(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        ref = self.reference_us(table, baseline, catalog)
        y = measured_log_ratio(table, baseline) + np.log(baseline["time_us"].to_numpy(dtype=np.float64)) - np.log(ref)
        lift = self.label_lift_us(table, baseline, catalog)
        if lift.any():  # measured_log_ratio has checked every time is positive and finite
            y = y + np.log1p(lift / pd.to_numeric(table["time_us"], errors="coerce").to_numpy(dtype=np.float64))
        return y

    def _unseen(self, table: pd.DataFrame) -> np.ndarray:
        """Rows whose device the main booster was not trained on (predicted by the transfer booster)."""
        if self.transfer_booster is None:
            return np.zeros(len(table), dtype=bool)
        return ~isin_fast(table["device"], self.summary.devices)

    def _select(self, table: pd.DataFrame, baseline: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        mask = family_mask(baseline, self.families)
        return table.loc[mask], baseline.loc[mask]

    # ------------------------------------------------------------------ fit / predict
    def fit(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
            sample_weight: np.ndarray | None = None) -> XGBCorrection:
        sub, base = self._select(table, baseline)
        if len(sub) == 0:
            raise InvalidInputError(f"{self.key}: no rows of families {self.families} to fit on")
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)[family_mask(baseline, self.families)]
        if self.params.max_rows is not None and len(sub) > self.params.max_rows:
            rng = np.random.default_rng(self.params.seed)
            keep = np.sort(rng.choice(len(sub), self.params.max_rows, replace=False))
            sub, base = sub.iloc[keep], base.iloc[keep]
            w = None if w is None else w[keep]
        floor = device_floor_weights(sub["device"], self.params.min_device_rows)
        if floor is not None:
            w = floor if w is None else w * floor
        y = self._target(sub, base, catalog)
        x = self.features(sub, base, catalog)
        dtrain = xgb.DMatrix(x.to_numpy(), label=y, weight=w, feature_names=self.feature_names)
        self.booster = xgb.train(self.params.booster_params(), dtrain, num_boost_round=self.params.n_estimators)
        pred = self.booster.predict(dtrain)
        self.transfer_booster = None
        if self.transfer:
            xt = self.features(sub, base, catalog, transfer=True)
            dt = xgb.DMatrix(xt.to_numpy(), label=y, weight=w, feature_names=self.transfer_feature_names)
            self.transfer_booster = xgb.train(self.params.booster_params(), dt, num_boost_round=self.params.n_estimators)
        self.envelope_devices = fit_envelope(sub, base, catalog) if self.use_envelope else {}
        self.envelope_margins = self.fit_envelope_margins(sub, base, catalog) if self.envelope_devices else {}
        self.summary = _TrainingSummary(
            rows=len(sub), devices=sorted(map(str, pd.unique(sub["device"]))),
            ops={str(k): int(v) for k, v in sub["op"].value_counts().items()},
            train_rmse_log=float(np.sqrt(np.mean((pred - y) ** 2))),
        )
        self._fitted = True
        return self

    def _family_rows(self, table: pd.DataFrame, baseline: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame,
                                                                             pd.DataFrame]:
        """(mask of this correction's rows, those rows of ``table``, of ``baseline``); no copy when every row is
        of this correction's families."""
        mask = family_mask(baseline, self.families)
        if mask.all():
            return mask, table, baseline
        return mask, table.loc[mask], baseline.loc[mask]

    def _log_ratio_rows(self, sub: pd.DataFrame, base: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Clipped learned log-ratio for rows that are all of this correction's families.

        One feature block is built for every row (float32, the booster's input) when the transfer booster's
        features are a subset of the main booster's (always with device features); each booster then reads its
        rows and columns of that block, so no row subset of the input frames is copied."""
        unseen = self._unseen(sub)
        names, tnames = self.feature_names, self.transfer_feature_names
        ratio = np.empty(len(sub))
        if not unseen.any():
            (x,) = self._blocks(sub, base, catalog, False, [(None, names)])
            ratio[:] = _booster_array_predict(self.booster, x)  # type: ignore[arg-type]
        elif set(tnames) <= set(names):
            seen = ~unseen
            picks = ([(seen, names)] if seen.any() else []) + [(unseen, tnames)]
            blocks = self._blocks(sub, base, catalog, False, picks)
            if seen.any():
                ratio[seen] = _booster_array_predict(self.booster, blocks[0])  # type: ignore[arg-type]
            ratio[unseen] = _booster_array_predict(self.transfer_booster, blocks[-1])  # type: ignore[arg-type]
        else:
            if (~unseen).any():
                (x,) = self._blocks(sub.loc[~unseen], base.loc[~unseen], catalog, False, [(None, names)])
                ratio[~unseen] = _booster_array_predict(self.booster, x)  # type: ignore[arg-type]
            (x,) = self._blocks(sub.loc[unseen], base.loc[unseen], catalog, True, [(None, tnames)])
            ratio[unseen] = _booster_array_predict(self.transfer_booster, x)  # type: ignore[arg-type]
        if self.use_envelope and self.envelope_devices:
            ratio = np.minimum(ratio, self.envelope_log_ratio(sub, base, catalog, ratio))
        return np.clip(ratio, *LOG_RATIO_CLIP)

    def envelope_log_ratio(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
                           log_ratio: np.ndarray | None = None) -> np.ndarray:
        """Per row (all of this correction's families), the largest learned log-ratio its prediction may take.

        For a GPU row whose device the fit never saw: the main booster predicts the same row (same shape, dtype,
        timing) on each fitted GPU that had at least :data:`ENVELOPE_MIN_ROWS` rows of its kind of op
        (:attr:`envelope_devices`, :func:`envelope_keys`); the largest kernel time per roofline among them
        (prediction minus its host dispatch, :meth:`host_part_us`, over that GPU's roofline of the row) is put
        on the row's own roofline times the kind's margin (:attr:`envelope_margins`, :meth:`XGBCorrection.fit_envelope_margins`:
        how far a measured GPU sat beyond all the others), plus the largest host dispatch of those predictions and
        the row's own. A kernel on a GPU never measured is priced no further from its roofline than the model
        prices it, in distribution, on the least efficient measured GPU, by as much as a measured GPU was. Rows whose roofline is under that host dispatch are
        left to the trees: the host, not the GPU, sets their time, and the measured machines' hosts say nothing
        of an unseen one's (quickstart's data with the H200 held out: its VM's eager floor is ~10 us above the
        H100 VM's, and a bound on those rows took its held-out error from 16.7 to 17.7%); a consumer that takes
        the host part off bounds their kernel time instead (:meth:`envelope_kernel_us`). ``+inf`` elsewhere:
        fitted devices, CPUs, kinds of op no fitted GPU had.

        Without it the trees extrapolate device features (the intensity over the device's ridge, its bandwidth
        per SM) into corners the fit filled with other kernels: quickstart's model priced an H20's bf16 decode
        attention at 12.5x its memory bound (the H200's fp32 decode fallbacks at 47x sit at that intensity over
        the ridge) and an L40S's fp16 decode GEMVs at 2.1x (split with the 70 W T4).

        ``log_ratio`` (the rows' learned log-ratio, optional) only saves work: the fitted GPUs are visited one at a
        time and a row whose ``log_ratio`` is already under the bound so far is not priced on the next (the bound
        only grows), so such a row may get a looser value than the full bound, never one that changes
        ``min(log_ratio, bound)``."""
        cap = np.full(len(table), np.inf)
        todo = self._envelope_rows(table, catalog)
        if not todo.any():
            return cap
        roof = baseline["time_us"].to_numpy(dtype=np.float64)
        host = self.host_part_us(table, baseline, catalog)
        todo &= roof >= host  # host-bound on its own: the host allowance only grows below
        idx = np.flatnonzero(todo)
        if not len(idx):
            return cap
        ref = self.reference_us(table, baseline, catalog)[idx]
        roof_i, host_i = roof[idx], host[idx]
        lr = None if log_ratio is None else np.asarray(log_ratio, dtype=np.float64)[idx]

        def settled(kernel: np.ndarray, host_g: np.ndarray) -> np.ndarray:
            # under the bound so far, or host-bound: the answer is already known
            h = np.maximum(host_i, host_g)
            return (lr <= np.log(np.maximum(kernel * roof_i + h, 1e-30) / ref)) | (roof_i < h)  # type: ignore[operator]

        kernel, host_g = self._envelope_scan(table, baseline, catalog, idx, None if lr is None else settled)
        h = np.maximum(host_i, host_g)
        bounded = np.isfinite(kernel) & (roof_i >= h)
        cap[idx] = np.where(bounded, np.log(np.maximum(np.where(bounded, kernel * roof_i + h, 1.0), 1e-30) / ref),
                            np.inf)
        return cap

    def envelope_kernel_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
                           kernel_us: np.ndarray | None = None) -> np.ndarray:
        """Per row (all of this correction's families), for the host-bound rows :meth:`envelope_log_ratio` leaves
        to the trees (a GPU the fit never saw, roofline under the host dispatch its prediction or a fitted GPU's
        includes, :meth:`host_part_us`, :meth:`fitted_host_max_us`): the most *kernel* time (us, that host dispatch left out) the row may take, the
        largest kernel time per roofline the main booster gives the same row on the fitted GPUs of its kind of op
        (:attr:`envelope_devices`; a kind no fitted GPU had enough rows of takes the fitted GPUs of its family and
        dtype, :meth:`_kind_fallback`) times the row's own roofline. ``+inf`` elsewhere: every other row keeps
        :meth:`envelope_log_ratio`'s bound, and what the prediction did after it (the GEMM sibling blend).

        For consumers that price kernels only (the dispatch taken off: LLM inference under CUDA graphs,
        :class:`hybrid.engine.costs.KernelTimeModel` with ``learned_dispatch``). The envelope leaves host-bound rows
        out because their time is the host's, and the measured machines' hosts say nothing of an unseen one's; with
        the host part taken off that no longer matters, and what the trees' answer keeps of such a row is mostly
        their guess of that host: quickstart's model priced an H20's decode attention kernel at batch 1-32 at
        10-20x its roofline after ~24 us of learned dispatch came off (the fitted H200 at 1.4-7.5x), and the LLM
        builders' batch envelope carried that up to batch 64. Tiny ops are latency-bound, and quickstart's data has
        no GPU with 5 latency-bound attention rows, hence the family fall-back: the trees have no kernel price of
        such a row to keep. (Tried on every unseen-GPU row instead: the bound also clipped the GEMM sibling blend
        of ``experiments/llm_training``'s unseen A100 40GB, MPT runs 4.0 -> 5.0% geomean.)

        ``kernel_us`` (the rows' kernel time as predicted, optional) only saves work, as ``log_ratio`` does there:
        a row already under the bound so far is priced on no further GPU, so it may get a looser value, never one
        that changes ``min(kernel_us, bound)``."""
        cap = np.full(len(table), np.inf)
        todo = self._envelope_rows(table, catalog)
        if not todo.any():
            return cap
        roof = baseline["time_us"].to_numpy(dtype=np.float64)
        # the envelope bounds a row only once its roofline is over its own host part and the fitted GPUs' (the
        # H20's decode attention at 26-28 us of roofline sat between quickstart's ~24 and ~29 us)
        todo &= roof < np.maximum(self.host_part_us(table, baseline, catalog), self.fitted_host_max_us())
        idx = np.flatnonzero(todo)
        if not len(idx):
            return cap
        roof_i = roof[idx]
        now = None if kernel_us is None else np.asarray(kernel_us, dtype=np.float64)[idx]

        def settled(kernel: np.ndarray, host_g: np.ndarray) -> np.ndarray:
            return now <= kernel * roof_i  # type: ignore[operator]

        kernel, _ = self._envelope_scan(table, baseline, catalog, idx, None if now is None else settled,
                                        fallback=True)
        cap[idx] = np.where(np.isfinite(kernel), np.maximum(kernel, 0.0) * roof_i, np.inf)
        return cap

    def fit_envelope_margins(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
                             rows_per_gpu: int = ENVELOPE_MARGIN_ROWS) -> dict[str, float]:
        """Per kind of op (:func:`envelope_keys`), how far (a factor >= 1 on kernel time per roofline) a GPU the
        fit never saw may sit beyond the envelope of the fitted ones: the envelope's own leave-one-GPU-out miss on
        the measurements. Each fitted GPU of a kind (:attr:`envelope_devices`, two or more) is taken out in turn:
        its measured rows of the kind (kernel time: the host dispatch the model's prediction includes taken off,
        :meth:`host_part_us`; rows whose roofline is over it, the rows the envelope bounds; at most
        ``rows_per_gpu`` of them) are set against the bound the *other* fitted GPUs give the same rows (the main
        booster's largest kernel time per roofline among them, as :meth:`envelope_log_ratio`); the median excess of
        measured over bound is how far beyond the others that GPU sits. The kind's margin is the largest such
        excess (1 where every GPU sits inside the others). A kind with a single fitted GPU has no spread to
        measure: it takes the median margin of the kinds that have one, under key :data:`ENVELOPE_POOLED_KEY`
        (1 where none has).

        Without it the bound assumes the least efficient measured GPU is the least efficient there is: on
        NeuSight's end-to-end labels with each GPU held out, the MI100 and MI250 (ROCm fp32 GEMMs further from
        their matrix-core roofline than any NVIDIA GPU's) were priced 2-9% too fast (4.4 / 4.5% geomean against
        1.5 / 3.6% with no envelope)."""
        multi = {k: devs for k, devs in self.envelope_devices.items() if len(devs) >= 2}
        out: dict[str, float] = {}
        if multi and len(table):
            roof = baseline["time_us"].to_numpy(dtype=np.float64)
            host = self.host_part_us(table, baseline, catalog)
            # the times as the trees learned them (kernel-timed rows of eager GPUs lifted by their dispatch), so
            # that measured less the host part is each row's kernel time whatever its timing
            measured = (pd.to_numeric(table["time_us"], errors="coerce").to_numpy(dtype=np.float64)
                        + self.label_lift_us(table, baseline, catalog))
            usable = _gpu_rows(table, catalog) & (roof >= host) & np.isfinite(measured) & (roof > 0)
            codes, keys = envelope_keys(table, baseline)
            code_of = {k: c for c, k in enumerate(keys)}
            dev = table["device"].astype(str).to_numpy()
            order = np.random.default_rng(0).permutation(len(table))  # the sample: a fixed draw per GPU and kind
            rows, against, tags = [], [], []  # per GPU taken out: rows priced, GPUs they are priced on, (kind, rows)
            for key, devs in multi.items():
                if key not in code_of:
                    continue
                in_kind = order[(codes[order] == code_of[key]) & usable[order]]
                for d in devs:
                    mine = in_kind[dev[in_kind] == d][:rows_per_gpu]
                    others = [o for o in devs if o != d and catalog.resolve_device(o, missing_ok=True)]
                    if not len(mine) or not others:
                        continue
                    rows.append(np.tile(mine, len(others)))
                    against.append(np.repeat(np.array(others, dtype=object), len(mine)))
                    tags.append((key, mine))
            if rows:
                ratio, _ = self._kernel_ratio_on(table, np.concatenate(rows), np.concatenate(against), catalog)
                at = 0
                for (key, mine), r in zip(tags, rows, strict=True):
                    bound = ratio[at:at + len(r)].reshape(-1, len(mine)).max(axis=0)
                    at += len(r)
                    own = np.maximum(measured[mine] - host[mine], 1e-30) / roof[mine]
                    excess = float(np.median(np.log(own / np.maximum(bound, 1e-30))))
                    out[key] = max(out.get(key, 1.0), float(np.exp(max(excess, 0.0))))
        pooled = float(np.median(list(out.values()))) if out else 1.0
        return {**dict(sorted(out.items())), ENVELOPE_POOLED_KEY: pooled}

    def _kernel_ratio_on(self, table: pd.DataFrame, rows: np.ndarray, devices: np.ndarray, catalog: Catalog
                         ) -> tuple[np.ndarray, np.ndarray]:
        """``table``'s rows ``rows`` moved to ``devices`` (one per row) and priced by the main booster: (kernel
        time per roofline on that device, the host dispatch the price includes, :meth:`host_part_us`)."""
        from hybrid.ops.roofline import roofline

        # the devices as a categorical, as the predictor's own rows have them: every later look-up by device
        # (roofline, features, GPU rows) works on a few codes, not on a text per row
        d_codes, d_names = pd.factorize(np.asarray(devices, dtype=object))
        moved = table.iloc[rows].reset_index(drop=True).assign(
            device=pd.Categorical.from_codes(d_codes, categories=pd.Index(d_names, dtype=object)))
        moved_base = roofline(moved, catalog)
        (x,) = self._blocks(moved, moved_base, catalog, False, [(None, self.feature_names)])
        moved_us = self.reference_us(moved, moved_base, catalog) * np.exp(
            _booster_array_predict(self.booster, x))  # type: ignore[arg-type]
        moved_host = self.host_part_us(moved, moved_base, catalog)
        return np.maximum(moved_us - moved_host, 0.0) / moved_base["time_us"].to_numpy(dtype=np.float64), moved_host

    def _envelope_rows(self, table: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Rows the envelope may bound: GPU rows whose device the fit never saw (none without an envelope)."""
        if not (self.use_envelope and self.envelope_devices) or self.booster is None or not len(table):
            return np.zeros(len(table), dtype=bool)
        todo = ~isin_fast(table["device"], self.summary.devices)
        return todo & _gpu_rows(table, catalog) if todo.any() else todo

    def _kind_fallback(self, key: str) -> list[str]:
        """For a kind of op (``family|dtype|bound``) no fitted GPU had enough rows of: the fitted GPUs of the same
        family and dtype under any bound (each once, in :attr:`envelope_devices` order)."""
        stem = key.rsplit("|", 1)[0] + "|"
        return list(dict.fromkeys(d for k, devs in self.envelope_devices.items() if k.startswith(stem) for d in devs))

    def _envelope_scan(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog, idx: np.ndarray,
                       settled: Callable[[np.ndarray, np.ndarray], np.ndarray] | None, fallback: bool = False
                       ) -> tuple[np.ndarray, np.ndarray]:
        """For ``table``'s rows ``idx``: (the largest kernel time per roofline, the largest host dispatch) of the
        main booster's prices of each row on the fitted GPUs of its kind of op (:attr:`envelope_devices`; with
        ``fallback``, a kind no fitted GPU had takes the GPUs of its family and dtype, :meth:`_kind_fallback`);
        ``-inf`` and 0 for rows of a kind no fitted GPU had. The kernel time per roofline includes the kind's
        margin beyond the fitted GPUs (:attr:`envelope_margins`). ``settled(kernel, host)`` (optional, per row of
        ``idx``, from the values so far) names the rows whose answer is already known: they are priced on no
        further GPU."""
        codes, keys = envelope_keys(table, baseline)
        # one pricing per (shape, kind of op): rows that differ only in their unseen device are the same row on a
        # fitted GPU (a sweep over GPUs, `--compare`), so each such group is priced once per fitted GPU
        from hybrid.corrections.predictor import distinct_rows
        from hybrid.data.schema import COLUMN_BY_NAME

        # the schema's columns (what features and roofline read), not a caller's own (a row id, a label)
        shape_cols = [c for c in table.columns if c in COLUMN_BY_NAME and c != "device"]
        # (the rows and columns in one take: not every column of the rows first)
        found = distinct_rows(table.iloc[idx, [table.columns.get_loc(c) for c in shape_cols]]
                              .assign(_kind=codes[idx]), max_fraction=1.0)
        first, group = (np.arange(len(idx)), np.arange(len(idx))) if found is None else found
        kernel_g = np.full(len(first), -np.inf)  # per group: kernel time per roofline, the largest so far
        # per group: its kind's margin beyond the fitted GPUs (:meth:`XGBCorrection.fit_envelope_margins`)
        pooled = self.envelope_margins.get(ENVELOPE_POOLED_KEY, 1.0)
        margin_g = np.array([self.envelope_margins.get(k, pooled) for k in keys], dtype=np.float64)[
            codes[idx[first]]] if self.envelope_margins else np.ones(len(first))
        host_g = np.zeros(len(first))  # per group: the largest host dispatch of its fitted-GPU prices so far
        # visits in rounds: every kind's least efficient fitted GPU first (:func:`fit_envelope`'s order), whose
        # bound settles most rows, then the next; one pricing call per round (a group has one kind, so one GPU a
        # round), and the remaining rounds in one call once few rows are left (:data:`ENVELOPE_CALL_ROWS`)
        rounds: dict[int, list[tuple[str, np.ndarray]]] = {}
        for code, key in enumerate(keys):
            at = np.flatnonzero(codes[idx] == code)  # positions in idx
            devs = [d for d in (self.envelope_devices.get(key) or (self._kind_fallback(key) if fallback else ()))
                    if catalog.resolve_device(d, missing_ok=True)]
            for rank, dev in enumerate(devs if len(at) else ()):
                rounds.setdefault(rank, []).append((dev, at))
        if not rounds:
            return kernel_g[group], host_g[group]
        pending = np.ones(len(idx), dtype=bool)
        order = sorted(rounds)
        for i, rank in enumerate(order):
            picks = [(dev, _sorted_codes(group[at[pending[at]]], len(first))) for dev, at in rounds[rank]]
            picks = [(dev, g) for dev, g in picks if len(g)]
            if not picks:
                continue
            if settled is not None and i + 1 < len(order):
                # the calls' fixed cost outweighs the rows left: the remaining rounds in one call (a group then
                # appears once per GPU, so the maxima below are taken with ``maximum.at``)
                rest = [(dev, _sorted_codes(group[at[pending[at]]], len(first))) for r in order[i:]
                        for dev, at in rounds[r]]
                rest = [(dev, g) for dev, g in rest if len(g)]
                merged = sum(len(g) for _, g in rest) <= (len(order) - i) * ENVELOPE_CALL_ROWS
                picks = rest if merged else picks
            else:
                merged = False
            groups = np.concatenate([g for _, g in picks])
            devices = np.repeat(np.array([d for d, _ in picks], dtype=object), [len(g) for _, g in picks])
            moved_ratio, moved_host = self._kernel_ratio_on(table, idx[first[groups]], devices, catalog)
            np.maximum.at(kernel_g, groups, moved_ratio * margin_g[groups])
            np.maximum.at(host_g, groups, moved_host)
            if merged:  # every remaining round priced
                break
            if settled is not None:
                pending &= ~settled(kernel_g[group], host_g[group])
        return kernel_g[group], host_g[group]

    def host_part_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Per row (all of this correction's families), the host dispatch its prediction includes (us): none here
        (:class:`DispatchXGB` has one)."""
        return np.zeros(len(table))

    def fitted_host_max_us(self) -> float:
        """The largest host dispatch (us) a prediction on a fitted GPU includes (:meth:`host_part_us`): none here."""
        return 0.0

    def predict_log_ratio(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Learned ``log(time / reference_us)`` for every row (rows of other families get NaN)."""
        self._check_fitted()
        out = np.full(len(table), np.nan)
        mask, sub, base = self._family_rows(table, baseline)
        if mask.any():
            out[mask] = self._log_ratio_rows(sub, base, catalog)
        return out

    def predict(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        self._check_fitted()
        out = np.full(len(table), np.nan)
        mask, sub, base = self._family_rows(table, baseline)
        if mask.any():  # the rows of this correction's families are selected once, for ratio and reference
            pred = self.reference_us(sub, base, catalog) * np.exp(self._log_ratio_rows(sub, base, catalog))
            out[mask] = np.maximum(pred, self.floor_us(sub, base, catalog))
        return out

    @property
    def roofline_floor(self) -> float | None:
        """Lowest predicted time as a multiple of the roofline time, or None (no bound)."""
        return None

    def floor_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Per row, the lowest time this correction predicts (us): :attr:`roofline_floor` x the roofline on GPUs,
        0 elsewhere. A GPU kernel does not beat its datasheet roofline: a physical bound; not on CPUs, whose
        peaks are estimates of the local machine (hybrid.hardware.cpu). The predictor's intervals stop there too."""
        floor = self.roofline_floor
        if floor is None or len(table) == 0:
            return np.zeros(len(table))
        gpu = _gpu_rows(table, catalog)
        return np.where(gpu, floor * baseline["time_us"].to_numpy(dtype=np.float64), 0.0)

    def continue_boosting(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
                          rounds: int = 50, weight: float = 1.0, learning_rate: float | None = None,
                          target_offset: float = 0.0) -> XGBCorrection:
        """A copy with ``rounds`` more trees fitted to ``table`` (few-shot adaptation); ``self`` is unchanged.

        ``target_offset`` (log units) is subtracted from the targets first: the trees then learn what is left
        after a device-wide scale the caller applies on top (strategies ``auto`` and ``scale-trees`` of
        ``HybridPredictor.adapt``; ``auto`` also subtracts its per-op shift from the measured times first).

        Rows of devices the main booster has not seen extend the transfer booster (the one that predicts them);
        ``table`` must not mix seen and unseen devices.
        """
        self._check_fitted()
        sub, base = self._select(table, baseline)
        if len(sub) == 0:
            raise InvalidInputError(f"{self.key}: no rows of families {self.families} to adapt on")
        unseen = self._unseen(sub)
        if unseen.any() and not unseen.all():
            raise InvalidInputError(f"{self.key}: adapt one device at a time (rows mix training and new devices)")
        use_transfer = bool(unseen.all() and len(unseen))
        y = self._target(sub, base, catalog) - float(target_offset)
        x = self.features(sub, base, catalog, transfer=use_transfer)
        names = self.transfer_feature_names if use_transfer else self.feature_names
        d = xgb.DMatrix(x.to_numpy(), label=y, weight=np.full(len(sub), weight), feature_names=names)
        params = self.params.booster_params()
        params.update({"subsample": 1.0, "min_child_weight": 1.0, "max_depth": 3})
        if learning_rate is not None:
            params["eta"] = learning_rate
        new = type(self)(XGBParams(**asdict(self.params)), self.use_device_features, self.feature_version,
                         self.transfer)
        start = self.transfer_booster if use_transfer else self.booster
        grown = xgb.train(params, d, num_boost_round=rounds, xgb_model=start.copy())  # type: ignore[union-attr]
        new.booster = self.booster.copy() if use_transfer else grown  # type: ignore[union-attr]
        new.transfer_booster = grown if use_transfer else (
            None if self.transfer_booster is None else self.transfer_booster.copy())
        new.summary = self.summary
        # the adapted device's own rows now say how it runs: no envelope for it (a device model answers one device)
        adapted = ~isin_fast(sub["device"], self.summary.devices)
        new.use_envelope = self.use_envelope
        new.envelope_devices = {} if adapted.any() else {k: list(v) for k, v in self.envelope_devices.items()}
        new.envelope_margins = {} if adapted.any() else dict(self.envelope_margins)
        new._fitted = True
        return new

    # ------------------------------------------------------------------ persistence
    def save(self, directory: Path) -> None:
        self._check_fitted()
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        # Universal Binary JSON: the same model as XGBoost's JSON, loaded ~10x faster (every ``--model`` call pays it)
        self.booster.save_model(str(directory / "model.ubj"))  # type: ignore[union-attr]
        meta: dict[str, Any] = {
            "class": type(self).__name__, "kind": self.kind, "name": self.name,
            "families": list(self.families), "use_device_features": self.use_device_features,
            "feature_version": self.feature_version, "feature_names": self.feature_names,
            "params": asdict(self.params), "summary": asdict(self.summary), "transfer": False,
        }
        if self.transfer_booster is not None:
            self.transfer_booster.save_model(str(directory / "transfer.ubj"))
            meta.update({"transfer": True, "transfer_feature_names": self.transfer_feature_names})
        write_json(directory / "params.json", meta)
        if self.envelope_devices:
            write_json(directory / ENVELOPE_FILE, {
                "envelope_devices": self.envelope_devices, "min_rows": ENVELOPE_MIN_ROWS,
                "margins": self.envelope_margins,
                "units": "per family|dtype|bound, the fitted GPUs whose predicted log(time / reference) of the same "
                         "row bounds that of a GPU the fit never saw; margins: the factor on kernel time per "
                         "roofline such a GPU may sit beyond them (key '*': kinds with one fitted GPU)"})

    @classmethod
    def load(cls, directory: Path) -> XGBCorrection:
        """Inverse of :meth:`save`; models saved before feature versions existed load as version 1."""
        directory = Path(directory)
        meta = read_json(directory / "params.json")
        version = int(meta.get("feature_version", 1))
        if version > LATEST_FEATURE_VERSION:
            raise InvalidInputError(f"{directory}: saved with feature version {version}, this hybrid knows up to "
                                    f"{LATEST_FEATURE_VERSION}; upgrade hybrid or refit the model")
        obj = cls(XGBParams(**meta["params"]), bool(meta["use_device_features"]), version, bool(meta.get("transfer")))
        if meta["feature_names"] != obj.feature_names or (
                obj.transfer and meta.get("transfer_feature_names") != obj.transfer_feature_names):
            raise InvalidInputError(f"{directory}: saved feature names (feature version {version}) differ from this "
                                    f"hybrid's ({len(meta['feature_names'])} vs {len(obj.feature_names)}); refit the model")
        obj.booster = xgb.Booster()
        obj.booster.load_model(str(_booster_file(directory, "model")))
        if obj.transfer:
            obj.transfer_booster = xgb.Booster()
            obj.transfer_booster.load_model(str(_booster_file(directory, "transfer")))
        obj.summary = _TrainingSummary(**meta["summary"])
        obj.envelope_devices = {}
        envelope = directory / ENVELOPE_FILE
        if envelope.is_file():  # models saved before the envelope have none: unseen GPUs are the trees' alone
            saved = read_json(envelope)
            raw = saved.get("envelope_devices")
            if not (isinstance(raw, dict) and all(isinstance(v, list) and all(isinstance(d, str) for d in v)
                                                  for v in raw.values())):
                raise InvalidInputError(f"{envelope}: bad envelope devices {raw!r}; refit the model")
            obj.envelope_devices = envelope_classes(raw)
            margins = saved.get("margins") or {}  # saved before margins: none (1, the fitted GPUs' own bound)
            if not (isinstance(margins, dict) and all(
                    isinstance(v, int | float) and np.isfinite(v) and v >= 1.0 for v in margins.values())):
                raise InvalidInputError(f"{envelope}: bad envelope margins {margins!r} (factors >= 1); refit the model")
            obj.envelope_margins = {str(k): float(v) for k, v in margins.items()}
        obj._fitted = True
        return obj

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "key": self.key, "families": list(self.families),
                               "fitted": self.fitted, "use_device_features": self.use_device_features,
                               "feature_version": self.feature_version, "transfer_model": self.transfer,
                               "n_features": len(self.feature_names)}
        out.update({f"param_{k}": v for k, v in asdict(self.params).items()})
        if self.fitted:
            out.update({"train_rows": self.summary.rows, "train_devices": self.summary.devices,
                        "train_ops": self.summary.ops, "train_rmse_log": self.summary.train_rmse_log})
            if self.envelope_devices:
                out["envelope_devices"] = {k: list(v) for k, v in self.envelope_devices.items()}
                out["envelope_margins"] = dict(self.envelope_margins)
        return out


def _dispatch_gaps(table: pd.DataFrame, baseline: pd.DataFrame) -> pd.DataFrame:
    """Per row, what the dispatch fits read (:meth:`DispatchXGB.fit_dispatch`, :meth:`DispatchXGB.fit_learned_dispatch`):
    device ``d``, framework ``f``, framework-timed ``fw``, measured - roofline ``g`` (us) and ``tiny`` (roofline
    under :data:`DISPATCH_TINY_US`: almost pure overhead)."""
    roof = baseline["time_us"].to_numpy(dtype=np.float64)
    gap = pd.to_numeric(table["time_us"], errors="coerce").to_numpy(dtype=np.float64) - roof
    fw = table["framework"].astype(str).to_numpy() if "framework" in table.columns else np.zeros(len(table))
    return pd.DataFrame({"d": table["device"].astype(str).to_numpy(), "f": fw, "fw": kernel_timing(table) == 0,
                         "g": gap, "tiny": roof < DISPATCH_TINY_US})


def tiny_op_dispatch_us(frame: pd.DataFrame) -> float | None:
    """The host dispatch read off :func:`_dispatch_gaps` rows: per (device, framework) group with at least
    :data:`DISPATCH_MIN_ROWS` almost-pure-overhead rows (``tiny``), the median of their measured minus roofline; the
    median over those groups (never below 0). None when no group has enough of them."""
    tiny = frame[frame["tiny"]].groupby(["d", "f"])["g"]
    per = tiny.median()[tiny.size() >= DISPATCH_MIN_ROWS]
    return float(max(np.nanmedian(per.to_numpy()), 0.0)) if len(per) else None


class DispatchXGB(XGBCorrection):
    """Kernel corrections whose reference (from feature version 4) adds the framework's per-op host dispatch
    overhead to the roofline of GPU rows timed through a framework (:func:`~hybrid.corrections.features.
    kernel_timing` = 0): a fitted constant in microseconds (:meth:`fit_dispatch`), so the trees need not learn
    the 20-50 us floor of eager-framework timings, and learned it as a property of the devices before."""

    #: first feature version whose reference includes the dispatch overhead
    dispatch_from_version: ClassVar[int] = 4

    def __init__(self, params: XGBParams | None = None, use_device_features: bool = True,
                 feature_version: int | None = None, transfer: bool | None = None):
        super().__init__(params, use_device_features, feature_version, transfer)
        #: per-op host dispatch + synchronisation overhead (us) of framework-timed GPU rows (:attr:`dispatch_from_version` on;
        #: fitted by :meth:`fit_dispatch`), added to their roofline reference so the trees need not learn it
        self.dispatch_us = 0.0
        #: before :attr:`dispatch_from_version`, the host dispatch that the trees learned inside the times of the GPUs
        #: fitted on framework-timed rows (us per op, per device; 0 for kernel-timed ones; ``"*"`` for GPUs the fit
        #: never saw, when most of its GPU rows were framework-timed): :meth:`fit_learned_dispatch`
        self.learned_dispatch: dict[str, float] = {}

    @property
    def uses_dispatch(self) -> bool:
        return self.feature_version >= self.dispatch_from_version

    def _dispatched(self, table: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """GPU rows timed through a framework (not kernel-only): they pay :attr:`dispatch_us`."""
        return _gpu_rows(table, catalog) & (kernel_timing(table) == 0)

    def reference_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        roof = baseline["time_us"].to_numpy(dtype=np.float64)
        if not self.uses_dispatch or self.dispatch_us <= 0:
            return roof
        # added, not overlapped (max(body, overhead) was worse leave-one-GPU-out: experiments/kernel_accuracy)
        return roof + self._dispatched(table, catalog) * self.dispatch_us

    def host_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Per row, the host dispatch time that :meth:`predict` includes (:attr:`dispatch_us` on framework-timed
        GPU rows of this correction's families, 0 elsewhere): what a workload that models host time itself
        takes off to get the GPU kernel time (:class:`hybrid.engine.costs.KernelTimeModel`)."""
        out = np.zeros(len(table))
        if not self.uses_dispatch or self.dispatch_us <= 0:
            return out
        mask, sub, _ = self._family_rows(table, baseline)
        if mask.any():
            out[mask] = self._dispatched(sub, catalog) * self.dispatch_us
        return out

    def host_part_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Per row, the host dispatch its prediction includes: :meth:`host_us` (the fitted constant of version 4)
        plus :meth:`learned_host_us` (what the trees learned inside eager GPUs' times before it)."""
        return self.host_us(table, baseline, catalog) + self.learned_host_us(table, baseline, catalog)

    def fitted_host_max_us(self) -> float:
        """The largest host dispatch (us) a prediction on a fitted GPU includes: :attr:`dispatch_us` from
        :attr:`dispatch_from_version` on, else the largest :attr:`learned_dispatch`."""
        if self.uses_dispatch:
            return float(self.dispatch_us)
        return float(max(self.learned_dispatch.values(), default=0.0))

    def learned_host_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Per row, before :attr:`dispatch_from_version`, the host dispatch the trees learned as part of the GPU's
        times (:attr:`learned_dispatch` of the row's device, on GPU rows of this correction's families, whatever
        the row's own timing: the trees' answer does not depend on it); 0 elsewhere and from that version on."""
        out = np.zeros(len(table))
        if self.uses_dispatch or not self.learned_dispatch or len(table) == 0:
            return out
        mask, sub, _ = self._family_rows(table, baseline)
        if mask.any():
            unseen = self.learned_dispatch.get("*", 0.0)
            per = factor_map(sub["device"], lambda d: self.learned_dispatch.get(d, unseen), "")
            out[mask] = np.where(_gpu_rows(sub, catalog), per.astype(np.float64), 0.0)
        return out

    def label_lift_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Per row, before :attr:`dispatch_from_version`, the learned dispatch (:meth:`learned_host_us`) of a
        kernel-timed GPU row (:func:`~hybrid.corrections.features.kernel_timing`: CUPTI rows of ``hybrid trace
        kernels`` or a profile's ``kernel_times.csv``), added to its measured time before the trees learn it; 0 on
        framework-timed rows, CPUs and GPUs whose learned dispatch is 0.

        The pointwise trees have no feature that says how a row was timed, and a prediction loses the learned
        dispatch of its GPU (:class:`hybrid.engine.costs.KernelTimeModel`) whatever the row. A kernel row joined to
        an eager GPU's profile holds no dispatch: learned as measured, it taught the trees kernel times at its
        shapes, from which the dispatch was then taken off a second time (the H100 profile + its 8 traced steps'
        313 pointwise kernel rows: those ops' kernel time on the H100 summed to 0.93x their CUPTI time, weighted by
        runs, ops of 20 us or more 20% geomean off; the H200's traced ops 0.81x). Lifted by the dispatch that the
        GPU's eager rows carry, it teaches the same eager-consistent time as they do, and the prediction less that
        dispatch is its kernel again (1.00x, 11%; H200 0.88x). Eager rows, and fits without kernel rows on an
        eager GPU, learn exactly what they did. The tiniest kernels come out higher than before: at the kernel
        time's floor, their roofline, whose fixed kernel latency (4 us) is over their CUPTI time (~2 us)."""
        out = np.zeros(len(table))
        if self.uses_dispatch or not self.learned_dispatch or not len(table):
            return out
        kernel = kernel_timing(table) > 0
        if kernel.any():
            out[kernel] = self.learned_host_us(table, baseline, catalog)[kernel]
        return out

    def fit_learned_dispatch(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> dict[str, float]:
        """Per fitted GPU, the host dispatch its times carry (:attr:`learned_dispatch`): on a GPU most of whose
        rows were framework-timed (eager PyTorch: dispatch, launch and kernel, one op at a time), or that has
        enough tiny framework-timed ops to measure it whatever else joins it, the median measured - roofline of
        its tiny framework-timed ops (roofline under :data:`DISPATCH_TINY_US`, at least :data:`DISPATCH_MIN_ROWS`
        of them), else the median of those medians; 0 on kernel-timed GPUs. Kernel-timed rows teach no floor:
        they are learned lifted by their GPU's (:meth:`label_lift_us`). ``"*"``, for GPUs the fit never saw: that
        median when most of the fit's GPU rows were learned with a dispatch (framework-timed, or lifted). Empty
        when no GPU has enough tiny framework-timed ops to say what the dispatch is."""
        gpu = _gpu_rows(table, catalog)
        if not gpu.any():
            return {}
        frame = _dispatch_gaps(table, baseline)[gpu]
        share = frame.groupby("d")["fw"].mean()
        tiny = frame[frame["fw"] & frame["tiny"]].groupby("d")["g"]
        measured = tiny.median()[tiny.size() >= DISPATCH_MIN_ROWS].dropna()
        # a GPU that measured its own floor (enough tiny framework-timed ops) is eager however many kernel-timed
        # rows join it: those are learned lifted by that floor (label_lift_us), so they no longer outvote it (a
        # profile's kernel_times.csv holds the same configurations again; the H100 profile's 168 softmax rows
        # with the 313 pointwise kernel rows of its traces had no dispatch, and the trees kept its ~20 us floor)
        eager = share.index[(share >= 0.5) | share.index.isin(measured.index)]
        per = measured[measured.index.isin(eager)].clip(lower=0.0)
        if not len(per):
            return {}
        typical = float(np.median(per.to_numpy()))
        out = {str(d): (float(per.get(d, typical)) if d in eager else 0.0) for d in share.index}
        # "*" (GPUs never fitted) when most GPU rows were learned with a dispatch: framework-timed, or kernel-timed
        # rows lifted by their GPU's
        carried = frame["fw"].to_numpy() | (frame["d"].map(out).fillna(0.0).to_numpy(dtype=np.float64) > 0)
        if carried.mean() >= 0.5:
            out["*"] = typical
        return out

    def fit_dispatch(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> float:
        """The host dispatch of one framework-timed GPU op: per (device, framework) group with at least
        :data:`DISPATCH_MIN_ROWS` ops whose roofline is under :data:`DISPATCH_TINY_US` (almost pure overhead),
        the median of their measured minus roofline time; the median over those groups. Groups without such
        ops (collections of large kernels only, e.g. NeuSight's test sets) say nothing about dispatch and are
        not used; with none at all, the previous estimate: the median over groups of the
        :data:`DISPATCH_QUANTILE` quantile of every framework-timed row (0 when there are none)."""
        rows = self._dispatched(table, catalog)
        if not rows.any():
            return 0.0
        frame = _dispatch_gaps(table, baseline)[rows]
        tiny = tiny_op_dispatch_us(frame)
        if tiny is not None:
            return tiny
        per = frame.groupby(["d", "f"])["g"].quantile(DISPATCH_QUANTILE)
        return float(max(np.nanmedian(per.to_numpy()), 0.0))

    def fit(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
            sample_weight: np.ndarray | None = None) -> DispatchXGB:
        self.dispatch_us = 0.0
        self.learned_dispatch = {}
        sub, base = self._select(table, baseline)
        if len(sub):
            if self.uses_dispatch:
                self.dispatch_us = self.fit_dispatch(sub, base, catalog)
            else:
                self.learned_dispatch = self.fit_learned_dispatch(sub, base, catalog)
        super().fit(table, baseline, catalog, sample_weight)
        return self

    def continue_boosting(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
                          rounds: int = 50, weight: float = 1.0, learning_rate: float | None = None,
                          target_offset: float = 0.0) -> DispatchXGB:
        grown = super().continue_boosting(table, baseline, catalog, rounds, weight, learning_rate, target_offset)
        grown.dispatch_us = self.dispatch_us  # type: ignore[attr-defined]
        grown.learned_dispatch = dict(self.learned_dispatch)  # type: ignore[attr-defined]
        return grown  # type: ignore[return-value]

    def save(self, directory: Path) -> None:
        super().save(directory)
        if self.uses_dispatch:
            write_json(Path(directory) / "dispatch.json", {
                "dispatch_us": self.dispatch_us,
                "units": "us per op, added to the roofline of GPU rows timed through a framework"})
        elif self.learned_dispatch:
            write_json(Path(directory) / "learned_dispatch.json", {
                "learned_dispatch_us": self.learned_dispatch,
                "units": "us per op of host dispatch inside the fitted times, per GPU ('*': GPUs never fitted)"})

    @classmethod
    def load(cls, directory: Path) -> DispatchXGB:
        obj = super().load(directory)
        obj.dispatch_us = 0.0  # type: ignore[attr-defined]
        path = Path(directory) / "dispatch.json"
        if obj.uses_dispatch:  # type: ignore[attr-defined]
            if not path.is_file():
                raise InvalidInputError(f"{directory}: feature version {obj.feature_version} model without "
                                        "dispatch.json; refit the model")
            meta = read_json(path)
            value = float(meta.get("dispatch_us", float("nan")))
            if not (np.isfinite(value) and value >= 0):
                raise InvalidInputError(f"{directory}/dispatch.json: bad dispatch overhead {meta!r}; refit the model")
            obj.dispatch_us = value  # type: ignore[attr-defined]
        obj.learned_dispatch = {}  # type: ignore[attr-defined]
        learned = Path(directory) / "learned_dispatch.json"
        if not obj.uses_dispatch and learned.is_file():  # type: ignore[attr-defined]
            per = read_json(learned).get("learned_dispatch_us")
            if not isinstance(per, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                    and np.isfinite(v) and v >= 0 for v in per.values()):
                raise InvalidInputError(f"{learned}: bad learned dispatch {per!r}; refit the model")
            obj.learned_dispatch = {str(k): float(v) for k, v in per.items()}  # type: ignore[attr-defined]
        return obj  # type: ignore[return-value]

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        if self.uses_dispatch:
            out["dispatch_us"] = self.dispatch_us
        elif self.learned_dispatch:
            out["learned_dispatch_us"] = dict(self.learned_dispatch)
        return out


def _gemm_keys(table: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """(code per row, its ``dtype|kind`` key per code) for :func:`gemm_extents`: the dtype normalised, kind
    ``bmm`` for batched GEMMs (a piece of one is a smaller batch, predicted from bmm rows) and ``gemm`` for the
    rest (gemm, linear, matmul, gemv); the strings are built once per distinct pair, not per row."""
    dt_codes, dt_names = _dtype_codes(table)
    if "op" in table.columns:
        op_codes, op_names = str_codes(table["op"])
        bmm = np.array([name == "bmm" for name in op_names] + [False])[op_codes].astype(np.int64)
    else:
        bmm = np.zeros(len(table), dtype=np.int64)
    pairs, codes = np.unique(dt_codes.astype(np.int64) * 2 + bmm, return_inverse=True)
    return codes.reshape(-1), [f"{dt_names[p // 2]}|{('gemm', 'bmm')[p % 2]}" for p in pairs]


def _gemm_dims(table: pd.DataFrame) -> np.ndarray:
    """(4, rows) array of b, m, n, k (b = 1 where absent)."""
    return np.stack([col(table, "b", 1), col(table, "m"), col(table, "n"), col(table, "k")])


def pareto_shapes(dims: np.ndarray, limit: int = EXTENT_SHAPES) -> np.ndarray:
    """The shapes (rows of b, m, n, k) of ``dims`` (4 x rows) that no other is at least as large as in every
    dimension, largest FLOP count first, at most ``limit`` of them: the largest remaining shape is kept and every
    shape it covers dropped, at most ``limit`` vectorised passes."""
    shapes = np.unique(dims.T, axis=0)
    shapes = shapes[np.argsort(-shapes.prod(axis=1), kind="stable")]
    kept: list[np.ndarray] = []
    while len(shapes) and len(kept) < limit:
        kept.append(shapes[0])
        shapes = shapes[~(shapes <= shapes[0]).all(axis=1)]
    return np.asarray(kept, dtype=np.float64).reshape(-1, 4)


def gemm_extents(table: pd.DataFrame) -> dict[str, list[list[float]]]:
    """The largest GEMMs a model was fitted on, on any device, per ``dtype|kind`` (:func:`_gemm_keys`): the
    :func:`pareto_shapes` of its rows, ``[[b, m, n, k], ...]``."""
    if len(table) == 0:
        return {}
    dims = _gemm_dims(table)
    ok = np.isfinite(dims).all(axis=0) & (dims > 0).all(axis=0)
    codes, keys = _gemm_keys(table)
    return {key: pareto_shapes(dims[:, ok & (codes == i)]).tolist() for i, key in enumerate(keys)
            if (ok & (codes == i)).any()}


def merge_extents(a: dict[str, list[list[float]]], b: dict[str, list[list[float]]]) -> dict[str, list[list[float]]]:
    """:func:`gemm_extents` of the rows behind ``a`` and ``b`` together."""
    out = {k: [list(s) for s in v] for k, v in a.items()}
    for key, shapes in b.items():
        both = np.asarray(out.get(key, []) + [list(s) for s in shapes], dtype=np.float64).reshape(-1, 4)
        out[key] = pareto_shapes(both.T).tolist()
    return out


def covered(dims: np.ndarray, shapes: np.ndarray) -> np.ndarray:
    """Per GEMM of ``dims`` (4 x rows): whether one of ``shapes`` (p x 4) is at least as large in every dimension.
    The shapes are tried in order (largest FLOPs first, as :func:`pareto_shapes` keeps them) on the rows no earlier
    shape covered, so a table of mostly covered rows costs about one comparison per row and dimension."""
    out = np.zeros(dims.shape[1], dtype=bool)
    todo = np.arange(dims.shape[1])
    for shape in shapes:
        hit = (dims[:, todo] <= shape[:, None]).all(axis=0)
        out[todo[hit]] = True
        todo = todo[~hit]
        if not len(todo):
            break
    return out


def split_pieces(dims: np.ndarray, shapes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For GEMMs ``dims`` (4 x rows) and measured shapes (p x 4): the piece each is split into, halving (rounded up)
    each dimension until one measured shape is at least as large in every dimension, with the fewest halvings over
    the shapes. Returns (piece dims, halvings per row): 0 halvings = already inside a measured shape."""
    halvings = np.empty_like(dims, dtype=np.float64)
    log_shapes = np.log2(shapes)[:, :, None]  # p x 4 x 1
    for start in range(0, dims.shape[1], SPLIT_BLOCK_ROWS):  # blocks: p x 4 x block floats at a time
        block = np.log2(dims[:, start:start + SPLIT_BLOCK_ROWS])
        need = np.maximum(np.ceil(block[None, :, :] - log_shapes - 1e-9), 0.0)  # p x 4 x block
        best = need.sum(axis=1).argmin(axis=0)
        halvings[:, start:start + SPLIT_BLOCK_ROWS] = need[best, :, np.arange(block.shape[1])].T
    return np.ceil(dims / 2.0 ** halvings), halvings.sum(axis=0)


class GemmXGB(DispatchXGB):
    """Kernel efficiency of the GEMM family (gemm, bmm, linear, gemv, matmul).

    Beyond the sizes it was fitted on, the trees extrapolate (the leaves of the largest shapes of other devices,
    dtypes or timing harnesses), and predicted large aligned GEMMs slower than the measured smaller ones (H100
    bf16, quickstart's model: 8192^3 at ~480 TFLOP/s after 4096^3 at ~660; with the bound 675). A GEMM can always be run as GEMMs of a piece of it (split
    along b, m, n, k; k splits add the partial outputs' traffic), and a library does not do worse on the whole:
    a compute-bound row that no GEMM of the fit of its dtype and kind covers in every dimension, on any device
    (:func:`gemm_extents`), is predicted at most as the time of the pieces one covers (:meth:`split_bound_us`).
    Scored on held-out large GEMMs (experiments/kernel_accuracy, "largest GEMMs held out"); nothing in it is
    fitted. Coverage on any device, not the row's own: with a device's own shapes, a GPU adapted on 20-50 of its
    rows had most of its GEMMs "uncovered" and split into pieces the trees knew no better (own H100 profile,
    5-fold: batched fp32 GEMMs 5.5 -> 31.5%, experiments/h100_transfer)."""

    kind = "gemm"
    name = "kernel-xgb"
    families = ("gemm",)
    min_rows = 50
    # Feature version 4 (version 3's dtype path, power per SM, integer arithmetic, plus the timing method and a
    # fitted host-dispatch overhead in the reference) with one booster: the lowest mean leave-one-GPU-out error
    # over all public sources (experiments/kernel_accuracy/results.md). The transfer booster (transfer=True)
    # moves error between sources without lowering the mean; averaging both boosters on unseen GPUs lowered it
    # (13.2 vs 14.4%) but made the H100 worse, and was not kept (docs/corrections.md).
    default_transfer = False
    default_feature_version = GEMM_FEATURE_VERSION
    default_envelope = True
    # The sibling rule lowered leave-one-GPU-out error on the 10 public GPUs with a fitted sibling from 11.7 to
    # 10.4% (experiments/kernel_accuracy/sibling_variant.py) and moved no GPU without one.
    default_sibling_blend = True

    def __init__(self, params: XGBParams | None = None, use_device_features: bool = True,
                 feature_version: int | None = None, transfer: bool | None = None):
        super().__init__(params, use_device_features, feature_version, transfer)
        #: largest GEMMs of the fit per ``dtype|kind`` (:func:`gemm_extents`); empty: no bound
        self.extents: dict[str, list[list[float]]] = {}
        #: the library's rule (:data:`UNSEEN_DTYPE_PROXY`), not saved; an experiment may set another ({} = none)
        self.dtype_proxy: dict[str, tuple[str, ...]] = dict(UNSEEN_DTYPE_PROXY)
        #: the sibling rule (:meth:`sibling_proxy_us`; on by default since 2026-12-02, saved with the model): a GPU
        #: the fit never saw, whose die it fitted in another product of its power class, is priced at the geometric
        #: mean of the trees and the sibling's efficiency; False: the trees alone
        self.sibling_blend = self.default_sibling_blend
        #: dtypes of the fitted GEMMs per device (recorded by :meth:`fit`, saved with the extents)
        self.device_dtypes: dict[str, set[str]] = {}
        #: fitted devices with framework-timed GEMMs (host dispatch in their times; recorded by :meth:`fit`)
        self.framework_devices: set[str] = set()

    @property
    def key(self) -> str:
        return "kernel-xgb-gemm"

    def fit(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
            sample_weight: np.ndarray | None = None) -> GemmXGB:
        super().fit(table, baseline, catalog, sample_weight)
        sub = self._select(table, baseline)[0]
        self.extents = gemm_extents(sub)
        dtypes = sub["dtype"].map(normalize_dtype) if "dtype" in sub.columns else pd.Series("fp32", index=sub.index)
        self.device_dtypes = {str(d): set(map(str, g)) for d, g in dtypes.groupby(sub["device"].astype(str))}
        self.framework_devices = set(sub["device"].astype(str)[kernel_timing(sub) == 0])
        return self

    def continue_boosting(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
                          rounds: int = 50, weight: float = 1.0, learning_rate: float | None = None,
                          target_offset: float = 0.0) -> GemmXGB:
        grown = super().continue_boosting(table, baseline, catalog, rounds, weight, learning_rate, target_offset)
        grown.extents = merge_extents(self.extents, gemm_extents(self._select(table, baseline)[0]))  # type: ignore[attr-defined]
        # the adapted device stays priced as before adapting (its few rows corrected what the model answered)
        grown.sibling_blend = self.sibling_blend  # type: ignore[attr-defined]
        grown.device_dtypes = {k: set(v) for k, v in self.device_dtypes.items()}  # type: ignore[attr-defined]
        grown.framework_devices = set(self.framework_devices)  # type: ignore[attr-defined]
        return grown  # type: ignore[return-value]

    def predict(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        out = self._predict_bounded(table, baseline, catalog)
        return self._misaligned_floor(table, baseline, catalog, out)

    def _misaligned_floor(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
                          out: np.ndarray) -> np.ndarray:
        """``out`` with, on 16-bit GEMMs a TMA GPU cannot feed its tensor cores (a row stride, the row's ``align``
        or else ``n`` or ``k``, not a multiple of 8 elements), its kernel part (the prediction less the row's own
        dispatch) raised to at least the fallback kernels' time (:func:`hybrid.ops.gemm_paths.misaligned_kernel_us`):
        no profile or public table times such a GEMM at size, so the trees price it like an aligned one (GPT-2's LM
        head on an H100: 3-4x too fast)."""
        from hybrid.ops.gemm_paths import misaligned_kernel_us

        mask, sub, base = self._family_rows(table, baseline)
        if not mask.any():
            return out
        floor = misaligned_kernel_us(sub, catalog)
        hit = np.isfinite(floor)
        if hit.any():
            rows = np.nonzero(mask)[0][hit]
            local = np.nonzero(hit)[0]
            host = self.host_us(sub.iloc[local], base.iloc[local], catalog)
            # only the kernel part is raised (the prediction less its dispatch): a tiny misaligned GEMM, whose
            # fallback kernel is negligible, keeps what the trees learned of its dispatch
            kernel = np.maximum(out[rows] - host, 0.0)
            out[rows] = out[rows] + np.maximum(floor[hit] - kernel, 0.0)
        return out

    def _predict_bounded(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        out = super().predict(table, baseline, catalog)
        if not self.extents:
            return out
        mask, sub, base = self._family_rows(table, baseline)
        if mask.any():
            bound = self.split_bound_us(sub, base, catalog)
            rows = np.nonzero(mask)[0]
            lower = np.isfinite(bound) & (bound < out[rows])
            if lower.any():
                floor = self.floor_us(sub, base, catalog)
                out[rows[lower]] = np.maximum(bound[lower], floor[lower])
            proxied = self.dtype_proxy_us(sub, base, catalog)
            use = np.isfinite(proxied)
            out[rows[use]] = proxied[use]
            if self.sibling_blend:
                sibling = self.sibling_proxy_us(sub, base, catalog)
                use = np.isfinite(sibling)
                if use.any():  # the host gate only where a sibling answers (it costs ~3% of a predict)
                    use &= ~self.host_bound_rows(sub, base, catalog)
                    out[rows[use]] = np.sqrt(out[rows[use]] * sibling[use])
        return out

    def sibling_of(self, device: str, dtype: str, catalog: Catalog) -> str:
        """The fitted GPU whose GEMM efficiency stands in for ``device``'s: ``device`` was not fitted, and another
        product of its die and power class was, in a dtype on the same units (the prediction intervals' ``sibling``,
        :func:`~hybrid.corrections.intervals.fitted_sibling`); "" otherwise (or for a model whose per-device dtypes
        were not recorded)."""
        from hybrid.corrections.intervals import fitted_sibling

        if not self.device_dtypes or device in self.device_dtypes:
            return ""
        return fitted_sibling(catalog, device, normalize_dtype(dtype), self.device_dtypes)

    def sibling_proxy_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Per GEMM row on a GPU the fit never saw that has a fitted sibling (:meth:`sibling_of`): the kernel time
        predicted for the same row on the sibling, times the row's roofline over the sibling row's (the same
        fraction of the chip's peak, or of its bandwidth, on the same shape: one die, one library, one power
        class), plus the row's own dispatch; never under the row's roofline floor. NaN for every other row.
        Leave-one-GPU-out on the public kernel data, the geometric mean of this and the trees lowered the error of
        the 10 GPUs that have such a sibling from 11.7 to 10.4% (seed 0; 12.0 -> 10.4, 11.4 -> 10.8 on seeds 1,
        2; ``experiments/kernel_accuracy/sibling_variant.py``). Not used by a model saved before the per-device
        dtypes were (none recorded)."""
        out = np.full(len(table), np.nan)
        if not self.device_dtypes or len(table) == 0:
            return out
        sib = self.row_siblings(table, catalog)
        rows = np.nonzero(sib != "")[0]
        if not len(rows):
            return out
        blend, self.sibling_blend = self.sibling_blend, False  # the sibling's own prediction, without blending
        try:
            out[rows] = self._transferred_us(table, baseline, catalog, rows, device=sib[rows])
        finally:
            self.sibling_blend = blend
        return out

    def row_siblings(self, table: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Per row, :meth:`sibling_of` its device and dtype ("" where none)."""
        if not self.device_dtypes or len(table) == 0:
            return np.full(len(table), "", dtype=object)
        pairs, codes = device_dtype_pairs(table)
        return np.array([self.sibling_of(d, t, catalog) for d, t in pairs], dtype=object)[codes]

    def host_bound_rows(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Rows the sibling rule leaves to the trees: framework-timed rows whose roofline is under their host
        dispatch (:meth:`host_us`), on a GPU whose sibling was fitted on framework-timed GEMMs too
        (:attr:`framework_devices`). The sibling speaks for the die's kernels, not for the machine that dispatched
        them: such a row is mostly host time, and the sibling's, learned by the trees, is its own machine's CPU
        (the H200 VM's eager floor, ~10 us above the H100 VM's, put the H100 profile's small GEMMs 1.4x slow;
        ``experiments/kernel_accuracy/sibling_variant.py --bundles``). A sibling measured kernel-only (DeepBench's
        V100 SXM2 for NeuSight's V100 PCIe) carries no host of its own and prices every row."""
        if not self.framework_devices or len(table) == 0:
            return np.zeros(len(table), dtype=bool)
        short = baseline["time_us"].to_numpy(dtype=np.float64) < self.host_us(table, baseline, catalog)
        if not short.any():
            return short
        return short & np.isin(self.row_siblings(table, catalog), sorted(self.framework_devices))

    def _transferred_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog, rows: np.ndarray,
                        **column: Any) -> np.ndarray:
        """For ``table``'s ``rows``: the kernel time predicted for them with ``column`` replaced (another dtype,
        another device), times their own roofline over that of the replaced rows (the same fraction of the peak,
        or of the bandwidth, on the same shape), plus their own dispatch; never under their roofline floor."""
        from hybrid.ops.roofline import roofline

        own, own_base = table.iloc[rows], baseline.iloc[rows]
        px = own.assign(**column)
        px_base = roofline(px, catalog)
        kernel_us = self.predict(px, px_base, catalog) - self.host_us(px, px_base, catalog)
        scale = own_base["time_us"].to_numpy(dtype=np.float64) / px_base["time_us"].to_numpy(dtype=np.float64)
        return np.maximum(kernel_us * scale + self.host_us(own, own_base, catalog), self.floor_us(own, own_base, catalog))

    @property
    def fitted_dtypes(self) -> set[str]:
        """Dtypes the fit had GEMMs of (from :attr:`extents`; empty for models saved before extents)."""
        return {key.split("|")[0] for key in self.extents}

    def proxy_for(self, dtype: str) -> str:
        """The fitted dtype whose efficiency prices GEMMs of ``dtype`` (:data:`UNSEEN_DTYPE_PROXY`); "" when the fit
        has ``dtype`` itself, or none of its proxies (the trees answer), or the model predates fitted dtypes."""
        seen, dt = self.fitted_dtypes, normalize_dtype(dtype)
        if not seen or dt in seen:
            return ""
        return next((p for p in self.dtype_proxy.get(dt, ()) if p in seen), "")

    def _device_proxy(self, device: str, dtype: str, catalog: Catalog) -> str:
        """:meth:`proxy_for`, except where ``device`` has no units of ``dtype`` and runs it on a fitted dtype's
        (:meth:`~hybrid.hardware.device.Device.compute_peak_dtype`): that dtype."""
        dt = normalize_dtype(dtype)
        try:
            units = catalog.device(device).compute_peak_dtype(dt)
        except Exception:  # noqa: BLE001 - an unknown device or dtype is the roofline's error to raise
            units = dt
        if units != dt and units in self.fitted_dtypes:
            return units
        return self.proxy_for(dt)

    def dtype_proxy_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Per GEMM row whose dtype the fit has no GEMM of and that has a fitted proxy (:data:`UNSEEN_DTYPE_PROXY`):
        the kernel time predicted for the same row in the proxy dtype, times the row's roofline over the proxy
        row's (the same fraction of the device's peak, or of its bandwidth, on the same shape), plus the row's own
        dispatch; never under the row's roofline floor. NaN for every other row."""
        out = np.full(len(table), np.nan)
        seen = self.fitted_dtypes
        if not seen or not self.dtype_proxy or len(table) == 0 or "dtype" not in table.columns:
            return out
        # per distinct (device, dtype): a device without units of the dtype runs it on the units it falls back to
        # (fp8 on a V100: its fp16 tensor cores), so those units' fitted efficiency prices it
        pairs, index = device_dtype_pairs(table)
        proxy = np.array([self._device_proxy(dev, raw, catalog) for dev, raw in pairs], dtype=object)[index]
        rows = np.nonzero(proxy != "")[0]
        if not len(rows):
            return out
        out[rows] = self._transferred_us(table, baseline, catalog, rows, dtype=proxy[rows])
        return out

    def split_bound_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Per compute-bound GEMM row of ``table`` that no GEMM of the fit of its dtype and kind, on any device,
        covers in every dimension: pieces x the predicted kernel time of the piece (:func:`split_pieces`), plus,
        per extra piece along k, one read of the partial output, one of the next and one write at the device's
        memory bandwidth, plus the row's own dispatch. NaN for every other row."""
        out = np.full(len(table), np.nan)
        if not self.extents or len(table) == 0:
            return out
        compute = baseline["compute_us"].to_numpy(dtype=np.float64) >= baseline["memory_us"].to_numpy(dtype=np.float64)
        if not compute.any():
            return out
        dims = _gemm_dims(table)
        valid = compute & np.isfinite(dims).all(axis=0) & (dims > 0).all(axis=0)
        codes, keys = _gemm_keys(table)
        split: list[np.ndarray] = []  # per dtype and kind: the rows to split, and their pieces
        pieces: list[np.ndarray] = []
        for code, key in enumerate(keys):
            rows = np.nonzero(valid & (codes == code))[0]
            if key not in self.extents or not len(rows):
                continue
            shapes = np.asarray(self.extents[key], dtype=np.float64)
            rows = rows[~covered(dims[:, rows], shapes)]  # a GEMM a fitted one covers is the trees' to predict
            if len(rows):
                split.append(rows)
                pieces.append(split_pieces(dims[:, rows], shapes)[0])
        if split:  # the pieces of every dtype and kind priced in one call (each row on its own: the same prices)
            rows = np.concatenate(split)
            out[rows] = self._pieces_us(table.iloc[rows], baseline.iloc[rows], dims[:, rows],
                                        np.concatenate(pieces, axis=1), catalog)
        return out

    def _pieces_us(self, table: pd.DataFrame, baseline: pd.DataFrame, dims: np.ndarray, piece_dims: np.ndarray,
                   catalog: Catalog) -> np.ndarray:
        """Time of ``table``'s GEMMs run as pieces of ``piece_dims`` (see :meth:`split_bound_us`)."""
        from hybrid.ops.roofline import roofline

        count = np.ceil(dims / piece_dims)
        piece = table.copy()
        for i, name in enumerate(("b", "m", "n", "k")):
            if name != "b" or "b" in piece.columns:  # without a b column every row has b = 1: never split
                piece[name] = piece_dims[i]
        piece_base = roofline(piece, catalog)
        piece_us = super().predict(piece, piece_base, catalog) - self.host_us(piece, piece_base, catalog)
        # no piece beats its own roofline (the trees may extrapolate under it): else the pieces, summed, came out
        # under the whole GEMM's roofline and the row landed on the floor, at exactly 100% of the peak
        piece_us = np.maximum(piece_us, self.floor_us(piece, piece_base, catalog))
        bw = catalog.device_column(piece["device"], lambda d: float(d.mem_bw), np.inf).astype(np.float64)
        accumulate_us = (count[3] - 1.0) * 3.0 * dims[0] * dims[1] * dims[2] * dtype_bytes_vec(piece) / bw * 1e6
        return count.prod(axis=0) * piece_us + accumulate_us + self.host_us(table, baseline, catalog)

    def save(self, directory: Path) -> None:
        super().save(directory)
        write_json(Path(directory) / EXTENTS_FILE, {
            "extents": self.extents, "columns": ["b", "m", "n", "k"],
            "units": "the largest GEMM shapes of the fit on any device (none larger in every dimension) per dtype|kind",
            "device_dtypes": {k: sorted(v) for k, v in sorted(self.device_dtypes.items())},
            "framework_devices": sorted(self.framework_devices),
            "sibling_blend": bool(self.sibling_blend)})

    @classmethod
    def load(cls, directory: Path) -> GemmXGB:
        obj = super().load(directory)
        path = Path(directory) / EXTENTS_FILE
        extents: dict[str, list[list[float]]] = {}
        device_dtypes: dict[str, set[str]] = {}
        framework: set[str] = set()
        blend = False
        if path.is_file():  # models saved before the sub-problem bound have none: no bound
            doc = read_json(path)
            raw = doc.get("extents", {})
            ok = isinstance(raw, dict) and all(
                isinstance(v, list) and all(isinstance(sh, list) and len(sh) == 4 and all(
                    isinstance(x, (int, float)) and x > 0 for x in sh) for sh in v) for v in raw.values())
            if not ok:
                raise InvalidInputError(f"{directory}/{EXTENTS_FILE}: bad GEMM extents; refit the model")
            extents = {str(k): [[float(x) for x in sh] for sh in v] for k, v in raw.items()}
            # saved since 2026-12-02 (older models: none recorded, no sibling rule)
            dd, blend = doc.get("device_dtypes", {}), doc.get("sibling_blend", False)
            fw = doc.get("framework_devices", [])  # saved since 2026-12-02 (none: the sibling prices every row)
            if not (isinstance(dd, dict) and all(isinstance(v, list) and all(isinstance(x, str) for x in v)
                                                 for v in dd.values()) and isinstance(blend, bool)
                    and isinstance(fw, list) and all(isinstance(x, str) for x in fw)):
                raise InvalidInputError(f"{directory}/{EXTENTS_FILE}: bad per-device dtypes, framework devices or "
                                        "sibling_blend; refit the model")
            device_dtypes = {str(k): set(v) for k, v in dd.items()}
            framework = set(fw)
        obj.extents = extents  # type: ignore[attr-defined]
        obj.device_dtypes = device_dtypes  # type: ignore[attr-defined]
        obj.framework_devices = framework  # type: ignore[attr-defined]
        obj.sibling_blend = blend  # type: ignore[attr-defined]
        return obj  # type: ignore[return-value]

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["size_extents"] = len(self.extents)
        return out

    @property
    def roofline_floor(self) -> float | None:
        """From feature version 4: :data:`GEMM_ROOFLINE_FLOOR` (a GPU GEMM does not beat its peak FLOP/s or
        bandwidth plus launch latency; 98.5% of the public GEMM rows obey it, the exceptions mostly XLA's fp8
        rows above the H100's dense peak: experiments/kernel_accuracy/results.md)."""
        return GEMM_ROOFLINE_FLOOR if self.feature_version >= 4 else None


#: Queries from which an attention row between the measured shapes (q = kv prefill, q = 1 decode) is bounded by
#: square pieces of itself (:meth:`PointwiseXGB.chunk_bound_us`); below, speculative-decode widths, the pieces
#: would be as far from the measured shapes as the row.
CHUNK_MIN_QUERIES = 16

#: ``source`` of attention rows joined to a calibration for :class:`AttentionXGB` alone
#: (:func:`hybrid.data.bundle.load_project_attention`): the pointwise trees do not learn them.
ATTENTION_ONLY_SOURCE = "project-attention"


def square_attention(table: pd.DataFrame, baseline: pd.DataFrame) -> np.ndarray:
    """Attention rows of the regime every attention measurement has: square (``q_len == kv_len``, prefill and
    training) with at least :data:`CHUNK_MIN_QUERIES` queries (what :class:`AttentionXGB` answers)."""
    att = family_mask(baseline, ("attention",))
    if not att.any() or "q_len" not in table.columns or "kv_len" not in table.columns:
        return np.zeros(len(table), dtype=bool)
    q = pd.to_numeric(table["q_len"], errors="coerce").to_numpy(dtype=np.float64)
    kv = pd.to_numeric(table["kv_len"], errors="coerce").to_numpy(dtype=np.float64)
    return att & (q == kv) & (q >= CHUNK_MIN_QUERIES)


class PointwiseXGB(DispatchXGB):
    """Kernel efficiency of memory-bound row/pointwise kernels (elementwise, norms, softmax, attention)."""

    kind = "pointwise"
    name = "kernel-xgb"
    families = ("elementwise", "norm", "softmax", "attention")
    min_rows = 50
    # version 3 with the transfer booster for unseen GPUs: lowest leave-one-GPU-out mean on the pointwise ops.
    # Version 4 (the fitted host-dispatch overhead in the reference, as for GEMMs) was worse there: 17.7% vs
    # 13.1%, the Vidur A40 rows 63% (kernel_accuracy/results.md), so it is optional.
    default_transfer = True
    default_feature_version = POINTWISE_FEATURE_VERSION
    default_envelope = True

    #: Set by the predictor when an :class:`AttentionXGB` is fitted beside it: this model no longer answers the
    #: square attention rows that one does (prefill / training, :func:`square_attention`). It still learns the ones
    #: a calibration holds as its own rows (a profile's attention family: the H200 bundle's rows had informed its
    #: softmax and elementwise prices, and leaving them out moved the H200 bundle's H100 steps 8.6 -> 10.7%), but
    #: not rows joined for the attention model alone (``source`` :data:`ATTENTION_ONLY_SOURCE`,
    #: :func:`hybrid.data.bundle.load_project_attention`), so that joining them moves no other pointwise op (learned,
    #: they had split the H200 profile's eager prefill rows, 36 us of dispatch in the small ones, into A100 decode and
    #: 128-token prefill prices of 8x their roofline).
    square_attention_elsewhere = False
    _fitting = False

    @property
    def key(self) -> str:
        return "kernel-xgb-pointwise"

    def _select(self, table: pd.DataFrame, baseline: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        mask = family_mask(baseline, self.families)
        if self.square_attention_elsewhere and not self._fitting:
            mask &= ~square_attention(table, baseline)
        return table.loc[mask], baseline.loc[mask]

    def fit(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
            sample_weight: np.ndarray | None = None) -> PointwiseXGB:
        if "source" in table.columns:  # rows joined for the attention model alone (the class attribute's note)
            keep = ~(square_attention(table, baseline) & (table["source"].astype(str) == ATTENTION_ONLY_SOURCE)
                     ).to_numpy(dtype=bool)
            table, baseline = table.loc[keep], baseline.loc[keep]
            sample_weight = None if sample_weight is None else np.asarray(sample_weight)[keep]
        self._fitting = True
        try:
            super().fit(table, baseline, catalog, sample_weight)
        finally:
            self._fitting = False
        return self

    def floor_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """GPU attention rows whose roofline bytes exceed :data:`ATTENTION_DRAM_FLOOR_L2` x the last-level cache
        (a decode step's KV cache, the K/V of a long prompt) stream from DRAM: they do not beat their roofline.
        No attention timing is in any training source, so the trees extrapolate these rows from the other
        pointwise ops, and on Hopper-class GPUs they came out at 0.84-1.03x of it (faster than the HBM peak).
        Other pointwise ops have no floor: their roofline counts bytes a cache may serve (some Vidur rows run at
        0.7x of it)."""
        floor = super().floor_us(table, baseline, catalog)
        att = isin_fast(baseline["family"], ("attention",)) if len(table) else np.zeros(0, dtype=bool)
        if not att.any():
            return floor
        l2 = catalog.device_column(table["device"], lambda d: float(d.l2_cache), np.inf).astype(np.float64)
        dram = baseline["bytes"].to_numpy(dtype=np.float64) > ATTENTION_DRAM_FLOOR_L2 * l2
        return np.where(att & _gpu_rows(table, catalog) & dram,
                        np.maximum(floor, baseline["time_us"].to_numpy(dtype=np.float64)), floor)


    def predict(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        out = super().predict(table, baseline, catalog)
        bound = self.chunk_bound_us(table, baseline, catalog)
        use = np.isfinite(bound) & (bound < out)
        if use.any():
            out[use] = np.maximum(bound[use], self.floor_us(table, baseline, catalog)[use])
        return out

    def chunk_bound_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Per attention row with :data:`CHUNK_MIN_QUERIES` <= q_len < kv_len (a prompt chunk over its context,
        speculative queries): the row run as square pieces of q_len x q_len, the shapes every attention
        measurement has (prefill q = kv, and decode q = 1), NaN elsewhere. The context before the chunk is one
        batched non-causal q x q attention (the batch times its ceil((kv - q) / q) blocks), the chunk's own keys a
        causal q x q one (non-causal: the batch times ceil(kv / q) blocks, no diagonal); or, when cheaper, the
        square attention of every kv query, a superset of the chunk's work. Both bound the row from above (the
        pieces re-read the queries once per block): the trees alone, between the two measured
        regimes, priced an H100 bf16 chunk of 128 queries over 4096 keys at 20x its roofline and slower than
        2048 queries over the same keys."""
        out = np.full(len(table), np.nan)
        if not len(table) or "q_len" not in table.columns or "kv_len" not in table.columns:
            return out
        att = isin_fast(baseline["family"], ("attention",))
        q = pd.to_numeric(table["q_len"], errors="coerce").to_numpy(dtype=np.float64)
        kv = pd.to_numeric(table["kv_len"], errors="coerce").to_numpy(dtype=np.float64)
        rows = np.flatnonzero(att & (q >= CHUNK_MIN_QUERIES) & (q < kv))
        if not len(rows):
            return out
        from hybrid.ops.roofline import roofline

        sub = table.iloc[rows].reset_index(drop=True)
        qs, kvs = q[rows], kv[rows]
        causal = sub["causal"].fillna(False).astype(bool).to_numpy() if "causal" in sub.columns \
            else np.zeros(len(sub), dtype=bool)
        batch = pd.to_numeric(sub["batch"], errors="coerce").fillna(1.0).to_numpy(dtype=np.float64) \
            if "batch" in sub.columns else np.ones(len(sub))
        blocks = np.ceil(np.where(causal, kvs - qs, kvs) / qs)
        context = sub.assign(q_len=qs, kv_len=qs, causal=False, batch=batch * blocks)
        diagonal = sub.assign(q_len=qs, kv_len=qs, causal=True)
        whole = sub.assign(q_len=kvs, kv_len=kvs)  # every query of the context: a superset of the chunk's work
        n, nc = len(sub), int(causal.sum())
        pieces = pd.concat([context, whole, diagonal[causal]], ignore_index=True)
        piece_us = super().predict(pieces, roofline(pieces, catalog), catalog)
        split = piece_us[:n].copy()
        split[np.flatnonzero(causal)] += piece_us[2 * n:2 * n + nc]
        out[rows] = np.minimum(split, piece_us[n:2 * n])
        return out


class ConvXGB(XGBCorrection):
    """Kernel efficiency of 2-D convolutions (forward and backward) against their roofline: the library's
    algorithm choice (direct, implicit GEMM, Winograd; oneDNN on CPUs, cuDNN on GPUs) is what it learns."""

    kind = "conv"
    name = "kernel-xgb"
    families = ("conv",)
    min_rows = 30
    default_transfer = False
    default_feature_version = CONV_FEATURE_VERSION

    @property
    def key(self) -> str:
        return "kernel-xgb-conv"


class AttentionXGB(DispatchXGB):
    """Kernel efficiency of fused attention (SDPA / FlashAttention) over its roofline, learned from attention rows
    alone with attention's own features (:data:`~hybrid.corrections.features.ATTENTION_FEATURES`: head size, causal
    mask, query tiles per SM, ...) and no descriptor that names a device, so that the efficiency measured on one
    GPU (the H200 profile's SDPA rows: 1.1-1.7x the roofline on large prefill shapes, whose compute bound is the
    dtype's tensor-core peak plus the softmax's exps) carries to GPUs without attention rows through their SM
    count and roofline. Before it, no training source but the profiles timed attention and the pointwise trees
    priced it by extrapolating elementwise/norm/softmax rows, with neither head size nor causal flag:
    Llama-2-7B's 2048-token A100 prefill attention at 2.8x its roofline (~28% of the fp16 peak).

    Answers the measured regime only: square attention (``q_len == kv_len``, prefill and training) of at least
    :data:`CHUNK_MIN_QUERIES` queries, on the kind of processor (GPU / CPU) it was fitted on; decode steps and
    prompt chunks over a longer context stay with :class:`PointwiseXGB` (its DRAM floor and chunk bound), which
    is fitted before it on the same rows. The framework dispatch of eager-timed rows is a fitted constant
    (:class:`DispatchXGB`, feature version 4) estimated on every attention row (the tiny decode calls are
    almost pure dispatch), added back only on rows that name a framework that times through the host: a row of
    an LLM builder or an inference engine (no ``framework``) is priced as the kernel alone."""

    kind = "attention"
    name = "kernel-xgb"
    families = ("attention",)
    min_rows = 50
    default_transfer = False
    default_feature_version = 4
    default_envelope = False

    @property
    def key(self) -> str:
        return "kernel-xgb-attention"

    @property
    def roofline_floor(self) -> float | None:
        """A GPU attention kernel does not beat its roofline (tensor-core peak with the exps, or HBM): the H200
        profile's 352 rows all sit at 1.07x it or more."""
        return 1.0

    def _dispatched(self, table: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """GPU rows timed through a framework that names itself (eager PyTorch profiles): rows with no
        ``framework`` (LLM builders, engines) are kernels."""
        named = factor_map(table["framework"], lambda n: bool(n.strip()), "").astype(bool) \
            if "framework" in table.columns else np.zeros(len(table), dtype=bool)
        return super()._dispatched(table, catalog) & named

    def _square(self, table: pd.DataFrame, baseline: pd.DataFrame) -> np.ndarray:
        """Attention rows of the measured regime (:func:`square_attention`)."""
        return square_attention(table, baseline)

    def _answered(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog | None = None) -> np.ndarray:
        """:meth:`_square` rows, on the kinds of processor of the fit's devices when ``catalog`` is given."""
        rows = self._square(table, baseline)
        if catalog is not None and rows.any() and self.summary.devices:
            fitted = {catalog.device(key).kind for d in self.summary.devices
                      if (key := catalog.resolve_device(d, missing_ok=True)) is not None}
            kinds = factor_map(table["device"], lambda d: catalog.device(d).kind, "").astype(str)
            rows &= np.isin(kinds, sorted(fitted))
        return rows

    def _select(self, table: pd.DataFrame, baseline: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        mask = self._square(table, baseline)
        return table.loc[mask], baseline.loc[mask]

    def fit(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
            sample_weight: np.ndarray | None = None) -> AttentionXGB:
        att = family_mask(baseline, self.families)
        self.learned_dispatch = {}
        self.dispatch_us = self.fit_dispatch(table.loc[att], baseline.loc[att], catalog) if att.any() else 0.0
        rows = self._square(table, baseline)
        if not rows.any():
            raise InvalidInputError(f"{self.key}: no square attention rows (q_len == kv_len >= {CHUNK_MIN_QUERIES}) "
                                    "to fit on")
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)[rows]
        XGBCorrection.fit(self, table.loc[rows], baseline.loc[rows], catalog, w)
        return self

    def _family_rows(self, table: pd.DataFrame, baseline: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame,
                                                                             pd.DataFrame]:
        mask = self._square(table, baseline)
        if mask.all():
            return mask, table, baseline
        return mask, table.loc[mask], baseline.loc[mask]

    def predict(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Per row, the learned time of the rows it answers (:meth:`_answered`), NaN elsewhere (the predictor keeps
        the pointwise model's price there)."""
        self._check_fitted()
        out = np.full(len(table), np.nan)
        mask = self._answered(table, baseline, catalog)
        if mask.any():
            sub, base = table.loc[mask], baseline.loc[mask]
            pred = self.reference_us(sub, base, catalog) * np.exp(self._log_ratio_rows(sub, base, catalog))
            out[mask] = np.maximum(pred, self.floor_us(sub, base, catalog))
        return out
