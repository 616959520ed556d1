"""LLM training prediction: iteration time, throughput, MFU/HFU, breakdown, memory; and the mapping search.

FLOPs (stated with every result): model FLOPs per iteration = 3 x forward FLOPs x tokens, with forward FLOPs per
token = 2 x (matmul weights of the layers, active experts only) + 2 h V (logits) + 4 s q_width L (attention
scores and values, full s x s as in Megatron-LM's and llm-foundry's formulas, Narayanan et al. 2021:
``72 B s L h^2 (1 + s/(6h) + V/(12 L h))`` for GPT). Hardware FLOPs add the recomputed forward: all of it
with full recomputation, the attention-score part (``4 s q_width L``) with selective recomputation.
``MFU = model FLOPs / (iteration time x GPUs x dense peak of the dtype)``; HFU likewise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hybrid.engine.costs import KernelTimeModel, OpCostModel, default_cost_model, model_catalog
from hybrid.engine.form_error import e2e_interval
from hybrid.engine.simulate import SimResult
from hybrid.errors import InvalidInputError
from hybrid.ops.roofline import cluster_notes
from hybrid.workloads.llm.config import TrainingConfig
from hybrid.workloads.llm.costing import (
    Target,
    cost_mappings,
    kv_replication_note,
    mappings_frame,
    resolve_target,
)
from hybrid.workloads.llm.memory import GIB, MemoryBreakdown, memory_per_rank
from hybrid.workloads.llm.model import TransformerConfig
from hybrid.workloads.llm.schedule import closed_form, simulate_mapping, stage_times

FLOP_FORMULA = ("model FLOPs = 3 x tokens x [2 x layer matmul weights (active) + 2 h V + 4 s q_width L "
                "(MLA: 2 s (q_width + value_width) L)]; "
                "HFU adds the recomputed layers' forward (full) or, without FlashAttention, that attention term "
                "per token (selective); "
                "MFU = model FLOPs / (iteration s x GPUs x dense peak)")


def model_flops(model: TransformerConfig, cfg: TrainingConfig) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one iteration (see the module docstring)."""
    s = cfg.seq(model)
    tokens = cfg.global_batch * s
    fwd = model.forward_flops_per_token(s, causal_skip=False)
    mf = 3.0 * fwd * tokens
    if cfg.recompute == "full":  # the layers run forward again; the output layer does not (Megatron's HFU)
        head = model.head_flops_per_token(s) + model.encoder_head_flops_per_token(s)
        hf = mf + (fwd - head) * tokens
    elif cfg.recompute == "selective" and not cfg.flash_attention:  # FlashAttention: nothing extra (as timed)
        hf = mf + 2.0 * s * (model.q_width + model.value_width) * model.num_layers * tokens
    else:
        hf = mf
    return mf, hf


