"""16-bit GEMMs a TMA GPU cannot feed its tensor cores (a stride not a multiple of 16 bytes): the fallback path."""

from __future__ import annotations

import gzip
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections import GemmXGB, XGBParams
from hybrid.ops.gemm_paths import FALLBACK_FLOP_PER_CLK_PER_SM, alignment_elements, misaligned_kernel_us
from hybrid.ops.roofline import roofline

ROOT = Path(__file__).resolve().parents[1]


def test_alignment_is_the_largest_power_of_two_dividing_n_and_k():
    n = np.array([50257, 30522, 50256, 1028, 768, 768])
    k = np.array([768, 1024, 768, 768, 50257, 1020])
    assert alignment_elements(n, k).tolist() == [1, 2, 8, 4, 1, 4]


def test_fallback_time_on_tma_gpus_only_and_16_bit_only(catalog):
    rows = pd.DataFrame([
        dict(op="gemm", device="H100-SXM", dtype="bf16", m=8192, n=50257, k=768),
        dict(op="gemm", device="H100-SXM", dtype="bf16", m=8192, n=50256, k=768),   # aligned
        dict(op="gemm", device="A100-SXM4-80GB", dtype="bf16", m=8192, n=50257, k=768),  # no TMA
        dict(op="gemm", device="H100-SXM", dtype="fp32", m=8192, n=50257, k=768),   # CUDA cores
        dict(op="linear", device="B200", dtype="fp16", m=4096, n=30522, k=1024),
        dict(op="gemm", device="H100-SXM", dtype="bf16", m=8191, n=4096, k=4096),  # an odd token count
    ])
    out = misaligned_kernel_us(rows, catalog)
    h100 = catalog.devices["H100-SXM"]
    b200 = catalog.devices[catalog.resolve_device("B200")]
    assert out[0] == pytest.approx(2 * 8192 * 50257 * 768 / (510.0 * h100.num_sms * h100.clock_mhz * 1e6) * 1e6)
    assert 4300 < out[0] < 5200  # us: GPT-2's LM head, 8 x 1024 tokens (the H100 trace's kernel: 6,572 us)
    assert np.isnan(out[[1, 2, 3, 5]]).all()
    # alignment 2 on a Blackwell: the legacy path's rate per SM and clock, on that GPU's SMs and clock
    assert out[4] == pytest.approx(2 * 4096 * 30522 * 1024 / (980.0 * b200.num_sms * b200.clock_mhz * 1e6) * 1e6)


def _misaligned_kernels(trace: Path) -> list[tuple[int, float]]:
    """(alignment in elements, kernel us) of the CUTLASS fallback GEMMs a trace recorded (``..._alignN``)."""
    events = json.load(gzip.open(trace))["traceEvents"]
    out = []
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel" and "tensorop_bf16" in e.get("name", ""):
            m = re.search(r"_align(\d)>", e["name"])
            if m:
                out.append((int(m.group(1)), float(e["dur"])))
    return out


def test_the_rates_read_off_the_h100_traces_price_the_h200_traces_kernels(catalog):
    """The constants come from the H100 traces; the H200 traces (another machine, the same die) time the same
    fallback kernels: GPT-2's LM head and its gradients (alignment 1), BERT's (alignment 2)."""
    h200 = catalog.devices[catalog.resolve_device("H200")]
    shapes = {"gpt2-bf16-sdpa": 2 * 8192 * 50257 * 768, "bert-bf16-sdpa": 2 * 4096 * 30522 * 1024}
    ratios: dict[int, list[float]] = {1: [], 2: []}
    for name, flops in shapes.items():
        for align, us in _misaligned_kernels(ROOT / "datasets" / "traces-h200" / name / "kineto_rank0.json.gz"):
            rate = flops / (us * 1e-6) / (h200.num_sms * h200.clock_mhz * 1e6)
            ratios[align].append(rate / FALLBACK_FLOP_PER_CLK_PER_SM[align])
    assert len(ratios[1]) == len(ratios[2]) == 3
    for got in ratios.values():
        assert 0.6 < min(got) and max(got) < 1.4 and abs(np.exp(np.mean(np.log(got))) - 1) < 0.15, got


