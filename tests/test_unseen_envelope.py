"""The envelope of GPUs a kernel correction never saw (``XGBCorrection.envelope_log_ratio``): an unseen GPU's
kernel is priced no further from its roofline than the model prices the same row on the least efficient fitted
GPU of that kind of op; fitted devices and CPUs are untouched; saved, loaded and dropped for an adapted device."""

from __future__ import annotations

import glob
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections.kernel_xgb import (
    ENVELOPE_FILE,
    ENVELOPE_POOLED_KEY,
    GemmXGB,
    PointwiseXGB,
    XGBParams,
    envelope_keys,
    fit_envelope,
)
from hybrid.data.bundle import bundle_catalog, load_bundle, load_project_bundles
from hybrid.errors import InvalidInputError
from hybrid.ops.families import family_array
from hybrid.ops.roofline import roofline

DATASETS = Path(__file__).resolve().parents[1] / "datasets"
UNSEEN = ["H20", "L40S", "A40", "A100-SXM4-80GB", "L4", "B200"]


@pytest.fixture(scope="module")
def h200():
    """The pointwise correction fitted on the H200 profile (its only GPU) and the CPU profile."""
    paths = [DATASETS / "H200", DATASETS / "cpu-amd-epyc-1c"]
    catalog = bundle_catalog(paths)
    gpu, cpu = (load_bundle(p)[0] for p in paths)
    table = pd.concat([gpu, cpu], ignore_index=True, sort=False)
    base = roofline(table, catalog)
    model = PointwiseXGB(XGBParams(seed=0, n_estimators=150)).fit(table, base, catalog)
    return model, table, base, catalog


def _decode(devices: list[str], heads: float = 16.0, kv_heads: float = 2.0) -> pd.DataFrame:
    """A bf16 GQA decode step (Llama-3-70B at TP 4: 16 query heads over 2 KV heads), batch 64, 2112 keys."""
    return pd.DataFrame({"device": devices, "op": "attention", "dtype": "bf16", "batch": 64.0, "heads": heads,
                         "kv_heads": kv_heads, "q_len": 1.0, "kv_len": 2112.0, "head_dim": 128.0, "causal": False})


def _kernel_ratio(model, rows, base, catalog) -> np.ndarray:
    """(prediction - the host dispatch it includes) / roofline, per row."""
    pred = model.predict(rows, base, catalog)
    return (pred - model.host_part_us(rows, base, catalog)) / base["time_us"].to_numpy()


def test_envelope_keys_name_family_dtype_and_bound(catalog):
    rows = pd.concat([_decode(["H20"]), _decode(["H20"]).assign(dtype="float16"),
                      pd.DataFrame({"device": ["H100-SXM"] * 2, "op": "gemm", "dtype": ["bf16", "fp32"],
                                    "m": [8192.0, 1.0], "n": [8192.0, 4096.0], "k": [8192.0, 4096.0]})],
                     ignore_index=True)
    codes, keys = envelope_keys(rows, roofline(rows, catalog))
    # fp16 and bf16: one kind of op (the same 16-bit tensor-core path)
    assert [keys[c] for c in codes] == ["attention|fp16/bf16|memory", "attention|fp16/bf16|memory",
                                        "gemm|fp16/bf16|compute", "gemm|fp32|memory"]
    assert len(keys) == 3


def test_fit_records_the_fitted_gpus_of_each_kind_of_op(h200):
    model, table, base, catalog = h200
    assert model.envelope_devices["attention|fp16/bf16|memory"] == ["H200"]
    # CPUs neither bound GPUs nor are bounded: the CPU profile is in the fit but in no list
    assert all(devs == ["H200"] for devs in model.envelope_devices.values())
    # a kind of op needs ENVELOPE_MIN_ROWS rows on a GPU
    assert fit_envelope(table, base, catalog, min_rows=10**6) == {}


