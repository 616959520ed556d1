"""Where a GPU's sparse-optimizer host counts come from: the profile's smallest sparse steps, in host ops.

The DLRM harness graph prices a GPU run's eager host op by op (``HARNESS_HOST_OPS`` in
``hybrid/workloads/dlrm_graph.py``, ``Overheads.host_op_us`` each, ``kernel_launch_us`` per launch). The per-table
optimizer counts were first read off a CPU profile of the harness (12 ops per fused table for sparse SGD, 148 for
sparse Adagrad), but most of those are the CPU kernels' nested ATen calls (``_coalesce``'s sort, ``sparse_mask``'s
intersection ``mul``, ``_nnz`` / ``sparse_dim`` queries), which CUDA's kernels run without recording them or at a
fraction of an average traced op's cost. A GPU profile times the same call: the profiler's ``sparse_sgd`` /
``sparse_adagrad`` rows are ``optimizer.step()`` on an ``EmbeddingBag(sparse=True)`` gradient with host time
included (``hybrid/data/profiler/optimizer.py``), and on the smallest gradients the GPU work is a few microseconds,
so the step is its host. Against a dense SGD step on a small parameter (one ``_foreach_add_`` and one launch: the
same ``torch.optim`` Python around it), per variant::

    host ops = 1 + (T_sparse - T_dense_sgd - (graph's launches and syncs of the step - 1) x kernel_launch_us)
                   / host_op_us

``T``: the median of the variant's ``SMALLEST`` steps with the fewest gradient values / of the dense SGD steps up to
``DENSE_MAX`` elements; the graph gives sparse SGD one update kernel and the host's wait for the coalesce's unique
count (2), sparse Adagrad the coalesce and update kernels and that wait (3). The GPU work the wait covers (the
sort of a few thousand keys) stays in, so these are upper bounds. The first bundle gives the engine's counts; the
others are checks (a slower host gives more op-equivalents at the same ``host_op_us``).

    python experiments/dlrm_validation/sparse_host.py [--bundles datasets/H100-SXM datasets/H200] [--out F]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from hybrid.atomic import write_text  # noqa: E402
from hybrid.engine.overheads import Overheads  # noqa: E402
from hybrid.workloads.dlrm_graph import HARNESS_CPU_EXTRA_OPS, HARNESS_HOST_OPS  # noqa: E402

#: Steps per variant with the fewest gradient values whose median is the variant's host time.
SMALLEST = 10
#: Dense SGD steps up to this many elements are all dispatch (the H100 / H200 profiles: flat 49-88 us).
DENSE_MAX = 2**20
#: The graph's launches and host waits per fused table and variant (kernel nodes + the coalesce's read-back).
GRAPH_LAUNCHES = {"sparse_sgd": 2, "sparse_adagrad": 3}


def host_op_equivalents(table: pd.DataFrame, overheads: Overheads | None = None) -> dict[str, float]:
    """Host ops one GPU ``optimizer.step()`` on one sparse gradient costs per variant (``sparse_sgd``,
    ``sparse_adagrad``), from a profile table's smallest sparse steps against its dense SGD steps (module doc);
    plus the medians used (``T_<variant>``, ``T_dense_sgd`` in us). ValueError when the table lacks the rows."""
    o = overheads or Overheads()
    t = table[table["op"] == "elementwise"]
    dense = t[(t["variant"] == "sgd") & (t["elements"] <= DENSE_MAX)]["time_us"]
    if dense.empty:
        raise ValueError("the profile has no dense SGD steps (`hybrid profile --only optimizer`)")
    out = {"T_dense_sgd": float(dense.median())}
    for v, launches in GRAPH_LAUNCHES.items():
        s = t[(t["variant"] == v) & (t["direction"] == "fwd")].sort_values("elements")["time_us"].head(SMALLEST)
        if len(s) < SMALLEST:
            raise ValueError(f"the profile has {len(s)} {v} steps, {SMALLEST} needed")
        out[f"T_{v}"] = float(s.median())
        n = 1.0 + (out[f"T_{v}"] - out["T_dense_sgd"] - (launches - 1) * o.kernel_launch_us) / o.host_op_us
        out[v] = float(max(n, 1.0))
    return out


def main(argv: list[str] | None = None) -> int:
    from hybrid.data.bundle import load_bundle

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundles", nargs="+", default=["datasets/H100-SXM", "datasets/H200"])
    ap.add_argument("--out", default=str(Path(__file__).with_name("sparse_host.md")))
    args = ap.parse_args(argv)
    o = Overheads()
    rows = []
    for b in args.bundles:
        table, _ = load_bundle(b)
        rows.append((b, str(table["device"].iloc[0]), host_op_equivalents(table, o)))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print("# A GPU's sparse optimizer steps in host ops (HARNESS_HOST_OPS)\n")
        print(f"Command: `python experiments/dlrm_validation/sparse_host.py --bundles {' '.join(args.bundles)}`\n")
        print(f"Rows: each bundle's profiled `optimizer.step()` calls (host time included; the project's own "
              f"measurements): the median of the {SMALLEST} sparse steps with the fewest gradient values per variant "
              f"and of the dense SGD steps up to {DENSE_MAX:,} elements. Host ops = 1 + (T_sparse - T_dense_sgd - "
              f"(graph launches and waits - 1) x {o.kernel_launch_us:g} us) / {o.host_op_us:g} us (module doc).\n")
        print("| bundle | device | dense SGD step us | sparse SGD step us | sparse SGD host ops | sparse Adagrad step us "
              "| sparse Adagrad host ops |")
        print("|---|---|---|---|---|---|---|")
        for b, dev, r in rows:
            print(f"| `{b}` | {dev} | {r['T_dense_sgd']:.0f} | {r['T_sparse_sgd']:.0f} | {r['sparse_sgd']:.1f} | "
                  f"{r['T_sparse_adagrad']:.0f} | {r['sparse_adagrad']:.1f} |")
        cpu = {k: HARNESS_HOST_OPS[f"{k}_per_group"] + HARNESS_CPU_EXTRA_OPS[f"{k}_per_group"]
               for k in GRAPH_LAUNCHES}
        print(f"\nThe engine's GPU counts (`HARNESS_HOST_OPS`): sparse SGD {HARNESS_HOST_OPS['sparse_sgd_per_group']:g}"
              f", sparse Adagrad {HARNESS_HOST_OPS['sparse_adagrad_per_group']:g} per fused table (the first "
              f"bundle's, rounded; the others are checks); a CPU records {cpu['sparse_sgd']:g} / "
              f"{cpu['sparse_adagrad']:g} (`HARNESS_CPU_EXTRA_OPS` adds the difference), its kernels' nested ATen "
              "calls included.")
    write_text(Path(args.out), out.getvalue())  # atomic: no half-written report
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
