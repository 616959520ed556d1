"""Trace coverage across model architectures: tiny ``transformers`` models traced and predicted on this CPU.

Issue 10 asks that a user can predict *any* PyTorch model from its traces. ``experiments/trace_cpu`` checks the
accuracy on four models at useful sizes; this benchmark checks the breadth: one training step (forward, loss,
backward) of each of 43 architectures from the ``transformers`` model classes (random weights from config objects,
no downloads: encoders, decoders, encoder-decoders, sparse and linear attention, vision and speech models, mixture
of experts, a state-space model), each one layer or stage, hidden size 16-64, batch 2, is

1. recorded with :func:`hybrid.data.traces.record.record_step` (``--warmup`` warm-up steps, ``--timed`` untraced
   steps whose median is the *untraced* step time, then one traced step; one intra-op thread);
2. predicted on this CPU from its trace (``hybrid trace predict`` with a HybridPredictor fitted on the committed
   profile bundle ``datasets/cpu-amd-epyc-1c``; nothing here is fitted on these models).

The report lists, per model, the ops nobody maps (costed at their traced time here, at 0 on any other device) and
the predicted against the untraced step time. These models are so small that the step is host work (Python, the
dispatcher, autograd): the prediction is mostly the traced host time less what recording cost, which is the
figure this benchmark shows to be weak; ``experiments/trace_cpu`` is the accuracy benchmark.

    python experiments/trace_zoo/run.py [--models t5,vit,...] [--out results.md] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "datasets" / "cpu-amd-epyc-1c"
B, S = 2, 32  # batch, sequence length


def _lm(tf: Any, torch: Any, cfg: str, cls: str, seq: int = S, **kw: Any) -> Callable[[], None]:
    model = getattr(tf, cls)(getattr(tf, cfg)(**kw))
    ids = torch.randint(0, 100, (B, seq))
    return lambda: model(input_ids=ids, labels=ids).loss.backward()


def _image(tf: Any, torch: Any, cfg: str, cls: str, size: int = 32, **kw: Any) -> Callable[[], None]:
    model = getattr(tf, cls)(getattr(tf, cfg)(**kw))
    x, y = torch.randn(B, 3, size, size), torch.randint(0, 10, (B,))
    return lambda: model(pixel_values=x, labels=y).loss.backward()


def _seq2seq(tf: Any, torch: Any, cfg: str, cls: str, **kw: Any) -> Callable[[], None]:
    model = getattr(tf, cls)(getattr(tf, cfg)(**kw))
    ids = torch.randint(3, 100, (B, S))
    return lambda: model(input_ids=ids, labels=ids).loss.backward()


def _whisper(tf: Any, torch: Any) -> Callable[[], None]:
    cfg = tf.WhisperConfig(vocab_size=128, d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16,
                           max_source_positions=32, max_target_positions=32, pad_token_id=0, decoder_start_token_id=1)
    model = tf.WhisperForConditionalGeneration(cfg)
    x, ids = torch.randn(B, 16, 64), torch.randint(3, 100, (B, 16))
    return lambda: model(input_features=x, labels=ids).loss.backward()


def _ctc_audio(tf: Any, torch: Any, cfg: str, cls: str) -> Callable[[], None]:
    """A speech encoder on raw audio (conv feature encoder, CTC head and loss): wav2vec 2.0, HuBERT."""
    model = getattr(tf, cls)(getattr(tf, cfg)(
        vocab_size=32, hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=128,
        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4))
    x, ids = torch.randn(B, 4000), torch.randint(1, 30, (B, 8))
    return lambda: model(input_values=x, labels=ids).loss.backward()


def _clip(tf: Any, torch: Any) -> Callable[[], None]:
    cfg = tf.CLIPConfig(text_config={"vocab_size": 128, "hidden_size": 64, "num_hidden_layers": 1,
                                     "num_attention_heads": 4, "intermediate_size": 128,
                                     "max_position_embeddings": 32},
                        vision_config={"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
                                       "intermediate_size": 128, "image_size": 32, "patch_size": 8})
    model = tf.CLIPModel(cfg)
    ids, x = torch.randint(0, 100, (B, 16)), torch.randn(B, 3, 32, 32)
    return lambda: model(input_ids=ids, pixel_values=x, return_loss=True).loss.backward()


def _segformer(tf: Any, torch: Any) -> Callable[[], None]:
    cfg = tf.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                             patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                             decoder_hidden_size=32, num_labels=5)
    model = tf.SegformerForSemanticSegmentation(cfg)
    x, y = torch.randn(B, 3, 64, 64), torch.randint(0, 5, (B, 64, 64))
    return lambda: model(pixel_values=x, labels=y).loss.backward()


def _classify(tf: Any, torch: Any, cfg: str, cls: str, seq: int = S, **kw: Any) -> Callable[[], None]:
    model = getattr(tf, cls)(getattr(tf, cfg)(**kw))
    ids, y = torch.randint(0, 100, (B, seq)), torch.randint(0, 2, (B,))
    return lambda: model(input_ids=ids, labels=y).loss.backward()


SMALL = {"vocab_size": 128, "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
         "intermediate_size": 128, "max_position_embeddings": 64}

#: name -> (what, builder(transformers, torch) -> step)
MODELS: dict[str, tuple[str, Callable[[Any, Any], Callable[[], None]]]] = {
    "bart": ("BART encoder-decoder", lambda tf, t: _seq2seq(
        tf, t, "BartConfig", "BartForConditionalGeneration", vocab_size=128, d_model=64, encoder_layers=1,
        decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_position_embeddings=64)),
    "t5": ("T5 (relative position buckets)", lambda tf, t: _seq2seq(
        tf, t, "T5Config", "T5ForConditionalGeneration", vocab_size=128, d_model=64, d_kv=16, d_ff=128,
        num_layers=1, num_heads=4, decoder_start_token_id=0, pad_token_id=0)),
    "roberta": ("RoBERTa masked LM", lambda tf, t: _lm(tf, t, "RobertaConfig", "RobertaForMaskedLM", **SMALL)),
    "deberta": ("DeBERTa-v2 (disentangled attention)",
                lambda tf, t: _lm(tf, t, "DebertaV2Config", "DebertaV2ForMaskedLM", **SMALL)),
    "xlnet": ("XLNet (two-stream relative attention)", lambda tf, t: _lm(
        tf, t, "XLNetConfig", "XLNetLMHeadModel", vocab_size=128, d_model=64, n_layer=1, n_head=4, d_inner=128)),
    "gptneox": ("GPT-NeoX (partial rotary)", lambda tf, t: _lm(tf, t, "GPTNeoXConfig", "GPTNeoXForCausalLM",
                                                              **SMALL)),
    "bigcode": ("GPT-BigCode (multi-query)", lambda tf, t: _lm(
        tf, t, "GPTBigCodeConfig", "GPTBigCodeForCausalLM", vocab_size=128, n_embd=64, n_layer=1, n_head=4,
        n_positions=64)),
    "bloom": ("BLOOM (ALiBi)", lambda tf, t: _lm(tf, t, "BloomConfig", "BloomForCausalLM", vocab_size=128,
                                                hidden_size=64, n_layer=1, n_head=4)),
    "falcon": ("Falcon (parallel attention/MLP)", lambda tf, t: _lm(
        tf, t, "FalconConfig", "FalconForCausalLM", vocab_size=128, hidden_size=64, num_hidden_layers=1,
        num_attention_heads=4)),
    "phi": ("Phi (partial rotary, parallel block)", lambda tf, t: _lm(tf, t, "PhiConfig", "PhiForCausalLM",
                                                                      **SMALL)),
    "gemma": ("Gemma (GQA, GeGLU)", lambda tf, t: _lm(tf, t, "GemmaConfig", "GemmaForCausalLM",
                                                      num_key_value_heads=2, head_dim=16, **SMALL)),
    "mistral": ("Mistral (GQA, sliding window)", lambda tf, t: _lm(tf, t, "MistralConfig", "MistralForCausalLM",
                                                                    num_key_value_heads=2, **SMALL)),
    "qwen2moe": ("Qwen2-MoE (top-2 of 4 experts + shared expert)", lambda tf, t: _lm(
        tf, t, "Qwen2MoeConfig", "Qwen2MoeForCausalLM", num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=64, shared_expert_intermediate_size=64, **SMALL)),
    "mamba": ("Mamba (selective state space, eager scan)", lambda tf, t: _lm(
        tf, t, "MambaConfig", "MambaForCausalLM", vocab_size=128, hidden_size=64, num_hidden_layers=1,
        state_size=8)),
    "vit": ("ViT", lambda tf, t: _image(tf, t, "ViTConfig", "ViTForImageClassification", hidden_size=64,
                                       num_hidden_layers=1, num_attention_heads=4, intermediate_size=128,
                                       image_size=32, patch_size=8, num_labels=10)),
    "dinov2": ("DINOv2 (interpolated position embeddings)", lambda tf, t: _image(
        tf, t, "Dinov2Config", "Dinov2ForImageClassification", hidden_size=64, num_hidden_layers=1,
        num_attention_heads=4, image_size=32, patch_size=8, num_labels=10)),
    "swin": ("Swin (shifted windows)", lambda tf, t: _image(
        tf, t, "SwinConfig", "SwinForImageClassification", image_size=32, patch_size=4, embed_dim=16,
        depths=[1, 1], num_heads=[2, 2], window_size=4, num_labels=10)),
    "convnext": ("ConvNeXt (depthwise 7x7, layer norm)", lambda tf, t: _image(
        tf, t, "ConvNextConfig", "ConvNextForImageClassification", hidden_sizes=[16, 32], depths=[1, 1],
        num_stages=2, num_labels=10, image_size=32)),
    "mobilevit": ("MobileViT (unfold/fold patches)", lambda tf, t: _image(
        tf, t, "MobileViTConfig", "MobileViTForImageClassification", image_size=32, hidden_sizes=[32, 48, 64],
        neck_hidden_sizes=[8, 16, 24, 32, 48, 64, 128], num_labels=10)),
    "segformer": ("SegFormer (bilinear upsampling head, 64x64)", _segformer),
    "clip": ("CLIP (contrastive text + vision)", _clip),
    "whisper": ("Whisper (conv front end, encoder-decoder)", _whisper),
    "wav2vec2": ("wav2vec 2.0 (conv feature encoder, CTC loss)",
                 lambda tf, t: _ctc_audio(tf, t, "Wav2Vec2Config", "Wav2Vec2ForCTC")),
    "fnet": ("FNet (Fourier token mixing)", lambda tf, t: _classify(
        tf, t, "FNetConfig", "FNetForSequenceClassification", vocab_size=128, hidden_size=64, num_hidden_layers=1,
        intermediate_size=128, max_position_embeddings=64)),
    "convbert": ("ConvBERT (span-based dynamic convolution, unfold)", lambda tf, t: _lm(
        tf, t, "ConvBertConfig", "ConvBertForMaskedLM", **SMALL)),
    "funnel": ("Funnel Transformer (pooled sequence)", lambda tf, t: _classify(
        tf, t, "FunnelConfig", "FunnelForSequenceClassification", vocab_size=128, d_model=64, n_head=4, d_head=16,
        d_inner=128, block_sizes=[1, 1], num_decoder_layers=1)),
    "longformer": ("Longformer (sliding-window attention, seq 64)", lambda tf, t: _lm(
        tf, t, "LongformerConfig", "LongformerForMaskedLM", seq=64, attention_window=16, vocab_size=128,
        hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=128,
        max_position_embeddings=130)),
    "led": ("LED (Longformer encoder-decoder, seq 64)", lambda tf, t: _lm(
        tf, t, "LEDConfig", "LEDForConditionalGeneration", seq=64, vocab_size=128, d_model=64, encoder_layers=1,
        decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, attention_window=16, max_encoder_position_embeddings=128,
        max_decoder_position_embeddings=128)),
    "bigbird": ("BigBird (block-sparse attention, seq 256)", lambda tf, t: _lm(
        tf, t, "BigBirdConfig", "BigBirdForMaskedLM", seq=256, attention_type="block_sparse", block_size=16,
        num_random_blocks=2, vocab_size=128, hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=512)),
    "reformer": ("Reformer (LSH + local attention, reversible, seq 64)", lambda tf, t: _lm(
        tf, t, "ReformerConfig", "ReformerModelWithLMHead", seq=64, vocab_size=128, hidden_size=64,
        num_attention_heads=2, attention_head_size=16, feed_forward_size=128, attn_layers=["lsh", "local"],
        axial_pos_shape=[8, 8], axial_pos_embds_dim=[32, 32], max_position_embeddings=64, is_decoder=True,
        lsh_attn_chunk_length=16, local_attn_chunk_length=16, num_buckets=4, num_hashes=1)),
    "nystromformer": ("Nystromformer (landmark attention, seq 64)", lambda tf, t: _lm(
        tf, t, "NystromformerConfig", "NystromformerForMaskedLM", seq=64, num_landmarks=8, segment_means_seq_len=64,
        **{**SMALL, "max_position_embeddings": 128})),
    "squeezebert": ("SqueezeBERT (grouped 1-D convolutions)", lambda tf, t: _lm(
        tf, t, "SqueezeBertConfig", "SqueezeBertForMaskedLM", vocab_size=128, hidden_size=64, num_hidden_layers=1,
        num_attention_heads=4, intermediate_size=128, embedding_size=64, max_position_embeddings=64)),
    "albert": ("ALBERT (factorised embeddings)", lambda tf, t: _lm(tf, t, "AlbertConfig", "AlbertForMaskedLM",
                                                                   embedding_size=32, **SMALL)),
    "electra": ("ELECTRA generator", lambda tf, t: _lm(tf, t, "ElectraConfig", "ElectraForMaskedLM",
                                                       embedding_size=32, **SMALL)),
    "mpnet": ("MPNet (relative position buckets)", lambda tf, t: _lm(tf, t, "MPNetConfig", "MPNetForMaskedLM",
                                                                     **SMALL)),
    "deit": ("DeiT", lambda tf, t: _image(tf, t, "DeiTConfig", "DeiTForImageClassification", hidden_size=64,
                                         num_hidden_layers=1, num_attention_heads=4, intermediate_size=128,
                                         image_size=32, patch_size=8, num_labels=10)),
    "beit": ("BEiT (relative position bias)", lambda tf, t: _image(
        tf, t, "BeitConfig", "BeitForImageClassification", hidden_size=64, num_hidden_layers=1,
        num_attention_heads=4, intermediate_size=128, image_size=32, patch_size=8, num_labels=10,
        use_relative_position_bias=True)),
    "levit": ("LeViT (attention biases, 64x64)", lambda tf, t: _image(
        tf, t, "LevitConfig", "LevitForImageClassification", size=64, image_size=64, hidden_sizes=[32, 48, 64],
        num_attention_heads=[1, 2, 2], depths=[1, 1, 1], key_dim=[8, 8, 8], num_labels=10)),
    "poolformer": ("PoolFormer (average-pool token mixing)", lambda tf, t: _image(
        tf, t, "PoolFormerConfig", "PoolFormerForImageClassification", hidden_sizes=[16, 32, 48, 64],
        depths=[1, 1, 1, 1], num_labels=10)),
    "resnet": ("ResNet (batch norm)", lambda tf, t: _image(
        tf, t, "ResNetConfig", "ResNetForImageClassification", hidden_sizes=[16, 32], depths=[1, 1],
        embedding_size=16, num_labels=10)),
    "regnet": ("RegNet (grouped convolutions, squeeze-excitation)", lambda tf, t: _image(
        tf, t, "RegNetConfig", "RegNetForImageClassification", hidden_sizes=[16, 32], depths=[1, 1],
        embedding_size=16, groups_width=8, num_labels=10)),
    "mobilenetv2": ("MobileNetV2 (depthwise separable)", lambda tf, t: _image(
        tf, t, "MobileNetV2Config", "MobileNetV2ForImageClassification", depth_multiplier=0.35, image_size=32,
        num_labels=10)),
    "hubert": ("HuBERT (conv feature encoder, CTC loss)",
               lambda tf, t: _ctc_audio(tf, t, "HubertConfig", "HubertForCTC")),
}


def run_model(name: str, out_dir: Path, warmup: int, timed: int, model: Any, catalog: Any) -> dict[str, Any]:
    """Record one step of ``name`` into ``out_dir`` and predict it on this CPU with ``model`` (fitted once)."""
    import torch
    import transformers as tf

    from hybrid.data.traces import load_traces
    from hybrid.data.traces.record import record_step
    from hybrid.workloads.trace_graph import build_trace_graph, predict_trace

    torch.manual_seed(0)
    step = MODELS[name][1](tf, torch)
    t0 = time.time()
    record_step(step, out_dir, warmup=warmup, timed=timed)
    record_s = time.time() - t0
    traces = load_traces(sorted(str(p) for p in out_dir.glob("*.json")))
    s = predict_trace(build_trace_graph(traces, "cpu-amd-epyc-1c", catalog, same_device=True), model,
                      model_name="hybrid").summary()
    bd = s.get("breakdown_ms", {})
    host = bd.get("host gaps", 0.0) + bd.get("view/host ops", 0.0)
    unm = s["unmodelled"]
    return {"model": name, "what": MODELS[name][0], "nodes": s["nodes"], "traced_ms": s.get("measured_ms"),
            "untraced_ms": s.get("untraced_ms"), "predicted_ms": s["predicted_ms"],
            "error_pct": s.get("untraced_error_pct"), "host_share": host / s["predicted_ms"],
            "unmodelled_ops": unm["ops"], "unmodelled": [u["name"] for u in unm["by_name"]],
            "record_s": record_s}


def write_report(rows: list[dict[str, Any]], args: argparse.Namespace, seconds: float) -> str:
    ok = [r for r in rows if "error" not in r]
    errs = [abs(r["error_pct"]) for r in ok if r.get("error_pct") is not None]
    clean = sum(1 for r in ok if r["unmodelled_ops"] == 0)
    lines = [
        "# Trace coverage across model architectures (CPU)", "",
        f"Command: `python experiments/trace_zoo/run.py --warmup {args.warmup} --timed {args.timed}` "
        f"({seconds:.0f} s on the shared 2-core VM; transformers {_version('transformers')}, "
        f"torch {_version('torch')}).", "",
        "One training step (forward, loss, backward) of each model, one layer or stage, batch 2, random weights, "
        "one intra-op thread; predicted on this CPU by a HybridPredictor fitted on `datasets/cpu-amd-epyc-1c` "
        "(nothing fitted on these models). *Untraced* = median of the untraced steps; *traced* = the one recorded "
        "step; *host share* = host gaps + view/host ops over the prediction. *Unmodelled* = ops nobody maps "
        "(their traced time here, 0 on another device).", "",
        f"**Coverage: {clean} of {len(ok)} architectures trace with no unmodelled op**"
        + (f"; failed to build or record: {', '.join(r['model'] for r in rows if 'error' in r)}" if len(ok) < len(rows)
           else "") + ".", "",
        "| model | architecture | units | untraced ms | traced ms | predicted ms | error % | host share | "
        "unmodelled ops |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {MODELS[r['model']][0]} | failed: {r['error']} | | | | | | |")
            continue
        unm = ", ".join(f"`{n}`" for n in r["unmodelled"]) or "none"
        lines.append(f"| {r['model']} | {r['what']} | {r['nodes']} | {r['untraced_ms']:.2f} | {r['traced_ms']:.2f} | "
                     f"{r['predicted_ms']:.2f} | {r['error_pct']:+.1f} | {r['host_share']:.0%} | {unm} |")
    if errs:
        lines += ["", f"Step time, predicted against untraced: median |error| {statistics.median(errs):.1f}%, "
                      f"geomean {_geomean(errs):.1f}%, {sum(e <= 10 for e in errs)} of {len(errs)} within 10% "
                      "(host-bound steps: no accuracy target here; see `experiments/trace_cpu`)."]
    return "\n".join(lines) + "\n"


def _geomean(errs: list[float]) -> float:
    import math

    return math.exp(sum(math.log(max(e, 1e-3)) for e in errs) / len(errs))


def _version(pkg: str) -> str:
    from importlib.metadata import version

    return version(pkg)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timed", type=int, default=5)
    ap.add_argument("--bundle", default=str(BUNDLE))
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.md")))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {', '.join(MODELS)}")
    import torch

    from hybrid.corrections.predictor import HybridPredictor
    from hybrid.data.bundle import load_bundle
    from hybrid.reports.markdown import write_benchmark_results

    torch.set_num_threads(1)
    t0 = time.time()
    table, catalog = load_bundle(args.bundle)
    model = HybridPredictor(catalog=catalog).fit(table)
    rows = []
    with tempfile.TemporaryDirectory(prefix="trace_zoo_") as tmp:
        for i, name in enumerate(names, 1):
            print(f"[{i}/{len(names)}] {name} ...", file=sys.stderr, flush=True)
            try:
                rows.append(run_model(name, Path(tmp) / name, args.warmup, args.timed, model, catalog))
            except Exception as exc:  # one architecture that no longer builds must not hide the others
                rows.append({"model": name, "error": f"{type(exc).__name__}: {exc}"[:200]})
    seconds = time.time() - t0
    if args.json:
        print(json.dumps(rows, indent=1))
    write_benchmark_results(args.out, write_report(rows, args, seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
