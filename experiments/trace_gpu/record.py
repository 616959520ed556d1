"""Record GPU traces and measured step times of real PyTorch models (needs a CUDA GPU; no MLflow/XGBoost).

For each model (BERT-large, GPT-2, a Llama and a CNN, built from ``transformers`` config objects with random
weights, sized for one GPU) and each precision (fp32, bf16 autocast), one training step (forward, loss,
backward, AdamW step) is timed untraced (``--steps`` steps after ``--warmup``, CUDA-synchronised, median = the
*measured* step time), then traced once with :func:`hybrid.data.traces.record.trace_step` (Chrome trace with
shapes, CPU + CUDA activity, and an execution trace). Writes ``<out>/<model>-<dtype>/kineto_rank0.json``,
``et_rank0.json`` and ``<out>/steps.json`` (measured times, device, versions).

    PYTHONPATH=. python experiments/trace_gpu/record.py --out traces-gpu [--models bert,gpt2,llama,cnn]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

#: model -> (description, batch, sequence length or image size)
MODELS = {
    "bert": ("BERT-large layers (hidden 1024, 16 heads, FFN 4096), 4 of 24 layers, vocab 30522", 8, 512),
    "gpt2": ("GPT-2 (hidden 768, 12 heads), 6 of 12 layers, vocab 50257", 8, 1024),
    "llama": ("Llama (hidden 2048, 16 heads, 8 KV heads, FFN 5632, SwiGLU, RMSNorm, RoPE), 4 layers, vocab 32000",
              4, 1024),
    "cnn": ("CNN (4 conv3x3+BN+ReLU blocks 64-128-256-512 ch, max-pool, linear 1000)", 64, 128),
}


def make_step(name: str, dtype: str, attention: str = "eager"):
    """One training step of ``name`` in ``dtype``; ``attention``: the transformers models' ``attn_implementation``
    (``eager``, the committed traces; ``sdpa``, fused attention, what current transformers runs by default)."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    dev = torch.device("cuda")
    _, b, s = MODELS[name]
    if name == "cnn":
        layers, c = [], 3
        for out in (64, 128, 256, 512):
            layers += [torch.nn.Conv2d(c, out, 3, padding=1), torch.nn.BatchNorm2d(out), torch.nn.ReLU(),
                       torch.nn.MaxPool2d(2)]
            c = out
        model = torch.nn.Sequential(*layers, torch.nn.Flatten(), torch.nn.Linear(512 * (s // 16) ** 2, 1000))
        x, y = torch.randn(b, 3, s, s, device=dev), torch.randint(0, 1000, (b,), device=dev)

        def loss():
            return torch.nn.functional.cross_entropy(model(x), y)
    else:
        if name == "bert":
            cfg = tf.BertConfig(hidden_size=1024, num_attention_heads=16, intermediate_size=4096,
                                num_hidden_layers=4, vocab_size=30522, max_position_embeddings=512,
                                attn_implementation=attention)
            model = tf.BertForMaskedLM(cfg)
        elif name == "gpt2":
            cfg = tf.GPT2Config(n_embd=768, n_head=12, n_layer=6, vocab_size=50257, n_positions=1024,
                                attn_implementation=attention)
            model = tf.GPT2LMHeadModel(cfg)
        else:
            cfg = tf.LlamaConfig(hidden_size=2048, num_attention_heads=16, num_key_value_heads=8,
                                 intermediate_size=5632, num_hidden_layers=4, vocab_size=32000,
                                 max_position_embeddings=2048, attn_implementation=attention)
            model = tf.LlamaForCausalLM(cfg)
        ids = torch.randint(0, cfg.vocab_size, (b, s), device=dev)

        def loss():
            return model(input_ids=ids, labels=ids).loss
    model.to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        if dtype == "bf16":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = loss()
        else:
            out = loss()
        out.backward()
        opt.step()
    return step


def main(argv: list[str] | None = None) -> int:
    import torch

    from hybrid.data.traces.record import trace_step

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--attention", choices=("eager", "sdpa"), default="eager",
                    help="attn_implementation of the transformers models (sdpa: fused attention kernels)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = Path(args.out)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows = []
    for name in args.models.split(","):
        for dtype in args.dtypes.split(","):
            step = make_step(name, dtype, args.attention)
            label = f"{name}-{dtype}" + ("-sdpa" if args.attention == "sdpa" and name != "cnn" else "")
            for _ in range(args.warmup):
                step()
            torch.cuda.synchronize()
            times = []
            for _ in range(args.steps):
                t0 = time.perf_counter()
                step()
                torch.cuda.synchronize()
                times.append((time.perf_counter() - t0) * 1e3)
            with trace_step(out / label, device=torch.cuda.get_device_name()):
                step()
                torch.cuda.synchronize()
            rows.append({"model": name, "dtype": dtype, "attention": args.attention if name != "cnn" else "",
                         "trace": label, "what": MODELS[name][0], "batch": MODELS[name][1],
                         "seq_or_image": MODELS[name][2], "step_ms": statistics.median(times), "times_ms": times})
            print(f"{name} {dtype}: {rows[-1]['step_ms']:.2f} ms", flush=True)
            del step
            torch.cuda.empty_cache()
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "tf32": False, "steps": rows}
    (out / "steps.json").write_text(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
