"""LLM inference: prefill and decode op graphs, costed in one batched predictor call; static batching.

A forward pass over ``T`` new tokens of ``B`` sequences is one transformer layer's ops (per tensor-parallel rank,
exact shapes after the split) times the layers of a pipeline stage, plus the embedding, final norm, output
layer and sampling:

====================================  ==============================================================================
``input_layernorm``                   RMSNorm/LayerNorm over ``[T, h]``
``attn_pre_proj``                     QKV GEMM ``[T, h] x [h, (q + 2 kv) d / tp]`` (GEMV in decode at batch 1)
``attn_rope``                         rotary embedding of q and k (GPT-J rotates a quarter of each head)
``attention``                         fused attention: prefill causal ``q_len = kv_len = input`` (FlashAttention),
                                      decode ``q_len = 1`` over the KV cache (paged/XQA style), GQA/MQA
``attn_post_proj``                    output projection ``[T, q d / tp] x [q d / tp, h]``
``tp_all_reduce``                     TP all-reduce of ``[T, h]`` (one per layer for parallel attention+MLP blocks)
``post_attention_layernorm``, ``add`` second norm and residual adds
``mlp_up_proj``, ``mlp_act``,         MLP (gated SwiGLU or GeLU); MoE: router GEMM, then the active experts as a
``mlp_down_proj``                     batched GEMM (expected distinct experts for ``T x top-k`` routed tokens)
``embedding``, ``final_layernorm``,   once per pass: embedding gather (``embedding_all_reduce``: the TP sum of a
                                      vocab-parallel table's lookups), the final norm (every token of the pass: engines
                                      normalise the whole hidden state, then pick the last tokens), vocab-parallel output
``lm_head``, ``logits_all_gather``,   GEMM, the TP gather of logits and a softmax/top-k over the vocabulary
``sampling``, ``pp_send_recv``        (``pp_send_recv`` between pipeline stages)
====================================  ==============================================================================

Every op row goes to the cost model (``HybridPredictor``, or the roofline when none is given) in one call for a
whole prediction (prefill plus a grid of decode context lengths). Weight-only formats and a KV cache in another
dtype than the compute dtype change the bytes an op moves, not its FLOPs: the predicted time of the 16-bit op is
scaled by the byte ratio, but never below the op's compute time. Static batching (vendor benchmark tables): the
whole batch is prefilled at once (time to first token), then ``output - 1`` decode steps at growing context;
throughput = ``batch x output / latency / GPUs``. Pipeline parallelism splits the batch into ``pp`` microbatches.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hybrid.corrections.collective_transfer import intra_class, intra_fabric_constants
from hybrid.engine.costs import (
    KernelTimeModel,
    OpCostModel,
    default_cost_model,
    integral_shapes,
    model_catalog,
    predict_bounds,
)
from hybrid.engine.form_error import e2e_interval
from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import Catalog, default_catalog
from hybrid.hardware.device import Device, System, pair_bridge_bw
from hybrid.ops.p2p_allreduce import p2p_allreduce_us, trtllm_strategy
from hybrid.ops.roofline import resolve_system, roofline, softmax_schedule, system_for_device
from hybrid.workloads.llm.config import group_nodes
from hybrid.workloads.llm.dims import context_note, resolve_model
from hybrid.workloads.llm.kv_cache import (
    DEFAULT_RESERVE_GIB,
    MemoryPlan,
    attended_keys,
    check_parallel,
    kv_heads_per_rank,
    memory_plan,
    memory_table,
)
from hybrid.workloads.llm.layer_ops import MLP_OPS, forward_layer_ops
from hybrid.workloads.llm.model import TransformerConfig
from hybrid.workloads.llm.precision import Precision, checkpoint_precision, parse_precision

#: Columns of the op table the cost model sees (the canonical measurement-table columns).
COST_COLUMNS = ("device", "op", "dtype", "variant", "b", "m", "n", "k", "elements", "rows", "hidden", "batch",
                "heads", "kv_heads", "q_len", "kv_len", "head_dim", "causal", "softmax_overlap", "size_bytes",
                "n_ranks", "n_nodes", "system")
#: Decode attention kernels (see :attr:`InferenceSetup.attention_kernel`).
ATTENTION_KERNELS = ("grouped", "per_query_head")
#: Tensor-parallel all-reduce implementations (see :attr:`InferenceSetup.allreduce`).
ALLREDUCE_KINDS = ("nccl", "custom")
#: GEMMs that stay 16-bit in fp8, fp4 and weight-only int8 / int4 / fp4 deployments: the output layer, which
#: NVIDIA ModelOpt's quantisation configs (TensorRT-LLM's FP8, INT4-AWQ and NVFP4 checkpoints) and vLLM's AWQ,
#: GPTQ and FP8 methods leave unquantised (a 128k-vocabulary head is 1 GB of Llama-3-8B's weights in 16 bit; read
#: as int4 it was a quarter of that, and decode at batch 1 about 12% fast). Its weights, inputs and outputs are
#: 16-bit (:func:`hybrid.workloads.llm.kv_cache.weight_bytes_per_gpu` counts it so too).
HEAD_16BIT = ("lm_head",)
#: Ops that run once per forward pass (not per layer).
PASS_OPS = ("embedding", "embedding_all_reduce", "position_embedding", "final_layernorm", "lm_head",
            "logits_all_gather", "sampling", "pp_send_recv")
#: Op categories of the breakdown.
CATEGORIES = ("gemm", "attention", "moe", "norm", "elementwise", "comm", "lm_head", "sampling", "pipeline")


@dataclass(frozen=True)
class InferenceSetup:
    """Model, hardware, precision and parallelism of one deployment (one model replica)."""

    model: TransformerConfig
    device: Device
    system: System
    precision: Precision
    tp: int = 1
    pp: int = 1
    reserve_gib: float = DEFAULT_RESERVE_GIB
    #: decode attention over the KV cache: ``grouped`` (FlashDecoding / TensorRT-LLM XQA / vLLM paged attention
    #: read each KV head once for its group of query heads) or ``per_query_head`` (masked-MHA kernels run one
    #: thread block per query head; the blocks of one KV group run side by side, so a KV head comes from DRAM once
    #: but through L2 once per query head: the step costs the larger of its DRAM roofline and that L2 traffic at
    #: the device's L2 bandwidth, :meth:`~hybrid.hardware.device.Device.l2_bandwidth`)
    attention_kernel: str = "grouped"
    #: rotary embedding applied inside the attention kernels (TensorRT-LLM's gpt_attention plugin rotates q and k
    #: in its QKV pre-processing / masked-MHA kernels) instead of a separate elementwise kernel (PyTorch, Vidur)
    fused_rope: bool = False
    #: tensor-parallel all-reduce: ``nccl`` (the collective model) or ``custom`` (TensorRT-LLM's / vLLM's one-shot
    #: and two-shot kernels over NVLink inside one node, :mod:`hybrid.ops.p2p_allreduce`; larger messages, other
    #: fabrics and multi-node groups stay on NCCL)
    allreduce: str = "nccl"
    #: the catalog the device came from (devices added by the user, or what-if variants, are costed from it)
    catalog: Catalog | None = field(default=None, compare=False, repr=False)
    #: expert parallelism of an MoE model inside the TP group (TensorRT-LLM's / vLLM's ``moe_ep_size``; the experts'
    #: own TP is ``tp / ep``): each rank holds ``num_experts / ep`` whole-width-``tp / ep`` experts and all tokens, so
    #: the weights per GPU and the collectives are those of TP; the expert GEMMs are fewer and wider
    ep: int = 1
    #: attention data parallelism (TensorRT-LLM's ``enable_attention_dp``, SGLang's DP attention): every TP rank runs
    #: attention and the dense layers whole on its own ``batch / tp`` requests (its own KV cache, no replication),
    #: the routed experts are spread over the ranks (``ep = tp``) and tokens reach them by all-to-all
    attention_dp: bool = False
    #: how the fused attention kernels schedule the softmax's exps (``softmax_overlap`` of their rows: 0 in series,
    #: 1 overlapped, None = by GPU generation), :func:`hybrid.ops.roofline.softmax_schedule`
    softmax_overlap: float | None = None
    #: how the precision was chosen when the user named none (a quantised checkpoint's format), for the notes
    precision_note: str = ""
    #: the input embedding table split over the TP ranks (vocab-parallel, as vLLM and SGLang build it) or whole on
    #: every rank (False: TensorRT-LLM engines built without ``use_parallel_embedding``, its benchmark builds' and
    #: example converters' default), :func:`~hybrid.workloads.llm.kv_cache.weight_bytes_per_gpu`
    parallel_embedding: bool = True

    def __post_init__(self) -> None:
        if self.attention_kernel not in ATTENTION_KERNELS:
            raise InvalidInputError(f"attention_kernel must be one of {ATTENTION_KERNELS}, got {self.attention_kernel!r}")
        if self.allreduce not in ALLREDUCE_KINDS:
            raise InvalidInputError(f"allreduce must be one of {ALLREDUCE_KINDS}, got {self.allreduce!r}")
        if not (isinstance(self.reserve_gib, numbers.Real) and math.isfinite(self.reserve_gib)
                and self.reserve_gib >= 0):
            # checked here, not only in the memory plan: continuous batching sizes its KV cache from it directly
            raise InvalidInputError(f"reserve must be a finite number >= 0 GiB, got {self.reserve_gib!r}")
        if not isinstance(self.ep, int) or self.ep < 1:
            raise InvalidInputError(f"ep must be a positive integer, got {self.ep!r}")
        if self.ep > 1:
            if not self.model.is_moe:
                raise InvalidInputError(f"ep = {self.ep} needs a mixture-of-experts model; {self.model.name} has none")
            if self.tp % self.ep:
                raise InvalidInputError(f"ep = {self.ep} must divide tp = {self.tp} (experts are spread over the TP "
                                        "ranks, tp / ep ways each)")
            if int(self.model.num_experts) % self.ep:  # type: ignore[arg-type]
                raise InvalidInputError(f"ep = {self.ep} must divide the {self.model.num_experts} experts of "
                                        f"{self.model.name}")
        if self.attention_dp and (not self.model.is_moe or self.tp < 2 or self.ep != self.tp):
            raise InvalidInputError("attention data parallelism needs a mixture-of-experts model with tp > 1 and "
                                    f"ep = tp (the experts spread over the ranks); got {self.model.name}, "
                                    f"tp = {self.tp}, ep = {self.ep}")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    def deployment_notes(self) -> list[str]:
        """What the deployment implies that a user may not have meant: a device other than the system's own GPU
        (costed on that system's fabric) and tensor parallelism across nodes (its all-reduces cross the NICs)."""
        notes = [self.precision_note] if self.precision_note else []
        if self.device.key != self.system.device:
            notes.append(f"{self.device.key} on {self.system.key}, whose GPUs are {self.system.device}: costed as "
                         f"{self.device.key} GPUs on {self.system.key}'s fabric ({self.system.intra_fabric} inside a "
                         "node), a what-if, not a shipping system")
        gpn = self.system.gpus_per_node
        if self.tp > gpn:
            notes.append(f"tensor parallelism {self.tp} spans {math.ceil(self.tp / gpn)} nodes of {gpn} GPUs: its "
                         f"all-reduces cross the NICs ({self.system.inter_fabric}) every layer, usually much slower "
                         "than TP inside a node and PP between nodes")
        return notes

    @property
    def layers_per_stage(self) -> int:
        return math.ceil(self.model.num_layers / self.pp)


def make_setup(model: str | TransformerConfig | Any, device: str | None = None, system: str | None = None, *,
               dtype: str | None = None, weights: str | None = None, kv_dtype: str | None = None, tp: int = 1,
               pp: int = 1, reserve_gib: float = DEFAULT_RESERVE_GIB, attention_kernel: str = "grouped",
               fused_rope: bool = False, allreduce: str = "nccl", catalog: Catalog | None = None,
               ep: int = 1, attention_dp: bool = False, softmax: str = "auto",
               parallel_embedding: bool = True) -> InferenceSetup:
    """Resolve names into an :class:`InferenceSetup` (``system`` defaults to the catalog system of ``device``,
    else a generic node of it); checks TP/PP against the model and the dtype against the device. Without ``dtype``
    and ``weights``, a quantised checkpoint (``model.quantization``) is served in its own format
    (:func:`~hybrid.workloads.llm.precision.checkpoint_precision`, said in the notes), anything else in fp16."""
    cat = catalog or default_catalog()
    dims = resolve_model(model)
    if device is None and system is None:
        raise InvalidInputError("give a device or a system")
    if system is not None:
        sys_obj = resolve_system(cat, system)
        dev = cat.device(device) if device is not None else cat.device(sys_obj.device)
    else:
        dev = cat.device(str(device))
        match = [s for s in cat.systems.values() if s.device == dev.key]
        match.sort(key=lambda s: (s.inter_bw <= 0, -s.intra_bw, s.key))  # the vendor's own node first
        sys_obj = match[0] if match else system_for_device(dev)
    if dev.kind != "gpu":
        raise InvalidInputError(f"{dev.key} is not a GPU")
    note = ""
    if dtype is None and weights is None and dims.quantization is not None:
        prec, note = checkpoint_precision(dims.quantization, dims.quantized_kv_cache, dev, kv_dtype)
    else:
        prec = parse_precision(dtype or "fp16", weights, kv_dtype)
    prec.check_device(dev)
    check_parallel(dims, tp, pp)
    if tp * pp > sys_obj.gpus_per_node * sys_obj.max_nodes:
        raise InvalidInputError(f"tp x pp = {tp * pp} GPUs exceeds system {sys_obj.key}")
    # tensor parallelism may span nodes (its all-reduces then cross the NICs: costed with n_nodes > 1)
    return InferenceSetup(dims, dev, sys_obj, prec, tp, pp, reserve_gib, attention_kernel, fused_rope, allreduce, cat,
                          ep, attention_dp, softmax_schedule(softmax), note, parallel_embedding)


# ------------------------------------------------------------------------------------------------ op tables
def _block(size_: int, **cols: Any) -> dict[str, np.ndarray]:
    return {k: (np.asarray(v) if np.ndim(v) else np.full(size_, v, dtype=object if isinstance(v, str) else float))
            for k, v in cols.items()}


def pass_ops(s: InferenceSetup, tokens: np.ndarray, seqs: np.ndarray, q_len: np.ndarray, kv_len: np.ndarray,
             phase: str | np.ndarray = "prefill", names: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Op rows of one forward pass per scenario ``i`` (``tokens[i]`` new tokens of ``seqs[i]`` sequences, each
    with ``q_len[i]`` new and ``kv_len[i]`` attended tokens), on one GPU of the bottleneck pipeline stage.

    Columns: ``scenario``, ``phase``, ``name``, ``category``, ``count`` (how often the op runs per pass: the
    layers of a stage, or 1), ``bytes_actual`` (bytes with the real weight/KV storage) and the cost columns.
    ``names``: only the rows of these ops (the others are not built: a grid of attention shapes, the serving step
    tables, has ten thousand scenarios whose other ops nobody reads).
    """
    m, p, tp = s.model, s.precision, s.tp
    T = np.asarray(tokens, dtype=np.float64)
    B = np.asarray(seqs, dtype=np.float64)
    ep_ranks = 1
    group_tokens = T  # attention data parallelism: the experts route every rank's tokens, idle ranks none
    if s.attention_dp:  # one rank's share of the requests, run whole; only the experts are spread (all-to-all)
        per_seq = T / np.maximum(B, 1.0)
        B = np.ceil(B / tp)
        T = B * per_seq
        ep_ranks, tp = tp, 1
    qn, kvn = np.asarray(q_len, dtype=np.float64), np.asarray(kv_len, dtype=np.float64)
    n_scen = n = len(T)
    if not (len(B) == len(qn) == len(kvn) == n) or n == 0:
        raise InvalidInputError("tokens, seqs, q_len and kv_len must be non-empty and of one length")
    if (T <= 0).any() or (B <= 0).any() or (qn <= 0).any() or (kvn <= 0).any():
        raise InvalidInputError("token and sequence counts must be positive")
    scen = np.arange(n)
    ph = np.broadcast_to(np.asarray(phase, dtype=object), (n_scen,))
    h, d = m.hidden_size, m.head_dim
    qh, kvh = m.num_attention_heads // tp, kv_heads_per_rank(m, tp)
    L = float(s.layers_per_stage)
    cdt = p.compute
    adt = "bf16" if cdt == "bf16" else "fp16"  # activations (norms, adds, rope) in 16 bit
    wb, ab = p.weight_bytes, p.act_bytes
    in_b, out_b = p.gemm_input_bytes, p.gemm_output_bytes
    att_dt = p.attention_dtype
    cb = 1.0 if att_dt == "fp8" else 2.0  # attention's q/k/v element bytes as its op row counts them
    blocks: list[dict[str, np.ndarray]] = []
    p2p_ok = s.allreduce == "custom" and s.device.link_bw > 0 and _all_pairs_nvlink(s.system, tp, s.device)

    def gemm(name: str, cat: str, mm: np.ndarray, nn: float, kk: float, count: float) -> None:
        # the output layer runs in 16 bit whatever the deployment's GEMM format (HEAD_16BIT)
        emit("compute", name, cat, count, "linear", "linear", b=1.0, m=mm, n=nn, k=kk,
             dtype=adt if name in HEAD_16BIT else cdt)

    def elem(name: str, cat: str, elements: np.ndarray, variant: str, count: float) -> None:
        emit("compute", name, cat, count, "elementwise", "same", variant=variant, elements=elements, dtype=adt)

    def norm(name: str, rows: np.ndarray, count: float) -> None:
        emit("compute", name, "norm", count, m.normalization.lower(), "same", rows=rows, hidden=float(h), dtype=adt)

    def coll(name: str, op: str, size: np.ndarray, ranks: int, count: float, category: str = "comm",
             nodes: int | None = None) -> None:
        nodes = max(1, math.ceil(ranks / s.system.gpus_per_node)) if nodes is None else nodes
        emit("tp", name, category, count, op, "same", size_bytes=size, n_ranks=float(ranks), n_nodes=float(nodes),
             dtype=adt, system=s.system.key)

    def emit(part: str, name: str, category: str, count: Any, op: str, bwd: str, bwd_cols: Any = None,
             **cols: Any) -> None:
        """One op row per scenario (count per pass: per-layer ops x the stage's layers), with the bytes the op
        moves in the deployment's weight-only / KV formats (``bytes_actual``) beside the 16-bit row's."""
        del part, bwd, bwd_cols
        if names is not None and name not in names:
            return
        per_layer = name not in PASS_OPS
        cnt = np.broadcast_to(np.asarray(count, dtype=np.float64) * (L if per_layer else 1.0), (n_scen,))
        if op in ("linear", "gemm"):
            mm = np.maximum(np.asarray(cols["m"], dtype=np.float64), 1.0)
            bb = np.asarray(cols.get("b", 1.0), dtype=np.float64)
            weights = 1.0 if op == "linear" else bb  # a grouped GEMM reads each expert's weights
            i_b, o_b, w_b = (ab, ab, ab) if name in HEAD_16BIT else (in_b, out_b, wb)
            cols = {**cols, "m": mm, "b": np.broadcast_to(bb, (n_scen,)),
                    "bytes_actual": bb * (i_b * mm * cols["k"] + o_b * mm * cols["n"])
                    + weights * cols["k"] * cols["n"] * w_b}
        elif op == "elementwise":
            cols = {**cols, "elements": np.maximum(np.asarray(cols["elements"], dtype=np.float64), 1.0)}
        cols.setdefault("bytes_actual", np.nan)
        cols.setdefault("l2_bytes", np.nan)
        # the custom (one-/two-shot) all-reduce runs inside one NVLink node only
        cols["p2p_allreduce"] = float(op == "all_reduce" and p2p_ok and float(cols.get("n_nodes", 1.0)) <= 1.0)
        blocks.append(_block(n_scen, scenario=scen, phase=ph, name=name, category=category, count=cnt, op=op, **cols))

    # ---- one transformer layer (count = layers of the stage): the ops training uses too
    kv_att = attended_keys(m, qn, kvn)  # cached tokens; a chunked model's prefill: its within-chunk pairs
    moe_share = m.num_moe_layers / m.num_layers  # MoE layers among the layers (dense ones: the rest)
    kv_read = np.full(n, float(kvh))  # DRAM reads each cached KV head once per step
    # decode kernels that run one thread block per query head (masked MHA) read a KV head through L2 once per
    # query head (the group's blocks share its DRAM reads in L2)
    masked = (qn <= 1) & (s.attention_kernel == "per_query_head") & (qh > kvh)
    l2_bytes = np.where(masked, B * d * 2.0 * kv_att * qh * p.kv_bytes, np.nan)
    att_d = np.full(n, float(d))
    att_row_bytes = cb * B * d * (2.0 * qn * qh + 2.0 * kv_att * kv_read)
    att_real = B * d * (2.0 * qn * qh * ab + 2.0 * kv_att * kv_read * p.kv_bytes)
    absorb = qn <= 1  # MLA: decode steps attend in the latent space (absorbed), passes with new keys do not
    if m.is_mla:
        rope, kvl = int(m.qk_pos_emb_head_dim), int(m.kv_lora_rank)  # type: ignore[arg-type]
        # one row per pass with the FLOPs of QK^T over the score width and AV over the value width (their mean
        # as head_dim): a prefill pass is multi-head attention over per-head keys (nope + rope) and values; a
        # decode step is multi-query attention of every head over the one cached latent (+ rotary key)
        att_d = np.where(absorb, (2 * kvl + rope) / 2.0, m.attention_head_dim)
        kv_read = np.where(absorb, 1.0, float(qh))
        l2_bytes = np.full(n, np.nan)  # MLA decode reads its one latent per token for every head from DRAM once
        att_row_bytes = cb * B * att_d * (2.0 * qn * qh + 2.0 * kv_att * kv_read)
        # decode reads the latent cache once (kv_lora + rope elements per token) and the queries/outputs of all
        # heads in 16 bit; prefill is counted as its row
        att_real = np.where(absorb, B * (qn * qh * ((kvl + rope) + kvl) * ab + kv_att * (kvl + rope) * p.kv_bytes),
                            att_row_bytes)
    attention = {"batch": B, "heads": float(qh), "kv_heads": kv_read, "q_len": qn, "kv_len": kv_att,
                 "head_dim": att_d, "causal": (qn > 1).astype(float), "dtype": att_dt,
                 "bytes_actual": np.where(np.isclose(att_real, att_row_bytes), np.nan, att_real),
                 "l2_bytes": l2_bytes}
    if s.softmax_overlap is not None:
        attention["softmax_overlap"] = s.softmax_overlap
    if s.attention_dp:  # experts over all the ranks, each with its own tokens: dispatch and combine all-to-alls
        moe_par = {"ep": ep_ranks, "ep_within_tp": False,
                   "ep_nodes": max(1, math.ceil(ep_ranks / s.system.gpus_per_node)),
                   "group_tokens": np.minimum(group_tokens, T * ep_ranks)}
    else:
        moe_par = {"ep": s.ep, "ep_within_tp": True}
    forward_layer_ops(m, emit, tokens=T, tp=tp, gemm_dtype=cdt, act_dtype=adt, act_bytes=ab, attention=attention,
                      tp_nodes=max(1, math.ceil(tp / s.system.gpus_per_node)), system=s.system.key,
                      fused_rope=s.fused_rope, dense_count=1.0 - moe_share, moe_count=moe_share, mla_absorb=absorb,
                      **moe_par)
    if m.is_mla:
        # a prompt chunk after earlier tokens attends over per-head keys and values of its whole context: vLLM's MLA
        # prefill (_compute_prefill_context) gathers the cached prefix's latents and expands them with kv_b_proj
        # too, a GEMM of its own over the prefix tokens (the pass priced only the chunk's own latents)
        nope, v = int(m.qk_head_dim), int(m.v_head_dim)  # type: ignore[arg-type]
        prior = np.where(absorb, 0.0, B * np.maximum(kvn - qn, 0.0))
        gemm("attn_kv_b_proj_context", "gemm", prior, qh * (nope + v), float(m.kv_lora_rank),
             (prior > 0).astype(np.float64))
    # ---- once per pass on the bottleneck stage (pp = 1: both ends)
    elem("embedding", "elementwise", T * h, "copy", 1.0)
    if s.parallel_embedding and tp > 1:
        # a vocab-parallel table (vLLM's VocabParallelEmbedding, TensorRT-LLM's Embedding with a TP group and
        # sharding_dim 0, SGLang alike): each rank looks up the ids of its vocabulary slice, zeroes the others' rows
        # and the [T, h] outputs are summed over the TP group, one all-reduce per pass (as Megatron's training graph,
        # hybrid.workloads.llm.costing); a whole table on every rank (TensorRT-LLM engines without
        # use_parallel_embedding) needs none. Attention data parallelism runs the embedding whole on each rank.
        coll("embedding_all_reduce", "all_reduce", T * h * ab, tp, 1.0)
    if m.position_embedding_type == "learned_absolute":  # GPT-2/MPT-style learned positions added to the input
        elem("position_embedding", "elementwise", T * h, "add", 1.0)
    # the whole pass's hidden state, as engines run it (TensorRT-LLM's ``ln_f`` before gather_last_token_logits, vLLM
    # and Hugging Face alike); only the output layer takes each sequence's last token
    norm("final_layernorm", T, 1.0)
    if m.lm_head:
        gemm("lm_head", "lm_head", B, m.vocab_size / tp, h, 1.0)
        if tp > 1:
            coll("logits_all_gather", "all_gather", B * m.vocab_size * ab, tp, 1.0)
        if names is None or "sampling" in names:
            blocks.append(_block(n_scen, scenario=scen, phase=ph, name="sampling", category="sampling", count=1.0,
                                 op="softmax", dtype="fp32", rows=B, hidden=float(m.vocab_size),
                                 bytes_actual=np.nan))
    elif m.output_head == "classifier":  # a replicated score layer on each sequence's last token; nothing sampled
        gemm("lm_head", "lm_head", B, float(m.num_labels), h, 1.0)
    if s.pp > 1:
        # neighbouring stages are tp ranks apart: as soon as the pipeline spans two nodes some stage's send crosses
        # the NICs (TP 8 x PP 2 on 8-GPU nodes: every one; TP 2 x PP 8: stage 3 to 4), and the slowest send is the
        # one the schedule waits for (as training's pipeline sends, hybrid.workloads.llm.costing)
        pp_nodes = min(group_nodes(s.pp, s.tp, s.system.gpus_per_node, s.gpus), 2)
        coll("pp_send_recv", "send_recv", T * h * ab, 2, 1.0, category="pipeline", nodes=pp_nodes)
    if not blocks:  # ``names`` named no op of this pass
        raise InvalidInputError(f"no op of {m.name}'s forward pass is named {', '.join(names or ())}")
    table = pd.concat([pd.DataFrame(b) for b in blocks], ignore_index=True, sort=False)
    table = table[table["count"].to_numpy(dtype=np.float64) > 0].copy()
    table["device"] = s.device.key
    return table.sort_values(["scenario"], kind="stable").reset_index(drop=True)


def cost_ops(table: pd.DataFrame, cost_model: OpCostModel | None = None, catalog: Catalog | None = None,
             kernel_times: bool = True) -> pd.DataFrame:
    """``table`` plus ``time_us`` (per call of the op), ``roofline_us``, ``flops``, ``bytes``, ``bound``,
    ``method``: one ``cost_model.predict`` call for all rows (``None``: the engine's default, roofline-only
    predictor, :func:`hybrid.engine.costs.default_cost_model`), with the analytical roofline of every row beside
    it (FLOPs, bytes, compute/memory/latency terms, boundedness).

    ``kernel_times`` (default): GPU ops cost their kernel time. Serving runtimes enqueue kernels asynchronously
    (and replay decode steps as CUDA graphs), so the per-op host dispatch that a model calibrated on eager
    per-op timings includes (an own ``hybrid profile``: 13-20 us per op on an H100 VM) is not in their step
    times; :class:`hybrid.engine.costs.KernelTimeModel` takes it off, the fitted constant and the floor that
    corrections without one learned inside eager-timed GPUs' times (``learned_dispatch``) alike, and on a GPU the
    fit never saw holds the host-bound ops (a decode step's attention at small batches), which the unseen-GPU
    envelope leaves to the trees, under the fitted GPUs' kernel time per roofline of the same op. Models
    calibrated on kernel times (Vidur labelled as such, XLA) carry no dispatch, so nothing changes for them."""
    if cost_model is None:
        cost_model = default_cost_model(catalog)
    fitted = cost_model  # the model itself: its collective constants (custom all-reduce) are read from it
    if kernel_times:
        cost_model = KernelTimeModel(cost_model, learned_dispatch=True)
    cat = model_catalog(cost_model, catalog)
    cols = [c for c in COST_COLUMNS if c in table.columns]
    rows = integral_shapes(table[cols])
    base = roofline(rows, cat)
    time, low, high, method = predict_bounds(cost_model, rows)
    flops = base["flops"].to_numpy(dtype=np.float64)
    nbytes = base["bytes"].to_numpy(dtype=np.float64)
    real = table["bytes_actual"].to_numpy(dtype=np.float64) if "bytes_actual" in table.columns else np.full(len(table),
                                                                                                          np.nan)
    has_real = np.isfinite(real) & (nbytes > 0)
    ratio = np.where(has_real, real / np.where(nbytes > 0, nbytes, 1.0), 1.0)
    memory_us = base["memory_us"].to_numpy() * ratio
    busy_us = base["busy_us"].to_numpy()  # compute side: FLOPs, and attention's exps on the special-function units
    lat = base["latency_us"].to_numpy()
    # ops whose reads repeat through L2 (masked-MHA decode attention): that traffic at the device's L2 bandwidth is
    # one more roof
    l2_bytes = table["l2_bytes"].to_numpy(dtype=np.float64) if "l2_bytes" in table.columns else np.full(len(table),
                                                                                                        np.nan)
    has_l2 = np.isfinite(l2_bytes)
    l2_us = np.zeros(len(table))
    if has_l2.any():
        dev = table["device"].astype(str).to_numpy()
        l2_bw = pd.Series({d: cat.device(d).l2_bandwidth() for d in np.unique(dev)})[dev].to_numpy(dtype=np.float64)
        l2_us = np.where(has_l2 & (l2_bw > 0), l2_bytes / np.where(l2_bw > 0, l2_bw, 1.0) * 1e6, 0.0)
    has = has_real | has_l2
    floor = busy_us + lat
    roof = base["time_us"].to_numpy(dtype=np.float64)
    adj_roof = np.maximum(np.maximum(memory_us, busy_us), l2_us) + lat
    # the prediction moves with the roofline under the real storage and L2 traffic: a memory-bound op by the bytes
    # ratio, a compute-bound one (an fp4 GEMM writing 16-bit outputs, say) not at all
    scale = np.where(has, adj_roof / np.where(roof > 0, roof, 1.0), 1.0)
    roof = np.where(has, adj_roof, roof)
    time = np.where(has, np.maximum(time * scale, floor), time)
    bounds = {} if low is None or high is None else {
        "time_us_low": np.where(has, np.maximum(low * scale, floor), low),
        "time_us_high": np.where(has, np.maximum(high * scale, floor), high)}
    method = np.asarray(method, dtype=object)
    p2p = (table["p2p_allreduce"].to_numpy(dtype=np.float64) > 0) if "p2p_allreduce" in table.columns else None
    if p2p is not None and p2p.any():
        custom = _p2p_allreduce_times(table, p2p, fitted, cat)
        use = np.isfinite(custom)
        if use.any():
            ratio_t = np.where(use, custom / np.where(time > 0, time, 1.0), 1.0)
            for key in list(bounds):
                bounds[key] = np.where(use, bounds[key] * ratio_t, bounds[key])
            time = np.where(use, custom, time)
            roof = np.where(use, custom, roof)
            method = np.where(use, "p2p-allreduce", method)
    fam = base["family"].astype(str).to_numpy()
    bound = np.where(fam == "collective", "comm", np.where(lat > np.maximum(busy_us, memory_us), "latency",
                                                           np.where(busy_us >= memory_us, "compute", "memory")))
    bound = np.where(l2_us > np.maximum(np.maximum(busy_us, memory_us), lat), "l2", bound)
    out = table.copy()
    out["flops"] = flops
    out["bytes"] = np.where(has_real, real, nbytes)
    out["compute_us"], out["busy_us"] = base["compute_us"].to_numpy(), busy_us
    out["memory_us"], out["latency_us"] = memory_us, lat
    out["roofline_us"] = roof
    out["time_us"] = time
    for c, v in bounds.items():  # the calibrated 80% interval of each op (calibrated predictors only)
        out[c] = v
    out["bound"] = bound
    out["method"] = method
    return out


def _all_pairs_nvlink(system: System, ranks: int, device: Device | None = None) -> bool:
    """Whether every pair of ``ranks`` GPUs of one ``system`` node talks over NVLink (the custom all-reduce's
    condition): an NVSwitch node always; direct NVLink unless the links are bridges between pairs (then 2 GPUs);
    PCIe cards bridged in pairs (:func:`~hybrid.hardware.device.pair_bridge_bw`): 2 GPUs, over the bridge."""
    cls, text = _link_class(system, ranks, device), system.intra_fabric.lower()
    if intra_class(system) == "pcie-pairs":
        return cls == "nvlink"
    bridged = any(w in text for w in ("bridge", "pair", "2-way"))
    return cls == "nvswitch" or (cls == "nvlink" and (ranks <= 2 or not bridged))


def _link_class(system: System, ranks: int, device: Device | None) -> str:
    """Fabric class ``ranks`` GPUs of one ``system`` node talk over, as the collective transfer model classes it
    (``system_features``): on PCIe cards bridged in pairs NVLink for a pair with a bridge, PCIe beyond; else the
    node's own class."""
    cls = intra_class(system)
    if cls != "pcie-pairs":
        return cls
    return "nvlink" if ranks <= 2 and pair_bridge_bw(system, device) > 0 else "pcie"


def _p2p_allreduce_times(table: pd.DataFrame, rows: np.ndarray, cost_model: OpCostModel, cat: Catalog) -> np.ndarray:
    """Per row, the one-/two-shot all-reduce time (us) where ``rows`` asks for it and TensorRT-LLM's rule picks it
    (NaN elsewhere: NCCL). Link efficiency and per-step latency: :func:`intra_fabric_constants` of the system's
    fabric class."""
    out = np.full(len(table), np.nan)
    sizes = table["size_bytes"].to_numpy(dtype=np.float64)
    ranks = table["n_ranks"].to_numpy(dtype=np.float64)
    keys = pd.DataFrame({"d": table["device"].astype(str).to_numpy(), "s": table["system"].astype(str).to_numpy(),
                         "n": ranks})[rows]
    for (dev_key, sys_key, n), grp in keys.groupby(["d", "s", "n"]):
        idx = grp.index.to_numpy()
        dev, system = cat.device(dev_key), resolve_system(cat, sys_key)
        eta, step_us = intra_fabric_constants(cost_model, _link_class(system, int(n), dev))
        strat = trtllm_strategy(sizes[idx], int(n))
        out[idx] = p2p_allreduce_us(sizes[idx], int(n), dev.link_bw, eta, step_us, dev.kernel_latency_us, strat)
    return out


# ------------------------------------------------------------------------------------------------ results
@dataclass
class InferenceResult:
    """Static-batch prediction for one configuration; times in milliseconds."""

    setup: InferenceSetup
    batch: int
    input_len: int
    output_len: int
    ttft_ms: float
    #: mean time between two output tokens of a request; None with one output token (no decode step: there is no
    #: time *per output token* after the first, which 0 would claim), as ``serve`` leaves such requests out of TPOT
    tpot_ms: float | None
    latency_ms: float
    output_tokens_per_s: float
    memory: MemoryPlan
    breakdown_ms: dict[str, dict[str, float]]
    ops: pd.DataFrame  # per-op rows of the prefill pass and the mid-generation decode step
    roofline_latency_ms: float = float("nan")
    method: str = "roofline"
    notes: list[str] = field(default_factory=list)
    #: the 80% interval (``ttft_ms_low`` ... ``output_tokens_per_s_per_gpu_high``) with a calibrated predictor
    interval: dict[str, float] = field(default_factory=dict)

    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        return self.output_tokens_per_s / self.setup.gpus

    def e2e_interval(self) -> dict[str, float]:
        """The end-to-end interval of every ``*_low`` / ``*_high`` pair of :attr:`interval` (``ttft_ms_e2e_low``
        ...): widened by the packaged form-error margin of inference runs (:mod:`hybrid.engine.form_error`), which
        covers what the op costs do not (the serving software's own overheads); empty without an interval."""
        if not self.interval:
            return {}
        # the point predictions, kept inside where a margin narrows (:meth:`FormMargin.widen`)
        points = {k: float(getattr(self, k)) for k in {k[:-4] for k in self.interval if k.endswith("_low")}
                  if isinstance(getattr(self, k, None), (int, float))}
        return e2e_interval({**self.interval, **points}, "inference")

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready keys; without a decode step ``tpot_ms`` and its interval ends are None."""
        s = self.setup
        undefined = {}  # the TPOT keys an interval has, null where there is no TPOT
        if self.tpot_ms is None and self.interval:
            undefined = {"tpot_ms_low": None, "tpot_ms_high": None, "tpot_ms_e2e_low": None, "tpot_ms_e2e_high": None}
        return {
            "model": s.model.name, "device": s.device.key, "system": s.system.key, "tp": s.tp, "pp": s.pp, "ep": s.ep,
            "attention_dp": s.attention_dp,
            "gpus": s.gpus, "precision": s.precision.label, "batch": self.batch, "input_len": self.input_len,
            "output_len": self.output_len, "ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms,
            "latency_ms": self.latency_ms, "output_tokens_per_s": self.output_tokens_per_s,
            "output_tokens_per_s_per_gpu": self.output_tokens_per_s_per_gpu,
            "roofline_latency_ms": self.roofline_latency_ms, "method": self.method,
            "max_batch": self.memory.max_batch, "fits": self.memory.fits, "memory": self.memory.to_dict(),
            **self.interval, **self.e2e_interval(), **undefined, "breakdown_ms": self.breakdown_ms,
            "notes": self.notes,
            "ops": self.ops[["phase", "name", "op", "count", "flops", "bytes", "time_us", "roofline_us",
                             "bound"]].to_dict(orient="records"),
        }


def _decode_grids(input_len: np.ndarray, output_len: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    """Context lengths of every configuration's ``output_len - 1`` decode steps, sampled at ``points`` nodes
    (arrays ``[configs, points]``), with the weights that integrate a function of the context over all steps
    (trapezoid; exact where every step is a node: with fewer steps than points the rounded nodes repeat and their
    weights add up to one per step). A configuration without decode steps has zero weights."""
    steps = np.asarray(output_len, dtype=np.float64) - 1.0
    pts = max(int(points), 2)
    frac = np.arange(pts, dtype=np.float64) / (pts - 1)
    nodes = np.round(1.0 + frac[None, :] * np.maximum(steps - 1.0, 0.0)[:, None])
    gaps = np.diff(nodes, axis=1)
    w = np.zeros_like(nodes)
    w[:, :-1] += gaps / 2
    w[:, 1:] += gaps / 2
    w[:, 0] += 0.5
    w[:, -1] += 0.5  # the end steps count fully: total weight = steps
    w = w * (np.maximum(steps, 0.0) / w.sum(axis=1))[:, None]
    return np.asarray(input_len, dtype=np.float64)[:, None] + nodes, w


#: Decode steps simulated on the engine to check the pipeline's steady-state token period.
PIPELINE_STEPS = 24


def pipeline_times(pp: np.ndarray | int, micro: np.ndarray | int, prefill_stage_us: np.ndarray | float,
                   decode_stage_us: np.ndarray | float, prefill_send_us: np.ndarray | float = 0.0,
                   decode_send_us: np.ndarray | float = 0.0, prefill_sum_us: np.ndarray | float | None = None,
                   decode_sum_us: np.ndarray | float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Pipeline-parallel inference in closed form (vectorised): ``pp`` stages, the slowest taking ``*_stage_us``
    per microbatch and all of them together ``*_sum_us`` (default ``pp`` x the slowest: equal stages; the pass
    ops, embedding and output layer, run on one stage each, not on every one), sends excluded; ``micro``
    microbatches, a send of ``*_send_us`` after every stage (the last one returns the sampled token to stage 0).
    Returns (time to the last microbatch's first token, steady-state time between two tokens of one microbatch):
    ``sum + (m - 1) max + (pp - 1) s`` and ``max(m max, sum + pp s)``. This is the schedule
    :func:`pipeline_on_engine` simulates on :mod:`hybrid.engine` (tests check they agree)."""
    pp_, m = np.asarray(pp, dtype=np.float64), np.asarray(micro, dtype=np.float64)
    t0, t1 = np.asarray(prefill_stage_us, dtype=np.float64), np.asarray(decode_stage_us, dtype=np.float64)
    s0, s1 = np.asarray(prefill_send_us, dtype=np.float64), np.asarray(decode_send_us, dtype=np.float64)
    u0 = pp_ * t0 if prefill_sum_us is None else np.asarray(prefill_sum_us, dtype=np.float64)
    u1 = pp_ * t1 if decode_sum_us is None else np.asarray(decode_sum_us, dtype=np.float64)
    return u0 + (m - 1) * t0 + (pp_ - 1) * s0, np.maximum(m * t1, u1 + pp_ * s1)


def pipeline_on_engine(pp: int, micro: int, prefill_stage_us: float, decode_stage_us: float, send_us: float,
                       steps: int = PIPELINE_STEPS, prefill_sum_us: float | None = None,
                       decode_sum_us: float | None = None) -> dict[str, float]:
    """Pipeline-parallel inference on :mod:`hybrid.engine`: one rank per stage, ``micro`` microbatches; the
    prefill of every microbatch, then ``steps`` decode steps where a microbatch's next token starts on stage 0
    once its previous token left the last stage (sampled tokens travel back as a send). The last stage takes
    ``*_stage_us`` (it holds the output layer), the others share the rest of ``*_sum_us`` evenly (default: equal
    stages). Returns the time to the last microbatch's first token and the steady-state time between tokens of
    one microbatch (us, measured over the second half of the steps), beside :func:`pipeline_times`' closed forms."""
    from hybrid.engine.graph import TaskGraph
    from hybrid.engine.simulate import simulate_durations

    def durations(stage: float, total: float | None) -> list[float]:
        if pp == 1 or total is None:
            return [stage] * pp
        return [(total - stage) / (pp - 1)] * (pp - 1) + [stage]

    pre_d, dec_d = durations(prefill_stage_us, prefill_sum_us), durations(decode_stage_us, decode_sum_us)
    g = TaskGraph(pp)
    last_send: dict[int, int | None] = {mb: None for mb in range(micro)}
    finish_nodes: dict[tuple[int, int], int] = {}
    for step in range(steps + 1):
        dur = pre_d if step == 0 else dec_d
        for mb in range(micro):
            dep = last_send[mb]
            for r in range(pp):
                node = g.add(r, "compute", f"{'prefill' if step == 0 else f'decode{step}'} mb{mb} stage{r}",
                             duration_us=dur[r], deps=[dep] if dep is not None else [], phase="prefill" if step == 0
                             else "decode")
                if r == pp - 1:
                    finish_nodes[(step, mb)] = node
                dep = g.add(r, "send", f"send mb{mb} from stage{r}", duration_us=send_us, deps=[node], kind="comm")
            last_send[mb] = dep
    compiled = g.compile()
    res = simulate_durations(compiled, np.asarray(compiled.fixed_us, dtype=np.float64))
    fin = res.finish
    ttft = max(float(fin[finish_nodes[(0, mb)]]) for mb in range(micro))
    half = max(steps // 2, 1)
    period = (float(fin[finish_nodes[(steps, 0)]]) - float(fin[finish_nodes[(steps - half, 0)]])) / half
    cf_ttft, cf_period = pipeline_times(pp, micro, prefill_stage_us, decode_stage_us, send_us, send_us,
                                        prefill_sum_us, decode_sum_us)
    return {"ttft_us": ttft, "token_period_us": period, "closed_form_ttft_us": float(cf_ttft),
            "closed_form_period_us": float(cf_period)}


def _setup_key(s: InferenceSetup) -> tuple:
    return (s.model, s.device.key, s.system.key, s.precision, s.tp, s.pp, s.attention_kernel, s.fused_rope,
            s.allreduce, s.ep, s.attention_dp, s.softmax_overlap, s.parallel_embedding)


#: Batches (sequences per microbatch) of the static-batch envelope (:func:`batch_grid`): every batch up to
#: ``BATCH_GRID_DENSE``, then ``BATCH_GRID_STEPS`` evenly spaced batches per octave (16, 18, ..., 30, 32, 36, ...).
#: Every batch of the TensorRT-LLM tables (52, 60, 120, 240, 384, 896, 1280, powers of two) is on it.
BATCH_GRID_DENSE = 16
BATCH_GRID_STEPS = 8
#: Grid batches of every envelope chain (:func:`_envelope_plan`) and its isotonic fit (:func:`_apply_envelope`):
#: past every vendor-table batch (1280), so the running maximum beyond it rarely applies.
BATCH_GRID_FIT = 2048
#: Cost methods the envelope leaves alone: analytical times, non-decreasing in the batch by construction, and the
#: custom all-reduce, whose strategy switch (one-shot to two-shot at 1 MB on 4 GPUs) makes a larger message really
#: faster: the envelope pooled the two (llama2-70b on 4 A100s, decode all-reduce at batch 56 / 64: 19.41 / 19.41 us
#: against their 19.47 / 18.55)
ANALYTICAL_METHODS = ("roofline", "alpha-beta", "p2p-allreduce")
#: A static batch's notes say when attention's cap at its pieces (:func:`never_superlinear`) took more than this
#: share off a phase's learned attention time.
CAP_NOTE_SHARE = 0.01
#: What that note says (after the phase's name).
CAP_NOTE = "attention priced at its pieces"


def batch_grid(upto: float) -> np.ndarray:
    """The envelope's batches (:data:`BATCH_GRID_DENSE`, :data:`BATCH_GRID_STEPS`), ascending, up to and including
    the first one >= ``upto``."""
    top = max(float(upto), 1.0)
    grid = list(range(1, BATCH_GRID_DENSE + 1))
    octave = BATCH_GRID_DENSE
    while grid[-1] < top:
        step = octave // BATCH_GRID_STEPS
        grid += [octave + j * step for j in range(1, BATCH_GRID_STEPS + 1)]  # ends at 2 x octave
        octave *= 2
    grid_arr = np.asarray(grid, dtype=np.float64)
    return grid_arr[:int(np.searchsorted(grid_arr, top, side="left")) + 1]


def _grid_brackets(batch: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per batch: (index of the largest grid batch <= it, of the smallest >= it, log-log weight of the latter)."""
    b = np.asarray(batch, dtype=np.float64)
    lo = np.searchsorted(grid, b, side="right") - 1
    hi = np.searchsorted(grid, b, side="left")
    span = np.log(grid[hi]) - np.log(grid[lo])
    w = np.divide(np.log(b) - np.log(grid[lo]), span, out=np.zeros_like(b), where=span > 0)
    return lo, hi, w


@dataclass
class _Envelope:
    """Companion scenarios of the batch envelope (:func:`_static_batch`): ``chain`` per scenario (scenarios that
    differ only in the batch share one; ``example``: a scenario of each chain), the chains' companions (``comp_chain``, ``comp_batch`` index into
    :func:`batch_grid`, in order within each chain, ``start`` = a chain's first companion) and each scenario's grid
    brackets (``lo``, ``hi`` indices into its chain's companions, ``w``)."""

    chain: np.ndarray
    example: np.ndarray
    start: np.ndarray
    comp_chain: np.ndarray
    comp_batch: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    w: np.ndarray
    grid: np.ndarray


def _envelope_plan(group: np.ndarray, is_pre: np.ndarray, per_seq: np.ndarray, q_len: np.ndarray, kv: np.ndarray,
                   batch: np.ndarray) -> _Envelope:
    """Per scenario (deployment ``group``, phase, new tokens per sequence, ``q_len``, ``kv`` context, ``batch``):
    the chain of the same scenario at every :func:`batch_grid` batch up to the first >= its batch."""
    keys = pd.DataFrame({"g": group, "p": is_pre, "t": per_seq, "q": q_len, "k": kv})
    chain = keys.groupby(list(keys.columns), sort=False, observed=True).ngroup().to_numpy()
    grid = batch_grid(max(float(np.max(batch)), BATCH_GRID_FIT))
    lo, hi, w = _grid_brackets(batch, grid)
    fit = int(np.searchsorted(grid, BATCH_GRID_FIT, side="left"))
    top = np.full(int(chain.max()) + 1, fit, dtype=np.int64)
    np.maximum.at(top, chain, hi)
    size = top + 1
    start = np.concatenate([[0], np.cumsum(size)[:-1]])
    comp_chain = np.repeat(np.arange(len(size)), size)
    comp_batch = np.arange(int(size.sum())) - start[comp_chain]
    example = np.zeros(len(size), dtype=np.int64)
    example[chain[::-1]] = np.arange(len(chain))[::-1]  # the first scenario of each chain
    return _Envelope(chain, example, start, comp_chain, comp_batch, lo, hi, w, grid)


def isotonic_log(values: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest to ``values`` (``[..., n]``, positive) in least squares of the logs
    (isotonic regression along the last axis, vectorised over the others), from its min-max form: at ``i``, the
    largest over starts ``j <= i`` of the smallest over ends ``k >= i`` of the mean log over ``j..k``. A sequence
    already non-decreasing comes back unchanged."""
    x = np.log(values)
    n = x.shape[-1]
    s = np.concatenate([np.zeros((*x.shape[:-1], 1)), np.cumsum(x, axis=-1)], axis=-1)
    j, k = np.arange(n)[:, None], np.arange(n)[None, :]
    span = np.where(k >= j, k - j + 1, 1).astype(np.float64)
    mean = (s[..., None, 1:] - s[..., :-1, None]) / span  # [..., j, k]
    mean = np.where(k >= j, mean, np.inf)
    suffix = np.flip(np.minimum.accumulate(np.flip(mean, axis=-1), axis=-1), axis=-1)  # min over k >= i
    fit = np.where(k >= j, suffix, -np.inf).max(axis=-2)  # max over j <= i
    return np.exp(fit)


def never_superlinear(values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Op times along an ascending grid of batch, token or chunk counts (the last axis of ``values``) capped so
    that ``n`` never costs more than ``ceil(n / m)`` ops of ``m`` for a smaller grid count ``m``: a batch can
    always run as pieces of a smaller one, and a fused kernel is not slower than its pieces run one after another
    (the batch's counterpart of the GEMM sub-problem bound). Binds where a learned correction extrapolates a
    falling efficiency past its rows (llama2-7b's decode attention over 2,111 tokens of KV cache on an A100,
    priced at 0.74 of its bandwidth at batch 32 and 0.63 at 52, where no row measures a decode step); the static
    batch and the serving grids apply it to attention, whose pieces are sequences or prompt chunks on the same
    grid in both. A non-decreasing input stays non-decreasing.
    NaN entries (grid points past a chain's end) are neither bounded nor used as bounds."""
    z = np.array(values, dtype=np.float64)
    g = np.asarray(grid, dtype=np.float64)
    if z.shape[-1] != len(g):
        raise ValueError(f"{z.shape[-1]} values per row for a grid of {len(g)}")
    for i in range(1, len(g)):
        pieces = np.ceil(g[i] / g[:i] - 1e-9)  # [i]: pieces of each smaller count that make up g[i]
        with np.errstate(invalid="ignore"):
            cap = np.nanmin(np.where(np.isfinite(z[..., :i]), z[..., :i] * pieces, np.inf), axis=-1)
        z[..., i] = np.where(np.isfinite(z[..., i]) & np.isfinite(cap), np.minimum(z[..., i], cap), z[..., i])
    return z


def op_occurrence_keys(ops: pd.DataFrame) -> np.ndarray:
    """Each op row's identity across scenarios of a costed pass table: its name and its occurrence among the
    scenario's ops of that name (``mlp_up_proj#1``). A model whose layers differ (dense and MoE layers interleaved)
    has two ``mlp_up_proj`` rows of other shapes, each with its own batch envelope (static batching's
    :func:`_apply_envelope`, serving's step tables)."""
    nth = ops.groupby(["scenario", "name"], sort=False).cumcount().to_numpy()
    return np.char.add(np.char.add(ops["name"].to_numpy(dtype=str), "#"), nth.astype(str))


def _apply_envelope(costed: pd.DataFrame, comp: pd.DataFrame, env: _Envelope, columns: list[str],
                    rows: np.ndarray, pieces: bool = False) -> np.ndarray:
    """In place: every learned op time of ``costed``'s ``rows`` (scenario ``i``, column in ``columns``) becomes its
    batch envelope. Along its chain (the same op at the grid batches, times in ``comp``, whose ``scenario``
    numbers the companions): the isotonic fit (:func:`isotonic_log`) of the grid batches up to
    :data:`BATCH_GRID_FIT`, then the running maximum beyond, with ``pieces`` capped at its pieces
    (:func:`never_superlinear`); log-log interpolated between the grid batches around the scenario's batch. Ops
    answered analytically (:data:`ANALYTICAL_METHODS`) keep their time. Returns, per row of ``costed``, its
    ``time_us`` envelope without the cap (NaN where the row keeps its own time)."""
    uncapped_t = np.full(len(costed), np.nan)
    names, name_codes = np.unique(np.concatenate([op_occurrence_keys(costed), op_occurrence_keys(comp)]),
                                  return_inverse=True)
    own_name, comp_name = name_codes[:len(costed)], name_codes[len(costed):]
    sc = costed["scenario"].to_numpy(dtype=np.int64)
    chain = env.chain[sc]
    learned = rows & ~np.isin(costed["method"].to_numpy(dtype=str), ANALYTICAL_METHODS)
    comp_sc = comp["scenario"].to_numpy(dtype=np.int64)
    c_chain, c_pos = env.comp_chain[comp_sc], env.comp_batch[comp_sc]
    n_pos = int(env.comp_batch.max()) + 1
    n_fit = min(int(np.searchsorted(env.grid, BATCH_GRID_FIT, side="right")), n_pos)
    w = env.w[sc]

    def at_batch(grid_t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows with a learned time at both grid batches around theirs, and the log-log interpolation."""
        a = grid_t[chain, own_name, env.lo[sc]]
        b = grid_t[chain, own_name, env.hi[sc]]
        ok = learned & np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
        return ok, np.exp((1.0 - w) * np.log(np.where(ok, a, 1.0)) + w * np.log(np.where(ok, b, 1.0)))

    for column in columns:
        dense = np.full((len(env.start), len(names), n_pos), np.nan)  # [chain, op, grid batch]
        dense[c_chain, comp_name, c_pos] = comp[column].to_numpy(dtype=np.float64)
        have = np.isfinite(dense[..., :n_fit]).all(axis=-1) & (dense[..., :n_fit] > 0).all(axis=-1)
        dense[..., :n_fit] = np.where(have[..., None], isotonic_log(np.where(have[..., None], dense[..., :n_fit],
                                                                             1.0)), np.nan)
        # beyond the fitted batches: never below the batch before (positions past a chain's end stay NaN)
        dense[..., n_fit - 1:] = np.fmax.accumulate(dense[..., n_fit - 1:], axis=-1)
        if column == "time_us":
            ok, t = at_batch(dense)
            uncapped_t = np.where(ok, t, np.nan)
        if pieces:  # and never above its pieces
            dense = never_superlinear(dense, env.grid[:n_pos])
        ok, env_t = at_batch(dense)
        costed[column] = np.where(ok, env_t, costed[column].to_numpy(dtype=np.float64))
    return uncapped_t


@dataclass
class _Static:
    """Vectorised static-batch predictions of many configurations (arrays per configuration, times in us)."""

    costed: pd.DataFrame  # every op row of every scenario, with ``config`` and ``weight``
    micro: np.ndarray
    ttft: dict[str, np.ndarray]  # by cost column ("time_us", "roofline_us")
    decode: dict[str, np.ndarray]  # summed over all decode steps
    categories: pd.DataFrame  # per configuration x phase x category (ms, "pipeline" = sends and bubbles)
    #: per configuration, ``time_us`` of the slowest pipeline stage, of every stage together and of the stage-to-stage
    #: send: the prefill pass's and the mean over the decode steps (weighted as integrated), shape [n, 2]
    stage_times: dict[str, np.ndarray] = field(default_factory=dict)


def _static_batch(setups: list[InferenceSetup], batch: np.ndarray, input_len: np.ndarray, output_len: np.ndarray,
                  cost_model: OpCostModel | None, decode_points: int) -> _Static:
    """Every configuration's prefill pass and sampled decode steps, built per distinct deployment (one
    :func:`pass_ops` call each, vectorised over scenarios) and costed in ONE :func:`cost_ops` call."""
    n = len(setups)
    pp = np.array([s.pp for s in setups], dtype=np.int64)
    micro = np.where(pp > 1, np.minimum(pp, batch), 1)
    bm = np.ceil(batch / micro)
    ctx, w = _decode_grids(input_len, output_len, decode_points)
    P = ctx.shape[1]
    # scenarios: per configuration one prefill, then the decode nodes with weight > 0
    keep = np.concatenate([np.ones((n, 1), bool), w > 0], axis=1)
    cfg = np.repeat(np.arange(n), P + 1).reshape(n, P + 1)[keep]
    is_pre = np.concatenate([np.ones((n, 1), bool), np.zeros((n, P), bool)], axis=1)[keep]
    weight = np.concatenate([np.ones((n, 1)), w], axis=1)[keep]
    kv = np.concatenate([np.asarray(input_len, float)[:, None], ctx], axis=1)[keep]
    tokens = np.where(is_pre, bm[cfg] * input_len[cfg], bm[cfg])
    q_len = np.where(is_pre, input_len[cfg], 1).astype(np.float64)
    phase = np.where(is_pre, "prefill", "decode").astype(object)
    group = pd.factorize(pd.Series([_setup_key(s) for s in setups], dtype=object))[0]
    # the batch envelope: every scenario again at the grid batches up to its own (tokens per sequence, context and
    # deployment unchanged), costed in the same call; only attention reads the context, so the other ops' chains
    # leave it out (one chain for all decode steps of a configuration) and the attention chains keep only attention
    per_seq = np.where(is_pre, input_len[cfg], 1).astype(np.float64)
    n_sc = len(cfg)
    plans = {False: _envelope_plan(group[cfg], is_pre, per_seq, q_len, np.zeros(n_sc), bm[cfg]),
             True: _envelope_plan(group[cfg], is_pre, per_seq, q_len, kv, bm[cfg])}
    offset = {False: n_sc, True: n_sc + len(plans[False].comp_chain)}
    frames = []
    for gi in np.unique(group):  # one op table per distinct deployment, vectorised over its scenarios
        setup = setups[int(np.flatnonzero(group == gi)[0])]
        sc = np.flatnonzero(group[cfg] == gi)
        f = pass_ops(setup, tokens[sc], bm[cfg[sc]], q_len[sc], kv[sc], phase[sc])
        f["scenario"] = sc[f["scenario"].to_numpy()]
        frames.append(f)
        for attention, env in plans.items():
            o = env.example[env.comp_chain]  # a scenario of each companion's chain: its phase, lengths, context
            cs = np.flatnonzero(group[cfg[o]] == gi)
            if not len(cs):
                continue
            o, b = o[cs], env.grid[env.comp_batch[cs]]
            f = pass_ops(setup, b * per_seq[o], b, q_len[o], kv[o], phase[o])
            f = f[(f["name"] == "attention").to_numpy() == attention]
            f["scenario"] = offset[attention] + cs[f["scenario"].to_numpy()]
            frames.append(f)
    table = pd.concat(frames, ignore_index=True)
    costed_all = cost_ops(table, cost_model, setups[0].catalog)
    number = costed_all["scenario"].to_numpy()
    costed = costed_all[number < n_sc].reset_index(drop=True)
    columns = [c for c in ("time_us", "time_us_low", "time_us_high") if c in costed.columns]
    uncapped = costed["time_us"].to_numpy(dtype=np.float64).copy()
    for attention, env in plans.items():
        comp = costed_all[(number >= offset[attention]) & (number < offset[attention] + len(env.comp_chain))]
        u = _apply_envelope(costed, comp.assign(scenario=comp["scenario"].to_numpy() - offset[attention]), env,
                            columns, (costed["name"] == "attention").to_numpy() == attention, pieces=attention)
        uncapped = np.where(np.isfinite(u), u, uncapped)
    # the batch envelope's time before attention's cap at its pieces (never_superlinear): the notes say what it took
    costed["uncapped_us"] = np.where(np.isfinite(uncapped), uncapped, costed["time_us"].to_numpy(dtype=np.float64))
    sc = costed["scenario"].to_numpy(dtype=np.int64)
    costed["config"] = cfg[sc]
    costed["weight"] = weight[sc]
    costed["context"] = kv[sc]
    send = (costed["category"] == "pipeline").to_numpy()
    once = costed["name"].isin(PASS_OPS).to_numpy() & ~send  # embedding, output layer, sampling: one stage each
    # per-layer rows by the kind of layer they belong to (pass_ops counts them at the model's mean MoE share)
    moe_row = ((costed["category"] == "moe") | (costed["name"] == "ep_all_to_all")).to_numpy() & ~send & ~once
    dense_row = (costed["name"].isin(MLP_OPS).to_numpy() & ~moe_row
                 & ~send & ~once)
    layer_row = ~send & ~once & ~moe_row & ~dense_row
    kinds = np.select([moe_row, dense_row, layer_row], [1, 2, 0], default=3)  # 3: a pass op
    stage_mult = stage_multipliers(setups)  # [configs, stages, 4]: per kind, a stage's rows over the mean stage's
    m_, p_ = micro.astype(np.float64), pp.astype(np.float64)
    # the layers of all stages over those of the slowest (ceil(L / pp) layers)
    layer_share = np.array([s.model.num_layers / s.layers_per_stage for s in setups])
    n_sc = len(cfg)
    ttft, decode, cats = {}, {}, []
    cols = ["time_us", "roofline_us"] + [c for c in ("time_us_low", "time_us_high") if c in costed.columns]
    for col in cols:
        t = costed[col].to_numpy() * costed["count"].to_numpy()
        by_kind = np.stack([np.bincount(sc, weights=np.where(~send & (kinds == k), t, 0.0), minlength=n_sc)
                            for k in range(4)], axis=1)  # [scenarios, kind]
        mean_stage = by_kind.sum(axis=1)
        pass_t = by_kind[:, 3]
        # the slowest stage: the one whose layers cost the most (a dense-first MoE model's stages hold different
        # numbers of MoE layers; the pipeline runs at the pace of the one with the most, as training's does)
        per_stage = np.einsum("sk,srk->sr", by_kind, stage_mult[cfg])
        slowest = np.argmax(per_stage, axis=1)
        stage = per_stage[np.arange(n_sc), slowest]
        total = (mean_stage - pass_t) * layer_share[cfg] + pass_t  # every stage's ops: each layer and pass op once
        total = np.where(pp[cfg] > 1, total, stage)
        sends = np.bincount(sc, weights=np.where(send, t, 0.0), minlength=n_sc)
        pre_sc = np.flatnonzero(is_pre)  # one per configuration, in order
        ttft[col], _ = pipeline_times(pp, micro, stage[pre_sc], 0.0, sends[pre_sc], 0.0, total[pre_sc], 0.0)
        _, period = pipeline_times(pp[cfg], micro[cfg], 0.0, stage, 0.0, sends, 0.0, total)
        decode[col] = np.bincount(cfg, weights=np.where(is_pre, 0.0, period * weight), minlength=n)
        if col == "time_us":
            # per category: op time x stage passes (the slowest stage's ops the microbatches wait on beyond the
            # first pass through every stage, each op once in that pass); "pipeline" = sends and bubbles
            first = np.where(once, 1.0, layer_share[cfg][sc])
            m_sc = m_[cfg][sc]
            busy = stage_mult[cfg[sc], slowest[sc], kinds]  # the row's share in the slowest stage
            # prefill: total + (m - 1) x slowest; decode: m x slowest, or one trip through every stage if longer
            mult = np.where(is_pre[sc], first + (m_sc - 1.0) * busy,
                            np.where(m_sc * stage[sc] >= total[sc], m_sc * busy, first))
            ops_t = np.where(send, 0.0, t) * mult * np.where(is_pre, 1.0, weight)[sc]
            cat = pd.DataFrame({"config": cfg[sc], "phase": costed["phase"].to_numpy(),
                                "category": costed["category"].to_numpy(), "ms": ops_t / 1e3})
            cat = cat[~send]
            pre_pipe = ttft[col] - (total[pre_sc] + (m_ - 1) * stage[pre_sc])
            dec_ops = np.where(m_[cfg] * stage >= total, m_[cfg] * stage, total)
            dec_pipe = np.bincount(cfg, weights=np.where(is_pre, 0.0, (period - dec_ops) * weight), minlength=n)
            pipe = pd.DataFrame({"config": np.concatenate([np.arange(n), np.arange(n)]),
                                 "phase": ["prefill"] * n + ["decode"] * n, "category": "pipeline",
                                 "ms": np.concatenate([pre_pipe, dec_pipe]) / 1e3})
            # [n, 2] each: the prefill pass, and the decode steps' mean weighted as integrated
            wsum = np.maximum(np.bincount(cfg, weights=np.where(is_pre, 0.0, weight), minlength=n), 1e-300)
            stage_times = {k: np.stack([x[pre_sc], np.bincount(cfg, weights=np.where(is_pre, 0.0, x * weight),
                                                                minlength=n) / wsum], axis=1)
                           for k, x in (("stage", stage), ("total", total), ("send", sends))}
            cats = pd.concat([cat, pipe[(p_ > 1)[pipe["config"].to_numpy()]]], ignore_index=True) \
                .groupby(["config", "phase", "category"], as_index=False)["ms"].sum()
    return _Static(costed, micro, ttft, decode, cats, stage_times)


def stage_multipliers(setups: list[InferenceSetup]) -> np.ndarray:
    """Per deployment and pipeline stage, what its per-layer op rows cost against :func:`pass_ops`' mean stage
    (``ceil(L / pp)`` layers at the model's mean MoE share), by row kind: ``[..., 0]`` layer ops every layer has
    (attention, norms, TP collectives), ``1`` MoE rows, ``2`` dense-MLP rows, ``3`` pass ops (1: counted with every
    stage, the slowest being charged them all). Shape ``[deployments, max pp, 4]``; stages a deployment lacks are
    zeros. A dense model, or one whose layers are all MoE, has every stage alike (ones; the last stage's fewer
    layers, if any, are not the slowest); a dense-first MoE model (DeepSeek-V3's 3 dense layers) does not: at pp 4
    its stages hold 13, 16, 16 and 13 of its 58 MoE layers (:meth:`TransformerConfig.moe_layers_per_rank`)."""
    R = max(s.pp for s in setups)
    out = np.zeros((len(setups), R, 4))
    for i, s in enumerate(setups):
        m, L = s.model, s.layers_per_stage
        if s.pp <= 1 or not m.is_moe or m.num_dense_layers == 0:
            out[i, :s.pp] = 1.0
            continue
        n_moe = np.asarray(m.moe_layers_per_rank(s.pp), dtype=np.float64)
        n_layers = np.asarray(m.layers_per_rank(s.pp), dtype=np.float64)
        share = m.num_moe_layers / m.num_layers
        out[i, :s.pp, 0] = n_layers / L
        out[i, :s.pp, 1] = n_moe / (share * L)
        out[i, :s.pp, 2] = (n_layers - n_moe) / ((1.0 - share) * L)
        out[i, :s.pp, 3] = 1.0
    return out


def _tpot_ms(decode_us: np.ndarray, output_len: np.ndarray) -> np.ndarray:
    """Mean time per output token after the first (ms): the decode time over ``output_len - 1`` steps; NaN with
    one output token (no decode step, so no TPOT; not 0)."""
    steps = np.asarray(output_len, dtype=np.float64) - 1.0
    return np.where(steps > 0, np.asarray(decode_us, dtype=np.float64) / np.maximum(steps, 1.0), np.nan) / 1e3


def _interval_columns(r: _Static, batch: np.ndarray, output_len: np.ndarray, gpus: np.ndarray
                      ) -> dict[str, np.ndarray]:
    """The 80% interval of TTFT, TPOT, latency (``*_low`` / ``*_high``, ms) and throughput (low = at the high
    latency) from every op at its interval's end (a calibrated predictor's; empty without one)."""
    if "time_us_low" not in r.ttft or "time_us_high" not in r.ttft:
        return {}
    out: dict[str, np.ndarray] = {}
    for end in ("low", "high"):
        ttft, dec = r.ttft[f"time_us_{end}"], r.decode[f"time_us_{end}"]
        out[f"ttft_ms_{end}"] = ttft / 1e3
        out[f"tpot_ms_{end}"] = _tpot_ms(dec, output_len)
        out[f"latency_ms_{end}"] = (ttft + dec) / 1e3
    for end, other in (("low", "high"), ("high", "low")):
        out[f"output_tokens_per_s_per_gpu_{end}"] = batch * output_len / (out[f"latency_ms_{other}"] / 1e3) / gpus
    return out


#: The note of a static batch with one output token: no decode step, so no TPOT.
TPOT_UNDEFINED_NOTE = ("one output token: no decode step, so TPOT (time per output token after the first) is "
                       "undefined (null); latency = TTFT")


def predict_static(s: InferenceSetup, batch: int, input_len: int, output_len: int,
                   cost_model: OpCostModel | None = None, *, decode_points: int = 48,
                   check_memory: bool = True) -> InferenceResult:
    """Static batching: ``batch`` requests of ``input_len`` prompt and ``output_len`` generated tokens.

    Refuses (``InvalidInputError`` with the reason) a configuration whose memory does not fit unless
    ``check_memory`` is False (then ``memory.fits`` says so)."""
    mem = memory_plan(s.model, s.precision, s.device.mem_capacity, batch=batch, input_len=input_len,
                      output_len=output_len, tp=s.tp, pp=s.pp, reserve_gib=s.reserve_gib, attention_dp=s.attention_dp,
                      parallel_embedding=s.parallel_embedding)
    if check_memory and not mem.fits:
        raise InvalidInputError(f"does not fit: {mem.reason}")
    r = _static_batch([s], np.array([batch]), np.array([input_len]), np.array([output_len]), cost_model,
                      decode_points)
    micro = int(r.micro[0])
    ttft_us, decode_us = float(r.ttft["time_us"][0]), float(r.decode["time_us"][0])
    steps = max(output_len - 1, 0)
    latency_us = ttft_us + decode_us
    breakdown: dict[str, dict[str, float]] = {"prefill": {}, "decode": {}}
    for row in r.categories.itertuples(index=False):
        if row.phase == "decode" and not steps:  # a pipeline's zero "bubble" of a decode phase that never runs
            continue
        breakdown[str(row.phase)][str(row.category)] = float(row.ms)
    costed = r.costed
    # per-op view: the prefill pass and the decode step at mid-generation
    dec = costed[costed["phase"] == "decode"]
    keep = costed["phase"] == "prefill"
    if len(dec):
        kv = dec["context"].to_numpy(dtype=np.float64)
        mid = int(dec["scenario"].to_numpy()[np.argmin(np.abs(kv - (input_len + output_len / 2)))])
        keep = keep | (costed["scenario"] == mid)
    ops = costed[keep].drop(columns=["config", "weight", "context"]).reset_index(drop=True)
    method = "+".join(sorted(set(map(str, costed["method"]))))
    notes = [f"static batching: whole batch prefilled at once; {micro} microbatch(es)", f"memory: {mem.reason}",
             *s.deployment_notes()]
    notes += [n for n in [context_note(s.model, input_len + output_len), s.device.slow_dtype_note(s.precision.compute)]
              if n]
    att = costed[costed["name"] == "attention"]
    mass = (att["count"] * att["weight"]).to_numpy(dtype=np.float64)
    for phase in ("prefill", "decode"):
        on = (att["phase"] == phase).to_numpy()
        learned_us = float(np.sum((mass * att["uncapped_us"].to_numpy(dtype=np.float64))[on]))
        capped_us = float(np.sum((mass * att["time_us"].to_numpy(dtype=np.float64))[on]))
        if learned_us > 0 and capped_us < (1.0 - CAP_NOTE_SHARE) * learned_us:
            notes.append(f"{phase} {CAP_NOTE}: {capped_us / 1e3:.1f} ms instead of the learned "
                         f"{learned_us / 1e3:.1f} ms, which put batch {batch} above the kernels of a smaller batch "
                         "that make it up (its bandwidth share fell past the rows it was fitted on; "
                         "never_superlinear, docs/llm_inference.md)")
    if not steps:
        notes.append(TPOT_UNDEFINED_NOTE)
    if s.pp > 1:
        st = {k: v[0] for k, v in r.stage_times.items()}  # this configuration: [prefill, decode mean]
        pipe = pipeline_on_engine(s.pp, micro, st["stage"][0], st["stage"][1], st["send"][0],
                                  prefill_sum_us=st["total"][0], decode_sum_us=st["total"][1])
        # without a decode step the "token period" would be the sends alone: none is given
        period = (f", token period at mean context {pipe['token_period_us'] / 1e3:.2f} ms (closed form "
                  f"{pipe['closed_form_period_us'] / 1e3:.2f})" if steps else "; no decode step")
        notes.append(f"pipeline schedule (closed form, breakdown category 'pipeline' = sends and bubbles): TTFT "
                     f"{ttft_us / 1e3:.2f} ms; the same schedule on the engine: TTFT {pipe['ttft_us'] / 1e3:.2f} ms "
                     f"(closed form {pipe['closed_form_ttft_us'] / 1e3:.2f}){period}")
    return InferenceResult(
        setup=s, batch=batch, input_len=input_len, output_len=output_len, ttft_ms=ttft_us / 1e3,
        tpot_ms=decode_us / steps / 1e3 if steps else None, latency_ms=latency_us / 1e3,
        output_tokens_per_s=batch * output_len / (latency_us / 1e6), memory=mem, breakdown_ms=breakdown, ops=ops,
        roofline_latency_ms=float(r.ttft["roofline_us"][0] + r.decode["roofline_us"][0]) / 1e3, method=method,
        notes=notes, interval={k: float(v[0]) for k, v in _interval_columns(
            r, np.array([batch]), np.array([output_len]), np.array([float(s.gpus)])).items()
            if steps or not k.startswith("tpot_ms_")})


def predict_many(setups: list[InferenceSetup], batch: np.ndarray, input_len: np.ndarray, output_len: np.ndarray,
                 cost_model: OpCostModel | None = None, *, decode_points: int = 24) -> pd.DataFrame:
    """Static-batch predictions for many configurations with ONE cost-model call (benchmark tables, sweeps).

    Returns one row per configuration: ``ttft_ms``, ``tpot_ms`` (NaN with one output token: no decode step),
    ``latency_ms``, ``output_tokens_per_s_per_gpu``
    (and ``roofline_*`` beside them), ``max_batch``, ``fits``."""
    def whole(x: Any, what: str) -> np.ndarray:
        """A column of positive whole numbers (a scalar for every configuration), refused by name otherwise: no
        silent truncation of 2.7 to 2, as predict_static refuses it too."""
        try:
            v = np.atleast_1d(np.asarray(x, dtype=np.float64))
        except (TypeError, ValueError):
            raise InvalidInputError(f"{what} must be numbers, got {x!r}") from None
        v = np.broadcast_to(v, (len(setups),)) if v.shape == (1,) and len(setups) > 1 else v
        bad = ~(np.isfinite(v) & (v >= 1) & (v == np.round(v)))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidInputError(f"{what} must be positive integers, got {float(v[i])!r} for configuration {i}")
        return v.astype(np.int64)

    if not len(setups):
        raise InvalidInputError("predict_many needs at least one configuration")
    batch, input_len, output_len = (whole(x, w) for x, w in ((batch, "batch"), (input_len, "input lengths"),
                                                             (output_len, "output lengths")))
    if not len(setups) == len(batch) == len(input_len) == len(output_len):
        raise InvalidInputError("one setup, batch, input and output length per configuration (at least one)")
    r = _static_batch(setups, batch, input_len, output_len, cost_model, decode_points)
    gpus = np.array([s.gpus for s in setups], dtype=np.float64)
    out: dict[str, np.ndarray] = {}
    for key, col in (("", "time_us"), ("roofline_", "roofline_us")):
        ttft, dec = r.ttft[col], r.decode[col]
        lat = ttft + dec
        out[f"{key}ttft_ms"] = ttft / 1e3
        out[f"{key}tpot_ms"] = _tpot_ms(dec, output_len)
        out[f"{key}latency_ms"] = lat / 1e3
        out[f"{key}output_tokens_per_s_per_gpu"] = batch * output_len / (lat / 1e6) / gpus
    out.update(_interval_columns(r, batch, output_len, gpus))
    res = pd.DataFrame(out)
    res["max_batch"], res["fits"], res["memory_reason"] = 0, False, ""
    group = pd.factorize(pd.Series([(_setup_key(s), s.reserve_gib) for s in setups], dtype=object))[0]
    for gi in np.unique(group):  # one vectorised memory table per distinct deployment
        rows = np.flatnonzero(group == gi)
        s = setups[int(rows[0])]
        mem = memory_table(s.model, s.precision, s.device.mem_capacity, batch=batch[rows], input_len=input_len[rows],
                           output_len=output_len[rows], tp=s.tp, pp=s.pp, reserve_gib=s.reserve_gib,
                           attention_dp=s.attention_dp, parallel_embedding=s.parallel_embedding)
        res.loc[rows, "max_batch"] = mem["max_batch"].to_numpy()
        res.loc[rows, "fits"] = mem["fits"].to_numpy()
        res.loc[rows, "memory_reason"] = mem["reason"].to_numpy()
    res["max_batch"] = res["max_batch"].astype(np.int64)
    res["fits"] = res["fits"].astype(bool)
    return res


def boundedness(result: InferenceResult) -> pd.DataFrame:
    """Per op of the prefill pass and the mid-generation decode step: FLOPs, bytes, arithmetic intensity,
    the device's ridge point, compute- or memory-bound, predicted and roofline time."""
    ops = result.ops
    dev = result.setup.device
    peak = dev.compute_peak(result.setup.precision.compute)
    out = ops[["phase", "name", "op", "count", "flops", "bytes", "time_us", "roofline_us", "bound"]].copy()
    out["intensity"] = out["flops"] / out["bytes"].where(out["bytes"] > 0)
    out["ridge"] = peak / dev.mem_bw
    out["achieved_tflops"] = out["flops"] / out["time_us"] / 1e6
    return out
