"""Transformer model description: one frozen dataclass, loaders for Megatron-style and Hugging Face configs,
and a built-in library of published architectures (``models.toml`` next to this module).

Field names follow Megatron-LM's command-line arguments (``--num-layers`` -> ``num_layers``), so a Megatron
YAML/JSON (hyphens or underscores) loads as it is; a Hugging Face ``config.json`` (Llama, Mistral, Mixtral,
Qwen2/3 (MoE), Gemma, DeepSeek, GPT-2, GPT-J, GPT-NeoX, OPT, Phi, OLMo, BLOOM, MPT, Falcon, BERT, ...:
``HF_MODEL_TYPES``) loads as it is too (:func:`from_dict` tells them apart by ``model_type``).

>>> m = load_model("llama2-7b")
>>> round(m.num_params / 1e9, 2)
6.74

Parameter counting (``param_counts``) is exact for the architectures in the library: per layer the
Q/K/V/output projections (GQA: K and V have ``num_query_groups * kv_channels`` columns), the MLP (two
matrices, three when gated: SwiGLU/GeGLU), biases when ``add_bias_linear`` (Q/K/V only when
``add_qkv_bias``, the output projection's when ``add_attn_out_bias``, the MLP's when ``add_mlp_bias``), norms
(LayerNorm: weight and bias, RMSNorm: weight; none when not ``norm_affine``), QK-norms (one head wide, or over all
heads when ``qk_layernorm_full_width``; none when not ``qk_layernorm_affine``, no bias when not
``qk_layernorm_bias``); MoE layers hold
``num_experts`` MLPs of ``moe_ffn_hidden_size`` plus a router (and an optional shared expert); the word
embedding, learned position embedding, token-type embedding, the final norm, and an untied output layer.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from hybrid.errors import InvalidInputError

ACTIVATIONS = ("gelu", "relu", "squared_relu", "swiglu", "geglu")
GATED_ACTIVATIONS = ("swiglu", "geglu")
NORMALIZATIONS = ("LayerNorm", "RMSNorm")
POSITION_EMBEDDINGS = ("learned_absolute", "rope", "alibi", "none")
#: weight formats of quantised checkpoints (``TransformerConfig.quantization``)
QUANTIZATIONS = ("int8", "int4", "fp8", "fp4")
#: what the last layer feeds (``TransformerConfig.output_head``)
OUTPUT_HEADS = ("lm", "classifier", "none")


@dataclass(frozen=True)
class TransformerConfig:
    """A decoder-only (GPT/Llama/MoE) or encoder-only (BERT) transformer.

    ``None`` fields take Megatron-LM's defaults in ``__post_init__``: ``num_query_groups`` = heads (MHA),
    ``kv_channels`` = hidden / heads, ``ffn_hidden_size`` = 4 * hidden (gated: 8/3 * hidden rounded down to a
    multiple of 64), ``max_position_embeddings`` = ``seq_length``, ``moe_ffn_hidden_size`` =
    ``ffn_hidden_size``.
    """

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    name: str = "custom"
    num_query_groups: int | None = None
    kv_channels: int | None = None
    ffn_hidden_size: int | None = None
    activation: str = "gelu"
    normalization: str = "LayerNorm"
    vocab_size: int = 51200
    seq_length: int = 2048
    max_position_embeddings: int | None = None
    position_embedding_type: str = "learned_absolute"
    #: share of each head's dimensions that rotary embeddings rotate (Megatron-LM ``--rotary-percent``; GPT-J 0.25)
    rotary_percent: float = 1.0
    untie_embeddings_and_output_weights: bool = False
    add_bias_linear: bool = True
    add_qkv_bias: bool = False
    #: the attention output projection has a bias without ``add_bias_linear`` (Hugging Face's ``attention_bias`` on
    #: Llama, Granite, Gemma, OLMo, Qwen3 biases Q, K, V and the output; Qwen2's fixed QKV bias has none)
    add_attn_out_bias: bool = False
    #: the dense MLP's linears have biases without ``add_bias_linear`` (Hugging Face's ``mlp_bias``: Llama, Granite)
    add_mlp_bias: bool = False
    qk_layernorm: bool = False
    #: the QK-norms weigh every query/key column (one norm over all heads' projections: OLMo 2, OLMoE) instead of
    #: one ``kv_channels``-wide weight shared by the heads (Qwen3, Gemma 3)
    qk_layernorm_full_width: bool = False
    #: the QK-norms have learned weights: Llama 4's (``use_qk_norm``, transformers' weightless L2 RMSNorm) have none
    qk_layernorm_affine: bool = True
    #: LayerNorm QK-norms have a bias (StableLM's per-head ``qk_layernorm`` LayerNorms have none; with
    #: ``qk_layernorm_full_width`` as they weigh every head separately)
    qk_layernorm_bias: bool = True
    #: the norms have learned weights (LayerNorm: and biases); OLMo 1's LayerNorms are non-parametric
    norm_affine: bool = True
    #: LayerNorms have a bias (MPT's ``no_bias`` drops it, with the linear layers' biases)
    norm_bias: bool = True
    #: the output layer (LM head) has a bias over the vocabulary (GPT-J, Phi-1/1.5/2)
    output_layer_bias: bool = False
    #: the head on the last layer: ``lm`` (a language-model head over the vocabulary, every token in training),
    #: ``classifier`` (a sequence classifier / reward model, transformers' ``*ForSequenceClassification``: a
    #: bias-free ``num_labels``-wide score layer on the last token of each sequence), ``none`` (a bare model, an
    #: embedding model: transformers' ``LlamaModel``, ``MistralModel``; the final norm's hidden states are the output).
    #: Encoder-only (BERT) models keep their pooler with every head: ``lm`` adds the MLM head, ``classifier``
    #: (``BertForSequenceClassification``) a ``num_labels``-wide classifier with bias on the pooled [CLS] token
    output_head: str = "lm"
    #: outputs of the ``classifier`` head (transformers' ``num_labels``, default 2; a reward model's 1)
    num_labels: int = 2
    #: attention and MLP read the same normalised input (GPT-J, Falcon): one norm per layer instead of two
    #: (Falcon's new decoder architecture keeps two norms: ``parallel_attn_norms = 2``).
    parallel_attn: bool = False
    parallel_attn_norms: int = 1
    #: attention window (Mistral's sliding window); ``None`` = full causal attention
    window_size: int | None = None
    #: share of the layers that use ``window_size`` (Gemma 2: 1/2, Gemma 3: 5/6 local layers); the others attend
    #: to the whole context. Costs and cache sizes are the layer-weighted mean of both kinds.
    window_layer_share: float = 1.0
    #: chunked local attention (Llama 4's ``attention_chunk_size``, 8192): a query attends only to the earlier
    #: tokens of its own chunk of this many positions (chunks start at 0, C, 2C, ...; unlike a sliding window the
    #: span resets at each chunk boundary); ``None`` = none. Not together with ``window_size``.
    attention_chunk_size: int | None = None
    #: share of the layers that attend within chunks (Llama 4: 3 in 4, its RoPE layers; the NoPE ones are global)
    chunk_layer_share: float = 1.0
    #: Gemma 2/3 "sandwich" norms: a second RMSNorm after the attention block and after the MLP (4 per layer)
    sandwich_norm: bool = False
    num_experts: int | None = None
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None
    moe_shared_expert_intermediate_size: int | None = None
    #: every ``moe_layer_freq``-th layer is a MoE layer (1 = all; layers 0, freq, 2 freq, ...), or, as Megatron-LM's
    #: ``--moe-layer-freq`` list, one 0 (dense) / 1 (MoE) per layer: Hugging Face's Qwen-MoE layouts
    #: (``decoder_sparse_step`` counts from layer 1, ``mlp_only_layers``) and Llama 4's ``moe_layers``
    moe_layer_freq: int | tuple[int, ...] = 1
    #: the first ``moe_first_k_dense`` layers are dense (DeepSeek-V3's ``first_k_dense_replace`` = 3)
    moe_first_k_dense: int = 0
    #: a sigmoid gate (one ``hidden``-wide vector) scales the shared expert (Qwen2-MoE); DeepSeek has none
    moe_shared_expert_gate: bool = True
    #: Multi-head latent attention (DeepSeek-V2/V3; Megatron-Core names): queries through a rank-``q_lora_rank``
    #: bottleneck (``None``: a direct projection), keys and values from one cached latent of ``kv_lora_rank``
    #: plus a shared rotary key of ``qk_pos_emb_head_dim``; per head ``qk_head_dim`` (no rotary) +
    #: ``qk_pos_emb_head_dim`` query/key dims and ``v_head_dim`` value dims. ``kv_lora_rank`` set = MLA.
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_head_dim: int | None = None
    qk_pos_emb_head_dim: int | None = None
    v_head_dim: int | None = None
    #: BERT-style: bidirectional attention, MLM head (dense + norm + output bias), pooler, token types
    encoder_only: bool = False
    num_tokentypes: int = 0
    #: an encoder's pooler (dense + tanh on each sequence's [CLS] token): BertModel's, kept by
    #: ``BertForPreTraining`` and ``BertForSequenceClassification`` (whose classifier reads the pooled token) but not
    #: by ``BertForMaskedLM``, which builds its encoder with ``add_pooling_layer=False``. Ignored for a decoder.
    pooler: bool = True
    #: the weight format a quantised checkpoint ships in (its config.json's ``quantization_config``): ``int8`` /
    #: ``int4`` weight-only (GPTQ, AWQ, bitsandbytes), ``fp8``, ``fp4`` (MXFP4/NVFP4); ``None`` = 16-bit. Inference
    #: defaults its precision to it (:func:`hybrid.workloads.llm.precision.checkpoint_precision`); sizes ignore it.
    quantization: str | None = None
    #: the checkpoint also ships its KV cache quantised to fp8 (``kv_cache_scheme`` / ``kv_cache_quant_algo``)
    quantized_kv_cache: bool = False
    #: the model trains with dropout (a hidden, attention or embedding dropout probability above 0), the default of
    #: training jobs (:meth:`hybrid.workloads.llm.config.TrainingConfig.uses_dropout`): Megatron-LM's default (hidden
    #: and attention dropout 0.1) for a Megatron-style description unless its ``hidden_dropout`` /
    #: ``attention_dropout`` are 0; a Hugging Face config's own probabilities (:data:`HF_DROPOUT_KEYS`; Llama,
    #: Mistral, Qwen, DeepSeek, MPT: 0); the published config for the built-in models (``models.toml``).
    dropout: bool = True
    #: whether the attention probabilities are dropped out as well (None: as :attr:`dropout`). False for a model
    #: whose dropout is on the hidden states only (OPT: ``dropout`` 0.1, ``attention_dropout`` 0.0): PyTorch's
    #: dropout at p = 0 returns its input, so unfused attention keeps no s x s mask nor dropout output, and runs no
    #: dropout kernel over the scores
    attention_dropout: bool | None = None
    source: str = ""

    # ----------------------------------------------------------------------------------- validation
    def __post_init__(self) -> None:
        def pos(value: Any, what: str, allow_none: bool = False) -> None:
            if value is None and allow_none:
                return
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidInputError(
                    f"model {self.name!r}: {what} must be a positive integer, got {value!r}"
                )

        for f in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size", "seq_length",
                  "moe_router_topk", "parallel_attn_norms", "num_labels"):
            pos(getattr(self, f), f)
        for f in ("num_query_groups", "kv_channels", "ffn_hidden_size", "max_position_embeddings",
                  "window_size", "attention_chunk_size", "num_experts", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
                  "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
            pos(getattr(self, f), f, allow_none=True)
        freq = self.moe_layer_freq
        if isinstance(freq, list | tuple):
            if len(freq) != self.num_layers or any(isinstance(x, bool) or x not in (0, 1) for x in freq):
                raise InvalidInputError(f"model {self.name!r}: moe_layer_freq as a list needs one 0 (dense) or 1 (MoE) "
                                        f"per layer ({self.num_layers}), got {list(freq)!r}")
            if self.num_experts is not None and self.num_experts > 1 and not any(freq):
                raise InvalidInputError(f"model {self.name!r}: moe_layer_freq marks no layer as MoE (a dense model "
                                        "has no num_experts)")
            object.__setattr__(self, "moe_layer_freq", tuple(int(x) for x in freq))
        else:
            pos(freq, "moe_layer_freq (or a list of one 0/1 per layer)")
        k_dense = self.moe_first_k_dense
        if isinstance(k_dense, bool) or not isinstance(k_dense, int) or not 0 <= k_dense < self.num_layers:
            raise InvalidInputError(f"model {self.name!r}: moe_first_k_dense must be in [0, num_layers), "
                                    f"got {k_dense!r}")
        mla = ("qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
        if self.kv_lora_rank is not None and any(getattr(self, f) is None for f in mla):
            raise InvalidInputError(f"model {self.name!r}: multi-latent attention (kv_lora_rank) needs "
                                    f"{', '.join(mla)}")
        if self.kv_lora_rank is None and self.q_lora_rank is not None:
            raise InvalidInputError(f"model {self.name!r}: q_lora_rank is only meaningful with kv_lora_rank (MLA)")
        if isinstance(self.num_tokentypes, bool) or not isinstance(self.num_tokentypes, int) \
                or self.num_tokentypes < 0:
            raise InvalidInputError(f"model {self.name!r}: num_tokentypes must be >= 0, got {self.num_tokentypes!r}")
        act = str(self.activation).lower()
        if act not in ACTIVATIONS:
            raise InvalidInputError(f"model {self.name!r}: unknown activation {self.activation!r} "
                                    f"(one of {', '.join(ACTIVATIONS)})")
        norm = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}.get(str(self.normalization).lower())
        if norm is None:
            raise InvalidInputError(f"model {self.name!r}: unknown normalization {self.normalization!r} "
                                    f"(LayerNorm or RMSNorm)")
        pe = str(self.position_embedding_type).lower()
        if pe not in POSITION_EMBEDDINGS:
            raise InvalidInputError(f"model {self.name!r}: unknown position_embedding_type "
                                    f"{self.position_embedding_type!r} (one of {', '.join(POSITION_EMBEDDINGS)})")
        rp = self.rotary_percent
        if isinstance(rp, bool) or not isinstance(rp, int | float) or not 0 < rp <= 1:
            raise InvalidInputError(f"model {self.name!r}: rotary_percent must be in (0, 1], got {rp!r}")
        ws = self.window_layer_share
        if isinstance(ws, bool) or not isinstance(ws, int | float) or not 0 < ws <= 1:
            raise InvalidInputError(f"model {self.name!r}: window_layer_share must be in (0, 1], got {ws!r}")
        object.__setattr__(self, "window_layer_share", float(ws))
        cs = self.chunk_layer_share
        if isinstance(cs, bool) or not isinstance(cs, int | float) or not 0 < cs <= 1:
            raise InvalidInputError(f"model {self.name!r}: chunk_layer_share must be in (0, 1], got {cs!r}")
        object.__setattr__(self, "chunk_layer_share", float(cs))
        if self.window_size and self.attention_chunk_size:
            raise InvalidInputError(f"model {self.name!r}: sliding-window and chunked attention together "
                                    "(window_size and attention_chunk_size) are not supported")
        set_ = object.__setattr__
        set_(self, "rotary_percent", float(rp))
        set_(self, "activation", act)
        set_(self, "normalization", norm)
        set_(self, "position_embedding_type", pe)
        heads = self.num_attention_heads
        if self.num_query_groups is None:
            set_(self, "num_query_groups", heads)
        if heads % self.num_query_groups:
            raise InvalidInputError(f"model {self.name!r}: num_attention_heads ({heads}) must be divisible by "
                                    f"num_query_groups ({self.num_query_groups})")
        if self.kv_channels is None and self.kv_lora_rank is not None:  # MLA: the query/key head width
            set_(self, "kv_channels", int(self.qk_head_dim) + int(self.qk_pos_emb_head_dim))  # type: ignore[arg-type]
        if self.kv_channels is None:
            if self.hidden_size % heads:
                raise InvalidInputError(f"model {self.name!r}: hidden_size ({self.hidden_size}) must be "
                                        f"divisible by num_attention_heads ({heads}) unless kv_channels is given")
            set_(self, "kv_channels", self.hidden_size // heads)
        if self.ffn_hidden_size is None:
            ffn = 4 * self.hidden_size
            if act in GATED_ACTIVATIONS:  # Megatron-LM's default for --swiglu
                ffn = int(ffn * 2 / 3) // 64 * 64
            set_(self, "ffn_hidden_size", ffn)
        if self.max_position_embeddings is None:
            set_(self, "max_position_embeddings", self.seq_length)
        if self.num_experts is not None:
            if self.num_experts == 1:
                set_(self, "num_experts", None)
            elif self.moe_router_topk > self.num_experts:
                raise InvalidInputError(f"model {self.name!r}: moe_router_topk ({self.moe_router_topk}) exceeds "
                                        f"num_experts ({self.num_experts})")
        if self.moe_ffn_hidden_size is None and self.num_experts is not None:
            set_(self, "moe_ffn_hidden_size", self.ffn_hidden_size)
        if self.quantization is not None and self.quantization not in QUANTIZATIONS:
            raise InvalidInputError(f"model {self.name!r}: quantization must be one of {', '.join(QUANTIZATIONS)} "
                                    f"or none, got {self.quantization!r}")
        if self.encoder_only and self.num_experts is not None:
            raise InvalidInputError(f"model {self.name!r}: encoder-only MoE models are not supported")
        if self.output_head not in OUTPUT_HEADS:
            raise InvalidInputError(f"model {self.name!r}: output_head must be one of {', '.join(OUTPUT_HEADS)}, got "
                                    f"{self.output_head!r}")
        if not isinstance(self.pooler, bool):
            raise InvalidInputError(f"model {self.name!r}: pooler must be true or false, got {self.pooler!r}")
        if self.encoder_only and self.output_head == "classifier" and not self.pooler:
            raise InvalidInputError(f"model {self.name!r}: an encoder's classifier reads the pooled [CLS] token: it "
                                    "needs the pooler (pooler = true)")
        if not isinstance(self.dropout, bool):
            raise InvalidInputError(f"model {self.name!r}: dropout must be true or false, got {self.dropout!r}")
        if self.attention_dropout is not None and not isinstance(self.attention_dropout, bool):
            raise InvalidInputError(f"model {self.name!r}: attention_dropout must be true, false or unset, got "
                                    f"{self.attention_dropout!r}")

    def position_note(self, tokens: int | float) -> str:
        """A warning when a sequence of ``tokens`` needs more positions than the model's learned absolute position
        table holds (GPT-2, BERT, OPT: ``max_position_embeddings`` rows, which defaults to ``seq_length``), '' otherwise
        (and for rotary / ALiBi models, which compute positions instead of looking them up). The real model cannot run
        such a sequence; training and inference cost it all the same, with this note."""
        limit = int(self.max_position_embeddings or 0)
        if self.position_embedding_type != "learned_absolute" or not limit or tokens <= limit:
            return ""
        return (f"{self.name} learns {limit} absolute position embeddings (max_position_embeddings): a sequence of "
                f"{int(tokens)} tokens has positions without one, so the real model cannot run it (costed as if it "
                "could; a larger max_position_embeddings in the model's config sizes a larger table)")

    # ----------------------------------------------------------------------------------- derived shapes
    @property
    def head_dim(self) -> int:
        return int(self.kv_channels)  # type: ignore[arg-type]

    @property
    def num_kv_heads(self) -> int:
        return int(self.num_query_groups)  # type: ignore[arg-type]

    @property
    def q_width(self) -> int:
        """Columns of the query projection (= heads x head dim; differs from hidden for e.g. Qwen3)."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Columns of the key (and of the value) projection; under MLA (per-head keys of ``head_dim`` and values
        of ``v_head_dim``, expanded from the latent) the mean of the two, so ``2 x kv_width`` is K and V."""
        if self.is_mla:
            return (self.q_width + self.value_width) // 2
        return self.num_kv_heads * self.head_dim

    @property
    def gated(self) -> bool:
        """Gated MLP (SwiGLU/GeGLU): three weight matrices instead of two."""
        return self.activation in GATED_ACTIVATIONS

    @property
    def swiglu(self) -> bool:
        return self.activation == "swiglu"

    @property
    def tied_embeddings(self) -> bool:
        return not self.untie_embeddings_and_output_weights

    @property
    def lm_head(self) -> bool:
        """A language-model head over the vocabulary (not a classifier's score layer, not a bare model)."""
        return self.output_head == "lm"

    @property
    def tied_output(self) -> bool:
        """The output layer is the word embedding's transpose (only a language-model head shares it)."""
        return self.lm_head and self.tied_embeddings

    @property
    def head_width(self) -> int:
        """Outputs of the head per position it runs on: the vocabulary, the classifier's labels, or 0."""
        return {"lm": self.vocab_size, "classifier": self.num_labels}.get(self.output_head, 0)

    def head_flops_per_token(self, seq_len: int | float) -> float:
        """Forward matmul FLOPs of the head per token of ``seq_len``-token sequences: ``2 h V`` for a
        language-model head (every token), ``2 h num_labels / seq_len`` for a classifier (the last token of each
        sequence), none for a bare model."""
        if self.output_head == "classifier":
            return 2.0 * self.hidden_size * self.num_labels / max(float(seq_len), 1.0)
        return 2.0 * self.hidden_size * self.head_width

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None

    @property
    def causal(self) -> bool:
        return not self.encoder_only

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank is not None

    @property
    def mla_latent_width(self) -> int:
        """Elements cached per token and layer under MLA: the KV latent and the shared rotary key."""
        return int(self.kv_lora_rank) + int(self.qk_pos_emb_head_dim)  # type: ignore[arg-type]

    @property
    def value_width(self) -> int:
        """Columns of the attention values of all heads (MLA: heads x ``v_head_dim``; else the query width)."""
        return self.num_attention_heads * int(self.v_head_dim) if self.is_mla else self.q_width  # type: ignore[arg-type]

    @property
    def attention_head_dim(self) -> float:
        """Per-head width that gives attention's FLOPs as ``4 x pairs x heads x width``: the mean of the score
        (query/key) and value widths (MLA: (192 + 128) / 2 for DeepSeek-V3; the head dim otherwise)."""
        return (self.head_dim + self.value_width / self.num_attention_heads) / 2.0

    @property
    def num_moe_layers(self) -> int:
        if not self.is_moe:
            return 0
        freq = self.moe_layer_freq
        if isinstance(freq, tuple):
            return sum(freq[self.moe_first_k_dense:])
        return len([i for i in range(self.moe_first_k_dense, self.num_layers) if i % freq == 0])

    @property
    def moe_layer_mask(self) -> tuple[bool, ...]:
        """Per layer, whether it is a MoE layer (``moe_first_k_dense``, then ``moe_layer_freq``)."""
        if not self.is_moe:
            return (False,) * self.num_layers
        freq, k = self.moe_layer_freq, self.moe_first_k_dense
        return tuple(i >= k and (bool(freq[i]) if isinstance(freq, tuple) else i % freq == 0)
                     for i in range(self.num_layers))

    def layers_per_rank(self, pp: int) -> tuple[int, ...]:
        """Layers held by each of ``pp`` pipeline ranks: ``ceil(layers / pp)`` consecutive layers each, the last rank
        the rest (as :meth:`moe_layers_per_rank` splits them without interleaving)."""
        per = -(-self.num_layers // pp)
        return tuple(max(0, min(per, self.num_layers - r * per)) for r in range(pp))

    def moe_layers_per_rank(self, pp: int, vp: int = 1) -> tuple[int, ...]:
        """MoE layers held by each of ``pp`` pipeline ranks. Without interleaving (``vp`` 1) rank ``r`` holds
        ``ceil(layers / pp)`` consecutive layers (the last rank the rest); with it, model chunks ``r, r + pp, ...``
        of ``layers / (pp vp)`` consecutive layers (Megatron-LM's interleaved layout). DeepSeek's first dense
        layers, or an interleaved model's, are not spread evenly over the ranks."""
        mask = self.moe_layer_mask
        if vp <= 1:
            per = -(-self.num_layers // pp)
            return tuple(sum(mask[r * per:(r + 1) * per]) for r in range(pp))
        chunk = self.num_layers // (pp * vp)
        return tuple(sum(sum(mask[(c * pp + r) * chunk:(c * pp + r + 1) * chunk]) for c in range(vp))
                     for r in range(pp))

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    # ----------------------------------------------------------------------------------- parameters
    def _mlp_bias(self, ffn: int) -> int:
        return (ffn * (2 if self.gated else 1) + self.hidden_size) if self.add_bias_linear or self.add_mlp_bias else 0

    def _mlp_params(self, ffn: int) -> int:
        return (3 if self.gated else 2) * self.hidden_size * ffn + self._mlp_bias(ffn)

    def _norm_params(self, width: int | None = None) -> int:
        """Weights of one norm over ``width`` (default: hidden) columns: none when non-parametric (OLMo 1)."""
        if not self.norm_affine:
            return 0
        bias = self.normalization == "LayerNorm" and self.norm_bias
        return (self.hidden_size if width is None else width) * (2 if bias else 1)

    def _attention_bias_params(self) -> int:
        """Biases of the Q/K/V and output projections of one layer. Under MLA, ``add_qkv_bias`` is Hugging Face's
        ``attention_bias`` on the down-projections (the query bottleneck's, when there is one, and the KV latent's
        with its rotary key; the up-projections have none) and ``add_attn_out_bias`` the output projection's."""
        if self.is_mla:
            down = (self.q_lora_rank or 0) + int(self.kv_lora_rank) + int(self.qk_pos_emb_head_dim)  # type: ignore[arg-type]
            return (down if self.add_qkv_bias else 0) + (self.hidden_size if self.add_attn_out_bias else 0)
        qkv = self.q_width + 2 * self.kv_width if self.add_bias_linear or self.add_qkv_bias else 0
        return qkv + (self.hidden_size if self.add_bias_linear or self.add_attn_out_bias else 0)

    def mla_matrix_params(self) -> int:
        """MLA's projection weights per layer: query (through its low-rank bottleneck or direct), the KV latent
        and rotary key (``kv_a``), the latent's up-projection to per-head keys and values (``kv_b``), output."""
        h, heads = self.hidden_size, self.num_attention_heads
        nope, rope, v = int(self.qk_head_dim), int(self.qk_pos_emb_head_dim), int(self.v_head_dim)  # type: ignore[arg-type]
        ql, kvl = self.q_lora_rank, int(self.kv_lora_rank)  # type: ignore[arg-type]
        q = (h * ql + ql * heads * (nope + rope)) if ql else h * heads * (nope + rope)
        return q + h * (kvl + rope) + kvl * heads * (nope + v) + heads * v * h

    def param_counts(self) -> dict[str, int]:
        """Parameters by part; ``total`` counts every expert, ``active`` only ``moe_router_topk`` of them."""
        h, d = self.hidden_size, self.head_dim
        if self.is_mla:  # projections (and their biases) plus the RMSNorms of the query bottleneck and the KV latent
            attention = (self.mla_matrix_params() + self._attention_bias_params() + (self.q_lora_rank or 0)
                         + int(self.kv_lora_rank))  # type: ignore[arg-type]
        else:
            weights = h * (self.q_width + 2 * self.kv_width) + self.q_width * h
            qk_norm = 0
            if self.qk_layernorm and self.qk_layernorm_affine and self.norm_affine:
                width = self.q_width + self.kv_width if self.qk_layernorm_full_width else 2 * d
                bias = self.normalization == "LayerNorm" and self.norm_bias and self.qk_layernorm_bias
                qk_norm = width * (2 if bias else 1)
            attention = weights + self._attention_bias_params() + qk_norm
        n_norms = (self.parallel_attn_norms if self.parallel_attn else 2) + (2 if self.sandwich_norm else 0)
        layer_norms = n_norms * self._norm_params()
        dense_mlp = self._mlp_params(int(self.ffn_hidden_size))  # type: ignore[arg-type]
        moe_total = moe_active = 0
        if self.is_moe:
            expert = self._mlp_params(int(self.moe_ffn_hidden_size))  # type: ignore[arg-type]
            shared = (self._mlp_params(self.moe_shared_expert_intermediate_size)
                      + (h if self.moe_shared_expert_gate else 0)
                      if self.moe_shared_expert_intermediate_size else 0)  # shared expert + its gate
            router = h * int(self.num_experts)  # type: ignore[arg-type]
            moe_total = int(self.num_experts) * expert + shared + router  # type: ignore[arg-type]
            moe_active = self.moe_router_topk * expert + shared + router
        embedding = self.vocab_size * h
        position = self.max_position_embeddings * h if self.position_embedding_type == "learned_absolute" else 0
        tokentype = self.num_tokentypes * h
        embedding_norm = self._norm_params() if self.encoder_only else 0
        final_norm = 0 if self.encoder_only else self._norm_params()  # BERT is post-LN: norms are in layers
        if self.lm_head:
            output_layer = (0 if self.tied_embeddings else self.vocab_size * h) + (self.vocab_size if
                                                                                   self.output_layer_bias else 0)
        else:  # a classifier's bias-free score layer (transformers' ``score``), or nothing
            output_layer = h * self.head_width
        head = 0
        if self.encoder_only:  # the pooler (dense + tanh on [CLS]); with the MLM head its dense, norm and vocab bias;
            head = h * h + h if self.pooler else 0  # a classifier's bias (BertForSequenceClassification's)
            if self.lm_head:
                head += (h * h + h) + self._norm_params() + self.vocab_size
            elif self.output_head == "classifier":
                head += self.num_labels
        per_layer_dense = attention + layer_norms + dense_mlp
        per_layer_moe_total = attention + layer_norms + moe_total
        per_layer_moe_active = attention + layer_norms + moe_active
        layers_total = self.num_dense_layers * per_layer_dense + self.num_moe_layers * per_layer_moe_total
        layers_active = self.num_dense_layers * per_layer_dense + self.num_moe_layers * per_layer_moe_active
        other = embedding + position + tokentype + embedding_norm + final_norm + output_layer + head
        return {
            "attention_per_layer": attention,
            "norms_per_layer": layer_norms,
            "mlp_per_layer": dense_mlp,
            "moe_per_layer_total": moe_total,
            "moe_per_layer_active": moe_active,
            "layers_total": layers_total,
            "layers_active": layers_active,
            "word_embedding": embedding,
            "position_embedding": position + tokentype + embedding_norm,
            "final_norm": final_norm,
            "output_layer": output_layer,
            "head": head,
            "total": layers_total + other,
            "active": layers_active + other,
        }

    def tp_replicated_params(self) -> dict[str, int]:
        """Parameters of one layer that every tensor-parallel rank holds whole (Megatron-LM / Megatron-Core): the
        layer norms, the biases added after a row-parallel GEMM's all-reduce (output projection, MLP down
        projection), per-head q/k norms (weighted over the head dim), MLA's down-projections with their norms and
        biases (``parallel_mode="duplicated"``, as :mod:`~hybrid.workloads.llm.layer_ops` costs them), a MoE layer's
        router and shared-expert gate. ``attention``: the attention block's and the layer's norms (every layer);
        ``dense_mlp``: a dense MLP's; ``moe``: a MoE layer's (besides the routed experts, which are split over
        TP x EP). Everything else of a layer is split over TP."""
        h, d = self.hidden_size, self.head_dim
        n_norms = (self.parallel_attn_norms if self.parallel_attn else 2) + (2 if self.sandwich_norm else 0)
        attention = n_norms * self._norm_params()
        if self.add_attn_out_bias or (self.add_bias_linear and not self.is_mla):
            attention += h
        if self.is_mla:
            ql, kvl, rope = self.q_lora_rank or 0, int(self.kv_lora_rank), int(self.qk_pos_emb_head_dim)  # type: ignore[arg-type]
            attention += h * ql + h * (kvl + rope) + ql + kvl + ((ql + kvl + rope) if self.add_qkv_bias else 0)
        elif (self.qk_layernorm and self.qk_layernorm_affine and self.norm_affine
              and not self.qk_layernorm_full_width):
            bias = self.normalization == "LayerNorm" and self.norm_bias and self.qk_layernorm_bias
            attention += 2 * d * (2 if bias else 1)
        mlp_out_bias = h if (self.add_bias_linear or self.add_mlp_bias) else 0
        moe = 0
        if self.is_moe:
            moe = h * int(self.num_experts)  # type: ignore[arg-type]
            if self.moe_shared_expert_intermediate_size:
                moe += (h if self.moe_shared_expert_gate else 0) + mlp_out_bias
        return {"attention": attention, "dense_mlp": mlp_out_bias, "moe": moe}

    @property
    def num_params(self) -> int:
        """Total parameters (all experts)."""
        return self.param_counts()["total"]

    @property
    def num_active_params(self) -> int:
        """Parameters one token passes through (``moe_router_topk`` experts per MoE layer)."""
        return self.param_counts()["active"]

    def params_per_layer(self, active: bool = False) -> float:
        """Mean parameters per transformer layer (embedding/output excluded)."""
        c = self.param_counts()
        return (c["layers_active"] if active else c["layers_total"]) / self.num_layers

    # ----------------------------------------------------------------------------------- FLOPs, KV cache
    @property
    def kv_cap(self) -> int | None:
        """The most tokens a local layer keeps cached per request: the sliding window, or the attention chunk
        (a request at any position may hold up to a chunk: the bound a serving system reserves); ``None``."""
        return self.window_size or self.attention_chunk_size or None

    @property
    def kv_cap_share(self) -> float:
        """Share of the layers that :attr:`kv_cap` caps (windowed or chunked layers; the others are global)."""
        if self.window_size:
            return self.window_layer_share
        return self.chunk_layer_share if self.attention_chunk_size else 0.0

    def chunk_pairs(self, tokens: Any) -> Any:
        """(query, key) pairs of chunked causal attention over the first ``tokens`` positions: ``n`` full chunks of
        ``C (C + 1) / 2`` and a partial one of ``r (r + 1) / 2`` (``tokens = n C + r``); full causal attention's
        ``t (t + 1) / 2`` without chunks. Arrays too."""
        t = np.asarray(tokens, dtype=np.float64)
        c = self.attention_chunk_size
        if not c:
            return t * (t + 1) / 2
        n, r = np.floor_divide(t, c), np.mod(t, c)
        return n * c * (c + 1) / 2 + r * (r + 1) / 2

    def causal_kv_len(self, q_len: Any, kv_len: Any) -> Any:
        """The keys per query of one causal attention row (``q_len`` new queries, the last of a ``kv_len``-token
        sequence: ``q kv - q (q - 1) / 2`` pairs when ``kv >= q``) that costs the model's attention as the
        layer-weighted mean of its layers. Sliding windows: the cached tokens (:meth:`window_keys`; the row's pair
        formula then counts the window's pairs). Chunked attention: the ``kv_len`` at which the row's pairs equal the
        layer mean of the within-chunk pairs (:meth:`chunk_pairs` of the positions these queries take) and the
        global layers' pairs, so FLOPs are exact; a decode query (``q_len`` 1) keeps the chunk bound (up to
        ``min(context, C)`` keys, what a request keeps cached), which its cost grid can interpolate."""
        q = np.asarray(q_len, dtype=np.float64)
        kv = np.asarray(kv_len, dtype=np.float64)
        if not self.attention_chunk_size or not self.causal:
            return self.window_keys(kv) if self.window_size else kv
        share = self.chunk_layer_share
        full = q * kv - q * (q - 1) / 2
        local = self.chunk_pairs(kv) - self.chunk_pairs(np.maximum(kv - q, 0.0))
        pairs = share * local + (1.0 - share) * full
        # the row counts q k - m (m - 1) / 2 pairs with m = min(q, k): solve for k (k >= q: linear; else quadratic)
        above = (pairs + q * (q - 1) / 2) / np.maximum(q, 1.0)
        b = 2 * q + 1
        below = (b - np.sqrt(np.maximum(b * b - 8 * pairs, 0.0))) / 2
        k = np.where(pairs >= q * (q + 1) / 2, above, below)
        decode = self.window_keys(kv)  # q = 1: the chunk bound
        return np.where(q <= 1, decode, np.minimum(k, kv))

    def attention_span(self, seq_len: int) -> float:
        """Mean number of keys a query attends to in a causal sequence of ``seq_len`` (window-limited, or within
        its chunk; with local and global layers, their layer-weighted mean)."""
        s = float(seq_len)
        if not self.causal:
            return s
        full = (s + 1) / 2
        if self.attention_chunk_size:
            local = float(self.chunk_pairs(s)) / s if s > 0 else 0.0
            return self.chunk_layer_share * local + (1.0 - self.chunk_layer_share) * full
        w = self.window_size
        if w is None or w >= s:
            return full
        local = (w * (w + 1) / 2 + (s - w) * w) / s
        return self.window_layer_share * local + (1.0 - self.window_layer_share) * full

    def window_keys(self, context: Any) -> Any:
        """Keys the last query of a ``context``-token sequence attends to at most, or the tokens a request keeps
        cached, as the layer-weighted mean over local (windowed or chunked: up to a window / a chunk) and global
        layers."""
        cap = self.kv_cap
        if not cap:
            return context if np.ndim(context) else float(context)
        share = self.kv_cap_share
        out = share * np.minimum(np.asarray(context, dtype=np.float64), cap) + (1.0 - share) * np.asarray(
            context, dtype=np.float64)
        return out if np.ndim(out) else float(out)

    def forward_flops_per_token(self, seq_len: int | None = None, causal_skip: bool = False,
                                active: bool = True) -> float:
        """Forward matmul FLOPs per token: 2 x (layer matmul weights) + the head (2 x hidden x vocab logits of a
        language-model head; :meth:`head_flops_per_token`)
        + attention 4 x seq x q_width per layer (QK^T and AV).

        ``causal_skip=False`` counts the full seq x seq score matrix (Megatron-LM's and llm-foundry's
        MFU convention); ``True`` counts only the unmasked half (what FlashAttention executes).
        """
        s = self.seq_length if seq_len is None else int(seq_len)
        c = self.param_counts()
        norms = self.num_layers * c["norms_per_layer"]
        layer_weights = (c["layers_active"] if active else c["layers_total"]) - norms
        # biases are additions, not matmul weights: the attention's in every layer, the MLPs' in dense layers and,
        # per MoE layer, those of the experts a token passes through (all of them with active=False) and the shared one
        biases = float(self.num_layers * self._attention_bias_params())
        biases += self.num_dense_layers * self._mlp_bias(int(self.ffn_hidden_size))  # type: ignore[arg-type]
        if self.is_moe:
            experts = self.moe_router_topk if active else int(self.num_experts)  # type: ignore[arg-type]
            fs = self.moe_shared_expert_intermediate_size
            biases += self.num_moe_layers * (experts * self._mlp_bias(int(self.moe_ffn_hidden_size))  # type: ignore[arg-type]
                                             + (self._mlp_bias(fs) if fs else 0))
        layer_weights -= biases
        if causal_skip:
            span = self.attention_span(s)
        elif self.attention_chunk_size and self.causal:  # each chunk's full square: 2 x causal pairs - diagonal
            span = 2.0 * self.attention_span(s) - 1.0
        else:
            span = self.window_keys(s)
        # QK^T over the query/key head width and AV over the value width (both the head dim but under MLA)
        attention = 2.0 * span * (self.q_width + self.value_width) * self.num_layers
        return 2.0 * layer_weights + self.head_flops_per_token(s) + attention + self.encoder_head_flops_per_token(s)

    def encoder_head_flops_per_token(self, seq_len: int | float) -> float:
        """Forward matmul FLOPs per token of an encoder's head transform: the MLM head's dense ``h x h`` on every
        token (``2 h^2``) and the pooler's dense on each sequence's [CLS] token (``2 h^2 / seq_len``) where the model
        has them (``BertForMaskedLM``: no pooler; a classifier or a bare encoder: the pooler only); 0 for a decoder."""
        if not self.encoder_only:
            return 0.0
        h2 = 2.0 * self.hidden_size ** 2
        return (h2 if self.lm_head else 0.0) + (h2 / max(float(seq_len), 1.0) if self.pooler else 0.0)

    def kv_cache_bytes_per_token(self, bytes_per_element: float = 2.0) -> float:
        """Bytes of K and V cached per token over all layers (MLA: the latent and the rotary key, once)."""
        if self.is_mla:
            return float(self.num_layers * self.mla_latent_width * bytes_per_element)
        return 2.0 * self.num_layers * self.kv_width * bytes_per_element

    # ----------------------------------------------------------------------------------- I/O
    def to_dict(self) -> dict[str, Any]:
        """Megatron-style keys (what :func:`from_dict` reads back)."""
        return asdict(self)

    def summary(self) -> dict[str, Any]:
        """One row for listings: shapes and parameter counts."""
        return {
            "name": self.name,
            "params_b": round(self.num_params / 1e9, 3),
            "active_params_b": round(self.num_active_params / 1e9, 3),
            "layers": self.num_layers,
            "hidden": self.hidden_size,
            "heads": self.num_attention_heads,
            "kv_heads": f"MLA {self.kv_lora_rank}+{self.qk_pos_emb_head_dim}" if self.is_mla else self.num_kv_heads,
            "head_dim": self.head_dim,
            "ffn": self.moe_ffn_hidden_size if self.is_moe else self.ffn_hidden_size,
            "activation": self.activation,
            "norm": self.normalization,
            "vocab": self.vocab_size,
            "seq": self.seq_length,
            "experts": (f"{self.num_experts}x top-{self.moe_router_topk}"
                        + (f", {self.num_dense_layers} dense" if self.num_dense_layers else "")) if self.is_moe else "",
            "dropout": self.dropout,
            "source": self.source,
        }


# ======================================================================================= loaders
_FIELD_NAMES = {f.name for f in fields(TransformerConfig)}

#: Megatron-LM argument spellings that map onto a field or a flag
_MEGATRON_ALIASES = {
    "max_position_embeddings": "max_position_embeddings",
    "group_query_attention": None,  # false: num_query_groups is ignored (MHA), as Megatron-LM does
    "window_size": "window_size",
    "moe_shared_expert_intermediate_size": "moe_shared_expert_intermediate_size",
}


def _as_bool(value: Any, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.lower() in ("true", "yes", "1")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise InvalidInputError(f"model config: {what} must be true or false, got {value!r}")


def _probability(value: Any, what: str) -> float:
    """A dropout probability of a model config, in [0, 1], or a clear error naming the field."""
    try:
        p = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"model config: {what} must be a probability in [0, 1], got {value!r}") from None
    if isinstance(value, bool) or not 0.0 <= p <= 1.0:
        raise InvalidInputError(f"model config: {what} must be a probability in [0, 1], got {value!r}")
    return p


#: Dropout probabilities of Hugging Face configs (hidden/residual, attention, embedding; MPT's ``attn_pdrop``
#: sits in ``attn_config``). Heads' ``classifier_dropout`` / ``summary_first_dropout`` are not the backbone's.
HF_DROPOUT_KEYS = ("attention_dropout", "hidden_dropout", "attention_probs_dropout_prob", "hidden_dropout_prob",
                   "attn_pdrop", "resid_pdrop", "embd_pdrop", "emb_pdrop", "dropout", "activation_dropout",
                   "residual_dropout", "embedding_dropout")
#: model_types whose transformers config class defaults to dropout (0.1) when config.json names no probability:
#: GPT-2 (resid/embd/attn_pdrop), BERT (hidden/attention_probs_dropout_prob), OPT (dropout), GPT-BigCode. Every
#: other supported type defaults to 0 (Llama, Mistral, Qwen, Gemma, DeepSeek, GPT-J, MPT, Falcon, BLOOM, ...).
_HF_DROPOUT_BY_DEFAULT = ("gpt2", "bert", "opt", "gpt_bigcode")


def _hf_dropout(d: Mapping[str, Any], mt: str) -> bool:
    """Whether a Hugging Face config trains with dropout: any of its :data:`HF_DROPOUT_KEYS` above 0, else its
    config class's default."""
    attn = d.get("attn_config")
    found = [(k, d[k]) for k in HF_DROPOUT_KEYS if d.get(k) is not None]
    if isinstance(attn, Mapping) and attn.get("attn_pdrop") is not None:
        found.append(("attn_config.attn_pdrop", attn["attn_pdrop"]))
    if not found:
        return mt in _HF_DROPOUT_BY_DEFAULT
    return any(_probability(v, f"Hugging Face config field {k!r}") > 0 for k, v in found)


#: The attention probabilities' dropout among :data:`HF_DROPOUT_KEYS`; model_types whose config class defaults it to
#: 0 while their hidden dropout is on (OPTConfig: dropout 0.1, attention_dropout 0.0).
HF_ATTENTION_DROPOUT_KEYS = ("attention_dropout", "attention_probs_dropout_prob", "attn_pdrop")
_HF_NO_ATTENTION_DROPOUT_BY_DEFAULT = ("opt",)


def _hf_attention_dropout(d: Mapping[str, Any], mt: str) -> bool | None:
    """Whether a Hugging Face config drops out attention probabilities: its attention probability above 0 when it
    names one (:data:`HF_ATTENTION_DROPOUT_KEYS`, MPT's ``attn_config.attn_pdrop``), False for a config class that
    defaults it to 0, else None (as the model's dropout)."""
    attn = d.get("attn_config")
    found = [(k, d[k]) for k in HF_ATTENTION_DROPOUT_KEYS if d.get(k) is not None]
    if isinstance(attn, Mapping) and attn.get("attn_pdrop") is not None:
        found.append(("attn_config.attn_pdrop", attn["attn_pdrop"]))
    if not found:
        return False if mt in _HF_NO_ATTENTION_DROPOUT_BY_DEFAULT else None
    return any(_probability(v, f"Hugging Face config field {k!r}") > 0 for k, v in found)


def _from_megatron(d: Mapping[str, Any], name: str | None) -> TransformerConfig:
    kw: dict[str, Any] = {}
    probs: dict[str, float] = {}
    gqa: bool | None = None
    mla: bool | None = None
    padded_vocab: Any = None
    for key, value in d.items():
        k = str(key).lstrip("-").replace("-", "_")
        if value is None:  # an arguments dump (vars(args)) holds unset arguments as null: Megatron's defaults
            continue
        if k == "padded_vocab_size":  # the dump's vocabulary (vocab_size is null unless given); see below
            padded_vocab = value
            continue
        if k in ("swiglu",):
            if _as_bool(value, k):
                kw["activation"] = "swiglu"
        elif k == "squared_relu":
            if _as_bool(value, k):
                kw["activation"] = "squared_relu"
        elif k == "disable_bias_linear":
            kw["add_bias_linear"] = not _as_bool(value, k)
        elif k == "use_rotary_position_embeddings":
            if _as_bool(value, k):
                kw["position_embedding_type"] = "rope"
        elif k in ("tied_embeddings", "tie_word_embeddings", "share_embeddings_and_output_weights"):
            kw["untie_embeddings_and_output_weights"] = not _as_bool(value, k)
        elif k in ("untie_embeddings_and_output_weights", "add_bias_linear", "add_qkv_bias", "add_attn_out_bias",
                   "add_mlp_bias", "qk_layernorm_full_width", "qk_layernorm_affine",
                   "qk_layernorm_bias", "norm_affine", "norm_bias", "output_layer_bias",
                   "qk_layernorm",
                   "parallel_attn", "encoder_only", "pooler", "moe_shared_expert_gate", "sandwich_norm", "dropout"):
            kw[k] = _as_bool(value, k)
        elif k == "attention_dropout" and isinstance(value, bool):  # the field itself (on / off)
            kw[k] = value
        elif k in ("hidden_dropout", "attention_dropout"):  # Megatron-LM's probabilities (default 0.1 each)
            probs[k] = _probability(value, k)
        elif k == "group_query_attention":
            gqa = _as_bool(value, k)
        elif k == "multi_latent_attention":
            mla = _as_bool(value, k)
        elif k in _FIELD_NAMES:
            kw[k] = value
    if "vocab_size" not in kw and padded_vocab is not None:
        kw["vocab_size"] = padded_vocab  # the rows Megatron allocated (padded for the dump's TP)
    if gqa is False:
        # Megatron-LM reads --num-query-groups (argparse default 1) only under --group-query-attention: an
        # arguments dump of an MHA model carries num_query_groups = 1, which is not multi-query attention
        kw.pop("num_query_groups", None)
    if mla is False:  # likewise the MLA sizes, which have argparse defaults (kv_lora_rank 32...) without the flag
        for f in ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
            kw.pop(f, None)
    if probs and "dropout" not in kw:  # an explicit dropout key wins; an unset probability is Megatron's 0.1
        kw["dropout"] = max(probs.get("hidden_dropout", 0.1), probs.get("attention_dropout", 0.1)) > 0
    if "attention_dropout" in probs and "attention_dropout" not in kw:
        kw["attention_dropout"] = probs["attention_dropout"] > 0
    if name is not None:
        kw["name"] = name
    missing = [k for k in ("num_layers", "hidden_size", "num_attention_heads") if k not in kw]
    if missing:
        hf = [k for k in ("architectures", "num_hidden_layers", "n_layer", "n_layers") if k in d]
        hint = (f" (it has Hugging Face fields ({', '.join(hf)}) but no model_type, which a config.json names its "
                "architecture by: add it, e.g. \"model_type\": \"llama\")") if hf else ""
        raise InvalidInputError(f"model config {kw.get('name', '')!r} lacks {', '.join(missing)}{hint}")
    try:
        return TransformerConfig(**kw)
    except TypeError as exc:  # wrong value types reach here only through odd YAML
        raise InvalidInputError(f"model config: {exc}") from None


def _get(d: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return default


def _int(d: Mapping[str, Any], *keys: str, default: Any = None) -> int:
    """A whole-number field of a Hugging Face config (the first of ``keys`` present), or a clear error naming it."""
    v = _get(d, *keys, default=default)
    if v is None:
        raise InvalidInputError(f"Hugging Face config lacks {keys[0]!r}")
    key = next((k for k in keys if d.get(k) is not None), keys[0])
    # one rule for every whole-number field: a string is refused (a JSON number is what transformers reads), as
    # the fields passed on as they are were; "32" was accepted here and refused there
    if isinstance(v, bool | str):
        raise InvalidInputError(f"Hugging Face config field {key!r} must be a number, got {v!r}")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise InvalidInputError(f"Hugging Face config field {key!r} must be a number, got {v!r}") from None
    if not f.is_integer():
        raise InvalidInputError(f"Hugging Face config field {key!r} must be a whole number, got {v!r}")
    return int(f)


#: The config.json keys each whole-number field of :class:`TransformerConfig` is read from, to name the key a user
#: wrote in an error (not the field's internal name: ``"num_hidden_layers": "32"`` said "num_layers must be ...",
#: ``"max_position_embeddings": 0`` "seq_length must be ...")
_HF_INT_KEYS: dict[str, tuple[str, ...]] = {
    "num_layers": ("num_hidden_layers", "n_layer", "n_layers"),
    "hidden_size": ("hidden_size", "n_embd", "n_embed", "d_model"),
    "num_attention_heads": ("num_attention_heads", "n_head", "n_heads"),
    "num_query_groups": ("num_key_value_heads", "num_kv_heads", "n_head_kv", "kv_n_heads"),
    "kv_channels": ("head_dim",),
    "ffn_hidden_size": ("intermediate_size_mlp", "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"),
    "vocab_size": ("vocab_size",),
    "seq_length": ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "seq_length"),
    "max_position_embeddings": ("max_position_embeddings", "n_positions"),
    "window_size": ("sliding_window",), "attention_chunk_size": ("attention_chunk_size",),
    "num_experts": ("num_local_experts", "num_experts", "n_routed_experts"),
    "moe_router_topk": ("num_experts_per_tok", "experts_per_token"),
    "moe_ffn_hidden_size": ("moe_intermediate_size", "intermediate_size"),
    "moe_shared_expert_intermediate_size": ("shared_expert_intermediate_size", "moe_intermediate_size"),
    "q_lora_rank": ("q_lora_rank",), "kv_lora_rank": ("kv_lora_rank",), "qk_head_dim": ("qk_nope_head_dim",),
    "qk_pos_emb_head_dim": ("qk_rope_head_dim",), "v_head_dim": ("v_head_dim",),
    "parallel_attn_norms": ("num_ln_in_parallel_attn",),
    "moe_first_k_dense": ("first_k_dense_replace",), "num_tokentypes": ("type_vocab_size",),
    "num_labels": ("num_labels",),
}
#: the fields of :data:`_HF_INT_KEYS` that may be 0
_HF_INT_ZERO_OK = ("moe_first_k_dense", "num_tokentypes")


def _check_hf_ints(d: Mapping[str, Any], kw: dict[str, Any], mt: str, prefix: str) -> None:
    """Whole-number fields of a Hugging Face config as :class:`TransformerConfig` takes them, or an error naming the
    config.json key the value came from (``prefix``: ``text_config.`` for a nested language model). A whole float
    (``32.0``) is read as the integer; a string, a bool, a fraction or a value below 1 (0 where allowed) is refused."""
    for field, keys in _HF_INT_KEYS.items():
        v = kw.get(field)
        if v is None:
            continue
        ok_float = isinstance(v, float) and v.is_integer()
        if ok_float:
            kw[field] = v = int(v)
        low = 0 if field in _HF_INT_ZERO_OK else 1
        if not isinstance(v, bool) and isinstance(v, int) and v >= low:
            continue
        key = next((k for k in keys if k in d and type(d[k]) is type(v) and d[k] == v), None)
        where = f"field {prefix + key!r}" if key else f"field for {field} ({' / '.join(prefix + k for k in keys)})"
        need = "a whole number >= 0" if low == 0 else "a positive integer"
        raise InvalidInputError(f"Hugging Face config ({mt}) {where} must be {need}, got {v!r}")


def _flag(d: Mapping[str, Any], key: str, default: bool) -> bool:
    """A true/false field of a Hugging Face config (``default`` when absent or null). ``bool()`` of the raw value
    would read the string ``"false"`` (a hand-edited or templated config.json) as true, untying a tied output layer
    or adding biases; strings and 0/1 are read as what they say and anything else is refused naming the field."""
    v = d.get(key)
    if v is None:
        return default
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false", "yes", "no", "1", "0"):
        return v.strip().lower() in ("true", "yes", "1")
    if isinstance(v, int | float) and v in (0, 1):
        return bool(v)
    raise InvalidInputError(f"Hugging Face config field {key!r} must be true or false, got {v!r}")


#: transformers' activation functions (``transformers.activations.ACT2FN``, the names a config.json's ``hidden_act`` /
#: ``activation_function`` takes) by the op they cost here: SiLU gates a SwiGLU MLP, any other gates a GeGLU-like
#: one (the same three matrices); an ungated MLP costs one pointwise op (ReLU, squared ReLU, or GELU-like for the
#: rest). Whether the MLP is gated is the architecture's (Llama-like: always), not the activation's.
_HF_ACTIVATIONS = {
    **dict.fromkeys(("gelu", "gelu_10", "gelu_accurate", "gelu_fast", "gelu_new", "gelu_python", "gelu_python_tanh",
                     "gelu_pytorch_tanh", "quick_gelu", "laplace", "mish", "hardswish", "sigmoid", "tanh", "linear",
                     "prelu", "xielu", "sqrtsoftplus"), "gelu"),
    **dict.fromkeys(("relu", "relu6", "leaky_relu"), "relu"),
    "relu2": "squared_relu", "silu": "silu", "swish": "silu",
}


def _act(hidden_act: Any, gated: bool, field: str = "hidden_act") -> str:
    """The activation of a Hugging Face config (``hidden_act`` or the architecture's spelling, ``field``). A name
    transformers does not know is refused rather than read as GELU: a typo (``"slu"``) would otherwise cost a
    Llama-like model as GeGLU and, on an ungated architecture, ``"relu2"`` as GELU."""
    a = str(hidden_act).strip().lower() if isinstance(hidden_act, str) else None
    if gated and a in ("swiglu", "geglu"):  # spelled as the gated function itself
        return a
    kind = _HF_ACTIVATIONS.get(a) if a is not None else None
    if kind is None:
        raise InvalidInputError(f"Hugging Face config field {field!r}: unknown activation {hidden_act!r} "
                                f"(transformers' names: {', '.join(sorted(_HF_ACTIVATIONS))})")
    if gated:
        return "swiglu" if kind == "silu" else "geglu"
    return "gelu" if kind == "silu" else kind


def _float(d: Mapping[str, Any], key: str, default: float) -> float:
    v = _get(d, key, default=default)
    try:
        return float(v)
    except (TypeError, ValueError):
        raise InvalidInputError(f"Hugging Face config field {key!r} must be a number, got {v!r}") from None


def _rotary(d: Mapping[str, Any], key: str, default: float) -> float:
    """The share of each head that rotary embeddings rotate: the config's ``key`` (``partial_rotary_factor``,
    GPT-NeoX's ``rotary_pct``) or, as transformers 5 saves it, ``rope_parameters.partial_rotary_factor``; else the
    config class's ``default``."""
    if d.get(key) is not None:
        return _float(d, key, default)
    rope = d.get("rope_parameters")
    if isinstance(rope, Mapping) and rope.get("partial_rotary_factor") is not None:
        return _float(rope, "partial_rotary_factor", default)
    return default


def _seq(d: Mapping[str, Any], default: int, *keys: str) -> int:
    """Default training/inference sequence length: the model's positions, capped at 8192."""
    return min(_int(d, *(keys or ("max_position_embeddings",)), default=default), 8192)


def _hf_decoder(d: Mapping[str, Any], gated: bool, normalization: str, seq: int, act: str = "gelu") -> dict[str, Any]:
    """The fields most rotary decoders spell the Llama way (layers, widths, heads, KV heads, MLP, vocabulary,
    positions); each architecture adds what differs."""
    heads = _int(d, "num_attention_heads")
    return dict(num_layers=_get(d, "num_hidden_layers"), hidden_size=_get(d, "hidden_size"), num_attention_heads=heads,
                num_query_groups=_get(d, "num_key_value_heads", default=heads),
                ffn_hidden_size=_get(d, "intermediate_size"),
                activation=_act(_get(d, "hidden_act", default=act), gated),
                normalization=normalization, vocab_size=_get(d, "vocab_size"),
                max_position_embeddings=_get(d, "max_position_embeddings"), seq_length=_seq(d, seq),
                position_embedding_type="rope")


# The language models of architectures that Hugging Face describes in the Llama/Mistral/... layout under
# another model_type, and those that a few more fields describe. Each fills ``kw`` (TransformerConfig fields).
def _hf_gpt_neox(d: Mapping[str, Any], kw: dict[str, Any]) -> None:
    """GPT-NeoX-20B, Pythia, (Red)Pajama-INCITE: partial rotary, biases, parallel residual with two norms."""
    h = _int(d, "hidden_size")
    kw.update(num_layers=_get(d, "num_hidden_layers"), hidden_size=h, num_attention_heads=_get(d, "num_attention_heads"),
              ffn_hidden_size=_get(d, "intermediate_size", default=4 * h),
              activation=_act(_get(d, "hidden_act", default="gelu"), False), normalization="LayerNorm",
              vocab_size=_get(d, "vocab_size"),
              max_position_embeddings=_get(d, "max_position_embeddings"), seq_length=_seq(d, 2048),
              position_embedding_type="rope", rotary_percent=_rotary(d, "rotary_pct", 0.25),
              # attention_bias is the attention's (query_key_value, dense); the MLP always has biases
              add_bias_linear=_flag(d, "attention_bias", True), add_mlp_bias=True,
              untie_embeddings_and_output_weights=not _flag(d, "tie_word_embeddings", False),
              parallel_attn=_flag(d, "use_parallel_residual", True), parallel_attn_norms=2)


def _hf_phi(d: Mapping[str, Any], kw: dict[str, Any]) -> None:
    """Phi-1, Phi-1.5, Phi-2: attention and MLP in parallel on one LayerNorm, partial rotary, biases."""
    kw.update(**_hf_decoder(d, False, "LayerNorm", 2048), rotary_percent=_rotary(d, "partial_rotary_factor", 0.5),
              add_bias_linear=True, output_layer_bias=True, qk_layernorm=_flag(d, "qk_layernorm", False),
              untie_embeddings_and_output_weights=not _flag(d, "tie_word_embeddings", False),
              parallel_attn=True, parallel_attn_norms=1)


def _hf_opt(d: Mapping[str, Any], kw: dict[str, Any]) -> None:
    """Meta's OPT: learned positions, ReLU MLP, biases, tied embeddings."""
    h, proj = _int(d, "hidden_size"), _int(d, "word_embed_proj_dim", "hidden_size")
    if proj != h:  # OPT-350m: a 512-wide table projected in and out of the 1024-wide layers
        raise InvalidInputError(f"Hugging Face config (opt): word_embed_proj_dim {proj} differs from hidden_size {h} "
                                "(embeddings projected in and out of the layers, as OPT-350m's) and is not supported")
    kw.update(num_layers=_get(d, "num_hidden_layers"), hidden_size=_get(d, "hidden_size"),
              num_attention_heads=_get(d, "num_attention_heads"), ffn_hidden_size=_get(d, "ffn_dim"),
              activation=_act(_get(d, "activation_function", default="relu"), False, "activation_function"),
              normalization="LayerNorm",
              vocab_size=_get(d, "vocab_size"), seq_length=_seq(d, 2048),
              max_position_embeddings=_get(d, "max_position_embeddings"), position_embedding_type="learned_absolute",
              add_bias_linear=_flag(d, "enable_bias", True),
              untie_embeddings_and_output_weights=not _flag(d, "tie_word_embeddings", True))


def _hf_gpt_bigcode(d: Mapping[str, Any], kw: dict[str, Any]) -> None:
    """StarCoder, SantaCoder: GPT-2 layout with multi-query attention."""
    h = _int(d, "n_embd", "hidden_size")
    heads = _int(d, "n_head", "num_attention_heads")
    kw.update(num_layers=_get(d, "n_layer", "num_hidden_layers"), hidden_size=h, num_attention_heads=heads,
              num_query_groups=1 if _flag(d, "multi_query", True) else heads,
              ffn_hidden_size=_get(d, "n_inner", default=4 * h),
              activation=_act(_get(d, "activation_function", default="gelu_pytorch_tanh"), False, "activation_function"),
              normalization="LayerNorm", vocab_size=_get(d, "vocab_size"),
              seq_length=_seq(d, 2048, "n_positions", "max_position_embeddings"),
              max_position_embeddings=_get(d, "n_positions", "max_position_embeddings"),
              position_embedding_type="learned_absolute",
              untie_embeddings_and_output_weights=not _flag(d, "tie_word_embeddings", True))


def _hf_starcoder2(d: Mapping[str, Any], kw: dict[str, Any]) -> None:
    """StarCoder2: GQA, rotary, LayerNorm, biases, a plain GELU MLP, sliding-window attention."""
    kw.update(**_hf_decoder(d, False, "LayerNorm", 4096), add_bias_linear=_flag(d, "use_bias", True),
              window_size=_get(d, "sliding_window"),
              untie_embeddings_and_output_weights=not _flag(d, "tie_word_embeddings", True))


def _hf_olmo(d: Mapping[str, Any], kw: dict[str, Any], mt: str) -> None:
    """AI2's OLMo (non-parametric LayerNorm), OLMo 2 (RMSNorm after each block, QK-norm) and OLMoE (64 experts)."""
    bias = _flag(d, "attention_bias", False)  # Q, K, V and output
    kw.update(**_hf_decoder(d, True, "LayerNorm" if mt == "olmo" else "RMSNorm", 4096, act="silu"),
              add_bias_linear=False, add_qkv_bias=bias, add_attn_out_bias=bias, norm_affine=mt != "olmo",
              qk_layernorm=mt != "olmo", qk_layernorm_full_width=mt != "olmo",
              untie_embeddings_and_output_weights=not _flag(d, "tie_word_embeddings", False))
    if mt == "olmoe":
        experts, topk = _hf_experts(d, mt, "num_experts", "num_local_experts")
        kw.update(num_experts=experts, moe_router_topk=topk, moe_ffn_hidden_size=_get(d, "intermediate_size"))


def _hf_stablelm(d: Mapping[str, Any], kw: dict[str, Any]) -> None:
    """StableLM (2): LayerNorm, SwiGLU, partial rotary, optional QKV bias, QK-norm and parallel residual."""
    kw.update(**_hf_decoder(d, True, "LayerNorm", 4096, act="silu"),
              rotary_percent=_rotary(d, "partial_rotary_factor", 0.25), add_bias_linear=False,
              add_qkv_bias=_flag(d, "use_qkv_bias", False), qk_layernorm=_flag(d, "qk_layernorm", False),
              # transformers' StableLmLayerNormPerHead: a bias-free LayerNorm per query and per KV head
              qk_layernorm_full_width=True, qk_layernorm_bias=False,
              parallel_attn=_flag(d, "use_parallel_residual", False), parallel_attn_norms=1,
              untie_embeddings_and_output_weights=not _flag(d, "tie_word_embeddings", False))


def _hf_bloom(d: Mapping[str, Any], kw: dict[str, Any]) -> None:
    """BLOOM: ALiBi, LayerNorm, GELU MLP, biases, tied embeddings."""
    h = _int(d, "hidden_size", "n_embed")
    kw.update(num_layers=_get(d, "n_layer", "num_hidden_layers"), hidden_size=h,
              num_attention_heads=_get(d, "n_head", "num_attention_heads"), ffn_hidden_size=4 * h,
              activation="gelu", normalization="LayerNorm", vocab_size=_get(d, "vocab_size"),
              seq_length=_seq(d, 2048, "seq_length"), position_embedding_type="alibi",
              untie_embeddings_and_output_weights=not _flag(d, "tie_word_embeddings", True))


#: llm-foundry's MPT options (``attn_config.attn_type``, ``ffn_config.ffn_type``, ``norm_type``) this library
#: costs; the others (MegaBlocks MoE ``mb_moe`` / ``mb_dmoe``, QK group norms, ...) change the architecture and are
#: refused rather than costed as a dense multi-head MPT
_MPT_ATTN = ("multihead_attention", "multiquery_attention", "grouped_query_attention")
_MPT_FFN = ("mptmlp", "te_ln_mlp", "mptglu")
_MPT_NORMS = {"layernorm": "LayerNorm", "low_precision_layernorm": "LayerNorm", "rmsnorm": "RMSNorm",
              "low_precision_rmsnorm": "RMSNorm", "triton_rmsnorm": "RMSNorm"}


def _hf_mpt(d: Mapping[str, Any]) -> dict[str, Any]:
    """MosaicML's MPT as llm-foundry builds it (``NumParams``): ALiBi, rotary or learned positions; multi-head,
    multi-query (one KV head) or grouped-query attention (``kv_n_heads``, read for that kind only: llm-foundry
    ignores it otherwise); a plain or gated (``mptglu``) MLP with ``ffn_act_fn``; optional full-width QK LayerNorms;
    ``no_bias`` drops every bias, the norms' too. An option that changes the layout and is not costed here is
    refused rather than read as the default: a multi-query MPT had its KV cache costed 32x too large, a MegaBlocks
    MoE as a dense model."""
    attn, ffn_cfg = d.get("attn_config") or {}, d.get("ffn_config") or {}
    for key, v in (("attn_config", attn), ("ffn_config", ffn_cfg)):
        if not isinstance(v, Mapping):
            raise InvalidInputError(f"Hugging Face config (mpt) field {key!r} must be a mapping, got {v!r:.100}")
    attn_type = str(attn.get("attn_type") or "multihead_attention")
    ffn_type = str(ffn_cfg.get("ffn_type") or "mptmlp")
    norm = str(d.get("norm_type") or "low_precision_layernorm").lower()
    for field, value, known in (("attn_config.attn_type", attn_type, _MPT_ATTN),
                                ("ffn_config.ffn_type", ffn_type, _MPT_FFN), ("norm_type", norm, tuple(_MPT_NORMS))):
        if value not in known:
            raise InvalidInputError(f"Hugging Face config (mpt): {field} {value!r} is not supported "
                                    f"({', '.join(known)})")
    if _flag(attn, "qk_gn", False):
        raise InvalidInputError("Hugging Face config (mpt): attn_config.qk_gn (per-head QK group norms) is not "
                                "supported")
    h, heads = _int(d, "d_model"), _int(d, "n_heads")
    kv = {"multihead_attention": heads, "multiquery_attention": 1,
          "grouped_query_attention": _get(attn, "kv_n_heads", default=heads)}[attn_type]
    act = ffn_cfg.get("ffn_act_fn")
    act_name = (act.get("name") if isinstance(act, Mapping) else act) or "gelu"
    rope = _flag(attn, "rope", False)
    no_bias = _flag(d, "no_bias", False)
    return dict(num_layers=_get(d, "n_layers"), hidden_size=h, num_attention_heads=heads, num_query_groups=kv,
                ffn_hidden_size=ffn_cfg.get("ffn_hidden_size") or int(float(d.get("expansion_ratio", 4)) * h),
                activation=_act(act_name, ffn_type == "mptglu", "ffn_config.ffn_act_fn"),
                normalization=_MPT_NORMS[norm], vocab_size=_get(d, "vocab_size"),
                seq_length=_get(d, "max_seq_len", default=2048),
                # MPTConfig turns learned positions off under ALiBi or rotary embeddings
                position_embedding_type=("alibi" if _flag(attn, "alibi", False) else "rope" if rope else
                                         "learned_absolute" if _flag(d, "learned_pos_emb", True) else "none"),
                qk_layernorm=_flag(attn, "qk_ln", False), qk_layernorm_full_width=True,
                add_bias_linear=not no_bias, norm_bias=not no_bias,
                untie_embeddings_and_output_weights=not _flag(d, "tie_word_embeddings", True))


_HF_MORE = {
    "gpt_neox": _hf_gpt_neox, "phi": _hf_phi, "opt": _hf_opt, "gpt_bigcode": _hf_gpt_bigcode,
    "starcoder2": _hf_starcoder2, "stablelm": _hf_stablelm, "bloom": _hf_bloom,
    "olmo": lambda d, kw: _hf_olmo(d, kw, "olmo"), "olmo2": lambda d, kw: _hf_olmo(d, kw, "olmo2"),
    "olmoe": lambda d, kw: _hf_olmo(d, kw, "olmoe"),
}
#: Llama-layout decoders whose attention biases transformers fixes, ignoring ``attention_bias``: Qwen2's Q/K/V always
#: (Qwen2-MoE's by its own ``qkv_bias``), no output-projection bias; Mistral, Mixtral and Phi-3 have none at all
_FIXED_ATTN_BIAS = ("qwen2", "qwen2_moe", "mistral", "mixtral", "phi3")
#: Llama-layout decoders under their own model_type (Granite's extra scalar multipliers cost nothing)
_LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "phi3", "granite",
               "granitemoe")
#: transformers' config class defaults of the language models that vision-language configs nest: transformers 4.x
#: wrote a nested ``text_config`` without the values equal to them (llava-1.5-7b-hf's Vicuna-7B names no layer,
#: width or head count: LlamaConfig's defaults; gemma-3-4b-it's no heads), so they stand in for what is missing
#: (Llama, Mistral, Gemma 3, Llama 4)
_HF_TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, max_position_embeddings=2048),
    "mistral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, sliding_window=4096),
    "gemma3_text": dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=131072,
                        sliding_window=4096),
    # Llama4TextConfig's defaults are Llama 4 Scout's language model
    "llama4_text": dict(vocab_size=202048, hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16384,
                        num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
                        max_position_embeddings=131072, num_local_experts=16, num_experts_per_tok=1,
                        interleave_moe_layer_step=1),
}
#: The vocabulary of the Gemma config classes, which Google's published configs leave to them: gemma-3-27b-it's
#: ``text_config`` names no ``vocab_size`` (transformers' Gemma3TextConfig: 262,208; GemmaConfig, Gemma2Config:
#: 256,000)
_GEMMA_VOCAB = {"gemma": 256000, "gemma2": 256000, "gemma3_text": 262208}
#: model_types read as another: multimodal configs' language models (their ``text_config``), vision-language
#: models whose language model is a Qwen2/3
_HF_AS = {"llama4": "llama4_text", "gemma3": "gemma3_text", "qwen2_vl": "qwen2", "qwen2_5_vl": "qwen2",
          "qwen2_vl_text": "qwen2", "qwen2_5_vl_text": "qwen2", "qwen3_vl_text": "qwen3",
          "qwen3_vl_moe_text": "qwen3_moe"}
