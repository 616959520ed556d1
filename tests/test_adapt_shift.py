"""Few-shot strategy ``shift``: one additive per-op host time per (device, correction), fitted robustly.

The real case: a pointwise model fitted on NeuSight's public GPU rows, adapted to the project's H100 VM (whose
eager-PyTorch floor, 13-18 us, the public hosts do not share) from 20 of its rows."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from hybrid.corrections import HybridPredictor, PointwiseXGB, XGBParams
from hybrid.corrections.adapt import SHIFT_GRID_US, SHRINK, robust_shift
from hybrid.data.bundle import load_bundle
from hybrid.ops.families import family_array
from hybrid.reports.metrics import error_summary


def test_robust_shift_recovers_an_additive_cost_despite_an_outlier():
    pred = np.geomspace(1.0, 2000.0, 30)
    meas = pred + 15.0
    meas[7] *= 6.0  # one shape far off
    assert robust_shift(meas, pred, pred * 0.5, shrink=0.0) == pytest.approx(15.0, abs=0.25)
    assert robust_shift(meas, pred, pred * 0.5) == pytest.approx(15.0 * 30 / (30 + SHRINK), abs=0.25)
    # a negative shift (the model's floor is too high) is found too, and bounded by the roofline
    slower = pred + 30.0
    assert robust_shift(pred + 12.0, slower, pred * 0.1, shrink=0.0) == pytest.approx(-18.0, abs=0.25)
    # measured below the roofline: lowering the prediction cannot help (it is clamped), so no shift
    assert robust_shift(pred * 0.5, pred, pred, shrink=0.0) == 0.0
    assert robust_shift(np.array([np.nan]), np.array([1.0]), np.array([1.0])) == 0.0
    assert SHIFT_GRID_US.min() < 0 < SHIFT_GRID_US.max()


@pytest.fixture(scope="module")
def pointwise(shared_datasets, catalog):
    from hybrid.data.importers import import_paths

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        public = import_paths("neusight", shared_datasets / "neusight" / "test-dev", catalog=catalog)
    public = public[np.isin(family_array(public["op"]), ("elementwise", "norm", "softmax"))]
    public = public.sample(frac=1.0, random_state=0).groupby("device").head(400).reset_index(drop=True)
    h100, _ = load_bundle(Path(__file__).resolve().parents[1] / "datasets" / "H100-SXM")
    h100 = h100[np.isin(family_array(h100["op"]), ("elementwise", "norm", "softmax"))]
    return public, h100.sample(frac=1.0, random_state=0).reset_index(drop=True)


def test_shift_adapts_a_new_host(catalog, pointwise, tmp_path):
    public, h100 = pointwise
    base = HybridPredictor(catalog, [PointwiseXGB(XGBParams(n_estimators=80))]).fit(public)
    shots, test = h100.iloc[:20], h100.iloc[20:]
    adapted = base.adapt(shots, strategy="shift")
    shift = adapted.shifts["kernel-xgb-pointwise"]["H100-SXM"]
    # the H100 VM's per-op floor is above what the public hosts taught the model: a positive shift of a few
    # to tens of microseconds (the dispatch difference), not a scale
    assert 2.0 < shift < 60.0 and not adapted.offsets
    err0 = error_summary(base.predict_time(test), test["time_us"])["geomean_pct"]
    err = error_summary(adapted.predict_time(test), test["time_us"])["geomean_pct"]
    assert err < 0.8 * err0, (err, err0)
    out = adapted.predict(test, intervals=False)
    assert (out["time_us"] >= out["roofline_us"] - 1e-9).all()
    # other devices and the base model are untouched; the state survives save / load
    other = public[public["device"] == public["device"].iloc[0]].iloc[:100]
    np.testing.assert_allclose(adapted.predict_time(other), base.predict_time(other))
    assert not base.shifts
    adapted.save(tmp_path / "shifted")
    again = HybridPredictor.load(tmp_path / "shifted", catalog=catalog)
    np.testing.assert_array_equal(again.predict_time(test), adapted.predict_time(test))
    assert again.summary()["adapted_devices"] == ["H100-SXM"]
    # adapting the same pair with a scale replaces the shift (one adaptation per pair, not both stacked)
    scaled = adapted.adapt(shots, strategy="scale")
    assert "H100-SXM" not in scaled.shifts.get("kernel-xgb-pointwise", {})
    assert "H100-SXM" in scaled.offsets["kernel-xgb-pointwise"]


def test_calibrate_offers_every_strategy_and_checks_it():
    from hybrid.cli.calibrate import ADAPT_STRATEGIES
    from hybrid.corrections.adapt import STRATEGIES
    from hybrid.errors import InvalidInputError
    from hybrid.tracking.calibrate import CalibrationConfig

    assert set(ADAPT_STRATEGIES) == set(STRATEGIES)
    assert CalibrationConfig(name="x", base="m", adapt_strategy="shift").adapt_strategy == "shift"
    with pytest.raises(InvalidInputError, match="magic"):
        CalibrationConfig(name="x", base="m", adapt_strategy="magic")
    with pytest.raises(InvalidInputError, match="base"):
        CalibrationConfig(name="x", adapt_strategy="shift")
