"""Sharding success and error figures on small hand-made tables with known answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hybrid.bench.validate import evaluate, half_split, sharding_success
from hybrid.errors import InvalidInputError


def table() -> pd.DataFrame:
    rows = [
        # config A: predictor picks p2 (fastest measured) -> strict hit
        ("A", "p1", 10.0, 12.0, 0.5), ("A", "p2", 8.0, 9.0, 0.5), ("A", "p3", 9.0, 11.0, 0.5),
        # config B: predictor picks p1 (10.4) but p2 measures 10.0; p1 within spread 0.6 -> tolerant only
        ("B", "p1", 10.4, 5.0, 0.6), ("B", "p2", 10.0, 6.0, 0.2),
        # config C: predictor picks p2 (20) but p1 is much faster -> miss
        ("C", "p1", 10.0, 30.0, 0.5), ("C", "p2", 20.0, 25.0, 0.5),
        # config D: a single plan, no choice to make -> ignored
        ("D", "p1", 5.0, 5.0, 0.1),
    ]
    return pd.DataFrame(rows, columns=["config_name", "plan_name", "median_ms", "predicted_ms", "std_ms"])


def test_strict_and_tolerant_counts():
    s = sharding_success(table())
    assert s["n_configs"] == 3
    assert s["strict"] == 1 and s["tolerant"] == 2
    assert s["strict_pct"] == pytest.approx(100 / 3) and s["tolerant_pct"] == pytest.approx(200 / 3)
    per = s["per_config"]
    assert per.loc["B", "chosen_plan"] == "p1" and per.loc["B", "best_plan"] == "p2"
    assert per.loc["C", "regret_pct"] == pytest.approx(100.0)
    assert s["regret_pct"] == pytest.approx((0 + 4 + 100) / 3)


def test_tolerance_scales_with_k():
    assert sharding_success(table(), k=0.5)["tolerant"] == 1  # 10.4 > 10.0 + 0.3
    assert sharding_success(table(), k=30)["tolerant"] == 3


def test_bad_tables_rejected():
    t = table()
    with pytest.raises(InvalidInputError, match="lacks"):
        sharding_success(t.drop(columns=["std_ms"]))
    t2 = t.copy()
    t2.loc[0, "predicted_ms"] = float("nan")
    with pytest.raises(InvalidInputError, match="NaN"):
        sharding_success(t2)
    with pytest.raises(InvalidInputError, match="two or more"):
        sharding_success(t[t.config_name == "D"])


def test_evaluate_errors_by_plan():
    errors, success = evaluate(table())
    assert errors["n_rows"] == 8
    # config D's p1 is predicted exactly; A/p1 is 20% off
    assert errors["by_plan"]["p1"]["n_rows"] == 4
    rel = [2 / 10, 1 / 8, 2 / 9, 5.4 / 10.4, 4 / 10, 20 / 10, 5 / 20, 0.0]
    assert errors["mape_pct"] == pytest.approx(100 * sum(rel) / 8)
    assert errors["by_plan"]["p1"]["mape_pct"] == pytest.approx(100 * (0.2 + 5.4 / 10.4 + 2.0 + 0) / 4)
    assert success["strict"] == 1


def test_half_split_deterministic_and_disjoint():
    a, b = half_split([f"c{i}" for i in range(9)] * 2, seed=3)
    assert half_split([f"c{i}" for i in range(9)], seed=3) == (a, b)
    assert len(a) == 4 and len(b) == 5 and not set(a) & set(b)


def test_engine_predictions_for_a_stored_campaign(tmp_path):
    """Stored configs/plans -> engine graphs -> positive predictions that differ by plan; the half-split
    overhead fit runs with >= 4 configs and gives finite test errors."""
    from hybrid.bench.campaign import campaign_plans, generate_configs
    from hybrid.bench.validate import validate_campaign
    from hybrid.workloads.dlrm import write_document

    rows = []
    for cfg in generate_configs(4, seed=11):
        write_document(cfg.to_dict(), tmp_path / "configs" / f"{cfg.name}.yaml")
        plans = campaign_plans(cfg)
        for i, name in enumerate(("size_greedy", "row_wise_all", "dp_small")):
            plan = plans[name]
            write_document(plan.to_dict(), tmp_path / "plans" / cfg.name / f"{name}.yaml")
            rows.append({"config_name": cfg.name, "plan_name": name, "ranks": 2, "median_ms": 50.0 + 10 * i,
                         "std_ms": 2.0, "config_file": f"configs/{cfg.name}.yaml",
                         "plan_file": f"plans/{cfg.name}/{name}.yaml"})
    pd.DataFrame(rows).to_csv(tmp_path / "results.csv", index=False)
    from hybrid.bench.validate import EnginePredictor
    from hybrid.engine.costs import RooflineCostModel
    from hybrid.hardware.catalog import default_catalog

    cat = default_catalog()
    pred = EnginePredictor("roofline", RooflineCostModel(cat), cat, system="DGX-A100")
    rep = validate_campaign(tmp_path / "results.csv", pred, split_seed=1)
    p = rep.table["predicted_ms"]
    assert (p > 0).all() and p.nunique() > 4
    assert rep.errors["n_rows"] == 12 and rep.success["n_configs"] == 4
    assert rep.split["n_fit_configs"] == 2 and np.isfinite(rep.split["test_geomean_pct"])
    assert np.isfinite(rep.in_sample["geomean_pct"]) and set(rep.in_sample["overheads_us"]) >= {"iteration_us"}
    # per-phase predictions: the harness phases add up to the iteration (steady state, max over ranks per phase
    # can only exceed it), the gradient exchange is inside the backward pass
    from hybrid.workloads.dlrm_graph import PHASES

    pred_phases = rep.table[[f"pred_{ph}_ms" for ph in PHASES]]
    assert (pred_phases.sum(axis=1) >= p * (1 - 1e-9)).all()
    assert (rep.table["pred_exchange_bwd_ms"] <= rep.table["pred_backward_ms"] + 1e-9).all()
    assert rep.phases == {}  # the synthetic results table has no measured phases to compare with
    # a plan's prediction is the engine's: the same (config, plan) predicted directly agrees
    from hybrid.bench.campaign import load_pair

    cfg, plan = load_pair(tmp_path, rep.table.iloc[0])
    assert pred(cfg, plan) == pytest.approx(p.iloc[0])


def test_runs_with_one_plan_per_config_are_validated_without_sharding_success(tmp_path, capsys):
    """A results table whose every config ran one plan (`hybrid bench dlrm -o DIR` once, single-GPU runs) has
    prediction errors to report but no plan choice to score: validate stopped with 'no config has two or more
    plans to choose between' and showed neither. The errors are reported, the sharding success is empty (None),
    and the in-sample / half-split overhead fits (4 configs) do not fail on it either."""
    import json

    from hybrid.bench.campaign import campaign_plans, generate_configs
    from hybrid.cli.main import main as cli_main
    from hybrid.workloads.dlrm import write_document

    rows = []
    for i, cfg in enumerate(generate_configs(4, seed=11)):
        write_document(cfg.to_dict(), tmp_path / "configs" / f"{cfg.name}.yaml")
        write_document(campaign_plans(cfg)["size_greedy"].to_dict(), tmp_path / "plans" / cfg.name / "sg.yaml")
        rows.append({"config_name": cfg.name, "plan_name": "size_greedy", "ranks": 2, "median_ms": 50.0 + i,
                     "std_ms": 2.0, "config_file": f"configs/{cfg.name}.yaml", "plan_file": f"plans/{cfg.name}/sg.yaml"})
    pd.DataFrame(rows).to_csv(tmp_path / "results.csv", index=False)
    args = ["bench", "validate", str(tmp_path / "results.csv"), "--roofline", "--system", "DGX-A100"]
    assert cli_main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["errors"]["n_rows"] == 4 and np.isfinite(out["errors"]["geomean_pct"])
    assert out["sharding"]["n_configs"] == 0 and out["sharding"]["strict_pct"] is None
    assert out["in_sample"]["strict_pct"] is None and np.isfinite(out["in_sample"]["geomean_pct"])
    assert out["split"]["test_strict_pct"] is None and np.isfinite(out["split"]["test_geomean_pct"])
    assert cli_main(args) == 0
    text = capsys.readouterr().out
    assert "4 (config, plan) pairs, 4 configs" in text
    assert "sharding success: no config ran two or more plans (no plan choice to score)" in text


def test_phase_errors_per_phase():
    from hybrid.bench.validate import phase_errors

    t = pd.DataFrame({"input_dist_ms": [2.0, 4.0, 0.001], "pred_input_dist_ms": [1.0, 2.0, 0.002],
                      "optimizer_ms": [10.0, 10.0, 10.0], "pred_optimizer_ms": [11.0, 9.0, 10.0]})
    e = phase_errors(t)
    assert set(e) == {"input_dist", "optimizer"}
    # the 1-microsecond input phase is below the floor on both sides: not scored
    assert e["input_dist"]["n_rows"] == 2 and e["input_dist"]["ratio_median"] == pytest.approx(0.5)
    assert e["input_dist"]["geomean_pct"] == pytest.approx(50.0)
    assert e["optimizer"]["mape_pct"] == pytest.approx(100 * (0.1 + 0.1 + 0.0) / 3)


def test_engine_rounds_integer_shape_columns_before_costing():
    from hybrid.engine.costs import predict_times

    seen = {}

    class Echo:
        catalog = None

        def predict(self, table):
            seen["t"] = table
            return pd.DataFrame({"time_us": np.ones(len(table))}, index=table.index)

    t = pd.DataFrame({"op": ["embedding_bag", "gemm"], "num_embeddings": [12983.5, np.nan],
                      "pooling_factor": [2.5, np.nan], "m": [np.nan, 0.2]})
    times, _ = predict_times(Echo(), t)
    out = seen["t"]
    assert list(times) == [1.0, 1.0]
    assert out["num_embeddings"].iloc[0] == 12984 and np.isnan(out["num_embeddings"].iloc[1])
    assert out["pooling_factor"].iloc[0] == 2.5  # float column untouched
    assert out["m"].iloc[1] == 1  # rounded, at least 1
    assert t["num_embeddings"].iloc[0] == 12983.5  # caller's table not modified


def test_host_constants_saved_from_one_campaign_and_used_on_another(tmp_path, capsys):
    """`hybrid bench validate --save-overheads` writes the in-sample host constants; `--overheads` predicts other
    runs with them (the H200 runs with constants fitted on the same runs here, so the in-sample figure must come
    back exactly); bad files are refused before anything is fitted."""
    import json

    from hybrid.cli.main import main as cli_main
    from hybrid.data.paths import project_datasets_dir
    from hybrid.errors import InvalidInputError

    runs = project_datasets_dir() / "dlrm-h200-1gpu" / "results.csv"
    bundle = str(project_datasets_dir() / "H200")
    saved = tmp_path / "ov.json"
    assert cli_main(["bench", "validate", str(runs), "--bundle", bundle, "--save-overheads", str(saved),
                     "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    doc = json.loads(saved.read_text())
    assert doc["n_runs"] == 8 and doc["n_configs"] == 4 and doc["fitted_on"] == str(runs)
    assert doc["overheads_us"] == first["in_sample"]["overheads_us"] and first["overheads_us"] is None
    assert cli_main(["bench", "validate", str(runs), "--bundle", bundle, "--overheads", str(saved), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["overheads_us"] == pytest.approx(doc["overheads_us"])
    assert again["errors"]["geomean_pct"] == pytest.approx(first["in_sample"]["geomean_pct"], rel=1e-6)
    for text, match in (("{not json", "not a readable JSON"), ('{"kernel_launch_us": -3}', "must be finite and >= 0"),
                        ('{"warp_us": 3}', "unknown overhead"), ("[]", "expected a JSON object"),
                        ('{"kernel_launch_us": "fast"}', "must be numbers")):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(InvalidInputError, match=match):
            from hybrid.bench.validate import load_overheads

            load_overheads(bad)


def test_cli_refuses_a_bad_results_table_before_fitting(tmp_path, capsys):
    """A header-only or malformed results table is an error before the predictor is fitted (seconds, not the
    ~25 s fit), and nothing is fitted for it."""
    import time

    from hybrid.cli.main import main as cli_main
    from hybrid.data.paths import project_datasets_dir

    bad = tmp_path / "results.csv"
    bad.write_text("config_name,plan_name,ranks,median_ms,std_ms,config_file,plan_file\n")
    t0 = time.perf_counter()
    bundle = str(project_datasets_dir() / "cpu-amd-epyc-1c")
    assert cli_main(["bench", "validate", str(bad), "--bundle", bundle]) == 2
    assert time.perf_counter() - t0 < 10
    err = capsys.readouterr().err
    assert "no data rows" in err and "[1/2]" not in err


def test_validate_with_a_model_points_at_system_not_at_bundle(tmp_path, capsys):
    """With --model, --bundle is refused, yet a run on `local-cpu` was told to "pass --system ... or --bundle":
    the hint now names --system alone and the machines the model was profiled on."""
    from hybrid.cli.main import main
    from hybrid.data.paths import project_datasets_dir
    from hybrid.tracking.calibrate import CalibrationConfig, calibrate
    from hybrid.tracking.inputs import load_measurements

    data = project_datasets_dir()
    if not (data / "cpu-amd-epyc-1c").is_dir() or not (data / "dlrm-cpu-heldout-4242").is_dir():
        pytest.skip("committed CPU bundle or campaign missing")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    m = load_measurements([str(data / "cpu-amd-epyc-1c")])
    m.table = m.table.groupby("op", group_keys=False).head(25)  # a small real fit: the model is what matters
    calibrate(m, CalibrationConfig(name="cpu", lodo=False), tracking_uri=uri)
    capsys.readouterr()
    assert main(["bench", "validate", str(data / "dlrm-cpu-heldout-4242"), "--model", "cpu",
                 "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "'local-cpu'" in err and "--system" in err and "--bundle" not in err
    assert "cpu-amd-epyc-1c-gloo" in err


def test_nan_tolerance_and_negative_split_seed_are_refused(capsys):
    """`--k nan` made every config a tolerant miss silently; `--split-seed -1` failed after the predictions with
    "ValueError: expected non-negative integer"."""
    from hybrid.cli.main import main

    with pytest.raises(InvalidInputError, match="finite number >= 0"):
        sharding_success(table(), predicted="predicted_ms", k=float("nan"))
    with pytest.raises(InvalidInputError, match="non-negative integer"):
        half_split(["a", "b", "c", "d"], seed=-1)
    assert main(["bench", "validate", "results.csv", "--roofline", "--k", "nan"]) == 2
    assert "--k must be a finite number" in capsys.readouterr().err
    assert main(["bench", "validate", "results.csv", "--roofline", "--split-seed", "-1"]) == 2
    assert "--split-seed" in capsys.readouterr().err


def test_overheads_file_refuses_booleans(tmp_path):
    from hybrid.bench.validate import load_overheads

    (tmp_path / "ov.json").write_text('{"kernel_launch_us": true}')
    with pytest.raises(InvalidInputError, match="true/false for kernel_launch_us"):
        load_overheads(tmp_path / "ov.json")
    (tmp_path / "ov.json").write_text('{"overheads_us": {"kernel_launch_us": 7, "bogus_us": 1}}')
    with pytest.raises(InvalidInputError, match="unknown overhead"):
        load_overheads(tmp_path / "ov.json")
    (tmp_path / "ov.json").write_text('{"kernel_launch_us": "7"}')
    assert load_overheads(tmp_path / "ov.json").to_dict()["kernel_launch_us"] == 7.0


def test_saved_host_constants_are_strict_json(tmp_path):
    """A constant the fit cannot identify has an infinite standard error; the saved file said `Infinity`, which
    Python reads but strict JSON parsers (RFC 8259: JavaScript's JSON.parse, Go's encoding/json) refuse. It is
    null there now, as in every `--json` output, and the file still loads."""
    import json
    import math

    from hybrid.bench.validate import ValidationReport, load_overheads, save_fitted_overheads

    report = ValidationReport(
        table=table(), errors={}, success={},
        in_sample={"overheads_us": {"kernel_launch_us": 5.0, "optimizer_step_us": 80.0},
                   "fit": {"params": {"optimizer_step_us": 80.0}, "se_us": {"optimizer_step_us": math.inf,
                                                                            "launch_us": float("nan")},
                           "identified": {"optimizer_step_us": False}},
                   "geomean_pct": 4.0})
    path = save_fitted_overheads(report, tmp_path / "ov.json", source="runs.csv")

    def refuse(token: str) -> None:
        raise ValueError(f"not strict JSON: {token}")

    doc = json.loads(path.read_text(), parse_constant=refuse)
    assert doc["fit"]["se_us"] == {"optimizer_step_us": None, "launch_us": None}
    assert doc["fit"]["identified"] == {"optimizer_step_us": False}
    assert load_overheads(path).to_dict()["optimizer_step_us"] == 80.0


@pytest.mark.parametrize("column", ["config_file", "plan_file"])
def test_cli_refuses_results_without_stored_file_columns_before_fitting(tmp_path, capsys, column):
    """A results table without config_file / plan_file (the columns naming the stored YAMLs each row is predicted
    on) was read, the predictor fitted, then failed with a bare "KeyError: 'config_file'". The missing column is
    named, before any fit."""
    from hybrid.cli.main import main as cli_main

    cols = {"config_name": "c000", "plan_name": "sg", "ranks": 2, "median_ms": 50.0, "std_ms": 1.0,
            "config_file": "configs/c000.yaml", "plan_file": "plans/c000/sg.yaml"}
    cols.pop(column)
    pd.DataFrame([cols]).to_csv(tmp_path / "results.csv", index=False)
    assert cli_main(["bench", "validate", str(tmp_path / "results.csv"), "--roofline", "--system",
                     "DGX-A100"]) == 2
    err = capsys.readouterr().err
    assert column in err and "KeyError" not in err and "[1/2]" not in err


def test_validate_campaign_names_a_blank_stored_file_cell(tmp_path):
    """An empty config_file cell was read as the file 'nan' beside the table."""
    from hybrid.bench.validate import EnginePredictor, validate_campaign
    from hybrid.engine.costs import RooflineCostModel
    from hybrid.errors import HybridError
    from hybrid.hardware.catalog import default_catalog

    pd.DataFrame([{"config_name": "c000", "plan_name": "sg", "ranks": 2, "median_ms": 50.0, "std_ms": 1.0,
                   "config_file": "", "plan_file": "plans/c000/sg.yaml"}]).to_csv(tmp_path / "results.csv",
                                                                                   index=False)
    cat = default_catalog()
    pred = EnginePredictor("roofline", RooflineCostModel(cat), cat, system="DGX-A100")
    with pytest.raises(HybridError, match=r"row 2: column config_file is empty"):
        validate_campaign(tmp_path / "results.csv", pred)
