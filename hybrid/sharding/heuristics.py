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
from hybrid.sharding.memory import table_placement_bytes, tablewise_budget
from hybrid.sharding.plan import Shard, ShardingPlan
from hybrid.workloads.dlrm import DLRMConfig


def greedy_place(config: DLRMConfig, cost: np.ndarray, capacity: float | None = None,
                 order: np.ndarray | None = None) -> ShardingPlan:
    """Tables in decreasing ``cost`` (or ``order``), each to the least-loaded rank that still has memory."""
    R = config.gpus
    mem = table_placement_bytes(config)
    budget = tablewise_budget(config, capacity)
    load = np.zeros(R)
    used = np.zeros(R)
    order = np.argsort(-cost, kind="stable") if order is None else order
    shards: dict[str, Shard] = {}
    for t in order:
        ok = used + mem[t] <= budget
        if not ok.any():
            name = config.tables[t].name
            raise InvalidInputError(f"table {name!r} ({mem[t] / 2**30:.1f} GiB with optimizer state) does not fit "
                                    f"on any of {R} ranks table-wise (budget {budget / 2**30:.1f} GiB per rank)")
        r = int(np.argmin(np.where(ok, load, np.inf)))
        load[r] += cost[t]
        used[r] += mem[t]
        shards[config.tables[t].name] = Shard("table_wise", (r,))
    return ShardingPlan({t.name: shards[t.name] for t in config.tables})


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
    rng = np.random.default_rng(seed)
    R = config.gpus
    mem = table_placement_bytes(config)
    budget = tablewise_budget(config, capacity)
    used = np.zeros(R)
    shards: dict[str, Shard] = {}
    for t in np.argsort(-mem, kind="stable"):
        ok = np.flatnonzero(used + mem[t] <= budget)
        if ok.size == 0:
            raise InvalidInputError(f"table {config.tables[t].name!r} does not fit on any rank table-wise")
        r = int(rng.choice(ok))
        used[r] += mem[t]
        shards[config.tables[t].name] = Shard("table_wise", (r,))
    return ShardingPlan({t.name: shards[t.name] for t in config.tables})


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
