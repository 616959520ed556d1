"""``hybrid simulate CONFIG``: one DLRM training iteration through the multi-rank critical-path engine."""

from __future__ import annotations

from typing import Any

import click

from hybrid.cli.output import e2e_line, echo_json, echo_table, named, roofline_note


def load_cost_model(model_ref: str | None, tracking_uri: str | None) -> tuple[Any, str]:
    """(cost model, its name): a calibrated predictor from the tracking store, else the roofline-only one."""
    from hybrid.engine.costs import default_cost_model

    if not model_ref:
        return default_cost_model(), "roofline"
    from hybrid.tracking.registry import load_predictor

    loaded = load_predictor(model_ref, tracking_uri=tracking_uri)
    return loaded.predictor, str(loaded.ref)


def check_gpus_option(gpus: int | None) -> None:
    """``--gpus`` checked as the option it is (a value past what is priced was said to be the config file's)."""
    from hybrid.errors import InvalidInputError
    from hybrid.workloads.dlrm import MAX_INT_PRICED

    if gpus is not None and gpus <= 0:
        raise InvalidInputError(f"--gpus must be positive, got {gpus}")
    if gpus is not None and gpus > MAX_INT_PRICED:
        raise InvalidInputError(f"--gpus {gpus} is too large: hybrid prices integers up to 10**18")


