"""Where calibration runs and registered models live: MLflow tracking-URI resolution and client creation.

Resolution order for the tracking URI: an explicit URI (``--tracking-uri``) > ``$MLFLOW_TRACKING_URI`` > the
default local store, a SQLite database ``mlflow.db`` with a sibling ``artifacts/`` folder in the per-user
hybrid home (``$HYBRID_HOME``, else ``$XDG_DATA_HOME/hybrid``, else ``~/.local/share/hybrid``). No server is
needed for the default. Nothing here touches MLflow's global state: every caller gets its own
:class:`mlflow.MlflowClient` for the resolved URI.

A server store (``http(s)://``) is probed with a plain TCP connection before any MLflow call, so an address
where nothing listens fails within seconds (:data:`PROBE_TIMEOUT_ENV`, default
:data:`DEFAULT_PROBE_TIMEOUT_S`) instead of after MLflow's minutes of retries; MLflow's own HTTP retries and
timeouts are bounded while hybrid talks to a store (:func:`bounded_http`; a user's own
``MLFLOW_HTTP_REQUEST_*`` settings win).

Read-only commands (evaluate, report, predict/simulate/shard ``--model``) open a store with
``client(create=False)``: a local store that does not exist is an error, never a new empty database.

A local SQLite store may be written by several ``hybrid`` processes at once. MLflow creates the schema on first
use, which is not safe to run twice at the same time, and SQLite serialises writers with a lock that can time
out; so :func:`store_lock` (an advisory file lock beside the database) serialises the creation and each
process's burst of writes, and :func:`retry` retries "database is locked" failures with backoff.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

from hybrid.errors import HybridError, InvalidInputError

#: Environment variable relocating the per-user hybrid home (the default store lives there).
HOME_ENV = "HYBRID_HOME"
#: MLflow's own environment variable naming a tracking URI.
TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
#: Experiment that calibration runs are recorded in unless told otherwise.
DEFAULT_EXPERIMENT = "hybrid-calibration"

#: Retry policy for transient store failures (SQLite "database is locked", a server restarting).
RETRY_ATTEMPTS = 8
RETRY_BASE_DELAY_S = 0.2
RETRY_MAX_DELAY_S = 5.0
#: How long to wait for another process's store lock before giving up.
LOCK_TIMEOUT_S = 300.0

#: Seconds to wait for a tracking server to accept a connection (environment override of the default).
PROBE_TIMEOUT_ENV = "HYBRID_TRACKING_TIMEOUT"
DEFAULT_PROBE_TIMEOUT_S = 5.0
#: The longest wait :data:`PROBE_TIMEOUT_ENV` may ask for: far beyond any server that answers at all, and far below
#: the deadlines that overflow the platform's time_t (``inf``, 1e10 s).
MAX_PROBE_TIMEOUT_S = 86400.0
#: MLflow HTTP settings used while hybrid talks to a server, unless the user set them: MLflow's defaults
#: (7 retries with exponential backoff, 120 s timeout) keep a command silent for many minutes.
HTTP_LIMITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
               "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}

_T = TypeVar("_T")


class TrackingError(HybridError):
    """The tracking store cannot be reached or used."""


def hybrid_home() -> Path:
    """The per-user folder for hybrid's own state: ``$HYBRID_HOME``, ``$XDG_DATA_HOME/hybrid`` or
    ``~/.local/share/hybrid`` (not created here)."""
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "hybrid"


def default_tracking_uri() -> str:
    """``sqlite:///<hybrid home>/mlflow.db``."""
    return f"sqlite:///{(hybrid_home() / 'mlflow.db').resolve()}"


#: The password of a URI's ``user:password@`` part (an ``mlflow server`` behind basic auth).
_PASSWORD = re.compile(r"(://[^/@:]*):[^/@]*@")


def redact_uri(uri: str) -> str:
    """``uri`` as it may be shown: a password in it (``http://user:pw@host:5000``) replaced by ``***``. Messages, the
    JSON outputs and the run summary stored in MLflow show this; the store itself is opened with the URI given."""
    return _PASSWORD.sub(r"\1:***@", str(uri))


