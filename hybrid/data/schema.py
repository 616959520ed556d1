"""The canonical measurement table: one row per measured op, median runtime in microseconds.

See ``docs/schema.md`` (rendered from :data:`COLUMNS` and :mod:`hybrid.ops.families`) for the full description.
Every importer and the profiler write this table; calibration and evaluation read it. :func:`validate`
rejects a bad table with an error naming the first bad row and column; :func:`write_table` writes atomically
(a temporary file renamed into place), so a failed write leaves nothing half-written.
"""

from __future__ import annotations

import difflib
import os
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.atomic import atomic_file, check_creatable
from hybrid.errors import (
    DataQualityWarning,
    InvalidInputError,
    OutputPathError,
    SchemaError,
    UnknownDeviceError,
    at_row,
)
from hybrid.hardware.catalog import Catalog, default_catalog
from hybrid.ops.families import FAMILIES, INDEX_DISTS, OP_TO_FAMILY
from hybrid.units import normalize_dtype


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # "str", "int", "float", "bool"
    description: str
    positive: bool = False  # must be > 0 where present
    nonneg: bool = False  # must be >= 0 where present


_C = Column
#: Every column the canonical table knows, in output order.
COLUMNS: tuple[Column, ...] = (
    _C("device", "str", "catalog device key (aliases are resolved on validation)"),
    _C("op", "str", f"op name: {', '.join(sorted(OP_TO_FAMILY))}"),
    _C("dtype", "str", "element type: fp64, fp32, tf32, fp16, bf16, fp8, fp4, int8 (default fp32)"),
    _C("time_us", "float", "median runtime, microseconds", positive=True),
    _C("time_us_std", "float", "standard deviation of the runtime, microseconds", nonneg=True),
    _C("time_us_min", "float", "fastest repeat, microseconds", nonneg=True),
    _C("time_us_max", "float", "slowest repeat, microseconds", nonneg=True),
    _C("repeats", "int", "number of timed repeats behind the median", positive=True),
    _C("variant", "str", "op sub-type: elementwise kind (add, gelu, ...), GEMM layout, kernel flavour"),
    _C("direction", "str", "fwd or bwd (backward pass of norms, softmax, embeddings, attention)"),
    # GEMM family
    _C("b", "int", "GEMM batch count (1 for a plain GEMM)", positive=True),
    _C("m", "int", "GEMM rows of A / C", positive=True),
    _C("n", "int", "GEMM columns of B / C", positive=True),
    _C("k", "int", "GEMM reduction dimension", positive=True),
    _C("align", "int", "GEMM: largest power of two (elements, up to 8) dividing every operand's row stride, where "
       "known (a traced GEMM's strides); absent: taken from n and k", positive=True),
    # elementwise
    _C("elements", "int", "elementwise: number of output elements", positive=True),
    _C("n_inputs", "float", "elementwise: input tensors read (passes over `elements`; a broadcast operand counts "
       "its share, e.g. 1.001 for a bias add)", nonneg=True),
    _C("n_outputs", "float", "elementwise: output tensors written (passes over `elements`; a reduction writes a "
       "small share, 0 for a scalar)", nonneg=True),
    _C("flops_per_element", "float", "elementwise: FLOPs per output element", nonneg=True),
    # norms, softmax
    _C("rows", "int", "norm/softmax: number of rows (batchnorm: channels); elementwise (optional): an interpolated map's lines, rows x hidden = elements", positive=True),
    _C("hidden", "int", "norm/softmax: row length (batchnorm: N x H x W values per channel); elementwise: the lines' length", positive=True),
    # embedding bags
    _C("num_tables", "int", "embedding: number of tables looked up by the kernel", positive=True),
    _C("num_embeddings", "int", "embedding: rows per table", positive=True),
    _C("embedding_dim", "int", "embedding: vector length", positive=True),
    _C("pooling_factor", "float", "embedding: mean lookups per bag", positive=True),
    _C("batch_size", "int", "embedding: bags per table (batch)", positive=True),
    _C("index_dist", "str", "embedding: index distribution, uniform or zipf"),
    _C("zipf_alpha", "float", "embedding: Zipf exponent (0 = uniform)", nonneg=True),
    # attention
    _C("batch", "int", "attention / conv: batch", positive=True),
    _C("heads", "int", "attention: query heads", positive=True),
    _C("kv_heads", "int", "attention: key/value heads (GQA)", positive=True),
    _C("q_len", "int", "attention: query length", positive=True),
    _C("kv_len", "int", "attention: key/value length", positive=True),
    _C("head_dim", "int", "attention: head dimension", positive=True),
    _C("causal", "bool", "attention: causal mask"),
    _C("dropout", "float", "attention: probability of the dropout drawn inside the fused kernel (SDPA's dropout_p "
       "in training; below 1); > 0 adds the mask's Philox draws to the roofline, "
       "hybrid.ops.families.DROPOUT_INT_OPS_PER_SCORE integer ops per score forward and again backward, on the "
       "catalog's integer lanes; empty = 0", nonneg=True),
    _C("softmax_overlap", "float", "attention: 1 = the kernel overlaps the softmax's exps with its matrix multiplies "
       "(FlashAttention-3, cuDNN on Hopper and later), 0 = in series (FlashAttention-2, PyTorch's flash and "
       "efficient backends); empty = by framework and GPU generation (hybrid.ops.roofline)", nonneg=True),
    # convolution
    _C("in_channels", "int", "conv: input channels", positive=True),
    _C("out_channels", "int", "conv: output channels", positive=True),
    _C("height", "int", "conv: input height", positive=True),
    _C("width", "int", "conv: input width (1 for a 1-D convolution)", positive=True),
    _C("kernel_h", "int", "conv: kernel height", positive=True),
    _C("kernel_w", "int", "conv: kernel width", positive=True),
    _C("stride", "int", "conv: stride (both dimensions; default 1)", positive=True),
    _C("padding", "int", "conv: zero padding each side (default 0)", nonneg=True),
    _C("dilation", "int", "conv: dilation (default 1)", positive=True),
    _C("groups", "int", "conv: groups (default 1; in_channels for a depthwise convolution)", positive=True),
    # collectives
    _C("size_bytes", "int", "collective: message size as nccl-tests reports it (total buffer)", positive=True),
    _C("n_ranks", "int", "collective: ranks taking part", positive=True),
    _C("n_nodes", "int", "collective: nodes the ranks span", positive=True),
    _C("system", "str", "collective: catalog system key (node type / cluster)"),
    _C("in_place", "bool", "collective: in-place variant"),
    _C("algorithm", "str", "collective: algorithm or library setting, if known"),
    _C("wrong", "int", "collective: nccl-tests #wrong count (rows with > 0 are flagged)", nonneg=True),
    # provenance
    _C("source", "str", "where the row came from (dataset name / profiler run)"),
    _C("framework", "str", "framework that ran the op (pytorch, xla, nccl-tests, ...)"),
    _C("framework_version", "str", "its version"),
    _C("library_version", "str", "kernel library version (CUDA, cuDNN, NCCL, ROCm, MKL, ...)"),
    _C("kernel_name", "str", "kernel name, where known"),
)
COLUMN_BY_NAME = {c.name: c for c in COLUMNS}
#: the largest integer column value accepted (sizes beyond it overflow 64-bit arithmetic downstream)
MAX_INT = 2.0**62
REQUIRED = ("device", "op", "time_us")
DIRECTIONS = ("fwd", "bwd")


