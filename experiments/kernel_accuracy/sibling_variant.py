"""Adopted as the default (2026-12-02): price an unseen GPU's GEMMs from its measured sibling die's efficiency too.

A GPU no calibration row describes may be another product of a die that was measured (V100 PCIe beside the V100
SXM2, A100 PCIe 80GB beside the 40GB, Titan X Pascal beside the GTX 1080 Ti, Vega FE beside the MI25, Titan X
beside the M40: :meth:`Catalog.same_die <hybrid.hardware.catalog.Catalog.same_die>`). The default GEMM model
predicts its rows from the trees and the device descriptors; this script compares, leave-one-GPU-out on exactly
the data and splits of ``run.py --groups gemm`` (every held-out GPU with a sibling among the fitted ones):

* ``trees``: the model without the rule (feature version 4, one booster, ``sibling_blend = False``), as
  ``run.py`` scored it before 2026-12-02;
* ``sibling``: the same fitted model asked for the row on the sibling, its efficiency (roofline / predicted) put
  on the held-out GPU's own roofline (the dtype proxy's rule, across dies instead of dtypes;
  ``GemmXGB.sibling_proxy_us``);
* ``blend, every row``: the geometric mean of the two on every row (the default earlier on 2026-12-02);
* ``blend`` (the default since, ``GemmXGB.sibling_blend = True``): the same, except on
  ``GemmXGB.host_bound_rows``: framework-timed rows whose roofline is under their host dispatch (the fitted
  ``host_us``; 0 on kernel-only rows, so those always blend) on a GPU whose sibling's fitted GEMMs were
  framework-timed too; those keep the trees.

Cells: the benchmark's per-device geomean |pred - meas| / meas (%) and the median predicted / measured; only the
held-out rows in a dtype the sibling was fitted in are scored.

    python experiments/kernel_accuracy/sibling_variant.py [SEED] [--bundles]

``--bundles`` adds the project's own GPU profiles (``datasets/H100-SXM``, ``datasets/H200``: eager PyTorch on two
VMs whose host dispatch differs by ~10 us) to the public data, as ``experiments/gpu_bundles`` does.

Results and the decision are in results.md (Discussion).
"""
from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import run as ka  # noqa: E402  (this benchmark's loaders, splits and metric)

from hybrid.corrections import GemmXGB  # noqa: E402
from hybrid.corrections.intervals import SIBLING_MAX_TDP_RATIO  # noqa: E402
from hybrid.data.paths import public_data_dir  # noqa: E402
from hybrid.ops.roofline import roofline  # noqa: E402

DEFAULT_GEMM = ka.GEMM_CONFIGS["v4, one booster (default)"]


def main(argv: list[str]) -> int:
    bundles = "--bundles" in argv
    argv = [a for a in argv if a != "--bundles"]
    seed = int(argv[0]) if argv else 0
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table, cat = ka.load(public_data_dir(None), 1200, seed, bundles)
    sub = table[table["group"] == "gemm"].reset_index(drop=True)
    base = roofline(sub, cat)
    gpus = sorted(d for d in sub["device"].unique() if cat.device(d).kind == "gpu")
    names = ("trees", "sibling", "blend, every row", "blend")
    lines = ["| held-out GPU | source | sibling | rows scored | trees | sibling | blend, every row | "
             "blend (`sibling_blend=True`, default) |", "|---|---|---|---|---|---|---|---|"]
    means: dict[str, dict[str, list[float]]] = {"public": {n: [] for n in names}, "profile": {n: [] for n in names}}
    for held in gpus:
        close = [s for s in cat.same_die(held, SIBLING_MAX_TDP_RATIO) if s in gpus and s != held]
        if not close:
            continue
        test = (sub["device"] == held).to_numpy()
        model = ka.make_model(GemmXGB, DEFAULT_GEMM, seed, 400)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(sub[~test], base[~test], cat)
        rows = sub[test].reset_index(drop=True)
        rbase = base[test].reset_index(drop=True)
        sibling = model.sibling_proxy_us(rows, rbase, cat)  # the library's rule (GemmXGB.sibling_blend)
        if not np.isfinite(sibling).any():
            continue
        model.sibling_blend = False
        trees = model.predict(rows, rbase, cat)
        model.sibling_blend = True
        preds = {"trees": trees, "sibling": sibling, "blend, every row": np.sqrt(trees * sibling),
                 "blend": model.predict(rows, rbase, cat)}
        meas = rows["time_us"].to_numpy(dtype=np.float64)
        srcs = rows["src"].astype(str).to_numpy()
        for src in sorted(set(srcs[np.isfinite(sibling)])):
            scored = np.isfinite(sibling) & (srcs == src)
            sib = model.sibling_of(held, str(rows.loc[scored, "dtype"].iloc[0]), cat)
            kind = "profile" if src.startswith("profile:") else "public"
            cells = {}
            for name in names:
                pred = preds[name]
                cells[name] = ka._cell(pred[scored], meas[scored])  # noqa: SLF001
                means[kind][name].append(ka._geo(np.abs(pred[scored] / meas[scored] - 1)))  # noqa: SLF001
            lines.append(f"| {held} | {src} | {sib} | {int(scored.sum())} | "
                         + " | ".join(cells[n] for n in names) + " |")
            print(lines[-1], file=sys.stderr, flush=True)
    for kind, label in (("public", "GPUs, public rows"), ("profile", "project GPU profiles")):
        if means[kind]["trees"]:
            lines.append(f"| **mean over {len(means[kind]['trees'])} {label}** | | | | " + " | ".join(
                f"**{np.mean(means[kind][n]):.1f}**" for n in names) + " |")
    print("\n".join(lines))
    print(f"\n(seed {seed}{', with the GPU bundles' if bundles else ''}, {time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
