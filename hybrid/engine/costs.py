"""Op cost models for the engine: anything with ``predict(table) -> DataFrame[time_us, ...]``.

The engine costs every op of an iteration (all ranks) in one call: it builds one table of the graph's unique op
rows, calls :meth:`OpCostModel.predict` once and scatters the times back onto the nodes.
"""

from __future__ import annotations

import inspect
from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd

from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import Catalog, default_catalog


@runtime_checkable
class OpCostModel(Protocol):
    """What the engine needs from a predictor (:class:`hybrid.corrections.predictor.HybridPredictor` fits)."""

    def predict(self, table: pd.DataFrame) -> pd.DataFrame:  # pragma: no cover - protocol
        """Same index as ``table``; at least a ``time_us`` column (microseconds)."""
        ...


class RooflineCostModel:
    """Pure analytical costs (:func:`hybrid.ops.roofline.roofline`) behind the :class:`OpCostModel` protocol."""

    def __init__(self, catalog: Catalog | None = None):
        self.catalog = catalog or default_catalog()

    def predict(self, table: pd.DataFrame) -> pd.DataFrame:
        from hybrid.ops.roofline import roofline

        out = roofline(table, self.catalog)
        out["roofline_us"] = out["time_us"]
        out["method"] = np.where(out["family"].astype(str) == "collective", "alpha-beta", "roofline")
        return out


class KernelTimeModel:
    """A cost model's GPU kernel times: its ``time_us`` less the host dispatch the prediction includes.

    Kernel models fitted on eager-framework timings (one op timed alone with CUDA events: host dispatch, launch
    and kernel) predict ``time_us`` = dispatch + kernel and say how much is dispatch (``host_us``, the fitted
    ``DispatchXGB.dispatch_us``). A workload that puts host work on its own host stream (the trace engine's
    launch nodes or traced host time) must cost only the kernel on the GPU stream, or it counts the dispatch
    twice. Kernel time = ``time_us - host_us``, never below the roofline (nor above the original prediction);
    the interval, if any, moves by the same ratio. Models that report no ``host_us`` pass through unchanged.

    With ``learned_dispatch`` (every host part taken off), the host-bound rows of a GPU the fit never saw, which
    the unseen-GPU envelope leaves to the trees while the host stays in, are held under its kernel bound
    (``HybridPredictor.predict(kernel_bound=True)``'s ``kernel_bound_us``, ``XGBCorrection.envelope_kernel_us``:
    the fitted GPUs' kernel time per roofline for the same row).
    """

    def __init__(self, model: OpCostModel, learned_dispatch: bool = False):
        self.model = model
        #: also take off the dispatch that pre-version-4 corrections learned inside eager-timed GPUs' times
        #: (``learned_host_us``). Every engine workload does (``hybrid.engine.simulate.simulate``, LLM inference
        #: under CUDA graphs, LLM training): the host stream carries each op's dispatch and launch, so a small op
        #: costs only its device time on the GPU stream (experiments/nlp_e2e, 2026-12-07: dev labels 4.7 -> 3.6%,
        #: held-out GPUs 8.1 -> 7.2%). Left in, those floors had hidden that the engine's launch model falls short
        #: of the host time of host-bound eager steps (experiments/trace_gpu's bf16 H100 steps: 14.6 -> 20.0%).
        self.learned_dispatch = bool(learned_dispatch)
        # a model whose ``predict`` takes ``host=True`` (HybridPredictor) adds ``host_us`` only when asked
        params = inspect.signature(model.predict).parameters
        self._ask_host = "host" in params
        # with the whole host part taken off, the host-bound rows of a GPU the fit never saw get the unseen-GPU
        # envelope's kernel bound too (``kernel_bound_us``)
        self._ask_bound = self.learned_dispatch and self._ask_host and "kernel_bound" in params

    @property
    def catalog(self) -> Catalog | None:
        cat = getattr(self.model, "catalog", None)
        return cat if isinstance(cat, Catalog) else None

    def predict(self, table: pd.DataFrame) -> pd.DataFrame:
        if self._ask_bound:
            out = self.model.predict(table, host=True, kernel_bound=True)  # type: ignore[call-arg]
        else:
            out = self.model.predict(table, host=True) if self._ask_host else self.model.predict(table)  # type: ignore[call-arg]
        if "host_us" not in out.columns or "time_us" not in out.columns:
            return out
        out = out.copy()
        time = pd.to_numeric(out["time_us"], errors="coerce").to_numpy(dtype=np.float64)
        host = np.nan_to_num(pd.to_numeric(out["host_us"], errors="coerce").to_numpy(dtype=np.float64))
        if self.learned_dispatch and "learned_host_us" in out.columns:
            host = host + np.nan_to_num(pd.to_numeric(out["learned_host_us"], errors="coerce")
                                        .to_numpy(dtype=np.float64))
        floor = (np.minimum(pd.to_numeric(out["roofline_us"], errors="coerce").to_numpy(dtype=np.float64), time)
                 if "roofline_us" in out.columns else np.zeros(len(time)))
        floor = np.nan_to_num(floor)
        kernel = np.where(host > 0, np.maximum(time - host, floor), time)
        if "kernel_bound_us" in out.columns:
            bound = pd.to_numeric(out["kernel_bound_us"], errors="coerce").to_numpy(dtype=np.float64)
            lower = np.isfinite(bound) & (bound < kernel)
            kernel = np.where(lower, np.maximum(bound, floor), kernel)
            out = out.drop(columns="kernel_bound_us")
        ratio = np.divide(kernel, time, out=np.ones_like(time), where=time > 0)
        out["time_us"] = kernel
        for c in ("time_us_low", "time_us_high"):
            if c in out.columns:
                # the interval moves with the time, and its low end stops at the kernel's floor (the roofline) as
                # the kernel time does: the predictor floored it there before the dispatch was taken off
                b = pd.to_numeric(out[c], errors="coerce").to_numpy(dtype=np.float64) * ratio
                out[c] = np.where(host > 0, np.maximum(b, np.minimum(floor, kernel)), b)
        out["host_us"] = 0.0
        if "learned_host_us" in out.columns:
            out = out.drop(columns="learned_host_us")
        return out