def required_columns(op: str) -> tuple[str, ...]:
    """Columns a row of ``op`` must fill (common + its family's shape columns)."""
    fam = FAMILIES[OP_TO_FAMILY[op]]
    return REQUIRED + fam.shape_columns


def csv_record_lines(path: str | os.PathLike, n_rows: int | None = None, *,
                     data: bytes | None = None) -> tuple[int, ...] | None:
    """The 1-based file line on which each data row of CSV file ``path`` starts, as pandas reads the rows (blank
    lines skipped, a quoted field may span lines); None when that is simply 2, 3, ... (the common case, told from a
    quick look at the bytes). pandas skips blank lines, so an error placed at "position + 2" named an earlier line
    than the row's after each blank line. ``data``: the file's bytes where the caller has read them already (the
    file is then not read again)."""
    import csv
    import io

    raw = Path(path).read_bytes() if data is None else data
    body = raw.lstrip(b"\xef\xbb\xbf")
    text = body.rstrip(b"\r\n")
    # a blank line starts with a newline, a space, a tab or a carriage return after a newline (a quick scan first)
    maybe_blank = text[:1] in (b"\n", b" ", b"\t", b"\r") or re.search(rb"\n[\n \t\r]", text) is not None
    if not (maybe_blank and re.search(rb"(^|\n)[ \t\r]*(\n|$)", text)) and (
            b'"' not in text or (n_rows is not None and text.count(b"\n") == n_rows)):
        return None  # no blank line, and no quoted field holding a newline (one line per row after the header)
    reader = csv.reader(io.StringIO(body.decode("utf-8", "replace"), newline=""))
    lines: list[int] = []
    seen_header, last = False, 0
    for record in reader:
        start, last = last + 1, reader.line_num
        if not record or (len(record) == 1 and not record[0].strip()):
            continue  # a blank line: pandas skips it
        if not seen_header:
            seen_header = True
            continue
        lines.append(start)
    if lines == list(range(2, len(lines) + 2)):
        return None
    return tuple(lines)


def row_line(df: pd.DataFrame, pos: int) -> int:
    """The CSV file line of row ``pos`` of a table :func:`read_table` read (its ``csv_lines`` attribute where blank
    lines shifted the rows), else ``pos + 2`` (one for the header line, one for 1-based numbering)."""
    lines = df.attrs.get("csv_lines") if isinstance(df, pd.DataFrame) else None
    if isinstance(lines, tuple) and 0 <= pos < len(lines):
        return lines[pos]
    return pos + 2


def _fail(df: pd.DataFrame, pos: int, column: str, problem: str, source: str, label: str = "") -> SchemaError:
    where = f"{source}: " if source else ""
    # the row's CSV file line (a Parquet file has no lines: its row alone)
    parts = [] if str(source).lower().endswith((".parquet", ".pq")) else [f"CSV line {row_line(df, pos)}"]
    parts += [label] if label else []
    said = f" ({', '.join(parts)})" if parts else ""
    exc = SchemaError(f"{where}row {pos + 1}{said}, column {column!r}: {problem}")
    exc.row_args = (pos, column, problem, source)  # type: ignore[attr-defined]  # validate() adds the index label
    return exc


def _clean_text(values: pd.Series, lower: bool = True) -> pd.Series:
    """``values.astype("string").str.strip()`` (and ``.str.lower()``) as a categorical Series, computed once per
    distinct value, so a million-row table with a few distinct ops/devices costs a factorize, not a million
    string operations. Missing values stay missing."""
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    cleaned = pd.Series(uniques, dtype="object").astype("string").str.strip()
    if lower:
        cleaned = cleaned.str.lower()
    # distinct raw values may clean to the same text (" Bmm", "bmm"): categories must be unique
    c_codes, c_uniques = pd.factorize(cleaned.to_numpy(dtype=object), use_na_sentinel=True)
    mapped = np.append(c_codes, -1)[codes]
    cat = pd.Categorical.from_codes(mapped, categories=pd.Index(c_uniques, dtype=object)) if len(c_uniques) \
        else pd.Categorical(np.full(len(values), np.nan, dtype=object))
    return pd.Series(cat, index=values.index)


def category_from_codes(codes: np.ndarray, values: object) -> pd.Categorical:
    """``pd.Categorical(values[codes])`` (code -1: missing) without building the long array first: what
    ``astype("category")`` of that array gives (same categories, sorted, of the same dtype), but the categories are
    inferred from the few ``values`` (which may repeat) and the row codes are remapped. Rows are not touched as
    text, so a million rows with a few distinct values cost an integer take."""
    if isinstance(values, pd.Index):  # an object Index would keep object categories where astype infers text
        values = values.to_numpy() if values.dtype == object else values.array
    small = pd.Categorical(values)  # pandas' own inference and sorting of the categories, on the few values
    remap = np.append(small.codes.astype(np.int64), -1)
    codes = np.asarray(codes)
    return pd.Categorical.from_codes(remap[np.where(codes < 0, len(remap) - 1, codes)], dtype=small.dtype)


