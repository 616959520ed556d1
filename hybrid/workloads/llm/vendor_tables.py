"""Published inference benchmark tables (TensorRT-LLM performance pages) read and predicted row by row.

The files live in the public data directory (``published/trtllm_*.csv``; first comment lines name the source).
Vendor model labels map to model-library names (:func:`vendor_model`: ``LLaMA 70B``, ``LLaMA v3.1 70B``,
``Llama 3.3 70B``...), the ``gpu`` column to catalog devices (``A100`` is the 80 GB SXM part, see the catalog note;
``H100``, ``H200``, ``B200`` and every other catalog spelling work) and the ``precision`` column to an inference
precision (``FP16``, ``BF16``, ``FP8``: fp8 GEMMs and KV cache, ``FP4``/``NVFP4``: W4A4 on FP4 tensor cores, W4A16 elsewhere
(:func:`device_precision`), ``INT8``/``INT4`` weight-only). A table without those columns is A100 FP16 (the first tables' DERIVED copies). Rows whose model or
GPU cannot be mapped are dropped and counted (``df.attrs["skipped"]``), never guessed. Static-batch rows carry
``batch_size, tp, input_len, output_len`` and a throughput; first-token rows ``batch_size, tp, input_len`` and a
latency (output length 1). A throughput table without ``batch_size`` (later pages: trtllm-bench, in-flight
batching, highest throughput) runs each row at the largest batch that fits (:func:`inflight_batch`). Optional
columns ``pp`` (or ``pp_size``: pipeline parallelism), ``ep`` (``ep_size``, ``moe_ep_size``: expert
parallelism inside the TP group; ``tp_size`` is read as ``tp``) and ``attention_dp`` (``enable_attention_dp``:
attention data parallelism, true/false). A
row the library cannot deploy (heads not divisible by the TP degree, more GPUs than the system has) gets NaN
predictions and its reason in ``skip_reason``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid.engine.costs import OpCostModel
from hybrid.errors import ImportFormatError, InvalidInputError
from hybrid.hardware.catalog import Catalog, default_catalog
from hybrid.workloads.llm.dims import resolve_model
from hybrid.workloads.llm.inference import make_setup, predict_many
from hybrid.workloads.llm.kv_cache import kv_heads_per_rank, memory_table

#: TensorRT-LLM performance-page labels -> model-library names, keyed by the label in lower case with every
#: separator, dot and version letter ("v2", "v3.1") folded (:func:`vendor_model`). LLaMA 7B/70B are Llama-2 (the
#: page says so); Llama 3.1/3.3 8B/70B have the Llama-3 architecture (a longer context changes no op shape).
_VENDOR_KEYS = {
    "gptj6b": "gptj-6b", "mistral7b": "mistral-7b", "mixtral8x7b": "mixtral-8x7b", "falcon180b": "falcon-180b",
    "llama7b": "llama2-7b", "llama27b": "llama2-7b", "llama70b": "llama2-70b", "llama270b": "llama2-70b",
    "llama38b": "llama3-8b", "llama318b": "llama3-8b", "llama370b": "llama3-70b", "llama3170b": "llama3-70b",
    "llama3370b": "llama3-70b", "llama3405b": "llama3-405b", "llama31405b": "llama3-405b",
    "qwen3235ba22b": "qwen3-235b-a22b", "deepseekr1": "deepseek-v3", "deepseekv3": "deepseek-v3",
    "llama4scout": "llama4-scout", "llama4maverick": "llama4-maverick", "mixtral8x22b": "mixtral-8x22b",
    "llama4scout17b16e": "llama4-scout", "llama4maverick17b128e": "llama4-maverick",
    "qwen330ba3b": "qwen3-30b-a3b", "gptoss120b": "gpt-oss-120b", "gptoss20b": "gpt-oss-20b",
    "deepseekr10528": "deepseek-v3",
}
#: The labels of the first TensorRT-LLM tables, kept for reference (all of them fold into :data:`_VENDOR_KEYS`).
VENDOR_MODELS = {"GPT-J 6B": "gptj-6b", "Mistral 7B": "mistral-7b", "Mixtral 8x7B": "mixtral-8x7b",
                 "LLaMA 7B": "llama2-7b", "LLaMA 70B": "llama2-70b", "Falcon 180B": "falcon-180b",
                 "LLaMA 2 7B": "llama2-7b", "LLaMA 2 70B": "llama2-70b", "LLaMA 3 8B": "llama3-8b",
                 "LLaMA 3 70B": "llama3-70b"}
#: Other spellings of the columns (trtllm-bench's ISL / OSL, TP / PP sizes), renamed on reading.
COLUMN_ALIASES = (("tp_size", "tp"), ("pp_size", "pp"), ("ep_size", "ep"), ("moe_ep_size", "ep"),
                  ("isl", "input_len"), ("osl", "output_len"),
                  ("input_length", "input_len"), ("output_length", "output_len"), ("batch", "batch_size"),
                  ("enable_attention_dp", "attention_dp"), ("attn_dp", "attention_dp"), ("adp", "attention_dp"))
#: Measured-value column per table kind.
THROUGHPUT_COLUMNS = ("output_tokens_per_s_per_gpu", "throughput_out_tok_per_s")
LATENCY_COLUMN = "first_token_latency_ms"
#: GPU of a table without a ``gpu`` column (the A100 tables of the data directory).
DEFAULT_GPU = "A100"


def vendor_model(label: str) -> str | None:
    """Model-library name of a vendor table's model label, or None (``LLaMA v3.1 70B`` -> ``llama3-70b``; a Hugging
    Face id's organisation is dropped: ``meta-llama/Llama-3.1-8B-Instruct`` -> ``llama3-8b``)."""
    s = re.sub(r"\b(meta|instruct|chat|hf|base)\b", "", str(label).lower().rsplit("/", 1)[-1])
    # the precision tag of a quantised checkpoint ("nvidia/Llama-3.3-70B-Instruct-FP8"): the row's precision column
    # says what it runs in
    s = re.sub(r"[-_ ](?:nv|mx)?(?:fp|bf)(?:4|8|16)\s*$", "", s.strip(" -_"))
    s = re.sub(r"[-_ ]v\d+\.\d+\s*$", "", s.strip(" -_"))  # a release suffix: "Mixtral-8x7B-v0.1"
    s = re.sub(r"\bv(?=\d)", "", s)  # "LLaMA v2 7B" -> "llama 2 7b"
    return _VENDOR_KEYS.get(re.sub(r"[^a-z0-9]", "", s))


