"""Analysis probe (hunt_smallops): how the nlp_e2e calibrated model prices small pointwise ops per label GPU.

    python experiments/nlp_e2e/smallops_probe.py

Per GPU and op: the roofline, the model's eager prediction (``raw``: dispatch included), the host part the
version-3 pointwise trees learned inside it (``learned_host``), the GPU-stream cost with only the fitted dispatch
constant off (``engine_before``: ``KernelTimeModel`` without ``learned_dispatch``, the trace engine before 2026-12-07)
and with that learned host part off too (``dispatch_off``: what the engine costs since). The model is fitted once (~1 min) and cached under
``$HYBRID_HOME`` (default /tmp).
"""

from __future__ import annotations

import os
import pickle
import sys
import warnings
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

GPUS = ("A100-PCIE-40GB", "A100-PCIE-80GB", "A100-SXM4-40GB", "V100-PCIE-32GB", "T4", "P100-PCIE-16GB", "P4",
        "MI100", "MI210", "MI250", "H100-SXM")


def main() -> int:
    from hybrid.engine.costs import KernelTimeModel, RooflineCostModel

    warnings.simplefilter("ignore")
    pk = Path(os.environ.get("HYBRID_HOME", "/tmp")) / "smallops_model.pkl"
    if pk.exists():
        with open(pk, "rb") as f:
            model, cat = pickle.load(f)
    else:
        import run  # experiments/nlp_e2e/run.py

        model, cat, _, _ = run.calibrated_model(None, 4000, 0)
        pk.parent.mkdir(parents=True, exist_ok=True)
        with open(pk, "wb") as f:
            pickle.dump((model, cat), f)
    for c in model.corrections:
        if getattr(c, "learned_dispatch", None) is not None:
            print(c.key, "feature version", c.feature_version, "dispatch_us", round(c.dispatch_us, 1),
                  "learned_dispatch", {k: round(v, 1) for k, v in c.learned_dispatch.items()})
    rows = []
    for g in (g for g in GPUS if g in cat):
        for var, n in [("add", 1024), ("add_", 1024), ("add", 1 << 20), ("add", 31 << 20), ("add_", 31 << 20)]:
            rows.append(dict(device=g, op="elementwise", dtype="fp32", variant=var, direction="fwd", elements=float(n),
                             n_inputs=2.0, n_outputs=1.0, flops_per_element=1.0))
        rows.append(dict(device=g, op="layernorm", dtype="fp32", variant="affine", direction="bwd", rows=4096.0,
                         hidden=1024.0))
    t = pd.DataFrame(rows)
    raw = model.predict(t, host=True)
    t = t.assign(n=t["elements"].fillna(t["rows"] * t["hidden"]),
                 roof=RooflineCostModel(cat).predict(t)["time_us"].to_numpy(),
                 raw=raw["time_us"].to_numpy(), learned_host=raw["learned_host_us"].to_numpy(),
                 engine_before=KernelTimeModel(model).predict(t)["time_us"].to_numpy(),
                 dispatch_off=KernelTimeModel(model, learned_dispatch=True).predict(t)["time_us"].to_numpy())
    cols = ["device", "op", "variant", "n", "roof", "raw", "learned_host", "engine_before", "dispatch_off"]
    print(t[cols].round(1).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
