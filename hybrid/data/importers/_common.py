"""Helpers shared by the importers: checked CSV reading, device resolution, provenance, warnings.

Every failure here is an :class:`~hybrid.errors.ImportFormatError` (or :class:`UnknownDeviceError`) whose
message starts with the file name, so a user importing hundreds of files knows which one to look at.
"""

from __future__ import annotations

import csv
import os
import re
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.data.schema import (
    COLUMN_BY_NAME,
    COLUMNS,
    REQUIRED,
    bare_carriage_returns,
    binary_file_reason,
    csv_record_lines,
    validate,
)
from hybrid.errors import HybridError, ImportFormatError, SchemaError, UnknownDeviceError
from hybrid.hardware.catalog import Catalog, default_catalog


class DataImportWarning(UserWarning):
    """Rows an importer skipped or repaired (conv rows, truncated logs, non-GPU devices, ...)."""


def warn(path: Path | str, message: str) -> None:
    """Emit a :class:`DataImportWarning` prefixed with the file name."""
    warnings.warn(f"{path}: {message}", DataImportWarning, stacklevel=3)


def display_path(path: Path) -> str:
    """How a file is named in the ``source`` column and in messages: relative to the public data directory
    when it lies inside it (so tables made on different machines agree), else relative to the working
    directory, else absolute."""
    from hybrid.data.paths import public_data_dir

    p = Path(path).resolve()
    roots = []
    data = public_data_dir(required=False)
    if data is not None:
        roots.append(data)
    roots.append(Path.cwd().resolve())
    for root in roots:
        try:
            return p.relative_to(root).as_posix()
        except ValueError:
            continue
    return p.as_posix()


#: Leading bytes of the compressed formats a user may hand over instead of the text file (``results.csv.gz``).
_COMPRESSED = {b"\x1f\x8b": ("gzip", "gunzip"), b"BZh": ("bzip2", "bunzip2"), b"\xfd7zXZ\x00": ("xz", "unxz"),
               b"PK\x03\x04": ("zip", "unzip"), b"\x28\xb5\x2f\xfd": ("zstd", "unzstd")}


def refuse_compressed(path: Path | str, head: bytes) -> None:
    """Raise naming ``path`` when its first bytes ``head`` are those of a compressed file. The importers read text:
    a compressed file read as one fails with a misleading message ("truncated last line", "no '# nThread'
    header"), or, for pandas, is decompressed by its name while the checks on the raw bytes see the compressed
    ones."""
    for magic, (kind, tool) in _COMPRESSED.items():
        if head.startswith(magic):
            raise ImportFormatError(f"{path}: a {kind}-compressed file; the importers read the uncompressed text: "
                                    f"decompress it first (`{tool} {path}`)")


