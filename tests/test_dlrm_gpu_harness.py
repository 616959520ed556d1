"""GPU runs of the DLRM harness: mapping ``local-cuda`` onto the bundle's GPU, the harness-specific work the
graph adds on GPUs (and, as data, on CPUs), and phases cut by the host clock."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid.bench.campaign import load_pair, read_results
from hybrid.bench.validate import EnginePredictor, _bundle_system, validate_campaign
from hybrid.data.bundle import load_bundle
from hybrid.engine.costs import RooflineCostModel
from hybrid.engine.graph import COMPUTE, HOST, OVERHEAD_CATEGORIES, TaskGraph
from hybrid.engine.overheads import Overheads
from hybrid.engine.simulate import node_durations, simulate
from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import default_catalog
from hybrid.workloads.dlrm_graph import HARNESS_WORK, build_dlrm_graph, harness_host_op_counts

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "datasets" / "dlrm-h100-1gpu"
BUNDLE = ROOT / "datasets" / "H100-SXM"


def small_campaign(tmp_path: Path, configs: tuple[str, ...] = ("c000", "c002")) -> Path:
    """A copy of two configs of the committed H100 campaign (both plans each)."""
    table = read_results(RUNS / "results.csv")
    table = table[table["config_name"].isin(configs)]
    for c in configs:
        (tmp_path / "configs").mkdir(exist_ok=True)
        shutil.copy(RUNS / "configs" / f"{c}.yaml", tmp_path / "configs" / f"{c}.yaml")
        shutil.copytree(RUNS / "plans" / c, tmp_path / "plans" / c)
    table.to_csv(tmp_path / "results.csv", index=False)
    return tmp_path / "results.csv"


def test_bundle_of_a_known_gpu_names_it_from_meta():
    table, cat = load_bundle(BUNDLE)
    assert _bundle_system(cat, BUNDLE, table) == "H100-SXM"


def test_bundle_with_two_devices_and_no_meta_is_ambiguous(tmp_path):
    m = pd.read_csv(BUNDLE / "measurements.csv", low_memory=False).head(4).copy()
    m.loc[m.index[:2], "device"] = "A100-SXM4-80GB"
    m.to_csv(tmp_path / "measurements.csv", index=False)
    table, cat = load_bundle(tmp_path)
    with pytest.raises(InvalidInputError, match="several devices"):
        _bundle_system(cat, tmp_path, table)
    m["device"] = "A100-SXM4-80GB"  # one device: that one
    m.to_csv(tmp_path / "measurements.csv", index=False)
    table, cat = load_bundle(tmp_path)
    assert _bundle_system(cat, tmp_path, table) == "A100-SXM4-80GB"


def test_local_cuda_runs_need_a_target(tmp_path):
    results = small_campaign(tmp_path)
    cat = default_catalog()
    with pytest.raises(InvalidInputError, match="local-cuda.*--system"):
        validate_campaign(results, EnginePredictor("roofline", RooflineCostModel(cat), cat, None))
    cat, cpu = cpu_catalog()
    with pytest.raises(InvalidInputError, match="measured on 'cuda'"):
        validate_campaign(results, EnginePredictor("roofline", RooflineCostModel(cat), cat, cpu))
    rep = validate_campaign(results, EnginePredictor("roofline", RooflineCostModel(cat), cat, "H100-SXM"),
                            fit_overheads=False)
    assert (rep.table["predicted_ms"] > 0).all() and rep.success["n_configs"] == 2
    # host-clock phases: the last phase runs to the end of the iteration, every phase is non-negative
    assert (rep.table["pred_optimizer_ms"] > 0).all()
    phases = rep.table[[f"pred_{p}_ms" for p in ("input_dist", "lookup_fwd", "exchange_fwd", "dense_fwd",
                                                 "backward", "optimizer")]]
    assert (phases >= 0).all().all()
    assert phases.sum(axis=1).to_numpy() == pytest.approx(rep.table["predicted_ms"].to_numpy(), rel=1e-9)


def test_cli_rejects_a_cpu_target_for_gpu_runs(tmp_path, capsys):
    from hybrid.cli.main import main

    results = small_campaign(tmp_path, ("c002",))
    # --roofline without a bundle predicts on the newest CPU bundle's system: not what these runs ran on
    assert main(["bench", "validate", str(results), "--roofline", "--json"]) == 2
    assert "measured on 'cuda'" in capsys.readouterr().err


def cpu_catalog():
    """The packaged catalog plus the committed CPU profile's device (the packaged one lists GPUs only)."""
    _, cat = load_bundle(ROOT / "datasets" / "cpu-amd-epyc-1c")
    return cat, next(k for k, d in cat.devices.items() if d.kind == "cpu")