def test_unseen_gpus_priced_no_further_from_roofline_than_the_fitted_gpu(h200):
    model, _, _, catalog = h200
    rows = _decode(UNSEEN + ["H200"])
    base = roofline(rows, catalog)
    model.use_envelope = False
    try:
        without = _kernel_ratio(model, rows, base, catalog)
    finally:
        model.use_envelope = True
    with_envelope = _kernel_ratio(model, rows, base, catalog)
    fitted = with_envelope[-1]
    assert without[0] > 5 * fitted  # the H20, priced by the transfer booster: ~20x its memory bound
    # rows whose roofline is under the host dispatch the prediction includes are left to the trees (the B200's
    # 21 us decode under ~29 us of learned dispatch: the host, not the GPU, sets its time); every other unseen GPU
    # is bounded by the fitted one
    host_bound = base["time_us"].to_numpy() < model.host_part_us(rows, base, catalog)
    assert host_bound[:-1].sum() <= 1 and not host_bound[-1]
    assert np.isinf(model.envelope_log_ratio(rows, base, catalog)[host_bound]).all()
    bounded = with_envelope[:-1][~host_bound[:-1]]
    assert len(bounded) >= 5 and (bounded <= fitted * (1 + 1e-6)).all(), dict(
        zip(rows["device"], with_envelope.round(2), strict=True))
    assert with_envelope[-1] == without[-1]  # the fitted GPU itself is not touched


def test_seen_devices_are_not_touched(h200):
    model, table, base, catalog = h200
    on = model.predict(table, base, catalog)
    model.use_envelope = False
    try:
        off = model.predict(table, base, catalog)
    finally:
        model.use_envelope = True
    np.testing.assert_array_equal(on, off)


def test_host_bound_rows_are_left_to_the_trees(h200):
    """A row whose roofline is under the host dispatch the prediction includes (eager timings): the host, not the
    GPU, sets its time, and the measured machines' hosts say nothing of an unseen one's."""
    model, _, _, catalog = h200
    rows = _decode(["H20"]).assign(batch=1.0)
    base = roofline(rows, catalog)
    host = model.host_part_us(rows, base, catalog)
    assert base["time_us"].iloc[0] < host[0]  # ~5 us of KV cache under ~29 us of learned dispatch
    assert np.isinf(model.envelope_log_ratio(rows, base, catalog)).all()


def test_envelope_is_saved_loaded_and_older_models_have_none(h200, tmp_path):
    model, _, _, catalog = h200
    rows = _decode(UNSEEN)
    base = roofline(rows, catalog)
    model.save(tmp_path / "m")
    assert json.loads((tmp_path / "m" / ENVELOPE_FILE).read_text())["envelope_devices"] == model.envelope_devices
    loaded = PointwiseXGB.load(tmp_path / "m")
    assert loaded.envelope_devices == model.envelope_devices
    np.testing.assert_allclose(loaded.predict(rows, base, catalog), model.predict(rows, base, catalog), rtol=1e-6)
    # a model saved before the envelope: none, the trees alone (as before)
    shutil.copytree(tmp_path / "m", tmp_path / "old")
    (tmp_path / "old" / ENVELOPE_FILE).unlink()
    old = PointwiseXGB.load(tmp_path / "old")
    assert old.envelope_devices == {}
    model.use_envelope = False
    try:
        np.testing.assert_allclose(old.predict(rows, base, catalog), model.predict(rows, base, catalog), rtol=1e-6)
    finally:
        model.use_envelope = True
    (tmp_path / "old" / ENVELOPE_FILE).write_text(json.dumps({"envelope_devices": {"attention|bf16|memory": 3}}))
    with pytest.raises(InvalidInputError, match="envelope"):
        PointwiseXGB.load(tmp_path / "old")


def test_an_adapted_device_is_not_bounded(h200):
    """Few-shot rows of a GPU say how it runs: the grown model (which answers that GPU only) has no envelope."""
    model, table, base, catalog = h200
    att = table[(base["family"] == "attention").to_numpy()].head(40)
    adapted_rows = att.assign(device="H20")
    grown = model.continue_boosting(adapted_rows, roofline(adapted_rows, catalog), catalog, rounds=5)
    assert grown.envelope_devices == {}
    seen = model.continue_boosting(att, roofline(att, catalog), catalog, rounds=5)
    assert seen.envelope_devices == model.envelope_devices


