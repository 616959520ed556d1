"""Kernel-correction accuracy on every public kernel source together: leave-one-GPU-out per source and dtype.

    python experiments/kernel_accuracy/run.py [--data-dir DIR] [--rows-per-group 1200] [--trees 400] [--out results.md]

Sources (all fitted together, as a user calibrating on everything public would): NeuSight (FP32 PyTorch, 7
GPUs incl. AMD MI100/MI210, de-duplicated at import), XLA's H100 matmul table (bf16 / tf32 / fp8), Vidur's
A100-SXM4-80GB and A40 FP16 layer GEMMs / GEMVs and norms / elementwise, DeepBench GEMMs (10 GPUs; fp32, fp16,
int8), LLMCompass A100 / MI210 FP16 matmuls, and the project's own CPU profile (``datasets/cpu-amd-epyc-1c``).

Every (source, device, dtype, family group) is sub-sampled to ``--rows-per-group`` rows (seeded) so that one
source does not drown the others and the run takes minutes on 2 cores. Leave-one-GPU-out holds out *every*
row of a device, from all sources at once (P100 and T4 are in NeuSight and DeepBench, A100-SXM4-80GB in Vidur
and LLMCompass, MI210 in NeuSight and LLMCompass), fits on the rest and scores the held-out rows. Reported per
(source, dtype): the mean over held-out devices of the per-device geomean error, with the roofline beside it.
Configurations (name -> use_device_features, feature_version, transfer booster) are compared on exactly the
same splits; the first is the model ``hybrid calibrate`` fits by default.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.corrections import GemmXGB, HybridPredictor, PointwiseXGB, XGBParams
from hybrid.data.bundle import load_bundle
from hybrid.data.importers import import_paths
from hybrid.data.paths import public_data_dir
from hybrid.ops.families import family_array
from hybrid.ops.roofline import roofline
from hybrid.reports.markdown import write_benchmark_results
from hybrid.reports.metrics import relative_errors

ROOT = Path(__file__).resolve().parents[2]
#: importer -> source label
SOURCES = {"neusight": "neusight", "xla-matmul": "xla", "vidur-compute": "vidur", "deepbench": "deepbench",
           "llmcompass": "llmcompass"}
CPU_BUNDLE = ROOT / "datasets" / "cpu-amd-epyc-1c"
GEMM_FAMILIES = ("gemm",)
POINTWISE_FAMILIES = ("elementwise", "norm", "softmax")

#: name -> (use_device_features, feature_version, transfer booster)
GEMM_CONFIGS = {
    "v4, one booster (default)": (True, 4, False),
    "v4 + transfer booster": (True, 4, True),
    "v3, one booster": (True, 3, False),
    "v3 + transfer booster": (True, 3, True),
    "v2 + transfer booster": (True, 2, True),
    "v2, one booster": (True, 2, False),
}
POINTWISE_CONFIGS = {
    "v3 + transfer booster (default)": (True, 3, True),
    "v3, one booster": (True, 3, False),
    "v4 + transfer booster": (True, 4, True),
    "v4, one booster": (True, 4, False),
    "v2, one booster": (True, 2, False),
}


def make_model(klass, config, seed: int, trees: int):
    """The correction of ``config`` (see :data:`GEMM_CONFIGS`), every flag explicit."""
    use_device, version, transfer = config
    return klass(XGBParams(seed=seed, n_estimators=trees), use_device, version, transfer=transfer)


def load(data_dir: Path, rows_per_group: int, seed: int, gpu_bundles: bool = False):
    """Every source's GEMM and pointwise rows, sub-sampled per (source, device, dtype, group); ``gpu_bundles``
    adds the project's GPU bundles (``datasets/``, source ``profile:<bundle>``), held out with their device."""
    cpu, catalog = load_bundle(CPU_BUNDLE)
    frames = []
    if gpu_bundles:
        from hybrid.data.bundle import bundle_catalog, project_bundles

        catalog = bundle_catalog([CPU_BUNDLE, *project_bundles("gpu")])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fmt, label in SOURCES.items():
            frames.append(import_paths(fmt, data_dir, catalog=catalog).assign(src=label))
    frames.append(cpu.assign(src="cpu-profile"))
    table = _groups(pd.concat(frames, ignore_index=True, sort=False), rows_per_group, seed)
    # LLMCompass's eager softmax rows (A100, MI210: the only AMD pointwise data; its layernorm and GELU ran under
    # torch.compile and are left out), sampled on their own so the other sources' rows are the same as before
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lc = import_paths("llmcompass-pointwise", data_dir, catalog=catalog)
    lc = lc[lc["framework"] == "pytorch"].assign(src="llmcompass")
    if len(lc):
        table = pd.concat([table, _groups(lc, rows_per_group, seed)], ignore_index=True, sort=False)
    if gpu_bundles:  # sampled on their own, so the public rows are the same with and without them
        from hybrid.data.bundle import load_project_bundles

        gpu, _ = load_project_bundles("gpu")
        if len(gpu):
            gpu = gpu.assign(src="profile:" + gpu["bundle"].astype(str)).drop(columns="bundle")
            table = pd.concat([table, _groups(gpu, rows_per_group, seed)], ignore_index=True, sort=False)
    return drop_implausible(table.reset_index(drop=True), catalog), catalog


