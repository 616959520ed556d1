"""LLM inference: KV cache, prefill/decode op graphs, static and continuous batching, memory limits, CLI."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from hybrid.cli.main import main
from hybrid.errors import InvalidInputError
from hybrid.workloads.llm.dims import INFERENCE_MODEL_NAMES, resolve_model
from hybrid.workloads.llm.inference import make_setup, predict_many, predict_static
from hybrid.workloads.llm.kv_cache import kv_bytes_per_token, memory_plan, weight_bytes_per_gpu
from hybrid.workloads.llm.precision import Precision, parse_precision
from hybrid.workloads.llm.serving import SLO, Trace, make_trace, max_rate, parse_dist, parse_rate, simulate


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# ------------------------------------------------------------------------------------------------ KV cache
def test_kv_cache_bytes_by_hand_mha_and_gqa():
    fp16 = Precision("fp16")
    # Llama-2-7B, MHA: 2 (K,V) x 32 layers x 32 heads x 128 dims x 2 bytes
    assert kv_bytes_per_token(resolve_model("llama2-7b"), fp16) == 2 * 32 * 32 * 128 * 2 == 524288
    # Llama-2-70B, GQA with 8 KV heads: 2 x 80 x 8 x 128 x 2; split 4 ways by KV heads, 2 ways by layers
    m70 = resolve_model("llama2-70b")
    assert kv_bytes_per_token(m70, fp16) == 2 * 80 * 8 * 128 * 2 == 327680
    assert kv_bytes_per_token(m70, fp16, tp=4) == 327680 / 4
    assert kv_bytes_per_token(m70, fp16, tp=4, pp=2) == 327680 / 8
    # more ranks than KV heads: each rank keeps one (replicated) KV head
    assert kv_bytes_per_token(m70, fp16, tp=16) == 2 * 80 * 1 * 128 * 2
    # fp8 cache halves it; the library's own count agrees
    assert kv_bytes_per_token(m70, Precision("fp16", kv="fp8")) == 327680 / 2
    from hybrid.workloads.llm.model import load_model

    assert kv_bytes_per_token(m70, fp16) == load_model("llama2-70b").kv_cache_bytes_per_token(2.0)
    # per request: tokens x per-token bytes; Mistral's sliding window caps what is kept
    plan = memory_plan(m70, fp16, 80 * 2**30, batch=2, input_len=1000, output_len=24, tp=4)
    assert plan.kv_per_request == 1024 * 327680 / 4 and plan.kv_cache == 2 * plan.kv_per_request
    mis = resolve_model("mistral-7b")
    short = memory_plan(mis, fp16, 80 * 2**30, batch=1, input_len=4000, output_len=96)
    long = memory_plan(mis, fp16, 80 * 2**30, batch=1, input_len=16000, output_len=96)
    assert short.kv_per_request == long.kv_per_request == 4096 * 2 * 32 * 8 * 128 * 2


def test_kv_heads_replicated_when_tp_exceeds_them_by_hand():
    """TP above the KV heads: every rank holds ceil(kv_heads / tp) whole KV heads, in its weights and its cache
    (not kv_heads / tp of a head)."""
    from hybrid.workloads.llm.kv_cache import activation_bytes
    from hybrid.workloads.llm.model import TransformerConfig

    fp16 = Precision("fp16")
    m = resolve_model("llama3-70b")  # 80 layers, hidden 8192, 64 heads / 8 KV heads of 128, FFN 28672, untied
    h, f, v, L = 8192, 28672, 128256, 80
    assert (m.num_layers, m.hidden_size, m.num_kv_heads, m.head_dim, m.ffn_hidden_size, m.vocab_size) == \
        (L, h, 8, 128, f, v)
    # TP 16: Q and output projections and the SwiGLU MLP split 16 ways; K and V of one whole head (128 columns each)
    layer = (2 * h * h + 3 * h * f) / 16 + 2 * h * 128 + 2 * h  # + two RMSNorms, whole on every rank
    ends = 2 * v * h / 16 + h  # vocab-parallel embedding and output layer, the final norm
    assert weight_bytes_per_gpu(m, fp16, tp=16) == pytest.approx(2 * (L * layer + ends), rel=1e-12)
    # the K/V columns per rank are those of TP 8 (one head either way): 2 x 80 x 2 x 8192 x 64 bytes more than a
    # split of 8 heads 16 ways would give
    split_by_tp = 2 * (L * ((2 * h * h + 3 * h * f + 2 * h * 8 * 128) / 16 + 2 * h) + ends)
    assert weight_bytes_per_gpu(m, fp16, tp=16) - split_by_tp == pytest.approx(2 * L * 2 * h * 64, rel=1e-12)
    # the cache: one head of K and V per layer per token, as at TP 8
    assert kv_bytes_per_token(m, fp16, tp=16) == kv_bytes_per_token(m, fp16, tp=8) == 2 * 80 * 128 * 2
    # the prefill working set: QKV output q/16 + 2 x 128 columns (the widest is still the MLP's here)
    assert float(activation_bytes(m, fp16, 1.0, 0.0, 16)) == 2 * (2 * h + 3 * f / 16)

    # multi-query attention (1 KV head) at TP 8: each rank holds the whole K and V head and caches it whole
    mqa = TransformerConfig(name="mqa", num_layers=2, hidden_size=1024, num_attention_heads=8, num_query_groups=1,
                            vocab_size=1000, add_bias_linear=False)  # head dim 128, GeLU FFN 4096, tied, LayerNorm
    layer = (2 * 1024 * 1024 + 2 * 1024 * 4096) / 8 + 2 * 1024 * 128 + 2 * 2 * 1024
    ends = 1000 * 1024 / 8 + 2048 * 1024 + 2 * 1024  # embedding (vocab-parallel), learned positions, final norm
    assert weight_bytes_per_gpu(mqa, fp16, tp=8) == pytest.approx(2 * (2 * layer + ends), rel=1e-12)
    assert kv_bytes_per_token(mqa, fp16, tp=8) == kv_bytes_per_token(mqa, fp16) == 2 * 2 * 1 * 128 * 2
    # QKV output per rank: 1024 / 8 query columns and a whole K and V head; the GeLU MLP (2 x 4096 / 8) is wider
    assert float(activation_bytes(mqa, fp16, 1.0, 0.0, 8)) == 2 * (2 * 1024 + max(128 + 2 * 128, 2 * 4096 / 8))


def test_every_inference_model_resolves_with_sensible_size():
    sizes = {n: resolve_model(n).num_params / 1e9 for n in INFERENCE_MODEL_NAMES}
    for name, approx in (("gptj-6b", 6.05), ("llama2-70b", 69), ("falcon-180b", 179), ("llama3-405b", 406),
                         ("mixtral-8x7b", 46.7), ("qwen3-235b-a22b", 235)):
        assert sizes[name] == pytest.approx(approx, rel=0.02)
    assert resolve_model("qwen3-235b-a22b").num_active_params / 1e9 == pytest.approx(22, rel=0.05)


@pytest.mark.parametrize("name,published", [("gptj-6b", None), ("llama2-7b", 6_738_415_616),
                                            ("mixtral-8x7b", 46_702_792_704), ("gpt2-large", 774_030_080)])
def test_inference_weight_bytes_are_the_library_parameter_count(name, published):
    """One source of truth: fp16 weights on one GPU are 2 bytes x the library's exact count (GPT-J's biases,
    GPT-2's learned position embedding included); split over TP they add back up to it (norms/biases and the
    position table replicated)."""
    m = resolve_model(name)
    if published is not None:  # Hugging Face's parameter count of the released checkpoint
        assert m.num_params == published
    published = m.num_params
    fp16 = Precision("fp16")
    assert weight_bytes_per_gpu(m, fp16) == 2 * published
    if m.num_attention_heads % 2 == 0 and m.num_query_groups % 2 == 0:
        half = weight_bytes_per_gpu(m, fp16, tp=2)
        assert published <= half < 1.01 * published  # half the bytes, plus the replicated norms and biases
    # weight-only int4 shrinks the GEMM weights only: norms, biases, embedding table stay 16 bit
    w4 = weight_bytes_per_gpu(m, Precision("fp16", weights="int4"))
    assert 0.25 * 2 * published < w4 < 0.5 * 2 * published


# ------------------------------------------------------------------------------------------------ decode physics
def test_decode_at_batch_1_is_memory_bound_and_tracks_weight_bytes_on_every_gpu(catalog):
    checked = 0
    for dev in catalog:
        if dev.kind != "gpu":
            continue
        if dev.peak("fp16") < dev.peak("fp32"):
            # Pascal GP10x boards run fp16 at 1/64 of fp32: an fp16 GEMV there really is compute-bound
            continue
        model = "llama2-7b" if dev.mem_capacity >= 20 * 2**30 else "gpt3-1.3b"
        s = make_setup(model, dev.key)
        r = predict_static(s, 1, 128, 64, decode_points=4)  # 4 sampled decode steps: batch 1's TPOT is ~flat
        ops = r.ops[r.ops["phase"] == "decode"]
        dec = ops[ops["op"].isin(["gemm", "gemv"])]
        assert (dec["memory_us"] > 5 * dec["compute_us"]).all(), (dev.key, dec[["name", "bound"]])
        assert dec["bound"].isin(["memory", "latency"]).all()
        ideal_ms = weight_bytes_per_gpu(s.model, s.precision) / dev.mem_bw * 1e3
        launch_ms = float((ops["latency_us"] * ops["count"]).sum()) / 1e3
        # weights stream once per token; beyond the per-kernel launch latency, KV and activations add a little
        assert 0.95 <= (r.tpot_ms - launch_ms) / ideal_ms < 1.25, (dev.key, r.tpot_ms, launch_ms, ideal_ms)
        checked += 1
    assert checked >= 15


def test_throughput_rises_then_saturates_with_batch():
    s = make_setup("llama2-7b", "A100")
    batches = np.array([1, 2, 4, 8, 16, 32, 64, 128, 192, 256])
    res = predict_many([s] * len(batches), batches, np.full(len(batches), 128), np.full(len(batches), 256))
    thr = res["output_tokens_per_s_per_gpu"].to_numpy()
    assert (np.diff(thr) > 0).all()
    assert thr[1] / thr[0] > 1.8  # memory-bound: twice the batch, almost twice the tokens
    assert thr[-1] / thr[-2] < 1.15  # compute- and KV-bound: more batch barely helps
    assert res["fits"].all()
    # the per-step latency grows with batch while per-token throughput saturates
    assert (np.diff(res["tpot_ms"].to_numpy()) > 0).all()


def test_weight_only_int4_speeds_up_memory_bound_decode_not_prefill():
    fp16 = predict_static(make_setup("llama2-7b", "A100"), 1, 2048, 64)
    w4 = predict_static(make_setup("llama2-7b", "A100", dtype="w4a16"), 1, 2048, 64)
    assert 2.0 < fp16.tpot_ms / w4.tpot_ms < 4.0
    assert w4.ttft_ms == pytest.approx(fp16.ttft_ms, rel=0.1)
    assert w4.memory.weights < 0.3 * fp16.memory.weights


def test_fp8_needs_a_device_with_an_fp8_rate():
    with pytest.raises(InvalidInputError, match="no fp8"):
        make_setup("llama2-7b", "A100", dtype="fp8")
    h = predict_static(make_setup("llama2-70b", "H100-SXM", dtype="fp8", tp=2), 8, 512, 64)
    b = predict_static(make_setup("llama2-70b", "H100-SXM", dtype="bf16", tp=2), 8, 512, 64)
    assert h.ttft_ms < b.ttft_ms and h.tpot_ms < b.tpot_ms


# ------------------------------------------------------------------------------------------------ fp4
def test_fp4_precision_bytes_and_defaults():
    p = parse_precision("fp4")
    assert p == parse_precision("nvfp4") == parse_precision("mxfp4") == Precision("fp4", weights="fp4")
    # NVFP4: a 4-bit value plus one fp8 scale per 16 values
    assert p.weight_bytes == 0.5 + 1 / 16 and p.gemm_input_bytes == 0.5625 and p.gemm_output_bytes == 2.0
    assert p.kv == "fp8" and p.attention_dtype == "fp8" and p.label == "fp4/kv-fp8"
    assert Precision("fp4", kv="fp4").kv_bytes == 0.5625
    with pytest.raises(InvalidInputError, match="weight-only int4 storage with fp4 compute"):
        Precision("fp4", weights="int4")
    # weight-only fp4 storage with 16-bit compute is still its own format (group-wise fp16 scales)
    assert parse_precision("fp16", weights="fp4").weight_bytes == 0.5 + 2 / 128


def test_fp4_needs_fp4_tensor_cores(catalog):
    with_fp4 = sorted(d.key for d in catalog if "fp4" in d.peak_flops)
    assert {"B200", "GB200", "B300", "GB300", "MI355X", "MI350X"} <= set(with_fp4)
    for key in with_fp4:  # dense FP4 is 2x dense FP8 (3x on Blackwell Ultra, which kept FP8 at B200's rate)
        dev = catalog.device(key)
        assert 1.9 <= dev.peak("fp4") / dev.peak("fp8") <= 3.1, key
    for key in ("H100-SXM", "H200", "A100", "MI300X"):
        with pytest.raises(InvalidInputError, match="no fp4 tensor-core rate"):
            make_setup("llama2-7b", key, dtype="fp4")
        assert catalog.device(key).peak_dtype("fp4") in ("fp8", "fp16")  # the roofline's fall-back path


def test_fp4_halves_compute_bound_prefill_and_shrinks_memory_bound_decode():
    fp8 = predict_static(make_setup("llama3-70b", "B200", dtype="fp8"), 64, 2048, 64)
    fp4 = predict_static(make_setup("llama3-70b", "B200", dtype="fp4"), 64, 2048, 64)
    pre8 = fp8.ops[(fp8.ops["phase"] == "prefill") & (fp8.ops["op"] == "linear")]
    pre4 = fp4.ops[(fp4.ops["phase"] == "prefill") & (fp4.ops["op"] == "linear")]
    big = pre8["name"].isin(["mlp_up_proj", "mlp_down_proj", "attn_pre_proj"])
    assert (pre8.loc[big, "bound"] == "compute").all() and (pre4.loc[big.to_numpy(), "bound"] == "compute").all()
    # FP4 tensor cores run twice the FP8 rate: the big prefill GEMMs take half the time (16-bit outputs do not
    # make a compute-bound GEMM slower)
    ratio = pre4.loc[big.to_numpy(), "time_us"].to_numpy() / pre8.loc[big, "time_us"].to_numpy()
    assert np.allclose(ratio, 0.5, rtol=0.02), ratio
    assert 0.5 < fp4.ttft_ms / fp8.ttft_ms < 0.7
    # decode at batch 1 streams the weights: 0.5625 bytes per weight instead of 1
    one8 = predict_static(make_setup("llama3-70b", "B200", dtype="fp8"), 1, 128, 64)
    one4 = predict_static(make_setup("llama3-70b", "B200", dtype="fp4"), 1, 128, 64)
    s4 = make_setup("llama3-70b", "B200", dtype="fp4")
    ideal_ms = weight_bytes_per_gpu(s4.model, s4.precision) / s4.device.mem_bw * 1e3
    ops = one4.ops[one4.ops["phase"] == "decode"]
    launch_ms = float((ops["latency_us"] * ops["count"]).sum()) / 1e3
    assert 0.95 <= (one4.tpot_ms - launch_ms) / ideal_ms < 1.25
    # the 16-bit output layer (2.1 GB, HEAD_16BIT) is read alike by both: ~71.6 / 41.2 GB of weights, less launches
    assert 1.40 < one8.tpot_ms / one4.tpot_ms < 1.74
    # less weight memory, so a larger batch fits
    c = s4.model.param_counts()  # fp4's 0.5625 bytes a weight against fp8's 1, the 16-bit output layer alike
    body = c["total"] - c["output_layer"]
    assert one4.memory.weights / one8.memory.weights == pytest.approx(
        (0.5625 * body + 2 * c["output_layer"]) / (body + 2 * c["output_layer"]), rel=0.03)
    assert one4.memory.max_batch > one8.memory.max_batch


def test_cli_infer_fp4(capsys):
    code, out, _ = run(capsys, "llm", "infer", "llama3-8b", "--device", "B200", "--dtype", "fp4", "--batch", "8",
                       "--json")
    assert code == 0
    d = json.loads(out)
    assert d["precision"] == "fp4/kv-fp8" and d["fits"] and d["tpot_ms"] > 0
    code, _, err = run(capsys, "llm", "infer", "llama3-8b", "--device", "H100-SXM", "--dtype", "fp4")
    assert code == 2 and "no fp4 tensor-core rate" in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------------------ refusals
def test_configurations_that_do_not_fit_are_refused_with_the_reason():
    with pytest.raises(InvalidInputError, match="weights alone"):
        predict_static(make_setup("llama2-70b", "A100"), 1, 128, 128)
    plan = memory_plan(resolve_model("llama2-7b"), Precision("fp16"), 80 * 2**30, batch=4096, input_len=2048,
                       output_len=2048)
    assert not plan.fits and f"at most batch {plan.max_batch}" in plan.reason and 0 < plan.max_batch < 4096
    ok = memory_plan(resolve_model("llama2-7b"), Precision("fp16"), 80 * 2**30, batch=plan.max_batch,
                     input_len=2048, output_len=2048)
    over = memory_plan(resolve_model("llama2-7b"), Precision("fp16"), 80 * 2**30, batch=plan.max_batch + 1,
                       input_len=2048, output_len=2048)
    assert ok.fits and not over.fits


@pytest.mark.parametrize("kwargs, match", [
    ({"tp": 3}, "does not divide"),
    ({"tp": 0}, "positive integer"),
    ({"pp": 40}, "exceeds"),
])
def test_bad_parallelism_is_refused(kwargs, match):
    with pytest.raises(InvalidInputError, match=match):
        make_setup("llama2-7b", "A100", **kwargs)


def test_zero_lengths_and_bad_distributions_are_refused():
    s = make_setup("llama2-7b", "A100")
    for b, i, o in ((0, 128, 128), (1, 0, 128), (1, 128, 0)):
        with pytest.raises(InvalidInputError, match="positive integer"):
            predict_static(s, b, i, o)
    for bad in ("0", "10-5", "exp:0", "normal:5", "abc"):
        with pytest.raises(InvalidInputError, match="length distribution"):
            parse_dist(bad)
    with pytest.raises(InvalidInputError):
        parse_rate("-3/s")
    assert parse_rate("600/min") == 10.0
    from hybrid.workloads.llm.serving import parse_time_ms

    # a zero SLO is a bound, not a typo: it said "bad time '0ms'" as for "abc"
    with pytest.raises(InvalidInputError, match="a time bound must be positive, got '0ms'"):
        parse_time_ms("0ms")
    with pytest.raises(InvalidInputError, match="bad time 'abc'"):
        parse_time_ms("abc")
    assert parse_time_ms("0.5s") == 500.0


# ------------------------------------------------------------------------------------------------ serving
def test_continuous_batching_low_rate_matches_single_request_and_load_raises_latency():
    s = make_setup("llama2-7b", "A100")
    lo = simulate(s, make_trace(0.2, 40, parse_dist("512"), parse_dist("64"), seed=1))
    single = predict_static(s, 1, 512, 64)
    # alone in the system a request's TTFT and TPOT are the static batch-1 figures
    assert np.median(lo.ttft_ms) == pytest.approx(single.ttft_ms, rel=0.15)
    assert np.median(lo.tpot_ms) == pytest.approx(single.tpot_ms, rel=0.15)
    hi = simulate(s, make_trace(40.0, 200, parse_dist("512"), parse_dist("64"), seed=1))
    assert np.percentile(hi.tpot_ms, 50) > np.percentile(lo.tpot_ms, 50)
    assert hi.output_tokens_per_s_per_gpu > 10 * lo.output_tokens_per_s_per_gpu
    assert hi.max_running > lo.max_running


def test_offline_rate_queues_every_request_at_once_and_reproduces_the_static_batch():
    """``--rate inf`` (vendor throughput benchmarks): all requests at time 0, the same lengths as at any finite
    rate; with a whole-batch prefill step it is the static batch of vendor tables, and no finite rate serves
    the same requests faster."""
    import math

    from hybrid.workloads.llm.serving import SchedulerConfig

    assert parse_rate("inf") == parse_rate(" MAX ") == parse_rate("offline") == math.inf
    with pytest.raises(InvalidInputError, match="bad rate"):
        parse_rate("infinity/s")
    dists = parse_dist("lognormal:300,0.5"), parse_dist("16-64")
    offline, finite = make_trace(math.inf, 50, *dists, seed=3), make_trace(7.0, 50, *dists, seed=3)
    assert np.all(offline.arrival_s == 0) and np.all(np.diff(finite.arrival_s) > 0)
    assert np.array_equal(offline.input_len, finite.input_len)
    assert np.array_equal(offline.output_len, finite.output_len)
    s = make_setup("llama2-7b", "A100")
    static = predict_static(s, 64, 512, 64)
    res = simulate(s, make_trace(math.inf, 64, parse_dist("512"), parse_dist("64")),
                   sched=SchedulerConfig(max_batched_tokens=64 * 512, max_seqs=64))
    assert res.max_running == 64 and res.steps == 64  # one prefill step, then 63 decode steps
    assert res.output_tokens_per_s_per_gpu == pytest.approx(static.output_tokens_per_s_per_gpu, rel=0.03)
    assert np.median(res.tpot_ms) == pytest.approx(static.tpot_ms, rel=0.03)
    lo = simulate(s, make_trace(40.0, 200, parse_dist("512"), parse_dist("64"), seed=1))
    hi = simulate(s, make_trace(math.inf, 200, parse_dist("512"), parse_dist("64"), seed=1))
    assert hi.output_tokens_per_s_per_gpu > lo.output_tokens_per_s_per_gpu
    # with attention data parallelism too: a step's tokens and prompt chunks spread over the ranks (the serving
    # steps had put every token on one rank: TTFT 4x the static batch's, throughput below plain TP)
    for adp in (False, True):
        s = make_setup("qwen3-30b-a3b", system="DGX-H100", tp=4, ep=4, dtype="fp8", attention_dp=adp)
        static = predict_static(s, 64, 1000, 256)
        res = simulate(s, make_trace(math.inf, 64, parse_dist("1000"), parse_dist("256")),
                       sched=SchedulerConfig(max_batched_tokens=64000, max_seqs=64))
        assert res.output_tokens_per_s_per_gpu == pytest.approx(static.output_tokens_per_s_per_gpu, rel=0.03), adp
        assert np.median(res.ttft_ms) == pytest.approx(static.ttft_ms, rel=0.05), adp


def test_offline_short_prompts_in_one_step_share_one_attention_kernel():
    """A step's prompt chunks run in one attention kernel per layer (FlashAttention varlen, TensorRT-LLM's context
    FMHA), as the static batch's one prefill pass does: 128 prompts of 16 tokens prefilled in one step reach their
    first token when the static batch does. Costed as 128 separate kernels, every one paying the launches, the step
    took 2.4x as long (TTFT 27.6 ms against 11.4 on 8 H100s)."""
    import math

    from hybrid.workloads.llm.serving import SchedulerConfig

    s = make_setup("llama3-8b", system="DGX-H100", tp=8)
    static = predict_static(s, 128, 16, 8)
    res = simulate(s, make_trace(math.inf, 128, parse_dist("16"), parse_dist("8")),
                   sched=SchedulerConfig(max_batched_tokens=128 * 16, max_seqs=128))
    assert res.steps == 8  # one prefill step, then 7 decode steps
    assert np.median(res.ttft_ms) == pytest.approx(static.ttft_ms, rel=0.03)
    assert np.median(res.tpot_ms) == pytest.approx(static.tpot_ms, rel=0.03)


def test_serve_decode_steps_of_a_few_moe_requests_cost_what_the_static_batch_does():
    """A decode-only step carries one token per running request; an MoE layer's cost steps with the experts those
    tokens hit, so the token grid holds every batch the static batch prices: 6 Mixtral requests decoding on two
    H100s (default scheduler) cost a static batch of 6. Interpolated between the log grid's 5 and 8 tokens, their
    TPOT came out 7% short (13.5 ms against 14.6)."""
    import math

    s = make_setup("mixtral-8x7b", system="DGX-H100", tp=2)
    for n in (6, 7):
        static = predict_static(s, n, 128, 64)
        res = simulate(s, make_trace(math.inf, n, parse_dist("128"), parse_dist("64")))
        assert np.median(res.tpot_ms) == pytest.approx(static.tpot_ms, rel=0.005), n


def test_serve_prices_mla_prompt_projections_as_the_static_batch_does():
    """MLA expands a prompt's latent into per-head keys and values (``attn_kv_b_proj``, as vLLM and SGLang prefill)
    and runs a decode step absorbed; serve priced every token's projections as a decode step's absorbed GEMMs, so
    DeepSeek-V3 on 8 H200s (fp8), prompts of 1024 tokens: TTFT 42.71 ms against the static batch's 42.30 (+0.96%).
    Prompt and decode tokens now take their own path in a step."""
    from hybrid.workloads.llm.serving import SchedulerConfig

    s = make_setup("deepseek-v3", system="DGX-H200", tp=8, dtype="fp8")
    for n in (1, 4):
        static = predict_static(s, n, 1024, 2)
        res = simulate(s, make_trace(math.inf, n, parse_dist("1024"), parse_dist("2")),
                       sched=SchedulerConfig(max_batched_tokens=4096, max_seqs=n))
        assert np.median(res.ttft_ms) == pytest.approx(static.ttft_ms, rel=1e-4), n
        assert np.median(res.tpot_ms) == pytest.approx(static.tpot_ms, rel=1e-4), n


def test_simulate_refuses_a_trace_out_of_arrival_order():
    """The scheduler admits requests first come first served in the trace's order, so a Trace built by hand with a
    later request listed first made the earlier one wait for it (its TTFT 5 s, the run's duration 0.06 s);
    read_trace and make_trace sort, and simulate now refuses an unsorted trace rather than answer wrongly."""
    from hybrid.workloads.llm.serving import Trace

    s = make_setup("llama3-8b", "H100-SXM")
    lengths = np.array([100, 100]), np.array([10, 10])
    with pytest.raises(InvalidInputError, match="in order of arrival: request 2 arrives at 0 s, before request 1"):
        simulate(s, Trace(np.array([5.0, 0.0]), *lengths))
    ok = simulate(s, Trace(np.array([0.0, 5.0]), *lengths))
    assert ok.ttft_ms[1] == pytest.approx(ok.ttft_ms[0], rel=0.2) and ok.duration_s > 5


def test_scheduler_limits_are_named_as_the_cli_spells_them():
    """`--max-seqs 0` said "max_batched_tokens and max_seqs must be >= 1": neither which one nor the flag; a
    fractional limit from Python (2048.5 tokens a step) was taken as given."""
    from hybrid.workloads.llm.serving import SchedulerConfig

    with pytest.raises(InvalidInputError, match=r"^--max-seqs must be a positive integer, got 0$"):
        SchedulerConfig(2048, 0)
    with pytest.raises(InvalidInputError, match=r"^--max-batched-tokens must be a positive integer, got 2048.5$"):
        SchedulerConfig(2048.5, 16)


def test_highest_rate_meeting_the_slo():
    s = make_setup("llama2-7b", "A100")
    slo = SLO(ttft_ms=250, tpot_ms=40)
    rate, res = max_rate(s, slo, 120, parse_dist("256-768"), parse_dist("64"), iterations=7)
    assert rate > 0 and slo.met(res)
    worse = simulate(s, make_trace(rate * 2.5, 120, parse_dist("256-768"), parse_dist("64")))
    assert not slo.met(worse)


def test_highest_rate_is_bracketed_beyond_the_saturation_estimate():
    """A short trace drains before its queue grows, so rates far above the saturated throughput can still meet a
    loose SLO: the answer is a rate that meets it with a slightly higher one that misses it (the search doubled
    its upper bound until it missed), for Poisson and evenly spaced arrivals alike."""
    s = make_setup("llama2-7b", "A100")
    slo = SLO(ttft_ms=1200)  # all 60 at once miss it (p99 TTFT 1.5-1.6 s)
    dists = parse_dist("256-768"), parse_dist("64")
    for arrival in ("poisson", "uniform"):
        rate, res = max_rate(s, slo, 60, *dists, iterations=12, arrival=arrival)
        assert np.isfinite(rate) and slo.met(res)
        assert slo.met(simulate(s, make_trace(rate, 60, *dists, arrival=arrival)))
        assert not slo.met(simulate(s, make_trace(rate * 1.25, 60, *dists, arrival=arrival)))
    # the saturation estimate (1.5x the burst's request throughput) would have capped the answer below it
    burst = simulate(s, make_trace(1e6, 60, *dists))
    assert rate > 1.5 * burst.output_tokens_per_s_per_gpu / 64
    # a handful of requests meeting the SLO even all at once: no rate bounds them
    rate, res = max_rate(s, SLO(ttft_ms=5000), 4, *dists)
    assert rate == np.inf and res is not None


# ------------------------------------------------------------------------------------------------ CLI
def test_cli_infer_json_keys(capsys):
    code, out, _ = run(capsys, "llm", "infer", "llama3-8b", "--device", "H100-SXM", "--batch", "64", "--input", "128",
                       "--output", "128", "--dtype", "fp8", "--json")
    assert code == 0
    d = json.loads(out)
    for k in ("ttft_ms", "tpot_ms", "latency_ms", "output_tokens_per_s_per_gpu", "max_batch", "fits", "breakdown_ms"):
        assert k in d
    assert d["fits"] is True and d["max_batch"] >= 64 and d["ttft_ms"] > 0


def test_one_output_token_has_no_tpot_in_infer_and_predict_many(capsys):
    """`--output 1`: no decode step, so TPOT is undefined: null in JSON and "n/a" in text with a note (it read 0.0,
    a time per output token no deployment has), NaN in predict_many's table, as `serve` leaves it out."""
    code, out, _ = run(capsys, "llm", "infer", "llama3-8b", "--device", "H100-SXM", "--output", "1", "--json")
    d = json.loads(out)
    assert code == 0 and d["tpot_ms"] is None and d["ttft_ms"] > 0 and d["latency_ms"] == d["ttft_ms"]
    assert any("TPOT" in n and "undefined" in n for n in d["notes"])
    code, out, _ = run(capsys, "llm", "infer", "llama3-8b", "--device", "H100-SXM", "--output", "1")
    row = next(line for line in out.splitlines() if line.startswith("tpot_ms"))
    assert code == 0 and row.split()[1] == "n/a" and "TPOT (time per output token after the first) is undefined" in out
    s = make_setup("llama3-8b", "H100-SXM")
    res = predict_many([s, s], [1, 1], [128, 128], [1, 2])
    assert np.isnan(res["tpot_ms"].iloc[0]) and np.isnan(res["roofline_tpot_ms"].iloc[0])
    assert res["tpot_ms"].iloc[1] > 0
    two = predict_static(s, 1, 128, 2)
    assert two.tpot_ms == pytest.approx(res["tpot_ms"].iloc[1], rel=1e-6)
    # a pipeline's note gave a "token period" of the sends alone (0.02 ms for llama3-70b on pp 2)
    pipe = predict_static(make_setup("llama3-70b", "H100-SXM", "DGX-H100", tp=4, pp=2), 1, 128, 1)
    note = next(n for n in pipe.notes if n.startswith("pipeline schedule"))
    assert pipe.tpot_ms is None and "token period" not in note and note.endswith("no decode step")
    # and no decode breakdown, as without a pipeline (it had a "pipeline" category of 0.0 ms)
    assert pipe.breakdown_ms["decode"] == {} and predict_static(s, 1, 128, 1).breakdown_ms["decode"] == {}


def test_cli_refusals_exit_2_with_one_line(capsys):
    code, out, err = run(capsys, "llm", "infer", "llama2-70b", "--device", "A100", "--json")
    assert code == 2 and "does not fit" in err and json.loads(out)["fits"] is False
    code, _, err = run(capsys, "llm", "infer", "llama2-7b", "--device", "A100", "--tp", "3")
    assert code == 2 and "does not divide" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "llm", "infer", "llama2-7b", "--device", "A100", "--input", "0")
    assert code == 2 and "--input" in err
    code, _, err = run(capsys, "llm", "infer", "no-such-model", "--device", "A100")
    assert code == 2 and "unknown model" in err
    # a context past the model's positions is costed (rotary models run past it) with a warning line
    code, out, err = run(capsys, "llm", "infer", "llama2-7b", "--device", "A100", "--batch", "1", "--input", "3000",
                         "--output", "2000", "--json")
    assert code == 0 and "warning: a context of 5000 tokens exceeds the 4096 positions" in err
    assert any("exceeds" in n for n in json.loads(out)["notes"])
    # a learned position table (GPT-2: 1024 rows) has no embedding past its positions: said so, not "built for"
    code, out, err = run(capsys, "llm", "infer", "gpt2-large", "--device", "A100", "--batch", "1", "--input", "3000",
                         "--output", "2000", "--json")
    assert code == 0 and "learns 1024 absolute position embeddings" in err and "cannot run" in err
    assert any("cannot run" in n for n in json.loads(out)["notes"])
    code, _, err = run(capsys, "llm", "infer", "gpt2-large", "--device", "A100", "--batch", "1", "--input", "512",
                       "--output", "512")
    assert code == 0 and "position" not in err


