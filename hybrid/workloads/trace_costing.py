"""Costing a traced step on a target: what each node of the trace graph costs there, and the prediction.

Retargeting decisions (used by :func:`hybrid.workloads.trace_graph.build_trace_graph`):

* **same device** (:func:`is_same_device`): a CPU trace and a CPU target, or a GPU trace whose device name
  resolves to the target device. Only then is the trace's own time a measurement of the target: unmodelled ops
  are costed at their traced time (elsewhere at zero, and listed either way).
* **host time** (:class:`HostCosting`): ``"trace"`` keeps the traced host time (gaps, views, each op's own
  dispatch + launch on the host) as the target's host time, less what recording cost where the trace says
  (:mod:`hybrid.data.traces.overhead`: per recorded event, input and launch, measured when the trace was
  recorded; taken off each op's own events, and off the gaps for the events of the ops they are made of), and
  deflated by ``host_scale`` (the CPU-time share of a step traced on a loaded machine); ``"model"`` drops it and
  lets the engine's host model stand for the target's host, op by op (each recorded host op
  ``Overheads.host_op_us``, each kernel launch ``kernel_launch_us``; a CPU or meta-device trace predicted for a
  GPU). ``"auto"``: ``"trace"`` for a CPU trace on its own CPU and for a GPU trace that says what recording cost
  (``hybrid trace record``), else ``"model"``: a GPU trace's host ran under the profiler, on the project's bf16
  H100 / H200 steps 3-4x its untraced time, and kept as is it predicted them 92% / 255% off against 15% / 20%
  dropped (``experiments/trace_gpu``).

Costed ops carry a canonical op row for the target device, predicted in one batch by any
:class:`~hybrid.engine.costs.OpCostModel` (:func:`predict_trace`); :func:`measured_durations` gives every node
its traced time instead, which re-simulates the traced step (a check of the graph, not of the cost model).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hybrid.data.traces.overhead import ProfilerOverhead, input_counts, overhead_of
from hybrid.data.traces.parse import RankTrace
from hybrid.engine.form_error import e2e_interval
from hybrid.errors import DtypeFallbackWarning, InvalidInputError
from hybrid.hardware.catalog import Catalog
from hybrid.workloads.dlrm_graph import Target

if TYPE_CHECKING:
    from hybrid.workloads.trace_graph import TraceIteration

HOST_MODES = ("auto", "trace", "model")
#: Host ops (ATen ops) a PyTorch op records on a GPU, itself included (its nested dispatches: output allocation,
#: views, the composite's own calls): 2.50 on average over the project's 11 H100 / H200 traces (2.3-3.2 per trace).
#: The engine's host model (``host="model"``) charges each unit of a CPU or meta-device trace this many instead of
#: what it recorded: such a trace records its own device's kernels and decompositions inside the op (a meta-device
#: ``native_layer_norm_backward`` records 91 ops, 4 on an H100; BERT-large's training step 6.8 per op against 2.8).
GPU_HOST_OPS_PER_UNIT = 2.5
#: An op (or gap) keeps at least this share of its traced host time when the recording cost is taken off: the
#: cost is measured on small op loops, and an op's own work never vanishes.
MIN_HOST_SHARE = 0.05


def traced_gpu(trace: RankTrace, catalog: Catalog) -> str | None:
    """Catalog key of the GPU a trace names (``deviceProperties``); None without a name or for one the catalog
    does not know."""
    if not trace.device_name:
        return None
    return catalog.resolve_device(trace.device_name.replace("NVIDIA ", "", 1), missing_ok=True)


def is_same_device(traces: list[RankTrace], target: Target, catalog: Catalog) -> bool:
    """Whether ``target`` is the hardware the traces were recorded on (see the module docstring)."""
    dev = {t.device for t in traces}
    if dev == {"cpu"}:
        return target.device.kind == "cpu"
    if dev == {"cuda"}:
        if len({t.device_name for t in traces}) != 1:
            return False
        key = traced_gpu(traces[0], catalog)
        return key is not None and key == target.device.key
    return False


def kind_conflict(traces: list[RankTrace], target: Target) -> str | None:
    """The first rank traced on another kind of hardware than ``target`` (a CPU trace and a GPU target or the
    reverse), said in words; None where every rank's is the target's kind (the meta device has no kind)."""
    kinds = {"cpu": "a CPU", "cuda": "a GPU"}
    for t in traces:
        if t.device in kinds and target.device.kind != ("cpu" if t.device == "cpu" else "gpu"):
            return (f"rank {t.rank} was traced on {kinds[t.device]} and the target {target.device.key} is "
                    f"{'a CPU' if target.device.kind == 'cpu' else 'a GPU'}")
    return None


def same_device_conflict(traces: list[RankTrace], target: Target, catalog: Catalog) -> str | None:
    """Why ``target`` cannot be the hardware the traces were recorded on (None where it can be): a CPU trace and a
    GPU target or the reverse (:func:`kind_conflict`), or a GPU trace whose device name the catalog resolves to
    another device. A GPU trace that names no GPU, or one the catalog does not know, may be declared the target's
    (``same_device=True``)."""
    kind = kind_conflict(traces, target)
    if kind:
        return kind
    for t in traces:
        key = traced_gpu(t, catalog) if t.device == "cuda" else None
        if key is not None and key != target.device.key:
            return f"rank {t.rank} was traced on {key} ({t.device_name}), not on the target {target.device.key}"
    return None


@dataclass(frozen=True)
class HostCosting:
    """How traced host and unmodelled time is costed on the target (see the module docstring)."""

    same_device: bool
    keep_host: bool
    scales: tuple[float, ...]  # host_scale per rank
    #: recording overhead per rank (None: the trace does not say; nothing is taken off)
    overheads: tuple[ProfilerOverhead | None, ...] = ()
    #: share of each rank's traced host gaps left once the recording cost of the events inside them is off
    gap_shares: tuple[float, ...] = ()
    #: recording cost (us) of what each rank's units recorded, taken off their traced host times
    unit_costs_us: tuple[float, ...] = ()

    @classmethod
    def resolve(cls, traces: list[RankTrace], same: bool, host: str, host_scale: float | list[float]
                ) -> tuple[HostCosting, str]:
        """The costing for ``traces`` and the resolved host mode (``"trace"`` or ``"model"``)."""
        if host not in HOST_MODES:
            raise InvalidInputError(f"host must be auto, trace or model, got {host!r}")
        scales = [float(host_scale)] * len(traces) if np.isscalar(host_scale) else [float(x) for x in host_scale]
        if len(scales) != len(traces) or not all(np.isfinite(x) and 0 < x <= 1.5 for x in scales):
            raise InvalidInputError(f"host_scale must be one value in (0, 1.5] or one per rank, got {host_scale!r}")
        overheads = tuple(overhead_of(t.meta) for t in traces)
        if host == "auto":
            # a GPU trace's host ran under the profiler (3-4x its untraced time on the project's bf16 H100 / H200
            # steps): kept only where the trace says what recording cost, so that it can be taken off
            gpu = all(t.device == "cuda" for t in traces)
            host = "trace" if (gpu and all(o is not None for o in overheads)) or (same and not gpu) else "model"
        return cls(same, host == "trace", tuple(scales), overheads), host

    def with_gaps(self, traces: list[RankTrace], scheds: list[pd.DataFrame]) -> HostCosting:
        """This costing with each rank's gap share: the recording cost of the rank's events that are not inside a
        unit (those of the annotations, autograd nodes and composite ops the units are cut from, whose own time
        is the gaps) taken off the rank's traced gap time."""
        shares, in_units = [], []
        for r, (tr, s) in enumerate(zip(traces, scheds, strict=True)):
            ovh = self.overheads[r] if r < len(self.overheads) else None
            counts = [s[c].to_numpy(dtype=np.float64) if c in s.columns else np.zeros(len(s))
                      for c in ("n_events", "n_inputs", "n_launch")]
            in_units.append(float(np.sum(ovh.cost_us(*counts))) if ovh is not None else 0.0)
            gaps = float(np.nansum(np.clip(s["gap_us"].to_numpy(dtype=np.float64)
                                           - s.get("wait_us", pd.Series(0.0, index=s.index)).fillna(0.0)
                                           .to_numpy(dtype=np.float64), 0.0, None))
                         + float(s.attrs.get("trailing_gap_us", 0.0)))
            if ovh is None or not tr.has_times or gaps <= 0:
                shares.append(1.0)
                continue
            outside = ovh.cost_us(max(len(tr.ops) - counts[0].sum(), 0.0),
                                  max(float(input_counts(tr.ops["dims"].to_numpy()).sum()) - counts[1].sum(), 0.0),
                                  max(len(tr.kernels) - counts[2].sum(), 0.0))
            shares.append(float(np.clip(1.0 - outside / gaps, MIN_HOST_SHARE, 1.0)))
        return HostCosting(self.same_device, self.keep_host, self.scales, self.overheads, tuple(shares),
                           tuple(in_units))

    def recording_us(self, rank: int, events: float = 0.0, inputs: float = 0.0, launches: float = 0.0) -> float:
        """What recording ``events`` / ``inputs`` / ``launches`` added to the rank's traced host time (0 when the
        trace does not say)."""
        ovh = self.overheads[rank] if rank < len(self.overheads) else None
        return 0.0 if ovh is None else float(ovh.cost_us(events, inputs, launches))

    def _untraced(self, rank: int, traced_us: float, events: float, inputs: float, launches: float) -> float:
        cost = self.recording_us(rank, events, inputs, launches)
        return max(float(traced_us) - cost, float(traced_us) * MIN_HOST_SHARE) if cost > 0 else float(traced_us)

    def host_us(self, rank: int, traced_us: float, events: float = 0.0, inputs: float = 0.0,
                launches: float = 0.0) -> float:
        """Predicted host time of traced host work (views, an op's dispatch + launch): the traced time less what
        recording its ``events`` (inputs, launches) cost, deflated by the rank's ``host_scale``, when the traced
        host is kept; else 0 (the engine's overheads)."""
        if not self.keep_host or not np.isfinite(traced_us):
            return 0.0
        return self._untraced(rank, traced_us, events, inputs, launches) * self.scales[rank]

    def gap_us(self, rank: int, traced_us: float) -> float:
        """Predicted host time of a traced gap (Python, autograd, composite ops' own work): its traced time times
        the rank's gap share (:meth:`with_gaps`) and ``host_scale``; 0 when the traced host is not kept."""
        if not self.keep_host or not np.isfinite(traced_us):
            return 0.0
        share = self.gap_shares[rank] if rank < len(self.gap_shares) else 1.0
        return float(traced_us) * share * self.scales[rank]

    def unmodelled_us(self, rank: int, traced_us: float, events: float = 0.0, inputs: float = 0.0,
                      launches: float = 0.0) -> float:
        """Predicted time of an op no family covers: its traced time (less its recording cost) on the traced
        device, else 0."""
        if not self.same_device or not np.isfinite(traced_us):
            return 0.0
        return self._untraced(rank, traced_us, events, inputs, launches) * self.scales[rank]


