"""LLM inference: prefill and decode op graphs, costed in one batched predictor call; static batching.

A forward pass over ``T`` new tokens of ``B`` sequences is one transformer layer's ops (per tensor-parallel rank,
exact shapes after the split) times the layers of a pipeline stage, plus the embedding, final norm, output
layer and sampling:

====================================  ==============================================================================
``input_layernorm``                   RMSNorm/LayerNorm over ``[T, h]``
``attn_pre_proj``                     QKV GEMM ``[T, h] x [h, (q + 2 kv) d / tp]`` (GEMV in decode at batch 1)
``attn_rope``                         rotary embedding of q and k (GPT-J rotates a quarter of each head)
``attention``                         fused attention: prefill causal ``q_len = kv_len = input`` (FlashAttention),
                                      decode ``q_len = 1`` over the KV cache (paged/XQA style), GQA/MQA
``attn_post_proj``                    output projection ``[T, q d / tp] x [q d / tp, h]``
``tp_all_reduce``                     TP all-reduce of ``[T, h]`` (one per layer for parallel attention+MLP blocks)
``post_attention_layernorm``, ``add`` second norm and residual adds
``mlp_up_proj``, ``mlp_act``,         MLP (gated SwiGLU or GeLU); MoE: router GEMM, then the active experts as a
``mlp_down_proj``                     batched GEMM (expected distinct experts for ``T x top-k`` routed tokens)
``embedding``, ``final_layernorm``,   once per pass: embedding gather, the last tokens' norm, vocab-parallel output
``lm_head``, ``logits_all_gather``,   GEMM, the TP gather of logits and a softmax/top-k over the vocabulary
``sampling``, ``pp_send_recv``        (``pp_send_recv`` between pipeline stages)
====================================  ==============================================================================

Every op row goes to the cost model (``HybridPredictor``, or the roofline when none is given) in one call for a
whole prediction (prefill plus a grid of decode context lengths). Weight-only formats and a KV cache in another
dtype than the compute dtype change the bytes an op moves, not its FLOPs: the predicted time of the 16-bit op is
scaled by the byte ratio, but never below the op's compute time. Static batching (vendor benchmark tables): the
whole batch is prefilled at once (time to first token), then ``output - 1`` decode steps at growing context;
throughput = ``batch x output / latency / GPUs``. Pipeline parallelism splits the batch into ``pp`` microbatches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hybrid.engine.costs import OpCostModel, integral_shapes, predict_times
from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import Catalog, default_catalog
from hybrid.hardware.device import Device, System
from hybrid.ops.roofline import resolve_system, roofline, system_for_device
from hybrid.workloads.llm.dims import context_note, expert_ffn, resolve_model
from hybrid.workloads.llm.kv_cache import (
    DEFAULT_RESERVE_GIB,
    MemoryPlan,
    cached_tokens,
    check_parallel,
    kv_heads_per_rank,
    memory_plan,
)
from hybrid.workloads.llm.model import TransformerConfig
from hybrid.workloads.llm.precision import Precision, parse_precision

#: Columns of the op table the cost model sees (the canonical measurement-table columns).
COST_COLUMNS = ("device", "op", "dtype", "variant", "b", "m", "n", "k", "elements", "rows", "hidden", "batch",
                "heads", "kv_heads", "q_len", "kv_len", "head_dim", "causal", "size_bytes", "n_ranks", "n_nodes",
                "system")
#: Decode attention kernels (see :attr:`InferenceSetup.attention_kernel`).
ATTENTION_KERNELS = ("grouped", "per_query_head")
#: Op categories of the breakdown.
CATEGORIES = ("gemm", "attention", "moe", "norm", "elementwise", "comm", "lm_head", "sampling")


@dataclass(frozen=True)
class InferenceSetup:
    """Model, hardware, precision and parallelism of one deployment (one model replica)."""

    model: TransformerConfig
    device: Device
    system: System
    precision: Precision
    tp: int = 1
    pp: int = 1
    reserve_gib: float = DEFAULT_RESERVE_GIB
    #: decode attention over the KV cache: ``grouped`` (FlashDecoding / TensorRT-LLM XQA / vLLM paged attention
    #: read each KV head once for its group of query heads) or ``per_query_head`` (masked-MHA kernels with one
    #: thread block per query head read a KV head once per query head: GQA saves memory, not bandwidth)
    attention_kernel: str = "grouped"
    #: the catalog the device came from (devices added by the user, or what-if variants, are costed from it)
    catalog: Catalog | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.attention_kernel not in ATTENTION_KERNELS:
            raise InvalidInputError(f"attention_kernel must be one of {ATTENTION_KERNELS}, got {self.attention_kernel!r}")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def layers_per_stage(self) -> int:
        return math.ceil(self.model.num_layers / self.pp)


def make_setup(model: str | TransformerConfig | Any, device: str | None = None, system: str | None = None, *,
               dtype: str = "fp16", weights: str | None = None, kv_dtype: str | None = None, tp: int = 1,
               pp: int = 1, reserve_gib: float = DEFAULT_RESERVE_GIB, attention_kernel: str = "grouped",
               catalog: Catalog | None = None) -> InferenceSetup:
    """Resolve names into an :class:`InferenceSetup` (``system`` defaults to the catalog system of ``device``,
    else a generic node of it); checks TP/PP against the model and the dtype against the device."""
    cat = catalog or default_catalog()
    dims = resolve_model(model)
    if device is None and system is None:
        raise InvalidInputError("give a device or a system")
    if system is not None:
        sys_obj = resolve_system(cat, system)
        dev = cat.device(device) if device is not None else cat.device(sys_obj.device)
    else:
        dev = cat.device(str(device))
        match = [s for s in cat.systems.values() if s.device == dev.key]
        match.sort(key=lambda s: (s.inter_bw <= 0, -s.intra_bw, s.key))  # the vendor's own node first
        sys_obj = match[0] if match else system_for_device(dev)
    if dev.kind != "gpu":
        raise InvalidInputError(f"{dev.key} is not a GPU")
    prec = parse_precision(dtype, weights, kv_dtype)
    prec.check_device(dev)
    check_parallel(dims, tp, pp)
    if tp * pp > sys_obj.gpus_per_node * sys_obj.max_nodes:
        raise InvalidInputError(f"tp x pp = {tp * pp} GPUs exceeds system {sys_obj.key}")
    if tp > sys_obj.gpus_per_node:
        raise InvalidInputError(f"tp={tp} exceeds the {sys_obj.gpus_per_node} GPUs of one {sys_obj.key} node")
    return InferenceSetup(dims, dev, sys_obj, prec, tp, pp, reserve_gib, attention_kernel, cat)


# ------------------------------------------------------------------------------------------------ op tables
def _block(size_: int, **cols: Any) -> dict[str, np.ndarray]:
    return {k: (np.asarray(v) if np.ndim(v) else np.full(size_, v, dtype=object if isinstance(v, str) else float))
            for k, v in cols.items()}


def pass_ops(s: InferenceSetup, tokens: np.ndarray, seqs: np.ndarray, q_len: np.ndarray, kv_len: np.ndarray,
             phase: str | np.ndarray = "prefill") -> pd.DataFrame:
    """Op rows of one forward pass per scenario ``i`` (``tokens[i]`` new tokens of ``seqs[i]`` sequences, each
    with ``q_len[i]`` new and ``kv_len[i]`` attended tokens), on one GPU of the bottleneck pipeline stage.

    Columns: ``scenario``, ``phase``, ``name``, ``category``, ``count`` (how often the op runs per pass: the
    layers of a stage, or 1), ``bytes_actual`` (bytes with the real weight/KV storage) and the cost columns.
    """
    m, p, tp = s.model, s.precision, s.tp
    T = np.asarray(tokens, dtype=np.float64)
    B = np.asarray(seqs, dtype=np.float64)
    qn, kvn = np.asarray(q_len, dtype=np.float64), np.asarray(kv_len, dtype=np.float64)
    n_scen = n = len(T)
    if not (len(B) == len(qn) == len(kvn) == n) or n == 0:
        raise InvalidInputError("tokens, seqs, q_len and kv_len must be non-empty and of one length")
    if (T <= 0).any() or (B <= 0).any() or (qn <= 0).any() or (kvn <= 0).any():
        raise InvalidInputError("token and sequence counts must be positive")
    scen = np.arange(n)
    ph = np.broadcast_to(np.asarray(phase, dtype=object), (n_scen,))
    h, d = m.hidden_size, m.head_dim
    qh, kvh = m.num_attention_heads // tp, kv_heads_per_rank(m, tp)
    L = float(s.layers_per_stage)
    cdt = p.compute
    adt = "bf16" if cdt == "bf16" else "fp16"  # activations (norms, adds, rope) in 16 bit
    wb, ab, cb = p.weight_bytes, p.act_bytes, (1.0 if cdt == "fp8" else 2.0)
    blocks: list[dict[str, np.ndarray]] = []

    def gemm(name: str, cat: str, mm: np.ndarray, nn: float, kk: float, count: float, b: np.ndarray | float = 1.0
             ) -> None:
        mm = np.maximum(mm, 1.0)
        op = np.where((mm <= 1) & (np.asarray(b) <= 1), "gemv", "gemm")
        real = cb * np.asarray(b) * (mm * kk + mm * nn) + np.asarray(b) * kk * nn * wb
        blocks.append(_block(n_scen, scenario=scen, phase=ph, name=name, category=cat, count=count, op=op, dtype=cdt,
                             b=np.broadcast_to(np.asarray(b, dtype=float), (n_scen,)), m=mm, n=float(nn), k=float(kk),
                             bytes_actual=real))

    def elem(name: str, cat: str, elements: np.ndarray, variant: str, count: float) -> None:
        blocks.append(_block(n_scen, scenario=scen, phase=ph, name=name, category=cat, count=count, op="elementwise",
                             dtype=adt, elements=np.maximum(elements, 1.0), variant=variant, bytes_actual=np.nan))

    def norm(name: str, rows: np.ndarray, count: float) -> None:
        blocks.append(_block(n_scen, scenario=scen, phase=ph, name=name, category="norm", count=count, op=m.normalization.lower(),
                             dtype=adt, rows=rows, hidden=float(h), bytes_actual=np.nan))

    def coll(name: str, op: str, size: np.ndarray, ranks: int, count: float) -> None:
        nodes = max(1, math.ceil(ranks / s.system.gpus_per_node))
        blocks.append(_block(n_scen, scenario=scen, phase=ph, name=name, category="comm", count=count, op=op, dtype=adt,
                             size_bytes=size, n_ranks=float(ranks), n_nodes=float(nodes), system=s.system.key,
                             bytes_actual=np.nan))

    # ---- one transformer layer (count = layers of the stage)
    norm("input_layernorm", T, L)
    gemm("attn_pre_proj", "gemm", T, (qh + 2 * kvh) * d, h, L)
    if m.position_embedding_type == "rope":
        elem("attn_rope", "elementwise", T * (qh + kvh) * d * m.rotary_percent, "rope", L)
    kv_att = cached_tokens(m, kvn)
    # decode kernels that run one thread block per query head (masked MHA) read a KV head once per query head
    kv_read = np.where((qn <= 1) & (s.attention_kernel == "per_query_head"), float(qh), float(kvh))
    att_row_bytes = cb * B * d * (2.0 * qn * qh + 2.0 * kv_att * kv_read)
    att_real = B * d * (2.0 * qn * qh * ab + 2.0 * kv_att * kv_read * p.kv_bytes)
    blocks.append(_block(n_scen, scenario=scen, phase=ph, name="attention", category="attention", count=L, op="attention",
                         dtype=cdt, batch=B, heads=float(qh), kv_heads=kv_read, q_len=qn, kv_len=kv_att,
                         head_dim=float(d), causal=(qn > 1).astype(float),
                         bytes_actual=np.where(np.isclose(att_real, att_row_bytes), np.nan, att_real)))
    gemm("attn_post_proj", "gemm", T, h, qh * d, L)
    n_ar = 1 if m.parallel_attn else 2
    if tp > 1:
        coll("tp_all_reduce", "all_reduce", T * h * ab, tp, L * n_ar)
    if not m.parallel_attn or m.parallel_attn_norms > 1:
        norm("post_attention_layernorm", T, L)
    elem("add", "elementwise", T * h, "add", L * (1 if m.parallel_attn else 2))
    f = expert_ffn(m) / tp
    up = (2 if m.gated else 1) * f
    act = "swiglu" if m.gated else ("relu" if m.activation == "relu" else "gelu")
    if m.is_moe:
        E, k = float(m.num_experts), float(m.moe_router_topk)
        active = E * -np.expm1(T * np.log1p(-k / E))  # expected distinct experts hit by T tokens x top-k
        active = np.clip(np.round(active), 1, E)
        per = T * k / active
        gemm("moe_router", "moe", T, E, h, L)
        elem("moe_permute", "moe", 2 * T * k * h, "copy", L)
        # the active experts' GEMMs as one grouped GEMM (one launch, each expert's weights read once)
        gemm("mlp_up_proj", "moe", per, up, h, L, b=active)
        elem("mlp_act", "elementwise", T * k * f, act, L)
        gemm("mlp_down_proj", "moe", per, h, f, L, b=active)
        if m.moe_shared_expert_intermediate_size:  # an always-active dense expert beside the routed ones
            fs = m.moe_shared_expert_intermediate_size / tp
            gemm("shared_expert_up_proj", "moe", T, (2 if m.gated else 1) * fs, h, L)
            elem("shared_expert_act", "elementwise", T * fs, act, L)
            gemm("shared_expert_down_proj", "moe", T, h, fs, L)
    else:
        gemm("mlp_up_proj", "gemm", T, up, h, L)
        elem("mlp_act", "elementwise", T * f, act, L)
        gemm("mlp_down_proj", "gemm", T, h, f, L)
    # ---- once per pass on the bottleneck stage (pp = 1: both ends)
    elem("embedding", "elementwise", T * h, "copy", 1.0)
    if m.position_embedding_type == "learned_absolute":  # GPT-2/MPT-style learned positions added to the input
        elem("position_embedding", "elementwise", T * h, "add", 1.0)
    norm("final_layernorm", B, 1.0)
    gemm("lm_head", "lm_head", B, m.vocab_size / tp, h, 1.0)
    if tp > 1:
        coll("logits_all_gather", "all_gather", B * m.vocab_size * ab, tp, 1.0)
    blocks.append(_block(n_scen, scenario=scen, phase=ph, name="sampling", category="sampling", count=1.0, op="softmax",
                         dtype="fp32", rows=B, hidden=float(m.vocab_size), bytes_actual=np.nan))
    if s.pp > 1:
        coll("pp_send_recv", "send_recv", T * h * ab, 2, 1.0)
    table = pd.concat([pd.DataFrame(b) for b in blocks], ignore_index=True, sort=False)
    table["device"] = s.device.key
    return table.sort_values(["scenario"], kind="stable").reset_index(drop=True)


def cost_ops(table: pd.DataFrame, cost_model: OpCostModel | None = None, catalog: Catalog | None = None
             ) -> pd.DataFrame:
    """``table`` plus ``time_us`` (per call of the op), ``roofline_us``, ``flops``, ``bytes``, ``bound``,
    ``method``: one roofline call and one ``cost_model.predict`` call for all rows."""
    cat = getattr(cost_model, "catalog", None) or catalog or default_catalog()
    cols = [c for c in COST_COLUMNS if c in table.columns]
    rows = integral_shapes(table[cols])
    base = roofline(rows, cat)
    if cost_model is None:
        time = base["time_us"].to_numpy(dtype=np.float64).copy()
        method = np.where(base["family"].astype(str) == "collective", "alpha-beta", "roofline").astype(object)
    else:
        time, method = predict_times(cost_model, rows)
    flops = base["flops"].to_numpy(dtype=np.float64)
    nbytes = base["bytes"].to_numpy(dtype=np.float64)
    real = table["bytes_actual"].to_numpy(dtype=np.float64) if "bytes_actual" in table.columns else np.full(len(table),
                                                                                                          np.nan)
    has = np.isfinite(real) & (nbytes > 0)
    ratio = np.where(has, real / np.where(nbytes > 0, nbytes, 1.0), 1.0)
    floor = base["compute_us"].to_numpy() + base["latency_us"].to_numpy()
    roof = base["time_us"].to_numpy(dtype=np.float64)
    adj_roof = np.maximum(base["memory_us"].to_numpy() * ratio, base["compute_us"].to_numpy()) + base["latency_us"].to_numpy()
    roof = np.where(has, adj_roof, roof)
    time = roof.copy() if cost_model is None else np.where(has, np.maximum(time * ratio, floor), time)
    memory_us = base["memory_us"].to_numpy() * ratio
    compute_us = base["compute_us"].to_numpy()
    fam = base["family"].astype(str).to_numpy()
    lat = base["latency_us"].to_numpy()
    bound = np.where(fam == "collective", "comm", np.where(lat > np.maximum(compute_us, memory_us), "latency",
                                                           np.where(compute_us >= memory_us, "compute", "memory")))
    out = table.copy()
    out["flops"] = flops
    out["bytes"] = np.where(has, real, nbytes)
    out["compute_us"], out["memory_us"], out["latency_us"] = compute_us, memory_us, base["latency_us"].to_numpy()
    out["roofline_us"] = roof
    out["time_us"] = time
    out["bound"] = bound
    out["method"] = method
    return out


# ------------------------------------------------------------------------------------------------ results
@dataclass
class InferenceResult:
    """Static-batch prediction for one configuration; times in milliseconds."""

    setup: InferenceSetup
    batch: int
    input_len: int
    output_len: int
    ttft_ms: float
    tpot_ms: float
    latency_ms: float
    output_tokens_per_s: float
    memory: MemoryPlan
    breakdown_ms: dict[str, dict[str, float]]
    ops: pd.DataFrame  # per-op rows of the prefill pass and the mid-generation decode step
    roofline_latency_ms: float = float("nan")
    method: str = "roofline"
    notes: list[str] = field(default_factory=list)

    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        return self.output_tokens_per_s / self.setup.gpus

    def to_dict(self) -> dict[str, Any]:
        s = self.setup
        return {
            "model": s.model.name, "device": s.device.key, "system": s.system.key, "tp": s.tp, "pp": s.pp,
            "gpus": s.gpus, "precision": s.precision.label, "batch": self.batch, "input_len": self.input_len,
            "output_len": self.output_len, "ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms,
            "latency_ms": self.latency_ms, "output_tokens_per_s": self.output_tokens_per_s,
            "output_tokens_per_s_per_gpu": self.output_tokens_per_s_per_gpu,
            "roofline_latency_ms": self.roofline_latency_ms, "method": self.method,
            "max_batch": self.memory.max_batch, "fits": self.memory.fits, "memory": self.memory.to_dict(),
            "breakdown_ms": self.breakdown_ms, "notes": self.notes,
            "ops": self.ops[["phase", "name", "op", "count", "flops", "bytes", "time_us", "roofline_us",
                             "bound"]].to_dict(orient="records"),
        }


def _decode_grid(input_len: int, output_len: int, points: int) -> tuple[np.ndarray, np.ndarray]:
    """Context lengths of the ``output_len - 1`` decode steps, sampled at <= ``points`` nodes, with the weights
    that integrate a function of the context over all steps (trapezoid; exact where every step is a node)."""
    steps = output_len - 1
    if steps <= 0:
        return np.zeros(0), np.zeros(0)
    ctx_all = input_len + np.arange(1, steps + 1, dtype=np.float64)
    if steps <= points:
        return ctx_all, np.ones(steps)
    nodes = np.unique(np.round(np.linspace(1, steps, points))).astype(np.float64)
    w = np.zeros(len(nodes))
    gaps = np.diff(nodes)
    w[:-1] += gaps / 2
    w[1:] += gaps / 2
    w[0] += 0.5
    w[-1] += 0.5  # the end steps count fully: total weight = steps
    return input_len + nodes, w * steps / w.sum()


def _stage_times(costed: pd.DataFrame, n: int, col: str = "time_us") -> tuple[np.ndarray, pd.DataFrame]:
    t = costed[col].to_numpy() * costed["count"].to_numpy()
    per = np.bincount(costed["scenario"].to_numpy(dtype=np.int64), weights=t, minlength=n)
    cats = costed.assign(_t=t).pivot_table(index="scenario", columns="category", values="_t", aggfunc="sum",
                                           fill_value=0.0)
    return per, cats


#: Decode steps simulated on the engine to measure the pipeline's steady-state token period.
PIPELINE_STEPS = 6


def pipeline_on_engine(pp: int, micro: int, prefill_stage_us: float, decode_stage_us: float, send_us: float,
                       steps: int = PIPELINE_STEPS) -> dict[str, float]:
    """Pipeline-parallel inference on :mod:`hybrid.engine`: one rank per stage, ``micro`` microbatches; the
    prefill of every microbatch, then ``steps`` decode steps where a microbatch's next token starts on stage 0
    once its previous token left the last stage (sampled tokens travel back as a send). Returns the time to the
    last microbatch's first token and the steady-state time between tokens of one microbatch (us), beside the
    closed forms ``(m + pp - 1) t`` and ``max(m, pp) t``."""
    from hybrid.engine.graph import TaskGraph
    from hybrid.engine.simulate import simulate_durations

    g = TaskGraph(pp)
    last_send: dict[int, int | None] = {mb: None for mb in range(micro)}
    finish_nodes: dict[tuple[int, int], int] = {}
    for step in range(steps + 1):
        dur = prefill_stage_us if step == 0 else decode_stage_us
        for mb in range(micro):
            dep = last_send[mb]
            for r in range(pp):
                node = g.add(r, "compute", f"{'prefill' if step == 0 else f'decode{step}'} mb{mb} stage{r}",
                             duration_us=dur, deps=[dep] if dep is not None else [], phase="prefill" if step == 0
                             else "decode")
                if r == pp - 1:
                    finish_nodes[(step, mb)] = node
                dep = g.add(r, "send", f"send mb{mb} from stage{r}", duration_us=send_us, deps=[node], kind="comm")
            last_send[mb] = dep
    compiled = g.compile()
    res = simulate_durations(compiled, np.asarray(compiled.fixed_us, dtype=np.float64))
    fin = res.finish
    ttft = max(float(fin[finish_nodes[(0, mb)]]) for mb in range(micro))
    period = (float(fin[finish_nodes[(steps, 0)]]) - float(fin[finish_nodes[(1, 0)]])) / max(steps - 1, 1)
    return {"ttft_us": ttft, "token_period_us": period,
            "closed_form_ttft_us": (micro + pp - 1) * prefill_stage_us,
            "closed_form_period_us": max(micro, pp) * decode_stage_us}


def predict_static(s: InferenceSetup, batch: int, input_len: int, output_len: int,
                   cost_model: OpCostModel | None = None, *, decode_points: int = 48,
                   check_memory: bool = True) -> InferenceResult:
    """Static batching: ``batch`` requests of ``input_len`` prompt and ``output_len`` generated tokens.

    Refuses (``InvalidInputError`` with the reason) a configuration whose memory does not fit unless
    ``check_memory`` is False (then ``memory.fits`` says so)."""
    mem = memory_plan(s.model, s.precision, s.device.mem_capacity, batch=batch, input_len=input_len,
                      output_len=output_len, tp=s.tp, pp=s.pp, reserve_gib=s.reserve_gib)
    if check_memory and not mem.fits:
        raise InvalidInputError(f"does not fit: {mem.reason}")
    micro = min(s.pp, batch) if s.pp > 1 else 1
    bm = math.ceil(batch / micro)
    ctx, w = _decode_grid(input_len, output_len, decode_points)
    g = len(ctx)
    tokens = np.concatenate([[bm * input_len], np.full(g, bm)]).astype(np.float64)
    seqs = np.full(g + 1, float(bm))
    q_len = np.concatenate([[input_len], np.ones(g)]).astype(np.float64)
    kv_len = np.concatenate([[input_len], ctx]).astype(np.float64)
    phase = np.array(["prefill"] + ["decode"] * g, dtype=object)
    costed = cost_ops(pass_ops(s, tokens, seqs, q_len, kv_len, phase), cost_model, s.catalog)
    res = {}
    pipe: dict[str, float] = {}
    for col in ("time_us", "roofline_us"):
        stage, cats = _stage_times(costed, g + 1, col)
        ttft = (micro + s.pp - 1) * stage[0]
        per_step = max(micro, s.pp) * stage[1:]
        if s.pp > 1 and col == "time_us":
            # the pipeline schedule from the engine (sends included); the closed form kept beside it
            send = costed[(costed["scenario"] == 1) & (costed["name"] == "pp_send_recv")]["time_us"]
            mean_stage = float(np.dot(stage[1:], w) / w.sum()) if g else stage[0]
            pipe = pipeline_on_engine(s.pp, micro, stage[0], mean_stage, float(send.iloc[0]) if len(send) else 0.0)
            ttft = pipe["ttft_us"]
            per_step = per_step * (pipe["token_period_us"] / pipe["closed_form_period_us"])
        decode = float(np.dot(per_step, w))
        res[col] = (ttft, decode, cats)
    ttft_us, decode_us, cats = res["time_us"]
    steps = max(output_len - 1, 0)
    latency_us = ttft_us + decode_us
    breakdown = {
        "prefill": {c: float(cats.loc[0, c]) * (micro + s.pp - 1) / 1e3 for c in cats.columns},
        "decode": {c: float(np.dot(cats[c].to_numpy()[1:], w)) * max(micro, s.pp) / 1e3 for c in cats.columns}
        if g else {},
    }
    # per-op view: the prefill pass and the decode step at mid-generation
    mid = 1 + int(np.argmin(np.abs(ctx - (input_len + output_len / 2)))) if g else None
    keep = costed["scenario"].isin([0] if mid is None else [0, mid])
    ops = costed[keep].reset_index(drop=True)
    method = "+".join(sorted(set(map(str, costed["method"]))))
    return InferenceResult(
        setup=s, batch=batch, input_len=input_len, output_len=output_len, ttft_ms=ttft_us / 1e3,
        tpot_ms=decode_us / steps / 1e3 if steps else 0.0, latency_ms=latency_us / 1e3,
        output_tokens_per_s=batch * output_len / (latency_us / 1e6), memory=mem, breakdown_ms=breakdown, ops=ops,
        roofline_latency_ms=(res["roofline_us"][0] + res["roofline_us"][1]) / 1e3, method=method,
        notes=[f"static batching: whole batch prefilled at once; {micro} microbatch(es)",
               f"memory: {mem.reason}"] + [n for n in [context_note(s.model, input_len + output_len)] if n] + ([
                   f"pipeline on the engine: TTFT {pipe['ttft_us'] / 1e3:.2f} ms (closed form "
                   f"{pipe['closed_form_ttft_us'] / 1e3:.2f}), token period {pipe['token_period_us'] / 1e3:.2f} ms "
                   f"(closed form {pipe['closed_form_period_us'] / 1e3:.2f})"] if pipe else []))


def predict_many(setups: list[InferenceSetup], batch: np.ndarray, input_len: np.ndarray, output_len: np.ndarray,
                 cost_model: OpCostModel | None = None, *, decode_points: int = 24) -> pd.DataFrame:
    """Static-batch predictions for many configurations with ONE cost-model call (benchmark tables, sweeps).

    Returns one row per configuration: ``ttft_ms``, ``tpot_ms``, ``latency_ms``, ``output_tokens_per_s_per_gpu``
    (and ``roofline_*`` beside them), ``max_batch``, ``fits``."""
    batch, input_len, output_len = (np.asarray(x, dtype=np.int64) for x in (batch, input_len, output_len))
    if not len(setups) == len(batch) == len(input_len) == len(output_len):
        raise InvalidInputError("one setup, batch, input and output length per configuration")
    frames, meta = [], []
    offset = 0
    for i, s in enumerate(setups):  # per configuration: a handful of numpy blocks; costing is one call below
        micro = min(s.pp, int(batch[i])) if s.pp > 1 else 1
        bm = math.ceil(int(batch[i]) / micro)
        ctx, w = _decode_grid(int(input_len[i]), int(output_len[i]), decode_points)
        g = len(ctx)
        tab = pass_ops(s, np.concatenate([[bm * input_len[i]], np.full(g, bm)]).astype(float),
                       np.full(g + 1, float(bm)), np.concatenate([[input_len[i]], np.ones(g)]).astype(float),
                       np.concatenate([[input_len[i]], ctx]).astype(float),
                       np.array(["prefill"] + ["decode"] * g, dtype=object))
        tab["scenario"] += offset
        frames.append(tab)
        meta.append((offset, g, w, micro))
        offset += g + 1
    costed = cost_ops(pd.concat(frames, ignore_index=True), cost_model, setups[0].catalog if setups else None)
    rows = []
    stage_t, _ = _stage_times(costed, offset, "time_us")
    stage_r, _ = _stage_times(costed, offset, "roofline_us")
    for i, s in enumerate(setups):
        off, g, w, micro = meta[i]
        out = {}
        for key, st in (("", stage_t), ("roofline_", stage_r)):
            ttft = (micro + s.pp - 1) * st[off]
            dec = float(np.dot(max(micro, s.pp) * st[off + 1: off + 1 + g], w))
            lat = ttft + dec
            out[f"{key}ttft_ms"] = ttft / 1e3
            out[f"{key}tpot_ms"] = dec / max(int(output_len[i]) - 1, 1) / 1e3
            out[f"{key}latency_ms"] = lat / 1e3
            out[f"{key}output_tokens_per_s_per_gpu"] = batch[i] * output_len[i] / (lat / 1e6) / s.gpus
        mem = memory_plan(s.model, s.precision, s.device.mem_capacity, batch=int(batch[i]), input_len=int(input_len[i]),
                          output_len=int(output_len[i]), tp=s.tp, pp=s.pp, reserve_gib=s.reserve_gib)
        out.update(max_batch=mem.max_batch, fits=mem.fits, memory_reason=mem.reason)
        rows.append(out)
    return pd.DataFrame(rows)


def boundedness(result: InferenceResult) -> pd.DataFrame:
    """Per op of the prefill pass and the mid-generation decode step: FLOPs, bytes, arithmetic intensity,
    the device's ridge point, compute- or memory-bound, predicted and roofline time."""
    ops = result.ops
    dev = result.setup.device
    peak = dev.peak(result.setup.precision.compute)
    out = ops[["phase", "name", "op", "count", "flops", "bytes", "time_us", "roofline_us", "bound"]].copy()
    out["intensity"] = out["flops"] / out["bytes"].where(out["bytes"] > 0)
    out["ridge"] = peak / dev.mem_bw
    out["achieved_tflops"] = out["flops"] / out["time_us"] / 1e6
    return out
