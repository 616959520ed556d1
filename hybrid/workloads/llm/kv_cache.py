"""Inference memory per GPU: weights, KV cache, activations, a stated reserve; the largest batch that fits.

KV cache per token (whole model): ``2 (K and V) x layers x kv_heads x head_dim x kv_bytes``; per GPU it is split
over tensor parallelism by KV heads (a rank holds ``ceil(kv_heads / tp)`` heads, so MQA/GQA with fewer KV
heads than ranks replicates them) and over pipeline stages by layers. Multi-head latent attention (DeepSeek)
caches one latent plus one rotary key per token and layer (``kv_lora_rank + qk_pos_emb_head_dim`` elements,
576 for DeepSeek-V3), shared by all heads, so every TP rank holds all of it. Mistral's sliding window caps the cached
tokens per request, Llama 4's chunked attention at a chunk (the most a request holds on those layers). Weights per GPU: the layers of one pipeline stage split over TP, the embedding and the
output layer (vocab-parallel) on the first/last stage (both counted on the bottleneck stage when pp = 1).
Activations: the prefill working set of the largest batch of tokens processed at once (the widest intermediate:
QKV or the MLP's up/gate output, plus the residual stream twice) and the fp32 logits of the last tokens.
Reserve: CUDA context, cuBLAS/NCCL workspaces and allocator slack, ``reserve_gib`` (default 2 GiB), stated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from hybrid.errors import InvalidInputError
from hybrid.workloads.llm.costing import kv_width_split
from hybrid.workloads.llm.dims import expert_ffn
from hybrid.workloads.llm.model import TransformerConfig
from hybrid.workloads.llm.precision import Precision

GIB = 2.0**30
#: Memory kept back for the runtime (CUDA context, library workspaces, fragmentation), GiB.
DEFAULT_RESERVE_GIB = 2.0
#: The most tokens a request length, a batch or a batch's whole prompt and output may hold (a request length from a
#: distribution or a trace file too): far beyond any model's context and any GPU's KV cache (so such a request is
#: refused as not fitting, with its length), and small enough that token counts, their sums and the op tables'
#: element counts (tokens x hidden x ...) stay exact integers (a count of 1e30 had wrapped round to a negative int64
#: and "fit"; a 2^39-token prompt failed inside the op table, 2^67 as an OverflowError).
MAX_TOKENS = 1 << 40
#: The longest request (prompt + output) a static batch is predicted for: 6x the longest context any model offers
#: (Llama 4 Scout, 10M tokens), and small enough that a prefill's attention elements (tokens^2 x heads) stay inside
#: the op tables' exact range (a 2^39-token prompt failed inside them, naming an internal row).
MAX_REQUEST_TOKENS = 1 << 26


def check_parallel(model: TransformerConfig, tp: int, pp: int) -> None:
    """TP must divide the attention heads (and the FFN width), PP must not exceed the layers."""
    for name, v in (("tp", tp), ("pp", pp)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise InvalidInputError(f"{name} must be a positive integer, got {v!r}")
    if model.num_attention_heads % tp:
        raise InvalidInputError(f"tp={tp} does not divide the {model.num_attention_heads} attention heads of "
                                f"{model.name}")
    if expert_ffn(model) % tp:
        raise InvalidInputError(f"tp={tp} does not divide the FFN width {expert_ffn(model)} of {model.name}")
    if model.num_query_groups % tp and tp % model.num_query_groups:
        raise InvalidInputError(f"tp={tp} and the {model.num_query_groups} KV heads of {model.name} do not divide "
                                "one another")
    if pp > model.num_layers:
        raise InvalidInputError(f"pp={pp} exceeds the {model.num_layers} layers of {model.name}")


def kv_heads_per_rank(model: TransformerConfig, tp: int) -> int:
    """KV heads a TP rank keeps (MLA: 1, the shared latent)."""
    return 1 if model.is_mla else math.ceil(model.num_query_groups / tp)


def kv_bytes_per_token(model: TransformerConfig, precision: Precision, tp: int = 1, pp: int = 1,
                       attention_dp: bool = False) -> float:
    """KV-cache bytes one token occupies on one GPU (``tp = pp = 1``: the whole model). ``attention_dp``: attention
    runs data-parallel over the TP ranks, each rank caching every head of its own requests' tokens."""
    if attention_dp:
        tp = 1
    layers = math.ceil(model.num_layers / pp)
    if model.is_mla:  # the latent and the rotary key, replicated on every TP rank
        return float(layers * model.mla_latent_width * precision.kv_bytes)
    return 2.0 * layers * kv_heads_per_rank(model, tp) * model.kv_channels * precision.kv_bytes


