"""Transformer model library: parameter counts against published figures, loaders, validation errors."""

from __future__ import annotations

import json

import pytest

from hybrid.errors import InvalidInputError
from hybrid.workloads.llm.model import TransformerConfig, from_dict, library, load_model, with_overrides


@pytest.mark.parametrize(
    ("name", "total", "active", "rel"),
    [
        ("gpt3-175b", 174.6e9, None, 0.002),     # GPT-3 paper: 175B (Megatron-style count 174.6e9)
        ("llama2-7b", 6.738e9, None, 0.001),     # HF model card: 6,738,415,616
        ("llama2-70b", 68.98e9, None, 0.001),
        ("llama3-8b", 8.030e9, None, 0.001),     # 8,030,261,248
        ("llama3-70b", 70.55e9, None, 0.001),
        ("llama3.1-405b", 405.85e9, None, 0.001),
        ("mixtral-8x7b", 46.70e9, 12.88e9, 0.002),  # Mixtral paper: 46.7B total, 12.9B active
        ("qwen3-235b-a22b", 235.1e9, 22.2e9, 0.005),
        ("mixtral-8x22b", 140.6e9, 39.15e9, 0.002),   # HF model card: 141B total, 39B active
        ("qwen3-30b-a3b", 30.53e9, 3.35e9, 0.005),    # Qwen3 report: 30.5B total, 3.3B activated
        # gpt-oss model card: 116.83B / 20.91B total, 5.13B / 3.61B active without the input embedding table
        # (201,088 x 2,880 = 0.579B), which this library counts as active (a lookup of it runs every token)
        ("gpt-oss-120b", 116.83e9, 5.13e9 + 0.579e9, 0.002),
        ("gpt-oss-20b", 20.91e9, 3.61e9 + 0.579e9, 0.003),
        ("mistral-7b", 7.24e9, None, 0.002),
        ("gptj-6b", 6.05e9, None, 0.002),
        ("gpt2-large", 774.03e6, None, 0.001),
        ("bert-large", 336.2e6, None, 0.002),
        ("megatron-530b", 529.6e9, None, 0.001),  # Narayanan 2021 weak-scaling table: 529.6
        ("megatron-1t", 1008.0e9, None, 0.001),   # 1008.0
    ],
)
def test_parameter_counts_match_published(name: str, total: float, active: float | None, rel: float) -> None:
    m = load_model(name)
    assert m.num_params == pytest.approx(total, rel=rel)
    assert m.num_active_params == pytest.approx(active if active else total, rel=rel)


def test_mpt_counts_match_llm_foundry_numparams_exactly() -> None:
    # NumParams column of the llm-foundry benchmarking table at seq 2048
    assert load_model("mpt-70b").num_params == 64862437376
    assert load_model("mpt-7b").num_params == 6658859008
    assert load_model("mpt-1b").num_params == 1315950592
    # the learned position table grows with max_seq_len: 30b at 8192 = 30019254272
    from dataclasses import replace

    assert replace(load_model("mpt-30b"), seq_length=8192, max_position_embeddings=8192).num_params == 30019254272


def test_library_entries_have_sources_and_lower_case_names() -> None:
    lib = library()
    for required in ("gpt3-125m", "gpt3-175b", "megatron-22b", "megatron-175b", "megatron-530b", "megatron-1t",
                     "llama2-7b", "llama2-13b", "llama3-8b", "llama3.1-405b", "mpt-125m", "mpt-70b",
                     "bert-large", "gpt2-large", "mixtral-8x7b", "gptj-6b", "mistral-7b", "falcon-180b",
                     "qwen3-235b-a22b"):
        assert required in lib
    for name, m in lib.items():
        assert name == name.lower() and m.name == name and m.source


def test_aliases_and_case() -> None:
    assert load_model("GPT3-175B").name == "gpt3-175b"
    assert load_model("gpt2-l").name == "gpt2-large"


def test_megatron_yaml_with_hyphens(tmp_path) -> None:
    p = tmp_path / "m.yaml"
    p.write_text("--num-layers: 32\n--hidden-size: 4096\n--num-attention-heads: 32\n--num-query-groups: 8\n"
                 "--ffn-hidden-size: 14336\nswiglu: true\nnormalization: RMSNorm\nvocab_size: 128256\n"
                 "untie_embeddings_and_output_weights: true\ndisable_bias_linear: true\nseq_length: 8192\n"
                 "use_rotary_position_embeddings: true\n")
    m = load_model(p)
    assert m.num_params == load_model("llama3-8b").num_params
    assert m.name == "m"


def test_hf_configs_load_as_they_are(tmp_path) -> None:
    llama = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
             "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000, "hidden_act": "silu",
             "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
    assert from_dict(llama).num_params == 6738415616
    gpt2 = {"model_type": "gpt2", "n_embd": 1280, "n_layer": 36, "n_head": 20, "n_positions": 1024,
            "vocab_size": 50257, "activation_function": "gelu_new"}
    assert from_dict(gpt2).num_params == 774030080
    mixtral = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
               "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
               "num_experts_per_tok": 2, "max_position_embeddings": 32768, "hidden_act": "silu"}
    mx = from_dict(mixtral)
    assert mx.num_params == load_model("mixtral-8x7b").num_params and mx.moe_router_topk == 2
    mpt = {"model_type": "mpt", "d_model": 8192, "n_heads": 64, "n_layers": 80, "expansion_ratio": 4,
           "max_seq_len": 2048, "vocab_size": 50368, "attn_config": {"alibi": False}}
    assert from_dict(mpt).num_params == 64862437376
    bert = {"model_type": "bert", "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
            "intermediate_size": 4096, "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2,
            "hidden_act": "gelu"}
    assert from_dict(bert).num_params == load_model("bert-large").num_params
    # the library's bert-large is BertForPreTraining's layout (MLM head and pooler, Devlin et al.'s pre-training, as
    # docs/llm_training.md says); its source named only the checkpoint's config.json, whose BertForMaskedLM has no
    # pooler: loaded from that file the same model counted h^2 + h fewer parameters with nothing saying why
    lib = load_model("bert-large")
    assert lib.pooler and "BertForPreTraining" in lib.source and "BertForMaskedLM" in lib.source, lib.source
    assert from_dict({**bert, "architectures": ["BertForMaskedLM"]}).num_params == lib.num_params - 1024 * 1024 - 1024
    ckpt = tmp_path / "Llama-2-7b-hf"
    ckpt.mkdir()
    f = ckpt / "config.json"
    f.write_text(json.dumps(llama))
    assert load_model(f).num_params == 6738415616
    # a checkpoint directory is read through its config.json, named after the directory
    assert load_model(ckpt).num_params == 6738415616 and load_model(str(ckpt)).name == load_model(f).name


def test_partial_rotary_is_a_model_field_from_any_source() -> None:
    """GPT-J rotates 64 of its 256 head dimensions: the library entry and its HF config.json agree, and both the
    inference dims and the training rope rows see it (not a per-name inference special case)."""
    from hybrid.workloads.llm.dims import resolve_model

    gptj = {"model_type": "gptj", "n_embd": 4096, "n_layer": 28, "n_head": 16, "n_positions": 2048,
            "rotary_dim": 64, "vocab_size": 50400}
    hf, lib = from_dict(gptj), load_model("gptj-6b")
    assert hf.rotary_percent == lib.rotary_percent == 0.25
    assert resolve_model(hf).rotary_percent == 0.25
    assert load_model("llama2-7b").rotary_percent == 1.0
    with pytest.raises(InvalidInputError, match="rotary_percent"):
        TransformerConfig(num_layers=2, hidden_size=128, num_attention_heads=8, rotary_percent=0.0)


def test_inference_costs_interleaved_moe_layers_as_the_share_of_each_kind() -> None:
    from hybrid.workloads.llm.inference import make_setup, predict_static

    base = load_model("mixtral-8x7b")
    mixed = TransformerConfig(**dict(base.__dict__, moe_layer_freq=2))
    assert mixed.num_moe_layers == 16 and mixed.num_dense_layers == 16
    ops = predict_static(make_setup(mixed, "H100-SXM", tp=2), 8, 256, 16).ops
    pre = ops[ops["phase"] == "prefill"].set_index(["name", "op"])["count"]
    # 16 dense MLPs (linear) and 16 routed-expert MLPs (grouped gemm), and attention in all 32 layers
    assert pre[("mlp_up_proj", "linear")] == 16 and pre[("mlp_up_proj", "gemm")] == 16
    assert pre[("attn_pre_proj", "linear")] == 32 and pre[("moe_router", "linear")] == 16
    with pytest.raises(InvalidInputError, match="moe_first_k_dense"):
        TransformerConfig(**dict(base.__dict__, moe_first_k_dense=32))


def test_flops_per_token_near_6n_plus_attention() -> None:
    m = load_model("gpt3-175b")
    s, h, L = 2048, 12288, 96
    # Narayanan et al. 2021: forward = 24 L h^2 (1 + s/(6h)) + 2 h V per token
    expected = 24 * L * h * h * (1 + s / (6 * h)) + 2 * h * 50257
    assert m.forward_flops_per_token(s) == pytest.approx(expected, rel=1e-3)
    # causal skipping halves (plus one diagonal) the score work
    full, causal = m.forward_flops_per_token(s), m.forward_flops_per_token(s, causal_skip=True)
    assert full - causal == pytest.approx(4 * L * 12288 * (s - (s + 1) / 2), rel=1e-9)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_layers": 2, "hidden_size": 100, "num_attention_heads": 3}, "divisible by num_attention_heads"),
        ({"num_layers": 2, "hidden_size": 128, "num_attention_heads": 8, "num_query_groups": 3},
         "divisible by num_query_groups"),
        ({"num_layers": 0, "hidden_size": 128, "num_attention_heads": 8}, "num_layers must be a positive"),
        ({"num_layers": 2, "hidden_size": 128, "num_attention_heads": 8, "activation": "tanh"}, "activation"),
        ({"num_layers": 2, "hidden_size": 128, "num_attention_heads": 8, "num_experts": 4, "moe_router_topk": 5},
         "exceeds num_experts"),
    ],
)
def test_bad_configs_raise_clear_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        TransformerConfig(**kwargs)


def test_unknown_name_and_bad_files(tmp_path) -> None:
    with pytest.raises(InvalidInputError, match="did you mean"):
        load_model("gpt3-175")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidInputError, match="malformed"):
        load_model(bad)
    with pytest.raises(InvalidInputError, match="has no config.json"):
        load_model(tmp_path)  # a directory without a checkpoint config
    with pytest.raises(InvalidInputError, match="not supported"):
        from_dict({"model_type": "t5", "d_model": 512})
    with pytest.raises(InvalidInputError, match="lacks"):
        from_dict({"hidden_size": 512})


