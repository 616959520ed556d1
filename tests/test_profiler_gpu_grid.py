"""The GPU sweep's coverage (checked without a GPU: the cases are enumerated, never built): 16-bit GEMMs get the
whole grid plus the aligned transformer-layer and vocabulary-sized shapes traced training steps run, and fused
attention gets rows at the traced scale; the CPU sweep is unchanged by them."""

from __future__ import annotations

import collections

import pytest

from hybrid.data.profiler import attention as attn
from hybrid.data.profiler import kernels as K
from hybrid.data.profiler.backend import Backend

torch = pytest.importorskip("torch")


def _cases(kind: str, quick: bool = False):
    be = Backend(torch, kind, 1)
    return (K.gemm_cases(be, quick=quick, seed=0, llc_bytes=2**20),
            attn.attention_cases(be, quick=quick, seed=0, llc_bytes=2**20))


def _shape(r: dict) -> tuple:
    return (r["op"], r.get("b"), r["m"], r["n"], r["k"], r["variant"])


def test_gpu_gemm_sweep_gives_every_dtype_every_shape_and_the_traced_layer_shapes():
    gemm, _ = _cases("cuda")
    by_dtype = collections.defaultdict(set)
    for c in gemm:
        by_dtype[c.row["dtype"]].add(_shape(c.row))
    base = {(op, b, m, n, k, K._gemm_variant(op, m, n))
            for op, b, m, n, k in K.gemm_shapes(Backend(torch, "cuda", 1), False, 0)}
    for dtype in ("fp32", "tf32", "fp16", "bf16"):
        assert base <= by_dtype[dtype], dtype
    # Llama's MLP GEMMs at 4096 tokens (traced: 4096 x 5632 x 2048 etc.) have this grid's neighbours, aligned
    layer = {s for s in by_dtype["bf16"] - base if s[5] in K.VOCAB_LAYOUTS and s[2] % 8 == s[3] % 8 == s[4] % 8 == 0}
    assert ("gemm", 1, 8192, 3 * 2048, 2048, "linear") in layer and ("gemm", 1, 2048, 4 * 2048, 8192, "mm_tn") in layer
    assert layer and all(2.0 * s[2] * s[3] * s[4] <= K.GEMM_FLOP_CAP[("cuda", False)] for s in layer)
    assert {s for s in by_dtype["fp16"] - base} == {s for s in by_dtype["fp16"] - base if s[5] in K.VOCAB_LAYOUTS}
    # the LM-head GEMMs of an unaligned vocabulary (GPT-2's 50257) in bf16, forward and both gradients
    vocab = {(s[2], s[3], s[4], s[5]) for s in by_dtype["bf16"] if 50257 in s[2:5]}
    assert {lay for *_, lay in vocab} == set(K.VOCAB_LAYOUTS)
    from hybrid.data.profiler.runner import family_cases

    listed = family_cases(Backend(torch, "cuda", 1), "gemm", quick=False)  # what a profile measures, repeats dropped
    assert len({_shape(c.row) + (c.row["dtype"],) for c in listed}) == len(listed)
    assert len(listed) == len(gemm) - 2  # 2048^3 'mm' is both a grid square and a layer GEMM (fp16, bf16)


def test_cpu_sweeps_do_not_take_the_gpu_additions():
    gemm, att = _cases("cpu")
    dt = collections.Counter(c.row["dtype"] for c in gemm)
    assert set(dt) == {"fp32", "bf16"}
    bf16 = [c.row for c in gemm if c.row["dtype"] == "bf16"]
    assert all(r["variant"] not in ("linear", "mm_tn") for r in bf16)  # no 16-bit vocabulary / layer GEMMs
    assert dt["bf16"] == len(K.gemm_shapes(Backend(torch, "cpu", 1), False, 0)[::2])
    assert not any(c.row["heads"] == 12 for c in att)
    assert K.layer_gemm_shapes(Backend(torch, "cpu", 1), False) == []
    assert K.layer_gemm_shapes(Backend(torch, "cuda", 1), True) == []


