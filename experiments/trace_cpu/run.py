"""CPU self-check of trace-based prediction: real PyTorch models, traced and predicted on this CPU.

For each model (BERT-large and GPT-2 layers, a small Llama, all from ``transformers`` model classes with random
weights built from config objects, plus a small CNN written in torch; ``unet``, not in the default list: a small
UNet with group norms, skips and nearest / bilinear upsampling; ``mixtral``, not in the default list either: a small
Mixtral mixture of experts with top-2 routing), one training step (forward, loss,
backward, AdamW step) is

1. timed untraced: ``--steps`` steps after ``--warmup`` warm-up steps, median = the *measured* step time;
2. traced once (``hybrid.data.traces.record.trace_step``: Chrome trace with shapes + execution trace);
3. predicted from the trace by the engine with a HybridPredictor fitted on the committed CPU profile bundle
   (``datasets/cpu-amd-epyc-1c``: one core, so every process runs ``torch.set_num_threads(1)``), and with the
   roofline on the same catalog;

single process, and as 2-process DDP with gloo (one trace per rank -> one 2-rank graph; target system
``cpu-amd-epyc-1c-gloo``). The bundle was not fitted on these models (held out); nothing here is tuned on the
measured step times.

    python experiments/trace_cpu/run.py [--models bert,gpt2,llama,cnn] [--ddp] [--out results.md] [--json]
    python experiments/trace_cpu/run.py --models unet --steps 5 --out experiments/trace_cpu/unet_results.md
    python experiments/trace_cpu/run.py --models mixtral --ddp --steps 10 --out experiments/trace_cpu/moe_results.md
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "datasets" / "cpu-amd-epyc-1c"

#: model name -> (what, batch, sequence length / image size)
MODELS = {
    "bert": "BERT-large layers (hidden 1024, 16 heads, FFN 4096), 2 of 24 layers, vocab 30522, batch 2 x seq 128",
    "gpt2": "GPT-2 (hidden 768, 12 heads), 2 of 12 layers, vocab 50257, batch 2 x seq 128",
    "llama": "Llama (hidden 512, 8 heads, 4 KV heads, FFN 1376, SwiGLU, RMSNorm, RoPE), 2 layers, vocab 8192, "
             "batch 2 x seq 128",
    "cnn": "CNN (4 conv3x3+BN+ReLU blocks 32-64-128-256 ch, max-pool, linear 10), batch 16 x 3x64x64",
    "unet": "UNet (conv3x3+GroupNorm+SiLU blocks 32-64-128 ch, stride-2 conv down, nearest 2x nn.Upsample + skip "
            "concat up, bilinear 2x output head), batch 4 x 3x64x64, MSE loss",
    "mixtral": "Mixtral MoE (hidden 256, 8 heads, 4 KV heads, 8 experts of FFN 512, top-2 routing, router aux loss), "
               "2 layers, vocab 4096, batch 2 x seq 128",
}
#: image models: (inputs, target) from build(), one loss on the model's output
IMAGE_MODELS = ("cnn", "unet")


def _unet(torch):
    """A small UNet of the kind diffusion and segmentation models use: interpolation, group norm, skips."""
    nn = torch.nn

    def block(c_in: int, c_out: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.GroupNorm(8, c_out), nn.SiLU())

    class UNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.e1, self.e2, self.mid = block(3, 32), block(32, 64), block(64, 128)
            self.d1, self.d2 = nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.Conv2d(64, 64, 3, stride=2, padding=1)
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.u2, self.u1 = block(128 + 64, 64), block(64 + 32, 32)
            self.head = nn.Sequential(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
                                      nn.Conv2d(32, 3, 1))

        def forward(self, x):
            s1 = self.e1(x)
            s2 = self.e2(self.d1(s1))
            m = self.mid(self.d2(s2))
            y = self.u2(torch.cat([self.up(m), s2], dim=1))
            y = self.u1(torch.cat([self.up(y), s1], dim=1))
            return self.head(y)

    return UNet()


def build(name: str, attention: str = "eager", seq: int = 128, attn_dropout: float | None = None):
    """(model, inputs, loss_fn) on the CPU with random weights; ``attention`` is the transformers models'
    ``attn_implementation`` (``eager``: softmax and matmuls as separate ops, ``sdpa``: one fused
    ``scaled_dot_product_attention``), ``seq`` their sequence length (batch 2), ``attn_dropout`` the attention
    dropout instead of the config's (BERT and GPT-2: 0.1, Llama: 0)."""
    import torch

    torch.manual_seed(0)
    if name == "unet":
        model = _unet(torch)
        x, y = torch.randn(4, 3, 64, 64), torch.randn(4, 3, 128, 128)
        return model, (x,), lambda out: torch.nn.functional.mse_loss(out, y)
    if name == "cnn":
        layers, c = [], 3
        for out in (32, 64, 128, 256):
            layers += [torch.nn.Conv2d(c, out, 3, padding=1), torch.nn.BatchNorm2d(out), torch.nn.ReLU(),
                       torch.nn.MaxPool2d(2)]
            c = out
        model = torch.nn.Sequential(*layers, torch.nn.Flatten(), torch.nn.Linear(256 * 4 * 4, 10))
        x, y = torch.randn(16, 3, 64, 64), torch.randint(0, 10, (16,))
        return model, (x,), lambda out: torch.nn.functional.cross_entropy(out, y)
    import transformers as tf

    b, s = 2, seq
    positions = max(512, s)
    drop = {} if attn_dropout is None else {"bert": {"attention_probs_dropout_prob": attn_dropout},
                                            "gpt2": {"attn_pdrop": attn_dropout},
                                            "llama": {"attention_dropout": attn_dropout},
                                            "mixtral": {"attention_dropout": attn_dropout}}.get(name, {})
    if name == "bert":
        cfg = tf.BertConfig(hidden_size=1024, num_attention_heads=16, intermediate_size=4096, num_hidden_layers=2,
                            vocab_size=30522, max_position_embeddings=positions, attn_implementation=attention,
                            **drop)
        model = tf.BertForMaskedLM(cfg)
        vocab = cfg.vocab_size
    elif name == "gpt2":
        cfg = tf.GPT2Config(n_embd=768, n_head=12, n_layer=2, vocab_size=50257, n_positions=max(1024, s),
                            attn_implementation=attention, **drop)
        model = tf.GPT2LMHeadModel(cfg)
        vocab = cfg.vocab_size
    elif name == "llama":
        cfg = tf.LlamaConfig(hidden_size=512, num_attention_heads=8, num_key_value_heads=4, intermediate_size=1376,
                             num_hidden_layers=2, vocab_size=8192, max_position_embeddings=positions,
                             attn_implementation=attention, **drop)
        model = tf.LlamaForCausalLM(cfg)
        vocab = cfg.vocab_size
    elif name == "mixtral":
        cfg = tf.MixtralConfig(hidden_size=256, num_attention_heads=8, num_key_value_heads=4, intermediate_size=512,
                               num_hidden_layers=2, vocab_size=4096, num_local_experts=8, num_experts_per_tok=2,
                               max_position_embeddings=positions, output_router_logits=True,
                               attn_implementation=attention, **drop)
        model = tf.MixtralForCausalLM(cfg)
        vocab = cfg.vocab_size
    else:
        raise SystemExit(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    ids = torch.randint(0, vocab, (b, s))
    return model, (), lambda out: out.loss if hasattr(out, "loss") and out.loss is not None else out[0].mean(), ids


def make_step(name: str, ddp: bool = False, attention: str = "eager", seq: int = 128,
              attn_dropout: float | None = None):
    import torch

    built = build(name, attention, seq, attn_dropout)
    model = built[0]
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    if name in IMAGE_MODELS:
        x = built[1][0]
        loss_fn = built[2]

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x)).backward()
            opt.step()
    else:
        ids = built[3]

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
    return step


