"""Resuming a `hybrid profile` run that was cut short: the command it prints runs the way the run was started, and
a configuration that fails every time no longer stops every resume at the same point."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid.invocation import CLI_MODULE, invocation


def test_invocation_follows_how_the_process_was_started(tmp_path):
    """The resume command was always `hybrid profile ...`, which does not run from a checkout on a lent GPU machine
    (no installed script there: `PYTHONPATH=. python3 -m hybrid.cli.main profile ...`)."""
    main_py = str(tmp_path / "checkout" / "hybrid" / "cli" / "main.py")
    got = invocation(main_py, executable=sys.executable)
    assert got[1:] == ["-m", CLI_MODULE]
    assert os.path.samefile(got[0] if os.sep in got[0] else __import__("shutil").which(got[0]), sys.executable)
    script = tmp_path / "venv" / "bin" / "hybrid"  # an installed script not on PATH: its path
    assert invocation(str(script)) == [str(script)]
    assert invocation("/usr/lib/python3/site-packages/pytest/__main__.py") == ["hybrid"]  # called from Python


torch = pytest.importorskip("torch")


def _failing_norm(monkeypatch, *at: int) -> list:
    """norm_cases whose configurations ``at`` raise every time (a kernel the GPU cannot run)."""
    from hybrid.data.profiler import kernels

    real = kernels.norm_cases
    listed: list = []

    def cases(*args, **kwargs):
        got = listed[:] = real(*args, **kwargs)
        for i in at:
            got[i].build = lambda: (_ for _ in ()).throw(RuntimeError("no kernel image is available"))
        return got

    monkeypatch.setattr(kernels, "norm_cases", cases)
    return listed


def _opts(**kw):
    from hybrid.data.profiler.runner import ProfileOptions

    return ProfileOptions(**{"quick": True, "families": ("norm",), "threads": 2, "progress": False,
                             "force_cpu": True, "device_name": "lab-box", **kw})


def test_the_resume_command_runs_as_the_profile_was_started(tmp_path, monkeypatch):
    """Run as `python -m hybrid.cli.main`, the printed resume command starts the same way and measures the rest."""
    from hybrid.data.bundle import load_bundle
    from hybrid.data.profiler.runner import ProfileFailedError, run_profile

    listed = _failing_norm(monkeypatch, 2)
    monkeypatch.setattr(sys, "argv", [str(Path(__file__).parents[1] / "hybrid" / "cli" / "main.py"), "profile"])
    with pytest.raises(ProfileFailedError) as info:
        run_profile(_opts(), tmp_path / "b")
    resume = info.value.meta["interrupted"]["resume"]
    argv = shlex.split(resume)
    assert argv[1:4] == ["-m", CLI_MODULE, "profile"], resume
    assert f"`{resume}`" in str(info.value) and f"`{argv[0]} -m {CLI_MODULE} data merge " in str(info.value)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]),
                                                       os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rest, _ = load_bundle(tmp_path / "b-rest")
    assert 0 < len(rest) <= len(listed) - 2  # the configurations b lacks