def drop_implausible(table: pd.DataFrame, catalog) -> pd.DataFrame:
    """``table`` without the GPU GEMM groups every fit leaves out (faster than the datasheet peak allows,
    :mod:`hybrid.data.quality`), so they are not scored either; ``attrs['implausible']`` describes them."""
    from hybrid.data.quality import describe

    drop, bad = HybridPredictor(catalog).implausible(table)
    out = table.loc[~drop].reset_index(drop=True)
    out.attrs["implausible"] = describe(bad) if len(bad) else ""
    return out


def _groups(table: pd.DataFrame, rows_per_group: int, seed: int) -> pd.DataFrame:
    """GEMM and pointwise rows with their ``family`` and ``group``, at most ``rows_per_group`` per (source, device,
    dtype, group) (seeded), in the order of those keys.

    Each group is sampled on its own (``seed``, its own rows in import order): rows added to one source or device
    leave every other group's rows, and their order, as they were. (Until 2026-12-05 the whole table was shuffled
    first, so 116 rows appended to the CPU profile redrew every group: the GEMM leave-one-GPU-out mean moved 13.0
    -> 13.4% with no GEMM row changed.)"""
    fam = pd.Series(family_array(table["op"]), index=table.index)
    table = table.assign(family=fam)
    table = table[fam.isin(GEMM_FAMILIES + POINTWISE_FAMILIES)]
    table = table.assign(group=np.where(table["family"].isin(GEMM_FAMILIES), "gemm", "pointwise"))
    keys = ["src", "device", "dtype", "group"]
    parts = [g.sample(n=min(len(g), rows_per_group), random_state=seed)
             for _, g in table.groupby(keys, sort=True, dropna=False, observed=True)]
    return pd.concat(parts) if parts else table.iloc[:0]


def logo_predictions(sub: pd.DataFrame, base: pd.DataFrame, catalog, klass, config, seed: int, trees: int,
                     label: str) -> np.ndarray:
    """Leave-one-device-out predictions for every row of ``sub``."""
    pred = np.full(len(sub), np.nan)
    devices = sub["device"].to_numpy()
    gpus = [d for d in sorted(pd.unique(devices)) if catalog.device(d).kind == "gpu"]
    for held in gpus:  # the CPU profile is the only CPU: it stays in training, never held out
        test = devices == held
        model = make_model(klass, config, seed, trees)
        model.fit(sub[~test], base[~test], catalog)
        pred[test] = model.predict(sub[test], base[test], catalog)
        print(f"  {label}: held-out {held} done", file=sys.stderr)
    return pred


def in_distribution(sub: pd.DataFrame, base: pd.DataFrame, catalog, klass, config, seed: int, trees: int):
    test = np.random.default_rng(seed).random(len(sub)) < 0.2
    model = make_model(klass, config, seed, trees)
    model.fit(sub[~test], base[~test], catalog)
    err = relative_errors(model.predict(sub[test], base[test], catalog), sub.loc[test, "time_us"])
    return _geo(err)


#: Share of each (device, dtype) group's GEMMs, by FLOP count, held out as "the largest" (the rest fitted).
LARGEST_QUANTILES = (0.6, 0.8, 0.9)


