"""`hybrid data ...` end to end through the real CLI entry point."""

from __future__ import annotations

import json
import re
import shutil

import pandas as pd

from hybrid.cli.main import main
from hybrid.data.schema import read_table


def test_import_writes_a_valid_table(shared_datasets, tmp_path, capsys):
    out = tmp_path / "out" / "vidur.parquet"
    rc = main(["data", "import", "vidur-network", str(shared_datasets / "vidur/data/profiling/network"),
               "-o", str(out), "--quiet"])
    assert rc == 0, capsys.readouterr().err
    table = read_table(out)
    assert len(table) == 17418 and set(table["op"]) == {"all_reduce", "send_recv"}
    assert "wrote 17418 rows (2 ops, 3 devices) to" in capsys.readouterr().out
    rc = main(["data", "validate", str(out), "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert rc == 0 and summary["rows"] == 17418
    one = tmp_path / "pairs.csv"  # one GPU's logs: "1 device", not "1 devices"
    assert main(["data", "import", "vidur-network", str(shared_datasets / "vidur/data/profiling/network/"
                                                       "a100_pairwise_nvlink"), "-o", str(one), "--quiet"]) == 0
    assert re.search(r"rows \(\d ops?, 1 device\) to", capsys.readouterr().out)


def test_import_error_leaves_no_output(shared_datasets, tmp_path, capsys):
    src = tmp_path / "softmax.csv"
    lines = (shared_datasets / "neusight/test-dev/softmax.csv").read_text().splitlines(keepends=True)[:20]
    src.write_text("".join(lines).replace(lines[10].split(",")[1], "nan", 1))
    out_dir = tmp_path / "o"
    out_dir.mkdir()
    rc = main(["data", "import", "neusight", str(src), "-o", str(out_dir / "t.csv")])
    err = capsys.readouterr().err
    assert rc == 2 and "softmax.csv: line 11, column 'Latency'" in err and "Traceback" not in err
    assert list(out_dir.iterdir()) == []
    rc = main(["data", "import", "no-such-format", str(src), "-o", str(out_dir / "t.csv")])
    assert rc == 2 and "unknown import format" in capsys.readouterr().err


def test_device_override_and_formats(shared_datasets, tmp_path, capsys):
    src = tmp_path / "bmm.csv"
    df = pd.read_csv(shared_datasets / "neusight/test-dev/bmm.csv", nrows=40)
    df["Device"] = "Some Lab GPU"
    df.to_csv(src, index=False)
    out = tmp_path / "t.csv"
    assert main(["data", "import", "neusight", str(src), "-o", str(out)]) == 2
    assert "unknown device 'Some Lab GPU'" in capsys.readouterr().err and not out.exists()
    assert main(["data", "import", "neusight", str(src), "-o", str(out), "--device", "Tesla V100-PCIE-32GB"]) == 0
    assert set(read_table(out)["device"]) == {"V100-PCIE-32GB"}
    capsys.readouterr()
    assert main(["data", "formats", "--json"]) == 0
    assert {f["format"] for f in json.loads(capsys.readouterr().out)} >= {"neusight", "nccl-tests", "deepbench"}


def test_schema_sources_pull(shared_datasets, tmp_path, capsys):
    assert main(["data", "schema"]) == 0
    assert "| `size_bytes` |" in capsys.readouterr().out
    assert main(["data", "sources", "--json"]) == 0
    names = {s["name"] for s in json.loads(capsys.readouterr().out)}
    assert {"neusight-train", "nccl-tests-alcf", "xla-collectives"} <= names
    assert main(["data", "pull", "vidur-network", "--from", str(shared_datasets), "-o", str(tmp_path / "m")]) == 0
    assert (tmp_path / "m/vidur/data/profiling/network/a100_dgx/all_reduce.csv").is_file()
    mirror = tmp_path / "mirror"
    shutil.copytree(shared_datasets / "xla", mirror / "xla")
    with open(mirror / "xla/collectives_sm90_H100.csv", "a") as fh:
        fh.write("sm_90,all-reduce,F32,1,4,1,8,0,1\n")
    capsys.readouterr()
    assert main(["data", "pull", "xla-collectives", "--from", str(mirror), "-o", str(tmp_path / "m2")]) == 2
    assert "checksum mismatch" in capsys.readouterr().err
    assert not (tmp_path / "m2/xla/collectives_sm90_H100.csv").exists()


def test_import_overrides_say_what_they_changed(shared_datasets, tmp_path, capsys):
    """--device over files that name ten GPUs relabels them all (said on stderr, counted); --system whose own GPU
    differs from the rows' keeps their device (said too); an override that changes nothing says nothing."""
    gemm = shared_datasets / "deepbench/deepbench_gemm_tidy.csv"
    rc = main(["data", "import", "deepbench", str(gemm), "-o", str(tmp_path / "db.csv"), "--device", "h100"])
    out = capsys.readouterr()
    assert rc == 0 and "--device relabelled 2380 rows the files attribute to GTX-1080Ti" in out.err
    assert set(read_table(tmp_path / "db.csv")["device"]) == {"H100-SXM"}
    sophia = shared_datasets / "nccl-tests/argonne-lcf_alcf-nccl-tests/results_sophia"
    rc = main(["data", "import", "nccl-tests", str(sophia), "-o", str(tmp_path / "s.csv"), "--system", "DGX-A100"])
    out = capsys.readouterr()
    assert rc == 0 and "system DGX-A100's GPUs are A100-SXM4-80GB; rows of A100-SXM4-40GB keep" in out.err
    rc = main(["data", "import", "nccl-tests", str(sophia), "-o", str(tmp_path / "s2.csv")])
    assert rc == 0 and "keep their device" not in capsys.readouterr().err


def test_a_table_named_twice_is_read_once(shared_datasets, tmp_path, capsys):
    out = tmp_path / "db.csv"
    assert main(["data", "import", "deepbench", str(shared_datasets / "deepbench/deepbench_gemm_tidy.csv"), "-o",
                 str(out), "-q"]) == 0  # -q as calibrate and report take it
    capsys.readouterr()
    rc = main(["data", "validate", str(out), str(tmp_path / "." / "db.csv"), "--json"])
    res = capsys.readouterr()
    assert rc == 0 and json.loads(res.out)["rows"] == 2380
    assert "1 measurement table(s) named more than once; each is read once" in res.err


def test_a_failed_import_says_why_it_found_no_rows(shared_datasets, tmp_path, capsys):
    """The warnings of an import that ends in an error come before the `error:` line: 'no nccl-tests data rows
    found' alone hid that the log's one section was a failed job, or a test the table has no op for."""
    log = next((shared_datasets / "nccl-tests/argonne-lcf_alcf-nccl-tests/results_sirius").rglob("all_reduce_output.dat.1"))
    head = log.read_text().splitlines()
    failed = tmp_path / "all_reduce_perf.log"  # killed before its first data row: header only
    failed.write_text("\n".join(line for line in head if line.lstrip().startswith("#")) + "\n")
    rc = main(["data", "import", "nccl-tests", str(failed), "-o", str(tmp_path / "t.csv")])
    err = capsys.readouterr().err
    assert rc == 2 and not (tmp_path / "t.csv").exists()
    assert "has no complete data rows (the test failed or was killed)" in err
    assert err.index("warning:") < err.index("error:")
    rc = main(["data", "import", "nccl-tests", str(failed), "-o", str(tmp_path / "t.csv"), "--quiet"])
    assert rc == 2 and "warning:" not in capsys.readouterr().err  # --quiet: no warnings


def test_an_output_that_is_an_input_file_is_refused(shared_datasets, tmp_path, capsys):
    """`-o` naming a file the import reads (the file itself, or a file its directory search finds) replaced the raw
    measurements with their canonical table, exit 0; refused with exit 2, the file untouched."""
    src = tmp_path / "matmul.csv"
    shutil.copy(shared_datasets / "xla/matmul_sm90_H100.csv", src)
    before = src.read_bytes()
    rc = main(["data", "import", "xla-matmul", str(src), "-o", str(tmp_path / "." / "matmul.csv"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "is one of the xla-matmul files read" in err, err
    assert src.read_bytes() == before
    d = tmp_path / "runs"
    d.mkdir()
    shutil.copy(shared_datasets / "neusight/test-dev/softmax.csv", d / "softmax.csv")
    out = d / "softmax.csv"
    before = out.read_bytes()
    rc = main(["data", "import", "neusight", str(d), "-o", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "is one of the neusight files read (from" in err, err
    assert out.read_bytes() == before
    assert main(["data", "import", "neusight", str(d), "-o", str(d / "table.csv"), "--quiet"]) == 0


def test_system_is_refused_for_formats_without_collectives(shared_datasets, tmp_path, capsys):
    """`--system` was dropped without a word by the kernel formats (their importers ignore it), so a user who
    meant it as the GEMMs' machine got a table that says nothing of it; refused with exit 2 and the reason."""
    out = tmp_path / "m.csv"
    rc = main(["data", "import", "xla-matmul", str(shared_datasets / "xla/matmul_sm90_H100.csv"), "-o", str(out),
               "--system", "DGX-H100", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "--system names the system collectives ran on; xla-matmul" in err, err
    assert not out.exists()
    rc = main(["data", "import", "xla-collectives", str(shared_datasets / "xla/collectives_sm90_H100.csv"), "-o",
               str(out), "--system", "DGX-H100", "--quiet"])
    assert rc == 0 and set(read_table(out, validate_rows=False)["system"]) == {"DGX-H100"}


def test_an_unknown_device_option_is_the_option_s_error(shared_datasets, tmp_path, capsys):
    """An unknown `--device` was reported as the first file's problem, ending "pass --device NAME ... to say which
    catalog device ran it" to a user who had; it is the option's error, with the closest catalog names."""
    rc = main(["data", "import", "xla-matmul", str(shared_datasets / "xla/matmul_sm90_H100.csv"), "-o",
               str(tmp_path / "m.csv"), "--device", "H1OO", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "error: --device: unknown device 'H1OO'; closest known" in err, err
    assert "pass --device" not in err and not (tmp_path / "m.csv").exists()


def test_imported_columns_in_schema_order_extras_last(shared_datasets, tmp_path, capsys):
    """docs/schema.md: importers' extra columns are kept at the end. Files of several op families were concatenated
    in order of appearance, so Vidur's `model`, `tp`, `num_tokens` sat before the elementwise columns and
    NeuSight's norm / elementwise columns after the provenance ones."""
    from hybrid.data.schema import COLUMN_BY_NAME, COLUMNS

    order = [c.name for c in COLUMNS]
    for fmt, path in (("vidur-compute", "vidur/data/profiling/compute/a100"),
                      ("neusight", "neusight/test-dev")):
        out = tmp_path / f"{fmt}.csv"
        assert main(["data", "import", fmt, str(shared_datasets / path), "-o", str(out), "--quiet"]) == 0
        capsys.readouterr()
        columns = list(pd.read_csv(out, nrows=0).columns)
        canonical = [c for c in columns if c in COLUMN_BY_NAME]
        assert canonical == [c for c in order if c in canonical], (fmt, columns)
        assert columns[:len(canonical)] == canonical, (fmt, columns)  # extras (Vidur's model, tp, ...) last


def test_a_canonical_table_given_to_an_importer_is_said_to_be_one(tmp_path, capsys):
    """`hybrid data import xla-matmul` of a table `data import` or `hybrid profile` wrote passed the column check
    (device, b, m, n, k, dtype are canonical columns too) and failed rows later on a missing `b`."""
    from pathlib import Path

    bundle = Path(__file__).resolve().parents[1] / "datasets" / "H100-SXM" / "measurements.csv"
    for fmt in ("xla-matmul", "neusight", "deepbench"):
        rc = main(["data", "import", fmt, str(bundle), "-o", str(tmp_path / f"{fmt}.csv"), "-q"])
        err = capsys.readouterr().err
        assert rc == 2 and "already a canonical measurement table" in err and "use it as it is" in err, (fmt, err)
        assert not (tmp_path / f"{fmt}.csv").exists()


def test_old_mac_line_endings_are_read_or_refused_by_every_importer(shared_datasets, tmp_path):
    """A file whose lines end with a bare carriage return (old Mac, ``\\r``): the CSV importers refused it as a
    "truncated last line (line 457: 0 of 18 fields, no final newline)" and `read_table` as a truncated table, which
    sent a user looking for a cut-off file. The CSV importers and canonical tables now say what it is; the
    line-based readers (nccl-tests logs, LLMCompass tables) read it as the same rows as the file with newlines."""
    import warnings

    from hybrid.data.importers import IMPORTERS
    from hybrid.errors import HybridError

    warnings.simplefilter("ignore")
    for fmt, importer in IMPORTERS.items():
        files = sorted(importer.find(shared_datasets), key=lambda p: p.stat().st_size)
        f = next(p for p in files if fmt != "nccl-tests" or b"Avg bus bandwidth" in p.read_bytes())
        rel = f.relative_to(shared_datasets)  # (Vidur's device is in the path)
        plain, mac = tmp_path / fmt / "plain" / rel, tmp_path / fmt / "mac" / rel
        for p in (plain, mac):
            p.parent.mkdir(parents=True)
        shutil.copy(f, plain)
        mac.write_bytes(f.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r"))
        want = importer.function([plain]).drop(columns="source")
        try:
            got = importer.function([mac]).drop(columns="source")
        except HybridError as exc:
            assert str(exc).startswith(f"{mac}: old Mac line endings"), (fmt, str(exc))
            assert "truncated" not in str(exc), (fmt, str(exc))
        else:
            pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))
    table = tmp_path / "table.csv"
    table.write_bytes(b"device,op,m,n,k,time_us\rH100,gemm,64,64,64,3.5\r")
    try:
        read_table(table)
    except HybridError as exc:
        assert str(exc).startswith(f"{table}: old Mac line endings"), str(exc)
    else:
        raise AssertionError("read_table read a table with bare carriage returns")
