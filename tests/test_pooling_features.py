"""Pooling rows have their own pointwise op code, so they do not price reductions (a real fit on the H100 bundle)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections import PointwiseXGB, XGBParams
from hybrid.corrections.features import INPLACE_ELEMENTWISE_CODE, POOL_ELEMENTWISE_CODE, pointwise_columns
from hybrid.data.bundle import load_bundle
from hybrid.ops.families import is_pool_variant, pool_row
from hybrid.ops.roofline import roofline

H100_BUNDLE = Path(__file__).resolve().parents[1] / "datasets" / "H100-SXM"


def _rows(device: str) -> pd.DataFrame:
    reduction = {"device": device, "op": "elementwise", "variant": "sum", "elements": 16 * 2**20, "n_inputs": 1.0,
                 "n_outputs": 1 / 4096, "flops_per_element": 1.0, "dtype": "fp32", "direction": "fwd"}
    unary = {**reduction, "variant": "relu", "n_outputs": 1.0}
    pool = {"device": device, **pool_row("avg", "fwd", 16 * 2**20, 4096, 4096)}
    return pd.DataFrame([reduction, unary, pool, {**unary, "variant": "mul_"}])


def test_pool_rows_get_their_own_code_and_no_input_output_counts(catalog) -> None:
    assert is_pool_variant("maxpool") and is_pool_variant("avgpool") and not is_pool_variant("sum")
    t = _rows("H100-SXM")
    f = pointwise_columns(t, catalog)
    assert f["op_code"].tolist() == [0, 0, POOL_ELEMENTWISE_CODE, INPLACE_ELEMENTWISE_CODE]
    assert f["n_outputs"].iloc[0] == pytest.approx(1 / 4096) and f["n_outputs"].iloc[1] == 1.0
    assert np.isnan(f["n_outputs"].iloc[2]) and np.isnan(f["n_inputs"].iloc[2])


def test_a_reduction_is_not_priced_like_the_slow_pooling_rows() -> None:
    table, cat = load_bundle(H100_BUNDLE)
    table = table[table["op"].isin(["elementwise", "layernorm", "rmsnorm", "softmax"])].reset_index(drop=True)
    pools = table["variant"].astype("string").str.contains("pool", na=False)
    assert pools.sum() > 20  # the bundle really holds pooling rows with outputs a sliver of their inputs
    assert table.loc[pools, "n_outputs"].min() < 0.01
    base = roofline(table, cat)
    model = PointwiseXGB(XGBParams(n_estimators=150, max_depth=6)).fit(table, base, cat)
    t = _rows("H100-SXM").iloc[:2].reset_index(drop=True)
    pred = model.predict(t, roofline(t, cat), cat)
    reduction_us, unary_us = pred
    # a reduction reads its input once and writes almost nothing: not slower than a unary pass over the same input
    # (before pooling had its own code, the trees priced it after global average pooling: several times slower)
    assert reduction_us < 1.2 * unary_us, (reduction_us, unary_us)