def largest_held_out(sub: pd.DataFrame, base: pd.DataFrame, catalog, seed: int, trees: int,
                     quantile: float) -> tuple[dict, pd.DataFrame]:
    """GPU GEMMs above the ``quantile`` of their (device, dtype) group's FLOP counts held out, the default GEMM model
    fitted on the rest (every device in it): their error with the sub-problem bound (the default,
    ``GemmXGB.split_bound_us``) and with the trees alone (the same model, its extents emptied)."""
    flops = 2 * sub["b"].fillna(1).to_numpy(float) * sub[["m", "n", "k"]].to_numpy(float).prod(axis=1)
    key = sub["device"].astype(str) + "|" + sub["dtype"].astype(str)
    thr = pd.Series(flops).groupby(key.to_numpy()).transform(lambda f: f.quantile(quantile)).to_numpy()
    gpu = np.array([catalog.device(d).kind == "gpu" for d in sub["device"]])
    test = (flops > thr) & gpu
    model = GemmXGB(XGBParams(seed=seed, n_estimators=trees)).fit(sub[~test], base[~test], catalog)
    bounded = model.predict(sub[test], base[test], catalog)
    extents, model.extents = model.extents, {}
    alone = model.predict(sub[test], base[test], catalog)
    model.extents = extents
    meas = sub.loc[test, "time_us"].to_numpy(dtype=np.float64)
    rows = sub.loc[test, ["src", "dtype"]].assign(
        trees=np.abs(alone / meas - 1), bound=np.abs(bounded / meas - 1), changed=bounded < alone,
        trees_signed=alone / meas - 1, bound_signed=bounded / meas - 1)
    per = rows.groupby(["src", "dtype"]).agg(rows=("trees", "size"), trees=("trees", _geo), bound=("bound", _geo),
                                             changed=("changed", "sum"), trees_bias=("trees_signed", "median"),
                                             bound_bias=("bound_signed", "median"))
    roof = np.abs(base.loc[test, "time_us"].to_numpy(dtype=np.float64) / meas - 1)
    return {"rows": int(test.sum()), "roofline": _geo(roof), "trees": _geo(rows["trees"]), "bound": _geo(rows["bound"]),
            "changed": int(rows["changed"].sum())}, per


def largest_section(sub: pd.DataFrame, base: pd.DataFrame, catalog, seed: int, trees: int) -> list[str]:
    lines = ["## gemm family: largest GEMMs held out (the sub-problem bound)", "",
             "Every GPU (device, dtype) group's GEMMs above a FLOP quantile held out, the default GEMM model fitted on "
             "the rest: the trees extrapolate the held-out sizes; with the bound (`GemmXGB.split_bound_us`, the "
             "default) a compute-bound GEMM that no fitted GEMM of its dtype and kind (bmm or not), on any device, "
             "covers in every dimension is predicted at most as the time of the pieces one covers. Geomean |error| "
             "%; nothing is fitted in the bound.", "",
             "| held out (FLOP quantile) | rows | roofline | trees alone | with the bound (default) | rows changed |",
             "|---|---|---|---|---|---|"]
    detail = None
    for q in LARGEST_QUANTILES:
        res, per = largest_held_out(sub, base, catalog, seed, trees, q)
        lines.append(f"| above the {q:.0%} quantile | {res['rows']} | {res['roofline']:.1f} | {res['trees']:.1f} | "
                     f"**{res['bound']:.1f}** | {res['changed']} |")
        if q == 0.8:
            detail = per
    if detail is not None:
        lines += ["", "Above the 80% quantile, per source and dtype (geomean |error| %, median signed error: "
                  "the trees' bias at sizes beyond the fit):", "",
                  "| source | dtype | rows | trees alone | with the bound | changed | median signed, trees / bound |",
                  "|---|---|---|---|---|---|---|"]
        for (src, dtype), r in detail.iterrows():
            lines.append(f"| {src} | {dtype} | {int(r['rows'])} | {r['trees']:.1f} | {r['bound']:.1f} | "
                         f"{int(r['changed'])} | {r['trees_bias']:+.1%} / {r['bound_bias']:+.1%} |")
    return lines + [""]


