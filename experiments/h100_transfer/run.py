"""Prediction on hardware the model never saw: the project's own H100 SXM profile against models fitted on public data.

    python experiments/h100_transfer/run.py [--data-dir DIR] [--rows-per-group 600] [--seeds 3] [--folds 5]
        [--out experiments/h100_transfer/results.md]

Test data: ``datasets/H100-SXM`` (the project's ``hybrid profile`` of one H100 SXM5 80GB, eager PyTorch timed with
CUDA events: GEMM family in fp32/tf32/fp16/bf16, elementwise incl. pooling and optimizer steps, norms, softmax,
conv2d, embedding_bag). Training data: every public kernel source the leave-one-GPU-out benchmark fits on
(``experiments/kernel_accuracy/run.py``'s loader: NeuSight, XLA H100 matmul, Vidur, DeepBench, LLMCompass, the
project's CPU profile), plus NeuSight's GPU conv collections (``experiments/kernel_accuracy/conv_logo.py``'s
loader) and the CPU profile's conv and embedding rows (the only embedding-bag data the project has besides this
bundle). Each (source, device, dtype, family group) is sub-sampled to ``--rows-per-group`` rows (seeded).

Scenarios, all with the project's default corrections (:func:`hybrid.corrections.predictor.default_corrections`:
GEMM v4 one booster with the fitted dispatch constant, pointwise v3 + transfer booster, conv, embedding):

1. never seen: every H100 row (any catalog device whose key starts with ``H100``, from every source) removed
   before fitting; the whole bundle predicted;
2. public H100 seen: the same fit keeping XLA's kernel-only H100 GEMMs; the whole bundle predicted;
3. few-shot: the never-seen model adapted (``HybridPredictor.adapt``, strategies ``scale``, ``scale-trees``,
   ``shift`` and ``auto``) with k = 20 / 50 random rows of the bundle, scored on the bundle rows outside the 50-row pool; mean over seeds;
4. in distribution: ``--folds``-fold cross-validation over the bundle with the other folds (and every public row,
   XLA H100 included) in training: an upper bound.

Scenarios 1-2 never see a row of the bundle; nothing in this experiment is tuned on it.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd

from hybrid.corrections import HybridPredictor
from hybrid.corrections import adapt as adapt_mod
from hybrid.data.bundle import load_bundle, read_meta
from hybrid.data.paths import public_data_dir
from hybrid.hardware.catalog import Catalog
from hybrid.ops.families import family_array
from hybrid.ops.roofline import roofline
from hybrid.reports.markdown import write_benchmark_results
from hybrid.reports.metrics import relative_errors


def _experiment(name: str, path: Path) -> ModuleType:
    """Another experiment's module, by file (under a unique name: every experiment's script is ``run.py``)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


_KERNEL_ACCURACY = Path(__file__).resolve().parents[1] / "kernel_accuracy"
kernel_run = _experiment("kernel_accuracy_run", _KERNEL_ACCURACY / "run.py")  # the shared all-sources loader
conv_logo = _experiment("kernel_accuracy_conv_logo", _KERNEL_ACCURACY / "conv_logo.py")  # NeuSight GPU convs


ROOT = Path(__file__).resolve().parents[2]
H100_BUNDLE = ROOT / "datasets" / "H100-SXM"
#: Catalog keys that count as an H100 (every variant is removed for the never-seen fit).
H100_PREFIX = "H100"
#: Families the predictions are scored on (the bundle has these and no collectives).
FAMILIES = ("gemm", "elementwise", "norm", "softmax", "conv", "embedding")
#: ``elementwise`` variants reported apart: optimizer steps and pooling.
OPTIMIZER_VARIANTS = ("sgd", "adagrad", "sparse_sgd", "sparse_adagrad")
POOL_VARIANTS = ("avgpool", "maxpool")
SHOTS = (20, 50)
POOL_SIZE = 50
STRATEGIES = ("scale", "scale-trees", "shift", "auto")


# ------------------------------------------------------------------------------------------------ data
def h100_rows(table: pd.DataFrame, catalog: Catalog) -> np.ndarray:
    """Rows whose device is an H100 of any variant (catalog key starts with :data:`H100_PREFIX`)."""
    codes, uniques = pd.factorize(table["device"].astype(str))
    keys = np.array([catalog.device(str(u)).key.startswith(H100_PREFIX) for u in uniques] + [False], dtype=bool)
    return keys[np.where(codes < 0, len(uniques), codes)]


