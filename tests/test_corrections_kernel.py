"""XGBoost kernel corrections fitted on real (sub-sampled) NeuSight measurements."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections import GemmXGB, HybridPredictor, PointwiseXGB, XGBParams
from hybrid.corrections.features import build_features, feature_names
from hybrid.ops.roofline import roofline
from hybrid.reports.metrics import error_summary

HELD_OUT = "V100-PCIE-32GB"
TRAIN_GPUS = ("P4", "P100-PCIE-16GB", "T4", "A100-PCIE-40GB", HELD_OUT)


@pytest.fixture(scope="module")
def neusight(shared_datasets, catalog) -> pd.DataFrame:
    from hybrid.data.importers import import_paths

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = import_paths("neusight", shared_datasets, catalog=catalog)
    table = table[table["device"].isin(TRAIN_GPUS)]
    # sub-sample: 1500 GEMM-family and 600 pointwise rows per GPU keep the test fast
    gemm = table[table["op"].isin(["bmm", "linear"])].sample(frac=1.0, random_state=0).groupby("device").head(1500)
    point = table[~table["op"].isin(["bmm", "linear"])].sample(frac=1.0, random_state=0).groupby("device").head(600)
    return pd.concat([gemm, point]).reset_index(drop=True)


def _small() -> XGBParams:
    return XGBParams(n_estimators=150, max_depth=6, learning_rate=0.1)


def test_gemm_transfers_to_held_out_gpu(neusight, catalog):
    gemm = neusight[neusight["op"].isin(["bmm", "linear"])]
    base = roofline(gemm, catalog)
    train = (gemm["device"] != HELD_OUT).to_numpy()
    model = GemmXGB(_small()).fit(gemm[train], base[train], catalog)
    pred = model.predict(gemm[~train], base[~train], catalog)
    meas = gemm.loc[~train, "time_us"]
    corrected = error_summary(pred, meas)["geomean_pct"]
    roof = error_summary(base.loc[~train, "time_us"], meas)["geomean_pct"]
    assert corrected < roof * 0.8, (corrected, roof)
    assert corrected < 35.0


def test_in_distribution_error_is_small(neusight, catalog):
    rng = np.random.default_rng(1)
    test = rng.random(len(neusight)) < 0.2
    pred = HybridPredictor(catalog, [GemmXGB(_small()), PointwiseXGB(_small())]).fit(neusight[~test])
    out = pred.predict(neusight[test])
    assert set(out["method"]) == {"kernel-xgb"}
    summary = error_summary(out["time_us"], neusight.loc[test, "time_us"], {"by_op": neusight.loc[test, "op"]})
    assert summary["geomean_pct"] < 15.0, summary
    assert summary["by_op"]["bmm"]["geomean_pct"] < 15.0
    roof = error_summary(out["roofline_us"], neusight.loc[test, "time_us"])["geomean_pct"]
    assert summary["geomean_pct"] < roof / 2


def test_deterministic_vectorised_and_round_trips(neusight, catalog, tmp_path):
    sub = neusight.iloc[:2000]
    a = HybridPredictor(catalog, [GemmXGB(_small()), PointwiseXGB(_small())], seed=3).fit(sub)
    b = HybridPredictor(catalog, [GemmXGB(_small()), PointwiseXGB(_small())], seed=3).fit(sub)
    np.testing.assert_array_equal(a.predict_time(sub), b.predict_time(sub))
    a.save(tmp_path / "model")
    assert (tmp_path / "model" / "kernel-xgb-gemm" / "model.json").is_file()
    assert not list(tmp_path.rglob("*.pkl"))
    loaded = HybridPredictor.load(tmp_path / "model", catalog=catalog)
    np.testing.assert_array_equal(loaded.predict_time(sub), a.predict_time(sub))
    # one call over a large table: vectorised (well under a millisecond per 100 rows)
    big = sub[sub["op"].isin(["bmm", "linear"])].sample(50_000, replace=True, random_state=0)
    t0 = time.perf_counter()
    out = a.predict(big)
    assert time.perf_counter() - t0 < 20.0
    assert len(out) == len(big) and np.isfinite(out["time_us"]).all() and (out["time_us"] > 0).all()
    assert out.index.equals(big.index)


def test_features_are_finite_and_ordered(neusight, catalog):
    gemm = neusight[neusight["op"].isin(["bmm", "linear"])].iloc[:500]
    feats = build_features("gemm", gemm, roofline(gemm, catalog), catalog)
    assert list(feats.columns) == feature_names("gemm")
    assert np.isfinite(feats.to_numpy()).all()
    # fractional waves lie in (0, 1]; GEMV flag only where m or n is 1
    assert ((feats["wave_eff128"] > 0) & (feats["wave_eff128"] <= 1)).all()
    assert (feats["is_gemv"] == ((gemm["m"] == 1) | (gemm["n"] == 1)).astype(float).to_numpy()).all()


def test_unfitted_model_and_missing_rows_raise(catalog, neusight):
    from hybrid.errors import InvalidInputError

    point = neusight[~neusight["op"].isin(["bmm", "linear"])].iloc[:100]
    base = roofline(point, catalog)
    with pytest.raises(InvalidInputError, match="not fitted"):
        GemmXGB().predict(point, base, catalog)
    with pytest.raises(InvalidInputError, match="no rows"):
        GemmXGB().fit(point, base, catalog)
