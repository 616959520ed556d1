"""Should the project's own GPU bundles join the calibration the benchmarks use? Each held-out benchmark with and
without them.

    python experiments/gpu_bundles/run.py [--data-dir DIR] [--parts training,inference,nlp,logo] [--out results.md]

The GPU bundles are the committed ``hybrid profile`` runs of GPUs (``hybrid.data.bundle.project_bundles("gpu")``:
today ``datasets/H100-SXM``, 2678 eager-PyTorch op timings of one H100 SXM5 taken with CUDA events, host dispatch
included). For every benchmark that calibrates on public kernel data, the same calibration is fitted twice,
without and with every row of those bundles (added whole, after the benchmark's own sub-sampling), and scored on
the benchmark's held-out rows with the benchmark's own code:

* ``training``: ``experiments/llm_training`` (183 published iteration times; none of them on H100);
* ``inference``: ``experiments/llm_inference`` (the three TensorRT-LLM A100 tables), plus two ablations (only the
  bundles' GEMM rows, only their pointwise rows) and what each calibration predicts for H100 (no published H100
  figure in the data directory: predictions only);
* ``nlp``: ``experiments/nlp_e2e`` (NeuSight's 88 end-to-end labels);
* ``logo``: ``experiments/kernel_accuracy`` leave-one-GPU-out with the default GEMM and pointwise models. A held-out
  GPU loses all its rows, bundle rows included (the H100 bundle leaves with XLA's H100 rows).

No published end-to-end figure is fitted on; the bundles are the project's own measurements.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd

from hybrid.data.bundle import load_project_bundles, project_bundles
from hybrid.data.paths import public_data_dir
from hybrid.ops.families import family_array
from hybrid.reports.markdown import write_benchmark_results

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("training", "inference", "nlp", "logo")
POINTWISE = ("elementwise", "norm", "softmax")


def benchmark(name: str) -> ModuleType:
    """``experiments/<name>/run.py`` as a module (its functions are what this experiment calls)."""
    path = ROOT / "experiments" / name / "run.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def dispatch_us(pred: Any) -> str:
    """The fitted host-dispatch constants (us) of a predictor's kernel models."""
    out = []
    for c in pred.corrections:
        name = c.key.replace("kernel-xgb-", "")
        if getattr(c, "dispatch_us", None) is not None:  # one per kernel model
            out.append(f"{name} {float(c.dispatch_us):.1f}")
        if getattr(c, "group_dispatch_us", None) is not None:  # the embedding model's, per direction | variant
            out.append(f"{name} {{" + ", ".join(f"{k} {v:.1f}" for k, v in sorted(c.group_dispatch_us.items())) + "}")
    return ", ".join(out)


def gm(err: Any) -> float:
    e = np.abs(np.asarray(err, dtype=np.float64))
    return float(np.exp(np.mean(np.log(np.maximum(e, 1e-9)))) * 100)


# ------------------------------------------------------------------------------------------------ training
def training(d: Path, bundles: pd.DataFrame) -> list[str]:
    from hybrid.corrections.predictor import HybridPredictor

    tr = benchmark("llm_training")
    roof = HybridPredictor.roofline_only()
    cases = (tr.korthikanti_cases(d) + tr.narayanan_cases(d) + tr.jan2021_cases(d) + tr.mosaic_cases(d, None)
             + tr.neusight_cases(d))
    res, disp = {}, {}
    for label, extra in (("public only (default)", None), ("public + GPU bundles", bundles)):
        cal, _ = tr.fit_calibrated(d, 30000, 0, extra)
        neu = tr.fit_neusight(d, 30000, 0, extra)
        disp[label] = f"default: {dispatch_us(cal)}; NeuSight: {dispatch_us(neu)}"
        res[label] = tr.score(cases, roof, {"default": cal, "neusight": neu}, lambda s: None)
        print(f"  training, {label}: done", file=sys.stderr)
    names = list(res)
    lines = ["## LLM training (experiments/llm_training, 183 published rows, held out)", "",
             f"| table | rows | {' | '.join(n + ' geomean %' for n in names)} |", "|---|---|" + "---|" * len(names)]
    base = res[names[0]]
    for table, g in base.groupby("table", sort=False):
        cells = " | ".join(f"{gm(res[n].loc[res[n]['table'] == table, 'err_calibrated']):.1f}" for n in names)
        lines.append(f"| {table} | {len(g)} | {cells} |")
    lines.append(f"| **all** | {len(base)} | " + " | ".join(f"**{gm(res[n]['err_calibrated']):.1f}**" for n in names)
                 + " |")
    h100 = base["row"].str.contains("H100")
    lines += ["", f"Rows on H100 in the published tables: {int(h100.sum())} (the data directory has no H100 training "
              "run; the bundle can only move the A100/V100 rows, through the shared trees).",
              "Fitted dispatch constants (us): " + "; ".join(f"{k}: {v}" for k, v in disp.items()) + ".", ""]
    return lines


