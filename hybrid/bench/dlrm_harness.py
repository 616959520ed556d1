"""Real multi-process DLRM training with PyTorch ``torch.distributed``: the measurement side of validation.

:func:`run_dlrm` spawns ``ranks`` local processes (gloo on CPUs, NCCL on GPUs; rendezvous through a
:class:`torch.distributed.FileStore` in a temporary directory, so no port can clash), builds a DLRM-style model
whose embedding tables are placed per a :class:`~hybrid.sharding.plan.ShardingPlan`, trains it with SGD or
Adagrad on synthetic data and times every iteration on every rank.

What runs in one iteration (this is what the predictor must model)::

    input     input distribution, two ``all_to_all_single`` of int64 on their own process group: per
              destination the value count of each of its fused tables, then [bag lengths | indices] of this
              rank's local batch (``batch_size_per_gpu`` bags per model-parallel piece the destination holds;
              row-wise pieces get only the indices in their row range, column-wise pieces all of them); the
              receiver unpacks them into one (indices, offsets) input per fused table
    forward   per rank: one fused ``EmbeddingBag(sum, sparse=True)`` per embedding dim over all its
              model-parallel pieces (table-, column- and row-wise; like TorchRec's batched tables), looking up
              the GLOBAL batch (ranks x batch_size_per_gpu bags per piece)
              -> one ``all_to_all_single`` (uneven splits) of the pooled table-/column-wise outputs
                 (every holder sends each rank that rank's ``batch_size_per_gpu`` rows)
              -> one ``reduce_scatter_tensor`` of the row-wise partial sums (over the batch dimension;
                 ranks that hold no piece of a row-wise table contribute zeros), only if a row-wise table exists
              -> DDP dense module: bottom MLP, fused data-parallel tables per dim (local batch, dense
                 gradients), dot/cat interaction, top MLP, BCE-with-logits loss
    backward  DDP backward (dense gradients of the MLPs and data-parallel tables all-reduced in 25 MiB
              buckets by DDP, overlapped with the backward pass)
              -> gradient exchange: ``all_gather_into_tensor`` (row-wise) and ``all_to_all_single``
                 (table-/column-wise), the transposes of the forward exchanges
              -> EmbeddingBag backward of the fused model-parallel tables (sparse gradients)
    update    sparse SGD/Adagrad on the fused model-parallel tables, dense SGD/Adagrad on the DDP module

The input distribution and the two embedding exchanges each use their own process group so their order can
never interleave with DDP's asynchronous bucket all-reduces (or with each other in the backward pass). The
synthetic indices of a pool of ``index_pool`` batches are generated and bucketised (row-wise) before timing and
cycled through; everything from the input distribution to the optimizer step is timed.

Timing: no barrier inside the timed loop. Each rank records the end of every iteration (after a CUDA
synchronize on GPUs); the iteration time is the difference of consecutive ends, the per-iteration time of the
job is the maximum over ranks, and the run reports the median and the spread across iterations.

torch is imported lazily (it is the optional ``profile`` extra).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hybrid.errors import HybridError, InvalidInputError

if TYPE_CHECKING:  # pragma: no cover
    from hybrid.sharding.plan import ShardingPlan
    from hybrid.workloads.dlrm import DLRMConfig

#: Collectives each iteration issues, in order, for the docs and the results table.
EXCHANGE_OPS = {
    "input": ("all_to_all_single(value counts)", "all_to_all_single(lengths+indices int64)"),
    "forward": ("all_to_all_single(table_wise+column_wise pooled)", "reduce_scatter_tensor(row_wise partial)"),
    "backward": ("DDP all_reduce buckets(dense+data_parallel grads)", "all_gather_into_tensor(row_wise grad)",
                 "all_to_all_single(table_wise+column_wise grad)"),
}

#: Multiplier used to scatter hot Zipf ranks over the table (a bijection when coprime with the row count).
_HASH_MULT = 2_654_435_761

#: Phases timed on every rank (median over timed iterations, ms), in iteration order.
PHASES = ("input_dist", "lookup_fwd", "exchange_fwd", "dense_fwd", "backward", "exchange_bwd", "optimizer")


class HarnessError(HybridError):
    """A worker process of the DLRM harness failed or timed out."""


@dataclass(frozen=True)
class HarnessOptions:
    """How to run: timed/warm-up iterations, threads per rank, device and backend, seeds."""

    iters: int = 15
    warmup: int = 5
    threads_per_rank: int | None = None  #: default: CPU cores // ranks (at least 1)
    device: str = "cpu"  #: "cpu" or "cuda"
    backend: str | None = None  #: default gloo on CPU, nccl on CUDA
    seed: int = 0
    index_pool: int = 4  #: distinct synthetic batches cycled through
    lr: float = 0.01
    timeout_s: float = 900.0  #: per spawn (all plans of one config)
    reference_init: bool = False  #: weights as a fixed function of (table, row, column): plans comparable

    def __post_init__(self) -> None:
        if self.iters < 1:
            raise InvalidInputError(f"iters must be >= 1, got {self.iters}")
        if self.warmup < 0:
            raise InvalidInputError(f"warmup must be >= 0, got {self.warmup}")
        if self.threads_per_rank is not None and self.threads_per_rank < 1:
            raise InvalidInputError(f"threads_per_rank must be >= 1, got {self.threads_per_rank}")
        cores = default_threads(1)
        if self.threads_per_rank is not None and self.threads_per_rank > cores:
            # as `hybrid profile --threads`: more threads than cores time the scheduler, not the model, and the
            # results row would record a thread count the machine cannot run
            raise InvalidInputError(f"threads per rank (--threads {self.threads_per_rank}) exceeds the {cores} "
                                    "cores this process may run on")
        if self.device not in ("cpu", "cuda"):
            raise InvalidInputError(f"device must be 'cpu' or 'cuda', got {self.device!r}")
        if self.index_pool < 1:
            raise InvalidInputError(f"index_pool must be >= 1, got {self.index_pool}")

    def resolved_backend(self) -> str:
        return self.backend or ("nccl" if self.device == "cuda" else "gloo")


@dataclass
class RunResult:
    """One measured (config, plan): per-iteration times (max over ranks) and summary statistics."""

    config_name: str
    config_hash: str
    plan_name: str
    plan_hash: str
    ranks: int
    iter_ms: np.ndarray  #: per timed iteration, max over ranks
    rank_iter_ms: np.ndarray  #: [ranks, iters]
    phases_ms: dict[str, float] = field(default_factory=dict)  #: per phase: max over ranks of the median
    threads_per_rank: int = 1
    backend: str = "gloo"
    device: str = "cpu"
    warmup: int = 0
    setup_s: float = 0.0
    first_loss: float = float("nan")  #: rank 0's loss in the first iteration (before any update)

    @property
    def median_ms(self) -> float:
        return float(np.median(self.iter_ms))

    def summary(self) -> dict[str, Any]:
        """One flat row for the results table."""
        t = self.iter_ms
        row: dict[str, Any] = {
            "config_name": self.config_name, "config_hash": self.config_hash,
            "plan_name": self.plan_name, "plan_hash": self.plan_hash, "ranks": self.ranks,
            "median_ms": float(np.median(t)), "std_ms": float(np.std(t, ddof=1)) if len(t) > 1 else 0.0,
            "min_ms": float(np.min(t)), "max_ms": float(np.max(t)),
            "p10_ms": float(np.percentile(t, 10)), "p90_ms": float(np.percentile(t, 90)),
            "iters": int(len(t)), "warmup": self.warmup, "threads_per_rank": self.threads_per_rank,
            "backend": self.backend, "device": self.device, "setup_s": round(self.setup_s, 3),
        }
        for k, v in self.phases_ms.items():
            row[f"{k}_ms"] = float(v)
        return row


# ----------------------------------------------------------------------------------------------- hashing


def _canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def config_hash(config: DLRMConfig) -> str:
    """Short stable hash of a config's content (name excluded)."""
    d = dict(config.to_dict())
    d.pop("name", None)
    d.pop("plan", None)
    return hashlib.sha1(_canonical_json(d).encode()).hexdigest()[:12]