# ------------------------------------------------------------------------------------------------ MLA (DeepSeek)
DEEPSEEK_V3_CONFIG = {  # deepseek-ai/DeepSeek-V3 config.json, the fields the loader reads
    "model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "vocab_size": 129280, "max_position_embeddings": 163840, "hidden_act": "silu", "tie_word_embeddings": False,
}


def test_deepseek_v3_parameters_and_latent_kv_cache_by_hand() -> None:
    m = load_model("deepseek-v3")
    assert load_model("deepseek-r1") == m and m.is_mla and m.num_dense_layers == 3 and m.num_moe_layers == 58
    h, heads = 7168, 128
    attention = (h * 1536 + 1536 * heads * 192 + h * 576 + 512 * heads * 256 + heads * 128 * h) + 1536 + 512
    expert = 3 * h * 2048
    moe_total = 256 * expert + expert + h * 256  # routed, one shared (no gate), router
    layers = 3 * (attention + 3 * h * 18432 + 2 * h) + 58 * (attention + moe_total + 2 * h)
    assert m.num_params == layers + 2 * 129280 * h + h  # untied embedding and output, final norm
    # DeepSeek's own figures: 671B parameters, 37B activated per token
    assert m.num_params / 1e9 == pytest.approx(671, rel=0.002)
    assert m.num_active_params / 1e9 == pytest.approx(37.5, rel=0.02)
    # the cache holds one 512-wide latent and one 64-wide rotary key per token and layer, shared by all heads
    assert m.kv_cache_bytes_per_token(2.0) == 61 * 576 * 2
    hf = from_dict(DEEPSEEK_V3_CONFIG)
    assert hf.num_params == m.num_params and hf.kv_cache_bytes_per_token(1.0) == 61 * 576
    # attention FLOPs: QK^T over 192 dims and AV over 128 per head
    assert m.forward_flops_per_token(4096) - m.forward_flops_per_token(2048) == pytest.approx(
        2.0 * 2048 * heads * (192 + 128) * 61)


def test_mla_training_costs_unabsorbed_attention() -> None:
    import pandas as pd

    from hybrid.workloads.llm.config import TrainingConfig
    from hybrid.workloads.llm.costing import _layer_rows, resolve_target
    from hybrid.workloads.llm.train import model_flops, predict_training

    m = load_model("deepseek-v3")
    assert m.attention_head_dim == (192 + 128) / 2 and m.value_width == 128 * 128
    cfg = TrainingConfig(gpus=512, global_batch=1024, tp=1, ep=8, fsdp=True, recompute="full", dtype="fp8")
    cfg.validate_for(m)
    keys = pd.DataFrame({"tp": [1], "cp": [1], "ep": [8], "mb": [1], "sp": [False]})
    from hybrid.hardware.catalog import default_catalog

    rows = _layer_rows(m, cfg, keys, resolve_target("DGX-H100", default_catalog()))
    att = rows[rows["op"] == "attention"].iloc[0]
    # multi-head attention over 192-dim scores and 128-dim values: FLOPs as 4 x pairs x heads x 160
    assert att["head_dim"] == 160 and att["heads"] == 128 and att["kv_heads"] == 128
    # the latent is expanded to per-head keys and values (kv_b: 512 -> 128 x 256); no absorbed per-head GEMMs
    lin = rows[rows["op"] == "linear"]
    assert ((lin["k"] == 512) & (lin["n"] == 128 * 256)).any() and not (rows["b"] == 128).any()
    res = predict_training(m, cfg, "DGX-H100", engine=False)
    assert res.fits and res.iteration_s > 0
    mf, hf = model_flops(m, cfg)
    # full recomputation: one more forward of the layers, not of the output layer (Megatron's HFU)
    tokens = cfg.global_batch * cfg.seq(m)
    assert hf == pytest.approx(4 / 3 * mf - 2.0 * m.hidden_size * m.vocab_size * tokens)
    with pytest.raises(InvalidInputError, match="needs qk_head_dim"):
        TransformerConfig(num_layers=2, hidden_size=256, num_attention_heads=4, kv_lora_rank=64)


def test_llama4_from_its_nested_config_and_parameter_counts() -> None:
    text = {"model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 40,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
            "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
            "vocab_size": 202048, "max_position_embeddings": 1048576, "tie_word_embeddings": False}
    hf = from_dict({"model_type": "llama4", "_name_or_path": "meta-llama/Llama-4-Maverick-17B-128E",
                    "text_config": text})
    lib = load_model("llama4-maverick")
    assert hf.name == "llama-4-maverick-17b-128e" and hf.num_params == lib.num_params
    assert (lib.num_moe_layers, lib.num_dense_layers) == (24, 24)
    # Meta's figures: 400B total / 17B active (Maverick), 109B with the vision encoder / 17B active (Scout)
    assert lib.num_params / 1e9 == pytest.approx(400, rel=0.01)
    assert lib.num_active_params / 1e9 == pytest.approx(17, rel=0.02)
    scout = load_model("llama4-scout")
    assert scout.num_moe_layers == 48 and scout.num_params / 1e9 == pytest.approx(107.8, rel=0.01)
    assert scout.num_active_params == pytest.approx(lib.num_active_params, rel=0.01)


def test_gemma_and_phi_configs_load_with_local_global_windows() -> None:
    from hybrid.workloads.llm.kv_cache import memory_plan
    from hybrid.workloads.llm.precision import Precision

    text = {"model_type": "gemma3_text", "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 62,
            "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "vocab_size": 262208,
            "sliding_window": 1024, "sliding_window_pattern": 6, "max_position_embeddings": 131072,
            "hidden_activation": "gelu_pytorch_tanh"}
    g3 = from_dict({"model_type": "gemma3", "_name_or_path": "google/gemma-3-27b-it", "text_config": text})
    assert g3.name == "gemma-3-27b-it" and g3.activation == "geglu" and g3.sandwich_norm and g3.qk_layernorm
    assert g3.tied_embeddings and g3.window_size == 1024 and g3.window_layer_share == pytest.approx(52 / 62)  # 10 of 62 global
    assert g3.num_params / 1e9 == pytest.approx(27.0, rel=0.01)  # Google: 27B (the text model)
    # 52 of 62 layers keep 1024 tokens, the global ones the whole context
    plan = memory_plan(g3, Precision("bf16"), 80 * 2**30, batch=1, input_len=8000, output_len=192)
    assert plan.kv_per_request == pytest.approx((52 / 62 * 1024 + 10 / 62 * 8192) * plan.kv_per_token)
    assert g3.attention_span(8192) < 0.5 * (8192 + 1) / 2
    g2 = from_dict({"model_type": "gemma2", "hidden_size": 4608, "intermediate_size": 36864, "num_hidden_layers": 46,
                    "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "vocab_size": 256000,
                    "sliding_window": 4096, "hidden_activation": "gelu_pytorch_tanh"})
    assert g2.window_layer_share == 0.5 and g2.num_params / 1e9 == pytest.approx(27.2, rel=0.01)
    phi4 = from_dict({"model_type": "phi3", "hidden_size": 5120, "intermediate_size": 17920, "num_hidden_layers": 40,
                      "num_attention_heads": 40, "num_key_value_heads": 10, "vocab_size": 100352,
                      "max_position_embeddings": 16384, "hidden_act": "silu", "tie_word_embeddings": False})
    assert phi4.swiglu and phi4.num_params / 1e9 == pytest.approx(14.7, rel=0.01)  # Microsoft: 14.7B
    with pytest.raises(InvalidInputError, match="window_layer_share"):
        TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, window_size=16, window_layer_share=0)


