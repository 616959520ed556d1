"""ConvXGB on NeuSight's GPU convolution rows: fitted on four GPUs, it beats the roofline on the fifth."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections import XGBParams
from hybrid.corrections.kernel_xgb import ConvXGB
from hybrid.data.importers import import_paths
from hybrid.data.schema import validate
from hybrid.ops.roofline import roofline
from hybrid.reports.metrics import error_summary

CONV = "neusight/scripts/asplos/data/dataset/train/collect/conv/p2.1.0"


@pytest.fixture(scope="module")
def conv_rows(shared_datasets, catalog) -> pd.DataFrame:
    table = import_paths("neusight", shared_datasets / CONV, catalog=catalog)
    # 500 rows per GPU (seeded) keep the five fits to a few seconds
    return table.sample(frac=1.0, random_state=0).groupby("device").head(500).reset_index(drop=True)


def test_imported_conv_rows_validate(conv_rows, catalog):
    assert len(validate(conv_rows, catalog)) == len(conv_rows) == 2500
    assert conv_rows["device"].nunique() == 5 and (conv_rows["op"] == "conv2d").all()


def test_conv_xgb_beats_roofline_on_held_out_gpu(conv_rows, catalog):
    base = roofline(conv_rows, catalog)
    roof, corr = {}, {}
    for dev in sorted(conv_rows["device"].unique()):
        held = (conv_rows["device"] == dev).to_numpy()
        model = ConvXGB(XGBParams(n_estimators=150)).fit(conv_rows[~held], base[~held], catalog)
        pred = model.predict(conv_rows[held], base[held], catalog)
        assert np.isfinite(pred).all() and (pred > 0).all()
        meas = conv_rows.loc[held, "time_us"]
        roof[dev] = error_summary(base.loc[held, "time_us"], meas)["geomean_pct"]
        corr[dev] = error_summary(pred, meas)["geomean_pct"]
    print({d: (round(roof[d], 1), round(corr[d], 1)) for d in roof})  # held-out GPU: (roofline %, corrected %)
    geo = lambda d: float(np.exp(np.mean(np.log(list(d.values())))))  # noqa: E731
    # loose bounds (measured about 33 % -> 14 % over the five GPUs, see experiments/kernel_accuracy/conv_results.md)
    assert geo(corr) < 0.75 * geo(roof), (corr, roof)
    assert all(corr[d] < roof[d] for d in roof), (corr, roof)
    assert geo(corr) < 25.0