@dataclass
class TrainingPrediction:
    """Everything predicted for one training job."""

    model: TransformerConfig
    config: TrainingConfig
    target: Target
    cost_model: str
    iteration_s: float
    closed_form_iteration_s: float
    breakdown_s: dict[str, float]
    bubble_closed_form_s: float
    memory: dict[str, float]
    fits: bool
    fit_reason: str
    model_flops: float
    hardware_flops: float
    placement: dict[str, str]
    sim: SimResult | None = None
    ops: pd.DataFrame | None = field(default=None, repr=False)
    #: 80% interval of ``iteration_s`` (a cost model with intervals for every op only; see predict_training)
    iteration_s_low: float | None = None
    iteration_s_high: float | None = None
    #: warnings about the job itself (:func:`job_notes`: a sequence past a learned position table, TP above the
    #: KV heads)
    notes: list[str] = field(default_factory=list)
    #: microbatches in ``sim`` (and a trace of it): fewer than the job's past
    #: :data:`~hybrid.workloads.llm.schedule.ENGINE_MAX_MICROBATCHES`, whose steady state is extended exactly
    simulated_microbatches: int | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.config.global_batch * self.config.seq(self.model) / self.iteration_s

    @property
    def mfu(self) -> float:
        return self.model_flops / (self.iteration_s * self.config.gpus * self.target.peak_flops)

    @property
    def hfu(self) -> float:
        return self.hardware_flops / (self.iteration_s * self.config.gpus * self.target.peak_flops)

    @property
    def mfu_causal(self) -> float:
        """MFU with model FLOPs that count only the causal half of the attention scores (what causal kernels
        compute): the Megatron convention of :attr:`mfu` counts the full s x s, which can put it above 100%."""
        s = self.config.seq(self.model)
        full = self.model.forward_flops_per_token(s, causal_skip=False)
        causal = self.model.forward_flops_per_token(s, causal_skip=True)
        return self.mfu * (causal / full if full > 0 else 1.0)

    def summary(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "model": self.model.name, "params_b": round(self.model.num_params / 1e9, 3),
            "system": self.target.system, "device": self.target.device, "gpus": cfg.gpus,
            "tp": cfg.tp, "pp": cfg.pp, "dp": cfg.dp, "cp": cfg.cp, "ep": cfg.ep, "vp": cfg.vp,
            "micro_batch": cfg.micro_batch, "global_batch": cfg.global_batch, "seq_length": cfg.seq(self.model),
            "num_microbatches": cfg.num_microbatches, "sp": cfg.sp, "recompute": cfg.recompute,
            "distributed_optimizer": cfg.distributed_optimizer, "fsdp": cfg.fsdp, "dtype": cfg.dtype,
            "flash_attention": cfg.flash_attention, "softmax": cfg.softmax,
            "dropout": cfg.uses_dropout(self.model), "dropout_from": cfg.dropout_source(), "cost_model": self.cost_model,
            "iteration_s": self.iteration_s, "closed_form_iteration_s": self.closed_form_iteration_s,
            "tokens_per_s": self.tokens_per_s, "tokens_per_s_per_gpu": self.tokens_per_s / cfg.gpus,
            "mfu": self.mfu, "hfu": self.hfu, "mfu_causal": self.mfu_causal, "flops_formula": FLOP_FORMULA,
            "model_tflops_per_gpu": self.model_flops / self.iteration_s / cfg.gpus / 1e12,
            "breakdown_s": self.breakdown_s, "bubble_closed_form_s": self.bubble_closed_form_s,
            "memory_gib_per_rank": self.memory["total"], "memory_breakdown_gib": self.memory,
            "fits": self.fits, "fit_reason": self.fit_reason, "placement": self.placement,
            **self.interval(), **({"notes": list(self.notes)} if self.notes else {}),
        }

    def interval(self) -> dict[str, Any]:
        """``iteration_s_low`` / ``iteration_s_high`` (op costs at their interval's ends) and the end-to-end interval
        ``iteration_s_e2e_low`` / ``_e2e_high`` (widened by the packaged form-error margin of training runs,
        :mod:`hybrid.engine.form_error`); empty without a calibrated predictor's intervals."""
        if self.iteration_s_low is None or self.iteration_s_high is None:
            return {}
        out = {"iteration_s_low": self.iteration_s_low, "iteration_s_high": self.iteration_s_high}
        return {**out, **e2e_interval({**out, "iteration_s": self.iteration_s}, "training")}  # the point stays in


def placement(cfg: TrainingConfig, tgt: Target) -> dict[str, str]:
    """Where each group's collectives run (rank order tp-cp-dp-pp)."""
    from hybrid.workloads.llm.config import group_nodes

    g = tgt.gpus_per_node

    def where(size: int, stride: int, what: str = "") -> str:
        if size <= 1:
            return "none"
        nodes = group_nodes(size, stride, g, cfg.gpus)
        return (f"{size} ranks{what}, "
                f"{'1 node (' + tgt.system + ' intra-node fabric)' if nodes == 1 else f'{nodes} nodes (NICs)'}")

    # gradients are reduced over DP x CP (the CP ranks hold the same weights)
    return {"tp": where(cfg.tp, 1), "cp": where(cfg.cp, cfg.tp),
            "dp": where(cfg.dp * cfg.cp, cfg.tp, " (DP x CP)" if cfg.cp > 1 else ""),
            "pp": "none" if cfg.pp == 1 else ("across nodes" if group_nodes(cfg.pp, cfg.tp * cfg.cp * cfg.dp, g, cfg.gpus)
                                              > 1 else "inside a node"),
            "ep": where(cfg.ep, cfg.tp * cfg.cp)}


