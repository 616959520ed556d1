"""Plain dataclasses for single ops. Each reports its FLOPs and minimum bytes and converts to a table row.

The dataclasses are a convenience front-end: the cost formulas live once, vectorised, in
:mod:`hybrid.ops.families`, and a dataclass evaluates them on a one-row table.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from hybrid.errors import InvalidInputError
from hybrid.ops.families import COLLECTIVE_OPS, INDEX_DISTS, family_of
from hybrid.ops.roofline import DIRECTIONS
from hybrid.units import dtype_bytes, normalize_dtype


@dataclass(frozen=True)
class OpSpec:
    """Base class: subclasses set ``op`` (canonical op name) and the family's shape fields."""

    positive_fields: ClassVar[tuple[str, ...]] = ()
    #: fields that count things (dimensions, rows, ranks, bytes): whole numbers, as the table schema requires of
    #: the same columns (``hybrid.data.schema``); an optional one (``kv_heads``) may be None
    integer_fields: ClassVar[tuple[str, ...]] = ()
    #: optional numeric fields that may be 0 but not negative (None: the family's default)
    nonnegative_fields: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        # The same checks the table schema makes of these columns: a dataclass op is priced by the same formulas
        # without going through it, so an infinite, fractional or negative size gave an infinite, fractional or
        # negative FLOP / byte count instead of an error. numpy numbers (shapes computed with numpy) are numbers.
        name_ = type(self).__name__
        for name in (*self.positive_fields, *self.nonnegative_fields):
            value = getattr(self, name)
            if value is None and name not in self.positive_fields:
                continue
            positive = name in self.positive_fields
            if (not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_))
                    or not math.isfinite(value) or not (value > 0 if positive else value >= 0)):
                raise InvalidInputError(f"{name_}.{name} must be a {'positive' if positive else 'non-negative'} "
                                        f"number (finite), got {value!r}")
            if name in self.integer_fields:
                if value != round(value):
                    raise InvalidInputError(f"{name_}.{name} must be a whole number, got {value!r}")
                value = int(value)
            object.__setattr__(self, name, value if isinstance(value, int) else float(value))
        if hasattr(self, "dtype"):
            object.__setattr__(self, "dtype", normalize_dtype(self.dtype))  # type: ignore[attr-defined]
        if hasattr(self, "direction"):
            direction = str(self.direction).strip().lower()  # type: ignore[attr-defined]
            if direction not in DIRECTIONS:
                raise InvalidInputError(f"{name_}.direction must be one of {DIRECTIONS}, got "
                                        f"{self.direction!r}")  # type: ignore[attr-defined]
            object.__setattr__(self, "direction", direction)
        default_op = next((f.default for f in fields(self) if f.name == "op"), None)
        if isinstance(default_op, str):  # an op of the class's family: another family's op lacks its columns
            family = family_of(default_op)
            if self.op_name not in family.ops:
                raise InvalidInputError(f"{name_}.op must be one of {', '.join(family.ops)}, got {self.op_name!r}")

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
    integer_fields: ClassVar[tuple[str, ...]] = ("m", "n", "k", "b")

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
    integer_fields: ClassVar[tuple[str, ...]] = ("elements",)
    nonnegative_fields: ClassVar[tuple[str, ...]] = ("n_inputs", "n_outputs", "flops_per_element")


@dataclass(frozen=True)
class Norm(OpSpec):
    rows: int
    hidden: int
    dtype: str = "fp16"
    op: str = "layernorm"  # or "rmsnorm"
    direction: str = "fwd"
    positive_fields: ClassVar[tuple[str, ...]] = ("rows", "hidden")
    integer_fields: ClassVar[tuple[str, ...]] = ("rows", "hidden")


@dataclass(frozen=True)
class Softmax(OpSpec):
    rows: int
    hidden: int
    dtype: str = "fp16"
    op: str = "softmax"
    direction: str = "fwd"
    positive_fields: ClassVar[tuple[str, ...]] = ("rows", "hidden")
    integer_fields: ClassVar[tuple[str, ...]] = ("rows", "hidden")


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
    integer_fields: ClassVar[tuple[str, ...]] = ("num_embeddings", "embedding_dim", "batch_size", "num_tables")
    nonnegative_fields: ClassVar[tuple[str, ...]] = ("zipf_alpha",)

    def __post_init__(self) -> None:
        super().__post_init__()
        dist = str(self.index_dist).strip().lower()
        if dist not in INDEX_DISTS:
            raise InvalidInputError(f"EmbeddingBag.index_dist must be one of {INDEX_DISTS}, got {self.index_dist!r}")
        object.__setattr__(self, "index_dist", dist)


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
    integer_fields: ClassVar[tuple[str, ...]] = ("batch", "heads", "q_len", "kv_len", "head_dim", "kv_heads")

    def __post_init__(self) -> None:
        kv = self.kv_heads
        if kv is not None and (not isinstance(kv, numbers.Real) or isinstance(kv, (bool, np.bool_))
                               or not math.isfinite(kv) or kv < 1 or kv != round(kv)):
            raise InvalidInputError(f"Attention.kv_heads must be a positive whole number or None, got {kv!r}")
        super().__post_init__()
        if kv is not None:
            object.__setattr__(self, "kv_heads", int(kv))
            if self.heads % int(kv):  # GQA: each key/value head serves a whole group of query heads
                raise InvalidInputError(f"Attention: query heads ({self.heads}) must be a multiple of the key/value "
                                        f"heads ({int(kv)})")
        causal = self.causal
        if isinstance(causal, (bool, np.bool_)) or (isinstance(causal, numbers.Real) and causal in (0, 1)):  # True / False, numpy's, or 0 / 1 as tables write it
            object.__setattr__(self, "causal", bool(causal))
        else:
            raise InvalidInputError(f"Attention.causal must be True or False, got {causal!r}")


@dataclass(frozen=True)
class Collective(OpSpec):
    """A collective over ``n_ranks`` ranks on ``n_nodes`` nodes; ``size_bytes`` as nccl-tests reports it."""

    op: str
    size_bytes: int
    n_ranks: int
    n_nodes: int = 1
    dtype: str = "fp32"
    positive_fields: ClassVar[tuple[str, ...]] = ("size_bytes", "n_ranks", "n_nodes")
    integer_fields: ClassVar[tuple[str, ...]] = ("size_bytes", "n_ranks", "n_nodes")

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
