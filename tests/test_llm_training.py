"""LLM training: memory against Korthikanti et al. 2022 by hand, FLOPs against 6NT + attention, invariants across
mappings, the pipeline schedule on the engine, refusals and clear errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pandas.testing as pd_testing
import pytest

from hybrid.cli.main import main
from hybrid.cli.output import ROOFLINE_NOTE
from hybrid.errors import InvalidInputError
from hybrid.ops.families import FAMILIES, family_array
from hybrid.workloads.llm.config import TrainingConfig
from hybrid.workloads.llm.model import load_model
from hybrid.workloads.llm.schedule import schedule_order
from hybrid.workloads.llm.train import (
    mapping_config,
    memory_only,
    model_flops,
    predict_training,
    search,
    search_base,
)

GIB = 2**30


@pytest.fixture(scope="module")
def gpt175():
    return load_model("megatron-175b")


def _cfg(**kw):
    base = dict(gpus=64, global_batch=64, micro_batch=1, tp=8, pp=8, dtype="fp16", flash_attention=False)
    base.update(kw)
    return TrainingConfig(**base)


def test_activation_memory_matches_korthikanti_by_hand(gpt175):
    s, b, h, a, t, L = 2048, 1, 12288, 96, 8, 96
    # TP + SP + selective recompute: 34 s b h / t per layer; the first stage holds pp microbatches of L/pp layers
    mem, _ = memory_only(gpt175, _cfg(sp=True, recompute="selective"), "DGX-A100")
    expected = 34 * s * b * h / t * L + s * b * h / t * 8  # + embedding dropout masks of 8 microbatches
    assert mem.activations[0] == pytest.approx(expected, rel=1e-9)
    # TP without SP, no recompute: s b h (10 + 24/t + 5 a s / (h t)) per layer
    mem, _ = memory_only(gpt175, _cfg(sp=False, recompute="none"), "DGX-A100")
    expected = s * b * h * (10 + 24 / t + 5 * a * s / (h * t)) * L + s * b * h * 8
    assert mem.activations[0] == pytest.approx(expected, rel=1e-9)
    # TP + SP, no recompute: s b h (34 + 5 a s / h) / t per layer
    mem, _ = memory_only(gpt175, _cfg(sp=True, recompute="none"), "DGX-A100")
    expected = s * b * h * (34 + 5 * a * s / h) / t * L + s * b * h / t * 8
    assert mem.activations[0] == pytest.approx(expected, rel=1e-9)
    # full recomputation: 2 s b h per layer (input checkpoint) + one layer's activations during recompute
    mem, _ = memory_only(gpt175, _cfg(sp=False, recompute="full"), "DGX-A100")
    one_layer = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    assert mem.activations[0] == pytest.approx(2 * s * b * h * L + one_layer + s * b * h * 8, rel=1e-9)


def test_parallel_attention_layers_store_their_shared_input_once():
    """GPT-J (one norm) and GPT-NeoX / Falcon (two norms on the same input) feed both blocks from one tensor;
    autograd saves it once. GPT-J 6B per token and layer (no dropout, FlashAttention, h = q = kv = 4096, GELU
    f = 4h): norm input 2h + the shared QKV / MLP input 2h + Q, K 4h + V 2h + output-projection input 2h + MLP
    2f + 2f = 28h (30h when the shared tensors were counted per reader); with TP 4, no SP: 4h + 24h / 4; two
    norms (Falcon-180B's layout) add one block input: 2h + 4h + the split part."""
    from hybrid.workloads.llm.memory import activation_bytes_per_token

    gptj = load_model("gptj-6b")
    h = 4096
    cfg = TrainingConfig(gpus=8, global_batch=8)
    for t, expected in ((1, 28 * h), (4, 4 * h + 24 * h / 4)):
        stored, full = activation_bytes_per_token(gptj, cfg, np.array([float(t)]), np.array([False]),
                                                  np.array(["none"]), 2048)
        assert stored[0] == pytest.approx(expected, rel=1e-12) and full[0] == pytest.approx(expected, rel=1e-12)
    falcon = load_model("falcon-180b")
    h, q, kv, f = 14848, 14848, 512, 59392
    stored, _ = activation_bytes_per_token(falcon, cfg, np.array([8.0]), np.array([True]), np.array(["none"]), 2048)
    assert stored[0] == pytest.approx((2 * h + 4 * h + 2 * q + 2 * kv + 2 * kv + 2 * q + 4 * f) / 8, rel=1e-12)


def test_sandwich_norms_keep_the_block_outputs_they_normalise():
    """Gemma 2's norms after the attention block and after the MLP save their inputs, the output projection's and
    the MLP's outputs (2h each). Gemma-2-2B-shaped (h 2304, 8 heads and 4 KV heads of 256, GeGLU f 9216, no
    dropout, FlashAttention), per token and layer on one rank: 4 norm inputs 8h + QKV / MLP inputs 4h + Q 2q +
    K, V 4kv + output-projection input 2q + MLP 4f + 2f."""
    from hybrid.workloads.llm.memory import activation_bytes_per_token

    gemma = load_model({"model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216,
                        "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                        "vocab_size": 256000, "max_position_embeddings": 8192,
                        "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 4096})
    h, q, kv, f = 2304, 2048, 1024, 9216
    stored, _ = activation_bytes_per_token(gemma, TrainingConfig(gpus=1, global_batch=1), np.array([1.0]),
                                           np.array([False]), np.array(["none"]), 4096)
    assert stored[0] == pytest.approx(8 * h + 4 * h + 2 * q + 4 * kv + 2 * q + 6 * f, rel=1e-12)


def test_moe_layers_keep_the_shared_experts_activations():
    """Llama 4 Scout's MoE layers run one routed expert (top-1 of 16, SwiGLU 8192) and an always-active shared
    expert of the same width; both keep their gate/up outputs and activation output. Per token and layer on one
    rank (h 5120, q 5120, kv 1024, QK-norm, no dropout, FlashAttention): norms and QKV / MLP inputs 8h, Q and K
    2q + 2kv, V 2kv, output-projection input 2q, QK-norm inputs 2q + 2kv, routed expert 6 x 8192 + its dispatched
    copy 2h, shared expert 6 x 8192. The shared expert had been left out (its ops are costed)."""
    from hybrid.workloads.llm.memory import activation_bytes_per_token

    scout = load_model("llama4-scout")
    h, q, kv, f = 5120, 5120, 1024, 8192
    stored, _ = activation_bytes_per_token(scout, TrainingConfig(gpus=1, global_batch=1), np.array([1.0]),
                                           np.array([False]), np.array(["none"]), 8192)
    expected = 8 * h + (2 * q + 2 * kv) + 2 * kv + 2 * q + (2 * q + 2 * kv) + (6 * f + 2 * h) + 6 * f
    assert stored[0] == pytest.approx(expected, rel=1e-12)


def test_mla_attention_output_is_as_wide_as_its_values():
    """DeepSeek-V3 trains MLA unabsorbed: 128 heads of 192-wide queries and keys (128 + 64 rotary) and 128-wide
    values, so the attention output the output projection keeps is 128 x 128 = 16384 wide, not the queries' 24576.
    Per token and layer on one rank (no dropout, FlashAttention): norms and QKV / MLP inputs 8h, the query
    bottleneck and KV latent with its rotary key 2 (1536 + 576), Q 2 x 24576, K and V 2 (24576 + 16384), attention
    output 2 x 16384, and the MLP: 3 dense layers (SwiGLU 18432) and 58 MoE layers (8 routed experts of 2048, their
    dispatched copies, a shared expert of 2048) by their shares."""
    from hybrid.workloads.llm.memory import activation_bytes_per_token

    ds = load_model("deepseek-v3")
    h = 7168
    dense, moe = 6 * 18432, 8 * 6 * 2048 + 2 * 8 * h + 6 * 2048
    mlp = (3 * dense + 58 * moe) / 61
    expected = 8 * h + 2 * (1536 + 576) + 2 * 24576 + 2 * (24576 + 16384) + 2 * 16384 + mlp
    stored, _ = activation_bytes_per_token(ds, TrainingConfig(gpus=1, global_batch=1), np.array([1.0]),
                                           np.array([False]), np.array(["none"]), 4096)
    assert stored[0] == pytest.approx(expected, rel=1e-12)


def test_interleaving_raises_in_flight_activations_by_korthikanti_factor(gpt175):
    base = _cfg(sp=True, recompute="selective", global_batch=64)
    one, _ = memory_only(gpt175, base, "DGX-A100")
    inter, _ = memory_only(gpt175, base.with_(vp=3), "DGX-A100")
    layer_bytes = 34 * 2048 * 12288 / 8
    p, v = 8, 3
    # the embedding's dropout masks: Megatron's interleaved order has 2 p microbatches of the first chunk alive at
    # its peak (p under 1F1B), not the ((p - 1) 2 + (v - 1) p + 1) / v of an even spread over the chunks
    assert (inter.activations[0] - one.activations[0]) == pytest.approx(
        layer_bytes * 96 * (p - 1) / (p * v) + 2048 * 12288 / 8 * (2 * p - p), rel=1e-6)


def test_interleaved_first_chunk_microbatches_in_flight_follow_the_schedule(gpt175):
    """The first stage's peak of live first-chunk microbatches (each with the embedding's dropout mask) in
    Megatron's interleaved order is min(m, 2 pp), counted from :func:`schedule_order` itself."""
    for pp, vp, m in ((8, 3, 8), (8, 3, 64), (4, 2, 16)):
        live: set[tuple[int, int]] = set()
        peak = 0
        for kind, chunk, mb in schedule_order(pp, vp, m, 0):
            (live.add if kind == "F" else live.discard)((chunk, mb))
            peak = max(peak, sum(1 for c, _ in live if c == 0))
        cfg = _cfg(pp=pp, vp=vp, gpus=8 * pp, global_batch=m, sp=True, flash_attention=True)
        with_masks, _ = memory_only(gpt175, cfg, "DGX-A100")
        without, _ = memory_only(gpt175, cfg.with_(dropout=False), "DGX-A100")
        layers = 96 * (1 + (pp - 1) / (pp * vp)) if m > pp else 96  # all chunks' forwards first when m = pp
        masks = with_masks.activations[0] - without.activations[0] - 2 * 2048 * 12288 / 8 * layers
        assert masks == pytest.approx(peak * 2048 * 12288 / 8, rel=1e-9)


def test_model_states_18_bytes_and_distributed_optimizer():
    m = load_model("llama2-7b")
    cfg = TrainingConfig(gpus=8, global_batch=64, micro_batch=1, dropout=False)
    mem, _ = memory_only(m, cfg, "DGX-A100")
    P = m.num_params  # TP = PP = 1: the whole model, padded vocab (32000 is a multiple of 128)
    assert mem.weights[0] + mem.gradients[0] + mem.optimizer[0] == pytest.approx(18 * P, rel=1e-6)
    mem, _ = memory_only(m, cfg.with_(distributed_optimizer=True), "DGX-A100")
    assert mem.weights[0] + mem.gradients[0] + mem.optimizer[0] == pytest.approx((6 + 12 / 8) * P, rel=1e-6)
    mem, _ = memory_only(m, cfg.with_(fsdp=True), "DGX-A100")
    assert mem.weights[0] + mem.gradients[0] + mem.optimizer[0] == pytest.approx(16 * P / 8, rel=1e-6)


def test_tp_ranks_hold_norms_biases_routers_and_mla_down_projections_whole(gpt175):
    """Megatron splits the QKV / output / MLP / expert weights over TP but every rank holds the layer norms, the
    biases added after a row-parallel all-reduce (output projection, fc2), a MoE router and MLA's down-projections
    (``TELinear``, duplicated) whole. They were divided by TP like the rest: GPT-3 175B's first stage at tp 8 pp 8
    lost 12 x 5.25 h parameters (0.03%), DeepSeek-V3 at tp 8 ep 64 1.68 GiB of its 8.05 GiB of weights."""
    h, t = 12288, 8
    mem, _ = memory_only(gpt175, _cfg(sp=True), "DGX-A100")
    # 12 layers: 12 h^2 weights and QKV + fc1 biases 7 h split, 2 LayerNorms (4 h) + proj and fc2 biases (2 h) whole
    layer = (12 * h * h + 7 * h) / t + 6 * h
    first = 12 * layer + 51200 * h / t + 2048 * h  # + vocab-parallel word embedding, whole position table
    assert mem.weights[0] == pytest.approx(2 * first, rel=1e-12)
    ds = load_model("deepseek-v3")
    cfg = TrainingConfig(gpus=512, global_batch=512, tp=8, ep=64, sp=True, distributed_optimizer=True)
    from hybrid.workloads.llm.costing import mappings_frame, stage_params

    got = stage_params(ds, cfg, mappings_frame(cfg))["layers"][0]
    c = ds.param_counts()
    routed = 58 * 256 * 3 * 7168 * 2048
    # whole per layer: q_a 7168 x 1536, kv_a 7168 x (512 + 64), their RMSNorms 1536 + 512, two layer RMSNorms;
    # + the router (7168 x 256) in the 58 MoE layers
    whole_layer = 7168 * 1536 + 7168 * 576 + 1536 + 512 + 2 * 7168
    whole = 61 * whole_layer + 58 * 7168 * 256
    assert got == pytest.approx((c["layers_total"] - routed - whole) / 8 + whole + routed / (8 * 64), rel=1e-12)


def test_gradients_reduced_in_16_bit_keep_fp32_main_grads_in_the_optimizer():
    """Megatron-LM's distributed-optimizer table (docs/source/api-guide/dist_optimizer.md), bytes per parameter:
    float16 param with float16 grads 20 (4 + 16/d sharded), with fp32 grads 18 (6 + 12/d), fp32 16 (8 + 8/d). A
    16-bit gradient buffer (``grad_reduce_dtype``: Megatron's fp16 default, ``--grad-reduce-in-bf16``) holds 2
    bytes per parameter and the optimizer copies the reduced gradients into fp32 main grads (4, sharded with the
    distributed optimizer). The memory model counted 4-byte gradients whatever the reduce dtype: 18 and 6 + 12/d."""
    m = load_model("llama2-7b")
    P = m.num_params
    for dt in ("bf16", "fp16"):
        cfg = TrainingConfig(gpus=8, global_batch=64, micro_batch=1, dropout=False, dtype=dt, grad_reduce_dtype=dt)
        mem, _ = memory_only(m, cfg, "DGX-A100")
        assert mem.gradients[0] == pytest.approx(2 * P, rel=1e-6)
        assert mem.weights[0] + mem.gradients[0] + mem.optimizer[0] == pytest.approx(20 * P, rel=1e-6)
        mem, _ = memory_only(m, cfg.with_(distributed_optimizer=True), "DGX-A100")
        assert mem.weights[0] + mem.gradients[0] + mem.optimizer[0] == pytest.approx((4 + 16 / 8) * P, rel=1e-6)
    # fp32 gradients (the default) keep the 18 / 6 + 12/d of test_model_states_18_bytes_and_distributed_optimizer


def test_fp16_training_reduces_gradients_in_fp16_by_default():
    """Megatron-LM forces fp32 gradient accumulation and all-reduce for ``--bf16`` only ("bfloat16 requires gradient
    accumulation and all-reduce to be done in fp32", megatron/training/arguments.py); ``--fp16`` leaves the
    store-true ``--accumulate-allreduce-grads-in-fp32`` off, so its gradient buffer and DP all-reduce are fp16. The
    config defaulted every dtype to fp32 (its comment: "Megatron accumulates and reduces gradients in fp32 by
    default"): an fp16 job's DP all-reduce carried twice its bytes and its model states were 18 bytes per
    parameter instead of 20. bf16 and fp8 keep fp32, an explicit grad_reduce_dtype wins, and a config changed to
    another dtype takes that dtype's default."""
    m = load_model("llama2-7b")
    P = m.num_params
    fp16 = TrainingConfig(gpus=8, global_batch=64, micro_batch=1, dropout=False, dtype="fp16")
    assert fp16.grad_dtype == "fp16" and fp16.with_(dtype="bf16").grad_dtype == "fp32"
    assert TrainingConfig(gpus=8, global_batch=64, dtype="fp8").grad_dtype == "fp32"
    assert fp16.with_(grad_reduce_dtype="fp32").grad_dtype == "fp32"
    mem, _ = memory_only(m, fp16, "DGX-A100")
    assert mem.weights[0] + mem.gradients[0] + mem.optimizer[0] == pytest.approx(20 * P, rel=1e-6)
    for cfg, width in ((fp16, 2), (fp16.with_(grad_reduce_dtype="fp32"), 4), (fp16.with_(dtype="bf16"), 4)):
        rows = predict_training(m, cfg, "DGX-A100", engine=False).ops
        dp = rows[rows["role"] == "dp_ar"]
        assert float(dp["size_bytes"].sum()) == pytest.approx(width * P, rel=1e-6), cfg.dtype


def test_flops_match_megatron_formula_and_6nt(gpt175):
    cfg = _cfg()
    mf, hf = model_flops(gpt175, cfg.with_(recompute="full"))
    B, s, L, h, V = 64, 2048, 96, 12288, 51200
    assert mf == pytest.approx(72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h)), rel=2e-3)
    # Megatron's HFU with full recomputation: the layers run forward twice, the output layer once
    assert hf == pytest.approx(96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h)), rel=2e-3)
    n_tokens = B * s
    six_nt = 6 * gpt175.num_params * n_tokens
    attention = 3 * 4 * s * h * L * n_tokens
    assert mf == pytest.approx(six_nt + attention, rel=0.01)


def test_compute_is_conserved_across_tensor_parallel_splits():
    model = load_model("gpt3-1.3b")
    totals = []
    for tp in (1, 2, 4, 8):
        cfg = TrainingConfig(gpus=8, global_batch=16, micro_batch=2, tp=tp, flash_attention=True)
        pred = predict_training(model, cfg, "DGX-A100", engine=False)
        ops = pred.ops
        layer = ops[(ops["scope"] == "layer") & ops["role"].isin(["f", "b"])]
        flops = np.zeros(len(layer))
        fam = family_array(layer["op"])
        for name in ("gemm", "attention"):
            rows = fam == name
            flops[rows] = FAMILIES[name].flops(layer[rows])
        totals.append(float((flops * layer["count"].to_numpy()).sum()) * tp)
    assert max(totals) / min(totals) == pytest.approx(1.0, abs=1e-3)


def test_engine_pipeline_matches_closed_form_bubble(gpt175):
    cfg = _cfg(sp=True, recompute="selective", global_batch=32)
    pred = predict_training(gpt175, cfg, "DGX-A100")
    assert pred.iteration_s == pytest.approx(pred.closed_form_iteration_s, rel=0.03)
    assert pred.breakdown_s["pipeline_bubble"] == pytest.approx(pred.bubble_closed_form_s, rel=0.15)
    assert sum(pred.breakdown_s.values()) == pytest.approx(pred.iteration_s, rel=1e-6)
    inter = predict_training(gpt175, cfg.with_(vp=3), "DGX-A100")
    assert inter.breakdown_s["pipeline_bubble"] < pred.breakdown_s["pipeline_bubble"] / 2


def test_closed_form_dp_overlap_follows_the_interleaved_chunks():
    """With interleaving each chunk's gradients are reduced once its last backward is done, chunk ``vp - 1`` first,
    ``pp`` backwards apart on the first stage: the closed form (what the search ranks by) exposed the whole
    stage's reduction minus one backward and was 26% slower than the engine on GPT-3 175B at tp 8 pp 8 vp 4 with 8
    microbatches (2.047 against 1.622 s) where the DP all-reduce (0.79 s) rivals the pipeline."""
    from hybrid.workloads.llm.schedule import dp_reduce_exposed

    one = np.ones(1)
    # vp 1: the stage-wide bound, max(D - (b - b/nb), D/nb)
    assert dp_reduce_exposed(10 * one, 4 * one, 4 * one, one, 4 * one)[0] == pytest.approx(10 - 3)
    assert dp_reduce_exposed(2 * one, 4 * one, 4 * one, one, 4 * one)[0] == pytest.approx(0.5)
    # by hand, pp 4, vp 2, one bucket, chunk backward 1 s: chunk 1 ready 4 s before the end, chunk 0 at the end
    assert dp_reduce_exposed(4 * one, one, 4 * one, 2 * one, one)[0] == pytest.approx(2.0)  # 4 s -> 2 + 2
    assert dp_reduce_exposed(10 * one, one, 4 * one, 2 * one, one)[0] == pytest.approx(6.0)  # -4 + 5, then + 5
    model = load_model("gpt3-175b")
    for vp in (2, 4):
        cfg = TrainingConfig(gpus=512, tp=8, pp=8, vp=vp, global_batch=64, sp=True)
        pred = predict_training(model, cfg, "DGX-A100")
        assert pred.closed_form_iteration_s == pytest.approx(pred.iteration_s, rel=0.01)


