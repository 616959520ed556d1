"""FP32 math of traced matmuls and convolutions (TF32 or not): kernel names, recorded switches, defaults, options,
and older Kineto exports whose kernels reach their ops only through the runtime call's correlation id."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from hybrid.cli.main import main as cli_main  # noqa: E402
from hybrid.data.bundle import load_bundle  # noqa: E402
from hybrid.data.traces import load_traces  # noqa: E402
from hybrid.data.traces.precision import (  # noqa: E402
    METADATA_KEY,
    Fp32Precision,
    apply_fp32_precision,
    recorded_switches,
    tf32_kernels,
)
from hybrid.data.traces.record import record_step  # noqa: E402
from hybrid.engine.costs import RooflineCostModel  # noqa: E402
from hybrid.errors import InvalidInputError  # noqa: E402
from hybrid.workloads.trace_graph import build_trace_graph, predict_trace, trace_units  # noqa: E402
from hybrid.workloads.trace_kernels import kernel_rows  # noqa: E402

A100 = "A100-SXM4-80GB"
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name, tf32", [
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8", True),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)", True),
    ("cutlass3x_sm90_tensorop_s64x128x8tf32gemm_f32_f32_f32_f32_f32_128x128x32_1x2x1_0_tnn_align4", True),
    ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4", True),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4", False),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(Params)", False),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_128x256_64x3_tn_align2>(Params)", False),
    ("cutlass_80_tensorop_f16_s16816gemm_relu_f16_64x64_64x4_nn_align8", False),
    ("ampere_sgemm_128x64_nn", False),
    ("void cudnn::winograd_nonfused::winogradWgradData4x4<float, float>(Params)", False),
])
def test_kernel_names_say_tf32_math(name, tf32):
    assert tf32_kernels([name]).tolist() == [tf32]


def test_a_trace_of_a_gpu_without_tf32_lets_the_switches_decide(tmp_path):
    """A V100 runs every fp32 op in FP32 whatever the program allows: its kernels do not say how the same program
    runs on an A100 (PyTorch's default: convolutions in TF32); an A100 trace's FP32 kernels do."""
    def trace(gpu: str, switches: dict | None) -> list:
        path = _old_format_trace(tmp_path / f"{gpu}.json", "volta_sgemm_128x64_nn")
        doc = json.loads(path.read_text())
        doc["deviceProperties"] = [{"name": gpu}]
        if switches is not None:
            doc[METADATA_KEY] = json.dumps(switches)
        path.write_text(json.dumps(doc))
        return load_traces([path])

    allowed = {"matmul": "tf32", "conv": "tf32"}
    v100 = build_trace_graph(trace("Tesla V100-SXM2-16GB", allowed), A100)
    assert _gemm_dtypes(v100) == ["tf32"] and v100.info["fp32_precision"]["matmul"]["source"] == "recorded"
    assert _gemm_dtypes(build_trace_graph(trace("Tesla V100-SXM2-16GB", None), A100)) == ["fp32"]  # the default
    a100 = build_trace_graph(trace("NVIDIA A100-SXM4-80GB", allowed), A100)
    assert _gemm_dtypes(a100) == ["fp32"] and a100.info["fp32_precision"]["matmul"]["source"] == "kernels"


def _old_format_trace(path: Path, kernel: str) -> Path:
    """A Kineto export laid out as PyTorch 1.x wrote it (HolisticTraceAnalysis' test traces of 2022): the kernel's
    External id is its runtime call's correlation id, not its op's."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 1000,
           "dur": 500, "args": {"External id": 1}},
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1010, "dur": 60,
           "args": {"External id": 7, "Input Dims": [[2048, 2048], [2048, 256]], "Input type": ["float", "float"]}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1050, "dur": 10,
           "args": {"External id": 900, "correlation": 900}},
          {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": 1100, "dur": 45,
           "args": {"External id": 900, "correlation": 900, "device": 0, "stream": 7}}]
    path.write_text(json.dumps({"traceEvents": ev, "distributedInfo": {"rank": 0}}))
    return path