def test_gpt_oss_config_json_loads_like_the_library_entry(tmp_path) -> None:
    """openai/gpt-oss-120b's config.json fields: alternating sliding/full layers, 128 experts top-4, biases."""
    cfg = {"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "hidden_size": 2880,
           "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
           "intermediate_size": 2880, "num_local_experts": 128, "experts_per_token": 4, "num_experts_per_tok": 4,
           "vocab_size": 201088, "max_position_embeddings": 131072, "sliding_window": 128,
           "layer_types": ["sliding_attention", "full_attention"] * 18, "attention_bias": True,
           "tie_word_embeddings": False, "hidden_act": "silu"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = load_model(str(path))
    lib = load_model("gpt-oss-120b")
    assert m.num_params == lib.num_params and m.num_active_params == lib.num_active_params
    assert m.window_size == 128 and m.window_layer_share == 0.5 and m.num_experts == 128 and m.moe_router_topk == 4
    # half the layers see at most 128 keys: a 32k context reads ~half the KV of full attention
    assert m.window_keys(32768) == pytest.approx(0.5 * 128 + 0.5 * 32768)


@pytest.mark.parametrize("change, message", [
    ({"num_attention_heads": None}, "lacks 'num_attention_heads'"),
    ({"num_attention_heads": "abc"}, "'num_attention_heads' must be a number, got 'abc'"),
    ({"num_attention_heads": 32.5}, "must be a whole number"),
    ({"intermediate_size": None}, "lacks the fields for ffn_hidden_size (intermediate_size)"),
    ({"hidden_size": "big"}, "field 'hidden_size' must be a positive integer"),
    ({"max_position_embeddings": [4096]}, "max_position_embeddings"),
])
def test_hf_config_with_a_missing_or_mistyped_field_is_an_input_error(change, message) -> None:
    """A partial or mistyped config.json names the field (no TypeError from deep inside, no guessed FFN width)."""
    base = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
            "vocab_size": 32000, "intermediate_size": 11008, "max_position_embeddings": 4096}
    assert from_dict(base).ffn_hidden_size == 11008
    cfg = {k: v for k, v in {**base, **change}.items() if v is not None}
    with pytest.raises(InvalidInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        from_dict(cfg, name="x")


def _hf(model_type: str, **fields) -> TransformerConfig:
    return from_dict({"model_type": model_type, **fields})


def test_more_hf_architectures_load_with_their_published_sizes() -> None:
    """config.json fields of Pythia, OPT, Phi-2, StableLM 2, StarCoder(2), OLMo 2, OLMoE, BLOOM, Granite as their
    checkpoints ship them; sizes against the model cards / papers (exact where the layout is fully described)."""
    pythia = dict(hidden_act="gelu", hidden_size=4096, intermediate_size=16384, max_position_embeddings=2048,
                  num_attention_heads=32, num_hidden_layers=32, rotary_pct=0.25, vocab_size=50432,
                  tie_word_embeddings=False, use_parallel_residual=True)
    neox = _hf("gpt_neox", **pythia)
    assert neox.num_params == 6857302016  # Pythia paper, 6.9B
    assert neox.parallel_attn and neox.parallel_attn_norms == 2 and neox.rotary_percent == 0.25
    assert not _hf("gpt_neox", **{**pythia, "use_parallel_residual": False}).parallel_attn
    opt = _hf("opt", activation_function="relu", ffn_dim=8192, hidden_size=2048, max_position_embeddings=2048,
              num_attention_heads=32, num_hidden_layers=24, vocab_size=50272, do_layer_norm_before=True)
    # OPT-1.3B: 1,315,758,080 (its position table has 2 rows of offset, not counted here)
    assert opt.num_params == 1315758080 - 2 * 2048 and opt.activation == "relu" and opt.tied_embeddings
    phi2 = _hf("phi", hidden_act="gelu_new", hidden_size=2560, intermediate_size=10240, num_attention_heads=32,
               num_hidden_layers=32, num_key_value_heads=32, partial_rotary_factor=0.4, vocab_size=51200,
               max_position_embeddings=2048, tie_word_embeddings=False)
    # 2,779,683,840 with the output layer's bias (51,200)
    assert phi2.num_params == 2779683840 and phi2.output_layer_bias
    assert phi2.parallel_attn and phi2.parallel_attn_norms == 1 and phi2.rotary_percent == 0.4
    stablelm = _hf("stablelm", hidden_act="silu", hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                   num_attention_heads=32, num_key_value_heads=32, partial_rotary_factor=0.25, use_qkv_bias=True,
                   vocab_size=100352, max_position_embeddings=4096, tie_word_embeddings=False)
    assert stablelm.num_params == 1644515328 and stablelm.swiglu and stablelm.add_qkv_bias  # stablelm-2-1_6b
    starcoder = _hf("gpt_bigcode", n_embd=6144, n_head=48, n_inner=24576, n_layer=40, n_positions=8192,
                    vocab_size=49152, multi_query=True, activation_function="gelu_pytorch_tanh")
    assert starcoder.num_kv_heads == 1 and starcoder.num_params / 1e9 == pytest.approx(15.5, rel=0.005)
    sc2 = _hf("starcoder2", hidden_act="gelu_pytorch_tanh", hidden_size=4608, intermediate_size=18432,
              max_position_embeddings=16384, num_attention_heads=36, num_hidden_layers=32, num_key_value_heads=4,
              sliding_window=4096, use_bias=True, vocab_size=49152)
    assert sc2.window_size == 4096 and not sc2.gated and sc2.num_params / 1e9 == pytest.approx(7.17, rel=0.002)
    olmo2 = _hf("olmo2", hidden_act="silu", hidden_size=4096, intermediate_size=11008, max_position_embeddings=4096,
                num_attention_heads=32, num_hidden_layers=32, num_key_value_heads=32, vocab_size=100352,
                tie_word_embeddings=False)
    # OLMo 2 7B: 7,298,617,344 (its QK-norms span all heads)
    assert olmo2.qk_layernorm and olmo2.qk_layernorm_full_width and olmo2.normalization == "RMSNorm"
    assert olmo2.num_params == 7298617344
    olmoe = _hf("olmoe", hidden_act="silu", hidden_size=2048, intermediate_size=1024, max_position_embeddings=4096,
                num_attention_heads=16, num_experts=64, num_experts_per_tok=8, num_hidden_layers=16,
                num_key_value_heads=16, vocab_size=50304, tie_word_embeddings=False)
    # OLMoE paper: 6.9B total, 1.3B active
    assert olmoe.num_experts == 64 and olmoe.moe_router_topk == 8
    assert (olmoe.num_params / 1e9, olmoe.num_active_params / 1e9) == (pytest.approx(6.92, rel=0.005),
                                                                       pytest.approx(1.28, rel=0.01))
    bloom = _hf("bloom", n_head=112, n_layer=70, hidden_size=14336, vocab_size=250880)
    # BigScience: 176,247,271,424 (with the embedding LayerNorm, 2 x 14,336, not counted here)
    assert bloom.position_embedding_type == "alibi" and bloom.num_params == 176247271424 - 2 * 14336
    granite = _hf("granite", hidden_act="silu", hidden_size=4096, intermediate_size=12800, num_attention_heads=32,
                  num_hidden_layers=40, num_key_value_heads=8, vocab_size=49155, tie_word_embeddings=True,
                  max_position_embeddings=131072, embedding_multiplier=12.0, residual_multiplier=0.22)
    assert granite.num_params / 1e9 == pytest.approx(8.17, rel=0.002)  # granite-3.1-8b


def test_vision_language_configs_load_their_language_model() -> None:
    """LLaVA / Mistral 3 nest the language model under text_config with its own model_type; Qwen2.5-VL keeps the
    Qwen2 fields at the top level; a text_config without a model_type is refused by name."""
    text = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
            "num_hidden_layers": 32, "max_position_embeddings": 4096, "vocab_size": 32000}
    llava = from_dict({"model_type": "llava", "_name_or_path": "llava-hf/llava-1.5-7b-hf", "text_config": text,
                       "vision_config": {"hidden_size": 1024}})
    assert llava.name == "llava-1.5-7b-hf" and llava.num_params == load_model("llama2-7b").num_params
    qwen_vl = _hf("qwen2_5_vl", hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
                  num_hidden_layers=28, num_key_value_heads=4, max_position_embeddings=128000, vocab_size=152064,
                  tie_word_embeddings=False, vision_config={})
    assert qwen_vl.add_qkv_bias and qwen_vl.num_params == 7615616512  # = Qwen2.5-7B's language model
    with pytest.raises(InvalidInputError, match="text_config names no model_type"):
        from_dict({"model_type": "llava", "text_config": {k: v for k, v in text.items() if k != "model_type"}})
    with pytest.raises(InvalidInputError, match="'mamba' is not supported .*gpt_neox"):
        _hf("mamba", hidden_size=768, num_hidden_layers=24, vocab_size=50280)


def test_qwen2_sliding_window_follows_max_window_layers_and_layer_types() -> None:
    """Hugging Face's Qwen2/Qwen3 slide only from layer ``max_window_layers`` on (or as ``layer_types`` lists):
    ``use_sliding_window: true`` with the usual ``max_window_layers = num_hidden_layers`` slides no layer, and was
    read as every layer keeping 4096 tokens (a 32k-token request's KV cache 8x too small)."""
    qwen2 = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
             "num_key_value_heads": 4, "num_hidden_layers": 28, "vocab_size": 152064,
             "max_position_embeddings": 32768, "sliding_window": 4096, "use_sliding_window": True,
             "max_window_layers": 28}
    assert from_dict(qwen2).window_size is None
    half = from_dict({**qwen2, "max_window_layers": 14})
    assert half.window_size == 4096 and half.window_layer_share == pytest.approx(0.5)
    listed = from_dict({**qwen2, "layer_types": ["full_attention"] * 21 + ["sliding_attention"] * 7})
    assert listed.window_size == 4096 and listed.window_layer_share == pytest.approx(0.25)
    assert from_dict({**qwen2, "use_sliding_window": False, "max_window_layers": 0}).window_size is None
    # Mistral's window covers every layer, as before
    mistral = from_dict({**qwen2, "model_type": "mistral"})
    assert mistral.window_size == 4096 and mistral.window_layer_share == 1.0


def test_dropout_follows_the_model_config() -> None:
    """Whether a model trains with dropout comes from its config: the library's published configs, a Hugging Face
    config's dropout probabilities (or its config class's default), Megatron-LM's hidden/attention dropout."""
    lib = library()
    on = {n for n, m in lib.items() if m.dropout}
    assert on == {*(n for n in lib if n.startswith(("gpt3-", "megatron-"))), "bert-large", "gpt2-large"}
    assert not any(lib[n].dropout for n in ("llama3-70b", "mpt-7b", "mistral-7b", "mixtral-8x7b", "deepseek-v3",
                                            "qwen3-235b-a22b", "gptj-6b", "falcon-180b"))
    llama = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=2, vocab_size=100)
    assert _hf("llama", **llama, attention_dropout=0.0).dropout is False
    assert _hf("llama", **llama).dropout is False  # LlamaConfig's default is 0.0
    assert _hf("llama", **llama, attention_dropout=0.1).dropout is True
    gpt2 = dict(n_embd=64, n_head=4, n_layer=2, vocab_size=100, n_positions=128)
    assert _hf("gpt2", **gpt2).dropout is True  # GPT2Config defaults to 0.1
    assert _hf("gpt2", **gpt2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0).dropout is False
    mpt = dict(d_model=64, n_heads=4, n_layers=2, vocab_size=100)
    assert _hf("mpt", **mpt, resid_pdrop=0, emb_pdrop=0, attn_config={"attn_pdrop": 0}).dropout is False
    assert _hf("mpt", **mpt, resid_pdrop=0, attn_config={"attn_pdrop": 0.1}).dropout is True
    with pytest.raises(InvalidInputError, match="attention_dropout"):
        _hf("llama", **llama, attention_dropout="lots")
    with pytest.raises(InvalidInputError, match="resid_pdrop"):
        _hf("gpt2", **gpt2, resid_pdrop=1.5)
    # Megatron-LM keys: unset probabilities are its 0.1; both 0 (a Llama recipe) is no dropout
    meg = dict(num_layers=2, hidden_size=64, num_attention_heads=4)
    assert from_dict(meg).dropout is True
    assert from_dict({**meg, "attention-dropout": 0.0}).dropout is True  # hidden dropout still 0.1
    assert from_dict({**meg, "hidden_dropout": 0.0, "attention_dropout": 0.0}).dropout is False
    with pytest.raises(InvalidInputError, match="hidden_dropout"):
        from_dict({**meg, "hidden_dropout": -0.1})
    # the model description round-trips it, and lists it
    m = lib["llama3-8b"]
    assert from_dict(m.to_dict()).dropout is False and m.summary()["dropout"] is False
    with pytest.raises(InvalidInputError, match="dropout"):
        TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, dropout="no")  # type: ignore[arg-type]


def test_gemma3_config_as_published_without_vocab_size_loads() -> None:
    """google/gemma-3-27b-it's config.json leaves vocab_size (and the window pattern) to Gemma3TextConfig's
    defaults (262,208; 5 local layers per global one): the file as published must load at its 27.0B
    (transformers builds 27,009,346,304 parameters from it), not fail for want of vocab_size."""
    text = {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
            "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16,
            "query_pre_attn_scalar": 168, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024}
    g3 = from_dict({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                    "text_config": text, "vision_config": {"hidden_size": 1152}})
    assert g3.vocab_size == 262208 and g3.window_layer_share == pytest.approx(52 / 62)
    assert g3.num_params == 27009346304
    # Gemma 1/2's config classes default to a 256,000-token vocabulary
    g2 = from_dict({"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42,
                    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "sliding_window": 4096})
    assert g2.vocab_size == 256000 and g2.num_params == 9241705984  # gemma-2-9b


