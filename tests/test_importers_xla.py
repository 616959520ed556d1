"""XLA perf-table importers: the public CSVs, and the upstream text-proto format rebuilt from the same rows."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from hybrid.data.importers import IMPORTERS, DataImportWarning, import_xla_collectives, import_xla_matmul
from hybrid.data.importers.textproto import first, map_entries, parse
from hybrid.errors import ImportFormatError


def test_registry_files(shared_datasets):
    assert [p.name for p in IMPORTERS["xla-matmul"].find(shared_datasets)] == ["matmul_sm90_H100.csv"]
    assert [p.name for p in IMPORTERS["xla-collectives"].find(shared_datasets)] == ["collectives_sm90_H100.csv"]


def test_matmul_csv(shared_datasets, catalog):
    raw = pd.read_csv(shared_datasets / "xla/matmul_sm90_H100.csv")
    df = import_xla_matmul(shared_datasets / "xla/matmul_sm90_H100.csv", catalog=catalog)
    assert len(df) == len(raw) == 1875 and (df["device"] == "H100-SXM").all()
    assert df.groupby("dtype").size().to_dict() == {"bf16": 375, "fp8": 1125, "tf32": 375}
    assert (df["variant"] == raw["dtype"]).all()
    assert set(df.loc[df["b"] > 1, "op"]) == {"bmm"} and set(df.loc[df["b"] == 1, "op"]) == {"gemm"}
    flops = 2.0 * df["b"] * df["m"] * df["n"] * df["k"] / (df["time_us"] * 1e-6)
    np.testing.assert_allclose(flops, raw["flops_per_s"], rtol=1e-6)
    dev = catalog.device("H100-SXM")
    for dt in ("bf16", "tf32"):  # achieved below the dense tensor-core peak
        assert flops[df["dtype"] == dt].max() < dev.peak(dt)


def test_collectives_csv_size_convention(shared_datasets, catalog):
    raw = pd.read_csv(shared_datasets / "xla/collectives_sm90_H100.csv")
    df = import_xla_collectives(shared_datasets / "xla/collectives_sm90_H100.csv", catalog=catalog)
    assert len(df) == 330 and (df["size_bytes"] > 0).all() and (df["time_us"] > 0).all()
    assert set(df["op"]) == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"}
    assert (df["system"] == catalog.resolve_system("xla-h100x8")).all() and (df["n_nodes"] == 1).all()
    rs = df["op"] == "reduce_scatter"
    # reduce-scatter rows store the output shard; the sweep (nccl-tests size) is group x shard
    np.testing.assert_array_equal(df.loc[rs, "size_bytes"], raw.loc[rs.to_numpy(), "bytes"]
                                  * raw.loc[rs.to_numpy(), "num_devices_per_group"])
    assert sorted(df.loc[rs, "size_bytes"].unique()) == sorted(df.loc[df["op"] == "all_gather", "size_bytes"].unique())
    np.testing.assert_array_equal(df.loc[~rs, "size_bytes"], raw.loc[~rs.to_numpy(), "bytes"])
    np.testing.assert_allclose(df["time_us"], df["size_bytes"] / raw["network_throughput_bytes_per_sec"] * 1e6)
    # the permute patterns on 8 devices: 4 pairs = one-way, 8 pairs = two-way
    sr = df[df["op"] == "send_recv"]
    assert (sr["n_ranks"] == 8).all() and set(sr["variant"]) == {"one_way:pairs=4", "two_way:pairs=8"}
    # all-reduce over 8 H100s: bus bandwidth below the NVLink bandwidth of one GPU
    ar = df[(df["op"] == "all_reduce") & (df["n_ranks"] == 8)]
    busbw = ar["size_bytes"] * 2 * 7 / 8 / (ar["time_us"] * 1e-6)
    assert busbw.max() < catalog.device("H100-SXM").link_bw * 1.05


def _matmul_txtpb(raw: pd.DataFrame) -> str:
    lines = ["# proto-file: xla_data.proto", "# proto-message: xla.GemmPerfTable", "entries {", '  key: "sm_90"',
             "  value {"]
    for (b, m, n, k), g in raw.groupby(["b", "m", "n", "k"], sort=False):
        lines += ["    entries {", f"      b: {b}", f"      m: {m}", f"      n: {n}", f"      k: {k}"]
        lines += [f'      flops {{ key: "{d}" value: {f} }}' for d, f in zip(g["dtype"], g["flops_per_s"], strict=True)]
        lines.append("    }")
    return "\n".join(lines + ["  }", "}", ""])


def test_matmul_txtpb_matches_csv(shared_datasets, tmp_path, catalog):
    raw = pd.read_csv(shared_datasets / "xla/matmul_sm90_H100.csv").head(60)
    p = tmp_path / "default_matmul_perf_table.txtpb"
    p.write_text(_matmul_txtpb(raw))
    got = import_xla_matmul(p, catalog=catalog)
    want = import_xla_matmul(shared_datasets / "xla/matmul_sm90_H100.csv", catalog=catalog).head(60)
    assert list(got["variant"]) == list(want["variant"]) and list(got["dtype"]) == list(want["dtype"])
    np.testing.assert_allclose(got["time_us"], want["time_us"], rtol=1e-6)
    p.write_text(_matmul_txtpb(raw)[:-30])  # truncated inside a message
    with pytest.raises(ImportFormatError, match=r"default_matmul_perf_table\.txtpb: line \d+: file ends inside"):
        import_xla_matmul(p, catalog=catalog)


def _collectives_txtpb(raw: pd.DataFrame) -> str:
    out = ['entries {', '  key: "sm_90"', '  value {']
    for r in raw.itertuples():
        n_out = r.bytes // 4
        out += ["    entries {", "      instruction {", f'        opcode: "{r.opcode}"',
                f"        shape {{ element_type: F32 dimensions: {n_out} layout {{ minor_to_major: 0 }} }}"]
        if r.opcode == "collective-permute":
            pairs = ([(i, i + 4) for i in range(4)] if r.source_target_pairs == 4
                     else [(i, (i + 1) % 8) for i in range(8)])
            out += [f"        source_target_pairs {{ {f'source: {s} ' if s else ''}target: {t} }}" for s, t in pairs]
        else:
            out += ["        iota_collective_device_list {", f"          num_replica_groups: {int(r.num_replica_groups)}",
                    f"          num_devices_per_group: {int(r.num_devices_per_group)}", "          iota_reshape_dims: 8",
                    "        }"]
        out += ["      }", '      fingerprint: "abc\\"def"', f"      network_throughput_bytes_per_sec: "
                f"{r.network_throughput_bytes_per_sec}", "    }"]
    return "\n".join(out + ["  }", "}", ""])


def test_collectives_txtpb_matches_csv(shared_datasets, tmp_path, catalog):
    raw = pd.read_csv(shared_datasets / "xla/collectives_sm90_H100.csv")
    p = tmp_path / "default_collective_perf_table.txtpb"
    p.write_text(_collectives_txtpb(raw))
    got = import_xla_collectives(p, catalog=catalog)
    want = import_xla_collectives(shared_datasets / "xla/collectives_sm90_H100.csv", catalog=catalog)
    for c in ("op", "size_bytes", "n_ranks"):
        assert list(got[c]) == list(want[c]), c
    np.testing.assert_allclose(got["time_us"], want["time_us"])
    sr = got[got["op"] == "send_recv"]
    assert set(sr["variant"]) == {"one_way:pairs=4", "ring:pairs=8"}


def test_textproto_parser_details():
    msg = parse('a: 1 b: "x\\ty" "z" c { d: [1, 2.5, -3] e: TRUE_ENUM } c < d: 0x10 >  # comment\n f: true;')
    assert first(msg, "a") == 1 and first(msg, "b") == "x\tyz" and first(msg, "f") is True
    assert msg["c"][0]["d"] == [1, 2.5, -3] and first(msg["c"][0], "e") == "TRUE_ENUM"
    assert first(msg["c"][1], "d") == 16
    assert map_entries(parse('m { key: "k" value: 3 } m { key: "j" value: 4 }'), "m") == {"k": 3, "j": 4}
    with pytest.raises(ImportFormatError, match=r"t\.txtpb: line 2: unexpected character"):
        parse("a: 1\nb: $", "t.txtpb")


def test_broken_csvs(shared_datasets, tmp_path, catalog):
    raw = pd.read_csv(shared_datasets / "xla/collectives_sm90_H100.csv").head(20)
    p = tmp_path / "collectives.csv"
    raw.drop(columns=["network_throughput_bytes_per_sec"]).to_csv(p, index=False)
    with pytest.raises(ImportFormatError, match=r"collectives\.csv: missing column.*network_throughput"):
        import_xla_collectives(p, catalog=catalog)
    bad = raw.copy()
    bad["opcode"] = bad["opcode"].astype(object)
    bad.loc[4, "opcode"] = "all-shuffle"
    bad.to_csv(p, index=False)
    with pytest.raises(ImportFormatError, match=r"collectives\.csv: line 6: unknown collective opcode 'all-shuffle'"):
        import_xla_collectives(p, catalog=catalog)
    m = pd.read_csv(shared_datasets / "xla/matmul_sm90_H100.csv").head(10)
    m["dtype"] = m["dtype"].astype(object)
    m.loc[2, "dtype"] = "q4xq4->f32"
    p2 = tmp_path / "matmul.csv"
    m.to_csv(p2, index=False)
    with pytest.raises(ImportFormatError, match=r"matmul\.csv: unknown XLA dtype combination 'q4xq4->f32'"):
        import_xla_matmul(p2, catalog=catalog)


def test_matmul_csv_time_and_rate_must_agree(shared_datasets, tmp_path, catalog):
    """The tidy CSV states each measurement twice (time_us and flops_per_s); a row where they disagree (a time in
    ms, a mangled rate) is refused with its line, never imported with whichever column happened to be read."""
    m = pd.read_csv(shared_datasets / "xla/matmul_sm90_H100.csv").head(10)
    p = tmp_path / "matmul.csv"
    m.to_csv(p, index=False)
    assert len(import_xla_matmul(p, catalog=catalog)) == 10  # the public rows agree to rounding
    m.loc[3, "time_us"] = m.loc[3, "time_us"] * 1e-3  # this row's time in ms
    m.to_csv(p, index=False)
    with pytest.raises(ImportFormatError, match=r"matmul\.csv: line 5: time_us .* and flops_per_s .* disagree"):
        import_xla_matmul(p, catalog=catalog)
    only_rate = m.drop(columns=["time_us"])  # one column alone is taken as given
    only_rate.to_csv(p, index=False)
    assert len(import_xla_matmul(p, catalog=catalog)) == 10


def test_collectives_csv_bytes_must_be_the_elements_of_the_dtype(shared_datasets, tmp_path, catalog):
    """The collectives CSV states each output shape as num_elements and as bytes; bytes that are not the elements
    times the element size (a BF16 row with F32 bytes, a mangled value) are refused with the line: the size the
    time is derived from cannot be told."""
    raw = pd.read_csv(shared_datasets / "xla/collectives_sm90_H100.csv").head(12)
    p = tmp_path / "collectives.csv"
    raw.to_csv(p, index=False)
    assert len(import_xla_collectives(p, catalog=catalog)) == 12
    half = raw.copy()
    half["dtype"] = half["dtype"].astype(object)
    half.loc[6, "dtype"] = "BF16"  # same bytes, half-size elements
    half.to_csv(p, index=False)
    with pytest.raises(ImportFormatError, match=r"collectives\.csv: line 8: bytes \d+ is not num_elements \d+ x 2 B "
                                                r"\(BF16\)"):
        import_xla_collectives(p, catalog=catalog)
    half.loc[6, "bytes"] = half.loc[6, "num_elements"] * 2
    half.to_csv(p, index=False)
    assert import_xla_collectives(p, catalog=catalog)["dtype"].tolist().count("bf16") == 1


def _one_collective(shape: str, groups: str = "1", per_group: str = "8") -> str:
    return ('entries { key: "sm_90" value { entries { instruction { opcode: "all-reduce" '
            f"shape {{ element_type: F32 {shape} }} iota_collective_device_list {{ num_replica_groups: {groups} "
            f"num_devices_per_group: {per_group} }} }} network_throughput_bytes_per_sec: 1e11 }} }} }}\n")


@pytest.mark.parametrize(("shape", "groups", "error"), [
    ("dimensions: -4 dimensions: -8", "1", r"entry 1 \(all-reduce\): shape dimensions \[-4, -8\] are not all positive"),
    ("dimensions: 10.5", "1", r"shape dimensions \[10.5\] are not all positive integers"),
    ("dimensions: 1024", "-3", r"num_replica_groups -3 is not a positive integer"),
    # 400 GB, then a byte count past 2^62 (the schema's bound, whose error named a CSV line)
    ("dimensions: 100000000000", "1", r"entry 1 \(all_reduce\): a 372.5 GiB buffer does not fit in the 80 GiB "
                                      r"of H100-SXM"),
    ("dimensions: 9223372036854775807 dimensions: 9223372036854775807", "1", r"does not fit in the 80 GiB"),
])
def test_collectives_txtpb_absurd_layouts_are_refused(tmp_path, catalog, shape, groups, error):
    """Two negative extents multiply into a positive byte count, 10.5 elements into 42 bytes, and a buffer larger
    than any device's memory passed the schema's 2^62-byte bound: all were imported as measurements."""
    p = tmp_path / "t.txtpb"
    p.write_text(_one_collective(shape, groups))
    with pytest.raises(ImportFormatError, match=r"t\.txtpb: .*" + error):
        import_xla_collectives(p, catalog=catalog)
    p.write_text(_one_collective("dimensions: 1024 dimensions: 4", groups="1"))
    assert import_xla_collectives(p, catalog=catalog)["size_bytes"].tolist() == [16384]


def test_collectives_csv_buffer_beyond_device_memory(shared_datasets, tmp_path, catalog):
    raw = pd.read_csv(shared_datasets / "xla/collectives_sm90_H100.csv").head(10)
    bad = raw.copy()
    bad.loc[3, ["num_elements", "bytes"]] = [25_000_000_000, 100_000_000_000]
    p = tmp_path / "collectives.csv"
    bad.to_csv(p, index=False)
    with pytest.raises(ImportFormatError, match=r"collectives\.csv: line 5 \(\w+\): a 93.13 GiB buffer does not fit in "
                                                r"the 80 GiB of H100-SXM"):
        import_xla_collectives(p, catalog=catalog)
    # the same row measured on a larger device fits
    assert len(import_xla_collectives(p, catalog=catalog, device="H200")) == 10
    bad = raw.copy()
    bad["num_replica_groups"] = bad["num_replica_groups"].astype(float)
    bad.loc[2, "num_replica_groups"] = 2.5
    bad.to_csv(p, index=False)
    with pytest.raises(ImportFormatError, match=r"line 4, column 'num_replica_groups': 2.5 is not an integer"):
        import_xla_collectives(p, catalog=catalog)


def test_matmul_beyond_device_memory_is_refused(tmp_path, catalog):
    """Three 10^7 x 10^7 bf16 matrices (200 TB each) on an 80 GB H100 were imported as a 5 us GEMM."""
    p = tmp_path / "matmul.csv"
    p.write_text("device,b,m,n,k,dtype,time_us\nsm_90,1,256,256,256,bf16xbf16->bf16,5\n"
                 "sm_90,1,10000000,10000000,10000000,bf16xbf16->bf16,5\n")
    with pytest.raises(ImportFormatError, match=r"matmul\.csv: line 3 \(gemm\): a 5\.588e\+05 GiB set of operands "
                                                r"and result does not fit in the 80 GiB of H100-SXM"):
        import_xla_matmul(p, catalog=catalog)
    # a batched GEMM counts every batch: 64 x 3 x 8192^2 bf16 = 24 GiB fits an H100, 512 batches do not
    p.write_text("device,b,m,n,k,dtype,time_us\nsm_90,64,8192,8192,8192,bf16xbf16->bf16,5\n")
    assert len(import_xla_matmul(p, catalog=catalog)) == 1
    p.write_text("device,b,m,n,k,dtype,time_us\nsm_90,512,8192,8192,8192,bf16xbf16->bf16,5\n")
    with pytest.raises(ImportFormatError, match=r"matmul\.csv: line 2 \(bmm\): a 192 GiB"):
        import_xla_matmul(p, catalog=catalog)


@pytest.mark.parametrize(("column", "kind"), [("opcode", "collectives"), ("dtype", "collectives"),
                                              ("dtype", "matmul")])
def test_csv_empty_opcode_or_dtype_cell_is_refused_with_its_line(shared_datasets, tmp_path, catalog, column, kind):
    """An empty opcode cell was refused as "unknown collective opcode nan" with no column, and an empty collective
    dtype cell was imported as fp32: both are errors naming the file, the CSV line and the column."""
    raw = pd.read_csv(shared_datasets / f"xla/{kind}_sm90_H100.csv").head(8)
    raw[column] = raw[column].astype(object)
    raw.loc[5, column] = None
    p = tmp_path / f"{kind}.csv"
    raw.to_csv(p, index=False)
    importer = import_xla_collectives if kind == "collectives" else import_xla_matmul
    with pytest.raises(ImportFormatError, match=rf"{kind}\.csv: line 7, column '{column}': missing value"):
        importer(p, catalog=catalog)


def test_collectives_csv_errors_name_the_csv_line(shared_datasets, tmp_path, catalog):
    """Row-level errors of the collectives CSV named the data row ("row 3"), one less than the file's line, where
    every other importer names the CSV line."""
    raw = pd.read_csv(shared_datasets / "xla/collectives_sm90_H100.csv").head(6)
    raw = raw[~raw["opcode"].str.startswith("collective-permute")].reset_index(drop=True)
    raw["num_devices_per_group"] = raw["num_devices_per_group"].astype(float)
    raw.loc[2, "num_devices_per_group"] = np.nan
    p = tmp_path / "collectives.csv"
    raw.to_csv(p, index=False)
    with pytest.raises(ImportFormatError, match=rf"collectives\.csv: line 4: {raw['opcode'][2]} without devices "
                                                r"per group"):
        import_xla_collectives(p, catalog=catalog)


@pytest.mark.parametrize(("groups", "per_group", "devices"), [(1, 1000, 1000), (4, 4, 16)])
def test_collectives_csv_more_devices_than_the_system_is_refused(shared_datasets, tmp_path, catalog, groups,
                                                                 per_group, devices):
    """A row whose replica groups span more devices than the system's one node (XLA-H100x8: 8 GPUs) was imported,
    and `hybrid data validate` refused the written table ("1000 ranks on 125 node(s) of XLA-H100x8"); worse, the
    collective-permute rows of the file took that count as their ranks (the largest group layout of the file)."""
    raw = pd.read_csv(shared_datasets / "xla/collectives_sm90_H100.csv").head(10)
    assert raw["opcode"].str.startswith("collective-permute").any()
    p = tmp_path / "collectives.csv"
    raw.to_csv(p, index=False)
    good = import_xla_collectives(p, catalog=catalog)
    assert (good["n_ranks"] <= 8).all()
    row = int(np.flatnonzero(raw["opcode"] == "all-to-all")[-1])  # after the permute rows
    assert row > int(np.flatnonzero(raw["opcode"].str.startswith("collective-permute"))[0])
    raw.loc[row, ["num_replica_groups", "num_devices_per_group"]] = [groups, per_group]
    raw.to_csv(p, index=False)
    with pytest.raises(ImportFormatError, match=rf"collectives\.csv: line {row + 2} \(all_to_all\): {groups} replica "
                                                rf"group\(s\) of {per_group} are {devices} devices, more than system "
                                                r"XLA-H100x8 has \(8 x H100-SXM in one node\)"):
        import_xla_collectives(p, catalog=catalog)


def test_a_table_of_another_gpu_is_not_labelled_the_h100_system(shared_datasets, tmp_path, catalog):
    """Without --system every row was put on the default system XLA-H100x8, whatever GPU the table's key names: an
    A100 (sm_80) table became A100 collectives costed on the H100 node's NVLink, with no word at import. Rows of
    another GPU than the default system's now name no system, with a warning that says to pass --system."""
    p = tmp_path / "a100_collective_perf_table.txtpb"
    p.write_text(_one_collective("dimensions: 1024", per_group="4").replace('"sm_90"', '"sm_80"'))
    with pytest.warns(DataImportWarning, match=r"1 row\(s\) of A100-SXM4-80GB.*not the GPU of the default system "
                                               r"XLA-H100x8 \(H100-SXM\).*pass --system"):
        df = import_xla_collectives(p, catalog=catalog)
    assert (df["device"] == "A100-SXM4-80GB").all()
    assert "system" not in df.columns or df["system"].isna().all()
    df = import_xla_collectives(p, catalog=catalog, system="DGX-A100")
    assert (df["system"] == catalog.resolve_system("DGX-A100")).all()
    # the H100 table keeps its default system, without a word
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataImportWarning)
        df = import_xla_collectives(shared_datasets / "xla/collectives_sm90_H100.csv", catalog=catalog)
    assert (df["system"] == "XLA-H100x8").all()


