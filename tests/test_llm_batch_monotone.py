"""Static-batch LLM inference with a calibrated model: op times and TPOT never fall as the batch grows.

The learned kernel corrections are piecewise constant in their size features, so the same op at a slightly
larger batch could come out faster (decode GEMMs at m = batch, norms and activations at batch rows); the batch
envelope of :func:`hybrid.workloads.llm.inference._static_batch` prices every op on a batch grid and fits it
non-decreasing (docs/llm_inference.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hybrid.corrections.kernel_xgb import GemmXGB, PointwiseXGB, XGBParams
from hybrid.corrections.predictor import HybridPredictor
from hybrid.data.bundle import load_bundle
from hybrid.engine.costs import RooflineCostModel
from hybrid.workloads.llm.inference import (
    batch_grid,
    cost_ops,
    isotonic_log,
    make_setup,
    never_superlinear,
    pass_ops,
    predict_many,
    predict_static,
)

ROOT = Path(__file__).resolve().parents[1]
BATCHES = (1, 2, 4, 8, 16, 32)


@pytest.fixture(scope="module")
def h100_predictor() -> HybridPredictor:
    """GEMM and pointwise trees fitted on the committed H100 bundle (small, a few seconds)."""
    table, cat = load_bundle(ROOT / "datasets" / "H100-SXM")
    params = XGBParams(n_estimators=80, max_depth=6)
    return HybridPredictor(cat, corrections=[GemmXGB(params), PointwiseXGB(params)]).fit(table)


def test_isotonic_log_is_the_least_squares_monotone_fit_of_the_logs():
    seq = np.array([[1.0, 10.0, 1.0, 2.0, 3.0], [1.0, 2.0, 2.0, 4.0, 5.0]])
    fit = isotonic_log(seq)
    assert np.all(np.diff(fit, axis=-1) >= 0)
    np.testing.assert_allclose(fit[1], seq[1])  # already non-decreasing: unchanged
    pooled = np.exp(np.mean(np.log([10.0, 1.0, 2.0])))  # the violators pooled at their geometric mean
    np.testing.assert_allclose(fit[0], [1.0, pooled, pooled, pooled, 3.0])


def test_never_superlinear_caps_a_count_at_its_pieces():
    """n never costs more than ceil(n / m) ops of a smaller grid count m; a non-decreasing row stays so, a row
    already sub-additive comes back unchanged, NaN tails are left alone."""
    grid = np.array([1.0, 2.0, 3.0, 4.0, 8.0])
    got = never_superlinear(np.array([[1.0, 1.5, 5.0, 5.0, 20.0]]), grid)
    # 3: min(3 x 1, 2 x 1.5) = 3; 4: min(4 x 1, 2 x 1.5, 2 x 3) = 3; 8: min(8, 4 x 1.5, 3 x 3, 2 x 3) = 6
    np.testing.assert_allclose(got, [[1.0, 1.5, 3.0, 3.0, 6.0]])
    flat = np.array([[2.0, 2.0, 2.5, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0, 8.0]])  # sub-additive already
    np.testing.assert_allclose(never_superlinear(flat, grid), flat)
    tail = never_superlinear(np.array([[1.0, 3.0, np.nan, np.nan, np.nan]]), grid)
    np.testing.assert_allclose(tail[0, :2], [1.0, 2.0])
    assert np.isnan(tail[0, 2:]).all()
    rng = np.random.default_rng(0)
    rows = np.cumsum(rng.exponential(1.0, (50, 5)), axis=1)  # non-decreasing, often superlinear
    out = never_superlinear(rows, grid)
    assert (out <= rows + 1e-12).all() and (np.diff(out, axis=1) >= -1e-12).all()
    pieces = np.ceil(grid[:, None] / grid[None, :])
    for i in range(5):
        for j in range(i):
            assert (out[:, i] <= pieces[i, j] * out[:, j] + 1e-9).all()
    with pytest.raises(ValueError, match="grid of 4"):
        never_superlinear(rows, grid[:4])


def test_decode_attention_per_sequence_never_rises_with_the_batch(h100_predictor):
    """A learned correction can price decode attention over the KV cache at a falling efficiency past its rows
    (no profile row is a decode step): the H100 predictor's raw llama3-8b decode attention costs more per sequence
    at batch 48 than at 4. The static batch caps each batch at its pieces (a batch of 48 can run as 12 of 4), so
    per sequence it never rises above a batch that divides it."""
    s = make_setup("llama3-8b", "H100-SXM")
    b = np.array([4, 8, 16, 24, 32, 48, 64, 96, 128], dtype=np.float64)
    n = len(b)
    raw_ops = cost_ops(pass_ops(s, b, b, np.ones(n), np.full(n, 2111.0), np.full(n, "decode", dtype=object),
                                names=("attention",)), h100_predictor, s.catalog)
    raw = np.bincount(raw_ops["scenario"], weights=raw_ops["time_us"] * raw_ops["count"], minlength=n) / b
    assert (np.diff(raw) > 0).any()  # what the cap is for
    per_seq = []
    for batch in b.astype(int):
        ops = predict_static(s, int(batch), 2048, 128, h100_predictor, check_memory=False).ops
        att = ops[(ops["phase"] == "decode") & (ops["name"] == "attention")]
        per_seq.append(float((att["time_us"] * att["count"]).sum()) / batch)
    per_seq = np.array(per_seq)
    for i in range(n):  # per sequence never above a batch that divides it (a batch of 96 is 2 of 48, 4 of 24)
        for j in range(i):
            if b[i] % b[j] == 0:
                assert per_seq[i] <= per_seq[j] * (1 + 1e-9), (b[i], b[j], per_seq)
    assert per_seq[-1] < 0.8 * per_seq[0]
    assert per_seq[5] < raw[5] / 1.05  # batch 48: its pieces' price, not the learned one
    # and the result says so, with both times; the roofline (analytical, never capped) says nothing
    r = predict_static(s, 48, 2048, 128, h100_predictor, check_memory=False)
    note = [n for n in r.notes if n.startswith("decode attention priced at its pieces")]
    assert len(note) == 1 and f"{r.breakdown_ms['decode']['attention']:.1f} ms instead of" in note[0], r.notes
    assert not any("pieces" in n for n in predict_static(s, 48, 2048, 128, check_memory=False).notes)


def test_batch_grid_holds_every_small_batch_and_the_vendor_table_batches():
    grid = batch_grid(1280)
    assert list(grid[:16]) == list(range(1, 17)) and grid[-1] == 1280
    assert {52, 56, 60, 96, 120, 240, 384, 512, 896, 1024} <= set(grid.astype(int))
    wide = grid[15:]  # from 16 on: 8 batches per octave
    assert np.all(np.diff(wide) / wide[:-1] <= 0.125 + 1e-12)


def test_decode_tpot_and_every_op_never_fall_as_the_batch_grows(h100_predictor):
    s = make_setup("llama2-7b", "H100-SXM")
    res = [predict_static(s, b, 128, 64, h100_predictor) for b in BATCHES]
    tpot = np.array([r.tpot_ms for r in res])
    assert np.all(np.diff(tpot) >= 0), tpot
    ttft = np.array([r.ttft_ms for r in res])
    assert np.all(np.diff(ttft) >= 0), ttft
    for phase in ("decode", "prefill"):  # the mid-generation decode step (same context at every batch), prefill
        per_op = np.stack([r.ops[r.ops["phase"] == phase].set_index("name")["time_us"].sort_index().to_numpy()
                           for r in res])
        assert np.all(np.diff(per_op, axis=0) >= -1e-9 * per_op[:-1]), phase
    # every batch 1..40 in one call, off the grid's powers of two too (interpolated between grid batches)
    many = predict_many([s] * 40, np.arange(1, 41), np.full(40, 128), np.full(40, 64), h100_predictor)
    assert np.all(np.diff(many["tpot_ms"].to_numpy()) >= 0)
    assert np.all(np.diff(many["ttft_ms"].to_numpy()) >= 0)


def test_envelope_leaves_analytical_times_alone():
    """The roofline is non-decreasing in the batch already: its op times are exactly cost_ops' own."""
    s = make_setup("llama2-7b", "H100-SXM")
    model = RooflineCostModel()
    res = predict_static(s, 20, 128, 2, model)  # one decode step, at context 129; batch 20 is off the grid
    dec = res.ops[res.ops["phase"] == "decode"].set_index("name")["time_us"].sort_index()
    own = cost_ops(pass_ops(s, np.array([20.0]), np.array([20.0]), np.array([1.0]), np.array([129.0]), "decode"),
                   model).set_index("name")["time_us"].sort_index()
    np.testing.assert_allclose(dec.to_numpy(), own.to_numpy())


