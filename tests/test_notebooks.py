"""Every notebook under notebooks/ runs top to bottom on a fresh kernel (so none can rot), and is committed
with its outputs (so a reader sees results without running it)."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_committed_with_outputs(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.get("execution_count") for c in code), f"{path.name}: run it and commit the outputs"
    assert not [o for c in code for o in c.outputs if o.get("output_type") == "error"]


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path, shared_datasets, tmp_path, monkeypatch):
    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))  # the kernel inherits it: a throw-away store
    monkeypatch.setenv("HYBRID_DATA_DIR", str(shared_datasets))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    before = sorted(p.name for p in path.parent.iterdir())
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert outputs and not [o for o in outputs if o.get("output_type") == "error"]
    assert sorted(p.name for p in path.parent.iterdir()) == before  # nothing written beside the notebook
