"""Shared helpers of the tracking/calibration tests: small real measurement tables and an isolated store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd

from hybrid.data.schema import write_table
from hybrid.tracking.inputs import subsample

REPO = Path(__file__).resolve().parents[1]


def neusight_table(shared: Path, max_rows: int = 700, files: tuple[str, ...] = ("bmm.csv", "ln.csv", "softmax.csv"),
                   seed: int = 0) -> pd.DataFrame:
    """A real, sub-sampled canonical table of NeuSight kernels (several GPUs)."""
    from hybrid.data.importers.neusight import import_neusight

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = import_neusight([shared / "neusight" / "test-dev" / f for f in files])
    return subsample(table, max_rows, seed)


def write_csv(table: pd.DataFrame, path: Path) -> Path:
    return write_table(table, path)


def run_cli(args: list[str], env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``hybrid ARGS`` in a fresh interpreter (the real entry point, as a user would)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "hybrid.cli.main", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=REPO)


def concurrent_calibrations(csv: Path, name: str, env: dict[str, str], extra: tuple[str, ...] = (),
                            seeds: tuple[int, ...] = (0, 1), timeout: float = 480) -> list[dict]:
    """Start one ``hybrid calibrate`` process per seed at the same time; wait for all, return their JSON
    results (each must succeed). Processes still running at the timeout are killed."""
    procs = [subprocess.Popen([sys.executable, "-m", "hybrid.cli.main", "calibrate", str(csv), "--name", name,
                               *extra, "--no-lodo", "--seed", str(seed), "--json", "-q"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
             for seed in seeds]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            assert p.returncode == 0, err
            results.append(last_json(out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return results


def last_json(text: str) -> dict:
    """The JSON object a ``--json`` command printed (the last top-level object in ``text``)."""
    start = text.index("{")
    return json.loads(text[start:])


# ----------------------------------------------------------------------------------------- unit tests
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from hybrid.errors import InvalidInputError  # noqa: E402
from hybrid.tracking.inputs import table_digest  # noqa: E402
from hybrid.tracking.registry import ModelRef, parse_model_ref  # noqa: E402
from hybrid.tracking.store import (  # noqa: E402
    artifact_root_for,
    hybrid_home,
    is_transient,
    open_store,
    resolve_tracking_uri,
    retry,
    sqlite_path,
)


def test_tracking_uri_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    default = resolve_tracking_uri()
    assert default == f"sqlite:///{(tmp_path / 'home' / 'mlflow.db').resolve()}"
    assert sqlite_path(default) == (tmp_path / "home" / "mlflow.db").resolve()
    assert artifact_root_for(default) == (tmp_path / "home" / "artifacts").resolve().as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert resolve_tracking_uri() == "http://127.0.0.1:5999"
    assert open_store().db_path is None and open_store().artifact_root is None
    assert resolve_tracking_uri("sqlite:////x/y.db") == "sqlite:////x/y.db"
    # a bare path to a .db file is shorthand for sqlite
    assert resolve_tracking_uri(str(tmp_path / "s.db")) == f"sqlite:///{(tmp_path / 's.db').resolve()}"
    # an explicit empty URI (`--tracking-uri "$UNSET"`) is an error, not the default store or $MLFLOW_TRACKING_URI
    with pytest.raises(InvalidInputError, match="empty tracking URI"):
        resolve_tracking_uri("")
    with pytest.raises(InvalidInputError, match="empty tracking URI"):
        resolve_tracking_uri("  ")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")  # an empty variable is unset
    assert resolve_tracking_uri() == default
    # a blank variable reaches a CLI command as its --tracking-uri (click's envvar): the message names the variable
    monkeypatch.setenv("MLFLOW_TRACKING_URI", " ")
    with pytest.raises(InvalidInputError, match=r"\$MLFLOW_TRACKING_URI is ' '"):
        resolve_tracking_uri(" ")
    from hybrid.cli.main import main as cli_main

    assert cli_main(["models"]) == 2


def test_a_bare_path_that_is_not_a_db_file_is_a_clear_error(tmp_path, monkeypatch):
    """A directory (the HYBRID_HOME folder, MLflow's ./mlruns) given as --tracking-uri is one line naming what a
    store is, and the store's file where the directory holds one; not MLflow's paragraph on its file store's
    maintenance mode. MLFLOW_ALLOW_FILE_STORE (MLflow's own opt-in) passes it on as before."""
    from hybrid.cli.main import main
    from hybrid.errors import InvalidInputError

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(InvalidInputError, match=r"neither a SQLite file .* nor a server") as exc:
        resolve_tracking_uri(str(tmp_path / "mlruns"))
    assert "exists" not in str(exc.value)
    home = tmp_path / "home"
    open_store(f"sqlite:///{home / 'mlflow.db'}").client()  # a real (empty) store in the folder
    with pytest.raises(InvalidInputError, match=f"{home / 'mlflow.db'} exists: pass that file"):
        resolve_tracking_uri(str(home))
    assert main(["models", "--tracking-uri", str(home)]) == 2
    assert main(["models", "--tracking-uri", str(home / "mlflow.db")]) == 0
    assert resolve_tracking_uri("databricks") == "databricks"
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert resolve_tracking_uri(str(home)) == str(home)


def test_a_file_uri_is_the_file_store_and_refused_without_creating_it(tmp_path, monkeypatch, capsys):
    """file:///folder is the file store in URI form: `hybrid models` (read-only) created the folder and then
    printed MLflow's maintenance-mode paragraph. Now one line, nothing created; MLFLOW_ALLOW_FILE_STORE passes."""
    from hybrid.cli.main import main
    from hybrid.errors import InvalidInputError

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    folder = tmp_path / "nowhere" / "mlruns"
    assert main(["models", "--tracking-uri", folder.as_uri()]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "file store" in err[0] and "maintenance" not in err[0]
    assert not (tmp_path / "nowhere").exists()
    home = tmp_path / "home"
    open_store(f"sqlite:///{home / 'mlflow.db'}").client()
    with pytest.raises(InvalidInputError, match=f"pass sqlite:///{home / 'mlflow.db'}"):
        resolve_tracking_uri(home.as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert resolve_tracking_uri(home.as_uri()) == home.as_uri()


def test_a_malformed_server_uri_is_one_clear_line(capsys):
    from hybrid.cli.main import main

    assert main(["models", "--tracking-uri", "http://[::1:5000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: malformed tracking URI") and "ValueError" not in err[0]


def test_a_password_in_a_tracking_uri_is_never_shown(capsys):
    """`--tracking-uri http://user:pw@host:port` (an mlflow server behind basic auth) printed the password in every
    message, `hybrid models` / `calibrate` output and the run summary stored in MLflow."""
    import socket

    from hybrid.cli.main import main
    from hybrid.tracking.store import redact_uri

    assert redact_uri("http://ann:s3cr:et@host:5000/x") == "http://ann:***@host:5000/x"
    assert redact_uri("https://ann@host") == "https://ann@host"  # no password: nothing to hide
    assert redact_uri("sqlite:////tmp/a@b/mlflow.db") == "sqlite:////tmp/a@b/mlflow.db"
    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(["models", "--tracking-uri", f"http://ann:s3cret@127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert "s3cret" not in err and f"ann:***@127.0.0.1:{port}" in err, err


def test_hybrid_home_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("HYBRID_HOME", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert hybrid_home() == tmp_path / "xdg" / "hybrid"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert hybrid_home() == Path.home() / ".local" / "share" / "hybrid"


@pytest.mark.parametrize("ref,expected", [
    ("kern", ModelRef("kern")),
    ("kern/3", ModelRef("kern", 3)),
    ("models:/kern/12", ModelRef("kern", 12)),
    ("models:/kern/latest", ModelRef("kern")),
    ("kern@champion", ModelRef("kern", None, "champion")),
])
def test_parse_model_ref(ref, expected):
    assert parse_model_ref(ref) == expected


@pytest.mark.parametrize("bad", ["", "kern/0", "kern/x", "a/b/c", "models:/",
                                 "kern/99999999999999999999"])  # was an OverflowError from SQLite
def test_parse_model_ref_rejects(bad):
    with pytest.raises(InvalidInputError):
        parse_model_ref(bad)


def test_retry_backs_off_on_locked_database_only():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return "ok"

    assert retry(flaky, base_delay_s=0.001) == "ok" and len(calls) == 3
    assert is_transient(RuntimeError("database is locked")) and not is_transient(ValueError("bad column"))
    with pytest.raises(ValueError):
        retry(lambda: (_ for _ in ()).throw(ValueError("bad column")), base_delay_s=0.001)


def test_lost_insert_race_is_retried_only_when_asked():
    from hybrid.tracking.store import is_lost_insert_race

    race = "RestException: BAD_REQUEST: (sqlite3.IntegrityError) UNIQUE constraint failed: datasets.digest"
    calls = []

    def get_or_create():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError(race)
        return "row"

    assert is_lost_insert_race(RuntimeError(race)) and not is_lost_insert_race(RuntimeError("database is locked"))
    assert retry(get_or_create, base_delay_s=0.001, also=is_lost_insert_race) == "row" and len(calls) == 2
    calls.clear()
    with pytest.raises(RuntimeError, match="UNIQUE"):
        retry(get_or_create, base_delay_s=0.001)  # not a transient failure in general
    assert len(calls) == 1


def test_subsample_keeps_every_group_and_digest_tracks_content(shared_datasets):
    full = neusight_table(shared_datasets, max_rows=100_000)
    small = subsample(full, 300, seed=1)
    assert len(small) == 300
    # every (device, op) group of the full table survives, and the draw is reproducible
    assert set(map(tuple, full[["device", "op"]].drop_duplicates().to_numpy())) == \
        set(map(tuple, small[["device", "op"]].drop_duplicates().to_numpy()))
    pd.testing.assert_frame_equal(small, subsample(full, 300, seed=1))
    assert table_digest(small) == table_digest(small.copy())
    changed = small.copy()
    changed.loc[0, "time_us"] = float(changed.loc[0, "time_us"]) * (1 + 1e-9) + 1e-6
    assert table_digest(changed) != table_digest(small)
    with pytest.raises(InvalidInputError):
        subsample(full, 0)
    assert np.isfinite(small["time_us"]).all()


def test_lodo_holds_out_only_devices_whose_kind_remains_in_the_fit(catalog):
    from hybrid.hardware.cpu import describe_local_cpu
    from hybrid.tracking.calibrate import CalibrationConfig, lodo_devices

    cat = catalog.with_device(describe_local_cpu(key="cpu-test"))
    table = pd.DataFrame({"device": ["cpu-test"] * 5 + ["T4"] * 3 + ["V100-PCIE-32GB"] * 2})
    cfg = CalibrationConfig(name="x")
    assert lodo_devices(table, cfg, cat) == ["T4", "V100-PCIE-32GB"]  # the lone CPU is not held out
    assert lodo_devices(table[table.device != "V100-PCIE-32GB"], cfg, cat) == []
    explicit = CalibrationConfig(name="x", holdout_devices=("cpu-test",))
    assert lodo_devices(table, explicit, cat) == ["cpu-test"]  # an explicit choice is honoured


def test_a_version_registered_without_a_hybrid_model_is_named_as_such(tmp_path, capsys):
    """A registered version whose run holds no `model` folder (registered by another tool) gave MLflow's
    "failed to download artifacts from path 'model'"; now one line saying it is not a hybrid predictor."""
    from hybrid.cli.main import main

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = open_store(uri).client()
    exp = client.create_experiment("other", artifact_location=(tmp_path / "art").as_uri())
    run = client.create_run(exp)
    client.set_terminated(run.info.run_id)
    client.create_registered_model("foreign")
    client.create_model_version("foreign", f"runs:/{run.info.run_id}/model", run.info.run_id)
    assert main(["predict", "gemm", "--device", "A100", "--dtype", "fp32", "-m", "64", "-n", "64", "-k", "64",
                 "--model", "foreign", "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "models:/foreign/1 is not a hybrid predictor" in err[0], err


def test_a_deleted_run_is_listed_as_deleted_not_finished(tmp_path):
    """A registered version whose run was deleted in MLflow (kept until `mlflow gc`, then its model is gone) was
    listed FINISHED; it is listed DELETED with a note saying what that means."""
    from hybrid.tracking.registry import incomplete_note, list_models
    from hybrid.tracking.store import open_store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = open_store(uri).client(create=True)
    exp = client.create_experiment("e", artifact_location=(tmp_path / "art").as_uri())
    run = client.create_run(exp)
    client.set_terminated(run.info.run_id, "FINISHED")
    client.create_registered_model("m")
    client.create_model_version("m", f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
    status = lambda: next(v["run_status"] for m in list_models(uri) if m["name"] == "m" for v in m["versions"])  # noqa: E731
    assert status() == "FINISHED" and incomplete_note("models:/m/1", run.info.run_id, "FINISHED") is None
    client.delete_run(run.info.run_id)
    assert status() == "DELETED"
    assert "was deleted in MLflow" in incomplete_note("models:/m/1", run.info.run_id, "DELETED")


@pytest.mark.parametrize("uri", ["sqlite://", "sqlite:///", "sqlite:///:memory:", "sqlite:///:memory:?cache=shared",
                                 "sqlite:///file:store?mode=memory&uri=true"])
def test_an_in_memory_sqlite_store_is_refused(uri, tmp_path, capsys):
    """An in-memory SQLite store keeps nothing once the command ends: `calibrate --tracking-uri sqlite://` recorded a
    run and registered a model (exit 0, "report command: hybrid report --run ...") into a database that was gone a
    moment later, and `models` / `evaluate` printed MLflow's schema-migration INFO lines before "no models"."""
    from hybrid.cli.main import main

    with pytest.raises(InvalidInputError, match="in-memory SQLite"):
        resolve_tracking_uri(uri)
    assert main(["models", "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "in-memory SQLite" in err[0] and "INFO" not in err[0], err
    # a file store is still a store
    assert resolve_tracking_uri(f"sqlite:///{tmp_path / 'memory.db'}") == f"sqlite:///{tmp_path / 'memory.db'}"


def test_a_directory_named_as_the_sqlite_store_is_one_clear_error(tmp_path, capsys):
    """`--tracking-uri sqlite:////some/folder` (or `folder.db/`, a directory): calibrate failed with SQLAlchemy's
    "OperationalError: unable to open database file" (exit 1, the internal-error code) after leaving a lock file
    beside the folder, and the read-only commands said "nothing was calibrated into it". Now both name the
    directory, and nothing is created."""
    from hybrid.cli.main import main
    from hybrid.tracking.store import TrackingError

    folder = tmp_path / "store.db"
    folder.mkdir()
    for create in (True, False):
        with pytest.raises(TrackingError, match="is a directory, not a SQLite database file"):
            open_store(f"sqlite:///{folder}").client(create=create)
    assert main(["models", "--tracking-uri", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a directory" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.db"]  # no store.db.lock
    assert not any(folder.iterdir())


def test_a_store_whose_folder_cannot_be_written_is_named_not_its_lock_file(tmp_path):
    """A local store under a folder that cannot be created or written failed with the lock file's OS error
    ("/sys/x.db.lock: permission denied"), naming a file the user never gave; the error names the store."""
    from hybrid.tracking.store import Store, TrackingError, store_lock

    blocker = tmp_path / "afile"
    blocker.write_text("not a folder")
    db = blocker / "mlflow.db"
    with pytest.raises(TrackingError) as info:
        with store_lock(Store(uri=f"sqlite:///{db}", db_path=db)):
            pass
    msg = str(info.value)
    assert f"tracking store {db}" in msg and "not writable" in msg and ".lock" not in msg, msg
