"""The vectorised roofline / alpha-beta model: monotonicity, bound classification, hand-computed values,
agreement between whole-table and row-by-row evaluation, and clean errors on bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid.errors import InvalidInputError, UnknownDeviceError
from hybrid.ops.roofline import ROOFLINE_COLUMNS, resolve_system, roofline, system_for_device

GPUS = ("H100-SXM", "A100-SXM4-80GB", "T4", "V100-PCIE-32GB", "MI300X", "P4", "L4", "B200")
DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")
dim = st.integers(min_value=1, max_value=1 << 15)


def gemm(m: int, n: int, k: int, b: int = 1, dtype: str = "bf16", op: str = "gemm") -> pd.DataFrame:
    return pd.DataFrame({"op": [op], "b": [b], "m": [m], "n": [n], "k": [k], "dtype": [dtype]})


def one(table: pd.DataFrame, catalog, **kw) -> pd.Series:
    return roofline(table, catalog, **kw).iloc[0]


# ------------------------------------------------------------------------------------------------ monotonicity
@settings(max_examples=60, deadline=None)
@given(m=dim, n=dim, k=dim, b=st.integers(1, 64), grow=st.integers(2, 64), axis=st.sampled_from("mnkb"),
       device=st.sampled_from(GPUS), dtype=st.sampled_from(DTYPES))
def test_gemm_time_non_decreasing_in_every_dimension(catalog, m, n, k, b, grow, axis, device, dtype) -> None:
    base = {"m": m, "n": n, "k": k, "b": b}
    bigger = dict(base)
    bigger[axis] *= grow
    table = pd.concat([gemm(**base, dtype=dtype), gemm(**bigger, dtype=dtype)], ignore_index=True)
    t = roofline(table, catalog, device=device)["time_us"].to_numpy()
    assert np.all(np.isfinite(t)) and t[1] >= t[0]
    # the work itself grows strictly
    out = roofline(table, catalog, device=device)
    assert out["flops"].iloc[1] == pytest.approx(out["flops"].iloc[0] * grow)


@settings(max_examples=40, deadline=None)
@given(elements=st.integers(1, 1 << 30), grow=st.integers(2, 1000),
       variant=st.sampled_from(["add", "gelu", "relu", "copy", "adam"]), device=st.sampled_from(GPUS))
def test_elementwise_time_non_decreasing_in_size(catalog, elements, grow, variant, device) -> None:
    table = pd.DataFrame({"op": "elementwise", "elements": [elements, elements * grow], "variant": variant,
                          "dtype": "fp16"})
    t = roofline(table, catalog, device=device)["time_us"].to_numpy()
    assert t[1] >= t[0] > 0


@settings(max_examples=40, deadline=None)
@given(size=st.integers(1, 1 << 34), grow=st.integers(2, 1024),
       op=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "broadcast"]),
       ranks=st.sampled_from([2, 4, 8, 16, 64, 256]), system=st.sampled_from(["DGX-H100", "Polaris", "DGX-A100"]))
def test_collective_time_grows_with_bytes(catalog, size, grow, op, ranks, system) -> None:
    table = pd.DataFrame({"op": op, "size_bytes": [size, size * grow], "n_ranks": ranks})
    t = roofline(table, catalog, system=system)["time_us"].to_numpy()
    assert t[1] > t[0] > 0


# ------------------------------------------------------------------------------------------------ classification
def test_big_square_gemm_is_compute_bound_on_h100(catalog) -> None:
    row = one(gemm(8192, 8192, 8192, dtype="bf16"), catalog, device="H100-SXM")
    assert row["bound"] == "compute"
    flops = 2 * 8192**3
    assert row["flops"] == flops
    assert row["bytes"] == 3 * 8192**2 * 2
    assert row["compute_us"] == pytest.approx(flops / 989.4e12 * 1e6)
    assert row["time_us"] == pytest.approx(flops / 989.4e12 * 1e6 + 4.0)  # + per-kernel latency


def test_gemv_is_memory_bound(catalog) -> None:
    row = one(gemm(1, 8192, 8192, dtype="bf16", op="gemv"), catalog, device="H100-SXM")
    assert row["bound"] == "memory"
    nbytes = (8192 + 8192 * 8192 + 8192) * 2
    assert row["bytes"] == nbytes
    assert row["memory_us"] == pytest.approx(nbytes / 3350e9 * 1e6)
    assert row["memory_us"] > 10 * row["compute_us"]


@pytest.mark.parametrize("device", GPUS)
def test_small_elementwise_is_latency_bound_and_large_is_memory_bound(catalog, device) -> None:
    table = pd.DataFrame({"op": "elementwise", "elements": [1024, 1 << 28], "variant": "add", "dtype": "fp32"})
    out = roofline(table, catalog, device=device)
    assert list(out["bound"]) == ["latency", "memory"]
    dev = catalog.device(device)
    assert out["memory_us"].iloc[1] == pytest.approx((1 << 28) * 3 * 4 / dev.mem_bw * 1e6)


def test_dtype_changes_the_compute_ceiling(catalog) -> None:
    table = pd.concat([gemm(8192, 8192, 8192, dtype=d) for d in ("fp32", "tf32", "bf16", "fp8")], ignore_index=True)
    c = roofline(table, catalog, device="H100-SXM")["compute_us"].to_numpy()
    assert c[0] > c[1] > c[2] > c[3]
    assert c[0] / c[2] == pytest.approx(989.4 / 67, rel=1e-9)  # same FLOPs, ratio of the two peaks


# ------------------------------------------------------------------------------------------------ collectives
def test_all_reduce_slower_than_all_gather_same_size(catalog) -> None:
    sizes = [1 << 10, 1 << 20, 1 << 26, 1 << 32]
    for system in ("DGX-H100", "Polaris", "GB200-NVL72"):
        for ranks in (8, 32):
            table = pd.DataFrame({"op": ["all_reduce"] * 4 + ["all_gather"] * 4, "size_bytes": sizes * 2,
                                  "n_ranks": ranks})
            t = roofline(table, catalog, system=system)["time_us"].to_numpy()
            assert np.all(t[:4] > t[4:]), (system, ranks)


def test_multi_node_slower_than_single_node(catalog) -> None:
    """The same 8 ranks and bytes: one DGX node vs spread over 2, 4 and 8 nodes (slower NICs, more steps)."""
    table = pd.DataFrame({"op": "all_reduce", "size_bytes": 1 << 28, "n_ranks": 8, "n_nodes": [1, 2, 4, 8]})
    t = roofline(table, catalog, system="DGX-A100")["time_us"].to_numpy()
    assert np.all(np.diff(t) > 0)
    # and ranks beyond one node's GPUs are placed on more nodes automatically
    auto = pd.DataFrame({"op": "all_reduce", "size_bytes": 1 << 28, "n_ranks": [8, 16]})
    t16 = roofline(auto, catalog, system="DGX-A100")["time_us"].to_numpy()
    assert t16[1] > 1.5 * t16[0]  # hierarchical: intra-node ring + NIC share (25 vs 300 GB/s)


def test_collective_bandwidth_term_matches_ring_formula(catalog) -> None:
    size = 1 << 30
    row = one(pd.DataFrame({"op": ["all_reduce"], "size_bytes": [size], "n_ranks": [8]}), catalog, system="DGX-A100")
    assert row["bound"] == "bandwidth"
    assert row["bytes"] == pytest.approx(size * 2 * 7 / 8)  # bus bytes, nccl-tests' convention
    assert row["memory_us"] == pytest.approx(2 * 7 / 8 * size / 300e9 * 1e6)
    assert row["latency_us"] == pytest.approx(2 * catalog.systems["DGX-A100"].intra_latency_us * 3)  # 2 x log2(8)


@pytest.mark.parametrize("op", ["broadcast", "reduce"])
@pytest.mark.parametrize("ranks, nodes", [(2, 2), (4, 4), (16, 2)])
def test_multi_node_broadcast_sends_the_whole_message_through_the_nics(catalog, op, ranks, nodes) -> None:
    """A broadcast (reduce) moves the whole message into (out of) every node, over its GPUs' NICs: nccl-tests'
    bus factor 1. The alpha-beta term took the all-gather's (nodes - 1)/nodes share of it, so 2 nodes of one GPU
    each were priced at half the NIC's time (bus bandwidth twice the NIC's rate); the layout model likewise."""
    from hybrid.corrections.collective_sigmoid import layout_terms

    size, g = 1 << 30, ranks // nodes
    nic = catalog.systems["DGX-H100"].inter_bw
    row = one(pd.DataFrame({"op": [op], "size_bytes": [size], "n_ranks": [ranks], "n_nodes": [nodes]}), catalog,
              system="DGX-H100")
    intra = (g - 1) / g + 1 / ranks  # inside a node as on one node: a GPU's links carry the message once
    assert row["memory_us"] == pytest.approx((intra * size / 450e9 + size / (g * nic)) * 1e6)
    assert row["memory_us"] * 1e-6 >= size / (g * nic)
    assert layout_terms(np.array([op]), np.array([ranks]), np.array([nodes]))[0, 4] == pytest.approx(1 / g)


def test_all_reduce_bound_on_an_nvls_node_is_nvls(catalog) -> None:
    """A Hopper NVSwitch node reduces in the switch (NVLS): (g + 1)/g bytes per link instead of the ring's
    2 (g - 1)/g, so the roofline stays a bound where NCCL's measured 8-GPU all-reduce (483 GB/s bus bandwidth on
    an H100 node, ../shared xxrjun logs) beats a ring at the full 450 GB/s link rate. 2 GPUs keep the ring; an
    A100 node (no SHARP in its NVSwitch) and all-gather are unchanged; ``nvls = false`` turns it off."""
    import dataclasses

    from hybrid.hardware.catalog import Catalog

    size = 1 << 30
    q = pd.DataFrame({"op": ["all_reduce", "all_reduce", "all_gather"], "size_bytes": size, "n_ranks": [8, 2, 8]})
    h100 = roofline(q, catalog, system="DGX-H100")
    assert h100["memory_us"].iloc[0] == pytest.approx(9 / 8 * size / 450e9 * 1e6)
    assert h100["memory_us"].iloc[1] == pytest.approx(1 * size / 450e9 * 1e6)
    assert h100["memory_us"].iloc[2] == pytest.approx(7 / 8 * size / 450e9 * 1e6)
    assert 2 * 7 / 8 * size / (h100["memory_us"].iloc[0] * 1e-6) > 483e9  # bus bandwidth bound above the measured
    off = dataclasses.replace(catalog.systems["DGX-H100"], key="h100-ring", aliases=(), nvls=False)
    cat = Catalog(dict(catalog.devices), {**catalog.systems, off.key: off})
    ring = roofline(q, cat, system="h100-ring")
    assert ring["memory_us"].iloc[0] == pytest.approx(2 * 7 / 8 * size / 450e9 * 1e6)
    a100 = roofline(q, catalog, system="DGX-A100")
    assert a100["memory_us"].iloc[0] == pytest.approx(2 * 7 / 8 * size / 300e9 * 1e6)


def test_generic_node_of_an_sxm_part_is_an_nvswitch_board(catalog) -> None:
    """8 Ampere-or-later SXM GPUs sit on an HGX board's NVSwitch (so Hopper-or-later get NVLS); bridged PCIe
    cards and Volta's SXM2 (DGX-1 cube mesh) do not."""
    from hybrid.hardware.device import nvls_capable

    def node(name: str):
        s = resolve_system(catalog, name)
        return s, nvls_capable(s, catalog.device(s.device))

    for name, switch, nvls in (("H200", True, True), ("B200", True, True), ("A100-SXM4-80GB", True, False),
                               ("H100-PCIE", False, False), ("A100-PCIE-40GB", False, False),
                               ("V100-SXM2-32GB", False, False), ("GB200", True, True)):
        s, has_nvls = node(name)
        assert ("switch" in s.intra_fabric.lower()) == switch, (name, s.intra_fabric)
        assert has_nvls == nvls, name


