"""DLRM on one H200: engine predictions vs 8 real single-GPU training runs the engine was never developed on.

A test on new hardware and new configurations (issue 12, ``datasets/dlrm-h200-1gpu``): the runs are
``hybrid bench campaign --device cuda --ranks 1 --configs 4`` with seed 0 (``datasets/dlrm-h100-1gpu``'s
configurations came from seed 7), measured on a lent H200 after the engine's DLRM graph was written. Nothing here
is fitted or tuned on them: every predictor uses the engine's default host overheads, and every fit is on kernel
profiles only. All predict on the catalog's ``H200`` (the runs say ``system: local-cuda``):

- ``roofline``: datasheet roofline kernels;
- ``public``: the HybridPredictor of ``experiments/dlrm_gpu`` (public kernel and collective data; no H200 row
  exists in it), skipped with ``--no-public``;
- ``profile``: a HybridPredictor fitted on the H200's own ``hybrid profile`` (``datasets/H200``): in distribution
  for the kernels, as ``hybrid bench validate ... --bundle datasets/H200`` does;
- ``H100 profile``: a HybridPredictor fitted on ``datasets/H100-SXM`` only, predicting on the H200 catalog entry
  (the H200 as a GPU whose kernels were never measured: "I profiled my H100, what will an H200 do?").

Reported: per run and overall error of the iteration time, plan ranking per config, per harness phase, the
predicted GPU time per op family, and the noise of the measurements themselves (``repeat_results.csv``: 6 of the
runs measured again minutes earlier) beside the errors. The shared pieces (scores, ranking, the public
predictor, the family breakdown) are ``h100.py``'s, loaded from there.

    python experiments/dlrm_validation/h200.py [--data-dir ../shared/datasets] [--no-public] [--out ...] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd

from hybrid.bench.campaign import load_pair, read_results
from hybrid.bench.validate import EnginePredictor, resolve_predictor, validate_campaign
from hybrid.data.bundle import load_bundle, read_meta
from hybrid.data.paths import project_datasets_dir, public_data_dir
from hybrid.engine.costs import RooflineCostModel
from hybrid.engine.overheads import Overheads
from hybrid.hardware.catalog import default_catalog
from hybrid.reports.metrics import error_summary

RUNS = "dlrm-h200-1gpu"
BUNDLE = "H200"
H100_BUNDLE = "H100-SXM"
SYSTEM = "H200"
TARGET_PCT = 5.0
PHASES = ("input_dist", "lookup_fwd", "exchange_fwd", "dense_fwd", "backward", "exchange_bwd", "optimizer")


def load_h100() -> ModuleType:
    """``h100.py`` beside this file, as a module (its scoring, ranking and breakdown code)."""
    key = "dlrm_validation_h100"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, Path(__file__).with_name("h100.py"))
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[key] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


H100 = load_h100()
fmt = H100.fmt


def predictors(args: argparse.Namespace) -> tuple[list[EnginePredictor], dict[str, str]]:
    """roofline, public (unless --no-public or no public data), profile (H200 bundle), H100 profile."""
    cat = default_catalog()
    preds = [EnginePredictor("roofline", RooflineCostModel(cat), cat, SYSTEM)]
    notes = {"roofline": "datasheet roofline (catalog `H200`)"}
    if args.no_public:
        notes["public"] = "not evaluated (--no-public)"
    else:
        try:
            data_dir = Path(args.data_dir) if args.data_dir else public_data_dir()
            p = H100.public_predictor(data_dir)
            p.system = SYSTEM
            notes["public"] = p.note  # type: ignore[attr-defined]
            preds.append(p)
        except Exception as exc:  # noqa: BLE001 - no public data here: say so, keep the others
            notes["public"] = f"not evaluated: {type(exc).__name__}: {str(exc)[:120]}"
    prof = resolve_predictor(bundle=args.bundle)
    if prof.system != SYSTEM:
        raise SystemExit(f"error: {args.bundle} is a profile of {prof.system}, not {SYSTEM}")
    preds.append(EnginePredictor("profile", prof.model, prof.catalog, SYSTEM))
    n_h200 = len(load_bundle(args.bundle)[0])
    notes["profile"] = f"HybridPredictor fitted on `datasets/{Path(args.bundle).name}` ({n_h200} rows of this GPU)"
    h100 = resolve_predictor(bundle=args.h100_bundle, system=SYSTEM)
    preds.append(EnginePredictor("H100 profile", h100.model, h100.catalog, SYSTEM))
    n_h100 = len(load_bundle(args.h100_bundle)[0])
    notes["H100 profile"] = (f"HybridPredictor fitted on `datasets/{Path(args.h100_bundle).name}` only "
                             f"({n_h100} rows of an H100, no H200 row), predicting on the catalog's `H200`")
    return preds, notes


def h100_host_constants(args: argparse.Namespace, runs: Path, table: pd.DataFrame, prof: EnginePredictor) -> dict:
    """The engine's host constants fitted on the dev half of the H100 runs (``h100.py``'s fit, H100 profile
    predictor), applied to every H200 run with the H200 profile's kernels: as fitted, and scaled by the two
    profiles' measured per-kernel latency (H200 / H100: the physical guess that a slower host scales every host
    constant alike; reported whichever way it comes out). Nothing of the H200 runs is used to fit."""
    import dataclasses
    import statistics

    h100_runs = Path(args.h100_runs)
    t1 = read_results(h100_runs)
    dev, _ = H100.half_split(t1["config_name"].tolist(), H100.SPLIT_SEED)
    p1 = resolve_predictor(bundle=args.h100_bundle)
    prof1 = EnginePredictor("H100 profile (own GPU)", p1.model, p1.catalog, p1.system)
    rep1 = validate_campaign(h100_runs / "results.csv", prof1, fit_overheads=False)
    fitted, fit, _ = H100.fit_dev_overheads(h100_runs, prof1, rep1.table, dev)
    # what README's two commands do (`bench validate ... --save-overheads` on every H100 run, then `--overheads`)
    every, _, _ = H100.fit_dev_overheads(h100_runs, prof1, rep1.table, sorted(set(t1["config_name"])))
    lat = {b: statistics.median(c["kernel_latency_us"] for c in read_meta(b)["ceilings_each_run"])
           for b in (args.bundle, args.h100_bundle)}
    ratio = lat[args.bundle] / lat[args.h100_bundle]
    # (the harness graph prices its host op by op on a GPU: host_op_us and the launch; framework_us no longer counts)
    scaled = dataclasses.replace(fitted, kernel_launch_us=fitted.kernel_launch_us * ratio,
                                 framework_us=fitted.framework_us * ratio, host_op_us=fitted.host_op_us * ratio)
    graphs = [prof.graph(*load_pair(runs, r)) for _, r in table.iterrows()]
    out = {"fit": fit, "latency_us": lat, "latency_ratio": ratio, "variants": {}}
    # the engine's defaults: one kernel's host time as the H200 profile measured it (its learned dispatch)
    from hybrid.engine.overheads import dispatch_overheads, measured_dispatch_us

    g0 = graphs[0].compile() if hasattr(graphs[0], "compile") else graphs[0]
    default = dispatch_overheads(Overheads(), measured_dispatch_us(prof.model, g0.ops["device"].astype(str).unique()))
    for name, ov in (("default host constants", default), ("H100-dev constants", fitted),
                     ("H100-dev constants x latency ratio", scaled),
                     ("H100 constants fitted on all its runs (README's two commands)", every)):
        t = table.copy()
        t["predicted_ms"] = prof.predict_graphs(graphs, ov)
        out["variants"][name] = {"overheads": {k: float(v) for k, v in ov.to_dict().items()}, **H100.score(t)}
    return out


def repeat_noise(table: pd.DataFrame, repeat: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The repeat measurement against the reference, per run (iteration and phases) and summarised."""
    m = table.merge(repeat, on=["config_name", "plan_name"], suffixes=("", "_rep"))
    e = error_summary(m["median_ms_rep"], m["median_ms"])
    diff = 100 * (m["median_ms_rep"] / m["median_ms"] - 1)
    out = {"n_runs": len(m), "geomean_pct": e["geomean_pct"], "median_pct": e["median_pct"],
           "min_diff_pct": float(diff.min()), "max_diff_pct": float(diff.max()), "phases": {}}
    for ph in PHASES:
        c = f"{ph}_ms"
        if c in m.columns and f"{c}_rep" in m.columns:
            out["phases"][ph] = error_summary(m[f"{c}_rep"], m[c])["geomean_pct"]
    # plan ranking of the repeat vs the reference, configs with both plans in the repeat
    both = m[m.groupby("config_name")["plan_name"].transform("size") >= 2]
    agree = 0
    for _, g in both.groupby("config_name"):
        g = g.set_index("plan_name")
        agree += int((g.loc["dp_small", "median_ms"] < g.loc["size_greedy", "median_ms"])
                     == (g.loc["dp_small", "median_ms_rep"] < g.loc["size_greedy", "median_ms_rep"]))
    out["ranking"] = {"n": int(both["config_name"].nunique()), "agree": agree}
    return m.assign(diff_pct=diff), out


