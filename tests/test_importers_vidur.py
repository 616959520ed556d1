"""Vidur compute and network importers on every real Vidur profile."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections.collective_transfer import intra_class
from hybrid.data.importers import import_vidur_compute, import_vidur_network
from hybrid.data.importers.vidur import MODEL_CONFIGS
from hybrid.errors import HybridError, ImportFormatError
from hybrid.ops.families import FAMILIES


@pytest.mark.data_files("vidur-compute")
def test_every_compute_profile(path, catalog):
    raw = pd.read_csv(path)
    df = import_vidur_compute(path, catalog=catalog)
    cfg = MODEL_CONFIGS[path.parent.name]
    assert (df["dtype"] == "fp16").all() and (df["model"] == path.parent.name).all()
    assert (df["device"] == catalog.resolve_device(path.parents[2].name)).all()
    ops_in_file = {c.split(".")[1] for c in raw.columns if c.endswith(".median")} - {"emb"}
    assert len(df) == len(raw) * len(ops_in_file)
    # milliseconds -> microseconds, median of the attn_pre_proj column
    qkv = df[df["variant"] == "attn_pre_proj"]
    np.testing.assert_allclose(qkv["time_us"], raw["time_stats.attn_pre_proj.median"] * 1000)
    d = cfg.hidden // cfg.heads
    np.testing.assert_array_equal(qkv["n"], (cfg.heads + 2 * cfg.kv_heads) * d / raw["num_tensor_parallel_workers"])
    assert (qkv["k"] == cfg.hidden).all() and (qkv["m"] == raw["num_tokens"]).all()
    assert set(qkv.loc[qkv["m"] == 1, "op"]) <= {"gemv"} and set(qkv.loc[qkv["m"] > 1, "op"]) == {"gemm"}
    up = df[df["variant"] == "mlp_up_proj"]
    assert (up["n"] * up["tp"] == (2 if cfg.gated else 1) * cfg.intermediate).all()
    assert set(df.loc[df["variant"].isin(["input_layernorm"]), "op"]) == {cfg.norm}
    # FP16 GEMMs below the device's fp16 tensor peak; min <= median <= max
    dev = catalog.devices[df["device"].iloc[0]]
    g = df[df["op"].isin(["gemm", "gemv"])]
    achieved = FAMILIES["gemm"].flops(g) / (g["time_us"].to_numpy() * 1e-6)
    assert achieved.max() < dev.peak("fp16")
    assert (df["time_us_min"] <= df["time_us"] + 1e-9).all() and (df["time_us"] <= df["time_us_max"] + 1e-9).all()


@pytest.mark.data_files("vidur-network")
def test_every_network_profile(path, catalog):
    raw = pd.read_csv(path)
    df = import_vidur_network(path, catalog=catalog)
    assert len(df) == len(raw) and (df["op"] == path.stem).all()
    sys_key = catalog.resolve_system(path.parent.name)
    assert (df["system"] == sys_key).all() and (df["device"] == catalog.systems[sys_key].device).all()
    np.testing.assert_array_equal(df["size_bytes"], raw["size"])
    np.testing.assert_array_equal(df["n_nodes"], np.ceil(raw["num_workers"] / raw["devices_per_node"]))
    np.testing.assert_allclose(df["time_us"], raw[f"time_stats.{path.stem}.median"] * 1000)
    assert (df["size_bytes"] / (df["time_us"] * 1e-6) < 1e12).all()  # < 1 TB/s algorithm bandwidth
    # the catalog entry describes the machine measured: as many nodes as the profile uses, with a network where
    # it spans nodes, and a link the entry calls measured moves large send/recvs at about its rate
    system = catalog.systems[sys_key]
    assert df["n_nodes"].max() <= system.max_nodes
    assert system.inter_bw > 0 or (df["n_nodes"] == 1).all()
    big = df[(df["op"] == "send_recv") & (df["size_bytes"] >= 16 * 2**20)]
    for link, rows, bw in (("inter", big["n_nodes"] == 2, system.inter_bw),
                           ("intra", (big["n_nodes"] == 1) & (intra_class(system) != "pcie-pairs"), system.intra_bw)):
        if link in system.measured_links and rows.any():
            rate = np.median(big.loc[rows, "size_bytes"] / (big.loc[rows, "time_us"] * 1e-6))
            assert 0.75 < rate / bw < 1.33, (link, rate / 1e9, bw / 1e9)


def test_broken_profiles(shared_datasets, tmp_path, catalog):
    src = shared_datasets / "vidur/data/profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv"
    raw = pd.read_csv(src).head(20)
    d = tmp_path / "a100" / "acme" / "Mystery-1B"
    d.mkdir(parents=True)
    raw.drop(columns=["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp"]).to_csv(
        d / "mlp.csv", index=False)
    with pytest.raises(ImportFormatError, match=r"mlp\.csv: no model dimension columns.*'Mystery-1B'"):
        import_vidur_compute(d / "mlp.csv", catalog=catalog)
    raw.to_csv(d / "mlp.csv", index=False)  # with the columns, an unknown model is fine
    assert len(import_vidur_compute(d / "mlp.csv", catalog=catalog)) == 20 * 9
    bad = raw.copy()
    bad.loc[5, "time_stats.mlp_act.median"] = np.nan
    bad.to_csv(d / "mlp.csv", index=False)
    with pytest.raises(ImportFormatError, match=r"mlp\.csv: line 7, column 'time_stats\.mlp_act\.median'"):
        import_vidur_compute(d / "mlp.csv", catalog=catalog)
    net = pd.read_csv(shared_datasets / "vidur/data/profiling/network/a100_dgx/all_reduce.csv").head(5)
    p = tmp_path / "a100_dgx" / "all_reduce.csv"
    p.parent.mkdir()
    net.drop(columns=["num_workers"]).to_csv(p, index=False)
    with pytest.raises(ImportFormatError, match=r"all_reduce\.csv: missing column.*num_workers"):
        import_vidur_network(p, catalog=catalog)


def test_device_folder_of_either_vidur_layout(shared_datasets, tmp_path, catalog):
    """``compute/<device>/<org>/<model>/mlp.csv`` and Vidur's earlier flat ``profiling/<device>/mlp.csv`` both name
    their device; a folder naming no catalog device is an error that says so and how to pass one."""
    from hybrid.errors import UnknownDeviceError

    raw = pd.read_csv(shared_datasets / "vidur/data/profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv").head(8)
    flat = tmp_path / "data" / "profiling" / "h100" / "mlp.csv"
    flat.parent.mkdir(parents=True)
    raw.to_csv(flat, index=False)
    assert set(import_vidur_compute(flat, catalog=catalog)["device"]) == {"H100-SXM"}
    layered = tmp_path / "compute" / "a40" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv"
    layered.parent.mkdir(parents=True)
    raw.to_csv(layered, index=False)
    assert set(import_vidur_compute(layered, catalog=catalog)["device"]) == {"A40"}
    unknown = tmp_path / "compute" / "gpu-x" / "acme" / "Llama-2-7b-hf" / "mlp.csv"
    unknown.parent.mkdir(parents=True)
    raw.to_csv(unknown, index=False)
    with pytest.raises(UnknownDeviceError, match=r"unknown device 'gpu-x'.*--device"):
        import_vidur_compute(unknown, catalog=catalog)
    assert set(import_vidur_compute(unknown, device="L40S", catalog=catalog)["device"]) == {"L40S"}


def test_network_folder_naming_no_system_says_how_to_name_one(shared_datasets, tmp_path, catalog):
    """The folder of a network profile is read as its system: a folder the catalog does not know (and whose
    prefix is no device) is an error that says the folder name was read as the system and that ``--system`` or
    ``--device`` names it, not a bare "unknown device 'mycluster'"."""
    from hybrid.errors import UnknownDeviceError

    p = tmp_path / "mycluster" / "all_reduce.csv"
    p.parent.mkdir()
    p.write_bytes((shared_datasets / "vidur/data/profiling/network/a100_dgx/all_reduce.csv").read_bytes())
    with pytest.raises(UnknownDeviceError, match=r"all_reduce\.csv: folder name 'mycluster' is read as the "
                                                 r"system.*--system NAME.*--device NAME"):
        import_vidur_network(p, catalog=catalog)
    df = import_vidur_network(p, system="DGX-A100", catalog=catalog)
    assert set(df["system"]) == {catalog.resolve_system("DGX-A100")}
    df = import_vidur_network(p, device="A100-SXM4-80GB", catalog=catalog)
    assert set(df["device"]) == {"A100-SXM4-80GB"} and df["system"].isna().all()


def _llama_mlp_file(tmp_path, raw: pd.DataFrame):
    """``raw`` written as Vidur's A100 Llama-2-7B ``mlp.csv`` under ``tmp_path`` (the layout the importer reads the
    device and model from); returns its path."""
    d = tmp_path / "a100" / "meta-llama" / "Llama-2-7b-hf"
    d.mkdir(parents=True)
    raw.to_csv(d / "mlp.csv", index=False)
    return d / "mlp.csv"


def test_tp_degree_not_dividing_the_model_names_the_line(shared_datasets, tmp_path, catalog):
    """A tensor-parallel degree that does not divide the model's dimensions was refused with no line to look at."""
    raw = pd.read_csv(shared_datasets / "vidur/data/profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv").head(6)
    raw.loc[3, "num_tensor_parallel_workers"] = 3  # 4096 hidden, 32 heads: 3 divides neither
    mlp = _llama_mlp_file(tmp_path, raw)
    with pytest.raises(ImportFormatError, match=r"mlp\.csv: line 5: tensor-parallel degree 3 does not divide the "
                                                r"model dimensions of \w+"):
        import_vidur_compute(mlp, catalog=catalog)


