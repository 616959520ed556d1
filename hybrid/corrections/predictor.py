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

import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid.atomic import atomic_directory
from hybrid.corrections import adapt as adapt_mod
from hybrid.corrections.base import Correction, family_mask, read_json, write_json
from hybrid.corrections.collective_sigmoid import CollectiveSigmoid
from hybrid.corrections.embedding_xgb import EmbeddingXGB
from hybrid.corrections.kernel_xgb import GemmXGB, PointwiseXGB, XGBCorrection, XGBParams
from hybrid.data.schema import validate
from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import Catalog, default_catalog
from hybrid.hardware.device import Device, System
from hybrid.ops.roofline import resolve_system, roofline

#: Format version of a saved predictor directory.
FORMAT_VERSION = 1
#: Correction classes a saved predictor may name.
CORRECTION_CLASSES: dict[str, type[Correction]] = {
    c.__name__: c for c in (GemmXGB, PointwiseXGB, EmbeddingXGB, CollectiveSigmoid)
}
#: ``method`` of rows no correction covers.
ROOFLINE, ALPHA_BETA = "roofline", "alpha-beta"
#: Columns of the training table that define the data digest.
_DIGEST_COLUMNS = ("device", "op", "dtype", "time_us", "b", "m", "n", "k", "elements", "rows", "hidden",
                   "num_embeddings", "embedding_dim", "pooling_factor", "batch_size", "size_bytes", "n_ranks",
                   "n_nodes", "system", "direction", "variant")


def default_corrections(seed: int = 0, collective_transfer: bool = False) -> list[Correction]:
    """One correction per family group: GEMM XGBoost, pointwise XGBoost, embedding XGBoost, collective sigmoids
    (``collective_transfer``: with the cross-system transfer model for systems never measured)."""
    emb = EmbeddingXGB()
    emb.params.seed = seed
    return [GemmXGB(XGBParams(seed=seed)), PointwiseXGB(XGBParams(seed=seed)), emb,
            CollectiveSigmoid(transfer=collective_transfer)]