def resolve_tracking_uri(explicit: str | None = None) -> str:
    """``explicit`` > ``$MLFLOW_TRACKING_URI`` > :func:`default_tracking_uri`. A bare path to a ``.db`` file
    is accepted as shorthand for a SQLite URI."""
    if explicit is not None and not explicit.strip():
        # `--tracking-uri "$UNSET_VAR"`: an empty explicit URI fell back to the default store and calibrated into it
        # (or read it) without a word; an empty $MLFLOW_TRACKING_URI still means unset, as MLflow takes it
        # a CLI option reads $MLFLOW_TRACKING_URI too (click's envvar): a blank variable arrives here as the option
        if os.environ.get(TRACKING_URI_ENV) == explicit and explicit:
            raise InvalidInputError(f"empty tracking URI (${TRACKING_URI_ENV} is {explicit!r}): name a store in it, "
                                    "or unset it for the default local store")
        raise InvalidInputError(f"empty tracking URI (--tracking-uri {explicit!r}): name a store, or leave the option "
                                f"out for ${TRACKING_URI_ENV} / the default local store")
    uri = explicit or os.environ.get(TRACKING_URI_ENV) or default_tracking_uri()
    uri = uri.strip()
    if not uri:
        raise InvalidInputError("empty tracking URI")
    if "://" not in uri and uri.endswith(".db"):
        uri = f"sqlite:///{Path(uri).expanduser().resolve()}"
    elif "://" not in uri and uri not in ("databricks", "databricks-uc") and not os.environ.get("MLFLOW_ALLOW_FILE_STORE"):
        # a bare path that is not a .db file would be MLflow's file store (a directory like ./mlruns), which MLflow
        # refuses with a paragraph about its maintenance mode: say what hybrid stores are instead
        store = Path(uri).expanduser() / "mlflow.db"
        hint = f"; {store} exists: pass that file" if store.is_file() else ""
        raise InvalidInputError(f"tracking URI {redact_uri(uri)!r} is neither a SQLite file (a bare path must end in .db: "
                                f"path/to/mlflow.db, or sqlite:///path/to/mlflow.db) nor a server (http://host:port)"
                                f"{hint}")
    scheme = uri.split("://", 1)[0].split("+", 1)[0].lower() if "://" in uri else ""
    if scheme == "file" and not os.environ.get("MLFLOW_ALLOW_FILE_STORE"):
        # the file store again, in URI form: MLflow would create the folder (a read-only `hybrid models` too) and
        # then refuse it with its maintenance-mode paragraph
        folder = Path(unquote(uri.split("://", 1)[1].split("?", 1)[0]))
        store = folder / "mlflow.db"
        hint = f"; {store} exists: pass sqlite:///{store}" if store.is_file() else ""
        raise InvalidInputError(f"tracking URI {redact_uri(uri)!r} is MLflow's file store, which hybrid does not use (set "
                                "MLFLOW_ALLOW_FILE_STORE to use it anyway): use sqlite:///path/to/mlflow.db or a "
                                f"server (http://host:port){hint}")
    if scheme and scheme not in TRACKING_SCHEMES:
        raise InvalidInputError(f"unsupported tracking URI {redact_uri(uri)!r}: use sqlite:///path/to/store.db, "
                                "http(s)://host:port (an `mlflow server`), or a database URI "
                                f"({', '.join(s for s in TRACKING_SCHEMES if s not in ('http', 'https', 'sqlite'))})")
    if scheme == "sqlite" and in_memory_sqlite(uri):
        # SQLAlchemy's in-memory database lives as long as the process: `calibrate` recorded its run and registered
        # its model there (exit 0, a `hybrid report --run` line for a run already gone), and the read-only commands
        # created MLflow's schema in it (its INFO lines) to find nothing
        raise InvalidInputError(f"tracking URI {redact_uri(uri)!r} is an in-memory SQLite database, which keeps nothing "
                                "once the command ends: name a file (sqlite:///path/to/mlflow.db) or a server "
                                "(http://host:port), or leave the option out for the default local store")
    return uri


def in_memory_sqlite(uri: str) -> bool:
    """True for a SQLite URI of an in-memory database, as SQLAlchemy and SQLite read it: no path (``sqlite://``,
    ``sqlite:///``), the path ``:memory:``, or SQLite's URI filename with ``mode=memory``."""
    rest = uri.split("://", 1)[1] if "://" in uri else uri
    path, _, query = rest.partition("?")
    path = unquote(path)
    return path in ("", "/") or path.lstrip("/").startswith(":memory:") or "mode=memory" in query.lower()


