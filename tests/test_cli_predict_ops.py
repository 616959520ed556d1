"""``hybrid predict op`` (one kernel of any op family by its schema columns) and ``hybrid predict table`` (every row
of a canonical table, written with its predictions): the numbers are those of ``roofline()`` /
``HybridPredictor.predict`` on the same rows, errors name what is wrong, and nothing is written on an error."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from cli_run import run_cli as cli
from test_tracking_support import neusight_table, write_csv

from hybrid.ops.roofline import roofline


@pytest.fixture(scope="module")
def small_model(tmp_path_factory, shared_datasets):
    """A small real calibrated model (300 NeuSight bmm / layernorm / softmax rows, real XGBoost fits, 80% intervals)
    in a temporary MLflow store, and its training table."""
    root = tmp_path_factory.mktemp("pred_ops")
    uri = f"sqlite:///{root / 'store' / 'mlflow.db'}"
    csv = write_csv(neusight_table(shared_datasets, max_rows=300), root / "neusight.csv")
    rc, _, err = cli(["calibrate", str(csv), "--name", "small", "--tracking-uri", uri, "--json", "-q", "--no-lodo"])
    assert rc == 0, err
    return {"uri": uri, "csv": csv}


ROWS = {  # op, KEY=VALUE arguments, the same row as the schema holds it
    "layernorm": (["rows=16384", "hidden=8192", "direction=bwd"], {"rows": 16384, "hidden": 8192, "direction": "bwd"}),
    "elementwise": (["elements=64M", "variant=gelu"], {"elements": 2**26, "variant": "gelu"}),
    "attention": (["batch=4", "heads=32", "kv_heads=8", "q_len=4096", "kv_len=4096", "head_dim=128", "causal=true"],
                  {"batch": 4, "heads": 32, "kv_heads": 8, "q_len": 4096, "kv_len": 4096, "head_dim": 128,
                   "causal": True}),
    "embedding_bag": (["num_embeddings=1000000", "embedding_dim=128", "pooling_factor=20", "batch_size=2048",
                       "index_dist=zipf", "zipf_alpha=1.1", "direction=bwd"],
                      {"num_embeddings": 1_000_000, "embedding_dim": 128, "pooling_factor": 20.0, "batch_size": 2048,
                       "index_dist": "zipf", "zipf_alpha": 1.1, "direction": "bwd"}),
    "conv2d": (["batch=32", "in_channels=64", "out_channels=128", "height=56", "width=56", "kernel_h=3", "kernel_w=3",
                "stride=2", "padding=1"],
               {"batch": 32, "in_channels": 64, "out_channels": 128, "height": 56, "width": 56, "kernel_h": 3,
                "kernel_w": 3, "stride": 2, "padding": 1}),
}


@pytest.mark.parametrize("op", list(ROWS))
def test_predict_op_is_the_roofline_of_the_same_row(op):
    args, row = ROWS[op]
    rc, out, err = cli(["predict", "op", op, "-d", "H100", "--dtype", "bf16", *args, "--json"])
    assert rc == 0, err
    got = json.loads(out)
    want = roofline(pd.DataFrame([{"op": op, "dtype": "bf16", **row}]), device="H100-SXM").iloc[0]
    assert got["device"] == "H100-SXM" and got["op"] == op and got["model"] == "roofline"
    assert got["time_us"] == pytest.approx(float(want["time_us"]), rel=1e-12)
    assert got["flops"] == pytest.approx(float(want["flops"]), rel=1e-12)
    assert got["bytes"] == pytest.approx(float(want["bytes"]), rel=1e-12)
    assert got["bound"] == str(want["bound"])
    assert {k: got[k] for k in row} == pytest.approx(row)  # the shape, as the schema read it
    assert {"footprint_bytes", "fits_memory", "tflops_achieved", "arithmetic_intensity"} <= set(got)


def test_predict_op_gemm_prints_what_predict_gemm_prints():
    rc, out, err = cli(["predict", "op", "gemm", "-d", "H100", "--dtype", "bf16", "m=8192", "n=4096", "k=1024",
                        "--json"])
    assert rc == 0, err
    via_op = json.loads(out)
    rc, out, err = cli(["predict", "gemm", "-d", "H100", "--dtype", "bf16", "-m", "8192", "-n", "4096", "-k", "1024",
                        "--json"])
    assert rc == 0, err
    assert {k: v for k, v in via_op.items() if k not in ("m", "n", "k")} == json.loads(out)


EMB = ["embedding_bag", "num_embeddings=100000", "embedding_dim=128", "pooling_factor=20", "batch_size=4096",
       "direction=bwd"]


@pytest.mark.parametrize("args, needles", [
    (["layrnorm", "rows=4", "hidden=4"], ["unknown op 'layrnorm'", "layernorm", "softmax", "conv2d"]),
    (["softmax", "rows=4"], ["softmax needs hidden=", "rows, hidden"]),
    (["attention", "batch=1", "heads=8"], ["q_len=", "kv_len=", "head_dim="]),
    (["softmax", "rows=4", "hidden=8", "m=3"], ["does not take m", "rows, hidden", "direction"]),
    (["softmax", "rows=-4", "hidden=8"], ["rows=-4", "must be positive"]),
    (["softmax", "rows=4.5", "hidden=8"], ["rows=4.5", "integer"]),
    (["softmax", "rows=4", "hidden=8", "direction=up"], ["direction=up", "fwd"]),
    (["attention", "batch=1", "heads=6", "kv_heads=4", "q_len=8", "kv_len=8", "head_dim=64"], ["kv_heads", "multiple"]),
    (["softmax", "rows", "hidden=8"], ["'rows'", "KEY=VALUE"]),
    (["softmax", "rows=4", "rows=8", "hidden=8"], ["rows given twice"]),
    (["all_reduce", "size_bytes=4096", "n_ranks=8"], ["hybrid predict collective"]),
    # the roofline read zipf_alpha alone (index_dist=zipf without it priced uniform indices, index_dist=uniform
    # with it a skew) while the embedding model reads index_dist: refused, as the DLRM table configs refuse them
    # a NaN typed for an optional column was the column left out (flops_per_element=nan: the variant's default,
    # printed as "nan"), for a shape column "missing value (NaN/empty)"
    (["elementwise", "elements=1M", "flops_per_element=nan"], ["flops_per_element='nan'", "not a number"]),
    (["softmax", "rows=NaN", "hidden=8"], ["rows='NaN'", "not a number"]),
    # a "gemv" of 64 rows was priced as a GEMM (roofline) and as a GEMV (the model's is_gemv feature reads the op)
    (["gemv", "m=64", "n=4096", "k=4096"], ["gemv m=64 n=4096", "m=1 or n=1", "predict op gemm"]),
    ([*EMB, "index_dist=zipf"], ["index_dist=zipf", "zipf_alpha > 0"]),
    ([*EMB, "index_dist=zipf", "zipf_alpha=0"], ["index_dist=zipf", "zipf_alpha > 0"]),
    ([*EMB, "index_dist=uniform", "zipf_alpha=1.1"], ["zipf_alpha=1.1", "index_dist uniform contradicts zipf_alpha 1.1"]),
])
def test_predict_op_errors_name_what_is_wrong(args, needles):
    rc, out, err = cli(["predict", "op", *args, "-d", "H100"])
    assert rc == 2 and out == ""
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, (needle, err)


def test_predict_op_with_a_model_is_the_predictor_on_the_same_row(small_model):
    from hybrid.tracking.registry import load_predictor

    rc, out, err = cli(["predict", "op", "layernorm", "-d", "T4", "rows=4096", "hidden=1024", "--json",
                        "--model", "small", "--tracking-uri", small_model["uri"]])
    assert rc == 0, err
    got = json.loads(out)
    predictor = load_predictor("small", tracking_uri=small_model["uri"]).predictor
    want = predictor.predict(pd.DataFrame([{"device": "T4", "op": "layernorm", "dtype": "fp32", "rows": 4096,
                                            "hidden": 1024}])).iloc[0]
    assert got["model"] == "models:/small/1" and got["method"] == str(want["method"])
    for key, col in (("time_us", "time_us"), ("roofline_us", "roofline_us"), ("time_us_low", "time_us_low"),
                     ("time_us_high", "time_us_high")):
        assert got[key] == pytest.approx(float(want[col]), rel=1e-12), key
    assert got["time_us"] != pytest.approx(got["roofline_us"], rel=1e-3)  # the model, not the roofline
    assert got["interval_band"] == str(want["interval_band"])


def _table() -> pd.DataFrame:
    """A mixed table of ops to time (no time_us): three families, two devices, a device alias."""
    return pd.DataFrame([
        {"device": "H100", "op": "gemm", "dtype": "bf16", "m": 4096, "n": 4096, "k": 4096},
        {"device": "A100-SXM4-80GB", "op": "layernorm", "dtype": "fp16", "rows": 8192, "hidden": 4096,
         "direction": "bwd"},
        {"device": "H100", "op": "softmax", "rows": 1024, "hidden": 50257},
        {"device": "H100", "op": "elementwise", "elements": 1 << 24, "variant": "silu"},
    ])


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_predict_table_is_the_roofline_of_every_row(tmp_path, suffix):
    table = _table()
    src = tmp_path / f"ops{suffix}"
    table.to_parquet(src) if suffix == ".parquet" else table.to_csv(src, index=False)
    dst = tmp_path / f"pred{suffix}"
    rc, out, err = cli(["predict", "table", str(src), "-o", str(dst), "--json"])
    assert rc == 0, err
    summary = json.loads(out)
    assert summary["n_rows"] == 4 and summary["model"] == "roofline"
    got = pd.read_parquet(dst) if suffix == ".parquet" else pd.read_csv(dst)
    want = roofline(table)
    assert len(got) == 4 and list(got["op"]) == list(table["op"])
    assert got["device"].tolist() == ["H100-SXM", "A100-SXM4-80GB", "H100-SXM", "H100-SXM"]
    np.testing.assert_allclose(got["predicted_us"], want["time_us"], rtol=1e-12)
    np.testing.assert_allclose(got["roofline_us"], want["time_us"], rtol=1e-12)
    assert got["bound"].tolist() == want["bound"].astype(str).tolist()
    assert "predicted_us_low" not in got.columns  # the roofline has no interval
    assert summary["total_predicted_us"] == pytest.approx(float(want["time_us"].sum()), rel=1e-12)


def test_predict_table_with_a_model_is_the_predictor_on_the_same_rows(small_model, tmp_path):
    from hybrid.tracking.registry import load_predictor

    measured = pd.read_csv(small_model["csv"]).head(30)  # time_us present: ignored
    src = tmp_path / "measured.csv"
    measured.assign(time_us=-1.0).to_csv(src, index=False)  # not even a valid time: ignored, kept as given
    dst = tmp_path / "pred.parquet"
    rc, out, err = cli(["predict", "table", str(src), "-o", str(dst), "--model", "small", "--tracking-uri",
                        small_model["uri"]])
    assert rc == 0, err
    assert "30 rows predicted with models:/small/1" in out
    got = pd.read_parquet(dst)
    want = load_predictor("small", tracking_uri=small_model["uri"]).predictor.predict(measured.drop(columns="time_us"))
    np.testing.assert_allclose(got["predicted_us"], want["time_us"], rtol=1e-12)
    np.testing.assert_allclose(got["roofline_us"], want["roofline_us"], rtol=1e-12)
    np.testing.assert_allclose(got["predicted_us_low"], want["time_us_low"], rtol=1e-12)
    np.testing.assert_allclose(got["predicted_us_high"], want["time_us_high"], rtol=1e-12)
    assert (got["predicted_us_low"] < got["predicted_us"]).all()
    assert got["interval_band"].tolist() == want["interval_band"].astype(str).tolist()
    assert (got["time_us"] == -1.0).all() and got["source"].tolist() == measured["source"].tolist()


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_predict_table_keeps_the_users_column_order(tmp_path, suffix):
    """The written table came out in the schema's column order (``m,n,k,op,dtype,device,note`` written as
    ``device,op,dtype,m,n,k,note``): the user's columns now keep their order, and what the tool adds (the schema's
    default dtype of a table without one, then the predictions) comes after them."""
    table = pd.DataFrame({"m": [1024, 2048], "n": [1024, 512], "k": [4096, 64], "op": ["gemm", "gemm"],
                          "dtype": ["fp16", "bf16"], "device": ["H100", "A100-SXM4-40GB"], "note": ["a", "b"]})
    for given, added in ((table, []), (table.drop(columns="dtype"), ["dtype"])):
        src, dst = tmp_path / f"ops{suffix}", tmp_path / f"pred{suffix}"
        given.to_parquet(src) if suffix == ".parquet" else given.to_csv(src, index=False)
        rc, _, err = cli(["predict", "table", str(src), "-o", str(dst)])
        assert rc == 0, err
        got = pd.read_parquet(dst) if suffix == ".parquet" else pd.read_csv(dst)
        assert list(got.columns) == [*given.columns, *added, "predicted_us", "roofline_us", "bound", "method"]
        assert got["note"].tolist() == ["a", "b"] and got["m"].tolist() == [1024, 2048]


def test_predict_table_says_what_predict_gemm_says_of_its_rows(small_model, tmp_path):
    """`predict gemm --model` warns of an fp16 GEMM the model never fitted (fp32 NeuSight rows: the trees extrapolate)
    and of an 80% interval borrowed for a device the model never measured (no held-out device: --no-lodo); the
    same rows through `predict table` got the same numbers without a word. The table now says both, on stderr and
    in --json (rows_interval_borrowed, as evaluate's; dtype_notes, predict gemm's dtype_note per dtype)."""
    src = tmp_path / "ops.csv"
    pd.DataFrame({"device": ["H100", "H100"], "op": ["gemm", "gemm"], "dtype": ["fp16", "fp32"], "m": [1024, 512],
                  "n": [1024, 512], "k": [1024, 512]}).to_csv(src, index=False)
    one = ["predict", "gemm", "-d", "H100", "--dtype", "fp16", "-m", "1024", "-n", "1024", "-k", "1024", "--model",
           "small", "--tracking-uri", small_model["uri"], "--json"]
    rc, out, err = cli(one)
    assert rc == 0, err
    single = json.loads(out)
    assert not single["interval_calibrated"] and single["dtype_note"].startswith("no fp16 GEMM in the calibration")
    rc, out, err = cli(["predict", "table", str(src), "-o", str(tmp_path / "p.csv"), "--model", "small",
                        "--tracking-uri", small_model["uri"], "--json"])
    assert rc == 0, err
    summary = json.loads(out)
    assert summary["rows_interval_borrowed"] == 2 and summary["rows_without_interval"] == 0
    assert summary["dtype_notes"] == [single["dtype_note"]]  # fp32 was fitted: nothing to say of it
    assert f"warning: {single['dtype_note']}" in err.splitlines()
    assert "warning: 2 of 2 rows have an 80% interval not calibrated for their case" in err
    got = pd.read_csv(tmp_path / "p.csv")
    assert got["predicted_us"].iloc[0] == pytest.approx(single["time_us"], rel=1e-12)


@pytest.mark.parametrize("change, needles", [
    ({"m": [0, None, None, None]}, ["row 1 (CSV line 2)", "'m'", "must be positive"]),
    ({"device": ["H100", "A100-SXM4-80GB", "H100", "NoSuchGPU"]}, ["row 4 (CSV line 5)", "'device'"]),
    ({"op": ["gemm", "layernorm", "softmx", "elementwise"]}, ["row 3 (CSV line 4)", "unknown op 'softmx'"]),
])
def test_predict_table_bad_row_is_named_and_nothing_is_written(tmp_path, change, needles):
    table = _table()
    for col, values in change.items():
        table[col] = values
    src = tmp_path / "ops.csv"
    table.to_csv(src, index=False)
    fresh, kept = tmp_path / "fresh.csv", tmp_path / "kept.parquet"
    kept.write_bytes(b"earlier output")
    for dst in (fresh, kept):
        rc, out, err = cli(["predict", "table", str(src), "-o", str(dst)])
        assert rc == 2 and "Traceback" not in err
        for needle in [str(src), *needles]:
            assert needle in err, (needle, err)
    assert not fresh.exists() and kept.read_bytes() == b"earlier output"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.parquet", "ops.csv"]  # no temporary file left


def test_predict_table_not_comma_separated_says_so_without_asking_for_time_us(tmp_path):
    """A table of ops to time separated by semicolons failed with "missing required column(s) device, op, time_us":
    `predict table` does not need time_us (its docstring: optional and ignored), and the separator, the actual
    problem, was not named (as `hybrid.data.schema.validate` names it)."""
    src = tmp_path / "ops.csv"
    src.write_text("device;op;m;n;k\nH100;gemm;64;64;64\n")
    rc, out, err = cli(["predict", "table", str(src), "-o", str(tmp_path / "out.csv")])
    assert rc == 2 and not out
    assert f"error: {src}: missing required column(s) device, op (" in err, err
    assert "time_us" not in err and "separated by something other than commas" in err, err
    rc, out, err = cli(["evaluate", str(src), "--model", "roofline"])  # a measured table does need time_us
    assert rc == 2 and "missing required column(s) device, op, time_us" in err and "other than commas" in err, err


def test_predict_table_unknown_system_names_its_row(tmp_path):
    """A collective row naming a system the catalog lacks failed with "unknown system or device 'nosys'" alone:
    the one bad row of a table was not named (every other bad value is, by row and CSV line), nor the file."""
    src = tmp_path / "coll.csv"
    src.write_text("device,op,dtype,size_bytes,n_ranks,system\n"
                   "H100,all_reduce,fp32,1048576,8,DGX-H100\n"
                   "H100,all_gather,fp32,1048576,8,nosys\n")
    dst = tmp_path / "out.csv"
    rc, out, err = cli(["predict", "table", str(src), "-o", str(dst)])
    assert rc == 2 and not out and not dst.exists() and "Traceback" not in err
    assert err.startswith(f"error: {src}: row 2 (CSV line 3): unknown system or device 'nosys'"), err
    measured = tmp_path / "measured.csv"  # where measured tables are read too
    measured.write_text("device,op,dtype,size_bytes,n_ranks,system,time_us\n"
                        "H100,all_reduce,fp32,1048576,8,DGX-H100,30\n"
                        "H100,all_gather,fp32,1048576,8,nosys,30\n")
    rc, out, err = cli(["evaluate", str(measured), "--model", "roofline"])
    assert rc == 2 and "row 2 (CSV line 3)" in err and "'nosys'" in err, err


def test_a_collective_row_whose_device_is_not_its_systems_gpu_is_said(tmp_path):
    """A row `device V100-SXM2-32GB, system DGX-H100` was priced on the DGX-H100's fabric without a word (and, in a
    measured table, fitted and scored under the V100). It is kept, as `hybrid data import --system` keeps a
    sibling GPU's rows on a system (a what-if, or a node no catalog system describes), but said: one `warning:`
    naming the first such row and how many more; a system named by a device (its generic node) holds that device."""
    from hybrid.data.schema import check_rows, read_table
    from hybrid.errors import DataQualityWarning
    from hybrid.hardware.catalog import default_catalog

    src = tmp_path / "coll.csv"
    src.write_text("device,op,dtype,size_bytes,n_ranks,n_nodes,system,time_us\n"
                   "H100,all_reduce,bf16,1048576,8,1,DGX-H100,30\n"
                   "H100-SXM,all_gather,bf16,1048576,8,1,H100-SXM,30\n"
                   "H100-SXM,all_reduce,bf16,4096,8,1,,30\n"  # no system: a generic node of the device
                   "V100-SXM2-32GB,all_reduce,fp16,1048576,8,1,dgx-h100,30\n"
                   "V100-SXM2-32GB,all_reduce,fp16,2097152,8,1,DGX-H100,30\n")
    dst = tmp_path / "out.csv"
    rc, out, err = cli(["predict", "table", str(src), "-o", str(dst)])
    assert rc == 0 and dst.exists()
    assert err.strip() == (f"warning: {src}: row 4 (CSV line 5) and 1 more: collective of device V100-SXM2-32GB on "
                           "system dgx-h100, whose GPU is H100-SXM: costed on dgx-h100's fabric (a mislabelled system "
                           "or device? fix it, or add a system of these nodes to a catalog file, HYBRID_CATALOG)")
    # where measured tables are read (calibrate, evaluate) too; rows that agree say nothing
    cat = default_catalog()
    table = read_table(src, cat)
    with pytest.warns(DataQualityWarning, match=r"row 4 \(CSV line 5\) and 1 more: collective of device V100"):
        check_rows(table, cat, str(src))
    ok = tmp_path / "ok.csv"
    table.head(3).to_csv(ok, index=False)
    rc, _, err = cli(["predict", "table", str(ok), "-o", str(dst)])
    assert rc == 0 and not err


def test_evaluate_output_name_checked_before_any_work(tmp_path):
    """`evaluate -o out.txt` wrote CSV under a .txt name (`predict table` and `data import` refuse it), and `-o DIR`
    gave click's usage error instead of the tool's `error:` line; both now fail first, naming the output."""
    src = tmp_path / "t.csv"
    src.write_text("op,device,dtype,m,n,k,time_us\ngemm,H100-SXM,fp16,1024,1024,1024,20\n")
    txt = tmp_path / "out.txt"
    rc, out, err = cli(["evaluate", str(src), "--model", "roofline", "-o", str(txt)])
    assert rc != 0 and not txt.exists() and not out
    assert err.strip() == f"error: output {txt}: use a .csv or .parquet file name"
    folder = tmp_path / "preds.csv"
    folder.mkdir()
    for cmd in (["evaluate", str(src), "--model", "roofline"], ["predict", "table", str(src)]):
        rc, out, err = cli([*cmd, "-o", str(folder)])
        assert rc != 0 and not out and list(folder.iterdir()) == []
        assert err.strip() == f"error: cannot write output {folder}: it is a directory", cmd
    rc, _, err = cli(["evaluate", str(src), "--model", "roofline", "-o", str(tmp_path / "ok.csv")])
    assert rc == 0 and (tmp_path / "ok.csv").is_file()


def test_an_output_that_is_the_input_table_is_refused(tmp_path):
    """`evaluate my.csv -o my.csv` replaced the user's measurements with the predictions frame (split, measured_us,
    ...: no longer a table any command reads) and said "predictions written"; `predict table T -o T` rewrote the
    input too. Both now refuse before any work (a bundle's measurements.csv as well) and leave the file as it was,
    as `data import` does for its inputs."""
    src = tmp_path / "mine.csv"
    src.write_text("op,device,dtype,m,n,k,time_us\ngemm,H100-SXM,fp16,1024,1024,1024,20\n")
    before = src.read_bytes()
    for cmd in (["evaluate", str(src), "--model", "roofline", "-o", str(tmp_path / "." / "mine.csv")],
                ["predict", "table", str(src), "-o", str(src)]):
        rc, out, err = cli(cmd)
        assert rc == 2 and not out, (cmd, err)
        assert "is the measurement table" in err and "would replace those measurements" in err, err
        assert src.read_bytes() == before
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "measurements.csv").write_bytes(before)
    rc, _, err = cli(["evaluate", str(bundle), "--model", "roofline", "-o", str(bundle / "measurements.csv")])
    assert rc == 2 and "would replace those measurements" in err and (bundle / "measurements.csv").read_bytes() == before
    rc, _, err = cli(["evaluate", str(src), "--model", "roofline", "-o", str(tmp_path / "pred.csv")])
    assert rc == 0, err  # another name is fine


@pytest.mark.parametrize("args, flag", [
    (["predict", "gemm", "-m", "64", "-n", "64", "-k", "64", "-d", ""], "--device"),
    (["predict", "op", "softmax", "rows=4", "hidden=8", "-d", " "], "--device"),
    (["predict", "collective", "--op", "all_reduce", "--size", "1M", "--ranks", "2", "-s", ""], "--system"),
])
def test_an_empty_device_or_system_is_named_as_empty(args, flag):
    """`-d "$GPU"` with GPU unset said "unknown device ''; closest known: Vega-FE, V100S-PCIE-32GB, ..." (and
    `predict op` "device=None: missing device name"): the option is empty, as `--model ''` is said to be."""
    rc, out, err = cli(args)
    assert rc == 2 and not out
    assert err.strip() == f"error: {flag} is empty: give a value or leave the option out", err


def test_predict_op_warns_of_an_elementwise_variant_without_counts():
    """variant=foo was priced as 1 input, 1 output, 1 FLOP per element without a word."""
    rc, out, err = cli(["predict", "op", "elementwise", "-d", "H100", "elements=1M", "variant=foo", "--json"])
    assert rc == 0, err
    assert "variant 'foo' is not one the library has counts for" in err and "n_inputs, n_outputs" in err
    assert json.loads(out)["bytes"] == pytest.approx(2 * 4 * 2**20)  # as warned: 1 in + 1 out of fp32
    for known in (["variant=gelu_"], ["variant=maxpool"],
                  ["variant=foo", "n_inputs=2", "n_outputs=1", "flops_per_element=3"]):
        rc, _, err = cli(["predict", "op", "elementwise", "-d", "H100", "elements=1M", *known])
        assert rc == 0 and "not one the library has counts for" not in err, (known, err)


def test_predict_table_writes_the_catalogs_system_names(tmp_path):
    """The device column was written as the catalog's key (h100 -> H100-SXM) but the system column as typed
    (``dgx-h100``, `` DGX-H100 `` with its spaces, a device alias): the rows of one system came out under three
    names. Catalog systems now come out as their key, a device named as a system (its generic node) as the
    device's key, and the predictions are those of the resolved names."""
    src, dst = tmp_path / "coll.csv", tmp_path / "out.csv"
    src.write_text("device,op,size_bytes,n_ranks,n_nodes,system\n"
                   "h100,all_reduce,1048576,8,1,dgx-h100\n"
                   "H100,all_reduce,1048576,16,2,  DGX-H100 \n"
                   "H100,all_reduce,1048576,8,1,DGX-H100\n"
                   "h100,all_reduce,1048576,4,1,h100\n"
                   "H100,gemm,,,,\n")
    table = pd.read_csv(src).assign(m=[None] * 4 + [64], n=[None] * 4 + [64], k=[None] * 4 + [64])
    table.to_csv(src, index=False)  # a kernel row beside them: no system, none written
    rc, _, err = cli(["predict", "table", str(src), "-o", str(dst)])
    assert rc == 0, err
    got = pd.read_csv(dst)
    assert got["system"].tolist()[:4] == ["DGX-H100", "DGX-H100", "DGX-H100", "H100-SXM"]
    assert pd.isna(got["system"].iloc[4])
    assert got["predicted_us"].iloc[0] == got["predicted_us"].iloc[2]


@pytest.mark.parametrize("text", ["64MiB", "64MB", "4KiB", "4096B", "1GB"])
def test_a_byte_size_as_a_dimension_is_refused_by_gemm_and_op_alike(text):
    """`predict op gemm m=64MiB` read the byte size as a count (67,108,864 rows) and timed that GEMM, while
    `predict gemm -m 64MiB` was refused as "not a valid integer": a byte unit on a dimension is now refused by
    both, saying that it is one; count suffixes (64K = 65,536) are read by both."""
    for args in (["gemm", "-d", "H100", "-m", text, "-n", "8", "-k", "8"],
                 ["op", "gemm", "-d", "H100", f"m={text}", "n=8", "k=8"]):
        rc, out, err = cli(["predict", *args, "--json"])
        assert rc == 2 and not out and "Traceback" not in err, (args, err)
        assert f"{text!r} is a size in bytes" in err and "a count" in err, (args, err)
    times = []
    for args in (["gemm", "-d", "H100", "--dtype", "fp16", "-m", "64K", "-n", "8", "-k", "8"],
                 ["op", "gemm", "-d", "H100", "--dtype", "fp16", "m=64K", "n=8", "k=8"]):
        rc, out, err = cli(["predict", *args, "--json"])
        assert rc == 0, err
        got = json.loads(out)
        assert got["flops"] == 2 * 65536 * 8 * 8, got  # m = 64K = 65,536
        times.append(got["time_us"])
    assert times[0] == times[1]


def test_a_bare_devices_collective_across_nodes_says_the_network_it_was_costed_on(tmp_path):
    """A collective row across nodes with no system (or a device as its system) was costed on a generic node of its
    device with a generic 100 Gb/s NIC per GPU, without a word (`predict collective -s H100 --nodes 2` says so):
    16 ranks of H100 on 2 nodes came out 63.1 us for 1 MiB, 40% above DGX-H100's 45.2 us. Now one `warning:`
    names the first such row, how many more, and the node and network assumed; single-node rows say nothing."""
    src, dst = tmp_path / "coll.csv", tmp_path / "out.csv"
    src.write_text("device,op,size_bytes,n_ranks,n_nodes,system\n"
                   "H100,all_reduce,1048576,8,1,\n"
                   "H100,all_reduce,1048576,16,2,\n"
                   "H100,all_reduce,1048576,16,2,h100\n"
                   "H100,all_reduce,1048576,16,2,DGX-H100\n")
    rc, _, err = cli(["predict", "table", str(src), "-o", str(dst)])
    assert rc == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, err
    assert warnings[0].startswith(f"warning: {src}: row 2 (CSV line 3) and 1 more: collective across 2 nodes of "
                                  "device H100-SXM with no catalog system: costed on generic nodes of"), err
    assert "generic 100 Gb/s NIC per GPU" in warnings[0] and "system column" in warnings[0], err
    got = pd.read_csv(dst)
    assert got["predicted_us"].iloc[1] == got["predicted_us"].iloc[2] > got["predicted_us"].iloc[3]


def test_an_output_that_cannot_be_created_fails_before_any_work(tmp_path):
    """An output path whose parent is a file (`-o results.csv/preds.csv`; unwritable folders are the same case) was
    found only when the finished result was written: `evaluate` and `predict table` read, checked and predicted
    every row first (a header-only table said "table is empty" instead, a missing model "no registered model"),
    `data import` parsed every log, and `report` loaded the run and drew every plot. Now each names the output
    first and writes nothing."""
    src = tmp_path / "t.csv"
    src.write_text("op,device,dtype,m,n,k,time_us\n")  # header only: reading it is an error of its own
    blocker = tmp_path / "results.csv"
    blocker.write_text("a file, not a folder\n")
    log = tmp_path / "all_reduce_perf.log"
    log.write_text("not an nccl-tests log\n")
    for cmd, out in ((["evaluate", str(src), "--model", "roofline"], blocker / "preds.csv"),
                     (["evaluate", str(src), "--model", "no-such-model"], blocker / "preds.csv"),
                     (["predict", "table", str(src)], blocker / "preds.csv"),
                     (["data", "import", "nccl-tests", str(log)], blocker / "nccl.csv"),
                     (["report", "--model", "no-such-model"], blocker / "report.html")):
        rc, stdout, err = cli([*cmd, "-o", str(out)])
        assert rc == 2 and not stdout, (cmd, err)
        assert err.strip().splitlines()[-1] == (f"error: cannot write output {out}: {tmp_path / 'results.csv'} is a "
                                                "file, not a directory"), (cmd, err)
        assert blocker.read_text() == "a file, not a folder\n"


def test_predict_table_of_collectives_that_name_only_their_systems(tmp_path):
    """A table of collectives naming their systems and no device (as ``predict collective --system`` takes one) was
    refused for its missing device column: each row now runs on its system's GPU (an empty device cell likewise),
    priced as ``predict collective`` prices it; a row whose system the catalog lacks is still refused, named."""
    src, dst = tmp_path / "coll.csv", tmp_path / "out.csv"
    src.write_text("op,system,size_bytes,n_ranks,n_nodes\n"
                   "all_reduce,DGX-H100,1048576,8,1\n"
                   "all_gather,dgx-a100,67108864,16,2\n")
    rc, _, err = cli(["predict", "table", str(src), "-o", str(dst)])
    assert rc == 0, err
    got = pd.read_csv(dst)
    assert got["device"].tolist() == ["H100-SXM", "A100-SXM4-80GB"]
    rc, out, err = cli(["predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", "1048576",
                        "--ranks", "8", "--json"])
    assert rc == 0, err
    assert got["predicted_us"].iloc[0] == pytest.approx(json.loads(out)["time_us"], rel=1e-9)
    # an empty device cell beside a named system: the system's GPU; a named device is kept
    src.write_text("device,op,system,size_bytes,n_ranks\n"
                   ",all_reduce,DGX-H100,1048576,8\n"
                   "H100-PCIE,all_reduce,DGX-H100,1048576,8\n")
    rc, _, err = cli(["predict", "table", str(src), "-o", str(dst)])
    assert rc == 0, err
    assert "H100-PCIE" in err  # the second row's device is not its system's GPU: said, as before
    assert pd.read_csv(dst)["device"].tolist() == ["H100-SXM", "H100-PCIE"]
    src.write_text("op,system,size_bytes,n_ranks\nall_reduce,nosys,1048576,8\n")
    dst.unlink()
    rc, out, err = cli(["predict", "table", str(src), "-o", str(dst)])
    assert rc == 2 and not dst.exists() and "Traceback" not in err and "device" in err, err
