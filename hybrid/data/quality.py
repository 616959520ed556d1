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

from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import Catalog

#: A GEMM more than this many times faster than its datasheet dense peak for its dtype allows is physically
#: implausible; its (device, dtype, framework) group is left out of fits.
PEAK_TOLERANCE = 1.15
#: Op families whose roofline is a hard compute bound (dense matrix products).
CHECKED_FAMILIES = ("gemm",)

GROUP_COLUMNS = ("device", "dtype", "framework")


def implausible_rows(norm: pd.DataFrame, base: pd.DataFrame, catalog: Catalog,
                     tolerance: float = PEAK_TOLERANCE) -> tuple[np.ndarray, pd.DataFrame]:
    """(mask of the rows to leave out, their groups). A group (device, dtype, framework) of GPU GEMM rows is left
    out when one of its rows is more than ``tolerance`` x faster than its roofline; the groups frame has the
    row count and the fastest speed-up over the roofline of each, and is empty when every group is plausible.

    ``norm`` is a validated measurement table (``time_us``, ``device``, ``dtype``, optional ``framework``) and
    ``base`` its roofline frame (``family``, ``time_us``), as :meth:`HybridPredictor._prepare` returns them."""
    if tolerance <= 1:
        raise ValueError(f"tolerance must be > 1, got {tolerance}")
    none = (np.zeros(len(norm), dtype=bool), pd.DataFrame(columns=[*GROUP_COLUMNS, "rows", "fastest_over_roofline"]))
    if len(norm) == 0 or "time_us" not in norm.columns:
        return none
    checked = (np.isin(base["family"].astype(str).to_numpy(), CHECKED_FAMILIES)
               & catalog.device_column(norm["device"], lambda d: d.kind == "gpu", False).astype(bool))
    if not checked.any():
        return none
    measured = pd.to_numeric(norm["time_us"], errors="coerce").to_numpy(dtype=np.float64)
    # the bound is the datasheet compute peak: the roofline's per-kernel latency is an estimate, not a bound (a
    # kernel-timed tiny GEMM, 2.9 us on an H100 by CUPTI, runs under the catalog's 4 us), and its DRAM time is no
    # bound for operands a repeated benchmark keeps in cache
    col = "compute_us" if "compute_us" in base.columns else "time_us"
    roof = pd.to_numeric(base[col], errors="coerce").to_numpy(dtype=np.float64)
    frame = pd.DataFrame({"device": norm["device"].astype(str).to_numpy(), "dtype": norm["dtype"].astype(str).to_numpy(),
                          "framework": (norm["framework"].astype("string").fillna("").astype(str).to_numpy()
                                        if "framework" in norm.columns else np.full(len(norm), "")),
                          "speedup": np.divide(roof, measured, out=np.zeros_like(roof), where=measured > 0)})
    g = frame[checked].groupby(list(GROUP_COLUMNS), sort=True)["speedup"].agg(rows="size", fastest_over_roofline="max")
    bad = g[g["fastest_over_roofline"] > tolerance].reset_index()
    if len(bad) == 0:
        return none
    keys = pd.MultiIndex.from_frame(frame[list(GROUP_COLUMNS)])
    return checked & keys.isin(pd.MultiIndex.from_frame(bad[list(GROUP_COLUMNS)])), bad


#: A group this many times faster than the datasheet allows more likely has its times in the wrong unit (ms or s
#: where ``time_us`` holds microseconds) than a wrong FLOP count: the message says so.
UNIT_HINT_FACTOR = 20.0


def _factor(x: float, decimals: int = 2) -> str:
    """A speed-up factor for a message: ``1.32x``; beyond 10^4 in powers of ten (``3e+302x``: a time of 1e-300 us
    printed hundreds of digits)."""
    return f"{x:.{decimals}f}x" if x < 1e4 else f"{x:.0e}x"


def describe(groups: pd.DataFrame, rows: bool = True) -> str:
    """The groups in one line, e.g. ``H100-SXM fp8 (xla): 1125 rows, up to 1.34x faster than the roofline``
    (``rows=False``: without the row counts, so the fits of one calibration's splits give the same message); a
    group over :data:`UNIT_HINT_FACTOR` x asks whether its times are in another unit."""
    text = "; ".join(f"{r.device} {r.dtype}{f' ({r.framework})' if r.framework else ''}: "
                     f"{f'{int(r.rows)} rows, ' if rows else ''}up to {_factor(r.fastest_over_roofline)} faster than the "
                     "roofline" for r in groups.itertuples())
    if len(groups) and float(groups["fastest_over_roofline"].max()) > UNIT_HINT_FACTOR:
        text += " (times in milliseconds or seconds? time_us holds microseconds)"
    return text


def nothing_plausible(groups: pd.DataFrame) -> InvalidInputError:
    """The refusal of a training table whose every row is such a GEMM (``groups`` as :func:`implausible_rows` gives
    them): the same words whether the fit or a calibration run finds it."""
    return InvalidInputError("every training row is a GEMM faster than its device's datasheet peak ("
                             f"{describe(groups)}); check the device names, dtypes and units")