#: URI schemes an MLflow tracking store with a model registry can have (``postgresql+psycopg2`` etc. included).
TRACKING_SCHEMES = ("sqlite", "http", "https", "file", "postgresql", "mysql", "mssql", "databricks")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI, else None."""
    if not uri.startswith("sqlite:///"):
        return None
    # sqlite:///relative.db or sqlite:////absolute/path.db (SQLAlchemy's convention); drop any ?query
    path = unquote(uri[len("sqlite:///"):].split("?", 1)[0])
    if not path or path == ":memory:":
        return None
    return Path(path)


def artifact_root_for(uri: str) -> str | None:
    """Where runs of a local SQLite store put their artifacts (``artifacts/`` beside the database);
    None for a server, which decides for itself."""
    db = sqlite_path(uri)
    if db is None:
        return None
    return (db.parent / "artifacts").resolve().as_uri()


@dataclass(frozen=True)
class Store:
    """A resolved tracking store: its URI and, for local SQLite stores, the database file."""

    uri: str
    db_path: Path | None

    @property
    def is_local(self) -> bool:
        return self.db_path is not None

    @property
    def artifact_root(self) -> str | None:
        return artifact_root_for(self.uri)

    def client(self, create: bool = True):  # -> mlflow.MlflowClient (imported lazily: mlflow is slow)
        """A client bound to this store (creating the SQLite schema under the store lock if needed).

        ``create=False`` (read-only use) makes a missing local store an error instead of creating it. A server
        is probed first (:func:`probe_server`)."""
        from mlflow import MlflowClient

        if self.db_path is not None:
            if self.db_path.is_dir():
                # checked before the store lock (a .lock file beside the folder) and SQLAlchemy's "unable to open
                # database file" (exit 1), or, read-only, "nothing was calibrated into it"
                inside = self.db_path / "mlflow.db"
                hint = (f"; {inside} exists: pass sqlite:///{inside}" if inside.is_file()
                        else " (e.g. sqlite:///path/to/mlflow.db)")
                raise TrackingError(f"{self.db_path} is a directory, not a SQLite database file: name the store's "
                                    f"file{hint}; check --tracking-uri / $MLFLOW_TRACKING_URI")
            if not create and not self.db_path.is_file():
                raise TrackingError(f"no tracking store at {self.db_path} (nothing was calibrated into it); "
                                    "check --tracking-uri / $MLFLOW_TRACKING_URI, or run `hybrid calibrate` first")
            try:
                self.db_path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise TrackingError(f"cannot create the tracking store directory {self.db_path.parent}: "
                                    f"{exc.strerror or exc}") from None
            with store_lock(self), quiet_mlflow():
                _check_sqlite_store(self.db_path, create)
                if create and (not self.db_path.exists() or self.db_path.stat().st_size == 0):
                    _create_schema_aside(self.db_path)
                try:
                    client = retry(lambda: MlflowClient(tracking_uri=self.uri, registry_uri=self.uri))
                    # The first call creates the tables; do it while holding the lock.
                    retry(lambda: client.search_experiments(max_results=1))
                except Exception as exc:
                    half = _half_created(exc)
                    if half is None:
                        raise
                    raise TrackingError(
                        f"the tracking store {self.db_path} is half-migrated: a command that created or upgraded "
                        f"its MLflow schema in place was stopped in the middle (earlier versions of hybrid created "
                        f"it in place), and MLflow cannot finish it ({half}); move it aside (`mv {self.db_path} "
                        f"{self.db_path}.broken`) and calibrate again, or restore it from a backup if it holds runs "
                        "you need") from None
            return client
        probe_server(self.uri)
        return MlflowClient(tracking_uri=self.uri, registry_uri=self.uri)


#: Tables every MLflow SQLite store has from its first migration on: a database with tables but none of these is
#: something else's.
_MLFLOW_TABLES = frozenset({"alembic_version", "experiments", "runs"})
_SQLITE_HEADER = b"SQLite format 3\x00"


def _check_sqlite_store(db: Path, create: bool) -> None:
    """Refuse a local store file MLflow would misuse: a file that is not SQLite (MLflow's multi-line
    ``DatabaseError: file is not a database`` with its SQL), a SQLite database of another program (MLflow writes
    its ~60 tables into it, even for a read-only ``hybrid models``) and, read-only (``create=False``), a database
    without MLflow's tables (an empty file: nothing was calibrated into it, and reading would create the schema)."""
    if not db.is_file():
        return
    try:
        with open(db, "rb") as fh:
            head = fh.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise TrackingError(f"cannot read the tracking store {db}: {exc.strerror or exc}") from None
    if head and head != _SQLITE_HEADER:
        raise TrackingError(f"{db} is not a SQLite database, so not a tracking store; check --tracking-uri / "
                            "$MLFLOW_TRACKING_URI")
    tables: set[str] = set()
    if head:
        import sqlite3

        try:
            # read-write but never created (mode=rw): a hot journal a killed writer left is rolled back, as MLflow's own
            # connection would; read-only, that failed with "attempt to write a readonly database"
            with contextlib.closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=rw", uri=True, timeout=30)) as conn:
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.Error as exc:
            raise TrackingError(f"cannot read the tracking store {db}: {exc}") from None
    if tables and not tables & _MLFLOW_TABLES:
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise TrackingError(f"{db} is a SQLite database of something else (tables {shown}), not an MLflow tracking "
                            "store: name another file (check --tracking-uri / $MLFLOW_TRACKING_URI)")
    if not tables and not create:
        raise TrackingError(f"no tracking store at {db} (an empty database: nothing was calibrated into it); "
                            "check --tracking-uri / $MLFLOW_TRACKING_URI, or run `hybrid calibrate` first")


