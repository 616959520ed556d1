"""Predictor-driven sharding search.

1. :func:`estimate_costs` asks the cost model ONCE for every (table, placement option) embedding kernel
   (forward and backward) and for a size grid of every collective the plan can use, giving cheap additive
   per-piece costs;
2. a greedy placement by predicted cost (largest first, each table to the option - table-wise on any rank,
   column-/row-wise over the least-loaded ranks, data-parallel - that minimises the estimated iteration);
3. local search from that plan and from every baseline plan: moves and swaps of tables on the bottleneck
   ranks and splits of their tables, each step evaluating all candidates at once with numpy;
4. the best few plans (and the baselines) are simulated end to end with the critical-path engine and checked
   for memory; the fastest that fits wins.

The estimate (per rank: embedding kernel time, with the host link its lookups and updates cross for a table in
host memory, priced as the graph prices it; plus all-to-all times from the per-rank send/receive volumes,
row-wise reduce-scatter/all-gather and data-parallel all-reduce) is additive and updated incrementally (under
``embedding_placement: auto`` the search keeps a rank's tables within the share of GPU memory the graph keeps them
in, and each plan's final estimate prices every piece where the graph places it: :func:`plan_estimate`), so
500 tables over 64 GPUs searches in about a second (experiments/engine_scaling/results.md). The estimate a
candidate is ranked by (:func:`plan_estimate`) is the longer of that GPU time plus the dense layers' kernels (after
the host's lead: its per-iteration work and first launch) and the busiest host's time launching the plan's graph
(small batches on fast GPUs are bound by the launches); greedy and local search score every move by that same
quantity, the host's launches counted per rank from the plan's fused lookup groups, collectives and data-parallel
tables (:class:`_LaunchModel`), and break ties by the GPU's time (a host-bound plan with more GPU slack).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from hybrid.engine.costs import OpCostModel, default_cost_model, model_catalog, predict_times
from hybrid.engine.graph import HOST, KINDS, OVERHEAD_CATEGORIES, CompiledGraph
from hybrid.engine.overheads import Overheads, dispatch_overheads, measured_dispatch_us
from hybrid.engine.simulate import SimResult, simulate
from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import Catalog
from hybrid.hardware.device import Device
from hybrid.ops.families import (
    ELEMENTWISE_VARIANTS,
    dense_sgd_update_share,
    expected_hottest_row_lookups,
    expected_unique_rows,
)
from hybrid.sharding.heuristics import BASELINES
from hybrid.sharding.memory import (
    FRAGMENTATION,
    HOST_EMBEDDING_SHARE,
    MemoryReport,
    check_host_mem,
    memory_per_rank,
    optimizer_multiplier,
    tablewise_budget,
)
from hybrid.sharding.plan import Shard, ShardingPlan
from hybrid.units import DTYPE_BYTES
from hybrid.workloads.dlrm import DLRMConfig
from hybrid.workloads.dlrm_graph import (
    ADAGRAD_COALESCE_SCALE,
    COALESCE_US_PER_DUPLICATE,
    DDP_BUCKET_BYTES,
    INDEX_BYTES,
    LOOKUP_FWD_VARIANT,
    SPARSE_SGD_UPDATE_SHARE,
    STORAGE_DTYPE,
    Target,
    build_dlrm_graph,
    collective_target,
    embedding_hbm_budget,
    host_link_us,
    host_placement_allowed,
    host_update_passes,
    lookup_groups,
    place_pieces,
    resolve_target,
    shard_pieces,
)

#: Measured peak memory of the plan search (tracemalloc, experiments/configs/dlrm_example.yaml): the greedy/search
#: candidate matrices (placements x 10 state rows x ranks floats, several temporaries, and the launch terms'
#: placements x ranks arrays) grow with ranks^2; the baselines and the simulation of each plan grow with ranks.
#: Re-measured with the 9-row state and the launch terms (2026-12-07): the full search less the baselines alone
#: took 149, 149 and 116 bytes per rank^2 at 256, 512 and 1024 ranks; the baselines alone 30, 53 and 106 MiB
#: (so the fixed and per-rank terms below hold them with room). The state then grew a 10th row (the share of the
#: embedding time after a GradScaler's host sync): the full search less the baselines then took 150 and 95 bytes per
#: rank^2 at 256 and 512 ranks (tracemalloc, the same config, a 5 s local-search budget; the same script gave 127
#: at 256 ranks before the row), held here by the old constant scaled by 10/9.
SEARCH_BYTES_PER_RANK2 = 167.0
BASELINE_BYTES_PER_RANK = 140e3
SEARCH_FIXED_BYTES = 64 * 2**20
#: Share of the available host memory a search may plan to use.
SEARCH_MEMORY_SHARE = 0.8


def estimate_search_bytes(gpus: int, strategies: list[str] | tuple[str, ...] | None) -> float:
    """Rough peak host memory of :func:`search_plans` for ``gpus`` ranks and these strategies (all when empty)."""
    quadratic = not strategies or any(s in ("greedy", "search") for s in strategies)
    return (SEARCH_FIXED_BYTES + BASELINE_BYTES_PER_RANK * gpus
            + (SEARCH_BYTES_PER_RANK2 * gpus**2 if quadratic else 0.0))


def check_search_size(gpus: int, strategies: list[str] | tuple[str, ...] | None, available: float | None, *,
                      cli: bool = False, gpus_option: bool = True) -> float:
    """The estimated bytes of the search; :class:`InvalidInputError` naming a way out when it does not fit in
    :data:`SEARCH_MEMORY_SHARE` of ``available`` host memory (None: unknown, no check). ``cli`` spells the way
    out as ``hybrid shard`` options; ``gpus_option`` False: the rank count is the config's, not a ``--gpus``."""
    need = estimate_search_bytes(gpus, strategies)
    if available is None or need <= SEARCH_MEMORY_SHARE * available:
        return need
    gib = 2**30
    what = f"--gpus {gpus}" if cli and gpus_option else f"{gpus} ranks" + (" (the config's gpus)" if cli else "")
    msg = (f"{what}: the plan search would need about {need / gib:,.1f} GiB of memory, more than the "
           f"{available / gib:,.1f} GiB available")
    base = estimate_search_bytes(gpus, list(BASELINES))
    if base <= SEARCH_MEMORY_SHARE * available and base < need:
        names = ",".join(BASELINES)
        msg += (f" (the greedy/search candidate matrices grow with gpus^2); the baseline strategies need about "
                f"{base / gib:,.1f} GiB (and time in proportion to gpus): "
                + (f"--strategy {names}" if cli else f"strategies={names}"))
    else:
        msg += "; use fewer --gpus" if cli else "; use fewer ranks"
    raise InvalidInputError(msg)

#: Coefficients of one placement option (see :func:`estimate_costs`); ``_HOST``: the bytes of weights and optimizer
#: state each holder rank keeps of the table, which go to its node's host memory when the search plans them there;
#: ``_HBMW``: those it keeps in its GPU's memory (held to :func:`~hybrid.workloads.dlrm_graph.embedding_hbm_budget`
#: under ``auto`` placement, past which the graph moves them to host memory); ``_EMBF``: the forward lookups' share
#: of ``_EMB`` (the all-to-alls between them and the backward synchronise the ranks: the iteration waits for the
#: slowest rank's forward, then for the slowest rank's backward and update); ``_EMBU``: the share of ``_EMB`` a
#: GradScaler's host sync leaves after it (the sparse gradient's unscale and the optimizer update).
_EMB, _MEM, _OSEND, _ORECV_ALL, _ORECV_H, _ISEND_ALL, _ISEND_H, _IRECV_H, _RW, _DP, _HOST, _HBMW, _EMBF, _EMBU = range(14)
_N_COEFFS = 14
#: Coefficients and state rows that differ between a piece in GPU memory and one in host memory.
_PLACED_COLS, _PLACED_ROWS = [_EMB, _MEM, _HOST, _HBMW, _EMBF, _EMBU], [0, 1, 6, 7, 8, 9]
#: Sharding type -> code of the search's launch state (:class:`_State`).
SHARD_CODES = {"table_wise": 0, "column_wise": 1, "row_wise": 2, "data_parallel": 3}
#: Rows of a search state (:class:`_State`).
_N_ROWS = 10
#: Size grid (bytes) on which collective times are predicted once and interpolated.
_GRID = np.logspace(2, 11.5, 48)


@dataclass(frozen=True)
class Option:
    """A placement option: sharding type and number of holder ranks."""

    type: str
    k: int


@dataclass(frozen=True)
class _LaunchModel:
    """A rank's host time as the DLRM graph (:func:`~hybrid.workloads.dlrm_graph.build_dlrm_graph`) launches a
    plan, counted so that the search prices it per candidate: every host event of a rank is a kernel or collective
    launch or a fixed per-iteration / optimizer work (:data:`~hybrid.engine.graph.OVERHEAD_CATEGORIES`), and a
    plan changes only the launches of its embedding side (:func:`_launch_counts`). ``base`` [R, categories]: the
    host events of the reference plan's graph (every table table-wise on rank 0) less that plan's own embedding
    launches; ``lead`` [categories]: rank 0's host events up to its first launch, which every GPU op of the
    iteration waits for (the per-iteration host work and that launch)."""

    base: np.ndarray
    lead: np.ndarray
    fixed: np.ndarray  # [R] fixed time (us) of the host events (none in the DLRM graph today)
    per_group: float  # kernels per fused sharded lookup group: fwd, bwd, update (Adagrad: coalesce + update), unscale
    per_sharded_rank: float  # kernels of a rank with sharded lookups: its output casts, fwd and bwd (lookup dtype)
    per_dp_group: float  # kernels per data-parallel group (every rank): fwd, bwd, dense step (+ 2 casts)
    bucket_bytes: float  # DDP's bucket cap: data-parallel groups' gradients share buckets of at least this many bytes
    mp_bottom: bool  # model-parallel bottom MLP: rank 0 packs its output for the pooled all-to-all
    n_ranks: int
    #: a GradScaler's host sync (``.item()`` of the found-inf flag: the host waits for the GPU's backward and the
    #: dense gradients' unscale): ``post_base`` [R, categories] the host events from it on, less the reference
    #: plan's own; kernels per sharded group (the sparse unscale and the update) and per data-parallel group (its
    #: dense step) launched after it; ``dense_post_us`` the dense layers' optimizer kernels (after it too)
    sync: bool = False
    post_base: np.ndarray | None = None
    post_per_group: float = 0.0
    post_per_dp_group: float = 0.0
    dense_post_us: float = 0.0
    dense_unscale_us: float = 0.0  # the dense gradients' unscale (the last kernel before the sync), dense part

    def host_us(self, overheads: Overheads, kernels: np.ndarray, collectives: np.ndarray) -> np.ndarray:
        """[n, R] host time (us) of each rank given the plans' embedding launches [n, R] of each kind."""
        vec = overheads.vector()
        k, c = OVERHEAD_CATEGORIES.index("kernel_launch"), OVERHEAD_CATEGORIES.index("collective_launch")
        return (self.base @ vec + self.fixed)[None] + kernels * vec[k] + collectives * vec[c]