def cached_tokens(model: TransformerConfig, context: int | np.ndarray) -> np.ndarray:
    """Tokens a request of ``context`` tokens keeps in the cache (a sliding window caps it; chunked attention at
    a chunk, the most a request holds whatever its position within the current chunk: the worst case a serving
    system reserves, and what a decode step at that context is costed to read)."""
    c = np.asarray(context, dtype=np.float64)
    cap = model.kv_cap
    if not cap:
        return c
    share = model.kv_cap_share  # local layers keep the window (or chunk), global ones everything
    return share * np.minimum(c, cap) + (1.0 - share) * c


def attended_keys(model: TransformerConfig, q_len: np.ndarray, context: np.ndarray) -> np.ndarray:
    """Keys per query of the attention row of a pass with ``q_len`` new tokens of a ``context``-token sequence:
    the cached tokens (:func:`cached_tokens`), except a chunked model's prefill, whose within-chunk pairs are
    counted exactly (:meth:`TransformerConfig.causal_kv_len`)."""
    if not model.attention_chunk_size:
        return cached_tokens(model, context)
    return np.asarray(model.causal_kv_len(q_len, context), dtype=np.float64)


def mean_context(model: TransformerConfig, contexts: np.ndarray, steps: int = 1) -> np.ndarray:
    """The one context length whose cache (:func:`cached_tokens`) is the mean cache of requests at ``contexts``,
    for each of ``steps`` consecutive decode steps (every context one token longer per step): what a batched
    decode step reads is the sum of the requests' caches, so a step of ``n`` requests costs as ``n`` requests at
    this context. Without a sliding window that is the mean context; with one, the mean of the capped caches, not
    the cap of the mean (requests of 100 and 12,000 tokens under a 4096-token window cache 2,098 tokens on
    average, not 4,096)."""
    c = np.sort(np.asarray(contexts, dtype=np.float64).ravel())
    j = np.arange(max(int(steps), 0), dtype=np.float64)
    if not len(c):
        return np.zeros_like(j)
    if not model.kv_cap:
        return float(c.mean()) + j
    w, share = float(model.kv_cap), model.kv_cap_share
    # mean over the requests of min(c_i + j, w): those still below the window grow, the others stay at it
    below = np.searchsorted(c, w - j, side="left")  # requests with c_i + j < w
    prefix = np.concatenate([[0.0], np.cumsum(c)])
    capped = (prefix[below] + below * j + (len(c) - below) * w) / len(c)
    if share >= 1.0:  # every layer windowed: a context up to the window caches itself
        return np.minimum(capped, w)
    cached = share * capped + (1.0 - share) * (float(c.mean()) + j)
    # invert cached_tokens: up to the window a context caches itself; beyond it only the global layers grow
    return np.where(cached <= w, cached, w + (cached - w) / (1.0 - share))


def layer_matrix_params(model: TransformerConfig) -> int:
    """One layer's GEMM weights (the part weight-only formats store compressed): Q/K/V/output projections and the
    MLP matrices (MoE: every expert, the router and a shared expert with its gate). The rest of the layer's
    parameters (biases, norms, QK-norms) are :meth:`TransformerConfig.param_counts` minus these."""
    dense, moe = _layer_matrix_params_by_kind(model)
    if not model.is_moe:
        return dense
    # a mean over the layers when some are dense (DeepSeek's first layers, interleaved MoE)
    return round((model.num_moe_layers * moe + model.num_dense_layers * dense) / model.num_layers)


def _layer_matrix_params_by_kind(model: TransformerConfig) -> tuple[int, int]:
    """GEMM weights of one dense layer and of one MoE layer (0 for a dense model)."""
    h, mats = model.hidden_size, (3 if model.gated else 2)
    attention = model.mla_matrix_params() if model.is_mla else h * (model.q_width + 2 * model.kv_width) + model.q_width * h
    dense = attention + mats * h * int(model.ffn_hidden_size)  # type: ignore[arg-type]
    if not model.is_moe:
        return dense, 0
    e = int(model.num_experts)  # type: ignore[arg-type]
    shared = model.moe_shared_expert_intermediate_size or 0
    gate = h if model.moe_shared_expert_gate else 0
    return dense, attention + e * mats * h * expert_ffn(model) + h * e + (mats * h * shared + gate if shared else 0)


