"""FP32 math of traced matmuls and convolutions: IEEE FP32 units or TF32 tensor cores.

PyTorch runs an fp32 matmul on TF32 tensor cores when ``torch.backends.cuda.matmul.allow_tf32`` is set (also
``torch.set_float32_matmul_precision("high")``; off by default since PyTorch 1.12) and an fp32 convolution when
``torch.backends.cudnn.allow_tf32`` is set (on by default). A trace records the op as ``float`` either way, yet on
an A100 the two rates differ 8x (156 vs 19.5 TFLOP/s dense), so a trace must say which one its program used:

* **kernels** (a GPU trace): the kernels an op launched name their math (cuBLAS/cuDNN ``..._tf32f32_...``,
  CUTLASS ``tensorop_s1688gemm``, ``..._tf32gemm``; hipBLASLt ``xf32``), so each fp32 matmul or convolution that
  launched a TF32 kernel is priced as ``tf32`` and one that launched only FP32 kernels as ``fp32`` (not for a
  trace of a GPU without TF32 units: there every kernel is FP32 whatever the program allows);
* **recorded** (a trace made by ``hybrid trace record`` / :func:`hybrid.data.traces.record.trace_step`): the two
  switches as the traced program had set them (:data:`METADATA_KEY`: the Chrome trace's metadata, and a
  top-level member of the execution trace, which is read alone too), for ops without kernels (a CPU or
  meta-device trace predicted for a GPU);
* **PyTorch's defaults** otherwise (matmuls FP32, convolutions TF32), said so in the prediction's info;
* an explicit choice (``hybrid trace predict --fp32-matmul/--fp32-conv``) overrides all three.

A target without TF32 units (GPUs before Ampere, CPUs) runs these ops in FP32 whatever the switches say: there
nothing changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from hybrid.errors import InvalidInputError

#: Trace metadata key under which the recorder stores the traced program's switches ({"matmul": "tf32"|"ieee",
#: "conv": ...}).
METADATA_KEY = "hybrid_fp32_precision"
#: Values of a switch: IEEE FP32 units, or TF32 tensor cores; ``auto`` = decided from the trace.
MODES = ("auto", "ieee", "tf32")
#: PyTorch's defaults (matmuls: ``allow_tf32 = False`` since 1.12; convolutions: cuDNN ``allow_tf32 = True``).
PYTORCH_DEFAULTS = {"matmul": "ieee", "conv": "tf32"}
#: Op rows of each switch (``op`` column of the canonical rows the trace mapping makes).
SWITCH_OPS = {"matmul": ("gemm", "bmm"), "conv": ("conv2d",)}
#: Kernel names of TF32 math: cuBLAS / cuDNN (``sm80_xmma_gemm_f32f32_tf32f32_f32``, ``..._fprop_..._tf32f32``),
#: CUTLASS 3 (``..._s64x128x8tf32gemm``), CUTLASS 2 (``tensorop_s1688gemm``: FP32 operands on the m16n8k8 / k4
#: TF32 shapes; the 16-bit ones read ``tensorop_bf16_s16816gemm``), hipBLASLt (``xf32``).
TF32_KERNEL = re.compile(r"tf32|xf32|tensorop_s168[48]", re.IGNORECASE)


def tf32_kernels(names: pd.Series | np.ndarray | list[str]) -> np.ndarray:
    """Per kernel name, whether it runs TF32 math (:data:`TF32_KERNEL`)."""
    s = pd.Series(np.asarray(names, dtype=object), dtype=object).astype(str)
    return s.str.contains(TF32_KERNEL).to_numpy(dtype=bool)


def current_switches() -> dict[str, str]:
    """The switches of this process (what :func:`hybrid.data.traces.record.trace_step` stores with a trace)."""
    import torch

    out = dict(PYTORCH_DEFAULTS)
    try:
        out["matmul"] = "tf32" if bool(torch.backends.cuda.matmul.allow_tf32) else "ieee"
        out["conv"] = "tf32" if bool(torch.backends.cudnn.allow_tf32) else "ieee"
    except (AttributeError, RuntimeError):  # a build without these switches: its defaults
        pass
    return out


def recorded_switches(meta: dict[str, Any]) -> dict[str, str] | None:
    """The switches a trace's metadata carries (None: recorded without them). A malformed entry is an error."""
    doc = meta.get(METADATA_KEY)
    if doc is None:
        return None
    if isinstance(doc, str):  # older exports store metadata values as strings
        import json

        try:
            doc = json.loads(doc)
        except ValueError as exc:
            raise InvalidInputError(f"trace metadata {METADATA_KEY!r} is not JSON: {doc[:80]!r}") from exc
    if not isinstance(doc, dict) or any(doc.get(k) not in ("ieee", "tf32") for k in SWITCH_OPS):
        raise InvalidInputError(f"trace metadata {METADATA_KEY!r} must give 'matmul' and 'conv' as 'ieee' or "
                                f"'tf32', got {doc!r}")
    return {k: str(doc[k]) for k in SWITCH_OPS}


