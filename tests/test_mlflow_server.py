"""The whole flow against a real ``mlflow server`` process (SQLite backend, local artifact root, both in
tmp_path): two concurrent calibrations -> registry versions -> evaluate / predict --model -> report."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from cli_run import run_cli as cli
from test_tracking_support import concurrent_calibrations, neusight_table, write_csv

#: Longest wait for the server to answer /health (first start creates the schema).
STARTUP_TIMEOUT_S = 90


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def running_mlflow_server(tmp_path):
    """A real ``mlflow server`` (SQLite store ``tmp_path/server.db``, artifacts in ``tmp_path/server-artifacts``):
    yields (url, process); stopped on exit (already stopped is fine)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
         "--artifacts-destination", str(tmp_path / "server-artifacts")],
        stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True,
        # no background job workers (a dozen extra processes this test does not need)
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not _healthy(url):
            if proc.poll() is not None:
                pytest.fail(f"mlflow server exited early:\n{(tmp_path / 'server.log').read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"mlflow server not healthy after {STARTUP_TIMEOUT_S}s")
            time.sleep(0.5)
        yield url, proc
    finally:
        stop_server(proc)
        log.close()


def stop_server(proc: subprocess.Popen) -> None:
    """Stop the server started by :func:`running_mlflow_server` (its whole process group) and wait for it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)


@pytest.fixture
def mlflow_server(tmp_path):
    with running_mlflow_server(tmp_path) as (url, _):
        yield url




@pytest.mark.slow
def test_full_flow_against_mlflow_server(mlflow_server, tmp_path, shared_datasets, monkeypatch):
    url = mlflow_server
    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))  # must stay unused: everything goes to the server
    csv = write_csv(neusight_table(shared_datasets, max_rows=200, files=("bmm.csv", "softmax.csv")),
                    tmp_path / "t.csv")
    env = {**os.environ, "MLFLOW_TRACKING_URI": url}
    results = concurrent_calibrations(csv, "srv", env)
    assert sorted(r["version"] for r in results) == [1, 2]
    assert all(r["tracking_uri"] == url for r in results)

    # MLFLOW_TRACKING_URI is honoured by every command
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    rc, out, err = cli(["evaluate", str(csv), "--model", "srv", "--json"])
    assert rc == 0, err
    res = json.loads(out)
    assert set(res) == {"n_rows", "geomean_pct", "mape_pct", "median_pct", "p90_pct", "by_op", "by_device",
                        "by_method", "rows_in_training_data", "coverage_pct", "rows_without_interval",
                        "rows_interval_borrowed", "coverage_by_band"}
    assert res["n_rows"] == 200 and set(res["by_op"]) == {"gemm", "softmax"}
    assert res["rows_in_training_data"] == 200  # the server run's recorded training rows were read back

    rc, out, err = cli(["predict", "gemm", "-d", "V100", "-m", "256", "-n", "256", "-k", "4096", "--dtype", "fp32",
                        "--model", "models:/srv/1", "--json"])
    assert rc == 0, err
    pred = json.loads(out)
    assert pred["model"] == "models:/srv/1" and pred["method"] == "kernel-xgb" and pred["roofline_us"] > 0

    report = tmp_path / "report.html"
    rc, out, err = cli(["report", "--model", "srv", "-o", str(report), "--tracking-uri", url])
    assert rc == 0, err
    assert "data:image/png;base64," in report.read_text()
    assert not (tmp_path / "home").exists()
    # artifacts went through the server into its artifact root
    assert list((tmp_path / "server-artifacts").rglob("MLmodel"))
