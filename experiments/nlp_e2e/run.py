"""End-to-end NLP latencies on GPUs predicted from PyTorch traces recorded on this CPU (meta device).

    python experiments/nlp_e2e/run.py --labels FILE [--model NAME] [--no-with-test-kernels] [--no-with-gpu-bundles]
        [--no-with-llmcompass] [--no-with-collectives] [--with-trace-kernels] [--model-configs DIR]
        [--leave-one-gpu-out [--shots K]] [--json] [--out results.md]

``FILE`` has NeuSight's end-to-end label format (``../shared/datasets/neusight/e2e_labels_dev.csv``: columns
``gpu, config, model, mode, seqlen, batch, extra, e2e_latency`` in ms, optionally ``num_layer``). For every
labelled (model, mode, sequence, batch) the model is built from ``transformers`` config objects (public
architecture sizes; all layers, or the label's ``num_layer`` where it is > 0) on the **meta device** (shapes
without data, so GPT-3 2.7B at batch 8 x 2048 fits in this VM) and one step is
traced with ``torch.profiler`` exactly as NeuSight times it: inference = ``model(input_ids)`` in eval mode under
``no_grad`` (BERT: sequence classification); training = forward + cross-entropy + backward (BERT: pre-training
heads), no optimizer step; a single-GPU training step starts with the gradients of the step before resident
and adds into them, as NeuSight's 25 steps without ``zero_grad`` did (:func:`accumulates_gradients`). The trace
becomes the engine's task graph for the labelled GPU (``hybrid.workloads.trace_graph``; the traced host time is
dropped: a meta-device trace says nothing about a GPU host, the engine's launch overheads stand in) and every op
is costed

* by the roofline (catalog specs), and
* by the calibrated predictor: a HybridPredictor fitted on every eager-PyTorch kernel collection at hand:
  NeuSight's public *kernel* training and test collections (``scripts/asplos/data/dataset/train`` and
  ``neusight/test-dev``: FP32 PyTorch kernels of P4, P100, T4, V100, A100-PCIE-40GB, A100 80GB PCIe, and the AMD
  MI100/MI210 GEMMs), the project's own GPU bundles (``datasets/``: one H100 SXM) and LLMCompass's eager FP16
  softmax rows of A100 and MI210 (``llmcompass-pointwise``; its compiled layernorm/GELU rows are left out) -- the
  **same GPUs** as most label rows, so those rows are not held-out hardware; rows on A100-SXM4-40GB and MI250 are.
  ``--no-with-test-kernels`` / ``--no-with-gpu-bundles`` / ``--no-with-llmcompass`` leave one out (before
  2026-11-25 the first two were opt-in and the third did not exist); the collective models are fitted on every
  public collective measurement (nccl-tests, Vidur network, XLA; 12,000 rows drawn evenly per device and op), none
  of them on the labels' 4-GPU A100-SXM4-40GB node, so its collectives are answered by the cross-system transfer
  model (``--no-with-collectives``: by the roofline, with no interval, as before 2026-11-29);
  ``--model NAME`` uses a calibrated model from the tracking store instead. ``--leave-one-gpu-out`` predicts each
  label GPU with a model fitted without a single row of it (kernels of every source and collective logs dropped;
  one fit per GPU; ``heldout_results.md``): what a GPU that no calibration data describes gets; ``--shots K`` puts K
  random kernel rows of it back (``heldout_K_shots_results.md``): what a few measurements of a new GPU buy.

Parallel rows (``extra`` = dp4 / tp4 / pp4_1 on 4 x A100-SXM4-40GB) rewrite the single-GPU trace
(``hybrid.workloads.trace_parallel``): DP = 4 ranks at batch/4 with DDP bucketed all-reduces, TP = Megatron
splitting with 2 all-reduces per layer and direction, PP = 4 stages with one micro-batch. ``fusion`` rows
(torch.compile) are the eager trace with its pointwise runs fused (``hybrid.workloads.trace_fusion``); the
Switch-Transformer MoE traces with static-shape routing (:func:`static_switch_routing`).

Models: every NeuSight model config (``scripts/asplos/data/DLmodel_configs``) is built in: ``bert``,
``bert_large``, ``gpt2_med``, ``gpt2_large``, ``gpt2_xl``, ``gpt3_xl``, ``gpt3_27``, ``gpt3_67``, ``gpt3_13``,
``opt``, ``opt_13`` and ``switchxlN`` (the Switch model with N experts, e.g. ``switchxl4``, ``switchxl8``).
``--model-configs DIR`` names a directory of Hugging Face ``config.json`` files called ``<model>.json``: a label
model that is not built in is built from ``DIR/<model>.json`` (its ``model_type``'s config with eager attention;
GPT-2, OPT, Llama, Mistral, GPT-NeoX, ... as their causal LM, BERT as sequence classification / pre-training,
encoder-decoders as their sequence-to-sequence LM; an unreadable file or unsupported ``model_type`` is an input
error). Rows that cannot be mapped (unknown models, GPUs or modes) are skipped and counted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
#: The labels the committed results are of (``--labels``' default).
DEFAULT_LABELS = ROOT.parent / "shared" / "datasets" / "neusight" / "e2e_labels_dev.csv"
sys.path.insert(0, str(ROOT))

LABEL_COLUMNS = ("gpu", "model", "mode", "seqlen", "batch", "e2e_latency")


#: NeuSight's GPT-2-class model configs (scripts/asplos/data/DLmodel_configs/*.json): name -> (n_embd, n_layer,
#: n_head, n_positions), all with GPT-2's vocabulary of 50257
GPT2_CLASS = {"gpt2_med": (1024, 24, 16, 1024), "gpt2_large": (1280, 36, 20, 1024), "gpt2_xl": (1600, 48, 25, 1024),
              "gpt3_xl": (3072, 24, 24, 2048), "gpt3_27": (2560, 32, 32, 2048), "gpt3_67": (4096, 32, 32, 2048),
              "gpt3_13": (5120, 40, 40, 2048)}


def model_builder(name: str, n_layer: int | None, config_dir: str | Path | None = None):
    """(transformers model class per mode, config) for a NeuSight model name; None if not modelled.

    ``n_layer`` (the label's ``num_layer``; None or 0: the model's own) sets the number of layers (Switch: its
    encoder layers). A name that is not built in is read from ``config_dir/<name>.json`` when that file exists
    (:func:`config_file_builder`)."""
    import re

    import transformers as tf

    eager = {"attn_implementation": "eager"}
    if name in ("bert", "bert_large"):
        # bert.json: BERT base (768 wide, 12 layers, 12 heads); bert_large.json: 1024, 24, 16
        h, n, heads, ff = (768, 12, 12, 3072) if name == "bert" else (1024, 24, 16, 4096)
        cfg = tf.BertConfig(hidden_size=h, num_hidden_layers=n_layer or n, num_attention_heads=heads,
                            intermediate_size=ff, vocab_size=30522, max_position_embeddings=512, **eager)
        return {"inf": tf.BertForSequenceClassification, "train": tf.BertForPreTraining}, cfg
    # NeuSight's model configs (scripts/asplos/data/DLmodel_configs/*.json): its "gpt3_xl" is 24 layers of width
    # 3072 with 24 heads (wider than the GPT-3 paper's 2048), the others follow the published architectures
    if name in GPT2_CLASS:
        h, n, heads, pos = GPT2_CLASS[name]
        cfg = tf.GPT2Config(n_embd=h, n_layer=n_layer or n, n_head=heads, vocab_size=50257, n_positions=pos, **eager)
        return {"inf": tf.GPT2LMHeadModel, "train": tf.GPT2LMHeadModel}, cfg
    switch = re.fullmatch(r"switchxl(\d+)", name)
    if switch and int(switch.group(1)) >= 1:
        # NeuSight's switchxl4.json: Switch-Transformer encoder-decoder, 24 + 24 layers of width 1024, every other
        # layer's MLP a 4-expert top-1 MoE (d_ff 16384) with an expert capacity of 64 tokens per sequence;
        # switchxlN is the same model with N experts per MoE layer
        cfg = tf.SwitchTransformersConfig(
            d_model=1024, d_ff=16384, d_kv=128, num_heads=32, num_layers=n_layer or 24, num_decoder_layers=24,
            num_experts=int(switch.group(1)), expert_capacity=64, encoder_sparse_step=2, decoder_sparse_step=2,
            num_sparse_encoder_layers=12, num_sparse_decoder_layers=12, vocab_size=32128, router_bias=False,
            dense_act_fn="relu", feed_forward_proj="relu", is_gated_act=False, dropout_rate=0.1, **eager)
        cls = tf.SwitchTransformersForConditionalGeneration
        return {"inf": cls, "train": cls}, cfg
    if name in ("opt", "opt_13"):
        # opt.json: a 1-layer toy of width 512 whose embeddings are 2048 wide (project_in / project_out exist);
        # opt_13.json: OPT-1.3B
        h, n, heads, ff = (512, 1, 8, 2048) if name == "opt" else (2048, 24, 32, 8192)
        cfg = tf.OPTConfig(hidden_size=h, num_hidden_layers=n_layer or n, num_attention_heads=heads, ffn_dim=ff,
                           vocab_size=50272, max_position_embeddings=2048, word_embed_proj_dim=2048, **eager)
        return {"inf": tf.OPTForCausalLM, "train": tf.OPTForCausalLM}, cfg
    if config_dir is not None and (Path(config_dir) / f"{name}.json").is_file():
        return config_file_builder(Path(config_dir) / f"{name}.json", n_layer)
    return None


def config_file_builder(path: Path, n_layer: int | None = None):
    """(transformers model class per mode, config) from a Hugging Face ``config.json`` (``--model-configs``):
    the config of its ``model_type`` with eager attention, and the class NeuSight would time: GPT-2 / OPT / other
    decoders their causal-LM model, BERT sequence classification (inference) and pre-training (training),
    encoder-decoders their sequence-to-sequence LM. An unreadable file or an unsupported ``model_type`` is an
    :class:`~hybrid.errors.InvalidInputError` naming the file."""
    import transformers as tf

    from hybrid.errors import InvalidInputError

    try:
        fields = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidInputError(f"{path}: not a readable model config.json ({exc})") from None
    if not isinstance(fields, dict) or not isinstance(fields.get("model_type"), str):
        raise InvalidInputError(f"{path}: a Hugging Face config.json needs a \"model_type\" string")
    fields = dict(fields)
    model_type = fields.pop("model_type")
    if model_type not in tf.CONFIG_MAPPING:
        raise InvalidInputError(f"{path}: model_type {model_type!r} is not a transformers {tf.__version__} model")
    config_class = tf.CONFIG_MAPPING[model_type]
    if n_layer:
        key = config_class.attribute_map.get("num_hidden_layers", "num_hidden_layers")
        for k in {key, "num_hidden_layers", "n_layer", "num_layers", "n_layers"} & set(fields):
            fields.pop(k)
        fields[key] = int(n_layer)
        if isinstance(fields.get("layer_types"), list) and fields["layer_types"]:  # per-layer kinds: same pattern
            pattern = fields["layer_types"]
            fields["layer_types"] = [pattern[i % len(pattern)] for i in range(int(n_layer))]
    # NeuSight's labels are FP32 steps of a model built from its config: a stored dtype (bfloat16 checkpoints) is
    # a property of the weights, not of the timed step
    for k in ("torch_dtype", "dtype"):
        fields.pop(k, None)
    fields["attn_implementation"] = "eager"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cfg = tf.AutoConfig.for_model(model_type, **fields)
    except Exception as exc:  # the config class's own validation: one line
        raise InvalidInputError(f"{path}: not a valid {model_type} config ({type(exc).__name__}: {exc})") from None
    from transformers.models.auto import modeling_auto as ma

    if model_type == "bert":
        classes = {"inf": tf.BertForSequenceClassification, "train": tf.BertForPreTraining}
    elif type(cfg) in ma.MODEL_FOR_CAUSAL_LM_MAPPING:
        cls = ma.MODEL_FOR_CAUSAL_LM_MAPPING[type(cfg)]
        classes = {"inf": cls, "train": cls}
    elif type(cfg) in ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING:
        cls = ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING[type(cfg)]
        classes = {"inf": cls, "train": cls}
    else:
        raise InvalidInputError(f"{path}: model_type {model_type!r} is not supported (neither BERT nor a causal "
                                "or sequence-to-sequence language model)")
    return classes, cfg


def label_layers(row: pd.Series) -> int | None:
    """The label's ``num_layer`` when it has one (> 0; :func:`read_labels` made it a whole number), else None
    (the model's own layer count)."""
    v = int(row.get("num_layer", 0) or 0)
    return v if v > 0 else None


def hidden_size(cfg) -> int:
    return int(getattr(cfg, "d_model", None) or getattr(cfg, "hidden_size", None) or cfg.n_embd)


@contextlib.contextmanager
def static_switch_routing(identical_tokens: bool = True):
    """Switch-Transformer experts with static shapes, so the model traces on the meta device (its own routing
    gathers each expert's tokens with data-dependent ``nonzero``/``where``), with the same gather, expert GEMMs,
    scaling and ``index_add_`` scatter per expert that the real layer runs.

    How many tokens each expert gets depends on the input. NeuSight's labels run the model on ``input_ids`` of all
    ones (``neusight/Tracing/trace.py``: ``torch.ones(batch, seq)`` for encoder and decoder): every position
    then carries the same hidden state (T5's relative attention bias only reweights identical values), so the
    top-1 router sends every token of a sequence to one expert, which keeps ``expert_capacity`` of them (HF's
    ``tokens_masked`` router drops the rest; the other experts get none). ``identical_tokens=False`` is the
    uniform routing of real text: each expert gets ``seq / experts`` tokens per sequence, capped at capacity."""
    import math

    import torch
    from transformers.models.switch_transformers import modeling_switch_transformers as sw

    original = sw.SwitchTransformersSparseMLP.forward

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        batch, seq, width = hidden_states.shape
        _, routing_weights, _ = self.router(hidden_states)
        flat = hidden_states.view(-1, width)
        weights = routing_weights.view(-1, 1)
        experts, cap = self.router.num_experts, int(self.router.expert_capacity)
        per_seq = [min(cap, seq)] + [0] * (experts - 1) if identical_tokens else \
            [min(cap, math.ceil(seq / experts))] * experts
        out = torch.zeros_like(flat)
        for e, n in enumerate(per_seq):
            if n == 0:
                continue
            rows = (torch.arange(batch * n, device=flat.device) + e * n) % flat.shape[0]
            y = self.experts[f"expert_{e}"](flat[rows]) * weights[rows]
            out.index_add_(0, rows, y.to(flat.dtype))
        return out.view(batch, seq, width)

    sw.SwitchTransformersSparseMLP.forward = forward
    try:
        yield
    finally:
        sw.SwitchTransformersSparseMLP.forward = original


@contextlib.contextmanager
def legacy_bert_attention_mask():
    """BERT's self-attention as NeuSight's ``transformers`` ran it: an all-ones attention mask added to every
    layer's scores.

    NeuSight calls ``model(input_ids)`` without a mask, through ``from_config(..., attn_implementation="eager")``,
    so ``transformers`` 4.36 or later of the PyTorch 2.1 era (its kernel data says ``p2.1.0``). Up to the 4.x
    masking refactor, ``BertModel`` then made a mask of ones, turned it into the extended mask
    ``(1 - mask[:, None, None, :]) * finfo.min`` ([batch, 1, 1, seq], zeros) and every layer's eager attention
    added it to its [batch, heads, seq, seq] scores: one more pass over the scores per layer than the current
    ``transformers`` (5.x) runs, which drops an all-ones mask (``create_bidirectional_mask`` returns None; it
    cannot even be given one on the meta device, where it reads the mask's values). This puts the extended mask
    back: built once per step with the same ops, added in every layer. GPT-2 and OPT run as many score-sized
    passes in both versions (GPT-2: scale + causal ``where`` then, scale + mask add now; OPT: mask add + ``max``
    then, scale + mask add now), so only BERT is patched."""
    import torch
    from transformers.models.bert import modeling_bert as mb

    original = mb.eager_attention_forward
    masks: dict = {}

    def forward(module, query, key, value, attention_mask, *args, **kwargs):
        if attention_mask is None:
            key_ = (query.shape[0], key.shape[-2], query.dtype, query.device)
            if key_ not in masks:
                ones = torch.ones(query.shape[0], key.shape[-2], device=query.device)
                ext = ones[:, None, None, :].to(query.dtype)
                masks[key_] = (1.0 - ext) * torch.finfo(query.dtype).min
            attention_mask = masks[key_]
        return original(module, query, key, value, attention_mask, *args, **kwargs)

    mb.eager_attention_forward = forward
    try:
        yield
    finally:
        mb.eager_attention_forward = original


def accumulates_gradients(mode: str, extra: str) -> bool:
    """Whether the labelled step's backward adds into gradients left by the steps before it.

    NeuSight's single-GPU labels (``neusight/Tracing/trace.py``, ``measure_e2e``) run 25 training steps of one
    model without zeroing its gradients and keep the fastest 5 forward and backward times: from the second step
    on, every parameter's ``AccumulateGrad`` adds the new gradient into the one already there (one ``add_`` per
    parameter, 3 x 4 bytes per fp32 weight). Its multi-GPU labels (``dp``/``tp``/``pp``: an ``accelerate``
    training loop) call ``optimizer.zero_grad()`` after each step, which sets the gradients to None: nothing to
    add to."""
    return mode == "train" and not str(extra).startswith(("dp", "tp", "pp"))


def record_trace(name: str, mode: str, seq: int, batch: int, out: Path, n_layer: int | None = None,
                 config_dir: str | Path | None = None, accumulate: bool = False) -> Path:
    """Trace one NeuSight-style step of ``name`` on the meta device (cached in ``out``); ``n_layer`` and
    ``config_dir`` as in :func:`model_builder`. ``accumulate`` (training only): the step starts with the
    gradients of an earlier step resident and its backward adds into them (:func:`accumulates_gradients`); else
    it starts without gradients."""
    import hashlib

    import torch

    from hybrid.data.traces.memory import measure_step_memory
    from hybrid.data.traces.record import trace_step
    from hybrid.errors import InvalidInputError

    built = model_builder(name, n_layer, config_dir)
    if built is None:
        raise InvalidInputError(f"model {name} not modelled (no built-in architecture and no config file)")
    classes, cfg = built
    model_type = getattr(cfg, "model_type", "")
    # BERT traces carry the extended attention mask of NeuSight's transformers (legacy_bert_attention_mask)
    proto = "bert-extended-mask" if model_type == "bert" else ""
    # "step-memory": traces carry the step's tensor memory (hybrid.data.traces.memory) since 2026-11-30
    accumulate = bool(accumulate) and mode == "train"
    proto += "grad-accumulate" if accumulate else ""
    digest = hashlib.sha256((cfg.to_json_string() + torch.__version__ + proto + "step-memory").encode()).hexdigest()[:10]
    path = out / f"{name}-{mode}-{seq}-{batch}-{digest}"
    kin = path / "kineto_rank0.json"
    if kin.is_file():
        return kin
    with torch.device("meta"):
        model = classes[mode](cfg)
    ids = torch.ones((batch, seq), dtype=torch.long, device="meta")
    # encoder-decoder models (Switch) take the same sequence on both sides
    inputs = {"input_ids": ids, "decoder_input_ids": ids} if getattr(cfg, "is_encoder_decoder", False) else \
        {"input_ids": ids}
    if mode == "inf":
        model.eval()

        def step() -> None:
            with torch.no_grad():
                model(**inputs)
    else:
        model.train()

        def step() -> None:
            res = model(**inputs)
            logits = res["prediction_logits"] if "prediction_logits" in res else res["logits"]
            loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), ids.view(-1))
            loss.backward()
    def routing():  # a fresh context per use (the step runs twice: its memory, then its trace)
        return (static_switch_routing() if model_type == "switch_transformers" else
                legacy_bert_attention_mask() if model_type == "bert" else contextlib.nullcontext())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if accumulate:  # an earlier step's gradients, resident when the measured and the traced step start
            with routing():
                step()
        with routing():
            memory = measure_step_memory(step, "meta")
        if not accumulate:  # the traced step starts as the measured one did: no gradients to add to
            for prm in model.parameters():
                prm.grad = None
        with routing(), trace_step(path, execution_trace=False, device="meta", cuda=False, memory=memory):
            step()
    return kin