def plan_hash(plan: ShardingPlan) -> str:
    """Short stable hash of a plan's content."""
    return hashlib.sha1(_canonical_json(plan.to_dict()).encode()).hexdigest()[:12]


# ------------------------------------------------------------------------------------------ synthetic data


def draw_indices(rng: np.random.Generator, num_rows: int, n: int, dist: str = "uniform",
                 alpha: float = 0.0) -> np.ndarray:
    """``n`` int64 row indices in ``[0, num_rows)``: uniform, or bounded Zipf(``alpha``) by inverse-CDF of the
    continuous power law over ranks ``[1, num_rows + 1)``, ranks then scattered over the table by a
    multiplicative hash (hot rows are not contiguous, as with hashed categorical features)."""
    if num_rows < 1:
        raise InvalidInputError(f"num_rows must be >= 1, got {num_rows}")
    if dist == "uniform" or alpha <= 0:
        return rng.integers(0, num_rows, size=n, dtype=np.int64)
    u = rng.random(n)
    big_n = float(num_rows) + 1.0
    if abs(alpha - 1.0) < 1e-9:
        ranks = np.exp(u * math.log(big_n))
    else:
        e = 1.0 - alpha
        ranks = ((big_n**e - 1.0) * u + 1.0) ** (1.0 / e)
    r = np.clip(ranks.astype(np.int64) - 1, 0, num_rows - 1)
    mult = _HASH_MULT
    while math.gcd(mult, num_rows) != 1:
        mult += 2
    return (r * mult) % num_rows


def draw_lengths(rng: np.random.Generator, n_bags: int, pooling: float) -> np.ndarray:
    """Bag lengths with mean ``pooling``: ``floor(pooling)`` plus one with probability ``frac(pooling)``
    (at least one lookup per bag)."""
    base = math.floor(pooling)
    frac = pooling - base
    lengths = np.full(n_bags, base, dtype=np.int64)
    if frac > 0:
        lengths += (rng.random(n_bags) < frac).astype(np.int64)
    return np.maximum(lengths, 1)


def _bag_inputs(rng: np.random.Generator, table: Any, n_bags: int) -> tuple[np.ndarray, np.ndarray]:
    lengths = draw_lengths(rng, n_bags, float(table.pooling_factor))
    idx = draw_indices(rng, int(table.num_embeddings), int(lengths.sum()),
                       str(getattr(table, "index_dist", "uniform") or "uniform"),
                       float(getattr(table, "zipf_alpha", 0.0) or 0.0))
    return idx, lengths