def load_config(path: str, gpus: int | None = None, system: str | None = None, drop_plan: bool = False,
                warned: list[str] | None = None):
    """A DLRM config with CLI overrides; ``drop_plan`` ignores the file's plan (e.g. when ranks change).

    What of the config no published run does (:class:`~hybrid.errors.WorkloadWarning`, e.g. an fp8 training dtype)
    is printed as ``warning:`` lines, each once, and added to ``warned`` (for ``--json`` ``notes``)."""
    import warnings
    from pathlib import Path

    from hybrid.errors import WorkloadWarning
    from hybrid.workloads.dlrm import DLRMConfig, load_document

    if not Path(path).exists():
        variant_hint(path)
    doc = load_document(path, what="DLRM config")
    if isinstance(doc, dict) and drop_plan:
        doc = {k: v for k, v in doc.items() if k != "plan"}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", WorkloadWarning)
            config = DLRMConfig.from_dict(doc, gpus=gpus, system=system)
    except Exception as exc:
        from hybrid.errors import HybridError

        if isinstance(exc, HybridError):
            raise type(exc)(f"{path}: {exc}") from None
        raise
    for w in caught:
        if not issubclass(w.category, WorkloadWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            continue
        msg = f"{path}: {w.message}"
        if warned is None or msg not in warned:
            click.echo(f"warning: {msg}", err=True)
            if warned is not None:
                warned.append(msg)
    return config


def config_target(config: Any, catalog: Any, path: str, system: str | None) -> Any:
    """The config's system resolved in ``catalog`` (:func:`hybrid.workloads.dlrm_graph.resolve_target`); a name the
    catalog does not know is an error naming where it came from: ``--system`` or the config file."""
    from hybrid.errors import UnknownDeviceError
    from hybrid.workloads.dlrm_graph import resolve_target

    try:
        return resolve_target(config.system, catalog)
    except UnknownDeviceError as exc:
        raise UnknownDeviceError(f"{'--system' if system else path}: {exc}") from None


def variant_hint(path: str) -> None:
    """A missing CONFIG that names a built-in variant (``hybrid simulate mlperf``): an error saying how a config
    uses it; any other name returns (the plain "file not found" follows)."""
    from hybrid.errors import InvalidInputError
    from hybrid.workloads.dlrm_variants import resolve_variant

    try:
        v = resolve_variant(path)
    except InvalidInputError:
        return
    raise InvalidInputError(
        f"DLRM config file not found: {path}; {v.name} is a built-in DLRM variant: write a config with "
        f"`variant: {v.name}` and the keys to override (system, gpus, batch_size_per_gpu, dtype, ...), e.g. "
        "experiments/configs/dlrm_mlperf_dgx_a100.yaml")


def model_options(fn):
    fn = click.option("--tracking-uri", envvar="MLFLOW_TRACKING_URI",
                      help="MLflow store holding --model (default: local store).")(fn)
    return click.option("--model", "model_ref", default=None, callback=named,
                        help="Calibrated model (NAME, NAME/3, models:/NAME/3); default: analytical only.")(fn)


def breakdown_rows(summary: dict[str, Any], limit: int = 16) -> list[list[Any]]:
    """Per-rank rows of the breakdown table: every rank, or the ``limit`` busiest (by compute) of a larger job."""
    ranks = summary["ranks"]
    shown = ranks if len(ranks) <= limit else sorted(ranks, key=lambda r: -r["compute_us"])[:limit]
    return [[r["rank"], r["compute_us"], r["comm_us"], r["exposed_comm_us"], r["idle_us"], r["host_us"],
             r["collective_wait_us"]] for r in shown]


def echo_breakdown(summary: dict[str, Any], limit: int = 16) -> None:
    """The per-rank table, saying so when it shows only the busiest ranks."""
    n = len(summary["ranks"])
    if n > limit:
        click.echo(f"the {limit} ranks with the most compute of {n} (all of them: --json)")
    echo_table(breakdown_rows(summary, limit), BREAKDOWN_HEADERS)


#: Share of the critical path above which an iteration is host-bound: set by the host's work (kernel launches,
#: framework dispatch, CPU ops), so that a faster GPU does not shorten it (``simulate`` says so).
HOST_BOUND_SHARE = 0.5


def host_bound_note(critical_path: dict[str, float]) -> str | None:
    """The note ``hybrid simulate`` gives when more than :data:`HOST_BOUND_SHARE` of the critical path is host work
    (its ``cpu`` time), else None."""
    total = float(sum(critical_path.values()))
    host = float(critical_path.get("cpu", 0.0))
    if not total > 0 or host / total <= HOST_BOUND_SHARE:
        return None
    return (f"the iteration is host-bound: {host / total:.0%} of its critical path ({host / 1e3:.3f} of "
            f"{total / 1e3:.3f} ms) is host work (kernel launches, framework dispatch, CPU ops), so a faster GPU "
            "will not show in it; its host costs are the engine's default per-launch constants (a calibrated --model "
            "sets one launch to the eager dispatch it measured on that GPU, else 15 us; fit them on measured runs with "
            "`hybrid bench validate --save-overheads`), and CUDA graphs (fewer launches) would change the run")


BREAKDOWN_HEADERS = ["rank", "compute_us", "comm_us", "exposed_comm_us", "idle_us", "host_us", "wait_us"]


def host_mem_option(fn):
    """``--host-mem-gib``: the host memory per node the check of tables placed there uses, instead of the catalog's."""
    return click.option("--host-mem-gib", "host_mem_gib", type=float, default=None,
                        help="Host (CPU) memory per node in GiB for the check of embedding tables placed there "
                             "(embedding_placement host/auto), instead of the catalog's figure (a DGX datasheet; "
                             "HGX servers borrow it).")(fn)


def host_mem_bytes(host_mem_gib: float | None) -> float | None:
    """``--host-mem-gib`` in bytes (None: the catalog's), checked: a finite number > 0."""
    from hybrid.sharding.memory import check_host_mem

    return None if host_mem_gib is None else check_host_mem(host_mem_gib, "--host-mem-gib") * 2**30


#: What a run given --host-mem-gib says when no table went to host memory (the figure checked nothing).
HOST_MEM_UNUSED_NOTE = ("--host-mem-gib checked nothing: no table is placed in host memory (embedding_placement hbm, "
                        "or every table fits the GPUs)")


def host_memory_line(hm: dict[str, Any]) -> str:
    """One line of a :meth:`~hybrid.sharding.memory.MemoryReport.host_memory_summary`: what each node holds of the
    tables in host memory, against what share of how much, and where that figure comes from."""
    nodes = ", ".join(f"node {i} {b / 2**30:.1f} GiB" + ("" if ok else " (does not fit)")
                      for i, (b, ok) in enumerate(zip(hm["per_node_bytes"], hm["fits_per_node"], strict=True)))
    cap = hm["capacity_per_node_bytes"]
    if not cap:
        return f"host memory (tables placed there): {nodes} ({hm['source_note']})"
    return (f"host memory (tables placed there): {nodes} of {cap / 2**30:.0f} GiB per node "
            f"({hm['usable_share']:.0%} usable; source: {hm['source_note']})")


@click.command("simulate")
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False), default=None, callback=named,
              help="Sharding plan (YAML/JSON); default: the config's `plan`, else size-lookup greedy.")