#: Dtypes held out in turn by :func:`dtype_section`, with the proxy rules compared on each: "trees alone" (no
#: proxy), the library's (``UNSEEN_DTYPE_PROXY``), and for tf32, which the library leaves to the trees, bf16.
HELD_OUT_DTYPES = {"fp16": {}, "bf16": {}, "tf32": {"tf32": ("bf16",)}}


def dtype_section(sub: pd.DataFrame, base: pd.DataFrame, catalog, seed: int, trees: int) -> list[str]:
    """Every GEMM of one dtype held out (all devices), the default model fitted on the other dtypes: the trees alone
    against pricing the dtype at the efficiency of the nearest fitted one (``GemmXGB.dtype_proxy_us``). The one
    test at hand of the rule fp8 and fp4 GEMMs take (no public source times them plausibly)."""
    from hybrid.corrections.kernel_xgb import UNSEEN_DTYPE_PROXY

    rules = ", ".join(f"{k} -> {'/'.join(v)}" for k, v in UNSEEN_DTYPE_PROXY.items())
    lines = ["## gemm family: a dtype never fitted (the dtype proxy)", "",
             "Every GEMM of one dtype held out, the default GEMM model fitted on the other dtypes (all devices). "
             "*Trees alone*: the held-out dtype's own features through the trees; *proxy*: the efficiency "
             "(measured / roofline) the model predicts for the same shape and device in the nearest fitted dtype of "
             "the same kind of unit, on the held-out dtype's roofline (`GemmXGB.dtype_proxy_us`; the library's rule "
             f"`UNSEEN_DTYPE_PROXY`: {rules}). "
             "This is how fp8 and fp4 GEMMs are priced: no public source times them (XLA's fp8 rows are faster "
             "than the datasheet allows). Geomean |error| % per device (median predicted / measured).", "",
             "| held-out dtype | proxy | device | rows | roofline | trees alone | with the proxy |",
             "|---|---|---|---|---|---|---|"]
    for held, extra in HELD_OUT_DTYPES.items():
        test = (sub["dtype"] == held).to_numpy()
        if not test.any():
            continue
        model = GemmXGB(XGBParams(seed=seed, n_estimators=trees)).fit(sub[~test], base[~test], catalog)
        rule = {**UNSEEN_DTYPE_PROXY, **extra}
        model.dtype_proxy = rule
        proxy = next((p for p in rule.get(held, ()) if p in model.fitted_dtypes), "")
        with_proxy = model.predict(sub[test], base[test], catalog)
        model.dtype_proxy = {}
        alone = model.predict(sub[test], base[test], catalog)
        meas = sub.loc[test, "time_us"].to_numpy(dtype=np.float64)
        roof = base.loc[test, "time_us"].to_numpy(dtype=np.float64)
        devs = sub.loc[test, "device"].astype(str).to_numpy()
        label = proxy + ("" if held in UNSEEN_DTYPE_PROXY else " (not the library's rule)")
        for dev in [*sorted(set(devs)), "all"]:
            k = np.ones(len(devs), bool) if dev == "all" else devs == dev
            name = f"**all ({len(set(devs))} devices)**" if dev == "all" else dev
            lines.append(f"| {held} | {label} | {name} | {int(k.sum())} | {_cell(roof[k], meas[k])} | "
                         f"{_cell(alone[k], meas[k])} | {_cell(with_proxy[k], meas[k])} |")
    return lines + [""]


def _cell(pred: np.ndarray, meas: np.ndarray) -> str:
    """Geomean |error| % and the median predicted / measured."""
    return f"{_geo(np.abs(pred / meas - 1)):.1f} ({np.median(pred / meas):.2f})"


def _geo(err: np.ndarray) -> float:
    err = np.asarray(err, dtype=np.float64)
    return float(np.exp(np.mean(np.log(np.maximum(err, 1e-6)))) * 100.0) if len(err) else float("nan")


