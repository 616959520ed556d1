"""Entry point of the ``hybrid`` command. Sub-commands are registered by module path and loaded lazily."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable

import click

from hybrid import __version__
from hybrid.errors import HybridError

#: sub-command name -> "module:attribute" of its click command or group
COMMANDS: dict[str, str] = {
    "devices": "hybrid.cli.devices:devices",
    "data": "hybrid.cli.data:data",
    "predict": "hybrid.cli.predict:predict",
    "profile": "hybrid.cli.profile:profile",
    "simulate": "hybrid.cli.simulate:simulate",
    "shard": "hybrid.cli.shard:shard",
    "calibrate": "hybrid.cli.calibrate:calibrate",
    "evaluate": "hybrid.cli.evaluate:evaluate",
    "report": "hybrid.cli.report:report",
    "models": "hybrid.cli.models:models",
    "quickstart": "hybrid.cli.quickstart:quickstart",
    "bench": "hybrid.cli.bench:bench",
    "llm": "hybrid.cli.llm:llm",
    "trace": "hybrid.cli.trace:trace",
}


class LazyGroup(click.Group):
    """A group whose sub-commands are imported on first use, so ``hybrid --help`` stays fast."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            module, attr = COMMANDS[cmd_name].split(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                              list[str]]:
        name = click.utils.make_str(args[0]) if args else ""
        if args and self.get_command(ctx, name) is None and not name.startswith("-"):
            import difflib

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=3)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            ctx.fail(f"No such command {name!r}.{hint}")
        return super().resolve_command(ctx, args)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="hybrid")
def cli() -> None:
    """hybrid: predict how long ML training and inference take on GPU systems.

    Roofline estimates from hardware specs, corrected by models fitted to measurements
    (tracked in MLflow), feeding a multi-rank critical-path engine.
    """


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM so that, as for Ctrl-C, every ``with`` block unwinds: atomic
    writes delete their temporaries and MLflow runs are closed."""


def _on_sigterm(signum, frame) -> None:  # pragma: no cover - exercised through a subprocess
    raise Terminated()


#: Sub-commands that load XGBoost models.
_XGBOOST_COMMANDS = {"predict", "calibrate", "evaluate", "report", "shard", "simulate", "quickstart", "bench", "llm",
                     "trace"}


def preload_xgboost() -> None:
    """Import XGBoost without its optional scikit-learn integration (hybrid uses only ``xgboost.Booster``).

    ``import xgboost`` imports scikit-learn when it is installed (MLflow pulls it in), about 70% of the import
    time and a large share of every ``--model`` call. Only the CLI does this, for its own short-lived process:
    scikit-learn is hidden while XGBoost is imported and importable again afterwards. A library user's process
    is left alone. No effect when either package is already imported."""
    if "xgboost" in sys.modules or "sklearn" in sys.modules:
        return
    sys.modules["sklearn"] = None  # type: ignore[assignment]  # makes `import sklearn` raise ImportError
    try:
        import xgboost  # noqa: F401
    except ImportError:
        pass
    finally:
        if sys.modules.get("sklearn", 0) is None:
            del sys.modules["sklearn"]


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; :class:`HybridError` and other failures become one line on stderr and exit code 2/1.

    SIGTERM is handled like SIGINT while the command runs (cleanup, then exit code 143)."""
    args = sys.argv[1:] if argv is None else argv
    if any(a in _XGBOOST_COMMANDS for a in args[:3]):
        preload_xgboost()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    from hybrid.tracking.store import bounded_http

    shown = warnings.showwarning
    warnings.showwarning = _warning_line(shown)
    try:
        with bounded_http():  # MLflow's HTTP retries/timeouts bounded for this command only
            return _run(argv)
    finally:
        warnings.showwarning = shown
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _warning_line(shown: Callable[..., None]) -> Callable[..., None]:
    """``warnings.showwarning`` for a command's run: hybrid's own warnings (:mod:`hybrid.errors`: a model priced
    across kinds of processor deep in the engine, a workload no published run matches) as one ``warning:`` line on
    stderr, like the ones the commands collect themselves, instead of Python's file, line and source-code form;
    any other package's warnings as ``shown`` prints them."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        if getattr(category, "__module__", "").startswith("hybrid."):
            click.echo(f"warning: {message}", err=True)
        else:
            shown(message, category, filename, lineno, file, line)

    return show


def _run(argv: list[str] | None) -> int:
    try:
        rv = cli.main(args=argv, prog_name="hybrid", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, Terminated):
            click.echo("terminated", err=True)
            return 143
        # Ctrl-C reaches here as click's Abort: said as the interruption it is, like one raised outside click
        click.echo("interrupted" if isinstance(exc.__cause__, KeyboardInterrupt) else "aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except HybridError as exc:
        if os.environ.get("HYBRID_DEBUG") and exc.__cause__ is not None:
            raise  # the failure the one line wraps (a profile family's kernel that raised), with its traceback
        click.echo(f"error: {exc}", err=True)
        return 2
    except Terminated:
        click.echo("terminated", err=True)
        return 143
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except OSError as exc:
        if exc.filename is None or os.environ.get("HYBRID_DEBUG"):
            return _unexpected(exc)
        # a path the user gave (or one derived from it) that cannot be read or written
        click.echo(f"error: {exc.filename}: {(exc.strerror or type(exc).__name__).lower()}", err=True)
        return 2
    except Exception as exc:  # an unexpected failure: still one line, traceback on request
        if type(exc).__module__.startswith("mlflow") and not os.environ.get("HYBRID_DEBUG"):
            # the tracking store or server refused a request (a wrong URL path, a server error, permissions)
            click.echo(f"error: tracking store: {_store_message(exc)}", err=True)
            return 2
        return _unexpected(exc)
    # Without standalone mode click returns ``ctx.exit(code)``'s code instead of raising it.
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0


def _store_message(exc: BaseException) -> str:
    """One line of an MLflow failure: its first line without the response body a web server that is not MLflow
    sends (an HTML page, cut after its first line), and for a 404 what it usually means."""
    from hybrid.tracking.store import redact_uri

    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = redact_uri(text.split(" Response body:", 1)[0].rstrip())  # MLflow's message names the URL it called
    if "error code 404" in text:
        text += (" (no MLflow tracking API there: is the tracking URI an `mlflow server`'s root URL? check "
                 "--tracking-uri / $MLFLOW_TRACKING_URI)")
    return text


def _unexpected(exc: BaseException) -> int:
    if os.environ.get("HYBRID_DEBUG"):
        raise exc
    click.echo(f"error: {type(exc).__name__}: {exc} (set HYBRID_DEBUG=1 for a traceback)", err=True)
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