@pytest.mark.parametrize("value, problem", [
    (1.5, r"devices_per_node 1\.5 is not a whole number"),
    (3, r"num_workers 4 is not a multiple of devices_per_node 3"),
    (16, r"devices_per_node 16 is more than max_devices_per_node 8"),
    (1000, r"devices_per_node 1000 is more than max_devices_per_node 8"),
])
def test_network_devices_per_node_that_cannot_be_is_refused(shared_datasets, tmp_path, catalog, value, problem):
    """``n_nodes`` is num_workers / devices_per_node: a devices_per_node of 1.5 was read as 2 nodes (ceil), one of
    1000 as 1 node, 3 for 4 workers as 2 nodes (an uneven spread), all written to the table without a word. Every
    public row has a whole devices_per_node dividing num_workers and at most max_devices_per_node."""
    raw = pd.read_csv(shared_datasets / "vidur/data/profiling/network/a100_dgx/all_reduce.csv")
    raw = raw[raw["num_workers"] == 4].head(6).reset_index(drop=True).astype({"devices_per_node": object})
    p = tmp_path / "a100_dgx" / "all_reduce.csv"
    p.parent.mkdir()
    raw.to_csv(p, index=False)
    assert len(import_vidur_network(p, catalog=catalog)) == 6
    raw.loc[3, "devices_per_node"] = value  # CSV line 5
    raw.to_csv(p, index=False)
    with pytest.raises(ImportFormatError, match=r"all_reduce\.csv: line 5: " + problem):
        import_vidur_network(p, catalog=catalog)


