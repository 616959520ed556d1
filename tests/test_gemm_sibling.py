"""The GEMM model's sibling rule (on by default): a GPU the fit never saw, whose die it fitted in another product of its
power class, priced at the sibling's efficiency on its own roofline (blended with the trees)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from hybrid.corrections import GemmXGB, XGBParams
from hybrid.ops.roofline import roofline


@pytest.fixture(scope="module")
def fitted(shared_datasets, catalog):
    """A GEMM model fitted on NeuSight's A100 PCIe 40GB, V100 and T4 GEMMs; the A100 PCIe 80GB rows held out."""
    from hybrid.data.importers import import_paths

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = import_paths("neusight", shared_datasets / "neusight" / "test-dev", catalog=catalog)
    t = t[t["op"].isin(["linear", "bmm"])]
    t = t.sample(frac=1.0, random_state=0).groupby("device").head(400).reset_index(drop=True)
    held = (t["device"] == "A100-PCIE-80GB").to_numpy()
    fit = t[~held & t["device"].isin(["A100-PCIE-40GB", "V100-PCIE-32GB", "T4"]).to_numpy()].reset_index(drop=True)
    model = GemmXGB(XGBParams(n_estimators=60, max_depth=6, learning_rate=0.1)).fit(fit, roofline(fit, catalog),
                                                                                  catalog)
    return model, t[held].reset_index(drop=True), fit


def test_sibling_is_the_fitted_product_of_the_same_die_and_power_class(fitted, catalog):
    model, _, _ = fitted
    assert model.sibling_of("A100-PCIE-80GB", "fp32", catalog) == "A100-PCIE-40GB"  # 300 W vs 250 W: one class
    assert model.sibling_of("A100-PCIE-40GB", "fp32", catalog) == ""  # fitted itself
    assert model.sibling_of("A100-SXM4-80GB", "fp32", catalog) == ""  # 400 W: another power class
    assert model.sibling_of("A100-PCIE-80GB", "bf16", catalog) == ""  # the sibling has no bf16 GEMM in the fit
    assert model.sibling_of("L4", "fp32", catalog) == ""  # no product of its die fitted
    assert model.sibling_of("no-such-gpu", "fp32", catalog) == ""


def test_sibling_proxy_is_the_siblings_efficiency_on_the_rows_own_roofline(fitted, catalog):
    model, held, fit = fitted
    base = roofline(held, catalog)
    proxy = model.sibling_proxy_us(held, base, catalog)
    assert np.isfinite(proxy).all()
    on_sib = held.assign(device="A100-PCIE-40GB")
    sib_base = roofline(on_sib, catalog)
    kernel = model.predict(on_sib, sib_base, catalog) - model.host_us(on_sib, sib_base, catalog)
    own = base["time_us"].to_numpy()
    expected = np.maximum(kernel * own / sib_base["time_us"].to_numpy() + model.host_us(held, base, catalog),
                          model.floor_us(held, base, catalog))
    np.testing.assert_allclose(proxy, expected, rtol=1e-9)
    # both cards have the same FP32 peak: a compute-bound GEMM's kernel costs on the unseen card what it costs on
    # the sibling (only bandwidth-bound rows would move, with the 80 GB card's faster memory)
    comp = (base["compute_us"] >= base["memory_us"]).to_numpy() & (proxy > model.floor_us(held, base, catalog))
    assert comp.sum() > 100
    np.testing.assert_allclose((proxy - model.host_us(held, base, catalog))[comp], kernel[comp], rtol=1e-9)
    # rows of fitted devices and of devices without a fitted sibling: NaN
    assert np.isnan(model.sibling_proxy_us(fit.head(20), roofline(fit.head(20), catalog), catalog)).all()
    t4_as_l4 = fit[fit["device"] == "T4"].head(20).assign(device="L4")
    assert np.isnan(model.sibling_proxy_us(t4_as_l4, roofline(t4_as_l4, catalog), catalog)).all()


def test_blend_is_on_by_default_and_the_geometric_mean_of_trees_and_sibling(fitted, catalog):
    model, held, _ = fitted
    base = roofline(held, catalog)
    assert model.sibling_blend is True and GemmXGB().sibling_blend is True
    blend = model.predict(held, base, catalog)
    proxy = model.sibling_proxy_us(held, base, catalog)
    model.sibling_blend = False
    try:
        trees = model.predict(held, base, catalog)
    finally:
        model.sibling_blend = True
    # framework-timed rows mostly host dispatch, on a GPU whose sibling's GEMMs were framework-timed too, keep the trees
    short = model.host_bound_rows(held, base, catalog)
    np.testing.assert_array_equal(short, base["time_us"].to_numpy() < model.host_us(held, base, catalog))
    assert 0 < short.sum() < 0.5 * len(held)
    np.testing.assert_allclose(blend, np.where(short, trees, np.sqrt(trees * proxy)), rtol=1e-9)
    np.testing.assert_allclose(model.predict(held, base, catalog), blend)  # switched on again: the blend
    assert np.abs(np.log(blend / trees)).max() > 1e-3  # the rule moved these rows
    meas = held["time_us"].to_numpy()

    def geomean(pred: np.ndarray) -> float:
        return float(np.exp(np.mean(np.log(np.abs(pred / meas - 1) + 1e-9))))

    # loose sanity: priced from a measured sibling, the unseen card is not worse than 1.5x the trees' error
    assert geomean(blend) < 1.5 * geomean(trees)


