"""Host-side overheads the engine adds on top of kernel times: named, calibratable constants.

Every CPU node of a task graph belongs to an overhead category (see
:data:`hybrid.engine.graph.OVERHEAD_CATEGORIES`); its duration is the category's value here. ``fit`` tunes the
values so simulated iterations match measured iteration times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING

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


@dataclass(frozen=True)
class Overheads:
    """Per-node host costs in microseconds."""

    kernel_launch_us: float = DEFAULT_KERNEL_LAUNCH_US  # cudaLaunchKernel
    framework_us: float = DEFAULT_FRAMEWORK_US  # framework dispatch per op (added to each kernel launch)
    collective_launch_us: float = DEFAULT_COLLECTIVE_LAUNCH_US  # host side of one NCCL/gloo call
    optimizer_step_us: float = DEFAULT_OPTIMIZER_STEP_US  # host side of optimizer.step()
    iteration_us: float = DEFAULT_ITERATION_US  # per-iteration host work (data loader, zero_grad)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not np.isfinite(value) or value < 0:
                raise InvalidInputError(f"overhead {f.name} must be finite and >= 0, got {value!r}")

    def vector(self) -> np.ndarray:
        """Duration per overhead category, aligned with :data:`OVERHEAD_CATEGORIES`."""
        return np.array([0.0, self.kernel_launch_us + self.framework_us, self.collective_launch_us,
                         self.optimizer_step_us, self.iteration_us])

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, float]) -> Overheads:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise InvalidInputError(f"unknown overhead(s) {sorted(unknown)}; known: {sorted(known)}")
        return cls(**{k: float(v) for k, v in data.items()})

    @classmethod
    def zero(cls) -> Overheads:
        return cls(0.0, 0.0, 0.0, 0.0, 0.0)

    @classmethod
    def fit(
        cls,
        graphs: Sequence[CompiledGraph],
        measured_us: Sequence[float],
        model: OpCostModel,
        start: Overheads | None = None,
    ) -> Overheads:
        """Overheads that make simulated iteration times match ``measured_us`` (least squares in log space).

        Kernel times come from ``model`` (costed once per graph); only the host constants move. The
        framework share of a launch is kept at its ratio to ``kernel_launch_us`` in ``start`` (the two are not
        separately identifiable from iteration times).
        """
        from scipy.optimize import least_squares

        from hybrid.engine.simulate import node_durations, simulate_durations

        if len(graphs) != len(measured_us) or not graphs:
            raise InvalidInputError("fit needs one measured iteration time per graph (and at least one)")
        y = np.asarray(measured_us, dtype=np.float64)
        if not np.all(np.isfinite(y) & (y > 0)):
            raise InvalidInputError("measured iteration times must be positive numbers")
        base = start or cls()
        zero = cls.zero()
        kernel_parts = [node_durations(g, model, zero) for g in graphs]
        share = base.framework_us / max(base.kernel_launch_us + base.framework_us, 1e-9)

        def make(theta: np.ndarray) -> Overheads:
            launch, coll, opt, it = np.exp(theta)
            return cls(launch * (1 - share), launch * share, coll, opt, it)

        def residual(theta: np.ndarray) -> np.ndarray:
            o = make(theta).vector()
            sims = np.array([simulate_durations(g, d + o[g.overhead]).iteration_us
                             for g, d in zip(graphs, kernel_parts, strict=True)])
            return np.log(sims) - np.log(y)

        theta0 = np.log(np.maximum([base.kernel_launch_us + base.framework_us, base.collective_launch_us,
                                    base.optimizer_step_us, base.iteration_us], 1e-3))
        res = least_squares(residual, theta0, method="trf", diff_step=0.05, max_nfev=200,
                            bounds=(np.log(1e-3), np.log(1e5)))
        return make(res.x)
