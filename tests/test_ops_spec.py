"""Op dataclasses: FLOPs and bytes equal hand-computed values; validation; conversion to table rows."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid.errors import InvalidInputError
from hybrid.ops.families import FAMILIES, OP_TO_FAMILY, bus_factor, expected_unique_rows, family_of
from hybrid.ops.spec import (
    Attention,
    Collective,
    Elementwise,
    EmbeddingBag,
    Gemm,
    Norm,
    Softmax,
    specs_to_frame,
)


def test_gemm_hand_computed() -> None:
    g = Gemm(m=128, n=256, k=64, dtype="float16")
    assert g.dtype == "fp16"
    assert g.flops() == 2 * 128 * 256 * 64
    assert g.bytes() == 2 * (128 * 64 + 64 * 256 + 128 * 256)
    assert g.arithmetic_intensity() == pytest.approx(g.flops() / g.bytes())
    assert not g.is_gemv and Gemm(m=1, n=4096, k=4096).is_gemv


def test_bmm_and_linear_weights() -> None:
    bmm = Gemm(m=64, n=32, k=16, b=8, dtype="fp32", op="bmm")
    assert bmm.flops() == 2 * 8 * 64 * 32 * 16
    assert bmm.bytes() == 4 * 8 * (64 * 16 + 16 * 32 + 64 * 32)
    lin = Gemm(m=64, n=32, k=16, b=8, dtype="fp32", op="linear")
    assert lin.flops() == bmm.flops()
    assert lin.bytes() == 4 * (8 * 64 * 16 + 16 * 32 + 8 * 64 * 32)  # one shared weight


def test_elementwise_variants() -> None:
    add = Elementwise(elements=1000, variant="add", dtype="bf16")
    assert (add.flops(), add.bytes()) == (1000, 1000 * 3 * 2)
    gelu = Elementwise(elements=1000, variant="gelu", dtype="fp32")
    assert (gelu.flops(), gelu.bytes()) == (8000, 1000 * 2 * 4)
    adam = Elementwise(elements=10, variant="adam", dtype="fp32")
    assert adam.bytes() == 10 * 7 * 4
    custom = Elementwise(elements=100, variant="add", n_inputs=3, n_outputs=2, flops_per_element=5, dtype="fp16")
    assert (custom.flops(), custom.bytes()) == (500, 100 * 5 * 2)


def test_norm_softmax_hand_computed() -> None:
    ln = Norm(rows=1024, hidden=768, dtype="fp16")
    assert ln.flops() == 1024 * 768 * 8
    assert ln.bytes() == 2 * (1024 * 768 * 2 + 768 * 2)
    rms_bwd = Norm(rows=10, hidden=20, op="rmsnorm", direction="bwd", dtype="fp32")
    assert rms_bwd.flops() == 10 * 20 * 5 * 2.5
    assert rms_bwd.bytes() == 4 * (10 * 20 * 3 + 20 * 4)
    sm = Softmax(rows=64, hidden=512, dtype="fp32")
    assert (sm.flops(), sm.bytes()) == (5 * 64 * 512, 4 * 64 * 512 * 2)


def test_embedding_bag_hand_computed() -> None:
    e = EmbeddingBag(num_embeddings=10**6, embedding_dim=64, pooling_factor=10, batch_size=256, num_tables=4)
    lookups = 4 * 256 * 10
    assert e.flops() == lookups * 64
    assert e.bytes() == lookups * 64 * 4 + lookups * 8 + 4 * 256 * 64 * 4
    bwd = EmbeddingBag(num_embeddings=10**6, embedding_dim=64, pooling_factor=10, batch_size=256, num_tables=4,
                       direction="bwd")
    unique = 4 * expected_unique_rows([10**6], [2560])[0]
    assert bwd.bytes() == pytest.approx(4 * 256 * 64 * 4 + lookups * 8 + 2 * unique * 64 * 4)


def test_expected_unique_rows_limits() -> None:
    # tiny table: every row gets touched; huge table: almost every lookup is unique
    assert expected_unique_rows([10], [10_000])[0] == pytest.approx(10, rel=1e-6)
    assert expected_unique_rows([10**9], [1000])[0] == pytest.approx(1000, rel=1e-3)
    # skewed indices touch fewer distinct rows than uniform ones
    uni = expected_unique_rows([10**6], [10**5])[0]
    zipf = expected_unique_rows([10**6], [10**5], [1.05])[0]
    assert zipf < 0.7 * uni


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 10**8), lookups=st.integers(0, 10**7), alpha=st.sampled_from([0.0, 0.5, 1.0, 1.2]))
def test_expected_unique_rows_bounds(n: int, lookups: int, alpha: float) -> None:
    u = expected_unique_rows([n], [lookups], [alpha])[0]
    assert -1e-9 <= u <= min(n, lookups) * (1 + 1e-9)


def test_attention_hand_computed() -> None:
    a = Attention(batch=2, heads=8, q_len=128, kv_len=128, head_dim=64)
    assert a.flops() == 4 * 2 * 8 * 64 * 128 * 128
    assert a.bytes() == 2 * 2 * 64 * (2 * 128 * 8 + 2 * 128 * 8)
    causal = Attention(batch=2, heads=8, q_len=128, kv_len=128, head_dim=64, causal=True)
    assert causal.flops() == 4 * 2 * 8 * 64 * (128 * 128 - 128 * 127 / 2)
    gqa = Attention(batch=1, heads=32, kv_heads=8, q_len=16, kv_len=16, head_dim=128)
    assert gqa.bytes() == 2 * 128 * (2 * 16 * 32 + 2 * 16 * 8)


def test_collective_bus_bytes() -> None:
    ar = Collective(op="all_reduce", size_bytes=1 << 20, n_ranks=8)
    assert ar.bytes() == (1 << 20) * 2 * 7 / 8
    assert ar.flops() == (1 << 20) / 4  # one add per fp32 element
    ag = Collective(op="all_gather", size_bytes=1 << 20, n_ranks=8)
    assert (ag.bytes(), ag.flops()) == ((1 << 20) * 7 / 8, 0)
    assert Collective(op="send_recv", size_bytes=100, n_ranks=2).bytes() == 100
    assert list(bus_factor(["all_reduce", "reduce_scatter", "broadcast"], [4, 4, 4])) == [1.5, 0.75, 1.0]


@pytest.mark.parametrize(("make", "match"), [
    (lambda: Gemm(m=0, n=1, k=1), "Gemm.m must be a positive number"),
    (lambda: Gemm(m=1, n=-2, k=1), "Gemm.n"),
    (lambda: Gemm(m=1, n=1, k=float("nan")), "Gemm.k"),
    (lambda: Gemm(m=True, n=1, k=1), "Gemm.m"),
    (lambda: Gemm(m=1, n=1, k=1, dtype="fp13"), "unknown dtype"),
    (lambda: Elementwise(elements=0), "Elementwise.elements"),
    (lambda: EmbeddingBag(num_embeddings=10, embedding_dim=8, pooling_factor=0, batch_size=1), "pooling_factor"),
    (lambda: Collective(op="all_shuffle", size_bytes=8, n_ranks=2), "unknown collective"),
    (lambda: Collective(op="all_reduce", size_bytes=8, n_ranks=2, n_nodes=4), "cannot exceed"),
    (lambda: Collective(op="all_reduce", size_bytes=0, n_ranks=2), "size_bytes"),
    (lambda: Collective(op="all_reduce", size_bytes=3, n_ranks=2, dtype="fp32"), "whole number of fp32"),
    (lambda: Collective(op="all_reduce", size_bytes=6, n_ranks=2, dtype="fp64"), "8 B each"),
    (lambda: Collective(op="all_reduce", size_bytes=8, n_ranks=2, dtype="fp7"), "unknown dtype"),
    (lambda: specs_to_frame([]), "no ops"),
    # what the table schema refuses in the same columns was priced (inf FLOPs, 12294 FLOPs for a 1024.5 x 2 x 3
    # GEMM, negative bytes) or failed late with a missing-column error
    (lambda: Gemm(m=float("inf"), n=1, k=1), "Gemm.m must be a positive number"),
    (lambda: Gemm(m=1024.5, n=2, k=3), "Gemm.m must be a whole number"),
    (lambda: Gemm(m=1, n=1, k=1, op="softmax"), "Gemm.op must be one of gemm"),
    (lambda: Norm(rows=1, hidden=1, op="gemm"), "Norm.op must be one of layernorm"),
    (lambda: Norm(rows=1, hidden=1, direction="sideways"), "Norm.direction"),
    (lambda: Softmax(rows=1, hidden=1, direction="back"), "Softmax.direction"),
    (lambda: Elementwise(elements=10, n_inputs=-1), "Elementwise.n_inputs must be a non-negative number"),
    (lambda: Elementwise(elements=10, flops_per_element=float("nan")), "flops_per_element"),
    (lambda: EmbeddingBag(num_embeddings=10, embedding_dim=8, pooling_factor=1, batch_size=1, index_dist="gauss"),
     "index_dist"),
    (lambda: EmbeddingBag(num_embeddings=10, embedding_dim=8, pooling_factor=1, batch_size=1, zipf_alpha=-1),
     "zipf_alpha"),
    (lambda: Attention(batch=1, heads=8, q_len=4, kv_len=4, head_dim=8, kv_heads=3), "multiple of the key/value"),
    (lambda: Attention(batch=1, heads=8, q_len=4, kv_len=4, head_dim=8, kv_heads=0), "kv_heads"),
    (lambda: Attention(batch=1, heads=8, q_len=4, kv_len=4, head_dim=8, causal="yes"), "causal"),
    (lambda: Collective(op="all_reduce", size_bytes=8, n_ranks=2.5), "n_ranks must be a whole number"),
])
def test_spec_validation(make, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        make()


def test_spec_accepts_numpy_numbers() -> None:
    """Shapes computed with numpy are numbers: np.int64 / np.int32 / integral floats were refused ("must be a
    positive number, got np.int64(4)"); they are stored as plain ints, so rows and FLOPs match."""
    import numpy as np

    g = Gemm(m=np.int64(128), n=np.int32(256), k=64.0, b=np.uint8(2))
    assert (g.m, g.n, g.k, g.b) == (128, 256, 64, 2) and all(type(v) is int for v in (g.m, g.n, g.k, g.b))
    assert g.flops() == Gemm(m=128, n=256, k=64, b=2).flops()
    a = Attention(batch=np.int64(2), heads=8, q_len=16, kv_len=16, head_dim=64, kv_heads=np.int64(2),
                  causal=np.bool_(True))
    assert a.kv_heads == 2 and a.causal is True
    assert Norm(rows=4, hidden=8, direction=" BWD ").direction == "bwd"
    assert Elementwise(elements=np.int64(10), n_inputs=np.float64(1.001)).n_inputs == pytest.approx(1.001)


def test_specs_to_frame_mixed_families_round_trip(catalog) -> None:
    from hybrid.ops.roofline import roofline

    specs = [Gemm(m=512, n=512, k=512), Norm(rows=64, hidden=1024), Collective(op="all_gather", size_bytes=1 << 24,
                                                                                 n_ranks=8)]
    df = specs_to_frame(specs)
    assert list(df["op"]) == ["gemm", "layernorm", "all_gather"]
    out = roofline(df.assign(device="H100", system="DGX-H100"), catalog)
    assert list(out["family"]) == ["gemm", "norm", "collective"]
    assert list(out["flops"][:2]) == [specs[0].flops(), specs[1].flops()]
    assert out["bytes"].iloc[2] == specs[2].bytes()


def test_family_registry_is_consistent() -> None:
    for fam in FAMILIES.values():
        for op in fam.ops:
            assert OP_TO_FAMILY[op] == fam.name and family_of(op) is fam
    with pytest.raises(InvalidInputError, match="unknown op 'convolution'"):
        family_of("convolution")
    # every family's formulas are vectorised: two rows in, two values out
    assert len(FAMILIES["gemm"].flops(pd.DataFrame({"m": [1, 2], "n": [3, 4], "k": [5, 6]}))) == 2
