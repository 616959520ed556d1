"""A calibration that fails, is interrupted or loses its tracking server never leaves its run RUNNING without saying
so: FAILED / KILLED where the store can be told (a real ``mlflow server``, a local SQLite store), a ``warning:``
line naming the run where it cannot."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_mlflow_server import cli, running_mlflow_server, stop_server
from test_tracking_support import REPO, neusight_table, write_csv

import hybrid.tracking.calibrate as calibrate_module


def _statuses(client) -> dict[str, str]:
    """run name -> status of every run of the default experiment."""
    from hybrid.tracking.store import DEFAULT_EXPERIMENT

    exp = client.get_experiment_by_name(DEFAULT_EXPERIMENT)
    return {r.info.run_name: r.info.status for r in client.search_runs([exp.experiment_id])}


def test_failed_and_interrupted_runs_are_ended_on_the_server(tmp_path, shared_datasets, monkeypatch):
    """A crash mid-calibration (after the fits, before anything is recorded) ends the server's run FAILED; Ctrl-C at
    the same point ends it KILLED (exit 130); neither says the run stayed RUNNING."""
    from mlflow import MlflowClient

    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    csv = write_csv(neusight_table(shared_datasets, max_rows=200, files=("bmm.csv", "softmax.csv")), tmp_path / "t.csv")
    with running_mlflow_server(tmp_path) as (url, _):
        for name, exc, code in (("crash", RuntimeError("disk on fire"), 1), ("interrupt", KeyboardInterrupt(), 130)):
            def fail(*args, exc=exc, **kwargs):
                raise exc

            with monkeypatch.context() as m:
                m.setattr(calibrate_module, "split_summaries", fail)
                rc, _, err = cli(["calibrate", str(csv), "--name", name, "--no-lodo", "-q", "--tracking-uri", url])
            assert rc == code, err
            assert "stays RUNNING" not in err
        assert _statuses(MlflowClient(url)) == {"calibrate-crash": "FAILED", "calibrate-interrupt": "KILLED"}


def _calibrate_losing_the_server_after(tmp_path, shared_datasets, monkeypatch, step: str) -> tuple[int, str, str]:
    """``hybrid calibrate`` against a real ``mlflow server`` that is stopped as soon as the calibration's ``step``
    (a function of :mod:`hybrid.tracking.calibrate`) returns: (exit code, stderr, the server's URL)."""
    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    # a dead server is retried like a restarting one: no MLflow-level retries and short waits keep the test short
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setattr("hybrid.tracking.store.RETRY_MAX_DELAY_S", 0.01)
    csv = write_csv(neusight_table(shared_datasets, max_rows=200, files=("bmm.csv", "softmax.csv")), tmp_path / "t.csv")
    original = getattr(calibrate_module, step)
    with running_mlflow_server(tmp_path) as (url, proc):
        def then_lose_server(*args, **kwargs):
            out = original(*args, **kwargs)
            stop_server(proc)
            return out

        monkeypatch.setattr(calibrate_module, step, then_lose_server)
        rc, _, err = cli(["calibrate", str(csv), "--name", "lost", "--no-lodo", "-q", "--tracking-uri", url])
    return rc, err, url


def test_a_server_gone_mid_run_is_said_not_silent(tmp_path, shared_datasets, monkeypatch):
    """The server dies after the fits: recording fails, the run cannot be marked FAILED; the CLI says which run stays
    RUNNING where, before its error line, and the server's store indeed holds it RUNNING."""
    rc, err, url = _calibrate_losing_the_server_after(tmp_path, shared_datasets, monkeypatch, "_fit_run")
    assert rc == 2, err
    lines = err.strip().splitlines()
    warning = re.search(rf"^warning: run (\w+) stays RUNNING in {re.escape(url)}: it could not be marked FAILED",
                        lines[0])
    assert warning, err
    assert lines[-1].startswith("error: tracking store:"), err
    with sqlite3.connect(tmp_path / "server.db") as db:
        rows = db.execute("select run_uuid, status from runs").fetchall()
    assert rows == [(warning.group(1), "RUNNING")]


@pytest.mark.parametrize("entry", ["cli", "library"])
def test_sigterm_mid_calibration_ends_the_run_killed(entry, tmp_path, shared_datasets):
    """SIGTERM while the fits run (a job scheduler's kill, ``timeout``): the run ends KILLED in the local store, from
    the CLI (exit 143) and from the library's ``calibrate`` in a process that left SIGTERM at its default (which
    would otherwise die on the spot)."""
    from mlflow import MlflowClient

    csv = write_csv(neusight_table(shared_datasets, max_rows=1500), tmp_path / "t.csv")
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(HYBRID_HOME=str(home), PYTHONPATH=str(REPO))
    if entry == "cli":
        cmd = [sys.executable, "-m", "hybrid.cli.main", "calibrate", str(csv), "--name", "term", "-q"]
    else:
        cmd = [sys.executable, "-c", "import sys; from hybrid.tracking.calibrate import CalibrationConfig, calibrate; "
               "from hybrid.tracking.inputs import load_measurements; "
               f"calibrate(load_measurements([{str(csv)!r}]), CalibrationConfig(name='term'))"]
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    db = home / "mlflow.db"
    deadline = time.monotonic() + 120
    try:
        while True:  # until the run exists (then the fits are under way: they take far longer than this poll)
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no run started"
            try:
                with sqlite3.connect(db) as conn:
                    if conn.execute("select count(*) from runs where status = 'RUNNING'").fetchone()[0]:
                        break
            except sqlite3.Error:  # not created yet
                pass
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    if entry == "cli":
        assert proc.returncode == 143 and "terminated" in err, err
    else:
        assert proc.returncode != 0 and "KeyboardInterrupt" in err, err
    assert _statuses(MlflowClient(f"sqlite:///{Path(db)}")) == {"calibrate-term": "KILLED"}


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_sigterm_whose_interrupt_a_finaliser_swallows_is_not_lost():
    """A signal handler's exception raised inside a finaliser is printed and dropped ("Exception ignored in ..."):
    SQLAlchemy's weakref callback swallowed the SIGTERM of a calibration, which then finished and registered its
    model. The handler records the signal; the calibration's checkpoints and the block's end raise it."""
    if signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        pytest.skip("SIGTERM already handled in this process")

    class Finalised:
        def __del__(self) -> None:  # the signal arrives while a finaliser runs: its handler runs in this frame
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)

    with calibrate_module._sigterm_interrupts() as interrupted:
        Finalised()  # collected at once: its interrupt is raised in __del__, and swallowed there
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            interrupted()
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):  # unchecked: leaving the block raises it
        with calibrate_module._sigterm_interrupts():
            Finalised()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    with calibrate_module._sigterm_interrupts() as interrupted:  # no signal: nothing raised
        interrupted()