#: What MLflow's schema migrations say when they meet the tables of a migration that a killed command applied without
#: recording it (SQLite commits each statement of a migration of its own).
_HALF_CREATED_RE = re.compile(r"(table|index) \S+ already exists|duplicate column name: \S+")


def _half_created(exc: BaseException) -> str | None:
    """The line of ``exc`` (MLflow's multi-line ``OperationalError`` with its SQL) that says a store's schema is
    half-created, None for any other failure."""
    for e in (exc, exc.__cause__, exc.__context__):
        if e is not None and type(e).__name__ == "OperationalError":
            m = _HALF_CREATED_RE.search(str(e))
            if m:
                return m.group(0)
    return None


def _create_schema_aside(db: Path) -> None:
    """Create a new local store's MLflow schema (dozens of migrations, a second or two) in a temporary file beside
    ``db`` and move it into place once complete. Created in place, a Ctrl-C or a kill in the middle left a
    half-migrated database that every later command (``hybrid models`` included) failed on with MLflow's
    multi-line ``OperationalError: table ... already exists``; now ``db`` is either absent or whole."""
    from mlflow import MlflowClient

    tmp = db.with_name(f".{db.name}.{os.getpid()}.creating")
    uri = f"sqlite:///{tmp.resolve()}"
    try:
        retry(lambda: MlflowClient(tracking_uri=uri, registry_uri=uri).search_experiments(max_results=1))
        if not db.exists() or db.stat().st_size == 0:
            # a journal beside an empty database (a writer killed in its first transaction) would be "rolled back"
            # onto the new one, truncating it to the empty file's size
            for stale in (db.with_name(db.name + sfx) for sfx in ("-journal", "-wal", "-shm")):
                with contextlib.suppress(OSError):
                    stale.unlink()
        os.replace(tmp, db)
    finally:
        for leftover in (tmp, *(tmp.with_name(tmp.name + sfx) for sfx in ("-journal", "-wal", "-shm"))):
            with contextlib.suppress(OSError):
                leftover.unlink()