def _cost_model(cost_model: OpCostModel | None, cfg: TrainingConfig) -> OpCostModel:
    """The model ops are costed with: the default (roofline) one when None, asked for kernel times unless the
    configuration is eager (:attr:`TrainingConfig.kernel_times`)."""
    cm = cost_model if cost_model is not None else default_cost_model()
    return KernelTimeModel(cm, learned_dispatch=True) if cfg.kernel_times else cm


def _prepare(model: TransformerConfig, cfg: TrainingConfig, system: str,
             cost_model: OpCostModel | None, comm_system: str | None = None
             ) -> tuple[OpCostModel, Target, list[str]]:
    """(cost model, target, notes on the cluster): a single-node system asked for several nodes is refused."""
    cfg.validate_for(model)
    cm = _cost_model(cost_model, cfg)
    cat = model_catalog(cm)
    tgt = resolve_target(system, cat, cfg.dtype, comm_system, cfg.gpus)
    if cfg.tp > tgt.gpus_per_node:
        raise InvalidInputError(f"tensor parallel size {cfg.tp} exceeds the {tgt.gpus_per_node} GPUs of one "
                                f"{tgt.system} node")
    return cm, tgt, target_notes(cat, tgt, cfg)


def target_notes(catalog: Any, tgt: Target, cfg: TrainingConfig) -> list[str]:
    """Warnings about where a job of ``cfg`` runs: a bare CPU's collectives (``tgt.comm_note``), a dtype the GPU has
    no units for (bf16 before Ampere: costed at the fp32 peak, :meth:`~hybrid.hardware.device.Device.slow_dtype_note`,
    as inference says it) and the cluster's (:func:`~hybrid.ops.roofline.cluster_notes`, which refuses several nodes
    of a single-node system)."""
    slow = catalog.device(tgt.device).slow_dtype_note(cfg.dtype)
    return ([tgt.comm_note] * bool(tgt.comm_note) + [slow] * bool(slow)
            + cluster_notes(catalog, tgt.system, cfg.gpus, tgt.gpus_per_node, tgt.device))


def job_notes(model: TransformerConfig, cfg: TrainingConfig) -> list[str]:
    """Warnings about the job itself: a sequence past a learned position table
    (:meth:`TransformerConfig.position_note`), TP above the KV heads (:func:`kv_replication_note`), selective
    recomputation with FlashAttention (nothing to recompute), expert beside tensor parallelism without SP
    (Megatron-core refuses it; :func:`candidate_mappings` leaves it out)."""
    selective = ("selective recomputation with FlashAttention changes nothing: the s x s attention scores it would "
                 "recompute are never stored (FlashAttention's backward recomputes them anyway), so memory and time "
                 "are those of --recompute none; Korthikanti et al.'s selective saving is for unfused attention "
                 "(--no-flash-attention)") if cfg.recompute == "selective" and cfg.flash_attention else ""
    ep_sp = ("Megatron-core refuses expert parallelism beside tensor parallelism without sequence parallelism "
             f"(ep {cfg.ep}, tp {cfg.tp}): add --sp (costed as given)"
             if model.is_moe and cfg.ep > 1 and cfg.tp > 1 and not cfg.sp else "")
    return [n for n in (model.position_note(cfg.seq(model)), kv_replication_note(model, cfg.tp), selective, ep_sp)
            if n]


def memory_only(model: TransformerConfig, cfg: TrainingConfig, system: str, catalog: Any = None
                ) -> tuple[MemoryBreakdown, Target]:
    """Memory per rank of one job (no costing)."""
    from hybrid.hardware.catalog import default_catalog
    from hybrid.workloads.llm.costing import stage_params

    cfg.validate_for(model)
    tgt = resolve_target(system, catalog or default_catalog(), cfg.dtype)
    m = mappings_frame(cfg)
    return memory_per_rank(model, cfg, m, stage_params(model, cfg, m), tgt.mem_capacity), tgt