#: Catalog devices whose labels are predicted on another catalog entry: an MI250 / MI250X module is two graphics
#: compute dies, ROCm lists each as its own device and a single-process PyTorch program (every single-GPU label)
#: runs on one, so those labels are predicted on one GCD (half the module's datasheet figures;
#: hybrid/hardware/devices.toml). Keyed by the resolved device, not the label's spelling: ``AMD_Instinct_MI250X``
#: (NeuSight's file names), ``AMD Instinct MI250X`` (``torch.cuda.get_device_name``) and ``MI250X`` are one GPU.
GPU_OVERRIDES = {"MI250": "MI250-GCD", "MI250X": "MI250X-GCD"}


def resolve_gpu(name: str, catalog) -> str | None:
    """Catalog key a label's GPU name is predicted on (:data:`GPU_OVERRIDES` applied), or None."""
    key = _catalog_gpu(name, catalog)
    if key in GPU_OVERRIDES and catalog.resolve_device(GPU_OVERRIDES[key], missing_ok=True):
        return catalog.resolve_device(GPU_OVERRIDES[key])
    return key


def _catalog_gpu(name: str, catalog) -> str | None:
    cands = [name]
    s = name
    for pre in ("NVIDIA_", "Tesla_", "AMD_Instinct_", "AMD_", "NVIDIA "):
        if s.startswith(pre):
            s = s[len(pre):]
    cands += [s, s.replace("_", "-"), s.replace("_", " ")]
    if "80GB" in s and "PCIe" in s:
        cands.append(s.split("_")[0] + "-PCIE-80GB")
    for c in cands:
        key = catalog.resolve_device(c, missing_ok=True)
        if key:
            return key
    return None