def test_qwen_moe_config_saved_by_transformers_5_keeps_its_experts() -> None:
    """transformers 5 saves Qwen3MoeConfig's expert count as ``num_local_experts`` (its attribute map), so a
    fine-tuned Qwen3-30B-A3B's config.json can name no ``num_experts``: it must still load as 128 experts
    (30.53B / 3.35B), not silently as a dense 1.75B model; one naming neither is refused, naming the field."""
    cfg = {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
           "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
           "moe_intermediate_size": 768, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
           "max_position_embeddings": 40960, "tie_word_embeddings": False}
    saved_by_v4 = from_dict({**cfg, "num_experts": 128})
    saved_by_v5 = from_dict({**cfg, "num_local_experts": 128})
    assert saved_by_v5.num_experts == 128 and saved_by_v5.num_params == saved_by_v4.num_params == 30532122624
    assert saved_by_v5.num_active_params == saved_by_v4.num_active_params == 3353032704
    with pytest.raises(InvalidInputError, match="num_experts"):
        from_dict(cfg)


def test_opt_with_projected_embeddings_is_refused_naming_the_field() -> None:
    """OPT-350m embeds in 512 columns and projects to its 1024-wide layers (``word_embed_proj_dim``; 331,196,416
    parameters as transformers builds it): the layout has no field here, and counting the table at the
    hidden width gave 355.9M, 7% too many, and a 1024-wide output layer. Refused, naming the field; OPT models
    whose embeddings are the hidden width (every other size) still load."""
    opt350 = {"model_type": "opt", "activation_function": "relu", "do_layer_norm_before": False, "ffn_dim": 4096,
              "hidden_size": 1024, "max_position_embeddings": 2048, "num_attention_heads": 16,
              "num_hidden_layers": 24, "vocab_size": 50272, "word_embed_proj_dim": 512}
    with pytest.raises(InvalidInputError, match="word_embed_proj_dim"):
        from_dict(opt350)
    opt13 = _hf("opt", activation_function="relu", ffn_dim=8192, hidden_size=2048, max_position_embeddings=2048,
                num_attention_heads=32, num_hidden_layers=24, vocab_size=50272, word_embed_proj_dim=2048)
    assert opt13.num_params == 1315758080 - 2 * 2048