def _names(config, plan, system: str, harness: bool, catalog=None) -> Counter:
    it = build_dlrm_graph(config.with_(system=system), plan, catalog or default_catalog(), harness=harness)
    return Counter(it.graph._names)


def test_harness_work_on_one_gpu():
    table = read_results(RUNS / "results.csv")
    row = table[(table["config_name"] == "c000") & (table["plan_name"] == "size_greedy")].iloc[0]
    cfg, plan = load_pair(RUNS, row)
    plain = _names(cfg, plan, "H100-SXM", False)
    harness = _names(cfg, plan, "H100-SXM", True)
    T = cfg.num_tables  # size_greedy: every table model-parallel, one view each of the received block
    dims = len({t.embedding_dim for t in cfg.tables})  # one fused table per dim
    assert not any("feature slice" in n for n in plain)
    assert harness["feature slice bwd zeros (block from rank 0)"] == T
    assert harness["feature slice bwd accumulate (block from rank 0)"] == T - 1  # the first gradient is taken
    assert harness["input_dist value counts to host (.cpu(): waits for the GPU)"] == 1
    assert harness["sparse grad coalesce: unique rows to host (waits for the GPU)"] == dims
    assert harness["output_dist all_to_all (local copy)"] == 1 and harness["input_dist payload (local copy)"] == 1
    # the added work makes the iteration longer, never shorter
    cat = default_catalog()
    a = simulate(build_dlrm_graph(cfg.with_(system="H100-SXM"), plan, cat).graph).iteration_us
    b = simulate(build_dlrm_graph(cfg.with_(system="H100-SXM"), plan, cat, harness=True).graph).iteration_us
    assert b > a