class SharedMemoryBandwidth:
    """Ranks that share one CPU's memory system: each streaming op gets its share of the socket's bandwidth.

    A CPU profile times every op in one process alone, so its memory-bound ops run at one core's stream bandwidth
    (the device's ``mem_bw``). When ``ranks`` processes of an iteration run on one host at once (the DLRM harness,
    DDP on CPU), their DRAM streams share the bandwidth the whole memory system sustains (``mem_bw_shared``,
    measured by ``hybrid profile`` with every core streaming). Mean-field: every rank runs the same kind of op at
    the same time (SPMD), so an op that pulls ``demand = DRAM bytes / time`` alone is slowed by
    ``max(1, ranks x demand / mem_bw_shared)``. Only traffic that leaves the last-level cache counts: an op whose
    bytes fit in the rank's share of it (``l2_cache / ranks``) is left alone, and so are latency-bound ops
    (random gathers, small kernels: low demand) and collectives (their curves were measured with every rank
    running). Devices without a measured ``mem_bw_shared`` (GPUs: each has its own memory) pass through.
    """

    def __init__(self, model: OpCostModel, ranks: int):
        self.model = model
        self.ranks = int(ranks)
        self._ask_host = "host" in inspect.signature(model.predict).parameters

    @property
    def catalog(self) -> Catalog | None:
        cat = getattr(self.model, "catalog", None)
        return cat if isinstance(cat, Catalog) else None

    def predict(self, table: pd.DataFrame, host: bool = False) -> pd.DataFrame:
        out = self.model.predict(table, host=host) if self._ask_host else self.model.predict(table)  # type: ignore[call-arg]
        if self.ranks < 2 or "device" not in table.columns or "time_us" not in out.columns:
            return out
        cat = model_catalog(self.model)
        devices = table["device"].astype(str).to_numpy()
        shared = {d: cat.device(d) for d in pd.unique(devices) if d in cat}
        shared = {k: v for k, v in shared.items() if v.kind == "cpu" and v.mem_bw_shared > 0}
        if not shared:
            return out
        from hybrid.ops.roofline import roofline

        rows = np.isin(devices, list(shared))
        base = roofline(integral_shapes(table[rows]), cat)
        nbytes = base["bytes"].to_numpy(dtype=np.float64)
        fam = base["family"].astype(str).to_numpy()
        codes, uniques = pd.factorize(devices[rows])
        bw = np.array([shared[d].mem_bw_shared for d in uniques])[codes]
        llc = np.array([shared[d].l2_cache for d in uniques])[codes] / self.ranks
        time = pd.to_numeric(out["time_us"], errors="coerce").to_numpy(dtype=np.float64).copy()
        t = time[rows]
        dram = np.where((fam != "collective") & (nbytes > llc), nbytes, 0.0)
        demand = np.divide(dram, t * 1e-6, out=np.zeros_like(t), where=t > 0)
        factor = np.maximum(1.0, self.ranks * demand / bw)
        out = out.copy()
        time[rows] = t * factor
        out["time_us"] = time
        for c in ("time_us_low", "time_us_high"):
            if c in out.columns:
                v = pd.to_numeric(out[c], errors="coerce").to_numpy(dtype=np.float64).copy()
                v[rows] = v[rows] * factor
                out[c] = v
        out["memory_sharing"] = 1.0
        out.loc[rows, "memory_sharing"] = factor
        return out


