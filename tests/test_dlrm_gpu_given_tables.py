"""``experiments/dlrm_gpu/run.py --mlperf FILE...`` (no ``--json``): the markdown report of the given tables says
what was scored. It used to print the committed report's text: "N MLPerf rows + DeepLearningExamples", "7 systems x
2 precisions", constants "fitted on the MLPerf v1.0 runs only (0 runs)", scored on "the other MLPerf rounds and
DeepLearningExamples", an empty constants table and a scaling curve of "(no plot)"; and a table none of whose runs
could be mapped printed the JSON summary even without ``--json``."""

from __future__ import annotations

import pandas as pd


def _table(shared_datasets, tmp_path, round_: str, rows: int, name: str):
    src = shared_datasets / "mlperf" / f"mlperf_training_{round_}_dlrm_runs.csv"
    out = tmp_path / name
    pd.read_csv(src).head(rows).to_csv(out, index=False)
    return out


COMMITTED_CLAIMS = ("DeepLearningExamples", "7 systems x 2 precisions", "(0 runs)", "Scaling curve", "(no plot)",
                    "the other MLPerf rounds")


def test_given_tables_without_a_fit_round(load_experiment, shared_datasets, tmp_path, capsys):
    given = _table(shared_datasets, tmp_path, "v2.1", 3, "mine.csv")
    assert load_experiment("dlrm_gpu").main(["--mlperf", str(given), "--data-dir", str(tmp_path / "none")]) == 0
    text = capsys.readouterr().out
    assert not [c for c in COMMITTED_CLAIMS if c in text], text[:1500]
    assert f"Tables scored: `{given}`: 3 MLPerf rows read; mapped and scored: 2. Skipped: 1 no per-iteration" in text
    assert "nothing fitted (no public MLPerf v1.0 table" in text and "## Fitted framework constants" not in text


def test_given_tables_with_the_fit_round(load_experiment, shared_datasets, tmp_path, capsys):
    data = tmp_path / "data"
    (data / "mlperf").mkdir(parents=True)
    (data / "xla").mkdir()
    for f in ("matmul_sm90_H100.csv", "collectives_sm90_H100.csv"):
        (data / "xla" / f).symlink_to(shared_datasets / "xla" / f)
    fit = _table(shared_datasets, tmp_path, "v1.0", 6, "data/mlperf/mlperf_training_v1.0_dlrm_runs.csv")
    given = _table(shared_datasets, tmp_path, "v2.1", 3, "mine.csv")
    assert load_experiment("dlrm_gpu").main(["--mlperf", str(given), str(fit), "--data-dir", str(data)]) == 0
    text = capsys.readouterr().out
    assert not [c for c in COMMITTED_CLAIMS if c in text], text[:1500]
    assert "fitted on mlperf_training_v1.0_dlrm_runs.csv (6 runs) of the public data" in text
    assert "6 of the scored runs are of that round" in text
    assert "| fit round v1.0 (in-sample) | 6 |" in text and "| held out (not the fit round) | 2 |" in text
    assert "## Fitted framework constants" in text


def test_given_tables_with_nothing_to_score_answer_in_text(load_experiment, shared_datasets, tmp_path, capsys):
    raw = pd.read_csv(shared_datasets / "mlperf" / "mlperf_training_v2.1_dlrm_runs.csv").head(2)
    raw["median_ms_per_iteration"] = float("nan")  # no per-iteration time: every run skipped
    given = tmp_path / "none.csv"
    raw.to_csv(given, index=False)
    assert load_experiment("dlrm_gpu").main(["--mlperf", str(given), "--data-dir", str(tmp_path / "none")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("no run to score: 2 MLPerf rows read, all skipped (2 no per-iteration time)"), out


def test_json_summary_says_which_scored_runs_are_in_sample(load_experiment):
    """The markdown report marked the given runs of the fit round in-sample; the ``--json`` summary did not say
    how many there were or what the held-out runs alone score."""
    from collections import Counter

    import numpy as np

    runs = pd.DataFrame({"err_fit_pct": [1.0, 4.0, 9.0], "err_roofline_pct": [20.0, 30.0, 40.0],
                         "err_calibrated_pct": [5.0, 5.0, 5.0], "measured_ms": [1.0, 2.0, 3.0],
                         "pred_fit_ms": [1.0, 2.0, 3.0], "system_label": ["a", "a", "b"], "gpus": [8, 8, 16],
                         "fit_set": [True, False, False]})
    out = load_experiment("dlrm_gpu").summary_json(runs, Counter(), 3, "fitted")
    assert out["n_fit_round"] == 1 and out["held_out_geomean_pct"] == round(float(np.sqrt(4.0 * 9.0)), 2)
    out = load_experiment("dlrm_gpu").summary_json(runs.assign(fit_set=True), Counter(), 3, "fitted")
    assert out["n_fit_round"] == 3 and out["held_out_geomean_pct"] is None


def test_each_system_row_names_the_catalog_system_it_was_costed_on(load_experiment, shared_datasets, tmp_path,
                                                                    capsys):
    """A run is labelled with the system its submitter named (Lenovo's SR670v2, 4 A100-SXM4-40GB a node) but costed
    on a catalog system of that GPU and count (Polaris, ALCF's machine: its NICs price the inter-node traffic), and
    neither the report nor the JSON summary said which."""
    import json

    raw = pd.read_csv(shared_datasets / "mlperf" / "mlperf_training_v2.1_dlrm_runs.csv")
    given = tmp_path / "sr670.csv"
    raw[raw["system"].str.startswith("SR670v2")].head(1).to_csv(given, index=False)
    exp = load_experiment("dlrm_gpu")
    assert exp.main(["--mlperf", str(given), "--data-dir", str(tmp_path / "none"), "--json"]) == 0
    (label, block), = json.loads(capsys.readouterr().out)["by_system"].items()
    assert "SR670v2" in label and block["costed_system"] == "Polaris", block
    assert exp.main(["--mlperf", str(given), "--data-dir", str(tmp_path / "none")]) == 0
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if line.startswith("| v2.1") and "SR670v2" in line)
    assert "| costed on |" in text and "| Polaris |" in row, row