def per_source_dtype(sub: pd.DataFrame, err: np.ndarray) -> pd.DataFrame:
    """(src, dtype) -> mean over devices of per-device geomean %, number of devices, rows."""
    frame = sub[["src", "dtype", "device"]].assign(err=err)
    frame = frame[np.isfinite(frame["err"])]
    per_dev = frame.groupby(["src", "dtype", "device"])["err"].agg(_geo).rename("geo").reset_index()
    out = per_dev.groupby(["src", "dtype"]).agg(mean_pct=("geo", "mean"), devices=("device", "nunique"))
    out["rows"] = frame.groupby(["src", "dtype"]).size()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--rows-per-group", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trees", type=int, default=400)
    ap.add_argument("--groups", default="gemm,pointwise")
    ap.add_argument("--configs", type=int, default=99, help="run only the first N configurations per group")
    ap.add_argument("--with-gpu-bundles", action="store_true",
                    help="also use the project's GPU bundles (datasets/; off by default, "
                         "experiments/gpu_bundles/results.md says why)")
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.md")))
    args = ap.parse_args()
    t_start = time.time()
    table, catalog = load(public_data_dir(args.data_dir), args.rows_per_group, args.seed, args.with_gpu_bundles)
    lines = [
        "# Kernel correction accuracy: every public kernel source, leave-one-GPU-out per source and dtype", "",
        f"Command: `python experiments/kernel_accuracy/run.py --rows-per-group {args.rows_per_group} --seed "
        f"{args.seed} --trees {args.trees} --groups {args.groups} --configs {args.configs}"
        f"{' --with-gpu-bundles' if args.with_gpu_bundles else ''}`", "",
        "Data: NeuSight (de-duplicated), XLA H100 matmul, Vidur A100/A40, DeepBench, LLMCompass, own CPU profile; "
        f"each (source, device, dtype, group) sub-sampled to {args.rows_per_group} rows (seed {args.seed}). "
        "Rows: " + ", ".join(f"{g}={n}" for g, n in table.groupby("group").size().items()) + ". "
        "Held-out devices are never used for tuning inside a split, but the configurations below were chosen "
        "by comparing these same leave-one-GPU-out numbers (no nested selection).", "",
        *([f"Left out of every fit and score, as every `HybridPredictor.fit` does (GEMMs faster than the datasheet "
           f"peak allows, `hybrid.data.quality`): {table.attrs['implausible']}.", ""]
          if table.attrs.get("implausible") else []),
        "The CPU profile is the only CPU, so it is always in the training set and never held out. "
        "Cells: mean over held-out devices of the per-device geomean |pred - meas| / meas in %, "
        "(devices, rows) after the roofline column.", "",
    ]
    head = len(lines)  # the plot goes after the introduction
    summary: dict[str, dict[str, float]] = {}
    per_device: dict[str, tuple[pd.Series, pd.Series, str]] = {}  # group -> (roofline, default model, its name)
    for group in args.groups.split(","):
        sub = table[table["group"] == group].reset_index(drop=True)
        base = roofline(sub, catalog)
        klass = GemmXGB if group == "gemm" else PointwiseXGB
        configs = dict(list((GEMM_CONFIGS if group == "gemm" else POINTWISE_CONFIGS).items())[: args.configs])
        held = np.array([catalog.device(d).kind == "gpu" for d in sub["device"]])
        roof_err = np.where(held, relative_errors(base["time_us"], sub["time_us"]), np.nan)
        roof = per_source_dtype(sub, roof_err)
        cols, in_dist, times, dev_means = {}, {}, {}, {}
        for name, config in configs.items():
            t0 = time.time()
            pred = logo_predictions(sub, base, catalog, klass, config, args.seed, args.trees, f"{group} {name}")
            meas = sub["time_us"].to_numpy(dtype=np.float64)
            err = np.abs(pred - meas) / meas  # NaN on the CPU rows (never held out)
            cols[name] = per_source_dtype(sub, err)["mean_pct"]
            per_dev = sub[["device"]].assign(err=err).dropna().groupby("device")["err"].agg(_geo)
            dev_means[name] = per_dev
            in_dist[name] = in_distribution(sub, base, catalog, klass, config, args.seed, args.trees)
            times[name] = time.time() - t0
        names = list(configs)
        lines += [f"## {group} family: leave-one-GPU-out by source and dtype", "",
                  "| source | dtype | devices, rows | roofline | " + " | ".join(names) + " |",
                  "|---|---|---|---|" + "---|" * len(names)]
        for (src, dtype), r in roof.iterrows():
            cells = " | ".join(f"{cols[n].loc[(src, dtype)]:.1f}" for n in names)
            lines.append(f"| {src} | {dtype} | {int(r['devices'])}, {int(r['rows'])} | {r['mean_pct']:.1f} | {cells} |")
        roof_dev = sub[["device"]].assign(err=roof_err).dropna().groupby("device")["err"].agg(_geo)
        lines += ["| **mean over held-out GPUs** | all | " f"{len(roof_dev)}, {int(held.sum())} | {roof_dev.mean():.1f} | "
                  + " | ".join(f"**{dev_means[n].mean():.1f}**" for n in names) + " |"]
        vendor = pd.Series({d: catalog.device(d).vendor for d in roof_dev.index})
        if vendor.nunique() > 1:  # a vendor with few rows can dominate the mean: each vendor's own
            for v, devs in vendor.groupby(vendor).groups.items():
                rows = int(sub["device"].isin(devs).sum())
                lines.append(f"| mean over held-out {v.upper()} GPUs | all | "
                             f"{len(devs)}, {rows} | {roof_dev[devs].mean():.1f} | "
                             + " | ".join(f"{dev_means[n][devs].mean():.1f}" for n in names) + " |")
        lines += [
                  "| in distribution (random 20%) | all | | | " + " | ".join(f"{in_dist[n]:.1f}" for n in names) + " |",
                  "| wall time (s) | | | | " + " | ".join(f"{times[n]:.0f}" for n in names) + " |", "",
                  f"### {group} family: leave-one-GPU-out per held-out device (geomean %, all its rows)", "",
                  "| device | rows | roofline | " + " | ".join(names) + " |", "|---|---|---|" + "---|" * len(names)]
        counts = sub["device"].value_counts()
        for dev in roof_dev.index:
            lines.append(f"| {dev} | {counts[dev]} | {roof_dev[dev]:.1f} | "
                         + " | ".join(f"{dev_means[n][dev]:.1f}" for n in names) + " |")
        lines.append("")
        per_device[group] = (roof_dev, dev_means[names[0]], names[0])
        if group == "gemm":
            lines += largest_section(sub, base, catalog, args.seed, args.trees)
            lines += dtype_section(sub, base, catalog, args.seed, args.trees)
        summary[group] = {n: float(dev_means[n].mean()) for n in names}
    if per_device:
        plot = device_plot(per_device, Path(args.out).with_suffix(".png"))
        lines[head:head] = [f"![leave-one-GPU-out error per held-out GPU, roofline beside the default model]({plot})",
                            ""]
    lines.append(f"Total wall time: {time.time() - t_start:.0f} s (2-core machine shared with other jobs)")
    text = "\n".join(lines) + "\n"
    print(text)
    write_benchmark_results(args.out, text)