def test_decode_gemv_on_unseen_gpus_bounded_by_the_fitted_hopper_gpus(shared_datasets):
    """Decode GEMVs (fp16, batch 1) on GPUs the GEMM correction never saw. Fitted on the H100 / H200 profiles and
    NeuSight's fp32 GEMMs (T4, P4, ...), the trees split the L40S's bandwidth per SM with the 70 W T4 and priced
    the GEMV ~2.4x its roofline; the envelope holds it to what the model prices it at on the H100 and H200."""
    gpu, catalog = load_project_bundles("gpu")
    from hybrid.data.importers.neusight import import_neusight

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ns = import_neusight(sorted(glob.glob(str(shared_datasets / "neusight/test-dev/*.csv"))), catalog=catalog)
    table = pd.concat([gpu, ns], ignore_index=True, sort=False)
    table = table[family_array(table["op"]) == "gemm"].reset_index(drop=True)
    model = GemmXGB(XGBParams(seed=0, n_estimators=150)).fit(table, roofline(table, catalog), catalog)
    # least efficient first (fit_envelope: the order only saves work): the H200 VM measured these GEMVs slower
    assert model.envelope_devices["gemm|fp16/bf16|memory"] == ["H200", "H100-SXM"]
    rows = pd.DataFrame({"device": ["L40S", "A40", "L4", "A10G", "H100-SXM", "H200"], "op": "gemm",
                         "dtype": "fp16", "m": 1.0, "n": 28672.0, "k": 4096.0})
    base = roofline(rows, catalog)
    with_envelope = _kernel_ratio(model, rows, base, catalog)
    model.use_envelope = False
    without = _kernel_ratio(model, rows, base, catalog)
    fitted = with_envelope[-2:].max()
    # the margin beyond the fitted GPUs (fit_envelope_margins): these GEMVs' measured rows are host-bound, so the
    # kind has no spread of its own and takes the median of the kinds that have (fp32 GEMMs over 8 GPUs, ...)
    margins = model.envelope_margins
    assert "gemm|fp16/bf16|memory" not in margins and margins["gemm|fp32|compute"] > 1.0
    margin = margins[ENVELOPE_POOLED_KEY]
    assert 1.05 < margin < 1.5, margins
    assert margin == np.median([v for k, v in margins.items() if k != ENVELOPE_POOLED_KEY])
    assert without[0] > 1.2 * fitted * margin  # the L40S above both Hopper GPUs and the margin without the envelope
    assert (with_envelope[:4] <= fitted * margin * (1 + 1e-6)).all(), with_envelope
    np.testing.assert_allclose(with_envelope[:4].max(), fitted * margin, rtol=1e-6)
    np.testing.assert_array_equal(with_envelope[-2:], without[-2:])


@pytest.mark.parametrize("call_rows", [0, 17, 1 << 20])
def test_pruned_bound_gives_the_same_predictions_as_the_full_one(h200, call_rows, monkeypatch):
    """Predicting skips the fitted GPUs a row is already under the bound of: the answer is min(trees, full bound),
    whether every fitted GPU is its own round (``call_rows`` 0), the last two rounds are priced in one call (17:
    22 groups in the first round, 17 and 15 left in the next two) or all of them are (a call worth ~1e6 rows)."""
    from hybrid.corrections import kernel_xgb
    from hybrid.corrections.kernel_xgb import LOG_RATIO_CLIP

    monkeypatch.setattr(kernel_xgb, "ENVELOPE_CALL_ROWS", call_rows)
    model, _, _, catalog = h200
    rows = pd.concat([_decode(UNSEEN).assign(batch=float(b), kv_len=float(kv))
                      for b in (1, 8, 64, 256) for kv in (512, 4096)], ignore_index=True)
    rows = pd.concat([rows, rows.assign(dtype="fp32"), rows.assign(q_len=rows["kv_len"], causal=True)],
                     ignore_index=True)
    base = roofline(rows, catalog)
    model.use_envelope = False
    try:
        raw = model.predict_log_ratio(rows, base, catalog)
    finally:
        model.use_envelope = True
    fitted = model.envelope_devices
    # several bounding GPUs per kind of op, so that rows leave the loop at different GPUs (the booster knows the
    # H200 only; the others are priced through its device features, which is all this test needs)
    model.envelope_devices = {k: ["A100-PCIE-40GB", "H100-SXM", *v] for k, v in fitted.items()}
    try:
        full = model.envelope_log_ratio(rows, base, catalog)
        got = model.predict_log_ratio(rows, base, catalog)
    finally:
        model.envelope_devices = fitted
    assert (got < raw - 1e-9).sum() > 10 and np.isfinite(full).sum() < len(rows)  # some bounded, some not
    np.testing.assert_array_equal(got, np.clip(np.minimum(raw, full), *LOG_RATIO_CLIP))


