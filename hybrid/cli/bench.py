"""``hybrid bench``: measure real DLRM training (PyTorch, torch.distributed) and validate predictions against it."""

from __future__ import annotations

import math
from pathlib import Path

import click

from hybrid.cli.output import echo_json, echo_table, named
from hybrid.data.profiler.backend import require_torch
from hybrid.errors import InvalidInputError


@click.group("bench")
def bench() -> None:
    """Real DLRM training measurements and prediction-versus-measurement validation."""


@bench.command("dlrm")
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False), default=None, callback=named,
              help="Sharding plan (YAML/JSON). Default: the config's `plan:`, else size-lookup greedy.")
@click.option("--ranks", type=int, default=None, help="Processes (default: the config's gpus).")
@click.option("--iters", type=int, default=15, show_default=True, help="Timed iterations.")
@click.option("--warmup", type=int, default=5, show_default=True, help="Untimed warm-up iterations.")
@click.option("--threads", type=int, default=None, help="Torch threads per rank (default: cores // ranks).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="cpu: gloo; cuda: one GPU per rank, NCCL.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the synthetic data.")
@click.option("-o", "--output", "output", type=click.Path(), default=None, callback=named,
              help="Results CSV to add the row to (a directory: its results.csv); config and plan YAMLs "
                   "are stored beside it.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def dlrm(config_path: str, plan_path: str | None, ranks: int | None, iters: int, warmup: int,
         threads: int | None, device: str, seed: int, output: str | None, as_json: bool) -> None:
    """Train the DLRM in CONFIG on local processes and report the measured iteration time."""
    require_torch("hybrid bench dlrm")
    from hybrid.bench.campaign import rank_capacity, record_results, results_output
    from hybrid.bench.dlrm_harness import HarnessOptions, run_dlrm
    from hybrid.sharding.heuristics import default_plan
    from hybrid.sharding.plan import ShardingPlan
    from hybrid.workloads.dlrm import DLRMConfig, load_document

    if ranks is not None and ranks <= 0:  # the option's error, not the config's `gpus`
        raise InvalidInputError(f"--ranks must be positive, got {ranks}")
    doc = load_document(config_path, what="DLRM config")
    file_plan = doc.pop("plan", None) if isinstance(doc, dict) else None
    config = DLRMConfig.from_dict(doc, gpus=ranks)
    own_ranks = DLRMConfig.from_dict(doc).gpus if ranks is not None else config.gpus
    if (file_plan is not None and not plan_path and own_ranks != config.gpus
            and not ShardingPlan.from_dict(file_plan).rank_free):
        # the config's plan was written for its own rank count: with more ranks the extra ones idled (with fewer
        # it named ranks that do not exist); plan afresh, as `hybrid simulate --gpus` does, and say so (a plan
        # naming no rank, every table data-parallel, is the same plan on any count)
        click.echo(f"note: the config's plan is for {own_ranks} ranks; {config.gpus} ranks use the size-lookup "
                   "greedy plan (give --plan for another)", err=True)
        file_plan = None
    if plan_path:
        plan, plan_name = ShardingPlan.from_file(plan_path), Path(plan_path).stem
    elif file_plan is not None:
        plan, plan_name = ShardingPlan.from_dict(file_plan), "config_plan"
    else:
        plan, plan_name = default_plan(config, rank_capacity(config.gpus)), "size_lookup_greedy"
    plan.validate(config)
    if output:  # before measuring: a directory means its results.csv; a bad table or path is refused
        output = str(results_output(output, config, [plan_name]))
    opts = HarnessOptions(iters=iters, warmup=warmup, threads_per_rank=threads, device=device, seed=seed)
    (res,) = run_dlrm(config, {plan_name: plan}, opts)
    row = res.summary()
    if output:
        record_results(output, config, {plan_name: plan}, [res])
    if as_json:
        echo_json({**row, "iter_ms": res.iter_ms.tolist(), "output": output})
        return
    click.echo(f"{config.name} / {plan_name}: {config.num_tables} tables, {res.ranks} ranks "
               f"({row['backend']}, {row['threads_per_rank']} thread(s) each), {row['iters']} iterations")
    echo_table([[row["median_ms"], row["std_ms"], row["min_ms"], row["max_ms"]]],
               ["median_ms", "std_ms", "min_ms", "max_ms"])
    click.echo("phases (ms, max over ranks of the median): "
               + ", ".join(f"{k.removesuffix('_ms')} {row[k]:.2f}" for k in row if k.endswith("_ms")
                           and k not in ("median_ms", "std_ms", "min_ms", "max_ms", "p10_ms", "p90_ms")))
    if output:
        click.echo(f"row added to {output}")


@bench.command("campaign")
@click.argument("out_dir", metavar="OUT_DIR", type=click.Path(file_okay=False))
@click.option("--configs", "n_configs", type=int, default=20, show_default=True, help="Random configurations.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of configs, plans and data.")
@click.option("--ranks", type=int, default=2, show_default=True, help="Processes per run.")
@click.option("--iters", type=int, default=15, show_default=True, help="Timed iterations per run.")
@click.option("--warmup", type=int, default=5, show_default=True, help="Warm-up iterations per run.")
@click.option("--threads", type=int, default=None, help="Torch threads per rank (default: cores // ranks).")
@click.option("--model", "model_ref", default=None, callback=named,
              help="Calibrated model: adds the plan its search finds fastest to each config's plans.")
@click.option("--tracking-uri", envvar="MLFLOW_TRACKING_URI", default=None, help="MLflow store of --model.")
@click.option("--system", "search_system", default=None, callback=named,
              help="System the --model search costs plans on (default: the one system the model's profile "
                   "bundle added, e.g. cpu-...-gloo).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="cpu: gloo processes; cuda: one GPU per rank, NCCL, with GPU-sized configurations "
                   "(larger batches and tables).")
@click.option("--adagrad-share", type=click.FloatRange(0.0, 1.0), default=0.25, show_default=True,
              help="Share of the configurations that train with sparse Adagrad instead of SGD (the rest of each "
                   "seeded configuration is the same whatever the share).")
def campaign(out_dir: str, n_configs: int, seed: int, ranks: int, iters: int, warmup: int, threads: int | None,
             model_ref: str | None, tracking_uri: str | None, search_system: str | None, device: str,
             adagrad_share: float) -> None:
    """Measure random DLRM configurations x sharding plans into OUT_DIR/results.csv (resumable).

    A configuration whose runs fail is named on stderr and the others are still measured; the command then exits
    with code 2 (running it again retries only what is missing)."""
    require_torch("hybrid bench campaign")
    from hybrid.bench.campaign import CampaignSpace, run_campaign

    predictor = None
    if search_system and not model_ref:  # it names where the --model search costs plans; alone it changed nothing
        raise InvalidInputError("--system is the system the --model search costs plans on: give --model too (the "
                                "runs themselves are measured on this machine)")
    if model_ref:
        from hybrid.cli.simulate import load_cost_model
        from hybrid.engine.costs import model_catalog
        from hybrid.hardware.catalog import default_catalog

        predictor, _ = load_cost_model(model_ref, tracking_uri)
        if search_system is None:
            packaged = default_catalog([]).systems
            added = [k for k in model_catalog(predictor).systems if k not in packaged]
            if len(added) != 1:
                raise InvalidInputError(f"cannot tell which system {model_ref} was measured on ({added or 'none'}); "
                                        "pass --system")
            search_system = added[0]
    space = (CampaignSpace.for_gpu(ranks, adagrad_share=adagrad_share) if device == "cuda"
             else CampaignSpace(ranks=ranks, adagrad_share=adagrad_share))
    report = run_campaign(out_dir, n_configs=n_configs, seed=seed, space=space,
                          iters=iters, warmup=warmup, threads_per_rank=threads, predictor=predictor,
                          search_system=search_system, device=device)
    results = Path(out_dir) / "results.csv"
    click.echo(f"{report.measured} runs measured, {report.skipped} already present, "
               f"{len(report.failures)} of {report.configs} config(s) failed, {report.seconds:.0f} s"
               + (f" -> {results}" if results.is_file() else " (no results written)"))
    for f in report.failures:
        click.echo(f"failed: {f}", err=True)
    if report.failures:
        # a script chaining `campaign && validate` must not take a broken or partial campaign for a finished one;
        # the runs that did finish stay in results.csv and running the same command again retries only the rest
        from hybrid.bench.dlrm_harness import HarnessError

        n, total = len(report.failures), report.configs
        what = f"all {total} configs failed" if n == total else f"{n} of {total} configs failed"
        raise HarnessError(f"{what} (first: {report.failures[0]})"
                           + ("" if n == total else f"; the others' runs are in {results}")
                           + "; run the same command again to retry the failed ones")


@bench.command("gpu-session")
@click.argument("out_dir", metavar="OUT_DIR", type=click.Path(file_okay=False))
@click.option("--budget", "budget_s", type=float, default=540.0, show_default=True,
              help="Seconds the whole session may take; steps that cannot finish in the time left are skipped.")
@click.option("--families", default=None,
              help="Comma-separated profile families (default: attention, then every kernel family).")
@click.option("--dlrm-configs", type=int, default=4, show_default=True,
              help="Random DLRM configurations of the campaign step (0: no DLRM step).")
@click.option("--dlrm-adagrad-configs", type=click.IntRange(min=0), default=2, show_default=True,
              help="Configurations of the second DLRM step, every one training with sparse Adagrad (0: none; none "
                   "without the first either).")
@click.option("--no-traces", is_flag=True, help="Do not record traces of real models.")
@click.option("--cpu", is_flag=True, help="Profile the CPU instead (quick sweeps): tries the plan out on any machine.")
def gpu_session(out_dir: str, budget_s: float, families: str | None, dlrm_configs: int, dlrm_adagrad_configs: int,
                no_traces: bool, cpu: bool) -> None:
    """Measure a lent GPU in one prepared command: attention, GEMMs, traces, the other kernel families, DLRM runs
    (in that order, within --budget), with OUT_DIR/session.json saying what ran. Needs only PyTorch and pandas."""
    torch = require_torch("hybrid bench gpu-session")
    from hybrid.bench.gpu_session import (
        KERNEL_FAMILIES,
        MEASURED_BEFORE,
        committed_bundle_for,
        default_steps,
        run_session,
    )
    from hybrid.data.profiler.cases import PROFILE_FAMILIES

    if dlrm_configs < 0:
        raise InvalidInputError(f"--dlrm-configs must be >= 0, got {dlrm_configs}")
    fams = tuple(f.strip().lower() for f in families.split(",") if f.strip()) if families is not None else (
        "attention", *KERNEL_FAMILIES)
    bad = [f for f in fams if f not in PROFILE_FAMILIES or f == "collective"]
    if bad or not fams:
        raise InvalidInputError(f"unknown or unsupported profile family {', '.join(bad) or '(none given)'}")
    skip = None
    if not cpu:
        if not torch.cuda.is_available():
            raise InvalidInputError("no CUDA GPU visible to PyTorch (pass --cpu to try the session on the CPU)")
        name = torch.cuda.get_device_name(0)
        skip = committed_bundle_for(name)
        click.echo(f"GPU: {name}; committed bundle: {skip or 'none'}")
    steps = default_steps(Path(out_dir), skip_existing=skip, families=fams, dlrm_configs=dlrm_configs,
                          dlrm_adagrad_configs=dlrm_adagrad_configs, traces=not no_traces, cpu=cpu)
    manifest = run_session(out_dir, budget_s, steps, progress=click.echo)
    done = sum(s["status"] == "ok" for s in manifest["steps"])
    before = sum(s["status"] == "skipped" and MEASURED_BEFORE in s["reason"] for s in manifest["steps"])
    click.echo(f"{done} of {len(manifest['steps'])} steps ok"
               + (f" ({before} measured by an earlier session into {out_dir})" if before else "")
               + f" in {manifest['elapsed_s']:.0f} s -> "
               f"{Path(out_dir) / 'session.json'}")


@bench.command("validate")
@click.argument("results_path", metavar="RESULTS", type=click.Path(exists=False))
@click.option("--model", "model_ref", default=None, callback=named,
              help="Calibrated model from the tracking store (NAME, NAME/3). Default: fit a HybridPredictor "
                   "on --bundle.")
@click.option("--tracking-uri", envvar="MLFLOW_TRACKING_URI", default=None, help="MLflow store of --model.")
@click.option("--bundle", "bundle", type=click.Path(file_okay=False), default=None, callback=named,
              help="Profile bundle directory (`hybrid profile` output) to fit the predictor on; default: the "
                   "newest datasets/cpu-* of the checkout.")
@click.option("--roofline", is_flag=True, help="Use the analytical roofline only (no corrections).")
@click.option("--system", default=None, callback=named, help="System/device to predict on (default: the bundle's, else the "
                                                "configs').")
@click.option("--k", "k", type=click.FloatRange(min=0.0), default=1.0, show_default=True,
              help="Tolerant success: within k x the measured std of the fastest plan.")
@click.option("--split-seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the half split for fitting the engine overheads.")
@click.option("--overheads", "overheads_file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Engine host constants to predict with (JSON, as --save-overheads writes, e.g. fitted on another "
                   "machine's runs); default: the engine's defaults.")
@click.option("--save-overheads", type=click.Path(dir_okay=False), default=None, callback=named,
              help="Write the host constants fitted on all of RESULTS' configs (in-sample) as JSON, for --overheads "
                   "on other runs.")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False), default=None, callback=named,
              help="Write the per-row predictions (CSV).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def validate(results_path: str, model_ref: str | None, tracking_uri: str | None, bundle: str | None,
             roofline: bool, system: str | None, k: float, split_seed: int, overheads_file: str | None,
             save_overheads: str | None, output: str | None, as_json: bool) -> None:
    """Predict every (config, plan) in RESULTS and report error and sharding success."""
    from hybrid.bench.campaign import read_results
    from hybrid.bench.validate import (
        load_overheads,
        resolve_predictor,
        save_fitted_overheads,
        validate_campaign,
    )

    if not math.isfinite(k):
        raise InvalidInputError(f"--k must be a finite number >= 0, got {k}")
    overheads = load_overheads(overheads_file) if overheads_file else None  # a bad file fails before any fit
    read_results(results_path, stored_files=True)  # so does a bad results table (read again, with its configs, below)
    if not as_json:
        what = (f"loading {model_ref}" if model_ref else "building the roofline predictor" if roofline
                else f"fitting a HybridPredictor on {bundle or 'the newest datasets/cpu-* bundle'}")
        click.echo(f"[1/2] {what} ...", err=True)
    pred = resolve_predictor(model_ref=model_ref, tracking_uri=tracking_uri, bundle=bundle, roofline=roofline,
                             system=system)
    if overheads is not None:
        pred.overheads = overheads
    if not as_json:
        click.echo(f"[2/2] predicting every (config, plan) of {results_path} and fitting the engine overheads "
                   "...", err=True)
    report = validate_campaign(results_path, pred, k=k, split_seed=split_seed, progress=not as_json)
    if save_overheads:
        save_fitted_overheads(report, save_overheads, results_path)
    if output:
        from hybrid.bench.campaign import _write_csv

        _write_csv(report.table, Path(output))
    s = report.summary()
    used = pred.overheads.to_dict() if pred.overheads is not None else None
    if as_json:
        echo_json({"predictor": pred.name, "overheads_us": used, **s})
        return
    e, sh = s["errors"], s["sharding"]
    if used is not None:
        click.echo(f"host constants from {overheads_file}: " + ", ".join(f"{k} {v:.1f} us" for k, v in used.items()))
    click.echo(f"predictor {pred.name} on {results_path}: {e['n_rows']} (config, plan) pairs, "
               f"{report.table['config_name'].nunique()} configs")
    echo_table([["all", e["n_rows"], e["geomean_pct"], e["mape_pct"], e["median_pct"], e["p90_pct"]]]
               + [[name, v["n_rows"], v["geomean_pct"], v["mape_pct"], v["median_pct"], v["p90_pct"]]
                  for name, v in s["errors_by_plan"].items()],
               ["plans", "n", "geomean_%", "mape_%", "median_%", "p90_%"])
    if sh["n_configs"]:
        click.echo(f"sharding success: strict {sh['strict']}/{sh['n_configs']} ({sh['strict_pct']:.1f}%), "
                   f"tolerant {sh['tolerant']}/{sh['n_configs']} ({sh['tolerant_pct']:.1f}%), "
                   f"mean regret {sh['regret_pct']:.1f}%")
    else:
        click.echo("sharding success: no config ran two or more plans (no plan choice to score)")
    if s["phases"]:
        echo_table([[ph, v["n_rows"], v["geomean_pct"], v["ratio_median"], v["measured_median_ms"],
                     v["predicted_median_ms"]] for ph, v in s["phases"].items()],
                   ["phase", "n", "geomean_%", "pred/meas", "measured_ms", "predicted_ms"])
    if s["in_sample"]:
        ins = s["in_sample"]
        click.echo(f"overheads fitted on all configs (in-sample): geomean {ins['geomean_pct']:.1f}%"
                   + (f", strict {ins['strict_pct']:.1f}%, tolerant {ins['tolerant_pct']:.1f}%"
                      if ins["strict_pct"] is not None else ""))
        if ins.get("fit"):
            from hybrid.engine.overheads import Overheads

            click.echo(f"  fitted constants: {Overheads.describe_fit(ins['fit'])}")
    if s["split"]:
        sp = s["split"]
        click.echo(f"overheads fitted on {sp['n_fit_configs']} configs, tested on {sp['n_test_configs']}: "
                   f"geomean {sp['test_geomean_pct']:.1f}% (before fit {sp['test_geomean_before_pct']:.1f}%)"
                   + (f", strict {sp['test_strict_pct']:.1f}%, tolerant {sp['test_tolerant_pct']:.1f}%"
                      if sp["test_strict_pct"] is not None else ""))
