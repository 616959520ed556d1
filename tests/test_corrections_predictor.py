"""HybridPredictor: bad input, dispatch and fallbacks, few-shot adaptation, and the embedding model fitted on
embedding-bag times measured here with real PyTorch on the CPU."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections import EmbeddingXGB, GemmXGB, HybridPredictor, XGBParams
from hybrid.errors import HybridError, InvalidInputError, UnknownDeviceError
from hybrid.reports.metrics import error_summary


@pytest.fixture(scope="module")
def gemm_rows(shared_datasets, catalog) -> pd.DataFrame:
    from hybrid.data.importers import import_paths

    root = shared_datasets / "neusight" / "scripts" / "asplos" / "data" / "dataset" / "train" / "collect" / "bmm"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = import_paths("neusight", root, catalog=catalog)
    return table.sample(frac=1.0, random_state=0).groupby("device").head(1200).reset_index(drop=True)


def test_bad_input_raises_clear_errors(catalog, gemm_rows):
    pred = HybridPredictor(catalog, [GemmXGB(XGBParams(n_estimators=20))])
    with pytest.raises(InvalidInputError, match="empty"):
        pred.fit(gemm_rows.iloc[:0])
    with pytest.raises(InvalidInputError, match="time_us"):
        pred.fit(gemm_rows.drop(columns="time_us"))
    nan = gemm_rows.iloc[:50].copy()
    nan.loc[nan.index[3], "m"] = np.nan
    with pytest.raises(HybridError, match="'m'"):
        pred.fit(nan)
    unknown = gemm_rows.iloc[:5].assign(device="Quantum-GPU-9000")
    with pytest.raises(UnknownDeviceError, match="Quantum-GPU-9000"):
        HybridPredictor.roofline_only(catalog).predict(unknown)
    neg = gemm_rows.iloc[:5].copy()
    neg.loc[neg.index[0], "k"] = -4
    with pytest.raises(HybridError, match="k"):
        HybridPredictor.roofline_only(catalog).predict(neg)
    with pytest.raises(InvalidInputError, match="strategy"):
        pred.adapt(gemm_rows.iloc[:5], strategy="magic")


def test_roofline_only_and_unfitted_families_fall_back(catalog, gemm_rows):
    query = pd.DataFrame({"device": ["T4", "T4"], "op": ["layernorm", "all_reduce"], "rows": [1024, np.nan],
                          "hidden": [4096, np.nan], "size_bytes": [np.nan, 1 << 20], "n_ranks": [np.nan, 4]})
    pred = HybridPredictor(catalog, [GemmXGB(XGBParams(n_estimators=30))]).fit(gemm_rows)
    out = pred.predict(query)
    assert list(out["method"]) == ["roofline", "alpha-beta"]
    np.testing.assert_allclose(out["time_us"], out["roofline_us"])
    few = HybridPredictor(catalog).fit(gemm_rows.iloc[:30])  # below every correction's min_rows
    assert not any(info["fitted"] for info in few.fit_info.values())
    assert "need" in few.fit_info["kernel-xgb-gemm"]["reason"]


def test_rows_of_a_kind_of_processor_the_fit_never_measured_are_said(catalog, gemm_rows, cpu_profile):
    """Kernel trees fitted on GPUs only, asked for a CPU: the prediction warns (TransferWarning naming the device
    and the correction) and the CPU row's interval is not called calibrated; the GPU rows stay calibrated."""
    from hybrid.errors import TransferWarning
    from hybrid.hardware.catalog import Catalog

    _, cpu_cat = cpu_profile
    both = Catalog({**catalog.devices, **cpu_cat.devices}, catalog.systems)
    pred = HybridPredictor(both, [GemmXGB(XGBParams(n_estimators=30))]).fit(gemm_rows)
    pred.calibrate_intervals(gemm_rows, max_devices=0)
    cpu = next(k for k, d in cpu_cat.devices.items() if d.kind == "cpu")
    query = gemm_rows.iloc[:3].drop(columns="time_us").reset_index(drop=True)
    query.loc[1, "device"] = cpu
    with pytest.warns(TransferWarning, match=rf"{cpu} \(a CPU: kernel-xgb-gemm fitted on GPUs only\)"):
        out = pred.predict(query)
    assert list(out["interval_calibrated"]) == [True, False, True]
    with warnings.catch_warnings():
        warnings.simplefilter("error", TransferWarning)
        pred.predict(query.drop(index=1))  # GPU rows alone: nothing to say


