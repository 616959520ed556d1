"""DLRM workload description: model/table configuration, YAML/JSON loading and validation.

The configuration format (YAML or JSON)::

    name: example
    system: DGX-A100          # catalog system (or a device -> generic node)
    gpus: 8
    batch_size_per_gpu: 2048
    dtype: fp32
    dense_features: 13
    bottom_mlp: [512, 256, 64]   # last width must equal embedding_dim for dot interaction
    top_mlp: [512, 256, 1]
    interaction: dot          # dot | cat | dcn (DCNv2 cross layers: dcn_layers, dcn_low_rank)
    embedding_dim: 64         # default for tables that omit it
    embedding_dtype: fp32     # storage/lookup dtype of the tables (default: dtype); mixed precision = fp16 + fp32
    embedding_placement: hbm  # hbm | host | auto (tables that do not fit a GPU's memory live in host memory)
    lookup_output_dtype: fp32 # dtype the lookups write (default: embedding_dtype; a cast to dtype follows if wider)
    grad_scaler: false        # PyTorch AMP loss scaling: gradients unscaled (and checked) before the optimizer
    interaction_pad_to: 1     # dot interaction output zero-padded to a multiple of this (NVIDIA's fused kernels: 8)
    # or `variant: mlperf` (mlperf | mlperf-dcnv2 | dle-small | dle-large): a published model, other keys override
    optimizer: sgd            # sgd | adagrad
    tables:                   # or num_tables + table_generator: {seed, rows: [lo, hi], pooling: [lo, hi], ...}
      - {name: t0, num_embeddings: 1000000, pooling_factor: 20, index_dist: zipf, zipf_alpha: 1.05}
    plan:                     # optional, see hybrid.sharding.plan
      t0: {type: table_wise, ranks: [3]}

The per-iteration task graph built from a config lives in :mod:`hybrid.workloads.dlrm_graph`; published model
variants (MLPerf DLRM, DLRM-DCNv2, DeepLearningExamples small/large) are built in by name in
:mod:`hybrid.workloads.dlrm_variants`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from hybrid.atomic import check_creatable, write_text
from hybrid.errors import InvalidInputError, WorkloadWarning
from hybrid.sharding.plan import ShardingPlan
from hybrid.units import normalize_dtype

INTERACTIONS = ("dot", "cat", "dcn")
PLACEMENTS = ("hbm", "host", "auto")
BOTTOM_PLACEMENTS = ("data_parallel", "model_parallel")
OPTIMIZERS = ("sgd", "adagrad")
INDEX_DISTS = ("uniform", "zipf")
#: Largest integer a config field may hold: the op tables the cost models price take integers below 2**62 (about
#: 4.6e18, :data:`hybrid.data.schema.MAX_INT`) and the DLRM graph rounds op shapes to 6 significant digits (up, past
#: 2**62, from 2**62 - 512); a larger row count, width or global batch was accepted here and failed later as an op
#: table's row ("predict: row 6 (CSV line 7), column 'num_embeddings' ... is too large (at most 2^62)") in ``hybrid
#: shard``, or in ``simulate`` of host-placed tables.
MAX_INT_PRICED = 10**18
#: Most rows a table can have: what the op tables price (an int64 index would address up to 2**63 - 1).
MAX_ROWS = MAX_INT_PRICED
#: Dense training dtypes published DLRM training runs use (MLPerf, NVIDIA DeepLearningExamples, TorchRec: FP32,
#: TF32 or mixed FP16/BF16); another ``dtype`` (fp8, fp64, ...) is priced as given, with a :class:`WorkloadWarning`.
TRAINING_DTYPES = ("fp32", "tf32", "fp16", "bf16")
#: Pooling factors (mean lookups per sample) below this get a :class:`WorkloadWarning`: below 1 is a feature that is
#: often empty, but one lookup in a thousand samples or fewer is more likely a typo than a workload.
MIN_POOLING_FACTOR = 1e-3


# ------------------------------------------------------------------------------------------------ file helpers
def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are unique (a table placed twice in a plan is an error, not the last one wins)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise InvalidInputError(f"key {k!r} appears twice in one mapping")
        out[k] = v
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that repeats a key (PyYAML keeps the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        # the keys written in this mapping (a merge key, <<: *anchor, brings keys an explicit one may override)
        own = [k for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"]
        seen: set[Any] = set()
        for key_node in own:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_document(path: str | os.PathLike, what: str = "config") -> Any:
    """Parse a YAML or JSON file (JSON is YAML); errors name the file and the problem in one line."""
    p = Path(path)
    if not p.is_file():
        raise InvalidInputError(f"{what} file not found: {p}")
    try:
        text = p.read_text(encoding="utf-8-sig")  # a byte-order mark (Windows editors) was a malformed JSON file
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"cannot read {what} {p}: {exc}") from None
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text, object_pairs_hook=_unique_pairs)
        else:
            data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except (json.JSONDecodeError, yaml.YAMLError, InvalidInputError) as exc:
        first = " ".join(str(exc).split())[:200]
        raise InvalidInputError(f"malformed {what} {p}: {first}") from None
    if data is None:
        raise InvalidInputError(f"{what} {p} is empty")
    return data


#: File names a configuration or plan document is written under: YAML by suffix, JSON otherwise.
DOCUMENT_SUFFIXES = (".json", ".yaml", ".yml")


def check_document_path(path: str | os.PathLike) -> Path:
    """``path`` as a :class:`Path` if it names a document :func:`write_document` writes (:data:`DOCUMENT_SUFFIXES`);
    else a clear error (call it before the work that produces the document): another suffix, or a path under a
    file (the write would fail only once the work is done)."""
    p = Path(path)
    if p.suffix.lower() not in DOCUMENT_SUFFIXES:
        raise InvalidInputError(f"output {p}: use a .json, .yaml or .yml file name")
    return check_creatable(p)


def write_document(data: Any, path: str | os.PathLike) -> Path:
    """Write ``data`` as YAML (``.yaml``/``.yml``) or JSON, through a temporary file and a rename."""
    p = Path(path)
    if p.suffix.lower() in (".yaml", ".yml"):
        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None)
    else:
        text = json.dumps(data, indent=2) + "\n"
    return write_text(p, text)


def _positive_int(value: Any, what: str, limit: int | None = MAX_INT_PRICED) -> int:
    """``value`` as a positive integer, at most ``limit`` (None: unbounded; the caller checks), else one line."""
    if isinstance(value, bool) or value is None:
        raise InvalidInputError(f"{what} must be a positive integer, got {value!r}")
    if isinstance(value, int | np.integer) and value > 0:  # exact (a float loses digits past 2**53)
        number = int(value)
    else:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise InvalidInputError(f"{what} must be a positive integer, got {value!r}") from None
        if not np.isfinite(number) or number <= 0 or number != int(number):
            raise InvalidInputError(f"{what} must be a positive integer, got {value!r}")
        number = int(number)
    if limit is not None and number > limit:
        raise InvalidInputError(f"{what} {value!r} is too large: hybrid prices integers up to 10**18")
    return number


def _positive_float(value: Any, what: str, allow_zero: bool = False) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{what} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not np.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        raise InvalidInputError(f"{what} must be {'non-negative' if allow_zero else 'positive'}, got {value!r}")
    return number


def _check_keys(data: Mapping[str, Any], allowed: Sequence[str], what: str) -> None:
    unknown = sorted(set(map(str, data)) - set(allowed))
    if unknown:
        raise InvalidInputError(f"{what}: unknown key(s) {unknown}; allowed: {', '.join(allowed)}")


# ------------------------------------------------------------------------------------------------ tables
@dataclass(frozen=True)
class TableConfig:
    """One embedding table: rows, width, mean lookups per sample (pooling) and index distribution."""

    name: str
    num_embeddings: int
    embedding_dim: int = 64
    pooling_factor: float = 1.0
    index_dist: str = "uniform"
    zipf_alpha: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise InvalidInputError(f"table name must be a non-empty string, got {self.name!r}")
        where = f"table {self.name!r}"
        rows = _positive_int(self.num_embeddings, f"{where}: num_embeddings", limit=None)
        if rows > MAX_ROWS:
            raise InvalidInputError(f"{where}: num_embeddings {self.num_embeddings!r} is more rows than hybrid prices "
                                    "(at most 10**18; an int64 index would address 2**63 - 1)")
        object.__setattr__(self, "num_embeddings", rows)
        object.__setattr__(self, "embedding_dim", _positive_int(self.embedding_dim, f"{where}: embedding_dim"))
        object.__setattr__(self, "pooling_factor", _positive_float(self.pooling_factor, f"{where}: pooling_factor"))
        dist = str(self.index_dist).strip().lower()
        if dist not in INDEX_DISTS:
            raise InvalidInputError(f"{where}: index_dist must be one of {INDEX_DISTS}, got {self.index_dist!r}")
        object.__setattr__(self, "index_dist", dist)
        alpha = _positive_float(self.zipf_alpha, f"{where}: zipf_alpha", allow_zero=True)
        if dist == "uniform" and alpha > 0:
            raise InvalidInputError(f"{where}: index_dist uniform contradicts zipf_alpha {alpha:g} (uniform indices "
                                    "have no skew); drop one of them")
        if dist == "zipf" and alpha == 0:  # a Zipf law of exponent 0 is uniform: a skew meant, none priced
            raise InvalidInputError(f"{where}: index_dist zipf needs zipf_alpha > 0, the skew's exponent (e.g. 1.05; "
                                    "0 would be uniform indices)")
        object.__setattr__(self, "zipf_alpha", alpha if dist == "zipf" else 0.0)

    FIELDS = ("name", "num_embeddings", "embedding_dim", "pooling_factor", "index_dist", "zipf_alpha")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], default_dim: int = 64, index: int = 0) -> TableConfig:
        if not isinstance(data, Mapping):
            raise InvalidInputError(f"table #{index} must be a mapping, got {type(data).__name__}")
        _check_keys(data, cls.FIELDS, f"table #{index}")
        if "num_embeddings" not in data:
            raise InvalidInputError(f"table #{index} ({data.get('name', 'unnamed')}): missing num_embeddings")
        kwargs = dict(data)
        kwargs.setdefault("name", f"t{index}")
        kwargs.setdefault("embedding_dim", default_dim)
        if kwargs.get("index_dist") is None:
            kwargs["index_dist"] = "zipf" if float(kwargs.get("zipf_alpha", 0) or 0) > 0 else "uniform"
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name, "num_embeddings": self.num_embeddings, "embedding_dim": self.embedding_dim,
            "pooling_factor": self.pooling_factor, "index_dist": self.index_dist,
        }
        if self.index_dist == "zipf":
            out["zipf_alpha"] = self.zipf_alpha
        return out

    def bytes(self, dtype_bytes: float) -> float:
        """Size of the full table in bytes."""
        return float(self.num_embeddings) * self.embedding_dim * dtype_bytes


@dataclass(frozen=True)
class TableGenerator:
    """Synthetic tables: rows log-uniform in ``rows``, pooling uniform in ``pooling``, reproducible by ``seed``.

    ``zipf_alpha`` may be a number or a ``[lo, hi]`` range (uniform); ``dims`` an optional list of embedding
    dimensions to draw from (else the config default).
    """

    seed: int = 0
    rows: tuple[int, int] = (1000, 10_000_000)
    pooling: tuple[float, float] = (1.0, 50.0)
    index_dist: str = "zipf"
    zipf_alpha: tuple[float, float] = (1.05, 1.05)
    dims: tuple[int, ...] = ()

    FIELDS = ("seed", "rows", "pooling", "index_dist", "zipf_alpha", "dims")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableGenerator:
        if not isinstance(data, Mapping):
            raise InvalidInputError("table_generator must be a mapping")
        _check_keys(data, cls.FIELDS, "table_generator")

        def pair(name: str, default: tuple[float, float], conv: type) -> tuple:
            value = data.get(name, default)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = (value, value)
            if not isinstance(value, (list, tuple)) or len(value) != 2:
                raise InvalidInputError(f"table_generator.{name} must be [lo, hi], got {value!r}")
            if conv is int:  # row counts: whole and positive (0.5 rows would round to an empty table)
                lo, hi = (_positive_int(v, f"table_generator.{name}", limit=None) for v in value)
                if hi > MAX_ROWS:
                    raise InvalidInputError(f"table_generator.{name}: {hi} is more rows than hybrid prices (at most "
                                            "10**18; an int64 index would address 2**63 - 1)")
            else:
                lo, hi = (conv(_positive_float(v, f"table_generator.{name}", allow_zero=name == "zipf_alpha"))
                          for v in value)
            if lo > hi:
                raise InvalidInputError(f"table_generator.{name}: lo {lo} > hi {hi}")
            return (lo, hi)

        dims = data.get("dims", ())
        if isinstance(dims, int | float) and not isinstance(dims, bool):
            dims = (dims,)
        if not isinstance(dims, list | tuple):
            raise InvalidInputError(f"table_generator.dims must be a list of embedding dimensions, got {dims!r}")
        seed = data.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise InvalidInputError(f"table_generator.seed must be a non-negative integer, got {seed!r}")
        # checked here, by the generator's own key: each generated table's check named table 't0' of a config that
        # lists no table
        dist = str(data.get("index_dist", "zipf")).strip().lower()
        if dist not in INDEX_DISTS:
            raise InvalidInputError(f"table_generator.index_dist must be one of {INDEX_DISTS}, got "
                                    f"{data.get('index_dist')!r}")
        alpha = pair("zipf_alpha", cls.zipf_alpha, float)
        if dist == "zipf" and alpha[0] <= 0:
            raise InvalidInputError(f"table_generator.zipf_alpha: index_dist zipf needs exponents > 0, got {alpha[0]:g} "
                                    "(0 would be uniform indices)")
        return cls(
            seed=seed,
            rows=pair("rows", cls.rows, int),
            pooling=pair("pooling", cls.pooling, float),
            index_dist=dist,
            zipf_alpha=alpha,
            dims=tuple(_positive_int(d, "table_generator.dims") for d in dims),
        )

    def generate(self, num_tables: int, default_dim: int) -> list[TableConfig]:
        rng = np.random.default_rng(self.seed)
        lo, hi = np.log(self.rows[0]), np.log(self.rows[1])
        rows = np.maximum(1, np.round(np.exp(rng.uniform(lo, hi, num_tables)))).astype(np.int64)
        pooling = np.round(rng.uniform(self.pooling[0], self.pooling[1], num_tables), 2)
        pooling = np.maximum(pooling, 0.01)
        alpha = rng.uniform(self.zipf_alpha[0], self.zipf_alpha[1], num_tables)
        dims = rng.choice(np.asarray(self.dims), num_tables) if self.dims else np.full(num_tables, default_dim)
        return [
            TableConfig(f"t{i}", int(rows[i]), int(dims[i]), float(pooling[i]), self.index_dist,
                        float(round(alpha[i], 4)) if self.index_dist == "zipf" else 0.0)
            for i in range(num_tables)
        ]


# ------------------------------------------------------------------------------------------------ model
@dataclass(frozen=True)
class DLRMConfig:
    """A DLRM training job: model shape, embedding tables, batch, ranks, system and an optional plan."""

    tables: tuple[TableConfig, ...]
    name: str = "dlrm"
    system: str = "DGX-H100"
    gpus: int = 8
    batch_size_per_gpu: int = 2048
    dtype: str = "fp32"
    dense_features: int = 13
    bottom_mlp: tuple[int, ...] = (512, 256, 64)
    top_mlp: tuple[int, ...] = (512, 256, 1)
    interaction: str = "dot"
    embedding_dim: int = 64
    optimizer: str = "sgd"
    plan: ShardingPlan | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    dcn_layers: int = 3  #: DCNv2 cross layers (``interaction: dcn``)
    dcn_low_rank: int = 512  #: rank of each cross layer's weight (U V^T); 0 = full rank
    embedding_dtype: str | None = None  #: table storage/lookup dtype (None: ``dtype``)
    embedding_placement: str = "hbm"  #: hbm | host | auto (overflow of a GPU's memory goes to host memory)
    #: data_parallel (DDP, like TorchRec) | model_parallel (rank 0 runs it on the global batch and sends its output
    #: in the embedding all-to-all, like NVIDIA DeepLearningExamples' hybrid parallel DLRM)
    bottom_mlp_placement: str = "data_parallel"
    #: dtype the lookup kernels write their pooled outputs in (None: ``embedding_dtype``). When it is wider than
    #: ``dtype`` (mixed precision with FP32 tables), a cast kernel follows the lookups and another precedes their
    #: backward, as PyTorch runs ``.half()`` / autocast on an FP32 lookup's output; set it to ``dtype`` when the
    #: lookup kernel writes half precision itself (e.g. DeepLearningExamples' fused joint embedding on one GPU,
    #: FBGEMM's ``output_dtype``).
    lookup_output_dtype: str | None = None
    #: PyTorch AMP's loss scaling (``torch.cuda.amp.GradScaler``): before the optimizer every gradient is unscaled
    #: in place with an inf/NaN check (the embedding gradients' values, one per lookup, and the dense gradients),
    #: and the host reads the found-inf flag back (``scaler.step``) before it launches the updates.
    grad_scaler: bool = False
    #: the dot interaction's output (bottom output + pairwise dots) zero-padded to a multiple of this many columns,
    #: so that the top MLP's first GEMM has aligned rows: NVIDIA's fused dot-interaction kernels do (DeepLearningExamples
    #: ``padding_size``: the next multiple of 8; HugeCTR's ``Interaction`` layer one zero column, 479 -> 480 for
    #: MLPerf DLRM's 26 tables); the reference and TorchRec do not (1: no padding)
    interaction_pad_to: int = 1

    FIELDS = ("name", "system", "gpus", "batch_size_per_gpu", "dtype", "dense_features", "bottom_mlp", "top_mlp",
              "interaction", "embedding_dim", "optimizer", "tables", "num_tables", "table_generator", "plan",
              "description", "dcn_layers", "dcn_low_rank", "embedding_dtype", "embedding_placement",
              "bottom_mlp_placement", "lookup_output_dtype", "grad_scaler", "interaction_pad_to")
    #: Scalar fields copied from a document (besides tables and plan).
    SCALARS = ("name", "system", "gpus", "batch_size_per_gpu", "dtype", "dense_features", "bottom_mlp", "top_mlp",
               "interaction", "embedding_dim", "optimizer", "dcn_layers", "dcn_low_rank", "embedding_dtype",
               "embedding_placement", "bottom_mlp_placement", "lookup_output_dtype", "grad_scaler",
               "interaction_pad_to")

    def __post_init__(self) -> None:
        # the name labels the output, the trace and its JSON: a number (YAML `name: 2024`) is kept as text; a list,
        # a mapping or an empty name was carried into them as such (`"config": [1, 2]`, a line starting ": 8 x")
        name = self.name
        if isinstance(name, (int, float, np.integer, np.floating)) and not isinstance(name, (bool, np.bool_)):
            name = str(name)
        if not isinstance(name, str) or not name.strip():
            raise InvalidInputError(f"name must be a non-empty string, got {self.name!r}")
        object.__setattr__(self, "name", name.strip())
        object.__setattr__(self, "tables", tuple(self.tables))
        object.__setattr__(self, "gpus", _positive_int(self.gpus, "gpus"))
        object.__setattr__(self, "batch_size_per_gpu", _positive_int(self.batch_size_per_gpu, "batch_size_per_gpu"))
        if self.batch_size_per_gpu * self.gpus > MAX_INT_PRICED:  # (the lookups of the global batch are one op)
            raise InvalidInputError(f"batch_size_per_gpu {self.batch_size_per_gpu:,} x gpus {self.gpus:,} is a global "
                                    "batch too large: hybrid prices integers up to 10**18")
        object.__setattr__(self, "dense_features", _positive_int(self.dense_features, "dense_features"))
        object.__setattr__(self, "embedding_dim", _positive_int(self.embedding_dim, "embedding_dim"))
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        object.__setattr__(self, "embedding_dtype",
                           normalize_dtype(self.embedding_dtype) if self.embedding_dtype else self.dtype)
        # kept as given (None: follows embedding_dtype, also through with_()); resolved by lookup_dtype
        object.__setattr__(self, "lookup_output_dtype",
                           normalize_dtype(self.lookup_output_dtype) if self.lookup_output_dtype else None)
        if not isinstance(self.grad_scaler, (bool, np.bool_)):
            raise InvalidInputError(f"grad_scaler must be true or false, got {self.grad_scaler!r}")
        object.__setattr__(self, "grad_scaler", bool(self.grad_scaler))
        object.__setattr__(self, "interaction_pad_to", _positive_int(self.interaction_pad_to, "interaction_pad_to",
                                                                          limit=1024))
        object.__setattr__(self, "dcn_layers", _positive_int(self.dcn_layers, "dcn_layers"))
        rank = self.dcn_low_rank
        object.__setattr__(self, "dcn_low_rank", 0 if rank in (0, None) else _positive_int(rank, "dcn_low_rank"))
        placement = str(self.embedding_placement).strip().lower()
        if placement not in PLACEMENTS:
            raise InvalidInputError(f"embedding_placement must be one of {PLACEMENTS}, got {self.embedding_placement!r}")
        object.__setattr__(self, "embedding_placement", placement)
        bottom = str(self.bottom_mlp_placement).strip().lower()
        if bottom not in BOTTOM_PLACEMENTS:
            raise InvalidInputError(f"bottom_mlp_placement must be one of {BOTTOM_PLACEMENTS}, got "
                                    f"{self.bottom_mlp_placement!r}")
        object.__setattr__(self, "bottom_mlp_placement", bottom)
        for name in ("bottom_mlp", "top_mlp"):
            widths = getattr(self, name)
            if isinstance(widths, (int, str)) or not isinstance(widths, Sequence) or len(widths) == 0:
                raise InvalidInputError(f"{name} must be a non-empty list of layer widths, got {widths!r}")
            object.__setattr__(self, name, tuple(_positive_int(w, f"{name} width") for w in widths))
        inter = str(self.interaction).strip().lower()
        if inter not in INTERACTIONS:
            raise InvalidInputError(f"interaction must be one of {INTERACTIONS}, got {self.interaction!r}")
        object.__setattr__(self, "interaction", inter)
        opt = str(self.optimizer).strip().lower()
        if opt not in OPTIMIZERS:
            raise InvalidInputError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        object.__setattr__(self, "optimizer", opt)
        if not self.system or not isinstance(self.system, str):
            raise InvalidInputError(f"system must be a catalog system or device name, got {self.system!r}")
        if not self.tables:
            raise InvalidInputError("config has no embedding tables")
        names = [t.name for t in self.tables]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise InvalidInputError(f"duplicate table name(s) {dup[:5]}")
        if inter in ("dot", "dcn"):
            out = self.bottom_mlp[-1]
            bad = [t.name for t in self.tables if t.embedding_dim != out]
            if bad:
                raise InvalidInputError(
                    f"{inter} interaction needs every table's embedding_dim == bottom_mlp[-1] ({out}); "
                    f"table(s) {bad[:5]} differ")
        if self.plan is not None:
            plan = self.plan if isinstance(self.plan, ShardingPlan) else ShardingPlan.from_dict(self.plan)
            object.__setattr__(self, "plan", plan.validate(self))

    # derived sizes ---------------------------------------------------------------------------------------
    @property
    def num_tables(self) -> int:
        return len(self.tables)

    @property
    def global_batch(self) -> int:
        return self.batch_size_per_gpu * self.gpus

    @property
    def dtype_bytes(self) -> float:
        from hybrid.units import DTYPE_BYTES

        return DTYPE_BYTES[self.dtype]

    @property
    def lookup_dtype(self) -> str:
        """The dtype the lookups write their pooled outputs in (``lookup_output_dtype``, else the tables')."""
        return self.lookup_output_dtype or self.embedding_dtype or self.dtype

    @property
    def embedding_dtype_bytes(self) -> float:
        from hybrid.units import DTYPE_BYTES

        return DTYPE_BYTES[self.embedding_dtype or self.dtype]

    @property
    def interaction_features(self) -> int:
        """Width of the top MLP's input (dot: bottom output + pairwise dots; cat and dcn: every feature)."""
        if self.interaction == "dot":
            f = self.num_tables + 1
            width = self.bottom_mlp[-1] + f * (f - 1) // 2
            return -(-width // self.interaction_pad_to) * self.interaction_pad_to
        return self.bottom_mlp[-1] + sum(t.embedding_dim for t in self.tables)

    @staticmethod
    def is_cross_layer(name: str) -> bool:
        """True for the DCNv2 cross-layer linears of :meth:`mlp_layers` (no ReLU after them)."""
        return name.startswith("dcn")

    @staticmethod
    def layer_bias(name: str, out_features: int) -> int:
        """Bias parameters of the linear ``name`` of :meth:`mlp_layers`: one per output, except a low-rank cross
        layer's down-projection V (TorchRec's ``LowRankCrossNet``: x_0 * (U (V x_l) + b) + x_l, one bias per
        layer, on U)."""
        return 0 if name.startswith("dcn") and name.endswith("_v") else out_features

    def table(self, name: str) -> TableConfig:
        for t in self.tables:
            if t.name == name:
                return t
        raise InvalidInputError(f"no table named {name!r}")

    def mlp_layers(self) -> list[tuple[str, int, int]]:
        """Every dense linear layer as ``(name, in_features, out_features)``, bottom then top."""
        layers: list[tuple[str, int, int]] = []
        width = self.dense_features
        for i, out in enumerate(self.bottom_mlp):
            layers.append((f"bot{i}", width, out))
            width = out
        width = self.interaction_features
        if self.interaction == "dcn":  # x_{l+1} = x_0 * (U (V x_l) + b) + x_l: two linears per layer (low rank)
            rank = self.dcn_low_rank or width
            for i in range(self.dcn_layers):
                if self.dcn_low_rank:
                    layers += [(f"dcn{i}_v", width, rank), (f"dcn{i}_u", rank, width)]
                else:
                    layers.append((f"dcn{i}_u", width, width))
        for i, out in enumerate(self.top_mlp):
            layers.append((f"top{i}", width, out))
            width = out
        return layers

    def dense_params(self) -> int:
        """Parameters of the MLPs (weights + biases)."""
        return sum(i * o + self.layer_bias(n, o) for n, i, o in self.mlp_layers())

    def with_(self, **changes: Any) -> DLRMConfig:
        """A copy with fields replaced (re-validated); e.g. ``config.with_(gpus=16, plan=None)``."""
        return replace(self, **changes)

    def with_plan(self, plan: ShardingPlan | Mapping[str, Any] | None) -> DLRMConfig:
        return replace(self, plan=plan)

    # (de)serialisation -----------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **overrides: Any) -> DLRMConfig:
        """Build and validate a config; ``overrides`` (e.g. ``gpus=64``) replace document values."""
        if not isinstance(data, Mapping):
            raise InvalidInputError(f"a DLRM config must be a mapping, got {type(data).__name__}")
        _check_keys(data, (*cls.FIELDS, "variant"), "DLRM config")
        doc = dict(data)
        if "variant" in doc:  # a published model by name (hybrid.workloads.dlrm_variants); other keys override
            from hybrid.workloads.dlrm_variants import apply_overrides, dlrm_variant

            base = dlrm_variant(str(doc.pop("variant"))).to_dict()
            doc = apply_overrides(base, doc)
        doc.update({k: v for k, v in overrides.items() if v is not None})
        default_dim = _positive_int(doc.get("embedding_dim", 64), "embedding_dim")
        if "tables" in doc and doc["tables"] is not None:
            if "table_generator" in doc:
                raise InvalidInputError("give either `tables` or `num_tables` + `table_generator`, not both")
            raw = doc["tables"]
            if not isinstance(raw, list):
                raise InvalidInputError(f"tables must be a list, got {type(raw).__name__}")
            tables = [TableConfig.from_dict(t, default_dim, i) for i, t in enumerate(raw)]
        elif "num_tables" in doc:
            n = _positive_int(doc["num_tables"], "num_tables")
            tables = TableGenerator.from_dict(doc.get("table_generator") or {}).generate(n, default_dim)
        else:
            raise InvalidInputError("config needs `tables` or `num_tables` (+ `table_generator`)")
        kwargs = {k: doc[k] for k in cls.SCALARS if k in doc and doc[k] is not None}
        plan = doc.get("plan")
        if plan is not None and not isinstance(plan, (Mapping, ShardingPlan)):
            raise InvalidInputError("plan must be a mapping of table -> {type, ranks}")
        extra = {"description": doc["description"]} if "description" in doc else {}
        config = cls(tables=tuple(tables), plan=ShardingPlan.from_dict(plan) if plan is not None else None,
                     extra=extra, **kwargs)
        config.warn_unusual()
        if config.interaction != "dot" and (data.get("interaction_pad_to") or overrides.get("interaction_pad_to")):
            import warnings

            warnings.warn(f"interaction_pad_to applies to interaction: dot only; with interaction: "
                          f"{config.interaction} it is ignored", WorkloadWarning, stacklevel=2)
        if config.interaction != "dcn":  # the document's own keys (a variant's are its own business)
            import warnings

            for key in ("dcn_layers", "dcn_low_rank"):
                if data.get(key) is not None or overrides.get(key) is not None:
                    warnings.warn(f"{key} applies to interaction: dcn only; with interaction: {config.interaction} it "
                                  "is ignored (set `interaction: dcn` for DCNv2 cross layers)", WorkloadWarning,
                                  stacklevel=2)
        return config

    def unusual(self) -> list[str]:
        """What of this config no published DLRM training run does, priced as given (:meth:`warn_unusual` warns):
        a dense ``dtype`` outside :data:`TRAINING_DTYPES`, pooling factors below :data:`MIN_POOLING_FACTOR`."""
        out = []
        if self.dtype not in TRAINING_DTYPES:
            out.append(f"dtype {self.dtype}: published DLRM training (MLPerf, NVIDIA DeepLearningExamples, TorchRec) "
                       f"runs {', '.join(TRAINING_DTYPES)}; priced as given: {self.dtype} tensors "
                       f"({self.dtype_bytes:g} byte(s) per element) at the device's {self.dtype} peak, or the next "
                       "dtype it has (hybrid.units.DTYPE_FALLBACK) where it has none"
                       + (f", the tables in {self.embedding_dtype} too (embedding_dtype follows dtype)"
                          if self.embedding_dtype == self.dtype else ""))
        low = [t for t in self.tables if t.pooling_factor < MIN_POOLING_FACTOR]
        if low:
            names = ", ".join(f"{t.name!r} ({t.pooling_factor:g})" for t in low[:5])
            more = f" and {len(low) - 5} more" if len(low) > 5 else ""
            out.append(f"table(s) {names}{more}: pooling_factor below {MIN_POOLING_FACTOR:g}, fewer than one lookup "
                       f"in {1 / MIN_POOLING_FACTOR:,.0f} samples (mean lookups per sample; below 1 is a feature "
                       "that is often empty): a typo? priced as given")
        return out

    def warn_unusual(self) -> None:
        """Each of :meth:`unusual` as a :class:`~hybrid.errors.WorkloadWarning` (the CLI shows them and puts them in
        ``--json`` ``notes``)."""
        import warnings

        for msg in self.unusual():
            warnings.warn(msg, WorkloadWarning, stacklevel=3)

    @classmethod
    def from_file(cls, path: str | os.PathLike, **overrides: Any) -> DLRMConfig:
        """Load a YAML or JSON config file."""
        try:
            return cls.from_dict(load_document(path, what="DLRM config"), **overrides)
        except InvalidInputError as exc:
            msg = str(exc)
            raise InvalidInputError(msg if str(path) in msg else f"{path}: {msg}") from None

    from_yaml = from_file

    def to_dict(self) -> dict[str, Any]:
        """Plain data (tables always explicit); ``from_dict(to_dict())`` gives an equal config."""
        out: dict[str, Any] = {
            "name": self.name, "system": self.system, "gpus": self.gpus,
            "batch_size_per_gpu": self.batch_size_per_gpu, "dtype": self.dtype,
            "dense_features": self.dense_features, "bottom_mlp": list(self.bottom_mlp),
            "top_mlp": list(self.top_mlp), "interaction": self.interaction, "embedding_dim": self.embedding_dim,
            "optimizer": self.optimizer, "tables": [t.to_dict() for t in self.tables],
        }
        if self.interaction == "dcn":
            out.update(dcn_layers=self.dcn_layers, dcn_low_rank=self.dcn_low_rank)
        if self.embedding_dtype != self.dtype:
            out["embedding_dtype"] = self.embedding_dtype
        if self.embedding_placement != "hbm":
            out["embedding_placement"] = self.embedding_placement
        if self.bottom_mlp_placement != "data_parallel":
            out["bottom_mlp_placement"] = self.bottom_mlp_placement
        if self.lookup_output_dtype is not None:
            out["lookup_output_dtype"] = self.lookup_output_dtype
        if self.grad_scaler:
            out["grad_scaler"] = True
        if self.interaction_pad_to != 1:
            out["interaction_pad_to"] = self.interaction_pad_to
        out.update(self.extra)
        if self.plan is not None:
            out["plan"] = self.plan.to_dict()
        return out

    def save(self, path: str | os.PathLike) -> Path:
        return write_document(self.to_dict(), path)
