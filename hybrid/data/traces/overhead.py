"""What recording a trace costs the host, measured on the machine that records it.

A traced step is slower on the host than the same step untraced: ``torch.profiler`` records every op (about
0.3-0.5 us each on a 2-core EPYC VM), the execution-trace observer serialises every op with its inputs (about
7 us each there), and on a GPU CUPTI records every launch. A GPU step's host is often the bottleneck of eager
PyTorch, so a traced host time is no estimate of the untraced one: the project's H100 / H200 traces spend 3-5x
more host time traced than their untraced steps take (``experiments/trace_gpu``).

:func:`measure_profiler_overhead` times four small op loops (the last a tiny training step) with and without the
recording configuration the step used, and fits the cost per recorded event, per recorded input and per kernel
launch (non-negative least squares over the loops). :func:`trace_step <hybrid.data.traces.record.trace_step>`
stores the result in the Chrome trace (metadata ``hybrid_profiler_overhead``), and the graph builder takes it off
each traced host time (``hybrid.workloads.trace_costing.HostCosting``). Events are counted as
:mod:`hybrid.data.traces.parse` counts them (rows of ``RankTrace.ops`` inside the step), so the loops and a real
step are measured alike.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hybrid.errors import InvalidInputError

#: Metadata key of the Chrome trace that holds the measured overhead (JSON text).
METADATA_KEY = "hybrid_profiler_overhead"


@dataclass(frozen=True)
class ProfilerOverhead:
    """Host time recording adds, in microseconds: per recorded host event (op or annotation), per recorded
    input of an event (a tensor list counts its tensors) and per kernel launch."""

    per_event_us: float
    per_input_us: float = 0.0
    per_launch_us: float = 0.0
    execution_trace: bool = True
    device: str = "cpu"
    #: the loops it was fitted on: name -> {"events", "inputs", "launches" per iteration, "extra_us" per iteration}
    loops: dict[str, dict[str, float]] | None = None

    def __post_init__(self) -> None:
        for name in ("per_event_us", "per_input_us", "per_launch_us"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v >= 0):
                raise InvalidInputError(f"profiler overhead {name} must be a finite number >= 0, got {v!r}")

    def cost_us(self, events: Any, inputs: Any = 0.0, launches: Any = 0.0) -> Any:
        """Recording cost of ``events`` events with ``inputs`` inputs and ``launches`` kernel launches."""
        return (self.per_event_us * np.asarray(events, dtype=np.float64)
                + self.per_input_us * np.asarray(inputs, dtype=np.float64)
                + self.per_launch_us * np.asarray(launches, dtype=np.float64))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> ProfilerOverhead:
        try:
            d = json.loads(text) if isinstance(text, str) else dict(text)
            return cls(float(d["per_event_us"]), float(d.get("per_input_us", 0.0)),
                       float(d.get("per_launch_us", 0.0)), bool(d.get("execution_trace", True)),
                       str(d.get("device", "cpu")), d.get("loops"))
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidInputError(f"malformed {METADATA_KEY} metadata in the trace: {exc}") from None


def overhead_of(meta: dict[str, Any]) -> ProfilerOverhead | None:
    """The overhead stored in a parsed trace's metadata (``RankTrace.meta``), or None (not measured)."""
    raw = meta.get(METADATA_KEY)
    return None if raw in (None, "") else ProfilerOverhead.from_json(raw)


def input_counts(dims: Any) -> np.ndarray:
    """Recorded inputs per op from the ``dims`` column (``Input Dims``): one per entry, a tensor list its tensors."""
    out = np.zeros(len(dims), dtype=np.float64)
    for i, d in enumerate(dims):
        if isinstance(d, list | tuple):
            out[i] = sum(len(x) if isinstance(x, list | tuple) and x and isinstance(x[0], list | tuple) else 1
                         for x in d)
    return out