def test_few_shot_adaptation_improves_held_out_gpu(catalog, gemm_rows, tmp_path):
    held = "P4"
    base = HybridPredictor(catalog, [GemmXGB(XGBParams(n_estimators=120, max_depth=6, learning_rate=0.1))])
    base.fit(gemm_rows[gemm_rows["device"] != held])
    target = gemm_rows[gemm_rows["device"] == held]
    shots, test = target.iloc[:20], target.iloc[20:]
    err0 = error_summary(base.predict_time(test), test["time_us"])["geomean_pct"]
    for strategy in ("residual", "scale", "boost", "scale-trees", "auto"):
        adapted = base.adapt(shots, strategy=strategy)
        err = error_summary(adapted.predict_time(test), test["time_us"])["geomean_pct"]
        assert err < err0 * 1.05, (strategy, err, err0)
        # the base predictor is untouched; other GPUs are not affected
        other = gemm_rows[gemm_rows["device"] == "T4"].iloc[:200]
        np.testing.assert_allclose(adapted.predict_time(other), base.predict_time(other))
    residual = base.adapt(shots, strategy="residual")
    assert held in residual.offsets["kernel-xgb-gemm"]
    boosted = base.adapt(shots, strategy="boost")  # per-device extra trees, no scale on top
    assert ("kernel-xgb-gemm", held) in boosted.device_models and held not in boosted.offsets.get("kernel-xgb-gemm", {})
    trees = base.adapt(shots, strategy="scale-trees")  # robust scale, plus trees on its residuals from 20 rows
    assert ("kernel-xgb-gemm", held) in trees.device_models and held in trees.offsets["kernel-xgb-gemm"]
    auto = base.adapt(shots)  # default: scale, shift or both (chosen by cross-validation), plus those trees
    state = auto.adaptation()["kernel-xgb-gemm"][held]
    assert ("kernel-xgb-gemm", held) in auto.device_models and state["form"] in ("scale", "shift", "affine")
    few = base.adapt(shots.iloc[:10])  # below 20 rows: the chosen form alone
    assert not few.device_models and few.adaptation()["kernel-xgb-gemm"][held]["rows"] == 10
    for i, adapted in enumerate((residual, boosted, auto)):
        adapted.save(tmp_path / f"adapted{i}")
        again = HybridPredictor.load(tmp_path / f"adapted{i}", catalog=catalog)
        np.testing.assert_array_equal(again.predict_time(test), adapted.predict_time(test))
        assert again.summary()["adapted_devices"] == [held]


def test_robust_offset_resists_an_outlier_and_shrinks_towards_one():
    from hybrid.corrections.adapt import SHRINK, residual_offsets, robust_offset

    r = np.array([0.30, 0.32, 0.28, 0.31, 2.5])  # four rows agree on +0.3, one shape is far off
    robust = robust_offset(r, shrink=0.0)
    assert abs(robust - 0.30) < 0.1 and robust_offset(r) < robust  # shrunk towards 0 (scale 1)
    mean = residual_offsets(r, pd.Series(["g"] * 5), shrink=0.0)["g"]
    assert mean > 0.7  # the plain mean follows the outlier
    # many rows: the shrinkage fades; no rows: no scale
    many = np.full(200, 0.2)
    assert robust_offset(many) == pytest.approx(0.2 * 200 / (200 + SHRINK))
    assert robust_offset(np.array([np.nan])) == 0.0


def _time_embedding_bags(catalog):
    torch = pytest.importorskip("torch")
    from hybrid.hardware.cpu import describe_local_cpu

    torch.manual_seed(0)
    torch.set_num_threads(1)
    dev = describe_local_cpu()
    cat = catalog.with_device(dev)
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(70):
        n = int(rng.choice([1_000, 10_000, 100_000, 400_000]))
        dim = int(rng.choice([16, 32, 64, 128]))
        batch = int(rng.choice([64, 256, 1024]))
        pool = int(rng.choice([1, 4, 16, 32]))
        weight = torch.randn(n, dim)
        idx = torch.randint(0, n, (batch * pool,))
        offsets = torch.arange(0, batch * pool, pool)
        times = []
        for _ in range(7):
            t0 = time.perf_counter()
            torch.nn.functional.embedding_bag(idx, weight, offsets, mode="sum")
            times.append(time.perf_counter() - t0)
        rows.append({"device": dev.key, "op": "embedding_bag", "dtype": "fp32", "direction": "fwd",
                     "num_tables": 1, "num_embeddings": n, "embedding_dim": dim, "pooling_factor": pool,
                     "batch_size": batch, "index_dist": "uniform", "time_us": float(np.median(times[2:]) * 1e6)})
    return pd.DataFrame(rows), cat