def test_capacity_prefill_activations_are_named_and_capped(capsys):
    """A static batch prefills every prompt at once, so at 1024 + 1024 tokens a 70B model's largest batch is set as
    much by the prefill's working set as by its KV cache: the note says so, and --max-num-tokens (chunks of at most
    that many prompt tokens per pass) lifts the batch to what the cache alone allows."""
    from hybrid.workloads.llm.kv_cache import GIB, activation_bytes, max_context, request_bytes

    args = ("llm", "capacity", "llama2-70b", "--device", "A100", "--tp", "4", "--input", "1024", "--output", "1024",
            "--json")
    code, out, _ = run(capsys, *args)
    whole = json.loads(out)
    row = whole["by_context"][0]
    assert code == 0 and whole["max_num_tokens"] is None and "prefill activations" in row["reason"]
    assert row["activations_gib"] > 0.1 * (row["activations_gib"] + row["kv_cache_gib"])
    code, out, _ = run(capsys, *args, "--max-num-tokens", "4096")
    capped = json.loads(out)
    crow = capped["by_context"][0]
    assert code == 0 and capped["max_num_tokens"] == 4096 and "prefill activations" not in crow["reason"]
    # by hand: what is left beside weights, reserve, one pass of 4096 prompt tokens and the batch's logits
    s = make_setup("llama2-70b", "A100", tp=4)
    per_req = 2 * 80 * 2 * 128 * 2 * 2048  # KV bytes per request per GPU at TP4, fp16
    free = s.device.mem_capacity - 2 * GIB - weight_bytes_per_gpu(s.model, s.precision, 4)
    act = float(activation_bytes(s.model, s.precision, 4096.0, 0.0, 4))
    logit = float(activation_bytes(s.model, s.precision, 0.0, 1.0, 4))
    assert capped["max_batch"] == int((free - act) // (per_req + logit))
    assert capped["max_batch"] > 1.3 * whole["max_batch"]
    assert crow["kv_cache_gib"] == pytest.approx(capped["max_batch"] * per_req / GIB)
    # what `llm infer` (one prefill pass) can run instead is said, and is what the uncapped table gives
    assert capped["static_max_batch"] == whole["max_batch"] and "llm serve" in capped["notes"][-1]
    assert "static_max_batch" not in whole
    # the longest context for a batch: uncapped as the closed form (every token of the context a prompt token,
    # all in one pass), longer with the cap, and never past the memory it claims to fit
    kw = {"batch": 8, "tp": 4}
    one = max_context(s.model, s.precision, s.device.mem_capacity, **kw)
    lg = request_bytes(s.model, s.precision, context=0, **kw)
    assert one == int((free - lg) // (request_bytes(s.model, s.precision, context=1, **kw) - lg))
    chunked = max_context(s.model, s.precision, s.device.mem_capacity, prefill_tokens=4096, **kw)
    assert chunked > one
    need = lambda c: lg + 8 * c * per_req / 2048 + act / 4096 * min(8 * c, max(4096, c))  # noqa: E731
    assert need(chunked) <= free < need(chunked + 1)
    code, _, err = run(capsys, *args, "--max-num-tokens", "0")
    assert code == 2 and "--max-num-tokens must be a positive integer" in err
    # the longest context for a batch agrees with the table: a batch the table fits at a context has at least that
    # context, with a sliding window on half the layers (gpt-oss) and with the --input / --output share as prompt
    for name, dev, inp, out_len, extra in (("gpt-oss-20b", "H100-SXM", 65536, 65536, ("--max-num-tokens", "8192")),
                                           ("llama2-7b", "H100-SXM", 1024, 1024, ())):
        code, o, _ = run(capsys, "llm", "capacity", name, "--device", dev, "--input", str(inp), "--output",
                         str(out_len), *extra, "--json")
        most = json.loads(o)["max_batch"]
        code, o, _ = run(capsys, "llm", "capacity", name, "--device", dev, "--input", str(inp), "--output",
                         str(out_len), "--batch", str(most), *extra, "--json")
        mc = json.loads(o)["max_context_for_batch"]
        assert code == 0 and mc["max_context"] >= inp + out_len and mc["prompt_share"] == pytest.approx(0.5)
    # a learned position table: the longest context says the model cannot run it
    code, o, err = run(capsys, "llm", "capacity", "gpt2-large", "--device", "A100", "--batch", "4", "--json")
    d = json.loads(o)
    assert d["max_context_for_batch"]["max_context"] > 1024 and "1024 absolute positions" in d["max_context_for_batch"]["note"]
    assert all("learned positions" in r["reason"] for r in d["by_context"] if r["context"] > 1024)


def test_cli_capacity_and_serve(capsys):
    code, out, _ = run(capsys, "llm", "capacity", "llama2-70b", "--device", "A100", "--tp", "4", "--input", "1024",
                       "--output", "1024", "--json")
    assert code == 0
    d = json.loads(out)
    kv = 2 * 80 * 2 * 128 * 2  # per token per GPU at TP4
    assert d["kv_bytes_per_token_per_gpu"] == kv and d["max_batch"] > 0 and d["fits"]
    assert d["system"] and d["gpus"] == 4  # the deployment's keys, as in `llm infer` / `llm serve`
    code, out, _ = run(capsys, "llm", "capacity", "llama3-8b", "--device", "H100-SXM", "--json")
    assert code == 0 and 65536 in [r["context"] for r in json.loads(out)["by_context"]]  # the grid has no gap at 64k
    # nothing fits (70B fp16 weights alone exceed one 80 GB GPU): reported, then a non-zero exit with the reason
    code, out, err = run(capsys, "llm", "capacity", "llama2-70b", "--device", "A100", "--input", "1024",
                         "--output", "1024", "--json")
    d = json.loads(out)
    assert code == 2 and not d["fits"] and d["max_batch"] == 0
    assert "does not fit" in err and d["by_context"][0]["reason"] in err
    code, out, err = run(capsys, "llm", "capacity", "llama2-70b", "--device", "A100")
    assert code == 2 and "max batch" in out and "does not fit at any context" in err
    # a batch too large for even one token of KV cache per request is refused with the reason, not "0 tokens"
    code, out, err = run(capsys, "llm", "capacity", "llama2-70b", "--device", "A100", "--tp", "4", "--batch",
                         "10000000", "--json")
    d = json.loads(out)
    assert code == 2 and d["fits"] is False and d["max_context_for_batch"]["max_context"] == 0
    assert "batch 10000000 does not fit at any context" in err
    # the reason names the batch, not the weights, and the largest batch it gives does fit (one more does not)
    most = int(err.split("at most ")[1].split(" requests")[0].replace(",", ""))
    for b, ctx_ok in ((most, True), (most + 100, False)):
        code, out, _ = run(capsys, "llm", "capacity", "llama2-70b", "--device", "A100", "--tp", "4", "--batch",
                           str(b), "--json")
        assert (json.loads(out)["max_context_for_batch"]["max_context"] >= 1) == ctx_ok
    code, out, _ = run(capsys, "llm", "capacity", "llama2-70b", "--device", "A100", "--tp", "4", "--batch", "1000",
                       "--json")
    assert code == 0 and json.loads(out)["max_context_for_batch"]["max_context"] > 0
    code, out, _ = run(capsys, "llm", "serve", "llama2-7b", "--system", "DGX-A100", "--rate", "5/s", "--requests", "60",
                       "--input-dist", "128-512", "--output-dist", "64", "--slo-ttft", "300ms", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["ttft_ms"]["p99"] >= d["ttft_ms"]["p50"] > 0 and d["max_rate_meeting_slo_per_s"] > 0
    assert d["pp"] == 1 and d["gpus"] == 1 and d["system"] == "DGX-A100"
    # which model costed the steps, as `llm infer` says; no interval without a calibrated model; the two rates
    assert d["cost_model"] == "roofline" and d["method"] == "roofline" and "interval" not in d
    assert d["at_max_rate"]["rate_per_s"] > 0 and "nominal arrival rate" in d["at_max_rate"]["rate_note"]
    assert any(n.startswith("scheduler:") for n in d["notes"])
    assert d["offline"] is False and d["rate_per_s"] == 5.0
    code, out, _ = run(capsys, "llm", "serve", "llama2-7b", "--system", "DGX-A100", "--rate", "inf", "--requests", "40",
                       "--input-dist", "512", "--output-dist", "64", "--json")
    d = json.loads(out)
    assert code == 0 and d["offline"] is True and d["rate_per_s"] is None and d["output_tokens_per_s_per_gpu"] > 0
    code, out, _ = run(capsys, "llm", "serve", "llama2-7b", "--system", "DGX-A100", "--rate", "offline",
                       "--requests", "40")
    assert code == 0 and "40 requests at once (offline: maximum throughput)" in out
    # what-ifs that are costed but named: another system's GPU, tensor parallelism across nodes
    code, out, err = run(capsys, "llm", "serve", "llama2-7b", "--system", "DGX-H100", "--device", "A100",
                         "--requests", "20", "--json")
    assert code == 0 and "whose GPUs are H100-SXM" in err
    assert any("what-if" in n for n in json.loads(out)["notes"])
    code, out, err = run(capsys, "llm", "infer", "llama2-70b", "--system", "DGX-H100", "--tp", "16", "--json")
    assert code == 0 and "spans 2 nodes" in err and any("spans 2 nodes" in n for n in json.loads(out)["notes"])
    code, out, err = run(capsys, "llm", "infer", "llama2-70b", "--system", "DGX-H100", "--tp", "8", "--json")
    assert code == 0 and "warning" not in err and json.loads(out)["cost_model"] == "roofline"
    # --compare is checked before any simulation: an unknown system, or no SLO to rank by
    code, out, err = run(capsys, "llm", "serve", "llama2-7b", "--system", "DGX-A100", "--compare", "DGX-A100,NOPE",
                         "--slo-ttft", "300ms")
    assert code == 2 and "unknown system or device 'NOPE'" in err and out == ""
    code, out, err = run(capsys, "llm", "serve", "llama2-7b", "--system", "DGX-A100", "--compare", "DGX-H100")
    assert code == 2 and "--compare needs an SLO" in err and out == ""


def test_vendor_table_predicted_row_by_row(shared_datasets):
    from hybrid.workloads.llm.vendor_tables import predict_table, read_table

    t = read_table(shared_datasets / "published" / "trtllm_v0.9.0_static_batch_throughput_A100.csv")
    p = predict_table(t)
    assert len(p) == 24 and p["fits"].all()
    ratio = p["roofline"] / p["measured"]
    # the roofline is an upper bound on throughput for nearly every row (kernels never beat the datasheet)
    assert (ratio > 0.6).all() and np.median(ratio) > 1.0


def test_serve_replays_a_trace_file_and_rejects_bad_ones(capsys, tmp_path):
    good = tmp_path / "trace.csv"
    good.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.4,300,40\n0,100,20\n0.2,50,10\n")
    code, out, _ = run(capsys, "llm", "serve", "llama2-7b", "-d", "A100", "--trace", str(good), "--json")
    assert code == 0
    d = json.loads(out)
    assert d["requests"] == 3 and d["ttft_ms"]["p50"] > 0
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,input_len,output_len\n0,100,20\n0.5,-3,40\n")
    code, _, err = run(capsys, "llm", "serve", "llama2-7b", "-d", "A100", "--trace", str(bad))
    assert code == 2 and "line 3" in err and "input_len" in err
    code, _, err = run(capsys, "llm", "serve", "llama2-7b", "-d", "A100", "--trace", str(tmp_path / "none.csv"))
    assert code == 2 and "does not exist" in err
    # a last line cut mid-write (16 -> 1, no final newline) and fractional token counts are refused, not guessed
    cut = tmp_path / "cut.csv"
    cut.write_bytes(b"arrival_s,input_len,output_len\n0,128,64\n0.2,512,1")
    code, _, err = run(capsys, "llm", "serve", "llama2-7b", "-d", "A100", "--trace", str(cut))
    assert code == 2 and "no final newline" in err
    frac = tmp_path / "frac.csv"
    frac.write_text("arrival_s,input_len,output_len\n0,128.7,64\n")
    code, _, err = run(capsys, "llm", "serve", "llama2-7b", "-d", "A100", "--trace", str(frac))
    assert code == 2 and "line 2" in err and "whole token count" in err


def test_pipeline_parallel_schedule_on_the_engine_matches_the_closed_form():
    from hybrid.workloads.llm.inference import pipeline_on_engine

    for pp, m in ((2, 2), (4, 4), (4, 1), (3, 5)):
        p = pipeline_on_engine(pp, m, 100.0, 10.0, 0.0)
        assert p["ttft_us"] == pytest.approx(p["closed_form_ttft_us"])
        assert p["token_period_us"] == pytest.approx(p["closed_form_period_us"])
    # sends between stages lengthen the pipeline: each token of a microbatch crosses pp links; the closed form
    # with sends is what the engine simulates, for any mix of stage and send times
    p = pipeline_on_engine(4, 4, 100.0, 10.0, 1.0)
    assert p["token_period_us"] == pytest.approx(4 * 10.0 + 4 * 1.0)
    for pp, m, t0, t1, snd in ((3, 3, 50.0, 7.0, 20.0), (2, 1, 80.0, 30.0, 5.0), (4, 4, 10.0, 1.0, 3.0)):
        p = pipeline_on_engine(pp, m, t0, t1, snd)
        assert p["ttft_us"] == pytest.approx(p["closed_form_ttft_us"])
        assert p["token_period_us"] == pytest.approx(p["closed_form_period_us"])
    # stages of unequal time (the last holds the output layer): the engine and the closed form still agree
    for pp, m, snd in ((4, 1, 2.0), (4, 4, 1.0), (3, 6, 0.5)):
        p = pipeline_on_engine(pp, m, 100.0, 10.0, snd, prefill_sum_us=250.0, decode_sum_us=25.0)
        assert p["ttft_us"] == pytest.approx(p["closed_form_ttft_us"])
        assert p["token_period_us"] == pytest.approx(p["closed_form_period_us"])
    # the output layer runs once per token, on the last stage: at batch 1 a token crosses every stage once, so
    # more stages add only their sends (the output layer was counted once per stage before: 5.9 -> 8.3 ms at pp 8)
    one = predict_static(make_setup("llama3-8b", system="DGX-H100"), 1, 128, 128)
    for pp in (2, 8):
        r = predict_static(make_setup("llama3-8b", system="DGX-H100", pp=pp), 1, 128, 128)
        assert one.tpot_ms < r.tpot_ms < one.tpot_ms * 1.02
        assert r.breakdown_ms["decode"]["lm_head"] == pytest.approx(one.breakdown_ms["decode"]["lm_head"], rel=1e-9)
        assert sum(r.breakdown_ms["decode"].values()) == pytest.approx(r.latency_ms - r.ttft_ms, rel=1e-9)
    s = make_setup("llama2-70b", "A100", tp=2, pp=2)
    r = predict_static(s, 16, 512, 64)
    assert any("on the engine" in n for n in r.notes)
    # the breakdown is the schedule the totals come from: per phase it sums to TTFT and to the decode time
    assert sum(r.breakdown_ms["prefill"].values()) == pytest.approx(r.ttft_ms, rel=1e-9)
    assert sum(r.breakdown_ms["decode"].values()) == pytest.approx(r.latency_ms - r.ttft_ms, rel=1e-9)
    assert r.breakdown_ms["prefill"]["pipeline"] > 0  # the stage-to-stage send
    many = predict_many([s], [16], [512], [64], decode_points=48)
    assert many["ttft_ms"].iloc[0] == pytest.approx(r.ttft_ms, rel=1e-9)
    assert many["latency_ms"].iloc[0] == pytest.approx(r.latency_ms, rel=1e-9)
    one = predict_static(make_setup("llama2-70b", "A100", tp=2, pp=1), 16, 512, 64)
    # two stages of half the layers: per-token latency about the same, 2x the GPUs
    assert r.tpot_ms == pytest.approx(one.tpot_ms, rel=0.1)


def test_moe_decode_reads_only_the_routed_experts():
    from hybrid.workloads.llm.kv_cache import weight_bytes_per_gpu as wb

    s = make_setup("mixtral-8x7b", "H100-SXM", tp=2)
    one = predict_static(s, 1, 128, 32)
    full_ms = wb(s.model, s.precision, tp=2) / s.device.mem_bw * 1e3
    # batch 1: top-2 of 8 experts per token, about 13B of 47B parameters streamed per step
    assert 0.2 < one.tpot_ms / full_ms < 0.5
    many = predict_static(s, 256, 128, 32)
    assert many.tpot_ms > full_ms  # 512 routed tokens touch every expert
    # 128 experts, top-8 (Qwen3-235B-A22B): one grouped GEMM per projection, not a launch per expert
    q = predict_static(make_setup("qwen3-235b-a22b", "H200", tp=8, dtype="fp8"), 64, 1024, 64)
    lat = q.ops[(q.ops["phase"] == "decode") & (q.ops["name"] == "mlp_up_proj")]
    assert len(lat) == 1 and q.tpot_ms < 40


def test_serve_compare_ranks_systems_by_slo_rate_per_gpu(capsys):
    code, out, _ = run(capsys, "llm", "serve", "llama2-7b", "--system", "DGX-A100", "--requests", "80",
                       "--input-dist", "128-512", "--output-dist", "64", "--slo-tpot", "30ms",
                       "--compare", "DGX-A100,DGX-H100,DGX-1", "--json")
    assert code == 0
    ranks = json.loads(out)["compare"]
    per_gpu = {r["system"]: r["rate_per_gpu"] for r in ranks}
    # decode is memory-bound: the ranking follows HBM bandwidth (H100 3.35, A100 2.04, V100 0.9 TB/s)
    assert [r["system"] for r in ranks] == ["DGX-H100", "DGX-A100", "DGX-1"] and per_gpu["DGX-1"] > 0


def test_gpu_hour_prices_parse_resolve_and_refuse_bad_entries():
    from hybrid.hardware.catalog import default_catalog
    from hybrid.workloads.llm.pricing import cost_per_million_tokens, parse_gpu_hour_prices

    cat = default_catalog()
    p = parse_gpu_hour_prices("DGX H100=4, A100=1.5, 0.5", cat)  # a system alias, a GPU alias, a default
    assert p.by_key == {"DGX-H100": 4.0, "A100-SXM4-80GB": 1.5} and p.default == 0.5
    assert p.price("DGX-H100", "H100-SXM") == 4.0  # the system's own price
    assert p.price("HGX-H200", "H200") == 0.5  # neither priced: the default
    assert p.price("DGX-A100", "A100-SXM4-80GB") == 1.5  # the GPU's price on any system
    assert parse_gpu_hour_prices("H100-SXM=3", cat).price("DGX-A100", "A100-SXM4-80GB") is None
    # 3.6 per GPU-hour at 1000 tokens/s per GPU: 3.6e6 tokens per hour, so 1.0 per million
    assert cost_per_million_tokens(3.6, 1000.0) == pytest.approx(1.0)
    np.testing.assert_allclose(cost_per_million_tokens(3.6, np.array([1000.0, 4000.0])), [1.0, 0.25])  # vectorised
    for bad, msg in [("", "no GPU-hour price"), ("cheap", "not a number"), ("-2", "positive"), ("nan", "positive"),
                     ("inf", "positive"), ("A100=0", "positive"), ("NOPE=2", "NOPE"), ("1,2", "more than one"),
                     ("A100=1,A100-SXM4-80GB=2", "priced twice"), ("=3", "names no system")]:
        with pytest.raises(InvalidInputError, match=msg):
            parse_gpu_hour_prices(bad, cat)
    for tps in (0.0, -1.0, float("nan"), float("inf"), np.array([100.0, 0.0])):
        with pytest.raises(InvalidInputError, match="no cost per token"):
            cost_per_million_tokens(1.0, tps)


def test_infer_prices_its_static_batch_throughput(capsys):
    code, out, _ = run(capsys, "llm", "infer", "llama2-7b", "--device", "A100", "--batch", "32",
                       "--gpu-hour-price", "A100=2.0", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["gpu_hour_price"] == 2.0
    assert d["cost_per_1m_output_tokens"] == pytest.approx(2.0 / (d["output_tokens_per_s_per_gpu"] * 3600) * 1e6)
    # a price for another GPU only: no cost, said so; a bad price is refused before anything is simulated
    code, out, _ = run(capsys, "llm", "infer", "llama2-7b", "--device", "A100", "--gpu-hour-price", "H100=3", "--json")
    d = json.loads(out)
    assert code == 0 and d["cost_per_1m_output_tokens"] is None and any("no GPU-hour price" in n for n in d["notes"])
    code, out, err = run(capsys, "llm", "infer", "llama2-7b", "--device", "A100", "--gpu-hour-price", "A100=-1")
    assert code == 2 and "positive" in err and out == ""


def test_infer_compare_ranks_systems_by_throughput_then_by_cost(capsys):
    args = ["llm", "infer", "llama2-7b", "--system", "DGX-A100", "--batch", "16", "--output", "64",
            "--compare", "DGX-H100,DGX-A100,DGX-1", "--json"]
    code, out, _ = run(capsys, *args)
    d = json.loads(out)
    assert code == 0 and d["compare_ranked_by"] == "output_tokens_per_s_per_gpu"
    # decode-bound static batch: the ranking follows HBM bandwidth (3.35, 2.04, 0.9 TB/s)
    assert [r["system"] for r in d["compare"]] == ["DGX-H100", "DGX-A100", "DGX-1"]
    mine = d["compare"][1]
    assert mine["output_tokens_per_s_per_gpu"] == pytest.approx(d["output_tokens_per_s_per_gpu"], rel=1e-9)
    code, out, _ = run(capsys, *args, "--gpu-hour-price", "DGX-H100=3,DGX-A100=1.5,DGX-1=0.05")
    d = json.loads(out)
    assert code == 0 and d["compare_ranked_by"] == "cost_per_1m_output_tokens"
    costs = [r["cost_per_1m_output_tokens"] for r in d["compare"]]
    assert costs == sorted(costs) and d["compare"][0]["system"] == "DGX-1"
    for r in d["compare"]:
        assert r["cost_per_1m_output_tokens"] == pytest.approx(
            r["gpu_hour_price"] / (r["output_tokens_per_s_per_gpu"] * 3600) * 1e6)
    # a system without the dtype's rate is ranked last with the reason; an unknown one is refused up front
    code, out, _ = run(capsys, "llm", "infer", "llama2-7b", "--system", "DGX-H100", "--dtype", "fp8", "--compare",
                       "DGX-A100,HGX-H200", "--json")
    d = json.loads(out)
    assert code == 0 and d["compare"][-1]["system"] == "DGX-A100" and "fp8" in d["compare"][-1]["note"]
    code, out, err = run(capsys, "llm", "infer", "llama2-7b", "--system", "DGX-A100", "--compare", "NOPE")
    assert code == 2 and "NOPE" in err and out == ""
    # this run's own system ranks too when --compare leaves it out (it may be the cheapest answer), once when it
    # names it; a system where the model does not fit shows no times (it cannot run), only the reason
    code, out, _ = run(capsys, "llm", "infer", "llama3-70b", "--system", "DGX-H100", "--tp", "4", "--batch", "16",
                       "--compare", "DGX-A100,DGX-1,DGX-H100", "--json")
    d = json.loads(out)
    assert [r["system"] for r in d["compare"]] == ["DGX-H100", "DGX-A100", "DGX-1"]
    assert d["compare"][0]["note"] == "this run"
    assert d["compare"][0]["output_tokens_per_s_per_gpu"] == pytest.approx(d["output_tokens_per_s_per_gpu"])
    v100 = d["compare"][2]
    assert not v100["fits"] and v100["ttft_ms"] is None and v100["output_tokens_per_s_per_gpu"] is None
    assert v100["device"] == "V100-SXM2-32GB" and "does not fit" in v100["note"]


def test_serve_compare_ranks_by_cost_per_token_when_every_system_is_priced(capsys):
    args = ["llm", "serve", "llama2-7b", "--system", "DGX-A100", "--requests", "80", "--input-dist", "128-512",
            "--output-dist", "64", "--slo-tpot", "30ms", "--compare", "DGX-A100,DGX-H100,DGX-1", "--json"]
    code, out, _ = run(capsys, *args, "--gpu-hour-price", "DGX-A100=1.2,DGX-H100=3.5,DGX-1=0.1")
    assert code == 0
    d = json.loads(out)
    assert d["compare_ranked_by"] == "cost_per_1m_output_tokens"
    ranks = {r["system"]: r for r in d["compare"]}
    # the V100 node serves ~6x fewer requests per GPU than the A100 one but costs 12x less per GPU-hour: cheaper per
    # token; the H100 node has no SLO-meeting rate to price (80 requests cannot load it) and comes last
    assert [r["system"] for r in d["compare"]] == ["DGX-1", "DGX-A100", "DGX-H100"]
    a, v = ranks["DGX-A100"], ranks["DGX-1"]
    assert ranks["DGX-H100"]["cost_per_1m_output_tokens"] is None and ranks["DGX-H100"]["gpu_hour_price"] == 3.5
    # steady state at the SLO-meeting rate: cost ratio = price ratio x inverse rate ratio (realised rates, ~nominal)
    expect = (0.1 / 1.2) * (a["rate_per_gpu"] / v["rate_per_gpu"])
    assert v["cost_per_1m_output_tokens"] / a["cost_per_1m_output_tokens"] == pytest.approx(expect, rel=0.1)
    # the main system's cost at its highest SLO-meeting rate, the same figure as its compare row
    assert d["at_max_rate"]["cost_per_1m_output_tokens"] == pytest.approx(a["cost_per_1m_output_tokens"], rel=1e-9)
    # a system with an SLO-meeting rate but no price: ranked by requests/s per GPU, as without prices
    code, out, _ = run(capsys, *args, "--gpu-hour-price", "DGX-A100=1.2,DGX-H100=3.5")
    d = json.loads(out)
    assert d["compare_ranked_by"] == "rate_per_gpu"
    assert [r["system"] for r in d["compare"]] == ["DGX-H100", "DGX-A100", "DGX-1"]


def test_offline_serve_prices_its_full_throughput(capsys):
    code, out, _ = run(capsys, "llm", "serve", "llama2-7b", "--system", "DGX-A100", "--requests", "100",
                       "--rate", "inf", "--gpu-hour-price", "1.2", "--json")
    d = json.loads(out)
    assert code == 0 and d["offline"] is True
    assert d["cost_per_1m_output_tokens"] == pytest.approx(1.2 / (d["output_tokens_per_s_per_gpu"] * 3600) * 1e6)
    # at a finite rate without an SLO there is no rate that keeps the GPUs busy to price: no cost
    code, out, _ = run(capsys, "llm", "serve", "llama2-7b", "--system", "DGX-A100", "--requests", "50",
                       "--rate", "5/s", "--gpu-hour-price", "1.2", "--json")
    d = json.loads(out)
    assert code == 0 and d["cost_per_1m_output_tokens"] is None and d["gpu_hour_price"] == 1.2
    # an SLO that every rate meets (30 requests cannot load the node): no sustained rate to price, no error
    code, out, _ = run(capsys, "llm", "serve", "llama3-8b", "--system", "DGX-H100", "--requests", "30",
                       "--slo-tpot", "100ms", "--gpu-hour-price", "3", "--json")
    d = json.loads(out)
    assert code == 0 and d["max_rate_meeting_slo_per_s"] is None
    assert d["at_max_rate"] is None  # no highest rate, so no run at it (not the fastest rate tried)
    assert any("every rate meets the SLO" in n for n in d["notes"])
    # compared with another system, this run still ranks (with no rate: every rate meets the SLO here)
    code, out, _ = run(capsys, "llm", "serve", "llama2-7b", "--system", "DGX-H100", "--requests", "4",
                       "--slo-ttft", "100s", "--compare", "DGX-A100,DGX-H100", "--json")
    ranks = json.loads(out)["compare"]
    assert code == 0 and sorted(r["system"] for r in ranks) == ["DGX-A100", "DGX-H100"]
    assert next(r for r in ranks if r["system"] == "DGX-H100")["note"].startswith("this run")


def test_serve_says_why_no_rate_meets_the_slo_and_leaves_tpot_out_for_one_token_outputs(capsys):
    code, out, err = run(capsys, "llm", "serve", "llama3-8b", "--device", "H100-SXM", "--requests", "100",
                         "--slo-ttft", "1ms", "--json")
    d = json.loads(out)
    assert code == 0 and d["max_rate_meeting_slo_per_s"] == 0.0
    assert "no rate meets the SLO: the requests alone on the deployment miss it (p99 ttft" in err
    assert any("short trace" in n for n in json.loads(run(capsys, "llm", "serve", "llama3-8b", "--device",
                                                          "H100-SXM", "--requests", "100", "--slo-ttft", "300ms",
                                                          "--json")[1])["notes"])
    code, out, _ = run(capsys, "llm", "serve", "llama3-8b", "--device", "H100-SXM", "--requests", "50",
                       "--output-dist", "1", "--json")
    d = json.loads(out)
    assert code == 0 and d["tpot_ms"]["p50"] is None and d["ttft_ms"]["p50"] > 0


def test_serve_says_a_traces_own_requests_miss_the_slo_alone(capsys, tmp_path):
    """With a trace, why no rate meets the SLO is judged on the trace's requests, each alone: 8000-token prompts
    take 147 ms to a first token by themselves, so a 50 ms TTFT is out of reach at any rate. A request of the
    default --input-dist (512 tokens, 10 ms alone) stood in for them, and the note blamed queueing."""
    trace = tmp_path / "long.csv"
    trace.write_text("arrival_s,input_len,output_len\n0,8000,50\n1,8000,50\n2,8000,50\n")
    code, out, err = run(capsys, "llm", "serve", "llama3-8b", "--system", "DGX-H100", "--trace", str(trace),
                         "--slo-ttft", "50ms", "--json")
    assert code == 0 and json.loads(out)["max_rate_meeting_slo_per_s"] == 0.0
    assert "the requests alone on the deployment miss it (p99 ttft 1" in err and "queueing" not in err
    # generated requests: the SLO's percentile of the drawn lengths alone (p90 of prompts up to 8192 tokens)
    code, out, err = run(capsys, "llm", "serve", "llama3-8b", "--system", "DGX-H100", "--requests", "100",
                         "--input-dist", "128-8192", "--slo-ttft", "100ms", "--slo-percentile", "90")
    assert code == 0 and "the requests alone on the deployment miss it (p90 ttft" in err


def test_serve_refuses_request_generating_options_beside_a_trace(capsys, tmp_path):
    """A trace brings its own arrivals, lengths and count: `--trace t.csv --rate 50/s` replayed the trace at its
    own rate and said nothing; now options that generate requests are refused beside it (one line, exit 2)."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_len,output_len\n0,100,5\n0.5,100,5\n")
    code, out, err = run(capsys, "llm", "serve", "llama3-8b", "--system", "DGX-H100", "--trace", str(trace),
                         "--rate", "50/s", "--json")
    assert code == 2 and out == "" and "--rate generates requests; --trace replays its own" in err
    assert len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "llm", "serve", "llama3-8b", "--system", "DGX-H100", "--trace", str(trace),
                       "--requests", "5", "--output-dist", "exp:20", "--seed", "2")
    assert code == 2 and "--requests, --output-dist, --seed generate requests" in err
    # a default value is not a choice the trace overrides
    code, out, _ = run(capsys, "llm", "serve", "llama3-8b", "--system", "DGX-H100", "--trace", str(trace), "--json")
    assert code == 0 and json.loads(out)["requests"] == 2


def test_a_rate_above_capacity_is_said_to_grow_the_queue(capsys):
    """At 200 requests/s a single H100 serving Llama-3-8B completes about 65/s: the queue grows with every request
    simulated (p50 TTFT 0.5, 3.4 and 17.7 s for 250, 1000 and 4000 requests) and the output read as a steady
    state. Now the run is flagged overloaded with what it completes; a rate it keeps up with is not."""
    s = make_setup("llama3-8b", "H100-SXM")
    idist, odist = parse_dist("512"), parse_dist("128")
    over = simulate(s, make_trace(200.0, 400, idist, odist, 0))
    assert over.overloaded and "the queue grows over the run" in over.notes[-1]
    served = float(re.search(r"completes about ([0-9.]+)/s", over.notes[-1]).group(1))
    assert 20 < served < 150  # the deployment's own capacity, well under the offered 200/s
    calm = simulate(s, make_trace(20.0, 400, idist, odist, 0))
    assert not calm.overloaded and not any("queue grows" in n for n in calm.notes)
    burst = simulate(s, make_trace(math.inf, 400, idist, odist, 0))  # offline: a burst by design, no note
    assert not burst.overloaded
    code, out, err = run(capsys, "llm", "serve", "llama3-8b", "--device", "H100-SXM", "--rate", "200/s",
                         "--requests", "400", "--input-dist", "512", "--output-dist", "128", "--json")
    assert code == 0 and json.loads(out)["overloaded"] is True and "warning: the queue grows" in err


def test_every_inference_option_says_what_it_does():
    """`llm serve --help` listed --arrival, --slo-percentile and --seed with no word on what they do."""
    import click

    from hybrid.cli.llm_infer import capacity, infer, serve

    bare = [f"{c.name} {p.opts[0]}" for c in (infer, serve, capacity) for p in c.params
            if isinstance(p, click.Option) and not p.hidden and not p.help]
    assert bare == []


class _Counting:
    """A cost model that counts its predict calls (wrapping the engine's default, roofline-only predictor)."""

    def __init__(self) -> None:
        from hybrid.engine.costs import default_cost_model

        self.inner = default_cost_model()
        self.catalog = self.inner.catalog
        self.calls = 0

    def predict(self, table):
        self.calls += 1
        return self.inner.predict(table)


def test_one_predictor_path_and_one_call_for_many_configurations():
    """No cost model = the engine's default predictor (no separate roofline branch); predict_many costs every
    configuration (several deployments, pp = 1 and 2) in ONE predict call and agrees with predict_static."""
    setups = [make_setup("llama2-7b", "A100"), make_setup("llama2-70b", "A100", tp=4),
              make_setup("llama2-70b", "A100", tp=2, pp=2), make_setup("llama2-7b", "A100")]
    batch, inp, out = np.array([8, 32, 16, 1]), np.array([128, 512, 256, 2048]), np.array([64, 1, 100, 3])
    counting = _Counting()
    many = predict_many(setups, batch, inp, out, counting, decode_points=48)
    assert counting.calls == 1
    default = predict_many(setups, batch, inp, out, decode_points=48)
    np.testing.assert_allclose(many["latency_ms"], default["latency_ms"], rtol=1e-12)
    for i, s in enumerate(setups):
        one = predict_static(s, int(batch[i]), int(inp[i]), int(out[i]), counting, check_memory=False)
        assert one.ttft_ms == pytest.approx(many["ttft_ms"].iloc[i], rel=1e-9)
        assert one.latency_ms == pytest.approx(many["latency_ms"].iloc[i], rel=1e-9)
        assert one.output_tokens_per_s_per_gpu == pytest.approx(many["output_tokens_per_s_per_gpu"].iloc[i],
                                                                rel=1e-9)
    assert counting.calls == 1 + len(setups)


def test_decode_grid_integrates_every_step_exactly_when_short():
    from hybrid.workloads.llm.inference import _decode_grids

    ctx, w = _decode_grids(np.array([100, 100, 100, 7]), np.array([1, 4, 21, 1000]), 24)
    assert w[0].sum() == 0  # output 1: no decode step
    for i, steps in ((1, 3), (2, 20)):  # fewer steps than points: each context 101..100+steps weighs one step
        per = {c: w[i][ctx[i] == c].sum() for c in np.unique(ctx[i])}
        assert sorted(per) == list(100.0 + np.arange(1, steps + 1)) and np.allclose(list(per.values()), 1.0)
    assert w[3].sum() == pytest.approx(999) and ctx[3].min() == 8 and ctx[3].max() == 7 + 999


def test_prompt_chunks_fill_the_token_budget_first_come_first_served():
    from hybrid.workloads.llm.serving import prompt_chunks

    assert prompt_chunks(np.array([300, 500, 2000, 10]), 1000).tolist() == [300, 500, 200, 0]
    assert prompt_chunks(np.array([300, 500]), 5000).tolist() == [300, 500]
    assert prompt_chunks(np.array([300, 500]), 0).tolist() == [0, 0]
    assert prompt_chunks(np.array([], dtype=np.int64), 100).tolist() == []


def test_fused_rope_drops_the_separate_rotary_kernel_only():
    plain, fused = make_setup("llama2-7b", "A100"), make_setup("llama2-7b", "A100", fused_rope=True)
    a, b = predict_static(plain, 8, 512, 16), predict_static(fused, 8, 512, 16)
    assert "attn_rope" in set(a.ops["name"]) and "attn_rope" not in set(b.ops["name"])
    rope = a.ops[a.ops["name"] == "attn_rope"]
    saved = float((rope["time_us"] * rope["count"])[rope["phase"] == "prefill"].sum()) / 1e3
    assert saved > 0 and a.ttft_ms - b.ttft_ms == pytest.approx(saved, rel=1e-6)
    assert set(a.ops["name"]) - set(b.ops["name"]) == {"attn_rope"}


def test_memory_table_matches_one_plan_per_configuration():
    """The vectorised memory table (one bisection over all rows) gives each configuration's plan."""
    from hybrid.workloads.llm.kv_cache import memory_table

    m, fp16 = resolve_model("llama2-70b"), Precision("fp16")
    batch, inp, out = np.array([1, 64, 4096, 300]), np.array([128, 2048, 2048, 100]), np.array([128, 2048, 128, 1])
    tab = memory_table(m, fp16, 80 * 2**30, batch=batch, input_len=inp, output_len=out, tp=4)
    for i in range(len(batch)):
        one = memory_plan(m, fp16, 80 * 2**30, batch=int(batch[i]), input_len=int(inp[i]), output_len=int(out[i]), tp=4)
        assert tab["max_batch"].iloc[i] == one.max_batch and tab["fits"].iloc[i] == one.fits
        assert tab["reason"].iloc[i] == one.reason
        # max_batch is the largest batch that fits: it fits, one more does not
        if one.max_batch:
            kw = dict(input_len=int(inp[i]), output_len=int(out[i]), tp=4)
            assert memory_plan(m, fp16, 80 * 2**30, batch=one.max_batch, **kw).fits
            assert not memory_plan(m, fp16, 80 * 2**30, batch=one.max_batch + 1, **kw).fits
    assert not tab["fits"].iloc[2] and "holds at most batch" in tab["reason"].iloc[2]
    # weights alone: Llama-2-70B on one 80 GB GPU
    alone = memory_table(m, fp16, 80 * 2**30, batch=np.array([1]), input_len=np.array([8]), output_len=np.array([8]))
    assert alone["max_batch"].iloc[0] == 0 and "weights alone" in alone["reason"].iloc[0]


def test_cli_infer_pipeline_breakdown_sums_to_its_totals(capsys):
    code, out, _ = run(capsys, "llm", "infer", "llama2-70b", "--device", "A100", "--tp", "2", "--pp", "2", "--batch",
                       "8", "--input", "256", "--output", "16", "--json")
    assert code == 0
    d = json.loads(out)
    assert sum(d["breakdown_ms"]["prefill"].values()) == pytest.approx(d["ttft_ms"], rel=1e-9)
    assert sum(d["breakdown_ms"]["decode"].values()) == pytest.approx(d["latency_ms"] - d["ttft_ms"], rel=1e-9)
    assert "pipeline" in d["breakdown_ms"]["prefill"] and any("on the engine" in n for n in d["notes"])
    code, text, _ = run(capsys, "llm", "infer", "llama2-70b", "--device", "A100", "--tp", "2", "--pp", "2", "--batch",
                        "8", "--input", "256", "--output", "16")
    assert code == 0 and "pipeline schedule (closed form" in text


def test_vendor_table_rows_run_on_their_gpu_and_precision_and_unmappable_rows_are_counted(tmp_path):
    from hybrid.errors import ImportFormatError
    from hybrid.workloads.llm.vendor_tables import predict_table, read_table, vendor_model

    assert vendor_model("LLaMA v3.1 70B") == vendor_model("Llama 3.3 70B") == "llama3-70b"
    assert vendor_model("LLaMA 70B") == "llama2-70b" and vendor_model("Grok 1") is None
    assert vendor_model("Mixtral 8x22B") == "mixtral-8x22b" and vendor_model("Qwen3-30B-A3B") == "qwen3-30b-a3b"
    assert vendor_model("gpt-oss-120b") == "gpt-oss-120b" and vendor_model("GPT-OSS 20B") == "gpt-oss-20b"
    # Hugging Face ids, as later tables and trtllm-bench print them: the organisation is not part of the name
    assert vendor_model("meta-llama/Llama-3.1-8B") == vendor_model("meta-llama/Llama-3.1-8B-Instruct") == "llama3-8b"
    assert vendor_model("mistralai/Mixtral-8x7B-v0.1") == "mixtral-8x7b" and vendor_model("Mistral 7B") == "mistral-7b"
    assert vendor_model("meta-llama/Llama-4-Maverick-17B-128E-Instruct") == "llama4-maverick"
    from hybrid.workloads.llm.vendor_tables import device_precision

    # a 4-bit float checkpoint (gpt-oss MXFP4) on Hopper runs weight-only 4-bit with 16-bit activations
    assert device_precision({"dtype": "fp4"}, {"fp16": 989.0, "fp8": 1979.0}) == {"dtype": "fp16", "weights": "fp4"}
    assert device_precision({"dtype": "fp4"}, {"fp8": 1.0, "fp4": 2.0}) == {"dtype": "fp4"}
    assert device_precision({"dtype": "fp8"}, {"fp16": 1.0}) == {"dtype": "fp8"}  # refused later, with the reason
    path = tmp_path / "t.csv"
    path.write_text("# upstream-format rows (values invented)\n"
                    "trtllm_version,gpu,precision,model,batch_size,tp,input_len,output_len,output_tokens_per_s_per_gpu\n"
                    "v0,H100,FP8,LLaMA 7B,256,1,128,128,10000\n"
                    "v0,B200,FP4,Llama 3.1 8B,256,1,128,128,30000\n"
                    "v0,A100,FP16,LLaMA 7B,256,1,128,128,5000\n"
                    "v0,H100,FP8,Grok 1,64,8,128,128,1000\n"
                    "v0,Gaudi3,BF16,LLaMA 7B,64,1,128,128,1000\n")
    t = read_table(path)
    assert list(t["device"]) == ["H100-SXM", "B200", "A100-SXM4-80GB"]
    assert t.attrs["skipped"] == {"model not in the library: Grok 1": 1, "GPU not in the catalog: Gaudi3": 1}
    p = predict_table(t)
    # each row is the prediction of its own GPU and precision
    for i, (dev, dt) in enumerate([("H100-SXM", "fp8"), ("B200", "fp4"), ("A100", "fp16")]):
        ref = predict_many([make_setup(t["model_name"][i], dev, dtype=dt, fused_rope=True)], [256], [128], [128])
        assert p["predicted"][i] == pytest.approx(ref["output_tokens_per_s_per_gpu"].iloc[0], rel=1e-9)
    path.write_text("gpu,precision,model,batch_size,tp,input_len,output_len,output_tokens_per_s_per_gpu\n"
                    "H100,FP7,LLaMA 7B,8,1,128,128,100\n")
    with pytest.raises(ImportFormatError, match="unknown precision label 'FP7'"):
        read_table(path)
    path.write_text("gpu,model,batch_size,tp,input_len,output_len,output_tokens_per_s_per_gpu\n"
                    "Gaudi3,LLaMA 7B,8,1,128,128,100\n")
    with pytest.raises(ImportFormatError, match="no row with a known model and GPU"):
        read_table(path)


def test_vendor_table_empty_measurements_are_skipped_and_thousands_separators_read(tmp_path):
    """Vendor pages leave a cell empty where a configuration did not run and print "16,000": the first is a row
    without a measurement (skipped, counted), the second a number; anything else that is not a positive number
    still refuses the table."""
    from hybrid.errors import ImportFormatError
    from hybrid.workloads.llm.vendor_tables import read_table

    head = "gpu,precision,model,batch_size,tp,input_len,output_len,output_tokens_per_s_per_gpu\n"
    path = tmp_path / "t.csv"
    path.write_text(head + 'H100,FP8,LLaMA 7B,256,1,128,128,"16,000"\n' + "H100,FP8,LLaMA 7B,64,1,128,128,\n"
                    + "H100,FP8,LLaMA 7B,32,1,128,128,9000.5\n")
    t = read_table(path)
    assert list(t["measured"]) == [16000.0, 9000.5] and list(t["batch_size"]) == [256, 32]
    assert t.attrs["skipped"] == {"no measured value (empty cell)": 1}
    for bad in ("-5", "inf", "\"1,60\"", "fast"):
        path.write_text(head + f"H100,FP8,LLaMA 7B,256,1,128,128,{bad}\n")
        with pytest.raises(ImportFormatError, match="measured values must be positive numbers"):
            read_table(path)
    path.write_text(head + "H100,FP8,LLaMA 7B,256,1,128,128,\n")
    with pytest.raises(ImportFormatError, match="no row has a measured value"):
        read_table(path)
    # a table that names precisions and leaves one empty does not say what that row ran in: skipped, counted
    path.write_text(head + "H100,FP8,LLaMA 7B,256,1,128,128,100\n" + "H100,,LLaMA 7B,64,1,128,128,90\n"
                    + "H100,,Grok 1,64,1,128,128,90\n")
    t = read_table(path)
    assert list(t["batch_size"]) == [256] and t.attrs["skipped"] == {
        "no precision named (empty cell)": 1, "model not in the library: Grok 1": 1}
    path.write_text(head.replace("precision,", "") + "H100,LLaMA 7B,64,1,128,128,90\n")
    assert read_table(path)["precision_args"].iloc[0] == {"dtype": "fp16"}  # no precision column: FP16


def test_vendor_table_without_a_batch_size_runs_as_many_requests_as_fit(tmp_path):
    """trtllm-bench pages (in-flight batching, max throughput) give no batch size: each row runs the largest batch
    the KV cache holds at full length, capped at trtllm-build's max_batch_size (or the table's own column)."""
    from hybrid.errors import ImportFormatError
    from hybrid.workloads.llm.kv_cache import memory_table
    from hybrid.workloads.llm.vendor_tables import (
        INFLIGHT_MAX_BATCH,
        INFLIGHT_MAX_NUM_TOKENS,
        predict_table,
        read_table,
    )

    path = tmp_path / "ifb.csv"
    path.write_text("trtllm_version,gpu,precision,model,tp,input_len,output_len,output_tokens_per_s_per_gpu\n"
                    "v0.17,H100,FP8,Llama 3.1 8B,1,128,128,20000\n"
                    "v0.17,H100,FP8,Llama 3.1 70B,2,2048,2048,2000\n")
    t = read_table(path)
    assert list(t["batch_size"]) == [0, 0]
    p = predict_table(t)
    s70 = make_setup("llama3-70b", "H100-SXM", tp=2, dtype="fp8")
    fit70 = int(memory_table(s70.model, s70.precision, s70.device.mem_capacity, batch=np.array([1]),
                             input_len=np.array([2048]), output_len=np.array([2048]), tp=2, pp=1,
                             reserve_gib=s70.reserve_gib, prefill_tokens=INFLIGHT_MAX_NUM_TOKENS)["max_batch"].iloc[0])
    assert 1 < fit70 < INFLIGHT_MAX_BATCH and list(p["batch_size"]) == [INFLIGHT_MAX_BATCH, fit70]
    assert p["fits"].all() and np.isfinite(p["predicted"]).all()
    ref = predict_many([make_setup("llama3-70b", "H100-SXM", tp=2, dtype="fp8", fused_rope=True,
                                   allreduce="custom")], [fit70], [2048], [2048])
    assert p["predicted"].iloc[1] == pytest.approx(ref["output_tokens_per_s_per_gpu"].iloc[0], rel=1e-9)
    # a max_batch_size column caps it; a latency table without a batch size is batch 1
    path.write_text("gpu,precision,model,tp,input_len,output_len,max_batch_size,output_tokens_per_s_per_gpu\n"
                    "H100,FP8,Llama 3.1 8B,1,128,128,256,20000\n")
    assert list(predict_table(read_table(path))["batch_size"]) == [256]
    path.write_text("gpu,precision,model,tp_size,isl,first_token_latency_ms\nH100,FP8,Llama 3.1 8B,1,128,10\n")
    assert list(read_table(path)["batch_size"]) == [1]
    # with attention DP max_batch_size is each rank's (TensorRT-LLM admits tp x max_batch_size): DeepSeek-R1 on 8
    # H200s holds 5,136 requests of 1024 + 1024 tokens, which a group-wide cap had cut to 2048
    path.write_text("gpu,precision,model,tp,ep,enable_attention_dp,input_len,output_len,output_tokens_per_s_per_gpu\n"
                    "H200,FP8,DeepSeek-R1,8,8,true,1024,1024,1000\n")
    sdp = make_setup("deepseek-v3", "H200", tp=8, ep=8, dtype="fp8", attention_dp=True)
    fit_dp = int(memory_table(sdp.model, sdp.precision, sdp.device.mem_capacity, batch=np.array([1]),
                              input_len=np.array([1024]), output_len=np.array([1024]), tp=8, pp=1,
                              reserve_gib=sdp.reserve_gib, prefill_tokens=INFLIGHT_MAX_NUM_TOKENS,
                              attention_dp=True)["max_batch"].iloc[0])
    assert INFLIGHT_MAX_BATCH < fit_dp < 8 * INFLIGHT_MAX_BATCH
    assert list(predict_table(read_table(path))["batch_size"]) == [fit_dp]
    # an expert-parallel column reaches the deployment (here EP 8 inside TP 8), and a bad one skips its row
    path.write_text("gpu,precision,model,batch_size,tp,ep_size,input_len,output_len,output_tokens_per_s_per_gpu\n"
                    "H200,FP8,Qwen3-235B-A22B,64,8,8,1024,1024,1000\n"
                    "H200,FP8,Qwen3-235B-A22B,64,8,1,1024,1024,1000\n"
                    "H200,FP8,Qwen3-235B-A22B,64,4,8,1024,1024,1000\n")
    t = predict_table(read_table(path))
    assert list(t["ep"]) == [8, 1, 8] and t["predicted"].iloc[0] != t["predicted"].iloc[1]
    assert "must divide tp" in t["skip_reason"].iloc[2] and np.isnan(t["predicted"].iloc[2])
    # an empty ep cell (a dense model's row in a mixed table) is no expert parallelism; a bad one is an error
    path.write_text("gpu,precision,model,batch_size,tp,ep,input_len,output_len,output_tokens_per_s_per_gpu\n"
                    "H200,FP8,Llama 3.1 70B,64,8,,1024,1024,1000\nH200,FP8,Qwen3-235B-A22B,64,8,8,1024,1024,1000\n")
    assert list(read_table(path)["ep"]) == [1, 8]
    path.write_text("gpu,precision,model,batch_size,tp,ep,input_len,output_len,output_tokens_per_s_per_gpu\n"
                    "H200,FP8,Qwen3-235B-A22B,64,8,two,1024,1024,1000\n")
    with pytest.raises(ImportFormatError, match="column ep must hold positive integers"):
        read_table(path)
    # attention data parallelism as a flag column (TensorRT-LLM's enable_attention_dp)
    path.write_text("gpu,precision,model,batch_size,tp,ep,enable_attention_dp,input_len,output_len,"
                    "output_tokens_per_s_per_gpu\n"
                    "H200,FP8,DeepSeek-R1,512,8,8,true,1024,1024,1000\n"
                    "H200,FP8,DeepSeek-R1,512,8,8,false,1024,1024,1000\n")
    t = predict_table(read_table(path))
    assert t["skip_reason"].tolist() == ["", ""] and t["predicted"].iloc[0] > t["predicted"].iloc[1]


# ------------------------------------------------------------------------------------------------ MLA (DeepSeek)
def test_mla_decode_attends_in_the_latent_and_prefill_expands_it():
    s = make_setup("deepseek-v3", "H200", tp=8, dtype="fp8")
    r = predict_static(s, 32, 2048, 64)
    pre, dec = (r.ops[r.ops["phase"] == ph].set_index("name") for ph in ("prefill", "decode"))
    # prefill up-projects the latent to per-head keys and values; decode absorbs those matrices into the query
    # and output (per-head GEMMs over the 512-wide latent) and never expands the cache
    assert "attn_kv_b_proj" in pre.index and "attn_q_absorb" not in pre.index
    assert {"attn_q_absorb", "attn_v_absorb"} <= set(dec.index) and "attn_kv_b_proj" not in dec.index
    att = dec.loc["attention"]
    latent = 32 * att["kv_len"] * 576 * 1.0  # fp8 cache: 512 latent + 64 rotary key per token and layer
    assert latent <= att["bytes"] <= 1.1 * latent
    assert att["bound"] == "memory"
    # every TP rank holds the whole latent cache: per-token bytes do not shrink with TP
    assert kv_bytes_per_token(s.model, s.precision, tp=8) == kv_bytes_per_token(s.model, s.precision) == 61 * 576
    assert r.memory.kv_per_token == 61 * 576


def test_deepseek_memory_and_dense_first_layers():
    with pytest.raises(InvalidInputError, match="weights alone"):  # 671B in 16 bit is 1.3 TB > 8 x 80 GB
        predict_static(make_setup("deepseek-v3", "H100-SXM", tp=8), 1, 128, 16)
    r = predict_static(make_setup("deepseek-v3", "H200", tp=8, dtype="fp8"), 64, 1024, 64)
    assert r.memory.fits and r.memory.weights / 2**30 == pytest.approx(671.03e9 / 8 / 2**30, rel=0.04)
    pre = r.ops[r.ops["phase"] == "prefill"].set_index(["name", "op"])["count"]
    assert pre[("mlp_up_proj", "linear")] == pytest.approx(3)  # 3 dense layers
    assert pre[("mlp_up_proj", "gemm")] == pre[("shared_expert_up_proj", "linear")] == pytest.approx(58)  # 58 MoE


def test_trtllm_version_picks_the_decode_kernel_it_shipped():
    from hybrid.workloads.llm.vendor_tables import trtllm_decode_kernel

    # before 0.7 only masked MHA; 0.7-0.10 XQA for 8 query heads per KV head and head size 128/256 only
    assert trtllm_decode_kernel("v0.6.1", "llama2-70b", 4) == "per_query_head"
    assert trtllm_decode_kernel("v0.9.0", "llama2-70b", 4) == trtllm_decode_kernel("0.9.0", "llama2-70b", 8) == "grouped"
    assert trtllm_decode_kernel("v0.9.0", "mistral-7b", 1) == "per_query_head"  # 4 query heads per KV head
    assert trtllm_decode_kernel("v0.9.0", "falcon-180b", 8) == "per_query_head"  # 29 per KV head, head size 64
    assert trtllm_decode_kernel("v0.12.0", "mistral-7b") == trtllm_decode_kernel(None, "mistral-7b") == "grouped"
    assert trtllm_decode_kernel("nightly", "falcon-180b", 8) == "grouped"


def test_trtllm_engines_before_the_llm_api_keep_the_embedding_whole_on_every_rank(tmp_path):
    """TensorRT-LLM's benchmark engines through 0.11 (``benchmarks/python/build.py``; the examples' converters
    alike) leave ``use_parallel_embedding`` at False: the input embedding table is whole on every TP rank, and the
    output layer a split copy of its own, Falcon's tied one too (``share_embedding_table`` needs a vocab-parallel
    table). The v0.9.0 table's Falcon-180B rows on 8 A100s were sized with the tied table split 8 ways (0.24 GB per
    GPU): the engine holds 1.93 GB, 1.69 GB more, so fewer requests fit (512 x 2176 tokens: 698 -> 663)."""
    from hybrid.workloads.llm.model import load_model
    from hybrid.workloads.llm.vendor_tables import predict_table, read_table, trtllm_parallel_embedding

    assert not trtllm_parallel_embedding("v0.6.1") and not trtllm_parallel_embedding("v0.9.0")
    assert trtllm_parallel_embedding("v0.12.0") and trtllm_parallel_embedding(None)
    p = parse_precision("fp16")
    falcon, llama = load_model("falcon-180b"), load_model("llama2-70b")
    emb = falcon.param_counts()["word_embedding"]
    # tied: the whole table beside the output layer's eighth, against one table split 8 ways
    assert (weight_bytes_per_gpu(falcon, p, 8, 1, parallel_embedding=False)
            - weight_bytes_per_gpu(falcon, p, 8, 1)) == pytest.approx(2.0 * emb, rel=1e-12)
    # untied: the embedding whole instead of a quarter; the output layer split either way
    lem = llama.param_counts()["word_embedding"]
    assert (weight_bytes_per_gpu(llama, p, 4, 1, parallel_embedding=False)
            - weight_bytes_per_gpu(llama, p, 4, 1)) == pytest.approx(2.0 * lem * 3 / 4, rel=1e-12)
    path = tmp_path / "t.csv"
    path.write_text("trtllm_version,gpu,precision,model,batch_size,tp,input_len,output_len,output_tokens_per_s_per_gpu\n"
                    "v0.9.0,A100,FP16,Falcon 180B,512,8,128,2048,266\n"
                    "v0.12.0,A100,FP16,Falcon 180B,512,8,128,2048,266\n")
    t = predict_table(read_table(path))
    s = make_setup("falcon-180b", "A100", tp=8)
    whole, split = (memory_plan(s.model, s.precision, s.device.mem_capacity, batch=512, input_len=128,
                                output_len=2048, tp=8, parallel_embedding=pe).max_batch for pe in (False, True))
    assert t["max_batch"].tolist() == [whole, split] and whole < split - 30
    # the lookup costs the same either way; the split table adds only the TP all-reduce of its lookups
    # (test_vocab_parallel_embedding_sums_its_lookups_over_the_tp_group)
    whole_s = make_setup("falcon-180b", "A100", tp=8, parallel_embedding=False)
    whole_r, split_r = predict_static(whole_s, 64, 128, 16), predict_static(s, 64, 128, 16)
    ar = split_r.ops[split_r.ops["name"] == "embedding_all_reduce"]
    decode_ar_ms = float((ar["time_us"] * ar["count"])[ar["phase"] == "decode"].sum()) / 1e3
    assert "embedding_all_reduce" not in set(whole_r.ops["name"])
    assert split_r.tpot_ms - whole_r.tpot_ms == pytest.approx(decode_ar_ms, rel=1e-6)


def test_vocab_parallel_embedding_sums_its_lookups_over_the_tp_group():
    """vLLM's ``VocabParallelEmbedding.forward`` (and TensorRT-LLM's ``embedding`` with a TP group, sharding_dim 0)
    looks up only the ids of its own vocabulary slice, zeroes the rest and all-reduces the ``[T, h]`` output over
    the TP ranks: one all-reduce of ``T x h`` 16-bit values per forward pass, prefill and every decode step alike.
    The op graph had the lookup but not the all-reduce (Llama-2-70B on 4 A100s, a 2048-token prompt: a 32 MiB
    all-reduce per prefill missing; 32 sequences' decode step: 512 kB). A whole table on every rank (TensorRT-LLM
    engines through 0.11) and TP 1 have none."""
    from hybrid.workloads.llm.inference import pass_ops

    T, B = np.array([2048.0, 32.0]), np.array([1.0, 32.0])
    q, kv = np.array([2048.0, 1.0]), np.array([2048.0, 2048.0])
    split = pass_ops(make_setup("llama2-70b", "A100", tp=4), T, B, q, kv)
    ar = split[split["name"] == "embedding_all_reduce"]
    assert ar["op"].tolist() == ["all_reduce", "all_reduce"]
    assert ar["size_bytes"].tolist() == [2048 * 8192 * 2.0, 32 * 8192 * 2.0]
    assert ar["n_ranks"].tolist() == [4.0, 4.0] and ar["count"].tolist() == [1.0, 1.0]
    for s in (make_setup("llama2-70b", "A100", tp=4, parallel_embedding=False), make_setup("llama2-7b", "A100")):
        assert "embedding_all_reduce" not in set(pass_ops(s, T, B, q, kv)["name"])
    # it costs time: the decode step of the split table is slower than the whole table's by that all-reduce
    r_split = predict_static(make_setup("llama2-70b", "A100", tp=4), 32, 2048, 2)
    r_whole = predict_static(make_setup("llama2-70b", "A100", tp=4, parallel_embedding=False), 32, 2048, 2)
    assert r_split.ttft_ms > r_whole.ttft_ms and r_split.tpot_ms > r_whole.tpot_ms


def test_masked_mha_decode_reads_dram_once_and_l2_once_per_query_head(catalog):
    dev = catalog.device("A100")
    assert dev.l2_bandwidth() == pytest.approx(5120 * 1410e6, rel=1e-3)  # the whitepaper's 5120 B/clk
    h100 = catalog.device("H100-SXM")
    assert h100.l2_bandwidth() == pytest.approx(5120 / 108 * h100.num_sms * h100.clock_mhz * 1e6)
    B, ctx = 32, 2048
    att = {}
    for kern in ("grouped", "per_query_head"):
        r = predict_static(make_setup("llama2-70b", "A100", tp=4, attention_kernel=kern), B, ctx, 2)
        att[kern] = r.ops[(r.ops["name"] == "attention") & (r.ops["phase"] == "decode")].iloc[0]
    g, m = att["grouped"], att["per_query_head"]
    assert g["bytes"] == m["bytes"]  # DRAM traffic: each KV head once either way
    cfg = resolve_model("llama2-70b")
    qh, d = cfg.num_attention_heads // 4, cfg.head_dim
    l2_us = B * d * 2.0 * m["kv_len"] * qh * 2.0 / dev.l2_bandwidth() * 1e6  # fp16 K and V, once per query head
    # the roofline gains the L2 roof; the prediction moves with it (the same kernel efficiency on the longer roof)
    assert m["roofline_us"] == pytest.approx(max(g["roofline_us"], l2_us + m["latency_us"]), rel=1e-9)
    assert m["time_us"] == pytest.approx(g["time_us"] * m["roofline_us"] / g["roofline_us"], rel=1e-9)
    assert m["time_us"] > 1.5 * g["time_us"] and m["bound"] == "l2"
    # an MHA model (one query head per KV head) runs the same either way
    t = [predict_static(make_setup("llama2-7b", "A100", attention_kernel=k), B, ctx, 2).tpot_ms
         for k in ("grouped", "per_query_head")]
    assert t[0] == t[1]


def test_vendor_table_pipeline_column_multi_node_tp_and_rows_that_cannot_deploy(tmp_path):
    from hybrid.workloads.llm.vendor_tables import predict_table, read_table

    f = tmp_path / "t.csv"
    f.write_text("gpu,precision,model,batch_size,tp_size,pp_size,input_len,output_len,output_tokens_per_s_per_gpu\n"
                 "H100,FP8,LLaMA v3.1 405B,64,8,2,128,128,100\n"
                 "H100,FP8,LLaMA v3.1 405B,64,16,1,128,128,100\n"
                 "H100,FP8,LLaMA v3.1 70B,64,3,1,128,128,100\n")
    t = read_table(f)
    assert list(t["pp"]) == [2, 1, 1] and list(t["tp"]) == [8, 16, 3]
    p = predict_table(t)
    assert p["skip_reason"].iloc[:2].eq("").all() and np.isfinite(p["predicted"].iloc[:2]).all()
    assert "does not divide" in p["skip_reason"].iloc[2] and np.isnan(p["predicted"].iloc[2])
    # TP 16 spans two 8-GPU nodes: its all-reduces cross the network
    r = predict_static(make_setup("llama3-405b", "H100", tp=16, dtype="fp8"), 64, 128, 4)
    ar = r.ops[r.ops["name"] == "tp_all_reduce"]
    assert (ar["n_ranks"] == 16).all() and (ar["n_nodes"] == 2).all()


# ------------------------------------------------------------------------------------------------ expert parallelism
def test_expert_parallelism_inside_tp_moves_expert_shapes_not_memory_or_collectives():
    """TensorRT-LLM-style MoE parallelism (moe_ep x moe_tp = tp): whole experts on fewer ranks, same weights per GPU,
    no all-to-all (every rank has the tokens); a small decode step waits for the rank whose experts got most hits."""
    from hybrid.workloads.llm.layer_ops import busiest_rank_experts

    tp_only = make_setup("qwen3-235b-a22b", "H200", tp=8, dtype="fp8")
    ep8 = make_setup("qwen3-235b-a22b", "H200", tp=8, ep=8, dtype="fp8")
    big = [predict_static(s, 256, 1024, 64) for s in (tp_only, ep8)]
    assert big[0].memory.to_dict()["weights_gib"] == big[1].memory.to_dict()["weights_gib"]
    ops = [r.ops[(r.ops["phase"] == "prefill") & (r.ops["name"] == "mlp_up_proj")].iloc[0] for r in big]
    assert (int(ops[0]["b"]), int(ops[0]["n"])) == (128, 2 * 1536 // 8)  # all 128 experts, an eighth of each
    assert (int(ops[1]["b"]), int(ops[1]["n"])) == (16, 2 * 1536)  # 16 whole experts
    assert ops[0]["b"] * ops[0]["m"] == pytest.approx(ops[1]["b"] * ops[1]["m"] * 8, rel=0.01)  # same routed rows
    assert not any("all_to_all" in str(op) for op in big[1].ops["op"])
    assert set(big[1].ops.loc[big[1].ops["category"] == "comm", "name"]) == \
        set(big[0].ops.loc[big[0].ops["category"] == "comm", "name"])
    # decode of one request: 8 of 128 experts hit; spread over 8 ranks the busiest holds ~3, so EP is slower
    one = [predict_static(s, 1, 1024, 64) for s in (tp_only, ep8)]
    assert one[1].tpot_ms > one[0].tpot_ms
    assert busiest_rank_experts(np.array([8.0, 128.0]), 128, 8).tolist() == [3.0, 16.0]
    assert busiest_rank_experts(np.array([8.0]), 128, 1).tolist() == [8.0]
    with pytest.raises(InvalidInputError, match="mixture-of-experts"):
        make_setup("llama3-70b", "H200", tp=8, ep=8, dtype="fp8")
    with pytest.raises(InvalidInputError, match="must divide tp"):
        make_setup("qwen3-235b-a22b", "H200", tp=4, ep=8, dtype="fp8")
    from dataclasses import replace

    with pytest.raises(InvalidInputError, match="must divide the 8 experts"):
        replace(make_setup("mixtral-8x22b", "H200", tp=4, dtype="fp8"), tp=6, ep=3)


def test_attention_data_parallelism_routes_only_the_requests_there_are():
    """With attention data parallelism and fewer requests than ranks, the idle ranks route no tokens: the EP group
    routed every rank's share as if each held as many requests as the busiest, so one DeepSeek-V3 request decoding
    on 8 H200s hit 64 experts (8 per rank) instead of 8, and cost a batch of 8 (TPOT 17.76 ms both)."""
    from hybrid.workloads.llm.layer_ops import busiest_rank_experts

    adp = make_setup("deepseek-v3", "H200", tp=8, ep=8, dtype="fp8", attention_dp=True)
    one, eight = (predict_static(adp, b, 512, 32) for b in (1, 8))
    up = one.ops[(one.ops["phase"] == "decode") & (one.ops["name"] == "mlp_up_proj")
                 & (one.ops["category"] == "moe")].iloc[0]
    assert up["b"] == busiest_rank_experts(np.array([8.0]), 256, 8)[0] and up["m"] == pytest.approx(1.0)
    assert one.tpot_ms < 0.8 * eight.tpot_ms
    # as many requests as ranks: each rank's tokens, as before
    up8 = eight.ops[(eight.ops["phase"] == "decode") & (eight.ops["name"] == "mlp_up_proj")
                    & (eight.ops["category"] == "moe")].iloc[0]
    assert up8["b"] == busiest_rank_experts(np.array([256 * -np.expm1(8 * np.log1p(-8 / 256))]), 256, 8)[0]


def test_attention_data_parallelism_splits_requests_not_heads():
    """Attention DP (TensorRT-LLM's enable_attention_dp): each of the 8 ranks runs its eighth of the requests with
    every head and the whole dense weights; experts spread over the ranks, tokens sent by all-to-all. MLA's latent
    cache is no longer replicated per TP rank, so 8x the requests fit and large-batch decode reads less KV."""
    from hybrid.workloads.llm.kv_cache import kv_bytes_per_token, routed_expert_params, weight_bytes_per_gpu

    tp8 = make_setup("deepseek-v3", "H200", tp=8, ep=8, dtype="fp8")
    adp = make_setup("deepseek-v3", "H200", tp=8, ep=8, dtype="fp8", attention_dp=True)
    m, p = adp.model, adp.precision
    # weights: only the routed experts are split; everything else whole on every rank
    diff = weight_bytes_per_gpu(m, p, 8, 1, attention_dp=True) - weight_bytes_per_gpu(m, p, 8, 1)
    assert diff > 0
    experts_total = routed_expert_params(m) * m.num_layers * p.weight_bytes
    assert weight_bytes_per_gpu(m, p, 8, 1, attention_dp=True) > experts_total / 8
    assert kv_bytes_per_token(m, p, 8, 1, attention_dp=True) == kv_bytes_per_token(m, p, 1, 1)
    r_tp, r_adp = (predict_static(s, 512, 1024, 256, check_memory=False) for s in (tp8, adp))
    assert r_adp.memory.max_batch > 2 * r_tp.memory.max_batch  # the latent cache is no longer on every rank
    ops = r_adp.ops
    att = ops[(ops["phase"] == "decode") & (ops["name"] == "attention")].iloc[0]
    assert att["batch"] == 512 / 8 and att["heads"] == m.num_attention_heads
    names = set(ops["name"])
    assert "ep_all_to_all" in names and "tp_all_reduce" not in names and "logits_all_gather" not in names
    assert r_adp.tpot_ms < r_tp.tpot_ms and r_adp.output_tokens_per_s_per_gpu > r_tp.output_tokens_per_s_per_gpu
    with pytest.raises(InvalidInputError, match="attention data parallelism needs"):
        make_setup("llama3-70b", "H200", tp=8, attention_dp=True)
    with pytest.raises(InvalidInputError, match="ep = tp"):
        make_setup("deepseek-v3", "H200", tp=8, ep=4, dtype="fp8", attention_dp=True)


def test_serving_kv_capacity_with_attention_data_parallelism():
    from hybrid.workloads.llm.serving import SchedulerConfig, kv_capacity_tokens

    sched = SchedulerConfig()
    tp8 = make_setup("deepseek-v3", "H200", tp=8, ep=8, dtype="fp8")
    adp = make_setup("deepseek-v3", "H200", tp=8, ep=8, dtype="fp8", attention_dp=True)
    # every TP rank replicates the latent cache; with attention DP the 8 ranks hold different requests
    assert kv_capacity_tokens(adp, sched) > 4 * kv_capacity_tokens(tp8, sched)


def test_softmax_schedule_moves_prefill_not_decode():
    """`--softmax serial` (FlashAttention-2) lengthens the context pass of long prompts on an H100 (exps in series with
    the matrix multiplies) and leaves the memory-bound decode steps alone; on an A100 `auto` is serial."""
    from hybrid.workloads.llm.inference import make_setup, predict_static

    res = {}
    for dev in ("H100-SXM", "A100-SXM4-80GB"):
        for sm in ("auto", "serial", "overlapped"):
            res[dev, sm] = predict_static(make_setup("llama2-7b", dev, softmax=sm), 8, 4096, 16)
    h_ser, h_ovl = res["H100-SXM", "serial"], res["H100-SXM", "overlapped"]
    assert h_ser.ttft_ms > h_ovl.ttft_ms * 1.02
    assert h_ser.tpot_ms == pytest.approx(h_ovl.tpot_ms, rel=1e-3)
    assert res["H100-SXM", "auto"].ttft_ms == pytest.approx(h_ovl.ttft_ms)
    assert res["A100-SXM4-80GB", "auto"].ttft_ms == pytest.approx(res["A100-SXM4-80GB", "serial"].ttft_ms)
    with pytest.raises(InvalidInputError, match="softmax"):
        make_setup("llama2-7b", "H100-SXM", softmax="fast")
    assert main(["llm", "infer", "llama2-7b", "--device", "H100-SXM", "--softmax", "serial", "--json"]) == 0


_LLAMA3_8B_HF = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                 "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                 "max_position_embeddings": 131072, "tie_word_embeddings": False}


@pytest.mark.parametrize("qc, fmt, kv", [
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}, "int4", False),
    ({"quant_method": "gptq", "bits": 8, "group_size": 128, "desc_act": False}, "int8", False),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "int4", False),
    ({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0}, "fp8", False),
    ({"quant_method": "compressed-tensors", "format": "float-quantized", "kv_cache_scheme": None,
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float"},
                                    "input_activations": {"num_bits": 8, "type": "float", "dynamic": True}}}},
     "fp8", False),
    ({"quant_method": "compressed-tensors", "kv_cache_scheme": {"num_bits": 8, "type": "float"},
      "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int", "group_size": 128}}}}, "int4", True),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}, "fp4", True),
    ({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}, "fp4", False),
    ({"quant_method": "gptq", "bits": 3}, None, False),
    ({"quant_method": "gptq", "bits": "4"}, "int4", False),  # a numeric string, as some exporters write it
    ({"quant_method": "bitsandbytes"}, None, False),  # neither load_in_4bit nor load_in_8bit
])
def test_a_quantised_checkpoint_config_declares_its_weight_format(qc, fmt, kv):
    """quantization_config as GPTQ / AWQ / bitsandbytes / FBGEMM / llm-compressor / ModelOpt / MXFP4 checkpoints ship
    it; a width without a format here (3-bit) stays 16-bit and the model's source says so."""
    from hybrid.workloads.llm.model import from_dict

    m = from_dict({**_LLAMA3_8B_HF, "quantization_config": qc}, name="q")
    assert (m.quantization, m.quantized_kv_cache) == (fmt, kv)
    assert m.num_params == 8030261248  # sizes are the architecture's
    assert ("costed as 16-bit" in m.source) == (fmt is None)


