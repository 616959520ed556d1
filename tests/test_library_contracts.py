"""Library entry points as a notebook uses them: refits replace every fitted state, layouts no system holds and
fractional counts are refused, errors are the documented types and name rows by their index label."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections.predictor import HybridPredictor
from hybrid.errors import InvalidInputError
from hybrid.ops.roofline import roofline


def _gemms(n: int = 80, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    m, k, nn = (rng.choice([256, 512, 1024, 2048, 4096], size=n) for _ in range(3))
    t = pd.DataFrame({"device": "H100-SXM", "op": "gemm", "dtype": "fp16", "b": 1, "m": m, "n": nn, "k": k})
    return t.assign(time_us=roofline(t)["time_us"].to_numpy() * rng.uniform(1.2, 1.6, n) + 5.0)


def _collectives() -> pd.DataFrame:
    sizes = 2.0 ** np.arange(10, 31)
    t = pd.DataFrame({"device": "H100-SXM", "op": "all_reduce", "dtype": "fp16", "size_bytes": sizes.astype(np.int64),
                      "n_ranks": 8, "n_nodes": 1, "system": "DGX-H100"})
    return t.assign(time_us=roofline(t)["time_us"].to_numpy() * 1.3)


def test_a_refit_without_a_family_forgets_its_earlier_model():
    both = pd.concat([_gemms(), _collectives()], ignore_index=True)
    hp = HybridPredictor().fit(both)
    query = _collectives().drop(columns="time_us").head(4)
    assert set(hp.predict(query)["method"]) == {"collective-sigmoid"}
    hp.fit(_gemms(seed=1))  # kernels only: no collective rows to fit on
    assert set(hp.predict(query)["method"]) == {"alpha-beta"}
    assert not hp.fit_info["collective-sigmoid"]["fitted"]
    fresh = HybridPredictor().fit(_gemms(seed=1))
    np.testing.assert_allclose(hp.predict(query)["time_us"], fresh.predict(query)["time_us"])


def test_collective_layouts_no_node_holds_are_refused_by_the_library_too():
    q = pd.DataFrame({"device": "H100-SXM", "op": "all_reduce", "dtype": "fp16", "size_bytes": 1 << 26,
                      "n_ranks": [64, 64], "n_nodes": [8, 2], "system": "DGX-H100"}, index=[100, 101])
    assert roofline(q.iloc[:1])["time_us"].iloc[0] > 0
    with pytest.raises(InvalidInputError, match=r"64 ranks on 2 node\(s\) of DGX-H100 .*per node.* at row index 101"):
        roofline(q)
    with pytest.raises(InvalidInputError, match="several nodes of a single-node system"):
        roofline(q.iloc[:1].assign(system="XLA-H100x8"))
    with pytest.raises(InvalidInputError, match="several nodes of a single-node system"):
        HybridPredictor().predict(q.iloc[:1].assign(system="XLA-H100x8"))


def test_predict_many_refuses_fractional_counts_like_predict_static():
    from hybrid.workloads.llm.inference import make_setup, predict_many, predict_static

    s = make_setup("llama2-7b", "A100")
    for bad in ([2.7], [float("nan")], [0]):
        with pytest.raises(InvalidInputError, match="batch must be positive integers"):
            predict_many([s], bad, [128], [16])
    one = predict_many([s], 2, 128, 16)  # scalars for the one configuration
    assert one["latency_ms"].iloc[0] == pytest.approx(predict_static(s, 2, 128, 16).latency_ms, rel=1e-9)


def test_library_errors_are_the_documented_types():
    from hybrid.engine.simulate import simulate
    from hybrid.workloads.dlrm import DLRMConfig
    from hybrid.workloads.dlrm_graph import build_dlrm_graph
    from hybrid.workloads.llm.config import TrainingConfig
    from hybrid.workloads.llm.model import load_model
    from hybrid.workloads.llm.train import search

    gemms = _gemms()
    hp = HybridPredictor().fit(gemms)
    q = gemms.drop(columns="time_us").head(3)
    with pytest.raises(InvalidInputError, match="column 'm' more than once"):
        hp.predict(pd.concat([q, q[["m"]]], axis=1))
    with pytest.raises(InvalidInputError, match="reserve_gib"):
        TrainingConfig(gpus=8, global_batch=8, reserve_gib="3")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="unknown search-space option.*foo"):
        search(load_model("gpt3-1.3b"), TrainingConfig(gpus=8, global_batch=8), "DGX-A100", foo=1)
    with pytest.raises(InvalidInputError, match="adapt: .* no 'time_us' column"):
        hp.adapt(q)
    # a builder's result is accepted where its graph is meant
    cfg = DLRMConfig.from_dict({"system": "DGX-H100", "gpus": 2, "tables": [{"name": "a", "num_embeddings": 1000}],
                                "plan": {"a": 0}})
    it = build_dlrm_graph(cfg)
    assert simulate(it).iteration_us == pytest.approx(simulate(it.graph).iteration_us)
    with pytest.raises(InvalidInputError, match="simulate needs a TaskGraph"):
        simulate(cfg)  # type: ignore[arg-type]


def test_rows_are_named_by_their_index_label_and_columns_keep_one_order():
    gemms = _gemms()
    hp = HybridPredictor().fit(gemms)
    q = _collectives().drop(columns="time_us").head(2).set_axis([100, 101])
    q.loc[101, "n_nodes"] = 16
    with pytest.raises(InvalidInputError, match=r"at row index 101$"):
        hp.predict(q)
    plain = hp.predict(gemms.drop(columns="time_us").head(2), intervals=True)
    hp_iv = HybridPredictor().fit(gemms, intervals=True)
    calibrated = hp_iv.predict(gemms.drop(columns="time_us").head(2), intervals=True)
    assert [c for c in calibrated.columns if c != "interval_band"] == list(plain.columns)