def table_precision(label: object) -> dict[str, str | None]:
    """``make_setup`` precision arguments for a table's ``precision`` label (``FP16``, ``FP8``, ``FP4``...)."""
    s = str(label).strip().lower() if isinstance(label, str) and label.strip() else "fp16"
    if "fp4" in s:
        return {"dtype": "fp4"}
    if "fp8" in s:
        return {"dtype": "fp8"}
    if "int4" in s or "w4a16" in s:
        return {"dtype": "fp16", "weights": "int4"}
    if "int8" in s or "w8a16" in s:
        return {"dtype": "fp16", "weights": "int8"}
    if "bf16" in s:
        return {"dtype": "bf16"}
    if "fp16" in s or "float16" in s or "half" in s:
        return {"dtype": "fp16"}
    raise InvalidInputError(f"unknown precision label {label!r}")


def _truthy(value: object) -> bool:
    """A table flag: true / yes / 1 / on (any case); empty or anything else is false."""
    return str(value).strip().lower() in ("true", "yes", "1", "on", "y", "t")


def device_precision(args: dict[str, str | None], peak_flops: dict[str, float]) -> dict[str, str | None]:
    """A table precision as the GPU can run it: a 4-bit float format (``FP4``, ``MXFP4``) on a GPU without FP4
    tensor cores (Hopper, Ampere: gpt-oss's MXFP4 checkpoints served there) is weight-only 4-bit storage with 16-bit
    activations (W4A16: the weights are dequantised in the GEMM); every other precision is kept."""
    if args.get("dtype") == "fp4" and "fp4" not in peak_flops:
        return {**args, "dtype": "fp16", "weights": "fp4"}
    return args