def test_collective_on_a_bare_device_uses_a_generic_node(catalog) -> None:
    sys_ = resolve_system(catalog, "Tesla T4")
    assert sys_.device == "T4" and sys_.intra_bw == 12e9  # PCIe gen3, no NVLink
    assert resolve_system(catalog, "a100_dgx").key == "Vidur-A100-DGX"
    generic = system_for_device(catalog.device("H100"))
    assert generic.intra_bw == 450e9
    table = pd.DataFrame({"op": ["all_reduce"], "size_bytes": [1 << 26], "n_ranks": [4], "device": ["Tesla T4"]})
    assert roofline(table, catalog)["time_us"].iloc[0] > 0


# ------------------------------------------------------------------------------------------------ vectorisation
def _mixed(catalog) -> pd.DataFrame:
    rows = [
        {"op": "gemm", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "device": "H100"},
        {"op": "linear", "b": 8, "m": 128, "n": 4096, "k": 1024, "dtype": "fp16", "device": "Tesla T4"},
        {"op": "bmm", "b": 32, "m": 64, "n": 64, "k": 64, "dtype": "fp32", "device": "MI210"},
        {"op": "elementwise", "elements": 1 << 24, "variant": "gelu", "dtype": "bf16", "device": "A100"},
        {"op": "layernorm", "rows": 8192, "hidden": 4096, "dtype": "fp16", "device": "V100", "direction": "bwd"},
        {"op": "softmax", "rows": 4096, "hidden": 2048, "dtype": "fp32", "device": "P100"},
        {"op": "embedding_bag", "num_embeddings": 1_000_000, "embedding_dim": 128, "pooling_factor": 20,
         "batch_size": 2048, "num_tables": 8, "zipf_alpha": 1.05, "dtype": "fp32", "device": "A100"},
        {"op": "attention", "batch": 4, "heads": 32, "q_len": 2048, "kv_len": 2048, "head_dim": 128, "causal": 1,
         "dtype": "bf16", "device": "H200"},
        {"op": "all_to_all", "size_bytes": 1 << 24, "n_ranks": 16, "dtype": "fp32", "device": "H100",
         "system": "DGX-H100"},
        {"op": "gemm", "m": 2048, "n": 2048, "k": 2048, "dtype": "fp32", "device": "local-cpu"},
    ]
    return pd.DataFrame(rows, index=[f"r{i}" for i in range(len(rows))])


