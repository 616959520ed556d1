"""Parallel modes of a single-device trace: data, tensor (Megatron) and pipeline parallelism as unit rewrites.

A trace of one device running the whole model becomes the per-rank work of an N-way parallel job by rewriting
its units (:func:`hybrid.workloads.trace_units.trace_units`) before the graph is built
(``build_trace_graph(..., transform=...)``) and, for data/tensor parallelism, replicating the trace over N ranks
(:func:`replicate`):

* **data parallel** (:func:`data_parallel`): each rank runs the trace (recorded at the per-rank batch); DDP
  all-reduces the gradients in buckets (25 MiB, the first 1 MiB) as backward produces them, read from the
  ``AccumulateGrad`` ops of the trace (gradient shapes);
* **tensor parallel** (:func:`tensor_parallel`, Megatron-LM style for GPT blocks): GEMMs whose non-token
  dimension is wider than the hidden size (QKV, MLP up, LM head) are split column-wise, the hidden x hidden
  projection and MLP down row-wise; attention batches (heads), softmax rows and the activations of the split
  layers shrink by N; ops on the replicated hidden state (layer norms, residual adds, dropout after a
  projection) stay whole; one all-reduce of the hidden state follows every row-parallel forward GEMM and
  every backward GEMM that produces a full activation gradient from a split one;
* **pipeline parallel** (:func:`pipeline_parallel`, one micro-batch): the stages run one after another, so the
  rank-0 timeline is the whole trace plus a point-to-point activation transfer at each of the N-1 stage
  boundaries in forward and in backward.

These rewrites use shapes only (the token count ``batch x seq`` and the hidden size), so they apply to any
trace of a transformer whose blocks use fused QKV (GPT-2 style); separate Q/K/V projections are split the same
way but their forward all-reduce count is then overstated (see docs/traces.md).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pandas as pd

from hybrid.data.traces.opmap import numel
from hybrid.data.traces.parse import PG_OP_RE, RankTrace
from hybrid.errors import InvalidInputError
from hybrid.units import DTYPE_BYTES
from hybrid.workloads.trace_units import VIEW_LABEL

DDP_BUCKET_BYTES = 25 * 2**20
DDP_FIRST_BUCKET_BYTES = 2**20


def replicate(trace: RankTrace, ranks: int) -> list[RankTrace]:
    """``ranks`` copies of one trace as ranks 0..N-1 of one job (default process group = all of them)."""
    if ranks < 1:
        raise InvalidInputError(f"ranks must be >= 1, got {ranks}")
    out = []
    for r in range(ranks):
        t = copy.copy(trace)
        t.rank, t.world_size = r, ranks
        t.process_groups = {"0": tuple(range(ranks))}
        out.append(t)
    return out


def _row_dtype(unit: pd.Series) -> str:
    """The dtype of a unit's op row (what its activations travel in); fp32 when the trace did not say."""
    row = unit["row"] if isinstance(unit["row"], dict) else {}
    dt = str(row.get("dtype") or "fp32")
    return dt if dt in DTYPE_BYTES else "fp32"


def _collective_unit(after: pd.Series, op: str, size: float, ranks: int, phase: str, name: str,
                     dtype: str = "fp32", blocking: bool = False) -> dict[str, Any]:
    """An inserted collective after unit ``after``: no traced host time, no recorded events. ``blocking``: the
    ops after it consume its result (a TP all-reduce of the hidden state, a pipeline transfer), so on a GPU their
    kernels wait for it; DDP's gradient buckets overlap the rest of backward (only the optimizer waits)."""
    return {"op_id": -1, "tid": after["tid"], "name": name, "ts": float(after["ts"] + after["dur"]) + 1e-3,
            "dur": 0.0, "kind": "collective", "label": "collective",
            "row": {"op": op, "size_bytes": int(max(size, 1)), "n_ranks": int(ranks), "dtype": dtype,
                    **({"blocking": True} if blocking else {})},
            "phase": phase, "pg": "0", "device_us": np.nan, "kstream": "", "n_events": 0, "n_inputs": 0,
            "n_launch": 0, "n_tf32": 0}


def _insert(units: pd.DataFrame, new: list[dict[str, Any]]) -> pd.DataFrame:
    if not new:
        return units
    out = pd.concat([units, pd.DataFrame(new, columns=units.columns)], ignore_index=True)
    return out.sort_values(["tid", "ts"], kind="stable").reset_index(drop=True)


