"""Published inference benchmark tables (TensorRT-LLM performance pages) read and predicted row by row.

The files live in the public data directory (``published/trtllm_*.csv``; first comment lines name the source).
Vendor model labels map to model-library names (:data:`VENDOR_MODELS`), vendor GPU labels to catalog devices
(``A100`` is the 80 GB SXM part, see the catalog note). Static-batch rows carry ``batch_size, tp, input_len,
output_len`` and a throughput; first-token rows ``batch_size, tp, input_len`` and a latency (output length 1).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.engine.costs import OpCostModel
from hybrid.errors import ImportFormatError
from hybrid.workloads.llm.inference import make_setup, predict_many

#: TensorRT-LLM performance-page labels -> model-library names (LLaMA 7B/70B are Llama-2, the page says so).
VENDOR_MODELS = {"GPT-J 6B": "gptj-6b", "Mistral 7B": "mistral-7b", "Mixtral 8x7B": "mixtral-8x7b",
                 "LLaMA 7B": "llama2-7b", "LLaMA 70B": "llama2-70b", "Falcon 180B": "falcon-180b",
                 "LLaMA 2 7B": "llama2-7b", "LLaMA 2 70B": "llama2-70b", "LLaMA 3 8B": "llama3-8b",
                 "LLaMA 3 70B": "llama3-70b"}
#: Measured-value column per table kind.
THROUGHPUT_COLUMNS = ("output_tokens_per_s_per_gpu", "throughput_out_tok_per_s")
LATENCY_COLUMN = "first_token_latency_ms"


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """A published table with ``kind`` (throughput/first_token), ``model_name`` and ``measured`` columns added."""
    p = Path(path)
    try:
        df = pd.read_csv(p, comment="#")
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ImportFormatError(f"{p}: cannot read ({exc})") from None
    need = ("model", "batch_size", "tp", "input_len")
    missing = [c for c in need if c not in df.columns]
    if missing or len(df) == 0:
        raise ImportFormatError(f"{p}: not a published inference table (missing {missing or 'rows'})")
    unknown = sorted(set(df["model"]) - set(VENDOR_MODELS))
    if unknown:
        raise ImportFormatError(f"{p}: unknown model label(s) {unknown}")
    df["model_name"] = df["model"].map(VENDOR_MODELS)
    if LATENCY_COLUMN in df.columns:
        df["kind"], df["measured"], df["output_len"] = "first_token", df[LATENCY_COLUMN].astype(float), 1
    else:
        col = next((c for c in THROUGHPUT_COLUMNS if c in df.columns), None)
        if col is None or "output_len" not in df.columns:
            raise ImportFormatError(f"{p}: no throughput column ({', '.join(THROUGHPUT_COLUMNS)}) or output_len")
        df["kind"], df["measured"] = "throughput", df[col].astype(float)
    if not (np.isfinite(df["measured"]) & (df["measured"] > 0)).all():
        raise ImportFormatError(f"{p}: measured values must be positive numbers")
    return df


def predict_table(df: pd.DataFrame, cost_model: OpCostModel | None = None, *, device: str = "A100",
                  system: str | None = None, attention_kernel: str | dict[str, str] = "grouped",
                  decode_points: int = 24, fused_rope: bool = True) -> pd.DataFrame:
    """``df`` plus ``predicted`` and ``roofline`` (tokens/s per GPU, or first-token ms) and ``fits``/``max_batch``,
    all rows in one cost-model call. ``attention_kernel`` may map model names to kernels; ``fused_rope``: the
    tables are TensorRT-LLM's, whose attention plugin applies rotary embedding inside its kernels."""
    kern = (lambda m: attention_kernel.get(m, "grouped")) if isinstance(attention_kernel, dict) else (
        lambda m: attention_kernel)
    setups = [make_setup(m, device, system, tp=int(tp), attention_kernel=kern(m), fused_rope=fused_rope)
              for m, tp in zip(df["model_name"], df["tp"], strict=True)]
    res = predict_many(setups, df["batch_size"].to_numpy(), df["input_len"].to_numpy(), df["output_len"].to_numpy(),
                       cost_model, decode_points=decode_points)
    out = df.copy()
    thr = (df["kind"] == "throughput").to_numpy()
    out["predicted"] = np.where(thr, res["output_tokens_per_s_per_gpu"], res["ttft_ms"])
    out["roofline"] = np.where(thr, res["roofline_output_tokens_per_s_per_gpu"], res["roofline_ttft_ms"])
    out["fits"], out["max_batch"] = res["fits"].to_numpy(), res["max_batch"].to_numpy()
    return out
