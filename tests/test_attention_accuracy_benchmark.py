"""experiments/attention_accuracy: scores a real (quick) CPU attention profile; clear errors on bad bundles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hybrid.data.paths import project_datasets_dir

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quick_attention(tmp_path_factory) -> Path:
    from hybrid.data.profiler.runner import ProfileOptions, run_profile

    out = tmp_path_factory.mktemp("att") / "b"
    run_profile(ProfileOptions(quick=True, families=("attention", "softmax"), threads=1, progress=False,
                               force_cpu=True), out)
    return out


def test_benchmark_scores_a_quick_profile(quick_attention, load_experiment):
    bench = load_experiment("attention_accuracy")
    att, other, cat, key = bench.load_inputs(quick_attention, None)
    assert set(att["op"]) == {"attention"} and set(other["op"]) == {"softmax"} and (att["device"] == key).all()
    res = bench.evaluate(att, other, cat, seeds=1)
    assert res["n_rows"] == len(att) and set(res["rows_by_kind"]) == {"decode", "prefill fwd", "prefill bwd"}
    for col in ("roofline", "no attention rows", "attention configs held out"):
        assert np.isfinite(res[col]["geomean_pct"]) and res[col]["geomean_pct"] > 0
    # this CPU runs SDPA well below its roofline (dispatch, softmax, cache traffic)
    assert res["roofline"]["median_ratio"] < 0.9
    text = bench.report(res, "test", "cmd", 1.0)
    assert "| all |" in text and "attention configs held out" in text


def test_benchmark_refuses_bundles_without_attention(tmp_path, capsys, load_experiment):
    bench = load_experiment("attention_accuracy")
    cpu = project_datasets_dir() / "cpu-amd-epyc-1c"
    assert bench.main(["--bundle", str(cpu), "--out", str(tmp_path / "r.md")]) == 2
    assert "no attention rows" in capsys.readouterr().err
    assert not (tmp_path / "r.md").exists()