def kernel_transfer(pred: EnginePredictor, bundle: str) -> pd.DataFrame:
    """Per op (DLRM's ops first; last, every op under 40 us): the model's error on a bundle's rows."""
    rows, _ = load_bundle(bundle)
    predicted = pred.model.predict(rows)["time_us"].to_numpy()
    measured = rows["time_us"].to_numpy()
    ops = rows["op"].astype(str).to_numpy()
    first = [o for o in ("embedding_bag", "elementwise", "gemm", "linear") if o in set(ops)]
    groups = {o: ops == o for o in first + sorted(set(ops) - set(first))}
    groups["all ops < 40 us (dispatch-bound)"] = measured < 40
    out = {name: {"rows": int(m.sum()), "geomean_pct": error_summary(predicted[m], measured[m])["geomean_pct"],
                  "ratio_median": float(np.median(predicted[m] / measured[m]))} for name, m in groups.items()}
    return pd.DataFrame.from_dict(out, orient="index")


def per_config_ranking(tables: dict[str, pd.DataFrame], repeat: pd.DataFrame) -> list[dict]:
    """Per config: the measured faster plan, its margin vs the noise, and each predictor's pick."""
    ref = next(iter(tables.values()))
    rows = []
    for cfg, g in ref.groupby("config_name"):
        g = g.set_index("plan_name")
        if not {"dp_small", "size_greedy"} <= set(g.index):
            continue
        dp, sg = g.loc["dp_small"], g.loc["size_greedy"]
        row = {"config": cfg, "measured_faster": "dp_small" if dp["median_ms"] < sg["median_ms"] else "size_greedy",
               "gap_pct": float(100 * abs(dp["median_ms"] - sg["median_ms"]) / min(dp["median_ms"], sg["median_ms"])),
               "std_pct": float(100 * max(dp["std_ms"] / dp["median_ms"], sg["std_ms"] / sg["median_ms"]))}
        r = repeat[repeat["config_name"] == cfg].set_index("plan_name")
        if {"dp_small", "size_greedy"} <= set(r.index):
            row["repeat_faster"] = ("dp_small" if r.loc["dp_small", "median_ms"] < r.loc["size_greedy", "median_ms"]
                                    else "size_greedy")
        for name, t in tables.items():
            p = t[t["config_name"] == cfg].set_index("plan_name")["predicted_ms"]
            row[name] = "dp_small" if p["dp_small"] < p["size_greedy"] else "size_greedy"
        rows.append(row)
    return rows