HF_MODEL_TYPES = (*_LLAMA_LIKE, "gemma", "gemma2", "gemma3", "llama4", "deepseek_v2", "deepseek_v3", "gpt_oss",
                  "gpt2", "gptj", "mpt", "falcon", "bert", *_HF_MORE, "qwen2_vl", "qwen2_5_vl")


def _hf_quantization(qc: Any) -> tuple[str | None, bool, str]:
    """(weight format, fp8 KV cache, description) of a config.json's ``quantization_config``: GPTQ / AWQ / HQQ /
    bitsandbytes bit widths, fp8 (``fp8``, ``fbgemm_fp8``, compressed-tensors float 8-bit, ModelOpt FP8), fp4
    (``mxfp4``, ModelOpt NVFP4, compressed-tensors float 4-bit). A width this library has no format for (2/3-bit)
    gives ``None`` (16-bit) and says so in the description."""
    if not isinstance(qc, Mapping):
        return None, False, ""
    method = str(qc.get("quant_method") or qc.get("quant_algo") or "").lower()
    algo = str(qc.get("quant_algo") or "").lower()
    kv = bool(qc.get("kv_cache_scheme")) or "fp8" in str(qc.get("kv_cache_quant_algo") or "").lower()
    fmt: str | None = None
    detail = method
    if method in ("gptq", "awq", "hqq", "aqlm", "eetq", "quanto", "auto-round", "autoround"):
        bits = qc.get("bits", qc.get("w_bit", qc.get("nbits", 8 if method == "eetq" else None)))
        try:
            width = float(bits)  # a number, or a numeric string
        except (TypeError, ValueError):
            width = float("nan")
        fmt = {4.0: "int4", 8.0: "int8"}.get(width)
        detail = f"{method}, {bits}-bit"
    elif method == "bitsandbytes":
        fmt = "int4" if qc.get("load_in_4bit") else "int8" if qc.get("load_in_8bit") else None
        detail = ("bitsandbytes, neither load_in_4bit nor load_in_8bit" if fmt is None
                  else f"bitsandbytes {'4' if fmt == 'int4' else '8'}-bit")
    elif method in ("fp8", "fbgemm_fp8") or algo == "fp8":
        fmt = "fp8"
    elif method in ("mxfp4", "nvfp4") or algo in ("nvfp4", "mxfp4", "w4a8_awq"):
        fmt = "fp4" if algo != "w4a8_awq" else "int4"
    elif method == "compressed-tensors":
        groups = qc.get("config_groups") or {}
        weights = [g.get("weights") for g in groups.values() if isinstance(g, Mapping)] if isinstance(groups, Mapping) \
            else []
        w = next((x for x in weights if isinstance(x, Mapping)), None)
        if w:
            bits, kind = w.get("num_bits"), str(w.get("type", "int")).lower()
            fmt = {(8, "float"): "fp8", (4, "float"): "fp4", (8, "int"): "int8", (4, "int"): "int4"}.get(
                (bits, kind))
            detail = f"compressed-tensors, {kind} {bits}-bit weights"
    if fmt is None:
        detail += " (no weight format here for it: costed as 16-bit; --weights / --dtype set one)"
    return fmt, kv, detail


