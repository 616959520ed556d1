"""Embedding sharding plans: which ranks hold which part of each table.

A plan maps table name -> :class:`Shard`. Four placement types, as in TorchRec:

``table_wise``
    the whole table on exactly one rank; its pooled outputs travel to the other ranks by all-to-all.
``row_wise``
    rows split evenly over ``ranks`` (the first ``rows % len(ranks)`` ranks get one extra row); every rank
    computes partial sums for the whole batch, combined by a reduce-scatter.
``column_wise``
    ``embedding_dim`` split evenly over ``ranks`` (must divide); outputs travel by all-to-all.
``data_parallel``
    replicated on every rank; lookups are local, gradients join the dense all-reduce.

The on-disk format (YAML or JSON) is a mapping ``{table: {type: ..., ranks: [...]}}``, optionally under a top
level ``plan:`` key (so a full DLRM config also loads as a plan).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from hybrid.errors import InvalidInputError

if TYPE_CHECKING:  # pragma: no cover
    from hybrid.workloads.dlrm import DLRMConfig, TableConfig

#: Sharding types and their accepted spellings.
SHARD_TYPES: tuple[str, ...] = ("table_wise", "row_wise", "column_wise", "data_parallel")
_TYPE_ALIASES: dict[str, str] = {
    "tw": "table_wise", "table": "table_wise", "tablewise": "table_wise",
    "rw": "row_wise", "row": "row_wise", "rowwise": "row_wise",
    "cw": "column_wise", "column": "column_wise", "columnwise": "column_wise",
    "dp": "data_parallel", "data": "data_parallel", "replicated": "data_parallel",
}


def normalize_shard_type(name: str) -> str:
    """Canonical sharding type for ``name`` (``"tw"`` -> ``"table_wise"``), or raise."""
    key = str(name).strip().lower().replace("-", "_")
    if key in SHARD_TYPES:
        return key
    if key.replace("_", "") in _TYPE_ALIASES:
        return _TYPE_ALIASES[key.replace("_", "")]
    raise InvalidInputError(f"unknown sharding type {name!r}; known: {', '.join(SHARD_TYPES)}")


@dataclass(frozen=True)
class Shard:
    """Placement of one table: a sharding ``type`` and the ``ranks`` that hold it (empty for data-parallel)."""

    type: str
    ranks: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        kind = normalize_shard_type(self.type)
        object.__setattr__(self, "type", kind)
        ranks = tuple(int(r) for r in self.ranks)
        object.__setattr__(self, "ranks", ranks)
        if kind == "data_parallel":  # replicated on every rank: ranks, if given, must be all of them (validate)
            return
        if not ranks:
            raise InvalidInputError(f"{kind} shard needs at least one rank")
        if kind == "table_wise" and len(ranks) != 1:
            raise InvalidInputError(f"table_wise shard takes exactly one rank, got {list(ranks)}")
        if len(set(ranks)) != len(ranks):
            raise InvalidInputError(f"{kind} shard lists a rank twice: {list(ranks)}")
        if min(ranks) < 0:
            raise InvalidInputError(f"{kind} shard has a negative rank: {list(ranks)}")

    def holders(self, world: int) -> tuple[int, ...]:
        """Ranks that hold a piece of the table in a ``world``-rank job."""
        return tuple(range(world)) if self.type == "data_parallel" else self.ranks

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type} if self.type == "data_parallel" else {"type": self.type, "ranks": list(self.ranks)}

    @classmethod
    def from_value(cls, value: Any, table: str = "?") -> Shard:
        """A shard from ``{type, ranks}``, a bare rank (table-wise) or a type name (``"data_parallel"``)."""
        if isinstance(value, Shard):
            return value
        try:
            if isinstance(value, bool):
                raise InvalidInputError(f"not a shard: {value!r}")
            if isinstance(value, int):
                return cls("table_wise", (value,))
            if isinstance(value, str):
                return cls(value, ())
            if isinstance(value, Mapping):
                unknown = set(value) - {"type", "ranks", "rank"}
                if unknown:
                    raise InvalidInputError(f"unknown key(s) {sorted(unknown)} (expected type, ranks)")
                if "type" not in value:
                    raise InvalidInputError("missing 'type'")
                ranks = value.get("ranks", [value["rank"]] if "rank" in value else [])
                if isinstance(ranks, int):
                    ranks = [ranks]
                if not isinstance(ranks, (list, tuple)) or not all(
                    isinstance(r, int) and not isinstance(r, bool) for r in ranks
                ):
                    raise InvalidInputError(f"ranks must be a list of integers, got {ranks!r}")
                return cls(str(value["type"]), tuple(ranks))
            raise InvalidInputError(f"expected a mapping {{type, ranks}}, got {type(value).__name__}")
        except InvalidInputError as exc:
            raise InvalidInputError(f"plan entry for table {table!r}: {exc}") from None


class TableShard(NamedTuple):
    """One piece of a table held by one rank: the table, the rows and the embedding columns it holds."""

    table: TableConfig
    rows: int
    dim: int


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` integers differing by at most one, larger ones first."""
    base, extra = divmod(int(total), int(parts))
    return [base + (1 if i < extra else 0) for i in range(parts)]