def test_closed_form_interleaved_bubble_counts_every_chunk_boundary_send():
    """The first microbatch crosses pp x vp - 1 chunk boundaries to the last chunk and its gradients as many back,
    each send on the critical path: the closed form counted 2 (pp - 1) sends and was 3.4% faster than the engine
    on GPT-3 175B at tp 2 pp 16 cp 2 vp 6 (9.025 against 9.346 s), a constant 2 pp (vp - 1) sends short."""
    from hybrid.workloads.llm.costing import cost_mappings, mappings_frame
    from hybrid.workloads.llm.schedule import closed_form, stage_times
    from hybrid.workloads.llm.train import _prepare

    model = load_model("gpt3-175b")
    cfg = TrainingConfig(gpus=256, tp=2, pp=16, cp=2, vp=6, micro_batch=4, sp=True, global_batch=256)
    cm, tgt, _ = _prepare(model, cfg, "DGX-A100", None, None)
    costs = cost_mappings(model, cfg, mappings_frame(cfg), tgt, cm)
    st = stage_times(model, cfg, costs)
    cf = closed_form(st, costs.mappings, cfg)
    sends = float(cf["bubble_s"][0] - cf["bubble_closed_form_s"][0]) / float(st.p2p[0])
    assert sends == pytest.approx(2 * (16 * 6 - 1))
    pred = predict_training(model, cfg, "DGX-A100")
    assert pred.closed_form_iteration_s == pytest.approx(pred.iteration_s, rel=0.005)


def test_engine_extends_many_microbatches_exactly():
    """Past a count the engine simulates two shorter pipelines and extends the steady state: the graph of every
    microbatch took minutes and gigabytes for GPT-3 175B at pp 2 with global batch 8M (2M microbatches); the
    extension equals the full graph (1F1B and interleaved) and the 8M job answers in seconds."""
    import time

    from hybrid.workloads.llm.costing import cost_mappings, mappings_frame
    from hybrid.workloads.llm.schedule import simulate_mapping, stage_times
    from hybrid.workloads.llm.train import _prepare

    model = load_model("gpt3-175b")
    for cfg in (TrainingConfig(gpus=64, tp=8, pp=2, global_batch=4 * 300, sp=True),
                TrainingConfig(gpus=128, tp=8, pp=4, vp=3, global_batch=4 * 4 * 101, sp=True)):
        cm, tgt, _ = _prepare(model, cfg, "DGX-A100", None, None)
        costs = cost_mappings(model, cfg, mappings_frame(cfg), tgt, cm)
        st = stage_times(model, cfg, costs)
        _, full = simulate_mapping(st, 0, costs.mappings, cfg, max_microbatches=10**9)
        _, fast = simulate_mapping(st, 0, costs.mappings, cfg, max_microbatches=40)
        assert full["simulated_microbatches"] == cfg.num_microbatches and fast["simulated_microbatches"] <= 40
        assert fast["iteration_s"] == pytest.approx(full["iteration_s"], rel=1e-9)
        assert fast["pipeline_s"] == pytest.approx(full["pipeline_s"], rel=1e-9)
    cfg = TrainingConfig(gpus=64, tp=8, pp=2, global_batch=8_000_000)
    t0 = time.perf_counter()
    pred = predict_training(model, cfg, "DGX-A100")
    assert time.perf_counter() - t0 < 60
    assert pred.simulated_microbatches is not None and pred.simulated_microbatches < 2_000_000
    assert pred.iteration_s == pytest.approx(pred.closed_form_iteration_s, rel=1e-6)
    assert pred.iteration_s == pytest.approx(1_071_293.2, rel=1e-6)


@pytest.mark.parametrize(("pp", "vp", "m"), [(4, 1, 8), (4, 2, 8), (8, 3, 16), (2, 4, 2)])
def test_schedule_order_runs_every_chunk_once(pp, vp, m):
    for r in range(pp):
        order = schedule_order(pp, vp, m, r)
        assert sorted(order) == sorted([(k, c, i) for k in "FB" for c in range(vp) for i in range(m)])
        warm = next(i for i, o in enumerate(order) if o[0] == "B")
        w = min((pp - r - 1) * 2 + (vp - 1) * pp, m * vp) if vp > 1 else min(pp - r - 1, m)
        assert warm == w + (1 if w < m * vp else 0)  # warm-up forwards, then one more before the first backward


def test_mapping_that_does_not_fit_is_refused_with_reason(capsys):
    model = load_model("megatron-1t")
    cfg = TrainingConfig(gpus=8, global_batch=8, tp=8)
    pred = predict_training(model, cfg, "DGX-A100", engine=False)
    assert not pred.fits and "needs" in pred.fit_reason and "optimizer" in pred.fit_reason
    rc = main(["llm", "train", "megatron-1t", "--system", "DGX-A100", "--gpus", "8", "--tp", "8",
               "--global-batch", "8"])
    assert rc == 2
    assert "does not fit" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "64", "--tp", "5", "--global-batch", "64"], "divisible by tp x pp x cp"),
        (["--gpus", "80", "--tp", "5", "--global-batch", "80"], "divisible by tensor parallel"),
        (["--gpus", "40", "--tp", "8", "--pp", "5", "--global-batch", "40"], "divisible by pp x vp"),
        (["--gpus", "64", "--tp", "8", "--pp", "4", "--vp", "5", "--global-batch", "64"], "divisible by pp x vp"),
        (["--gpus", "64", "--tp", "8", "--global-batch", "60"], "global batch (60) must be divisible"),
        (["--gpus", "64", "--tp", "8", "--ep", "2", "--global-batch", "64"], "mixture-of-experts"),
    ],
)
def test_bad_configs_give_clear_errors(args, message, capsys):
    rc = main(["llm", "train", "gpt3-175b", "--system", "DGX-A100", *args])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert message in err and err.count("\n") == 1


def test_cli_json_fields(capsys, tmp_path):
    trace = tmp_path / "t.json"
    rc = main(["llm", "train", "gpt3-1.3b", "--system", "DGX-A100", "--gpus", "16", "--tp", "2", "--pp", "2",
               "--global-batch", "64", "--micro-batch", "2", "--json", "--trace", str(trace)])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for k in ("iteration_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "memory_gib_per_rank", "fits",
              "breakdown_s"):
        assert k in out
    assert 0 < out["mfu"] < 1 and out["fits"] is True
    assert out["tokens_per_s"] == pytest.approx(64 * 2048 / out["iteration_s"])
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["pid"] for e in events if e["ph"] == "X"} == {0, 1}


