"""Calibrated predictors in the MLflow Model Registry: log, register, resolve ``NAME[/VERSION]``, load.

A calibrated predictor is logged to its run as an MLflow pyfunc model under ``model/`` using the "models from
code" form (:mod:`hybrid.tracking.pyfunc_model` is copied in as source; nothing is pickled), with the directory
written by ``HybridPredictor.save`` (JSON manifest, XGBoost JSON/UBJ, sigmoid JSON) as its ``predictor``
artifact. The registered version points at that ``model/`` folder. Loading downloads the folder and calls
``HybridPredictor.load`` on the ``predictor`` artifact, so hybrid never needs the pyfunc wrapper itself.

Model references accepted everywhere: ``NAME`` (latest version), ``NAME/3``, ``models:/NAME/3``,
``models:/NAME/latest``, ``NAME@alias``.

Fast path: importing MLflow and opening a client costs seconds, which every ``--model`` CLI call would pay. For a
local SQLite store with local artifacts (the default store), :func:`load_predictor` resolves the reference with
a read-only SQL query on the registry tables (``model_versions``, ``registered_model_aliases``, ``runs``) and
loads the predictor straight from the run's artifact folder, without importing MLflow. Anything unexpected (a
server URI, remote artifacts, another schema, no match) takes the MLflow path, which gives the proper errors.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import yaml

from hybrid import __version__
from hybrid.errors import InvalidInputError, ModelNotFoundError
from hybrid.tracking.store import RETRY_ATTEMPTS, Store, open_store, quiet_mlflow, retry

#: Artifact folder of a run holding the pyfunc model.
MODEL_ARTIFACT_PATH = "model"
#: Name of the pyfunc artifact holding the predictor's saved directory.
PREDICTOR_ARTIFACT = "predictor"
#: The pseudo model name for the analytical baseline (no store needed).
ROOFLINE = "roofline"

_REF = re.compile(r"^(?:models:/)?(?P<name>[^/@]+?)(?:/(?P<version>[^/@]+)|@(?P<alias>[^/@]+))?$")


@dataclass(frozen=True)
class ModelRef:
    """A parsed model reference: ``name`` plus a version number, ``latest`` (None) or an alias."""

    name: str
    version: int | None = None
    alias: str | None = None

    def __str__(self) -> str:
        if self.alias:
            return f"{self.name}@{self.alias}"
        return f"{self.name}/{self.version}" if self.version is not None else self.name


def parse_model_ref(ref: str) -> ModelRef:
    """Parse ``NAME``, ``NAME/3``, ``models:/NAME/3``, ``models:/NAME/latest`` or ``NAME@alias``."""
    text = (ref or "").strip()
    m = _REF.match(text)
    if not text or m is None:
        raise InvalidInputError(f"bad model reference {ref!r}; use NAME, NAME/VERSION or models:/NAME/VERSION")
    version = m.group("version")
    if version is None or version.lower() == "latest":
        return ModelRef(m.group("name"), None, m.group("alias"))
    if not version.isdigit() or int(version) < 1:
        raise InvalidInputError(f"bad model version {version!r} in {ref!r}; versions are 1, 2, 3, ...")
    if int(version) >= 2**63:  # no registry numbers a version past a 64-bit integer (SQLite raised OverflowError)
        raise InvalidInputError(f"bad model version {version!r} in {ref!r}: larger than any registry can hold")
    return ModelRef(m.group("name"), int(version))


@dataclass
class LoadedModel:
    """A predictor loaded from the registry, and where it came from."""

    predictor: Any  # HybridPredictor
    name: str
    version: int
    run_id: str | None
    tracking_uri: str

    @property
    def ref(self) -> str:
        return f"models:/{self.name}/{self.version}"


def save_pyfunc(predictor: Any, directory: Path) -> Path:
    """Write ``predictor`` as a pickle-free MLflow pyfunc model folder ``directory/model``."""
    import mlflow.pyfunc

    directory = Path(directory)
    pred_dir = directory / PREDICTOR_ARTIFACT
    predictor.save(pred_dir)
    model_dir = directory / MODEL_ARTIFACT_PATH
    code = Path(__file__).with_name("pyfunc_model.py")
    with quiet_mlflow():
        mlflow.pyfunc.save_model(
            str(model_dir), python_model=str(code), artifacts={PREDICTOR_ARTIFACT: str(pred_dir)},
            pip_requirements=[f"hybrid-perf=={__version__}"],
            metadata={"hybrid_version": __version__},
        )
    return model_dir


def register_version(client: Any, name: str, run_id: str, source: str, *, tags: dict[str, str] | None = None,
                     description: str | None = None, created: list[str] | None = None) -> int:
    """Register ``source`` (a run's model folder) as a new version of ``name`` (created if missing).

    Where this call created the registered model, ``name`` is appended to ``created`` at once, before the version
    exists: a calibration that fails later (or is interrupted in between) then knows the name is its own to take
    back (:func:`drop_if_empty`) instead of leaving a model with no versions in the registry."""
    try:
        retry(lambda: client.get_registered_model(name))
    except Exception as exc:
        if "RESOURCE_DOES_NOT_EXIST" not in str(exc) and "not found" not in str(exc).lower():
            raise
        try:
            retry(lambda: client.create_registered_model(
                name, description="hybrid calibrated predictor (roofline + learned corrections)"))
            if created is not None:
                created.append(name)
        except Exception as exc2:  # another process created it first
            if "already exists" not in str(exc2).lower() and "RESOURCE_ALREADY_EXISTS" not in str(exc2):
                raise
    mv = retry(lambda: client.create_model_version(name, source, run_id=run_id, tags=tags or {},
                                                   description=description))
    return int(mv.version)


#: Page sizes of the registry searches (MLflow's largest: a larger page is refused).
MODELS_PAGE = 1000
VERSIONS_PAGE = 10000


def _all_pages(fetch: Callable[[str | None], Any]) -> list[Any]:
    """Every result of a paged MLflow search: ``fetch(page_token)`` until a page has no next token. One page was
    read before: a store with more than 1,000 registered models listed the first 1,000 in `hybrid models`, the
    others not at all, and said nothing."""
    out: list[Any] = []
    token: str | None = None
    while True:
        page = retry(lambda token=token: fetch(token))
        out.extend(page)
        token = getattr(page, "token", None)
        if not token:
            return out


def registered_models(client: Any) -> list[Any]:
    """Every registered model of the store."""
    return _all_pages(lambda t: client.search_registered_models(max_results=MODELS_PAGE, page_token=t))


def model_versions(client: Any, name: str) -> list[Any]:
    """Every version of registered model ``name``."""
    return _all_pages(lambda t: client.search_model_versions(f"name = '{_quote(name)}'", max_results=VERSIONS_PAGE,
                                                             page_token=t))


def drop_if_empty(client: Any, name: str, attempts: int = RETRY_ATTEMPTS) -> bool:
    """Delete registered model ``name`` if it has no versions (a failed calibration's own name, whose version was
    taken back); True if it was deleted. Only for a name the caller created (``register_version(created=...)``):
    a model someone registered by hand, with no versions yet, is theirs. Call it under the store lock: MLflow's
    delete takes any version registered meanwhile with it, and the lock keeps other ``hybrid`` processes on a
    local store from registering one between the check and the delete (a server has no such lock: the window
    there is one request)."""
    if retry(lambda: client.search_model_versions(f"name = '{_quote(name)}'"), attempts):
        return False
    retry(lambda: client.delete_registered_model(name), attempts)
    return True


def resolve_version(client: Any, ref: ModelRef | str) -> Any:
    """The ``ModelVersion`` a reference names (latest = highest version number); raises
    :class:`ModelNotFoundError` naming the known models or versions."""
    ref = parse_model_ref(ref) if isinstance(ref, str) else ref
    if ref.name == ROOFLINE:
        raise InvalidInputError("'roofline' is the analytical baseline, not a registered model")
    if ref.alias:
        try:
            return retry(lambda: client.get_model_version_by_alias(ref.name, ref.alias))
        except Exception:
            raise ModelNotFoundError(f"model {ref.name!r} has no alias {ref.alias!r}") from None
    versions = model_versions(client, ref.name)
    if not versions:
        known = sorted({m.name for m in registered_models(client)})
        if ref.name in known:  # registered (by hand, or every version deleted) but with nothing to load
            raise ModelNotFoundError(f"model {ref.name!r} is registered but has no versions (run `hybrid calibrate "
                                     f"--name {ref.name}` to add one)")
        hint = f"; registered models: {', '.join(known)}" if known else "; no models are registered yet"
        raise ModelNotFoundError(f"no registered model named {ref.name!r}{hint} (run `hybrid calibrate` first)")
    by_number = {int(v.version): v for v in versions}
    if ref.version is None:
        return by_number[max(by_number)]
    if ref.version not in by_number:
        raise ModelNotFoundError(f"model {ref.name!r} has no version {ref.version}; "
                                 f"versions: {', '.join(map(str, sorted(by_number)))}")
    return by_number[ref.version]


def _quote(name: str) -> str:
    return name.replace("'", "\\'")


def download_model(client: Any, version: Any, dst: Path) -> Path:
    """Download a registered version's model folder into ``dst``; returns the predictor directory."""
    with quiet_mlflow():
        if version.run_id:
            try:
                local = retry(lambda: client.download_artifacts(version.run_id, MODEL_ARTIFACT_PATH, str(dst)))
            except Exception:
                # a version registered by something else than `hybrid calibrate` (a run without the model folder):
                # say so, rather than MLflow's "failed to download artifacts from path 'model'"
                names = {Path(a.path).name for a in retry(lambda: client.list_artifacts(version.run_id))}
                if MODEL_ARTIFACT_PATH in names:
                    raise
                raise ModelNotFoundError(
                    f"models:/{version.name}/{version.version} is not a hybrid predictor: its run {version.run_id} "
                    f"has no {MODEL_ARTIFACT_PATH!r} artifact (register models with `hybrid calibrate`)") from None
        else:  # a version registered from a plain artifact URI
            import mlflow.artifacts

            local = mlflow.artifacts.download_artifacts(artifact_uri=version.source, dst_path=str(dst),
                                                       tracking_uri=client.tracking_uri)
    local = Path(local)
    mlmodel = local / "MLmodel"
    if not mlmodel.is_file():
        raise ModelNotFoundError(f"models:/{version.name}/{version.version} has no MLmodel file at {version.source}")
    spec = yaml.safe_load(mlmodel.read_text(encoding="utf-8")) or {}
    arts = (spec.get("flavors", {}).get("python_function", {}) or {}).get("artifacts", {}) or {}
    rel = (arts.get(PREDICTOR_ARTIFACT) or {}).get("path")
    if not rel or not (local / rel).is_dir():
        raise ModelNotFoundError(f"models:/{version.name}/{version.version} is not a hybrid predictor "
                                 f"(no {PREDICTOR_ARTIFACT!r} artifact)")
    return local / rel


def _sqlite_version(db: Path, ref: ModelRef) -> tuple[str, int, str, Path, str] | None:
    """(name, version, run id, predictor directory, run status) of ``ref`` read straight from a local MLflow SQLite
    registry whose run artifacts are local files; None when it cannot be answered that way."""
    if not db.is_file():
        return None
    try:
        # as a URI (read-only mode), with '?', '#' and '%' in the path escaped
        con = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True, timeout=5)
        try:
            cols = {r[1] for r in con.execute("PRAGMA table_info(model_versions)")}
            if not {"name", "version", "run_id", "current_stage"} <= cols:
                return None
            where = "name = ? AND (current_stage IS NULL OR current_stage != 'Deleted_Internal')"
            args: list[Any] = [ref.name]
            if "workspace" in cols:
                where += " AND workspace = 'default'"
            if ref.alias:
                acols = {r[1] for r in con.execute("PRAGMA table_info(registered_model_aliases)")}
                if not {"name", "alias", "version"} <= acols:
                    return None
                row = con.execute("SELECT version FROM registered_model_aliases WHERE name = ? AND alias = ?"
                                  + (" AND workspace = 'default'" if "workspace" in acols else ""),
                                  (ref.name, ref.alias)).fetchone()
                if row is None:
                    return None
                where += " AND version = ?"
                args.append(int(row[0]))
            elif ref.version is not None:
                where += " AND version = ?"
                args.append(ref.version)
            row = con.execute(f"SELECT version, run_id FROM model_versions WHERE {where} "
                              "ORDER BY version DESC LIMIT 1", args).fetchone()
            if row is None or not row[1]:
                return None
            art = con.execute("SELECT artifact_uri, status FROM runs WHERE run_uuid = ?", (row[1],)).fetchone()
        finally:
            con.close()
    except (sqlite3.Error, ValueError):
        return None
    if art is None or not str(art[0] or "").startswith("file://"):
        return None
    model_dir = Path(unquote(urlparse(str(art[0])).path)) / MODEL_ARTIFACT_PATH
    try:
        pred_dir = _predictor_dir(model_dir)
    except (OSError, yaml.YAMLError):
        return None
    if pred_dir is None or not (pred_dir / "manifest.json").is_file():
        return None
    return ref.name, int(row[0]), str(row[1]), pred_dir, str(art[1])