def run(args: argparse.Namespace) -> tuple[str, dict]:
    runs = Path(args.runs)
    t0 = time.perf_counter()
    table = read_results(runs)
    repeat = read_results(runs / "repeat_results.csv") if (runs / "repeat_results.csv").is_file() else table.iloc[:0]
    preds, notes = predictors(args)
    names = [p.name for p in preds]
    reps = {p.name: validate_campaign(runs / "results.csv", p, fit_overheads=False) for p in preds}
    tables = {n: r.table for n, r in reps.items()}
    rep_runs, noise = repeat_noise(table, repeat)
    rep_keys = set(zip(rep_runs["config_name"], rep_runs["plan_name"], strict=True))
    results: dict = {"n_runs": len(table), "n_configs": int(table["config_name"].nunique()), "system": SYSTEM,
                     "target_pct": TARGET_PCT, "fitted_on_runs": False, "notes": notes, "predictors": {},
                     "repeat_noise": noise}
    for n, t in tables.items():
        on_rep = t[[k in rep_keys for k in zip(t["config_name"], t["plan_name"], strict=True)]]
        results["predictors"][n] = {"all": H100.score(t), "phases": reps[n].phases,
                                    "repeat_runs_geomean_pct": (error_summary(on_rep["predicted_ms"],
                                                                              on_rep["median_ms"])["geomean_pct"]
                                                                if len(on_rep) else None),
                                    "met_target": bool(H100.score(t)["geomean_pct"] < TARGET_PCT)}
    runs_out = table[["config_name", "plan_name", "num_tables", "batch_size_per_gpu", "median_ms", "std_ms"]].copy()
    for n, t in tables.items():
        runs_out[f"{n}: predicted_ms"] = t["predicted_ms"].to_numpy()
        runs_out[f"{n}: error_pct"] = 100 * (t["predicted_ms"].to_numpy() / t["median_ms"].to_numpy() - 1)
    results["runs"] = runs_out.to_dict(orient="records")
    results["ranking_by_config"] = per_config_ranking(tables, repeat)

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rel = table["std_ms"] / table["median_ms"]
        print("# DLRM on one H200: engine predictions vs real single-GPU training on hardware and configurations "
              "the engine was never developed on (datasets/dlrm-h200-1gpu)\n")
        print(f"Command: `{args.command}` ({{SECONDS}} s on a shared 2-core machine; the timing does not affect the "
              "numbers).\n")
        print(f"Measurements: `datasets/{runs.name}/` ({len(table)} (config, plan) runs, {results['n_configs']} "
              f"configs from `hybrid bench campaign --device cuda --ranks 1 --configs 4`, seed 0, one H200, NCCL, "
              f"one process; data card in its README.md). Noise: std/median of the 10 timed iterations median "
              f"{100 * rel.median():.1f}%, max {100 * rel.max():.1f}%. Measured iterations "
              f"{table['median_ms'].min():.1f}-{table['median_ms'].max():.1f} ms.\n")
        print("**Nothing is fitted or tuned on these runs.** They were measured after the engine's DLRM graph and "
              "host constants were settled (on `datasets/dlrm-h100-1gpu` and the CPU campaigns); every predictor "
              "below uses the engine's default host overheads and kernel models fitted on kernel profiles only (the "
              "section on host constants uses the ones fitted on the H100's dev runs). All 8 runs are held out; "
              "there is no dev split.\n")
        print(f"Every run is predicted on the catalog's `{SYSTEM}` (the runs' `system: local-cuda`). Predictors:\n")
        for n in ("roofline", "public", "profile", "H100 profile"):
            print(f"- `{n}`: {notes[n]}")
        print(f"\nTarget: geomean error < {TARGET_PCT:.0f}% of the iteration time.\n")

        print("## Iteration time\n")
        print("| predictor | runs | geomean % | median % | p90 % | predicted/measured (median) | plan ranking: "
              "predicted-faster plan measured faster | same, configs whose plans differ by > 1 std | target "
              f"< {TARGET_PCT:.0f}% |")
        print("|---|---|---|---|---|---|---|---|---|")
        for n in names:
            s = results["predictors"][n]["all"]
            rk = s["ranking"]
            print(f"| {n} | {s['n_rows']} | {fmt(s['geomean_pct'])} | {fmt(s['median_pct'])} | "
                  f"{fmt(s['p90_pct'])} | {s['ratio_median']:.2f} | {rk['agree']}/{rk['n']} | "
                  f"{rk.get('agree_clear', 0)}/{rk.get('n_clear', 0)} | "
                  f"{'met' if results['predictors'][n]['met_target'] else 'missed'} |")

        print("\n## Measurement noise: the repeat measurement against `results.csv`\n")
        print(f"`repeat_results.csv` measured {noise['n_runs']} of the runs again minutes earlier on the same "
              f"machine. Taken as a \"prediction\" of `results.csv`, the repeat is off by geomean "
              f"{fmt(noise['geomean_pct'])}%, median {fmt(noise['median_pct'])}% (per run "
              f"{noise['min_diff_pct']:+.1f}% to {noise['max_diff_pct']:+.1f}%), and picks the same faster plan in "
              f"{noise['ranking']['agree']}/{noise['ranking']['n']} configs. On the same "
              f"{noise['n_runs']} runs the predictors' geomean errors are: "
              + ", ".join(f"{n} {fmt(results['predictors'][n]['repeat_runs_geomean_pct'])}%" for n in names)
              + ". An error below the repeat's cannot be told apart from noise.\n")
        print("| run | reference ms | repeat ms | repeat vs reference |")
        print("|---|---|---|---|")
        for _, r in rep_runs.iterrows():
            print(f"| {r['config_name']} {r['plan_name']} | {r['median_ms']:.2f} | {r['median_ms_rep']:.2f} | "
                  f"{r['diff_pct']:+.1f}% |")

        print("\n## Per run (signed error: predicted / measured - 1)\n")
        print("| run | tables | batch | measured ms (std %) | " + " | ".join(f"{n} ms (error)" for n in names) + " |")
        print("|---|---|---|---|" + "---|" * len(names))
        for r in results["runs"]:
            cells = [f"{r[f'{n}: predicted_ms']:.2f} ({r[f'{n}: error_pct']:+.1f}%)" for n in names]
            print(f"| {r['config_name']} {r['plan_name']} | {r['num_tables']} | {r['batch_size_per_gpu']} | "
                  f"{r['median_ms']:.2f} ({100 * r['std_ms'] / r['median_ms']:.1f}%) | " + " | ".join(cells) + " |")

        print("\n## Plan ranking per config (size_greedy vs dp_small)\n")
        print("| config | measured faster (gap, larger std of the two) | repeat's faster | "
              + " | ".join(names) + " |")
        print("|---|---|---|" + "---|" * len(names))
        for r in results["ranking_by_config"]:
            picks = [("ok: " if r[n] == r["measured_faster"] else "wrong: ") + r[n] for n in names]
            print(f"| {r['config']} | {r['measured_faster']} ({r['gap_pct']:.1f}%, std {r['std_pct']:.1f}%) | "
                  f"{r.get('repeat_faster', '-')} | " + " | ".join(picks) + " |")

        print("\n## Per harness phase (all runs)\n")
        print("As in `h100/results.md`: the harness times phases on the host, the engine cuts its simulated "
              "timeline at the same host events. Predicted/measured is the median over runs; the repeat column is "
              "the geomean difference of the repeat's phase times from the reference's (noise).\n")
        print("| phase | measured median ms | repeat vs reference, geomean % | "
              + " | ".join(f"{n}: predicted ms, geomean %, pred/meas" for n in names) + " |")
        print("|---|---|---|" + "---|" * len(names))
        for ph in PHASES:
            cells, meas = H100.phase_cells(reps, names, ph)
            nz = noise["phases"].get(ph)
            print(f"| {ph} | {'-' if meas is None else f'{meas:.2f}'} | {'-' if nz is None else fmt(nz)} | "
                  + " | ".join(cells) + " |")

        print("\n## Engine breakdown: predicted GPU time per op family (median over runs, ms)\n")
        fams = {p.name: H100.family_breakdown(p, runs, reps[p.name].table) for p in preds
                if p.name in ("profile", "H100 profile")}
        results["families_median_ms"] = {n: {k: float(v) for k, v in f.median().items()} for n, f in fams.items()}
        cols = list(dict.fromkeys(c for f in fams.values() for c in f.columns if c != "iteration"))
        print("| family | " + " | ".join(f"{n}: ms (share)" for n in fams) + " |")
        print("|---|" + "---|" * len(fams))
        for c in cols:
            cells = [f"{f[c].median():.2f} ({100 * (f[c] / f['iteration']).median():.0f}%)" if c in f.columns
                     else "-" for f in fams.values()]
            print(f"| {c} | " + " | ".join(cells) + " |")
        print("| predicted iteration | " + " | ".join(f"{f['iteration'].median():.2f}" for f in fams.values())
              + " |")
        print(f"| measured iteration | {table['median_ms'].median():.2f} |" + " |" * (len(fams) - 1))
        print("\n## Host constants fitted on the H100's runs, applied to the H200's\n")
        host = h100_host_constants(args, runs, reps["profile"].table, next(p for p in preds if p.name == "profile"))
        results["h100_dev_host_constants"] = host
        print("The engine's host constants (`Overheads`) fitted on the dev half of the H100 runs "
              f"(`experiments/dlrm_validation/h100.py`'s fit: {Overheads.describe_fit(host['fit'])}), applied "
              "unchanged to all 8 H200 runs with the `profile` predictor's kernels; and scaled by the two profiles' "
              f"measured per-kernel latency, {host['latency_us'][args.bundle]:.1f} / "
              f"{host['latency_us'][args.h100_bundle]:.1f} us = {host['latency_ratio']:.2f} (launch, framework and host-op "
              "constants: the physical guess that the H200 VM's slower host scales them alike, tried once and "
              "reported either way). No H200 run is used to fit anything.\n")
        print("| host constants | host op us | launch us | geomean % | median % | predicted/measured (median) | "
              "plan ranking |")
        print("|---|---|---|---|---|---|---|")
        for n, v in host["variants"].items():
            o = v["overheads"]
            print(f"| {n} | {o['host_op_us']:.2f} | {o['kernel_launch_us']:.1f} | {fmt(v['geomean_pct'])} | "
                  f"{fmt(v['median_pct'])} | {v['ratio_median']:.2f} | {v['ranking']['agree']}/{v['ranking']['n']} |")
        print("\n## Kernel level: the H100 profile's model on the H200's own profile rows\n")
        print(f"Why `H100 profile` differs from `profile`: the model fitted on `datasets/{Path(args.h100_bundle).name}` "
              f"predicts every row of `datasets/{Path(args.bundle).name}` (the H200 ops it never saw). Ops the DLRM "
              "graph uses first.\n")
        kern = kernel_transfer(preds[-1], args.bundle)
        results["h100_profile_on_h200_rows"] = kern.to_dict(orient="index")
        print("| op | rows | geomean % | predicted/measured (median) |")
        print("|---|---|---|---|")
        for op, r in kern.iterrows():
            print(f"| {op} | {int(r['rows'])} | {fmt(r['geomean_pct'])} | {r['ratio_median']:.2f} |")
    text = out.getvalue().replace("{SECONDS}", f"{time.perf_counter() - t0:.0f}")
    return text, results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=str(project_datasets_dir() / RUNS))
    ap.add_argument("--bundle", default=str(project_datasets_dir() / BUNDLE), help="the H200 profile")
    ap.add_argument("--h100-bundle", default=str(project_datasets_dir() / H100_BUNDLE), help="the H100 profile")
    ap.add_argument("--h100-runs", default=str(project_datasets_dir() / H100.RUNS),
                    help="the H100 harness runs whose dev half the host constants are fitted on")
    ap.add_argument("--data-dir", default=None, help="public datasets (default: ../shared/datasets)")
    ap.add_argument("--no-public", action="store_true", help="skip the public-data predictor (faster)")
    ap.add_argument("--out", default=str(Path(__file__).with_name("h200") / "results.md"))
    ap.add_argument("--json", action="store_true", help="print the figures as JSON instead of writing results.md")
    args = ap.parse_args(argv)
    args.command = "python " + " ".join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    text, results = run(args)
    return H100.emit(args, text, results)


if __name__ == "__main__":
    sys.exit(main())