def read_csv_checked(path: Path, required: Sequence[str], *, what: str) -> pd.DataFrame:
    """Read a CSV, failing with the file name on parse errors, missing columns, an empty body or a
    truncated last line (fewer fields than the header and no final newline)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ImportFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    refuse_compressed(path, raw)
    if not raw.strip():
        raise ImportFormatError(f"{path}: file is empty (expected a {what} CSV)")
    binary = binary_file_reason(path)
    if binary:
        raise ImportFormatError(f"{path}: {binary} (expected a {what} CSV)")
    carriage = bare_carriage_returns(raw)
    if carriage:
        raise ImportFormatError(f"{path}: {carriage}")
    try:
        df = pd.read_csv(path, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = "; the file looks truncated (no final newline)" if not raw.endswith(b"\n") else ""
        raise ImportFormatError(f"{path}: not a readable {what} CSV ({first}){hint}") from None
    df.columns = [str(c).strip() for c in df.columns]
    if (lines := csv_record_lines(path, len(df), data=raw)) is not None and len(lines) == len(df):
        # blank lines (which pandas skips) shifted the rows: the index holds each row's file line - 2, which
        # :func:`csv_line` names (it said the line before the row's after each blank line)
        df.index = pd.Index(np.asarray(lines, dtype=np.int64) - 2)
    if all(c in df.columns for c in REQUIRED) and "op" not in required:
        # a table `data import` or `hybrid profile` wrote, given back to an importer: the columns an upstream
        # format shares with it passed, and the error came rows later (xla-matmul: "line 454, column 'b': missing
        # value") or the import re-read canonical values as upstream ones
        raise ImportFormatError(f"{path}: already a canonical measurement table (columns "
                                f"{', '.join(REQUIRED)}), not a {what} CSV: use it as it is (`hybrid data validate "
                                f"{path}`, `hybrid calibrate {path} ...`)")
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ImportFormatError(
            f"{path}: missing column(s) {', '.join(repr(c) for c in missing)} for a {what} CSV "
            f"(found: {', '.join(repr(c) for c in df.columns[:12])}{' ...' if len(df.columns) > 12 else ''})"
            + ("; the header is one column: is the file separated by something other than commas?"
               if len(df.columns) == 1 and any(sep in str(df.columns[0]) for sep in (";", "\t", "|")) else "")
        )
    if len(df) == 0:
        raise ImportFormatError(f"{path}: no data rows (header only)")
    if not raw.endswith(b"\n"):
        # The file was cut mid-write, or its writer left out the final newline: the last value may be a
        # prefix of the real one (9752380952 cut to 975), which no parser can tell. Missing fields are an
        # error; a complete-looking last row is dropped with a warning rather than imported with a number
        # that may be wrong.
        last = raw.rsplit(b"\n", 1)[-1].decode("utf-8", "replace")
        header_fields = len(df.columns)
        try:
            fields = len(next(csv.reader([last])))
        except (csv.Error, StopIteration):
            fields = 0
        line = csv_line(df, len(df) - 1)
        if fields < header_fields:
            raise ImportFormatError(
                f"{path}: truncated last line (line {line}: {fields} of {header_fields} fields, "
                "no final newline)"
            )
        df = df.iloc[:-1]
        warn(path, f"line {line} has no final newline (truncated file?): that row was not imported; "
                   "add the newline if the file is complete")
        if len(df) == 0:
            raise ImportFormatError(f"{path}: no complete data rows (the only row, line {line}, has no "
                                    "final newline: truncated file?)")
    return df


def numeric(df: pd.DataFrame, column: str, path: Path, *, required: bool = True,
            positive: bool = False) -> np.ndarray:
    """Column as float64; non-numbers, NaN (if ``required``) and non-positive values (if ``positive``)
    raise naming the file, CSV line and column."""
    raw = df[column]
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)

    def fail(mask: np.ndarray, problem: str) -> ImportFormatError:
        i = int(np.flatnonzero(mask)[0])
        return ImportFormatError(f"{path}: line {csv_line(df, i)}, column {column!r}: {problem(raw.iloc[i])}")

    bad = np.isnan(values) & raw.notna().to_numpy()
    if bad.any():
        raise fail(bad, lambda v: f"not a number ({str(v)!r})")
    if required and np.isnan(values).any():
        raise fail(np.isnan(values), lambda v: "missing value (NaN/empty)")
    if positive and (~np.isnan(values) & ~(values > 0)).any():
        raise fail(~np.isnan(values) & ~(values > 0), lambda v: f"must be > 0, got {str(v)!r}")
    if np.isinf(values).any():
        raise fail(np.isinf(values), lambda v: "infinite value")
    return values


def text(df: pd.DataFrame, column: str, path: Path) -> pd.Series:
    """Column as stripped strings; an empty cell raises naming the file, CSV line and column. (pandas reads an
    empty cell as NaN, which a lookup table turns into "unknown opcode nan" or a silent default.)"""
    values = df[column].astype("string").str.strip()
    missing = (values.isna() | (values == "")).to_numpy(dtype=bool)
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        raise ImportFormatError(f"{path}: line {csv_line(df, i)}, column {column!r}: missing value (empty)")
    return values


def csv_line(df: pd.DataFrame, pos: int) -> int:
    """1-based CSV line of the row at position ``pos`` (the index holds the original 0-based row number)."""
    label = df.index[pos]
    return int(label) + 2 if isinstance(label, (int, np.integer)) else pos + 2


def resolve_device_names(names: Iterable[str], catalog: Catalog, path: Path | str) -> dict[str, str]:
    """Catalog key for each distinct device name; an unknown name is an :class:`UnknownDeviceError` that
    names the file and suggests ``--device``."""
    out: dict[str, str] = {}
    for name in dict.fromkeys(str(n) for n in names):
        key = catalog.resolve_device(name, missing_ok=True)
        if key is None:
            try:
                catalog.resolve_device(name)
            except UnknownDeviceError as exc:
                raise UnknownDeviceError(
                    f"{path}: {exc}; pass --device NAME (device=...) to say which catalog device ran it"
                ) from None
        out[name] = key  # type: ignore[assignment]
    return out


def resolve_system_name(name: str | None, catalog: Catalog, path: Path | str) -> str | None:
    """Catalog key of an explicitly named system (an unknown name is an error naming the file)."""
    if name is None or not str(name).strip():
        return None
    key = catalog.resolve_system(str(name), missing_ok=True)
    if key is None:
        try:
            catalog.resolve_system(str(name))
        except UnknownDeviceError as exc:
            raise UnknownDeviceError(f"{path}: {exc}") from None
    return key


_SYSTEM_PREFIXES = re.compile(r"^(results|result|logs|log|runs|run|nccl|bench|benchmarks?)[_\-.]+", re.I)


def infer_system(path: Path, catalog: Catalog) -> str | None:
    """The first directory (nearest the file first) whose name, or name without a ``results_``-like prefix,
    is a catalog system alias: ``results_polaris/...`` -> ``Polaris``. ``None`` if nothing matches."""
    for part in reversed(Path(path).resolve().parent.parts):
        for cand in (part, _SYSTEM_PREFIXES.sub("", part)):
            if cand and (key := catalog.resolve_system(cand, missing_ok=True)) is not None:
                return key
    return None


def finish(df: pd.DataFrame, path: Path, catalog: Catalog, *, source: str, device: str | None = None,
           framework: str | None = None) -> pd.DataFrame:
    """Fill provenance, apply the ``device`` override, resolve device names (clear error naming the file
    and ``--device``) and validate the table against the schema.

    A ``_line`` column (the source file's line of each row, where rows were skipped or one line gave several rows)
    is dropped, and names the line in the schema's errors (which named "row N (CSV line N+1)" of the imported
    rows: another line of the file, or one past its end)."""
    df = df.reset_index(drop=True)
    lines = df.pop("_line").to_numpy() if "_line" in df.columns else None
    where = df.pop("_where").to_numpy() if "_where" in df.columns else None
    if device is not None:
        key = resolve_device_names([device], catalog, path)[device]
        df["device"] = key
    else:
        mapping = resolve_device_names(pd.unique(df["device"].astype(str)), catalog, path)
        df["device"] = df["device"].astype(str).map(mapping)
    df["source"] = source
    if framework is not None and "framework" not in df.columns:
        df["framework"] = framework
    try:
        return validate(df, catalog, source=str(path))
    except SchemaError as exc:
        args = getattr(exc, "row_args", None)
        if lines is None or args is None:
            raise
        pos, column, problem = args[:3]
        said = f" ({where[pos]})" if where is not None else ""
        raise SchemaError(f"{path}: line {int(lines[pos])}{said}, column {column!r} of the imported row: "
                          f"{problem}") from None
    except HybridError as exc:  # pragma: no cover - validate only raises SchemaError
        raise ImportFormatError(f"{path}: {exc}") from None


def catalog_or_default(catalog: Catalog | None) -> Catalog:
    return catalog if catalog is not None else default_catalog()


def as_paths(paths: Iterable[str | os.PathLike] | str | os.PathLike) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        return [Path(paths)]
    return [Path(p) for p in paths]


def concat(frames: list[pd.DataFrame], what: str) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        raise ImportFormatError(f"no rows imported ({what})")
    table = pd.concat(frames, ignore_index=True, sort=False)
    # the union of the files' columns in schema order, extras last, as :func:`validate` orders one file's (files of
    # other op families add their shape columns after the first file's extras and provenance otherwise)
    extra = [c for c in table.columns if c not in COLUMN_BY_NAME]
    return table[[c.name for c in COLUMNS if c.name in table.columns] + extra]
