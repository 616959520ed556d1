"""DLRM config loading/validation and the per-rank iteration graph built from a sharding plan."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from hybrid.engine import Overheads, simulate
from hybrid.engine.costs import RooflineCostModel
from hybrid.errors import InvalidInputError
from hybrid.sharding.plan import ShardingPlan
from hybrid.workloads.dlrm import DLRMConfig
from hybrid.workloads.dlrm_graph import build_dlrm_graph, comm_volumes, shard_pieces

B, R, D, EB = 1024, 4, 64, 4


def config(**kw) -> DLRMConfig:
    doc = {
        "name": "t", "system": "DGX-H100", "gpus": R, "batch_size_per_gpu": B, "dtype": "fp32",
        "bottom_mlp": [128, 64], "top_mlp": [256, 1], "embedding_dim": D,
        "tables": [
            {"name": "big", "num_embeddings": 2_000_000, "pooling_factor": 10, "index_dist": "zipf", "zipf_alpha": 1.1},
            {"name": "mid", "num_embeddings": 100_000, "pooling_factor": 4},
            {"name": "rw", "num_embeddings": 400_001, "pooling_factor": 8},
            {"name": "cw", "num_embeddings": 50_000, "pooling_factor": 2},
            {"name": "dp", "num_embeddings": 1000, "pooling_factor": 1},
        ],
        "plan": {"big": {"type": "table_wise", "ranks": [3]}, "mid": {"type": "table_wise", "ranks": [0]},
                 "rw": {"type": "row_wise", "ranks": [0, 1, 2, 3]}, "cw": {"type": "column_wise", "ranks": [1, 2]},
                 "dp": {"type": "data_parallel"}},
    }
    doc.update(kw)
    return DLRMConfig.from_dict(doc)


def test_yaml_round_trip_and_generator(tmp_path):
    c = config()
    path = c.save(tmp_path / "c.yaml")
    again = DLRMConfig.from_file(path)
    assert again == c and again.plan == c.plan
    gen = DLRMConfig.from_dict({"num_tables": 40, "table_generator": {"seed": 3, "rows": [100, 1e6],
                                                                     "pooling": [1, 5]}})
    rows = np.array([t.num_embeddings for t in gen.tables])
    assert len(gen.tables) == 40 and rows.min() >= 100 and rows.max() <= 1e6 and len(set(rows)) > 30
    assert gen == DLRMConfig.from_dict({"num_tables": 40, "table_generator": {"seed": 3, "rows": [100, 1e6],
                                                                             "pooling": [1, 5]}})


@pytest.mark.parametrize("change, message", [
    ({"gpus": -2}, "gpus"),
    ({"batch_size_per_gpu": 0}, "batch_size_per_gpu"),
    ({"bottom_mlp": [128, 32]}, "dot interaction"),
    ({"optimizer": "adam"}, "optimizer"),
    ({"plan": {"ghost": {"type": "table_wise", "ranks": [0]}}}, "unknown table"),
    ({"plan": {"big": {"type": "table_wise", "ranks": [7]}}}, "out of range"),
    ({"plan": {"big": {"type": "column_wise", "ranks": [0, 1, 2]}}}, "divisible"),
    ({"plan": {"big": {"type": "diagonal", "ranks": [0]}}}, "sharding type"),
    ({"tables": [{"name": "x", "num_embeddings": -5}]}, "num_embeddings"),
    ({"tables": [{"name": "x", "num_embeddings": 10, "pooling_factor": float("nan")}]}, "pooling_factor"),
    ({"tables": [{"name": "x", "num_embeddings": 10, "rows": 3}]}, "unknown key"),
    ({"tabels": []}, "unknown key"),
    ({"name": ""}, "name must be a non-empty string"),
    ({"name": ["a", "b"]}, "name must be a non-empty string"),
    ({"name": {"a": 1}}, "name must be a non-empty string"),
])
def test_bad_configs_name_the_problem(change, message):
    with pytest.raises(InvalidInputError, match=message):
        config(**change)


def test_a_numeric_config_name_is_kept_as_text():
    assert config(name=2024).name == "2024"


def test_malformed_file_is_one_clear_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntables: [ {name: t0, num_embeddings: 10\n")
    with pytest.raises(InvalidInputError, match="malformed"):
        DLRMConfig.from_file(bad)


def test_per_rank_tables_follow_the_plan():
    c = config()
    per_rank = c.plan.per_rank_tables(c)
    names = [[t.name for t, _, _ in shards] for shards in per_rank]
    assert [n.count("big") for n in names] == [0, 0, 0, 1]  # table-wise on rank 3 only
    assert all("rw" in n and "dp" in n for n in names)
    assert [n.count("cw") for n in names] == [0, 1, 1, 0]
    rw_rows = [rows for shards in per_rank for t, rows, _ in shards if t.name == "rw"]
    assert sum(rw_rows) == 400_001 and max(rw_rows) - min(rw_rows) == 1
    assert {dim for shards in per_rank for t, _, dim in shards if t.name == "cw"} == {32}


def test_lookup_kernels_per_rank_match_the_plan(catalog):
    c = config()
    it = build_dlrm_graph(c, catalog=catalog)
    g = it.graph.compile()
    ops = g.ops
    fwd = [(int(g.rank[i]), ops.iloc[g.op_index[i]]) for i in range(g.n_real)
           if g.op_index[i] >= 0 and ops.iloc[g.op_index[i]]["op"] == "embedding_bag"
           and ops.iloc[g.op_index[i]]["direction"] == "fwd"]
    tables_per_rank = {r: sum(int(o["num_tables"]) for rr, o in fwd if rr == r) for r in range(R)}
    # rank 0: mid, rw, dp; rank 1: rw, cw, dp; rank 2: rw, cw, dp; rank 3: big, rw, dp
    assert tables_per_rank == {0: 3, 1: 3, 2: 3, 3: 3}
    sharded_batches = {int(o["batch_size"]) for _, o in fwd if int(o["embedding_dim"]) == D and o["num_tables"] >= 1}
    assert B * R in sharded_batches and B in sharded_batches  # global batch for sharded, local for dp


def test_all_to_all_volumes_match_hand_computation():
    c = config()
    vol = comm_volumes(c, shard_pieces(c, c.plan))
    out = B * D * EB  # pooled output of one table for one rank's batch
    half = B * (D // 2) * EB
    # rank 3 holds `big` (table-wise): sends its pooled output to the 3 other ranks
    assert vol.output_send[3] == pytest.approx(3 * out)
    # rank 1 holds half of `cw`: sends that half to 3 ranks
    assert vol.output_send[1] == pytest.approx(3 * half)
    # rank 0 receives big + its missing cw halves (2 halves) and keeps `mid` local
    assert vol.output_recv[0] == pytest.approx(out + 2 * half)
    # rank 3 receives mid + both cw halves
    assert vol.output_recv[3] == pytest.approx(out + 2 * half)
    assert vol.row_wise_bytes == pytest.approx(B * R * D * EB)
    assert vol.dp_grad_bytes == pytest.approx(1000 * D * EB)
    # index distribution: rank 0 sends 8-byte indices of its batch for big (10/sample), cw twice (2/sample
    # to each of 2 holders), rw 3/4 of 8/sample; plus one 8-byte bag length per sample for each of the 6 pieces
    # held elsewhere (big, 2 cw halves, 3 rw quarters)
    assert vol.input_send[0] == pytest.approx(B * 8 * (10 + 2 * 2 + 8 * 3 / 4 + 6), rel=1e-6)


def test_iteration_simulates_with_a_sane_breakdown(catalog):
    c = config()
    it = build_dlrm_graph(c, catalog=catalog)
    res = simulate(it.graph, RooflineCostModel(catalog))
    b = res.breakdown
    assert res.iteration_us > 0
    assert (b["compute_us"] > 0).all() and (b["comm_us"] > 0).all()
    assert np.all(b["exposed_comm_us"] <= b["comm_us"] + 1e-6)
    assert np.allclose(b["compute_us"] + b["exposed_comm_us"] + b["idle_us"], res.iteration_us)
    assert (b["collectives"] == b["collectives"].iloc[0]).all()  # every rank joins every collective
    names = set(res.nodes()["name"])
    assert {"output_dist all_to_all", "row_wise reduce_scatter", "row_wise all_gather",
            "embedding grad all_to_all"} <= names
    assert any(n.startswith("ddp all_reduce") for n in names)


def test_bigger_batch_takes_longer_and_adagrad_costs_more(catalog):
    model, zero = RooflineCostModel(catalog), Overheads.zero()  # GPU-bound view: host launches left out

    def t(**kw):
        return simulate(build_dlrm_graph(config(**kw), catalog=catalog).graph, model, zero).iteration_us

    t0, t1 = t(), t(batch_size_per_gpu=8192)
    assert t1 > 1.5 * t0  # 8x the samples; small kernels keep a fixed latency floor
    assert t(optimizer="adagrad", batch_size_per_gpu=8192) > t1
    # with the default host overheads this small model is launch-bound: the critical path is mostly CPU
    cp = simulate(build_dlrm_graph(config(), catalog=catalog).graph, model).critical_path_summary()
    assert cp["cpu"] > cp["compute"]


def test_plan_file_round_trip(tmp_path):
    c = config()
    p = c.plan.save(tmp_path / "plan.yaml")
    assert ShardingPlan.from_file(p) == c.plan
    # a full config file also loads as a plan
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(c.to_dict()))
    assert ShardingPlan.from_file(tmp_path / "c.yaml") == c.plan


def _cpu_catalog(catalog):
    """The packaged catalog plus a one-core CPU and its gloo system (like a `hybrid profile` bundle)."""
    from hybrid.hardware.cpu import describe_local_cpu

    return catalog.with_device(describe_local_cpu())


def test_graph_nodes_carry_the_harness_phases(catalog):
    from hybrid.workloads.dlrm_graph import NESTED_PHASES, PHASES

    it = build_dlrm_graph(config(), catalog=catalog)
    g = it.graph.compile()
    assert set(g.phase_names) == set(PHASES) | set(NESTED_PHASES)
    named = {}
    for i in range(g.n_real):
        named.setdefault(g.phase_names[g.phase[i]], set()).add(g.names[i])
    assert {"input_dist all_to_all (value counts)", "input_dist all_to_all"} <= named["input_dist"]
    assert "output_dist all_to_all" in named["exchange_fwd"] and "row_wise reduce_scatter" in named["exchange_fwd"]
    assert {"embedding grad all_to_all", "row_wise all_gather"} <= named["exchange_bwd"]
    assert any(n.startswith("embedding fwd dp") for n in named["dense_fwd"])  # dp tables live in the DDP module
    assert "embedding sgd update" in named["optimizer"]
    res = simulate(it.graph, RooflineCostModel(catalog))
    pt = res.phase_times(PHASES, NESTED_PHASES, steady_state=True)
    # steady state: every rank's phases add up to the iteration (waiting included)
    assert np.allclose(pt[list(PHASES)].sum(axis=1), res.iteration_us)
    assert (pt["exchange_bwd"] > 0).all() and (pt["exchange_bwd"] <= pt["backward"] + 1e-6).all()


def test_gpu_overlaps_comm_and_cpu_does_not(catalog):
    gpu = build_dlrm_graph(config(), catalog=catalog)
    assert gpu.info["comm_overlap"] == 1.0 and not gpu.graph.synchronous_host
    assert not any("interference" in n for n in gpu.graph.compile().names)
    cat = _cpu_catalog(catalog)
    cpu_key = [k for k, d in cat.devices.items() if d.kind == "cpu" and k not in catalog.devices][0]
    cpu = build_dlrm_graph(config(system=cpu_key), catalog=cat)
    assert cpu.info["comm_overlap"] == 0.0 and cpu.graph.synchronous_host
    model, ov = RooflineCostModel(cat), Overheads.zero()
    t_cpu = simulate(cpu.graph, model, ov).iteration_us
    t_hidden = simulate(build_dlrm_graph(config(system=cpu_key), catalog=cat, comm_overlap=1.0).graph, model,
                        ov).iteration_us
    assert t_cpu > t_hidden  # the DDP all-reduces no longer hide behind the backward pass
    with pytest.raises(InvalidInputError, match="comm_overlap"):
        build_dlrm_graph(config(), catalog=catalog, comm_overlap=2.0)


def _cpu_bundle():
    """(catalog, 2-rank CPU config, its plan): the project's CPU profile bundle (``cpu-amd-epyc-1c`` and its
    ``cpu-amd-epyc-1c-gloo`` system, gloo collectives as profiled) and the first config of the CPU DLRM campaign."""
    from hybrid.data.bundle import load_bundle
    from hybrid.data.paths import project_datasets_dir

    root = project_datasets_dir()
    bundle, runs = root / "cpu-amd-epyc-1c", root / "dlrm-cpu-2rank"
    if not (bundle / "catalog.toml").is_file() or not (runs / "configs" / "c000.yaml").is_file():
        pytest.skip("committed CPU profile bundle / DLRM campaign absent")
    cat = load_bundle(bundle)[1]
    return cat, DLRMConfig.from_file(runs / "configs" / "c000.yaml"), ShardingPlan.from_file(
        runs / "plans" / "c000" / "size_greedy.yaml")


def _all_reduce_us(it, model) -> float:
    """Predicted time (us) of every DDP all-reduce of one rank of the iteration ``it``."""
    g = it.graph.compile()
    rows = [g.op_index[i] for i in range(g.n_real) if g.rank[i] == 0 and g.op_index[i] >= 0
            and g.ops.iloc[g.op_index[i]]["op"] == "all_reduce"]
    assert rows
    return float(model.predict(g.ops.iloc[rows].reset_index(drop=True))["time_us"].sum())


def test_a_bare_cpu_device_prices_its_collectives_on_its_gloo_system(tmp_path, monkeypatch, capsys):
    """A DLRM on a bare CPU device (``--system cpu-amd-epyc-1c``, not its ``-gloo`` system) prices the ranks'
    collectives on the catalog's gloo system of that CPU, as the trace workload does
    (:func:`hybrid.ops.roofline.cpu_collective_system`): before, a generic 8-GPU node's PCIe gen3 link priced them,
    31 us of DDP all-reduce per iteration of the CPU campaign's c000 (633 us on the profiled gloo system), the
    iteration 10.2 ms instead of 14.0 ms. Without such a system the note says why the generic node stays."""
    from hybrid.cli.main import main
    from hybrid.data.paths import project_datasets_dir
    from hybrid.hardware.catalog import CATALOG_ENV, Catalog
    from hybrid.sharding.search import estimate_costs

    cat, cfg, plan = _cpu_bundle()
    model = RooflineCostModel(cat)
    by = {s: build_dlrm_graph(cfg.with_(system=s, plan=None), plan, cat) for s in ("cpu-amd-epyc-1c",
                                                                                   "cpu-amd-epyc-1c-gloo")}
    dev, gloo = by["cpu-amd-epyc-1c"], by["cpu-amd-epyc-1c-gloo"]
    assert dev.target.system == dev.info["collective_system"] == "cpu-amd-epyc-1c-gloo"
    assert "cpu-amd-epyc-1c-gloo" in dev.info["notes"][0] and gloo.info["notes"] == []
    t_dev, t_gloo = _all_reduce_us(dev, model), _all_reduce_us(gloo, model)
    assert t_dev == pytest.approx(t_gloo, rel=1e-12) and t_gloo > 300  # two 226 us-latency steps at least
    zero = Overheads.zero()
    assert simulate(dev.graph, model, zero).iteration_us == pytest.approx(
        simulate(gloo.graph, model, zero).iteration_us, rel=1e-12)
    # the plan search prices its collectives there too
    grids = [estimate_costs(cfg.with_(system=s, plan=None), model, it.target, 1e12).grids
             for s, it in (("cpu-amd-epyc-1c", dev), ("cpu-amd-epyc-1c-gloo", gloo))]
    assert all(np.array_equal(grids[0][op], grids[1][op]) for op in grids[1])
    # no gloo system in the catalog: the generic node stays, and the note says why (its PCIe link is ~20x faster)
    bare = Catalog(cat.devices, {})
    generic = build_dlrm_graph(cfg.with_(system="cpu-amd-epyc-1c", plan=None), plan, bare)
    assert generic.info["collective_system"] == "cpu-amd-epyc-1c"
    assert "no system of it in the catalog" in generic.info["notes"][0]
    assert _all_reduce_us(generic, RooflineCostModel(bare)) < t_gloo / 5
    # the CLI says so (stderr and --json notes), with the bundle's catalog as the catalog
    monkeypatch.setenv(CATALOG_ENV, str(project_datasets_dir() / "cpu-amd-epyc-1c" / "catalog.toml"))
    path = cfg.with_(plan=None).save(tmp_path / "c.yaml")
    plan.save(plan_path := tmp_path / "plan.yaml")
    assert main(["simulate", str(path), "--plan", str(plan_path), "--system", "cpu-amd-epyc-1c", "--json"]) == 0
    res = capsys.readouterr()
    s = json.loads(res.out)
    assert s["system"] == "cpu-amd-epyc-1c-gloo" and s["device"] == "cpu-amd-epyc-1c"
    assert any("cpu-amd-epyc-1c-gloo" in n for n in s["notes"]) and "cpu-amd-epyc-1c-gloo" in res.err


def test_optimizer_steps_follow_the_optimizer(catalog):
    def opt_ops(**kw):
        g = build_dlrm_graph(config(**kw), catalog=catalog).graph.compile()
        rows = [(g.names[i], g.ops.iloc[g.op_index[i]]) for i in range(g.n_real)
                if g.rank[i] == 0 and g.op_index[i] >= 0 and g.phase_names[g.phase[i]] == "optimizer"]
        return rows, g

    sgd, _ = opt_ops()
    ada, g = opt_ops(optimizer="adagrad")
    c = config()
    n_dense = 2 * len(c.mlp_layers()) + 1  # weight + bias per layer, one fused data-parallel table group
    assert sum(n == "dense optimizer step" for n, _ in sgd) == n_dense
    assert {o["variant"] for n, o in sgd if n == "dense optimizer step"} == {"sgd"}
    assert {o["variant"] for n, o in ada if n == "dense optimizer step"} == {"adagrad"}
    # the dense step covers the data-parallel table: 1000 rows x 64
    assert max(float(o["elements"]) for n, o in ada if n == "dense optimizer step") == 1000 * D
    # sparse Adagrad: coalesce (embedding backward row) + Adagrad over the unique rows, per fused group
    assert any(n == "embedding adagrad coalesce" and o["op"] == "embedding_bag" for n, o in ada)
    upd = [o for n, o in ada if n == "embedding adagrad update"]
    assert upd and all(o["variant"] == "adagrad" for o in upd)
    model = RooflineCostModel(catalog)
    zero = Overheads.zero()
    t = {opt: simulate(build_dlrm_graph(config(optimizer=opt), catalog=catalog).graph, model, zero).iteration_us
         for opt in ("sgd", "adagrad")}
    assert t["adagrad"] > t["sgd"]


def test_lookup_rows_name_the_profiled_variant_so_the_fitted_reference_prices_them():
    """Every embedding row of the graph names its (direction, variant) like the profiler's rows; a forward row
    without ``variant`` fell outside the embedding model's fitted ``fwd|sum`` reference (roofline instead) and
    was predicted ~20% lower by feature version 4 on the DLRM validation campaigns."""
    from hybrid.corrections.embedding_xgb import EmbeddingXGB, _groups
    from hybrid.data.bundle import load_bundle
    from hybrid.data.paths import project_datasets_dir
    from hybrid.engine.costs import integral_shapes
    from hybrid.ops.roofline import roofline

    bundle = project_datasets_dir() / "cpu-amd-epyc-1c"
    if not (bundle / "measurements.csv").is_file():
        pytest.skip("committed CPU profile bundle absent")
    table, cat = load_bundle(bundle)
    prof = table[table["op"] == "embedding_bag"].reset_index(drop=True)
    model = EmbeddingXGB()
    model.coefficients = model.fit_reference(prof, cat)  # the cost model alone (NNLS, no trees): fast
    system = next(k for k in cat.systems if "epyc" in k)
    g = build_dlrm_graph(config(system=system), catalog=cat).graph.compile()
    ops = integral_shapes(g.ops[g.ops["op"] == "embedding_bag"].reset_index(drop=True))
    assert len(ops) and ops["variant"].notna().all()
    assert set(ops.loc[ops["direction"] == "fwd", "variant"]) == {"sum"}
    assert set(_groups(ops)) <= set(model.coefficients), set(_groups(ops))
    # priced by the fitted cost model, not the roofline reference it falls back to
    base = roofline(ops, cat)
    ref = model.reference_us(ops, base, cat)
    assert (np.abs(np.log(ref / model.roofline_reference_us(ops, base, cat))) > 1e-6).all()


# ------------------------------------------------------------------ rows an int64 index addresses; unusual values
def test_row_counts_beyond_int64_are_refused_naming_table_and_key(tmp_path):
    """num_embeddings: 1e30 printed a 25-digit GiB figure in the fit error: refused at validation instead."""
    from hybrid.workloads.dlrm import MAX_ROWS

    with pytest.raises(InvalidInputError, match=r"table 'x': num_embeddings .*int64.*2\*\*63 - 1"):
        config(tables=[{"name": "x", "num_embeddings": 1e30}], plan=None)
    with pytest.raises(InvalidInputError, match="table_generator.rows.*int64"):
        DLRMConfig.from_dict({"num_tables": 2, "table_generator": {"rows": [10, 2**64]}})
    assert config(tables=[{"name": "x", "num_embeddings": MAX_ROWS}], plan=None).tables[0].num_embeddings == MAX_ROWS
    path = tmp_path / "huge.yaml"
    path.write_text("gpus: 8\ntables:\n  - {name: t0, num_embeddings: 1e30}\n")
    from hybrid.cli.main import main

    assert main(["simulate", str(path)]) != 0


def test_integers_past_what_the_op_tables_price_are_refused_at_load(tmp_path, capsys):
    """The op tables the cost models price take integers below 2**62 (and the graph rounds op shapes to 6 digits):
    a table of 2**62 rows, or a global batch of 2**62, loaded and then failed inside ``hybrid shard`` (or ``simulate``
    of host-placed tables) as "predict: row 6 (CSV line 7), column 'num_embeddings': ... is too large"."""
    from hybrid.cli.main import main
    from hybrid.workloads.dlrm import MAX_ROWS

    with pytest.raises(InvalidInputError, match=r"table 'x': num_embeddings 4611686018427387392 is more rows than "
                                                r"hybrid prices \(at most 10\*\*18"):
        config(tables=[{"name": "x", "num_embeddings": 2**62 - 512}], plan=None)
    with pytest.raises(InvalidInputError, match=r"batch_size_per_gpu 576,460,752,303,423,488 x gpus 4 is a global "
                                                r"batch too large"):
        config(batch_size_per_gpu=2**59, plan=None)
    with pytest.raises(InvalidInputError, match=r"embedding_dim 2000000000000000000 is too large"):
        config(embedding_dim=2 * 10**18, plan=None)
    # the largest accepted table is priced: on a bare GPU (host memory unchecked) in host memory, row-wise
    path = tmp_path / "host.yaml"
    path.write_text(f"system: H100-SXM\ngpus: 2\nembedding_placement: host\ntables:\n"
                    f"  - {{name: t0, num_embeddings: {MAX_ROWS}}}\n  - {{name: t1, num_embeddings: {MAX_ROWS}}}\n")
    for args in (["simulate", str(path), "--json"], ["shard", str(path), "--strategy", "greedy", "--json"]):
        assert main(args) == 0, capsys.readouterr().err
        capsys.readouterr()


@pytest.mark.parametrize("dtype", ["fp8", "fp64"])
def test_fp8_and_fp64_training_dtypes_warn_how_they_are_priced(dtype):
    from hybrid.errors import WorkloadWarning

    with pytest.warns(WorkloadWarning, match=f"dtype {dtype}: published DLRM training.*priced as given"):
        c = config(dtype=dtype)
    assert c.dtype == dtype  # priced as given, not refused


def test_usual_dtypes_and_pooling_do_not_warn():
    import warnings

    from hybrid.errors import WorkloadWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", WorkloadWarning)
        for dtype in ("fp32", "tf32", "fp16", "bf16"):
            config(dtype=dtype)
        config(plan=None, tables=[{"name": "x", "num_embeddings": 10, "pooling_factor": 0.3}])  # often-empty feature


def test_a_pooling_factor_below_the_minimum_warns_naming_the_table():
    from hybrid.errors import WorkloadWarning

    with pytest.warns(WorkloadWarning, match=r"table\(s\) 'x' \(1e-09\): pooling_factor below 0.001"):
        config(plan=None, tables=[{"name": "x", "num_embeddings": 10, "pooling_factor": 1e-9}])


@pytest.mark.parametrize("key, value", [("dcn_layers", 2), ("dcn_low_rank", 32)])
def test_dcn_keys_without_a_dcn_interaction_warn_that_they_are_ignored(key, value):
    """``dcn_layers`` / ``dcn_low_rank`` with ``interaction: dot`` (or cat) changed nothing and said nothing: a user
    who forgot ``interaction: dcn`` got the dot model's time."""
    import warnings

    from hybrid.errors import WorkloadWarning

    with pytest.warns(WorkloadWarning, match=f"{key} applies to interaction: dcn only.*ignored"):
        c = config(**{key: value})
    assert c.mlp_layers() == config().mlp_layers()
    with warnings.catch_warnings():
        warnings.simplefilter("error", WorkloadWarning)
        dcn = config(interaction="dcn", **{key: value})  # where it applies: no warning
    assert len(dcn.mlp_layers()) > len(c.mlp_layers())


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_config_saved_with_a_byte_order_mark_loads(tmp_path, suffix):
    """Windows editors save UTF-8 with a BOM: a JSON config was "malformed ... Unexpected UTF-8 BOM"."""
    import json

    doc = config().to_dict()
    path = tmp_path / f"c{suffix}"
    path.write_text(json.dumps(doc), encoding="utf-8-sig")
    assert DLRMConfig.from_file(path) == config()


