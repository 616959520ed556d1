"""Calibration runs through the library API: the new-GPU workflow (fit without a device, register, then adapt
the registered model to a few measurements of that device), the pickle-free model format, and reports."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_tracking_support import neusight_table

from hybrid.errors import ModelNotFoundError
from hybrid.reports.html import render_report, write_report
from hybrid.tracking.calibrate import CalibrationConfig, calibrate, stratified_split, summary_metrics
from hybrid.tracking.evaluation import prediction_frame, summarize
from hybrid.tracking.registry import download_model, load_predictor, resolve_version
from hybrid.tracking.store import open_store

NEW_GPU = "T4"


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, shared_datasets):
    """A model calibrated on every GPU except the T4, and a T4 table it has never seen."""
    root = tmp_path_factory.mktemp("adapt")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    table = neusight_table(shared_datasets, max_rows=700, files=("bmm.csv", "ln.csv"))
    result = calibrate(table, CalibrationConfig(name="gpus", exclude_devices=(NEW_GPU,), lodo=False),
                       tracking_uri=uri)
    new = table[table["device"] == NEW_GPU].reset_index(drop=True)
    return {"uri": uri, "result": result, "new": new, "root": root}


def test_base_run_never_saw_the_new_gpu(base_run):
    res = base_run["result"]
    assert res.version == 1
    assert NEW_GPU not in res.summary["data"]["rows_per_device"]
    assert NEW_GPU not in set(res.predictions["device"])
    assert res.summaries["random"]["model"]["n_rows"] > 0


def test_adapting_the_registered_model_to_a_new_gpu(base_run):
    new = base_run["new"]
    few = new.sample(40, random_state=0).reset_index(drop=True)
    rest = new.drop(new.sample(40, random_state=0).index).reset_index(drop=True)
    res = calibrate(few, CalibrationConfig(name="gpus-t4", base="gpus"), tracking_uri=base_run["uri"])
    assert res.version == 1 and res.summary["base"] == {"name": "gpus", "version": 1,
                                                       "run_id": base_run["result"].run_id}
    adapt = res.summaries["adapt"]
    assert set(adapt) == {"model", "base", "roofline"}
    assert adapt["model"]["n_rows"] == 20  # half the 40 rows held out from adaptation
    metrics = summary_metrics(res.summaries)
    assert {"adapt.base.geomean_pct", "adapt.model.device.T4.geomean_pct"} <= set(metrics)
    # the fitted few-shot constants (scale, per-op shift, chosen form) are MLflow params of the run
    params = open_store(base_run["uri"]).client().get_run(res.run_id).data.params
    forms = {k: v for k, v in params.items() if k.startswith("adapt.") and k.endswith(f".{NEW_GPU}.form")}
    assert forms and set(forms.values()) <= {"scale", "shift", "affine"}, params
    # the run's base tag names the version `--base gpus` resolved to (the latest, which moves once gpus gets a
    # version 2), and the base's run; it held the reference as typed
    tags = open_store(base_run["uri"]).client().get_run(res.run_id).data.tags
    assert tags["hybrid.base"] == "gpus/1" and tags["hybrid.base_run_id"] == base_run["result"].run_id, tags
    assert params["base"] == "gpus"  # the configuration as given stays a parameter
    assert res.summary["config"]["lodo"] is False  # an adaptation has no leave-one-device-out split (it said true)
    key = next(iter(forms))[: -len(".form")]
    assert float(params[f"{key}.scale"]) > 0 and np.isfinite(float(params[f"{key}.shift_us"]))
    assert res.summary["predictor"]["adaptation"]

    # on T4 rows used by neither step, the adapted model beats the unadapted base model
    base = load_predictor("gpus", tracking_uri=base_run["uri"]).predictor
    adapted = load_predictor("gpus-t4/1", tracking_uri=base_run["uri"]).predictor
    frame = prediction_frame(rest, adapted.predict(rest), "unseen", base=base.predict_time(rest))
    assert summarize(frame, "model")["geomean_pct"] < summarize(frame, "base")["geomean_pct"]
    # the registered base itself is untouched by the adaptation
    again = load_predictor("gpus/1", tracking_uri=base_run["uri"]).predictor
    assert np.allclose(again.predict_time(rest), base.predict_time(rest))


def test_adapting_with_the_shift_strategy(base_run):
    few = base_run["new"].sample(40, random_state=1).reset_index(drop=True)
    calibrate(few, CalibrationConfig(name="gpus-t4-shift", base="gpus", adapt_strategy="shift"),
              tracking_uri=base_run["uri"])
    adapted = load_predictor("gpus-t4-shift/1", tracking_uri=base_run["uri"]).predictor
    assert NEW_GPU in {d for per in adapted.shifts.values() for d in per} and not adapted.offsets


def test_registered_model_is_pickle_free_and_loads_through_pyfunc(base_run):
    import mlflow.pyfunc

    store = open_store(base_run["uri"])
    client = store.client()
    mv = resolve_version(client, "models:/gpus/latest")
    tmp = Path(tempfile.mkdtemp())
    try:
        pred_dir = download_model(client, mv, tmp)
        files = [p for p in pred_dir.parent.parent.rglob("*") if p.is_file()]
        assert files and not [p for p in files if p.suffix in (".pkl", ".pickle", ".joblib", ".cloudpickle")]
        assert (pred_dir.parent.parent / "pyfunc_model.py").is_file()
        model = mlflow.pyfunc.load_model(str(pred_dir.parent.parent))
        new = base_run["new"].head(25)
        out = model.predict(new)
        direct = base_run["result"].predictor.predict(new)
        assert np.allclose(out["time_us"].to_numpy(), direct["time_us"].to_numpy(), rtol=1e-6)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_missing_model_and_version_errors(base_run):
    with pytest.raises(ModelNotFoundError, match="no registered model named 'other'.*gpus"):
        load_predictor("other", tracking_uri=base_run["uri"])
    with pytest.raises(ModelNotFoundError, match="no version 7; versions: 1"):
        load_predictor("gpus/7", tracking_uri=base_run["uri"])


def test_a_registered_model_without_versions_is_not_called_unregistered(tmp_path):
    """A name registered with no versions (created by hand, or every version deleted) was "no registered model
    named 'empty'; registered models: empty, ...": an error contradicting itself."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    open_store(uri).client().create_registered_model("empty")
    MlflowClient(uri).create_registered_model("other")
    with pytest.raises(ModelNotFoundError, match="model 'empty' is registered but has no versions") as err:
        load_predictor("empty", tracking_uri=uri)
    assert "no registered model" not in str(err.value)
    with pytest.raises(ModelNotFoundError, match="no registered model named 'nope'; registered models: empty, other"):
        load_predictor("nope", tracking_uri=uri)