def test_nested_text_config_as_published_takes_its_config_class_defaults() -> None:
    """transformers (4.x) wrote a nested ``text_config`` without the values equal to its config class's defaults,
    so llava-hf/llava-1.5-7b-hf's names no layers, widths or heads (Vicuna-7B is LlamaConfig's default shape)
    and gemma-3-4b-it's no heads (Gemma3TextConfig's 8 / 4 of 256 columns). Both files as published failed
    ("lacks 'num_attention_heads'"); they load at the sizes transformers builds from them."""
    llava = from_dict({
        "architectures": ["LlavaForConditionalGeneration"], "image_token_index": 32000, "model_type": "llava",
        "pad_token_id": 32001, "projector_hidden_act": "gelu", "tie_word_embeddings": False, "vocab_size": 32064,
        "text_config": {"_name_or_path": "lmsys/vicuna-7b-v1.5", "architectures": ["LlamaForCausalLM"],
                        "max_position_embeddings": 4096, "model_type": "llama", "rms_norm_eps": 1e-05,
                        "torch_dtype": "float16", "vocab_size": 32064},
        "vision_config": {"hidden_size": 1024, "model_type": "clip_vision_model"}})
    assert (llava.num_layers, llava.hidden_size, llava.num_kv_heads) == (32, 4096, 32)
    assert llava.num_params == 6738939904
    g3 = from_dict({"model_type": "gemma3", "text_config": {
        "hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}})
    assert (g3.num_attention_heads, g3.num_kv_heads, g3.head_dim, g3.window_size) == (8, 4, 256, 1024)
    assert g3.num_params == 3880263168
    # Llama4TextConfig's defaults are Scout's: a text_config naming only its model_type is Scout
    # (its QK-norm, use_qk_norm, is left as the loader reads it: a weightless L2 norm in transformers)
    scout = from_dict({"model_type": "llama4", "text_config": {"model_type": "llama4_text"}})
    assert (scout.num_experts, scout.num_moe_layers, scout.ffn_hidden_size) == (16, 48, 16384)
    assert scout.num_params == pytest.approx(load_model("llama4-scout").num_params, rel=1e-6)
    # a top-level config is written whole: a missing field there is still an error
    with pytest.raises(InvalidInputError, match="num_attention_heads"):
        from_dict({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                   "vocab_size": 32000})


def test_megatron_num_query_groups_counts_only_with_group_query_attention() -> None:
    """Megatron-LM reads --num-query-groups only under --group-query-attention (core_transformer_config_from_args
    passes None, i.e. MHA, otherwise), and its argparse default is 1, so an arguments dump of an MHA model
    (GPT-3) carries ``group_query_attention: false, num_query_groups: 1``: that was read as multi-query
    attention (1 KV head: the KV cache 96x too small, 10% fewer parameters)."""
    gpt3 = {"num_layers": 96, "hidden_size": 12288, "num_attention_heads": 96, "seq_length": 2048,
            "max_position_embeddings": 2048, "vocab_size": 50257}
    dump = from_dict({**gpt3, "group_query_attention": False, "num_query_groups": 1})
    assert dump.num_query_groups == 96 and dump.num_params == load_model("gpt3-175b").num_params
    assert from_dict({**gpt3, "group-query-attention": True, "num-query-groups": 8}).num_query_groups == 8
    assert from_dict({**gpt3, "num_query_groups": 8}).num_query_groups == 8  # no flag: the groups as given


def test_megatron_mla_fields_count_only_with_multi_latent_attention() -> None:
    """Megatron-LM's argparse gives the MLA sizes defaults (kv_lora_rank 32, qk_head_dim 128, qk_pos_emb_head_dim
    64, v_head_dim 128) whether or not --multi-latent-attention is set, so an arguments dump of a plain GPT carries
    them with ``multi_latent_attention: false``: that was read as MLA (a 32-wide latent: the KV cache 43x too
    small, 11% fewer parameters)."""
    gpt = {"num_layers": 24, "hidden_size": 2048, "num_attention_heads": 16, "vocab_size": 50304,
           "seq_length": 2048}
    mla_defaults = {"q_lora_rank": None, "kv_lora_rank": 32, "qk_head_dim": 128, "qk_pos_emb_head_dim": 64,
                    "v_head_dim": 128}
    dump = from_dict({**gpt, "multi_latent_attention": False, **mla_defaults})
    plain = from_dict(gpt)
    assert not dump.is_mla and dump.num_params == plain.num_params
    assert dump.kv_cache_bytes_per_token() == plain.kv_cache_bytes_per_token() == 2 * 24 * 2048 * 2
    assert from_dict({**gpt, "multi-latent-attention": True, **mla_defaults}).is_mla
    assert from_dict({**gpt, **mla_defaults}).is_mla  # no flag: the fields as given (the library's DeepSeek-V3)


def test_megatron_arguments_dump_with_nulls_and_padded_vocab_loads() -> None:
    """A Megatron-LM arguments dump (``vars(args)`` as YAML/JSON) holds every argument, unset ones as null, and the
    vocabulary as ``padded_vocab_size`` (``vocab_size`` is null unless given on the command line): it failed on
    "vocab_size must be a positive integer, got None". Nulls are now unset (Megatron's defaults) and the padded
    vocabulary stands in for a missing one."""
    dump = {"num_layers": 24, "hidden_size": 2048, "ffn_hidden_size": 8192, "num_attention_heads": 16,
            "kv_channels": 128, "group_query_attention": False, "num_query_groups": 1, "seq_length": 2048,
            "max_position_embeddings": 2048, "position_embedding_type": "learned_absolute", "add_bias_linear": True,
            "swiglu": False, "untie_embeddings_and_output_weights": False, "normalization": "LayerNorm",
            "num_experts": None, "moe_router_topk": 2, "moe_ffn_hidden_size": None, "moe_layer_freq": 1,
            "moe_first_k_dense": None, "window_size": None, "hidden_dropout": 0.1, "attention_dropout": 0.1,
            "vocab_size": None, "padded_vocab_size": 50304, "make_vocab_size_divisible_by": 128,
            "multi_latent_attention": False, "q_lora_rank": None, "kv_lora_rank": 32, "qk_head_dim": 128,
            "qk_pos_emb_head_dim": 64, "v_head_dim": 128}
    m = from_dict(dump)
    assert (m.vocab_size, m.num_query_groups, m.is_mla, m.is_moe, m.dropout) == (50304, 16, False, False, True)
    assert m.num_params == load_model("gpt3-1.3b").num_params + (50304 - 50257) * 2048
    assert from_dict({**dump, "vocab_size": 50257}).vocab_size == 50257  # the tokenizer's own wins


_LLAMA_SMALL = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8, "num_hidden_layers": 4,
                "vocab_size": 1000, "intermediate_size": 512}


@pytest.mark.parametrize(("value", "tied"), [("false", False), ("False", False), ("true", True), (0, False),
                                             (1, True), (False, False), (True, True)])
def test_hf_boolean_field_given_as_a_string_is_read_as_what_it_says(value, tied: bool) -> None:
    """``"tie_word_embeddings": "false"`` (a templated config.json) unties the output layer: ``bool("false")`` is
    true, which tied it and dropped vocab x hidden parameters from the count."""
    m = from_dict({**_LLAMA_SMALL, "tie_word_embeddings": value})
    assert m.tied_embeddings is tied
    assert m.param_counts()["output_layer"] == (0 if tied else 1000 * 256)
    falcon = from_dict({"model_type": "falcon", "hidden_size": 256, "num_attention_heads": 8,
                        "num_hidden_layers": 2, "vocab_size": 1000, "multi_query": "false"})
    assert falcon.num_kv_heads == 8  # multi-query "false": every head keeps its K and V


@pytest.mark.parametrize("field", ["tie_word_embeddings", "attention_bias", "use_sliding_window"])
def test_hf_boolean_field_of_another_type_is_refused_naming_it(field: str) -> None:
    # attention_bias on a Llama: transformers' Mistral never reads it, so neither does the loader there
    model_type = "llama" if field == "attention_bias" else "mistral"
    with pytest.raises(InvalidInputError, match=f"field '{field}' must be true or false, got 'maybe'"):
        from_dict({**_LLAMA_SMALL, "model_type": model_type, "sliding_window": 64, field: "maybe"})


@pytest.mark.parametrize(("model_type", "field", "value", "activation"), [
    ("llama", "hidden_act", "silu", "swiglu"), ("llama", "hidden_act", "gelu", "geglu"),
    ("llama", "hidden_act", "relu2", "geglu"), ("llama", "hidden_act", None, "swiglu"),  # null: LlamaConfig's silu
    ("gpt_neox", "hidden_act", "relu2", "squared_relu"), ("gpt_neox", "hidden_act", "relu6", "relu"),
    ("gpt_neox", "hidden_act", "gelu_fast", "gelu"), ("gpt2", "activation_function", "relu", "relu"),
])
def test_hf_activation_names_map_by_transformers_functions(model_type, field, value, activation) -> None:
    cfg = {**_LLAMA_SMALL, "model_type": model_type, field: value}
    if model_type == "gpt2":
        cfg = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100, field: value}
    assert from_dict(cfg).activation == activation


@pytest.mark.parametrize(("model_type", "field", "value"), [
    ("llama", "hidden_act", "slu"), ("llama", "hidden_act", "gelu_tahn"), ("gpt_neox", "hidden_act", "sqaured_relu"),
    ("llama", "hidden_act", 5), ("gemma", "hidden_activation", "gelu_pytorch"),
])
def test_hf_unknown_activation_is_refused_naming_the_field(model_type, field, value) -> None:
    """A name transformers cannot build was read as GELU (GeGLU on a Llama: a typo of silu changed the op)."""
    with pytest.raises(InvalidInputError, match=f"field '{field}': unknown activation {value!r}"):
        from_dict({**_LLAMA_SMALL, "model_type": model_type, field: value})


_QWEN_MOE = {"model_type": "qwen2_moe", "num_hidden_layers": 7, "hidden_size": 256, "num_attention_heads": 8,
             "num_key_value_heads": 4, "intermediate_size": 1024, "moe_intermediate_size": 128,
             "shared_expert_intermediate_size": 512, "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 1000,
             "tie_word_embeddings": False}


@pytest.mark.parametrize(("fields", "moe_layers"), [
    ({}, 7), ({"decoder_sparse_step": 2}, 3), ({"decoder_sparse_step": 4}, 1),  # layers 1,3,5; layer 3
    ({"decoder_sparse_step": 3}, 2), ({"mlp_only_layers": [0, 6]}, 5),
    ({"decoder_sparse_step": 2, "mlp_only_layers": [1, 2]}, 2),  # 3 and 5 (2 is dense anyway)
])
def test_qwen_moe_sparse_layers_follow_transformers_rule(fields: dict, moe_layers: int) -> None:
    """transformers' Qwen2/3-MoE: layer i is sparse when (i + 1) % decoder_sparse_step == 0 and i is not in
    mlp_only_layers; the others hold a dense MLP of intermediate_size. Read as Megatron's every-N-th layer from
    layer 0, a step of 4 on 7 layers gave 2 MoE layers (0 and 4) for transformers' 1, and mlp_only_layers was
    refused. Parameter count by hand: attention, norms and MLPs per layer, embeddings, untied output layer."""
    m = from_dict({**_QWEN_MOE, **fields})
    assert m.num_moe_layers == moe_layers and m.num_dense_layers == 7 - moe_layers
    h, q, kv = 256, 256, 128
    attention = h * (q + 2 * kv) + (q + 2 * kv) + q * h  # Qwen2: QKV bias, no output bias
    norms = 2 * h
    dense = 3 * h * 1024
    moe = 8 * 3 * h * 128 + 3 * h * 512 + h + 8 * h  # experts, shared expert and its gate, router
    expected = (7 * (attention + norms) + (7 - moe_layers) * dense + moe_layers * moe + 2 * 1000 * h + h)
    assert m.num_params == expected


def test_qwen_moe_with_every_layer_dense_loads_as_a_dense_model() -> None:
    m = from_dict({**_QWEN_MOE, "mlp_only_layers": list(range(7))})
    assert not m.is_moe and m.ffn_hidden_size == 1024 and m.num_dense_layers == 7


@pytest.mark.parametrize(("freq", "message"), [
    ([1, 0], "one 0 \\(dense\\) or 1 \\(MoE\\) per layer \\(4\\)"), ([1, 2, 0, 1], "per layer"),
    ([0, 0, 0, 0], "marks no layer as MoE"), (0, "moe_layer_freq"),
])
def test_moe_layer_freq_list_is_validated(freq, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        TransformerConfig(num_layers=4, hidden_size=64, num_attention_heads=4, num_experts=4, moe_layer_freq=freq)
    ok = TransformerConfig(num_layers=4, hidden_size=64, num_attention_heads=4, num_experts=4,
                           moe_layer_freq=[0, 1, 1, 0])
    assert ok.moe_layer_freq == (0, 1, 1, 0) and ok.num_moe_layers == 2
    assert from_dict(ok.to_dict()).num_params == ok.num_params  # round trip through the Megatron-style keys


_SMALL_LLAMA = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                    num_key_value_heads=4, vocab_size=32000)


@pytest.mark.parametrize(("model_type", "fields", "expected"), [
    # transformers 5 on the meta device (AutoModelForCausalLM.from_config): attention_bias biases Q, K, V *and* the
    # output projection (1,024 per layer were missing), mlp_bias gate, up and down (6,656 per layer were missing)
    ("llama", dict(attention_bias=True), 155751424),
    ("llama", dict(mlp_bias=True), 155784192),
    ("granite", dict(attention_bias=True, mlp_bias=True), 155804672),
    ("qwen3", dict(head_dim=128, attention_bias=True), 176737280),
    ("gemma2", dict(head_dim=128, attention_bias=True), 143983616),
    ("qwen2", {}, 155743232),  # Qwen2's fixed QKV bias: no output-projection bias
])
def test_hf_attention_and_mlp_biases_are_counted(model_type: str, fields: dict, expected: int) -> None:
    """A config.json's ``attention_bias`` (Llama, Granite, Qwen3, Gemma, OLMo, Llama 4) gives the output projection a
    bias as well as Q/K/V, and Llama's / Granite's ``mlp_bias`` biases the MLP: both were left out of the count."""
    m = _hf(model_type, **_SMALL_LLAMA, **fields)
    assert m.num_params == expected
    # biases are additions, not matmul weights: the forward FLOPs are those of the bias-free layout
    plain = with_overrides(m, add_qkv_bias=False, add_attn_out_bias=False, add_mlp_bias=False)
    assert plain.num_params < m.num_params
    assert m.forward_flops_per_token(2048) == plain.forward_flops_per_token(2048)


def test_forward_flops_exclude_the_mlp_and_expert_biases() -> None:
    """``add_bias_linear`` (GPT-2, gpt-oss) biases the MLPs and experts too; those are not matmul weights either."""
    gpt2 = load_model("gpt2-large")
    assert gpt2.add_bias_linear
    assert gpt2.forward_flops_per_token(1024) == with_overrides(gpt2, add_bias_linear=False).forward_flops_per_token(1024)
    oss = load_model("gpt-oss-20b")
    for active in (True, False):
        assert oss.forward_flops_per_token(4096, active=active) == with_overrides(
            oss, add_bias_linear=False).forward_flops_per_token(4096, active=active)


def test_olmo_norm_layouts_match_transformers() -> None:
    """OLMo 1's LayerNorms are non-parametric (no weight, no bias: 0.26M were counted), OLMo 2's and OLMoE's
    QK-norms weigh every query/key column (one RMSNorm over all heads, not one head-wide weight): the published
    configs load at the sizes transformers 5 builds from them (allenai/OLMo-7B-hf, OLMo-2-1124-7B, OLMoE-1B-7B)."""
    olmo = _hf("olmo", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
               vocab_size=50304, max_position_embeddings=2048, attention_bias=False, hidden_act="silu")
    assert olmo.num_params == 6888095744 and olmo.param_counts()["norms_per_layer"] == 0
    olmo2 = _hf("olmo2", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=32, vocab_size=100352, max_position_embeddings=4096, hidden_act="silu")
    assert olmo2.num_params == 7298617344
    olmoe = _hf("olmoe", hidden_size=2048, intermediate_size=1024, num_hidden_layers=16, num_attention_heads=16,
                num_key_value_heads=16, num_experts=64, num_experts_per_tok=8, vocab_size=50304,
                max_position_embeddings=4096, hidden_act="silu")
    assert olmoe.num_params == 6919161856
    # OLMo's attention_bias biases Q, K, V and the output projection (4 x 4,096 per layer)
    biased = _hf("olmo", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                 vocab_size=50304, attention_bias=True)
    assert biased.num_params == 6888095744 + 32 * 4 * 4096


def test_gptj_and_mpt_bias_layouts_match_transformers() -> None:
    """GPT-J's attention projections have no bias (its MLP and LM head have): 458,752 attention biases were counted
    and the LM head's 50,400 missed. MPT's ``no_bias`` drops the LayerNorms' biases too (transformers and
    llm-foundry alike): 266,240 were counted. Sizes as transformers 5 builds them from the published configs."""
    gptj = _hf("gptj", n_embd=4096, n_layer=28, n_head=16, n_positions=2048, rotary_dim=64, vocab_size=50400)
    assert gptj.num_params == 6050882784 == load_model("gptj-6b").num_params
    assert not gptj.add_bias_linear and gptj.add_mlp_bias and gptj.output_layer_bias
    mpt7 = _hf("mpt", d_model=4096, n_heads=32, n_layers=32, vocab_size=50432, max_seq_len=2048, no_bias=True,
               expansion_ratio=4, attn_config={"alibi": True})
    assert mpt7.num_params == 6649286656  # mosaicml/mpt-7b


def test_falcon_neox_and_gemma_layouts_follow_their_config_fields() -> None:
    """Three config fields were read too coarsely: Falcon2-11B's ``num_ln_in_parallel_attn = 1`` (the new decoder
    architecture with one norm, 2 x hidden per layer fewer); GPT-NeoX's ``attention_bias: false`` (only the
    attention loses its biases, the MLP keeps them); a Gemma 2/3 ``layer_types`` list, which transformers 5 writes
    and reads in place of ``sliding_window_pattern`` (3 of 6 sliding layers was costed as Gemma 3's 5 of 6)."""
    falcon = _hf("falcon", hidden_size=256, num_hidden_layers=6, num_attention_heads=8, vocab_size=1000,
                 new_decoder_architecture=True, num_kv_heads=2, num_ln_in_parallel_attn=1)
    assert falcon.parallel_attn_norms == 1 and falcon.num_params == 4388352  # transformers 5
    neox = _hf("gpt_neox", hidden_size=256, intermediate_size=1024, num_hidden_layers=6, num_attention_heads=8,
               vocab_size=1000, attention_bias=False)
    assert neox.num_params == 5244928
    gemma = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=6, num_attention_heads=8,
                 num_key_value_heads=4, head_dim=32, vocab_size=1000, sliding_window=64)
    kinds = ["sliding_attention", "full_attention"] * 3
    assert _hf("gemma3_text", **gemma, layer_types=kinds).window_layer_share == 0.5
    assert _hf("gemma3_text", **gemma).window_layer_share == pytest.approx(5 / 6)  # the config class's pattern
    no_local = _hf("gemma2", **gemma, layer_types=["full_attention"] * 6)
    assert no_local.window_size is None


