"""The physical floor of corrected predictions (``hybrid.corrections.bounds``): a convolution on a GPU the fit never
saw is not predicted faster than its floor x its roofline (a 1x1 or strided compute-bound conv: the roofline; any
other: ``CONV_ROOFLINE_FLOOR``, below every measured GPU conv), nor is the low end of its interval, nor after a
few-shot scale that would pull it under. Non-floored families and CPU rows keep the trees' answer."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections import HybridPredictor, XGBParams
from hybrid.corrections.bounds import CONV_DIRECT_ROOFLINE_FLOOR, CONV_ROOFLINE_FLOOR, floor_us
from hybrid.corrections.kernel_xgb import ConvXGB
from hybrid.ops.roofline import roofline

CONV_DIR = "neusight/scripts/asplos/data/dataset/train/collect/conv/p2.1.0"
UNSEEN = ("H100-SXM", "L4", "MI300X", "B200")


@pytest.fixture(scope="module")
def conv_rows(shared_datasets, catalog) -> pd.DataFrame:
    from hybrid.data.importers import import_paths

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = import_paths("neusight", shared_datasets / CONV_DIR, catalog=catalog)
    return table.sample(frac=1.0, random_state=0).groupby("device").head(300).reset_index(drop=True)


@pytest.fixture(scope="module")
def conv_predictor(conv_rows, catalog) -> HybridPredictor:
    pred = HybridPredictor(catalog, [ConvXGB(XGBParams(n_estimators=60, max_depth=6))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pred.fit(conv_rows, intervals=True)


def _grid(devices) -> pd.DataFrame:
    rows = [{"op": "conv2d", "device": d, "dtype": dt, "batch": b, "in_channels": c, "out_channels": c, "height": h,
             "width": h, "kernel_h": k, "kernel_w": k, "stride": s, "padding": k // 2}
            for d, dt, b, c, h, k, s in itertools.product(devices, ("fp32", "fp16"), (8, 64), (64, 512), (14, 56),
                                                           (1, 3, 7), (1, 2))]
    return pd.DataFrame(rows)


def _floor(table: pd.DataFrame, catalog) -> np.ndarray:
    base = roofline(table, catalog)
    direct = ((table["kernel_h"] == 1) | (table["stride"] > 1)).to_numpy() & (base["bound"].astype(str) == "compute"
                                                                             ).to_numpy()
    return np.where(direct, CONV_DIRECT_ROOFLINE_FLOOR, CONV_ROOFLINE_FLOOR) * base["time_us"].to_numpy()


def test_unseen_gpu_conv_and_its_interval_stay_above_the_floor(conv_predictor, catalog):
    grid = _grid(UNSEEN)
    out = conv_predictor.predict(grid)
    assert (out["method"] == "kernel-xgb").all()
    floor = _floor(grid, catalog)
    assert (out["time_us"].to_numpy() >= floor * (1 - 1e-9)).all()
    low = out["time_us_low"].to_numpy()
    assert np.isfinite(low).all() and (low >= floor * (1 - 1e-9)).all()
    # the floor is a bound, not the prediction: most rows keep the trees' answer, above it
    assert (out["time_us"].to_numpy() > floor * 1.01).mean() > 0.5


def test_floor_survives_a_few_shot_scale(conv_predictor, catalog):
    """A new GPU adapted with rows measured at a tenth of the roofline (a mislabelled dtype, say): the scale pulls
    the trees down, the floor holds."""
    shots = _grid(["L4"]).iloc[::7].reset_index(drop=True)
    shots["time_us"] = 0.1 * roofline(shots, catalog)["time_us"].to_numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adapted = conv_predictor.adapt(shots, strategy="scale")
    grid = _grid(["L4"])
    out = adapted.predict(grid)
    floor = _floor(grid, catalog)
    assert (out["time_us"].to_numpy() >= floor * (1 - 1e-9)).all()
    assert (out["time_us_low"].to_numpy() >= floor * (1 - 1e-9)).all()


def test_floor_rules(catalog):
    table = pd.DataFrame({"op": ["conv2d"] * 4 + ["elementwise"], "dtype": "fp32",
                          "device": ["H100-SXM", "H100-SXM", "H100-SXM", "cpu-amd-epyc-1c", "H100-SXM"],
                          "batch": 64, "in_channels": 512, "out_channels": 512, "height": 56, "width": 56,
                          "kernel_h": [3, 1, 3, 3, np.nan], "kernel_w": [3, 1, 3, 3, np.nan], "stride": [1, 1, 2, 1, 1],
                          "padding": 1, "elements": [np.nan] * 4 + [1 << 20]})
    cat = catalog
    try:
        from hybrid.data.bundle import bundle_catalog
        from hybrid.data.paths import project_datasets_dir

        cat = bundle_catalog(project_datasets_dir() / "cpu-amd-epyc-1c")
    except Exception:  # noqa: BLE001 - without the CPU bundle the CPU row is simply an unknown device
        table = table.iloc[[0, 1, 2, 4]]
    from hybrid.data.schema import validate

    norm = validate(table.assign(time_us=1.0), cat, source="predict", prediction=True)
    base = roofline(norm, cat)
    got = floor_us(norm, base, cat) / base["time_us"].to_numpy()
    assert (base["bound"].astype(str).iloc[:3] == "compute").all()
    expected = {0: CONV_ROOFLINE_FLOOR, 1: CONV_DIRECT_ROOFLINE_FLOOR, 2: CONV_DIRECT_ROOFLINE_FLOOR}
    for i, f in expected.items():
        assert got[i] == pytest.approx(f)
    assert (got[3:] == 0).all()  # a CPU conv (peaks are estimates) and an elementwise op: no floor