def test_embedding_model_on_live_cpu_lookups_round_trips(catalog, tmp_path):
    """Live timings (this machine, any load): the fit/predict/save/load pipeline works on them. Accuracy is
    not asserted here: on a shared, loaded machine the timings of 7 repeats are too noisy for a fixed bound
    (this assertion failed once in a full run); it is asserted on the committed profile below."""
    table, cat = _time_embedding_bags(catalog)
    train, test = table.iloc[:50], table.iloc[50:]
    pred = HybridPredictor(cat, [EmbeddingXGB()]).fit(train)
    out = pred.predict(test)
    assert set(out["method"]) == {"embedding-xgb"}
    assert np.isfinite(out["time_us"]).all() and (out["time_us"] > 0).all()
    pred.save(tmp_path / "emb")
    # the local CPU is not in the packaged catalog: the saved bundle carries it
    loaded = HybridPredictor.load(tmp_path / "emb")
    np.testing.assert_array_equal(loaded.predict_time(test), pred.predict_time(test))


def test_embedding_model_beats_roofline_on_measured_cpu_lookups(cpu_profile):
    """Deterministic: real PyTorch embedding-bag times measured on a quiet CPU and committed
    (``datasets/cpu-amd-epyc-1c``); XGBoost is seeded and single-threaded, so the numbers are reproducible."""
    table, cat = cpu_profile
    fwd = table[table["direction"] == "fwd"].reset_index(drop=True)
    assert len(fwd) >= 60
    test = (np.arange(len(fwd)) % 4 == 0)
    pred = HybridPredictor(cat, [EmbeddingXGB()]).fit(fwd[~test])
    out = pred.predict(fwd[test])
    assert set(out["method"]) == {"embedding-xgb"}
    corrected = error_summary(out["time_us"], fwd.loc[test, "time_us"])["geomean_pct"]
    roof = error_summary(out["roofline_us"], fwd.loc[test, "time_us"])["geomean_pct"]
    assert corrected < roof / 2, (corrected, roof)
    assert corrected < 40.0
    again = HybridPredictor(cat, [EmbeddingXGB()]).fit(fwd[~test]).predict_time(fwd[test])
    np.testing.assert_allclose(again, out["time_us"].to_numpy(), rtol=1e-6)


@pytest.fixture(scope="module")
def cpu_profile():
    from hybrid.data.bundle import load_bundle
    from hybrid.data.paths import project_datasets_dir

    bundle = project_datasets_dir() / "cpu-amd-epyc-1c"
    if not (bundle / "measurements.csv").is_file():
        from conftest import skip_or_fail

        skip_or_fail("committed CPU profile bundle absent")
    table, cat = load_bundle(bundle)
    table = table[table["op"] == "embedding_bag"].reset_index(drop=True)
    return table.assign(direction=table["direction"].fillna("fwd")), cat


def test_dense_gradient_reference_extrapolates_to_larger_tables(cpu_profile):
    table, cat = cpu_profile
    cut = float(np.quantile(table["num_embeddings"], 0.75))
    big = (table["num_embeddings"] > cut).to_numpy()
    dense = (table["variant"].astype(str) == "dense_sgd").to_numpy()
    assert (big & dense).sum() >= 5
    errs = {}
    for version in (1, 2):
        pred = HybridPredictor(cat, [EmbeddingXGB(feature_version=version, reference="roofline")]).fit(table[~big])
        test = table[big & dense]
        errs[version] = error_summary(pred.predict_time(test), test["time_us"])["geomean_pct"]
    # v1 saturates at the largest training tables; v2's reference grows with the table (measured 69% vs 10%)
    assert errs[2] < 30.0 and errs[2] < errs[1] / 2, errs


