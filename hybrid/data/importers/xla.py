"""XLA GPU performance tables (openxla/xla ``xla/service/gpu/model/default_*_perf_table.txtpb``).

Two formats are read for each table: the upstream text proto (``.txtpb``/``.pbtxt``), and the tidy CSV of
the public data layout (``xla/matmul_sm90_H100.csv``, ``xla/collectives_sm90_H100.csv``).

Matmuls (``xla.GemmPerfTable``): one entry per ``(b, m, n, k)`` with achieved FLOP/s per dtype combination
``"<lhs>x<rhs>-><out>"``; the time is ``2 b m n k / flops``. The canonical dtype is that of the inputs, with
one deliberate exception: ``f32`` dots are recorded as ``tf32``, because XLA's default dot precision lets
cuBLAS use TF32 tensor cores on Ampere and later, and the H100 table indeed reaches 403 TFLOP/s in f32, six
times the 67 TFLOP/s FP32 (non-tensor) peak. The full dtype string is kept in ``variant``.

Collectives (``xla.gpu.DeviceHloInstructionProfiles``, written by ``xla/tools/collective_perf_table_gen``):
each entry is an HLO collective with a ``network_throughput_bytes_per_sec`` that the generator computed as
``tensor_size_bytes / median runtime``. ``tensor_size_bytes`` is the sweep variable and is the *larger*
buffer: the all-gather output, the reduce-scatter input, the all-reduce / all-to-all / collective-permute
buffer, i.e. exactly what nccl-tests calls ``size``. The table stores the HLO instruction, whose shape is the
*output*: for every op but reduce-scatter that equals ``tensor_size_bytes``; for reduce-scatter it is
``tensor_size_bytes / devices_per_group``. So ``size_bytes = output bytes x devices_per_group`` for
reduce-scatter and ``= output bytes`` otherwise, and ``time = size_bytes / throughput``. (The tidy CSV's
``bytes`` column is the output shape; its reduce-scatter sizes are 1/2, 1/4, 1/8 of the sweep, which confirms
it.) Collective-permute was timed inside a 100-iteration loop and divided by 100 by the generator.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.data.importers import textproto
from hybrid.data.importers._common import (
    as_paths,
    catalog_or_default,
    concat,
    csv_line,
    display_path,
    finish,
    numeric,
    read_csv_checked,
    refuse_compressed,
    resolve_device_names,
    resolve_system_name,
    text,
    warn,
)
from hybrid.errors import ImportFormatError
from hybrid.hardware.catalog import Catalog
from hybrid.ops.families import dtype_bytes_vec

#: XLA primitive / dtype spelling -> canonical dtype.
XLA_DTYPES: dict[str, str] = {
    "f64": "fp64", "f32": "fp32", "tf32": "tf32", "f16": "fp16", "bf16": "bf16",
    "f8e4m3fn": "fp8", "f8e5m2": "fp8", "f8e4m3": "fp8", "f8e4m3fnuz": "fp8", "f8e5m2fnuz": "fp8",
    "s8": "int8", "u8": "int8", "s32": "int32", "s64": "int64",
}
#: f32 dots run on TF32 tensor cores under XLA's default precision (see module docstring).
F32_DOT_DTYPE = "tf32"
#: XLA collective opcode -> canonical op.
XLA_COLLECTIVES: dict[str, str] = {
    "all-reduce": "all_reduce", "all-gather": "all_gather", "reduce-scatter": "reduce_scatter",
    "all-to-all": "all_to_all", "collective-permute": "send_recv",
    "all-reduce-start": "all_reduce", "all-gather-start": "all_gather", "collective-permute-start": "send_recv",
}
#: Catalog system the public collectives table was measured on (one node of 8 H100 SXM).
DEFAULT_COLLECTIVE_SYSTEM = "xla-h100x8"


def _matmul_dtype(combo: str) -> str:
    """``bf16xbf16->bf16`` -> ``bf16``; ``f32xf32->f32`` -> ``tf32``; fp8 combos -> ``fp8``."""
    lhs = str(combo).split("->")[0].split("x")[0].strip().lower()
    if lhs == "f32":
        return F32_DOT_DTYPE
    if lhs not in XLA_DTYPES:
        raise KeyError(lhs)
    return XLA_DTYPES[lhs]


def _matmul_frame(device: pd.Series | str, b, m, n, k, combo: pd.Series, flops: np.ndarray | None,
                  time_us: np.ndarray | None, path: Path) -> pd.DataFrame:
    b, m, n, k = (np.asarray(x, dtype=np.float64) for x in (b, m, n, k))
    combos = pd.Series(combo, dtype="string").str.strip()
    mapping = {}
    for c in pd.unique(combos):
        try:
            mapping[c] = _matmul_dtype(str(c))
        except KeyError:
            raise ImportFormatError(f"{path}: unknown XLA dtype combination {c!r}; "
                                    f"known element types: {', '.join(sorted(XLA_DTYPES))}") from None
    if time_us is None:
        time_us = 2.0 * b * m * n * k / flops * 1e6  # type: ignore[operator]
    return pd.DataFrame({
        "device": device, "op": np.where(b > 1, "bmm", "gemm"), "dtype": combos.map(mapping).to_numpy(),
        "time_us": time_us, "variant": combos.to_numpy(), "b": b, "m": m, "n": n, "k": k,
        "framework": "xla",
    })


def _matmul_csv(path: Path) -> pd.DataFrame:
    df = read_csv_checked(path, ("device", "b", "m", "n", "k", "dtype"), what="XLA matmul")
    if "time_us" not in df.columns and "flops_per_s" not in df.columns:
        raise ImportFormatError(f"{path}: needs a 'time_us' or a 'flops_per_s' column")
    dims = [numeric(df, c, path, positive=True) for c in ("b", "m", "n", "k")]
    t = numeric(df, "time_us", path, positive=True) if "time_us" in df.columns else None
    f = numeric(df, "flops_per_s", path, positive=True) if "flops_per_s" in df.columns else None
    if t is not None and f is not None:
        # both columns state one measurement (time = 2 b m n k / rate, exactly so in the public table): a row where
        # they disagree holds a time in another unit or a mangled value, and which one is right cannot be told
        b, m, n, k = dims
        implied = 2.0 * b * m * n * k / f * 1e6
        off = np.abs(implied / t - 1.0) > 0.02
        if off.any():
            i = int(np.flatnonzero(off)[0])
            raise ImportFormatError(f"{path}: line {csv_line(df, i)}: time_us {t[i]:g} and flops_per_s {f[i]:g} "
                                    f"disagree (2 b m n k / flops_per_s = {implied[i]:g} us)")
        f = None
    return _matmul_frame(df["device"].astype("string").str.strip().to_numpy(), *dims, text(df, "dtype", path), f, t,
                         path)


def _matmul_txtpb(path: Path, msg: textproto.Message) -> pd.DataFrame:
    devs, cols, combos, flops = [], {"b": [], "m": [], "n": [], "k": []}, [], []
    for device, table in textproto.map_entries(msg, "entries").items():
        for entry in (table or {}).get("entries", []):
            for combo, value in textproto.map_entries(entry, "flops").items():
                devs.append(device)
                for c in cols:
                    cols[c].append(textproto.first(entry, c, 1 if c == "b" else None))
                combos.append(combo)
                flops.append(value)
    if not flops:
        raise ImportFormatError(f"{path}: no matmul entries (expected an xla.GemmPerfTable text proto)")
    for c, vals in cols.items():
        if any(v is None or not isinstance(v, int) or v <= 0 for v in vals):
            raise ImportFormatError(f"{path}: a matmul entry has a missing or non-positive {c!r}")
    fl = np.asarray(flops, dtype=np.float64)
    if not (fl > 0).all():
        raise ImportFormatError(f"{path}: a matmul entry has non-positive flops")
    return _matmul_frame(pd.Series(devs, dtype="string").to_numpy(), cols["b"], cols["m"], cols["n"],
                         cols["k"], pd.Series(combos), fl, None, path)


def _is_txtpb(path: Path) -> bool:
    return path.suffix.lower() in (".txtpb", ".pbtxt", ".textproto", ".txt", ".prototxt")


def _locate(path: Path, i: int) -> str:
    """Where row ``i`` of an imported table (one per CSV data row, in order) sits in its file: the CSV line, as the
    other importers name it, or the text proto's entry number."""
    return f"entry {i + 1}" if _is_txtpb(path) else f"line {i + 2}"