def device_plot(per_device: dict[str, tuple[pd.Series, pd.Series, str]], path: Path) -> str:
    """One panel per family group: each held-out GPU's geomean error, the roofline's beside the default model's,
    sorted by the model's error, with the mean over GPUs as a line. Returns the file name (beside the results)."""
    from hybrid.reports.plots import new_figure, save_png

    fig = new_figure(6.5 * len(per_device), 6.5)
    axes = fig.subplots(1, len(per_device), squeeze=False)
    for ax, (group, (roof, model, name)) in zip(axes[0], per_device.items(), strict=True):
        order = model.sort_values().index
        y = np.arange(len(order))
        ax.barh(y + 0.2, roof[order], height=0.4, color="0.75", label=f"roofline (mean {roof.mean():.1f}%)")
        ax.barh(y - 0.2, model[order], height=0.4, color="C0", label=f"{name} (mean {model.mean():.1f}%)")
        ax.axvline(model.mean(), color="C0", linewidth=0.8, linestyle="--")
        ax.set_yticks(y, list(order), fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("geomean |error| on the held-out GPU's rows (%)")
        ax.set_title(f"{group}: each GPU predicted by a fit without it", fontsize=10)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.09), ncol=2)  # below: no bar hidden
        ax.grid(True, axis="x", alpha=0.3)
    return save_png(fig, path).name  # written whole or not at all


if __name__ == "__main__":
    main()
