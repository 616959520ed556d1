"""End to end: transformers models with fused attention (SDPA) traced on this CPU, predicted with and without
profiled attention rows.

    python experiments/attention_accuracy/traces.py [--models bert,gpt2,llama] [--steps 5] [--attention-bundle DIR]

The models of ``experiments/trace_cpu`` (BERT-large layers, GPT-2, a small Llama with GQA) built with
``attn_implementation="sdpa"``, the default of current ``transformers`` and what a user's traced model runs: one
``scaled_dot_product_attention`` per layer and its backward. Each training step is timed untraced (median on-core
time of ``--steps`` steps, one thread) and traced once, then predicted from the trace (same device) by

- ``without``: the ``HybridPredictor`` fitted on the committed CPU profile (``datasets/cpu-amd-epyc-1c``), which
  has no attention rows (every SDPA op priced by extrapolating the pointwise trees);
- ``with``: the same plus the attention rows of ``--attention-bundle`` (default: a fresh ``hybrid profile --only
  attention --threads 1`` of this CPU), none of them from these models (generic grids);
- the roofline.

Reported: the attention ops' predicted vs traced time (the part the rows change) and the whole step. The committed
profile is days older than the measured steps, and this VM's speed drifts from day to day
(``experiments/trace_cpu/results.md``), so the step errors carry that drift; the attention column compares two
predictions of the same traced ops.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "datasets" / "cpu-amd-epyc-1c"


def _trace_cpu():
    spec = importlib.util.spec_from_file_location("trace_cpu_run", ROOT / "experiments" / "trace_cpu" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="bert,gpt2,llama")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seq", default="128,1024", help="sequence lengths (batch 2), comma-separated")
    ap.add_argument("--attention-bundle", default=None, help="bundle with attention rows (default: profile now)")
    ap.add_argument("--out", default=str(Path(__file__).with_name("traces_results.md")))
    args = ap.parse_args(argv)
    names = [m for m in args.models.split(",") if m]
    tc = _trace_cpu()
    unknown = [m for m in names if m not in tc.MODELS or m == "cnn"]
    if unknown or not names:
        ap.error(f"models must be among bert, gpt2, llama (got {args.models!r})")
    try:
        seqs = [int(x) for x in args.seq.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--seq takes comma-separated integers, got {args.seq!r}")
    if not seqs or min(seqs) < 1 or max(seqs) > 4096:
        ap.error(f"--seq lengths must be in 1..4096, got {args.seq!r}")

    from hybrid.corrections.predictor import HybridPredictor
    from hybrid.data.bundle import load_bundle
    from hybrid.engine.costs import RooflineCostModel
    from hybrid.reports.markdown import write_benchmark_results

    t_start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        if args.attention_bundle is None:
            from hybrid.data.profiler.runner import ProfileOptions, run_profile

            att_dir = Path(tmp) / "attention"
            run_profile(ProfileOptions(families=("attention",), threads=1, progress=False, force_cpu=True,
                                       device_name=BUNDLE.name), att_dir)
            att_label = "a fresh `hybrid profile --only attention --threads 1` of this CPU"
        else:
            att_dir, att_label = Path(args.attention_bundle), f"`{args.attention_bundle}`"
        base, cat = load_bundle(BUNDLE)
        att, _ = load_bundle(att_dir)
        att = att[att["op"] == "attention"].assign(device=base["device"].iloc[0])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            without = HybridPredictor(catalog=cat).fit(base[base["op"] != "attention"])
            with_ = HybridPredictor(catalog=cat).fit(pd.concat([base, att], ignore_index=True, sort=False))
        models = {"without": (without, cat), "with": (with_, cat), "roofline": (RooflineCostModel(cat), cat)}
        rows = []
        # as configured (BERT and GPT-2 train with attention dropout 0.1: on a CPU SDPA then runs its math
        # fallback, costed op by op), and without attention dropout (the fused kernel)
        runs = [(n, q, None) for n in names for q in seqs] + [(n, q, 0.0) for n in names if n != "llama" for q in seqs]
        for name, seq, drop in runs:
            d = Path(tmp) / f"{name}-{seq}-{drop}"
            meas = tc.time_and_trace(name, d, args.warmup, args.steps, attention="sdpa", seq=seq, attn_dropout=drop)
            preds = tc.predict(d, "cpu-amd-epyc-1c", models, meas["trace_cpu_share"])
            row = {"model": name if drop is None else f"{name}, no attention dropout", "seq": seq,
                   "measured_ms": meas["cpu_ms"],
                   "attention_traced_ms": preds["with"].get("breakdown_measured_ms", {}).get("attention", 0.0)}
            for label in models:
                p = preds[label]
                row[f"{label}_ms"] = p["predicted_ms"]
                row[f"{label}_attention_ms"] = p["breakdown_ms"].get("attention", 0.0)
            rows.append(row)
            print(f"{name} s={seq}: measured {row['measured_ms']:.1f} ms, attention traced "
                  f"{row['attention_traced_ms']:.1f} / without {row['without_attention_ms']:.1f} / with "
                  f"{row['with_attention_ms']:.1f}", file=sys.stderr)
    seconds = time.time() - t_start
    write_benchmark_results(args.out, report(rows, att_label, len(att), args, seconds))
    print(f"wrote {args.out}")
    return 0


def _err(p: float, m: float) -> str:
    return f"{(p / m - 1) * 100:+.1f}" if m > 0 else "n/a"


def report(rows: list[dict], att_label: str, n_att: int, args: argparse.Namespace, seconds: float) -> str:
    import numpy as np

    lines = ["# Fused attention end to end: SDPA models traced on this CPU, with and without attention rows", "",
             f"Command: `python experiments/attention_accuracy/traces.py --models {args.models} --seq {args.seq} "
             f"--steps {args.steps}` "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {seconds:.0f} s on the shared 2-core VM).", "",
             f"Predictors fitted on the committed CPU profile (`datasets/cpu-amd-epyc-1c`, no attention rows) "
             f"without / with the {n_att} attention rows of {att_label} (generic shapes, none from these models); "
             "nothing fitted on these steps. *attention*: the traced SDPA ops (forward and backward) of one step, "
             "their traced on-CPU time against each prediction; *step*: the median on-core time of the untraced "
             "steps. Errors are signed (predicted / measured - 1).", "",
             "| model | seq | attention traced ms | without: ms (err %) | with: ms (err %) | roofline ms (err %) | "
             "step measured ms | step without (err %) | step with (err %) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a = r["attention_traced_ms"]
        if a <= 0:  # no fused attention op in the trace: SDPA ran its math fallback, costed op by op
            lines.append(f"| {r['model']} | {r['seq']} | math fallback (dropout): matmuls, softmax, dropout costed "
                         f"one by one | | | | {r['measured_ms']:.1f} | {r['without_ms']:.1f} "
                         f"({_err(r['without_ms'], r['measured_ms'])}) | {r['with_ms']:.1f} "
                         f"({_err(r['with_ms'], r['measured_ms'])}) |")
            continue
        lines.append(
            f"| {r['model']} | {r['seq']} | {a:.1f} | {r['without_attention_ms']:.1f} ({_err(r['without_attention_ms'], a)}) | "
            f"{r['with_attention_ms']:.1f} ({_err(r['with_attention_ms'], a)}) | {r['roofline_attention_ms']:.1f} "
            f"({_err(r['roofline_attention_ms'], a)}) | {r['measured_ms']:.1f} | {r['without_ms']:.1f} "
            f"({_err(r['without_ms'], r['measured_ms'])}) | {r['with_ms']:.1f} ({_err(r['with_ms'], r['measured_ms'])}) |")

    def gm(key: str, ref: str, fused_only: bool = False) -> float:
        e = np.array([abs(r[key] / r[ref] - 1) for r in rows if r[ref] > 0
                      and (r["attention_traced_ms"] > 0 or not fused_only)])
        return float(np.exp(np.mean(np.log(np.maximum(e, 1e-6)))) * 100) if len(e) else float("nan")

    lines += ["", f"Geomean |error| of the attention ops: without {gm('without_attention_ms', 'attention_traced_ms'):.1f}%, "
              f"with {gm('with_attention_ms', 'attention_traced_ms'):.1f}%, roofline "
              f"{gm('roofline_attention_ms', 'attention_traced_ms'):.1f}%; of the step: without "
              f"{gm('without_ms', 'measured_ms'):.1f}%, with {gm('with_ms', 'measured_ms'):.1f}% (runs with fused attention "
              f"only: without {gm('without_ms', 'measured_ms', True):.1f}%, with "
              f"{gm('with_ms', 'measured_ms', True):.1f}%)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