def _predictor_dir(model_dir: Path) -> Path | None:
    """The predictor artifact folder named by a pyfunc model folder's ``MLmodel`` file (None if absent)."""
    mlmodel = model_dir / "MLmodel"
    if not mlmodel.is_file():
        return None
    spec = yaml.safe_load(mlmodel.read_text(encoding="utf-8")) or {}
    arts = (spec.get("flavors", {}).get("python_function", {}) or {}).get("artifacts", {}) or {}
    rel = (arts.get(PREDICTOR_ARTIFACT) or {}).get("path")
    return model_dir / rel if rel and (model_dir / rel).is_dir() else None


def load_predictor(ref: str, tracking_uri: str | None = None, catalog: Any = None,
                   store: Store | None = None) -> LoadedModel:
    """Load a calibrated predictor by reference (see module doc) from the tracking store. ``roofline`` gives
    the analytical baseline without touching any store."""
    from hybrid.corrections.predictor import HybridPredictor

    parsed = parse_model_ref(ref)
    if parsed.name == ROOFLINE and parsed.version is None and parsed.alias is None:
        return LoadedModel(HybridPredictor.roofline_only(catalog), ROOFLINE, 0, None, "")
    store = store or open_store(tracking_uri)
    if store.db_path is not None:
        fast = _sqlite_version(store.db_path, parsed)
        if fast is not None:
            predictor = HybridPredictor.load(fast[3], catalog=catalog)
            _warn_incomplete(f"models:/{fast[0]}/{fast[1]}", fast[2], fast[4])
            return LoadedModel(predictor, fast[0], fast[1], fast[2], store.uri)
    client = store.client(create=False)
    version = resolve_version(client, parsed)
    tmp = Path(tempfile.mkdtemp(prefix="hybrid-model-"))
    try:
        pred_dir = download_model(client, version, tmp)
        predictor = HybridPredictor.load(pred_dir, catalog=catalog)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _warn_incomplete(f"models:/{version.name}/{version.version}", version.run_id,
                     _run_status(client, version.run_id))
    return LoadedModel(predictor, version.name, int(version.version), version.run_id, store.uri)


