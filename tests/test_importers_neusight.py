"""NeuSight importer on every real NeuSight kernel file, plus deliberately broken copies."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid.data.importers import IMPORTERS, DataImportWarning, import_neusight
from hybrid.errors import ImportFormatError, SchemaError, UnknownDeviceError
from hybrid.ops.families import FAMILIES


def test_registry_finds_all_neusight_kernel_files(shared_datasets):
    files = IMPORTERS["neusight"].find(shared_datasets)
    names = {p.relative_to(shared_datasets).as_posix() for p in files}
    assert len(files) == 34  # 39 CSVs minus the 5 convolution-only collections (imported by their path)
    assert "neusight/e2e_labels_dev.csv" not in names  # end-to-end labels are not kernel tables
    assert any("dataset_amd" in n for n in names) and any("test-dev" in n for n in names)


def test_whole_upstream_test_folder_is_found_beside_or_instead_of_test_dev(shared_datasets, tmp_path, catalog):
    """The public-data directory may hold NeuSight's whole upstream test folder (more GPUs) at its upstream path
    instead of the derived ``test-dev`` subset, or both: every reader finds it, and a measurement in both is read
    once."""
    from hybrid.data.importers import import_paths
    from hybrid.data.importers.neusight import collections

    dev = sorted((shared_datasets / "neusight/test-dev").glob("*.csv"))
    upstream = tmp_path / "data/neusight/scripts/asplos/data/dataset/test"
    upstream.mkdir(parents=True)
    for f in dev:  # the subset's files, 40 rows each, as the whole folder would hold them
        upstream.joinpath(f.name).write_text("".join(f.read_text().splitlines(keepends=True)[:41]))
    root = tmp_path / "data"
    assert collections(root, "test") == [upstream] and collections(root, "train") == []
    assert {p.name for p in IMPORTERS["neusight"].find(root)} == {f.name for f in dev}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        alone = import_paths("neusight", collections(root, "test"), catalog=catalog)
    assert len(alone) == 40 * len(dev)
    # the derived subset beside it: its first 40 rows per file are the same measurements, read once
    sub = root / "neusight/test-dev"
    sub.mkdir()
    for f in dev:
        sub.joinpath(f.name).write_text("".join(f.read_text().splitlines(keepends=True)[:61]))
    assert collections(root, "test") == [sub, upstream]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        both = import_paths("neusight", collections(root, "test"), catalog=catalog)
        root_search = import_paths("neusight", root, catalog=catalog)
    assert len(both) == len(root_search) == 60 * len(dev)
    assert both["source"].str.contains("dataset/test/").sum() == 40 * len(dev)  # the deeper copy is kept
    with pytest.raises(ValueError, match="which must be"):
        collections(root, "dev")


@pytest.mark.data_files("neusight")
def test_every_file_imports_with_plausible_values(path, catalog):
    raw = pd.read_csv(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = import_neusight(path, catalog=catalog)
    assert len(df) == len(raw)  # every row imports (conv rows too: see test_convolution_file_imports_as_conv2d)
    assert (df["dtype"] == "fp32").all() and (df["framework"] == "pytorch").all()
    assert set(df["device"]) <= set(catalog.devices)
    # Latency is milliseconds: time_us is exactly 1000x the file's column
    lat = raw["Latency"].to_numpy()
    np.testing.assert_allclose(df["time_us"].to_numpy(), lat * 1000.0, rtol=1e-12)
    for dev_key, g in df.groupby("device"):
        dev = catalog.devices[dev_key]
        fam = g["op"].map(lambda o: next(f for f in FAMILIES.values() if o in f.ops).name)
        gemm = g[fam == "gemm"]
        if len(gemm):
            flops = FAMILIES["gemm"].flops(gemm)
            achieved = flops / (gemm["time_us"].to_numpy() * 1e-6)
            # FP32 SGEMM cannot beat the FP32 peak (5 % slack for boost clocks above the datasheet)
            assert achieved.max() < 1.05 * dev.peak("fp32"), (dev_key, achieved.max() / dev.peak("fp32"))
            assert achieved.max() > 0.2 * dev.peak("fp32")  # and big GEMMs get close to it
        mem = g[fam.isin(["elementwise", "norm", "softmax"])]
        for fname in ("elementwise", "norm", "softmax"):
            sub = mem[fam[mem.index] == fname]
            if len(sub):
                bw = FAMILIES[fname].bytes(sub) / (sub["time_us"].to_numpy() * 1e-6)
                assert bw.max() < 1.1 * dev.mem_bw, (dev_key, fname, bw.max() / dev.mem_bw)


def test_shapes_map_to_canonical_columns(shared_datasets, catalog):
    path = shared_datasets / "neusight/test-dev/bmm.csv"
    raw = pd.read_csv(path, nrows=50)
    df = import_neusight(path, catalog=catalog).head(50)
    assert (df["op"] == "bmm").all()
    for src, dst in (("B", "b"), ("M", "m"), ("N", "n"), ("K", "k")):
        assert (df[dst].to_numpy() == raw[src].to_numpy()).all()
    assert (df["framework_version"] == "2.1.0").all()
    assert (df["library_version"] == "CUDA 12.1; cuDNN 8.9.2").all()
    elem = import_neusight(shared_datasets / "neusight/scripts/asplos/data/dataset/train/elem.csv", catalog=catalog)
    raw = pd.read_csv(shared_datasets / "neusight/scripts/asplos/data/dataset/train/elem.csv")
    assert (elem["elements"].to_numpy() == (raw["B"] * raw["H"]).to_numpy()).all()
    v = dict(zip(raw["OPName"], elem["variant"], strict=False))
    assert v["addu"] == "add_scalar" and v["gelu"] == "gelu"
    assert elem.loc[elem["variant"] == "add_scalar", "n_inputs"].eq(1).all()
    amd = import_neusight(shared_datasets / "neusight/scripts/asplos/data/dataset_amd/test/collect/bmm/p2.4.1/"
                          "AMD Instinct MI210.csv", catalog=catalog)
    assert (amd["framework_version"] == "2.4.1").all() and (amd["device"] == "MI210").all()


# ------------------------------------------------------------------------------------ broken copies
@pytest.fixture
def small_csv(shared_datasets, tmp_path) -> Path:
    text = (shared_datasets / "neusight/test-dev/softmax.csv").read_text().splitlines(keepends=True)
    path = tmp_path / "softmax.csv"
    path.write_text("".join(text[:30]))
    return path


def test_valid_copy_imports(small_csv, catalog):
    assert len(import_neusight(small_csv, catalog=catalog)) == 29


def test_truncated_mid_row(small_csv, catalog):
    text = small_csv.read_text()
    small_csv.write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1])
    with pytest.raises(ImportFormatError, match=r"softmax\.csv.*(truncated|missing value)"):
        import_neusight(small_csv, catalog=catalog)


def test_missing_column(small_csv, catalog):
    df = pd.read_csv(small_csv).drop(columns=["Latency"])
    df.to_csv(small_csv, index=False)
    with pytest.raises(ImportFormatError, match=r"softmax\.csv: missing column\(s\) 'Latency'"):
        import_neusight(small_csv, catalog=catalog)


def test_missing_shape_column(small_csv, catalog):
    pd.read_csv(small_csv).drop(columns=["H"]).to_csv(small_csv, index=False)
    with pytest.raises(ImportFormatError, match=r"softmax\.csv.*missing H"):
        import_neusight(small_csv, catalog=catalog)


def test_nan_latency(small_csv, catalog):
    df = pd.read_csv(small_csv)
    df.loc[7, "Latency"] = np.nan
    df.to_csv(small_csv, index=False)
    with pytest.raises(ImportFormatError, match=r"softmax\.csv: line 9, column 'Latency': missing value"):
        import_neusight(small_csv, catalog=catalog)


def test_negative_and_garbage_values(small_csv, catalog):
    df = pd.read_csv(small_csv)
    df.loc[3, "Latency"] = -1.0
    df.to_csv(small_csv, index=False)
    with pytest.raises(ImportFormatError, match=r"line 5, column 'Latency': must be > 0"):
        import_neusight(small_csv, catalog=catalog)
    df["Latency"] = df["Latency"].astype(object)
    df.loc[3, "Latency"] = "fast"
    df.to_csv(small_csv, index=False)
    with pytest.raises(ImportFormatError, match=r"line 5, column 'Latency': not a number"):
        import_neusight(small_csv, catalog=catalog)


def test_empty_and_garbage_files(tmp_path, catalog):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ImportFormatError, match=r"empty\.csv: file is empty"):
        import_neusight(empty, catalog=catalog)
    header = tmp_path / "header.csv"
    header.write_text("OPName,Latency,Device,B,H\n")
    with pytest.raises(ImportFormatError, match=r"header\.csv: no data rows"):
        import_neusight(header, catalog=catalog)
    garbage = tmp_path / "garbage.csv"
    garbage.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(ImportFormatError, match=r"garbage\.csv"):
        import_neusight(garbage, catalog=catalog)


def test_unknown_op_and_device(small_csv, catalog):
    df = pd.read_csv(small_csv)
    df["OPName"] = df["OPName"].astype(object)
    df.loc[2, "OPName"] = "fft"
    df.to_csv(small_csv, index=False)
    with pytest.raises(ImportFormatError, match=r"line 4: unknown NeuSight OPName 'fft'"):
        import_neusight(small_csv, catalog=catalog)
    df.loc[2, "OPName"] = "softmax"
    df["Device"] = "Quantum GPU 9000"
    df.to_csv(small_csv, index=False)
    with pytest.raises(UnknownDeviceError, match=r"softmax\.csv: unknown device 'Quantum GPU 9000'.*--device"):
        import_neusight(small_csv, catalog=catalog)
    out = import_neusight(small_csv, device="Tesla T4", catalog=catalog)
    assert (out["device"] == "T4").all()


def test_schema_error_names_the_file(small_csv, catalog):
    df = pd.read_csv(small_csv)
    df["B"] = df["B"].astype(float)
    df.loc[1, "B"] = 2.5  # a fractional row count passes the importer but not the schema
    df.to_csv(small_csv, index=False)
    with pytest.raises(SchemaError, match=r"softmax\.csv.*'rows'.*integer"):
        import_neusight(small_csv, catalog=catalog)


CONV = "neusight/scripts/asplos/data/dataset/train/collect/conv/p2.1.0"


def test_convolution_file_imports_as_conv2d(shared_datasets, catalog):
    """NeuSight's conv collections become canonical conv2d forward rows that pass the schema."""
    from hybrid.data.schema import validate

    path = shared_datasets / CONV / "Tesla T4.csv"
    raw = pd.read_csv(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataImportWarning)  # nothing is skipped any more
        df = import_neusight(path, catalog=catalog)
    assert len(df) == len(raw) > 4000
    assert (df["op"] == "conv2d").all() and (df["direction"] == "fwd").all() and (df["variant"] == "fwd").all()
    assert (df["dtype"] == "fp32").all() and (df["device"] == "T4").all()
    for src, dst in (("B", "batch"), ("Input_Channel", "in_channels"), ("Output_Channel", "out_channels"),
                     ("Input_Size", "height"), ("Input_Size", "width"), ("Kernel_Szie", "kernel_h"),
                     ("Kernel_Szie", "kernel_w"), ("Stride", "stride"), ("Padding", "padding")):
        assert (df[dst].to_numpy() == raw[src].to_numpy()).all(), dst
    assert (df["groups"] == 1).all() and (df["dilation"] == 1).all()
    np.testing.assert_allclose(df["time_us"].to_numpy(), raw["Latency"].to_numpy() * 1000.0, rtol=1e-12)
    assert len(validate(df, catalog)) == len(df)
    assert FAMILIES["conv"].name == "conv" and "conv2d" in FAMILIES["conv"].ops
    # Latency is milliseconds here too: the nominal (direct) FLOP rate stays below the 2.25x that Winograd
    # F(2x2, 3x3) saves over the FP32 peak, and the typical layer runs below the peak (as microseconds or
    # seconds it would be 1000x off either way)
    rate = FAMILIES["conv"].flops(df) / (df["time_us"].to_numpy() * 1e-6) / catalog.devices["T4"].peak("fp32")
    assert rate.max() < 2.25 and 0.2 < np.median(rate) < 1.0, (rate.max(), np.median(rate))


