"""The calibrate -> registry -> evaluate / predict --model -> report flow through the real CLI, on real NeuSight
measurements, with real XGBoost fits and a real MLflow SQLite store in a temporary directory."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_run import run_cli as cli
from test_tracking_support import last_json, neusight_table, write_csv

from hybrid.data.schema import read_table
from hybrid.tracking.inputs import table_digest

ERROR_KEYS = {"n_rows", "geomean_pct", "mape_pct", "median_pct", "p90_pct"}




@pytest.fixture(scope="module")
def flow(tmp_path_factory, shared_datasets):
    """Two calibrations of the same name in one store (versions 1 and 2)."""
    root = tmp_path_factory.mktemp("calib")
    uri = f"sqlite:///{root / 'store' / 'mlflow.db'}"
    csv = write_csv(neusight_table(shared_datasets, max_rows=600), root / "neusight.csv")
    rc, out1, err = cli(["calibrate", str(csv), "--name", "kern", "--tracking-uri", uri, "--json", "-q",
                         "--holdout-device", "T4", "--holdout-device", "P100-PCIE-16GB"])
    assert rc == 0, err
    rc, out2, err = cli(["calibrate", str(csv), "--name", "kern", "--tracking-uri", uri, "--json", "-q",
                         "--no-lodo", "--seed", "1"])
    assert rc == 0, err
    return {"root": root, "uri": uri, "csv": csv, "first": last_json(out1), "second": last_json(out2)}


def test_calibrate_records_run_and_registers_versions(flow):
    from mlflow import MlflowClient

    first, second = flow["first"], flow["second"]
    assert (first["version"], second["version"]) == (1, 2)
    assert first["model"] == "models:/kern/1"
    # with held-out devices: their rows unseen (lodo) and after adapting to 5-50 of them (adapted)
    assert set(first["errors"]) == {"random", "lodo", "adapted", "train"}
    assert set(second["errors"]) == {"random", "train"}
    assert first["errors"]["adapted"]["model"]["geomean_pct"] < first["errors"]["lodo"]["model"]["geomean_pct"]
    by_shots = first["errors"]["adapted"]["model"]["by_shots"]
    assert set(by_shots) <= {"5 rows", "10 rows", "20 rows", "50 rows"} and "5 rows" in by_shots
    assert {"kernel-xgb-gemm", "kernel-xgb-pointwise"} <= set(first["corrections"])

    client = MlflowClient(tracking_uri=flow["uri"], registry_uri=flow["uri"])
    run = client.get_run(first["run_id"])
    assert run.info.status == "FINISHED"
    params, metrics = run.data.params, run.data.metrics
    table = read_table(flow["csv"])
    assert params["data_sha256"] == table_digest(table)
    assert params["name"] == "kern" and params["seed"] == "0"
    assert params["holdout_devices"] == "P100-PCIE-16GB,T4"
    assert int(params["rows.op.bmm"]) == int((table["op"] == "bmm").sum())
    assert int(params["rows.device.T4"]) == int((table["device"] == "T4").sum())
    assert any(k.startswith("correction.kernel-xgb-gemm.") for k in params)
    assert any(k.startswith("correction.kernel-xgb-pointwise.") for k in params)
    assert "adapted.model.shots.5 rows.geomean_pct" in metrics
    for key in ("random.model.geomean_pct", "random.roofline.geomean_pct", "random.model.p90_pct",
                "random.model.op.gemm.mape_pct", "random.roofline.op.norm.median_pct",
                "lodo.model.device.T4.geomean_pct", "lodo.roofline.device.T4.geomean_pct",
                "train.model.op.softmax.geomean_pct"):
        assert key in metrics, key
        assert 0 <= metrics[key] < 1e4
    assert metrics["lodo.n_rows"] == int(table["device"].isin(["T4", "P100-PCIE-16GB"]).sum())
    assert run.inputs.dataset_inputs[0].dataset.digest == table_digest(table)[:32]

    def walk(path: str = "") -> list[str]:
        out = []
        for f in client.list_artifacts(run.info.run_id, path):
            out += walk(f.path) if f.is_dir else [f.path]
        return out

    arts = walk()
    for a in ("summary.json", "report.html", "predictions/random.csv", "predictions/lodo.csv",
              "plots/random_pred_vs_measured.png", "plots/lodo_error_cdf.png", "model/MLmodel",
              "model/pyfunc_model.py"):
        assert a in arts, a
    assert any(a.startswith("model/artifacts/predictor/") for a in arts)
    assert not [a for a in arts if a.endswith((".pkl", ".pickle", ".joblib"))], "artifacts must be pickle-free"

    versions = {int(v.version): v for v in client.search_model_versions("name = 'kern'")}
    assert set(versions) == {1, 2}
    assert versions[1].run_id == first["run_id"] and versions[2].run_id == second["run_id"]


def test_evaluate_json_keys_and_model_beats_roofline_on_its_training_family(flow):
    rc, out, err = cli(["evaluate", str(flow["csv"]), "--model", "kern", "--json", "--tracking-uri", flow["uri"]])
    assert rc == 0, err
    model = json.loads(out)
    assert set(model) == ERROR_KEYS | {"by_op", "by_device", "by_method", "rows_in_training_data", "coverage_pct",
                                       "rows_without_interval", "rows_interval_borrowed", "coverage_by_band"}
    assert model["rows_without_interval"] == 0 <= model["rows_interval_borrowed"] <= model["n_rows"]
    # in-sample rows: every one on the seen band (the model fitted every device of this table)
    assert list(model["coverage_by_band"]) == ["seen"] and model["coverage_by_band"]["seen"]["n_rows"] == model["n_rows"]
    assert sum(g["n_rows"] for g in model["by_method"].values()) == model["n_rows"]
    assert set(model["by_method"]) <= {"kernel-xgb", "roofline", "alpha-beta", "collective-sigmoid",
                                       "collective-transfer", "embedding-xgb"}
    assert 0 <= model["coverage_pct"] <= 100  # share of rows inside their 80% interval
    n = len(read_table(flow["csv"]))
    assert model["n_rows"] == n
    assert model["rows_in_training_data"] == n  # kern/2's final fit used every row of this table
    assert {"gemm", "norm", "softmax"} <= set(model["by_op"])
    assert len(model["by_device"]) >= 5
    for group in model["by_op"].values():
        assert set(group) == ERROR_KEYS
    for group in model["by_device"].values():
        assert set(group) == ERROR_KEYS | {"coverage_pct"}
    assert 0 < model["geomean_pct"] <= model["median_pct"] * 1.5 and model["median_pct"] <= model["p90_pct"]
    assert sum(g["n_rows"] for g in model["by_op"].values()) == n

    rc, out, err = cli(["evaluate", str(flow["csv"]), "--model", "roofline", "--json"])
    assert rc == 0, err
    roof = json.loads(out)
    assert roof["n_rows"] == n
    # the calibrated model beats the analytical baseline on the GEMMs it was fitted on
    assert model["by_op"]["gemm"]["geomean_pct"] < roof["by_op"]["gemm"]["geomean_pct"]
    assert model["geomean_pct"] < roof["geomean_pct"]
    # its text table labels the roofline's columns as the roofline's ("hybrid geomean%" read as a fitted model)
    rc, out, err = cli(["evaluate", str(flow["csv"]), "--model", "roofline"])
    assert rc == 0, err
    header = next(line for line in out.splitlines() if "geomean%" in line)
    assert "roofline geomean%" in header and "hybrid" not in header, header

    # an explicit older version gives different (but also sane) figures
    rc, out, _ = cli(["evaluate", str(flow["csv"]), "--model", "models:/kern/1", "--json",
                      "--tracking-uri", flow["uri"]])
    assert rc == 0 and json.loads(out)["n_rows"] == n


def test_evaluate_warns_when_rows_were_in_the_training_data(flow, tmp_path):
    rc, out, err = cli(["evaluate", str(flow["csv"]), "--model", "kern", "--tracking-uri", flow["uri"]])
    n = len(read_table(flow["csv"]))
    assert rc == 0
    warning = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and f"{n:,} of {n:,} rows (100%) were in the training data of models:/kern/2" \
        in warning[0], err
    # half the rows with other measured times: only the untouched half is flagged
    table = read_table(flow["csv"])
    table.loc[table.index[: n // 2], "time_us"] *= 1.37
    other = write_csv(table, tmp_path / "other.csv")
    rc, out, err = cli(["evaluate", str(other), "--model", "kern", "--json", "--tracking-uri", flow["uri"]])
    assert rc == 0 and json.loads(out)["rows_in_training_data"] == n - n // 2
    rc, out, err = cli(["evaluate", str(flow["csv"]), "--model", "roofline", "--json"])
    assert rc == 0 and "rows_in_training_data" not in json.loads(out) and "warning" not in err


def test_report_on_tables_warns_when_rows_were_in_the_training_data(flow, tmp_path):
    """`hybrid report --table` evaluates like `hybrid evaluate`: it said nothing when the table was the model's own
    training data, so its HTML showed in-sample errors as if they were a test."""
    n = len(read_table(flow["csv"]))
    html = tmp_path / "r.html"
    rc, out, err = cli(["report", "--model", "kern", "--table", str(flow["csv"]), "-o", str(html),
                        "--tracking-uri", flow["uri"]])
    assert rc == 0, err
    assert f"warning: {n:,} of {n:,} rows (100%) were in the training data of models:/kern/2" in err
    assert "in-sample" in html.read_text()


def test_an_adapted_model_counts_its_bases_training_rows_as_in_sample(flow, tmp_path):
    """A model adapted with --base was fitted on its base's rows too, but its run's `train` split holds only the new
    rows: evaluated on its base's training table it said `rows_in_training_data: 0` and warned of nothing, so the
    check the docs give for comparing two models passed on in-sample errors."""
    table = read_table(flow["csv"])
    n = len(table)
    new = table[table["device"] == "T4"].head(24).copy()
    new["time_us"] *= 1.21  # the new GPU's own measurements (none of them a row of the base's table)
    few = write_csv(new.reset_index(drop=True), tmp_path / "few.csv")
    rc, _, err = cli(["calibrate", str(few), "--name", "kern-adapted", "--base", "kern", "--tracking-uri",
                      flow["uri"], "-q"])
    assert rc == 0, err
    # `hybrid models` names the version it was adapted from (the tag said "kern", which means kern/3 once there is
    # one), as the run's summary does
    rc, out, err = cli(["models", "--json", "--tracking-uri", flow["uri"]])
    tags = [v["tags"] for m in json.loads(out)["models"] if m["name"] == "kern-adapted" for v in m["versions"]]
    assert rc == 0 and [t["base"] for t in tags] == ["kern/2"], out
    rc, out, err = cli(["models", "--tracking-uri", flow["uri"]])
    assert next(r for r in out.splitlines() if r.startswith("kern-adapted ")).split()[-1] == "kern/2", out
    rc, out, err = cli(["evaluate", str(flow["csv"]), "--model", "kern-adapted", "--json", "--tracking-uri",
                        flow["uri"]])
    assert rc == 0, err
    assert json.loads(out)["rows_in_training_data"] == n  # kern/2 was fitted on every row of this table
    assert f"{n:,} of {n:,} rows (100%) were in the training data of models:/kern/2" in err
    assert "which models:/kern-adapted/1 was adapted from" in err
    rc, out, err = cli(["evaluate", str(few), "--model", "kern-adapted", "--json", "--tracking-uri", flow["uri"]])
    assert rc == 0 and json.loads(out)["rows_in_training_data"] == len(new)  # its own rows, as before
    html = tmp_path / "r.html"
    rc, _, err = cli(["report", "--model", "kern-adapted", "--table", str(flow["csv"]), "-o", str(html), "-q",
                      "--tracking-uri", flow["uri"]])
    assert rc == 0 and "in-sample" in html.read_text() and "models:/kern/2" in err


def test_models_lists_the_registered_models(flow, tmp_path):
    """`hybrid models` lists what --model accepts (there was no way to list it but a failed --model)."""
    rc, out, err = cli(["models", "--tracking-uri", flow["uri"]])
    assert rc == 0, err
    line = next(row for row in out.splitlines() if row.startswith("kern "))
    assert line.split()[:3] == ["kern", "2", "2"] and flow["second"]["run_id"] in line
    rc, out, err = cli(["models", "--json", "--tracking-uri", flow["uri"]])
    listed = json.loads(out)["models"]
    assert rc == 0 and [v["version"] for m in listed if m["name"] == "kern" for v in m["versions"]] == [1, 2]
    rc, out, err = cli(["models", "--tracking-uri", f"sqlite:///{tmp_path / 'none' / 'mlflow.db'}"])
    assert rc == 2 and "no tracking store" in err and not (tmp_path / "none").exists()


def test_evaluate_roofline_needs_no_store(flow, tmp_path, monkeypatch):
    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    pred = tmp_path / "out" / "pred.csv"
    rc, out, err = cli(["evaluate", str(flow["csv"]), "--model", "roofline", "-o", str(pred)])
    assert rc == 0, err
    assert "gemm" in out and "rows" in out
    assert not (tmp_path / "home").exists(), "the roofline baseline must not create a tracking store"
    frame = pd.read_csv(pred)
    assert len(frame) == len(read_table(flow["csv"]))
    assert np.allclose(frame["predicted_us"], frame["roofline_us"])
    assert (frame["method"] == "roofline").all()
    assert not list((tmp_path / "out").glob(".*tmp")), "no temporary files left behind"


def test_evaluate_writes_parquet_predictions_for_a_parquet_name(tmp_path):
    """`evaluate -o pred.parquet` writes Parquet (as canonical tables are written), not CSV text under that name."""
    table = tmp_path / "t.csv"
    table.write_text("device,op,dtype,time_us,m,n,k\nH100-SXM,gemm,fp16,40,1024,1024,1024\n"
                     "T4,gemm,fp32,900,1024,1024,1024\n")
    for name in ("pred.parquet", "pred.csv"):
        rc, _, err = cli(["evaluate", str(table), "--model", "roofline", "-o", str(tmp_path / name)])
        assert rc == 0, err
    frame = pd.read_parquet(tmp_path / "pred.parquet")
    assert frame["device"].tolist() == ["H100-SXM", "T4"] and (frame["predicted_us"] > 0).all()
    csv = pd.read_csv(tmp_path / "pred.csv")
    assert list(frame.columns) == list(csv.columns)
    assert np.allclose(frame[["measured_us", "predicted_us"]], csv[["measured_us", "predicted_us"]])


def test_rows_in_a_dtype_their_device_lacks_are_warned_of_in_tables(tmp_path):
    """`predict gemm --device T4 --dtype fp8` warns that the T4 has no fp8 units (timed at its fp16 peak), but a
    table of such rows was scored by `evaluate`, `report --table` and `predict table` without a word, although the
    README states every fallback as a `warning:` line and in `--json` output."""
    table = tmp_path / "t.csv"
    table.write_text("device,op,dtype,time_us,m,n,k\nT4,gemm,fp8,80,1024,1024,1024\nT4,gemm,fp8,160,1024,1024,2048\n"
                     "P100-PCIE-16GB,gemm,bf16,900,1024,1024,1024\nA100-PCIE-40GB,gemm,bf16,30,1024,1024,1024\n")
    expected = ["1 bf16 row(s) on P100-PCIE-16GB: P100-PCIE-16GB has no bf16 units: it runs converted to fp32",
                "2 fp8 row(s) on T4: it has no fp8 units: timed at its fp16 peak"]  # by device
    rc, out, err = cli(["evaluate", str(table), "--model", "roofline", "--json"])
    assert rc == 0, err
    notes = json.loads(out)["dtype_fallbacks"]
    assert len(notes) == 2 and all(n.startswith(e) for n, e in zip(notes, expected, strict=True))
    warned = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warned) == 2 and "T4" in "".join(warned) and "A100" not in err
    rc, out, err = cli(["predict", "table", str(table), "-o", str(tmp_path / "p.csv"), "--json"])
    assert rc == 0 and len(json.loads(out)["dtype_fallbacks"]) == 2 and err.count("warning:") == 2, err
    rc, _, err = cli(["report", "--model", "roofline", "--table", str(table), "-o", str(tmp_path / "r.html"), "-q"])
    assert rc == 0 and err.count("warning:") == 2 and "no fp8 units" in (tmp_path / "r.html").read_text(), err
    # none where every row runs on units of its own dtype
    table.write_text("device,op,dtype,time_us,m,n,k\nA100-PCIE-40GB,gemm,bf16,30,1024,1024,1024\n")
    rc, out, err = cli(["evaluate", str(table), "--model", "roofline", "--json"])
    assert rc == 0 and "dtype_fallbacks" not in json.loads(out) and "warning" not in err


def test_evaluate_says_rows_faster_than_the_datasheet_peak(tmp_path):
    """GEMMs faster than the datasheet peak allows (`data validate` warns of them, every fit leaves them out) were
    scored by `evaluate` without a word; now a `warning:` line with their count and the `implausible` key."""
    table = tmp_path / "t.csv"
    table.write_text("device,op,dtype,time_us,m,n,k\nH100-SXM,gemm,fp16,20,4096,4096,4096\n"
                     "H100-SXM,gemm,fp16,30,2048,4096,4096\nA100-SXM4-80GB,gemm,fp16,200,1024,1024,1024\n")
    rc, out, err = cli(["evaluate", str(table), "--model", "roofline", "--json"])
    assert rc == 0, err
    said = json.loads(out)["implausible"]
    assert said["rows"] == 2 and [(g["device"], g["dtype"], g["rows"]) for g in said["groups"]] == [
        ("H100-SXM", "fp16", 2)]
    warned = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and warned[0].startswith("warning: 2 of 3 rows are GEMMs faster than the datasheet peak")
    rc, out, err = cli(["evaluate", str(table), "--model", "roofline"])  # the text form says it too
    assert rc == 0 and "warning: 2 of 3 rows" in err
    table.write_text("device,op,dtype,time_us,m,n,k\nA100-SXM4-80GB,gemm,fp16,200,1024,1024,1024\n")
    rc, out, err = cli(["evaluate", str(table), "--model", "roofline", "--json"])
    assert rc == 0 and "implausible" not in json.loads(out) and "warning" not in err


def test_evaluate_says_collectives_far_faster_than_the_fabric(tmp_path):
    """Collectives far faster than their fabric allows (a log in ms, or the wrong system: calibration leaves them
    out) were scored by `evaluate` without a word, unlike GEMMs over the datasheet peak; now a `warning:` line
    with their count and the `implausible_collectives` key."""
    table = tmp_path / "t.csv"
    table.write_text("device,op,dtype,size_bytes,n_ranks,n_nodes,system,time_us,m,n,k\n"
                     "H100-SXM,all_reduce,bf16,1048576,8,1,DGX-H100,0.03,,,\n"
                     "A100-SXM4-80GB,gemm,fp16,,,,,200,1024,1024,1024\n")
    rc, out, err = cli(["evaluate", str(table), "--model", "roofline", "--json"])
    assert rc == 0, err
    said = json.loads(out)
    assert "implausible" not in said  # the GEMM row is plausible
    groups = said["implausible_collectives"]["groups"]
    assert said["implausible_collectives"]["rows"] == 1 and [(g["group"], g["op"], g["rows"]) for g in groups] == [
        ("DGX-H100", "all_reduce", 1)] and groups[0]["fastest_over_roofline"] > 100
    warned = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and warned[0].startswith("warning: 1 of 2 rows are collectives far faster than the "
                                                     "fabric allows") and "DGX-H100 all_reduce" in warned[0], err
    # `data validate` says them too (it checked GEMMs only), its key beside `implausible`
    rc, out, err = cli(["data", "validate", str(table), "--json"])
    assert rc == 0, err
    said = json.loads(out)
    assert said["implausible"]["rows"] == 0 and said["implausible_collectives"]["rows"] == 1
    assert [g["group"] for g in said["implausible_collectives"]["groups"]] == ["DGX-H100"]
    rc, out, err = cli(["data", "validate", str(table)])
    assert rc == 0 and "warning: 1 of 2 rows are collectives far faster than the fabric allows" in err, err
    table.write_text("device,op,dtype,size_bytes,n_ranks,n_nodes,system,time_us\n"
                     "H100-SXM,all_reduce,bf16,1048576,8,1,DGX-H100,30\n")
    rc, out, err = cli(["evaluate", str(table), "--model", "roofline", "--json"])
    assert rc == 0 and "implausible_collectives" not in json.loads(out) and "warning" not in err


def test_report_on_tables_says_implausible_rows_as_evaluate_does(tmp_path):
    """`report --table` scored GEMMs faster than the datasheet peak and collectives far faster than their fabric
    without a word, where `evaluate` warns of both: now the same `warning:` lines, and a line each in the
    report's header."""
    table = tmp_path / "t.csv"
    table.write_text("device,op,dtype,size_bytes,n_ranks,n_nodes,system,time_us,m,n,k\n"
                     "H100-SXM,all_reduce,bf16,1048576,8,1,DGX-H100,0.03,,,\n"
                     "H100-SXM,gemm,fp16,,,,,20,4096,4096,4096\n"
                     "A100-SXM4-80GB,gemm,fp16,,,,,200,1024,1024,1024\n")
    html = tmp_path / "r.html"
    rc, _, err = cli(["report", "--model", "roofline", "--table", str(table), "-o", str(html), "-q"])
    assert rc == 0, err
    warned = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warned) == 2, err
    assert warned[0].startswith("warning: 1 of 3 rows are GEMMs faster than the datasheet peak"), err
    assert warned[1].startswith("warning: 1 of 3 rows are collectives far faster than the fabric allows"), err
    page = html.read_text()
    assert "<th>implausible GEMMs</th><td>1 of 3 rows are GEMMs faster than the datasheet peak" in page
    assert "<th>implausible collectives</th><td>1 of 3 rows are collectives far faster" in page
    assert "DGX-H100 all_reduce: 1 rows" in page
    table.write_text("device,op,dtype,time_us,m,n,k\nA100-SXM4-80GB,gemm,fp16,200,1024,1024,1024\n")
    rc, _, err = cli(["report", "--model", "roofline", "--table", str(table), "-o", str(html), "-q"])
    assert rc == 0 and "warning" not in err and "implausible" not in html.read_text(), err