def test_a_quantised_checkpoint_is_served_in_its_format_unless_told_otherwise(capsys, tmp_path):
    """AWQ int4 on an H100: weight-only int4 (decode ~2.3x faster than fp16 at batch 1); an fp8 checkpoint runs fp8
    GEMMs on an H100 and 8-bit weight-only on an A100 (no fp8 tensor cores); --dtype / --weights override; the
    notes say where the precision came from. gpt-oss (released as MXFP4) fits one 80 GB GPU by default."""
    from hybrid.workloads.llm.model import from_dict

    awq = from_dict({**_LLAMA3_8B_HF, "quantization_config": {"quant_method": "awq", "bits": 4}}, name="awq")
    s = make_setup(awq, "H100-SXM")
    assert (s.precision.compute, s.precision.weights, s.precision.kv) == ("fp16", "int4", "fp16")
    assert any("checkpoint's format (int4 weights)" in n for n in s.deployment_notes())
    fp16 = make_setup(awq, "H100-SXM", dtype="fp16")
    assert fp16.precision.weights is None and not fp16.deployment_notes()
    assert make_setup(awq, "H100-SXM", weights="int8").precision.weights == "int8"
    tpot = {k: predict_static(v, batch=1, input_len=128, output_len=64).tpot_ms for k, v in (("int4", s), ("fp16", fp16))}
    assert 1.8 < tpot["fp16"] / tpot["int4"] < 4.0  # 16-bit output layer and per-step overheads stay
    fp8 = from_dict({**_LLAMA3_8B_HF, "quantization_config": {"quant_method": "fbgemm_fp8"}}, name="fp8")
    assert make_setup(fp8, "H100-SXM").precision.compute == "fp8"
    a100 = make_setup(fp8, "A100-SXM4-80GB")
    assert (a100.precision.compute, a100.precision.weights) == ("fp16", "int8")
    assert "A100-SXM4-80GB has no fp8 tensor-core rate" in a100.deployment_notes()[0]
    assert make_setup("gpt-oss-120b", "H100-SXM").precision.weights == "fp4"
    assert predict_static(make_setup("gpt-oss-120b", "H100-SXM"), batch=1, input_len=128, output_len=16).memory.fits
    assert make_setup("llama3-8b", "H100-SXM").precision == Precision("fp16")  # unquantised: fp16 as before
    # the CLI: the default follows the checkpoint, the JSON says so
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**_LLAMA3_8B_HF, "quantization_config": {"quant_method": "awq", "bits": 4}}))
    code, out, _ = run(capsys, "llm", "infer", str(cfg), "--device", "H100-SXM", "--json")
    d = json.loads(out)
    assert code == 0 and d["precision"] == "fp16/w-int4" and any("checkpoint's format" in n for n in d["notes"])
    code, out, _ = run(capsys, "llm", "infer", str(cfg), "--device", "H100-SXM", "--dtype", "fp16", "--json")
    assert code == 0 and json.loads(out)["precision"] == "fp16"


