"""``hybrid trace``: predict a PyTorch model from its own traces (torch.profiler Chrome trace / execution trace)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click

from hybrid.cli.output import (
    compare_names,
    e2e_line,
    echo_json,
    echo_table,
    gpu_hour_price_option,
    named,
    named_device,
    roofline_note,
)


@click.group()
def trace() -> None:
    """Import, predict and record PyTorch traces (one per rank).

    \b
    hybrid trace record train.py -o traces/            # runs train.py's step() and traces one call
    hybrid trace predict traces/*.json --device cpu-amd-epyc-1c --bundle datasets/cpu-amd-epyc-1c
    hybrid trace predict traces/*.json --device A100-SXM4-80GB --model kernels
    hybrid trace predict datasets/traces-h100/bert-bf16/ --device H100-SXM --bundle datasets/H100-SXM --host model
    hybrid trace import traces/*.json -o graph.json
    hybrid trace kernels datasets/traces-h100/*/ -o h100-kernels.csv   # calibration rows: ops timed by CUPTI
    hybrid trace predict datasets/traces-h200/gpt2-bf16-sdpa/ --device H200 --bundle datasets/H100-SXM \\
        --rows h100-kernels.csv --host model                             # a GPU neither measured
    """


def _load(paths: tuple[str, ...], step: int | None) -> list[Any]:
    from hybrid.data.traces import TraceFormatError, load_traces, trace_files

    files = trace_files(paths)
    try:
        return load_traces(files, step=step)
    except TraceFormatError as exc:
        # a file the user did not name but a directory holds (`trace import DIR -o DIR/graph.json`, a saved --json):
        # say where it came from and what to do, rather than only that it is no trace
        kind = any(why in str(exc) for why in (": not a PyTorch trace", ": not a JSON text file", ": invalid JSON"))
        found = [f for f in files if kind and f not in paths and str(exc).startswith(f"{f}:")]
        if not found:
            raise
        raise TraceFormatError(f"{exc} (found in directory {Path(found[0]).parent}, whose every *.json and *.json.gz "
                               "is read as a trace of the recording: move it out, or give the trace files "
                               "themselves)") from None


@trace.command("import")
@click.argument("traces", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False), callback=named,
              help="Where to write the parsed graph (JSON).")
@click.option("--step", type=int, default=None, help="ProfilerStep#N to use (default: the first one).")
def import_(traces: tuple[str, ...], output: str, step: int | None) -> None:
    """Parse TRACE... (Chrome/Kineto and/or execution traces, one per rank) into a graph of op units (JSON)."""
    from hybrid.atomic import write_text
    from hybrid.workloads.trace_graph import job_units

    loaded = _load(traces, step)
    ranks = []
    for tr, u in zip(loaded, job_units(loaded), strict=True):
        counts = u.groupby(["kind", "label"]).size()
        ranks.append({
            "rank": tr.rank, "path": tr.path, "format": tr.format, "traced_device": tr.device,
            "step_us": tr.step_us if tr.has_times else None, "process_groups": tr.process_groups,
            "counts": {f"{k}/{lab}": int(v) for (k, lab), v in counts.items()},
            "units": [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}
                      for r in u.drop(columns=["op_id"]).to_dict(orient="records")],
        })
    doc = {"format": "hybrid-trace-graph", "version": 1, "world_size": len(loaded), "ranks": ranks}
    write_text(output, json.dumps(doc, default=str) + "\n")
    total = sum(len(r["units"]) for r in ranks)
    click.echo(f"{len(loaded)} rank(s), {total} op units -> {output}")
    if any(Path(t).is_dir() and Path(output).resolve().parent == Path(t).resolve() for t in traces):
        click.echo(f"warning: {output} is in a directory given as traces, whose every *.json is read as a trace: "
                   "`trace predict` / `import` of that directory will refuse it; write it elsewhere", err=True)


def precision_note(acc: dict[str, Any]) -> str | None:
    """A warning when fp32 matmuls / convolutions were priced by PyTorch's default TF32 switches because the trace
    does not say which its program used (:mod:`hybrid.data.traces.precision`), on a target where it matters."""
    if not acc.get("target_has_tf32"):
        return None
    parts = []
    for switch, what, flag, how in (("matmul", "matmul", "--fp32-matmul", "torch.backends.cuda.matmul.allow_tf32"),
                                    ("conv", "convolution", "--fp32-conv", "torch.backends.cudnn.allow_tf32")):
        a = acc.get(switch, {})
        if a.get("fp32_ops", 0) and "PyTorch default" in str(a.get("source", "")):
            on = a.get("mode") == "tf32"
            parts.append(f"{a['fp32_ops']} fp32 {what}(s) priced on {'TF32 tensor cores' if on else 'FP32 units'} "
                         f"(PyTorch's default {how} = {on}; {flag} {'ieee' if on else 'tf32'} if the program "
                         f"sets it otherwise)")
    if not parts:
        return None
    return "the trace does not say whether its fp32 math ran on TF32 tensor cores: " + "; ".join(parts)


def precision_line(acc: dict[str, Any]) -> str | None:
    """One text line on the fp32 matmuls / convolutions of the step and the math they were priced on (None where
    the step has none, or the target has no TF32 units)."""
    if not acc.get("target_has_tf32"):
        return None
    parts = []
    for key, what in (("matmul", "matmul(s)"), ("conv", "convolution(s)")):
        a = acc.get(key, {})
        n, on = a.get("fp32_ops", 0), a.get("tf32_ops", 0)
        if n:
            math = "TF32" if on == n else "FP32" if on == 0 else f"TF32 ({on}) and FP32 ({n - on})"
            parts.append(f"{n} {what} on {math} ({a['source']})")
    return ("fp32 math: " + ", ".join(parts)) if parts else None


def thread_mismatch(loaded: list[Any], bundle: str | None, device: Any = None) -> str | None:
    """A warning when the traces ran with another PyTorch thread count than the --bundle was profiled with, or,
    without one, than the CPU target ``device`` was (a CPU in the catalog comes from ``hybrid profile``, whose
    ``sms`` holds the threads it used; a --model calibrated on it has its rows): CPU op times then differ by up to
    the thread ratio, and two threads on a shared machine stall unpredictably."""
    if bundle:
        from hybrid.data.bundle import read_meta, run_options

        counts = {str(o["threads"]) for o in run_options(read_meta(bundle)) if o.get("threads") is not None}
        source = Path(bundle).name
    elif device is not None and device.kind == "cpu" and device.num_sms > 0:
        counts, source = {str(device.num_sms)}, f"CPU {device.key}"
    else:
        return None
    prof = "/".join(sorted(counts)) if counts else None  # a merged bundle: every run's thread count
    traced = {str(t.meta.get("hybrid_torch_threads")) for t in loaded if t.meta.get("hybrid_torch_threads")}
    if prof is None or not traced or traced == counts:
        return None
    return (f"the traces ran with {'/'.join(sorted(traced))} PyTorch thread(s) but {source} was "
            f"profiled with {prof}: the measured and predicted times are not comparable (record with "
            f"`hybrid trace record --threads {prof}`)")


def _fallback_brief(fallback: dict[str, Any]) -> str:
    """One :meth:`~hybrid.workloads.trace_costing.TracePrediction.dtype_fallbacks` entry in a few words, for a
    ``--compare`` row (its ``note`` is the warning)."""
    if "measured_in" in fallback:
        return (f"{fallback['ops']} {fallback['dtype']} {fallback['family']} op(s) priced from "
                f"{fallback['measured_in']} rows")
    return f"{fallback['ops']} {fallback['dtype']} {fallback['family']} op(s) priced in {fallback['priced_in']}"


@trace.command("predict")
@click.argument("traces", nargs=-1, required=True, type=click.Path())
@click.option("--device", default=None, callback=named_device, help="Target device (catalog key or alias).")
@click.option("--system", default=None, callback=named, help="Target system (collectives use its fabric).")
@click.option("--model", "model_ref", default=None, callback=named,
              help="Calibrated model from the tracking store (NAME[/VERSION]).")
@click.option("--tracking-uri", envvar="MLFLOW_TRACKING_URI", default=None, help="MLflow store of --model.")
@click.option("--bundle", default=None, type=click.Path(file_okay=False), callback=named,
              help="Fit the predictor on this profile bundle (e.g. datasets/cpu-amd-epyc-1c) and use its catalog.")
@click.option("--rows", "extra_rows", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Measurement table joined to --bundle's rows before the fit (repeatable), e.g. the kernel rows "
                   "of another GPU's traces from `hybrid trace kernels`.")
@click.option("--roofline", is_flag=True, help="Analytical roofline only.")
@click.option("--same-device/--other-device", "same", default=None,
              help="Whether the target is the traced hardware (default: decided from the traces).")
@click.option("--host", "host", type=click.Choice(["auto", "trace", "model"]), default="auto", show_default=True,
              help="Host time: the trace's (trace: less what recording cost, where the trace measured it when it was "
                   "recorded), the engine's host model (model: 5.7 us per recorded host op, 5 per kernel launch), "
                   "or auto (trace for a CPU trace on its own CPU or, in a --dp/--tp/--pp job, on a CPU, and for a "
                   "GPU trace that measured its recording cost, else model). A GPU trace's host is inflated by the "
                   "profiler, ~10-25 us per recorded op.")
@click.option("--kernel-times/--as-fitted", "kernel_times", default=True, show_default=True,
              help="Cost GPU kernels with the model's kernel time (its fitted per-op framework dispatch taken off: "
                   "the graph's host stream carries it), or as the model predicts them (dispatch counted twice).")
@click.option("--fp32-matmul", type=click.Choice(["auto", "ieee", "tf32"]), default="auto", show_default=True,
              help="fp32 matmuls on FP32 units (ieee) or TF32 tensor cores; auto: the ops' kernels in a GPU trace, "
                   "else the switch recorded with the trace, else PyTorch's default (ieee).")
@click.option("--fp32-conv", type=click.Choice(["auto", "ieee", "tf32"]), default="auto", show_default=True,
              help="fp32 convolutions likewise (PyTorch's default: tf32, cuDNN's allow_tf32).")
@click.option("--compiled", is_flag=True,
              help="Predict the step as torch.compile would run it: each run of pointwise ops between library "
                   "calls fused into one kernel (docs/traces.md).")
@click.option("--dp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Data parallelism: the (one-rank) trace on each of N ranks, DDP's bucketed gradient all-reduces "
                   "added (record the trace at the per-rank batch).")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Tensor parallelism (Megatron-style) of a transformer's one-rank trace over N ranks.")
@click.option("--pp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Pipeline parallelism of a transformer's one-rank trace: N stages, one micro-batch.")
@click.option("--tokens", type=click.IntRange(min=1), default=None,
              help="With --tp/--pp: tokens per step (batch x sequence; default: read from the trace's norm or "
                   "linear layers).")
@click.option("--hidden", type=click.IntRange(min=1), default=None,
              help="With --tp/--pp: the model's hidden size (default: read from the trace).")
@click.option("--compare", default=None,
              help="Comma-separated devices or systems to predict the same job on too, ranked by step time (or, with "
                   "--gpu-hour-price for each, by cost): which hardware to run this model on.")
@gpu_hour_price_option("Adds the cost of 1000 steps (all ranks).")
@click.option("--step", type=int, default=None, help="ProfilerStep#N to use (default: the first one).")
@click.option("--untraced-ms", type=click.FloatRange(min=0, min_open=True), default=None,
              help="The step's time measured without the profiler (your own timing, e.g. a trace directory's "
                   "steps.json) to compare with on the traced hardware; replaces the one `hybrid trace record` "
                   "stores in the trace.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def predict(traces: tuple[str, ...], device: str | None, system: str | None, model_ref: str | None,
            tracking_uri: str | None, bundle: str | None, extra_rows: tuple[str, ...], roofline: bool,
            same: bool | None, host: str,
            kernel_times: bool, fp32_matmul: str, fp32_conv: str, compiled: bool, dp: int, tp: int, pp: int,
            tokens: int | None, hidden: int | None,
            compare: str | None, gpu_hour_price: str | None, step: int | None, untraced_ms: float | None,
            as_json: bool) -> None:
    """Predict the traced step on --device/--system: time, per-family breakdown, measured time when it's the
    traced hardware."""
    from hybrid.errors import InvalidInputError, UnknownDeviceError
    from hybrid.workloads.trace_graph import build_trace_graph, predict_trace

    if bool(device) == bool(system):
        raise InvalidInputError("give exactly one of --device or --system")
    if (tokens is not None or hidden is not None) and tp == 1 and pp == 1:  # before the trace is read
        raise InvalidInputError("--tokens and --hidden go with --tp or --pp")
    import warnings

    from hybrid.bench.validate import resolve_predictor
    from hybrid.cli.output import said_warnings

    with said_warnings():
        engine = resolve_predictor(model_ref, tracking_uri, bundle, roofline, default_bundle=False,
                                   extra_tables=extra_rows)
    from hybrid.workloads.trace_parallel import chain, parallel_job

    model, cat, name = engine.model, engine.catalog, engine.name
    if (device and bundle is None and cat.resolve_device(device, missing_ok=True) is None
            and cat.resolve_system(device, missing_ok=True) is None):
        # a machine profiled with `hybrid profile` (a CPU, a GPU the packaged catalog lacks) is described by its
        # bundle's catalog.toml: name the option besides the catalog file
        raise UnknownDeviceError(f"{cat.unknown_target(device)}; a machine profiled with `hybrid profile` is "
                                 "described by its bundle: --bundle DIR")
    loaded = _load(traces, step)
    loaded, parallel, parallel_info = parallel_job(loaded, dp=dp, tp=tp, pp=pp, tokens=tokens, hidden=hidden)
    if parallel is not None and same is None:
        same = False  # a job the trace did not run: predicted, not re-simulated from its measured host
    fusion = None
    if compiled:
        from hybrid.workloads.trace_fusion import compiled_fusion

        fusion = compiled_fusion()
    from hybrid.workloads.llm.pricing import parse_gpu_hour_prices, rank_compared

    prices = parse_gpu_hour_prices(gpu_hour_price, cat) if gpu_hour_price is not None else None
    others = compare_names(compare, cat)
    from hybrid.data.traces.precision import Fp32Precision

    precision = Fp32Precision(fp32_matmul, fp32_conv)

    from hybrid.workloads.dlrm_graph import resolve_target

    cpu_traces = {t.device for t in loaded} == {"cpu"}
    timed = all(t.has_times for t in loaded)

    def run(target: str) -> tuple[Any, Any]:
        # a parallel job on a CPU keeps the traced host time between ops (a CPU's ops are its host's work; the
        # engine has no launch model to replace it): without it, 2 DDP ranks came out faster than one process
        # (an execution trace alone has no host time to keep: auto stays auto, which resolves to model there)
        host_t = "trace" if (parallel is not None and host == "auto" and cpu_traces and timed
                             and resolve_target(target, cat).device.kind == "cpu") else host
        graph = build_trace_graph(loaded, target, cat, same_device=same, host=host_t,
                                  transform=chain(fusion, parallel), fp32_precision=precision)
        return graph, predict_trace(graph, model, model_name=name, kernel_times=kernel_times)

    stages = int((parallel_info or {}).get("pp", 1))

    def summary_of(pred: Any) -> dict:
        """The prediction's summary; a pipeline's one timeline stands for its ``stages`` GPUs (ranks, cost)."""
        out = pred.summary()
        out["ranks"] = int(out["ranks"]) * stages
        return out

    def cost_of(summary: dict) -> tuple[float | None, float | None]:
        """(GPU-hour price, cost of 1000 steps on all ranks) of a prediction's target; None where no price."""
        if prices is None:
            return None, None
        price = prices.price(summary["target"], summary["device"])
        if price is None:
            return None, None
        return price, price * summary["ranks"] * summary["predicted_ms"] / 3.6e6 * 1000

    from hybrid.errors import DtypeFallbackWarning, TransferWarning

    said = (DtypeFallbackWarning, TransferWarning)  # said below with the other warnings (and in --json)
    with warnings.catch_warnings(record=True) as caught:
        for category in said:
            warnings.simplefilter("always", category)
        it, pred = run(device or system)
    for w in caught:
        if not issubclass(w.category, said):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    s = summary_of(pred)
    if untraced_ms is not None:
        if "measured_ms" not in s:
            raise InvalidInputError("--untraced-ms is compared with the prediction on the traced hardware only: "
                                    f"{s['target']} is not the trace's device (or the trace has no step time)")
        s["untraced_ms"] = float(untraced_ms)
        s["untraced_error_pct"] = (s["predicted_ms"] / untraced_ms - 1.0) * 100.0
        s["untraced_source"] = "given"
    elif "untraced_ms" in s:
        s["untraced_source"] = "recorded"
    s["kernel_times"] = kernel_times
    s["compiled"] = compiled
    s["parallel"] = parallel_info or None
    if prices is not None:
        s["gpu_hour_price"], s["cost_per_1k_steps"] = cost_of(s)
    compared_fallbacks: list[str] = []  # the compared targets' dtype fallbacks, each named by its target
    if others:
        ranking = []
        failed = []
        for other in others:
            try:
                with warnings.catch_warnings():  # the compared targets' own: from their summaries, below
                    warnings.simplefilter("ignore", DtypeFallbackWarning)
                    if other == (device or system):
                        o, o_it = s, it
                    else:
                        o_it, o_pred = run(other)
                        o = summary_of(o_pred)
            except InvalidInputError as exc:  # a target the job cannot run on: ranked last, with the reason
                failed.append({"target": other, "device": "", "ranks": None, "predicted_ms": None,
                               **({"gpu_hour_price": None, "cost_per_1k_steps": None} if prices is not None else {}),
                               "note": str(exc)})
                continue
            row = {"target": o["target"], "device": o["device"], "ranks": o["ranks"], "predicted_ms": o["predicted_ms"],
                   **({k: o[k] for k in ("predicted_ms_low", "predicted_ms_high") if k in o})}
            if prices is not None:
                row["gpu_hour_price"], row["cost_per_1k_steps"] = cost_of(o)
            mem = o.get("memory", {})
            note = ""
            if "fraction" in mem:
                row["memory_pct"] = 100.0 * mem["fraction"]
                if not mem["fits"]:
                    note = f"does not fit: the step's tensors need {mem['fraction']:.1%} of its memory"
                elif mem["near_capacity"]:
                    note = f"near memory capacity ({mem['fraction']:.1%})"
            fallbacks = o.get("dtype_fallbacks", [])
            if fallbacks:  # ops priced in or from another dtype: said in short in the row's note, and in full (a
                # target other than the main one, whose own are said already) as a warning naming the target
                row["dtype_fallbacks"] = fallbacks
                note = "; ".join([note] * bool(note) + [_fallback_brief(f) for f in fallbacks])
                if o is not s:
                    compared_fallbacks += [f"--compare {o['target']}: {f['note']}" for f in fallbacks]
            if o is not s and it.same_device:
                # ops a compared device prices at 0 (unmodelled) or by a lower bound, which the traced target's own
                # prediction (their traced time) does not say
                compared_fallbacks += [f"--compare {o['target']}: {n}" for n in (unmodelled_note(o_it),
                                                                                 lower_bound_note(o_it)) if n]
            ranking.append({**row, "note": note})
        s["compare"], by_cost = rank_compared(ranking + failed, lambda r: r["predicted_ms"] if r["ranks"] else math.inf,
                                              "cost_per_1k_steps", lambda r: bool(r["ranks"]))
        s["compare_ranked_by"] = "cost_per_1k_steps" if by_cost else "predicted_ms"
    from hybrid.data.traces.memory import NEAR_CAPACITY_FRACTION

    notes = [thread_mismatch(loaded, bundle, it.target.device)] if it.same_device else []
    notes += it.info.get("notes", [])
    if s.get("memory", {}).get("fraction", 0.0) > NEAR_CAPACITY_FRACTION:
        notes.append(s["memory"]["note"])
    rec = it.info.get("recording_overhead", {})
    if it.info.get("host") == "trace" and not rec.get("measured") and any(t.device == "cuda" for t in loaded):
        notes.append("the traces do not say what recording cost their host (recorded without `hybrid trace record` "
                     "or before it measured it), so the traced host time, inflated by the profiler, is kept as is: "
                     "re-record with `hybrid trace record`, or use --host model")
    if it.target.device.kind == "cpu" and it.info.get("host") == "model":
        notes.append("the traced host time was dropped and the engine has no launch model for a CPU: the prediction "
                     "holds the ops' compute only, no per-op dispatch or Python time "
                     + ("(an execution trace alone has no host times to keep: link it with the Chrome trace of "
                        "the same step for --host trace)" if not all(t.has_times for t in loaded)
                        else "(keep the traced host with --host trace, or predict the traced CPU itself)" if cpu_traces
                        # a meta-device trace's host times are PyTorch's dispatch of ops that computed nothing
                        else "(a meta-device trace's host times are dispatch of ops that computed nothing, not a "
                        "CPU step's work)" if {t.device for t in loaded} == {"meta"}
                        else "(a GPU trace's host time is its launches, which a CPU does not have: no --host trace)"))
    notes.append(precision_note(s.get("fp32_precision", {})))
    notes.append(unseen_device_note(model, it.target.device, cat))
    notes.append(compiled_note(it, fused=compiled))
    notes.append(unmodelled_note(it))
    notes.append(recurrent_note(it))
    notes.append(lower_bound_note(it))
    if getattr(parallel, "local_collectives", 0):
        notes.append(f"the trace's {parallel.local_collectives} collective(s) ran in a one-process group (DDP in one "
                     "process: they exchanged nothing) and a tensor-parallel job has no gradient all-reduce: they are "
                     "host time only; data parallelism on top of --tp is not modelled (one parallel mode at a time)")
    for fam, n in s.get("unmeasured_families", {}).items():
        hint = "; `hybrid profile --only attention` measures them" if fam == "attention" else ""
        notes.append(f"{n} {fam} op(s) priced without any {fam} measurement in the model (extrapolated from "
                     f"other op kinds, or the roofline){hint}")
    notes += [str(w.message) for w in caught if issubclass(w.category, said)]
    notes += compared_fallbacks
    if "measured_ms" in s and "untraced_ms" not in s:
        notes.append(f"the traced step ({s['measured_ms']:.3f} ms) includes the profiler's recording cost (for a "
                     "small model several times the step), so its error is not the prediction's: give --untraced-ms "
                     "(the step timed without the profiler), or record with `hybrid trace record`, which times it")
    notes = list(dict.fromkeys(w for w in notes if w))
    if notes:
        s["warnings"] = notes
        for w in notes:
            click.echo(f"warning: {w}", err=True)
    if as_json:
        echo_json(s)
        return
    line = f"{s['target']} ({name}): predicted {s['predicted_ms']:.3f} ms per step over {s['ranks']} rank(s)"
    if parallel_info:
        line += " (" + ", ".join(f"{k} {v}" for k, v in parallel_info.items()) + ")"
    if "measured_ms" in s:
        line += f"; traced step {s['measured_ms']:.3f} ms ({s['error_pct']:+.1f}%)"
    if "untraced_ms" in s:
        how = "as given (--untraced-ms)" if s.get("untraced_source") == "given" else "timed when recorded"
        line += f"; untraced step {s['untraced_ms']:.3f} ms ({s['untraced_error_pct']:+.1f}%; {how}, without the profiler)"
    click.echo(line)
    if "predicted_ms_low" in s:
        click.echo(f"80% interval: {s['predicted_ms_low']:.3f} - {s['predicted_ms_high']:.3f} ms (every op at the low / "
                   "high end of its interval: how far the op costs can be off)")
    if "predicted_ms_e2e_low" in s:
        click.echo(e2e_line([f"{s['predicted_ms_e2e_low']:.3f} - {s['predicted_ms_e2e_high']:.3f} ms "
                             f"({s['workload_kind']} step)"], s, f"{s['workload_kind']} figures"))
    if s.get("memory"):
        click.echo(memory_line(s["memory"]))
    bd = pred.breakdown(s["breakdown_rank"])
    if s["ranks"] > 1 and pred.iteration.graph.n_ranks > 1:
        click.echo(f"per family on rank {s['breakdown_rank']}, the rank that finishes last (one rank's time, "
                   "comparable with the step):")
    measured_col = "measured_us" in bd.columns and it.same_device
    rows = [[r["label"], int(r["nodes"]), r["predicted_us"] / 1e3] + ([r["measured_us"] / 1e3] if measured_col else [])
            for _, r in bd.iterrows()]
    # a step with nothing that takes time (views only, say) has no family to list: an empty table, not an IndexError
    echo_table(rows, ["family", "nodes", "predicted_ms"] + (["measured_ms"] if measured_col else []))
    total_ms = float(bd["predicted_us"].sum()) / 1e3 if len(bd) else 0.0
    if total_ms > 1.01 * s["predicted_ms"]:
        # the families are the rank's work on all its streams and threads (GPU streams beside the host; gloo's
        # worker threads beside the main one), which run at the same time: their sum is no share of the step
        click.echo(f"(the families sum to {total_ms:.3f} ms over a {s['predicted_ms']:.3f} ms step: the rank's "
                   "streams and threads run side by side)")
    if rec.get("measured") and rec.get("kept"):
        click.echo(f"recording overhead taken off the traced host (measured when recorded): "
                   f"{rec['per_event_us']:.2f} us per event + {rec['per_input_us']:.2f} us per input + "
                   f"{rec['per_launch_us']:.2f} us per launch; {sum(rec['in_units_ms']):.3f} ms inside ops, gaps kept "
                   "at " + "/".join(f"{x:.0%}" for x in rec["gap_share"]))
    ma = s.get("math_attention")
    if ma and (ma.get("ops") or ma.get("casts")):  # kept in fp32 on a CPU target: a warning above
        click.echo(f"attention math fallback in {ma['dtype']} (upcast to fp32 where it was traced): {ma['ops']} op(s) "
                   f"priced in {ma['dtype']} on the GPU, {ma['casts']} cast(s) to and from fp32 left out"
                   + (f" (over all {pred.iteration.graph.n_ranks} ranks)" if pred.iteration.graph.n_ranks > 1 else ""))
    line = precision_line(s.get("fp32_precision", {}))
    if line:
        click.echo(line + (f" (op counts over all {pred.iteration.graph.n_ranks} ranks)"
                           if pred.iteration.graph.n_ranks > 1 else ""))
    if s.get("cost_per_1k_steps") is not None:
        click.echo(f"at {s['gpu_hour_price']:g} per GPU-hour: {s['cost_per_1k_steps']:.4g} per 1000 steps "
                   f"({s['ranks']} rank(s))")
    if "compare" in s:
        by_cost = s["compare_ranked_by"] == "cost_per_1k_steps"
        click.echo("\ntargets by " + ("cost of 1000 steps (lowest first):" if by_cost else
                                     "predicted step time (fastest first):"))
        dash = "-"
        echo_table([[r["target"], r["device"], dash if r["ranks"] is None else r["ranks"],
                     dash if r["predicted_ms"] is None else f"{r['predicted_ms']:.3f}",
                     *([dash if r["gpu_hour_price"] is None else f"{r['gpu_hour_price']:g}",
                        dash if r["cost_per_1k_steps"] is None else f"{r['cost_per_1k_steps']:.4g}"]
                       if prices is not None else []), r["note"]] for r in s["compare"]],
                   ["target", "device", "ranks", "predicted_ms",
                    *(["GPU-hour price", "per 1000 steps"] if prices is not None else []), "note"])
    unm = s["unmodelled"]
    n_graph = pred.iteration.graph.n_ranks
    # unlike the per-family table (one rank's), the op lists count every rank's ops (a rank may have its own)
    where = f"in the trace, over all {n_graph} ranks together" if n_graph > 1 else "in the trace"
    timed = all(t.has_times for t in loaded)  # an execution trace alone has no times: say so, not "0.000 ms"

    def ms(x: float) -> str:
        return f" {x:.3f} ms" if timed else ""

    if not timed:
        where = "(no times: an execution trace alone)"
    if unm["ops"]:
        how = ("costed at their trace time" if unm["costed_as"] == "trace time"
               else "not costed on this target (0 ms)" if unm["costed_as"].startswith("not costed")
               else f"costed as {unm['costed_as']}")
        click.echo(f"unmodelled: {unm['ops']} op(s),{ms(unm['measured_ms'])} {where}, {how}: "
                   + ", ".join(f"{r['name']} x{r['count']}{ms(r['measured_us'] / 1e3)}" for r in unm["by_name"][:8]))
    own = unm.get("own_time", {})
    if own.get("ops"):
        click.echo(f"unmapped ops around costed ones: {own['ops']} op(s),{ms(own['measured_ms'])} {where} "
                   f"outside the ops they call (dispatch, or work of their own), {own['costed_as']}: "
                   + ", ".join(f"{r['name']} x{r['count']}{ms(r['measured_ms'])}" for r in own["by_name"][:5]))
    if not roofline:  # the roofline by default (no --model or --bundle), not because --roofline asked for it
        roofline_note(name)


