"""Where the CPU time of corrected predictions goes on a table without repeated rows (issue 13 speed target).

    python experiments/corrected_throughput/profile_distinct.py [--rows 200000] [--repeats 3]

Same model and rows as ``run.py``'s last table (every family, a ``row_id`` column so no two rows are identical).
Times each stage of ``HybridPredictor.predict`` separately in CPU seconds (best of ``--repeats``): the
identical-rows check, input validation + roofline (``_prepare``), per correction the feature block and the
XGBoost tree walk (``inplace_predict``) alone, the interval look-up. Prints a markdown table; the tree walk is
the floor no change outside the boosters can go below.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from run import training_table, workload  # the benchmark's own rows and model recipe

from hybrid.corrections.base import family_mask
from hybrid.corrections.kernel_xgb import XGBCorrection
from hybrid.corrections.predictor import HybridPredictor, distinct_rows
from hybrid.data.paths import public_data_dir


def cpu(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--per-group", type=int, default=400)
    args = ap.parse_args()
    train, catalog = training_table(public_data_dir(args.data_dir), args.per_group)
    pred = HybridPredictor(catalog).fit(train)
    pred.calibrate_intervals(train, max_devices=0)  # random split only: bands exist, as in run.py
    with tempfile.TemporaryDirectory() as tmp:  # a loaded model, as users get it
        pred = HybridPredictor.load(pred.save(Path(tmp) / "p"), catalog=catalog)
    table = workload("all", args.rows, train, seed=1).assign(row_id=np.arange(args.rows))
    r = args.repeats
    total = cpu(lambda: pred.predict(table), r)
    norm, base = pred._prepare(table, training=False)
    rows = [("identical-rows check (finds none)", cpu(lambda: distinct_rows(table), r)),
            ("validation + roofline (`_prepare`)", cpu(lambda: pred._prepare(table, training=False), r))]
    trees = 0.0
    for corr in pred.corrections:
        if not corr.fitted:
            continue
        n = int(family_mask(base, corr.families).sum())
        whole = cpu(lambda c=corr: c.predict_with_source(norm, base, catalog), r)
        if isinstance(corr, XGBCorrection):
            mask = family_mask(base, corr.families)
            sub, b = norm.loc[mask], base.loc[mask]
            unseen = corr._unseen(sub)
            walk = 0.0
            for rows_, booster, transfer in ((~unseen, corr.booster, False), (unseen, corr.transfer_booster, True)):
                if not rows_.any():
                    continue
                x = np.ascontiguousarray(corr.features(sub.loc[rows_], b.loc[rows_], catalog, transfer=transfer)
                                         .to_numpy(np.float32))
                walk += cpu(lambda bst=booster, x=x: bst.inplace_predict(x, validate_features=False), r)
            trees += walk
            rows.append((f"{corr.key}: {n:,} rows, XGBoost tree walk only", walk))
            rows.append((f"{corr.key}: features, selection, reference", max(whole - walk, 0.0)))
        else:
            rows.append((f"{corr.key}: {n:,} rows", whole))
    time_, method, _ = pred._raw(norm, base)
    rows.append(("interval look-up", cpu(lambda: pred.intervals.row_bounds(method, base["family"],
                                                                           pred._bands(norm, base)), r)))
    lines = [f"| stage ({args.rows:,} distinct rows, CPU s, best of {r}) | CPU s | share |", "|---|---|---|"]
    lines += [f"| {name} | {s:.3f} | {100 * s / total:.0f}% |" for name, s in rows]
    lines += [f"| **whole `predict`** | **{total:.3f}** | {args.rows / total:,.0f} rows/s |",
              f"| XGBoost tree walks together | {trees:.3f} | ceiling with everything else free: "
              f"{args.rows / trees:,.0f} rows/s |"]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