def test_stratified_split_covers_groups_and_is_reproducible(base_run):
    table = base_run["new"]
    tr, te = stratified_split(table, 0.25, seed=3)
    assert len(np.intersect1d(tr, te)) == 0 and len(tr) + len(te) == len(table)
    assert set(table.iloc[te]["op"]) == set(table["op"])
    tr2, te2 = stratified_split(table, 0.25, seed=3)
    assert np.array_equal(te, te2)
    assert abs(len(te) / len(table) - 0.25) < 0.05


def test_report_renders_and_writes_atomically(base_run, tmp_path):
    res = base_run["result"]
    text = render_report(res.predictions, title="t", meta={"k": "<v>"})
    assert text.count("data:image/png;base64,") == 4  # figures for the one held-out split
    assert "&lt;v&gt;" in text and "<v>" not in text  # escaped
    assert "class=\"better\"" in text
    path = write_report(text, tmp_path / "sub" / "r.html")
    assert path.read_text() == text and [p.name for p in path.parent.iterdir()] == ["r.html"]
    # an empty split list is refused with a clear error rather than an empty page
    with pytest.raises(Exception, match="no rows"):
        summarize(res.predictions.iloc[:0])
    assert isinstance(res.predictions, pd.DataFrame)


def test_input_refused_during_the_fit_leaves_no_run(tmp_path):
    """Every GEMM faster than its datasheet peak (times in ms where us belong, say) is refused while fitting: the
    error names it and the store keeps no run of it (deleted, not a FAILED run with no parameters)."""
    from hybrid.errors import InvalidInputError

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sizes = np.array([1024, 2048, 4096, 8192] * 10)
    table = pd.DataFrame({"device": "H100-SXM", "op": "gemm", "dtype": "fp16", "b": 1, "m": sizes, "n": sizes,
                          "k": sizes, "time_us": sizes.astype(float) ** 3 * 2 / 989e12 * 1e6 / 1000.0,
                          "framework": "pytorch"})
    with pytest.raises(InvalidInputError, match="faster than its device's datasheet peak"):
        calibrate(table, CalibrationConfig(name="ms", lodo=False), tracking_uri=uri)
    client = open_store(uri).client()
    exp = client.get_experiment_by_name(CalibrationConfig(name="ms").experiment)
    assert exp is None or client.search_runs([exp.experiment_id]) == []
    # refused while fitting (a split leaves nothing to fit): the run it had started is deleted
    few = table.assign(time_us=table["time_us"] * 2000.0).head(3)
    with pytest.raises(InvalidInputError):
        calibrate(few, CalibrationConfig(name="few", holdout_devices=("H100-SXM",)), tracking_uri=uri)
    exp = client.get_experiment_by_name(CalibrationConfig(name="few").experiment)
    assert exp is None or client.search_runs([exp.experiment_id]) == []


