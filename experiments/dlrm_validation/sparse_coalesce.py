"""Where ``COALESCE_US_PER_DUPLICATE`` comes from: a GPU's sparse Adagrad steps vs the hottest row's duplicates.

CUDA's ``coalesce`` of a sparse COO gradient sorts the indices, reads the unique count back to the host
(``unique_by_key``: a device-host sync), then runs one values kernel in which each distinct row is summed by one
warp that adds its duplicates one after another. A skewed table's most looked-up row therefore keeps one warp
busy for (its lookups) x (one dependent gather), while the host already issues Adagrad's Python-level math. The
profiler's ``sparse_adagrad`` rows (``hybrid profile --only optimizer``: ``optimizer.step()`` on the gradient of an
``EmbeddingBag(sparse=True)``, host time included) are refitted here in the form the DLRM graph prices them::

    step = h + ADAGRAD_COALESCE_SCALE x backward row + dense Adagrad over the unique rows
           + max(0, t x hottest row's lookups - o)

(``h``: host time the predicted rows do not carry; ``o``: the host work the hot warp runs beside; the backward row
and the dense Adagrad step as the bundle's HybridPredictor predicts them), by least squares on log time. ``t`` is
the per-duplicate time; the bundle given first is the fit (the constant), the others are checks.

    python experiments/dlrm_validation/sparse_coalesce.py [--bundles datasets/H100-SXM datasets/H200] [--out F]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sparse_updates import SHAPE, sparse_configs  # noqa: E402

from hybrid.data.bundle import load_bundle  # noqa: E402
from hybrid.ops.families import expected_hottest_row_lookups, expected_unique_rows  # noqa: E402
from hybrid.workloads.dlrm_graph import ADAGRAD_COALESCE_SCALE, COALESCE_US_PER_DUPLICATE  # noqa: E402


def geomean_pct(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.exp(np.mean(np.log(np.maximum(np.abs(pred / y - 1.0) * 100, 1e-3)))))


def fit_bundle(bundle: str) -> dict:
    from scipy.optimize import least_squares

    from hybrid.corrections.predictor import HybridPredictor

    table, cat = load_bundle(bundle)
    device = str(table["device"].iloc[0])
    cfg = sparse_configs()
    m = table[(table["op"] == "elementwise") & (table["variant"] == "sparse_adagrad")].reset_index(drop=True)
    if len(m) != len(cfg) or not np.array_equal(m["elements"].to_numpy(float), cfg["elements"].to_numpy(float)):
        raise SystemExit(f"{bundle} has no sparse_adagrad rows of the seeded design (run `hybrid profile --only "
                         "optimizer`)")
    ada = m["time_us"].to_numpy(float)
    model = HybridPredictor(catalog=cat).fit(table)
    q = cfg[list(SHAPE)].assign(op="embedding_bag", device=device, dtype="fp32", direction="bwd", variant="sparse_sgd")
    bwd = model.predict(q)["time_us"].to_numpy()
    alpha = np.where(cfg["index_dist"] == "uniform", 0.0, cfg["zipf_alpha"]).astype(float)
    per_table = (cfg["batch_size"] * cfg["pooling_factor"]).to_numpy(float)
    rows = cfg["num_embeddings"].to_numpy(float)
    unique = cfg["num_tables"].to_numpy(float) * expected_unique_rows(rows, per_table, alpha)
    dense_ada = model.predict(pd.DataFrame({"op": "elementwise", "device": device, "dtype": "fp32",
                                            "variant": "adagrad", "direction": "fwd",
                                            "elements": np.round(unique * cfg["embedding_dim"].to_numpy(float))}))[
        "time_us"].to_numpy()
    hot = expected_hottest_row_lookups(rows, per_table, alpha)
    base = ADAGRAD_COALESCE_SCALE * bwd + dense_ada

    def with_hot(p: np.ndarray) -> np.ndarray:
        return p[0] + base + np.maximum(0.0, p[1] * hot - p[2])

    def without(p: np.ndarray) -> np.ndarray:
        return p[0] + base

    fit = least_squares(lambda p: np.log(with_hot(p) / ada), [100.0, 0.2, 100.0], bounds=(0, np.inf))
    fit0 = least_squares(lambda p: np.log(without(p) / ada), [100.0], bounds=(0, np.inf))
    skewed = hot > 1000
    return {"bundle": bundle, "device": device, "n": len(ada), "t_us": float(fit.x[1]), "h_us": float(fit.x[0]),
            "o_us": float(fit.x[2]), "err_hot": geomean_pct(with_hot(fit.x), ada),
            "err_none": geomean_pct(without(fit0.x), ada),
            "err_hot_skewed": geomean_pct(with_hot(fit.x)[skewed], ada[skewed]),
            "err_none_skewed": geomean_pct(without(fit0.x)[skewed], ada[skewed]), "n_skewed": int(skewed.sum()),
            "hot_max": float(hot.max()), "ada_max": float(ada.max())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundles", nargs="+", default=["datasets/H100-SXM", "datasets/H200"])
    ap.add_argument("--out", default=str(Path(__file__).with_name("sparse_coalesce.md")))
    args = ap.parse_args(argv)
    fits = [fit_bundle(b) for b in args.bundles]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print("# Sparse Adagrad on GPUs: the hottest row's duplicates (COALESCE_US_PER_DUPLICATE)\n")
        print(f"Command: `python experiments/dlrm_validation/sparse_coalesce.py --bundles {' '.join(args.bundles)}`"
              "\n")
        print("Rows: each bundle's 60 profiled sparse Adagrad steps (`optimizer.step()`, host time included; the "
              "project's own measurements). Form: step = h + ADAGRAD_COALESCE_SCALE x predicted backward row + "
              "predicted dense Adagrad over the unique rows + max(0, t x hottest row's lookups - o), fitted by "
              "least squares on log time; *without* = the same with no hottest-row term (h alone fitted). "
              "Geomean |error| %.\n")
        print("| bundle | device | rows | t (us per duplicate) | h us | o us | geomean % with | without | "
              "rows with > 1000 duplicates | their geomean % with | without | most duplicates | longest step us |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for f in fits:
            print(f"| `{f['bundle']}` | {f['device']} | {f['n']} | {f['t_us']:.3f} | {f['h_us']:.0f} | "
                  f"{f['o_us']:.0f} | {f['err_hot']:.1f} | {f['err_none']:.1f} | {f['n_skewed']} | "
                  f"{f['err_hot_skewed']:.1f} | {f['err_none_skewed']:.1f} | {f['hot_max']:.0f} | "
                  f"{f['ada_max']:.0f} |")
        print(f"\nThe engine's constant: `COALESCE_US_PER_DUPLICATE['gpu']` = {COALESCE_US_PER_DUPLICATE['gpu']} us "
              f"(the first bundle's fit, rounded); the other bundles' fits are independent checks.")
    text = out.getvalue()
    print(text)
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
