"""The CLI's real entry point run in-process, for tests that read its exit code and both streams."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from typing import Any

from hybrid.cli.main import main


def run_cli(args: Sequence[Any]) -> tuple[int, str, str]:
    """``hybrid ARGS...`` in this process (arguments as strings): (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()