def results_path(args: argparse.Namespace) -> str | None:
    """Where the markdown report goes: ``--out``, else the committed results beside this script for a run on the
    public dev labels without ``--json``, else nowhere. The labels are recognised by path, not by name: a file of
    one's own called ``e2e_labels_dev.csv`` (say the first rows of the public one, copied elsewhere) overwrote the
    committed results.md, its plot and e2e_rows.csv with its partial scores."""
    if args.out:
        return str(args.out)
    if args.json:
        return None
    from hybrid.data.paths import public_data_dir

    public = [DEFAULT_LABELS]
    base = public_data_dir(getattr(args, "data_dir", None), required=False)
    if base is not None:
        public.append(base / "neusight" / "e2e_labels_dev.csv")
    given = Path(args.labels).resolve()
    if not any(p.is_file() and given == p.resolve() for p in public):
        return None
    name = ("results.md" if not args.leave_one_gpu_out else
            f"heldout_{args.shots}_shots_results.md" if args.shots else "heldout_results.md")
    return str(Path(__file__).with_name(name))


def read_labels(path: str) -> pd.DataFrame:
    from hybrid.errors import InvalidInputError

    p = Path(path)
    if not p.is_file():
        raise InvalidInputError(f"labels file not found: {p}")
    try:
        # text columns as text: a file of inference rows only would otherwise read mode "inf" as infinity
        df = pd.read_csv(p, keep_default_na=False,
                         dtype={c: str for c in ("gpu", "config", "model", "mode", "extra", "source_path")})
    except Exception as exc:  # pandas parser errors: one line
        raise InvalidInputError(f"{p}: not a readable CSV ({exc})") from None
    missing = [c for c in LABEL_COLUMNS if c not in df.columns]
    if missing:
        raise InvalidInputError(f"{p}: missing column(s) {missing}; a NeuSight e2e label table needs {LABEL_COLUMNS}")
    if df.empty:
        raise InvalidInputError(f"{p}: has no data rows (a header only)")
    df["e2e_latency"] = pd.to_numeric(df["e2e_latency"], errors="coerce")
    bad = ~(np.isfinite(df["e2e_latency"]) & (df["e2e_latency"] > 0))
    if bad.any():
        raise InvalidInputError(f"{p}: row {int(np.flatnonzero(bad)[0]) + 2}: e2e_latency must be a positive number")
    if "extra" not in df.columns:
        df["extra"] = ""
    # names as written, without the blanks a hand-edited "a, b" CSV leaves around them (" train" is mode train)
    for c in ("gpu", "model", "mode", "extra"):
        df[c] = df[c].astype(str).str.strip()
    df["extra"] = df["extra"].replace({"nan": "", "0": ""})
    for c in ("seqlen", "batch"):  # every step needs both: an empty or fractional one is a broken row, not a guess
        raw = df[c].astype(str).str.strip()
        v = pd.to_numeric(raw, errors="coerce")
        bad = ~(np.isfinite(v) & (v > 0) & (v == np.round(v)))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidInputError(f"{p}: row {i + 2}: {c} must be a positive whole number (got {raw.iloc[i]!r})")
        df[c] = v.astype(int)
    if "num_layer" in df.columns:  # layers to build (0 or empty: the model's own)
        raw = df["num_layer"].astype(str).str.strip()
        layers = pd.to_numeric(raw.replace({"": "0", "nan": "0"}), errors="coerce")
        bad = ~(np.isfinite(layers) & (layers == np.round(layers)) & (layers >= 0))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidInputError(f"{p}: row {i + 2}: num_layer must be a whole number, 0 or more "
                                    f"(got {raw.iloc[i]!r})")
        df["num_layer"] = layers.astype(int)
    return df


