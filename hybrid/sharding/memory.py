"""GPU memory per rank of a sharded DLRM training job, and the fit check that rejects plans.

Per rank: embedding shards (+ optimizer state: adagrad keeps one accumulator per weight, doubling it; data-
parallel tables also hold a dense gradient), MLP parameters + gradients + optimizer state + DDP bucket copies,
activations kept for backward, all-to-all send/receive buffers, lookup indices, and a fixed runtime reserve
(CUDA context, NCCL buffers, allocator fragmentation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hybrid.errors import InvalidInputError
from hybrid.sharding.plan import ShardingPlan
from hybrid.units import format_bytes
from hybrid.workloads.dlrm import DLRMConfig

if TYPE_CHECKING:
    from hybrid.hardware.catalog import Catalog

# Empirical constants: CUDA context + cuBLAS/NCCL workspaces ~1.5 GiB per process; the caching allocator loses
# a few percent to fragmentation.
RUNTIME_RESERVE_BYTES = 1.5 * 2**30
FRAGMENTATION = 0.05
#: Activation copies per MLP output kept for backward (pre- and post-activation).
ACTIVATION_COPIES = 2.0

#: Share of a node's host memory that embedding tables placed there may take (``embedding_placement`` host/auto):
#: the rest is the OS, the data pipeline and pinned staging buffers (a judgement, not a measurement).
HOST_EMBEDDING_SHARE = 0.8

#: Where a fit error sends the user for plans the table-wise baselines do not make (row-/column-wise splits, tables
#: spread over nodes): outside ``hybrid shard`` (``hybrid simulate``'s default plan, ``hybrid bench``, the library)
#: the command that searches them; inside it, :func:`hybrid.sharding.search.search_plans` names its own strategies
#: instead (:func:`hybrid.sharding.search.strategies_hint`).
SHARD_HINT = "`hybrid shard` searches them"

MEMORY_COLUMNS = ("rank", "embeddings", "embedding_optimizer", "dense", "activations", "comm_buffers", "indices",
                  "reserve", "total", "capacity", "host_embeddings", "host_fits", "fits")


@dataclass
class MemoryReport:
    """Bytes per rank by category, the device capacity and whether every rank fits."""

    per_rank: pd.DataFrame  # MEMORY_COLUMNS
    capacity: float
    #: host memory per node (bytes; 0 = not stated by the catalog: host placements unchecked) and GPUs per node
    host_capacity: float = 0.0
    gpus_per_node: int = 8
    #: where ``host_capacity`` comes from (:meth:`hybrid.hardware.device.System.host_mem_origin`, or
    #: ``"override"``): kind ``stated`` / ``borrowed`` / ``override`` / ``unstated``, and a note saying which source
    host_source: str = "unstated"
    host_source_note: str = ""
    #: where :attr:`reason` sends the user for other plans (:data:`SHARD_HINT`; "" inside ``hybrid shard``, which
    #: shows the other plans it made)
    other_plans: str = SHARD_HINT
    #: what the ``embedding_optimizer`` column holds, as :attr:`reason` names it (adagrad's accumulators, the dense
    #: gradients of data-parallel tables, or both; SGD keeps no optimizer state)
    embedding_optimizer_label: str = "optimizer state"

    @property
    def fits(self) -> bool:
        return bool(self.per_rank["fits"].all())

    @property
    def host_per_node(self) -> np.ndarray:
        """Bytes of embedding tables (weights and optimizer state) each node holds in host memory, node 0 first."""
        if "host_embeddings" not in self.per_rank.columns:
            return np.zeros(0)
        node = self.per_rank["rank"].to_numpy() // self.gpus_per_node
        return np.bincount(node, weights=self.per_rank["host_embeddings"].to_numpy(dtype=np.float64))

    @property
    def peak(self) -> float:
        return float(self.per_rank["total"].max())

    @property
    def reason(self) -> str:
        """Why the plan does not fit ("" if it does): the worst rank and what fills it."""
        if self.fits:
            return ""
        per_node = self.host_per_node
        over = (per_node > HOST_EMBEDDING_SHARE * self.host_capacity if self.host_capacity > 0
                else np.zeros(len(per_node), dtype=bool))  # host memory not stated: not checked
        if over.any() and (self.per_rank["total"] <= self.capacity).all():
            worst = int(np.argmax(per_node))
            where = f" ({self.other_plans})" if self.other_plans else ""
            # on one node there is no other node to spread them to
            spread = f"a plan that spreads the tables over the nodes{where}, " if len(per_node) > 1 else ""
            return (f"node {worst}'s host memory would hold {format_bytes(per_node[worst])} of embedding tables "
                    f"(weights and optimizer state placed there), more than {HOST_EMBEDDING_SHARE:.0%} of its "
                    f"{format_bytes(self.host_capacity)} (source: {self.host_source_note}); {int(over.sum())} of "
                    f"{len(per_node)} node(s) do not fit: "
                    f"{spread}more nodes, smaller tables, or fewer tables in host memory")
        row = self.per_rank.loc[self.per_rank["total"].idxmax()]
        over = int((~self.per_rank["fits"]).sum())
        # the rest of the total (MLPs, communication buffers, indices, fragmentation, runtime reserve): the parts
        # named add up to what the rank needs
        other = max(float(row["total"] - row["embeddings"] - row["embedding_optimizer"] - row["activations"]), 0.0)
        return (f"rank {int(row['rank'])} needs {format_bytes(row['total'])} > {format_bytes(self.capacity)} device "
                f"memory (embeddings {format_bytes(row['embeddings'])} + {self.embedding_optimizer_label} "
                f"{format_bytes(row['embedding_optimizer'])} + activations {format_bytes(row['activations'])} + other "
                f"{format_bytes(other)}); {over} of {len(self.per_rank)} ranks do not fit")

    def host_memory_summary(self) -> dict[str, Any] | None:
        """What each node's host memory holds of the tables placed there and the check of it (None when no table
        is in host memory): bytes per node, the node's host memory and the share of it the tables may take
        (``usable_per_node_bytes`` = :data:`HOST_EMBEDDING_SHARE` x capacity; both None when unstated: not
        checked), whether each node fits, and where the capacity figure comes from (``source``, ``source_note``).
        The one presentation ``hybrid simulate`` and ``hybrid shard`` give."""
        per_node = self.host_per_node
        if not per_node.sum() > 0:
            return None
        cap = self.host_capacity if self.host_capacity > 0 else None
        usable = HOST_EMBEDDING_SHARE * cap if cap else None
        fits = [bool(usable is None or b <= usable) for b in per_node]
        return {"per_node_bytes": [float(x) for x in per_node], "capacity_per_node_bytes": cap,
                "usable_share": HOST_EMBEDDING_SHARE, "usable_per_node_bytes": usable, "checked": cap is not None,
                "fits_per_node": fits, "fits": all(fits), "source": self.host_source,
                "source_note": self.host_source_note}

    def to_dict(self) -> dict:
        return {"fits": self.fits, "capacity": self.capacity, "host_capacity_per_node": self.host_capacity,
                "peak": self.peak, "reason": self.reason,
                "per_rank": [{k: (int(v) if k == "rank" else bool(v) if k in ("fits", "host_fits") else float(v))
                              for k, v in r.items()} for r in self.per_rank.to_dict(orient="records")]}


def table_bytes(config: DLRMConfig) -> np.ndarray:
    """Bytes of every table (weights only, in the tables' own dtype), in config order."""
    eb = config.embedding_dtype_bytes
    return np.array([float(t.num_embeddings) * t.embedding_dim * eb for t in config.tables])


def optimizer_multiplier(config: DLRMConfig) -> float:
    """Weights + optimizer state per weight byte (1 for plain SGD, 2 for adagrad)."""
    return 2.0 if config.optimizer == "adagrad" else 1.0


def dense_rank_bytes(config: DLRMConfig) -> tuple[float, float]:
    """(dense model state, activations) every rank holds whatever the plan, in bytes.

    Dense state: MLP parameters, gradients, optimizer state and DDP bucket copies. Activations: MLP outputs of
    the local batch kept for backward, the interaction's inputs/outputs and the received pooled embeddings.
    """
    eb = config.dtype_bytes
    B = config.batch_size_per_gpu
    dense = config.dense_params() * eb * (2.0 + optimizer_multiplier(config))
    widths = sum(o for _, _, o in config.mlp_layers()) + config.dense_features
    F = config.num_tables + 1
    inter = B * (F * config.bottom_mlp[-1] + (F * F if config.interaction == "dot" else 0)
                 + config.interaction_features)
    received = B * sum(t.embedding_dim for t in config.tables) * 2.0  # pooled embeddings + their gradients
    return dense, (B * widths * ACTIVATION_COPIES + inter + received) * eb


def fixed_rank_bytes(config: DLRMConfig) -> float:
    """Plan-independent memory of one rank (dense state, activations, runtime reserve), in bytes."""
    dense, acts = dense_rank_bytes(config)
    return dense + acts + RUNTIME_RESERVE_BYTES


def check_host_mem(value: Any, option: str = "host_mem_per_node") -> float:
    """A host memory per node given by a user (``option`` names it in the error): a finite number > 0, else
    :class:`InvalidInputError`."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if isinstance(value, bool) or not (math.isfinite(v) and v > 0):
        raise InvalidInputError(f"{option} must be a finite number > 0 (host memory per node), got {value!r}")
    return v


def memory_per_rank(config: DLRMConfig, plan: ShardingPlan, capacity: float | None = None, *,
                    host_mem_per_node: float | None = None, catalog: Catalog | None = None) -> MemoryReport:
    """Memory of every rank under ``plan``; ``capacity`` (bytes) defaults to the config system's device.

    ``catalog`` resolves the config's system (default: the packaged catalog plus ``$HYBRID_CATALOG``); pass the
    cost model's (:func:`hybrid.engine.costs.model_catalog`) where the system is one only a calibrated model's
    profile bundle describes (``cpu-...-gloo``), as the graph builder is given it.

    Tables placed in host memory must fit :data:`HOST_EMBEDDING_SHARE` of their node's host memory: the catalog's
    figure for the config's system as named (:meth:`hybrid.hardware.device.System.host_mem_origin`: a datasheet,
    or borrowed from another system's), or ``host_mem_per_node`` bytes where given (a user override, finite > 0;
    ``hybrid simulate/shard --host-mem-gib``)."""
    if host_mem_per_node is not None:
        host_mem_per_node = check_host_mem(host_mem_per_node)
    from hybrid.hardware.catalog import default_catalog
    from hybrid.workloads.dlrm_graph import comm_volumes, place_pieces, resolve_target, shard_pieces

    R, eb, teb = config.gpus, config.dtype_bytes, config.embedding_dtype_bytes
    catalog = catalog if catalog is not None else default_catalog()
    target = resolve_target(config.system, catalog)
    device = target.device
    system = catalog.systems.get(target.system)
    # pieces placed in host memory (embedding_placement host/auto) hold no GPU memory for weights or state
    pieces = place_pieces(config, shard_pieces(config, plan), device)
    host_emb = np.zeros(R)
    emb = np.zeros(R)
    emb_opt = np.zeros(R)
    acts_emb = np.zeros(R)
    indices = np.zeros(R)
    mult = optimizer_multiplier(config)
    for p in pieces:
        if p.host:  # its weights and optimizer state in the host memory of the rank's node
            host_emb[p.rank] += float(p.rows) * p.dim * teb * mult
        w = 0.0 if p.host else float(p.rows) * p.dim * teb
        emb[p.rank] += w
        # adagrad state; data-parallel tables also keep a dense gradient of the full table
        emb_opt[p.rank] += w * (mult - 1.0) + (w if p.type == "data_parallel" else 0.0)
        acts_emb[p.rank] += p.batch * p.dim * eb * 2.0  # pooled outputs + their gradients
        indices[p.rank] += p.batch * p.pooling * 8.0
    vol = comm_volumes(config, pieces)
    comm = 2.0 * (vol.output_send + vol.output_recv + vol.input_send + vol.input_recv) + 2.0 * vol.row_wise_bytes
    dense, acts_dense = dense_rank_bytes(config)
    acts = acts_emb + acts_dense
    if config.bottom_mlp_placement == "model_parallel" and R > 1 and any(p.type != "data_parallel" for p in pieces):
        # as the graph runs it (hybrid.workloads.dlrm_graph): rank 0 runs the bottom MLP on the global batch, the
        # others none; dense_rank_bytes kept every rank's local batch of it
        bottom = (sum(config.bottom_mlp) + config.dense_features) * ACTIVATION_COPIES * eb * config.batch_size_per_gpu
        acts[0] += bottom * (R - 1)
        acts[1:] -= bottom
    if capacity is None:
        capacity = device.mem_capacity
    reserve = np.full(R, RUNTIME_RESERVE_BYTES)
    total = (emb + emb_opt + dense + acts + comm + indices) * (1.0 + FRAGMENTATION) + reserve
    if host_mem_per_node is not None:
        host_cap, source, note = host_mem_per_node, "override", "user override, --host-mem-gib"
    elif system is not None:
        host_cap = float(system.host_mem)
        source, note = system.host_mem_origin(config.system)
    else:
        host_cap, source = 0.0, "unstated"
        note = f"{target.system} is a device, not a catalog system: its host memory is not stated, not checked"
    report = MemoryReport(pd.DataFrame({
        "rank": np.arange(R), "embeddings": emb, "embedding_optimizer": emb_opt, "dense": np.full(R, dense),
        "activations": acts, "comm_buffers": comm, "indices": indices, "reserve": reserve, "total": total,
        "capacity": np.full(R, float(capacity)), "host_embeddings": host_emb}), float(capacity), host_cap,
        int(target.gpus_per_node), source, note)
    label = [*(["optimizer state"] if mult > 1 else []),
             *(["data-parallel table gradients"] if any(p.type == "data_parallel" and not p.host for p in pieces)
               else [])]
    report.embedding_optimizer_label = " and ".join(label) or "optimizer state"
    # a rank fits when its GPU holds its share and its node's host memory what the node's ranks placed there
    node_fits = (report.host_per_node <= HOST_EMBEDDING_SHARE * host_cap if host_cap > 0
                 else np.ones(len(report.host_per_node), dtype=bool))
    report.per_rank["host_fits"] = node_fits[np.arange(R) // report.gpus_per_node]
    report.per_rank["fits"] = (total <= capacity) & report.per_rank["host_fits"].to_numpy()
    return report


def table_placement_bytes(config: DLRMConfig, host_weights: bool = False) -> np.ndarray:
    """Per table, the memory it adds to the rank holding it table-wise (weights, optimizer state, outputs).

    Includes the pooled outputs of the global batch and their gradients, the all-to-all buffers for them and the
    lookup indices; scaled by the allocator fragmentation factor. ``host_weights``: the weights and their optimizer
    state live in host memory (``embedding_placement`` host/auto), so only the rest takes GPU memory.
    """
    eb = config.dtype_bytes
    Bg = config.global_batch
    weights = 0.0 if host_weights else table_bytes(config) * optimizer_multiplier(config)
    dims = np.array([t.embedding_dim for t in config.tables], dtype=np.float64)
    pooling = np.array([t.pooling_factor for t in config.tables])
    outputs = Bg * dims * eb * (2.0 + 4.0)  # outputs + grads, fwd/bwd send/recv buffers
    indices = Bg * pooling * 8.0 * 3.0
    return (weights + outputs + indices) * (1.0 + FRAGMENTATION)


def tablewise_budget(config: DLRMConfig, capacity: float | None = None) -> float:
    """Bytes a rank can give to table-wise placed tables: capacity minus plan-independent memory."""
    if capacity is None:
        from hybrid.hardware.catalog import default_catalog
        from hybrid.workloads.dlrm_graph import resolve_target

        capacity = resolve_target(config.system, default_catalog()).device.mem_capacity
    dense, acts = dense_rank_bytes(config)
    return float(capacity) - RUNTIME_RESERVE_BYTES - (dense + acts) * (1.0 + FRAGMENTATION)
