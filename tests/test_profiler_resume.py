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


def test_a_configuration_that_always_fails_is_skipped_by_the_resume(tmp_path, monkeypatch):
    """The third norm configuration raises every time: every resume (`--skip-existing` the partial bundle) failed
    on it again with nothing measured. A resume now skips a configuration that failed in a run it extends, counted
    in meta.json, and measures the others; a resume of that resume still skips it."""
    from hybrid.data.bundle import load_bundle, merge_bundles
    from hybrid.data.profiler.runner import ProfileFailedError, run_profile

    listed = _failing_norm(monkeypatch, 2, 5)
    with pytest.raises(ProfileFailedError):
        run_profile(_opts(), tmp_path / "b")
    # the first resume skips the third configuration, then fails at the sixth: 2 more rows kept
    with pytest.raises(ProfileFailedError) as info:
        run_profile(_opts(skip_existing=(str(tmp_path / "b"),)), tmp_path / "r1")
    first, _ = load_bundle(tmp_path / "r1")
    assert len(first) == 2 and info.value.meta["skip_existing"]["cases_failed_before"] == 1
    merge_bundles([tmp_path / "b", tmp_path / "r1"], tmp_path / "m", on_duplicate="last")
    # the second resume (of the merged bundle, as gpu-session does) skips both and finishes the family
    res = run_profile(_opts(skip_existing=(str(tmp_path / "m"),)), tmp_path / "r2")
    assert res.meta["partial"] is False and len(res.table) == len(listed) - 6
    assert res.meta["skip_existing"]["cases_failed_before"] == 2
    skipped = res.meta["skipped_cases"]
    assert len(skipped) == 2 and all("no kernel image is available" in s["failed_before"] for s in skipped)
    assert all(s["reason"].startswith("failed in an earlier run") for s in skipped)
    assert {(s["op"], s["hidden"]) for s in skipped} == {(listed[i].row["op"], listed[i].row["hidden"]) for i in (2, 5)}
    # and a resume of a bundle that holds such a skip keeps skipping it
    merge_bundles([tmp_path / "m", tmp_path / "r2"], tmp_path / "all", on_duplicate="last")
    monkeypatch.undo()
    with pytest.raises(Exception, match="already in --skip-existing"):  # nothing left: the two failures skipped
        run_profile(_opts(skip_existing=(str(tmp_path / "all"),)), tmp_path / "r3")


def test_a_first_configuration_that_always_fails_is_recorded_for_the_resume(tmp_path, monkeypatch):
    """A run that failed on its FIRST configuration wrote nothing, so nothing recorded the failure: every resume (a
    gpu-session run again, `--skip-existing` the bundle) failed on the same configuration with nothing measured,
    and so did a resume whose first configuration to measure failed (two failing configurations in a row): the
    family could never be measured. Now such a run writes a record (meta.json naming the configuration, a table of
    no rows) that the resume skips, and a resume's rest merges with it."""
    from hybrid.bench import gpu_session as gs
    from hybrid.data.bundle import load_bundle, merge_bundles, read_meta
    from hybrid.data.profiler.runner import ProfileFailedError, run_profile

    listed = _failing_norm(monkeypatch, 0, 1)
    with pytest.raises(ProfileFailedError) as info:
        run_profile(_opts(), tmp_path / "b")
    msg = str(info.value)
    assert "before any configuration was measured" in msg and f"recorded in {tmp_path / 'b'}" in msg, msg
    assert "skipped by the resume" in msg and info.value.meta["interrupted"]["resume"] in msg, msg
    assert gs.bundle_state(tmp_path / "b") == "partial"
    empty, _ = load_bundle(tmp_path / "b")
    assert len(empty) == 0
    meta = read_meta(tmp_path / "b")
    assert meta["n_rows"] == 0 and meta["interrupted"]["configuration"]["hidden"] == listed[0].row["hidden"]
    # the resume skips the first configuration, fails on the second: recorded again, not nothing written
    with pytest.raises(ProfileFailedError, match="before any configuration was measured"):
        run_profile(_opts(skip_existing=(str(tmp_path / "b"),)), tmp_path / "r1")
    merge_bundles([tmp_path / "b", tmp_path / "r1"], tmp_path / "m")
    assert len(load_bundle(tmp_path / "m")[0]) == 0
    # the next resume skips both and measures the rest of the family
    res = run_profile(_opts(skip_existing=(str(tmp_path / "m"),)), tmp_path / "r2")
    assert res.meta["partial"] is False and len(res.table) == len(listed) - 2
    assert res.meta["skip_existing"]["cases_failed_before"] == 2
    path, table = merge_bundles([tmp_path / "m", tmp_path / "r2"], tmp_path / "all")
    assert len(table) == len(listed) - 2 and gs.bundle_state(path) == "complete"