class ShardingPlan(Mapping[str, Shard]):
    """Mapping table name -> :class:`Shard` (immutable; use :meth:`with_shard` to derive a new plan)."""

    def __init__(self, shards: Mapping[str, Shard | Mapping[str, Any] | int | str] | None = None):
        self._shards: dict[str, Shard] = {
            str(name): Shard.from_value(value, str(name)) for name, value in (shards or {}).items()
        }

    # Mapping protocol ------------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Shard:
        return self._shards[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._shards)

    def __len__(self) -> int:
        return len(self._shards)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShardingPlan) and self._shards == other._shards

    def __hash__(self) -> int:  # plans are used as dict keys in searches
        return hash(tuple(sorted(self._shards.items())))

    def __repr__(self) -> str:
        return f"ShardingPlan({len(self)} tables)"

    def with_shard(self, table: str, shard: Shard) -> ShardingPlan:
        shards = dict(self._shards)
        shards[table] = shard
        return ShardingPlan(shards)

    # (de)serialisation -----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {name: shard.to_dict() for name, shard in self._shards.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ShardingPlan:
        """A plan from ``{table: {type, ranks}}`` (or a document with a top-level ``plan`` key)."""
        if not isinstance(data, Mapping):
            what = {"str": "text", "list": "a list", "NoneType": "nothing"}.get(type(data).__name__, type(data).__name__)
            raise InvalidInputError(f"not a sharding plan: it reads as {what}, not a mapping of table -> {{type, ranks}} "
                                    "(a YAML or JSON plan, as `hybrid shard --output` writes)")
        if "plan" in data and isinstance(data["plan"], Mapping):
            data = data["plan"]
        return cls(data)

    @classmethod
    def from_file(cls, path: str | Path) -> ShardingPlan:
        """Load a plan from a YAML or JSON file."""
        from hybrid.workloads.dlrm import load_document

        doc = load_document(path, what="sharding plan")
        if isinstance(doc, Mapping) and any(k in doc for k in ("tables", "num_tables", "variant")):
            if not isinstance(doc.get("plan"), Mapping):  # a DLRM config given where a plan belongs
                raise InvalidInputError(f"{path} is a DLRM config without a `plan`, not a sharding plan (a mapping "
                                        "of table -> {type, ranks}, as `hybrid shard --output` writes)")
            doc = doc["plan"]  # a config's own plan
        try:
            return cls.from_dict(doc)
        except InvalidInputError as exc:  # a malformed entry: say which file, as the other plan errors do
            raise InvalidInputError(f"{path}: {exc}") from None

    from_yaml = from_file

    def save(self, path: str | Path) -> Path:
        """Write the plan as YAML (``.yaml``/``.yml``) or JSON (anything else), atomically."""
        from hybrid.workloads.dlrm import write_document

        return write_document(self.to_dict(), path)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    # checks and expansion --------------------------------------------------------------------------------
    def validate(self, config: DLRMConfig, complete: bool = True) -> ShardingPlan:
        """Check the plan against ``config``; returns ``self`` or raises :class:`InvalidInputError`.

        Unknown tables, ranks outside ``[0, gpus)``, column-wise splits that do not divide the table's
        dimension, row-wise splits over more ranks than rows, and (if ``complete``) tables without a placement
        are errors.
        """
        tables = {t.name: t for t in config.tables}
        unknown = [name for name in self._shards if name not in tables]
        if unknown:
            raise InvalidInputError(f"plan names unknown table(s) {unknown[:5]}; config has {len(tables)} tables")
        world = config.gpus
        for name, shard in self._shards.items():
            bad = [r for r in shard.ranks if r >= world]
            if bad:
                raise InvalidInputError(f"plan for table {name!r}: rank(s) {bad} out of range for {world} GPUs; the "
                                        f"plan places tables on ranks up to {self.min_gpus - 1}, so it is for at "
                                        f"least {self.min_gpus} GPUs")
            table = tables[name]
            if shard.type == "data_parallel" and shard.ranks and sorted(shard.ranks) != list(range(world)):
                raise InvalidInputError(
                    f"plan for table {name!r}: data_parallel replicates the table on every rank; its ranks "
                    f"{list(shard.ranks)} are not all {world} (leave them out; to hold it on some ranks, shard it "
                    "row- or column-wise)")
            if shard.type == "column_wise" and table.embedding_dim % len(shard.ranks):
                raise InvalidInputError(
                    f"plan for table {name!r}: column_wise over {len(shard.ranks)} ranks needs embedding_dim "
                    f"divisible by {len(shard.ranks)}, got {table.embedding_dim}")
            if shard.type == "row_wise" and table.num_embeddings < len(shard.ranks):
                raise InvalidInputError(
                    f"plan for table {name!r}: row_wise over {len(shard.ranks)} ranks but only "
                    f"{table.num_embeddings} rows")
        if complete:
            missing = [name for name in tables if name not in self._shards]
            if missing:
                raise InvalidInputError(f"plan has no placement for table(s) {missing[:5]}"
                                        + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
        return self

    @property
    def rank_free(self) -> bool:
        """True when the plan names no rank (every table data-parallel, replicated on whatever ranks there are): it
        is the same plan for any rank count, where a plan that places tables on ranks was written for its own."""
        return all(shard.type == "data_parallel" and not shard.ranks for shard in self._shards.values())

    @property
    def min_gpus(self) -> int:
        """The fewest ranks the plan fits in: its highest rank + 1 (1 for a plan of data-parallel tables only)."""
        return 1 + max((r for shard in self._shards.values() for r in shard.ranks), default=0)

    def per_rank_tables(self, config: DLRMConfig) -> list[list[TableShard]]:
        """For each rank ``0..gpus-1`` the list of :class:`TableShard` ``(table, rows, dim)`` it holds."""
        self.validate(config)
        out: list[list[TableShard]] = [[] for _ in range(config.gpus)]
        for table in config.tables:
            shard = self._shards[table.name]
            if shard.type == "table_wise":
                out[shard.ranks[0]].append(TableShard(table, table.num_embeddings, table.embedding_dim))
            elif shard.type == "row_wise":
                for rank, rows in zip(shard.ranks, split_evenly(table.num_embeddings, len(shard.ranks)), strict=True):
                    out[rank].append(TableShard(table, rows, table.embedding_dim))
            elif shard.type == "column_wise":
                dim = table.embedding_dim // len(shard.ranks)
                for rank in shard.ranks:
                    out[rank].append(TableShard(table, table.num_embeddings, dim))
            else:  # data_parallel
                for rank in range(config.gpus):
                    out[rank].append(TableShard(table, table.num_embeddings, table.embedding_dim))
        return out

    def type_counts(self) -> dict[str, int]:
        """How many tables use each sharding type."""
        counts = dict.fromkeys(SHARD_TYPES, 0)
        for shard in self._shards.values():
            counts[shard.type] += 1
        return {k: v for k, v in counts.items() if v}