class HybridPredictor:
    """Analytical baseline + learned corrections, scikit-learn style (``fit`` / ``predict``)."""

    def __init__(self, catalog: Catalog | None = None, corrections: Sequence[Correction] | None = None,
                 seed: int = 0, collective_transfer: bool = False):
        """``collective_transfer`` (only without explicit ``corrections``): collectives of systems never measured
        get the cross-system transfer model instead of alpha-beta (see ``CollectiveSigmoid(transfer=True)``)."""
        self.catalog: Catalog = catalog if catalog is not None else default_catalog()
        self.corrections: list[Correction] = (list(corrections) if corrections is not None
                                              else default_corrections(seed, collective_transfer))
        keys = [c.key for c in self.corrections]
        if len(set(keys)) != len(keys):
            raise InvalidInputError(f"corrections must have distinct keys, got {keys}")
        self.seed = seed
        #: few-shot residual offsets: correction key (or "roofline") -> device -> log scale
        self.offsets: dict[str, dict[str, float]] = {}
        #: few-shot boosted models used for one device only: (correction key, device) -> correction
        self.device_models: dict[tuple[str, str], XGBCorrection] = {}
        self.fit_info: dict[str, dict[str, Any]] = {}
        self.data_digest: str = ""
        self.devices_seen: list[str] = []
        self.systems_seen: list[str] = []

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
        # unknown devices / systems: UnknownDeviceError naming the closest catalog entries
        for name in pd.unique(table["device"].dropna().astype(str)):
            self.catalog.resolve_device(name)
        if "system" in table.columns:
            for name in pd.unique(table["system"].dropna().astype(str)):
                resolve_system(self.catalog, name)
        work = table
        if not training and "time_us" not in table.columns:
            work = table.assign(time_us=1.0)
        elif not training:
            t = pd.to_numeric(table["time_us"], errors="coerce")
            work = table.assign(time_us=t.where(t > 0, 1.0).fillna(1.0))
        norm = validate(work, self.catalog, source="fit" if training else "predict")
        norm.index = table.index
        if "system" in norm.columns:  # catalog keys for systems too (curves are keyed by system)
            sys_codes, sys_uniques = pd.factorize(norm["system"].astype("string"))
            keys = np.array([resolve_system(self.catalog, str(s)).key for s in sys_uniques] + [None], dtype=object)
            norm["system"] = keys[np.where(sys_codes < 0, len(sys_uniques), sys_codes)]
        return norm, roofline(norm, self.catalog)

    # ------------------------------------------------------------------ fit
    def fit(self, table: pd.DataFrame, progress: bool = False) -> HybridPredictor:
        """Fit every correction the data supports (at least its ``min_rows`` rows); records what was fitted."""
        if isinstance(table, pd.DataFrame) and len(table) and "time_us" not in table.columns:
            raise InvalidInputError("training table has no 'time_us' column")
        norm, base = self._prepare(table, training=True)
        from tqdm.auto import tqdm

        self.fit_info = {}
        for corr in tqdm(self.corrections, desc="fit corrections", unit="model", disable=not progress, leave=False):
            n = int(family_mask(base, corr.families).sum())
            if n < corr.min_rows:
                self.fit_info[corr.key] = {"fitted": False, "rows": n,
                                           "reason": f"{n} rows of {'/'.join(corr.families)} (need {corr.min_rows})"}
                continue
            corr.fit(norm, base, self.catalog)
            self.fit_info[corr.key] = {"fitted": True, "rows": n}
        self.offsets, self.device_models = {}, {}
        self.data_digest = table_digest(norm)
        self.devices_seen = sorted(map(str, pd.unique(norm["device"])))
        self.systems_seen = sorted(map(str, pd.unique(norm["system"].dropna()))) if "system" in norm.columns else []
        return self

    # ------------------------------------------------------------------ predict
    def _raw(self, norm: pd.DataFrame, base: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(time_us, method, group key used for offsets) before few-shot offsets."""
        time = base["time_us"].to_numpy(dtype=np.float64).copy()
        is_coll = (base["family"].astype(str) == "collective").to_numpy()
        method = np.where(is_coll, ALPHA_BETA, ROOFLINE).astype(object)
        group = np.full(len(norm), ROOFLINE, dtype=object)
        devices = norm["device"].astype(str).to_numpy()
        for corr in self.corrections:
            if not corr.fitted:
                continue
            mask = family_mask(base, corr.families)
            if not mask.any():
                continue
            source = None
            if isinstance(corr, CollectiveSigmoid):  # per row: per-system curves or the cross-system model
                pred, source = corr.predict_with_source(norm, base, self.catalog)
            else:
                pred = corr.predict(norm, base, self.catalog)
            for (key, dev), model in self.device_models.items():
                rows = mask & (devices == dev)
                if key == corr.key and rows.any():
                    pred[rows] = model.predict(norm.loc[rows], base.loc[rows], self.catalog)
            ok = mask & np.isfinite(pred)
            time[ok] = pred[ok]
            method[ok] = corr.name if source is None else source[ok]
            group[ok] = corr.key
        return time, method, group

    def predict(self, table: pd.DataFrame) -> pd.DataFrame:
        """Per row (same index): ``time_us``, ``roofline_us``, ``method``, ``bound``."""
        norm, base = self._prepare(table, training=False)
        time, method, group = self._raw(norm, base)
        if self.offsets:
            devices = norm["device"].astype(str).to_numpy()
            scale = np.zeros(len(norm))
            for key, per_dev in self.offsets.items():
                for dev, off in per_dev.items():
                    scale[(group == key) & (devices == dev)] = off
            time = time * np.exp(scale)
        return pd.DataFrame({"time_us": time, "roofline_us": base["time_us"].to_numpy(dtype=np.float64),
                             "method": method, "bound": base["bound"].astype(str).to_numpy()}, index=table.index)

    def predict_time(self, table: pd.DataFrame) -> np.ndarray:
        """Predicted ``time_us`` per row as a numpy array."""
        return self.predict(table)["time_us"].to_numpy()

    # ------------------------------------------------------------------ few-shot adaptation
    def adapt(self, table: pd.DataFrame, strategy: str = "boost") -> HybridPredictor:
        """A copy adapted to the device(s) in ``table`` (typically 5-50 measured rows of a new GPU).

        ``strategy``: ``"boost"`` (default: extra XGBoost trees for that device; rows of other corrections, or
        fewer than 3 rows of a family, use ``residual``) or ``"residual"`` (one shrunken log-scale per device
        and correction). See ``experiments/few_shot/results.md`` for the comparison. ``self`` is not modified.
        """
        if strategy not in adapt_mod.STRATEGIES:
            raise InvalidInputError(f"unknown adaptation strategy {strategy!r}; known: {adapt_mod.STRATEGIES}")
        norm, base = self._prepare(table, training=True)
        new = self.copy()
        devices = norm["device"].astype(str)
        if strategy == "boost":
            for corr in new.corrections:
                if not (isinstance(corr, XGBCorrection) and corr.fitted):
                    continue
                for dev in pd.unique(devices):
                    rows = (devices == dev).to_numpy() & family_mask(base, corr.families)
                    if rows.sum() >= 3:
                        base_model = new.device_models.get((corr.key, str(dev)), corr)
                        new.device_models[(corr.key, str(dev))] = base_model.continue_boosting(
                            norm.loc[rows], base.loc[rows], new.catalog, rounds=adapt_mod.BOOST_ROUNDS,
                            learning_rate=adapt_mod.BOOST_LEARNING_RATE)
        time, _, group = new._raw(norm, base)
        resid = np.log(norm["time_us"].to_numpy(dtype=np.float64)) - np.log(time)
        boosted = np.array([(g, d) in new.device_models for g, d in zip(group, devices, strict=True)], dtype=bool)
        labels = pd.Series(group.astype(str), index=norm.index) + "\x00" + devices
        offs = adapt_mod.residual_offsets(resid[~boosted], labels[~boosted])
        for label, off in offs.items():
            key, dev = label.split("\x00")
            new.offsets.setdefault(key, {})[dev] = off
        return new

    def copy(self) -> HybridPredictor:
        """An independent copy (through the save format, so it is exactly what ``load`` would give)."""
        with tempfile.TemporaryDirectory(prefix="hybrid-copy-") as tmp:
            self.save(Path(tmp) / "p")
            return HybridPredictor.load(Path(tmp) / "p", catalog=self.catalog)

    # ------------------------------------------------------------------ persistence
    def save(self, directory: str | os.PathLike) -> Path:
        """Write the predictor to ``directory`` (created or replaced atomically); returns its path."""
        target = Path(directory)
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
                "corrections": entries, "device_models": dev_models, "offsets": self.offsets,
                "fit_info": self.fit_info, "data_digest": self.data_digest,
                "devices_seen": self.devices_seen, "systems_seen": self.systems_seen,
            })
            write_json(tmp / "catalog.json", self._catalog_payload())
        return target

    def _catalog_payload(self) -> dict[str, Any]:
        devs = set(self.devices_seen) | {d for per in self.offsets.values() for d in per}
        devs |= {d for _, d in self.device_models}
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
        obj.fit_info = manifest.get("fit_info", {})
        obj.data_digest = manifest.get("data_digest", "")
        obj.devices_seen = list(manifest.get("devices_seen", []))
        obj.systems_seen = list(manifest.get("systems_seen", []))
        return obj

    # ------------------------------------------------------------------ reporting
    def summary(self) -> dict[str, Any]:
        """What is fitted: families, devices and systems seen, row counts, adaptation state, versions."""
        fitted = [c for c in self.corrections if c.fitted]
        return {
            "fitted_families": sorted({f for c in fitted for f in c.families}),
            "corrections": {c.key: c.describe() for c in self.corrections},
            "fit_info": self.fit_info,
            "devices_seen": self.devices_seen,
            "systems_seen": self.systems_seen,
            "adapted_devices": sorted({d for per in self.offsets.values() for d in per} |
                                      {d for _, d in self.device_models}),
            "data_digest": self.data_digest,
            "versions": versions(),
        }


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
