"""The fused-attention profiler family: cases compute real attention, rows match the cost model, a quick CPU
profile of it makes a valid bundle, and its rows teach the pointwise correction attention on this CPU."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from hybrid.data.bundle import load_bundle
from hybrid.data.schema import validate
from hybrid.ops.roofline import roofline

torch = pytest.importorskip("torch")


def _backend():
    from hybrid.data.profiler.backend import open_backend

    return open_backend(torch, threads=1, force_cpu=True)


def _reference(q, k, v, causal: bool):
    """softmax(Q K^T / sqrt(d) + causal mask) V in fp64, KV heads repeated for GQA."""
    q, k, v = (t.detach().double() for t in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        lq, lk = s.shape[-2:]
        s = s.masked_fill(torch.ones(lq, lk, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def test_attention_cases_compute_scaled_dot_product_attention():
    """Forward cases return the attention their row describes (MHA and GQA, causal or not, decode); backward
    cases return the three input gradients."""
    from hybrid.data.profiler import attention as attn

    be = _backend()
    cases = attn.attention_cases(be, quick=False, seed=0, llc_bytes=2**20)
    picked: dict[tuple, object] = {}
    for c in cases:
        r = c.row
        key = (r["dtype"], r["direction"], r["kv_heads"] == r["heads"], bool(r["causal"]), r["q_len"] == 1)
        if r["q_len"] * r["kv_len"] * r["batch"] * r["heads"] <= 2**21 and key not in picked:
            picked[key] = c
    assert {("fp32", "fwd", False, True, False), ("fp32", "fwd", True, False, True),
            ("fp32", "bwd", False, True, False), ("bf16", "fwd", True, True, False)} <= set(picked)
    for key, case in picked.items():
        r = case.row
        run, prepare = case.build()
        if r["direction"] == "bwd":
            prepare(0)
            grads = run(0)
            assert len(grads) == 3
            assert grads[0].shape == (r["batch"], r["heads"], r["q_len"], r["head_dim"])
            assert grads[1].shape == (r["batch"], r["kv_heads"], r["kv_len"], r["head_dim"])
            assert all(torch.isfinite(g).all() for g in grads), r
            continue
        out = run(0)
        assert out.shape == (r["batch"], r["heads"], r["q_len"], r["head_dim"]) and not out.requires_grad
        # the case's first input set, drawn again from the same seeded generator
        q, k, v = attn.sdpa_inputs(torch, r, 1, be.torch_device)[0]
        ref = _reference(q, k, v, bool(r["causal"]))
        tol = 2e-2 if r["dtype"] == "bf16" else 1e-4
        assert torch.allclose(out.double(), ref, atol=tol, rtol=tol), key


def test_attention_sweep_is_capped_by_the_cost_models_flops():
    """Every case stays under the sweep's FLOP cap as the roofline counts its forward (the sweep sizes itself with
    the cost model's formula), and causal cases have q_len = kv_len, where PyTorch's top-left causal mask and the
    cost model's KV-cache convention agree; the full CPU sweep covers what models run."""
    from hybrid.data.profiler import attention as attn

    be = _backend()
    rows = pd.DataFrame([{**c.row, "device": "A100-SXM4-80GB"}
                         for c in attn.attention_cases(be, quick=False, seed=0, llc_bytes=2**20)])
    assert ((rows["q_len"] == rows["kv_len"]) | (rows["causal"] == 0)).all()
    fwd = roofline(rows.assign(direction="fwd"))["flops"].to_numpy()
    cap = attn.ATTENTION_FLOP_CAP[("cpu", False)]
    assert fwd.max() <= cap and fwd.max() > cap / 4  # capped, and the largest calls come close to the cap
    bwd = rows["direction"] == "bwd"
    assert np.allclose(roofline(rows[bwd])["flops"].to_numpy() / fwd[bwd.to_numpy()], 2.5)
    # MHA and GQA, causal and not, prefill and decode, two dtypes
    assert set(rows["dtype"]) == {"fp32", "bf16"} and (rows["kv_heads"] < rows["heads"]).any()
    assert set(rows["causal"]) == {0, 1} and (rows["q_len"] == 1).any()


@pytest.fixture(scope="module")
def attention_bundle(tmp_path_factory):
    from hybrid.data.profiler.runner import ProfileOptions, run_profile

    out = tmp_path_factory.mktemp("attn") / "bundle"
    opts = ProfileOptions(quick=True, families=("attention",), threads=1, progress=False, force_cpu=True)
    run_profile(opts, out)
    return out


def test_quick_attention_profile_is_a_valid_bundle(attention_bundle):
    table, cat = load_bundle(attention_bundle)
    validate(table, cat)
    assert set(table["op"]) == {"attention"} and set(table["direction"]) == {"fwd", "bwd"}
    assert (table["time_us"] > 0).all()
    # backward (2.5x the FLOPs, plus the recomputed scores) takes longer than the forward of the same shape
    cols = ["batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim", "causal"]
    f = table[table["direction"] == "fwd"].set_index(cols)["time_us"]
    b = table[table["direction"] == "bwd"].set_index(cols)["time_us"]
    both = f.index.intersection(b.index)
    assert len(both) >= 3 and (b[both] / f[both]).median() > 1.2


def test_cli_only_attention_is_accepted(tmp_path):
    from hybrid.cli.main import main

    out = tmp_path / "a"
    assert main(["profile", "--quick", "--only", "attention", "--threads", "1", "--cpu", "--no-progress",
                 "-o", str(out)]) == 0
    table, _ = load_bundle(out)
    assert len(table) >= 5
