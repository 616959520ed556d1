"""Where the NLP end-to-end error comes from: per label row, the predicted time per op family and per phase.

    python experiments/nlp_e2e/analyze.py --labels FILE [--rows-per-gpu 4000] [--out breakdown.csv]

Same models, traces and calibrated predictor as ``run.py``; writes one row per (label row, op family) with the
calibrated and roofline predicted time (ms) on the critical path's stream, and for training rows the predicted
forward / backward split beside the label's own ``fw_latency`` / ``bwall_latency``. Nothing here is fitted to
the labels: it only reads them to set the error beside each family's share.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as e2e  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", default=str(e2e.ROOT.parent / "shared" / "datasets" / "neusight" / "e2e_labels_dev.csv"))
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--rows-per-gpu", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trace-dir", default=str(Path(tempfile.gettempdir()) / "hybrid-nlp-e2e-traces"))
    ap.add_argument("--out", default="nlp_e2e_breakdown.csv")
    args = ap.parse_args(argv)

    from tqdm import tqdm

    from hybrid.data.traces import load_trace
    from hybrid.engine.costs import RooflineCostModel
    from hybrid.hardware.catalog import default_catalog
    from hybrid.workloads.trace_graph import build_trace_graph, predict_trace

    labels = e2e.read_labels(args.labels)
    cat = default_catalog()
    calib, ccat, _, _ = e2e.calibrated_model(args.data_dir, args.rows_per_gpu, args.seed)
    models = {"calibrated": (calib, ccat), "roofline": (RooflineCostModel(cat), cat)}
    trace_dir = Path(args.trace_dir)
    out = []
    cache: dict = {}
    for _, r in tqdm(labels.iterrows(), total=len(labels), file=sys.stderr):
        if e2e.skip_reason(r, cat) or r["extra"]:
            continue
        dev = e2e.resolve_gpu(str(r["gpu"]), cat)
        key = (r["model"], r["mode"], int(r["seqlen"]), int(r["batch"]))
        if key not in cache:
            cache[key] = load_trace(e2e.record_trace(*key, trace_dir,
                                                     accumulate=e2e.accumulates_gradients(r["mode"], r["extra"])))
        for label, (model, mcat) in models.items():
            it = build_trace_graph([cache[key]], dev, mcat, same_device=False)
            p = predict_trace(it, model)
            bd = p.breakdown()
            ph = p.predicted.phase_times(["forward", "backward"]).max(axis=0) if r["mode"] == "train" else None
            for _, b in bd.iterrows():
                out.append({"gpu": r["gpu"], "model": r["model"], "mode": r["mode"], "seqlen": int(r["seqlen"]),
                            "batch": int(r["batch"]), "measured_ms": float(r["e2e_latency"]),
                            "fw_ms": float(r.get("fw_latency", np.nan) or np.nan),
                            "bw_ms": float(r.get("bwall_latency", np.nan) or np.nan),
                            "predictor": label, "total_ms": p.predicted_us / 1e3, "family": b["label"],
                            "family_ms": float(b["predicted_us"]) / 1e3, "nodes": int(b["nodes"]),
                            "pred_fw_ms": float(ph.get("forward", np.nan)) / 1e3 if ph is not None else np.nan,
                            "pred_bw_ms": float(ph.get("backward", np.nan)) / 1e3 if ph is not None else np.nan})
    pd.DataFrame(out).to_csv(args.out, index=False)
    print(f"wrote {args.out} ({len(out)} rows)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
