"""Tensor memory of a traced step: what is resident when it starts, and the most that is alive at once.

A step whose tensors need nearly all of a GPU's memory runs slower than its kernels add up to: PyTorch's caching
allocator then has to hand cached blocks back to the driver and map new ones (synchronising calls) and retry
fragmented allocations, none of which a cost model of the ops sees. So a prediction from a trace should say how
much of the target's memory the step needs. ``experiments/nlp_e2e``: the five of 100 labelled GPU steps whose
tensors need 90-99% of their GPU's memory took 1.2-1.7x their predicted time (predictions 16-39% short, geomean
26.0% against 4.1% for the other 95, which need at most 76%); of those, only the 75 W Tesla P4's two BERT steps
are more than 19% off (results.md there).

:func:`measure_step_memory` runs the step once under a ``TorchDispatchMode`` that sees every tensor an op creates,
counts each storage once (views and in-place results share it) and drops it when its storage is freed (a
finalizer on the storage, which autograd's saved tensors keep alive until the backward pass releases them). The
resident bytes are the storages of the tensors alive when the step starts (parameters, buffers, gradients,
optimizer state, inputs: every tensor the garbage collector tracks). It works on the meta device (shapes
without data), so the memory of a model too large for this machine is measured from the same step that is
traced. Counted are tensor bytes only: the CUDA context, library workspaces (cuBLAS, cuDNN, attention kernels)
and the allocator's rounding and fragmentation come on top (typically a few GiB on a large GPU).

:func:`trace_step <hybrid.data.traces.record.trace_step>` stores the result in the Chrome trace (metadata
``hybrid_step_memory``); ``hybrid trace predict`` compares it with the target's memory (:func:`memory_verdict`).
"""

from __future__ import annotations

import gc
import json
import warnings
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from hybrid.errors import InvalidInputError

#: Metadata key of the Chrome trace that holds the step's memory (a JSON object).
METADATA_KEY = "hybrid_step_memory"
#: Share of a device's memory above which a step's tensors leave the caching allocator too little room (warned
#: as near capacity). Not fitted: the labelled steps of ``experiments/nlp_e2e`` run as predicted up to 76% (within
#: 11%) and 1.2-1.7x slower from 90%; the threshold sits between (chosen with those labels in view).
NEAR_CAPACITY_FRACTION = 0.85
_GIB = float(1 << 30)


@dataclass(frozen=True)
class StepMemory:
    """Tensor bytes of one step on one kind of device: resident when it starts, the most alive at once (resident
    included) and alive when it returns."""

    device: str
    resident_bytes: int
    peak_bytes: int
    end_bytes: int

    def __post_init__(self) -> None:
        for name in ("resident_bytes", "peak_bytes", "end_bytes"):
            v = getattr(self, name)
            if not (isinstance(v, int | np.integer) and v >= 0):
                raise InvalidInputError(f"step memory {name} must be a whole number of bytes >= 0, got {v!r}")
        if self.peak_bytes < max(self.resident_bytes, self.end_bytes):
            raise InvalidInputError(f"step memory peak_bytes ({self.peak_bytes}) is below the resident "
                                    f"({self.resident_bytes}) or end ({self.end_bytes}) bytes")

    @property
    def step_bytes(self) -> int:
        """What the step adds at its peak to what was resident (activations, gradients, temporaries)."""
        return self.peak_bytes - self.resident_bytes

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> StepMemory:
        try:
            d = json.loads(text) if isinstance(text, str) else dict(text)
            return cls(str(d["device"]), int(d["resident_bytes"]), int(d["peak_bytes"]), int(d["end_bytes"]))
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidInputError(f"malformed {METADATA_KEY} metadata in the trace: {exc}") from None


def memory_of(meta: dict[str, Any]) -> StepMemory | None:
    """The step memory stored in a parsed trace's metadata (``RankTrace.meta``), or None (not measured)."""
    raw = meta.get(METADATA_KEY)
    return None if raw in (None, "") else StepMemory.from_json(raw)


