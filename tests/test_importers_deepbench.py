"""DeepBench importer on the real tidy GEMM and all-reduce tables."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from hybrid.data.importers import IMPORTERS, DataImportWarning, import_deepbench
from hybrid.data.importers.deepbench import precision_dtype
from hybrid.errors import ImportFormatError
from hybrid.ops.families import FAMILIES


def test_gemm_table(shared_datasets, catalog):
    path = shared_datasets / "deepbench/deepbench_gemm_tidy.csv"
    raw = pd.read_csv(path)
    df = import_deepbench(path, catalog=catalog)
    assert len(df) == len(raw) and (df["op"] == "gemm").all() and (df["b"] == 1).all()
    assert df.groupby("dtype").size().to_dict() == {"fp16": 480, "fp32": 1600, "int8": 300}
    assert set(df["variant"]) <= {"nn", "nt", "tn", "tt", "nn+fp32math", "tn+fp32math", "nt+fp32math"}
    np.testing.assert_allclose(df["time_us"], raw["time_ms"] * 1000)
    # the published tflops column agrees with 2MNK / time
    flops = FAMILIES["gemm"].flops(df) / (df["time_us"].to_numpy() * 1e-6)
    np.testing.assert_allclose(flops / 1e12, raw["tflops"], rtol=0.02)
    for dev, g in df.groupby("device"):
        for dt, gg in g.groupby("dtype"):
            f = FAMILIES["gemm"].flops(gg) / (gg["time_us"].to_numpy() * 1e-6)
            math = "fp32" if gg["variant"].str.contains("fp32math").all() else dt
            assert f.max() < 1.1 * catalog.devices[dev].peak(math), (dev, dt, f.max() / catalog.devices[dev].peak(math))


def test_allreduce_table(shared_datasets, catalog):
    path = shared_datasets / "deepbench/deepbench_allreduce_tidy.csv"
    raw = pd.read_csv(path)
    with pytest.warns(DataImportWarning, match=r"skipped 50 row\(s\) with no time"):
        df = import_deepbench(path, catalog=catalog)
    timed = raw[raw["mean_time_ms"].notna()]
    assert len(df) == len(timed) and (df["op"] == "all_reduce").all()
    np.testing.assert_array_equal(df["size_bytes"], timed["num_floats"] * 4)
    np.testing.assert_array_equal(df["n_nodes"], timed["num_nodes"].fillna(1))
    np.testing.assert_array_equal(df["n_ranks"], timed["num_gpus"])
    assert df["algorithm"].notna().all() and (df["time_us_std"] >= 0).all()
    # each GPU's rows on the catalog's DeepBench set-up of that GPU (1.5625 GB/s per GPU between nodes), not on
    # generic nodes of the device (12.5 GB/s): the roofline of a 4-node row moved 8x with the system
    systems = df.groupby("device")["system"].unique().map(list).to_dict()
    assert systems == {"GTX-1080Ti": ["DeepBench-1080Ti"], "M40": ["DeepBench-M40"],
                       "P100-PCIE-16GB": ["DeepBench-P100"], "TitanX": ["DeepBench-TitanX"],
                       "TitanX-Pascal": ["DeepBench-TitanX-Pascal"]}
    # a system named by the caller wins; a device named by the caller is theirs, not DeepBench's set-up
    with pytest.warns(DataImportWarning):
        own = import_deepbench(path, catalog=catalog, device="P100-PCIE-16GB")
    assert "system" not in own.columns or own["system"].isna().all()


def test_registry_and_precision_strings(shared_datasets):
    assert {p.name for p in IMPORTERS["deepbench"].find(shared_datasets)} == {
        "deepbench_gemm_tidy.csv", "deepbench_allreduce_tidy.csv"}
    assert precision_dtype("Float") == ("fp32", "")
    assert precision_dtype("GEMM, Conv: Int8 multiplication, 32 bit accumulation") == ("int8", "")
    assert precision_dtype("16 bit inputs, 16 bit multiplication, 32 bit addition") == ("fp16", "")
    assert precision_dtype("16 bit inputs, 32 bit multiplication, 32 bit addition") == ("fp16", "+fp32math")


def test_non_gpu_rows_and_broken_files(shared_datasets, tmp_path, catalog):
    raw = pd.read_csv(shared_datasets / "deepbench/deepbench_gemm_tidy.csv").head(10)
    raw["gpu"] = raw["gpu"].astype(object)
    raw.loc[:3, "gpu"] = "iPhone_7"
    p = tmp_path / "gemm.csv"
    raw.to_csv(p, index=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = import_deepbench(p, catalog=catalog)
    assert len(df) == 6 and any("iPhone_7" in str(w.message) and "not a GPU" in str(w.message) for w in caught)
    raw["precision"] = raw["precision"].astype(object)
    raw.loc[5, "precision"] = "4 bit magic"
    raw.to_csv(p, index=False)
    with pytest.raises(ImportFormatError, match=r"gemm\.csv: unknown precision '4 bit magic'"):
        import_deepbench(p, catalog=catalog)
    conv = shared_datasets / "deepbench/deepbench_conv_tidy.csv"
    with pytest.raises(ImportFormatError, match=r"deepbench_conv_tidy\.csv: neither a DeepBench GEMM"):
        import_deepbench(conv, catalog=catalog)


def test_bad_gemm_rows_name_their_csv_line(shared_datasets, tmp_path, catalog):
    """Errors name the CSV line even after skipped non-GPU rows (the layout error counted kept rows: "row 2" for
    line 7); a row whose time and tflops disagree (a time from another row or in another unit) is an error, as in
    the XLA and LLMCompass tables, not a GEMM 10x off; an empty gpu cell is a missing device name, not a lookup
    of a device called 'nan'."""
    raw = pd.read_csv(shared_datasets / "deepbench/deepbench_gemm_tidy.csv").head(8).astype({"gpu": object})
    raw.loc[:3, "gpu"] = "iPhone_7"
    p = tmp_path / "gemm.csv"
    layout = raw.copy()
    layout.loc[5, "A_T"] = "X"  # CSV line 7
    layout.to_csv(p, index=False)
    with pytest.warns(DataImportWarning, match="not a GPU"), \
            pytest.raises(ImportFormatError, match=r"gemm\.csv: line 7: A_T/B_T must be N or T, got 'X'"):
        import_deepbench(p, catalog=catalog)
    slow = raw.copy()
    slow.loc[6, "time_ms"] = slow.loc[6, "time_ms"] * 10  # CSV line 8
    slow.to_csv(p, index=False)
    with pytest.warns(DataImportWarning, match="not a GPU"), \
            pytest.raises(ImportFormatError, match=r"gemm\.csv: line 8: time_ms .* and tflops .* disagree"):
        import_deepbench(p, catalog=catalog)
    blank = raw.copy()
    blank.loc[5, "gpu"] = None
    blank.to_csv(p, index=False)
    with pytest.raises(ImportFormatError, match=r"gemm\.csv: line 7, column 'gpu': missing device name"):
        import_deepbench(p, catalog=catalog)
    assert len(import_deepbench(p, catalog=catalog, device="V100-SXM2-16GB")) == 8


def test_allreduce_time_checked_against_its_bandwidth(shared_datasets, tmp_path, catalog):
    """The all-reduce table states each measurement twice, as the GEMM table does: GBps = num_gpus x 4 num_floats /
    time, exactly so in every public row. A time 10x off (another row's, or microseconds in the ms column) and a
    fractional float count (1.5 floats: a 6-byte buffer) were imported as measurements without a word."""
    raw = pd.read_csv(shared_datasets / "deepbench/deepbench_allreduce_tidy.csv")
    raw = raw[raw["mean_time_ms"].notna()].head(8).reset_index(drop=True)
    p = tmp_path / "allreduce.csv"
    raw.to_csv(p, index=False)
    assert len(import_deepbench(p, catalog=catalog)) == 8
    slow = raw.copy()
    slow.loc[4, "mean_time_ms"] = slow.loc[4, "mean_time_ms"] * 10  # CSV line 6
    slow.to_csv(p, index=False)
    with pytest.raises(ImportFormatError, match=r"allreduce\.csv: line 6: mean_time_ms .* and GBps .* disagree"):
        import_deepbench(p, catalog=catalog)
    frac = raw.drop(columns=["GBps"]).astype({"num_floats": float})
    frac.loc[2, "num_floats"] = 1.5  # CSV line 4
    frac.to_csv(p, index=False)
    with pytest.raises(ImportFormatError, match=r"allreduce\.csv: line 4, column 'num_floats': 1\.5 is not a whole"):
        import_deepbench(p, catalog=catalog)


def test_allreduce_line_cut_short_and_too_many_gpus_on_one_node_are_refused(shared_datasets, tmp_path, catalog):
    """A line cut after num_gpus was skipped as 'left blank in the upstream sheets' (whose blank rows keep their
    algorithm); num_gpus 1000 with num_nodes empty was imported as one node of 1000 GPUs."""
    src = shared_datasets / "deepbench/deepbench_allreduce_tidy.csv"
    lines = src.read_text().splitlines()
    p = tmp_path / "allreduce.csv"
    p.write_text("\n".join(lines[:6]) + "\n" + ",".join(lines[6].split(",")[:5]) + "\n")  # line 7 cut short
    with pytest.raises(ImportFormatError, match=r"allreduce\.csv: line 7: no mean_time_ms and no algorithm .* cut"):
        import_deepbench(p, catalog=catalog)
    blank = [ln for ln in lines if ln.split(",")[6] == ""][:2]  # the upstream's own blank rows: skipped, as ever
    p.write_text("\n".join(lines[:6] + blank) + "\n")
    with pytest.warns(UserWarning, match="left blank in the upstream sheets"):
        assert len(import_deepbench(p, catalog=catalog)) == 5
    raw = pd.read_csv(src)
    raw = raw[raw["mean_time_ms"].notna()].head(3).reset_index(drop=True).drop(columns=["GBps"])
    raw.loc[1, "num_gpus"] = 1000  # CSV line 3, num_nodes empty
    raw.to_csv(p, index=False)
    with pytest.raises(ImportFormatError, match=r"line 3: num_gpus 1000 with num_nodes empty .* give num_nodes"):
        import_deepbench(p, catalog=catalog)


def test_errors_name_the_file_line_after_a_blank_line(shared_datasets, tmp_path, catalog):
    """pandas skips blank lines: an error on a row after one named the line before it (position + 2)."""
    lines = (shared_datasets / "deepbench/deepbench_gemm_tidy.csv").read_text().splitlines()[:8]
    cells = lines[6].split(",")
    cells[-2] = "-1"  # time_ms of file line 8 (one blank line above it)
    p = tmp_path / "gemm.csv"
    p.write_text("\n".join(lines[:4] + [""] + lines[4:6] + [",".join(cells)]) + "\n")
    with pytest.raises(ImportFormatError, match=r"gemm\.csv: line 8, column 'time_ms': must be > 0"):
        import_deepbench(p, catalog=catalog)


def test_schema_errors_name_the_source_line_after_skipped_rows(shared_datasets, tmp_path, catalog):
    """Rows skipped on purpose (no time, not a GPU) shifted the schema's "row N (CSV line N+1)" of the imported rows
    away from the file's lines: a fractional num_gpus on line 6 behind a timeless row was said to be on line 5."""
    from hybrid.errors import HybridError

    raw = pd.read_csv(shared_datasets / "deepbench/deepbench_allreduce_tidy.csv")
    raw = raw[raw["mean_time_ms"].notna()].head(6).reset_index(drop=True).drop(columns=["GBps"])
    raw.loc[1, "mean_time_ms"] = np.nan  # CSV line 3: skipped (no time)
    raw["num_gpus"] = raw["num_gpus"].astype(float)
    raw.loc[4, "num_gpus"] = 2.5  # CSV line 6
    p = tmp_path / "allreduce.csv"
    raw.to_csv(p, index=False)
    with pytest.warns(DataImportWarning, match="no time"), \
            pytest.raises(HybridError, match=r"allreduce\.csv: line 6, column 'n_ranks' of the imported row: "
                                             r"expected an integer"):
        import_deepbench(p, catalog=catalog)


@pytest.mark.parametrize("sep", [";", "\t"])
def test_a_file_separated_otherwise_than_by_commas_is_said_so(shared_datasets, tmp_path, catalog, sep):
    """A tidy table saved with semicolons or tabs (a spreadsheet's export) was refused as "missing column(s) 'gpu'"
    with its whole header shown as one column name; the error now says what is likely wrong."""
    raw = pd.read_csv(shared_datasets / "deepbench/deepbench_allreduce_tidy.csv").head(5)
    p = tmp_path / "allreduce.csv"
    raw.to_csv(p, index=False, sep=sep)
    with pytest.raises(ImportFormatError, match=r"allreduce\.csv: missing column\(s\) 'gpu' .*the header is one "
                                                r"column: is the file separated by something other than commas\?"):
        import_deepbench(p, catalog=catalog)