def test_a_store_killed_while_its_schema_is_created_is_absent_not_broken(tmp_path, shared_datasets):
    """The first command of a new local store creates MLflow's schema (dozens of migrations, a second or two). Killed
    in the middle (Ctrl-C, SIGKILL, a full disk), it left a half-migrated mlflow.db on which every later command,
    `hybrid models` included, failed with MLflow's multi-line `OperationalError: table ... already exists`. The
    schema is now built beside the store and moved into place whole: killed at any moment, the store is absent
    (`no tracking store`), and the next calibration creates it."""
    csv = write_csv(neusight_table(shared_datasets, max_rows=60, files=("softmax.csv",)), tmp_path / "t.csv")
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(HYBRID_HOME=str(home), PYTHONPATH=str(REPO))

    def hybrid(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "hybrid.cli.main", *args], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=300)

    proc = subprocess.Popen([sys.executable, "-m", "hybrid.cli.main", "calibrate", str(csv), "--name", "m",
                             "--no-lodo", "-q"], env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    try:
        # the moment the schema's first tables are committed to the database, wherever it is built
        while not any(p.stat().st_size for p in (home.glob("*mlflow.db*") if home.is_dir() else ())
                      if p.is_file() and not p.name.endswith((".lock", "-journal", "-wal", "-shm"))):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no store was created"
            time.sleep(0.002)
        proc.kill()
    finally:
        proc.kill()
        proc.communicate()
    out = hybrid("models")
    assert out.returncode == 2 and out.stderr.startswith("error: no tracking store at"), out.stderr
    out = hybrid("calibrate", str(csv), "--name", "m", "--no-lodo", "-q")
    assert out.returncode == 0, out.stderr
    out = hybrid("models")
    assert out.returncode == 0 and out.stdout.startswith("name"), out.stdout + out.stderr


def test_a_failure_after_registration_takes_the_version_back(tmp_path, shared_datasets, monkeypatch):
    """The report fails to render after the model was registered: the run ended FAILED but its version stayed in the
    registry, listed by `hybrid models` and loaded by `--model NAME` as if the calibration had succeeded (its run
    without the training rows evaluate checks against, nor the report). The version is now deleted with the run
    marked FAILED, and the registered model it created with it; nothing says a run stayed RUNNING."""
    import hybrid.reports.html as html

    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    csv = write_csv(neusight_table(shared_datasets, max_rows=200, files=("bmm.csv", "softmax.csv")), tmp_path / "t.csv")

    def broken_report(*args, **kwargs):
        raise RuntimeError("no room for the report")

    with monkeypatch.context() as m:
        m.setattr(html, "render_report", broken_report)
        rc, _, err = cli(["calibrate", str(csv), "--name", "half", "--no-lodo", "-q"])
    assert rc == 1 and "no room for the report" in err, err
    assert "stays RUNNING" not in err and "stays in the registry" not in err, err
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'home' / 'mlflow.db'}")
    assert _statuses(client) == {"calibrate-half": "FAILED"}
    rc, out, err = cli(["models", "--json"])
    assert rc == 0, err
    import json

    assert [m["name"] for m in json.loads(out)["models"]] == []
    rc, _, err = cli(["evaluate", str(csv), "--model", "half"])
    assert rc != 0 and "no registered model named 'half'" in err, err