@pytest.fixture(scope="module")
def xla_model(shared_datasets, catalog) -> GemmXGB:
    from hybrid.data.importers import import_paths

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = import_paths("xla-matmul", shared_datasets / "xla", catalog=catalog)
    table = table[table["dtype"] == "bf16"].reset_index(drop=True)  # every row aligned
    return GemmXGB(XGBParams(n_estimators=60, max_depth=6, learning_rate=0.1)).fit(table, roofline(table, catalog),
                                                                                     catalog)


def test_the_gemm_model_never_prices_a_misaligned_gemm_under_the_fallback(xla_model, catalog):
    rows = pd.DataFrame([dict(op="gemm", device="H100-SXM", dtype="bf16", m=8192, n=n, k=768, framework="xla")
                         for n in (50257, 50256)])
    base = roofline(rows, catalog)
    out = xla_model.predict(rows, base, catalog)
    floor = misaligned_kernel_us(rows, catalog)
    assert out[0] >= floor[0] > 3 * out[1]  # the aligned twin runs on the Hopper kernels the trees learned
    trees = xla_model._predict_bounded(rows, base, catalog)
    assert out[1] == trees[1] and trees[0] < floor[0]  # the trees alone priced the odd one like the aligned one


def test_a_traced_gemm_carries_the_alignment_of_its_operands_row_strides():
    from hybrid.data.traces.opmap import map_op

    bf16 = ["c10::BFloat16", "c10::BFloat16"]
    # GPT-2's LM-head weight gradient: dY^T (a transposed view, rows 50,257 apart) x X; n and k are even
    dw = map_op("aten::mm", [[50257, 8192], [8192, 768]], bf16, extra={"strides": [[1, 50257], [768, 1]]})
    assert (dw.row["m"], dw.row["n"], dw.row["k"], dw.row["align"]) == (50257, 768, 8192, 1)
    plain = map_op("aten::mm", [[8192, 768], [768, 3072]], bf16, extra={"strides": [[768, 1], [3072, 1]]})
    assert plain.row["align"] == 8
    half = map_op("aten::addmm", [[30522], [4096, 1024], [1024, 30522]], ["c10::BFloat16"] * 3,
                  extra={"strides": [[1], [1024, 1], [1, 1024]]})
    assert half.row["align"] == 2  # BERT's LM head: its output rows are 30,522 elements apart
    assert "align" not in map_op("aten::mm", [[64, 64], [64, 64]], bf16).row  # no strides recorded: no claim


def test_the_weight_gradient_the_bare_row_misses_is_priced_from_its_strides(catalog):
    rows = pd.DataFrame([dict(op="gemm", device="H100-SXM", dtype="bf16", m=50257, n=768, k=8192),
                         dict(op="gemm", device="H100-SXM", dtype="bf16", m=50257, n=768, k=8192, align=1),
                         dict(op="gemm", device="H100-SXM", dtype="bf16", m=8192, n=768, k=3072, align=8)])
    out = misaligned_kernel_us(rows, catalog)
    assert np.isnan(out[0]) and 4000 < out[1] < 6000 and np.isnan(out[2])


def test_an_imported_trace_marks_the_lm_heads_three_gemms_misaligned():
    """The committed H100 GPT-2 bf16 trace: its LM head (50,257 outputs) runs as a forward ``linear`` and two
    ``mm`` gradients; every other GEMM of the step is aligned."""
    from hybrid.data.traces.parse import load_trace
    from hybrid.workloads.trace_units import trace_units

    units = trace_units(load_trace(ROOT / "datasets" / "traces-h100" / "gpt2-bf16" / "kineto_rank0.json.gz"))
    rows = pd.DataFrame([r for r in units["row"] if isinstance(r, dict)])
    gemm = rows[(rows["op"] == "gemm")].drop_duplicates(subset=["m", "n", "k", "variant"])
    head = gemm[(gemm[["m", "n", "k"]] == 50257).any(axis=1)]
    assert len(head) == 3
    assert head.loc[head["variant"] == "mm", "align"].tolist() == [1, 1]
    assert (gemm.loc[~gemm.index.isin(head.index) & gemm["align"].notna(), "align"] == 8).all()


