"""Campaign generation (deterministic, valid, bounded), the results table, a tiny resumable campaign, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from hybrid.bench.campaign import (
    CampaignSpace,
    campaign_plans,
    generate_configs,
    load_pair,
    read_results,
    run_campaign,
)
from hybrid.cli.main import main
from hybrid.errors import InvalidInputError, SchemaError
from hybrid.workloads.dlrm import DLRMConfig


def test_generator_is_deterministic_for_a_seed():
    a = [c.to_dict() for c in generate_configs(6, seed=7)]
    b = [c.to_dict() for c in generate_configs(6, seed=7)]
    c = [c.to_dict() for c in generate_configs(6, seed=8)]
    assert a == b
    assert a != c
    plans_a = [campaign_plans(cfg, seed=7) for cfg in generate_configs(3, seed=7)]
    plans_b = [campaign_plans(cfg, seed=7) for cfg in generate_configs(3, seed=7)]
    assert [dict(p) for p in plans_a] == [dict(p) for p in plans_b]


def test_configs_stay_in_the_space_and_budgets():
    sp = CampaignSpace()
    for cfg in generate_configs(20, seed=0, space=sp):
        DLRMConfig.from_dict(cfg.to_dict())  # round-trips through validation
        assert cfg.gpus == 2 and sp.tables[0] <= cfg.num_tables <= sp.tables[1]
        assert cfg.batch_size_per_gpu in sp.batch_sizes
        rows = np.array([t.num_embeddings for t in cfg.tables])
        assert rows.min() >= sp.rows[0] and rows.max() <= sp.rows[1]
        assert {t.embedding_dim for t in cfg.tables} <= set(sp.dims)
        assert sum(t.num_embeddings * t.embedding_dim * 4 for t in cfg.tables) <= sp.max_table_bytes
        lookups = cfg.global_batch * sum(t.pooling_factor * t.embedding_dim * 4 for t in cfg.tables)
        assert lookups <= sp.max_lookup_bytes * 1.05
        if cfg.interaction == "dot":
            assert {t.embedding_dim for t in cfg.tables} == {cfg.bottom_mlp[-1]}


def test_gpu_space_draws_larger_configs_within_its_budgets():
    cpu, gpu = CampaignSpace(ranks=1), CampaignSpace.for_gpu(1)
    assert gpu.ranks == 1 and gpu.system == "local-cuda"
    g = generate_configs(12, seed=7, space=gpu)
    c = generate_configs(12, seed=7, space=cpu)
    for cfg in g:
        DLRMConfig.from_dict(cfg.to_dict())
        assert cfg.gpus == 1 and cfg.batch_size_per_gpu in gpu.batch_sizes
        assert sum(t.num_embeddings * t.embedding_dim * 4 for t in cfg.tables) <= gpu.max_table_bytes
        lookups = cfg.global_batch * sum(t.pooling_factor * t.embedding_dim * 4 for t in cfg.tables)
        assert lookups <= gpu.max_lookup_bytes * 1.05
    # the GPU space is the larger one: its smallest batch is the CPU space's largest
    assert min(x.batch_size_per_gpu for x in g) >= max(x.batch_size_per_gpu for x in c)
    assert np.median([t.num_embeddings for x in g for t in x.tables]) > np.median(
        [t.num_embeddings for x in c for t in x.tables])


def test_campaign_cuda_without_a_gpu_is_a_clear_failure(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    rc = main(["bench", "campaign", str(tmp_path / "c"), "--device", "cuda", "--ranks", "1", "--configs", "1"])
    assert rc != 0
    assert not (tmp_path / "c" / "results.csv").exists()


def test_at_least_four_distinct_valid_plans_per_config():
    for cfg in generate_configs(8, seed=3):
        plans = campaign_plans(cfg, seed=3)
        assert len(plans) >= 4
        assert len(set(plans.values())) == len(plans)
        for plan in plans.values():
            plan.validate(cfg)
        kinds = set().union(*(p.type_counts() for p in plans.values()))
        assert {"table_wise", "row_wise"} <= kinds


def test_bad_space_and_counts_rejected():
    with pytest.raises(InvalidInputError):
        generate_configs(0)
    with pytest.raises(InvalidInputError):
        CampaignSpace(tables=(10, 5))


def test_read_results_rejects_bad_tables(tmp_path):
    with pytest.raises(InvalidInputError, match="not found"):
        read_results(tmp_path / "nope.csv")
    good = pd.DataFrame({"config_name": ["a", "a"], "plan_name": ["p", "q"], "ranks": [2, 2],
                         "median_ms": [1.0, 2.0], "std_ms": [0.1, 0.1]})
    good.to_csv(tmp_path / "ok.csv", index=False)
    assert len(read_results(tmp_path / "ok.csv")) == 2
    good.drop(columns=["std_ms"]).to_csv(tmp_path / "cols.csv", index=False)
    with pytest.raises(SchemaError, match="std_ms"):
        read_results(tmp_path / "cols.csv")
    bad = good.copy()
    bad.loc[1, "median_ms"] = -3
    bad.to_csv(tmp_path / "neg.csv", index=False)
    with pytest.raises(SchemaError, match="row 3.*median_ms"):
        read_results(tmp_path / "neg.csv")
    for value in ("two", 0, 1.5):  # 'two' was a ValueError in validate, 0 an error naming no row
        bad = good.astype({"ranks": object})
        bad.loc[1, "ranks"] = value
        bad.to_csv(tmp_path / "ranks.csv", index=False)
        with pytest.raises(SchemaError, match="row 3: column ranks must be a positive integer"):
            read_results(tmp_path / "ranks.csv")
    pd.concat([good, good]).to_csv(tmp_path / "dup.csv", index=False)
    with pytest.raises(SchemaError, match="duplicate"):
        read_results(tmp_path / "dup.csv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(SchemaError):
        read_results(tmp_path / "empty.csv")
    # a last line cut mid-write: named as such (not as a missing config called "nan")
    text = (tmp_path / "ok.csv").read_text()
    (tmp_path / "cut.csv").write_text(text[: text.rstrip("\n").rindex("\n") + 4])
    with pytest.raises(SchemaError, match="truncated last line"):
        read_results(tmp_path / "cut.csv")


def test_tiny_campaign_is_resumable(tmp_path):
    pytest.importorskip("torch")
    sp = CampaignSpace(tables=(3, 4), rows=(500, 3000), batch_sizes=(32,), pooling=(1, 3))
    cfgs = generate_configs(1, seed=5, space=sp)
    rep = run_campaign(tmp_path, configs=cfgs, space=sp, iters=2, warmup=1, progress=False)
    n_plans = len(campaign_plans(cfgs[0], seed=0))
    assert rep.failures == [] and rep.measured == n_plans and rep.skipped == 0
    table = read_results(tmp_path / "results.csv")
    assert len(table) == n_plans and (table["median_ms"] > 0).all()
    cfg, plan = load_pair(tmp_path, table.iloc[0])
    assert cfg.to_dict() == cfgs[0].to_dict()
    assert plan == campaign_plans(cfgs[0], seed=0)[table["plan_name"].iloc[0]]
    again = run_campaign(tmp_path, configs=cfgs, space=sp, iters=2, warmup=1, progress=False)
    assert again.measured == 0 and again.skipped == n_plans
    assert len(read_results(tmp_path)) == n_plans


def test_cli_help_and_one_line_errors(capsys, tmp_path):
    assert main(["bench", "dlrm", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--plan" in out and "--ranks" in out and "--iters" in out
    assert main(["bench", "dlrm", str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not found" in err[0]
    assert main(["bench", "validate", str(tmp_path / "none.csv"), "--roofline"]) == 2


def _fake_result(config, plan_name, ms=5.0):
    from hybrid.bench.dlrm_harness import RunResult, config_hash

    t = np.array([ms, ms * 1.1, ms * 0.9])
    return RunResult(config_name=config.name, config_hash=config_hash(config), plan_name=plan_name,
                     plan_hash="0" * 12, ranks=config.gpus, iter_ms=t, rank_iter_ms=np.vstack([t] * config.gpus))


def test_results_refuse_another_config_under_a_stored_name(tmp_path):
    """A second config named like one already in the table would rewrite configs/<name>.yaml under the first
    one's rows (validate then predicted them on the wrong config): refused, nothing written; the same config
    (a new plan, or a re-measured one) is still added."""
    pytest.importorskip("torch")
    from hybrid.bench.campaign import record_results

    sp = CampaignSpace(tables=(3, 4), rows=(500, 3000), batch_sizes=(32,), pooling=(1, 3))
    a = generate_configs(1, seed=5, space=sp)[0]
    b = a.with_(batch_size_per_gpu=64)
    plans = campaign_plans(a, seed=0)
    first, second = list(plans)[:2]
    out = tmp_path / "results.csv"
    record_results(out, a, plans, [_fake_result(a, first)])
    stored = (tmp_path / "configs" / f"{a.name}.yaml").read_text()
    before = out.read_text()
    with pytest.raises(InvalidInputError, match="another config named"):
        record_results(out, b, plans, [_fake_result(b, second)])
    assert out.read_text() == before and (tmp_path / "configs" / f"{a.name}.yaml").read_text() == stored
    assert not (tmp_path / "plans" / a.name / f"{second}.yaml").exists()
    # replacing every row of the old config is no conflict; the same config resumes
    record_results(out, a, plans, [_fake_result(a, second)])
    assert len(read_results(out)) == 2
    record_results(out, b, plans, [_fake_result(b, first), _fake_result(b, second)])
    assert DLRMConfig.from_file(tmp_path / "configs" / f"{a.name}.yaml").batch_size_per_gpu == 64


def test_campaign_refuses_a_directory_of_another_campaign(tmp_path):
    pytest.importorskip("torch")
    from hybrid.bench.campaign import record_results

    sp = CampaignSpace(tables=(3, 4), rows=(500, 3000), batch_sizes=(32,), pooling=(1, 3))
    old = generate_configs(1, seed=5, space=sp)[0]
    record_results(tmp_path / "results.csv", old, campaign_plans(old, seed=0), [_fake_result(old, "size_greedy")])
    new = generate_configs(1, seed=6, space=sp)
    assert new[0].name == old.name and new[0] != old
    with pytest.raises(InvalidInputError, match="another --seed"):
        run_campaign(tmp_path, configs=new, space=sp, iters=2, warmup=1, progress=False)
    assert len(read_results(tmp_path)) == 1


def test_bench_dlrm_refuses_another_config_before_measuring(tmp_path, capsys):
    pytest.importorskip("torch")
    from hybrid.bench.campaign import record_results
    from hybrid.workloads.dlrm import write_document

    sp = CampaignSpace(tables=(3, 4), rows=(500, 3000), batch_sizes=(32,), pooling=(1, 3))
    a = generate_configs(1, seed=5, space=sp)[0]
    out = tmp_path / "results.csv"
    record_results(out, a, campaign_plans(a, seed=0), [_fake_result(a, "size_greedy")])
    write_document(a.with_(batch_size_per_gpu=64).to_dict(), tmp_path / "b.yaml")
    other_plan = tmp_path / "other.yaml"  # another plan name: the first row would stay, on the wrong config
    other_plan.write_text((tmp_path / "plans" / a.name / "size_greedy.yaml").read_text())
    assert main(["bench", "dlrm", str(tmp_path / "b.yaml"), "--plan", str(other_plan), "-o", str(out),
                 "--iters", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another config named" in err[0]
    assert len(read_results(out)) == 1


def test_bench_dlrm_output_is_checked_before_measuring_and_a_directory_takes_results_csv(tmp_path, capsys):
    """`-o` naming a CSV that is no results table failed only after the run, with configs/ and plans/ already
    written beside it; `-o out/` wrote a CSV file named `out`. Now the table is checked first (nothing written)
    and a directory means its results.csv, as `bench validate` reads it."""
    pytest.importorskip("torch")
    from hybrid.workloads.dlrm import write_document

    sp = CampaignSpace(ranks=1, tables=(2, 2), rows=(100, 200), batch_sizes=(16,), pooling=(1, 2))
    cfg = generate_configs(1, seed=3, space=sp)[0]
    write_document(cfg.to_dict(), tmp_path / "c.yaml")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    assert main(["bench", "dlrm", str(tmp_path / "c.yaml"), "--ranks", "1", "--iters", "1", "--warmup", "0",
                 "-o", str(tmp_path / "other.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing column" in err[0]
    assert not (tmp_path / "configs").exists() and not (tmp_path / "plans").exists()
    (tmp_path / "afile").write_text("")
    assert main(["bench", "dlrm", str(tmp_path / "c.yaml"), "--ranks", "1", "--iters", "1", "--warmup", "0",
                 "-o", str(tmp_path / "afile" / "r.csv")]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err
    assert main(["bench", "dlrm", str(tmp_path / "c.yaml"), "--ranks", "1", "--iters", "2", "--warmup", "0",
                 "--threads", "1", "-o", str(tmp_path / "out") + "/"]) == 0
    assert (tmp_path / "out").is_dir() and len(read_results(tmp_path / "out")) == 1
    assert (tmp_path / "out" / "configs" / f"{cfg.name}.yaml").is_file()


def test_a_config_name_that_is_a_path_is_refused_before_measuring(tmp_path, capsys):
    """The stored config and plans are named by the config's name: `name: ../../escaped` wrote escaped.yaml and
    escaped/<plan>.yaml two directories above the results table (`bench dlrm -o`), outside it."""
    pytest.importorskip("torch")
    from hybrid.bench.campaign import record_results
    from hybrid.workloads.dlrm import write_document

    sp = CampaignSpace(ranks=1, tables=(2, 2), rows=(100, 200), batch_sizes=(16,), pooling=(1, 2))
    cfg = generate_configs(1, seed=3, space=sp)[0]
    out = tmp_path / "a" / "b" / "res"
    with pytest.raises(InvalidInputError, match="name must be a non-empty string"):  # refused by the config itself
        cfg.with_(name="")
    for name in ("../../escaped", "x/y", ".."):
        write_document(cfg.with_(name=name).to_dict(), tmp_path / "c.yaml")
        assert main(["bench", "dlrm", str(tmp_path / "c.yaml"), "--ranks", "1", "--iters", "1", "--warmup", "0",
                     "-o", str(out) + "/"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"config name {name!r} cannot name the files stored" in err[0], err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["c.yaml"]
    with pytest.raises(InvalidInputError, match="cannot name the files stored"):
        record_results(tmp_path / "r.csv", cfg.with_(name="../up"), campaign_plans(cfg), [])


def test_campaign_system_without_model_is_refused(tmp_path, capsys):
    """`--system` only says where the --model search costs plans; alone it was ignored without a word."""
    assert main(["bench", "campaign", str(tmp_path / "c"), "--configs", "1", "--system", "DGX-A100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "give --model too" in err[0]
    assert not (tmp_path / "c").exists()


def test_bench_dlrm_replans_a_config_plan_written_for_another_rank_count(tmp_path, capsys):
    """`bench dlrm CONFIG --ranks N` ran the config's own plan, written for its `gpus`, as it was (with more ranks
    the extra ones idled while the stored config said N ranks); `simulate --gpus` plans afresh and says so, and so
    does the harness now."""
    pytest.importorskip("torch")
    from hybrid.workloads.dlrm import write_document

    sp = CampaignSpace(ranks=1, tables=(2, 2), rows=(100, 200), batch_sizes=(16,), pooling=(1, 2))
    cfg = generate_configs(1, seed=3, space=sp)[0]
    doc = {**cfg.to_dict(), "plan": {t.name: {"type": "table_wise", "ranks": [0]} for t in cfg.tables}}
    write_document(doc, tmp_path / "c.yaml")
    assert main(["bench", "dlrm", str(tmp_path / "c.yaml"), "--ranks", "2", "--iters", "1", "--warmup", "0",
                 "--json"]) == 0
    cap = capsys.readouterr()
    assert "the config's plan is for 1 ranks; 2 ranks use the size-lookup greedy plan" in cap.err
    out = json.loads(cap.out)
    assert out["plan_name"] == "size_lookup_greedy" and out["ranks"] == 2, out


def test_campaign_whose_configs_fail_exits_nonzero(tmp_path, monkeypatch, capsys):
    """Every config failing (here gloo told to use a network interface that does not exist, a real worker
    failure) exited 0 with "-> OUT/results.csv" although nothing was written: a script chaining `campaign &&
    validate` took it for a finished campaign. A partial failure also exits 2, naming how many failed, with the
    other configs' rows kept (a second run retries only the failed ones)."""
    pytest.importorskip("torch")
    from hybrid.bench.campaign import record_results

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "no-such-interface")  # inherited by the spawned workers
    args = ["bench", "campaign", str(tmp_path / "c"), "--configs", "2", "--seed", "5", "--ranks", "1", "--iters",
            "1", "--warmup", "0"]
    # the first config measured before (rows written as the harness writes them): only the second one runs here
    first = generate_configs(2, seed=5, space=CampaignSpace(ranks=1))[0]
    plans = campaign_plans(first, seed=5)
    record_results(tmp_path / "c" / "results.csv", first, plans, [_fake_result(first, p) for p in plans])
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "failed: c001:" in err and "error: 1 of 2 configs failed" in err and "no-such-interface" in err
    assert len(read_results(tmp_path / "c")) == len(plans)
    # nothing measured at all
    assert main(["bench", "campaign", str(tmp_path / "d"), "--configs", "1", "--ranks", "1", "--iters", "1",
                 "--warmup", "0"]) == 2
    cap = capsys.readouterr()
    assert "error: all 1 configs failed" in cap.err and "(no results written)" in cap.out
    assert not (tmp_path / "d" / "results.csv").exists()