def test_breakdown_columns_add_up_as_the_docs_say(catalog):
    """docs/engine.md: per rank compute + exposed comm + idle = the iteration; host time runs beside them on the
    CPU (not in that sum) and the critical path's parts add up to the iteration."""
    res = simulate(build_dlrm_graph(config(), catalog=catalog).graph, RooflineCostModel(catalog))
    b = res.breakdown
    assert np.allclose(b["compute_us"] + b["exposed_comm_us"] + b["idle_us"], res.iteration_us)
    assert np.allclose(b["exposed_comm_us"] + b["overlapped_comm_us"], b["comm_us"])
    assert (b["host_us"] > 0).all() and (b["host_us"] <= res.iteration_us + 1e-9).all()
    assert sum(res.critical_path_summary().values()) == pytest.approx(res.iteration_us)


def test_a_data_parallel_table_keeps_the_first_ddp_bucket():
    """The data-parallel tables' all-reduce counted as DDP's first bucket: the dense gradients after it lost the
    1 MiB first bucket and went as one 1.29 MB bucket after the last layer (named ``bucket 1``, no ``bucket 0``),
    instead of 1.26 MB as soon as the top MLP and two bottom layers are done and 28.7 kB at the end."""
    base = {"system": "DGX-H100", "gpus": 2, "tables": [{"name": "t0", "num_embeddings": 100_000},
                                                        {"name": "t1", "num_embeddings": 1000}]}
    c = DLRMConfig.from_dict(base)

    def dense_buckets(plan: dict) -> list[tuple[str, float]]:
        g = build_dlrm_graph(c, ShardingPlan.from_dict(plan)).graph.compile()
        return [(g.names[i], g.args[i]["bytes"]) for i in range(g.n_real)
                if g.rank[i] == 0 and g.names[i].startswith("ddp all_reduce bucket")]

    tablewise = dense_buckets({"t0": 0, "t1": 1})
    with_dp = dense_buckets({"t0": 0, "t1": "data_parallel"})
    assert tablewise == [("ddp all_reduce bucket 0", 1256708.0), ("ddp all_reduce bucket 1", 28672.0)]
    assert with_dp == tablewise
    assert sum(b for _, b in with_dp) == c.dense_params() * c.dtype_bytes