def test_whole_table_equals_row_by_row(catalog) -> None:
    from hybrid.hardware.cpu import describe_local_cpu

    cat = catalog.with_device(describe_local_cpu())
    table = _mixed(cat)
    whole = roofline(table, cat)
    assert list(whole.columns) == list(ROOFLINE_COLUMNS)
    assert list(whole.index) == list(table.index)
    for idx in table.index:
        single = roofline(table.loc[[idx]].dropna(axis=1), cat)
        for c in ROOFLINE_COLUMNS[1:-1]:
            assert whole.loc[idx, c] == pytest.approx(single.loc[idx, c]), (idx, c)
        assert whole.loc[idx, "bound"] == single.loc[idx, "bound"]
        assert whole.loc[idx, "family"] == single.loc[idx, "family"]
    assert np.isfinite(whole[list(ROOFLINE_COLUMNS[1:-1])].to_numpy()).all()


def test_device_argument_equals_device_column(catalog) -> None:
    rng = np.random.default_rng(3)
    n = 2000
    table = pd.DataFrame({"op": "gemm", "m": rng.integers(1, 9000, n), "n": rng.integers(1, 9000, n),
                          "k": rng.integers(1, 9000, n), "dtype": rng.choice(DTYPES, n)})
    by_arg = roofline(table, catalog, device="A100-SXM4-80GB")
    by_col = roofline(table.assign(device="NVIDIA A100-SXM4-80GB (400W)"), catalog)
    np.testing.assert_allclose(by_arg["time_us"], by_col["time_us"])


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(("change", "match"), [
    ({"m": 0}, "'m' must be positive"),
    ({"k": -8}, "'k' must be positive"),
    ({"n": np.nan}, "'n' must be positive"),
    ({"n": np.inf}, "'n' must be positive"),
    ({"m": "big"}, "'m' must be positive"),
    ({"b": 0}, "'b' must be positive"),
    ({"dtype": "fp13"}, "unknown dtype 'fp13'"),
    ({"op": "conv9"}, "unknown op 'conv9'"),
    ({"op": None}, "missing op"),
])
def test_bad_gemm_input_raises(catalog, change: dict, match: str) -> None:
    table = gemm(64, 64, 64)
    for c, v in change.items():
        table[c] = pd.Series([v], dtype=object)
    with pytest.raises(InvalidInputError, match=match):
        roofline(table, catalog, device="H100")