def test_unseen_embedding_variant_is_predicted_gracefully(cpu_profile):
    from hybrid.corrections.features import optimizer_state_words

    table, cat = cpu_profile
    pred = HybridPredictor(cat, [EmbeddingXGB(XGBParams(n_estimators=60, max_depth=4))]).fit(table)
    new = table[table["variant"].astype(str) == "sparse_sgd"].head(30).assign(variant="sparse_adagrad")
    assert (optimizer_state_words(new) == 1.0).all()
    assert (optimizer_state_words(new.assign(direction="fwd")) == 0.0).all()
    out = pred.predict(new)
    assert set(out["method"]) == {"embedding-xgb"}
    assert np.isfinite(out["time_us"]).all() and (out["time_us"] > 0).all()


def test_identical_rows_are_predicted_once_with_unchanged_answers(gemm_rows):
    """``predict`` reduces a table with repeated rows to its distinct rows; every column of the answer, the
    intervals included, is identical to the row-by-row path (``_predict_rows``, the path before the change),
    computed here in the same run on a mix of families, seen and unseen devices and a measured system."""
    from hybrid.corrections import PointwiseXGB
    from hybrid.corrections.collective_sigmoid import CollectiveSigmoid
    from hybrid.corrections.predictor import distinct_rows
    from hybrid.data.bundle import load_bundle
    from hybrid.data.paths import project_datasets_dir

    bundle = project_datasets_dir() / "cpu-amd-epyc-1c"
    if not (bundle / "measurements.csv").is_file():
        from conftest import skip_or_fail

        skip_or_fail("committed CPU profile bundle absent")
    cpu, cat = load_bundle(bundle)
    train = pd.concat([gemm_rows, cpu], ignore_index=True, sort=False)
    small = XGBParams(n_estimators=25, max_depth=4)
    pred = HybridPredictor(cat, [GemmXGB(small), PointwiseXGB(small), EmbeddingXGB(XGBParams(n_estimators=25)),
                                 CollectiveSigmoid()])
    pred.fit(train, intervals=True)
    pool = train.groupby("op").head(40)  # every op, few distinct shapes: repeated as in a model's layers
    query = pool.sample(3000, replace=True, random_state=1).drop(columns="time_us").reset_index(drop=True)
    gpu = ~query["device"].astype(str).str.startswith("cpu")
    query.loc[gpu & (np.arange(len(query)) % 4 == 0), "device"] = "H100-SXM"  # a GPU the model never saw
    query.index = query.index * 3 + 7  # a non-default index is kept
    found = distinct_rows(query)
    assert found is not None and len(found[0]) < len(query) / 2
    out = pred.predict(query)
    old = pred._predict_rows(query, True)
    assert set(out["method"]) >= {"kernel-xgb", "embedding-xgb", "collective-sigmoid"}
    assert out["time_us_low"].notna().all()
    pd.testing.assert_frame_equal(out, old, check_exact=True)
    pd.testing.assert_frame_equal(pred.predict(query, intervals=False), pred._predict_rows(query, False),
                                  check_exact=True)
    # measured columns do not make rows distinct: a measured table is predicted exactly as the query
    measured = query.assign(time_us=np.arange(len(query), dtype=float) + 1.0, repeats=5)
    pd.testing.assert_frame_equal(pred.predict(measured), out, check_exact=True)
    # rows that are all distinct take the row-by-row path; errors name the same row as without de-duplication
    assert distinct_rows(query.assign(row_id=np.arange(len(query)))) is None
    bad = query.copy()
    bad.loc[bad.index[gpu.to_numpy()][5], "k"] = -4
    with pytest.raises(HybridError) as dedup_err:
        pred.predict(bad)
    with pytest.raises(HybridError) as row_err:
        pred._predict_rows(bad, True)
    assert str(dedup_err.value) == str(row_err.value)
    # an object column where 1 and 1.0 would compare equal is not merged
    mixed = pd.DataFrame({"a": pd.Series([1, 1.0] * 40, dtype=object), "b": ["x"] * 80})
    assert distinct_rows(mixed) is None
    assert distinct_rows(mixed.assign(a="s")) is not None


