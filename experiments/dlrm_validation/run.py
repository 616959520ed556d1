"""End-to-end DLRM validation: real multi-process training runs versus the engine's predictions.

1. Campaign (resumable): ``--configs`` random DLRM configurations x 7 sharding plans each, trained for real
   with ``hybrid.bench.dlrm_harness`` (2 gloo ranks on this CPU) into ``datasets/dlrm-cpu-<name>/`` with a
   data card (README.md).
2. Validation: every (config, plan) predicted by the engine with (a) the roofline only and (b) a
   HybridPredictor fitted on the committed CPU profile bundle (``datasets/cpu-*``, if present); geomean error,
   sharding success (strict / tolerant), and the error after fitting the engine's host-overhead constants on
   half of the configs (tested on the other half).

    python experiments/dlrm_validation/run.py --name <name>      # prints and writes results.md (--out)

``--skip-campaign`` only validates an existing campaign directory.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from hybrid.bench.campaign import CampaignSpace, read_results, run_campaign
from hybrid.bench.validate import resolve_predictor, validate_campaign
from hybrid.data.paths import project_datasets_dir
from hybrid.hardware.cpu import cpu_model_name
from hybrid.reports.markdown import write_benchmark_results


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def _busy_processes(limit: int = 8) -> list[str]:
    """Other processes using CPU right now (ps, top by %CPU), to note in the data card."""
    try:
        out = subprocess.run(["ps", "-eo", "pcpu,comm", "--sort=-pcpu"], capture_output=True, text=True,
                             timeout=10).stdout.splitlines()[1:]
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln.strip() for ln in out if ln.strip() and float(ln.split()[0]) >= 5.0][:limit]


def _quiet_note(*loads: str) -> str:
    try:
        busy = max(float(x.split()[0]) for x in loads) > (os.cpu_count() or 1)
    except (ValueError, IndexError):
        return ""
    return ("NOT a quiet machine: other jobs shared the cores during the campaign; " if busy else "")


def data_card(out: Path, args: argparse.Namespace, seconds: float, load_before: str, load_after: str,
              busy: list[str], command: str) -> str:
    import torch

    table = read_results(out)
    rel = table["std_ms"] / table["median_ms"]
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    lines = [
        f"# dlrm-cpu-{args.name}: real DLRM training iterations, {len(table)} (config, plan) runs",
        "",
        "Measured by this project with `hybrid.bench.dlrm_harness` (PyTorch `torch.distributed`, gloo, 2 local "
        "processes); see the module docstring for exactly which ops and collectives one iteration runs.",
        "",
        "| | |", "|---|---|",
        f"| machine | {cpu_model_name()}, {os.cpu_count()} cores, {mem_gib:.0f} GiB RAM, {platform.system()} "
        f"{platform.release()} |",
        f"| software | Python {platform.python_version()}, torch {torch.__version__} (CPU), numpy {np.__version__} |",
        f"| date | {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')} |",
        f"| command | `{command}` |",
        f"| duration | {seconds / 60:.1f} min for the runs measured in the last invocation |",
        f"| runs | {table['config_name'].nunique()} configs x {table.groupby('config_name').size().min()}-"
        f"{table.groupby('config_name').size().max()} plans; {int(table['warmup'].iloc[0])} warm-up + "
        f"{int(table['iters'].iloc[0])} timed iterations each; {int(table['threads_per_rank'].iloc[0])} torch "
        "thread(s) per rank |",
        f"| noise | run-to-run std / median: median {100 * rel.median():.1f}%, p90 "
        f"{100 * rel.quantile(0.9):.1f}% |",
        f"| machine load | {_quiet_note(load_before, load_after)}load average {load_before} before, {load_after} "
        f"after ({os.cpu_count()} cores). Other processes "
        f"busy at the end: {', '.join(busy) if busy else 'none above 5% CPU'} |",
        "",
        "## Files",
        "",
        "- `results.csv`: one row per (config, plan): `median_ms` (median over timed iterations of the per-"
        "iteration maximum over ranks), `std_ms`, `min_ms`, `max_ms`, `p10_ms`, `p90_ms`, per-phase medians "
        "(`input_dist_ms`, `lookup_fwd_ms`, `exchange_fwd_ms`, `dense_fwd_ms`, `backward_ms` (includes "
        "`exchange_bwd_ms`), `optimizer_ms`; max over ranks), `config_hash`, `plan_hash`, threads, backend, "
        "torch version, timestamp.",
        "- `configs/<config>.yaml`, `plans/<config>/<plan>.yaml`: the exact inputs (the DLRM config format of "
        "`hybrid.workloads.dlrm`; `system: local-cpu`), so `hybrid simulate configs/c000.yaml --plan "
        "plans/c000/random.yaml` predicts exactly what was measured.",
        "",
        "Synthetic data: indices uniform or bounded-Zipf per table (hot rows hashed over the table), "
        "bag lengths with the table's mean pooling factor, Gaussian dense features, random labels; a pool of 4 "
        "batches is generated before timing and cycled. License: same as the project (Apache-2.0).",
    ]
    return "\n".join(lines) + "\n"


def fmt(x: float) -> str:
    return f"{x:.1f}"


def searched_vs_heuristics(table) -> None:
    """Did the predictor-searched plan beat the heuristic plans in the MEASURED times?"""
    if "search" not in set(table["plan_name"]):
        return
    rows = []
    for cfg, grp in table.groupby("config_name"):
        s = grp[grp["plan_name"] == "search"]
        h = grp[grp["plan_name"] != "search"]
        if len(s) and len(h):
            best = h.loc[h["median_ms"].idxmin()]
            rows.append((cfg, float(s["median_ms"].iloc[0]), float(best["median_ms"]), best["plan_name"]))
    if not rows:
        return
    ratio = np.array([r[1] / r[2] for r in rows])
    wins = int((ratio < 1).sum())
    print(f"\nPredictor-searched plan (`search`, chosen by the campaign's model) vs the best HEURISTIC plan, in "
          f"measured times: faster in {wins}/{len(rows)} configs; search / best heuristic median {np.median(ratio):.3f}"
          f" (min {ratio.min():.3f}, max {ratio.max():.3f}); measured-fastest overall in "
          f"{sum(1 for r in rows if r[1] <= r[2])}/{len(rows)}.")


def fit_text(fit: dict) -> str:
    """Fitted constants with their standard errors and whether the data identify them."""
    from hybrid.engine.overheads import Overheads

    return Overheads.describe_fit(fit)


def held_out_report(dirs: list[Path], per_plan: dict) -> None:
    """Campaigns not used in development: default overheads, and overheads fitted on the whole development set."""
    from hybrid.bench.validate import EnginePredictor
    from hybrid.engine.overheads import Overheads

    if not dirs:
        return
    print("\n## Held-out campaigns (configurations the engine was not developed on)\n")
    print("Each held-out campaign is predicted with the same profile-fitted predictor, (a) with the engine's default "
          "host overheads and (b) with the overheads fitted on the whole development set above (nothing fitted on "
          "the held-out runs).\n")
    print("| campaign | runs (configs) | machine load while measured | predictor | geomean % default overheads | "
          "geomean % dev-fitted overheads | strict success | tolerant success |")
    print("|---|---|---|---|---|---|---|---|")
    ratios: list[str] = []
    for d in dirs:
        table = read_results(d)
        card = (d / "README.md").read_text(encoding="utf-8") if (d / "README.md").is_file() else ""
        row = next((ln.split("|")[2].strip() for ln in card.splitlines() if ln.startswith("| machine load")), "")
        m = re.search(r"load average ([\d.]+) before,? and ([\d.]+) after", row)
        load = (f"{'not quiet: ' if 'NOT a quiet' in row else ''}load average {m.group(1)} before, {m.group(2)} after"
                if m else (row[:60] or "n/a"))
        for name, (_, rep, _, pred) in per_plan.items():
            base = validate_campaign(d, pred, fit_overheads=False)
            ov = Overheads.from_dict(rep.in_sample["overheads_us"]) if rep.in_sample else None
            fitted = validate_campaign(d, EnginePredictor(pred.name, pred.model, pred.catalog, pred.system, ov),
                                       fit_overheads=False) if ov else base
            s = fitted.success
            print(f"| {d.name} | {len(table)} ({table['config_name'].nunique()}) | {load[:80]} | {name} | "
                  f"{fmt(base.errors['geomean_pct'])} | {fmt(fitted.errors['geomean_pct'])} | "
                  f"{s['strict']}/{s['n_configs']} | {s['tolerant']}/{s['n_configs']} |")
            ratios.append(f"- {d.name}, {name}, default overheads: " + ", ".join(
                f"{ph} {v['ratio_median']:.2f}" for ph, v in base.phases.items()))
    print("\nPredicted/measured per harness phase (median over runs) on the held-out campaigns, to compare with the "
          "development set's per-phase tables above:\n")
    print("\n".join(ratios))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="2rank", help="dataset name: datasets/dlrm-cpu-<name>")
    ap.add_argument("--configs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--skip-campaign", action="store_true")
    ap.add_argument("--bundle", default=None, help="CPU profile bundle (default: newest datasets/cpu-*)")
    ap.add_argument("--out-dir", default=None, help="campaign directory (default: datasets/dlrm-cpu-<name>)")
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.md")),
                    help="report file (its hand-written Notes section is kept)")
    ap.add_argument("--held-out", nargs="*", default=None,
                    help="campaign directories NOT used while developing the engine (default: datasets/dlrm-cpu-heldout-*)"
                         "; scored with default overheads and with overheads fitted on the whole development set")
    args = ap.parse_args()
    out = Path(args.out_dir) if args.out_dir else project_datasets_dir() / f"dlrm-cpu-{args.name}"
    command = "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])

    if not args.skip_campaign:
        load_before = _loadavg()
        t0 = time.perf_counter()
        rep = run_campaign(out, n_configs=args.configs, seed=args.seed, space=CampaignSpace(ranks=2),
                           iters=args.iters, warmup=args.warmup)
        seconds = time.perf_counter() - t0
        for f in rep.failures:
            print(f"campaign failure: {f}", file=sys.stderr)
        card = data_card(out, args, seconds, load_before, _loadavg(), _busy_processes(), command)
        (out / "README.md").write_text(card)

    report = io.StringIO()
    with contextlib.redirect_stdout(report):
        _report(args, out, command)
    print(report.getvalue(), end="")
    write_benchmark_results(args.out, report.getvalue())
    return 0


def _report(args: argparse.Namespace, out: Path, command: str) -> None:
    """Validate the campaign in ``out`` and print the markdown report."""
    table = read_results(out)
    print("# DLRM end-to-end validation: engine predictions vs real 2-rank CPU training\n")
    print("**Development set.** The engine was tuned step by step on the campaign below (each change kept or "
          "reverted by looking at these runs), so its numbers are development-set numbers. Configurations the "
          "engine was not developed on are scored separately under *Held-out campaigns* at the end.\n")
    print(f"Command: `{command}`  ")
    try:
        shown = out.resolve().relative_to(project_datasets_dir().parent).as_posix()
    except ValueError:
        shown = str(out)
    print(f"Measurements: `{shown}/` ({len(table)} (config, plan) runs, "
          f"{table['config_name'].nunique()} configs; data card in its README.md). Each (config, plan) is "
          "predicted by the critical-path engine on exactly the stored config and plan.\n")
    rel = table["std_ms"] / table["median_ms"]
    print(f"Measurement noise: run-to-run std/median median {100 * rel.median():.1f}%, p90 "
          f"{100 * rel.quantile(0.9):.1f}%. Measured iteration times {table['median_ms'].min():.1f}-"
          f"{table['median_ms'].max():.1f} ms.\n")
    print("Targets from the literature: < 5% geomean error, > 90% sharding success.\n")
    print("| predictor | system | geomean % | MAPE % | p90 % | strict success | tolerant success | mean regret % |"
          " split: test geomean % (before -> after overhead fit) | split: strict / tolerant % |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    variants = [("roofline", dict(roofline=True, bundle=args.bundle)), ("hybrid", dict(bundle=args.bundle))]
    per_plan = {}
    for label, kw in variants:
        try:
            pred = resolve_predictor(**kw)
            t0 = time.perf_counter()
            rep = validate_campaign(out, pred)
            dt_s = time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001 - report what could not be evaluated, keep going
            print(f"| {label} | - | not evaluated: {type(exc).__name__}: {str(exc)[:150]} |||||||||")
            continue
        e, s, sp = rep.errors, rep.success, rep.split
        split = (f"{fmt(sp['test_geomean_before_pct'])} -> {fmt(sp['test_geomean_pct'])}" if sp else "n/a")
        split_s = f"{fmt(sp['test_strict_pct'])} / {fmt(sp['test_tolerant_pct'])}" if sp else "n/a"
        print(f"| {pred.name} | {pred.system or 'per config'} | {fmt(e['geomean_pct'])} | {fmt(e['mape_pct'])} | "
              f"{fmt(e['p90_pct'])} | {s['strict']}/{s['n_configs']} ({fmt(s['strict_pct'])}%) | "
              f"{s['tolerant']}/{s['n_configs']} ({fmt(s['tolerant_pct'])}%) | {fmt(s['regret_pct'])} | {split} | "
              f"{split_s} |")
        per_plan[pred.name] = (e["by_plan"], rep, dt_s, pred)
    searched_vs_heuristics(table)
    held = ([Path(p) for p in args.held_out] if args.held_out is not None
            else sorted(project_datasets_dir().glob("dlrm-cpu-heldout-*")))
    for name, (by_plan, rep, dt_s, _) in per_plan.items():
        print(f"\n## {name}\n")
        print(f"Validation time {dt_s:.1f} s. Error by plan type:\n")
        print("| plan | n | geomean % | MAPE % | median % |")
        print("|---|---|---|---|---|")
        for plan, v in by_plan.items():
            print(f"| {plan} | {v['n_rows']} | {fmt(v['geomean_pct'])} | {fmt(v['mape_pct'])} | "
                  f"{fmt(v['median_pct'])} |")
        t = rep.table
        ratio = (t["predicted_ms"] / t["median_ms"]).to_numpy()
        print(f"\npredicted/measured: median {np.median(ratio):.3f}, p10 {np.quantile(ratio, 0.1):.3f}, "
              f"p90 {np.quantile(ratio, 0.9):.3f}")
        if rep.phases:
            print("\nPer harness phase (measured: max over ranks of the per-rank median; predicted: the simulated "
                  "timeline cut at the same points, steady state, max over ranks; `backward` includes "
                  "`exchange_bwd`; default overheads):\n")
            print("| phase | n | geomean % | MAPE % | predicted/measured median (p10-p90) | measured median ms | "
                  "predicted median ms |")
            print("|---|---|---|---|---|---|---|")
            for ph, v in rep.phases.items():
                print(f"| {ph} | {v['n_rows']} | {fmt(v['geomean_pct'])} | {fmt(v['mape_pct'])} | "
                      f"{v['ratio_median']:.2f} ({v['ratio_p10']:.2f}-{v['ratio_p90']:.2f}) | "
                      f"{v['measured_median_ms']:.2f} | {v['predicted_median_ms']:.2f} |")
        if rep.split:
            print(f"\nOverheads fitted on configs {', '.join(rep.split['fit_configs'])}: "
                  f"{fit_text(rep.split['fit'])}.")
        if rep.in_sample:
            ins = rep.in_sample
            print(f"\nIn-sample (overheads fitted on ALL {table['config_name'].nunique()} configs and scored on the "
                  f"same runs; optimistic): geomean {fmt(ins['geomean_pct'])}%, MAPE {fmt(ins['mape_pct'])}%, strict "
                  f"{fmt(ins['strict_pct'])}%, tolerant {fmt(ins['tolerant_pct'])}%, regret {fmt(ins['regret_pct'])}%;"
                  f" {fit_text(ins['fit'])}.")
        per = rep.success["per_config"]
        print("\n| config | chosen (predicted fastest) | measured fastest | chosen ms | best ms | tolerance ms |")
        print("|---|---|---|---|---|---|")
        for cfg, r in per.iterrows():
            print(f"| {cfg} | {r['chosen_plan']} | {r['best_plan']} | {r['chosen_ms']:.1f} | {r['best_ms']:.1f} | "
                  f"{r['tolerance_ms']:.1f} |")
    held_out_report([p for p in held if p.resolve() != out.resolve()], per_plan)


if __name__ == "__main__":
    sys.exit(main())
