"""The NLP benchmark's label GPU names: which catalog entry each label is predicted on."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("label, module, gcd", [
    ("AMD_Instinct_MI250", "MI250", "MI250-GCD"),
    ("AMD_Instinct_MI250X", "MI250X", "MI250X-GCD"),
    # the same GPUs as torch.cuda.get_device_name prints them (spaces), and bare: one die too, not the module
    ("AMD Instinct MI250X", "MI250X", "MI250X-GCD"),
    ("AMD Instinct MI250", "MI250", "MI250-GCD"),
    ("MI250X", "MI250X", "MI250X-GCD"),
])
def test_single_process_mi250_labels_run_on_one_die(load_experiment, label, module, gcd):
    """A single PyTorch process runs on one of the module's two dies, so the label is predicted on half of it."""
    from hybrid.hardware.catalog import default_catalog

    bench = load_experiment("nlp_e2e")
    cat = default_catalog()
    assert bench.resolve_gpu(label, cat) == gcd
    whole, die = cat.device(module), cat.device(gcd)
    assert die.peak("fp32") == pytest.approx(whole.peak("fp32") / 2, rel=1e-3)
    assert die.mem_bw == pytest.approx(whole.mem_bw / 2, rel=1e-3)
    assert die.num_sms * 2 == whole.num_sms


@pytest.mark.parametrize("label, key", [
    ("NVIDIA_H100_80GB_HBM3", "H100-SXM"), ("NVIDIA_H100_PCIe", "H100-PCIE"), ("NVIDIA_L4", "L4"),
    ("Tesla_T4", "T4"), ("NVIDIA_A100_80GB_PCIe", "A100-PCIE-80GB"), ("AMD_Instinct_MI210", "MI210"),
])
def test_label_names_of_other_gpus_resolve(load_experiment, label, key):
    from hybrid.hardware.catalog import default_catalog

    assert load_experiment("nlp_e2e").resolve_gpu(label, default_catalog()) == key


def test_the_collective_calibration_draws_every_public_system_evenly(load_experiment, shared_datasets):
    """The multi-GPU labels' collectives are learned from every public collective source, none dropped, capped."""
    from hybrid.hardware.catalog import default_catalog
    from hybrid.ops.families import family_array

    bench = load_experiment("nlp_e2e")
    table = bench.public_collectives(shared_datasets, default_catalog(), 3000)
    assert 2000 < len(table) <= 3000
    assert set(family_array(table["op"])) == {"collective"}
    systems = set(table["system"])
    assert {"Polaris", "Sophia", "Vidur-A100-DGX", "XLA-H100x8"} <= systems and len(systems) >= 8
    assert (table["time_us"] > 0).all() and (table["size_bytes"] > 0).all()
    assert bench.public_collectives(shared_datasets / "nonexistent", default_catalog(), 3000).empty


def test_a_held_out_gpu_leaves_no_row_in_any_fit(load_experiment, shared_datasets):
    """--leave-one-gpu-out: the held-out GPU's kernel rows (training and test collections) and collective logs are
    all dropped, and the fitted model says it never saw it; the other GPUs stay."""
    bench = load_experiment("nlp_e2e")
    model, _, kernel_devices, n = bench.calibrated_model(str(shared_datasets), 60, 0, gpu_bundles=False,
                                                         llmcompass=False, collectives=True, collective_rows=600,
                                                         exclude_devices=["T4", "A100-SXM4-40GB"])
    assert "T4" not in kernel_devices and {"P4", "V100-PCIE-32GB", "A100-PCIE-40GB"} <= set(kernel_devices)
    assert "T4" not in model.devices_fitted["kernel-xgb-gemm"]
    assert not {"T4", "A100-SXM4-40GB"} & set(model.devices_seen)  # Polaris' A100-SXM4-40GB logs dropped too
    _, _, with_t4, n_all = bench.calibrated_model(str(shared_datasets), 60, 0, gpu_bundles=False, llmcompass=False,
                                                  collectives=False)
    assert "T4" in with_t4 and n_all > 0


def test_shots_put_back_that_many_rows_of_the_held_out_gpu(load_experiment, shared_datasets):
    """--shots K: K random kernel rows of the held-out GPU return to its fit (a user's few measurements)."""
    bench = load_experiment("nlp_e2e")
    kw = dict(gpu_bundles=False, llmcompass=False, collectives=False, exclude_devices=["T4"])
    _, _, none, n0 = bench.calibrated_model(str(shared_datasets), 60, 0, **kw)
    model, _, some, n25 = bench.calibrated_model(str(shared_datasets), 60, 0, shots=25, **kw)
    assert "T4" not in none and "T4" in some
    assert n25 - n0 == 25
    assert "T4" in model.devices_fitted["kernel-xgb-gemm"] or "T4" in model.devices_seen


