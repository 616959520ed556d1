"""The foundation's CLI commands: `hybrid devices`, `hybrid devices show`, `hybrid predict gemm|collective`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid.cli.main import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_devices_table_lists_catalog(capsys, catalog) -> None:
    code, out, err = run(capsys, "devices")
    assert code == 0 and not err
    lines = out.strip().splitlines()
    assert len(lines) >= len(catalog.devices) + 1  # header (+ rule) + one line per device
    for key in ("H100-SXM", "MI300X", "T4", "GTX-1080Ti"):
        assert any(line.split()[0] == key for line in lines), key


def test_devices_table_keeps_fp16_and_bf16_apart(capsys) -> None:
    """A V100 runs fp16 on tensor cores (112 TFLOP/s) but bf16 only emulated, at its fp32 rate (14)."""
    code, out, _ = run(capsys, "devices")
    lines = out.strip().splitlines()
    header = lines[0].split("  ")
    cols = [h.strip() for h in header if h.strip()]
    assert cols[3:6] == ["fp32 TF", "fp16 TF", "bf16 TF"]
    v100 = next(line.split() for line in lines if line.split()[0] == "V100-PCIE-32GB")
    assert [float(v) for v in v100[3:6]] == [14.0, 112.0, 14.0]


def test_devices_json(capsys, catalog) -> None:
    code, out, _ = run(capsys, "devices", "--json")
    assert code == 0
    entries = json.loads(out)
    assert {e["key"] for e in entries} == set(catalog.devices)
    h100 = next(e for e in entries if e["key"] == "H100-SXM")
    assert h100["peak_tflops"]["bf16"] == pytest.approx(989.4)
    assert h100["mem_bw_gbps"] == pytest.approx(3350)


def test_devices_systems_json(capsys, catalog) -> None:
    code, out, _ = run(capsys, "devices", "--systems", "--json")
    assert code == 0
    entries = json.loads(out)
    assert {e["key"] for e in entries} == set(catalog.systems)
    assert next(e for e in entries if e["key"] == "DGX-A100")["inter_node_gbps"] == pytest.approx(25)


def test_devices_show_alias(capsys) -> None:
    for empty in ("", "  "):  # an unset shell variable: was "unknown device ''; closest known: Vega-FE, ..."
        code, _, err = run(capsys, "devices", "show", empty)
        assert code == 2 and "NAME is empty: give a device or system" in err and "closest" not in err, err
    code, out, _ = run(capsys, "devices", "show", "Tesla T4")
    assert code == 0
    assert "key: T4" in out and "65" in out
    code, out, _ = run(capsys, "devices", "show", "Tesla T4", "--json")
    entry = json.loads(out)
    assert entry["key"] == "T4" and entry["peak_tflops"]["fp16"] == pytest.approx(65)
    # T4's L2 bandwidth is not published: the estimate (A100's bytes/clk per SM x 40 SMs x 1590 MHz) is shown
    assert entry["l2_bw_gbps"] == 0 and entry["l2_bw_gbps_estimated"] == pytest.approx(5120 / 108 * 40 * 1.59, rel=0.01)
    code, out, _ = run(capsys, "devices", "show", "A100-SXM4-40GB", "--json")
    assert json.loads(out)["l2_bw_gbps"] == pytest.approx(7219) and "l2_bw_gbps_estimated" not in json.loads(out)
    code, out, _ = run(capsys, "devices", "show", "a100_dgx", "--json")
    assert code == 0 and json.loads(out)["device"] == "A100-SXM4-80GB"
    assert json.loads(out)["nvls_all_reduce"] is False  # A100's NVSwitch has no SHARP
    code, out, _ = run(capsys, "devices", "show", "DGX H100", "--json")
    assert json.loads(out)["nvls_all_reduce"] is True and "nvls" not in json.loads(out)  # decided, not entered


def test_predict_gemm_json(capsys) -> None:
    code, out, err = run(capsys, "predict", "gemm", "-d", "H100", "-m", "8192", "-n", "8192", "-k", "8192",
                         "--dtype", "bf16", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["device"] == "H100-SXM" and res["bound"] == "compute"
    assert res["time_us"] == pytest.approx(2 * 8192**3 / 989.4e12 * 1e6 + 4.0)
    code, out, _ = run(capsys, "predict", "gemm", "-d", "H100", "-m", "1", "-n", "8192", "-k", "8192", "--json")
    res = json.loads(out)
    assert res["op"] == "gemv" and res["bound"] == "memory"


def test_predict_collective_json(capsys) -> None:
    code, out, err = run(capsys, "predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", "1GiB",
                         "--ranks", "8", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["system"] == "DGX-H100" and res["size_bytes"] == 2**30 and res["bound"] == "bandwidth"
    # NVLS (the H100 NVSwitch reduces): bus bandwidth above the 450 GB/s link rate, as NCCL measures on such a node
    # (483 GB/s in ../shared), but no more than NVLS's (g + 1)/g bytes per link at that rate allow
    assert 450 < res["busbw_gbps"] <= 450 * (2 * 7 / 8) / (9 / 8) * 1.0001
    code, out, _ = run(capsys, "predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", "1GiB",
                       "--ranks", "16", "--nodes", "2", "--json")
    assert json.loads(out)["time_us"] > res["time_us"]


@pytest.mark.parametrize("op", ["broadcast", "reduce"])
def test_predict_collective_of_every_op_a_table_holds(capsys, op) -> None:
    """nccl-tests' broadcast_perf / reduce_perf logs import, calibrate and evaluate as ops `broadcast` / `reduce`:
    `predict collective` prices them too instead of refusing the op."""
    code, out, err = run(capsys, "predict", "collective", "-s", "DGX-H100", "--op", op, "--size", "64MiB",
                         "--ranks", "8", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["op"] == op and res["size_bytes"] == 64 * 2**20 and res["time_us"] > 0


@pytest.mark.parametrize("argv", [
    ["predict", "gemm", "-d", "H900", "-m", "8", "-n", "8", "-k", "8"],
    ["devices", "show", "Z100"],
    ["predict", "collective", "-s", "DGX-Z", "--op", "all_reduce", "--size", "1MiB", "--ranks", "8"],
    ["predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", "-5", "--ranks", "8"],
    ["predict", "gemm", "-d", "H100", "-m", "0", "-n", "8", "-k", "8"],
    ["predict", "gemm", "-d", "H100", "-m", "8", "-n", "8", "-k", "8", "--dtype", "fp13"],
])
def test_bad_input_is_one_line_on_stderr(capsys, argv: list[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert not out
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    if "-m" in argv and argv[argv.index("-m") + 1] == "0":
        assert "-m must be > 0" in err  # names the option typed, not the library's field (Gemm.m)


def test_unknown_device_via_real_entry_point(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "hybrid.cli.main", "predict", "gemm", "-d", "H900", "-m", "8",
                           "-n", "8", "-k", "8"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown device 'H900'" in lines[0] and "H100" in lines[0]


def test_user_catalog_reaches_the_cli(capsys, tmp_path: Path, monkeypatch) -> None:
    f = tmp_path / "site.toml"
    f.write_text('[devices.Lab-GPU]\nvendor = "nvidia"\nkind = "gpu"\npeak_tflops = { fp32 = 10, bf16 = 100 }\n'
                 'mem_bw_gbps = 1000\nmem_gib = 24\nsource = "lab"\n')
    monkeypatch.setenv("HYBRID_CATALOG", str(f))
    code, out, _ = run(capsys, "predict", "gemm", "-d", "lab-gpu", "-m", "4096", "-n", "4096", "-k", "4096", "--json")
    assert code == 0
    assert json.loads(out)["time_us"] == pytest.approx(2 * 4096**3 / 100e12 * 1e6 + 4.0)
    f.write_text("[devices.Broken\n")
    code, out, err = run(capsys, "devices")
    assert code == 2 and "not valid TOML" in err


def test_exit_code_of_ctx_exit_is_returned() -> None:
    """click without standalone mode returns ``ctx.exit(code)``'s code; ``main`` must pass it on."""
    import click

    from hybrid.cli.main import cli, main

    @click.command("exit-with")
    @click.argument("code", type=int)
    @click.pass_context
    def exit_with(ctx: click.Context, code: int) -> None:
        ctx.exit(code)

    cli.add_command(exit_with)
    try:
        assert main(["exit-with", "3"]) == 3
        assert main(["exit-with", "0"]) == 0
    finally:
        cli.commands.pop("exit-with", None)