def test_a_data_parallel_table_backward_zero_fills_its_gradient_and_steps_it_once(catalog):
    """A replicated table (``nn.EmbeddingBag(sparse=False)`` under DDP) forms a dense table-sized gradient in the
    backward (zero fill: one pass over 1M x 64 FP32 = 256 MB) and is stepped once by the dense optimizer (read
    the gradient, read + write the weights: three passes). Its backward was priced as if sparse (touched rows only:
    4.4 us on an H100 instead of >= 76 us for the zero fill), and the fix must not count the update twice."""
    rows, dim = 1_000_000, 64
    c = config(tables=[{"name": "big", "num_embeddings": 2_000_000, "pooling_factor": 10},
                       {"name": "dp", "num_embeddings": rows, "pooling_factor": 2}],
               plan={"big": {"type": "table_wise", "ranks": [0]}, "dp": {"type": "data_parallel"}})
    g = build_dlrm_graph(c, catalog=catalog).graph.compile()
    res = simulate(g, RooflineCostModel(catalog), Overheads.zero())
    dur = {g.names[i]: res.durations[i] for i in range(g.n_real) if g.rank[i] == 0}
    table_us = rows * dim * EB / catalog.device(catalog.systems["DGX-H100"].device).mem_bw * 1e6  # one pass: 76 us
    bwd = dur["embedding bwd dp (1 tables, dim 64)"]
    # zero fill + scatter-add of B x 2 lookups (a few us), not the three passes of the update
    assert table_us <= bwd <= 1.1 * table_us, (bwd, table_us)
    steps = [res.durations[i] for i in range(g.n_real) if g.rank[i] == 0 and g.names[i] == "dense optimizer step"]
    assert max(steps) == pytest.approx(3 * table_us, rel=0.02)  # the update: once, in the optimizer phase