@dataclass
class TracePrediction:
    """A predicted (and, where the trace has times, re-simulated with measured times) traced step."""

    iteration: TraceIteration
    predicted: Any  # SimResult with the cost model's op times
    measured: Any | None  # SimResult with every node at its traced time (None without times)
    model_name: str = ""
    #: op families the cost model was fitted on (None: not a fitted model, or a save that did not record them)
    families_seen: tuple[str, ...] | None = None
    #: op family -> device -> dtypes of the cost model's training rows (None: not recorded; see
    #: :attr:`hybrid.corrections.predictor.HybridPredictor.family_dtypes`)
    family_dtypes: dict[str, dict[str, list[str]]] | None = None

    @property
    def predicted_us(self) -> float:
        return float(self.predicted.iteration_us)

    @property
    def breakdown_rank(self) -> int:
        """The rank the per-family breakdown is of: the one whose last node finishes latest in the prediction (the
        rank that sets the predicted step time; the lowest such rank on a tie)."""
        g = self.predicted.graph
        n = g.n_real
        ranks = np.asarray(g.rank[:n])
        if g.n_ranks == 1 or n == 0:
            return 0
        ends = np.full(g.n_ranks, -np.inf)
        np.maximum.at(ends, ranks, np.asarray(self.predicted.finish[:n], dtype=np.float64))
        return int(np.argmax(ends))

    def breakdown(self, rank: int | None = None) -> pd.DataFrame:
        """Predicted (and measured) time per breakdown label summed over the nodes of ONE rank, plus node counts:
        ``rank`` (default :attr:`breakdown_rank`, the rank that finishes last), so that it compares with the
        predicted step time; ``rank=-1`` sums every rank (a job's total device time). Host and device streams
        overlap, so the labels can add up to more than the step."""
        g = self.predicted.graph
        n = g.n_real
        if rank is None:
            rank = self.breakdown_rank
        elif rank != -1 and not 0 <= rank < g.n_ranks:
            raise InvalidInputError(f"rank {rank} out of range for {g.n_ranks} rank(s)")
        lab = np.asarray(self.iteration.node_label + [""] * (len(self.predicted.durations)
                                                               - len(self.iteration.node_label)), dtype=object)
        keep = np.ones(n, dtype=bool) if rank == -1 else np.asarray(g.rank[:n]) == rank
        df = pd.DataFrame({"label": lab[:n][keep], "predicted_us": self.predicted.durations[:n][keep]})
        if self.measured is not None:
            df["measured_us"] = self.measured.durations[:n][keep]
        out = df.groupby("label").agg(nodes=("predicted_us", "size"), predicted_us=("predicted_us", "sum"),
                                      **({"measured_us": ("measured_us", "sum")} if self.measured is not None
                                         else {}))
        empty = (out[["predicted_us"] + (["measured_us"] if self.measured is not None else [])] == 0).all(axis=1)
        out = out[~empty]
        return out.sort_values("predicted_us", ascending=False).reset_index()

    def summary(self) -> dict[str, Any]:
        it = self.iteration
        meas = it.measured_step_us
        out: dict[str, Any] = {
            "target": it.info["target"], "device": it.info["device"], "model": self.model_name,
            "ranks": it.graph.n_ranks, "nodes": int(self.predicted.graph.n_real),
            "predicted_ms": self.predicted_us / 1e3,
            "traced_device": it.info["traced_device"], "same_device": it.same_device,
        }
        if "collective_system" in it.info:  # the system (or generic node) the step's collectives are priced on
            out["collective_system"] = it.info["collective_system"]
        out.update(self.interval())
        out["recording_overhead"] = it.info.get("recording_overhead", {"measured": False})
        if "fp32_precision" in it.info:
            out["fp32_precision"] = it.info["fp32_precision"]
        ma = it.info.get("math_attention", {})
        if ma.get("ops") or ma.get("casts") or ma.get("fp32_ops"):
            out["math_attention"] = ma
        fallbacks = self.dtype_fallbacks()
        if fallbacks:
            out["dtype_fallbacks"] = fallbacks
        if it.same_device and np.isfinite(meas):
            out["measured_ms"] = meas / 1e3
            out["error_pct"] = (self.predicted_us / meas - 1.0) * 100.0
        untraced = self.untraced_us()
        if untraced is not None:
            out["untraced_ms"] = untraced / 1e3
            out["untraced_error_pct"] = (self.predicted_us / untraced - 1.0) * 100.0
        if self.measured is not None and it.same_device:
            out["resimulated_measured_ms"] = float(self.measured.iteration_us) / 1e3
        unm = it.unmodelled()
        out["unmodelled"] = {"ops": int(unm["count"].sum()) if len(unm) else 0,
                             "measured_ms": float(unm["measured_us"].sum()) / 1e3 if len(unm) else 0.0,
                             "costed_as": ("trace time" if it.same_device else "not costed (0)"),
                             "by_name": unm.head(20).to_dict(orient="records")}
        own = it.own_time()
        # the time unmapped ATen ops spent outside the costed ops they call: in the host gaps, never dropped unsaid
        out["unmodelled"]["own_time"] = {
            "ops": int(own["count"].sum()) if len(own) else 0,
            "measured_ms": float(own["own_us"].sum()) / 1e3 if len(own) else 0.0,
            "costed_as": ("trace time (host gaps)" if it.info.get("host") == "trace"
                          # a GPU target's host model charges each of them as one host op, as every op recorded
                          else "host model (one host op each; traced host time dropped)"
                          if it.target.device.kind != "cpu"
                          else "not costed (traced host time dropped)"),
            "by_name": [{"name": str(r["name"]), "count": int(r["count"]), "measured_ms": float(r["own_us"]) / 1e3}
                        for _, r in own.head(20).iterrows()]}
        rank = self.breakdown_rank
        bd = self.breakdown(rank)
        # per family on one rank (the one that finishes last), comparable with the step time; every rank's sum
        # would read as ranks x the step
        out["breakdown_rank"] = rank
        out["breakdown_ms"] = {str(r["label"]): round(float(r["predicted_us"]) / 1e3, 6) for _, r in bd.iterrows()}
        if self.measured is not None and it.same_device:
            out["breakdown_measured_ms"] = {str(r["label"]): round(float(r["measured_us"]) / 1e3, 6)
                                            for _, r in bd.iterrows()}
        out["critical_path_ms"] = {k: v / 1e3 for k, v in self.predicted.critical_path_summary().items()}
        unmeasured = self.unmeasured_families()
        if unmeasured:
            out["unmeasured_families"] = unmeasured
        memory = self.memory()
        if memory:
            out["memory"] = memory
        return out

    def untraced_us(self) -> float | None:
        """The step as the program ran it without the profiler, on the traced hardware: the slowest rank's median
        of the untraced calls :func:`hybrid.data.traces.record.record_step` timed before the recorded one (the
        traced step is longer by what recording costs, for a small model several times the step); None on another
        device or where a trace does not carry it."""
        from hybrid.data.traces.record import untraced_step_us

        it = self.iteration
        if not it.same_device or not it.traces:
            return None
        times = [untraced_step_us(t.meta) for t in it.traces]
        return None if any(t is None for t in times) else float(max(times))  # type: ignore[type-var]

    def memory(self) -> dict[str, Any]:
        """The traced step's tensor memory (measured when it was recorded, :mod:`hybrid.data.traces.memory`) against
        the target device's capacity, for the rank with the largest peak; empty when no trace carries it, only a
        ``note`` when the graph splits the traced tensors over ranks (tensor / pipeline parallelism)."""
        from hybrid.data.traces.memory import memory_of, memory_verdict

        # one per traced file: a ``--dp`` job's ranks are copies of one traced process (its one measurement)
        measured = {t.path: m for t in self.iteration.traces if (m := memory_of(t.meta)) is not None}
        if not measured:
            return {}
        if not self.iteration.info.get("memory_as_traced", True):
            return {"note": "not estimated for a job that splits the traced step over ranks (tensor or pipeline "
                            "parallelism): the memory measured when recording is the whole traced process's"}
        worst = max(measured.values(), key=lambda m: m.peak_bytes)
        return {**memory_verdict(worst, self.iteration.target.device.mem_capacity), "ranks_measured": len(measured)}

    @property
    def workload_kind(self) -> str:
        """``training`` when the traced step runs a backward pass or an optimizer, else ``inference``."""
        phases = set(self.iteration.units["phase"].astype(str)) if "phase" in self.iteration.units else set()
        return "training" if phases & {"backward", "optimizer"} else "inference"

    def interval(self) -> dict[str, Any]:
        """With a calibrated cost model: ``predicted_ms_low`` / ``_high`` (every op at the low / high end of its 80%
        interval) and the end-to-end interval ``predicted_ms_e2e_low`` / ``_high`` (widened by the packaged
        form-error margin of the step's kind, :mod:`hybrid.engine.form_error`); empty otherwise."""
        lo, hi = float(self.predicted.iteration_us_low), float(self.predicted.iteration_us_high)
        if not (np.isfinite(lo) and np.isfinite(hi)):
            return {}
        out: dict[str, Any] = {"predicted_ms_low": lo / 1e3, "predicted_ms_high": hi / 1e3,
                               "workload_kind": self.workload_kind}
        point = {"predicted_ms": float(self.predicted.iteration_us) / 1e3}  # kept inside a narrowed interval
        return {**out, **e2e_interval({**out, **point}, self.workload_kind)}

    def unmeasured_families(self) -> dict[str, int]:
        """Costed ops (per rank-0-and-others unit count) whose op family has no row in the cost model's training
        data: their corrections extrapolate from other op kinds, or fall back to the roofline. Empty when the
        model did not record what it was fitted on."""
        if not self.families_seen:
            return {}
        from hybrid.ops.families import OP_TO_FAMILY

        u = self.iteration.units
        ops = pd.Series([str(r.get("op")) for r in u.loc[u["kind"] == "op", "row"] if isinstance(r, dict)],
                        dtype=object)
        fams = ops.map(OP_TO_FAMILY)  # one vectorised lookup; an op outside the families maps to NaN, skipped
        counts = fams[fams.notna() & ~fams.isin(self.families_seen)].value_counts()
        return {str(k): int(v) for k, v in counts.items()}


    def dtype_fallbacks(self) -> list[dict[str, Any]]:
        """Attention ops priced in, or from measurements of, another dtype than the traced call's, each with a
        ``note`` (:func:`predict_trace` warns with it, :class:`~hybrid.errors.DtypeFallbackWarning`):

        * a 16-bit SDPA's math fallback traced on a CPU (or the meta device) and predicted for a CPU: its ops are
          priced in fp32, as traced (the CPU's fallback upcasts), ``priced_in``;
        * attention ops in a dtype the cost model has no attention row of on the target device (or, for a device
          it never measured attention on, on any device): priced from its rows of the other dtypes
          (``measured_in``), e.g. a CPU's bf16 flash attention from a quick profile's fp32 rows.

        Op counts over all ranks."""
        it = self.iteration
        device = str(it.info.get("device", ""))
        out: list[dict[str, Any]] = []
        ma = it.info.get("math_attention", {})
        if ma.get("fp32_ops"):
            d, n = ma.get("dtype") or "16-bit", int(ma["fp32_ops"])
            out.append({"family": "attention", "kind": "math fallback", "dtype": d, "ops": n, "priced_in": "fp32",
                        "note": f"{n} op(s) of a {d} attention's SDPA math fallback priced in fp32 on {device}, as "
                                f"traced: the CPU's fallback upcasts {d} to fp32 (on a CPU whose PyTorch runs the "
                                f"fused {d} kernel instead, as it does without dropout, the step would differ)"})
        per_device = (self.family_dtypes or {}).get("attention")
        if per_device:
            from hybrid.units import normalize_dtype

            u = it.units
            rows = [r for r in u.loc[u["kind"] == "op", "row"] if isinstance(r, dict) and r.get("op") == "attention"]
            measured = per_device.get(device) or sorted({d for ds in per_device.values() for d in ds})
            where = f" on {device}" if device in per_device else " (on other devices: none on this one)"
            def canon(d: Any) -> str:
                try:
                    return normalize_dtype(str(d or "fp32"))
                except InvalidInputError:
                    return str(d)

            counts = pd.Series([canon(r.get("dtype")) for r in rows], dtype=object).value_counts()
            for d, n in counts.items():
                if d in measured:
                    continue
                hint = " (not --quick: a CPU's quick sweep is fp32 only)" if it.target.device.kind == "cpu" else ""
                out.append({"family": "attention", "kind": "measurements", "dtype": str(d), "ops": int(n),
                            "measured_in": "/".join(measured),
                            "note": f"{n} {d} attention op(s) priced from the model's {'/'.join(measured)} attention "
                                    f"measurements{where}, none in {d}: extrapolated across dtypes; `hybrid profile "
                                    f"--only attention`{hint} measures {d} attention"})
        return out