def test_a_rate_that_overflows_is_refused_not_run_offline():
    """``1e400`` overflows to an infinite float: it was run silently as ``--rate inf`` (every request at time 0,
    ``offline: true``), a different experiment from any finite rate asked. Only the spelled words mean offline."""
    import math

    for bad in ("1e400", "1e400/s", "6e400/min"):
        with pytest.raises(InvalidInputError, match="finite"):
            parse_rate(bad)
    assert parse_rate("1e300") == 1e300 and parse_rate("inf") == math.inf


def test_a_weight_only_format_as_compute_dtype_points_at_the_cli_spellings(capsys):
    """``--dtype int8`` (``--dtype int4`` is a shorthand for w4a16, so int8 looks like one too) was refused with
    "(weight-only formats go in weights=)", a Python keyword the CLI has no option for; the error now names the
    options that do it."""
    with pytest.raises(InvalidInputError, match=r"--weights int8.*--dtype w8a16"):
        parse_precision("int8")
    with pytest.raises(InvalidInputError, match=r"--weights int8"):
        Precision("int8")
    code, _, err = run(capsys, "llm", "infer", "llama2-7b", "--device", "A100", "--dtype", "int8")
    assert code == 2 and "--weights int8" in err and "weights=" not in err
    assert parse_precision("w8a16").weights == "int8"


