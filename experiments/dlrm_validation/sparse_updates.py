"""Where the DLRM engine's sparse-update constants come from: profiled sparse SGD/Adagrad steps vs the embedding
backward model.

The profiler's ``optimizer`` family times ``optimizer.step()`` alone on the sparse gradient an
``EmbeddingBag(sparse=True)`` backward produces (``variant`` ``sparse_sgd`` / ``sparse_adagrad``), for every
``SPARSE_STRIDE``-th point of the embedding design. This script regenerates those configurations (the design is
seeded), predicts the profiled embedding backward row (``embedding_bag`` bwd ``sparse_sgd`` = backward + SGD
update) with a HybridPredictor fitted on the bundle, and reports

* the SGD step's share of that row (-> ``SPARSE_SGD_UPDATE_SHARE`` in ``hybrid/workloads/dlrm_graph.py``);
* a non-negative least-squares fit ``adagrad step = a x backward row + b x (unique rows x dim)``, and the same
  with the predictor's own dense Adagrad step over the unique rows in place of ``b`` (-> ``ADAGRAD_COALESCE_SCALE``).

    python experiments/dlrm_validation/sparse_updates.py [--bundle datasets/cpu-amd-epyc-1c]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

from hybrid.data.bundle import load_bundle
from hybrid.data.profiler.embedding import N_CONFIGS, design
from hybrid.data.profiler.optimizer import SPARSE_STRIDE, SPARSE_TABLE_CAP, SPARSE_VALUES_CAP
from hybrid.ops.families import expected_unique_rows

SHAPE = ("num_tables", "num_embeddings", "embedding_dim", "batch_size", "pooling_factor", "index_dist", "zipf_alpha")


def sparse_configs(seed: int = 0) -> pd.DataFrame:
    """The sparse-update configurations of a full profile (same capping as the profiler)."""
    rows = []
    for cfg in design(N_CONFIGS[False], seed=seed, arena_bytes=SPARSE_TABLE_CAP[False], quick=False)[
            ::SPARSE_STRIDE[False]]:
        per_bag = max(cfg.lookups / max(len(cfg.lengths), 1), 1.0) * cfg.embedding_dim * 4
        cap = int(SPARSE_VALUES_CAP[False] // per_bag)
        if cap < cfg.num_tables:
            continue
        batch, lengths = cfg.batch_size, cfg.lengths
        if len(lengths) > cap:
            batch = max(1, cap // cfg.num_tables)
            lengths = lengths.reshape(cfg.num_tables, -1)[:, :batch].reshape(-1)
        rows.append({"num_tables": cfg.num_tables, "num_embeddings": cfg.num_embeddings,
                     "embedding_dim": cfg.embedding_dim, "batch_size": batch,
                     "pooling_factor": float(lengths.mean()), "index_dist": cfg.index_dist,
                     "zipf_alpha": cfg.zipf_alpha, "elements": int(lengths.sum()) * cfg.embedding_dim})
    return pd.DataFrame(rows)


def main() -> int:
    from scipy.optimize import nnls

    from hybrid.corrections.predictor import HybridPredictor

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", default="datasets/cpu-amd-epyc-1c")
    args = ap.parse_args()
    table, cat = load_bundle(args.bundle)
    device = str(table["device"].iloc[0])
    cfg = sparse_configs()
    measured = {}
    for v in ("sparse_sgd", "sparse_adagrad"):
        m = table[(table["op"] == "elementwise") & (table["variant"] == v)].reset_index(drop=True)
        if len(m) != len(cfg) or not np.array_equal(m["elements"].to_numpy(dtype=float), cfg["elements"].to_numpy(
                dtype=float)):
            print(f"{args.bundle} has no matching {v} rows (run `hybrid profile --only optimizer`)", file=sys.stderr)
            return 1
        measured[v] = m["time_us"].to_numpy(dtype=float)
    model = HybridPredictor(catalog=cat).fit(table)
    q = cfg[list(SHAPE)].assign(op="embedding_bag", device=device, dtype="fp32", direction="bwd", variant="sparse_sgd")
    bwd = model.predict(q)["time_us"].to_numpy()
    alpha = np.where(cfg["index_dist"] == "uniform", 0.0, cfg["zipf_alpha"])
    unique = cfg["num_tables"] * expected_unique_rows(cfg["num_embeddings"].to_numpy(float),
                                                      (cfg["batch_size"] * cfg["pooling_factor"]).to_numpy(), alpha)
    ud = (unique * cfg["embedding_dim"]).to_numpy()
    dense_ada = model.predict(pd.DataFrame({"op": "elementwise", "device": device, "dtype": "fp32",
                                            "variant": "adagrad", "direction": "fwd", "elements": np.round(ud)}))[
        "time_us"].to_numpy()

    def err(pred: np.ndarray, y: np.ndarray) -> str:
        rel = np.abs(pred / y - 1.0)
        return f"median error {100 * np.median(rel):.0f}%, p90 {100 * np.quantile(rel, 0.9):.0f}%"

    sgd, ada = measured["sparse_sgd"], measured["sparse_adagrad"]
    share = sgd / bwd
    print(f"# Sparse optimizer steps vs the embedding backward model ({args.bundle}, {len(cfg)} configurations)\n")
    print("Command: `python experiments/dlrm_validation/sparse_updates.py --bundle " + args.bundle + "`\n")
    print(f"- SGD step / predicted backward+update row: median {np.median(share):.3f}, p10 "
          f"{np.quantile(share, 0.1):.3f}, p90 {np.quantile(share, 0.9):.3f}")
    w = 1.0 / ada
    coef, _ = nnls(np.c_[bwd, ud / 1e3] * w[:, None], ada * w)
    print(f"- Adagrad step = {coef[0]:.3f} x backward row + {coef[1]:.3f} ns x unique rows x dim: "
          f"{err(np.c_[bwd, ud / 1e3] @ coef, ada)}")
    coef2, _ = nnls(np.c_[bwd] * w[:, None], (ada - dense_ada) * w)
    print(f"- Adagrad step = {coef2[0]:.3f} x backward row + dense Adagrad step over unique rows x dim "
          f"(predicted): {err(coef2[0] * bwd + dense_ada, ada)}")
    per_el = ada / cfg["elements"].to_numpy()
    print(f"- Adagrad step per gradient value alone (what an elementwise row sees): {err(np.median(per_el) * cfg['elements'].to_numpy(), ada)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