def test_harness_host_on_a_gpu_is_priced_op_by_op():
    """On a GPU the harness graph prices its eager host as traced GPU steps are (``host_op_us`` per host op,
    ``kernel_launch_us`` per kernel launch, a collective call its launch): c000 size_greedy (39 table-wise tables in
    4 fused tables, cat, SGD, 4 linear layers) issues 1,475 host ops an iteration on a GPU (HARNESS_HOST_OPS); the
    per-category lumps (a launch's dispatch, optimizer.step's 80 us, the iteration's 100 us) are gone."""
    table = read_results(RUNS / "results.csv")
    row = table[(table["config_name"] == "c000") & (table["plan_name"] == "size_greedy")].iloc[0]
    cfg, plan = load_pair(RUNS, row)
    g = build_dlrm_graph(cfg.with_(system="H100-SXM"), plan, default_catalog(), harness=True).graph.compile()
    assert g.host_ops is not None
    # input 28 + 21x4, lookups 7x4, exchange 9 + 2x39 + 8x4 + 1, dense fwd 28 + 12x4 + 3x39, backward 15 + 14x39 +
    # 58x4 + 53x4, optimizer 4 + 3x4 + 1 (sparse SGD's host-op equivalents on a GPU; a CPU records 12 a table)
    assert g.host_ops.sum() == 112 + 28 + 120 + 193 + 1005 + 17 == 1475
    counts = harness_host_op_counts(cfg, plan)
    for phase, n in counts.items():
        assert g.host_ops[g.phase == g.phase_names.index(phase)].sum() == pytest.approx(n), phase
    kernels = int(np.sum(g.kind == COMPUTE))
    assert g.launches.sum() == kernels  # one launch per kernel node
    o = Overheads()
    host = node_durations(g, None, o)[g.stream == g.stream_names.index((0, HOST))]
    n_coll = int(np.sum(g.overhead == OVERHEAD_CATEGORIES.index("collective_launch")))
    assert n_coll == 4  # one rank: value counts, payload, the pooled exchange and its backward
    assert host.sum() == pytest.approx(1475 * o.host_op_us + kernels * o.kernel_launch_us
                                       + n_coll * o.collective_launch_us)
    # the learned dispatch of a kernel profile no longer reaches the host: the same host time under any launch lump
    lumpy = Overheads(framework_us=50.0, optimizer_step_us=1000.0, iteration_us=1000.0)
    assert node_durations(g, None, lumpy)[g.stream == g.stream_names.index((0, HOST))].sum() == \
        pytest.approx(host.sum())
    # a CPU keeps its per-category host model (the host runs the kernels itself)
    cat, cpu = cpu_catalog()
    assert build_dlrm_graph(cfg.with_(system=cpu), plan, cat, harness=True).graph.compile().host_ops is None
    with pytest.raises(InvalidInputError, match="one rank"):
        harness_host_op_counts(cfg.with_(gpus=2), plan)
    # several GPUs: the counts are one rank's, the host stays per category (and says so)
    two = build_dlrm_graph(cfg.with_(system="H100-SXM", gpus=2), plan, default_catalog(), harness=True)
    assert two.graph.compile().host_ops is None and any("one rank" in n for n in two.info["notes"])


def test_harness_host_op_counts_match_a_profile_of_the_harness():
    """The counts the graph charges are what the harness's own loop records under torch.profiler on this CPU
    (one rank; tables and batch shrunk, which changes no op but a few data-dependent ones), phase by phase, once a
    CPU's kernel internals are added (``harness_host_op_counts(..., "cpu")``): one SGD/cat config with replicated
    tables and one Adagrad/dot config."""
    pytest.importorskip("torch")
    from hybrid.bench.dlrm_harness import host_ops_per_phase

    table = read_results(RUNS / "results.csv")
    for name, plan_name in (("c021", "dp_small"), ("c013", "dp_small")):
        row = table[(table["config_name"] == name) & (table["plan_name"] == plan_name)].iloc[0]
        cfg, plan = load_pair(RUNS, row)
        d = cfg.to_dict()
        for t in d["tables"]:
            t["num_embeddings"] = min(int(t["num_embeddings"]), 2000)
        small = type(cfg).from_dict({**d, "batch_size_per_gpu": 32, "system": "local-cpu"})
        recorded = host_ops_per_phase(small, plan)
        counted = harness_host_op_counts(cfg, plan, "cpu")
        for phase in ("lookup_fwd", "dense_fwd", "optimizer"):  # exact
            assert recorded[phase] == counted[phase], (name, phase)
        for phase in ("input_dist", "exchange_fwd", "backward"):
            assert recorded[phase] == pytest.approx(counted[phase], rel=0.1), (name, phase)
        total = sum(counted.values())
        assert sum(recorded[p] for p in counted) == pytest.approx(total, rel=0.03), name


