"""``hybrid shard CONFIG``: rank sharding plans by predicted iteration time."""

from __future__ import annotations

import click

from hybrid.cli.output import echo_json, echo_table
from hybrid.cli.simulate import BREAKDOWN_HEADERS, breakdown_rows, load_config, load_cost_model, model_options

#: Measured peak memory of the plan search (tracemalloc, experiments/configs/dlrm_example.yaml, 1024 and
#: 2048 ranks): the greedy/search candidate matrices (placements x 6 x ranks floats, several temporaries) grow
#: with ranks^2; the baselines and the simulation of each plan grow with ranks.
SEARCH_BYTES_PER_RANK2 = 150.0
BASELINE_BYTES_PER_RANK = 140e3
FIXED_BYTES = 64 * 2**20
#: Share of the available memory a search may plan to use.
MEMORY_SHARE = 0.8


def estimate_search_bytes(gpus: int, strategies: list[str] | tuple[str, ...]) -> float:
    """Rough peak memory of ``search_plans`` for ``gpus`` ranks and these strategies (all when empty)."""
    quadratic = not strategies or any(s in ("greedy", "search") for s in strategies)
    return FIXED_BYTES + BASELINE_BYTES_PER_RANK * gpus + (SEARCH_BYTES_PER_RANK2 * gpus**2 if quadratic else 0.0)


def available_memory_bytes() -> float | None:
    """MemAvailable from /proc/meminfo (Linux), else None (unknown)."""
    try:
        for line in open("/proc/meminfo", encoding="ascii"):
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_search_size(gpus: int, strategies: list[str], available: float | None) -> float:
    """The estimated bytes of the search; :class:`InvalidInputError` naming a way out when it does not fit in
    :data:`MEMORY_SHARE` of ``available`` memory."""
    from hybrid.errors import InvalidInputError
    from hybrid.sharding.heuristics import BASELINES

    need = estimate_search_bytes(gpus, strategies)
    if available is None or need <= MEMORY_SHARE * available:
        return need
    gib = 2**30
    msg = (f"--gpus {gpus}: the plan search would need about {need / gib:,.1f} GiB of memory, more than the "
           f"{available / gib:,.1f} GiB available")
    base = estimate_search_bytes(gpus, list(BASELINES))
    if base <= MEMORY_SHARE * available and base < need:
        msg += (f" (the greedy/search candidate matrices grow with gpus^2); the baseline strategies need about "
                f"{base / gib:,.1f} GiB (and time in proportion to gpus): "
                f"--strategy {','.join(BASELINES)}")
    else:
        msg += "; use fewer --gpus"
    raise InvalidInputError(msg)


@click.command("shard")
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.option("--gpus", type=int, default=None, help="Number of ranks (default: the config's).")
@click.option("--system", default=None, help="Catalog system or device (default: the config's).")
@click.option("--top", "top", type=int, default=5, show_default=True, help="How many plans to show.")
@click.option("--strategy", "strategies", multiple=True,
              help="Strategies to run (repeatable): size_greedy, lookup_greedy, size_lookup_greedy, random, "
                   "greedy, search. Default: all.")
@click.option("--time-budget", type=float, default=20.0, show_default=True, help="Seconds for local search.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random baseline.")
@click.option("--output", "output", type=click.Path(dir_okay=False), default=None,
              help="Write the best plan here (YAML or JSON by extension).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@model_options
def shard(config_path: str, gpus: int | None, system: str | None, top: int, strategies: tuple[str, ...],
          time_budget: float, seed: int, output: str | None, as_json: bool, model_ref: str | None,
          tracking_uri: str | None) -> None:
    """Search embedding sharding plans for the DLRM in CONFIG; show the fastest, with per-rank breakdown."""
    from hybrid.errors import InvalidInputError
    from hybrid.sharding.search import STRATEGIES, search_plans
    if top <= 0:
        raise InvalidInputError("--top must be positive")
    names = [s for item in strategies for s in item.split(",") if s]
    unknown = [s for s in names if s not in STRATEGIES]
    if unknown:
        raise InvalidInputError(f"unknown strategy {unknown[0]!r}; known: {', '.join(STRATEGIES)}")
    if gpus is not None and gpus <= 0:
        raise InvalidInputError(f"--gpus must be positive, got {gpus}")
    config = load_config(config_path, gpus=gpus, system=system, drop_plan=True)
    need = check_search_size(config.gpus, names, available_memory_bytes())
    model, model_name = load_cost_model(model_ref, tracking_uri)
    if not as_json:
        click.echo(f"searching sharding plans for {config.gpus} ranks ({', '.join(names or STRATEGIES)}; local "
                   f"search budget {time_budget:g} s; about {need / 2**30:,.2f} GiB) ...", err=True)
    result = search_plans(config, model, strategies=names or None, time_budget_s=time_budget, seed=seed,
                          progress=not as_json)
    best = result.best
    if output:
        best.plan.save(output)
    shown = result.evaluations[:top]
    if as_json:
        echo_json({"config": config.name, "gpus": config.gpus, "system": config.system, "model": model_name,
                   "seconds": round(result.seconds, 3), "best": best.name, "best_plan_file": output,
                   "overlapping_best": result.info.get("overlapping_best", []),
                   "plans": [e.to_dict(with_plan=i == 0 or e is best) for i, e in enumerate(shown)]})
        return
    click.echo(f"{config.name}: {config.num_tables} tables on {config.gpus} x {config.system}, model {model_name}; "
               f"searched in {result.seconds:.2f} s")
    def interval(e) -> str:
        lo, hi = e.iteration_interval_us
        if not e.fits or lo != lo:
            return ""
        return f"{lo / 1e3:.3f}-{hi / 1e3:.3f}" + (" ~best" if e.overlaps_best else "")

    echo_table([[i + 1, e.name, e.origin if e.origin and e.origin != e.name else "",
                 e.iteration_us / 1e3 if e.fits else float("nan"), interval(e),
                 e.memory.peak / 2**30 if e.fits else "",
                 ", ".join(f"{k} {v}" for k, v in e.plan.type_counts().items()),
                 "" if e.fits else e.reason[:90]] for i, e in enumerate(shown)],
               ["#", "strategy", "from", "iteration_ms", "80% interval ms", "peak_GiB", "tables", "rejected"])
    overlapping = result.info.get("overlapping_best", [])
    if overlapping:
        click.echo(f"note: the 80% intervals of {', '.join(overlapping)} overlap the best plan's: the model cannot "
                   "rank them apart with confidence (measure them)")
    click.echo(f"\nbest: {best.name} - per-rank breakdown")
    echo_table(breakdown_rows(best.sim.summary()), BREAKDOWN_HEADERS)
    if output:
        click.echo(f"best plan written to {output}")