def test_evaluate_json_has_coverage_for_every_device_even_without_intervals(tmp_path):
    """`coverage_pct` is promised overall and per device: with no intervals (the roofline) both are null, rather
    than the overall key null and the per-device key missing."""
    table = tmp_path / "t.csv"
    table.write_text("device,op,dtype,time_us,m,n,k\nH100-SXM,gemm,fp16,40,1024,1024,1024\n"
                     "T4,gemm,fp32,900,1024,1024,1024\n")
    rc, out, err = cli(["evaluate", str(table), "--model", "roofline", "--json"])
    assert rc == 0, err
    res = json.loads(out)
    assert res["coverage_pct"] is None
    assert {d: v["coverage_pct"] for d, v in res["by_device"].items()} == {"H100-SXM": None, "T4": None}


def test_unknown_model_is_one_line_error(flow):
    for ref, needle in (("nope", "no registered model named 'nope'"), ("kern/9", "has no version 9"),
                        ("kern/zero", "bad model version")):
        rc, out, err = cli(["evaluate", str(flow["csv"]), "--model", ref, "--tracking-uri", flow["uri"]])
        assert rc == 2 and out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], err
    rc, _, err = cli(["evaluate", str(flow["csv"]), "--model", "nope", "--tracking-uri", flow["uri"]])
    assert "kern" in err  # the known names are listed