def test_gpu_sparse_step_host_counts_come_from_the_gpu_profile(load_experiment):
    """A GPU's sparse SGD / Adagrad step costs the host what 3 / 62 traced ops do (HARNESS_HOST_OPS), read off the
    H100 profile's smallest sparse ``optimizer.step()`` calls against its dense SGD steps
    (``experiments/dlrm_validation/sparse_host.py``), not the 12 / 148 a CPU records: the constants are that
    derivation's, rounded, and the CPU keeps its own count (HARNESS_CPU_EXTRA_OPS adds the difference)."""
    from hybrid.workloads.dlrm_graph import HARNESS_CPU_EXTRA_OPS, HARNESS_HOST_OPS

    mod = load_experiment("dlrm_validation", "sparse_host.py")
    table, _ = load_bundle(ROOT / "datasets" / "H100-SXM")
    got = mod.host_op_equivalents(table)
    for v in ("sparse_sgd", "sparse_adagrad"):
        assert abs(got[v] - HARNESS_HOST_OPS[f"{v}_per_group"]) <= 0.5, v
        assert HARNESS_HOST_OPS[f"{v}_per_group"] + HARNESS_CPU_EXTRA_OPS[f"{v}_per_group"] == \
            {"sparse_sgd": 12, "sparse_adagrad": 148}[v]
    # the Adagrad step is the profile's: 360 us over a dense step, far below 148 ops at host_op_us
    assert got["T_sparse_adagrad"] - got["T_dense_sgd"] < 0.5 * 148 * Overheads().host_op_us
    # another GPU's profile gives its own (a slower host: more op-equivalents), within 1.5x
    h200, _ = load_bundle(ROOT / "datasets" / "H200")
    other = mod.host_op_equivalents(h200)
    assert 1.0 < other["sparse_adagrad"] / got["sparse_adagrad"] < 1.5
    with pytest.raises(ValueError, match="dense SGD"):
        mod.host_op_equivalents(table[table["variant"] != "sgd"])
    with pytest.raises(ValueError, match="sparse_adagrad steps"):
        mod.host_op_equivalents(table[table["variant"] != "sparse_adagrad"])
    # a CPU's counts of the same config are the recorded ones, a GPU's the equivalents
    t = read_results(RUNS / "results.csv")
    row = t[(t["config_name"] == "c013") & (t["plan_name"] == "dp_small")].iloc[0]
    cfg, plan = load_pair(RUNS, row)
    gpu, cpu = harness_host_op_counts(cfg, plan), harness_host_op_counts(cfg, plan, "cpu")
    assert cpu["optimizer"] - gpu["optimizer"] >= 86  # one fused table at least, plus the per-tensor dense loop


def test_harness_work_on_cpus_is_data():
    """On a CPU target the harness graph adds the work listed for CPUs in HARNESS_WORK (the view gradients) and
    never the GPU's host waits (``.cpu()`` of a CPU tensor is a no-op, the host is synchronous)."""
    table = read_results(RUNS / "results.csv")
    row = table[(table["config_name"] == "c000") & (table["plan_name"] == "size_greedy")].iloc[0]
    cfg, plan = load_pair(RUNS, row)
    cat, cpu = cpu_catalog()
    plain, harness = _names(cfg, plan, cpu, False, cat), _names(cfg, plan, cpu, True, cat)
    assert not any("waits for the GPU" in n for n in harness)
    views = sum(v for n, v in harness.items() if n.startswith("feature slice bwd zeros"))
    assert views == (cfg.num_tables if "per-table view gradients" in HARNESS_WORK["cpu"] else 0)
    assert set(harness) - set(plain) <= {n for n in harness if "feature slice" in n or "one rank" in n
                                         or "local copy" in n or "output_dist pack" in n or "unpack" in n}


