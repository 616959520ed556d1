"""``hybrid shard CONFIG``: rank sharding plans by predicted iteration time."""

from __future__ import annotations

import math

import click

from hybrid.cli.output import echo_json, echo_table, named, roofline_note
from hybrid.cli.simulate import (
    HOST_MEM_UNUSED_NOTE,
    check_gpus_option,
    config_target,
    echo_breakdown,
    host_mem_bytes,
    host_mem_option,
    host_memory_line,
    load_config,
    load_cost_model,
    model_options,
)

#: Said when the config has a (valid) plan of its own: shard does not start from it.
OWN_PLAN_NOTE = ("the config's plan is not among the candidates: shard searches plans of its own (hybrid simulate "
                 "CONFIG predicts the config's)")


def shown_plans(result, top: int) -> list:
    """The ``top`` fastest evaluations, then any other whose 80% interval overlaps the best plan's (named in
    ``overlapping_best``: a plan said to be as good as the best is shown with its times)."""
    return list(result.evaluations[:top]) + [e for e in result.evaluations[top:] if e.overlaps_best]


@click.command("shard")
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.option("--gpus", type=int, default=None, help="Number of ranks (default: the config's).")
@click.option("--system", default=None, callback=named, help="Catalog system or device (default: the config's).")
@click.option("--top", "top", type=int, default=5, show_default=True,
              help="How many plans to show (and any other whose 80% interval overlaps the best plan's).")
@click.option("--strategy", "strategies", multiple=True,
              help="Strategies to run (repeatable): size_greedy, lookup_greedy, size_lookup_greedy, random, "
                   "greedy, search. Default: all.")
@click.option("--time-budget", type=float, default=20.0, show_default=True, help="Seconds for local search.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the random baseline (a non-negative integer).")
@click.option("--output", "output", type=click.Path(dir_okay=False), default=None, callback=named,
              help="Write the best plan here (YAML or JSON by extension).")