def test_vendor_labels_of_nvidia_quantised_checkpoints_fold():
    """trtllm-bench tables name NVIDIA's quantised checkpoints by their Hugging Face ids
    (``nvidia/Llama-3.3-70B-Instruct-FP8``, ``nvidia/DeepSeek-R1-0528-FP4``): the precision tag and R1's release
    date were left in the folded label, so such rows were skipped as unknown models although the library has them
    (``deepseek-r1-0528`` is a library alias). The row's precision column still says what it runs in."""
    from hybrid.workloads.llm.vendor_tables import vendor_model

    assert vendor_model("nvidia/Llama-3.3-70B-Instruct-FP8") == vendor_model("nvidia/Llama-3.3-70B-Instruct-FP4") \
        == "llama3-70b"
    assert vendor_model("nvidia/Llama-3.1-8B-Instruct-FP8") == "llama3-8b"
    assert vendor_model("nvidia/DeepSeek-R1-0528-FP4") == vendor_model("DeepSeek R1 0528") == "deepseek-v3"
    assert vendor_model("nvidia/Qwen3-235B-A22B-FP8") == "qwen3-235b-a22b"
    assert vendor_model("Llama 3.1 8B NVFP4") == "llama3-8b"
    assert vendor_model("FP8") is None and vendor_model("Grok 1 FP8") is None


