"""GEMM leave-one-GPU-out under other XGBoost settings (tree depth, count, regularisation): one JSON line per
setting with the mean over held-out GPUs, the in-distribution error and the per-GPU errors.

    python experiments/kernel_accuracy/capacity_grid.py '[{"n_estimators": 400, "max_depth": 7}, ...]'

Same rows, seed and features (v4, one booster) as ``run.py``'s default column; the 2026-11-24 grid and its reading
are in results.md ("Tree capacity").
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.corrections import GemmXGB, XGBParams
from hybrid.data.paths import public_data_dir
from hybrid.ops.roofline import roofline
from hybrid.reports.metrics import relative_errors

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as kernel_accuracy  # noqa: E402


def logo_mean(sub: pd.DataFrame, base: pd.DataFrame, catalog, params: XGBParams) -> tuple[float, dict]:
    """Mean over held-out GPUs of the per-GPU geomean error, and the per-GPU errors."""
    pred = np.full(len(sub), np.nan)
    devices = sub["device"].to_numpy()
    gpus = [d for d in sorted(pd.unique(devices)) if catalog.device(d).kind == "gpu"]
    for held in gpus:  # the CPU profile stays in training, as in run.py
        test = devices == held
        model = GemmXGB(params, True, 4, transfer=False)
        model.fit(sub[~test], base[~test], catalog)
        pred[test] = model.predict(sub[test], base[test], catalog)
    ok = np.isfinite(pred)
    err = relative_errors(pred[ok], sub["time_us"].to_numpy()[ok])
    per_dev = pd.Series(err).groupby(devices[ok]).agg(kernel_accuracy._geo)
    return float(per_dev.mean()), per_dev.round(1).to_dict()


def in_distribution(sub: pd.DataFrame, base: pd.DataFrame, catalog, params: XGBParams) -> float:
    test = np.random.default_rng(0).random(len(sub)) < 0.2
    model = GemmXGB(params, True, 4, transfer=False)
    model.fit(sub[~test], base[~test], catalog)
    return kernel_accuracy._geo(relative_errors(model.predict(sub[test], base[test], catalog),
                                                sub.loc[test, "time_us"]))


def main(argv: list[str]) -> int:
    grid = json.loads(argv[0]) if argv else [{"n_estimators": 400, "max_depth": 7}]
    table, catalog = kernel_accuracy.load(public_data_dir(None), 1200, 0)
    sub = table[table["group"] == "gemm"].reset_index(drop=True)
    base = roofline(sub, catalog)
    for setting in grid:
        t0 = time.time()
        params = XGBParams(seed=0, **setting)
        mean, per = logo_mean(sub, base, catalog, params)
        print(json.dumps({"params": setting, "logo_mean": round(mean, 2),
                          "indist": round(in_distribution(sub, base, catalog, params), 2),
                          "s": round(time.time() - t0), "per": per}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
