"""One forward-layer op builder for training and inference: the same layer gives the same forward ops."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hybrid.hardware.catalog import default_catalog
from hybrid.workloads.llm.config import TrainingConfig
from hybrid.workloads.llm.costing import _layer_rows, resolve_target
from hybrid.workloads.llm.inference import PASS_OPS, make_setup, pass_ops
from hybrid.workloads.llm.layer_ops import forward_layer_ops, moe_routing
from hybrid.workloads.llm.model import TransformerConfig, load_model

SHAPE = ["op", "b", "m", "n", "k", "elements", "variant", "rows", "hidden", "size_bytes", "n_ranks"]


def _shapes(df: pd.DataFrame) -> list[tuple]:
    cols = [c for c in SHAPE if c in df.columns]
    out = pd.DataFrame({c: (df[c].astype(float).fillna(-1.0) if pd.api.types.is_numeric_dtype(df[c]) else df[c].fillna("").astype(str))
                        for c in cols})
    out["count"] = df["count"].to_numpy(dtype=float)
    out = out.groupby(cols)["count"].sum().reset_index()
    return sorted(tuple(r) for r in out.itertuples(index=False))


@pytest.mark.parametrize("name,tp", [("llama2-7b", 2), ("mixtral-8x7b", 2), ("gptj-6b", 1)])
def test_training_forward_rows_are_the_inference_prefill_rows(name, tp):
    """A training microbatch of one 2048-token sequence and an inference prefill of it run the same layer ops
    (linear GEMMs, norms, RoPE, activation, residual adds, MoE routing, TP all-reduce) with the same shapes."""
    model = load_model(name)
    cat = default_catalog()
    cfg = TrainingConfig(gpus=tp, global_batch=1, micro_batch=1, tp=tp, seq_length=2048, dtype="fp16", dropout=False)
    keys = pd.DataFrame({"tp": [tp], "cp": [1], "ep": [1], "mb": [1], "sp": [False]})
    tgt = resolve_target("A100", cat, "fp16")
    train = _layer_rows(model, cfg, keys, tgt)
    layer = train[train["role"].isin(["f", "tpf"]) & (train["op"] != "attention")].copy()
    s = make_setup(name, "A100", tp=tp)
    inf = pass_ops(s, np.array([2048.0]), np.array([1.0]), np.array([2048.0]), np.array([2048.0]))
    per_layer = inf[~inf["name"].isin([*PASS_OPS, "attention"])].copy()
    per_layer["count"] = per_layer["count"] / model.num_layers
    assert _shapes(layer) == _shapes(per_layer)


def test_builder_emits_each_op_once_with_its_backward_kind():
    ops: list[tuple] = []

    def emit(part, name, category, count, op, bwd, bwd_cols=None, **cols):
        ops.append((part, name, op, bwd))

    model = load_model("qwen3-235b-a22b")
    forward_layer_ops(model, emit, tokens=np.array([64.0]), tp=4, gemm_dtype="bf16", act_dtype="bf16", act_bytes=2,
                      attention=None, ep=np.array([2]), dense_count=0.0, moe_count=1.0)
    names = [o[1] for o in ops]
    assert len(names) == len(set(names))  # one row per op
    assert {"attn_qk_norm", "moe_router", "moe_permute", "ep_all_to_all", "tp_all_reduce"} <= set(names)
    kinds = {o[1]: o[3] for o in ops}
    assert kinds["attn_pre_proj"] == "linear" and kinds["mlp_up_proj"] == "experts" and kinds["add"] == "same"


def test_moe_routing_expected_experts_and_tokens():
    # a training batch hits every expert: E/ep local experts of T k ep / E tokens each
    local, per = moe_routing(np.array([4096.0]), 64, 2, np.array([4]))
    assert local[0] == 16 and per[0] == 4096 * 2 * 4 / 64
    # one decode token hits exactly top-k experts; 8 tokens on Mixtral hit E (1 - (6/8)^8) = 7.2 on expectation
    l1, p1 = moe_routing(np.array([1.0, 8.0]), 8, 2)
    assert l1[0] == 2.0 and l1[1] == pytest.approx(8 * (1 - 0.75**8)) and p1[0] == 1.0
    assert l1[1] * p1[1] == pytest.approx(16.0)


def test_moe_decode_reads_the_expected_experts_unrounded():
    """A memory-bound decode step reads the weights of every expert its tokens hit, so its expected time is that of
    the expected number of distinct experts, E (1 - (1 - k/E)^T): 3.5 for 2 Mixtral tokens (top-2 of 8), 5.47 for
    4. Rounded to whole experts it came out 3 (3.4999... rounded down) and 5: 14% and 9% of the experts' weight
    reads left out of TPOT at batch 2 and 4."""
    from hybrid.workloads.llm.inference import make_setup, predict_static

    for T, want in ((2.0, 3.5), (3.0, 8 * (1 - 0.75**3)), (4.0, 8 * (1 - 0.75**4))):
        local, per = moe_routing(np.array([T]), 8, 2)
        assert local[0] == pytest.approx(want) and local[0] * per[0] == pytest.approx(2 * T)
    s = make_setup("mixtral-8x7b", system="DGX-H100", tp=2)
    up = {}
    for b in (1, 2):
        ops = predict_static(s, b, 128, 4).ops
        row = ops[(ops["phase"] == "decode") & (ops["name"] == "mlp_up_proj")].iloc[0]
        assert float(row["b"]) == pytest.approx({1: 2.0, 2: 3.5}[b])
        up[b] = float(row["roofline_us"])
    assert up[2] / up[1] > 1.65  # weight-bound: 3.5 experts' weights against 2 (3 of them: at most 1.5)


def test_moe_grouped_gemm_rows_conserve_the_routed_tokens():
    """The routed experts' grouped GEMM (``b`` experts of ``m`` rows each) takes every one of the ``T k`` routed
    tokens: 100 tokens, top-8 of 128 experts hit all 128, 6.25 rows each (flooring to 6 costed 768 rows for 800)."""
    local, per = moe_routing(np.array([100.0, 8.0]), 128, 8)
    assert local[0] == pytest.approx(128 * (1 - (15 / 16) ** 100)) and np.allclose(local * per, [800.0, 64.0])
    model = TransformerConfig(num_layers=2, hidden_size=256, num_attention_heads=4, activation="swiglu",
                              normalization="RMSNorm", position_embedding_type="rope", add_bias_linear=False,
                              vocab_size=1024, num_experts=128, moe_router_topk=8, moe_ffn_hidden_size=128)
    rows: dict[str, dict] = {}

    def emit(part, name, category, count, op, bwd, bwd_cols=None, **cols):
        if category == "moe":
            rows[name] = cols

    for kw in ({"tp": 1, "ep": np.array([1])}, {"tp": 2, "ep": np.array([2]), "ep_within_tp": True}):
        rows.clear()
        forward_layer_ops(model, emit, tokens=np.array([100.0]), gemm_dtype="bf16", act_dtype="bf16", act_bytes=2,
                          attention=None, dense_count=0.0, moe_count=1.0, **kw)
        up, routed = rows["mlp_up_proj"], 800.0 / kw["ep"][0]  # inside TP: the busiest rank's half of the experts
        # (127.8 of the 128 experts hit on expectation: the busiest rank's 64 hit experts take a hair over half)
        assert up["b"][0] * up["m"][0] == pytest.approx(routed, rel=0.002)
        assert up["b"][0] * up["m"][0] == pytest.approx(rows["mlp_act"]["elements"][0] / 128, rel=1e-4)  # agrees


def test_sandwich_norms_add_two_norm_kernels_per_layer():
    from hybrid.workloads.llm.inference import make_setup, predict_static
    from hybrid.workloads.llm.model import TransformerConfig

    base = dict(num_layers=4, hidden_size=256, num_attention_heads=4, activation="geglu", normalization="RMSNorm",
                position_embedding_type="rope", add_bias_linear=False, vocab_size=1024)
    plain = predict_static(make_setup(TransformerConfig(**base), "A100"), 2, 64, 4).ops
    sandwich = predict_static(make_setup(TransformerConfig(**base, sandwich_norm=True), "A100"), 2, 64, 4).ops
    extra = sandwich[(sandwich["phase"] == "prefill") & (sandwich["name"] == "sandwich_norms")]
    assert len(extra) == 1 and extra["count"].iloc[0] == 4 * 2 and "sandwich_norms" not in set(plain["name"])


def test_expert_parallel_all_to_all_waits_for_the_busiest_rank():
    """With EP over all-to-all (attention DP serving, training), a small decode step hits a fraction of the experts
    and the busiest rank's share sets the step, as with EP inside TP: 1 token, top-8 of 256 experts over 8 ranks
    hits 57 experts, 7.1 per rank on average but 12 on the busiest (the mean, rounded up to 8, was costed).
    A training batch hits every expert: E / ep each, T k routed rows, unchanged."""
    from hybrid.workloads.llm.layer_ops import busiest_rank_experts

    model = load_model("deepseek-v3")
    rows: dict[str, dict] = {}

    def emit(part, name, category, count, op, bwd, bwd_cols=None, **cols):
        if category == "moe":
            rows[name] = cols

    for tokens, ep, experts in ((1.0, 8, 12.0), (4096.0, 8, 32.0), (4096.0, 64, 4.0)):
        rows.clear()
        forward_layer_ops(model, emit, tokens=np.array([tokens]), tp=1, gemm_dtype="bf16", act_dtype="bf16",
                          act_bytes=2, attention=None, ep=np.array([ep]), dense_count=0.0, moe_count=1.0)
        assert rows["mlp_up_proj"]["b"][0] == experts
        if tokens > 1:
            assert rows["mlp_act"]["elements"][0] == tokens * 8 * 2048
    assert busiest_rank_experts(np.array([57.0]), 256, 8)[0] == 12.0
