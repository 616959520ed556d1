"""DeepBench results (baidu-research/DeepBench ``results/``), from the tidy CSVs of the public layout.

``deepbench_gemm_tidy.csv``: ``gpu, precision, M, N, K, A_T, B_T, time_ms`` (``C[M,N] = op(A)[M,K] op(B)[K,N]``;
``A_T``/``B_T`` = ``N`` or ``T`` give the BLAS layout, kept as ``variant`` ``nn``/``tn``/...). Precision strings:

* ``Float`` -> fp32
* ``16 bit inputs, 16 bit multiplication, 32 bit addition`` (tensor-core FP16, V100/T4) -> fp16
* ``16 bit inputs, 32 bit multiplication, 32 bit addition`` (P100 "pseudo FP16") -> fp16 storage but FP32
  arithmetic: dtype fp16, variant suffixed ``+fp32math`` so calibration can treat it apart
* ``Int8 multiplication, 32 bit accumulation`` -> int8

``deepbench_allreduce_tidy.csv``: ``gpu, num_floats, num_gpus, num_nodes (empty = 1), mean_time_ms, std_ms,
algorithm`` -> ``all_reduce`` of ``4 * num_floats`` bytes in fp32 (the nccl-tests size); where the file has a
``GBps`` column (``num_gpus x 4 num_floats / time``) each time is checked against it. Rows left blank in the
upstream sheets (no time) are skipped with a warning. Rows of devices that are not GPUs (iPhone, Raspberry
Pi, Xeon Phi KNL) are skipped with a warning.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.data.importers._common import (
    as_paths,
    catalog_or_default,
    concat,
    csv_line,
    display_path,
    finish,
    numeric,
    read_csv_checked,
    resolve_device_names,
    resolve_system_name,
    warn,
)
from hybrid.errors import ImportFormatError
from hybrid.hardware.catalog import Catalog

#: Device labels of DeepBench results that are not GPUs (the mobile/server CPU sheets).
NON_GPU = re.compile(r"iphone|raspberry|knl|xeon|^ia[_ ]|arm|cpu", re.I)


def precision_dtype(text: str) -> tuple[str, str]:
    """(canonical dtype, variant suffix) for a DeepBench precision string."""
    s = str(text).strip().lower()
    if s in ("float", "fp32", "float32", "single"):
        return "fp32", ""
    if "int8" in s:
        return "int8", ""
    if s.startswith("16 bit inputs") and "32 bit multiplication" in s:
        return "fp16", "+fp32math"
    if s.startswith("16 bit inputs") or s in ("half", "fp16", "float16", "mixed precision"):
        return "fp16", ""
    raise KeyError(text)


def _device_mask(gpus: pd.Series, device: str | None, catalog: Catalog, path: Path) -> np.ndarray:
    """Rows to keep: GPUs (resolved later); non-GPU labels and catalog CPUs are skipped with a warning."""
    if device is not None:
        return np.ones(len(gpus), dtype=bool)
    keep = np.ones(len(gpus), dtype=bool)
    for name in pd.unique(gpus):
        key = catalog.resolve_device(str(name), missing_ok=True)
        non_gpu = (key is not None and catalog.devices[key].kind != "gpu") or (
            key is None and NON_GPU.search(str(name)) is not None)
        if non_gpu:
            rows = (gpus == name).to_numpy()
            keep &= ~rows
            warn(path, f"skipped {int(rows.sum())} row(s) of {name!r}: not a GPU")
    return keep


def _gemm(df: pd.DataFrame, path: Path, device: str | None, catalog: Catalog) -> pd.DataFrame:
    for c in ("precision", "A_T", "B_T"):
        if c not in df.columns:
            raise ImportFormatError(f"{path}: missing column {c!r} for a DeepBench GEMM CSV")
    gpus = df["gpu"].astype("string").str.strip()
    keep = _device_mask(gpus, device, catalog, path)
    df, gpus = df.loc[keep], gpus.loc[keep]
    dims = {c.lower(): numeric(df, c, path, positive=True) for c in ("M", "N", "K")}
    t = numeric(df, "time_ms", path, positive=True)
    mapping = {}
    for p in pd.unique(df["precision"].astype("string")):
        try:
            mapping[p] = precision_dtype(str(p))
        except KeyError:
            raise ImportFormatError(f"{path}: unknown precision {p!r}") from None
    prec = df["precision"].astype("string").map(mapping)
    layout = (df["A_T"].astype("string").str.strip().str.lower() + df["B_T"].astype("string").str.strip().str.lower())
    bad = ~layout.isin(["nn", "nt", "tn", "tt"])
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ImportFormatError(f"{path}: line {csv_line(df, i)}: A_T/B_T must be N or T, got "
                                f"{df['A_T'].iloc[i]!r}, {df['B_T'].iloc[i]!r}")
    if "tflops" in df.columns:
        # the tidy table states each measurement twice (tflops = 2 M N K / time, exactly so in the public rows): a
        # row where they disagree has a time or a size from another row or in another unit
        rate = numeric(df, "tflops", path, required=False, positive=True)
        implied = 2.0 * dims["m"] * dims["n"] * dims["k"] / (t * 1e-3) / 1e12
        off = ~np.isnan(rate) & (np.abs(implied / np.where(np.isnan(rate), 1.0, rate) - 1.0) > 0.02)
        if off.any():
            i = int(np.flatnonzero(off)[0])
            raise ImportFormatError(f"{path}: line {csv_line(df, i)}: time_ms {t[i]:g} and tflops {rate[i]:g} "
                                    f"disagree (2MNK/time = {implied[i]:.4g} TFLOP/s)")
    out = pd.DataFrame({
        "device": gpus.to_numpy(), "op": "gemm", "dtype": prec.map(lambda x: x[0]).to_numpy(),
        "time_us": t * 1000.0, "variant": (layout + prec.map(lambda x: x[1])).to_numpy(), "b": 1, **dims,
        "framework": "deepbench", "_line": df.index.to_numpy() + 2,  # (csv_line: non-GPU rows were skipped)
    })
    return finish(out, path, catalog, source=f"deepbench:{display_path(path)}", device=device)


def _allreduce(df: pd.DataFrame, path: Path, device: str | None, system: str | None,
               catalog: Catalog) -> pd.DataFrame:
    gpus = df["gpu"].astype("string").str.strip()
    keep = _device_mask(gpus, device, catalog, path)
    blank = df["mean_time_ms"].isna().to_numpy() & keep
    if "algorithm" in df.columns:
        # the upstream sheets' blank rows keep their algorithm; a row with neither time nor algorithm is a line cut
        # short (a truncated copy), not a blank measurement
        cut = blank & df["algorithm"].astype("string").str.strip().fillna("").eq("").to_numpy()
        if cut.any():
            i = int(np.flatnonzero(cut)[0])
            raise ImportFormatError(f"{path}: line {csv_line(df, i)}: no mean_time_ms and no algorithm (the upstream "
                                    "sheets' rows without a time keep their algorithm): the line looks cut short; "
                                    "restore the complete file")
    if blank.any():
        warn(path, f"skipped {int(blank.sum())} row(s) with no time (left blank in the upstream sheets)")
    keep &= ~blank
    df, gpus = df.loc[keep], gpus.loc[keep]
    t = numeric(df, "mean_time_ms", path, positive=True)
    floats = numeric(df, "num_floats", path, positive=True)
    ranks = numeric(df, "num_gpus", path, positive=True)
    nodes = numeric(df, "num_nodes", path, required=False, positive=True) if "num_nodes" in df.columns \
        else np.full(len(df), np.nan)
    largest = max((sy.gpus_per_node for sy in catalog.systems.values()), default=8)
    crowded = np.isnan(nodes) & (ranks > largest)
    if crowded.any():  # (an empty num_nodes is one node: 1000 ranks were imported as one node of 1000 GPUs)
        i = int(np.flatnonzero(crowded)[0])
        raise ImportFormatError(f"{path}: line {csv_line(df, i)}: num_gpus {ranks[i]:g} with num_nodes empty (one "
                                f"node) is more GPUs than any catalog system holds in a node ({largest}); give "
                                "num_nodes")
    frac = floats != np.floor(floats)
    if frac.any():  # (1.5 floats was imported as a 6-byte buffer)
        i = int(np.flatnonzero(frac)[0])
        raise ImportFormatError(f"{path}: line {csv_line(df, i)}, column 'num_floats': {floats[i]:g} is not a whole "
                                "number of floats")
    if "GBps" in df.columns:
        # the tidy table states each measurement twice, as the GEMM table does: GBps = num_gpus x 4 num_floats /
        # time (exactly so in every public row); a row where they disagree has a time or a size from another row or
        # in another unit
        rate = numeric(df, "GBps", path, required=False, positive=True)
        implied = ranks * 4.0 * floats / (t * 1e-3) / 1e9
        off = ~np.isnan(rate) & (np.abs(implied / np.where(np.isnan(rate), 1.0, rate) - 1.0) > 0.02)
        if off.any():
            i = int(np.flatnonzero(off)[0])
            raise ImportFormatError(f"{path}: line {csv_line(df, i)}: mean_time_ms {t[i]:g} and GBps {rate[i]:g} "
                                    f"disagree (num_gpus x 4 num_floats / time = {implied[i]:.4g} GB/s)")
    out = pd.DataFrame({
        "device": gpus.to_numpy(), "op": "all_reduce", "dtype": "fp32", "time_us": t * 1000.0,
        "size_bytes": floats * 4.0, "n_ranks": ranks, "n_nodes": np.where(np.isnan(nodes), 1.0, nodes),
        "framework": "deepbench", "_line": df.index.to_numpy() + 2,  # (csv_line: rows were skipped)
    })
    if "std_ms" in df.columns:
        out["time_us_std"] = numeric(df, "std_ms", path, required=False) * 1000.0
    if "algorithm" in df.columns:
        out["algorithm"] = df["algorithm"].astype("string").str.strip().to_numpy()
    if system is not None:
        out["system"] = resolve_system_name(system, catalog, path)
    elif device is None:
        out["system"] = setup_systems(out["device"], catalog, path)
    return finish(out, path, catalog, source=f"deepbench:{display_path(path)}", device=device)


#: What the catalog's entries of DeepBench's own all-reduce set-ups (one per GPU model) say in their ``source``.
SETUP_SOURCE = "baidu-research/DeepBench"


def setup_systems(gpus: pd.Series, catalog: Catalog, path: Path) -> np.ndarray:
    """The catalog system of DeepBench's all-reduce set-up of each row's GPU (an entry whose ``source`` is
    DeepBench's and whose device is the row's: ``DeepBench-P100``, 8 GPUs per node, its nodes' NIC), None where the
    catalog has none. The sheets name only the GPU and the node count: without a system, rows across 2 and 4 nodes
    were costed on generic nodes of the GPU (12.5 GB/s per GPU between nodes against the set-up's 1.5625)."""
    names = gpus.astype(str)
    keys = resolve_device_names(pd.unique(names), catalog, path)
    setups: dict[str, str] = {}
    for sys_key, sy in sorted(catalog.systems.items()):
        if str(sy.source).startswith(SETUP_SOURCE):
            setups.setdefault(sy.device, sys_key)
    by_name = {name: setups.get(key) for name, key in keys.items()}
    return names.map(by_name).to_numpy(dtype=object)


def import_deepbench(paths: Iterable[str | os.PathLike] | str | os.PathLike, device: str | None = None,
                     catalog: Catalog | None = None, system: str | None = None) -> pd.DataFrame:
    """Import DeepBench tidy GEMM and all-reduce CSVs (the kind of each file is told by its columns)."""
    cat = catalog_or_default(catalog)
    frames = []
    for p in as_paths(paths):
        df = read_csv_checked(p, ("gpu",), what="DeepBench tidy")
        blank = (df["gpu"].isna() | (df["gpu"].astype("string").str.strip() == "")).to_numpy()
        if blank.any() and device is None:  # else the catalog is asked for a device called 'nan'
            raise ImportFormatError(f"{p}: line {csv_line(df, int(np.flatnonzero(blank)[0]))}, column 'gpu': "
                                    "missing device name (pass --device to name the one that ran the file)")
        if {"M", "N", "K", "time_ms"} <= set(df.columns):
            frames.append(_gemm(df, p, device, cat))
        elif {"num_floats", "num_gpus", "mean_time_ms"} <= set(df.columns):
            frames.append(_allreduce(df, p, device, system, cat))
        else:
            raise ImportFormatError(
                f"{p}: neither a DeepBench GEMM table (gpu, M, N, K, time_ms, ...) nor an all-reduce table "
                "(gpu, num_floats, num_gpus, mean_time_ms, ...); conv and RNN tables are not imported")
    return concat(frames, "DeepBench")