def default_cost_model(catalog: Catalog | None = None) -> OpCostModel:
    """``HybridPredictor.roofline_only(catalog)`` when the predictor package is present, else the roofline."""
    try:
        from hybrid.corrections.predictor import HybridPredictor
    except ImportError:
        return RooflineCostModel(catalog)
    return HybridPredictor.roofline_only(catalog)


def model_catalog(model: OpCostModel, fallback: Catalog | None = None) -> Catalog:
    """The catalog a cost model predicts with (bundle devices included), else ``fallback`` or the default."""
    cat = getattr(model, "catalog", None)
    if isinstance(cat, Catalog):
        return cat
    return fallback or default_catalog()


def integral_shapes(ops: pd.DataFrame) -> pd.DataFrame:
    """``ops`` with every integer column of the measurement schema rounded (at least 1 where present and not
    negative).

    Workload builders legitimately produce fractional shapes (a fused lookup's mean rows per table, a per-rank
    share of a message, an empty tensor's 0); predictors validate rows against the schema, where those columns are
    integers. A negative value is no such share but a wrong row (a task-graph op given ``m=-1``): it is left as it
    is, for the predictor's validation to refuse by row and column; it was priced as a size of 1.
    """
    from hybrid.data.schema import COLUMNS

    out = ops.copy()
    for c in COLUMNS:
        if c.kind == "int" and c.name in out.columns:
            v = pd.to_numeric(out[c.name], errors="coerce")
            rounded = np.where(v < 0, v, np.maximum(np.round(v.fillna(0.0)), 1.0))
            out[c.name] = np.where(v.notna(), rounded, np.nan)
    return out


def predict_times(model: OpCostModel, ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(``time_us``, ``method``) per op row from one ``predict`` call; rejects NaN/negative predictions."""
    times, _, _, method = predict_bounds(model, ops)
    return times, method


def predict_bounds(model: OpCostModel, ops: pd.DataFrame
                   ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray]:
    """(``time_us``, ``time_us_low``, ``time_us_high``, ``method``) per op row from one ``predict`` call. The
    interval columns are None when the model gives none (or not for every row: a roofline-only or uncalibrated
    predictor)."""
    return predict_bounds_flagged(model, ops)[:4]  # type: ignore[return-value]


def interval_note(ops: pd.DataFrame, borrowed: np.ndarray | None) -> str | None:
    """A note naming the op families whose 80% band was borrowed (``interval_calibrated`` False), or None."""
    if borrowed is None or not borrowed.any() or "op" not in ops.columns:
        return None
    from hybrid.ops.families import family_array

    fams = pd.Series(np.asarray(family_array(ops["op"]), dtype=object)[borrowed]).value_counts()
    which = ", ".join(f"{f} ({n} ops)" for f, n in fams.items())
    return (f"the interval borrows the band of another op family or model for {which}: the calibration had no "
            "measurement of their own, so how often it holds is not calibrated for them")


def predict_bounds_flagged(model: OpCostModel, ops: pd.DataFrame
                           ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray, np.ndarray | None]:
    """:func:`predict_bounds` plus, per op, whether its band was borrowed (``interval_calibrated`` False in the
    model's answer; None when the model says nothing about it)."""
    if len(ops) == 0:
        return np.zeros(0), None, None, np.zeros(0, dtype=object), None
    result = model.predict(integral_shapes(ops))
    if "time_us" not in result.columns:
        raise InvalidInputError(f"cost model {type(model).__name__} returned no 'time_us' column")
    times = pd.to_numeric(result["time_us"], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~(np.isfinite(times) & (times >= 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InvalidInputError(f"cost model gave time_us={times[i]!r} for op {ops.iloc[i].dropna().to_dict()}")
    method = (result["method"].astype(str).to_numpy(dtype=object) if "method" in result.columns
              else np.full(len(ops), type(model).__name__, dtype=object))
    low = high = None
    if "time_us_low" in result.columns and "time_us_high" in result.columns:
        lo = pd.to_numeric(result["time_us_low"], errors="coerce").to_numpy(dtype=np.float64)
        hi = pd.to_numeric(result["time_us_high"], errors="coerce").to_numpy(dtype=np.float64)
        if np.isfinite(lo).all() and np.isfinite(hi).all():
            low, high = np.maximum(lo, 0.0), np.maximum(hi, 0.0)
    borrowed = (~result["interval_calibrated"].to_numpy(dtype=bool)
                if "interval_calibrated" in result.columns and low is not None else None)
    return times, low, high, method, borrowed
