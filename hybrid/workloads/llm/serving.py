"""Continuous batching (vLLM / Sarathi / Vidur style): requests arrive at a rate, every engine step mixes the
decode tokens of the running requests with chunks of waiting prompts, and latency percentiles come out.

Costs: each step is one forward pass whose time is ``dense(T) + head(B) + decode_attention(n, mean context) +
prefill_attention(chunks)`` for ``T`` tokens of ``B`` sequences (the mean context: the one whose cache is the
requests' mean cache, :func:`~hybrid.workloads.llm.kv_cache.mean_context`, which a sliding window caps per
request, not on the mean). The step's prompt chunks run in ONE attention kernel per layer (FlashAttention's varlen
kernel, TensorRT-LLM's context FMHA), priced as the static batch prices its prefill: the cost-model row of that
kernel over ``n`` chunks of the step's mean chunk after its mean earlier tokens (with whole prompts, the static
batch's row at batch ``n``), scaled by the roofline of the step's own chunks against that mean shape (the kernel's
fixed cost once, each chunk's work above it), :meth:`StepCosts.prefill_attention_us`. So ``n`` equal prompts cost
what a static batch of ``n`` does, with a calibrated model too, and unequal chunks cost their summed roofline work
times the learned correction of one batched kernel, not one correction per chunk. Those functions are tabulated
once per deployment (prefill attention over chunks x chunk x earlier tokens) with ONE batched cost-model call
(:func:`StepCosts.build`) and then interpolated, so simulating thousands of steps costs no further predictions.

Scheduler (stated, close to vLLM's with chunked prefill): first come, first served; a request is admitted when
its whole KV cache (prompt + output tokens) fits in the free KV memory and fewer than ``max_seqs`` requests run
(with attention data parallelism: on its rank, :class:`SchedulerConfig`) (no preemption, as TensorRT-LLM's guaranteed-no-evict policy); each step carries one decode token per running
request plus prompt chunks up to ``max_batched_tokens``; a request's first token comes at the end of the step
that finishes its prompt. Tensor parallelism only (one model replica; pipeline parallelism is refused).
"""

from __future__ import annotations

import csv
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid.data.schema import repeated_names
from hybrid.engine.costs import OpCostModel
from hybrid.errors import HybridError, InvalidInputError
from hybrid.workloads.llm.dims import context_note
from hybrid.workloads.llm.inference import (
    BATCH_GRID_FIT,
    InferenceSetup,
    batch_grid,
    cost_ops,
    isotonic_log,
    never_superlinear,
    op_occurrence_keys,
    pass_ops,
)
from hybrid.workloads.llm.kv_cache import (
    GIB,
    MAX_TOKENS,
    activation_bytes,
    cached_tokens,
    check_generates,
    kv_bytes_per_token,
    mean_context,
    weight_bytes_per_gpu,
)

#: Ops whose cost depends on the number of sequences (the output layer), not on the tokens of a step (the final
#: norm runs over every token of the step, before the last tokens are picked: a token op).
HEAD_OPS = ("lm_head", "logits_all_gather", "sampling")


# ------------------------------------------------------------------------------------------------ workload
#: Where the sampled lengths of a distribution with a tail (exp, normal, lognormal) are clipped by default.
SAMPLE_CAP = 1 << 20


@dataclass(frozen=True)
class LengthDist:
    """Token-length distribution: ``fixed``, ``uniform`` (lo..hi), ``exp`` (mean), ``normal`` (mean, std),
    ``lognormal`` (median, sigma). Samples are clipped to [1, ``cap``] and rounded."""

    kind: str
    a: float
    b: float = 0.0
    cap: int = SAMPLE_CAP

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "fixed":
            x = np.full(n, self.a)
        elif self.kind == "uniform":
            x = rng.integers(int(self.a), int(self.b) + 1, size=n)
        elif self.kind == "exp":
            x = rng.exponential(self.a, size=n)
        elif self.kind == "normal":
            x = rng.normal(self.a, self.b, size=n)
        elif self.kind == "lognormal":
            x = np.exp(rng.normal(np.log(self.a), self.b, size=n))
        else:  # pragma: no cover - parse_dist guards
            raise InvalidInputError(f"unknown distribution {self.kind!r}")
        return np.clip(np.round(x), 1, self.cap).astype(np.int64)

    @property
    def mean(self) -> float:
        return {"fixed": self.a, "uniform": (self.a + self.b) / 2, "exp": self.a, "normal": self.a,
                "lognormal": self.a * math.exp(self.b ** 2 / 2)}[self.kind]


def parse_dist(text: str | int) -> LengthDist:
    """``128`` (fixed), ``64-512`` (uniform), ``exp:256``, ``normal:512,128``, ``lognormal:300,0.8``."""
    s = str(text).strip().lower()
    try:
        # a fixed or uniform length is taken as given (never clipped to the tails' cap), up to MAX_TOKENS
        if re.fullmatch(r"\d+", s):
            v = int(s)
            if not 1 <= v <= MAX_TOKENS:
                raise ValueError
            return LengthDist("fixed", v, cap=max(SAMPLE_CAP, v))
        m = re.fullmatch(r"(\d+)\s*-\s*(\d+)", s)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if not 1 <= lo <= hi <= MAX_TOKENS:
                raise ValueError
            return LengthDist("uniform", lo, hi, cap=max(SAMPLE_CAP, hi))
        kind, _, args = s.partition(":")
        vals = [float(x) for x in args.split(",")] if args else []
        # a tail's mean or median beyond the cap would come out as the cap, not as asked: refused
        ok = all(math.isfinite(v) for v in vals) and bool(vals) and 1 <= vals[0] <= SAMPLE_CAP
        if kind == "exp" and len(vals) == 1 and ok:
            return LengthDist("exp", vals[0])
        if kind in ("normal", "lognormal") and len(vals) == 2 and ok and vals[1] >= 0:
            return LengthDist(kind, vals[0], vals[1])
    except ValueError:
        pass
    raise InvalidInputError(f"bad length distribution {text!r} (examples: 128, 64-512, exp:256, normal:512,128, "
                            f"lognormal:300,0.8; lengths >= 1, at most {MAX_TOKENS} fixed or uniform, means and "
                            f"medians at most {SAMPLE_CAP})")


#: Spellings of an infinite arrival rate: every request arrives at once (:data:`OFFLINE_RATE`).
OFFLINE_RATE_WORDS = ("inf", "infinite", "max", "offline")
#: The arrival rate of an offline (maximum-throughput) run: all requests queued at time 0, as vendor throughput
#: benchmarks measure (TensorRT-LLM's ``trtllm-bench throughput``, vLLM's ``benchmark_throughput.py``).
OFFLINE_RATE = math.inf


def parse_rate(text: str | float) -> float:
    """``10``, ``10/s``, ``600/min``, ``36000/h`` -> requests per second (> 0); ``inf`` (also ``max``,
    ``offline``) -> :data:`OFFLINE_RATE`, every request at once."""
    s = str(text).strip().lower().replace(" ", "")
    if s in OFFLINE_RATE_WORDS:
        return OFFLINE_RATE
    m = re.fullmatch(r"([+-]?[0-9]*\.?[0-9]+(?:e[+-]?\d+)?)(?:/(s|sec|min|m|h|hr))?", s)
    if not m:
        raise InvalidInputError(f"bad rate {text!r} (examples: 10, 10/s, 600/min)")
    v = float(m.group(1)) / {None: 1, "s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600, "hr": 3600}[m.group(2)]
    if not math.isfinite(v):  # 1e400 overflows to inf, which would silently run offline
        raise InvalidInputError(f"rate {text!r} is not a finite number (for every request at once: "
                                f"{', '.join(OFFLINE_RATE_WORDS)})")
    if not v > 0:
        raise InvalidInputError(f"rate must be positive, got {text!r}")
    return v


def parse_time_ms(text: str | float) -> float:
    """``200ms``, ``0.2s``, ``200`` (ms) -> milliseconds (> 0)."""
    s = str(text).strip().lower()
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*(ms|s|us)?", s)
    if not m:
        raise InvalidInputError(f"bad time {text!r} (examples: 200ms, 0.5s)")
    if not float(m.group(1)) > 0:  # a bound no request can meet
        raise InvalidInputError(f"a time bound must be positive, got {text!r}")
    return float(m.group(1)) * {None: 1.0, "ms": 1.0, "s": 1e3, "us": 1e-3}[m.group(2)]


@dataclass(frozen=True)
class Trace:
    """Requests: arrival time (s), prompt and output lengths."""

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival_s)