def test_table_scoring_counts_unmappable_tables_and_answers_strict_json_without_rows(load_experiment, tmp_path):
    """``run.py --tables``: a table of GPUs the catalog lacks is counted among the skips beside the others (it used
    to abort the whole run); with no row left the answer is strict JSON (None, not NaN) with the skips."""
    from hybrid.engine.costs import RooflineCostModel
    from hybrid.hardware.catalog import default_catalog

    bench = load_experiment("llm_inference")
    head = "trtllm_version,gpu,precision,model,batch_size,tp,input_len,output_len,output_tokens_per_s_per_gpu\n"
    (tmp_path / "h100.csv").write_text(head + "v0.9.0,H100,FP8,LLaMA 7B,64,1,128,128,10000\n")
    (tmp_path / "gaudi.csv").write_text(head + "v0.9.0,Gaudi3,BF16,LLaMA 7B,64,1,128,128,1000\n")
    (tmp_path / "tp3.csv").write_text(head + "v0.9.0,H100,FP8,LLaMA 70B,64,3,128,128,1000\n")
    roof = RooflineCostModel(default_catalog())
    out = bench.score_tables([str(tmp_path / "h100.csv"), str(tmp_path / "gaudi.csv")], roof)
    assert out["n_rows"] == 1 and out["skipped"] == {"GPU not in the catalog: Gaudi3": 1}
    assert np.isfinite(out["rows"][0]["predicted"]) and out["rows"][0]["predicted"] > 0
    (tmp_path / "blank.csv").write_text(head + "v0.9.0,,FP8,LLaMA 7B,64,1,128,128,1000\n"
                                        "v0.9.0,H100,FP8,,64,1,128,128,1000\n")
    out = bench.score_tables([str(tmp_path / "h100.csv"), str(tmp_path / "blank.csv")], roof)
    assert out["skipped"] == {"no GPU named": 1, "no model named": 1}  # not "GPU not in the catalog: nan"
    for files in (["gaudi.csv"], ["tp3.csv"]):
        out = bench.score_tables([str(tmp_path / f) for f in files], roof)
        assert out["n_rows"] == 0 and out["n_skipped"] == 1 and out["geomean_pct"] is None
        json.dumps(out, allow_nan=False)