def _gemm_dtypes(it) -> list[str]:
    return [r["dtype"] for r in it.units["row"] if isinstance(r, dict) and r.get("op") == "gemm"]


def test_old_exports_link_kernels_through_the_runtime_call_and_their_names_decide(tmp_path):
    tf32 = load_traces([_old_format_trace(tmp_path / "tf32.json", "void cutlass::Kernel<cutlass_80_tensorop_"
                                                                     "s1688gemm_128x128_32x3_nn_align4>(Params)")])
    u = trace_units(tf32[0])
    assert u["device_us"].tolist() == [45.0] and u["n_tf32"].tolist() == [1.0]  # linked to aten::mm
    on_a100 = build_trace_graph(tf32, A100)
    assert _gemm_dtypes(on_a100) == ["tf32"]
    assert on_a100.info["fp32_precision"]["matmul"] == {"mode": "tf32", "source": "kernels", "fp32_ops": 1,
                                                        "tf32_ops": 1}
    forced = build_trace_graph(tf32, A100, fp32_precision=Fp32Precision(matmul="ieee"))
    assert _gemm_dtypes(forced) == ["fp32"] and forced.info["fp32_precision"]["matmul"]["source"] == "option"
    roof = RooflineCostModel()
    t_tf32 = predict_trace(on_a100, roof).breakdown().set_index("label")["predicted_us"]["gemm"]
    t_fp32 = predict_trace(forced, roof).breakdown().set_index("label")["predicted_us"]["gemm"]
    assert t_fp32 / t_tf32 > 4  # A100: 156 vs 19.5 TFLOP/s dense, the GEMM compute-bound
    # a GPU without TF32 units runs it in FP32 whatever the program allowed
    assert _gemm_dtypes(build_trace_graph(tf32, "V100-SXM2-16GB")) == ["fp32"]
    # an FP32 (SIMT) kernel keeps the op fp32; as a measurement row too
    sgemm = load_traces([_old_format_trace(tmp_path / "fp32.json", "ampere_sgemm_128x64_nn")])
    assert _gemm_dtypes(build_trace_graph(sgemm, A100)) == ["fp32"]
    assert kernel_rows(tf32, device=A100)["dtype"].tolist() == ["tf32"]
    assert kernel_rows(sgemm, device=A100)["dtype"].tolist() == ["fp32"]


class _LinearConv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16 * 16 * 16, 1024)  # at batch 256 compute-bound on an A100 either way

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))


@pytest.fixture(scope="module")
def switched_traces(tmp_path_factory) -> dict[str, Path]:
    """A CPU trace of one conv + linear step under PyTorch's default switches (matmuls FP32, convolutions TF32),
    and one with both flipped."""
    model, x = _LinearConv(), torch.randn(256, 8, 16, 16)
    out = {}
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        for name, (mm, conv) in (("default", (False, True)), ("flipped", (True, False))):
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = mm, conv
            d = tmp_path_factory.mktemp(name)
            out[name] = record_step(lambda: model(x).sum().backward(), d, warmup=1, execution_trace=False,
                                    measure_overhead=False, memory=False)["kineto"]
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    return out


def test_recorded_switches_price_a_cpu_trace_for_a_gpu(switched_traces):
    default = load_traces([switched_traces["default"]])
    assert recorded_switches(default[0].meta) == {"matmul": "ieee", "conv": "tf32"}
    it = build_trace_graph(default, A100)
    rows = [r for r in it.units["row"] if isinstance(r, dict)]
    conv = {r["dtype"] for r in rows if r.get("op") == "conv2d"}
    assert conv == {"tf32"} and set(_gemm_dtypes(it)) == {"fp32"}
    acc = it.info["fp32_precision"]
    assert acc["conv"]["source"] == "recorded" and acc["conv"]["tf32_ops"] == acc["conv"]["fp32_ops"] >= 2
    flipped = build_trace_graph(load_traces([switched_traces["flipped"]]), A100)
    rows = [r for r in flipped.units["row"] if isinstance(r, dict)]
    assert {r["dtype"] for r in rows if r.get("op") == "conv2d"} == {"fp32"}
    assert set(_gemm_dtypes(flipped)) == {"tf32"}
    # on the CPU it traced, nothing changes
    on_cpu = build_trace_graph(default, "cpu-amd-epyc-1c", load_bundle(ROOT / "datasets" / "cpu-amd-epyc-1c")[1],
                               same_device=False)
    assert {r["dtype"] for r in on_cpu.units["row"] if isinstance(r, dict) and r.get("op") == "conv2d"} == {"fp32"}
    assert on_cpu.info["fp32_precision"]["target_has_tf32"] is False


