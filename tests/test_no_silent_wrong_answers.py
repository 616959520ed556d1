"""Issue 9, item by item: each case a new user hit that gave a wrong number, hung, left something behind or said
nothing. Every test here failed before the fix."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest
from cli_run import run_cli as cli

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "experiments" / "configs" / "dlrm_example.yaml"


# ------------------------------------------------------------------------------ truncated files, importers
@pytest.mark.parametrize("fmt, rel, column", [
    ("xla-collectives", "xla/collectives_sm90_H100.csv", "network_throughput_bytes_per_sec"),
    ("xla-matmul", "xla/matmul_sm90_H100.csv", "time_us"),
    ("deepbench", "deepbench/deepbench_gemm_tidy.csv", "tflops"),  # cut inside a column nobody reads
])
def test_a_row_cut_inside_its_last_value_is_not_imported(fmt, rel, column, shared_datasets, tmp_path, catalog):
    from hybrid.data.importers import import_paths

    lines = (shared_datasets / rel).read_text().splitlines(keepends=True)
    assert lines[0].rstrip().split(",")[-1] == column
    path = tmp_path / Path(rel).name
    path.write_text("".join(lines[:6]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = import_paths(fmt, [path], catalog=catalog)
    last = lines[6].rstrip("\n")
    path.write_text("".join(lines[:6]) + last[: len(last) - 4])  # 9752380952 -> 975238 (a wrong number)
    with pytest.warns(UserWarning, match=r"line 7 has no final newline \(truncated file\?\)"):
        cut = import_paths(fmt, [path], catalog=catalog)
    pd.testing.assert_frame_equal(cut, full)  # the cut row is dropped, the others are exactly the full import


def test_read_table_refuses_a_table_cut_inside_its_last_value(tmp_path, shared_datasets):
    from hybrid.data.schema import SchemaError, read_table

    out = tmp_path / "t.csv"
    assert cli(["data", "import", "xla-matmul", shared_datasets / "xla/matmul_sm90_H100.csv", "-o", out])[0] == 0
    out.write_text(out.read_text()[:-3])
    with pytest.raises(SchemaError, match="no final newline"):
        read_table(out)


# ------------------------------------------------------------------------------ impossible layouts, dtypes
@pytest.mark.parametrize("ranks, nodes, needle", [
    (64, 1, "64 ranks do not fit on 1 node(s) of system DGX-H100 (8 GPUs per node): use --nodes 8"),
    (16, 3, "16 ranks do not split evenly over 3 nodes"),
    (16, 32, "--ranks 16 cannot span --nodes 32"),
])
def test_predict_collective_rejects_layouts_the_system_cannot_have(ranks, nodes, needle):
    rc, out, err = cli(["predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", "1MiB",
                        "--ranks", ranks, "--nodes", nodes])
    assert rc == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1, err


def test_predict_collective_accepts_real_layouts():
    rc, out, err = cli(["predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", "1MiB",
                        "--ranks", "16", "--nodes", "2", "--json"])
    assert rc == 0, err
    assert json.loads(out)["ranks"] == 16 and "note" not in json.loads(out)
    rc, out, err = cli(["predict", "collective", "-s", "H100-SXM", "--op", "all_reduce", "--size", "1MiB",
                        "--ranks", "16", "--nodes", "2", "--json"])
    assert rc == 0 and "a hypothetical node of 8 x H100-SXM" in json.loads(out)["note"]


def test_predict_gemm_states_a_dtype_fallback():
    rc, out, err = cli(["predict", "gemm", "--device", "P4", "--dtype", "fp8", "-m", "1024", "-n", "1024", "-k",
                        "1024", "--json"])
    assert rc == 0, err
    res = json.loads(out)
    # fp8 falls back to the P4's fp16 entry, whose units add in 16 bits: FP32-summing kernels run on FP32 units
    assert res["dtype"] == "fp8" and res["peak_dtype"] == "fp32" and "P4: it has no fp8 units" in res["note"]
    rc, out, err = cli(["predict", "gemm", "--device", "P4", "--dtype", "fp8", "-m", "1024", "-n", "1024", "-k",
                        "1024"])
    assert rc == 0 and "warning: P4: it has no fp8 units: timed at its fp32 peak" in err
    rc, out, err = cli(["predict", "gemm", "--device", "P100-PCIE-16GB", "--dtype", "fp16", "-m", "1024", "-n",
                        "1024", "-k", "1024", "--json"])
    res = json.loads(out)
    assert rc == 0 and res["peak_dtype"] == "fp32" and "its fp16 units add in 16 bits" in res["note"]
    rc, out, err = cli(["predict", "gemm", "--device", "H100", "--dtype", "fp8", "-m", "1024", "-n", "1024", "-k",
                        "1024", "--json"])
    assert rc == 0 and "peak_dtype" not in json.loads(out) and err == ""


# ------------------------------------------------------------------------------ tracking stores
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_tracking_server_fails_within_seconds(tmp_path, shared_datasets):
    table = tmp_path / "t.csv"
    assert cli(["data", "import", "xla-matmul", shared_datasets / "xla/matmul_sm90_H100.csv", "-o", table])[0] == 0
    uri = f"http://127.0.0.1:{_closed_port()}"
    for args in (["evaluate", table, "--model", "kern"], ["calibrate", table, "--name", "k", "-q"],
                 ["predict", "gemm", "-d", "H100", "-m", "8", "-n", "8", "-k", "8", "--model", "kern"]):
        t0 = time.monotonic()
        rc, out, err = cli([*args, "--tracking-uri", uri])
        assert time.monotonic() - t0 < 15
        assert rc == 2 and f"cannot reach the tracking server {uri}" in err and len(err.strip().splitlines()) == 1


def test_a_server_that_never_answers_or_is_not_mlflow_fails_in_one_line(tmp_path, monkeypatch):
    """A listener that accepts connections and never answers (a hung server, a wrong port) held every command for
    MLflow's retry budget times hybrid's (about 13 minutes); a web server that is not MLflow gave a raw
    MlflowException and exit code 1."""
    import http.server
    import threading

    from hybrid.tracking.store import PROBE_TIMEOUT_ENV

    monkeypatch.setenv(PROBE_TIMEOUT_ENV, "1")
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # no request log on the captured stderr
            pass

    web = http.server.HTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        args = ["predict", "gemm", "-d", "H100", "-m", "8", "-n", "8", "-k", "8", "--model", "kern"]
        t0 = time.monotonic()
        rc, out, err = cli([*args, "--tracking-uri", f"http://127.0.0.1:{silent.getsockname()[1]}"])
        assert time.monotonic() - t0 < 15
        assert rc == 2 and "accepts connections but sent no HTTP answer within 1 s" in err
        assert len(err.strip().splitlines()) == 1
        rc, out, err = cli([*args, "--tracking-uri", f"http://127.0.0.1:{web.server_address[1]}"])
        ours = [line for line in err.splitlines() if line.startswith("error:")]  # (the web server logs too)
        assert rc == 2 and len(ours) == 1 and ours[0].startswith("error: tracking store:") and "404" in ours[0]
        # without the web server's HTML page, and with what a 404 there means
        assert "<!DOCTYPE" not in ours[0].upper() and "no MLflow tracking API there" in ours[0]
    finally:
        silent.close()
        web.shutdown()


def test_probe_timeout_is_configurable(monkeypatch):
    from hybrid.errors import InvalidInputError
    from hybrid.tracking.store import PROBE_TIMEOUT_ENV, probe_timeout_s

    monkeypatch.setenv(PROBE_TIMEOUT_ENV, "0.5")
    assert probe_timeout_s() == 0.5
    monkeypatch.setenv(PROBE_TIMEOUT_ENV, "soon")
    with pytest.raises(InvalidInputError, match=PROBE_TIMEOUT_ENV):
        probe_timeout_s()
    # `inf` (wait forever) and 1e10 s passed the check and crashed the probe's socket deadline with "OverflowError:
    # timestamp out of range for platform time_t"; nan was called not positive
    for raw in ("inf", "1e10", "nan"):
        monkeypatch.setenv(PROBE_TIMEOUT_ENV, raw)
        with pytest.raises(InvalidInputError, match=rf"\${PROBE_TIMEOUT_ENV} must be a finite number of seconds up "
                                                    rf"to 86400 .*got '{raw}'"):
            probe_timeout_s()
    monkeypatch.setenv(PROBE_TIMEOUT_ENV, "86400")
    assert probe_timeout_s() == 86400


def test_mlflow_http_retries_are_bounded_only_while_hybrid_runs(monkeypatch):
    from hybrid.tracking.store import HTTP_LIMITS, bounded_http

    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "7")  # the user's own setting wins
    with bounded_http():
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == HTTP_LIMITS["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]
        assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "7"
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ and os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "7"


def test_read_only_commands_never_create_a_store(tmp_path, shared_datasets):
    table = tmp_path / "t.csv"
    assert cli(["data", "import", "xla-matmul", shared_datasets / "xla/matmul_sm90_H100.csv", "-o", table])[0] == 0
    store = tmp_path / "nonexistent" / "dir" / "mlflow.db"
    for args in (["evaluate", table, "--model", "kern"], ["report", "--model", "kern", "-o", tmp_path / "r.html"],
                 ["predict", "gemm", "-d", "H100", "-m", "8", "-n", "8", "-k", "8", "--model", "kern"],
                 ["simulate", CONFIG, "--model", "kern"]):
        rc, out, err = cli([*args, "--tracking-uri", f"sqlite:///{store}"])
        assert rc == 2 and f"no tracking store at {store}" in err, (args, err)
        assert not (tmp_path / "nonexistent").exists()


def test_a_store_file_that_is_not_an_mlflow_store_is_left_alone(tmp_path):
    """A `--tracking-uri x.db` naming the wrong file: a SQLite database of another program got MLflow's ~60 tables
    written into it, by a read-only `hybrid models` too; an empty file was turned into an empty store by `hybrid
    models` (then "no models are registered") instead of "no tracking store"; a file that is not SQLite gave
    MLflow's three-line DatabaseError with its SQL. Each is now one error line, and no file is changed."""
    import sqlite3

    other = tmp_path / "app.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE users (id INTEGER)")
    (tmp_path / "empty.db").write_bytes(b"")
    (tmp_path / "notes.db").write_text("not a database\n")
    table = tmp_path / "t.csv"
    table.write_text("device,op,dtype,m,n,k,time_us\nT4,gemm,fp32,64,64,64,10\n")
    cases = {other: "is a SQLite database of something else (tables users)",
             tmp_path / "empty.db": "no tracking store at",
             tmp_path / "notes.db": "is not a SQLite database"}
    for path, says in cases.items():
        before = path.read_bytes()
        commands = [["models"], ["evaluate", table, "--model", "kern"]]
        if path != tmp_path / "empty.db":  # an empty file is a new SQLite database: calibrate may start a store there
            commands.append(["calibrate", table, "--name", "kern", "--no-lodo", "-q"])
        for args in commands:
            rc, _, err = cli([*args, "--tracking-uri", path])
            assert rc == 2 and says in err and len(err.strip().splitlines()) == 1, (path, args, err)
        assert path.read_bytes() == before, path
        assert not path.with_name(path.name + "-journal").exists()


