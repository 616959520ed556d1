"""Custom (one-shot / two-shot) tensor-parallel all-reduce: TensorRT-LLM's strategy rule, the analytic time, and
its use by the inference builder."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid.ops.p2p_allreduce import NCCL, ONESHOT, TWOSHOT, p2p_allreduce_us, trtllm_strategy
from hybrid.workloads.llm.inference import make_setup, predict_static
from hybrid.workloads.llm.vendor_tables import trtllm_allreduce


def test_strategy_follows_tensorrt_llm_auto_rule():
    sizes = np.array([1e5, 9e5, 2e6, 9e6, 20e6])
    assert list(trtllm_strategy(sizes, 2)) == [ONESHOT, ONESHOT, ONESHOT, ONESHOT, NCCL]  # 16 MB workspace
    assert list(trtllm_strategy(sizes, 4)) == [ONESHOT, ONESHOT, TWOSHOT, NCCL, NCCL]  # 1 MB, 8 MB
    assert list(trtllm_strategy(sizes, 8)) == [ONESHOT, TWOSHOT, TWOSHOT, NCCL, NCCL]  # 500 kB, 8 MB


def test_time_by_hand():
    size, link = np.array([4e5, 4e6]), 300e9
    t = p2p_allreduce_us(size, 4, link, 0.5, 2.0, 4.0, trtllm_strategy(size, 4))
    one = 4.0 + 1 * 2.0 + 3 * 4e5 / (0.5 * link) * 1e6  # reads 3 peers' buffers, one barrier
    two = 4.0 + 2 * 2.0 + 2 * 3 / 4 * 4e6 / (0.5 * link) * 1e6  # reduce-scatter + all-gather, two barriers
    assert t == pytest.approx([one, two])
    assert np.isnan(p2p_allreduce_us(np.array([2e7]), 4, link, 0.5, 2.0, 4.0, trtllm_strategy(np.array([2e7]), 4)))[0]


def test_inference_uses_it_for_small_messages_on_nvlink_nodes_only():
    def ar_rows(allreduce: str, system: str | None = None, device: str = "A100"):
        r = predict_static(make_setup("llama2-70b", device, system, tp=4, allreduce=allreduce), 8, 512, 4)
        return r, r.ops[r.ops["name"] == "tp_all_reduce"].set_index("phase")

    nccl, a = ar_rows("nccl")
    custom, b = ar_rows("custom")
    # decode: 8 x 8192 x 2 bytes = 128 kB -> one-shot, faster than the ring; prefill 8 x 512 tokens = 64 MB -> NCCL
    assert b.loc["decode", "method"] == "p2p-allreduce" and b.loc["decode", "time_us"] < a.loc["decode", "time_us"]
    assert b.loc["prefill", "method"] == a.loc["prefill", "method"]
    assert b.loc["prefill", "time_us"] == a.loc["prefill", "time_us"]
    assert custom.tpot_ms < nccl.tpot_ms and custom.ttft_ms == pytest.approx(nccl.ttft_ms)
    # a PCIe node has no NVLink peer mappings: NCCL either way
    _, p = ar_rows("custom", device="A100-PCIE-80GB")
    assert (p["method"] != "p2p-allreduce").all()


def test_tensorrt_llm_versions():
    assert trtllm_allreduce("v0.6.1") == "nccl"  # build.py: --use_custom_all_reduce was a store-true flag
    assert trtllm_allreduce("v0.9.0") == trtllm_allreduce(None) == "custom"  # trtllm-build default


def test_cli_allreduce_option(capsys):
    import json

    from hybrid.cli.main import main

    tpot = {}
    for ar in ("nccl", "custom"):
        assert main(["llm", "infer", "llama2-70b", "--system", "DGX-A100", "--tp", "4", "--batch", "8", "--input",
                     "512", "--output", "64", "--allreduce", ar, "--json"]) == 0
        tpot[ar] = json.loads(capsys.readouterr().out)["tpot_ms"]
    assert tpot["custom"] < tpot["nccl"]


def test_bridged_pairs_get_it_at_two_gpus_only_and_generic_nodes_work():
    """A GPU with no catalog system gets a generic node (``<device>-node``), which every cost path resolves; on
    NVLink bridges between pairs only a 2-GPU group has NVLink between all its members."""
    methods = {}
    for tp in (2, 4):
        r = predict_static(make_setup("llama3-8b", "RTX-A6000", tp=tp, allreduce="custom"), 8, 512, 16)
        assert r.setup.system.key == "RTX-A6000-node"
        methods[tp] = set(r.ops.loc[r.ops["name"] == "tp_all_reduce", "method"])
    assert "p2p-allreduce" in methods[2] and "p2p-allreduce" not in methods[4]
    r = predict_static(make_setup("llama3-8b", "A10", tp=2), 8, 512, 16)  # PCIe-only generic node: NCCL
    assert r.tpot_ms > 0 and "p2p-allreduce" not in set(r.ops["method"])


def test_pcie_cards_bridged_in_pairs_get_it_over_the_bridge():
    """A node of PCIe cards bridged in pairs (Vidur's A100 80GB PCIe node): TP 2 talks over the NVLink bridge, so the
    custom all-reduce runs there, priced with the NVLink class's constants; TP 4 crosses PCIe: NCCL."""
    from hybrid.corrections.collective_transfer import intra_class
    from hybrid.workloads.llm.inference import _all_pairs_nvlink, _link_class

    setup = make_setup("llama3-8b", None, "Vidur-A100-pairwise-NVLink", tp=2, allreduce="custom")
    assert intra_class(setup.system) == "pcie-pairs"
    assert _all_pairs_nvlink(setup.system, 2, setup.device) and not _all_pairs_nvlink(setup.system, 4, setup.device)
    assert not _all_pairs_nvlink(setup.system, 2, None)  # no device: no bridge rate known
    assert _link_class(setup.system, 2, setup.device) == "nvlink" and _link_class(setup.system, 4, setup.device) == "pcie"
    methods = {}
    for tp in (2, 4):
        r = predict_static(make_setup("llama3-8b", None, "Vidur-A100-pairwise-NVLink", tp=tp, allreduce="custom"),
                           8, 512, 16)
        methods[tp] = set(r.ops.loc[r.ops["name"] == "tp_all_reduce", "method"])
    assert "p2p-allreduce" in methods[2] and "p2p-allreduce" not in methods[4]


def test_custom_allreduce_times_stand_outside_the_batch_envelope():
    """The one-shot / two-shot switch (1 MB on 4 GPUs) makes llama2-70b's decode all-reduce faster at batch 64
    (two-shot, 18.55 us) than at 56 (one-shot, 19.47 us): analytical times, but the static batch's envelope pooled
    them (19.41 us both), so without a cost model `latency_ms` left `roofline_latency_ms` (4247.8 against 4230.4 ms
    at batch 64, 4090.8 against 4092.0 at 56); serve fitted its step table the same way."""
    import math

    from hybrid.workloads.llm.serving import SchedulerConfig, make_trace, parse_dist, simulate

    s = make_setup("llama2-70b", system="DGX-A100", tp=4, allreduce="custom")
    for b in (56, 64):
        r = predict_static(s, b, 128, 128)
        assert r.latency_ms == pytest.approx(r.roofline_latency_ms, rel=1e-9), b
        ar = r.ops[(r.ops["name"] == "tp_all_reduce") & (r.ops["phase"] == "decode")]
        assert (ar["method"] == "p2p-allreduce").all()
        assert ar["time_us"].to_numpy() == pytest.approx(ar["roofline_us"].to_numpy(), rel=1e-12)
        res = simulate(s, make_trace(math.inf, b, parse_dist("128"), parse_dist("128")),
                       sched=SchedulerConfig(max_batched_tokens=128 * b, max_seqs=b))
        assert np.median(res.tpot_ms) == pytest.approx(r.tpot_ms, rel=1e-6), b