def test_implausible_groups_are_left_out_of_every_split_and_tagged(tmp_path):
    """A group timed in ms where us belong beside plausible rows: left out before the splits (none of its rows is
    scored), with a warning that asks about the unit, and the run says what was left out."""
    from hybrid.errors import DataQualityWarning

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rng = np.random.default_rng(0)
    sizes = rng.choice([512, 1024, 2048, 4096, 8192], size=(120, 3))
    roof = 2.0 * sizes.prod(axis=1) / 989e12 * 1e6
    good = pd.DataFrame({"device": "H100-SXM", "op": "gemm", "dtype": "fp16", "b": 1, "m": sizes[:, 0],
                         "n": sizes[:, 1], "k": sizes[:, 2], "time_us": roof * 1.4 + 8.0, "framework": "pytorch"})
    bad = good.head(30).assign(device="L4", time_us=lambda d: d["time_us"] / 1000.0)
    with pytest.warns(DataQualityWarning, match="L4 fp16 .*milliseconds or seconds"):
        res = calibrate(pd.concat([good, bad], ignore_index=True), CalibrationConfig(name="mixed", lodo=False),
                        tracking_uri=uri)
    assert "L4" not in set(res.predictions["device"]) and len(res.predictions) > 0
    run = open_store(uri).client().get_run(res.run_id)
    assert run.data.tags["hybrid.left_out_implausible"].startswith("L4 fp16 (pytorch): 30 rows")
    # the run's summary and its report's header say so too: the report's row counts leave them out
    assert len(res.summary["left_out"]) == 1 and "L4 fp16 (pytorch): 30 rows" in res.summary["left_out"][0]
    assert "<tr><th>left out</th><td>left out of the fit and of every score, GEMMs faster than the datasheet" in (
        res.report_html)


def test_envelope_rows_read_the_predictor_summary():
    """The report's unseen-GPU table: per correction and kind, the bounding GPUs and the kind's margin (the pooled
    one where the kind has none of its own, 1 where nothing was saved)."""
    from hybrid.reports.html import envelope_rows, envelope_table

    summary = {"corrections": {
        "kernel-xgb-gemm": {"envelope_devices": {"gemm|fp32|compute": ["T4", "P4"], "gemm|bf16|memory": ["H200"]},
                            "envelope_margins": {"gemm|fp32|compute": 1.234, "*": 1.1}},
        "kernel-xgb-pointwise": {"envelope_devices": {"norm|fp32|memory": ["H100-SXM"]}},
        "collective-sigmoid": {}}}
    rows = envelope_rows(summary)
    assert [(r["kind of op"], r["fitted GPUs (least efficient first)"], r["margin"]) for r in rows] == [
        ("gemm|fp32|compute", "T4, P4", "1.23x"), ("gemm|bf16|memory", "H200", "1.10x"),
        ("norm|fp32|memory", "H100-SXM", "1.00x")]
    assert envelope_rows({}) == [] and envelope_table([]) == ""
    assert "<td>T4, P4</td><td>1.23x</td>" in envelope_table(rows)


