"""Per-layer op shapes after the TP/SP/CP/EP split, costed for many mappings in ONE predictor call.

A *mapping* is one row of a DataFrame with columns ``tp, pp, dp, cp, ep, vp, mb, sp, recompute, distopt, fsdp``
(the rest of the job comes from a :class:`~hybrid.workloads.llm.config.TrainingConfig`). Layer ops depend only on
``(tp, cp, ep, mb, sp)``, so they are built once per distinct combination (*layer key*), vectorised over keys; the
per-mapping collectives (DP, FSDP, pipeline, tied-embedding sync) and the optimizer step are one row set per
mapping. All rows go through ``model.predict`` once (duplicates removed first); :func:`cost_mappings` returns the
summed per-layer / per-stage times per mapping (seconds), which :mod:`hybrid.workloads.llm.schedule` turns into
an iteration.

Op shapes per transformer layer and microbatch on one rank (T = micro_batch x seq / cp tokens, t = TP, Megatron
layout): norm (T/t rows with SP), QKV ``linear`` [T, h] x [h, (q + 2 kv)/t], RoPE, core attention (fused
FlashAttention, causal, GQA; or unfused: QK^T ``bmm``, softmax, dropout, AV ``bmm``), output projection
[T, q/t] x [q/t, h], bias-dropout-add, norm, FC1 [T, h] x [h, f/t] (x2 gated), activation, FC2, bias-dropout-add.
Backward: data- and weight-gradient GEMMs per linear, attention/norm/elementwise backward. MoE layers: router
GEMM, ``E/ep`` local experts as one batched GEMM over ``T x topk x ep / E`` tokens each, all-to-all dispatch and
combine. TP collectives: all-reduce of [T, h] after attention and MLP (forward and backward), or all-gather +
reduce-scatter with SP.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from hybrid.engine.costs import OpCostModel, predict_bounds
from hybrid.errors import InvalidInputError
from hybrid.ops.roofline import softmax_schedule
from hybrid.units import DTYPE_BYTES
from hybrid.workloads.llm.config import TrainingConfig, group_nodes_vec
from hybrid.workloads.llm.layer_ops import forward_layer_ops
from hybrid.workloads.llm.model import TransformerConfig

MAPPING_COLUMNS = ("tp", "pp", "dp", "cp", "ep", "vp", "mb", "sp", "recompute", "distopt", "fsdp")
#: Op-table columns that identify an op for the predictor (duplicates are costed once).
_OP_COLUMNS = ("device", "system", "op", "dtype", "direction", "variant", "b", "m", "n", "k", "elements",
               "n_inputs", "n_outputs", "rows", "hidden", "batch", "heads", "q_len", "kv_len", "head_dim",
               "kv_heads", "causal", "softmax_overlap", "size_bytes", "n_ranks", "n_nodes")


@dataclass(frozen=True)
class Target:
    """Device + system the job runs on."""

    device: str
    system: str
    gpus_per_node: int
    peak_flops: float  # dense peak of the compute dtype (for MFU; the fp8 peak for fp8 GEMMs)
    mem_capacity: float  # bytes per GPU
    #: system whose collective measurements cost the communication (default: ``system``), e.g. a measured
    #: cluster of the same node type when the target itself was never measured
    comm_system: str = ""
    #: what to know about where the collectives run (a bare CPU device's on its gloo system:
    #: :func:`hybrid.ops.roofline.cpu_collective_system`); "" where there is nothing to say
    comm_note: str = ""

    def __post_init__(self) -> None:
        if not self.comm_system:
            object.__setattr__(self, "comm_system", self.system)


def resolve_target(system: str, catalog: Any, dtype: str = "bf16", comm_system: str | None = None,
                   ranks: int | None = None) -> Target:
    """Device, node size, peak and capacity of ``system`` (catalog system or bare device). A bare CPU device's
    collectives (``comm_system`` not given, more than one of ``ranks``) run on the catalog's gloo system of that CPU,
    which then is the target's system, as ``--system`` naming it does, with a note in ``comm_note``
    (:func:`hybrid.ops.roofline.cpu_collective_system`, shared with DLRM and traces)."""
    from hybrid.ops.roofline import cpu_collective_system, resolve_system

    sysobj = resolve_system(catalog, system)
    dev = catalog.device(sysobj.device)
    if str(dtype) in ("fp8", "fp4") and str(dtype) not in dev.peak_flops:
        # no silent fall-back to a 16-bit rate: Transformer Engine refuses fp8 (fp4) training on such a GPU
        alt = "fp16 (its bf16 runs at the fp32 rate)" if dev.lacks_units("bf16") else "bf16 (or fp16)"
        raise InvalidInputError(f"{dev.key} has no {dtype} tensor-core rate in the catalog, so it cannot train in "
                                f"{dtype}; use --dtype {alt}")
    note = None
    if not comm_system and (ranks is None or ranks > 1):
        gloo, note = cpu_collective_system(catalog, dev, system, ranks)
        sysobj = gloo if gloo is not None else sysobj
    comm = resolve_system(catalog, comm_system).key if comm_system else sysobj.key
    return Target(dev.key, sysobj.key, int(sysobj.gpus_per_node), float(dev.peak(dtype)), float(dev.mem_capacity),
                  comm, note or "")


def mappings_frame(cfg: TrainingConfig) -> pd.DataFrame:
    """The one mapping of ``cfg`` as a one-row frame."""
    return pd.DataFrame([{"tp": cfg.tp, "pp": cfg.pp, "dp": cfg.dp, "cp": cfg.cp, "ep": cfg.ep, "vp": cfg.vp,
                          "mb": cfg.micro_batch, "sp": bool(cfg.sp and cfg.tp > 1), "recompute": cfg.recompute,
                          "distopt": cfg.distributed_optimizer, "fsdp": cfg.fsdp}])


# ================================================================================================ op rows
class _Rows:
    """Accumulates op rows (columns of equal-length arrays) with the per-row key, role and count; one
    DataFrame is built at the end (building many small frames costs more than the costing itself)."""

    def __init__(self) -> None:
        self.chunks: list[tuple[int, dict[str, np.ndarray]]] = []

    def add(self, key: np.ndarray, role: str, count: Any, op: str, **cols: Any) -> None:
        n = len(key)
        if n == 0:
            return
        cnt = np.broadcast_to(np.asarray(count, dtype=np.float64), (n,))
        keep = cnt > 0
        k = int(keep.sum())
        if k == 0:
            return
        data: dict[str, np.ndarray] = {"key": np.asarray(key)[keep], "count": cnt[keep],
                                       "role": np.full(k, role, dtype=object), "op": np.full(k, op, dtype=object)}
        for c, v in cols.items():
            arr = np.asarray(v)
            if arr.dtype.kind in "UO":
                data[c] = np.broadcast_to(arr.astype(object), (n,))[keep]
            else:
                data[c] = np.broadcast_to(arr, (n,))[keep].astype(np.float64)
        self.chunks.append((k, data))

    def frame(self) -> pd.DataFrame:
        if not self.chunks:
            return pd.DataFrame()
        names = list(dict.fromkeys(c for _, d in self.chunks for c in d))
        out: dict[str, np.ndarray] = {}
        for c in names:
            kind = next(d[c].dtype.kind for _, d in self.chunks if c in d)
            fill = None if kind == "O" else np.nan
            out[c] = np.concatenate([d[c] if c in d else np.full(n, fill, dtype=object if kind == "O" else np.float64)
                                     for n, d in self.chunks])
        return pd.DataFrame(out)


#: Attention dropout probability on a fused-attention row of a job that trains with dropout (Megatron-LM's default
#: ``attention_dropout``); the roofline's cost of the mask does not depend on it, only on its being > 0.
FUSED_ATTENTION_DROPOUT = 0.1


def _layer_rows(model: TransformerConfig, cfg: TrainingConfig, keys: pd.DataFrame, tgt: Target) -> pd.DataFrame:
    """Per-layer ops for every layer key (``tp, cp, ep, mb, sp``), plus embedding and head ops."""
    R = _Rows()
    kid = keys.index.to_numpy()
    t = keys["tp"].to_numpy(np.int64)
    cp = keys["cp"].to_numpy(np.int64)
    ep = keys["ep"].to_numpy(np.int64)
    b = keys["mb"].to_numpy(np.int64)
    sp = keys["sp"].to_numpy(bool)
    s_full = cfg.seq(model)
    s = s_full // cp  # local sequence
    T = b * s  # tokens per rank per microbatch
    Tn = np.where(sp, T // t, T)  # tokens of norms/dropout/residual ops (SP splits them over TP)
    h = model.hidden_size
    d = model.head_dim
    heads = model.num_attention_heads // t
    kvh = np.maximum(model.num_kv_heads // t, 1)
    if model.is_mla:  # training runs MLA unabsorbed: multi-head attention over 192-dim scores, 128-dim values
        d = model.attention_head_dim
    gdt = cfg.dtype  # GEMM dtype
    adt = "bf16" if cfg.dtype == "fp8" else cfg.dtype  # everything else
    eb = DTYPE_BYTES[adt]
    norm_op = "rmsnorm" if model.normalization == "RMSNorm" else "layernorm"
    dev = tgt.device
    L = model.num_layers
    moe_frac = model.num_moe_layers / L
    dense_frac = 1.0 - moe_frac

    def ew(role: str, variant: str, elements: Any, cnt: Any = 1.0, direction: str = "fwd", **kw: Any) -> None:
        R.add(kid, role, cnt, "elementwise", variant=variant, elements=elements, dtype=adt, direction=direction,
              device=dev, sub="other", **kw)

    causal = 1 if model.causal else 0
    # keys per query: window-limited on local layers (their share); chunked layers' within-chunk pairs exactly
    span = float(model.causal_kv_len(s_full, s_full))
    attention = None
    if cfg.flash_attention:
        # CP: each rank's s/cp queries (two load-balanced chunks) take 1/cp of the whole sequence's (query, key)
        # pairs, within the sliding window or attention chunk on local layers as at CP 1 (Transformer Engine's
        # all-gather CP runs each chunk's queries against the keys of its window only); pairs / cp
        kv_len = np.full(np.shape(cp), min(span, s_full))
        attention = {"count": 1.0 / cp, "batch": b, "heads": heads, "q_len": s_full, "kv_len": kv_len,
                     "head_dim": d, "kv_heads": kvh, "causal": causal, "dtype": adt}
        overlap = softmax_schedule(cfg.softmax)
        if overlap is not None:
            attention["softmax_overlap"] = overlap
        if cfg.uses_attention_dropout(model):  # the fused kernel draws the dropout's mask itself (Philox per score)
            attention["dropout"] = FUSED_ATTENTION_DROPOUT
    else:
        bh = b * heads
        sc = s_full  # unfused attention materialises s x s scores (CP not supported unfused: full seq per rank)
        for role in ("f", "s"):
            R.add(kid, role, 1.0, "bmm", b=bh, m=sc, n=sc, k=d, dtype=adt, direction="fwd", device=dev, sub="attn")
            R.add(kid, role, 1.0, "softmax", rows=bh * sc, hidden=sc, dtype=adt, direction="fwd", device=dev,
                  sub="attn")
            if cfg.uses_attention_dropout(model):
                ew(role, "dropout", bh * sc * sc)
            R.add(kid, role, 1.0, "bmm", b=bh, m=sc, n=d, k=sc, dtype=adt, direction="fwd", device=dev, sub="attn")
        # backward: dS = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q (4 bmm), softmax (+dropout) backward
        for m_, n_, k_ in ((sc, sc, d), (sc, d, sc), (sc, d, sc), (sc, d, sc)):
            R.add(kid, "b", 1.0, "bmm", b=bh, m=m_, n=n_, k=k_, dtype=adt, direction="bwd", device=dev, sub="attn")
        R.add(kid, "b", 1.0, "softmax", rows=bh * sc, hidden=sc, dtype=adt, direction="bwd", device=dev, sub="attn")
        if cfg.uses_attention_dropout(model):
            ew("b", "dropout", bh * sc * sc, direction="bwd")

    roles = {"compute": ("f", "b"), "tp": ("tpf", "tpb"), "ep": ("epf", "epb")}
    weights_per_microbatch = cfg.fp8_weight_cast == "microbatch"

    def fp8_casts(count: Any, fwd_role: str, bwd_role: str, b: Any, m: Any, n: Any, k: Any) -> None:
        """Transformer Engine's fp8 recipe around one (grouped) GEMM ``[b, m, k] x [k, n]``: the forward casts
        its bf16 input to fp8 and writes the fp8 transpose the weight gradient reads (one fused cast-transpose
        kernel: 2 bytes read, 1 + 1 written per element, the bytes of a bf16 copy), the backward does the same to
        the output gradient, and the bf16 weight is cast-transposed every microbatch or once per iteration
        (:attr:`TrainingConfig.fp8_weight_cast`; the per-iteration cast is a stage row). Nothing is fitted: the
        kernels are costed like any bf16 copy of that size."""
        if gdt != "fp8":
            return
        one = dict(variant="copy", n_inputs=1, n_outputs=1, dtype=adt, device=dev, sub="fp8_cast", mix=mix[0])
        R.add(kid, fwd_role, count, "elementwise", elements=b * m * k, direction="fwd", **one)
        R.add(kid, bwd_role, count, "elementwise", elements=b * m * n, direction="bwd", **one)
        if weights_per_microbatch:
            R.add(kid, fwd_role, count, "elementwise", elements=b * k * n, direction="fwd", **one)

    mix = [""]  # the MLP kind of the op being emitted (its rows' ``mix``), for fp8_casts too

    def emit(part: str, name: str, category: str, count: Any, op: str, bwd: str, bwd_cols: Any = None,
             **cols: Any) -> None:
        """The shared builder's forward op, its training backward rows, roles and sub-totals. Rows of the MoE
        layers' ops (experts, router, all-to-all) are tagged ``mix="moe"``, the dense MLP's ``"dense"``: their counts
        are the layer shares (``dense_frac`` / ``moe_frac``), which :func:`busiest_stage_layer` replaces by the
        busiest pipeline rank's."""
        mix[0] = "moe" if category == "moe" or part == "ep" else "dense" if name.startswith("mlp_") else ""
        cols = {**cols, "mix": mix[0]}
        fwd_role, bwd_role = roles[part]
        sub = {"linear": "gemm", "gemm": "gemm", "attention": "attn"}.get(op, "comm" if part != "compute" else "other")
        if op == "linear":  # forward GEMM, backward data- and weight-gradient GEMMs
            m, n, k, mx = cols["m"], cols["n"], cols["k"], mix[0]
            R.add(kid, fwd_role, count, "linear", b=1, m=m, n=n, k=k, dtype=gdt, direction="fwd", device=dev, sub=sub,
                  mix=mx)
            R.add(kid, bwd_role, count, "gemm", b=1, m=m, n=k, k=n, dtype=gdt, direction="bwd", device=dev, sub=sub,
                  mix=mx, dgrad=_sp_block(name))
            R.add(kid, bwd_role, count, "gemm", b=1, m=k, n=n, k=m, dtype=gdt, direction="bwd", device=dev, sub=sub,
                  mix=mx)
            fp8_casts(count, fwd_role, bwd_role, 1, m, n, k)
            return
        if part != "compute":
            cols = {**cols, "system": tgt.comm_system}
            R.add(kid, fwd_role, count, op, device=dev, sub=sub, **cols)
            R.add(kid, bwd_role, count, op, device=dev, sub=sub, **cols)
            return
        R.add(kid, fwd_role, count, op, direction="fwd", device=dev, sub=sub, **cols)
        if bwd in ("same", "experts"):
            dg = {"dgrad": _sp_block(name)} if bwd == "experts" else {}
            R.add(kid, bwd_role, count, op, direction="bwd", device=dev, sub=sub, **{**cols, **(bwd_cols or {})}, **dg)
        if bwd == "experts":  # weight gradient of a grouped GEMM
            R.add(kid, bwd_role, count, op, direction="bwd", device=dev, sub=sub,
                  **{**cols, "m": cols["k"], "k": cols["m"]})
            fp8_casts(count, fwd_role, bwd_role, cols["b"], cols["m"], cols["n"], cols["k"])

    forward_layer_ops(model, emit, tokens=T, norm_tokens=Tn, tp=t, gemm_dtype=gdt, act_dtype=adt, act_bytes=eb,
                      attention=attention, ep=ep, sp=sp, dropout=cfg.uses_dropout(model),
                      tp_nodes=group_nodes_vec(t, np.ones_like(t), tgt.gpus_per_node, cfg.gpus),
                      ep_nodes=group_nodes_vec(ep, t * cp, tgt.gpus_per_node, cfg.gpus), dense_count=dense_frac,
                      moe_count=moe_frac)
    multi = t > 1
    # ---------------------------------------------------------------- SP: the weight gradients' input all-gather
    if (multi & sp).any():
        # Megatron-LM's column-parallel linears (QKV, FC1) keep only their sequence-split input and all-gather it
        # again in backward for the weight-gradient GEMM, launched async_op=True before the input-gradient GEMM and
        # waited for before the weight gradient (megatron/core/tensor_parallel/layers.py,
        # LinearWithGradAccumulationAndAsyncCommunication.backward; Transformer Engine's LayerNormLinear likewise):
        # hidden behind that block's data-gradient GEMM, exposed beyond it (_aggregate: role "spgb")
        spm = multi & sp
        blocks = ("attn", "mlp") if not model.parallel_attn else ("attn",)
        for blk in blocks:
            R.add(kid[spm], "spgb", 1.0, "all_gather", size_bytes=(T * h * eb * 1.0)[spm], n_ranks=t[spm],
                  n_nodes=group_nodes_vec(t, np.ones_like(t), tgt.gpus_per_node, cfg.gpus)[spm], dtype=adt, device=dev,
                  system=tgt.comm_system, sub="comm", dgrad=blk)
    # ---------------------------------------------------------------- CP: exchange of K and V
    if cp.max() > 1:
        m_ = cp > 1
        # one rank's K and V: whole, replicated KV heads when TP exceeds them (kv_width_split), as it holds them
        kv_rank = b * s * 2.0 * kv_width_split(model, t) / np.maximum(t, 1) * eb
        nodes = group_nodes_vec(cp, t, tgt.gpus_per_node, cfg.gpus)
        local = cp_local_share(model)
        # global layers: the ring (cp - 1 steps of one rank's K and V; backward K, V and dK, dV), overlapped with
        # the attention blocks
        for role, mult in (("cpf", 1.0), ("cpb", 2.0)):
            R.add(kid[m_], role, mult * (1.0 - local), "send_recv", size_bytes=(kv_rank * (cp - 1))[m_], n_ranks=2,
                  n_nodes=np.minimum(nodes[m_], 2), dtype=adt, device=dev, system=tgt.comm_system, sub="comm")
        if local > 0:
            # sliding-window / chunked layers: Transformer Engine's ring (cp_comm_type p2p) refuses a window, so they
            # run its all-gather CP (Megatron-LM's per-layer --cp-comm-type all_gather): the whole sequence's K and V
            # gathered before the attention, exposed ("KV all-gather between CP ranks is exposed",
            # AttnFuncWithCPAndKVAllGather); the backward gathers them again and reduce-scatters dK, dV. Every rank
            # gets all K and V whatever the window: its two chunks sit at both ends of the sequence.
            full = (kv_rank * cp)[m_]
            comm = dict(n_ranks=cp[m_], n_nodes=nodes[m_], dtype=adt, device=dev, system=tgt.comm_system, sub="comm")
            R.add(kid[m_], "cpgf", local, "all_gather", size_bytes=full, **comm)
            R.add(kid[m_], "cpgb", local, "all_gather", size_bytes=full, **comm)
            R.add(kid[m_], "cpgb", local, "reduce_scatter", size_bytes=full, **comm)
    # ---------------------------------------------------------------- embedding (first stage), head (last stage)
    # padded per key's TP (the search's base config carries a placeholder TP)
    V = padded_vocab_vec(model, cfg, t).astype(np.int64)
    ew("ef", "copy", Tn * h, n_inputs=1, n_outputs=1)  # gather of embedding rows
    if model.position_embedding_type == "learned_absolute":
        ew("ef", "add", Tn * h)
    if cfg.uses_dropout(model):
        ew("ef", "dropout", Tn * h)
    ew("eb", "add", Tn * h, 2, direction="bwd")  # scatter-add of row gradients (+ dropout backward)
    # the final norm (an encoder's, post-LN, has none: its MLM head's norm stands there, a classifier has neither)
    if model.lm_head or not model.encoder_only:
        R.add(kid, "hf", 1.0, norm_op, rows=Tn, hidden=h, dtype=adt, direction="fwd", device=dev, sub="other")
        R.add(kid, "hb", 1.0, norm_op, rows=Tn, hidden=h, dtype=adt, direction="bwd", device=dev, sub="other")
    # the output layer is not a Transformer Engine module: under fp8 it stays a 16-bit GEMM
    hdt = adt if gdt == "fp8" else gdt
    if model.encoder_only:
        # replicated h x h dense layers: the MLM head's transform on every token, the pooler on each [CLS] (where the
        # model has them: BertForMaskedLM has no pooler, a classifier or a bare encoder no MLM head)
        for rows in [T] * model.lm_head + [b] * model.pooler:
            R.add(kid, "hf", 1.0, "linear", b=1, m=rows, n=h, k=h, dtype=hdt, direction="fwd", device=dev, sub="gemm")
            R.add(kid, "hb", 1.0, "gemm", b=1, m=rows, n=h, k=h, dtype=hdt, direction="bwd", device=dev, sub="gemm")
            R.add(kid, "hb", 1.0, "gemm", b=1, m=h, n=h, k=rows, dtype=hdt, direction="bwd", device=dev, sub="gemm")
    if model.lm_head:
        R.add(kid, "hf", 1.0, "linear", b=1, m=T, n=V // t, k=h, dtype=hdt, direction="fwd", device=dev, sub="gemm")
        R.add(kid, "hb", 1.0, "gemm", b=1, m=T, n=h, k=V // t, dtype=hdt, direction="bwd", device=dev, sub="gemm")
        R.add(kid, "hb", 1.0, "gemm", b=1, m=h, n=V // t, k=T, dtype=hdt, direction="bwd", device=dev, sub="gemm")
        # vocab-parallel cross entropy in fp32: softmax over V/t columns, backward (softmax - one-hot)
        R.add(kid, "hf", 1.0, "softmax", rows=T, hidden=V // t, dtype="fp32", direction="fwd", device=dev, sub="other")
        R.add(kid, "hb", 1.0, "softmax", rows=T, hidden=V // t, dtype="fp32", direction="bwd", device=dev, sub="other")
    elif model.output_head == "classifier":
        # a replicated score layer on the last token (an encoder's pooled [CLS] token) of each sequence (b rows), its
        # loss over num_labels columns
        nl = model.num_labels
        R.add(kid, "hf", 1.0, "linear", b=1, m=b, n=nl, k=h, dtype=hdt, direction="fwd", device=dev, sub="gemm")
        R.add(kid, "hb", 1.0, "gemm", b=1, m=b, n=h, k=nl, dtype=hdt, direction="bwd", device=dev, sub="gemm")
        R.add(kid, "hb", 1.0, "gemm", b=1, m=h, n=nl, k=b, dtype=hdt, direction="bwd", device=dev, sub="gemm")
        R.add(kid, "hf", 1.0, "softmax", rows=b, hidden=nl, dtype="fp32", direction="fwd", device=dev, sub="other")
        R.add(kid, "hb", 1.0, "softmax", rows=b, hidden=nl, dtype="fp32", direction="bwd", device=dev, sub="other")
    if multi.any():
        nodes = group_nodes_vec(t, np.ones_like(t), tgt.gpus_per_node, cfg.gpus)
        spm = multi & sp
        nsp = multi & ~sp
        # vocab-parallel embedding: each rank looks up its vocabulary slice, summed over TP (scattered with SP)
        R.add(kid[nsp], "ef", 1.0, "all_reduce", size_bytes=(T * h * eb * 1.0)[nsp], n_ranks=t[nsp],
              n_nodes=nodes[nsp], dtype=adt, device=dev, system=tgt.comm_system, sub="comm")
        R.add(kid[spm], "ef", 1.0, "reduce_scatter", size_bytes=(T * h * eb * 1.0)[spm], n_ranks=t[spm],
              n_nodes=nodes[spm], dtype=adt, device=dev, system=tgt.comm_system, sub="comm")
        if not model.lm_head:  # a replicated classifier's or no head: no vocab-parallel logits to combine
            return R.frame()
        # logits max/sum all-reduces (tiny) + with SP the all-gather of the final norm output
        R.add(kid[multi], "htpf", 2.0, "all_reduce", size_bytes=(T * 4.0)[multi], n_ranks=t[multi],
              n_nodes=nodes[multi], dtype="fp32", device=dev, system=tgt.comm_system, sub="comm")
        # without SP the output layer's input gradient is summed over TP (the backward of its input copy)
        R.add(kid[nsp], "htpb", 1.0, "all_reduce", size_bytes=(T * h * eb * 1.0)[nsp], n_ranks=t[nsp],
              n_nodes=nodes[nsp], dtype=adt, device=dev, system=tgt.comm_system, sub="comm")
        if spm.any():
            R.add(kid[spm], "htpf", 1.0, "all_gather", size_bytes=(T * h * eb * 1.0)[spm], n_ranks=t[spm],
                  n_nodes=nodes[spm], dtype=adt, device=dev, system=tgt.comm_system, sub="comm")
            R.add(kid[spm], "htpb", 1.0, "reduce_scatter", size_bytes=(T * h * eb * 1.0)[spm], n_ranks=t[spm],
                  n_nodes=nodes[spm], dtype=adt, device=dev, system=tgt.comm_system, sub="comm")
    return R.frame()


# ================================================================================================ parameters
def padded_vocab_vec(model: TransformerConfig, cfg: TrainingConfig, tp: np.ndarray) -> np.ndarray:
    """Megatron's padded vocabulary (multiple of ``make_vocab_size_divisible_by x tp``) per TP degree."""
    mult = cfg.make_vocab_size_divisible_by * np.asarray(tp, dtype=np.float64)
    return np.ceil(model.vocab_size / mult) * mult


#: The GEMMs that read a layer block's (sequence-parallel) norm output: their data-gradient GEMM hides the backward
#: all-gather of that input (``_layer_rows``; a parallel-attention layer's one block reads it for both).
_SP_BLOCK_GEMMS = {"attn_pre_proj": "attn", "attn_q_proj": "attn", "attn_q_a_proj": "attn", "attn_kv_a_proj": "attn",
                   "mlp_up_proj": "mlp", "shared_expert_up_proj": "mlp"}


def _sp_block(name: str) -> str:
    """The block (``attn`` / ``mlp``) whose input-gradient GEMM ``name`` is, '' for the other GEMMs."""
    return _SP_BLOCK_GEMMS.get(name, "")


def cp_local_share(model: TransformerConfig) -> float:
    """Share of the layers that attend within a sliding window or an attention chunk (causal models): under context
    parallelism they exchange K and V by an exposed all-gather instead of the overlapped ring (see
    :func:`_layer_rows`); 0 for a model with global attention only."""
    return float(model.kv_cap_share) if (model.kv_cap and model.causal) else 0.0


def kv_width_split(model: TransformerConfig, tp: Any) -> np.ndarray:
    """Key (and value) columns that, divided by TP, give one rank's share: ``ceil(kv_heads / tp) x head_dim x tp``.

    Equal to ``kv_width`` when TP divides the KV heads; larger when TP exceeds them, since then each KV head is
    replicated on ``tp / kv_heads`` ranks (as :mod:`hybrid.workloads.llm.layer_ops` costs the QKV GEMM). Multi-head
    latent attention splits its per-head keys and values by the query heads: ``kv_width``."""
    t = np.asarray(tp, dtype=np.float64)
    if model.is_mla:
        return np.full(np.shape(t), float(model.kv_width))
    return np.ceil(model.num_kv_heads / t) * model.head_dim * t


def kv_replication_note(model: TransformerConfig, tp: int) -> str:
    """A warning when TP exceeds the KV heads ('' otherwise): the heads are replicated, which inference engines
    do but Megatron-Core's attention refuses (it divides ``num_query_groups`` by the TP size)."""
    if model.is_mla or tp <= model.num_kv_heads:
        return ""
    return (f"tp {tp} exceeds the {model.num_kv_heads} KV heads of {model.name}: each KV head is replicated on "
            f"{tp // model.num_kv_heads} ranks (costed and counted in memory so, as inference engines run it), but "
            f"Megatron-Core's attention divides num_query_groups by tp and refuses this; "
            + ("only tp 1 avoids it" if model.num_kv_heads == 1 else f"a tp dividing {model.num_kv_heads} avoids it"))


def stage_params(model: TransformerConfig, cfg: TrainingConfig, m: pd.DataFrame) -> dict[str, np.ndarray]:
    """Parameters held by one rank of the most loaded stage, per mapping (before DP/FSDP sharding).

    ``layers``: transformer-layer parameters per rank (dense parts / TP, experts / (TP x EP), the norms, row-parallel
    biases, routers and MLA down-projections whole on every TP rank, :meth:`TransformerConfig.tp_replicated_params`;
    KV projections of heads replicated when TP exceeds the KV heads, :func:`kv_width_split`);
    ``first``/``last``: embedding (+ positions) on the first stage, output layer (or the tied copy) on the last;
    ``middle``: the heaviest stage between them (0 with fewer than 3 stages); ``max``: the heaviest of all.
    """
    c = model.param_counts()
    t = m["tp"].to_numpy(np.float64)
    pp = m["pp"].to_numpy(np.float64)
    ep = m["ep"].to_numpy(np.float64)
    expert_total = 0.0
    if model.is_moe:
        per_expert = model._mlp_params(int(model.moe_ffn_hidden_size))  # noqa: SLF001
        expert_total = model.num_moe_layers * int(model.num_experts) * per_expert
    # replicated KV heads: K and V weight columns (and biases) beyond kv_width, before the split over TP
    kv_extra = 2.0 * (kv_width_split(model, t) - model.kv_width)
    kv_extra = kv_extra * (model.hidden_size + (1 if model.add_bias_linear or model.add_qkv_bias else 0))
    non_expert = c["layers_total"] - expert_total + model.num_layers * kv_extra
    # norms, row-parallel biases, MLA down-projections, routers: whole on every TP rank, not split
    rep = model.tp_replicated_params()
    replicated = (model.num_layers * rep["attention"] + model.num_dense_layers * rep["dense_mlp"]
                  + model.num_moe_layers * rep["moe"])
    layers = ((non_expert - replicated) / t + replicated + expert_total / (t * ep)) / pp
    V = padded_vocab_vec(model, cfg, t)
    h = model.hidden_size
    emb = V * h / t + c["position_embedding"]
    if model.lm_head:
        out = np.where(pp > 1, V * h / t, 0.0) if model.tied_embeddings else V * h / t
    else:  # a classifier's replicated score layer, or none
        out = np.full(np.shape(t), float(c["output_layer"]))
    out = out + c["final_norm"] + c["head"]  # (an encoder's replicated pooler and MLM head transform)
    experts = expert_total / (t * ep) / pp
    if model.is_moe and 0 < model.num_moe_layers < model.num_layers and (pp > 1).any():
        return _uneven_stage_params(model, m, c, kv_extra, layers, experts, emb, out, rep)
    first = layers + emb + np.where(pp > 1, 0.0, out)
    last = layers + out
    return {"layers": layers, "first": first, "last": np.where(pp > 1, last, first),
            "middle": np.where(pp > 2, layers, 0.0), "max": np.maximum(first, last), "experts": experts,
            "expert_share": experts / np.maximum(layers, 1)}


def _uneven_stage_params(model: TransformerConfig, m: pd.DataFrame, c: dict[str, int], kv_extra: np.ndarray,
                         layers: np.ndarray, experts: np.ndarray, emb: np.ndarray, out: np.ndarray,
                         rep: dict[str, int]) -> dict[str, np.ndarray]:
    """:func:`stage_params` of a model with dense and MoE layers: pipeline ranks hold different numbers of MoE
    layers (``TransformerConfig.moe_layers_per_rank``; DeepSeek's dense first layers sit on rank 0), so the most
    loaded rank is the one with the most parameters, the embedding's and output layer's included, not the mean
    over the stages."""
    t = m["tp"].to_numpy(np.float64)
    pp = m["pp"].to_numpy(np.int64)
    vp = m["vp"].to_numpy(np.int64)
    ep = m["ep"].to_numpy(np.float64)
    attn = c["attention_per_layer"] + c["norms_per_layer"] + kv_extra
    routed = int(model.num_experts) * model._mlp_params(int(model.moe_ffn_hidden_size))  # noqa: SLF001
    # the parts every TP rank holds whole (TransformerConfig.tp_replicated_params) beside the split rest
    rep_dense, rep_moe = rep["attention"] + rep["dense_mlp"], rep["attention"] + rep["moe"]
    dense_layer = (attn + c["mlp_per_layer"] - rep_dense) / t + rep_dense
    moe_layer = (attn + c["moe_per_layer_total"] - routed - rep_moe) / t + rep_moe + routed / (t * ep)
    layers, experts = layers.copy(), experts.copy()
    first, last, most, middle = np.zeros(len(m)), np.zeros(len(m)), np.zeros(len(m)), np.zeros(len(m))
    for p_, v_ in {(int(a), int(b)) for a, b in zip(pp, vp, strict=True)}:
        sel = (pp == p_) & (vp == v_)
        if p_ == 1:
            first[sel] = layers[sel] + emb[sel] + out[sel]
            last[sel] = most[sel] = first[sel]
            continue
        n_moe = np.asarray(model.moe_layers_per_rank(p_, v_), dtype=np.float64)[None, :]  # [1, rank]
        per_rank = model.num_layers / p_
        rank_layers = (per_rank - n_moe) * dense_layer[sel, None] + n_moe * moe_layer[sel, None]  # [mapping, rank]
        total = rank_layers.copy()
        total[:, 0] += emb[sel]
        total[:, -1] += out[sel]
        busiest = np.argmax(total, axis=1)
        rows = np.arange(int(sel.sum()))
        first[sel], last[sel], most[sel] = total[:, 0], total[:, -1], total[rows, busiest]
        if p_ > 2:
            middle[sel] = total[:, 1:-1].max(axis=1)
        layers[sel] = rank_layers[rows, busiest]
        experts[sel] = n_moe[0, busiest] * routed / (t[sel] * ep[sel])
    return {"layers": layers, "first": first, "last": last, "middle": middle, "max": most, "experts": experts,
            "expert_share": experts / np.maximum(layers, 1)}


@dataclass(frozen=True)
class GradientGroups:
    """Who reduces which gradients and shards which optimizer states, per mapping row. Dense parameters: the
    data-parallel group with CP (Megatron's DP x CP ranks, stride ``tp``); expert parameters: the DP x CP / EP
    ranks that hold the same experts (stride ``tp x ep``). ``dense`` / ``experts``: parameters one rank holds."""

    dense: np.ndarray
    dense_ranks: np.ndarray
    dense_stride: np.ndarray
    experts: np.ndarray
    expert_ranks: np.ndarray
    expert_stride: np.ndarray

    def sharded(self) -> np.ndarray:
        """Parameters per rank once sharded over the groups (the distributed optimizer, FSDP)."""
        return self.dense / self.dense_ranks + self.experts / self.expert_ranks

    def parts(self, gpus_per_node: int, ranks: int | None = None
              ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]:
        """(parameters, group size, nodes the group spans) for the dense and the expert part, in a job of
        ``ranks`` GPUs (:func:`~hybrid.workloads.llm.config.group_nodes`)."""
        return ((self.dense, self.dense_ranks,
                 group_nodes_vec(self.dense_ranks, self.dense_stride, gpus_per_node, ranks)),
                (self.experts, self.expert_ranks,
                 group_nodes_vec(self.expert_ranks, self.expert_stride, gpus_per_node, ranks)))


def gradient_groups(m: pd.DataFrame, params: dict[str, np.ndarray]) -> GradientGroups:
    """:class:`GradientGroups` of the most loaded stage (``params["max"]`` parameters per rank)."""
    t, dp, cp, ep = (m[c].to_numpy(np.int64) for c in ("tp", "dp", "cp", "ep"))
    experts = np.broadcast_to(np.asarray(params.get("experts", 0.0), dtype=np.float64), (len(m),))
    dense = np.asarray(params["max"], dtype=np.float64) - experts
    return GradientGroups(dense, dp * cp, t, experts, np.maximum(dp * cp // np.maximum(ep, 1), 1), t * ep)


# ================================================================================================ costing
def _stage_rows(model: TransformerConfig, cfg: TrainingConfig, m: pd.DataFrame, tgt: Target,
                params: dict[str, np.ndarray]) -> pd.DataFrame:
    """Per-mapping collectives (DP, FSDP, PP, tied embedding) and the optimizer step."""
    R = _Rows()
    idx = m.index.to_numpy()
    t, pp, dp, cp = (m[c].to_numpy(np.int64) for c in ("tp", "pp", "dp", "cp"))
    mb = m["mb"].to_numpy(np.int64)
    sp = m["sp"].to_numpy(bool)
    distopt = m["distopt"].to_numpy(bool)
    fsdp = m["fsdp"].to_numpy(bool)
    adt = "bf16" if cfg.dtype == "fp8" else cfg.dtype
    eb = DTYPE_BYTES[adt]
    gb = DTYPE_BYTES[cfg.grad_dtype]
    gpn = tgt.gpus_per_node
    dev, sysk = tgt.device, tgt.comm_system
    P = params["max"]
    groups = gradient_groups(m, params)
    layer_share = pp / model.num_layers  # one layer's share of the stage's layer parameters
    per_layer = ((params["layers"] - groups.experts) * layer_share, groups.experts * layer_share)
    pb = DTYPE_BYTES[cfg.fsdp_gather_dtype]
    for part, (n, ranks, nodes) in enumerate(groups.parts(gpn, cfg.gpus)):
        has = (ranks > 1) & (n > 0)
        plain = has & ~distopt & ~fsdp
        R.add(idx[plain], "dp_ar", 1.0, "all_reduce", size_bytes=(n * gb)[plain], n_ranks=ranks[plain],
              n_nodes=nodes[plain], dtype=cfg.grad_dtype, device=dev, system=sysk)
        dop = has & distopt
        R.add(idx[dop], "dp_rs", 1.0, "reduce_scatter", size_bytes=(n * gb)[dop], n_ranks=ranks[dop],
              n_nodes=nodes[dop], dtype=cfg.grad_dtype, device=dev, system=sysk)
        R.add(idx[dop], "dp_ag", 1.0, "all_gather", size_bytes=(n * eb)[dop], n_ranks=ranks[dop],
              n_nodes=nodes[dop], dtype=adt, device=dev, system=sysk)
        fs = (ranks > 1) & fsdp & (per_layer[part] > 0)
        if fs.any():  # per layer: gather its parameters, reduce-scatter its gradients
            R.add(idx[fs], "fsdp_ag", 1.0, "all_gather", size_bytes=(per_layer[part] * pb)[fs], n_ranks=ranks[fs],
                  n_nodes=nodes[fs], dtype=cfg.fsdp_gather_dtype, device=dev, system=sysk)
            R.add(idx[fs], "fsdp_rs", 1.0, "reduce_scatter", size_bytes=(per_layer[part] * gb)[fs],
                  n_ranks=ranks[fs], n_nodes=nodes[fs], dtype=cfg.grad_dtype, device=dev, system=sysk)
        if part == 0 and fs.any():  # embedding / output layer: dense, once
            emb = (params["max"] - params["layers"])
            R.add(idx[fs], "fsdp_emb", 1.0, "all_gather", size_bytes=(np.maximum(emb, 1.0) * pb)[fs],
                  n_ranks=ranks[fs], n_nodes=nodes[fs], dtype=cfg.fsdp_gather_dtype, device=dev, system=sysk)
            R.add(idx[fs], "fsdp_emb", 1.0, "reduce_scatter", size_bytes=(np.maximum(emb, 1.0) * gb)[fs],
                  n_ranks=ranks[fs], n_nodes=nodes[fs], dtype=cfg.grad_dtype, device=dev, system=sysk)
    # pipeline send/recv of [b, s/cp, h] (split over TP: Megatron's scatter-gather / SP)
    pipe = pp > 1
    s = cfg.seq(model) // cp
    act = mb * s * model.hidden_size * eb / t
    # neighbours tp x cp x dp ranks apart: some pair crosses a node boundary as soon as the pipeline group spans
    # two nodes (12 GPUs at pp 2 on 8-GPU nodes: ranks 2-5 send to 8-11), which also puts the first and last
    # stage apart; not only when a stage fills a node
    pp_nodes = np.minimum(group_nodes_vec(pp, t * cp * dp, gpn, cfg.gpus), 2)
    R.add(idx[pipe], "p2p", 1.0, "send_recv", size_bytes=act[pipe].astype(np.float64), n_ranks=2,
          n_nodes=pp_nodes[pipe], dtype=adt, device=dev, system=sysk)
    # tied embedding: gradient all-reduce between the first and last stage
    if model.tied_output:
        V = padded_vocab_vec(model, cfg, t.astype(np.float64))
        R.add(idx[pipe], "emb_ar", 1.0, "all_reduce",
              size_bytes=(V * model.hidden_size / t * gb)[pipe].astype(np.float64), n_ranks=2,
              n_nodes=pp_nodes[pipe], dtype=cfg.grad_dtype, device=dev, system=sysk)
    # fp8 weights cast once per iteration (Megatron-LM's is_first_microbatch): every layer weight of the stage
    if cfg.dtype == "fp8" and cfg.fp8_weight_cast == "step":
        R.add(idx, "fp8w", 1.0, "elementwise", variant="copy", elements=np.maximum(params["layers"], 1.0),
              dtype=adt, device=dev, n_inputs=1, n_outputs=1)
    # optimizer: Adam over this rank's shard of fp32 master weights, plus the gradient-norm pass
    shard = np.where(distopt | fsdp, groups.sharded(), P)
    R.add(idx, "opt", 1.0, "elementwise", variant="adam", elements=np.maximum(shard, 1.0), dtype="fp32", device=dev)
    R.add(idx, "opt", 1.0, "elementwise", variant="scale", elements=np.maximum(P, 1.0), dtype="fp32", device=dev,
          n_inputs=1, n_outputs=0)
    out = R.frame()
    del sp
    return out


def predict_rows(model: OpCostModel, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, method) per row through one ``model.predict`` call over the distinct op rows."""
    secs, _, _, method = predict_rows_bounds(model, rows)
    return secs, method


def predict_rows_bounds(model: OpCostModel, rows: pd.DataFrame
                        ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray]:
    """(seconds, low seconds, high seconds, method) per row through one ``model.predict`` call over the distinct
    op rows; the bounds (the model's 80% interval) are None when the model gives no interval for every row."""
    cols = [c for c in _OP_COLUMNS if c in rows.columns]
    codes = np.column_stack([pd.factorize(rows[c].to_numpy(dtype=object), use_na_sentinel=False)[0]
                             for c in cols])
    _, first, inverse = np.unique(codes, axis=0, return_index=True, return_inverse=True)
    unique_ops = rows[cols].iloc[first].reset_index(drop=True).dropna(axis=1, how="all")
    times, low, high, method = predict_bounds(model, unique_ops)
    inverse = np.asarray(inverse).reshape(-1)
    lo = None if low is None else low[inverse] * 1e-6
    hi = None if high is None else high[inverse] * 1e-6
    return times[inverse] * 1e-6, lo, hi, method[inverse]


@dataclass
class MappingCosts:
    """Per-mapping times in seconds (arrays aligned with ``mappings``) and the costed op table."""

    mappings: pd.DataFrame
    layer: dict[str, np.ndarray]  # per-layer, per-microbatch: f, b, sel, tpf, tpb, ... on one rank
    stage: dict[str, np.ndarray]  # per-iteration collectives and optimizer: dp_ar, dp_rs, p2p, opt, ...
    params: dict[str, np.ndarray]
    ops: pd.DataFrame  # every op row with its predicted time (seconds) and method
    n_predicted: int
    #: the same ``(layer, stage)`` times with every op at the low / high end of its 80% interval ("low", "high");
    #: empty when the cost model gives no intervals
    ends: dict[str, tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = field(default_factory=dict)

    def at(self, end: str) -> MappingCosts | None:
        """These costs with every op at the ``"low"`` or ``"high"`` end of its interval (None without intervals).
        Errors on one system are strongly correlated, so all ops move together, as in the engine's
        ``iteration_us_low`` / ``iteration_us_high``."""
        if end not in self.ends:
            return None
        layer, stage = self.ends[end]
        return replace(self, layer=layer, stage=stage, ends={})


def cost_mappings(model: TransformerConfig, cfg: TrainingConfig, mappings: pd.DataFrame, tgt: Target,
                  cost_model: OpCostModel) -> MappingCosts:
    """Cost every mapping's layer ops and per-iteration collectives in ONE predictor call."""
    m = mappings.reset_index(drop=True)
    m["sp"] = m["sp"].astype(bool) & (m["tp"] > 1)
    keys = m[["tp", "cp", "ep", "mb", "sp"]].drop_duplicates().reset_index(drop=True)
    key_of = m[["tp", "cp", "ep", "mb", "sp"]].merge(keys.reset_index(), how="left",
                                                      on=["tp", "cp", "ep", "mb", "sp"])["index"].to_numpy()
    lrows = _layer_rows(model, cfg, keys, tgt)
    lrows["scope"] = "layer"
    params = stage_params(model, cfg, m)
    srows = _stage_rows(model, cfg, m, tgt, params)
    srows["scope"] = "mapping"
    rows = pd.concat([lrows, srows], ignore_index=True, sort=False)
    secs, low, high, method = predict_rows_bounds(cost_model, rows)
    rows["time_s"] = secs
    rows["method"] = method
    count = rows["count"].to_numpy()
    rows["total_s"] = secs * count
    layer, stage = _aggregate(rows, secs * count, len(keys), key_of, len(m))
    layer = busiest_stage_layer(model, m, layer)
    ends = {}
    if low is not None and high is not None:
        ends = {end: (busiest_stage_layer(model, m, lay), stg)
                for end, (lay, stg) in (("low", _aggregate(rows, low * count, len(keys), key_of, len(m))),
                                        ("high", _aggregate(rows, high * count, len(keys), key_of, len(m))))}
    return MappingCosts(m, layer, stage, params, rows, int(len(np.unique(secs))), ends)


def busiest_stage_layer(model: TransformerConfig, m: pd.DataFrame, layer: dict[str, np.ndarray]
                        ) -> dict[str, np.ndarray]:
    """Per-layer times of the slowest pipeline rank, which sets the pipeline's pace, from the layer times costed
    at the model's mean share of MoE layers: the MoE-only parts (``role@moe``: experts, router, all-to-all) and the
    dense MLP's (``role@dense``) are re-weighed by that rank's share of MoE layers (the most when a MoE layer takes
    longer than a dense one, else the fewest). DeepSeek-V3-like models (3 dense layers first) at pp 8 and 64 layers
    put 5 MoE layers on the first rank and 8 on each other: the mean (7.6) made the pipeline ~5% fast."""
    L = model.num_layers
    n_moe = model.num_moe_layers
    if not 0 < n_moe < L:
        return layer
    share = n_moe / L
    pp = m["pp"].to_numpy(np.int64)
    vp = m["vp"].to_numpy(np.int64)
    most, fewest = np.full(len(m), share), np.full(len(m), share)
    for p_, v_ in {(int(a), int(b)) for a, b in zip(pp, vp, strict=True)}:
        counts = np.asarray(model.moe_layers_per_rank(p_, v_), dtype=np.float64) / (L / p_)
        sel = (pp == p_) & (vp == v_)
        most[sel], fewest[sel] = counts.max(), counts.min()
    roles = list(dict.fromkeys(k.split("@")[0] for k in layer if "@" in k))
    per_moe = {r: layer.get(f"{r}@moe", 0.0) / share for r in roles}  # one MoE layer's MoE ops
    per_dense = {r: layer.get(f"{r}@dense", 0.0) / (1.0 - share) for r in roles}  # one dense layer's MLP
    slower = sum((per_moe[r] - per_dense[r]) for r in roles if r in ("f", "b", "epf", "epb", "tpf", "tpb")) > 0
    x = np.where(slower, most, fewest)
    out = dict(layer)
    for r in roles:
        out[r] = layer[r] + (x - share) * (per_moe[r] - per_dense[r])
    return out


def _aggregate(rows: pd.DataFrame, total_s: np.ndarray, nk: int, key_of: np.ndarray, n: int
               ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per-mapping (layer, stage) sums of ``total_s`` (seconds per op row, times its count)."""
    rows = rows.assign(total_s=total_s)
    # per layer key and role
    lr = rows[rows["scope"] == "layer"]
    roles = ("f", "b", "s", "tpf", "tpb", "spgb", "epf", "epb", "cpf", "cpb", "cpgf", "cpgb", "ef", "eb", "hf", "hb", "htpf",
             "htpb")
    table = {r: np.zeros(nk) for r in roles}
    g = lr.groupby(["key", "role"])["total_s"].sum()
    for (k, r), v in g.items():
        table[str(r)][int(k)] = float(v)
    for sub, role, name in (("gemm", "f", "gemm_f"), ("gemm", "b", "gemm_b"), ("attn", "f", "attn_f"),
                            ("attn", "b", "attn_b")):
        sel = lr[(lr["sub"] == sub) & (lr["role"] == role)].groupby("key")["total_s"].sum()
        arr = np.zeros(nk)
        arr[sel.index.to_numpy(np.int64)] = sel.to_numpy()
        table[name] = arr
    # SP's backward all-gathers: what each exceeds its block's data-gradient GEMMs by (a parallel-attention layer's
    # one gather hides behind both blocks' GEMMs)
    table["spgb"] = np.zeros(nk)
    if "dgrad" in lr.columns and (lr["role"] == "spgb").any():
        blk = lr["dgrad"].fillna("").astype(str)
        gather = lr[lr["role"] == "spgb"]
        single = set(gather["dgrad"]) == {"attn"}
        blk = blk.where(~single | (blk == ""), "attn")
        dgrad = lr[(lr["role"] == "b") & (blk != "")].assign(blk=blk).groupby(["key", "blk"])["total_s"].sum()
        for (k, b_), ag in gather.groupby(["key", "dgrad"])["total_s"].sum().items():
            table["spgb"][int(k)] += max(0.0, float(ag) - float(dgrad.get((k, b_), 0.0)))
    # the MoE and dense MLP parts of each role (busiest_stage_layer re-weighs them per mapping)
    if "mix" in lr.columns:
        for kind in ("moe", "dense"):
            part = lr[lr["mix"] == kind]
            for (k, r), v in part.groupby(["key", "role"])["total_s"].sum().items():
                table.setdefault(f"{r}@{kind}", np.zeros(nk))[int(k)] = float(v)
            for sub, role, name in (("gemm", "f", "gemm_f"), ("gemm", "b", "gemm_b")):
                sel = part[(part["sub"] == sub) & (part["role"] == role)].groupby("key")["total_s"].sum()
                arr = table.setdefault(f"{name}@{kind}", np.zeros(nk))
                arr[sel.index.to_numpy(np.int64)] = sel.to_numpy()
    layer = {k: v[key_of] for k, v in table.items()}
    sr = rows[rows["scope"] == "mapping"]
    stage = {}
    for r in ("dp_ar", "dp_rs", "dp_ag", "fsdp_ag", "fsdp_rs", "fsdp_emb", "p2p", "emb_ar", "opt", "fp8w"):
        sel = sr[sr["role"] == r].groupby("key")["total_s"].sum()
        arr = np.zeros(n)
        arr[sel.index.to_numpy(np.int64)] = sel.to_numpy()
        stage[r] = arr
    return layer, stage