@pytest.mark.parametrize("where", ["local", "server"])
def test_an_interrupted_first_calibration_leaves_no_empty_model(where, tmp_path, shared_datasets, monkeypatch):
    """Ctrl-C while the first calibration of a new name was recording its run (after the registration) deleted the
    version but left the registered model it had created: `hybrid models` listed NAME with no version and no run,
    and `--model NAME` said it was registered. The name is now taken back with its version, locally and on a real
    server; a name that had a version before keeps it, and its registered model."""
    import json

    from mlflow import MlflowClient

    import hybrid.reports.html as html

    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    csv = write_csv(neusight_table(shared_datasets, max_rows=200, files=("bmm.csv", "softmax.csv")), tmp_path / "t.csv")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    def check(uri: list[str]) -> None:
        rc, out, err = cli(["calibrate", str(csv), "--name", "kept", "--no-lodo", "-q", *uri])
        assert rc == 0, err
        with monkeypatch.context() as m:
            m.setattr(html, "render_report", interrupted)
            for name in ("fresh", "kept"):
                rc, _, err = cli(["calibrate", str(csv), "--name", name, "--no-lodo", "-q", *uri])
                assert rc == 130 and "stays" not in err, err
        rc, out, err = cli(["models", "--json", *uri])
        assert rc == 0, err
        assert {m["name"]: [v["version"] for v in m["versions"]] for m in json.loads(out)["models"]} == {"kept": [1]}
        rc, _, err = cli(["evaluate", str(csv), "--model", "fresh", *uri])
        assert rc == 2 and "no registered model named 'fresh'" in err, err
        client = MlflowClient(uri[1] if uri else f"sqlite:///{tmp_path / 'home' / 'mlflow.db'}")
        exp = client.get_experiment_by_name("hybrid-calibration")
        assert sorted((r.info.run_name, r.info.status) for r in client.search_runs([exp.experiment_id])) == [
            ("calibrate-fresh", "KILLED"), ("calibrate-kept", "FINISHED"), ("calibrate-kept", "KILLED")]

    if where == "local":
        check([])
    else:
        with running_mlflow_server(tmp_path) as (url, _):
            check(["--tracking-uri", url])


def test_a_server_gone_after_registration_names_the_version_left(tmp_path, shared_datasets, monkeypatch):
    """The server dies right after the model version was registered: the run stays RUNNING and the version stays
    in the registry, neither of which can be helped; the warning used to name the run only, so the version (which
    `--model NAME` then loads once the server is back) looked usable. It now names the version and how to delete it,
    and does not wait for the dead server a second time to say so."""
    rc, err, url = _calibrate_losing_the_server_after(tmp_path, shared_datasets, monkeypatch, "register_version")
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert re.match(rf"^warning: run \w+ stays RUNNING in {re.escape(url)}: it could not be marked FAILED there; "
                    rf"models:/lost/1, registered from it before the failure, stays in the registry and is "
                    rf"incomplete: delete it with `MlflowClient\('{re.escape(url)}'\)\.delete_model_version\('lost', "
                    r"'1'\)`", lines[0]), err
    assert lines[-1].startswith("error: tracking store:"), err
    with sqlite3.connect(tmp_path / "server.db") as db:
        assert [r[0] for r in db.execute("select status from runs")] == ["RUNNING"]
        assert db.execute("select name, version from model_versions").fetchall() == [("lost", 1)]