def test_a_data_parallel_tables_optimizer_step_moves_the_tables_dtype(catalog):
    """Mixed precision with FP32 tables (DeepLearningExamples' AMP: ``dtype: fp16``, ``embedding_dtype: fp32``): the
    dense optimizer step over a replicated table reads and writes FP32 weights and gradients (its all-reduce already
    sent FP32 gradients); it was priced in the dense dtype, half the bytes."""
    rows = 1_000_000
    c = config(dtype="fp16", embedding_dtype="fp32",
               tables=[{"name": "big", "num_embeddings": 2_000_000, "pooling_factor": 10},
                       {"name": "dp", "num_embeddings": rows, "pooling_factor": 2}],
               plan={"big": {"type": "table_wise", "ranks": [0]}, "dp": {"type": "data_parallel"}})
    g = build_dlrm_graph(c, catalog=catalog).graph.compile()
    steps = [g.ops.iloc[g.op_index[i]] for i in range(g.n_real)
             if g.rank[i] == 0 and g.names[i] == "dense optimizer step"]
    table = [o for o in steps if float(o["elements"]) == rows * D]
    assert len(table) == 1 and table[0]["dtype"] == "fp32"
    assert {o["dtype"] for o in steps if float(o["elements"]) != rows * D} == {"fp16"}
    res = simulate(g, RooflineCostModel(catalog), Overheads.zero())
    dur = max(res.durations[i] for i in range(g.n_real) if g.rank[i] == 0 and g.names[i] == "dense optimizer step")
    bw = catalog.device(catalog.systems["DGX-H100"].device).mem_bw
    assert dur == pytest.approx(3 * rows * D * 4 / bw * 1e6, rel=0.02)  # 3 passes of 256 MB: 229 us, not 115