#: The per-layer attention kinds of a ``layer_types`` list that this library costs: global attention and attention
#: within ``sliding_window``. Others change the architecture (Llama 4's ``chunked_attention``, Qwen3-Next's
#: ``linear_attention``) and are refused rather than costed as one of these.
_LAYER_KINDS = ("full_attention", "sliding_attention")


def _listed_share(d: Mapping[str, Any], local: str = "sliding_attention",
                  known: tuple[str, ...] = _LAYER_KINDS) -> float | None:
    """Share of the ``local`` layers (sliding-window; Llama 4: ``chunked_attention``) in the config's
    ``layer_types`` (None when it lists none). The list must name one ``known`` kind per layer, as transformers
    checks: a string, a list of another length or an unknown kind was read as every layer sliding (or as a share of
    the wrong number of layers)."""
    kinds = d.get("layer_types")
    if kinds is None or (isinstance(kinds, (list, tuple)) and not kinds):
        return None
    layers = _int(d, "num_hidden_layers")
    if not isinstance(kinds, (list, tuple)) or len(kinds) != layers:
        raise InvalidInputError(f"Hugging Face config field 'layer_types' must list one attention kind per layer "
                                f"({layers}), got {kinds!r:.200}")
    unknown = sorted({str(k) for k in kinds if k not in known})
    if unknown:
        raise InvalidInputError(f"Hugging Face config field 'layer_types': attention kind(s) {', '.join(unknown)} "
                                f"not supported here (only {', '.join(known)})")
    return sum(1 for k in kinds if k == local) / layers