def test_bad_inputs_are_clear_errors(flow, tmp_path):
    truncated = tmp_path / "trunc.csv"
    text = Path(flow["csv"]).read_text().splitlines()
    truncated.write_text("\n".join(text[:5] + [text[5][: len(text[5]) // 3]]) + "\n")
    rc, _, err = cli(["calibrate", str(truncated), "--name", "x", "--tracking-uri", flow["uri"], "-q"])
    assert rc == 2 and err.startswith("error:") and "trunc.csv" in err and len(err.strip().splitlines()) == 1
    rc, _, err = cli(["calibrate", str(flow["csv"]), "--name", "roofline", "--tracking-uri", flow["uri"], "-q"])
    assert rc == 2 and "reserved" in err
    rc, _, err = cli(["calibrate", str(flow["csv"]), "--name", "k", "--holdout-device", "H100-SXM5-80GB",
                      "--tracking-uri", flow["uri"], "-q"])
    assert rc == 2 and "no rows" in err
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=flow["uri"])
    before = {r.info.run_id for e in client.search_experiments() for r in client.search_runs([e.experiment_id])}
    rc, _, err = cli(["calibrate", str(flow["csv"]), "--name", "k9", "--holdout-device", "H2000",
                      "--tracking-uri", flow["uri"], "-q"])
    assert rc == 2 and "unknown device 'H2000'" in err
    after = {r.info.run_id for e in client.search_experiments() for r in client.search_runs([e.experiment_id])}
    assert after == before  # a typo leaves no FAILED run behind


def test_predict_with_model_adds_roofline_and_method(flow):
    base = ["predict", "gemm", "-d", "T4", "-m", "512", "-n", "1024", "-k", "768", "--dtype", "fp32", "--json"]
    rc, out, err = cli(base)
    assert rc == 0, err
    plain = json.loads(out)
    rc, out, err = cli([*base, "--model", "kern/2", "--tracking-uri", flow["uri"]])
    assert rc == 0, err
    corr = json.loads(out)
    assert set(plain) <= set(corr) and {"roofline_us", "method"} <= set(corr)
    assert corr["model"] == "models:/kern/2"
    assert corr["method"] == "kernel-xgb"
    assert corr["roofline_us"] == pytest.approx(plain["time_us"], rel=1e-9)
    assert corr["time_us"] > 0 and corr["time_us"] != pytest.approx(plain["time_us"], rel=1e-6)


def test_report_is_self_contained_html(flow, tmp_path):
    out_html = tmp_path / "r" / "report.html"
    rc, out, err = cli(["report", "--model", "kern/1", "-o", str(out_html), "--tracking-uri", flow["uri"]])
    assert rc == 0, err
    text = out_html.read_text()
    assert text.startswith("<!DOCTYPE html>") and "Per device" in text and "leave-one-device-out" in text
    # the unseen-GPU envelope of the GEMM model (NeuSight's fp32 GEMMs on several GPUs): kinds, GPUs, margins
    envelope = text.split("GPUs never measured: the envelope")[1]
    row = re.search(r"<td>kernel-xgb-gemm</td><td>gemm\|fp32\|compute</td><td>([^<]+)</td><td>(\d+\.\d\d)x</td>",
                    envelope)
    assert row and len(row.group(1).split(", ")) >= 2 and float(row.group(2)) >= 1.0, envelope[:600]
    imgs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert len(imgs) >= 8  # 4 figures for each held-out split (random, lodo)
    assert base64.b64decode(imgs[0])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<script" not in text and "http://" not in text.split("<body>")[1].split("tracking URI")[0]
    # a run's report shows the figures the run drew of the same predictions (not drawn again: 14-22 s of a report)
    from hybrid.reports.plots import STANDARD_FIGURES
    from hybrid.tracking.runs import read_run

    logged = read_run(flow["first"]["run_id"], tracking_uri=flow["uri"]).images
    assert {"random", "lodo"} <= set(logged) and all(set(v) == set(STANDARD_FIGURES) for v in logged.values())
    assert sorted(base64.b64decode(i) for i in imgs) == sorted(png for split in logged.values()
                                                               for png in split.values())

    rc, _, err = cli(["report", "--run", flow["second"]["run_id"], "-o", str(tmp_path / "r2.html"),
                      "--tracking-uri", flow["uri"]])
    assert rc == 0, err
    rc, _, err = cli(["report", "-o", str(tmp_path / "r3.html"), "--tracking-uri", flow["uri"]])
    assert rc == 2 and "exactly one of" in err


def test_training_overlap_keys_are_formatted_per_distinct_value(tmp_path):
    """``row_keys`` (what ``evaluate`` matches against a run's training rows) formats each distinct number once:
    the same keys as formatting every row, NaN / <NA> as empty, stable through a CSV round trip."""
    from hybrid.tracking.evaluation import in_training_data, row_keys

    rng = np.random.default_rng(0)
    n = 5000
    frame = pd.DataFrame({
        "device": rng.choice(["T4", "P4"], n), "op": rng.choice(["bmm", "linear", None], n),
        "dtype": "fp32", "size": pd.array(np.where(rng.random(n) < 0.1, None, rng.integers(1, 50, n)), dtype="Int64"),
        "measured_us": np.where(rng.random(n) < 0.05, np.nan, rng.random(n) * 1000 / 3)})

    def per_row(f: pd.DataFrame) -> pd.Series:
        parts = []
        for c in ("device", "op", "dtype", "direction", "size", "measured_us"):
            if c not in f.columns:
                continue
            col = f[c]
            if pd.api.types.is_numeric_dtype(col):
                parts.append(col.map(lambda v: "" if v is pd.NA or v != v else f"{float(v):.12g}"))
            else:
                parts.append(col.astype("string").fillna("").astype(str))
        key = parts[0]
        for p in parts[1:]:
            key = key + "\x1f" + p
        return key

    keys = row_keys(frame)
    pd.testing.assert_series_equal(keys, per_row(frame), check_names=False)
    assert keys.str.endswith("\x1f").sum() == int(frame["measured_us"].isna().sum())
    frame.to_csv(tmp_path / "t.csv", index=False)
    again = pd.read_csv(tmp_path / "t.csv")
    assert in_training_data(frame, again).all()
    assert not in_training_data(frame.assign(measured_us=frame["measured_us"] * 1.001), again)[
        frame["measured_us"].notna().to_numpy()].any()


def test_a_table_file_inside_a_bundle_uses_its_catalog(tmp_path, monkeypatch):
    """`data validate` and `evaluate` read a bundle's measurements.csv alike: the bundle's catalog.toml names its
    device (here one no packaged catalog has), whether the directory or the file inside it is given."""
    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    bundle = Path(__file__).resolve().parents[1] / "datasets" / "cpu-amd-epyc-1c"
    table = read_table(bundle / "measurements.csv", _bundle_cat(bundle))
    small = tmp_path / "b"
    small.mkdir()
    (small / "catalog.toml").write_text((bundle / "catalog.toml").read_text().replace("cpu-amd-epyc-1c", "cpu-test-1c"))
    table.head(40).assign(device="cpu-test-1c").to_csv(small / "measurements.csv", index=False)
    rc, _, err = cli(["data", "validate", str(small / "measurements.csv")])
    assert rc == 0, err
    for arg in (small, small / "measurements.csv"):
        rc, out, err = cli(["evaluate", str(arg), "--model", "roofline", "--json"])
        assert rc == 0, err
        assert json.loads(out)["n_rows"] == 40
    # the same file outside its bundle: the device is unknown, named in a one-line error
    (tmp_path / "alone.csv").write_text((small / "measurements.csv").read_text())
    rc, _, err = cli(["evaluate", str(tmp_path / "alone.csv"), "--model", "roofline"])
    assert rc == 2 and "unknown device 'cpu-test-1c'" in err


def test_a_device_only_the_model_knows_is_read_in_a_plain_table(tmp_path, monkeypatch):
    """A model fitted on a bundle keeps its device's catalog entry (`predict gemm --device` takes it), but a plain
    table of more rows of that device was "unknown device" to `evaluate`, `report --table`, `predict table` and
    `calibrate --base`: the tables were checked against the packaged catalog before the model was loaded."""
    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    bundle = Path(__file__).resolve().parents[1] / "datasets" / "cpu-amd-epyc-1c"
    table = read_table(bundle / "measurements.csv", _bundle_cat(bundle)).assign(device="cpu-test-1c")
    table = table[table["op"].isin(["gemm", "elementwise", "layernorm", "softmax"])]
    small = tmp_path / "b"
    small.mkdir()
    (small / "catalog.toml").write_text((bundle / "catalog.toml").read_text().replace("cpu-amd-epyc-1c", "cpu-test-1c"))
    table.sample(80, random_state=0).to_csv(small / "measurements.csv", index=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rc, _, err = cli(["calibrate", str(small), "--name", "prof", "--no-lodo", "-q", "--tracking-uri", uri])
    assert rc == 0, err
    new = table.drop(table.sample(80, random_state=0).index).sample(12, random_state=1)
    for c in ("time_us", "time_us_min", "time_us_max", "time_us_std"):  # re-measured: none of them a fitted row
        new[c] = new[c] * 1.1
    alone = tmp_path / "alone.csv"
    new.to_csv(alone, index=False)
    rc, out, err = cli(["evaluate", str(alone), "--model", "prof", "--json", "--tracking-uri", uri])
    assert rc == 0, err
    res = json.loads(out)
    assert res["n_rows"] == 12 and list(res["by_device"]) == ["cpu-test-1c"] and res["rows_in_training_data"] == 0
    assert "warning" not in err  # the model's own entry, not another description of the device
    rc, out, err = cli(["predict", "table", str(alone), "-o", str(tmp_path / "p.csv"), "--model", "prof", "--json",
                        "--tracking-uri", uri])
    assert rc == 0 and json.loads(out)["n_rows"] == 12, err
    rc, _, err = cli(["report", "--model", "prof", "--table", str(alone), "-o", str(tmp_path / "r.html"), "-q",
                      "--tracking-uri", uri])
    assert rc == 0 and (tmp_path / "r.html").is_file(), err
    rc, _, err = cli(["calibrate", str(alone), "--name", "prof-again", "--base", "prof", "-q", "--tracking-uri", uri])
    assert rc == 0, err
    # without a model that knows it, the device is still unknown, in a one-line error
    rc, _, err = cli(["evaluate", str(alone), "--model", "roofline"])
    assert rc == 2 and "unknown device 'cpu-test-1c'" in err and len(err.strip().splitlines()) == 1


def _bundle_cat(path: Path):
    from hybrid.data.bundle import bundle_catalog

    return bundle_catalog([path])


def test_slow_stages_show_on_stderr_and_leave_json_stdout_clean(tmp_path, shared_datasets):
    """`calibrate` names each step of recording the run and registering the model, and `report` its load, plot,
    render and write stages, on stderr; stdout keeps only the JSON (calibrate --json) or the result line."""
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    csv = write_csv(neusight_table(shared_datasets, max_rows=300), tmp_path / "k.csv")
    rc, out, err = cli(["calibrate", str(csv), "--name", "staged", "--tracking-uri", uri, "--json", "--no-lodo"])
    assert rc == 0, err
    assert json.loads(out)["version"] == 1  # stdout is the JSON object and nothing else
    for step in ("log ", "log the dataset", "save the model", "upload the model", "register a version of staged",
                 "write predictions and draw plots", "render the report", "upload predictions, plots and report"):
        assert f"record the run and register the model: {step}" in err, (step, err)
    rc, out, err = cli(["report", "--model", "staged", "--tracking-uri", uri, "-o", str(tmp_path / "r.html")])
    assert rc == 0, err
    assert out.startswith("report written to ") and out.count("\n") == 1
    for step in ("report: load the run of staged", "report: render the HTML", "report: write "):
        assert step in err, (step, err)
    assert "report: plot split" not in err  # the run's own figures, not drawn again
    rc, out, err = cli(["report", "--model", "staged", "--table", str(csv), "--tracking-uri", uri,
                        "-o", str(tmp_path / "t.html")])
    assert rc == 0, err
    assert out.startswith("report written to ")
    assert "report: load 1 table(s)" in err and "report: predict 300 rows" in err and "report: plot split all" in err
    # --quiet: no progress line
    rc, out, err = cli(["report", "--model", "staged", "--tracking-uri", uri, "-o", str(tmp_path / "q.html"), "-q"])
    assert rc == 0 and "report:" not in err


def _cpu_bundle(root: Path, name: str, rows: int, fp32_tflops: float | None = None) -> Path:
    """A bundle of ``rows`` rows of the committed CPU profile, its device renamed ``cpu-test-1c``; with
    ``fp32_tflops`` its catalog.toml describes another machine (another fp32 GEMM peak) under that name."""
    bundle = Path(__file__).resolve().parents[1] / "datasets" / "cpu-amd-epyc-1c"
    table = read_table(bundle / "measurements.csv", _bundle_cat(bundle))
    out = root / name
    out.mkdir(parents=True)
    toml = (bundle / "catalog.toml").read_text().replace("cpu-amd-epyc-1c", "cpu-test-1c")
    if fp32_tflops is not None:
        toml = toml.replace("fp32 = 0.0973741", f"fp32 = {fp32_tflops}")
    (out / "catalog.toml").write_text(toml)
    table.head(rows).assign(device="cpu-test-1c").to_csv(out / "measurements.csv", index=False)
    return out


def test_a_fitted_device_keeps_the_models_entry_and_another_description_is_a_warning(tmp_path):
    """A table whose bundle describes a device the model was fitted on unlike the model's entry (a profile of this
    VM under the name of the committed bundle's, both `cpu-amd-epyc-1c`; or the same VM re-profiled under load:
    fp32 peak 0.054 vs 0.107 TFLOP/s two minutes apart) is predicted with the model's entry, which its corrections
    are relative to (measured: 32.0% -> 7.1% geomean on such a re-profile), and evaluate / report say so; a
    re-profile within a few percent says nothing. Calibrating on both bundles says they become one device."""
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    fitted = _cpu_bundle(tmp_path, "fitted", 400)
    rc, _, err = cli(["calibrate", str(fitted), "--name", "cpu", "--tracking-uri", uri, "--no-lodo", "-q"])
    assert rc == 0, err
    as_fitted = _cpu_bundle(tmp_path, "as-fitted", 60)
    other = _cpu_bundle(tmp_path, "other", 60, fp32_tflops=0.0543)  # the same 60 fp32 GEMM-family rows
    same = _cpu_bundle(tmp_path, "same", 60, fp32_tflops=0.0990)  # +1.7%: the same machine re-profiled
    preds = {}
    for name, bundle in (("as-fitted", as_fitted), ("other", other)):
        rc, out, err = cli(["evaluate", str(bundle), "--model", "cpu", "--tracking-uri", uri, "--json",
                            "-o", str(tmp_path / f"{name}.csv")])
        assert rc == 0, err
        assert json.loads(out)["n_rows"] == 60
        preds[name] = pd.read_csv(tmp_path / f"{name}.csv")
    # the model's entry prices both alike (with the table's entry every GEMM's roofline would be 1.8x slower)
    np.testing.assert_allclose(preds["other"]["predicted_us"], preds["as-fitted"]["predicted_us"], rtol=1e-9)
    np.testing.assert_allclose(preds["other"]["roofline_us"], preds["as-fitted"]["roofline_us"], rtol=1e-9)
    needle = "describes device 'cpu-test-1c' unlike the entry models:/cpu/1 was fitted with (fp32 peak 0.0543 vs 0.0974"
    assert f"warning: the measured table's catalog {needle}" in err and "--device-name" in err, err
    assert "predictions use the model's entry" in err
    assert "DataQualityWarning" not in err  # a `warning:` line, not Python's warning format
    rc, _, err = cli(["report", "--model", "cpu", "--table", str(other), "--tracking-uri", uri, "-q",
                      "-o", str(tmp_path / "r.html")])
    assert rc == 0 and needle in err, err
    rc, _, err = cli(["evaluate", str(same), "--model", "cpu", "--tracking-uri", uri, "--json"])
    assert rc == 0 and "describes device" not in err, err
    rc, _, err = cli(["data", "validate", str(fitted), str(other)])
    assert rc == 0, err
    assert (f"warning: {other} describes device 'cpu-test-1c' unlike {fitted} (fp32 peak 0.0543 vs 0.0974 TFLOP/s): "
            "their rows are fitted as one device") in err, err
    rc, _, err = cli(["data", "validate", str(fitted), str(same)])
    assert rc == 0 and "describes device" not in err, err


def test_evaluate_and_report_print_data_warnings_as_warning_lines(flow, tmp_path):
    """A table named twice is read once: evaluate and report say so as one `warning:` line (as calibrate does),
    not in Python's warning format (file, line number, source line)."""
    twice = [str(flow["csv"]), str(Path(flow["csv"]).parent / "." / Path(flow["csv"]).name)]
    rc, out, err = cli(["evaluate", *twice, "--model", "roofline", "--json"])
    assert rc == 0, err
    assert json.loads(out)["n_rows"] == len(read_table(flow["csv"]))
    assert "warning: 1 measurement table(s) named more than once; each is read once" in err, err
    rc, _, err = cli(["report", "--model", "kern/1", "--table", twice[0], "--table", twice[1], "-q",
                      "--tracking-uri", flow["uri"], "-o", str(tmp_path / "r.html")])
    assert rc == 0 and "warning: 1 measurement table(s) named more than once" in err, err


def test_report_clears_its_progress_line_before_an_error(flow, tmp_path):
    """The stage line is cleared before the `error:` line (on a terminal the error would else follow
    "report: load the run of nope ..." on the same line), and no HTML file is left."""
    out_html = tmp_path / "r.html"
    rc, out, err = cli(["report", "--model", "nope", "--tracking-uri", flow["uri"], "-o", str(out_html)])
    assert rc == 2 and out == "" and not out_html.exists()
    head, _, tail = err.rpartition("error: ")
    assert "no registered model named 'nope'" in tail
    assert "report: load the run of nope" in head and head.endswith("\r"), repr(err)
    assert head.rstrip("\r").rpartition("\r")[2].strip() == "", repr(err)  # the last drawn state is blank


def test_models_lists_every_registered_model_past_one_page(tmp_path):
    """The registry was read one page at a time: with more than 1,000 registered models (a shared server's), `hybrid
    models` listed the first 1,000 and left the others out without a word, and `--model` of one of those said no
    model of that name was registered. Every page is read now."""
    from hybrid.tracking.store import open_store

    db = tmp_path / "mlflow.db"
    client = open_store(str(db)).client()
    names = [f"m{i:04d}" for i in range(1001)]
    for name in names:
        client.create_registered_model(name)
    rc, out, err = cli(["models", "--json", "--tracking-uri", db])
    assert rc == 0, err
    assert [m["name"] for m in json.loads(out)["models"]] == names
    rc, _, err = cli(["predict", "gemm", "-d", "T4", "-m", "8", "-n", "8", "-k", "8", "--model", names[-1],
                      "--tracking-uri", db])
    assert rc == 2 and f"model {names[-1]!r} is registered but has no versions" in err, err


@pytest.mark.parametrize("option, says", [
    (["--holdout-device", "T4"], "error: holdout devices choose the leave-one-device-out folds of a new calibration"),
    (["--test-fraction", "0.5"], "error: --test-fraction is the random hold-out of a new calibration"),
])
def test_options_an_adaptation_ignored_are_refused(tmp_path, option, says):
    """`calibrate --base` took `--holdout-device` and `--test-fraction` and did nothing with them: an adaptation has
    no leave-one-device-out folds and holds out half of its new rows whatever the share. Both are refused up front,
    before the base is loaded or a store touched."""
    from hybrid.tracking.calibrate import CalibrationConfig

    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    bundle = Path(__file__).resolve().parents[1] / "datasets" / "cpu-amd-epyc-1c"
    rc, out, err = cli(["calibrate", str(bundle), "--name", "m", "--base", "gpus", *option, "--tracking-uri", uri,
                        "-q"])
    assert rc == 2 and not out and err.startswith(says) and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "store").exists()
    with pytest.raises(ValueError, match="holdout devices"):
        CalibrationConfig(name="m", base="gpus", holdout_devices=("T4",))


@pytest.mark.parametrize("name", ["", " "])
def test_an_empty_experiment_name_is_refused_before_any_work(tmp_path, name):
    """`--experiment ' '` calibrated into a new MLflow experiment named ' ' (and `''` failed in MLflow only after
    the tables were read): both are refused up front, no experiment created."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    bundle = Path(__file__).resolve().parents[1] / "datasets" / "cpu-amd-epyc-1c"
    rc, out, err = cli(["calibrate", str(bundle), "--name", "m", "--experiment", name, "--tracking-uri", uri, "-q"])
    assert rc == 2 and not out
    assert err.strip() == f"error: experiment name must not be empty, got {name!r}"
    if (tmp_path / "mlflow.db").exists():
        from mlflow import MlflowClient

        assert name not in {e.name for e in MlflowClient(tracking_uri=uri).search_experiments()}


def test_a_site_system_on_a_packaged_gpu_is_read_in_tables_with_its_model(tmp_path, monkeypatch):
    """A model calibrated with a site catalog file (HYBRID_CATALOG) whose system runs a packaged GPU keeps that
    system in its saved catalog, and loads without the file; but `evaluate`, `predict table`, `report --table` and
    `calibrate --base` then failed before reading a row: "system 'Lab-Node' names unknown device 'A100-SXM4-40GB'"
    (the extra entries were made a catalog of their own, without the packaged GPU they name)."""
    from hybrid.cli.evaluate import catalog_for_tables
    from hybrid.corrections import CollectiveSigmoid, HybridPredictor
    from hybrid.hardware.catalog import default_catalog

    monkeypatch.delenv("HYBRID_CATALOG", raising=False)
    site = tmp_path / "site.toml"
    site.write_text('[systems.Lab-Node]\ndevice = "A100-SXM4-40GB"\ngpus_per_node = 4\nintra_node_gbps = 200\n'
                    'inter_node_gbps = 25\nmax_nodes = 8\nsource = "our lab"\n')
    sizes = np.array([2.0 ** k for k in range(8, 30, 2)])
    table = pd.DataFrame({"device": "A100-SXM4-40GB", "system": "Lab-Node", "op": "all_reduce", "dtype": "fp32",
                          "size_bytes": sizes, "n_ranks": 4, "n_nodes": 1,
                          "time_us": 20.0 + sizes * 1.5 / 150e3})
    pred = HybridPredictor(default_catalog(extra=[site]), [CollectiveSigmoid()]).fit(table)
    pred.save(tmp_path / "model")
    loaded = HybridPredictor.load(tmp_path / "model")  # the packaged catalog: the system from the saved one
    assert loaded.catalog.system("Lab-Node").device == "A100-SXM4-40GB"
    assert loaded.predict(table)["method"].eq("collective-sigmoid").all()

    class Registered:  # what `load_registered` gives: the loaded model under `.predictor`
        predictor = loaded

    cat = catalog_for_tables(Registered())
    assert cat.system("Lab-Node").device == "A100-SXM4-40GB" and "H100-SXM" in cat.devices


def test_help_says_an_adaptation_has_no_lodo_split():
    """`calibrate --base M --no-lodo` is accepted and changes nothing (an adaptation runs no leave-one-device-out
    split); the help said only 'Skip the leave-one-device-out split', as if --base runs had one."""
    from click.testing import CliRunner

    from hybrid.cli.main import cli

    out = " ".join(CliRunner().invoke(cli, ["calibrate", "--help"], terminal_width=200).output.split())
    assert "Not needed with --base: an adaptation has no such split" in out, out


EXAMPLE_DLRM = Path(__file__).resolve().parents[1] / "experiments" / "configs" / "dlrm_example.yaml"


def test_host_bound_note_says_what_sets_the_host_costs(flow):
    """The example DLRM is host-bound; its host costs are the engine's per-launch constants, which a calibrated
    --model changes only through the eager dispatch it measured on that GPU (since 2026-12-07; the note once said a
    calibrated --model, "measured host costs", would change the prediction when the host stayed 1170 us, then that no
    --model changes them)."""
    from hybrid.engine.overheads import measured_dispatch_us

    rc, out, err = cli(["simulate", str(EXAMPLE_DLRM), "--json"])
    assert rc == 0, err
    plain = json.loads(out)
    rc, out, err = cli(["simulate", str(EXAMPLE_DLRM), "--json", "--model", "kern/2", "--tracking-uri", flow["uri"]])
    assert rc == 0, err
    corr = json.loads(out)
    from hybrid.cli.simulate import load_cost_model

    model, _ = load_cost_model("kern/2", flow["uri"])
    measured = measured_dispatch_us(model, [corr["device"]])
    same = [r["host_us"] for r in corr["ranks"]] == [r["host_us"] for r in plain["ranks"]]
    assert same == (measured is None or measured == 15.0), (measured, corr["ranks"], plain["ranks"])
    for data in (plain, corr):
        note = next(n for n in data["notes"] if n.startswith("the iteration is host-bound"))
        assert "sets one launch to the eager dispatch it measured" in note and "measured host costs" not in note


def test_shard_says_when_the_calibrated_model_gives_no_interval(flow):
    """A kernel-only model has no collective band: simulate warned that the iteration has no interval, shard left its
    "80% interval ms" column empty and said nothing."""
    args = ["shard", str(EXAMPLE_DLRM), "--strategy", "size_greedy", "--time-budget", "0", "--model", "kern/2",
            "--tracking-uri", flow["uri"]]
    rc, out, err = cli([*args, "--json"])
    assert rc == 0, err
    data = json.loads(out)
    assert "iteration_us_low" not in data["plans"][0]
    assert data["interval_note"].startswith("no 80% interval")
    assert "warning: no 80% interval" in err
    rc, out, err = cli(args)
    assert rc == 0 and "warning: no 80% interval" in err
    rc, out, err = cli(["shard", str(EXAMPLE_DLRM), "--strategy", "size_greedy", "--time-budget", "0", "--json"])
    assert rc == 0 and "interval_note" not in json.loads(out)  # the roofline: no interval asked for


def test_a_failing_command_still_says_the_data_warnings_that_explain_it(tmp_path):
    """`calibrate` on a table whose `dtpye` header is a typo of `dtype` failed with "every training row is a GEMM
    faster than its device's datasheet peak" (the fp16 rows priced as fp32) and dropped the warning that named the
    typo: data-quality warnings were printed only when the command succeeded. They now come before the error."""
    src = tmp_path / "typo.csv"
    src.write_text("device,op,dtpye,m,n,k,time_us\nH100,gemm,fp16,8192,8192,8192,1200\n")
    rc, out, err = cli(["calibrate", str(src), "--name", "typo", "--no-lodo", "-q",
                        "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"])
    lines = err.strip().splitlines()
    assert rc == 2 and lines[-1].startswith("error: every training row is a GEMM faster"), err
    assert any(line.startswith("warning: ") and "did you mean 'dtype'" in line for line in lines[:-1]), err
