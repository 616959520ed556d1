"""GEMM measurements faster than the datasheet peak are left out of fits (hybrid.data.quality)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections.predictor import HybridPredictor
from hybrid.data.importers import import_paths
from hybrid.data.paths import public_data_dir
from hybrid.data.quality import PEAK_TOLERANCE, implausible_rows


def _xla() -> pd.DataFrame:
    path = public_data_dir(None) / "xla"
    if not path.exists():
        pytest.skip("public data directory not available")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return import_paths("xla-matmul", path)


def test_xla_fp8_rows_beat_the_h100_peak_and_are_left_out_with_a_warning():
    """XLA's H100 table times fp8 GEMMs up to 1.3x faster than the fp8 dense peak (and 3x bf16 on the same shapes,
    where the hardware gives 2x): the fit warns, names the group and fits on bf16/tf32 only."""
    table = _xla()
    with pytest.warns(UserWarning, match=r"H100-SXM fp8 \(xla\): up to 1\.3\dx faster"):
        pred = HybridPredictor().fit(table)
    info = pred.fit_info["implausible"]
    assert info["rows"] == 1125 and [g["dtype"] for g in info["groups"]] == ["fp8"]
    assert info["groups"][0]["fastest_over_roofline"] > 1.25
    # bf16 and tf32 are physical (bf16 reaches 76-79% of its peak) and stay in
    drop, groups = pred.implausible(table)
    assert set(groups["dtype"]) == {"fp8"} and drop.sum() == 1125 and (table.loc[drop, "dtype"] == "fp8").all()


def test_fp8_predictions_stay_under_the_peak_once_the_group_is_left_out():
    """With the fp8 rows out, a large fp8 GEMM on the H100 is predicted at a physical rate: slower than its dense
    peak, and no faster than twice the predicted bf16 rate on the same shape (the hardware's ratio)."""
    with pytest.warns(UserWarning):
        pred = HybridPredictor().fit(_xla())
    q = pd.DataFrame({"op": "gemm", "device": "H100-SXM", "dtype": ["fp8", "bf16"], "m": 4096, "n": 4096, "k": 4096,
                      "framework": "xla"})
    out = pred.predict(q)
    t8, t16 = out["time_us"].to_numpy()
    assert t8 >= out["roofline_us"].iloc[0] * 0.999
    assert t8 >= 0.5 * t16 * 0.95  # XLA's own fp8 row: 56.7 us against 176.2 us bf16 (0.32x)


def test_physical_tables_keep_every_row():
    """A GEMM at 80% of the peak is kept; the same rows 2x faster than the peak are flagged."""
    flops = 2.0 * np.array([4096, 8192]) * 4096 * 4096
    gpu = pd.DataFrame({"op": "gemm", "device": "A100-SXM4-80GB", "dtype": "fp16", "m": [4096, 8192], "n": 4096,
                        "k": 4096, "time_us": flops / (0.8 * 312e12) * 1e6})
    pred = HybridPredictor()
    norm, base = pred._prepare(gpu, training=True)
    drop, groups = implausible_rows(norm, base, pred.catalog)
    assert groups.empty and not drop.any()
    # the same rows 2x faster than the peak are flagged by (device, dtype, framework)
    fast = gpu.assign(time_us=gpu["time_us"] * 0.8 / 2)
    norm, base = pred._prepare(fast, training=True)
    drop, bad = implausible_rows(norm, base, pred.catalog)
    assert drop.all()
    assert bad[["device", "dtype"]].values.tolist() == [["A100-SXM4-80GB", "fp16"]]
    assert np.isclose(bad["fastest_over_roofline"].iloc[0], 2.0, rtol=0.02)
    assert PEAK_TOLERANCE < 2.0


def test_a_table_of_only_implausible_rows_is_refused():
    fast = pd.DataFrame({"op": "gemm", "device": "A100-SXM4-80GB", "dtype": "fp16", "m": 4096, "n": 4096,
                         "k": 4096, "time_us": [1.0, 2.0]})
    from hybrid.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="faster than its device's datasheet peak"):
        HybridPredictor().fit(fast)


