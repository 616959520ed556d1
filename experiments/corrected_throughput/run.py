"""Speed of corrected predictions (with 80% intervals) and of loading a registered model.

    python experiments/corrected_throughput/run.py [--rows 200000] [--repeats 3] [--out results.md]

A predictor with every default correction (GEMM and pointwise XGBoost with default hyper-parameters, embedding
XGBoost, collective sigmoids) is calibrated with ``hybrid.tracking.calibrate`` (random split + final fit,
intervals from the random split) on real measurements: NeuSight (de-duplicated, sub-sampled) and the project's
CPU profile (``datasets/cpu-amd-epyc-1c``: embedding lookups, gloo collectives), and registered in a
temporary local MLflow store. Then:

* throughput of ``HybridPredictor.predict`` (intervals included) on ``--rows`` rows: GEMM rows; a GEMM /
  elementwise / norm / softmax mix; every family (adds embedding lookups and collectives); every family with
  no two rows identical (a row-id column: the path without de-duplication of repeated rows, although the
  rows still repeat shapes, so their feature rows repeat); every family with every row's sizes jittered (no two
  rows with the same inputs: the worst case, every row through the trees); best of ``--repeats``, and the same
  without intervals;
* registered-model load: ``load_predictor(NAME)`` in a fresh interpreter (the imports it triggers included,
  interpreter start-up excluded), and the wall time of a whole ``hybrid predict gemm ... --model NAME``
  process; best of ``--repeats``.

The machine is shared with other jobs, so every figure is a best-of-N and the load average is printed.
Targets (issue 13): >= 2e5 corrected predictions/s for any family mix, intervals included (wall clock on the
2-core machine; CPU time, the one-core equivalent, beside it); a model loaded in under 1 s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.corrections.kernel_xgb import PARALLEL_PREDICT_MIN_ROWS
from hybrid.data.bundle import load_bundle
from hybrid.data.importers import import_paths
from hybrid.data.paths import public_data_dir
from hybrid.reports.markdown import write_benchmark_results

ROOT = Path(__file__).resolve().parents[2]
TARGET_ROWS_PER_S = 2e5
TARGET_LOAD_S = 1.0


def training_table(data_dir: Path, per_group: int) -> tuple[pd.DataFrame, object]:
    cpu, catalog = load_bundle(ROOT / "datasets" / "cpu-amd-epyc-1c")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ns = import_paths("neusight", data_dir, catalog=catalog)
    ns = ns.sample(frac=1.0, random_state=0).groupby(["device", "op"]).head(per_group)
    return pd.concat([ns, cpu], ignore_index=True, sort=False), catalog


def workload(kind: str, n: int, train: pd.DataFrame, seed: int) -> pd.DataFrame:
    """``n`` rows resampled from the training shapes with per-row devices (also GPUs the model never saw)."""
    rng = np.random.default_rng(seed)
    ops = {"gemm": ["bmm", "linear", "gemm", "gemv"],
           "mixed": ["bmm", "linear", "gemm", "elementwise", "layernorm", "rmsnorm", "softmax"],
           "all": None}[kind]
    pool = train if ops is None else train[train["op"].isin(ops)]
    out = pool.sample(n, replace=True, random_state=seed).reset_index(drop=True).drop(columns=["time_us"])
    gpu = ~out["device"].astype(str).str.startswith("cpu")
    unseen = rng.random(n) < 0.25  # a quarter of the GPU rows on GPUs absent from the training data
    out.loc[gpu & unseen, "device"] = rng.choice(["H100-SXM", "A10", "L4", "MI250X"], int((gpu & unseen).sum()))
    return out


#: The size columns :func:`jittered` moves per row (one or two per op family: GEMM ``m`` / ``n``, pointwise
#: ``rows`` or ``elements``, conv ``batch``, embedding ``batch_size``, collective ``size_bytes``).
JITTER_COLUMNS = ("m", "n", "rows", "elements", "batch", "batch_size", "size_bytes")


def jittered(table: pd.DataFrame, seed: int) -> pd.DataFrame:
    """``table`` with every row's sizes moved up by a few percent at random (whole numbers), so that no two rows
    have the same inputs: the feature rows of a real sweep over shapes, not the repeated shapes of a resample.
    An elementwise row given as lines keeps ``elements = rows x hidden`` (the schema's check)."""
    rng = np.random.default_rng(seed)
    out = table.copy()

    def num(col: str) -> np.ndarray:
        return pd.to_numeric(out[col], errors="coerce").to_numpy(dtype=np.float64)

    lines = (np.isfinite(num("rows")) & np.isfinite(num("hidden")) & np.isfinite(num("elements"))
             if {"rows", "hidden", "elements"} <= set(out.columns) else np.zeros(len(out), dtype=bool))
    for col in JITTER_COLUMNS:
        if col not in out.columns:
            continue
        v = num(col)
        ok = np.isfinite(v) & (v > 0)
        if col == "elements":  # lines: rows x hidden, from the jittered rows
            new = np.where(lines, num("rows") * num("hidden"), v)
            ok &= ~lines
        else:
            new = v
        new = np.where(ok, np.floor(v * (1 + rng.uniform(0.0, 0.05, len(v)))) + rng.integers(0, 64, len(v)), new)
        out[col] = pd.array(new, dtype="Int64") if isinstance(out[col].dtype, pd.Int64Dtype) else new
    return out


def best_of(fn, repeats: int, cpu: bool = False) -> float:
    """Best wall time of ``repeats`` calls, or (``cpu``) the best CPU time of this process (all its threads: the
    one-core equivalent of the work)."""
    clock = time.process_time if cpu else time.perf_counter
    times = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--per-group", type=int, default=400, help="training rows per NeuSight (device, op)")
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.md")))
    args = ap.parse_args()
    from hybrid.tracking.calibrate import CalibrationConfig, calibrate
    from hybrid.tracking.inputs import Measurements
    from hybrid.tracking.registry import load_predictor

    load0 = os.getloadavg()[0]
    train, catalog = training_table(public_data_dir(args.data_dir), args.per_group)
    tmp = Path(tempfile.mkdtemp(prefix="hybrid-throughput-"))
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    t0 = time.time()
    result = calibrate(Measurements(train, catalog, ["neusight", "cpu-amd-epyc-1c"]),
                       CalibrationConfig(name="speed", lodo=False), tracking_uri=uri)
    fit_s = time.time() - t0
    pred = load_predictor("speed", tracking_uri=uri, catalog=catalog).predictor
    print(f"calibrated in {fit_s:.0f} s; corrections: {sorted(result.summary['corrections'])}", file=sys.stderr)

    from hybrid.corrections.predictor import distinct_rows

    rows = []
    for kind, label in (("gemm", "GEMM family"), ("mixed", "GEMM + elementwise + norm + softmax"),
                        ("all", "every family (+ embedding lookups, collectives)"),
                        ("distinct", "every family, every row distinct (a `row_id` column)"),
                        ("shapes", "every family, every row's sizes distinct (jittered)")):
        table = workload("all" if kind in ("distinct", "shapes") else kind, args.rows, train, seed=1)
        if kind == "distinct":  # same shapes, but no two rows identical: the path without de-duplication
            table = table.assign(row_id=np.arange(len(table)))
        if kind == "shapes":  # no two rows with the same inputs
            table = jittered(table, seed=2)
        found = distinct_rows(table, max_fraction=1.0)
        n_distinct = len(table) if found is None else len(found[0])
        found = distinct_rows(table.drop(columns=["row_id"], errors="ignore"), max_fraction=1.0)
        n_inputs = len(table) if found is None else len(found[0])
        out = pred.predict(table)
        assert np.isfinite(out["time_us_low"]).all() and (out["time_us_low"] <= out["time_us"]).all()
        with_iv = best_of(lambda t=table: pred.predict(t), args.repeats)
        without = best_of(lambda t=table: pred.predict(t, intervals=False), args.repeats)
        cpu_iv = best_of(lambda t=table: pred.predict(t), args.repeats, cpu=True)
        rows.append((label, len(table), n_distinct, n_inputs, with_iv, without, cpu_iv))
        print(f"{label}: {len(table) / with_iv:,.0f}/s with intervals, {len(table) / without:,.0f}/s without",
              file=sys.stderr)

    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    code = ("import time; t = time.perf_counter(); c = time.process_time(); "
            "from hybrid.tracking.registry import load_predictor; "
            "load_predictor('speed'); print(time.perf_counter() - t, time.process_time() - c)")

    def run_load(src: str) -> tuple[float, float]:
        out = subprocess.run([sys.executable, "-c", src], env=env, capture_output=True, text=True, check=True)
        wall, cpu_s = out.stdout.strip().splitlines()[-1].split()
        return float(wall), float(cpu_s)

    loads_both = [run_load(code) for _ in range(args.repeats)]
    loads, loads_cpu = [w for w, _ in loads_both], [c for _, c in loads_both]
    # as the CLI does it: XGBoost imported without its optional scikit-learn integration
    code_cli = code.replace("c = time.process_time(); ", "c = time.process_time(); from hybrid.cli.main import "
                            "preload_xgboost; preload_xgboost(); ")
    cli_both = [run_load(code_cli) for _ in range(args.repeats)]
    loads_cli, loads_cli_cpu = [w for w, _ in cli_both], [c for _, c in cli_both]
    cli = []
    for _ in range(args.repeats):
        t1 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "hybrid.cli.main", "predict", "gemm", "--device", "T4", "--dtype",
                        "fp32", "-m", "1024", "-n", "1024", "-k", "1024", "--model", "speed", "--json"],
                       env=env, capture_output=True, check=True)
        cli.append(time.perf_counter() - t1)
    bare = best_of(lambda: subprocess.run([sys.executable, "-c", "pass"], capture_output=True, check=True),
                   args.repeats)

    def rate(row: tuple, col: int) -> float:
        return row[1] / row[col]

    ok_rate = min(rate(r, 4) for r in rows[:3]) >= TARGET_ROWS_PER_S
    ok_rate_cpu = min(rate(r, 6) for r in rows[:3]) >= TARGET_ROWS_PER_S
    ok_distinct, ok_shapes = (rate(rows[i], 4) >= TARGET_ROWS_PER_S for i in (3, 4))
    ok_distinct_cpu, ok_shapes_cpu = (rate(rows[i], 6) >= TARGET_ROWS_PER_S for i in (3, 4))
    ok_load = min(loads_cli_cpu) < TARGET_LOAD_S

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    lines = [
        "# Corrected-prediction throughput and model load time", "",
        f"Command: `python experiments/corrected_throughput/run.py --rows {args.rows} --repeats {args.repeats} "
        f"--per-group {args.per_group}`", "",
        f"Model: default corrections calibrated on {len(train):,} real rows (NeuSight + own CPU profile) in "
        f"{fit_s:.0f} s; intervals calibrated from the random hold-out. Rows: resampled training shapes, a quarter "
        "of the GPU rows on GPUs the model never saw (H100-SXM, A10, L4, MI250X: the unseen-device band).", "",
        f"**Shared machine**: 2 cores shared with at most one other job; load average {load0:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end. Every figure is the best of {args.repeats}; on a quiet machine "
        "expect them faster.", "",
        "The targets are judged on wall-clock time on this 2-core machine, the issue's measure (\"a quiet 2-core "
        "machine, best of 3\"); the load only slows it. XGBoost predicts blocks of at least "
        f"{PARALLEL_PREDICT_MIN_ROWS:,} rows on both cores (`hybrid.corrections.kernel_xgb.prediction_threads`), so "
        "the *CPU-time* column (both cores' seconds) is the one-core equivalent, given beside it.", "",
        "Identical rows are predicted once (`HybridPredictor.predict` reduces a table to its distinct rows when at "
        "most 70% are distinct; exact, see docs/corrections.md), and a large feature block that repeats feature "
        "rows walks the trees once per distinct feature row (`hybrid.corrections.kernel_xgb.repeated_feature_rows`; "
        "exact). The resampled tables repeat shapes (the distinct columns), as an LLM's layers, ranks and search "
        "candidates do. The row-id table has no two identical rows but repeats inputs (shapes on devices), as a "
        "trace's ops named per layer do; the jittered table has no two rows with the same inputs: every row goes "
        "through the trees, the worst case.", "",
        "| rows | count | distinct rows | distinct inputs | predictions/s with intervals (wall) | "
        "without intervals (wall) | with intervals (CPU time) |",
        "|---|---|---|---|---|---|---|",
        *[f"| {label} | {n:,} | {d:,} | {di:,} | {n / s:,.0f} | {n / w:,.0f} | {n / c:,.0f} |"
          for label, n, d, di, s, w, c in rows], "",
        f"| registered-model load, best of {args.repeats} | wall s | CPU s |", "|---|---|---|",
        f"| `load_predictor('speed')` in a fresh interpreter (imports included), as the CLI imports XGBoost "
        f"(no scikit-learn) | {min(loads_cli):.2f} | {min(loads_cli_cpu):.2f} |",
        f"| the same as a library user imports it (XGBoost pulls in scikit-learn) | {min(loads):.2f} | "
        f"{min(loads_cpu):.2f} |",
        f"| whole `hybrid predict gemm ... --model speed --json` process | {min(cli):.2f} | |",
        f"| bare `python -c pass` (interpreter start-up, for reference) | {bare:.2f} | |", "",
        f"Targets (wall clock, 2 cores): >= {TARGET_ROWS_PER_S:,.0f} predictions/s for every mix with intervals: "
        f"**{verdict(ok_rate)}** (slowest {min(rate(r, 4) for r in rows[:3]):,.0f}/s); on the table without "
        f"repeated rows: **{verdict(ok_distinct)}** ({rate(rows[3], 4):,.0f}/s); on the table without repeated "
        f"inputs: **{verdict(ok_shapes)}** ({rate(rows[4], 4):,.0f}/s); model load < {TARGET_LOAD_S:.0f} s: "
        f"**{verdict(ok_load)}** ({min(loads_cli_cpu):.2f} s CPU, CLI path). One-core equivalent (CPU time): every "
        f"mix **{verdict(ok_rate_cpu)}** (slowest {min(rate(r, 6) for r in rows[:3]):,.0f}/s), without repeated "
        f"rows **{verdict(ok_distinct_cpu)}** ({rate(rows[3], 6):,.0f}/s), without repeated inputs "
        f"**{verdict(ok_shapes_cpu)}** ({rate(rows[4], 6):,.0f}/s).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    write_benchmark_results(args.out, text)


if __name__ == "__main__":
    main()