def _read_txtpb(path: Path) -> textproto.Message:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ImportFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    refuse_compressed(path, raw)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportFormatError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    if not text.strip():
        raise ImportFormatError(f"{path}: file is empty")
    # Windows' and old Mac line endings as newlines: a comment ends at a newline (one ended by a bare carriage
    # return ran to the end of the file) and errors count newlines for their line
    return textproto.parse(text.replace("\r\n", "\n").replace("\r", "\n"), str(path))


def import_xla_matmul(paths: Iterable[str | os.PathLike] | str | os.PathLike, device: str | None = None,
                      catalog: Catalog | None = None, system: str | None = None) -> pd.DataFrame:
    """Import XLA matmul perf tables (tidy CSV or upstream ``.txtpb``); one row per shape and dtype."""
    del system
    cat = catalog_or_default(catalog)
    frames = []
    for p in as_paths(paths):
        raw = _matmul_txtpb(p, _read_txtpb(p)) if _is_txtpb(p) else _matmul_csv(p)
        b, m, n, k = (raw[c].to_numpy(dtype=np.float64) for c in ("b", "m", "n", "k"))
        # inputs and result in the inputs' type (a lower bound where the result is wider, as fp8 -> bf16)
        _check_fits_memory(raw, b * (m * k + k * n + m * n) * dtype_bytes_vec(raw), p, cat, device,
                           "set of operands and result")
        frames.append(finish(raw, p, cat, source=f"xla-matmul:{display_path(p)}", device=device))
    return concat(frames, "XLA matmul")