def test_a_data_parallel_tables_gradient_is_one_ddp_bucket_not_split(catalog):
    """DDP never splits a parameter across buckets: the fused replicated table (one ``nn.EmbeddingBag`` per dim,
    1M x 64 FP32 = 256 MB of gradient) is one all-reduce; it went as ten all-reduces of at most 25 MiB."""
    c = config(tables=[{"name": "big", "num_embeddings": 2_000_000, "pooling_factor": 10},
                       {"name": "dp", "num_embeddings": 1_000_000, "pooling_factor": 2}],
               plan={"big": {"type": "table_wise", "ranks": [0]}, "dp": {"type": "data_parallel"}})
    g = build_dlrm_graph(c, catalog=catalog).graph.compile()
    ars = [float(g.ops.iloc[g.op_index[i]]["size_bytes"]) for i in range(g.n_real)
           if g.rank[i] == 0 and g.names[i].startswith("ddp all_reduce dp tables")]
    assert ars == pytest.approx([1_000_000 * D * EB], rel=1e-6)


def test_simulate_cli_reports_the_steady_state_of_overlapped_iterations(tmp_path, capsys):
    """``hybrid simulate --overlap-iterations``: the steady state of a framework that overlaps consecutive
    iterations, each rank's busiest resource (compute, network or host), with the one-iteration critical path
    beside it."""
    from pathlib import Path

    from hybrid.cli.main import main

    example = Path(__file__).resolve().parents[1] / "experiments" / "configs" / "dlrm_example.yaml"
    args = ["simulate", str(example), "--system", "DGX-A100", "--gpus", "16", "--json"]
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "overlap_iterations" not in plain
    assert main([*args, "--overlap-iterations"]) == 0
    steady = json.loads(capsys.readouterr().out)
    assert steady["overlap_iterations"] is True
    assert steady["single_iteration_us"] == pytest.approx(plain["iteration_us"])
    assert steady["iteration_us"] < plain["iteration_us"]
    busiest = max(max(r["compute_us"], r["comm_us"], r["host_us"]) for r in steady["ranks"])
    assert steady["iteration_us"] == pytest.approx(busiest, rel=1e-3)  # (the table's values are rounded)
    assert main(args[:-1] + ["--overlap-iterations"]) == 0
    assert "steady state of overlapped iterations: bound by the rank" in capsys.readouterr().out