def as_category(values: pd.Series) -> pd.Series:
    """``values.astype("category")`` computed once per distinct value (:func:`category_from_codes`)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        return values.astype("category")
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    return pd.Series(category_from_codes(codes, uniques), index=values.index, name=values.name)


def validate(
    table: pd.DataFrame,
    catalog: Catalog | None = None,
    *,
    source: str = "",
    resolve_devices: bool = True,
    prediction: bool = False,
) -> pd.DataFrame:
    """Check ``table`` against the schema and return a normalised copy (:func:`_validate`). An error names the row by
    its position (and CSV line) and, for a frame whose index is not the default 0, 1, 2, ..., by its index label as
    well: a filtered frame's row 2 is not the row labelled 2 (``HybridPredictor.predict`` on ``t[t.op == "gemm"]``
    said "row 1" of a row labelled 368)."""
    try:
        return _validate(table, catalog, source=source, resolve_devices=resolve_devices, prediction=prediction)
    except SchemaError as exc:
        args = getattr(exc, "row_args", None)
        index = table.index if isinstance(table, pd.DataFrame) else None
        if args is None or index is None or (isinstance(index, pd.RangeIndex) and index.start == 0
                                             and index.step == 1):
            raise
        raise _fail(table, *args, label=at_row(index, args[0])) from None


def _devices_of_systems(dev: pd.Series, empty: np.ndarray, systems: pd.Series, catalog: Catalog) -> pd.Series:
    """``dev`` (:func:`_clean_text` of the device column) with its ``empty`` rows that name a ``system`` on that
    system's GPU, as ``hybrid predict collective --system`` takes a collective: a table of collectives may name only
    their systems. One catalog lookup per distinct system; a system the catalog does not know leaves its row empty
    (then refused as a missing device)."""
    sys_names = _clean_text(systems[empty], lower=False)
    gpus = []
    for name in sys_names.cat.categories:
        sy = catalog.resolve_system(str(name), missing_ok=True)
        d = catalog.system_device(sy, missing_ok=True) if sy is not None else None
        gpus.append(d.key if d is not None else None)
    filled = dev.astype(object)
    filled[empty] = np.array(gpus + [None], dtype=object)[sys_names.cat.codes.to_numpy()]
    return _clean_text(filled, lower=False)


def _validate(
    table: pd.DataFrame,
    catalog: Catalog | None = None,
    *,
    source: str = "",
    resolve_devices: bool = True,
    prediction: bool = False,
) -> pd.DataFrame:
    """Check ``table`` against the schema and return a normalised copy.

    Normalisation: device names mapped to catalog keys, dtype names canonical, columns in schema order
    (unknown extra columns are kept at the end), integer/float/bool columns typed. Raises
    :class:`SchemaError` naming the first offending row and column.

    ``prediction=True`` (the predictor's input path; same checks, same errors, same values): ``op``, ``dtype``,
    ``direction``, ``index_dist`` and ``device`` come back as categoricals (what ``astype("category")`` of the
    default output gives) and integer columns with missing values as float64 with NaN instead of ``Int64``, so
    no per-row text column is built only to be factorised again.
    """
    if not isinstance(table, pd.DataFrame):
        raise SchemaError(f"{source or 'table'}: expected a DataFrame, got {type(table).__name__}")
    if len(table) == 0:
        raise SchemaError(f"{source or 'table'}: table is empty (no rows)")
    # (a row naming its system may leave its device out: :func:`_devices_of_systems`)
    missing = [c for c in REQUIRED if c not in table.columns and not (c == "device" and "system" in table.columns)]
    if missing:
        raise SchemaError(f"{source or 'table'}: missing required column(s) {', '.join(missing)}"
                          + _column_hint(table.columns, missing))
    # no deep copy: every normalised column is replaced as a whole, never written into
    df = table.reset_index(drop=True)
    if "device" not in df.columns:
        df["device"] = pd.Series(pd.NA, index=df.index, dtype="string")  # every row names its system
    if "system" in df.columns and df["device"].isna().any():  # before the per-op required values check devices
        dev = _clean_text(df["device"], lower=False)
        df["device"] = _devices_of_systems(dev, dev.isna().to_numpy(), df["system"], catalog or default_catalog())

    # op names
    ops = _clean_text(df["op"])
    unknown = ~ops.isin(list(OP_TO_FAMILY)) | ops.isna()
    if unknown.any():
        i = int(np.flatnonzero(unknown.to_numpy())[0])
        raise _fail(df, i, "op", f"unknown op {_show(df['op'].iloc[i])}; known: {', '.join(sorted(OP_TO_FAMILY))}", source)
    df["op"] = _text_column(ops, prediction)

    # typed columns
    for name in df.columns:
        spec = COLUMN_BY_NAME.get(name)
        if spec is None or spec.kind == "str":
            continue
        raw = df[name]
        if spec.kind == "bool":
            codes, uniques = pd.factorize(raw)  # decide each distinct value once
            lookup = np.array([_to_bool(u) for u in uniques] + [None], dtype=object)
            mapped = pd.Series(lookup[codes], index=raw.index, dtype=object)
            bad = mapped.isna() & raw.notna()
            if bad.any():
                i = int(np.flatnonzero(bad.to_numpy())[0])
                raise _fail(df, i, name, f"expected true/false, got {_show(raw.iloc[i])}", source)
            df[name] = mapped.astype("boolean")
            continue
        if raw.dtype.kind == "b" or (raw.dtype == object and len(raw)
                                     and any(isinstance(u, (bool, np.bool_)) for u in pd.unique(raw))):
            flags = raw.map(lambda v: isinstance(v, (bool, np.bool_))).to_numpy(dtype=bool)
            i = int(np.flatnonzero(flags)[0])
            raise _fail(df, i, name, f"expected a number, got {_show(raw.iloc[i])}", source)
        if raw.dtype.kind in "iuf":  # already numbers (numpy or nullable): nothing to parse
            arr = raw.to_numpy(dtype=np.float64, na_value=np.nan)
        else:
            values = pd.to_numeric(raw, errors="coerce")
            bad = values.isna() & raw.notna()
            if bad.any():  # text "nan" counts as missing; only rows that failed to parse are looked at as text
                bad &= raw.astype("string").str.strip().str.lower() != "nan"
            if bad.any():
                i = int(np.flatnonzero(bad.to_numpy())[0])
                raise _fail(df, i, name, f"expected a number, got {_show(raw.iloc[i])}", source)
            arr = values.to_numpy(dtype=np.float64)
        if np.isinf(arr).any():
            i = int(np.flatnonzero(np.isinf(arr))[0])
            raise _fail(df, i, name, "value is infinite", source)
        present = ~np.isnan(arr)
        if spec.positive and (present & ~(arr > 0)).any():
            i = int(np.flatnonzero(present & ~(arr > 0))[0])
            raise _fail(df, i, name, f"must be positive, got {_show(raw.iloc[i])}", source)
        if spec.nonneg and (present & (arr < 0)).any():
            i = int(np.flatnonzero(present & (arr < 0))[0])
            raise _fail(df, i, name, f"must be >= 0, got {_show(raw.iloc[i])}", source)
        if spec.kind == "int":
            huge = present & (np.abs(arr) >= MAX_INT)
            if huge.any():
                i = int(np.flatnonzero(huge)[0])
                raise _fail(df, i, name, f"{_show(raw.iloc[i])} is too large (at most 2^62)", source)
            frac = present & (np.abs(arr - np.round(arr)) > 1e-6 * np.maximum(1.0, np.abs(arr)))
            if frac.any():
                i = int(np.flatnonzero(frac)[0])
                raise _fail(df, i, name, f"expected an integer, got {_show(raw.iloc[i])}", source)
            if not (~present).any():
                df[name] = np.round(arr).astype(np.int64)
            elif prediction and not (np.abs(arr[present]) >= 2.0**63).any():
                df[name] = np.round(arr) + 0.0  # the Int64 column's values as float64 (+ 0.0: no negative zero)
            else:
                df[name] = pd.array(np.round(arr), dtype="Float64").astype("Int64")
        else:
            df[name] = arr

    # required values per family (NaN in a required column is an error for that row); each column's NaN mask
    # and each op's rows are computed once
    op_codes, op_uniques = pd.factorize(df["op"])
    null_masks: dict[str, np.ndarray] = {}
    for code, op in enumerate(op_uniques):
        rows = op_codes == code
        for name in required_columns(str(op)):
            if name not in df.columns:
                i = int(np.flatnonzero(rows)[0])
                raise _fail(df, i, name, f"column required for op {op!r} is missing", source)
            if name not in null_masks:
                null_masks[name] = df[name].isna().to_numpy()
            nulls = rows & null_masks[name]
            if nulls.any():
                i = int(np.flatnonzero(nulls)[0])
                raise _fail(df, i, name, f"missing value (NaN/empty) for op {op!r}", source)

    # values that must agree across columns
    # (a measurement's collective ranks are spread evenly over its nodes, as `predict` requires of a layout; tables to
    # predict are checked against their system by the roofline, which prices the groups the LLM builders place
    # across node boundaries)
    even = () if prediction else (("n_ranks", "n_nodes", "the ranks ({a}) must be spread evenly over the nodes "
                                   "({b}): the same number per node, as collective layouts are predicted"),)
    for a, b, problem in (("heads", "kv_heads", "query heads ({a}) must be a multiple of the key/value heads ({b})"),
                          *even,
                          ("in_channels", "groups", "groups ({b}) must divide the input channels ({a})"),
                          ("out_channels", "groups", "groups ({b}) must divide the output channels ({a})")):
        if a in df.columns and b in df.columns:
            x = pd.to_numeric(df[a], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
            y = pd.to_numeric(df[b], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
            with np.errstate(invalid="ignore", divide="ignore"):
                bad = np.isfinite(x) & np.isfinite(y) & (np.mod(x, y) != 0)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise _fail(df, i, b, problem.format(a=_show(df[a].iloc[i]), b=_show(df[b].iloc[i])), source)

    # a collective of one rank communicates with nobody (nccl-tests times a local copy, busbw 0): a measurement of
    # it was fitted as a collective and a table row to predict priced at the latency floor, where `predict
    # collective` refuses fewer than 2 ranks (the nccl-tests importer skips such sections, with a warning)
    if not prediction and "n_ranks" in df.columns:
        from hybrid.ops.families import COLLECTIVE_OPS

        ranks = pd.to_numeric(df["n_ranks"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        lone = df["op"].isin(COLLECTIVE_OPS).to_numpy(dtype=bool) & (ranks == 1)
        if lone.any():
            i = int(np.flatnonzero(lone)[0])
            raise _fail(df, i, "n_ranks", f"a collective of 1 rank communicates with nobody ({int(lone.sum())} such "
                        f"row(s)); {df['op'].iloc[i]} needs at least 2 ranks (drop the row, or give its ranks)",
                        source)

    # an elementwise row's lines (rows x hidden: an interpolated map's, hybrid.ops.families.upsample_row) are its
    # elements; a row giving both shapes apart was priced on elements alone, the lines silently ignored
    if {"rows", "hidden", "elements"} <= set(df.columns):
        ew = op_codes == (list(op_uniques).index("elementwise") if "elementwise" in list(op_uniques) else -2)
        if ew.any():
            r, h, e = (pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
                       for c in ("rows", "hidden", "elements"))
            bad = ew & np.isfinite(r) & np.isfinite(h) & np.isfinite(e) & (r * h != e)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise _fail(df, i, "elements", f"an elementwise row's lines, rows x hidden ({_show(df['rows'].iloc[i])} "
                            f"x {_show(df['hidden'].iloc[i])}), must be its elements ({_show(df['elements'].iloc[i])})",
                            source)

    # a measurement's fastest repeat cannot be slower than its median, nor its slowest faster (a swapped or
    # misassigned column); rounding is monotone, so the order survives any printing of the three
    if not prediction:
        t = df["time_us"].to_numpy(dtype=np.float64, na_value=np.nan)
        for name, bad_of, what in (("time_us_min", lambda v: v > t * (1 + 1e-9), "above"),
                                   ("time_us_max", lambda v: v < t * (1 - 1e-9), "below")):
            if name in df.columns:
                v = df[name].to_numpy(dtype=np.float64, na_value=np.nan)
                with np.errstate(invalid="ignore"):
                    bad = bad_of(v)
                if bad.any():
                    i = int(np.flatnonzero(bad)[0])
                    raise _fail(df, i, name, f"{_show(df[name].iloc[i])} is {what} the median time_us "
                                f"{_show(df['time_us'].iloc[i])}", source)

    # categorical values
    if "dtype" not in df.columns:
        df["dtype"] = "fp32"
    dt_codes, dt_uniques = pd.factorize(df["dtype"], use_na_sentinel=True)
    canonical = []
    for j, u in enumerate(dt_uniques):
        try:
            canonical.append(normalize_dtype(str(u)))
        except InvalidInputError as exc:
            i = int(np.flatnonzero(dt_codes == j)[0])
            raise _fail(df, i, "dtype", str(exc), source) from None
    dt_codes = np.where(dt_codes < 0, len(canonical), dt_codes)  # missing dtype: fp32
    df["dtype"] = category_from_codes(dt_codes, np.array(canonical + ["fp32"], dtype=object)) if prediction \
        else np.array(canonical + ["fp32"], dtype=object)[dt_codes]
    for name, allowed in (("direction", DIRECTIONS), ("index_dist", INDEX_DISTS)):
        if name in df.columns:
            vals = _clean_text(df[name])
            bad = vals.notna() & ~vals.isin(list(allowed))
            if bad.any():
                i = int(np.flatnonzero(bad.to_numpy())[0])
                raise _fail(df, i, name, f"must be one of {allowed}, got {_show(df[name].iloc[i])}", source)
            df[name] = _text_column(vals, prediction)
    _check_index_dist(df, source)

    # devices
    dev = _clean_text(df["device"], lower=False)
    empty = (dev.isna() | (dev == "")).to_numpy()
    if empty.any():
        i = int(np.flatnonzero(empty)[0])
        raise _fail(df, i, "device", "missing device name", source)
    if resolve_devices:
        cat = catalog or default_catalog()
        names = list(dev.cat.categories)
        keys = []
        for j, u in enumerate(names):
            key = cat.resolve_device(str(u), missing_ok=True)
            if key is None:
                i = int(np.flatnonzero(dev.cat.codes.to_numpy() == j)[0])
                try:
                    cat.resolve_device(str(u))
                except Exception as exc:  # UnknownDeviceError with close matches
                    raise _fail(df, i, "device", str(exc), source) from None
            keys.append(key)
        codes = dev.cat.codes.to_numpy()
        df["device"] = category_from_codes(codes, np.array(keys, dtype=object)) if prediction \
            else np.array(keys, dtype=object)[codes]
    else:
        df["device"] = _text_column(dev, prediction)

    ordered = [c.name for c in COLUMNS if c.name in df.columns]
    extra = [c for c in df.columns if c not in COLUMN_BY_NAME]
    return df[ordered + extra]


def _check_index_dist(df: pd.DataFrame, source: str) -> None:
    """An embedding row's ``index_dist`` must agree with its ``zipf_alpha``: ``zipf`` needs an exponent > 0 and
    ``uniform`` has none (0 or missing), as the DLRM table configs require. The roofline prices the skew from
    ``zipf_alpha`` alone and the embedding model from ``index_dist``: ``zipf`` without an exponent was priced as
    uniform indices, ``uniform`` with one as skewed by the roofline and not by the model."""
    if "index_dist" not in df.columns:
        return
    dist = df["index_dist"].astype("string").str.lower()
    alpha = (pd.to_numeric(df["zipf_alpha"], errors="coerce") if "zipf_alpha" in df.columns
             else pd.Series(np.nan, index=df.index)).fillna(0.0).to_numpy(dtype=np.float64)
    zipf = dist.eq("zipf").fillna(False).to_numpy(dtype=bool)
    uniform = dist.eq("uniform").fillna(False).to_numpy(dtype=bool)
    checks = ((zipf & ~(alpha > 0), "index_dist",
               lambda a: "index_dist zipf needs zipf_alpha > 0, the skew's exponent (e.g. 1.05; 0 or none would be "
                         "uniform indices)"),
              (uniform & (alpha > 0), "zipf_alpha",
               lambda a: f"index_dist uniform contradicts zipf_alpha {a:g} (uniform indices have no skew); drop one "
                         "of them"))
    for bad, column, problem in checks:
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise _fail(df, i, column, problem(alpha[i]), source)


def _text_column(values: pd.Series, prediction: bool) -> object:
    """A cleaned categorical text column (:func:`_clean_text`) as :func:`validate` returns it: Python strings
    (object), or (``prediction``) the categorical ``astype("category")`` of those gives."""
    if not prediction:
        return values.astype(object)
    cat = values.array
    return category_from_codes(cat.codes, np.asarray(cat.categories, dtype=object))


def _show(value: object) -> str:
    """A cell value as a user would have typed it."""
    if isinstance(value, (np.generic,)):
        value = value.item()
    return repr(value)


def _to_bool(value: object) -> object:
    if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
        return pd.NA
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    s = str(value).strip().lower()
    if s in ("1", "true", "t", "yes", "y", "1.0"):
        return True
    if s in ("0", "false", "f", "no", "n", "0.0"):
        return False
    if s in ("", "nan", "<na>", "none"):
        return pd.NA
    return None


#: Bytes :func:`lacks_final_newline` reads per step backwards from the end of a file.
_TAIL_CHUNK = 4096


def repeated_names(header: Sequence[str]) -> list[str]:
    """The column names a CSV header gives more than once (stripped; in order of their second appearance). Empty
    names (trailing commas, a saved index) are pandas' "Unnamed: i" columns, each its own."""
    seen: set[str] = set()
    names = [str(c).strip() for c in header]
    return list(dict.fromkeys(c for c in names if c and (c in seen or seen.add(c))))  # type: ignore[func-returns-value]


def _refuse_repeated_columns(path: Path) -> None:
    """A CSV header naming a column twice (``...,m,n,k,m``) is an error: pandas reads the second as ``m.1``, an
    unknown column kept beside the data, so one of the two values was dropped from the fit without a word."""
    import csv

    with open(path, encoding="utf-8-sig", newline="") as fh:
        header = next(csv.reader(fh), [])
    repeated = repeated_names(header)
    if repeated:
        raise SchemaError(f"{path}: the header names column(s) {', '.join(map(repr, repeated))} more than once; "
                          "keep one of each")


def _column_key(name: str) -> str:
    """The schema column a table's column name would be, written in another case or spacing (``Time Us``,
    ``n-ranks``): lower case, blanks and hyphens as one underscore."""
    return re.sub(r"[\s-]+", "_", name.strip().lower())


def _refuse_case_variants(columns: Iterable[object], path: Path) -> None:
    """A table file's column that differs from a schema column only in case or spacing (``Dtype``, ``M``,
    ``Time Us``) is an error: read as an unknown column, its values were ignored and the schema column's default
    taken (an fp16 GEMM priced as fp32, a backward pass as forward), or, beside the schema column itself (``b`` and
    ``B``), one of the two values dropped, all without a word. Column names are lower case, as `hybrid data schema`
    lists them; a column that is no variant of one (``notes``) is kept as before."""
    names = [str(c) for c in columns]
    for name in names:
        key = _column_key(name)
        if name in COLUMN_BY_NAME or key not in COLUMN_BY_NAME:
            continue
        if key in names:
            raise SchemaError(f"{path}: column {name!r} repeats the schema column {key!r} in another case or spacing "
                              "(column names are lower case): keep one of the two")
        raise SchemaError(f"{path}: column {name!r} is not a schema column, so its values would be ignored (and "
                          f"{key!r} taken as missing or at its default); column names are lower case "
                          f"(`hybrid data schema`): rename it {key!r}")


def _warn_near_typos(columns: Iterable[object], path: Path) -> None:
    """A typo of a schema column the table lacks (``dtpye``, ``num_table``) is kept (it may be the user's own column)
    and said in a :class:`~hybrid.errors.DataQualityWarning`: without it the rows take that column as missing or at
    its default (fp32, fwd, one table). A word the schema column qualifies is the user's own (a profiler's
    ``kernel`` name column is not a misspelt ``kernel_h``)."""
    names = [str(c) for c in columns]
    absent = [c.name for c in COLUMNS if c.name not in names]
    for name in names:
        if name in COLUMN_BY_NAME:
            continue
        key = _column_key(name)
        close = difflib.get_close_matches(key, absent, n=1, cutoff=0.8)
        if close and not close[0].startswith(key + "_"):
            warnings.warn(f"{path}: column {name!r} is not a schema column and is ignored: did you mean {close[0]!r}? "
                          f"(without it the rows take {close[0]!r} as missing or at its default)",
                          DataQualityWarning, stacklevel=3)


#: Bytes read from the start of a text table to tell it from a binary file (:func:`binary_file_reason`).
TEXT_PROBE_BYTES = 8192


def binary_file_reason(path: str | os.PathLike) -> str:
    """Why a file named as a CSV table is no text ('' for text): a NUL byte or bytes that are no UTF-8 in its
    first :data:`TEXT_PROBE_BYTES` (an executable, an image, a spreadsheet saved as .xlsx). Said before the
    parsers' own findings, which blamed a truncated last line ("no final newline") or a codec position."""
    with open(path, "rb") as fh:
        head = fh.read(TEXT_PROBE_BYTES)
    if b"\x00" in head:
        return "a binary file (NUL bytes), not a text table"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if len(head) < TEXT_PROBE_BYTES or exc.start < len(head) - 3:  # not a character cut by the probe's end
            return f"not UTF-8 text (byte 0x{head[exc.start]:02x} at offset {exc.start}): a binary file, or text in another encoding"
    return ""


def bare_carriage_returns(head: bytes) -> str:
    """Why a CSV starting with bytes ``head`` cannot be read ('' when it can): lines ended by a bare carriage return
    (old Mac ``\\r``, no newline after it). pandas splits rows on them, but the checks on the bytes (the final
    newline, each row's file line) count newlines: such a file was refused as a truncated one. Windows' ``\\r\\n``
    is read; a ``\\r`` that is the probe's last byte may be half of one and is not counted."""
    if re.search(rb"\r(?!\n)", head[:-1] if head.endswith(b"\r") else head) is None:
        return ""
    return ("old Mac line endings (lines end with a bare carriage return, \\r): convert them to newlines first "
            "(e.g. `tr '\\r' '\\n'`)")


def lacks_final_newline(path: str | os.PathLike) -> bool:
    """True when a file with some non-whitespace content does not end with a newline (a truncated table).

    Reads from the end only (one small block for any normal file), not the whole file: the last byte decides
    unless it is other whitespace, in which case blocks are read backwards until content is found."""
    with open(path, "rb") as fh:
        pos = fh.seek(0, os.SEEK_END)
        if pos == 0:
            return False
        fh.seek(pos - 1)
        if fh.read(1) == b"\n":
            return False
        while pos > 0:  # the file does not end with a newline: is there anything but whitespace?
            start = max(0, pos - _TAIL_CHUNK)
            fh.seek(start)
            if fh.read(pos - start).strip():
                return True
            pos = start
        return False


def _column_hint(columns: Iterable[object], missing: list[str]) -> str:
    """Why required columns may look missing: another separator than a comma (one column holding them all), or
    the names in another case or spacing (column names are lower case, as `hybrid data schema` lists them)."""
    names = [str(c) for c in columns]
    if len(names) == 1 and any(sep in names[0] for sep in (";", "\t", "|")):
        return " (the header is one column: is the file separated by something other than commas?)"
    near = {m: n for m in missing for n in names if _column_key(n) == m and n != m}
    if near:
        return " (" + ", ".join(f"{n!r} for {m!r}" for m, n in near.items()) + ": column names are lower case)"
    return ""


#: Text that marks the raw stdout of an nccl-tests ``*_perf`` run (which `hybrid data import nccl-tests` reads).
_NCCL_TESTS_MARKERS = ("nccl-tests version", "Collective test starting", "out-of-place")


def looks_like_nccl_tests(path: str | os.PathLike) -> bool:
    """Whether the start of file ``path`` is raw nccl-tests output rather than a table."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16).decode("utf-8", "replace")
    except OSError:
        return False
    return any(m in head for m in _NCCL_TESTS_MARKERS)


def import_hint(path: str | os.PathLike) -> str:
    """What to do with a file that is not a canonical table: import it (naming nccl-tests where it is one)."""
    if looks_like_nccl_tests(path):
        return (f"; it is raw nccl-tests output: import it first with `hybrid data import nccl-tests {path} -o "
                "table.csv --system NAME`")
    return ("; measurement tables are canonical CSV/Parquet (`hybrid data schema`): import other formats first "
            "with `hybrid data import FORMAT PATH -o table.csv` (`hybrid data formats`)")


def read_table(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    catalog: Catalog | None = None,
    *,
    validate_rows: bool = True,
    file_order: bool = False,
    required: Sequence[str] = REQUIRED,
) -> pd.DataFrame:
    """Read one or more canonical tables (``.csv`` or ``.parquet``), validate and concatenate them. The columns
    come in the schema's order, unknown ones after them; ``file_order`` keeps them as the (first) file has them
    instead, for output a user compares with their own table (``hybrid predict table``). ``required``: the columns
    a file lacking all of them is refused for before any row is read (a table of ops to time has no ``time_us``)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    frames = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise SchemaError(f"measurement table not found: {p}")
        try:
            if p.suffix.lower() in (".parquet", ".pq"):
                df = pd.read_parquet(p)
            else:
                binary = binary_file_reason(p)
                if binary:
                    raise SchemaError(f"{p}: {binary}" + import_hint(p))
                with open(p, "rb") as fh:
                    carriage = bare_carriage_returns(fh.read(TEXT_PROBE_BYTES))
                if carriage:
                    raise SchemaError(f"{p}: {carriage}")
                if lacks_final_newline(p):
                    # tables are written with a final newline: without it the last value may be cut short
                    raise SchemaError(f"{p}: the last line has no final newline (truncated file?); its last "
                                      "value may be cut short. Add the newline if the file is complete")
                # one dtype per column (low_memory=False): read in chunks, a column empty for its first 262,144 rows and
                # named later (variant) got mixed types and pandas' raw DtypeWarning on stderr
                df = pd.read_csv(p, comment=None, skipinitialspace=True, low_memory=False)
                if (lines := csv_record_lines(p, len(df))) is not None and len(lines) == len(df):
                    df.attrs["csv_lines"] = lines  # blank lines shifted the rows: errors name the file's lines
                _refuse_repeated_columns(p)
        except SchemaError:  # our own finding (a truncated table): already says what is wrong, and it is no format
            raise
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError, ValueError) as exc:
            raise SchemaError(f"{p}: cannot parse as a table ({type(exc).__name__}: {str(exc).splitlines()[0]})"
                              + (import_hint(p) if p.suffix.lower() not in (".parquet", ".pq") else "")) from None
        if any(c not in df.columns for c in required) and p.suffix.lower() not in (".parquet", ".pq") \
                and (looks_like_nccl_tests(p) or not any(c in df.columns for c in required)):
            # not a canonical table at all (raw nccl-tests output, a public format's own CSV): say how to import it
            # (and when the header is one column, that the separator is no comma)
            missing = [c for c in required if c not in df.columns]
            raise SchemaError(f"{p}: missing required column(s) {', '.join(missing)}"
                              + _column_hint(df.columns, missing) + import_hint(p))
        _refuse_case_variants(df.columns, p)
        _warn_near_typos(df.columns, p)
        frames.append(validate(df, catalog, source=str(p)) if validate_rows else df)
    if not frames:
        raise SchemaError("no measurement tables given")
    out = pd.concat(frames, ignore_index=True, sort=False)
    if file_order:
        return out
    ordered = [c.name for c in COLUMNS if c.name in out.columns]
    return out[ordered + [c for c in out.columns if c not in COLUMN_BY_NAME]]