@click.option("--gpus", type=int, default=None, help="Override the config's number of ranks.")
@click.option("--system", default=None, callback=named, help="Override the config's system (catalog system or device).")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None, callback=named,
              help="Write the timeline as Chrome trace JSON (open in Perfetto or chrome://tracing).")
@host_mem_option
@click.option("--overlap-iterations", is_flag=True,
              help="The framework overlaps consecutive iterations (a training pipeline such as HugeCTR's overlapped "
                   "pipeline): report the steady state, each rank's busiest resource (compute, network or host), "
                   "instead of one iteration's critical path.")
@click.option("--prefetch-input-dist", is_flag=True,
              help="The trainer distributes the next batch's indices during this iteration (TorchRec's "
                   "TrainPipelineSparseDist, HugeCTR's inter-iteration overlap): the index all-to-alls run on a "
                   "stream of their own and the lookups do not wait for them.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@model_options
def simulate(config_path: str, plan_path: str | None, gpus: int | None, system: str | None,
             trace_path: str | None, host_mem_gib: float | None, overlap_iterations: bool, prefetch_input_dist: bool,
             as_json: bool, model_ref: str | None, tracking_uri: str | None) -> None:
    """Predict one training iteration of the DLRM in CONFIG and show the per-rank breakdown."""
    from hybrid.engine.costs import model_catalog
    from hybrid.engine.simulate import simulate as run
    from hybrid.engine.trace import write_chrome_trace
    from hybrid.errors import InvalidInputError
    from hybrid.sharding.heuristics import default_plan
    from hybrid.sharding.memory import memory_per_rank
    from hybrid.sharding.plan import ShardingPlan
    from hybrid.workloads.dlrm_graph import build_dlrm_graph, check_target, collective_target

    host_mem = host_mem_bytes(host_mem_gib)  # checked before anything is read or written
    check_gpus_option(gpus)
    warned: list[str] = []  # the config's WorkloadWarnings (printed as they come; --json notes)
    config = load_config(config_path, system=system, drop_plan=bool(plan_path), warned=warned)
    notes = []
    if gpus is not None and gpus != config.gpus:
        # the config's plan was written for its own rank count: plan afresh for the new one, and say so; a plan
        # that names no rank (every table data-parallel) is the same plan on any count, and is kept
        keep = config.plan is not None and config.plan.rank_free
        if config.plan is not None and not keep:
            notes.append(f"the config's plan is for {config.gpus} ranks; {gpus} ranks use the size-lookup greedy "
                         "plan (give --plan for another)")
        config = load_config(config_path, gpus=gpus, system=system, drop_plan=not keep or bool(plan_path),
                             warned=warned)
    model, model_name = load_cost_model(model_ref, tracking_uri)
    catalog = model_catalog(model)
    target, coll_note = collective_target(config_target(config, catalog, config_path, system), catalog,
                                          config.gpus)
    notes += [coll_note] * bool(coll_note) + check_target(config, target, catalog)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    capacity = target.device.mem_capacity

    if plan_path:
        plan = ShardingPlan.from_file(plan_path)
        try:
            plan = plan.validate(config)
        except InvalidInputError as exc:
            hint = (f"; give --gpus {plan.min_gpus} to simulate it on {plan.min_gpus} ranks"
                    if plan.min_gpus > config.gpus else "")
            raise InvalidInputError(f"{plan_path}: {exc}{hint}") from None
        plan_source = str(plan_path)
    elif config.plan is not None:
        plan, plan_source = config.plan, "config"
    else:
        try:
            plan = default_plan(config.with_(plan=None), capacity)
        except InvalidInputError as exc:  # the default planner found no table-wise placement: say for which config
            raise InvalidInputError(f"{config_path}: {exc}") from None
        plan_source = "size_lookup_greedy (default)"
    memory = memory_per_rank(config.with_(plan=None), plan, capacity, host_mem_per_node=host_mem, catalog=catalog)

    if not memory.fits:
        raise InvalidInputError(f"{config_path}: plan does not fit: {memory.reason} (plan: {plan_source})")
    iteration = build_dlrm_graph(config.with_(plan=None), plan, catalog, overlap_iterations=overlap_iterations,
                                 prefetch_input_dist=prefetch_input_dist)
    for note in iteration.info.get("notes", []):  # what the graph says of itself (e.g. a GPU coalesce's hot rows)
        if note not in notes:
            click.echo(f"note: {note}", err=True)
            notes.append(note)
    result = run(iteration.graph, model)
    summary = result.summary()
    from hybrid.engine.form_error import e2e_interval

    summary.update(e2e_interval(summary, "training"))  # the op-cost interval widened by the form-error margin
    summary.update({"config": config.name, "system": iteration.target.system, "device": iteration.target.device.key,
                    "gpus": config.gpus, "model": model_name, "plan_source": plan_source,
                    "shard_types": plan.type_counts(), "peak_memory_bytes": memory.peak,
                    "memory_per_rank_bytes": [float(x) for x in memory.per_rank["total"]],  # as shard --json
                    "samples_per_s": config.global_batch / (result.iteration_us * 1e-6)})
    host_bound = host_bound_note(summary["critical_path"])
    if host_bound is not None:
        notes.append(host_bound)
    notes = warned + notes
    host_memory = memory.host_memory_summary()  # tables placed in host memory: what each node holds there
    if host_memory is not None:
        summary["host_memory"] = host_memory
    elif host_mem is not None:
        click.echo(f"note: {HOST_MEM_UNUSED_NOTE}", err=True)
        notes.append(HOST_MEM_UNUSED_NOTE)
    if notes:
        summary["notes"] = notes
    if model_ref and "iteration_us_low" not in summary:
        from hybrid.cli.output import NO_INTERVAL_NOTE

        summary["interval_note"] = NO_INTERVAL_NOTE.format(what="iteration")
    if "interval_note" in summary:
        click.echo(f"warning: {summary['interval_note']}", err=True)
    if trace_path:
        write_chrome_trace(result, trace_path, name=f"{config.name} on {config.gpus}x {iteration.target.system}")
        summary["trace"] = str(trace_path)
    if as_json:
        echo_json(summary)
        return
    click.echo(f"{config.name}: {config.gpus} x {iteration.target.device.key} ({iteration.target.system}), "
               f"model {model_name}, plan {plan_source}")
    click.echo(f"iteration: {result.iteration_us / 1e3:.3f} ms   throughput: {summary['samples_per_s']:,.0f} samples/s"
               f"   peak memory/rank: {memory.peak / 2**30:.2f} GiB")
    if result.info.get("overlap_iterations"):
        click.echo(f"steady state of overlapped iterations: bound by the {result.info['bound_by']}; one iteration "
                   f"alone (its critical path) {result.info['single_iteration_us'] / 1e3:.3f} ms")
    if "iteration_us_low" in summary:
        click.echo(f"80% interval: {summary['iteration_us_low'] / 1e3:.3f} - {summary['iteration_us_high'] / 1e3:.3f} ms "
                   "(every op at the low / high end of its interval: how far the op costs can be off, not the "
                   "schedule; published GPU runs fell inside 92% of the time at a median width of 2.0x, multi-node ones 23 of 25, "
                   "experiments/dlrm_gpu)")
    if "iteration_us_e2e_low" in summary:
        click.echo(e2e_line([f"{summary['iteration_us_e2e_low'] / 1e3:.3f} - {summary['iteration_us_e2e_high'] / 1e3:.3f}"
                             " ms"], summary, "iterations"))
    if "host_memory" in summary:
        click.echo(host_memory_line(summary["host_memory"]))
    cp = summary["critical_path"]
    click.echo("critical path: " + ", ".join(f"{k} {v / 1e3:.3f} ms" for k, v in cp.items()))
    if host_bound is not None:
        click.echo(f"note: {host_bound}")
    echo_breakdown(summary)
    if trace_path:
        click.echo(f"trace written to {trace_path}")
    roofline_note(model_name)