@pytest.mark.parametrize(("model_type", "field"), [
    ("mixtral", "num_local_experts"), ("granitemoe", "num_local_experts"), ("olmoe", "num_experts"),
    ("gpt_oss", "num_local_experts"), ("llama4_text", "num_local_experts"),
])
def test_hf_moe_config_without_its_expert_count_is_refused(model_type: str, field: str) -> None:
    """A Mixtral / Granite-MoE / OLMoE / gpt-oss / Llama 4 config that names no expert count loaded silently as a
    dense model (transformers builds 8 to 128 experts from the class defaults: 13.9M parameters here, not 2.9M);
    it is refused naming the field, as Qwen-MoE's already was. A missing top-k takes the class's default (OLMoE:
    8 of 64, not this library's 2)."""
    base = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8,
                num_key_value_heads=4, vocab_size=1000, head_dim=32)
    with pytest.raises(InvalidInputError, match=field):
        _hf(model_type, **base)
    m = _hf(model_type, **base, **{field: 16})
    assert m.num_experts == 16
    assert m.moe_router_topk == {"mixtral": 2, "granitemoe": 2, "olmoe": 8, "gpt_oss": 4, "llama4_text": 1}[model_type]


def test_hf_config_without_model_type_says_so() -> None:
    """A config.json without ``model_type`` is read with Megatron-LM keys: the error named only Megatron's missing
    ``num_layers``, which a Hugging Face user's file never has; it now says what the file lacks."""
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 11008,
           "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 32000}
    with pytest.raises(InvalidInputError, match="lacks num_layers .*no model_type"):
        from_dict(cfg)
    with pytest.raises(InvalidInputError, match="lacks num_attention_heads$"):
        from_dict({"num_layers": 2, "hidden_size": 64})


def test_qwen3_config_without_head_dim_takes_the_class_default() -> None:
    """Qwen3Config's head_dim defaults to 128, not hidden / heads: a Qwen3-0.6B config without it built 16 heads of
    64 (508M parameters) where transformers builds 16 of 128 (596,049,920)."""
    q = _hf("qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
            num_key_value_heads=8, vocab_size=151936, tie_word_embeddings=True)
    assert q.head_dim == 128 and q.num_params == 596049920


@pytest.mark.parametrize(("fields", "expected"), [
    # Qwen2MoeConfig: a 5,632-wide gated shared expert unless the config names another width
    (dict(model_type="qwen2_moe", hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8,
          num_key_value_heads=4, vocab_size=1000, num_experts=4, moe_intermediate_size=64), 19395840),
    # DeepseekV3Config: 1 shared expert, the first 3 layers dense
    (dict(model_type="deepseek_v3", hidden_size=256, intermediate_size=512, num_hidden_layers=4,
          num_attention_heads=8, vocab_size=1000, n_routed_experts=8, moe_intermediate_size=64, q_lora_rank=64,
          kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16), 2458240),
    # Llama4TextConfig: heads of 128 whatever the width
    (dict(model_type="llama4_text", hidden_size=256, intermediate_size=512, intermediate_size_mlp=512,
          num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4, vocab_size=1000, num_local_experts=4,
          use_qk_norm=False), 11528448),
    # GPT2Config: 1,024 positions (the table this library sized at its 2,048-token default)
    (dict(model_type="gpt2", n_embd=256, n_layer=4, n_head=8, vocab_size=1000), 3677696),
])
def test_hf_configs_leaving_fields_to_their_class_defaults(fields: dict, expected: int) -> None:
    """Fields a config.json may leave to its transformers config class changed the architecture when missing
    (no shared expert, no dense first layers, hidden/heads-wide heads, a 2,048-row position table): they take the
    class's defaults, and the model is the size transformers 5 builds from the same file."""
    assert from_dict(fields).num_params == expected


def test_gemma_local_layer_share_counts_the_layers() -> None:
    """Gemma's config classes slide every layer but each ``pattern``-th (``(i + 1) % pattern``): Gemma-3-1B's 26
    layers have 22 local ones (0.846), not 5/6 (0.833); an odd Gemma 2 depth has one more local layer than global."""
    g3 = _hf("gemma3_text", hidden_size=1152, intermediate_size=6912, num_hidden_layers=26, num_attention_heads=4,
             num_key_value_heads=1, head_dim=256, vocab_size=262144, sliding_window=512)
    assert g3.window_layer_share == pytest.approx(22 / 26)
    g2 = _hf("gemma2", hidden_size=256, intermediate_size=512, num_hidden_layers=25, num_attention_heads=8,
             num_key_value_heads=4, head_dim=32, vocab_size=1000, sliding_window=64)
    assert g2.window_layer_share == pytest.approx(13 / 25)


def test_partial_rotary_as_transformers_5_saves_it() -> None:
    """transformers 5 writes the share of each head that RoPE rotates into ``rope_parameters`` (GPT-NeoX's
    ``rotary_pct``, Phi's and StableLM's ``partial_rotary_factor`` are no longer top-level): a Pythia config saved
    by it rotated whole heads here (the class default is 0.25), a Phi-2 one took Phi's 0.5 instead of its 0.4;
    Phi-3's factor (Phi-4-mini: 0.75) was not read at all."""
    base = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=8,
                vocab_size=1000)
    rope = {"rope_theta": 10000.0, "rope_type": "default"}
    assert _hf("gpt_neox", **base, rope_parameters={**rope, "partial_rotary_factor": 0.25}).rotary_percent == 0.25
    assert _hf("gpt_neox", **base).rotary_percent == 0.25  # GPTNeoXConfig's default
    assert _hf("gpt_neox", **base, rotary_pct=0.5).rotary_percent == 0.5
    assert _hf("phi", **base, rope_parameters={**rope, "partial_rotary_factor": 0.4}).rotary_percent == 0.4
    assert _hf("stablelm", **base, rope_parameters={**rope, "partial_rotary_factor": 0.5}).rotary_percent == 0.5
    assert _hf("phi3", **base, partial_rotary_factor=0.75).rotary_percent == 0.75
    assert _hf("phi3", **base, rope_parameters={**rope, "partial_rotary_factor": 0.75}).rotary_percent == 0.75
    assert _hf("llama", **base, partial_rotary_factor=0.5).rotary_percent == 1.0  # Llama rotates whole heads


def test_qk_norm_weights_match_transformers() -> None:
    """Sizes as transformers 5 builds them (AutoModelForCausalLM.from_config on the meta device). Llama 4's QK-norm
    (``use_qk_norm``) is a weightless L2 norm: 2 x 128 per layer were counted (12,288 on Scout). StableLM's
    ``qk_layernorm`` is one bias-free LayerNorm per query and KV head (160 x 40 per layer on the 12B), not a shared
    head-wide one with a bias: 230,400 were missing on stablelm-2-12b."""
    assert load_model("llama4-scout").num_params == 107769861120
    scout = _hf("llama4_text", hidden_size=512, intermediate_size=256, intermediate_size_mlp=1024, num_hidden_layers=4,
                num_attention_heads=8, num_key_value_heads=2, head_dim=64, num_local_experts=4,
                num_experts_per_tok=1, vocab_size=1000, interleave_moe_layer_step=1, tie_word_embeddings=False)
    assert scout.qk_layernorm and scout.num_params == 11522560  # use_qk_norm: Llama4TextConfig's default, True
    stablelm = _hf("stablelm", hidden_act="silu", hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                   num_attention_heads=32, num_key_value_heads=8, partial_rotary_factor=0.25, qk_layernorm=True,
                   use_parallel_residual=True, vocab_size=100352, max_position_embeddings=4096,
                   tie_word_embeddings=False)
    assert stablelm.num_params == 12143185920
    # the fields round-trip through the Megatron-style keys
    assert from_dict(stablelm.to_dict()).num_params == stablelm.num_params
    assert from_dict(scout.to_dict()).num_params == scout.num_params


@pytest.mark.parametrize(("model_type", "q_lora_rank", "expected"), [
    ("deepseek_v3", 96, 7022576), ("deepseek_v2", None, 7353776)])
def test_deepseek_mla_attention_bias_is_counted(model_type: str, q_lora_rank: int | None, expected: int) -> None:
    """DeepSeek's ``attention_bias`` biases the query bottleneck's and the KV latent's down-projections and the
    output projection (transformers 5 on the meta device); it was not read: 688 per layer missing here."""
    cfg = dict(hidden_size=512, intermediate_size=1024, moe_intermediate_size=128, num_hidden_layers=3,
               num_attention_heads=8, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
               first_k_dense_replace=1, q_lora_rank=q_lora_rank, kv_lora_rank=64, qk_nope_head_dim=32,
               qk_rope_head_dim=16, v_head_dim=32, vocab_size=1000)
    m = _hf(model_type, **cfg, attention_bias=True)
    assert m.num_params == expected
    plain = _hf(model_type, **cfg)
    assert m.num_params - plain.num_params == 3 * ((q_lora_rank or 0) + 64 + 16 + 512)
    # biases are additions, not matmul weights
    assert m.forward_flops_per_token(2048) == plain.forward_flops_per_token(2048)


@pytest.mark.parametrize(("model_type", "fields", "expected"), [
    ("qwen2", dict(attention_bias=False), 5484544),  # Qwen2Attention: bias=True on Q, K, V whatever the config says
    ("mistral", dict(attention_bias=True), 5483008),  # Mistral, Mixtral, Phi-3: never a bias
    ("mixtral", dict(attention_bias=True, num_local_experts=4), 14924288),
    ("phi3", dict(attention_bias=True), 5483008),
    # Qwen2-MoE reads its own qkv_bias (default True), not attention_bias
    ("qwen2_moe", dict(attention_bias=False, num_experts=4, moe_intermediate_size=128,
                       shared_expert_intermediate_size=256), 4703232),
    ("qwen2_moe", dict(attention_bias=True, qkv_bias=False, num_experts=4, moe_intermediate_size=128,
                       shared_expert_intermediate_size=256), 4701696),
])
def test_hf_attention_bias_is_ignored_where_transformers_ignores_it(model_type: str, fields: dict,
                                                                     expected: int) -> None:
    """transformers 5 fixes these models' attention biases and never reads ``attention_bias``; the loader read it
    (1,536 parameters too few or too many here). Sizes as AutoModelForCausalLM.from_config builds them."""
    m = _hf(model_type, hidden_size=512, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=2, vocab_size=1000, **fields)
    assert m.num_params == expected