def load_public(data_dir: Path, rows_per_group: int, seed: int) -> tuple[pd.DataFrame, Catalog]:
    """Every public kernel source (GEMM + pointwise via the kernel-accuracy loader, NeuSight GPU convs) plus the
    CPU profile's conv and embedding rows; sub-sampled per (source, device, dtype, family)."""
    table, catalog = kernel_run.load(data_dir, rows_per_group, seed)
    conv = conv_logo.load_conv(data_dir, catalog).assign(src="neusight")
    conv = conv.sample(frac=1.0, random_state=seed).groupby(["device", "dtype"], sort=False).head(rows_per_group)
    cpu, _ = load_bundle(kernel_run.CPU_BUNDLE)
    cpu = cpu[pd.Series(family_array(cpu["op"]), index=cpu.index).isin(("conv", "embedding"))].assign(
        src="cpu-profile")
    out = pd.concat([table.drop(columns=["family", "group"]), conv, cpu], ignore_index=True, sort=False)
    return out, catalog


def load_h100() -> pd.DataFrame:
    table, _ = load_bundle(H100_BUNDLE)
    return table.reset_index(drop=True)


def measured_ceilings(catalog: Catalog, bundle: Path = H100_BUNDLE, key: str = "H100-SXM"
                      ) -> tuple[Catalog, dict[str, float]]:
    """``catalog`` with the ``key`` entry's peaks, memory bandwidth and per-kernel latency replaced by the medians
    over ``bundle``'s profiler runs of its measured ceilings (``meta.json: ceilings_each_run``): the roofline a
    user gets from the profiler's one-second ceilings run. Diagnostic only (it uses measurements of that GPU)."""
    runs = read_meta(bundle)["ceilings_each_run"]
    peaks = {d: float(np.median([r["peak_tflops"][d] for r in runs])) for d in runs[0]["peak_tflops"]}
    bw = float(np.median([r["mem_bw_gbps"] for r in runs]))
    lat = float(np.median([r["kernel_latency_us"] for r in runs]))
    dev = catalog.device(key)
    flops = {**dev.peak_flops, **{d: v * 1e12 for d, v in peaks.items()}}
    return (catalog.override(dev.key, peak_flops=flops, mem_bw=bw * 1e9, kernel_latency_us=lat),
            {**{f"{d} TFLOP/s": v for d, v in peaks.items()}, "memory GB/s": bw, "kernel latency us": lat})


def report_groups(table: pd.DataFrame) -> np.ndarray:
    """Label per row for the per-family tables: GEMM family by op and dtype, elementwise split into optimizer
    steps / pooling / the rest, norms by op, conv and embedding by direction."""
    fam = family_array(table["op"])
    op = table["op"].astype(str).to_numpy()
    dtype = table["dtype"].astype(str).to_numpy()
    variant = table["variant"].astype(str).to_numpy() if "variant" in table.columns else np.full(len(table), "")
    direction = (table["direction"].fillna("fwd").astype(str).to_numpy() if "direction" in table.columns
                 else np.full(len(table), "fwd"))
    direction = np.where(direction == "bwd", "bwd", "fwd")
    elementwise = np.where(np.isin(variant, OPTIMIZER_VARIANTS), "optimizer step",
                           np.where(np.isin(variant, POOL_VARIANTS), "pooling (avg/max)", "elementwise"))
    return np.select(
        [fam == "gemm", fam == "elementwise", fam == "norm", fam == "softmax", fam == "conv", fam == "embedding"],
        [np.char.add(np.char.add(op.astype(str), " "), dtype.astype(str)), elementwise, op, op,
         np.char.add("conv2d ", direction), np.char.add("embedding_bag ", direction)],
        default=fam).astype(object)


#: display order of the groups (GEMM family first, by op then dtype)
GROUP_ORDER = tuple(f"{op} {d}" for op in ("gemm", "gemv", "bmm", "linear") for d in ("fp32", "tf32", "fp16", "bf16")) + (
    "elementwise", "optimizer step", "pooling (avg/max)", "layernorm", "rmsnorm", "batchnorm", "softmax",
    "conv2d fwd", "conv2d bwd", "embedding_bag fwd", "embedding_bag bwd")