#: Largest batch assumed for an in-flight-batching row without a batch size (trtllm-bench's engines are built with
#: ``max_batch_size`` 2048 unless the table has a ``max_batch_size`` column): the row runs as many requests as fit
#: in memory, at most this many (:func:`inflight_batch`).
INFLIGHT_MAX_BATCH = 2048
#: Tokens per forward pass of an in-flight-batching engine (trtllm-build's default ``max_num_tokens``): prompts are
#: prefilled in chunks of at most this many tokens, so the activations do not grow with the batch's prompts.
INFLIGHT_MAX_NUM_TOKENS = 8192


def inflight_batch(setup: Any, input_len: int, output_len: int, cap: int = INFLIGHT_MAX_BATCH) -> tuple[int, int]:
    """(requests in flight, the most that fit) for a max-throughput row (no batch size: trtllm-bench with in-flight
    batching): as many as the KV cache holds beside the weights at full length (prompts prefilled in chunks of
    :data:`INFLIGHT_MAX_NUM_TOKENS`), at most ``cap``; at least 1 (then it does not fit when none fits). Static
    batching at that batch stands for the in-flight steady state: the same prefill and decode work per request,
    every decode step at the full concurrency. With attention data parallelism ``cap`` is each rank's
    ``max_batch_size`` (TensorRT-LLM admits up to ``tp x max_batch_size`` requests over its attention-DP ranks)."""
    if setup.attention_dp:
        cap = int(cap) * setup.tp
    mem = memory_table(setup.model, setup.precision, setup.device.mem_capacity, batch=np.array([1]),
                       input_len=np.array([input_len]), output_len=np.array([output_len]), tp=setup.tp,
                       pp=setup.pp, reserve_gib=setup.reserve_gib, prefill_tokens=INFLIGHT_MAX_NUM_TOKENS,
                       attention_dp=setup.attention_dp, parallel_embedding=setup.parallel_embedding)
    most = int(mem["max_batch"].iloc[0])
    return max(1, min(most, int(cap))), most


def trtllm_version(version: object) -> tuple[int, int] | None:
    """(major, minor) of a TensorRT-LLM version label (``v0.9.0``, ``0.12``), or None without one."""
    match = re.search(r"(\d+)\.(\d+)", str(version)) if version is not None else None
    return (int(match.group(1)), int(match.group(2))) if match else None