def test_unrecorded_switches_fall_back_to_pytorch_defaults_with_a_warning(switched_traces, tmp_path, capsys):
    doc = json.loads(Path(switched_traces["flipped"]).read_text())
    doc.pop(METADATA_KEY)
    bare = tmp_path / "kineto_rank0.json"
    bare.write_text(json.dumps(doc))
    it = build_trace_graph(load_traces([bare]), A100)
    acc = it.info["fp32_precision"]
    assert acc["matmul"]["source"] == acc["conv"]["source"] == "PyTorch default"
    assert acc["matmul"]["mode"] == "ieee" and acc["conv"]["mode"] == "tf32"
    capsys.readouterr()
    assert cli_main(["trace", "predict", str(bare), "--device", A100, "--roofline", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert any("TF32" in w and "--fp32-matmul tf32" in w for w in s["warnings"])
    assert s["fp32_precision"]["conv"]["tf32_ops"] >= 2
    assert cli_main(["trace", "predict", str(bare), "--device", A100, "--roofline", "--json",
                     "--fp32-matmul", "tf32", "--fp32-conv", "ieee"]) == 0
    forced = json.loads(capsys.readouterr().out)
    assert forced["fp32_precision"]["matmul"]["source"] == "option" and forced["fp32_precision"]["conv"]["tf32_ops"] == 0
    assert not any("TF32" in w for w in forced.get("warnings", []))
    assert forced["breakdown_ms"]["gemm"] < s["breakdown_ms"]["gemm"]
    assert cli_main(["trace", "predict", str(bare), "--device", A100, "--roofline", "--fp32-conv", "ieee"]) == 0
    text = capsys.readouterr().out
    assert "matmul(s) on FP32 (PyTorch default)" in text and "convolution(s) on FP32 (option)" in text


def test_bad_precision_inputs_are_refused():
    with pytest.raises(InvalidInputError, match="fp32 matmul precision"):
        Fp32Precision(matmul="fast")
    with pytest.raises(InvalidInputError, match=METADATA_KEY):
        recorded_switches({METADATA_KEY: {"matmul": "tf32"}})
    with pytest.raises(InvalidInputError, match="not JSON"):
        recorded_switches({METADATA_KEY: "{matmul"})
    assert recorded_switches({}) is None
    # a 16-bit GEMM is never re-typed, whatever the switches
    units = pd.DataFrame({"kind": ["op"], "row": [{"op": "gemm", "dtype": "bf16"}], "n_launch": [0.0],
                          "n_tf32": [0.0]})
    out, acc = apply_fp32_precision(units, {}, True, Fp32Precision(matmul="tf32"))
    assert out["row"][0]["dtype"] == "bf16" and acc["matmul"]["fp32_ops"] == acc["matmul"]["tf32_ops"] == 0


def test_first_kineto_exports_with_capitalised_categories_parse_and_link(tmp_path):
    """PyTorch 1.8-1.9 wrote ``Operator`` / ``Kernel`` / ``Runtime`` categories and a kernel's ``external id`` in
    lower case (kineto's tb_plugin test trace of 2021)."""
    ev = [{"ph": "X", "cat": "Operator", "name": "ProfilerStep#3", "pid": 1, "tid": "1", "ts": 1000, "dur": 400,
           "args": {"External id": 1}},
          {"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 1, "tid": "1", "ts": 1010, "dur": 60,
           "args": {"External id": 41, "Input Dims": [[512, 1024], [1024, 1024]], "Input type": ["float", "float"]}},
          {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": "1", "ts": 1040, "dur": 20,
           "args": {"cbid": 211, "correlation": 482, "external id": 41}},
          {"ph": "X", "cat": "Kernel", "name": "volta_sgemm_128x32_nt", "pid": 0, "tid": "stream 7", "ts": 1100,
           "dur": 120, "args": {"device": 0, "stream": 7, "correlation": 482, "external id": 41}},
          {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": "stream 7",
           "ts": 1300, "dur": 5, "args": {"device": 0, "stream": 7, "correlation": 490, "external id": 41}}]
    path = tmp_path / "worker0.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    tr = load_traces([path])
    assert tr[0].device == "cuda" and tr[0].meta["step"] == "ProfilerStep#3"
    assert sorted(tr[0].kernels["cat"]) == ["gpu_memcpy", "kernel"]
    u = trace_units(tr[0])
    assert u["name"].tolist() == ["aten::mm"] and u["device_us"].tolist() == [125.0]
    assert _gemm_dtypes(build_trace_graph(tr, A100)) == ["fp32"]  # an FP32 (SIMT) kernel


def test_a_rocm_device_synchronize_is_a_wait_too(tmp_path):
    """On ROCm the host blocks in ``hipDeviceSynchronize``: a wait for the streams, not 5 ms of host work."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 6000},
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 40,
           "args": {"External id": 5, "Input Dims": [[4096, 4096], [4096, 4096]], "Input type": ["float", "float"]}},
          {"ph": "X", "cat": "kernel", "name": "Cijk_Ailk_Bljk_SB_MT128x128x16", "pid": 0, "tid": 7, "ts": 60,
           "dur": 900, "args": {"External id": 5, "stream": 7, "device": 0, "correlation": 11}},
          {"ph": "X", "cat": "cuda_runtime", "name": "hipDeviceSynchronize", "pid": 1, "tid": 1, "ts": 100,
           "dur": 5000, "args": {"correlation": 12}}]
    path = tmp_path / "kineto_rank0.json"
    path.write_text(json.dumps({"traceEvents": ev, "deviceProperties": [{"name": "AMD Instinct MI300X"}]}))
    tr = load_traces([path])
    u = trace_units(tr[0])
    assert u.set_index("name")["kind"].to_dict() == {"aten::mm": "op", "hipDeviceSynchronize": "view"}
    pred = predict_trace(build_trace_graph(tr, "MI300X"), RooflineCostModel())
    assert pred.iteration.same_device
    assert pred.measured.iteration_us < 2000  # the host waits for the 0.9 ms kernel, not 5 ms of its own


def test_runtime_call_linking_finds_the_innermost_op_running_at_the_call(tmp_path):
    """Kernels reach their ops through their launch calls: the op that started last before the call when it is
    still running, else its nearest running ancestor; a kernel whose call is not in the trace stays unlinked."""
    def op(name, ts, dur, ext, dims):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                "args": {"External id": ext, "Input Dims": dims, "Input type": ["float"] * len(dims)}}

    def launch(ts, corr):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts,
                "dur": 5, "args": {"External id": 1000 + corr, "correlation": corr}}

    def kernel(name, ts, corr):
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 20,
                "args": {"External id": 1000 + corr, "correlation": corr, "device": 0, "stream": 7}}

    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 400},
          op("aten::linear", 10, 90, 5, [[64, 128], [256, 128], [256]]),
          op("aten::t", 12, 3, 6, [[256, 128]]),  # ended before the linear's launch: its parent launched it
          launch(50, 1), kernel("ampere_sgemm_64x64_nn", 150, 1),
          op("aten::relu", 120, 20, 7, [[64, 256]]), launch(130, 2), kernel("vectorized_elementwise_kernel", 180, 2),
          kernel("orphan_kernel", 210, 3)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    tr, = load_traces([path])
    names = tr.ops["name"].to_numpy()
    linked = dict(zip(tr.kernels["name"], names[tr.kernels["op"].to_numpy()], strict=True))
    assert linked == {"ampere_sgemm_64x64_nn": "aten::linear", "vectorized_elementwise_kernel": "aten::relu"}


def test_a_committed_execution_trace_alone_says_which_fp32_math_it_assumed(capsys):
    """The committed fp32 CNN step on an H100, its execution trace alone (no kernels to read the math from): the
    convolutions are priced on TF32 by PyTorch's default cuDNN switch (4.3 ms against 8.8 ms for the linked pair,
    whose kernels ran IEEE fp32). The assumption is said, text and --json, with the option that overrides it, and
    the option brings the execution trace alone to the pair's price."""
    cnn = ROOT / "datasets" / "traces-h100" / "cnn-fp32"
    et = str(cnn / "et_rank0.json.gz")
    capsys.readouterr()
    assert cli_main(["trace", "predict", et, "--device", "H100-SXM", "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    conv = alone["fp32_precision"]["conv"]
    assert conv["source"] == "PyTorch default" and conv["mode"] == "tf32" and conv["tf32_ops"] == conv["fp32_ops"] > 0
    assert any(f"{conv['fp32_ops']} fp32 convolution(s) priced on TF32" in w and "--fp32-conv ieee" in w
               for w in alone["warnings"])
    assert cli_main(["trace", "predict", et, "--device", "H100-SXM"]) == 0
    text = capsys.readouterr()
    assert "--fp32-conv ieee" in text.out + text.err and "convolution(s) on TF32 (PyTorch default)" in text.out
    assert cli_main(["trace", "predict", str(cnn), "--device", "H100-SXM", "--json"]) == 0
    pair = json.loads(capsys.readouterr().out)
    assert pair["fp32_precision"]["conv"]["source"] == "kernels" and pair["fp32_precision"]["conv"]["tf32_ops"] == 0
    assert not any("TF32" in w for w in pair.get("warnings", []))
    assert alone["predicted_ms"] < 0.7 * pair["predicted_ms"]
    assert cli_main(["trace", "predict", et, "--device", "H100-SXM", "--json", "--fp32-conv", "ieee"]) == 0
    ieee = json.loads(capsys.readouterr().out)
    assert ieee["predicted_ms"] == pytest.approx(pair["predicted_ms"], rel=0.05)


def test_an_execution_trace_alone_carries_the_recorded_switches(tmp_path):
    """``trace_step`` stored the program's fp32 math switches in the Chrome trace only: its execution trace given
    alone fell back to PyTorch's defaults (a program that allowed TF32 matmuls had them priced on FP32 units, with
    a warning that the trace does not say). The execution trace carries them now, stamped without re-parsing."""
    model, x = _LinearConv(), torch.randn(16, 8, 16, 16)
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = True, False
        paths = record_step(lambda: model(x).sum().backward(), tmp_path, warmup=1, measure_overhead=False,
                            memory=False, timed=0)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    doc = json.loads(Path(paths["et"]).read_text())
    assert doc[METADATA_KEY] == {"matmul": "tf32", "conv": "ieee"} and doc["nodes"]  # the trace itself intact
    for files in ([paths["et"]], [paths["kineto"], paths["et"]]):
        it = build_trace_graph(load_traces(files), A100)
        acc = it.info["fp32_precision"]
        assert acc["matmul"]["source"] == acc["conv"]["source"] == "recorded", files
        assert set(_gemm_dtypes(it)) == {"tf32"}
        assert {r["dtype"] for r in it.units["row"] if isinstance(r, dict) and r.get("op") == "conv2d"} == {"fp32"}
    # the stamp on other shapes of JSON: leading space, an empty object; a non-object left as it is
    from hybrid.data.traces.record import _stamp_json

    for text, want in ((' \n{"a": 1}', {"k": [1], "a": 1}), ("{ }", {"k": [1]}), ("[1]", [1])):
        f = tmp_path / "doc.json"
        f.write_text(text)
        _stamp_json(f, "k", [1])
        assert json.loads(f.read_text()) == want and not list(tmp_path.glob("*.stamp"))