def data_parallel(ranks: int, bucket_bytes: int = DDP_BUCKET_BYTES, first_bucket_bytes: int = DDP_FIRST_BUCKET_BYTES):
    """A ``transform`` adding DDP's bucketed gradient all-reduces (see the module docstring)."""

    def transform(trace: RankTrace, units: pd.DataFrame) -> pd.DataFrame:
        if ranks <= 1:
            return units
        ops = trace.ops
        names = ops["name"].astype(str)
        if names.str.startswith("DistributedDataParallel.forward").any() and (
                (units["kind"] == "collective") & (units["phase"] == "backward")).any():
            # a step recorded under DDP in a one-process group: its gradient all-reduces (DDP's own buckets, where
            # its reducer launched them) are in the trace, and replicated they run over the job's ranks; adding
            # modelled buckets beside them exchanged the gradients twice
            return units
        grads = ops[(names == "torch::autograd::AccumulateGrad")].sort_values("ts", kind="stable")
        new, pending, cap, last = [], 0.0, first_bucket_bytes, None
        for _, g in grads.iterrows():
            dims, types = g["dims"] or [], g["types"] or []
            eb = DTYPE_BYTES.get(next((t for t in types if t in DTYPE_BYTES), "fp32"), 4)
            pending += numel(dims[0]) * eb if dims else 0.0
            last = g
            if pending >= cap:
                new.append(_collective_unit(g, "all_reduce", pending, ranks, "backward", "DDP all_reduce bucket"))
                pending, cap = 0.0, bucket_bytes
        if pending > 0 and last is not None:
            new.append(_collective_unit(last, "all_reduce", pending, ranks, "backward", "DDP all_reduce bucket"))
        if not new:
            raise InvalidInputError(f"{trace.path}: no gradients (AccumulateGrad) in the trace: data parallelism "
                                    "needs a training step")
        return _insert(units, new)

    return transform


def tensor_parallel(ranks: int, tokens: int, hidden: int, local_collectives: bool = False):
    """A ``transform`` splitting a transformer's work Megatron-style over ``ranks`` (see the module docstring).
    ``local_collectives``: the trace's own collectives ran in a one-process group (a step recorded under DDP in
    one process): they exchanged nothing there, and a tensor-parallel job has no gradient all-reduce (each rank
    holds its own shard), so they are host time only. Replicated over the ranks as recorded they became
    all-reduces of the whole gradient across the tensor-parallel ranks (``transform.local_collectives``: how many
    were made host time, per rank)."""
    if ranks < 1 or tokens < 1 or hidden < 1:
        raise InvalidInputError("tensor_parallel needs positive ranks, tokens and hidden size")
    if hidden % ranks:
        raise InvalidInputError(f"tensor parallelism over {ranks} ranks splits the hidden size {hidden} (and the "
                                "heads): it must divide it")
    act_bytes = tokens * hidden  # elements of the hidden state

    def split_row(row: dict[str, Any], phase: str) -> tuple[dict[str, Any], bool]:
        """(per-rank row, whether an all-reduce of the hidden state follows)."""
        r = dict(row)
        op = r.get("op")
        if op in ("gemm", "bmm"):
            if int(r.get("b", 1)) > 1:  # attention score / context batches: heads split
                r["b"] = max(1, int(np.ceil(int(r["b"]) / ranks)))
                return r, False
            dims = [d for d in ("m", "n", "k") if int(r[d]) != tokens]
            wide = [d for d in dims if int(r[d]) > hidden]
            if wide:
                d = max(wide, key=lambda x: int(r[x]))
            elif dims:
                # hidden x hidden projection: row-parallel in forward (split the contraction), its data
                # gradient in backward comes out split (split the output)
                d = "k" if phase == "forward" and "k" in dims else ("n" if "n" in dims else dims[-1])
            else:
                return r, False
            r[d] = max(1, int(np.ceil(int(r[d]) / ranks)))
            # a full [tokens, hidden] output computed from a split contraction is a partial sum
            reduce = d == "k" and int(r["m"]) == tokens and int(r["n"]) == hidden
            return r, reduce
        if op == "attention":
            r["heads"] = max(1, int(np.ceil(int(r["heads"]) / ranks)))
            if not np.isnan(float(r.get("kv_heads", np.nan) or np.nan)):
                r["kv_heads"] = max(1, int(np.ceil(int(r["kv_heads"]) / ranks)))
            return r, False
        if op == "softmax":
            if int(r["hidden"]) > hidden:  # vocabulary-parallel loss
                r["hidden"] = max(1, int(np.ceil(int(r["hidden"]) / ranks)))
            else:
                r["rows"] = max(1, int(np.ceil(int(r["rows"]) / ranks)))
            return r, False
        if op == "elementwise":
            if int(r["elements"]) != act_bytes and int(r["elements"]) > tokens:
                r["elements"] = max(1, int(np.ceil(int(r["elements"]) / ranks)))
            return r, False
        return r, False

    def transform(trace: RankTrace, units: pd.DataFrame) -> pd.DataFrame:
        if ranks <= 1:
            return units
        out = units.copy()
        if local_collectives:
            local = (out["kind"] == "collective").to_numpy() & (out["op_id"] >= 0).to_numpy()
            out.loc[local, "kind"], out.loc[local, "label"] = "view", VIEW_LABEL
            transform.local_collectives = int(local.sum())
        new = []
        rows = list(out["row"])
        for i, u in out.iterrows():
            if u["kind"] != "op" or not isinstance(u["row"], dict):
                continue
            rows[i], reduce = split_row(u["row"], u["phase"])
            if reduce:
                dt = _row_dtype(u)
                new.append(_collective_unit(u, "all_reduce", act_bytes * DTYPE_BYTES[dt], ranks, u["phase"],
                                            "TP all_reduce (hidden state)", dt, blocking=True))
        out["row"] = rows
        return _insert(out, new)

    transform.splits_memory = ranks > 1  # each rank holds a share of the traced tensors, not all of them
    transform.local_collectives = 0
    return transform