def trtllm_decode_kernel(version: object, model: str, tp: int = 1) -> str:
    """Decode-attention kernel (:data:`~hybrid.workloads.llm.inference.ATTENTION_KERNELS`) TensorRT-LLM ``version``
    ran for ``model`` at tensor parallelism ``tp``: releases before 0.7 had only the masked-MHA kernel (one thread
    block per query head: ``per_query_head``); 0.7 to 0.10 added XQA as precompiled kernels for 8 query heads per KV
    head and head sizes 128/256 only (the ``nqpkv_8`` cubins of ``xqa_kernel_cubin.h``), masked MHA otherwise; later
    releases compile XQA for other groups, so they and tables without a version get ``grouped``."""
    ver = trtllm_version(version)
    if ver is None or ver >= (0, 11):
        return "grouped"
    if ver < (0, 7):
        return "per_query_head"
    m = resolve_model(model)
    group = (m.num_attention_heads // tp) / kv_heads_per_rank(m, tp)
    return "grouped" if group == 8 and m.head_dim in (128, 256) else "per_query_head"


def trtllm_allreduce(version: object) -> str:
    """Tensor-parallel all-reduce (:data:`~hybrid.workloads.llm.inference.ALLREDUCE_KINDS`) TensorRT-LLM ``version``
    ran by default: ``trtllm-build`` (0.8 on) enables its one-/two-shot custom all-reduce on NVLink nodes unless
    told otherwise; the per-model ``build.py`` of earlier releases had it off (``--use_custom_all_reduce``, a
    store-true flag). Tables without a version are taken as current (``custom``)."""
    ver = trtllm_version(version)
    return "custom" if ver is None or ver >= (0, 8) else "nccl"


def trtllm_parallel_embedding(version: object) -> bool:
    """Whether TensorRT-LLM ``version``'s benchmark engines split the input embedding table over the TP ranks. Up to
    0.11 the performance pages' engines were built by ``benchmarks/python/build.py`` (gptSessionBenchmark), whose
    model configs leave ``use_parallel_embedding`` at its default, False (as every ``examples/*/convert_checkpoint.py``
    does, and 0.6's ``FalconForCausalLM`` built its ``Embedding`` without a TP group): the table is whole on every
    rank, and a tied output layer (Falcon) a split copy of its own. Later releases benchmark through the LLM API
    (``trtllm-bench``), which shards the table along the vocabulary by default; tables without a version are
    taken as current (True)."""
    ver = trtllm_version(version)
    return ver is None or ver >= (0, 12)


def read_table(path: str | os.PathLike, catalog: Catalog | None = None, empty_ok: bool = False) -> pd.DataFrame:
    """A published table with ``kind`` (throughput/first_token), ``model_name``, ``device`` (catalog key) and
    ``measured`` columns added; rows it cannot map are dropped and counted in ``df.attrs["skipped"]``. A table
    none of whose rows maps is an error, unless ``empty_ok`` (a caller scoring several tables, one of which is of
    GPUs the catalog lacks): then it is returned without rows, its skips counted."""
    p = Path(path)
    try:
        df = pd.read_csv(p, comment="#")
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ImportFormatError(f"{p}: cannot read ({exc})") from None
    df = df.rename(columns={c: a for c, a in COLUMN_ALIASES if c in df.columns and a not in df.columns})
    need = ("model", "tp", "input_len")
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ImportFormatError(f"{p}: not a published inference table (missing {missing})")
    if len(df) == 0:
        raise ImportFormatError(f"{p}: has no data rows (a header only)")
    # later pages (trtllm-bench, in-flight batching) give the highest throughput without a batch size: those rows
    # get batch 0 = "as many requests as fit" (:func:`inflight_batch`); a latency table without one is batch 1
    if "batch_size" not in df.columns:
        df["batch_size"] = 1 if LATENCY_COLUMN in df.columns else 0
    cat = catalog or default_catalog()
    if LATENCY_COLUMN in df.columns:
        col = LATENCY_COLUMN
        df["kind"], df["output_len"] = "first_token", 1
    else:
        col = next((c for c in THROUGHPUT_COLUMNS if c in df.columns), None)
        if col is None or "output_len" not in df.columns:
            raise ImportFormatError(f"{p}: no throughput column ({', '.join(THROUGHPUT_COLUMNS)}) or output_len")
        df["kind"] = "throughput"
    # vendor pages print thousands separators ("16,000") and leave a cell empty where a configuration did not run:
    # the former are numbers, the latter rows without a measurement (skipped and counted below); anything else that
    # is not a positive number is a broken table
    raw = df[col].astype("string").str.strip()
    grouped = raw.str.fullmatch(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?").fillna(False)
    measured = pd.to_numeric(raw.where(~grouped, raw.str.replace(",", "", regex=False)), errors="coerce")
    df["measured"] = measured.astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
    blank = (raw.isna() | (raw == "")).to_numpy(dtype=bool, na_value=True)
    if not ((np.isfinite(df["measured"]) & (df["measured"] > 0)) | blank).all():
        raise ImportFormatError(f"{p}: measured values must be positive numbers")
    unmeasured = int(blank.sum())
    df = df[~blank].reset_index(drop=True)
    if not len(df):
        raise ImportFormatError(f"{p}: no row has a measured value ({col} is empty in all {unmeasured})")
    for c in ("pp", "ep"):
        if c not in df.columns:
            df[c] = 1
    for c in ("batch_size", "tp", "pp", "ep", "input_len", "output_len"):
        v = pd.to_numeric(df[c], errors="coerce")
        if c in ("pp", "ep"):  # an empty cell is no pipeline / expert parallelism (dense rows of a mixed table)
            v = v.where(df[c].notna() & (df[c].astype(str).str.strip() != ""), 1)
        if c == "batch_size" and df["kind"].iloc[0] == "throughput":  # empty / 0: in-flight, as many as fit
            v = v.fillna(0)
            ok = np.isfinite(v) & (v >= 0) & (v == np.round(v))
        else:
            ok = np.isfinite(v) & (v > 0) & (v == np.round(v))
        if not ok.all():
            raise ImportFormatError(f"{p}: column {c} must hold positive integers")
        df[c] = v.astype(np.int64)
    df["model_name"] = df["model"].map(vendor_model)
    gpus = df["gpu"].astype(str) if "gpu" in df.columns else pd.Series(DEFAULT_GPU, index=df.index)
    dev = {g: cat.resolve_device(g, missing_ok=True) for g in gpus.unique()}
    df["device"] = gpus.map(dev)
    precision = df["precision"] if "precision" in df.columns else pd.Series("FP16", index=df.index)
    # a table without precisions is FP16 (the early TensorRT-LLM pages); one that names them and leaves a cell
    # empty does not say what that row ran in (an FP8 table's blank is not FP16): skipped and counted below
    unnamed = (precision.isna() | (precision.astype(str).str.strip() == "")).to_numpy(dtype=bool)
    if unnamed.all():
        precision, unnamed = pd.Series("FP16", index=df.index), np.zeros(len(df), dtype=bool)
    precision = precision.where(~unnamed, "FP16")
    try:
        df["precision_args"] = [table_precision(x) for x in precision]
    except InvalidInputError as exc:
        raise ImportFormatError(f"{p}: {exc}") from None
    skipped: Counter = Counter()
    if unmeasured:
        skipped["no measured value (empty cell)"] += unmeasured

    def named(x: object) -> bool:  # an empty cell reads as NaN, whose text "nan" is a name no one wrote
        return pd.notna(x) and bool(str(x).strip())

    for label in df.loc[df["model_name"].isna(), "model"]:
        skipped[f"model not in the library: {label}" if named(label) else "no model named"] += 1
    raw_gpus = df["gpu"] if "gpu" in df.columns else gpus
    for g in raw_gpus[df["model_name"].notna() & df["device"].isna()]:
        skipped[f"GPU not in the catalog: {g}" if named(g) else "no GPU named"] += 1
    known = (df["model_name"].notna() & df["device"].notna()).to_numpy(dtype=bool)
    if (unnamed & known).any():  # (each skipped row counted once, under its first reason)
        skipped["no precision named (empty cell)"] += int((unnamed & known).sum())
    keep = known & ~unnamed
    if not keep.any() and not empty_ok:
        raise ImportFormatError(f"{p}: no row with a known model and GPU ({dict(skipped)})")
    out = df[keep].reset_index(drop=True)
    out.attrs["skipped"] = dict(skipped)
    return out


def predict_table(df: pd.DataFrame, cost_model: OpCostModel | None = None, *, device: str | None = None,
                  system: str | None = None, attention_kernel: str | dict[str, str] | None = None,
                  decode_points: int = 24, fused_rope: bool = True, allreduce: str | None = None) -> pd.DataFrame:
    """``df`` plus ``predicted`` and ``roofline`` (tokens/s per GPU, or first-token ms; with a calibrated predictor
    also ``predicted_low`` / ``predicted_high``, its 80% interval) and ``fits``/``max_batch``
    and the ``decode_kernel`` used, all rows in one cost-model call. Each row runs on its ``device`` column
    (``device`` overrides it; neither: :data:`DEFAULT_GPU`) in its ``precision_args``; ``system`` is used for the
    rows whose GPU is the system's (others get their catalog node). ``attention_kernel``: one kernel for every row,
    a map from model names to kernels (others ``grouped``), or ``None``: the kernel the row's ``trtllm_version``
    ran (:func:`trtllm_decode_kernel`; ``grouped`` without that column); ``fused_rope``: the tables are
    TensorRT-LLM's, whose attention plugin applies rotary embedding inside its kernels; ``allreduce``: the
    tensor-parallel all-reduce for every row, or ``None``: the one the row's version ran (:func:`trtllm_allreduce`)."""
    versions = list(df["trtllm_version"]) if "trtllm_version" in df.columns else [None] * len(df)
    if attention_kernel is None:
        kernels = [trtllm_decode_kernel(v, m, int(tp)) for v, m, tp in zip(versions, df["model_name"], df["tp"],
                                                                           strict=True)]
    elif isinstance(attention_kernel, dict):
        kernels = [attention_kernel.get(m, "grouped") for m in df["model_name"]]
    else:
        kernels = [attention_kernel] * len(df)
    cat = default_catalog()
    devices = ([device] * len(df) if device is not None else
               list(df["device"]) if "device" in df.columns else [DEFAULT_GPU] * len(df))
    devices = [cat.resolve_device(d) for d in devices]
    sys_dev = cat.system(system).device if system is not None else None
    precs = list(df["precision_args"]) if "precision_args" in df.columns else [{"dtype": "fp16"}] * len(df)
    reducers = [allreduce or trtllm_allreduce(v) for v in versions]
    pps = df["pp"].to_numpy() if "pp" in df.columns else np.ones(len(df), dtype=np.int64)
    eps = df["ep"].to_numpy() if "ep" in df.columns else np.ones(len(df), dtype=np.int64)
    adps = (df["attention_dp"].map(_truthy).to_numpy() if "attention_dp" in df.columns
            else np.zeros(len(df), dtype=bool))
    setups, reasons = [], []
    for m, d, tp, pp, ep, adp, pa, k, ar, v in zip(df["model_name"], devices, df["tp"], pps, eps, adps, precs,
                                                   kernels, reducers, versions, strict=True):
        pa = device_precision(pa, cat.devices[d].peak_flops)
        try:  # a row the library cannot deploy (heads not divisible, too many GPUs...) is skipped, not fatal
            setups.append(make_setup(m, d, system if d == sys_dev else None, tp=int(tp), pp=int(pp), ep=int(ep),
                                     attention_dp=bool(adp), attention_kernel=k, fused_rope=fused_rope, allreduce=ar,
                                     parallel_embedding=trtllm_parallel_embedding(v), **pa))
            reasons.append("")
        except InvalidInputError as exc:
            setups.append(None)
            reasons.append(f"cannot deploy: {exc}")
    ok = np.array([st is not None for st in setups])
    batch = df["batch_size"].to_numpy(dtype=np.int64).copy()
    caps = (pd.to_numeric(df["max_batch_size"], errors="coerce").fillna(INFLIGHT_MAX_BATCH).to_numpy()
            if "max_batch_size" in df.columns else np.full(len(df), INFLIGHT_MAX_BATCH))
    inflight = np.flatnonzero(ok & (batch == 0))
    most = np.zeros(len(df), dtype=np.int64)  # in-flight rows: the most that fit with chunked prefill
    for i in inflight:
        batch[i], most[i] = inflight_batch(setups[i], int(df["input_len"].iloc[i]), int(df["output_len"].iloc[i]),
                                           int(caps[i]))
    out = df.copy()
    out["batch_size"] = batch
    for c in ("predicted", "roofline"):
        out[c] = np.nan
    out["fits"], out["max_batch"] = False, 0
    if ok.any():
        res = predict_many([st for st in setups if st is not None], batch[ok],
                           df["input_len"].to_numpy()[ok], df["output_len"].to_numpy()[ok], cost_model,
                           decode_points=decode_points)
        thr = (df["kind"] == "throughput").to_numpy()[ok]
        out.loc[ok, "predicted"] = np.where(thr, res["output_tokens_per_s_per_gpu"], res["ttft_ms"])
        out.loc[ok, "roofline"] = np.where(thr, res["roofline_output_tokens_per_s_per_gpu"], res["roofline_ttft_ms"])
        if "ttft_ms_low" in res.columns:  # a calibrated predictor's 80% interval (throughput: low at high latency)
            for end in ("low", "high"):
                out[f"predicted_{end}"] = np.nan
                out.loc[ok, f"predicted_{end}"] = np.where(thr, res[f"output_tokens_per_s_per_gpu_{end}"],
                                                           res[f"ttft_ms_{end}"])
        out.loc[ok, "fits"] = res["fits"].to_numpy()
        out.loc[ok, "max_batch"] = res["max_batch"].to_numpy()
        # in-flight rows: their memory is that of chunked prefill (the batch was chosen to fit it)
        out.loc[inflight, "max_batch"] = most[inflight]
        out.loc[inflight, "fits"] = most[inflight] >= 1
    out["decode_kernel"] = kernels
    out["allreduce"] = reducers
    out["skip_reason"] = reasons
    return out