def test_envelope_keeps_ops_of_one_name_apart(h100_predictor):
    """Llama 4 Maverick interleaves dense and MoE layers: two ``mlp_up_proj`` rows of other shapes per pass. Each
    keeps its own chain (was one shared value: the dense layers' GEMMs priced as the experts' or the reverse)."""
    s = make_setup("llama4-maverick", "H100-SXM", tp=8, dtype="fp8")
    res = predict_static(s, 16, 128, 2, h100_predictor)  # one decode step at context 129
    dec = res.ops[res.ops["phase"] == "decode"]
    own = cost_ops(pass_ops(s, np.array([16.0]), np.array([16.0]), np.array([1.0]), np.array([129.0]), "decode"),
                   h100_predictor)
    for name in ("mlp_up_proj", "mlp_down_proj"):
        env_t = dec.loc[dec["name"] == name, "time_us"].to_numpy()
        raw_t = own.loc[own["name"] == name, "time_us"].to_numpy()
        assert len(env_t) == len(raw_t) == 2
        assert abs(np.log(raw_t[0] / raw_t[1])) > 0.2  # the two layers' GEMMs really differ
        np.testing.assert_allclose(env_t, raw_t, rtol=0.3)  # each near its own price, not the other's


def test_serving_step_costs_never_fall_with_tokens_sequences_or_context(h100_predictor, monkeypatch):
    """`llm serve`'s step-cost grids (dense passes per token count, heads per sequence count, decode and prefill
    attention per batch x context) with a calibrated model: non-decreasing along every axis."""
    from hybrid.workloads.llm import serving

    s = make_setup("llama3-8b", "H100-SXM")
    costs = serving.StepCosts.build(s, 2048, 256, 4096, h100_predictor)
    assert costs.method != "roofline"
    for grid in (costs.dense_us, costs.head_us, costs.dec_us, costs.pre_us):
        for axis in range(grid.ndim):
            assert np.all(np.diff(grid, axis=axis) >= -1e-9 * np.abs(grid).max()), (grid.shape, axis)
    # without the fit the learned grids do fall somewhere (what the fit is for)
    monkeypatch.setattr(serving, "_never_falling", lambda z, axes=None: z)
    monkeypatch.setattr(serving, "_batch_envelope", lambda z, grid=None: z)
    raw = serving.StepCosts.build(s, 2048, 256, 4096, h100_predictor)
    assert any((np.diff(g, axis=a) < 0).any() for g in (raw.dense_us, raw.head_us, raw.dec_us, raw.pre_us)
               for a in range(g.ndim))


