"""The fitted physical cost model the embedding trees are relative to (``EmbeddingXGB(reference="linear")``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hybrid.corrections import EmbeddingXGB, HybridPredictor, XGBParams
from hybrid.corrections.embedding_xgb import (
    COST_TERMS,
    SHARE_FEATURES,
    cost_terms,
    generalized_harmonic,
    llc_hit_fraction,
)
from hybrid.reports.metrics import error_summary


@pytest.fixture(scope="module")
def cpu_profile():
    from hybrid.data.bundle import load_bundle
    from hybrid.data.paths import project_datasets_dir

    bundle = project_datasets_dir() / "cpu-amd-epyc-1c"
    if not (bundle / "measurements.csv").is_file():
        pytest.skip("committed CPU profile bundle absent")
    table, cat = load_bundle(bundle)
    table = table[table["op"] == "embedding_bag"].reset_index(drop=True)
    return table.assign(direction=table["direction"].fillna("fwd")), cat


def test_cost_terms_are_positive_and_scale_with_the_work(cpu_profile):
    table, cat = cpu_profile
    terms = cost_terms(table, cat)
    assert terms.shape == (len(table), len(COST_TERMS)) and np.isfinite(terms).all() and (terms >= 0).all()
    doubled = cost_terms(table.assign(batch_size=table["batch_size"] * 2), cat)
    i = COST_TERMS.index("gathered_bytes")
    np.testing.assert_allclose(doubled[:, i], 2 * terms[:, i])


def test_fitted_reference_constants_are_physical_and_beat_the_roofline_on_largest_tables(cpu_profile):
    table, cat = cpu_profile
    cut = float(np.quantile(table["num_embeddings"], 0.75))
    big = (table["num_embeddings"] > cut).to_numpy()
    errs = {}
    for ref in ("linear", "roofline"):
        pred = HybridPredictor(cat, [EmbeddingXGB(reference=ref)]).fit(table[~big])
        errs[ref] = error_summary(pred.predict_time(table[big]), table.loc[big, "time_us"])["geomean_pct"]
    # measured on the committed profile: 10.6% vs 14.5%
    assert errs["linear"] < errs["roofline"] - 1.0, errs
    consts = pred_linear_constants(table[~big], cat)
    assert set(consts) == {"fwd|sum", "bwd|sparse_sgd", "bwd|dense_sgd"}
    for group in consts.values():
        assert all(v >= 0 for v in group.values())
    # a dense-gradient backward streams the tables a few times (zero-fill, read, update): 1-6 passes
    assert 1.0 <= consts["bwd|dense_sgd"]["dense_grad_bytes"] <= 6.0


def pred_linear_constants(table, cat):
    pred = HybridPredictor(cat, [EmbeddingXGB(XGBParams(n_estimators=20, max_depth=3))]).fit(table)
    return pred.corrections[0].reference_constants()


def test_reference_is_saved_and_old_saves_load_with_the_roofline_reference(cpu_profile, tmp_path):
    table, cat = cpu_profile
    pred = HybridPredictor(cat, [EmbeddingXGB(XGBParams(n_estimators=30, max_depth=3), select=True)]).fit(table)
    corr = pred.corrections[0]
    assert set(corr.selection) == {"fwd|sum", "bwd|sparse_sgd", "bwd|dense_sgd"}  # CV errors recorded per group
    path = pred.save(tmp_path / "p")
    again = HybridPredictor.load(path)
    np.testing.assert_allclose(again.predict_time(table), pred.predict_time(table), rtol=1e-6)
    assert again.corrections[0].coefficients == corr.coefficients
    # a model saved before the fitted reference existed has no reference.json: it uses the roofline reference
    ref_file = path / corr.key / "reference.json"
    assert json.loads(ref_file.read_text())["cost_terms"] == list(COST_TERMS)
    ref_file.unlink()
    old = HybridPredictor.load(path)
    assert old.corrections[0].reference == "roofline" and not old.corrections[0].coefficients


def test_unknown_reference_is_rejected():
    with pytest.raises(Exception, match="unknown embedding reference"):
        EmbeddingXGB(reference="magic")


def test_reference_uses_each_rows_group_coefficients(cpu_profile):
    """The fitted reference of a row is its (direction, variant) group's cost model (looked up per group, not
    per row); rows of a group without coefficients keep the roofline reference."""
    from hybrid.corrections.embedding_xgb import EMBEDDING_FEATURE_VERSION, _groups
    from hybrid.corrections.kernel_xgb import (
        GEMM_FEATURE_VERSION,
        POINTWISE_FEATURE_VERSION,
        GemmXGB,
        PointwiseXGB,
    )
    from hybrid.ops.roofline import roofline

    table, cat = cpu_profile
    model = EmbeddingXGB(XGBParams(n_estimators=5))
    assert (model.feature_version, GemmXGB().feature_version, PointwiseXGB().feature_version) == \
        (EMBEDDING_FEATURE_VERSION, GEMM_FEATURE_VERSION, POINTWISE_FEATURE_VERSION)
    model.coefficients = model.fit_reference(table, cat)
    groups = _groups(table)
    assert len(model.coefficients) >= 2
    dropped = sorted(model.coefficients)[0]
    del model.coefficients[dropped]
    base = roofline(table, cat)
    got = model.reference_us(table, base, cat)
    terms = cost_terms(table, cat)
    roof = model.roofline_reference_us(table, base, cat)
    for i in range(len(table)):
        g = groups[i]
        want = max(float(terms[i] @ np.asarray(model.coefficients[g])), 1e-3) if g in model.coefficients else roof[i]
        assert got[i] == pytest.approx(want, rel=1e-12)
    assert (groups == dropped).any()


def test_generalized_harmonic_matches_the_sum():
    for n in (1, 2, 7, 100, 5000):
        for a in (0.5, 1.0, 1.05, 1.2, 2.0):
            exact = float(np.sum(np.arange(1, n + 1, dtype=float) ** -a))
            assert generalized_harmonic(np.array([n]), np.array([a]))[0] == pytest.approx(exact, rel=3e-2)


def test_zipf_cache_hit_fraction_and_version_4_features(cpu_profile, tmp_path):
    """Version 4: with Zipf indices the cache holds the hottest rows, so far more lookups hit than the cached share
    of the table; uniform indices hit with that share. The trees see each cost term's share of the reference."""
    table, cat = cpu_profile
    llc = cat.device(table["device"].iloc[0]).l2_cache
    rows = int(20 * llc / (64 * 4))  # one table 20x the cache, 64-float rows
    probe = table.iloc[:3].assign(num_tables=1, num_embeddings=rows, embedding_dim=64, dtype="fp32",
                                  index_dist=["uniform", "zipf", "zipf"], zipf_alpha=[0.0, 1.05, 1.2])
    hit = llc_hit_fraction(probe, cat)
    assert hit[0] == pytest.approx(1 / 20, rel=1e-3)
    assert 0.5 < hit[1] < hit[2] < 1.0
    np.testing.assert_allclose(llc_hit_fraction(probe, cat, zipf=False), 1 / 20, rtol=1e-3)
    miss = COST_TERMS.index("llc_miss_lookups")
    assert (cost_terms(probe, cat)[1:, miss] < cost_terms(probe, cat, False)[1:, miss]).all()
    model = EmbeddingXGB(XGBParams(n_estimators=20, max_depth=3))
    assert model.feature_version == 4 and model.feature_names[-len(SHARE_FEATURES):] == list(SHARE_FEATURES)
    pred = HybridPredictor(cat, [model]).fit(table)
    x = model.features(table, __import__("hybrid.ops.roofline", fromlist=["roofline"]).roofline(table, cat), cat)
    shares = x[[f"share_{t}" for t in COST_TERMS]].to_numpy()
    np.testing.assert_allclose(shares.sum(axis=1), 1.0)
    path = pred.save(tmp_path / "p")
    np.testing.assert_allclose(HybridPredictor.load(path).predict_time(table), pred.predict_time(table), rtol=1e-6)
    # a version-2 model keeps the uniform-cache terms and no share features
    old = EmbeddingXGB(XGBParams(n_estimators=20, max_depth=3), feature_version=2)
    assert not set(SHARE_FEATURES) & set(old.feature_names)