def test_network_line_cut_short_is_called_cut_and_lines_count_blank_lines(shared_datasets, tmp_path, catalog):
    """A line cut before its collective read "line 7: collective <NA> does not match the time_stats column", and the
    line number was the row position + 2, one short after a blank line."""
    src = shared_datasets / "vidur/data/profiling/network/a100_dgx/all_reduce.csv"
    lines = src.read_text().splitlines()
    d = tmp_path / "a100_dgx"
    d.mkdir()
    p = d / "all_reduce.csv"
    p.write_text("\n".join(lines[:6]) + "\n" + ",".join(lines[6].split(",")[:8]) + "\n")
    with pytest.raises(ImportFormatError, match=r"all_reduce\.csv: line 7: no collective \(nor any of "
                                                r"devices_per_node, max_devices_per_node\): the line looks cut short"):
        import_vidur_network(p, catalog=catalog)
    other = lines[6].replace("all_reduce,", "all_gather,")  # another collective, after a blank line: line 8
    p.write_text("\n".join(lines[:6]) + "\n\n" + other + "\n")
    with pytest.raises(ImportFormatError, match=r"line 8: collective 'all_gather' does not match"):
        import_vidur_network(p, catalog=catalog)


def test_schema_errors_of_imported_rows_name_the_source_line(shared_datasets, tmp_path, catalog):
    """The schema checks each imported row (a median above the row's max time), but its error named the position in
    the long table built from the wide file: "row 27 (CSV line 28)" of a 12-line mlp.csv whose bad value sat on
    line 6. The error names the file's line now."""
    raw = pd.read_csv(shared_datasets / "vidur/data/profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv").head(11)
    raw.loc[4, "time_stats.mlp_up_proj.median"] = 1000.0  # CSV line 6: 1 s, above the row's max
    mlp = _llama_mlp_file(tmp_path, raw)
    with pytest.raises(HybridError, match=r"mlp\.csv: line 6 \(mlp_up_proj\), column 'time_us_max' of the imported "
                                          r"row: .* is below the median time_us"):
        import_vidur_compute(mlp, catalog=catalog)


@pytest.mark.parametrize(("value", "rows", "error"), [
    (None, slice(None), r"line 2, column 'n_embd': missing value"),
    ("abc", slice(None), r"line 2, column 'n_embd': not a number \('abc'\)"),
    (4096.5, slice(None), r"line 2, column 'n_embd': 4096\.5 is not a whole number"),
    (8192, slice(3, None), r"line 5, column 'n_embd': 8192 differs from line 2's 4096: the model dimension columns "
                           r"change between rows; one model per file"),
])
def test_model_dimension_columns_are_checked_with_their_line(shared_datasets, tmp_path, catalog, value, rows, error):
    """The model dimension columns were read as int(first row): an empty column crashed (ValueError: cannot convert
    float NaN to integer, naming no file), a fractional hidden size 4096.5 was cut to 4096 silently, and rows that
    disagreed were refused without a line."""
    raw = pd.read_csv(shared_datasets / "vidur/data/profiling/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv").head(6)
    raw["n_embd"] = raw["n_embd"].astype(object)
    raw.loc[raw.index[rows], "n_embd"] = value
    mlp = _llama_mlp_file(tmp_path, raw)
    with pytest.raises(ImportFormatError, match=r"mlp\.csv: " + error):
        import_vidur_compute(mlp, catalog=catalog)
