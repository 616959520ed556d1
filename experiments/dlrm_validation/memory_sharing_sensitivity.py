"""DLRM CPU validation under the shared-memory-bandwidth term, for the all-core bandwidths this VM kind shows.

    python experiments/dlrm_validation/memory_sharing_sensitivity.py [--ratios none,1.9,1.4,1.12]

The committed campaigns were measured on 2-core VMs whose all-core memory bandwidth was not recorded (the bundle
``datasets/cpu-amd-epyc-1c`` predates the profiler's measurement of it), and on this VM kind two streams get
1.0-1.9x one stream's bandwidth depending on the minute (``hybrid.data.profiler.memory_sharing``). So the term's
effect is shown for a range of ratios (``mem_bw_shared = ratio x mem_bw``; ``none`` = the term off, today's
default for the committed bundle), not fitted: per campaign the geomean |error| with default overheads and the
predicted/measured median of the ``optimizer`` and ``dense_fwd`` phases.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np

from hybrid.bench.validate import EnginePredictor, resolve_predictor, validate_campaign

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "datasets" / "cpu-amd-epyc-1c"
CAMPAIGNS = ("dlrm-cpu-2rank", "dlrm-cpu-heldout-4242", "dlrm-cpu-heldout-5151")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ratios", default="none,1.9,1.4,1.12")
    args = ap.parse_args()
    base = resolve_predictor(bundle=BUNDLE)
    key = next(d.key for d in base.catalog if d.key == BUNDLE.name)
    dev = base.catalog.device(key)
    print("| campaign | runs | all-core / one-core bandwidth | geomean % | optimizer pred/meas | dense_fwd pred/meas |")
    print("|---|---|---|---|---|---|")
    for camp in CAMPAIGNS:
        for r in args.ratios.split(","):
            shared = 0.0 if r == "none" else float(r) * dev.mem_bw
            cat = base.catalog.with_device(replace(dev, mem_bw_shared=shared))
            model = base.model
            model.catalog = cat
            pred = EnginePredictor(base.name, model, cat, base.system)
            rep = validate_campaign(ROOT / "datasets" / camp / "results.csv", pred, fit_overheads=False)
            t = rep.table
            ratio = {ph: float(np.median(t[f"pred_{ph}_ms"] / t[f"{ph}_ms"])) if f"{ph}_ms" in t else float("nan")
                     for ph in ("optimizer", "dense_fwd")}
            print(f"| {camp} | {len(t)} | {r} | {rep.errors['geomean_pct']:.1f} | {ratio['optimizer']:.2f} | "
                  f"{ratio['dense_fwd']:.2f} |", flush=True)
        model.catalog = base.catalog


if __name__ == "__main__":
    main()
