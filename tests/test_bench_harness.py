"""The real DLRM harness: synthetic inputs, plan layout, and a tiny 2-rank gloo run end to end."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid.bench.dlrm_harness import (
    HarnessOptions,
    _restrict_rows,
    build_layout,
    draw_indices,
    draw_lengths,
    run_dlrm,
)
from hybrid.errors import InvalidInputError
from hybrid.sharding.plan import ShardingPlan
from hybrid.workloads.dlrm import DLRMConfig

pytest.importorskip("torch")


def tiny_config(**kw) -> DLRMConfig:
    doc = {"name": "tiny", "system": "local-cpu", "gpus": 2, "batch_size_per_gpu": 64, "dense_features": 8,
           "bottom_mlp": [16, 8], "top_mlp": [16, 1], "embedding_dim": 8,
           "tables": [{"name": "a", "num_embeddings": 1000, "pooling_factor": 3},
                      {"name": "b", "num_embeddings": 5000, "pooling_factor": 2.5, "index_dist": "zipf",
                       "zipf_alpha": 1.1},
                      {"name": "c", "num_embeddings": 301, "pooling_factor": 1}]}
    doc.update(kw)
    return DLRMConfig.from_dict(doc)


def test_uniform_indices_in_range_and_deterministic():
    a = draw_indices(np.random.default_rng(1), 997, 50_000)
    b = draw_indices(np.random.default_rng(1), 997, 50_000)
    assert a.dtype == np.int64 and a.min() >= 0 and a.max() < 997
    np.testing.assert_array_equal(a, b)
    # roughly uniform: every row hit, no row more than 3x its share
    counts = np.bincount(a, minlength=997)
    assert counts.min() > 0 and counts.max() < 3 * 50_000 / 997


def test_zipf_indices_are_skewed():
    n, rows = 100_000, 100_000
    z = draw_indices(np.random.default_rng(2), rows, n, "zipf", 1.1)
    u = draw_indices(np.random.default_rng(2), rows, n, "uniform")
    assert z.min() >= 0 and z.max() < rows
    top = np.sort(np.bincount(z, minlength=rows))[::-1]
    # the 1% hottest rows take far more than 1% of the lookups, and far fewer distinct rows are touched
    assert top[: rows // 100].sum() > 0.3 * n
    assert len(np.unique(z)) < 0.5 * len(np.unique(u))
    # hot rows are scattered, not the first rows of the table
    hottest = np.argsort(np.bincount(z, minlength=rows))[::-1][:10]
    assert hottest.max() > 1000


def test_lengths_mean_matches_pooling():
    lens = draw_lengths(np.random.default_rng(0), 20_000, 2.3)
    assert set(np.unique(lens)) == {2, 3}
    assert abs(lens.mean() - 2.3) < 0.02
    assert draw_lengths(np.random.default_rng(0), 10, 0.2).min() == 1


def test_restrict_rows_keeps_bags_aligned():
    idx = np.array([0, 5, 9, 3, 7, 1])
    lens = np.array([2, 1, 3])  # bags: [0,5] [9] [3,7,1]
    sub, new_len = _restrict_rows(idx, lens, 3, 8)
    np.testing.assert_array_equal(sub, [2, 0, 4])  # 5-3, 3-3, 7-3
    np.testing.assert_array_equal(new_len, [1, 0, 2])


def test_layout_offsets_per_shard_type():
    cfg = tiny_config()
    plan = ShardingPlan({"a": {"type": "row_wise", "ranks": [0, 1]}, "b": {"type": "column_wise", "ranks": [1, 0]},
                         "c": "data_parallel"})
    lay = build_layout(cfg, plan, 2)
    assert lay.dp_tables == (2,) and lay.rw_tables == (0,)
    r0 = {(p.table, p.kind): p for p in lay.pieces[0]}
    r1 = {(p.table, p.kind): p for p in lay.pieces[1]}
    assert (r0[(0, "row_wise")].row_lo, r0[(0, "row_wise")].rows) == (0, 500)
    assert (r1[(0, "row_wise")].row_lo, r1[(0, "row_wise")].rows) == (500, 500)
    # column-wise: rank 1 listed first holds columns 0..3
    assert r1[(1, "column_wise")].col_lo == 0 and r0[(1, "column_wise")].col_lo == 4
    assert lay.a2a_dims == (4, 4) and lay.rw_width == 8
    with pytest.raises(InvalidInputError, match="ranks"):
        build_layout(cfg, ShardingPlan({"a": 3, "b": 0, "c": 0}), 2)


def test_options_reject_bad_values():
    with pytest.raises(InvalidInputError):
        HarnessOptions(iters=0)
    with pytest.raises(InvalidInputError):
        HarnessOptions(device="tpu")


def test_run_rejects_incomplete_plan():
    with pytest.raises(InvalidInputError, match="placement"):
        run_dlrm(tiny_config(), {"p": ShardingPlan({"a": 0, "b": 1})}, HarnessOptions(iters=1, warmup=0))


def test_tiny_run_two_plans_end_to_end():
    cfg = tiny_config()
    plans = {
        "tw": ShardingPlan({"a": 0, "b": 1, "c": 1}),
        "mixed": ShardingPlan({"a": {"type": "row_wise", "ranks": [0, 1]},
                               "b": {"type": "column_wise", "ranks": [0, 1]}, "c": "data_parallel"}),
    }
    res = run_dlrm(cfg, plans, HarnessOptions(iters=3, warmup=1, timeout_s=120))
    assert [r.plan_name for r in res] == ["tw", "mixed"]
    for r in res:
        assert r.rank_iter_ms.shape == (2, 3)
        assert np.all(r.rank_iter_ms > 0) and np.all(np.isfinite(r.rank_iter_ms))
        np.testing.assert_allclose(r.iter_ms, r.rank_iter_ms.max(axis=0))
        row = r.summary()
        assert row["min_ms"] <= row["median_ms"] <= row["max_ms"]
        assert row["ranks"] == 2 and row["threads_per_rank"] >= 1 and row["backend"] == "gloo"
        # the phases are parts of an iteration
        assert 0 < row["lookup_fwd_ms"] < row["max_ms"] and row["exchange_fwd_ms"] > 0
    assert res[0].plan_hash != res[1].plan_hash and res[0].config_hash == res[1].config_hash


def test_every_placement_computes_the_same_model():
    """With placement-independent weights, the first-iteration loss must not depend on the plan: the input
    distribution, lookups, all-to-all and reduce-scatter deliver exactly the single-table result."""
    cfg = tiny_config()
    plans = {
        "tw": ShardingPlan({"a": 0, "b": 1, "c": 1}),
        "rw": ShardingPlan({"a": {"type": "row_wise", "ranks": [1, 0]}, "b": {"type": "row_wise", "ranks": [0, 1]},
                            "c": {"type": "row_wise", "ranks": [1]}}),
        "cw_dp": ShardingPlan({"a": {"type": "column_wise", "ranks": [1, 0]}, "b": "data_parallel",
                               "c": {"type": "column_wise", "ranks": [0]}}),
    }
    res = run_dlrm(cfg, plans, HarnessOptions(iters=1, warmup=0, reference_init=True, timeout_s=120))
    losses = [r.first_loss for r in res]
    assert np.isfinite(losses).all()
    np.testing.assert_allclose(losses, losses[0], rtol=1e-5)
    # and a different model (other weights) gives a different loss: the check can fail
    other = run_dlrm(cfg, {"tw": plans["tw"]}, HarnessOptions(iters=1, warmup=0, timeout_s=120))
    assert abs(other[0].first_loss - losses[0]) > 1e-6


def test_more_threads_per_rank_than_cores_is_refused(capsys):
    """`hybrid bench dlrm --threads 99` on a 2-core machine ran 99 threads per rank and recorded them; the
    profiler refuses the same (`--threads` beyond the cores it may run on)."""
    from pathlib import Path

    from hybrid.bench.dlrm_harness import HarnessOptions, default_threads
    from hybrid.cli.main import main

    cores = default_threads(1)
    assert HarnessOptions(threads_per_rank=cores).threads_per_rank == cores
    with pytest.raises(InvalidInputError, match="exceeds the"):
        HarnessOptions(threads_per_rank=cores + 1)
    config = Path(__file__).resolve().parents[1] / "experiments" / "configs" / "dlrm_example.yaml"
    assert main(["bench", "dlrm", str(config), "--threads", str(cores + 1)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--threads {cores + 1}" in err[0]


@pytest.mark.parametrize(("fields", "device", "match"), [
    ({"grad_scaler": True}, "cpu", "grad_scaler"),
    ({"bottom_mlp_placement": "model_parallel"}, "cpu", "bottom_mlp_placement"),
    ({"dtype": "fp8"}, "cpu", "dtype fp8"),
    ({"dtype": "tf32"}, "cpu", "dtype tf32"),
    ({"dtype": "fp16", "embedding_dtype": "fp32"}, "cpu", "mixed precision"),
    ({"embedding_placement": "host"}, "cuda", "embedding_placement host"),
])
def test_run_refuses_what_the_harness_does_not_run(fields, device, match):
    """The harness trains one dtype, a data-parallel bottom MLP, no loss scaling and GPU-resident tables; a config
    asking for more ran as if it had not (fp8 trained in fp32), recorded with its YAML for validate to predict."""
    cfg = tiny_config().with_(**fields)
    with pytest.raises(InvalidInputError, match=match):
        run_dlrm(cfg, {"p": ShardingPlan({"a": 0, "b": 1, "c": 1})},
                 HarnessOptions(iters=1, warmup=0, device=device))
    from hybrid.bench.dlrm_harness import unsupported_features

    assert unsupported_features(tiny_config()) == []
    assert unsupported_features(tiny_config().with_(embedding_placement="host"), "cpu") == []  # a CPU's tables


def test_dense_module_pads_the_dot_interaction_as_configured():
    """A config with ``interaction_pad_to`` is measured as it is predicted: the harness appends the zero columns
    NVIDIA's kernels write (4 features of dim 8: 8 + 6 = 14 columns, padded to 16), and the padding changes no
    output (the top MLP's weights on zero columns contribute nothing)."""
    import torch

    from hybrid.bench.dlrm_harness import _build_dense_module

    plan = ShardingPlan({"a": 0, "b": 1, "c": 1})
    modules = []
    for pad_to in (1, 8):
        cfg = tiny_config(interaction_pad_to=pad_to)
        module = _build_dense_module(torch, cfg, build_layout(cfg, plan, 2), torch.float32)
        first = next(m for m in module.top.modules() if isinstance(m, torch.nn.Linear))
        assert first.in_features == cfg.interaction_features == (14 if pad_to == 1 else 16)
        modules.append(module)
    plain, padded = modules
    with torch.no_grad():  # the padded model gets the plain one's weights on every real column
        for mine, ref in zip(padded.parameters(), plain.parameters(), strict=True):
            mine.zero_()
            mine[tuple(slice(0, n) for n in ref.shape)] = ref
    gen = torch.Generator().manual_seed(1)
    dense = torch.randn(4, 8, generator=gen)
    sparse = {t: torch.randn(4, 8, generator=gen) for t in range(3)}
    out_plain, out_padded = plain(dense, [], sparse), padded(dense, [], sparse)
    assert out_plain.shape == out_padded.shape == (4, 1)
    torch.testing.assert_close(out_plain, out_padded)
    with torch.no_grad():  # and the check can fail: weights on the padding would change it, were it not zero
        next(m for m in padded.top.modules() if isinstance(m, torch.nn.Linear)).weight[:, 14:] = 1.0
    torch.testing.assert_close(out_plain, padded(dense, [], sparse))
