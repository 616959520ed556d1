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
* ``blend``: the geometric mean of the two (``GemmXGB.sibling_blend = True``, the default since 2026-12-02).

Cells: the benchmark's per-device geomean |pred - meas| / meas (%) and the median predicted / measured; only the
held-out rows in a dtype the sibling was fitted in are scored.

    python experiments/kernel_accuracy/sibling_variant.py [SEED]

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
    seed = int(argv[0]) if argv else 0
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table, cat = ka.load(public_data_dir(None), 1200, seed)
    sub = table[table["group"] == "gemm"].reset_index(drop=True)
    base = roofline(sub, cat)
    gpus = sorted(d for d in sub["device"].unique() if cat.device(d).kind == "gpu")
    lines = ["| held-out GPU | sibling | rows scored | trees | sibling | blend (`sibling_blend=True`, default) |",
             "|---|---|---|---|---|---|"]
    means = {"trees": [], "sibling": [], "blend": []}
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
        scored = np.isfinite(sibling)
        if not scored.any():
            continue
        model.sibling_blend = False
        trees = model.predict(rows, rbase, cat)
        model.sibling_blend = True
        blend = model.predict(rows, rbase, cat)
        sib = model.sibling_of(held, str(rows.loc[scored, "dtype"].iloc[0]), cat)
        meas = rows["time_us"].to_numpy(dtype=np.float64)
        cells = {}
        for name, pred in (("trees", trees), ("sibling", sibling), ("blend", blend)):
            cells[name] = ka._cell(pred[scored], meas[scored])  # noqa: SLF001
            means[name].append(ka._geo(np.abs(pred[scored] / meas[scored] - 1)))  # noqa: SLF001
        lines.append(f"| {held} | {sib} | {int(scored.sum())} | {cells['trees']} | {cells['sibling']} | "
                     f"{cells['blend']} |")
        print(lines[-1], file=sys.stderr, flush=True)
    lines.append(f"| **mean over {len(means['trees'])} GPUs** | | | " + " | ".join(
        f"**{np.mean(v):.1f}**" for v in means.values()) + " |")
    print("\n".join(lines))
    print(f"\n(seed {seed}, {time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