def test_prefetched_input_distribution_runs_beside_the_iteration(catalog):
    """A pipelined trainer (TorchRec's ``TrainPipelineSparseDist``, HugeCTR's embedding collection with
    ``train_inter_iteration_overlap``) distributes the next batch's indices on a stream of its own while this
    iteration runs on the batch distributed during the previous one: the lookups no longer wait for the index
    all-to-alls, which keep their volumes and cost."""
    cfg = config(system="DGX-A100", batch_size_per_gpu=4096, dtype="fp16")
    model = RooflineCostModel(catalog)
    plain, pre = (build_dlrm_graph(cfg, catalog=catalog, prefetch_input_dist=p) for p in (False, True))
    assert pre.info["prefetch_input_dist"] and "data_dist" in pre.info["streams"]
    assert not plain.info["prefetch_input_dist"] and "data_dist" not in plain.info["streams"]
    rp, rq = (simulate(it.graph, model, Overheads.zero()) for it in (plain, pre))
    for res in (rp, rq):
        nodes = res.nodes()
        mine = nodes[nodes["rank"] == 0]
        payload = mine[mine["name"] == "input_dist all_to_all"]
        lookup = mine[mine["name"].str.startswith("embedding fwd (")]
        assert len(payload) == 1 and len(lookup) >= 1
        waits = bool(lookup["start_us"].min() >= payload["end_us"].iloc[0] - 1e-9)
        assert waits is (res is rp)
        assert (payload["stream"].iloc[0] == "data_dist") is (res is rq)
    durations = [res.nodes().query("name == 'input_dist all_to_all'")["duration_us"].sum() for res in (rp, rq)]
    assert durations[0] == pytest.approx(durations[1]) and durations[0] > 0
    assert rq.iteration_us < rp.iteration_us
    # one rank has nothing to distribute ahead: the flag changes nothing there
    one = config(system="DGX-A100", gpus=1, plan={**{t: {"type": "table_wise", "ranks": [0]}
                                                        for t in ("big", "mid", "rw", "cw")},
                                                     "dp": {"type": "data_parallel"}})
    a, b = (simulate(build_dlrm_graph(one, catalog=catalog, prefetch_input_dist=p).graph, model, Overheads.zero())
            for p in (False, True))
    assert a.iteration_us == pytest.approx(b.iteration_us)
