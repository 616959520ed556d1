"""The engine's host model for eager GPU steps: one constant per traced host op, fitted on measured steps.

Where a GPU trace's own host time is dropped (``host="model"``: recorded under the profiler it is 1.1-4x the
untraced host), the engine charges every host op the trace recorded (ATen op, autograd node, composite op)
``Overheads.host_op_us`` and every kernel launch ``kernel_launch_us`` (5 us, cudaLaunchKernel), op by op on the
host stream of the task graph (:func:`hybrid.workloads.trace_graph.build_trace_graph`). This benchmark fits
``host_op_us`` (:meth:`hybrid.engine.overheads.Overheads.fit_report`) on the project's traced training steps of
``datasets/traces-h100`` and ``datasets/traces-h200`` against their untraced step times (``steps.json``), with every
GPU kernel at its traced time, so that the host model alone is measured, and reports:

* the constant fitted on all steps, with its standard error (the default ``DEFAULT_HOST_OP_US`` comes from here);
* leave-one-step-out: each step predicted with the constant fitted on the others (steps it never saw);
* each step at the default constant, beside the engine's earlier host model (one launch per costed op at the
  learned dispatch, nothing for ops without a kernel, ``--per-launch US``).

    python experiments/trace_gpu/host_model.py [--out experiments/trace_gpu/host_model_results.md] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: The trace directories (GPU key each is predicted on).
TRACE_SETS = (("datasets/traces-h100", "H100-SXM"), ("datasets/traces-h200", "H200"))


def step_dirs(base: Path) -> list[tuple[str, Path, float]]:
    """(name, directory, untraced step ms) of every step of ``base/steps.json``."""
    out = []
    for s in json.loads((base / "steps.json").read_text())["steps"]:
        name = f"{s['model']}-{s['dtype']}"
        path = base / name
        if not path.is_dir():  # e.g. bert-bf16-sdpa
            cands = sorted(p for p in base.iterdir() if p.is_dir() and p.name.startswith(name))
            if not cands:
                raise FileNotFoundError(f"{base}: no trace directory for {name}")
            path = cands[0]
        out.append((name, path, float(s["step_ms"])))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-launch", type=float, default=15.0,
                    help="host time per costed op of the earlier host model, for comparison (us; 15 = the "
                         "engine's default launch + dispatch)")
    ap.add_argument("--out", default=str(Path(__file__).with_name("host_model_results.md")))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    import run as trace_gpu  # experiments/trace_gpu/run.py: traced-kernel cost model and transform

    from hybrid.data.traces import load_traces, trace_files
    from hybrid.engine.overheads import DEFAULT_HOST_OP_US, Overheads
    from hybrid.hardware.catalog import default_catalog
    from hybrid.reports.markdown import write_benchmark_results
    from hybrid.workloads.trace_graph import build_trace_graph, predict_trace

    t0 = time.time()
    cat = default_catalog()
    model = trace_gpu.TracedKernels()
    names, graphs, its, measured, ops, launches = [], [], [], [], [], []
    for rel, dev in TRACE_SETS:
        for name, path, ms in step_dirs(ROOT / rel):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                traces = load_traces(trace_files([path]))
                it = build_trace_graph(traces, dev, cat, host="model",
                                       transform=lambda t, u: trace_gpu.with_traced_us(t, u))
            g = it.graph.compile()
            names.append(f"{dev} {name}")
            its.append(it)
            graphs.append(g)
            measured.append(ms * 1e3)
            ops.append(float(g.host_ops.sum()) if g.host_ops is not None else 0.0)
            launches.append(float(g.launches.sum()) if g.launches is not None else 0.0)
    y = np.asarray(measured)
    base = Overheads(optimizer_step_us=0.0, iteration_us=0.0)

    def predict(host_op_us: float, idx: list[int]) -> np.ndarray:
        o = Overheads(optimizer_step_us=0.0, iteration_us=0.0, host_op_us=host_op_us)
        return np.array([predict_trace(its[i], model, o).predicted_us for i in idx])

    all_idx = list(range(len(graphs)))
    fitted, report = Overheads.fit_report(graphs, y, model, start=base, fit=["host_op_us"])
    c_all = fitted.host_op_us
    loo = np.empty(len(graphs))
    loo_c = np.empty(len(graphs))
    for i in all_idx:
        rest = [j for j in all_idx if j != i]
        f, _ = Overheads.fit_report([graphs[j] for j in rest], y[rest], model, start=base, fit=["host_op_us"])
        loo_c[i] = f.host_op_us
        loo[i] = predict(f.host_op_us, [i])[0]
    at_default = predict(DEFAULT_HOST_OP_US, all_idx)
    # no host time; the engine's earlier host model: every costed op one launch of --per-launch us, nothing for
    # the other host ops
    none = Overheads(optimizer_step_us=0.0, iteration_us=0.0, host_op_us=0.0, kernel_launch_us=0.0)
    kernel_only = np.array([predict_trace(it, model, none).predicted_us for it in its])
    per_launch = np.array([_per_launch_step(g, model, none, args.per_launch) for g in graphs])
    err = {k: (v / y - 1) * 100 for k, v in (("default", at_default), ("loo", loo), ("kernels", kernel_only),
                                             ("per_launch", per_launch))}
    res = {"host_op_us_fit": c_all, "se_us": report["se_us"]["host_op_us"], "default_host_op_us": DEFAULT_HOST_OP_US,
           "kernel_launch_us": base.kernel_launch_us, "loo_host_op_us": loo_c.tolist(),
           "geomean_pct": {k: trace_gpu.geomean_pct(v) for k, v in err.items()},
           "steps": [{"step": n, "measured_ms": m / 1e3, "host_ops": o, "launches": la,
                      **{f"{k}_ms": float(v[i]) / 1e3 for k, v in (("default", at_default), ("loo", loo),
                                                                     ("kernels", kernel_only),
                                                                     ("per_launch", per_launch))},
                      "loo_host_op_us": float(loo_c[i])}
                     for i, (n, m, o, la) in enumerate(zip(names, y, ops, launches, strict=True))],
           "seconds": time.time() - t0}
    if args.json:
        print(json.dumps(res, indent=1))
    write_benchmark_results(args.out, report_md(res, args))
    return 0


def _per_launch_step(g, model, none, per_launch_us: float) -> float:
    """The step of compiled graph ``g`` with the earlier host model: each costed op's launch node (one with
    launches) ``per_launch_us``, no other host op (``none``: overheads without host-op or launch costs)."""
    from hybrid.engine.simulate import node_durations, simulate_durations

    dur = node_durations(g, model, none) + np.where(g.launches > 0, per_launch_us, 0.0)
    return float(simulate_durations(g, dur).iteration_us)


def report_md(res: dict, args: argparse.Namespace) -> str:
    from hybrid import __version__

    out = ["# The engine's host model for eager GPU steps: host time per traced op, fitted on measured steps", "",
           f"Command: `python experiments/trace_gpu/host_model.py` (hybrid {__version__}, "
           f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {res['seconds']:.0f} s on the shared 2-core VM).",
           "",
           "Steps: the 11 traced training steps of `datasets/traces-h100` and `datasets/traces-h200` (the project's own "
           "measurements; *measured* = median of 10 untraced CUDA-synchronised steps). Every GPU kernel at its traced "
           "time (no kernel cost model), so the columns differ only in the host model: *kernels only* = no host time; "
           f"*per launch* = the engine's earlier model ({args.per_launch:g} us per costed op, nothing for ops without a "
           "kernel or for the host ops between them); *host ops* = every traced host op (ATen op, autograd node, "
           f"composite op) at `host_op_us` plus {res['kernel_launch_us']:g} us per kernel launch, at the default "
           f"{res['default_host_op_us']:g} us; *leave one out* = the constant fitted on the other 10 steps.",
           "",
           f"**Fitted on all 11 steps: host_op_us = {res['host_op_us_fit']:.2f} us (standard error "
           f"{res['se_us']:.2f})**; the engine's default `DEFAULT_HOST_OP_US` = {res['default_host_op_us']:g} us. "
           f"Leave-one-step-out constants {min(res['loo_host_op_us']):.2f}-{max(res['loo_host_op_us']):.2f} us.",
           "",
           "| step | measured ms | host ops | launches | kernels only ms (err %) | per launch ms (err %) | "
           "host ops ms (err %) | leave one out ms (err %) |",
           "|---|---|---|---|---|---|---|---|"]
    for s in res["steps"]:
        def cell(k: str, s: dict = s) -> str:
            v = s[f"{k}_ms"]
            return f"{v:.2f} ({(v / s['measured_ms'] - 1) * 100:+.1f})"
        out.append(f"| {s['step']} | {s['measured_ms']:.2f} | {s['host_ops']:.0f} | {s['launches']:.0f} | "
                   f"{cell('kernels')} | {cell('per_launch')} | {cell('default')} | {cell('loo')} |")
    g = res["geomean_pct"]
    out += ["", f"Geomean |error| over the 11 steps: kernels only {g['kernels']:.1f}%, per launch {g['per_launch']:.1f}%, "
                f"host ops (default) {g['default']:.1f}%, leave one out {g['loo']:.1f}%.", ""]
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