def _restrict_rows(idx: np.ndarray, lengths: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep the lookups falling in rows ``[lo, hi)`` (shifted to start at 0) and recount bag lengths."""
    keep = (idx >= lo) & (idx < hi)
    bag = np.repeat(np.arange(len(lengths)), lengths)
    new_len = np.bincount(bag[keep], minlength=len(lengths)).astype(np.int64)
    return idx[keep] - lo, new_len


# ------------------------------------------------------------------------------------------------ layout


@dataclass(frozen=True)
class ShardPiece:
    """One model-parallel piece held by a rank."""

    table: int  #: index in config.tables
    kind: str  #: table_wise | row_wise | column_wise
    rows: int
    row_lo: int
    dim: int
    col_lo: int


@dataclass(frozen=True)
class Layout:
    """Where each table lives, derived from a plan, identical on every rank."""

    world: int
    pieces: tuple[tuple[ShardPiece, ...], ...]  #: per rank: its model-parallel pieces (table order)
    dp_tables: tuple[int, ...]  #: data-parallel tables
    rw_tables: tuple[int, ...]  #: row-wise tables (order of the reduce-scatter columns)
    dims: tuple[int, ...]  #: embedding dim per table

    @property
    def a2a_dims(self) -> tuple[int, ...]:
        """Per source rank: pooled columns it sends each destination in the all-to-all (TW + CW pieces)."""
        return tuple(sum(p.dim for p in ps if p.kind != "row_wise") for ps in self.pieces)

    @property
    def rw_width(self) -> int:
        return sum(self.dims[t] for t in self.rw_tables)


def _split(total: int, parts: int) -> list[int]:
    base, extra = divmod(int(total), int(parts))
    return [base + (1 if i < extra else 0) for i in range(parts)]


def build_layout(config: DLRMConfig, plan: ShardingPlan, world: int) -> Layout:
    """Expand ``plan`` over ``world`` ranks into per-rank pieces (row and column offsets included)."""
    pieces: list[list[ShardPiece]] = [[] for _ in range(world)]
    dp: list[int] = []
    rw: list[int] = []
    dims = []
    for t, table in enumerate(config.tables):
        shard = plan[table.name]
        rows, dim = int(table.num_embeddings), int(table.embedding_dim)
        dims.append(dim)
        if any(r >= world for r in shard.ranks):
            raise InvalidInputError(f"plan for table {table.name!r} uses ranks {list(shard.ranks)} "
                                    f"but the job has {world} ranks")
        if shard.type == "data_parallel":
            dp.append(t)
        elif shard.type == "table_wise":
            pieces[shard.ranks[0]].append(ShardPiece(t, "table_wise", rows, 0, dim, 0))
        elif shard.type == "row_wise":
            rw.append(t)
            lo = 0
            for r, n in zip(shard.ranks, _split(rows, len(shard.ranks)), strict=True):
                pieces[r].append(ShardPiece(t, "row_wise", n, lo, dim, 0))
                lo += n
        elif shard.type == "column_wise":
            if dim % len(shard.ranks):
                raise InvalidInputError(f"table {table.name!r}: dim {dim} not divisible by {len(shard.ranks)}")
            d = dim // len(shard.ranks)
            for j, r in enumerate(shard.ranks):
                pieces[r].append(ShardPiece(t, "column_wise", rows, 0, d, j * d))
        else:  # pragma: no cover - Shard validates types
            raise InvalidInputError(f"unknown shard type {shard.type!r}")
    return Layout(world, tuple(tuple(p) for p in pieces), tuple(dp), tuple(rw), tuple(dims))


# ------------------------------------------------------------------------------------------- the worker


#: Training dtypes the harness runs (one dtype for tables, MLPs and exchanges).
HARNESS_DTYPES = ("fp32", "fp16", "bf16", "fp64")


def _torch_dtype(torch: Any, name: str) -> Any:
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
            "fp64": torch.float64}.get(name, torch.float32)


def unsupported_features(config: DLRMConfig, device: str = "cpu") -> list[str]:
    """What of ``config`` the harness does not run (empty: all of it). It trains one dtype throughout, a
    data-parallel bottom MLP, no loss scaling and, on GPUs, every table in GPU memory; a config asking for more
    was measured as if it had not, while its stored YAML (what ``hybrid bench validate`` predicts) said it did."""
    out = []
    dtype = str(config.dtype)
    if dtype not in HARNESS_DTYPES:
        out.append(f"dtype {dtype} (the harness trains in {', '.join(HARNESS_DTYPES)})")
    if (config.embedding_dtype or dtype) != dtype or config.lookup_dtype != dtype:
        out.append(f"mixed precision (embedding_dtype {config.embedding_dtype or dtype}, lookup_output_dtype "
                   f"{config.lookup_dtype}, dtype {dtype}: the harness runs every tensor in dtype)")
    if bool(config.grad_scaler):
        out.append("grad_scaler (the harness does no loss scaling)")
    if str(config.bottom_mlp_placement) != "data_parallel":
        out.append(f"bottom_mlp_placement {config.bottom_mlp_placement} (the harness runs it data-parallel)")
    if device == "cuda" and str(config.embedding_placement) != "hbm":
        out.append(f"embedding_placement {config.embedding_placement} (the harness keeps every table in GPU memory)")
    return out


def _mlp(nn: Any, n_in: int, widths: Sequence[int], final_act: bool) -> Any:
    layers: list[Any] = []
    for i, w in enumerate(widths):
        layers.append(nn.Linear(n_in, int(w)))
        if final_act or i < len(widths) - 1:
            layers.append(nn.ReLU())
        n_in = int(w)
    return nn.Sequential(*layers)


def _groups_by_dim(items: Sequence[Any], dim_of: Callable[[Any], int]) -> list[tuple[int, list[Any]]]:
    """Items grouped by embedding dim (ascending), order within a group kept: one fused table per group."""
    out: dict[int, list[Any]] = {}
    for it in items:
        out.setdefault(int(dim_of(it)), []).append(it)
    return sorted(out.items())


def _fused_order(layout: Layout, rank: int) -> list[tuple[int, list[ShardPiece]]]:
    """The model-parallel pieces of ``rank`` grouped into fused tables (same order on every rank)."""
    return _groups_by_dim(layout.pieces[rank], lambda p: p.dim)


def _build_dense_module(torch: Any, config: DLRMConfig, layout: Layout, dtype: Any) -> Any:
    nn = torch.nn
    dp_groups = _groups_by_dim(list(layout.dp_tables), lambda t: layout.dims[t])

    class DenseArch(nn.Module):
        """Bottom MLP, fused data-parallel tables, interaction and top MLP (the DDP-wrapped part)."""

        def __init__(self) -> None:
            super().__init__()
            self.bottom = _mlp(nn, int(config.dense_features), config.bottom_mlp, final_act=True)
            self.dot = str(config.interaction) == "dot"
            n_feat = 1 + len(layout.dims)
            d0 = int(config.bottom_mlp[-1])
            top_in = d0 + (n_feat * (n_feat - 1) // 2 if self.dot else sum(layout.dims))
            # zero columns up to the config's padded width (interaction_pad_to), as NVIDIA's dot kernels write them
            self.pad = int(config.interaction_features) - top_in if self.dot else 0
            self.top = _mlp(nn, top_in + self.pad, config.top_mlp, final_act=False)
            # created after the MLPs so the MLPs' random init does not depend on the placement
            self.dp = nn.ModuleList(
                nn.EmbeddingBag(sum(int(config.tables[t].num_embeddings) for t in ts), dim, mode="sum",
                                sparse=False)
                for dim, ts in dp_groups)
            self.dp_groups = dp_groups
            self.to(dtype)

        def forward(self, dense: Any, dp_inputs: list[tuple[Any, Any]], sparse: dict[int, Any]) -> Any:
            x = self.bottom(dense)
            feats = dict(sparse)
            for emb, (dim, ts), (i, o) in zip(self.dp, self.dp_groups, dp_inputs, strict=True):
                out = emb(i, o).view(len(ts), -1, dim)
                for j, t in enumerate(ts):
                    feats[t] = out[j]
            ordered = [feats[t] for t in range(len(layout.dims))]
            if self.dot:
                z = torch.stack([x, *ordered], dim=1)
                inter = torch.bmm(z, z.transpose(1, 2))
                n = z.shape[1]
                li, lj = torch.tril_indices(n, n, offset=-1, device=z.device)
                pad = [x.new_zeros(x.shape[0], self.pad)] if self.pad else []
                top_in = torch.cat([x, inter[:, li, lj], *pad], dim=1)
            else:
                top_in = torch.cat([x, *ordered], dim=1)
            return self.top(top_in)

    return DenseArch()


def _exchange_functions(torch: Any, dist: Any, group: Any, timer: dict[str, float],
                        clock: Callable[[], float] = time.perf_counter) -> tuple[Any, Any]:
    """Autograd functions for the pooled-embedding exchanges (backward = transposed collective)."""

    class AllToAll(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, send: Any, in_splits: list[int], out_splits: list[int]) -> Any:
            ctx.splits = (in_splits, out_splits)
            recv = send.new_empty(sum(out_splits))
            dist.all_to_all_single(recv, send.contiguous(), out_splits, in_splits, group=group)
            return recv

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            in_splits, out_splits = ctx.splits
            t0 = clock()
            out = grad.new_empty(sum(in_splits))
            dist.all_to_all_single(out, grad.contiguous(), in_splits, out_splits, group=group)
            timer["exchange_bwd"] += clock() - t0
            return out, None, None

    class ReduceScatter(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, send: Any, world: int) -> Any:
            ctx.world = world
            out = send.new_empty((send.shape[0] // world, send.shape[1]))
            dist.reduce_scatter_tensor(out, send.contiguous(), group=group)
            return out

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            t0 = clock()
            g = grad.contiguous()
            out = g.new_empty((g.shape[0] * ctx.world, g.shape[1]))
            dist.all_gather_into_tensor(out, g, group=group)
            timer["exchange_bwd"] += clock() - t0
            return out, None

    return AllToAll, ReduceScatter


def _reference_fill(torch: Any, weight: Any, table: int, row_lo: int, rows: int, col_lo: int, base: int) -> None:
    """Set ``weight[base:base+rows]`` to the reference values of ``table`` rows ``row_lo..`` and columns
    ``col_lo..``: a smooth function of (table, row, column), identical whatever the placement."""
    dim = weight.shape[1]
    r = torch.arange(row_lo, row_lo + rows, dtype=torch.float64).unsqueeze(1)
    c = torch.arange(col_lo, col_lo + dim, dtype=torch.float64).unsqueeze(0)
    vals = 0.05 * torch.sin(0.37 * table + 0.0113 * r + 0.71 * c)
    with torch.no_grad():
        weight[base:base + rows].copy_(vals.to(weight.dtype))


def _input_payloads(config: DLRMConfig, layout: Layout, me: int, b: int, slot: int, seed: int,
                    ) -> tuple[list[np.ndarray], list[np.ndarray], list[tuple[np.ndarray, np.ndarray]]]:
    """What rank ``me`` sends in the input distribution of one synthetic batch: per destination the per-group
    value counts (header) and the payload ``[lengths of every piece (b each)] + [values]`` in the destination's
    fused order, indices already shifted to the destination's fused table; plus its data-parallel inputs."""
    cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def local(t: int) -> tuple[np.ndarray, np.ndarray]:
        if t not in cache:  # the global batch of table t, generated identically everywhere; keep my slice
            idx, lens = _bag_inputs(np.random.default_rng([seed, slot, t]), config.tables[t], b * layout.world)
            start = int(lens[:me * b].sum())
            stop = start + int(lens[me * b:(me + 1) * b].sum())
            cache[t] = (idx[start:stop], lens[me * b:(me + 1) * b])
        return cache[t]

    headers, payloads = [], []
    for dest in range(layout.world):
        counts, all_lens, all_vals = [], [], []
        for _, pieces in _fused_order(layout, dest):
            base, n_vals = 0, 0
            for p in pieces:
                idx, lens = local(p.table)
                if p.kind == "row_wise":
                    idx, lens = _restrict_rows(idx, lens, p.row_lo, p.row_lo + p.rows)
                all_lens.append(lens)
                all_vals.append(idx + base)
                n_vals += len(idx)
                base += p.rows
            counts.append(n_vals)
        headers.append(np.asarray(counts, dtype=np.int64))
        payloads.append(np.concatenate(all_lens + all_vals).astype(np.int64) if all_lens
                        else np.zeros(0, dtype=np.int64))
    dp = []
    for _dim, ts in _groups_by_dim(list(layout.dp_tables), lambda t: layout.dims[t]):
        base, lens_l, vals_l = 0, [], []
        for t in ts:
            idx, lens = local(t)
            lens_l.append(lens)
            vals_l.append(idx + base)
            base += int(config.tables[t].num_embeddings)
        lens = np.concatenate(lens_l)
        offsets = np.zeros(len(lens), dtype=np.int64)
        np.cumsum(lens[:-1], out=offsets[1:])
        dp.append((np.concatenate(vals_l), offsets))
    return headers, payloads, dp


def _run_plan(torch: Any, dist: Any, groups: tuple[Any, Any, Any], rank: int, config: DLRMConfig,
              layout: Layout, opts: HarnessOptions, dev: Any,
              clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Train ``iters + warmup`` iterations of one placement on this rank; returns its iteration times.
    ``clock`` reads the time at every phase boundary (:func:`host_ops_per_phase` marks them in a profile)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    world = layout.world
    b = int(config.batch_size_per_gpu)
    dtype = _torch_dtype(torch, str(getattr(config, "dtype", "fp32")))
    nn = torch.nn
    fused = _fused_order(layout, rank)  # [(dim, [pieces])]
    n_pieces = sum(len(ps) for _, ps in fused)

    # model-parallel shards: one fused table per embedding dim (like TorchRec's batched tables), sparse grads
    embs = nn.ModuleList(nn.EmbeddingBag(sum(p.rows for p in ps), dim, mode="sum", sparse=True)
                         for dim, ps in fused).to(dev, dtype)
    torch.manual_seed(opts.seed)  # dense weights: the same on every rank and for every plan
    dense = _build_dense_module(torch, config, layout, dtype).to(dev)
    if opts.reference_init:
        for emb, (_, ps) in zip(embs, fused, strict=True):
            base = 0
            for p in ps:
                _reference_fill(torch, emb.weight, p.table, p.row_lo, p.rows, p.col_lo, base)
                base += p.rows
        for emb, (_, ts) in zip(dense.dp, dense.dp_groups, strict=True):
            base = 0
            for t in ts:
                n = int(config.tables[t].num_embeddings)
                _reference_fill(torch, emb.weight, t, 0, n, 0, base)
                base += n
    ddp = DDP(dense, device_ids=[dev.index] if dev.type == "cuda" else None, gradient_as_bucket_view=True)
    opt_cls = torch.optim.Adagrad if str(getattr(config, "optimizer", "sgd")).lower() == "adagrad" \
        else torch.optim.SGD
    sparse_opt = opt_cls(list(embs.parameters()), lr=opts.lr) if len(fused) else None
    dense_opt = opt_cls(list(ddp.parameters()), lr=opts.lr)

    # synthetic batches (generated and bucketised before timing)
    pool = []
    for slot in range(opts.index_pool):
        headers, payloads, dp = _input_payloads(config, layout, rank, b, slot, opts.seed)
        rng = np.random.default_rng([opts.seed, slot, 10_000 + rank])
        x = torch.from_numpy(rng.standard_normal((b, int(config.dense_features)), dtype=np.float32))
        y = torch.from_numpy((rng.random((b, 1)) < 0.5).astype(np.float32))
        pool.append((
            torch.from_numpy(np.concatenate(headers)).to(dev),
            [len(h) for h in headers],
            torch.from_numpy(np.concatenate(payloads)).to(dev),
            [len(p) for p in payloads],
            [(torch.from_numpy(i).to(dev), torch.from_numpy(o).to(dev)) for i, o in dp],
            x.to(dev, dtype), y.to(dev)))

    timer = dict.fromkeys(PHASES, 0.0)
    AllToAll, _ = _exchange_functions(torch, dist, groups[1], timer, clock)
    _, ReduceScatter = _exchange_functions(torch, dist, groups[2], timer, clock)
    a2a_cols = layout.a2a_dims
    in_splits = [b * a2a_cols[rank]] * world
    out_splits = [b * a2a_cols[src] for src in range(world)]
    use_a2a = sum(a2a_cols) > 0
    use_rs = len(layout.rw_tables) > 0
    use_input = any(layout.pieces)
    rw_pos = {t: i for i, t in enumerate(layout.rw_tables)}
    src_orders = [[p for _, ps in _fused_order(layout, s) for p in ps if p.kind != "row_wise"]
                  for s in range(world)]
    mp_tables = [t for t in range(len(layout.dims)) if t not in set(layout.dp_tables)]
    hdr_out = [len(fused)] * world
    loss_fn = nn.BCEWithLogitsLoss()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    total = opts.warmup + opts.iters
    ends = np.zeros(total + 1)
    phase_samples = {k: np.zeros(total) for k in PHASES}
    sync()
    ends[0] = clock()
    loss = None
    first_loss = float("nan")
    for it in range(total):
        timer["exchange_bwd"] = 0.0
        hdr_send, hdr_splits, payload, pay_splits, dp_inputs, x, y = pool[it % len(pool)]
        t0 = clock()
        # ---- input distribution: value counts, then lengths + indices, each one all_to_all_single
        fused_inputs = []
        if use_input:
            hdr = torch.empty(sum(hdr_out), dtype=torch.int64, device=dev)
            dist.all_to_all_single(hdr, hdr_send, hdr_out, hdr_splits, group=groups[0])
            counts = hdr.view(world, len(fused)).cpu() if fused else hdr.view(world, 0).cpu()
            recv_splits = [n_pieces * b + int(counts[s].sum()) for s in range(world)]
            recv = torch.empty(sum(recv_splits), dtype=torch.int64, device=dev)
            dist.all_to_all_single(recv, payload, recv_splits, pay_splits, group=groups[0])
            chunks = torch.split(recv, recv_splits)
            lens_s = [c[:n_pieces * b] for c in chunks]
            vals_s = [c[n_pieces * b:] for c in chunks]
            vstart = torch.zeros((world, len(fused) + 1), dtype=torch.int64)
            if fused:
                vstart[:, 1:] = torch.cumsum(counts, dim=1)
            k0 = 0
            for g, (_, ps) in enumerate(fused):
                k1 = k0 + len(ps)
                lens = torch.cat([lens_s[s][k0 * b:k1 * b] for s in range(world)])
                vals = torch.cat([vals_s[s][int(vstart[s, g]):int(vstart[s, g + 1])] for s in range(world)])
                offsets = torch.cumsum(lens, 0) - lens
                fused_inputs.append((vals, offsets))
                k0 = k1
        t1 = clock()
        # ---- lookups of the global batch: bags ordered (source rank, piece, sample)
        outs = [emb(v, o).view(world, len(ps), b, dim)
                for emb, (v, o), (dim, ps) in zip(embs, fused_inputs, fused, strict=True)]
        t2 = clock()
        sparse_feats: dict[int, Any] = {}
        per_table: dict[int, list[tuple[int, Any]]] = {t: [] for t in mp_tables}
        if use_a2a:  # pooled table-/column-wise outputs: each destination gets its b rows of every piece
            blocks = []
            for out, (dim, ps) in zip(outs, fused, strict=True):
                keep = [j for j, p in enumerate(ps) if p.kind != "row_wise"]
                if keep:
                    sel = out if len(keep) == len(ps) else out[:, keep]
                    blocks.append(sel.permute(0, 2, 1, 3).reshape(world, b, len(keep) * dim))
            if blocks:
                send = (torch.cat(blocks, dim=2) if len(blocks) > 1 else blocks[0]).reshape(-1)
            else:
                send = torch.empty(0, device=dev, dtype=dtype, requires_grad=True)
            recv_e = AllToAll.apply(send, in_splits, out_splits)
            pos = 0
            for src in range(world):
                n = b * a2a_cols[src]
                if n == 0:
                    continue
                block = recv_e[pos:pos + n].view(b, a2a_cols[src])
                pos += n
                col = 0
                for p in src_orders[src]:
                    per_table[p.table].append((p.col_lo, block[:, col:col + p.dim]))
                    col += p.dim
        if use_rs:  # row-wise partial sums: reduce-scatter over the batch
            parts: list[Any] = [None] * len(layout.rw_tables)
            for out, (_, ps) in zip(outs, fused, strict=True):
                for j, p in enumerate(ps):
                    if p.kind == "row_wise":
                        parts[rw_pos[p.table]] = out[:, j]
            parts = [q if q is not None else torch.zeros(world, b, layout.dims[t], device=dev, dtype=dtype)
                     for q, t in zip(parts, layout.rw_tables, strict=True)]
            send_rw = (torch.cat(parts, dim=2) if len(parts) > 1 else parts[0]).reshape(world * b, -1)
            if not send_rw.requires_grad:  # holds no row-wise piece: still takes part in the backward gather
                send_rw.requires_grad_()
            red = ReduceScatter.apply(send_rw, world)
            c = 0
            for t in layout.rw_tables:
                per_table[t].append((0, red[:, c:c + layout.dims[t]]))
                c += layout.dims[t]
        for t in mp_tables:
            pieces = sorted(per_table[t], key=lambda cp: cp[0])
            sparse_feats[t] = pieces[0][1] if len(pieces) == 1 else torch.cat([q for _, q in pieces], dim=1)
        t3 = clock()
        logits = ddp(x, dp_inputs, sparse_feats)
        loss = loss_fn(logits.float(), y)
        if it == 0:
            first_loss = float(loss.detach())
        t4 = clock()
        loss.backward()
        t5 = clock()
        if sparse_opt is not None:
            sparse_opt.step()
            sparse_opt.zero_grad(set_to_none=True)
        dense_opt.step()
        dense_opt.zero_grad(set_to_none=True)
        sync()
        t6 = clock()
        ends[it + 1] = t6
        for k, v in zip(("input_dist", "lookup_fwd", "exchange_fwd", "dense_fwd", "backward", "optimizer"),
                        (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5), strict=True):
            phase_samples[k][it] = v
        phase_samples["exchange_bwd"][it] = timer["exchange_bwd"]
    iter_s = np.diff(ends)[opts.warmup:]
    phases = {k: float(np.median(v[opts.warmup:]) * 1e3) for k, v in phase_samples.items()}
    final_loss = float(loss.detach()) if loss is not None else float("nan")
    del ddp, dense, embs, pool
    return {"iter_ms": iter_s * 1e3, "phases": phases, "loss": final_loss, "first_loss": first_loss}


def _worker(rank: int, world: int, store_path: str, config: DLRMConfig, plans: list[tuple[str, Any]],
            opts: HarnessOptions, threads: int, result_path: str) -> None:
    import datetime
    import warnings

    import torch
    import torch.distributed as dist

    # torch 2.13 renames reduce_scatter_tensor / all_gather_into_tensor (same collectives); keep logs clean
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.distributed.*")
    # sparse gradients come from EmbeddingBag itself: opt out of the (default-off) invariant checks explicitly,
    # which also silences the warning torch prints for every sparse optimizer step
    torch.sparse.check_sparse_tensor_invariants.disable()
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set in this process
        pass
    if opts.device == "cuda":
        torch.cuda.set_device(rank % max(1, torch.cuda.device_count()))
        dev = torch.device("cuda", torch.cuda.current_device())
    else:
        dev = torch.device("cpu")
    backend = opts.resolved_backend()
    store = dist.FileStore(store_path, world)
    timeout = datetime.timedelta(seconds=max(60.0, opts.timeout_s))
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    try:
        # one group each for the input distribution, the all-to-all and the row-wise exchange: their backward
        # order may differ between ranks, and none may
        # interleave with DDP's bucket all-reduces on the default group
        groups = tuple(dist.new_group(list(range(world)), backend=backend) for _ in range(3))
        results = []
        for name, plan in plans:
            layout = build_layout(config, plan, world)
            t_setup = time.perf_counter()
            res = _run_plan(torch, dist, groups, rank, config, layout, opts, dev)
            setup_s = time.perf_counter() - t_setup - float(np.sum(res["iter_ms"])) / 1e3
            t = torch.tensor(res["iter_ms"], dtype=torch.float64, device=dev)  # NCCL gathers device tensors
            gathered = [torch.zeros_like(t) for _ in range(world)]
            dist.all_gather(gathered, t)
            ph = torch.tensor([res["phases"][k] for k in PHASES], dtype=torch.float64, device=dev)
            ph_all = [torch.zeros_like(ph) for _ in range(world)]
            dist.all_gather(ph_all, ph)
            if rank == 0:
                per_rank = torch.stack(gathered).cpu().numpy()
                phases = torch.stack(ph_all).cpu().numpy().max(axis=0)
                results.append({"plan_name": name, "rank_iter_ms": per_rank,
                                "phases": dict(zip(PHASES, phases.tolist(), strict=True)),
                                "setup_s": setup_s, "first_loss": res["first_loss"]})
        if rank == 0:
            tmp = result_path + ".tmp"
            with open(tmp, "wb") as fh:
                pickle.dump(results, fh)
            os.replace(tmp, result_path)
    finally:
        dist.destroy_process_group()


def _worker_entry(rank: int, *args: Any) -> None:
    try:
        _worker(rank, *args)
    except Exception as exc:  # keep the message short and informative for the parent: where and what
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if "hybrid" in f.filename] or \
            traceback.extract_tb(exc.__traceback__)
        where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
        raise RuntimeError(f"rank {rank}: {type(exc).__name__}: {exc}{where}") from None


#: Name of the zero-length annotation :func:`host_ops_per_phase` records at every phase boundary.
PHASE_MARK = "hybrid.dlrm_harness.phase_mark"
#: Profiler event categories that are host ops (what :mod:`hybrid.data.traces.parse` keeps on host threads and the
#: trace engine's host model counts, one ``host_op_us`` each).
HOST_OP_CATEGORIES = ("cpu_op", "user_annotation")


def host_ops_per_phase(config: DLRMConfig, plan: ShardingPlan, iters: int = 3, seed: int = 0) -> dict[str, float]:
    """Host ops one training iteration of this harness records per phase (:data:`PHASES`, ``exchange_bwd`` inside
    ``backward``; ``between``: after the optimizer until the next iteration): ATen ops, autograd nodes and
    ``record_function`` annotations at every nesting level, on the training thread. Recorded with ``torch.profiler``
    on the harness's own loop (``_run_plan``: one rank, gloo, this machine's CPU), its phase boundaries marked through
    the loop's clock; the median over ``iters`` iterations after one warm-up (DDP rebuilds its buckets in the first
    timed one). What an op does inside (its nested ops) is the CPU's kernels', which a GPU's may not share
    (:data:`hybrid.workloads.dlrm_graph.HARNESS_HOST_OPS`). Table rows and batch size change almost nothing (a few
    data-dependent ops): shrink them to keep it quick.

    Runs in this process; refuses where a default process group already exists (it would be replaced)."""
    import json
    import statistics

    import torch
    import torch.distributed as dist

    if iters < 1:
        raise InvalidInputError(f"iters must be >= 1, got {iters}")
    if dist.is_initialized():
        raise InvalidInputError("host_ops_per_phase starts its own one-rank process group: this process already has one")
    layout = build_layout(config, plan, 1)
    opts = HarnessOptions(iters=iters, warmup=1, index_pool=1, seed=seed)

    def clock() -> float:
        with torch.profiler.record_function(PHASE_MARK):
            pass
        return time.perf_counter()

    with tempfile.TemporaryDirectory(prefix="hybrid-host-ops-") as tmp:
        dist.init_process_group("gloo", store=dist.FileStore(str(Path(tmp) / "store"), 1), rank=0, world_size=1)
        try:
            groups = tuple(dist.new_group([0], backend="gloo") for _ in range(3))
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                _run_plan(torch, dist, groups, 0, config, layout, opts, torch.device("cpu"), clock)
        finally:
            dist.destroy_process_group()
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = [e for e in json.loads(trace.read_text())["traceEvents"]
                  if e.get("ph") == "X" and e.get("cat") in HOST_OP_CATEGORIES]
    marks = [e for e in events if e["name"] == PHASE_MARK]
    main = marks[0]["tid"]
    ops = [e for e in events if e["tid"] == main and e["name"] != PHASE_MARK]
    # the loop's own marks are top level; the exchange's backward marks lie inside autograd nodes
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in ops)
    starts = np.array([a for a, _ in spans])
    ends = np.maximum.accumulate(np.array([b for _, b in spans])) if spans else np.zeros(0)

    def nested(ts: float) -> bool:
        k = int(np.searchsorted(starts, ts, side="right")) - 1
        return k >= 0 and ends[k] > ts

    top = sorted(float(m["ts"]) for m in marks if m["tid"] == main and not nested(float(m["ts"])))
    names = ("input_dist", "lookup_fwd", "exchange_fwd", "dense_fwd", "backward", "optimizer", "between")
    if len(top) != 1 + 7 * (opts.warmup + iters):
        raise HarnessError(f"expected {1 + 7 * (opts.warmup + iters)} phase marks in the profile, found {len(top)}")
    ts = np.array([float(e["ts"]) for e in ops])
    per_iter: dict[str, list[float]] = {k: [] for k in names}
    for it in range(opts.warmup, opts.warmup + iters):
        bounds = top[1 + 7 * it: 8 + 7 * it] + ([top[8 + 7 * it]] if it + 1 < opts.warmup + iters else [np.inf])
        phase = np.searchsorted(np.array(bounds), ts, side="right") - 1
        for k, name in enumerate(names):
            per_iter[name].append(float(np.sum(phase == k)))
    return {k: float(statistics.median(v)) for k, v in per_iter.items()}


