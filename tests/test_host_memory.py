"""Host memory of DLRM tables placed there (``embedding_placement: host``): where the catalog's figure per node comes
from (a system's own datasheet, or borrowed from the DGX by an HGX name), the ``--host-mem-gib`` override of
``hybrid simulate`` and ``hybrid shard`` (and ``host_mem_per_node`` of the library), and ``shard --json``'s report."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from hybrid.cli.main import main
from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import Catalog, default_catalog
from hybrid.hardware.device import System
from hybrid.sharding.heuristics import size_lookup_greedy
from hybrid.sharding.memory import HOST_EMBEDDING_SHARE, memory_per_rank
from hybrid.workloads.dlrm import DLRMConfig

GIB = 2**30


def _config(name: str, system: str, gpus: int, rows: list[int]) -> DLRMConfig:
    """Tables of ``rows`` rows (dim 128, fp16, Adagrad: 512 bytes a row) all in host memory."""
    tables = [{"name": f"T{i}", "num_embeddings": n, "embedding_dim": 128, "pooling_factor": 1.0}
              for i, n in enumerate(rows)]
    return DLRMConfig.from_dict({"name": name, "system": system, "gpus": gpus, "batch_size_per_gpu": 512,
                                 "dtype": "fp16", "bottom_mlp": [512, 256, 128], "top_mlp": [1024, 1],
                                 "embedding_dim": 128, "optimizer": "adagrad", "tables": tables,
                                 "embedding_placement": "host"})


#: ~458 GiB of tables on one node of HGX H100 (8 GPUs): fits 80% of the 2048 GiB the name borrows, not of 64 GiB
HGX = _config("hgx", "HGX H100", 8, [40_000_000] * 24)
#: two DGX-1 nodes, 12 tables of 6M rows and 12 of 2M (~45.8 GiB): size_greedy puts ~22.9 GiB on each node,
#: lookup_greedy (equal lookups: table count) ~30.5 GiB on node 0
TWO_NODES = _config("two-nodes", "DGX-1", 16, [6_000_000] * 12 + [2_000_000] * 12)


def _write(cfg: DLRMConfig, tmp_path) -> str:
    path = tmp_path / f"{cfg.name}.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    return str(path)


def test_catalog_says_where_each_systems_host_memory_comes_from(tmp_path):
    cat = default_catalog()
    assert cat.system("DGX-1").host_mem_origin("DGX-1") == ("stated", "DGX-1 datasheet (512 GB DDR4)")
    # the DGX H100 entry's figure is its own datasheet's; its HGX names borrow it (OEM servers vary)
    h100 = cat.system("HGX H100")
    assert h100.key == "DGX-H100" and h100.host_mem == 2048 * GIB
    assert h100.host_mem_origin("DGX H100")[0] == "stated"
    kind, note = h100.host_mem_origin("hgx-h100")  # names match as the catalog resolves them
    assert kind == "borrowed" and "DGX H100 datasheet" in note and "--host-mem-gib" in note
    # an entry whose key is the HGX name borrows by default; its DGX alias does not
    h200 = cat.system("HGX-H200")
    assert h200.host_mem_origin()[0] == "borrowed" and h200.host_mem_origin("DGX H200")[0] == "stated"
    for name in ("HGX A100", "HGX-B200"):
        assert cat.system(name).host_mem_origin(name)[0] == "borrowed"
    assert cat.system("Polaris").host_mem_origin()[0] == "unstated"
    # every packaged figure says what states it
    assert all(s.host_mem_source for s in cat.systems.values() if s.host_mem > 0)
    # a catalog file's own figure is stated by that file, borrowed by no name
    path = tmp_path / "ours.toml"
    path.write_text('[systems.DGX-H100]\nhost_mem_gib = 1024\n')
    ours = Catalog.load([path]).system("HGX H100")
    assert ours.host_mem == 1024 * GIB and ours.host_mem_origin("HGX H100") == ("stated", f"catalog file {path}")
    # host_mem_borrowed_by names the entry's own names, and needs a figure to borrow
    entry = {"device": "H100-SXM", "gpus_per_node": 8, "intra_node_gbps": 450, "source": "x", "aliases": ["A"]}
    with pytest.raises(InvalidInputError, match="host_mem_borrowed_by"):
        System.from_entry("S", {**entry, "host_mem_gib": 64, "host_mem_borrowed_by": ["B"]})
    with pytest.raises(InvalidInputError, match="without host_mem_gib"):
        System.from_entry("S", {**entry, "host_mem_borrowed_by": ["A"]})


def test_library_override_of_host_memory():
    plan = size_lookup_greedy(HGX, capacity=1e18)
    catalog = memory_per_rank(HGX, plan)
    hm = catalog.host_memory_summary()
    assert catalog.fits and hm["source"] == "borrowed" and hm["capacity_per_node_bytes"] == 2048 * GIB
    assert hm["usable_per_node_bytes"] == pytest.approx(HOST_EMBEDDING_SHARE * 2048 * GIB)
    small = memory_per_rank(HGX, plan, host_mem_per_node=64 * GIB)
    assert not small.fits and small.host_memory_summary()["fits_per_node"] == [False]
    assert "user override" in small.reason and "64.0 GiB" in small.reason
    # a bare device states no host memory: unchecked, unless the user gives one
    bare = HGX.with_(system="H100-SXM")
    assert memory_per_rank(bare, plan).host_memory_summary()["checked"] is False
    assert not memory_per_rank(bare, plan, host_mem_per_node=64 * GIB).fits
    from hybrid.sharding.search import search_plans

    for bad in (0, -1.0, math.nan, math.inf):
        with pytest.raises(InvalidInputError, match="host_mem_per_node must be a finite number > 0"):
            memory_per_rank(HGX, plan, host_mem_per_node=bad)
        with pytest.raises(InvalidInputError, match="host_mem_per_node must be a finite number > 0"):
            search_plans(HGX, strategies=["size_greedy"], host_mem_per_node=bad)


def test_simulate_host_mem_gib_override_changes_the_verdict(tmp_path, capsys):
    path = _write(HGX, tmp_path)
    assert main(["simulate", path, "--json"]) == 0
    hm = json.loads(capsys.readouterr().out)["host_memory"]
    assert hm["fits"] and hm["capacity_per_node_bytes"] == 2048 * GIB and hm["source"] == "borrowed"
    assert main(["simulate", path]) == 0
    out = capsys.readouterr().out
    assert "of 2048 GiB per node" in out and "borrowed from the DGX H100 datasheet" in out
    assert main(["simulate", path, "--host-mem-gib", "64"]) == 2
    err = capsys.readouterr().err
    assert "plan does not fit" in err and "64.0 GiB" in err and "--host-mem-gib" in err
    assert main(["simulate", path, "--host-mem-gib", "600", "--json"]) == 0
    hm = json.loads(capsys.readouterr().out)["host_memory"]
    assert hm["fits"] and hm["capacity_per_node_bytes"] == 600 * GIB and hm["source"] == "override"
    # a config with no table in host memory checks nothing against the override, and says so
    hbm = _write(TWO_NODES.with_(name="hbm", embedding_placement="hbm"), tmp_path)
    assert main(["simulate", hbm, "--host-mem-gib", "64", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "host_memory" not in out and any("--host-mem-gib checked nothing" in n for n in out["notes"])


def test_shard_json_shows_host_memory_and_flags_an_overflow(tmp_path, capsys):
    path = _write(TWO_NODES, tmp_path)
    args = ["shard", path, "--strategy", "size_greedy,lookup_greedy", "--json"]
    assert main(args) == 0  # 512 GiB per DGX-1 node (datasheet): both plans fit
    out = json.loads(capsys.readouterr().out)
    assert out["host_memory"]["source"] == "stated" and out["host_memory"]["capacity_per_node_bytes"] == 512 * GIB
    assert all(p["fits"] and p["host_memory"]["fits"] for p in out["plans"])
    # with 32 GiB per node, lookup_greedy's ~30.5 GiB on node 0 is over 80% of it; size_greedy's ~22.9 GiB is not
    assert main([*args, "--host-mem-gib", "32"]) == 0
    out = json.loads(capsys.readouterr().out)
    hm = out["host_memory"]
    assert out["best"] == "size_greedy" and hm["fits_per_node"] == [True, True] and hm["source"] == "override"
    assert hm["usable_per_node_bytes"] == pytest.approx(HOST_EMBEDDING_SHARE * 32 * GIB)
    lookup = next(p for p in out["plans"] if p["name"] == "lookup_greedy")
    assert not lookup["fits"] and lookup["host_memory"]["fits_per_node"] == [False, True]
    assert "node 0's host memory" in lookup["reason"]
    # the HGX name borrows 2048 GiB and fits; 64 GiB fits no plan: refused, no plan written
    hgx, plan = _write(HGX, tmp_path), tmp_path / "plan.yaml"
    assert main(["shard", hgx, "--strategy", "size_greedy", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["host_memory"]["source"] == "borrowed"
    assert main(["shard", hgx, "--strategy", "size_greedy", "--host-mem-gib", "64", "--output", str(plan)]) == 2
    assert "no plan fits in host or device memory" in capsys.readouterr().err and not plan.exists()


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_bad_host_mem_gib_is_refused_before_anything_is_written(value, tmp_path, capsys):
    path, out = _write(HGX, tmp_path), tmp_path / "out.json"
    for cmd in (["simulate", path, "--trace", str(out)], ["shard", path, "--output", str(out)]):
        assert main([*cmd, f"--host-mem-gib={value}"]) == 2
        err = capsys.readouterr().err
        assert "--host-mem-gib must be a finite number > 0" in err and not out.exists()


@pytest.mark.parametrize(("name", "kind"), [("HGX H100", "borrowed"), ("DGX H100", "stated"), ("Polaris", "unstated")])
def test_devices_show_names_host_memory_origin_of_the_name_typed(name: str, kind: str, capsys) -> None:
    assert main(["devices", "show", name, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["host_mem_origin"]["kind"] == kind
    assert main(["devices", "show", name]) == 0
    text = capsys.readouterr().out
    assert f"kind={kind}" in text and all(": " in line for line in text.splitlines())


@pytest.mark.parametrize("placement", ["host", "auto"])
def test_greedy_and_search_keep_each_nodes_host_memory(placement, tmp_path, capsys):
    """The planner's own strategies hold each node's share of the tables in host memory to what the memory check
    allows. They ignored host memory (and with ``host``, planned the weights in GPU memory whenever they fitted
    there), so ``hybrid shard`` put a table that only fits spread over both nodes on one node, and answered "no plan
    fits" although a row-wise plan over the two nodes fits."""
    # one table of 3.2G rows (dim 128, fp16, Adagrad: 1526 GiB), more than the 16 GPUs' memory (80 GB A100s) holds;
    # 1000 GiB of host memory per node takes 800 GiB of tables: half of it on each node fits, all on one does not
    cfg = _config(f"spread-{placement}", "DGX-A100", 16, [3_200_000_000, 1_000_000, 1_000_000]).with_(
        embedding_placement=placement)
    path = _write(cfg, tmp_path)
    assert main(["shard", path, "--strategy", "greedy,search", "--time-budget", "1", "--host-mem-gib", "1000",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for name in ("greedy", "search"):
        plan = next(p for p in out["plans"] if p["name"] == name)
        assert plan["fits"], plan["reason"]
        assert all(b <= HOST_EMBEDDING_SHARE * 1000 * GIB for b in plan["host_memory"]["per_node_bytes"])
    assert out["host_memory"]["fits_per_node"] == [True, True]
