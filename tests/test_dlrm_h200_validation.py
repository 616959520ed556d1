"""``experiments/dlrm_validation/h200.py``: the H200 DLRM benchmark (8 runs never used in development) runs from
the committed data, fits nothing on the runs, and its kernel-profile predictors beat the roofline."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def h200(load_experiment):
    mod = load_experiment("dlrm_validation", "h200.py")
    text, results = mod.run(mod.parse_args(["--no-public"]))  # public calibration: the slow part, not needed
    return mod, text, results


def test_h200_benchmark_figures_have_the_expected_keys(h200):
    _, text, results = h200
    assert results["n_runs"] == 8 and results["n_configs"] == 4 and results["system"] == "H200"
    assert results["fitted_on_runs"] is False
    assert set(results["predictors"]) == {"roofline", "profile", "H100 profile"}
    for res in results["predictors"].values():
        s = res["all"]
        assert s["n_rows"] == 8 and math.isfinite(s["geomean_pct"]) and s["ranking"]["n"] == 4
        assert set(res["phases"]) >= {"input_dist", "backward", "optimizer"}
        assert isinstance(res["met_target"], bool) and res["repeat_runs_geomean_pct"] is not None
    assert len(results["runs"]) == 8
    for r in results["runs"]:
        for n in results["predictors"]:
            assert r[f"{n}: predicted_ms"] > 0
    assert [r["config"] for r in results["ranking_by_config"]] == ["c000", "c001", "c002", "c003"]
    noise = results["repeat_noise"]
    assert noise["n_runs"] == 6 and 0 < noise["geomean_pct"] < 10 and noise["ranking"]["n"] == 3
    assert "embedding_bag" in results["h100_profile_on_h200_rows"]
    assert "Nothing is fitted or tuned on these runs" in text and "## Per harness phase" in text


def test_kernel_profiles_beat_the_roofline_on_the_h200_runs(h200):
    """Loose sanity bounds that a broken bundle mapping, a wrong target device or a graph regression would fail:
    the H200's own profile predicts the runs far better than the roofline (which misses by ~75%), and the H100
    profile, transferred to a GPU it never measured, still beats the roofline."""
    _, _, results = h200
    g = {n: r["all"]["geomean_pct"] for n, r in results["predictors"].items()}
    assert g["profile"] < 0.5 * g["roofline"]
    assert g["profile"] < 35.0
    assert g["H100 profile"] < g["roofline"]


def test_committed_results_md_is_this_benchmarks():
    text = (ROOT / "experiments" / "dlrm_validation" / "h200" / "results.md").read_text(encoding="utf-8")
    assert "python experiments/dlrm_validation/h200.py" in text
    for heading in ("## Iteration time", "## Measurement noise", "## Per run", "## Plan ranking per config",
                    "## Per harness phase", "## Notes"):
        assert heading in text
    assert "missed" in text


def test_host_constants_come_from_the_h100_runs_only(h200):
    """The host-constants section: fitted on the H100 dev half (never on an H200 run), applied as fitted and
    scaled by the profiles' latency ratio; the default row reproduces the `profile` predictor exactly."""
    _, text, results = h200
    host = results["h100_dev_host_constants"]
    v = host["variants"]
    every = "H100 constants fitted on all its runs (README's two commands)"
    assert set(v) == {"default host constants", "H100-dev constants", "H100-dev constants x latency ratio", every}
    # README's two commands fit on every H100 run: other constants than the dev half's, so another figure
    assert v[every]["overheads"] != v["H100-dev constants"]["overheads"]
    assert v["default host constants"]["geomean_pct"] == pytest.approx(results["predictors"]["profile"]["all"]
                                                                       ["geomean_pct"])
    fitted = v["H100-dev constants"]["overheads"]
    scaled = v["H100-dev constants x latency ratio"]["overheads"]
    assert 1.2 < host["latency_ratio"] < 2.0  # the H200 VM dispatches a tiny op slower than the H100 VM
    assert scaled["kernel_launch_us"] == pytest.approx(fitted["kernel_launch_us"] * host["latency_ratio"])
    assert scaled["host_op_us"] == pytest.approx(fitted["host_op_us"] * host["latency_ratio"])
    # the harness's host is priced op by op on a GPU: the H100 runs' host per op comes out near the 5.7 us the
    # traced H100 / H200 training steps fitted (experiments/trace_gpu/host_model.py), the launch near its 5 us
    assert 3.0 < fitted["host_op_us"] < 8.0 and fitted["kernel_launch_us"] < 10.0
    assert all(math.isfinite(x["geomean_pct"]) and x["n_rows"] == 8 for x in v.values())
    assert "## Host constants fitted on the H100's runs" in text