def unseen_device_note(model: Any, device: Any, catalog: Any) -> str | None:
    """A note when the calibrated model never measured the target device: its kernel corrections transfer from
    the devices it saw (wider intervals). A model that measured no device of the target's kind (a GPU priced by a
    CPU profile) is said by the prediction itself (:class:`~hybrid.errors.TransferWarning`), not here."""
    seen = [str(d) for d in getattr(model, "devices_seen", None) or []]
    if not seen or device.key in seen:
        return None
    kinds = {catalog.devices[k].kind for d in seen if (k := catalog.resolve_device(d, missing_ok=True))}
    if kinds and device.kind not in kinds:
        return None
    text = f"the model was fitted on no measurement of {device.key} (it saw {', '.join(seen[:6])}"
    text += ", ...)" if len(seen) > 6 else ")"
    return text + ": its corrections transfer from those devices (the unseen-device interval band)"


#: Unmodelled units of a torch.compile step: Inductor's generated code (CPU), its Triton kernels, Dynamo's steps.
COMPILED_UNIT_RE = r"CompiledFxGraph|cpp_fused|triton_|TorchDynamo|Pregraph bytecode|AOTDispatcher"


def compiled_note(it: Any, fused: bool = False) -> str | None:
    """A warning when a torch.compile step is predicted on another device: its fused code has no op to cost, so
    it is left out (0 ms); tracing the model eagerly and predicting with --compiled costs it (``fused``: --compiled
    was given, on a trace already compiled: --compiled fuses eager ops, which this trace does not have)."""
    if it.same_device:
        return None
    unm = it.unmodelled()
    if not len(unm):
        return None
    hit = unm[unm["name"].astype(str).str.contains(COMPILED_UNIT_RE)]
    if not len(hit):
        return None
    timed = all(t.has_times for t in it.traces)  # an execution trace alone: no times to say
    traced = f"{hit['measured_us'].sum() / 1e3:.3f} ms traced" if timed else "no times: an execution trace alone"
    return (f"a torch.compile step: {int(hit['count'].sum())} unit(s) of its generated code and Dynamo's steps "
            f"({traced}) have no ops to cost on this target and are left out "
            "(0 ms), so the prediction holds only the ops they call (GEMMs) and those outside them; trace the "
            "model without torch.compile and predict with --compiled for a fused step"
            + (" (--compiled fuses a trace's eager ops, and this trace was recorded compiled)" if fused else ""))