def pipeline_parallel(stages: int, tokens: int, hidden: int):
    """A ``transform`` adding the N-1 forward and N-1 backward activation transfers of a one-micro-batch
    pipeline (the stages run one after another: see the module docstring)."""
    if stages < 1:
        raise InvalidInputError(f"stages must be >= 1, got {stages}")

    def transform(trace: RankTrace, units: pd.DataFrame) -> pd.DataFrame:
        if stages <= 1:
            return units
        new = []
        for phase in ("forward", "backward"):
            work = units[(units["phase"] == phase) & (units["kind"] == "op")]
            if work.empty:
                continue
            if stages > len(work):
                raise InvalidInputError(f"{trace.path}: {stages} pipeline stages but only {len(work)} {phase} ops "
                                        "in the trace")
            cut = np.linspace(0, len(work), stages + 1)[1:-1].astype(int)
            for c in cut:
                at = work.iloc[max(c - 1, 0)]
                dt = _row_dtype(at)
                new.append(_collective_unit(at, "send_recv", tokens * hidden * DTYPE_BYTES[dt], 2, phase,
                                            "PP send/recv (activations)", dt, blocking=True))
        return _insert(units, new)

    transform.splits_memory = stages > 1  # each stage holds its layers' tensors, not the traced step's
    return transform


#: Ops whose first input is a transformer's hidden state ``[..., hidden]``, in the order :func:`transformer_dims`
#: tries them: normalisations first (their input is always the hidden state), then linear layers (most of a
#: layer's projections take the hidden state: QKV, attention output, MLP up/gate).
HIDDEN_STATE_OPS = (("aten::layer_norm", "aten::native_layer_norm", "aten::rms_norm", "aten::_fused_rms_norm"),
                    ("aten::linear",))


def transformer_dims(trace: RankTrace) -> tuple[int, int]:
    """(tokens, hidden) of a transformer's traced step: the most frequent input shape ``[..., hidden]`` of its
    normalisation ops, else of its ``linear`` layers (a model whose norms are written out in elementwise ops, as
    Llama's RMSNorm in ``transformers``); tokens = the product of the leading dimensions. A trace with neither is an
    :class:`~hybrid.errors.InvalidInputError` (give them explicitly)."""
    ops = trace.ops
    names = ops["name"].astype(str)
    for group in HIDDEN_STATE_OPS:
        shapes: dict[tuple[int, ...], int] = {}
        for dims in ops.loc[names.isin(group), "dims"]:
            first = dims[0] if isinstance(dims, list) and dims else None
            if isinstance(first, list) and len(first) >= 2 and all(isinstance(x, int) and x > 0 for x in first):
                shapes[tuple(first)] = shapes.get(tuple(first), 0) + 1
        if shapes:
            best = max(shapes, key=lambda s: (shapes[s], math.prod(s)))
            return int(math.prod(best[:-1])), int(best[-1])
    raise InvalidInputError(f"{trace.path}: no layer norm or linear layer with a recorded input shape in the trace, so "
                            "its token count and hidden size are unknown: give them (--tokens, --hidden)")


