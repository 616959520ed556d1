"""Plain dataclasses for single ops. Each reports its FLOPs and minimum bytes and converts to a table row.

The dataclasses are a convenience front-end: the cost formulas live once, vectorised, in
:mod:`hybrid.ops.families`, and a dataclass evaluates them on a one-row table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import pandas as pd

from hybrid.errors import InvalidInputError
from hybrid.ops.families import COLLECTIVE_OPS, family_of
from hybrid.units import dtype_bytes, normalize_dtype


@dataclass(frozen=True)
class OpSpec:
    """Base class: subclasses set ``op`` (canonical op name) and the family's shape fields."""

    positive_fields: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for name in self.positive_fields:
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise InvalidInputError(f"{type(self).__name__}.{name} must be a positive number, got {value!r}")
        if hasattr(self, "dtype"):
            object.__setattr__(self, "dtype", normalize_dtype(self.dtype))  # type: ignore[attr-defined]

    @property
    def op_name(self) -> str:
        return str(self.op)

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["op"] = self.op_name
        return row

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([self.to_row()])

    def flops(self) -> float:
        return float(family_of(self.op_name).flops(self.to_frame())[0])

    def bytes(self) -> float:
        return float(family_of(self.op_name).bytes(self.to_frame())[0])

    def arithmetic_intensity(self) -> float:
        return self.flops() / self.bytes()


@dataclass(frozen=True)
class Gemm(OpSpec):
    """``C[b, m, n] = A[b, m, k] @ B[b, k, n]`` (``op='linear'`` shares B across the batch)."""

    m: int
    n: int
    k: int
    b: int = 1
    dtype: str = "fp16"
    op: str = "gemm"
    positive_fields: ClassVar[tuple[str, ...]] = ("m", "n", "k", "b")

    @property
    def is_gemv(self) -> bool:
        return self.m == 1 or self.n == 1


@dataclass(frozen=True)
class Elementwise(OpSpec):
    elements: int
    variant: str = "add"
    n_inputs: int | None = None
    n_outputs: int | None = None
    flops_per_element: float | None = None
    dtype: str = "fp16"
    op: str = "elementwise"
    positive_fields: ClassVar[tuple[str, ...]] = ("elements",)


@dataclass(frozen=True)
class Norm(OpSpec):
    rows: int
    hidden: int
    dtype: str = "fp16"
    op: str = "layernorm"  # or "rmsnorm"
    direction: str = "fwd"
    positive_fields: ClassVar[tuple[str, ...]] = ("rows", "hidden")


@dataclass(frozen=True)
class Softmax(OpSpec):
    rows: int
    hidden: int
    dtype: str = "fp16"
    op: str = "softmax"
    direction: str = "fwd"
    positive_fields: ClassVar[tuple[str, ...]] = ("rows", "hidden")


@dataclass(frozen=True)
class EmbeddingBag(OpSpec):
    """Pooled lookups into ``num_tables`` tables of ``num_embeddings`` x ``embedding_dim``."""

    num_embeddings: int
    embedding_dim: int
    pooling_factor: float
    batch_size: int
    num_tables: int = 1
    dtype: str = "fp32"
    index_dist: str = "uniform"  # or "zipf"
    zipf_alpha: float = 0.0
    direction: str = "fwd"
    op: str = "embedding_bag"
    positive_fields: ClassVar[tuple[str, ...]] = (
        "num_embeddings", "embedding_dim", "pooling_factor", "batch_size", "num_tables")


@dataclass(frozen=True)
class Attention(OpSpec):
    batch: int
    heads: int
    q_len: int
    kv_len: int
    head_dim: int
    kv_heads: int | None = None
    causal: bool = False
    dtype: str = "bf16"
    direction: str = "fwd"
    op: str = "attention"
    positive_fields: ClassVar[tuple[str, ...]] = ("batch", "heads", "q_len", "kv_len", "head_dim")


@dataclass(frozen=True)
class Collective(OpSpec):
    """A collective over ``n_ranks`` ranks on ``n_nodes`` nodes; ``size_bytes`` as nccl-tests reports it."""

    op: str
    size_bytes: int
    n_ranks: int
    n_nodes: int = 1
    dtype: str = "fp32"
    positive_fields: ClassVar[tuple[str, ...]] = ("size_bytes", "n_ranks", "n_nodes")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.op not in COLLECTIVE_OPS:
            raise InvalidInputError(f"unknown collective {self.op!r}; known: {', '.join(COLLECTIVE_OPS)}")
        if self.n_nodes > self.n_ranks:
            raise InvalidInputError(f"n_nodes ({self.n_nodes}) cannot exceed n_ranks ({self.n_ranks})")
        elem = dtype_bytes(self.dtype)  # also rejects an unknown dtype
        if elem >= 1 and self.size_bytes % int(elem):
            raise InvalidInputError(f"size {self.size_bytes} B is not a whole number of {self.dtype} elements "
                                    f"({int(elem)} B each)")


def specs_to_frame(specs: list[OpSpec]) -> pd.DataFrame:
    """Many dataclass ops to one table (any mix of families)."""
    if not specs:
        raise InvalidInputError("no ops given")
    return pd.DataFrame([s.to_row() for s in specs])


__all__ = [
    "Attention", "Collective", "Elementwise", "EmbeddingBag", "Gemm", "Norm", "OpSpec", "Softmax", "specs_to_frame",
]