def test_every_conv_collection_imports_and_dedupes(shared_datasets, catalog, tmp_path):
    from hybrid.data.importers import import_paths

    table = import_paths("neusight", shared_datasets / CONV, catalog=catalog)
    raw = sum(len(pd.read_csv(p)) for p in (shared_datasets / CONV).glob("*.csv"))
    assert len(table) == raw  # five GPUs, no copies between them
    assert set(table["device"]) == {"A100-PCIE-80GB", "P100-PCIE-16GB", "P4", "T4", "V100-PCIE-32GB"}
    # a copy of a conv file elsewhere (an aggregate, as upstream does for ln/softmax) is dropped at import
    part = pd.read_csv(shared_datasets / CONV / "Tesla P4.csv", nrows=40)
    (tmp_path / "p2.1.0").mkdir()
    part.to_csv(tmp_path / "p2.1.0" / "Tesla P4.csv", index=False)
    part.to_csv(tmp_path / "conv.csv", index=False)
    both = import_neusight([tmp_path / "conv.csv", tmp_path / "p2.1.0" / "Tesla P4.csv"], catalog=catalog)
    assert len(both) == 40 and both["source"].str.endswith("p2.1.0/Tesla P4.csv").all()


@pytest.fixture
def conv_csv(shared_datasets, tmp_path) -> Path:
    path = tmp_path / "conv.csv"
    pd.read_csv(shared_datasets / CONV / "Tesla V100-PCIE-32GB.csv", nrows=20).to_csv(path, index=False)
    return path


