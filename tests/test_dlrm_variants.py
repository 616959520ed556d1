"""Built-in DLRM variants (MLPerf, DLRM-DCNv2, DeepLearningExamples), DCN cross layers, mixed-precision tables,
host-memory placement, and the GPU benchmark's MLPerf-table scoring (``experiments/dlrm_gpu/run.py``)."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid.engine.overheads import Overheads
from hybrid.engine.simulate import simulate
from hybrid.errors import InvalidInputError, WorkloadWarning
from hybrid.sharding.heuristics import size_lookup_greedy
from hybrid.workloads.dlrm import DLRMConfig
from hybrid.workloads.dlrm_graph import build_dlrm_graph
from hybrid.workloads.dlrm_variants import DCNV2_MULTI_HOT, DLE_MODEL_BYTES, dlrm_variant

ROOT = Path(__file__).resolve().parents[1]


def _time_ms(cfg: DLRMConfig, **kw) -> tuple[float, dict]:
    it = build_dlrm_graph(cfg, size_lookup_greedy(cfg, capacity=1e18), **kw)
    return simulate(it.graph.compile(), None, Overheads.zero()).iteration_us / 1e3, it.info


def test_mlperf_variant_matches_the_reference_shapes():
    cfg = dlrm_variant("MLPerf-DLRM")
    assert cfg.num_tables == 26 and {t.embedding_dim for t in cfg.tables} == {128}
    assert sum(t.num_embeddings for t in cfg.tables) == 187_767_399
    # the reference's top MLP input (ln_top[0] = 479): 128 + 27*26/2
    assert cfg.interaction_features == 479
    assert [o for _, _, o in cfg.mlp_layers()] == [512, 256, 128, 1024, 1024, 512, 256, 1]
    with pytest.raises(InvalidInputError, match="unknown DLRM variant .*mlperf"):
        dlrm_variant("dlrm-xl")


def test_dcnv2_variant_has_cross_layers_and_multi_hot_lookups():
    cfg = dlrm_variant("dcnv2", gpus=8, batch_size_per_gpu=8192, dtype="fp16")
    assert cfg.interaction == "dcn" and cfg.optimizer == "adagrad"
    assert [t.pooling_factor for t in cfg.tables] == [float(h) for h in DCNV2_MULTI_HOT]
    cross = [(n, i, o) for n, i, o in cfg.mlp_layers() if cfg.is_cross_layer(n)]
    shapes = {"v": (3456, 512), "u": (512, 3456)}
    assert cross == [(f"dcn{k}_{x}", *shapes[x]) for k in range(3) for x in "vu"]
    assert cfg.mlp_layers()[len(cfg.bottom_mlp) + 6] == ("top0", 3456, 1024)
    again = DLRMConfig.from_dict(cfg.to_dict())
    assert again.mlp_layers() == cfg.mlp_layers() and again.dcn_low_rank == 512
    ops = build_dlrm_graph(cfg, size_lookup_greedy(cfg, capacity=1e18)).graph.compile().ops
    assert ((ops["op"] == "linear") & (ops["k"] == 3456) & (ops["n"] == 512)).any()
    t_dcn, _ = _time_ms(cfg)
    t_dot, _ = _time_ms(dlrm_variant("mlperf", gpus=8, batch_size_per_gpu=8192, dtype="fp16"))
    assert t_dcn > t_dot  # 6 extra 3456x512 GEMMs and 214 lookups per sample instead of 26
    with pytest.raises(InvalidInputError, match="dcn_layers"):
        dlrm_variant("dcnv2", dcn_layers=0)


def test_dcnv2_cross_layers_have_one_bias_per_layer():
    """TorchRec's LowRankCrossNet (the DCNv2 reference) computes x_0 * (W (V x_l) + b) + x_l: V has no bias. The
    model counted one on V too (3 x 512 parameters), in its parameter count, memory and DDP all-reduce bytes."""
    cfg = dlrm_variant("dcnv2", gpus=8, batch_size_per_gpu=8192, dtype="fp16")
    bottom = 13 * 512 + 512 + 512 * 256 + 256 + 256 * 128 + 128
    cross = 3 * (3456 * 512 + 512 * 3456 + 3456)
    top = 3456 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 512 + 512 + 512 * 256 + 256 + 256 + 1
    assert cfg.dense_params() == bottom + cross + top == 16_044_545
    g = build_dlrm_graph(cfg, size_lookup_greedy(cfg, capacity=1e18)).graph
    ddp = [a["bytes"] for n, a in zip(g._names, g._args, strict=True) if n.startswith("ddp all_reduce bucket")]
    assert sum(ddp) / 8 == cfg.dense_params() * 2  # one node per rank and bucket; fp16 gradients


def test_dle_variants_have_the_published_model_sizes():
    for name, size in DLE_MODEL_BYTES.items():
        cfg = dlrm_variant(name)
        total = sum(t.bytes(4) for t in cfg.tables)
        assert total == pytest.approx(size, rel=0.01)


def test_mixed_precision_tables_and_host_memory_placement():
    base = dlrm_variant("dle-large", system="DGX-1", gpus=1, batch_size_per_gpu=65536, dtype="fp16")
    t_fp32, info = _time_ms(base.with_(embedding_dtype="fp32"))
    assert info["host_pieces"] == 0  # hbm placement: memory is not checked
    t_fp16, _ = _time_ms(base.with_(embedding_dtype="fp16"))
    assert t_fp16 < t_fp32
    # 82 GB of tables on one 32 GB V100: auto placement moves the largest tables to host memory (PCIe 3)
    t_auto, info = _time_ms(base.with_(embedding_dtype="fp32", embedding_placement="auto"))
    assert info["host_pieces"] >= 2 and t_auto > 1.5 * t_fp32
    t_host, info_host = _time_ms(base.with_(embedding_dtype="fp32", embedding_placement="host"))
    assert info_host["host_pieces"] == 26 and t_host > t_auto
    # the same model over 8 GPUs fits: nothing goes to host memory
    _, info8 = _time_ms(base.with_(gpus=8, batch_size_per_gpu=8192, embedding_placement="auto"))
    assert info8["host_pieces"] == 0
    with pytest.raises(InvalidInputError, match="embedding_placement"):
        base.with_(embedding_placement="ssd")


def test_memory_counts_tables_in_their_own_dtype_and_not_on_the_gpu_when_in_host_memory():
    from hybrid.sharding.memory import memory_per_rank, table_bytes

    base = dlrm_variant("dle-small", system="DGX-1", gpus=1, batch_size_per_gpu=8192, dtype="fp16",
                        embedding_dtype="fp32")
    assert table_bytes(base).sum() == pytest.approx(DLE_MODEL_BYTES["dle-small"], rel=0.01)  # fp32, not fp16
    plan = size_lookup_greedy(base, capacity=1e18)
    hbm = memory_per_rank(base, plan).per_rank.iloc[0]
    host = memory_per_rank(base.with_(embedding_placement="host"), plan).per_rank.iloc[0]
    assert hbm["embeddings"] == pytest.approx(table_bytes(base).sum(), rel=1e-9)
    assert host["embeddings"] == 0 and host["total"] < hbm["total"] - 0.9 * hbm["embeddings"]


def test_tables_in_host_memory_must_fit_the_nodes_host_memory(capsys, tmp_path):
    """A DGX-1 node has 512 GB of system memory (datasheet); tables placed there may take 80% of it. 24 tables of
    ~10 GiB each (fp16) with Adagrad state (~458 GiB) on one node do not fit; spread over two nodes (16 GPUs) each node
    holds half and fits; a system whose host memory the catalog does not state is not checked."""
    from hybrid.cli.main import main
    from hybrid.hardware.catalog import default_catalog
    from hybrid.sharding.memory import HOST_EMBEDDING_SHARE, memory_per_rank

    assert default_catalog().system("DGX-1").host_mem == 512 * 2**30
    tables = [{"name": f"T{i}", "num_embeddings": 40_000_000, "embedding_dim": 128, "pooling_factor": 1.0}
              for i in range(24)]
    cfg = DLRMConfig.from_dict({"name": "huge", "system": "DGX-1", "gpus": 8, "batch_size_per_gpu": 1024,
                                "dtype": "fp16", "bottom_mlp": [512, 256, 128], "top_mlp": [1024, 1],
                                "embedding_dim": 128, "optimizer": "adagrad", "tables": tables,
                                "embedding_placement": "host"})
    plan = size_lookup_greedy(cfg, capacity=1e18)
    one = memory_per_rank(cfg, plan)
    need = 24 * 40_000_000 * 128 * 2 * 2.0  # fp16 weights (the config's dtype) + Adagrad accumulator
    assert one.per_rank["host_embeddings"].sum() == pytest.approx(need)
    assert need > HOST_EMBEDDING_SHARE * 512 * 2**30 > need / 2
    assert not one.fits and (one.per_rank["total"] <= one.capacity).all()  # the GPUs are fine: the host is not
    assert "node 0's host memory" in one.reason and "512.0 GiB" in one.reason
    two = cfg.with_(gpus=16, batch_size_per_gpu=512)
    assert memory_per_rank(two, size_lookup_greedy(two, capacity=1e18)).fits
    elsewhere = cfg.with_(system="H200")  # a bare GPU (a generic node): no host memory stated, unchecked
    assert memory_per_rank(elsewhere, size_lookup_greedy(elsewhere, capacity=1e18)).fits
    # one node: no other node to spread the tables to, so no such advice
    assert "spreads the tables over the nodes" not in one.reason and "1 of 1 node(s)" in one.reason
    assert "more nodes, smaller tables, or fewer tables in host memory" in one.reason
    # the CLI refuses the plan with that reason (exit 2, nothing simulated)
    import yaml

    path = tmp_path / "huge.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    code = main(["simulate", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "plan does not fit" in err and "host memory" in err
    # over two nodes it runs, and says what each node's host memory holds of the tables
    fits = tmp_path / "two.yaml"
    fits.write_text(yaml.safe_dump(two.to_dict()))
    assert main(["simulate", str(fits), "--json"]) == 0
    hm = json.loads(capsys.readouterr().out)["host_memory"]
    assert len(hm["per_node_bytes"]) == 2 and sum(hm["per_node_bytes"]) == pytest.approx(need)
    assert hm["capacity_per_node_bytes"] == 512 * 2**30 and hm["usable_share"] == HOST_EMBEDDING_SHARE


def test_multi_node_costs_collectives_on_the_nics():
    one = dlrm_variant("mlperf", system="DGX-A100", gpus=8, batch_size_per_gpu=6912, dtype="fp16")
    two = one.with_(gpus=16, batch_size_per_gpu=3456)
    it = build_dlrm_graph(two, size_lookup_greedy(two, capacity=1e18))
    ops = it.graph.compile().ops
    coll = ops[ops["op"].isin(["all_to_all", "all_reduce"])]
    assert (coll["n_nodes"] == 2).all() and (coll["n_ranks"] == 16).all()
    t1, _ = _time_ms(one)
    t2, _ = _time_ms(two)
    assert t2 > t1  # same global batch: the exchanges now cross 25 GB/s NICs instead of 300 GB/s NVLink


def _gpu_bench():
    spec = importlib.util.spec_from_file_location("dlrm_gpu_run", ROOT / "experiments" / "dlrm_gpu" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _mlperf_rows(**columns) -> pd.DataFrame:
    """An MLPerf DLRM runs table (the benchmark's input format): list columns give one value per run, scalars are
    shared; unnamed columns take one NVIDIA HugeCTR node of 8 GPUs at MLPerf's 55296 global batch."""
    n = max(len(v) for v in columns.values() if isinstance(v, list))
    base = {"org": "NVIDIA", "system": [chr(ord("a") + i) for i in range(n)], "nodes": 1, "acc_per_node": 8,
            "global_batch_size": 55296, "median_ms_per_iteration": 1.0, "framework": "Merlin HugeCTR"}
    return pd.DataFrame({k: v if isinstance(v, list) else [v] * n for k, v in {**base, **columns}.items()})


def test_gpu_benchmark_scores_an_mlperf_table_and_counts_what_it_skips(shared_datasets, tmp_path, capsys):
    bench = _gpu_bench()
    v10 = pd.read_csv(shared_datasets / "mlperf" / "mlperf_training_v1.0_dlrm_runs.csv")
    pick = pd.concat([v10[v10["system"] == "dgxa100_ngc21.05_merlin_hugectr"].head(2),
                      v10[v10["accelerator"] == "TPU"].head(2), v10[v10["acc_per_node"] == 0].head(1)])
    table = tmp_path / "round.csv"
    pick.to_csv(table, index=False)
    # no public data directory: the roofline predictor, no fitted constants (fast)
    rc = bench.main(["--data-dir", str(tmp_path / "none"), "--mlperf", str(table), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["n_input"] == 5 and out["n_rows"] == 2 and out["n_skipped"] == 3
    assert out["skipped"] == {"not a GPU (TPU)": 2, "no accelerators (CPU-only run)": 1}
    assert list(out["by_system"]) == ["v1.0 NVIDIA dgxa100_ngc21.05_merlin_hugectr"]
    measured = pick["median_ms_per_iteration"].head(2).to_numpy()
    pred = out["by_system"]["v1.0 NVIDIA dgxa100_ngc21.05_merlin_hugectr"]["predicted_ms_median"]
    assert out["geomean_pct"] == pytest.approx(np.exp(np.mean(np.log(np.abs(pred - measured) / measured * 100))),
                                               rel=0.02)
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    assert bench.main(["--data-dir", str(tmp_path / "none"), "--mlperf", str(bad), "--json"]) == 2
    assert "not an MLPerf DLRM runs table" in capsys.readouterr().err


def test_gpu_benchmark_skips_runs_with_fractional_counts(shared_datasets):
    """0.5 nodes of 8 GPUs was read as 0 nodes and 4 GPUs (int()), 8.5 GPUs per node as 8: runs no one made."""
    from hybrid.hardware.catalog import default_catalog

    bench = _gpu_bench()
    v21 = pd.read_csv(shared_datasets / "mlperf" / "mlperf_training_v2.1_dlrm_runs.csv")
    row = v21[v21["median_ms_per_iteration"].notna() & v21["accelerator"].str.contains("A100")].head(1)
    odd = pd.concat([row, row.assign(nodes=0.5), row.assign(acc_per_node=8.5), row.assign(global_batch_size=0.5)])
    runs, skipped = bench.map_mlperf(odd, default_catalog())
    assert len(runs) == 1 and runs["gpus"].iloc[0] == int(row["nodes"].iloc[0] * row["acc_per_node"].iloc[0])
    assert skipped == {"node or accelerator count not a whole number": 2, "global batch not a whole number": 1}


def test_gpu_benchmark_skips_runs_whose_gpus_per_node_no_system_has(shared_datasets):
    """Any accelerators per node was accepted: 1000 A100s a node were costed on a generic node built for them (one
    NVLink fabric), and a row naming DGX-A100 with 2 a node on a 2-GPU node, not the DGX it names. A fractional
    global batch was counted as no batch at all; a whole one written as a float is a batch."""
    from hybrid.hardware.catalog import default_catalog

    bench = _gpu_bench()
    v21 = pd.read_csv(shared_datasets / "mlperf" / "mlperf_training_v2.1_dlrm_runs.csv")
    row = v21[v21["median_ms_per_iteration"].notna() & v21["accelerator"].str.contains("A100")].head(1)
    batch = int(row["global_batch_size"].iloc[0])
    odd = pd.concat([row, row.assign(acc_per_node=1000), row.assign(system="DGX-A100", acc_per_node=4),
                     row.assign(system="DGX-A100", acc_per_node=8), row.assign(global_batch_size=batch + 0.5),
                     row.assign(global_batch_size=float(batch)), row.assign(global_batch_size=float("nan")),
                     # a rack-scale NVLink system's tray of 4 is one of its nodes, as MLPerf counts them
                     row.assign(system="GB200-NVL72", accelerator="NVIDIA GB200", acc_per_node=4)])
    runs, skipped = bench.map_mlperf(odd, default_catalog())
    gpn = int(row["acc_per_node"].iloc[0])
    assert list(runs["gpn"]) == [gpn, 8, gpn, 4] and set(runs["global_batch"]) == {batch}
    largest = max(s.gpus_per_node for s in default_catalog().systems.values())
    assert skipped == {f"more accelerators per node than any catalog system holds ({largest})": 1,
                       "accelerators per node not those of system DGX-A100 (8 GPUs per node)": 1,
                       "global batch not a whole number": 1, "no global batch": 1}


def test_gpu_benchmark_skips_runs_with_fewer_samples_than_gpus(shared_datasets):
    """A global batch below the GPU count (a garbage node count, say) was rounded up to one sample per GPU: a run
    with 4x the published batch was predicted, and 1e9 nodes built a rank tuple of 4e9 entries (MemoryError)."""
    from hybrid.hardware.catalog import default_catalog

    bench = _gpu_bench()
    v21 = pd.read_csv(shared_datasets / "mlperf" / "mlperf_training_v2.1_dlrm_runs.csv")
    row = v21[v21["median_ms_per_iteration"].notna() & v21["accelerator"].str.contains("A100")].head(1)
    odd = pd.concat([row, row.assign(global_batch_size=1), row.assign(nodes=1e9)])
    runs, skipped = bench.map_mlperf(odd, default_catalog())
    assert len(runs) == 1 and runs["global_batch"].iloc[0] == int(row["global_batch_size"].iloc[0])
    assert skipped == {"global batch smaller than the GPU count (fewer than one sample per GPU)": 2}


def test_gpu_benchmark_skips_runs_whose_global_batch_the_gpus_do_not_share_evenly(shared_datasets):
    """A global batch that is no multiple of the GPU count was priced as round(batch / GPUs) samples per GPU: 100
    samples on 64 GPUs became 2 per GPU, a run of 128 samples scored against the published time of 100."""
    from hybrid.hardware.catalog import default_catalog

    bench = _gpu_bench()
    v21 = pd.read_csv(shared_datasets / "mlperf" / "mlperf_training_v2.1_dlrm_runs.csv")
    row = v21[v21["median_ms_per_iteration"].notna() & v21["accelerator"].str.contains("A100")].head(1)
    gpus = int(row["nodes"].iloc[0] * row["acc_per_node"].iloc[0])
    batch = int(row["global_batch_size"].iloc[0])
    odd = pd.concat([row, row.assign(global_batch_size=batch + 1), row.assign(global_batch_size=gpus + gpus // 2)])
    runs, skipped = bench.map_mlperf(odd, default_catalog())
    assert list(runs["global_batch"]) == [batch]
    assert skipped == {"global batch not a multiple of the GPU count (samples per GPU not whole)": 2}
    for r in runs.itertuples(index=False):  # what is priced is the published batch
        assert bench.run_config(r, default_catalog())[0].global_batch == r.global_batch

def test_gpu_benchmark_tells_garbage_counts_from_cpu_only_runs(shared_datasets):
    """A node count that is no number or a negative GPU count was counted as a CPU-only run."""
    from hybrid.hardware.catalog import default_catalog

    bench = _gpu_bench()
    v21 = pd.read_csv(shared_datasets / "mlperf" / "mlperf_training_v2.1_dlrm_runs.csv").astype({"nodes": object})
    row = v21[v21["median_ms_per_iteration"].notna() & v21["accelerator"].str.contains("A100")].head(1)
    odd = pd.concat([row.assign(nodes="abc"), row.assign(acc_per_node=-8), row.assign(nodes=-1),
                     row.assign(acc_per_node=0, accelerator=None), row.assign(acc_per_node=float("nan"))])
    runs, skipped = bench.map_mlperf(odd, default_catalog())
    assert len(runs) == 0
    assert skipped == {"malformed node or accelerator count": 3, "no accelerators (CPU-only run)": 2}


def test_gpu_benchmark_skips_rows_of_another_benchmark(shared_datasets):
    """A row whose benchmark column or result directory names another MLPerf benchmark (BERT rows put in the DLRM
    format) was predicted as the DLRM of its round."""
    from hybrid.hardware.catalog import default_catalog

    bench = _gpu_bench()
    v21 = pd.read_csv(shared_datasets / "mlperf" / "mlperf_training_v2.1_dlrm_runs.csv")
    row = v21[v21["median_ms_per_iteration"].notna() & v21["accelerator"].str.contains("A100")].head(1)
    odd = pd.concat([row, row.assign(file="ASUSTeK/results/ESCN4A-E11/bert/result_0.txt"),
                     row.assign(benchmark="bert"), row.assign(benchmark="dlrm_dcnv2"),
                     row.assign(benchmark="DLRM", file="x/dlrm/result_1.txt"),
                     row.assign(file="NVIDIA/logs/dgxa100_n8.log")])  # no result directory: names no benchmark
    runs, skipped = bench.map_mlperf(odd, default_catalog())
    assert list(runs["variant"]) == ["mlperf", "mlperf-dcnv2", "mlperf", "mlperf"]
    assert skipped == {"not a DLRM run (benchmark bert)": 2}


def test_gpu_benchmark_names_the_accelerator_it_cannot_map(shared_datasets):
    """Later rounds' accelerators map by their published spelling (H200 in its SXM5 spelling too); one the catalog
    lacks is counted under its own name, so the reader knows which to add."""
    from hybrid.hardware.catalog import default_catalog

    bench = _gpu_bench()
    v21 = pd.read_csv(shared_datasets / "mlperf" / "mlperf_training_v2.1_dlrm_runs.csv")
    row = v21[v21["median_ms_per_iteration"].notna() & v21["accelerator"].str.contains("A100")].head(1)
    dcnv2 = "NVIDIA/results/x/dlrm_dcnv2/result_0.txt"
    rows = pd.concat([row.assign(mlperf_version="v4.0", accelerator=a, file=dcnv2) for a in
                      ("NVIDIA H200-SXM5-141GB", "NVIDIA H100-SXM5-80GB", "Intel Gaudi 3", None)])
    runs, skipped = bench.map_mlperf(rows, default_catalog())
    assert list(runs["device"]) == ["H200", "H100-SXM"] and set(runs["variant"]) == {"mlperf-dcnv2"}
    assert skipped == {"accelerator not in the catalog: Intel Gaudi 3": 1, "no accelerator named": 1}


def test_gpu_benchmark_answers_a_table_with_nothing_to_score_without_calibrating(shared_datasets, tmp_path, capsys,
                                                                                 monkeypatch):
    """A table whose every run is skipped is answered at once (n_rows 0 and the skips), not after fitting the
    calibration and scoring the fit round for nothing (minutes); a header-only table is an error at once, as in
    the other benchmark scripts (tests/test_benchmark_header_only_labels.py)."""
    bench = _gpu_bench()

    def no_calibration(*a, **k):
        raise AssertionError("calibrated although no run is to be scored")

    monkeypatch.setattr(bench, "public_calibration", no_calibration)
    v10 = pd.read_csv(shared_datasets / "mlperf" / "mlperf_training_v1.0_dlrm_runs.csv")
    rows = v10[v10["accelerator"] == "TPU"].head(2)
    rows.to_csv(tmp_path / "tpus.csv", index=False)
    rc = bench.main(["--data-dir", str(shared_datasets), "--mlperf", str(tmp_path / "tpus.csv"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["n_rows"] == 0 and out["geomean_pct"] is None and out["by_system"] == {}
    assert out["n_skipped"] == len(rows)
    v10.head(0).to_csv(tmp_path / "header.csv", index=False)
    assert bench.main(["--data-dir", str(shared_datasets), "--mlperf", str(tmp_path / "header.csv"), "--json"]) == 2
    assert "header.csv: has no data rows" in capsys.readouterr().err


def test_config_files_can_name_a_variant(tmp_path):
    path = tmp_path / "mlperf.yaml"
    path.write_text("variant: mlperf\nsystem: DGX-H100\ngpus: 16\nbatch_size_per_gpu: 4096\ndtype: bf16\n")
    cfg = DLRMConfig.from_file(path)
    assert cfg.num_tables == 26 and cfg.gpus == 16 and cfg.system == "DGX-H100" and cfg.dtype == "bf16"
    assert cfg.tables == dlrm_variant("mlperf").tables
    # a variant with generated tables instead of its own
    # a variant with generated tables instead of its own: the generator needs its table count
    path.write_text("variant: mlperf\ntable_generator: {seed: 1}\n")
    with pytest.raises(InvalidInputError, match="num_tables"):
        DLRMConfig.from_file(path)
    path.write_text("variant: mlperf\nnum_tables: 4\ntable_generator: {seed: 1}\n")
    assert DLRMConfig.from_file(path).num_tables == 4
    path.write_text("variant: nope\n")
    with pytest.raises(InvalidInputError, match="unknown DLRM variant 'nope'"):
        DLRMConfig.from_file(path)


def test_a_variants_embedding_dim_override_reaches_its_tables(tmp_path):
    """`variant: mlperf` + `embedding_dim: 64` left every table at 128 (the variant's tables carry their width)
    while the config said 64: the override was silently dropped. It now sets the variant's tables' width, so a
    dot interaction also needs the bottom MLP's output to match (a clear error, not a silent 128)."""
    path = tmp_path / "v.yaml"
    path.write_text("variant: mlperf\nembedding_dim: 64\nbottom_mlp: [512, 256, 64]\n")
    cfg = DLRMConfig.from_file(path)
    assert {t.embedding_dim for t in cfg.tables} == {64} and cfg.num_tables == 26
    assert cfg.tables[0].num_embeddings == dlrm_variant("mlperf").tables[0].num_embeddings
    path.write_text("variant: mlperf\nembedding_dim: 64\n")
    with pytest.raises(InvalidInputError, match=r"embedding_dim == bottom_mlp\[-1\] \(128\)"):
        DLRMConfig.from_file(path)
    lib = dlrm_variant("mlperf", embedding_dim=64, bottom_mlp=(512, 256, 64))
    assert lib.tables == cfg.tables


def test_model_parallel_bottom_mlp_runs_on_one_rank_with_the_global_batch():
    dle = dlrm_variant("dle-large", system="DGX-1", gpus=8, batch_size_per_gpu=8192)
    assert dle.bottom_mlp_placement == "model_parallel"
    dp = dle.with_(bottom_mlp_placement="data_parallel")
    it = build_dlrm_graph(dle, size_lookup_greedy(dle, capacity=1e18))
    ops = it.graph.compile().ops
    bottom = ops[(ops["op"] == "linear") & (ops["k"] == 13)]
    assert len(bottom) == 1 and int(bottom["m"].iloc[0]) == 8 * 8192  # one rank, global batch
    base = build_dlrm_graph(dp, size_lookup_greedy(dp, capacity=1e18))
    # its output (8192 x 128 per destination) joins the pooled-embedding all-to-all from rank 0
    extra = it.volumes.output_send[0] - base.volumes.output_send[0]
    assert extra == pytest.approx(7 * 8192 * 128 * 4)
    t_mp, _ = _time_ms(dle)
    t_dp, _ = _time_ms(dp)
    assert t_mp > t_dp  # rank 0 does 8x the bottom MLP work on the critical path
    one = dle.with_(gpus=1, batch_size_per_gpu=65536)
    assert _time_ms(one)[0] == pytest.approx(_time_ms(one.with_(bottom_mlp_placement="data_parallel"))[0])
    with pytest.raises(InvalidInputError, match="bottom_mlp_placement"):
        dle.with_(bottom_mlp_placement="pipeline")


def test_variants_are_dlrm_configs_not_a_copy_of_their_fields():
    from dataclasses import fields

    from hybrid.workloads.dlrm_variants import VARIANTS

    own = {f.name for f in fields(next(iter(VARIANTS.values())))}
    assert own == {"name", "description", "source", "config"}  # model fields live in the DLRMConfig only
    for name, v in VARIANTS.items():
        assert isinstance(v.config, DLRMConfig)
        built = dlrm_variant(name, gpus=16, dtype="fp16")
        # everything the model is comes from the variant's config; only the job fields were overridden
        assert built.with_(gpus=v.config.gpus, dtype=v.config.dtype, embedding_dtype=v.config.embedding_dtype,
                           extra={}) == v.config.with_(extra={})
        assert built.gpus == 16 and built.dtype == "fp16" and built.embedding_dtype == "fp16"
    assert VARIANTS["dle-small"].config.bottom_mlp_placement == "model_parallel"
    assert VARIANTS["mlperf-dcnv2"].config.optimizer == "adagrad"


def test_gpu_benchmark_maps_hugectr_rounds_and_bridged_pcie_cards(catalog):
    bench = _gpu_bench()
    rows = pd.DataFrame({
        "mlperf_version": ["v0.7", "v2.1", "v2.1"], "org": ["NVIDIA"] * 3, "system": ["a", "b", "c"],
        "accelerator": ["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A30"], "nodes": [1, 14, 1],
        "acc_per_node": [8, 8, 8], "global_batch_size": [55296, 71680, 27648],
        "median_ms_per_iteration": [2.7, 0.56, 5.4],
        "framework": ["Merlin HugeCTR", "merlin_hugectr NVIDIA Release 22.04", "PyTorch NVIDIA Release 22.04"]})
    runs, skipped = bench.map_mlperf(rows, catalog)
    assert not skipped and runs["hybrid_emb"].tolist() == [False, True, False]  # hybrid embedding: HugeCTR >= v1.0
    cat, key, _ = bench.node_system(catalog, "A30", 8)
    s = cat.systems[key]
    assert s.intra_fabric == "PCIe" and s.intra_bw < 40e9  # an NVLink bridge joins pairs, not the 8-GPU node
    cat, key, _ = bench.node_system(catalog, "A100-SXM4-80GB", 8)
    assert cat.systems[key].intra_bw >= 300e9
    assert bench.family_overheads("hugectr").kernel_launch_us <= 1.0 and bench.family_overheads("pytorch") is None


def test_gpu_benchmark_runs_dcnv2_rounds_on_hugectrs_embedding_collection(catalog):
    """DLRM-DCNv2 rounds (multi-hot, v3.0 on) run HugeCTR's embedding collection, whose planner places whole
    tables, not the one-hot hybrid embedding's frequency split: no hybrid embedding, a cost-model plan (tiny
    tables replicated, the 100-hot table split), and the hierarchical all-to-all across nodes."""
    bench = _gpu_bench()
    rows = pd.DataFrame({
        "mlperf_version": ["v3.0", "v3.0", "v3.0"], "org": ["NVIDIA"] * 3, "system": ["a", "b", "c"],
        "file": ["NVIDIA/results/a/dlrm_dcnv2/result_0.txt", "NVIDIA/results/b/dlrm_dcnv2/result_0.txt",
                 "NVIDIA/results/c/dlrm/result_0.txt"],
        "accelerator": ["NVIDIA H100-SXM5-80GB"] * 3, "nodes": [1, 2, 1], "acc_per_node": [8] * 3,
        "global_batch_size": [55296, 55296, 55296], "median_ms_per_iteration": [4.0, 2.5, 1.0],
        "framework": ["NVIDIA Release 23.04 HugeCTR"] * 3})
    runs, skipped = bench.map_mlperf(rows, catalog)
    assert not skipped and runs["variant"].tolist() == ["mlperf-dcnv2", "mlperf-dcnv2", "mlperf"]
    assert runs["hybrid_emb"].tolist() == [False, False, True]
    # a table without result paths or a benchmark column: the round decides (DCNv2 from v3.0 on)
    bare = rows.drop(columns="file").assign(mlperf_version=["v2.1", "v3.0", "v4.1"])
    assert bench.map_mlperf(bare, catalog)[0]["variant"].tolist() == ["mlperf", "mlperf-dcnv2", "mlperf-dcnv2"]
    key, graphs, cat = bench.build_graphs(runs, catalog)
    assert len(graphs) == 3
    ops_two_nodes = graphs[1].ops
    a2a = ops_two_nodes[ops_two_nodes["op"] == "all_to_all"]
    assert 2 in set(a2a["n_ranks"])  # the pooled exchange crosses the 2 nodes per rail
    one = bench.dlrm_variant("mlperf-dcnv2", system=bench.node_system(cat, "H100-SXM", 8)[1], gpus=8,
                             batch_size_per_gpu=6912, dtype="fp16", embedding_dtype="fp16")
    plan = bench.run_plan(one, "mlperf-dcnv2", cat)
    assert plan[max(one.tables, key=lambda t: t.pooling_factor).name].type != "table_wise"
    assert bench.run_plan(one, "mlperf", cat) == bench.hybrid_parallel_plan(one)


def test_gpu_benchmark_skips_a_run_whose_tables_fit_nowhere(catalog):
    """DLRM-DCNv2's tables with Adagrad (~104 GB in fp16) on one 96 GB GH200 fit no placement in GPU memory: the
    planner (``embedding_placement: auto``) plans again with the sharded tables' weights in host memory, where the
    graph puts them, and the run is predicted (slower than a DGX H100 node, whose eight GPUs keep theirs in HBM).
    One 8 GB P4 cannot hold a table's activations at that batch even so: skipped and counted with the
    planner's reason, not the end of the whole table; the runs that fit stay, unchanged."""
    from hybrid.corrections.predictor import HybridPredictor

    bench = _gpu_bench()
    systems = ["gh200", "p4", "dgxh100"]
    rows = pd.DataFrame({
        "mlperf_version": ["v4.0"] * 3, "org": ["NVIDIA"] * 3, "system": systems,
        "file": [f"NVIDIA/results/{s}/dlrm_dcnv2/result_0.txt" for s in systems],
        "accelerator": ["NVIDIA GH200 Grace Hopper Superchip 96GB", "NVIDIA Tesla P4", "NVIDIA H100-SXM5-80GB"],
        "nodes": [1, 1, 1], "acc_per_node": [1, 1, 8], "global_batch_size": [55296] * 3,
        "median_ms_per_iteration": [60.0, 600.0, 9.0], "framework": ["NVIDIA Release 24.04 HugeCTR"] * 3})
    runs, skipped = bench.map_mlperf(rows, catalog)
    assert len(runs) == 3 and not skipped  # every accelerator is a catalog GPU
    cat = bench.with_node_systems(runs, catalog)
    kept = bench.drop_unplaceable(runs, cat, skipped)
    assert kept["system_label"].tolist() == ["v4.0 NVIDIA gh200", "v4.0 NVIDIA dgxh100"]
    (reason, count), = skipped.items()
    assert count == 1 and reason.startswith("does not fit: table") and "GiB per rank" in reason
    pd.testing.assert_frame_equal(kept, runs.iloc[[0, 2]].reset_index(drop=True))
    # the GH200's plan keeps the tables in host memory; the hbm placement of the same config fits nowhere
    cfg, _, cat = bench.run_config(next(kept.itertuples(index=False)), cat)
    from hybrid.workloads.dlrm_graph import place_pieces, shard_pieces

    plan = bench.run_plan(cfg, "mlperf-dcnv2", cat)
    pieces = place_pieces(cfg, shard_pieces(cfg, plan), cat.device("GH200"))
    assert any(p.host for p in pieces)
    with pytest.raises(InvalidInputError, match="fits nowhere"):
        bench.run_plan(cfg.with_(embedding_placement="hbm"), "mlperf-dcnv2", cat)
    # the sharding search (hybrid shard) plans the same way: its greedy plan fits, with the tables in host memory
    from hybrid.sharding.search import search_plans

    gh200 = bench.dlrm_variant("mlperf-dcnv2", system="GH200", gpus=1, batch_size_per_gpu=55296, dtype="fp16",
                               embedding_dtype="fp16", embedding_placement="auto")
    res = search_plans(gh200, strategies=("greedy",), host_memory=float("inf"))
    (ev,) = res.evaluations
    assert ev.name == "greedy" and not ev.error and ev.fits and np.isfinite(ev.iteration_us)
    hbm = search_plans(gh200.with_(embedding_placement="hbm"), strategies=("greedy",), host_memory=float("inf"))
    assert "fits nowhere" in hbm.evaluations[0].error and not hbm.evaluations[0].fits
    key, graphs, cat = bench.build_graphs(kept, cat)
    ms = bench.predict(graphs, HybridPredictor.roofline_only(cat), None)
    # one GPU runs the whole batch's dense work and reaches two tables over the host link; eight GPUs in HBM
    # pay an all-to-all instead (per GPU the two are close: the host traffic is the touched rows only)
    assert np.all(np.isfinite(ms)) and ms[0] > 4 * ms[1]
    # a batch whose dense part and activations alone overflow the GPU says so
    big = rows.iloc[[1]].assign(accelerator="NVIDIA T4", global_batch_size=262144)
    runs, skipped = bench.map_mlperf(big, catalog)
    assert len(bench.drop_unplaceable(runs, bench.with_node_systems(runs, catalog), skipped)) == 0
    (reason, _), = skipped.items()
    assert reason.startswith("does not fit: no embedding table fits: the dense layers, activations") and "GiB more" in reason


def test_gpu_benchmark_puts_nvl72_trays_in_their_rack(catalog):
    """MLPerf lists a GB200 NVL72 run as trays of 4 GPUs; they share the rack's NVLink fabric, not NICs."""
    bench = _gpu_bench()
    cat, key, _ = bench.node_system(catalog, "GB200", 4)
    assert key == "GB200-NVL72" and cat.systems[key].gpus_per_node == 72
    cat, key, _ = bench.node_system(catalog, "B200", 8)
    assert cat.systems[key].gpus_per_node == 8  # an 8-GPU HGX node stays one


def test_amp_with_fp32_tables_casts_pooled_outputs_and_unscales_gradients(catalog):
    """Mixed precision with FP32 tables (DeepLearningExamples' AMP): the lookups' FP32 outputs are cast to FP16
    (6 bytes per element) and their gradients back, unless the lookup writes FP16 itself; with a GradScaler every
    gradient is unscaled in place (embedding values: one per lookup) and the host waits for the found-inf flag."""
    from hybrid.ops.roofline import roofline

    base = dlrm_variant("dle-small", system="DGX-A100", gpus=8, batch_size_per_gpu=8192, dtype="fp16",
                        embedding_dtype="fp32")
    plan = size_lookup_greedy(base, capacity=1e18)
    pooled = 8 * 8192 * 26 * 128  # global batch x tables x dim: every rank casts the outputs of its own tables

    def ops_of(cfg):  # one op row per node that has an op (compiled graphs keep unique rows)
        cg = build_dlrm_graph(cfg, plan).graph.compile()
        idx = cg.op_index[cg.op_index >= 0]
        return cg.ops.iloc[idx].reset_index(drop=True)

    ops = ops_of(base)
    casts = ops[ops["variant"] == "cast"]
    for direction in ("fwd", "bwd"):
        d = casts[casts["direction"] == direction]
        assert d["elements"].sum() == pytest.approx(pooled, rel=1e-6)
        assert roofline(d, catalog)["bytes"].sum() == pytest.approx(6.0 * pooled, rel=1e-6)
    assert not (ops["variant"] == "scale_").any()
    for same in (base.with_(lookup_output_dtype="fp16"), base.with_(dtype="tf32"), base.with_(embedding_dtype="fp16")):
        assert not (ops_of(same)["variant"] == "cast").any()  # fused output, TF32 = FP32 storage, FP16 tables
    scaled = base.with_(grad_scaler=True)
    ops_s = ops_of(scaled)
    unscale = ops_s[ops_s["variant"] == "scale_"]
    top = sum(fin * fout + fout for i, (_, fin, fout) in enumerate(base.mlp_layers()) if i >= len(base.bottom_mlp))
    bottom = sum(fin * fout + fout for _, fin, fout in base.mlp_layers()) - top
    # every rank: one pass over its dense gradients (the top MLP; the model-parallel bottom MLP on rank 0 only)
    # and one over its tables' gradient values (one-hot: one per sample and table)
    assert unscale["elements"].sum() == pytest.approx(pooled + 8 * top + bottom, rel=1e-4)  # (rounded rows)
    assert len(unscale) == 2 * 8
    t = [_time_ms(c)[0] for c in (base.with_(lookup_output_dtype="fp16"), base, scaled)]
    assert t[0] < t[1] < t[2]
    again = DLRMConfig.from_dict(scaled.with_(lookup_output_dtype="fp16").to_dict())
    assert again.grad_scaler and again.lookup_dtype == "fp16" and again.embedding_dtype == "fp32"
    assert base.lookup_dtype == "fp32" and base.with_(embedding_dtype="fp16").lookup_dtype == "fp16"
    with pytest.raises(InvalidInputError, match="grad_scaler"):
        base.with_(grad_scaler="yes")


@pytest.mark.parametrize("unfitted_pct, kept", [(1e-2, False), (1e4, True)])
def test_gpu_benchmark_uses_a_fit_only_where_it_beats_the_unfitted_model_on_its_own_runs(shared_datasets,
                                                                                        unfitted_pct, kept):
    from hybrid.corrections.predictor import HybridPredictor
    from hybrid.hardware.catalog import default_catalog

    bench = _gpu_bench()
    cat = default_catalog()
    v10 = pd.read_csv(shared_datasets / "mlperf" / "mlperf_training_v1.0_dlrm_runs.csv")
    runs, _ = bench.map_mlperf(v10[v10["system"].isin(["dgxa100_ngc21.05_merlin_hugectr",
                                                       "Inspur nf5488m6_hugectr", "nf5488m6_hugectr"])], cat)
    assert len(runs) >= 5
    key, graphs, cat = bench.build_graphs(runs, cat)
    runs = runs.assign(key=key.to_numpy())
    roof = HybridPredictor.roofline_only(cat)
    by_key = dict(zip(key.unique(), graphs, strict=True))
    for name in ("roofline", "calibrated"):
        runs[f"err_{name}_pct"] = 10.0
    # the unfitted predictor's in-sample error: unbeatable (0.01%, the geomean's floor) or hopeless (10,000%)
    runs["err_calibrated_pct"] = unfitted_pct
    fits = bench.fit_constants(runs, by_key, {"roofline": roof, "calibrated": roof}, np.ones(len(runs), bool))
    for fam in ("all", "hugectr"):
        name, ov, rep = fits[fam][:3]
        gate = rep["gate"]
        assert gate["kept"] is kept and gate["calibrated_pct"] == pytest.approx(unfitted_pct)
        assert np.isfinite(gate["fitted_pct"]) and gate["fitted_pct"] > 0
        if kept:
            assert ov is not None and ov.iteration_us == pytest.approx(rep["params"]["iteration_us"])
        else:  # the family answers with the calibrated model and its default (unfitted) host overheads
            assert name == "calibrated" and ov == bench.family_overheads(fam)


def _node_us(cfg: DLRMConfig, name_part: str, rank: int = 0) -> dict[str, float]:
    """Simulated duration (us, roofline, no host overheads) of rank ``rank``'s nodes whose name holds ``name_part``."""
    it = build_dlrm_graph(cfg, size_lookup_greedy(cfg, capacity=1e18))
    res = simulate(it.graph.compile(), None, Overheads.zero())
    nodes = res.nodes()
    mine = nodes[(nodes["rank"] == rank) & nodes["name"].str.contains(name_part, regex=False)
                 & (nodes["kind"] == "compute")]
    return dict(zip(mine["name"], mine["duration_us"], strict=False))


def test_tables_in_host_memory_cost_their_row_bytes_over_the_host_link_not_a_multiple_of_the_kernel():
    """A table in host memory moves its touched rows over PCIe instead of HBM: the kernel's time plus those bytes at
    the link's speed. A tiny lookup (8 rows) costs about what it costs in HBM (a few bytes more), not the whole
    kernel's time (launch, latency, indices, outputs) times HBM/PCIe bandwidth (~50x on an H100); and what lives in
    GPU memory either way (the sparse gradient Adagrad coalesces, the gradient values GradScaler unscales) costs
    the same wherever the weights are."""
    from hybrid.hardware.catalog import default_catalog
    from hybrid.workloads.dlrm_graph import host_link_bw

    tables = [{"name": "t0", "num_embeddings": 1_000_000, "pooling_factor": 1}]
    cfg = DLRMConfig.from_dict({"name": "tiny", "system": "DGX-H100", "gpus": 1, "batch_size_per_gpu": 8,
                                "dtype": "fp32", "bottom_mlp": [64], "top_mlp": [64, 1], "embedding_dim": 64,
                                "tables": tables})
    hbm = _node_us(cfg, "embedding")
    host = _node_us(cfg.with_(embedding_placement="host"), "embedding")
    fwd_hbm = hbm["embedding fwd (1 tables, dim 64)"]
    fwd_host = host["embedding fwd (1 tables, dim 64, host memory)"]
    link = host_link_bw(default_catalog().device("H100-SXM"))
    row_bytes = 8 * 64 * 4
    assert fwd_host == pytest.approx(fwd_hbm + row_bytes / link * 1e6, abs=0.05)
    assert sum(host.values()) < sum(hbm.values()) + 1.0  # a few KB over PCIe: well under a microsecond
    # a large lookup is bound by the link: about its row bytes at the link's speed
    big = cfg.with_(batch_size_per_gpu=65536, tables=[replace(t, pooling_factor=50.0) for t in cfg.tables])
    fwd_big = _node_us(big.with_(embedding_placement="host"), "embedding fwd")
    (t_big,) = fwd_big.values()
    assert t_big == pytest.approx(65536 * 50 * 64 * 4 / link * 1e6, rel=0.05)
    # Adagrad: the coalesce works on the sparse gradient (GPU memory); GradScaler unscales gradient values (GPU)
    ada = cfg.with_(optimizer="adagrad", batch_size_per_gpu=4096, grad_scaler=True, dtype="fp16")
    a_hbm, a_host = _node_us(ada, "embedding"), _node_us(ada.with_(embedding_placement="host"), "embedding")
    assert a_host["embedding adagrad coalesce"] == pytest.approx(a_hbm["embedding adagrad coalesce"])
    g_hbm = _node_us(ada, "GradScaler unscale (embedding")
    g_host = _node_us(ada.with_(embedding_placement="host"), "GradScaler unscale (embedding")
    assert g_host == pytest.approx(g_hbm)
    # the Adagrad step reads and writes the touched rows' weights and accumulators over the link
    assert a_host["embedding adagrad update"] > a_hbm["embedding adagrad update"]


def test_grace_superchip_gpus_reach_host_memory_over_nvlink_c2c_not_pcie():
    """A GH200's H100 reads Grace's memory over NVLink-C2C (900 GB/s both directions: 450 GB/s each way, datasheet),
    not a PCIe x16 slot (63 GB/s); GB200's two GPUs share their superchip's link. Tables placed in host memory on
    them cost that link's bandwidth; a PCIe GPU keeps PCIe, and a catalog entry can state the field."""
    from hybrid.hardware.catalog import default_catalog
    from hybrid.hardware.device import Device
    from hybrid.workloads.dlrm_graph import PCIE_X16_BW, host_link_bw

    cat = default_catalog()
    assert host_link_bw(cat.device("GH200")) == pytest.approx(450e9)
    assert host_link_bw(cat.device("GH200-144GB")) == pytest.approx(450e9)
    assert PCIE_X16_BW[6] < host_link_bw(cat.device("GB200")) < 450e9
    assert host_link_bw(cat.device("H100-SXM")) == PCIE_X16_BW[5]
    gh = cat.device("GH200")
    assert gh.to_entry()["host_link_gbps"] == pytest.approx(450)
    assert Device.from_entry("X", {**gh.to_entry(), "host_link_gbps": 100}).host_link_bw == pytest.approx(100e9)
    with pytest.raises(InvalidInputError, match="host_link_gbps"):
        Device.from_entry("X", {**gh.to_entry(), "host_link_gbps": -1})
    tables = [{"name": "t0", "num_embeddings": 1_000_000, "pooling_factor": 50}]
    cfg = DLRMConfig.from_dict({"name": "c2c", "system": "GH200", "gpus": 1, "batch_size_per_gpu": 65536,
                                "dtype": "fp32", "bottom_mlp": [64], "top_mlp": [64, 1], "embedding_dim": 64,
                                "tables": tables, "embedding_placement": "host"})
    (t,) = _node_us(cfg, "embedding fwd").values()
    assert t == pytest.approx(65536 * 50 * 64 * 4 / 450e9 * 1e6, rel=0.1)


def test_a_variant_name_given_as_the_config_file_says_how_to_use_it(tmp_path, capsys, monkeypatch):
    """``hybrid simulate mlperf`` (no such file): the error says that mlperf is a built-in variant and how a config
    names it, instead of only "file not found"; any other missing file keeps the plain error."""
    from hybrid.cli.main import main

    monkeypatch.chdir(tmp_path)
    for cmd in (["simulate", "mlperf"], ["shard", "dcnv2", "--gpus", "8"]):
        assert main(cmd) == 2
        err = capsys.readouterr().err
        assert "not found" in err and "built-in DLRM variant" in err and "variant: " in err, err
        assert len(err.strip().splitlines()) == 1
    assert main(["simulate", "nope.yaml"]) == 2
    err = capsys.readouterr().err
    assert "not found" in err and "variant" not in err


def test_simulate_json_gives_memory_per_rank_like_shard(tmp_path, capsys):
    """``simulate --json`` gives each rank's memory under the key ``shard --json`` uses for its plans
    (``memory_per_rank_bytes``), whose largest is ``peak_memory_bytes``, so the two outputs compare key by key."""
    from hybrid.cli.main import main

    plan = tmp_path / "best.yaml"
    cfg = ROOT / "experiments" / "configs" / "dlrm_example.yaml"
    assert main(["shard", str(cfg), "--strategy", "size_greedy", "--json", "--output", str(plan)]) == 0
    shard = json.loads(capsys.readouterr().out)
    assert main(["simulate", str(cfg), "--plan", str(plan), "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    best = next(p for p in shard["plans"] if p["name"] == shard["best"])
    assert len(sim["memory_per_rank_bytes"]) == sim["gpus"] == 8
    assert max(sim["memory_per_rank_bytes"]) == pytest.approx(sim["peak_memory_bytes"])
    assert sim["memory_per_rank_bytes"] == pytest.approx(best["memory_per_rank_bytes"])
    assert sim["iteration_us"] == pytest.approx(best["iteration_us"], rel=1e-6)


def test_gpu_benchmark_skips_a_global_batch_past_what_is_priced(shared_datasets):
    """A global batch of 1e30 samples was counted as a run that "does not fit", the reason a 100-character config
    error quoting a 30-digit per-GPU batch."""
    from hybrid.hardware.catalog import default_catalog

    bench = _gpu_bench()
    v21 = pd.read_csv(shared_datasets / "mlperf" / "mlperf_training_v2.1_dlrm_runs.csv")
    row = v21[v21["median_ms_per_iteration"].notna() & v21["accelerator"].str.contains("A100")].head(1)
    runs, skipped = bench.map_mlperf(pd.concat([row, row.assign(global_batch_size=1e30)]), default_catalog())
    assert len(runs) == 1 and skipped == {"malformed global batch (more than 10**18 samples)": 1}


def test_gpu_benchmark_maps_a_bare_a100_of_a_round_before_the_80gb_part_to_the_40gb_card(shared_datasets):
    """MLPerf v0.7 (July 2020) predates the A100 80GB (November 2020): its bare "NVIDIA A100" (Inspur nf5488) was
    priced on the catalog's default for a bare "A100", the 80 GB part (2039 GB/s instead of 1555)."""
    from hybrid.hardware.catalog import default_catalog

    bench = _gpu_bench()
    cat = default_catalog()
    v07 = pd.read_csv(shared_datasets / "mlperf" / "mlperf_training_v0.7_dlrm_runs.csv")
    bare = v07[v07["accelerator"] == "NVIDIA A100"]
    assert len(bare)
    runs, _ = bench.map_mlperf(bare, cat)
    assert len(runs) and set(runs["device"]) == {"A100-SXM4-40GB"}
    assert bench.map_device("NVIDIA A100", cat, "v0.7") == "A100-SXM4-40GB"
    # a later round's bare name stays the catalog's reading; a named part is that part in any round
    assert bench.map_device("NVIDIA A100", cat, "v2.1") == cat.resolve_device("A100")
    assert bench.map_device("NVIDIA A100-SXM4-80GB", cat, "v0.7") == "A100-SXM4-80GB"


def test_gpu_benchmark_run_config_reads_nan_columns_of_the_other_source_as_unset(shared_datasets):
    """MLPerf and DeepLearningExamples runs in one table leave each other's columns NaN: run_config refused the
    MLPerf rows (NaN is no dtype: the whole benchmark stopped with 'dtype must be a non-empty string, got nan') and
    read a NaN grad_scaler as True (bool(NaN))."""
    from hybrid.hardware.catalog import default_catalog

    bench = _gpu_bench()
    cat = default_catalog()
    v10 = pd.read_csv(shared_datasets / "mlperf" / "mlperf_training_v1.0_dlrm_runs.csv")
    runs, _ = bench.map_mlperf(v10[v10["system"] == "dgxa100_ngc21.05_merlin_hugectr"].head(1), cat)
    row = runs.assign(grad_scaler=np.nan, lookup_output_dtype=np.nan)
    cat = bench.with_node_systems(row, cat)
    r = next(row.itertuples(index=False))
    cfg, _, _ = bench.run_config(r, cat)
    assert cfg.grad_scaler is False and cfg.lookup_output_dtype is None
    assert bench.costed_system(r, cat) == cfg.system


def test_gpu_benchmark_times_multi_node_hugectr_from_v1_1_as_overlapped_iterations(catalog):
    """Every NVIDIA multi-node HugeCTR config from MLPerf v1.1 on trains with the overlapped pipeline (v1.0's JSON
    configs predate it); one node has no exchange to hide. Such a run is timed in the steady state of overlapped
    iterations (each GPU's busiest resource), the same 8-node graph of v1.0 by its critical path."""
    from hybrid.corrections.predictor import HybridPredictor
    from hybrid.engine.simulate import resource_busy_us

    bench = _gpu_bench()
    assert bench.hugectr_overlapped("v2.1", 8, True)
    assert bench.hugectr_overlapped("v1.1", 14, True)
    assert not bench.hugectr_overlapped("v1.0", 8, True)
    assert not bench.hugectr_overlapped("v2.1", 1, True)
    assert not bench.hugectr_overlapped("v2.1", 8, False)
    rows = _mlperf_rows(mlperf_version=["v1.0", "v2.1"], accelerator="NVIDIA A100-SXM4-80GB", nodes=8,
                        global_batch_size=71680, median_ms_per_iteration=[0.95, 0.61])
    runs, _ = bench.map_mlperf(rows, catalog)
    cat = bench.with_node_systems(runs, catalog)
    key, graphs, cat = bench.build_graphs(runs, cat, 0.0)
    assert [g.overlap_iterations for g in graphs] == [False, True]
    model = HybridPredictor.roofline_only(cat)
    plain, overlapped = (simulate(g, model, bench.family_overheads("hugectr")) for g in graphs)
    assert overlapped.iteration_us == pytest.approx(resource_busy_us(graphs[1], overlapped.durations).max())
    assert overlapped.info["single_iteration_us"] == pytest.approx(plain.iteration_us)
    # the exchanges (two hierarchical all-to-alls and the all-reduce) no longer add to the compute: well under
    # the one-iteration time, and at least each GPU's compute
    assert overlapped.iteration_us < 0.8 * plain.iteration_us
    assert overlapped.iteration_us >= plain.breakdown["compute_us"].max() - 1e-6


def test_gpu_benchmark_gives_each_hugectr_round_its_submitted_hybrid_embedding_thresholds(catalog):
    """The MLPerf v2.0/v2.1 single-node HugeCTR configs set ``p_dup_max = 0.03`` (training_results_v2.0 NVIDIA
    ``dgx_a100.py``, v2.1 GIGABYTE ``G492-ZD2.py`` and NVIDIA ``dgx_h100.py``), the v2.1 H100 4-node preview an
    all-to-all bandwidth of 23.75e9 B/s (``dgx_h100_4x8x2240.py``); v1.0 (JSON configs) and the multi-node A100
    configs keep HugeCTR's defaults. Every round ran with the defaults, and a v1.0 and a v2.1 run of the same node
    and batch shared one graph."""
    from hybrid.workloads.dlrm_hybrid_embedding import HybridEmbedding

    bench = _gpu_bench()
    assert bench.hugectr_hybrid_params("v1.0", 1, "A100-SXM4-80GB") == {}
    assert bench.hugectr_hybrid_params("v2.1", 1, "A100-SXM4-80GB") == {"p_dup_max": 0.03}
    assert bench.hugectr_hybrid_params("v2.1", 1, "H100-SXM5-80GB") == {"p_dup_max": 0.03}
    assert bench.hugectr_hybrid_params("v2.1", 14, "A100-SXM4-80GB") == {}
    assert bench.hugectr_hybrid_params("v2.1", 4, "H100-SXM5-80GB") == {"a2a_bw": 23.75e9}
    # thresholds (occurrences per iteration) by hand: one node of 8 GPUs, 55296 samples: M = 6912 per GPU
    m = 6912
    single = HybridEmbedding(1.0, **bench.hugectr_hybrid_params("v2.1", 1, "A100-SXM4-80GB"))
    assert single.count_threshold(55296, 8, 1) == pytest.approx(55296 * (2 * 0.03 / (m * (m - 1))) ** 0.5)  # 1.96
    four = HybridEmbedding(1.0, **bench.hugectr_hybrid_params("v2.1", 4, "H100-SXM5-80GB"))
    assert four.count_threshold(71680, 32, 4) == pytest.approx(4 * 23.75e9 / 1.3e11 * 4 / 3)  # 0.974, not 7.79
    rows = _mlperf_rows(mlperf_version=["v1.0", "v2.1"], accelerator="NVIDIA A100-SXM4-80GB",
                        median_ms_per_iteration=[1.7, 1.5])
    runs, _ = bench.map_mlperf(rows, catalog)
    key, graphs, _ = bench.build_graphs(runs, catalog, 1.0)
    assert len(graphs) == 2  # the v2.1 run replicates fewer categories: fewer frequent rows in its dp lookups
    rows_of = [float(g.ops.loc[g.ops["op"] == "embedding_bag", "num_embeddings"].sum()) for g in graphs]
    assert rows_of[0] != rows_of[1]


def test_nvidia_implementations_pad_the_dot_interaction_to_aligned_rows(catalog):
    """HugeCTR's interaction layer and DeepLearningExamples' (``padding_size``) write 480 columns for MLPerf DLRM's
    479 (128 + 27 * 26 / 2), so the top MLP's first GEMM has 16-byte rows; unpadded, a Hopper's tensor cores cannot
    be fed by TMA and the GEMM falls to the slow path (:mod:`hybrid.ops.gemm_paths`)."""
    from hybrid.workloads.dlrm import DLRMConfig

    plain, padded = dlrm_variant("mlperf"), dlrm_variant("mlperf", interaction_pad_to=8)
    assert plain.interaction_features == 479 and padded.interaction_features == 480
    assert padded.mlp_layers()[len(padded.bottom_mlp)] == ("top0", 480, 1024)
    assert DLRMConfig.from_dict(padded.to_dict()).interaction_features == 480  # the round trip keeps it
    assert "interaction_pad_to" not in plain.to_dict()
    with pytest.warns(WorkloadWarning, match="interaction_pad_to applies to interaction: dot only"):
        assert dlrm_variant("mlperf-dcnv2", interaction_pad_to=8).interaction == "dcn"
    for bad in (0, -8, 2.5, "x", 10**6):
        with pytest.raises(InvalidInputError, match="interaction_pad_to"):
            dlrm_variant("mlperf", interaction_pad_to=bad)
    # the GPU benchmark pads for the NVIDIA implementations (HugeCTR, NVIDIA's PyTorch DLRM) only
    bench = _gpu_bench()
    rows = _mlperf_rows(mlperf_version="v2.1", org=["NVIDIA", "X"], accelerator="NVIDIA H100-SXM5-80GB",
                        framework=["Merlin HugeCTR", "MXNet"])
    runs, _ = bench.map_mlperf(rows, catalog)
    widths = [bench.run_config(r, catalog)[0].interaction_features for r in runs.itertuples(index=False)]
    assert widths == [480, 479]
    # on a Hopper the unpadded GEMM falls to the slow path, the padded one not
    from hybrid.ops.gemm_paths import misaligned_kernel_us

    gemm = pd.DataFrame([{"op": "linear", "device": "H100-SXM", "dtype": "fp16", "b": 1, "m": 6912, "n": 1024,
                          "k": k} for k in (479, 480)])
    slow = misaligned_kernel_us(gemm, catalog)
    assert np.isfinite(slow[0]) and np.isnan(slow[1])


def test_gpu_benchmark_prefetches_the_input_distribution_of_dcnv2_rounds(catalog):
    """DLRM-DCNv2 rounds run pipelined trainers (HugeCTR's embedding collection with
    ``train_inter_iteration_overlap``, TorchRec's ``TrainPipelineSparseDist``): their index all-to-alls run on the
    ``data_dist`` stream beside the iteration; the one-hot rounds' trainers do not."""
    bench = _gpu_bench()
    assert bench.PREFETCH_INPUT_DIST_VARIANTS == ("mlperf-dcnv2",)
    rows = _mlperf_rows(mlperf_version=["v3.0", "v1.0"],
                        accelerator=["NVIDIA H100-SXM5-80GB", "NVIDIA A100-SXM4-80GB"],
                        framework=["PyTorch NVIDIA Release 23.04", "PyTorch NVIDIA Release 21.05"],
                        benchmark=["dlrm_dcnv2", "dlrm"])
    runs, _ = bench.map_mlperf(rows, catalog)
    assert list(runs["variant"]) == ["mlperf-dcnv2", "mlperf"]
    key, graphs, _ = bench.build_graphs(runs, catalog, 0.0)
    streams = [{name for _, name in g.stream_names} for g in graphs]
    assert "data_dist" in streams[0] and "data_dist" not in streams[1]