#: Share of the traced step in ops no family models, priced at 0 on another device, from which a warning says so.
UNMODELLED_WARN_SHARE = 0.05


def unmodelled_note(it: Any) -> str | None:
    """A warning when ops no family models (priced at 0 on another device) took at least
    :data:`UNMODELLED_WARN_SHARE` of the traced step: the prediction is low by about their time on the target; a
    torch.compile step's generated code has :func:`compiled_note`."""
    import numpy as np

    if it.same_device:
        return None
    unm = it.unmodelled()
    if not len(unm):
        return None
    unm = unm[~unm["name"].astype(str).str.contains(COMPILED_UNIT_RE)]
    steps = float(sum(t.step_us for t in it.traces))  # every rank's step: the unmodelled times are every rank's
    lost = float(unm["measured_us"].sum())
    if not (np.isfinite(steps) and steps > 0 and lost >= UNMODELLED_WARN_SHARE * steps):
        return None
    top = unm.sort_values("measured_us", ascending=False).head(3)
    names = ", ".join(f"{r['name']} x{int(r['count'])}" for _, r in top.iterrows())
    return (f"{lost / steps:.0%} of the traced step ({lost / 1e3:.3f} ms) is in ops no op family models ({names}), "
            "priced at 0 on this target: the prediction is low by about their time there")