def test_a_sibling_measured_kernel_only_prices_the_host_bound_rows_too(fitted, catalog):
    """The host-dispatch gate applies only where the sibling's own times carried a host (framework-timed GEMMs in
    the fit): a sibling timed kernel-only (DeepBench, XLA) blends every row."""
    model, held, fit = fitted
    base = roofline(held, catalog)
    assert model.framework_devices == {"A100-PCIE-40GB", "V100-PCIE-32GB", "T4"}  # NeuSight times through PyTorch
    assert model.host_bound_rows(held, base, catalog).any()
    saved = model.framework_devices
    model.framework_devices = saved - {"A100-PCIE-40GB"}
    try:
        assert not model.host_bound_rows(held, base, catalog).any()
        blend = model.predict(held, base, catalog)
        model.sibling_blend = False
        trees = model.predict(held, base, catalog)
    finally:
        model.framework_devices, model.sibling_blend = saved, True
    np.testing.assert_allclose(blend, np.sqrt(trees * model.sibling_proxy_us(held, base, catalog)), rtol=1e-9)
    # kernel-only rows pay no host dispatch (host_us 0): never host-bound, whatever the sibling
    kernel_only = held.assign(framework="xla")
    assert not model.host_bound_rows(kernel_only, roofline(kernel_only, catalog), catalog).any()


def test_the_rule_and_the_per_device_dtypes_are_saved_with_the_model(fitted, catalog, tmp_path):
    import json

    from hybrid.corrections.kernel_xgb import EXTENTS_FILE
    from hybrid.errors import InvalidInputError

    model, held, _ = fitted
    base = roofline(held, catalog)
    expected = model.predict(held, base, catalog)
    model.save(tmp_path / "on")
    model.sibling_blend = False
    try:
        trees = model.predict(held, base, catalog)
        model.save(tmp_path / "off")
    finally:
        model.sibling_blend = True
    on, off = GemmXGB.load(tmp_path / "on"), GemmXGB.load(tmp_path / "off")
    assert on.sibling_blend and not off.sibling_blend and on.device_dtypes == model.device_dtypes
    assert on.framework_devices == model.framework_devices
    np.testing.assert_allclose(on.predict(held, base, catalog), expected, rtol=1e-6)
    np.testing.assert_allclose(off.predict(held, base, catalog), trees, rtol=1e-6)
    # a model saved before the per-device dtypes: loads, and has no sibling to blend with
    doc = json.loads((tmp_path / "on" / EXTENTS_FILE).read_text())
    (tmp_path / "on" / EXTENTS_FILE).write_text(json.dumps({"extents": doc["extents"]}))
    old = GemmXGB.load(tmp_path / "on")
    assert not old.sibling_blend and old.device_dtypes == {}
    assert np.isnan(old.sibling_proxy_us(held, base, catalog)).all()
    # saved on 2026-12-02 before the framework devices: the sibling prices every row
    (tmp_path / "on" / EXTENTS_FILE).write_text(json.dumps({k: v for k, v in doc.items() if k != "framework_devices"}))
    mid = GemmXGB.load(tmp_path / "on")
    assert mid.sibling_blend and mid.framework_devices == set()
    assert not mid.host_bound_rows(held, base, catalog).any()
    (tmp_path / "on" / EXTENTS_FILE).write_text(json.dumps({**doc, "framework_devices": "A100-PCIE-40GB"}))
    with pytest.raises(InvalidInputError, match="framework devices"):
        GemmXGB.load(tmp_path / "on")
    (tmp_path / "on" / EXTENTS_FILE).write_text(json.dumps({**doc, "sibling_blend": "yes"}))
    with pytest.raises(InvalidInputError, match="sibling_blend"):
        GemmXGB.load(tmp_path / "on")


def test_calibrate_sibling_blend_flag_reaches_the_registered_model(shared_datasets, tmp_path):
    """``hybrid calibrate``: the rule is on by default, off with ``--no-sibling-blend``; logged as a parameter, saved
    with the GEMM model; refused with --base."""
    from test_cli_calibration import cli
    from test_tracking_support import neusight_table, write_csv

    from hybrid.tracking.registry import load_predictor

    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    csv = write_csv(neusight_table(shared_datasets, max_rows=300), tmp_path / "neusight.csv")
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    for name, flag, on in (("sib", [], True), ("trees", ["--no-sibling-blend"], False)):
        rc, _, err = cli(["calibrate", str(csv), "--name", name, "--tracking-uri", uri, "-q", "--no-lodo", *flag])
        assert rc == 0, err
        predictor = load_predictor(name, tracking_uri=uri).predictor
        gemm = next(c for c in predictor.corrections if isinstance(c, GemmXGB))
        assert gemm.sibling_blend is on and gemm.device_dtypes
        run = client.get_run(client.get_model_version(name, "1").run_id)
        assert run.data.params["sibling_blend"] == str(on).lower()
    rc, _, err = cli(["calibrate", str(csv), "--name", "sib2", "--base", "sib", "--tracking-uri", uri, "-q",
                      "--sibling-blend"])
    assert rc == 2 and "sibling_blend applies to a new calibration" in err
    for flag in ("--collective-transfer", "--no-collective-transfer"):  # either way: the base's collective model
        rc, _, err = cli(["calibrate", str(csv), "--name", "sib3", "--base", "sib", "--tracking-uri", uri, "-q",
                          flag])
        assert rc == 2 and "collective_transfer applies to a new calibration" in err, flag
