"""Memory per rank of LLM training, vectorised over mappings.

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
Section 4): per layer and microbatch, in bytes, with ``s`` tokens, batch ``b``, hidden ``h``, ``a`` heads,
TP ``t`` (16-bit activations, 1-byte dropout masks)::

    no parallelism          s b h (34 + 5 a s / h)
    TP, no SP               s b h (10 + 24 / t + 5 a s / (h t))
    TP + SP                 s b h (34 + 5 a s / h) / t
    TP + SP + selective     s b h 34 / t
    full recomputation      2 s b h (/ t with SP)  per layer, + one layer's activations while it is recomputed

The 34 is built from its parts so other shapes fit (GQA narrows K/V, SwiGLU widens the MLP, no dropout drops
the masks): layer norms 4h, QKV input 2h, Q and K 2q + 2kv, V 2kv, output-projection input 2q, attention dropout
mask h, MLP input 2h, activation input 2f (4f gated) and output 2f, MLP dropout mask h. A MoE layer keeps, per token, its
``k`` experts' activations, the dispatched copies (``2 k h``) and a shared expert's MLP activations. The ``5 a s`` score
term (softmax output 2, dropout mask 1, dropout output 2; ``2 a s`` without attention dropout) is absent with
FlashAttention and with selective recomputation. Of these, with TP and no SP, the norms, the QKV and MLP inputs and the two dropout masks
(10h for MHA) are replicated on every TP rank; the rest is split. A parallel-attention layer (GPT-J, GPT-NeoX,
Falcon) feeds one input to both blocks: its norms' input is stored once (2h), and with a single norm so is the
QKV / MLP input (2h for both; 4h with two norms). Gemma 2/3's sandwich norms after the attention block and the
MLP keep those blocks' outputs (4h more). When TP exceeds the KV heads, each rank
holds whole K/V heads (``ceil(kv_heads / t)`` of them, replicated), not ``kv / t`` columns.

In flight on the first pipeline stage (Korthikanti eq. 5, Narayanan et al. 2021): 1F1B holds ``min(pp, m)``
microbatches of its ``L/pp`` layers; the interleaved schedule ``(pp - 1) x 2 + (vp - 1) x pp + 1`` model chunks
of ``L/(pp vp)`` layers (``L (1 + (pp - 1)/(pp vp))`` layers' worth), ``min(m, 2 pp)`` of them of the first chunk
(the embedding's dropout mask). The last stage adds the output layer and
the fp32 cross-entropy (``4 s b h / t (1 + v / h)`` with SP; without it the ``4 s b h`` of the final norm's and
the output layer's inputs is whole on every TP rank). Context parallelism over sliding-window or chunked layers
(an all-gather of K and V, not the ring) adds, on every stage, one layer's whole-sequence K and V with their
gradients while it runs backward: ``2 x b s 2 kv / t`` in the activation dtype (``s`` the whole sequence).

Model states per parameter (mixed precision, Adam): 16-bit weights 2 + fp32 gradient 4 + fp32 master weights 4 +
Adam moments 8 = 18 bytes; the distributed optimizer shards the last 12 over DP (``6 + 12/dp``). Gradients reduced
in 16 bit (``grad_reduce_dtype``) take 2 bytes in the buffer and the optimizer keeps fp32 main grads beside its
master weights: 20 bytes, ``4 + 16/dp`` sharded (Megatron-LM's distributed-optimizer table); fp32 training keeps no
master copy (16 bytes, ``8 + 8/dp``). FSDP shards all
16 bytes of fp32 state over DP and adds two gathered layers (current + prefetched) of weights and their gradients
in the gather dtype (16-bit; fp32 when training in fp32); with pipeline parallelism the whole stage stays gathered through the step with its gradients accumulated
unsharded in the reduce dtype (torchtitan's default with PP). A stated framework reserve (CUDA context, NCCL buffers, allocator fragmentation) is added.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from hybrid.units import DTYPE_BYTES
from hybrid.workloads.llm.config import TrainingConfig
from hybrid.workloads.llm.costing import cp_local_share, gradient_groups, kv_width_split
from hybrid.workloads.llm.model import TransformerConfig

GIB = 2.0**30


def activation_bytes_per_token(model: TransformerConfig, cfg: TrainingConfig, tp: np.ndarray, sp: np.ndarray,
                               recompute: np.ndarray, seq: int) -> tuple[np.ndarray, np.ndarray]:
    """(stored bytes per token per layer, one layer's full activations per token) on one TP rank, in the job's
    activation dtype (fp32 for fp32 training, 16-bit otherwise; dropout masks are 1 byte either way)."""
    t = np.asarray(tp, dtype=np.float64)
    # the parts below are counted in 2-byte elements (Korthikanti's 16-bit activations): fp32 training doubles them
    wide = DTYPE_BYTES["fp32"] / 2.0 if cfg.dtype == "fp32" else 1.0
    sp = np.asarray(sp, dtype=bool)
    h, q = model.hidden_size, model.q_width
    kv = kv_width_split(model, t)  # KV heads replicated when TP exceeds them
    # MLA also stores its latents (query bottleneck, KV latent and rotary key) for the backward pass
    latent = 2.0 * ((model.q_lora_rank or 0) + model.mla_latent_width) if model.is_mla else 0.0
    f = model.ffn_hidden_size
    a = model.num_attention_heads
    mask = 1.0 if cfg.uses_dropout(model) else 0.0
    attn_mask = 1.0 if cfg.uses_attention_dropout(model) else 0.0  # OPT: hidden dropout only
    if model.parallel_attn:
        # both blocks read the layer's input (one norm: the same norm output too); autograd saves a tensor that
        # several ops read once: the norms' input 2h once, the QKV and MLP inputs 2h (one norm) or 4h (two)
        norm_inputs = 2.0 * h
        block_inputs = 2.0 * h * (1 if model.parallel_attn_norms == 1 else 2)
    else:
        norm_inputs, block_inputs = 4.0 * h, 4.0 * h  # two norms' inputs, the QKV and MLP inputs
    if model.sandwich_norm:  # Gemma 2/3: the norms after the attention and the MLP keep those blocks' outputs
        norm_inputs += 4.0 * h
    if model.is_moe:
        k = model.moe_router_topk
        fm = model.moe_ffn_hidden_size
        mlp_split_moe = k * ((4 if model.gated else 2) * fm + 2 * fm) + 2 * k * h  # expert acts + dispatched copy
        fs = model.moe_shared_expert_intermediate_size or 0
        # the always-active shared expert (DeepSeek, Llama 4) keeps its own MLP activations, split over TP as it is
        mlp_split_moe += (4 if model.gated else 2) * fs + 2 * fs
        frac = model.num_moe_layers / model.num_layers
        mlp_split = (1 - frac) * ((4 if model.gated else 2) * f + 2 * f) + frac * mlp_split_moe
    else:
        mlp_split = (4 if model.gated else 2) * f + 2 * f
    # norms, QKV / MLP inputs, latents; the two 1-byte dropout masks
    replicated = wide * (norm_inputs + block_inputs + latent) + 2 * mask * h
    # Q, K  V  attention output (heads x value head dim: MLA's 128 against its 192-wide queries)  MLP activations
    split = (2 * q + 2 * kv) + 2 * kv + 2 * model.value_width + mlp_split
    if model.qk_layernorm:
        split += 2 * q + 2 * kv
    split = wide * split
    # 5 a s with dropout: softmax output 2, its dropout's output 2 (in the activation dtype), the mask 1
    scores = 0.0 if cfg.flash_attention else (wide * (2.0 + 2.0 * attn_mask) + attn_mask) * a * seq
    scores_kept = np.where(np.isin(recompute, ["selective", "full"]), 0.0, scores)
    full_layer = np.where(sp, (replicated + split + scores) / t, replicated + (split + scores) / t)
    stored = np.where(sp, (replicated + split + scores_kept) / t, replicated + (split + scores_kept) / t)
    ckpt = wide * np.where(sp, 2.0 * h / t, 2.0 * h)
    stored = np.where(recompute == "full", ckpt, stored)
    return stored, full_layer


@dataclass
class MemoryBreakdown:
    """Bytes per rank (arrays aligned with the mappings), most loaded stage."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    logits: np.ndarray
    gathered: np.ndarray  # FSDP unsharded layers
    reserve: np.ndarray
    capacity: float

    @property
    def total(self) -> np.ndarray:
        return (self.weights + self.gradients + self.optimizer + self.activations + self.logits + self.gathered
                + self.reserve)

    @property
    def fits(self) -> np.ndarray:
        return self.total <= self.capacity

    def row(self, i: int = 0) -> dict[str, float]:
        parts = {k: float(getattr(self, k)[i]) / GIB for k in
                 ("weights", "gradients", "optimizer", "activations", "logits", "gathered", "reserve")}
        parts["total"] = float(self.total[i]) / GIB
        parts["capacity"] = self.capacity / GIB
        return parts

    def reason(self, i: int = 0) -> str:
        r = self.row(i)
        if r["total"] <= r["capacity"]:
            return f"fits: {r['total']:.1f} of {r['capacity']:.1f} GiB"
        big = max(("weights", "gradients", "optimizer", "activations", "logits", "gathered"), key=lambda k: r[k])
        return (f"needs {r['total']:.1f} GiB per GPU, capacity {r['capacity']:.1f} GiB "
                f"(largest part: {big} {r[big]:.1f} GiB)")


def memory_per_rank(model: TransformerConfig, cfg: TrainingConfig, m: pd.DataFrame, params: dict[str, np.ndarray],
                    capacity: float) -> MemoryBreakdown:
    """Memory of the most loaded pipeline stage for every mapping row of ``m``."""
    tp = m["tp"].to_numpy(np.float64)
    pp = m["pp"].to_numpy(np.int64)
    dp = m["dp"].to_numpy(np.float64)
    cp = m["cp"].to_numpy(np.float64)
    vp = m["vp"].to_numpy(np.int64)
    mb = m["mb"].to_numpy(np.float64)
    sp = m["sp"].to_numpy(bool) & (tp > 1)
    rc = m["recompute"].to_numpy(dtype=object).astype(str)
    distopt = m["distopt"].to_numpy(bool)
    fsdp = m["fsdp"].to_numpy(bool)
    seq = cfg.seq(model)
    n_micro = cfg.global_batch / (mb * dp)
    L = model.num_layers
    fp32 = cfg.dtype == "fp32"
    wb = 4.0 if fp32 else 2.0  # 16-bit weights (fp8 training keeps bf16 weights; the fp8 copies are transient)
    master = 0.0 if fp32 else 4.0  # fp32 training needs no separate master copy
    # ------------------------------------------------------------------ model states
    layer_p = params["layers"] * pp / L
    pb, gb = DTYPE_BYTES[cfg.fsdp_gather_dtype], DTYPE_BYTES[cfg.grad_dtype]

    def states(P: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(weights, gradients, optimizer, gathered) of a rank holding ``P`` parameters."""
        # sharded states (distributed optimizer, FSDP): dense parameters over DP x CP, experts over DP x CP / EP
        shard = gradient_groups(m, {**params, "max": P}).sharded()
        # FSDP: the fp32 flat-parameter shard is the master copy (4/dp), gradients 4/dp, Adam moments 8/dp
        weights = np.where(fsdp, 4.0 * shard, wb * P)
        # Megatron's gradient buffer holds every parameter's gradient in the reduce dtype (fp32 by default for bf16,
        # 16 bit with --grad-reduce-in-bf16 / fp16 without --accumulate-allreduce-grads-in-fp32); the mixed-precision
        # optimizer then copies its (shard of the) reduced 16-bit gradients into fp32 main grads: 2 + 4 instead of 4
        # bytes, the "float16 param, float16 grads" row of Megatron's distributed-optimizer table (20 bytes per
        # parameter, 4 + 16 / d sharded, against 18 and 6 + 12 / d with fp32 grads)
        main_grads = 4.0 if (gb < 4.0 and not fp32) else 0.0
        grads = np.where(fsdp, 4.0 * shard, gb * P)
        opt_bytes = 8.0 + master + main_grads  # Adam moments, fp32 master weights, fp32 main grads
        optim = np.where(fsdp, 8.0 * shard, np.where(distopt, opt_bytes * shard, opt_bytes * P))
        # FSDP: two layers gathered (the one computing and the prefetched one) with their gradients, both in the
        # gather dtype (16-bit under mixed precision, fp32 for fp32 training); with PP the whole stage stays
        # gathered through the step, its gradients accumulated unsharded in the reduce dtype (torchtitan / PyTorch
        # pipelining, see schedule.py)
        gathered = np.where(fsdp, np.where(pp > 1, P * (pb + gb), 2 * layer_p * (pb + pb)), 0.0)
        return weights, grads, optim, gathered

    # each stage's own parameters beside its own activations (below): the first stage's; a middle stage heavier
    # than the first (more MoE layers) against the first stage's activations (a middle stage holds no more
    # microbatches in flight: a bound); the last stage's beside its activations and logits
    P_last = np.asarray(params["last"], dtype=np.float64)
    P_first = np.maximum(params["first"], params.get("middle", 0.0))
    first_states = states(P_first)
    last_states = states(P_last)
    # ------------------------------------------------------------------ activations
    stored, full_layer = activation_bytes_per_token(model, cfg, tp, sp, rc, seq)  # fp32 training's included
    tokens = mb * seq / cp
    layers_pp = L / pp
    inflight_1f1b = np.minimum(pp, n_micro) * layers_pp
    chunks = np.minimum((pp - 1) * 2 + (vp - 1) * pp + 1, n_micro * vp)
    inflight_int = chunks * L / (pp * vp)
    inflight = np.where(vp > 1, inflight_int, inflight_1f1b)
    # CP with sliding-window / chunked layers: their all-gather CP (costing.py, roles cpgf / cpgb) holds one layer's
    # whole-sequence K and V on every rank; its backward (Transformer Engine's AttnFuncWithCPAndKVAllGather) gathers
    # them again beside whole-sequence dK and dV buffers before the reduce-scatter: twice that, one layer at a time,
    # on any stage (in the activation dtype, replicated KV heads when TP exceeds them)
    adt_bytes = DTYPE_BYTES["bf16" if cfg.dtype == "fp8" else cfg.dtype]
    kv_full = mb * seq * 2.0 * kv_width_split(model, tp) / tp * adt_bytes
    cp_gather = np.where((cp > 1) & (cp_local_share(model) > 0), 2.0 * kv_full, 0.0)
    transient = np.where(rc == "full", tokens * full_layer, 0.0) + cp_gather
    acts = tokens * stored * inflight + transient
    # embedding dropout mask per in-flight microbatch of the first stage's first chunk: pp under 1F1B; interleaved,
    # Megatron's order keeps up to two rounds of pp microbatches of chunk 0 alive (min(m, 2 pp), at the same time as
    # the peak of all chunks), not the chunks / vp of an even spread
    h = model.hidden_size
    n_inflight_mb = np.where(vp > 1, np.minimum(n_micro, 2 * pp), np.minimum(pp, n_micro))
    acts = acts + (1.0 if cfg.uses_dropout(model) else 0.0) * tokens * h * np.where(sp, 1 / tp, 1.0) * n_inflight_mb
    # ------------------------------------------------------------------ output layer + loss (last stage)
    V = np.ceil(model.vocab_size / (cfg.make_vocab_size_divisible_by * tp)) * cfg.make_vocab_size_divisible_by * tp
    # Korthikanti's 4 s b h / t (1 + v / h): the final norm's input and the output layer's input (2 + 2 bytes per
    # element in 16 bit, twice that in fp32), split over TP by SP and whole on every TP rank without it, and the fp32
    # logits of the rank's vocabulary slice for the cross entropy
    head_inputs = 4.0 * h * (2.0 if fp32 else 1.0) * np.where(sp, 1.0 / tp, 1.0)
    logits = tokens * (head_inputs + 4.0 * V / tp)
    if not model.lm_head:  # a classifier scores the last token of each sequence (fp32), a bare model nothing
        logits = 4.0 * mb * (h + model.head_width) if model.head_width else 0.0 * tokens
    # the logits live on the last stage; when pp > 1 the first stage's activations usually dominate
    # the last stage: one microbatch in flight under 1F1B; (vp - 1) x pp + 1 chunks interleaved (its warm-up)
    chunks_last = np.where(vp > 1, np.minimum((vp - 1) * pp + 1, n_micro * vp), 1)
    last_only = tokens * stored * chunks_last * L / (pp * vp) + transient
    # the peak is the stage whose whole sum is highest (its own states beside its own activations): the busiest
    # stage's parameters beside the last stage's activations overstated a last-stage peak (GPT-3 125M on 2
    # stages: the first stage's position table, 0.026 GiB)
    last_total = sum(last_states) + last_only + logits
    first_total = sum(first_states) + acts
    pick_last = (pp > 1) & (last_total > first_total)
    weights, grads, optim, gathered = (np.where(pick_last, b, a) for a, b in zip(first_states, last_states,
                                                                                   strict=True))
    activations = np.where(pick_last, last_only, acts)
    logits_part = np.where(pp > 1, np.where(pick_last, logits, 0.0), logits)
    reserve = np.full(len(m), cfg.reserve_gib * GIB)
    return MemoryBreakdown(weights, grads, optim, activations, logits_part, gathered, reserve, capacity)