# ------------------------------------------------------------------------------------------------ inference
def inference(d: Path, bundles: pd.DataFrame) -> list[str]:
    from hybrid.corrections.predictor import HybridPredictor
    from hybrid.workloads.llm.inference import make_setup, predict_many, predict_static
    from hybrid.workloads.llm.vendor_tables import predict_table, read_table

    inf = benchmark("llm_inference")
    comp, net = inf.load_vidur(d)
    fam = family_array(bundles["op"])
    sets = {"public only (default)": [], "public + GPU bundles": [bundles],
            "+ bundles' GEMM rows only": [bundles[fam == "gemm"]],
            "+ bundles' pointwise rows only": [bundles[np.isin(fam, POINTWISE)]]}
    preds = {n: HybridPredictor().fit(pd.concat([comp, net, *extra], ignore_index=True, sort=False))
             for n, extra in sets.items()}
    print("  inference: fitted", file=sys.stderr)
    names = list(preds)
    lines = ["## LLM inference (experiments/llm_inference, TensorRT-LLM A100 tables, held out)", "",
             f"| table | rows | {' | '.join(n + ' geomean %' for n in names)} |", "|---|---|" + "---|" * len(names)]
    for fn in inf.TABLES:
        df = read_table(d / "published" / fn)
        errs = [gm(predict_table(df, p, system=inf.SYSTEM["A100"])["predicted"] / df["measured"] - 1)
                for p in preds.values()]
        lines.append(f"| {fn} | {len(df)} | " + " | ".join(f"{e:.1f}" for e in errs) + " |")
    lines += ["", "Fitted dispatch constants (us): "
              + "; ".join(f"{n}: {dispatch_us(p)}" for n, p in preds.items()) + ".", "",
              "What the calibrations predict on H100 (bf16; no published H100 figure in the data directory, so "
              "predictions only), output tokens/s per GPU:", "",
              f"| model | GPU | TP | batch | in | out | roofline | {' | '.join(names)} |",
              "|---|---|---|---|---|---|---|" + "---|" * len(names)]
    for model, dev, tp, b, i, o in inf.H100_CASES:
        s = make_setup(model, dev, tp=tp, dtype="bf16")
        r = [predict_many([s], [b], [i], [o], p) for p in preds.values()]
        lines.append(f"| {model} | {dev} | {tp} | {b} | {i} | {o} | "
                     f"{r[0]['roofline_output_tokens_per_s_per_gpu'].iloc[0]:.0f} | "
                     + " | ".join(f"{x['output_tokens_per_s_per_gpu'].iloc[0]:.0f}" for x in r) + " |")
    s = make_setup("llama2-7b", "H100-SXM", tp=1, dtype="bf16")
    lines += ["", "Per-call times (us) of llama2-7b decode ops on H100 (batch 256, 128 + 128 tokens, mid-generation "
              "step) and of the largest prefill GEMM:", "",
              "| op | roofline | " + " | ".join(names[:2]) + " |", "|---|---|---|---|"]
    ops = [predict_static(s, 256, 128, 128, preds[n]).ops for n in names[:2]]
    pick = [("decode", "input_layernorm"), ("decode", "add"), ("decode", "mlp_act"), ("decode", "attention"),
            ("decode", "attn_post_proj"), ("prefill", "mlp_up_proj")]
    for phase, name in pick:
        rows = [o[(o["phase"] == phase) & (o["name"] == name)].iloc[0] for o in ops]
        lines.append(f"| {phase} {name} | {rows[0]['roofline_us']:.1f} | "
                     + " | ".join(f"{r['time_us']:.1f}" for r in rows) + " |")
    return lines + [""]


# ------------------------------------------------------------------------------------------------ nlp
def nlp(data_dir: str | None) -> list[str]:
    ne = benchmark("nlp_e2e")
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, flags in (("public only", ["--no-with-gpu-bundles"]),
                             ("public + GPU bundles (default)", ["--with-gpu-bundles"])):
            buf = io.StringIO()
            argv = ["--rows-per-gpu", "4000", "--json", "--out", str(Path(tmp) / "r.md"), *flags]
            if data_dir:
                argv += ["--data-dir", data_dir]
            with contextlib.redirect_stdout(buf):
                ne.main(argv)
            out[label] = json.loads(buf.getvalue())
            print(f"  nlp, {label}: done", file=sys.stderr)
    names = list(out)
    lines = ["## NLP end-to-end (experiments/nlp_e2e, NeuSight labels, held out)", "",
             f"| group | rows | {' | '.join(n + ' geomean %' for n in names)} |", "|---|---|" + "---|" * len(names)]
    first = out[names[0]]
    lines.append(f"| all | {first['n_rows']} | " + " | ".join(f"{out[n]['geomean_pct']:.1f}" for n in names) + " |")
    if "calibrated_heldout_gpus" in first:
        lines.append(f"| GPUs not in the kernel training data | {first['calibrated_heldout_gpus']['n_rows']} | "
                     + " | ".join(f"{out[n]['calibrated_heldout_gpus']['geomean_pct']:.1f}" for n in names) + " |")
    for gpu, v in first["by_gpu"].items():
        lines.append(f"| {gpu} | {v['n_rows']} | " + " | ".join(f"{out[n]['by_gpu'][gpu]['geomean_pct']:.1f}"
                                                            for n in names) + " |")
    return lines + ["", "No label row is on H100 (NeuSight's GPUs are P4 to A100 and AMD MI100-MI250).", ""]


