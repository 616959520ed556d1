"""The GEMM model's sub-problem bound: GEMMs larger than every measured one, predicted from the pieces they split into."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections import GemmXGB, XGBParams
from hybrid.corrections.kernel_xgb import (
    EXTENTS_FILE,
    covered,
    gemm_extents,
    merge_extents,
    pareto_shapes,
    split_pieces,
)
from hybrid.errors import InvalidInputError
from hybrid.ops.roofline import roofline


def test_pareto_shapes_keep_only_shapes_nothing_covers():
    dims = np.array([[1, 1, 1, 4, 1], [4096, 2048, 4096, 4096, 2398], [4096, 2048, 1024, 4096, 6915],
                     [4096, 2048, 4096, 4096, 5571]], dtype=float)
    kept = pareto_shapes(dims)
    assert kept.tolist() == [[4, 4096, 4096, 4096], [1, 2398, 6915, 5571]]  # largest FLOPs first


def test_split_pieces_halves_until_a_measured_shape_covers_the_piece():
    shapes = np.array([[4, 4096, 4096, 4096], [1, 2398, 6915, 5571]], dtype=float)
    dims = np.array([[1, 1, 1], [8192, 4096, 50257], [8192, 1024, 768], [8192, 4096, 8192]], dtype=float)
    piece, halvings = split_pieces(dims, shapes)
    # 8192^3: one halving of m, n and k puts it inside the (4, 4096^3) shape (3 halvings, 8 pieces); the second
    # row is covered already; a 50257-row GEMM is halved (rounded up) until it fits under 4096 (13 -> 4 halvings)
    assert piece[:, 0].tolist() == [1, 4096, 4096, 4096] and halvings[0] == 3
    assert halvings[1] == 0 and piece[:, 1].tolist() == dims[:, 1].tolist()
    assert piece[:, 2].tolist() == [1, np.ceil(50257 / 16), 768, 4096] and halvings[2] == 5
    assert covered(dims, shapes).tolist() == (halvings == 0).tolist() == [False, True, False]


@pytest.fixture(scope="module")
def xla_bf16(shared_datasets, catalog) -> pd.DataFrame:
    from hybrid.data.importers import import_paths

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = import_paths("xla-matmul", shared_datasets / "xla", catalog=catalog)
    return table[table["dtype"] == "bf16"].reset_index(drop=True)


def test_largest_gemms_held_out_are_predicted_closer_with_the_bound(shared_datasets, catalog):
    """NeuSight's GEMMs (6 GPUs, fp32): the 10% with the most FLOPs on each GPU held out. The trees extrapolate
    them from the leaves of other shapes; the pieces' time is closer (and never above the trees')."""
    from hybrid.data.importers import import_paths

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = import_paths("neusight", shared_datasets / "neusight" / "test-dev", catalog=catalog)
    t = t[t["op"].isin(["linear", "bmm"])].reset_index(drop=True)
    flops = 2 * t["b"].fillna(1).to_numpy(float) * t[["m", "n", "k"]].to_numpy(float).prod(axis=1)
    test = flops > pd.Series(flops).groupby(t["device"].to_numpy()).transform(lambda f: f.quantile(0.9)).to_numpy()
    base = roofline(t, catalog)
    model = GemmXGB(XGBParams(n_estimators=60, max_depth=6, learning_rate=0.1)).fit(t[~test], base[~test], catalog)
    bounded = model.predict(t[test], base[test], catalog)
    extents, model.extents = model.extents, {}
    trees = model.predict(t[test], base[test], catalog)
    model.extents = extents
    meas = t.loc[test, "time_us"].to_numpy()

    def geomean(pred: np.ndarray) -> float:
        return float(np.exp(np.mean(np.log(np.abs(pred / meas - 1) + 1e-9))))

    assert (bounded <= trees + 1e-9).all() and (bounded < trees).sum() > 0.3 * test.sum()
    assert geomean(bounded) < 0.98 * geomean(trees), (geomean(bounded), geomean(trees))


def test_a_gemm_beyond_the_fit_is_no_slower_than_its_pieces(xla_bf16, catalog):
    t = xla_bf16
    train = t[["m", "n", "k"]].to_numpy(dtype=float).max(axis=1) <= 2048
    base = roofline(t, catalog)
    model = GemmXGB(XGBParams(n_estimators=60, max_depth=6, learning_rate=0.1)).fit(t[train], base[train], catalog)
    assert set(model.extents) == {"bf16|gemm", "bf16|bmm"}  # XLA's batched rows (b > 1) are bmm
    assert max(max(s[1:]) for shapes in model.extents.values() for s in shapes) == 2048
    # every dimension doubled: at most 8 pieces of the measured size plus the k-split accumulation, never below
    # the roofline; the same on a GPU the fit never saw (the extents are over every device)
    for device in ("H100-SXM", "B200"):
        q = pd.DataFrame({"device": device, "op": "gemm", "dtype": "bf16", "framework": "xla", "b": 1,
                          "m": [2048, 4096], "n": [2048, 4096], "k": [2048, 4096]})
        qb = roofline(q, catalog)
        small, large = model.predict(q, qb, catalog)
        accumulate = 3 * 4096 * 4096 * 2 / catalog.device(device).mem_bw * 1e6
        assert qb["time_us"].iloc[1] <= large <= 8 * small + accumulate + 1e-6


def test_no_piece_of_the_bound_beats_its_own_roofline(catalog):
    """The pieces are priced by the trees, which may extrapolate under a piece's roofline: summed, the bound then
    came out under the whole GEMM's and the row sat on the floor at exactly 100% of the peak. Fitted on the H100
    and H200 profiles (fp16 bmm measured up to 512), an H100 fp16 bmm of 4 x 6144 x 8192 x k was priced at 100%
    of the dense peak for every k; every piece now costs at least its own roofline."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "datasets"
    table = pd.concat([pd.read_csv(root / d / "measurements.csv", low_memory=False) for d in ("H100-SXM", "H200")],
                      ignore_index=True)
    fit = table[table["op"].isin(["gemm", "linear", "bmm"])].reset_index(drop=True)
    model = GemmXGB(XGBParams(seed=0, n_estimators=200)).fit(fit, roofline(fit, catalog), catalog)
    q = pd.DataFrame({"device": "H100-SXM", "op": "bmm", "dtype": "fp16", "b": 4, "m": 6144, "n": 8192,
                      "k": [896, 1024, 1536, 2048]})
    qb = roofline(q, catalog)
    bound = model.split_bound_us(q, qb, catalog)
    assert np.isfinite(bound).all()
    efficiency = qb["time_us"].to_numpy() / model.predict(q, qb, catalog)
    assert np.all(efficiency < 0.9), efficiency  # not pinned at the datasheet peak


