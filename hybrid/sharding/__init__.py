"""Embedding-table sharding: plans, memory accounting, baseline sharders and the predictor-driven search."""

from hybrid.sharding.plan import SHARD_TYPES, Shard, ShardingPlan, TableShard

__all__ = ["SHARD_TYPES", "Shard", "ShardingPlan", "TableShard"]
