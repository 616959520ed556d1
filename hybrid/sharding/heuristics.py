"""Baseline table-wise sharders from the literature (as compared against in DreamShard / AutoShard / RecShard).

All place whole tables greedily on the rank with the least accumulated cost, largest tables first, skipping
ranks whose memory budget the table would exceed:

``size_greedy``          cost = table bytes
``lookup_greedy``        cost = pooling factor x embedding dim (bytes gathered per sample)
``size_lookup_greedy``   cost = pooling factor x embedding dim x log10(rows)   (DreamShard's "size-lookup")
``random``               a uniformly random rank that fits (seeded)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hybrid.errors import InvalidInputError
from hybrid.hardware.device import Device
from hybrid.sharding.memory import SHARD_HINT, table_placement_bytes, tablewise_budget
from hybrid.sharding.plan import Shard, ShardingPlan
from hybrid.workloads.dlrm import DLRMConfig


def _device(config: DLRMConfig) -> Device | None:
    """The config's device in the packaged catalog (None for a system only a bundle's or a model's catalog knows:
    its tables then stay where the plan puts them)."""
    from hybrid.errors import HybridError
    from hybrid.hardware.catalog import default_catalog
    from hybrid.workloads.dlrm_graph import resolve_target

    try:
        return resolve_target(config.system, default_catalog()).device
    except HybridError:
        return None


def _weights_on_host_allowed(config: DLRMConfig) -> bool:
    """Whether the tables' weights may live in host memory (:func:`hybrid.workloads.dlrm_graph.
    host_placement_allowed`, the rule the graph places them by)."""
    from hybrid.workloads.dlrm_graph import host_placement_allowed

    dev = _device(config)
    return dev is not None and host_placement_allowed(config, dev)


def _placements(config: DLRMConfig, capacity: float | None,
                place: Callable[[np.ndarray, float], ShardingPlan]) -> ShardingPlan:
    """``place(bytes per table, budget)`` with the tables' weights in GPU memory; when that fits no rank and the
    config lets weights live in host memory (``embedding_placement`` host/auto), again with them there."""
    budget = tablewise_budget(config, capacity)
    try:
        return place(table_placement_bytes(config), budget, False)
    except InvalidInputError:
        if not _weights_on_host_allowed(config):
            raise
    return place(table_placement_bytes(config, host_weights=True), budget, True)


def _no_room(config: DLRMConfig, t: int, mem: np.ndarray, used: np.ndarray, budget: float,
             host_weights: bool = False, other_plans: str = SHARD_HINT) -> InvalidInputError:
    """Why table ``t`` fits on no rank: its bytes against the room the tables placed before it left, and what would
    help given what limits it (:func:`_fit_hint`; ``other_plans``: where the row-/column-wise plans it suggests are
    made, :data:`~hybrid.sharding.memory.SHARD_HINT` unless ``hybrid shard`` asks)."""
    R = config.gpus
    what = ("outputs and buffers; its weights in host memory" if host_weights
            else "weights, optimizer state, outputs and buffers" if config.optimizer == "adagrad"
            else "weights, outputs and buffers")
    placed = float(used.sum())
    room = (f"the most room left is {max(budget - float(used.min()), 0.0) / 2**30:.1f} GiB of a "
            f"{budget / 2**30:.1f} GiB budget per rank, after {placed / 2**30:.1f} GiB of the tables placed before "
            "it" if placed > 0 else f"the budget is {budget / 2**30:.1f} GiB per rank")
    return InvalidInputError(f"table {config.tables[t].name!r} ({mem[t] / 2**30:.1f} GiB: {what}) does not fit on "
                             f"any of {R} ranks table-wise: {room}; "
                             f"{_fit_hint(config, t, mem, budget, host_weights, other_plans)}")


def _fit_hint(config: DLRMConfig, t: int, mem: np.ndarray, budget: float, host_weights: bool,
              other_plans: str = SHARD_HINT) -> str:
    """What would let table ``t`` fit, given what limits it. A table-wise table's bytes are its weights (and
    optimizer state), which do not depend on the GPU count, plus its pooled outputs, their gradients, the all-to-all
    buffers and the indices of the *global* batch, which with ``batch_size_per_gpu`` fixed grow with it: more GPUs
    help only while the weights of all the tables are what fills the ranks."""
    from hybrid.sharding.memory import FRAGMENTATION, optimizer_multiplier, table_bytes

    gib = 2**30
    host_ok = config.embedding_placement == "hbm" and getattr(_device(config), "kind", "") == "gpu"
    host = ", or embedding_placement: auto / host (weights in host memory)" if host_ok else ""
    if budget <= 0:
        return (f"the dense model and the activations of batch_size_per_gpu {config.batch_size_per_gpu} alone fill a "
                "rank's memory: a smaller batch_size_per_gpu (more GPUs do not help: the per-rank batch stays)")
    weights = (np.zeros(len(mem)) if host_weights
               else table_bytes(config) * optimizer_multiplier(config) * (1.0 + FRAGMENTATION))
    grows = np.maximum(mem - weights, 0.0)  # outputs, buffers, indices: proportional to the global batch
    R, Bg = config.gpus, config.global_batch
    if weights[t] > budget:
        # one rank has no other to split it with: a split needs more GPUs first
        ranks = ("ranks with a row- or column-wise plan" if R > 1 else
                 f"{max(int(np.ceil(weights[t] / budget)), 2):,} or more GPUs with a row- or column-wise plan "
                 "(one GPU splits nothing)")
        return (f"its weights{' and optimizer state' if optimizer_multiplier(config) > 1 else ''} alone "
                f"({weights[t] / gib:.1f} GiB) exceed a rank's budget, so no number of GPUs holds it table-wise: "
                f"split it over {ranks} ({other_plans}){host}")
    if mem[t] > budget:
        return (f"its pooled outputs, their gradients, all-to-all buffers and indices for the global batch of {Bg:,} "
                f"({grows[t] / gib:.1f} GiB) grow with the GPU count (batch_size_per_gpu fixed), so more GPUs make "
                "it worse: a smaller batch_size_per_gpu or fewer GPUs, or a column-wise plan that splits its outputs "
                f"({other_plans}){host}")
    # the tables placed before it filled the ranks: at R' GPUs the tables need W + G R' bytes over R' budgets
    # (G: the growing bytes per GPU), and each one w_t + o_t R' / R on a single rank
    W, G = float(weights.sum()), float(grows.sum()) / R
    with np.errstate(divide="ignore", invalid="ignore"):
        r_max = float(np.min(np.where(grows > 0, (budget - weights) * R / grows, np.inf)))
    r_min = W / (budget - G) if budget > G else np.inf
    if np.isfinite(r_min) and r_min <= r_max and r_max > R:
        most = (f" and at most {int(r_max):,}, past which a table's own outputs outgrow a rank"
                if np.isfinite(r_max) else "")
        return (f"more GPUs (by the tables' bytes at least {max(int(np.ceil(r_min)), R + 1):,}{most}: their outputs "
                f"grow with the global batch), row-/column-wise plans ({other_plans}){host}")
    why = ("each GPU added brings more of them than its budget holds" if not np.isfinite(r_min)
           else f"at the {int(np.ceil(r_min)):,} GPUs their bytes would need, a table's own outgrow a rank")
    return (f"more GPUs do not help: with batch_size_per_gpu fixed, the tables' pooled outputs and buffers grow with "
            f"the global batch ({Bg:,}) and {why}; a smaller batch_size_per_gpu or fewer GPUs, column-wise or "
            f"data-parallel plans for the small tables ({other_plans}){host}")


def greedy_place(config: DLRMConfig, cost: np.ndarray, capacity: float | None = None,
                 order: np.ndarray | None = None, other_plans: str = SHARD_HINT) -> ShardingPlan:
    """Tables in decreasing ``cost`` (or ``order``), each to the least-loaded rank that still has memory (with
    ``embedding_placement`` host/auto, the weights in host memory when they fit no rank in GPU memory);
    ``other_plans`` is where the error of a table that fits no rank says other plans come from (:func:`_no_room`)."""
    R = config.gpus
    order = np.argsort(-cost, kind="stable") if order is None else order

    def place(mem: np.ndarray, budget: float, host: bool) -> ShardingPlan:
        load = np.zeros(R)
        used = np.zeros(R)
        shards: dict[str, Shard] = {}
        for t in order:
            ok = used + mem[t] <= budget
            if not ok.any():
                raise _no_room(config, t, mem, used, budget, host, other_plans)
            r = int(np.argmin(np.where(ok, load, np.inf)))
            load[r] += cost[t]
            used[r] += mem[t]
            shards[config.tables[t].name] = Shard("table_wise", (r,))
        return ShardingPlan({t.name: shards[t.name] for t in config.tables})

    return _placements(config, capacity, place)


def _pooling(config: DLRMConfig) -> np.ndarray:
    return np.array([t.pooling_factor for t in config.tables])


def _dims(config: DLRMConfig) -> np.ndarray:
    return np.array([float(t.embedding_dim) for t in config.tables])


def _rows(config: DLRMConfig) -> np.ndarray:
    return np.array([float(t.num_embeddings) for t in config.tables])


def size_greedy(config: DLRMConfig, capacity: float | None = None, *, other_plans: str = SHARD_HINT) -> ShardingPlan:
    return greedy_place(config, _rows(config) * _dims(config), capacity, other_plans=other_plans)


def lookup_greedy(config: DLRMConfig, capacity: float | None = None, *,
                  other_plans: str = SHARD_HINT) -> ShardingPlan:
    return greedy_place(config, _pooling(config) * _dims(config), capacity, other_plans=other_plans)


def size_lookup_greedy(config: DLRMConfig, capacity: float | None = None, *,
                       other_plans: str = SHARD_HINT) -> ShardingPlan:
    return greedy_place(config, _pooling(config) * _dims(config) * np.log10(np.maximum(_rows(config), 10.0)),
                        capacity, other_plans=other_plans)


def random_plan(config: DLRMConfig, capacity: float | None = None, seed: int = 0, *,
                other_plans: str = SHARD_HINT) -> ShardingPlan:
    """Each table (largest first) on a random rank with room for it."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise InvalidInputError(f"the random plan's seed must be a non-negative integer, got {seed!r}")
    R = config.gpus

    def place(mem: np.ndarray, budget: float, host: bool) -> ShardingPlan:
        rng = np.random.default_rng(seed)
        used = np.zeros(R)
        shards: dict[str, Shard] = {}
        for t in np.argsort(-mem, kind="stable"):
            ok = np.flatnonzero(used + mem[t] <= budget)
            if ok.size == 0:
                raise _no_room(config, t, mem, used, budget, host, other_plans)
            r = int(rng.choice(ok))
            used[r] += mem[t]
            shards[config.tables[t].name] = Shard("table_wise", (r,))
        return ShardingPlan({t.name: shards[t.name] for t in config.tables})

    return _placements(config, capacity, place)


#: name -> sharder(config, capacity, *, other_plans=SHARD_HINT) -> plan
BASELINES: dict[str, Callable[..., ShardingPlan]] = {
    "size_greedy": size_greedy,
    "lookup_greedy": lookup_greedy,
    "size_lookup_greedy": size_lookup_greedy,
    "random": random_plan,
}


def default_plan(config: DLRMConfig, capacity: float | None = None) -> ShardingPlan:
    """The plan used when a config has none: size-lookup greedy, table-wise."""
    return size_lookup_greedy(config, capacity)