def calibrated_model(data_dir: str | None, rows_per_gpu: int, seed: int, with_test_kernels: bool = True,
                     gpu_bundles: bool = True, llmcompass: bool = True, trace_kernels: bool = False,
                     intervals: bool = False, collectives: bool = True, collective_rows: int = 12000,
                     exclude_devices: Iterable[str] = (), shots: int = 0):
    """HybridPredictor fitted on :func:`calibration_table` (arguments as there; ``intervals``: the 80% prediction
    intervals are calibrated too, ``fit(intervals=True)``: what ``hybrid calibrate`` gives; the point predictions are
    the same): (model, catalog, GPUs with kernel rows in the fit, rows in the fit)."""
    from hybrid.corrections.predictor import HybridPredictor

    table, cat, kernel_devices = calibration_table(data_dir, rows_per_gpu, seed, with_test_kernels, gpu_bundles,
                                                   llmcompass, trace_kernels, collectives, collective_rows,
                                                   exclude_devices, shots)
    model = HybridPredictor(catalog=cat, seed=seed).fit(table, intervals=intervals, progress=intervals)
    return model, cat, kernel_devices, len(table)


def calibration_table(data_dir: str | None, rows_per_gpu: int, seed: int, with_test_kernels: bool = True,
                      gpu_bundles: bool = True, llmcompass: bool = True, trace_kernels: bool = False,
                      collectives: bool = True, collective_rows: int = 12000, exclude_devices: Iterable[str] = (),
                      shots: int = 0):
    """The calibration rows of the NLP model: (table, catalog, GPUs with kernel rows in it). NeuSight's kernel
    training data (sub-sampled per GPU and family group); with ``with_test_kernels`` also NeuSight's kernel *test*
    collections (``neusight/test-dev``, or the whole upstream test folder where the data directory has it,
    :data:`hybrid.data.importers.neusight.TEST_COLLECTIONS`: larger shapes, and the A100 80GB PCIe), which are kernel
    measurements, not
    end-to-end labels; with ``gpu_bundles`` also the project's GPU bundles (``datasets/``, whole); with
    ``llmcompass`` also LLMCompass's A100/MI210 FP16 eager softmax table (the only AMD pointwise measurements at
    hand; its layernorm and GELU ran compiled); with ``collectives`` also every public collective measurement
    (nccl-tests logs, Vidur's network tables, XLA's H100 collectives; at most ``collective_rows``, drawn evenly per
    device and op), so that the multi-GPU labels' collectives are costed by the learned collective models (the
    labelled node is not among the measured systems: the cross-system transfer model answers) and carry a
    calibrated band. Collective rows do not enter the kernel fits. Rows of the catalog devices in
    ``exclude_devices`` are dropped from every source (kernels and collectives alike): the GPU is one no
    measurement describes, as a new user's GPU is; with ``shots`` > 0, ``shots`` of each such device's kernel rows
    (drawn at random with ``seed``, GEMM and pointwise alike) stay in: the few measurements a user takes of a new
    GPU before calibrating on it."""
    from hybrid.data.importers import import_paths
    from hybrid.data.importers.neusight import TEST_COLLECTIONS, TRAIN_COLLECTIONS, collections
    from hybrid.data.paths import public_data_dir
    from hybrid.hardware.catalog import default_catalog

    base = public_data_dir(data_dir)
    cat = default_catalog()
    # whichever NeuSight collections the data directory holds (the test ones: the derived test-dev subset, or
    # the whole upstream test folder, whichever is there; a copy in both is read once)
    dirs = collections(base, "train") + (collections(base, "test") if with_test_kernels else [])
    if not dirs:
        from hybrid.errors import InvalidInputError

        raise InvalidInputError(f"{base}: no NeuSight kernel collections (looked for "
                                f"{', '.join(TRAIN_COLLECTIONS + TEST_COLLECTIONS)})")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = import_paths("neusight", dirs, catalog=cat)
    grp = np.where(table["op"].isin(["bmm", "linear", "gemm", "matmul"]), "gemm", "pointwise")
    table = table.assign(_g=grp).sample(frac=1.0, random_state=seed).groupby(["device", "_g"]).head(rows_per_gpu)
    table = table.drop(columns="_g").reset_index(drop=True)
    if gpu_bundles:
        from hybrid.data.bundle import load_project_bundles

        table = pd.concat([table, load_project_bundles("gpu")[0]], ignore_index=True, sort=False)
    if llmcompass:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lc = import_paths("llmcompass-pointwise", base, catalog=cat)
        # the eager softmax rows only: its layernorm and GELU ran under torch.compile (another kernel, another
        # host path), which the labels' eager runs do not use
        table = pd.concat([table, lc[lc["framework"] == "pytorch"]], ignore_index=True, sort=False)
    if trace_kernels:
        from hybrid.workloads.trace_kernels import step_kernel_rows

        traces = sorted(ROOT.glob("datasets/traces-*"))  # the project's own GPU traces
        table = pd.concat([table, step_kernel_rows(traces, cat)], ignore_index=True, sort=False)
    if collectives:
        coll = public_collectives(base, cat, collective_rows)
    excluded = set(exclude_devices)
    if excluded:
        out = table["device"].isin(excluded).to_numpy()
        kept = (table[out].sample(frac=1.0, random_state=seed).groupby("device").head(shots).index
                if shots > 0 else [])
        table = table[~out | table.index.isin(kept)].reset_index(drop=True)
        if collectives and len(coll):
            coll = coll[~coll["device"].isin(excluded)].reset_index(drop=True)
    kernel_devices = sorted(table["device"].unique())  # a GPU measured only in collectives ran no kernel here
    if collectives:
        table = pd.concat([table, coll], ignore_index=True, sort=False)
    return table, cat, kernel_devices