# ------------------------------------------------------------------------------------------------ scoring
def error_table(pred: np.ndarray, meas: np.ndarray, groups: np.ndarray) -> pd.DataFrame:
    """Per group (and ``all``): rows, median and geomean |pred - meas| / meas (%), share within 10% / 25%."""
    err = relative_errors(pred, meas)
    frame = pd.DataFrame({"g": groups, "e": err})
    frame = pd.concat([frame, frame.assign(g="all")], ignore_index=True)
    out = frame.groupby("g", sort=False)["e"].agg(
        rows="size", median_pct=lambda e: float(np.median(e) * 100),
        geomean_pct=lambda e: float(np.exp(np.mean(np.log(np.maximum(e, 1e-6)))) * 100),
        within10_pct=lambda e: float(np.mean(e <= 0.10) * 100), within25_pct=lambda e: float(np.mean(e <= 0.25) * 100))
    order = [g for g in (*GROUP_ORDER, "all") if g in out.index] + sorted(set(out.index) - set(GROUP_ORDER) - {"all"})
    return out.loc[order]


def fit(train: pd.DataFrame, catalog: Catalog, seed: int) -> HybridPredictor:
    """The project's default corrections fitted on ``train``."""
    return HybridPredictor(catalog, seed=seed).fit(train)


def few_shot(base: HybridPredictor, target: pd.DataFrame, seeds: int,
             progress: Callable[[str], None] = lambda s: None,
             forms: list[dict[str, Any]] | None = None, refit_train: pd.DataFrame | None = None,
             catalog: Catalog | None = None) -> dict[str, np.ndarray]:
    """Predictions of ``base`` adapted with k rows of ``target`` per (strategy, k), and unadapted (``k=0``), on
    the rows outside each seed's pool; returned as name -> (seeds, len(target)) arrays with NaN on pool rows.
    With ``refit_train`` (``base``'s training rows) also ``refit k=K``: the default corrections fitted again on
    those rows plus the k new ones (what ``hybrid calibrate`` on both tables does)."""
    out: dict[str, np.ndarray] = {}
    for seed in range(seeds):
        order = np.random.default_rng(seed).permutation(len(target))
        pool, test = target.iloc[order[:POOL_SIZE]], target.iloc[order[POOL_SIZE:]]
        runs = {"k=0": base, **{f"{s} k={k}": base.adapt(pool.iloc[:k], strategy=s) for k in SHOTS for s in STRATEGIES}}
        if forms is not None:  # what strategy auto chose per correction (the constants it fitted)
            for k in SHOTS:
                for key, per in runs[f"auto k={k}"].adaptation().items():
                    for entry in per.values():
                        forms.append({"k": k, "seed": seed, "correction": key, **entry})
        if refit_train is not None and catalog is not None:
            for k in SHOTS:
                runs[f"refit k={k}"] = fit(pd.concat([refit_train, pool.iloc[:k]], ignore_index=True, sort=False),
                                           catalog, seed)
        for name, model in runs.items():
            arr = out.setdefault(name, np.full((seeds, len(target)), np.nan))
            arr[seed, order[POOL_SIZE:]] = model.predict_time(test)
        # diagnostic, not a library strategy: the same robust shrunken scale, one per op family instead of one per
        # correction (which spans families: pointwise = elementwise + norms + softmax)
        base_pool, base_test = base.predict_time(pool), out["k=0"][seed, order[POOL_SIZE:]]
        fam_pool, fam_test = family_array(pool["op"]), family_array(test["op"])
        for k in SHOTS:
            resid = np.log(pool["time_us"].to_numpy(dtype=np.float64)[:k]) - np.log(base_pool[:k])
            offs = adapt_mod.robust_offsets(resid, pd.Series(fam_pool[:k]))
            scale = np.exp(np.array([offs.get(str(f), 0.0) for f in fam_test]))
            arr = out.setdefault(f"family scale k={k}", np.full((seeds, len(target)), np.nan))
            arr[seed, order[POOL_SIZE:]] = base_test * scale
        progress(f"few-shot seed {seed} done")
    return out


def seed_mean_table(preds: np.ndarray, meas: np.ndarray, groups: np.ndarray) -> pd.DataFrame:
    """:func:`error_table` per seed (rows where that seed predicted), averaged over seeds."""
    tables = []
    for row in preds:
        ok = np.isfinite(row)
        tables.append(error_table(row[ok], meas[ok], groups[ok]))
    mean = pd.concat(tables).groupby(level=0).mean()
    return mean.loc[[g for g in (*GROUP_ORDER, "all") if g in mean.index]
                    + sorted(set(mean.index) - set(GROUP_ORDER) - {"all"})]


