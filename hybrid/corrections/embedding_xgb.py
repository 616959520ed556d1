"""XGBoost correction for embedding-bag lookups (forward and backward).

Same recipe as the kernel models (learn ``log(measured / reference)``), with features that describe the
lookup pattern: table rows, embedding dim, pooling factor, batch, number of tables, dtype, index
distribution, the expected number of distinct rows touched
(:func:`hybrid.ops.families.expected_unique_rows`), the bytes touched against the device's cache and the
optimizer variant.

The reference the ratio is taken against (``reference="linear"``, the default since issue 13) is a *fitted
physical cost model*: per (direction, optimizer variant), a non-negative combination of device-normalised cost
terms (:func:`cost_terms`): kernel launches, table / bag / lookup counts, bytes gathered, distinct bytes
touched, table-sized dense-gradient bytes, the index sort of a backward pass (``lookups * log2``) and lookups that
miss the last-level cache. Byte terms are in microseconds at the device's memory bandwidth and count terms in
microseconds of one 64-byte cache line at that bandwidth, so each fitted coefficient is a dimensionless number
of "passes" or "cache-line transfers per event" (:meth:`EmbeddingXGB.reference_constants`), fitted with
non-negative least squares on relative error. The boosted trees then learn only what that model misses.
Optionally (``select=True``), a cross-validation inside the training rows decides per group whether the cost
model or the previous reference is used (on the CPU profile it picks the roofline reference for forward ``sum``).
A (direction, variant) group that was not in the training data, or not selected, uses the previous reference: the roofline, plus
:data:`DENSE_GRAD_TABLE_PASSES` table passes for backward passes with a *dense* gradient (variant
``dense_*``), which PyTorch materialises table-sized. ``reference="roofline"`` keeps that reference for every
row (models saved before issue 13 load that way).
The training data is the project's own profiler output (CPU bundles under ``datasets/``; GPU bundles where a
GPU was available), as there are no public embedding-bag measurements.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid.corrections.base import read_json, write_json
from hybrid.corrections.features import dense_gradient, kernel_timing, table_pass_us
from hybrid.corrections.kernel_xgb import (
    XGBCorrection,
    XGBParams,
    _dispatch_gaps,
    _gpu_rows,
    tiny_op_dispatch_us,
)
from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import Catalog
from hybrid.ops.families import (
    DENSE_GRAD_ZERO_PASSES,
    DENSE_SGD_UPDATE_PASSES,
    col,
    dtype_bytes_vec,
    expected_unique_rows,
    generalized_harmonic,
)

#: Full passes over the tables a dense-gradient backward makes (write zeros into the gradient, read it and
#: read + write the weights in the SGD update counts as ~3 streamed table sizes).
DENSE_GRAD_TABLE_PASSES = 3.0
#: Reference models: fitted physical cost terms ("linear") or the roofline (+ dense passes).
REFERENCES = ("linear", "roofline")
#: Names of the cost terms of the fitted reference (see :func:`cost_terms`).
COST_TERMS = ("launches", "tables", "bags", "lookups", "gathered_bytes", "distinct_bytes", "dense_grad_bytes",
              "index_sort", "llc_miss_lookups", "llc_miss_bytes")
#: Cache line (bytes) that count terms are expressed in.
LINE_BYTES = 64.0
#: Feature-set version (:func:`~hybrid.corrections.features.feature_names`) the embedding model is fitted
#: with by default (a saved model records its own). Version 2 added the optimizer-state feature and the
#: dense-gradient table passes of the reference (version 3 changes only device descriptors, which the
#: CPU-only embedding data cannot inform). Version 4 (issue 13): the last-level-cache miss terms assume the
#: hottest rows of a Zipf index stream stay cached (:func:`llc_hit_fraction`), and the trees see each cost term's
#: share of the fitted reference (:data:`SHARE_FEATURES`: which cost dominates) and log(reference / roofline).
EMBEDDING_FEATURE_VERSION = 4
#: Extra tree features of version 4 (computed from :func:`cost_terms` and the fitted reference).
SHARE_FEATURES = (*(f"share_{t}" for t in COST_TERMS), "log_reference_over_roofline")
#: Folds of the cross-validation (inside the training rows) that decides, per group, whether the fitted cost
#: model or the roofline reference is used.
SELECT_FOLDS = 3


def _device_values(table: pd.DataFrame, catalog: Catalog) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    codes, uniques = pd.factorize(table["device"].astype(str))
    devs = [catalog.device(str(u)) for u in uniques]
    bw = np.array([d.mem_bw for d in devs], dtype=np.float64)[codes]
    llc = np.array([max(d.l2_cache, 1.0) for d in devs], dtype=np.float64)[codes]
    lat = np.array([d.kernel_latency_us for d in devs], dtype=np.float64)[codes]
    return bw, llc, lat


def _zipf_alpha(table: pd.DataFrame) -> np.ndarray:
    alpha = col(table, "zipf_alpha", 0.0)
    if "index_dist" in table.columns:
        uniform = table["index_dist"].astype("string").fillna("uniform").str.lower().eq("uniform").to_numpy()
        alpha = np.where(uniform, 0.0, alpha)
    return np.nan_to_num(alpha, nan=0.0)


def llc_hit_fraction(table: pd.DataFrame, catalog: Catalog, zipf: bool = True) -> np.ndarray:
    """Share of lookups served by the last-level cache in steady state: the cache holds the ``K`` most popular
    rows of every table (``K`` = cache bytes / (tables x row bytes)); a lookup hits with probability
    ``H(K, alpha) / H(N, alpha)`` (Zipf popularity, :func:`generalized_harmonic`), ``K / N`` for uniform indices.
    With ``zipf=False`` every index stream counts as uniform (the version-1..3 reference)."""
    t = col(table, "num_tables", 1)
    rows, dim = col(table, "num_embeddings"), col(table, "embedding_dim")
    _, llc, _ = _device_values(table, catalog)
    cached = np.clip(llc / np.maximum(t * dim * dtype_bytes_vec(table), 1.0), 0.0, rows)
    uniform = cached / np.maximum(rows, 1.0)
    if not zipf:
        return np.clip(uniform, 0.0, 1.0)
    alpha = _zipf_alpha(table)
    skewed = generalized_harmonic(cached, alpha) / generalized_harmonic(rows, alpha)
    return np.clip(np.where(alpha > 0, skewed, uniform), 0.0, 1.0)


def cost_terms(table: pd.DataFrame, catalog: Catalog, zipf_cache: bool = True) -> np.ndarray:
    """Per row, the :data:`COST_TERMS` in microseconds on that row's device (see the module docstring).

    ``zipf_cache``: the miss terms use :func:`llc_hit_fraction` (version 4); ``False`` = the share of the tables
    beyond the cache, as if indices were uniform (versions 1-3)."""
    t = col(table, "num_tables", 1)
    rows, dim = col(table, "num_embeddings"), col(table, "embedding_dim")
    pool, batch = col(table, "pooling_factor"), col(table, "batch_size")
    alpha = _zipf_alpha(table)
    eb = dtype_bytes_vec(table)
    bw, llc, lat = _device_values(table, catalog)
    line_us = LINE_BYTES / bw * 1e6
    byte_us = 1e6 / bw
    lookups = t * batch * pool
    distinct = t * expected_unique_rows(rows, batch * pool, alpha)
    table_bytes = t * rows * dim * eb
    if zipf_cache:
        miss = 1.0 - llc_hit_fraction(table, catalog)
    else:
        miss = np.clip(1.0 - llc / np.maximum(table_bytes, 1.0), 0.0, 1.0)  # share of lookups missing the LLC
    return np.stack([
        lat, t * line_us, t * batch * line_us, lookups * line_us, lookups * dim * eb * byte_us,
        distinct * dim * eb * byte_us, dense_gradient(table) * table_bytes * byte_us,
        lookups * np.log2(np.maximum(batch * pool, 2.0)) * line_us, lookups * miss * line_us,
        lookups * miss * dim * eb * byte_us,
    ], axis=1)


def _groups(table: pd.DataFrame) -> np.ndarray:
    direction = table["direction"].astype("string").fillna("fwd").str.lower() if "direction" in table.columns \
        else pd.Series("fwd", index=table.index, dtype="string")
    variant = table["variant"].astype("string").fillna("").str.lower() if "variant" in table.columns \
        else pd.Series("", index=table.index, dtype="string")
    return (direction + "|" + variant).to_numpy(dtype=object)


def default_embedding_params() -> XGBParams:
    """Smaller trees than the kernel models: embedding profiles have hundreds, not tens of thousands, of rows.
    Depth 6 with feature version 4 (5 before): chosen on the benchmark's split seeds 0-4, confirmed on 5-9."""
    # every row weighs 1 (no device floor): a refit with 20 rows of a new GPU was no better with it, and adapting the
    # fitted model was better than either (experiments/embedding_accuracy/results.md, 2026-11-27)
    return XGBParams(n_estimators=300, max_depth=6, learning_rate=0.06, min_child_weight=2.0, min_device_rows=0)


