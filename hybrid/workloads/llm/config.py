"""LLM training job description: the parallel mapping (Megatron-LM style) and the switches that change cost.

DP = GPUs / (TP x PP x CP). Rank order is Megatron-LM's default ``tp-cp-ep-dp-pp`` (TP fastest), so a TP group
is ``tp`` consecutive GPUs (inside one node when ``tp <= gpus_per_node``), CP groups stride ``tp``, DP groups
stride ``tp x cp`` and pipeline neighbours are ``tp x cp x dp`` GPUs apart (:func:`group_nodes`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from hybrid.errors import InvalidInputError
from hybrid.ops.roofline import softmax_schedule
from hybrid.units import normalize_dtype

RECOMPUTE = ("none", "selective", "full")
DTYPES = ("bf16", "fp16", "fp8", "fp32")
#: When fp8 training casts a GEMM's weight to fp8 (:attr:`TrainingConfig.fp8_weight_cast`).
FP8_WEIGHT_CASTS = ("microbatch", "step")


@dataclass(frozen=True)
class TrainingConfig:
    """One training job. ``seq_length`` None = the model's; ``dp`` is derived."""

    gpus: int
    global_batch: int
    micro_batch: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    vp: int = 1  # virtual pipeline stages (model chunks) per rank: interleaved 1F1B when > 1
    seq_length: int | None = None
    sp: bool = False  # sequence parallelism (norms/dropout split over TP; RS+AG instead of AR)
    distributed_optimizer: bool = False  # ZeRO-1: optimizer states sharded over DP
    fsdp: bool = False  # ZeRO-3: states sharded over DP, gathered per layer (with PP: per stage, once per step)
    recompute: str = "none"
    dtype: str = "bf16"  # compute dtype of GEMMs; fp8 = fp8 GEMMs, bf16 everything else; fp32 = no mixed precision
    flash_attention: bool = True
    #: how the fused attention kernel schedules the softmax's exps: ``auto`` (by GPU generation: overlapped from
    #: Hopper on), ``serial`` (FlashAttention-2, PyTorch's SDPA default) or ``overlapped`` (FlashAttention-3, cuDNN /
    #: Transformer Engine); :func:`hybrid.ops.roofline.softmax_schedule`
    softmax: str = "auto"
    #: hidden/attention/embedding dropout: None = the model's own (:attr:`TransformerConfig.dropout`: on for
    #: Megatron GPT, GPT-2, BERT; off for Llama, Mistral, Qwen, DeepSeek, MPT, ...), True / False override it
    dropout: bool | None = None
    overlap_grad_reduce: bool = True  # DP gradient reduce in buckets during the last backward
    overlap_param_gather: bool = True  # distributed optimizer / FSDP parameter all-gather prefetch
    tp_comm_overlap: bool = False  # TP collectives hidden behind the adjacent GEMMs (userbuffers)
    #: dtype gradients are accumulated and reduced in (Megatron's gradient buffer); None: the framework default
    #: for the job's dtype (:attr:`grad_dtype`)
    grad_reduce_dtype: str | None = None
    #: dtype of FSDP-gathered parameters (fp32 for PyTorch "DEFAULT" mixed prec.); None: the job's, fp32 for fp32
    #: training (no mixed precision: FSDP gathers the fp32 parameters it computes with), bf16 otherwise
    #: (:attr:`fsdp_gather_dtype`)
    fsdp_param_dtype: str | None = None
    reserve_gib: float = 3.0  # CUDA context, NCCL buffers, allocator fragmentation (stated assumption)
    #: Megatron pads the vocabulary to a multiple of this x TP
    make_vocab_size_divisible_by: int = 128
    #: GPU ops cost their kernel time: a model calibrated on eager per-op timings (an own ``hybrid profile``) has
    #: its fitted per-op dispatch taken off (:class:`hybrid.engine.costs.KernelTimeModel`), as Megatron-style
    #: runs enqueue kernels ahead of the GPU. False: eager per-op costs, dispatch included (small eager runs that
    #: wait on the host, e.g. the NeuSight labels). Models calibrated on kernel times carry no dispatch.
    kernel_times: bool = True
    #: fp8 training (``dtype="fp8"``, Transformer Engine's recipe): how often each fp8 GEMM's bf16 weight is cast
    #: (with its transpose) to fp8: ``"microbatch"`` (Transformer Engine's default, ``is_first_microbatch=None``:
    #: every forward) or ``"step"`` (once per iteration, as Megatron-LM runs it by passing ``is_first_microbatch``).
    #: Activations and output gradients are cast every microbatch either way.
    fp8_weight_cast: str = "microbatch"

    def __post_init__(self) -> None:
        if self.dropout is not None and not isinstance(self.dropout, (bool, np.bool_)):
            raise InvalidInputError(f"training config: dropout must be true, false or none (the model's), "
                                    f"got {self.dropout!r}")
        if not isinstance(self.kernel_times, (bool, np.bool_)):
            raise InvalidInputError(f"training config: kernel_times must be true or false, got {self.kernel_times!r}")
        for f in ("gpus", "global_batch", "micro_batch", "tp", "pp", "cp", "ep", "vp",
                  "make_vocab_size_divisible_by"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
                raise InvalidInputError(f"training config: {f} must be a positive integer, got {v!r}")
        if self.seq_length is not None and (isinstance(self.seq_length, bool)
                                            or not isinstance(self.seq_length, (int, np.integer))
                                            or self.seq_length <= 0):
            raise InvalidInputError(f"training config: seq_length must be a positive integer, got {self.seq_length!r}")
        softmax_schedule(self.softmax)  # a clear error for an unknown schedule
        object.__setattr__(self, "softmax", str(self.softmax).strip().lower())
        rc = str(self.recompute).lower()
        if rc not in RECOMPUTE:
            raise InvalidInputError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        object.__setattr__(self, "recompute", rc)
        dt = normalize_dtype(self.dtype)
        if dt not in DTYPES:
            raise InvalidInputError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        object.__setattr__(self, "dtype", dt)
        wc = str(self.fp8_weight_cast).strip().lower()
        if wc not in FP8_WEIGHT_CASTS:
            raise InvalidInputError(f"fp8_weight_cast must be one of {', '.join(FP8_WEIGHT_CASTS)}, "
                                    f"got {self.fp8_weight_cast!r}")
        object.__setattr__(self, "fp8_weight_cast", wc)
        if self.grad_reduce_dtype is not None:
            object.__setattr__(self, "grad_reduce_dtype", normalize_dtype(self.grad_reduce_dtype))
        if self.fsdp_param_dtype is not None:
            object.__setattr__(self, "fsdp_param_dtype", normalize_dtype(self.fsdp_param_dtype))
        if isinstance(self.reserve_gib, bool) or not isinstance(self.reserve_gib, int | float) \
                or not (np.isfinite(self.reserve_gib) and self.reserve_gib >= 0):
            raise InvalidInputError(f"reserve_gib must be >= 0, got {self.reserve_gib!r}")
        model_par = self.tp * self.pp * self.cp
        if self.gpus % model_par:
            raise InvalidInputError(f"gpus ({self.gpus}) must be divisible by tp x pp x cp "
                                    f"({self.tp} x {self.pp} x {self.cp} = {model_par})")
        dp = self.gpus // model_par
        if self.global_batch % (self.micro_batch * dp):
            raise InvalidInputError(f"global batch ({self.global_batch}) must be divisible by micro batch x DP "
                                    f"({self.micro_batch} x {dp} = {self.micro_batch * dp})")
        if self.vp > 1 and self.pp == 1:
            raise InvalidInputError("virtual pipeline stages (vp > 1) need pipeline parallelism (pp > 1)")
        if self.vp > 1 and self.num_microbatches % self.pp:
            raise InvalidInputError(f"the interleaved schedule needs the number of microbatches "
                                    f"({self.num_microbatches}) divisible by pp ({self.pp})")
        if self.fsdp and self.distributed_optimizer:
            raise InvalidInputError("choose one of --fsdp and --distributed-optimizer (FSDP already shards "
                                    "the optimizer)")
        if (dp * self.cp) % self.ep:
            raise InvalidInputError(f"expert parallelism ep ({self.ep}) must divide DP x CP ({dp * self.cp})")

    # ---------------------------------------------------------------------------------------------- derived
    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp * self.cp)

    @property
    def num_microbatches(self) -> int:
        return self.global_batch // (self.micro_batch * self.dp)

    def seq(self, model: Any) -> int:
        return int(self.seq_length or model.seq_length)

    def validate_for(self, model: Any) -> None:
        """Model-dependent checks (clear one-line errors)."""
        t = self.tp
        if model.num_attention_heads % t:
            raise InvalidInputError(f"attention heads ({model.num_attention_heads}) must be divisible by "
                                    f"tensor parallel size ({t})")
        if model.num_kv_heads % t and t % model.num_kv_heads:
            raise InvalidInputError(f"KV heads ({model.num_kv_heads}) and tensor parallel size ({t}) must divide "
                                    "one another")
        if model.num_layers % (self.pp * self.vp):
            raise InvalidInputError(f"layers ({model.num_layers}) must be divisible by pp x vp "
                                    f"({self.pp} x {self.vp} = {self.pp * self.vp})")
        s = self.seq(model)
        if s % (2 * self.cp) and self.cp > 1:
            raise InvalidInputError(f"sequence length ({s}) must be divisible by 2 x cp ({2 * self.cp})")
        if model.is_moe and model.num_experts % self.ep:
            raise InvalidInputError(f"experts ({model.num_experts}) must be divisible by ep ({self.ep})")
        if not model.is_moe and self.ep > 1:
            raise InvalidInputError(f"expert parallelism (ep={self.ep}) needs a mixture-of-experts model")
        if model.encoder_only and self.pp > 1:
            raise InvalidInputError("pipeline parallelism is supported for decoder models only")
        if self.cp > 1 and not self.flash_attention:
            raise InvalidInputError("context parallelism is modelled as ring attention over FlashAttention blocks: "
                                    "drop --no-flash-attention or use cp 1")
        if self.sp and t > 1 and (s // self.cp) % t:
            raise InvalidInputError(f"sequence parallelism splits each CP rank's {s // self.cp} tokens over tp "
                                    f"({t}): they must be divisible by it")

    @property
    def grad_dtype(self) -> str:
        """The dtype gradients are accumulated and reduced in: :attr:`grad_reduce_dtype` when set, else Megatron-LM's
        default for the job's dtype. ``--bf16`` forces ``accumulate_allreduce_grads_in_fp32`` ("bfloat16 requires
        gradient accumulation and all-reduce to be done in fp32", megatron/training/arguments.py), fp8 training
        runs with ``--bf16`` too, fp32 has nothing else; ``--fp16`` leaves the store-true flag off, so its gradient
        buffer is fp16 (PyTorch FSDP's MixedPrecision also reduces in its fp16 param_dtype when no reduce_dtype is
        given)."""
        if self.grad_reduce_dtype is not None:
            return self.grad_reduce_dtype
        return "fp16" if self.dtype == "fp16" else "fp32"

    @property
    def fsdp_gather_dtype(self) -> str:
        """The dtype FSDP gathers parameters in: :attr:`fsdp_param_dtype` when set, else fp32 for fp32 training and
        bf16 for mixed precision (bf16, fp16, fp8: Transformer Engine's fp8 keeps bf16 weights)."""
        if self.fsdp_param_dtype is not None:
            return self.fsdp_param_dtype
        return "fp32" if self.dtype == "fp32" else "bf16"

    def uses_dropout(self, model: Any) -> bool:
        """Whether the job trains with dropout: :attr:`dropout` when set, else the model's own."""
        return bool(model.dropout) if self.dropout is None else bool(self.dropout)

    def uses_attention_dropout(self, model: Any) -> bool:
        """Whether the job drops out attention probabilities: :attr:`dropout` when set (on or off for all of them),
        else with the model's dropout unless its config has none on the attention (``attention_dropout`` False:
        OPT's 0.0 beside a hidden dropout of 0.1)."""
        if self.dropout is not None:
            return bool(self.dropout)
        return bool(model.dropout) and getattr(model, "attention_dropout", None) is not False

    def dropout_source(self) -> str:
        """Where :meth:`uses_dropout` comes from: ``"model"`` (its config) or ``"override"`` (set on the job)."""
        return "model" if self.dropout is None else "override"

    def padded_vocab(self, model: Any) -> int:
        m = self.make_vocab_size_divisible_by * self.tp
        return int(math.ceil(model.vocab_size / m) * m)

    def with_(self, **changes: Any) -> TrainingConfig:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["dp"] = self.dp
        d["num_microbatches"] = self.num_microbatches
        return d


def group_nodes(size: int, stride: int, gpus_per_node: int, ranks: int | None = None) -> int:
    """Nodes spanned by the most spread group of ``size`` ranks ``stride`` apart (ranks packed ``gpus_per_node``
    per node, groups tiling the ranks in blocks of ``size x stride``). A group whose span does not divide the node
    straddles two: TP 6 on 8-GPU nodes puts ranks 6-11 on two nodes, so its collectives cross the NICs.
    ``ranks``: the job's GPUs, when known: only the groups it has count (6 GPUs of an 8-GPU node are one DP group
    inside the node; without it, the group at ranks 6-11 that a larger job would have is counted)."""
    return int(group_nodes_vec(np.array([size]), np.array([stride]), gpus_per_node, ranks)[0])


def _most_nodes(size: int, stride: int, gpn: int, ranks: int | None = None) -> int:
    if size <= 1:
        return 1
    if stride >= gpn:  # ranks a node or more apart: one per node
        return size
    span = (size - 1) * stride
    # group starts a + b * size * stride (a < stride); their offsets within a node repeat within gpn blocks, and a
    # job of `ranks` GPUs has only ranks / (size x stride) blocks
    blocks = gpn if ranks is None else max(1, min(gpn, int(ranks) // (size * stride)))
    starts = (np.arange(stride)[:, None] + np.arange(blocks)[None, :] * size * stride) % gpn
    return int(((starts + span) // gpn).max()) + 1


def group_nodes_vec(size: np.ndarray, stride: np.ndarray, gpus_per_node: int,
                    ranks: int | None = None) -> np.ndarray:
    """:func:`group_nodes` for arrays of sizes and strides (one evaluation per distinct pair) in a job of
    ``ranks`` GPUs (None: any number of groups)."""
    size = np.asarray(size, dtype=np.int64).reshape(-1)
    stride = np.maximum(np.asarray(stride, dtype=np.int64).reshape(-1), 1)
    size, stride = np.broadcast_arrays(size, stride)
    pairs, inverse = np.unique(np.stack([size, stride], axis=1), axis=0, return_inverse=True)
    nodes = np.array([_most_nodes(int(n), int(s), int(gpus_per_node), ranks) for n, s in pairs], dtype=np.int64)
    return nodes[np.asarray(inverse).reshape(-1)]
