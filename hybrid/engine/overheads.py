"""Host-side overheads the engine adds on top of kernel times: named, calibratable constants.

Every CPU node of a task graph belongs to an overhead category (see
:data:`hybrid.engine.graph.OVERHEAD_CATEGORIES`); its duration is the category's value here. ``fit`` tunes the
values so simulated iterations match measured iteration times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from hybrid.errors import InvalidInputError

if TYPE_CHECKING:  # pragma: no cover
    from hybrid.engine.costs import OpCostModel
    from hybrid.engine.graph import CompiledGraph

# Empirical defaults (microseconds): PyTorch eager on a recent x86 host with CUDA 12. cudaLaunchKernel costs
# ~4-6 us; the dispatcher/autograd path of one ATen op adds ~8-15 us; an NCCL call ~10-20 us of host time; an
# optimizer.step() over a few tensors (foreach kernels, Python loop) ~50-150 us; data loading + zero_grad +
# Python per-iteration bookkeeping ~100 us.
DEFAULT_KERNEL_LAUNCH_US = 5.0
DEFAULT_FRAMEWORK_US = 10.0
DEFAULT_COLLECTIVE_LAUNCH_US = 15.0
DEFAULT_OPTIMIZER_STEP_US = 80.0
DEFAULT_ITERATION_US = 100.0
#: Untraced host time of one ATen op or autograd node of an eager GPU step besides its kernel launches (Python
#: binding, dispatcher, autograd bookkeeping, allocator), per op a profiler records: what a traced step's host
#: costs op by op where the traced host time itself, inflated by recording, is dropped (``host="model"`` of
#: :func:`hybrid.workloads.trace_graph.build_trace_graph`). Fitted by ``experiments/trace_gpu/host_model.py`` on the
#: project's 11 untraced H100 / H200 training steps (traced kernels at their measured times, launches at
#: ``kernel_launch_us``): 5.70 us, standard error 0.39; its ``host_model_results.md`` has the leave-one-step-out errors.
DEFAULT_HOST_OP_US = 5.7
#: Log error beyond which :meth:`Overheads.fit_report`'s robust loss grows linearly (0.1 ~ 10%).
ROBUST_SCALE = 0.1


@dataclass(frozen=True)
class Overheads:
    """Per-node host costs in microseconds."""

    kernel_launch_us: float = DEFAULT_KERNEL_LAUNCH_US  # cudaLaunchKernel
    framework_us: float = DEFAULT_FRAMEWORK_US  # framework dispatch per op (added to each kernel launch)
    collective_launch_us: float = DEFAULT_COLLECTIVE_LAUNCH_US  # host side of one NCCL/gloo call
    optimizer_step_us: float = DEFAULT_OPTIMIZER_STEP_US  # host side of optimizer.step()
    iteration_us: float = DEFAULT_ITERATION_US  # per-iteration host work (data loader, zero_grad)
    host_op_us: float = DEFAULT_HOST_OP_US  # one traced host op (ATen op, autograd node) besides its launches

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise InvalidInputError(f"overhead {f.name} must be a number of us, got {value!r}")
            if not np.isfinite(value) or value < 0:
                raise InvalidInputError(f"overhead {f.name} must be finite and >= 0, got {value!r}")

    def vector(self) -> np.ndarray:
        """Duration per overhead category, aligned with :data:`OVERHEAD_CATEGORIES`."""
        return np.array([0.0, self.kernel_launch_us + self.framework_us, self.collective_launch_us,
                         self.optimizer_step_us, self.iteration_us])

    def node_us(self, graph: CompiledGraph) -> np.ndarray:
        """Host overhead (us) of every node of ``graph``: its category's value plus its host ops and kernel
        launches (:attr:`CompiledGraph.host_ops`, ``launches``) at ``host_op_us`` / ``kernel_launch_us``."""
        out = self.vector()[graph.overhead]
        if graph.host_ops is not None:
            out = out + graph.host_ops * self.host_op_us + graph.launches * self.kernel_launch_us
        return out

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, float]) -> Overheads:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise InvalidInputError(f"unknown overhead(s) {sorted(unknown)}; known: {sorted(known)}")
        values = {}
        for k, v in data.items():  # float("abc") / float(None) were bare ValueError / TypeError; float(True) was 1 us
            if isinstance(v, str):
                try:
                    v = float(v)
                except ValueError:
                    pass
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise InvalidInputError(f"overhead {k} must be a number of us, got {v!r}")
            values[k] = float(v)
        return cls(**values)

    @classmethod
    def zero(cls) -> Overheads:
        return cls(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)

    #: Fitted constants (the framework share of a launch follows ``kernel_launch_us``, see :meth:`fit`).
    #: ``host_op_us`` is fitted by default only where a graph has host ops (a traced step's, ``host="model"``).
    FIT_PARAMS = ("launch_us", "collective_launch_us", "optimizer_step_us", "iteration_us", "host_op_us")
    #: Physical upper bounds (us) of the fitted constants: one kernel launch + dispatch, the host side of one
    #: collective call and of one optimizer.step(); the per-iteration constant is bounded separately by the
    #: shortest measured iteration (host work cannot exceed the whole iteration); one host op.
    FIT_UPPER_US = (1_000.0, 10_000.0, 100_000.0)
    HOST_OP_UPPER_US = 1_000.0
    #: Weight of the prior (the start values) per constant: a 100% move from the start costs as much as a 10%
    #: error on one measured iteration. Keeps constants the data cannot identify at their start values.
    PRIOR_WEIGHT = 0.1

    @classmethod
    def fit(
        cls,
        graphs: Sequence[CompiledGraph],
        measured_us: Sequence[float],
        model: OpCostModel,
        start: Overheads | None = None,
        fit: Sequence[str] | None = None,
    ) -> Overheads:
        """Overheads that make simulated iteration times match ``measured_us``; see :meth:`fit_report`."""
        return cls.fit_report(graphs, measured_us, model, start, fit)[0]

    @classmethod
    def fit_report(
        cls,
        graphs: Sequence[CompiledGraph],
        measured_us: Sequence[float],
        model: OpCostModel,
        start: Overheads | None = None,
        fit: Sequence[str] | None = None,
        loss: str = "soft_l1",
    ) -> tuple[Overheads, dict[str, Any]]:
        """Fit the host constants and say how well the data determine each.

        Objective: relative (log) error of the simulated iterations, plus a weak prior pulling each constant
        towards ``start`` (:data:`PRIOR_WEIGHT`). Constants are fitted in microseconds (linear, not log: an
        iteration is close to linear in them, and a log parameter that reaches a tiny value has no gradient
        left to come back), between 0 and physical bounds (:data:`FIT_UPPER_US`; ``iteration_us`` at most
        half the shortest measured iteration). ``fit`` names the constants to move (default all of
        :data:`FIT_PARAMS`). The framework share of a launch keeps its ratio to ``kernel_launch_us`` in
        ``start`` (the two are not separately identifiable from iteration times).

        The report gives, per fitted constant, the standard error from the Jacobian at the solution (``se_us``)
        and whether the data determine it (``identified``: standard error below half the value, or below 1 us);
        a constant that is not identified mostly reflects the prior, not the measurements.

        ``loss`` is SciPy's robust loss on the log errors (``soft_l1``: quadratic up to :data:`ROBUST_SCALE`, i.e.
        ~10%, linear beyond, so a few runs the graph cannot represent do not drag every constant; ``linear`` is
        plain least squares).
        """
        from scipy.optimize import least_squares

        from hybrid.engine.simulate import node_durations, simulate_durations

        if len(graphs) != len(measured_us) or not graphs:
            raise InvalidInputError("fit needs one measured iteration time per graph (and at least one)")
        y = np.asarray(measured_us, dtype=np.float64)
        if not np.all(np.isfinite(y) & (y > 0)):
            raise InvalidInputError("measured iteration times must be positive numbers")
        has_ops = any(g.host_ops is not None and bool(np.any(g.host_ops)) for g in graphs)
        names = tuple(fit) if fit is not None else tuple(p for p in cls.FIT_PARAMS if p != "host_op_us" or has_ops)
        unknown = sorted(set(names) - set(cls.FIT_PARAMS))
        if unknown or not names:
            raise InvalidInputError(f"unknown overhead(s) to fit {unknown}; known: {', '.join(cls.FIT_PARAMS)}")
        base = start or cls()
        zero = cls.zero()
        kernel_parts = [node_durations(g, model, zero) for g in graphs]
        share = base.framework_us / max(base.kernel_launch_us + base.framework_us, 1e-9)
        full0 = np.array([base.kernel_launch_us + base.framework_us, base.collective_launch_us,
                          base.optimizer_step_us, base.iteration_us, base.host_op_us])
        upper = np.array([*cls.FIT_UPPER_US, 0.5 * float(y.min()), cls.HOST_OP_UPPER_US])
        idx = np.array([cls.FIT_PARAMS.index(n) for n in names])
        theta0 = np.clip(full0[idx], 0.0, upper[idx])
        scale = np.maximum(theta0, np.array([1.0, 5.0, 10.0, 10.0, 1.0])[idx])  # prior widths (us)

        def make(theta: np.ndarray) -> Overheads:
            full = full0.copy()
            full[idx] = theta
            launch, coll, opt, it, host_op = full
            return cls(launch * (1 - share), launch * share, coll, opt, it, host_op)

        def sims(theta: np.ndarray) -> np.ndarray:
            o = make(theta)
            return np.array([simulate_durations(g, d + o.node_us(g)).iteration_us
                             for g, d in zip(graphs, kernel_parts, strict=True)])

        def residual(theta: np.ndarray) -> np.ndarray:
            data = np.log(np.maximum(sims(theta), 1e-9)) - np.log(y)
            prior = cls.PRIOR_WEIGHT * (theta - theta0) / scale
            return np.concatenate([data, prior])

        def jac(theta: np.ndarray) -> np.ndarray:  # forward differences with steps on the prior's scale
            r0 = residual(theta)
            out = np.empty((r0.size, theta.size))
            for j in range(theta.size):
                h = 0.05 * scale[j]
                t = theta.copy()
                t[j] = t[j] + h if t[j] + h <= upper[idx][j] else t[j] - h
                out[:, j] = (residual(t) - r0) / (t[j] - theta[j])
            return out

        lo, hi = np.zeros(idx.size), upper[idx]
        res = least_squares(residual, theta0, jac=jac, method="trf", bounds=(lo, np.maximum(hi, 1e-9)),
                            x_scale=scale, max_nfev=100, loss=loss, f_scale=ROBUST_SCALE)
        theta = res.x
        J = jac(theta)[: len(y)]
        data_res = residual(theta)[: len(y)]
        # sensitivity of the iterations to each constant: ~0 means the constant is not on any critical path
        sensitive = np.linalg.norm(J, axis=0) * scale > 1e-6
        se = np.full(idx.size, np.inf)
        if sensitive.any():
            Js = J[:, sensitive]
            cov = np.linalg.pinv(Js.T @ Js) * max(float(np.mean(data_res ** 2)), 1e-12)
            se[sensitive] = np.sqrt(np.maximum(np.diag(cov), 0.0))
        fitted = make(theta)
        report = {
            "params": {n: float(v) for n, v in zip(names, theta, strict=True)},
            "se_us": {n: float(v) for n, v in zip(names, se, strict=True)},
            "identified": {n: bool(s < max(0.5 * v, 1.0)) for n, s, v in zip(names, se, theta, strict=True)},
            "at_bound": {n: bool(v <= 1e-9 or v >= u * (1 - 1e-6))
                         for n, v, u in zip(names, theta, upper[idx], strict=True)},
            "n": len(y), "rms_log_error": float(np.sqrt(np.mean(data_res ** 2))),
            "median_abs_log_error": float(np.median(np.abs(data_res))), "loss": loss,
        }
        return fitted, report

    @staticmethod
    def describe_fit(report: dict[str, Any]) -> str:
        """One line for a :meth:`fit_report` report: each constant with its standard error and whether the
        data identify it (a constant on no run's critical path has no standard error, said in words, not 'se inf')."""
        def se(k: str) -> str:
            value = report["se_us"][k]
            return f"se {value:.1f}" if math.isfinite(value) else "on no run's critical path"

        parts = [f"{k} {v:.1f} us ({se(k)}{'' if report['identified'][k] else ', not identified'}"
                 f"{', at a bound' if report['at_bound'][k] else ''})" for k, v in report["params"].items()]
        return ", ".join(parts) + f"; median |log error| on the fit runs {report['median_abs_log_error']:.3f}"


def measured_dispatch_us(model: Any, devices: Sequence[str]) -> float | None:
    """The host dispatch per op that ``model``'s kernel corrections measured for ``devices`` (one GPU; None for
    several devices, none, a CPU, or a model without one): the floor the pointwise trees learned inside an eager-timed GPU's
    per-op times (``DispatchXGB.learned_dispatch``; its ``"*"`` entry for a GPU never fitted), looked up through
    wrappers (``.model``). That floor is what one op costs the host of the profiled machine (dispatch + launch);
    the engine takes it off the GPU stream (:class:`~hybrid.engine.costs.KernelTimeModel`) and charges it there."""
    devs = {str(d) for d in devices}
    if len(devs) != 1:
        return None
    (device,) = devs
    seen: set[int] = set()
    while model is not None and id(model) not in seen:
        seen.add(id(model))
        catalog = getattr(model, "catalog", None)
        known = getattr(catalog, "devices", None) or {}
        if device in known and getattr(known[device], "kind", "gpu") != "gpu":
            return None  # a CPU's op times carry no dispatch the fit learned (it is learned on GPU rows only)
        for c in getattr(model, "corrections", None) or ():
            learned = getattr(c, "learned_dispatch", None)
            if learned:
                d = learned.get(device, learned.get("*"))
                return float(d) if d is not None and np.isfinite(d) and d > 0 else None
        model = getattr(model, "model", None)
    return None


def dispatch_overheads(base: Overheads, dispatch_us: float | None) -> Overheads:
    """``base`` with one kernel's host time (launch + framework dispatch) set to ``dispatch_us`` where given (the
    framework share absorbs the difference; the launch keeps its value); ``base`` itself without one."""
    if dispatch_us is None:
        return base
    values = base.to_dict()
    values["framework_us"] = max(float(dispatch_us) - base.kernel_launch_us, 0.0)
    return Overheads(**values)

