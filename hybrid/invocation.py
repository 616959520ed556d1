"""How the user of this process runs hybrid, for the commands a message tells them to run next.

A command printed as ``hybrid profile ...`` (the resume command of an interrupted profile) does not run where
there is no installed ``hybrid`` script: on a lent GPU machine hybrid runs from a checkout, as
``PYTHONPATH=. python3 -m hybrid.cli.main ...``. :func:`invocation` gives the prefix the process itself was
started with, so a printed command works the same way.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

#: The module ``python -m`` runs the CLI as (``hybrid/cli/main.py``).
CLI_MODULE = "hybrid.cli.main"


def _same_file(a: str | None, b: str) -> bool:
    try:
        return a is not None and os.path.samefile(a, b)
    except OSError:
        return False


def invocation(argv0: str | None = None, executable: str | None = None) -> list[str]:
    """The words that start hybrid's CLI the way this process was started (``argv0``: ``sys.argv[0]``).

    ``["hybrid"]`` for the installed script found on ``PATH`` (its path where it is not on ``PATH``);
    ``[python, "-m", "hybrid.cli.main"]`` when the process runs the CLI module (``python -m hybrid.cli.main``, as
    from a checkout: ``python -m`` puts the working directory on the path, so the command works from where the
    user ran theirs), with the interpreter's name where ``PATH`` finds that very interpreter, else its path;
    ``["hybrid"]`` for anything else (hybrid called from Python)."""
    arg0 = sys.argv[0] if argv0 is None else argv0
    python = sys.executable if executable is None else executable
    path = Path(arg0)
    if path.parts[-3:] == ("hybrid", "cli", "main.py"):
        name = Path(python).name
        return [name if _same_file(shutil.which(name), python) else python or "python3", "-m", CLI_MODULE]
    if path.name in ("hybrid", "hybrid.exe") and path.parent != Path():
        return ["hybrid"] if _same_file(shutil.which("hybrid"), arg0) else [arg0]
    return ["hybrid"]


def command(*words: str, prefix: Sequence[str] | None = None) -> str:
    """``words`` (``"data", "merge", ...``) as one shell command run through :func:`invocation` (or ``prefix``)."""
    return shlex.join([*(invocation() if prefix is None else prefix), *words])