@pytest.mark.parametrize(("throughput", "said"), [("-5", r"throughput -5 is not positive"),
                                                  ("0", r"throughput 0 is not positive")])
def test_collectives_txtpb_throughput_that_is_not_positive_says_its_value(tmp_path, catalog, throughput, said):
    """A negative throughput was reported as "missing or zero throughput"."""
    p = tmp_path / "t.txtpb"
    p.write_text(_one_collective("dimensions: 1024").replace("1e11", throughput))
    with pytest.raises(ImportFormatError, match=r"t\.txtpb: entry 1 \(all-reduce\): " + said):
        import_xla_collectives(p, catalog=catalog)
    p.write_text(_one_collective("dimensions: 1024").replace(" network_throughput_bytes_per_sec: 1e11", ""))
    with pytest.raises(ImportFormatError, match=r"entry 1 \(all-reduce\): missing throughput"):
        import_xla_collectives(p, catalog=catalog)


def test_txtpb_with_old_mac_line_endings_reads_as_with_newlines(shared_datasets, tmp_path, catalog):
    """A text proto whose lines end with a bare carriage return: its leading ``# proto-file`` comment ran to the
    end of the file (a comment ends at a newline), so the matmul table was refused as "no matmul entries", and
    errors named line 1 for every line. Both tables now read as with newlines, and errors name the real line."""
    raw = pd.read_csv(shared_datasets / "xla/matmul_sm90_H100.csv").head(60)
    colls = pd.read_csv(shared_datasets / "xla/collectives_sm90_H100.csv")
    for name, text, fn in (("default_matmul_perf_table.txtpb", _matmul_txtpb(raw), import_xla_matmul),
                           ("default_collective_perf_table.txtpb", _collectives_txtpb(colls), import_xla_collectives)):
        lf, cr = tmp_path / "lf" / name, tmp_path / "cr" / name
        for p in (lf, cr):
            p.parent.mkdir(exist_ok=True)
        lf.write_text(text)
        cr.write_bytes(text.encode().replace(b"\n", b"\r"))
        want, got = fn(lf, catalog=catalog), fn(cr, catalog=catalog)
        pd.testing.assert_frame_equal(got.drop(columns="source"), want.drop(columns="source"))
        lf.write_text(text[:-30])
        cr.write_bytes(text[:-30].encode().replace(b"\n", b"\r"))
        errors = []
        for p in (lf, cr):
            with pytest.raises(ImportFormatError, match="file ends inside") as exc:
                fn(p, catalog=catalog)
            errors.append(str(exc.value).replace(str(p), "FILE"))
        assert errors[0] == errors[1]
