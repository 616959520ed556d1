"""An interval contains its point: ``time_us_low <= time_us <= time_us_high`` on every row.

The interval's low end stops at the answering correction's physical floor (``floor_us``: a GPU GEMM does not beat
its datasheet roofline). A few-shot scale (``HybridPredictor.adapt``, strategy ``auto``: a device-wide log offset
fitted on the user's rows) moved the point below that floor on a GPU measured faster than the model priced it,
while the low end stayed at the floor: the low end lay above the point."""

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections.predictor import HybridPredictor
from hybrid.data.bundle import bundle_catalog, load_bundle

DATASETS = Path(__file__).resolve().parents[1] / "datasets"


@pytest.fixture(scope="module")
def gemm_model():
    """The default corrections fitted on the project's eager H100 / H200 profiles, its intervals from a random hold-out."""
    paths = [DATASETS / "H100-SXM", DATASETS / "H200"]
    catalog = bundle_catalog(paths)
    table = pd.concat([load_bundle(p)[0] for p in paths], ignore_index=True, sort=False)
    pred = HybridPredictor(catalog).fit(table)
    pred.calibrate_intervals(table, max_devices=0)
    return pred, catalog


@pytest.fixture(scope="module")
def a100_gemms(shared_datasets, gemm_model):
    from hybrid.data.importers import import_paths

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ns = import_paths("neusight", shared_datasets / "neusight", catalog=gemm_model[1])
    rows = ns[(ns["device"] == "A100-PCIE-80GB") & ns["op"].isin(["bmm", "linear", "gemm"])]
    return rows.reset_index(drop=True)


def test_few_shot_scale_below_the_gemm_floor_keeps_the_point_inside_its_interval(gemm_model, a100_gemms):
    pred, _ = gemm_model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        priced = pred.predict(a100_gemms.drop(columns="time_us"), intervals=False)["time_us"].to_numpy()
        # the user's few rows ran faster than the model priced them: a negative device-wide scale
        shots = np.argsort(a100_gemms["time_us"].to_numpy() / priced)[:3]
        adapted = pred.adapt(a100_gemms.iloc[shots])
    assert adapted.offsets["kernel-xgb-gemm"]["A100-PCIE-80GB"] < 0
    out = adapted.predict(a100_gemms.drop(columns="time_us"))
    time, low, high = (out[c].to_numpy() for c in ("time_us", "time_us_low", "time_us_high"))
    assert np.isfinite(low).all() and np.isfinite(high).all()
    assert (low <= time).all(), f"{int((low > time).sum())} rows with the low end above the point"
    assert (time <= high).all()
    # the point stops at the GEMM floor (the roofline), as the interval's low end does
    assert (time >= out["roofline_us"].to_numpy() * (1 - 1e-12)).all()