@pytest.mark.parametrize(("column", "value", "message"), [
    ("Padding", -1, r"line 5, column 'Padding': must be a non-negative whole number"),
    ("Input_Channel", 2.5, r"line 5, column 'Input_Channel': must be a non-negative whole number"),
    ("Stride", 0, r"line 5, column 'Stride': must be > 0"),
    ("B", None, r"line 5, column 'B': missing value"),
    ("Output_Channel", "wide", r"line 5, column 'Output_Channel': not a number"),
    ("Kernel_Szie", 99, r"line 5: convolution kernel 99 is larger than the padded input"),
])
def test_malformed_conv_rows_are_clear_errors(conv_csv, catalog, column, value, message):
    df = pd.read_csv(conv_csv)
    df[column] = df[column].astype(object)
    df.loc[3, column] = value
    df.to_csv(conv_csv, index=False)
    with pytest.raises(ImportFormatError, match=r"conv\.csv: " + message):
        import_neusight(conv_csv, catalog=catalog)


def test_conv_columns_missing_or_respelled(conv_csv, catalog):
    df = pd.read_csv(conv_csv)
    df.rename(columns={"Kernel_Szie": "Kernel_Size"}).to_csv(conv_csv, index=False)
    assert (import_neusight(conv_csv, catalog=catalog)["kernel_w"] == df["Kernel_Szie"]).all()  # fixed spelling
    df.drop(columns=["Kernel_Szie"]).to_csv(conv_csv, index=False)
    with pytest.raises(ImportFormatError, match=r"conv\.csv: convolution rows need columns .* missing Kernel_Szie"):
        import_neusight(conv_csv, catalog=catalog)