class EmbeddingXGB(XGBCorrection):
    """Forward/backward embedding-bag time from table and batch features."""

    kind = "embedding"
    name = "embedding-xgb"
    families = ("embedding",)
    min_rows = 20
    default_feature_version = EMBEDDING_FEATURE_VERSION

    def __init__(self, params: XGBParams | None = None, use_device_features: bool = True,
                 feature_version: int | None = None, transfer: bool | None = None, reference: str = "linear",
                 select: bool = False):
        super().__init__(params or default_embedding_params(), use_device_features, feature_version, transfer)
        if reference not in REFERENCES:
            raise InvalidInputError(f"unknown embedding reference {reference!r}; known: {REFERENCES}")
        self.reference = reference
        #: choose the reference per group by cross-validation inside the training rows (off by default: on the
        #: CPU profile it helps held-out configurations slightly and hurts the largest-table split)
        self.select = bool(select)
        #: "direction|variant" -> non-negative coefficients of COST_TERMS (fitted reference)
        self.coefficients: dict[str, list[float]] = {}
        #: per group, the cross-validated errors that chose between the cost model and the roofline reference
        self.selection: dict[str, dict[str, float]] = {}
        #: "direction|variant" -> host dispatch (us) inside the framework-timed GPU rows of the fit (an eager
        #: lookup's Python / dispatcher / launch; a backward row's autograd call and its update's): what
        #: :meth:`host_us` reports so that the engine, which puts host work on the host stream, takes it off. (Not
        #: ``dispatch_us``: the kernel corrections' one float per model goes by that name.)
        self.group_dispatch_us: dict[str, float] = {}

    def roofline_reference_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Roofline time, plus :data:`DENSE_GRAD_TABLE_PASSES` table passes for dense-gradient backward rows
        (feature version 2 on; version-1 models were fitted against the plain roofline)."""
        roof = baseline["time_us"].to_numpy(dtype=np.float64)
        # the roofline counts the table passes of a dense gradient itself (:data:`hybrid.ops.families.
        # DENSE_GRAD_ZERO_PASSES` + ``DENSE_SGD_UPDATE_PASSES``) since 2026-12-07; the models were fitted against
        # the roofline without them (plus DENSE_GRAD_TABLE_PASSES from version 2): those passes are taken out
        # again (exact while the row is memory-bound, as embedding rows are), so saved references keep their values
        counted = DENSE_GRAD_ZERO_PASSES + DENSE_SGD_UPDATE_PASSES
        passes = (DENSE_GRAD_TABLE_PASSES if self.feature_version >= 2 else 0.0) - counted
        return np.maximum(roof + passes * dense_gradient(table) * table_pass_us(table, catalog), 1e-3)

    def reference_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """The fitted cost model where its (direction, variant) group was fitted, else the roofline reference."""
        ref = self.roofline_reference_us(table, baseline, catalog)
        if self.reference != "linear" or not self.coefficients:
            return ref
        groups = _groups(table)
        known = np.isin(groups, list(self.coefficients))
        if known.any():
            terms = self._cost_terms(table if known.all() else table.loc[known], catalog, self.feature_version >= 4)
            codes, uniques = pd.factorize(groups[known])  # one coefficient row per group, not per table row
            coef = np.array([self.coefficients[g] for g in uniques], dtype=np.float64)[codes]
            ref = ref.copy()
            ref[known] = np.maximum(np.sum(terms * coef, axis=1), 1e-3)
        return ref

    def feature_arrays(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
                       transfer: bool = False) -> dict[str, np.ndarray]:
        out = super().feature_arrays(table, baseline, catalog, transfer)
        if self.feature_version < 4:
            return out
        terms = self._cost_terms(table, catalog, True)
        total = np.maximum(terms.sum(axis=1), 1e-12)
        out.update({f"share_{t}": terms[:, i] / total for i, t in enumerate(COST_TERMS)})
        out["log_reference_over_roofline"] = np.log(self.reference_us(table, baseline, catalog)
                                                    / baseline["time_us"].to_numpy(dtype=np.float64))
        return out

    def predict(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        # the reference and the tree features read the same cost terms of the same rows: computed once per call
        self._terms_cache: dict[bool, tuple[pd.DataFrame, np.ndarray]] | None = {}
        try:
            return super().predict(table, baseline, catalog)
        finally:
            self._terms_cache = None

    def _cost_terms(self, table: pd.DataFrame, catalog: Catalog, zipf_cache: bool) -> np.ndarray:
        """:func:`cost_terms`, remembered for the very same table object during one :meth:`predict`."""
        cache = getattr(self, "_terms_cache", None)
        if cache is None:
            return cost_terms(table, catalog, zipf_cache)
        hit = cache.get(zipf_cache)
        if hit is not None and hit[0] is table:
            return hit[1]
        terms = cost_terms(table, catalog, zipf_cache)
        cache[zipf_cache] = (table, terms)
        return terms

    @property
    def feature_names(self) -> list[str]:
        return super().feature_names + (list(SHARE_FEATURES) if self.feature_version >= 4 else [])

    @property
    def transfer_feature_names(self) -> list[str]:
        return super().transfer_feature_names + (list(SHARE_FEATURES) if self.feature_version >= 4 else [])

    def fit_reference(self, table: pd.DataFrame, catalog: Catalog) -> dict[str, list[float]]:
        """Non-negative least squares of the cost terms on measured time, relative error, per group."""
        terms = cost_terms(table, catalog, self.feature_version >= 4)
        y = table["time_us"].to_numpy(dtype=np.float64)
        groups = _groups(table)
        out: dict[str, list[float]] = {}
        for g in pd.unique(groups):
            m = groups == g
            if m.sum() < 2 * len(COST_TERMS):
                continue  # too few rows to pin the terms: the group keeps the roofline reference
            w = 1.0 / y[m]
            from scipy.optimize import nnls

            coef, _ = nnls(terms[m] * w[:, None], y[m] * w)
            out[str(g)] = [float(c) for c in coef]
        return out

    def fit(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
            sample_weight: np.ndarray | None = None, select: bool | None = None) -> EmbeddingXGB:
        """Fit the cost model (``reference="linear"``) and the trees. With ``select`` the groups whose
        :data:`SELECT_FOLDS`-fold cross-validated error (inside ``table``) is lower with the roofline reference
        keep the roofline reference (``self.selection`` records both errors per group)."""
        select = self.select if select is None else select
        self.coefficients, self.selection, self.group_dispatch_us = {}, {}, {}
        sub, base = self._select(table, baseline)
        if len(sub):
            self.group_dispatch_us = self.fit_dispatch(sub, base, catalog)
        if self.reference == "linear":
            if len(sub):
                self.coefficients = self.fit_reference(sub, catalog)
                if select and len(sub) >= 10 * SELECT_FOLDS:
                    self._select_groups(sub, base, catalog)
        super().fit(table, baseline, catalog, sample_weight)
        return self

    def fit_dispatch(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> dict[str, float]:
        """Per (direction, variant) group, the host dispatch inside framework-timed GPU rows: per (device,
        framework) with at least ``DISPATCH_MIN_ROWS`` rows whose roofline is under ``DISPATCH_TINY_US`` (almost pure
        overhead), the median of measured minus roofline; the median over those. Groups without such rows: none
        (0: their rows keep their whole time as kernel time)."""
        rows = _gpu_rows(table, catalog) & (kernel_timing(table) == 0)
        if not rows.any():
            return {}
        frame = _dispatch_gaps(table, baseline).assign(grp=_groups(table))[rows]
        found = {str(g): tiny_op_dispatch_us(sub) for g, sub in frame.groupby("grp")}
        return {g: v for g, v in found.items() if v is not None}

    def host_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Per row, the host dispatch its prediction includes (:attr:`group_dispatch_us` of its group on GPU rows timed
        through a framework, or made by a workload builder; 0 elsewhere): what the engine takes off to get the
        kernel time (:class:`hybrid.engine.costs.KernelTimeModel`)."""
        out = np.zeros(len(table))
        if not self.group_dispatch_us or not len(table):
            return out
        rows = _gpu_rows(table, catalog) & (kernel_timing(table) == 0)
        if rows.any():
            out[rows] = pd.Series(_groups(table)[rows]).map(self.group_dispatch_us).fillna(0.0).to_numpy(np.float64)
        return out

    def _select_groups(self, sub: pd.DataFrame, base: pd.DataFrame, catalog: Catalog) -> None:
        fold = np.random.default_rng(self.params.seed).integers(0, SELECT_FOLDS, len(sub))
        err = {"linear": np.full(len(sub), np.nan), "roofline": np.full(len(sub), np.nan)}
        for k in range(SELECT_FOLDS):
            tr, te = fold != k, fold == k
            if not tr.any() or not te.any():
                continue
            for ref in err:
                m = EmbeddingXGB(self.params, self.use_device_features, self.feature_version, self.transfer, ref)
                m.fit(sub.loc[tr], base.loc[tr], catalog, select=False)
                pred = m.predict(sub.loc[te], base.loc[te], catalog)
                err[ref][te] = np.abs(np.log(pred / sub.loc[te, "time_us"].to_numpy(dtype=np.float64)))
        groups = _groups(sub)
        for g in list(self.coefficients):
            m = (groups == g) & np.isfinite(err["linear"]) & np.isfinite(err["roofline"])
            lin, roof = float(np.mean(err["linear"][m])), float(np.mean(err["roofline"][m]))
            self.selection[g] = {"cv_mean_abs_log_err_linear": lin, "cv_mean_abs_log_err_roofline": roof}
            if roof < lin:
                del self.coefficients[g]

    def reference_constants(self) -> dict[str, dict[str, float]]:
        """The fitted reference per group: coefficient of each cost term (dimensionless passes / line transfers;
        ``launches`` in kernel launches)."""
        return {g: dict(zip(COST_TERMS, c, strict=True)) for g, c in self.coefficients.items()}

    def continue_boosting(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
                          rounds: int = 50, weight: float = 1.0, learning_rate: float | None = None,
                          target_offset: float = 0.0) -> EmbeddingXGB:
        new = super().continue_boosting(table, baseline, catalog, rounds, weight, learning_rate, target_offset)
        new.reference, new.coefficients = self.reference, dict(self.coefficients)  # type: ignore[attr-defined]
        new.group_dispatch_us = dict(self.group_dispatch_us)  # type: ignore[attr-defined]
        return new  # type: ignore[return-value]

    def save(self, directory: Path) -> None:
        super().save(directory)
        write_json(Path(directory) / "reference.json", {
            "reference": self.reference, "cost_terms": list(COST_TERMS), "coefficients": self.coefficients,
            "selection": self.selection, "dispatch_us": self.group_dispatch_us,
            "units": "byte terms: us at device memory bandwidth; count terms: us of one 64-byte line at it; "
                     "launches: device kernel latency; dispatch_us: host us inside framework-timed GPU rows"})

    @classmethod
    def load(cls, directory: Path) -> EmbeddingXGB:
        obj = super().load(directory)
        path = Path(directory) / "reference.json"
        if path.is_file():
            meta = read_json(path)
            if list(meta.get("cost_terms", [])) != list(COST_TERMS):
                raise InvalidInputError(f"{directory}: saved embedding cost terms differ from this hybrid's; refit")
            obj.reference = str(meta.get("reference", "linear"))  # type: ignore[attr-defined]
            obj.coefficients = {str(k): [float(x) for x in v] for k, v in meta.get("coefficients", {}).items()}  # type: ignore[attr-defined]
            obj.selection = dict(meta.get("selection", {}))  # type: ignore[attr-defined]
            # (saved before the dispatch was fitted: none, the whole time stays kernel time as it was priced then)
            obj.group_dispatch_us = {str(k): float(v)  # type: ignore[attr-defined]
                                     for k, v in meta.get("dispatch_us", {}).items()}
        else:  # saved before the fitted reference existed
            obj.reference, obj.coefficients = "roofline", {}  # type: ignore[attr-defined]
            obj.group_dispatch_us = {}  # type: ignore[attr-defined]
        return obj  # type: ignore[return-value]

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["reference"] = self.reference
        if self.selection:
            out["reference_selection"] = self.selection
        if self.coefficients:
            out["reference_constants"] = self.reference_constants()
        return out
