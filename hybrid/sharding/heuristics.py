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
from hybrid.sharding.memory import table_placement_bytes, tablewise_budget
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
             host_weights: bool = False) -> InvalidInputError:
    """Why table ``t`` fits on no rank: its bytes against the room the tables placed before it left."""
    R = config.gpus
    what = ("outputs and buffers; its weights in host memory" if host_weights
            else "weights, optimizer state, outputs and buffers" if config.optimizer == "adagrad"
            else "weights, outputs and buffers")
    hint = ("more GPUs, row-/column-wise plans (`hybrid shard`), or embedding_placement: auto / host (weights in "
            "host memory)" if config.embedding_placement == "hbm" and getattr(_device(config), "kind", "") == "gpu"
            else "more GPUs or row-/column-wise plans (`hybrid shard`)")
    placed = float(used.sum())
    room = (f"the most room left is {max(budget - float(used.min()), 0.0) / 2**30:.1f} GiB of a "
            f"{budget / 2**30:.1f} GiB budget per rank, after {placed / 2**30:.1f} GiB of the tables placed before "
            "it" if placed > 0 else f"the budget is {budget / 2**30:.1f} GiB per rank")
    return InvalidInputError(f"table {config.tables[t].name!r} ({mem[t] / 2**30:.1f} GiB: {what}) does not fit on "
                             f"any of {R} ranks table-wise: {room}; try {hint}")


def greedy_place(config: DLRMConfig, cost: np.ndarray, capacity: float | None = None,
                 order: np.ndarray | None = None) -> ShardingPlan:
    """Tables in decreasing ``cost`` (or ``order``), each to the least-loaded rank that still has memory (with
    ``embedding_placement`` host/auto, the weights in host memory when they fit no rank in GPU memory)."""
    R = config.gpus
    order = np.argsort(-cost, kind="stable") if order is None else order

    def place(mem: np.ndarray, budget: float, host: bool) -> ShardingPlan:
        load = np.zeros(R)
        used = np.zeros(R)
        shards: dict[str, Shard] = {}
        for t in order:
            ok = used + mem[t] <= budget
            if not ok.any():
                raise _no_room(config, t, mem, used, budget, host)
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


def size_greedy(config: DLRMConfig, capacity: float | None = None) -> ShardingPlan:
    return greedy_place(config, _rows(config) * _dims(config), capacity)


def lookup_greedy(config: DLRMConfig, capacity: float | None = None) -> ShardingPlan:
    return greedy_place(config, _pooling(config) * _dims(config), capacity)


def size_lookup_greedy(config: DLRMConfig, capacity: float | None = None) -> ShardingPlan:
    return greedy_place(config, _pooling(config) * _dims(config) * np.log10(np.maximum(_rows(config), 10.0)),
                        capacity)


def random_plan(config: DLRMConfig, capacity: float | None = None, seed: int = 0) -> ShardingPlan:
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
                raise _no_room(config, t, mem, used, budget, host)
            r = int(rng.choice(ok))
            used[r] += mem[t]
            shards[config.tables[t].name] = Shard("table_wise", (r,))
        return ShardingPlan({t.name: shards[t.name] for t in config.tables})

    return _placements(config, capacity, place)


#: name -> sharder(config, capacity) -> plan
BASELINES: dict[str, Callable[..., ShardingPlan]] = {
    "size_greedy": size_greedy,
    "lookup_greedy": lookup_greedy,
    "size_lookup_greedy": size_lookup_greedy,
    "random": random_plan,
}


def default_plan(config: DLRMConfig, capacity: float | None = None) -> ShardingPlan:
    """The plan used when a config has none: size-lookup greedy, table-wise."""
    return size_lookup_greedy(config, capacity)