def test_table_scoring_reports_a_bad_table_as_an_error_before_fitting(load_experiment, shared_datasets, tmp_path,
                                                                      capsys):
    """A missing or malformed table is one ``error:`` line and exit status 2, before the calibration is fitted
    (a traceback after the fit, before)."""
    bench = load_experiment("llm_inference")
    (tmp_path / "bad.csv").write_text("model,tp\nLLaMA 7B,1\n")
    for f in ("missing.csv", "bad.csv"):
        assert bench.main(["--data-dir", str(shared_datasets), "--tables", str(tmp_path / f), "--json"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and f in err and "Traceback" not in err


def test_table_scoring_keeps_rows_that_do_not_fit_and_counts_them(load_experiment, tmp_path):
    """``run.py --tables``: a row whose configuration the memory model predicts not to fit (LLaMA 70B in fp16 on one
    80 GB A100) is scored, flagged per row and counted overall and per group (``n_not_fitting``), so a summary
    says how many of its rows it could not place in memory instead of mixing them in silently."""
    from hybrid.engine.costs import RooflineCostModel
    from hybrid.hardware.catalog import default_catalog

    bench = load_experiment("llm_inference")
    head = "trtllm_version,gpu,precision,model,batch_size,tp,input_len,output_len,output_tokens_per_s_per_gpu\n"
    (tmp_path / "t.csv").write_text(head + "v0.9.0,A100,FP16,LLaMA 7B,8,1,128,128,1000\n"
                                    "v0.9.0,A100,FP16,LLaMA 70B,64,1,128,128,100\n")
    out = bench.score_tables([str(tmp_path / "t.csv")], RooflineCostModel(default_catalog()))
    assert out["n_rows"] == 2 and out["n_not_fitting"] == 1
    assert [r["fits"] for r in out["rows"]] == [True, False]
    assert out["by_table"]["t.csv"]["n_not_fitting"] == 1 and out["by_gpu"]["A100-SXM4-80GB"]["n_not_fitting"] == 1
    json.dumps(out, allow_nan=False)


def test_tpot_only_slo_with_one_token_outputs_is_refused(capsys):
    """`serve --output-dist 1 --slo-tpot 40ms`: no request has a TPOT, so the SLO was met at every rate and the
    answer was "every rate meets the SLO ... simulate more requests", advice that cannot help."""
    code, _, err = run(capsys, "llm", "serve", "llama3-8b", "--device", "H100-SXM", "--requests", "20",
                       "--output-dist", "1", "--slo-tpot", "40ms")
    assert code == 2 and "no request generates more than one token" in err and "Traceback" not in err
    code, out, _ = run(capsys, "llm", "serve", "llama3-8b", "--device", "H100-SXM", "--requests", "20",
                       "--output-dist", "1", "--slo-tpot", "40ms", "--slo-ttft", "1s", "--json")
    assert code == 0 and json.loads(out)["tpot_ms"]["p50"] is None  # with a TTFT SLO beside it: checked on TTFT


def test_mean_context_caps_each_request_under_a_sliding_window_not_the_mean():
    from hybrid.workloads.llm.kv_cache import cached_tokens, mean_context

    mistral, llama, oss = (resolve_model(m) for m in ("mistral-7b", "llama3-8b", "gpt-oss-20b"))
    # every layer windowed (4096): 100 and 12,000 tokens cache 100 and 4096, 2098 on average (not min(6050, 4096))
    assert mean_context(mistral, np.array([100, 12000]), 3).tolist() == [2098.0, 2098.5, 2099.0]
    assert mean_context(llama, np.array([100, 12000]), 2).tolist() == [6050.0, 6051.0]
    # half the layers windowed (128): the context whose cache is the mean cache (100 -> 100, 1000 -> 564)
    ctx = mean_context(oss, np.array([100, 1000]))
    assert float(cached_tokens(oss, ctx)[0]) == pytest.approx((100 + 564) / 2) and ctx[0] == pytest.approx(536)


def test_serve_decode_reads_each_requests_windowed_cache():
    """Mistral's 4096-token window: requests of 100 and of 6,000 or 8,000 prompt tokens cache the same 100 + 4096
    tokens, so their decode steps cost the same; the cap of their mean context (3,050 or 4,050 tokens) read up to
    twice the cache and told them apart (48 requests of 100 and 8,000 tokens on an H100: TPOT 12.7 ms, now 10.1)."""
    from hybrid.workloads.llm.serving import SchedulerConfig, StepCosts, Trace

    s = make_setup("mistral-7b", "H100-SXM")
    n, sched = 48, SchedulerConfig(max_batched_tokens=200_000, max_seqs=48)
    costs = StepCosts.build(s, sched.max_batched_tokens, sched.max_seqs, 8064)  # one grid for both traces
    tpot = []
    for long in (6000, 8000):
        trace = Trace(np.zeros(n), np.where(np.arange(n) % 2, 100, long), np.full(n, 64))
        served = simulate(s, trace, sched=sched, costs=costs)
        assert served.steps == 64  # one prefill step of every prompt, then 63 decode steps
        tpot.append(float(np.mean(served.tpot_ms)))
    assert tpot[0] == pytest.approx(tpot[1], rel=1e-3)
    # and about a static batch whose every request caches that mean (~2,100 tokens), far below one at 4,050
    static, at_mean = predict_static(s, n, 2098, 64), predict_static(s, n, 4050, 64)
    assert tpot[1] == pytest.approx(static.tpot_ms, rel=0.05) and at_mean.tpot_ms > 1.3 * static.tpot_ms


def test_serve_step_costs_interpolate_attention_as_it_grows_with_the_context():
    """The step-cost grids are log-spaced (12 contexts to 16k tokens: 2.4x apart). A decode step's attention is
    linear in the context, so it is interpolated linearly there (log-context interpolation overstated it by up to
    9%); a prompt chunk's attention is tabulated over the tokens before the chunk, from 0 (over its context, the
    first chunk of a prompt fell on grid corners no chunk reaches, whose context had been raised to the chunk:
    a 3,000-token first chunk 43% dear, an 8,192-token prompt in one chunk 21%)."""
    from hybrid.workloads.llm.inference import cost_ops, pass_ops
    from hybrid.workloads.llm.serving import StepCosts

    s = make_setup("llama3-8b", "H100-SXM")
    costs = StepCosts.build(s, 8192, 64, 16384)

    def attention_us(tokens: float, seqs: float, q: float, kv: float, phase: str) -> float:
        f = cost_ops(pass_ops(s, np.array([tokens]), np.array([seqs]), np.array([q]), np.array([kv]), phase))
        f = f[f["name"] == "attention"]
        return float((f["time_us"] * f["count"]).sum())

    for n, ctx in ((64, 700), (64, 1500), (64, 12000), (23, 3000)):
        tab = float(costs._interp2(np.array([n]), np.array([ctx]), costs.dec_b, costs.dec_ctx, costs.dec_us)[0])
        assert tab == pytest.approx(attention_us(n, n, 1, ctx, "decode"), rel=0.005)
    for chunk, ctx in ((3000, 3000), (8192, 8192), (700, 700), (300, 5000), (1500, 9000)):
        tab = float(costs._interp2(np.array([chunk]), np.array([ctx - chunk]), costs.pre_c, costs.pre_prior,
                                   costs.pre_us[0])[0])  # one chunk: the grid's first chunk count
        assert tab == pytest.approx(attention_us(chunk, 1, chunk, ctx, "prefill"), rel=0.02)


def test_pipeline_stage_weights_of_a_moe_model_with_dense_layers_count_the_heaviest_stage():
    """DeepSeek-V3's first 3 layers are dense: at pp 4 (16 layers a stage) stages 2 and 3 hold 16 MoE layers each,
    not 16 layers of the model's mean (which left 0.85 GB per GPU out in fp8 on 8-way TP: 22.17 GB for 23.02)."""
    m = resolve_model("deepseek-v3")
    fp8 = parse_precision("fp8", None, None)
    c = m.param_counts()
    moe_layer = (c["attention_per_layer"] + c["moe_per_layer_total"]) / 8  # 1 byte a weight, split 8 ways
    assert list(m.moe_layers_per_rank(4)) == [13, 16, 16, 13]
    assert weight_bytes_per_gpu(m, fp8, tp=8, pp=4) == pytest.approx(16 * moe_layer, rel=2e-3)
    # the last stage's output layer beside its 30 MoE layers, in bf16 as DeepSeek-V3's FP8 checkpoint keeps it
    # (HEAD_16BIT: its technical report keeps the embedding and output head in BF16)
    head = c["output_layer"] / 8 * 2
    assert weight_bytes_per_gpu(m, fp8, tp=8, pp=2) == pytest.approx(30 * moe_layer + head, rel=2e-3)


def test_serve_refuses_a_request_longer_than_one_attention_dp_ranks_cache():
    """With attention data parallelism each rank caches its own requests whole: the replica's pooled cache (8
    ranks' worth) admits requests together, but one request must fit one rank's cache."""
    from hybrid.workloads.llm.serving import SchedulerConfig, Trace, kv_capacity_tokens

    s = make_setup("deepseek-v3", "H200", tp=8, ep=8, dtype="fp8", attention_dp=True)
    sched = SchedulerConfig()
    per_rank = kv_capacity_tokens(s, sched) // 8
    with pytest.raises(InvalidInputError, match=f"{per_rank} tokens that fit per GPU"):
        simulate(s, Trace(np.zeros(1), np.array([per_rank + 1]), np.array([1])), sched=sched)


def test_slo_search_on_a_trace_whose_requests_all_arrive_at_once():
    """Such a trace has no gaps to compress or stretch: scaling them gave NaN arrival times and the SLO search never
    returned. All at once they either meet the SLO (no rate bounds them) or miss it (refused, with the reason)."""
    from hybrid.workloads.llm.serving import Trace

    s = make_setup("llama2-7b", "A100")
    burst = Trace(np.zeros(3), np.array([128, 256, 512]), np.array([64, 32, 16]))
    rate, res = max_rate(s, SLO(ttft_ms=5000), 3, None, None, trace=burst)
    assert rate == np.inf and res is not None and len(res.ttft_ms) == 3
    with pytest.raises(InvalidInputError, match="all arrive at the same time"):
        max_rate(s, SLO(ttft_ms=1e-3), 3, None, None, trace=burst)
    with pytest.raises(InvalidInputError, match="finite"):
        simulate(s, Trace(np.array([0.0, np.nan]), np.array([128, 128]), np.array([8, 8])))


def test_request_lengths_are_taken_as_given_or_refused(tmp_path):
    """A fixed length above the tails' cap had been clipped to 1,048,576 tokens without a word, a huge one raised a
    bare TypeError / ValueError, an infinite mean was clipped too, and a trace's 1e30-token prompt wrapped round
    to a negative int64 that "fit" and was simulated."""
    import math

    from hybrid.workloads.llm.serving import read_trace

    rng = np.random.default_rng(0)
    assert (parse_dist("2000000").sample(3, rng) == 2_000_000).all()
    u = parse_dist("1500000-1600000").sample(50, rng)
    assert u.min() >= 1_500_000 and u.max() <= 1_600_000
    for bad in ("99999999999999999999", "1-99999999999999999999", "exp:inf", "exp:1e30", "lognormal:300,inf",
                "normal:nan,5"):
        with pytest.raises(InvalidInputError, match="length distribution"):
            parse_dist(bad)
    huge = tmp_path / "huge.csv"
    huge.write_text("arrival_s,input_len,output_len\n0,128,64\n0.1,1e30,1\n")
    with pytest.raises(InvalidInputError, match="line 3: input_len must be a whole token count"):
        read_trace(huge)
    s = make_setup("llama3-8b", system="DGX-H100")
    with pytest.raises(InvalidInputError, match="a request of 2000064 tokens"):
        simulate(s, make_trace(math.inf, 2, parse_dist("2000000"), parse_dist("64")))


def test_pipeline_send_between_nodes_crosses_the_nics():
    """Neighbouring pipeline stages are tp ranks apart: TP 8 x PP 2 on 8-GPU nodes puts the stages on two nodes
    and TP 2 x PP 8 has its stage 3 -> 4 send between nodes; both had been costed as an NVLink send inside a node
    (a 537 MB prefill activation in 1.2 ms instead of ~11 ms over a 400 Gb/s NIC)."""
    from hybrid.workloads.llm.inference import cost_ops, pass_ops

    def send(tp: int, pp: int) -> tuple[float, float]:
        s = make_setup("llama3.1-405b", system="DGX-H100", tp=tp, pp=pp, dtype="fp8")
        t = cost_ops(pass_ops(s, np.array([16384.0]), np.array([8.0]), np.array([2048.0]), np.array([2048.0])))
        row = t[t["name"] == "pp_send_recv"].iloc[0]
        return float(row["n_nodes"]), float(row["time_us"])

    inside, across, straddling = send(4, 2), send(8, 2), send(2, 8)
    assert inside[0] == 1 and across[0] == 2 and straddling[0] == 2
    # the same message (16384 tokens x 16384 wide in 16 bit) in every case: over the NIC several times slower
    assert across[1] > 5 * inside[1] and straddling[1] > 2 * inside[1]


def test_serve_refuses_a_bad_reserve_as_infer_does(capsys):
    """``llm serve`` sized its KV cache from --reserve-gib unchecked: NaN raised a bare ValueError and a negative
    reserve silently added memory (538,417 KV tokens instead of 513,841 for llama3-8b on an H100 at -1 GiB)."""
    for bad in ("nan", "-1"):
        code, _, err = run(capsys, "llm", "serve", "llama3-8b", "-d", "H100-SXM", "--requests", "4",
                           "--reserve-gib", bad)
        assert code == 2 and "reserve must be a finite number >= 0 GiB" in err, err
    with pytest.raises(InvalidInputError, match="reserve"):
        make_setup("llama3-8b", "H100-SXM", reserve_gib=float("nan"))


def test_infer_compare_shows_the_systems_when_this_run_does_not_fit(capsys):
    """--compare answers "where does it fit": the text report refused at once when this run's own system could not
    hold the model (llama3-70b on one A100), before ranking the others, while --json ranked them."""
    code, out, err = run(capsys, "llm", "infer", "llama3-70b", "--system", "DGX-A100", "--batch", "4",
                         "--compare", "HGX-H200,DGX-H100")
    assert code == 2 and "does not fit" in err
    rows = [ln for ln in out.splitlines() if ln.startswith(("HGX-H200", "DGX-A100", "DGX-H100"))]
    assert [r.split()[0] for r in rows] == ["HGX-H200", "DGX-A100", "DGX-H100"]
    assert "this run; does not fit" in rows[1] and "does not fit" in rows[2] and "does not fit" not in rows[0]


def test_serving_decode_cost_at_a_sliding_window_is_not_cut_short():
    """A sliding window caps the cache, so decode attention is the same at any context past the window; the step
    costs interpolated linearly between grid points either side of the window and priced mistral-7b's steps
    at a 4096-token mean context 9% below those at 6000 (serve's TPOT 9.9 ms against infer's 10.9 ms)."""
    from hybrid.workloads.llm.serving import SchedulerConfig, StepCosts

    s = make_setup("mistral-7b", "H100-SXM")
    assert s.model.window_size == 4096 and s.model.window_layer_share == 1.0
    c = StepCosts.build(s, 192000, 32, 6064)
    at_window, beyond = c.decode_steps_us(32, np.array([4096.0, 6000.0]))
    assert at_window == pytest.approx(beyond, rel=1e-3)
    static = predict_static(s, 32, 6000, 64)
    res = simulate(s, make_trace(np.inf, 32, parse_dist("6000"), parse_dist("64")),
                   sched=SchedulerConfig(max_batched_tokens=192000, max_seqs=32))
    assert np.median(res.tpot_ms) == pytest.approx(static.tpot_ms, rel=0.03)


def test_capacity_longest_context_says_when_it_is_past_the_models_positions(capsys):
    """The per-context rows said "beyond the model's 32768 positions"; the longest context for a batch (634,496
    tokens for mistral-7b, whose sliding window caps the cache) said nothing unless the positions were learned."""
    code, out, _ = run(capsys, "llm", "capacity", "mistral-7b", "--device", "A100", "--batch", "8",
                       "--max-num-tokens", "8192", "--json")
    mc = json.loads(out)["max_context_for_batch"]
    assert code == 0 and mc["max_context"] > 32768 and mc["note"] == "beyond the model's 32768 positions"
    code, out, _ = run(capsys, "llm", "capacity", "llama3-8b", "--device", "H100-SXM", "--batch", "64", "--json")
    mc = json.loads(out)["max_context_for_batch"]
    assert code == 0 and mc["max_context"] < 8192 and "note" not in mc


def test_trace_errors_name_the_files_own_line(tmp_path):
    """pandas skips comment and blank lines, so "line {row + 2}" pointed at the header of a trace with two comment
    lines and a blank one (the bad row is on line 6); a header with spaces after its commas was "no input_len
    column"."""
    from hybrid.workloads.llm.serving import read_trace

    f = tmp_path / "t.csv"
    f.write_text("# my trace\n# exported\narrival_s,input_len,output_len\n0,128,64\n\n1,-1,5\n")
    with pytest.raises(InvalidInputError, match="line 6: input_len"):
        read_trace(f)
    f.write_text("arrival_s, input_len, output_len\n0, 128, 64\n1, 12, 5\n")
    t = read_trace(f)
    assert t.input_len.tolist() == [128, 12] and t.output_len.tolist() == [64, 5]
    # a column named twice (after a comment line): the first was read, the second dropped without a word
    f.write_text("# exported\narrival_s,input_len,output_len, arrival_s\n0,10,5,1\n")
    with pytest.raises(InvalidInputError, match="names column\\(s\\) 'arrival_s' more than once"):
        read_trace(f)


def test_a_step_budget_below_the_running_requests_is_refused(capsys):
    """--max-batched-tokens 16 with --max-seqs 256 ran steps of up to 256 decode tokens, 16 times the stated
    budget, without a word (vLLM refuses max_num_batched_tokens < max_num_seqs)."""
    from hybrid.workloads.llm.serving import SchedulerConfig

    with pytest.raises(InvalidInputError, match="must be at least --max-seqs"):
        SchedulerConfig(max_batched_tokens=16, max_seqs=256)
    assert SchedulerConfig(max_batched_tokens=64, max_seqs=64).max_seqs == 64
    code, _, err = run(capsys, "llm", "serve", "llama3-8b", "-d", "H100-SXM", "--requests", "4",
                       "--max-batched-tokens", "16")
    assert code == 2 and "--max-batched-tokens (16) must be at least --max-seqs (256)" in err


def test_prefill_activations_count_the_wider_dense_layers_of_an_moe_model():
    """The widest prefill intermediate of an MoE model with dense layers was the experts' (top-k x expert width)
    alone: Llama 4 Maverick's dense MLPs are 16384 wide against one 8192-wide expert. By hand, per token per GPU
    at TP 8 in 16 bit: 2 x (2h + 3 f / 8)."""
    from hybrid.workloads.llm.kv_cache import activation_bytes

    fp16 = Precision("fp16")
    m = resolve_model("llama4-maverick")  # (its QKV, 56 heads of 128 / 8, is narrower)
    assert float(activation_bytes(m, fp16, 1.0, 0.0, 8)) == pytest.approx(2 * (2 * 5120 + 3 * 16384 / 8))
    # an MoE model without dense layers keeps the routed experts' width (Qwen3-235B: 8 x 1536)
    q = resolve_model("qwen3-235b-a22b")
    assert float(activation_bytes(q, fp16, 1.0, 0.0, 8)) == pytest.approx(2 * (2 * 4096 + 3 * 1536 * 8 / 8))


def test_serve_notes_a_context_past_the_positions_once(capsys):
    code, out, err = run(capsys, "llm", "serve", "llama3-8b", "-d", "H100-SXM", "--requests", "3", "--input-dist",
                         "9000", "--json")
    notes = json.loads(out)["notes"]
    assert code == 0 and sum("exceeds the 8192 positions" in n for n in notes) == 1, notes
    assert "the longest request: a context of 9128 tokens exceeds the 8192 positions" in err


def test_serve_says_what_leaves_no_room_for_the_kv_cache(capsys):
    """llama3-70b on one A100: `infer` names the 131.4 GiB of weights, `serve` said only "no memory left for the
    KV cache beside weights and activations"."""
    code, _, err = run(capsys, "llm", "serve", "llama3-70b", "--system", "DGX-A100", "--requests", "4")
    assert code == 2 and "weights 131.4 GiB" in err and "of 80.0 GiB" in err and "more tensor parallelism" in err


def test_serving_clock_keeps_its_resolution_or_refuses():
    """At 1e-300 requests/s the arrivals sit near 1e300 s, where adding a step's milliseconds leaves the clock where
    it was: every TTFT, TPOT and latency came out 0. Arrival times in Unix seconds are simulated as from the first
    arrival, the same as the trace shifted to 0."""
    import math

    from hybrid.workloads.llm.serving import Trace

    s = make_setup("llama3-8b", "H100-SXM")
    with pytest.raises(InvalidInputError, match="too long for the simulation's clock"):
        simulate(s, make_trace(1e-300, 5, parse_dist("512"), parse_dist("128")))
    t = make_trace(3.0, 20, parse_dist("512"), parse_dist("64"), seed=2)
    unix = Trace(t.arrival_s + 1.7e9, t.input_len, t.output_len)
    a, b = simulate(s, t), simulate(s, unix)
    assert np.median(a.ttft_ms) > 1 and not math.isnan(a.output_tokens_per_s_per_gpu)
    # (the arrivals themselves were rounded to 0.24 us at 1.7e9 s)
    np.testing.assert_allclose(b.ttft_ms, a.ttft_ms, rtol=0, atol=1e-3)
    np.testing.assert_allclose(b.latency_ms, a.latency_ms, rtol=0, atol=1e-3)


def test_absurd_lengths_and_batches_are_refused_by_name(capsys):
    """A prompt or batch far past any model (2^39 tokens, 10^20 requests) was an OverflowError or an error naming
    an internal op-table row; now one line naming the option's value and the bound, before any costing; the
    largest request still allowed (2^26 tokens) is predicted (here: does not fit, with its reason)."""
    cases = {("--input", "549755813888"): "a request of 549755813888 + 128 tokens is longer than any model's context",
             ("--batch", "99999999999999999999"): "batch must be at most 1099511627776 (2^40)",
             ("--batch", "1048576", "--input", "1048576"): "holds 1.1e+12 tokens, more than the 1.1e+12 (2^40)"}
    for args, said in cases.items():
        assert main(["llm", "infer", "llama3-8b", "--device", "H100-SXM", *args]) == 2
        err = capsys.readouterr().err
        assert said in err and "OverflowError" not in err and "CSV line" not in err, err
    assert main(["llm", "infer", "llama3-8b", "--device", "H100-SXM", "--input", str((1 << 26) - 64),
                 "--output", "64"]) == 2
    assert "does not fit: one request's KV cache" in capsys.readouterr().err
    s = make_setup("llama3-8b", device="H100-SXM")
    with pytest.raises(InvalidInputError, match="at most 67,108,864"):
        memory_plan(s.model, s.precision, s.device.mem_capacity, batch=1, input_len=1 << 26, output_len=1)


def test_the_output_layer_stays_16_bit_in_quantised_deployments():
    """Quantisers leave lm_head unquantised (ModelOpt's FP8 / INT4-AWQ / NVFP4 configs, vLLM's AWQ / GPTQ / FP8,
    DeepSeek-V3's FP8 checkpoint): its weights count 2 bytes each in every format, and its decode GEMM reads them
    so; the other GEMMs keep the deployment's format."""
    from hybrid.workloads.llm.inference import cost_ops, pass_ops

    m = resolve_model("llama3-8b")
    head = m.param_counts()["output_layer"]
    f16 = parse_precision("fp16", None, None)
    for dtype, weights in (("fp8", None), ("fp16", "int4"), ("fp16", "int8")):
        p = parse_precision(dtype, weights, None)
        # everything but the head scales with the format; the head's 2 bytes a weight do not
        body16 = weight_bytes_per_gpu(m, f16) - 2 * head
        assert weight_bytes_per_gpu(m, p) - 2 * head < body16 * 0.6
        s = make_setup("llama3-8b", device="H100-SXM", dtype=dtype, weights=weights)
        ops = pass_ops(s, np.array([4.0]), np.array([4.0]), np.array([1.0]), np.array([512.0]), "decode")
        lm = ops[ops["name"] == "lm_head"].iloc[0]
        assert lm["dtype"] in ("fp16", "bf16")
        assert lm["bytes_actual"] == pytest.approx(2.0 * (4 * m.hidden_size + 4 * m.vocab_size + head))
        up = ops[ops["name"] == "mlp_up_proj"].iloc[0]
        assert up["bytes_actual"] < 0.6 * 2.0 * up["k"] * up["n"]  # the layers' weights stay in the format
        assert float(cost_ops(ops).loc[lambda f: f["name"] == "lm_head", "time_us"].iloc[0]) > 0


def test_serve_compare_ranks_the_other_systems_when_this_run_does_not_fit(capsys):
    """`llm serve --compare` stopped with "does not fit" when this run's own system could not hold the model,
    without ranking the others (`llm infer --compare` ranks them): now the others are ranked, this run last with
    its reason; --json carries the ranking and the error (exit 0), the text shows the table, then exits 2."""
    args = ["llm", "serve", "llama3-70b", "--system", "DGX-A100", "--requests", "20", "--slo-ttft", "500ms",
            "--compare", "HGX-H200"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["error"].startswith("does not fit: no memory left for the KV cache: weights 131.4 GiB")
    assert [r["system"] for r in out["compare"]] == ["HGX-H200", "DGX-A100"]
    assert out["compare"][0]["rate_per_gpu"] > 0 and out["compare"][1]["note"].startswith("this run: does not fit")
    assert main(args) == 2
    cap = capsys.readouterr()
    assert "systems by SLO-meeting requests/s per GPU" in cap.out and "HGX-H200" in cap.out
    assert cap.err.startswith("error: does not fit")
    assert main(args[:-2]) == 2  # without --compare: the refusal alone
    assert "does not fit" in capsys.readouterr().err


def test_a_dense_first_moe_pipeline_runs_at_the_pace_of_its_all_moe_stage():
    """DeepSeek-V3's first 3 layers are dense: at pp 4 its stages hold 13, 16, 16 and 13 MoE layers. The pipeline
    waits on a stage of 16 MoE layers, as the same model with every layer MoE does; costing the stage at the mean
    MoE share (15.2 MoE + 0.8 dense layers) had put the decode period ~3% short."""
    from dataclasses import replace

    from hybrid.workloads.llm.inference import _static_batch, stage_multipliers

    m = resolve_model("deepseek-v3")
    assert list(m.moe_layers_per_rank(4)) == [13, 16, 16, 13]
    mult = stage_multipliers([make_setup(m, system="DGX-H100", tp=8, pp=4, dtype="fp8")])[0]
    share = 58 / 61
    np.testing.assert_allclose(mult[:, 0], [1, 1, 1, 13 / 16])
    np.testing.assert_allclose(mult[:, 1], np.array([13, 16, 16, 13]) / (share * 16))
    np.testing.assert_allclose(mult[:, 2], np.array([3, 0, 0, 0]) / ((1 - share) * 16))
    dense = make_setup("llama3-70b", system="DGX-H100", tp=8, pp=4, dtype="fp8")
    assert (stage_multipliers([dense])[0] == 1.0).all()  # every stage alike

    def stage(model):
        s = make_setup(model, system="DGX-H100", tp=8, pp=4, dtype="fp8")
        return _static_batch([s], np.array([64]), np.array([1024]), np.array([256]), None, 8).stage_times["stage"][0]

    every_moe = replace(m, moe_first_k_dense=0)
    np.testing.assert_allclose(stage(m), stage(every_moe), rtol=1e-9)  # prefill and decode: 16 MoE layers each


def test_roofline_plot_written_only_for_a_deployment_that_fits(capsys, tmp_path):
    """``--roofline-plot`` with ``--json`` (or ``--compare``) wrote the plot of a deployment that does not fit and
    then failed (exit 2); the text form refuses before plotting. A failed command now leaves no plot, and one that
    succeeds writes it, creating missing parent directories as every output does."""
    plot = tmp_path / "sub" / "r.png"
    code, out, err = run(capsys, "llm", "infer", "llama2-70b", "--device", "A100", "--json", "--roofline-plot",
                         str(plot))
    assert code == 2 and "does not fit" in err and json.loads(out)["fits"] is False
    assert not plot.exists() and not plot.parent.exists()
    code, _, err = run(capsys, "llm", "infer", "llama2-70b", "--device", "A100", "--compare", "H100-SXM",
                       "--roofline-plot", str(plot))
    assert code == 2 and "does not fit" in err and not plot.exists()
    code, out, _ = run(capsys, "llm", "infer", "llama2-7b", "--device", "A100", "--json", "--roofline-plot", str(plot))
    assert code == 0 and plot.read_bytes().startswith(b"\x89PNG")
    # where it went, as `llm memory --plot` says: a JSON key, and a line of the text form
    assert json.loads(out)["plot"] == str(plot)
    plot.unlink()
    code, out, _ = run(capsys, "llm", "infer", "llama2-7b", "--device", "A100", "--roofline-plot", str(plot))
    assert code == 0 and f"plot written to {plot}" in out and plot.exists()
    # a parent that is a file: the atomic writer's one-line reason, not mkdir's bare "file exists"
    code, _, err = run(capsys, "llm", "infer", "llama2-7b", "--device", "A100", "--roofline-plot",
                       str(plot / "x.png"))
    assert code == 2 and "a parent is a file, not a directory" in err


def test_llama4_chunked_attention_caps_the_cache_and_the_prefill_attention():
    """Llama 4 Scout/Maverick attend within 8192-token chunks on 3 in 4 layers (the 4th, NoPE, globally); the library
    and config.json loading costed every layer as global: a 128k-token request's KV cache 3.2x too large, a 32k
    prompt's attention with 4x the within-chunk pairs on those layers. The cache of a chunked layer is bounded at
    one chunk per request (what a serving system reserves; a decode step reads up to it), and prefill attention
    counts the within-chunk causal pairs exactly."""
    from dataclasses import replace

    from hybrid.workloads.llm.inference import cost_ops, pass_ops
    from hybrid.workloads.llm.serving import StepCosts

    for name in ("llama4-scout", "llama4-maverick"):
        assert (resolve_model(name).attention_chunk_size, resolve_model(name).chunk_layer_share) == (8192, 0.75)
    scout = resolve_model("llama4-scout")
    glob = replace(scout, attention_chunk_size=None)
    p, ctx = parse_precision("fp8"), 131072
    chunked = memory_plan(scout, p, 80 * 2**30, batch=1, input_len=ctx - 1024, output_len=1024, tp=8)
    full = memory_plan(glob, p, 80 * 2**30, batch=1, input_len=ctx - 1024, output_len=1024, tp=8)
    assert chunked.kv_per_request == pytest.approx(full.kv_per_request * (0.75 * 8192 + 0.25 * ctx) / ctx)
    assert chunked.max_batch > full.max_batch
    s = make_setup(scout, "H100-SXM", tp=8, dtype="fp8")

    def attention(tokens: float, q: float, kv: float, phase: str):
        f = cost_ops(pass_ops(s, np.array([tokens]), np.array([1.0]), np.array([q]), np.array([kv]), phase))
        return f[f["name"] == "attention"]

    heads, d, layers = 40 / 8, 128, 48
    pre = attention(32768, 32768, 32768, "prefill")
    pairs = 0.75 * 4 * 8192 * 8193 / 2 + 0.25 * 32768 * 32769 / 2
    # (the op row holds whole keys: 8192 for the 8192.5 that gives the pairs exactly)
    assert float((pre["flops"] * pre["count"]).sum()) == pytest.approx(4 * heads * d * pairs * layers, rel=1e-4)
    # a prompt chunk of 4096 tokens after 16,000: queries at positions 16,000..20,095 (the chunk boundary at 16,384)
    q, before = 4096, 16000
    local = sum(p % 8192 + 1 for p in range(before, before + q))
    pairs = 0.75 * local + 0.25 * (q * (before + q) - q * (q - 1) / 2)
    pre = attention(q, q, before + q, "prefill")
    assert float((pre["flops"] * pre["count"]).sum()) == pytest.approx(4 * heads * d * pairs * layers, rel=1e-6)
    # a decode step at 20,000 tokens reads at most a chunk on the chunked layers
    dec = attention(1, 1, 20000, "decode")
    assert float(dec["kv_len"].iloc[0]) == pytest.approx(0.75 * 8192 + 0.25 * 20000)
    # the serving cost grid has the chunk as a decode context point (the kink of that bound)
    assert 8192.0 in StepCosts.build(s, 8192, 16, 32768).dec_ctx


def test_reward_and_bare_models_cost_no_vocabulary_head():
    """A sequence classifier (reward model) or a bare model loaded from config.json was costed with a vocabulary-sized
    LM head: its GEMM, the logits' TP gather and sampling over 128k columns, and its 16-bit weights in memory. The
    classifier's score layer runs on the last token of each sequence; a bare model has no head and samples nothing."""
    from hybrid.workloads.llm.inference import pass_ops
    from hybrid.workloads.llm.model import from_dict

    base = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
            "num_key_value_heads": 8, "vocab_size": 128256, "intermediate_size": 14336,
            "max_position_embeddings": 8192}
    lm = make_setup(from_dict({**base, "architectures": ["LlamaForCausalLM"]}), "H100-SXM", tp=2)
    reward = make_setup(from_dict({**base, "architectures": ["LlamaForSequenceClassification"], "num_labels": 1}),
                        "H100-SXM", tp=2)
    bare = make_setup(from_dict({**base, "architectures": ["LlamaModel"]}), "H100-SXM", tp=2)

    def head_ops(s):
        ops = pass_ops(s, np.array([4096.0]), np.array([4.0]), np.array([1024.0]), np.array([1024.0]))
        return ops[ops["name"].isin(["lm_head", "logits_all_gather", "sampling"])]

    assert set(head_ops(lm)["name"]) == {"lm_head", "logits_all_gather", "sampling"}
    score = head_ops(reward)
    assert score["name"].tolist() == ["lm_head"] and float(score["n"].iloc[0]) == 1.0
    assert float(score["m"].iloc[0]) == 4.0  # the last token of each of the 4 sequences
    assert head_ops(bare).empty
    w = {k: weight_bytes_per_gpu(s.model, s.precision, 2, 1) for k, s in (("lm", lm), ("r", reward), ("b", bare))}
    assert w["lm"] - w["b"] == pytest.approx(128256 * 4096 / 2 * 2)  # the untied 16-bit LM head's TP share
    assert w["r"] - w["b"] == pytest.approx(4096 * 2)
    ttft = [predict_static(s, 8, 1024, 1).ttft_ms for s in (lm, reward, bare)]
    assert ttft[0] > ttft[1] >= ttft[2]
    # they generate nothing: more than one output token was costed as decode steps they never run
    for s in (reward, bare):
        with pytest.raises(InvalidInputError, match="generates no tokens, so every request has output length 1"):
            predict_static(s, 8, 1024, 16)
        with pytest.raises(InvalidInputError, match="generates no tokens"):
            simulate(s, Trace(arrival_s=np.zeros(2), input_len=np.full(2, 64), output_len=np.array([1, 8])))


def test_serve_with_one_running_request_at_a_time_prices_its_steps():
    """--max-seqs 1 (one request at a time, a latency-only deployment) left the step costs' grid of prompt chunks
    one point long, and interpolating between its "two" ends divided 0 by 0: every prefill step cost NaN, TTFT
    and latency came out null (one request) and a second request never started (the simulation's clock stuck at
    NaN: the command hung). Each request now costs what a static batch of one does."""
    import math

    from hybrid.workloads.llm.serving import SchedulerConfig, StepCosts

    s = make_setup("llama3-8b", "H100-SXM")
    costs = StepCosts.build(s, 2048, 1, 640)
    assert math.isfinite(costs.prefill_attention_us(np.array([512.0]), np.array([0.0])))
    static = predict_static(s, 1, 512, 128)
    for n in (1, 3):
        res = simulate(s, make_trace(math.inf, n, parse_dist("512"), parse_dist("128")),
                       sched=SchedulerConfig(max_seqs=1), costs=costs)
        assert np.isfinite(res.ttft_ms).all() and np.isfinite(res.latency_ms).all()
        assert res.ttft_ms[0] == pytest.approx(static.ttft_ms, rel=0.01)
        assert res.latency_ms[-1] == pytest.approx(n * static.latency_ms, rel=0.02)  # one after the other


def test_serve_help_says_its_pipeline_option_takes_one_stage_only(capsys):
    """`llm serve --help` offered --pp as any pipeline degree, and serve then refused every pp > 1."""
    assert main(["llm", "serve", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "simulates one pipeline stage: 1 only" in text
    assert main(["llm", "serve", "llama3-8b", "-s", "DGX-H100", "--pp", "2", "--rate", "1/s"]) == 2
    assert "pp = 1" in capsys.readouterr().err


def test_prefill_final_norm_runs_over_every_prompt_token_the_output_layer_over_the_last():
    """Engines apply the final norm to the whole hidden state of a pass and only then pick each sequence's last
    token for the output layer (TensorRT-LLM: ``ln_f`` before ``gather_last_token_logits``; vLLM and Hugging Face
    likewise): a prefill of 4 prompts of 128 tokens normalises 512 rows, its output layer multiplies 4. The norm
    was costed over the 4 last tokens only (rows 4: 1/128 of its bytes)."""
    from hybrid.workloads.llm.inference import cost_ops, pass_ops

    s = make_setup("llama2-7b", "A100")
    ops = pass_ops(s, np.array([512.0, 4.0]), np.array([4.0, 4.0]), np.array([128.0, 1.0]), np.array([128.0, 129.0]),
                   np.array(["prefill", "decode"], dtype=object))
    norm = ops[ops["name"] == "final_layernorm"].sort_values("scenario")
    head = ops[ops["name"] == "lm_head"].sort_values("scenario")
    assert norm["rows"].tolist() == [512.0, 4.0]
    assert head["m"].tolist() == [4.0, 4.0]
    # the prefill's norm reads and writes its 512 rows (fp16, 4096 wide): 508 rows more than the decode step's 4
    costed = cost_ops(norm)
    assert costed["bytes"].iloc[0] - costed["bytes"].iloc[1] == pytest.approx(508 * 4096 * 2 * 2, rel=0.01)


def test_serve_attention_dp_prices_a_step_at_its_busiest_rank():
    """Attention data parallelism caches each request whole on one rank, so a step runs its non-expert ops at the
    busiest rank's tokens (requests placed on the least-loaded rank, as a DP-attention scheduler does), and only
    the experts see the whole EP group's tokens. Spreading a step's tokens evenly priced one 512-token prompt on 8
    H200s as 64 tokens a rank: TTFT 31.1 ms against the static batch's 51.1; 4 and 9 requests disagreed too."""
    import math

    from hybrid.workloads.llm.serving import SchedulerConfig

    s = make_setup("deepseek-v3", "H200", tp=8, ep=8, dtype="fp8", attention_dp=True)
    for n in (1, 4, 8):  # every prompt prefilled in the first step
        static = predict_static(s, n, 512, 32)
        res = simulate(s, make_trace(math.inf, n, parse_dist("512"), parse_dist("32")),
                       sched=SchedulerConfig(max_batched_tokens=4096))
        assert np.median(res.ttft_ms) == pytest.approx(static.ttft_ms, rel=0.05), n
        assert np.median(res.tpot_ms) == pytest.approx(static.tpot_ms, rel=0.05), n


def test_serve_attention_dp_prices_the_busiest_ranks_own_requests():
    """When the ranks' loads drift apart (requests finish at different times), a step's output layer and decode
    attention run at the busiest rank's own requests and contexts, not at ceil(n / ranks) of the step's n. Qwen3-30B-A3B
    on 4 H100s: 32 prompts of 8192 tokens placed 8 a rank, the 8 on rank 0 generating long, the others 2 tokens:
    once the others finish, a decode step is rank 0's 8 requests (the static batch of 32's rank ops) beside the
    routed experts of 8 tokens (the static batch of 8's). Priced at ceil(8 / 4) = 2 requests a rank, a step came
    out 5.89 ms (the static batch of 8's 5.84) against 6.60 ms."""
    from hybrid.workloads.llm.serving import SchedulerConfig

    s = make_setup("qwen3-30b-a3b", system="DGX-H100", tp=4, ep=4, dtype="fp8", attention_dp=True)
    n, lat = 32, {}
    for long in (256, 512):  # the difference: steps 256..511 of the long requests, alone on rank 0
        out = np.where(np.arange(n) % 4 == 0, long, 2)  # requests 0, 4, ... 28 are rank 0's (least loaded first)
        res = simulate(s, Trace(np.zeros(n), np.full(n, 8192), out), sched=SchedulerConfig(8192, 64))
        lat[long] = float(np.mean(res.latency_ms[out == long]))
    step = (lat[512] - lat[256]) / 256

    def decode_ms(batch: int, out: int, experts: bool) -> float:
        d = predict_static(s, batch, 8192, out).breakdown_ms["decode"]
        return sum(v for k, v in d.items() if (k in ("moe", "comm")) == experts)  # the experts and their all-to-alls

    rank_ops = decode_ms(32, 512, False) - decode_ms(32, 256, False)
    experts = decode_ms(8, 512, True) - decode_ms(8, 256, True)
    assert step == pytest.approx((rank_ops + experts) / 256, rel=0.03)


def test_serve_attention_dp_max_seqs_is_each_ranks_own():
    """With attention data parallelism every rank schedules its own requests, and ``max_seqs`` is each rank's limit
    (TensorRT-LLM admits up to tp x max_batch_size over its attention-DP ranks, vLLM runs a scheduler with its own
    max_num_seqs per DP engine), as ``max_batched_tokens`` already was. Applied to the group, 2 running requests
    left 2 of 4 ranks idle: 8 requests at once ran 2 at a time (TTFT p100 about 4x one request's)."""
    from hybrid.workloads.llm.serving import SchedulerConfig

    s = make_setup("qwen3-30b-a3b", system="DGX-H100", tp=4, ep=4, dtype="fp8", attention_dp=True)
    sched = SchedulerConfig(max_batched_tokens=1024, max_seqs=2)
    res = simulate(s, Trace(np.zeros(9), np.full(9, 256), np.full(9, 64)), sched=sched)
    assert res.max_running == 8  # two on each of the 4 ranks; the ninth waits for one to finish
    assert "<= 2 running per rank" in res.notes[0]
    # every prompt of the first 8 prefilled in the first step (a rank's 2 x 256 tokens within its own 1024)
    assert np.sort(res.ttft_ms)[7] == pytest.approx(np.min(res.ttft_ms), rel=1e-9)
    assert np.max(res.ttft_ms) > 2 * np.min(res.ttft_ms)  # the ninth after a first request finished


def test_serve_attention_dp_kv_cache_leaves_room_for_a_ranks_whole_step():
    """Each attention-DP rank runs steps of its own token budget, so its KV cache is what that step's activations
    leave (the static plan of one rank prefilling a budget's worth of tokens). The activations were reserved for a
    tp-th of the budget: DeepSeek-V3 on 8 H200s, 4096 tokens a step: 16,412 tokens a rank (1.2%) over."""
    from hybrid.workloads.llm.serving import SchedulerConfig, kv_capacity_tokens

    s = make_setup("deepseek-v3", "H200", tp=8, ep=8, dtype="fp8", attention_dp=True)
    plan = memory_plan(s.model, s.precision, s.device.mem_capacity, batch=1, input_len=4096, output_len=1, tp=8,
                       attention_dp=True, prefill_tokens=4096)
    per_rank = int((plan.capacity - plan.reserve - plan.weights - plan.activations) // plan.kv_per_token)
    assert kv_capacity_tokens(s, SchedulerConfig(4096, 1)) == 8 * per_rank


def test_tied_output_layer_has_its_own_copy_on_the_last_pipeline_stage():
    """With PP > 1 an engine's last stage holds its own copy of a tied embedding as the output layer (vLLM builds
    ``embed_tokens`` on the first rank and, tied, on the last): Falcon-180B's last stage carries the output layer
    and the final norm as an untied model's does; it was counted without the output layer, so the first stage
    (embedding alone) came out the heavier by the final norm."""
    from hybrid.workloads.llm.model import load_model, with_overrides

    m = load_model("falcon-180b")
    assert m.tied_output
    untied = with_overrides(m, untie_embeddings_and_output_weights=True)
    p = parse_precision("bf16")
    c = m.param_counts()
    for tp, pp in ((8, 2), (4, 4)):
        assert weight_bytes_per_gpu(m, p, tp, pp) == pytest.approx(weight_bytes_per_gpu(untied, p, tp, pp),
                                                                   rel=1e-12)
    # the first stage's embedding against the last stage's output layer and final norm
    layers = math.ceil(m.num_layers / 2) * (weight_bytes_per_gpu(m, p, 8, 1) - 2.0 * c["word_embedding"] / 8
                                             - 2.0 * c["final_norm"]) / m.num_layers
    assert weight_bytes_per_gpu(m, p, 8, 2) - layers == pytest.approx(2.0 * (c["word_embedding"] / 8
                                                                             + c["final_norm"]), rel=1e-9)


def test_mla_chunk_after_earlier_tokens_expands_the_cached_latents_too():
    """An MLA prompt chunk after earlier tokens of its prompt attends over per-head keys and values of the whole
    context: vLLM's MLA prefill (``_compute_prefill_context``) gathers the cached prefix's latents and runs
    ``kv_b_proj`` on them as well. The pass priced only the chunk's own latents (1024 rows of a chunk after 3072
    cached tokens, not 1024 + 3072), and a serving step the same."""
    from hybrid.workloads.llm.inference import pass_ops
    from hybrid.workloads.llm.serving import StepCosts

    s = make_setup("deepseek-v3", "H200", tp=8, dtype="fp8")
    ops = pass_ops(s, np.array([1024.0, 1024.0]), np.ones(2), np.array([1024.0, 1024.0]), np.array([1024.0, 4096.0]),
                   names=("attn_kv_b_proj", "attn_kv_b_proj_context"))
    rows = {(int(r.scenario), r.name): float(r.m) for r in ops.itertuples()}
    assert rows == {(0, "attn_kv_b_proj"): 1024.0, (1, "attn_kv_b_proj"): 1024.0,
                    (1, "attn_kv_b_proj_context"): 3072.0}
    costs = StepCosts.build(s, 2048, 8, 8192)
    fresh, after = (costs.step_us(1024, 0, 0, 0.0, np.array([1024.0]), np.array([c])) for c in (1024.0, 4096.0))
    prefix = float(costs._interp1(np.array([3072.0]), costs.tokens, costs.mla_prefill_us)[0])
    att = costs.prefill_attention_us(np.array([1024.0]), np.array([3072.0]))
    assert after - fresh == pytest.approx(prefix + att - costs.prefill_attention_us(np.array([1024.0]),
                                                                                   np.array([0.0])), rel=1e-9)


def test_serve_attention_dp_admits_a_request_only_where_one_rank_can_cache_it():
    """Each attention-DP rank caches its own requests: a request is admitted onto a rank whose own cache holds it.
    Checked against the pooled cache of all 8 ranks, a ninth request of 60% of a rank's cache went onto a rank
    already holding one (120% of its cache) instead of waiting for one to finish."""
    from hybrid.workloads.llm.serving import SchedulerConfig, kv_capacity_tokens

    # a reserve that leaves each rank about 78k tokens of cache (prompts within the model's 163,840 positions)
    s = make_setup("deepseek-v3", "H200", tp=8, ep=8, dtype="fp8", attention_dp=True, reserve_gib=44)
    sched = SchedulerConfig()
    per_rank = kv_capacity_tokens(s, sched) // 8
    size = int(per_rank * 0.6)
    res = simulate(s, Trace(np.zeros(9), np.full(9, size - 4), np.full(9, 4)), sched=sched)
    assert res.max_running == 8
    small = simulate(s, Trace(np.zeros(9), np.full(9, per_rank // 3), np.full(9, 4)), sched=sched)
    assert small.max_running == 9  # two a rank fit


def test_serve_attention_dp_ranks_prefill_within_budgets_of_their_own():
    """Each attention-DP rank schedules its own requests with its own token budget (SGLang's DP attention, TensorRT-
    LLM's attention DP run a scheduler per rank): two 2048-token prompts on two ranks prefill in the same step, as
    the static batch of 2 does. One budget of 2048 tokens for the whole group prefilled the second prompt a step
    later, and once a prompt's chunk sat on one rank that step cost it whole (TTFT p100 2x the static batch's)."""
    import math

    s = make_setup("deepseek-v3", "H200", tp=8, ep=8, dtype="fp8", attention_dp=True)
    static = predict_static(s, 2, 2048, 16)
    res = simulate(s, make_trace(math.inf, 2, parse_dist("2048"), parse_dist("16")))
    assert np.max(res.ttft_ms) == pytest.approx(static.ttft_ms, rel=0.05)
    assert res.notes[0].startswith("scheduler: FCFS, chunked prefill, 2048 tokens/step per attention-DP rank")
    # the KV reservation per GPU is one rank's cache, not the 8 ranks' pooled
    assert f"({res.kv_capacity_tokens // 8} tokens/GPU, {res.kv_capacity_tokens} over the 8 ranks)" in res.notes[0]