def cross_validate(public: pd.DataFrame, target: pd.DataFrame, catalog: Catalog, folds: int, seed: int,
                   progress: Callable[[str], None] = lambda s: None) -> np.ndarray:
    """Out-of-fold predictions for every row of ``target``, fitting on ``public`` plus the other folds."""
    fold = np.random.default_rng(seed).permutation(len(target)) % folds
    pred = np.full(len(target), np.nan)
    for f in range(folds):
        test = fold == f
        model = fit(pd.concat([public, target[~test]], ignore_index=True, sort=False), catalog, seed)
        pred[test] = model.predict_time(target[test])
        progress(f"fold {f + 1}/{folds} done")
    return pred


# ------------------------------------------------------------------------------------------------ report
def _pct(v: float) -> str:
    return f"{v:.1f}"


def comparison_lines(tables: dict[str, pd.DataFrame], bold_best: bool = True) -> list[str]:
    """One markdown table: per group, rows then geomean % of each named column (median % in brackets)."""
    names = list(tables)
    first = tables[names[0]]
    tables = {n: t.reindex(first.index) for n, t in tables.items()}  # a group a few-shot draw left out: NaN
    lines = ["| group | rows | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for g in first.index:
        vals = [tables[n].loc[g, "geomean_pct"] for n in names]
        best = int(np.nanargmin(vals))
        cells = []
        for i, n in enumerate(names):
            c = f"{_pct(vals[i])} ({_pct(tables[n].loc[g, 'median_pct'])})"
            cells.append(f"**{c}**" if bold_best and i == best else c)
        lines.append(f"| {g} | {int(first.loc[g, 'rows'])} | " + " | ".join(cells) + " |")
    return lines


def detail_lines(tables: dict[str, pd.DataFrame]) -> list[str]:
    """Per group: median / geomean / within 10% / within 25% for each named model."""
    names = list(tables)
    head = " | ".join(f"{n}: median, geomean, <=10%, <=25%" for n in names)
    lines = ["| group | rows | " + head + " |", "|---|---|" + "---|" * len(names)]
    for g in tables[names[0]].index:
        cells = [" / ".join(_pct(tables[n].loc[g, c]) for c in ("median_pct", "geomean_pct", "within10_pct",
                                                                 "within25_pct")) for n in names]
        lines.append(f"| {g} | {int(tables[names[0]].loc[g, 'rows'])} | " + " | ".join(cells) + " |")
    return lines


def methods_line(pred: pd.DataFrame, groups: np.ndarray) -> str:
    """Which model answered each group (the most common ``method``)."""
    frame = pd.DataFrame({"g": groups, "m": pred["method"].astype(str).to_numpy()})
    top = frame.groupby("g")["m"].agg(lambda m: m.value_counts().index[0])
    return "; ".join(f"{g}: {top[g]}" for g in (*GROUP_ORDER,) if g in top.index)


def transfer_arguments(description: str, out: Path) -> argparse.ArgumentParser:
    """The command line of a GPU-transfer benchmark (this one, ``experiments/h200_transfer``)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--rows-per-group", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3, help="few-shot draws")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--target-rows", type=int, default=0,
                    help="score a seeded sample of this many target-GPU rows (0 = all; for quick checks)")
    ap.add_argument("--out", default=str(out))
    return ap


def main(argv: list[str] | None = None) -> None:
    args = transfer_arguments(__doc__.splitlines()[0], Path(__file__).with_name("results.md")).parse_args(argv)
    t0 = time.time()
    say = lambda s: print(f"[{time.time() - t0:.0f} s] {s}", file=sys.stderr)  # noqa: E731
    public, catalog = load_public(public_data_dir(args.data_dir), args.rows_per_group, args.seed)
    target = load_h100()
    if 0 < args.target_rows < len(target):
        target = target.sample(n=args.target_rows, random_state=args.seed).reset_index(drop=True)
    assert h100_rows(target, catalog).all(), "the H100 bundle has rows of another device"
    is_h100 = h100_rows(public, catalog)
    never = public[~is_h100].reset_index(drop=True)
    assert not h100_rows(never, catalog).any()
    meas = target["time_us"].to_numpy(dtype=np.float64)
    groups = report_groups(target)
    say(f"data: {len(public)} public rows ({int(is_h100.sum())} H100), {len(target)} bundle rows")

    timings = {}
    t = time.time()
    m_never = fit(never, catalog, args.seed)
    p_never = m_never.predict(target, intervals=False)
    timings["fit never-seen"] = time.time() - t
    say("never-seen fit done")
    t = time.time()
    m_public = fit(public, catalog, args.seed)
    p_public = m_public.predict(target, intervals=False)
    timings["fit public-H100"] = time.time() - t
    say("public-H100 fit done")
    t = time.time()
    chosen: list[dict[str, Any]] = []
    shots = few_shot(m_never, target, args.seeds, say, chosen, refit_train=never, catalog=catalog)
    timings["few-shot"] = time.time() - t
    t = time.time()
    cv = cross_validate(public, target, catalog, args.folds, args.seed, say)
    timings["cross-validation"] = time.time() - t

    cat_meas, ceilings = measured_ceilings(catalog)
    roof_meas = error_table(roofline(target, cat_meas)["time_us"].to_numpy(), meas, groups)
    m_diag = m_never.copy()
    m_diag.catalog = cat_meas
    diag_t = error_table(m_diag.predict_time(target), meas, groups)
    roof = error_table(p_never["roofline_us"].to_numpy(), meas, groups)
    never_t = error_table(p_never["time_us"].to_numpy(), meas, groups)
    public_t = error_table(p_public["time_us"].to_numpy(), meas, groups)
    cv_t = error_table(cv, meas, groups)
    shot_t = {n: seed_mean_table(a, meas, groups) for n, a in shots.items()}
    gemm = {m.key: m for m in m_never.corrections}.get("kernel-xgb-gemm")
    gemm_pub = {m.key: m for m in m_public.corrections}.get("kernel-xgb-gemm")
    dev = catalog.device("H100-SXM")
    cmd = "python experiments/h100_transfer/run.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    lines = [
        "# Prediction on a GPU the model never saw: the project's H100 SXM profile", "",
        f"Command: `{cmd}` (settings: `--rows-per-group {args.rows_per_group} --seed {args.seed} --seeds "
        f"{args.seeds} --folds {args.folds} --target-rows {args.target_rows}`)", "",
        f"Test data: `datasets/H100-SXM/measurements.csv`, {len(target)} rows of eager PyTorch ops on one H100 SXM5 "
        "80GB timed with CUDA events (`framework = pytorch`: host dispatch included, 13-18 us floor). Training data: "
        f"{len(public)} public kernel rows (each (source, device, dtype, family) sub-sampled to {args.rows_per_group}; "
        "NeuSight incl. its GPU convs, XLA H100 matmul, Vidur, DeepBench, LLMCompass) and the project's CPU profile; "
        f"{int(is_h100.sum())} of them are H100 rows ({', '.join(sorted(public.loc[is_h100, 'src'].unique()))}: "
        "kernel-only XLA GEMMs). Model: the default corrections of `HybridPredictor` (GEMM v4 one booster with "
        "the fitted dispatch constant, pointwise v3 + transfer booster, conv, embedding). "
        "Scenarios 1-2 never use a bundle row for fitting or tuning, and nothing here was tuned on the bundle.", "",
        "Cells: geomean |pred - meas| / meas in % (median in brackets); bold = lowest of the row.", "",
        "## Summary: every scenario", "",
        "Columns: roofline (catalog datasheet peaks); 1 = never seen (every H100 row removed, "
        f"{len(never)} training rows); 2 = public H100 seen (XLA kernel-only GEMMs kept); 3 = few-shot from model "
        f"1, strategy `auto` (the default: scale, shift or both per correction, chosen by cross-validation on the k rows), `scale-trees` (the default before) or `shift`, or `refit` (model 1's training rows plus the k rows fitted again: a device under 100 rows weighs as if it had 100) with k = 20 / 50 random bundle rows (mean of {args.seeds} seeds, scored on the "
        f"{len(target) - POOL_SIZE} rows outside the {POOL_SIZE}-row pool); 4 = {args.folds}-fold CV with the "
        "other folds in training (upper bound).", "",
    ]
    lines += comparison_lines({"roofline": roof, "1 never seen": never_t, "2 public H100 seen": public_t,
                               "3 auto k=20": shot_t["auto k=20"], "3 auto k=50": shot_t["auto k=50"],
                               "3 scale-trees k=20": shot_t["scale-trees k=20"],
                               "3 scale-trees k=50": shot_t["scale-trees k=50"],
                               "3 shift k=20": shot_t["shift k=20"], "3 shift k=50": shot_t["shift k=50"],
                               "3 refit k=20": shot_t["refit k=20"], "3 refit k=50": shot_t["refit k=50"],
                               "4 in distribution": cv_t})
    lines += ["", "## 1. Never seen: roofline vs corrected, all figures", "",
              "Which model answered (method): " + methods_line(p_never, groups) + ".", ""]
    lines += detail_lines({"roofline": roof, "corrected": never_t})
    better = [g for g in never_t.index if g != "all" and never_t.loc[g, "geomean_pct"] < roof.loc[g, "geomean_pct"]]
    worse = [g for g in never_t.index if g != "all" and g not in better]
    lines += ["", f"Corrected beats roofline (geomean) on: {', '.join(better) or 'none'}. "
              f"Roofline is better on: {', '.join(worse) or 'none'}.", "",
              "## 2. Public H100 rows seen (XLA kernel-only GEMMs in training)", ""]
    lines += detail_lines({"1 never seen": never_t, "2 public H100 seen": public_t})
    lines += ["", "## 3. Few-shot adaptation of model 1 (mean over seeds)", "",
              "k random rows of the whole bundle (all families mixed, as a user measuring a handful of ops would); "
              "`scale`: a robust shrunken scale per (correction, device); `scale-trees` (the default before): that "
              "plus extra trees from 20 rows of a family on; `shift`: one additive per-op time (us) per (correction, "
              "device), `hybrid.corrections.adapt.robust_shift`; `auto` (the default): scale, shift or both "
              "(time = a * pred + b) per (correction, device), the form chosen by cross-validation on the k rows "
              "(`hybrid.corrections.adapt.choose_form`), plus the trees of `scale-trees`; `family scale` (a diagnostic, not a library strategy): the same robust "
              "shrunken scale (`hybrid.corrections.adapt.robust_offsets`) fitted per op family instead of per "
              "correction; `refit`: model 1's training rows plus the k rows, fitted again (not an adaptation). "
              "k=0 is model 1 on the same scoring rows.", ""]
    lines += comparison_lines({n: shot_t[n] for n in ("k=0", *(f"{s} k={k}" for k in SHOTS
                                                                for s in (*STRATEGIES, "family scale", "refit")))})
    lines += ["", "Forms `auto` chose (per seed and correction; scale = efficiency ratio a, shift = per-op host time "
              "b in us, rows = adaptation rows of that correction; a correction with fewer than "
              f"{adapt_mod.MIN_SELECT_ROWS} rows keeps the scale without cross-validation):", "",
              "| k | correction | rows (mean) | forms chosen | scale a (median) | shift b us (median) |",
              "|---|---|---|---|---|---|"]
    ch = pd.DataFrame(chosen)
    for (k, key), g in ch.groupby(["k", "correction"]):
        counts = g["form"].fillna("none").value_counts()
        lines.append(f"| {k} | {key} | {g['rows'].mean():.1f} | "
                     + ", ".join(f"{f} {n}" for f, n in counts.items())
                     + f" | {g['scale'].median():.2f} | {g['shift_us'].median():.1f} |")
    lines += ["", "## 4. In distribution: bundle rows in training", ""]
    lines += detail_lines({"4 in distribution": cv_t})
    lines += ["", "## Fitted constants and ceilings", "",
              f"GEMM dispatch constant (us added to the roofline of framework-timed GPU rows): model 1 "
              f"{getattr(gemm, 'dispatch_us', float('nan')):.1f}, model 2 {getattr(gemm_pub, 'dispatch_us', float('nan')):.1f}; "
              "the bundle's tiny-op floor is 12-21 us (`meta.json`). Catalog `H100-SXM` peaks (TFLOP/s): "
              + ", ".join(f"{k} {dev.peak_flops.get(k, float('nan')) / 1e12:.0f}" for k in ("fp32", "tf32", "fp16", "bf16"))
              + f", memory {dev.mem_bw / 1e9:.0f} GB/s, per-kernel latency {dev.kernel_latency_us:.0f} us; measured by "
              "the profile (median over its runs): " + ", ".join(f"{k} {v:.0f}" for k, v in ceilings.items()) + ".", "",
              "## Diagnostic (uses H100 information, so not a never-seen figure): measured ceilings", "",
              "The H100 catalog entry with the profile's measured ceilings above (peaks, copy bandwidth and the "
              "measured per-kernel latency), for the roofline and for model 1 (not refitted).", ""]
    lines += comparison_lines({"roofline (catalog)": roof, "roofline (measured ceilings)": roof_meas,
                               "1 never seen (catalog)": never_t, "1 never seen (measured ceilings)": diag_t})
    lines += ["",
              "Wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
              + f"; total {time.time() - t0:.0f} s (2-core machine shared with other jobs).", ""]
    text = "\n".join(lines) + "\n"
    print(text)
    write_benchmark_results(args.out, text)


if __name__ == "__main__":
    main()
