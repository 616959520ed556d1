"""The NLP benchmark's Switch-Transformer recording: static-shape expert routing on the meta device."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]


def _expert_rows(bench, tmp_path: Path, identical: bool) -> list[tuple[float, float]]:
    from hybrid.data.traces import load_trace
    from hybrid.data.traces.record import trace_step
    from hybrid.hardware.catalog import default_catalog
    from hybrid.workloads.trace_graph import build_trace_graph

    cfg = tf.SwitchTransformersConfig(d_model=64, d_ff=256, d_kv=16, num_heads=4, num_layers=2, num_decoder_layers=2,
                                      num_experts=4, expert_capacity=8, encoder_sparse_step=2, decoder_sparse_step=2,
                                      vocab_size=128, dense_act_fn="relu", feed_forward_proj="relu",
                                      is_gated_act=False, attn_implementation="eager")
    with torch.device("meta"):
        model = tf.SwitchTransformersForConditionalGeneration(cfg).eval()
    ids = torch.ones((2, 16), dtype=torch.long, device="meta")  # batch 2, 16 tokens
    out = tmp_path / ("same" if identical else "uniform")
    with bench.static_switch_routing(identical), trace_step(out, execution_trace=False, device="meta", cuda=False):
        with torch.no_grad():
            model(input_ids=ids, decoder_input_ids=ids)
    ops = build_trace_graph([load_trace(out / "kineto_rank0.json")], "A100-PCIE-40GB", default_catalog(),
                            same_device=False).graph.compile().ops
    up = ops[(ops["op"] == "gemm") & (ops["n"] == 256)]  # MLP up-projections (d_ff = 256)
    return sorted(zip(up["m"], up["k"], strict=True))


def test_switch_experts_trace_with_the_tokens_routing_gives_them(tmp_path, load_experiment):
    # every position identical (NeuSight's all-ones input ids): one expert per sparse layer keeps capacity (8)
    # tokens of each of the 2 sequences -> 16 rows; dense layers run all 2 x 16 = 32 tokens
    assert {m for m, _ in _expert_rows(load_experiment("nlp_e2e"), tmp_path, True)} == {16.0, 32.0}
    # uniform routing of real text: each of the 4 experts gets 16 / 4 = 4 tokens per sequence -> 8 rows
    assert {m for m, _ in _expert_rows(load_experiment("nlp_e2e"), tmp_path, False)} == {8.0, 32.0}