def test_adagrad_share_sets_the_optimizer_and_nothing_else():
    """``--adagrad-share``: the share of configurations that train with sparse Adagrad (GPU sessions measure some
    all-Adagrad configurations for the coalesce's hottest-row term); a seed's configurations are otherwise the
    same whatever the share; a share outside [0, 1] is refused."""
    from dataclasses import replace as dc_replace

    from hybrid.bench.campaign import CampaignSpace, generate_configs
    from hybrid.errors import InvalidInputError

    base = generate_configs(6, seed=11, space=CampaignSpace.for_gpu(1))
    every = generate_configs(6, seed=11, space=CampaignSpace.for_gpu(1, adagrad_share=1.0))
    none = generate_configs(6, seed=11, space=CampaignSpace.for_gpu(1, adagrad_share=0.0))
    assert {c.optimizer for c in every} == {"adagrad"} and {c.optimizer for c in none} == {"sgd"}
    for a, b in zip(base, every, strict=True):
        assert dc_replace(a, optimizer="adagrad") == b
    # the GPU session's Adagrad configurations have skewed tables: a hot row for the coalesce to sum
    assert any(t.index_dist == "zipf" for c in every for t in c.tables)
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(InvalidInputError, match="adagrad share"):
            CampaignSpace(adagrad_share=bad)
