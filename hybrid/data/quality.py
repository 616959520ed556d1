"""Physical plausibility of kernel measurements before a fit.

A GEMM cannot run faster than its device's datasheet peak for its dtype: the catalog holds the dense peak at the
boost clock, and the most a part gains over it is its maximum-clock headroom (H100 SXM: 1.98 GHz at most against
the 1.83 GHz of its rated peaks, 8%). A collection whose GEMMs beat that bound by more than
:data:`PEAK_TOLERANCE` measured something else (another FLOP count, sparse kernels, a timer that misses part of the
kernel, or the wrong device), and the same error usually reaches its rows that stay under the bound: XLA's H100
perf table times fp8 GEMMs 3.0-3.3x faster than bf16 on the same shapes, where the hardware's fp8 rate is 2x bf16,
and up to 1.32x the fp8 dense peak. Fitting such a group teaches the corrections a device faster than it is, so
it is left out, by (device, dtype, framework), with a warning naming it.

CPU rows are not checked: a CPU's peaks are estimates of the local machine (:mod:`hybrid.hardware.cpu`), not
datasheet bounds. Pointwise ops are not checked either: their roofline counts bytes that caches may serve.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybrid.hardware.catalog import Catalog

#: A GEMM more than this many times faster than its roofline (datasheet dense peak of its dtype, memory
#: bandwidth) is physically implausible; its (device, dtype, framework) group is left out of fits.
PEAK_TOLERANCE = 1.15
#: Op families whose roofline is a hard compute bound (dense matrix products).
CHECKED_FAMILIES = ("gemm",)

GROUP_COLUMNS = ("device", "dtype", "framework")


def implausible_groups(norm: pd.DataFrame, base: pd.DataFrame, catalog: Catalog,
                       tolerance: float = PEAK_TOLERANCE) -> pd.DataFrame:
    """Groups (device, dtype, framework) of GPU GEMM rows with at least one row faster than ``tolerance`` x its
    roofline, with their row count and fastest speed-up over the roofline; empty when every group is plausible.

    ``norm`` is a validated measurement table (``time_us``, ``device``, ``dtype``, optional ``framework``) and
    ``base`` its roofline frame (``family``, ``time_us``), as :meth:`HybridPredictor._prepare` returns them."""
    if tolerance <= 1:
        raise ValueError(f"tolerance must be > 1, got {tolerance}")
    empty = pd.DataFrame(columns=[*GROUP_COLUMNS, "rows", "fastest_over_roofline"])
    if len(norm) == 0 or "time_us" not in norm.columns:
        return empty
    fam = base["family"].astype(str).to_numpy()
    dev = norm["device"].astype(str)
    codes, names = pd.factorize(dev)  # one catalog lookup per distinct device name
    gpu_names = np.array([(key := catalog.resolve_device(str(n), missing_ok=True)) is not None
                          and catalog.devices[key].kind == "gpu" for n in names] + [False], dtype=bool)
    is_gpu = gpu_names[codes]
    checked = np.isin(fam, CHECKED_FAMILIES) & is_gpu
    if not checked.any():
        return empty
    measured = pd.to_numeric(norm["time_us"], errors="coerce").to_numpy(dtype=np.float64)
    roof = pd.to_numeric(base["time_us"], errors="coerce").to_numpy(dtype=np.float64)
    speedup = np.divide(roof, measured, out=np.zeros_like(roof), where=measured > 0)
    frame = pd.DataFrame({"device": dev.to_numpy(), "dtype": norm["dtype"].astype(str).to_numpy(),
                          "framework": (norm["framework"].astype("string").fillna("").to_numpy()
                                        if "framework" in norm.columns else np.full(len(norm), "")),
                          "speedup": speedup})[checked]
    g = frame.groupby(list(GROUP_COLUMNS), sort=True)["speedup"].agg(rows="size", fastest_over_roofline="max")
    bad = g[g["fastest_over_roofline"] > tolerance].reset_index()
    return bad if len(bad) else empty


def group_mask(norm: pd.DataFrame, base: pd.DataFrame, groups: pd.DataFrame) -> np.ndarray:
    """True for the GEMM rows of ``norm`` that belong to one of ``groups`` (from :func:`implausible_groups`)."""
    out = np.zeros(len(norm), dtype=bool)
    if len(groups) == 0:
        return out
    fam = np.isin(base["family"].astype(str).to_numpy(), CHECKED_FAMILIES)
    fw = (norm["framework"].astype("string").fillna("") if "framework" in norm.columns
          else pd.Series("", index=norm.index))
    keys = pd.MultiIndex.from_arrays([norm["device"].astype(str), norm["dtype"].astype(str), fw.astype(str)])
    bad = pd.MultiIndex.from_frame(groups[list(GROUP_COLUMNS)].astype(str))
    return fam & keys.isin(bad)


def describe(groups: pd.DataFrame, rows: bool = True) -> str:
    """The groups in one line, e.g. ``H100-SXM fp8 (xla): 1125 rows, up to 1.34x faster than the roofline``
    (``rows=False``: without the row counts, so the fits of one calibration's splits give the same message)."""
    return "; ".join(f"{r.device} {r.dtype}{f' ({r.framework})' if r.framework else ''}: "
                     f"{f'{int(r.rows)} rows, ' if rows else ''}up to {r.fastest_over_roofline:.2f}x faster than the "
                     "roofline" for r in groups.itertuples())
