"""``experiments/h100_transfer``: the never-seen fit really excludes every H100 row (all sources, every alias), and
the summary table the run writes is what an independent re-computation of the same fit gives."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid.reports.metrics import error_summary

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def exp():
    name = "h100_transfer_run"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / "h100_transfer" / "run.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_h100_rows_catches_every_alias_and_nothing_else(exp, catalog):
    names = ["NVIDIA H100 80GB HBM3", "H100 PCIe", "sm_90", "H100 NVL", "H100-SXM", "A100-SXM4-80GB", "H200", "T4"]
    mask = exp.h100_rows(pd.DataFrame({"device": names}), catalog)
    assert mask.tolist() == [True] * 5 + [False] * 3


def test_never_seen_training_set_has_no_h100_row(exp, shared_datasets):
    public, catalog = exp.load_public(shared_datasets, 20, 0)
    mask = exp.h100_rows(public, catalog)
    # the public H100 rows are XLA's matmul table, and every XLA row is one
    assert mask.any() and set(public.loc[mask, "src"]) == {"xla"}
    assert mask[(public["src"] == "xla").to_numpy()].all()
    never = public[~mask]
    keys = {catalog.device(d).key for d in never["device"].astype(str).unique()}
    assert not any(k.startswith("H100") for k in keys)
    # the training set still has every family the bundle is scored on
    from hybrid.ops.families import family_array

    assert set(exp.FAMILIES) <= set(family_array(never["op"]))
    target = exp.load_h100()
    assert exp.h100_rows(target, catalog).all()
    assert set(exp.report_groups(target)) <= set(exp.GROUP_ORDER)


def _summary_cells(text: str, group: str) -> list[str]:
    section = text.split("## Summary: every scenario", 1)[1]
    row = next(ln for ln in section.splitlines() if ln.startswith(f"| {group} |"))
    return [c.strip().strip("*") for c in row.strip("|").split("|")]


def test_written_summary_matches_an_independent_refit(exp, shared_datasets, tmp_path):
    out = tmp_path / "results.md"
    exp.main(["--data-dir", str(shared_datasets), "--rows-per-group", "20", "--seeds", "1", "--folds", "2",
              "--target-rows", "200", "--out", str(out)])
    text = out.read_text()
    cells = _summary_cells(text, "all")
    assert int(cells[1]) == 200
    group_rows = sum(int(_summary_cells(text, g)[1]) for g in exp.GROUP_ORDER if f"| {g} |" in text.split(
        "## Summary: every scenario", 1)[1].split("## 1.")[0])
    assert group_rows == 200

    public, catalog = exp.load_public(shared_datasets, 20, 0)
    target = exp.load_h100().sample(n=200, random_state=0).reset_index(drop=True)
    model = exp.fit(public[~exp.h100_rows(public, catalog)], catalog, 0)
    pred = model.predict(target, intervals=False)
    for cell, column in ((cells[2], "roofline_us"), (cells[3], "time_us")):
        geo, med = (float(x) for x in re.match(r"([\d.]+) \(([\d.]+)\)", cell).groups())
        summ = error_summary(pred[column], target["time_us"])
        assert geo == pytest.approx(summ["geomean_pct"], abs=0.051)
        assert med == pytest.approx(summ["median_pct"], abs=0.051)
    # the in-distribution upper bound beats the never-seen model even on this tiny run
    assert float(cells[-1].split()[0]) < float(cells[3].split()[0])
    assert np.isfinite(float(cells[4].split()[0]))