def test_method_comes_from_each_correction_not_a_special_case(catalog, gemm_rows):
    """The predictor asks every correction which model answered each row (``predict_with_source``): a
    correction made of two models reports both names, with no type check in the predictor; rows a correction
    leaves NaN fall back to the roofline."""
    from hybrid.corrections.base import Correction

    class TwoModels(Correction):
        name = "two-models"
        families = ("gemm",)
        min_rows = 1

        def fit(self, table, baseline, catalog):
            self._fitted = True
            return self

        def predict(self, table, baseline, catalog):
            return self.predict_with_source(table, baseline, catalog)[0]

        def predict_with_source(self, table, baseline, catalog):
            m = table["m"].to_numpy(dtype=np.float64)
            t = np.where(m % 2 == 0, 2.0, np.where(m % 3 == 0, np.nan, 3.0)) * baseline["time_us"].to_numpy()
            return t, np.where(m % 2 == 0, "model-even", np.where(np.isfinite(t), "model-odd", "")).astype(object)

        def save(self, directory):
            pass

        @classmethod
        def load(cls, directory):
            return cls()

        def describe(self):
            return {}

    rows = gemm_rows.iloc[:300].reset_index(drop=True)
    out = HybridPredictor(catalog, [TwoModels()]).fit(rows).predict(rows, intervals=False)
    m = rows["m"].to_numpy()
    even, nan = m % 2 == 0, (m % 2 != 0) & (m % 3 == 0)
    assert even.any() and nan.any() and (~even & ~nan).any()
    assert (out["method"][even] == "model-even").all() and (out["method"][~even & ~nan] == "model-odd").all()
    assert (out["method"][nan] == "roofline").all()
    np.testing.assert_allclose(out["time_us"][even], 2 * out["roofline_us"][even])
    np.testing.assert_allclose(out["time_us"][nan], out["roofline_us"][nan])
    # a correction with one model names itself through the base-class default
    g = GemmXGB(XGBParams(n_estimators=5)).fit(*_prepared(catalog, rows))
    t, src = g.predict_with_source(*_prepared(catalog, rows))
    assert np.isfinite(t).all() and set(src) == {"kernel-xgb"}


def _prepared(catalog, rows):
    from hybrid.ops.roofline import roofline

    return rows, roofline(rows, catalog), catalog


def test_save_replaces_only_a_saved_predictor(tmp_path):
    """``save`` replaces its directory whole: on a directory of something else it deleted it, and on a file it
    put a directory in its place (leaving the file hidden beside it). Both are refused now, untouched; an empty
    directory and an earlier save are replaced."""
    table = pd.read_csv(Path(__file__).resolve().parents[1] / "datasets" / "H100-SXM" / "measurements.csv")
    pred = HybridPredictor(corrections=[GemmXGB(XGBParams(n_estimators=3))]).fit(table[table["op"] == "gemm"])
    mine = tmp_path / "results"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(InvalidInputError, match=r"not a saved predictor \(it holds notes.txt\)"):
        pred.save(mine)
    assert (mine / "notes.txt").read_text() == "keep me" and not (mine / "manifest.json").exists()
    note = tmp_path / "notes.txt"
    note.write_text("keep me too")
    with pytest.raises(InvalidInputError, match="exists and is not a directory"):
        pred.save(note)
    assert note.read_text() == "keep me too" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "results"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (pred.save(empty) / "manifest.json").is_file()
    pred.save(empty)  # an earlier save is replaced
    assert HybridPredictor.load(empty).predict_time(table[table["op"] == "gemm"].head(3)).shape == (3,)


def test_adapting_on_alpha_beta_collectives_leaves_roofline_kernels_alone():
    """Kernel rows no correction answers and collectives no correction answers shared one few-shot group
    ("roofline"): five H100 all-reduces measured 100 us (alpha-beta 26.6 us) shifted every roofline-priced H100
    kernel too, a 24 us layernorm to 76.5 us. Each has its own group now, and the adaptation still applies."""
    table = pd.read_csv(Path(__file__).resolve().parents[1] / "datasets" / "H100-SXM" / "measurements.csv")
    pred = HybridPredictor(corrections=[GemmXGB(XGBParams(n_estimators=3))]).fit(table[table["op"] == "gemm"])
    coll = pd.DataFrame({"device": "H100", "op": "all_reduce", "size_bytes": [2**20] * 5, "n_ranks": 8,
                         "system": "DGX-H100", "time_us": [100.0] * 5})
    norm = pd.DataFrame({"device": ["H100"], "op": ["layernorm"], "dtype": ["bf16"], "rows": [4096],
                         "hidden": [4096]})
    for strategy in ("auto", "scale", "shift"):
        adapted = pred.adapt(coll, strategy=strategy)
        assert adapted.predict_time(norm)[0] == pytest.approx(pred.predict_time(norm)[0], rel=1e-12), strategy
        assert adapted.predict_time(coll)[0] > 2 * pred.predict_time(coll)[0], strategy  # towards the 100 us
        assert list(adapted.adaptation()) == ["alpha-beta"], strategy
    # and the reverse: roofline kernels adapted, collectives unchanged
    lns = pd.concat([norm] * 5, ignore_index=True).assign(time_us=100.0)
    back = pred.adapt(lns, strategy="scale")
    assert back.predict_time(coll)[0] == pytest.approx(pred.predict_time(coll)[0], rel=1e-12)
    assert back.predict_time(norm)[0] > 2 * pred.predict_time(norm)[0]