#: A collective more than this many times faster than its alpha-beta estimate from the catalog's link bandwidths
#: is taken for times in another unit (or a wrong system): on every public collective source the fastest row is
#: 4.1x faster than that estimate (Vidur's pairwise NVLink), most are slower, while a table in milliseconds
#: is ~1000x faster.
COLLECTIVE_TOLERANCE = UNIT_HINT_FACTOR


def implausible_collectives(norm: pd.DataFrame, base: pd.DataFrame,
                            tolerance: float = COLLECTIVE_TOLERANCE) -> tuple[np.ndarray, pd.DataFrame]:
    """(mask of collective rows to leave out, their groups): a group (system, or device where no system is given,
    collective and ``source``: one log's section) is left out when one of its rows is more than ``tolerance`` x
    faster than its alpha-beta estimate; the groups frame has ``group``, ``op``, ``source``, ``rows`` and
    ``fastest_over_roofline``. Arguments as :func:`implausible_rows`."""
    keys = ["group", "op", "source"]
    none = (np.zeros(len(norm), dtype=bool), pd.DataFrame(columns=[*keys, "rows", "fastest_over_roofline"]))
    if len(norm) == 0 or "time_us" not in norm.columns:
        return none
    checked = np.isin(base["family"].astype(str).to_numpy(), ("collective",))
    if not checked.any():
        return none
    measured = pd.to_numeric(norm["time_us"], errors="coerce").to_numpy(dtype=np.float64)
    roof = pd.to_numeric(base["time_us"], errors="coerce").to_numpy(dtype=np.float64)
    device = norm["device"].astype(str).to_numpy()
    if "system" in norm.columns:
        system = norm["system"].astype("string").fillna("").astype(str).to_numpy()
        group = np.where(system != "", system, device)
    else:
        group = device
    source = (norm["source"].astype("string").fillna("").astype(str).to_numpy() if "source" in norm.columns
              else np.full(len(norm), ""))
    frame = pd.DataFrame({"group": group, "op": norm["op"].astype(str).to_numpy(), "source": source,
                          "speedup": np.divide(roof, measured, out=np.zeros_like(roof), where=measured > 0)})
    g = frame[checked].groupby(keys, sort=True)["speedup"].agg(rows="size", fastest_over_roofline="max")
    bad = g[g["fastest_over_roofline"] > tolerance].reset_index()
    if len(bad) == 0:
        return none
    index = pd.MultiIndex.from_frame(frame[keys])
    return checked & index.isin(pd.MultiIndex.from_frame(bad[keys])), bad


def describe_collectives(groups: pd.DataFrame) -> str:
    """The groups of :func:`implausible_collectives` in one line (per system and collective: rows, sources, the
    fastest speed-up), with the unit question."""
    per = groups.groupby(["group", "op"], sort=True).agg(rows=("rows", "sum"), sources=("source", "nunique"),
                                                        fastest=("fastest_over_roofline", "max")).reset_index()
    return ("; ".join(f"{r.group} {r.op}: {int(r.rows)} rows"
                      + (f" of {int(r.sources)} source(s)" if r.sources > 1 else "")
                      + f", up to {_factor(r.fastest, 0)} faster than the alpha-beta estimate"
                      for r in per.itertuples())
            + " (times in milliseconds or seconds? time_us holds microseconds; or the wrong --system)")


def implausible_findings(norm: pd.DataFrame, base: pd.DataFrame,
                         catalog: Catalog) -> dict[str, tuple[dict[str, object], str]]:
    """Both plausibility checks of one measurement table, worded once for every command that says them
    (``data validate``, ``evaluate``, ``report --table``): ``{key: (JSON value, sentence)}`` with the keys
    ``implausible`` (:func:`implausible_rows`) and ``implausible_collectives`` (:func:`implausible_collectives`)
    always present; the value is ``{"rows": n, "groups": [...]}`` and the sentence is empty when ``n`` is 0.
    Arguments as :func:`implausible_rows`."""
    total = len(norm)
    drop, bad = implausible_rows(norm, base, catalog)
    coll, bad_coll = implausible_collectives(norm, base)
    n, n_coll = int(drop.sum()), int(coll.sum())
    return {
        "implausible": ({"rows": n, "groups": bad.to_dict("records")},
                        f"{n:,} of {total:,} rows are GEMMs faster than the datasheet peak allows, which every fit "
                        f"leaves out: {describe(bad)}" if n else ""),
        "implausible_collectives": ({"rows": n_coll, "groups": bad_coll.to_dict("records")},
                                    f"{n_coll:,} of {total:,} rows are collectives far faster than the fabric "
                                    f"allows, which calibration leaves out: {describe_collectives(bad_coll)}"
                                    if n_coll else ""),
    }


