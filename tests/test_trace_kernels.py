"""Kernel rows from GPU traces (``hybrid.workloads.trace_kernels``, ``hybrid trace kernels``): the committed real
H100 traces of ``datasets/traces-h100`` become kernel-timed calibration rows."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid.cli.main import main as cli_main
from hybrid.corrections.features import kernel_timing
from hybrid.data.profiler.kernel_times import KERNEL_FRAMEWORK
from hybrid.data.schema import validate
from hybrid.data.traces import load_traces, trace_files
from hybrid.errors import HybridError, InvalidInputError
from hybrid.workloads.trace_kernels import kernel_rows, merge_identical, step_kernel_rows
from hybrid.workloads.trace_units import trace_units

ROOT = Path(__file__).resolve().parents[1]
BERT = ROOT / "datasets" / "traces-h100" / "bert-bf16"


@pytest.fixture(scope="module")
def bert():
    return load_traces(trace_files([BERT]))


def test_rows_are_the_traced_ops_timed_by_their_kernels(bert, catalog):
    rows = kernel_rows(bert, catalog)
    # the GPU the trace names ("NVIDIA H100 80GB HBM3") resolves to the catalog key
    assert set(rows["device"]) == {"H100-SXM"}
    assert set(rows["framework"]) == {KERNEL_FRAMEWORK}
    assert (kernel_timing(rows) == 1).all()  # read as kernel-only timings by the kernel models
    assert (rows["time_us"] > 0).all() and (rows["time_us_min"] <= rows["time_us"]).all()
    assert (rows["time_us"] <= rows["time_us_max"]).all()
    # every costed op with kernels is counted once, in exactly one row
    u = trace_units(bert[0])
    costed = u[(u["kind"] == "op") & (u["device_us"] > 0)
               & np.array([isinstance(r, dict) and bool(r.get("op")) for r in u["row"]])]
    assert int(rows["repeats"].sum()) == len(costed)
    # merged rows are distinct, and the families of a BERT training step are all there
    assert not rows.drop(columns=["time_us", "time_us_min", "time_us_max", "time_us_std", "repeats",
                                  "source"]).astype(str).duplicated().any()
    assert {"gemm", "elementwise", "softmax", "layernorm"} <= set(rows["op"])
    # the rows are a valid canonical table (what hybrid calibrate reads)
    assert len(validate(rows, catalog, source="trace kernels")) == len(rows)
    # a whole-step check: the kernel time the rows carry is the trace's kernel time of those ops (medians of
    # identical ops: equal within their spread)
    total = float((rows["time_us"] * rows["repeats"]).sum())
    assert total == pytest.approx(float(costed["device_us"].sum()), rel=0.05)


def test_merge_identical_takes_median_spread_and_count():
    t = pd.DataFrame({"op": ["gemm"] * 3 + ["elementwise"], "m": [8.0, 8.0, 8.0, np.nan],
                      "variant": [None, None, None, "add"], "time_us": [3.0, 1.0, 2.0, 5.0],
                      "source": ["a", "b", "c", "d"]})
    out = merge_identical(t).set_index("op")
    assert out.loc["gemm", "time_us"] == 2.0 and out.loc["gemm", "repeats"] == 3
    assert (out.loc["gemm", "time_us_min"], out.loc["gemm", "time_us_max"]) == (1.0, 3.0)
    assert out.loc["gemm", "time_us_std"] == pytest.approx(1.0)
    assert out.loc["elementwise", "repeats"] == 1 and out.loc["elementwise", "time_us_std"] == 0.0


def test_cpu_traces_and_unknown_devices_are_refused(tmp_path, bert, catalog):
    torch = pytest.importorskip("torch")
    from hybrid.data.traces.record import record_step

    lin = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8)
    paths = record_step(lambda: lin(x).sum().backward(), tmp_path / "cpu", warmup=1)
    cpu = load_traces([str(p) for p in paths.values()])
    with pytest.raises(InvalidInputError, match="no GPU kernels"):
        kernel_rows(cpu, catalog)
    with pytest.raises(HybridError, match="unknown device"):
        kernel_rows(bert, catalog, device="NOT-A-GPU")
    with pytest.raises(InvalidInputError, match="no traces"):
        kernel_rows([], catalog)
    # --device names another catalog GPU: the rows are labelled with it (a trace whose name the catalog lacks), and
    # where the trace names a GPU the catalog knows (this H100), a warning says whose times they are
    with pytest.warns(UserWarning, match=r"--device relabelled \d+ kernel row\(s\) of 1 trace\(s\) recorded on "
                                         r"H100-SXM \(NVIDIA H100 80GB HBM3\) as H200"):
        assert set(kernel_rows(bert, catalog, device="H200")["device"]) == {"H200"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the traced GPU itself: nothing relabelled, nothing said
        assert set(kernel_rows(bert, catalog, device="H100-SXM")["device"]) == {"H100-SXM"}


def test_cli_writes_rows_or_nothing(tmp_path, capsys):
    out = tmp_path / "rows.csv"
    assert cli_main(["trace", "kernels", str(BERT), "-o", str(out)]) in (0, None)
    rows = pd.read_csv(out)
    assert len(rows) > 20 and set(rows["framework"]) == {"cupti"}
    assert "distinct op rows" in capsys.readouterr().out
    bad = tmp_path / "bad.csv"
    assert cli_main(["trace", "kernels", str(BERT), "-o", str(bad), "--device", "NOT-A-GPU"]) not in (0, None)
    assert not bad.exists()
    capsys.readouterr()
    assert cli_main(["trace", "kernels", str(BERT), "-o", str(tmp_path / "a100.csv"), "--device", "A100-SXM4-80GB"]) \
        in (0, None)
    assert set(pd.read_csv(tmp_path / "a100.csv")["device"]) == {"A100-SXM4-80GB"}
    assert "warning: --device relabelled" in capsys.readouterr().err


def test_cli_reads_the_two_files_of_one_recording_as_one_step(tmp_path, capsys):
    """The Chrome trace and the execution trace of one recording, given as files (as `trace import` and `trace
    predict` take them), are one step: the same rows as their directory; a path given twice is read once."""
    import gzip

    files = []
    for name in ("kineto_rank0.json", "et_rank0.json"):
        f = tmp_path / "rec" / name
        f.parent.mkdir(exist_ok=True)
        f.write_bytes(gzip.decompress((BERT / f"{name}.gz").read_bytes()))
        files.append(str(f))
    tables = []
    for i, args in enumerate(([str(BERT)], files, [*files, str(tmp_path / "rec"), files[0]])):
        out = tmp_path / f"k{i}.csv"
        assert cli_main(["trace", "kernels", *args, "-o", str(out)]) in (0, None)
        tables.append(pd.read_csv(out))
    assert "read once" in capsys.readouterr().err
    for t in tables[1:]:
        assert len(t) == len(tables[0]) and t["repeats"].sum() == tables[0]["repeats"].sum()


def test_trace_predict_fits_a_bundle_with_kernel_rows(tmp_path, capsys):
    # the one-command cross-GPU flow: the H100's profile + its traced kernels predict an H200 trace
    rows = tmp_path / "h100.csv"
    assert cli_main(["trace", "kernels", str(BERT), "-o", str(rows)]) in (0, None)
    capsys.readouterr()
    h200 = ROOT / "datasets" / "traces-h200" / "bert-bf16-sdpa"
    args = ["trace", "predict", str(h200), "--device", "H200", "--host", "model", "--json"]
    assert cli_main([*args, "--bundle", str(ROOT / "datasets" / "H100-SXM"), "--rows", str(rows)]) in (0, None)
    import json

    out = json.loads(capsys.readouterr().out)
    assert "H100-SXM + h100.csv" in out["model"] and out["predicted_ms"] > 0
    assert cli_main([*args, "--rows", str(rows)]) not in (0, None)  # rows join a bundle: --bundle needed
    assert "give --bundle too" in capsys.readouterr().err


def test_step_kernel_rows_reads_every_step_directory(tmp_path, catalog):
    rows = step_kernel_rows([ROOT / "datasets" / "traces-h200"], catalog)
    assert set(rows["device"]) == {"H200"} and int(rows["repeats"].sum()) > 1000
    with pytest.raises(InvalidInputError, match="no traced step directories"):
        step_kernel_rows([tmp_path], catalog)
