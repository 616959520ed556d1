"""From per-layer costs to an iteration: exposed communication, the pipeline schedule on the engine, the tail.

Per layer and microbatch on one rank (seconds)::

    fwd = compute_fwd + exposed TP comm + MoE all-to-all + exposed CP exchange
    bwd = compute_bwd + exposed TP comm + all-to-all + CP + recompute (selective: the re-run core attention
          ops of unfused attention; with FlashAttention nothing, its backward already recomputes the scores;
          full: the whole forward again, its TP comm included)

TP comm is exposed (Megatron runs it on the compute stream) unless ``tp_comm_overlap``, where it hides behind
the layer's GEMMs (``max(0, comm - gemm)``). CP's ring exchange overlaps with attention compute. FSDP gathers
the next layer's parameters while this one computes (``overlap_param_gather``): a layer lasts
``max(compute, gather)``; backward adds the re-gather and the gradient reduce-scatter, every microbatch. With
pipeline parallelism FSDP gathers once per step and keeps the stage unsharded (torchtitan's default
``fsdp_reshard_after_forward`` with PP; PyTorch's pipeline schedules accumulate unsharded gradients and
reduce-scatter them once, after the last backward): the gathers exposed in the first forward and that one
reduce-scatter join the tail.

The pipeline runs on :mod:`hybrid.engine` with one rank per stage (DP/TP ranks of a stage are symmetric): each
rank's compute stream runs its 1F1B or interleaved order of (chunk, microbatch) forward/backward nodes (first
stage's first chunk with the embedding, last stage's last chunk with the output layer and loss); activations
and gradients travel as send nodes between neighbouring stages; the DP gradient reduction of each chunk goes on
a separate stream in per-layer buckets behind the chunk's last backward (``overlap_grad_reduce``) or after the
pipeline flush; then the tied-embedding all-reduce (first/last stage), the optimizer step and (distributed
optimizer without ``overlap_param_gather``) the parameter all-gather. The closed-form bubble
``(pp - 1) / vp x (t_f + t_b)`` of a stage's layers plus the lighter end's embedding or output layer
(:func:`closed_form`) is reported beside the engine's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from hybrid.engine.graph import TaskGraph
from hybrid.engine.simulate import SimResult, simulate_durations
from hybrid.workloads.llm.config import TrainingConfig
from hybrid.workloads.llm.costing import MappingCosts
from hybrid.workloads.llm.model import TransformerConfig

#: Megatron-LM caps gradient buckets; a bucket per layer is close to its 40M-parameter default for large layers.
MAX_BUCKETS_PER_CHUNK = 8
#: Microbatches the engine simulates one by one; beyond, :func:`simulate_mapping` extends the steady state exactly.
ENGINE_MAX_MICROBATCHES = 256


@dataclass
class StageTimes:
    """Per-mapping times (seconds, arrays)."""

    layer_f: np.ndarray
    layer_b: np.ndarray
    compute_f: np.ndarray  # pure compute per layer (no comm)
    compute_b: np.ndarray  # incl. recompute compute
    tp_exposed: np.ndarray  # per layer, fwd + bwd (+ recompute)
    ep_exposed: np.ndarray
    cp_exposed: np.ndarray
    fsdp_exposed: np.ndarray
    embed_f: np.ndarray
    embed_b: np.ndarray
    head_f: np.ndarray
    head_b: np.ndarray
    p2p: np.ndarray
    dp_reduce: np.ndarray  # gradient reduce (all-reduce or reduce-scatter) of the whole stage
    dp_gather: np.ndarray  # distributed-optimizer parameter all-gather
    emb_sync: np.ndarray
    optimizer: np.ndarray
    #: FSDP: the embedding's gather/reduce and the last layer's reduce-scatter; with PP, the stage's gathers
    #: exposed in the first forward and its one gradient reduce-scatter after the last backward
    fsdp_tail: np.ndarray
    n_micro: np.ndarray
    layers_per_chunk: np.ndarray


def stage_times(model: TransformerConfig, cfg: TrainingConfig, c: MappingCosts) -> StageTimes:
    m = c.mappings
    L = c.layer
    S = c.stage
    rc = m["recompute"].to_numpy(dtype=object).astype(str)
    fsdp = m["fsdp"].to_numpy(bool)
    pp = m["pp"].to_numpy(np.int64)
    vp = m["vp"].to_numpy(np.int64)
    dp = m["dp"].to_numpy(np.int64)
    mb = m["mb"].to_numpy(np.int64)
    tpf, tpb = L["tpf"], L["tpb"]
    if cfg.tp_comm_overlap:
        tpf = np.maximum(0.0, tpf - L["gemm_f"])
        tpb = np.maximum(0.0, tpb - L["gemm_b"])
    tpb = tpb + L["spgb"]  # SP: the weight gradients' input all-gather beyond the data-gradient GEMM it hides behind
    # the ring (global layers) hides behind the attention blocks; the all-gather of windowed / chunked layers does not
    cpf = np.maximum(0.0, L["cpf"] - L["attn_f"]) + L["cpgf"]
    cpb = np.maximum(0.0, L["cpb"] - L["attn_b"]) + L["cpgb"]
    fwd_compute = L["f"]
    fwd = fwd_compute + tpf + L["epf"] + cpf
    recomp_compute = np.where(rc == "full", fwd_compute, np.where(rc == "selective", L["s"], 0.0))
    recomp_comm = np.where(rc == "full", fwd - fwd_compute, 0.0)
    bwd_compute = L["b"] + recomp_compute
    bwd = bwd_compute + tpb + L["epb"] + cpb + recomp_comm
    # FSDP per-layer gathers / reduce-scatters: every microbatch without PP (reshard after forward, re-gather in
    # backward); with PP once per step (torchtitan's default with PP: no reshard after forward, and PyTorch's
    # pipeline schedules accumulate unsharded gradients, reduce-scattering them after the last backward)
    ag, rs = S["fsdp_ag"], S["fsdp_rs"]
    if cfg.overlap_param_gather:
        fwd_f = np.maximum(fwd, ag)
        bwd_f = np.maximum(bwd, ag + rs)
    else:
        fwd_f = fwd + ag
        bwd_f = bwd + ag + rs
    per_micro = fsdp & (pp == 1)
    once = fsdp & (pp > 1)
    stage_layers = model.num_layers // pp
    fsdp_once = np.where(once, stage_layers * ((fwd_f - fwd) + rs), 0.0)  # first forward's gathers, the reduce
    fsdp_exposed = np.where(per_micro, (fwd_f - fwd) + (bwd_f - bwd), 0.0)
    fwd = np.where(per_micro, fwd_f, fwd)
    bwd = np.where(per_micro, bwd_f, bwd)
    return StageTimes(
        layer_f=fwd, layer_b=bwd, compute_f=fwd_compute, compute_b=bwd_compute,
        tp_exposed=tpf + tpb + np.where(rc == "full", tpf, 0.0), ep_exposed=L["epf"] + L["epb"] * 1.0
        + np.where(rc == "full", L["epf"], 0.0), cp_exposed=cpf + cpb + np.where(rc == "full", cpf, 0.0),
        fsdp_exposed=fsdp_exposed,
        embed_f=L["ef"], embed_b=L["eb"], head_f=L["hf"] + L["htpf"], head_b=L["hb"] + L["htpb"],
        p2p=S["p2p"], dp_reduce=S["dp_ar"] + S["dp_rs"], dp_gather=S["dp_ag"], emb_sync=S["emb_ar"],
        optimizer=S["opt"] + S.get("fp8w", 0.0), fsdp_tail=np.where(fsdp, S["fsdp_emb"] + np.where(once, fsdp_once, rs), 0.0),
        n_micro=cfg.global_batch // (mb * dp), layers_per_chunk=model.num_layers // (pp * vp),
    )


def dp_reduce_exposed(reduce_s: np.ndarray, chunk_bwd_s: np.ndarray, pp: np.ndarray, vp: np.ndarray,
                      buckets: np.ndarray) -> np.ndarray:
    """DP gradient reduction left after the pipeline's end with ``overlap_grad_reduce``, as the engine runs it:
    each of the ``vp`` model chunks reduces its ``reduce_s / vp`` in ``buckets`` pieces on one stream, bucket ``j``
    once the ``j``-th share of the chunk's last backward (``chunk_bwd_s``) is done. The first stage runs its
    cooldown backwards back to back, chunk ``vp - 1`` first and chunk 0 last, one chunk every ``pp`` backwards,
    so chunk ``c``'s last backward ends ``c x pp x chunk_bwd_s`` before the pipeline does: with interleaving the
    reduction of every chunk but the last overlaps the remaining backwards (the stage-wide bound
    ``reduce - stage backward`` held only for ``vp = 1``)."""
    nb = np.maximum(np.asarray(buckets, dtype=np.float64), 1.0)
    vp_ = np.asarray(vp, dtype=np.float64)
    piece = reduce_s / (vp_ * nb)
    end = np.full(np.shape(reduce_s), -np.inf)  # the reduce stream's end, relative to the pipeline's end
    for c in range(int(vp_.max()) - 1, -1, -1):  # chunks in the order their last backward finishes
        for j in range(int(nb.max())):
            on = (c < vp_) & (j < nb)
            ready = -c * pp * chunk_bwd_s - chunk_bwd_s + (j + 1) * chunk_bwd_s / nb
            end = np.where(on, np.maximum(end, ready) + piece, end)
    return np.maximum(end, 0.0)


def closed_form(st: StageTimes, m: Any, cfg: TrainingConfig) -> dict[str, np.ndarray]:
    """Iteration time per mapping without the engine: ``m x t_max + (pp - 1)/vp x t_body + min(e, h)`` + sends + tail.

    ``t_body`` is a stage's layers (the same on every stage), ``e`` and ``h`` the embedding's and the output layer's
    extra time on the first and last stage, ``t_max = t_body + max(e, h)`` the busiest stage's. The busiest end stage
    runs its ``m`` microbatches back to back; before and after them the first microbatch's forward and the last
    one's backward cross the other stages' layers (``(pp - 1)/vp`` stage bodies) and the lighter end's extra once.
    This is the engine's pipeline exactly (1F1B and interleaved, any ``m``, fewer microbatches than stages
    included) when the output layer's stage is the busier end, as with any real vocabulary (when the embedding's
    is, the first stage's 1F1B warm-up shifts it by well under 0.1%). The textbook ``(pp - 1)/vp x t_mean`` bubble
    (the mean stage, the ends spread over all) counted ``max(e, h) - (e + h)/pp`` too much (5% of llama3-8b at pp 4 with one
    microbatch: 0.529 against the engine's 0.504 s)."""
    pp = m["pp"].to_numpy(np.float64)
    vp = m["vp"].to_numpy(np.float64)
    distopt = m["distopt"].to_numpy(bool)
    n = st.n_micro.astype(np.float64)
    per_layer = st.layer_f + st.layer_b
    layers_stage = st.layers_per_chunk * vp
    body = layers_stage * per_layer
    extra_first = st.embed_f + st.embed_b
    extra_last = st.head_f + st.head_b
    t_max = np.where(pp > 1, body + np.maximum(extra_first, extra_last), body + extra_first + extra_last)
    # the idle time of the busiest stage: the other stages' layers on the first microbatch's way there and the last
    # one's way back, and the lighter end's embedding or output layer (the busier one is in t_max)
    idle = np.where(pp > 1, (pp - 1) / vp * body + np.minimum(extra_first, extra_last), 0.0)
    # the first microbatch's activations cross pp x vp - 1 stage boundaries on the way to the last chunk and its
    # gradients as many back, each a send on the critical path (2 (pp - 1) without interleaving)
    bubble = idle + np.where(pp > 1, 2 * (pp * vp - 1) * st.p2p, 0.0)
    pipeline = n * t_max + bubble
    # DP: overlapped with each chunk's last backward (all but its last bucket) when overlap_grad_reduce
    if cfg.overlap_grad_reduce:
        dp_exposed = dp_reduce_exposed(st.dp_reduce, st.layers_per_chunk * st.layer_b, pp, vp,
                                       np.minimum(st.layers_per_chunk, MAX_BUCKETS_PER_CHUNK))
    else:
        dp_exposed = st.dp_reduce
    dp_exposed = np.where(st.dp_reduce > 0, dp_exposed, 0.0)
    first_fwd = st.layers_per_chunk * st.layer_f
    gather = np.where(distopt, np.where(cfg.overlap_param_gather, np.maximum(0.0, st.dp_gather - first_fwd),
                                        st.dp_gather), 0.0)
    tail = dp_exposed + st.emb_sync + st.optimizer + gather + st.fsdp_tail
    return {"iteration_s": pipeline + tail, "pipeline_s": pipeline, "bubble_s": bubble,
            "bubble_closed_form_s": idle, "dp_exposed_s": dp_exposed, "gather_s": gather,
            "stage_max_s": t_max}


# ============================================================================================ engine schedule
def schedule_order(pp: int, vp: int, n_micro: int, rank: int) -> list[tuple[str, int, int]]:
    """Megatron-LM's order of (``"F"``/``"B"``, chunk, microbatch) on pipeline ``rank``."""
    if vp == 1:
        warm = min(pp - rank - 1, n_micro)
        order = [("F", 0, i) for i in range(warm)]
        for i in range(n_micro - warm):
            order += [("F", 0, warm + i), ("B", 0, i)]
        order += [("B", 0, i) for i in range(n_micro - warm, n_micro)]
        return order
    total = n_micro * vp

    def fwd(k: int) -> tuple[str, int, int]:
        return ("F", (k // pp) % vp, (k // (pp * vp)) * pp + k % pp)

    def bwd(k: int) -> tuple[str, int, int]:
        return ("B", vp - 1 - (k // pp) % vp, (k // (pp * vp)) * pp + k % pp)

    warm = min((pp - rank - 1) * 2 + (vp - 1) * pp, total)
    order = [fwd(k) for k in range(warm)]
    steady = total - warm
    for i in range(steady):
        order += [fwd(warm + i), bwd(i)]
    order += [bwd(k) for k in range(steady, total)]
    return order


def build_pipeline_graph(st: StageTimes, i: int, m: Any, cfg: TrainingConfig) -> tuple[TaskGraph, dict[str, Any]]:
    """The engine graph of mapping ``i``: one rank per pipeline stage."""
    pp = int(m["pp"].iloc[i])
    vp = int(m["vp"].iloc[i])
    distopt = bool(m["distopt"].iloc[i])
    n = int(st.n_micro[i])
    lpc = int(st.layers_per_chunk[i])
    us = 1e6
    lf, lb = st.layer_f[i] * lpc * us, st.layer_b[i] * lpc * us
    p2p = st.p2p[i] * us
    g = TaskGraph(pp)
    done: dict[tuple[str, int, int, int], int] = {}  # (kind, stage, chunk, mb) -> compute node
    sent: dict[tuple[str, int, int, int], int] = {}  # (kind, stage, chunk, mb) -> send node (to the consumer)
    orders = [schedule_order(pp, vp, n, r) for r in range(pp)]
    pos = [0] * pp
    n_buckets = max(1, min(lpc, MAX_BUCKETS_PER_CHUNK))
    dp_chunk = st.dp_reduce[i] * us / vp
    last_b_of_chunk = {(r, c): max(mb for k, cc, mb in orders[r] if k == "B" and cc == c) for r in range(pp)
                       for c in range(vp)}
    dp_nodes: dict[int, list[int]] = {r: [] for r in range(pp)}

    def dur(kind: str, r: int, c: int) -> float:
        d = lf if kind == "F" else lb
        if r == 0 and c == 0:
            d += (st.embed_f[i] if kind == "F" else st.embed_b[i]) * us
        if r == pp - 1 and c == vp - 1:
            d += (st.head_f[i] if kind == "F" else st.head_b[i]) * us
        return float(d)

    def producer(kind: str, r: int, c: int, mb: int) -> tuple[str, int, int, int] | None:
        if kind == "F":
            if r > 0:
                return ("F", r - 1, c, mb)
            return ("F", pp - 1, c - 1, mb) if c > 0 else None
        if r < pp - 1:
            return ("B", r + 1, c, mb)
        return ("B", 0, c + 1, mb) if c < vp - 1 else ("F", pp - 1, vp - 1, mb)

    # round-robin over ranks, adding each node once its producer exists (the schedule is deadlock-free)
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(pp):
            while pos[r] < len(orders[r]):
                kind, c, mb = orders[r][pos[r]]
                prod = producer(kind, r, c, mb)
                deps: list[int] = []
                if prod is not None:
                    same_rank = prod[1] == r
                    key = prod
                    if same_rank:
                        if key not in done:
                            break
                        deps.append(done[key])
                    else:
                        if key not in sent:
                            break
                        deps.append(sent[key])
                name = f"{'fwd' if kind == 'F' else 'bwd'} chunk {c} mb {mb}"
                final_b = kind == "B" and mb == last_b_of_chunk[(r, c)] and dp_chunk > 0
                if final_b and cfg.overlap_grad_reduce:
                    piece = dur(kind, r, c) / n_buckets
                    nid = None
                    for j in range(n_buckets):
                        nid = g.add(r, "compute", f"{name} part {j}", duration_us=piece,
                                    deps=deps if j == 0 else ())
                        dp_nodes[r].append(g.add(r, "dp", f"dp grad reduce chunk {c} bucket {j}",
                                                 duration_us=dp_chunk / n_buckets, deps=[nid], kind="comm"))
                    assert nid is not None
                else:
                    nid = g.add(r, "compute", name, duration_us=dur(kind, r, c), deps=deps)
                done[(kind, r, c, mb)] = nid
                # send to the consumer on another rank
                if kind == "F":
                    to = r + 1 if r < pp - 1 else (0 if c < vp - 1 else None)
                else:
                    to = r - 1 if r > 0 else (pp - 1 if c > 0 else None)
                if to is not None and to != r:
                    sent[(kind, r, c, mb)] = g.add(r, "send", f"send {name} -> stage {to}", duration_us=p2p,
                                                   deps=[nid], kind="comm")
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - the schedules above never deadlock
            raise RuntimeError("pipeline schedule deadlocked")
    pipe_end = {r: g.last(r, "compute") for r in range(pp)}
    if dp_chunk > 0 and not cfg.overlap_grad_reduce:
        for r in range(pp):
            dp_nodes[r].append(g.add(r, "dp", "dp grad reduce", duration_us=dp_chunk * vp, deps=[pipe_end[r]],
                                     kind="comm"))
    tail_deps = {r: [pipe_end[r], *dp_nodes[r][-1:]] for r in range(pp)}
    if pp > 1 and st.emb_sync[i] > 0:
        ids = g.collective("tied embedding grad all-reduce", [0, pp - 1], None, duration_us=st.emb_sync[i] * us,
                           deps={0: tail_deps[0], pp - 1: tail_deps[pp - 1]}, stream="dp", launch=False)
        for r, nid in ids.items():
            tail_deps[r] = [nid]
    if st.fsdp_tail[i] > 0:
        for r in range(pp):
            tail_deps[r] = [g.add(r, "dp", "fsdp embedding/last-layer comm", duration_us=st.fsdp_tail[i] * us,
                                  deps=tail_deps[r], kind="comm")]
    for r in range(pp):
        opt = g.add(r, "compute", "optimizer step", duration_us=st.optimizer[i] * us, deps=tail_deps[r])
        if distopt and st.dp_gather[i] > 0:
            gather = st.dp_gather[i] * us
            if cfg.overlap_param_gather:  # hidden behind the next iteration's first forward chunk
                gather = max(0.0, gather - lf)
            if gather > 0:
                g.add(r, "dp", "param all-gather (exposed)", duration_us=gather, deps=[opt], kind="comm")
    return g, {"pipe_end_nodes": pipe_end}


def _simulate(st: StageTimes, i: int, m: Any, cfg: TrainingConfig) -> tuple[SimResult, float, float]:
    g, info = build_pipeline_graph(st, i, m, cfg)
    compiled = g.compile()
    res = simulate_durations(compiled, compiled.fixed_us.copy())
    pipe_end = max(float(res.finish[nid]) for nid in info["pipe_end_nodes"].values()) * 1e-6
    return res, pipe_end, res.iteration_us * 1e-6


def simulate_mapping(st: StageTimes, i: int, m: Any, cfg: TrainingConfig,
                     max_microbatches: int = ENGINE_MAX_MICROBATCHES) -> tuple[SimResult, dict[str, float]]:
    """Engine simulation of mapping ``i``; returns the result and pipeline figures (seconds).

    Every microbatch is the same work, so past the warm-up the schedule repeats every ``pp`` microbatches (one
    microbatch without interleaving) and the iteration grows by the same time per period. Beyond
    ``max_microbatches`` the engine runs two shorter pipelines of ``n2 - pp`` and ``n2`` microbatches
    (``n2 <= max_microbatches``, as many periods short of ``n`` as it takes) and the iteration and pipeline end are
    extended by their difference per period (exact: the graph of every microbatch, 2 million of them for GPT-3
    at global batch 8M, took minutes and gigabytes to say the same). The result (and a trace of it) is then the
    ``n2``-microbatch pipeline's; figure ``simulated_microbatches`` says how many it ran."""
    n = int(st.n_micro[i])
    pp = int(m["pp"].iloc[i])
    step = max(pp, 1)
    cap = max(int(max_microbatches), 4 * step)
    if n <= cap:
        res, pipe, it = _simulate(st, i, m, cfg)
        return res, {"pipeline_s": pipe, "iteration_s": it, "simulated_microbatches": float(n)}
    n2 = n - ((n - cap) // step + (1 if (n - cap) % step else 0)) * step  # n2 <= cap, n2 = n (mod step)
    n1 = n2 - step
    short = replace(st, n_micro=np.array(st.n_micro, dtype=np.int64))
    short.n_micro[i] = n1
    _, pipe1, it1 = _simulate(short, i, m, cfg)
    short.n_micro[i] = n2
    res, pipe2, it2 = _simulate(short, i, m, cfg)
    periods = (n - n2) / step
    return res, {"pipeline_s": pipe2 + periods * (pipe2 - pipe1), "iteration_s": it2 + periods * (it2 - it1),
                 "simulated_microbatches": float(n2)}