def test_offline_serving_prices_a_whole_batch_step_as_the_static_batch_does(h100_predictor):
    """`llm serve --rate inf` with the whole batch prefilled in one step is `llm infer`'s static batch
    (docs/llm_inference.md), with a calibrated model too: each op's batch envelope is the same rule at the same
    token count. The serving grid fitted the dense ops' sum on a coarser log grid (1299 and 1800 tokens around a
    1600-token step) and interpolated across a learned step: TTFT 51.3 ms against the static batch's 48.9, and
    36.3 ms of dense ops against 32.7 with `hybrid quickstart`'s model."""
    import math

    from hybrid.workloads.llm.serving import (
        HEAD_OPS,
        SchedulerConfig,
        StepCosts,
        make_trace,
        parse_dist,
        simulate,
    )

    s = make_setup("llama3-8b", system="DGX-H100")
    batch, prompt, out = 200, 8, 128
    static = predict_static(s, batch, prompt, out, h100_predictor)
    costs = StepCosts.build(s, batch * prompt, batch, prompt + out, h100_predictor)
    assert costs.method != "roofline"
    ops = static.ops
    for phase, tokens in (("prefill", batch * prompt), ("decode", batch)):
        o = ops[ops["phase"] == phase]
        t = (o["time_us"] * o["count"]).to_numpy()
        head = o["name"].isin(HEAD_OPS).to_numpy()
        dense = ~head & (o["name"] != "attention").to_numpy()
        step_dense = StepCosts._interp1(np.array([float(tokens)]), costs.tokens, costs.dense_us)[0]
        step_head = StepCosts._interp1(np.array([float(batch)]), costs.seqs, costs.head_us)[0]
        assert step_dense == pytest.approx(t[dense].sum(), rel=0.005), phase
        assert step_head == pytest.approx(t[head].sum(), rel=0.005), phase
    res = simulate(s, make_trace(math.inf, batch, parse_dist(str(prompt)), parse_dist(str(out))), h100_predictor,
                   sched=SchedulerConfig(max_batched_tokens=batch * prompt, max_seqs=batch))
    assert res.steps == out  # one prefill step, then the decode steps
    assert np.median(res.ttft_ms) == pytest.approx(static.ttft_ms, rel=0.03)
    assert np.median(res.tpot_ms) == pytest.approx(static.tpot_ms, rel=0.03)