# ------------------------------------------------------------------------------------------ collectives
def _collective_frame(raw: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Columns device, opcode, dtype, out_bytes, groups, per_group, pairs, pair_kind, ranks, throughput ->
    canonical rows (vectorised)."""
    opcode = raw["opcode"].astype("string").str.strip().str.lower()
    unknown = ~opcode.isin(list(XLA_COLLECTIVES))
    if unknown.any():
        i = int(np.flatnonzero(unknown.to_numpy())[0])
        raise ImportFormatError(f"{path}: {_locate(path, i)}: unknown collective opcode {raw['opcode'].iloc[i]!r} "
                                f"(known: {', '.join(sorted(XLA_COLLECTIVES))})")
    op = opcode.map(XLA_COLLECTIVES).to_numpy(dtype=object)
    out_bytes = raw["out_bytes"].to_numpy(dtype=np.float64)
    per_group = raw["per_group"].to_numpy(dtype=np.float64)
    groups = raw["groups"].to_numpy(dtype=np.float64)
    is_permute = op == "send_recv"
    bad = ~is_permute & ~(per_group > 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ImportFormatError(f"{path}: {_locate(path, i)}: {raw['opcode'].iloc[i]} without devices per group")
    size = np.where(op == "reduce_scatter", out_bytes * per_group, out_bytes)
    thr = raw["throughput"].to_numpy(dtype=np.float64)
    ranks = np.where(is_permute, raw["ranks"].to_numpy(dtype=np.float64), per_group)
    variant = np.where(
        is_permute, raw["pair_kind"].astype(object).to_numpy(),
        pd.Series(groups).map(lambda g: f"{int(g)}" if g == g else "?").to_numpy(dtype=object)
        + "x" + pd.Series(per_group).map(lambda g: f"{int(g)}" if g == g else "?").to_numpy(dtype=object),
    )
    variant = np.where(is_permute, variant, "replica_groups=" + variant.astype(str))
    return pd.DataFrame({
        "device": raw["device"].to_numpy(), "op": op, "dtype": raw["dtype"].to_numpy(),
        "time_us": size / thr * 1e6, "variant": variant, "size_bytes": size, "n_ranks": ranks,
        "n_nodes": 1, "in_place": False, "framework": "xla",
        "source_target_pairs": raw["pairs"].to_numpy(dtype=np.float64),
        # every device the row's replica groups (or permute pairs) span: popped by the importer after its check
        "_devices": np.where(is_permute, ranks, np.where(np.isnan(groups), 1.0, groups) * per_group),
    })


def _collectives_csv(path: Path) -> pd.DataFrame:
    need = ("device", "opcode", "bytes", "num_devices_per_group", "network_throughput_bytes_per_sec")
    df = read_csv_checked(path, need, what="XLA collectives")
    opcode = text(df, "opcode", path)
    dtype_col = text(df, "dtype", path) if "dtype" in df.columns else None
    out_bytes = numeric(df, "bytes", path, positive=True)
    if "num_elements" in df.columns and "dtype" in df.columns:
        # the table states the output shape twice: elements and bytes must agree for the element type
        elements = numeric(df, "num_elements", path, required=False, positive=True)
        per_element = (df["dtype"].astype("string").str.strip().str.upper().map(_ELEMENT_BYTES)
                       .to_numpy(dtype=np.float64, na_value=np.nan))
        off = np.isfinite(elements) & np.isfinite(per_element) & (elements * per_element != out_bytes)
        if off.any():
            i = int(np.flatnonzero(off)[0])
            raise ImportFormatError(f"{path}: line {csv_line(df, i)}: bytes {out_bytes[i]:.0f} is not num_elements "
                                    f"{elements[i]:.0f} x {per_element[i]:.0f} B ({str(df['dtype'].iloc[i]).strip()})")
    thr = numeric(df, "network_throughput_bytes_per_sec", path, positive=True)
    per_group = numeric(df, "num_devices_per_group", path, required=False, positive=True)
    groups = (numeric(df, "num_replica_groups", path, required=False, positive=True)
              if "num_replica_groups" in df.columns else np.full(len(df), np.nan))
    pairs = (numeric(df, "source_target_pairs", path, required=False)
             if "source_target_pairs" in df.columns else np.zeros(len(df)))
    for column, v in (("num_replica_groups", groups), ("num_devices_per_group", per_group),
                      ("source_target_pairs", pairs)):
        frac = np.isfinite(v) & (v != np.floor(v))
        if frac.any():  # (2.5 replica groups was imported as a "replica_groups=2x4" variant)
            i = int(np.flatnonzero(frac)[0])
            raise ImportFormatError(f"{path}: line {csv_line(df, i)}, column {column!r}: {v[i]:g} is not an integer")
    total = np.nanmax(np.where(np.isnan(groups), 1, groups) * per_group) if np.isfinite(per_group).any() else np.nan
    is_permute = opcode.str.lower().str.startswith("collective-permute")
    is_permute = is_permute.fillna(False).to_numpy()
    if is_permute.any() and not np.isfinite(total):
        total = np.nanmax(2 * pairs)
    if is_permute.any() and not (pairs[is_permute] > 0).all():
        i = int(np.flatnonzero(is_permute & ~(pairs > 0))[0])
        raise ImportFormatError(f"{path}: line {i + 2}: collective-permute row without source_target_pairs")
    # The generator's permute patterns over n devices: one-way (n/2 pairs) or two-way (n pairs: mutual
    # exchange or a ring; the CSV does not say which).
    kind = np.where(2 * pairs == total, "one_way", np.where(pairs == total, "two_way", "pairs"))
    kind = np.char.add(kind.astype(str), np.char.add(":pairs=", np.nan_to_num(pairs).astype(int).astype(str)))
    dtype = dtype_col.str.lower().map(lambda d: XLA_DTYPES.get(d, d)) if dtype_col is not None else "fp32"
    raw = pd.DataFrame({
        "device": df["device"].astype("string").str.strip(), "opcode": opcode, "dtype": dtype,
        "out_bytes": out_bytes, "groups": groups, "per_group": per_group, "pairs": pairs,
        "pair_kind": kind, "ranks": np.full(len(df), total), "throughput": thr,
    })
    return _collective_frame(raw, path)


_ELEMENT_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "S8": 1, "U8": 1, "S32": 4, "U32": 4, "S64": 8,
                  "U64": 8, "F8E4M3FN": 1, "F8E5M2": 1, "PRED": 1, "S16": 2, "U16": 2}


def _device_list(instr: textproto.Message) -> tuple[float, float]:
    """(num_replica_groups, num_devices_per_group) from any of the encodings XLA has used."""
    iota = textproto.first(instr, "iota_collective_device_list")
    if iota is None and (cdl := textproto.first(instr, "collective_device_list")) is not None:
        iota = textproto.first(cdl, "iota_replica_group_list")
        if iota is None and cdl.get("replica_groups"):
            groups = cdl["replica_groups"]
            return float(len(groups)), float(len(groups[0].get("replica_ids", [])))
    if iota is not None:
        return float(textproto.first(iota, "num_replica_groups", 1)), float(
            textproto.first(iota, "num_devices_per_group", np.nan))
    groups = instr.get("replica_groups", [])
    if groups:
        return float(len(groups)), float(len(groups[0].get("replica_ids", [])))
    return np.nan, np.nan


def _collectives_txtpb(path: Path, msg: textproto.Message) -> pd.DataFrame:
    rows = []
    for device, table in textproto.map_entries(msg, "entries").items():
        for entry in (table or {}).get("entries", []):
            instr = textproto.first(entry, "instruction", {})
            opcode = textproto.first(instr, "opcode")
            shape = textproto.first(instr, "shape", {})
            etype = str(textproto.first(shape, "element_type", "F32")).upper()
            if etype == "TUPLE":  # async start ops: the last tuple element is the result
                shape = (shape.get("tuple_shapes") or [{}])[-1]
                etype = str(textproto.first(shape, "element_type", "F32")).upper()
            dims = shape.get("dimensions", [])
            if etype not in _ELEMENT_BYTES:
                raise ImportFormatError(f"{path}: unknown element_type {etype!r} in a {opcode} entry")
            dims = dims if isinstance(dims, list) else [dims]
            n = len(rows) + 1
            if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
                # (two negative extents multiplied into a positive byte count, 10.5 into 42 bytes: both imported)
                raise ImportFormatError(f"{path}: entry {n} ({opcode}): shape dimensions {dims} are not all "
                                        "positive integers")
            out_bytes = float(np.prod(dims, dtype=np.float64)) * _ELEMENT_BYTES[etype] if dims else np.nan
            groups, per_group = _device_list(instr)
            for what, v in (("num_replica_groups", groups), ("num_devices_per_group", per_group)):
                if np.isfinite(v) and not (v > 0 and v == int(v)):
                    raise ImportFormatError(f"{path}: entry {n} ({opcode}): {what} {v:g} is not a positive integer")
            pairs = [(int(textproto.first(p, "source", 0)), int(textproto.first(p, "target", 0)))
                     for p in instr.get("source_target_pairs", [])]
            ids = {d for pr in pairs for d in pr}
            pset = set(pairs)
            if not pairs:
                kind = ""
            elif all((t, s) in pset for s, t in pairs):
                kind = "two_way_mutual"
            elif len({s for s, _ in pairs}) == len(ids) == len({t for _, t in pairs}):
                kind = "ring"
            else:
                kind = "one_way"
            rows.append({
                "device": device, "opcode": opcode,
                "dtype": XLA_DTYPES.get(etype.lower(), etype.lower()), "out_bytes": out_bytes,
                "groups": groups, "per_group": per_group, "pairs": float(len(pairs)),
                "pair_kind": f"{kind}:pairs={len(pairs)}" if pairs else "", "ranks": float(len(ids)),
                "throughput": float(textproto.first(entry, "network_throughput_bytes_per_sec", np.nan)),
            })
    if not rows:
        raise ImportFormatError(f"{path}: no collective entries (expected an "
                                "xla.gpu.DeviceHloInstructionProfiles text proto)")
    raw = pd.DataFrame(rows)
    for c in ("out_bytes", "throughput"):
        bad = ~(raw[c].to_numpy(dtype=np.float64) > 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            v = float(raw[c].iloc[i])
            problem = f"missing {c}" if np.isnan(v) else f"{c} {v:g} is not positive"
            raise ImportFormatError(f"{path}: entry {i + 1} ({raw['opcode'].iloc[i]}): {problem}")
    return _collective_frame(raw, path)


def import_xla_collectives(paths: Iterable[str | os.PathLike] | str | os.PathLike, device: str | None = None,
                           catalog: Catalog | None = None, system: str | None = None) -> pd.DataFrame:
    """Import XLA collective perf tables (tidy CSV or upstream ``.txtpb``) as nccl-tests-convention rows.

    ``system`` names the catalog system (default: :data:`DEFAULT_COLLECTIVE_SYSTEM` where the catalog has it).
    """
    cat = catalog_or_default(catalog)
    frames = []
    for p in as_paths(paths):
        raw = _collectives_txtpb(p, _read_txtpb(p)) if _is_txtpb(p) else _collectives_csv(p)
        if system is not None:
            raw["system"] = resolve_system_name(system, cat, p)
        elif (key := cat.resolve_system(DEFAULT_COLLECTIVE_SYSTEM, missing_ok=True)) is not None:
            # the default system is the H100 node the public table was measured on: rows of another GPU (a table
            # generated on A100s, key sm_80) were put on it and costed on its NVLink, without a word
            names = pd.Series(device, index=raw.index) if device is not None else raw["device"].astype(str)
            keys = names.map(resolve_device_names(set(names.unique()), cat, p))
            own = (keys == cat.systems[key].device).to_numpy()
            raw["system"] = np.where(own, key, None)
            if not own.all():
                others = ", ".join(sorted(set(keys[~own])))
                warn(p, f"{int((~own).sum())} row(s) of {others} are not the GPU of the default system {key} "
                        f"({cat.systems[key].device}): their system is left empty; pass --system naming the "
                        "system they ran on")
        else:
            warn(p, f"catalog has no system {DEFAULT_COLLECTIVE_SYSTEM!r}; the system column is left empty "
                    "(pass --system)")
        _check_fits_system(raw, p, cat)
        raw = raw.drop(columns="_devices")
        # (before the schema's own bound of 2^62 bytes, whose error names a CSV line even in a text proto)
        _check_fits_memory(raw, raw["size_bytes"].to_numpy(dtype=np.float64), p, cat, device, "buffer", " (every device of the group holds it whole)")
        frames.append(finish(raw, p, cat, source=f"xla-collectives:{display_path(p)}", device=device))
    return concat(frames, "XLA collectives")


def _check_fits_system(df: pd.DataFrame, path: Path, cat: Catalog) -> None:
    """Refuse a row whose replica groups (or permute pairs) span more devices than its system's one node holds (the
    rows are one node's: ``n_nodes`` 1). Such a row was imported and the written table refused by `hybrid data
    validate`; its count also became the ranks of the file's collective-permute rows (the largest layout)."""
    if "system" not in df.columns:
        return
    for name in pd.unique(df["system"].dropna()):
        sobj = cat.systems[str(name)]
        rows = (df["system"] == name).to_numpy() & (df["_devices"].to_numpy(dtype=np.float64) > sobj.gpus_per_node)
        if rows.any():
            # a replica-group row first: the permute rows' count is the file's largest layout, so theirs follows it
            groups = rows & (df["op"] != "send_recv").to_numpy()
            i = int(np.flatnonzero(groups if groups.any() else rows)[0])
            op, n = df["op"].iloc[i], df["_devices"].iloc[i]
            what = (f"its source_target_pairs span {n:g} devices" if op == "send_recv" else
                    f"{str(df['variant'].iloc[i]).split('=')[-1].replace('x', ' replica group(s) of ')} are {n:g} "
                    "devices")
            raise ImportFormatError(f"{path}: {_locate(path, i)} ({op}): {what}, more than system {name} has "
                                    f"({sobj.gpus_per_node} x {sobj.device} in one node); check the row, or --system")


def _check_fits_memory(df: pd.DataFrame, nbytes: np.ndarray, path: Path, cat: Catalog, device: str | None,
                       what: str, why: str = "") -> None:
    """Refuse a row whose tensors cannot exist: ``nbytes`` per row must fit in its device's memory. A collective's
    ``size_bytes`` (the all-gather output, the reduce-scatter input, the all-reduce / all-to-all / permute buffer)
    is held whole by every device of the group; a matmul's operands and result are on its one device. (The schema
    bounds sizes at 2^62 bytes and dimensions not at all: a 400 GB all-reduce on an 80 GB H100, or a GEMM of three
    200 TB matrices, was imported as a measurement.)"""
    names = pd.Series(device, index=df.index) if device is not None else df["device"].astype(str)
    keys = resolve_device_names(set(names.unique()), cat, path)
    devs = names.map(keys).to_numpy(dtype=object)
    cap = names.map({n: cat.devices[k].mem_capacity for n, k in keys.items()}).to_numpy(dtype=np.float64)
    over = nbytes > cap
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise ImportFormatError(f"{path}: {_locate(path, i)} ({df['op'].iloc[i]}): a {nbytes[i] / 2**30:.4g} GiB "
                                f"{what} does not fit in the {cap[i] / 2**30:.4g} GiB of {devs[i]}{why}")
