"""Fused-attention accuracy: roofline, a model that never saw attention, and one that learned it from profiled rows.

    python experiments/attention_accuracy/run.py [--bundle DIR] [--base DIR] [--seeds 5] [--json] [--out results.md]

No public source in the data directory times attention kernels, so every calibration prices the LLM builders'
and the trace importer's ``attention`` op (FlashAttention-style SDPA) by extrapolating the pointwise correction
from other ops. ``hybrid profile`` now measures it (family ``attention``: ``F.scaled_dot_product_attention``
fwd and bwd, prefill and decode shapes, MHA and GQA). This benchmark scores three predictions of those rows:

- ``roofline``: the datasheet / measured-ceiling roofline alone;
- ``no attention rows``: the default ``HybridPredictor`` fitted on the device's other profiled families (what
  every calibration does today);
- ``attention configs held out``: fitted on the other families plus the attention rows of the other folds,
  scored on configurations it never saw (5-fold split by shape, fwd and bwd of one shape in the same fold;
  repeated over ``--seeds``), and ``longer sequences held out``: prefill rows of the longest sequence lengths
  (top third) predicted from the shorter ones (the extrapolation a long-context run asks for).

``--bundle`` is a profile bundle with attention rows (default: profile this machine's CPU now, ``--threads 1``,
about 3 minutes on the 2-core VM); ``--base`` the same device's other measurements (default: the bundle's own
non-attention rows, else ``datasets/cpu-amd-epyc-1c`` for a fresh CPU profile, whose device key the rows take).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.corrections.predictor import HybridPredictor
from hybrid.data.bundle import load_bundle
from hybrid.data.paths import project_datasets_dir
from hybrid.errors import InvalidInputError
from hybrid.reports.markdown import write_benchmark_results
from hybrid.reports.metrics import error_summary

#: The committed CPU profile whose other families train the CPU predictions.
CPU_BASE = "cpu-amd-epyc-1c"
SHAPE = ["batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim", "causal", "dtype"]
FOLDS = 5


def kinds(rows: pd.DataFrame) -> np.ndarray:
    """``decode`` (one query), ``prefill fwd`` or ``prefill bwd`` per row."""
    decode = rows["q_len"].to_numpy() == 1
    return np.where(decode, "decode", np.where(rows["direction"].to_numpy() == "bwd", "prefill bwd", "prefill fwd"))


def profile_cpu(out: Path) -> Path:
    from hybrid.data.profiler.runner import ProfileOptions, run_profile

    opts = ProfileOptions(families=("attention",), threads=1, progress=sys.stderr.isatty(), force_cpu=True,
                          device_name=CPU_BASE)
    run_profile(opts, out)
    return out


def load_inputs(bundle: Path, base: Path | None) -> tuple[pd.DataFrame, pd.DataFrame, object, str]:
    """(attention rows, other rows of the same device, catalog, device key)."""
    table, cat = load_bundle(bundle)
    att = table[table["op"] == "attention"]
    if att.empty:
        raise InvalidInputError(f"{bundle}: no attention rows (profile with `hybrid profile --only attention`)")
    other = table[table["op"] != "attention"]
    if base is not None:
        other, cat = load_bundle(base)
        other = other[other["op"] != "attention"]
    if other.empty:
        raise InvalidInputError(f"{bundle}: no other op families to fit on; pass --base BUNDLE of the same device")
    devices = other["device"].unique()
    if len(devices) != 1:
        raise InvalidInputError(f"--base holds {len(devices)} devices; expected one")
    key = str(devices[0])
    return att.assign(device=key).reset_index(drop=True), other.reset_index(drop=True), cat, key


def fit_predict(train: pd.DataFrame, test: pd.DataFrame, catalog) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return HybridPredictor(catalog).fit(train).predict_time(test)


def evaluate(att: pd.DataFrame, other: pd.DataFrame, catalog, seeds: int) -> dict:
    meas = att["time_us"].to_numpy(dtype=np.float64)
    kind = kinds(att)
    out: dict = {"n_rows": int(len(att)), "rows_by_kind": {k: int((kind == k).sum()) for k in np.unique(kind)}}
    roof = HybridPredictor.roofline_only(catalog).predict_time(att)
    out["roofline"] = error_summary(roof, meas, {"by_kind": kind})
    out["roofline"]["median_ratio"] = float(np.median(roof / meas))
    none = fit_predict(other, att, catalog)
    out["no attention rows"] = error_summary(none, meas, {"by_kind": kind})
    out["no attention rows"]["median_ratio"] = float(np.median(none / meas))
    # configurations held out: fwd and bwd of one shape share a fold
    codes = pd.factorize(att[SHAPE].astype(str).agg("|".join, axis=1))[0]
    per_seed, pooled_pred = [], []
    for seed in range(seeds):
        fold = np.random.default_rng(seed).permutation(codes.max() + 1)[codes] % FOLDS
        pred = np.empty(len(att))
        for f in range(FOLDS):
            test = fold == f
            if not test.any():
                continue
            pred[test] = fit_predict(pd.concat([other, att[~test]], ignore_index=True), att[test], catalog)
        per_seed.append(error_summary(pred, meas)["geomean_pct"])
        pooled_pred.append(pred)
    held = error_summary(pooled_pred[0], meas, {"by_kind": kind})
    held["median_ratio"] = float(np.median(pooled_pred[0] / meas))
    held["geomean_pct_per_seed"] = per_seed
    held["geomean_pct_mean_over_seeds"] = float(np.mean(per_seed))
    out["attention configs held out"] = held
    # longer sequences held out (prefill rows): the longest third of the sequence lengths
    pre = att["q_len"].to_numpy() > 1
    lens = np.sort(att.loc[pre, "q_len"].unique())
    cut = lens[int(np.ceil(len(lens) * 2 / 3)) - 1] if len(lens) >= 3 else None
    if cut is not None:
        test = pre & (att["q_len"].to_numpy() > cut)
        pred = fit_predict(pd.concat([other, att[~test]], ignore_index=True), att[test], catalog)
        longer = error_summary(pred, meas[test], {"by_kind": kind[test]})
        longer["trained_up_to_seq"] = int(cut)
        longer["median_ratio"] = float(np.median(pred / meas[test]))
        longer["no attention rows_geomean_pct"] = error_summary(none[test], meas[test])["geomean_pct"]
        longer["roofline_geomean_pct"] = error_summary(roof[test], meas[test])["geomean_pct"]
        out["longer sequences held out"] = longer
    return out


def report(res: dict, source: str, command: str, seconds: float) -> str:
    cols = ["roofline", "no attention rows", "attention configs held out"]
    kinds_ = sorted(res["rows_by_kind"])
    lines = [
        "# Fused attention (SDPA) accuracy: roofline, no attention rows, attention rows learned",
        "",
        f"Command: `{command}` ({seconds:.0f} s on the shared 2-core VM).",
        "",
        f"Rows: {source}: {res['n_rows']} attention rows ("
        + ", ".join(f"{k} {n}" for k, n in res["rows_by_kind"].items()) + "). "
        "Errors: geomean of |pred - meas| / meas in %; *ratio*: median predicted / measured. No row of this table "
        "was used to choose anything in the models (the predictor is the default `HybridPredictor`).",
        "",
        "| rows | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
        "| all | " + " | ".join(f"{res[c]['geomean_pct']:.1f} (ratio {res[c]['median_ratio']:.2f})" for c in cols)
        + " |",
    ]
    for k in kinds_:
        lines.append(f"| {k} | " + " | ".join(f"{res[c]['by_kind'][k]['geomean_pct']:.1f}" for c in cols) + " |")
    held = res["attention configs held out"]
    lines += ["", f"Held-out configurations, {FOLDS}-fold by shape: geomean per split seed "
              + ", ".join(f"{v:.1f}" for v in held["geomean_pct_per_seed"])
              + f" (mean {held['geomean_pct_mean_over_seeds']:.1f}%); the table shows seed 0."]
    if "longer sequences held out" in res:
        lg = res["longer sequences held out"]
        lines += ["", f"Longer sequences held out (prefill rows with seq > {lg['trained_up_to_seq']}, trained on the "
                  f"shorter ones): {lg['n_rows']} rows, **{lg['geomean_pct']:.1f}%** (ratio {lg['median_ratio']:.2f}; "
                  f"no attention rows {lg['no attention rows_geomean_pct']:.1f}%, roofline "
                  f"{lg['roofline_geomean_pct']:.1f}%)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", default=None, help="profile bundle with attention rows (default: profile this CPU)")
    ap.add_argument("--base", default=None, help="bundle of the same device's other families")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print the JSON summary, write nothing")
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.md")))
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error("--seeds must be >= 1")
    t0 = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if args.bundle is None:
                bundle = profile_cpu(Path(tmp) / "attention")
                base = Path(args.base) if args.base else project_datasets_dir() / CPU_BASE
                source = f"a fresh `hybrid profile --only attention --threads 1` of this CPU, other families from {base.name}"
            else:
                bundle, base = Path(args.bundle), (Path(args.base) if args.base else None)
                source = f"bundle {bundle}" + (f", other families from {base}" if base else "")
            att, other, cat, _ = load_inputs(bundle, base)
            res = evaluate(att, other, cat, args.seeds)
    except InvalidInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    command = "python experiments/attention_accuracy/run.py" + (f" --bundle {args.bundle}" if args.bundle else "")
    path = write_benchmark_results(args.out, report(res, source, command, seconds))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