@pytest.mark.parametrize("argv", [["--shots", "5"], ["--leave-one-gpu-out", "--shots", "-1"],
                                  ["--leave-one-gpu-out", "--model", "x"]])
def test_held_out_options_that_cannot_go_together_are_input_errors(load_experiment, argv):
    from hybrid.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="--shots|--leave-one-gpu-out"):
        load_experiment("nlp_e2e").main(["--json", *argv])


def test_leave_one_gpu_out_run_predicts_each_gpu_without_its_rows(load_experiment, shared_datasets, tmp_path,
                                                                   capsys):
    """The benchmark's --leave-one-gpu-out pass end to end on a tiny label file: one fit per label GPU, each
    label predicted by the fit that never saw its GPU; with --shots the GPU is in its own fit again."""
    import json

    bench = load_experiment("nlp_e2e")
    labels = tmp_path / "labels.csv"
    labels.write_text("gpu,config,model,mode,seqlen,batch,extra,num_layer,e2e_latency\n"
                      "Tesla_T4,a,gpt2_med,inf,128,1,,1,5.0\n"
                      "Tesla_V100-PCIE-32GB,b,gpt2_med,inf,128,1,,1,3.0\n")
    common = ["--labels", str(labels), "--rows-per-gpu", "40", "--no-with-gpu-bundles", "--no-with-llmcompass",
              "--no-with-collectives", "--trace-dir", str(tmp_path / "traces"), "--json"]
    assert bench.main([*common, "--leave-one-gpu-out"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_rows"] == 2 and out["calibrated_heldout_gpus"]["n_rows"] == 2
    assert not any(r["gpu_in_kernel_training"] for r in out["rows"])
    assert all(r["calibrated"] > 0 for r in out["rows"])
    assert "without any row of that GPU" in out["calibrated_model"]
    assert bench.main([*common, "--leave-one-gpu-out", "--shots", "30"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert all(r["gpu_in_kernel_training"] for r in out["rows"]) and "calibrated_heldout_gpus" not in out
    assert not list(tmp_path.glob("*results.md"))  # --json writes nothing
    # a written report links its parity plot, written beside it (whole: no temporary file left)
    assert bench.main([*common[:-1], "--leave-one-gpu-out", "--out", str(tmp_path / "r.md")]) == 0
    capsys.readouterr()
    text = (tmp_path / "r.md").read_text()
    assert "![predicted vs measured step time per GPU](r.png)" in text
    # the report's command reproduces the run: the options that changed the fit are in it
    command = text.split("Command: `", 1)[1].split("`", 1)[0]
    assert "--no-with-collectives" in command and "--no-with-llmcompass" in command
    png = (tmp_path / "r.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert {f.name for f in tmp_path.iterdir()} == {"labels.csv", "traces", "r.md", "r.png"}


def test_json_answer_is_strict_json_with_parallel_labels(load_experiment, tmp_path, capsys):
    """A tensor- or pipeline-parallel label has no memory fraction (NaN): --json printed a bare NaN, which strict
    parsers (JavaScript, Go, jq) reject; it is null now, and every mapped row is a finite positive prediction on
    the GPU its public spelling names."""
    import json
    import math

    bench = load_experiment("nlp_e2e")
    labels = tmp_path / "labels.csv"
    labels.write_text("gpu,config,model,mode,seqlen,batch,extra,num_layer,e2e_latency\n"
                      "NVIDIA H100 80GB HBM3,a,gpt2_med,train,128,2,tp2,1,5.0\n"
                      "NVIDIA_L4,b,gpt2_med,inf,128,2,,1,3.0\n")
    assert bench.main(["--labels", str(labels), "--rows-per-gpu", "40", "--no-with-gpu-bundles",
                       "--no-with-llmcompass", "--no-with-collectives", "--no-with-test-kernels",
                       "--trace-dir", str(tmp_path / "traces"), "--json"]) == 0

    def refuse(const: str):
        raise ValueError(f"not JSON: {const}")

    out = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert [r["device"] for r in out["rows"]] == ["H100-SXM", "L4"]
    assert out["rows"][0]["memory_pct"] is None and out["rows"][1]["memory_pct"] > 0
    assert all(math.isfinite(r["calibrated"]) and r["calibrated"] > 0 for r in out["rows"])
    assert out["n_rows"] == 2 and set(out["by_gpu"]) == {"NVIDIA H100 80GB HBM3", "NVIDIA_L4"}