def memory_remedies(model: TransformerConfig, cfg: TrainingConfig, system: str, catalog: Any = None
                    ) -> list[dict[str, Any]]:
    """For a job that does not fit: the changes of its own memory knobs (same GPUs, TP, PP, CP and EP) that make it
    fit, each alone, in the order they usually cost time (sequence parallelism, the distributed optimizer, micro-batch
    1, selective recomputation, FSDP, full recomputation), else all of them together; each as
    ``{"flags": CLI flags, "memory_gib": per GPU}``. Empty when the job fits or nothing of these makes it fit (more
    GPUs or another mapping: ``hybrid llm search``). One vectorised memory evaluation."""
    from hybrid.hardware.catalog import default_catalog
    from hybrid.workloads.llm.costing import stage_params

    cfg.validate_for(model)
    tgt = resolve_target(system, catalog or default_catalog(), cfg.dtype)
    base = mappings_frame(cfg).iloc[0].to_dict()
    sharded = cfg.dp * cfg.cp > 1
    options: list[tuple[str, dict[str, Any]]] = []
    if cfg.tp > 1 and not cfg.sp and (cfg.seq(model) // cfg.cp) % cfg.tp == 0:
        options.append(("--sp", {"sp": True}))
    if sharded and not (cfg.distributed_optimizer or cfg.fsdp):
        options.append(("--distributed-optimizer", {"distopt": True}))
    if cfg.micro_batch > 1:
        options.append(("--micro-batch 1", {"mb": 1}))
    if cfg.recompute == "none" and not cfg.flash_attention:  # FlashAttention stores no scores: selective = none
        options.append(("--recompute selective", {"recompute": "selective"}))
    if sharded and not cfg.fsdp:  # the two are exclusive: a job with the distributed optimizer must drop it
        options.append(("--fsdp (dropping --distributed-optimizer)" if cfg.distributed_optimizer else "--fsdp",
                        {"fsdp": True, "distopt": False}))
    if cfg.recompute != "full":
        options.append(("--recompute full", {"recompute": "full"}))
    if not options:
        return []
    rows = [{**base, **ch} for _, ch in options]
    if len(options) > 1:  # all together: later changes win (FSDP over the distributed optimizer, full over selective)
        together: dict[str, Any] = {}
        for _, ch in options:
            together.update(ch)
        flags = [f for f, _ in options if not (f == "--distributed-optimizer" and together.get("fsdp"))
                 and not (f == "--recompute selective" and together.get("recompute") == "full")]
        rows.append({**base, **together})
        options.append((" ".join(flags), together))
    rows.append(base)  # the job itself, last
    frame = pd.DataFrame(rows)
    mem = memory_per_rank(model, cfg, frame, stage_params(model, cfg, frame), tgt.mem_capacity)
    if mem.fits[-1]:
        return []
    fits = [{"flags": f, "memory_gib": float(mem.total[i]) / GIB} for i, (f, _) in enumerate(options) if mem.fits[i]]
    n_single = len(options) - 1 if len(options) > 1 else 1
    singles = [r for r in fits if r["flags"] in {f for f, _ in options[:n_single]}]
    return singles or fits


def predict_training(model: TransformerConfig, cfg: TrainingConfig, system: str,
                     cost_model: OpCostModel | None = None, cost_model_name: str = "roofline",
                     engine: bool = True, comm_system: str | None = None) -> TrainingPrediction:
    """Predict one training iteration of ``model`` under ``cfg`` on ``system`` (collectives costed as on
    ``comm_system`` when given: a measured cluster of the same node type).

    With a cost model that gives 80% intervals for every op (a calibrated predictor), ``iteration_s_low`` /
    ``iteration_s_high`` are set as :func:`search` computes them: the closed form re-run with every op at the low
    / high end of its interval (the ends move together), clipped at the closed-form centre; on the engine the
    iteration is scaled by the same ratios (end / closed-form centre), so without the engine they are exactly the
    search's numbers."""
    cm, tgt, cluster = _prepare(model, cfg, system, cost_model, comm_system)
    m = mappings_frame(cfg)
    costs = cost_mappings(model, cfg, m, tgt, cm)
    st = stage_times(model, cfg, costs)
    cf = closed_form(st, costs.mappings, cfg)
    mem = memory_per_rank(model, cfg, costs.mappings, costs.params, tgt.mem_capacity)
    sim = None
    simulated = None
    if engine:
        sim, fig = simulate_mapping(st, 0, costs.mappings, cfg)
        iteration, pipeline = fig["iteration_s"], fig["pipeline_s"]
        simulated = int(fig["simulated_microbatches"])
    else:
        iteration, pipeline = float(cf["iteration_s"][0]), float(cf["pipeline_s"][0])
    n = float(st.n_micro[0])
    lps = float(st.layers_per_chunk[0] * cfg.vp)
    pp = cfg.pp
    # time the busiest stage spends per part (first stage with the embedding, last with the head)
    first_extra = float(st.embed_f[0] + st.embed_b[0])
    last_extra = float(st.head_f[0] + st.head_b[0])
    extra = first_extra + last_extra if pp == 1 else max(first_extra, last_extra)
    compute = n * (lps * float(st.compute_f[0] + st.compute_b[0]) + extra)
    tp = n * lps * float(st.tp_exposed[0])
    ep = n * lps * float(st.ep_exposed[0])
    cpx = n * lps * float(st.cp_exposed[0])
    fsdp_mb = n * lps * float(st.fsdp_exposed[0])  # per-microbatch gathers / reduce-scatters (no PP)
    busy = compute + tp + ep + cpx + fsdp_mb
    bubble = max(0.0, pipeline - busy)
    tail = iteration - pipeline
    opt = float(st.optimizer[0])
    emb = float(st.emb_sync[0]) if pp > 1 else 0.0
    fsdp_tail = float(st.fsdp_tail[0])  # the embedding's and, with PP, the stage's once-per-step FSDP comm
    breakdown = {"compute": compute, "tp_comm": tp, "ep_comm": ep, "cp_comm": cpx, "fsdp_comm": fsdp_mb + fsdp_tail,
                 "pipeline_bubble": bubble, "dp_comm": max(0.0, tail - opt - emb - fsdp_tail),
                 "embedding_sync": emb, "optimizer": opt}
    # differences of the simulated times leave float residue (1e-16 s) where a part is absent (pp = 1, dp = 1)
    breakdown = {k: 0.0 if abs(v) <= 1e-12 * iteration else v for k, v in breakdown.items()}
    mf, hf = model_flops(model, cfg)
    it_low = it_high = None
    low, high = costs.at("low"), costs.at("high")
    if low is not None and high is not None:
        centre = float(cf["iteration_s"][0])
        lo = float(closed_form(stage_times(model, cfg, low), costs.mappings, cfg)["iteration_s"][0])
        hi = float(closed_form(stage_times(model, cfg, high), costs.mappings, cfg)["iteration_s"][0])
        it_low = iteration * min(lo, centre) / centre
        it_high = iteration * max(hi, centre) / centre
    return TrainingPrediction(
        model=model, config=cfg, target=tgt, cost_model=cost_model_name, iteration_s=iteration,
        closed_form_iteration_s=float(cf["iteration_s"][0]), breakdown_s=breakdown,
        bubble_closed_form_s=float(cf["bubble_closed_form_s"][0] * n / max(n, 1)),
        memory=mem.row(0), fits=bool(mem.fits[0]), fit_reason=mem.reason(0), model_flops=mf, hardware_flops=hf,
        placement=placement(cfg, tgt), sim=sim, ops=costs.ops, iteration_s_low=it_low, iteration_s_high=it_high,
        notes=job_notes(model, cfg) + cluster, simulated_microbatches=simulated)


# ============================================================================================== search
def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidate_mappings(model: TransformerConfig, base: TrainingConfig, tgt: Target,
                       micro_batches: tuple[int, ...] = (1, 2, 4, 8), max_vp: int = 8,
                       recompute: tuple[str, ...] = ("none", "selective", "full"), max_cp: int = 8,
                       fsdp: bool = True, expert_parallel: bool = True) -> pd.DataFrame:
    """Every valid (tp, pp, cp, dp, ep, mb, vp, recompute, sp, distributed optimizer or FSDP) for ``base.gpus``
    GPUs, built as one cartesian product filtered with array masks.

    CP: degrees up to ``max_cp`` dividing the GPUs with the sequence divisible by 2 x CP (load-balanced causal
    ring), FlashAttention only (1 disables CP). EP: MoE models only, degrees dividing the number of experts and
    the DP x CP group (the ranks experts are spread over, as ``train`` checks), with SP where TP > 1 too (as
    Megatron-core requires). Optimizer states: replicated,
    the distributed optimizer (ZeRO-1) or, with ``fsdp``, FSDP / ZeRO-3 (both need DP x CP > 1: they shard over
    the data-parallel group with context parallelism).
    """
    G = base.gpus
    L = model.num_layers
    s = base.seq(model)
    if max_cp < 1:
        raise InvalidInputError(f"max CP must be a positive integer, got {max_cp}")
    bad = [b for b in micro_batches if isinstance(b, bool) or not isinstance(b, int | np.integer) or b < 1]
    if bad or not len(micro_batches):
        raise InvalidInputError(f"micro batches must be positive integers, got {list(micro_batches)!r}")
    if base.flash_attention:  # FlashAttention never stores the scores: selective = none, in time and memory
        recompute = tuple(r for r in recompute if r != "selective") or ("none",)
    divs = _divisors(G)
    tps = [t for t in divs if t <= tgt.gpus_per_node and model.num_attention_heads % t == 0
           and (model.num_kv_heads % t == 0 or t % model.num_kv_heads == 0)]
    cps = [1] + ([c for c in divs if 1 < c <= max_cp and s % (2 * c) == 0] if base.flash_attention else [])
    pps = [p for p in divs if L % p == 0] if not model.encoder_only else [1]  # PP: decoder models only
    eps = _divisors(int(model.num_experts)) if (model.is_moe and expert_parallel) else [1]
    vps = list(range(1, max(max_vp, 1) + 1))
    opts = ("none", "distopt", "fsdp") if fsdp else ("none", "distopt")
    # nesting order tp, pp, mb, vp, recompute, sp, optimizer (the CP = EP = 1, no-FSDP rows keep their order)
    grid = pd.MultiIndex.from_product([tps, pps, cps, list(micro_batches), vps, list(recompute), [False, True],
                                       list(opts), eps],
                                      names=["tp", "pp", "cp", "mb", "vp", "recompute", "sp", "opt", "ep"]
                                      ).to_frame(index=False)
    t, p, c, mb, v, e = (grid[k].to_numpy(np.int64) for k in ("tp", "pp", "cp", "mb", "vp", "ep"))
    sp = grid["sp"].to_numpy(bool)
    opt = grid["opt"].to_numpy(dtype=object)
    ok = G % (t * p * c) == 0
    d = np.where(ok, G // np.maximum(t * p * c, 1), 1)
    ok &= base.global_batch % (mb * d) == 0
    nm = base.global_batch // (mb * d)
    ok &= (v == 1) | ((p > 1) & (L % (p * v) == 0) & (nm % p == 0))
    ok &= ~sp | ((t > 1) & ((s // c) % t == 0))  # SP splits each CP rank's tokens over TP
    # the distributed optimizer and FSDP shard over the DP x CP group (Megatron-Core's data-parallel group with
    # context parallelism; memory_per_rank and the gradient collectives count it so): CP ranks alone shard too
    ok &= (opt == "none") | (d * c > 1)
    ok &= (d * c) % e == 0
    # Megatron-core refuses expert parallelism beside tensor parallelism without SP (ModelParallelConfig:
    # "When using expert parallelism and tensor parallelism, sequence parallelism must be used")
    ok &= ~((e > 1) & (t > 1) & ~sp)
    if not ok.any():
        # TP = PP = CP = 1, VP 1, no SP, replicated optimizer and EP 1 are always candidates, so only the batch split
        # can leave nothing: say which data-parallel degrees the GPUs allow and why
        dps = sorted({int(x) for x in d[G % (t * p * c) == 0]})
        raise InvalidInputError(
            f"no valid mapping of {model.name} on {G} GPUs with global batch {base.global_batch}: the splits leave "
            f"data-parallel degrees {dps} (TP from {tps}: dividing the {model.num_attention_heads} heads and at most "
            f"the {tgt.gpus_per_node} GPUs of a node; PP from {pps}: dividing the {L} layers; CP from {cps}), and "
            f"the global batch is not a multiple of micro-batch x DP for any of them (micro-batches "
            f"{sorted(int(b) for b in micro_batches)}); choose a global batch that is, or another GPU count")
    g = grid[ok]
    out = pd.DataFrame({"tp": g["tp"].to_numpy(np.int64), "pp": g["pp"].to_numpy(np.int64), "dp": d[ok],
                        "cp": g["cp"].to_numpy(np.int64), "ep": g["ep"].to_numpy(np.int64),
                        "vp": g["vp"].to_numpy(np.int64), "mb": g["mb"].to_numpy(np.int64),
                        "sp": g["sp"].to_numpy(bool), "recompute": g["recompute"].to_numpy(dtype=object),
                        "distopt": (g["opt"] == "distopt").to_numpy(), "fsdp": (g["opt"] == "fsdp").to_numpy()})
    return out


def search(model: TransformerConfig, base: TrainingConfig, system: str, cost_model: OpCostModel | None = None,
           top: int = 10, engine_top: int = 5, comm_system: str | None = None, **space: Any) -> pd.DataFrame:
    """All fitting mappings, fastest first. Every candidate of :func:`candidate_mappings` (``space``: its
    ``micro_batches``, ``max_vp``, ``recompute``, ``max_cp``, ``fsdp``, ``expert_parallel``) is costed in one
    predictor call and timed by the closed form (vectorised); the ``engine_top`` fastest are re-timed on the
    engine (column ``engine_s``).

    With a cost model that gives 80% intervals for every op (a calibrated predictor), each mapping also gets
    ``iteration_s_low`` / ``iteration_s_high`` (the closed form with every op at the low / high end of its
    interval: the ends move together, as in the engine) and ``overlaps_fastest``: whether its interval overlaps
    the fastest mapping's, i.e. the model cannot tell the two apart at that confidence (False for the fastest
    itself); ``attrs["overlapping_fastest"]`` counts them among the returned rows."""
    import inspect

    known = [p for p in inspect.signature(candidate_mappings).parameters if p not in ("model", "base", "tgt")]
    unknown = sorted(set(space) - set(known))
    if unknown:
        raise InvalidInputError(f"search: unknown search-space option(s) {', '.join(unknown)} (known: "
                                f"{', '.join(known)})")
    for name, value in (("top", top), ("engine_top", engine_top)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < (1 if name == "top" else 0):
            raise InvalidInputError(f"search: {name} must be a {'positive' if name == 'top' else 'non-negative'} "
                                    f"integer, got {value!r}")
    cm = _cost_model(cost_model, base)
    cat = model_catalog(cm)
    tgt = resolve_target(system, cat, base.dtype, comm_system, base.gpus)
    cluster = target_notes(cat, tgt, base)  # refuses what cannot be
    cand = candidate_mappings(model, base, tgt, **space)
    costs = cost_mappings(model, base, cand, tgt, cm)
    st = stage_times(model, base, costs)
    cf = closed_form(st, costs.mappings, base)
    mem = memory_per_rank(model, base, costs.mappings, costs.params, tgt.mem_capacity)
    out = costs.mappings.copy()
    out["iteration_s"] = cf["iteration_s"]
    low, high = costs.at("low"), costs.at("high")
    if low is not None and high is not None:
        # (a max() in the schedule, exposed communication, say, can make an end cross the centre: clipped)
        lo = closed_form(stage_times(model, base, low), costs.mappings, base)["iteration_s"]
        hi = closed_form(stage_times(model, base, high), costs.mappings, base)["iteration_s"]
        out["iteration_s_low"] = np.minimum(lo, out["iteration_s"])
        out["iteration_s_high"] = np.maximum(hi, out["iteration_s"])
    out["bubble_s"] = cf["bubble_s"]
    out["memory_gib"] = mem.total / GIB
    out["fits"] = mem.fits
    s = base.seq(model)
    out["tokens_per_s_per_gpu"] = base.global_batch * s / out["iteration_s"] / base.gpus
    mf = 3.0 * model.forward_flops_per_token(s) * base.global_batch * s
    out["mfu"] = mf / (out["iteration_s"] * base.gpus * tgt.peak_flops)
    fit = out[out["fits"]].sort_values("iteration_s", kind="stable")
    if fit.empty:
        best = out.sort_values("memory_gib").iloc[0]
        raise InvalidInputError(f"no mapping fits in {tgt.mem_capacity / GIB:.0f} GiB per GPU (smallest needs "
                                f"{best['memory_gib']:.1f} GiB: tp {best['tp']}, pp {best['pp']}, cp {best['cp']}, "
                                f"dp {best['dp']}, ep {best['ep']}, micro-batch {best['mb']}, "
                                f"recompute {best['recompute']}, optimizer states "
                                f"{'FSDP' if best['fsdp'] else 'distributed' if best['distopt'] else 'replicated'})")
    fit = fit.head(max(top, engine_top)).copy()
    eng = np.full(len(fit), np.nan)
    for j, i in enumerate(fit.index[:engine_top]):
        cfg_i = mapping_config(base, fit.loc[i])
        _, fig = simulate_mapping(st, int(i), costs.mappings, cfg_i)
        eng[j] = fig["iteration_s"]
    fit["engine_s"] = eng
    fit.attrs["n_candidates"] = len(out)
    fit.attrs["n_fit"] = int(out["fits"].sum())
    fit.attrs["n_predicted_ops"] = costs.n_predicted
    fit.attrs["notes"] = cluster
    fit = fit.head(top).reset_index(drop=True)
    if "iteration_s_low" in fit.columns:
        b_lo, b_hi = float(fit["iteration_s_low"].iloc[0]), float(fit["iteration_s_high"].iloc[0])
        overlap = (fit["iteration_s_low"].to_numpy() <= b_hi) & (fit["iteration_s_high"].to_numpy() >= b_lo)
        overlap[0] = False
        fit["overlaps_fastest"] = overlap
        fit.attrs["overlapping_fastest"] = int(overlap.sum())
    return fit


def search_base(gpus: int, global_batch: int, **knobs: Any) -> TrainingConfig:
    """A base config for :func:`search` (its own mapping is a placeholder: all GPUs in one model-parallel group,
    so any global batch is valid; the search replaces tp/pp/cp/dp/ep/mb/vp/recompute/SP/optimizer/FSDP)."""
    return TrainingConfig(gpus=gpus, global_batch=global_batch, tp=gpus, **knobs)


def mapping_config(base: TrainingConfig, row: Any) -> TrainingConfig:
    """``base`` with the mapping of a search row."""
    gpus = int(row["tp"]) * int(row["pp"]) * int(row["dp"]) * int(row["cp"])
    return base.with_(gpus=gpus, tp=int(row["tp"]), pp=int(row["pp"]), cp=int(row["cp"]), ep=int(row["ep"]),
                      vp=int(row["vp"]), micro_batch=int(row["mb"]), sp=bool(row["sp"]),
                      recompute=str(row["recompute"]), distributed_optimizer=bool(row["distopt"]),
                      fsdp=bool(row["fsdp"]))