def test_cli_prices_a_training_run(capsys):
    from hybrid.workloads.llm.pricing import parse_token_count

    assert [parse_token_count(t) for t in ("300B", "1.5t", "2e12", "500M", "7")] == [3e11, 1.5e12, 2e12, 5e8, 7.0]
    args = ["llm", "train", "gpt3-1.3b", "--system", "DGX-A100", "--gpus", "16", "--tp", "2", "--global-batch", "64",
            "--json", "--train-tokens", "300B"]
    rc = main([*args, "--gpu-hour-price", "DGX-A100=2"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["gpu_hour_price"] == 2.0
    assert out["cost_per_1m_tokens"] == pytest.approx(2.0 / (out["tokens_per_s_per_gpu"] * 3600) * 1e6)
    run = out["run"]
    assert run["days"] == pytest.approx(3e11 / out["tokens_per_s"] / 86400)
    assert run["gpu_hours"] == pytest.approx(run["days"] * 24 * 16) and run["cost"] == pytest.approx(2 * run["gpu_hours"])
    # no price for this system or GPU: days and GPU-hours, no cost; bad counts and prices are refused
    rc = main([*args, "--gpu-hour-price", "H100=3"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["cost_per_1m_tokens"] is None and "cost" not in out["run"] and out["run"]["gpu_hours"] > 0
    # a suffix after an exponent read 1.5e12T as 1.5e24 tokens (5.6e11 days for this job): refused, as is T twice
    for bad in ("1.5e12T", "1.5e12 T", "2e3B", "1_000B", "-5B", "300BT"):
        with pytest.raises(InvalidInputError, match="token count"):
            parse_token_count(bad)
    assert parse_token_count(" 1.5 T ") == 1.5e12 and parse_token_count(".5T") == 5e11
    for bad, msg in ((["--train-tokens", "0"], "at least 1"), (["--train-tokens", "lots"], "token count"),
                     (["--train-tokens", "1.5e12T"], "plain decimal"),
                     (["--gpu-hour-price", "DGX-A100=free"], "not a number")):
        rc = main([*args[:-2], *bad])
        err = capsys.readouterr().err
        assert rc == 2 and msg in err


def test_search_compare_ranks_hardware_by_speed_then_by_cost(capsys):
    args = ["llm", "search", "gpt3-1.3b", "--system", "DGX-A100", "--gpus", "16", "--global-batch", "64", "--top", "2",
            "--compare", "DGX-H100,DGX-A100,DGX-1", "--train-tokens", "100B", "--json"]
    rc = main(args)
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["compare_ranked_by"] == "tokens_per_s_per_gpu"
    rows = {r["system"]: r for r in out["compare"]}
    assert [r["system"] for r in out["compare"]] == ["DGX-H100", "DGX-A100", "DGX-1"]
    # the compared DGX-A100 is the main search's fastest mapping
    assert rows["DGX-A100"]["tokens_per_s_per_gpu"] == pytest.approx(out["mappings"][0]["tokens_per_s_per_gpu"])
    run = rows["DGX-H100"]["run"]
    assert run["days"] == pytest.approx(1e11 / (rows["DGX-H100"]["tokens_per_s_per_gpu"] * 16) / 86400)
    assert "cost" not in run and out["run"]["gpu_hours"] == pytest.approx(rows["DGX-A100"]["run"]["gpu_hours"])
    # priced: the V100 node is the slowest, but at a small enough price the cheapest per token
    rc = main([*args, "--gpu-hour-price", "DGX-H100=3,DGX-A100=1.5,DGX-1=0.01"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["compare_ranked_by"] == "cost_per_1m_tokens" and out["gpu_hour_price"] == 1.5
    costs = [r["cost_per_1m_tokens"] for r in out["compare"]]
    assert costs == sorted(costs) and out["compare"][0]["system"] == "DGX-1"
    for r in out["compare"]:
        assert r["cost_per_1m_tokens"] == pytest.approx(r["gpu_hour_price"] / (r["tokens_per_s_per_gpu"] * 3600) * 1e6)
        assert r["run"]["cost"] == pytest.approx(r["run"]["gpu_hours"] * r["gpu_hour_price"])
    assert all(m["cost_per_1m_tokens"] > 0 for m in out["mappings"])
    # this run's system ranks too when --compare leaves it out
    rc = main(["llm", "search", "gpt3-1.3b", "--system", "DGX-A100", "--gpus", "16", "--global-batch", "64",
               "--top", "2", "--compare", "DGX-H100", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and [r["system"] for r in out["compare"]] == ["DGX-H100", "DGX-A100"]
    assert out["compare"][1]["note"] == "this run"
    # an unknown compared system is refused before any search
    rc = main(["llm", "search", "gpt3-1.3b", "--system", "DGX-A100", "--gpus", "16", "--global-batch", "64",
               "--compare", "DGX-A100,NOPE"])
    assert rc == 2 and "NOPE" in capsys.readouterr().err


def test_search_returns_fitting_mappings_fastest_first():
    model = load_model("gpt3-2.7b")
    base = search_base(16, 64)
    res = search(model, base, "DGX-A100", top=5, engine_top=2)
    assert len(res) == 5 and res["fits"].all()
    assert (np.diff(res["iteration_s"].to_numpy()) >= 0).all()
    assert res["engine_s"].iloc[0] == pytest.approx(res["iteration_s"].iloc[0], rel=0.1)
    # the chosen mapping is no slower than a plain data-parallel one that fits
    plain = predict_training(model, base.with_(tp=1, distributed_optimizer=True), "DGX-A100", engine=False)
    assert res["iteration_s"].iloc[0] <= plain.closed_form_iteration_s * 1.0001


def test_search_without_a_mapping_says_which_batch_split_is_missing():
    """7 GPUs, llama3-8b, global batch 64: TP, PP and CP can only be 1 (7 divides neither the 32 heads nor the 32
    layers), so DP is 7, which no micro-batch split of 64 allows; the error said only "no valid mapping"."""
    with pytest.raises(InvalidInputError, match=r"data-parallel degrees \[7\].*TP from \[1\].*PP from \[1\]"):
        search(load_model("llama3-8b"), search_base(7, 64), "DGX-H100", top=1)
    assert len(search(load_model("llama3-8b"), search_base(7, 56), "DGX-H100", top=1)) == 1  # 56 = 8 x 7


def test_gqa_moe_and_cp_ep_run():
    mx = load_model("mixtral-8x7b")
    cfg = TrainingConfig(gpus=64, global_batch=64, tp=2, pp=4, ep=4, cp=2, sp=True, recompute="selective",
                         distributed_optimizer=True, dropout=False, seq_length=4096)
    pred = predict_training(mx, cfg, "DGX-H100")
    assert pred.breakdown_s["ep_comm"] > 0 and pred.iteration_s > 0
    with pytest.raises(InvalidInputError, match="experts"):
        predict_training(mx, cfg.with_(ep=16, gpus=64, tp=1, cp=1), "DGX-H100")


def test_fp32_training_keeps_no_master_copy():
    m = load_model("gpt2-large")
    cfg = TrainingConfig(gpus=1, global_batch=4, micro_batch=4, dtype="fp32", make_vocab_size_divisible_by=1)
    mem, _ = memory_only(m, cfg, "A100-PCIE-80GB")
    assert mem.weights[0] + mem.gradients[0] + mem.optimizer[0] == pytest.approx(16 * m.num_params, rel=1e-6)


def test_fp32_activations_are_4_bytes_but_dropout_masks_stay_1_byte():
    """fp32 training doubles Korthikanti's 2-byte activations, not its 1-byte dropout masks (which were doubled
    too). GPT-2 large (h 1280, 20 heads, GELU f = 4h, dropout, unfused attention), one GPU, per token and layer:
    twice the 2-byte parts (norm and block inputs 8h, Q K V and output-projection input 8h, MLP 16h) + the two 1-byte
    masks 2h, and the scores' softmax and dropout outputs twice 4 a s + their mask a s; full recomputation's
    checkpoint twice 2h."""
    from hybrid.workloads.llm.memory import activation_bytes_per_token

    m = load_model("gpt2-large")
    h, a, s = 1280, 20, 1024
    cfg = TrainingConfig(gpus=1, global_batch=4, dtype="fp32", flash_attention=False)
    one = (np.array([1.0]), np.array([False]))
    stored, full = activation_bytes_per_token(m, cfg, *one, np.array(["none"]), s)
    expected = 2 * (8 * h + 8 * h + 16 * h) + 2 * h + (2 * 4 + 1) * a * s
    assert stored[0] == pytest.approx(expected, rel=1e-12) and full[0] == pytest.approx(expected, rel=1e-12)
    ckpt, _ = activation_bytes_per_token(m, cfg, *one, np.array(["full"]), s)
    assert ckpt[0] == pytest.approx(2 * 2 * h, rel=1e-12)
    bf16, _ = activation_bytes_per_token(m, cfg.with_(dtype="bf16"), *one, np.array(["none"]), s)
    assert bf16[0] == pytest.approx(34 * h + 5 * a * s, rel=1e-12)  # Korthikanti's 16-bit count
    mem32, _ = memory_only(m, cfg.with_(global_batch=1), "A100-PCIE-80GB")
    mem16, _ = memory_only(m, cfg.with_(global_batch=1, dtype="bf16"), "A100-PCIE-80GB")
    masks = s * (2 * h + a * s) * 36 + s * h  # every layer's masks and the embedding's: 1 byte in both
    assert mem32.activations[0] == pytest.approx(2 * mem16.activations[0] - masks, rel=1e-12)


def test_output_layer_inputs_are_whole_on_every_tp_rank_without_sp():
    """The last stage keeps the final norm's input and the output layer's input (2 + 2 bytes per element) and the
    fp32 logits of its vocabulary slice: Korthikanti's 4 s b h / t (1 + v / h) assumes SP; without it the two
    inputs are whole on every TP rank (4 s b h). Llama-3-8B, tp 8, one GPU node, seq 8192: 4 s (h + V / 8) without
    SP, 4 s (h + V) / 8 with it; fp32 training doubles the inputs, not the fp32 logits."""
    m = load_model("llama3-8b")
    s, h, V = 8192, 4096, 129024  # 128256 padded to a multiple of 128 x 8
    cfg = TrainingConfig(gpus=8, global_batch=8, tp=8)
    for sp, expected in ((False, 4 * s * (h + V / 8)), (True, 4 * s * (h + V) / 8)):
        mem, _ = memory_only(m, cfg.with_(sp=sp), "DGX-H100")
        assert mem.logits[0] == pytest.approx(expected, rel=1e-12), sp
    mem, _ = memory_only(m, cfg.with_(dtype="fp32"), "DGX-H100")
    assert mem.logits[0] == pytest.approx(s * (8 * h + 4 * V / 8), rel=1e-12)


def test_hidden_dropout_without_attention_dropout_keeps_no_score_mask():
    """OPT's config drops out hidden states (dropout 0.1) but not attention probabilities (attention_dropout 0.0:
    PyTorch's dropout at p = 0 returns its input). Unfused attention then keeps the softmax output only, 2 a s
    bytes per token and layer (not 5 a s), and runs no dropout kernel over the s x s scores; the hidden dropout
    masks (2h per layer) stay. ``--dropout`` on the job turns both on."""
    from hybrid.workloads.llm.memory import activation_bytes_per_token

    opt = load_model({"model_type": "opt", "hidden_size": 2048, "num_hidden_layers": 24, "ffn_dim": 8192,
                      "num_attention_heads": 32, "vocab_size": 50272, "max_position_embeddings": 2048,
                      "dropout": 0.1, "attention_dropout": 0.0, "activation_function": "relu"})
    assert opt.dropout and opt.attention_dropout is False
    h, a, s = 2048, 32, 2048
    cfg = TrainingConfig(gpus=1, global_batch=1, flash_attention=False)
    one = (np.array([1.0]), np.array([False]), np.array(["none"]), s)
    stored, _ = activation_bytes_per_token(opt, cfg, *one)
    assert stored[0] == pytest.approx(34 * h + 2 * a * s, rel=1e-12)  # the masks 2h of the 34h stay
    forced, _ = activation_bytes_per_token(opt, cfg.with_(dropout=True), *one)
    assert forced[0] == pytest.approx(34 * h + 5 * a * s, rel=1e-12)
    score_dropout = {}
    for c in (cfg, cfg.with_(dropout=True)):
        ops = predict_training(opt, c, "A100-PCIE-80GB", engine=False).ops
        drop = ops[(ops["op"] == "elementwise") & (ops["variant"] == "dropout")]
        score_dropout[c.dropout] = int((drop["elements"] == a * s * s).sum())
        assert (drop["elements"] == s * h).any()  # the hidden dropouts run either way
    assert score_dropout == {None: 0, True: 3}  # forward, its selective-recompute copy (role s), backward
    assert load_model({"model_type": "opt", "hidden_size": 64, "num_hidden_layers": 2, "ffn_dim": 256,
                       "num_attention_heads": 4, "vocab_size": 100}).attention_dropout is False  # OPTConfig default
    gpt2 = load_model("gpt2-large")
    assert cfg.uses_attention_dropout(gpt2)  # attn_pdrop 0.1: unchanged


def test_cli_models_memory_plot_and_search(capsys, tmp_path):
    assert main(["llm", "models", "--json"]) == 0
    names = {r["name"] for r in json.loads(capsys.readouterr().out)}
    assert {"gpt3-175b", "llama3-8b", "mixtral-8x7b", "bert-large"} <= names
    plot = tmp_path / "mem.png"
    assert main(["llm", "memory", "megatron-175b", "--system", "DGX-A100", "--gpus", "64", "--tp", "8", "--pp", "8",
                 "--global-batch", "64", "--recompute", "full", "--plot", str(plot), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is True and plot.stat().st_size > 1000
    assert main(["llm", "search", "gpt3-1.3b", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "32",
                 "--top", "3", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert len(res["mappings"]) == 3 and res["fitting"] >= 3


def test_pipeline_and_data_parallel_conserve_compute(gpt175):
    """Busiest stage's compute per microbatch x stages = the whole model's compute, up to the embedding/output
    layer imbalance (0.35 of a layer for GPT-3 on the last stage); DP only replicates it."""
    whole = {}
    for pp in (2, 4, 8):
        cfg = _cfg(gpus=8 * pp, global_batch=8 * pp, pp=pp, sp=True, recompute="selective")
        pred = predict_training(gpt175, cfg, "DGX-A100", engine=False)
        whole[pp] = pred.breakdown_s["compute"] / cfg.num_microbatches * pp
    assert max(whole.values()) / min(whole.values()) == pytest.approx(1.0, abs=0.05)
    assert whole[8] > whole[2]  # more stages carry the output layer's imbalance more often
    one = predict_training(gpt175, _cfg(gpus=64, global_batch=64), "DGX-A100", engine=False)
    two = predict_training(gpt175, _cfg(gpus=128, global_batch=128), "DGX-A100", engine=False)
    assert two.breakdown_s["compute"] == pytest.approx(one.breakdown_s["compute"], rel=1e-9)
    assert two.breakdown_s["dp_comm"] > 0 == one.breakdown_s["dp_comm"]
    # on the engine too, absent parts are exactly zero (not the 1e-16 s residue of differences of times)
    tp_only = predict_training(load_model("llama3-8b"), TrainingConfig(gpus=8, tp=8, global_batch=8, micro_batch=1,
                                                                       seq_length=2048), "DGX-H100")
    assert tp_only.breakdown_s["pipeline_bubble"] == tp_only.breakdown_s["dp_comm"] == 0.0


@pytest.fixture(scope="module")
def calibrated_store(tmp_path_factory, shared_datasets):
    """A predictor calibrated with 80% intervals on real NeuSight kernels (GEMM, layernorm, softmax) and real
    nccl-tests collectives (Polaris: without them the collectives of a multi-GPU mapping have no interval, nor
    has its iteration), registered in a temporary MLflow store."""
    import warnings

    from test_tracking_support import neusight_table

    from hybrid.data.importers import import_paths
    from hybrid.tracking.calibrate import CalibrationConfig, calibrate

    root = shared_datasets / "nccl-tests" / "argonne-lcf_alcf-nccl-tests" / "results_polaris" / "nccl_2_18"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        polaris = import_paths("nccl-tests", root)
    table = pd.concat([neusight_table(shared_datasets, max_rows=250), polaris], ignore_index=True)
    uri = f"sqlite:///{tmp_path_factory.mktemp('llm-store') / 'mlflow.db'}"
    result = calibrate(table, CalibrationConfig(name="llm-kern", lodo=False), tracking_uri=uri)
    assert result.predictor.intervals is not None and result.predictor.intervals.bands
    return uri, result.predictor


class _LowEnd:
    """A cost model answering every op at the low end of ``pred``'s interval of kernel times (the training builder's
    default, ``TrainingConfig.kernel_times``), and no interval of its own."""

    def __init__(self, pred):
        from hybrid.engine.costs import KernelTimeModel

        self.pred, self.catalog = KernelTimeModel(pred), pred.catalog

    def predict(self, table):
        out = self.pred.predict(table)
        return out.assign(time_us=out["time_us_low"]).drop(columns=["time_us_low", "time_us_high"])


def test_search_with_intervals_flags_mappings_overlapping_the_fastest(calibrated_store):
    _, pred = calibrated_store
    model = load_model("gpt3-2.7b")
    base = search_base(16, 64)
    plain = search(model, base, "DGX-A100", top=8, engine_top=1)
    assert "iteration_s_low" not in plain.columns and "overlaps_fastest" not in plain.columns  # roofline: none
    res = search(model, base, "DGX-A100", pred, top=8, engine_top=1)
    lo, mid, hi = (res[c].to_numpy() for c in ("iteration_s_low", "iteration_s", "iteration_s_high"))
    assert (lo <= mid).all() and (mid <= hi).all() and (lo < hi).all()
    assert (np.diff(mid) >= 0).all()
    flags = res["overlaps_fastest"].to_numpy()
    assert not flags[0]
    np.testing.assert_array_equal(flags[1:], (lo[1:] <= hi[0]) & (hi[1:] >= lo[0]))
    assert res.attrs["overlapping_fastest"] == int(flags.sum())
    # the low end is the closed form re-run with every op at its low end: the same as a model answering the lows
    low = search(model, base, "DGX-A100", _LowEnd(pred), top=10_000, engine_top=0)
    keys = ["tp", "pp", "dp", "cp", "ep", "vp", "mb", "sp", "recompute", "distopt", "fsdp"]
    both = res.merge(low[keys + ["iteration_s"]].rename(columns={"iteration_s": "at_low"}), on=keys)
    assert len(both) == len(res)
    assert (both["iteration_s_low"] <= both["at_low"] * (1 + 1e-9)).all()
    unclipped = both["at_low"] <= both["iteration_s"]
    assert unclipped.any()
    np.testing.assert_allclose(both.loc[unclipped, "iteration_s_low"], both.loc[unclipped, "at_low"], rtol=1e-9)


def test_cli_search_with_a_calibrated_model_shows_intervals(calibrated_store, capsys):
    uri, _ = calibrated_store
    args = ["llm", "search", "gpt3-1.3b", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "32", "--top", "5",
            "--model", "llm-kern", "--tracking-uri", uri]
    assert main([*args, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    rows = res["mappings"]
    assert res["cost_model"].startswith("models:/llm-kern/") and len(rows) == 5
    assert all(r["iteration_s_low"] <= r["iteration_s"] <= r["iteration_s_high"] for r in rows)
    assert rows[0]["overlaps_fastest"] is False
    assert res["overlapping_fastest"] == sum(r["overlaps_fastest"] for r in rows)
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "iter_low" in text and "overlaps the fastest pick" in text
    assert main([*args[:-5], "1", *args[-4:]]) == 0  # --top 1: no "(0 of 0)" overlap legend
    text = capsys.readouterr().out
    assert "iter_low" in text and "overlaps the fastest pick" not in text


# ------------------------------------------------------------------ CP, EP and FSDP in the search space
_KEYS = ["tp", "pp", "dp", "cp", "ep", "vp", "mb", "sp", "recompute", "distopt", "fsdp"]


def _space(model, gpus, batch, system="DGX-A100", **kw):
    from hybrid.hardware.catalog import default_catalog
    from hybrid.workloads.llm.costing import resolve_target
    from hybrid.workloads.llm.train import candidate_mappings

    base = search_base(gpus, batch, **kw.pop("base", {}))
    return candidate_mappings(model, base, resolve_target(system, default_catalog(), base.dtype), **kw)


def test_search_space_adds_cp_ep_fsdp_and_keeps_the_old_space():
    dense, moe = load_model("gpt3-2.7b"), load_model("mixtral-8x7b")
    full = _space(dense, 16, 64)
    old = _space(dense, 16, 64, max_cp=1, fsdp=False, expert_parallel=False)
    assert full["cp"].max() > 1 and full["fsdp"].any() and (full["ep"] == 1).all()  # dense: no EP
    assert not (full["fsdp"] & full["distopt"]).any()
    sharded = full["fsdp"] | full["distopt"]
    assert (full.loc[sharded, "dp"] * full.loc[sharded, "cp"] > 1).all()
    assert (full["tp"] * full["pp"] * full["cp"] * full["dp"] == 16).all()
    assert (2048 % (2 * full.loc[full["cp"] > 1, "cp"]) == 0).all() and full["cp"].max() <= 8
    sub = full[(full["cp"] == 1) & (full["ep"] == 1) & ~full["fsdp"]].reset_index(drop=True)
    pd_testing.assert_frame_equal(sub, old)  # the old space, in the old order
    assert _space(dense, 16, 64, base={"flash_attention": False})["cp"].max() == 1  # ring attention needs flash
    ex = _space(moe, 16, 64)
    assert ex["ep"].max() > 1
    assert (moe.num_experts % ex["ep"] == 0).all() and ((ex["dp"] * ex["cp"]) % ex["ep"] == 0).all()
    assert (_space(moe, 16, 64, expert_parallel=False)["ep"] == 1).all()


def test_search_shards_optimizer_states_over_context_parallel_ranks_without_dp():
    # Megatron-Core's distributed optimizer (and FSDP) shard over the DP x CP group: dp 1 with cp 2 still halves
    # the 12 bytes of fp32 master + Adam moments; the search had left these mappings out (it asked for dp > 1)
    model = load_model("mpt-30b")
    space = _space(model, 16, 1)
    assert (space["dp"] == 1).all()  # a global batch of 1: no data parallelism at all
    cp_sharded = space[(space["cp"] > 1) & (space["distopt"] | space["fsdp"])]
    assert cp_sharded["distopt"].any() and cp_sharded["fsdp"].any()
    base = search_base(16, 1, seq_length=32768, dropout=False)
    res = search(model, base, "DGX-H100", top=100_000, engine_top=0, max_cp=2, fsdp=False)
    row = res[(res["tp"] == 8) & (res["cp"] == 2) & res["distopt"] & (res["mb"] == 1)].iloc[0]
    cfg = mapping_config(base, row)
    mem, _ = memory_only(model, cfg, "DGX-H100")
    plain, _ = memory_only(model, cfg.with_(distributed_optimizer=False), "DGX-H100")
    assert row["memory_gib"] == pytest.approx(mem.total[0] / GIB, rel=1e-9)
    # 12 B/param over the 2 CP ranks: 6 of its 18 bytes per parameter saved
    assert plain.optimizer[0] == pytest.approx(2 * mem.optimizer[0], rel=1e-12)
    assert not plain.fits[0] and mem.fits[0]


def test_search_costs_expert_parallel_mappings_for_mixtral():
    mx = load_model("mixtral-8x7b")
    base = search_base(16, 32, seq_length=2048, dropout=False)
    res = search(mx, base, "DGX-H100", top=100_000, engine_top=0, max_cp=1, fsdp=False)
    assert (res["ep"] > 1).any()
    # EP shards the expert weights: the same mapping needs less memory than without EP
    on = ["tp", "pp", "dp", "cp", "vp", "mb", "sp", "recompute", "distopt", "fsdp"]
    both = res[res["ep"] > 1].merge(res[res["ep"] == 1], on=on, suffixes=("", "_ep1"))
    assert len(both) > 0 and (both["memory_gib"] < both["memory_gib_ep1"]).all()


def test_search_picks_context_parallelism_when_memory_forces_it():
    model = load_model("llama3-8b")
    base = search_base(16, 1, seq_length=1_048_576, dropout=False)
    with pytest.raises(InvalidInputError, match="no mapping fits"):
        search(model, base, "DGX-H100", top=3, engine_top=0, max_cp=1)
    res = search(model, base, "DGX-H100", top=3, engine_top=1)
    assert (res["cp"] > 1).all() and res["fits"].all()
    best = mapping_config(base, res.iloc[0])
    mem, tgt = memory_only(model, best, "DGX-H100")
    assert mem.fits[0] and res["memory_gib"].iloc[0] == pytest.approx(mem.total[0] / GIB, rel=1e-9)
    # the same mapping without CP (half the GPUs, DP unchanged) holds twice the tokens per rank and does not fit
    no_cp, _ = memory_only(model, best.with_(cp=1, gpus=best.gpus // best.cp), "DGX-H100")
    assert not no_cp.fits[0] and no_cp.activations[0] > 1.5 * mem.activations[0]
    assert res["engine_s"].iloc[0] == pytest.approx(res["iteration_s"].iloc[0], rel=0.1)


def test_search_offers_fsdp_where_the_plain_mapping_does_not_fit():
    model = load_model("llama2-13b")
    base = search_base(8, 64, dropout=False)
    res = search(model, base, "DGX-A100", top=100_000, engine_top=0)
    pure_dp = res[(res["tp"] == 1) & (res["pp"] == 1) & (res["cp"] == 1)]
    assert len(pure_dp) > 0 and pure_dp["fsdp"].all()  # only FSDP fits 13B on 8-way data parallelism
    cfg = mapping_config(base, pure_dp.iloc[0])
    assert memory_only(model, cfg, "DGX-A100")[0].fits[0]
    for other in ({"fsdp": False}, {"fsdp": False, "distributed_optimizer": True}):
        assert not memory_only(model, cfg.with_(**other), "DGX-A100")[0].fits[0]
    no_fsdp = search(model, base, "DGX-A100", top=100_000, engine_top=0, fsdp=False)
    assert not no_fsdp["fsdp"].any()
    assert no_fsdp[(no_fsdp["tp"] == 1) & (no_fsdp["pp"] == 1) & (no_fsdp["cp"] == 1)].empty
    # the search row is the single prediction of that mapping, FSDP's per-layer gathers costed
    pred = predict_training(model, cfg, "DGX-A100", engine=False)
    assert pred.closed_form_iteration_s == pytest.approx(pure_dp["iteration_s"].iloc[0], rel=1e-9)
    gathers = pred.ops[pred.ops["role"].isin(["fsdp_ag", "fsdp_rs"])]
    assert len(gathers) == 2 and (gathers["total_s"] > 0).all()


def test_cli_search_switches(capsys):
    args = ["llm", "search", "gpt3-1.3b", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "32", "--json"]
    assert main([*args, "--top", "1000"]) == 0
    rows = json.loads(capsys.readouterr().out)["mappings"]
    assert any(r["cp"] > 1 for r in rows) and any(r["fsdp"] for r in rows)
    assert main([*args, "--top", "1000", "--max-cp", "1", "--no-fsdp"]) == 0
    rows = json.loads(capsys.readouterr().out)["mappings"]
    assert all(r["cp"] == 1 and not r["fsdp"] for r in rows)
    assert main([*args[:-1], "--top", "3"]) == 0
    header = capsys.readouterr().out.splitlines()[1]
    assert all(c in header.split() for c in ("cp", "ep", "optim"))
    assert main([*args, "--max-cp", "0"]) == 2
    assert "--max-cp" in capsys.readouterr().err


def test_cli_search_takes_fp32_as_train_does(capsys):
    """`llm train --dtype fp32` is modelled end to end (fp32 weights without a master copy, GEMMs at the fp32 rate,
    fp32 FSDP gathers), but `llm search` offered only bf16/fp16/fp8 (exit 2 on --dtype fp32), so a CPU bundle or an
    fp32 job could not be searched. Its fastest fp32 mapping is what `train` predicts for that mapping."""
    args = ["llm", "search", "gpt3-125m", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "32", "--top", "1",
            "--max-cp", "1", "--json"]
    assert main([*args, "--dtype", "fp32"]) == 0
    fp32 = json.loads(capsys.readouterr().out)["mappings"][0]
    assert main(args) == 0
    bf16 = json.loads(capsys.readouterr().out)["mappings"][0]
    assert fp32["iteration_s"] > 2 * bf16["iteration_s"]  # A100: 19.5 fp32 TFLOP/s against 312 bf16
    r = fp32
    assert main(["llm", "train", "gpt3-125m", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "32",
                 "--dtype", "fp32", "--tp", str(r["tp"]), "--pp", str(r["pp"]), "--micro-batch", str(r["mb"]),
                 "--recompute", r["recompute"], *(["--sp"] if r["sp"] else []),
                 *(["--distributed-optimizer"] if r["distopt"] else []), *(["--fsdp"] if r["fsdp"] else []),
                 *(["--vp", str(r["vp"])] if r["vp"] > 1 else []), "--json"]) == 0
    train = json.loads(capsys.readouterr().out)
    assert train["dtype"] == "fp32"
    assert train["iteration_s"] == pytest.approx(r["iteration_s"], rel=1e-9)
    assert train["memory_gib_per_rank"] == pytest.approx(r["memory_gib"], rel=1e-9)


# ------------------------------------------------------------------ iteration interval of `llm train`
def test_train_interval_is_the_search_interval(calibrated_store):
    _, pred = calibrated_store
    model = load_model("gpt3-2.7b")
    base = search_base(16, 64)
    res = search(model, base, "DGX-A100", pred, top=3, engine_top=0)
    cfg = mapping_config(base, res.iloc[0])
    cf = predict_training(model, cfg, "DGX-A100", pred, engine=False)
    assert cf.iteration_s == pytest.approx(res["iteration_s"].iloc[0], rel=1e-9)
    assert cf.iteration_s_low == pytest.approx(res["iteration_s_low"].iloc[0], rel=1e-9)
    assert cf.iteration_s_high == pytest.approx(res["iteration_s_high"].iloc[0], rel=1e-9)
    assert cf.iteration_s_low < cf.iteration_s < cf.iteration_s_high
    eng = predict_training(model, cfg, "DGX-A100", pred)  # engine: the same ratios around its own figure
    assert eng.iteration_s_low / eng.iteration_s == pytest.approx(cf.iteration_s_low / cf.iteration_s, rel=1e-9)
    assert eng.iteration_s_high / eng.iteration_s == pytest.approx(cf.iteration_s_high / cf.iteration_s, rel=1e-9)
    roof = predict_training(model, cfg, "DGX-A100", engine=False)
    assert roof.iteration_s_low is None and "iteration_s_low" not in roof.summary()


def test_roofline_note_only_when_no_model_was_given(capsys):
    """Without --model the text output says its times come from datasheet peaks (usually optimistic); --json stays
    one parseable object (the cost_model key says it there)."""
    train = ["llm", "train", "gpt3-1.3b", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "32"]
    infer = ["llm", "infer", "llama2-7b", "--device", "H100-SXM", "--batch", "4"]
    for args in (train, infer):
        assert main(args) == 0
        assert capsys.readouterr().out.rstrip().endswith(ROOFLINE_NOTE)
        assert main([*args, "--json"]) == 0
        text = capsys.readouterr().out
        assert ROOFLINE_NOTE not in text and json.loads(text)["cost_model"] == "roofline"


def test_cli_train_shows_the_interval(calibrated_store, capsys):
    uri, _ = calibrated_store
    args = ["llm", "train", "gpt3-1.3b", "--system", "DGX-A100", "--gpus", "8", "--tp", "2", "--global-batch", "32"]
    cal = ["--model", "llm-kern", "--tracking-uri", uri]
    assert main([*args, *cal, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["iteration_s_low"] < out["iteration_s"] < out["iteration_s_high"]
    assert main([*args, *cal]) == 0
    text = capsys.readouterr().out
    assert "80% interval" in text and f"{out['iteration_s_low']:.3f} - {out['iteration_s_high']:.3f} s" in text
    assert ROOFLINE_NOTE not in text  # a calibrated model: no roofline caveat
    # the end-to-end interval: the op-cost one widened by the packaged training margin, in JSON and text
    from hybrid.engine.form_error import packaged_margin

    margin = packaged_margin("training")  # x0.974 on each side: training runs over-covered the op-cost interval
    lo, hi = margin.widen(out["iteration_s_low"], out["iteration_s_high"], out["iteration_s"])
    assert out["e2e_margin_factor"] == pytest.approx(margin.factor)
    assert out["iteration_s_e2e_low"] == pytest.approx(lo) and out["iteration_s_e2e_high"] == pytest.approx(hi)
    assert out["iteration_s_e2e_low"] <= out["iteration_s"] <= out["iteration_s_e2e_high"]
    assert f"end-to-end 80% interval: {out['iteration_s_e2e_low']:.3f} - {out['iteration_s_e2e_high']:.3f} s" in text
    assert main([*args, "--json"]) == 0
    assert "iteration_s_low" not in json.loads(capsys.readouterr().out)
    # inference: the interval in the table output too, with what it does not cover
    inf = ["llm", "infer", "llama2-7b", "--device", "A100", "--batch", "8", "--input", "512", "--output", "32"]
    assert main([*inf, *cal, "--json"]) == 0
    iv = json.loads(capsys.readouterr().out)
    assert iv["ttft_ms_low"] < iv["ttft_ms"] < iv["ttft_ms_high"]
    assert main([*inf, *cal]) == 0
    text = capsys.readouterr().out
    assert f"TTFT {iv['ttft_ms_low']:.2f} - {iv['ttft_ms_high']:.2f} ms" in text and "serving software" in text
    fi = packaged_margin("inference").factor
    assert iv["ttft_ms_e2e_high"] == pytest.approx(iv["ttft_ms_high"] * fi)
    assert iv["output_tokens_per_s_per_gpu_e2e_low"] == pytest.approx(iv["output_tokens_per_s_per_gpu_low"] / fi)
    assert f"TTFT {iv['ttft_ms_e2e_low']:.2f} - {iv['ttft_ms_e2e_high']:.2f} ms" in text
    assert main(inf) == 0
    assert "80% interval" not in capsys.readouterr().out  # roofline: none


def test_llm_foundry_rows_run_on_their_gpu_and_precision(tmp_path):
    """The MosaicML benchmark reads each row's GPU and precision (the data directory keeps only the A100 sections;
    the upstream table's H100 sections are FP8)."""
    import importlib.util
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("llm_training_run", root / "experiments" / "llm_training" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    head = ("section,Model,SeqLen (T),# GPUs,GPU,MFU,HFU,Model TFLOP,MicroBatchSize,GradAccum,GlobalBatchSize,"
            "Throughput (S/s),Throughput (T/s),Throughput (T/s/GPU),GlobalBatchSize (T),Precision,MP Mode,"
            "Sharding Strategy,Activation Checkpointing,Activation CPUOffload,NumParams")
    row = "{sec},125m,2048,8,{gpu},40,40,125,16,1,128,100,204800,25600,262144,{prec},PURE,FULL_SHARD,False,False,1"
    path = tmp_path / "mosaic.csv"
    path.write_text("\n".join([head, row.format(sec="A100 40GB", gpu="a100_40gb", prec="bf16"),
                               row.format(sec="A100 80GB", gpu="a100_80gb", prec="amp_bf16"),
                               row.format(sec="H100 80GB", gpu="h100_80gb", prec="amp_fp8"),
                               row.format(sec="B200", gpu="b200", prec="amp_bf16")]) + "\n")
    cases = mod.mosaic_cases(tmp_path, None, path)
    assert [c.system for c in cases] == ["Sophia", "DGX-A100", "DGX-H100", "DGX-B200"]
    assert [c.cfg.dtype for c in cases] == ["bf16", "bf16", "fp8", "bf16"]
    # measured DGX A100 collective curves for A100 rows only; the others use their own catalog system
    assert [c.comm_system for c in cases] == ["Sophia", "Sophia", None, None]
    assert cases[0].table == "MosaicML llm-foundry MPT (A100 40GB, FSDP, FlashAttention)"
    assert cases[2].table == "MosaicML llm-foundry MPT (H100 80GB, FP8, FSDP, FlashAttention)"
    assert cases[2].published_s == pytest.approx(128 * 2048 / 204800)


_FOUNDRY_HEAD = ("section,Model,SeqLen (T),# GPUs,GPU,MFU,HFU,Model TFLOP,MicroBatchSize,GradAccum,GlobalBatchSize,"
                 "Throughput (S/s),Throughput (T/s),Throughput (T/s/GPU),GlobalBatchSize (T),Precision,MP Mode,"
                 "Sharding Strategy,Activation Checkpointing,Activation CPUOffload,NumParams")
_FOUNDRY_ROW = ("H100 80GB,{model},2048,8,{gpu},40,40,125,16,1,{batch},100,{tps},25600,262144,amp_bf16,PURE,FULL_SHARD,"
                "{ckpt},False,1")


def test_llm_foundry_rows_that_cannot_be_mapped_are_skipped_with_their_reason(load_experiment, tmp_path):
    """``run.py --mosaic``: an unknown model or GPU, an empty throughput or flag used to abort the run with a
    traceback (or, for an empty Activation Checkpointing cell, turn recompute on: bool(nan)); each is now left out
    and counted; the good rows stay. A byte-order mark is read through."""
    from hybrid.errors import InvalidInputError

    mod = load_experiment("llm_training")
    rows = [dict(model="125m", gpu="h100_80gb", batch=128, tps=204800, ckpt="False"),
            dict(model="125m_custom", gpu="h100_80gb", batch=128, tps=204800, ckpt="False"),
            dict(model="125m", gpu="gaudi2", batch=128, tps=204800, ckpt="False"),
            dict(model="125m", gpu="l40s", batch=128, tps=204800, ckpt="False"),
            dict(model="125m", gpu="h100_80gb", batch=128, tps="", ckpt="False"),
            dict(model="125m", gpu="h100_80gb", batch=128, tps=204800, ckpt=""),
            dict(model="125m", gpu="h100_80gb", batch=12.5, tps=204800, ckpt="True")]
    path = tmp_path / "foundry.csv"
    path.write_text("\ufeff" + "\r\n".join([_FOUNDRY_HEAD, *(_FOUNDRY_ROW.format(**r) for r in rows)]) + "\r\n",
                    encoding="utf-8")
    skipped: dict[str, int] = {}
    cases = mod.mosaic_cases(tmp_path, None, path, skipped)
    assert [c.system for c in cases] == ["DGX-H100", "L40S"] and cases[0].cfg.recompute == "none"
    assert cases[0].published_s == pytest.approx(128 * 2048 / 204800)
    assert sum(skipped.values()) == 5, skipped
    for word in ("unknown model 'mpt-125m_custom'", "unknown device 'gaudi2'",
                 "no throughput", "Activation Checkpointing not true/false", "GlobalBatchSize not a positive whole"):
        assert any(k.startswith(word) for k in skipped), (word, skipped)
    with pytest.raises(InvalidInputError, match="unknown model"):  # the project's own table: every row must map
        mod.mosaic_cases(tmp_path, None, path)
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(InvalidInputError, match="not an llm-foundry benchmark table"):
        mod.mosaic_cases(tmp_path, None, tmp_path / "other.csv", {})


def test_llm_foundry_gpu_without_a_catalog_system_runs_on_its_generic_node(load_experiment, tmp_path):
    """An L40S / H100 PCIe / GH200 row stopped the run ('no catalog system'), although the training model costs a
    bare device on a generic node of it; it is predicted there now, finite and positive."""
    from hybrid.corrections.predictor import HybridPredictor

    mod = load_experiment("llm_training")
    path = tmp_path / "foundry.csv"
    path.write_text("\n".join([_FOUNDRY_HEAD, *(_FOUNDRY_ROW.format(model="125m", gpu=g, batch=128, tps=204800,
                                                                    ckpt="False")
                                               for g in ("l40s", "NVIDIA H100 PCIe", "gh200"))]) + "\n")
    skipped: dict[str, int] = {}
    cases = mod.mosaic_cases(tmp_path, None, path, skipped)
    assert [c.system for c in cases] == ["L40S", "H100-PCIE", "GH200"] and not skipped
    assert all(c.comm_system is None for c in cases)
    roof = HybridPredictor.roofline_only()
    for c in cases:
        t = mod.predict(c, roof, False).iteration_s
        assert np.isfinite(t) and t > 0


def test_llm_foundry_scoring_keeps_rows_that_do_not_fit_and_counts_them(load_experiment, tmp_path):
    """``run.py --mosaic``: a job the memory model predicts not to fit (MPT-30B, batch 16 per GPU without activation
    checkpointing on 8 H100) is scored and flagged (``fits`` false, ``n_not_fitting`` overall and per table)."""
    from hybrid.corrections.predictor import HybridPredictor

    mod = load_experiment("llm_training")
    path = tmp_path / "foundry.csv"
    path.write_text("\n".join([_FOUNDRY_HEAD, _FOUNDRY_ROW.format(model="125m", gpu="h100_80gb", batch=128,
                                                                   tps=204800, ckpt="False"),
                               _FOUNDRY_ROW.format(model="30b", gpu="h100_80gb", batch=128, tps=2000,
                                                   ckpt="False")]) + "\n")
    cases = mod.mosaic_cases(tmp_path, None, path, {})
    roof = HybridPredictor.roofline_only()
    df = mod.score(cases, roof, {"default": roof}, lambda s: None, {})
    out = mod.mosaic_summary(df)
    assert out["n_rows"] == 2 and [r["fits"] for r in out["rows"]] == [True, False]
    assert out["n_not_fitting"] == 1 and out["by_table"][df["table"].iloc[0]]["n_not_fitting"] == 1


def test_llm_foundry_precision_the_model_does_not_cover_is_skipped(load_experiment, tmp_path):
    """An fp32 row (or any precision but bf16 / fp16 / fp8) was predicted as bf16 mixed precision."""
    mod = load_experiment("llm_training")
    row = _FOUNDRY_ROW.format(model="125m", gpu="h100_80gb", batch=128, tps=204800, ckpt="False")
    path = tmp_path / "foundry.csv"
    path.write_text("\n".join([_FOUNDRY_HEAD, row.replace("amp_bf16", "fp32"), row.replace("amp_bf16", "amp_fp16"),
                               row]) + "\n")
    skipped: dict[str, int] = {}
    cases = mod.mosaic_cases(tmp_path, None, path, skipped)
    assert [c.cfg.dtype for c in cases] == ["fp16", "bf16"] and skipped == {"precision not modelled: 'fp32'": 1}


def test_llm_foundry_scoring_answers_bad_or_empty_tables_before_fitting(load_experiment, shared_datasets, tmp_path,
                                                                        capsys):
    """A missing table is one ``error:`` line (exit 2) and a table with no row to score an n_rows 0 answer with
    its skips, both before the calibration is fitted (which took ~30 s first, then a traceback or NaN)."""
    import json

    mod = load_experiment("llm_training")
    common = ["--data-dir", str(shared_datasets), "--json", "--mosaic"]
    assert mod.main([*common, str(tmp_path / "missing.csv")]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    path = tmp_path / "gaudi.csv"
    path.write_text(_FOUNDRY_HEAD + "\n" + _FOUNDRY_ROW.format(model="125m", gpu="gaudi2", batch=128, tps=1000,
                                                               ckpt="False") + "\n")
    assert mod.main([*common, str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_rows"] == 0 and out["geomean_pct"] is None and out["n_skipped"] == 1


def test_inference_with_a_calibrated_model_carries_80pct_intervals(calibrated_store, tmp_path):
    from hybrid.workloads.llm.inference import make_setup, predict_static

    _, pred = calibrated_store
    s = make_setup("llama2-7b", "A100", tp=1)
    assert not any(k.endswith(("_low", "_high")) for k in predict_static(s, 8, 512, 32).to_dict())  # roofline
    r = predict_static(s, 8, 512, 32, pred)
    iv = r.interval
    for key, point in (("ttft_ms", r.ttft_ms), ("tpot_ms", r.tpot_ms), ("latency_ms", r.latency_ms),
                       ("output_tokens_per_s_per_gpu", r.output_tokens_per_s_per_gpu)):
        assert iv[f"{key}_low"] <= point * (1 + 1e-9) and point <= iv[f"{key}_high"] * (1 + 1e-9), key
    assert iv["latency_ms_high"] > iv["latency_ms_low"]
    # the low end is the prediction with every op at its interval's low end (floors at the roofline aside)
    low = predict_static(s, 8, 512, 32, _LowEnd(pred))
    assert iv["ttft_ms_low"] == pytest.approx(low.ttft_ms, rel=1e-6)
    assert r.to_dict()["latency_ms_high"] == iv["latency_ms_high"]
    # vendor-table rows carry it too: throughput's low end is at the high latency, first-token's at the low
    from hybrid.workloads.llm.vendor_tables import predict_table, read_table

    path = tmp_path / "trtllm.csv"
    path.write_text("trtllm_version,gpu,precision,model,batch_size,tp,input_len,output_len,"
                    "output_tokens_per_s_per_gpu\nv0.9.0,A100,FP16,Llama v2 7B,8,1,512,32,1000\n")
    table = read_table(path)
    t = predict_table(table, pred)
    assert (t["predicted_low"] < t["predicted"]).all() and (t["predicted"] < t["predicted_high"]).all()
    assert "predicted_low" not in predict_table(table).columns  # roofline: no interval


def test_inference_interval_with_one_output_token_has_no_tpot(calibrated_store, capsys):
    """`--output 1` with a calibrated model: no decode step, so TPOT and its interval ends are null (they read 0 and
    0 - 0 ms before), while TTFT, latency and throughput keep theirs; the JSON stays strict (no NaN)."""
    from hybrid.workloads.llm.inference import make_setup, predict_static

    _, pred = calibrated_store
    r = predict_static(make_setup("llama2-7b", "A100", tp=1), 8, 512, 1, pred)
    d = r.to_dict()
    assert r.tpot_ms is None and d["tpot_ms"] is None
    assert d["tpot_ms_low"] is None and d["tpot_ms_high"] is None
    assert d["tpot_ms_e2e_low"] is None and d["tpot_ms_e2e_high"] is None
    assert d["ttft_ms_low"] <= r.ttft_ms <= d["ttft_ms_high"] and d["latency_ms"] == pytest.approx(r.ttft_ms)
    assert d["ttft_ms_e2e_low"] <= d["ttft_ms_low"]
    json.dumps({k: v for k, v in d.items() if k != "ops"}, allow_nan=False)
    uri, _ = calibrated_store  # the text report: the interval lines without a TPOT range
    assert main(["llm", "infer", "llama2-7b", "--device", "A100", "--output", "1", "--model", "llm-kern",
                 "--tracking-uri", uri]) == 0
    text = capsys.readouterr().out
    assert "80% interval: TTFT" in text and "TPOT" not in text.split("80% interval")[1].split("\n")[0]


def test_softmax_schedule_of_fused_attention():
    """`--softmax`: FlashAttention-2 (serial) vs FlashAttention-3-style (overlapped) kernels. On an H100 the exps of
    a long-sequence step cost time only in series; on an A100 `auto` is serial (pre-Hopper); unknown names refused."""
    from hybrid.workloads.llm.config import TrainingConfig

    model = load_model("gpt3-1.3b")
    times = {}
    for system in ("DGX-H100", "DGX-A100"):
        for sm in ("auto", "serial", "overlapped"):
            cfg = TrainingConfig(gpus=8, global_batch=16, micro_batch=1, seq_length=8192, softmax=sm)
            times[system, sm] = predict_training(model, cfg, system, engine=False).iteration_s
    assert times["DGX-H100", "serial"] > times["DGX-H100", "overlapped"] * 1.02
    assert times["DGX-H100", "auto"] == pytest.approx(times["DGX-H100", "overlapped"])
    assert times["DGX-A100", "auto"] == pytest.approx(times["DGX-A100", "serial"])
    assert times["DGX-A100", "serial"] > times["DGX-A100", "overlapped"]
    with pytest.raises(InvalidInputError, match="softmax"):
        TrainingConfig(gpus=8, global_batch=16, softmax="fa9")
    assert main(["llm", "train", "gpt3-1.3b", "--system", "DGX-H100", "--gpus", "8", "--global-batch", "16",
                 "--seq", "8192", "--softmax", "serial", "--json"]) == 0


def test_mfu_above_100_percent_is_explained(capsys):
    """The Megatron MFU counts the full s x s attention scores that causal kernels halve: at 8k tokens on the
    roofline it passes 100%, and the output says why and gives the causal-FLOP MFU beside it."""
    args = ["llm", "train", "llama3-8b", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "64", "--fsdp"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mfu"] > 1.0 and 0.5 < out["mfu_causal"] < out["mfu"]
    model = load_model("llama3-8b")
    full, causal = (model.forward_flops_per_token(8192, causal_skip=c) for c in (False, True))
    assert out["mfu_causal"] == pytest.approx(out["mfu"] * causal / full)
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "MFU above 100%" in text and f"MFU is {out['mfu_causal'] * 100:.1f}%" in text


def test_plot_files_are_written_in_the_format_their_name_says(capsys, tmp_path):
    args = ["llm", "memory", "llama2-7b", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "64", "--plot"]
    assert main([*args, str(tmp_path / "m.svg")]) == 0
    assert (tmp_path / "m.svg").read_bytes().lstrip().startswith(b"<?xml")
    assert main([*args, str(tmp_path / "m.pdf")]) == 0
    assert (tmp_path / "m.pdf").read_bytes().startswith(b"%PDF")
    assert main([*args, str(tmp_path / "m.png")]) == 0
    assert (tmp_path / "m.png").read_bytes().startswith(b"\x89PNG")
    capsys.readouterr()
    assert main([*args, str(tmp_path / "m.txt")]) == 2
    assert "use a .png, .svg or .pdf file name" in capsys.readouterr().err
    assert not (tmp_path / "m.txt").exists()


def test_fp8_training_costs_transformer_engine_casts_and_keeps_the_head_in_16_bit():
    """fp8 training (Transformer Engine): every fp8 GEMM's input is cast-transposed in the forward, its output
    gradient in the backward, its weight every microbatch (TE's default) or once per iteration (Megatron-LM); each
    cast costs what a bf16 copy of that size costs; the output layer stays a 16-bit GEMM; bf16 has no casts."""
    model = load_model("gpt3-1.3b")
    h, f, L = model.hidden_size, model.ffn_hidden_size, model.num_layers
    base = dict(gpus=8, global_batch=32, micro_batch=2, tp=2, seq_length=1024, flash_attention=True)
    runs = {}
    for dtype, cast in (("bf16", "microbatch"), ("fp8", "microbatch"), ("fp8", "step")):
        cfg = TrainingConfig(**base, dtype=dtype, fp8_weight_cast=cast)
        runs[dtype, cast] = predict_training(model, cfg, "DGX-H100", engine=False)
    ops = runs["fp8", "microbatch"].ops
    casts = ops[ops["sub"] == "fp8_cast"]
    layer = casts[casts["scope"] == "layer"]
    T, t = 2 * 1024, 2
    # per layer: inputs of QKV (h), projection (h / t), MLP up (h) and down (f / t) in the forward
    fwd_inputs = T * (h + h // t + h + f // t)
    # output gradients of QKV (3h / t), projection (h), MLP up (f / t), down (h) in the backward
    bwd_grads = T * (3 * h // t + h + f // t + h)
    weights = (h * 3 * h // t) + (h // t * h) + (h * f // t) + (f // t * h)
    per = (layer["elements"] * layer["count"]).groupby(layer["direction"]).sum()
    assert per["fwd"] == pytest.approx(fwd_inputs + weights)
    assert per["bwd"] == pytest.approx(bwd_grads)
    assert set(layer["op"]) == {"elementwise"} and set(layer["variant"]) == {"copy"} and set(layer["dtype"]) == {"bf16"}
    # the output layer (vocabulary GEMMs) stays bf16; the transformer layers' GEMMs run in fp8
    head = ops[(ops["role"].isin(["hf", "hb"])) & (family_array(ops["op"]) == "gemm")]
    assert len(head) == 3 and set(head["dtype"]) == {"bf16"}
    assert set(ops[(ops["role"] == "f") & (ops["op"] == "linear")]["dtype"]) == {"fp8"}
    # once per iteration: no per-microbatch weight cast, one stage row over the stage's layer weights
    step = runs["fp8", "step"].ops
    stage = step[step["role"] == "fp8w"]
    # (the stage's layer parameters on one TP rank: the GEMM weights above plus biases and norms)
    assert len(stage) == 1 and stage["elements"].iloc[0] == pytest.approx(L * weights, rel=5e-3)
    assert (step[(step["sub"] == "fp8_cast") & (step["scope"] == "layer")].groupby("direction")["elements"]
            .apply(lambda e: e.sum()).get("fwd") < layer[layer["direction"] == "fwd"]["elements"].sum())
    # 8 microbatches per iteration here: casting weights once is faster; bf16 casts nothing
    assert runs["fp8", "step"].iteration_s < runs["fp8", "microbatch"].iteration_s
    assert not (runs["bf16", "microbatch"].ops["sub"] == "fp8_cast").any()
    assert "fp8w" not in set(runs["bf16", "microbatch"].ops["role"])
    with pytest.raises(InvalidInputError, match="fp8_weight_cast must be one of"):
        TrainingConfig(**base, dtype="fp8", fp8_weight_cast="never")


def test_expert_states_shard_over_the_ranks_holding_the_same_experts():
    """Megatron shards expert optimizer states over DP x CP / EP, dense ones over DP x CP: Mixtral on 8 GPUs with
    EP 8 keeps every expert state of its own experts (an expert-DP group of 1) and cannot fit in 80 GB."""
    from hybrid.workloads.llm.costing import mappings_frame, stage_params

    m = load_model("mixtral-8x7b")
    cfg = TrainingConfig(gpus=8, global_batch=64, ep=8, recompute="full", distributed_optimizer=True)
    mem, _ = memory_only(m, cfg, "DGX-H100")
    p = stage_params(m, cfg, mappings_frame(cfg))
    experts, dense = float(p["experts"][0]), float(p["max"][0] - p["experts"][0])
    assert experts > 5e9  # 45 B expert parameters over 8 ranks
    assert mem.optimizer[0] == pytest.approx(12 * (dense / 8 + experts / 1), rel=1e-9)
    assert not mem.fits[0]
    # 16 bytes per parameter of 46.7 B parameters cannot be spread below 87 GiB on 8 GPUs: no mapping fits
    with pytest.raises(InvalidInputError, match="no mapping fits"):
        search(m, search_base(8, 64), "DGX-H100")
    # the expert gradients are reduced over their own group only
    cfg = TrainingConfig(gpus=64, global_batch=64, ep=8, recompute="full")
    rows = predict_training(m, cfg, "DGX-H100", engine=False).ops
    dp = rows[rows["role"] == "dp_ar"]
    assert sorted(dp["n_ranks"].astype(int)) == [8, 64]


def test_context_parallel_ranks_reduce_gradients_and_shard_states_with_dp():
    m = load_model("llama2-7b")
    base = dict(gpus=16, global_batch=16, distributed_optimizer=True)
    rows = predict_training(m, TrainingConfig(cp=2, **base), "DGX-A100", engine=False).ops
    assert set(rows.loc[rows["role"] == "dp_rs", "n_ranks"].astype(int)) == {16}
    m1, _ = memory_only(m, TrainingConfig(cp=1, **base), "DGX-A100")
    m2, _ = memory_only(m, TrainingConfig(cp=2, **base), "DGX-A100")
    assert m2.optimizer[0] == pytest.approx(m1.optimizer[0], rel=1e-9)  # 16 ranks share the states either way


def test_groups_that_do_not_tile_a_node_straddle_two():
    from hybrid.workloads.llm.config import group_nodes, group_nodes_vec

    assert group_nodes(6, 1, 8) == 2 and group_nodes(8, 1, 8) == 1 and group_nodes(4, 1, 8) == 1
    assert group_nodes(3, 2, 8) == 2 and group_nodes(2, 4, 8) == 1 and group_nodes(4, 8, 8) == 4
    assert list(group_nodes_vec(np.array([6, 4, 1, 16]), np.array([1, 2, 1, 1]), 8)) == [2, 1, 1, 2]
    cfg = TrainingConfig(gpus=384, global_batch=1536, tp=6, pp=8, recompute="full",
                         distributed_optimizer=True)
    res = predict_training(load_model("gpt3-175b"), cfg, "DGX-A100", engine=False)
    assert res.placement["tp"].startswith("6 ranks, 2 nodes")
    tp8 = predict_training(load_model("gpt3-175b"), cfg.with_(tp=8, pp=6), "DGX-A100", engine=False)
    assert res.breakdown_s["tp_comm"] > 2 * tp8.breakdown_s["tp_comm"]


def test_a_job_smaller_than_a_node_stays_inside_it():
    """The groups a job has, not those a larger one would: 6 GPUs of an 8-GPU node were one DP group "2 nodes
    (NICs)" (the group at ranks 6-11 of a 12-GPU job counted), its gradient all-reduce costed over the NICs."""
    from hybrid.workloads.llm.config import group_nodes

    assert group_nodes(6, 1, 8, ranks=6) == 1 and group_nodes(5, 1, 8, ranks=5) == 1
    assert group_nodes(6, 1, 8, ranks=12) == 2 and group_nodes(13, 1, 8, ranks=13) == 2
    assert group_nodes(3, 2, 8, ranks=6) == 1 and group_nodes(3, 4, 8, ranks=12) == 2
    m = load_model("llama3-8b")
    cfg = TrainingConfig(gpus=6, global_batch=24, fsdp=True, dropout=False)
    six = predict_training(m, cfg, "DGX-H100", engine=False)
    eight = predict_training(m, cfg.with_(gpus=8, global_batch=32), "DGX-H100", engine=False)
    assert six.placement["dp"] == "6 ranks, 1 node (DGX-H100 intra-node fabric)"
    assert set(six.ops["n_nodes"].dropna().astype(int)) == {1}
    # the same NVSwitch node: about the 8-GPU job's gradient traffic, not a NIC's (2.6x more before)
    assert six.breakdown_s["fsdp_comm"] + six.breakdown_s["dp_comm"] < 1.2 * (
        eight.breakdown_s["fsdp_comm"] + eight.breakdown_s["dp_comm"])


def test_pipeline_neighbours_on_two_nodes_cross_the_nics():
    """12 GPUs at PP 2 on 8-GPU nodes: stage 0 is ranks 0-5, stage 1 ranks 6-11, so ranks 2-5 send to 8-11 on the
    next node; the send/recv was costed inside a node (and placed "inside a node") because a stage (6) did not
    fill a node."""
    m = load_model("llama3-8b")
    cfg = TrainingConfig(gpus=12, global_batch=24, pp=2, recompute="full", distributed_optimizer=True, dropout=False)
    twelve = predict_training(m, cfg, "DGX-H100", engine=False)
    assert twelve.placement["pp"] == "across nodes"
    assert set(twelve.ops.loc[twelve.ops["role"] == "p2p", "n_nodes"].astype(int)) == {2}
    six = predict_training(m, cfg.with_(gpus=6, global_batch=12), "DGX-H100", engine=False)
    assert six.placement["pp"] == "inside a node"
    assert set(six.ops.loc[six.ops["role"] == "p2p", "n_nodes"].astype(int)) == {1}


def test_last_stage_memory_counts_interleaved_warmup_and_the_recomputed_layer():
    m = load_model("llama3-8b")
    cfg = TrainingConfig(gpus=8, global_batch=64, pp=2, vp=4, recompute="full", dropout=False)
    mem, _ = memory_only(m, cfg, "DGX-H100")
    assert mem.logits[0] > 0  # the last stage is the most loaded
    s, h, L = 8192, 4096, 32
    chunks = (4 - 1) * 2 + 1  # its interleaved warm-up: (vp - 1) pp + 1 chunks of L / (pp vp) layers
    stored = 2 * s * h * chunks * L / (2 * 4)
    assert stored < mem.activations[0] < stored + 1.5 * GIB  # + one layer being recomputed


def test_vocabulary_ends_add_their_tensor_parallel_collectives():
    m = load_model("llama3-8b")
    ops = predict_training(m, TrainingConfig(gpus=8, global_batch=64, tp=8), "DGX-H100", engine=False).ops
    comm = ops[ops["op"].isin(["all_reduce", "reduce_scatter", "all_gather"])]
    assert (comm["role"] == "ef").sum() == 1 and comm.loc[comm["role"] == "ef", "op"].iloc[0] == "all_reduce"
    assert ((comm["role"] == "htpb") & (comm["op"] == "all_reduce")).sum() == 1
    ops = predict_training(m, TrainingConfig(gpus=8, global_batch=64, tp=8, sp=True), "DGX-H100",
                           engine=False).ops
    assert ops.loc[ops["role"] == "ef", "op"].isin(["reduce_scatter"]).sum() == 1


def test_search_and_train_agree_on_what_is_allowed(capsys):
    bert = load_model("bert-large")
    found = search(bert, search_base(64, 64), "DGX-A100", top=1000)
    assert (found["pp"] == 1).all()
    m = load_model("llama2-7b")
    with pytest.raises(InvalidInputError, match="FlashAttention"):
        TrainingConfig(gpus=16, global_batch=16, cp=2, flash_attention=False).validate_for(m)
    with pytest.raises(InvalidInputError, match="divisible"):
        TrainingConfig(gpus=8, global_batch=16, tp=8, sp=True, seq_length=7).validate_for(m)
    with pytest.raises(InvalidInputError, match="seq_length"):
        TrainingConfig(gpus=8, global_batch=16, seq_length=True)
    # selective recomputation under FlashAttention recomputes nothing: same time, HFU = MFU
    cfg = TrainingConfig(gpus=8, global_batch=64, recompute="selective")
    mf, hf = model_flops(m, cfg)
    assert hf == mf
    assert model_flops(m, cfg.with_(flash_attention=False))[1] > mf
    with pytest.raises(InvalidInputError, match="top must be a positive integer"):
        search(m, search_base(8, 64), "DGX-H100", top=0)
    with pytest.raises(InvalidInputError, match="micro batches"):
        search(m, search_base(8, 64), "DGX-H100", micro_batches=(0,))


def test_sequence_past_a_learned_position_table_is_warned_in_train_memory_and_search(capsys):
    """GPT-2 learns 1024 absolute positions: a 4096-token sequence cannot run on it (rotary Llama can: no note)."""
    job = ["--system", "DGX-A100", "--gpus", "8", "--global-batch", "64"]
    rc = main(["llm", "train", "gpt2-large", *job, "--seq", "4096", "--json"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "warning: gpt2-large learns 1024 absolute position embeddings" in cap.err and "4096 tokens" in cap.err
    assert any("cannot run" in n for n in json.loads(cap.out)["notes"])
    rc = main(["llm", "memory", "gpt2-large", *job, "--seq", "4096", "--json"])
    cap = capsys.readouterr()
    assert rc == 0 and "cannot run" in cap.err and json.loads(cap.out)["notes"]
    rc = main(["llm", "search", "gpt2-large", *job, "--seq", "2048", "--top", "1", "--json"])
    cap = capsys.readouterr()
    assert rc == 0 and "2048 tokens" in cap.err and json.loads(cap.out)["notes"]
    for model, seq in (("gpt2-large", "1024"), ("llama3-8b", "16384")):
        rc = main(["llm", "train", model, *job, "--seq", seq, "--json", "--allow-oom"])
        cap = capsys.readouterr()
        assert rc == 0 and "position" not in cap.err and "notes" not in json.loads(cap.out)


def test_search_compare_ranks_its_own_system_last_when_nothing_fits_there(capsys):
    """GPT-3 13B on 2 GPUs fits on an H200 (141 GB) but not an H100 (80 GB). `--system HGX-H200 --compare DGX-H100`
    ranked the H100 last with the reason, but `--system DGX-H100 --compare HGX-H200` ended with that reason as an
    error and compared nothing: this run's system now ranks like any compared one."""
    job = ["llm", "search", "gpt3-13b", "--gpus", "2", "--global-batch", "8", "--top", "1"]
    assert main([*job, "--system", "DGX-H100", "--compare", "HGX-H200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["system"] for r in out["compare"]] == ["HGX-H200", "DGX-H100"]
    assert out["compare"][0]["mapping"] is not None and out["compare"][1]["mapping"] is None
    assert out["compare"][1]["note"].startswith("this run: no mapping fits in 80 GiB")
    assert out["mappings"] == [] and out["fitting"] == 0 and "no mapping fits" in out["error"]
    assert main([*job, "--system", "DGX-H100", "--compare", "HGX-H200"]) == 0
    text = capsys.readouterr().out
    assert "(DGX-H100), global batch 8: no mapping fits" in text and "this run: no mapping fits" in text
    # nothing fits on any compared system: this run's one-line error, as without --compare
    assert main([*job, "--system", "DGX-H100", "--compare", "DGX-A100"]) == 2
    assert "no mapping fits in 80 GiB" in capsys.readouterr().err


def test_compare_rows_are_what_llm_train_gives_on_each_system(capsys):
    """Each --compare row is its system's own fastest mapping, timed as `llm train` times that mapping there:
    iteration_s its closed form, engine_s its (headline) engine iteration."""
    job = ["gpt3-1.3b", "--gpus", "32", "--global-batch", "128"]
    rc = main(["llm", "search", *job, "--system", "DGX-A100", "--compare", "DGX-H100", "--top", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and len(out["compare"]) == 2
    for row in out["compare"]:
        m = row["mapping"]
        flags = (["--sp"] if m["sp"] else []) + (["--distributed-optimizer"] if m["optimizer"] == "dist" else []) + \
            (["--fsdp"] if m["optimizer"] == "fsdp" else [])
        rc = main(["llm", "train", *job, "--system", row["system"], "--tp", str(m["tp"]), "--pp", str(m["pp"]),
                   "--cp", str(m["cp"]), "--vp", str(m["vp"]), "--micro-batch", str(m["micro_batch"]),
                   "--recompute", m["recompute"], *flags, "--json"])
        alone = json.loads(capsys.readouterr().out)
        assert rc == 0 and alone["dp"] == m["dp"]
        assert row["iteration_s"] == pytest.approx(alone["closed_form_iteration_s"], rel=1e-9)
        assert row["engine_s"] == pytest.approx(alone["iteration_s"], rel=1e-9)
        rc = main(["llm", "search", *job, "--system", row["system"], "--top", "1", "--json"])
        best = json.loads(capsys.readouterr().out)["mappings"][0]
        assert (best["tp"], best["pp"], best["cp"], best["mb"], best["vp"]) == \
            (m["tp"], m["pp"], m["cp"], m["micro_batch"], m["vp"])


def test_memory_json_has_the_mapping_and_train_json_memory_keys(capsys):
    """`llm memory --json` named its breakdown `memory_gib` (a float of that name in `llm search --json`) and gave
    neither the mapping nor `llm train --json`'s keys for the same numbers; both commands now share them."""
    args = ["llama3-70b", "--system", "DGX-H100", "--gpus", "64", "--tp", "8", "--pp", "4", "--global-batch", "256",
            "--seq", "4096", "--sp", "--distributed-optimizer", "--recompute", "selective", "--json"]
    assert main(["llm", "memory", *args]) == 0
    mem = json.loads(capsys.readouterr().out)
    assert main(["llm", "train", *args]) == 0
    train = json.loads(capsys.readouterr().out)
    for k in ("system", "device", "gpus", "tp", "pp", "dp", "cp", "ep", "vp", "micro_batch", "global_batch",
              "seq_length", "sp", "recompute", "distributed_optimizer", "fsdp", "dtype", "memory_gib_per_rank",
              "memory_breakdown_gib", "fits", "fit_reason"):
        assert mem[k] == train[k], k
    assert mem["dp"] == 2 and mem["memory_gib"] == mem["memory_breakdown_gib"] and mem["reason"] == mem["fit_reason"]


def test_tp_above_the_kv_heads_counts_replicated_kv_heads_in_memory(capsys, tmp_path):
    """TP 8 on 2 KV heads: each rank holds one whole KV head (replicated, as the QKV GEMM is costed), not 2/8 of
    one. By hand for a 2-layer model (h 1024, 16 heads of 64, 2 KV heads, SwiGLU f 4096, no dropout, SP, FA):
    per token and layer, replicated norms + QKV/MLP inputs 8h = 8192 B; split 2q + 2k + 2v + 2q + 6f with the K
    and V of one head per rank (64 columns, i.e. 512 "global" columns / 8): 2048 + 1024 + 1024 + 2048 + 24576 =
    30720 B; stored (8192 + 30720) / 8 = 4864 B (4672 B when K and V were split 8 ways)."""
    from hybrid.workloads.llm.costing import kv_width_split, mappings_frame, stage_params
    from hybrid.workloads.llm.memory import activation_bytes_per_token

    model = load_model({"name": "gqa2", "num_layers": 2, "hidden_size": 1024, "num_attention_heads": 16,
                        "num_query_groups": 2, "kv_channels": 64, "ffn_hidden_size": 4096, "activation": "swiglu",
                        "vocab_size": 1024, "seq_length": 512, "normalization": "RMSNorm",
                        "add_bias_linear": False})
    cfg = TrainingConfig(gpus=8, tp=8, global_batch=8, sp=True, dropout=False)
    stored, _ = activation_bytes_per_token(model, cfg, np.array([8.0]), np.array([True]), np.array(["none"]), 512)
    assert stored[0] == pytest.approx(4864.0)
    assert kv_width_split(model, np.array([1, 2, 4, 8])).tolist() == [128, 128, 256, 512]
    # weights: K and V of one head per rank (2 x 1024 x 64 per layer) instead of 2 x 1024 x 128 / 8
    c = model.param_counts()
    p8 = stage_params(model, cfg, mappings_frame(cfg))["layers"][0]
    norms = 2 * 2 * 1024  # two RMSNorms per layer, whole on every TP rank
    assert p8 == pytest.approx((c["layers_total"] - norms) / 8 + norms + 2 * (2 * 1024 * 64 - 2 * 1024 * 128 / 8))
    cfg2 = cfg.with_(tp=2, gpus=2, global_batch=2)  # TP divides the KV heads: split as before
    assert stage_params(model, cfg2, mappings_frame(cfg2))["layers"][0] == pytest.approx(
        (c["layers_total"] - norms) / 2 + norms)
    # the memory's per-rank K width is the costed QKV GEMM's: (16/8 + 2 x 1) heads of 64 columns
    ops = predict_training(model, cfg, "DGX-H100", engine=False).ops
    fwd = ops[(ops["op"] == "linear") & (ops["direction"] == "fwd") & (ops["k"] == 1024)]
    per_rank_qkv = 1024 / 8 + 2 * kv_width_split(model, 8)[()] / 8  # q/t + K + V columns on one rank
    assert per_rank_qkv == 256 and 256 in set(fwd["n"])
    # and the job says Megatron-Core would not run it
    job = ["--system", "DGX-H100", "--gpus", "8", "--global-batch", "8"]
    assert main(["llm", "memory", "qwen3-30b-a3b", *job, "--tp", "8", "--json"]) == 0
    cap = capsys.readouterr()
    assert "replicated on 2 ranks" in cap.err and "Megatron-Core" in json.loads(cap.out)["notes"][0]
    assert main(["llm", "memory", "qwen3-30b-a3b", *job, "--tp", "4", "--json"]) == 0
    assert "notes" not in json.loads(capsys.readouterr().out)
    # the search warns when its fastest pick replicates KV heads (an MQA model needing TP to fit)
    mqa = tmp_path / "mqa.json"
    mqa.write_text(json.dumps({"model_type": "gpt_bigcode", "n_embd": 6144, "n_layer": 40, "n_head": 48,
                               "multi_query": True, "vocab_size": 49152, "n_positions": 8192, "n_inner": 24576}))
    assert main(["llm", "search", str(mqa), "--system", "DGX-A100", "--gpus", "8", "--global-batch", "16",
                 "--top", "1", "--no-fsdp", "--json"]) == 0
    cap = capsys.readouterr()
    best = json.loads(cap.out)["mappings"][0]
    assert best["tp"] > 1 and "fastest mapping: tp" in cap.err and "only tp 1 avoids it" in cap.err


def test_memory_text_output_names_the_job_it_sized(capsys, tmp_path):
    """A Hugging Face config without max_position_embeddings trains at the default 4096 tokens: `llm memory` used to
    print only the breakdown, so neither that nor the derived DP showed; its first line now names the job."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
                               "num_attention_heads": 32, "vocab_size": 32000, "intermediate_size": 11008}))
    assert main(["llm", "memory", str(cfg), "--system", "DGX-A100", "--gpus", "16", "--tp", "2", "--global-batch",
                 "32", "--recompute", "full", "--distributed-optimizer"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    for part in ("16 x A100-SXM4-80GB", "tp 2 pp 1 dp 8", "micro 1 x 4", "seq 4096", "recompute full",
                 "optimizer states distributed", "dropout off (the model's)"):  # a Llama config: no dropout
        assert part in first, (part, first)


def test_train_text_output_names_the_job_as_memory_does(capsys, tmp_path):
    """The docs promise `llm train`'s first line names the job as `llm memory`'s does; it left out the sequence
    length (a config without one trains at the default 4096), EP, SP, the optimizer states and the attention kernel."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 4,
                               "num_attention_heads": 16, "vocab_size": 32000, "intermediate_size": 2816}))
    args = [str(cfg), "--system", "DGX-A100", "--gpus", "16", "--tp", "2", "--global-batch", "32", "--sp",
            "--recompute", "full", "--distributed-optimizer"]
    assert main(["llm", "memory", *args]) == 0
    memory_first = capsys.readouterr().out.splitlines()[0]
    assert main(["llm", "train", *args]) == 0
    train_first = capsys.readouterr().out.splitlines()[0]
    assert train_first == memory_first + ", cost model roofline"
    for part in ("tp 2 pp 1 dp 8 cp 1 ep 1 vp 1", "seq 4096", "sp on", "optimizer states distributed",
                 "FlashAttention"):
        assert part in train_first, (part, train_first)


def test_cluster_the_catalog_cannot_hold_is_refused_or_noted(capsys):
    """16 GPUs on a single-node system (XLA-H100x8: no network between nodes) were refused deep in the collective
    model ("collective: 16 ranks on 2 node(s) ... at row index 29"); now a one-line error as DLRM's `simulate`
    gives. More nodes than the catalog describes (8192 H100s = 1024 DGX nodes, 256 listed) and a bare device across
    nodes are costed with a note, as for DLRM."""
    job = ["gpt3-1.3b", "--global-batch", "16"]
    for cmd in (["train"], ["search", "--top", "1"]):
        assert main(["llm", *cmd, *job, "--system", "XLA-H100x8", "--gpus", "16"]) == 2
        err = capsys.readouterr().err
        assert "16 GPUs need 2 nodes of system XLA-H100x8" in err and "row index" not in err
    assert main(["llm", "train", *job, "--system", "XLA-H100x8", "--gpus", "8", "--json"]) == 0
    assert "notes" not in json.loads(capsys.readouterr().out)
    assert main(["llm", "train", "gpt3-1.3b", "--system", "DGX-H100", "--gpus", "8192", "--global-batch", "8192",
                 "--json"]) == 0
    cap = capsys.readouterr()
    assert "1024 nodes of DGX-H100, more than the 256" in json.loads(cap.out)["notes"][0] and "warning:" in cap.err
    assert main(["llm", "search", *job, "--system", "H100-SXM", "--gpus", "16", "--top", "1", "--json"]) == 0
    cap = capsys.readouterr()
    assert any("H100-SXM is a device, not a catalog system" in n for n in json.loads(cap.out)["notes"])


def test_a_partly_filled_last_node_is_costed_evenly_and_said_so(capsys):
    """13 GPUs on 8-GPU nodes: `hybrid predict collective` refuses ranks that do not split evenly over the nodes,
    while training (and DLRM's shard/simulate, which share the check) costed the same collectives without a word."""
    from hybrid.hardware.catalog import default_catalog
    from hybrid.ops.roofline import cluster_notes

    cat = default_catalog()
    notes = cluster_notes(cat, "DGX-H100", 13, 8)
    assert len(notes) == 1 and "13 GPUs fill 1 node(s) of 8 and 5 GPU(s) of another" in notes[0]
    assert cluster_notes(cat, "DGX-H100", 16, 8) == [] and cluster_notes(cat, "DGX-H100", 6, 8) == []
    assert any("fill" in n for n in cluster_notes(cat, "H100-SXM", 13, 8, "H100-SXM"))  # a bare device too
    assert main(["llm", "train", "llama3-8b", "--system", "DGX-H100", "--gpus", "13", "--global-batch", "13",
                 "--fsdp", "--json"]) == 0
    cap = capsys.readouterr()
    assert any("spread evenly over the 2 nodes" in n for n in json.loads(cap.out)["notes"]) and "warning:" in cap.err


def test_a_bare_cpu_device_prices_its_collectives_on_its_gloo_system(monkeypatch, capsys):
    """LLM training on a bare CPU device (the CPU profile bundle's ``cpu-amd-epyc-1c``) prices its data-parallel
    gradient reduction on the catalog's gloo system of that CPU, as ``--system cpu-amd-epyc-1c-gloo`` does
    (:func:`hybrid.ops.roofline.cpu_collective_system`, shared with DLRM and traces): before, a generic node's PCIe
    gen3 link priced GPT-3 125M's 2-rank all-reduce at 5.2 ms (45 ms on the profiled gloo system). More processes
    than that single-node system holds keep the generic node, and the note says why."""
    from hybrid.data.bundle import load_bundle
    from hybrid.data.paths import project_datasets_dir
    from hybrid.engine.costs import RooflineCostModel
    from hybrid.hardware.catalog import CATALOG_ENV

    bundle = project_datasets_dir() / "cpu-amd-epyc-1c"
    if not (bundle / "catalog.toml").is_file():
        pytest.skip("committed CPU profile bundle absent")
    cat = load_bundle(bundle)[1]
    model, cm = load_model("gpt3-125m"), RooflineCostModel(cat)
    cfg = TrainingConfig(gpus=2, global_batch=4, dtype="fp32", flash_attention=False, seq_length=256)
    dev, gloo = (predict_training(model, cfg, s, cm, engine=False) for s in ("cpu-amd-epyc-1c", "cpu-amd-epyc-1c-gloo"))
    assert dev.target.system == dev.target.comm_system == "cpu-amd-epyc-1c-gloo"
    assert any("cpu-amd-epyc-1c-gloo" in n for n in dev.notes) and not gloo.notes
    assert dev.breakdown_s["dp_comm"] == pytest.approx(gloo.breakdown_s["dp_comm"], rel=1e-12)
    assert dev.breakdown_s["dp_comm"] > 0.02 and dev.iteration_s == pytest.approx(gloo.iteration_s, rel=1e-12)
    eight = predict_training(model, TrainingConfig(gpus=8, global_batch=8, dtype="fp32", flash_attention=False,
                                                   seq_length=256), "cpu-amd-epyc-1c", cm, engine=False)
    assert eight.target.system == "cpu-amd-epyc-1c-node"
    assert any("8 processes are more than the 4 of cpu-amd-epyc-1c-gloo" in n for n in eight.notes)
    # the CLI's warning and --json notes
    monkeypatch.setenv(CATALOG_ENV, str(bundle / "catalog.toml"))
    assert main(["llm", "train", "gpt3-125m", "--system", "cpu-amd-epyc-1c", "--gpus", "2", "--global-batch", "4",
                 "--dtype", "fp32", "--json"]) == 0
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert out["system"] == "cpu-amd-epyc-1c-gloo" and any("cpu-amd-epyc-1c-gloo" in n for n in out["notes"])
    assert "cpu-amd-epyc-1c-gloo" in cap.err


def test_a_refusal_names_the_knobs_that_make_the_job_fit(capsys):
    """GPT-3 175B, tp 8 pp 8, micro-batch 4 on 80 GB A100s needs 168 GiB; by hand (FlashAttention, no SP, 18 B per
    parameter of the first stage's 2.8227e9 = 47.3 GiB (the norms and row-parallel biases whole on every TP rank),
    + 3 GiB reserve): micro-batch 1 keeps 8 microbatches x 12 layers of sbh(10 + 24/8) = 327 MB = 29.25 GiB + 8
    embedding dropout masks (0.19 GiB) -> 79.76 GiB; full
    recomputation at micro-batch 4 keeps 2sbh x 96 layers (18.0 GiB) + one layer being recomputed (1.22 GiB) + the
    masks (0.75 GiB) -> 70.29 GiB. Sequence parallelism or the distributed optimizer alone do not make it fit."""
    from hybrid.workloads.llm.train import memory_remedies

    model = load_model("gpt3-175b")
    s, h, t, b = 2048, 12288, 8, 4
    cfg = TrainingConfig(gpus=512, global_batch=512, tp=8, pp=8, micro_batch=b)
    # 12 layers of (12 h^2 + 7 h) / 8 split + 6 h whole, vocabulary-parallel embedding, whole position table
    states = 18 * (12 * ((12 * h * h + 7 * h) / t + 6 * h) + 51200 * h / t + 2048 * h) + 3 * GIB
    one = states + s * h * (10 + 24 / t) * 96 + s * h * 8
    full = states + 2 * s * b * h * 96 + s * b * h * (10 + 24 / t) + s * b * h * 8
    fixes = memory_remedies(model, cfg, "DGX-A100")
    assert [f["flags"] for f in fixes] == ["--micro-batch 1", "--recompute full"]
    assert fixes[0]["memory_gib"] == pytest.approx(one / GIB, rel=1e-4)
    assert fixes[1]["memory_gib"] == pytest.approx(full / GIB, rel=1e-4)
    assert memory_remedies(model, cfg.with_(micro_batch=1), "DGX-A100") == []  # it fits already
    job = ["gpt3-175b", "--system", "DGX-A100", "--gpus", "512", "--tp", "8", "--pp", "8", "--global-batch", "512"]
    assert main(["llm", "train", *job, "--micro-batch", "4"]) == 2
    err = capsys.readouterr().err
    assert "it fits with --micro-batch 1 (79.8 GiB) or --recompute full (70.3 GiB)" in err
    assert main(["llm", "memory", *job, "--micro-batch", "4", "--json"]) == 0
    assert [f["flags"] for f in json.loads(capsys.readouterr().out)["fits_with"]] == ["--micro-batch 1",
                                                                                    "--recompute full"]
    # nothing of its own knobs saves 175B on 8 GPUs; and where only all of them together fit, that is the remedy
    assert memory_remedies(model, TrainingConfig(gpus=8, global_batch=8, tp=8), "DGX-A100") == []
    assert main(["llm", "train", "gpt3-175b", "--system", "DGX-A100", "--gpus", "8", "--tp", "8",
                 "--global-batch", "8"]) == 2
    assert "none of its memory knobs" in capsys.readouterr().err
    long = TrainingConfig(gpus=8, global_batch=64, seq_length=32768, dropout=False)
    assert [f["flags"] for f in memory_remedies(load_model("llama3-8b"), long, "DGX-H100")] == \
        ["--fsdp --recompute full"]


def test_fsdp_remedy_of_a_distributed_optimizer_job_says_to_drop_it(capsys):
    """Llama-2-13B on 8 A100s with the distributed optimizer fits only with FSDP; the remedy said `--fsdp`, which added
    to that job's flags is refused ("choose one of --fsdp and --distributed-optimizer")."""
    job = ["llama2-13b", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "32", "--distributed-optimizer"]
    assert main(["llm", "memory", *job, "--json"]) == 0
    flags = [f["flags"] for f in json.loads(capsys.readouterr().out)["fits_with"]]
    assert flags == ["--fsdp (dropping --distributed-optimizer)"]
    assert main(["llm", "memory", *[a for a in job if a != "--distributed-optimizer"], "--fsdp", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is True  # what the remedy says to run fits
    # a job without the distributed optimizer keeps the plain flag
    assert main(["llm", "memory", *job[:-1], "--json"]) == 0
    assert "--fsdp" in [f["flags"] for f in json.loads(capsys.readouterr().out)["fits_with"]]


def test_selective_recomputation_with_flash_attention_is_noted_as_a_no_op(capsys):
    """With FlashAttention the 5as/h score term Korthikanti's selective recomputation drops is never stored:
    selective = none in memory (sbh(10 + 24/t) per layer either way) and time, which the job now says."""
    job = ["gpt3-175b", "--system", "DGX-A100", "--gpus", "64", "--tp", "8", "--pp", "8", "--global-batch", "64",
           "--json"]
    assert main(["llm", "memory", *job, "--recompute", "selective"]) == 0
    sel = json.loads(capsys.readouterr().out)
    assert main(["llm", "memory", *job]) == 0
    none = json.loads(capsys.readouterr().out)
    assert sel["memory_gib_per_rank"] == none["memory_gib_per_rank"] and "notes" not in none
    assert any("changes nothing" in n for n in sel["notes"])
    assert main(["llm", "memory", *job, "--recompute", "selective", "--no-flash-attention"]) == 0
    unfused = json.loads(capsys.readouterr().out)
    assert "notes" not in unfused and unfused["memory_gib_per_rank"] == pytest.approx(none["memory_gib_per_rank"])


def test_faster_gpus_and_more_gpus_never_predict_slower():
    """Every candidate mapping of Llama-3-8B on 16 GPUs (global batch 64, 8k tokens), on the roofline: the same plan
    is never slower on DGX H100 than on DGX A100, nor on DGX B200 than on DGX H100 (closed form, per mapping); and
    adding data-parallel replicas at a fixed global batch never lengthens the iteration (GPT-3 175B, tp 8 pp 8, 64
    to 1024 GPUs: the bubble stays (p - 1) t_microbatch while the microbatches per replica halve)."""
    from hybrid.engine.costs import default_cost_model
    from hybrid.hardware.catalog import default_catalog
    from hybrid.workloads.llm.costing import cost_mappings, resolve_target
    from hybrid.workloads.llm.schedule import closed_form, stage_times
    from hybrid.workloads.llm.train import candidate_mappings

    model = load_model("llama3-8b")
    base = search_base(16, 64, dropout=False)
    cm = default_cost_model()
    cand = None
    times = {}
    for system in ("DGX-A100", "DGX-H100", "DGX-B200"):
        tgt = resolve_target(system, default_catalog(), base.dtype)
        if cand is None:
            cand = candidate_mappings(model, base, tgt, max_vp=2)
        costs = cost_mappings(model, base, cand, tgt, cm)
        times[system] = closed_form(stage_times(model, base, costs), costs.mappings, base)["iteration_s"]
    assert len(cand) > 500
    assert (times["DGX-H100"] <= times["DGX-A100"]).all() and (times["DGX-B200"] <= times["DGX-H100"]).all()
    gpt = load_model("gpt3-175b")
    its = [predict_training(gpt, TrainingConfig(gpus=64 * dp, global_batch=1536, tp=8, pp=8, sp=True,
                                                distributed_optimizer=True), "DGX-H100", engine=False)
           for dp in (1, 2, 4, 8, 16)]
    assert all(b.iteration_s < a.iteration_s for a, b in zip(its[:-1], its[1:], strict=True))
    assert max(p.bubble_closed_form_s for p in its) == pytest.approx(min(p.bubble_closed_form_s for p in its))


def test_dropout_defaults_to_the_models_and_the_flag_overrides_it_both_ways(capsys):
    """llama3-70b trains without dropout: by default no masks are counted (hand count below) and no dropout ops
    are costed; --dropout / --no-dropout override the model either way, and every output says which was used."""
    llama, gpt = load_model("llama3-70b"), load_model("gpt3-1.3b")
    job = dict(gpus=64, global_batch=64, tp=8, pp=4)  # seq 8192, micro-batch 1, no SP, FlashAttention
    cfg = TrainingConfig(**job)
    assert cfg.dropout is None and not cfg.uses_dropout(llama) and cfg.uses_dropout(gpt)
    assert cfg.dropout_source() == "model" and cfg.with_(dropout=False).dropout_source() == "override"
    off, _ = memory_only(llama, cfg, "DGX-H100")
    on, _ = memory_only(llama, cfg.with_(dropout=True), "DGX-H100")
    assert memory_only(llama, cfg.with_(dropout=False), "DGX-H100")[0].row(0) == off.row(0)
    # masks (1 byte per element): hidden and attention-output masks, 2 h per token and layer, replicated over TP
    # without SP, on 20 layers x 4 microbatches in flight (1F1B on the first of 4 stages), + the embedding's mask
    h, tokens = 8192, 8192
    masks = 2 * h * tokens * 20 * 4 + h * tokens * 4
    assert (on.activations[0] - off.activations[0]) == pytest.approx(masks, rel=1e-12)
    assert masks / GIB == pytest.approx(10.25)
    # time: the dropout ops are in the job only when on
    small = dict(gpus=8, global_batch=8, tp=8, seq_length=2048)
    ops_model = predict_training(llama, TrainingConfig(**small), "DGX-H100", engine=False).ops
    ops_on = predict_training(llama, TrainingConfig(**small, dropout=True), "DGX-H100", engine=False).ops
    assert not (ops_model["variant"] == "dropout").any() and (ops_on["variant"] == "dropout").any()
    gpt_ops = predict_training(gpt, TrainingConfig(**small), "DGX-H100", engine=False).ops
    assert (gpt_ops["variant"] == "dropout").any()
    # the CLI: the model's by default, the flag either way, said in JSON and text
    args = ["--system", "DGX-H100", "--gpus", "64", "--tp", "8", "--pp", "4", "--global-batch", "64"]
    for flag, want, source in (([], False, "model"), (["--dropout"], True, "override"),
                               (["--no-dropout"], False, "override")):
        assert main(["llm", "memory", "llama3-70b", *args, *flag, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert (out["dropout"], out["dropout_from"]) == (want, source)
        assert out["memory_gib"]["activations"] == pytest.approx((on if want else off).activations[0] / GIB)
    assert main(["llm", "memory", "gpt3-1.3b", "--system", "DGX-H100", "--gpus", "8", "--global-batch", "8"]) == 0
    assert "dropout on (the model's)" in capsys.readouterr().out
    assert main(["llm", "train", "llama3-8b", "--system", "DGX-H100", "--gpus", "8", "--tp", "8", "--global-batch",
                 "8", "--seq", "2048", "--dropout", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["dropout"], out["dropout_from"]) == (True, "override")
    assert main(["llm", "search", "llama3-8b", "--system", "DGX-H100", "--gpus", "8", "--global-batch", "8",
                 "--seq", "2048", "--top", "1", "--max-cp", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["dropout"], out["dropout_from"]) == (False, "model")
    with pytest.raises(InvalidInputError, match="dropout"):
        TrainingConfig(gpus=8, global_batch=8, dropout="yes")  # type: ignore[arg-type]


def test_pipeline_pace_is_set_by_the_stage_with_the_most_moe_layers() -> None:
    """DeepSeek-style models put dense layers first: the pipeline rank holding them has fewer MoE layers than the
    others, and the slowest rank (all MoE) sets the pace. Layers were costed at the model's mean MoE share (13/16
    here), so every stage looked lighter than the all-MoE ones that really run: 3% fast at pp 4 on DeepSeek-V3's
    layer, ~5% when a fifth of the layers are dense. The busiest rank here holds only MoE layers, so the
    pipeline's per-stage times equal those of the same model with every layer MoE."""
    from hybrid.workloads.llm.model import with_overrides

    dsv3 = with_overrides(load_model("deepseek-v3"), num_layers=64, moe_first_k_dense=3)
    assert list(dsv3.moe_layers_per_rank(8)) == [5] + [8] * 7
    assert list(dsv3.moe_layers_per_rank(4, 2)) == [13, 16, 16, 16]  # rank 0: chunks of layers 0-7 and 32-39
    m = with_overrides(load_model("deepseek-v3"), num_layers=16, moe_first_k_dense=3)
    all_moe = with_overrides(m, moe_first_k_dense=0)
    for pp, vp in ((4, 1), (2, 2)):
        cfg = TrainingConfig(gpus=16 * pp, global_batch=64, tp=1, pp=pp, vp=vp, ep=16, seq_length=4096,
                             distributed_optimizer=True)
        got, ref = (predict_training(x, cfg, "DGX-H100", engine=False) for x in (m, all_moe))
        for part in ("compute", "ep_comm", "pipeline_bubble"):
            assert got.breakdown_s[part] == pytest.approx(ref.breakdown_s[part], rel=1e-9)
    # without pipeline parallelism every rank runs every layer: the mean is right, and below the all-MoE model
    cfg = TrainingConfig(gpus=16, global_batch=64, ep=16, seq_length=4096, distributed_optimizer=True)
    got, ref = (predict_training(x, cfg, "DGX-H100", engine=False) for x in (m, all_moe))
    assert got.breakdown_s["ep_comm"] == pytest.approx(ref.breakdown_s["ep_comm"] * 13 / 16, rel=1e-9)


def test_memory_counts_the_pipeline_rank_with_the_most_moe_layers() -> None:
    """The most loaded rank of a dense-first MoE model holds only MoE layers (pp 4, 16 layers, 3 dense: ranks 1-3
    hold 4 MoE layers each). Parameters per rank were the mean over the stages (3.25 MoE layers), so the last
    rank's weights were 6% short (8.82e9 of 9.35e9 bytes) of what it holds (the same as the all-MoE
    model's last rank); without pipeline parallelism the whole model is on every rank. The memory peak is then the
    stage whose own states and activations sum highest: here the first stage's activations beside the heaviest
    middle stage's states (4 MoE layers, no embedding), not the last stage's states beside the first stage's
    activations (pp 4: 88.52 -> 82.69 GiB; pp 2 vp 2: 148.28 -> 141.60; FSDP: 99.45 -> 93.41; with the shared
    expert's activations counted 83.30, 142.36, 94.02; with the attention output as wide as the values, 82.30,
    141.11, 93.02)."""
    from hybrid.workloads.llm.costing import mappings_frame, stage_params
    from hybrid.workloads.llm.model import with_overrides
    from hybrid.workloads.llm.train import memory_only

    m = with_overrides(load_model("deepseek-v3"), num_layers=16, moe_first_k_dense=3)
    all_moe = with_overrides(m, moe_first_k_dense=0)
    for (pp, vp, fsdp), total in zip(((4, 1, False), (2, 2, False), (4, 1, True)), (82.30, 141.11, 93.02),
                                     strict=True):
        cfg = TrainingConfig(gpus=16 * pp, global_batch=64, pp=pp, vp=vp, ep=16, seq_length=4096,
                             distributed_optimizer=not fsdp, fsdp=fsdp)
        got, ref = (stage_params(x, cfg, mappings_frame(cfg)) for x in (m, all_moe))
        assert got["max"][0] == pytest.approx(ref["max"][0], rel=1e-12), (pp, vp)
        assert memory_only(m, cfg, "DGX-H100")[0].row(0)["total"] == pytest.approx(total, abs=0.01), (pp, vp)
    cfg = TrainingConfig(gpus=16, global_batch=64, ep=16, seq_length=4096, distributed_optimizer=True)
    got, ref = (memory_only(x, cfg, "DGX-H100")[0] for x in (m, all_moe))
    assert got.weights[0] < 0.95 * ref.weights[0]  # 3 dense layers in place of MoE ones


def test_fsdp_with_pipeline_parallelism_gathers_once_per_step() -> None:
    """FSDP with PP (torchtitan, the framework that combines them: its default ``fsdp_reshard_after_forward`` keeps
    the stage gathered when PP is on, and PyTorch's pipeline schedules accumulate unsharded gradients, reduce-
    scattering them after the last backward) gathers each layer once per step, not once per microbatch in forward
    and again in backward: its FSDP traffic does not grow with the microbatches (Llama-3-70B, tp 8, pp 4, 64 H100s:
    6.17 s per 64-sequence step before, 3.17 s now), and the stage stays gathered, its gradients in fp32."""
    from hybrid.workloads.llm.train import memory_only

    m = load_model("llama2-7b")
    comm = {}
    for pp in (1, 2):
        for gb in (16, 64):
            cfg = TrainingConfig(gpus=16, global_batch=gb, pp=pp, fsdp=True, seq_length=1024)
            comm[pp, gb] = predict_training(m, cfg, "DGX-H100", engine=False).breakdown_s["fsdp_comm"]
    assert comm[1, 64] > 3.5 * comm[1, 16]  # every microbatch gathers again without PP
    assert comm[2, 64] == pytest.approx(comm[2, 16], rel=1e-9) and comm[2, 16] < comm[1, 16]
    cfg = TrainingConfig(gpus=16, global_batch=16, pp=2, fsdp=True, seq_length=1024)
    mem = memory_only(m, cfg, "DGX-H100")[0]
    stage = m.num_params / 2  # about half the model per stage
    assert mem.gathered[0] == pytest.approx(stage * (2 + 4), rel=0.05)


def test_context_parallel_ring_sends_the_whole_replicated_kv_heads_a_rank_holds():
    """With TP above the KV heads (Qwen3-30B-A3B: 4 KV heads at TP 8) each rank holds one whole, replicated KV
    head, as at TP 4, so the ring exchanges the same K/V bytes; it used to send kv_width / tp, half a head."""
    m = load_model("qwen3-30b-a3b")
    sent = {}
    for tp in (4, 8):
        cfg = TrainingConfig(gpus=16, global_batch=16, tp=tp, cp=2, seq_length=2048)
        ops = predict_training(m, cfg, "DGX-H100", engine=False).ops
        ring = ops[(ops["role"] == "cpf") & (ops["op"] == "send_recv")]
        assert len(ring) == 1
        sent[tp] = float(ring["size_bytes"].iloc[0])
    # one rank's K and V of its 1024 tokens: 1 head x 128 dims x 2 (K, V) x 2 bytes, once to the one other rank
    assert sent[4] == sent[8] == 1024 * 2 * 128 * 2


def test_fp32_fsdp_gathers_fp32_parameters():
    """fp32 training has no 16-bit copy: FSDP all-gathers the fp32 parameters it computes with and holds them (and
    their gradients) in fp32. `--dtype fp32 --fsdp` used to gather them in bf16 and count 2-byte gathered layers."""
    m = load_model("gpt3-1.3b")
    base = TrainingConfig(gpus=8, global_batch=32, fsdp=True)
    assert base.fsdp_gather_dtype == "bf16" and base.with_(dtype="fp32").fsdp_gather_dtype == "fp32"
    assert base.with_(dtype="fp32", fsdp_param_dtype="bf16").fsdp_gather_dtype == "bf16"  # an explicit choice stays
    gathered = {dt: memory_only(m, base.with_(dtype=dt), "DGX-A100")[0].gathered[0] for dt in ("bf16", "fp32")}
    assert gathered["fp32"] == pytest.approx(2 * gathered["bf16"])
    ops = predict_training(m, base.with_(dtype="fp32"), "DGX-A100", engine=False).ops
    ag = ops[ops["role"] == "fsdp_ag"]
    assert len(ag) == 1 and ag["dtype"].iloc[0] == "fp32"
    layer_params = m.param_counts()["layers_total"] / m.num_layers
    assert ag["size_bytes"].iloc[0] == pytest.approx(4 * layer_params)


def test_search_counts_the_reserve_train_and_memory_count(capsys):
    """`llm search --reserve-gib`: a mapping fits only with the framework reserve left free, as `llm train` /
    `llm memory` judge it (the search assumed 3 GiB whatever those were told): a 40 GiB reserve leaves fewer
    mappings, each within the GPU's memory with the reserve counted, and `llm memory` agrees on the fastest."""
    base = ["llm", "search", "llama2-13b", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "32", "--json"]
    assert main(base) == 0
    default = json.loads(capsys.readouterr().out)
    assert main([*base, "--reserve-gib", "40"]) == 0
    tight = json.loads(capsys.readouterr().out)
    assert 0 < tight["fitting"] < default["fitting"]
    best = tight["mappings"][0]
    assert best["memory_gib"] <= 80.0
    args = ["llm", "memory", "llama2-13b", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "32", "--json",
            "--tp", str(best["tp"]), "--pp", str(best["pp"]), "--cp", str(best["cp"]), "--vp", str(best["vp"]),
            "--micro-batch", str(best["mb"]), "--recompute", best["recompute"], "--reserve-gib", "40",
            *(["--sp"] if best["sp"] else []), *(["--distributed-optimizer"] if best["distopt"] else []),
            *(["--fsdp"] if best["fsdp"] else [])]
    assert main(args) == 0
    mem = json.loads(capsys.readouterr().out)
    assert mem["fits"] and mem["memory_gib"]["total"] == pytest.approx(best["memory_gib"], rel=1e-6)
    assert mem["memory_gib"]["reserve"] == 40.0
    assert main([*base, "--reserve-gib", "-1"]) == 2
    assert "reserve_gib must be >= 0" in capsys.readouterr().err


def test_allow_oom_predicts_and_still_says_what_makes_it_fit(capsys):
    """`llm train --allow-oom` on a job that does not fit: predicted, with the same remedies the refusal and
    `llm memory` give (`fits_with` in --json, after the reason in text); a job that fits has no such key."""
    job = ["llama2-13b", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "32"]
    assert main(["llm", "memory", *job, "--json"]) == 0
    remedies = json.loads(capsys.readouterr().out)["fits_with"]
    assert remedies and remedies[0]["flags"] == "--fsdp"
    assert main(["llm", "train", *job, "--allow-oom", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] is False and out["fits_with"] == remedies
    assert main(["llm", "train", *job, "--allow-oom"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("memory per GPU"))
    assert "it fits with --fsdp (" in line
    assert main(["llm", "train", *job, "--fsdp", "--json"]) == 0
    assert "fits_with" not in json.loads(capsys.readouterr().out)


def test_search_explains_an_mfu_above_100_percent(capsys):
    """`hybrid llm search` (and its --compare table) printed 102% MFU for the 8k-token job above with no word on
    why, while `llm train` explains it; a search that shows none above 100% says nothing."""
    args = ["llm", "search", "llama3-8b", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "64", "--top", "2"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "102." in text and "MFU above 100% because model FLOPs count the full s x s attention scores" in text
    assert main([*args[:-2], "--seq", "1024", "--top", "2"]) == 0
    assert "MFU above 100%" not in capsys.readouterr().out


def test_chunked_attention_layers_cost_their_within_chunk_pairs():
    """Llama 4's chunked local attention (8192-token chunks on 3 in 4 layers) was costed as global attention: a
    32k-token sequence's attention had 4x the within-chunk pairs on those layers. The fused attention row now
    counts the layer mean of the within-chunk and the global pairs, and the MFU's FLOPs likewise."""
    from hybrid.workloads.llm.model import with_overrides

    base = load_model("llama3-8b")
    chunked = with_overrides(base, attention_chunk_size=8192, chunk_layer_share=0.75)
    s = 32768
    cfg = TrainingConfig(gpus=8, global_batch=8, micro_batch=1, tp=8, flash_attention=True, seq_length=s)

    def attention_flops(model):
        ops = predict_training(model, cfg, "DGX-A100", engine=False).ops
        rows = ops[(ops["scope"] == "layer") & (ops["role"] == "f") & (family_array(ops["op"]) == "attention")]
        return float((FAMILIES["attention"].flops(rows) * rows["count"].to_numpy()).sum())

    full_pairs = s * (s + 1) / 2
    mixed = 0.75 * 4 * 8192 * 8193 / 2 + 0.25 * full_pairs
    assert attention_flops(chunked) == pytest.approx(attention_flops(base) * mixed / full_pairs, rel=1e-6)
    # causal-skip FLOPs per token: the mean keys per query of the mixed layers
    assert chunked.attention_span(s) == pytest.approx(mixed / s)
    att = 2.0 * (chunked.q_width + chunked.value_width) * chunked.num_layers
    assert base.forward_flops_per_token(s, causal_skip=True) - chunked.forward_flops_per_token(s, causal_skip=True) \
        == pytest.approx(att * (full_pairs - mixed) / s)
    # up to one chunk, chunked attention is global attention
    short = TrainingConfig(gpus=8, global_batch=8, micro_batch=1, tp=8, flash_attention=True, seq_length=8192)
    assert predict_training(chunked, short, "DGX-A100", engine=False).iteration_s == pytest.approx(
        predict_training(base, short, "DGX-A100", engine=False).iteration_s, rel=1e-9)


def test_reward_model_training_has_no_vocabulary_head():
    """A reward model (``LlamaForSequenceClassification``) trained as if it had an LM head: the output GEMMs over a
    128k vocabulary on every token, the fp32 cross entropy and its logits memory. Its score layer runs on the last
    token of each sequence; the MFU's model FLOPs drop the 2 h V per token."""
    from hybrid.workloads.llm.model import from_dict
    from hybrid.workloads.llm.train import model_flops

    base = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
            "num_key_value_heads": 8, "vocab_size": 128256, "intermediate_size": 14336,
            "max_position_embeddings": 8192}
    lm = from_dict({**base, "architectures": ["LlamaForCausalLM"]})
    reward = from_dict({**base, "architectures": ["LlamaForSequenceClassification"], "num_labels": 1})
    cfg = TrainingConfig(gpus=8, global_batch=8, micro_batch=1, tp=8, flash_attention=True, seq_length=4096)
    pl, pr = (predict_training(m, cfg, "DGX-A100", engine=False) for m in (lm, reward))

    def head_flops(pred):
        ops = pred.ops
        rows = ops[(ops["scope"] == "layer") & ops["role"].isin(["hf", "hb"]) & (family_array(ops["op"]) == "gemm")]
        return float((FAMILIES["gemm"].flops(rows) * rows["count"].to_numpy()).sum())

    assert head_flops(pl) == pytest.approx(3 * 2 * 4096 * 128256 / 8 * 4096, rel=0.01)
    assert head_flops(pr) == pytest.approx(3 * 2 * 1 * 4096 * 1, rel=1e-6)
    assert pr.iteration_s < pl.iteration_s
    mf_l, mf_r = model_flops(lm, cfg)[0], model_flops(reward, cfg)[0]
    assert mf_l - mf_r == pytest.approx(3 * 8 * 4096 * (2 * 4096 * 128256 - 2 * 4096 / 4096))


@pytest.mark.parametrize("local", [dict(window_size=4096, window_layer_share=1.0),
                                   dict(window_size=4096, window_layer_share=0.5),
                                   dict(attention_chunk_size=8192, chunk_layer_share=0.75)])
def test_context_parallel_keeps_windows_and_chunks(local):
    """At CP > 1 sliding-window (Mistral, Gemma) and chunked (Llama 4) layers were costed as global attention: each
    rank's attention had all s keys per query (a 64k sequence with a 4096 window: 4x the pairs of CP 1 at CP 2),
    and their K and V went round the ring hidden behind that inflated attention. By hand: a rank's attention is the
    CP 1 row's pairs / cp; the global layers' share keeps the ring of (cp - 1) x one rank's K and V, the local
    layers' share all-gathers the whole sequence's K and V (reduce-scattering dK, dV in backward), exposed, as
    Transformer Engine's all-gather CP runs windows (its ring refuses them)."""
    from hybrid.workloads.llm.model import with_overrides

    m = with_overrides(load_model("llama3-8b"), **local)
    share = local.get("window_layer_share", local.get("chunk_layer_share"))
    s, cp = 65536, 4
    base = TrainingConfig(gpus=4, global_batch=4, seq_length=s, recompute="full")

    def attention(cfg):
        ops = predict_training(m, cfg, "DGX-H100", engine=False).ops
        rows = ops[(ops["scope"] == "layer") & (ops["role"] == "f") & (family_array(ops["op"]) == "attention")]
        return float((FAMILIES["attention"].flops(rows) * rows["count"].to_numpy()).sum()), ops

    f1, _ = attention(base)
    fc, ops = attention(base.with_(cp=cp, global_batch=1))
    assert fc == pytest.approx(f1 / cp, rel=1e-9)
    kv_rank = (s // cp) * 2 * m.kv_width * 2  # one rank's K and V in bf16 (micro-batch 1, TP 1)
    ring = ops[ops["role"] == "cpf"]
    assert len(ring) == (share < 1)  # every layer local: no ring at all
    if share < 1:
        assert ring["op"].iloc[0] == "send_recv" and float(ring["size_bytes"].iloc[0]) == kv_rank * (cp - 1)
        assert float(ring["count"].iloc[0]) == pytest.approx(1.0 - share)
    gf, gb = ops[ops["role"] == "cpgf"], ops[ops["role"] == "cpgb"]
    assert list(gf["op"]) == ["all_gather"] and sorted(gb["op"]) == ["all_gather", "reduce_scatter"]
    assert set(gf["size_bytes"]) | set(gb["size_bytes"]) == {kv_rank * cp}
    assert np.allclose(np.r_[gf["count"], gb["count"]], share)
    # the gather is exposed: the breakdown's CP time holds at least it, per layer, microbatch and recomputed forward
    res = predict_training(m, base.with_(cp=cp, global_batch=1), "DGX-H100", engine=False)
    gathered = float((gf["total_s"]).sum() * 2 + gb["total_s"].sum()) * m.num_layers
    assert res.breakdown_s["cp_comm"] >= gathered * (1 - 1e-9) > 0


def test_context_parallel_of_global_attention_is_the_hidden_ring_only():
    """A model without windows keeps the overlapped ring alone (no all-gather rows)."""
    m = load_model("llama3-8b")
    ops = predict_training(m, TrainingConfig(gpus=4, global_batch=1, cp=4, seq_length=65536), "DGX-H100",
                           engine=False).ops
    assert not ops["role"].isin(["cpgf", "cpgb"]).any()
    assert float(ops.loc[ops["role"] == "cpf", "count"].iloc[0]) == 1.0


def test_bert_sequence_classifier_trains_with_its_pooler_and_classifier_not_the_mlm_head():
    """``BertForSequenceClassification`` was read as BERT with its MLM head: 30522-wide logits on every token, the
    fp32 cross entropy over them and their memory (and Megatron-key descriptions of an encoder classifier were
    refused). It is BertModel (embeddings, layers, pooler) plus a num_labels-wide classifier with bias on the pooled
    [CLS] token: transformers' parameter count exactly, the head GEMMs by hand."""
    from hybrid.workloads.llm.model import from_dict

    base = {"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
            "intermediate_size": 3072, "max_position_embeddings": 512, "type_vocab_size": 2, "vocab_size": 30522}
    cls = from_dict({**base, "architectures": ["BertForSequenceClassification"],
                     "id2label": {"0": "a", "1": "b", "2": "c"}})
    bare = from_dict({**base, "architectures": ["BertModel"]})
    mlm = from_dict({**base, "architectures": ["BertForMaskedLM"]})
    assert (cls.output_head, cls.num_labels, bare.output_head, mlm.output_head) == ("classifier", 3, "none", "lm")
    # transformers: BertModel (bert-base-uncased) 109,482,240 parameters; its classifier 768 x 3 + 3
    assert bare.num_params == 109_482_240 and cls.num_params == 109_482_240 + 768 * 3 + 3
    b, s = 32, 512
    cfg = TrainingConfig(gpus=1, global_batch=b, micro_batch=b, seq_length=s)
    pc, pm = (predict_training(m, cfg, "DGX-A100", engine=False) for m in (cls, mlm))
    head = pc.ops[(pc.ops["scope"] == "layer") & pc.ops["role"].isin(["hf", "hb"])
                  & (family_array(pc.ops["op"]) == "gemm")]
    assert not (head[["m", "n", "k"]] == 30522).any().any()
    # pooler (b x 768 x 768) and classifier (b x 768 x 3), forward and two backward GEMMs each
    assert float((FAMILIES["gemm"].flops(head) * head["count"].to_numpy()).sum()) == pytest.approx(
        3 * 2 * b * 768 * (768 + 3), rel=1e-9)
    assert pc.memory["logits"] < 1e-3 < pm.memory["logits"] and pc.iteration_s < pm.iteration_s
    # model FLOPs: the pooler and classifier once per sequence, not 2 h (h + V) per token
    assert model_flops(mlm, cfg)[0] - model_flops(cls, cfg)[0] == pytest.approx(
        3 * b * s * (2 * 768 * 768 + 2 * 768 * 30522 - (2 * 768 * 768 + 2 * 768 * 3) / s), rel=1e-9)
    # a Megatron-key description of an encoder classifier is accepted too
    assert from_dict({"num_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "ffn_hidden_size": 3072,
                      "vocab_size": 30522, "seq_length": 512, "encoder_only": True, "output_head": "classifier",
                      "num_labels": 3, "num_tokentypes": 2, "position_embedding_type": "learned_absolute"}
                     ).output_head == "classifier"


def test_bert_masked_lm_has_no_pooler_as_in_transformers():
    """``BertForMaskedLM`` builds its encoder with ``add_pooling_layer=False``: it was counted (and its config
    described) with BertModel's pooler, 1,049,600 parameters too many for BERT-large against transformers. Its
    parameters are transformers' exactly, and its head GEMMs are the MLM transform's alone; a model with the
    pooler and the MLM head (BertForPreTraining's layout, the library's bert-large) costs both."""
    from hybrid.workloads.llm.model import from_dict

    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    hf = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 256, "max_position_embeddings": 128, "type_vocab_size": 2, "vocab_size": 1000}
    mlm = from_dict({**hf, "architectures": ["BertForMaskedLM"]})
    kw = {k: v for k, v in hf.items() if k != "model_type"}
    with torch.device("meta"):
        ref = tf.BertForMaskedLM(tf.BertConfig(**kw))
    assert not mlm.pooler and mlm.num_params == sum(p.numel() for p in ref.parameters())
    b, s, h = 4, 128, 64
    cfg = TrainingConfig(gpus=1, global_batch=b, micro_batch=b, seq_length=s)

    def head_gemm_rows(model) -> list[int]:
        ops = predict_training(model, cfg, "DGX-A100", engine=False).ops
        sq = ops[(ops["scope"] == "layer") & (ops["role"] == "hf") & (family_array(ops["op"]) == "gemm")
                 & (ops["n"] == h) & (ops["k"] == h)]
        return sorted(int(m) for m in sq["m"])

    assert head_gemm_rows(mlm) == [b * s]
    pretraining = from_dict({**hf, "architectures": ["BertForPreTraining"]})
    assert pretraining.pooler and pretraining.num_params == mlm.num_params + h * h + h
    assert head_gemm_rows(pretraining) == [b, b * s]
    assert model_flops(pretraining, cfg)[0] - model_flops(mlm, cfg)[0] == pytest.approx(3 * b * 2 * h * h)
    # a Megatron-key description says it the same way
    assert from_dict({**mlm.to_dict(), "name": "x"}).num_params == mlm.num_params
    with pytest.raises(InvalidInputError, match="pooler"):
        from_dict({**mlm.to_dict(), "output_head": "classifier"})


def test_sequence_parallel_backward_all_gather_is_exposed_beyond_its_data_gradient_gemm():
    """Megatron-LM's column-parallel linears under SP all-gather their sequence-split input again in backward for
    the weight gradient, async beside the input-gradient GEMM only (layers.py: ``handle.wait()`` before the weight
    gradient). It was taken as hidden, never costed; a GQA model's QKV data-gradient GEMM ([T, h] x [h, 768] at TP 8
    for Llama-3-8B) is shorter than the gather of [T, h]. By hand: each block adds max(0, gather - its dgrad GEMM)."""
    m = load_model("llama3-8b")
    T, h, t = 4096, 4096, 8
    cfg = TrainingConfig(gpus=8, tp=8, sp=True, global_batch=4, seq_length=T)
    p = predict_training(m, cfg, "DGX-H100", engine=False)
    ops = p.ops[p.ops["scope"] == "layer"]
    ag = ops[(ops["role"] == "spgb")]
    assert len(ag) == 2 and set(ag["size_bytes"]) == {T * h * 2} and set(ag["op"]) == {"all_gather"}
    gather = float(ag["time_s"].iloc[0])

    def dgrad(k):  # the input-gradient GEMM [T, k] x [k, h] of the linear reading the norm output
        rows = ops[(ops["role"] == "b") & (ops["op"] == "gemm") & (ops["m"] == T) & (ops["n"] == h) & (ops["k"] == k)]
        assert len(rows) == 1
        return float(rows["total_s"].iloc[0])

    qkv, fc1 = dgrad((32 + 2 * 8) * 128 // t), dgrad(2 * 14336 // t)
    assert gather > qkv  # the case the old model missed
    exposed = max(0.0, gather - qkv) + max(0.0, gather - fc1)
    lay = ops.groupby("role")["total_s"].sum()
    tp_layer = float(lay["tpf"] + lay["tpb"]) + exposed
    assert p.breakdown_s["tp_comm"] == pytest.approx(cfg.num_microbatches * m.num_layers * tp_layer, rel=1e-9)
    # without SP there is no such gather (the all-reduce path keeps the whole input)
    ops_ar = predict_training(m, cfg.with_(sp=False), "DGX-H100", engine=False).ops
    assert not (ops_ar["role"] == "spgb").any()


def test_cp_all_gather_of_windowed_layers_counts_the_whole_sequence_kv_in_memory():
    """Sliding-window layers under CP all-gather the whole sequence's K and V (costing's cpgf / cpgb roles): every
    rank holds them, and in backward whole-sequence dK, dV beside them, for one layer; memory counts that by hand
    (``2 x b s 2 kv / t`` bytes, ``s`` the whole sequence) over the same model with global attention only."""
    from hybrid.workloads.llm.model import with_overrides

    mistral = load_model("mistral-7b")
    dense = with_overrides(mistral, window_size=None)
    s, kv = 32768, 8 * 128  # 8 KV heads of 128
    for tp, mb, dtype, eb in ((1, 1, "bf16", 2), (2, 2, "fp8", 2), (1, 1, "fp32", 4)):
        cfg = TrainingConfig(gpus=8 * tp, global_batch=mb, micro_batch=mb, tp=tp, cp=8, seq_length=s, dtype=dtype)
        windowed, _ = memory_only(mistral, cfg, "DGX-H100")
        plain, _ = memory_only(dense, cfg, "DGX-H100")
        extra = 2 * mb * s * 2 * kv / tp * eb
        assert windowed.activations[0] - plain.activations[0] == pytest.approx(extra, rel=1e-9)
        assert windowed.total[0] - plain.total[0] == pytest.approx(extra, rel=1e-9)
        # without CP the windowed layers attend locally: nothing gathered
        one, _ = memory_only(mistral, cfg.with_(gpus=tp, cp=1), "DGX-H100")
        ref, _ = memory_only(dense, cfg.with_(gpus=tp, cp=1), "DGX-H100")
        assert one.activations[0] == pytest.approx(ref.activations[0], rel=1e-12)


def test_closed_form_pipeline_is_the_engines_with_few_microbatches():
    """The closed form priced the bubble at the mean stage (the embedding and output layer spread over the stages)
    on top of ``m x t_max``: ``max(e, h) - (e + h)/pp`` too much, 5% with one microbatch on llama3-8b at pp 4
    (0.529 against the engine's 0.504 s). The busiest stage's idle time is the other stages' layers plus the
    lighter end: with one microbatch the pipeline is every stage once, forward and back, with its sends."""
    from hybrid.workloads.llm.costing import cost_mappings, mappings_frame
    from hybrid.workloads.llm.schedule import closed_form, simulate_mapping, stage_times
    from hybrid.workloads.llm.train import _prepare

    model = load_model("llama3-8b")
    for pp, vp, gb in ((4, 1, 1), (4, 1, 2), (8, 1, 3), (4, 1, 8), (4, 2, 4), (2, 4, 2)):
        cfg = TrainingConfig(gpus=pp, pp=pp, vp=vp, global_batch=gb)
        cm, tgt, _ = _prepare(model, cfg, "DGX-H100", None, None)
        costs = cost_mappings(model, cfg, mappings_frame(cfg), tgt, cm)
        st = stage_times(model, cfg, costs)
        cf = closed_form(st, costs.mappings, cfg)
        _, fig = simulate_mapping(st, 0, costs.mappings, cfg)
        assert float(cf["pipeline_s"][0]) == pytest.approx(fig["pipeline_s"], rel=1e-9), (pp, vp, gb)
        if gb == 1:  # by hand: the one microbatch through every stage's layers, both ends and 2 (pp - 1) sends
            layers = model.num_layers * float(st.layer_f[0] + st.layer_b[0])
            ends = float(st.embed_f[0] + st.embed_b[0] + st.head_f[0] + st.head_b[0])
            assert fig["pipeline_s"] == pytest.approx(layers + ends + 2 * (pp - 1) * float(st.p2p[0]), rel=1e-9)
    pred = predict_training(model, TrainingConfig(gpus=4, pp=4, global_batch=1), "DGX-H100")
    assert pred.closed_form_iteration_s == pytest.approx(pred.iteration_s, rel=1e-9)


def test_search_says_which_gpu_hour_prices_price_nothing(capsys):
    """`llm search --gpu-hour-price DGX-B200=3 --compare DGX-A100` on a DGX-H100 priced nothing and said nothing:
    every price column '-', no cost, no word that the B200's price was never used (nor, unlike `llm train`, that the
    searched system had no price)."""
    args = ["llm", "search", "gpt3-1.3b", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "32", "--top", "1",
            "--json"]
    assert main([*args, "--gpu-hour-price", "DGX-B200=3"]) == 0
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert out["gpu_hour_price"] is None and out["mappings"][0]["cost_per_1m_tokens"] is None
    assert "no GPU-hour price given for DGX-A100 (A100-SXM4-80GB)" in cap.err
    assert "the GPU-hour price of DGX-B200 prices none of the systems searched (DGX-A100): ignored" in cap.err
    assert any("DGX-B200" in n for n in out["notes"])
    # compared: only the price that prices no compared system is named; a GPU whose system has its own price too
    assert main([*args, "--compare", "DGX-H100", "--gpu-hour-price", "DGX-A100=2,DGX-H100=4,H100=3,B200=5"]) == 0
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert sorted(r["gpu_hour_price"] for r in out["compare"]) == [2.0, 4.0]
    assert "no GPU-hour price given" not in cap.err
    assert ("the GPU-hour price of H100-SXM, B200 prices none of the systems searched (DGX-A100, DGX-H100): ignored; "
            "a system's own price wins over its GPU's") in cap.err
    # every price used: nothing to say
    assert main([*args, "--compare", "DGX-H100", "--gpu-hour-price", "DGX-A100=2,H100=3"]) == 0
    assert "GPU-hour price" not in capsys.readouterr().err


def test_search_table_tells_close_mappings_apart(capsys):
    """The text table printed iter_s and engine_s at two decimals: the five fastest llama2-7b mappings on 16 H100s
    (0.8161 ... 0.8226 s) all read '0.82', so the table 'fastest first' showed no order at all."""
    args = ["llm", "search", "llama2-7b", "--system", "DGX-H100", "--gpus", "16", "--global-batch", "64", "--top", "6"]
    assert main([*args, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["mappings"]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[1]

    def column(name: str) -> list[str]:  # cells by position (the empty sp / optim cells leave no word)
        at = header.index(name)
        return [ln[at:].split()[0] for ln in lines[3:3 + len(rows)]]

    shown = [float(v) for v in column("iter_s")]
    assert shown == [pytest.approx(r["iteration_s"], rel=5e-4) for r in rows]
    assert len(set(shown)) == len(shown) and shown == sorted(shown)  # the order is visible
    engine = column("engine_s")
    assert engine[-1] == "-"  # beyond the engine-timed five
    assert float(engine[0]) == pytest.approx(rows[0]["engine_s"], rel=5e-4)


def test_training_on_bf16_without_bf16_units_says_so(capsys):
    """bf16 (the default) on a V100, which has no bf16 units, is costed at the fp32 peak (15.7 TFLOP/s, 8x below its
    fp16 tensor cores): `llm train` / `llm search` said nothing, and `--compare DGX-1` ranked the V100 node seven
    times slower than fp16 would, without a word, where `llm infer` warns."""
    job = ["gpt3-1.3b", "--gpus", "8", "--global-batch", "32"]
    v100 = "V100-SXM2-32GB has no bf16 units: it runs converted to fp32, at the fp32 peak (15.7 TFLOP/s)"
    assert main(["llm", "train", *job, "--system", "DGX-1", "--json"]) == 0
    cap = capsys.readouterr()
    assert v100 in cap.err and any(v100 in n for n in json.loads(cap.out)["notes"])
    assert main(["llm", "search", *job, "--system", "DGX-1", "--top", "1", "--json"]) == 0
    cap = capsys.readouterr()
    assert v100 in cap.err and any(v100 in n for n in json.loads(cap.out)["notes"])
    assert main(["llm", "search", *job, "--system", "DGX-A100", "--top", "1", "--compare", "DGX-1", "--json"]) == 0
    rows = {r["system"]: r for r in json.loads(capsys.readouterr().out)["compare"]}
    assert v100 in rows["DGX-1"]["note"] and "fp16 runs on its 125 TFLOP/s units" in rows["DGX-1"]["note"]
    # fp16, or bf16 on an A100: nothing to say
    assert main(["llm", "search", *job, "--system", "DGX-A100", "--top", "1", "--compare", "DGX-1", "--dtype", "fp16",
                 "--json"]) == 0
    cap = capsys.readouterr()
    assert "no bf16 units" not in cap.err and all(r["note"] in ("", "this run") for r in json.loads(cap.out)["compare"])


def test_search_compare_ranks_each_system_once(capsys):
    """`--compare DGX-H100,dgx-h100,NVIDIA DGX-H100` searched the DGX-H100 three times and ranked it in three rows."""
    assert main(["llm", "search", "gpt3-1.3b", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "32", "--top",
                 "1", "--compare", "DGX-H100,dgx-h100,NVIDIA DGX-H100,H100,DGX-A100", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["compare"]
    assert [r["system"] for r in rows] == ["DGX-H100", "H100-SXM-node", "DGX-A100"]


def test_search_pairs_expert_and_tensor_parallelism_with_sp_only(capsys):
    """Megatron-core refuses EP > 1 with TP > 1 unless sequence parallelism is on (ModelParallelConfig: 'When using
    expert parallelism and tensor parallelism, sequence parallelism must be used'); the search offered such
    mappings, and `llm train` costed them without a word."""
    mx = load_model("mixtral-8x7b")
    base = search_base(32, 64)
    tgt_cand = search(mx, base, "DGX-H100", top=100000, engine_top=0)
    both = tgt_cand[(tgt_cand["ep"] > 1) & (tgt_cand["tp"] > 1)]
    assert len(both) > 0 and both["sp"].all()
    assert ((tgt_cand["ep"] > 1) & (tgt_cand["tp"] == 1)).any()  # EP alone stays
    args = ["llm", "train", "mixtral-8x7b", "--system", "DGX-H100", "--gpus", "16", "--tp", "2", "--ep", "8",
            "--global-batch", "32", "--fsdp", "--recompute", "full", "--json"]
    assert main(args) == 0
    cap = capsys.readouterr()
    assert "sequence parallelism (ep 8, tp 2): add --sp" in cap.err
    assert any("Megatron-core refuses" in n for n in json.loads(cap.out)["notes"])
    assert main([*args, "--sp"]) == 0
    assert "Megatron-core" not in capsys.readouterr().err


def test_search_compare_rows_carry_their_systems_warnings(capsys):
    """A compared system's own warnings were dropped: `--compare H100` (a bare device, costed as generic nodes with a
    generic NIC) ranked beside the searched system without a word."""
    assert main(["llm", "search", "gpt3-1.3b", "--system", "DGX-A100", "--gpus", "16", "--global-batch", "32",
                 "--top", "1", "--compare", "H100,GB200-NVL72", "--json"]) == 0
    rows = {r["system"]: r for r in json.loads(capsys.readouterr().out)["compare"]}
    assert "H100-SXM is a device, not a catalog system" in rows["H100-SXM-node"]["note"]
    assert rows["GB200-NVL72"]["note"] == ""  # 16 GPUs of one NVL72 rack: nothing to say
    assert rows["DGX-A100"]["note"] == "this run"


def test_search_help_says_what_each_option_is(capsys):
    """`llm search --help` listed --system, --gpus, --global-batch, --seq, --no-flash-attention and --top bare."""
    assert main(["llm", "search", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for phrase in ("Catalog system", "Total GPUs", "Sequences per iteration", "Sequence length (default: the model's)",
                   "Unfused attention", "Fitting mappings shown", "MODEL_OR_FILE: a library name"):
        assert phrase in text, phrase


def test_search_compare_flags_systems_it_cannot_rank_apart(calibrated_store, capsys):
    """With a calibrated --model the mapping table flags the picks whose 80% interval overlaps the fastest's, but the
    --compare ranking of systems carried no interval: three systems within 2% in cost per token, well inside the
    model's own uncertainty, read as a firm ranking."""
    uri, _ = calibrated_store
    args = ["llm", "search", "gpt3-1.3b", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "32", "--top", "1",
            "--model", "llm-kern", "--tracking-uri", uri, "--compare", "DGX-H100,A100-SXM4-40GB"]

    def overlaps(a, b):
        return a[0] <= b[1] and a[1] >= b[0]

    for extra, by_cost in (([], False), (["--gpu-hour-price", "DGX-H100=4,A100-SXM4-40GB=1.5,DGX-A100=1.6"], True)):
        assert main([*args, *extra, "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)["compare"]
        assert rows[0]["overlaps_first"] is False

        def span(r, by_cost=by_cost):
            k = r["cost_per_1m_tokens"] / r["iteration_s"] if by_cost else 1.0
            return r["iteration_s_low"] * k, r["iteration_s_high"] * k

        for r in rows:
            assert r["iteration_s_low"] <= r["iteration_s"] <= r["iteration_s_high"]
        assert [r["overlaps_first"] for r in rows[1:]] == [overlaps(span(r), span(rows[0])) for r in rows[1:]]
        # by speed the H100 is clearly first; by cost at these prices the three are within the model's uncertainty
        assert any(r["overlaps_first"] for r in rows) == by_cost
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "overlap" in text and "interval overlaps the first system's" in text
    # without intervals (roofline): no flag
    assert main([*args[:11], "--compare", "DGX-H100", "--json"]) == 0
    assert all("overlaps_first" not in r for r in json.loads(capsys.readouterr().out)["compare"])



def test_train_memory_with_pp_takes_the_stage_of_the_largest_sum(capsys):
    """With PP the peak is the stage whose weights, gradients, optimizer and activations sum highest: the last stage
    holds one microbatch's activations and the logits but not the first stage's position table. GPT-3 125M (learned
    positions, tied output) on 2 stages peaks on the last stage, whose states are its own (1.57M fewer parameters
    than the first stage's); adding the first stage's states to the last stage's activations overstated it by 0.026
    GiB (7.141 -> 7.114)."""
    import pandas as pd

    from hybrid.workloads.llm.config import TrainingConfig
    from hybrid.workloads.llm.costing import stage_params
    from hybrid.workloads.llm.model import load_model

    rc = main(["llm", "memory", "gpt3-125m", "--system", "DGX-H100", "--gpus", "8", "--pp", "2",
               "--global-batch", "64", "--micro-batch", "4", "--json"])
    assert rc == 0
    mem = json.loads(capsys.readouterr().out)["memory_gib"]
    model = load_model("gpt3-125m")
    frame = pd.DataFrame({"tp": [1], "pp": [2], "dp": [4], "cp": [1], "ep": [1], "vp": [1], "mb": [4]})
    params = stage_params(model, TrainingConfig(gpus=8, global_batch=64, micro_batch=4, pp=2), frame)
    last, first = float(params["last"][0]), float(params["first"][0])
    assert first - last == pytest.approx(2048 * 768 - 2 * 768)  # the position table against the final norm
    assert mem["logits"] > 0  # the last stage
    assert mem["weights"] * 2**30 == pytest.approx(2.0 * last)
    assert mem["total"] == pytest.approx(7.114, abs=0.001)


def test_fused_attention_draws_the_attention_dropout_mask(gpt175):
    """A job that trains with dropout and flash attention runs the attention dropout inside the fused kernel
    (a Philox draw per score, forward and backward): its attention rows say so and cost more compute; without
    dropout, or unfused (dropout as its own elementwise op), the fused rows carry none."""
    from hybrid.hardware.catalog import default_catalog
    from hybrid.workloads.llm.costing import (
        FUSED_ATTENTION_DROPOUT,
        _layer_rows,
        mappings_frame,
        resolve_target,
    )

    base = dict(gpus=8, global_batch=16, micro_batch=2, tp=8, seq_length=2048, flash_attention=True)
    tgt = resolve_target("DGX-H100", default_catalog())
    rows = {}
    for drop in (True, False):
        cfg = TrainingConfig(**base, dropout=drop)
        r = _layer_rows(gpt175, cfg, mappings_frame(cfg), tgt)
        att = r[r["op"] == "attention"]
        assert len(att) >= 2  # forward and backward
        rows[drop] = att
    assert (rows[True]["dropout"] == FUSED_ATTENTION_DROPOUT).all()
    assert "dropout" not in rows[False] or rows[False]["dropout"].fillna(0).eq(0).all()
    with_, without = (predict_training(gpt175, TrainingConfig(**base, dropout=d), "DGX-H100") for d in (True, False))
    assert with_.breakdown_s["compute"] > without.breakdown_s["compute"]
