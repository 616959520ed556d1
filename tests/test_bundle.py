"""Measurement bundles: catalog.toml round trip, atomic writing, loading a directory or a table file."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pandas as pd
import pytest

from hybrid.data.bundle import (
    CATALOG_FILE,
    META_FILE,
    TABLE_FILE,
    bundle_catalog,
    catalog_toml,
    load_bundle,
    load_project_bundles,
    project_bundles,
    read_meta,
    write_bundle,
)
from hybrid.errors import InvalidInputError, SchemaError
from hybrid.hardware.catalog import Catalog


def _device(key: str, fp32: float = 0.05) -> dict:
    return {"vendor": "amd", "kind": "cpu", "arch": "x86_64", "peak_tflops": {"fp32": fp32, "bf16": 2 * fp32},
            "mem_bw_gbps": 12.5, "mem_gib": 16.0, "l2_mib": 32.0, "sms": 2, "kernel_latency_us": 1.5,
            "source": 'test entry with "quotes" and a backslash \\ in it'}


def _system(key: str, device: str) -> dict:
    return {"device": device, "gpus_per_node": 4, "intra_node_gbps": 1.25, "intra_latency_us": 120.0,
            "source": "test"}


def _table(device: str, system: str) -> pd.DataFrame:
    return pd.DataFrame([
        {"device": device, "op": "gemm", "dtype": "fp32", "m": 64, "n": 64, "k": 64, "time_us": 12.5,
         "repeats": 10, "source": "hybrid-profile"},
        {"device": device, "op": "embedding_bag", "num_embeddings": 1000, "embedding_dim": 16,
         "pooling_factor": 3.5, "batch_size": 64, "num_tables": 2, "index_dist": "zipf", "zipf_alpha": 1.05,
         "direction": "bwd", "variant": "sparse_sgd", "time_us": 80.0, "repeats": 5},
        {"device": device, "op": "all_reduce", "size_bytes": 1024, "n_ranks": 2, "n_nodes": 1, "system": system,
         "time_us": 300.0, "repeats": 20},
    ])


def test_catalog_toml_round_trips_through_the_catalog_loader(tmp_path):
    text = catalog_toml({"cpu-test-2c": _device("cpu-test-2c")}, {"cpu-test-2c-gloo": _system("x", "cpu-test-2c")},
                        header="two lines\nof header")
    raw = tomllib.loads(text)
    assert raw["devices"]["cpu-test-2c"]["peak_tflops"] == {"fp32": 0.05, "bf16": 0.1}
    path = tmp_path / "c.toml"
    path.write_text(text)
    cat = Catalog.load([path])
    dev = cat.device("cpu-test-2c")
    assert dev.kind == "cpu" and dev.peak("fp32") == pytest.approx(0.05e12) and dev.mem_bw == pytest.approx(12.5e9)
    assert dev.source.endswith("backslash \\ in it")
    sys_ = cat.system("cpu-test-2c-gloo")
    assert sys_.device == "cpu-test-2c" and sys_.gpus_per_node == 4 and sys_.intra_bw == pytest.approx(1.25e9)


def test_catalog_toml_rejects_non_finite_numbers():
    with pytest.raises(InvalidInputError, match="non-finite"):
        catalog_toml({"x": {**_device("x"), "mem_bw_gbps": float("nan")}})


def _write(tmp_path: Path, name: str = "bundle", key: str = "cpu-test-2c", **kw) -> Path:
    text = catalog_toml({key: _device(key)}, {f"{key}-gloo": _system("s", key)})
    return write_bundle(tmp_path / name, _table(key, f"{key}-gloo"), text, {"device": key, "n": 3}, **kw)


def test_write_then_load_bundle_directory_and_table_file(tmp_path):
    out = _write(tmp_path)
    assert sorted(p.name for p in out.iterdir()) == sorted([TABLE_FILE, CATALOG_FILE, META_FILE])
    table, cat = load_bundle(out)
    assert len(table) == 3 and set(table["device"]) == {"cpu-test-2c"}
    assert cat.device("cpu-test-2c").kind == "cpu"
    assert cat.resolve_system("cpu-test-2c-gloo") == "cpu-test-2c-gloo"
    # the packaged catalog is still there
    assert cat.resolve_device("H100", missing_ok=True) == "H100-SXM"
    # the table file alone also finds its catalog beside it
    table2, _ = load_bundle(out / TABLE_FILE)
    pd.testing.assert_frame_equal(table, table2)
    assert read_meta(out) == {"device": "cpu-test-2c", "n": 3}


def test_failed_write_leaves_nothing(tmp_path):
    bad = _table("cpu-test-2c", "cpu-test-2c-gloo")
    bad.loc[0, "time_us"] = -1.0
    text = catalog_toml({"cpu-test-2c": _device("cpu-test-2c")})
    with pytest.raises(SchemaError, match="time_us"):
        write_bundle(tmp_path / "b", bad, text, {})
    assert list(tmp_path.iterdir()) == []
    # a device the bundle's catalog does not describe cannot validate either
    with pytest.raises(SchemaError, match="unknown device"):
        write_bundle(tmp_path / "b", _table("cpu-other-9c", "x"), text, {})
    assert list(tmp_path.iterdir()) == []


def test_existing_output_needs_force(tmp_path):
    out = _write(tmp_path)
    with pytest.raises(InvalidInputError, match="already exists"):
        _write(tmp_path)
    _write(tmp_path, key="cpu-other-4c", force=True)
    table, _ = load_bundle(out)
    assert set(table["device"]) == {"cpu-other-4c"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]  # no temp or old directories left


def test_bundle_catalog_merges_several_bundles(tmp_path):
    a = _write(tmp_path, "a", key="cpu-a-2c")
    b = _write(tmp_path, "b", key="cpu-b-8c")
    cat = bundle_catalog([a, b / TABLE_FILE])
    assert {"cpu-a-2c", "cpu-b-8c"} <= set(cat.devices)


def test_load_bundle_errors(tmp_path):
    with pytest.raises(SchemaError, match="not found"):
        load_bundle(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SchemaError, match="no measurements.csv"):
        load_bundle(tmp_path / "empty")
    out = _write(tmp_path)
    (out / META_FILE).write_text("{truncated")
    with pytest.raises(SchemaError, match="not valid JSON"):
        read_meta(out)
    (out / CATALOG_FILE).write_text("[devices.x\n")
    with pytest.raises(InvalidInputError, match="not valid TOML"):
        load_bundle(out)


def test_project_bundles_selects_by_device_kind(tmp_path):
    cpu = write_bundle(tmp_path / "b-cpu", _table("TEST-CPU-X", "TEST-SYS-X").iloc[:1],
                       catalog_toml({"TEST-CPU-X": _device("TEST-CPU-X")}), {})
    gpu_rows = pd.DataFrame([{"device": "H100-SXM", "op": "gemm", "dtype": "bf16", "m": 64, "n": 64, "k": 64,
                              "time_us": 20.0, "repeats": 10, "source": "hybrid-profile"}])
    gpu = write_bundle(tmp_path / "a-gpu", gpu_rows, "", {})
    (tmp_path / "not-a-bundle").mkdir()  # no measurements.csv: ignored
    (tmp_path / "notes.md").write_text("x")
    assert project_bundles(root=tmp_path) == [gpu, cpu]
    assert project_bundles("gpu", root=tmp_path) == [gpu]
    assert project_bundles("cpu", root=tmp_path) == [cpu]
    assert project_bundles("gpu", root=tmp_path / "missing") == []
    with pytest.raises(InvalidInputError, match="unknown bundle kind 'tpu'"):
        project_bundles("tpu", root=tmp_path)
    table, catalog = load_project_bundles("cpu", root=tmp_path)
    assert list(table["bundle"]) == ["b-cpu"] and list(table["device"]) == ["TEST-CPU-X"]
    assert catalog.device("TEST-CPU-X").kind == "cpu"
    both, _ = load_project_bundles(root=tmp_path)
    assert sorted(both["bundle"]) == ["a-gpu", "b-cpu"]
    empty, _ = load_project_bundles("gpu", root=tmp_path / "missing")
    assert empty.empty


def test_committed_gpu_bundles_are_the_h100_profile():
    names = [p.name for p in project_bundles("gpu")]
    assert "H100-SXM" in names
    assert not any(n.startswith("cpu-") for n in names)


def test_data_validate_reads_bundles_and_tables_inside_them(capsys):
    """A profiler bundle (its catalog names the CPU it measured) validates as a directory or by its table."""
    from hybrid.cli.main import main

    root = Path(__file__).resolve().parents[1] / "datasets" / "cpu-amd-epyc-1c"
    n = sum(1 for _ in (root / "measurements.csv").open()) - 1
    for arg in (root, root / "measurements.csv"):
        assert main(["data", "validate", str(arg)]) == 0
        assert f"ok: {n} rows in 1 table(s)" in capsys.readouterr().out
    assert main(["data", "validate", str(root.parent)]) == 2
    assert "is not a measurement bundle: it has no measurements.csv" in capsys.readouterr().err


def _bad_collective_bundle(tmp_path: Path) -> Path:
    """A bundle whose third row is a collective layout no node of DGX-H100 holds (64 ranks on 2 nodes of 8)."""
    rows = pd.DataFrame([{"device": "H100-SXM", "op": "all_reduce", "dtype": "fp16", "size_bytes": s, "n_ranks": r,
                          "n_nodes": n, "system": "DGX-H100", "time_us": 20.0}
                         for s, r, n in ((1024, 8, 1), (2048, 8, 1), (16384, 64, 2))])
    return write_bundle(tmp_path / "bad-bundle", rows, "", {})


def test_a_bundle_row_the_roofline_refuses_names_its_file_and_csv_line(tmp_path, capsys):
    """A bundle's rows are checked like a table file's: the error names the bundle's measurements.csv, the row and
    its CSV line (not the row's position in the concatenated tables), whether the bundle is read alone, among
    other inputs, by the project loader or by `hybrid data validate`."""
    from hybrid.cli.main import main
    from hybrid.tracking.inputs import load_measurements

    bundle = _bad_collective_bundle(tmp_path)
    ok = tmp_path / "ok.csv"
    ok.write_text("device,op,dtype,time_us,size_bytes,n_ranks,n_nodes,system\n"
                  + "H100-SXM,all_reduce,fp16,20,1024,8,1,DGX-H100\n" * 4)
    want = rf"{bundle / TABLE_FILE}: row 3 \(CSV line 4\): collective: 64 ranks on 2 node\(s\) of DGX-H100"
    for load in (lambda: load_bundle(bundle), lambda: load_measurements([ok, bundle]),
                 lambda: load_project_bundles(root=tmp_path)):
        with pytest.raises(InvalidInputError, match=want) as err:
            load()
        assert "row index" not in str(err.value)
    assert main(["data", "validate", str(ok), str(bundle)]) != 0
    err = capsys.readouterr().err
    assert f"{bundle / TABLE_FILE}: row 3 (CSV line 4): collective: 64 ranks" in err and "row index" not in err


def test_measurements_carry_the_roofline_computed_while_checking_rows(tmp_path):
    """load_measurements computes each row's roofline once, while checking it, and passes it on: the frame equals
    a fresh roofline of the concatenated table (a bundle's own catalog and a plain file), and a table replaced
    since (a subsample) gets its own, not the stale one."""
    from hybrid.ops.roofline import roofline
    from hybrid.tracking.inputs import load_measurements, subsample

    bundle = write_bundle(tmp_path / "b-cpu", _table("TEST-CPU-X", "TEST-SYS-X"),
                          catalog_toml({"TEST-CPU-X": _device("TEST-CPU-X")},
                                       {"TEST-SYS-X": _system("TEST-SYS-X", "TEST-CPU-X")}), {})
    gpu = tmp_path / "gpu.csv"
    gpu.write_text("device,op,dtype,m,n,k,time_us\n" + "".join(f"H100-SXM,gemm,bf16,{s},{s},{s},{s / 10}\n"
                                                                for s in (256, 512, 1024, 2048)))
    data = load_measurements([bundle, gpu], bundle_catalog([bundle]))
    assert data.base is not None and len(data.base) == len(data.table) == 7
    fresh = roofline(data.table, data.catalog)
    pd.testing.assert_frame_equal(data.roofline(), fresh)
    assert data.roofline() is data.base  # not computed again
    data.table = subsample(data.table, 3)
    again = data.roofline()
    assert len(again) == 3
    pd.testing.assert_frame_equal(again, roofline(data.table, data.catalog))


def test_a_bundle_without_its_catalog_file_is_read_with_the_catalog_given(tmp_path):
    """A bundle folder copied without its catalog.toml, whose device only a model's catalog knows (`hybrid evaluate
    DIR --model M`), is read with the catalog given, as its measurements.csv alone is: it named the device unknown."""
    import shutil

    from hybrid.tracking.inputs import load_measurements

    src = Path(__file__).resolve().parents[1] / "datasets" / "cpu-amd-epyc-1c"
    bare = tmp_path / "copied"
    bare.mkdir()
    shutil.copy(src / "measurements.csv", bare / "measurements.csv")
    model_catalog = bundle_catalog([src])  # what a model fitted on the bundle knows
    with pytest.raises(SchemaError, match="unknown device 'cpu-amd-epyc-1c'"):
        load_measurements([bare])  # no catalog given: the default one, which lacks the device
    as_dir = load_measurements([bare], model_catalog)
    as_file = load_measurements([bare / "measurements.csv"], model_catalog)
    assert len(as_dir.table) == len(as_file.table) > 0
    assert set(as_dir.table["device"].astype(str)) == {"cpu-amd-epyc-1c"}


def test_project_attention_rows_are_the_square_sdpa_rows_of_the_gpu_bundles():
    """What the LLM benchmarks join to their public calibration: the H200 profile's square SDPA rows (prefill and
    training, 16 queries or more), never a decode row (those stay priced as before)."""
    from hybrid.data.bundle import load_project_attention

    rows = load_project_attention("gpu")
    assert len(rows) == 272 and set(rows["op"]) == {"attention"} and set(rows["device"]) == {"H200"}
    assert (rows["q_len"] == rows["kv_len"]).all() and (rows["q_len"] >= 16).all()
    assert rows["dtype"].value_counts().to_dict() == {"fp16": 112, "bf16": 112, "fp32": 48}
    assert load_project_attention("cpu").empty  # the committed CPU bundle has no attention rows