def _warn_incomplete(ref: str, run_id: str | None, status: str | None) -> None:
    """A :class:`~hybrid.errors.RunStateWarning` when the loaded version's run did not finish (:func:`incomplete_note`)."""
    note = incomplete_note(ref, run_id, status)
    if note:
        import warnings

        from hybrid.errors import RunStateWarning

        warnings.warn(note, RunStateWarning, stacklevel=3)


def _run_status(client: Any, run_id: str | None) -> str | None:
    """The status of a version's run (``FINISHED`` for a calibration that completed), None where there is no run
    (a version registered from a plain artifact URI) or it cannot be read (deleted)."""
    if not run_id:
        return None
    try:
        info = retry(lambda: client.get_run(run_id)).info
    except Exception:  # noqa: BLE001 - a deleted or foreign run: nothing to say about it
        return None
    # a run deleted in MLflow (kept until `mlflow gc`) still reads FINISHED: listed as what it is
    return "DELETED" if str(getattr(info, "lifecycle_stage", "")) == "deleted" else str(info.status)


def incomplete_note(ref: str, run_id: str | None, status: str | None) -> str | None:
    """What to say about a registered version whose run did not finish (None when it did, or there is no run): a
    calibration that failed after registering it (the server gone before it could be taken back) left it with a
    run that recorded neither its training rows nor its report."""
    if not run_id or status in (None, "FINISHED"):
        return None
    if status == "DELETED":
        return (f"{ref} comes from run {run_id}, which was deleted in MLflow: its artifacts (the model itself, its "
                "report and training rows) go at the store's next `mlflow gc`; restore the run or calibrate again")
    return (f"{ref} comes from run {run_id}, which is {status}, not FINISHED: its calibration did not complete after "
            "registering it (its report, predictions and training rows may be missing), or is still recording it")


def list_models(tracking_uri: str | None = None) -> list[dict[str, Any]]:
    """Every registered model with its versions (number, run id, the run's status, creation time, tags)."""
    client = open_store(tracking_uri).client(create=False)
    out = []
    for rm in registered_models(client):
        versions = model_versions(client, rm.name)
        out.append({"name": rm.name, "versions": [
            {"version": int(v.version), "run_id": v.run_id, "run_status": _run_status(client, v.run_id),
             "created": v.creation_timestamp, "tags": dict(v.tags)}
            for v in sorted(versions, key=lambda v: int(v.version))]})
    return out