def recurrent_note(it: Any) -> str | None:
    """A warning when recurrent layers (:data:`hybrid.data.traces.opmap.RECURRENT_OPS`) are priced on a GPU: each
    is one batched GEMM row of its T steps, but the steps run in series, each a small, latency-bound kernel, so the
    prediction leaves out about one kernel latency per step (a lower bound there; on a CPU the steps' GEMMs are
    compute-bound and the row holds)."""
    from hybrid.data.traces.opmap import RECURRENT_OPS

    if it.target.device.kind == "cpu" or not len(it.units):
        return None
    rows = [r for r in it.units["row"] if isinstance(r, dict) and r.get("variant") in RECURRENT_OPS]
    if not rows:
        return None
    steps = int(sum(int(r.get("b", 1)) for r in rows))
    lat = float(it.target.device.kernel_latency_us)
    return (f"{len(rows)} recurrent layer op(s) are priced as one batched GEMM of their {steps} steps in all; the "
            f"steps run in series as small kernels, so the prediction leaves out about {steps} x "
            f"{lat:g} us = {steps * lat / 1e3:.3f} ms of per-step kernel latency on this GPU (a lower bound)")


def lower_bound_note(it: Any) -> str | None:
    """A warning when ops priced by a first-order count that no profile measures run on another device than the
    traced one: LAPACK factorisations and solves (label ``linalg``, :func:`hybrid.data.traces.opmap._map_linalg`:
    the textbook FLOP count at the device's FP32 / FP64 rate, while blocked factorisations run their panels far
    below peak, most of all small ones on a GPU) and CTC losses (label ``ctc``, ``_map_ctc``: scalar dependent
    cells, a GPU's T steps in series). On the traced device the measured time per family shows how far off they
    are."""
    if it.same_device or not len(it.units):
        return None
    parts = []
    for label, what in (("linalg", "LAPACK factorisation/solve"), ("ctc", "CTC loss")):
        u = it.units[it.units["label"] == label]
        if len(u):
            counts = u["name"].map(lambda n: str(n).split("::", 1)[-1].split(".", 1)[0]).value_counts()
            parts.append(f"{len(u)} {what} op(s) ({', '.join(f'{n} x{c}' for n, c in counts.head(4).items())})")
    if not parts:
        return None
    return (f"{' and '.join(parts)} are priced by their FLOP and byte counts at this device's peak rates (FP32/FP64 "
            "units, no tensor cores): a lower bound, since these algorithms run far below peak (sequential panels "
            "or time steps) and no profile measures them")