_AT_ROW = re.compile(r",?\s*at row index (\d+)$")


def check_rows(table: pd.DataFrame, catalog: Catalog, source: str) -> pd.DataFrame:
    """The roofline's per-row checks (a collective layout no node of its system holds, a shape the family cannot
    have, ...) on one validated table read from ``source`` (a file, as :func:`read_table` returns it: row ``i`` is
    the file's row ``i``): their error names the file, row and CSV line as the schema's do
    (``FILE: row 6 (CSV line 7): ...``), not the position in the concatenated tables.

    Returns the roofline frame of the rows (:func:`hybrid.ops.roofline.roofline`, ``table``'s index; empty for an
    empty table), which callers pass on rather than computing it again."""
    from hybrid.ops.roofline import roofline

    if len(table) == 0:
        return pd.DataFrame(index=table.index)
    _check_systems(table, catalog, source)
    try:
        base = roofline(table.reset_index(drop=True), catalog)
    except InvalidInputError as exc:
        msg = str(exc)
        m = _AT_ROW.search(msg)
        if m is None:
            raise
        pos = int(m.group(1))  # a RangeIndex: the label is the row's position in the file
        raise InvalidInputError(f"{source}: row {pos + 1} (CSV line {row_line(table, pos)}): {msg[:m.start()]}") from None
    base.index = table.index
    _check_stated_nodes(table, catalog, source)
    _check_system_device(table, catalog, source)
    _check_bare_nodes(table, catalog, source)
    return base


