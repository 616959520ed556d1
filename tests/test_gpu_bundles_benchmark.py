"""``experiments/gpu_bundles/run.py`` reports each calibration's fitted host-dispatch constants: one per kernel
model (``dispatch_us``), and one per direction | variant for the embedding model (``group_dispatch_us``; a dict
under the kernel models' name once, which the report failed to format)."""

from __future__ import annotations

from pathlib import Path

from hybrid.corrections.predictor import HybridPredictor
from hybrid.data.bundle import load_bundle

ROOT = Path(__file__).resolve().parents[1]


def test_dispatch_constants_of_every_kernel_model_are_reported(load_experiment):
    mod = load_experiment("gpu_bundles")
    table, cat = load_bundle(ROOT / "datasets" / "H100-SXM")
    pred = HybridPredictor(cat).fit(table)
    text = mod.dispatch_us(pred)
    emb = next(c for c in pred.corrections if c.key.endswith("embedding-xgb"))
    assert not hasattr(emb, "dispatch_us") and emb.group_dispatch_us
    for key, us in emb.group_dispatch_us.items():
        assert f"{key} {us:.1f}" in text
    gemm = next(c for c in pred.corrections if c.key == "kernel-xgb-gemm")
    assert f"gemm {gemm.dispatch_us:.1f}" in text
