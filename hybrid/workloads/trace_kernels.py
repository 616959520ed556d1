"""Kernel-time measurements from GPU traces: a traced step as calibration rows.

A ``torch.profiler`` trace of a GPU step holds, for every op the families cost, its shapes (``record_shapes``)
and the CUPTI durations of the kernels it launched. :func:`kernel_rows` turns them into canonical measurement
rows (:mod:`hybrid.data.schema`): the op's canonical row as the trace path maps it
(:func:`hybrid.workloads.trace_units.trace_units`), ``time_us`` = the sum of its kernels' durations, and
``framework = "cupti"``, which the kernel models read as *kernel-only* timing
(:data:`hybrid.corrections.features.KERNEL_TIMING_FRAMEWORKS`): no host dispatch in it, unlike the eager-op
timings of ``hybrid profile``, whose per-op dispatch depends on the host the GPU sits in. Identical rows (the
same op shape in every layer) become one row: the median, with min / max / spread and the count as repeats.

Use: trace a model on the GPU you have, calibrate on its rows (with any other data), predict another GPU;
``experiments/trace_gpu`` measures what that gives on the project's own H100 and H200 traces.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.data.profiler.kernel_times import KERNEL_FRAMEWORK
from hybrid.data.traces import load_traces, trace_files
from hybrid.data.traces.parse import RankTrace
from hybrid.data.traces.precision import apply_fp32_precision
from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import Catalog, default_catalog
from hybrid.ops.families import family_array
from hybrid.workloads.trace_costing import traced_gpu
from hybrid.workloads.trace_units import FIRST_ORDER_LABELS, trace_units


def trace_device(trace: RankTrace, catalog: Catalog, device: str | None = None) -> str:
    """Catalog key of the GPU ``trace`` was recorded on (``device`` overrides the trace's own device name)."""
    if device is not None:
        return catalog.resolve_device(str(device))
    if not trace.device_name:
        raise InvalidInputError(f"{trace.path}: the trace names no GPU (no deviceProperties); pass the device")
    key = traced_gpu(trace, catalog)
    if key is None:  # the trace's own name, not in the catalog: say which name and how to proceed
        raise InvalidInputError(f"{trace.path}: GPU {trace.device_name!r} is not in the catalog; pass the catalog "
                                "device")
    return key


def kernel_rows(traces: Sequence[RankTrace], catalog: Catalog | None = None, device: str | None = None
                ) -> pd.DataFrame:
    """Canonical rows of every costed op of ``traces`` (GPU traces of one or more steps / models), timed by the
    CUPTI durations of its kernels; identical rows merged (median; min, max, spread, count as ``repeats``). An fp32
    matmul or convolution whose kernels ran TF32 math is a ``tf32`` row.

    Ops with no kernel in the trace, no family (views, host-only work) or a zero kernel time are left out, and so
    are collectives: an NCCL kernel's duration includes the wait for the slowest peer, not a cost of its own.
    Raises :class:`InvalidInputError` for a trace without GPU kernels (a CPU or meta-device trace) or whose GPU
    the catalog does not know (pass ``device``). A ``device`` that is not the GPU a trace names (one the catalog
    knows) relabels that trace's rows, with a warning saying so."""
    if not traces:
        raise InvalidInputError("no traces given")
    cat = catalog or default_catalog()
    frames = []
    relabelled: dict[str, list[tuple[str, int]]] = {}  # traced GPU -> (trace, rows) labelled ``device`` instead
    for tr in traces:
        if tr.device != "cuda" or len(tr.kernels) == 0:
            raise InvalidInputError(f"{tr.path}: no GPU kernels in the trace (traced on {tr.device!r}); kernel rows "
                                    "need a GPU trace recorded with torch.profiler activities CPU and CUDA")
        key = trace_device(tr, cat, device)
        own = traced_gpu(tr, cat) if device is not None and tr.device_name else None
        # an fp32 matmul / convolution whose kernels ran TF32 is a tf32 measurement (hybrid.data.traces.precision)
        u, _ = apply_fp32_precision(trace_units(tr), tr.meta, "tf32" in cat.device(key).peak_flops)
        dev_us = pd.to_numeric(u["device_us"], errors="coerce").to_numpy(dtype=np.float64)
        keep = ((u["kind"] == "op").to_numpy() & ~u["label"].isin(FIRST_ORDER_LABELS).to_numpy()
                & np.isfinite(dev_us) & (dev_us > 0)
                & np.fromiter((isinstance(r, dict) and bool(r.get("op")) for r in u["row"]), dtype=bool,
                              count=len(u)))
        if not keep.any():
            continue
        rows = pd.DataFrame([dict(r) for r in u.loc[keep, "row"]])
        rows = rows[family_array(rows["op"]) != "collective"].copy()
        if rows.empty:
            continue
        rows["time_us"] = dev_us[keep][rows.index.to_numpy()]
        rows["device"] = key
        rows["framework"] = KERNEL_FRAMEWORK
        rows["source"] = f"trace:{tr.path}"
        frames.append(rows)
        if own is not None and own != key:
            relabelled.setdefault(f"{own} ({tr.device_name})", []).append((tr.path, len(rows)))
    if not frames:
        raise InvalidInputError("no op of the traces has a family and kernels: nothing to measure")
    for own, done in relabelled.items():
        paths = [p for p, _ in done]
        warnings.warn(f"--device relabelled {sum(n for _, n in done)} kernel row(s) of {len(paths)} trace(s) recorded "
                      f"on {own} as {key}: {', '.join(paths[:3])}{' ...' if len(paths) > 3 else ''} (their times "
                      "are the traced GPU's)", UserWarning, stacklevel=2)
    table = pd.concat(frames, ignore_index=True, sort=False)
    return merge_identical(table)


def step_kernel_rows(roots: Sequence[str | os.PathLike], catalog: Catalog | None = None) -> pd.DataFrame:
    """:func:`kernel_rows` of every traced step under ``roots`` (each subdirectory holding a step's trace files,
    as ``datasets/traces-*`` and ``experiments/trace_gpu/record.py`` lay them out)."""
    steps = sorted(d for root in roots for d in Path(root).iterdir() if d.is_dir())
    if not steps:
        raise InvalidInputError(f"no traced step directories under {', '.join(map(str, roots))}")
    return kernel_rows([tr for d in steps for tr in load_traces(trace_files([d]))], catalog)


def merge_identical(table: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct input (every column but the times and ``source``): median ``time_us``, its min, max
    and standard deviation over the merged rows, their count as ``repeats``; ``source`` of the first."""
    keys = [c for c in table.columns if c not in ("time_us", "source")]
    code = table.groupby(keys, dropna=False, sort=False).ngroup().to_numpy()  # missing values group together
    times = pd.to_numeric(table["time_us"], errors="coerce").groupby(code)
    stats = times.agg(["median", "min", "max", "std", "size"])  # indexed by code, ascending
    first = pd.Series(np.arange(len(table))).groupby(code).first()  # same index
    out = table.iloc[first.to_numpy()].reset_index(drop=True)
    out["time_us"] = stats["median"].to_numpy()
    out["time_us_min"] = stats["min"].to_numpy()
    out["time_us_max"] = stats["max"].to_numpy()
    out["time_us_std"] = stats["std"].fillna(0.0).to_numpy()
    out["repeats"] = stats["size"].to_numpy()
    return out