def test_layer_types_must_list_one_known_kind_per_layer() -> None:
    """A ``layer_types`` that is a string, lists another number of layers or names a kind not costed here
    (Llama 4's ``chunked_attention``, Qwen3-Next's ``linear_attention``) was read as every layer sliding, or as a
    share of the wrong number of layers; a ``sliding_window_pattern`` of 0 as every layer sliding. Each is refused,
    naming the field, as transformers refuses them."""
    gemma = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=6, num_attention_heads=8,
                 num_key_value_heads=4, head_dim=32, vocab_size=1000, sliding_window=64)
    for bad in ("sliding_attention", ["sliding_attention"] * 5, ["sliding_attention", "chunked_attention"] * 3):
        for mt in ("gemma2", "gemma3_text", "mistral", "qwen2"):
            with pytest.raises(InvalidInputError, match="layer_types"):
                _hf(mt, **gemma, use_sliding_window=True, layer_types=bad)
    oss = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=6, num_attention_heads=8, head_dim=32,
               num_key_value_heads=4, vocab_size=1000, num_local_experts=4, sliding_window=64)
    with pytest.raises(InvalidInputError, match="layer_types"):
        _hf("gpt_oss", **oss, layer_types=["sliding_attention"] * 4)
    assert _hf("gpt_oss", **oss, layer_types=["sliding_attention", "full_attention"] * 3).window_layer_share == 0.5
    with pytest.raises(InvalidInputError, match="sliding_window_pattern"):
        _hf("gemma2", **gemma, sliding_window_pattern=0)
    # an empty list lists nothing: the config class's rule, as without one
    assert _hf("gemma2", **gemma, layer_types=[]).window_layer_share == 0.5


def test_qwen_slides_only_when_use_sliding_window_says_so() -> None:
    """Qwen2Config and Qwen3Config default ``use_sliding_window`` to false: a config without it has no sliding
    layer in transformers, but was read as sliding from ``max_window_layers`` on (Qwen2.5-1.5B's 28 layers with
    ``max_window_layers`` 21: 7 layers' caches capped at the window). Mistral has no such switch and slides."""
    qwen = {"hidden_size": 1536, "intermediate_size": 8960, "num_attention_heads": 12, "num_key_value_heads": 2,
            "num_hidden_layers": 28, "vocab_size": 151936, "max_position_embeddings": 131072,
            "sliding_window": 32768, "max_window_layers": 21}
    for mt in ("qwen2", "qwen3"):
        assert _hf(mt, **qwen).window_size is None
        on = _hf(mt, **qwen, use_sliding_window=True)
        assert on.window_size == 32768 and on.window_layer_share == pytest.approx(7 / 28)
    assert _hf("mistral", **qwen).window_size == 32768


def test_moe_configs_without_expert_fields_take_the_config_class_defaults_or_are_refused() -> None:
    """A Qwen-MoE or DeepSeek config without ``moe_intermediate_size`` gave its experts the dense MLP's
    ``intermediate_size`` (Qwen1.5-MoE-A2.7B: 51.7e9 parameters for 14.3e9; DeepSeek-V2-Lite 112.7e9 for 15.7e9),
    not its config class's default; a DeepSeek config without ``n_routed_experts`` loaded as a dense model of
    2.6e9, where every other MoE config naming no experts is refused."""
    qwen = {"hidden_size": 2048, "intermediate_size": 5632, "num_attention_heads": 16, "num_hidden_layers": 24,
            "vocab_size": 151936, "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
            "shared_expert_intermediate_size": 5632}
    published = _hf("qwen2_moe", **qwen)
    assert published.num_params == 14_315_784_192  # Qwen/Qwen1.5-MoE-A2.7B
    assert _hf("qwen2_moe", **{k: v for k, v in qwen.items() if k != "moe_intermediate_size"}).num_params \
        == published.num_params  # Qwen2MoeConfig's 1408
    q3 = _hf("qwen3_moe", **{**{k: v for k, v in qwen.items() if k != "moe_intermediate_size"}, "num_experts": 128})
    assert q3.moe_ffn_hidden_size == 768
    lite = {"hidden_size": 2048, "intermediate_size": 10944, "num_attention_heads": 16, "num_hidden_layers": 27,
            "vocab_size": 102400, "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 64, "n_shared_experts": 2,
            "num_experts_per_tok": 6, "moe_intermediate_size": 1408, "first_k_dense_replace": 1}
    v2 = _hf("deepseek_v2", **lite)
    assert v2.num_params == 15_706_484_224 and v2.kv_cache_bytes_per_token(2.0) == (512 + 64) * 27 * 2
    no_width = _hf("deepseek_v2", **{k: v for k, v in lite.items() if k != "moe_intermediate_size"})
    assert no_width.moe_ffn_hidden_size == 1407 and no_width.moe_shared_expert_intermediate_size == 2 * 1407
    assert _hf("deepseek_v3", **{k: v for k, v in lite.items() if k != "moe_intermediate_size"}
               ).moe_ffn_hidden_size == 2048
    with pytest.raises(InvalidInputError, match="n_routed_experts"):
        _hf("deepseek_v2", **{k: v for k, v in lite.items() if k != "n_routed_experts"})
    # MLA's widths left out: the config classes' defaults (kv_lora_rank 512, rotary 64, nope 128, value 128, a
    # 1536-wide query bottleneck unless it is null), not multi-head attention
    mla = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    bare = _hf("deepseek_v2", **{k: v for k, v in lite.items() if k not in mla})
    assert bare.is_mla and bare.num_params == v2.num_params and bare.kv_cache_bytes_per_token(2.0) == 31104
    assert _hf("deepseek_v3", **{k: v for k, v in lite.items() if k != "q_lora_rank"}).q_lora_rank == 1536


def test_mpt_attention_ffn_and_position_options_follow_llm_foundry() -> None:
    """llm-foundry's MPT options were ignored: ``attn_type: multiquery_attention`` costed 32 KV heads for one (its
    KV cache 32x too large), ``kv_n_heads`` was read for multi-head attention too (llm-foundry reads it for
    grouped-query attention only), a gated ``mptglu`` MLP was costed ungated, rotary MPTs got a learned position
    table, QK LayerNorms and RMSNorms were missed, a MegaBlocks MoE (``mb_moe``) loaded as a dense model and a
    malformed ``attn_config`` crashed with an AttributeError."""
    mpt7 = dict(d_model=4096, n_heads=32, n_layers=32, vocab_size=50432, max_seq_len=2048, no_bias=True,
                expansion_ratio=4)
    base = _hf("mpt", **mpt7, attn_config={"alibi": True})
    assert base.num_params == 6649286656 and base.num_query_groups == 32  # mosaicml/mpt-7b
    mqa = _hf("mpt", **mpt7, attn_config={"alibi": True, "attn_type": "multiquery_attention"})
    assert mqa.num_query_groups == 1 and mqa.kv_cache_bytes_per_token(2.0) == base.kv_cache_bytes_per_token(2.0) / 32
    assert mqa.num_params == base.num_params - 32 * 2 * 4096 * (4096 - 128)
    gqa = _hf("mpt", **mpt7, attn_config={"alibi": True, "attn_type": "grouped_query_attention", "kv_n_heads": 8})
    assert gqa.num_query_groups == 8
    # a saved attn_config carrying llm-foundry's kv_n_heads default beside multi-head attention stays multi-head
    assert _hf("mpt", **mpt7, attn_config={"alibi": True, "kv_n_heads": 1}).num_query_groups == 32
    glu = _hf("mpt", **mpt7, attn_config={"alibi": True},
              ffn_config={"ffn_type": "mptglu", "ffn_act_fn": {"name": "silu"}})
    assert glu.activation == "swiglu" and glu.num_params == base.num_params + 32 * 4096 * 16384
    rope = _hf("mpt", **mpt7, attn_config={"rope": True})
    assert rope.position_embedding_type == "rope" and rope.num_params == base.num_params
    learned = _hf("mpt", **mpt7)
    assert learned.num_params == base.num_params + 2048 * 4096
    qk = _hf("mpt", **{**mpt7, "no_bias": False}, attn_config={"alibi": True, "qk_ln": True})
    plain = _hf("mpt", **{**mpt7, "no_bias": False}, attn_config={"alibi": True})
    assert qk.num_params == plain.num_params + 32 * 2 * (4096 + 4096)  # q_ln and k_ln, weights and biases
    assert _hf("mpt", **mpt7, norm_type="rmsnorm").normalization == "RMSNorm"
    for bad, match in (({"ffn_config": {"ffn_type": "mb_moe", "moe_num_experts": 8}}, "mb_moe"),
                       ({"attn_config": {"attn_type": "sliding"}}, "attn_type"),
                       ({"attn_config": {"qk_gn": True}}, "qk_gn"),
                       ({"norm_type": "batchnorm"}, "norm_type"),
                       ({"attn_config": "alibi"}, "attn_config")):
        with pytest.raises(InvalidInputError, match=match):
            _hf("mpt", **mpt7, **bad)


def test_gemma2_and_gemma3_without_sliding_window_take_the_class_window() -> None:
    """Gemma2Config and Gemma3TextConfig slide within 4096 tokens when the config names no ``sliding_window`` (a
    nested ``text_config`` as transformers 4 wrote it leaves the default out); such a config was costed with every
    layer global (Gemma-2-9B at 8k context: a 2 GiB request's KV cache read as 2.6 GiB)."""
    gemma2_9b = dict(hidden_size=3584, intermediate_size=14336, num_hidden_layers=42, num_attention_heads=16,
                     num_key_value_heads=8, head_dim=256, vocab_size=256000, max_position_embeddings=8192)
    for mt, share in (("gemma2", 0.5), ("gemma3_text", 35 / 42)):
        m = _hf(mt, **gemma2_9b)
        assert m.window_size == 4096 and m.window_layer_share == pytest.approx(share)
        assert m.num_params == _hf(mt, **gemma2_9b, sliding_window=4096).num_params
    assert _hf("gemma2", **gemma2_9b).num_params == 9_241_705_984  # google/gemma-2-9b
    assert _hf("gemma", **gemma2_9b).window_size is None  # Gemma 1 has no window


def test_null_or_unbuilt_shared_experts_are_not_counted() -> None:
    """DeepSeek's modelling code builds shared experts only when ``n_shared_experts`` is not None: an explicit
    null was read as the config class's default (2 for V2); transformers' Qwen3-MoE has no shared expert at all,
    but a ``shared_expert_intermediate_size`` left in a qwen3_moe config.json gave it one."""
    ds = dict(hidden_size=512, intermediate_size=1024, moe_intermediate_size=128, num_hidden_layers=3,
              num_attention_heads=8, n_routed_experts=8, num_experts_per_tok=2, first_k_dense_replace=1,
              q_lora_rank=None, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
              vocab_size=1000)
    for mt in ("deepseek_v2", "deepseek_v3"):
        assert _hf(mt, **ds, n_shared_experts=None).moe_shared_expert_intermediate_size is None
        assert _hf(mt, **ds, n_shared_experts=None).num_params == _hf(mt, **ds, n_shared_experts=0).num_params
        assert _hf(mt, **ds).moe_shared_expert_intermediate_size == (1 if mt == "deepseek_v3" else 2) * 128
    qwen = dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=8,
                num_key_value_heads=2, vocab_size=1000, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128)
    q3 = _hf("qwen3_moe", **qwen, shared_expert_intermediate_size=256)
    assert q3.moe_shared_expert_intermediate_size is None
    assert q3.num_params == _hf("qwen3_moe", **qwen).num_params
    # Qwen2-MoE's shared expert stays
    assert _hf("qwen2_moe", **qwen, shared_expert_intermediate_size=256).moe_shared_expert_intermediate_size == 256