def make_trace(rate: float, n: int, input_dist: LengthDist, output_dist: LengthDist, seed: int = 0,
               arrival: str = "poisson") -> Trace:
    """``n`` requests at ``rate``/s (Poisson or evenly spaced arrivals); at :data:`OFFLINE_RATE` every request
    arrives at time 0. The lengths are the same draws at every rate (same ``seed`` and ``arrival``)."""
    if n < 1:
        raise InvalidInputError(f"need at least one request, got {n}")
    if not rate > 0:
        raise InvalidInputError(f"rate must be positive, got {rate}")
    if arrival not in ("poisson", "uniform"):
        raise InvalidInputError(f"arrival must be poisson or uniform, got {arrival!r}")
    rng = np.random.default_rng(seed)
    offline = math.isinf(rate)
    if arrival == "poisson":  # drawn at an infinite rate too, so the lengths below are the same draws
        gaps = rng.exponential(1.0 if offline else 1.0 / rate, size=n)
        t = np.zeros(n) if offline else np.cumsum(gaps)
    else:
        t = np.zeros(n) if offline else np.arange(n) / rate
    return Trace(t - t[0], input_dist.sample(n, rng), output_dist.sample(n, rng))


#: Accepted column names of a trace file: canonical first, then Vidur / common trace spellings.
TRACE_COLUMNS = {
    "arrival_s": ("arrival_s", "arrived_at", "arrival_time", "timestamp"),
    "input_len": ("input_len", "num_prefill_tokens", "prompt_tokens", "input_tokens"),
    "output_len": ("output_len", "num_decode_tokens", "completion_tokens", "output_tokens"),
}


def read_trace(path: str | os.PathLike) -> Trace:
    """A request trace from CSV: arrival time (s) and prompt/output token counts per request (Vidur's
    ``arrived_at, num_prefill_tokens, num_decode_tokens`` are accepted too). Requests are sorted by arrival."""
    p = Path(path)
    try:
        raw = p.read_bytes()
        # skipinitialspace: a header written "arrival_s, input_len, output_len" names its columns without the spaces
        df = pd.read_csv(p, comment="#", skipinitialspace=True)
    except FileNotFoundError:
        raise InvalidInputError(f"trace file {p} does not exist") from None
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"trace file {p}: cannot read ({' '.join(str(exc).split())[:120]})") from None
    header = next((ln for ln in re.split(r"\r\n|\r|\n", raw.decode("utf-8", errors="replace"))
                   if ln.split("#", 1)[0].strip()), "")
    repeated = repeated_names(next(csv.reader([header.split("#", 1)[0]]), []))
    if repeated:  # pandas reads the second as "arrival_s.1": the first was used, the other dropped without a word
        raise InvalidInputError(f"trace file {p}: the header names column(s) {', '.join(map(repr, repeated))} more "
                                "than once; keep one of each")
    cols, src = {}, {}
    for key, names in TRACE_COLUMNS.items():
        found = next((c for c in names if c in df.columns), None)
        if found is None:
            raise InvalidInputError(f"trace file {p}: no {key} column (one of {', '.join(names)})")
        src[key] = found
        cols[key] = pd.to_numeric(df[found], errors="coerce").to_numpy(dtype=np.float64)
    if len(df) == 0:
        raise InvalidInputError(f"trace file {p} has no requests")
    if raw.strip() and not raw.endswith(b"\n"):
        # the last value may be a prefix of the real one (a token count of 16 cut to 1): refuse, do not guess
        raise InvalidInputError(f"trace file {p}: its last line has no final newline (truncated file?); add the "
                                "newline if the file is complete")
    # the file's line of each row: pandas skips comment and blank lines, so a row's index does not give it (the
    # header and rows are the lines with something before any '#'; a quoted field spanning lines breaks the count,
    # and then the row number is given instead)
    lines = [i + 1 for i, ln in enumerate(re.split(r"\r\n|\r|\n", raw.decode("utf-8", errors="replace")))
             if ln.split("#", 1)[0].strip()]
    where = (lambda i: f"line {lines[i + 1]}") if len(lines) == len(df) + 1 else (lambda i: f"request row {i + 1}")
    for key, v in cols.items():
        bad = ~np.isfinite(v) | (v < 0 if key == "arrival_s" else (v < 1) | (v > MAX_TOKENS) | (v != np.round(v)))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidInputError(f"trace file {p}, {where(i)}: {key} must be "
                                    f"{'a time >= 0' if key == 'arrival_s' else f'a whole token count from 1 to {MAX_TOKENS}'}"
                                    f", got {str(df[src[key]].iloc[i])!r}")
    order = np.argsort(cols["arrival_s"], kind="stable")
    return Trace(cols["arrival_s"][order], np.round(cols["input_len"][order]).astype(np.int64),
                 np.round(cols["output_len"][order]).astype(np.int64))


# ------------------------------------------------------------------------------------------------ step costs
def _log_grid(hi: float, points: int) -> np.ndarray:
    return np.unique(np.round(np.geomspace(1, max(hi, 2), points)))


def _never_falling(grid: np.ndarray, axes: tuple[int, ...] | None = None) -> np.ndarray:
    """A step-cost grid (ascending tokens / sequences, and context on a second axis) made non-decreasing along every
    axis, as static batching's batch envelope makes op times (:func:`~hybrid.workloads.llm.inference.isotonic_log`:
    the closest non-decreasing sequence in log time; learned corrections are piecewise constant in their size
    features, so a larger batch could come out cheaper). One axis after the other keeps the first axis's order: the
    fit is order-preserving (a row never below another stays so). Analytical (roofline) grids are unchanged, and a
    grid with a zero or non-finite entry is left as it is. ``axes``: only those (default: every axis)."""
    z = np.asarray(grid, dtype=np.float64)
    if not (np.isfinite(z).all() and (z > 0).all()):
        return z
    for axis in range(z.ndim) if axes is None else axes:
        z = np.moveaxis(isotonic_log(np.moveaxis(z, axis, -1)), -1, axis)
    return z


def _batch_envelope(values: np.ndarray, grid: np.ndarray | None = None) -> np.ndarray:
    """Op times along a :func:`batch_grid` of token or sequence counts (the last axis of ``values``, one row per
    op; the grid reaching at least :data:`BATCH_GRID_FIT`) made non-decreasing as static batching's envelope makes
    them (:func:`~hybrid.workloads.llm.inference._apply_envelope`): each op's own isotonic fit in log time. A fit of
    the ops' sum pools other points, and a coarser grid interpolated log-log across a learned step priced a step of
    the same tokens otherwise than the static batch (llama3-8b on one H100, 200 prompts of 8 tokens prefilled in
    one step: 36.3 ms of dense ops against its 32.7). The static batch fits a prefill chain to
    ``BATCH_GRID_FIT`` x the prompt's tokens, so the whole grid is fitted here. A row with a zero or non-finite
    entry (an op a deployment does not run) is left as it is. With ``grid`` (the sequence or chunk counts of the
    last axis: attention, as there), never above its pieces (:func:`~hybrid.workloads.llm.inference.
    never_superlinear`)."""
    z = np.array(values, dtype=np.float64)
    ok = (np.isfinite(z) & (z > 0)).all(axis=-1)
    if ok.any():
        z[ok] = isotonic_log(z[ok]) if grid is None else never_superlinear(isotonic_log(z[ok]), grid)
    return z


#: Most distinct prompt lengths of a trace that :meth:`StepCosts.build_bounds` puts on its chunk grid (each costs
#: one more chunk length across the chunk-count x earlier-token grid, about 700 cost-model rows).
PROMPT_GRID_POINTS = 4
#: MLA projections that depend on the pass (:func:`~hybrid.workloads.llm.layer_ops.forward_layer_ops`): a decode
#: step's absorbed per-head GEMMs, a prompt's latent up-projection
MLA_DECODE_OPS = ("attn_q_absorb", "attn_v_absorb")
MLA_PREFILL_OPS = ("attn_kv_b_proj",)
#: the routed experts' ops (category ``moe``): with attention data parallelism they run on the whole EP group's
#: tokens, every other op on one rank's own
EXPERT_OPS = ("mlp_up_proj", "mlp_act", "mlp_down_proj")


@dataclass(frozen=True)
class RankLoads:
    """One serving step's load on each attention-DP rank (:meth:`StepCosts.step_us`): output sequences, decode
    requests and their mean context per rank, and the rank of each of the step's prompt chunks."""

    seqs_out: np.ndarray
    n_dec: np.ndarray
    mean_ctx: np.ndarray
    chunk_rank: np.ndarray