def time_and_trace(name: str, out_dir: Path, warmup: int, steps: int, ddp: bool = False,
                   attention: str = "eager", seq: int = 128, attn_dropout: float | None = None) -> dict:
    """Median untraced step time (ms) and the traced step written to ``out_dir``."""
    import torch

    from hybrid.data.traces.record import trace_step

    torch.set_num_threads(1)
    step = make_step(name, ddp, attention, seq, attn_dropout)
    for _ in range(warmup):
        step()
    times, cpu = [], []
    for _ in range(steps):
        if ddp:
            torch.distributed.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    if ddp:
        torch.distributed.barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    with trace_step(out_dir):
        step()
    wall, on_cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"wall_ms": statistics.median(times), "times_ms": times, "cpu_ms": statistics.median(cpu),
            "cpu_times_ms": cpu, "trace_cpu_share": min(1.0, on_cpu / wall)}


def _ddp_worker(rank: int, world: int, port: int, name: str, out_dir: str, warmup: int, steps: int, q) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        res = time_and_trace(name, Path(out_dir), warmup, steps, ddp=True)
        q.put((rank, res))
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ddp(name: str, out_dir: Path, warmup: int, steps: int) -> dict:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_ddp_worker, args=(r, 2, port, name, str(out_dir), warmup, steps, q))
             for r in range(2)]
    for p in procs:
        p.start()
    res = dict(q.get(timeout=1800) for _ in procs)
    for p in procs:
        p.join()
    # the step time of a DDP job: the slower rank's median
    return {"wall_ms": max(r["wall_ms"] for r in res.values()), "cpu_ms": max(r["cpu_ms"] for r in res.values()),
            "times_ms": [r["times_ms"] for _, r in sorted(res.items())],
            "cpu_times_ms": [r["cpu_times_ms"] for _, r in sorted(res.items())],
            "trace_cpu_share": [r["trace_cpu_share"] for _, r in sorted(res.items())]}