def memory_line(m: dict[str, Any]) -> str:
    """One text line for ``trace predict``'s ``memory`` entry."""
    from hybrid.data.traces.memory import NEAR_CAPACITY_FRACTION

    if "peak_gib" not in m:
        return f"memory: {m.get('note', 'not measured')}"
    from hybrid.units import format_bytes

    def size(gib: float) -> str:  # a small model's MiB, not "0.00 GiB"
        return format_bytes(gib * 2**30)

    line = (f"memory: peak {size(m['peak_gib'])} of tensors (resident {size(m['resident_gib'])} + step "
            f"{size(m['step_gib'])}; measured on {m['traced_on']} when recorded, largest rank)")
    if "fraction" in m:
        line += f" = {m['fraction']:.1%} of the device's {m['capacity_gib']:.1f} GiB"
        if m["fraction"] <= NEAR_CAPACITY_FRACTION:
            line += " (runtime context and workspaces not counted)"
    return line


@trace.command("kernels")
@click.argument("traces", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False), callback=named,
              help="Where to write the measurement rows (the canonical table: .csv or .parquet).")
@click.option("--device", default=None, callback=named_device,
              help="Catalog GPU the traces ran on (default: the GPU name the traces record).")
@click.option("--step", type=int, default=None, help="ProfilerStep#N to use (default: the first one).")
def kernels(traces: tuple[str, ...], output: str, device: str | None, step: int | None) -> None:
    """Measurement rows from GPU traces (each TRACE one recorded step: a directory, or its files: the Chrome trace
    and execution trace of one recording are read together when they sit in the same directory): every op the
    families cost, timed by its CUPTI kernels (kernel-only, framework "cupti"); identical rows merged. Calibrate
    on them like a profile (hybrid calibrate ROWS.csv ...)."""
    from hybrid.data.schema import check_table_path, write_table
    from hybrid.workloads.trace_kernels import kernel_rows

    check_table_path(output)
    # one traced step per directory given, and per directory holding the files given (a Chrome trace and its
    # execution trace are one recording), not one rank of a single step; a path given twice counts once
    steps: dict[Path, list[str]] = {}
    skipped = 0
    for path in traces:
        p = Path(path).resolve()
        key = p if p.is_dir() else p.parent
        group = steps.setdefault(key, [])
        if group == [str(key)] or str(p) in group:  # its directory, or the path itself, is already given
            skipped += 1
        elif p.is_dir():
            skipped += len(group)
            steps[key] = [str(p)]  # the directory holds the files given of it
        else:
            group.append(str(p))
    if skipped:
        click.echo("warning: a trace given twice (or a file and its directory) is read once", err=True)
    from hybrid.cli.output import said_warnings

    with said_warnings():  # --device relabelling another GPU's traces: said
        table = kernel_rows([tr for group in steps.values() for tr in _load(tuple(group), step)], device=device)
    write_table(table, output, validate_rows=False)
    n = int(table["repeats"].sum())
    click.echo(f"{len(table)} distinct op rows ({n} traced ops, {table['op'].nunique()} op kinds, device "
               f"{', '.join(sorted(table['device'].astype(str).unique()))}) -> {output}")


