"""The interface every learned correction implements (scikit-learn style ``fit`` / ``predict``), plus helpers.

A correction covers a group of op families. It learns how real runtimes deviate from the analytical baseline
(:func:`hybrid.ops.roofline.roofline` for the same rows) and predicts ``time_us`` per row, NaN where it
cannot (an unseen system for a collective, say), so the caller can fall back to the baseline.
"""

from __future__ import annotations

import abc
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid.atomic import write_text
from hybrid.errors import InvalidInputError, at_row
from hybrid.hardware.catalog import Catalog


class Correction(abc.ABC):
    """A learned correction on top of the roofline for some op families."""

    #: registry name, also the ``method`` the predictor reports for rows it predicts
    name: str = ""
    #: op families (keys of :data:`hybrid.ops.families.FAMILIES`) this correction covers
    families: tuple[str, ...] = ()
    #: fewest training rows :meth:`HybridPredictor.fit` needs before it fits this correction
    min_rows: int = 20

    @property
    def key(self) -> str:
        """Directory name inside a saved predictor (unique per instance kind)."""
        return self.name

    @abc.abstractmethod
    def fit(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> Correction:
        """Learn from measured rows (``time_us`` present) of this correction's families."""

    @abc.abstractmethod
    def predict(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """``time_us`` per row (NaN where this correction cannot predict)."""

    def predict_with_source(self, table: pd.DataFrame, baseline: pd.DataFrame,
                            catalog: Catalog) -> tuple[np.ndarray, np.ndarray]:
        """(``time_us``, ``method``) per row: the name of the model that answered each row (``""`` where none
        did, i.e. NaN). One model answers here (this correction's :attr:`name`); a correction made of several
        (per-system curves and a cross-system model, say) overrides this to name each row's."""
        pred = self.predict(table, baseline, catalog)
        return pred, np.where(np.isfinite(pred), self.name, "").astype(object)

    def predict_coded(self, table: pd.DataFrame, baseline: pd.DataFrame,
                      catalog: Catalog) -> tuple[np.ndarray, np.ndarray, list[Any]]:
        """:meth:`predict_with_source` as (``time_us``, code per row, names): ``names[code]`` is the row's
        ``method``; code -1 where no model answered (NaN). Corrections that keep the default
        :meth:`predict_with_source` name no row as text."""
        if type(self).predict_with_source is Correction.predict_with_source:
            pred = self.predict(table, baseline, catalog)
            return pred, np.where(np.isfinite(pred), 0, -1), [self.name]
        pred, source = self.predict_with_source(table, baseline, catalog)
        codes, names = pd.factorize(np.asarray(source, dtype=object), use_na_sentinel=False)
        return pred, np.where(np.isfinite(pred), codes, -1), list(names)

    @abc.abstractmethod
    def save(self, directory: Path) -> None:
        """Write the fitted state in native formats (XGBoost JSON, JSON parameters) into ``directory``."""

    @classmethod
    @abc.abstractmethod
    def load(cls, directory: Path) -> Correction:
        """Inverse of :meth:`save`."""

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """Parameters and a training summary (for MLflow params/tags and ``summary()``)."""

    @property
    def fitted(self) -> bool:
        return bool(getattr(self, "_fitted", False))

    def _check_fitted(self) -> None:
        if not self.fitted:
            raise InvalidInputError(f"correction {self.key} is not fitted; call fit() first")


def family_mask(baseline: pd.DataFrame, families: tuple[str, ...]) -> np.ndarray:
    """Rows of ``baseline`` (a roofline frame) whose family is one of ``families``."""
    return isin_fast(baseline["family"], families)


def isin_fast(values: pd.Series | np.ndarray, allowed: Any) -> np.ndarray:
    """``str(value) in allowed`` per row, decided once per distinct value (a factorize instead of converting
    every row to a string: the difference is most of a large prediction's overhead). Missing values: False."""
    allowed = {str(a) for a in allowed}
    if isinstance(values, pd.Series) and isinstance(values.dtype, pd.CategoricalDtype):
        # a categorical already holds its codes (-1: missing): no factorize of every row (the roofline's family
        # column, the predictor's device and dtype columns; ~8x faster on 200,000 rows)
        codes = values.cat.codes.to_numpy()
        uniques = values.cat.categories
    else:
        codes, uniques = pd.factorize(values)
    hit = np.array([str(u) in allowed for u in uniques] + [False], dtype=bool)
    return hit[codes]


def str_codes(values: pd.Series | np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(integer code per row, distinct values as strings); missing values get code -1."""
    codes, uniques = pd.factorize(values)
    return codes, [str(u) for u in uniques]


def device_dtype_pairs(table: pd.DataFrame) -> tuple[list[tuple[str, str]], np.ndarray]:
    """The distinct (device, dtype) pairs of ``table`` (dtype ``fp32`` without a ``dtype`` column) and each row's
    index into them, from integer codes (no per-row strings): per-pair work done once per pair."""
    d_codes, d_uniques = pd.factorize(table["device"], use_na_sentinel=False)
    if "dtype" in table.columns:
        t_codes, t_uniques = pd.factorize(table["dtype"], use_na_sentinel=False)
    else:
        t_codes, t_uniques = np.zeros(len(table), dtype=np.int64), np.array(["fp32"], dtype=object)
    nt = max(len(t_uniques), 1)
    combos, codes = np.unique(d_codes.astype(np.int64) * nt + t_codes, return_inverse=True)
    return [(str(d_uniques[c // nt]), str(t_uniques[c % nt])) for c in combos], np.asarray(codes).reshape(-1)


def measured_log_ratio(table: pd.DataFrame, baseline: pd.DataFrame) -> np.ndarray:
    """Target of the kernel/embedding models: ``log(measured / roofline)``; rejects bad measurements."""
    if "time_us" not in table.columns:
        raise InvalidInputError("training table has no 'time_us' column")
    y = pd.to_numeric(table["time_us"], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~(np.isfinite(y) & (y > 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InvalidInputError(f"time_us must be positive and finite, got {table['time_us'].iloc[i]!r} "
                                f"{at_row(table.index, i)}")
    return np.log(y) - np.log(baseline["time_us"].to_numpy(dtype=np.float64))


def write_json(path: Path, payload: Any) -> None:
    """Write JSON atomically (temporary file, then rename)."""
    write_text(path, json.dumps(payload, indent=1, sort_keys=True, default=_json_default))


def read_json(path: Path) -> Any:
    if not path.is_file():
        raise InvalidInputError(f"missing file {path} (not a saved hybrid predictor?)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{path} is not valid JSON: {exc}") from None


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