# ------------------------------------------------------------------------------------------------ measuring
def _loops(device: str) -> dict[str, tuple[Callable[[], None], int]]:
    """Four small loop bodies, each with its share of the iterations (a divisor): views (host only), an in-place
    add (one launch on a GPU), a tensor-list op (one event with many inputs on a GPU; on a CPU the fallback runs
    one add per tensor) and a tiny training step (a two-layer MLP's forward and backward: modules, autograd
    nodes and the ops a real step records, ~120 events; real steps cost more per event than the three bare
    loops, e.g. 10.8 against 7-10 us on a 2-core EPYC VM, so without it the fit fell short of them)."""
    import torch

    x = torch.zeros(16, device=device)
    xs = [torch.zeros(4, device=device) for _ in range(8)]

    def views() -> None:
        x.view(4, 4).view(-1)

    def add() -> None:
        x.add_(1.0)

    def foreach() -> None:
        torch._foreach_add_(xs, 1.0)

    net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                              torch.nn.Linear(16, 4)).to(device)
    inp = torch.randn(4, 16, device=device)

    def step() -> None:
        net(inp).sum().backward()

    return {"views": (views, 1), "add": (add, 1), "foreach": (foreach, 1), "step": (step, 10)}


def _time_loop(body: Callable[[], None], iters: int, sync: Callable[[], None]) -> float:
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        body()
    sync()
    return time.perf_counter() - t0


def _counts(trace_file: Path) -> tuple[float, float, float]:
    """Events, inputs and kernel launches of the calibration step in an exported Chrome trace."""
    from hybrid.data.traces.parse import load_trace

    tr = load_trace(str(trace_file))
    ops = tr.ops[~tr.ops["name"].astype(str).str.startswith("ProfilerStep#")]
    return float(len(ops)), float(input_counts(ops["dims"].to_numpy()).sum()), float(len(tr.kernels))


def measure_profiler_overhead(device: str = "cpu", execution_trace: bool = True, iters: int = 200,
                              repeats: int = 3) -> ProfilerOverhead:
    """Fit :class:`ProfilerOverhead` on this machine for steps on ``device`` (``"cpu"`` or ``"cuda"``), recorded
    as :func:`hybrid.data.traces.record.trace_step` records them (shapes, CUDA activity on a GPU, and the
    execution-trace observer when ``execution_trace``). Each loop runs ``iters`` iterations (the training step a
    tenth of them); the untraced time is the fastest of ``2 * repeats`` runs, the traced one the median of
    ``repeats``. Takes 1-2 s."""
    import torch
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, record_function

    if iters < 10 or repeats < 1:
        raise InvalidInputError(f"iters must be >= 10 and repeats >= 1, got {iters}, {repeats}")
    cuda = device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise InvalidInputError("cannot measure the profiler overhead on cuda: no GPU is available")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    rows, rhs, loops = [], [], {}
    with tempfile.TemporaryDirectory(prefix="hybrid-overhead-") as tmp:
        for name, (body, share) in _loops(device).items():
            n = max(10, iters // share)
            for _ in range(max(3, n // 20)):  # warm-up: allocator, kernels, dispatch caches
                body()
            plain = min(_time_loop(body, n, sync) for _ in range(2 * repeats))
            dts, counted = [], Path(tmp) / f"kineto_{name}.json"
            for r in range(repeats):
                et = ExecutionTraceObserver().register_callback(os.path.join(tmp, f"et_{name}_{r}.json")) \
                    if execution_trace else None
                with profile(activities=acts, record_shapes=True) as prof:
                    if et is not None:
                        et.start()
                    with record_function("ProfilerStep#0"):
                        dt = _time_loop(body, n, sync)
                    if et is not None:
                        et.stop()
                if et is not None:
                    et.unregister_callback()
                if r == 0:  # every repeat records the same events
                    prof.export_chrome_trace(str(counted))
                dts.append(dt)
            # the median traced run, not the fastest: a trace records ONE step, whose recording cost is a typical
            # run's (the fastest of three priced the events of a real step 10-15% low on a 2-core VM)
            traced = float(np.median(dts))
            events, inputs, launches = _counts(counted)
            per_iter = np.array([events, inputs, launches]) / n
            extra = max(traced - plain, 0.0) / n * 1e6
            rows.append(per_iter)
            rhs.append(extra)
            loops[name] = {"events": per_iter[0], "inputs": per_iter[1], "launches": per_iter[2], "extra_us": extra,
                           "untraced_us": plain / n * 1e6}
    from scipy.optimize import nnls

    a = np.asarray(rows)
    used = a.any(axis=0)  # a CPU has no launches
    coef = np.zeros(3)
    coef[used], _ = nnls(a[:, used], np.asarray(rhs))
    return ProfilerOverhead(float(coef[0]), float(coef[1]), float(coef[2]), execution_trace,
                            "cuda" if cuda else "cpu", loops)