def test_directory_import_drops_cross_file_copies(shared_datasets, catalog):
    """collect/ln.csv and collect/softmax.csv repeat the per-GPU files; the import keeps one copy."""
    from hybrid.data.importers import import_paths

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = import_paths("neusight", shared_datasets, catalog=catalog)
    pw = table[table["op"].isin(["elementwise", "layernorm", "softmax"])]
    key = ["device", "op", "rows", "hidden", "elements", "variant"]
    rounded = pw["time_us"].map("{:.5g}".format)
    # no measurement (shape and time) appears in two files any more
    spans = pw.assign(t=rounded).groupby(key + ["t"], dropna=False)["source"].nunique()
    assert spans.max() == 1
    # the per-GPU collections are what is kept, the aggregated copies are gone
    assert not table["source"].str.endswith("collect/ln.csv").any()
    assert not table["source"].str.endswith("collect/softmax.csv").any()
    assert len(pw) == 28793 and len(table) == 170457
    # GEMM rows had no copies: every bmm/linear row of every file is still there
    assert (table["op"].isin(["bmm", "linear"])).sum() == 141664


def test_drop_cross_file_duplicates_keeps_repeats_within_a_file():
    from hybrid.data.importers.neusight import drop_cross_file_duplicates

    rows = pd.DataFrame({"device": ["T4"] * 5, "op": ["softmax"] * 5, "rows": [8.0, 8.0, 8.0, 8.0, 16.0],
                         "hidden": [64.0] * 5, "time_us": [10.0, 10.0, 10.000001, 11.0, 10.0],
                         "source": ["a/x/T4.csv", "a/x/T4.csv", "a/all.csv", "a/all.csv", "a/all.csv"]})
    with pytest.warns(DataImportWarning, match=r"neusight import: dropped 1 row\(s\) that repeat a measurement of "
                                               r"another file .*: 1 of a/all\.csv$"):
        out = drop_cross_file_duplicates(rows)
    # the two within-file repeats stay, the aggregated copy (same time to 5 digits) goes; a different
    # time (11 us) or a different shape is another measurement
    assert out["time_us"].tolist() == [10.0, 10.0, 11.0, 10.0]
    assert out["source"].tolist() == ["a/x/T4.csv", "a/x/T4.csv", "a/all.csv", "a/all.csv"]


