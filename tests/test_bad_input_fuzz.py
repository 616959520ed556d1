"""The bar for bad input: every importer and command answers exit 0 with correct rows, or exit 2 with one clear
line; never a changed number, never a leftover file.

Inputs are small real snippets built at test time from the shared public files (never copied into the
repository): truncated at every byte offset, with NaN / inf / negative / zero / overflowing / non-numeric
values in the columns that carry numbers, with renamed or missing columns, and written to outputs that cannot
be written. Importers are called in-process (the same functions ``hybrid data import`` runs) for the thousands
of truncations, and through the real CLI entry point (in-process) for a sample of each kind.
"""

from __future__ import annotations

import csv
import io
import json
import os
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_run import run_cli as cli

from hybrid.data.importers import import_paths
from hybrid.data.schema import read_table
from hybrid.errors import HybridError

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "experiments" / "configs" / "dlrm_example.yaml"




def assert_one_clear_line(rc: int, err: str) -> None:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert rc == 2, err
    errors = [line for line in lines if line.lower().startswith("error")]
    assert len(errors) == 1 and len(errors[0]) > 12, err
    assert "Traceback" not in err and ".tmp" not in err, err


# ------------------------------------------------------------------------------------------- real snippets
def _csv_rows(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def _write_csv(path: Path, rows: list[list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8")
    return path


def _pick(rows: list[list[str]], keep: Callable[[list[str]], bool], n: int) -> list[list[str]]:
    return [r for r in rows[1:] if keep(r)][:n]


def _xla_matmul(shared: Path, out: Path) -> Path:
    rows = _csv_rows(shared / "xla/matmul_sm90_H100.csv")
    return _write_csv(out / "matmul.csv", [rows[0], *rows[1:3]])


def _xla_collectives(shared: Path, out: Path) -> Path:
    rows = _csv_rows(shared / "xla/collectives_sm90_H100.csv")
    h = rows[0]
    op = h.index("opcode")
    body = _pick(rows, lambda r: r[op] == "all-gather", 1) + _pick(rows, lambda r: r[op] == "reduce-scatter", 1)
    return _write_csv(out / "collectives.csv", [h, *body])


def _deepbench(shared: Path, out: Path) -> Path:
    rows = _csv_rows(shared / "deepbench/deepbench_allreduce_tidy.csv")
    return _write_csv(out / "deepbench_allreduce_tidy.csv", [rows[0], *rows[1:3]])


def _deepbench_gemm(shared: Path, out: Path) -> Path:
    rows = _csv_rows(shared / "deepbench/deepbench_gemm_tidy.csv")
    h = rows[0]
    prec = h.index("precision")
    return _write_csv(out / "deepbench_gemm_tidy.csv", [h, *_pick(rows, lambda r: r[prec] == "Float", 2)])


def _neusight(shared: Path, out: Path) -> Path:
    rows = _csv_rows(shared / "neusight/test-dev/softmax.csv")
    return _write_csv(out / "softmax.csv", [rows[0], *rows[1:3]])


def _vidur_compute(shared: Path, out: Path) -> Path:
    src = shared / "vidur/data/profiling/compute/a100/Qwen/Qwen-72B/mlp.csv"
    rows = _csv_rows(src)
    keep = ["time_stats.mlp_up_proj.median", "num_tokens", "num_tensor_parallel_workers"]
    idx = [rows[0].index(c) for c in keep]
    body = [[r[i] for i in idx] for r in rows[1:3]]
    return _write_csv(out / "a100/Qwen/Qwen-72B/mlp.csv", [keep, *body])


def _vidur_network(shared: Path, out: Path) -> Path:
    rows = _csv_rows(shared / "vidur/data/profiling/network/a100_dgx/send_recv.csv")
    return _write_csv(out / "a100_dgx/send_recv.csv", [rows[0], *rows[1:3]])


def _nccl_tests(shared: Path, out: Path) -> Path:
    logs = sorted((shared / "nccl-tests/xxrjun_nccl-tests-cluster").rglob("nccl_N2_G1_*.log"))
    lines = logs[0].read_text(encoding="utf-8").splitlines()
    keep, data = [], 0
    for line in lines:
        if line.lstrip().startswith("#"):
            if "Collective test concluded" in line:
                keep.append(line)
                break
            if line.strip() in ("#", "# Using devices") or "(B)" in line or "out-of-place" in line:
                continue
            keep.append(line)
        elif line.strip() and data < 2:
            keep.append(line)
            data += 1
    path = out / "alltoall_perf.log"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(keep) + "\n", encoding="utf-8")
    return path


#: format -> (snippet builder, the columns (CSV header names) or token positions that carry numbers)
SNIPPETS: dict[str, tuple[Callable[[Path, Path], Path], tuple]] = {
    "xla-matmul": (_xla_matmul, ("b", "m", "n", "k", "time_us")),
    "xla-collectives": (_xla_collectives, ("bytes", "num_devices_per_group", "network_throughput_bytes_per_sec")),
    "deepbench": (_deepbench, ("num_floats", "num_gpus", "mean_time_ms")),
    "deepbench-gemm": (_deepbench_gemm, ("M", "N", "K", "time_ms")),
    "neusight": (_neusight, ("B", "H", "Latency")),
    "vidur-compute": (_vidur_compute, ("time_stats.mlp_up_proj.median", "num_tokens",
                                       "num_tensor_parallel_workers")),
    "vidur-network": (_vidur_network, ("size", "num_workers", "time_stats.send_recv.median")),
    "nccl-tests": (_nccl_tests, (0, 5, 9)),  # size, out-of-place time, in-place time
}
FORMAT = {"deepbench-gemm": "deepbench"}


@pytest.fixture(scope="module")
def snippets(shared_datasets, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("snippets")
    return {name: build(shared_datasets, root / name) for name, (build, _) in SNIPPETS.items()}


def run_import(name: str, path: Path, catalog) -> tuple[pd.DataFrame | None, str | None, list[str]]:
    """(table, error message, warnings) of the importer on ``path``; any non-HybridError propagates."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            table = import_paths(FORMAT.get(name, name), [path], catalog=catalog)
        except HybridError as exc:
            return None, str(exc), [str(w.message) for w in caught]
    return table, None, [str(w.message) for w in caught]


def _row_tuples(df: pd.DataFrame, columns: list[str]) -> list[tuple]:
    out = []
    for rec in df[columns].itertuples(index=False):
        out.append(tuple("" if (isinstance(v, float) and np.isnan(v)) or v is None or v is pd.NA
                         else (f"{float(v):.12g}" if isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
                               else str(v)) for v in rec))
    return out


def assert_rows_unchanged(got: pd.DataFrame, ref: pd.DataFrame, prefix: bool) -> None:
    """Every row of ``got`` is a row of ``ref`` with identical values (the first rows, in order, if
    ``prefix``); columns ``got`` has beyond ``ref`` are not allowed."""
    extra = set(got.columns) - set(ref.columns)
    assert not extra, extra
    cols = [c for c in ref.columns if c in got.columns]
    g, r = _row_tuples(got, cols), _row_tuples(ref, cols)
    if prefix:
        assert g == r[: len(g)], (g, r)
    else:
        assert not Counter(g) - Counter(r), (g, r)


# ----------------------------------------------------------------------------------------- truncations
@pytest.mark.parametrize("name", list(SNIPPETS))
def test_truncation_at_every_byte_offset(name, snippets, catalog):
    path = snippets[name]
    data = path.read_bytes()
    ref, error, _ = run_import(name, path, catalog)
    assert error is None and ref is not None and len(ref) >= 2, error
    try:
        for k in range(len(data)):
            path.write_bytes(data[:k])
            got, error, caught = run_import(name, path, catalog)
            if got is None:
                assert error and "\n" not in error.strip(), (k, error)
                continue
            assert_rows_unchanged(got, ref, prefix=True)
            cut_line = data[:k].rsplit(b"\n", 1)[-1]
            if k and cut_line.strip() and name != "nccl-tests":
                # a row cut anywhere inside (even after its last digit) is reported, never imported
                assert any("newline" in w for w in caught), (k, caught)
    finally:
        path.write_bytes(data)


@pytest.mark.parametrize("name", list(SNIPPETS))
def test_cli_import_of_truncated_files(name, snippets, tmp_path):
    """Through `hybrid data import`: the last newline missing (the issue's xla-collectives case), a cut in the
    middle of the last value, a cut inside the header."""
    path = snippets[name]
    data = path.read_bytes()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    ref_out = tmp_path / "ref.csv"
    rc, _, err = cli(["data", "import", FORMAT.get(name, name), path, "-o", ref_out])
    assert rc == 0, err
    ref = read_table(ref_out, validate_rows=False)
    header_end = data.index(b"\n") if name != "nccl-tests" else 10
    end = len(data) - 1  # the final newline of the last data row
    if name == "nccl-tests":
        lines = data.split(b"\n")
        last = max(i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith(b"#"))
        end = len(b"\n".join(lines[: last + 1]))
    try:
        for k in (end, end - 3, header_end // 2):
            path.write_bytes(data[:k])
            out = out_dir / f"cut{k}.csv"
            rc, stdout, err = cli(["data", "import", FORMAT.get(name, name), path, "-o", out])
            if rc == 0:
                got = read_table(out, validate_rows=False)
                assert_rows_unchanged(got, ref, prefix=True)
                assert len(got) < len(ref) and "warning:" in err and "newline" in err, err
            else:
                assert_one_clear_line(rc, err)
                assert not out.exists()
            assert sorted(p.name for p in out_dir.iterdir()) == sorted(p.name for p in out_dir.glob("cut*.csv")
                                                                       if not p.name.startswith("."))
    finally:
        path.write_bytes(data)


@pytest.mark.parametrize("name", list(SNIPPETS))
def test_windows_line_endings_byte_order_mark_and_compressed_copies(name, snippets, tmp_path):
    """A copy saved on Windows (CRLF, UTF-8 BOM) imports the same rows; a compressed copy (``.gz``, ``.bz2``) is
    one clear line saying to decompress it, not a "truncated last line" read from the compressed bytes (CSV
    formats) or a missing-header guess (nccl-tests), and nothing is written."""
    import bz2
    import gzip

    path = snippets[name]
    data = path.read_bytes()
    fmt = FORMAT.get(name, name)
    rc, _, err = cli(["data", "import", fmt, path, "-o", tmp_path / "ref.csv"])
    assert rc == 0, err
    ref = read_table(tmp_path / "ref.csv", validate_rows=False)
    try:
        for i, variant in enumerate((data.replace(b"\n", b"\r\n"), b"\xef\xbb\xbf" + data)):
            path.write_bytes(variant)
            out = tmp_path / f"variant{i}.csv"
            rc, _, err = cli(["data", "import", fmt, path, "-o", out])
            assert rc == 0, err
            got = read_table(out, validate_rows=False)
            assert len(got) == len(ref)
            assert_rows_unchanged(got, ref, prefix=True)
        for kind, packed in (("gzip", gzip.compress(data)), ("bzip2", bz2.compress(data))):
            path.write_bytes(packed)
            out = tmp_path / f"{kind}.csv"
            rc, _, err = cli(["data", "import", fmt, path, "-o", out])
            assert_one_clear_line(rc, err)
            assert f"{path.name}: a {kind}-compressed file" in err and "decompress it first" in err, err
            assert not out.exists()
    finally:
        path.write_bytes(data)


# ----------------------------------------------------------------------------------------- bad values
BAD_VALUES = ("nan", "NaN", "-12.5", "0", "inf", "-inf", "1e400", "abc", "")


def _edit_cell(name: str, data: str, column, row: int, value: str) -> str:
    lines = data.splitlines(keepends=True)
    if name == "nccl-tests":
        data_lines = [i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")]
        i = data_lines[row]
        toks = lines[i].split()
        toks[column] = value or "-"
        lines[i] = "  ".join(toks) + "\n"
        return "".join(lines)
    rows = list(csv.reader(io.StringIO(data)))
    rows[row + 1][rows[0].index(column)] = value
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


@pytest.mark.parametrize("name", list(SNIPPETS))
def test_nan_inf_negative_and_garbage_values(name, snippets, catalog):
    path = snippets[name]
    text = path.read_text(encoding="utf-8")
    ref, error, _ = run_import(name, path, catalog)
    assert error is None
    try:
        for column in SNIPPETS[name][1]:
            for value in BAD_VALUES:
                path.write_text(_edit_cell(name, text, column, 1, value), encoding="utf-8")
                got, error, caught = run_import(name, path, catalog)
                if got is None:
                    assert error and "\n" not in error.strip(), (column, value, error)
                    continue
                # the edited row is rejected (a reported skip) or was in a column the importer does not use
                assert_rows_unchanged(got, ref, prefix=False)
                documented = name == "nccl-tests" and column == 0 and value == "0"  # zero-byte rows: launch
                if len(got) < len(ref) and not documented:                         # overhead, skipped by design
                    assert caught, (column, value)
    finally:
        path.write_text(text, encoding="utf-8")


def test_nccl_tests_reports_every_dropped_timing(snippets, catalog, tmp_path):
    """The issue's case: times nan, -12.5, 0 and inf were dropped silently (96 of 100 rows written)."""
    text = snippets["nccl-tests"].read_text(encoding="utf-8")
    path = tmp_path / "alltoall_perf.log"
    for row, (col, value) in enumerate([(5, "nan"), (9, "-12.5")]):
        text = _edit_cell("nccl-tests", text, col, row, value)
    path.write_text(text, encoding="utf-8")
    out = tmp_path / "o.csv"
    rc, _, err = cli(["data", "import", "nccl-tests", path, "-o", out])
    assert rc == 0, err
    line = next(x for x in err.splitlines() if "dropped" in x)
    assert "dropped 2 measurement(s)" in line and "'nan' (not a number)" in line and "'-12.5' (not positive)" in line
    assert len(read_table(out, validate_rows=False)) == 2  # 2 rows x (out-of-place, in-place) - 2 dropped


# ----------------------------------------------------------------------------------------- wrong columns
@pytest.mark.parametrize("name", [n for n in SNIPPETS if n != "nccl-tests"])
def test_renamed_missing_and_extra_columns(name, snippets, catalog):
    path = snippets[name]
    text = path.read_text(encoding="utf-8")
    ref, _, _ = run_import(name, path, catalog)
    header, rest = text.split("\n", 1)
    cols = header.split(",")
    try:
        for col in SNIPPETS[name][1]:
            renamed = ",".join(c if c != col else f"{col}_x" for c in cols)
            path.write_text(renamed + "\n" + rest, encoding="utf-8")
            got, error, _ = run_import(name, path, catalog)
            if got is None:
                assert error and "\n" not in error, (col, error)
            else:  # another column carries the same number (xla-matmul: flops_per_s for time_us)
                assert_rows_unchanged(got, ref, prefix=True)
                assert len(got) == len(ref)
        # an extra column nobody reads changes nothing
        body = [line + ",42" for line in rest.strip("\n").split("\n")]
        path.write_text(header + ",unused_extra\n" + "\n".join(body) + "\n", encoding="utf-8")
        got, error, _ = run_import(name, path, catalog)
        assert error is None, error
        assert_rows_unchanged(got, ref, prefix=True) and len(got) == len(ref)
        # a row with a field too many (a shifted row) is not read as numbers
        lines = text.split("\n")
        lines[1] = lines[1] + ",1,2"
        path.write_text("\n".join(lines), encoding="utf-8")
        got, error, _ = run_import(name, path, catalog)
        assert got is None or (assert_rows_unchanged(got, ref, prefix=False) is None)
    finally:
        path.write_text(text, encoding="utf-8")


# ----------------------------------------------------------------------------------------- outputs
def _bad_outputs(root: Path, suffix: str) -> list[tuple[Path, str]]:
    """(unwritable output path, what the error must say) cases under a fresh folder ``root``."""
    root.mkdir(parents=True)
    blocker = root / "a_file"
    blocker.write_text("x")
    a_dir = root / f"a_dir{suffix}"
    a_dir.mkdir()
    cases = [(blocker / f"out{suffix}", "not a directory"), (a_dir, "is a directory")]
    if Path("/proc/self").is_dir():
        cases.append((Path(f"/proc/hybrid-fuzz/out{suffix}"), "cannot write output"))
    if os.geteuid() != 0:  # root ignores permissions
        ro = root / "readonly"
        ro.mkdir()
        ro.chmod(0o500)
        cases.append((ro / f"out{suffix}", "permission"))
    return cases


def test_unwritable_outputs_are_one_clear_line(snippets, tmp_path, monkeypatch):
    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    table = tmp_path / "table.csv"
    rc, _, err = cli(["data", "import", "xla-matmul", snippets["xla-matmul"], "-o", table])
    assert rc == 0, err
    commands: dict[str, tuple[str, Callable[[Path], list]]] = {
        "import": (".csv", lambda out: ["data", "import", "xla-matmul", snippets["xla-matmul"], "-o", out]),
        "evaluate": (".csv", lambda out: ["evaluate", table, "--model", "roofline", "-o", out]),
        "simulate": (".json", lambda out: ["simulate", CONFIG, "--trace", out]),
        "shard": (".yaml", lambda out: ["shard", CONFIG, "--strategy", "size_greedy", "--output", out]),
    }
    for cmd, (suffix, make) in commands.items():
        root = tmp_path / cmd
        for out, reason in _bad_outputs(root, suffix):
            rc, _, err = cli(make(out))
            assert_one_clear_line(rc, err)
            line = next(x for x in err.splitlines() if x.lower().startswith("error"))
            assert str(out) in line and reason in line, (cmd, line)
        leftovers = [p for p in root.rglob("*") if p.name.startswith(".") or p.name.endswith(".tmp")]
        assert not leftovers, leftovers
    assert not (tmp_path / "home").exists()


# ----------------------------------------------------------------------------------------- commands
BAD_COMMANDS = [
    ["predict", "gemm", "-d", "H100", "-m", "-5", "-n", "4", "-k", "4"],
    ["predict", "gemm", "-d", "H100", "-m", "0", "-n", "4", "-k", "4"],
    ["predict", "gemm", "-d", "H100", "-m", "4", "-n", "4", "-k", "4", "--dtype", "fp7"],
    ["predict", "gemm", "-d", "NoSuchGPU", "-m", "4", "-n", "4", "-k", "4"],
    *[["predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", s, "--ranks", "8"]
      for s in ("nan", "-1", "inf", "0", "1e400", "-inf", "")],
    ["predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", "1MiB", "--ranks", "0"],
    ["predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", "1MiB", "--ranks", "1"],
    ["shard", CONFIG, "--gpus", "2", "--time-budget", "nan"],
    ["bench", "validate", "x", "--k", "-1"],
    ["predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", "1MiB", "--ranks", "64"],
    ["predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", "1MiB", "--ranks", "16",
     "--nodes", "3"],
    ["simulate", CONFIG, "--gpus", "0"],
    ["simulate", CONFIG, "--gpus", "-3"],
    ["shard", CONFIG, "--gpus", "0"],
    ["shard", CONFIG, "--gpus", "100000"],
    ["shard", CONFIG, "--top", "0"],
    ["shard", CONFIG, "--output", "plan.txt"],  # refused before the search, not written as JSON under .txt
    ["data", "validate", "no-such-table.csv"],
    ["devices", "show", "NoSuchGPU"],
    ["report", "--model", "x", "--run", "y", "-o", "r.html"],
    ["report", "--model", "x", "-o", "r.pdf"],  # an HTML page under another name: refused before the store opens
    ["bench", "dlrm", CONFIG, "--ranks", "0"],
    ["bench", "dlrm", CONFIG, "--iters", "-1"],
    ["profile", "--threads", "0", "-o", "p"],
    ["profile", "--threads", "100000", "-o", "p"],  # more threads than cores: refused, not a 100000-core "CPU"
    ["quickstart", "--data-dir", "/nonexistent/hybrid-data"],
    # a bad model name was refused only after every bundle was read (and the public subset imported): up front now
    ["quickstart", "--no-public", "--name", "a b"],
    ["quickstart", "--data-dir", ""],  # was the default data directory
    ["data", "import", "no-such-format", "x.csv", "-o", "x.csv"],
    ["predict", "gemm", "-d", "H100", "-m", "8", "-n", "8", "-k", "8", "--model", "q", "--tracking-uri", "bogus://x"],
    # a GPU without fp8 (fp4) tensor cores cannot train in it: no silent fall-back to the bf16 rate
    ["llm", "train", "llama3-8b", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "64", "--dtype", "fp8"],
    ["llm", "capacity", "llama2-70b", "--device", "A100", "--tp", "4", "--input", "0", "--output", "5"],
    *[["llm", "infer", "llama2-7b", "--device", "H100-SXM", "--reserve-gib", v] for v in ("nan", "inf", "-1")],
    ["trace", "predict", "datasets/traces-h100/cnn-bf16", "--device", "H100-SMX", "--roofline"],
    ["trace", "predict", "datasets/traces-h100/cnn-bf16", "--device", "H100-SXM", "--model", "x", "--roofline"],
]

#: what the error line of some of :data:`BAD_COMMANDS` must say
BAD_COMMAND_MESSAGES = {
    "train": "has no fp8 tensor-core rate", "capacity": "--input must be a positive integer, got 0",
    "infer": "reserve must be a finite number >= 0 GiB",
    "predict": "",
}


@pytest.mark.parametrize("args", BAD_COMMANDS, ids=[" ".join(map(str, a[:2] + a[-2:])) for a in BAD_COMMANDS])
def test_bad_command_arguments(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))  # must stay uncreated
    if args[:2] == ["trace", "predict"]:
        args = [args[0], args[1], str(REPO / args[2]), *args[3:]]
    rc, out, err = cli(args)
    assert_one_clear_line(rc, err)
    assert out == "" and list(tmp_path.iterdir()) == []
    if args[0] in ("llm", "trace"):
        assert BAD_COMMAND_MESSAGES[args[1]] in err, err
    if args[:2] == ["trace", "predict"]:
        assert ("unknown system or device 'H100-SMX'; closest known: H100-SXM" in err if "H100-SMX" in args
                else "--model names the whole predictor: drop --roofline" in err), err


def test_files_that_are_not_what_the_command_expects(tmp_path, monkeypatch):
    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n")
    for args in (["bench", "validate", bad, "--roofline"], ["calibrate", bad, "--name", "x"],
                 ["evaluate", bad, "--model", "roofline"], ["data", "validate", bad], ["simulate", bad],
                 ["shard", bad], ["data", "import", "neusight", bad, "-o", tmp_path / "o.csv"]):
        rc, out, err = cli(args)
        assert_one_clear_line(rc, err)
        assert str(bad) in err, (args, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv"]


@pytest.mark.parametrize("value", ["nan", "-3.5", "0", "inf", "", "abc"])
def test_tables_with_bad_times_are_rejected_by_every_reader(value, snippets, tmp_path, monkeypatch):
    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    table = tmp_path / "t.csv"
    rc, _, err = cli(["data", "import", "xla-matmul", snippets["xla-matmul"], "-o", table])
    assert rc == 0
    df = pd.read_csv(table)
    df["time_us"] = df["time_us"].astype(object)
    df.loc[1, "time_us"] = value
    df.to_csv(table, index=False)
    for args in (["data", "validate", table], ["evaluate", table, "--model", "roofline"],
                 ["calibrate", table, "--name", "fuzz", "-q", "--tracking-uri",
                  f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"]):
        rc, _, err = cli(args)
        assert_one_clear_line(rc, err)
    assert not (tmp_path / "store").exists() and not (tmp_path / "home").exists()
    text = table.read_text()
    table.write_text(text[:-3])  # a table cut inside its last value
    rc, _, err = cli(["evaluate", table, "--model", "roofline"])
    assert_one_clear_line(rc, err)
    assert "final newline" in err or "missing" in err


def test_a_mistyped_command_is_one_line_with_a_suggestion(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    rc, out, err = cli(["predcit", "gemm"])
    assert_one_clear_line(rc, err)
    assert "No such command 'predcit'. Did you mean 'predict'?" in err and out == ""


def test_a_dtype_fallback_warns_on_stderr_with_json_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(["predict", "gemm", "--device", "T4", "--dtype", "fp8", "-m", "8", "-n", "8", "-k", "8", "--json"])
    assert rc == 0 and "warning: T4: it has no fp8 units" in err
    assert "fp8 operand sizes" in json.loads(out)["note"]


@pytest.mark.parametrize("option", ["--dp", "--tp", "--pp", "--tokens", "--hidden"])
def test_trace_predict_parallel_degrees_checked_before_the_trace_is_read(option, tmp_path, monkeypatch):
    """`trace predict --dp 0` said "dp must be a positive integer" (not the option's name), and only after the
    trace was parsed: a file that is no trace failed on that instead, and a large trace was parsed for nothing."""
    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    junk = tmp_path / "not-a-trace.json"
    junk.write_text("{}")
    rc, out, err = cli(["trace", "predict", junk, "--device", "H100-SXM", "--roofline", option, "0"])
    assert_one_clear_line(rc, err)
    assert f"'{option}'" in err and "0 is not in the range" in err and "trace" not in err.split("Error:")[1], err
    assert out == ""
    if option == "--tokens":  # --tokens without --tp/--pp is refused before the trace is read too
        rc, out, err = cli(["trace", "predict", junk, "--device", "H100-SXM", "--roofline", option, "8"])
        assert_one_clear_line(rc, err)
        assert "error: --tokens and --hidden go with --tp or --pp" in err, err


@pytest.mark.parametrize(("size", "said"), [("1000.5", "size '1000.5' is 1,000.5 B, not a whole number of bytes"),
                                            ("1.0001K", "size '1.0001K' is 1,024.1024 B, not a whole number")])
def test_predict_collective_refuses_a_fraction_of_a_byte(size, said, monkeypatch, tmp_path):
    """`--size 1000.5` (int8) was priced as a 1000-byte collective and `--size 1.0001K` as 1024 B: a message nobody
    sent, rounded silently. A size that is a whole number of bytes still reads."""
    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    rc, out, err = cli(["predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", size, "--ranks", "8",
                        "--dtype", "int8"])
    assert_one_clear_line(rc, err)
    assert said in err and out == "", err
    for whole, size_bytes in (("1000.0", 1000), ("1.5K", 1536)):
        rc, out, _ = cli(["predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", whole, "--ranks",
                          "8", "--dtype", "int8", "--json"])
        assert rc == 0 and json.loads(out)["size_bytes"] == size_bytes


@pytest.mark.parametrize(("size", "dtype", "said"), [
    ("1.5", "fp32", "--size '1.5' is not a whole number of fp32 elements (4 B each; it reads as 2 B)"),
    ("6", "fp32", "--size '6' is not a whole number of fp32 elements (4 B each)"),
    ("3", "bf16", "--size '3' is not a whole number of bf16 elements (2 B each)")])
def test_predict_collective_size_not_whole_elements_quotes_what_was_typed(size, dtype, said, monkeypatch, tmp_path):
    """`--size 1.5` said "size 2 B is not a whole number of fp32 elements": a size the user never typed."""
    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    rc, out, err = cli(["predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", size, "--ranks", "8",
                        "--dtype", dtype])
    assert_one_clear_line(rc, err)
    assert said in err and out == "", err
    rc, out, _ = cli(["predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", "6", "--ranks", "8",
                      "--dtype", "bf16", "--json"])
    assert rc == 0 and json.loads(out)["size_bytes"] == 6
