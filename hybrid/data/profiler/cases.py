"""A profiler case: the canonical-table columns describing one configuration and how to build its benchmark."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: ``build()`` returns ``(run, prepare)``: ``run(i)`` is timed, ``prepare(i)`` (or None) runs untimed before it.
Builder = Callable[[], tuple[Callable[[int], Any], Callable[[int], Any] | None]]

#: Profiler op families, in the order a full run measures them (``ceilings`` always runs).
PROFILE_FAMILIES = ("gemm", "elementwise", "norm", "softmax", "attention", "conv", "pool", "embedding", "optimizer",
                    "collective")


@dataclass
class Case:
    """One configuration to time: ``row`` holds its shape columns (op, dtype, variant, direction, ...)."""

    family: str
    row: dict[str, Any]
    build: Builder = field(repr=False)
    # Bytes of memory the case allocates (used to skip cases that do not fit the memory budget).
    mem_bytes: float = 0.0


def torch_dtype(torch: Any, name: str) -> Any:
    """The torch dtype for a canonical dtype name (fp32, bf16, fp16, fp64)."""
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp64": torch.float64,
            "tf32": torch.float32}[name]


def random_tensor(torch: Any, shape: tuple[int, ...], dtype: Any, device: Any, generator: Any = None) -> Any:
    """Uniform random values in [0.5, 1.5) (never zeros, no denormals), created in fp32 then cast."""
    t = torch.rand(shape, dtype=torch.float32, device=device, generator=generator)
    t.add_(0.5)
    return t.to(dtype) if dtype != torch.float32 else t


#: Columns that identify a measured configuration (everything but the device, timings and provenance).
_NOT_KEY = frozenset({"device", "time_us", "time_us_std", "time_us_min", "time_us_max", "repeats", "source",
                      "framework", "framework_version", "library_version", "kernel_name", "system", "wrong"})


def _canon(value: Any) -> Any:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(f"{float(value):.6g}")
    try:
        return float(f"{float(value):.6g}") if str(value).strip() not in ("",) else None
    except (TypeError, ValueError):
        return str(value).strip().lower()


def config_key(row: dict[str, Any]) -> frozenset:
    """What identifies one measured configuration: its op, dtype, variant, direction and shape columns (missing
    and NaN values left out, numbers to 6 significant digits), so a case and a table row compare equal."""
    out = []
    for k, v in row.items():
        if k in _NOT_KEY or v is None or (isinstance(v, float) and v != v):
            continue
        c = _canon(v)
        if c is None or (isinstance(c, float) and c != c):
            continue
        out.append((k, c))
    return frozenset(out)
