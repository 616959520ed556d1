"""An interrupted `hybrid profile` keeps what it measured: a valid bundle marked partial, resumable.

A lent GPU comes with a fixed budget of minutes; a run stopped by Ctrl-C or by the SIGTERM of a time limit threw
away every family it had finished (the bundle was written only at the end). These tests interrupt real, short
profile runs in a subprocess once the first family is complete (the log names each family as it starts).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hybrid.data.bundle import load_bundle

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]


def _interrupt_after(argv: list[str], line: str, sig: int, timeout: float = 120.0) -> tuple[int, str]:
    """Run ``hybrid <argv>`` and send ``sig`` once a stderr line starts with ``line``; (exit code, stderr)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "hybrid.cli.main", *argv], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        for text in proc.stderr:
            err.append(text)
            if text.startswith(line):
                proc.send_signal(sig)
                break
            assert time.monotonic() < deadline, "".join(err)
        rest = proc.communicate(timeout=timeout)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, "".join(err) + rest


def test_an_interrupted_profile_keeps_the_finished_families_as_a_partial_bundle(tmp_path):
    """Ctrl-C while elementwise is measured: gemm (finished) is kept in a bundle that validates, meta.json says it
    is partial and how to resume, and the resumed run measures none of the configurations kept again."""
    from hybrid.data.profiler.runner import ProfileOptions, run_profile
    from hybrid.errors import HybridError

    out = tmp_path / "p"
    rc, err = _interrupt_after(["profile", "--quick", "--cpu", "--threads", "2", "--device-name", "lab-box",
                                "--only", "gemm,elementwise", "--no-progress", "-o", str(out)],
                               "elementwise:", signal.SIGINT)
    assert rc == 130, err
    assert "a partial bundle" in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]  # no temporary left beside it
    table, _ = load_bundle(out)  # validates
    meta = json.loads((out / "meta.json").read_text())
    assert meta["partial"] is True
    stop = meta["interrupted"]
    assert stop["by"] == "SIGINT" and stop["families_complete"] == ["gemm"]
    assert stop["families_not_complete"] == ["elementwise"] and stop["during"]["family"] == "elementwise"
    gemm = table[table["op"].isin(["gemm", "gemv", "bmm", "linear"])]
    n_elem = int((table["op"] == "elementwise").sum())
    assert len(gemm) == 14 and n_elem == stop["during"]["measured"] < stop["during"]["cases"]
    assert meta["n_rows"] == len(table)
    assert f"--only elementwise --skip-existing {out} -o {out}-rest" in stop["resume"]

    # resuming: gemm is complete (nothing left to measure), and elementwise would skip the rows kept
    with pytest.raises(HybridError, match="all 14 configuration"):
        run_profile(ProfileOptions(quick=True, families=("gemm",), threads=2, device_name="lab-box", force_cpu=True,
                                   progress=False, skip_existing=(str(out),)), tmp_path / "rest")
    assert not (tmp_path / "rest").exists()
