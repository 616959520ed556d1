"""Audit of the physical bounds of corrected predictions: how far below the roofline do predictions go, on GPUs
the fit saw and on GPUs it never saw, and how far below it do real measurements go?

    python experiments/bounds_audit/run.py [--data-dir DIR] [--rows-per-group 400] [--trees 200]
        [--lodo-devices 3] [--seed 0] [--out experiments/bounds_audit/results.md]

1. Measured rows: every public kernel source (NeuSight incl. its conv sweep, XLA matmuls, Vidur, DeepBench,
   LLMCompass) and the committed profile bundles (``datasets/``), measured time / roofline time per family and
   source, GPUs only (CPU peaks are estimates of the local machine, not datasheet bounds). This says where a floor
   at the roofline (or at a fraction of it) is physically justified: a family whose measurements never go below
   x times the roofline should not be predicted below it either; a family whose measurements do (L2-resident
   elementwise ops, Winograd convolutions, GEMMs above the datasheet peak) must not be floored there.
   Then a calibrated predictor: every correction (GEMM, pointwise, conv, embedding XGBoost; intervals calibrated with a
   few held-out devices) fitted on the public rows plus the GPU bundles, sub-sampled per (source, device, dtype,
   family) to ``--rows-per-group`` rows.
2. A grid of realistic shapes x dtypes per family on *every* GPU of the catalog (``hybrid/hardware/devices.toml``),
   predicted with ``HybridPredictor.predict``: corrected time / roofline time and interval low / roofline time,
   per family x (GPU the correction was fitted on: seen, or not: unseen). Reported: share below 1.0x, minimum,
   share below the family's floor (:mod:`hybrid.corrections.bounds`) and the worst examples; without the floor
   (as before it) and (3.) with it.
4. What the floor moves on measured rows: conv leave-one-GPU-out through ``HybridPredictor``, with and without.

Collectives are not audited here (their own link floor, ``CollectiveSigmoid.floor_us``). Runs in a few minutes on
2 cores.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import sys
import time
import warnings
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernel_accuracy"))
import conv_logo  # noqa: E402  (NeuSight's conv sweep)
import run as kernel_run  # noqa: E402  (the shared all-sources loader)

from hybrid.corrections import HybridPredictor, XGBParams, bounds  # noqa: E402
from hybrid.corrections.embedding_xgb import EmbeddingXGB  # noqa: E402
from hybrid.corrections.kernel_xgb import ConvXGB, GemmXGB, PointwiseXGB  # noqa: E402
from hybrid.data.bundle import load_project_bundles  # noqa: E402
from hybrid.data.importers import import_paths  # noqa: E402
from hybrid.data.paths import public_data_dir  # noqa: E402
from hybrid.ops.families import family_array  # noqa: E402
from hybrid.ops.roofline import roofline  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: public kernel sources measured against the roofline (importer -> label)
MEASURED_SOURCES = {"neusight": "neusight", "xla-matmul": "xla", "vidur-compute": "vidur", "deepbench": "deepbench",
                    "llmcompass": "llmcompass", "llmcompass-pointwise": "llmcompass"}
KERNEL_FAMILIES = ("gemm", "elementwise", "norm", "softmax", "conv", "embedding", "attention")
#: a prediction "at" the floor counts as not below it (float noise of max(pred, floor))
TOL = 1e-9


# ------------------------------------------------------------------ measured rows
def measured_ratios(data_dir: Path, catalog) -> pd.DataFrame:
    """Every measured GPU kernel row: src, device, dtype, family, op, ratio (measured / roofline), implausible
    (a GEMM group every fit leaves out, :mod:`hybrid.data.quality`)."""
    frames = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fmt, label in MEASURED_SOURCES.items():
            frames.append(import_paths(fmt, data_dir, catalog=catalog).assign(src=label))
        frames.append(conv_logo.load_conv(data_dir, catalog).assign(src="neusight"))
    bundles, _ = load_project_bundles()
    frames.append(bundles.assign(src="profile:" + bundles["bundle"].astype(str)).drop(columns="bundle"))
    table = pd.concat(frames, ignore_index=True, sort=False)
    table = table[np.array([catalog.device(d).kind == "gpu" for d in table["device"].astype(str)])]
    fam = family_array(table["op"])
    table = table[np.isin(fam, KERNEL_FAMILIES)].reset_index(drop=True)
    base = roofline(table, catalog)
    drop, _ = HybridPredictor(catalog).implausible(table)
    return pd.DataFrame({"src": table["src"].astype(str), "device": table["device"].astype(str),
                         "dtype": table["dtype"].astype(str), "family": family_array(table["op"]),
                         "op": table["op"].astype(str),
                         "ratio": table["time_us"].to_numpy(float) / base["time_us"].to_numpy(float),
                         "implausible": drop})


def measured_section(m: pd.DataFrame) -> list[str]:
    lines = ["## 1. Measured GPU rows: measured time / roofline time", "",
             "Every public kernel row and the committed GPU bundles (GPU rows only). `implausible`: GEMM groups "
             "faster than the datasheet peak, which every fit leaves out (`hybrid.data.quality`); the fit-side "
             "columns exclude them.", "",
             "| family | rows | below 1.0x | below 0.9x | min | 0.1% quantile | min, rows a fit keeps | "
             "below 1.0x, rows a fit keeps | where the minimum is |",
             "|---|---|---|---|---|---|---|---|---|"]
    for fam in KERNEL_FAMILIES:
        g = m[m["family"] == fam]
        if not len(g):
            continue
        kept = g[~g["implausible"]]
        worst = g.loc[g["ratio"].idxmin()]
        lines.append(f"| {fam} | {len(g)} | {(g['ratio'] < 1).mean():.2%} | {(g['ratio'] < 0.9).mean():.2%} | "
                     f"{g['ratio'].min():.3f} | {g['ratio'].quantile(0.001):.3f} | {kept['ratio'].min():.3f} | "
                     f"{(kept['ratio'] < 1).mean():.2%} | {worst['src']} {worst['device']} {worst['dtype']} "
                     f"{worst['op']} |")
    lines += ["", "Per family and source (rows a fit keeps):", "",
              "| family | source | devices | rows | below 1.0x | min |", "|---|---|---|---|---|---|"]
    kept = m[~m["implausible"]]
    for (fam, src), g in kept.groupby(["family", "src"], sort=True):
        lines.append(f"| {fam} | {src} | {g['device'].nunique()} | {len(g)} | {(g['ratio'] < 1).mean():.2%} | "
                     f"{g['ratio'].min():.3f} |")
    return lines


# ------------------------------------------------------------------ predictor
def training_table(data_dir: Path, rows: int, seed: int):
    """GEMM / pointwise rows of every public source and the GPU bundles (``kernel_accuracy``'s loader), NeuSight's
    conv sweep, and every bundle's conv / embedding / attention rows, at most ``rows`` per (source, device, dtype,
    family)."""
    table, catalog = kernel_run.load(data_dir, rows, seed, gpu_bundles=True)
    conv = conv_logo.load_conv(data_dir, catalog).assign(src="neusight")
    bundles, _ = load_project_bundles()
    bundles = bundles.assign(src="profile:" + bundles["bundle"].astype(str)).drop(columns="bundle")
    bundles = bundles[np.isin(family_array(bundles["op"]), ("conv", "embedding", "attention"))]
    extra = pd.concat([conv, bundles], ignore_index=True, sort=False)
    extra = extra.assign(family=family_array(extra["op"]))
    extra = (extra.sample(frac=1.0, random_state=seed)
             .groupby(["src", "device", "dtype", "family"], sort=False).head(rows))
    table = pd.concat([table.drop(columns=["group"]), extra], ignore_index=True, sort=False)
    return table.drop(columns=["family", "src"]).reset_index(drop=True), catalog


def fit_predictor(table: pd.DataFrame, catalog, trees: int, seed: int, lodo: int) -> HybridPredictor:
    params = XGBParams(seed=seed, n_estimators=trees)
    emb = EmbeddingXGB()
    emb.params.seed = seed
    pred = HybridPredictor(catalog, [GemmXGB(params), PointwiseXGB(params), ConvXGB(params), emb], seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pred.fit(table)
        pred.calibrate_intervals(table, max_devices=lodo)
    return pred


# ------------------------------------------------------------------ grid
def _product(**axes) -> pd.DataFrame:
    keys = list(axes)
    return pd.DataFrame(list(itertools.product(*axes.values())), columns=keys)


def shape_grid() -> pd.DataFrame:
    """Realistic shapes x dtypes per family (one device-less row each)."""
    sizes = (1, 64, 512, 2048, 8192)
    gemm = _product(op=["gemm"], m=sizes, n=(64, 512, 4096, 14336), k=(64, 512, 4096, 8192),
                    dtype=("fp32", "tf32", "fp16", "bf16")).assign(b=1)
    bmm = _product(op=["bmm"], b=(8, 32, 128), m=(1, 128, 1024), n=(128, 1024), k=(64, 128, 1024),
                   dtype=("fp16", "bf16"))
    elem = _product(op=["elementwise"], elements=[4 ** i for i in range(5, 15)], variant=("add", "mul", "gelu"),
                    dtype=("fp32", "fp16", "bf16"))
    norm = _product(op=["layernorm", "rmsnorm"], rows=(1, 64, 2048, 32768), hidden=(768, 4096, 8192),
                    dtype=("fp32", "fp16", "bf16"))
    softmax = _product(op=["softmax"], rows=(64, 2048, 32768, 262144), hidden=(128, 1024, 4096, 32768),
                       dtype=("fp32", "fp16", "bf16"))
    conv = _product(op=["conv2d"], batch=(1, 8, 32, 64), channels=((3, 64), (64, 64), (256, 256), (512, 512)),
                    height=(7, 14, 56, 224), kernel_h=(1, 3, 7), stride=(1, 2), dtype=("fp32", "fp16", "bf16"))
    conv = conv[~(conv["kernel_h"] > conv["height"])]
    conv = conv.assign(in_channels=[c[0] for c in conv["channels"]], out_channels=[c[1] for c in conv["channels"]],
                       width=conv["height"], kernel_w=conv["kernel_h"], padding=conv["kernel_h"] // 2
                       ).drop(columns="channels")
    emb = _product(op=["embedding_bag"], num_embeddings=(10_000, 1_000_000, 10_000_000), embedding_dim=(16, 64, 128),
                   pooling_factor=(1, 20, 100), batch_size=(256, 4096), direction=("fwd", "bwd"), dtype=["fp32"])
    attn = _product(op=["attention"], batch=(1, 8, 64), q_len=(1, 512, 4096), kv_len=(128, 4096, 32768),
                    dtype=("fp16", "bf16")).assign(heads=32, kv_heads=8, head_dim=128, causal=1)
    attn = attn[attn["q_len"] <= attn["kv_len"]]
    return pd.concat([gemm, bmm, elem, norm, softmax, conv, emb, attn], ignore_index=True, sort=False)


def no_floor():
    """A context in which :mod:`hybrid.corrections.bounds` floors nothing (the predictions as before it)."""
    return mock.patch.dict(bounds.ROOFLINE_FLOORS, clear=True)


def grid_predictions(pred: HybridPredictor, catalog) -> pd.DataFrame:
    gpus = sorted(k for k, d in catalog.devices.items() if d.kind == "gpu")
    shapes = shape_grid()
    table = shapes.loc[shapes.index.repeat(len(gpus))].reset_index(drop=True)
    table["device"] = np.tile(gpus, len(shapes))
    for c in ("b", "m", "n", "k", "elements", "rows", "hidden", "num_embeddings", "embedding_dim", "pooling_factor",
              "batch_size", "batch", "in_channels", "out_channels", "height", "width", "kernel_h", "kernel_w",
              "stride", "padding", "heads", "kv_heads", "q_len", "kv_len", "head_dim", "causal"):
        if c in table.columns:
            table[c] = table[c].astype("Int64")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = pred.predict(table)
    fam = family_array(table["op"])
    seen = np.zeros(len(table), dtype=bool)
    for corr in pred.corrections:
        if corr.fitted:
            fitted = set(pred.devices_fitted.get(corr.key, []))
            rows = np.isin(fam, corr.families)
            seen[rows] = table.loc[rows, "device"].isin(fitted).to_numpy()
    roof = out["roofline_us"].to_numpy(float)
    floor = bounds.family_factor(table, pd.DataFrame({"family": fam, "bound": out["bound"].astype(str)}))
    return table.assign(family=fam, seen=np.where(seen, "seen", "unseen"), method=out["method"].astype(str),
                        floor=np.where(floor > 0, floor, np.nan), bound=out["bound"].astype(str),
                        ratio=out["time_us"].to_numpy(float) / roof, low_ratio=out["time_us_low"].to_numpy(float) / roof,
                        band=out.get("interval_band", pd.Series("", index=out.index)).astype(str))


def conv_kind(g: pd.DataFrame) -> np.ndarray:
    """Per conv row: ``direct`` (a 1x1 kernel or a stride above 1) or ``winograd-able`` (larger kernel, stride 1)."""
    direct = (g["kernel_h"].astype(float) <= 1) | (g["stride"].astype(float) > 1)
    return np.where(direct, "1x1 or strided", "k>1, stride 1")


def _shape(row: pd.Series) -> str:
    cols = {"gemm": ("b", "m", "n", "k"), "elementwise": ("variant", "elements"), "norm": ("rows", "hidden"),
            "softmax": ("rows", "hidden"), "attention": ("batch", "q_len", "kv_len"),
            "conv": ("batch", "in_channels", "out_channels", "height", "kernel_h", "stride"),
            "embedding": ("num_embeddings", "embedding_dim", "pooling_factor", "batch_size", "direction")}
    return " ".join(f"{c}={row[c]}" for c in cols.get(row["family"], ()))


def _table(g: pd.DataFrame, by: list[str]) -> list[str]:
    lines = ["| " + " | ".join(by) + " | GPUs | rows | below 1.0x | min ratio | floor | below floor | "
             "low below 1.0x | min low | low below floor |", "|---" * (len(by) + 9) + "|"]
    for key, s in g.groupby(by, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        floor = s["floor"].to_numpy(float)
        has = np.isfinite(floor).any()
        below = f"{(s['ratio'] < floor * (1 - TOL)).mean():.2%}" if has else "-"
        low_below = f"{(s['low_ratio'] < floor * (1 - TOL)).mean():.2%}" if has else "-"
        span = "-" if not has else (f"{np.nanmin(floor):g}" if np.nanmin(floor) == np.nanmax(floor)
                                    else f"{np.nanmin(floor):g}-{np.nanmax(floor):g}")
        lines.append("| " + " | ".join(map(str, key)) + f" | {s['device'].nunique()} | {len(s)} | "
                     f"{(s['ratio'] < 1 - TOL).mean():.2%} | {s['ratio'].min():.3f} | {span} | {below} | "
                     f"{(s['low_ratio'] < 1 - TOL).mean():.2%} | {s['low_ratio'].min():.3f} | {low_below} |")
    return lines


def grid_section(g: pd.DataFrame, title: str) -> list[str]:
    order = {f: i for i, f in enumerate(KERNEL_FAMILIES)}
    g = g.sort_values(["family", "seen"], key=lambda c: c.map(order) if c.name == "family" else c, kind="stable")
    lines = [f"## {title}", "",
             f"{g['device'].nunique()} GPUs x {len(g) // g['device'].nunique()} shapes/dtypes. `seen`: the GPU has "
             "rows of the family's correction in the fit. ratio = `time_us` / `roofline_us`; low = `time_us_low` "
             "(80% interval) / `roofline_us`. floor: `hybrid.corrections.bounds` (GPU rows; the column says what "
             "the floor is, whether applied or not).", ""]
    lines += _table(g, ["family", "seen"])
    conv = g[g["family"] == "conv"]
    conv = conv.assign(kind=conv_kind(conv))
    lines += ["", "Convolutions by kind (Winograd / FFT need a kernel above 1x1 and stride 1):", ""]
    lines += _table(conv.sort_values(["kind", "seen", "bound"]), ["kind", "seen", "bound"])
    lines += ["", "Lowest predictions per family and (seen / unseen) (ratio, low, device, dtype, shape):", ""]
    for fam in KERNEL_FAMILIES:
        for seen in ("seen", "unseen"):
            s = g[(g["family"] == fam) & (g["seen"] == seen)].nsmallest(3, "ratio")
            for _, r in s.iterrows():
                lines.append(f"- {fam} / {seen}: {r['ratio']:.3f}x (low {r['low_ratio']:.3f}x), {r['device']} "
                             f"{r['dtype']} {r['op']} {_shape(r)}")
    return lines


def conv_logo_section(data_dir: Path, catalog, trees: int, seed: int) -> list[str]:
    """Leave-one-GPU-out on every measured GPU conv row (NeuSight's sweep, the GPU bundles) through
    ``HybridPredictor.predict`` (conv correction only), with and without the floor: what the floor moves."""
    conv = conv_logo.load_conv(data_dir, catalog)
    bundles, _ = load_project_bundles("gpu")
    conv = pd.concat([conv, bundles[bundles["op"] == "conv2d"].drop(columns="bundle")], ignore_index=True, sort=False)
    lines = ["## 4. What the floor moves on measured rows: conv leave-one-GPU-out", "",
             f"Every measured GPU conv row ({len(conv)}: NeuSight's FP32 3x3 sweep on five GPUs, the H100 / H200 "
             f"bundles); per held-out GPU, `HybridPredictor` with the conv correction alone ({trees} trees) fitted on "
             "the other GPUs, geomean |error| % of the held-out rows without and with the floor.", "",
             "| held-out GPU | rows | roofline | corrected, no floor | corrected, floor | rows floored | "
             "min predicted / roofline, no floor |", "|---|---|---|---|---|---|---|"]
    geo = lambda p, m: float(np.exp(np.mean(np.log(np.maximum(np.abs(p / m - 1), 1e-6)))) * 100)  # noqa: E731
    for held in sorted(pd.unique(conv["device"].astype(str))):
        test = (conv["device"].astype(str) == held).to_numpy()
        model = HybridPredictor(catalog, [ConvXGB(XGBParams(seed=seed, n_estimators=trees))], seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(conv[~test])
            with no_floor():
                raw = model.predict(conv[test], intervals=False)
            floored = model.predict(conv[test], intervals=False)
        meas = conv.loc[test, "time_us"].to_numpy(float)
        p0, p1 = raw["time_us"].to_numpy(float), floored["time_us"].to_numpy(float)
        roof = raw["roofline_us"].to_numpy(float)
        lines.append(f"| {held} | {test.sum()} | {geo(roof, meas):.1f} | {geo(p0, meas):.1f} | {geo(p1, meas):.1f} | "
                     f"{int((p1 > p0).sum())} | {(p0 / roof).min():.3f} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--rows-per-group", type=int, default=400)
    ap.add_argument("--trees", type=int, default=200)
    ap.add_argument("--lodo-devices", type=int, default=3, help="held-out devices calibrating the unseen band")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.md")))
    args = ap.parse_args()
    t0 = time.time()
    data_dir = public_data_dir(args.data_dir)
    table, catalog = training_table(data_dir, args.rows_per_group, args.seed)
    measured = measured_ratios(data_dir, catalog)
    print(f"measured rows: {len(measured)} ({time.time() - t0:.0f} s)", file=sys.stderr)
    pred = fit_predictor(table, catalog, args.trees, args.seed, args.lodo_devices)
    print(f"fitted on {len(table)} rows ({time.time() - t0:.0f} s)", file=sys.stderr)
    with no_floor():
        before = grid_predictions(pred, catalog)
    grid = grid_predictions(pred, catalog)
    print(f"grid predicted ({time.time() - t0:.0f} s)", file=sys.stderr)
    logo = conv_logo_section(data_dir, catalog, args.trees, args.seed)
    cmd = "python experiments/bounds_audit/run.py" + "".join(
        f" --{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("data_dir", "out"))
    fitted = {c.key: len(pred.devices_fitted.get(c.key, [])) for c in pred.corrections if c.fitted}
    lines = ["# Physical bounds of corrected predictions", "",
             f"Command: `{cmd}`  ", f"Date: {dt.date.today().isoformat()}; wall time {time.time() - t0:.0f} s "
             "(2-core machine).", "",
             f"Predictor: {len(table)} training rows (at most {args.rows_per_group} per source, device, dtype and "
             f"family), {args.trees} trees; devices fitted per correction: "
             + ", ".join(f"{k} {v}" for k, v in fitted.items())
             + f"; intervals calibrated with {args.lodo_devices} held-out devices.", ""]
    lines += measured_section(measured) + [""]
    lines += grid_section(before, "2. Corrected predictions on a shape grid, every catalog GPU: without the floor")
    lines += [""] + grid_section(grid, "3. The same grid with the floor (`hybrid.corrections.bounds`)")
    lines += [""] + logo + [""]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