def memory_verdict(memory: StepMemory, capacity_bytes: float) -> dict[str, Any]:
    """The step's peak against a device of ``capacity_bytes``: GiB figures, ``fraction`` (peak / capacity),
    ``fits`` (peak <= capacity) and ``near_capacity`` (peak above :data:`NEAR_CAPACITY_FRACTION` of it, or more),
    with a ``note`` for the reader; ``capacity_bytes`` <= 0 or NaN (unknown) gives no fraction."""
    out: dict[str, Any] = {"peak_gib": memory.peak_bytes / _GIB, "resident_gib": memory.resident_bytes / _GIB,
                           "step_gib": memory.step_bytes / _GIB, "traced_on": memory.device}
    cap = float(capacity_bytes)
    if not (np.isfinite(cap) and cap > 0):
        out["note"] = "the target's memory capacity is not in the catalog"
        return out
    frac = memory.peak_bytes / cap
    out.update(capacity_gib=cap / _GIB, fraction=frac, fits=frac <= 1.0, near_capacity=frac > NEAR_CAPACITY_FRACTION)
    if frac > 1.0:
        out["note"] = (f"does not fit: the step's tensors need {frac:.1%} of the device's memory (out of memory, or "
                       "spilled to host memory where the runtime allows it: far slower than predicted)")
    elif frac > NEAR_CAPACITY_FRACTION:
        out["note"] = (f"near capacity: the step's tensors need {frac:.1%} of the device's memory, before the runtime's "
                       "own (context, library workspaces, allocator fragmentation); steps there have run 1.2-1.7x "
                       "slower than predicted (allocator churn), or fail")
    return out


class _LiveBytes:
    """Bytes of live tensor storages per device type, their running peak, and the finalizers that track frees."""

    def __init__(self) -> None:
        self.sizes: dict[int, tuple[str, int]] = {}
        self.live: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.finalizers: list[weakref.finalize] = []

    def add(self, tensor: Any) -> None:
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse or other storage-less tensors: not counted
            return
        key = int(storage._cdata)
        if key in self.sizes:
            return
        dev, n = storage.device.type, int(storage.nbytes())
        self.sizes[key] = (dev, n)
        live = self.live[dev] = self.live.get(dev, 0) + n
        if live > self.peak.get(dev, 0):
            self.peak[dev] = live
        self.finalizers.append(weakref.finalize(storage, self._free, key))

    def _free(self, key: int) -> None:
        dev, n = self.sizes.pop(key, ("", 0))
        if dev:
            self.live[dev] -= n

    def close(self) -> None:
        for f in self.finalizers:
            f.detach()
        self.finalizers.clear()


def measure_step_memory(step: Callable[[], Any], device: str | None = None) -> StepMemory:
    """Run ``step`` once and measure its tensor memory on ``device`` (a device type: "cuda", "cpu", "meta"...;
    default: the one other than the CPU where the step allocated the most, else the CPU). The step's result is
    dropped before the end is counted."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    live = _LiveBytes()

    class _Track(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    live.add(t)
            return out

    try:
        gc.collect()
        with warnings.catch_warnings():  # isinstance on some library objects warns of deprecated aliases
            warnings.simplefilter("ignore")
            resident_tensors = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
            # a parameter's gradient is resident too, but one that autograd made (a backward before this step)
            # has no Python object until ``.grad`` is read, so the garbage collector does not list it
            resident_tensors += [g for o in resident_tensors if o.is_leaf and isinstance(g := o.grad, torch.Tensor)]
        for obj in resident_tensors:  # resident: every tensor alive now, each storage once
            live.add(obj)
        del resident_tensors
        resident = dict(live.live)
        with _Track():
            result = step()
        del result
        gc.collect()
        if device is None:  # where the step itself allocated: tensors merely alive elsewhere (a compiler's meta
            # tensors, a model parked on another device) do not make it that device's step
            grew = {d: live.peak[d] - resident.get(d, 0) for d in live.peak}
            others = sorted((d for d in grew if d != "cpu" and grew[d] > 0), key=lambda d: -grew[d])
            device = others[0] if others else "cpu"
        dev = str(device)
        return StepMemory(dev, int(resident.get(dev, 0)), int(live.peak.get(dev, 0)), int(live.live.get(dev, 0)))
    finally:
        live.close()