def _check_systems(table: pd.DataFrame, catalog: Catalog, source: str) -> None:
    """A collective row whose ``system`` is neither a catalog system nor a device (its generic node) is refused
    naming the file, its first such row and CSV line; the roofline's error named the system alone."""
    if "system" not in table.columns:
        return
    from hybrid.ops.families import COLLECTIVE_OPS
    from hybrid.ops.roofline import resolve_system

    names = table["system"].astype("string").str.strip()
    stated = (table["op"].astype(str).isin(COLLECTIVE_OPS) & names.notna() & (names != "")).fillna(False)
    stated = stated.to_numpy(dtype=bool)
    for name in pd.unique(names[stated]):
        try:
            resolve_system(catalog, str(name))
        except UnknownDeviceError as exc:
            i = int(np.flatnonzero(stated & (names == name).fillna(False).to_numpy(dtype=bool))[0])
            raise UnknownDeviceError(f"{source}: row {i + 1} (CSV line {row_line(table, i)}): {exc}") from None


def resolve_system_names(table: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """``table`` with its ``system`` column as the catalog names them, as :func:`validate` writes device keys: a
    catalog system's key (``dgx-h100``, `` DGX-H100 `` -> ``DGX-H100``), a device named as a system (its generic
    node) as the device's key; names neither resolves (and empty cells) are left as given. A copy; ``table``
    itself when it has no ``system`` column."""
    if "system" not in table.columns:
        return table
    from hybrid.ops.roofline import resolve_system

    names = table["system"].astype("string").str.strip()
    codes, uniques = pd.factorize(names)
    keys: list[object] = []
    for name in uniques:
        key = catalog.resolve_system(str(name), missing_ok=True)
        if key is None:
            try:
                key = resolve_system(catalog, str(name)).device  # a generic node: its device's key
            except UnknownDeviceError:
                key = None
        keys.append(key)
    resolved = np.array([*keys, None], dtype=object)[np.where(codes < 0, len(keys), codes)]
    given = table["system"].to_numpy(dtype=object)
    out = table.copy()
    out["system"] = np.where(pd.isna(resolved), given, resolved)
    return out


def _check_stated_nodes(table: pd.DataFrame, catalog: Catalog, source: str) -> None:
    """A collective row of a catalog system whose stated ``n_nodes`` cannot hold its ``n_ranks`` (more per node
    than the system's GPUs) is refused like the roofline refuses such a layout on several nodes. The roofline
    reads an ``n_nodes`` of 1 as "not said" (a missing value becomes 1) and spreads the ranks over as many nodes
    as they need, right for a table that does not say, silently wrong for a log that did (16 ranks on one host of
    an 8-GPU system: a mislabelled --system). Rows of a bare device (a generic node) are left to the roofline."""
    if not {"n_ranks", "n_nodes", "system"} <= set(table.columns):
        return
    from hybrid.ops.families import COLLECTIVE_OPS

    ranks = pd.to_numeric(table["n_ranks"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    nodes = pd.to_numeric(table["n_nodes"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    names = table["system"].astype("string")
    stated = (table["op"].isin(COLLECTIVE_OPS).to_numpy() & np.isfinite(ranks) & np.isfinite(nodes)
              & names.notna().to_numpy())
    for name in pd.unique(names[stated]):
        key = catalog.resolve_system(str(name), missing_ok=True)
        if key is None:
            continue
        gpn = catalog.systems[key].gpus_per_node
        bad = stated & (names == name).fillna(False).to_numpy() & (ranks > nodes * gpn)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidInputError(f"{source}: row {i + 1} (CSV line {row_line(table, i)}): collective: {int(ranks[i])} ranks on "
                                    f"{int(nodes[i])} node(s) of {key} ({gpn} GPUs per node): more ranks per node "
                                    "than the system's GPUs per node (a log of another system? check its system)")


def _check_system_device(table: pd.DataFrame, catalog: Catalog, source: str) -> None:
    """Collective rows whose ``system`` holds another GPU than their ``device`` are said in a
    :class:`~hybrid.errors.DataQualityWarning` naming the first of them: such a row is priced (and its collective
    curve fitted) on the system's fabric while errors, intervals and held-out splits go by its device. That is kept,
    not refused, as `hybrid data import --system` keeps it (a system used for a node of a sibling GPU, e.g. ALCF's
    Sophia logs as DGX-A100, or a what-if), but no longer silently: a mislabelled column looks just the same."""
    bad = system_device_mismatch(table, catalog)
    if bad is not None:
        i, system, holds, device, n = bad
        warnings.warn(f"{source}: row {i + 1} (CSV line {row_line(table, i)})" + (f" and {n - 1} more" if n > 1 else "")
                      + f": collective of device {device} on system {system}, whose GPU is {holds}: costed on "
                      f"{system}'s fabric (a mislabelled system or device? fix it, or add a system of these nodes "
                      "to a catalog file, HYBRID_CATALOG)", DataQualityWarning, stacklevel=3)


def _check_bare_nodes(table: pd.DataFrame, catalog: Catalog, source: str) -> None:
    """Collective rows across nodes (``n_nodes`` > 1) with no catalog system (none given, or a device named as the
    system) are said in a :class:`~hybrid.errors.DataQualityWarning`, one per device, naming the first row, how
    many more and the network assumed: the roofline costs them on generic nodes of the device
    (:func:`hybrid.ops.roofline.system_for_device`, a generic NIC between nodes), as `predict collective -s DEVICE`
    says; a table said nothing of it."""
    if not {"n_nodes", "device"} <= set(table.columns):
        return
    from hybrid.ops.families import COLLECTIVE_OPS
    from hybrid.ops.roofline import system_for_device

    nodes = pd.to_numeric(table["n_nodes"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    across = table["op"].astype(str).isin(COLLECTIVE_OPS).to_numpy(dtype=bool) & (nodes > 1)
    if not across.any():
        return
    names = (table["system"].astype("string").str.strip() if "system" in table.columns
             else pd.Series(pd.NA, index=table.index, dtype="string"))
    known = np.zeros(len(table), dtype=bool)
    for name in pd.unique(names[across].dropna()):
        if catalog.resolve_system(str(name), missing_ok=True) is not None:
            known |= (names == name).fillna(False).to_numpy(dtype=bool)
    bare = across & ~known
    if not bare.any():
        return
    devices = table["device"].astype(str).to_numpy()
    for device in pd.unique(devices[bare]):
        rows = np.flatnonzero(bare & (devices == device))
        i = int(rows[0])
        key = catalog.resolve_device(str(device), missing_ok=True)
        if key is None:
            continue
        node = system_for_device(catalog.devices[key])
        more = f" and {len(rows) - 1} more" if len(rows) > 1 else ""
        warnings.warn(f"{source}: row {i + 1} (CSV line {row_line(table, i)}){more}: collective across "
                      f"{int(nodes[i])} nodes of device {key} with no catalog system: costed on generic nodes of "
                      f"{key} ({node.intra_fabric} within a node, {node.inter_fabric} between nodes); name the "
                      "cluster in a system column (hybrid devices --systems) for its real network",
                      DataQualityWarning, stacklevel=3)


def system_device_mismatch(table: pd.DataFrame, catalog: Catalog) -> tuple[int, str, str, str, int] | None:
    """The first collective row of ``table`` (validated: device keys) whose ``system`` holds another device than
    the row's: ``(position, system as written, the system's device, the row's device, how many rows disagree)``;
    None when all agree.
    A ``system`` that names a device (its generic node) holds that device; systems the catalog does not know are
    left to the roofline, which refuses them."""
    if "system" not in table.columns or "device" not in table.columns:
        return None
    from hybrid.ops.families import COLLECTIVE_OPS
    from hybrid.ops.roofline import resolve_system

    names = table["system"].astype("string").str.strip()
    stated = (table["op"].astype(str).isin(COLLECTIVE_OPS) & names.notna() & (names != "")).fillna(False)
    stated = stated.to_numpy(dtype=bool)
    if not stated.any():
        return None
    devices = table["device"].astype(str).to_numpy()
    systems = names.fillna("").to_numpy(dtype=object)
    pairs = pd.DataFrame({"s": systems[stated], "d": devices[stated]}).drop_duplicates()
    bad = np.zeros(len(table), dtype=bool)
    for name, device in zip(pairs["s"], pairs["d"], strict=True):
        try:
            holds = resolve_system(catalog, str(name)).device
        except UnknownDeviceError:
            continue
        if holds != device:
            bad |= stated & (systems == name) & (devices == device)
    if not bad.any():
        return None
    i = int(np.flatnonzero(bad)[0])
    name = str(systems[i])
    return i, name, resolve_system(catalog, name).device, str(devices[i]), int(bad.sum())


#: File suffixes a canonical table is written with.
TABLE_SUFFIXES = (".csv", ".parquet", ".pq")


def check_table_path(path: str | os.PathLike) -> Path:
    """``path`` as a :class:`Path` if it names a table file (:data:`TABLE_SUFFIXES`) that is not a directory; else a
    clear error (call it before the work that produces the table: a directory named ``x.csv`` was found only when
    the finished table was written). A path that cannot be created (a parent that is a file, a folder this process
    may not write into: :func:`~hybrid.atomic.check_creatable`) is refused here too, not after the work."""
    p = Path(path)
    if p.suffix.lower() not in TABLE_SUFFIXES:
        raise InvalidInputError(f"output {p}: use a .csv or .parquet file name")
    if p.is_dir():
        raise OutputPathError(f"cannot write output {p}: it is a directory")
    return check_creatable(p)


def write_table(table: pd.DataFrame, path: str | os.PathLike, catalog: Catalog | None = None,
                *, validate_rows: bool = True) -> Path:
    """Validate and write ``table`` as CSV or Parquet (by suffix: ``.csv``, ``.parquet``/``.pq``), atomically."""
    p = check_table_path(path)
    df = validate(table, catalog, source=str(p)) if validate_rows else table
    with atomic_file(p) as tmp:
        if p.suffix.lower() in (".parquet", ".pq"):
            df.to_parquet(tmp, index=False)
        else:
            df.to_csv(tmp, index=False)
    return p


def schema_markdown() -> str:
    """The schema as a markdown table (used to render ``docs/schema.md``)."""
    lines = ["| column | type | description |", "|---|---|---|"]
    for c in COLUMNS:
        rng = " (> 0)" if c.positive else (" (>= 0)" if c.nonneg else "")
        lines.append(f"| `{c.name}` | {c.kind}{rng} | {c.description} |")
    lines += ["", "| op family | ops | required shape columns | optional |", "|---|---|---|---|"]
    for fam in FAMILIES.values():
        lines.append(f"| {fam.name} | {', '.join(fam.ops)} | {', '.join(fam.shape_columns)} | "
                     f"{', '.join(fam.optional_columns) or '-'} |")
    return "\n".join(lines)
