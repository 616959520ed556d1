"""In CI (``CI=true``) a missing public dataset fails the tests that need it; elsewhere they skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "HYBRID_DATA_DIR": str(tmp_path / "no-such-dir"), "CI": "true" if ci else ""}
    # one fixture-based test (shared_datasets) and one file parametrized over data files (empty without data)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/test_importers_vidur.py", "tests/test_tracking_support.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_missing_data_skips_locally_and_fails_in_ci(tmp_path):
    local = _run(tmp_path, ci=False)
    assert local.returncode == 0, local.stdout[-2000:]
    assert "skipped" in local.stdout
    ci = _run(tmp_path, ci=True)
    assert ci.returncode != 0, ci.stdout[-2000:]
    assert "required data must be present" in ci.stdout or "empty parameter set" in ci.stdout, ci.stdout[-2000:]