def recording_ms(traces) -> float:
    """What recording cost the host of the slowest rank's traced step, as measured when it was recorded (NaN when
    the traces do not say): every recorded event and input at the measured cost."""
    import numpy as np

    from hybrid.data.traces.overhead import input_counts, overhead_of

    costs = []
    for t in traces:
        o = overhead_of(t.meta)
        if o is not None:
            costs.append((t.step_us, float(o.cost_us(len(t.ops), input_counts(t.ops["dims"].to_numpy()).sum(),
                                                      len(t.kernels)))))
    return max(costs)[1] / 1e3 if costs else float(np.nan)


def predict(trace_dir: Path, target: str, models: dict, host_scale: float | list[float] = 1.0) -> dict:
    from hybrid.data.traces import load_traces
    from hybrid.workloads.trace_graph import build_trace_graph, predict_trace

    files = sorted(str(p) for p in trace_dir.glob("*.json"))
    traces = load_traces(files)
    out = {"recording_ms": recording_ms(traces)}
    for label, (model, cat) in models.items():
        it = build_trace_graph(traces, target, cat, same_device=True, host_scale=host_scale)
        p = predict_trace(it, model, model_name=label)
        out[label] = p.summary()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="bert,gpt2,llama,cnn")
    ap.add_argument("--ddp", action="store_true", help="also 2-process DDP (gloo) runs")
    ap.add_argument("--no-single", action="store_true", help="skip the single-process runs")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--bundle", default=str(BUNDLE))
    ap.add_argument("--fresh-profile", action="store_true",
                    help="profile this machine first (`hybrid profile --threads 1`, every family, ~12 min on 2 cores) "
                         "and predict with that bundle instead of --bundle: profile and measured steps from one "
                         "session, as a user calibrates their own machine")
    ap.add_argument("--keep", default=None, help="keep the traces in this directory")
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.md")))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--from-json", default=None, help="re-write results.md from the --json output of a run")
    args = ap.parse_args(argv)
    if args.from_json:
        from hybrid.reports.markdown import write_benchmark_results

        rows = json.loads(Path(args.from_json).read_text())
        write_benchmark_results(args.out, write_report(rows, args, float(rows[0].get("total_seconds", 0.0))))
        return 0

    from hybrid.corrections.predictor import HybridPredictor
    from hybrid.data.bundle import load_bundle
    from hybrid.engine.costs import RooflineCostModel
    from hybrid.reports.markdown import write_benchmark_results

    t_start = time.time()
    bundle = Path(args.bundle).resolve()
    bundle_label = f"`{bundle.relative_to(ROOT) if bundle.is_relative_to(ROOT) else bundle}`"
    if args.fresh_profile:
        from hybrid.data.profiler.runner import ProfileOptions, run_profile

        prof_dir = Path(tempfile.mkdtemp(prefix="trace_cpu_profile_")) / "cpu"
        print(f"profiling this machine into {prof_dir} (one thread, every family) ...", file=sys.stderr)
        t0 = time.time()
        run_profile(ProfileOptions(threads=1, progress=False), prof_dir,
                    command=["hybrid", "profile", "--threads", "1", "-o", str(prof_dir)])
        args.bundle = str(prof_dir)
        bundle_label = (f"a profile of this machine taken at the start of this run (`--fresh-profile`: "
                        f"`hybrid profile --threads 1`, every family, {time.time() - t0:.0f} s)")
    table, cat = load_bundle(args.bundle)
    fitted = HybridPredictor(catalog=cat).fit(table)
    models = {"hybrid": (fitted, cat), "roofline": (RooflineCostModel(cat), cat)}
    names = [m for m in args.models.split(",") if m]
    modes = ([] if args.no_single else ["single"]) + (["ddp2"] if args.ddp else [])
    rows = []
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="trace_cpu_"))
    for name in names:
        for mode in modes:
            d = base / f"{name}-{mode}"
            t0 = time.time()
            if mode == "single":
                meas = time_and_trace(name, d, args.warmup, args.steps)
                target = "cpu-amd-epyc-1c"
            else:
                meas = run_ddp(name, d, args.warmup, args.steps)
                target = "cpu-amd-epyc-1c-gloo"
            preds = predict(d, target, models, meas["trace_cpu_share"])
            h, r = preds["hybrid"], preds["roofline"]
            row = {"model": name, "mode": mode, "measured_ms": meas["cpu_ms"], "wall_ms": meas["wall_ms"],
                   "trace_cpu_share": meas["trace_cpu_share"],
                   "traced_ms": h["measured_ms"], "resim_ms": h["resimulated_measured_ms"],
                   "recording_ms": preds["recording_ms"],
                   "predicted_ms": h["predicted_ms"], "roofline_ms": r["predicted_ms"],
                   "error_pct": (h["predicted_ms"] / meas["cpu_ms"] - 1) * 100,
                   "roofline_error_pct": (r["predicted_ms"] / meas["cpu_ms"] - 1) * 100,
                   "unmodelled_ops": h["unmodelled"]["ops"], "unmodelled_ms": h["unmodelled"]["measured_ms"],
                   "breakdown_ms": h["breakdown_ms"], "breakdown_measured_ms": h.get("breakdown_measured_ms", {}),
                   "times_ms": meas["times_ms"], "cpu_times_ms": meas["cpu_times_ms"],
                   "seconds": time.time() - t0}
            rows.append(row)
            print(f"{name:6s} {mode:6s} measured {row['measured_ms']:9.1f} ms  traced {row['traced_ms']:9.1f}  "
                  f"predicted {row['predicted_ms']:9.1f} ({row['error_pct']:+.1f}%)  roofline "
                  f"{row['roofline_ms']:9.1f} ({row['roofline_error_pct']:+.1f}%)", file=sys.stderr)
    for r in rows:
        r["total_seconds"] = time.time() - t_start
        r["bundle_label"] = bundle_label
    if args.json:
        print(json.dumps(rows, indent=1))
    lines = write_report(rows, args, time.time() - t_start)
    write_benchmark_results(args.out, lines)
    return 0