def probe_timeout_s() -> float:
    """:data:`PROBE_TIMEOUT_ENV` seconds (default :data:`DEFAULT_PROBE_TIMEOUT_S`)."""
    raw = os.environ.get(PROBE_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_PROBE_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise InvalidInputError(f"${PROBE_TIMEOUT_ENV} must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise InvalidInputError(f"${PROBE_TIMEOUT_ENV} must be positive, got {raw!r}")
    if not value <= MAX_PROBE_TIMEOUT_S:  # nan, inf, 1e10: the probe's socket deadline overflowed time_t
        raise InvalidInputError(f"${PROBE_TIMEOUT_ENV} must be a finite number of seconds up to "
                                f"{MAX_PROBE_TIMEOUT_S:.0f} (a day), got {raw!r}")
    return value


def probe_server(uri: str, timeout_s: float | None = None) -> None:
    """Fail fast with a :class:`TrackingError` when an ``http(s)://`` tracking server does not accept a TCP
    connection within ``timeout_s``; other URI schemes are left to MLflow."""
    import socket
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(uri)
    except ValueError as exc:  # e.g. an unclosed IPv6 bracket: "http://[::1:5000"
        raise TrackingError(f"malformed tracking URI {redact_uri(uri)!r}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        return
    timeout = probe_timeout_s() if timeout_s is None else timeout_s
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise TrackingError(f"tracking URI {redact_uri(uri)!r} has an invalid port") from None
    if not parts.hostname:
        raise TrackingError(f"tracking URI {redact_uri(uri)!r} names no host")
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout) as conn:
            _answers_http(conn, parts.hostname, timeout, uri)
    except TimeoutError:
        raise TrackingError(f"cannot reach the tracking server {redact_uri(uri)}: no answer within {timeout:g} s "
                            f"(set ${PROBE_TIMEOUT_ENV} to wait longer; check --tracking-uri / "
                            "$MLFLOW_TRACKING_URI)") from None
    except OSError as exc:
        reason = (exc.strerror or str(exc) or type(exc).__name__).lower()
        raise TrackingError(f"cannot reach the tracking server {redact_uri(uri)}: {reason} (is the server running? "
                            "check --tracking-uri / $MLFLOW_TRACKING_URI)") from None


def _answers_http(conn: Any, host: str, timeout: float, uri: str) -> None:
    """Send one plain-HTTP request on the open connection ``conn`` and wait ``timeout`` s for the first bytes of
    any answer: a listener that accepts connections and never answers (a hung server, a wrong port) would
    otherwise hold every MLflow call for its whole retry budget. HTTPS endpoints are left to MLflow."""
    if uri.lower().startswith("https"):
        _answers_tls(conn, host, timeout, uri)
        return
    conn.settimeout(timeout)
    try:
        conn.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        conn.recv(1)
    except TimeoutError:
        raise TrackingError(f"the tracking server {redact_uri(uri)} accepts connections but sent no HTTP answer within "
                            f"{timeout:g} s (set ${PROBE_TIMEOUT_ENV} to wait longer; check --tracking-uri / "
                            "$MLFLOW_TRACKING_URI)") from None


def _answers_tls(conn: Any, host: str, timeout: float, uri: str) -> None:
    """Complete a TLS handshake on the open connection ``conn`` within ``timeout`` s (certificates are MLflow's to
    check, not this probe's): an ``https://`` URI of a plain-HTTP server otherwise spent MLflow's retries (~40 s)
    before a paragraph about SSL; a listener that never answers is reported as for plain HTTP."""
    import ssl

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conn.settimeout(timeout)
    try:
        with ctx.wrap_socket(conn, server_hostname=host, do_handshake_on_connect=False) as tls:
            tls.do_handshake()
    except TimeoutError:
        raise TrackingError(f"the tracking server {redact_uri(uri)} accepts connections but completed no TLS handshake within "
                            f"{timeout:g} s (set ${PROBE_TIMEOUT_ENV} to wait longer; check --tracking-uri / "
                            "$MLFLOW_TRACKING_URI)") from None
    except (ssl.SSLError, ConnectionError) as exc:
        reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
        raise TrackingError(f"the tracking server {redact_uri(uri)} does not answer TLS ({str(reason).lower()}): is it a plain "
                            "http:// server? check --tracking-uri / $MLFLOW_TRACKING_URI") from None


@contextlib.contextmanager
def bounded_http() -> Iterator[None]:
    """Apply :data:`HTTP_LIMITS` (only those the user has not set) for the duration of the block."""
    added = {k: v for k, v in HTTP_LIMITS.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def open_store(tracking_uri: str | None = None) -> Store:
    """Resolve ``tracking_uri`` (see :func:`resolve_tracking_uri`) into a :class:`Store`."""
    uri = resolve_tracking_uri(tracking_uri)
    return Store(uri=uri, db_path=sqlite_path(uri))


@contextlib.contextmanager
def store_lock(store: Store, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold an exclusive advisory lock on a local store (a no-op for servers and where ``fcntl`` is missing)."""
    if store.db_path is None:
        yield
        return
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    lock_path = store.db_path.with_name(store.db_path.name + ".lock")
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(lock_path, "a+")  # noqa: SIM115 - closed by the with below
    except OSError as exc:  # the error names the store the user gave, not the lock file beside it
        raise TrackingError(f"cannot write to the tracking store {store.db_path}: its folder "
                            f"{store.db_path.parent} is not writable ({exc.strerror or exc}); check --tracking-uri "
                            "/ $MLFLOW_TRACKING_URI / $HYBRID_HOME") from None
    with fh:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TrackingError(f"timed out after {timeout_s:.0f}s waiting for the store lock {lock_path}") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


#: MLflow settings applied while hybrid talks to a store: no progress bars, no "View run at" lines on stdout
#: (which would corrupt ``--json`` output).
_QUIET_ENV = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}


@contextlib.contextmanager
def quiet_mlflow() -> Iterator[None]:
    """Silence MLflow's chatter (schema-migration INFO logs, artifact progress bars, signature warnings) for
    the duration of the block; restores the previous settings after."""
    import logging
    import warnings

    logger = logging.getLogger("mlflow")
    level = logger.level
    saved = {k: os.environ.get(k) for k in _QUIET_ENV}
    os.environ.update(_QUIET_ENV)
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), bounded_http():
            warnings.filterwarnings("ignore", module=r"mlflow(\..*)?")
            warnings.filterwarnings("ignore", message=r".*type hint.*")
            yield
    finally:
        logger.setLevel(level)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: a locked SQLite database, a busy or restarting server."""
    text = f"{type(exc).__name__}: {exc}".lower()
    if "timed out" in text or "timeout" in text:  # MLflow already retried a server that does not answer
        return False
    return any(s in text for s in ("database is locked", "database is busy", "connection refused",
                                   "temporarily unavailable", "max retries exceeded"))


def is_lost_insert_race(exc: BaseException) -> bool:
    """True when a get-or-create lost a race to another writer (a unique-constraint violation): calling it again
    finds the row the other writer created. Only retry idempotent get-or-create calls on this."""
    text = f"{type(exc).__name__}: {exc}".lower()
    return "unique constraint" in text or "duplicate key" in text or "integrityerror" in text


def retry(fn: Callable[[], _T], attempts: int = RETRY_ATTEMPTS, base_delay_s: float = RETRY_BASE_DELAY_S,
          also: Callable[[BaseException], bool] | None = None) -> _T:
    """Call ``fn``; on a transient failure (:func:`is_transient`, or ``also``) wait with jittered exponential
    backoff and try again, up to ``attempts`` times."""
    for i in range(attempts):
        try:
            return fn()
        except Exception as exc:
            if not (is_transient(exc) or (also is not None and also(exc))) or i == attempts - 1:
                raise
            delay = min(RETRY_MAX_DELAY_S, base_delay_s * 2**i) * (0.5 + random.random())
            time.sleep(delay)
    raise AssertionError("unreachable")


def artifact_folder(experiment: str) -> str:
    """The folder under a local store's ``artifacts/`` for ``experiment``: its name where that is a plain file name
    (``hybrid-calibration``), else the name with every other character replaced and a digest of the name appended.
    The name went into the artifact URI as it was: ``--experiment ../../x`` wrote the runs' artifacts outside the
    store, and ``a #1`` / ``a #2`` both wrote to ``artifacts/a `` (the URI ends at ``#``)."""
    import hashlib

    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", experiment):
        return experiment
    plain = re.sub(r"[^A-Za-z0-9._-]+", "_", experiment).strip("._") or "experiment"
    return f"{plain[:80]}-{hashlib.sha256(experiment.encode()).hexdigest()[:12]}"


def ensure_experiment(client, store: Store, name: str = DEFAULT_EXPERIMENT) -> str:
    """The id of experiment ``name``, created if missing (artifacts of a local store go beside its database).
    Safe when two processes create it at once."""
    exp = retry(lambda: client.get_experiment_by_name(name))
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            retry(lambda: client.restore_experiment(exp.experiment_id))
        return exp.experiment_id
    location = None
    if store.artifact_root is not None:
        location = f"{store.artifact_root}/{artifact_folder(name)}"
    try:
        return retry(lambda: client.create_experiment(name, artifact_location=location))
    except Exception as exc:
        if "already exists" not in str(exc).lower() and "unique constraint" not in str(exc).lower():
            raise
        exp = retry(lambda: client.get_experiment_by_name(name))
        if exp is None:
            raise
        return exp.experiment_id


def describe_store(store: Store) -> dict[str, str]:
    """Where a person finds the runs: the URI and the command that opens the MLflow UI on it."""
    out = {"tracking_uri": redact_uri(store.uri)}
    if store.is_local:
        root = artifact_root_for(store.uri) or ""
        out["ui_command"] = f"mlflow ui --backend-store-uri {store.uri}"
        out["artifacts"] = root
    else:
        out["ui_url"] = redact_uri(store.uri)
    return out