def _llama4_chunks(d: Mapping[str, Any]) -> dict[str, Any]:
    """Llama 4's chunked local attention as transformers' Llama4TextConfig reads it: ``attention_chunk_size``
    (default 8192; null: none) on the layers ``layer_types`` lists as ``chunked_attention``, else those whose
    ``no_rope_layers`` entry is 1 (the RoPE layers; 0 marks a NoPE layer, which attends globally), else (absent or
    an empty list) every layer but each ``no_rope_layer_interval``-th (default 4: layers 3, 7, ... are global)."""
    chunk = d["attention_chunk_size"] if "attention_chunk_size" in d else 8192
    if chunk is None:
        return {}
    layers = _int(d, "num_hidden_layers")
    share = _listed_share(d, "chunked_attention", ("full_attention", "chunked_attention"))
    if share is None:
        rope = d.get("no_rope_layers")
        if rope:
            if not isinstance(rope, list | tuple) or len(rope) != layers or any(x not in (0, 1) for x in rope):
                raise InvalidInputError(f"Hugging Face config field 'no_rope_layers' must list one 0 (NoPE, global "
                                        f"attention) or 1 (RoPE, chunked) per layer ({layers}), got {rope!r:.200}")
            share = sum(1 for x in rope if x) / layers
        else:
            interval = _int(d, "no_rope_layer_interval", default=4)
            if interval < 1:
                raise InvalidInputError(f"Hugging Face config field 'no_rope_layer_interval' must be a positive "
                                        f"integer, got {interval!r}")
            share = sum(1 for i in range(layers) if (i + 1) % interval) / layers if layers > 0 else 1.0
    return dict(attention_chunk_size=chunk, chunk_layer_share=share) if share > 0 else {}