class _RecordCommand(click.Command):
    """``trace record``: an option it does not know is most likely the script's own, given without ``--``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            exc.message = (f"{exc.message.rstrip('.')} of `hybrid trace record`; the script's own options go after "
                           f"`--`: hybrid trace record SCRIPT -o DIR -- {exc.option_name} ...")
            raise


@trace.command("record", cls=_RecordCommand)
@click.argument("script", type=click.Path(exists=True, dir_okay=False))
@click.argument("script_args", nargs=-1)
@click.option("-o", "--output", "out_dir", default="traces", show_default=True, type=click.Path(file_okay=False),
              callback=named)
@click.option("--step-fn", default="step", show_default=True, help="Function of SCRIPT that runs one step.")
@click.option("--warmup", type=int, default=2, show_default=True, help="Untraced steps first.")
@click.option("--no-et", is_flag=True, help="Chrome trace only (no execution trace).")
@click.option("--threads", type=int, default=None,
              help="PyTorch intra-op threads for the step (match the profile bundle you predict with, e.g. 1).")
@click.option("--no-overhead", is_flag=True,
              help="Do not measure what recording costs the host (by default ~1-3 s of small op loops, stored in "
                   "the Chrome trace and taken off the traced host times by `trace predict`).")
@click.option("--no-memory", is_flag=True,
              help="Do not measure the step's tensor memory (by default the step runs once more, after the traced "
                   "call, under a mode that counts its tensors; `trace predict` compares the peak with the target's "
                   "memory).")
@click.option("--timed", type=int, default=3, show_default=True,
              help="Untraced calls timed after the warm-up: their median, stored in the trace, is the step without "
                   "the profiler, which `trace predict` compares with on the traced hardware (0: none).")
def record(script: str, script_args: tuple[str, ...], out_dir: str, step_fn: str, warmup: int, no_et: bool,
           threads: int | None, no_overhead: bool, no_memory: bool, timed: int) -> None:
    """Run SCRIPT (its top level builds the model), then trace one call of its step function.

    SCRIPT_ARGS go to the script after `--` (`hybrid trace record train.py -o out -- --batch 32`): without it,
    an option of this command among them (-o, --warmup, ...) is taken as this command's."""
    import warnings

    from hybrid.cli.output import report_warnings
    from hybrid.data.traces.record import record_script

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        paths = record_script(script, out_dir, step_fn=step_fn, warmup=warmup, execution_trace=not no_et,
                              args=list(script_args), threads=threads, measure_overhead=not no_overhead,
                              memory=not no_memory, timed=timed)
    ours = [w for w in caught if Path(w.filename).resolve().is_relative_to(Path(__file__).resolve().parents[1])]
    for w in caught:  # the script's own warnings as Python shows them; the recording's as warning: lines
        if w not in ours:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    click.echo("wrote " + ", ".join(str(p) for p in paths.values()))
    report_warnings(ours)
