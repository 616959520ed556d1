"""The prediction path's shortcuts (issue 13, rows without repeats) give exactly what the general code gives:
``validate(prediction=True)`` against ``validate`` + ``astype("category")``, float32 feature blocks built from
arrays against the feature frames, the sampled identical-rows check, and predictions with and without the
columns the prediction path leaves out."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections import GemmXGB, HybridPredictor, PointwiseXGB, XGBParams
from hybrid.corrections.features import build_features, feature_arrays, feature_matrix, feature_names
from hybrid.corrections.predictor import DEDUP_SAMPLE_MIN_ROWS, UNREAD_COLUMNS, _sample_all_distinct
from hybrid.data.schema import as_category, category_from_codes, validate
from hybrid.errors import HybridError
from hybrid.ops.roofline import roofline


def _mixed(n: int = 400, seed: int = 0) -> pd.DataFrame:
    """GEMMs and pointwise ops on a few GPUs, with text columns of several kinds, nullable integers, missing
    dtypes and directions, and columns no prediction reads."""
    rng = np.random.default_rng(seed)
    gemm = rng.random(n) < 0.5
    ops = np.where(gemm, rng.choice(["bmm", " Linear", "gemm"], n), rng.choice(["layernorm", "softmax",
                                                                                "elementwise"], n))
    size = rng.choice([64, 128, 256, 1024, 4096], (n, 4)).astype(float)
    table = pd.DataFrame({
        "device": pd.Series(rng.choice(["T4", "A100-PCIE-40GB", "tesla t4"], n), dtype="str"),
        "op": pd.Series(ops, dtype=object),
        "dtype": pd.Series(rng.choice(["fp16", "fp32", None], n), dtype=object),
        "direction": pd.Series(rng.choice(["fwd", "BWD", None], n), dtype=object),
        "b": pd.array(np.where(gemm, 1 + rng.integers(0, 4, n), np.nan), dtype="Float64"),
        "m": np.where(gemm, size[:, 0], np.nan), "n": np.where(gemm, size[:, 1], np.nan),
        "k": pd.array(np.where(gemm, size[:, 2], np.nan)).astype("Int64"),
        "rows": np.where(gemm, np.nan, size[:, 0]), "hidden": np.where(gemm, np.nan, size[:, 3]),
        "elements": np.where(gemm, np.nan, size[:, 0] * size[:, 3]),
        "variant": pd.Series(np.where(gemm, None, rng.choice(["add", "gelu", "mul_"], n)), dtype="string"),
        "framework": pd.Series(rng.choice(["pytorch", "XLA", None], n), dtype=object),
        "source": "synthetic", "kernel_name": pd.Series(["k"] * n, dtype="string"),
        "time_us_std": rng.random(n), "repeats": 5,
    })
    return table


def test_validate_prediction_mode_gives_the_default_values_as_categories(catalog):
    table = _mixed()
    plain = validate(table.assign(time_us=1.0), catalog)
    fast = validate(table.assign(time_us=1.0), catalog, prediction=True)
    assert list(plain.columns) == list(fast.columns)
    for c in plain.columns:
        a, b = plain[c], fast[c]
        if isinstance(b.dtype, pd.CategoricalDtype):
            pd.testing.assert_series_equal(a.astype("category"), b, check_exact=True)
        elif isinstance(a.dtype, pd.Int64Dtype):
            assert b.dtype == np.float64
            pd.testing.assert_series_equal(a.astype("float64"), b, check_exact=True)
        else:
            pd.testing.assert_series_equal(a, b, check_exact=True)
    assert {c for c in fast.columns if isinstance(fast[c].dtype, pd.CategoricalDtype)} == \
        {"op", "dtype", "direction", "device"}
    # the same errors, naming the same row and column
    bad_tables = [table.assign(op=table["op"].where(table.index != 7, "matmul2")),
                  table.assign(m=table["m"].astype(object).where(table.index != 3, "x")),
                  table.assign(k=table["k"].where(table.index != 2, -4)),
                  table.assign(device=table["device"].where(table.index != 9, "Quantum-GPU")),
                  table.assign(direction=table["direction"].where(table.index != 4, "up")),
                  table.assign(dtype=table["dtype"].where(table.index != 5, "fp7"))]
    for bad in bad_tables:
        with pytest.raises(HybridError) as slow:
            validate(bad.assign(time_us=1.0), catalog)
        with pytest.raises(HybridError) as quick:
            validate(bad.assign(time_us=1.0), catalog, prediction=True)
        assert str(slow.value) == str(quick.value)


def test_category_helpers_equal_astype_category():
    values = pd.Series(["b", None, "a", "b", "c"], dtype=object)
    pd.testing.assert_series_equal(as_category(values), values.astype("category"), check_exact=True)
    text = pd.Series(["b", None, "a", "b"], dtype="str")
    pd.testing.assert_series_equal(as_category(text), text.astype("category"), check_exact=True)
    arrow = pd.Series(["x", "y", None, "x"], dtype="string")
    pd.testing.assert_series_equal(as_category(arrow), arrow.astype("category"), check_exact=True)
    codes = np.array([2, 0, -1, 1, 2])
    names = np.array(["fp32", "bf16", "fp32"], dtype=object)  # names may repeat (two aliases, one key)
    expected = pd.Series(np.where(codes < 0, None, names[codes]), dtype=object).astype("category")
    pd.testing.assert_series_equal(pd.Series(category_from_codes(codes, names)), expected, check_exact=True)


@pytest.mark.parametrize("kind", ["gemm", "pointwise"])
def test_feature_matrix_is_the_feature_frame_as_float32(catalog, kind):
    table = validate(_mixed().assign(time_us=1.0), catalog, prediction=True)
    base = roofline(table, catalog)
    fam = base["family"].astype(str).to_numpy()
    rows = (fam == "gemm") if kind == "gemm" else (fam != "gemm")
    sub, b = table.loc[rows], base.loc[rows]
    for transfer in (False, True):
        names = feature_names(kind, True, 4, transfer)
        frame = build_features(kind, sub, b, catalog, True, 4, transfer)
        arrays = feature_arrays(kind, sub, b, catalog, True, 4, transfer)
        np.testing.assert_array_equal(feature_matrix(arrays, names), frame.to_numpy(dtype=np.float32))
        pick = np.arange(len(sub)) % 3 == 0
        np.testing.assert_array_equal(feature_matrix(arrays, names, pick), frame[pick].to_numpy(dtype=np.float32))
        np.testing.assert_array_equal(feature_matrix(arrays, names, np.flatnonzero(pick)),
                                      frame[pick].to_numpy(dtype=np.float32))


def test_sampled_identical_rows_check():
    n = DEDUP_SAMPLE_MIN_ROWS + 1000
    rng = np.random.default_rng(1)
    repeated = pd.DataFrame({"m": rng.integers(0, n // 2, n), "op": "gemm"})  # ~40% of the rows distinct
    assert not _sample_all_distinct(repeated)
    assert _sample_all_distinct(repeated.assign(row_id=np.arange(n)))
    assert not _sample_all_distinct(repeated.iloc[:1000].assign(row_id=np.arange(1000)))  # small: full check


def test_unread_columns_do_not_change_predictions(catalog):
    table = _mixed(600, seed=3).replace({"op": {" Linear": "linear"}})  # (interval calibration reads raw ops)
    train = table.assign(time_us=np.random.default_rng(2).uniform(5, 500, len(table)))
    small = XGBParams(n_estimators=10, max_depth=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # synthetic times: some GEMMs beat the datasheet peak
        pred = HybridPredictor(catalog, [GemmXGB(small), PointwiseXGB(small)]).fit(train, intervals=True)
    out = pred.predict(table, host=True)
    assert "kernel-xgb" in set(out["method"])
    slim = table.drop(columns=[c for c in table.columns if c in UNREAD_COLUMNS])
    pd.testing.assert_frame_equal(out, pred.predict(slim, host=True), check_exact=True)
    pd.testing.assert_frame_equal(out, pred._predict_rows(table, True, True), check_exact=True)


def test_prediction_threads_do_not_change_predictions(catalog, tmp_path):
    """Large blocks are predicted on every core, small ones on one thread (``prediction_threads``), whether the
    booster was fitted here (``n_jobs`` 1) or loaded from a file (no thread count): the same numbers either way."""
    from hybrid.corrections.kernel_xgb import PARALLEL_PREDICT_MIN_ROWS, prediction_threads

    assert prediction_threads(PARALLEL_PREDICT_MIN_ROWS - 1) == 1 and prediction_threads(PARALLEL_PREDICT_MIN_ROWS) == 0
    rng = np.random.default_rng(5)
    n = 3 * PARALLEL_PREDICT_MIN_ROWS
    table = pd.DataFrame({"device": rng.choice(["T4", "A100-PCIE-40GB"], n), "op": "gemm", "dtype": "fp32",
                          "b": 1.0, "m": rng.integers(16, 4096, n).astype(float),
                          "n": rng.integers(16, 4096, n).astype(float), "k": rng.integers(16, 4096, n).astype(float)})
    train = table.iloc[:600].assign(time_us=rng.uniform(20, 900, 600))
    model = GemmXGB(XGBParams(n_estimators=30, max_depth=4)).fit(train, roofline(train, catalog), catalog)
    # without the sub-problem bound, whose second (smaller) prediction of the pieces would set the thread count last
    model.extents = {}
    base = roofline(table, catalog)
    whole = model.predict(table, base, catalog)  # one block: all cores
    booster = model.booster
    import json

    assert json.loads(booster.save_config())["learner"]["generic_param"]["nthread"] == "0"
    step = PARALLEL_PREDICT_MIN_ROWS // 2
    chunks = np.concatenate([model.predict(table.iloc[i:i + step], base.iloc[i:i + step], catalog)
                             for i in range(0, n, step)])  # blocks under the limit: one thread
    assert json.loads(booster.save_config())["learner"]["generic_param"]["nthread"] == "1"
    np.testing.assert_array_equal(whole, chunks)
    model.save(tmp_path / "m")
    loaded = type(model).load(tmp_path / "m")
    np.testing.assert_array_equal(loaded.predict(table, base, catalog), whole)


def test_repeated_feature_rows_walk_the_trees_once_and_change_nothing(catalog):
    """A table distinct as rows (a row id, a name per layer) but not as features has the trees walked once per
    distinct feature row: the same numbers as walking every row, while a block of distinct shapes is left whole."""
    from hybrid.corrections import kernel_xgb as kx

    rng = np.random.default_rng(11)
    n = 3 * kx.FEATURE_DEDUP_MIN_ROWS
    shapes = rng.integers(16, 4096, (300, 3)).astype(float)  # 300 shapes over 12,288 rows
    pick = rng.integers(0, len(shapes), n)
    table = pd.DataFrame({"device": rng.choice(["T4", "A100-PCIE-40GB"], n), "op": "gemm", "dtype": "fp32",
                          "b": 1.0, "m": shapes[pick, 0], "n": shapes[pick, 1], "k": shapes[pick, 2],
                          "row_id": np.arange(n)})
    train = table.iloc[:600].drop(columns="row_id").assign(time_us=rng.uniform(20, 900, 600))
    model = GemmXGB(XGBParams(n_estimators=30, max_depth=4)).fit(train, roofline(train, catalog), catalog)
    model.extents = {}
    base = roofline(table, catalog)
    walked: list[int] = []
    booster = model.booster
    original = booster.inplace_predict

    def counting(x, **kw):
        walked.append(len(x))
        return original(x, **kw)

    booster.inplace_predict = counting  # type: ignore[method-assign]
    reduced = model.predict(table, base, catalog)
    assert walked and max(walked) <= 600  # at most 600 distinct (shape, device) rows, not 12,288
    walked.clear()
    old = kx.FEATURE_DEDUP_MIN_ROWS
    try:
        kx.FEATURE_DEDUP_MIN_ROWS = 10**12  # every row through the trees
        whole = model.predict(table, base, catalog)
    finally:
        kx.FEATURE_DEDUP_MIN_ROWS = old
    assert max(walked) == n
    np.testing.assert_array_equal(reduced, whole)
    # distinct shapes: no reduction, and -0.0 / 0.0 (different bytes) are never merged into a wrong row
    distinct = rng.normal(size=(n, 5)).astype(np.float32)
    assert kx.repeated_feature_rows(distinct) is None
    signed = np.zeros((n, 2), dtype=np.float32)
    signed[::2, 0] = -0.0
    rows, inverse = kx.repeated_feature_rows(signed)
    assert len(rows) == 2 and np.array_equal(np.signbit(rows[inverse][:, 0]), np.signbit(signed[:, 0]))
    assert kx.repeated_feature_rows(signed[: kx.FEATURE_DEDUP_MIN_ROWS - 1]) is None  # small blocks: as they are


def test_isin_fast_reads_a_categorical_s_codes_as_the_factorize_does():
    """``isin_fast`` on a categorical (the roofline's family, the predictor's device and dtype) reads its codes
    instead of factorising every row: the same mask, missing values and unused categories included."""
    from hybrid.corrections.base import isin_fast

    rng = np.random.default_rng(3)
    values = rng.choice(["gemm", "norm", "softmax", None], 5000)
    cat = pd.Series(pd.Categorical(values, categories=["unused", "softmax", "gemm", "norm"]))
    for allowed in (("gemm",), ("norm", "softmax"), ("unused",), ()):
        expected = np.array([v is not None and v in allowed for v in values])
        np.testing.assert_array_equal(isin_fast(cat, allowed), expected)
        np.testing.assert_array_equal(isin_fast(cat.astype(object), allowed), expected)
    numbers = pd.Series(pd.Categorical([1, 2, None, 2]))  # str(category) as the factorize path compares
    np.testing.assert_array_equal(isin_fast(numbers, ["2"]), [False, True, False, True])


def test_envelope_group_codes_marked_equal_np_unique():
    from hybrid.corrections.kernel_xgb import _sorted_codes

    rng = np.random.default_rng(4)
    for n in (1, 7, 1000):
        codes = rng.integers(0, n, rng.integers(0, 3 * n + 1))
        np.testing.assert_array_equal(_sorted_codes(codes, n), np.unique(codes))