def _sliding_share(d: Mapping[str, Any], mt: str) -> float:
    """Share of the layers that attend within ``sliding_window``: the config's ``layer_types`` where it lists
    them; Qwen2/Qwen3 otherwise slide only from layer ``max_window_layers`` on (Hugging Face's rule, so the usual
    ``max_window_layers = num_hidden_layers`` slides none); every layer for Mistral, Mixtral and Phi-3."""
    listed = _listed_share(d)
    if listed is not None:
        return listed
    if mt in ("qwen2", "qwen3") and d.get("max_window_layers") is not None:
        layers = _int(d, "num_hidden_layers")
        if layers > 0:  # (no layers is refused where the config is built)
            return min(max(layers - _int(d, "max_window_layers"), 0), layers) / layers
    return 1.0


#: transformers' config-class defaults of the experts each token takes (``num_experts_per_tok``), which a config
#: that leaves it out gets (this library's default, 2, is none of theirs for OLMoE, Qwen-MoE, DeepSeek-V3, gpt-oss)
_HF_TOPK = {"mixtral": 2, "granitemoe": 2, "olmoe": 8, "qwen2_moe": 4, "qwen3_moe": 8, "llama4_text": 1,
            "deepseek_v3": 8, "gpt_oss": 4}


#: transformers' config-class defaults of the routed experts' width (``moe_intermediate_size``), which a config that
#: leaves it out gets; without them the experts took the dense MLP's ``intermediate_size`` (Megatron's default),
#: a model several times its size (Qwen1.5-MoE-A2.7B 51.7e9 parameters for 14.3e9)
_HF_MOE_FFN = {"qwen2_moe": 1408, "qwen3_moe": 768, "deepseek_v2": 1407, "deepseek_v3": 2048}


