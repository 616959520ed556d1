"""Trace-driven prediction on a GPU: the 8 traced training steps of ``datasets/traces-h100`` predicted on H100-SXM.

For each traced step (BERT-large x4 layers, GPT-2 x6, a Llama 4-layer, a CNN; fp32 and bf16 autocast; one
training step = forward, loss, backward, AdamW; recorded by ``experiments/trace_gpu/record.py`` on one H100 SXM5)
the trace becomes the engine's task graph for the device ``H100-SXM`` (:func:`build_trace_graph`) and every op is
costed by

* ``roofline``: the catalog's datasheet roofline;
* ``public``: a HybridPredictor fitted on public kernel and collective measurements only (the calibration of
  ``experiments/dlrm_gpu``: NeuSight kernels, XLA H100 matmuls, Vidur A100 ops, nccl-tests; no end-to-end data);
* ``bundle``: a HybridPredictor fitted on ``datasets/H100-SXM`` (``--bundle``, as ``hybrid trace predict
  --bundle``): the project's own framework-timed eager-PyTorch profile of the same GPU (in-distribution for the
  kernels; the traces and step times are never used for fitting);
* ``traced kernels``: every kernel at the trace's own measured GPU time (no cost model): what the graph and the
  host model alone give.

The host: a trace recorded by ``torch.profiler`` with shapes and an execution-trace observer costs ~10-25 us of
profiler time per recorded op (a traced ``aten::view`` takes 10-22 us), so its host time is 1.1-4x the untraced
step (bf16: 114 ms traced vs 27 ms untraced for BERT). Predictions therefore drop the traced host time
(``host="model"``: the engine's per-launch overheads stand for the untraced host); ``--host trace`` keeps it.

Compared with the *measured* step: the median of 10 untraced, CUDA-synchronised steps (``steps.json``).

    python experiments/trace_gpu/run.py [--traces datasets/traces-h100] [--bundle datasets/H100-SXM]
                                        [--data-dir DIR] [--host model] [--out results.md] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DEVICE = "H100-SXM"
TARGET_PCT = 5.0  # issue 10: the same engine within 5% on the self-check (NLP models: 3%)
#: breakdown labels that are GPU kernels (the rest is host: launches, gaps, views, waits)
HOST_LABELS = ("launch", "host gaps", "view/host ops", "waiting", "collective enqueue")


def public_predictor(data_dir: str | None, catalog) -> tuple[Any, str]:
    """The public-data calibration of ``experiments/dlrm_gpu`` (one definition: imported from there)."""
    from hybrid.data.paths import public_data_dir

    spec = importlib.util.spec_from_file_location("dlrm_gpu_run", ROOT / "experiments" / "dlrm_gpu" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.public_calibration(public_data_dir(data_dir), catalog)


class TracedKernels:
    """Cost model that returns each op's traced GPU time (``traced_us`` carried in the op row)."""

    def predict(self, table: pd.DataFrame) -> pd.DataFrame:
        t = pd.to_numeric(table.get("traced_us", pd.Series(np.nan, index=table.index)), errors="coerce")
        return pd.DataFrame({"time_us": t.fillna(0.0).to_numpy(), "method": "traced"}, index=table.index)


def with_traced_us(trace, units: pd.DataFrame) -> pd.DataFrame:
    """``transform`` for :func:`build_trace_graph`: every costed op row carries its kernels' traced time."""
    u = units.copy()
    dev = u["device_us"].to_numpy(dtype=np.float64)
    u["row"] = [({**r, "traced_us": float(d) if np.isfinite(d) else 0.0} if isinstance(r, dict) else r)
                for r, d in zip(u["row"], dev, strict=True)]
    return u


def kernel_families(units: pd.DataFrame, pred_durations: np.ndarray | None = None) -> dict[str, float]:
    """Measured GPU kernel time (ms) per breakdown label of the trace's units."""
    u = units[units["device_us"].notna()]
    return (u.groupby("label")["device_us"].sum() / 1e3).round(4).to_dict()