@pytest.mark.parametrize("calibrated", [False, True], ids=["roofline", "calibrated"])
def test_offline_burst_of_short_prompts_prices_one_batched_attention_kernel(h100_predictor, calibrated):
    """`llm serve --rate inf` with every prompt prefilled in one step reaches its first token when `llm infer`'s
    static batch does, on the roofline and with a calibrated model, on one GPU and on eight: the step's prompt
    chunks are ONE attention kernel, priced from the cost-model row the static batch prices (batch = chunks).
    Priced as one single-sequence kernel per chunk, one fixed cost kept, the learned correction of a small chunk
    counted once per chunk: 200 prompts of 8 tokens on 8 H100s took 16.2 ms to the first token against the static
    batch's 11.2 (`hybrid quickstart`'s model: attention 20.8 ms against 0.21, TTFT 35.7 ms against 15.1). A
    prompt length off the chunk grid (8 or 24 tokens with a 1600-token budget) is a grid point of the trace's
    own, so its learned correction is not interpolated between grid chunks (24 tokens: 16% over the static
    batch's attention with quickstart's model)."""
    import math

    from hybrid.workloads.llm.serving import SchedulerConfig, StepCosts, make_trace, parse_dist, simulate

    model = h100_predictor if calibrated else None
    for tp in (1, 8):
        s = make_setup("llama3-8b", system="DGX-H100", tp=tp)
        for batch, prompt, budget in ((200, 8, 2048), (128, 16, 2048), (200, 8, 1600), (64, 24, 1600)):
            static = predict_static(s, batch, prompt, 2, model)
            sched = SchedulerConfig(max_batched_tokens=budget)
            trace = make_trace(math.inf, batch, parse_dist(str(prompt)), parse_dist("2"))
            costs = StepCosts.build(s, sched.max_batched_tokens, sched.max_seqs, prompt + 2, model,
                                    prompt_lengths=trace.input_len)
            assert ("kernel-xgb" in costs.method) == calibrated
            att = costs.prefill_attention_us(np.full(batch, float(prompt)), np.zeros(batch))
            assert att == pytest.approx(static.breakdown_ms["prefill"]["attention"] * 1e3, rel=0.01), (tp, batch)
            res = simulate(s, trace, model, sched=sched)  # its own step costs, the trace's prompt length on the grid
            assert res.steps == 2  # one prefill step, one decode step
            assert np.median(res.ttft_ms) == pytest.approx(static.ttft_ms, rel=0.02), (tp, batch, budget)
    # without the trace's lengths a prompt between grid chunks is interpolated there (the grid is unchanged)
    plain = StepCosts.build(s, 1600, 256, 26, model)
    assert 24.0 not in plain.pre_c and 24.0 in StepCosts.build(s, 1600, 256, 26, model,
                                                                prompt_lengths=np.array([24, 24])).pre_c
    assert len(StepCosts.build(s, 1600, 256, 26, model, prompt_lengths=np.arange(3, 40)).pre_c) == len(plain.pre_c)