def test_rows_sharing_a_shape_across_unseen_gpus_get_their_own_bound(h200):
    """A shape asked on several unseen GPUs (a sweep over hardware) is priced once per fitted GPU: the bound of each
    row is the one it gets alone, and a device's own roofline and dispatch still set it."""
    model, _, _, catalog = h200
    rows = pd.concat([_decode(UNSEEN).assign(batch=float(b)) for b in (1, 64, 256)], ignore_index=True)
    base = roofline(rows, catalog)
    together = model.envelope_log_ratio(rows, base, catalog)
    alone = np.concatenate([model.envelope_log_ratio(rows.iloc[[i]].reset_index(drop=True),
                                                     base.iloc[[i]].reset_index(drop=True), catalog)
                            for i in range(len(rows))])
    assert np.isfinite(together).sum() >= len(UNSEEN)  # bounded rows on several devices
    np.testing.assert_allclose(together, alone, rtol=1e-12)
    # the same shape on two unseen GPUs with different rooflines: different bounds
    fin = np.isfinite(together)
    assert len(np.unique(np.round(together[fin], 9))) > 1


def test_a_callers_own_columns_do_not_split_shared_shapes(h200):
    """Columns outside the schema (a row id) are not read by the features: rows that differ only in them and in
    their unseen device share one pricing, and get the same bound as without the column."""
    model, _, _, catalog = h200
    rows = pd.concat([_decode(UNSEEN).assign(batch=float(b)) for b in (1, 64)], ignore_index=True)
    base = roofline(rows, catalog)
    plain = model.envelope_log_ratio(rows, base, catalog)
    with_id = model.envelope_log_ratio(rows.assign(row_id=np.arange(len(rows))), base, catalog)
    np.testing.assert_array_equal(plain, with_id)


def test_an_envelope_saved_with_fp16_and_bf16_apart_loads_as_one_kind(h200, tmp_path):
    """Models saved before fp16 and bf16 were one kind of op list them apart: loading merges their GPUs, and the
    loaded model bounds an unseen GPU's fp16 row by a GPU that had only bf16 rows of it."""
    from hybrid.corrections.kernel_xgb import envelope_classes

    assert envelope_classes({"gemm|fp16|compute": ["A100-SXM4-80GB", "T4"], "gemm|bf16|compute": ["H100-SXM", "T4"],
                             "gemm|fp32|memory": ["T4"]}) == {
        "gemm|fp16/bf16|compute": ["A100-SXM4-80GB", "T4", "H100-SXM"], "gemm|fp32|memory": ["T4"]}
    model, _, _, catalog = h200
    model.save(tmp_path / "m")
    saved = json.loads((tmp_path / "m" / ENVELOPE_FILE).read_text())
    split = {k.replace("fp16/bf16", "bf16"): v for k, v in saved["envelope_devices"].items()}
    assert split != saved["envelope_devices"]
    (tmp_path / "m" / ENVELOPE_FILE).write_text(json.dumps({**saved, "envelope_devices": split}))
    loaded = PointwiseXGB.load(tmp_path / "m")
    assert loaded.envelope_devices == model.envelope_devices
    rows = _decode(UNSEEN).assign(dtype="fp16")  # the H200 profile's attention rows are bf16
    base = roofline(rows, catalog)
    assert np.isfinite(loaded.envelope_log_ratio(rows, base, catalog)).any()