def _hf_experts(d: Mapping[str, Any], mt: str, *keys: str) -> tuple[Any, Any]:
    """(experts, experts per token) of a Hugging Face MoE config: the first of ``keys`` present (transformers 5
    saves some under their attribute-map alias), refused when none is, since the config would otherwise load as
    a dense model a fraction of the size; the top-k takes the config class's default when absent."""
    experts = _get(d, *keys)
    if experts is None:
        raise InvalidInputError(f"Hugging Face config ({mt}) lacks {' (or '.join(keys)}{')' * (len(keys) - 1)}: "
                                "the number of experts")
    return experts, _get(d, "num_experts_per_tok", "experts_per_token", default=_HF_TOPK.get(mt, 2))


def _hf_moe_layers(d: Mapping[str, Any], step_key: str, *, dense_key: str | None = None,
                   moe_key: str | None = None) -> int | list[int]:
    """:attr:`TransformerConfig.moe_layer_freq` of a Hugging Face MoE config whose sparse layers count from layer 1:
    layer ``i`` is MoE when ``(i + 1) % step == 0`` (Qwen2/3-MoE's ``decoder_sparse_step``, Llama 4's
    ``interleave_moe_layer_step``) and it is not in ``dense_key`` (Qwen's ``mlp_only_layers``, whose layers have a
    dense MLP of ``intermediate_size``), or exactly the layers of ``moe_key`` (Llama 4's ``moe_layers``) where the
    config lists them. Megatron's integer frequency counts from layer 0, so a step that does not divide the layers
    (or any listed layer) needs the per-layer list; 1 when every layer is MoE, 0 when none is."""
    layers = _int(d, "num_hidden_layers")

    def indices(key: str) -> set[int]:
        v = d.get(key)
        if v is None:
            return set()
        if not isinstance(v, list | tuple) or any(isinstance(i, bool) or not isinstance(i, int) for i in v):
            raise InvalidInputError(f"Hugging Face config field {key!r} must be a list of layer indices, got {v!r}")
        return set(v)

    if moe_key is not None and d.get(moe_key) is not None:
        sparse = indices(moe_key)
        pattern = [int(i in sparse) for i in range(layers)]
    else:
        step = _int(d, step_key, default=1)
        if step < 1:
            raise InvalidInputError(f"Hugging Face config field {step_key!r} must be a positive integer, got {step!r}")
        dense = indices(dense_key) if dense_key is not None else set()
        pattern = [int((i + 1) % step == 0 and i not in dense) for i in range(layers)]
    if all(pattern):
        return 1
    return pattern if any(pattern) else 0


def _hf_head(d: Mapping[str, Any]) -> dict[str, Any]:
    """The head a config.json's ``architectures`` names: ``*ForSequenceClassification`` (a reward model, a
    classifier) a ``num_labels``-wide score layer (``num_labels``, else its ``id2label``'s size, else
    transformers' 2); a bare model (``LlamaModel``, ``MistralModel``, ``Qwen2Model``: an embedding model) none;
    anything else (``*ForCausalLM``, ``*ForConditionalGeneration``, no ``architectures``) a language-model head."""
    arch = d.get("architectures")
    first = arch[0] if isinstance(arch, list | tuple) and arch and isinstance(arch[0], str) else ""
    if first.endswith("ForSequenceClassification"):
        labels = d.get("num_labels")
        if labels is None and isinstance(d.get("id2label"), Mapping) and d["id2label"]:
            labels = len(d["id2label"])
        return {"output_head": "classifier", "num_labels": 2 if labels is None else labels, "arch": first}
    if first.endswith("Model") and "For" not in first:
        return {"output_head": "none", "arch": first}
    if first.endswith("ForMaskedLM"):  # transformers' BertForMaskedLM: BertModel(add_pooling_layer=False)
        return {"output_head": "lm", "pooler": False, "arch": first}
    per_token = next((h for h in _PER_TOKEN_HEADS if first.endswith(h)), None)
    if per_token:  # read as a language-model head, these were costed with vocabulary logits on every token
        raise InvalidInputError(f"Hugging Face architecture {first} ({_PER_TOKEN_HEADS[per_token]}) is not modelled: "
                                "the heads costed here are a language-model head (*ForCausalLM, *ForMaskedLM), a "
                                "sequence classifier (*ForSequenceClassification) and none (*Model); set "
                                "architectures to one of those for the backbone's cost")
    return {}


#: Heads of a config.json's ``architectures`` that :func:`_hf_head` refuses (their outputs per token or per choice
#: are none of the modelled heads).
_PER_TOKEN_HEADS = {"ForTokenClassification": "a num_labels-wide classifier on every token",
                    "ForQuestionAnswering": "start/end logits on every token",
                    "ForMultipleChoice": "one score per choice, each choice a sequence"}