def public_collectives(base: Path, cat, max_rows: int) -> pd.DataFrame:
    """Every public collective measurement under ``base`` (nccl-tests, Vidur network, XLA collectives), flagged
    rows dropped, at most ``max_rows`` drawn evenly per (device, op)."""
    from hybrid.data.importers import import_paths
    from hybrid.tracking.inputs import subsample

    frames = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fmt, sub in (("nccl-tests", "nccl-tests"), ("vidur-network", "vidur"), ("xla-collectives", "xla")):
            if (base / sub).exists():
                frames.append(import_paths(fmt, [base / sub], catalog=cat))
    if not frames:
        return pd.DataFrame()
    table = pd.concat(frames, ignore_index=True, sort=False)
    if "wrong" in table.columns:
        table = table[~(pd.to_numeric(table["wrong"], errors="coerce").fillna(0) > 0)]
    return subsample(table.reset_index(drop=True), max_rows, 0)


def predict_row(trace_dir: Path, row: pd.Series, device: str, models: dict, cache: dict,
                kernel_times: bool = True, config_dir: str | Path | None = None) -> dict:
    from hybrid.data.traces import load_trace
    from hybrid.workloads import trace_parallel as tp
    from hybrid.workloads.trace_graph import build_trace_graph, predict_trace

    name, mode, seq, batch, extra = row["model"], row["mode"], int(row["seqlen"]), int(row["batch"]), row["extra"]
    ranks, per_rank_batch = 1, batch
    if extra.startswith("dp"):
        ranks = parallel_degree(extra)
        per_rank_batch = batch // ranks  # a whole number of rows per rank (skip_reason)
    layers = label_layers(row)  # the label's num_layer (None: the model's own)
    accumulate = accumulates_gradients(mode, extra)
    key = (name, mode, seq, per_rank_batch, layers, accumulate)
    if key not in cache:
        cache[key] = load_trace(record_trace(name, mode, seq, per_rank_batch, trace_dir, layers, config_dir,
                                             accumulate))
    trace = cache[key]
    transform, traces = None, [trace]
    _, cfg = model_builder(name, layers, config_dir)
    if extra.startswith("dp"):
        traces = tp.replicate(trace, ranks)
        transform = tp.data_parallel(ranks)
    elif extra.startswith("tp"):
        n = parallel_degree(extra)
        traces = tp.replicate(trace, n)
        transform = tp.tensor_parallel(n, batch * seq, hidden_size(cfg))
    elif extra.startswith("pp"):
        n = parallel_degree(extra)
        transform = tp.pipeline_parallel(n, batch * seq, hidden_size(cfg))
    elif extra == "fusion":  # torch.compile: the eager trace with its pointwise runs fused
        from hybrid.workloads.trace_fusion import compiled_fusion

        transform = compiled_fusion()
    out = {"memory_pct": np.nan}
    for label, (model, cat) in models.items():
        it = build_trace_graph(traces, device, cat, same_device=False, transform=transform)
        pred = predict_trace(it, model, kernel_times=kernel_times)
        out[label] = pred.predicted_us / 1e3
        mem = pred.memory()
        # the traced process's tensors per GPU: as traced for one GPU, data parallelism and torch.compile (eager
        # memory); no fraction for tensor / pipeline parallelism, which split them
        if "fraction" in mem:
            out["memory_pct"] = 100.0 * mem["fraction"]
        low, high = (float(getattr(pred.predicted, f"iteration_us_{e}", float("nan"))) for e in ("low", "high"))
        if np.isfinite(low) and np.isfinite(high):  # the model's 80% interval carried through the schedule
            out[f"{label}_low"], out[f"{label}_high"] = low / 1e3, high / 1e3
        out[f"{label}_unmodelled_ops"] = int((it.units["kind"] == "unmodelled").sum())
    return out


def parallel_degree(extra: str) -> int | None:
    """GPUs of a parallel label's ``extra`` (``dp4``, ``tp4``, ``pp4_1``: 4), or None when it names none."""
    m = re.fullmatch(r"(?:dp|tp|pp)(\d+)(?:_.*)?", str(extra))
    return int(m.group(1)) if m else None


#: Architectures with a learned absolute position table (``model_type`` -> its config attribute): a longer
#: sequence indexes past the table, which the meta-device trace does not check (GPT-2) or fails halfway through the
#: run on (BERT), and which no GPU runs. Rotary / relative / ALiBi models have no such bound.
LEARNED_POSITIONS = {"bert": "max_position_embeddings", "roberta": "max_position_embeddings",
                     "distilbert": "max_position_embeddings", "opt": "max_position_embeddings",
                     "gpt2": "n_positions", "gpt_neo": "max_position_embeddings", "gpt_bigcode": "n_positions"}


def max_positions(cfg) -> int | None:
    """Longest sequence the model's position table holds, or None where it has none."""
    attr = LEARNED_POSITIONS.get(getattr(cfg, "model_type", ""))
    n = getattr(cfg, attr, None) if attr else None
    return int(n) if n else None


