"""The forward ops of one transformer layer on one rank, shared by training and inference.

:func:`forward_layer_ops` emits every forward op of a layer after the tensor/expert-parallel split, vectorised
over *scenarios* (arrays: the layer keys of a training search, or the prefill pass and decode steps of an
inference prediction), to a caller's ``emit`` function. Training (:mod:`hybrid.workloads.llm.costing`) adds the
backward rows each op's ``bwd`` kind names and its own roles; inference (:mod:`hybrid.workloads.llm.inference`)
multiplies by the layers of a pipeline stage and adds the bytes of weight-only/KV formats. Prefill and decode
differ only in the token counts and the attention row the caller describes.

Ops (``name``: Vidur's ``mlp.csv`` names where it has them), per layer:

====================================  ==============================================================================
``input_layernorm``                   norm over ``[Tn, h]`` (``Tn``: tokens after a sequence-parallel split)
``attn_pre_proj``                     QKV ``linear`` ``[T, h] x [h, (q + 2 kv) d / tp]`` (KV heads replicated
                                      when fewer than TP ranks)
``attn_q_a_proj``, ``attn_q_a_norm``,  multi-head latent attention (DeepSeek) instead of ``attn_pre_proj``: the
``attn_q_b_proj`` (or                 query bottleneck (down-projection and its RMSNorm replicated on every TP
``attn_q_proj``), ``attn_kv_a_proj``,   rank, up-projection split by heads), the KV latent and rotary key
``attn_kv_a_norm``, then              (replicated); in a pass that computes new keys (prefill) the latent's
``attn_kv_b_proj`` or                 up-projection to per-head keys and values, in a decode step the absorbed
``attn_q_absorb`` / ``attn_v_absorb``   per-head GEMMs that map queries into the latent and the latent output
                                      back to value space (``mla_absorb`` per scenario)
``attn_rope``                         rotary embedding of q and k (``rotary_percent`` of each head); skipped when
                                      the attention kernel applies it (``fused_rope``)
``attn_qk_norm``                      per-head RMSNorm of q and k (Qwen3, ``qk_layernorm``)
``attention``                         fused attention, as the caller describes it (``None``: the caller adds it)
``attn_post_proj``                    output ``linear`` ``[T, q d / tp] x [q d / tp, h]``
``post_attention_layernorm``          second norm (not in single-norm parallel blocks: GPT-J)
``add``                               residual adds (``dropout`` variant with dropout), one per parallel block
``mlp_up_proj``, ``mlp_act``,         dense MLP (gated: gate and up in one GEMM)
``mlp_down_proj``
``moe_router``, ``moe_permute``,      MoE: router ``linear``, token permute and unpermute, the routed experts as one
``mlp_up_proj``, ``mlp_act``,         grouped GEMM (``b`` = experts hit on the busiest rank, :func:`moe_routing`,
                                      :func:`busiest_rank_experts`), and an
``mlp_down_proj``, ``shared_expert_*``  always-active shared expert
``tp_all_reduce`` (or all-gather +    TP collectives of ``[T, h]``: one per parallel block (two for sequential ones)
reduce-scatter with SP),
``ep_all_to_all``                     MoE dispatch and combine across EP ranks
====================================  ==============================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from hybrid.workloads.llm.model import TransformerConfig

#: Names of the MLP's ops (:func:`forward_layer_ops`): a dense layer's rows, or with category ``"moe"`` a MoE
#: layer's experts (which :func:`hybrid.workloads.llm.inference._static_batch` tells apart per pipeline stage).
MLP_OPS = ("mlp_up_proj", "mlp_act", "mlp_down_proj")
#: ``emit(part, name, category, count, op, bwd, **cols)``: ``part`` is ``"compute"``, ``"tp"`` or ``"ep"``;
#: ``count`` per layer (0 where the op does not run for a scenario); ``bwd`` how training derives the backward
#: rows: ``"linear"`` (data- and weight-gradient GEMMs), ``"experts"`` (grouped GEMM: same shape + weight
#: gradient), ``"same"`` (the same row, direction bwd; ``bwd_cols`` overrides columns), ``"none"``.
Emit = Callable[..., None]


def moe_routing(tokens: np.ndarray, experts: int, topk: int, ep: np.ndarray | int = 1
                ) -> tuple[np.ndarray, np.ndarray]:
    """(local experts hit, tokens per hit expert) for ``tokens`` tokens per rank routed top-``topk`` over
    ``experts`` experts split over ``ep`` ranks, assuming uniform routing: the EP group routes ``tokens x ep``
    tokens, which hit ``E (1 - (1 - k/E)^(T ep))`` distinct experts on expectation (all of them for any training
    batch; a few for a decode step of a small batch); their ``T ep k`` routed tokens are shared evenly. The share is
    the exact mean, not rounded: it is the ``m`` of the grouped GEMM whose ``b x m`` rows must add up to the routed
    tokens (flooring it lost 4% of them at 100 tokens top-8 of 128 experts: 768 rows for 800). The experts hit are
    the expectation too, not rounded: a memory-bound step's time is linear in the experts whose weights it reads,
    so its expected time is that of the expected count (2 Mixtral tokens hit 3.5 experts; rounded, 3.4999... came
    out 3, 14% of the experts' weight reads left out)."""
    T = np.asarray(tokens, dtype=np.float64)
    ep_ = np.asarray(ep, dtype=np.float64)
    E, k = float(experts), float(topk)
    hit = np.clip(E * -np.expm1(T * ep_ * np.log1p(-k / E)), 1.0, E) if k < E else np.full_like(T, E)
    hit = np.where(np.abs(hit - np.round(hit)) < 1e-9, np.round(hit), hit)  # whole counts (k at T = 1) stay exact
    local = np.maximum(hit / ep_, 1.0)  # a rank's mean (:func:`busiest_rank_experts`: the busiest rank's)
    per = np.maximum(T * k * ep_ / hit, 1.0)
    return local, per


def busiest_rank_experts(hit: np.ndarray, experts: int, ep: np.ndarray | int) -> np.ndarray:
    """Hit experts on the busiest of ``ep`` ranks holding ``experts / ep`` experts each, when ``hit`` of the
    ``experts`` are hit at random (uniform routing): a rank's count is hypergeometric (mean ``hit / ep``); the
    step waits for the busiest rank, taken as mean + sd x sqrt(2 ln ep) (the Gaussian extreme of ``ep`` draws),
    between the mean and ``min(experts / ep, hit)``. All experts hit: exactly ``experts / ep`` everywhere."""
    H = np.asarray(hit, dtype=np.float64)
    n = np.asarray(ep, dtype=np.float64) * np.ones_like(H)
    E = float(experts)
    mean = H / n
    var = H * (1.0 / n) * (1.0 - 1.0 / n) * np.maximum(E - H, 0.0) / max(E - 1.0, 1.0)
    top = mean + np.sqrt(var) * np.sqrt(2.0 * np.log(np.maximum(n, 1.0)))
    return np.clip(np.ceil(top - 1e-9), np.maximum(np.ceil(mean - 1e-9), 1.0), np.minimum(E / n, H))


def activation_variant(model: TransformerConfig) -> str:
    """The MLP activation kernel's elementwise variant."""
    return "swiglu" if model.gated else ("relu" if model.activation == "relu" else "gelu")


def forward_layer_ops(model: TransformerConfig, emit: Emit, *, tokens: np.ndarray, tp: np.ndarray | int,
                      gemm_dtype: str, act_dtype: str, act_bytes: float, attention: Mapping[str, Any] | None,
                      norm_tokens: np.ndarray | None = None, ep: np.ndarray | int = 1,
                      sp: np.ndarray | bool = False, tp_nodes: np.ndarray | int = 1, ep_nodes: np.ndarray | int = 1,
                      system: str = "", dropout: bool = False, fused_rope: bool = False,
                      dense_count: float = 1.0, moe_count: float = 0.0,
                      mla_absorb: np.ndarray | bool = False, ep_within_tp: bool = False,
                      group_tokens: np.ndarray | None = None) -> None:
    """Emit one layer's forward ops for every scenario (see the module docstring). ``tokens``: tokens through the
    layer's GEMMs on one rank; ``attention``: the attention row's columns (``count`` among them) or ``None``;
    ``dense_count`` / ``moe_count``: the share of dense and MoE MLP layers (training averages interleaved layers;
    inference has one kind). ``ep_within_tp`` (inference engines' MoE parallelism, TensorRT-LLM's ``moe_ep_size``
    x ``moe_tp_size`` = TP): the ``ep`` expert-parallel ranks are the TP ranks themselves, each holding whole
    experts split ``tp / ep`` ways and the same tokens, so no all-to-all (the MoE output joins the TP all-reduce)
    and only the rank's experts that its ``tokens`` hit are computed. ``group_tokens``: the tokens the EP group
    routes in all (default ``tokens x ep``: every rank as loaded as this one; attention data parallelism with fewer
    requests than ranks leaves some ranks without tokens)."""
    T = np.asarray(tokens)
    Tn = T if norm_tokens is None else np.asarray(norm_tokens)
    t = np.asarray(tp)
    one = np.ones(np.shape(T))
    h, d = model.hidden_size, model.head_dim
    heads = model.num_attention_heads // t
    kvh = -(-model.num_kv_heads // t)  # ceil: fewer KV heads than ranks are replicated
    norm_op = model.normalization.lower()
    gd, ad = gemm_dtype, act_dtype

    def linear(name: str, cat: str, m: Any, n: Any, k: Any, count: Any = 1.0) -> None:
        emit("compute", name, cat, count, "linear", "linear", b=1, m=m, n=n, k=k, dtype=gd)

    def norm(name: str, rows: Any, count: Any = 1.0, hidden: Any = h) -> None:
        emit("compute", name, "norm", count, norm_op, "same", rows=rows, hidden=hidden, dtype=ad)

    def ew(name: str, cat: str, variant: str, elements: Any, count: Any = 1.0, bwd_cols: Any = None,
           **kw: Any) -> None:
        emit("compute", name, cat, count, "elementwise", "same", bwd_cols=bwd_cols, variant=variant,
             elements=elements, dtype=ad, **kw)

    # ---------------------------------------------------------------- attention block
    norm("input_layernorm", Tn)
    if model.is_mla:
        nope, rope, v = int(model.qk_head_dim), int(model.qk_pos_emb_head_dim), int(model.v_head_dim)  # type: ignore[arg-type]
        ql, kvl = model.q_lora_rank, int(model.kv_lora_rank)  # type: ignore[arg-type]
        absorb = np.asarray(mla_absorb, dtype=np.float64) * one
        if ql:
            linear("attn_q_a_proj", "gemm", T, ql, h)
            norm("attn_q_a_norm", T, hidden=ql)
            linear("attn_q_b_proj", "gemm", T, heads * (nope + rope), ql)
        else:
            linear("attn_q_proj", "gemm", T, heads * (nope + rope), h)
        linear("attn_kv_a_proj", "gemm", T, kvl + rope, h)
        norm("attn_kv_a_norm", T, hidden=kvl)
        if model.position_embedding_type == "rope" and not fused_rope:  # the query heads' and the shared key's
            ew("attn_rope", "elementwise", "rope", T * (heads + 1) * rope)
        linear("attn_kv_b_proj", "gemm", T, heads * (nope + v), kvl, 1.0 - absorb)
        emit("compute", "attn_q_absorb", "gemm", absorb, "gemm", "experts", b=heads * one, m=T, n=kvl, k=nope,
             dtype=gd)
    else:
        linear("attn_pre_proj", "gemm", T, (heads + 2 * kvh) * d, h)
        if model.position_embedding_type == "rope" and not fused_rope:  # rotates rotary_percent of each head
            ew("attn_rope", "elementwise", "rope", np.round(T * (heads + kvh) * t * d * model.rotary_percent) // t)
        if model.qk_layernorm:
            emit("compute", "attn_qk_norm", "norm", 1.0, "rmsnorm", "same", rows=T * (heads + kvh), hidden=d,
                 dtype=ad)
    if attention is not None:
        att = dict(attention)
        emit("compute", "attention", "attention", att.pop("count", 1.0), "attention", "same", **att)
    if model.is_mla:
        emit("compute", "attn_v_absorb", "gemm", absorb, "gemm", "experts", b=heads * one, m=T, n=v, k=kvl,
             dtype=gd)
        linear("attn_post_proj", "gemm", T, h, heads * v)
    else:
        linear("attn_post_proj", "gemm", T, h, heads * d)
    n_blocks = 1 if model.parallel_attn else 2
    if not model.parallel_attn or model.parallel_attn_norms > 1:
        norm("post_attention_layernorm", Tn)
    if model.sandwich_norm:  # Gemma 2/3: norms after the attention output and after the MLP as well
        norm("sandwich_norms", Tn, 2.0)
    ew("add", "elementwise", "dropout" if dropout else "add", Tn * h, n_blocks, n_inputs=2, n_outputs=1)
    # ---------------------------------------------------------------- MLP
    act = activation_variant(model)
    up_mult = 2 if model.gated else 1
    if dense_count > 0:
        f = int(model.ffn_hidden_size)  # type: ignore[arg-type]
        linear("mlp_up_proj", "gemm", T, up_mult * f // t, h, dense_count)
        ew("mlp_act", "elementwise", act, T * f // t, dense_count,
           bwd_cols={"n_inputs": 3 if model.gated else 2, "n_outputs": 2 if model.gated else 1})
        linear("mlp_down_proj", "gemm", T, h, f // t, dense_count)
    if moe_count > 0 and model.is_moe:
        E, k = int(model.num_experts), int(model.moe_router_topk)  # type: ignore[arg-type]
        fm = int(model.moe_ffn_hidden_size)  # type: ignore[arg-type]
        if ep_within_tp:  # every rank sees all T tokens; its E / ep experts are split tp / ep ways
            et = np.maximum(t // np.asarray(ep), 1)
            hit, _ = moe_routing(T, E, k, 1)
            local = busiest_rank_experts(hit, E, ep)
            per = np.maximum(T * k / hit, 1.0)  # each hit expert's even share: local x per = routed
            routed = local * T * k / hit  # routed token rows the busiest rank's experts take (T k with ep = 1)
        else:  # the EP group routes T ep tokens; the step waits for the rank whose experts got most hits
            et = t
            ep_arr = np.asarray(ep, dtype=np.float64)
            G = T * ep_arr if group_tokens is None else np.asarray(group_tokens, dtype=np.float64) * one
            hit, _ = moe_routing(G, E, k, 1)
            local = busiest_rank_experts(hit, E, ep_arr)
            per = np.maximum(G * k / hit, 1.0)  # each hit expert's even share of the group's routed rows
            # the busiest rank's routed rows: its share G k / ep once every expert is hit (any training batch)
            routed = np.where(hit >= E, G * k / ep_arr, local * per)
        linear("moe_router", "moe", T, E, h, moe_count)
        ew("moe_permute", "moe", "copy", T * k * h, 2 * moe_count)  # permute and unpermute
        emit("compute", "mlp_up_proj", "moe", moe_count, "gemm", "experts", b=local, m=per, n=up_mult * fm // et,
             k=h, dtype=gd)
        ew("mlp_act", "moe", act, routed * fm // et, moe_count)
        emit("compute", "mlp_down_proj", "moe", moe_count, "gemm", "experts", b=local, m=per, n=h, k=fm // et,
             dtype=gd)
        fs = model.moe_shared_expert_intermediate_size
        if fs:  # an always-active dense expert beside the routed ones
            linear("shared_expert_up_proj", "moe", T, up_mult * fs // t, h, moe_count)
            ew("shared_expert_act", "moe", act, T * fs // t, moe_count)
            linear("shared_expert_down_proj", "moe", T, h, fs // t, moe_count)
        ep_ = np.asarray(ep) * one
        if (ep_ > 1).any() and not ep_within_tp:
            emit("ep", "ep_all_to_all", "comm", 2 * moe_count * (ep_ > 1), "all_to_all", "same",
                 size_bytes=(T * k * h * act_bytes).astype(np.float64), n_ranks=ep_, n_nodes=ep_nodes, dtype=ad,
                 system=system)
    # ---------------------------------------------------------------- TP collectives
    tt = t * one
    multi = tt > 1
    if multi.any():
        size = (T * h * act_bytes).astype(np.float64)
        seq = np.asarray(sp, dtype=bool) & multi
        ar = multi & ~seq
        common = {"size_bytes": size, "n_ranks": tt, "n_nodes": tp_nodes, "dtype": ad, "system": system}
        if ar.any():
            emit("tp", "tp_all_reduce", "comm", n_blocks * ar, "all_reduce", "same", **common)
        if seq.any():
            emit("tp", "tp_all_gather", "comm", n_blocks * seq, "all_gather", "same", **common)
            emit("tp", "tp_reduce_scatter", "comm", n_blocks * seq, "reduce_scatter", "same", **common)
