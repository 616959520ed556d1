"""The model description inference uses: the library's :class:`~hybrid.workloads.llm.model.TransformerConfig`.

There is one source of truth for a transformer's shape and parameter count (``TransformerConfig``, shared with
training). This module only resolves a model for inference (library name, Megatron YAML/JSON, Hugging Face
``config.json``, mapping or config object) and refuses what the inference op graphs do not model (encoder-only
models, MoE layers interleaved with dense ones), plus a few read-outs the inference code shares
(:func:`expert_ffn`, :func:`context_note`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hybrid.errors import InvalidInputError
from hybrid.workloads.llm.model import TransformerConfig, load_model, with_overrides

#: The model names vendor inference tables use (all in the model library).
INFERENCE_MODEL_NAMES = ("gptj-6b", "mistral-7b", "mixtral-8x7b", "llama2-7b", "llama2-70b", "falcon-180b",
                         "llama3-8b", "llama3-70b", "llama3-405b", "qwen3-235b-a22b", "deepseek-v3",
                         "llama4-scout", "llama4-maverick")


def expert_ffn(model: TransformerConfig) -> int:
    """Width of one MLP projection (gated MLPs: gate and up each); per expert for MoE models."""
    return int(model.moe_ffn_hidden_size if model.is_moe else model.ffn_hidden_size)  # type: ignore[arg-type]


def check_inference_model(model: TransformerConfig) -> TransformerConfig:
    """``model`` if the inference op graphs can represent it, else a one-line ``InvalidInputError``. MoE models
    with dense layers (interleaved, or DeepSeek's first dense layers) are costed as the share of each kind."""
    if model.encoder_only:
        raise InvalidInputError(f"model {model.name!r} is encoder-only; inference here is decoder-only")
    return model


def context_note(model: TransformerConfig, tokens: int | float) -> str:
    """A warning when a context is longer than the model was built for ('' otherwise). Not refused: rotary
    models run past it (vendor tables do, e.g. GPT-J at 4096 tokens), at the cost of quality, not speed; a learned
    absolute position table cannot (:meth:`TransformerConfig.position_note`, the note training gives too)."""
    learned = model.position_note(tokens)
    if learned:
        return learned
    limit = model.max_position_embeddings or 0
    if limit and tokens > limit:
        return f"a context of {int(tokens)} tokens exceeds the {limit} positions {model.name} was built for"
    return ""


def resolve_model(name_or_path: str | os.PathLike | Mapping[str, Any] | TransformerConfig) -> TransformerConfig:
    """A model by library name, Megatron YAML/JSON or Hugging Face ``config.json`` path, mapping, or config
    object (:func:`hybrid.workloads.llm.model.load_model` does the reading), checked for inference."""
    cfg = name_or_path if isinstance(name_or_path, TransformerConfig) else load_model(name_or_path)
    if isinstance(name_or_path, str) and cfg.name in ("custom", "") and not Path(name_or_path).exists():
        cfg = with_overrides(cfg, name=name_or_path)
    return check_inference_model(cfg)