# ------------------------------------------------------------------------------ outputs
def test_outputs_get_the_permissions_of_an_ordinary_write(tmp_path):
    from hybrid.atomic import atomic_directory, write_text

    old = os.umask(0o027)
    try:
        f = write_text(tmp_path / "a.txt", "x")
        with atomic_directory(tmp_path / "d") as d:
            (d / "x").write_text("1")
    finally:
        os.umask(old)
    assert f.stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o750


def test_chrome_trace_honours_the_umask(tmp_path):
    """The simulate --trace writer (engine/trace.py) used mkstemp's 0600."""
    rc, _, err = cli(["simulate", CONFIG, "--trace", tmp_path / "t.json"])
    assert rc == 0, err
    assert (tmp_path / "t.json").stat().st_mode & 0o777 == 0o666 & ~_umask()
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_unwritable_output_names_the_users_path(tmp_path, shared_datasets):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = blocker / "out.csv"
    rc, _, err = cli(["data", "import", "xla-matmul", shared_datasets / "xla/matmul_sm90_H100.csv", "-o", out])
    # refused before the import (hybrid.atomic.check_creatable, as profile / shard / campaign outputs): the parent named
    assert rc == 2 and err.strip() == f"error: cannot write output {out}: {blocker} is a file, not a directory"
    rc, _, err = cli(["data", "pull", "xla-matmul", "--from", shared_datasets, "-o", blocker / "mirror"])
    assert rc == 2 and err.strip() == (f"error: cannot write output {blocker / 'mirror'}: a parent is a file, "
                                       "not a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_sigterm_removes_the_temporary_file(tmp_path):
    """SIGTERM in the middle of a write: the temporary goes away as on Ctrl-C, exit 143."""
    script = f"""
import os, signal, sys, time
import click
from hybrid.atomic import atomic_file
from hybrid.cli.main import cli, main

@cli.command("slow-write")
def slow_write():
    with atomic_file({str(tmp_path / 'out.csv')!r}) as tmp:
        tmp.write_text("half")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)

sys.exit(main(["slow-write"]))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "terminated"
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------ sizes, extras, progress
def test_shard_refuses_a_search_that_cannot_fit_in_memory():
    t0 = time.monotonic()
    rc, out, err = cli(["shard", CONFIG, "--gpus", "100000"])
    assert time.monotonic() - t0 < 10
    assert rc == 2 and "--gpus 100000: the plan search would need about" in err and "GiB" in err
    assert "--strategy size_greedy,lookup_greedy,size_lookup_greedy,random" in err


def test_shard_search_size_error_names_the_configs_gpus_when_no_option_gave_them(tmp_path):
    """A config of 100000 GPUs run without --gpus was refused as '--gpus 100000: ...', an option never given."""
    import yaml

    doc = yaml.safe_load(open(CONFIG))
    doc.pop("plan", None)
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump({**doc, "gpus": 100000}))
    rc, out, err = cli(["shard", str(path)])
    assert rc == 2 and "100000 ranks (the config's gpus): the plan search would need about" in err, err
    assert "--gpus 100000" not in err and "use fewer --gpus" not in err


def test_search_size_estimate():
    from hybrid.sharding.search import check_search_size, estimate_search_bytes

    assert estimate_search_bytes(8192, []) > 3.5 * estimate_search_bytes(4096, [])  # quadratic in ranks
    assert estimate_search_bytes(4096, ["size_greedy"]) < 2.5 * estimate_search_bytes(2048, ["size_greedy"])
    assert check_search_size(8, [], available=2.0**30) > 0
    assert check_search_size(8, [], available=None) > 0
    from hybrid.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="use fewer --gpus"):
        check_search_size(10**6, ["size_greedy"], available=2.0**30, cli=True)


def test_shard_shows_what_it_is_doing(monkeypatch):
    rc, out, err = cli(["shard", CONFIG, "--strategy", "size_greedy"])
    assert rc == 0 and "searching sharding plans for 8 ranks (size_greedy" in err


def test_bench_without_torch_names_the_extra(monkeypatch):
    from hybrid.data.profiler import backend

    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(backend, "_import_module", missing)
    for args in (["bench", "dlrm", CONFIG], ["bench", "campaign", "/nonexistent/out"]):
        rc, out, err = cli(args)
        assert rc == 2 and "pip install 'hybrid-perf[profile]'" in err and len(err.strip().splitlines()) == 1
        assert f"`hybrid bench {args[1]}` needs PyTorch" in err  # the one helper, naming the command


def test_bench_validate_says_what_it_is_doing(tmp_path):
    """A missing table is refused before any fit (no progress line); a real campaign shows both stages."""
    rc, out, err = cli(["bench", "validate", tmp_path / "missing.csv", "--roofline"])
    assert rc == 2 and "results table not found" in err and "[1/2]" not in err
    runs = Path(__file__).resolve().parents[1] / "datasets" / "dlrm-h100-1gpu"
    table = pd.read_csv(runs / "results.csv")
    table[table["config_name"] == "c000"].to_csv(tmp_path / "results.csv", index=False)
    shutil.copytree(runs / "plans" / "c000", tmp_path / "plans" / "c000")
    (tmp_path / "configs").mkdir()
    shutil.copy(runs / "configs" / "c000.yaml", tmp_path / "configs" / "c000.yaml")
    rc, out, err = cli(["bench", "validate", tmp_path / "results.csv", "--roofline", "--system", "H100-SXM"])
    assert "[1/2] building the roofline predictor" in err and "[2/2] predicting every (config, plan)" in err
    assert rc == 0 and "(config, plan) pairs" in out


def test_quickstart_refuses_a_data_dir_without_public_data(tmp_path, monkeypatch, capsys, catalog):
    """`quickstart --data-dir ../shared` (one level above the mirror) skipped every public source with a note and
    calibrated on the project's bundles alone, minutes later, as if that was asked for: refused up front now, nothing
    recorded. The skip notes (a default directory missing one source) start their own line instead of being glued
    to the end of the drawn progress bar."""
    import re

    from hybrid.cli.quickstart import import_public_subset

    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    above = tmp_path / "shared"
    (above / "datasets" / "neusight" / "test-dev").mkdir(parents=True)
    rc, out, err = cli(["quickstart", "--data-dir", above])
    assert rc == 2 and not out and err.startswith(f"error: --data-dir {above} holds none of the public data"), err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "home").exists()

    table, used = import_public_subset(above, catalog, progress=True)
    err = capsys.readouterr().err
    notes = [line for line in re.split(r"[\r\n]", err) if "note:" in line]
    assert len(table) == 0 and not used and len(notes) == 4, err
    assert all(line.startswith("note: ") for line in notes), notes


def test_quickstart_says_how_many_devices_leave_one_out_covers(shared_datasets, catalog):
    from hybrid.cli.quickstart import QUICKSTART_LODO_DEVICES, lodo_coverage
    from hybrid.data.importers import import_paths
    from hybrid.tracking.calibrate import CalibrationConfig
    from hybrid.tracking.inputs import Measurements

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = import_paths("neusight", [shared_datasets / "neusight/test-dev/softmax.csv"], catalog=catalog)
    n = table["device"].nunique()
    assert n > QUICKSTART_LODO_DEVICES
    note = lodo_coverage(Measurements(table, catalog, []),
                         CalibrationConfig(name="q", max_lodo_devices=QUICKSTART_LODO_DEVICES))
    assert f"covers {QUICKSTART_LODO_DEVICES} of {n} devices" in note
    assert lodo_coverage(Measurements(table, catalog, []), CalibrationConfig(name="q")).startswith(
        f"leave-one-device-out covers all {n} devices")


def test_quickstart_holds_out_gpus_whose_die_the_data_does_not_share(shared_datasets, catalog):
    """The devices with the most rows of quickstart's data are the H100 and H200 profiles, each the other's sibling:
    held out alone, they calibrated the interval of GPUs never measured on siblings (33% of DeepBench's
    never-measured GPUs' rows covered). Quickstart also holds out the two GPUs with the most kernel rows whose die
    no other device of the data shares; the A100 PCIe pair (siblings) and collective-only devices are not such."""
    from hybrid.cli.quickstart import (
        QUICKSTART_LODO_DEVICES,
        QUICKSTART_UNSEEN_DEVICES,
        import_public_subset,
        project_bundles,
        quickstart_holdouts,
    )
    from hybrid.corrections.intervals import SIBLING_MAX_TDP_RATIO
    from hybrid.tracking.calibrate import CalibrationConfig
    from hybrid.tracking.inputs import load_measurements

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = load_measurements(project_bundles())
        public, _ = import_public_subset(shared_datasets, data.catalog, progress=False)
    data.table = pd.concat([data.table, public], ignore_index=True, sort=False)
    config = CalibrationConfig(name="q", max_lodo_devices=QUICKSTART_LODO_DEVICES)
    held = quickstart_holdouts(data, config)
    assert held[:2] == ["H100-SXM", "H200"]  # the default choice comes first, unchanged
    extra = held[2:]
    assert len(extra) == QUICKSTART_UNSEEN_DEVICES
    present = set(data.table["device"].astype(str))
    for d in extra:
        assert data.catalog.device(d).kind == "gpu"
        assert not set(data.catalog.same_die(d, SIBLING_MAX_TDP_RATIO)) & (present - {d}), d
    assert not {"A100-PCIE-40GB", "A100-PCIE-80GB", "A100-SXM4-40GB"} & set(extra)
    # data whose largest devices already include such GPUs needs none added
    neusight = data.table[data.table["device"].isin(["T4", "P100-PCIE-16GB", "P4"])].reset_index(drop=True)
    data.table = neusight
    assert len(quickstart_holdouts(data, config)) == QUICKSTART_LODO_DEVICES


def test_quickstart_keeps_the_h100_matmul_table_whole_beside_the_sampled_subset(shared_datasets, catalog):
    """The public subset is sub-sampled evenly over device/op groups; XLA's H100 matmul table, the only public
    timing of large 16-bit Hopper GEMMs, joins whole (sub-sampled to a few dozen rows the profiles' misaligned
    eager GEMMs set the H100's level)."""
    from hybrid.cli.quickstart import PUBLIC_MAX_ROWS, import_public_subset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table, used = import_public_subset(shared_datasets, catalog, progress=False)
    xla = table["framework"].astype(str).str.lower() == "xla"
    n_xla = sum(1 for _ in open(shared_datasets / "xla" / "matmul_sm90_H100.csv")) - 1
    assert int(xla.sum()) == n_xla > 1000
    assert 0 < int((~xla).sum()) <= PUBLIC_MAX_ROWS
    assert any("XLA matmuls" in u and "(all kept)" in u for u in used)


def test_predict_model_roofline_is_the_analytical_baseline():
    """``--model roofline`` names the analytical baseline (calibrate reserves the name), not a registered model
    'models:/roofline/0' without an interval."""
    args = ["predict", "gemm", "-d", "H100", "-m", "64", "-n", "64", "-k", "64", "--json"]
    rc, out, err = cli([*args, "--model", "roofline"])
    assert rc == 0 and json.loads(out)["model"] == "roofline" and err == ""
    assert json.loads(out) == json.loads(cli(args)[1])


def test_https_uri_of_a_plain_http_server_fails_fast_and_tls_servers_pass(tmp_path):
    """https:// to a plain-HTTP server spent MLflow's retries (~40 s) before a paragraph about SSL; the probe now
    completes a TLS handshake first. A real TLS listener (self-signed: certificates are MLflow's to check) passes
    the probe, silent or plain ones fail in one line."""
    import http.server
    import shutil
    import ssl
    import subprocess
    import threading

    from hybrid.tracking.store import TrackingError, probe_server

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    web = http.server.HTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        t0 = time.monotonic()
        with pytest.raises(TrackingError, match="does not answer TLS .*plain http:// server"):
            probe_server(f"https://127.0.0.1:{web.server_address[1]}", timeout_s=2)
        assert time.monotonic() - t0 < 5
    finally:
        web.shutdown()
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a test certificate")
    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
    tls = http.server.HTTPServer(("127.0.0.1", 0), Quiet)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
    threading.Thread(target=tls.serve_forever, daemon=True).start()
    try:
        probe_server(f"https://127.0.0.1:{tls.server_address[1]}", timeout_s=5)  # no error
    finally:
        tls.shutdown()