def test_native_params_json_loads(tmp_path) -> None:
    """Mistral's native ``params.json`` (mistral_inference's TransformerArgs) and Meta's original Llama one were
    refused with the hint to add ``"model_type": "llama"``, which cannot work (their keys are not a config.json's).
    They load as the Llama-layout decoders they describe; sizes as the Hugging Face checkpoints count them."""
    mistral = dict(dim=4096, n_layers=32, head_dim=128, hidden_dim=14336, n_heads=32, n_kv_heads=8, norm_eps=1e-5,
                   vocab_size=32768, rope_theta=1e6)
    ckpt = tmp_path / "Mistral-7B-v0.3"
    ckpt.mkdir()
    (ckpt / "params.json").write_text(json.dumps(mistral))
    for ref in (ckpt, ckpt / "params.json"):
        m = load_model(ref)
        assert m.num_params == 7_248_023_552 and m.name == "Mistral-7B-v0.3" and m.num_kv_heads == 8
    mixtral = from_dict({**mistral, "vocab_size": 32000, "moe": {"num_experts": 8, "num_experts_per_tok": 2}})
    assert (mixtral.num_params, mixtral.num_active_params) == (46_702_792_704, 12_879_925_248)
    assert from_dict({**mistral, "sliding_window": 4096}).window_size == 4096
    llama3 = dict(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, vocab_size=128256, multiple_of=1024,
                  ffn_dim_multiplier=1.3, norm_eps=1e-5, rope_theta=500000.0, use_scaled_rope=True)
    assert from_dict(llama3).num_params == 8_030_261_248  # Meta-Llama-3-8B
    with pytest.raises(InvalidInputError, match="vocab_size"):
        from_dict({**llama3, "vocab_size": -1})
    with pytest.raises(InvalidInputError, match="hidden_dim"):
        from_dict({k: v for k, v in mistral.items() if k != "hidden_dim"})


@pytest.mark.parametrize("change, message", [
    ({"num_hidden_layers": "32"}, "field 'num_hidden_layers' must be a positive integer, got '32'"),
    ({"max_position_embeddings": 0}, "field 'max_position_embeddings' must be a positive integer, got 0"),
    ({"num_attention_heads": "32"}, "field 'num_attention_heads' must be a number, got '32'"),
    ({"num_key_value_heads": "8"}, "field 'num_key_value_heads' must be a positive integer, got '8'"),
    ({"intermediate_size": -1}, "field 'intermediate_size' must be a positive integer, got -1"),
    ({"vocab_size": True}, "field 'vocab_size' must be a positive integer, got True"),
])
def test_hf_config_type_errors_name_the_config_key(change, message) -> None:
    """Type errors of a config.json named the internal field (``"num_hidden_layers": "32"``: "num_layers must be
    a positive integer"; ``"max_position_embeddings": 0``: "seq_length must be ..."), and a string was accepted
    for some whole-number keys (``num_attention_heads``) and refused for others: now every string is refused,
    naming the key the user wrote; a whole float (32.0) is its integer."""
    base = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
            "vocab_size": 32000, "intermediate_size": 11008, "max_position_embeddings": 4096}
    with pytest.raises(InvalidInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        from_dict({**base, **change})
    assert from_dict({**base, "num_hidden_layers": 32.0}).num_layers == 32


@pytest.mark.parametrize("change", [{"num_hidden_layers": "48"}, {"max_position_embeddings": 0},
                                    {"num_attention_heads": "40"}])
def test_a_multimodal_config_s_errors_name_the_text_config_key(change) -> None:
    """A multimodal config's language model is read from its ``text_config``; a bad value there was named as a
    top-level key ('num_hidden_layers'), which the user's file does not have."""
    text = {"model_type": "llama4_text", "hidden_size": 5120, "num_attention_heads": 40, "num_hidden_layers": 48,
            "num_key_value_heads": 8, "vocab_size": 202048, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
            "num_local_experts": 16, "num_experts_per_tok": 1, "max_position_embeddings": 10485760, "head_dim": 128}
    key = next(iter(change))
    with pytest.raises(InvalidInputError, match=rf"field 'text_config\.{key}' must be"):
        from_dict({"model_type": "llama4", "text_config": {**text, **change}})
    assert from_dict({"model_type": "llama4", "text_config": text}).num_layers == 48


def test_llama4_chunked_attention_is_read_as_transformers_reads_it() -> None:
    """Llama 4's ``attention_chunk_size`` (Llama4TextConfig's default 8192) and its chunked layers were ignored: every
    layer was costed as global attention. transformers chunks the RoPE layers: ``layer_types``'
    ``chunked_attention`` entries where listed, else the 1s of ``no_rope_layers``, else (absent or empty) every layer
    but each ``no_rope_layer_interval``-th (4). A null chunk size is no chunking."""
    base = dict(hidden_size=512, intermediate_size=256, intermediate_size_mlp=1024, num_hidden_layers=8,
                num_attention_heads=8, num_key_value_heads=2, head_dim=64, vocab_size=1000, num_local_experts=4,
                max_position_embeddings=1 << 20)
    m = _hf("llama4_text", **base)
    assert (m.attention_chunk_size, m.chunk_layer_share) == (8192, 0.75)
    assert _hf("llama4_text", **base, no_rope_layers=[], attention_chunk_size=4096).attention_chunk_size == 4096
    assert _hf("llama4_text", **base, no_rope_layers=[1, 0] * 4).chunk_layer_share == 0.5
    assert _hf("llama4_text", **base, no_rope_layer_interval=2).chunk_layer_share == 0.5
    assert _hf("llama4_text", **base, layer_types=["chunked_attention"] * 7 + ["full_attention"]
               ).chunk_layer_share == 7 / 8
    assert _hf("llama4_text", **base, attention_chunk_size=None).attention_chunk_size is None
    for bad in ({"no_rope_layers": [1, 0]}, {"layer_types": ["sliding_attention"] * 8}):
        with pytest.raises(InvalidInputError, match=next(iter(bad))):
            _hf("llama4_text", **base, **bad)
    nested = from_dict({"model_type": "llama4", "text_config": {"model_type": "llama4_text", **base,
                                                                "attention_chunk_size": 8192, "no_rope_layers": []}})
    assert (nested.attention_chunk_size, nested.chunk_layer_share) == (8192, 0.75)
    # the cache bound and the attention pairs
    assert m.window_keys(32768) == pytest.approx(0.75 * 8192 + 0.25 * 32768) and m.window_keys(5000) == 5000
    assert m.attention_span(8192) == pytest.approx(8193 / 2)  # one chunk: global attention's
    assert m.attention_span(20000) == pytest.approx(
        (0.75 * (2 * 8192 * 8193 / 2 + 3616 * 3617 / 2) + 0.25 * 20000 * 20001 / 2) / 20000)
    # the fields round-trip through the Megatron-style keys; windows and chunks together are refused
    assert from_dict(m.to_dict()).attention_chunk_size == 8192
    with pytest.raises(InvalidInputError, match="not supported"):
        with_overrides(m, window_size=4096)


def test_reward_and_bare_models_have_no_language_model_head() -> None:
    """``architectures: ["LlamaForSequenceClassification"]`` (a reward model: a ``num_labels``-wide score layer on the
    last token) and ``["LlamaModel"]`` / ``["MistralModel"]`` (bare / embedding models: no head) were given a
    vocabulary-sized LM head, its parameters and its FLOPs (Llama-3-8B: 525M parameters, 2 h V FLOPs per token)."""
    base = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
            "num_key_value_heads": 8, "vocab_size": 128256, "intermediate_size": 14336,
            "max_position_embeddings": 8192}
    lm = from_dict({**base, "architectures": ["LlamaForCausalLM"]})
    assert lm.num_params == 8_030_261_248 and lm.output_head == "lm"
    reward = from_dict({**base, "architectures": ["LlamaForSequenceClassification"], "id2label": {"0": "LABEL_0"}})
    assert (reward.output_head, reward.num_labels) == ("classifier", 1)
    assert reward.num_params == lm.num_params - 128256 * 4096 + 4096  # Skywork-Reward-Llama-3.1-8B: 7.50e9
    assert from_dict({**base, "architectures": ["LlamaForSequenceClassification"]}).num_labels == 2
    assert from_dict({**base, "architectures": ["LlamaForSequenceClassification"], "num_labels": 3}).num_labels == 3
    for arch in ("LlamaModel", "MistralModel"):
        bare = from_dict({**base, "model_type": arch[:-5].lower(), "architectures": [arch]})
        assert bare.output_head == "none" and bare.param_counts()["output_layer"] == 0
    bare = from_dict({**base, "architectures": ["LlamaModel"]})
    assert bare.num_params == lm.num_params - 128256 * 4096
    s = 8192
    assert lm.forward_flops_per_token(s) - bare.forward_flops_per_token(s) == 2.0 * 4096 * 128256
    assert reward.forward_flops_per_token(s) - bare.forward_flops_per_token(s) == pytest.approx(2.0 * 4096 / s)
    # a vision-language model keeps its LM head; the fields round-trip
    assert from_dict({**base, "architectures": ["LlavaForConditionalGeneration"]}).output_head == "lm"
    assert from_dict(reward.to_dict()).num_params == reward.num_params
    with pytest.raises(InvalidInputError, match="output_head"):
        with_overrides(lm, output_head="score")


@pytest.mark.parametrize("arch", ["LlamaForTokenClassification", "BertForQuestionAnswering",
                                  "BertForMultipleChoice"])
def test_per_token_and_multiple_choice_heads_are_refused_not_costed_as_a_language_model(arch):
    """``*ForTokenClassification`` / ``*ForQuestionAnswering`` / ``*ForMultipleChoice`` were read as a language-model
    head (vocabulary logits on every token) without a word; they are refused, naming the heads that are modelled."""
    mt = "llama" if arch.startswith("Llama") else "bert"
    d = {"model_type": mt, "hidden_size": 1024, "num_attention_heads": 16, "num_hidden_layers": 4,
         "vocab_size": 32000, "intermediate_size": 4096, "architectures": [arch]}
    with pytest.raises(InvalidInputError, match=f"{arch} .*is not modelled.*ForSequenceClassification"):
        from_dict(d)
    assert from_dict({**d, "architectures": [arch.replace(arch[arch.index("For"):], "Model")]}).output_head == "none"