def test_cli_calibrate_names_the_left_out_group_once(tmp_path):
    """`hybrid calibrate` on XLA's H100 table: one `warning:` line naming the fp8 group (not one Python warning
    per fit of the calibration's splits), and the model is still registered."""
    import contextlib
    import io

    from hybrid.cli.main import main
    from hybrid.data.schema import write_table

    csv = tmp_path / "xla.csv"
    write_table(_xla(), csv, validate_rows=False)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["calibrate", str(csv), "--name", "xla", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}", "-q",
                   "--json"])
    assert rc == 0, err.getvalue()
    lines = [ln for ln in err.getvalue().splitlines() if "datasheet peak" in ln]
    assert lines == [lines[0]] and lines[0].startswith("warning: ") and "H100-SXM fp8 (xla)" in lines[0]
    assert "UserWarning" not in err.getvalue()


def test_the_bound_is_the_compute_peak_not_latency_or_dram():
    """Small GEMMs may legitimately beat the roofline's latency floor (a kernel-timed 2.9 us GEMM on an H100
    against the catalog's 4 us) or its DRAM time (DeepBench's T4 int8 GEMVs re-read a 3 MB matrix that stays in
    the 4 MB L2: 350 GB/s against 320 GB/s of DRAM); only beating the compute peak is implausible."""
    from hybrid.hardware.catalog import default_catalog
    from hybrid.ops.roofline import roofline

    cat = default_catalog()
    rows = pd.DataFrame({"op": ["gemm", "gemm", "gemm"], "device": ["H100-SXM", "T4", "T4"],
                         "dtype": ["fp32", "int8", "int8"], "framework": ["cupti", "deepbench", "deepbench"],
                         "m": [64, 3072, 4096], "n": [1024, 2, 4096], "k": [1, 1024, 4096],
                         "time_us": [2.9, 9.0, 1000.0]})
    base = roofline(rows, cat)
    assert (base["time_us"].to_numpy()[:2] / rows["time_us"].to_numpy()[:2] > PEAK_TOLERANCE).all()  # old check
    drop, groups = implausible_rows(rows, base, cat)
    assert not drop.any() and groups.empty
    # 4096^3 int8 in 0.5 ms is 275 TOPS: over twice the T4's 130 TOPS dense int8 peak
    fast = rows.assign(time_us=[2.9, 9.0, 500.0])
    drop, groups = implausible_rows(fast, roofline(fast, cat), cat)
    assert drop.tolist() == [False, True, True] and groups[["device", "dtype"]].values.tolist() == [["T4", "int8"]]


def test_rows_whose_benchmark_reported_wrong_results_are_neither_fitted_nor_scored(tmp_path):
    """nccl-tests rows with #wrong > 0 timed a broken run: calibrate's splits and `hybrid evaluate` leave them out
    with one warning (only the sigmoid fit used to drop them, so the scores still counted them)."""
    import contextlib
    import io
    import json

    from hybrid.cli.main import main
    from hybrid.data.schema import write_table

    root = public_data_dir() / "nccl-tests/argonne-lcf_alcf-nccl-tests/results_polaris/nccl_2_18"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = import_paths("nccl-tests", root)
    table = table[table["n_nodes"] <= 4].reset_index(drop=True)
    broken = np.zeros(len(table), dtype=bool)
    broken[::10] = True
    table.loc[broken, "wrong"] = 1000
    table.loc[broken, "time_us"] = table.loc[broken, "time_us"] * 0.1  # what a broken run's times look like
    csv = tmp_path / "coll.csv"
    write_table(table, csv, validate_rows=False)
    uri = f"sqlite:///{tmp_path / 'm.db'}"

    def run(args: list[str]) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(args)
        return rc, out.getvalue(), err.getvalue()

    rc, out, err = run(["calibrate", str(csv), "--name", "coll", "--tracking-uri", uri, "-q", "--json", "--no-lodo"])
    assert rc == 0, err
    assert f"left out of the fit and of every score, {int(broken.sum()):,} collective rows" in err
    rc, out, err = run(["evaluate", str(csv), "--model", "coll", "--tracking-uri", uri, "--json"])
    assert rc == 0, err
    res = json.loads(out)
    assert f"left out {int(broken.sum()):,} collective rows" in err and res["n_rows"] == int((~broken).sum())