def test_a_version_whose_run_did_not_finish_is_not_listed_as_usable(tmp_path, shared_datasets, monkeypatch):
    """A version a failed calibration could not take back (its server was gone: the case above) was listed by
    `hybrid models` and loaded by `--model NAME` like any other once the store was back. `hybrid models` now shows
    each latest version's run status and a `warning:` line per version whose run did not finish, and loading such
    a version says so; a finished run's version says nothing."""
    import json

    from mlflow import MlflowClient

    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    csv = write_csv(neusight_table(shared_datasets, max_rows=200, files=("bmm.csv", "softmax.csv")), tmp_path / "t.csv")
    rc, out, err = cli(["calibrate", str(csv), "--name", "done", "--no-lodo", "-q", "--json"])
    assert rc == 0, err
    run_id = json.loads(out)["run_id"]
    predict = ["predict", "gemm", "-d", "V100", "-m", "256", "-n", "256", "-k", "4096", "--dtype", "fp32", "--model",
               "done"]
    rc, out, err = cli(["models"])
    assert rc == 0 and not err and "FINISHED" in next(r for r in out.splitlines() if r.startswith("done ")), out
    rc, _, err = cli(predict)
    assert rc == 0 and "not FINISHED" not in err, err

    MlflowClient(f"sqlite:///{tmp_path / 'home' / 'mlflow.db'}").update_run(run_id, "RUNNING")  # as the lost server left it
    note = f"warning: models:/done/1 comes from run {run_id}, which is RUNNING, not FINISHED: its calibration did not"
    rc, out, err = cli(["models"])
    assert rc == 0 and "RUNNING" in next(r for r in out.splitlines() if r.startswith("done ")), out
    assert err.startswith(note), err
    rc, out, err = cli(["models", "--json"])
    assert rc == 0 and json.loads(out)["models"][0]["versions"][0]["run_status"] == "RUNNING"
    rc, _, err = cli(predict)
    assert rc == 0 and note in err, err


def test_an_experiment_name_keeps_its_artifacts_inside_the_store(tmp_path, monkeypatch):
    """The experiment's name went into its artifact location as it was: `--experiment ../../escaped` wrote every run's
    model, predictions and report two folders above the store's `artifacts/`, and `a #1` and `a #2` both wrote to
    `artifacts/a ` (a file URI ends at '#'). Each experiment now gets its own folder inside `artifacts/`, and its
    models load as before."""
    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "store" / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    csv = tmp_path / "t.csv"
    csv.write_text("device,op,dtype,m,n,k,time_us\nT4,gemm,fp32,64,64,64,10\nT4,gemm,fp32,512,512,512,90\n"
                   "T4,gemm,fp32,1024,1024,1024,400\n")
    names = ["../../escaped", "a #1", "a #2", "hybrid-calibration"]
    for i, experiment in enumerate(names, 1):
        rc, _, err = cli(["calibrate", str(csv), "--name", "m", "--experiment", experiment, "--no-lodo", "-q"])
        assert rc == 0, err
        rc, _, err = cli(["evaluate", str(csv), "--model", f"m/{i}"])
        assert rc == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store", "t.csv"]
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["home"]
    artifacts = tmp_path / "store" / "home" / "artifacts"
    assert len(list(artifacts.iterdir())) == 4 and (artifacts / "hybrid-calibration").is_dir()


def _half_migrated_store(db: Path) -> None:
    """A store as a kill in the middle of MLflow's in-place schema creation (before hybrid built it aside) left it:
    the tables of a migration created, the version table not yet moved past it."""
    import sqlalchemy
    from alembic import command
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import InitialBase, _get_alembic_config

    url = f"sqlite:///{db}"
    engine = sqlalchemy.create_engine(url)
    InitialBase.metadata.create_all(engine)
    cfg = _get_alembic_config(url)
    revs = list(reversed(list(ScriptDirectory.from_config(cfg).walk_revisions())))
    import inspect

    target = next(r for r in revs[4:] if "create_table" in inspect.getsource(r.module))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, target.revision)
    engine.dispose()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (target.down_revision,))
        conn.commit()


def test_a_half_migrated_store_left_by_older_versions_is_one_clear_error(tmp_path):
    """A half-migrated store left by a version that created the schema in place (killed in the middle) failed every
    command with MLflow's multi-line `OperationalError: table ... already exists` and its SQL. Now one line names
    the file, what is wrong with it and what to do; the file is left as it was."""
    from hybrid.tracking.store import TrackingError, open_store

    db = tmp_path / "mlflow.db"
    _half_migrated_store(db)
    before = db.read_bytes()
    for create in (False, True):
        with pytest.raises(TrackingError) as info:
            open_store(f"sqlite:///{db}").client(create=create)
        msg = str(info.value)
        assert "\n" not in msg and str(db) in msg and "half-migrated" in msg and "already exists" in msg, msg
        assert "move it aside" in msg, msg
    assert db.read_bytes() == before