def skip_reason(row: pd.Series, catalog, config_dir: str | Path | None = None) -> str | None:
    extra = row["extra"]
    if extra and extra != "fusion" and parallel_degree(extra) is None:
        return f"unknown extra {extra!r}"
    if extra and extra != "fusion" and parallel_degree(extra) < 1:
        return f"extra {extra!r}: no GPU to run on"
    if extra.startswith("dp") and int(row["batch"]) % parallel_degree(extra):
        # the label's batch is the global one, split evenly over the ranks (NeuSight's dp4 labels: 4 = 4 x 1)
        return f"extra {extra!r}: batch not divisible by the data-parallel ranks"
    if row["mode"] not in ("inf", "train"):
        return f"unknown mode {row['mode']!r}"
    built = model_builder(str(row["model"]), label_layers(row), config_dir)
    if built is None:
        return f"model {row['model']} not modelled (unknown architecture, no --model-configs file)"
    most = max_positions(built[1])
    if most is not None and int(row["seqlen"]) > most:
        return f"seqlen longer than {row['model']}'s {most} positions"
    if resolve_gpu(str(row["gpu"]), catalog) is None:
        return f"GPU {row['gpu']} not in the catalog"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", default=str(DEFAULT_LABELS))
    ap.add_argument("--model", default=None, help="calibrated model from the tracking store (NAME[/VERSION])")
    ap.add_argument("--tracking-uri", default=None)
    ap.add_argument("--data-dir", default=None, help="public data directory (default ../shared/datasets)")
    ap.add_argument("--rows-per-gpu", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--with-test-kernels", action=argparse.BooleanOptionalAction, default=True,
                    help="also fit the kernel model on NeuSight's kernel test collections (neusight/test-dev; "
                         "default: on, every public eager-PyTorch kernel collection)")
    ap.add_argument("--with-gpu-bundles", action=argparse.BooleanOptionalAction, default=True,
                    help="also fit on the project's GPU bundles (datasets/: its own eager-PyTorch op timings, "
                         "the same kind as NeuSight's; default: on)")
    ap.add_argument("--with-llmcompass", action=argparse.BooleanOptionalAction, default=True,
                    help="also fit on LLMCompass's A100/MI210 FP16 eager softmax rows (llmcompass-pointwise; "
                         "default: on)")
    ap.add_argument("--with-trace-kernels", action=argparse.BooleanOptionalAction, default=False,
                    help="also fit on the kernel-timed rows of the project's own GPU traces (datasets/traces-*, "
                         "hybrid trace kernels; default: off)")
    ap.add_argument("--with-collectives", action=argparse.BooleanOptionalAction, default=True,
                    help="also fit the collective models on every public collective measurement (nccl-tests, Vidur "
                         "network, XLA; at most 12000 rows), so the multi-GPU labels' collectives are learned, "
                         "with a band (default: on; before 2026-11-29 they were costed by the roofline)")
    ap.add_argument("--as-fitted", action="store_true",
                    help="cost GPU ops with the kernel model's eager per-op times (its fitted dispatch included), "
                         "as before kernel times were the default")
    ap.add_argument("--intervals", action="store_true",
                    help="calibrate the model's 80%% prediction intervals too and report how many labels fall "
                         "inside the predicted iteration-time interval (several more fits)")
    ap.add_argument("--model-configs", default=None, metavar="DIR",
                    help="directory of Hugging Face config.json files named <model>.json: label models that are "
                         "not built in are built from DIR/<model>.json")
    ap.add_argument("--leave-one-gpu-out", action="store_true",
                    help="predict each label GPU with a model fitted without any measurement of that GPU (kernels "
                         "and collectives of every source dropped; one fit per label GPU): what a GPU that no "
                         "calibration data describes gets; writes heldout_results.md")
    ap.add_argument("--shots", type=int, default=0, metavar="K",
                    help="with --leave-one-gpu-out: keep K random kernel rows of the held-out GPU in its fit (the few "
                         "measurements a user takes of a new GPU; writes heldout_K_shots_results.md)")
    ap.add_argument("--trace-dir", default=str(Path(tempfile.gettempdir()) / "hybrid-nlp-e2e-traces"))
    ap.add_argument("--json", action="store_true", help="print one JSON object; writes no markdown unless --out")
    ap.add_argument("--out", default=None, help="write results markdown here (default: results.md beside this "
                    "script when run on the default labels without --json)")
    args = ap.parse_args(argv)

    from hybrid.atomic import write_text
    from hybrid.data.traces.memory import NEAR_CAPACITY_FRACTION
    from hybrid.engine.costs import RooflineCostModel
    from hybrid.hardware.catalog import default_catalog
    from hybrid.reports.markdown import write_benchmark_results
    from hybrid.reports.metrics import error_summary

    t0 = time.time()
    labels = read_labels(args.labels)
    config_dir = args.model_configs
    if config_dir is not None and not Path(config_dir).is_dir():
        from hybrid.errors import InvalidInputError

        raise InvalidInputError(f"--model-configs {config_dir}: not a directory")
    cat = default_catalog()
    if args.leave_one_gpu_out and args.model:
        from hybrid.errors import InvalidInputError

        raise InvalidInputError("--leave-one-gpu-out fits its own models: it takes no --model")
    if args.shots < 0 or (args.shots and not args.leave_one_gpu_out):
        from hybrid.errors import InvalidInputError

        raise InvalidInputError(f"--shots {args.shots}: a non-negative row count, and only with --leave-one-gpu-out")

    def fit(exclude: Iterable[str] = ()):
        """(model, its catalog, the devices its GEMM model saw, rows, description)"""
        if args.model:
            from hybrid.bench.validate import resolve_predictor

            engine = resolve_predictor(args.model, args.tracking_uri, default_bundle=False)
            # the devices its GEMM model was fitted on (a saved model from before that record: every device it saw)
            seen = getattr(engine.model, "devices_fitted", {}).get("kernel-xgb-gemm") or \
                getattr(engine.model, "devices_seen", [])
            return engine.model, engine.catalog, seen, None, engine.name
        model, mcat, seen, n = calibrated_model(args.data_dir, args.rows_per_gpu, args.seed, args.with_test_kernels,
                                                args.with_gpu_bundles, args.with_llmcompass, args.with_trace_kernels,
                                                args.intervals, args.with_collectives, exclude_devices=exclude,
                                                shots=args.shots)
        name = (f"HybridPredictor fitted on NeuSight kernel training data"
                f"{' + kernel test collections' if args.with_test_kernels else ''}"
                f"{' + the project GPU bundles' if args.with_gpu_bundles else ''}"
                f"{' + LLMCompass softmax tables' if args.with_llmcompass else ''}"
                f"{' + the project GPU traces kernel rows' if args.with_trace_kernels else ''}"
                f"{' + public collective measurements' if args.with_collectives else ''} ({n} rows)")
        return model, mcat, seen, n, name

    trace_dir = Path(args.trace_dir)
    trace_dir.mkdir(parents=True, exist_ok=True)
    rows, skipped = [], {}
    cache: dict = {}
    todo = []  # (label row, catalog device)
    for _, r in labels.iterrows():
        why = skip_reason(r, cat, config_dir)
        if why:
            skipped[why] = skipped.get(why, 0) + 1
        else:
            todo.append((r, resolve_gpu(str(r["gpu"]), cat)))
    # one model for every row, or (leave one GPU out) one per label GPU, fitted without any row of it
    passes = ([(d, [t for t in todo if t[1] == d]) for d in sorted({d for _, d in todo})]
              if args.leave_one_gpu_out else [(None, todo)])
    from tqdm import tqdm

    mname = ""
    for held, batch in passes:
        calib, ccat, fitted_on, n_fit, mname = fit(() if held is None else (held,))
        models = {"roofline": (RooflineCostModel(cat), cat), "calibrated": (calib, ccat)}
        for r, dev in tqdm(batch, desc="label rows" if held is None else f"label rows ({held} held out)",
                           file=sys.stderr):
            pred = predict_row(trace_dir, r, dev, models, cache, kernel_times=not args.as_fitted,
                               config_dir=config_dir)
            rows.append({"gpu": r["gpu"], "device": dev, "model": r["model"], "mode": r["mode"],
                         "parallel": r["extra"] or "single", "seqlen": int(r["seqlen"]), "batch": int(r["batch"]),
                         "measured_ms": float(r["e2e_latency"]), **pred,
                         "gpu_in_kernel_training": dev in fitted_on})
    if args.leave_one_gpu_out:
        which = (f"with only {args.shots} random kernel rows of that GPU" if args.shots
                 else "without any row of that GPU")
        mname = mname.replace("HybridPredictor fitted", f"one HybridPredictor per label GPU, fitted {which},",
                              1).rsplit(" (", 1)[0]
    if not rows:
        from hybrid.errors import InvalidInputError

        raise InvalidInputError(f"no label row could be mapped (skipped: {skipped})")
    table = pd.DataFrame(rows)
    groups = {"by_gpu": table["gpu"], "by_model": table["model"], "by_mode": table["mode"],
              "by_parallel": table["parallel"]}
    result = {"labels": args.labels, "n_label_rows": int(len(labels)), "skipped": skipped,
              "calibrated_model": mname}
    for label in ("calibrated", "roofline"):
        s = error_summary(table[label], table["measured_ms"], groups)
        result[label] = s
    # the headline (what the project is judged on): the calibrated model
    result.update({k: result["calibrated"][k] for k in ("n_rows", "geomean_pct", "by_gpu", "by_model", "by_mode")})
    held = table[~table["gpu_in_kernel_training"]]
    if len(held):
        result["calibrated_heldout_gpus"] = error_summary(held["calibrated"], held["measured_ms"])
    near = (table["memory_pct"] > 100.0 * NEAR_CAPACITY_FRACTION).to_numpy()
    result["near_memory_capacity"] = {  # steps whose tensors need most of the GPU (hybrid.data.traces.memory)
        "threshold_pct": 100.0 * NEAR_CAPACITY_FRACTION, "n_rows": int(near.sum()),
        **({"calibrated": error_summary(table["calibrated"][near], table["measured_ms"][near])} if near.any() else {}),
        **({"calibrated_others": error_summary(table["calibrated"][~near], table["measured_ms"][~near])}
           if (~near).any() else {})}
    if "calibrated_low" in table.columns:  # 80% iteration-time intervals: share of labels inside
        from hybrid.corrections.intervals import coverage_pct

        def cover(t: pd.DataFrame) -> dict:
            # a label whose step has an op without any calibrated band (a collective: the calibration holds no
            # collective measurement) has no interval; the share inside is over the others
            has = np.isfinite(t["calibrated_low"].to_numpy(np.float64))
            width = (t["calibrated_high"] / t["calibrated_low"]).to_numpy(np.float64)[has]
            return {"n_rows": int(len(t)), "n_with_interval": int(has.sum()), "coverage_pct": coverage_pct(
                t["measured_ms"].to_numpy(), t["calibrated_low"].to_numpy(), t["calibrated_high"].to_numpy()),
                "median_width": float(np.median(width)) if len(width) else float("nan")}

        result["intervals"] = {"all": cover(table), **{f"{by}: {v}": cover(g) for by in ("gpu", "mode")
                                                        for v, g in table.groupby(by)}}
        if len(held):
            result["intervals"]["GPUs not in the kernel training data"] = cover(held)
    result["seconds"] = time.time() - t0
    result["rows"] = table.to_dict(orient="records")
    if args.json:
        print(json.dumps(json_safe(result), indent=1, allow_nan=False))
    # --json prints and writes nothing unless --out names a file (a scoring run must not rewrite results.md)
    out = results_path(args)
    if out:
        plot = parity_plot(table, Path(out).with_suffix(".png"), result)
        write_benchmark_results(out, report(result, table, args, plot))
        if "calibrated_low" in table.columns and not args.leave_one_gpu_out:
            # per-row intervals for experiments/e2e_intervals (form error), from the one model of results.md
            kind = table["mode"].map({"train": "training", "inf": "inference"})
            key = table[["gpu", "model", "mode", "parallel", "seqlen", "batch"]].astype(str).agg(" ".join, axis=1)
            rows = pd.DataFrame({"source": "neusight-e2e (" + kind + ")", "kind": kind, "key": key,
                                 "measured": table["measured_ms"], "predicted": table["calibrated"],
                                 "low": table["calibrated_low"], "high": table["calibrated_high"], "unit": "ms"})
            write_text(Path(out).with_name("e2e_rows.csv"), rows.to_csv(index=False))
    if not args.json:
        print(report(result, table, args))
    return 0