def test_row_wise_view_gradients_on_two_ranks(monkeypatch):
    """Row-wise tables: one view per table of the reduce-scatter output on every rank, and on the owner one
    select per row-wise piece of its fused lookup output (plus one index view when the group also holds
    table-/column-wise pieces); each a zero gradient of the whole tensor, a copy and (but the first) an add."""
    from dataclasses import replace

    from hybrid.sharding.plan import Shard, ShardingPlan
    from hybrid.workloads import dlrm_graph

    table = read_results(RUNS / "results.csv")
    row = table[(table["config_name"] == "c000") & (table["plan_name"] == "size_greedy")].iloc[0]
    cfg, _ = load_pair(RUNS, row)
    cat, cpu = cpu_catalog()
    names = [t.name for t in cfg.tables]
    rw = names[:3]  # three row-wise tables over both ranks, the rest table-wise on rank 0 (same dim: one group)
    plan = ShardingPlan({n: Shard("row_wise", (0, 1)) if n in rw else Shard("table_wise", (0,)) for n in names})
    cfg = cfg.with_(gpus=2, tables=[replace(t, embedding_dim=16) for t in cfg.tables])
    monkeypatch.setitem(dlrm_graph.HARNESS_WORK, "cpu", ("per-table view gradients", "row-wise view gradients"))
    got = _names(cfg, plan, cpu, True, cat)
    assert got["feature slice bwd zeros (row_wise reduce_scatter output)"] == 2 * len(rw)
    assert got["feature slice bwd accumulate (row_wise reduce_scatter output)"] == 2 * (len(rw) - 1)
    dims = {t.embedding_dim for t in cfg.tables}
    assert len(dims) == 1
    d = dims.pop()
    # rank 0 holds row-wise and table-wise pieces (3 selects + 1 index view), rank 1 only row-wise ones (3)
    assert got[f"feature slice bwd zeros (fused output dim {d})"] == (len(rw) + 1) + len(rw)
    monkeypatch.setitem(dlrm_graph.HARNESS_WORK, "cpu", ("per-table view gradients",))
    assert not any("row_wise reduce_scatter output" in n or "fused output" in n
                   for n in _names(cfg, plan, cpu, True, cat))


def test_coalesce_wait_exposes_the_gpu_backlog_to_the_host():
    """The host cannot launch the dense optimizer step before the sparse coalesce of every fused table has
    finished on the GPU."""
    table = read_results(RUNS / "results.csv")
    row = table[(table["config_name"] == "c000") & (table["plan_name"] == "size_greedy")].iloc[0]
    cfg, plan = load_pair(RUNS, row)
    res = simulate(build_dlrm_graph(cfg.with_(system="H100-SXM"), plan, default_catalog(), harness=True).graph)
    n = res.nodes()
    last_update = n.loc[n["name"] == "embedding sgd update", "end_us"].max()
    dense_launch = n.loc[n["name"] == "launch dense optimizer step", "start_us"].min()
    assert dense_launch >= last_update


def test_host_clock_phases():
    """A kernel still running when its phase's host work ends counts in the next phase on the host clock."""
    g = TaskGraph(1)
    g.phase = "a"
    g.add(0, HOST, "host a", kind="cpu", duration_us=10.0)
    g.kernel(0, "long kernel", duration_us=100.0)
    g.phase = "b"
    g.add(0, HOST, "host b", kind="cpu", duration_us=5.0)
    res = simulate(g, overheads=None)
    dev = res.phase_times(["a", "b"])
    host = res.phase_times(["a", "b"], host_clock=True)
    assert dev.loc[0, "a"] == pytest.approx(res.finish.max() - 0.0 - dev.loc[0, "b"])  # a ends with the kernel
    assert host.loc[0, "a"] < dev.loc[0, "a"]
    assert host.loc[0, "a"] + host.loc[0, "b"] == pytest.approx(res.iteration_us)


def _adagrad_campaign_config(name: str):
    table = read_results(RUNS / "results.csv")
    row = table[(table["config_name"] == name) & (table["plan_name"] == "size_greedy")].iloc[0]
    return load_pair(RUNS, row)