@host_mem_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@model_options
def shard(config_path: str, gpus: int | None, system: str | None, top: int, strategies: tuple[str, ...],
          time_budget: float, seed: int, output: str | None, host_mem_gib: float | None, as_json: bool,
          model_ref: str | None, tracking_uri: str | None) -> None:
    """Search embedding sharding plans for the DLRM in CONFIG; show the fastest, with per-rank breakdown."""
    from hybrid.errors import InvalidInputError
    from hybrid.hardware.cpu import available_memory_bytes
    from hybrid.sharding.search import STRATEGIES, check_search_size, search_plans
    from hybrid.workloads.dlrm import check_document_path
    if top <= 0:
        raise InvalidInputError("--top must be positive")
    names = [s.strip() for item in strategies for s in item.split(",") if s.strip()]
    if strategies and not names:  # `--strategy "$S"` with S unset ran every strategy
        raise InvalidInputError(f"--strategy names no strategy (got {', '.join(map(repr, strategies))}); known: "
                                f"{', '.join(STRATEGIES)}")
    if not math.isfinite(time_budget) or time_budget < 0:  # refused before the config is read, not after
        raise InvalidInputError(f"--time-budget must be a finite number of seconds >= 0, got {time_budget}")
    unknown = [s for s in names if s not in STRATEGIES]
    if unknown:
        raise InvalidInputError(f"unknown strategy {unknown[0]!r}; known: {', '.join(STRATEGIES)}")
    check_gpus_option(gpus)
    host_mem = host_mem_bytes(host_mem_gib)
    if output:
        check_document_path(output)  # before the search, not after it
    # the file's own plan is checked as simulate checks it (against the file's GPU count: an invalid one is an
    # error, not silently dropped); the search then plans afresh
    warned: list[str] = []  # the config's WorkloadWarnings (printed as they come; --json notes)
    own = load_config(config_path, system=system, warned=warned)
    config = load_config(config_path, gpus=gpus, system=system, drop_plan=True, warned=warned)
    # checked here too (search_plans checks again) to spell the way out as this command's options
    need = check_search_size(config.gpus, names, available_memory_bytes(), cli=True, gpus_option=gpus is not None)
    model, model_name = load_cost_model(model_ref, tracking_uri)
    from hybrid.engine.costs import model_catalog
    from hybrid.workloads.dlrm_graph import check_target, collective_target

    catalog = model_catalog(model)
    target, coll_note = collective_target(config_target(config, catalog, config_path, system), catalog,
                                          config.gpus)
    notes = [coll_note] * bool(coll_note) + check_target(config, target, catalog)
    if own.plan is not None:
        notes.append(OWN_PLAN_NOTE)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    notes = warned + notes
    if not as_json:
        click.echo(f"searching sharding plans for {config.gpus} ranks ({', '.join(names or STRATEGIES)}; local "
                   f"search budget {time_budget:g} s; about {need / 2**30:,.2f} GiB) ...", err=True)
    from hybrid.errors import HybridError

    try:
        result = search_plans(config, model, strategies=names or None, time_budget_s=time_budget, seed=seed,
                              progress=not as_json, host_mem_per_node=host_mem)
        best = result.best
    except HybridError as exc:  # e.g. no plan fits: say for which config
        raise type(exc)(f"{config_path}: {exc}") from None
    if output:
        best.plan.save(output)
    shown = shown_plans(result, top)
    host_memory = best.memory.host_memory_summary()  # the best plan's tables in host memory (each plan: --json)
    interval_note = None
    if model_ref and best.fits and not all(math.isfinite(x) for x in best.iteration_interval_us):
        # as simulate says it: an empty "80% interval" column (a key missing in --json) is no answer
        from hybrid.cli.output import NO_INTERVAL_NOTE

        interval_note = NO_INTERVAL_NOTE.format(what="iteration")
        click.echo(f"warning: {interval_note}", err=True)
    if host_memory is None and host_mem is not None:
        click.echo(f"note: {HOST_MEM_UNUSED_NOTE}", err=True)
        notes.append(HOST_MEM_UNUSED_NOTE)
    if as_json:
        echo_json({"config": config.name, "gpus": config.gpus, "system": config.system, "model": model_name,
                   "seconds": round(result.seconds, 3), "best": best.name, "best_plan_file": output,
                   "overlapping_best": result.info.get("overlapping_best", []), **({"notes": notes} if notes else {}),
                   **({"interval_note": interval_note} if interval_note else {}),
                   **({"host_memory": host_memory} if host_memory is not None else {}),
                   "plans": [e.to_dict(with_plan=i == 0 or e is best) for i, e in enumerate(shown)]})
        return
    click.echo(f"{config.name}: {config.num_tables} tables on {config.gpus} x {config.system}, model {model_name}; "
               f"searched in {result.seconds:.2f} s")
    def interval(e) -> str:
        lo, hi = e.iteration_interval_us
        if not e.fits or lo != lo:
            return ""
        return f"{lo / 1e3:.3f}-{hi / 1e3:.3f}" + (" ~best" if e.overlaps_best else "")

    position = {id(e): i + 1 for i, e in enumerate(result.evaluations)}  # its rank among all plans
    echo_table([[position[id(e)], e.name, e.origin if e.origin and e.origin != e.name else "",
                 e.iteration_us / 1e3 if e.fits else float("nan"), interval(e),
                 e.memory.peak / 2**30 if e.fits else "",
                 ", ".join(f"{k} {v}" for k, v in e.plan.type_counts().items()),
                 "" if e.fits else e.reason[:90]] for e in shown],
               ["#", "strategy", "from", "iteration_ms", "80% interval ms", "peak_GiB", "tables", "rejected"])
    overlapping = result.info.get("overlapping_best", [])
    if overlapping:
        click.echo(f"note: the 80% intervals of {', '.join(overlapping)} overlap the best plan's: the model cannot "
                   "rank them apart with confidence (measure them)")
    click.echo(f"\nbest: {best.name} - per-rank breakdown")
    echo_breakdown(best.sim.summary())
    if host_memory is not None:
        click.echo(host_memory_line(host_memory))
    if output:
        click.echo(f"best plan written to {output}")
    roofline_note(model_name)
