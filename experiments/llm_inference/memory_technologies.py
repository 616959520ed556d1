"""Optimus inference case study: LLM inference latency across DRAM technologies at fixed compute, and the
compute- vs memory-boundedness of prefill and decode ops across GPU systems.

    python experiments/llm_inference/memory_technologies.py [--out-dir experiments/llm_inference]

One GPU's compute (H100-SXM: 989 TFLOP/s bf16/fp16 dense, 8-way NVLink node) is paired with four memory
technologies (bandwidth and capacity per GPU, below); Llama-2-70B and GPT-3 175B are served with tensor
parallelism 8, FP16, at batch 1 (latency-bound chat) and batch 64, prompt 2048, 256 output tokens. The roofline
cost model is used (no calibrated model covers these hypothetical parts). Writes ``memory_technologies.md``,
``memory_technologies.png`` and ``roofline_gpus.png``.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.hardware.catalog import default_catalog
from hybrid.reports.markdown import write_benchmark_results
from hybrid.reports.plots import new_figure, save_png
from hybrid.reports.roofline_plot import op_roofline
from hybrid.workloads.llm.inference import boundedness, make_setup, predict_static

#: memory technology -> (GB/s per GPU, GiB per GPU, where the figure comes from)
MEMORY = {
    "HBM2e": (2039, 80, "A100-SXM4-80GB: 5 stacks HBM2e, 2039 GB/s"),
    "HBM3": (3350, 80, "H100-SXM: 5 stacks HBM3, 3.35 TB/s"),
    "HBM3e": (4800, 141, "H200: 6 stacks HBM3e, 4.8 TB/s, 141 GB"),
    "HBM4": (13000, 288, "NVIDIA Rubin announcement (GTC 2025): 288 GB HBM4, about 13 TB/s per GPU"),
}
CASES = [("llama2-70b", 1), ("llama2-70b", 64), ("gpt3-175b", 1), ("gpt3-175b", 64)]
INPUT, OUTPUT, TP = 2048, 256, 8


def variants():
    cat = default_catalog()
    base = cat.device("H100-SXM")
    devs = {}
    for tech, (bw, gib, _) in MEMORY.items():
        d = replace(base, key=f"H100-compute-{tech}", mem_bw=bw * 1e9, mem_capacity=gib * 2**30, aliases=(),
                    notes=f"what-if: H100-SXM compute with {tech}")
        cat = cat.with_device(d)
        devs[tech] = d.key
    return cat, devs


def study() -> pd.DataFrame:
    cat, devs = variants()
    rows = []
    for model, batch in CASES:
        for tech, key in devs.items():
            s = make_setup(model, key, "DGX-H100", tp=TP, catalog=cat)
            r = predict_static(s, batch, INPUT, OUTPUT, check_memory=False)
            rows.append({"model": model, "batch": batch, "memory": tech, "bw_gbps": MEMORY[tech][0],
                         "ttft_ms": r.ttft_ms, "tpot_ms": r.tpot_ms, "latency_ms": r.latency_ms,
                         "tok_s_gpu": r.output_tokens_per_s_per_gpu, "fits": r.memory.fits,
                         "max_batch": r.memory.max_batch})
    df = pd.DataFrame(rows)
    # elasticity of each latency to bandwidth between neighbouring technologies: -dlog(t)/dlog(bw)
    for c in ("ttft_ms", "tpot_ms", "latency_ms"):
        g = df.groupby(["model", "batch"])
        df[f"{c}_elasticity"] = -(np.log(g[c].shift(0)) - np.log(g[c].shift(1))) / (
            np.log(g["bw_gbps"].shift(0)) - np.log(g["bw_gbps"].shift(1)))
    return df


def plot_latency(df: pd.DataFrame):
    fig = new_figure(10, 3.6)
    for i, (model, batch) in enumerate(CASES):
        ax = fig.add_subplot(1, len(CASES), i + 1)
        sub = df[(df.model == model) & (df.batch == batch)]
        x = np.arange(len(sub))
        pre = sub["ttft_ms"].to_numpy() / 1e3
        dec = (sub["latency_ms"] - sub["ttft_ms"]).to_numpy() / 1e3
        ax.bar(x, pre, color="#1f77b4", label="prefill (TTFT)")
        ax.bar(x, dec, bottom=pre, color="#d62728", label="decode")
        ax.set_xticks(x, sub["memory"], fontsize=7)
        ax.set_title(f"{model}, batch {batch}", fontsize=8)
        ax.set_ylabel("request latency (s)" if i == 0 else "", fontsize=8)
        ax.tick_params(labelsize=7)
        if i == 0:
            ax.legend(fontsize=7)
    fig.suptitle(f"H100 compute, TP{TP}, prompt {INPUT}, {OUTPUT} output tokens: latency vs memory technology",
                 fontsize=9)
    return fig


def roofline_figure():
    cat = default_catalog()
    pts = []
    devices = [cat.device(k) for k in ("A100-SXM4-80GB", "H100-SXM", "H200", "B200")]
    for d in devices:
        s = make_setup("llama2-70b", d.key, tp=TP)
        r = predict_static(s, 16, INPUT, OUTPUT, check_memory=False)
        pts.append(boundedness(r).assign(device=d.key))
    points = pd.concat(pts, ignore_index=True)
    points = points[points["name"].isin(["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj",
                                         "attention", "lm_head"])]
    return op_roofline(points, devices, "fp16", title=f"llama2-70b TP{TP}, batch 16: prefill GEMMs vs decode GEMVs "
                       "across GPU generations"), points


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", default=str(Path(__file__).parent))
    args = ap.parse_args()
    out = Path(args.out_dir)
    df = study()
    save_png(plot_latency(df), out / "memory_technologies.png")
    fig, points = roofline_figure()
    save_png(fig, out / "roofline_gpus.png")
    lines = ["# Optimus inference case study: memory technologies at fixed compute", "",
             "Command: `python experiments/llm_inference/memory_technologies.py` (roofline cost model; no data).", "",
             f"H100-SXM compute (989 TFLOP/s fp16 dense) and NVLink node, TP{TP}, FP16 weights and KV cache, prompt "
             f"{INPUT}, {OUTPUT} output tokens, static batch. Memory per GPU:", ""]
    lines += [f"- {t}: {bw} GB/s, {gib} GB ({src})" for t, (bw, gib, src) in MEMORY.items()]
    lines += ["", "| model | batch | memory | GB/s | TTFT ms | TPOT ms | latency ms | tok/s/GPU | max batch | "
              "TTFT elasticity | TPOT elasticity |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in df.iterrows():
        el = lambda v: "" if not np.isfinite(v) else f"{v:.2f}"  # noqa: E731
        lines.append(f"| {r.model} | {r.batch} | {r.memory} | {r.bw_gbps} | {r.ttft_ms:.1f} | {r.tpot_ms:.2f} | "
                     f"{r.latency_ms:.0f} | {r.tok_s_gpu:.0f} | {r.max_batch}{'' if r.fits else ' (no fit)'} | "
                     f"{el(r.ttft_ms_elasticity)} | {el(r.tpot_ms_elasticity)} |")
    first, last = df.groupby(["model", "batch"]).first(), df.groupby(["model", "batch"]).last()
    lines += ["", "Elasticity = -d log(time) / d log(bandwidth) from the previous technology (1 = the time scales "
              "with 1/bandwidth, 0 = it does not move).", "",
              "| model | batch | TTFT HBM2e -> HBM4 | TPOT HBM2e -> HBM4 | request latency HBM2e -> HBM4 |",
              "|---|---|---|---|---|"]
    for k in first.index:
        lines.append(f"| {k[0]} | {k[1]} | {first.loc[k, 'ttft_ms'] / last.loc[k, 'ttft_ms']:.2f}x faster | "
                     f"{first.loc[k, 'tpot_ms'] / last.loc[k, 'tpot_ms']:.2f}x faster | "
                     f"{first.loc[k, 'latency_ms'] / last.loc[k, 'latency_ms']:.2f}x faster |")
    lines += ["", "Per-op boundedness of llama2-70b (TP8, batch 16) on four GPU generations "
              "(`roofline_gpus.png`):", "", "| device | phase | op | FLOP/byte | ridge | bound |", "|---|---|---|---|---|---|"]
    for _, r in points.iterrows():
        lines.append(f"| {r.device} | {r.phase} | {r['name']} | {r.intensity:.1f} | {r.ridge:.0f} | {r.bound} |")
    lines += ["", "![latency vs memory technology](memory_technologies.png)", "",
              "![roofline across GPUs](roofline_gpus.png)", ""]
    text = "\n".join(lines)
    print(text)
    write_benchmark_results(out / "memory_technologies.md", text)


if __name__ == "__main__":
    main()