def test_extents_are_saved_merged_on_adaptation_and_checked_on_load(xla_bf16, catalog, tmp_path):
    t = xla_bf16
    dims = t[["m", "n", "k"]].to_numpy(dtype=float)
    small = dims.max(axis=1) <= 1024
    base = roofline(t, catalog)
    model = GemmXGB(XGBParams(n_estimators=60)).fit(t[small], base[small], catalog)
    model.save(tmp_path / "m")
    loaded = GemmXGB.load(tmp_path / "m")
    assert loaded.extents == model.extents
    np.testing.assert_allclose(loaded.predict(t, base, catalog), model.predict(t, base, catalog))
    grown = model.continue_boosting(t[~small], base[~small], catalog, rounds=5)
    assert grown.extents == merge_extents(model.extents, gemm_extents(t[~small]))
    assert max(max(s[1:]) for s in grown.extents["bf16|gemm"]) > 1024
    # a model saved before the bound existed (no extents file) loads without one; a damaged file is refused
    (tmp_path / "m" / EXTENTS_FILE).unlink()
    assert GemmXGB.load(tmp_path / "m").extents == {}
    (tmp_path / "m" / EXTENTS_FILE).write_text(json.dumps({"extents": {"bf16|gemm": [[1, 0, 2, 3]]}}))
    with pytest.raises(InvalidInputError, match="bad GEMM extents"):
        GemmXGB.load(tmp_path / "m")


def test_pieces_of_every_dtype_and_kind_priced_in_one_call_give_each_row_its_own_bound(catalog):
    """``split_bound_us`` prices the pieces of every dtype and kind (bmm or not) in one call: each row gets the
    bound it gets alone, on a fitted and an unseen GPU (whose pieces the unseen-GPU envelope bounds)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "datasets"
    table = pd.concat([pd.read_csv(root / d / "measurements.csv", low_memory=False) for d in ("H100-SXM", "H200")],
                      ignore_index=True)
    fit = table[table["op"].isin(["gemm", "linear", "bmm"])].reset_index(drop=True)
    model = GemmXGB(XGBParams(seed=0, n_estimators=60)).fit(fit, roofline(fit, catalog), catalog)
    q = pd.DataFrame({"device": ["H100-SXM", "A100-SXM4-80GB"] * 4, "op": ["bmm", "bmm", "gemm", "gemm"] * 2,
                      "dtype": ["fp16"] * 4 + ["fp32"] * 4, "b": [4, 4, 1, 1] * 2, "m": 6144 * 4, "n": 8192 * 2,
                      "k": 8192 * 2})
    qb = roofline(q, catalog)
    together = model.split_bound_us(q, qb, catalog)
    alone = np.array([model.split_bound_us(q.iloc[[i]], qb.iloc[[i]], catalog)[0] for i in range(len(q))])
    assert np.isfinite(together).sum() >= 4
    np.testing.assert_array_equal(together, alone)