def json_safe(obj):
    """``obj`` with every NaN / infinity as None and numpy scalars as Python ones: the ``--json`` answer is read
    by strict parsers (NaN is not JSON), and a tensor- or pipeline-parallel label has no memory fraction, a label
    without an interval no interval."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def parity_plot(table: pd.DataFrame, path: Path, result: dict) -> str:
    """Predicted against measured step time (log-log), one colour per GPU: the calibrated prediction (filled, with
    its 80% interval where there is one) beside the roofline's (hollow, grey), the y = x line and +-10%. Returns the
    file name (written beside the results)."""
    import matplotlib

    from hybrid.reports.plots import new_figure, save_png

    fig = new_figure(8.5, 7)
    ax = fig.add_subplot()
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    meas = table["measured_ms"].to_numpy(np.float64)
    ax.scatter(meas, table["roofline"].to_numpy(np.float64), s=18, facecolors="none", edgecolors="0.6",
               linewidths=0.8, label=f"roofline ({result['roofline']['geomean_pct']:.1f}% geomean)")
    for i, (gpu, g) in enumerate(table.groupby("gpu", sort=True)):
        c = colors[i % len(colors)]
        x, y = g["measured_ms"].to_numpy(np.float64), g["calibrated"].to_numpy(np.float64)
        if "calibrated_low" in g.columns and np.isfinite(g["calibrated_low"].to_numpy(np.float64)).any():
            lo, hi = g["calibrated_low"].to_numpy(np.float64), g["calibrated_high"].to_numpy(np.float64)
            ax.errorbar(x, y, yerr=[np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)], fmt="none", ecolor=c,
                        alpha=0.35, linewidth=0.8)
        ax.scatter(x, y, s=22, color=c, label=f"{gpu} ({len(g)})")
    lim = np.array([np.nanmin(meas) / 1.5, np.nanmax(meas) * 1.5])
    ax.plot(lim, lim, "k-", linewidth=0.8)
    for f in (0.9, 1.1):
        ax.plot(lim, lim * f, "k:", linewidth=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(*lim)
    ax.set_ylim(*lim)
    ax.set_xlabel("measured step time (ms)")
    ax.set_ylabel("predicted step time (ms)")
    ax.set_title(f"NLP steps: calibrated {result['calibrated']['geomean_pct']:.1f}% geomean over "
                 f"{result['calibrated']['n_rows']} labels (filled; bars: 80% interval), roofline hollow; "
                 "dotted: +-10%", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    return save_png(fig, path).name  # written whole or not at all


def report(result: dict, table: pd.DataFrame, args: argparse.Namespace, plot: str | None = None) -> str:
    import hybrid

    def line(name: str, s: dict) -> str:
        return f"| {name} | {s['n_rows']} | {s['geomean_pct']:.1f} | {s['median_pct']:.1f} | {s['p90_pct']:.1f} |"

    c, r = result["calibrated"], result["roofline"]
    logo, shots = getattr(args, "leave_one_gpu_out", False), getattr(args, "shots", 0)
    out = ["# NLP end-to-end latency on GPUs, predicted from traces recorded on the CPU"
           + ((f": every GPU calibrated on {shots} of its kernel rows only" if shots
               else ": every GPU held out of its calibration") if logo else ""), "",
           f"Command: `python experiments/nlp_e2e/run.py --labels {Path(args.labels).name} --rows-per-gpu "
           f"{args.rows_per_gpu}{'' if getattr(args, 'with_test_kernels', True) else ' --no-with-test-kernels'}"
           f"{'' if getattr(args, 'with_gpu_bundles', True) else ' --no-with-gpu-bundles'}"
           f"{'' if getattr(args, 'with_llmcompass', True) else ' --no-with-llmcompass'}"
           f"{' --with-trace-kernels' if getattr(args, 'with_trace_kernels', False) else ''}"
           f"{'' if getattr(args, 'with_collectives', True) else ' --no-with-collectives'}"
           f"{' --model ' + str(args.model) if getattr(args, 'model', None) else ''}"
           f"{f' --seed {args.seed}' if getattr(args, 'seed', 0) else ''}"
           f"{' --as-fitted' if getattr(args, 'as_fitted', False) else ''}"
           f"{' --intervals' if getattr(args, 'intervals', False) else ''}"
           f"{' --leave-one-gpu-out' if getattr(args, 'leave_one_gpu_out', False) else ''}"
           f"{f' --shots {args.shots}' if getattr(args, 'shots', 0) else ''}"
           f"{' --model-configs ' + str(args.model_configs) if getattr(args, 'model_configs', None) else ''}"
           f"` (hybrid {hybrid.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
           f"{result['seconds']:.0f} s on the shared 2-core VM).", "",
           f"Labels: {result['n_label_rows']} rows, {c['n_rows']} predicted, skipped: "
           + (", ".join(f"{v} x {k}" for k, v in result["skipped"].items()) or "none") + ".",
           f"Calibrated model: {result['calibrated_model']}.", "",
           *(["Each label GPU's rows are predicted by a model fitted without a single measurement of that GPU "
              "(its kernel rows of every source and its collective logs dropped), as a GPU that no calibration "
              "data describes is; a sibling die measured in another product (the A100 PCIe 80GB beside the 40GB, "
              "the MI210 beside the MI250) stays in. Traces, engine and everything else as in results.md."
              + (f" Here {shots} of its kernel rows (drawn at random from its NeuSight collections and profiles, "
                 "GEMM and pointwise alike) are put back, as a user calibrating on a few measurements of a new GPU "
                 "would; no collective log of it." if shots else ""), ""]
             if logo else []),
           f"**Headline (calibrated): geomean {c['geomean_pct']:.1f}% over {c['n_rows']} rows** "
           f"(target <= 3%: {'met' if c['geomean_pct'] <= 3 else 'MISSED'}); roofline only: "
           f"{r['geomean_pct']:.1f}%.", "",
           "| group | rows | geomean % | median % | p90 % |", "|---|---|---|---|---|",
           line("calibrated, all", c), line("roofline, all", r)]
    if "calibrated_heldout_gpus" in result:
        out.append(line("calibrated, GPUs not in the kernel training data", result["calibrated_heldout_gpus"]))
    if plot:
        out += ["", f"![predicted vs measured step time per GPU]({plot})"]
    for grp in ("by_gpu", "by_model", "by_mode", "by_parallel"):
        out += ["", f"### {grp.replace('_', ' ')} (calibrated / roofline geomean %)", "",
                "| value | rows | calibrated | roofline |", "|---|---|---|---|"]
        for k, v in c[grp].items():
            out.append(f"| {k} | {v['n_rows']} | {v['geomean_pct']:.1f} | {r[grp][k]['geomean_pct']:.1f} |")
    if "intervals" in result:
        iv = result["intervals"]
        out += ["", "### 80% iteration-time intervals (calibrated model)", "",
                "Each label's predicted interval is the step scheduled with every op at the low (high) end of its own "
                "80% interval (`hybrid.engine.simulate`: errors of one GPU move together). Target: 75-85% of labels "
                f"inside; **{iv['all']['coverage_pct']:.1f}% ({'met' if 75 <= iv['all']['coverage_pct'] <= 85 else 'MISSED'})** "
                f"of the {iv['all']['n_with_interval']} labels with an interval."
                + ("" if iv['all']['n_with_interval'] == iv['all']['n_rows'] else
                   " A label whose step holds a collective (the data-, tensor- and pipeline-parallel rows) has none "
                   "when the calibration holds no collective measurement (`--no-with-collectives`): its collectives "
                   "get no band (none is borrowed from the kernels' errors)."),
                "", "| group | rows | with an interval | inside % | median width (high/low) |", "|---|---|---|---|---|"]
        for k, v in iv.items():
            out.append(f"| {k} | {v['n_rows']} | {v['n_with_interval']} | {v['coverage_pct']:.1f} | "
                       f"{v['median_width']:.2f}x |")
    nm = result.get("near_memory_capacity", {})
    if nm.get("n_rows"):
        sel = table[table["memory_pct"] > nm["threshold_pct"]]
        out += ["", "### Steps near the GPU's memory capacity", "",
                "The step's tensor memory is measured when its trace is recorded (`hybrid.data.traces.memory`: the "
                "meta-device step run once under a mode that counts every tensor's storage until it is freed; the "
                "runtime's context and workspaces not counted) and compared with the label GPU's memory. Steps above "
                f"{nm['threshold_pct']:.0f}% (`NEAR_CAPACITY_FRACTION`, the warning `hybrid trace predict` gives; "
                "nothing in the prediction changes):", "",
                "| gpu | model | mode | seq | batch | memory % | measured ms | calibrated ms | error % |",
                "|---|---|---|---|---|---|---|---|---|"]
        for _, t in sel.sort_values("memory_pct").iterrows():
            out.append(f"| {t['gpu']} | {t['model']} | {t['mode']} | {t['seqlen']} | {t['batch']} | "
                       f"{t['memory_pct']:.0f} | {t['measured_ms']:.1f} | {t['calibrated']:.1f} | "
                       f"{100 * (t['calibrated'] / t['measured_ms'] - 1):+.1f} |")
        out += ["", "| group | rows | geomean % | median % | p90 % |", "|---|---|---|---|---|",
                line(f"calibrated, steps above {nm['threshold_pct']:.0f}% of memory", nm["calibrated"])]
        if "calibrated_others" in nm:
            out.append(line("calibrated, the other steps", nm["calibrated_others"]))
    iv_cols = "calibrated_low" in table.columns
    out += ["", "### Rows", "", "| gpu | model | mode | parallel | seq | batch | memory % | measured ms | "
            "calibrated ms | roofline ms |" + (" 80% interval ms |" if iv_cols else ""),
            "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if iv_cols else "")]
    for _, t in table.iterrows():
        mem = f"{t['memory_pct']:.0f}" if np.isfinite(t["memory_pct"]) else "-"
        out.append(f"| {t['gpu']} | {t['model']} | {t['mode']} | {t['parallel']} | {t['seqlen']} | {t['batch']} | "
                   f"{mem} | {t['measured_ms']:.1f} | {t['calibrated']:.1f} | {t['roofline']:.1f} |"
                   + ((f" {t['calibrated_low']:.1f} - {t['calibrated_high']:.1f} |"
                       if np.isfinite(t["calibrated_low"]) else " none (a collective without a band) |")
                      if iv_cols else ""))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    from hybrid.errors import HybridError

    try:
        sys.exit(main())
    except HybridError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