def test_bad_row_is_named(catalog) -> None:
    table = pd.concat([gemm(64, 64, 64)] * 5, ignore_index=True)
    table.index = ["a", "b", "c", "d", "e"]
    table.loc["d", "k"] = -1
    with pytest.raises(InvalidInputError, match="at row index 'd'"):
        roofline(table, catalog, device="H100")


def test_unknown_device_raises(catalog) -> None:
    with pytest.raises(UnknownDeviceError, match="H900.*closest known"):
        roofline(gemm(64, 64, 64), catalog, device="H900")
    with pytest.raises(UnknownDeviceError, match="Q100"):
        roofline(gemm(64, 64, 64).assign(device="Q100"), catalog)
    with pytest.raises(UnknownDeviceError, match="unknown system"):
        roofline(pd.DataFrame({"op": ["all_reduce"], "size_bytes": [8], "n_ranks": [2]}), catalog, system="DGX-Z")


@pytest.mark.parametrize(("table", "match"), [
    (pd.DataFrame(columns=["op", "m", "n", "k"]), "empty"),
    (pd.DataFrame({"m": [1]}), "no 'op' column"),
    (pd.DataFrame({"op": ["gemm"], "m": [1], "n": [2]}), "missing column 'k'"),
    (pd.DataFrame({"op": ["gemm"], "m": [1], "n": [2], "k": [3]}), "no 'device' column"),
    (pd.DataFrame({"op": ["gemm"], "m": [1], "n": [2], "k": [3], "device": [None]}), "missing 'device'"),
    (pd.DataFrame({"op": ["all_reduce"], "size_bytes": [0], "n_ranks": [8], "system": ["DGX-H100"]}),
     "'size_bytes' must be positive"),
    (pd.DataFrame({"op": ["all_reduce"], "size_bytes": [64], "n_ranks": [8], "n_nodes": [16],
                   "system": ["DGX-H100"]}), "n_nodes' must be <= n_ranks"),
    (pd.DataFrame({"op": ["all_reduce"], "size_bytes": [64], "n_ranks": [8], "n_nodes": [0],
                   "system": ["DGX-H100"]}), "n_nodes' must be positive"),
    (pd.DataFrame({"op": ["all_reduce"], "size_bytes": [64], "n_ranks": [8]}), "need a 'system'"),
    (pd.DataFrame({"op": ["elementwise"], "elements": [64], "n_inputs": [-1], "device": ["H100"]}),
     "'n_inputs' must be finite and >= 0"),
    (pd.DataFrame({"op": ["layernorm"], "rows": [8], "hidden": [8], "direction": ["sideways"], "device": ["H100"]}),
     "'direction' must be one of"),
    (pd.DataFrame({"op": ["embedding_bag"], "num_embeddings": [10], "embedding_dim": [8], "pooling_factor": [2],
                   "batch_size": [4], "num_tables": [0], "device": ["H100"]}), "'num_tables' must be positive"),
])
def test_bad_tables_raise(catalog, table: pd.DataFrame, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        roofline(table, catalog)


@pytest.mark.parametrize(("change", "match"), [
    ({"m": [-4, 4]}, "'m' must be positive and finite, got -4 at row index 'x'"),
    ({"m": ["abc", 4]}, "'m' must be positive and finite, got 'abc'"),
    ({"direction": ["fwd", "sideways"]}, "'direction' must be one of"),
])
def test_memory_fit_checks_shapes_as_the_roofline_does(catalog, change: dict, match: str) -> None:
    """A GEMM of m=-4 had a footprint of -64 bytes and "fit" the device, one of m='abc' a NaN footprint; a table
    with a column twice was a pandas TypeError in roofline and memory_fit alike."""
    from hybrid.ops.roofline import footprint_bytes, memory_fit

    table = pd.DataFrame({"device": "H100", "op": "gemm", "m": [4, 4], "n": 4, "k": 4}, index=["x", "y"])
    for fn in (lambda t: roofline(t, catalog), lambda t: memory_fit(t, catalog), footprint_bytes):
        with pytest.raises(InvalidInputError, match=match):
            fn(table.assign(**change))
        with pytest.raises(InvalidInputError, match="column 'm' more than once"):
            fn(pd.concat([table, table[["m"]]], axis=1))
    assert footprint_bytes(table).tolist() == [3 * 16 * 4] * 2


def test_nan_in_optional_column_means_default(catalog) -> None:
    table = pd.DataFrame({"op": "gemm", "m": [64, 64], "n": 64, "k": 64, "b": [np.nan, 1.0], "device": "H100"})
    out = roofline(table, catalog)
    assert out["time_us"].iloc[0] == out["time_us"].iloc[1]


def test_fill_with_zero_inputs_is_allowed(catalog) -> None:
    table = pd.DataFrame({"op": ["elementwise"], "elements": [1 << 20], "variant": ["fill"], "n_inputs": [0],
                          "dtype": ["fp32"]})
    row = one(table, catalog, device="H100")
    assert row["bytes"] == (1 << 20) * 4


def test_elementwise_variant_defaults_per_distinct_value():
    """Inputs / outputs / FLOPs per element from the variant: case-insensitive, an in-place "_" suffix
    dropped, missing means "add", unknown variants 1 / 1 / 1, explicit columns win."""
    from hybrid.ops.families import ELEMENTWISE_VARIANTS, elementwise_defaults

    df = pd.DataFrame({"variant": ["GELU", "relu_", None, "no-such-op", "_", "swiglu", "gelu"],
                       "n_inputs": [np.nan, np.nan, np.nan, np.nan, np.nan, 7.0, np.nan]})
    n_in, n_out, fpe = elementwise_defaults(df)
    gelu, relu, add, swiglu = (ELEMENTWISE_VARIANTS[k] for k in ("gelu", "relu", "add", "swiglu"))
    assert n_in.tolist() == [gelu[0], relu[0], add[0], 1.0, 1.0, 7.0, gelu[0]]
    assert fpe.tolist() == [gelu[2], relu[2], add[2], 1.0, 1.0, swiglu[2], gelu[2]]
    assert n_out.tolist() == [gelu[1], relu[1], add[1], 1.0, 1.0, swiglu[1], gelu[1]]
    assert [v.tolist() for v in elementwise_defaults(df.drop(columns=["variant", "n_inputs"]))] == [[1.0] * 7] * 3
    assert [v.shape for v in elementwise_defaults(df.iloc[:0])] == [(0,)] * 3  # an empty table


def test_attention_softmax_exps_in_series_or_overlapped(catalog) -> None:
    """Fused attention's compute time: its matrix multiplies plus one exp per score on the special-function units
    (16 per SM per clock), in series on FlashAttention-2-style kernels (Ampere's default, PyTorch's flash backend)
    and overlapped (the larger of the two) on Hopper-and-later kernels."""
    base = dict(op="attention", dtype="bf16", direction="fwd", batch=8, heads=16, q_len=4096, kv_len=4096,
                head_dim=64, causal=0)
    pairs, exps = 4096 * 4096, 8 * 16 * 4096 * 4096
    flops = 4.0 * 8 * 16 * 64 * pairs

    def compute(device: str, **kw) -> float:  # the compute side of the bound (compute-bound at this size)
        r = roofline(pd.DataFrame([{**base, "device": device, **kw}])).iloc[0]
        assert r["bound"] == "compute" or r["bound"] == 0, r["bound"]
        return float(r["time_us"] - r["latency_us"])

    a100, h100, b300 = (catalog.device(k) for k in ("A100-SXM4-80GB", "H100-SXM", "B300"))
    assert a100.exp_rate == pytest.approx(16 * 108 * 1410e6)
    assert b300.exp_rate == pytest.approx(32 * 160 * 1830e6)  # Blackwell Ultra doubles the SFU rate
    mm_a, ex_a = flops / a100.peak("bf16") * 1e6, exps / a100.exp_rate * 1e6
    assert compute("A100-SXM4-80GB") == pytest.approx(mm_a + ex_a)  # Ampere: in series
    assert compute("A100-SXM4-80GB", softmax_overlap=1) == pytest.approx(max(mm_a, ex_a))
    mm_h, ex_h = flops / h100.peak("bf16") * 1e6, exps / h100.exp_rate * 1e6
    assert compute("H100-SXM") == pytest.approx(max(mm_h, ex_h))  # Hopper: overlapped
    assert compute("H100-SXM", framework="pytorch") == pytest.approx(mm_h + ex_h)  # SDPA's FlashAttention-2
    assert compute("H100-SXM", framework="pytorch", softmax_overlap=1) == pytest.approx(max(mm_h, ex_h))
    # at head dim 64 the exps take about as long as the matrix multiplies on an H100: FA2 ~1.9x an overlapped kernel
    assert 1.7 < compute("H100-SXM", softmax_overlap=0) / compute("H100-SXM") < 2.0
    # ``compute_us`` stays the FLOP term (a feature of the corrections); a memory-bound decode step is unchanged
    r = roofline(pd.DataFrame([{**base, "device": "A100-SXM4-80GB"}])).iloc[0]
    assert r["compute_us"] == pytest.approx(mm_a)
    decode = {**base, "q_len": 1, "kv_len": 8192, "device": "A100-SXM4-80GB"}
    r0, r1 = (roofline(pd.DataFrame([{**decode, "softmax_overlap": o}])).iloc[0] for o in (0, 1))
    assert r0["time_us"] == r1["time_us"] == pytest.approx(r0["memory_us"] + r0["latency_us"])
    # other families are untouched; a CPU has no SFU term (exps are FMA polynomials in its FLOP ceiling)
    from dataclasses import replace

    assert replace(a100, kind="cpu").exp_rate == 0.0 and replace(a100, num_sms=0).exp_rate == 0.0
    gemm = dict(op="gemm", dtype="bf16", m=4096, n=4096, k=4096)
    assert roofline(pd.DataFrame([{**gemm, "device": "A100-SXM4-80GB"}]))["compute_us"].iloc[0] == pytest.approx(
        2.0 * 4096**3 / a100.peak("bf16") * 1e6)
    with pytest.raises(InvalidInputError, match="softmax_overlap"):
        roofline(pd.DataFrame([{**base, "device": "H100-SXM", "softmax_overlap": -1}]))


def test_attention_dropout_draws_its_mask_on_the_integer_lanes(catalog) -> None:
    """A fused attention with dropout draws one Philox random number per score (forward, and again in the backward,
    which regenerates the mask): DROPOUT_INT_OPS_PER_SCORE integer ops each on 64 INT32 lanes per SM per clock, in
    series with the rest. Before, a dropout row was priced as without it: the H200's GPT-2 SDPA calls (dropout 0.1,
    ~6x their roofline against ~2x without) came out 38-65% low."""
    from hybrid.ops.families import DROPOUT_INT_OPS_PER_SCORE

    base = dict(op="attention", dtype="bf16", device="H100-SXM", batch=8, heads=12, q_len=1024, kv_len=1024,
                head_dim=64, causal=1)
    h100 = catalog.device("H100-SXM")
    assert h100.int_rate == pytest.approx(64 * h100.num_sms * h100.clock_mhz * 1e6)
    scores = 8 * 12 * (1024 * 1024 - 1024 * 1023 / 2)  # causal: the lower triangle with its diagonal
    for direction in ("fwd", "bwd"):
        rows = pd.DataFrame([{**base, "direction": direction, "dropout": p} for p in (0.0, 0.1, 0.5)]
                            + [{**base, "direction": direction}])
        r = roofline(rows)
        extra = scores * DROPOUT_INT_OPS_PER_SCORE / h100.int_rate * 1e6
        assert r["busy_us"].iloc[1] - r["busy_us"].iloc[0] == pytest.approx(extra)
        assert r["busy_us"].iloc[2] == pytest.approx(r["busy_us"].iloc[1])  # the draws, whatever the probability
        assert r["busy_us"].iloc[3] == pytest.approx(r["busy_us"].iloc[0])  # no column: no dropout
        assert r["compute_us"].nunique() == 1  # the FLOP term (a feature) unchanged
    from dataclasses import replace

    assert replace(h100, kind="cpu").int_rate == 0.0
    for bad in (1.0, 1.5, -0.1):
        with pytest.raises(InvalidInputError, match="dropout"):
            roofline(pd.DataFrame([{**base, "dropout": bad}]))


def test_attention_efficiency_is_read_without_the_dropout_mask(catalog) -> None:
    """The attention correction's features describe the kernel's shape: a dropout row reads the same softmax share
    as the same row without dropout (its learned efficiency then applies to the whole roofline, the mask's draws
    included), instead of a share outside anything measured."""
    from hybrid.corrections.features import feature_arrays

    rows = pd.DataFrame([dict(op="attention", dtype="bf16", device="H100-SXM", batch=8, heads=12, q_len=1024,
                              kv_len=1024, head_dim=64, causal=1, direction="fwd", dropout=p) for p in (0.0, 0.1)])
    base = roofline(rows, catalog)
    f = feature_arrays("attention", rows, base, catalog)
    assert base["time_us"].iloc[1] > 1.5 * base["time_us"].iloc[0]
    assert f["log_exp_share"][1] == pytest.approx(f["log_exp_share"][0])


def test_a_fully_connected_node_gives_fewer_ranks_only_their_own_links():
    """Polaris' four A100s are linked pairwise (4 NVLink3 links per pair, 100 GB/s): two of them reach 100 of a
    GPU's 300 GB/s, not all of it; an MI300X pair one xGMI link of seven. Switch nodes are unchanged."""
    import pandas as pd

    from hybrid.hardware.catalog import default_catalog

    cat = default_catalog()

    def busbw(system: str, ranks: int) -> float:
        row = pd.DataFrame({"op": ["all_gather"], "size_bytes": [2**30], "n_ranks": [ranks], "n_nodes": [1],
                            "system": [system], "device": [cat.system_device(system).key]})
        t = roofline(row, cat)["time_us"].iloc[0] * 1e-6
        return 2**30 * (ranks - 1) / ranks / t / 1e9

    assert busbw("Polaris", 2) == pytest.approx(busbw("Polaris", 4) / 3, rel=0.02)
    assert busbw("Polaris", 2) <= 101
    assert busbw("DGX-H100", 2) == pytest.approx(busbw("DGX-H100", 8), rel=0.05)


# ------------------------------------------------------------------------------------------------ memory capacity
def test_memory_fit_flags_only_ops_whose_operands_exceed_the_device(catalog) -> None:
    from hybrid.ops.roofline import memory_fit, memory_warning

    h100 = catalog.device("H100-SXM").mem_capacity  # 80 GiB
    table = pd.DataFrame({
        "op": ["gemm", "gemm", "embedding_bag", "attention", "all_gather", "elementwise"],
        "device": ["H100-SXM", "T4", "H100-SXM", "H100-SXM", None, "H100-SXM"],
        "system": [None, None, None, None, "DGX-H100", None],
        "dtype": ["fp32", "fp16", "fp32", "bf16", "bf16", "fp32"],
        "m": [200_000, 8192, None, None, None, None], "n": [200_000, 8192, None, None, None, None],
        "k": [200_000, 8192, None, None, None, None],
        # 26 tables of 40M rows x 128 fp32 = 532 GB: DLRM-size tables no single GPU holds
        "num_tables": [None, None, 26, None, None, None], "num_embeddings": [None, None, 40e6, None, None, None],
        "embedding_dim": [None, None, 128, None, None, None], "pooling_factor": [None, None, 1, None, None, None],
        "batch_size": [None, None, 2048, None, None, None],
        "batch": [None, None, None, 8, None, None], "heads": [None, None, None, 32, None, None],
        "q_len": [None, None, None, 8192, None, None], "kv_len": [None, None, None, 8192, None, None],
        "head_dim": [None, None, None, 128, None, None],
        "size_bytes": [None, None, None, None, 100 * 2**30, None], "n_ranks": [None, None, None, None, 8, None],
        "elements": [None, None, None, None, None, 2**30],
    }, index=[10, 11, 12, 13, 14, 15])
    fit = memory_fit(table, catalog)
    assert list(fit.index) == [10, 11, 12, 13, 14, 15]
    # A, B, C of 200000^2 fp32 each: 3 x 160 GB
    assert fit.loc[10, "footprint_bytes"] == 3 * 200_000**2 * 4
    assert fit.loc[12, "footprint_bytes"] == pytest.approx(26 * 128 * 4 * (40e6 + 2048))
    assert fit.loc[14, "device_memory_bytes"] == h100  # a collective row named by system: the system's GPU
    assert fit["fits_memory"].tolist() == [False, True, False, True, False, True]
    note = memory_warning(fit)
    assert "3 op(s)" in note and "row index 10, 12, 14" in note and "495.9 GiB" in note and "80.0 GiB" in note  # the tables
    assert memory_warning(fit.loc[[11, 13]]) == ""
    # one device for the whole table, as roofline(device=) takes it
    assert memory_fit(table.iloc[[1]], catalog, device="T4")["device_memory_bytes"].iloc[0] == \
        catalog.device("T4").mem_capacity


def test_memory_fit_is_vectorised_over_large_tables(catalog) -> None:
    from hybrid.ops.roofline import memory_fit, memory_warning

    n = 200_000
    m = np.where(np.arange(n) % 1000 == 0, 200_000, 1024)
    table = pd.DataFrame({"op": "gemm", "device": "H100-SXM", "dtype": "fp32", "m": m, "n": m, "k": m})
    fit = memory_fit(table, catalog)
    assert (~fit["fits_memory"]).sum() == 200
    assert "200 op(s)" in memory_warning(fit) and "and 190 more" in memory_warning(fit)


def test_a_dense_gradient_embedding_backward_streams_the_table_four_times(catalog) -> None:
    """A ``dense_sgd`` backward row (``nn.EmbeddingBag(sparse=False)`` + ``torch.optim.SGD``, as profiled) zero-fills
    the table-sized gradient (1 pass) and updates it densely: read the gradient, read + write the weights (3 passes).
    Its bytes counted only the touched rows, as for a sparse gradient: a 1M x 64 FP32 table (256 MB) cost 4 us on
    an A100 instead of ~500 us."""
    from hybrid.ops.families import FAMILIES, dense_sgd_update_share, expected_unique_rows

    t, n, d, b, eb = 2, 1000, 16, 10, 4
    rows = pd.DataFrame({"op": "embedding_bag", "num_tables": t, "num_embeddings": n, "embedding_dim": d,
                         "pooling_factor": 1.0, "batch_size": b, "dtype": "fp32", "direction": "bwd",
                         "variant": ["sparse_sgd", "dense_sgd"], "device": "A100"})
    nbytes = FAMILIES["embedding"].bytes(rows)
    unique = t * n * (1.0 - (1.0 - 1.0 / n) ** b)  # 19.91 rows
    sparse = t * b * d * eb + t * b * 8 + 2.0 * unique * d * eb  # output grads, int64 indices, touched rows r+w
    table = t * n * d * eb  # 128,000 B
    assert nbytes[0] == pytest.approx(sparse, rel=1e-9)
    assert nbytes[1] == pytest.approx(sparse + 4.0 * table, rel=1e-9)
    assert float(expected_unique_rows(np.array([n]), np.array([b]))[0]) * t == pytest.approx(unique)
    # the update's share (what the DLRM graph moves to its optimizer phase): 3 of the 4 table passes
    share = dense_sgd_update_share(rows)
    assert share[0] == 0.0
    assert share[1] == pytest.approx(3.0 * table / (sparse + 4.0 * table), rel=1e-9)
    # the roofline time of the 1M x 64 table on an A100 (2.039 TB/s): at least the four passes
    big = rows.assign(num_tables=1, num_embeddings=1_000_000, embedding_dim=64)
    roof = roofline(big, catalog)["time_us"].to_numpy()
    a100 = catalog.device("A100")
    assert roof[1] - roof[0] == pytest.approx(4 * 256e6 / a100.mem_bw * 1e6, rel=1e-6)
