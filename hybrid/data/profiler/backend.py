"""The compute backend the profiler runs on: lazy PyTorch import, CPU or CUDA, threads, synchronisation.

PyTorch is the optional ``profile`` extra, so nothing here imports it at module import time; call
:func:`require_torch` (which raises a clear :class:`~hybrid.errors.HybridError` when it is missing).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from hybrid.errors import HybridError, InvalidInputError

#: How to install PyTorch, shown when it is missing.
TORCH_HINT = "install the profile extra: pip install 'hybrid-perf[profile]' (or pip install torch)"


def _import_module(name: str) -> ModuleType:
    """Indirection over :func:`importlib.import_module` (tests replace it to simulate a missing package)."""
    return importlib.import_module(name)


def require_torch(command: str = "hybrid profile") -> ModuleType:
    """Import and return :mod:`torch`, or raise a one-line :class:`HybridError` saying that ``command`` needs it
    and how to install it."""
    try:
        return _import_module("torch")
    except ImportError as exc:
        raise HybridError(f"`{command}` needs PyTorch, which is not installed ({exc}); {TORCH_HINT}") from None


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


@dataclass
class Backend:
    """Where ops run: ``kind`` is ``"cpu"`` or ``"cuda"``; ``torch_device`` the :class:`torch.device`."""

    torch: Any
    kind: str
    threads: int
    #: fp8 tensor-core GEMMs (``torch._scaled_mm``): None = ask the GPU (compute capability 8.9 or later)
    fp8: bool | None = None

    @property
    def has_fp8_gemm(self) -> bool:
        """Whether the sweep times fp8 GEMMs: a CUDA GPU of compute capability 8.9+ (Ada, Hopper, Blackwell) whose
        PyTorch has ``torch._scaled_mm``; ``fp8`` overrides the probe."""
        if self.fp8 is not None:
            return bool(self.fp8) and self.is_cuda
        if not self.is_cuda or not hasattr(self.torch, "_scaled_mm"):
            return False
        try:
            return tuple(self.torch.cuda.get_device_capability()) >= (8, 9)
        except (RuntimeError, AssertionError):  # no usable GPU behind a "cuda" backend (enumeration only)
            return False

    @property
    def torch_device(self) -> Any:
        return self.torch.device("cuda" if self.kind == "cuda" else "cpu")

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    def synchronize(self) -> None:
        """Wait for queued device work (a no-op on the CPU, where ops run synchronously)."""
        if self.is_cuda:
            self.torch.cuda.synchronize()

    def device_name(self) -> str:
        """The name the hardware reports (``torch.cuda.get_device_name`` or the CPU model)."""
        if self.is_cuda:
            return str(self.torch.cuda.get_device_name())
        from hybrid.hardware.cpu import cpu_model_name

        return cpu_model_name()


def open_backend(torch: ModuleType | None = None, *, threads: int | None = None, force_cpu: bool = False) -> Backend:
    """Pick CUDA when ``torch.cuda.is_available()`` (unless ``force_cpu``), else the CPU, and set the thread count.

    ``threads`` defaults to every core in the process's affinity mask; it is set with ``torch.set_num_threads``
    (intra-op parallelism) so the profile records a known setting rather than the library default.
    """
    torch = torch or require_torch()
    if threads is not None and threads < 1:
        raise InvalidInputError(f"--threads must be >= 1, got {threads}")
    n = threads or available_cores()
    torch.set_num_threads(n)
    kind = "cuda" if (not force_cpu and torch.cuda.is_available()) else "cpu"
    return Backend(torch=torch, kind=kind, threads=torch.get_num_threads())