def failed_validation(table: pd.DataFrame) -> np.ndarray:
    """Rows whose benchmark reported wrong results (nccl-tests ``#wrong`` > 0): their times measured a broken
    run, so no fit uses them and no score counts them."""
    if "wrong" not in table.columns or not len(table):
        return np.zeros(len(table), dtype=bool)
    return pd.to_numeric(table["wrong"], errors="coerce").fillna(0.0).to_numpy(dtype=np.float64) > 0


#: Columns that say how or where a row was measured, not what was measured: left out of the configuration key of
#: :func:`repeated_configs` (two runs of one shape from two files, or with another library build, measure the same
#: thing for the fits, whose features none of these are).
NOT_CONFIG_COLUMNS = ("time_us", "time_us_std", "time_us_min", "time_us_max", "repeats", "wrong", "source",
                      "framework_version", "library_version", "kernel_name")

#: Columns of :func:`repeated_configs`'s frame (one row per device and op).
REPEATED_COLUMNS = ("device", "op", "configs", "rows", "differing", "spread_median", "spread_max")


def repeated_configs(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Configurations measured more than once: rows with the same device, system, framework, op, dtype, variant,
    direction and shape (every canonical column but :data:`NOT_CONFIG_COLUMNS`; missing values equal).

    Returns ``(groups, by_op)``: ``groups`` has one row per repeated configuration, its key columns then
    ``measured`` (its rows), ``time_min_us``, ``time_max_us`` and ``spread`` (max / min time, 1 for identical
    copies), widest spread first;
    ``by_op`` (:data:`REPEATED_COLUMNS`) per device and op: the repeated configurations, their rows, how many of
    them differ in time, and the median and largest spread among those. Both are empty when nothing repeats.

    Nothing is dropped or averaged: a repeated measurement is a sample of the same configuration, and every fit
    takes it as one (the kernel models fit each row; the collective curves take the median per size)."""
    from hybrid.data.schema import COLUMN_BY_NAME

    empty = (pd.DataFrame(columns=["measured", "time_min_us", "time_max_us", "spread"]),
             pd.DataFrame(columns=list(REPEATED_COLUMNS)))
    if len(table) < 2 or "time_us" not in table.columns or "op" not in table.columns:
        return empty
    key = [c for c in table.columns if c in COLUMN_BY_NAME and c not in NOT_CONFIG_COLUMNS]
    # one code per configuration: each column's codes (missing values one code of their own) folded in turn
    codes = np.zeros(len(table), dtype=np.int64)
    for c in key:
        col, uniques = pd.factorize(table[c], use_na_sentinel=False)
        codes = pd.factorize(codes * (len(uniques) + 1) + col)[0]
    counts = np.bincount(codes)
    repeated = counts[codes] > 1
    if not repeated.any():
        return empty
    t = pd.to_numeric(table["time_us"], errors="coerce").to_numpy(dtype=np.float64)
    sub = pd.DataFrame({"code": codes[repeated], "t": t[repeated]})
    g = sub.groupby("code", sort=True)["t"].agg(measured="size", time_min_us="min", time_max_us="max")
    g["spread"] = np.divide(g["time_max_us"].to_numpy(), g["time_min_us"].to_numpy(),
                            out=np.full(len(g), np.nan), where=g["time_min_us"].to_numpy() > 0)
    first = pd.Series(np.arange(len(table)))[repeated].groupby(codes[repeated]).first()
    groups = pd.concat([table[key].iloc[first.loc[g.index].to_numpy()].reset_index(drop=True),
                        g.reset_index(drop=True)], axis=1)
    groups = groups.sort_values(["spread", "measured"], ascending=False, kind="stable").reset_index(drop=True)
    differing = groups["time_max_us"] > groups["time_min_us"]
    frame = pd.DataFrame({"device": groups["device"].astype(str), "op": groups["op"].astype(str),
                          "rows": groups["measured"], "differing": differing,
                          "spread": groups["spread"].where(differing)})
    by_op = frame.groupby(["device", "op"], sort=True).agg(
        configs=("rows", "size"), rows=("rows", "sum"), differing=("differing", "sum"),
        spread_median=("spread", "median"), spread_max=("spread", "max")).reset_index()
    return groups, by_op[list(REPEATED_COLUMNS)]


def describe_repeats(by_op: pd.DataFrame, limit: int = 3) -> str:
    """:func:`repeated_configs`'s ``by_op`` in one line: configurations and rows in all, how many differ in time,
    and the widest spreads (device, op, max / min time); '' when nothing repeats."""
    if len(by_op) == 0:
        return ""
    configs, rows, differing = int(by_op["configs"].sum()), int(by_op["rows"].sum()), int(by_op["differing"].sum())
    text = (f"{configs:,} configuration(s) measured more than once ({rows:,} rows), {differing:,} of them with "
            "different times")
    wide = by_op[by_op["differing"] > 0].sort_values("spread_max", ascending=False, kind="stable").head(limit)
    if len(wide):
        text += " (widest max/min: " + ", ".join(
            f"{r.device} {r.op} {r.spread_max:.3f}x, median {r.spread_median:.3f}x over {int(r.differing):,}"
            for r in wide.itertuples()) + ")"
    return text