def measured_durations(iteration: TraceIteration) -> np.ndarray:
    """Every node of the compiled graph at its traced time (collective members: the fastest member's time, so
    that waiting for the slowest rank comes out of the synchronisation, not twice)."""
    compiled = iteration.graph.compile()
    dur = np.zeros(len(compiled))
    dur[: len(iteration.node_measured_us)] = iteration.node_measured_us
    grouped = (compiled.group >= 0) & (compiled.kind != 3)
    if grouped.any():
        gmin = np.full(int(compiled.group.max()) + 1, np.inf)
        np.minimum.at(gmin, compiled.group[grouped], dur[grouped])
        dur[grouped] = gmin[compiled.group[grouped]]
    return dur


def predict_trace(iteration: TraceIteration, model: Any, overheads: Any | None = None,
                  model_name: str = "", kernel_times: bool = True) -> TracePrediction:
    """Simulate ``iteration`` with ``model``'s op times (and, if the trace has times, with measured ones).

    ``overheads`` default: none on a CPU target or where the traced host time is kept (it already holds every
    op's dispatch and launch); where it was dropped (``host="model"``), the engine's host model: every traced host
    op at :attr:`~hybrid.engine.overheads.Overheads.host_op_us`, every kernel launch at ``kernel_launch_us`` and
    every collective call at ``collective_launch_us`` (their defaults; no optimizer or iteration constant: the
    trace's ops are that work). Pass fitted :class:`~hybrid.engine.overheads.Overheads` (``Overheads.fit`` on
    measured steps of the target's host) to price another host.

    ``kernel_times`` (default on; see :func:`hybrid.engine.simulate.simulate`): GPU ops cost the model's kernel
    time, its prediction less the framework dispatch it includes, since the graph's host stream already carries
    every op's dispatch and launch (traced, or the engine's overheads). Off, a model fitted on eager per-op GPU
    timings counts the dispatch twice. CPU rows include no dispatch, so CPU targets are the same either way."""
    from hybrid.engine.overheads import Overheads
    from hybrid.engine.simulate import simulate, simulate_durations

    if model is None and iteration.catalog is not None:
        # the roofline of the catalog the graph was built with: the default catalog lacks a bundle's own device
        from hybrid.engine.costs import RooflineCostModel

        model = RooflineCostModel(iteration.catalog)
    if overheads is None:
        if iteration.target.device.kind == "cpu" or iteration.info.get("host") == "trace":
            overheads = Overheads.zero()
        else:  # the traced host time was dropped: the engine's host model, op by op
            overheads = Overheads(optimizer_step_us=0.0, iteration_us=0.0)
    compiled = iteration.graph.compile()
    pred = simulate(compiled, model, overheads, kernel_times=kernel_times)
    meas = None
    if all(t.has_times for t in iteration.traces):
        meas = simulate_durations(compiled, measured_durations(iteration))
    out = TracePrediction(iteration, pred, meas, model_name, families_seen=fitted_families(model),
                          family_dtypes=_fitted(model, "family_dtypes"))
    for fb in out.dtype_fallbacks():
        warnings.warn(fb["note"], DtypeFallbackWarning, stacklevel=2)
    return out


def _fitted(model: Any, attr: str) -> Any:
    """``attr`` of ``model``, or of the fitted model it wraps (e.g. a kernel-time wrapper); None where empty."""
    seen: set[int] = set()
    while model is not None and id(model) not in seen:
        seen.add(id(model))
        value = getattr(model, attr, None)
        if value:
            return value
        model = getattr(model, "model", None)
    return None


def fitted_families(model: Any) -> tuple[str, ...] | None:
    """The op families ``model`` (or the fitted model it wraps, e.g. a kernel-time wrapper) was fitted on."""
    fams = _fitted(model, "families_seen")
    return tuple(fams) if fams else None