def _from_hf(d: Mapping[str, Any], name: str | None) -> TransformerConfig:
    mt = str(d.get("model_type", "")).lower()
    head = _hf_head(d)  # the outer config's architectures (a multimodal config's model)
    quant, quant_kv, quant_detail = _hf_quantization(d.get("quantization_config"))
    text = d.get("text_config")
    if isinstance(text, Mapping) and "num_hidden_layers" not in d and "n_layer" not in d:
        # a multimodal config (Llama 4, Gemma 3, LLaVA, Mistral 3, Qwen-VL, ...): its language model
        name = name or str(_get(d, "_name_or_path", default=mt)).split("/")[-1].lower()
        inner = str(text.get("model_type") or "").lower()
        if not inner and mt not in _HF_AS:
            raise InvalidInputError(f"Hugging Face config ({mt}): its text_config names no model_type")
        mt = inner or mt
        d = {**_HF_TEXT_DEFAULTS.get(_HF_AS.get(mt, mt), {}), **text}
        nested = "text_config."
    else:
        nested = ""
    mt = _HF_AS.get(mt, mt)
    nm = name or str(_get(d, "_name_or_path", default=mt or "hf-model")).split("/")[-1].lower() or mt
    kw: dict[str, Any] = {"name": nm, "source": f"Hugging Face config.json (model_type {mt}"
                          + (f"; quantization_config: {quant_detail})" if quant_detail else ")"),
                          "quantization": quant, "quantized_kv_cache": quant_kv}
    if mt in ("gemma", "gemma2", "gemma3_text"):
        heads = _int(d, "num_attention_heads")
        kw.update(
            num_layers=_get(d, "num_hidden_layers"), hidden_size=_get(d, "hidden_size"),
            num_attention_heads=heads, num_query_groups=_get(d, "num_key_value_heads", default=heads),
            kv_channels=_get(d, "head_dim", default=256), ffn_hidden_size=_get(d, "intermediate_size"),
            activation=(_act(d["hidden_activation"], True, "hidden_activation") if d.get("hidden_activation") is not None
                        else _act(_get(d, "hidden_act", default="gelu_pytorch_tanh"), True)),
            normalization="RMSNorm", vocab_size=_get(d, "vocab_size", default=_GEMMA_VOCAB[mt]),
            max_position_embeddings=_get(d, "max_position_embeddings"),
            seq_length=min(_int(d, "max_position_embeddings", default=8192), 8192),
            position_embedding_type="rope", add_bias_linear=False,
            add_qkv_bias=_flag(d, "attention_bias", False), add_attn_out_bias=_flag(d, "attention_bias", False),
            untie_embeddings_and_output_weights=not _flag(d, "tie_word_embeddings", True),
            qk_layernorm=mt == "gemma3_text", sandwich_norm=mt != "gemma",
        )
        # Gemma2Config's and Gemma3TextConfig's window is 4096 tokens when the config leaves it out (a text_config
        # as transformers 4 wrote it omits it at that value): every layer was costed as global attention
        window = _get(d, "sliding_window", default=4096) if mt != "gemma" else None
        if window:
            # Gemma 2 alternates local and global layers; Gemma 3 has 5 local layers per global one, unless the
            # config lists its layers' kinds (layer_types, which transformers 5 writes and reads first)
            # (the class's rule: layer i slides unless (i + 1) % pattern == 0; Gemma-3-1B's 26 layers: 22 local)
            pattern = _int(d, "sliding_window_pattern", default=2 if mt == "gemma2" else 6)
            if pattern < 1:  # read as every layer sliding; transformers divides by it
                raise InvalidInputError(f"Hugging Face config field 'sliding_window_pattern' must be a positive "
                                        f"integer, got {d.get('sliding_window_pattern')!r}")
            layers = _int(d, "num_hidden_layers")
            listed = _listed_share(d)
            share = (listed if listed is not None
                     else (layers - layers // pattern) / layers if layers > 0 else 1.0)
            if share > 0:
                kw.update(window_size=window, window_layer_share=share)
    elif mt in _LLAMA_LIKE:
        heads = _int(d, "num_attention_heads")
        kw.update(
            num_layers=_get(d, "num_hidden_layers"), hidden_size=_get(d, "hidden_size"),
            num_attention_heads=heads, num_query_groups=_get(d, "num_key_value_heads", default=heads),
            # Qwen3Config's head_dim defaults to 128 whatever the width (Qwen3-0.6B: 16 heads of 128 on 1,024)
            kv_channels=_get(d, "head_dim", default=128 if mt == "qwen3" else None),
            ffn_hidden_size=_get(d, "intermediate_size"),
            activation=_act(_get(d, "hidden_act", default="silu"), gated=True), normalization="RMSNorm",
            vocab_size=_get(d, "vocab_size"),
            max_position_embeddings=_get(d, "max_position_embeddings"),
            seq_length=min(_int(d, "max_position_embeddings", default=4096), 8192),
            position_embedding_type="rope",
            untie_embeddings_and_output_weights=not _flag(d, "tie_word_embeddings", False),
            add_bias_linear=False,
            add_qkv_bias=(mt == "qwen2" or (mt == "qwen2_moe" and _flag(d, "qkv_bias", True))
                          or (mt not in _FIXED_ATTN_BIAS and _flag(d, "attention_bias", False))),
            # attention_bias biases the output projection as well (not where transformers ignores it); mlp_bias is
            # Llama's and Granite's (transformers' LlamaMLP / GraniteMLP; the others' MLPs have none)
            add_attn_out_bias=mt not in _FIXED_ATTN_BIAS and _flag(d, "attention_bias", False),
            rotary_percent=_rotary(d, "partial_rotary_factor", 1.0) if mt == "phi3" else 1.0,  # Phi-4-mini: 0.75
            add_mlp_bias=mt in ("llama", "granite") and _flag(d, "mlp_bias", False),
            qk_layernorm=mt in ("qwen3", "qwen3_moe"),
        )
        # Qwen2Config / Qwen3Config default use_sliding_window to false (Mistral, Mixtral, Phi-3 have no such switch)
        if mt in ("mistral", "mixtral", "qwen2", "qwen3", "phi3") and d.get("sliding_window") \
                and _flag(d, "use_sliding_window", mt not in ("qwen2", "qwen3")):
            share = _sliding_share(d, mt)
            if share > 0:
                kw.update(window_size=_get(d, "sliding_window"), window_layer_share=share)
        if mt in ("mixtral", "granitemoe"):
            experts, topk = _hf_experts(d, mt, "num_local_experts", "num_experts")
            kw.update(num_experts=experts, moe_router_topk=topk)
        if mt in ("qwen2_moe", "qwen3_moe"):
            # transformers 5 saves Qwen3MoeConfig's num_experts as num_local_experts (its attribute map); a
            # config naming neither would otherwise load as a dense model of a tenth of the size
            experts, topk = _hf_experts(d, mt, "num_experts", "num_local_experts")
            kw.update(num_experts=experts, moe_router_topk=topk,
                      moe_ffn_hidden_size=_get(d, "moe_intermediate_size", default=_HF_MOE_FFN[mt]),
                      # Qwen2MoeConfig's shared expert is 5,632 wide unless the config says otherwise; Qwen3-MoE has
                      # none (transformers' Qwen3MoeSparseMoeBlock: router and experts only), so a
                      # shared_expert_intermediate_size left in its config builds nothing
                      moe_shared_expert_intermediate_size=(d.get("shared_expert_intermediate_size", 5632) or None)
                      if mt == "qwen2_moe" else None,
                      moe_layer_freq=_hf_moe_layers(d, "decoder_sparse_step", dense_key="mlp_only_layers"))
            if kw["moe_layer_freq"] == 0:  # every layer listed in mlp_only_layers: a dense model
                for f in ("num_experts", "moe_router_topk", "moe_ffn_hidden_size",
                          "moe_shared_expert_intermediate_size", "moe_layer_freq"):
                    kw.pop(f)
    elif mt == "llama4_text":
        heads = _int(d, "num_attention_heads")
        experts, topk = _hf_experts(d, mt, "num_local_experts")
        expert_ffn = _get(d, "intermediate_size")
        kw.update(
            num_layers=_get(d, "num_hidden_layers"), hidden_size=_get(d, "hidden_size"),
            num_attention_heads=heads, num_query_groups=_get(d, "num_key_value_heads", default=heads),
            kv_channels=_get(d, "head_dim", default=128),  # Llama4TextConfig's default
            ffn_hidden_size=_get(d, "intermediate_size_mlp", default=expert_ffn),
            activation="swiglu", normalization="RMSNorm", vocab_size=_get(d, "vocab_size"),
            max_position_embeddings=_get(d, "max_position_embeddings"),
            seq_length=min(_int(d, "max_position_embeddings", default=8192), 8192),
            position_embedding_type="rope", add_bias_linear=False,
            untie_embeddings_and_output_weights=not _flag(d, "tie_word_embeddings", False),
            # Llama4TextConfig's default; a weightless L2 norm (the 128E model's config turns it off)
            qk_layernorm=_flag(d, "use_qk_norm", True), qk_layernorm_affine=False,
            add_qkv_bias=_flag(d, "attention_bias", False), add_attn_out_bias=_flag(d, "attention_bias", False),
            # every layer's MoE: routed experts plus one always-active shared expert of the same width, no gate
            num_experts=experts, moe_router_topk=topk,
            moe_ffn_hidden_size=expert_ffn, moe_shared_expert_intermediate_size=expert_ffn,
            moe_shared_expert_gate=False,
            moe_layer_freq=_hf_moe_layers(d, "interleave_moe_layer_step", moe_key="moe_layers"),
        )
        kw.update(_llama4_chunks(d))
    elif mt in ("deepseek_v2", "deepseek_v3"):
        heads = _int(d, "num_attention_heads")
        # the config classes' defaults: DeepSeek-V3 1 shared expert and 3 dense layers first, V2 2 shared experts;
        # an explicit null is none (DeepSeek's modelling code builds shared experts only when it is not None, and
        # none of 0 width), not the default
        n_shared = (0 if "n_shared_experts" in d and d["n_shared_experts"] is None
                    else _int(d, "n_shared_experts", default=1 if mt == "deepseek_v3" else 2))
        moe_ffn = _get(d, "moe_intermediate_size", default=_HF_MOE_FFN[mt])
        # refused when absent, as for the other MoE configs: it loaded as a dense model (DeepSeek-V2-Lite 2.6e9)
        experts, topk = _hf_experts(d, mt, "n_routed_experts", "num_experts")
        kw.update(
            num_layers=_get(d, "num_hidden_layers"), hidden_size=_get(d, "hidden_size"),
            num_attention_heads=heads, num_query_groups=heads,
            ffn_hidden_size=_get(d, "intermediate_size"), activation="swiglu", normalization="RMSNorm",
            vocab_size=_get(d, "vocab_size"), max_position_embeddings=_get(d, "max_position_embeddings"),
            seq_length=min(_int(d, "max_position_embeddings", default=4096), 8192),
            position_embedding_type="rope", add_bias_linear=False,
            untie_embeddings_and_output_weights=not _flag(d, "tie_word_embeddings", False),
            # MLA's widths: the config classes' defaults (DeepseekV2Config and DeepseekV3Config alike) where a field
            # is absent; without them a config leaving kv_lora_rank out loaded as multi-head attention (a KV cache
            # 7x DeepSeek-V2-Lite's). An explicit null q_lora_rank is no query bottleneck (V2-Lite)
            q_lora_rank=d["q_lora_rank"] if "q_lora_rank" in d else 1536,
            kv_lora_rank=_get(d, "kv_lora_rank", default=512),
            # attention_bias: the query and KV down-projections' biases and the output projection's
            add_qkv_bias=_flag(d, "attention_bias", False), add_attn_out_bias=_flag(d, "attention_bias", False),
            qk_head_dim=_get(d, "qk_nope_head_dim", default=128), qk_pos_emb_head_dim=_get(d, "qk_rope_head_dim",
                                                                                          default=64),
            v_head_dim=_get(d, "v_head_dim", default=128),
            num_experts=experts, moe_router_topk=topk,
            moe_ffn_hidden_size=moe_ffn,
            moe_shared_expert_intermediate_size=(n_shared * _int(d, "moe_intermediate_size",
                                                                 default=_HF_MOE_FFN[mt])) if n_shared else None,
            moe_shared_expert_gate=False, moe_layer_freq=_get(d, "moe_layer_freq", default=1),
            moe_first_k_dense=_get(d, "first_k_dense_replace", default=3 if mt == "deepseek_v3" else 0),
        )
    elif mt == "gpt_oss":
        heads = _int(d, "num_attention_heads")
        experts, topk = _hf_experts(d, mt, "num_local_experts", "num_experts")
        layers = _int(d, "num_hidden_layers")
        listed = _listed_share(d)  # "sliding_attention" / "full_attention" per layer
        local = listed if listed is not None else 0.5
        kw.update(
            num_layers=layers, hidden_size=_get(d, "hidden_size"), num_attention_heads=heads,
            num_query_groups=_get(d, "num_key_value_heads", default=heads),
            kv_channels=_get(d, "head_dim", default=64),  # GptOssConfig's default (64 heads of 64 on 2,880)
            ffn_hidden_size=_get(d, "intermediate_size"), activation="swiglu", normalization="RMSNorm",
            vocab_size=_get(d, "vocab_size"), max_position_embeddings=_get(d, "max_position_embeddings"),
            seq_length=min(_int(d, "max_position_embeddings", default=4096), 8192),
            position_embedding_type="rope",
            untie_embeddings_and_output_weights=not _flag(d, "tie_word_embeddings", False),
            add_bias_linear=_flag(d, "attention_bias", True),
            num_experts=experts, moe_router_topk=topk,
            moe_ffn_hidden_size=_get(d, "intermediate_size"),
        )
        if d.get("sliding_window") and local > 0:
            kw.update(window_size=_get(d, "sliding_window"), window_layer_share=local)
    elif mt == "gpt2":
        h = _int(d, "n_embd", "hidden_size")
        kw.update(num_layers=_get(d, "n_layer", "num_hidden_layers"), hidden_size=h,
                  num_attention_heads=_get(d, "n_head", "num_attention_heads"),
                  ffn_hidden_size=_get(d, "n_inner", default=4 * h),
                  activation=_act(_get(d, "activation_function", default="gelu_new"), False, "activation_function"),
                  normalization="LayerNorm",
                  vocab_size=_get(d, "vocab_size"), seq_length=_get(d, "n_positions", "n_ctx", "max_position_embeddings", default=1024),
                  position_embedding_type="learned_absolute",
                  untie_embeddings_and_output_weights=not _flag(d, "tie_word_embeddings", True))
    elif mt == "gptj":
        h = _int(d, "n_embd")
        kw.update(num_layers=_get(d, "n_layer"), hidden_size=h, num_attention_heads=_get(d, "n_head"),
                  ffn_hidden_size=_get(d, "n_inner", default=4 * h), activation="gelu",
                  normalization="LayerNorm", vocab_size=_get(d, "vocab_size"),
                  seq_length=_get(d, "n_positions"), position_embedding_type="rope",
                  rotary_percent=(float(d["rotary_dim"]) / (h // _int(d, "n_head"))
                                  if d.get("rotary_dim") else 1.0),
                  untie_embeddings_and_output_weights=not _flag(d, "tie_word_embeddings", False),
                  # Q/K/V and output projections without biases, the MLP and the LM head with them
                  add_bias_linear=False, add_mlp_bias=True, output_layer_bias=True, parallel_attn=True)
    elif mt == "mpt":
        kw.update(_hf_mpt(d))
    elif mt in ("falcon", "refinedweb", "refinedwebmodel"):
        h = _int(d, "hidden_size", "n_embd")
        heads = _int(d, "num_attention_heads", "n_head")
        new_arch = _flag(d, "new_decoder_architecture", False)
        kv = _get(d, "num_kv_heads", "n_head_kv") if new_arch else (1 if _flag(d, "multi_query", True) else heads)
        kw.update(num_layers=_get(d, "num_hidden_layers", "n_layer"), hidden_size=h, num_attention_heads=heads,
                  num_query_groups=kv, ffn_hidden_size=_get(d, "ffn_hidden_size", default=4 * h),
                  activation="gelu", normalization="LayerNorm", vocab_size=_get(d, "vocab_size"),
                  seq_length=_get(d, "max_position_embeddings", default=2048),
                  position_embedding_type="alibi" if _flag(d, "alibi", False) else "rope",
                  add_bias_linear=_flag(d, "bias", False),
                  untie_embeddings_and_output_weights=not _flag(d, "tie_word_embeddings", True),
                  parallel_attn=_flag(d, "parallel_attn", True),
                  # Falcon2-11B: the new decoder architecture with one norm (num_ln_in_parallel_attn = 1)
                  parallel_attn_norms=_int(d, "num_ln_in_parallel_attn", default=2 if new_arch else 1))
    elif mt == "bert":
        kw.update(num_layers=_get(d, "num_hidden_layers"), hidden_size=_get(d, "hidden_size"),
                  num_attention_heads=_get(d, "num_attention_heads"),
                  ffn_hidden_size=_get(d, "intermediate_size"),
                  activation=_act(_get(d, "hidden_act", default="gelu"), False),
                  normalization="LayerNorm", vocab_size=_get(d, "vocab_size"),
                  seq_length=_get(d, "max_position_embeddings", default=512),
                  position_embedding_type="learned_absolute", encoder_only=True,
                  num_tokentypes=_get(d, "type_vocab_size", default=2))
    elif mt in _HF_MORE:
        _HF_MORE[mt](d, kw)
    else:
        raise InvalidInputError(f"Hugging Face model_type {mt!r} is not supported ({', '.join(HF_MODEL_TYPES)}; "
                                "or describe the model with Megatron-LM keys, docs/llm_training.md)")
    kw = {k: v for k, v in kw.items() if v is not None}
    kw["dropout"] = _hf_dropout(d, mt)
    kw["attention_dropout"] = _hf_attention_dropout(d, mt)
    if head:  # BERT: the MLM head without the pooler (BertForMaskedLM), or this head with it instead
        arch = head.pop("arch")
        kw.update(head)
        token = "pooled [CLS] token" if mt == "bert" else "last token"
        if head["output_head"] == "classifier":
            kw["source"] += f" as {arch}: a {head.get('num_labels')}-label score layer on the {token}"
        elif head["output_head"] == "none":
            kw["source"] += f" as {arch}: no language-model head"
        elif mt == "bert":
            kw["source"] += f" as {arch}: the MLM head, no pooler"
    _check_hf_ints(d, kw, mt, nested)
    needed = ["num_layers", "hidden_size", "num_attention_heads", "vocab_size"]
    if mt not in ("gpt2", "gptj", "mpt", "falcon", "refinedweb", "refinedwebmodel", "gpt_neox", "gpt_bigcode",
                  "bloom"):  # no documented FFN default
        needed.append("ffn_hidden_size")
    missing = [k for k in needed if k not in kw]
    if missing:
        hf = {"num_layers": "num_hidden_layers", "ffn_hidden_size": "intermediate_size"}  # the usual HF spellings
        raise InvalidInputError(f"Hugging Face config ({mt}) lacks the fields for "
                                + ", ".join(f"{k} ({hf[k]})" if k in hf else k for k in missing))
    try:
        return TransformerConfig(**kw)
    except InvalidInputError:
        raise
    except (TypeError, ValueError) as exc:  # a field of the wrong type (a string where a number belongs)
        raise InvalidInputError(f"Hugging Face config ({mt}): a field has the wrong type ({exc})") from None


#: the keys that mark a native ``params.json`` (Mistral's ``mistral_inference``, Meta's original Llama checkpoints)
_NATIVE_PARAMS_KEYS = ("dim", "n_layers", "n_heads")


def _from_native_params(d: Mapping[str, Any], name: str | None) -> TransformerConfig:
    """A native ``params.json`` as ``mistral_inference`` (``TransformerArgs``: ``dim``, ``n_layers``, ``head_dim``,
    ``hidden_dim``, ``n_heads``, ``n_kv_heads``, ``norm_eps``, ``vocab_size``, ``rope_theta``, optional ``moe``
    and ``sliding_window``) and Meta's original Llama code (``ModelArgs``: no ``hidden_dim`` but ``multiple_of`` and
    ``ffn_dim_multiplier``) write it: a Llama-layout decoder (RMSNorm, SwiGLU, rotary, no biases, an untied output
    layer; Mixtral's ``moe``: every layer's MLP ``num_experts`` experts of ``hidden_dim``, top
    ``num_experts_per_tok``). A vision encoder (``vision_encoder``, Pixtral) is not costed: the language model is."""
    if str(d.get("model_type") or "transformer") != "transformer":  # mistral_inference's MambaArgs (Codestral Mamba)
        raise InvalidInputError(f"params.json model_type {d.get('model_type')!r} is not supported (only Mistral's "
                                "and Llama's transformer layout)")
    dim, heads = _int(d, "dim"), _int(d, "n_heads")
    vocab = _int(d, "vocab_size")
    if vocab < 1:  # Meta's params.json leaves -1 for the tokenizer to fill in
        raise InvalidInputError(f"params.json field 'vocab_size' is {vocab}: the vocabulary is the tokenizer's "
                                "there; give its size (e.g. 32000 for Llama 2, 128256 for Llama 3)")
    if d.get("hidden_dim") is not None:
        ffn = _int(d, "hidden_dim")
    elif d.get("multiple_of") is not None:  # Meta's FeedForward: 2/3 of 4 x dim, scaled, rounded up
        ffn = int(2 * 4 * dim / 3)
        if d.get("ffn_dim_multiplier") is not None:
            ffn = int(_float(d, "ffn_dim_multiplier", 1.0) * ffn)
        mult = _int(d, "multiple_of")
        ffn = mult * -(-ffn // mult) if mult > 0 else ffn
    else:
        raise InvalidInputError("params.json lacks 'hidden_dim' (Mistral) or 'multiple_of' (Llama): the MLP width")
    window = d.get("sliding_window")
    if isinstance(window, list | tuple):
        raise InvalidInputError(f"params.json field 'sliding_window' as a per-layer list ({window!r:.80}) is not "
                                "supported: describe the model with a Hugging Face config.json (layer_types)")
    kw: dict[str, Any] = dict(
        name=name or "params", num_layers=_int(d, "n_layers"), hidden_size=dim, num_attention_heads=heads,
        num_query_groups=_int(d, "n_kv_heads", default=heads), kv_channels=_int(d, "head_dim", default=dim // heads),
        ffn_hidden_size=ffn, activation="swiglu", normalization="RMSNorm", vocab_size=vocab,
        seq_length=min(_int(d, "max_seq_len", default=8192), 8192), position_embedding_type="rope",
        untie_embeddings_and_output_weights=not _flag(d, "tied_embeddings", False), add_bias_linear=False,
        window_size=_int(d, "sliding_window") if window is not None else None, dropout=False,
        source="native params.json (Mistral / Llama layout" + ("; the vision encoder is not costed)"
                                                              if d.get("vision_encoder") else ")"))
    moe = d.get("moe")
    if moe is not None:
        if not isinstance(moe, Mapping):
            raise InvalidInputError(f"params.json field 'moe' must be a mapping, got {moe!r:.80}")
        kw.update(num_experts=_int(moe, "num_experts"), moe_router_topk=_int(moe, "num_experts_per_tok", default=2))
    return TransformerConfig(**kw)


def _in_text_config(d: Mapping[str, Any], exc: InvalidInputError) -> InvalidInputError:
    """``exc`` naming a field of a multimodal config's ``text_config`` as the user wrote it (``'text_config.
    num_hidden_layers'``): the checks see the nested mapping alone and named its keys bare, as if top-level."""
    text = d.get("text_config")
    if not isinstance(text, Mapping):
        return exc

    def qualify(m: re.Match) -> str:
        key = m.group(2)
        return f"{m.group(1)}'text_config.{key}'" if key in text and key not in d else m.group(0)

    said = re.sub(r"(Hugging Face config field )'([^']+)'", qualify, str(exc))
    return exc if said == str(exc) else InvalidInputError(said)


def from_dict(d: Mapping[str, Any], name: str | None = None) -> TransformerConfig:
    """A model from a Megatron-style mapping, a Hugging Face ``config.json`` mapping (has ``model_type``) or a
    native ``params.json`` (Mistral's, Meta's Llama: ``dim``, ``n_layers``, ``n_heads``)."""
    if not isinstance(d, Mapping):
        raise InvalidInputError(f"model config must be a mapping, got {type(d).__name__}")
    if "model" in d and isinstance(d["model"], Mapping) and "num_layers" not in d:
        d = d["model"]
    if all(k in d for k in _NATIVE_PARAMS_KEYS) and str(d.get("model_type") or "transformer") in ("transformer",
                                                                                                    "mamba"):
        return _from_native_params(d, name)
    if "model_type" in d:
        try:
            return _from_hf(d, name)
        except InvalidInputError as exc:
            raise _in_text_config(d, exc) from None
        except (TypeError, ValueError) as exc:  # a field of the wrong type that no check above named
            raise InvalidInputError(f"Hugging Face config ({d.get('model_type')}): a field has the wrong type "
                                    f"({exc})") from None
    return _from_megatron(d, name)


# ======================================================================================= library
#: Other spellings of library names (normalised: lower case, no spaces/underscores)
_ALIASES = {
    "gpt2-l": "gpt2-large", "gpt-2-large": "gpt2-large", "gpt3": "gpt3-175b", "gpt-3-175b": "gpt3-175b",
    "mt-nlg-530b": "megatron-530b", "llama3-405b": "llama3.1-405b", "llama-3.1-405b": "llama3.1-405b",
    "bert-large-uncased": "bert-large", "gpt-j-6b": "gptj-6b", "qwen3-moe-235b": "qwen3-235b-a22b",
    "deepseek-r1": "deepseek-v3", "deepseek-v3-0324": "deepseek-v3", "deepseek-r1-0528": "deepseek-v3",
    "llama-4-scout-17b-16e": "llama4-scout", "llama4-scout-17b-16e": "llama4-scout",
    "llama-4-maverick-17b-128e": "llama4-maverick", "llama4-maverick-17b-128e": "llama4-maverick",
    "gptoss-120b": "gpt-oss-120b", "gptoss-20b": "gpt-oss-20b", "mixtral-8x22b-v0.1": "mixtral-8x22b",
}


def _norm_key(name: str) -> str:
    return str(name).strip().lower().replace("_", "-").replace(" ", "-")


@cache
def _library() -> dict[str, TransformerConfig]:
    text = resources.files("hybrid.workloads.llm").joinpath("models.toml").read_text(encoding="utf-8")
    data = tomllib.loads(text)
    out: dict[str, TransformerConfig] = {}
    for key, entry in data.get("models", {}).items():
        out[key] = _from_megatron(dict(entry), name=key)
    return out


def library() -> dict[str, TransformerConfig]:
    """The built-in models by name (a copy; entries are frozen)."""
    return dict(_library())


def model_names() -> list[str]:
    return list(_library())


def load_model(name_or_path: str | os.PathLike | Mapping[str, Any]) -> TransformerConfig:
    """A library name (``gpt3-175b``, case-insensitive), a YAML/JSON file (Megatron keys or HF config.json),
    a directory holding a ``config.json`` (a Hugging Face checkpoint), or a mapping."""
    if isinstance(name_or_path, Mapping):
        return from_dict(name_or_path)
    if isinstance(name_or_path, TransformerConfig):
        return name_or_path
    s = str(name_or_path)
    lib = _library()
    key = _norm_key(s)
    key = _ALIASES.get(key, key)
    if key in lib:
        return lib[key]
    p = Path(s)
    if p.is_dir():  # a Hugging Face checkpoint directory: its config.json
        found = [p / n for n in ("config.json", "config.yaml", "config.yml", "params.json") if (p / n).is_file()]
        if not found:
            raise InvalidInputError(f"model directory {p} has no config.json (a Hugging Face checkpoint directory "
                                    "holds one; or name the YAML/JSON file itself)")
        p = found[0]
    if p.suffix.lower() in (".json", ".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise InvalidInputError(f"model file not found: {p}")
        try:
            text = p.read_text(encoding="utf-8")
            data = json.loads(text) if p.suffix.lower() == ".json" else yaml.safe_load(text)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
            first = " ".join(str(exc).split())[:160]
            raise InvalidInputError(f"malformed model config {p}: {first}") from None
        if data is None:
            raise InvalidInputError(f"model config {p} is empty")
        stem = p.stem if p.stem.lower() not in ("config", "params") else p.parent.name or p.stem
        return from_dict(data, name=None if isinstance(data, Mapping) and "model_type" in data
                         and data.get("_name_or_path") else stem)
    import difflib

    near = difflib.get_close_matches(key, list(lib), n=3)
    hint = f" (did you mean {', '.join(near)}?)" if near else " (`hybrid llm models` lists them)"
    raise InvalidInputError(f"unknown model {s!r}: not a library name nor a file{hint}")


def with_overrides(model: TransformerConfig, **changes: Any) -> TransformerConfig:
    """A copy with some fields changed (validated again)."""
    bad = [k for k in changes if k not in _FIELD_NAMES]
    if bad:
        raise InvalidInputError(f"unknown model field(s): {', '.join(bad)}")
    return replace(model, **changes)


def round_up(x: int, multiple: int) -> int:
    return int(math.ceil(x / multiple) * multiple)


__all__ = [
    "ACTIVATIONS", "NORMALIZATIONS", "POSITION_EMBEDDINGS", "TransformerConfig", "from_dict", "library",
    "load_model", "model_names", "round_up", "with_overrides",
]