@dataclass(frozen=True)
class Fp32Precision:
    """How a trace's fp32 matmuls and convolutions are priced: ``auto`` (see the module docstring) or forced."""

    matmul: str = "auto"
    conv: str = "auto"

    def __post_init__(self) -> None:
        for k in SWITCH_OPS:
            if getattr(self, k) not in MODES:
                raise InvalidInputError(f"fp32 {k} precision must be one of {MODES}, got {getattr(self, k)!r}")


def apply_fp32_precision(units: pd.DataFrame, meta: dict[str, Any], has_tf32_units: bool,
                         precision: Fp32Precision | None = None, kernels_tell: bool = True
                         ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``units`` (:func:`hybrid.workloads.trace_units.trace_units`) with the fp32 matmul / convolution rows
    that run TF32 math re-typed ``tf32``, and an account per switch (``mode``, where it came from, ops re-typed).

    ``has_tf32_units``: whether the target runs TF32 at all (else nothing is re-typed). ``meta``: the trace's
    metadata (its recorded switches). ``kernels_tell``: whether the traced GPU could have run TF32 (False for a
    trace of a GPU without TF32 units, a V100 say: its FP32 kernels say nothing of what the program allows, so
    the recorded switches or PyTorch's defaults decide for the target)."""
    precision = precision or Fp32Precision()
    recorded = recorded_switches(meta)
    rows = units["row"].to_numpy(dtype=object)
    is_op = (units["kind"] == "op").to_numpy(dtype=bool)
    op = np.array([r.get("op") if isinstance(r, dict) else None for r in rows], dtype=object)
    fp32 = np.array([isinstance(r, dict) and r.get("dtype") == "fp32" for r in rows], dtype=bool)
    launched = units["n_launch"].to_numpy(dtype=np.float64) > 0 if "n_launch" in units.columns and kernels_tell \
        else np.zeros(len(units), dtype=bool)
    tf32_k = units["n_tf32"].to_numpy(dtype=np.float64) > 0 if "n_tf32" in units.columns else \
        np.zeros(len(units), dtype=bool)
    info: dict[str, Any] = {}
    retype = np.zeros(len(units), dtype=bool)
    for switch, ops in SWITCH_OPS.items():
        sel = is_op & fp32 & np.isin(op, list(ops))
        forced = getattr(precision, switch)
        fallback, source = ((recorded[switch], "recorded") if recorded is not None
                            else (PYTORCH_DEFAULTS[switch], "PyTorch default"))
        if forced != "auto":
            fallback, source = forced, "option"
            on = sel & (forced == "tf32")
        else:  # what an op's kernels ran, else the program's switch
            on = (sel & launched & tf32_k) | (sel & ~launched & (fallback == "tf32"))
            if (sel & launched).any():
                source = "kernels" if not (sel & ~launched).any() else f"kernels, else {source}"
        n_on = int(on.sum())
        mode = fallback if not sel.any() else ("tf32" if n_on == sel.sum() else "ieee" if n_on == 0 else "mixed")
        if not has_tf32_units:
            on = np.zeros_like(on)
        retype |= on
        info[switch] = {"mode": mode, "source": source, "fp32_ops": int(sel.sum()), "tf32_ops": int(on.sum())}
    info["target_has_tf32"] = bool(has_tf32_units)
    if retype.any():
        units = units.copy()
        new = units["row"].to_numpy(dtype=object).copy()
        for i in np.flatnonzero(retype):
            new[i] = {**new[i], "dtype": "tf32"}
        units["row"] = pd.Series(new, index=units.index, dtype=object)
    return units, info


#: Traced devices whose SDPA math fallback upcasts a 16-bit attention to fp32 where a GPU would not run the math
#: fallback at all (a bf16 attention runs a fused flash / memory-efficient / cuDNN kernel in bf16 there).
MATH_UPCAST_DEVICES = ("cpu", "meta")
#: Casts (base names) of the math fallback's upcast of Q, K, V and its downcast of the result (and their backward).
_CAST_OPS = ("aten::_to_copy", "aten::to")


def apply_math_attention_dtype(units: pd.DataFrame, traced_device: str, target_is_gpu: bool
                               ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``units`` with the fp32 ops of a 16-bit SDPA math fallback re-typed to its 16-bit dtype, for a GPU target.

    On a CPU (and on the meta device) ``scaled_dot_product_attention`` of a bf16 / fp16 model runs the math
    fallback when no fused CPU kernel takes it (dropout in training, the meta device): it casts Q, K and V to fp32,
    computes the matmuls, softmax and dropout in fp32 and casts the result back, and autograd's backward of those
    ops runs in fp32 too. A GPU runs the same call as a fused 16-bit kernel, so on a GPU target these ops
    (``math_attention`` of :func:`hybrid.workloads.trace_units.trace_units`) are priced in the attention's dtype and
    the casts, which exist only for the upcast, are host-only units. A CPU target keeps them as traced (its math
    fallback does upcast), and so does a GPU trace (its kernels ran as recorded); so does an fp32 model's attention.
    Returns the units and the account ``{"dtype", "ops", "casts", "fp32_ops"}`` (ops re-typed, casts made
    host-only; on a CPU target the 16-bit attention's ops kept in fp32 as traced, ``fp32_ops``, which a prediction
    warns of: :meth:`hybrid.workloads.trace_costing.TracePrediction.dtype_fallbacks`)."""
    info: dict[str, Any] = {"dtype": "", "ops": 0, "casts": 0, "fp32_ops": 0}
    if traced_device not in MATH_UPCAST_DEVICES or "math_attention" not in units.columns:
        return units, info
    scope = units["math_attention"].to_numpy(dtype=object)
    sel = (scope != "") & units["kind"].isin(["op"]).to_numpy(dtype=bool)
    if not sel.any():
        return units, info
    rows = units["row"].to_numpy(dtype=object).copy()
    cast = sel & units["name"].isin(_CAST_OPS).to_numpy(dtype=bool)
    fp32 = sel & ~cast & np.array([isinstance(r, dict) and r.get("dtype") == "fp32" for r in rows], dtype=bool)
    if not target_is_gpu:  # the CPU's fallback upcasts as traced: kept in fp32, counted
        info.update(dtype="/".join(sorted(set(scope[sel]))), fp32_ops=int(fp32.sum()))
        return units, info
    kind = units["kind"].to_numpy(dtype=object).copy()
    label = units["label"].to_numpy(dtype=object).copy()
    for i in np.flatnonzero(fp32):
        rows[i] = {**rows[i], "dtype": scope[i]}
    kind[cast], label[cast], rows[cast] = "view", "view/host ops", None
    units = units.copy()
    units["row"] = pd.Series(rows, index=units.index, dtype=object)
    units["kind"], units["label"] = kind, label
    info.update(dtype="/".join(sorted(set(scope[sel]))), ops=int(fp32.sum()), casts=int(cast.sum()))
    return units, info