def test_gpu_attention_sweep_reaches_the_traced_scale_in_16_bit():
    _, att = _cases("cuda")
    rows = [c.row for c in att]
    key = {(r["dtype"], r["batch"], r["heads"], r["kv_heads"], r["q_len"], r["head_dim"], bool(r["causal"]),
            r["direction"]) for r in rows}
    # the traced calls of datasets/traces-h200: BERT b8 h16 s512 d64 (not causal), GPT-2 b8 h12 s1024 d64
    # (causal), Llama b4 h16/kv8 s1024 d128 (causal), forward and backward
    for dtype in ("bf16", "fp16"):
        for shape in ((8, 16, 16, 512, 64, False), (8, 12, 12, 1024, 64, True), (4, 16, 8, 1024, 128, True)):
            for direction in ("fwd", "bwd"):
                assert (dtype, *shape, direction) in key, (dtype, shape, direction)
    small = [r for r in rows if r["heads"] in (12, 16)]
    assert small and {r["dtype"] for r in small} == {"fp16", "bf16"}  # fp32 keeps its few large shapes
    assert len({(r["dtype"], r["batch"], r["heads"], r["kv_heads"], r["q_len"], r["kv_len"], r["head_dim"],
                 r["causal"], r["direction"], r.get("dropout", 0.0)) for r in rows}) == len(rows)  # no case twice
    # the traced training calls again with attention dropout (BERT's and GPT-2's 0.1), forward and backward
    drop = {(r["batch"], r["heads"], r["q_len"], r["head_dim"], bool(r["causal"]), r["direction"]) for r in rows
            if r.get("dropout", 0.0) == attn.DROPOUT_PROFILE["p"] and r["dtype"] == "bf16"}
    for shape in ((8, 16, 512, 64, False), (8, 12, 1024, 64, True)):
        for direction in ("fwd", "bwd"):
            assert (*shape, direction) in drop
    assert {r["dtype"] for r in rows if r.get("dropout")} == set(attn.DROPOUT_PROFILE["dtypes"])
    _, cpu = _cases("cpu")
    assert not any(c.row.get("dropout") for c in cpu)


def test_family_cases_lists_a_sweep_without_building_it():
    from hybrid.data.profiler.runner import family_cases
    from hybrid.errors import InvalidInputError

    be = Backend(torch, "cuda", 1)
    gemm = family_cases(be, "gemm", quick=False)
    assert len(gemm) < len(K.gemm_cases(be, quick=False, seed=0, llc_bytes=2**20))  # repeated configurations dropped
    assert len(family_cases(be, "attention", quick=True)) < len(family_cases(be, "attention", quick=False))
    emb = family_cases(Backend(torch, "cpu", 1), "embedding", quick=True, arena_bytes=2**28)
    assert emb and all(c.row["op"] == "embedding_bag" for c in emb)
    with pytest.raises(InvalidInputError, match="unknown kernel family 'collective'"):
        family_cases(be, "collective", quick=True)


def test_fp8_layer_gemms_on_gpus_with_fp8_tensor_cores():
    """A GPU with fp8 tensor cores also times the transformer-layer GEMMs in fp8 (``torch._scaled_mm``, the linear
    layout); other GPUs and CPUs do not; the builder runs (checked here on the CPU, whose PyTorch has it too)."""
    gemm8 = K.gemm_cases(Backend(torch, "cuda", 1, fp8=True), quick=False, seed=0, llc_bytes=2**20)
    gemm = K.gemm_cases(Backend(torch, "cuda", 1, fp8=False), quick=False, seed=0, llc_bytes=2**20)
    fp8 = [c.row for c in gemm8 if c.row["dtype"] == "fp8"]
    linear = [s for s in K.layer_gemm_shapes(Backend(torch, "cuda", 1), False) if s[0] == "linear"]
    assert sorted((r["m"], r["n"], r["k"]) for r in fp8) == sorted((m, n, k) for _, m, n, k in linear)
    assert {r["variant"] for r in fp8} == {"linear"} and len(gemm8) == len(gemm) + len(fp8)
    assert not any(c.row["dtype"] == "fp8" for c in gemm)
    assert not Backend(torch, "cpu", 1, fp8=True).has_fp8_gemm and not Backend(torch, "cpu", 1).has_fp8_gemm
    case = next(c for c in gemm8 if c.row["dtype"] == "fp8")
    r = case.row
    assert case.mem_bytes == r["m"] * r["k"] + r["n"] * r["k"] + 2 * r["m"] * r["n"]  # 1-byte inputs, bf16 out
    # the builder itself, small, on the CPU
    fn, _ = K._layout_builder(Backend(torch, "cpu", 1), "linear", 32, 64, 48, 1e4, 2**20, "fp8")()
    out = fn(0)
    assert tuple(out.shape) == (32, 64) and out.dtype == torch.bfloat16 and bool(torch.isfinite(out.float()).all())
    with pytest.raises(ValueError, match="fp8"):
        K._layout_builder(Backend(torch, "cpu", 1), "mm_tn", 32, 64, 48, 1e4, 2**20, "fp8")()


def test_a_dropout_attention_case_runs_sdpa_with_its_dropout(monkeypatch):
    """The builder passes the row's dropout to SDPA as ``dropout_p`` (the real op, built and run on the CPU): in the
    timed forward, and in the forward a backward case rebuilds before its timed backward; none without the column."""
    be = Backend(torch, "cpu", 1)
    seen = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*a, **kw):
        seen.append(kw.get("dropout_p", 0.0))
        return real(*a, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    for p, direction in ((0.1, "fwd"), (0.1, "bwd"), (0.0, "fwd")):
        row = {"op": "attention", "dtype": "fp32", "direction": direction, "batch": 1, "heads": 2, "kv_heads": 2,
               "q_len": 16, "kv_len": 16, "head_dim": 8, "causal": 0, **({"dropout": p} if p else {})}
        run, prepare = attn._sdpa_builder(be, row, 1e4, 2**20)()
        if prepare is not None:
            prepare(0)
        run(0)
        assert seen[-1] == p