def test_collective_logs_timed_in_another_unit_are_left_out_or_refused(tmp_path):
    """A collective table with its times in milliseconds (1000x too fast for any fabric) was calibrated and
    registered without a word; such sections are now left out with a warning naming the unit, and a table of
    nothing else is refused before a run starts. Every public collective row stays (the fastest is 4.1x faster
    than the alpha-beta estimate)."""
    import contextlib
    import io

    from hybrid.cli.main import main
    from hybrid.data.quality import COLLECTIVE_TOLERANCE, implausible_collectives
    from hybrid.data.schema import write_table
    from hybrid.hardware.catalog import default_catalog
    from hybrid.ops.roofline import roofline

    root = public_data_dir() / "nccl-tests/argonne-lcf_alcf-nccl-tests/results_polaris/nccl_2_18"
    if not root.exists():
        pytest.skip("public data directory not available")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = import_paths("nccl-tests", root)
    table = table[table["n_nodes"] <= 2].reset_index(drop=True)
    cat = default_catalog()
    drop, groups = implausible_collectives(table, roofline(table, cat))
    assert not drop.any() and groups.empty and COLLECTIVE_TOLERANCE >= 10
    sources = sorted(table["source"].astype(str).unique())
    in_ms = table["source"].astype(str) == sources[0]
    table.loc[in_ms, "time_us"] = table.loc[in_ms, "time_us"] / 1000
    drop, groups = implausible_collectives(table, roofline(table, cat))
    assert drop.tolist() == in_ms.tolist()  # only the file in milliseconds, not the system's other logs

    uri = f"sqlite:///{tmp_path / 'm.db'}"

    def run(t: pd.DataFrame, name: str) -> tuple[int, str]:
        csv = tmp_path / f"{name}.csv"
        write_table(t, csv, validate_rows=False)
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = main(["calibrate", str(csv), "--name", name, "--tracking-uri", uri, "-q", "--no-lodo"])
        return rc, err.getvalue()

    rc, err = run(table, "mixed")
    assert rc == 0, err
    assert "warning: left out of the fit and of every score, collectives far faster than the fabric" in err
    assert "times in milliseconds or seconds?" in err
    rc, err = run(table[in_ms], "all_ms")
    assert rc == 2 and "error: every training row is a collective far faster" in err


def _repeats_table() -> pd.DataFrame:
    """GEMMs on an H100: one shape timed three times (10, 11, 12.5 us) in two files, one copied exactly, one timed
    once; an all-reduce size out-of-place twice (100, 180 us) and in-place once (another configuration)."""
    g = {"device": "H100-SXM", "op": "gemm", "dtype": "bf16", "m": 4096, "n": 4096, "k": 4096}
    c = {"device": "H100-SXM", "op": "all_reduce", "dtype": "fp16", "size_bytes": 1 << 20, "n_ranks": 8,
         "n_nodes": 1, "system": "DGX-H100"}
    return pd.DataFrame([
        {**g, "time_us": 10.0, "source": "a.csv"}, {**g, "time_us": 11.0, "source": "a.csv"},
        {**g, "time_us": 12.5, "source": "b.csv", "library_version": "cuBLAS 12.4"},
        {**g, "m": 2048, "time_us": 3.0, "source": "a.csv"}, {**g, "m": 2048, "time_us": 3.0, "source": "b.csv"},
        {**g, "k": 1024, "time_us": 4.0, "source": "a.csv"},
        {**c, "in_place": False, "time_us": 100.0}, {**c, "in_place": False, "time_us": 180.0},
        {**c, "in_place": True, "time_us": 95.0}])


