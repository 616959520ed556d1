"""Analytical op cost models: op families (FLOPs, bytes), single-op dataclasses and the vectorised roofline."""

from hybrid.ops.families import FAMILIES, OP_TO_FAMILY, OpFamily, family_of
from hybrid.ops.roofline import (
    ROOFLINE_COLUMNS,
    footprint_bytes,
    memory_fit,
    memory_warning,
    resolve_system,
    roofline,
    system_for_device,
)
from hybrid.ops.spec import (
    Attention,
    Collective,
    Elementwise,
    EmbeddingBag,
    Gemm,
    Norm,
    OpSpec,
    Softmax,
    specs_to_frame,
)

__all__ = [
    "FAMILIES", "OP_TO_FAMILY", "ROOFLINE_COLUMNS", "Attention", "Collective", "Elementwise", "EmbeddingBag", "Gemm",
    "Norm", "OpFamily", "OpSpec", "Softmax", "family_of", "footprint_bytes", "memory_fit", "memory_warning",
    "resolve_system", "roofline", "specs_to_frame", "system_for_device",
]