def predict_one(name: str, files: list[str], models: dict, host: str, kernel_times: bool = True) -> dict:
    from hybrid.data.traces import load_traces
    from hybrid.workloads.trace_graph import build_trace_graph, predict_trace

    traces = load_traces(files)
    tr = traces[0]
    k = tr.kernels
    out: dict[str, Any] = {"trace": name, "traced_ms": tr.step_us / 1e3, "gpu_kernel_ms": float(k["dur"].sum()) / 1e3,
                           "kernels": int(len(k)), "streams": sorted(k["stream"].astype(str).unique().tolist()),
                           "host_ops": int(len(tr.ops)), "pred": {}, "families": {}}
    for label, (model, cat) in models.items():
        transform = with_traced_us if label == "traced kernels" else None
        it = build_trace_graph(traces, DEVICE, cat, host=host, transform=transform)
        p = predict_trace(it, model, model_name=label, kernel_times=kernel_times)
        bd = p.breakdown().set_index("label")
        out["pred"][label] = p.predicted_us / 1e3
        out["families"][label] = (bd["predicted_us"] / 1e3).round(4).to_dict()
        if label == "roofline":
            out["families"]["measured"] = kernel_families(it.units)
            unm = it.unmodelled()
            out["unmodelled"] = {"ops": int(unm["count"].sum()) if len(unm) else 0,
                                 "names": sorted(set(unm["name"])) if len(unm) else []}
    if "bundle" in models:  # the same predictor with the traced (profiler-inflated) host kept
        model, cat = models["bundle"]
        it = build_trace_graph(traces, DEVICE, cat, host="trace")
        p = predict_trace(it, model, kernel_times=kernel_times)
        out["pred"]["bundle, traced host"] = p.predicted_us / 1e3
        # the graph with every node at its traced time: reproduces the traced (profiled) step if the graph is right
        out["resim_ms"] = float(p.measured.iteration_us) / 1e3
    return out