def test_repeated_configs_counts_and_spreads_what_repeats():
    """A configuration is everything but timings and provenance (source file, library build): the 4096^3 GEMM is one
    configuration of 3 rows (spread 12.5 / 10 = 1.25x), the 2048 one an identical copy (spread 1x, not
    differing), the k=1024 one and the in-place all-reduce not repeated, the out-of-place one 2 rows at 1.8x."""
    from hybrid.data.quality import describe_repeats, repeated_configs

    groups, by_op = repeated_configs(_repeats_table())
    assert groups[["op", "measured", "time_min_us", "time_max_us"]].values.tolist() == [
        ["all_reduce", 2, 100.0, 180.0], ["gemm", 3, 10.0, 12.5], ["gemm", 2, 3.0, 3.0]]
    assert groups["spread"].round(6).tolist() == [1.8, 1.25, 1.0]
    assert by_op.to_dict("records") == [
        {"device": "H100-SXM", "op": "all_reduce", "configs": 1, "rows": 2, "differing": 1, "spread_median": 1.8,
         "spread_max": 1.8},
        {"device": "H100-SXM", "op": "gemm", "configs": 2, "rows": 5, "differing": 1, "spread_median": 1.25,
         "spread_max": 1.25}]
    assert describe_repeats(by_op) == ("3 configuration(s) measured more than once (7 rows), 2 of them with "
                                       "different times (widest max/min: H100-SXM all_reduce 1.800x, median "
                                       "1.800x over 1, H100-SXM gemm 1.250x, median 1.250x over 1)")
    single, none = repeated_configs(_repeats_table().iloc[[0, 3, 5, 8]])
    assert single.empty and none.empty and describe_repeats(none) == ""


def test_data_validate_reports_repeated_configurations_and_keeps_them(tmp_path):
    """`hybrid data validate` lists the repeated configurations by device and op (counts, how many differ, their
    spread), in --json too; every row is still counted (nothing dropped or averaged)."""
    import contextlib
    import io
    import json

    from hybrid.cli.main import main
    from hybrid.data.schema import write_table

    csv = tmp_path / "repeats.csv"
    write_table(_repeats_table(), csv)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["data", "validate", str(csv), "--json"]) == 0
    doc = json.loads(out.getvalue())
    assert doc["rows"] == 9 and sum(r["rows"] for r in doc["by_op_device"]) == 9
    assert {k: doc["repeated"][k] for k in ("configs", "rows", "differing")} == {"configs": 3, "rows": 7,
                                                                                  "differing": 2}
    assert doc["repeated"]["by_op_device"][0]["spread_max"] == pytest.approx(1.8)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["data", "validate", str(csv)]) == 0
    text = out.getvalue()
    assert "configurations measured more than once (all kept" in text
    assert any(line.split()[:5] == ["gemm", "H100-SXM", "2", "5", "1"] and "1.250x" in line
               for line in text.splitlines())
    assert "ok: 9 rows in 1 table(s)" in text


def test_data_validate_counts_rows_whose_benchmark_reported_wrong_results(tmp_path):
    """nccl-tests rows with #wrong > 0 are dropped by calibrate and evaluate; `data validate` said nothing of them
    (its --json neither), so a broken log passed as ok."""
    import contextlib
    import io
    import json

    from hybrid.cli.main import main
    from hybrid.data.schema import write_table

    table = _repeats_table()
    table["wrong"] = [np.nan] * 6 + [0.0, 5.0, 0.0]
    csv = tmp_path / "wrong.csv"
    write_table(table, csv)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["data", "validate", str(csv), "--json"]) == 0
    assert json.loads(out.getvalue())["failed_validation"] == {"rows": 1}
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["data", "validate", str(csv)]) == 0
    assert "warning: 1 of 9 rows report wrong results (#wrong > 0" in err.getvalue()


def test_absurd_speedups_are_said_in_powers_of_ten():
    """A time of 1e-300 us made the message print the speed-up over the roofline with hundreds of digits."""
    from hybrid.data.quality import describe, describe_collectives

    g = pd.DataFrame({"device": ["H100-SXM"], "dtype": ["bf16"], "framework": [""], "rows": [3],
                      "fastest_over_roofline": [3.2e302]})
    text = describe(g)
    assert "up to 3e+302x faster than the roofline" in text and len(text) < 200
    assert "up to 1.32x" in describe(g.assign(fastest_over_roofline=1.3249))
    c = pd.DataFrame({"group": ["DGX-H100"], "op": ["all_reduce"], "source": ["a"], "rows": [1],
                      "fastest_over_roofline": [887.2]})
    assert "up to 887x faster" in describe_collectives(c)
    assert "up to 9e+299x faster" in describe_collectives(c.assign(fastest_over_roofline=9e299))