@dataclass
class StepCosts:
    """Interpolated per-step costs (microseconds) of one deployment."""

    tokens: np.ndarray
    dense_us: np.ndarray
    seqs: np.ndarray
    head_us: np.ndarray
    dec_b: np.ndarray
    dec_ctx: np.ndarray
    dec_us: np.ndarray  # [len(dec_b), len(dec_ctx)]
    #: numbers of prompt chunks in one step (static batching's :func:`batch_grid`, to at least
    #: :data:`BATCH_GRID_FIT`: the static batch's prefill chain, fitted the same way)
    pre_n: np.ndarray
    pre_c: np.ndarray
    #: the prompt's tokens before a chunk (context - chunk, from 0): a chunk's context is never below the chunk, so
    #: a (chunk, context) grid would have corners no step reaches
    pre_prior: np.ndarray
    #: one batched (varlen) attention kernel over ``n`` chunks of ``c`` tokens after ``p`` earlier tokens each,
    #: ``[len(pre_n), len(pre_c), len(pre_prior)]``: the static batch's prefill row at batch ``n``
    pre_us: np.ndarray
    #: the roofline of those kernels, same shape (``n = 1``: one chunk alone, :meth:`prefill_attention_us`)
    pre_roof: np.ndarray
    #: the fixed part of that roofline (its latency term: the launches), which one kernel pays once for all chunks
    pre_fixed_us: float
    #: the op-cost models that answered (``+``-joined ``method`` of the costed ops: ``roofline``, ``kernel-xgb``...)
    method: str = "roofline"
    #: ranks that run attention side by side on requests of their own (attention data parallelism: ``tp``; else 1):
    #: then :attr:`head_us`, :attr:`dec_us` and :attr:`pre_us` are one rank's, at its own sequences and chunks
    dp_ranks: int = 1
    #: MLA (DeepSeek): the projections a step runs on its prompt tokens apart from its decode tokens (on the
    #: :attr:`tokens` grid; ``dense_us`` holds neither), as :func:`~hybrid.workloads.llm.inference.pass_ops` prices
    #: a pass: prompt tokens expand the latent into per-head keys and values (``attn_kv_b_proj``), decode tokens
    #: run the absorbed per-head GEMMs (``attn_q_absorb`` / ``attn_v_absorb``); None for other attention
    mla_prefill_us: np.ndarray | None = None
    mla_decode_us: np.ndarray | None = None
    #: attention data parallelism: the routed experts' ops at the EP group's tokens (on the :attr:`tokens` grid);
    #: :attr:`dense_us` and the MLA projections then hold one rank's other ops at that rank's own tokens (a request
    #: is cached whole on one rank, so a step waits for its busiest rank); None without attention data parallelism
    group_us: np.ndarray | None = None

    @classmethod
    def build(cls, s: InferenceSetup, max_tokens: int, max_seqs: int, max_ctx: int,
              cost_model: OpCostModel | None = None, points: int = 24,
              prompt_lengths: np.ndarray | None = None) -> StepCosts:
        """Step costs on a grid of batch shapes, every op at its predicted time (``prompt_lengths``: see
        :meth:`build_bounds`)."""
        return cls.build_bounds(s, max_tokens, max_seqs, max_ctx, cost_model, points, prompt_lengths)[0]

    @classmethod
    def build_bounds(cls, s: InferenceSetup, max_tokens: int, max_seqs: int, max_ctx: int,
                     cost_model: OpCostModel | None = None, points: int = 24,
                     prompt_lengths: np.ndarray | None = None
                     ) -> tuple[StepCosts, StepCosts | None, StepCosts | None]:
        """(predicted, low, high) step costs from one costing of the grid: low / high with every op at the low /
        high end of its 80% interval (None when the cost model gives no interval for every op: a roofline-only
        model, or collectives of a model calibrated without any). ``prompt_lengths`` (the requests' prompt
        lengths): when they take at most :data:`PROMPT_GRID_POINTS` values within ``max_tokens``, each is a
        chunk grid point too, and ``n`` prompts of each (``n`` on the static batch's grid) token points of the dense
        ops: an offline burst of equal prompts is priced where the static batch prices it."""
        # decode-only steps carry exactly one token per running request: every such count the static batch prices
        # (batch_grid: each to 16, then 8 per octave) is a grid point too. An MoE layer's cost steps with the
        # experts a few tokens hit, which interpolation across the log grid's gaps cut (Mixtral on 2 H100s, 6
        # requests decoding: 13.5 ms a step between the grid's 5 and 8 tokens, 14.6 at 6). Token and sequence counts
        # are all on the static batch's own grid (8 per octave, to at least BATCH_GRID_FIT) and each op is fitted
        # on its own (:func:`_batch_envelope`): a step prices an op where the static batch prices it
        # (attention data parallelism: every rank fills a budget of its own, and the experts route them all)
        span = max_tokens * (s.tp if s.attention_dp else 1) + max_seqs
        tok = batch_grid(max(span, BATCH_GRID_FIT))
        seq = batch_grid(max(max_seqs, BATCH_GRID_FIT))
        db, dc = seq, _log_grid(max_ctx, points // 2)
        w = s.model.kv_cap  # a sliding window, or an attention chunk (the same bound on what decode reads)
        if w and 1 < w < dc[-1]:
            # a sliding window caps the cache at w tokens: decode attention grows linearly up to the window and
            # flat (or, with some global layers, slower) beyond it; a kink that linear interpolation between grid
            # points around it cut short (mistral-7b, 32 requests at a mean context of 4096: 9.9 ms a step instead
            # of 10.9), so the window is a grid point
            dc = np.unique(np.append(dc, float(w)))
        pc, px = _log_grid(max_tokens, points // 2), np.concatenate([[0.0], _log_grid(max_ctx, points // 2)])
        if prompt_lengths is not None:
            # a few prompt lengths (a benchmark's fixed length) are grid chunks: a whole prompt prefilled in one
            # step is then priced at its own cost-model row, not interpolated between grid chunks, where a learned
            # correction is not the interpolation (quickstart's model, 100 prompts of 24 tokens in one step on 8
            # H100s: attention 16% over the static batch's)
            own = np.unique(np.asarray(prompt_lengths, dtype=np.float64))
            own = own[(own >= 1) & (own <= max_tokens)]
            if len(own) <= PROMPT_GRID_POINTS:
                pc = np.unique(np.append(pc, own))
                # and n whole prompts of a length are token points of the dense ops, for n on the static batch's
                # grid: the static batch prices its prefill's dense ops at exactly those tokens (quickstart's model,
                # 10 prompts of 1500 tokens in one step on an H100: TTFT 345 ms interpolated between 14336 and
                # 15360 tokens, 364 ms at 15000 as the static batch)
                whole = (batch_grid(max_seqs)[:, None] * own[None, :]).ravel()
                if s.attention_dp:  # and the whole group's, where the routed experts price them
                    whole = np.append(whole, (batch_grid(max_seqs * s.tp)[:, None] * own[None, :]).ravel())
                tok = np.unique(np.append(tok, whole[whole <= span]))
        # a step's prompt chunks: n of them (at most the running requests), on the static batch's grid of batches.
        # Whole prompts (no earlier tokens) are the static batch's prefill rows, fitted along the same chain (to
        # BATCH_GRID_FIT chunks); chunks after earlier tokens have no static counterpart, and are costed only to the
        # counts a step reaches (a third fewer cost-model rows)
        fit_n = batch_grid(max(max_seqs, BATCH_GRID_FIT))
        pn = batch_grid(max_seqs)
        DB, DC = np.meshgrid(db, dc, indexing="ij")
        WN, WC = np.meshgrid(fit_n, pc, indexing="ij")  # whole prompts: chunks, chunk
        PN, PC, PX = np.meshgrid(pn, pc, px[1:], indexing="ij")  # chunks, chunk, earlier tokens: context PC + PX
        # one table: dense passes (T tokens, 1 sequence), heads (B sequences), decode and prefill attention; with
        # attention data parallelism the dense pass is one rank's T tokens, whose experts route the T tokens alone:
        # a step prices that rank's ops at its busiest rank's tokens and the experts at the group's (step_us). Spread
        # evenly over the ranks (tp sequences of T / tp tokens), one 512-token DeepSeek-V3 prompt on 8 H200s was
        # priced as 64 tokens a rank: TTFT 31.1 ms against the static batch's 51.1
        dp = s.tp if s.attention_dp else 1
        # with attention data parallelism the head, decode and prefill attention tables are one rank's, indexed by
        # that rank's own sequences and chunks: pass_ops gives a rank ceil(n / tp) of a pass's n sequences, so a pass
        # of dp x n sequences is one rank's n (a step then prices each rank's own requests, step_us)
        parts = [
            (tok, np.ones_like(tok), np.ones_like(tok), np.ones_like(tok)),  # dense(T): q_len 1
            (seq * dp, seq * dp, np.ones_like(seq), np.ones_like(seq)),  # head(B)
            (DB.ravel() * dp, DB.ravel() * dp, np.ones(DB.size), DC.ravel()),  # decode attention
            # prefill attention: ONE kernel over n chunks (the static batch's prefill row at batch n)
            ((WN * WC).ravel() * dp, WN.ravel() * dp, WC.ravel(), WC.ravel()),
            ((PN * PC).ravel() * dp, PN.ravel() * dp, PC.ravel(), (PC + PX).ravel()),
        ]
        mla = bool(s.model.is_mla)
        if mla:  # the prompt tokens' MLA projections (a pass with new keys: not absorbed), on the dense grid
            parts.append((tok, np.ones_like(tok), np.full(len(tok), 2.0), np.full(len(tok), 2.0)))
        cat = [np.concatenate([p[j] for p in parts]) for j in range(4)]
        phase = np.concatenate([np.full(len(p[0]), f"part{i}", dtype=object) for i, p in enumerate(parts)])
        off = len(phase)
        # the attention parts keep their attention rows only (their other ops are never read): the prefill grid is
        # chunks x chunk x earlier tokens, ten times the other parts' scenarios
        n_ops = len(tok) + len(seq)
        whole = pass_ops(s, *(c[:n_ops] for c in cat), phase=phase[:n_ops])
        n_att = n_ops + DB.size + WN.size + PN.size
        att = pass_ops(s, *(c[n_ops:n_att] for c in cat), phase=phase[n_ops:n_att], names=("attention",))
        att = att.assign(scenario=att["scenario"].to_numpy() + n_ops)
        tables = [whole, att]
        if mla:
            pro = pass_ops(s, *(c[n_att:] for c in cat), phase=phase[n_att:], names=MLA_PREFILL_OPS)
            tables.append(pro.assign(scenario=pro["scenario"].to_numpy() + n_att))
        costed = cost_ops(pd.concat(tables, ignore_index=True), cost_model, s.catalog)
        name = costed["name"].to_numpy()
        ph = costed["phase"].to_numpy()
        sc = costed["scenario"].to_numpy(dtype=np.int64)
        is_att = name == "attention"
        is_head = np.isin(name, HEAD_OPS)
        is_expert = np.isin(name, EXPERT_OPS) & (costed["category"].to_numpy() == "moe")
        # the custom all-reduce's times stand as they are (the static batch's envelope leaves them too: its two-shot
        # at a larger message is really faster than a smaller one's one-shot); other analytical times never fall
        analytical = costed["method"].to_numpy(dtype=str) == "p2p-allreduce"
        o2 = len(tok) + len(seq)
        o3 = o2 + DB.size
        o4 = o3 + WN.size
        method = "+".join(sorted(set(map(str, costed["method"]))))
        op_names, op_code = np.unique(op_occurrence_keys(costed), return_inverse=True)

        def assemble(column: str) -> StepCosts | None:
            if column not in costed.columns:
                return None
            t_all = costed[column].to_numpy(dtype=np.float64) * costed["count"].to_numpy()
            if not np.isfinite(t_all).all():
                return None

            def total(mask: np.ndarray) -> np.ndarray:
                return np.bincount(sc[mask], weights=t_all[mask], minlength=off)

            def by_op(mask: np.ndarray, lo: int, hi: int) -> np.ndarray:
                # [op, scenario lo..hi): each op (its name and occurrence in the scenario) fitted on its own
                m = np.zeros((len(op_names), hi - lo))
                np.add.at(m, (op_code[mask], sc[mask] - lo), t_all[mask])
                return m

            # (the step total's own fit after: a no-op unless an op row was left unfitted, e.g. one with a zero)
            is_dec_mla = np.isin(name, MLA_DECODE_OPS)
            base = (ph == "part0") & ~is_att & ~is_head & ~is_dec_mla
            group = None
            if dp > 1:  # the routed experts apart: the EP group's tokens
                is_exp = base & is_expert
                base = base & ~is_expert
                group = _never_falling(_batch_envelope(by_op(is_exp, 0, len(tok))).sum(0))
            dense = (_never_falling(_batch_envelope(by_op(base & ~analytical, 0, len(tok))).sum(0))
                     + by_op(base & analytical, 0, len(tok)).sum(0))
            mla_pre = mla_dec = None
            if mla:
                mla_dec = _never_falling(_batch_envelope(by_op((ph == "part0") & is_dec_mla, 0, len(tok))).sum(0))
                mla_pre = _never_falling(_batch_envelope(by_op(ph == "part5", n_att, off)).sum(0))
            head = _never_falling(_batch_envelope(by_op((ph == "part1") & is_head, len(tok), o2)).sum(axis=0))
            # decode attention: the static rule along the sequences at every context, then never falling in it
            dec = _never_falling(_batch_envelope(total((ph == "part2") & is_att)[o2: o3].reshape(DB.shape).T, db).T)
            # prefill attention: the static batch's rule along the chunks at every (chunk, earlier tokens), then
            # never falling along the chunk's tokens
            fresh = _batch_envelope(total((ph == "part3") & is_att)[o3: o4].reshape(WN.shape).T, fit_n).T[:len(pn)]
            after = np.moveaxis(_batch_envelope(np.moveaxis(
                total((ph == "part4") & is_att)[o4: o4 + PN.size].reshape(PN.shape), 0, -1), pn), -1, 0)
            # along the earlier tokens a running maximum from the whole prompt (the static batch's row, which the
            # fit must not move): a learned row of a chunk after earlier tokens (q_len < kv_len) can come out below
            # the fresh chunk's, and the isotonic fit pooled the two (200 fresh 8-token prompts on an H100 priced 8%
            # under the static batch's attention with a model fitted on the committed H100 bundle)
            pre = _never_falling(np.concatenate([fresh[:, :, None], after], axis=2), axes=(0, 1))
            pre = np.maximum.accumulate(pre, axis=2)
            return cls(tok, dense, seq, head, db, dc, dec, pn, pc, px, pre, pre_roof, fixed, method, dp,
                       mla_prefill_us=mla_pre, mla_decode_us=mla_dec, group_us=group)

        # the same kernels' roofline (analytical: never falling already), the same for every column
        roof = costed["roofline_us"].to_numpy(dtype=np.float64) * costed["count"].to_numpy()
        roof = np.bincount(sc[is_att], weights=roof[is_att], minlength=off)
        pre_roof = np.concatenate([roof[o3: o4].reshape(WN.shape)[:len(pn), :, None],
                                   roof[o4: o4 + PN.size].reshape(PN.shape)], axis=2)
        lat = costed["latency_us"].to_numpy(dtype=np.float64) * costed["count"].to_numpy()
        fixed = float(lat[is_att & (sc == o3)].sum())  # one one-token chunk's kernel

        main = assemble("time_us")
        assert main is not None  # (cost_ops checks every time is finite)
        return main, assemble("time_us_low"), assemble("time_us_high")

    @staticmethod
    def _interp1(x: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """Log-log in the tokens or sequences (a pass's time is flat while it reads its weights, then linear)."""
        lx = np.log(np.maximum(x, 1.0))
        if (ys > 0).all():
            return np.exp(np.interp(lx, np.log(xs), np.log(ys)))
        return np.interp(lx, np.log(xs), ys)

    @staticmethod
    def _interp2(x: np.ndarray, y: np.ndarray, xs: np.ndarray, ys: np.ndarray, z: np.ndarray) -> np.ndarray:
        """Attention time at (sequences or chunk ``x``, context or earlier tokens ``y``): linear in ``y`` (the KV
        cache read and the scores grow linearly with the context; extrapolated linearly beyond the grid), then
        log-log in ``x`` (a power law: linear in the sequences, up to quadratic in a causal chunk). Linear
        interpolation in log context overstated a linear cost by up to (1 + r) / (2 sqrt r) between grid points a
        ratio ``r`` apart (9% on a 12-point grid to 16k tokens)."""
        ly = np.asarray(y, dtype=np.float64)
        lx, gx = np.log(np.maximum(x, 1.0)), np.log(xs)
        i = np.clip(np.searchsorted(gx, lx) - 1, 0, len(gx) - 2) if len(gx) > 1 else np.zeros_like(lx, dtype=int)
        j = np.clip(np.searchsorted(ys, ly) - 1, 0, len(ys) - 2) if len(ys) > 1 else np.zeros_like(ly, dtype=int)
        if len(gx) == 1 or len(ys) == 1:
            return np.full(np.shape(lx), float(z.ravel()[0]))
        tx = np.clip((lx - gx[i]) / (gx[i + 1] - gx[i]), 0, 1)
        ty = (ly - ys[j]) / (ys[j + 1] - ys[j])
        lo = np.maximum((1 - ty) * z[i, j] + ty * z[i, j + 1], 0.0)
        hi = np.maximum((1 - ty) * z[i + 1, j] + ty * z[i + 1, j + 1], 0.0)
        with np.errstate(divide="ignore"):  # a zero end: linear in x instead
            log_x = np.exp((1 - tx) * np.log(lo) + tx * np.log(hi))
        return np.where((lo > 0) & (hi > 0), log_x, (1 - tx) * lo + tx * hi)

    def rank_us(self, prompt_tokens: np.ndarray, dec_tokens: np.ndarray, prefix_tokens: Any = 0.0) -> np.ndarray:
        """The dense pass and MLA projections (not the routed experts' ops when :attr:`group_us` is set) of passes
        of ``prompt_tokens + dec_tokens`` tokens, ``prompt_tokens`` of them prompt tokens, whose chunks follow
        ``prefix_tokens`` earlier prompt tokens in all (vectorised). MLA expands the prefix's cached latents too
        (vLLM's ``_compute_prefill_context``: ``kv_b_proj`` over the gathered prefix, a GEMM of its own)."""
        pre = np.asarray(prompt_tokens, dtype=np.float64)
        dec = np.asarray(dec_tokens, dtype=np.float64)
        t = self._interp1(pre + dec, self.tokens, self.dense_us)
        if self.mla_prefill_us is not None:
            fix = np.broadcast_to(np.asarray(prefix_tokens, dtype=np.float64), pre.shape)
            t = t + np.where(pre > 0, self._interp1(pre, self.tokens, self.mla_prefill_us), 0.0)
            t = t + np.where(fix > 0, self._interp1(fix, self.tokens, self.mla_prefill_us), 0.0)
        if self.mla_decode_us is not None:
            t = t + np.where(dec > 0, self._interp1(dec, self.tokens, self.mla_decode_us), 0.0)
        return t

    def step_us(self, tokens: float, seqs_out: float, n_dec: int, mean_ctx: float, chunks: np.ndarray,
                chunk_ctx: np.ndarray, ranks: RankLoads | None = None) -> float:
        """One step's time: ``tokens`` tokens, ``seqs_out`` sequences through the output layer, ``n_dec`` decode
        tokens at the mean context ``mean_ctx``, prompt ``chunks`` reaching ``chunk_ctx`` tokens of their prompts.
        With attention data parallelism (:attr:`group_us`), ``ranks``: each rank's own output sequences, decode
        requests and their mean context, and the rank of each chunk. A request is cached and run whole on one rank,
        so the step waits for its busiest rank (the largest of the ranks' own times: dense ops, output layer, decode
        and prefill attention at that rank's own requests), and the routed experts take the whole step's
        ``tokens``."""
        chunks = np.asarray(chunks, dtype=np.float64)
        chunk_ctx = np.asarray(chunk_ctx, dtype=np.float64)
        if self.group_us is None or ranks is None:
            out_r, dec_r, ctx_r = (np.array([float(v)]) for v in (seqs_out, n_dec, mean_ctx))
            chunk_r = np.zeros(len(chunks), dtype=np.int64)
        else:
            out_r, dec_r, ctx_r = (np.asarray(v, dtype=np.float64) for v in (ranks.seqs_out, ranks.n_dec,
                                                                              ranks.mean_ctx))
            chunk_r = np.asarray(ranks.chunk_rank, dtype=np.int64)
        n_r = len(out_r)
        pre_r = np.bincount(chunk_r, weights=chunks, minlength=n_r)
        fix_r = np.bincount(chunk_r, weights=chunk_ctx - chunks, minlength=n_r)
        t = np.where(pre_r + dec_r > 0, self.rank_us(pre_r, dec_r, fix_r), 0.0)  # an idle rank waits
        t = t + np.where(out_r > 0, self._interp1(out_r, self.seqs, self.head_us), 0.0)
        t = t + np.where(dec_r > 0, self._interp2(dec_r, ctx_r, self.dec_b, self.dec_ctx, self.dec_us), 0.0)
        for r in np.unique(chunk_r):  # one prefill attention kernel over each rank's own chunks
            on = chunk_r == r
            t[r] += self.prefill_attention_us(chunks[on], chunk_ctx[on] - chunks[on])
        step = float(t.max())
        if self.group_us is not None:
            step += float(self._interp1(np.array([tokens]), self.tokens, self.group_us)[0])
        return step

    def prefill_attention_us(self, chunks: np.ndarray, prior: np.ndarray) -> float:
        """One step's prompt chunks (``chunks[i]`` tokens after ``prior[i]`` earlier tokens of the prompt) as ONE
        attention kernel per layer (FlashAttention's varlen kernel, TensorRT-LLM's context FMHA), as the static
        batch's prefill: the roofline of the step's own chunks times the cost model's correction of one batched
        kernel of ``n`` chunks of their mean shape (mean chunk, mean earlier tokens: :attr:`pre_us` over
        :attr:`pre_roof`, the static batch's prefill row at batch ``n`` when the chunks are whole prompts).

        The roofline: the kernel's fixed cost (:attr:`pre_fixed_us`, the launches) once, plus each chunk's work
        above it (one chunk's roofline less the fixed cost). With attention data parallelism the chunks are one
        rank's own (its tables are indexed by a rank's chunks, :meth:`build_bounds`), and :meth:`step_us` takes the
        busiest rank's. Equal chunks cost the batched row itself, so an offline burst of equal prompts costs what
        the static batch does, with attention data parallelism too (its busiest rank holds ceil(n / ranks) of
        them, as the static batch's rank does). Pricing each chunk as its own kernel and keeping one fixed cost was exact for
        the roofline but multiplied a learned correction of small chunks by their number (``hybrid quickstart``'s
        model, 200 prompts of 8 tokens in one step on 8 H100s: attention 20.8 ms against the static batch's 0.21,
        TTFT 35.7 ms against 15.1; on one H100 4.0 ms against 0.6); a one-token chunk's whole time taken as the
        fixed cost left that token's work out of every other chunk (5% of those prompts' roofline attention)."""
        c = np.asarray(chunks, dtype=np.float64)
        p = np.asarray(prior, dtype=np.float64)
        n = len(c)
        base = self.pre_fixed_us
        # the work itself interpolated (a power of the chunk): a fixed cost ~100x a small chunk's work, interpolated
        # with it and taken off after, left that work several times off between grid chunks
        work = self._interp2(c, p, self.pre_c, self.pre_prior, np.maximum(self.pre_roof[0] - base, 0.0))
        roof = base + float(work.sum())
        c_mean, p_mean = float(c.mean()), float(p.mean())
        learned = self._interp_chunks(n, c_mean, p_mean, self.pre_us)
        analytical = self._interp_chunks(n, c_mean, p_mean, self.pre_roof)
        return roof * learned / analytical if analytical > 0 else learned

    def _interp_chunks(self, n: float, chunk: float, prior: float, table: np.ndarray) -> float:
        """``table`` (:attr:`pre_us` or :attr:`pre_roof`) at ``n`` chunks of ``chunk`` tokens after ``prior``
        earlier ones: (chunk, prior) as :meth:`_interp2`, then log-log in the chunks between the grid counts around
        ``n`` (as the static batch interpolates its envelope between grid batches)."""
        g = np.log(self.pre_n)
        if len(g) == 1:  # one chunk per step at most (max_seqs 1): no counts to interpolate between (0 / 0 was NaN)
            return float(self._interp2(np.array([chunk]), np.array([prior]), self.pre_c, self.pre_prior,
                                       table[0])[0])
        x = math.log(max(float(n), 1.0))
        i = int(np.clip(np.searchsorted(g, x) - 1, 0, len(g) - 2))
        lo, hi = (float(self._interp2(np.array([chunk]), np.array([prior]), self.pre_c, self.pre_prior,
                                      table[k])[0]) for k in (i, i + 1))
        w = min(max((x - g[i]) / (g[i + 1] - g[i]), 0.0), 1.0)
        if lo > 0 and hi > 0:
            return math.exp((1 - w) * math.log(lo) + w * math.log(hi))
        return (1 - w) * lo + w * hi

    def decode_steps_us(self, n_dec: int, mean_ctx: np.ndarray, rank_dec: np.ndarray | None = None,
                        rank_ctx: np.ndarray | None = None) -> np.ndarray:
        """Times of consecutive decode-only steps of ``n_dec`` requests at the given mean contexts (vectorised).
        With attention data parallelism (:attr:`group_us`), ``rank_dec`` (each rank's requests) and ``rank_ctx``
        (``[ranks, steps]``: each rank's own mean context, :func:`~hybrid.workloads.llm.kv_cache.mean_context` of
        its requests): every step waits for its busiest rank (dense ops, output layer and decode attention at that
        rank's own requests), and the routed experts take all ``n_dec`` tokens."""
        ctx = np.asarray(mean_ctx, dtype=np.float64)
        k = len(ctx)
        if self.group_us is None or rank_dec is None:
            b, c = np.array([[float(n_dec)]]), ctx[None, :]
        else:
            b = np.asarray(rank_dec, dtype=np.float64)[:, None]
            c = np.asarray(ctx if rank_ctx is None else rank_ctx, dtype=np.float64).reshape(-1, k)
            c = np.broadcast_to(c, (len(b), k))
            keep = b[:, 0] > 0  # idle ranks wait
            b, c = b[keep], c[keep]
        bb = np.broadcast_to(b, c.shape)
        own = (self.rank_us(np.zeros(len(b)), b[:, 0])[:, None] + self._interp1(b, self.seqs, self.head_us)
               + self._interp2(bb, c, self.dec_b, self.dec_ctx, self.dec_us))
        t = own.max(axis=0)
        if self.group_us is not None:
            t = t + self._interp1(np.full(k, float(n_dec)), self.tokens, self.group_us)
        return t


# ------------------------------------------------------------------------------------------------ simulation
@dataclass
class ServeResult:
    """Per-request latencies (ms) and aggregate throughput of one simulated trace."""

    rate: float
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    latency_ms: np.ndarray
    output_tokens_per_s_per_gpu: float
    duration_s: float
    steps: int
    kv_capacity_tokens: int
    max_running: int
    notes: list[str] = field(default_factory=list)
    #: the arrivals outpace the deployment: the queue grows over the run (:func:`queue_growth_note`)
    overloaded: bool = False

    def percentiles(self, qs: tuple[float, ...] = (50, 90, 99)) -> dict[str, dict[str, float | None]]:
        """Percentiles and mean of each latency over the requests it is defined for (TPOT: requests that generate
        more than one token); ``None`` where it is defined for none."""
        out: dict[str, dict[str, float | None]] = {}
        for name, v in (("ttft_ms", self.ttft_ms), ("tpot_ms", self.tpot_ms), ("latency_ms", self.latency_ms)):
            v = v[np.isfinite(v)]
            out[name] = ({f"p{int(q)}": float(np.percentile(v, q)) for q in qs} | {"mean": float(np.mean(v))}
                         if len(v) else {f"p{int(q)}": None for q in qs} | {"mean": None})
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"rate_per_s": self.rate, "requests": len(self.ttft_ms), **self.percentiles(),
                "output_tokens_per_s_per_gpu": self.output_tokens_per_s_per_gpu, "duration_s": self.duration_s,
                "steps": self.steps, "kv_capacity_tokens": self.kv_capacity_tokens, "max_running": self.max_running,
                "overloaded": self.overloaded, "notes": self.notes}


@dataclass(frozen=True)
class SchedulerConfig:
    """The engine's step limits. With attention data parallelism both are each rank's own, as TensorRT-LLM's
    ``max_batch_size`` / ``max_num_tokens`` (every attention-DP rank schedules its own requests; the group admits up
    to ``tp x max_batch_size``) and vLLM's ``max_num_seqs`` / ``max_num_batched_tokens`` (one scheduler per DP
    engine) are; SGLang's ``--max-running-requests`` and ``--chunked-prefill-size`` are the group's (its DP
    attention divides both by ``dp_size``): give SGLang's values divided by the ranks."""

    max_batched_tokens: int = 2048  # tokens per step (decode tokens + prompt chunks)
    max_seqs: int = 256  # running requests

    def __post_init__(self) -> None:
        for flag, v in (("--max-batched-tokens", self.max_batched_tokens), ("--max-seqs", self.max_seqs)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise InvalidInputError(f"{flag} must be a positive integer, got {v!r}")
        if self.max_batched_tokens < self.max_seqs:
            # every running request puts its decode token in each step, so fewer tokens per step than requests
            # running is a budget the steps would exceed (vLLM refuses the same configuration)
            raise InvalidInputError(f"--max-batched-tokens ({self.max_batched_tokens}) must be at least --max-seqs "
                                    f"({self.max_seqs}): each step carries one decode token per running request")


def kv_capacity_tokens(s: InferenceSetup, sched: SchedulerConfig) -> int:
    """Tokens of KV cache that fit beside the weights, the step's activations and the reserve (per GPU); with
    attention data parallelism the tokens the whole replica holds (each rank caches its own requests)."""
    ranks, act_tp = (s.tp, 1) if s.attention_dp else (1, s.tp)  # ranks holding different requests
    # a step's activations: with attention data parallelism each rank runs a step of its own budget and requests
    # (SchedulerConfig), not a tp-th of it
    free = (s.device.mem_capacity - s.reserve_gib * GIB
            - weight_bytes_per_gpu(s.model, s.precision, s.tp, s.pp, s.attention_dp, s.parallel_embedding)
            - float(activation_bytes(s.model, s.precision, sched.max_batched_tokens, sched.max_seqs, act_tp)))
    return ranks * int(max(free, 0) // kv_bytes_per_token(s.model, s.precision, s.tp, s.pp, s.attention_dp))



def _retire(run: np.ndarray, generated: np.ndarray, out: np.ndarray, need: np.ndarray, finish: np.ndarray,
            now: float, used: int, running: list[int]) -> tuple[int, list[int]]:
    """Finish the requests of ``run`` that have produced all their tokens: stamp ``finish``, free their KV cache.
    Returns the KV tokens still in use and the requests still running."""
    done = run[generated[run] >= out[run]]
    if not len(done):
        return used, running
    finish[done] = now
    done_set = set(done.tolist())
    return used - int(need[done].sum()), [r for r in running if r not in done_set]

def prompt_chunks(left: np.ndarray, budget: int | np.ndarray, group: np.ndarray | None = None) -> np.ndarray:
    """Prompt tokens each waiting request gets this step, first come first served: request ``i`` takes up to its
    ``left[i]`` remaining tokens from what the requests before it left of ``budget`` (vectorised). ``group``: each
    request's scheduler (an attention-DP rank), ``budget`` then one per group: a request shares its own group's
    budget with the requests of that group before it."""
    left = np.asarray(left, dtype=np.int64)
    if group is None:
        before = np.concatenate([[0], np.cumsum(left)[:-1]]) if len(left) else left
        return np.clip(int(budget) - before, 0, left)  # type: ignore[arg-type]
    g = np.asarray(group, dtype=np.int64)
    order = np.argsort(g, kind="stable")  # FCFS within each group
    lo, go = left[order], g[order]
    ahead = np.cumsum(lo) - lo  # tokens of every request before it
    starts = np.maximum.accumulate(np.where(np.r_[True, go[1:] != go[:-1]], np.arange(len(lo)), 0))
    take = np.empty_like(left)
    take[order] = np.clip(np.asarray(budget, dtype=np.int64)[go] - (ahead - ahead[starts]), 0, lo)
    return take


def simulate(s: InferenceSetup, trace: Trace, cost_model: OpCostModel | None = None,
             sched: SchedulerConfig | None = None, costs: StepCosts | None = None) -> ServeResult:
    """Run the trace through the continuous-batching scheduler; see the module docstring for the policy."""
    if s.pp != 1:
        raise InvalidInputError("continuous-batching simulation supports tensor parallelism only (pp = 1)")
    if not np.isfinite(trace.arrival_s).all():  # the scheduler's clock could never reach a NaN arrival
        raise InvalidInputError("every arrival time of a trace must be a finite number")
    if (np.diff(trace.arrival_s) < 0).any():
        # the scheduler admits first come first served in the trace's order: a request listed after a later one
        # waited for it (arrivals 5 s, 0 s: the second request's TTFT came out 5 s, the duration 0.06 s)
        i = int(np.flatnonzero(np.diff(trace.arrival_s) < 0)[0])
        raise InvalidInputError(f"a trace's requests must be in order of arrival: request {i + 2} arrives at "
                                f"{trace.arrival_s[i + 1]:g} s, before request {i + 1} at {trace.arrival_s[i]:g} s "
                                "(read_trace and make_trace sort them)")
    check_generates(s.model, trace.output_len)
    sched = sched or SchedulerConfig()
    cap = kv_capacity_tokens(s, sched)
    need = (trace.input_len + trace.output_len).astype(np.int64)
    if s.model.kv_cap:
        need = np.ceil(cached_tokens(s.model, need)).astype(np.int64)
    if cap <= 0:  # say what takes the memory, as the static batch's plan does
        ranks, act_tp = (s.tp, 1) if s.attention_dp else (1, s.tp)
        w = weight_bytes_per_gpu(s.model, s.precision, s.tp, s.pp, s.attention_dp, s.parallel_embedding) / GIB
        act = float(activation_bytes(s.model, s.precision, sched.max_batched_tokens, sched.max_seqs, act_tp)) / GIB
        raise InvalidInputError(
            f"does not fit: no memory left for the KV cache: weights {w:.1f} GiB + a step's activations {act:.1f} GiB "
            f"(--max-batched-tokens, --max-seqs) + reserve {s.reserve_gib:g} GiB per GPU of "
            f"{s.device.mem_capacity / GIB:.1f} GiB" + ("; use more tensor parallelism or smaller weights"
                                                      if w + s.reserve_gib >= s.device.mem_capacity / GIB else ""))
    # a request is cached whole on one rank (with attention data parallelism the ranks' caches are pooled for
    # admission, but no request spans two of them)
    per_rank = cap // (s.tp if s.attention_dp else 1)
    if need.max() > per_rank:
        raise InvalidInputError(f"does not fit: a request of {int(need.max())} tokens needs more KV cache than the "
                                f"{per_rank} tokens that fit per GPU")
    if costs is None:
        costs = StepCosts.build(s, sched.max_batched_tokens, sched.max_seqs,
                                int((trace.input_len + trace.output_len).max()), cost_model,
                                prompt_lengths=trace.input_len)
    n = len(trace)
    # the clock starts at the first arrival (a trace in Unix time keeps its sub-microsecond resolution), and it
    # must still resolve a step at the last one: at 1e-300 requests/s every step added nothing to a clock near
    # 1e300 s, and TTFT, TPOT and latency all came out 0
    arr = trace.arrival_s - float(np.min(trace.arrival_s))
    span = float(np.max(arr))
    if np.spacing(span) > 1e-6:  # a microsecond: a step is at least several
        raise InvalidInputError(f"the arrivals span {span:.3g} s, too long for the simulation's clock to time engine "
                                "steps (microseconds) in double precision; use a higher rate or a shorter trace")
    inp, out = trace.input_len.astype(np.int64), trace.output_len.astype(np.int64)
    prefilled = np.zeros(n, dtype=np.int64)
    generated = np.zeros(n, dtype=np.int64)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    running: list[int] = []
    # attention data parallelism: each request runs (and is cached) whole on one rank, the least loaded (fewest
    # running requests, the lowest rank on a tie) of those whose own cache holds it when it is admitted, as
    # DP-attention schedulers place them (checked against the ranks' pooled cache, a ninth request of 60% of a
    # rank's cache went onto a rank already holding one)
    dp = s.tp if s.attention_dp else 1
    rank = np.zeros(n, dtype=np.int64)

    def place(i: int, running: list[int]) -> int:
        """The rank request ``i`` is admitted onto now (0 without attention DP), or -1 when no cache holds it or
        every rank runs ``max_seqs`` requests (an attention-DP rank's own limit)."""
        if dp == 1:
            return 0 if used + need[i] <= cap and len(running) < sched.max_seqs else -1
        run_ = np.asarray(running, dtype=np.int64)
        held = np.bincount(rank[run_], weights=need[run_].astype(np.float64), minlength=dp)
        load = np.bincount(rank[run_], minlength=dp).astype(np.float64)
        load[(held + need[i] > per_rank) | (load >= sched.max_seqs)] = np.inf
        r = int(np.argmin(load))
        return r if math.isfinite(load[r]) else -1

    def rank_contexts(ids: np.ndarray, k: int = 1) -> np.ndarray:
        """``[dp, k]``: each rank's mean context over its requests among ``ids`` for ``k`` decode steps."""
        ctx = (inp[ids] + generated[ids]).astype(np.float64)
        if not s.model.kv_cap:  # the mean context, one token longer a step
            held = np.bincount(rank[ids], minlength=dp)
            mean = np.bincount(rank[ids], weights=ctx, minlength=dp) / np.maximum(held, 1)
            return mean[:, None] + np.arange(k, dtype=np.float64)[None, :]
        return np.stack([mean_context(s.model, ctx[rank[ids] == r], k) for r in range(dp)])

    nxt = 0  # next request not yet admitted (FCFS)
    used = 0
    now = 0.0
    steps = 0
    max_running = 0
    while nxt < n or running:
        if not math.isfinite(now):  # a step priced NaN froze the clock: no request was ever admitted again (a hang)
            raise HybridError(f"the simulation's clock is no longer a finite time after {steps} steps (a step's cost "
                              "came out NaN or infinite); this is a bug, please report the command")
        # admit arrived requests in order while their whole KV cache fits
        while nxt < n and arr[nxt] <= now and (r := place(nxt, running)) >= 0:
            rank[nxt] = r
            running.append(nxt)
            used += int(need[nxt])
            nxt += 1
        if not running:
            now = max(now, float(arr[nxt]))
            continue
        max_running = max(max_running, len(running))
        run = np.array(running, dtype=np.int64)
        dec = run[prefilled[run] >= inp[run]]
        if len(dec) == len(run):
            # decode-only stretch: nothing changes until a request finishes or an admissible one arrives, so the
            # steps up to that event are costed at once (contexts grow by one token per step)
            k = int((out[run] - generated[run]).min())
            ctx = mean_context(s.model, inp[run] + generated[run], k)
            if dp > 1:  # each rank's own requests and contexts: the step waits for the busiest
                dts = costs.decode_steps_us(len(run), ctx, np.bincount(rank[run], minlength=dp),
                                            rank_contexts(run, k)) / 1e6
            else:
                dts = costs.decode_steps_us(len(run), ctx) / 1e6
            ends = now + np.cumsum(dts)
            if nxt < n and arr[nxt] < ends[-1] and place(nxt, running) >= 0:
                k = int(np.searchsorted(ends, arr[nxt], side="left")) + 1
            now = float(ends[k - 1])
            steps += k
            generated[run] += k
            used, running = _retire(run, generated, out, need, finish, now, used, running)
            continue
        # prompt chunks, FCFS, within the token budget: each waiting prompt takes what the ones before it left;
        # attention-DP ranks schedule their own requests, each with a budget of its own (SGLang's DP attention,
        # TensorRT-LLM's attention DP: one scheduler per rank), which the ranks' prompts fill in the same step
        waiting = run[prefilled[run] < inp[run]]
        if dp > 1:
            budget_r = sched.max_batched_tokens - np.bincount(rank[dec], minlength=dp)
            take = prompt_chunks(inp[waiting] - prefilled[waiting], budget_r, rank[waiting])
        else:
            take = prompt_chunks(inp[waiting] - prefilled[waiting], sched.max_batched_tokens - len(dec))
        pre_a = waiting[take > 0].astype(np.int64)
        chunks_a = take[take > 0].astype(np.float64)
        ctx_chunk = prefilled[pre_a] + chunks_a if len(pre_a) else np.zeros(0)
        mean_ctx = float(mean_context(s.model, inp[dec] + generated[dec])[0]) if len(dec) else 0.0
        completes = pre_a[prefilled[pre_a] + chunks_a.astype(np.int64) >= inp[pre_a]] if len(pre_a) else pre_a
        tokens = len(dec) + float(chunks_a.sum())
        ranks = None
        if dp > 1:  # each rank's own output sequences, decode requests and their mean context, prompt chunks
            dec_r = np.bincount(rank[dec], minlength=dp)
            ranks = RankLoads(dec_r + np.bincount(rank[completes], minlength=dp), dec_r,
                              rank_contexts(dec)[:, 0] if len(dec) else np.zeros(dp), rank[pre_a])
        dt = costs.step_us(tokens, len(dec) + len(completes), len(dec), mean_ctx, chunks_a, ctx_chunk, ranks) / 1e6
        now += dt
        steps += 1
        if len(pre_a):
            prefilled[pre_a] += chunks_a.astype(np.int64)
        generated[dec] += 1
        generated[completes] += 1
        first[completes] = now
        used, running = _retire(run, generated, out, need, finish, now, used, running)
    ttft = (first - arr) * 1e3
    lat = (finish - arr) * 1e3
    # a request of one output token has no time per output token (NaN: left out of TPOT percentiles and SLOs)
    tpot = np.where(out > 1, (finish - first) * 1e3 / np.maximum(out - 1, 1), np.nan)
    duration = float(np.nanmax(finish) - arr[0])
    thr = float(out.sum()) / duration / s.gpus if duration > 0 else float("nan")
    growth = queue_growth_note(arr, ttft, duration)
    return ServeResult(trace_rate(trace), ttft, tpot, lat, thr, duration, steps, cap, max_running,
                       notes=[f"scheduler: FCFS, chunked prefill, {sched.max_batched_tokens} tokens/step"
                              f"{' per attention-DP rank' if dp > 1 else ''}, "
                              f"<= {sched.max_seqs} running{' per rank' if dp > 1 else ''}, whole-request KV reservation ({per_rank} tokens/GPU"
                              f"{f', {cap} over the {dp} ranks' if dp > 1 else ''})"]
                       + [x for x in [context_note(s.model, int((inp + out).max())), growth] if x],
                       overloaded=bool(growth))


#: Fewest requests whose first and last quarters :func:`queue_growth_note` compares (fewer: too noisy to say).
QUEUE_GROWTH_MIN_REQUESTS = 40
#: How much longer the last quarter's median TTFT must be than the first quarter's to call the queue growing.
QUEUE_GROWTH_RATIO = 2.0


def queue_growth_note(arrival_s: np.ndarray, ttft_ms: np.ndarray, duration_s: float) -> str:
    """A note when the arrivals outpace the deployment ('' otherwise): the requests' time to first token grows over
    the run (the last quarter's median at least :data:`QUEUE_GROWTH_RATIO` times the first quarter's) and the
    requests completed per second fall short of the arrival rate. Then there is no steady state: the percentiles
    grow with the number of requests simulated, and a user reading them as the deployment's latency at that rate
    would be misled. ``arrival_s`` from 0, in order; a burst (every request at once) is overloaded by design and
    gets no note."""
    n = len(arrival_s)
    span = float(arrival_s[-1] - arrival_s[0]) if n else 0.0
    if n < QUEUE_GROWTH_MIN_REQUESTS or span <= 0 or duration_s <= 0:
        return ""
    q = n // 4
    first, last = float(np.median(ttft_ms[:q])), float(np.median(ttft_ms[-q:]))
    offered = (n - 1) / span
    served = n / duration_s
    if not (last >= QUEUE_GROWTH_RATIO * first and served < 0.95 * offered):
        return ""
    return (f"the queue grows over the run: requests arrive at {offered:.3g}/s and this deployment completes about "
            f"{served:.3g}/s; the last quarter of the requests waited {last / 1e3:.3g} s for their first token "
            f"(median) against {first / 1e3:.3g} s for the first quarter, so the percentiles grow with the number of "
            "requests simulated and describe no steady state (lower the rate, or give an SLO for the highest rate "
            "that meets it)")


def trace_rate(trace: Trace) -> float:
    span = float(trace.arrival_s[-1] - trace.arrival_s[0])
    return (len(trace) - 1) / span if span > 0 else float("inf")


@dataclass(frozen=True)
class SLO:
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    latency_ms: float | None = None
    percentile: float = 99.0

    def met(self, r: ServeResult) -> bool:
        q = self.percentile
        ok = True
        for val, arr in ((self.ttft_ms, r.ttft_ms), (self.tpot_ms, r.tpot_ms), (self.latency_ms, r.latency_ms)):
            arr = arr[np.isfinite(arr)]  # TPOT: only requests that generate more than one token have one
            if val is not None and len(arr):
                ok &= float(np.percentile(arr, q)) <= val
        return bool(ok)

    @property
    def empty(self) -> bool:
        return self.ttft_ms is None and self.tpot_ms is None and self.latency_ms is None


def max_rate(s: InferenceSetup, slo: SLO, n: int, input_dist: LengthDist | None, output_dist: LengthDist | None,
             cost_model: OpCostModel | None = None, sched: SchedulerConfig | None = None, seed: int = 0,
             iterations: int = 10, trace: Trace | None = None, progress: bool = False, arrival: str = "poisson"
             ) -> tuple[float, ServeResult | None]:
    """The highest arrival rate (req/s; ``arrival``: Poisson or evenly spaced, as :func:`make_trace`) whose
    simulated percentiles meet ``slo``: a rate that meets it and one that misses it are found first (the upper
    one from the saturated throughput, doubled until it misses), then bisected on a log scale (the same random
    draws at every rate). With ``trace``, its arrival times are compressed or stretched instead (same requests,
    same order). Returns (0, None) when even a trickle misses it, and ``(inf, result)`` when even all ``n``
    requests arriving at once meet it: then the SLO does not bound the rate of so few requests (simulate more)."""
    if slo.empty:
        raise InvalidInputError("give at least one SLO (--slo-ttft, --slo-tpot or --slo-latency)")
    sched = sched or SchedulerConfig()
    if trace is None and (input_dist is None or output_dist is None):
        raise InvalidInputError("give length distributions or a trace")
    probe = trace if trace is not None else make_trace(1.0, n, input_dist, output_dist, seed, arrival)
    if slo.ttft_ms is None and slo.latency_ms is None and not (probe.output_len > 1).any():
        # TPOT is over the requests that generate more than one token: none here, so a TPOT-only SLO would be met
        # at every rate and read as "even a burst meets it"
        raise InvalidInputError("--slo-tpot: no request generates more than one token, so none has a TPOT (time per "
                                "output token after the first) to check; give output lengths above 1 or a TTFT or "
                                "latency SLO")
    costs = StepCosts.build(s, sched.max_batched_tokens, sched.max_seqs,
                            int((probe.input_len + probe.output_len).max()), cost_model,
                            prompt_lengths=probe.input_len)
    base = trace_rate(probe) if trace is not None and len(trace) > 1 else 1.0
    if not math.isfinite(base):
        # every request of the trace arrives at the same time: there are no gaps to compress or stretch (scaling
        # them gave 0 x inf = NaN arrival times, on which the scheduler never advanced), so the trace is one burst
        burst = simulate(s, trace, cost_model, sched, costs)
        if slo.met(burst):
            return math.inf, burst
        raise InvalidInputError(f"the trace's {len(trace)} requests all arrive at the same time, so it has no "
                                "arrival rate to search over, and all at once they miss the SLO: give arrival "
                                "times spread out (or --rate with --input-dist / --output-dist)")

    def run(rate: float) -> ServeResult:
        if trace is not None:
            t = Trace(trace.arrival_s * (base / rate), trace.input_len, trace.output_len)
        else:
            t = make_trace(rate, n, input_dist, output_dist, seed, arrival)
        return simulate(s, t, cost_model, sched, costs)

    lo_rate = 1e-3
    lo = run(lo_rate)
    if not slo.met(lo):
        return 0.0, None
    burst_rate = 1e6  # every request at (almost) once
    burst = run(burst_rate)
    if slo.met(burst):
        return math.inf, burst
    # the saturated throughput bounds the useful rates; a bound that still meets the SLO (a short trace drains
    # before its queue grows) is doubled until it misses, so the bisection brackets the answer
    mean_out = float(np.mean(probe.output_len))
    hi_rate = max(burst.output_tokens_per_s_per_gpu * s.gpus / max(mean_out, 1.0) * 1.5, lo_rate * 2)
    best, lo_r = lo, lo_rate
    while hi_rate < burst_rate:
        r = run(hi_rate)
        if not slo.met(r):
            break
        lo_r, best = hi_rate, r
        hi_rate *= 2.0
    hi_rate = min(hi_rate, burst_rate)
    from tqdm.auto import tqdm

    for _ in tqdm(range(iterations), desc=f"SLO rate search ({s.system.key})", unit="sim", disable=not progress,
                  leave=False):
        mid = math.sqrt(lo_r * hi_rate)
        r = run(mid)
        if slo.met(r):
            lo_r, best = mid, r
        else:
            hi_rate = mid
    return lo_r, best