def test_copies_across_files_are_dropped_once_over_all_chunks(shared_datasets, catalog, monkeypatch):
    import dataclasses

    from hybrid.data import importers as imp

    base = shared_datasets / "neusight" / "scripts" / "asplos" / "data" / "dataset" / "train" / "collect"
    files = [base / "ln.csv", *sorted((base / "ln" / "p2.1.0").glob("*.csv"))]  # the aggregate + its per-GPU parts
    calls = []

    def counted(table):
        calls.append(len(table))
        return imp.drop_cross_file_duplicates(table)

    monkeypatch.setitem(imp.IMPORTERS, "neusight", dataclasses.replace(imp.IMPORTERS["neusight"], dedupe=counted))
    one_chunk = imp.import_paths("neusight", files, catalog=catalog)
    assert len(calls) == 1  # once, at import (the per-file-set pass inside import_neusight is off)
    raw = calls[0]
    two_chunks = imp.import_paths("neusight", files, catalog=catalog, chunk=2)
    assert len(calls) == 2 and calls[1] == raw  # chunked: still one pass, over every file
    assert len(one_chunk) == len(two_chunks) < raw  # the aggregated file's copies are gone
    assert len(one_chunk) == len(import_neusight(files, catalog=catalog))  # same as the importer on its own
    assert not one_chunk["source"].astype(str).str.endswith("collect/ln.csv").any()  # per-GPU files kept


def test_a_directory_without_files_of_the_format_says_every_pattern_tried(tmp_path):
    """A directory outside the public layout is searched for the format's file-name pattern (neusight: any *.csv
    below it), but the error listed only the public-layout globs, as if files had to sit under
    neusight/scripts/asplos/..."""
    from hybrid.data.importers import import_paths
    from hybrid.errors import ImportFormatError

    (tmp_path / "notes.txt").write_text("no tables here\n")
    with pytest.raises(ImportFormatError, match=rf"{tmp_path.name}: no neusight files found \(patterns: "
                                                r"neusight/scripts/.*; outside that layout, any file named \*\.csv "
                                                r"below the directory\)"):
        import_paths("neusight", [tmp_path])


@pytest.mark.parametrize("column", ["B", "H"])
def test_a_fractional_elementwise_shape_is_refused_with_its_line(shared_datasets, tmp_path, column):
    """An elementwise row's elements are B x H: B = 1.5 with H = 8192 made 12288 elements, a whole number the schema
    accepted, so the damaged row was imported as a measurement of another shape."""
    from hybrid.data.importers import import_neusight
    from hybrid.errors import ImportFormatError

    raw = pd.read_csv(shared_datasets / "neusight/test-dev/elem.csv").head(8).astype({column: float})
    raw.loc[4, column] = 1.5  # CSV line 6
    p = tmp_path / "elem.csv"
    raw.to_csv(p, index=False)
    with pytest.raises(ImportFormatError, match=rf"elem\.csv: line 6, column '{column}': 1\.5 is not a whole number"):
        import_neusight(p)
