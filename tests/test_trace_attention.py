"""Traced attention: fused SDPA kernels map to one attention op each (causal read from each op's own argument,
forward and backward alike), the math fallback is costed op by op, and the argument table matches PyTorch."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid.data.traces import load_traces
from hybrid.data.traces.opmap import ATTENTION_ARGS, map_op
from hybrid.workloads.trace_units import trace_units

torch = pytest.importorskip("torch")


def _units(step, tmp_path):
    from hybrid.data.traces.record import record_step

    torch.set_num_threads(1)
    rec = record_step(step, tmp_path, warmup=1)
    return trace_units(load_traces([rec["kineto"], rec["et"]])[0])


def test_fused_sdpa_forward_and_backward_are_causal_attention_units(tmp_path):
    torch.manual_seed(0)
    q = torch.randn(2, 8, 64, 16, requires_grad=True)
    kv = torch.randn(2, 2, 64, 16, requires_grad=True)

    def step() -> None:
        torch.nn.functional.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True).sum().backward()

    u = _units(step, tmp_path)
    att = u[u["label"] == "attention"]
    assert list(att["phase"]) == ["forward", "backward"]
    want = {"op": "attention", "batch": 2, "heads": 8, "q_len": 64, "kv_len": 64, "head_dim": 16, "kv_heads": 2,
            "causal": 1, "dtype": "fp32", "softmax_overlap": 0}
    for row, direction in zip(att["row"], ("fwd", "bwd"), strict=True):
        assert row == {**want, "direction": direction}
    # the dispatcher wrapper is not costed on top of the kernel it ran
    assert not u["name"].eq("aten::scaled_dot_product_attention").any()


def test_math_fallback_is_costed_op_by_op(tmp_path):
    """With dropout in training the CPU runs SDPA's math fallback: scores, softmax, dropout and two matmuls, whose
    backward autograd runs as separate ops too; none of it is priced as a fused kernel."""
    torch.manual_seed(0)
    q = torch.randn(2, 4, 32, 16, requires_grad=True)

    def step() -> None:
        torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.1, is_causal=True).sum().backward()

    u = _units(step, tmp_path)
    labels = set(u["label"])
    assert "attention" not in labels
    assert {"gemm", "softmax", "dropout"} <= labels
    assert (u[u["label"] == "gemm"]["phase"] == "backward").sum() >= 4


def _attention_layer_trace(dtype, tmp_path, device: str = "cpu"):
    """A training step of one attention layer with dropout (SDPA's math fallback on the CPU and the meta device)
    in ``dtype``, traced on ``device``."""
    from hybrid.data.traces.record import record_step

    torch.manual_seed(0)
    torch.set_num_threads(1)
    with torch.device(device):
        qkv, out = torch.nn.Linear(64, 192).to(dtype), torch.nn.Linear(64, 64).to(dtype)
        x = torch.randn(2, 32, 64, dtype=dtype)

    def step() -> None:
        q, k, v = qkv(x).view(2, 32, 3, 4, 16).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True)
        out(a.transpose(1, 2).reshape(2, 32, 64)).float().sum().backward()

    rec = record_step(step, tmp_path, warmup=0 if device == "meta" else 1, device=device, memory=False,
                      measure_overhead=False)
    return load_traces([rec["kineto"], rec["et"]])[0]


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_bf16_attention_traced_on_a_cpu_is_priced_in_bf16_on_a_gpu(tmp_path, device):
    """The CPU's (and the meta device's) math fallback upcasts a bf16 attention to fp32: its matmuls, softmax and
    dropout, forward and backward, were traced in fp32. A GPU runs the call in bf16, so there they are bf16 and the
    casts of the upcast launch nothing; on the CPU it really ran them in fp32, and an fp32 model stays fp32."""
    from hybrid.data.bundle import load_bundle
    from hybrid.engine.costs import RooflineCostModel
    from hybrid.workloads.trace_graph import build_trace_graph, predict_trace

    bf16 = _attention_layer_trace(torch.bfloat16, tmp_path / "bf16", device)
    units = trace_units(bf16)
    math = units[(units["math_attention"] == "bf16") & (units["kind"] == "op")]
    traced = {r["dtype"] for r in math.loc[math["label"] == "gemm", "row"]}
    assert traced == {"fp32"} and set(math.loc[math["label"] == "gemm", "phase"]) == {"forward", "backward"}

    def gemm_dtypes(it) -> list[str]:
        u = it.units
        return sorted({r["dtype"] for r in u.loc[(u["kind"] == "op") & (u["label"] == "gemm"), "row"]})

    gpu = build_trace_graph([bf16], "H100-SXM")
    assert gemm_dtypes(gpu) == ["bf16"]  # the projections and the attention's 8 matmuls alike
    assert gpu.info["math_attention"]["ops"] >= 8 + 2 and gpu.info["math_attention"]["casts"] >= 4
    casts = gpu.units[gpu.units["name"].isin(["aten::_to_copy", "aten::to"]) & (gpu.units["math_attention"] != "")]
    assert len(casts) and set(casts["kind"]) == {"view"}
    s = predict_trace(gpu, RooflineCostModel()).summary()
    assert s["math_attention"]["dtype"] == "bf16" and s["fp32_precision"]["matmul"]["fp32_ops"] == 0
    fp32 = build_trace_graph([_attention_layer_trace(torch.float32, tmp_path / "fp32", device)], "H100-SXM")
    assert gemm_dtypes(fp32) == ["fp32"] and fp32.info["math_attention"]["ops"] == 0
    if device == "cpu":  # the traced CPU ran the fallback in fp32
        cat = load_bundle(Path(__file__).resolve().parents[1] / "datasets" / "cpu-amd-epyc-1c")[1]
        on_cpu = build_trace_graph([bf16], "cpu-amd-epyc-1c", cat)
        assert gemm_dtypes(on_cpu) == ["bf16", "fp32"] and on_cpu.info["math_attention"]["ops"] == 0


def test_flash_kernel_layout_and_mask_type():
    """The flash / memory-efficient kernels take [batch, length, heads, dim]; the efficient kernels' causal
    argument is a mask type (0: none)."""
    q, k = [2, 128, 8, 64], [2, 512, 4, 64]
    args = [""] * 20
    args[8] = "True"
    m = map_op("aten::_flash_attention_forward", [q, k, k], ["bf16"] * 3, extra={"concrete": args})
    assert m.row == {"op": "attention", "batch": 2, "heads": 8, "q_len": 128, "kv_len": 512, "head_dim": 64,
                     "kv_heads": 4, "causal": 1, "dtype": "bf16", "direction": "fwd", "softmax_overlap": 0}
    args = [""] * 20
    args[9] = "0"
    m = map_op("aten::_efficient_attention_forward", [q, k, k], ["fp32"] * 3, extra={"concrete": args})
    assert m.row["causal"] == 0 and m.row["heads"] == 8
    args[9] = "1"
    assert map_op("aten::_efficient_attention_forward", [q, k, k], ["fp32"] * 3,
                  extra={"concrete": args}).row["causal"] == 1
    # the wrapper maps only as a leaf (a meta-device or kernel-less trace); with children it is looked into
    sd = [[2, 8, 128, 64], [2, 8, 128, 64], [2, 8, 128, 64]]
    assert map_op("aten::scaled_dot_product_attention", sd, ["fp32"] * 3, leaf=True).label == "attention"
    # which kernel: FlashAttention-2 and the efficient kernel run the softmax in series with the matrix
    # multiplies; cuDNN's kernel and the bare wrapper leave it to the GPU generation (roofline default)
    assert "softmax_overlap" not in map_op("aten::scaled_dot_product_attention", sd, ["fp32"] * 3, leaf=True).row
    cudnn = map_op("aten::_scaled_dot_product_cudnn_attention", sd, ["bf16"] * 3, extra={"concrete": [""] * 20})
    assert cudnn.label == "attention" and "softmax_overlap" not in cudnn.row
    assert map_op("aten::_efficient_attention_forward", [q, k, k], ["fp32"] * 3,
                  extra={"concrete": args}).row["softmax_overlap"] == 0
    assert map_op("aten::scaled_dot_product_attention", sd, ["fp32"] * 3, leaf=False) is None
    assert map_op("aten::_scaled_dot_product_attention_math", sd, ["fp32"] * 3, leaf=False) is None


def test_argument_positions_match_pytorch_schemas():
    """Each fused attention op's causal flag and dropout_p sit where this PyTorch's ATen schema puts them."""
    checked = 0
    for name, (causal_at, dropout_at) in ATTENTION_ARGS.items():
        op = getattr(torch.ops.aten, name, None)
        if op is None:
            continue
        args = [a.name for a in op.default._schema.arguments]
        assert args[causal_at] in ("is_causal", "custom_mask_type"), (name, args)
        assert args[dropout_at] == "dropout_p", (name, args)
        checked += 1
    assert checked >= 12


def test_dropout_argument_is_recorded_on_the_attention_row():
    """Training with attention dropout (BERT's and GPT-2's SDPA, dropout_p 0.1) runs the fused kernel with a
    dropout mask drawn inside it: the H200's traced GPT-2 forward (8 x 12 x 1024, d 64, causal, cuDNN) takes 105 us,
    ~6x its roofline against ~2x without dropout. The row records the probability from the op's own argument
    (Kineto's concrete inputs, as traced: cuDNN forward at 5, backward at 13) and leaves it out where it is 0."""
    sd = [[8, 12, 1024, 64]] * 3
    fwd = [""] * 9
    fwd[4], fwd[5], fwd[6] = "True", "0.10000000000000001", "True"
    row = map_op("aten::_scaled_dot_product_cudnn_attention", sd, ["bf16"] * 3, extra={"concrete": fwd}).row
    assert row["dropout"] == pytest.approx(0.1) and row["causal"] == 1
    bwd = [""] * 11 + ["1024", "1024", "0.10000000000000001", "True", "0.125"]
    row = map_op("aten::_scaled_dot_product_cudnn_attention_backward", [sd[0]] * 5, ["bf16"] * 5,
                 extra={"concrete": bwd}).row
    assert row["dropout"] == pytest.approx(0.1) and row["causal"] == 1 and row["direction"] == "bwd"
    # the execution trace's values (floats, not strings); no dropout: no column
    args = [None] * 10
    args[3], args[4] = 0.25, True
    assert map_op("aten::_scaled_dot_product_flash_attention", sd, ["bf16"] * 3,
                  extra={"values": args}).row["dropout"] == pytest.approx(0.25)
    args[3] = 0.0
    assert "dropout" not in map_op("aten::_scaled_dot_product_flash_attention", sd, ["bf16"] * 3,
                                   extra={"values": args}).row



def test_prediction_says_which_families_the_model_never_measured(tmp_path, capsys):
    """A model fitted without attention rows prices a traced SDPA step's attention by extrapolation: the summary
    and the CLI say so; with attention rows in the fit they do not. The record survives a save and load."""
    import warnings

    import pandas as pd

    from hybrid.cli.main import main
    from hybrid.corrections.predictor import HybridPredictor
    from hybrid.data.bundle import load_bundle
    from hybrid.data.paths import project_datasets_dir
    from hybrid.data.profiler.runner import ProfileOptions, run_profile
    from hybrid.data.traces.record import record_step
    from hybrid.workloads.trace_graph import build_trace_graph, predict_trace

    torch.set_num_threads(1)
    torch.manual_seed(0)
    q = torch.randn(2, 4, 64, 16, requires_grad=True)

    def step() -> None:
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()

    rec = record_step(step, tmp_path / "trace", warmup=1)
    bundle = project_datasets_dir() / "cpu-amd-epyc-1c"
    base, cat = load_bundle(bundle)
    key = base["device"].iloc[0]
    run_profile(ProfileOptions(quick=True, families=("attention",), threads=1, progress=False, force_cpu=True),
                tmp_path / "att")
    att = load_bundle(tmp_path / "att")[0].assign(device=key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        without = HybridPredictor(catalog=cat).fit(base)
        with_ = HybridPredictor(catalog=cat).fit(pd.concat([base, att], ignore_index=True, sort=False))
    assert "attention" not in without.families_seen and "attention" in with_.families_seen
    assert {"gemm", "elementwise", "embedding"} <= set(without.families_seen)
    traces = load_traces([rec["kineto"], rec["et"]])
    it = build_trace_graph(traces, key, cat, same_device=True)
    assert predict_trace(it, without).summary()["unmeasured_families"] == {"attention": 2}
    assert "unmeasured_families" not in predict_trace(it, with_).summary()
    without.save(tmp_path / "saved")
    assert HybridPredictor.load(tmp_path / "saved").families_seen == without.families_seen
    capsys.readouterr()
    assert main(["trace", "predict", str(rec["kineto"]), str(rec["et"]), "--device", key, "--bundle", str(bundle)]) == 0
    err = capsys.readouterr().err
    assert "warning: 2 attention op(s) priced without any attention measurement" in err


#: A quick CPU attention profile's rows (``hybrid profile --only attention --quick`` here: fp32 only), as measured:
#: (direction, batch, q_len, kv_len, causal, time_us) of 4 heads of 64.
_CPU_FP32_ATTENTION = (("fwd", 4, 64, 64, True, 269.5), ("bwd", 4, 64, 64, True, 542.2), ("fwd", 4, 64, 64, False, 273.8),
                       ("bwd", 4, 64, 64, False, 516.5), ("fwd", 1, 256, 256, True, 786.0),
                       ("bwd", 1, 256, 256, True, 1743.1), ("fwd", 1, 256, 256, False, 747.3),
                       ("bwd", 1, 256, 256, False, 1740.8), ("fwd", 4, 1, 256, False, 128.2))


def test_a_bf16_attention_on_a_cpu_target_warns_of_the_dtype_it_is_priced_in(tmp_path, capsys):
    """On a CPU target a bf16 SDPA was priced silently in fp32: its fused CPU kernel (no dropout) from a model whose
    attention rows are fp32 only (a quick CPU profile), its math fallback (dropout) in fp32 as traced. Each is a
    DtypeFallbackWarning naming the op count and the dtypes, in the summary's ``dtype_fallbacks`` and, from the
    CLI, a ``warning:`` line and an entry of ``warnings`` in --json. A model with bf16 attention rows says nothing."""
    import json
    import warnings

    import pandas as pd

    from hybrid.cli.main import main
    from hybrid.corrections.predictor import HybridPredictor
    from hybrid.data.bundle import load_bundle
    from hybrid.data.paths import project_datasets_dir
    from hybrid.data.traces.record import record_step
    from hybrid.engine.costs import RooflineCostModel
    from hybrid.errors import DtypeFallbackWarning
    from hybrid.workloads.trace_graph import build_trace_graph, predict_trace

    bundle = project_datasets_dir() / "cpu-amd-epyc-1c"
    base, cat = load_bundle(bundle)
    key = base["device"].iloc[0]
    att = pd.DataFrame([{"device": key, "op": "attention", "dtype": "fp32", "direction": d, "batch": b, "heads": 4,
                         "kv_heads": 4, "q_len": q, "kv_len": kv, "head_dim": 64, "causal": c, "time_us": t,
                         "repeats": 20, "source": "hybrid-profile", "framework": "pytorch"}
                        for d, b, q, kv, c, t in _CPU_FP32_ATTENTION])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = HybridPredictor(catalog=cat).fit(pd.concat([base, att], ignore_index=True, sort=False))
    assert model.family_dtypes["attention"] == {key: ["fp32"]}

    torch.manual_seed(0)
    torch.set_num_threads(1)
    q = torch.randn(2, 4, 32, 16, dtype=torch.bfloat16, requires_grad=True)

    def step() -> None:  # no dropout: the CPU's fused (flash) kernel, in bf16
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).float().sum().backward()

    rec = record_step(step, tmp_path / "flash", warmup=1, memory=False, measure_overhead=False)
    flash = load_traces([rec["kineto"], rec["et"]])
    it = build_trace_graph(flash, key, cat)
    with pytest.warns(DtypeFallbackWarning, match=r"^2 bf16 attention op\(s\) priced from the model's fp32 attention "
                                                  rf"measurements on {key}, none in bf16"):
        s = predict_trace(it, model).summary()
    assert s["dtype_fallbacks"] == [{"family": "attention", "kind": "measurements", "dtype": "bf16", "ops": 2,
                                     "measured_in": "fp32", "note": s["dtype_fallbacks"][0]["note"]}]
    with warnings.catch_warnings():  # a model with bf16 attention rows, or the roofline: nothing to say
        warnings.simplefilter("error", DtypeFallbackWarning)
        predict_trace(it, RooflineCostModel(cat))
        model.family_dtypes["attention"][key] = ["bf16", "fp32"]
        assert "dtype_fallbacks" not in predict_trace(it, model).summary()

    # the math fallback (dropout): its ops priced in fp32 on the CPU, as traced, whatever the model
    math = _attention_layer_trace(torch.bfloat16, tmp_path / "math")
    with pytest.warns(DtypeFallbackWarning, match=r"^\d+ op\(s\) of a bf16 attention's SDPA math fallback priced in "
                                                  rf"fp32 on {key}, as traced"):
        s = predict_trace(build_trace_graph([math], key, cat), RooflineCostModel(cat)).summary()
    (fb,) = s["dtype_fallbacks"]
    assert fb["kind"] == "math fallback" and fb["ops"] >= 8 and s["math_attention"]["fp32_ops"] == fb["ops"]

    rows = tmp_path / "attention.csv"
    att.to_csv(rows, index=False)
    capsys.readouterr()
    assert main(["trace", "predict", str(rec["kineto"]), str(rec["et"]), "--device", key, "--bundle", str(bundle),
                 "--rows", str(rows), "--json"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    note = "2 bf16 attention op(s) priced from the model's fp32 attention measurements"
    assert any(w.startswith(note) for w in doc["warnings"]) and f"warning: {note}" in out.err
    assert doc["dtype_fallbacks"][0]["ops"] == 2

    # --compare: each compared target that prices ops from another dtype warns too, named by target (a GPU the
    # model never measured attention on: from the CPU's fp32 rows), and its row says so in short; the main target's
    # own warning is not repeated
    gpu = "A100-SXM4-80GB"
    assert main(["trace", "predict", str(rec["kineto"]), str(rec["et"]), "--device", key, "--bundle", str(bundle),
                 "--rows", str(rows), "--compare", f"{key},{gpu}", "--json"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    other = (f"--compare {gpu}: 2 bf16 attention op(s) priced from the model's fp32 attention measurements (on "
             "other devices: none on this one), none in bf16")
    assert any(w.startswith(other) for w in doc["warnings"]) and f"warning: {other}" in out.err
    assert sum(w.startswith(note) for w in doc["warnings"]) == 1  # the main target's, once
    rows_by = {r["device"]: r for r in doc["compare"]}
    assert rows_by[gpu]["note"] == "2 bf16 attention op(s) priced from fp32 rows"
    assert rows_by[gpu]["dtype_fallbacks"][0]["ops"] == 2 and "dtype_fallbacks" in rows_by[key]