@pytest.mark.parametrize(("call", "match"), [
    (lambda p, t: p.calibrate_intervals(t, test_fraction=1.5), r"test_fraction must be in \(0, 1\), got 1.5"),
    (lambda p, t: p.calibrate_intervals(t, test_fraction=-0.2), "test_fraction must be in"),
    (lambda p, t: p.holdout_residuals(t, test_fraction=1.0), "test_fraction must be in"),
    (lambda p, t: p.calibrate_intervals(t, test_fraction=float("nan")), "test_fraction must be in"),
    (lambda p, t: p.calibrate_intervals(t, max_devices=-1), "max_devices must be a whole number >= 0"),
    (lambda p, t: p.calibrate_intervals(t, seed=-1), "seed must be a whole number >= 0"),
    (lambda p, t: HybridPredictor(seed=1.5), "seed must be a whole number >= 0"),
    (lambda p, t: HybridPredictor(seed=-1), "seed must be a whole number >= 0"),
    (lambda p, t: HybridPredictor(seed=None), "seed must be a whole number >= 0, got None"),  # fitted, then
    # its save could not be loaded (nor adapted: adapt copies through save/load)
])
def test_interval_calibration_arguments_are_checked_before_any_fit(call, match):
    """What ``hybrid calibrate`` checks of its options, the library took as it came: test_fraction 1.5 was numpy's
    "Cannot take a larger sample than population", -0.2 or 1.0 an empty hold-out calibrating nothing, NaN "cannot
    convert float NaN to integer"; HybridPredictor(seed=1.5) was XGBoost's "Invalid Parameter format" at fit, and
    seed=-1 numpy's "expected non-negative integer" when intervals were calibrated, and seed=None a model whose save
    did not load ("int() argument must be ... not 'NoneType'")."""
    table = pd.read_csv(Path(__file__).resolve().parents[1] / "datasets" / "H100-SXM" / "measurements.csv")
    gemms = table[table["op"] == "gemm"]
    pred = HybridPredictor(corrections=[GemmXGB(XGBParams(n_estimators=2))]).fit(gemms)
    with pytest.raises(InvalidInputError, match=match):
        call(pred, gemms)


def test_scikit_learn_clone_and_params(catalog, gemm_rows):
    """scikit-learn's estimator protocol: `sklearn.base.clone` raised TypeError (no get_params); a clone is a new,
    unfitted predictor of the same arguments that fits to the same predictions, set_params changes arguments."""
    from sklearn.base import clone

    pred = HybridPredictor(catalog, seed=3, sibling_blend=False).fit(gemm_rows.iloc[:400])
    twin = clone(pred)
    assert twin is not pred and twin.get_params()["seed"] == 3 and twin.get_params()["sibling_blend"] is False
    query = gemm_rows.iloc[400:450]
    assert set(twin.predict(query)["method"]) == {"roofline"} != set(pred.predict(query)["method"])  # unfitted
    np.testing.assert_allclose(twin.fit(gemm_rows.iloc[:400]).predict(query)["time_us"],
                               pred.predict(query)["time_us"], rtol=1e-6)
    assert twin.set_params(seed=7) is twin and twin.seed == 7 and twin.get_params()["seed"] == 7
    assert set(twin.predict(query)["method"]) == {"roofline"}  # started over
    with pytest.raises(InvalidInputError, match="no parameter"):
        twin.set_params(learning_rate=0.1)