def routed_expert_params(model: TransformerConfig) -> float:
    """One layer's routed-expert GEMM weights (a mean over the layers when some are dense); 0 for dense models."""
    if not model.is_moe:
        return 0.0
    mats = 3 if model.gated else 2
    per_moe_layer = int(model.num_experts) * mats * model.hidden_size * expert_ffn(model)  # type: ignore[arg-type]
    return per_moe_layer * model.num_moe_layers / model.num_layers


def weight_bytes_per_gpu(model: TransformerConfig, precision: Precision, tp: int = 1, pp: int = 1,
                         attention_dp: bool = False, parallel_embedding: bool = True) -> float:
    """Bytes of weights on the most loaded GPU (the bottleneck pipeline stage), from the model's exact parameter
    count (:meth:`TransformerConfig.param_counts`): GEMM weights in the weight format split over TP; biases and
    norms in 16 bit (counted whole on every rank); the word embedding (vocab-parallel) and a learned position
    embedding stay 16 bit on the first stage, the final norm and the output layer (16 bit too: quantisers
    leave it out; a tied one a copy of the embedding with PP > 1) on the last. When TP
    exceeds the KV heads, each rank holds whole replicated KV heads (``ceil(kv_heads / tp)`` of them, the K and V
    columns of :func:`hybrid.workloads.llm.costing.kv_width_split`), not ``kv_heads / tp`` of a head.
    ``attention_dp``: only the routed experts are split over the TP ranks (expert parallelism); attention, dense
    layers, embeddings and the output layer are whole on every rank. ``parallel_embedding`` False: the input
    embedding table is whole on every rank (TensorRT-LLM's engines without ``use_parallel_embedding``), and the
    output layer, split over TP, is a copy of its own even when the model ties it to the embedding (TensorRT-LLM's
    ``share_embedding_table`` needs a vocab-parallel table)."""
    c = model.param_counts()
    matrix = layer_matrix_params(model)
    per_layer_total = c["layers_total"] / model.num_layers
    split = tp

    def layer_bytes(mat: float, experts: float) -> float:
        """One layer of ``mat`` GEMM weights (``experts`` of them routed experts) on one GPU."""
        if attention_dp:
            mb = (experts / tp + (mat - experts)) * precision.weight_bytes
        else:
            # K and V projections of replicated KV heads (TP above the KV heads): columns beyond kv_width
            kv_extra = 2.0 * model.hidden_size * (float(kv_width_split(model, tp)) - model.kv_width)
            mb = (mat + kv_extra) / tp * precision.weight_bytes
        return mb + (per_layer_total - matrix) * precision.act_bytes

    if attention_dp:
        split = 1
    embed = (c["word_embedding"] / (split if parallel_embedding else 1) + c["position_embedding"]) * precision.act_bytes
    # the output layer stays 16-bit in quantised deployments (:data:`hybrid.workloads.llm.inference.HEAD_16BIT`)
    # (vocab-parallel; a classifier's score layer is replicated)
    head = (c["output_layer"] / (split if model.lm_head else 1) * precision.act_bytes
            + c["final_norm"] * precision.act_bytes)
    if model.tied_output and (pp > 1 or not parallel_embedding):
        # a tied output layer is the embedding itself on one stage; with PP the last stage holds its own copy (vLLM
        # builds embed_tokens on the first rank and, tied, on the last)
        head += c["word_embedding"] / split * precision.act_bytes
    per_stage = math.ceil(model.num_layers / pp)
    if pp == 1 or not model.is_moe or model.num_dense_layers == 0:
        per_layer = layer_bytes(matrix, routed_expert_params(model))
        if pp == 1:
            return model.num_layers * per_layer + embed + head
        return per_stage * per_layer + max(embed, head)
    # MoE layers and dense ones differ by the experts: the heaviest stage holds the most MoE layers
    dense_mat, moe_mat = _layer_matrix_params_by_kind(model)
    routed = routed_expert_params(model) * model.num_layers / model.num_moe_layers  # one MoE layer's
    moe_l, dense_l = layer_bytes(moe_mat, routed), layer_bytes(dense_mat, 0.0)
    n_moe = np.asarray(model.moe_layers_per_rank(pp), dtype=np.int64)
    n_layers = np.asarray(model.layers_per_rank(pp), dtype=np.int64)
    stage = n_moe * moe_l + (n_layers - n_moe) * dense_l
    stage[0] += embed
    stage[-1] += head
    return float(stage.max())