def test_gemvs_and_odd_alignment_values(catalog):
    rows = pd.DataFrame([dict(op="gemm", device="H100-SXM", dtype="bf16", m=1, n=50257, k=768),
                         dict(op="gemm", device="H100-SXM", dtype="bf16", m=8192, n=768, k=768, align=3),
                         dict(op="gemm", device="H100-SXM", dtype="bf16", m=8192, n=768, k=768, align=16)])
    out = misaligned_kernel_us(rows, catalog)
    assert np.isnan(out[0])  # one row: a GEMV's kernel, not the tensor-core GEMM path
    h100 = catalog.devices["H100-SXM"]
    assert out[1] == pytest.approx(2 * 8192 * 768 * 768 / (980.0 * h100.num_sms * h100.clock_mhz * 1e6) * 1e6)
    assert np.isnan(out[2])  # 32-byte rows: aligned


def test_predict_gemm_says_when_the_tensor_cores_cannot_take_it(capsys):
    from hybrid.cli.main import main

    def run(*args: str) -> tuple[int, dict, str]:
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return code, json.loads(captured.out), captured.err

    code, odd, err = run("predict", "gemm", "-d", "H100", "-m", "8192", "-n", "50257", "-k", "768", "--json")
    assert code == 0 and "TMA tensor cores" in odd["path_note"] and "pad" in err
    assert odd["fallback_kernel_us"] > 5 * odd["time_us"]  # the roofline alone: the datasheet peak
    code, even, _ = run("predict", "gemm", "-d", "H100", "-m", "8192", "-n", "50264", "-k", "768", "--json")
    assert code == 0 and "path_note" not in even
    code, a100, _ = run("predict", "gemm", "-d", "A100", "-m", "8192", "-n", "50257", "-k", "768", "--json")
    assert code == 0 and "path_note" not in a100


def test_only_the_kernel_part_is_raised_a_tiny_gemm_keeps_its_learned_dispatch():
    """Fitted on the H200 profile's eager GEMMs (a dispatch constant of tens of us), predicting the H100's: a tiny
    misaligned GEMM (its fallback kernel under a microsecond) keeps the trees' price; the large misaligned one gets
    the fallback kernel time on top of the dispatch."""
    from hybrid.data.bundle import bundle_catalog, load_bundle

    catalog = bundle_catalog([ROOT / "datasets" / "H100-SXM", ROOT / "datasets" / "H200"])
    h200, _ = load_bundle(ROOT / "datasets" / "H200")
    h200 = h200[h200["op"].isin(["gemm", "bmm", "linear", "gemv"])].reset_index(drop=True)
    model = GemmXGB(XGBParams(n_estimators=60, max_depth=6, learning_rate=0.1)).fit(h200, roofline(h200, catalog),
                                                                                     catalog)
    rows = pd.DataFrame([dict(op="gemm", device="H100-SXM", dtype="bf16", m=5, n=2388, k=132),
                         dict(op="gemm", device="H100-SXM", dtype="bf16", m=2398, n=6915, k=5571)])
    base = roofline(rows, catalog)
    out = model.predict(rows, base, catalog)
    trees = model._predict_bounded(rows, base, catalog)
    host = model.host_us(rows, base, catalog)
    assert host[0] > 5 and out[0] == trees[0]
    assert out[1] == pytest.approx(max(trees[1], misaligned_kernel_us(rows, catalog)[1] + host[1]))
