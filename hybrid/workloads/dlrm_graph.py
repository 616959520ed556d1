"""One DLRM training iteration as a multi-rank task graph (TorchRec-style model parallel embeddings + DDP MLPs).

Per rank, in host program order:

1. per-iteration host work; input distribution (all-to-all of lookup indices to the table owners);
2. embedding lookups: one fused ``embedding_bag`` kernel per (batch kind, embedding dim) group of the rank's
   shards, like TorchRec's batched tables (sharded shards look up the global batch, data-parallel ones the
   local batch);
3. output distribution: all-to-all of pooled embeddings (table-/column-wise) and reduce-scatter of partial
   sums (row-wise), overlapped with the bottom MLP on the compute stream;
4. interaction (``bmm`` for dot, copies for cat), top MLP, loss;
5. backward in reverse: top MLP (dgrad + wgrad GEMMs, activation backward), interaction, the embedding
   gradient all-to-all / all-gather, bottom MLP, embedding backward + fused sparse update;
6. DDP all-reduce of dense gradients in 25 MB buckets (the first one 1 MiB), reverse layer order, on the comm
   stream as soon as each bucket's gradients exist; data-parallel tables' gradients join at the end;
7. dense optimizer step (after every all-reduce).

Every node carries the harness phase it belongs to (:data:`PHASES`), so ``SimResult.phase_times`` compares
with the per-phase times the harness measures. Collectives get the target's ``comm_overlap``
(:data:`COMM_OVERLAP`): where compute and communication share cores they cannot hide behind each other.

The collective sizes follow the nccl-tests ``size`` convention (total buffer per rank). An all-to-all whose
per-rank send/receive volumes differ is costed per rank as ``max(send, recv) * n / (n - 1)`` and the
collective lasts as long as its slowest member.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from hybrid.engine.graph import COMM_STREAM, COMPUTE_STREAM, HOST, TaskGraph
from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import Catalog, default_catalog
from hybrid.hardware.device import Device
from hybrid.ops.families import dense_sgd_update_share, expected_hottest_row_lookups, expected_unique_rows
from hybrid.sharding.plan import ShardingPlan, split_evenly
from hybrid.units import DTYPE_BYTES
from hybrid.workloads.dlrm import DLRMConfig
from hybrid.workloads.dlrm_hybrid_embedding import HybridEmbedding

#: PyTorch DDP defaults: ``bucket_cap_mb=25`` and a first bucket of 1 MiB (``_DEFAULT_FIRST_BUCKET_BYTES``).
DDP_BUCKET_BYTES = 25 * 2**20
DDP_FIRST_BUCKET_BYTES = 2**20
#: Bytes per lookup index and per bag length sent in the input distribution (int64).
INDEX_BYTES = 8
#: ``variant`` of the forward lookup rows: sum pooling (the harness's ``EmbeddingBag(mode="sum")`` and what the
#: profiler measures as ``("fwd", "sum")``); every embedding row names its variant like the profiler's rows.
LOOKUP_FWD_VARIANT = "sum"
#: Phases of one iteration, in order, as :mod:`hybrid.bench.dlrm_harness` times them (``exchange_bwd`` is the
#: gradient exchange inside ``backward``).
PHASES = ("input_dist", "lookup_fwd", "exchange_fwd", "dense_fwd", "backward", "optimizer")
NESTED_PHASES = {"exchange_bwd": "backward"}
#: Share of a collective's time that compute can overlap with, by device kind: a GPU's comm stream runs beside
#: the compute stream; on a CPU the communication library's progress threads share the cores that compute
#: (gloo with one thread per rank: measured, no overlap at all).
COMM_OVERLAP = {"gpu": 1.0, "cpu": 0.0}
#: Stream of a prefetched input distribution (``prefetch_input_dist``): TorchRec's pipeline runs
#: ``input_dist`` on its ``data_dist`` CUDA stream, beside the forward and backward on the default one.
INPUT_DIST_STREAM = "data_dist"
#: Share of a profiled sparse embedding backward (``variant="sparse_sgd"``: backward + ``weight.add_(grad)``)
#: that is the SGD update: the engine puts that share in the optimizer phase. Measured on the CPU profile:
#: median (SGD step alone) / (backward + step) = 0.54 over 60 configurations
#: (``experiments/dlrm_validation/sparse_updates.py``).
SPARSE_SGD_UPDATE_SHARE = 0.5
#: Sparse Adagrad step = ADAGRAD_COALESCE_SCALE x the profiled sparse backward row (coalescing the
#: one-row-per-lookup gradient is an index-add of every looked-up row) + a dense Adagrad step over the
#: coalesced rows (unique rows x dim), both as the cost model predicts them. Non-negative least squares on the
#: 60 profiled sparse Adagrad steps (same script): 1.59, median error 32%.
ADAGRAD_COALESCE_SCALE = 1.6
#: GPU time per duplicate of a sparse gradient's most looked-up row (us) when CUDA's ``coalesce`` sums it: after
#: sorting (and reading the unique count back to the host), its values kernel gives each distinct row one warp
#: that adds the row's duplicates one after another (a dependent gather each: about a memory latency), so a
#: skewed table's hottest row keeps one warp busy for ``hottest_row_lookups x`` this long after the rest of the
#: GPU is done, while the host issues Adagrad's Python-level math. Fitted on the H100 profile's 60 sparse Adagrad
#: steps in the form the graph prices them (``experiments/dlrm_validation/sparse_coalesce.py``: 0.202 us, error
#: 19.3 -> 7.4%); the H200 profile's give 0.188 us (an independent check). GPUs only: a CPU's coalesce sorts and
#: sums on the cores, which the linear terms already price.
COALESCE_US_PER_DUPLICATE = {"gpu": 0.20}


@dataclass(frozen=True)
class Target:
    """Where the job runs: the device of every rank and the system (or bare device) for collectives."""

    device: Device
    system: str  # catalog system key, or the device key (-> generic node)
    gpus_per_node: int

    def nodes(self, ranks: int) -> int:
        return max(1, math.ceil(ranks / self.gpus_per_node))


def resolve_target(name: str, catalog: Catalog) -> Target:
    """A catalog system (its device) or a bare device (a generic 8-GPU node of it)."""
    key = catalog.resolve_system(name, missing_ok=True)
    if key is not None:
        system = catalog.systems[key]
        return Target(catalog.device(system.device), key, system.gpus_per_node)
    dev_key = catalog.resolve_device(name, missing_ok=True)
    if dev_key is not None:
        return Target(catalog.devices[dev_key], dev_key, 8)
    raise catalog.unknown_target(name)  # naming the closest systems and devices


def collective_target(target: Target, catalog: Catalog, ranks: int) -> tuple[Target, str | None]:
    """The target that prices the collectives of a ``ranks``-rank job on ``target``, and a note on it: a bare CPU
    device (no catalog system named) takes the catalog's gloo system of that CPU, whose collectives were profiled,
    instead of a generic node's NVLink / PCIe link its processes do not use
    (:func:`hybrid.ops.roofline.cpu_collective_system`, which the trace workload shares); anything else, or one rank
    (no collectives), is kept as is."""
    from hybrid.ops.roofline import cpu_collective_system

    if ranks <= 1:
        return target, None
    system, note = cpu_collective_system(catalog, target.device, target.system, ranks)
    return (target if system is None else Target(target.device, system.key, system.gpus_per_node)), note


def check_target(config: DLRMConfig, target: Target, catalog: Catalog) -> list[str]:
    """Refuse several nodes of a single-node catalog system (no network between its nodes); notes on more nodes
    than the catalog describes, and on what a bare device across nodes is costed as (a generic node and NIC):
    :func:`hybrid.ops.roofline.cluster_notes`, which LLM training shares."""
    from hybrid.ops.roofline import cluster_notes

    return cluster_notes(catalog, target.system, config.gpus, target.gpus_per_node, target.device.key)


@dataclass(frozen=True)
class ShardPiece:
    """One piece of a table on one rank, with the work it does per iteration."""

    table: str
    rank: int
    type: str
    rows: int
    dim: int
    batch: int  # samples it looks up (global batch for sharded tables, local batch for data-parallel)
    pooling: float  # lookups per sample that land in this piece
    zipf_alpha: float
    fraction: float  # share of the table's lookups (row-wise) handled here
    host: bool = False  # stored in host memory (looked up over PCIe), not in the GPU's memory


def shard_pieces(config: DLRMConfig, plan: ShardingPlan) -> list[ShardPiece]:
    """Every (table, rank) piece of ``plan`` with its lookup batch and pooling."""
    plan.validate(config)
    R, B = config.gpus, config.batch_size_per_gpu
    pieces: list[ShardPiece] = []
    for t in config.tables:
        shard = plan[t.name]
        if shard.type == "table_wise":
            pieces.append(ShardPiece(t.name, shard.ranks[0], "table_wise", t.num_embeddings, t.embedding_dim,
                                     B * R, t.pooling_factor, t.zipf_alpha, 1.0))
        elif shard.type == "column_wise":
            dim = t.embedding_dim // len(shard.ranks)
            pieces += [ShardPiece(t.name, r, "column_wise", t.num_embeddings, dim, B * R, t.pooling_factor,
                                  t.zipf_alpha, 1.0) for r in shard.ranks]
        elif shard.type == "row_wise":
            rows = split_evenly(t.num_embeddings, len(shard.ranks))
            pieces += [ShardPiece(t.name, r, "row_wise", n, t.embedding_dim, B * R,
                                  t.pooling_factor * n / t.num_embeddings, t.zipf_alpha, n / t.num_embeddings)
                       for r, n in zip(shard.ranks, rows, strict=True)]
        else:
            pieces += [ShardPiece(t.name, r, "data_parallel", t.num_embeddings, t.embedding_dim, B,
                                  t.pooling_factor, t.zipf_alpha, 1.0) for r in range(R)]
    return pieces


def hybrid_embedding_pieces(config: DLRMConfig, frequent_rows: np.ndarray, frequent_share: np.ndarray) -> list[ShardPiece]:
    """HugeCTR hybrid embedding pieces (:mod:`hybrid.workloads.dlrm_hybrid_embedding`): per table, its frequent
    rows replicated on every rank (``data_parallel``, local batch, ``frequent_share`` of the lookups) and its
    infrequent rows spread evenly over all ranks (``hybrid``: each rank looks up its 1/R of the global batch's
    infrequent lookups and sends the vectors to their samples' ranks by all-to-all)."""
    R, B = config.gpus, config.batch_size_per_gpu
    pieces: list[ShardPiece] = []
    for t, nf, share in zip(config.tables, frequent_rows, frequent_share, strict=True):
        nf, share = int(nf), float(share)
        if nf > 0 and share > 0:
            pieces += [ShardPiece(t.name, r, "data_parallel", nf, t.embedding_dim, B, t.pooling_factor * share,
                                  t.zipf_alpha, share) for r in range(R)]
        if share < 1.0 and nf < t.num_embeddings:
            rows = split_evenly(t.num_embeddings - nf, R)
            frac = (1.0 - share) / R
            # a rank gathers its 1/R of the global batch's infrequent lookups: B*R*frac bags, each of full pooling
            # (the output is one vector per infrequent lookup, not one per sample of the global batch)
            bags = max(int(round(B * R * frac)), 1)
            pieces += [ShardPiece(t.name, r, "hybrid", max(n, 1), t.embedding_dim, bags, t.pooling_factor,
                                  t.zipf_alpha, frac) for r, n in zip(range(R), rows, strict=True)]
    return pieces


#: What ``build_dlrm_graph(..., harness=True)`` adds, by device kind, because :mod:`hybrid.bench.dlrm_harness`
#: does it (GPU: measured on ``datasets/dlrm-h100-1gpu``, ``experiments/dlrm_validation/h100``), none of it fitted:
#:
#: * ``single-rank input distribution and exchange``: the input distribution and the pooled-embedding all-to-all
#:   run on one rank too (NCCL and gloo copy the rank's own chunk);
#: * ``value-count host wait``: the value counts are copied to the host (``.cpu()``) before the payload can be
#:   sized: the host waits for them;
#: * ``sparse coalesce host waits``: ``torch.optim`` SGD/Adagrad on a sparse COO gradient coalesces it on the GPU
#:   and reads the number of unique rows back to the host: one host wait per fused table, so the GPU's backlog
#:   drains there and the launches after it are exposed;
#: * ``per-table view gradients``: every model-parallel table's pooled output is a column view of the received
#:   block (``block[:, a:b]``) and every data-parallel one a view of its group's output: in the backward pass
#:   autograd materialises one gradient of the WHOLE block per view (``zeros`` + slice copy) and accumulates them
#:   (``add_``), three kernels per table over the whole block;
#: * ``row-wise view gradients``: the same for the row-wise tables (two ranks or more): every rank's row-wise
#:   features are column views of the reduce-scatter output (one per row-wise table), and the owner takes one
#:   ``out[:, j]`` select of its fused lookup output (global batch) per row-wise piece, plus one ``out[:, keep]``
#:   of the table-/column-wise pieces when the group holds both: each a zero gradient of the whole fused output.
#:
#: The two host waits do not exist on a CPU device: ``.cpu()`` of a CPU tensor is a no-op and the host is
#: synchronous anyway (``TaskGraph.synchronous_host``: every kernel has finished when the next is launched).
#: Which of the rest a CPU target gets is data here, see ``experiments/dlrm_validation/results.md`` ("Harness
#: work on CPUs") for what each does to the CPU validation.
HARNESS_WORK: dict[str, tuple[str, ...]] = {
    "gpu": ("single-rank input distribution and exchange", "value-count host wait", "sparse coalesce host waits",
            "per-table view gradients", "row-wise view gradients"),
    "cpu": ("single-rank input distribution and exchange", "per-table view gradients", "row-wise view gradients"),
}
HARNESS_GPU_WORK = HARNESS_WORK["gpu"]

#: Host ops one iteration of :mod:`hybrid.bench.dlrm_harness` issues on one GPU, per element of the config: ATen ops,
#: autograd nodes and ``record_function`` annotations at every nesting level, what the trace engine's host model counts
#: and prices at :attr:`~hybrid.engine.overheads.Overheads.host_op_us` each (``DEFAULT_HOST_OP_US``, fitted on traced
#: H100 / H200 training steps, nothing of it on DLRM). Counted with ``torch.profiler`` on the harness's own training
#: loop (``_run_plan``, one rank, torch 2.13 on a CPU: ``experiments/dlrm_validation/harness_host_ops.py``) for the 52
#: (config, plan) pairs of ``datasets/dlrm-h100-1gpu`` and ``dlrm-h200-1gpu``, phase by phase: with what only a CPU's
#: kernels run added (:data:`HARNESS_CPU_EXTRA_OPS`), the integer formulas below give the recorded phases exactly
#: (lookup, dense forward, optimizer) or within 0.3% (input distribution), 1.1% (backward, at most 22 of 500-1,200
#: ops) and 5.5% (exchange: a CPU's ``cat`` records 12 nested ops in some runs) on average; 1.0% of a whole iteration
#: (median 1,397 ops). What each stands for, read off the recorded op trees:
#:
#: * ``input_dist`` 28 + 21 per fused table: the two ``all_to_all_single``, ``.cpu()`` of the counts, ``split``; per
#:   fused table the ``cat`` of lengths and of values (``int()`` of two starts each), ``cumsum - lens``;
#: * ``lookup_per_group`` 7: one ``EmbeddingBag`` call and its ``view``. The CPU records 25: its ``_embedding_bag``
#:   runs 22 nested ops; CUDA's ``_embedding_bag_cuda`` allocates four outputs (``at::empty``) and launches one kernel;
#: * ``exchange`` 9 (the ``AllToAll`` call, the send buffer's ``reshape(-1)``, the received block's slice and view) +
#:   2 per model-parallel table (``block[:, a:b]``: slice + as_strided) + 8 / 4 per fused table (``permute`` and
#:   ``reshape``: a copy when it holds several tables, a view for one) + 1 for the ``cat`` of several (a CPU's ``cat``
#:   records 12 nested ops more in some runs);
#: * ``dense_fwd`` 28 (DDP forward, BCE-with-logits) + 12 per linear layer (linear + ReLU) + 7 per replicated fused
#:   table (its ``EmbeddingBag`` call, as above; the CPU 25) + 2 per replicated table (its ``out[j]``) + 3 per table
#:   (the interaction's stack / cat input) + 20 for ``dot``;
#: * ``backward`` 15 + 14 per model-parallel table (``SliceBackward0``: zeros + slice + copy_, its share of the
#:   ``CatBackward0`` narrows, the accumulation) + 10 per replicated table + 58 per fused table
#:   (``EmbeddingBagBackward0``: the sparse gradient, ``AccumulateGrad``, the exchange's permute/reshape backward) +
#:   37 per replicated fused table + 53 per linear layer (``AddmmBackward0``, ``TBackward0``, ReLU backward, two
#:   ``AccumulateGrad`` with DDP's bucket copy) + 4 for ``dot``. The CPU records 16 more per fused table: its forward
#:   leaves ``offset2bag`` empty, so ``_embedding_bag_backward`` rebuilds it (``new_zeros``, ``ones_like``,
#:   ``index_add_``, ``cumsum``, ...); CUDA's forward fills it and the backward skips that branch;
#: * ``optimizer`` 4 (``step`` / ``zero_grad`` annotations) + per fused table 3 (sparse SGD: ``param.add_(grad)`` on
#:   a sparse COO gradient) or 62 (sparse Adagrad: coalesce, ``pow``, ``sparse_mask``, ``sqrt_``, ``div``, three
#:   sparse ``add_``). These two are host-op equivalents read off a GPU profile, not counts: a CPU records 12 / 148
#:   ops, most of them its sparse kernels' nested ATen calls (``_coalesce``'s sort, ``sparse_mask``'s intersection
#:   ``mul``, ``_nnz`` / ``sparse_dim`` queries; :data:`HARNESS_CPU_EXTRA_OPS` adds them), which CUDA's kernels do
#:   not run or run far below an average traced op's cost. The H100 profile's smallest sparse steps (host time
#:   included, the GPU work a few us) cost 18 / 360 us more than its dense SGD step:
#:   ``experiments/dlrm_validation/sparse_host.py`` turns that into ops at ``host_op_us`` (3.3 / 62.4; the H200's
#:   slower host 1.6 / 80.1);
#: * the dense step: on a GPU ``torch.optim`` runs its multi-tensor (``foreach``) path, one ``_foreach_add_`` for SGD;
#:   Adagrad 6 ``_foreach`` ops and per parameter 3 (its step count's CPU ``add_`` and ``.item()``), read off
#:   ``torch.optim`` (a CPU runs the per-tensor loop: 1 op per parameter for SGD, 15 for Adagrad).
#:
#: Kernel launches are counted one per kernel node of the graph.
HARNESS_HOST_OPS: dict[str, float] = {
    "input_dist": 28, "input_dist_per_group": 21, "lookup_per_group": 7,
    "exchange": 9, "exchange_per_table": 2, "exchange_per_group": 8, "exchange_per_single_group": 4, "exchange_cat": 1,
    "dense_fwd": 28, "dense_fwd_per_layer": 12, "dense_fwd_per_dp_group": 7, "dense_fwd_per_dp_table": 2,
    "dense_fwd_per_table": 3, "dense_fwd_dot": 20,
    "backward": 15, "backward_per_mp_table": 14, "backward_per_dp_table": 10, "backward_per_group": 58,
    "backward_per_dp_group": 37, "backward_per_layer": 53, "backward_dot": 4,
    "optimizer": 4, "sparse_sgd_per_group": 3, "sparse_adagrad_per_group": 62,
    "dense_sgd_foreach": 1, "dense_adagrad_foreach": 6, "dense_adagrad_per_param": 3,
}
#: Host ops the CPU records beyond :data:`HARNESS_HOST_OPS` (what a CPU's ATen kernels run that CUDA's do not), so
#: the two can be checked against a CPU profile of the harness: per ``EmbeddingBag`` call forward, per fused table
#: backward (the ``offset2bag`` rebuild) and sparse optimizer step (the sparse kernels' nested calls: 12 / 148 in
#: all), and the dense step's per-tensor loop instead of ``foreach``.
HARNESS_CPU_EXTRA_OPS: dict[str, float] = {"embedding_bag_fwd": 18, "embedding_bag_bwd": 16,
                                           "sparse_sgd_per_group": 9, "sparse_adagrad_per_group": 86}

def harness_host_op_counts(config: DLRMConfig, plan: ShardingPlan, device_kind: str = "gpu") -> dict[str, float]:
    """Host ops of one :mod:`hybrid.bench.dlrm_harness` iteration on one rank per harness phase
    (:data:`HARNESS_HOST_OPS`; ``device_kind="cpu"``: with what a CPU's kernels record beyond a GPU's,
    :data:`HARNESS_CPU_EXTRA_OPS`, and the dense step's per-tensor loop), the totals the graph's host nodes carry
    (:func:`build_dlrm_graph` with ``harness=True`` on a GPU) and what
    :func:`hybrid.bench.dlrm_harness.host_ops_per_phase` records on a CPU. One rank only (the counts were read off
    one-rank profiles): :class:`InvalidInputError` for more."""
    if device_kind not in ("gpu", "cpu"):
        raise InvalidInputError(f"device_kind must be 'gpu' or 'cpu', got {device_kind!r}")
    if config.gpus != 1:
        raise InvalidInputError(f"harness host-op counts are for one rank, the config has {config.gpus}")
    plan.validate(config)
    h, cpu = HARNESS_HOST_OPS, device_kind == "cpu"
    x = HARNESS_CPU_EXTRA_OPS if cpu else dict.fromkeys(HARNESS_CPU_EXTRA_OPS, 0.0)
    mp = defaultdict(int)
    dp = defaultdict(int)
    for t in config.tables:
        (dp if plan[t.name].type == "data_parallel" else mp)[t.embedding_dim] += 1
    G, Gd, Tmp, Td, T = len(mp), len(dp), sum(mp.values()), sum(dp.values()), config.num_tables
    nl = len(config.bottom_mlp) + len(config.top_mlp)
    dot = 1.0 if config.interaction == "dot" else 0.0
    P = 2 * nl + Gd  # weights and biases of every linear layer (the harness's nn.Linear), one weight per dp table
    sgd = config.optimizer == "sgd"
    if cpu:
        dense = P * (1.0 if sgd else 15.0)
    else:
        dense = h["dense_sgd_foreach"] if sgd else h["dense_adagrad_foreach"] + h["dense_adagrad_per_param"] * P
    emb_fwd = h["lookup_per_group"] + x["embedding_bag_fwd"]
    return {
        "input_dist": (h["input_dist"] + h["input_dist_per_group"] * G) if G else 0.0,
        "lookup_fwd": emb_fwd * G,
        "exchange_fwd": (h["exchange"] + h["exchange_per_table"] * Tmp + h["exchange_cat"] * (G > 1)
                         + sum(h["exchange_per_group"] if n > 1 else h["exchange_per_single_group"]
                               for n in mp.values())) if G else 0.0,
        "dense_fwd": (h["dense_fwd"] + h["dense_fwd_per_layer"] * nl + (emb_fwd - h["lookup_per_group"]
                      + h["dense_fwd_per_dp_group"]) * Gd + h["dense_fwd_per_dp_table"] * Td
                      + h["dense_fwd_per_table"] * T + h["dense_fwd_dot"] * dot),
        "backward": (h["backward"] + h["backward_per_mp_table"] * Tmp + h["backward_per_dp_table"] * Td
                     + (h["backward_per_group"] + x["embedding_bag_bwd"]) * G
                     + (h["backward_per_dp_group"] + x["embedding_bag_bwd"]) * Gd
                     + h["backward_per_layer"] * nl + h["backward_dot"] * dot),
        "optimizer": (h["optimizer"] + dense + G * sum(
            d["sparse_sgd_per_group" if sgd else "sparse_adagrad_per_group"] for d in (h, x))),
    }


#: Nominal PCIe x16 bandwidth per direction (bytes/s) by generation (PCI-SIG: 2.5/5 GT/s per lane with 8b/10b,
#: 8/16/32 GT/s with 128b/130b, 64/128 GT/s PAM4 with FLIT encoding); every generation a catalog entry may name
#: (:data:`hybrid.hardware.device.PCIE_GENERATIONS`): gen 1, 2 and 7 read as gen4 before.
PCIE_X16_BW = {1: 4.0e9, 2: 8.0e9, 3: 15.75e9, 4: 31.5e9, 5: 63.0e9, 6: 121.0e9, 7: 242.0e9}
#: Share of a GPU's memory that embedding tables (+ optimizer state) may take when placement is ``auto``; the
#: rest holds the MLPs, activations, communication buffers and the framework's workspace.
EMBEDDING_MEMORY_SHARE = 0.8


def host_link_bw(device: Device) -> float:
    """Bytes/s a GPU reads host memory at: its own host link where the catalog states one (``host_link_gbps``: a
    Grace superchip's NVLink-C2C), else PCIe x16 of its generation (gen 4 when the catalog does not say)."""
    if device.host_link_bw > 0:
        return float(device.host_link_bw)
    return PCIE_X16_BW[device.pcie_generation]


def host_update_passes(optimizer: str) -> float:
    """Passes over each touched row an embedding table's update makes in memory: SGD reads and writes the weights
    (2), Adagrad the weights and their accumulator (4)."""
    return 2.0 if optimizer == "sgd" else 4.0


def host_link_us(device: Device, rows: float | np.ndarray, dim: float | np.ndarray, dtype_bytes: float,
                 passes: float = 1.0) -> float | np.ndarray:
    """Time (us) a kernel adds when ``rows`` rows of ``dim`` elements (``passes`` times each: weights, optimizer
    state) cross the GPU's host link (:func:`host_link_bw`) instead of its HBM: its table is in host memory. The one
    price the graph (:func:`build_dlrm_graph`) and the sharding planner's estimate
    (:func:`hybrid.sharding.search.estimate_costs`) give a table there."""
    nbytes = np.asarray(rows, dtype=np.float64) * passes * dim * dtype_bytes
    us = np.maximum(nbytes * (1.0 / host_link_bw(device) - 1.0 / device.mem_bw), 0.0) * 1e6
    return float(us) if us.ndim == 0 else us


def host_placement_allowed(config: DLRMConfig, device: Device) -> bool:
    """Whether tables may live in host memory: ``embedding_placement`` host or auto, on a GPU (a CPU's tables are in
    host memory anyway). The one rule the graph (:func:`place_pieces`) and the planners follow."""
    return config.embedding_placement != "hbm" and device.kind == "gpu"


def embedding_hbm_budget(device: Device) -> float:
    """Bytes of embedding tables (+ optimizer state) a rank keeps in its GPU's memory under ``auto`` placement:
    :data:`EMBEDDING_MEMORY_SHARE` of it; the graph (:func:`place_pieces`) moves the rest to host memory and the
    sharding planner's estimate (:func:`hybrid.sharding.search.estimate_costs`) holds its GPU plans to it."""
    return EMBEDDING_MEMORY_SHARE * device.mem_capacity


def place_pieces(config: DLRMConfig, pieces: list[ShardPiece], device: Device) -> list[ShardPiece]:
    """Mark the pieces stored in host memory: all sharded pieces (``host``), none (``hbm``), or per rank the
    largest pieces until the rest fits :data:`EMBEDDING_MEMORY_SHARE` of the GPU's memory (``auto``)."""
    placement = config.embedding_placement
    if not host_placement_allowed(config, device):
        return pieces
    if placement == "host":
        return [replace(p, host=p.type != "data_parallel") for p in pieces]
    state = 2.0 if config.optimizer == "adagrad" else 1.0  # weights (+ Adagrad accumulator, same size)
    budget = embedding_hbm_budget(device)
    size = np.array([p.rows * p.dim * config.embedding_dtype_bytes * state for p in pieces])
    host = np.zeros(len(pieces), dtype=bool)
    ranks = np.array([p.rank for p in pieces])
    for r in np.unique(ranks):
        mine = np.flatnonzero((ranks == r) & np.array([p.type != "data_parallel" for p in pieces]))
        used = float(size[ranks == r].sum())
        for i in mine[np.argsort(-size[mine], kind="stable")]:
            if used <= budget:
                break
            host[i] = True
            used -= size[i]
    return [replace(p, host=bool(h)) if h else p for p, h in zip(pieces, host, strict=True)]


@dataclass
class CommVolumes:
    """Bytes each rank sends/receives in the embedding collectives of one iteration (forward direction)."""

    input_send: np.ndarray
    input_recv: np.ndarray
    output_send: np.ndarray
    output_recv: np.ndarray
    row_wise_bytes: float  # reduce-scatter (fwd) / all-gather (bwd) buffer size, all ranks
    dp_grad_bytes: float  # data-parallel table gradients joining the all-reduce

    @staticmethod
    def a2a_size(send: np.ndarray, recv: np.ndarray, ranks: int) -> np.ndarray:
        """Per-rank nccl-tests equivalent all-to-all size for uneven volumes."""
        return np.maximum(send, recv) * ranks / max(ranks - 1, 1)


def comm_volumes(config: DLRMConfig, pieces: list[ShardPiece]) -> CommVolumes:
    """Per-rank embedding communication volumes for ``pieces`` (see module docstring)."""
    R, B, eb = config.gpus, config.batch_size_per_gpu, config.dtype_bytes
    in_send, in_recv = np.zeros(R), np.zeros(R)
    out_send, out_recv = np.zeros(R), np.zeros(R)
    total_idx = 0.0
    total_out = 0.0
    rw_bytes = 0.0
    dp_bytes = 0.0
    rw_tables: set[str] = set()
    for p in pieces:
        if p.type == "data_parallel":
            if p.rank == 0:
                dp_bytes += p.rows * p.dim * config.embedding_dtype_bytes
            continue
        # indices + bag lengths of one source rank's batch (hybrid: HugeCTR's data reader gives every GPU the
        # global batch's keys, nothing is exchanged)
        idx = 0.0 if p.type == "hybrid" else B * (p.pooling + 1.0) * INDEX_BYTES
        in_recv[p.rank] += (R - 1) * idx
        in_send[p.rank] -= idx  # its own share stays local
        total_idx += idx
        if p.type == "row_wise":
            if p.table not in rw_tables:
                rw_tables.add(p.table)
                rw_bytes += B * R * p.dim * eb
            continue
        out = B * p.dim * eb * p.fraction  # pooled output for one destination rank's batch (hybrid: its share)
        out_send[p.rank] += (R - 1) * out
        out_recv[p.rank] -= out
        total_out += out
    in_send += total_idx
    out_recv += total_out
    return CommVolumes(in_send, in_recv, out_send, out_recv, rw_bytes, dp_bytes)


@dataclass
class DLRMIteration:
    """A built iteration: the task graph plus what it was built from."""

    graph: TaskGraph
    config: DLRMConfig
    plan: ShardingPlan
    target: Target
    volumes: CommVolumes
    pieces: list[ShardPiece]
    info: dict[str, Any] = field(default_factory=dict)


#: A GPU coalesce's hottest-row sums are noted once they reach this much per iteration on a rank (us).
HOT_NOTE_US = 1000.0


def _hot_note(hot_us: dict[int, float]) -> str | None:
    """The note a GPU sparse-Adagrad iteration gets when its coalesce's hottest-row sums (COALESCE_US_PER_DUPLICATE)
    reach :data:`HOT_NOTE_US` on some rank: what they cost and why (skewed tables under torch.optim's COO path)."""
    if not hot_us or max(hot_us.values()) < HOT_NOTE_US:
        return None
    r, us = max(hot_us.items(), key=lambda kv: kv[1])
    return (f"sparse Adagrad on a GPU: CUDA's coalesce sums each row's duplicates in one warp, one after another; the "
            f"hottest rows of skewed (Zipf) tables cost {us / 1e3:.1f} ms per iteration on rank {r} (their lookups x "
            f"{COALESCE_US_PER_DUPLICATE['gpu']} us); a fused optimizer (e.g. FBGEMM's TBE) or SGD avoids it")


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def lookup_groups(pieces: list[ShardPiece], rank: int) -> list[dict[str, Any]]:
    """The fused lookup kernels of one rank: pieces grouped by (batch, dim), aggregated into one op row.

    A hybrid embedding's infrequent pieces (``hybrid``) form one kernel per dim whatever their bag counts: HugeCTR
    looks up all of a rank's infrequent categories, every table's, in one pass over one flat index list
    (``InfrequentEmbedding::forward_model``, one kernel; the same for the update); the row's ``batch_size`` is
    then the members' mean bag count, so that tables x batch is the rank's total of infrequent lookups."""
    groups: dict[tuple[int, int, bool, bool], list[ShardPiece]] = defaultdict(list)
    for p in pieces:
        if p.rank == rank:  # replicated and sharded pieces never fuse (their batches may coincide)
            groups[(-1 if p.type == "hybrid" else p.batch, p.dim, p.host, p.type == "data_parallel")].append(p)
    out = []
    for (batch, dim, host, _), members in sorted(groups.items(), key=lambda kv: (-kv[0][0], *kv[0][1:])):
        T = len(members)
        if batch < 0:  # a hybrid embedding's infrequent pieces, one flat list of lookups (their mean bag count)
            batch = max(int(round(sum(m.batch for m in members) / T)), 1)
        pooling = sum(m.pooling for m in members) / T
        rows = sum(m.rows for m in members) / T
        lookups = np.array([m.pooling for m in members])
        alpha = float(np.average([m.zipf_alpha for m in members], weights=lookups)) if lookups.sum() else 0.0
        out.append({
            "num_tables": T, "batch_size": batch, "embedding_dim": dim, "pooling_factor": _round(pooling),
            "num_embeddings": _round(max(rows, 1.0)), "zipf_alpha": _round(alpha),
            "index_dist": "zipf" if alpha > 0 else "uniform",
            "sharded": members[0].type != "data_parallel",
            "unique_rows": float(expected_unique_rows(np.array([m.rows for m in members], dtype=np.float64),
                                                      np.array([m.batch * m.pooling for m in members]),
                                                      np.array([m.zipf_alpha for m in members])).sum()),
            # the fused table's most looked-up row (members' rows never collide: each has its own offset). A row-wise
            # piece is a slice of its table's rows: whichever rank holds the table's hottest row gets all of its
            # lookups, so each piece counts the whole table's (the iteration waits for that rank)
            "hottest_row_lookups": float(expected_hottest_row_lookups(
                np.array([m.rows / max(m.fraction, 1e-12) for m in members], dtype=np.float64),
                np.array([m.batch * m.pooling / max(m.fraction, 1e-12) for m in members]),
                np.array([m.zipf_alpha for m in members])).max()),
            "tables": [m.table for m in members], "host": host,
            "row_wise_pieces": sum(m.type == "row_wise" for m in members),
        })
    return out


#: Storage dtype of a compute dtype that only changes the arithmetic (TF32 matrix multiplies read FP32 tensors).
STORAGE_DTYPE = {"tf32": "fp32"}


def build_dlrm_graph(
    config: DLRMConfig,
    plan: ShardingPlan | None = None,
    catalog: Catalog | None = None,
    *,
    bucket_bytes: int = DDP_BUCKET_BYTES,
    first_bucket_bytes: int = DDP_FIRST_BUCKET_BYTES,
    comm_overlap: float | None = None,
    collective_system: str | None = None,
    hybrid_embedding: HybridEmbedding | None = None,
    hierarchical_all_to_all: bool | None = None,
    overlap_iterations: bool = False,
    prefetch_input_dist: bool = False,
    harness: bool = False,
) -> DLRMIteration:
    """The task graph of one training iteration of ``config`` sharded by ``plan`` (default: ``config.plan``).

    ``comm_overlap`` (in [0, 1]) overrides the target device kind's :data:`COMM_OVERLAP`.
    ``collective_system`` costs the collectives as on another catalog system (e.g. a measured system with the
    same fabric, whose calibrated curves stand in for an unmeasured one); default: the config's system.
    ``hybrid_embedding`` replaces the plan's placement of every table by HugeCTR's hybrid embedding (frequent
    categories replicated, infrequent ones spread over all ranks; the plan is still validated).
    ``hierarchical_all_to_all`` runs every all-to-all on several nodes as HugeCTR's hierarchical one (NVLink inside
    each node, then one all-to-all per rail across the nodes); default: with the hybrid embedding only.
    ``overlap_iterations`` marks a framework that overlaps consecutive iterations (HugeCTR's overlapped training
    pipeline): the iteration is then timed in its steady state, each rank's busiest resource (compute, network or
    host; :attr:`~hybrid.engine.graph.TaskGraph.overlap_iterations`).
    ``prefetch_input_dist`` runs the input distribution as a pipelined trainer does (TorchRec's
    ``TrainPipelineSparseDist``, HugeCTR's embedding collection with ``train_inter_iteration_overlap``): the next
    batch's index all-to-alls and their unpacking on a stream of their own (:data:`INPUT_DIST_STREAM`) beside this
    iteration's work, and this iteration's lookups on the batch distributed during the previous one (no wait).
    ``harness`` adds, on GPUs, what :mod:`hybrid.bench.dlrm_harness` runs beyond the TorchRec-style iteration
    (see :data:`HARNESS_GPU_WORK`): the input distribution and the pooled exchange also on one rank, the host
    waiting for the value counts and for every sparse-gradient coalesce, and the per-table views of the
    received block with their backward (zeros + accumulate of the whole block per table); on one GPU it also prices
    the harness's eager host op by op, as traced GPU steps are (:data:`HARNESS_HOST_OPS` at ``host_op_us``, one
    ``kernel_launch_us`` per kernel: :meth:`~hybrid.engine.graph.TaskGraph.price_host_by_ops`).
    """
    plan = plan if plan is not None else config.plan
    if plan is None:
        raise InvalidInputError("no sharding plan: give one (or put `plan:` in the config)")
    if bucket_bytes <= 0 or first_bucket_bytes <= 0:
        raise InvalidInputError("DDP bucket sizes must be positive")
    cat = catalog or default_catalog()
    target, coll_note = resolve_target(config.system, cat), None
    if collective_system is None:  # a bare CPU device's collectives: on its gloo system
        target, coll_note = collective_target(target, cat, config.gpus)
    check_target(config, target, cat)
    overlap = COMM_OVERLAP.get(target.device.kind, 1.0) if comm_overlap is None else float(comm_overlap)
    if not 0.0 <= overlap <= 1.0:
        raise InvalidInputError(f"comm_overlap must be in [0, 1], got {comm_overlap}")
    pieces = shard_pieces(config, plan)
    if hybrid_embedding is not None:
        nf, share = hybrid_embedding.split(np.array([t.num_embeddings for t in config.tables]),
                                           np.array([t.pooling_factor for t in config.tables]),
                                           config.batch_size_per_gpu * config.gpus, config.gpus,
                                           target.nodes(config.gpus))
        pieces = hybrid_embedding_pieces(config, nf, share)
    pieces = place_pieces(config, pieces, target.device)
    vol = comm_volumes(config, pieces)
    R, B, eb, dt = config.gpus, config.batch_size_per_gpu, config.dtype_bytes, config.dtype
    emb_dt = config.embedding_dtype
    # a table in host memory: its kernels move the rows they touch over the host link instead of HBM (zero-copy /
    # UVM gathers and updates); what they read and write in GPU memory (indices, outputs, gradients) stays there
    teb = config.embedding_dtype_bytes
    dev = target.device.key
    coll_system = target.system
    if collective_system is not None:
        coll_system = cat.resolve_system(collective_system)
    g = TaskGraph(R, synchronous_host=target.device.kind == "cpu", overlap_iterations=bool(overlap_iterations))
    all_ranks = list(range(R))

    def kop(op: str, **shape: Any) -> dict[str, Any]:
        return {"op": op, "device": dev, "dtype": dt, **shape}

    def copy(elements: float, direction: str = "fwd") -> dict[str, Any]:
        return kop("elementwise", variant="copy", elements=_round(max(elements, 1.0)), direction=direction)

    lo_dt = config.lookup_dtype
    # the lookups write a dtype the dense part does not store its activations in (TF32 is FP32 storage)
    cast_outputs = STORAGE_DTYPE.get(lo_dt, lo_dt) != STORAGE_DTYPE.get(dt, dt)
    width = DTYPE_BYTES[dt] / DTYPE_BYTES[lo_dt]  # bytes of a dense-dtype element per lookup-output byte

    def cast(elements: float, direction: str) -> dict[str, Any]:
        """``elements`` pooled lookup outputs converted to ``dtype`` (fwd) or their gradients back (bwd): one read
        in the one dtype, one write in the other (the row counts both in units of ``lookup_output_dtype``)."""
        n_in, n_out = (1.0, width) if direction == "fwd" else (width, 1.0)
        return {"op": "elementwise", "device": dev, "dtype": lo_dt, "variant": "cast", "direction": direction,
                "elements": _round(max(elements, 1.0)), "n_inputs": n_in, "n_outputs": n_out,
                "flops_per_element": 0.0}

    def cop(op: str, size: float, ranks: int, nodes: int | None = None) -> dict[str, Any]:
        return {"op": op, "device": dev, "system": coll_system, "dtype": dt, "size_bytes": _round(max(size, 1.0)),
                "n_ranks": ranks, "n_nodes": target.nodes(ranks) if nodes is None else nodes}

    n_nodes = target.nodes(R)
    gpn = max(R // n_nodes, 1)
    hier_wanted = hybrid_embedding is not None if hierarchical_all_to_all is None else bool(hierarchical_all_to_all)
    hier = hier_wanted and n_nodes > 1 and gpn * n_nodes == R

    def a2a(name: str, sizes: np.ndarray, deps: dict[int, list[Any]], **kw: Any) -> dict[int, int]:
        """An all-to-all; hierarchical on several nodes (``hierarchical_all_to_all``) as HugeCTR's
        (``IB_NVLink_Hier``): an NVLink all-to-all inside each node that gathers every destination node's data
        on the GPU of the same local rank, then one all-to-all per rail across the nodes (each GPU's own NIC)."""
        if not hier:
            return coll(name, [cop("all_to_all", s, R) for s in sizes], deps=deps, **kw)
        intra = coll(f"{name} (intra-node)", [cop("all_to_all", s, gpn, 1) for s in sizes], deps=deps, **kw)
        return coll(f"{name} (inter-node, per rail)", [cop("all_to_all", s, n_nodes, n_nodes) for s in sizes],
                    deps={r: [intra[r]] for r in all_ranks}, **kw)

    def coll(name: str, ops: Any, deps: dict[int, list[Any]] | None = None, **kw: Any) -> dict[int, int]:
        deps = {r: [d for d in ds if d is not None] for r, ds in (deps or {}).items()}
        return g.collective(name, all_ranks, ops, deps=deps, comm_overlap=overlap, **kw)

    groups = [lookup_groups(pieces, r) for r in all_ranks]
    # pooled lookup outputs per rank of its sharded groups (what a cast to the dense dtype converts, fwd and bwd)
    pooled = [sum(grp["batch_size"] * grp["num_tables"] * grp["embedding_dim"] for grp in groups[r] if grp["sharded"])
              for r in all_ranks]
    has_sharded = any(p.type != "data_parallel" for p in pieces)
    has_rw = vol.row_wise_bytes > 0
    layers = config.mlp_layers()
    n_bottom = len(config.bottom_mlp)
    n_layers = len(layers)
    shape_keys = ("num_tables", "batch_size", "embedding_dim", "pooling_factor", "num_embeddings", "zipf_alpha",
                  "index_dist")

    def emb(grp: dict[str, Any], direction: str, variant: str = LOOKUP_FWD_VARIANT) -> dict[str, Any]:
        # every row names its variant like the profiler's rows do: the embedding model's fitted reference is
        # keyed by (direction, variant), and a forward row without one fell back to the roofline reference
        return kop("embedding_bag", direction=direction, variant=variant, **{k: grp[k] for k in shape_keys},
                   dtype=emb_dt)

    def host_us(grp: dict[str, Any], rows: float, passes: float = 1.0) -> float:
        """Time (us) a kernel of ``grp`` adds when its table is in host memory: ``rows`` rows of weights (or of
        weights and optimizer state, ``passes`` per row) crossing the host link instead of HBM; 0 in GPU memory."""
        if not grp["host"]:
            return 0.0
        return float(host_link_us(target.device, rows, grp["embedding_dim"], teb, passes))

    def lookups(grp: dict[str, Any]) -> float:
        return grp["batch_size"] * grp["pooling_factor"] * grp["num_tables"]
    # per rank: pooled columns it sends (table-/column-wise pieces) and the fused groups it holds
    a2a_cols = np.zeros(R)
    cw_cols = np.zeros(R)
    n_groups_of = np.zeros(R)
    for p in pieces:
        if p.type in ("table_wise", "column_wise", "hybrid"):
            a2a_cols[p.rank] += p.dim * p.fraction
        if p.type == "column_wise":
            cw_cols[:] += p.dim  # every rank reassembles the column-wise tables of its batch
    for r in all_ranks:
        n_groups_of[r] = sum(1 for grp in groups[r] if grp["sharded"])
    rw_width = vol.row_wise_bytes / max(B * R * eb, 1e-9)
    n_rw_tables = len({p.table for p in pieces if p.type == "row_wise"})
    # model-parallel bottom MLP: rank 0 runs it on the global batch; dense features travel with the indices and
    # its output with the pooled embeddings (a table-wise piece of width bottom_mlp[-1])
    mp_bottom = config.bottom_mlp_placement == "model_parallel" and R > 1 and has_sharded
    if mp_bottom:
        d_bot, dense_in = config.bottom_mlp[-1], B * config.dense_features * 4.0
        vol.input_send += dense_in
        vol.input_send[0] -= dense_in
        vol.input_recv[0] += (R - 1) * dense_in
        out = B * d_bot * eb
        vol.output_send[0] += (R - 1) * out
        vol.output_recv += out
        vol.output_recv[0] -= out
        a2a_cols[0] += d_bot
    bottom_ranks = [0] if mp_bottom else all_ranks
    Bb = B * R if mp_bottom else B  # batch of the bottom MLP

    # ---- input distribution: value counts, then lengths + indices (int64), unpacked per fused table ----------
    g.phase = "input_dist"
    for r in all_ranks:
        g.add(r, HOST, "iteration host work", kind="cpu", overhead="iteration")
    unpacked: dict[int, int] = {}
    work = set(HARNESS_WORK.get(target.device.kind, ())) if harness else set()
    # the harness's eager host on a GPU, op by op (HARNESS_HOST_OPS at host_op_us, one launch per kernel), as a traced
    # GPU step's host is priced; a CPU keeps the per-category overheads (its host runs the kernels themselves), and so
    # do several GPUs: the counts were read off one-rank profiles (the input distribution and the exchanges loop over
    # the source ranks, row- and column-wise pieces add their own ops)
    host_model = harness and target.device.kind == "gpu" and R == 1
    host_note = ("harness host priced per category (launch + dispatch per kernel): its op-by-op counts "
                 "(HARNESS_HOST_OPS) are one rank's") if harness and target.device.kind == "gpu" and R > 1 else None
    host_at: dict[int, float] = defaultdict(float)
    hops = HARNESS_HOST_OPS

    def charge(r: int, n: float) -> None:
        """``n`` host ops of the harness on the latest host node of rank ``r`` (the launch they precede)."""
        if host_model and n:
            host_at[g.last(r, HOST)] += float(n)
    one_rank = R == 1 and has_sharded and "single-rank input distribution and exchange" in work
    if one_rank:  # NCCL / gloo on one rank: its own chunk is copied (and on a GPU the counts read back)
        own_idx = sum(B * (p.pooling + 1.0) * INDEX_BYTES for p in pieces if p.type != "data_parallel")
        g.add(0, HOST, "launch input_dist all_to_all (value counts, one rank)", kind="cpu",
              overhead="collective_launch")
        counts_k = g.kernel(0, "input_dist value counts (local copy)", copy(max(n_groups_of[0], 1) * INDEX_BYTES / eb))
        charge(0, 4)  # torch.empty + the all_to_all_single call
        if "value-count host wait" in work:
            g.add(0, HOST, "input_dist value counts to host (.cpu(): waits for the GPU)", kind="cpu",
                  overhead="kernel_launch", deps=[counts_k])
            charge(0, 4)  # .cpu(): to, _to_copy, empty_strided, copy_
        g.add(0, HOST, "launch input_dist all_to_all (one rank)", kind="cpu", overhead="collective_launch")
        payload_k = g.kernel(0, "input_dist payload (local copy)", copy(own_idx / eb))
        unpacked[0] = g.kernel(0, "input_dist unpack", copy(own_idx / eb), deps=[payload_k])
        charge(0, hops["input_dist"] - 8 + hops["input_dist_per_group"] * n_groups_of[0])
    prefetch = bool(prefetch_input_dist) and R > 1
    dist_stream = {"stream": INPUT_DIST_STREAM} if prefetch else {}
    if R > 1 and has_sharded and float(vol.input_send.max()) > 0:
        counts = coll("input_dist all_to_all (value counts)",
                      [cop("all_to_all", R * max(n_groups_of[r], 1) * INDEX_BYTES, R) for r in all_ranks],
                      args={"what": "values per fused table"}, **dist_stream)
        waited: dict[int, list[int]] = {r: [] for r in all_ranks}
        if "value-count host wait" in work:  # the receiver sizes the payload from the counts on the host (.cpu())
            waited = {r: [g.add(r, HOST, "input_dist value counts to host (.cpu(): waits for the GPU)", kind="cpu",
                                overhead="kernel_launch", deps=[counts[r]])] for r in all_ranks}
        sizes = CommVolumes.a2a_size(vol.input_send, vol.input_recv, R)
        payload = coll("input_dist all_to_all", [cop("all_to_all", s, R) for s in sizes],
                       deps={r: [counts[r], *waited[r]] for r in all_ranks},
                       args={"what": "bag lengths + lookup indices"}, **dist_stream)
        for r in all_ranks:  # torch.cat of every source's chunk per fused table (int64 -> bytes as dtype elements)
            recv = float(vol.input_recv[r]) + float(vol.input_send[r]) / max(R, 1)
            unpacked[r] = g.kernel(r, "input_dist unpack", copy(recv / eb), deps=[payload[r]], **dist_stream)
            charge(r, hops["input_dist"] + hops["input_dist_per_group"] * n_groups_of[r])
        if prefetch:  # the next batch's: this iteration's lookups read the one distributed during the previous one
            unpacked = {}

    # ---- lookups of the sharded tables (global batch) -------------------------------------------------------
    g.phase = "lookup_fwd"
    lookup_done: dict[int, int | None] = {}
    for r in all_ranks:
        last = None
        for grp in groups[r]:
            if grp["sharded"]:
                last = g.kernel(r, f"embedding fwd ({grp['num_tables']} tables, dim {grp['embedding_dim']}"
                                f"{', host memory' if grp['host'] else ''})", emb(grp, "fwd"),
                                deps=[unpacked.get(r)] if r in unpacked else [],
                                args={"tables": ",".join(grp["tables"][:50])},
                                duration_us=host_us(grp, lookups(grp)))  # one row read per lookup
                charge(r, hops["lookup_per_group"])
        lookup_done[r] = last
        if cast_outputs and pooled[r] > 0:
            lookup_done[r] = g.kernel(r, f"embedding output cast ({lo_dt} -> {dt})", cast(pooled[r], "fwd"),
                                      deps=[last])
    if mp_bottom:
        for i in range(n_bottom):
            name, fin, fout = layers[i]
            g.kernel(0, f"{name} fwd linear (global batch)", kop("linear", b=1, m=Bb, n=fout, k=fin, direction="fwd"))
            lookup_done[0] = g.kernel(0, f"{name} fwd relu (global batch)",
                                      kop("elementwise", variant="relu", elements=Bb * fout))

    # ---- output distribution ---------------------------------------------------------------------------------
    g.phase = "exchange_fwd"
    # harness host ops: per fused table its permute + reshape (+ cat), then per received table its column view
    n_mp_tables = sum(1 for t in config.tables if plan[t.name].type != "data_parallel")

    def pack_ops(r: int) -> float:  # (the send buffer's reshape(-1) and, for several fused tables, their cat)
        mine = [grp["num_tables"] for grp in groups[r] if grp["sharded"]]
        return (sum(hops["exchange_per_group"] if n > 1 else hops["exchange_per_single_group"] for n in mine)
                + 2 + hops["exchange_cat"] * (len(mine) > 1))

    def received_ops() -> float:  # the AllToAll call, the received block's slice and view, one column view per table
        return hops["exchange"] - 2 + hops["exchange_per_table"] * n_mp_tables

    out_a2a: dict[int, int] = {}
    rs: dict[int, int] = {}
    exchanged: dict[int, list[int]] = {r: [] for r in all_ranks}
    if R > 1 and has_sharded:
        sizes = CommVolumes.a2a_size(vol.output_send, vol.output_recv, R)
        if sizes.max() > 0:
            packed = {r: g.kernel(r, "output_dist pack", copy(R * B * a2a_cols[r]), deps=[lookup_done[r]])
                      for r in all_ranks if a2a_cols[r] > 0}
            out_a2a = a2a("output_dist all_to_all", sizes,
                          deps={r: [lookup_done[r], packed.get(r)] for r in all_ranks},
                          args={"what": "pooled embeddings"})
        if has_rw:
            packed_rw = {r: g.kernel(r, "row_wise pack", copy(R * B * rw_width), deps=[lookup_done[r]])
                         for r in all_ranks}
            rs = coll("row_wise reduce_scatter", cop("reduce_scatter", vol.row_wise_bytes, R),
                      deps={r: [packed_rw[r]] for r in all_ranks})
        for r in all_ranks:
            exchanged[r] = [n for n in (out_a2a.get(r), rs.get(r)) if n is not None]
            if cw_cols[r] > 0:
                exchanged[r] = [g.kernel(r, "column_wise reassemble", copy(B * cw_cols[r]), deps=exchanged[r])]
            charge(r, pack_ops(r) + received_ops())
    elif one_rank and a2a_cols[0] > 0:
        # one rank: the pooled outputs are still packed (permute+reshape per fused table, then one cat) and sent
        # to itself by NCCL (a local copy)
        n_mp_groups = int(n_groups_of[0])
        last = g.kernel(0, "output_dist pack", copy(B * a2a_cols[0]), deps=[lookup_done[0]])
        charge(0, pack_ops(0))
        if n_mp_groups > 1:
            last = g.kernel(0, "output_dist pack (cat)", copy(B * a2a_cols[0]))
        g.add(0, HOST, "launch output_dist all_to_all (one rank)", kind="cpu", overhead="collective_launch")
        exchanged[0] = [g.kernel(0, "output_dist all_to_all (local copy)", copy(B * a2a_cols[0]), deps=[last])]
        charge(0, received_ops())

    # ---- dense forward (DDP module): bottom MLP, data-parallel lookups, interaction, top MLP, loss ----------
    g.phase = "dense_fwd"

    def has_act(i: int) -> bool:  # every layer but the last top one and the DCN cross layers ends in a ReLU
        return i != n_layers - 1 and not config.is_cross_layer(layers[i][0])

    def cross_end(i: int) -> bool:  # the layer that closes a DCNv2 cross layer: then x0 * y + x_l
        return layers[i][0].startswith("dcn") and layers[i][0].endswith("_u")

    F = config.num_tables + 1
    d_out = config.bottom_mlp[-1]
    emb_cols = sum(t.embedding_dim for t in config.tables)
    for r in all_ranks:
        for i, (name, fin, fout) in enumerate(layers):
            if mp_bottom and i < n_bottom:
                continue
            if i == n_bottom:
                for grp in groups[r]:
                    if not grp["sharded"]:
                        g.kernel(r, f"embedding fwd dp ({grp['num_tables']} tables, dim {grp['embedding_dim']})",
                                 emb(grp, "fwd"))
                        charge(r, hops["dense_fwd_per_dp_group"] + hops["dense_fwd_per_dp_table"] * grp["num_tables"])
                        if cast_outputs:
                            g.kernel(r, f"embedding dp output cast ({lo_dt} -> {dt})",
                                     cast(grp["batch_size"] * grp["num_tables"] * grp["embedding_dim"], "fwd"))
                deps = [*exchanged[r], lookup_done.get(r)]
                if config.interaction == "dot":
                    g.kernel(r, "interaction stack", copy(B * (d_out + emb_cols)), deps=deps)
                    g.kernel(r, "interaction bmm", kop("bmm", b=B, m=F, n=F, k=d_out))
                    g.kernel(r, "interaction tril+cat", copy(B * config.interaction_features))
                    charge(r, hops["dense_fwd_dot"])
                else:
                    g.kernel(r, "interaction cat", copy(B * config.interaction_features), deps=deps)
                charge(r, hops["dense_fwd_per_table"] * config.num_tables)
            g.kernel(r, f"{name} fwd linear", kop("linear", b=1, m=B, n=fout, k=fin, direction="fwd"))
            charge(r, hops["dense_fwd_per_layer"])
            if cross_end(i):
                g.kernel(r, f"{name} cross x0*y+x", kop("elementwise", variant="mul", elements=B * fout, n_inputs=3,
                                                         flops_per_element=2))
            if has_act(i):
                g.kernel(r, f"{name} fwd relu", kop("elementwise", variant="relu", elements=B * fout))
        g.kernel(r, "loss fwd", kop("elementwise", variant="sigmoid", elements=B))
        charge(r, hops["dense_fwd"])

    # ---- backward with DDP buckets ---------------------------------------------------------------------------
    g.phase = "backward"
    pending: list[dict[int, int]] = []  # per layer: rank -> wgrad node
    pending_bytes = 0.0
    allreduces: list[dict[int, int]] = []
    n_buckets = 0  # dense DDP buckets so far (the data-parallel tables' all-reduces are not DDP's first bucket)

    def flush(force: bool = False) -> None:
        nonlocal pending, pending_bytes, n_buckets
        cap = first_bucket_bytes if not n_buckets else bucket_bytes
        if pending and (force or pending_bytes >= cap):
            if R > 1:
                last = pending[-1]
                allreduces.append(coll(f"ddp all_reduce bucket {n_buckets}", cop("all_reduce", pending_bytes, R),
                                       deps={r: [last[r]] for r in all_ranks}, args={"bytes": pending_bytes}))
            else:
                allreduces.append({})
            n_buckets += 1
            pending, pending_bytes = [], 0.0

    inter_bwd: dict[int, int] = {}
    dp_bwd: dict[int, int] = {}
    # per source rank: the table-/column-wise pieces whose pooled outputs arrive in its block (harness views)
    views_from = np.zeros(R)
    for p in pieces:
        if p.type in ("table_wise", "column_wise"):
            views_from[p.rank] += 1

    def slice_gradients(r: int, blocks: list[tuple[str, int, float]], last: int | None,
                        ops_per_view: list[float] | None = None) -> int | None:
        """Per view of a block (``(what, views, elements of the whole block)``): a zero gradient of the whole
        block, the slice copied in, accumulated into the block's gradient (the first one is taken as is). These
        are the same fill/copy/add kernels as in a forward pass, so their rows say ``direction="fwd"`` (the
        profile's). ``ops_per_view``: the harness's host ops of one view's backward, per block."""
        for b, (what, n_views, elems) in enumerate(blocks):
            for j in range(n_views):
                g.kernel(r, f"feature slice bwd zeros ({what})", kop("elementwise", variant="zeros", n_inputs=0,
                                                                     n_outputs=1, flops_per_element=0,
                                                                     elements=_round(elems)), deps=[last])
                charge(r, ops_per_view[b] if ops_per_view else 0.0)
                last = g.kernel(r, f"feature slice bwd copy ({what})", copy(elems / max(n_views, 1)))
                if j > 0:
                    last = g.kernel(r, f"feature slice bwd accumulate ({what})",
                                    kop("elementwise", variant="add_", elements=_round(elems)))
        return last

    def view_gradients(r: int) -> int:
        """Backward of the harness's per-table views of the blocks the rank received (and, with row-wise view
        gradients, of the reduce-scatter output: one view per row-wise table)."""
        blocks = [(f"block from rank {s}", int(views_from[s]), B * a2a_cols[s]) for s in all_ranks
                  if views_from[s] > 0 and a2a_cols[s] > 0]
        ops = [hops["backward_per_mp_table"]] * len(blocks)
        blocks += [(f"dp group dim {grp['embedding_dim']}", int(grp["num_tables"]),
                    B * grp["num_tables"] * grp["embedding_dim"]) for grp in groups[r] if not grp["sharded"]]
        ops += [hops["backward_per_dp_table"]] * (len(blocks) - len(ops))
        if "row-wise view gradients" in work and has_rw and R > 1:
            blocks.append(("row_wise reduce_scatter output", n_rw_tables, B * rw_width))
            ops.append(hops["backward_per_mp_table"])
        return slice_gradients(r, blocks, inter_bwd[r], ops)

    def owner_view_gradients(r: int, last: int | None) -> int | None:
        """Backward of the owner's views of its fused lookup output: ``out[:, j]`` per row-wise piece, plus
        ``out[:, keep]`` when the group also holds table-/column-wise pieces: each a zero gradient of the whole
        fused output (global batch) and an accumulation."""
        blocks = []
        for grp in groups[r]:
            n_rw = int(grp.get("row_wise_pieces", 0))
            if grp["sharded"] and n_rw:
                n_sel = n_rw + (1 if n_rw < grp["num_tables"] else 0)
                blocks.append((f"fused output dim {grp['embedding_dim']}", n_sel,
                               grp["batch_size"] * grp["num_tables"] * grp["embedding_dim"]))
        return slice_gradients(r, blocks, last)

    def dp_tables_backward() -> None:
        """Dense gradients of the data-parallel tables (autograd reaches them before the bottom MLP) and their
        all-reduce (one DDP bucket per ``bucket_bytes``)."""
        dp = [(r, grp, emb(grp, "bwd", "dense_sgd")) for r in all_ranks for grp in groups[r] if not grp["sharded"]]
        # the profiled dense_sgd row is backward + SGD update; the update of a replicated table runs in the optimizer
        # phase (the dense step below, after its all-reduce): only the backward's share (zero-filled table-sized
        # gradient + scatter-add of the lookups) here (the shares of every rank's groups in one call)
        updates = dense_sgd_update_share(pd.DataFrame([row for _, _, row in dp])) if dp else np.zeros(0)
        for (r, grp, row), update in zip(dp, updates, strict=True):
            if cast_outputs:
                g.kernel(r, f"embedding dp grad cast ({dt} -> {lo_dt})",
                         cast(grp["batch_size"] * grp["num_tables"] * grp["embedding_dim"], "bwd"),
                         deps=[inter_bwd[r]])
            dp_bwd[r] = g.kernel(r, f"embedding bwd dp ({grp['num_tables']} tables, dim {grp['embedding_dim']})",
                                 row, deps=[inter_bwd[r]], scale=1.0 - float(update))
            charge(r, hops["backward_per_dp_group"])
        if hybrid_embedding is not None and R > 1 and dp_bwd:
            # HugeCTR reduces the frequent embeddings' gradients in its grouped weight-gradient buffer, in the
            # same all-reduce as the dense layers
            nonlocal pending_bytes
            pending.append(dict(dp_bwd))
            pending_bytes += vol.dp_grad_bytes
            return
        if R <= 1:
            return
        # DDP buckets whole parameters (``_compute_bucket_assignment_by_size``): gradients join a bucket until it
        # holds ``bucket_bytes`` or more, and a parameter larger than that is one bucket of its own, never split
        # (one fused table per embedding dim: 256 MB of gradient went as ten 25 MiB all-reduces)
        sizes = np.array([grp["num_tables"] * grp["num_embeddings"] * grp["embedding_dim"]
                          for grp in groups[0] if not grp["sharded"]], dtype=np.float64)
        sizes *= vol.dp_grad_bytes / max(float(sizes.sum()), 1e-300)  # (the groups' rows are rounded means)
        buckets, filled = [], 0.0
        for size in sizes:
            filled += float(size)
            if filled >= bucket_bytes:
                buckets.append(filled)
                filled = 0.0
        if filled > 0:
            buckets.append(filled)
        for nbytes in buckets:
            allreduces.append(coll(f"ddp all_reduce dp tables {len(allreduces)}", cop("all_reduce", nbytes, R),
                                   deps={r: [dp_bwd[r]] for r in all_ranks}, args={"bytes": nbytes}))

    for r in all_ranks:
        g.kernel(r, "loss bwd", kop("elementwise", variant="sigmoid", elements=B, direction="bwd"))
        charge(r, hops["backward"])
    for i in range(n_layers - 1, -1, -1):
        name, fin, fout = layers[i]
        wgrad: dict[int, int] = {}
        if mp_bottom and i < n_bottom:
            continue
        for r in all_ranks:
            if has_act(i):
                g.kernel(r, f"{name} bwd relu", kop("elementwise", variant="relu", elements=B * fout, direction="bwd"))
            if cross_end(i):  # grads of x0 * y + x: to y, to x0 (accumulated) and through the skip
                g.kernel(r, f"{name} bwd cross", kop("elementwise", variant="mul", elements=B * fout, n_inputs=3,
                                                      n_outputs=2, flops_per_element=3, direction="bwd"))
            if i > 0:  # the first bottom layer's input is data: no dgrad
                g.kernel(r, f"{name} bwd dgrad", kop("gemm", b=1, m=B, n=fin, k=fout, direction="bwd"))
            wgrad[r] = g.kernel(r, f"{name} bwd wgrad", kop("gemm", b=1, m=fout, n=fin, k=B, direction="bwd"))
            charge(r, hops["backward_per_layer"])
        pending.append(wgrad)
        pending_bytes += (fin * fout + config.layer_bias(name, fout)) * eb
        flush()
        if i == n_bottom:  # interaction backward, then the data-parallel tables
            for r in all_ranks:
                if config.interaction == "dot":
                    g.kernel(r, "interaction bwd tril+cat", copy(B * config.interaction_features, "bwd"))
                    g.kernel(r, "interaction bwd bmm", kop("bmm", b=B, m=F, n=d_out, k=F, direction="bwd"))
                    g.kernel(r, "interaction bwd bmm 2", kop("bmm", b=B, m=F, n=d_out, k=F, direction="bwd"))
                    charge(r, hops["backward_dot"])
                inter_bwd[r] = g.kernel(r, "interaction bwd split", copy(B * (d_out + emb_cols), "bwd"))
                if "per-table view gradients" in work:
                    inter_bwd[r] = view_gradients(r)
            dp_tables_backward()
    flush(force=True)

    # ---- embedding gradients go home (transposed exchanges), sparse backward of the sharded tables ----------
    # (autograd reaches them after the whole DDP module: ranks do not meet again until the next iteration)
    a2a_bwd: dict[int, int] = {}
    ag: dict[int, int] = {}
    if R > 1 and has_sharded:
        g.phase = "exchange_bwd"
        if has_rw:
            ag = coll("row_wise all_gather", cop("all_gather", vol.row_wise_bytes, R),
                      deps={r: [inter_bwd[r]] for r in all_ranks})
        sizes = CommVolumes.a2a_size(vol.output_recv, vol.output_send, R)
        if sizes.max() > 0:
            a2a_bwd = a2a("embedding grad all_to_all", sizes, deps={r: [inter_bwd[r], ag.get(r)] for r in all_ranks})
        g.phase = "backward"
    elif one_rank and a2a_cols[0] > 0:
        g.phase = "exchange_bwd"
        g.add(0, HOST, "launch embedding grad all_to_all (one rank)", kind="cpu", overhead="collective_launch")
        a2a_bwd[0] = g.kernel(0, "embedding grad all_to_all (local copy)", copy(B * a2a_cols[0]),
                              deps=[inter_bwd[0]])
        g.phase = "backward"
        a2a_bwd[0] = g.kernel(0, "output_dist pack bwd", copy(B * a2a_cols[0]))
    if mp_bottom:  # the model-parallel bottom MLP gets its output gradient from the all-to-all
        prev = [n for n in (a2a_bwd.get(0),) if n is not None]
        for i in range(n_bottom - 1, -1, -1):
            name, fin, fout = layers[i]
            g.kernel(0, f"{name} bwd relu (global batch)",
                     kop("elementwise", variant="relu", elements=Bb * fout, direction="bwd"), deps=prev)
            prev = []
            if i > 0:
                g.kernel(0, f"{name} bwd dgrad (global batch)", kop("gemm", b=1, m=Bb, n=fin, k=fout, direction="bwd"))
            g.kernel(0, f"{name} bwd wgrad (global batch)", kop("gemm", b=1, m=fout, n=fin, k=Bb, direction="bwd"))
    for r in all_ranks:
        arrived = [n for n in (a2a_bwd.get(r), ag.get(r)) if n is not None]
        if "row-wise view gradients" in work and R > 1 and has_rw:
            arrived = [owner_view_gradients(r, ag.get(r)), *arrived]
        if cast_outputs and pooled[r] > 0:
            arrived = [g.kernel(r, f"embedding grad cast ({dt} -> {lo_dt})", cast(pooled[r], "bwd"), deps=arrived)]
        for grp in groups[r]:
            if grp["sharded"]:  # the profiled row includes an SGD update: only the backward share here
                # (the gradient it forms is in GPU memory: no host traffic, wherever the weights are)
                g.kernel(r, f"embedding bwd ({grp['num_tables']} tables, dim {grp['embedding_dim']})",
                         emb(grp, "bwd", "sparse_sgd"),
                         deps=arrived,
                         scale=1.0 - SPARSE_SGD_UPDATE_SHARE)
                charge(r, hops["backward_per_group"])

    # ---- optimizer: sparse update of the sharded tables, then the dense step over every DDP parameter -------
    g.phase = "optimizer"
    def dense_tensors(r: int) -> list[float]:
        mine = [lay for i, lay in enumerate(layers) if not (mp_bottom and i < n_bottom and r not in bottom_ranks)]
        return ([float(fin * fout) for _, fin, fout in mine]
                + [float(b) for name, _, fout in mine if (b := config.layer_bias(name, fout))])

    hot_total: dict[int, float] = {}  # per rank: a GPU coalesce's hottest-row sums (sparse Adagrad)
    for r in all_ranks:
        step = g.add(r, HOST, "optimizer.step", kind="cpu", overhead="optimizer_step")
        charge(r, hops["optimizer"])
        deps = [ar[r] for ar in allreduces if r in ar]
        dense_params = dense_tensors(r)
        params = dense_params + [float(grp["num_tables"] * grp["num_embeddings"] * grp["embedding_dim"])
                                 for grp in groups[r] if not grp["sharded"]]
        # a replicated table's weights (and gradient) are in the tables' dtype, not the dense layers' (mixed
        # precision with FP32 tables: the step moved half the bytes it does)
        param_dtypes = [dt] * len(dense_params) + [emb_dt] * (len(params) - len(dense_params))
        if config.grad_scaler:
            # GradScaler: the dense (FP32 master) gradients unscaled and checked in one multi-tensor pass, the
            # found-inf flag read back by the host (scaler.step), then every sparse gradient's values unscaled
            unscaled = g.kernel(r, "GradScaler unscale (dense gradients)",
                                kop("elementwise", variant="scale_", dtype="fp32", elements=_round(sum(params))),
                                deps=deps, host_deps=[step])
            step = g.add(r, HOST, "GradScaler found_inf to host (.item(): waits for the GPU)", kind="cpu",
                         overhead="kernel_launch", deps=[unscaled])
            for grp in groups[r]:
                if grp["sharded"]:
                    values = grp["batch_size"] * grp["pooling_factor"] * grp["num_tables"] * grp["embedding_dim"]
                    g.kernel(r, "GradScaler unscale (embedding gradient values)",
                             kop("elementwise", variant="scale_", dtype=emb_dt, elements=_round(values)),
                             host_deps=[step])  # gradient values: GPU memory wherever the weights are
        for grp in groups[r]:
            if not grp["sharded"]:
                continue
            if config.optimizer == "sgd":  # weight.add_(sparse grad): the update share of the profiled row
                # in host memory each touched row is read and written over the link (the fixed part is scaled
                # with the op: given over the share, it is charged once)
                done = g.kernel(r, "embedding sgd update", emb(grp, "bwd", "sparse_sgd"), deps=deps,
                                host_deps=[step], scale=SPARSE_SGD_UPDATE_SHARE,
                                duration_us=host_us(grp, grp["unique_rows"], host_update_passes("sgd"))
                                / SPARSE_SGD_UPDATE_SHARE)
                charge(r, hops["sparse_sgd_per_group"])
            else:  # coalesce (like the index-add of the backward) + dense Adagrad math over the coalesced rows
                # the coalesce sorts and sums the sparse gradient, in GPU memory wherever the weights are
                done = g.kernel(r, f"embedding {config.optimizer} coalesce", emb(grp, "bwd", "sparse_sgd"), deps=deps,
                                host_deps=[step], scale=ADAGRAD_COALESCE_SCALE)
                if "sparse coalesce host waits" in work:  # the sort's unique-row count read back by the host
                    step = g.add(r, HOST, "sparse grad coalesce: unique rows to host (waits for the GPU)",
                                 kind="cpu", overhead="kernel_launch", deps=[done])
                # then, queued behind it, the values kernel's warp that sums the hottest row's duplicates
                hot_us = grp["hottest_row_lookups"] * COALESCE_US_PER_DUPLICATE.get(target.device.kind, 0.0)
                hot_total[r] = hot_total.get(r, 0.0) + hot_us
                if hot_us > 0:  # (part of the values kernel: no launch of its own)
                    g.add(r, COMPUTE_STREAM, f"embedding {config.optimizer} coalesce: hottest row's duplicates "
                          "summed serially", duration_us=_round(hot_us), deps=[step])
                # weights and accumulators of the touched rows read and written (host memory: over the link)
                done = g.kernel(r, f"embedding {config.optimizer} update", kop(
                    "elementwise", variant=config.optimizer, dtype=emb_dt,
                    elements=_round(grp["unique_rows"] * grp["embedding_dim"])),
                    duration_us=host_us(grp, grp["unique_rows"], host_update_passes(config.optimizer)),
                    host_deps=[step])
            if config.optimizer == "sgd" and "sparse coalesce host waits" in work:
                # SGD's sparse add coalesces the gradient first too: its unique-row count read back by the host
                step = g.add(r, HOST, "sparse grad coalesce: unique rows to host (waits for the GPU)", kind="cpu",
                             overhead="kernel_launch", deps=[done])
            if config.optimizer != "sgd":  # Adagrad's Python-level sparse math runs once the coalesce has returned
                charge(r, hops["sparse_adagrad_per_group"])
        for j, (n, p_dt) in enumerate(zip(params, param_dtypes, strict=True)):
            g.kernel(r, "dense optimizer step", kop("elementwise", variant=config.optimizer, elements=_round(n),
                                                    dtype=p_dt),
                     deps=deps if j == 0 else (), host_deps=[step] if j == 0 else ())
            if j == 0:  # the multi-tensor (foreach) step a GPU runs over every dense parameter
                charge(r, hops["dense_sgd_foreach"] if config.optimizer == "sgd" else
                       hops["dense_adagrad_foreach"] + hops["dense_adagrad_per_param"] * len(params))
    if host_model:
        g.price_host_by_ops(host_at)
    info = {"buckets": len(allreduces), "pieces": len(pieces),
            "streams": [HOST, COMPUTE_STREAM, COMM_STREAM] + [INPUT_DIST_STREAM] * prefetch,
            "comm_overlap": overlap, "overlap_iterations": bool(overlap_iterations), "prefetch_input_dist": prefetch,
            "host_pieces": sum(p.host for p in pieces), "bottom_mlp_model_parallel": mp_bottom,
            # where the collectives are priced, and what to know about it (a bare CPU device: its gloo system)
            "collective_system": coll_system, "notes": [n for n in (coll_note, host_note, _hot_note(hot_total)) if n]}
    return DLRMIteration(g, config, plan, target, vol, pieces, info)
