"""The canonical measurement table: validation, normalisation, atomic writing, reading."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hybrid.data.schema import COLUMNS, read_table, schema_markdown, validate, write_table
from hybrid.errors import HybridError, SchemaError


def _table() -> pd.DataFrame:
    return pd.DataFrame({
        "device": ["Tesla T4", "NVIDIA H100 80GB HBM3", "sm_90"],
        "op": ["GEMM", "all_reduce", "layernorm"],
        "dtype": ["float16", "bfloat16", None],
        "time_us": [10.0, 20.0, 5.0],
        "m": [64, None, None], "n": [64, None, None], "k": [64, None, None],
        "size_bytes": [None, 1 << 20, None], "n_ranks": [None, 8, None],
        "rows": [None, None, 128], "hidden": [None, None, 1024],
        "in_place": [None, "true", None], "my_note": ["a", "b", "c"],
    })


def test_validate_normalises(catalog):
    df = validate(_table(), catalog)
    assert list(df["device"]) == ["T4", "H100-SXM", "H100-SXM"]
    assert list(df["op"]) == ["gemm", "all_reduce", "layernorm"]
    assert list(df["dtype"]) == ["fp16", "bf16", "fp32"]
    assert str(df["m"].dtype) == "Int64" and bool(df["in_place"].iloc[1]) is True
    names = [c.name for c in COLUMNS]
    assert list(df.columns[:-1]) == [c for c in names if c in df.columns[:-1]] and df.columns[-1] == "my_note"


@pytest.mark.parametrize(("column", "value", "message"), [
    ("op", "conv3d", r"row 2 \(CSV line 3\), column 'op': unknown op 'conv3d'"),
    ("time_us", -1.0, r"row 2 \(CSV line 3\), column 'time_us': must be positive"),
    ("n_ranks", 2.5, r"column 'n_ranks': expected an integer"),
    ("size_bytes", np.nan, r"column 'size_bytes': missing value \(NaN/empty\) for op 'all_reduce'"),
    ("device", "Voodoo 5", r"column 'device': unknown device 'Voodoo 5'"),
    ("dtype", "fp7", r"column 'dtype': unknown dtype 'fp7'"),
    ("time_us", np.inf, r"column 'time_us': value is infinite"),
    ("n_ranks", True, r"column 'n_ranks': expected a number, got True"),
    ("size_bytes", 1e30, r"column 'size_bytes': 1e\+30 is too large"),
])
def test_validate_names_row_and_column(catalog, column, value, message):
    df = _table()
    df[column] = df[column].astype(object)
    df.loc[1, column] = value
    with pytest.raises(SchemaError, match=message):
        validate(df, catalog, source="t.csv")


def test_empty_and_missing_required(catalog):
    with pytest.raises(SchemaError, match="table is empty"):
        validate(_table().iloc[:0], catalog)
    with pytest.raises(SchemaError, match="missing required column"):
        validate(_table().drop(columns=["time_us"]), catalog)
    # why they may look missing: names in another case, or a file split by another separator (one column)
    with pytest.raises(SchemaError, match=r"'Device' for 'device', 'Time_us' for 'time_us': column names are lower"):
        validate(_table().rename(columns={"device": "Device", "time_us": "Time_us"}), catalog)
    with pytest.raises(SchemaError, match="separated by something other than commas"):
        validate(pd.DataFrame({"device;op;time_us": ["H100-SXM;gemm;10"]}), catalog)
    with pytest.raises(SchemaError, match=r"column 'k': column required for op 'gemm' is missing"):
        validate(_table().drop(columns=["k"]), catalog)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_write_read_round_trip(tmp_path, catalog, suffix):
    path = write_table(_table(), tmp_path / f"t{suffix}", catalog)
    back = read_table(path, catalog)
    pd.testing.assert_frame_equal(back.reset_index(drop=True), validate(_table(), catalog),
                                  check_dtype=False, check_column_type=False)


def test_failed_write_leaves_nothing(tmp_path, catalog):
    bad = _table()
    bad.loc[0, "time_us"] = 0.0
    with pytest.raises(SchemaError, match="time_us"):
        write_table(bad, tmp_path / "t.csv", catalog)
    assert list(tmp_path.iterdir()) == []


def test_read_table_errors(tmp_path, catalog):
    with pytest.raises(SchemaError, match="not found"):
        read_table(tmp_path / "missing.csv", catalog)
    p = tmp_path / "t.csv"
    write_table(_table(), p, catalog)
    p.write_text(p.read_text()[:-25])  # truncated last row: a required value goes missing
    with pytest.raises(SchemaError, match=r"t\.csv: the last line has no final newline") as info:
        read_table(p, catalog)
    # said once and as itself: it was wrapped as "t.csv: cannot parse as a table (SchemaError: t.csv: the last line
    # ...)" with the hint for raw public formats ("import other formats first"), which a cut canonical table is not
    assert str(info.value) == (f"{p}: the last line has no final newline (truncated file?); its last value may be cut "
                               "short. Add the newline if the file is complete")
    p.write_text(p.read_text() + "\n")  # the same cut with a newline: the missing value is named
    with pytest.raises(SchemaError, match=r"t\.csv: row 3"):
        read_table(p, catalog)
    # a column named twice: pandas read the second as 'm.1', kept as an unknown column, its values ignored
    d = tmp_path / "d.csv"
    d.write_text("\ufeffdevice,op,dtype,time_us,m,n,k, m,,\nH100,gemm,fp16,20,1024,1024,1024,5,,\n", encoding="utf-8")
    with pytest.raises(SchemaError, match=r"d\.csv: the header names column\(s\) 'm' more than once"):
        read_table(d, catalog)
    d.write_text("device,op,dtype,time_us,m,n,k,,\nH100,gemm,fp16,20,1024,1024,1024,,\n")  # empty names: no error
    assert len(read_table(d, catalog)) == 1
    g = tmp_path / "g.parquet"
    g.write_bytes(b"not parquet at all")
    with pytest.raises(SchemaError, match=r"g\.parquet: cannot parse"):
        read_table(g, catalog)


def test_schema_markdown_lists_every_column():
    md = schema_markdown()
    for c in COLUMNS:
        assert f"| `{c.name}` |" in md
    assert "| collective |" in md


def test_final_newline_check_reads_only_the_tail(tmp_path, monkeypatch):
    """The truncation check looks at the end of the file (a few bytes), whatever its size; trailing whitespace
    after the last line is looked through; empty and whitespace-only files are not 'truncated'."""
    import builtins

    from hybrid.data import schema

    cases = {b"": False, b"   \n": False, b"  \t ": False, b"a,b\n1,2\n": False, b"a,b\n1,2": True,
             b"a,b\n1,2   ": True, b"a,b\n1,2\n  ": True, b"x" + b" " * 10_000: True, b" " * 10_000: False}
    for i, (data, want) in enumerate(cases.items()):
        p = tmp_path / f"c{i}.csv"
        p.write_bytes(data)
        assert schema.lacks_final_newline(p) is want, data[:20]
    big = tmp_path / "big.csv"
    big.write_bytes(b"a,b\n" + b"1,2\n" * 500_000)  # 2 MB
    read = []
    real_open = builtins.open

    class Counting:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def seek(self, *a):
            return self.fh.seek(*a)

        def read(self, n=-1):
            out = self.fh.read(n)
            read.append(len(out))
            return out

    monkeypatch.setattr(builtins, "open", lambda *a, **k: Counting(real_open(*a, **k)))
    assert schema.lacks_final_newline(big) is False
    assert sum(read) == 1


@pytest.mark.parametrize(("extra", "message"), [
    ({"op": "attention", "batch": 1, "heads": 8, "kv_heads": 3, "q_len": 16, "kv_len": 16, "head_dim": 64},
     r"column 'kv_heads': query heads \(8\) must be a multiple of the key/value heads \(3\)"),
    ({"op": "attention", "batch": 1, "heads": 8, "kv_heads": 16, "q_len": 16, "kv_len": 16, "head_dim": 64},
     r"must be a multiple of the key/value heads \(16\)"),
    ({"op": "conv2d", "batch": 1, "in_channels": 64, "out_channels": 64, "height": 8, "width": 8, "kernel_h": 3,
      "kernel_w": 3, "groups": 5}, r"column 'groups': groups \(5\) must divide the input channels \(64\)"),
    ({"op": "all_reduce", "size_bytes": 1 << 20, "n_ranks": 10, "n_nodes": 3},  # `predict` refuses it as uneven
     r"column 'n_nodes': the ranks \(10\) must be spread evenly over the nodes \(3\)"),
])
def test_values_that_must_agree_across_columns(catalog, extra, message):
    good = pd.DataFrame([{"device": "H100-SXM", "time_us": 1.0, "dtype": "fp16", **extra}])
    key = next(k for k in ("kv_heads", "groups", "n_nodes") if k in extra)
    validate(good.assign(**{key: {"kv_heads": 4, "groups": 2, "n_nodes": 2}[key]}), catalog)  # a divisor passes
    with pytest.raises(SchemaError, match=message):
        validate(good, catalog)


def test_an_elementwise_rows_lines_must_be_its_elements(catalog):
    """rows x hidden of an elementwise row (an interpolated map's lines) are its elements: a row giving both apart
    was priced on elements alone, the lines ignored without a word; consistent lines, or none, pass (the committed
    CPU profile's 288 interpolation rows all agree), and another family's rows / hidden are not checked."""
    base = {"device": "H100-SXM", "time_us": 1.0, "dtype": "fp16", "op": "elementwise", "variant": "add",
            "elements": 1 << 20}
    validate(pd.DataFrame([{**base, "rows": 1024, "hidden": 1024}]), catalog)
    validate(pd.DataFrame([base]), catalog)
    mixed = pd.DataFrame([{**base, "rows": 1000, "hidden": 1024},
                          {"device": "H100-SXM", "time_us": 1.0, "dtype": "fp16", "op": "layernorm", "rows": 7,
                           "hidden": 1024}])
    with pytest.raises(SchemaError, match=r"column 'elements': an elementwise row's lines, rows x hidden \(1000 x "
                                          r"1024\), must be its elements \(1048576\)"):
        validate(mixed, catalog)
    validate(mixed.iloc[1:], catalog)  # a norm's rows x hidden is not an element count


def test_raw_nccl_tests_output_or_a_public_csv_named_as_a_table_says_how_to_import_it(tmp_path):
    """`hybrid calibrate all_reduce.log` (or a folder of logs, or NeuSight's own CSV) said only "missing required
    column(s) device, op, time_us" / "not a measurement bundle"; it now names the import command."""
    from hybrid.data.bundle import load_bundle

    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "all_reduce.log"
    log.write_text("# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902\n"
                   "# Collective test starting: all_reduce_perf\n"
                   "#       size         count      type   redop    root     time   algbw   busbw  #wrong\n"
                   "    33554432       4194304    double     sum      -1   172.49  194.53  291.79       0\n")
    with pytest.raises(SchemaError, match="raw nccl-tests output: import it first with `hybrid data import nccl-tests"):
        read_table(log)
    with pytest.raises(SchemaError, match="not a measurement bundle.*hybrid data import nccl-tests"):
        load_bundle(logs)
    other = tmp_path / "bmm.csv"
    other.write_text("OPName,B,M,N,K,Latency\nbmm,1,64,64,64,0.01\n")
    with pytest.raises(SchemaError, match="hybrid data import FORMAT"):
        read_table(other)
    # a canonical table with one column misspelt keeps its own hint, without the import advice
    near = tmp_path / "near.csv"
    near.write_text("device,op,Time_US\nH100-SXM,gemm,1.0\n")
    with pytest.raises(SchemaError, match="column names are lower case") as exc:
        read_table(near)
    assert "hybrid data import" not in str(exc.value)


def test_a_row_the_roofline_refuses_names_file_row_and_csv_line(tmp_path):
    """A row the schema accepts but the estimate refuses (a collective layout no node of its system holds) is named
    as the schema's errors name rows: the file, its row and CSV line, not its position in the concatenated tables."""
    import contextlib
    import io

    from hybrid.cli.main import main
    from hybrid.errors import InvalidInputError
    from hybrid.tracking.inputs import load_measurements

    head = "device,op,dtype,time_us,size_bytes,n_ranks,n_nodes,system\n"
    ok = tmp_path / "ok.csv"
    ok.write_text(head + "H100-SXM,all_reduce,fp16,20,1024,8,1,DGX-H100\n" * 3)
    bad = tmp_path / "bad.csv"
    bad.write_text(head + "".join(f"H100-SXM,all_reduce,fp16,20,{1024 << i},8,1,DGX-H100\n" for i in range(5))
                   + "H100-SXM,all_reduce,fp16,20,16384,64,2,DGX-H100\n")
    want = rf"{bad}: row 6 \(CSV line 7\): collective: 64 ranks on 2 node\(s\) of DGX-H100 .*GPUs per node$"
    with pytest.raises(InvalidInputError, match=want):
        load_measurements([ok, bad])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["data", "validate", str(ok), str(bad)])
    assert rc != 0 and "row index" not in err.getvalue()
    assert f"{bad}: row 6 (CSV line 7): collective: 64 ranks" in err.getvalue()


def test_fastest_and_slowest_repeat_bracket_the_median(catalog, tmp_path):
    """time_us_min above time_us, or time_us_max below it, is no measurement (a swapped or misassigned column):
    refused with the row; equal values (one repeat) and missing ones pass."""
    base = {"device": "H100-SXM", "op": "gemm", "dtype": "fp16", "m": 1024, "n": 1024, "k": 1024}
    ok = pd.DataFrame([{**base, "time_us": 10.0, "time_us_min": 9.0, "time_us_max": 12.0},
                       {**base, "time_us": 10.0, "time_us_min": 10.0, "time_us_max": 10.0},
                       {**base, "time_us": 10.0, "time_us_min": None, "time_us_max": None}])
    assert len(validate(ok, catalog)) == 3
    swapped = ok.assign(time_us_min=[9.0, 10.0, 20.0], time_us_max=[12.0, 10.0, 5.0])
    with pytest.raises(SchemaError, match=r"row 3 .*column 'time_us_min': 20\.0 is above the median time_us 10\.0"):
        validate(swapped, catalog)
    p = tmp_path / "t.csv"
    ok.assign(time_us_max=[12.0, 10.0, 8.0]).to_csv(p, index=False)
    with pytest.raises(SchemaError, match=r"t\.csv: row 3 \(CSV line 4\), column 'time_us_max': 8\.0 is below"):
        read_table(p, catalog)


def test_error_names_the_index_label_of_a_frame_with_its_own_index(catalog):
    """A filtered frame keeps its labels: an error said "row 2" of the row labelled 448 (HybridPredictor.predict on
    ``t[t.op == "gemm"]``), and ``frame.loc[2]`` is another row or none. The label is named too now; a frame with the
    default index (a CSV just read) keeps the message it had."""
    table = pd.DataFrame({"device": "H100", "op": "gemm", "time_us": 1.0, "m": [4, -3, 4], "n": 4, "k": 4},
                         index=[446, 448, 450])
    with pytest.raises(SchemaError, match=r"^t: row 2 \(CSV line 3, at row index 448\), column 'm': must be positive"):
        validate(table, catalog, source="t")
    with pytest.raises(SchemaError, match=r"row 2 \(CSV line 3, at row index 'b'\), column 'm'"):
        validate(table.set_axis(["a", "b", "c"]), catalog)
    with pytest.raises(SchemaError, match=r"^row 2 \(CSV line 3\), column 'm': must be positive"):
        validate(table.reset_index(drop=True), catalog)


@pytest.mark.parametrize("content", [b"\x7fELF\x02\x01\x01\x00\x00\x00" * 20, b"device,op\nH100,\xe9\xff\n"])
def test_a_binary_file_is_said_to_be_one_not_a_truncated_table(tmp_path, content):
    """An executable or a file in another encoding given as a CSV was blamed on a truncated last line ("looks
    truncated (no final newline)") or a codec position, by the importers and by every command reading tables."""
    from hybrid.cli.main import main
    from hybrid.data.importers import import_paths

    p = tmp_path / "odd.csv"
    p.write_bytes(content)
    with pytest.raises(SchemaError, match="a binary file|not UTF-8 text") as exc:
        read_table(p)
    assert "truncated" not in str(exc.value)
    with pytest.raises(HybridError, match="a binary file|not UTF-8 text") as exc:
        import_paths("neusight", [p])
    assert "truncated" not in str(exc.value) and "expected a NeuSight CSV" in str(exc.value)
    assert main(["data", "validate", str(p)]) == 2
    # UTF-8 text whose multi-byte character the probe cuts in two is text
    q = tmp_path / "straddle.csv"
    q.write_text("device,op\n" + "a" * 8181 + "\u00e9\n", encoding="utf-8")
    from hybrid.data.schema import TEXT_PROBE_BYTES, binary_file_reason

    assert q.stat().st_size > TEXT_PROBE_BYTES and binary_file_reason(q) == ""


def test_a_large_csv_is_read_with_one_dtype_per_column(tmp_path, catalog):
    """pandas reads a CSV in chunks of 262,144 rows: a column empty for the first chunk and named in a later one (a
    table `hybrid data import neusight` wrote, variant) came back with mixed types and a raw DtypeWarning (pandas'
    source line and all) on the stderr of `hybrid report --table` / evaluate."""
    import warnings

    p = tmp_path / "big.csv"
    row = "T4,elementwise,fp32,10.5,{},1000\n"
    p.write_text("device,op,dtype,time_us,variant,elements\n" + row.format("") * 270_000 + row.format("add") * 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.DtypeWarning)
        table = read_table(p, catalog, validate_rows=False)
    assert len(table) == 270_005 and table["variant"].dropna().tolist() == ["add"] * 5


def test_a_bad_row_of_a_parquet_table_is_named_without_a_csv_line(tmp_path, catalog):
    """A Parquet file has no lines: its bad row was named '(CSV line 2)'."""
    bad = _table().copy()
    bad.loc[0, "time_us"] = -1.0
    pq, csv = tmp_path / "t.parquet", tmp_path / "t.csv"
    bad.to_parquet(pq)
    bad.to_csv(csv, index=False)
    with pytest.raises(SchemaError, match=r"t\.parquet: row 1, column 'time_us'") as exc:
        read_table(pq, catalog)
    assert "CSV line" not in str(exc.value)
    with pytest.raises(SchemaError, match=r"row 1 \(CSV line 2\), column 'time_us'"):
        read_table(csv, catalog)


def test_errors_name_the_file_line_after_blank_lines(tmp_path):
    """pandas skips blank lines, so a row after one sat on a later file line than "position + 2": a table with a
    blank line between two blocks said "CSV line 7" for a bad value on line 8, and the roofline's check likewise."""
    from hybrid.errors import InvalidInputError
    from hybrid.tracking.inputs import load_measurements

    head = "device,op,dtype,time_us,b,m,n,k\n"
    row = "A100-SXM4-80GB,gemm,fp16,190.0,{b},64,12288,12288\n"
    p = tmp_path / "blank.csv"
    p.write_text(head + row.format(b=1) * 4 + "\n\n" + row.format(b=1) + row.format(b=-1))
    with pytest.raises(SchemaError, match=r"blank\.csv: row 6 \(CSV line 9\), column 'b': must be positive"):
        read_table(p)
    coll = "device,op,dtype,time_us,size_bytes,n_ranks,n_nodes,system\n"
    p.write_text(coll + "H100-SXM,all_reduce,fp16,20,1024,8,1,DGX-H100\n" * 2 + "\n"
                 + "H100-SXM,all_reduce,fp16,20,16384,64,2,DGX-H100\n")
    with pytest.raises(InvalidInputError, match=r"blank\.csv: row 3 \(CSV line 5\): collective: 64 ranks"):
        load_measurements([p])
    # without blank lines, as before
    p.write_text(head + row.format(b=1) * 5 + row.format(b=-1))
    with pytest.raises(SchemaError, match=r"row 6 \(CSV line 7\), column 'b'"):
        read_table(p)


@pytest.mark.parametrize("dist, alpha, column, needle", [
    ("zipf", None, "index_dist", "index_dist zipf needs zipf_alpha > 0"),
    ("zipf", 0.0, "index_dist", "index_dist zipf needs zipf_alpha > 0"),
    ("uniform", 1.1, "zipf_alpha", "index_dist uniform contradicts zipf_alpha 1.1"),
])
def test_embedding_index_dist_contradicting_zipf_alpha_is_refused(dist, alpha, column, needle):
    """The roofline prices an embedding row's skew from ``zipf_alpha`` alone and the embedding model from
    ``index_dist`` (uniform: no skew): a row of ``index_dist zipf`` without an exponent was priced as uniform indices,
    one of ``uniform`` with an exponent as skewed by the one and not the other. Refused, naming the row."""
    ok = {"device": "H100", "op": "embedding_bag", "num_embeddings": 100000, "embedding_dim": 128,
          "pooling_factor": 20, "batch_size": 4096, "time_us": 10.0}
    rows = pd.DataFrame([{**ok, "index_dist": "uniform", "zipf_alpha": 0.0},
                         {**ok, "index_dist": "zipf", "zipf_alpha": 1.05},
                         {**ok, "index_dist": dist, "zipf_alpha": alpha}])
    with pytest.raises(SchemaError, match=rf"row 3 .*column '{column}'") as exc:
        validate(rows, source="t.csv")
    assert needle in str(exc.value)
    assert len(validate(rows.head(2))) == 2
    assert len(validate(rows.head(2).drop(columns=["index_dist"]))) == 2  # no index_dist: the exponent says it


@pytest.mark.parametrize("op", ["all_reduce", "send_recv", "all_gather"])
def test_a_collective_of_one_rank_is_refused(catalog, tmp_path, op):
    """A collective of one rank communicates with nobody (nccl-tests prints a local copy, busbw 0): a measured row
    of it was fitted as a collective and `predict table` priced one at the latency floor (10 us for 1 MiB), while
    `predict collective --ranks 1` refuses it. The public imports hold none (nccl-tests skips such sections)."""
    row = {"device": "H100-SXM", "op": op, "time_us": 5.0, "size_bytes": 1 << 20, "n_nodes": 1, "system": "DGX-H100"}
    validate(pd.DataFrame([{**row, "n_ranks": 2}]), catalog)
    with pytest.raises(SchemaError, match=r"row 1 \(CSV line 2\), column 'n_ranks': a collective of 1 rank "
                                          r"communicates with nobody"):
        validate(pd.DataFrame([{**row, "n_ranks": 1}]), catalog)
    path = tmp_path / "one_rank.csv"
    pd.DataFrame([{**row, "n_ranks": 2}, {**row, "n_ranks": 1}]).to_csv(path, index=False)
    with pytest.raises(SchemaError, match=r"one_rank.csv: row 2 \(CSV line 3\), column 'n_ranks'"):
        read_table(path, catalog)


def test_record_lines_of_bytes_already_read_do_not_read_the_file_again(tmp_path):
    """The CSV importers read a file's bytes (truncation, compression and binary checks), then
    `csv_record_lines` read the whole file a second time to place rows after blank lines: the lines now come from
    the bytes given (those the import parsed), and the file is not opened again."""
    from hybrid.data.schema import csv_record_lines

    data = b"a,b\n1,2\n\n3,4\n"
    assert csv_record_lines(tmp_path / "never_written.csv", 2, data=data) == (2, 4)
    p = tmp_path / "t.csv"
    p.write_bytes(data)
    assert csv_record_lines(p, 2) == (2, 4)
    assert csv_record_lines(p, 2, data=b"a,b\n1,2\n3,4\n") is None


def test_a_column_named_in_another_case_is_refused_not_ignored(tmp_path, catalog):
    """A header `Dtype` (or `Direction`, `M,N,K`) is no schema column: it was kept as an unknown column and its values
    ignored, so an fp16 H100 GEMM of 8192^3 was priced at the fp32 default, 16,415 us instead of 1,115 us (14.7x),
    by `evaluate` and `predict table` without a word; `b` beside `B` dropped one of the two. Now a table file whose
    column differs from a schema column only in case or spacing is refused, naming both; unknown columns that are
    no variant of one (notes) are still kept."""
    row = "H100,gemm,fp16,8192,8192,8192,1200"
    cases = {
        "device,op,Dtype,m,n,k,time_us": r"column 'Dtype' is not a schema column, .*rename it 'dtype'",
        "device,op,dtype,M,N,K,time_us": r"column 'M' is not a schema column, .*rename it 'm'",
        "device,op,dtype,m,n,k,time_us,b,B": r"column 'B' repeats the schema column 'b'",
        "device,op,dtype,m,n,k,Time Us": r"column 'Time Us' is not a schema column, .*rename it 'time_us'",
    }
    for i, (header, message) in enumerate(cases.items()):
        p = tmp_path / f"t{i}.csv"
        extra = ",1,8" if header.endswith(",B") else ""
        p.write_text(f"{header}\n{row}{extra}\n")
        with pytest.raises(SchemaError, match=message):
            read_table(p, catalog)
        parquet = tmp_path / f"t{i}.parquet"
        pd.read_csv(p).to_parquet(parquet)
        with pytest.raises(SchemaError, match=message):
            read_table(parquet, catalog)
    ok = tmp_path / "ok.csv"
    ok.write_text(f"device,op,dtype,m,n,k,time_us,notes,kernel_name\n{row},fast run,sm90_xmma\n")
    df = read_table(ok, catalog)
    assert df["dtype"].iloc[0] == "fp16" and df["notes"].iloc[0] == "fast run"
    # the CLI says it as one error line
    from hybrid.cli.main import main

    assert main(["predict", "table", str(tmp_path / "t0.csv"), "-o", str(tmp_path / "out.csv")]) == 2
    assert not (tmp_path / "out.csv").exists()


def test_a_misspelt_column_is_said(tmp_path, catalog):
    """A header `dtpye` or `num_table` (a typo of a schema column the table lacks) was an unknown column kept in
    silence, its rows priced at the default (fp32, one table): now a DataQualityWarning names the column it is close
    to. A column close to none (notes), or close to one the table has, says nothing."""
    import warnings

    from hybrid.errors import DataQualityWarning

    p = tmp_path / "typo.csv"
    p.write_text("device,op,dtpye,m,n,k,time_us\nH100,gemm,fp16,8192,8192,8192,1200\n")
    with pytest.warns(DataQualityWarning, match=r"column 'dtpye' is not a schema column .*did you mean 'dtype'"):
        df = read_table(p, catalog)
    assert df["dtype"].iloc[0] == "fp32"  # still the default: the warning says why
    quiet = tmp_path / "quiet.csv"
    # (``kernel``: a profiler's kernel-name column, a word that ``kernel_h`` qualifies, not a typo of it)
    quiet.write_text("device,op,dtype,m,n,k,time_us,notes,dtypes,kernel\nH100,gemm,fp16,64,64,64,10,x,fp16,sm90_gemm\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataQualityWarning)
        read_table(quiet, catalog)