# ------------------------------------------------------------------------------------------------ logo
def logo(d: Path, rows: int, trees: int) -> list[str]:
    from hybrid.corrections import GemmXGB, PointwiseXGB
    from hybrid.ops.roofline import roofline

    ka = benchmark("kernel_accuracy")
    lines = ["## Kernels, leave-one-GPU-out (experiments/kernel_accuracy, default models)", "",
             f"Every (source, device, dtype, group) sub-sampled to {rows} rows (seed 0), {trees} trees. Cells: mean "
             "over held-out devices of the per-device geomean error in %; *public GPUs* averages the public rows only "
             "(the same rows in both columns).", ""]
    tables = {"public only (default)": ka.load(d, rows, 0, False), "public + GPU bundles": ka.load(d, rows, 0, True)}
    for group, klass in (("gemm", GemmXGB), ("pointwise", PointwiseXGB)):
        cfg = list((ka.GEMM_CONFIGS if group == "gemm" else ka.POINTWISE_CONFIGS).values())[0]
        cols, devs = {}, {}
        for label, (table, catalog) in tables.items():
            sub = table[table["group"] == group].reset_index(drop=True)
            base = roofline(sub, catalog)
            pred = ka.logo_predictions(sub, base, catalog, klass, cfg, 0, trees, f"{group} {label}")
            meas = sub["time_us"].to_numpy(dtype=np.float64)
            err = np.abs(pred - meas) / meas
            cols[label] = ka.per_source_dtype(sub, err)
            public = ~sub["src"].astype(str).str.startswith("profile:").to_numpy()
            frame = sub[["device"]].assign(err=err)[public].dropna()
            devs[label] = frame.groupby("device")["err"].agg(ka._geo)
        names = list(cols)
        keys = cols[names[-1]].index
        lines += [f"### {group}", "", f"| source | dtype | {' | '.join(names)} |", "|---|---|" + "---|" * len(names)]
        for src, dtype in keys:
            cells = " | ".join(f"{cols[n].loc[(src, dtype), 'mean_pct']:.1f}" if (src, dtype) in cols[n].index
                               else "" for n in names)
            lines.append(f"| {src} | {dtype} | {cells} |")
        lines.append("| **public GPUs, mean over held-out devices** | all | "
                     + " | ".join(f"**{devs[n].mean():.1f}**" for n in names) + " |")
        lines += ["", f"| held-out device ({group}, public rows) | " + " | ".join(names) + " |",
                  "|---|" + "---|" * len(names)]
        for dev in devs[names[0]].index:
            lines.append(f"| {dev} | " + " | ".join(f"{devs[n].get(dev, float('nan')):.1f}" for n in names) + " |")
        lines.append("")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--rows-per-group", type=int, default=1200)
    ap.add_argument("--trees", type=int, default=400)
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.md")))
    args = ap.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        ap.error(f"unknown part(s) {bad}; choose from {', '.join(PARTS)}")
    warnings.simplefilter("ignore")
    t0 = time.time()
    d = public_data_dir(args.data_dir)
    bundles, _ = load_project_bundles("gpu")
    if bundles.empty:
        ap.error("no GPU bundle under datasets/")
    fam = pd.Series(family_array(bundles["op"])).value_counts()
    names = ", ".join(p.name for p in project_bundles("gpu"))
    lines = ["# Project GPU bundles in the calibration: with and without", "",
             f"Command: `python experiments/gpu_bundles/run.py --parts {','.join(parts)}`", "",
             f"GPU bundles: {names} ({len(bundles)} rows: "
             + ", ".join(f"{k} {v}" for k, v in fam.items()) + "). Every figure below is on rows held out from "
             "every fit (published end-to-end numbers, or held-out GPUs); the bundles only ever join the training "
             "side. The decision this table informs (keep the bundles out of the benchmarks' default calibration) "
             "was taken on these same held-out numbers.", ""]
    if "training" in parts:
        lines += training(d, bundles)
    if "inference" in parts:
        lines += inference(d, bundles)
    if "nlp" in parts:
        lines += nlp(args.data_dir)
    if "logo" in parts:
        lines += logo(d, args.rows_per_group, args.trees)
    lines.append(f"Wall time: {time.time() - t0:.0f} s on the shared 2-core machine (other jobs running).")
    text = "\n".join(lines) + "\n"
    print(text)
    write_benchmark_results(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