def chain(*transforms: Any):
    """One ``transform`` applying ``transforms`` in order (None entries skipped); None when there are none."""
    steps = [t for t in transforms if t is not None]
    if not steps:
        return None
    if len(steps) == 1:
        return steps[0]

    def transform(trace: RankTrace, units: pd.DataFrame) -> pd.DataFrame:
        for t in steps:
            units = t(trace, units)
        return units

    transform.splits_memory = any(getattr(t, "splits_memory", False) for t in steps)
    return transform


def parallel_job(traces: list[RankTrace], dp: int = 1, tp: int = 1, pp: int = 1, tokens: int | None = None,
                 hidden: int | None = None) -> tuple[list[RankTrace], Any, dict[str, int]]:
    """A one-rank trace as one of ``dp`` data-parallel, ``tp`` tensor-parallel or ``pp`` pipeline ranks (one mode
    at a time): (the job's rank traces, its ``transform``, what was applied). Data parallelism runs the trace as
    recorded on every rank (record it at the per-rank batch); tensor and pipeline parallelism split the recorded
    step, whose ``tokens`` and ``hidden`` size are read from the trace unless given (:func:`transformer_dims`)."""
    degrees = {"dp": dp, "tp": tp, "pp": pp}
    for k, v in degrees.items():
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise InvalidInputError(f"{k} must be a positive integer, got {v!r}")
    for k, v in (("tokens", tokens), ("hidden", hidden)):
        if v is not None and (not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1):
            raise InvalidInputError(f"{k} must be a positive integer, got {v!r}")
    on = {k: int(v) for k, v in degrees.items() if v > 1}
    if not on:
        return list(traces), None, {}
    if len(on) > 1:
        raise InvalidInputError(f"one parallel mode at a time (got {', '.join(f'{k} {v}' for k, v in on.items())}): "
                                "compose them with `hybrid llm train` for a transformer the library describes")
    if len(traces) != 1:
        raise InvalidInputError(f"a parallel mode rewrites a one-rank trace; these traces already hold {len(traces)} "
                                "ranks (predict them as recorded)")
    (mode, n), = on.items()
    trace = traces[0]
    info: dict[str, int] = {mode: n}
    names = trace.ops["name"].astype(str)
    traced = names[names.str.match(PG_OP_RE) & names.str.startswith("c10d")]
    if len(traced) and (trace.format == "et" or trace.world_size > 1):
        # a rank of a distributed job (its execution trace given alone: it names no world size): its collectives
        # (DDP's gradient all-reduces) are in the trace already, and replicated over the new job's ranks they would
        # be priced as that job's (beside DDP's added ones with --dp; as all-reduces of the whole gradient across
        # the tensor-parallel ranks with --tp, which a tensor-parallel job does not run)
        what = {"dp": "--dp adds DDP's gradient all-reduces to a one-process trace",
                "tp": "--tp splits a one-process trace over tensor-parallel ranks",
                "pp": "--pp splits a one-process trace into pipeline stages"}[mode]
        raise InvalidInputError(
            f"{trace.path}: {what}, but this one already calls {len(traced)} collective(s) "
            f"({', '.join(sorted(set(traced)))}) as a rank of a distributed job"
            + (" (an execution trace alone names no world size: give its Chrome trace with it)"
               if trace.format == "et" else f" of {trace.world_size} ranks")
            + ", whose own would be " + ("counted twice" if mode == "dp" else "priced as the new job's")
            + "; predict the job's ranks as recorded (each rank's Chrome trace with its execution trace), or "
            "record the step in one process without DDP")
    if mode == "dp":
        return replicate(trace, n), data_parallel(n), info
    if tokens is None or hidden is None:
        t_auto, h_auto = transformer_dims(trace)
        tokens, hidden = tokens or t_auto, hidden or h_auto
    info.update(tokens=int(tokens), hidden=int(hidden))
    if mode == "tp":
        return replicate(trace, n), tensor_parallel(n, int(tokens), int(hidden), local_collectives=len(traced) > 0), info
    return [trace], pipeline_parallel(n, int(tokens), int(hidden)), info