def test_a_negative_seed_is_refused_before_any_run(tmp_path):
    """numpy's generators take no negative seed: `calibrate --seed -1` died deep in the split with 'ValueError:
    expected non-negative integer', and `evaluate --max-rows N --seed -1` too; both are input errors naming the
    seed, refused before a run exists."""
    from hybrid.cli.main import main
    from hybrid.errors import InvalidInputError
    from hybrid.tracking.inputs import subsample

    with pytest.raises(InvalidInputError, match="seed must be a non-negative integer, got -1"):
        CalibrationConfig(name="x", seed=-1)
    table = pd.DataFrame({"device": ["T4"] * 4, "op": ["gemm"] * 4})
    with pytest.raises(InvalidInputError, match="seed must be a non-negative integer, got -1"):
        subsample(table, 2, seed=-1)
    assert len(subsample(table, 2, seed=2**40)) == 2
    csv = tmp_path / "t.csv"
    csv.write_text("device,op,dtype,time_us,m,n,k\nT4,gemm,fp32,900,1024,1024,1024\nT4,gemm,fp32,120,512,512,512\n")
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    assert main(["calibrate", str(csv), "--name", "x", "--seed", "-1", "--tracking-uri", uri, "-q"]) == 2
    assert not (tmp_path / "store.db").exists()
    assert main(["evaluate", str(csv), "--model", "roofline", "--max-rows", "1", "--seed", "-1"]) == 2


@pytest.mark.parametrize("argv", [["quickstart"], ["profile", "--quick"], ["bench", "campaign", "OUT"],
                                  ["llm", "serve", "llama3-8b", "--device", "H100-SXM"]])
def test_every_seed_option_refuses_a_negative_seed_before_it_starts(argv, tmp_path, capsys, monkeypatch):
    """Every ``--seed`` feeds numpy's generators, which take no negative seed: refused as the options are read
    (quickstart loaded every bundle first, then failed), with the option named."""
    from hybrid.cli.main import main

    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--seed", "-1"]) == 2
    err = capsys.readouterr().err
    assert "--seed" in err and "-1" in err
    assert not any(tmp_path.iterdir())  # nothing written: no store, no bundle, no output


def test_excluding_a_device_the_data_does_not_have_is_an_error(tmp_path, shared_datasets):
    """`--exclude-device V100` resolves to the catalog's V100-SXM2-16GB; NeuSight's V100 is V100-PCIE-32GB, so nothing
    was excluded and the "never seen" GPU stayed in the fit without a word (`--holdout-device` names such a device
    as having no rows). Now the same error, naming what the name resolved to and the data's devices, and no run."""
    from hybrid.errors import InvalidInputError

    table = neusight_table(shared_datasets, max_rows=200, files=("bmm.csv",))
    assert "V100-PCIE-32GB" in set(table["device"])
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(InvalidInputError, match=r"exclude device\(s\) V100 \(V100-SXM2-16GB\) have no rows, so "
                                                r"nothing would be excluded; devices in the data: .*V100-PCIE-32GB"):
        calibrate(table, CalibrationConfig(name="x", exclude_devices=("V100", "T4"), lodo=False), tracking_uri=uri)
    assert not (tmp_path / "mlflow.db").exists()  # refused before any run


def test_no_lodo_with_holdout_devices_is_refused(tmp_path):
    """`--no-lodo --holdout-device P4` ran the leave-one-device-out split on the P4 anyway (its `lodo` and `adapted`
    splits in the run), although --no-lodo says it skips that split; the contradiction is now refused up front."""
    from hybrid.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match=r"holdout devices choose the leave-one-device-out folds, which "
                                                r"lodo=False \(--no-lodo\) skips"):
        CalibrationConfig(name="x", holdout_devices=("P4",), lodo=False)
    assert CalibrationConfig(name="x", holdout_devices=("P4",)).lodo  # either alone is fine
    assert not CalibrationConfig(name="x", lodo=False).holdout_devices
