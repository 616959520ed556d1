"""Optimus-style case studies: memory per GPU by recomputation mode, and GPT-3 175B across GPU generations.

    python experiments/llm_training/case_studies.py [--out case_studies.md]

1. Memory breakdown of the Megatron GPT 22B / 175B / 530B / 1T configurations of Korthikanti et al. 2022
   (TP 8; PP 1 / 8 / 35 / 64; micro-batch 4 / 1 / 1 / 1) under no, selective (+SP) and full recomputation,
   against the 80 GB A100 line (``memory_breakdown.png``).
2. GPT-3 175B on 1024 GPUs (global batch 1536, and 3072 as the larger-batch variant) on DGX A100 (HDR
   InfiniBand), DGX H100 and DGX B200 (NDR InfiniBand) and GB200 NVL72 (NVLink switch system), each with the
   fastest fitting mapping from ``search`` (bf16 on A100; bf16 and fp8 GEMMs on H100/B200/GB200), broken down
   into compute, communication and other (bubble + optimizer), normalised to the fastest
   (``gpt3_generations.png``). Roofline-only and calibrated predictors side by side.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from run import fit_calibrated  # noqa: E402

from hybrid.corrections.predictor import HybridPredictor  # noqa: E402
from hybrid.data.paths import public_data_dir  # noqa: E402
from hybrid.reports.llm_plots import breakdown_bars, memory_bars  # noqa: E402
from hybrid.reports.markdown import write_benchmark_results  # noqa: E402
from hybrid.workloads.llm.config import TrainingConfig  # noqa: E402
from hybrid.workloads.llm.model import load_model  # noqa: E402
from hybrid.workloads.llm.train import (  # noqa: E402
    mapping_config,
    memory_only,
    predict_training,
    search,
    search_base,
)

HERE = Path(__file__).parent
MEGATRON = {"megatron-22b": (8, 1, 4, 8), "megatron-175b": (8, 8, 1, 64), "megatron-530b": (8, 35, 1, 280),
            "megatron-1t": (8, 64, 1, 512)}  # tp, pp, micro batch, GPUs (DP = 1), as in Korthikanti Table 3
SYSTEMS = [("A100 HDR", "DGX-A100", "bf16", "Sophia"), ("H100 NDR", "DGX-H100", "bf16", "xxrjun-H100-NDR"),
           ("H100 NDR fp8", "DGX-H100", "fp8", "xxrjun-H100-NDR"), ("B200 NDR", "DGX-B200", "bf16", None),
           ("B200 NDR fp8", "DGX-B200", "fp8", None), ("GB200 NVL72 fp8", "GB200-NVL72", "fp8", None)]


def memory_study(p) -> None:
    p("## 1. Memory per GPU by recomputation mode (Megatron GPT, A100 80 GB)\n")
    p("Mapping as in Korthikanti et al. 2022 Table 3 (DP = 1, seq 2048, fp16, unfused attention with dropout); "
      "`none` and `selective` with sequence parallelism, `full` without (as the paper's baseline).\n")
    p("| model | recompute | weights+grads+optimizer GiB | activations GiB | logits GiB | total GiB | fits 80 GB |")
    p("|---|---|---|---|---|---|---|")
    rows = {}
    for name, (tp, pp, mb, gpus) in MEGATRON.items():
        model = load_model(name)
        for rc in ("none", "selective", "full"):
            cfg = TrainingConfig(gpus=gpus, global_batch=gpus * mb, micro_batch=mb, tp=tp, pp=pp, sp=rc != "full",
                                 recompute=rc, dtype="fp16", flash_attention=False)
            mem, _ = memory_only(model, cfg, "DGX-A100")
            r = mem.row(0)
            rows[f"{name.split('-')[1].upper()} {rc}"] = r
            states = r["weights"] + r["gradients"] + r["optimizer"]
            p(f"| {name} | {rc} | {states:.1f} | {r['activations']:.1f} | {r['logits']:.1f} | {r['total']:.1f} | "
              f"{'yes' if mem.fits[0] else 'no'} |")
    memory_bars(rows, 80 * 1e9 / 2**30, HERE / "memory_breakdown.png",
                title="Memory per GPU, Megatron GPT (TP 8), A100 80 GB line")
    p("\nPlot: `memory_breakdown.png` (dashed line = 80 GB = 74.5 GiB).\n")


def generations_study(p, cal) -> None:
    p("## 2. GPT-3 175B across GPU generations (1024 GPUs)\n")
    model = load_model("gpt3-175b")
    out = {}
    p("| system | batch | predictor | mapping (tp/pp/dp/mb/vp, recompute, SP, dist-opt) | iteration s | tokens/s/GPU | "
      "MFU % | compute / comm / other s |")
    p("|---|---|---|---|---|---|---|---|")
    for batch in (1536, 3072):
        for label, system, dtype, comm in SYSTEMS:
            for pname, pred in (("roofline", HybridPredictor.roofline_only()), ("calibrated", cal)):
                # Megatron-LM (the Optimus setting) casts fp8 weights once per iteration
                base = search_base(1024, batch, dtype=dtype, dropout=False, fp8_weight_cast="step")
                best = search(model, base, system, pred, top=1, engine_top=0,
                              comm_system=comm if pname == "calibrated" else None).iloc[0]
                cfg = mapping_config(base, best)
                res = predict_training(model, cfg, system, pred, comm_system=comm if pname == "calibrated" else None)
                b = res.breakdown_s
                compute = b["compute"]
                commt = b["tp_comm"] + b["ep_comm"] + b["cp_comm"] + b["fsdp_comm"] + b["dp_comm"] + b["embedding_sync"]
                other = b["pipeline_bubble"] + b["optimizer"]
                mapping = (f"{cfg.tp}/{cfg.pp}/{cfg.dp}/{cfg.micro_batch}/{cfg.vp}, {cfg.recompute}, "
                           f"{'SP' if cfg.sp else '-'}, {'DO' if cfg.distributed_optimizer else '-'}")
                p(f"| {label} | {batch} | {pname} | {mapping} | {res.iteration_s:.2f} | "
                  f"{res.tokens_per_s / 1024:.0f} | {res.mfu * 100:.1f} | {compute:.2f} / {commt:.2f} / {other:.2f} |")
                if pname == "calibrated":
                    # time for the same number of tokens (batch 3072 = two iterations of 1536)
                    scale = 1536 / batch
                    out[f"{label} B{batch}"] = {"compute": compute * scale, "communication": commt * scale,
                                                "other (bubble+optimizer)": other * scale}
    breakdown_bars(out, HERE / "gpt3_generations.png",
                   title="GPT-3 175B, 1024 GPUs: time per 1536 x 2048 tokens, normalised to the fastest")
    totals = {k: sum(v.values()) for k, v in out.items()}
    fastest = min(totals.values())
    a100 = totals["A100 HDR B1536"]
    p("\nNormalised to the fastest (calibrated, time per 1536 x 2048 tokens): " + ", ".join(
        f"{k} {v / fastest:.2f}" for k, v in totals.items()) + ".  ")
    p(f"A100 (bf16, batch 1536) / fastest: **{a100 / fastest:.1f}x**. Plot: `gpt3_generations.png`.\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default=str(HERE / "case_studies.md"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    cal, _ = fit_calibrated(public_data_dir(args.data_dir), 30000, 0)
    o = io.StringIO()

    def p(*a: object) -> None:
        print(*a, file=o)

    p("# Optimus case studies with the LLM training model\n")
    command = "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])
    p(f"Command: `{command}`  ")
    memory_study(p)
    generations_study(p, cal)
    p(f"Run time {time.perf_counter() - t0:.0f} s (shared 2-core machine).")
    text = o.getvalue()
    print(text)
    write_benchmark_results(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