def test_margin_widens_the_bound_by_its_factor(h200, tmp_path):
    """The bound is the fitted GPUs' kernel time per roofline times the kind's margin; with one fitted GPU the fit
    measures no spread (margin 1); margins are saved and loaded, and a bad saved margin is refused."""
    model, _, _, catalog = h200
    assert model.envelope_margins == {ENVELOPE_POOLED_KEY: 1.0}  # one GPU: nothing to take out
    rows = _decode(["H20", "H200"])
    base = roofline(rows, catalog)
    tight = _kernel_ratio(model, rows, base, catalog)
    model.envelope_margins = {ENVELOPE_POOLED_KEY: 2.0}
    try:
        wide = _kernel_ratio(model, rows, base, catalog)
        model.save(tmp_path / "m")
    finally:
        model.envelope_margins = {ENVELOPE_POOLED_KEY: 1.0}
    np.testing.assert_allclose(tight[0], tight[1], rtol=1e-6)  # the H20 held to the H200's price
    np.testing.assert_allclose(wide[0], 2.0 * tight[1], rtol=1e-6)  # ... times the margin
    assert wide[1] == tight[1]  # the fitted GPU is not touched
    loaded = PointwiseXGB.load(tmp_path / "m")
    assert loaded.envelope_margins == {ENVELOPE_POOLED_KEY: 2.0}
    saved = json.loads((tmp_path / "m" / ENVELOPE_FILE).read_text())
    # an envelope saved before margins: none, the fitted GPUs' own bound (as before)
    (tmp_path / "m" / ENVELOPE_FILE).write_text(json.dumps({k: v for k, v in saved.items() if k != "margins"}))
    old = PointwiseXGB.load(tmp_path / "m")
    assert old.envelope_margins == {}
    np.testing.assert_allclose(_kernel_ratio(old, rows, base, catalog), tight, rtol=1e-6)
    (tmp_path / "m" / ENVELOPE_FILE).write_text(json.dumps({**saved, "margins": {ENVELOPE_POOLED_KEY: 0.5}}))
    with pytest.raises(InvalidInputError, match="margins"):
        PointwiseXGB.load(tmp_path / "m")


def test_margin_measures_how_far_a_fitted_gpu_sits_beyond_the_others():
    """Two fitted GPUs: the H100 profile, and the H200 profile with the time of every kernel of over 20 us of
    roofline tripled (a GPU three times less efficient than its roofline says; the tiny, host-bound rows that
    the dispatch is fitted on left alone). Taking the slow one out, the H100 alone bounds its rows ~3x short: the
    margins of the kinds both have grow by about that factor over the untouched fit's."""
    paths = [DATASETS / "H100-SXM", DATASETS / "H200"]
    catalog = bundle_catalog(paths)
    h100, h200 = (load_bundle(p)[0] for p in paths)
    big = roofline(h200, catalog)["time_us"].to_numpy() > 20.0

    def margins(slow: float) -> dict[str, float]:
        table = pd.concat([h100, h200.assign(time_us=np.where(big, h200["time_us"] * slow, h200["time_us"]))],
                          ignore_index=True, sort=False)
        model = PointwiseXGB(XGBParams(seed=0, n_estimators=150)).fit(table, roofline(table, catalog), catalog)
        return model.envelope_margins

    plain, slow = margins(1.0), margins(3.0)
    both = [k for k in plain if k != ENVELOPE_POOLED_KEY and k in slow]
    assert both, plain
    assert all(v >= 1.0 for v in plain.values())
    for k in both:
        assert slow[k] > 2.0 * plain[k], (k, plain[k], slow[k])
        assert slow[k] < 4.0 * plain[k], (k, plain[k], slow[k])