def geomean_pct(err: np.ndarray) -> float:
    return float(np.exp(np.mean(np.log1p(np.abs(err) / 100))) - 1) * 100


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", default=str(ROOT / "datasets" / "traces-h100"))
    ap.add_argument("--bundle", default=str(ROOT / "datasets" / "H100-SXM"))
    ap.add_argument("--data-dir", default=None, help="public data directory (default ../shared/datasets)")
    ap.add_argument("--host", default="model", choices=("model", "trace"))
    ap.add_argument("--as-fitted", action="store_true",
                    help="cost GPU-stream ops with the models' eager per-op times (fitted dispatch included), as "
                         "before kernel times were the default")
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.md")))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from hybrid.bench.validate import resolve_predictor
    from hybrid.data.traces import trace_files
    from hybrid.engine.costs import RooflineCostModel
    from hybrid.errors import HybridError
    from hybrid.hardware.catalog import default_catalog
    from hybrid.reports.markdown import write_benchmark_results

    t0 = time.time()
    base = Path(args.traces)
    meta = json.loads((base / "steps.json").read_text())
    cat = default_catalog()
    models: dict[str, tuple[Any, Any]] = {"roofline": (RooflineCostModel(cat), cat)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            pub, note = public_predictor(args.data_dir, cat)
            models["public"] = (pub, cat)
        except HybridError as exc:
            note = f"not available ({exc})"
        b = resolve_predictor(bundle=args.bundle)
    models["bundle"] = (b.model, b.catalog)
    models["traced kernels"] = (TracedKernels(), cat)
    fit_s = time.time() - t0
    rows = []
    for s in meta["steps"]:
        name = s.get("trace") or f"{s['model']}-{s['dtype']}"  # record.py --attention sdpa names its traces apart
        r = predict_one(name, trace_files([base / name]), models, args.host, kernel_times=not args.as_fitted)
        r.update(model=s["model"], dtype=s["dtype"], measured_ms=float(s["step_ms"]),
                 spread_pct=float((np.max(s["times_ms"]) - np.min(s["times_ms"])) / s["step_ms"] * 100))
        r["error_pct"] = {k: (v / r["measured_ms"] - 1) * 100 for k, v in r["pred"].items()}
        rows.append(r)
        print(f"{name:11s} measured {r['measured_ms']:7.2f} ms  " + "  ".join(
            f"{k} {v:7.2f} ({r['error_pct'][k]:+.1f}%)" for k, v in r["pred"].items()), file=sys.stderr)
    result = {"device": DEVICE, "traced_on": meta.get("device"), "torch": meta.get("torch"), "host": args.host,
              "public_calibration": note, "bundle": str(Path(args.bundle).name), "rows": rows,
              "seconds": time.time() - t0, "fit_seconds": fit_s}
    labels = list(rows[0]["pred"])
    result["geomean_pct"] = {k: geomean_pct(np.array([r["error_pct"][k] for r in rows])) for k in labels}
    if args.json:
        print(json.dumps(result, indent=1, default=str))
    write_benchmark_results(args.out, report(result, args))
    return 0


def report(res: dict, args: argparse.Namespace) -> str:
    import hybrid

    rows = res["rows"]
    labels = list(rows[0]["pred"])
    gm = res["geomean_pct"]
    cmd = ("python experiments/trace_gpu/run.py" + (f" --host {args.host}" if args.host != "model" else "")
           + (" --as-fitted" if args.as_fitted else ""))
    out = ["# Trace-driven prediction on a GPU: 8 traced training steps on H100-SXM", "",
           f"Command: `{cmd}` (hybrid {hybrid.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
           f"{res['seconds']:.0f} s on the shared 2-core VM, fits {res['fit_seconds']:.0f} s of it).", "",
           f"Traces and step times: `datasets/traces-h100` ({res['traced_on']}, torch {res['torch']}), the project's "
           "own measurements; *measured* = median of 10 untraced CUDA-synchronised steps. Predicted on "
           f"`{res['device']}` with the traced host time "
           + ("dropped (engine launch overheads, `host=model`)." if res["host"] == "model" else "kept (`host=trace`)."),
           "", "Predictors: **roofline** (catalog); **public** = HybridPredictor fitted on public data only "
           f"({res['public_calibration']}); **bundle** = HybridPredictor fitted on `datasets/{res['bundle']}` "
           "(the project's own profile of this GPU: in-distribution for the kernels; the traces and step times are "
           "never used for fitting); **traced kernels** = every kernel at its traced GPU time (no cost model: the "
           "graph + host model alone); **bundle, traced host** = bundle with the profiler-inflated traced host kept. "
           "*traced* = the profiled step; *re-sim* = the task graph with every node at its traced time (host kept): it "
           "reproduces the traced step when the graph is right; *spread* = (max - min) / median of the 10 steps.",
           "", "| trace | measured ms | spread % | traced ms | re-sim ms | GPU kernels ms | "
           + " | ".join(f"{k} ms (err %)" for k in labels) + " |",
           "|---|---|---|---|---|---|" + "---|" * len(labels)]
    for r in rows:
        out.append(f"| {r['trace']} | {r['measured_ms']:.2f} | {r['spread_pct']:.1f} | {r['traced_ms']:.2f} | "
                   f"{r.get('resim_ms', float('nan')):.2f} | "
                   f"{r['gpu_kernel_ms']:.2f} | " + " | ".join(f"{r['pred'][k]:.2f} ({r['error_pct'][k]:+.1f})"
                                                        for k in labels) + " |")
    out += ["", "Geomean |error| over the 8 traces: " + ", ".join(f"{k} {gm[k]:.1f}%" for k in labels) + "."]
    best = min(("public", "bundle"), key=lambda k: gm.get(k, np.inf))
    within = sum(abs(r["error_pct"][best]) <= TARGET_PCT for r in rows)
    out += ["", f"Target (issue 10: within {TARGET_PCT:.0f}% on the self-check): "
            f"{'met' if gm[best] <= TARGET_PCT else 'MISSED'} -- best calibrated predictor ({best}) geomean "
            f"{gm[best]:.1f}%, {within}/{len(rows)} traces within {TARGET_PCT:.0f}%; public-data predictor "
            f"{gm.get('public', float('nan')):.1f}%."]
    # per-family: predicted kernel time vs the trace's measured kernel time
    out += ["", "## Per family: predicted vs measured GPU kernel time (ms)", "",
            "Measured = the trace's own kernel durations (CUPTI) of the ops of that family; *host* = predicted "
            "launch/host nodes vs (measured step - GPU kernel sum), the time the GPU was not busy.", ""]
    fams = sorted({f for r in rows for f in r["families"]["measured"]} | {"unmodelled"},
                  key=lambda f: -sum(r["families"]["measured"].get(f, 0.0) for r in rows))
    fams = [f for f in fams if any(r["families"]["measured"].get(f, 0) > 0.05 or
                                   r["families"]["bundle"].get(f, 0) > 0.05 for r in rows)]
    out += ["| trace | " + " | ".join(fams) + " | host |", "|---|" + "---|" * (len(fams) + 1)]
    for r in rows:
        cells = []
        for f in fams:
            m = r["families"]["measured"].get(f, 0.0)
            p = [r["families"][k].get(f, 0.0) for k in ("roofline", "public", "bundle") if k in r["families"]]
            cells.append(f"{m:.2f}: " + "/".join(f"{x:.2f}" for x in p))
        hm = r["measured_ms"] - r["gpu_kernel_ms"]
        hp = sum(r["families"]["bundle"].get(h, 0.0) for h in HOST_LABELS)
        cells.append(f"{hm:.2f} exposed; {hp:.2f} launched")
        out.append(f"| {r['trace']} | " + " | ".join(cells) + " |")
    out += ["", "Cells: measured: roofline/public/bundle predicted.", ""]
    # where the bundle predictor's error comes from
    out += ["Kernel-time error of the bundle predictor per family, summed over the 8 traces (predicted - measured, "
            "ms): " + ", ".join(f"{f} {sum(r['families']['bundle'].get(f, 0) - r['families']['measured'].get(f, 0) for r in rows):+.1f}"
                               for f in fams) + "."]
    unm = sorted({n for r in rows for n in r["unmodelled"]["names"]})
    out += ["", "Unmodelled ops (costed at their traced time on the traced GPU): "
            + (", ".join(unm) if unm else "none") + "."]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