def _launch_counts(lm: _LaunchModel, groups: np.ndarray, a2a: np.ndarray, n_sharded: np.ndarray,
                   n_rw: np.ndarray, n_cw: np.ndarray, n_dp_groups: np.ndarray, n_dp: np.ndarray,
                   dp_bytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[n, R] kernel and collective launches of n plans' embedding side per rank, as the graph makes them: per
    fused sharded group ``groups`` [n, R] and per rank holding any (its casts), per data-parallel group
    ``n_dp_groups`` [n]; with several ranks the input all-to-alls (counts, payload) and the unpack once any table
    is sharded (``n_sharded``), the pooled all-to-all and its gradient's while a rank holds a table-/column-wise
    piece (``a2a`` [n, R]: that rank packs its outputs), the row-wise pack, reduce-scatter and all-gather
    (``n_rw`` tables), the column-wise reassemble (``n_cw``) and one all-reduce per DDP bucket of the
    data-parallel gradients (``n_dp`` tables; ``dp_bytes`` [n, keys]: their bytes per fused group, each group whole
    in a bucket)."""
    kernels = (lm.per_group * groups + lm.per_sharded_rank * (groups > 0)
               + lm.per_dp_group * n_dp_groups[:, None].astype(np.float64))
    colls = np.zeros_like(kernels)
    if lm.n_ranks > 1:
        sharded = (n_sharded > 0)[:, None]
        own = a2a.copy()
        if lm.mp_bottom:
            own[:, 0] = True
        kernels += sharded * (1.0 + (own & sharded) + (n_rw > 0)[:, None] + (n_cw > 0)[:, None])
        colls += sharded * (2.0 + 2.0 * own.any(axis=1, keepdims=True) + 2.0 * (n_rw > 0)[:, None])
        # DDP buckets whole parameters (one fused table per data-parallel group, in the graph's order: by
        # embedding dim): a bucket closes once it holds ``bucket_bytes``, a group larger than that is one of its own
        b = np.asarray(dp_bytes, dtype=np.float64)
        b = b.reshape(len(kernels), -1)
        filled, chunks = np.zeros(len(b)), np.zeros(len(b))
        for k in range(b.shape[1]):
            filled = filled + np.maximum(b[:, k], 0.0)
            close = filled >= lm.bucket_bytes
            chunks += close
            filled = np.where(close, 0.0, filled)
        chunks += filled > 0
        colls += np.where(n_dp > 0, chunks, 0.0)[:, None]
    return kernels, colls


@dataclass
class CostTables:
    """Per-table, per-option predicted costs and interpolation grids for the collectives."""

    options: list[Option]
    emb_us: np.ndarray  # [T, O] embedding fwd+bwd marginal time on each holder rank
    coeffs: np.ndarray  # [T, O, 13] additive coefficients (time, memory, communication volumes, host/GPU bytes)
    grids: dict[str, np.ndarray]  # collective -> predicted us on _GRID
    dp_update_us_per_byte: float
    n_ranks: int
    budget: float  # memory per rank available to embeddings
    dense_bytes: float = 0.0  # dense gradients every rank all-reduces anyway
    dtype_bytes: float = 4.0  # bytes of a dense-dtype element (the graph's copies count elements of it)
    #: tables' weights in host memory (``embedding_placement`` host/auto, planned with ``host_weights``): the bytes
    #: of them each node may hold (:data:`~hybrid.sharding.memory.HOST_EMBEDDING_SHARE` of its host memory; inf:
    #: not stated, unchecked, as :func:`~hybrid.sharding.memory.memory_per_rank` leaves it) and its GPUs per node
    host_budget: float = math.inf
    gpus_per_node: int = 8
    #: ``embedding_placement`` auto on a GPU: the bytes of tables' weights and state a rank may keep in GPU memory
    #: (:func:`~hybrid.workloads.dlrm_graph.embedding_hbm_budget`; inf: no limit), and the coefficients [T, O, 13]
    #: with every sharded piece in GPU memory and in host memory, with the device, so that a plan is estimated
    #: with each piece where the graph places it (:func:`plan_estimate`)
    hbm_weight_budget: float = math.inf
    placed: tuple[np.ndarray, np.ndarray, Device] | None = None
    #: the host side of a plan, which the additive terms above leave out: each rank's host launches every kernel
    #: and collective of the iteration one after another (plus its per-iteration and optimizer host work), and a
    #: plan with more fused lookup groups, data-parallel tables or column-wise reassembles launches more.
    #: :func:`plan_estimate` takes each rank's host time from the plan's graph (``catalog``, ``overheads``: the
    #: simulation's) and its GPU's time as the additive terms plus ``dense_us`` (the dense layers' kernels of a
    #: rank, the same in every plan), whichever is longer; ``catalog`` None: the additive terms alone
    catalog: Catalog | None = None
    overheads: Overheads = field(default_factory=Overheads)
    dense_us: float = 0.0
    synchronous_host: bool = False  # a CPU device: the host waits for every kernel (host and kernel times add)
    host_cache: dict = field(default_factory=dict, repr=False, compare=False)
    #: the same host time counted per rank as the search builds a plan (:class:`_LaunchModel`; None: no host term),
    #: the fused lookup group each (table, option) piece joins (``piece_key`` [T, O]: its embedding dim's index; the
    #: graph fuses a rank's sharded pieces of one dim into one kernel, the data-parallel ones apart) and the fixed
    #: time of one fused kernel that the per-table marginal costs leave out (``group_floor_us``: sharded forward,
    #: sharded backward + update, data-parallel forward + backward)
    launch: _LaunchModel | None = None
    piece_key: np.ndarray | None = None
    group_floor_us: tuple[float, float, float] = (0.0, 0.0, 0.0)
    #: the share of ``group_floor_us``'s sharded backward a GradScaler's host sync leaves after it (the update's and
    #: the unscale's fixed times), and the fixed time of a rank's forward and backward output casts (paid once by a
    #: rank holding sharded pieces)
    post_floor_us: float = 0.0
    rank_floor_us: tuple[float, float] = (0.0, 0.0)
    dp_unscale_us_per_byte: float = 0.0  # a replicated table's share of that unscale, per byte of its weights
    #: a GPU's sparse Adagrad (None: SGD, or a CPU): per (table, option) the piece's hottest-row time in the coalesce
    #: (us, :data:`~hybrid.workloads.dlrm_graph.COALESCE_US_PER_DUPLICATE`; 0 for data-parallel options). A fused
    #: group pays the largest of its members' (a maximum, which the additive coefficients cannot carry): the search
    #: keeps each rank's members per fused group and adds the sum of those maxima (:meth:`_Search.hot_us`)
    hot_us: np.ndarray | None = None

    def host_per_node(self, v: np.ndarray) -> np.ndarray:
        """[n, nodes] bytes of sharded tables' weights and state each node's ranks hold, for states ``v`` [n, 10, R]:
        what the node's host memory takes when they all live there (``host``); under ``auto`` the graph keeps some
        in GPU memory (:func:`hybrid.workloads.dlrm_graph.place_pieces`), so this is an upper bound there, and a
        plan the search keeps passes the memory check's host test."""
        node = np.arange(v.shape[2]) // self.gpus_per_node
        return v[:, 6] @ (node[:, None] == np.arange(int(node[-1]) + 1)[None, :])

    def collective_us(self, op: str, size: np.ndarray | float) -> np.ndarray:
        s = np.maximum(np.asarray(size, dtype=np.float64), _GRID[0])
        t = np.exp(np.interp(np.log(s), np.log(_GRID), np.log(self.grids[op])))
        return np.where(np.asarray(size) > 0, t, 0.0)


def _options(config: DLRMConfig) -> list[Option]:
    """The placements the search prices: table-wise, column-wise over 2-8 ranks and row-wise over 2..R (powers of
    two), and data-parallel, on one GPU too: there a replicated table is still another plan than a table-wise one
    (a dense table-sized gradient and a dense optimizer step instead of a sparse backward and update, as the graph
    builds it), so a plan may name it and the estimate prices it as the graph simulates it."""
    R = config.gpus
    opts = [Option("table_wise", 1)]
    k = 2
    while k <= min(R, 8):
        opts.append(Option("column_wise", k))
        k *= 2
    k = 2
    while k <= R:
        opts.append(Option("row_wise", k))
        k *= 2
    opts.append(Option("data_parallel", R))
    return opts


def _valid(config: DLRMConfig, options: list[Option]) -> np.ndarray:
    """[T, O] which options each table admits (column splits must divide the dim, rows >= holders)."""
    dims = np.array([t.embedding_dim for t in config.tables])
    rows = np.array([t.num_embeddings for t in config.tables])
    out = np.ones((len(config.tables), len(options)), dtype=bool)
    for j, o in enumerate(options):
        if o.type == "column_wise":
            out[:, j] = dims % o.k == 0
        elif o.type == "row_wise":
            out[:, j] = rows >= o.k
    return out


def estimate_costs(config: DLRMConfig, model: OpCostModel, target: Target, capacity: float,
                   host_weights: bool = False, host_mem_per_node: float | None = None,
                   overheads: Overheads | None = None) -> CostTables:
    """All predictions the search needs, in one ``model.predict`` call. ``host_weights``: the sharded tables'
    weights and state planned in host memory, each node's share of them held to
    :data:`~hybrid.sharding.memory.HOST_EMBEDDING_SHARE` of ``host_mem_per_node`` bytes (None or 0: not stated,
    unchecked), as the memory check holds them. ``overheads``: the host costs the plans' simulations use (default:
    the engine's, :class:`~hybrid.engine.overheads.Overheads` with one launch at the dispatch ``model`` measured on
    the target GPU where it did, as ``simulate`` takes them), which the estimate's host term prices the launches
    with."""
    R, B, eb, dt = config.gpus, config.batch_size_per_gpu, config.dtype_bytes, config.dtype
    Bg = B * R
    options = _options(config)
    T, n_opt = len(config.tables), len(options)
    rows = np.array([t.num_embeddings for t in config.tables], dtype=np.float64)
    dims = np.array([t.embedding_dim for t in config.tables], dtype=np.float64)
    pool = np.array([t.pooling_factor for t in config.tables])
    alpha = np.array([t.zipf_alpha for t in config.tables])
    # embedding kernel rows for every (table, option, direction) + a tiny op for the fixed per-kernel floor
    piece_rows = np.empty((T, n_opt))
    piece_dim = np.empty((T, n_opt))
    piece_pool = np.empty((T, n_opt))
    piece_batch = np.empty((T, n_opt))
    for j, o in enumerate(options):
        piece_rows[:, j] = np.maximum(np.floor(rows / o.k), 1) if o.type == "row_wise" else rows
        piece_dim[:, j] = np.maximum(dims // o.k, 1) if o.type == "column_wise" else dims
        piece_pool[:, j] = pool / o.k if o.type == "row_wise" else pool
        piece_batch[:, j] = B if o.type == "data_parallel" else Bg
    n = T * n_opt
    # the lookups gather and update rows in the tables' own dtype, as the graph's rows say (mixed precision: fp32
    # tables under fp16 MLPs; priced in the MLPs' dtype they moved half their bytes)
    emb_dt = config.embedding_dtype
    emb = pd.DataFrame({
        "op": "embedding_bag", "device": target.device.key, "dtype": emb_dt, "num_tables": 1,
        "num_embeddings": piece_rows.ravel(), "embedding_dim": piece_dim.ravel(),
        "pooling_factor": np.maximum(piece_pool.ravel(), 1e-3), "batch_size": piece_batch.ravel(),
        "zipf_alpha": np.repeat(alpha, n_opt), "index_dist": np.where(np.repeat(alpha, n_opt) > 0, "zipf", "uniform"),
    })
    # every row names its variant as the engine's DLRM graph and the profiler's rows do, so the embedding model's
    # fitted (direction, variant) reference prices them: forward = sum pooling; backward = the sparse gradient plus
    # its SGD update (``sparse_sgd``, the graph's backward + update of a sharded table) for sharded options, the
    # dense gradient plus update (``dense_sgd``) for the data-parallel one (its dense all-reduce and optimizer
    # pass are added separately, as in the graph)
    bwd_variant = np.array(["dense_sgd" if o.type == "data_parallel" else "sparse_sgd" for o in options])
    emb = pd.concat([emb.assign(direction="fwd", variant=LOOKUP_FWD_VARIANT),
                     emb.assign(direction="bwd", variant=np.tile(bwd_variant, T))], ignore_index=True)
    floor = pd.DataFrame({"op": "embedding_bag", "device": target.device.key, "dtype": emb_dt, "num_tables": 1,
                          "num_embeddings": 1.0, "embedding_dim": 1.0, "pooling_factor": 1e-3, "batch_size": 1.0,
                          "zipf_alpha": 0.0, "index_dist": "uniform", "direction": ["fwd", "bwd", "bwd"],
                          "variant": [LOOKUP_FWD_VARIANT, "sparse_sgd", "dense_sgd"]})
    coll_ops = ["all_to_all", "reduce_scatter", "all_gather", "all_reduce"] if R > 1 else []
    on, _ = collective_target(target, model_catalog(model), R)  # as the graph prices them (a bare CPU: gloo)
    coll = pd.DataFrame([{"op": op, "device": target.device.key, "system": on.system, "dtype": dt,
                          "size_bytes": float(s), "n_ranks": R, "n_nodes": on.nodes(R)}
                         for op in coll_ops for s in _GRID])
    # a sharded table's optimizer step as the graph runs it: SGD's update is the update share of the profiled
    # ``sparse_sgd`` row (backward + update: one row in all); Adagrad's is a coalesce (ADAGRAD_COALESCE_SCALE x that
    # row) and an elementwise Adagrad step over the touched rows (+ the backward's share of the row)
    adagrad = config.optimizer != "sgd"
    sparse_scale = (1.0 - SPARSE_SGD_UPDATE_SHARE) + ADAGRAD_COALESCE_SCALE if adagrad else 1.0
    touched = expected_unique_rows(piece_rows, piece_batch * piece_pool, np.repeat(alpha, n_opt).reshape(T, n_opt))
    upd = pd.DataFrame({"op": "elementwise", "device": target.device.key, "dtype": config.embedding_dtype,
                        "variant": config.optimizer,
                        "elements": np.maximum(np.append((touched * piece_dim).ravel(), 1.0), 1.0)}) if adagrad else None
    # the copies around the pooled exchange (the unpack of the received indices, the pack of the pooled outputs
    # and of the row-wise partial sums), priced on an element grid as the graph's ``copy`` rows
    copies = pd.DataFrame({"op": "elementwise", "device": target.device.key, "dtype": dt, "variant": "copy",
                           "direction": "fwd", "elements": _GRID}) if R > 1 else None
    # the lookups' outputs cast to the dense dtype (forward, every sharded piece's pooled output) and their
    # gradients back (backward; a replicated table's over the local batch), one kernel per rank (a replicated group
    # each), as the graph's ``cast`` rows; and under a GradScaler, the unscale of every sharded piece's sparse
    # gradient values (batch x pooling x dim) and of a replicated table's dense gradient (rows x dim, with the dense
    # gradients in one fp32 pass). Each priced per piece, the last row of each block a one-element kernel (the
    # fixed time of a kernel, paid once)
    cast_outputs = STORAGE_DTYPE.get(config.lookup_dtype, config.lookup_dtype) != STORAGE_DTYPE.get(dt, dt)
    extra_rows = []
    if cast_outputs:
        width = DTYPE_BYTES[dt] / DTYPE_BYTES[config.lookup_dtype]
        for direction, n_in, n_out in (("fwd", 1.0, width), ("bwd", width, 1.0)):
            extra_rows.append(pd.DataFrame({
                "op": "elementwise", "device": target.device.key, "dtype": config.lookup_dtype, "variant": "cast",
                "direction": direction, "elements": np.append((piece_batch * piece_dim).ravel(), 1.0),
                "n_inputs": n_in, "n_outputs": n_out, "flops_per_element": 0.0}))
    if config.grad_scaler:
        extra_rows.append(pd.DataFrame({"op": "elementwise", "device": target.device.key, "dtype": emb_dt,
                                        "variant": "scale_", "elements": np.maximum(np.append(
                                            (piece_batch * piece_pool * piece_dim).ravel(), 1.0), 1.0)}))
        extra_rows.append(pd.DataFrame({"op": "elementwise", "device": target.device.key, "dtype": "fp32",
                                        "variant": "scale_", "elements": np.append(rows * dims, 1.0)}))
    table = pd.concat([emb, floor, coll, *([upd] if adagrad else []), *([copies] if R > 1 else []), *extra_rows],
                      ignore_index=True)
    times, _ = predict_times(model, table)
    extra_times = []  # per block: (times [rows], its one-element kernel's time)
    e0 = len(table) - sum(len(x) for x in extra_rows)
    for block in extra_rows:
        extra_times.append((times[e0:e0 + len(block) - 1], float(times[e0 + len(block) - 1])))
        e0 += len(block)
    times = times[:len(table) - sum(len(x) for x in extra_rows)]
    # a data-parallel table's update is the dense optimizer pass (``dp_update_us_per_byte``), as in the graph: its
    # backward row (backward + update, as profiled) keeps only the backward's share
    keep = 1.0 - dense_sgd_update_share(table.iloc[: 2 * n + 3])
    times = times.copy()
    times[: 2 * n + 3] *= keep
    fwd, bwd = times[:n].reshape(T, n_opt), times[n:2 * n].reshape(T, n_opt)
    f_floor = times[2 * n]
    b_floor = np.where(bwd_variant == "dense_sgd", times[2 * n + 2], times[2 * n + 1])  # per option [n_opt]
    emb_fwd_us = np.maximum(fwd - f_floor, 0.0)
    c0 = 2 * n + 3
    sharded_bwd = np.array([o.type != "data_parallel" for o in options])
    bwd_us = np.maximum(bwd - b_floor, 0.0) * np.where(sharded_bwd, sparse_scale, 1.0)
    # the sparse optimizer step's share (the update share of SGD's row; Adagrad's coalesce and update), which a
    # GradScaler's host sync leaves after it
    post_share = ADAGRAD_COALESCE_SCALE if adagrad else SPARSE_SGD_UPDATE_SHARE
    post_us = np.where(sharded_bwd, np.maximum(bwd - b_floor, 0.0) * post_share, 0.0)
    upd_floor = 0.0
    if adagrad:
        u0 = c0 + len(coll_ops) * len(_GRID)
        upd_floor = float(times[u0 + n])
        upd_us = np.where(sharded_bwd, np.maximum(times[u0:u0 + n].reshape(T, n_opt) - upd_floor, 0.0), 0.0)
        # (not here: a GPU coalesce's hottest-row term, a maximum per fused group: ``CostTables.hot_us``)
        bwd_us, post_us = bwd_us + upd_us, post_us + upd_us
    post_floor = float(times[2 * n + 1]) * post_share + upd_floor
    blocks = iter(extra_times)
    rank_floor = (0.0, 0.0)  # fixed time of a rank's forward and backward cast (once per rank with sharded pieces)
    dp_cast_floor = 0.0
    if cast_outputs:
        (cf, cf_floor), (cb, cb_floor) = next(blocks), next(blocks)
        cf = np.maximum(cf.reshape(T, n_opt) - cf_floor, 0.0)
        cb = np.maximum(cb.reshape(T, n_opt) - cb_floor, 0.0)
        emb_fwd_us = emb_fwd_us + np.where(sharded_bwd, cf, 0.0)
        bwd_us = bwd_us + cb  # (a replicated group casts its gradient, over the local batch, alone)
        rank_floor, dp_cast_floor = (cf_floor, cb_floor), cb_floor
    unscale_floor = dp_unscale = 0.0
    if config.grad_scaler:
        (su, su_floor), (du, du_floor) = next(blocks), next(blocks)
        su = np.where(sharded_bwd, np.maximum(su.reshape(T, n_opt) - su_floor, 0.0), 0.0)
        bwd_us, post_us = bwd_us + su, post_us + su
        post_floor += su_floor
        # a replicated table's gradient joins the dense gradients' unscale (one kernel, its fixed time paid there)
        du = np.maximum(du - du_floor, 0.0)
        bwd_us = bwd_us + np.where(sharded_bwd, 0.0, du[:, None])
        dp_unscale = float(du.max() / max(float((rows * dims).max()) * config.embedding_dtype_bytes, 1.0))
        unscale_floor = su_floor  # (once per sharded group: added to its backward's fixed time below)
    emb_us = emb_fwd_us + bwd_us
    grids = {op: np.maximum(times[c0 + i * len(_GRID): c0 + (i + 1) * len(_GRID)], 1e-6)
             for i, op in enumerate(coll_ops)}
    if R > 1:
        grids["copy"] = np.maximum(times[-len(_GRID):], 1e-6)
    if host_weights:
        # a sharded piece in host memory: its lookups read their rows, and its update reads and writes the touched
        # rows (and their optimizer state), over the host link instead of HBM, priced as the graph prices them
        looked_up = piece_batch * piece_pool
        unique = expected_unique_rows(piece_rows, looked_up, np.repeat(alpha, n_opt).reshape(T, n_opt))
        fwd_link_us = host_link_us(target.device, looked_up, piece_dim, config.embedding_dtype_bytes)
        link_us = fwd_link_us + host_link_us(target.device, unique, piece_dim, config.embedding_dtype_bytes,
                                             host_update_passes(config.optimizer))
        sharded = np.array([o.type != "data_parallel" for o in options])  # (replicated tables stay on the GPU)
        emb_us = emb_us + np.where(sharded, link_us, 0.0)
        emb_fwd_us = emb_fwd_us + np.where(sharded, fwd_link_us, 0.0)
        post_us = post_us + np.where(sharded, link_us - fwd_link_us, 0.0)  # (the update's rows)
    valid = _valid(config, options)
    emb_us = np.where(valid, emb_us, np.inf)
    emb_fwd_us = np.where(valid, emb_fwd_us, 0.0)  # (an invalid option's total is inf already)
    post_us = np.where(valid, post_us, 0.0)
    # additive coefficients per (table, option)
    mult = optimizer_multiplier(config)
    frag = 1.0 + FRAGMENTATION
    # what one source rank sends a piece's holder, as the graph sends it (dlrm_graph.comm_volumes): the piece's lookup
    # indices plus one bag length per sample (a row-wise piece gets 1/k of the indices, every piece the lengths)
    idx = B * pool * INDEX_BYTES
    lengths = B * INDEX_BYTES
    C = np.zeros((T, n_opt, _N_COEFFS))
    w = rows * dims * config.embedding_dtype_bytes  # the tables' weights are in their own dtype (mixed precision)
    for j, o in enumerate(options):
        w_held = 0.0 if host_weights else w  # a sharded piece's weights and state (in host memory: none on the GPU)
        C[:, j, _EMB] = emb_us[:, j]
        C[:, j, _EMBF] = emb_fwd_us[:, j]
        C[:, j, _EMBU] = post_us[:, j]
        if host_weights and o.type != "data_parallel":  # (replicated tables stay on the GPU: place_pieces)
            C[:, j, _HOST] = w / o.k * mult
        else:
            C[:, j, _HBMW] = w / o.k * mult  # (a data-parallel table: k = R, but every rank holds all of it)
        if o.type == "data_parallel":
            C[:, j, _HBMW] = w * mult
        if o.type in ("table_wise", "column_wise"):
            dk = dims / o.k
            C[:, j, _MEM] = frag * (w_held / o.k * mult + Bg * dk * eb * 6.0 + Bg * pool * 8.0 * 3.0)
            C[:, j, _OSEND] = (R - 1) * B * dk * eb
            C[:, j, _ORECV_ALL] = B * dims * eb
            C[:, j, _ORECV_H] = -B * dk * eb
            C[:, j, _ISEND_ALL] = o.k * (idx + lengths)
            C[:, j, _ISEND_H] = -(idx + lengths)
            C[:, j, _IRECV_H] = (R - 1) * (idx + lengths)
        elif o.type == "row_wise":
            C[:, j, _MEM] = frag * (w_held / o.k * mult + Bg * dims * eb * 4.0 + Bg * pool / o.k * 8.0 * 3.0)
            C[:, j, _ISEND_ALL] = idx + o.k * lengths
            C[:, j, _ISEND_H] = -(idx / o.k + lengths)
            C[:, j, _IRECV_H] = (R - 1) * (idx / o.k + lengths)
            C[:, j, _RW] = Bg * dims * eb
        else:  # data_parallel: dense gradient of the whole table, all-reduced
            C[:, j, _MEM] = frag * (w * (mult + 1.0) + B * dims * eb * 2.0)
            C[:, j, _DP] = w
    dev = target.device
    # us per byte of a replicated table's update: the passes of the graph's dense optimizer step over it (SGD: read
    # the gradient, read + write the weights = 3; torch's Adagrad: 11); the zero-filled gradient is in emb_us. It was
    # (3 + state) passes: one too many for SGD, 6 too few for Adagrad
    n_in, n_out, _ = ELEMENTWISE_VARIANTS[config.optimizer]
    dp_update = (n_in + n_out) / dev.mem_bw * 1e6
    host = {}
    auto = host_placement_allowed(config, dev) and config.embedding_placement == "auto"
    if (host_weights or auto) and host_mem_per_node is not None and host_mem_per_node > 0:
        host = {"host_budget": HOST_EMBEDDING_SHARE * float(host_mem_per_node),
                "gpus_per_node": int(target.gpus_per_node)}
    if auto:  # the graph keeps a rank's tables in its GPU's memory up to this share of it, the rest in host memory
        host["hbm_weight_budget"] = embedding_hbm_budget(dev)
    catalog = model_catalog(model)
    dense_us, launch = _reference_terms(config, model, catalog)
    # the fused group a piece joins on its rank: one per embedding dim (a column-wise piece's is its share)
    _, keys = np.unique(piece_dim, return_inverse=True)
    # a fused kernel's fixed time, which the marginal costs above leave out of every table: once per group (the
    # sharded backward's row is split between the backward and the SGD update, whose floors add to one row's;
    # Adagrad's backward share, coalesce and update each pay theirs)
    dp_floor = float(f_floor + times[2 * n + 2]) + dp_cast_floor
    sparse_floor = float(times[2 * n + 1]) * sparse_scale + upd_floor + unscale_floor
    # the engine's defaults, as simulate takes them for this model: one launch costs the dispatch the model measured
    # on this GPU, where it did (hybrid.engine.overheads.measured_dispatch_us)
    default_overheads = dispatch_overheads(Overheads(), measured_dispatch_us(model, [dev.key]))
    # a GPU coalesce's hottest row per piece (sparse Adagrad; the graph charges a fused group its largest member's)
    t_dup = COALESCE_US_PER_DUPLICATE.get(dev.kind, 0.0) if adagrad else 0.0
    hot_us = None
    if t_dup > 0:
        # (a row-wise piece: the whole table's hottest row, on whichever rank holds it, as the graph counts it)
        full = expected_hottest_row_lookups(rows, Bg * pool, alpha)
        hot_us = t_dup * np.repeat(full[:, None], n_opt, axis=1)
        hot_us[:, [o.type == "data_parallel" for o in options]] = 0.0
    return CostTables(options, emb_us, C, grids, dp_update, R, tablewise_budget(config, capacity),
                      config.dense_params() * eb, **host, catalog=catalog, dense_us=dense_us,
                      synchronous_host=dev.kind == "cpu", launch=launch, piece_key=keys.reshape(T, n_opt),
                      overheads=overheads if overheads is not None else default_overheads, dtype_bytes=float(eb),
                      group_floor_us=(float(f_floor), sparse_floor, dp_floor), post_floor_us=post_floor,
                      rank_floor_us=(float(rank_floor[0]), float(rank_floor[1])), dp_unscale_us_per_byte=dp_unscale,
                      hot_us=hot_us)


# ------------------------------------------------------------------------------------------------ search state
@dataclass
class _State:
    """Additive per-rank totals of a (partial) plan."""

    #: [10, R]: emb, mem, osend, orecv, isend, irecv, host, hbm (weights and state in host / GPU memory), emb_fwd
    #: (the forward share of emb), emb_post (the share after a GradScaler's host sync: unscale and update)
    v: np.ndarray
    rw: float = 0.0
    dp: float = 0.0
    #: what the plan's launches depend on (:func:`_launch_counts`): [R, keys] sharded pieces per rank and fused
    #: group (``CostTables.piece_key``), [R] table-/column-wise pieces per rank, [keys] data-parallel tables per
    #: group and the numbers of sharded, row-wise, column-wise and data-parallel tables
    cnt: np.ndarray | None = None
    a2a: np.ndarray | None = None
    dpc: np.ndarray | None = None
    #: [keys] data-parallel gradient bytes per fused group (the DDP buckets they fill)
    dpb: np.ndarray | None = None
    n: np.ndarray = field(default_factory=lambda: np.zeros(4))


def _add_hot(v: np.ndarray, hot: np.ndarray) -> np.ndarray:
    """In place and returned: state rows ``v`` ([..., 10, R]) with a GPU coalesce's hottest-row time ``hot``
    ([..., R]) added where the graph puts it, the backward + update (row 0) and the share a GradScaler's sync leaves
    after it (row 9)."""
    v[..., 0, :] += hot
    v[..., 9, :] += hot
    return v


def _delta(coef: np.ndarray, H: np.ndarray) -> np.ndarray:
    """[n, 10, R] state change of adding n pieces with coefficient rows ``coef`` [n, 14] on holders ``H`` [n, R]."""
    H = H.astype(np.float64)
    out = np.empty((len(coef), _N_ROWS, H.shape[1]))
    out[:, 0] = H * coef[:, _EMB, None]
    out[:, 1] = H * coef[:, _MEM, None]
    out[:, 2] = H * coef[:, _OSEND, None]
    out[:, 3] = coef[:, _ORECV_ALL, None] + H * coef[:, _ORECV_H, None]
    out[:, 4] = coef[:, _ISEND_ALL, None] + H * coef[:, _ISEND_H, None]
    out[:, 5] = H * coef[:, _IRECV_H, None]
    out[:, 6] = H * coef[:, _HOST, None]
    out[:, 7] = H * coef[:, _HBMW, None]
    out[:, 8] = H * coef[:, _EMBF, None]
    out[:, 9] = H * coef[:, _EMBU, None]
    return out


def _objective(costs: CostTables, v: np.ndarray, rw: np.ndarray, dp: np.ndarray,
               extra: np.ndarray | None = None, groups: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Estimated iteration-dependent time (us) for states ``v`` [n, 10, R] (inf where a rank's memory overflows, or
    a node's host memory the tables placed there: :meth:`CostTables.host_per_node`, or, under ``auto`` placement,
    a rank's tables in GPU memory pass the share the graph keeps there: it would move some to host memory).

    ``extra`` (greedy construction): ``[embedding time, pooled-output bytes each rank will still receive,
    index bytes each rank will still send]`` of the tables not placed yet, so the estimate of a partial plan
    is a lower bound of the final one (the embedding term is at least the average final load).

    ``groups``: the plans' fused lookup kernels, ``([n, R] sharded groups per rank, [n] data-parallel groups)``,
    each of which pays its kernel's fixed time once (``costs.group_floor_us``); None: not counted.
    """
    R = costs.n_ranks
    # the slowest rank's forward lookups, then (after the all-to-alls, which every rank joins) the slowest rank's
    # backward and update: not necessarily the same rank
    fwd, bwd = v[:, 8], v[:, 0] - v[:, 8]
    if R > 1 and "copy" in costs.grids:
        # each rank unpacks the indices it receives (its own share too) and packs its pooled outputs (table-/
        # column-wise pieces, for every rank's batch) and its row-wise partial sums (the global batch) for the
        # exchange: copies on its compute stream between the input all-to-all and the pooled one
        eb = costs.dtype_bytes
        fwd = (fwd + costs.collective_us("copy", (v[:, 5] + v[:, 4] / R) / eb)
               + costs.collective_us("copy", v[:, 2] * R / ((R - 1) * eb))
               + costs.collective_us("copy", np.asarray(rw, dtype=np.float64) / eb)[:, None])
    if groups is not None:
        f_floor, b_floor, dp_floor = costs.group_floor_us
        has = groups[0] > 0
        fwd = fwd + f_floor * groups[0] + costs.rank_floor_us[0] * has
        bwd = bwd + b_floor * groups[0] + costs.rank_floor_us[1] * has
    emb = fwd.max(axis=1) + bwd.max(axis=1)
    if groups is not None:  # the data-parallel lookups of every rank
        emb = emb + dp_floor * groups[1]
    if extra is not None:
        emb = np.maximum(emb, (v[:, 0].sum(axis=1) + extra[0]) / R)
    obj = emb.copy()
    if R > 1:
        scale = R / (R - 1)
        if extra is not None:  # the volumes of tables still to place (as if table-wise elsewhere)
            out_size = np.maximum(np.maximum(v[:, 2], v[:, 3] + extra[1]).max(axis=1),
                                  (v[:, 2].sum(axis=1) + extra[1] * R) / R) * scale
            in_size = np.maximum((v[:, 4] + extra[2]).max(axis=1), v[:, 5].max(axis=1)) * scale
        else:
            out_size = np.maximum(v[:, 2], v[:, 3]).max(axis=1) * scale
            in_size = np.maximum(v[:, 4], v[:, 5]).max(axis=1) * scale
        obj += 2.0 * costs.collective_us("all_to_all", out_size) + costs.collective_us("all_to_all", in_size)
        obj += costs.collective_us("reduce_scatter", rw) + costs.collective_us("all_gather", rw)
        # data-parallel gradients join the dense DDP buckets: only the extra all-reduce time counts
        obj += (costs.collective_us("all_reduce", dp + costs.dense_bytes)
                - costs.collective_us("all_reduce", costs.dense_bytes))
    obj += dp * costs.dp_update_us_per_byte
    over = v[:, 1].max(axis=1) > costs.budget
    if math.isfinite(costs.hbm_weight_budget):
        over |= v[:, 7].max(axis=1) > costs.hbm_weight_budget
    if math.isfinite(costs.host_budget):
        over |= (costs.host_per_node(v) > costs.host_budget).any(axis=1)
    return np.where(over, np.inf, obj)


def _estimate(costs: CostTables, v: np.ndarray, rw: np.ndarray, dp: np.ndarray, extra: np.ndarray | None = None,
              launch: tuple[np.ndarray, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The search's estimate of n plans (:func:`plan_estimate`'s quantity; inf where a memory overflows) and their
    GPU time: :func:`_objective` plus the dense layers' kernels, after the host's lead (its per-iteration work and
    first launch, which the first GPU op waits for); the estimate is that or the busiest host's time and the
    GPU work still queued after its last launch (:func:`_dp_tail_us`), whichever is longer (their sum on a CPU
    device, whose host waits for every kernel). ``launch``: ``(busiest host's time [n], sharded groups per rank
    [n, R], data-parallel groups [n], data-parallel gradient bytes per fused group [n, keys])`` of the plans
    (:meth:`_Search._launch_terms`; None without a host term: the GPU's time alone)."""
    if launch is None:
        gpu = _objective(costs, v, rw, dp, extra) + costs.dense_us
        return gpu, gpu
    host, groups, n_dpg, dpb = launch
    gpu = _objective(costs, v, rw, dp, extra, (groups, n_dpg)) + costs.dense_us
    if costs.synchronous_host:  # (the host's own time holds its lead)
        return np.where(np.isfinite(gpu), host + gpu, gpu), gpu
    lm, vec = costs.launch, costs.overheads.vector()
    k_us = vec[OVERHEAD_CATEGORIES.index("kernel_launch")]
    gpu = gpu + lm.lead @ vec
    tail = _dp_tail_us(costs, dpb, k_us)
    if not lm.sync:
        return np.where(np.isfinite(gpu), np.maximum(host + tail, gpu), gpu), gpu
    # a GradScaler's host sync splits the iteration in two: the host waits there for the GPU's backward (and the
    # dense gradients' unscale), then reads the flag (one launch's time) and only then launches the sparse unscales,
    # the updates and the dense steps, which the GPU runs after it: the longer of host and GPU before the sync, plus
    # the longer after it (the host's launches and the steps it leaves queued, or the GPU's work after the flag and
    # the first launch). Left out, a mixed-precision plan's update ran beside the backward in the estimate
    post_host = ((lm.post_base @ vec)[None] + k_us * (lm.post_per_group * groups
                                                       + lm.post_per_dp_group * n_dpg[:, None])).max(axis=1)
    post_gpu = ((v[:, 9] + costs.post_floor_us * groups).max(axis=1) + lm.dense_post_us
                + np.asarray(dp, dtype=np.float64) * costs.dp_update_us_per_byte)
    # the dense gradients' unscale, which the host launches last before it waits, runs after its launches when the
    # host leads (a replicated 2M-row table's share: 300 us on an H100)
    unscale = lm.dense_unscale_us + np.asarray(dp, dtype=np.float64) * costs.dp_unscale_us_per_byte
    est = (np.maximum(host - post_host + unscale, gpu - post_gpu)
           + np.maximum(post_host + tail, post_gpu + 2.0 * k_us))
    return np.where(np.isfinite(gpu), est, gpu), gpu


def _dp_tail_us(costs: CostTables, dpb: np.ndarray, launch_us: float) -> np.ndarray:
    """[n] GPU time (us) left after the host's last launch: the data-parallel tables' dense optimizer steps, one
    kernel per fused group (``dpb`` [n, keys]: their bytes, by embedding dim as the graph orders them), are the
    last kernels a rank launches; a host-bound rank launches each as the GPU gets to it, so the iteration ends
    the longest of (the steps from the k-th on, less the launches of the later ones) after the host's last
    launch. Left out, a host-bound plan replicating a 2M-row table on one H100 (batch 2048) was estimated at
    the host's 960 + 64 us against 1422 us simulated (-28%): its 460 us step ran after the last launch."""
    d = np.asarray(dpb, dtype=np.float64) * costs.dp_update_us_per_byte
    if d.ndim != 2 or d.shape[1] == 0:
        return np.zeros(len(d))
    present = d > 0
    after_d = np.cumsum(d[:, ::-1], axis=1)[:, ::-1]  # the steps from group k on
    after_n = np.cumsum(present[:, ::-1], axis=1)[:, ::-1]
    return np.where(present, after_d - (after_n - 1) * launch_us, 0.0).max(axis=1).clip(min=0.0)


def _lexmin(objs: np.ndarray, gpu: np.ndarray) -> int:
    """The candidate of least estimate, of the least GPU time among equal ones (a host-bound estimate ties every
    plan that launches as much; the one with more GPU slack is the safer)."""
    best = float(np.min(objs))
    tied = np.flatnonzero(objs <= best * (1 + 1e-12)) if np.isfinite(best) else np.array([int(np.argmin(objs))])
    return int(tied[np.argmin(gpu[tied])])


def _holders_mask(R: int, ranks: list[int] | tuple[int, ...] | np.ndarray) -> np.ndarray:
    h = np.zeros(R, dtype=bool)
    h[list(ranks)] = True
    return h


class _Search:
    """Mutable search over placements: ``assign[t] = (option index, holder ranks)``."""

    def __init__(self, config: DLRMConfig, costs: CostTables):
        self.config = config
        self.costs = costs
        self.R = config.gpus
        self.T = len(config.tables)
        self.opt_index = {(o.type, o.k): j for j, o in enumerate(costs.options)}
        self.state = _State(np.zeros((_N_ROWS, self.R)))
        self.assign: list[tuple[int, tuple[int, ...]] | None] = [None] * self.T
        #: the host term (``costs.launch``): each option's sharding type (0 table-, 1 column-, 2 row-wise, 3
        #: data-parallel) and the launch state
        self._type = np.array([SHARD_CODES[o.type] for o in costs.options], dtype=np.int64)
        self._lm = costs.launch if costs.catalog is not None else None  # (no catalog: no host term, as plan_estimate)
        self.approximate = False  # a loaded plan with an option outside the menu, priced as the nearest one
        #: a GPU coalesce's hottest rows (``costs.hot_us``): per (rank, fused group key), each member table's time
        self._hot: dict[tuple[int, int], dict[int, float]] | None = {} if costs.hot_us is not None else None
        if self._lm is not None:
            n_keys = int(costs.piece_key.max()) + 1
            self.state.cnt, self.state.a2a, self.state.dpc = (np.zeros((self.R, n_keys)), np.zeros(self.R),
                                                              np.zeros(n_keys))
            self.state.dpb = np.zeros(n_keys)

    # state bookkeeping -------------------------------------------------------------------------------------
    def _piece(self, t: int, j: int, ranks: tuple[int, ...]) -> tuple[np.ndarray, float, float]:
        coef = self.costs.coeffs[t, j]
        d = _delta(coef[None], _holders_mask(self.R, ranks)[None])[0]
        return d, coef[_RW], coef[_DP]

    def place(self, t: int, j: int, ranks: tuple[int, ...]) -> None:
        if self.assign[t] is not None:
            self.unplace(t)
        d, rw, dp = self._piece(t, j, ranks)
        self.state.v += d
        self.state.rw += rw
        self.state.dp += dp
        self._count(self.state, t, j, ranks, 1.0)
        self._hot_add(t, j, ranks)
        self.assign[t] = (j, tuple(ranks))

    def unplace(self, t: int) -> None:
        j, ranks = self.assign[t]
        d, rw, dp = self._piece(t, j, ranks)
        self.state.v -= d
        self.state.rw -= rw
        self.state.dp -= dp
        self._count(self.state, t, j, ranks, -1.0)
        if self._hot is not None:
            key = self._group_key(t, j)
            for r in ranks:
                self._hot.get((r, key), {}).pop(t, None)
        self.assign[t] = None

    def _group_key(self, t: int, j: int) -> int:
        """The fused lookup group table ``t``'s piece joins under option ``j`` (``costs.piece_key``: its dim's)."""
        return int(self.costs.piece_key[t, j]) if self.costs.piece_key is not None else 0

    def _hot_add(self, t: int, j: int, ranks: tuple[int, ...]) -> None:
        if self._hot is None or self.costs.hot_us[t, j] <= 0:
            return
        key = self._group_key(t, j)
        for r in ranks:
            self._hot.setdefault((r, key), {})[t] = float(self.costs.hot_us[t, j])

    def _hot_swap(self, p: int, q: int, rp: int, rq: int) -> None:
        """Table-wise ``p`` from rank ``rp`` to ``rq`` and ``q`` from ``rq`` to ``rp`` in the hottest-row members
        only (what a swap candidate's :meth:`hot_us` is read from; the state rows are left alone)."""
        tw = self._tw
        for t, a in ((p, rp), (q, rq)):
            self._hot.get((a, self._group_key(t, tw)), {}).pop(t, None)
        for t, z in ((p, rq), (q, rp)):
            self._hot_add(t, tw, (z,))

    def hot_us(self) -> np.ndarray:
        """[R] each rank's GPU-coalesce hottest-row time as the plan stands: per fused group, its largest member's
        (zeros without ``costs.hot_us``)."""
        out = np.zeros(self.R)
        for (r, _), members in (self._hot or {}).items():
            if members:
                out[r] += max(members.values())
        return out

    def _with_hot(self, v: np.ndarray) -> np.ndarray:
        """State rows ``v`` [10, R] with :meth:`hot_us` added to the backward + update (row 0) and to the share a
        GradScaler's sync leaves after it (row 9)."""
        if self._hot is None:
            return v
        return _add_hot(v.copy(), self.hot_us())

    def _hot_deltas(self, t: int, js: np.ndarray, masks: np.ndarray) -> np.ndarray | None:
        """[n, R] change of each rank's :meth:`hot_us` if table ``t`` moved to option ``js[i]`` on ranks ``masks[i]``
        (None without ``costs.hot_us``)."""
        if self._hot is None:
            return None
        cur = self.hot_us()
        after = cur.copy()  # t taken out of its ranks
        if self.assign[t] is not None:
            j0, r0 = self.assign[t]
            k0 = self._group_key(t, j0)
            for r in r0:
                m = self._hot.get((r, k0), {})
                if t in m:
                    rest = [x for u, x in m.items() if u != t]
                    after[r] += (max(rest) if rest else 0.0) - max(m.values())
        out = np.repeat((after - cur)[None], len(js), axis=0)
        hot = self.costs.hot_us[t, js]
        for i in np.flatnonzero(hot > 0):  # then added to its new ranks' group of its new key
            kj = self._group_key(t, int(js[i]))
            for r in np.flatnonzero(masks[i]):
                m = self._hot.get((int(r), kj), {})
                rest = max((x for u, x in m.items() if u != t), default=0.0)
                out[i, r] += max(rest, hot[i]) - rest
        return out

    def _count(self, state: _State, t: int, j: int, ranks: tuple[int, ...], sign: float) -> None:
        """Add (``sign`` 1) or remove (-1) table ``t``'s pieces under option ``j`` on ``ranks`` to the launch
        state of ``state``."""
        if state.cnt is None:
            return
        kind, key = self._type[j], self.costs.piece_key[t, j]
        if kind == 3:
            state.dpc[key] += sign
            state.dpb[key] += sign * self.costs.coeffs[t, j, _DP]
        else:
            state.cnt[list(ranks), key] += sign
            if kind <= 1:
                state.a2a[list(ranks)] += sign
        state.n += sign * np.array([kind != 3, kind == 2, kind == 1, kind == 3])

    def _launch_terms(self, t: np.ndarray | int, js: np.ndarray, masks: np.ndarray,
                      moved: tuple[np.ndarray, np.ndarray] | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The launch terms (:func:`_estimate`) of n candidates, each placing table ``t`` (one, or one per
        candidate) under option ``js`` [n] on holders ``masks`` [n, R] (their data-parallel bytes per fused group
        follow from the launch state): a table not in the plan yet, or (``moved``: its current option [n] and holders [n, R])
        one moved from where it is; None without a host term."""
        lm = self._lm
        if lm is None:
            return None
        s, n = self.state, len(js)
        kind, key = self._type[js], self.costs.piece_key[t, js]
        rows = np.arange(n)
        dpb = np.repeat(s.dpb[None], n, axis=0)  # [n, keys] data-parallel bytes per fused group
        cnt = s.cnt[:, key].T  # [n, R] pieces of the candidate's group on each rank
        groups = np.repeat((s.cnt > 0).sum(axis=1)[None], n, axis=0)
        a2a = np.repeat(s.a2a[None], n, axis=0)
        dpc = s.dpc[key]
        n_dpg = np.full(n, float((s.dpc > 0).sum()))
        counts = np.repeat(s.n[None], n, axis=0)
        if moved is not None:  # the table leaves its current pieces first
            j0, H0 = moved
            kind0, key0 = self._type[j0], self.costs.piece_key[t, j0]
            sharded0 = (kind0 != 3)[:, None]
            groups = groups - (H0 & sharded0 & (s.cnt[:, key0].T == 1))
            cnt = cnt - H0 * (sharded0 & (key0 == key)[:, None])
            a2a = a2a - H0 * (kind0 <= 1)[:, None]
            n_dpg -= (kind0 == 3) & (s.dpc[key0] == 1)
            dpc = dpc - ((kind0 == 3) & (key0 == key))
            dpb[rows, key0] -= (kind0 == 3) * self.costs.coeffs[t, j0, _DP]
            counts -= np.stack([kind0 != 3, kind0 == 2, kind0 == 1, kind0 == 3], axis=1)
        sharded = kind != 3
        groups = (groups + (masks & sharded[:, None] & (cnt == 0))).astype(np.float64)
        a2a = (a2a > 0) | (masks & (kind <= 1)[:, None])
        n_dpg += (kind == 3) & (dpc == 0)
        dpb[rows, key] += (kind == 3) * self.costs.coeffs[t, js, _DP]
        counts += np.stack([sharded, kind == 2, kind == 1, kind == 3], axis=1)
        kernels, colls = _launch_counts(lm, groups, a2a, *counts.T[:3], n_dpg, counts[:, 3], dpb)
        return lm.host_us(self.costs.overheads, kernels, colls).max(axis=1), groups, n_dpg, dpb

    def _moves_terms(self, A: list[np.ndarray], Bv: list[np.ndarray], M: list[np.ndarray],
                     old: list[tuple[int, tuple[int, ...]]]) -> tuple[np.ndarray, ...]:
        """The launch terms of the local search's moves (per moved table: its candidates' tables ``A``, options
        ``Bv`` and holders ``M``, and where it is now, ``old``), in one call."""
        sizes = [len(a) for a in A[:len(old)]]
        j0 = np.repeat([j for j, _ in old], sizes)
        H0 = np.repeat(np.array([_holders_mask(self.R, r) for _, r in old]), sizes, axis=0)
        n = len(old)
        return self._launch_terms(np.concatenate(A[:n]), np.concatenate(Bv[:n]), np.concatenate(M[:n]),
                                  moved=(j0, H0))

    def _swap_terms(self, P: np.ndarray, Q: np.ndarray, b: int, rq: np.ndarray) -> tuple[np.ndarray, ...]:
        """The launch terms (:func:`_estimate`) after swapping table-wise tables ``P`` (on rank ``b``) and ``Q``
        (on ranks ``rq``): only the two ranks' fused groups change."""
        s, tw = self.state, self._tw
        kp, kq = self.costs.piece_key[P, tw], self.costs.piece_key[Q, tw]
        other = (kp != kq) & (rq != b)  # (a swap on one rank changes nothing)
        groups = np.repeat((s.cnt > 0).sum(axis=1)[None].astype(np.float64), len(P), axis=0)
        i = np.arange(len(P))
        groups[:, b] += other * ((s.cnt[b, kq] == 0).astype(float) - (s.cnt[b, kp] == 1))
        groups[i, rq] += other * ((s.cnt[rq, kp] == 0).astype(float) - (s.cnt[rq, kq] == 1))
        one = np.ones(len(P))
        n_dpg = float((s.dpc > 0).sum()) * one
        dpb = np.repeat(s.dpb[None], len(P), axis=0)
        kernels, colls = _launch_counts(self._lm, groups, np.repeat((s.a2a > 0)[None], len(P), axis=0),
                                        s.n[0] * one, s.n[1] * one, s.n[2] * one, n_dpg, s.n[3] * one, dpb)
        return self._lm.host_us(self.costs.overheads, kernels, colls).max(axis=1), groups, n_dpg, dpb

    def _terms_now(self) -> tuple[np.ndarray, ...] | None:
        """The launch terms (:func:`_estimate`) of the plan as it stands."""
        lm = self._lm
        if lm is None:
            return None
        s = self.state
        groups = (s.cnt > 0).sum(axis=1)[None].astype(np.float64)
        n_dpg = np.array([float((s.dpc > 0).sum())])
        kernels, colls = _launch_counts(lm, groups, (s.a2a > 0)[None], s.n[:1], s.n[1:2], s.n[2:3], n_dpg, s.n[3:4],
                                        s.dpb[None])
        return lm.host_us(self.costs.overheads, kernels, colls).max(axis=1), groups, n_dpg, s.dpb[None]

    def gpu_objective(self) -> float:
        """The GPU-side terms of the plan as it stands (:func:`_objective`, with its fused groups' fixed times)."""
        s, terms = self.state, self._terms_now()
        return float(_objective(self.costs, self._with_hot(s.v)[None], np.array([s.rw]), np.array([s.dp]),
                                groups=None if terms is None else terms[1:3])[0])

    def objective(self) -> tuple[float, float]:
        """The estimate of the plan as it stands and its GPU time (:func:`_estimate`)."""
        s = self.state
        est, gpu = _estimate(self.costs, self._with_hot(s.v)[None], np.array([s.rw]), np.array([s.dp]),
                             launch=self._terms_now())
        return float(est[0]), float(gpu[0])

    def load_plan(self, plan: ShardingPlan) -> _Search:
        for t, table in enumerate(self.config.tables):
            sh = plan[table.name]
            k = self.R if sh.type == "data_parallel" else len(sh.ranks)
            j = self.opt_index.get((sh.type, k))
            if j is None:  # an option outside the search's menu: approximate by the nearest k
                same = [(abs(o.k - k), jj) for jj, o in enumerate(self.costs.options) if o.type == sh.type]
                j = min(same)[1]
                self.approximate = True
            self.place(t, j, tuple(range(self.R)) if sh.type == "data_parallel" else sh.ranks)
        return self

    def plan(self) -> ShardingPlan:
        shards = {}
        for t, table in enumerate(self.config.tables):
            j, ranks = self.assign[t]
            o = self.costs.options[j]
            shards[table.name] = Shard(o.type, () if o.type == "data_parallel" else tuple(sorted(ranks)))
        return ShardingPlan(shards)

    # candidate evaluation ----------------------------------------------------------------------------------
    def _split_menu(self) -> tuple[np.ndarray, np.ndarray]:
        """Non-table-wise options and their holder masks (the least-loaded ranks), for the current state."""
        R = self.R
        order = np.argsort(self.state.v[0], kind="stable")
        js, masks = [], []
        for j, o in enumerate(self.costs.options):
            if o.type == "table_wise":
                continue
            m = np.ones(R, bool) if o.type == "data_parallel" else np.zeros(R, bool)
            m[order[:o.k]] = True
            js.append(j)
            masks.append(m)
        return np.array(js, dtype=np.int64), np.array(masks, dtype=bool).reshape(len(js), R)

    def _candidates_for(self, t: int, menu: tuple[np.ndarray, np.ndarray],
                        dests: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Placements of table ``t``: table-wise on each rank (or on ``dests``), then every admissible split on
        the least-loaded ranks."""
        split_js, split_masks = menu
        ok = np.isfinite(self.costs.emb_us[t, split_js])
        eye = self._eye if dests is None else self._eye[dests]
        js = np.concatenate([np.full(len(eye), self._tw), split_js[ok]])
        return js, np.concatenate([eye, split_masks[ok]])

    @property
    def _tw(self) -> int:
        return self.opt_index[("table_wise", 1)]

    @property
    def _eye(self) -> np.ndarray:
        eye = getattr(self, "_eye_cache", None)
        if eye is None:
            eye = self._eye_cache = np.eye(self.R, dtype=bool)
        return eye

    # algorithms ----------------------------------------------------------------------------------------------
    def greedy(self) -> _Search:
        """Largest predicted cost first; each table to the placement that minimises the estimate.

        The embedding term is bounded below by the average load once every table is placed, so early tables are
        not split just because the ranks are still empty.
        """
        tw = self._tw
        order = np.argsort(-self.costs.emb_us[:, tw], kind="stable")
        R = self.R
        per_table = np.stack([self.costs.emb_us[:, tw], self.costs.coeffs[:, tw, _ORECV_ALL] * (R - 1) / R,
                              self.costs.coeffs[:, tw, _ISEND_ALL] * (R - 1) / R], axis=1)
        remaining = per_table.sum(axis=0)
        for i, t in enumerate(order):
            t = int(t)
            rest = order[i + 1:]
            remaining = remaining - per_table[t]
            js, masks = self._candidates_for(t, self._split_menu())
            coef = self.costs.coeffs[t, js]
            v = self._with_hot(self.state.v)[None] + _delta(coef, masks)
            hd = self._hot_deltas(t, js, masks)
            if hd is not None:  # the fused groups' hottest rows once t joins one (a maximum per group)
                _add_hot(v, hd)
            dp = self.state.dp + coef[:, _DP]
            terms = self._launch_terms(t, js, masks)
            if terms is not None:  # (the launches the tables still to place add, at least)
                terms = (terms[0] + self._completion_host_us(t, js, rest), *terms[1:])
            objs, gpu = _estimate(self.costs, v, self.state.rw + coef[:, _RW], dp, extra=np.maximum(remaining, 0.0),
                                  launch=terms)
            best = _lexmin(objs, gpu)
            if not np.isfinite(objs[best]):
                if self.costs.budget <= 0:
                    raise InvalidInputError(
                        f"no embedding table fits: the dense layers, activations and runtime reserve alone need "
                        f"{-self.costs.budget / 2**30:.1f} GiB more than each rank's memory")
                host = (f"; {self.costs.host_budget / 2**30:,.1f} GiB of each node's host memory for the tables "
                        "placed there" if math.isfinite(self.costs.host_budget) else "")
                raise InvalidInputError(f"table {self.config.tables[t].name!r} fits nowhere within the memory "
                                        f"budget ({self.costs.budget / 2**30:.1f} GiB per rank{host})")
            self.place(t, int(js[best]), tuple(np.flatnonzero(masks[best]).tolist()))
        return self

    def _completion_host_us(self, t: int, js: np.ndarray, rest: np.ndarray) -> np.ndarray:
        """[n] host time (us) every rank launches at least for the tables ``rest`` not placed yet, once table ``t``
        goes to option ``js`` [n]: the greedy construction's lower bound of the host side of the final plan (as
        ``extra`` is of its GPU side). With several ranks, a plan with no sharded table yet will either shard one
        of them, which launches on every rank the input all-to-alls (value counts, payload), the unpack and the
        pooled (or row-wise) exchange and its gradient's (:meth:`_sharded_floor_us`: one kernel and four
        collectives, counted by :func:`_launch_counts`), or replicate them all,
        which launches on every rank one fused lookup group (forward, backward, dense step) per embedding dim not
        replicated yet and the all-reduce of their gradients: the cheaper of the two. Without it, whichever table
        was sharded first paid the sharded plan's collectives alone, and the first tables went data-parallel to
        avoid them (on 8 H100s at batch 1024, 26 tables, greedy replicated two tables that a completion would
        shard anyway: its plan was estimated 1095 us and simulated 1180 us, against 1035 / 1039 us for every table
        table-wise; lookup_greedy 1084 us)."""
        lm = self._lm
        n = len(js)
        if lm is None or lm.n_ranks <= 1 or len(rest) == 0:
            return np.zeros(n)
        s, kind = self.state, self._type[js]
        sharded = (s.n[0] > 0) | (kind != 3)
        j_dp = self.opt_index[("data_parallel", self.R)]
        have = np.repeat((s.dpc > 0)[None], n, axis=0)  # [n, keys] data-parallel groups once t is placed
        have[np.flatnonzero(kind == 3), self.costs.piece_key[t, js[kind == 3]]] = True
        wanted = np.zeros(have.shape[1], dtype=bool)
        wanted[self.costs.piece_key[rest, j_dp]] = True
        vec = self.costs.overheads.vector()
        k_us, c_us = (vec[OVERHEAD_CATEGORIES.index(c)] for c in ("kernel_launch", "collective_launch"))
        new_groups = (wanted[None] & ~have).sum(axis=1)
        replicate = lm.per_dp_group * new_groups * k_us + (~have.any(axis=1)) * c_us
        return np.where(sharded, 0.0, np.minimum(self._sharded_floor_us(), replicate))

    def _sharded_floor_us(self) -> float:
        """Host time (us) every rank launches once any table is sharded, whichever and wherever: the least, over
        the ranks and over one table placed table-wise, column-wise over two ranks or row-wise over all, of the
        launches :func:`_launch_counts` adds to a plan with no sharded table less the piece's own lookup group
        (a holder's), so that the greedy's lower bound follows the launch count the estimate prices."""
        cached = getattr(self, "_floor_cache", None)
        if cached is not None:
            return cached
        lm, R = self._lm, self.R
        # rows: no sharded table; one table table-wise on the last rank, column-wise on the last two, row-wise
        groups = np.zeros((4, R))
        groups[1, R - 1] = 1.0
        groups[2, R - 2:] = 1.0
        groups[3] = 1.0
        a2a = groups.astype(bool)
        a2a[3] = False  # (a row-wise piece sends partial sums, not pooled outputs)
        n_sharded, n_rw, n_cw = np.array([0.0, 1, 1, 1]), np.array([0.0, 0, 0, 1]), np.array([0.0, 0, 1, 0])
        zero = np.zeros(4)
        kernels, colls = _launch_counts(lm, groups, a2a, n_sharded, n_rw, n_cw, zero, zero, np.zeros((4, 1)))
        vec = self.costs.overheads.vector()
        k_us, c_us = (vec[OVERHEAD_CATEGORIES.index(c)] for c in ("kernel_launch", "collective_launch"))
        own = lm.per_group * groups + lm.per_sharded_rank * (groups > 0)  # the piece's own group, on its holders
        added = (kernels - own - kernels[0]) * k_us + (colls - colls[0]) * c_us
        self._floor_cache = float(added[1:].min())
        return self._floor_cache

    def local_search(self, max_steps: int = 5000, deadline: float | None = None, swaps: int = 4,
                     destinations: int = 8) -> _Search:
        """Best-improvement moves, re-splits and swaps of the bottleneck ranks' tables until none helps.

        Each step considers every table on the bottleneck ranks (embedding time, all-to-all volume, memory)
        moved table-wise to one of the ``destinations`` least-loaded ranks or split/replicated, and swaps of
        table-wise tables between the hottest rank and the ``swaps`` coolest ones; all candidates of a step are
        scored in one vectorised call.
        """
        tw = self._tw
        coef_tw = self.costs.coeffs[:, tw]
        R = self.R
        current, current_gpu = self.objective()
        for _ in range(max_steps):
            if deadline is not None and time.perf_counter() > deadline:
                break
            v = self.state.v
            hv = self._with_hot(v)  # (the bottleneck ranks with the coalesce's hottest rows)
            hot = {int(np.argmax(hv[0])), int(np.argmax(v[2])), int(np.argmax(v[1])),
                   int(np.argmax(np.maximum(v[4], v[5])))}
            movers = [t for t in range(self.T) if not hot.isdisjoint(self.assign[t][1])]
            menu = self._split_menu()
            dests = np.union1d(np.argsort(v[0], kind="stable")[:destinations],
                               np.argsort(v[2], kind="stable")[:max(1, destinations // 2)])
            V, RW, DP, TERMS, kinds, A, Bv, M, OLD = [], [], [], [], [], [], [], [], []
            for t in movers:
                j0, r0 = self.assign[t]
                d0, rw0, dp0 = self._piece(t, j0, r0)
                js, masks = self._candidates_for(t, menu, dests)
                coef = self.costs.coeffs[t, js]
                cand = (hv - d0)[None] + _delta(coef, masks)
                hd = self._hot_deltas(t, js, masks)
                if hd is not None:  # the fused groups' hottest rows, as the move leaves them
                    _add_hot(cand, hd)
                V.append(cand)
                RW.append(self.state.rw - rw0 + coef[:, _RW])
                DP.append(self.state.dp - dp0 + coef[:, _DP])
                OLD.append((j0, r0))
                kinds.append(np.zeros(len(js), np.int8))
                A.append(np.full(len(js), t))
                Bv.append(js)
                M.append(masks)
            # swaps: a table-wise table on the hottest rank <-> a table-wise table on one of the coolest ranks
            b = int(np.argmax(v[0]))
            cool = set(np.argsort(v[0], kind="stable")[:swaps].tolist())
            mine = np.array([t for t in range(self.T) if self.assign[t] == (tw, (b,))], dtype=np.int64)
            theirs = np.array([u for u in range(self.T) if self.assign[u][0] == tw and self.assign[u][1][0] in cool],
                              dtype=np.int64)
            if mine.size and theirs.size:
                ru = np.array([self.assign[u][1][0] for u in theirs])
                P, Q = np.repeat(mine, len(theirs)), np.tile(theirs, len(mine))
                rq = np.tile(ru, len(mine))
                Hb = np.zeros((len(P), R), bool)
                Hb[:, b] = True
                Hr = self._eye[rq]
                nv = (hv[None] - _delta(coef_tw[P], Hb) + _delta(coef_tw[P], Hr)
                      - _delta(coef_tw[Q], Hr) + _delta(coef_tw[Q], Hb))
                if self._hot is not None:  # swapped for real, one pair at a time (few pairs), then back
                    before = self.hot_us()
                    for i, (p_, q_, r_) in enumerate(zip(P, Q, rq, strict=True)):
                        self._hot_swap(int(p_), int(q_), b, int(r_))
                        d = self.hot_us() - before
                        self._hot_swap(int(p_), int(q_), int(r_), b)
                        _add_hot(nv[i], d)
                if self._lm is not None and V:  # the moves' launch terms, all at once
                    TERMS.append(self._moves_terms(A, Bv, M, OLD))
                V.append(nv)
                RW.append(np.full(len(P), self.state.rw))
                DP.append(np.full(len(P), self.state.dp))
                if self._lm is not None:
                    TERMS.append(self._swap_terms(P, Q, b, rq))
                kinds.append(np.ones(len(P), np.int8))
                A.append(P)
                Bv.append(Q)
                M.append(Hr)
            if not V:
                break
            if self._lm is not None and not TERMS:  # (moves only)
                TERMS.append(self._moves_terms(A, Bv, M, OLD))
            terms = (tuple(np.concatenate([x[k] for x in TERMS]) for k in range(4)) if TERMS else None)
            objs, gpu = _estimate(self.costs, np.concatenate(V), np.concatenate(RW), np.concatenate(DP), launch=terms)
            i = _lexmin(objs, gpu)
            # a better estimate, or (a host-bound plan) the same with less GPU time: more slack before the GPU binds
            if not (objs[i] < current * (1 - 1e-9)
                    or (objs[i] <= current * (1 + 1e-12) and gpu[i] < current_gpu * (1 - 1e-9))):
                break
            kind, a, bb = int(np.concatenate(kinds)[i]), int(np.concatenate(A)[i]), int(np.concatenate(Bv)[i])
            mask = np.concatenate(M)[i]
            if kind == 0:
                self.place(a, bb, tuple(np.flatnonzero(mask).tolist()))
            else:
                r = int(np.flatnonzero(mask)[0])
                self.place(a, tw, (r,))
                self.place(bb, tw, (b,))
            current, current_gpu = self.objective()
        return self


# ------------------------------------------------------------------------------------------------ evaluation
@dataclass
class PlanEvaluation:
    """One plan: where it came from, its estimate, its simulated iteration and its memory check."""

    name: str
    plan: ShardingPlan
    #: the planner's estimate that ranks plans before they are simulated (:func:`plan_estimate`: the longer of the
    #: busiest host's launches and the GPU's embedding kernels, plan-dependent collectives and dense layers; the
    #: overlap of collectives with compute is left out): a lower bound of a host-bound iteration, a ranking score
    #: otherwise, not the iteration time (``iteration_us``)
    estimate_us: float
    memory: MemoryReport
    iteration_us: float = float("nan")
    sim: SimResult | None = None
    error: str = ""
    origin: str = ""  # for "search": which seed's local search produced it
    #: whether this plan's 80% iteration-time interval overlaps the best plan's (False for the best itself, as the
    #: LLM search's ``overlaps_fastest``; None: this plan or the best has no interval, or it was not compared)
    overlaps_best: bool | None = None

    @property
    def iteration_interval_us(self) -> tuple[float, float]:
        """80% interval of the simulated iteration (NaN, NaN when the cost model gives no intervals)."""
        if self.sim is None:
            return float("nan"), float("nan")
        return float(self.sim.iteration_us_low), float(self.sim.iteration_us_high)

    @property
    def fits(self) -> bool:
        return self.memory.fits and not self.error

    @property
    def reason(self) -> str:
        return self.error or self.memory.reason

    def to_dict(self, with_plan: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name, "origin": self.origin or self.name, "fits": self.fits,
            "iteration_us": None if not np.isfinite(self.iteration_us) else round(self.iteration_us, 3),
            "estimate_us": None if not np.isfinite(self.estimate_us) else round(self.estimate_us, 3),
            "reason": self.reason, "shard_types": self.plan.type_counts(),
            **_interval_dict(self),
            "peak_memory_bytes": self.memory.peak,
            "memory_per_rank_bytes": [float(x) for x in self.memory.per_rank["total"]],
        }
        host_memory = self.memory.host_memory_summary()
        if host_memory is not None:  # tables placed in host memory: what each node holds there, and the check
            out["host_memory"] = host_memory
        if self.sim is not None:
            out["breakdown"] = self.sim.summary()["ranks"]
            out["ranks"] = out["breakdown"]  # the per-rank key of simulate --json too
            out["critical_path_us"] = out["critical_path"] = self.sim.critical_path_summary()  # (us; both names)
        if with_plan:
            out["plan"] = self.plan.to_dict()
        return out


def _interval_dict(ev: PlanEvaluation) -> dict[str, Any]:
    lo, hi = ev.iteration_interval_us
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return {}
    return {"iteration_us_low": round(lo, 3), "iteration_us_high": round(hi, 3), "overlaps_best": ev.overlaps_best}


def flag_overlaps(evaluations: list[PlanEvaluation]) -> list[str]:
    """Mark every fitting plan whose 80% iteration interval overlaps the best (first fitting) plan's interval:
    the model cannot tell them apart at that confidence. Returns the names of the overlapping plans. A plan that
    is the best plan under another name (the search's answer is often a baseline's or greedy's plan) is no other
    plan to measure: its flag is False, as the best's.

    The best plan is the first fitting one whether or not it has an interval: when it has none (an op of its plan
    the model gives no interval for), no plan is compared with it (every flag stays None), rather than comparing
    the others with the runner-up as if it were the best (which then read as the best, flag None)."""
    fitting = [e for e in evaluations if e.fits]
    if not fitting or not np.all(np.isfinite(fitting[0].iteration_interval_us)):
        return []
    best = fitting[0]
    best.overlaps_best = False
    b_lo, b_hi = best.iteration_interval_us
    out = []
    for e in fitting[1:]:
        lo, hi = e.iteration_interval_us
        if e.plan == best.plan:  # the best plan itself under another name (the search's answer, a seed kept)
            e.overlaps_best = False
            continue
        if not (np.isfinite(lo) and np.isfinite(hi)):
            continue
        e.overlaps_best = bool(lo <= b_hi and b_lo <= hi)
        if e.overlaps_best:
            out.append(e.name)
    return out


@dataclass
class SearchResult:
    """Every evaluated plan, fastest fitting first."""

    evaluations: list[PlanEvaluation]
    seconds: float
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def best(self) -> PlanEvaluation:
        fitting = [e for e in self.evaluations if e.fits]
        if not fitting:  # every strategy's reason, strategies that failed alike named together
            by_reason: dict[str, list[str]] = {}
            for e in self.evaluations:
                by_reason.setdefault(e.reason, []).append(e.name)
            reasons = "; ".join(f"{', '.join(names)}: {why}" for why, names in by_reason.items())
            # host memory is named only where it limited a plan: a plan rejected for a node's host memory, or a
            # greedy placement short of it (not the hint "weights in host memory" of a plan limited by the GPUs)
            host = any((not e.error and "host_fits" in e.memory.per_rank and not e.memory.per_rank["host_fits"].all())
                       or "node's host memory" in e.error for e in self.evaluations)
            where = "host or device memory" if host else "device memory"
            raise InvalidInputError(f"no plan fits in {where} ({reasons})")
        return fitting[0]

    def by_name(self, name: str) -> PlanEvaluation:
        for e in self.evaluations:
            if e.name == name:
                return e
        raise KeyError(name)


def evaluate_plan(config: DLRMConfig, plan: ShardingPlan, model: OpCostModel | None = None, *,
                  overheads: Overheads | None = None, capacity: float | None = None, name: str = "plan",
                  estimate_us: float = float("nan"), host_mem_per_node: float | None = None) -> PlanEvaluation:
    """Memory check, then (if it fits) a full simulation of one iteration under ``plan``; ``host_mem_per_node``
    (bytes) overrides the catalog's host memory per node in the check (:func:`memory_per_rank`)."""
    model = model if model is not None else default_cost_model()
    catalog = model_catalog(model)
    if capacity is None:
        capacity = resolve_target(config.system, catalog).device.mem_capacity
    memory = memory_per_rank(config, plan, capacity, host_mem_per_node=host_mem_per_node, catalog=catalog)
    ev = PlanEvaluation(name, plan, estimate_us, memory)
    if memory.fits:
        it = build_dlrm_graph(config, plan, catalog)
        ev.sim = simulate(it.graph, model, overheads)
        ev.iteration_us = ev.sim.iteration_us
    return ev


#: Names of the kernels of a DLRM graph's dense phases that belong to the embedding tables (priced by the additive
#: terms of the estimate, or plan-dependent copies), not to the dense layers every plan runs alike.
_PLAN_KERNELS = ("embedding", "feature slice", "pack", "reassemble", "row_wise", "input_dist", "output_dist")


def dense_kernel_us(config: DLRMConfig, model: OpCostModel, catalog: Catalog | None = None) -> float:
    """Predicted time (us) of the dense kernels of one rank's iteration (MLPs, interaction, loss, dense optimizer
    step), which every plan runs alike: the kernels of the graph's dense phases on the busiest rank of a
    table-wise plan, less those of the embedding tables."""
    return _reference_terms(config, model, catalog)[0]


def _reference_terms(config: DLRMConfig, model: OpCostModel,
                     catalog: Catalog | None = None) -> tuple[float, _LaunchModel]:
    """From one graph of a reference plan (every table table-wise on rank 0): the dense kernels' time
    (:func:`dense_kernel_us`) and the host events every plan launches alike (:class:`_LaunchModel`)."""
    from hybrid.sharding.plan import Shard

    catalog = catalog or model_catalog(model)
    plan = ShardingPlan({t.name: Shard("table_wise", (0,)) for t in config.tables})
    it = build_dlrm_graph(config.with_(plan=None), plan, catalog)
    g = it.graph.compile()
    # host events per rank and overhead category, less the reference plan's own embedding launches
    R, n_cat = config.gpus, len(OVERHEAD_CATEGORIES)
    on_host = _host_nodes(g)
    base = np.bincount(g.rank[on_host] * n_cat + g.overhead[on_host], minlength=R * n_cat).reshape(R, n_cat)
    first = np.flatnonzero(on_host & (g.rank == 0) & np.isin(g.overhead, [OVERHEAD_CATEGORIES.index(
        "kernel_launch"), OVERHEAD_CATEGORIES.index("collective_launch")]))
    lead = np.bincount(g.overhead[on_host & (g.rank == 0) & (np.arange(len(g.rank)) <= first[0])],
                       minlength=n_cat) if first.size else np.zeros(n_cat)
    cast = STORAGE_DTYPE.get(config.lookup_dtype, config.lookup_dtype) != STORAGE_DTYPE.get(config.dtype, config.dtype)
    fixed = np.bincount(g.rank[on_host], weights=g.fixed_us[on_host], minlength=R)
    groups = np.array([[sum(1 for grp in lookup_groups(it.pieces, r) if grp["sharded"]) for r in range(R)]], float)
    update_kernels = 1.0 if config.optimizer == "sgd" else 2.0
    sync: dict[str, Any] = {}
    if config.grad_scaler:  # the host events from the found-inf read on, per rank (a rank's host events in order)
        idx = np.arange(len(g.rank))
        is_sync = on_host & np.char.startswith(np.asarray(g.names, dtype=str), "GradScaler found_inf")
        first = np.full(R, len(g.rank))
        np.minimum.at(first, g.rank[is_sync], idx[is_sync])
        post = on_host & (idx >= first[g.rank])
        post_base = np.bincount(g.rank[post] * n_cat + g.overhead[post], minlength=R * n_cat).reshape(R, n_cat)
        post_base = post_base.astype(np.float64)
        post_base[:, OVERHEAD_CATEGORIES.index("kernel_launch")] -= (1.0 + update_kernels) * groups[0]
        sync = {"sync": True, "post_base": post_base, "post_per_group": 1.0 + update_kernels,
                "post_per_dp_group": 1.0}
    lm = _LaunchModel(base=base.astype(np.float64), lead=lead.astype(np.float64), fixed=fixed,
                      per_group=2.0 + update_kernels + float(config.grad_scaler),
                      per_sharded_rank=2.0 * cast, per_dp_group=3.0 + 2.0 * cast, bucket_bytes=float(DDP_BUCKET_BYTES),
                      mp_bottom=config.bottom_mlp_placement == "model_parallel" and R > 1, n_ranks=R, **sync)
    a2a = np.zeros((1, R), bool)
    a2a[0, 0] = True
    one = np.ones(1)
    k_ref, c_ref = _launch_counts(lm, groups, a2a, one * len(config.tables), 0 * one, 0 * one, 0 * one, 0 * one,
                                  0 * one)
    lm.base[:, OVERHEAD_CATEGORIES.index("kernel_launch")] -= k_ref[0]
    lm.base[:, OVERHEAD_CATEGORIES.index("collective_launch")] -= c_ref[0]

    phase = np.array([*g.phase_names, ""])[g.phase[:g.n_real]] if g.phase is not None else np.full(g.n_real, "")
    keep = ((g.rank[:g.n_real] == 0) & (g.kind[:g.n_real] == KINDS.index("compute"))
            & np.isin(phase, ("dense_fwd", "backward", "optimizer"))
            & np.array([not any(k in name for k in _PLAN_KERNELS) for name in g.names[:g.n_real]])
            & (g.op_index[:g.n_real] >= 0))
    if not keep.any():
        return 0.0, lm
    ops = np.unique(g.op_index[:g.n_real][keep], return_counts=True)
    times, _ = predict_times(model, g.ops.iloc[ops[0]].reset_index(drop=True))
    times = np.nan_to_num(times, nan=0.0)
    if lm.sync:  # the dense optimizer steps run after the GradScaler's host sync
        names = np.asarray(g.names[:g.n_real], dtype=str)
        part = {}
        for what, name in (("dense_post_us", "dense optimizer step"), ("dense_unscale_us", "GradScaler unscale")):
            these = np.unique(g.op_index[:g.n_real][keep & np.char.startswith(names, name)], return_counts=True)
            part[what] = float(np.dot(times[np.searchsorted(ops[0], these[0])], these[1]))
        lm = replace(lm, **part)
    return float(np.dot(times, ops[1])), lm


def _host_nodes(graph: CompiledGraph) -> np.ndarray:
    """[nodes] which nodes are on a rank's host stream."""
    real = np.arange(len(graph.names)) < graph.n_real
    host_streams = np.array([name == HOST for _, name in graph.stream_names])
    on_host = real & (graph.stream >= 0)
    on_host[on_host] = host_streams[graph.stream[on_host]]
    return on_host


def host_us_per_rank(graph: CompiledGraph, overheads: Overheads) -> np.ndarray:
    """[ranks] time (us) each rank's host spends on its host stream (launches, per-iteration and optimizer work)."""
    on_host = _host_nodes(graph)
    dur = graph.fixed_us + overheads.vector()[graph.overhead]
    return np.bincount(graph.rank[on_host], weights=dur[on_host], minlength=graph.n_ranks)


def _plan_host_us(config: DLRMConfig, costs: CostTables, plan: ShardingPlan) -> float:
    """The busiest rank's host time of ``plan``'s graph (us; cached per plan), 0 without ``costs.catalog``: counted
    as the search counts it (:class:`_LaunchModel`, equal to the graph's), or from the graph itself where the count
    does not follow it: ``auto`` placement (a rank's pieces of one dim split into GPU- and host-memory groups
    where the graph spills some), an option outside the search's menu, or a model-parallel bottom MLP with no
    sharded table (the graph then runs the bottom MLP on every rank)."""
    if costs.catalog is None:
        return 0.0
    key = (plan, costs.overheads)
    if key not in costs.host_cache:
        s = _Search(config, costs).load_plan(plan) if costs.launch is not None else None
        if (s is not None and costs.placed is None and not s.approximate
                and not (costs.launch.mp_bottom and s.state.n[0] == 0)):
            costs.host_cache[key] = float(s._terms_now()[0][0])
        else:
            graph = build_dlrm_graph(config.with_(plan=None), plan, costs.catalog).graph.compile()
            costs.host_cache[key] = float(host_us_per_rank(graph, costs.overheads).max())
    return costs.host_cache[key]


def plan_estimate(config: DLRMConfig, costs: CostTables, plan: ShardingPlan) -> float:
    """The search's estimate of ``plan``'s iteration (us; inf where it overflows a memory): the longer of the
    busiest host's time (every launch of the plan's graph, :func:`host_us_per_rank`, as :func:`_plan_host_us`
    counts it) and the GPU's (the additive
    terms, :func:`plan_gpu_estimate`, plus the dense layers' kernels, ``costs.dense_us``, after the host's lead:
    its per-iteration work and first launch, ``costs.launch.lead``, before which no GPU op starts); on a CPU
    device, whose host waits for every kernel, their sum. The search's own objective (:meth:`_Search.objective`)
    is the same quantity, counted incrementally (:func:`_estimate`), the host's time aside."""
    s = _loaded(config, costs, plan)
    terms = s._terms_now()
    if terms is not None:
        terms = (np.array([_plan_host_us(config, costs, plan)]), *terms[1:])
    est, _ = _estimate(costs, s._with_hot(s.state.v)[None], np.array([s.state.rw]), np.array([s.state.dp]),
                       launch=terms)
    return float(est[0])


def plan_gpu_estimate(config: DLRMConfig, costs: CostTables, plan: ShardingPlan) -> float:
    """The additive terms of the search's estimate of ``plan`` (us; inf where it overflows a memory): the busiest
    rank's embedding kernels plus the plan-dependent collectives. Under ``auto`` placement
    (``costs.placed``) each piece is priced where the graph places it
    (:func:`hybrid.workloads.dlrm_graph.place_pieces`: a rank's largest tables in host memory once they pass
    :func:`~hybrid.workloads.dlrm_graph.embedding_hbm_budget`), whichever placement ``costs`` planned with."""
    return _loaded(config, costs, plan).gpu_objective()


def _loaded(config: DLRMConfig, costs: CostTables, plan: ShardingPlan) -> _Search:
    """A search state holding ``plan``, each piece priced where the graph places it (``costs.placed``: under
    ``auto`` placement a rank's largest tables in host memory once they pass its GPU memory share)."""
    if costs.placed is None:
        return _Search(config, costs).load_plan(plan)
    hbm, host, device = costs.placed
    s = _Search(config, replace(costs, coeffs=hbm)).load_plan(plan)
    moved = [p for p in place_pieces(config, shard_pieces(config, plan), device) if p.host]
    if moved:
        index = {t.name: i for i, t in enumerate(config.tables)}
        t = np.array([index[p.table] for p in moved])
        j = np.array([s.assign[i][0] for i in t])
        diff = host[t, j][:, _PLACED_COLS] - hbm[t, j][:, _PLACED_COLS]  # [pieces, 5]
        ranks = np.array([p.rank for p in moved])
        for row, col in zip(_PLACED_ROWS, range(len(_PLACED_COLS)), strict=True):
            np.add.at(s.state.v[row], ranks, diff[:, col])
    return s


def _auto_costs(config: DLRMConfig, model: OpCostModel, target: Target, capacity: float,
                host_mem_per_node: float | None = None,
                overheads: Overheads | None = None) -> tuple[CostTables, CostTables]:
    """``embedding_placement`` auto on a GPU: the cost tables with every table in GPU memory (plans held to the
    share of it the graph keeps there) and with the sharded tables in host memory, each knowing both for
    :func:`plan_estimate`."""
    if host_mem_per_node is None:
        system = model_catalog(model).systems.get(target.system)
        host_mem_per_node = float(system.host_mem) if system is not None else None
    hbm = estimate_costs(config, model, target, capacity, host_mem_per_node=host_mem_per_node, overheads=overheads)
    host = _host_costs(config, model, target, capacity, host_mem_per_node, overheads)
    placed = (hbm.coeffs, host.coeffs, target.device)
    return replace(hbm, placed=placed), replace(host, placed=placed)


def _is_auto(config: DLRMConfig, target: Target) -> bool:
    return host_placement_allowed(config, target.device) and config.embedding_placement == "auto"


def _placeable_costs(config: DLRMConfig, model: OpCostModel, target: Target, capacity: float,
                     host_mem_per_node: float | None = None,
                     overheads: Overheads | None = None) -> tuple[CostTables, _Search | InvalidInputError]:
    """The cost tables a search plans with, and their greedy placement (or the error that none places every
    table). With ``embedding_placement`` ``host`` on a GPU, and with ``auto`` when the sharded tables fit no
    placement in GPU memory, the tables with those weights in host memory, where the graph then places them
    (:func:`hybrid.workloads.dlrm_graph.place_pieces`), each node's share within its host memory as the memory
    check holds it (``host_mem_per_node`` bytes, else the catalog's figure for the system); a config that fits the
    GPUs keeps its tables."""
    allowed = host_placement_allowed(config, target.device)
    if _is_auto(config, target):  # GPU memory up to the graph's share, else the sharded tables in host memory
        hbm, host = _auto_costs(config, model, target, capacity, host_mem_per_node, overheads)
        try:
            return hbm, _Search(config, hbm).greedy()
        except InvalidInputError:
            pass
        try:
            return host, _Search(config, host).greedy()
        except InvalidInputError as exc:
            return host, exc
    if not (allowed and config.embedding_placement == "host"):  # (``host``: every sharded table is there anyway)
        costs = estimate_costs(config, model, target, capacity, overheads=overheads)
        try:
            return costs, _Search(config, costs).greedy()
        except InvalidInputError as exc:
            if not allowed:
                return costs, exc
    costs = _host_costs(config, model, target, capacity, host_mem_per_node, overheads)
    try:
        return costs, _Search(config, costs).greedy()
    except InvalidInputError as exc:
        return costs, exc


def _host_costs(config: DLRMConfig, model: OpCostModel, target: Target, capacity: float,
                host_mem_per_node: float | None = None, overheads: Overheads | None = None) -> CostTables:
    """The cost tables with the sharded tables' weights in host memory, each node's share held to its host memory
    (``host_mem_per_node`` bytes, else the catalog's figure for the system)."""
    if host_mem_per_node is None:
        system = model_catalog(model).systems.get(target.system)
        host_mem_per_node = float(system.host_mem) if system is not None else None
    return estimate_costs(config, model, target, capacity, host_weights=True, host_mem_per_node=host_mem_per_node,
                          overheads=overheads)


def _baseline_costs(config: DLRMConfig, model: OpCostModel, target: Target, capacity: float,
                    plans: list[ShardingPlan], host_mem_per_node: float | None = None,
                    overheads: Overheads | None = None) -> CostTables:
    """The cost tables that estimate table-wise baseline ``plans`` when no greedy placement runs (it needs memory
    growing with ranks^2), chosen as :func:`_placeable_costs` chooses them: weights in host memory with
    ``embedding_placement`` host on a GPU, and with ``auto`` when the plans overflow the GPUs' memory (where the
    baselines then placed them, :func:`hybrid.sharding.heuristics.greedy_place`); else in GPU memory."""
    allowed = host_placement_allowed(config, target.device)
    if allowed and config.embedding_placement == "host":
        return _host_costs(config, model, target, capacity, host_mem_per_node, overheads)
    if _is_auto(config, target):  # (either: each plan is estimated with its pieces where the graph places them)
        return _auto_costs(config, model, target, capacity, host_mem_per_node, overheads)[0]
    return estimate_costs(config, model, target, capacity, overheads=overheads)


def greedy_plan(config: DLRMConfig, model: OpCostModel | None = None, *, capacity: float | None = None,
                local_search: bool = False, time_budget_s: float = 2.0) -> ShardingPlan:
    """The predicted-cost greedy placement (stage 2 of the search), optionally refined by local search (stage 3),
    without simulating anything: a cost-model planner's plan, as a framework's own planner would make it.

    Every table gets the option (data-parallel, table-wise, column- or row-wise over the least-loaded ranks)
    that minimises the additive estimate of the iteration; ``capacity`` (bytes per rank) defaults to the
    device's memory. With ``embedding_placement`` ``host`` or ``auto`` on a GPU, a config whose sharded tables fit
    no placement in GPU memory is planned again with their weights in host memory (where the graph then places
    them: :func:`hybrid.workloads.dlrm_graph.place_pieces`); a plan that fits the GPU is kept as it was. Raises
    :class:`InvalidInputError` when a table fits nowhere."""
    model = model if model is not None else default_cost_model()
    target = resolve_target(config.system, model_catalog(model))
    capacity = float(capacity if capacity is not None else target.device.mem_capacity)
    config = config.with_(plan=None)
    _, s = _placeable_costs(config, model, target, capacity)
    if isinstance(s, InvalidInputError):
        raise s
    if local_search:
        s = s.local_search(deadline=time.perf_counter() + time_budget_s)
    return s.plan()


STRATEGIES = (*BASELINES, "greedy", "search")


def strategies_hint(strategies: tuple[str, ...] | list[str]) -> str:
    """Where, inside ``hybrid shard`` (:func:`search_plans`), a fit error sends the user for the row-/column-wise
    plans the table-wise baselines do not make: the strategies that make them, said to be not run when
    ``strategies`` leaves them out (outside the command, errors name ``hybrid shard``:
    :data:`~hybrid.sharding.memory.SHARD_HINT`)."""
    ran = "greedy" in strategies or "search" in strategies
    return "the greedy and search strategies make them" + ("" if ran else ", not run here")


def search_plans(
    config: DLRMConfig,
    model: OpCostModel | None = None,
    *,
    strategies: tuple[str, ...] | list[str] | None = None,
    overheads: Overheads | None = None,
    capacity: float | None = None,
    simulate_top: int = 4,
    time_budget_s: float = 20.0,
    seed: int = 0,
    search_seeds: int = 2,
    progress: bool = False,
    host_memory: float | None = None,
    host_mem_per_node: float | None = None,
) -> SearchResult:
    """Build plans with each strategy, rank them by simulated iteration time (fitting plans first).

    Before any work, the search's own host memory is estimated (:func:`estimate_search_bytes`) and checked
    against ``host_memory`` bytes (default: what this machine has available, ``/proc/meminfo``; ``math.inf``
    skips the check): :class:`InvalidInputError` naming the cheaper strategies when it would not fit.
    ``host_mem_per_node`` is another thing: the host memory (bytes) of a node of the *simulated* system, which
    the tables placed there (``embedding_placement`` host/auto) must fit, instead of the catalog's figure
    (:func:`hybrid.sharding.memory.memory_per_rank`).

    ``greedy`` is the predicted-cost greedy placement; ``search`` runs local search from it and from every
    baseline plan and simulates the ``simulate_top`` best estimates. Baselines are simulated as they are.
    ``progress`` shows the stage and the simulations on a tqdm bar (stderr).
    """
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    strategies = tuple(strategies or STRATEGIES)
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise InvalidInputError(f"unknown strategy {unknown[0]!r}; known: {', '.join(STRATEGIES)}")
    if not (math.isfinite(time_budget_s) and time_budget_s >= 0):
        raise InvalidInputError(f"the search time budget must be a finite number of seconds >= 0, got {time_budget_s}")
    from hybrid.hardware.cpu import available_memory_bytes

    if host_mem_per_node is not None:
        host_mem_per_node = check_host_mem(host_mem_per_node)
    check_search_size(config.gpus, strategies, available_memory_bytes() if host_memory is None else host_memory)
    model = model if model is not None else default_cost_model()
    catalog = model_catalog(model)
    target = resolve_target(config.system, catalog)
    capacity = float(capacity if capacity is not None else target.device.mem_capacity)
    config = config.with_(plan=None)
    stages = tqdm(total=4, desc=f"shard {config.gpus} ranks", unit="stage", disable=not progress, leave=False)
    stages.set_postfix_str("cost tables")
    planned = "greedy" in strategies or "search" in strategies  # baselines alone need no greedy placement
    # (the estimate's host term prices the launches with the overheads the plans are simulated with)
    costs, greedy = (_placeable_costs(config, model, target, capacity, host_mem_per_node, overheads) if planned
                     else (None, None))
    stages.update()
    stages.set_postfix_str("baselines")

    baselines: dict[str, ShardingPlan] = {}
    errors: dict[str, str] = {}
    other_plans = strategies_hint(strategies)  # what a fit error suggests names this search's strategies
    for name in BASELINES:
        if name in strategies or "search" in strategies:
            try:
                fn = BASELINES[name]
                extra = {"seed": seed} if name == "random" else {}
                baselines[name] = fn(config, capacity, other_plans=other_plans, **extra)
            except InvalidInputError as exc:
                errors[name] = str(exc)
    if costs is None:  # baselines alone: estimated on the cost tables the search would plan them with
        costs = _baseline_costs(config, model, target, capacity, list(baselines.values()), host_mem_per_node,
                                overheads)
    candidates: list[tuple[str, ShardingPlan, float]] = []
    for name, plan in baselines.items():
        if name in strategies:
            candidates.append((name, plan, plan_estimate(config, costs, plan)))
    greedy_plan = None
    stages.update()
    stages.set_postfix_str("greedy")
    if planned:
        if isinstance(greedy, InvalidInputError):
            errors["greedy"] = str(greedy)
        else:
            greedy_plan = greedy.plan()
            if "greedy" in strategies:
                candidates.append(("greedy", greedy_plan, plan_estimate(config, costs, greedy_plan)))
    stages.update()
    stages.set_postfix_str(f"local search (budget {time_budget_s:g} s)")
    if "search" in strategies:
        deadline = t0 + time_budget_s
        # local search from the predicted-cost greedy plan and the best `seeds` baselines by the estimate
        by_estimate = sorted(baselines.items(), key=lambda kv: plan_estimate(config, costs, kv[1]))
        seeds = ([("greedy", greedy_plan)] if greedy_plan is not None else []) + by_estimate[:search_seeds]
        found: dict[ShardingPlan, tuple[str, float]] = {}
        for seed_name, plan in seeds:
            s = _Search(config, costs).load_plan(plan).local_search(deadline=deadline)
            p = s.plan()
            obj = plan_estimate(config, costs, p)
            if p not in found or obj < found[p][1]:
                found[p] = (f"search<{seed_name}>", obj)
        ranked = sorted(found.items(), key=lambda kv: kv[1][1])[:max(1, simulate_top)]
        candidates += [(name, plan, obj) for plan, (name, obj) in ranked]
        if not seeds:  # every plan it starts from failed: say why (the error listed no reason at all)
            errors["search"] = (f"no plan to start local search from: greedy failed ({errors.get('greedy', '?')}) "
                                "and no table-wise baseline fits")

    stages.update()
    stages.close()
    evaluations = [evaluate_plan(config, plan, model, overheads=overheads, capacity=capacity, name=name,
                                 estimate_us=obj, host_mem_per_node=host_mem_per_node)
                   for name, plan, obj in tqdm(candidates, desc="simulate plans", unit="plan", disable=not progress,
                                               leave=False)]
    for e in evaluations:  # a plan rejected for its nodes' host memory: the others here are the ones to look at
        e.memory.other_plans = ""
    for name, msg in errors.items():
        if name in strategies:
            evaluations.append(PlanEvaluation(name, ShardingPlan(), float("nan"),
                                              MemoryReport(pd.DataFrame({"total": [np.nan], "fits": [False]}),
                                                           capacity), error=msg))
    # the search's answer is the best of its simulated candidates, reported once as "search"
    search_evals = [e for e in evaluations if e.name.startswith("search<")]
    if search_evals:
        fitting = [e for e in search_evals if e.fits]
        pool = fitting or search_evals
        best = min(pool, key=lambda e: e.iteration_us if np.isfinite(e.iteration_us) else np.inf)
        def simulated(e: PlanEvaluation) -> float:  # a plan that does not fit is never the better one
            return e.iteration_us if e.fits and np.isfinite(e.iteration_us) else np.inf

        # local search from a seed (the greedy placement or a baseline) never returns something worse than that
        # seed by the estimate; by simulation, fall back to the seed when the simulated time disagrees (or when
        # what the search found does not fit)
        for e in [e for e in evaluations if (e.name in BASELINES or e.name == "greedy") and e.fits]:
            if simulated(e) < simulated(best):
                best = PlanEvaluation(f"{e.name} (seed kept)", e.plan, e.estimate_us, e.memory, e.iteration_us,
                                      e.sim)
        evaluations = [e for e in evaluations if not e.name.startswith("search<")]
        best = PlanEvaluation("search", best.plan, best.estimate_us, best.memory, best.iteration_us, best.sim,
                              origin=best.name)
        evaluations.append(best)
    evaluations.sort(key=lambda e: (not e.fits, e.iteration_us if np.isfinite(e.iteration_us) else np.inf))
    overlapping = flag_overlaps(evaluations)
    return SearchResult(evaluations, time.perf_counter() - t0,
                        {"tables": len(config.tables), "gpus": config.gpus, "options": len(costs.options),
                         "simulated": len(candidates), "overlapping_best": overlapping})
