"""HugeCTR's hybrid embedding: the frequency thresholds, the Zipf split, and what it does to a multi-node DLRM
iteration (less exchanged, no index all-to-all, hierarchical all-to-all across nodes)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hybrid.engine.overheads import Overheads
from hybrid.engine.simulate import simulate
from hybrid.errors import InvalidInputError
from hybrid.sharding.plan import Shard, ShardingPlan
from hybrid.workloads.dlrm_graph import build_dlrm_graph
from hybrid.workloads.dlrm_hybrid_embedding import HybridEmbedding, zipf_harmonic
from hybrid.workloads.dlrm_variants import dlrm_variant


def test_zipf_harmonic_matches_the_exact_sum_beyond_the_exact_terms():
    for alpha in (0.0, 0.7, 1.0, 1.3):
        n = np.array([1, 10, 5000, 123_457])
        exact = [np.sum(np.arange(1, k + 1, dtype=np.float64) ** -alpha) for k in n]
        assert zipf_harmonic(n, alpha) == pytest.approx(exact, rel=1e-6)


def test_thresholds_follow_hugectr():
    he = HybridEmbedding(1.0)
    # multi-node: nodes * a2a/ar bandwidth ratio * nodes / (nodes - 1)
    assert he.count_threshold(71680, 112, 14) == pytest.approx(14 * 1.9 / 1.3 * 14 / 13)
    # one node: global batch * sqrt(2 p_dup / (M (M - 1))), M = per-GPU batch
    m = 55296 / 8
    assert he.count_threshold(55296, 8, 1) == pytest.approx(55296 * math.sqrt(0.02 / (m * (m - 1))))
    with pytest.raises(InvalidInputError, match="zipf_alpha"):
        HybridEmbedding(-0.5)
    with pytest.raises(InvalidInputError, match="positive"):
        he.count_threshold(0, 8, 1)


def test_split_replicates_small_tables_and_more_of_a_skewed_table():
    rows = np.array([3, 1000, 40_000_000])
    nf, share = HybridEmbedding(0.0).split(rows, np.ones(3), 71680, 112, 14)
    # uniform: a 3-row table occurs 23,893 times per category per iteration -> frequent; a 40M-row one never
    assert nf.tolist() == [3, 1000, 0] and share.tolist() == [1.0, 1.0, 0.0]
    shares = [HybridEmbedding(a).split(rows, np.ones(3), 71680, 112, 14)[1][2] for a in (0.8, 1.0, 1.2)]
    assert 0 < shares[0] < shares[1] < shares[2] < 1  # more skew: more of the lookups hit replicated rows
    nf1, _ = HybridEmbedding(1.0).split(rows, np.ones(3), 71680, 112, 14)
    nf8, _ = HybridEmbedding(1.0).split(rows, np.ones(3), 71680, 64, 8)
    assert nf8[2] > nf1[2]  # fewer nodes: a lower threshold, more categories replicated


def test_multi_node_iteration_exchanges_less_and_crosses_nodes_per_rail():
    cfg = dlrm_variant("mlperf", system="DGX-A100", gpus=32, batch_size_per_gpu=2240, dtype="fp16",
                       embedding_dtype="fp16")
    # the published model-parallel alternative at this scale: big tables row-wise, small ones replicated
    plan = ShardingPlan({t.name: Shard("row_wise", tuple(range(32))) if t.num_embeddings >= 1_000_000
                         else Shard("data_parallel") for t in cfg.tables})
    mp = build_dlrm_graph(cfg, plan)
    hy = build_dlrm_graph(cfg, plan, hybrid_embedding=HybridEmbedding(1.0))
    ops_hy = hy.graph.compile().ops
    a2a = ops_hy[ops_hy["op"] == "all_to_all"]
    assert set(a2a["n_ranks"]) == {8, 4}  # 8 GPUs over NVLink, then 4 nodes per rail
    assert set(a2a.loc[a2a["n_ranks"] == 4, "n_nodes"]) == {4}
    assert float(hy.volumes.input_send.max()) == 0.0  # the reader hands every GPU the keys: no index exchange
    assert hy.volumes.dp_grad_bytes < 5e6 < mp.volumes.row_wise_bytes  # only frequent rows are all-reduced
    names = hy.graph.compile().names
    # the frequent rows' gradients ride in the dense all-reduce (HugeCTR's grouped buffer), not one of their own
    assert not any("dp tables" in n for n in names) and any("dp tables" in n for n in mp.graph.compile().names)
    t_mp = simulate(mp.graph.compile(), None, Overheads.zero()).iteration_us
    t_hy = simulate(hy.graph.compile(), None, Overheads.zero()).iteration_us
    assert t_hy < 0.5 * t_mp


def test_hierarchical_all_to_all_without_the_hybrid_embedding():
    """HugeCTR's embedding collection (DCNv2 rounds, ``hier_auto``) crosses nodes per rail too: the option puts the
    hierarchical all-to-all on any plan; the default keeps it with the hybrid embedding only."""
    cfg = dlrm_variant("mlperf-dcnv2", system="DGX-A100", gpus=16, batch_size_per_gpu=1024, dtype="fp16",
                       embedding_dtype="fp16")
    plan = ShardingPlan({t.name: Shard("table_wise", (i % 16,)) for i, t in enumerate(cfg.tables)})
    flat = build_dlrm_graph(cfg, plan).graph.compile().ops
    hier = build_dlrm_graph(cfg, plan, hierarchical_all_to_all=True).graph.compile().ops
    assert set(flat.loc[flat["op"] == "all_to_all", "n_ranks"]) == {16}
    hier_a2a = hier[hier["op"] == "all_to_all"]
    assert {8, 2} <= set(hier_a2a["n_ranks"])  # 8 GPUs over NVLink, then 2 nodes per rail
    assert set(hier_a2a.loc[hier_a2a["n_ranks"] == 2, "n_nodes"]) == {2}
    one_node = dlrm_variant("mlperf-dcnv2", system="DGX-A100", gpus=8, batch_size_per_gpu=1024, dtype="fp16",
                            embedding_dtype="fp16")
    plan8 = ShardingPlan({t.name: Shard("table_wise", (i % 8,)) for i, t in enumerate(one_node.tables)})
    ops8 = build_dlrm_graph(one_node, plan8, hierarchical_all_to_all=True).graph.compile().ops
    assert set(ops8.loc[ops8["op"] == "all_to_all", "n_ranks"]) == {8}  # one node: nothing to split


def test_a_ranks_infrequent_lookups_of_every_table_are_one_kernel():
    """HugeCTR looks up a rank's infrequent categories of all tables in one pass over one flat index list: one
    forward (and one backward) lookup kernel per rank, whose rows count every table's infrequent bags."""
    from hybrid.workloads.dlrm_graph import hybrid_embedding_pieces, lookup_groups

    cfg = dlrm_variant("mlperf", system="DGX-A100", gpus=64, batch_size_per_gpu=1120, dtype="fp16",
                       embedding_dtype="fp16")
    he = HybridEmbedding(0.6)
    nf, share = he.split(np.array([t.num_embeddings for t in cfg.tables]),
                         np.array([t.pooling_factor for t in cfg.tables]), 71680, 64, 8)
    pieces = hybrid_embedding_pieces(cfg, nf, share)
    mine = [p for p in pieces if p.rank == 3 and p.type == "hybrid"]
    assert len({p.batch for p in mine}) > 3  # the tables' infrequent shares differ: so do their bag counts
    groups = [grp for grp in lookup_groups(pieces, 3) if grp["sharded"]]
    assert len(groups) == 1 and groups[0]["num_tables"] == len(mine)
    total = sum(p.batch for p in mine)
    assert groups[0]["num_tables"] * groups[0]["batch_size"] == pytest.approx(total, rel=0.05)
    plan = ShardingPlan({t.name: Shard("data_parallel") for t in cfg.tables})
    names = build_dlrm_graph(cfg, plan, hybrid_embedding=he).graph.compile().names
    fwd = [n for n in names if n.startswith("embedding fwd (")]
    assert len(fwd) == 64  # one infrequent lookup kernel per rank
