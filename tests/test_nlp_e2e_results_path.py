"""``experiments/nlp_e2e/run.py`` writes its committed results (results.md, its plot, e2e_rows.csv) only for a run
on the public dev labels: it recognised them by file name, so a file of one's own called ``e2e_labels_dev.csv``
(the first rows of the public one copied elsewhere, say) overwrote the committed results with partial scores."""

from __future__ import annotations

import argparse
from pathlib import Path


def _args(labels, **kw) -> argparse.Namespace:
    base = {"labels": str(labels), "out": None, "json": False, "leave_one_gpu_out": False, "shots": 0,
            "data_dir": None}
    return argparse.Namespace(**{**base, **kw})


def test_results_go_beside_the_script_only_for_the_public_labels(load_experiment, shared_datasets, tmp_path):
    bench = load_experiment("nlp_e2e")
    here = Path(bench.__file__).parent
    public = shared_datasets / "neusight" / "e2e_labels_dev.csv"
    assert bench.results_path(_args(public, data_dir=str(shared_datasets))) == str(here / "results.md")
    assert bench.results_path(_args(public, data_dir=str(shared_datasets), leave_one_gpu_out=True, shots=5)) == \
        str(here / "heldout_5_shots_results.md")
    mine = tmp_path / "e2e_labels_dev.csv"
    mine.write_text("\n".join(public.read_text().splitlines()[:5]) + "\n")
    assert bench.results_path(_args(mine, data_dir=str(shared_datasets))) is None
    assert bench.results_path(_args(public, data_dir=str(shared_datasets), json=True)) is None
    assert bench.results_path(_args(mine, out=str(tmp_path / "r.md"))) == str(tmp_path / "r.md")