def default_threads(ranks: int) -> int:
    """CPU threads per rank: the cores this process may use divided by the ranks (at least one)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, ranks))


def run_dlrm(
    config: DLRMConfig,
    plans: Mapping[str, ShardingPlan] | Sequence[tuple[str, ShardingPlan]] | ShardingPlan,
    options: HarnessOptions | None = None,
    ranks: int | None = None,
) -> list[RunResult]:
    """Train ``config`` under each plan on ``ranks`` local processes (default ``config.gpus``) and return one
    :class:`RunResult` per plan, in the given order. Processes are spawned once for all plans.

    Raises :class:`InvalidInputError` for a plan that does not fit the config, :class:`HarnessError` when a
    worker fails or the run exceeds ``options.timeout_s``.
    """
    import torch.multiprocessing as mp

    opts = options or HarnessOptions()
    world = int(ranks or config.gpus)
    if world < 1:
        raise InvalidInputError(f"ranks must be >= 1, got {world}")
    unsupported = unsupported_features(config, opts.device)
    if unsupported:
        raise InvalidInputError("the harness does not run " + "; ".join(unsupported) + ": the engine predicts such "
                                "configs (`hybrid simulate`), the harness would measure another one")
    if opts.device == "cuda":
        import torch

        if not torch.cuda.is_available() or torch.cuda.device_count() < world:
            raise InvalidInputError(f"device=cuda needs {world} visible GPUs, found "
                                    f"{torch.cuda.device_count() if torch.cuda.is_available() else 0}")
    if hasattr(plans, "per_rank_tables"):
        plan_list = [(str(getattr(config, "name", "plan")), plans)]
    elif isinstance(plans, Mapping):
        plan_list = list(plans.items())
    else:
        plan_list = list(plans)
    if not plan_list:
        raise InvalidInputError("no sharding plan to run")
    for name, plan in plan_list:
        try:
            build_layout(config, plan, world)
        except KeyError as exc:
            raise InvalidInputError(f"plan {name!r} has no placement for table {exc}") from None
        unknown = set(plan) - {t.name for t in config.tables}
        if unknown:
            raise InvalidInputError(f"plan {name!r} names unknown table(s) {sorted(unknown)[:5]}")
        if str(config.interaction) == "dcn":
            raise InvalidInputError("the harness runs dot and cat interactions; dcn (DCNv2) configs are predicted "
                                    "by the engine only")
        if str(config.interaction) == "dot" and any(d != int(config.bottom_mlp[-1]) for d in
                                                      (int(t.embedding_dim) for t in config.tables)):
            raise InvalidInputError("dot interaction needs every embedding_dim equal to bottom_mlp[-1]")
    threads = opts.threads_per_rank or default_threads(world)
    with tempfile.TemporaryDirectory(prefix="hybrid-dlrm-") as tmp:
        store = str(Path(tmp) / "store")
        result_path = str(Path(tmp) / "result.pkl")
        t_start = time.perf_counter()
        ctx = mp.start_processes(_worker_entry, args=(world, store, config, plan_list, opts, threads, result_path),
                                 nprocs=world, join=False, start_method="spawn")
        try:
            while not ctx.join(timeout=1.0):
                if time.perf_counter() - t_start > opts.timeout_s:
                    raise HarnessError(f"DLRM harness timed out after {opts.timeout_s:.0f} s "
                                       f"({len(plan_list)} plans, {world} ranks)")
        except mp.ProcessRaisedException as exc:
            msg = str(exc).strip().splitlines()
            first = next((ln for ln in msg if ln.startswith("RuntimeError: rank")), msg[-1] if msg else "")
            raise HarnessError(f"DLRM harness worker failed: {first.removeprefix('RuntimeError: ')}") from None
        except mp.ProcessExitedException as exc:
            raise HarnessError(f"DLRM harness worker died: {exc}") from None
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
        with open(result_path, "rb") as fh:
            raw = pickle.load(fh)
    ch = config_hash(config)
    out = []
    for (name, plan), r in zip(plan_list, raw, strict=True):
        per_rank = np.asarray(r["rank_iter_ms"])
        out.append(RunResult(
            config_name=str(getattr(config, "name", "config")), config_hash=ch, plan_name=name,
            plan_hash=plan_hash(plan), ranks=world, iter_ms=per_rank.max(axis=0), rank_iter_ms=per_rank,
            phases_ms=r["phases"], threads_per_rank=threads, backend=opts.resolved_backend(),
            device=opts.device, warmup=opts.warmup, setup_s=float(r["setup_s"]),
            first_loss=float(r["first_loss"])))
    return out


def options_dict(opts: HarnessOptions) -> dict[str, Any]:
    """Options as a plain dict (for data cards and provenance)."""
    return asdict(opts)
