"""NeuSight per-op kernel CSVs (sitar-lab/NeuSight, ``scripts/asplos/data/dataset*``).

Columns: ``OPName, Latency`` (milliseconds), ``Device``, ``Torch Version`` (``p2.1.0``), ``CUDNN Version``
(``8902``), ``CUDA Version`` (``cu121``), ``Kernel Name``, launch geometry, and the shape: ``B,M,N,K`` for
``bmm``/``linear`` (out ``[B,M,N] = [B,M,K] x [K,N]``) or ``B,H`` (rows x hidden) for layer norm, softmax and
the elementwise ops. The AMD collections have no version columns; their version comes from the
``p<torch version>`` directory. All kernels ran in FP32. Convolution rows (``OPName`` ``conv``, the
``collect/conv/p2.1.0/<GPU>.csv`` collections) have ``B, Input_Channel, Output_Channel, Kernel_Szie`` (sic),
``Input_Size, Stride, Padding``: square ``nn.Conv2d`` forward passes on ``[B, C_in, S, S]`` inputs, imported as
op ``conv2d``, direction ``fwd`` (``variant`` ``fwd``, as the profiler writes it), dilation 1, groups 1.

The upstream tree holds the same measurements more than once: ``collect/ln.csv`` and ``collect/softmax.csv``
concatenate the per-GPU ``collect/<op>/p2.1.0/<GPU>.csv`` files, and ``dataset/train/ln.csv`` /
``softmax.csv`` repeat subsets of them (18,755 of the 47,548 pointwise rows). Reading several files drops rows
that repeat a row of another file (:func:`drop_cross_file_duplicates`), so a random split never tests on a
copy of a training row. Repeats *within* one file (re-measured shapes) are kept.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.data.importers._common import (
    DataImportWarning,
    as_paths,
    catalog_or_default,
    concat,
    csv_line,
    display_path,
    finish,
    numeric,
    read_csv_checked,
)
from hybrid.errors import ImportFormatError
from hybrid.hardware.catalog import Catalog

#: NeuSight elementwise OPName -> (variant, inputs read, outputs written, FLOPs per element). A trailing
#: ``u`` is NeuSight's "unary" form, tensor-op-scalar (the kernel names say ``CUDAFunctorOnSelf_add``,
#: ``AUnaryFunctor<..MulFunctor>``, ``pow_tensor_scalar_kernel``), so it reads one tensor instead of two.
#: FLOP counts are nominal (pow = exp(log(x) * y) ~ 8 flops; gelu/tanh as in ``hybrid.ops.families``).
ELEMENTWISE_OPS: dict[str, tuple[str, int, int, float]] = {
    "add": ("add", 2, 1, 1.0),
    "addu": ("add_scalar", 1, 1, 1.0),
    "mul": ("mul", 2, 1, 1.0),
    "mulu": ("mul_scalar", 1, 1, 1.0),
    "div": ("div", 2, 1, 1.0),
    "divu": ("div_scalar", 1, 1, 1.0),
    "sub": ("sub", 2, 1, 1.0),
    "subu": ("sub_scalar", 1, 1, 1.0),
    "pow": ("pow", 2, 1, 8.0),
    "powu": ("pow_scalar", 1, 1, 8.0),
    "relu": ("relu", 1, 1, 1.0),
    "gelu": ("gelu", 1, 1, 8.0),
    "tanh": ("tanh", 1, 1, 4.0),
    "sigmoid": ("sigmoid", 1, 1, 4.0),
    "silu": ("silu", 1, 1, 4.0),
    "exp": ("exp", 1, 1, 2.0),
}
GEMM_OPS = {"bmm": "bmm", "linear": "linear", "matmul": "matmul"}
ROW_OPS = {"ln": "layernorm", "layernorm": "layernorm", "softmax": "softmax"}
CONV_OPS = {"conv": "conv2d", "conv2d": "conv2d"}
#: NeuSight conv column -> canonical column (``Kernel_Szie`` is upstream's spelling; ``Kernel_Size`` accepted)
CONV_COLUMNS = {"B": "batch", "Input_Channel": "in_channels", "Output_Channel": "out_channels",
                "Input_Size": "height", "Kernel_Szie": "kernel_h", "Stride": "stride", "Padding": "padding"}

_TORCH_DIR = re.compile(r"^p(\d+(?:\.\d+)+)$")


def _versions(df: pd.DataFrame, path: Path) -> tuple[object, object]:
    """(framework_version, library_version) columns: ``p2.1.0`` -> ``2.1.0``; ``cu121`` + ``8902`` ->
    ``CUDA 12.1; cuDNN 8.9.2``. Without version columns, the ``p2.4.1`` directory gives the torch version."""
    if "Torch Version" in df.columns:
        fw = df["Torch Version"].astype("string").str.strip().str.replace(r"^p", "", regex=True)
    else:
        match = next((m for part in reversed(path.parent.parts) if (m := _TORCH_DIR.match(part))), None)
        fw = match.group(1) if match else None
    parts = []
    if "CUDA Version" in df.columns:
        cu = df["CUDA Version"].astype("string").str.strip()
        digits = cu.str.extract(r"^cu(\d+)(\d)$")
        parts.append(("CUDA " + digits[0] + "." + digits[1]).fillna("CUDA " + cu))
    if "CUDNN Version" in df.columns:
        v = pd.to_numeric(df["CUDNN Version"], errors="coerce")
        s = ("cuDNN " + (v // 1000).astype("Int64").astype("string") + "."
             + ((v % 1000) // 100).astype("Int64").astype("string") + "."
             + (v % 100).astype("Int64").astype("string"))
        parts.append(s)
    lib: object = None
    if parts:
        lib = parts[0] if len(parts) == 1 else parts[0].fillna("") + "; " + parts[1].fillna("")
    return fw, lib


def _one_file(path: Path, device: str | None, catalog: Catalog) -> pd.DataFrame:
    df = read_csv_checked(path, ("OPName", "Latency", "Device"), what="NeuSight")
    ops = df["OPName"].astype("string").str.strip().str.lower()
    if ops.isna().any():
        i = int(np.flatnonzero(ops.isna().to_numpy())[0])
        raise ImportFormatError(f"{path}: line {i + 2}, column 'OPName': missing op name")
    known = set(ELEMENTWISE_OPS) | set(GEMM_OPS) | set(ROW_OPS) | set(CONV_OPS)
    unknown = ~ops.isin(list(known))
    if unknown.any():
        i = int(np.flatnonzero(unknown.to_numpy())[0])
        raise ImportFormatError(
            f"{path}: line {csv_line(df, i)}: unknown NeuSight OPName {df['OPName'].iloc[i]!r} "
            f"(known: {', '.join(sorted(known))})"
        )

    latency_ms = numeric(df, "Latency", path, positive=True)
    out = pd.DataFrame({"device": df["Device"].astype("string").str.strip(), "dtype": "fp32",
                        "time_us": latency_ms * 1000.0, "direction": "fwd"}, index=df.index)
    if device is None and out["device"].isna().any():
        i = int(np.flatnonzero(out["device"].isna().to_numpy())[0])
        raise ImportFormatError(f"{path}: line {csv_line(df, i)}, column 'Device': missing device name")

    is_gemm = ops.isin(list(GEMM_OPS)).to_numpy()
    is_row = ops.isin(list(ROW_OPS)).to_numpy()
    is_elem = ops.isin(list(ELEMENTWISE_OPS)).to_numpy()
    is_conv = ops.isin(list(CONV_OPS)).to_numpy()
    op = np.empty(len(df), dtype=object)
    if is_gemm.any():
        missing = [c for c in ("B", "M", "N", "K") if c not in df.columns]
        if missing:
            raise ImportFormatError(f"{path}: GEMM rows need columns B, M, N, K; missing {', '.join(missing)}")
        for src, dst in (("B", "b"), ("M", "m"), ("N", "n"), ("K", "k")):
            vals = numeric(df, src, path, required=False, positive=True)
            _require(vals, is_gemm, src, path, df)
            out[dst] = np.where(is_gemm, vals, np.nan)
        op[is_gemm] = ops[is_gemm].map(GEMM_OPS).to_numpy()
    if is_row.any() or is_elem.any():
        missing = [c for c in ("B", "H") if c not in df.columns]
        if missing:
            raise ImportFormatError(f"{path}: norm/softmax/elementwise rows need columns B, H; "
                                    f"missing {', '.join(missing)}")
        rows_b = numeric(df, "B", path, required=False, positive=True)
        hid = numeric(df, "H", path, required=False, positive=True)
        _require(rows_b, is_row | is_elem, "B", path, df)
        _require(hid, is_row | is_elem, "H", path, df)
        if is_row.any():
            out["rows"] = np.where(is_row, rows_b, np.nan)
            out["hidden"] = np.where(is_row, hid, np.nan)
            op[is_row] = ops[is_row].map(ROW_OPS).to_numpy()
        if is_elem.any():
            table = pd.DataFrame.from_dict(ELEMENTWISE_OPS, orient="index",
                                           columns=["variant", "n_inputs", "n_outputs", "flops_per_element"])
            looked = table.reindex(ops.to_numpy())
            for column, v in (("B", rows_b), ("H", hid)):
                frac = is_elem & (v != np.floor(v))
                if frac.any():  # (B = 1.5 times H = 8192 made 12288 elements, a whole number the schema accepted)
                    i = int(np.flatnonzero(frac)[0])
                    raise ImportFormatError(f"{path}: line {csv_line(df, i)}, column {column!r}: {v[i]:g} is not a "
                                            "whole number")
            out["elements"] = np.where(is_elem, rows_b * hid, np.nan)
            out["variant"] = np.where(is_elem, looked["variant"].to_numpy(dtype=object), None)
            for c in ("n_inputs", "n_outputs", "flops_per_element"):
                out[c] = np.where(is_elem, looked[c].to_numpy(dtype=np.float64), np.nan)
            op[is_elem] = "elementwise"
    if is_conv.any():
        _conv_columns(df, is_conv, path, out)
        op[is_conv] = "conv2d"
    out.insert(1, "op", op)
    fw, lib = _versions(df, path)
    out["framework"] = "pytorch"
    out["framework_version"] = fw
    if lib is not None:
        out["library_version"] = lib
    if "Kernel Name" in df.columns:
        out["kernel_name"] = df["Kernel Name"].astype("string").str.strip()
    return finish(out, path, catalog, source=f"neusight:{display_path(path)}", device=device)


def _conv_columns(df: pd.DataFrame, is_conv: np.ndarray, path: Path, out: pd.DataFrame) -> None:
    """Fill the canonical conv columns of the ``is_conv`` rows of ``out`` (square input and kernel, groups 1)."""
    if "Kernel_Szie" not in df.columns and "Kernel_Size" in df.columns:
        df = df.rename(columns={"Kernel_Size": "Kernel_Szie"})
    missing = [c for c in CONV_COLUMNS if c not in df.columns]
    if missing:
        raise ImportFormatError(f"{path}: convolution rows need columns {', '.join(CONV_COLUMNS)}; "
                                f"missing {', '.join(missing)}")
    vals = {}
    for src, dst in CONV_COLUMNS.items():
        v = numeric(df, src, path, required=False, positive=src != "Padding")
        _require(v, is_conv, src, path, df)
        bad = is_conv & ((v < 0) | (v != np.round(v)))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ImportFormatError(f"{path}: line {csv_line(df, i)}, column {src!r}: must be a non-negative "
                                    f"whole number, got {v[i]:g}")
        vals[dst] = v
    # a kernel wider than the padded input has no output (PyTorch refuses it): the row cannot be a measurement
    bad = is_conv & (vals["kernel_h"] > vals["height"] + 2 * vals["padding"])
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ImportFormatError(f"{path}: line {csv_line(df, i)}: convolution kernel {vals['kernel_h'][i]:g} is "
                                f"larger than the padded input {vals['height'][i]:g} + 2 x {vals['padding'][i]:g}")
    vals["width"], vals["kernel_w"] = vals["height"], vals["kernel_h"]
    vals["dilation"] = np.ones(len(df))
    vals["groups"] = np.ones(len(df))
    for c in ("batch", "in_channels", "out_channels", "height", "width", "kernel_h", "kernel_w", "stride",
              "padding", "dilation", "groups"):
        out[c] = np.where(is_conv, vals[c], np.nan)
    variant = out["variant"].to_numpy(dtype=object) if "variant" in out.columns else np.full(len(df), None)
    out["variant"] = np.where(is_conv, "fwd", variant)


def _require(values: np.ndarray, mask: np.ndarray, column: str, path: Path, df: pd.DataFrame) -> None:
    bad = mask & np.isnan(values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ImportFormatError(f"{path}: line {csv_line(df, i)}, column {column!r}: missing value (NaN/empty)")


#: Columns that identify one NeuSight measurement (with the time, see :func:`drop_cross_file_duplicates`).
DUPLICATE_KEY = ("device", "op", "dtype", "direction", "b", "m", "n", "k", "rows", "hidden", "elements", "variant",
                 "batch", "in_channels", "out_channels", "height", "width", "kernel_h", "kernel_w", "stride",
                 "padding", "dilation", "groups")


#: Where NeuSight's kernel collections sit under a public-data directory (the layout of ``shared/datasets``).
#: Training: the upstream ``dataset/train`` folder and the AMD collections. Test (larger shapes, more GPUs): the
#: derived subset this project's CI holds (``neusight/test-dev``), the whole upstream folder at its upstream path
#: (``scripts/asplos/data/dataset/test``), or the same files beside it as ``neusight/test``.
TRAIN_COLLECTIONS = ("neusight/scripts/asplos/data/dataset/train", "neusight/scripts/asplos/data/dataset_amd")
TEST_COLLECTIONS = ("neusight/test-dev", "neusight/test", "neusight/scripts/asplos/data/dataset/test")


def collections(data_dir: str | os.PathLike, which: str = "test") -> list[Path]:
    """NeuSight's kernel collections of ``which`` (``"train"`` or ``"test"``: :data:`TRAIN_COLLECTIONS`,
    :data:`TEST_COLLECTIONS`) present under the public-data directory ``data_dir``, in that order; empty when
    none is there. Reading several of them is safe: :func:`drop_cross_file_duplicates` keeps one copy of a
    measurement that two of them hold (the test-dev subset inside the whole upstream test folder)."""
    if which not in ("train", "test"):
        raise ValueError(f"which must be 'train' or 'test', got {which!r}")
    base = Path(data_dir)
    return [base / c for c in (TRAIN_COLLECTIONS if which == "train" else TEST_COLLECTIONS)
            if (base / c).is_dir() and any((base / c).rglob("*.csv"))]


def drop_cross_file_duplicates(table: pd.DataFrame) -> pd.DataFrame:
    """Drop rows that repeat a measurement of another file: same device, op, shape and variant, and the same
    time to 5 significant digits (the aggregated CSVs print the per-GPU values with other rounding).

    Of each such group the rows of one file are kept: the file with the deepest path (the per-GPU
    collections rather than the aggregated copies), ties broken by name. Repeats within one file stay. The rows
    dropped are said (a :class:`DataImportWarning`: how many, from which files).
    """
    if len(table) == 0 or "source" not in table.columns:
        return table
    key = [c for c in DUPLICATE_KEY if c in table.columns]
    t5 = pd.Series(table["time_us"].to_numpy(dtype=np.float64), index=table.index)
    exponent = np.floor(np.log10(np.maximum(t5.to_numpy(), 1e-300)))
    t5 = np.round(t5.to_numpy() / 10.0 ** (exponent - 4)) * 10.0 ** (exponent - 4)
    frame = table[key].astype("string").fillna("")
    frame["_t5"] = pd.Series(t5, index=table.index).map("{:.5g}".format)
    src = table["source"].astype("string").fillna("")
    # rank files: deeper path first, then name; the group's best-ranked file keeps its rows
    files = pd.Series(pd.unique(src))
    order = sorted(files, key=lambda s: (-s.count("/"), s))
    rank = src.map({s: i for i, s in enumerate(order)}).to_numpy()
    frame["_rank"] = rank
    best = frame.groupby(list(frame.columns[:-1]), sort=False, dropna=False)["_rank"].transform("min").to_numpy()
    keep = rank == best
    if not keep.all():
        dropped = src[~keep].value_counts()
        files = ", ".join(f"{n:,} of {f}" for f, n in dropped.head(3).items())
        more = f" and {len(dropped) - 3} more file(s)" if len(dropped) > 3 else ""
        warnings.warn(f"neusight import: dropped {int((~keep).sum()):,} row(s) that repeat a measurement of another "
                      f"file (same device, op, shape and variant, same time to 5 significant digits; the file with "
                      f"the deepest path keeps its copy): {files}{more}", DataImportWarning, stacklevel=2)
    return table.loc[keep].reset_index(drop=True)


def import_neusight(paths: Iterable[str | os.PathLike] | str | os.PathLike, device: str | None = None,
                    catalog: Catalog | None = None, system: str | None = None, dedupe: bool = True) -> pd.DataFrame:
    """Import NeuSight kernel CSVs into the canonical table (one row per measured kernel).

    ``device`` overrides the ``Device`` column (for files from GPUs the catalog does not know by that name).
    ``system`` is accepted for a uniform signature and ignored (these are single-GPU kernels). ``dedupe=False``
    leaves the rows that repeat another file's (:func:`drop_cross_file_duplicates`) to the caller:
    :func:`hybrid.data.importers.import_paths` reads files in chunks and de-duplicates once over all of them.
    """
    del system
    cat = catalog_or_default(catalog)
    table = concat([_one_file(p, device, cat) for p in as_paths(paths)], "NeuSight")
    return drop_cross_file_duplicates(table) if dedupe else table
