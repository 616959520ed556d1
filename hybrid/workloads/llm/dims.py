"""Transformer dimensions the inference model needs, read from any model description.

:class:`ModelDims` is a small adapter: :meth:`ModelDims.from_config` reads an object (or mapping) that uses
Megatron-LM argument names (``num_layers``, ``hidden_size``, ``num_attention_heads``, ``num_query_groups``,
``kv_channels``, ``ffn_hidden_size``, ``vocab_size``, ``swiglu``, ``normalization``, ``num_experts``,
``moe_router_topk``, ...), which is what the LLM model library (:mod:`hybrid.workloads.llm.model`) holds, and
:func:`resolve_model` finds a model by library name or reads a Megatron YAML/JSON or Hugging Face ``config.json``
through the library's loader.

The model library defines every model (with its source), including GPT-J's partial rotary embedding
(``rotary_percent``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from hybrid.errors import InvalidInputError


@dataclass(frozen=True)
class ModelDims:
    """What prefill and decode op graphs and the KV cache depend on."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int  # KV heads (GQA/MQA); = heads for MHA
    kv_channels: int  # head dimension
    ffn_hidden_size: int  # one MLP projection (gated MLPs: gate and up each); per expert for MoE
    vocab_size: int
    swiglu: bool = True  # gated MLP (SwiGLU) vs GeLU MLP
    normalization: str = "rmsnorm"  # "rmsnorm" or "layernorm"
    num_experts: int = 0  # 0 = dense
    moe_router_topk: int = 0
    parallel_block: bool = False  # attention and MLP read the same normalised input (GPT-J, Falcon)
    norms_per_layer: int = 2  # parallel blocks: 1 (GPT-J) or 2 (Falcon's new decoder architecture)
    rotary_fraction: float = 1.0  # share of the head dimension that is rotated (GPT-J: 64/256)
    tied_embeddings: bool = False
    sliding_window: int = 0  # attention window (Mistral); 0 = none
    shared_expert_ffn: int = 0  # MoE: width of an always-active shared expert (Qwen2-MoE, DeepSeek); 0 = none
    max_positions: int = 0  # longest context the model was built for (max_position_embeddings); 0 = unknown
    source: str = ""

    def __post_init__(self) -> None:
        for f in ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
                  "ffn_hidden_size", "vocab_size"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise InvalidInputError(f"model {self.name!r}: {f} must be a positive integer, got {v!r}")
        if self.num_attention_heads % self.num_query_groups:
            raise InvalidInputError(f"model {self.name!r}: {self.num_attention_heads} attention heads are not a "
                                    f"multiple of {self.num_query_groups} KV heads")
        if self.normalization not in ("rmsnorm", "layernorm"):
            raise InvalidInputError(f"model {self.name!r}: normalization must be rmsnorm or layernorm")
        if self.num_experts < 0 or (self.num_experts > 0 and not 0 < self.moe_router_topk <= self.num_experts):
            raise InvalidInputError(f"model {self.name!r}: need 0 < moe_router_topk <= num_experts for MoE")

    # -------------------------------------------------------------------------------- derived sizes
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def q_width(self) -> int:
        return self.num_attention_heads * self.kv_channels

    @property
    def kv_width(self) -> int:
        return self.num_query_groups * self.kv_channels

    def attention_params(self) -> int:
        return self.hidden_size * (self.q_width + 2 * self.kv_width) + self.q_width * self.hidden_size

    def _shared_params(self) -> int:
        return (3 if self.swiglu else 2) * self.hidden_size * self.shared_expert_ffn

    def mlp_params(self) -> int:
        """One layer's MLP weights (all experts and a shared expert for MoE, plus the router)."""
        per = (3 if self.swiglu else 2) * self.hidden_size * self.ffn_hidden_size
        if self.is_moe:
            return self.num_experts * per + self.hidden_size * self.num_experts + self._shared_params()
        return per

    def active_mlp_params(self) -> int:
        per = (3 if self.swiglu else 2) * self.hidden_size * self.ffn_hidden_size
        return per * (self.moe_router_topk if self.is_moe else 1) + (self._shared_params() if self.is_moe else 0)

    def layer_params(self) -> int:
        return self.attention_params() + self.mlp_params() + 2 * self.hidden_size

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)

    def num_params(self) -> int:
        return self.num_layers * self.layer_params() + self.embedding_params()

    def active_params(self) -> int:
        """Parameters one token touches (dense: all; MoE: top-k experts)."""
        layer = self.attention_params() + self.active_mlp_params() + 2 * self.hidden_size
        return self.num_layers * layer + self.embedding_params()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    # -------------------------------------------------------------------------------- construction
    @classmethod
    def from_config(cls, config: Any, name: str | None = None) -> ModelDims:
        """From the model library's :class:`~hybrid.workloads.llm.model.TransformerConfig` (or any object or
        mapping with its Megatron-LM field names)."""
        if isinstance(config, ModelDims):
            return config
        get = (lambda k, d=None: config.get(k, d)) if isinstance(config, Mapping) else (
            lambda k, d=None: getattr(config, k, d))
        try:
            layers, hidden = int(get("num_layers")), int(get("hidden_size"))
            heads = int(get("num_attention_heads"))
        except (TypeError, ValueError):
            raise InvalidInputError("model config needs num_layers, hidden_size and num_attention_heads") from None
        if get("encoder_only", False):
            raise InvalidInputError(f"model {get('name', name)!r} is encoder-only; inference here is decoder-only")
        experts = int(get("num_experts") or 0)
        if experts and int(get("moe_layer_freq", 1) or 1) > 1:  # ModelDims has one layer type: say so, not guess
            raise InvalidInputError(f"model {get('name', name)!r}: inference models every layer alike; MoE layers "
                                    f"interleaved with dense ones (moe_layer_freq = {get('moe_layer_freq')}) "
                                    "are not supported")
        ffn = get("moe_ffn_hidden_size") if experts and get("moe_ffn_hidden_size") else get("ffn_hidden_size")
        act = str(get("activation", "swiglu" if get("swiglu", False) else "gelu")).lower()
        norm = "rmsnorm" if "rms" in str(get("normalization", "LayerNorm")).lower() else "layernorm"
        key = str(name or get("name", "") or "model")
        rope = str(get("position_embedding_type", "rope")).lower() == "rope"
        return cls(
            name=key, num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
            num_query_groups=int(get("num_query_groups") or heads),
            kv_channels=int(get("kv_channels") or hidden // heads),
            ffn_hidden_size=int(ffn or 4 * hidden), vocab_size=int(get("vocab_size") or 32000),
            swiglu=act in ("swiglu", "geglu"), normalization=norm, num_experts=experts,
            moe_router_topk=int(get("moe_router_topk") or 2) if experts else 0,
            parallel_block=bool(get("parallel_attn", False)),
            norms_per_layer=int(get("parallel_attn_norms", 1) or 1) if get("parallel_attn", False) else 2,
            rotary_fraction=float(get("rotary_percent", 1.0) or 1.0) if rope else 0.0,
            tied_embeddings=not bool(get("untie_embeddings_and_output_weights", True)),
            sliding_window=int(get("window_size") or 0), source=str(get("source", "") or ""),
            shared_expert_ffn=int(get("moe_shared_expert_intermediate_size") or 0) if experts else 0,
            max_positions=int(get("max_position_embeddings") or 0),
        )

    def context_note(self, tokens: int | float) -> str:
        """A warning when a context is longer than the model was built for ('' otherwise). Not refused: rotary
        models run past it (vendor tables do, e.g. GPT-J at 4096 tokens), at the cost of quality, not speed."""
        if self.max_positions and tokens > self.max_positions:
            return (f"a context of {int(tokens)} tokens exceeds the {self.max_positions} positions {self.name} was "
                    "built for")
        return ""

    def with_name(self, name: str) -> ModelDims:
        return replace(self, name=name)


#: The model names vendor inference tables use (all in the model library).
INFERENCE_MODEL_NAMES = ("gptj-6b", "mistral-7b", "mixtral-8x7b", "llama2-7b", "llama2-70b", "falcon-180b",
                         "llama3-8b", "llama3-70b", "llama3-405b", "qwen3-235b-a22b")


def resolve_model(name_or_path: str | os.PathLike | Mapping[str, Any] | ModelDims | Any) -> ModelDims:
    """A model by library name, Megatron YAML/JSON or Hugging Face ``config.json`` path, mapping, or config
    object (:func:`hybrid.workloads.llm.model.load_model` does the reading)."""
    if isinstance(name_or_path, ModelDims):
        return name_or_path
    from hybrid.workloads.llm.model import TransformerConfig, load_model

    cfg = name_or_path if isinstance(name_or_path, TransformerConfig) else load_model(name_or_path)
    name = cfg.name
    if isinstance(name_or_path, str) and cfg.name in ("custom", "") and not Path(name_or_path).exists():
        name = name_or_path
    return ModelDims.from_config(cfg, name)
