"""LLM workloads: transformer model descriptions (:mod:`.model`) and, built on them, training prediction."""

from hybrid.workloads.llm.model import TransformerConfig, from_dict, library, load_model, model_names

__all__ = ["TransformerConfig", "from_dict", "library", "load_model", "model_names"]
