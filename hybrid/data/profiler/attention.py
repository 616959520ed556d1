"""Fused attention sweep: ``torch.nn.functional.scaled_dot_product_attention``, forward and backward.

The LLM builders and the trace importer cost attention as one fused (FlashAttention-style) kernel, op
``attention`` with ``batch, heads, q_len, kv_len, head_dim, kv_heads, causal`` (:mod:`hybrid.ops.families`).
These cases time exactly that op as PyTorch runs it on the device at hand (FlashAttention / memory-efficient /
math backend, whichever PyTorch picks for the shape and dtype, as a user's model gets), so that the pointwise
correction learns attention from measurements instead of extrapolating it from other op kinds:

- *prefill / training* shapes: queries = keys (``q_len = kv_len``), causal and not, MHA and GQA, head sizes
  64 and 128, the batch chosen so that every sequence length moves about the same number of tokens; forward and
  backward (the backward is timed alone: its forward graph is rebuilt untimed before each repeat, and a fused
  kernel's backward node is called directly, as the ATen op a trace records, without the autograd engine);
- *decode* shapes: one query per sequence over a KV cache of ``kv_len`` keys (not causal: the query sees them
  all), forward only, MHA and GQA;
- on GPUs, the traced-scale training shapes again with attention dropout 0.1 (``dropout`` column,
  :data:`DROPOUT_PROFILE`): the fused kernel draws the mask itself.

Causal cases always have ``q_len = kv_len``: PyTorch aligns ``is_causal`` top-left while the cost model counts a
shorter query block as the *last* queries of the sequence (KV-cache convention); with equal lengths the two agree.
GQA needs ``enable_gqa`` (PyTorch >= 2.5); without it GQA cases are left out rather than timed with an extra copy.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pandas as pd

from hybrid.data.profiler.backend import Backend
from hybrid.data.profiler.cases import Case, random_tensor, torch_dtype
from hybrid.data.profiler.timing import rotation_sets
from hybrid.ops.families import FAMILIES

#: Largest forward attention (FLOPs, ``4 b h d x pairs``) in the sweep, per backend and mode; backward cases
#: are 2.5x that.
ATTENTION_FLOP_CAP = {("cpu", False): 2e10, ("cpu", True): 1e8, ("cuda", False): 1.2e12, ("cuda", True): 5e10}
#: Tokens (batch x sequence) each prefill shape moves, per backend and mode.
PREFILL_TOKENS = {("cpu", False): 4096, ("cpu", True): 256, ("cuda", False): 16384, ("cuda", True): 4096}
#: Sequence lengths of the prefill / training shapes.
PREFILL_SEQ = {("cpu", False): (64, 128, 256, 512, 1024, 2048), ("cpu", True): (64, 256),
               ("cuda", False): (128, 256, 512, 1024, 2048, 4096, 8192, 16384), ("cuda", True): (512, 2048)}
#: (heads, kv_heads) pairs: MHA and GQA (8 queries per KV head, as Llama-3 / Mistral).
HEAD_LAYOUTS = {("cpu", False): ((8, 8), (8, 2), (16, 16)), ("cpu", True): ((4, 4),),
                ("cuda", False): ((32, 32), (32, 4)), ("cuda", True): ((16, 16), (32, 4))}
#: Head sizes.
HEAD_DIMS = {("cpu", False): (64,), ("cpu", True): (64,), ("cuda", False): (64, 128), ("cuda", True): (128,)}
#: Smaller prefill / training shapes on GPUs (full sweep, 16-bit dtypes): the scale traced training steps run (BERT
#: b8 x h16 x s512, GPT-2 b8 x h12 x s1024, Llama b4 x h16/kv8 x s1024: 4096-8192 tokens per call, 12-16 heads),
#: 5-8x fewer batch x heads than :data:`PREFILL_TOKENS` x :data:`HEAD_LAYOUTS`' rows of the same length.
SMALL_PREFILL = {"tokens": (4096, 8192), "layouts": ((12, 12), (16, 16), (16, 8)), "seq": (512, 1024, 2048)}
#: Attention dropout of training (BERT's and GPT-2's 0.1) on the traced-scale shapes (:data:`SMALL_PREFILL`, GPUs,
#: full sweep) in these dtypes: the fused kernel draws the mask itself (a Philox number per score, forward and again
#: backward), which no row without dropout shows; the H200's traced dropout calls ran ~3x their no-dropout time.
DROPOUT_PROFILE = {"p": 0.1, "dtypes": ("bf16",)}
#: Decode shapes: (batch, kv_len) of one query per sequence.
DECODE_SHAPES = {("cpu", False): ((1, 1024), (8, 512), (32, 256)), ("cpu", True): ((4, 256),),
                 ("cuda", False): ((1, 2048), (1, 32768), (16, 1024), (16, 8192), (64, 2048), (64, 16384),
                                   (256, 1024), (256, 4096)),
                 ("cuda", True): ((1, 4096), (64, 2048))}


def attention_dtypes(backend: Backend, quick: bool) -> tuple[str, ...]:
    """dtypes swept: fp16 and bf16 (FlashAttention's) and fp32 on GPUs; fp32 (+ bf16) on CPUs."""
    if backend.is_cuda:
        return ("bf16",) if quick else ("fp16", "bf16", "fp32")
    return ("fp32",) if quick else ("fp32", "bf16")


def supports_gqa(torch: Any) -> bool:
    """Whether this PyTorch's ``scaled_dot_product_attention`` takes ``enable_gqa`` (fewer KV than query heads)."""
    try:
        return "enable_gqa" in inspect.signature(torch.nn.functional.scaled_dot_product_attention).parameters
    except (TypeError, ValueError):  # a builtin without an introspectable signature: probe it
        try:
            q = torch.zeros(1, 2, 1, 8)
            k = torch.zeros(1, 1, 1, 8)
            torch.nn.functional.scaled_dot_product_attention(q, k, k, enable_gqa=True)
            return True
        except (TypeError, RuntimeError):
            return False


def attention_cases(backend: Backend, *, quick: bool, seed: int, llc_bytes: int) -> list[Case]:
    """Prefill/training (fwd + bwd) and decode (fwd) SDPA cases; see the module docstring."""
    del seed  # fixed grids: nothing random to draw
    mode = ("cuda" if backend.is_cuda else "cpu", quick)
    gqa_ok = supports_gqa(backend.torch)
    layouts = [(h, kvh) for h, kvh in HEAD_LAYOUTS[mode] if kvh == h or gqa_ok]
    cols = ["batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim", "causal", "direction"]
    prefill = [(max(1, PREFILL_TOKENS[mode] // s), h, kvh, s, s, d, causal, direction)
               for d in HEAD_DIMS[mode] for h, kvh in layouts for s in PREFILL_SEQ[mode]
               for causal in (1, 0) for direction in ("fwd", "bwd")]
    decode = [(b, h, kvh, 1, kv, d, 0, "fwd") for d in HEAD_DIMS[mode] for h, kvh in layouts
              for b, kv in DECODE_SHAPES[mode]]
    small = []
    if mode == ("cuda", False):
        small = [(max(1, t // s), h, kvh, s, s, d, causal, direction) for t in SMALL_PREFILL["tokens"]
                 for h, kvh in SMALL_PREFILL["layouts"] if kvh == h or gqa_ok for s in SMALL_PREFILL["seq"]
                 for d in HEAD_DIMS[mode] for causal in (1, 0) for direction in ("fwd", "bwd")]
    grid = pd.DataFrame([(*r, False) for r in prefill + decode] + [(*r, True) for r in small],
                        columns=[*cols, "small"]).drop_duplicates(subset=cols)
    # the forward FLOPs the cost model counts (hybrid.ops.families), capped per backend and mode
    fwd_flops = FAMILIES["attention"].flops(grid[cols].assign(direction="fwd"))
    grid = grid[np.asarray(fwd_flops <= ATTENTION_FLOP_CAP[mode], dtype=bool)]
    shapes = list(grid[cols].astype(object).itertuples(index=False, name=None))
    is_small = grid["small"].to_numpy(dtype=bool)
    cases = []
    for dtype in attention_dtypes(backend, quick):
        elem = 2 if dtype in ("fp16", "bf16") else 4
        for (b, h, kvh, q, kv, d, causal, direction), small_shape in zip(shapes, is_small, strict=True):
            if dtype == "fp32" and backend.is_cuda and (d != 128 or q > 4096 or small_shape):
                continue  # fp32 runs the math / memory-efficient path: a few shapes show its level
            row = {"op": "attention", "dtype": dtype, "direction": direction, "batch": b, "heads": h,
                   "kv_heads": kvh, "q_len": q, "kv_len": kv, "head_dim": d, "causal": causal}
            qo = b * h * q * d  # Q and O (and their gradients)
            kvb = 2 * b * kvh * kv * d  # K and V (and their gradients)
            ws = float(elem * (qo * 2 + kvb) * (2 if direction == "bwd" else 1))
            cases.append(Case("attention", row, _sdpa_builder(backend, row, ws, llc_bytes), ws))
            if small_shape and dtype in DROPOUT_PROFILE["dtypes"]:  # the same call training with dropout
                drop = {**row, "dropout": DROPOUT_PROFILE["p"]}
                cases.append(Case("attention", drop, _sdpa_builder(backend, drop, ws, llc_bytes), ws))
    return cases


def sdpa_inputs(torch: Any, row: dict[str, Any], sets: int, device: Any) -> list[tuple[Any, Any, Any]]:
    """``sets`` (Q, K, V) triples for ``row``, drawn set by set from a generator seeded by the shape, values centred
    on 0 (softmax inputs O(1): no overflow in fp16/bf16); leaves that require grad for a backward row."""
    dt = torch_dtype(torch, row["dtype"])
    b, h, kvh = int(row["batch"]), int(row["heads"]), int(row["kv_heads"])
    q_len, kv_len, d = int(row["q_len"]), int(row["kv_len"]), int(row["head_dim"])
    gen = torch.Generator(device=device)
    gen.manual_seed(b * 1_000_003 + h * 10_007 + kv_len * 101 + q_len + d)
    bwd = row["direction"] == "bwd"

    def draw(heads: int, length: int) -> Any:
        t = random_tensor(torch, (b, heads, length, d), dt, device, generator=gen)
        t.sub_(1.0)
        return t.requires_grad_(True) if bwd else t

    return [(draw(h, q_len), draw(kvh, kv_len), draw(kvh, kv_len)) for _ in range(sets)]


def _sdpa_builder(backend: Backend, row: dict[str, Any], ws: float, llc: int):
    def build():
        torch = backend.torch
        sdpa = torch.nn.functional.scaled_dot_product_attention
        causal = bool(row["causal"])
        extra = {"enable_gqa": True} if int(row["kv_heads"]) != int(row["heads"]) else {}
        if row.get("dropout", 0.0):  # (applied whatever the grad mode: SDPA's dropout_p is not nn.Dropout's)
            extra["dropout_p"] = float(row["dropout"])
        sets = rotation_sets(ws, llc)
        qkv = sdpa_inputs(torch, row, sets, backend.torch_device)

        def forward(i: int) -> Any:
            q, k, v = qkv[i % sets]
            return sdpa(q, k, v, is_causal=causal, **extra)

        if row["direction"] != "bwd":
            def run_fwd(i: int) -> Any:
                with torch.no_grad():
                    return forward(i)
            return run_fwd, None
        dt = torch_dtype(torch, row["dtype"])
        grads = [random_tensor(torch, (int(row["batch"]), int(row["heads"]), int(row["q_len"]),
                                       int(row["head_dim"])), dt, backend.torch_device) for _ in range(sets)]
        state: dict[str, Any] = {}
        # a fused kernel's backward is one autograd node: called directly it runs the ATen backward op alone, as a
        # trace records it, without the autograd engine's start-up (~100 us of host time per call on a GPU); a
        # decomposed (math) attention goes through the engine
        fused = "attention" in type(forward(0).grad_fn).__name__.lower()

        def prepare(i: int) -> None:  # the forward graph, rebuilt untimed before each timed backward
            state["out"] = forward(i)

        def run(i: int) -> Any:
            if fused:
                return state["out"].grad_fn(grads[i % sets])
            return torch.autograd.grad(state["out"], qkv[i % sets], grads[i % sets])

        return run, prepare

    return build