def write_report(rows: list[dict], args: argparse.Namespace, seconds: float) -> str:
    import numpy as np

    import hybrid

    err = np.array([abs(r["error_pct"]) for r in rows])
    out = ["# Trace-based prediction on this CPU (self-check)", "",
           f"Command: `python experiments/trace_cpu/run.py --models {args.models}"
           f"{' --ddp' if args.ddp else ''}{' --no-single' if args.no_single else ''} --steps {args.steps}"
           f"{' --fresh-profile' if getattr(args, 'fresh_profile', False) else ''}` "
           f"(hybrid {hybrid.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {seconds:.0f} s).",
           "", f"Predictor: HybridPredictor fitted on {(rows or [{}])[0].get('bundle_label', '`datasets/cpu-amd-epyc-1c`')} "
           "(held out: nothing from these models is in it: generic op grids); roofline on the same catalog for "
           "comparison. Measured = median on-core (CPU) time of "
           f"{args.steps} untraced steps (`time.process_time`; the machine was shared, wall times are in the JSON); "
           "traced = the profiled step's wall time (profiler overhead and waiting for the core included); "
           "recording = what recording that step cost its host, at the per-event / per-input cost measured when it "
           "was recorded (`hybrid.data.traces.overhead`), which predictions take off the traced host time; re-sim = "
           "the graph with every node at its traced time (checks the graph, not the cost model). Predictions "
           "deflate the traced host time by the traced step's CPU-time share.", "",
           "| model | mode | measured ms | traced ms | recording ms | traced - recording ms | re-sim ms | predicted ms | "
           "error % | roofline ms | roofline error % | unmodelled ops (ms) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rec = float(r.get("recording_ms", float("nan")))
        out.append(f"| {r['model']} | {r['mode']} | {r['measured_ms']:.1f} | {r['traced_ms']:.1f} | {rec:.1f} | "
                   f"{r['traced_ms'] - rec:.1f} | "
                   f"{r['resim_ms']:.1f} | {r['predicted_ms']:.1f} | {r['error_pct']:+.1f} | {r['roofline_ms']:.1f} | "
                   f"{r['roofline_error_pct']:+.1f} | {r['unmodelled_ops']} ({r['unmodelled_ms']:.2f}) |")
    rec = [(r["traced_ms"] / r["measured_ms"] - 1, (r["traced_ms"] - r["recording_ms"]) / r["measured_ms"] - 1)
           for r in rows if np.isfinite(r.get("recording_ms", np.nan))]
    if rec:
        a = np.array(rec) * 100
        out += ["", f"Traced step against the untraced one (mean signed / mean |difference|): as traced "
                f"{a[:, 0].mean():+.1f}% / {np.abs(a[:, 0]).mean():.1f}%, less the measured recording cost "
                f"{a[:, 1].mean():+.1f}% / {np.abs(a[:, 1]).mean():.1f}% ({len(rec)} runs)."]
    if len(err):
        rerr = np.array([abs(r["roofline_error_pct"]) for r in rows])
        out += ["", f"Roofline: mean |error| {rerr.mean():.1f}%, max {rerr.max():.1f}%."]
        gm = float(np.exp(np.mean(np.log1p(err / 100))) - 1) * 100
        out += ["", f"Mean |error| {err.mean():.1f}%, geomean {gm:.1f}%, max {err.max():.1f}% over {len(rows)} runs "
                f"(target: within 5%: {'met' if err.max() <= 5 else 'MISSED'} for "
                f"{int((err <= 5).sum())}/{len(rows)})."]
    out += ["", "Models: " + "; ".join(f"**{k}**: {v}" for k, v in MODELS.items() if k in args.models), "",
            "Per-family predicted (measured in the trace) ms:", ""]
    for r in rows:
        parts = [f"{k} {v:.1f} ({r['breakdown_measured_ms'].get(k, float('nan')):.1f})"
                 for k, v in r["breakdown_ms"].items() if v >= 0.05]
        out.append(f"- {r['model']} {r['mode']}: " + ", ".join(parts))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