def activation_bytes(model: TransformerConfig, precision: Precision, tokens: float | np.ndarray, sequences: float | np.ndarray,
                     tp: int = 1) -> np.ndarray:
    """Peak activation working set on one GPU for ``tokens`` processed in one forward pass."""
    h = model.hidden_size
    qkv = (model.q_width + 2 * float(kv_width_split(model, tp))) / tp  # whole KV heads per rank (replicated)
    if model.is_mla:  # the latent the keys and values are expanded from (prefill), on every rank
        qkv += model.mla_latent_width
    # gated: gate+up output (2f) and the activation (f); GeLU: up output and activation (2f)
    ffn = expert_ffn(model) / tp * (3 if model.gated else 2)
    if model.is_moe:
        ffn *= model.moe_router_topk
        if model.num_dense_layers:  # dense layers between the MoE ones can be wider (Llama 4 Maverick: 16384
            # against top-1 of 8192; DeepSeek-V3's first three: 18432 against top-8 of 2048)
            ffn = max(ffn, int(model.ffn_hidden_size) / tp * (3 if model.gated else 2))  # type: ignore[arg-type]
    per_token = precision.act_bytes * (2 * h + max(qkv, ffn))
    # fp32 logits of the last tokens: over the vocabulary split over TP, a classifier's labels, or none
    width = model.vocab_size / tp if model.lm_head else model.head_width
    logits = np.asarray(sequences, dtype=np.float64) * width * 4.0
    return np.asarray(tokens, dtype=np.float64) * per_token + logits


@dataclass(frozen=True)
class MemoryPlan:
    """Memory per GPU for one configuration (bytes) and whether it fits."""

    capacity: float
    weights: float
    kv_cache: float
    activations: float
    reserve: float
    kv_per_token: float
    kv_per_request: float
    max_batch: int
    fits: bool
    reason: str

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.activations + self.reserve

    def to_dict(self) -> dict[str, float | int | bool | str]:
        g = {k: getattr(self, k) / GIB for k in ("capacity", "weights", "kv_cache", "activations", "reserve")}
        return {**{f"{k}_gib": v for k, v in g.items()}, "total_gib": self.total / GIB,
                "kv_per_token_bytes": self.kv_per_token, "kv_per_request_mib": self.kv_per_request / 2**20,
                "max_batch": self.max_batch, "fits": self.fits, "reason": self.reason}


def _gib(x: np.ndarray) -> np.ndarray:
    return np.char.add(np.char.mod("%.1f", np.asarray(x, dtype=np.float64) / GIB), " GiB")


def check_generates(model: TransformerConfig, output_len: np.ndarray | int) -> None:
    """Refuse generated tokens of a model without a language-model head (a sequence classifier such as a reward
    model, or a bare model): it scores (or embeds) a sequence in one forward pass and samples nothing, so its
    requests have one output (``output_len`` 1, the prefill's); more were costed as decode steps it never runs."""
    out = np.asarray(output_len)
    if not model.lm_head and out.size and int(out.max()) > 1:
        what = "a sequence classifier" if model.output_head == "classifier" else "a model without an output layer"
        raise InvalidInputError(f"model {model.name!r} is {what} (no language-model head): it generates no tokens, so "
                                f"every request has output length 1 (one forward pass), got {int(out.max())}")