def test_an_offline_burst_of_long_prompts_prices_its_dense_ops_where_the_static_batch_does(h100_predictor):
    """n prompts of a trace's few lengths are token points of the serving step's dense ops, so a burst prefilled in
    one step prices its GEMMs, norms and elementwise ops at the tokens the static batch prices them (48 prompts of
    300 tokens: 6.1% over the static batch's dense ops, interpolated between the grid's 14336 and 15360 tokens
    with learned corrections in between; the per-op monotone fits of the two grids still pool differently)."""
    from hybrid.workloads.llm.serving import StepCosts

    s = make_setup("llama3-8b", system="DGX-H100", tp=1)
    for batch, prompt, budget in ((10, 1500, 15000), (48, 300, 14400)):
        pre = predict_static(s, batch, prompt, 2, h100_predictor).breakdown_ms["prefill"]
        dense = sum(v for k, v in pre.items() if k not in ("attention", "lm_head", "sampling")) * 1e3
        costs = StepCosts.build(s, budget, batch, prompt + 2, h100_predictor, prompt_lengths=np.array([prompt]))
        assert float(batch * prompt) in costs.tokens
        got = float(costs._interp1(np.array([float(batch * prompt)]), costs.tokens, costs.dense_us)[0])
        assert got == pytest.approx(dense, rel=0.035), (batch, prompt)


def test_serving_prompt_chunks_of_unequal_shapes_cost_their_summed_work_on_the_roofline():
    """A step's unequal prompt chunks (a long prompt's chunk after thousands of its tokens beside fresh short
    prompts) are priced at their own roofline times the learned correction of one batched kernel of their mean
    shape: on the roofline the kernel's fixed cost (its latency term) once plus every chunk's work above it
    (each chunk from the one-chunk table); with attention data parallelism the chunks are one rank's own (a
    request is cached whole on one rank; its tables are indexed by a rank's chunks)."""
    from hybrid.workloads.llm.serving import StepCosts

    steps = (([3000, 40, 40, 500, 7], [5000, 0, 0, 0, 0]), ([1, 2, 700, 16], [0, 9000, 0, 100]),
             ([2048] * 4, [0, 2048, 4096, 6144]), ([100] * 8, [0] * 8), ([100] * 9, [0] * 9))
    for s in (make_setup("llama3-8b", "H100-SXM"),
              make_setup("qwen3-30b-a3b", system="DGX-H100", tp=4, ep=4, dtype="fp8", attention_dp=True)):
        costs = StepCosts.build(s, 8192, 64, 16384)
        one = costs.pre_roof[0]
        base = costs.pre_fixed_us
        assert 0 < base < float(one[0, 0])  # the launches: less than a one-token chunk's whole time
        for chunks, prior in steps:
            c, p = np.array(chunks, dtype=float), np.array(prior, dtype=float)
            work = costs._interp2(c, p, costs.pre_c, costs.pre_prior, one - base)
            want = base + work.sum()
            assert costs.prefill_attention_us(c, p) == pytest.approx(want, rel=1e-6), (s.model.name, chunks, prior)
        if costs.dp_ranks > 1:  # 9 equal prompts on 4 ranks: the busiest holds 3 of them, as in the static batch
            static = predict_static(s, 9, 100, 2).breakdown_ms["prefill"]["attention"] * 1e3
            assert costs.prefill_attention_us(np.full(3, 100.0), np.zeros(3)) == pytest.approx(static, rel=0.01)
        # and one chunk alone costs its own roofline (interpolated in the one-chunk table, off its grid points)
        f = cost_ops(pass_ops(s, np.array([64.0]), np.array([1.0]), np.array([64.0]), np.array([64.0 + 512.0]),
                              "prefill", names=("attention",)))
        assert costs.prefill_attention_us(np.array([64.0]), np.array([512.0])) == pytest.approx(
            float((f["roofline_us"] * f["count"]).sum()), rel=0.01)