def test_a_bare_architecture_device_is_costed_with_a_warning_naming_the_alternatives(capsys) -> None:
    code, out, err = run(capsys, "predict", "gemm", "-d", "sm_90", "-m", "4096", "-n", "4096", "-k", "4096", "--json")
    assert code == 0 and json.loads(out)["device"] == "H100-SXM"
    assert "warning: device 'sm_90' is an architecture" in err and "costed as H100-SXM" in err and "H200" in err
    code, out, err = run(capsys, "predict", "gemm", "-d", "H200", "-m", "4096", "-n", "4096", "-k", "4096", "--json")
    assert code == 0 and "warning" not in err  # a product name is not ambiguous
    code, out, err = run(capsys, "predict", "gemm", "-d", "sm_999", "-m", "8", "-n", "8", "-k", "8")
    assert code != 0 and "unknown device 'sm_999'" in err and "architecture" not in err
    code, out, _ = run(capsys, "devices", "show", "gfx90a", "--json")
    assert "MI250X" in json.loads(out)["same_arch_devices"]
    code, out, _ = run(capsys, "devices", "show", "MI210", "--json")
    assert "same_arch_devices" not in json.loads(out)
    # a two-die module entry: one kernel runs on one die (it was priced at the whole module's peak, silently)
    code, out, err = run(capsys, "predict", "gemm", "-d", "MI250X", "-m", "4096", "-n", "4096", "-k", "4096")
    assert code == 0 and "warning: device MI250X is a whole module of two dies" in err and "MI250X-GCD" in err
    code, out, err = run(capsys, "predict", "gemm", "-d", "MI250X-GCD", "-m", "4096", "-n", "4096", "-k", "4096")
    assert code == 0 and "warning" not in err
    # the other variants of a die, and those of its power class (what the sibling interval band reads)
    code, out, _ = run(capsys, "devices", "show", "A100-SXM4-40GB", "--json")
    shown = json.loads(out)
    assert "A100-PCIE-40GB" in shown["same_die"] and "A100-PCIE-40GB" not in shown["same_die_power_class"]
    assert "A100-SXM4-80GB" in shown["same_die_power_class"]
    code, out, _ = run(capsys, "devices", "show", "T4", "--json")
    assert "same_die" not in json.loads(out)


