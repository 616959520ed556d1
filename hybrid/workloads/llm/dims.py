"""Transformer dimensions the inference model needs, read from any model description.

:class:`ModelDims` is a small adapter: :meth:`ModelDims.from_config` reads an object (or mapping) that uses
Megatron-LM argument names (``num_layers``, ``hidden_size``, ``num_attention_heads``, ``num_query_groups``,
``kv_channels``, ``ffn_hidden_size``, ``vocab_size``, ``swiglu``, ``normalization``, ``num_experts``,
``moe_router_topk``, ...), which is what the LLM model library (:mod:`hybrid.workloads.llm.model`) holds, and
:func:`resolve_model` finds a model by library name, by a built-in inference name, or from a Hugging Face
``config.json``.

The built-in :data:`INFERENCE_MODELS` are the models vendor inference tables use; each entry names the
``config.json`` it was read from. They are only used where the model library does not define the name.
"""

from __future__ import annotations

import json
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
    rotary_fraction: float = 1.0  # share of the head dimension that is rotated (GPT-J: 64/256)
    tied_embeddings: bool = False
    sliding_window: int = 0  # attention window (Mistral); 0 = none
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

    def mlp_params(self) -> int:
        """One layer's MLP weights (all experts for MoE, plus the router)."""
        per = (3 if self.swiglu else 2) * self.hidden_size * self.ffn_hidden_size
        if self.is_moe:
            return self.num_experts * per + self.hidden_size * self.num_experts
        return per

    def active_mlp_params(self) -> int:
        per = (3 if self.swiglu else 2) * self.hidden_size * self.ffn_hidden_size
        return per * (self.moe_router_topk if self.is_moe else 1)

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
        """From an object or mapping with Megatron-LM argument names (the LLM model library's configs)."""
        if isinstance(config, ModelDims):
            return config
        get = (lambda k, d=None: config.get(k, d)) if isinstance(config, Mapping) else (
            lambda k, d=None: getattr(config, k, d))
        try:
            layers, hidden = int(get("num_layers")), int(get("hidden_size"))
            heads = int(get("num_attention_heads"))
        except (TypeError, ValueError):
            raise InvalidInputError("model config needs num_layers, hidden_size and num_attention_heads") from None
        groups = get("num_query_groups") or heads
        head_dim = get("kv_channels") or hidden // heads
        experts = int(get("num_experts") or 0)
        ffn = get("moe_ffn_hidden_size") if experts and get("moe_ffn_hidden_size") else get("ffn_hidden_size")
        swiglu = bool(get("swiglu", False)) or str(get("activation", "")).lower() in ("swiglu", "silu")
        if ffn is None:
            ffn = 4 * hidden
        norm = str(get("normalization", "rmsnorm" if swiglu else "layernorm")).lower().replace("_", "")
        norm = "rmsnorm" if "rms" in norm else "layernorm"
        untied = get("untie_embeddings_and_output_weights")
        tied = bool(get("tied_embeddings", False)) or (untied is not None and not bool(untied))
        return cls(
            name=str(name or get("name", "") or "model"), num_layers=layers, hidden_size=hidden,
            num_attention_heads=heads, num_query_groups=int(groups), kv_channels=int(head_dim),
            ffn_hidden_size=int(ffn), vocab_size=int(get("padded_vocab_size") or get("vocab_size") or 32000),
            swiglu=swiglu, normalization=norm, num_experts=experts,
            moe_router_topk=int(get("moe_router_topk") or (2 if experts else 0)),
            parallel_block=bool(get("parallel_block", False) or get("parallel_attn", False)),
            rotary_fraction=float(get("rotary_percent", get("rotary_fraction", 1.0)) or 1.0),
            tied_embeddings=tied, sliding_window=int(get("sliding_window") or 0),
            source=str(get("source", "") or ""),
        )

    @classmethod
    def from_hf_config(cls, cfg: Mapping[str, Any], name: str = "model") -> ModelDims:
        """From a Hugging Face ``config.json`` (Llama, Mistral, Mixtral, Qwen2/3(-MoE), Falcon, GPT-J, GPT-2)."""
        mt = str(cfg.get("model_type", "")).lower()
        g = cfg.get
        if mt in ("gptj",):
            hidden, heads = int(g("n_embd")), int(g("n_head"))
            return cls(name, int(g("n_layer")), hidden, heads, heads, hidden // heads, int(g("n_inner") or 4 * hidden),
                       int(g("vocab_size")), swiglu=False, normalization="layernorm", parallel_block=True,
                       rotary_fraction=float(g("rotary_dim", hidden // heads)) / (hidden // heads),
                       source="Hugging Face config.json")
        if mt in ("gpt2",):
            hidden, heads = int(g("n_embd")), int(g("n_head"))
            return cls(name, int(g("n_layer")), hidden, heads, heads, hidden // heads, int(g("n_inner") or 4 * hidden),
                       int(g("vocab_size")), swiglu=False, normalization="layernorm", rotary_fraction=0.0,
                       tied_embeddings=True, source="Hugging Face config.json")
        if mt in ("falcon", "refinedweb", "refinedwebmodel"):
            hidden, heads = int(g("hidden_size")), int(g("num_attention_heads"))
            kv = int(g("num_kv_heads") or (1 if g("multi_query") else heads))
            return cls(name, int(g("num_hidden_layers")), hidden, heads, kv, hidden // heads,
                       int(g("ffn_hidden_size") or 4 * hidden), int(g("vocab_size")), swiglu=False,
                       normalization="layernorm", parallel_block=bool(g("parallel_attn", True)),
                       tied_embeddings=bool(g("tie_word_embeddings", True)), source="Hugging Face config.json")
        if "num_hidden_layers" not in cfg or "hidden_size" not in cfg:
            raise InvalidInputError(f"unsupported config.json (model_type {mt!r}): needs num_hidden_layers and "
                                    "hidden_size")
        hidden, heads = int(g("hidden_size")), int(g("num_attention_heads"))
        experts = int(g("num_local_experts") or g("num_experts") or 0)
        ffn = int(g("moe_intermediate_size") or g("intermediate_size")) if experts else int(g("intermediate_size"))
        return cls(name, int(g("num_hidden_layers")), hidden, heads, int(g("num_key_value_heads") or heads),
                   int(g("head_dim") or hidden // heads), ffn, int(g("vocab_size")),
                   swiglu=str(g("hidden_act", "silu")) in ("silu", "swiglu"), normalization="rmsnorm",
                   num_experts=experts, moe_router_topk=int(g("num_experts_per_tok") or (2 if experts else 0)),
                   tied_embeddings=bool(g("tie_word_embeddings", False)),
                   sliding_window=int(g("sliding_window") or 0) if g("use_sliding_window", True) else 0,
                   source="Hugging Face config.json")

    def with_name(self, name: str) -> ModelDims:
        return replace(self, name=name)


def _m(name: str, layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: int, source: str,
       **kw: Any) -> ModelDims:
    return ModelDims(name, layers, hidden, heads, kv, kw.pop("head_dim", hidden // heads), ffn, vocab,
                     source=source, **kw)


#: Models of vendor inference tables (used where the LLM model library lacks the name).
INFERENCE_MODELS: dict[str, ModelDims] = {m.name: m for m in (
    _m("gptj-6b", 28, 4096, 16, 16, 16384, 50400, "EleutherAI/gpt-j-6b config.json", swiglu=False,
       normalization="layernorm", parallel_block=True, rotary_fraction=0.25),
    _m("mistral-7b", 32, 4096, 32, 8, 14336, 32000, "mistralai/Mistral-7B-v0.1 config.json", sliding_window=4096),
    _m("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, "mistralai/Mixtral-8x7B-v0.1 config.json",
       num_experts=8, moe_router_topk=2),
    _m("llama2-7b", 32, 4096, 32, 32, 11008, 32000, "meta-llama/Llama-2-7b-hf config.json"),
    _m("llama2-13b", 40, 5120, 40, 40, 13824, 32000, "meta-llama/Llama-2-13b-hf config.json"),
    _m("llama2-70b", 80, 8192, 64, 8, 28672, 32000, "meta-llama/Llama-2-70b-hf config.json"),
    _m("falcon-180b", 80, 14848, 232, 8, 59392, 65024, "tiiuae/falcon-180B config.json (new decoder "
       "architecture: parallel attention/MLP, 8 KV groups)", swiglu=False, normalization="layernorm",
       parallel_block=True),
    _m("llama3-8b", 32, 4096, 32, 8, 14336, 128256, "meta-llama/Meta-Llama-3-8B config.json"),
    _m("llama3-70b", 80, 8192, 64, 8, 28672, 128256, "meta-llama/Meta-Llama-3-70B config.json"),
    _m("llama3-405b", 126, 16384, 128, 8, 53248, 128256, "meta-llama/Llama-3.1-405B config.json"),
    _m("qwen3-235b-a22b", 94, 4096, 64, 4, 1536, 151936, "Qwen/Qwen3-235B-A22B config.json (128 experts, "
       "top-8, moe_intermediate_size 1536)", head_dim=128, num_experts=128, moe_router_topk=8),
    _m("gpt3-175b", 96, 12288, 96, 96, 49152, 50257, "Brown et al. 2020 Table 2.1 (GPT-3 175B)", swiglu=False,
       normalization="layernorm", rotary_fraction=0.0),
)}


def _library_lookup(name: str) -> Any | None:
    """The LLM model library's config for ``name`` (None when the library or the name is absent)."""
    try:
        from hybrid.workloads.llm import model as library  # the training issue's model library
    except ImportError:
        return None
    for fn_name in ("get_model", "load_model", "model_config", "resolve_model"):
        fn = getattr(library, fn_name, None)
        if callable(fn):
            try:
                return fn(name)
            except Exception:  # unknown to the library: fall back to the built-ins here
                return None
    models = getattr(library, "MODELS", None) or getattr(library, "LIBRARY", None)
    if isinstance(models, Mapping):
        return models.get(name)
    return None


def resolve_model(name_or_path: str | os.PathLike | Mapping[str, Any] | ModelDims) -> ModelDims:
    """A model by built-in name, model-library name, Hugging Face ``config.json`` path, or config mapping."""
    if isinstance(name_or_path, ModelDims):
        return name_or_path
    if isinstance(name_or_path, Mapping):
        if "num_hidden_layers" in name_or_path or "n_layer" in name_or_path:
            return ModelDims.from_hf_config(name_or_path, str(name_or_path.get("_name_or_path", "model")))
        return ModelDims.from_config(name_or_path)
    text = str(name_or_path)
    path = Path(text)
    if path.suffix.lower() in (".json", ".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise InvalidInputError(f"model file {text} does not exist")
        try:
            raw = path.read_text(encoding="utf-8")
            cfg = json.loads(raw) if path.suffix.lower() == ".json" else __import__("yaml").safe_load(raw)
        except Exception as exc:
            raise InvalidInputError(f"cannot read model file {text}: {exc}") from None
        if not isinstance(cfg, Mapping):
            raise InvalidInputError(f"model file {text} is not a mapping")
        name = path.parent.name if path.name == "config.json" else path.stem
        if "num_hidden_layers" in cfg or "n_layer" in cfg:
            return ModelDims.from_hf_config(cfg, name)
        return ModelDims.from_config(cfg, name)
    key = text.strip().lower()
    if key in INFERENCE_MODELS:
        return INFERENCE_MODELS[key]
    found = _library_lookup(key)
    if found is not None:
        return ModelDims.from_config(found, key)
    raise InvalidInputError(f"unknown model {text!r}; built-in inference models: {', '.join(INFERENCE_MODELS)} "
                            "(or a Hugging Face config.json path)")