def test_gpu_adagrad_coalesce_sums_the_hottest_rows_duplicates_serially():
    """CUDA's ``coalesce`` sorts the sparse gradient, reads the unique count back to the host (the sync), then
    sums each distinct row's duplicates in one warp, one after another: a skewed table's hottest row keeps its
    warp busy long after the rest (c024, Zipf 1.185 over 155k rows: ~60k duplicates). The graph charged Adagrad
    by bandwidth alone: its batch-8192 runs on the H100 were predicted at 0.44-0.58x of measured."""
    from hybrid.ops.families import expected_hottest_row_lookups
    from hybrid.workloads.dlrm_graph import COALESCE_US_PER_DUPLICATE, lookup_groups, shard_pieces

    cfg, plan = _adagrad_campaign_config("c024")
    assert cfg.optimizer == "adagrad"
    it = build_dlrm_graph(cfg.with_(system="H100-SXM"), plan, default_catalog(), harness=True)
    res = simulate(it.graph)
    n = res.nodes()
    hot = n[n["name"].str.contains("hottest row's duplicates")]
    groups = lookup_groups(shard_pieces(cfg, plan), 0)
    assert len(hot) == len(groups) == len({t.embedding_dim for t in cfg.tables})
    # each group's node lasts its hottest member's expected lookups x the per-duplicate time
    want = sorted(g["hottest_row_lookups"] * COALESCE_US_PER_DUPLICATE["gpu"] for g in groups)
    np.testing.assert_allclose(sorted(hot["duration_us"]), want, rtol=1e-5)
    t3 = next(t for t in cfg.tables if t.name == "t3")  # the dim-16 group's hottest member
    hottest = float(expected_hottest_row_lookups(t3.num_embeddings, cfg.batch_size_per_gpu * t3.pooling_factor,
                                                 t3.zipf_alpha))
    assert 5.5e4 < hottest < 6.5e4
    assert hot["duration_us"].max() == pytest.approx(hottest * COALESCE_US_PER_DUPLICATE["gpu"], rel=1e-5)
    # the host waits for the sort only: each hot node starts once its group's sync has returned, and the host's
    # next work (Adagrad's Python-level math) runs beside it
    syncs = n[n["name"] == "sparse grad coalesce: unique rows to host (waits for the GPU)"]
    assert (np.sort(hot["start_us"].to_numpy()) >= np.sort(syncs["end_us"].to_numpy()) - 1e-6).all()
    # the optimizer phase now holds most of the measured iteration (34.3 ms measured, 26.7 ms of it optimizer)
    opt = float(res.phase_times(host_clock=True)["optimizer"].max())
    assert 20e3 < opt < 40e3
    # the iteration says what the hottest rows cost (the graph's notes: CLI text and --json)
    note = next(n for n in it.info["notes"] if "hottest rows" in n)
    assert f"{hot['duration_us'].sum() / 1e3:.1f} ms" in note
    sgd = build_dlrm_graph(cfg.with_(system="H100-SXM", optimizer="sgd"), plan, default_catalog(), harness=True)
    assert not any("hottest rows" in n for n in sgd.info["notes"])
    # no such node on a CPU target, and none under SGD
    cat, cpu = cpu_catalog()
    assert not any("hottest row" in k for k in _names(cfg, plan, cpu, True, cat))
    assert not any("hottest row" in k for k in _names(cfg.with_(optimizer="sgd"), plan, "H100-SXM", True))


def test_simulate_cli_notes_a_gpu_coalesces_hot_rows(tmp_path, capsys):
    """`hybrid simulate` says when a GPU's sparse Adagrad spends milliseconds summing the hottest rows of skewed
    tables (the graph's notes reach its text and --json); an SGD config gets no such note."""
    import json

    from hybrid.cli.main import main

    doc = """system: H100-SXM
gpus: 1
batch_size_per_gpu: 8192
optimizer: {opt}
interaction: cat
bottom_mlp: [128, 64]
top_mlp: [128, 1]
embedding_dim: 64
tables:
- {{name: t0, num_embeddings: 150000, embedding_dim: 16, pooling_factor: 40, index_dist: zipf, zipf_alpha: 1.2}}
- {{name: t1, num_embeddings: 1000000, embedding_dim: 64, pooling_factor: 20, index_dist: uniform}}
"""
    notes = {}
    for opt in ("adagrad", "sgd"):
        path = tmp_path / f"{opt}.yaml"
        path.write_text(doc.format(opt=opt))
        assert main(["simulate", str(path), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        notes[opt] = [n for n in out.get("notes", []) if "hottest rows" in n]
    assert len(notes["adagrad"]) == 1 and "ms per iteration on rank 0" in notes["adagrad"][0]
    assert notes["sgd"] == []