def test_calibrate_says_whether_the_sibling_band_was_calibrated() -> None:
    """Two held-out devices beside another variant of their die calibrate the sibling band; one does not, and the
    summary says what such GPUs get instead; none: nothing said."""
    from hybrid.cli.calibrate import sibling_line

    assert sibling_line([]) is None
    two = sibling_line(["A100-PCIE-40GB", "A100-PCIE-80GB"])
    assert two == ("held out beside another variant of their die (their rows calibrate the sibling band): "
                   "A100-PCIE-40GB, A100-PCIE-80GB")
    one = sibling_line(["V100-PCIE-32GB"])
    assert one.startswith("held out beside another variant of their die: V100-PCIE-32GB (fewer than 2:")
    assert "halfway between the seen and unseen" in one and "flagged not calibrated" in one


def test_predict_warns_when_the_operands_exceed_device_memory(capsys) -> None:
    code, out, err = run(capsys, "predict", "gemm", "-d", "H100", "--dtype", "fp32", "-m", "200000", "-n", "200000",
                         "-k", "200000", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["fits_memory"] is False and res["footprint_bytes"] == 3 * 200_000**2 * 4
    assert "exceed the device's memory" in res["memory_note"] and "warning: the operands" in err
    code, out, err = run(capsys, "predict", "gemm", "-d", "H100", "-m", "8192", "-n", "8192", "-k", "8192", "--json")
    assert json.loads(out)["fits_memory"] is True and "memory_note" not in json.loads(out) and "operands" not in err
    code, out, err = run(capsys, "predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", "200GiB",
                         "--ranks", "8", "--json")
    assert json.loads(out)["fits_memory"] is False and "exceed the device's memory" in err


def test_predict_collective_on_a_bare_cpu_uses_its_gloo_system(capsys, monkeypatch) -> None:
    """A CPU named as the system: its processes' collectives run over gloo, priced on the catalog's system of that
    CPU as DLRM, LLM and trace predictions price them; predict priced a generic node's PCIe gen3 link (97 us for a
    1 MiB all-reduce on 2 ranks, 1.2 ms on the profiled gloo system)."""
    bundle = Path(__file__).resolve().parents[1] / "datasets" / "cpu-amd-epyc-1c" / "catalog.toml"
    monkeypatch.setenv("HYBRID_CATALOG", str(bundle))
    args = ("predict", "collective", "--op", "all_reduce", "--size", "1MiB", "--ranks", "2", "--json")
    code, out, err = run(capsys, *args, "-s", "cpu-amd-epyc-1c")
    assert code == 0, err
    bare = json.loads(out)
    code, out, err = run(capsys, *args, "-s", "cpu-amd-epyc-1c-gloo")
    named = json.loads(out)
    assert bare["system"] == named["system"] == "cpu-amd-epyc-1c-gloo" and bare["time_us"] == named["time_us"]
    assert "gloo collectives as profiled" in bare["note"] and "PCIe" not in bare["note"]
    code, out, err = run(capsys, *args, "-s", "H100")  # a bare GPU keeps its generic node
    assert json.loads(out)["system"] == "H100-SXM-node"


def test_predict_refuses_sizes_past_the_schema_bound(capsys) -> None:
    """A GEMM dimension or message size of 2^62 or more: --model refused it as "row 1 (CSV line 2), column 'm'",
    the roofline timed it (1e23 x 4 x 4); both refuse it by flag now, before any output."""
    code, out, err = run(capsys, "predict", "gemm", "-d", "H100", "-m", str(10**23), "-n", "4", "-k", "4", "--json")
    assert code == 2 and out == "" and "-m must be below 2^62" in err and "CSV line" not in err
    code, out, err = run(capsys, "predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", "1e30",
                         "--ranks", "8", "--json")
    assert code == 2 and out == "" and "--size '1e30' must be below 2^62 bytes" in err and "warning" not in err
    code, out, err = run(capsys, "predict", "gemm", "-d", "H100", "-m", str(2**40), "-n", "4", "-k", "4", "--json")
    assert code == 0 and json.loads(out)["fits_memory"] is False


def test_interval_note_says_when_an_unseen_band_was_borrowed(capsys):
    """A row on the unseen band that the model never calibrated (a collective layout no log measured, in a model
    without an unseen collective band) is told so, not that the band came from another op family or model."""
    from hybrid.cli.predict import _interval

    row = {"time_us_low": 80.0, "time_us_high": 160.0, "interval_calibrated": False, "interval_band": "unseen",
           "method": "collective-sigmoid"}
    out = _interval(row, "collective")
    assert out["interval_band"] == "unseen" and "unseen system or layout" in out["interval_note"]
    assert "another op family" not in out["interval_note"] and "warning: 80% interval of an unseen" in capsys.readouterr().err
    seen = _interval({**row, "interval_band": "seen"}, "gemm")
    assert "borrowed from another op family or model" in seen["interval_note"]
    assert "interval_note" not in _interval({**row, "interval_calibrated": True}, "gemm")
    # a measured layout at a message size beyond the measured ones: the note names that, not "an unseen system"
    sized = _interval(row, "collective", reason="the message size is beyond the measured ones: extrapolated")
    assert "extrapolated collective (the message size is beyond" in sized["interval_note"]
    assert "unseen system or layout" not in sized["interval_note"]


def test_interval_note_of_a_fitted_device_in_an_unfitted_dtype_names_the_dtype(capsys):
    """An H100 fp8 GEMM from a model fitted on the H100's bf16/fp16/fp32/tf32 GEMMs gets the unseen band (a dtype
    never fitted); the note called that "an unseen device" (the H100 was fitted). A GPU never fitted keeps it."""
    import pandas as pd

    from hybrid.cli.predict import _interval, _seen_device_reason
    from hybrid.corrections import HybridPredictor
    from hybrid.corrections.kernel_xgb import GemmXGB, XGBParams

    table = pd.read_csv(Path(__file__).resolve().parents[1] / "datasets" / "H100-SXM" / "measurements.csv")
    pred = HybridPredictor(corrections=[GemmXGB(XGBParams(n_estimators=5))]).fit(table[table["op"] == "gemm"])
    row = {"time_us_low": 80.0, "time_us_high": 160.0, "interval_calibrated": False, "interval_band": "unseen",
           "method": "kernel-xgb"}
    why = _seen_device_reason(pred, row, "H100-SXM", "fp8", "gemm", "GEMM")
    out = _interval(row, "GEMM", reason=why)
    assert "unseen device" not in out["interval_note"]
    assert "fp8 on H100-SXM, whose GEMMs the model fitted only in bf16, fp16, fp32, tf32" in out["interval_note"]
    assert _seen_device_reason(pred, row, "A100-SXM4-80GB", "fp8", "gemm", "GEMM") == ""
    assert "unseen device" in _interval(row, "GEMM", reason="")["interval_note"]
    assert _seen_device_reason(pred, {**row, "interval_band": "seen"}, "H100-SXM", "bf16", "gemm", "GEMM") == ""
    assert _seen_device_reason(pred, row, "H100-SXM", "bf16", "gemm", "GEMM") == ""  # a fitted dtype: not the why


def test_interval_note_says_when_a_sibling_band_is_the_one_between_seen_and_unseen(capsys):
    """A GPU priced from a measured sibling in a model that could not calibrate a sibling band gets the band
    halfway between the seen and unseen ones; the note said it was borrowed from another op family or model, and
    that GEMM predictions had no held-out residuals of their own (they had both bands)."""
    from hybrid.cli.predict import _interval

    row = {"time_us_low": 80.0, "time_us_high": 160.0, "interval_calibrated": False, "interval_band": "sibling",
           "method": "kernel-xgb"}
    out = _interval(row, "GEMM", between=True)
    assert "halfway between its seen and unseen" in out["interval_note"]
    assert "another op family" not in out["interval_note"] and "no held-out residuals" not in out["interval_note"]
    assert "warning: 80% interval of a GPU priced from a measured sibling" in capsys.readouterr().err
    # a sibling band borrowed from elsewhere (the key lacks a seen or an unseen band) keeps the generic note
    assert "another op family or model" in _interval(row, "GEMM")["interval_note"]


def test_calibrate_warns_when_one_held_out_device_calibrates_the_unseen_band() -> None:
    """`--holdout-device T4` alone: the unseen band is that one GPU's errors (on an H100 the intervals of such a
    NeuSight model covered 3% of the rows), and the run said nothing about it."""
    from hybrid.cli.calibrate import unseen_line

    assert unseen_line([]) is None and unseen_line(["T4", "V100-PCIE-32GB"]) is None
    one = unseen_line(["T4"])
    assert one.startswith("warning: ") and "one held-out device (T4)" in one and "--holdout-device" in one


def test_calibrate_warns_when_every_held_out_device_had_a_sibling() -> None:
    """Held out on the H100 and H200 profiles alone (each the other's sibling), a calibration's unseen band is the
    siblings' errors (33% of DeepBench's never-measured GPUs' rows covered by the quickstart model): said; one
    held-out device without a sibling in its fit is enough to say nothing."""
    from hybrid.cli.calibrate import sibling_unseen_line

    line = sibling_unseen_line(["H100-SXM", "H200"], ["H100-SXM", "H200"])
    assert line.startswith("warning: every held-out device had another variant of its die in its fit (H100-SXM, H200)")
    assert "--holdout-device" in line
    assert sibling_unseen_line(["H100-SXM", "H200", "T4"], ["H100-SXM", "H200"]) is None
    assert sibling_unseen_line([], []) is None


@pytest.mark.parametrize("argv", [
    ["predict", "gemm", "-d", "H100-SXM", "-m", "512", "-n", "512", "-k", "512", "--model", ""],
    ["predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", "1MiB", "--ranks", "8",
     "--model", " "],
    ["simulate", "experiments/configs/dlrm_example.yaml", "--model", ""],
    ["shard", "experiments/configs/dlrm_example.yaml", "--model", ""],
    ["llm", "train", "llama2-7b", "--system", "DGX-H100", "--gpus", "8", "--global-batch", "64", "--model", ""],
    ["llm", "infer", "llama2-7b", "--system", "DGX-H100", "--model", ""],
    ["trace", "predict", "t.json", "--device", "H100-SXM", "--model", ""],
    ["bench", "validate", "r.csv", "--model", ""],
    ["calibrate", ".", "--name", "m", "--base", ""],
])
def test_an_empty_model_name_is_refused(capsys, argv: list[str]) -> None:
    """`--model ''` (e.g. `--model "$MODEL"` with the variable unset) was taken for no model: roofline numbers,
    exit 0, where the user asked for a calibrated one."""
    root = Path(__file__).resolve().parents[1]
    argv = [str(root / a) if a.endswith(".yaml") else a for a in argv]
    code, out, err = run(capsys, *argv)
    assert code == 2 and not out, (code, out)
    flag = "--base" if "--base" in argv else "--model"
    assert err.strip() == f"error: {flag} is empty: give a value or leave the option out"


@pytest.mark.parametrize("argv", [
    ["simulate", "experiments/configs/dlrm_example.yaml", "--trace", ""],
    ["simulate", "experiments/configs/dlrm_example.yaml", "--plan", ""],
    ["shard", "experiments/configs/dlrm_example.yaml", "--output", " "],
    ["llm", "train", "llama2-7b", "--system", "DGX-H100", "--gpus", "8", "--global-batch", "64", "--trace", ""],
    ["llm", "memory", "llama2-7b", "--system", "DGX-H100", "--gpus", "8", "--global-batch", "64", "--plot", ""],
    ["llm", "infer", "llama2-7b", "--system", "DGX-H100", "--dtype", ""],
    ["llm", "infer", "llama2-7b", "--system", "DGX-H100", "--kv-dtype", ""],
    ["llm", "infer", "llama2-7b", "--system", "DGX-H100", "--roofline-plot", ""],
    ["llm", "infer", "llama2-7b", "--system", "DGX-H100", "--device", ""],
    ["llm", "serve", "llama2-7b", "--system", "DGX-H100", "--slo-ttft", ""],
    ["trace", "predict", "t.json", "--device", "H100-SXM", "--bundle", ""],
    ["trace", "predict", "t.json", "--device", "", "--system", "DGX-H100"],
    ["bench", "validate", "r.csv", "--system", ""],
    ["bench", "validate", "r.csv", "--bundle", ""],
    ["bench", "validate", "r.csv", "-o", ""],
    ["profile", "--quick", "-o", ""],
])
def test_an_empty_option_value_is_refused(capsys, argv: list[str]) -> None:
    """An optional value given empty (`--trace "$OUT"` with the variable unset) was taken for the option left out:
    `simulate --trace ''` wrote no trace, `llm infer --dtype ''` ran fp16, `trace predict --device ''
    --system S` and `bench validate --bundle ''` used their defaults, `profile -o ''` wrote into `.`; all
    without a word."""
    root = Path(__file__).resolve().parents[1]
    argv = [str(root / a) if a.endswith(".yaml") else a for a in argv]
    code, out, err = run(capsys, *argv)
    flag = next(a for a, b in zip(argv[:-1], argv[1:], strict=True) if a.startswith("-") and not b.strip())
    flag = {"-o": "--output"}.get(flag, flag)
    assert code == 2 and not out, (code, out)
    assert err.strip() == f"error: {flag} is empty: give a value or leave the option out"


@pytest.mark.parametrize("argv", [
    ["data", "import", "neusight", "t.csv", "-o", ""],
    ["data", "pull", "neusight-test-dev", "-o", ""],
    ["data", "merge", "b1", "b2", "-o", ""],
    ["evaluate", "t.csv", "--model", "m", "-o", ""],
    ["predict", "table", "t.csv", "-o", ""],
    ["report", "--model", "m", "-o", ""],
    ["trace", "import", "t.json", "-o", ""],
    ["trace", "kernels", "t.json", "-o", ""],
    ["trace", "record", "train.py", "-o", ""],
])
def test_an_empty_output_is_refused(capsys, tmp_path: Path, monkeypatch, argv: list[str]) -> None:
    """`-o ""` (`-o "$OUT"` with the variable unset): `evaluate` wrote no predictions and `data pull`
    materialised the source in the working directory, both with exit 0; the others failed on '.' ("output .: use
    a .csv or .parquet file name", "cannot write output .: it is a directory")."""
    monkeypatch.chdir(tmp_path)
    for name in ("t.csv", "t.json", "train.py"):
        (tmp_path / name).write_text("x\n")
    for name in ("b1", "b2"):
        (tmp_path / name).mkdir()
    before = sorted(tmp_path.iterdir())
    code, out, err = run(capsys, *argv)
    assert code == 2 and not out, (code, out)
    assert err.strip() == "error: --output is empty: give a value or leave the option out"
    assert sorted(tmp_path.iterdir()) == before


@pytest.mark.parametrize("nodes", ["0", "-2"])
def test_predict_collective_nodes_below_one_names_the_option(capsys, nodes: str) -> None:
    """`--nodes 0` failed with the library's field ("Collective.n_nodes must be a positive number"); it is checked
    as `--ranks` is, naming the option."""
    code, out, err = run(capsys, "predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", "1MiB",
                         "--ranks", "8", "--nodes", nodes)
    assert code == 2 and not out
    assert f"Invalid value for '--nodes': {nodes} is not in the range x>=1" in err and "Collective." not in err


def test_hybrid_warnings_raised_deep_in_a_command_are_warning_lines(capsys):
    """While a command runs, a warning of hybrid's own (a model priced across kinds of processor inside the LLM
    engine) is one ``warning:`` line, not Python's file/line/source form; other packages' keep theirs; the hook is
    put back afterwards."""
    import warnings

    from hybrid.cli.main import _warning_line
    from hybrid.errors import TransferWarning

    before = warnings.showwarning
    assert main(["devices", "--help"]) == 0
    assert warnings.showwarning is before
    foreign: list[str] = []
    show = _warning_line(lambda message, *rest: foreign.append(str(message)))
    show(TransferWarning("H100-SXM (a GPU: kernel-xgb-gemm fitted on CPUs only)"), TransferWarning, "costs.py", 81)
    show(FutureWarning("a pandas deprecation"), FutureWarning, "frame.py", 1)
    err = capsys.readouterr().err
    assert "warning: H100-SXM (a GPU: kernel-xgb-gemm fitted on CPUs only)\n" in err
    assert "costs.py" not in err and foreign == ["a pandas deprecation"]


def test_predict_collective_more_nodes_than_ranks_names_the_options(capsys) -> None:
    """`--ranks 2 --nodes 4` failed with the library's fields ("n_nodes (4) cannot exceed n_ranks (2)")."""
    code, out, err = run(capsys, "predict", "collective", "-s", "DGX-H100", "--op", "all_reduce", "--size", "1MiB",
                         "--ranks", "2", "--nodes", "4")
    assert code == 2 and not out
    assert err.strip() == "error: --ranks 2 cannot span --nodes 4: every node needs a rank"
