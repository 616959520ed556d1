"""The NLP benchmark's models: every NeuSight model config, the labels' layer counts, Switch models of any expert
count and Hugging Face config files (``--model-configs``)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")


@pytest.fixture
def bench(load_experiment):
    return load_experiment("nlp_e2e")


def _sizes(cfg) -> tuple[int, int, int]:
    return cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads


#: NeuSight's scripts/asplos/data/DLmodel_configs/<name>.json: (width, layers, heads, class of both modes)
NEUSIGHT_MODELS = {
    "bert": (768, 12, 12, None), "bert_large": (1024, 24, 16, None),
    "gpt2_med": (1024, 24, 16, "GPT2LMHeadModel"), "gpt2_large": (1280, 36, 20, "GPT2LMHeadModel"),
    "gpt2_xl": (1600, 48, 25, "GPT2LMHeadModel"), "gpt3_xl": (3072, 24, 24, "GPT2LMHeadModel"),
    "gpt3_13": (5120, 40, 40, "GPT2LMHeadModel"), "gpt3_27": (2560, 32, 32, "GPT2LMHeadModel"),
    "gpt3_67": (4096, 32, 32, "GPT2LMHeadModel"), "opt": (512, 1, 8, "OPTForCausalLM"),
    "opt_13": (2048, 24, 32, "OPTForCausalLM"),
    "switchxl4": (1024, 24, 32, "SwitchTransformersForConditionalGeneration"),
}


@pytest.mark.parametrize("name", sorted(NEUSIGHT_MODELS))
def test_every_neusight_model_config_is_built_in(bench, name):
    width, layers, heads, cls = NEUSIGHT_MODELS[name]
    classes, cfg = bench.model_builder(name, None)
    assert _sizes(cfg) == (width, layers, heads)
    assert bench.hidden_size(cfg) == width
    assert cfg._attn_implementation == "eager"
    if cls is None:  # BERT: sequence classification (inference), pre-training heads (training)
        assert (classes["inf"], classes["train"]) == (tf.BertForSequenceClassification, tf.BertForPreTraining)
    else:
        assert classes["inf"].__name__ == classes["train"].__name__ == cls


def test_neusight_model_details(bench):
    _, gpt = bench.model_builder("gpt3_13", None)
    assert (gpt.n_positions, gpt.vocab_size) == (2048, 50257)
    _, bert = bench.model_builder("bert", None)
    assert (bert.intermediate_size, bert.vocab_size, bert.max_position_embeddings) == (3072, 30522, 512)
    # the toy OPT's embeddings are wider than its layers: the project_in / project_out linears exist
    classes, opt = bench.model_builder("opt", None)
    assert (opt.ffn_dim, opt.word_embed_proj_dim, opt.vocab_size, opt.max_position_embeddings) == (2048, 2048, 50272,
                                                                                                   2048)
    with torch.device("meta"):
        model = classes["inf"](opt)
    dec = model.model.decoder
    assert (dec.project_in.in_features, dec.project_in.out_features) == (2048, 512)
    assert (dec.project_out.in_features, dec.project_out.out_features) == (512, 2048)
    assert bench.model_builder("gpt4", None) is None and bench.model_builder("switchxl0", None) is None


@pytest.mark.parametrize("name", ["bert", "bert_large", "gpt2_med", "gpt3_67", "opt", "opt_13"])
def test_num_layer_sets_the_layer_count(bench, name):
    _, cfg = bench.model_builder(name, 3)
    assert cfg.num_hidden_layers == 3
    # 0 / None: the model's own
    assert bench.model_builder(name, 0)[1].num_hidden_layers == NEUSIGHT_MODELS[name][1]


def test_switch_models_of_any_expert_count(bench):
    _, four = bench.model_builder("switchxl4", None)
    classes, eight = bench.model_builder("switchxl8", 2)
    assert (four.num_experts, eight.num_experts) == (4, 8)
    assert (eight.num_layers, eight.num_decoder_layers) == (2, 24)  # num_layer: the encoder's layers
    cfg = eight.to_dict()
    for k in ("num_experts", "num_layers"):
        cfg.pop(k)
    ref = four.to_dict()
    for k in ("num_experts", "num_layers"):
        ref.pop(k)
    assert cfg == ref  # otherwise the same Switch model
    with torch.device("meta"):
        mlp = classes["inf"](tf.SwitchTransformersConfig(**{**eight.to_dict(), "d_model": 32, "d_ff": 64,
                                                            "d_kv": 8, "num_heads": 4, "num_layers": 2,
                                                            "num_decoder_layers": 2}))
    sparse = [m for m in mlp.modules() if type(m).__name__ == "SwitchTransformersSparseMLP"]
    assert sparse and all(m.router.num_experts == len(m.experts) == 8 for m in sparse)


def test_label_num_layer_column(bench, tmp_path):
    rows = ("gpu,config,model,mode,seqlen,batch,extra,num_layer,e2e_latency\n"
            "NVIDIA_A100-PCIE-40GB,a,gpt2_med,inf,128,1,,2,1.0\n"
            "NVIDIA_A100-PCIE-40GB,b,gpt2_med,inf,128,1,dp4,0,1.0\n"
            "NVIDIA_A100-PCIE-40GB,c,switchxl4,inf,128,1,,,1.0\n")
    (tmp_path / "l.csv").write_text(rows)
    labels = bench.read_labels(str(tmp_path / "l.csv"))
    assert labels["num_layer"].tolist() == [2, 0, 0]
    assert [bench.label_layers(r) for _, r in labels.iterrows()] == [2, None, None]
    assert bench.label_layers(pd.Series({"model": "gpt2_med"})) is None  # no column: the model's own
    from hybrid.errors import InvalidInputError

    (tmp_path / "bad.csv").write_text(rows.replace(",,2,", ",,two,"))
    with pytest.raises(InvalidInputError, match="num_layer"):
        bench.read_labels(str(tmp_path / "bad.csv"))


def test_model_config_files(bench, tmp_path):
    from hybrid.hardware.catalog import default_catalog

    llama = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
             "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "vocab_size": 100, "max_position_embeddings": 64, "torch_dtype": "bfloat16"}
    (tmp_path / "tiny_llama.json").write_text(json.dumps(llama))
    (tmp_path / "tiny_gpt2.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 32, "n_layer": 2,
                                                         "n_head": 2, "vocab_size": 100, "n_positions": 64}))
    classes, cfg = bench.model_builder("tiny_llama", None, tmp_path)
    assert classes["inf"] is classes["train"] is tf.LlamaForCausalLM
    assert _sizes(cfg) == (64, 2, 4) and cfg._attn_implementation == "eager"
    assert bench.model_builder("tiny_llama", 5, tmp_path)[1].num_hidden_layers == 5
    classes, cfg = bench.model_builder("tiny_gpt2", 3, tmp_path)
    assert classes["inf"] is tf.GPT2LMHeadModel and _sizes(cfg) == (32, 3, 2)
    with torch.device("meta"):
        model = tf.LlamaForCausalLM(bench.model_builder("tiny_llama", None, tmp_path)[1])
    assert next(model.parameters()).dtype == torch.float32  # NeuSight's steps are FP32
    # built-in names win over files; names with neither are skipped
    (tmp_path / "gpt2_med.json").write_text(json.dumps(llama))
    assert bench.model_builder("gpt2_med", None, tmp_path)[1].model_type == "gpt2"
    assert bench.model_builder("unknown", None, tmp_path) is None
    row = pd.Series({"gpu": "NVIDIA_A100-PCIE-40GB", "model": "tiny_llama", "mode": "inf", "extra": ""})
    cat = default_catalog()
    assert bench.skip_reason(row, cat, tmp_path) is None
    assert "not modelled" in bench.skip_reason(row, cat)


@pytest.mark.parametrize("content, match", [
    ("{not json", "not a readable"),
    (json.dumps({"hidden_size": 8}), "model_type"),
    (json.dumps({"model_type": "no_such_model_type"}), "no_such_model_type"),
    (json.dumps({"model_type": "vit"}), "not supported"),
])
def test_broken_model_config_files_are_input_errors(bench, tmp_path, content, match):
    from hybrid.errors import InvalidInputError

    path = tmp_path / "broken.json"
    path.write_text(content)
    with pytest.raises(InvalidInputError, match=match) as err:
        bench.model_builder("broken", None, tmp_path)
    assert str(path) in str(err.value)


def test_a_new_model_traces_with_the_labels_layers(bench, tmp_path):
    from hybrid.data.traces import load_trace
    from hybrid.engine.costs import RooflineCostModel
    from hybrid.hardware.catalog import default_catalog
    from hybrid.workloads.trace_graph import build_trace_graph

    kin = bench.record_trace("gpt2_med", "inf", 128, 1, tmp_path, 2)
    assert kin.is_file() and kin.parent.name.startswith("gpt2_med-inf-128-1-")
    assert bench.record_trace("gpt2_med", "inf", 128, 1, tmp_path, 2) == kin  # cached
    units = build_trace_graph([load_trace(kin)], "A100-PCIE-40GB", default_catalog(), same_device=False).units
    gemm = [(r["m"], r["k"], r["n"]) for r in units["row"] if isinstance(r, dict) and r.get("op") == "gemm"]
    assert gemm
    # GPT-2 (Conv1D) layers: q/k/v (n = 3 x 1024) and MLP up (n = 4096) GEMMs of 128 tokens, once per layer
    assert gemm.count((128, 1024, 3072)) == gemm.count((128, 1024, 4096)) == 2
    # rows differing only in num_layer get their own traces (the cache key and the trace's config digest)
    cat = default_catalog()
    models, cache = {"roofline": (RooflineCostModel(cat), cat)}, {}
    row = pd.Series({"gpu": "NVIDIA_A100-PCIE-40GB", "model": "gpt2_med", "mode": "inf", "seqlen": 128, "batch": 1,
                     "extra": "", "num_layer": 2})
    two = bench.predict_row(tmp_path, row, "A100-PCIE-40GB", models, cache)["roofline"]
    one = bench.predict_row(tmp_path, pd.concat([row.drop("num_layer"), pd.Series({"num_layer": 1})]),
                            "A100-PCIE-40GB", models, cache)["roofline"]
    assert set(cache) == {("gpt2_med", "inf", 128, 1, 2, False), ("gpt2_med", "inf", 128, 1, 1, False)}
    assert 0 < one < two


@pytest.mark.parametrize("row, match", [
    ("NVIDIA_H200,c,gpt2_med,inf,,8,,2,13.4", "row 3: seqlen must be a positive whole number"),
    ("NVIDIA_H200,c,gpt2_med,inf,128,,,2,13.4", "row 3: batch must be a positive whole number"),
    ("NVIDIA_H200,c,gpt2_med,inf,128,-8,,2,13.4", "row 3: batch must be a positive whole number"),
    ("NVIDIA_H200,c,gpt2_med,inf,128,2.5,,2,13.4", "row 3: batch must be a positive whole number"),
    ("NVIDIA_H200,c,gpt2_med,inf,128,8,,-3,13.4", "row 3: num_layer must be a whole number, 0 or more"),
    ("NVIDIA_H200,c,gpt2_med,inf,128,8,,2,inf", "row 3: e2e_latency must be a positive number"),
])
def test_label_rows_without_a_usable_shape_or_time_are_input_errors(bench, tmp_path, row, match):
    """A label whose step cannot be built as written is refused with its row, not a traceback halfway through the
    run (empty seqlen / batch) nor predicted as another step (a negative num_layer was the model's own depth)."""
    from hybrid.errors import InvalidInputError

    path = tmp_path / "l.csv"
    path.write_text("gpu,config,model,mode,seqlen,batch,extra,num_layer,e2e_latency\n"
                    f"NVIDIA_H200,a,gpt2_med,inf,128,1,,2,1.0\n{row}\n")
    with pytest.raises(InvalidInputError, match=match):
        bench.read_labels(str(path))


def test_label_names_lose_surrounding_blanks_and_bad_parallel_labels_are_skipped(bench, tmp_path):
    from hybrid.hardware.catalog import default_catalog

    path = tmp_path / "l.csv"
    path.write_text("gpu,config,model,mode,seqlen,batch,extra,num_layer,e2e_latency\n"
                    " NVIDIA_H200 , a, gpt2_med , train ,128.0,4,,2,1.0\n"
                    "NVIDIA_H200,b,gpt2_med,train,128,4,dpX,2,1.0\n"
                    "NVIDIA_H200,c,gpt2_med,train,128,4,dp0,2,1.0\n"
                    "NVIDIA_H200,d,gpt2_med,train,128,4,tp0,2,1.0\n"
                    "NVIDIA_H200,e,gpt2_med,train,128,6,dp4,2,1.0\n"
                    "NVIDIA_H200,f,gpt2_med,train,128,8,dp4,2,1.0\n"
                    "NVIDIA_H200,g,gpt2_med,train,128,8,pp4_1,2,1.0\n")
    labels = bench.read_labels(str(path))
    assert labels[["gpu", "model", "mode"]].iloc[0].tolist() == ["NVIDIA_H200", "gpt2_med", "train"]
    assert labels["seqlen"].tolist() == [128] * 7
    cat = default_catalog()
    reasons = [bench.skip_reason(r, cat) for _, r in labels.iterrows()]
    assert reasons[0] is None and reasons[5] is None and reasons[6] is None
    assert reasons[1] == "unknown extra 'dpX'"
    assert "no GPU" in reasons[2] and "no GPU" in reasons[3]
    assert "not divisible" in reasons[4]  # 6 rows over 4 ranks: not the 4 x 1 step it would have been predicted as


def test_labels_longer_than_the_position_table_are_skipped(bench, tmp_path):
    """A BERT label of 1024 tokens (512 positions) stopped the whole run with a torch error while tracing, and a
    GPT-2 one of 4096 (1024 positions) was traced and predicted as if it ran; both are skipped with the reason.
    Switch (relative positions) has no such bound; NeuSight's own labels all fit."""
    from hybrid.hardware.catalog import default_catalog

    path = tmp_path / "l.csv"
    path.write_text("gpu,config,model,mode,seqlen,batch,extra,num_layer,e2e_latency\n"
                    "NVIDIA_L4,a,bert_large,inf,1024,1,,1,1.0\n"
                    "NVIDIA_L4,b,gpt2_large,inf,4096,1,,1,1.0\n"
                    "NVIDIA_L4,c,gpt2_large,inf,1024,1,,1,1.0\n"
                    "NVIDIA_L4,d,switchxl4,inf,4096,1,,1,1.0\n")
    cat = default_catalog()
    reasons = [bench.skip_reason(r, cat) for _, r in bench.read_labels(str(path)).iterrows()]
    assert reasons == ["seqlen longer than bert_large's 512 positions",
                       "seqlen longer than gpt2_large's 1024 positions", None, None]


def test_single_gpu_training_steps_add_into_the_gradients_of_the_step_before(bench, tmp_path):
    """NeuSight times 25 single-GPU training steps without zeroing the gradients (``measure_e2e``), so each labelled
    backward adds every parameter's new gradient into the resident one; its multi-GPU loop zeroes them. The traced
    step left the adds out (and the gradients out of the resident memory): 0 of GPT-2's 28 parameter adds."""
    import math

    from hybrid.data.traces import load_trace
    from hybrid.data.traces.memory import memory_of
    from hybrid.engine.costs import RooflineCostModel
    from hybrid.hardware.catalog import default_catalog
    from hybrid.workloads.trace_graph import build_trace_graph, predict_trace

    assert bench.accumulates_gradients("train", "") and bench.accumulates_gradients("train", "fusion")
    assert not any(bench.accumulates_gradients("train", x) for x in ("dp4", "tp4", "pp4_1"))
    assert not bench.accumulates_gradients("inf", "")
    _, cfg = bench.model_builder("gpt2_med", 2)
    with torch.device("meta"):
        params = list(tf.GPT2LMHeadModel(cfg).parameters())
    n_params = sum(p.numel() for p in params)
    cat = default_catalog()
    models = {"roofline": (RooflineCostModel(cat), cat)}
    row = pd.Series({"gpu": "NVIDIA_A100-PCIE-40GB", "model": "gpt2_med", "mode": "train", "seqlen": 128,
                     "batch": 1, "extra": "", "num_layer": 2})
    cache: dict = {}
    single = bench.predict_row(tmp_path, row, "A100-PCIE-40GB", models, cache)["roofline"]
    (acc,) = cache.values()
    plain = load_trace(bench.record_trace("gpt2_med", "train", 128, 1, tmp_path, 2))

    def adds(trace):  # the adds AccumulateGrad runs into a resident gradient, and the elements they add
        ops = trace.ops
        ids = set(ops.loc[ops["name"] == "torch::autograd::AccumulateGrad", "id"])
        add = ops[(ops["name"] == "aten::add_") & ops["parent"].isin(ids)]
        return len(add), sum(math.prod(d[0]) for d in add["dims"])

    assert adds(plain) == (0, 0)
    assert adds(acc) == (len(params), n_params)  # one add per parameter tensor, every weight once
    # the gradients are resident when the step starts: the parameters' bytes twice (fp32), plus the input ids
    res_acc, res_plain = memory_of(acc.meta).resident_bytes, memory_of(plain.meta).resident_bytes
    assert res_acc - res_plain == 4 * n_params
    # priced: 12 bytes per weight more (read both gradients, write one) than the step without: 0.94 GB, 0.6 ms at
    # the A100's 1555 GB/s (device time: without the host, under which this tiny step's adds partly hide)
    from hybrid.engine.overheads import Overheads

    with_adds, without = (predict_trace(build_trace_graph([t], "A100-PCIE-40GB", cat, same_device=False),
                                        RooflineCostModel(cat), Overheads.zero()).predicted_us / 1e3
                          for t in (acc, plain))
    floor = 12 * n_params / 1555e9 * 1e3
    assert floor < with_adds - without < 1.5 * floor
    assert single >= with_adds  # the benchmark's prediction adds the host model