def memory_table(model: TransformerConfig, precision: Precision, capacity: float, *, batch: np.ndarray,
                 input_len: np.ndarray, output_len: np.ndarray, tp: int = 1, pp: int = 1,
                 reserve_gib: float = DEFAULT_RESERVE_GIB, prefill_tokens: int | None = None,
                 attention_dp: bool = False, parallel_embedding: bool = True) -> pd.DataFrame:
    """Memory for many configurations of one deployment at once (arrays of batch, input and output lengths): the
    columns of :class:`MemoryPlan` per row. The largest batch is found by a vectorised bisection (memory grows
    with the batch). ``attention_dp``: the batch is spread over the TP ranks (each caches and runs its
    ``ceil(batch / tp)`` requests whole), only the experts are split (:func:`weight_bytes_per_gpu`)."""
    bt, inp, out = (np.asarray(x, dtype=np.int64).reshape(-1) for x in (batch, input_len, output_len))
    for name, v in (("batch", bt), ("input_len", inp), ("output_len", out)):
        if (v < 1).any():
            raise InvalidInputError(f"{name} must be a positive integer, got {int(v.min())}")
    check_generates(model, out)
    if not (np.isfinite(reserve_gib) and reserve_gib >= 0):
        raise InvalidInputError(f"reserve must be a finite number >= 0 GiB, got {reserve_gib}")
    check_parallel(model, tp, pp)
    w = weight_bytes_per_gpu(model, precision, tp, pp, attention_dp, parallel_embedding)
    per_tok = kv_bytes_per_token(model, precision, tp, pp, attention_dp)
    per_req = per_tok * cached_tokens(model, inp + out)
    reserve = reserve_gib * GIB
    micro = max(1, pp)  # microbatches in flight share the stage's memory; the batch is what is cached
    act_tp = 1 if attention_dp else tp

    def on_rank(b: np.ndarray) -> np.ndarray:  # requests one GPU holds
        return np.ceil(np.asarray(b, dtype=np.float64) / tp) if attention_dp else np.asarray(b, dtype=np.float64)

    def act(b: np.ndarray) -> np.ndarray:
        tokens = on_rank(b) * inp / micro
        if prefill_tokens:
            tokens = np.minimum(tokens, prefill_tokens)
        return activation_bytes(model, precision, np.maximum(tokens, inp), on_rank(b) / micro, act_tp)

    free = capacity - reserve - w
    need = lambda b: on_rank(b) * per_req + act(b)  # noqa: E731  (increasing in b)
    lo = np.where((free > 0) & (need(np.ones_like(inp)) <= free), 1, 0)
    hi = np.full_like(lo, 1 << 24)
    hi = np.where(need(hi) <= free, hi + 1, hi)  # the cap itself fits: report it
    for _ in range(25):  # bisection on every row at once: need(lo) <= free < need(hi)
        mid = (lo + hi) // 2
        ok = need(np.maximum(mid, 1)) <= free
        lo, hi = np.where(ok & (lo > 0), mid, lo), np.where(ok & (lo > 0), hi, mid)
    max_b = np.where(lo > 0, np.minimum(lo, 1 << 24), 0)
    kv = on_rank(bt) * per_req
    a = act(bt)
    total = w + kv + a + reserve
    fits = total <= capacity
    cap = np.full(len(bt), capacity)
    reason = np.where(
        fits, np.char.add(np.char.add(np.char.add("fits: ", _gib(total)), " of "), np.char.add(_gib(cap), " per GPU")),
        np.where(w + reserve > capacity,
                 f"weights alone need {_gib(np.array([w]))[0]} per GPU (+{_gib(np.array([reserve]))[0]} reserve) "
                 f"of {_gib(np.array([capacity]))[0]}; use more tensor/pipeline parallelism or smaller weights",
                 np.where(max_b == 0,
                          np.char.add(np.char.add("one request's KV cache (", _gib(per_req)),
                                      f") and activations do not fit beside {_gib(np.array([w]))[0]} of weights in "
                                      f"{_gib(np.array([capacity]))[0]}"),
                          np.char.add(np.char.add(np.char.add(np.char.add(np.char.add(
                              np.char.add("batch ", bt.astype(str)), " needs "), _gib(kv)), " of KV cache + "),
                              _gib(a)), np.char.add(f" of activations beside {_gib(np.array([w]))[0]} of weights; "
                                                    f"{_gib(np.array([capacity]))[0]} per GPU holds at most batch ",
                                                    max_b.astype(str))))))
    return pd.DataFrame({"capacity": cap, "weights": w, "kv_cache": kv.astype(np.float64), "activations": a,
                         "reserve": reserve, "kv_per_token": per_tok, "kv_per_request": per_req,
                         "max_batch": max_b.astype(np.int64), "fits": fits, "reason": reason.astype(object)})


def memory_plan(model: TransformerConfig, precision: Precision, capacity: float, *, batch: int, input_len: int,
                output_len: int, tp: int = 1, pp: int = 1, reserve_gib: float = DEFAULT_RESERVE_GIB,
                prefill_tokens: int | None = None, attention_dp: bool = False,
                parallel_embedding: bool = True) -> MemoryPlan:
    """Memory for ``batch`` requests of ``input_len + output_len`` tokens (static batching: all prefilled at once,
    or at most ``prefill_tokens`` tokens per forward pass) and the largest batch that fits
    (:func:`memory_table` for one configuration)."""
    for name, v in (("batch", batch), ("input_len", input_len), ("output_len", output_len)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise InvalidInputError(f"{name} must be a positive integer, got {v!r}")
        if v > MAX_TOKENS:
            raise InvalidInputError(f"{name} must be at most {MAX_TOKENS} (2^40), got {v}")
    if input_len + output_len > MAX_REQUEST_TOKENS:
        raise InvalidInputError(f"a request of {input_len} + {output_len} tokens is longer than any model's context by "
                                f"far: at most {MAX_REQUEST_TOKENS:,} (2^26) tokens per request")
    if batch * (input_len + output_len) > MAX_TOKENS:
        raise InvalidInputError(f"a batch of {batch} requests of {input_len} + {output_len} tokens holds "
                                f"{batch * (input_len + output_len):.3g} tokens, more than the {MAX_TOKENS:.3g} (2^40) "
                                "a prediction takes")
    r = memory_table(model, precision, capacity, batch=np.array([batch]), input_len=np.array([input_len]),
                     output_len=np.array([output_len]), tp=tp, pp=pp, reserve_gib=reserve_gib,
                     prefill_tokens=prefill_tokens, attention_dp=attention_dp,
                     parallel_embedding=parallel_embedding).iloc[0]
    return MemoryPlan(float(r.capacity), float(r.weights), float(r.kv_cache), float(r.activations), float(r.reserve),
                      float(r.kv_per_token), float(r.kv_per_request), int(r.max_batch), bool(r.fits), str(r.reason))


def request_bytes(model: TransformerConfig, precision: Precision, *, batch: float = 1, context: float = 1,
                  tp: int = 1, pp: int = 1, attention_dp: bool = False) -> float:
    """Bytes per GPU that ``batch`` requests of ``context`` tokens need beside the weights and the reserve: their KV
    cache, the prefill's activations and the logits (what :func:`max_context` fits into the free memory)."""
    per_tok = kv_bytes_per_token(model, precision, tp, pp, attention_dp)
    t = 1 if attention_dp else tp
    act_tok = float(activation_bytes(model, precision, 1.0, 0.0, t))
    logits = float(activation_bytes(model, precision, 0.0, batch / max(pp, 1), t))
    return logits + batch * context * (per_tok + act_tok / max(pp, 1))


def max_context(model: TransformerConfig, precision: Precision, capacity: float, *, batch: int = 1, tp: int = 1, pp: int = 1,
                reserve_gib: float = DEFAULT_RESERVE_GIB, attention_dp: bool = False,
                prefill_tokens: int | None = None, prompt_share: float = 1.0) -> int:
    """The longest context (input + output tokens) ``batch`` requests on one GPU can each hold (0 if none);
    ``attention_dp``: ``batch`` is one rank's requests, run whole beside its share of the experts. The prefill's
    activations are those of ``prompt_share`` of the context (default the whole context, the cautious reading), all
    of the batch's prompts in one forward pass, or at most ``prefill_tokens`` tokens per pass (never less than one
    request's prompt, as in :func:`memory_table`); the cache as :func:`cached_tokens` keeps it (sliding windows)."""
    check_parallel(model, tp, pp)
    if prefill_tokens is not None and (isinstance(prefill_tokens, bool) or int(prefill_tokens) < 1):
        raise InvalidInputError(f"prefill tokens per forward pass must be a positive integer, got {prefill_tokens!r}")
    if not (0.0 < float(prompt_share) <= 1.0):
        raise InvalidInputError(f"prompt share of the context must be in (0, 1], got {prompt_share!r}")
    free = capacity - reserve_gib * GIB - weight_bytes_per_gpu(model, precision, tp, pp, attention_dp)
    per_tok = kv_bytes_per_token(model, precision, tp, pp, attention_dp)
    t = 1 if attention_dp else tp
    act_tok = float(activation_bytes(model, precision, 1.0, 0.0, t)) / max(pp, 1)
    logits = request_bytes(model, precision, context=0, batch=batch, tp=tp, pp=pp, attention_dp=attention_dp)

    def need(ctx: np.ndarray) -> np.ndarray:  # increasing in ctx
        cached = cached_tokens(model, ctx)  # a sliding window caps what its layers keep
        p = np.ceil(prompt_share * ctx)
        prompt = batch * p if prefill_tokens is None else np.minimum(batch * p, np.maximum(prefill_tokens, p))
        return logits + batch * per_tok * cached + act_tok * prompt

    lo, hi = 0, 1 << 40
    if need(np.array(hi, dtype=np.float64)) <= free:
        return hi
    while hi - lo > 1:  # the largest ctx with need(ctx) <= free: need(lo) <= free < need(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if need(np.array(mid, dtype=np.float64)) <= free else (lo, mid)
    return int(lo)
