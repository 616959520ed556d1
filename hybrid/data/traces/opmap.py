"""Map traced ATen ops to op families: one canonical op row (shapes, dtype) per op the tool can cost.

:func:`map_op` looks at an op's name, input shapes and types (and output shapes and concrete arguments where
the trace has them) and answers with an :class:`OpMapping`:

* ``kind="op"``: a row of the canonical measurement table (``op`` + the family's shape columns + ``dtype``)
  that any :class:`~hybrid.engine.costs.OpCostModel` can cost on any device, and a breakdown ``label`` (gemm,
  attention, conv, norm, softmax, dropout, embedding, elementwise, reduction, optimizer, copy, pool, upsample,
  grid_sample, sort, fold, fft);
* ``kind="collective"``: a collective (``op`` = all_reduce, ..., ``size_bytes`` in the nccl-tests convention);
* ``kind="view"``: an op that launches no kernel (views, ``empty``, metadata): host time only;
* ``None``: not mapped here. The graph builder then looks inside the op (a composite op's children are mapped
  one by one) and only a leaf nobody maps is *unmodelled*.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hybrid.data.traces.parse import CUDA_SYNC_CALLS, PG_OP_RE
from hybrid.ops.families import (
    ACTIVATION_BACKWARD_OPS,
    ACTIVATION_BWD_FLOPS,
    ELEMENTWISE_VARIANTS,
    grid_sample_row,
    pool_row,
    upsample_row,
)

#: Ops that launch no kernel when they are leaves (views, allocation, metadata); a composite op of these names
#: (``aten::reshape`` that copies, ``aten::to`` that converts) is looked into instead.
VIEW_OPS = frozenset(
    "view reshape _reshape_alias _unsafe_view t transpose transpose_ permute expand expand_as as_strided slice "
    "select unsqueeze unsqueeze_ squeeze squeeze_ split split_with_sizes chunk narrow detach detach_ alias "
    "unflatten flatten view_as resolve_conj resolve_neg empty empty_like empty_strided new_empty "
    "new_empty_strided resize_ lift_fresh set_ size stride numel is_nonzero result_type to contiguous dropout "
    "unbind movedim swapaxes diagonal indices values coalesce _indices _values _nested_tensor_from_mask "
    "is_same_size _has_compatible_shallow_copy_type item _local_scalar_dense scalar_tensor "
    "unsafe_split align_tensors broadcast_tensors meshgrid type_as "
    # views an RNN cell splits its gates with (a GRU's per-step ``unsafe_chunk``), and cuDNN's host-side check
    "unsafe_chunk unsafe_split_with_sizes cudnn_is_acceptable "
    # DDP's views of a flat bucket back into its gradients (``narrow`` + ``view`` per tensor); complex views
    "unflatten_dense_tensors real imag view_as_real view_as_complex conj _conj "
    # transposed and split views (Falcon's and CLIP's ``.T``, Mamba's ``tensor_split``)
    "numpy_T mT mH adjoint matrix_H swapdims moveaxis tensor_split hsplit vsplit dsplit reshape_as "
    # a broadcast view (WavLM's relative position bias: ``expand`` inside), an output resized like another tensor
    # before a kernel writes it (the CPU GLU backward's)
    "broadcast_to resize_as "
    # ``Tensor.unfold``'s sliding windows (a strided view: audio framing, patching), autograd's zero tensor
    # without storage
    "unfold _efficientzerotensor "
    # a sparse tensor's metadata, read or set (an EmbeddingBag(sparse=True) gradient's SparseAdam step asks
    # ``_nnz`` / ``is_coalesced`` of it): no kernel, and no op to list as unmodelled
    "_nnz is_coalesced _coalesced_ sparse_dim dense_dim _dimI _dimV".split())

#: Elementwise op base name -> (breakdown label, variant, FLOPs per element). Inputs/outputs come from shapes.
ELEMENTWISE: dict[str, tuple[str, str, float]] = {}
for _names, _label, _var, _f in (
    ("add sub rsub mul div true_divide floor_divide remainder maximum minimum eq ne lt le gt ge logical_and "
     "logical_or bitwise_and bitwise_or", "elementwise", "add", 1.0),
    ("neg abs sign reciprocal relu clamp clamp_min clamp_max threshold hardtanh leaky_relu logical_not "
     "bitwise_not masked_fill where square tril triu flip roll sgn isinf isnan isfinite isposinf isneginf "
     "nan_to_num logical_xor bitwise_xor floor ceil round trunc frac fmod "
     # piecewise-linear activations: PReLU (its per-channel weight broadcast), shrinkage, randomised leaky ReLU
     "prelu _prelu_kernel hardshrink softshrink rrelu rrelu_with_noise", "elementwise", "relu", 1.0),
    ("gelu erf softplus mish", "elementwise", "gelu", 8.0),
    ("silu sigmoid tanh hardswish hardsigmoid elu selu celu log_sigmoid log_sigmoid_forward", "elementwise",
     "silu", 4.0),
    ("exp log log1p expm1 sqrt rsqrt pow sin cos exp2 log2 log10 tan sinh cosh asin acos atan atan2 erfc "
     "erfinv hypot logit xlogy xlog1py special_xlog1py logaddexp logaddexp2 sinc", "elementwise", "exp", 2.0),
    ("lerp addcmul addcdiv", "elementwise", "add", 2.0),
    # the log-gamma function and its derivatives (a Student-t or negative-binomial likelihood: the time-series
    # transformers' loss): series and recurrences, 2-7x an exp's time on the project's CPU
    ("lgamma digamma polygamma mvlgamma", "elementwise", "exp", 8.0),
    ("copy _to_copy clone _copy_from _copy_from_and_resize cat stack index_select gather scatter scatter_add "
     "scatter_reduce index_reduce index_add index index_put _index_put_impl masked_select repeat "
     "constant_pad_nd pad fill zero zeros_like ones_like full full_like zeros ones fill_ zero_ new_zeros "
     "new_ones new_full arange linspace logspace bernoulli uniform normal randn rand "
     # in-place samplers (``randint`` fills its output with ``random_``)
     "random exponential geometric cauchy log_normal randint "
     "masked_scatter embedding_renorm one_hot repeat_interleave index_fill index_copy take take_along_dim "
     # permuted copies: sub-pixel convolution's shuffles (super-resolution, VAE decoders), ShuffleNet's channels
     "pixel_shuffle pixel_unshuffle channel_shuffle native_channel_shuffle",
     "copy", "copy", 0.0),
    # (histc / bincount: every value read, one bin counted each; nonzero: every value read, the indices of the
    # non-zero ones written)
    ("sum mean amax amin max min argmax argmin var std norm linalg_vector_norm prod all any cumsum cumprod "
     "cummax cummin logcumsumexp var_mean std_mean logsumexp count_nonzero histc bincount nonzero "
     # whether two tensors are equal (one bool): both read; min and max at once (``multinomial`` checks its
     # probabilities with it); a check of one value (``_assert_async``: one tiny kernel on a GPU, a read on a CPU)
     "equal aminmax _assert_async",
     "reduction", "sum", 1.0),
    ("mse_loss mse_loss_backward l1_loss smooth_l1_loss binary_cross_entropy "
     "binary_cross_entropy_with_logits nll_loss_forward nll_loss_backward nll_loss2d_forward "
     "nll_loss2d_backward huber_loss huber_loss_backward smooth_l1_loss_backward", "elementwise", "add", 2.0),
):
    for _n in _names.split():
        ELEMENTWISE[_n] = (_label, _var, _f)

#: canonical collective per c10d / backend op name fragment
COLLECTIVES = (("allreduce", "all_reduce"), ("all_reduce", "all_reduce"), ("allgather", "all_gather"),
               ("all_gather", "all_gather"), ("reduce_scatter", "reduce_scatter"), ("alltoall", "all_to_all"),
               ("all_to_all", "all_to_all"), ("broadcast", "broadcast"), ("reduce_", "reduce"), ("send", "send_recv"),
               ("recv", "send_recv"), ("barrier", "all_reduce"),
               # a root's gather / scatter of every rank's share: the all-gather / reduce-scatter of that buffer (the
               # root's link carries (n - 1) / n of it either way; no family of their own)
               ("gather", "all_gather"), ("scatter", "reduce_scatter"))
_COLLECTIVE_RE = PG_OP_RE
_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int64": 8, "int32": 4, "int8": 1,
          "uint8": 1, "bool": 1}
_FLOATS = ("fp32", "fp16", "bf16", "fp64", "fp8", "tf32")


@dataclass(frozen=True)
class OpMapping:
    kind: str  # "op", "collective", "view"
    label: str  # breakdown label
    row: dict[str, Any] = field(default_factory=dict)


def _is_shape(d: Any) -> bool:
    return isinstance(d, list) and all(isinstance(x, int) for x in d)


def numel(d: Any) -> int:
    """Elements of one tensor shape (a TensorList: the sum over its tensors; 0 for non-tensors)."""
    if _is_shape(d):
        return math.prod(d) if d else 1
    if isinstance(d, list) and d and all(_is_shape(x) for x in d):
        return sum(math.prod(x) if x else 1 for x in d)
    return 0


def _list_numel(d: Any) -> int | None:
    """Elements of a tensor-list argument of a collective, however deeply nested (a list of lists: one list per
    rank); None where the trace left it unrecorded (``[]``: Kineto records no list of lists)."""
    if not isinstance(d, list) or not d:
        return None
    if _is_shape(d) or all(_is_shape(x) for x in d):
        return numel(d)
    parts = [_list_numel(x) for x in d]
    return None if any(p is None for p in parts) else sum(p for p in parts if p is not None)


def _tensor_dims(dims: Sequence[Any], types: Sequence[Any]) -> list[list[int]]:
    """Shapes of the tensor inputs (scalars and non-tensors left out; a 0-d tensor is [])."""
    out = []
    for i, d in enumerate(dims):
        t = types[i] if i < len(types) else None
        if _is_shape(d) and (t is not None or d):
            out.append(d)
    return out


def _dtype(types: Sequence[Any]) -> str:
    for t in types:
        if t in _FLOATS:
            return str(t)
    return "fp32"


def _concrete(extra: dict[str, Any], i: int) -> str:
    c = extra.get("concrete") if isinstance(extra, dict) else None
    if isinstance(c, list) and i < len(c):
        return str(c[i])
    v = extra.get("values") if isinstance(extra, dict) else None
    if isinstance(v, list) and i < len(v):
        return str(v[i])
    return ""


def _ints(s: str) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", s)]


def base_name(name: str) -> str:
    """``aten::add_.Tensor`` -> ``add_``."""
    n = name.split("::", 1)[-1]
    return n.split(".", 1)[0]


def _gemm(m: int, n: int, k: int, b: int, dtype: str, variant: str) -> OpMapping | None:
    if min(m, n, k, b) <= 0:
        return None
    row = {"op": "bmm" if b > 1 else "gemm", "m": m, "n": n, "k": k, "dtype": dtype, "variant": variant}
    if b > 1:
        row["b"] = b
    return OpMapping("op", "gemm", row)


def _aligned(mp: OpMapping | None, strides: Any, operands: tuple[int, int], n: int) -> OpMapping | None:
    """``mp`` with the GEMM's ``align`` (elements): the largest of 8, 4, 2, 1 dividing the two operands' row strides
    (each operand's stride other than its unit one; ``strides`` as the trace recorded them, ``operands`` their
    indices) and the output's (``n``, a new contiguous tensor). A transposed operand's row stride is its other
    dimension: a weight gradient ``dY^T X`` of a 50,257-row output layer reads rows 50,257 elements apart though its
    ``n`` and ``k`` are even. ``mp`` unchanged where the strides are not recorded."""
    if mp is None or not isinstance(strides, list) or max(operands) >= len(strides):
        return mp
    rows = [n]
    for i in operands:
        s = strides[i]
        if not isinstance(s, list) or len(s) < 2 or not all(isinstance(v, int) for v in s[-2:]):
            return mp
        inner = [v for v in s[-2:] if v != 1]
        rows += inner or [1]
    align = 8
    while align > 1 and any(r % align for r in rows):
        align //= 2
    return OpMapping(mp.kind, mp.label, {**mp.row, "align": align})


def _map_gemm(base: str, dims: list[list[int]], dtype: str, out_dims: Sequence[Any],
              extra: dict[str, Any] | None = None) -> OpMapping | None:
    strides = (extra or {}).get("strides")
    if base == "mm" and len(dims) >= 2 and len(dims[0]) == 2 and len(dims[1]) == 2:
        (m, k), (_, n) = dims[0], dims[1]
        return _aligned(_gemm(m, n, k, 1, dtype, "mm"), strides, (0, 1), n)
    if base == "addmm" and len(dims) >= 3 and len(dims[1]) == 2 and len(dims[2]) == 2:
        (m, k), (_, n) = dims[1], dims[2]
        return _aligned(_gemm(m, n, k, 1, dtype, "addmm"), strides, (1, 2), n)
    if base in ("mv", "addmv"):
        # matrix x vector (an RNN cell's or a classifier's single-sample product): the profile's ``gemv`` rows
        # (n = 1); addmv(bias [m], A [m, k], x [k])
        at = 1 if base == "addmv" else 0
        if len(dims) > at + 1 and len(dims[at]) == 2 and len(dims[at + 1]) == 1 and min(dims[at]) > 0:
            m, k = dims[at]
            return OpMapping("op", "gemm", {"op": "gemv", "m": m, "n": 1, "k": k, "dtype": dtype, "variant": base})
        return None
    if (base in ("dot", "vdot") and len(dims) >= 2 and len(dims[0]) == 1 and len(dims[1]) == 1
            and dims[0][0] > 0):
        # a 1-D inner product (``torch.dot``; ``inner`` / ``matmul`` of two vectors call it): the 1 x k gemv
        return OpMapping("op", "gemm", {"op": "gemv", "m": 1, "n": 1, "k": dims[0][0], "dtype": dtype,
                                        "variant": base})
    if base == "bmm" and len(dims) >= 2 and len(dims[0]) == 3 and len(dims[1]) == 3:
        (b, m, k), (_, _, n) = dims[0], dims[1]
        return _aligned(_gemm(m, n, k, b, dtype, "bmm"), strides, (0, 1), n)
    if base == "baddbmm" and len(dims) >= 3 and len(dims[1]) == 3 and len(dims[2]) == 3:
        (b, m, k), (_, _, n) = dims[1], dims[2]
        return _aligned(_gemm(m, n, k, b, dtype, "baddbmm"), strides, (1, 2), n)
    if base in ("linear", "_addmm_activation") and len(dims) >= 2 and len(dims[1]) == 2 and dims[0]:
        x, w = dims[0], dims[1]
        if base == "_addmm_activation":
            x, w = dims[1], dims[2][::-1] if len(dims) > 2 else dims[1]
        return _gemm(math.prod(x[:-1]) if len(x) > 1 else 1, w[0], x[-1], 1, dtype, "linear")
    if base == "_scaled_mm" and len(dims) >= 2 and len(dims[0]) == 2 and len(dims[1]) == 2:
        # fp8 (or other scaled low-precision) GEMM: [m, k] x [k, n] with per-tensor / row-wise scales
        (m, k), (_, n) = dims[0], dims[1]
        return _gemm(m, n, k, 1, dtype, "scaled_mm")
    if base in ("_grouped_mm", "_scaled_grouped_mm") and len(dims) >= 2:
        return _grouped_gemm(base, dims, dtype)
    if base == "matmul" and len(dims) >= 2 and dims[0] and dims[1]:
        a, b_ = dims[0], dims[1]
        if len(a) == 1 and len(b_) == 1:
            return None  # dot
        if len(b_) <= 2:
            k = a[-1]
            n = b_[-1] if len(b_) == 2 else 1
            return _gemm(math.prod(a[:-1]) if len(a) > 1 else 1, n, k, 1, dtype, "matmul")
        if len(a) == 1:
            return _gemm(1, b_[-1], a[0], math.prod(b_[:-2]), dtype, "matmul")
        batch_a, batch_b = a[:-2], b_[:-2]
        nb = max(len(batch_a), len(batch_b))
        pa = [1] * (nb - len(batch_a)) + list(batch_a)
        pb = [1] * (nb - len(batch_b)) + list(batch_b)
        batch = math.prod(max(x, y) for x, y in zip(pa, pb, strict=True))
        return _gemm(a[-2], b_[-1], a[-1], batch, dtype, "matmul")
    return None


def _grouped_gemm(base: str, dims: list[list[int]], dtype: str) -> OpMapping | None:
    """``torch._grouped_mm`` / ``_scaled_grouped_mm`` (MoE experts, PyTorch 2.8+): G GEMMs in one kernel, an
    offsets tensor ``[G]`` splitting the ragged dimension. Costed as a batch of G equal GEMMs (the offsets' values
    are not in a trace): 2-D x 3-D (``[tokens, k] x [G, k, n]``, tokens split over the groups), 3-D x 3-D (a plain
    batch), 3-D x 2-D (``[G, m, k] x [k, n_total]``, columns split) and 2-D x 2-D (``[m, total] x [total, n]``, the
    weight gradient: the shared dimension split, G read from the offsets)."""
    a, w = dims[0], dims[1]
    rest = [d for d in dims[2:] if len(d) == 1]
    if len(a) == 2 and len(w) == 3:
        g, k, n = w
        return _gemm(max(a[0] // max(g, 1), 1), n, k, g, dtype, base)
    if len(a) == 3 and len(w) == 3:
        g, m, k = a
        return _gemm(m, w[2], k, g, dtype, base)
    if len(a) == 3 and len(w) == 2:
        g, m, k = a
        return _gemm(m, max(w[1] // max(g, 1), 1), k, g, dtype, base)
    if len(a) == 2 and len(w) == 2 and rest:
        g = rest[0][0]
        return _gemm(a[0], w[1], max(a[1] // max(g, 1), 1), g, dtype, base)
    return None


#: Convolution ops: name -> (argument index of stride, padding, dilation, groups, transposed flag or -1)
CONV_ARGS: dict[str, tuple[int, int, int, int, int]] = {
    "conv1d": (3, 4, 5, 6, -1), "conv2d": (3, 4, 5, 6, -1), "convolution": (3, 4, 5, 8, 6),
    "_convolution": (3, 4, 5, 8, 6), "mkldnn_convolution": (4, 3, 5, 6, -1), "cudnn_convolution": (3, 2, 4, 5, -1),
    "convolution_backward": (4, 5, 6, 9, 7), "mkldnn_convolution_backward": (4, 3, 5, 6, -1),
}
#: Backward convolutions: name -> (index of grad_output, input, weight among the tensor arguments, output_mask arg)
CONV_BWD: dict[str, tuple[int, int, int, int]] = {
    "convolution_backward": (0, 1, 2, 10), "mkldnn_convolution_backward": (1, 0, 2, 7),
}


def _first_int(s: str, default: int) -> int:
    v = _ints(s)
    return v[0] if v else default


def _pad_for(size: int, out: int, k: int, stride: int, dil: int, pad: int) -> int:
    """``pad`` if it gives ``out`` output pixels, else the smallest symmetric padding that does (``'same'``
    padding, asymmetric padding folded into one side)."""
    def o(p: int) -> int:
        return (size + 2 * p - dil * (k - 1) - 1) // stride + 1

    if out <= 0 or o(max(pad, 0)) == out:
        return max(pad, 0)
    for p in range(0, dil * (k - 1) + stride + 1):
        if o(p) >= out:
            return p
    return max(pad, 0)


def _at(vals: list[int], i: int, default: int) -> int:
    """Entry ``i`` of a per-dimension argument (``[2, 2]``), its only entry where one value stands for every
    dimension (``[2]``), or ``default`` where none was recorded."""
    return vals[i] if len(vals) > i else (vals[0] if vals else default)


def _fold_depth(x: list[int], w: list[int], y: list[int] | None, strides: list[int], pads: list[int],
                dils: list[int]) -> tuple[list[int], list[int], list[int] | None, int, int, int] | None:
    """A 3-D convolution as the 2-D one the conv family prices: each of its D_out output depth slices is a 2-D
    convolution of the k_d input slices it reads, stacked as channels (batch N x D_out, in channels C x k_d, weight
    [C_out, C_in / groups x k_d, k_h, k_w]): the same implicit GEMM, FLOPs and output; the input is counted k_d / s_d
    times (each slice once per output slice that reads it). (x, w, y, stride, padding, dilation) of that 2-D
    convolution (height's), or None where a size is not positive."""
    kd = w[2]
    sd, pd, dd = _at(strides, 0, 1), _at(pads, 0, 0), _at(dils, 0, 1)
    d_out = y[2] if y is not None and len(y) == 5 else (x[2] + 2 * pd - dd * (kd - 1) - 1) // max(sd, 1) + 1
    if min(d_out, kd, sd, dd) <= 0:
        return None
    x2 = [x[0] * d_out, x[1] * kd, x[3], x[4]]
    w2 = [w[0], w[1] * kd, w[3], w[4]]
    y2 = None if y is None or len(y) != 5 else [y[0] * d_out, y[1], y[3], y[4]]
    return x2, w2, y2, _at(strides, 1, 1), _at(pads, 1, 0), _at(dils, 1, 1)


def _map_conv(base: str, dims: list[list[int]], dtype: str, extra: dict, out_dims: Sequence[Any]
              ) -> OpMapping | None:
    """1-D/2-D/3-D convolutions (and their backward) as rows of the ``conv`` family (3-D folded into 2-D,
    :func:`_fold_depth`). A transposed convolution is the data gradient of the forward convolution it inverts (same
    kernel, stride, padding; that convolution's input is the transposed one's output, and the other way round),
    so it becomes a row of that convolution: its forward a ``bwd`` row with ``variant`` ``input``, its backward's
    data gradient that convolution's forward and its weight gradient that convolution's weight gradient (the
    same GEMMs, shapes and bytes)."""
    if base not in CONV_ARGS:
        return None
    bwd = base in CONV_BWD
    gi, xi, wi, mask_arg = CONV_BWD.get(base, (-1, 0, 1, -1))
    if len(dims) <= max(xi, wi, gi):
        return None
    x, w = dims[xi], dims[wi]
    if len(x) not in (3, 4, 5) or len(w) != len(x):
        return None
    s_i, p_i, d_i, g_i, t_i = CONV_ARGS[base]
    transposed = t_i >= 0 and _concrete(extra, t_i) == "True"
    strides, pads, dils = (_ints(_concrete(extra, i)) for i in (s_i, p_i, d_i))
    stride, pad, dil = _at(strides, 0, 1), _at(pads, 0, 0), _at(dils, 0, 1)
    groups = _first_int(_concrete(extra, g_i), 0)
    if groups <= 0:
        groups = 1 if transposed else max(1, x[1] // max(w[1], 1))
    # output size: the forward's output, or the gradient of it
    y = dims[gi] if bwd else (out_dims[0] if out_dims and _is_shape(out_dims[0]) else None)
    if transposed:
        if y is None or len(y) != len(x):
            # per dimension (size - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1 (output_padding:
            # the argument after ``transposed``)
            out_pads = _ints(_concrete(extra, t_i + 1))
            y = [x[0], w[1] * groups] + [
                (n - 1) * _at(strides, i, 1) - 2 * _at(pads, i, 0) + _at(dils, i, 1) * (k - 1) + _at(out_pads, i, 0) + 1
                for i, (n, k) in enumerate(zip(x[2:], w[2:], strict=True))]
        # the convolution it inverts reads the transposed one's output [N, C_out, H_out, W_out] and writes its
        # input; the weight [C_in, C_out / groups, k, k] is already that convolution's [out, in / groups, k, k]
        x, y = y, x
    if len(x) == 5:
        folded = _fold_depth(x, w, y, strides, pads, dils)
        if folded is None:
            return None
        x, w, y, stride, pad, dil = folded
    kh, kw = w[2], (w[3] if len(w) == 4 else 1)
    height, width = x[2], (x[3] if len(x) == 4 else 1)
    if y is not None and len(y) == len(x):
        pad = _pad_for(height, y[2], kh, stride, dil, pad)
    if min(x[0], x[1], w[0], height, width, kh, kw, stride, dil) <= 0:
        return None
    row: dict[str, Any] = {"op": "conv2d", "batch": x[0], "in_channels": x[1], "out_channels": w[0],
                           "height": height, "width": width, "kernel_h": kh, "kernel_w": kw, "stride": stride,
                           "padding": pad, "dilation": dil, "groups": groups, "dtype": dtype,
                           "direction": "bwd" if bwd else "fwd"}
    if bwd:
        mask = re.findall(r"True|False", _concrete(extra, mask_arg))
        gin, gw = (mask[0] == "True", mask[1] == "True") if len(mask) >= 2 else (True, True)
        if not (gin or gw):
            return None  # only the bias gradient: a reduction (left to the children)
        if transposed and gin and not gw:
            row["direction"] = "fwd"  # the transposed one's data gradient: the inverted convolution's forward
        else:
            row["variant"] = "input_weight" if gin and gw else ("input" if gin else "weight")
    elif transposed:
        row.update(direction="bwd", variant="input")
    return OpMapping("op", "conv", row)


#: Recurrent ops: name -> (index of the weights: a TensorList, or -1 for oneDNN's ``W_ih``, ``W_hh`` as arguments 1
#: and 2; index of ``batch_first``, or -1 for time first; backward). oneDNN's ``mkldnn_rnn_layer(input [T, B, I],
#: W_ih, W_hh, ...)`` is one layer and direction (input time first whatever ``batch_first`` says). cuDNN's fused
#: ``_cudnn_rnn(input, weight[], weight_stride0, weight_buf, hx, cx, mode, hidden_size, proj_size, num_layers,
#: batch_first, ...)`` runs every layer and direction, its backward ``(input, weight[], weight_stride0, weight_buf,
#: hx, cx, output, grad_output, grad_hy, grad_cy, mode, hidden_size, proj_size, num_layers, batch_first, ...)``;
#: MIOpen's without ``weight_buf`` / ``proj_size``.
RECURRENT = {"mkldnn_rnn_layer": (-1, -1, False), "mkldnn_rnn_layer_backward": (-1, -1, True),
             "_cudnn_rnn": (1, 10, False), "_cudnn_rnn_backward": (1, 14, True),
             "miopen_rnn": (1, 8, False), "miopen_rnn_backward": (1, 13, True)}
#: Recurrent ops mapped to a batched GEMM of their steps (the GEMM row's ``variant``).
RECURRENT_OPS = frozenset(RECURRENT)


def _map_recurrent(base: str, dims: Sequence[Any], dtype: str, extra: dict) -> OpMapping | None:
    """A recurrent op as the GEMMs of its steps: every (layer, direction) runs T steps of a [B, I_l + H] x
    [I_l + H, G x H] product in series (the step's input and recurrent GEMMs; G = 4 gates for an LSTM, 3 for a
    GRU), read off its weight pairs (``W_ih`` [G x H, I_l], ``W_hh`` [G x H, H or proj]): one ``bmm`` row of
    T x pairs GEMMs with k the pairs' mean I_l + H (the FLOPs exact up to rounding that mean), twice that for the
    backward (data and weight gradients). The gates' elementwise work (~G x H x B x 10 FLOPs a step) is left out.
    Unmapped (None) when the input or the weights are not recorded as shapes, or with LSTM projections."""
    w_i, bf_i, bwd = RECURRENT[base]
    if not dims or not (isinstance(dims[0], list) and len(dims[0]) == 3 and _is_shape(dims[0])):
        return None
    listed = dims[w_i] if 0 <= w_i < len(dims) and isinstance(dims[w_i], list) else []
    weights = [w for w in (listed if w_i >= 0 else dims[1:3]) if _is_shape(w) and len(w) == 2]
    if len(weights) < 2 or len(weights) % 2:
        return None
    pairs = list(zip(weights[0::2], weights[1::2], strict=True))
    gates = pairs[0][0][0]
    if any(ih[0] != gates or hh[0] != gates for ih, hh in pairs):
        return None
    t, batch = dims[0][:2]
    if bf_i >= 0 and _concrete(extra, bf_i) == "True":
        batch, t = t, batch
    k = round(sum(ih[1] + hh[1] for ih, hh in pairs) / len(pairs))
    return _gemm(batch, gates, k, t * len(pairs) * (2 if bwd else 1), dtype, base)


#: Group norm: name -> (index of the input among the tensor arguments, index of the ``groups`` argument):
#: ``group_norm(input, num_groups, ...)``, ``native_group_norm(input, weight, bias, N, C, HxW, group, eps)``,
#: ``native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask)``
GROUP_NORM = {"group_norm": (0, 1), "native_group_norm": (0, 6), "native_group_norm_backward": (1, 8)}

#: Batch norm (training statistics): name -> (index of the ``training`` flag or -1 = always training, backward)
BATCH_NORM = {"batch_norm": (5, False), "_batch_norm_impl_index": (5, False), "native_batch_norm": (5, False),
              "_native_batch_norm_legit": (5, False), "_native_batch_norm_legit_functional": (5, False),
              "cudnn_batch_norm": (5, False), "miopen_batch_norm": (5, False),
              "native_batch_norm_backward": (7, True), "batch_norm_backward": (6, True),
              "cudnn_batch_norm_backward": (-1, True), "miopen_batch_norm_backward": (-1, True)}


def _map_batch_norm(base: str, dims: list[list[int]], dtype: str, extra: dict) -> OpMapping | None:
    """Batch norm over NC[...]: ``batchnorm`` rows (rows = channels, hidden = the values per channel) when it
    computes batch statistics (training); in inference it is a per-channel scale and shift (elementwise)."""
    if base not in BATCH_NORM or not dims or len(dims[0]) < 2:
        return None
    flag, bwd = BATCH_NORM[base]
    x = dims[1] if bwd and len(dims) > 1 and len(dims[1]) >= 2 else dims[0]
    channels = x[1]
    elements = numel(x)
    if channels <= 0 or elements <= 0:
        return None
    training = flag < 0 or _concrete(extra, flag) != "False"
    if not training and not bwd:
        return OpMapping("op", "norm", {"op": "elementwise", "elements": int(elements), "variant": "scale",
                                        "n_inputs": 1.0, "n_outputs": 1.0, "flops_per_element": 2.0,
                                        "dtype": dtype})
    return OpMapping("op", "norm", {"op": "batchnorm", "rows": int(channels), "hidden": int(elements // channels),
                                    "dtype": dtype, "direction": "bwd" if bwd else "fwd"})


#: 2-D pooling: name -> (kind, index of the input among tensor args, index of kernel_size arg or -1 = adaptive,
#: backward, returns/reads argmax indices)
POOLS = {
    "max_pool2d": ("max", 0, 1, False, False), "max_pool2d_with_indices": ("max", 0, 1, False, True),
    "mkldnn_max_pool2d": ("max", 0, 1, False, False), "max_pool1d": ("max", 0, 1, False, False),
    "max_pool2d_with_indices_backward": ("max", 1, 2, True, True), "max_pool2d_backward": ("max", 1, 2, True, False),
    "avg_pool2d": ("avg", 0, 1, False, False), "avg_pool2d_backward": ("avg", 1, 2, True, False),
    "avg_pool1d": ("avg", 0, 1, False, False),
    "adaptive_avg_pool2d": ("avg", 0, -1, False, False), "_adaptive_avg_pool2d": ("avg", 0, -1, False, False),
    "_adaptive_avg_pool2d_backward": ("avg", 1, -1, True, False),
    "adaptive_max_pool2d": ("max", 0, -1, False, True), "adaptive_max_pool2d_backward": ("max", 1, -1, True, True),
    # 3-D pooling (video and volumetric networks; LocalResponseNorm runs avg_pool3d over the channels): the same
    # arguments, a window of k_d x k_h x k_w
    "max_pool3d": ("max", 0, 1, False, False), "max_pool3d_with_indices": ("max", 0, 1, False, True),
    "max_pool3d_with_indices_backward": ("max", 1, 2, True, True),
    "avg_pool3d": ("avg", 0, 1, False, False), "avg_pool3d_backward": ("avg", 1, 2, True, False),
    "adaptive_avg_pool3d": ("avg", 0, -1, False, False), "_adaptive_avg_pool3d": ("avg", 0, -1, False, False),
    "_adaptive_avg_pool3d_backward": ("avg", 1, -1, True, False),
    "adaptive_max_pool3d": ("max", 0, -1, False, True), "adaptive_max_pool3d_backward": ("max", 1, -1, True, True),
}


def _map_pool(base: str, dims: list[list[int]], dtype: str, extra: dict, out_dims: Sequence[Any],
              leaf: bool) -> OpMapping | None:
    """Pooling (and its backward) as an ``elementwise`` row built by :func:`hybrid.ops.families.pool_row`."""
    if base not in POOLS:
        return None
    kind, xi, k_arg, bwd, indices = POOLS[base]
    if len(dims) <= xi or len(dims[xi]) < 3:
        return None
    x = dims[xi]
    if bwd:
        y = dims[0]
    elif out_dims and _is_shape(out_dims[0]):
        y = out_dims[0]
    else:
        y = _pool_out(base, x, extra, k_arg)  # a Chrome trace records no output shapes
        if y is None:
            return None
    n_in, n_out = numel(x), numel(y)
    if n_in <= 0 or n_out <= 0:
        return None
    if k_arg >= 0:
        k = _ints(_concrete(extra, k_arg))
        window = math.prod(k) if len(k) >= 2 else (k[0] ** (len(x) - 2) if k else max(1, n_in // n_out))
    else:
        window = max(1, round(n_in / n_out))
    if base in ("max_pool2d", "max_pool3d") and not leaf:
        indices = True  # calls max_pool2d_with_indices (training; max_pool3d always)
    row = pool_row(kind, "bwd" if bwd else "fwd", n_in, n_out, int(window), dtype, indices)
    return OpMapping("op", "pool", row)


#: Interpolation (``F.interpolate``, ``nn.Upsample``): ATen name -> (mode of
#: :func:`hybrid.ops.families.upsample_row`, index of the ``scale_factors`` list of the ``.vec`` overload, i.e. the
#: argument after ``align_corners`` for the interpolating modes). The backward ops (``<name>_backward``: grad_output,
#: output_size, input_size, ...) take the same mode.
UPSAMPLES = {
    "upsample_nearest1d": ("nearest", 2), "upsample_nearest2d": ("nearest", 2), "upsample_nearest3d": ("nearest", 2),
    "_upsample_nearest_exact1d": ("nearest", 2), "_upsample_nearest_exact2d": ("nearest", 2),
    "_upsample_nearest_exact3d": ("nearest", 2), "upsample_linear1d": ("linear", 3),
    "upsample_bilinear2d": ("bilinear", 3), "_upsample_bilinear2d_aa": ("bilinear", 3),
    "upsample_bicubic2d": ("bicubic", 3), "_upsample_bicubic2d_aa": ("bicubic", 3),
    "upsample_trilinear3d": ("trilinear", 3),
}


def _floats(s: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d*)?(?:[eE]-?\d+)?", s)]


def _map_upsample(base: str, dims: list[list[int]], dtype: str, extra: dict,
                  out_dims: Sequence[Any]) -> OpMapping | None:
    """Interpolation (and its backward) as an ``elementwise`` row built by :func:`hybrid.ops.families.upsample_row`.
    The output map: the execution trace's output shape, else the ``output_size`` argument, else the input's spatial
    sizes times the ``scale_factors`` (floored, as ATen does); the backward reads its output gradient (the
    interpolated map) and takes the source map's size from its ``input_size`` argument."""
    bwd = base.endswith("_backward")
    name = base[: -len("_backward")] if bwd else base
    if name not in UPSAMPLES or not dims or len(dims[0]) < 3:
        return None
    mode, scale_arg = UPSAMPLES[name]
    x = dims[0]
    spatial = len(x) - 2
    if bwd:
        source = _ints(_concrete(extra, 2))
        n_out, n_in = numel(x), (math.prod(source) if len(source) == len(x) else 0)
        width = x[-1]
    else:
        if out_dims and _is_shape(out_dims[0]) and len(out_dims[0]) == len(x):
            y = out_dims[0]
        else:
            size = _concrete(extra, 1)
            sizes = _ints(size) if "." not in size else []
            if len(sizes) != spatial:
                scales = _floats(_concrete(extra, scale_arg))
                if len(scales) == 1:
                    scales = scales * spatial
                if len(scales) != spatial:
                    return None
                sizes = [int(math.floor(d * f)) for d, f in zip(x[2:], scales, strict=True)]
            y = [*x[:2], *sizes]
        n_in, n_out = numel(x), numel(y)
        width = y[-1]
    if n_in <= 0 or n_out <= 0 or width <= 0:
        return None
    return OpMapping("op", "upsample", upsample_row(mode, "bwd" if bwd else "fwd", n_in, n_out, dtype,
                                                    out_width=width))


#: Grid sampling (``F.grid_sample``: spatial transformers, deformable attention, optical-flow warps) and its
#: backward -> (spatial dims, index of the ``interpolation_mode`` argument; None: cuDNN's, bilinear only)
GRID_SAMPLERS = {"grid_sampler_2d": (2, 2), "_grid_sampler_2d_cpu_fallback": (2, 2), "grid_sampler_3d": (3, 2),
                 "cudnn_grid_sampler": (2, None), "grid_sampler_2d_backward": (2, 3),
                 "_grid_sampler_2d_cpu_fallback_backward": (2, 3), "grid_sampler_3d_backward": (3, 3),
                 "cudnn_grid_sampler_backward": (2, None)}
#: ``interpolation_mode`` codes of the grid samplers -> the interpolation whose taps they read (2-D; 3-D bilinear
#: is trilinear)
GRID_MODES = {0: "bilinear", 1: "nearest", 2: "bicubic"}


def _map_grid_sample(base: str, dims: list[list[int]], dtype: str, extra: dict) -> OpMapping | None:
    """Grid sampling (and its backward) as the row :func:`hybrid.ops.families.grid_sample_row` builds: every output
    value gathers its mode's taps from the input at the point its grid entry names, so the interpolated map is
    [N, C, *grid's spatial sizes]."""
    if base not in GRID_SAMPLERS:
        return None
    spatial, mode_arg = GRID_SAMPLERS[base]
    bwd = base.endswith("_backward")
    # (input, grid) argument indices: backward(grad_output, input, grid, ...), cuDNN's backward(input, grid, grad)
    at = (1, 2) if bwd and base != "cudnn_grid_sampler_backward" else (0, 1)
    x = dims[at[0]] if len(dims) > at[0] else []
    grid = dims[at[1]] if len(dims) > at[1] else []
    if (len(x) != spatial + 2 or len(grid) != spatial + 2 or grid[-1] != spatial or grid[0] != x[0]
            or min(x + grid) < 0):
        return None
    code = _first_int(_concrete(extra, mode_arg), 0) if mode_arg is not None else 0
    mode = GRID_MODES.get(code)
    if mode is None:
        return None
    if spatial == 3 and mode == "bilinear":
        mode = "trilinear"
    if spatial == 3 and mode == "bicubic":
        return None  # (ATen has no 3-D bicubic grid sampling)
    positions = numel(grid[:-1])
    if numel(x) <= 0 or positions <= 0:
        return OpMapping("view", "view")
    return OpMapping("op", "grid_sample", grid_sample_row(mode, "bwd" if bwd else "fwd", numel(x), x[1], positions,
                                                          dtype, out_width=grid[-2], coords=spatial))


def _pool_out(base: str, x: list[int], extra: dict, k_arg: int) -> list[int] | None:
    """Output shape of a forward pooling from its arguments: kernel, stride (default: the kernel), padding,
    dilation (max pooling) and ceil mode; adaptive pooling: its output size."""
    spatial = len(x) - 2
    if k_arg < 0:
        size = _ints(_concrete(extra, 1))
        if not size:
            return None
        size = (size * spatial)[:spatial] if len(size) < spatial else size[:spatial]
        return list(x[:2]) + size
    k = _ints(_concrete(extra, 1))
    if not k:
        return None
    st = _ints(_concrete(extra, 2)) or k
    pad = _ints(_concrete(extra, 3)) or [0]
    is_max = base.startswith("max") or base.startswith("mkldnn_max")
    dil = (_ints(_concrete(extra, 4)) or [1]) if is_max else [1]
    ceil = _concrete(extra, 5 if is_max else 4) == "True"

    def pick(v: list[int], i: int) -> int:
        return v[i] if i < len(v) else v[-1]

    out = []
    for i in range(spatial):
        span = x[2 + i] + 2 * pick(pad, i) - pick(dil, i) * (pick(k, i) - 1) - 1
        o = (-(-span // pick(st, i)) if ceil else span // pick(st, i)) + 1
        out.append(max(o, 1))
    return list(x[:2]) + out


def _zero_p(extra: dict) -> bool:
    """Dropout probability 0 (argument 1): PyTorch returns the input, no kernel runs."""
    try:
        return float(_concrete(extra, 1)) == 0.0
    except ValueError:
        return False


def dropout_row(elements: int, dtype: str, backward: bool = False) -> dict[str, Any]:
    """The one canonical row of a training dropout (forward: draw the mask, scale, multiply; backward: multiply
    the gradient by the mask), whichever ATen op the trace shows: the passes are the ``dropout`` variant's in
    :data:`hybrid.ops.families.ELEMENTWISE_VARIANTS` (forward) and a two-input product (backward)."""
    n_in, n_out, fpe = (2, 1, 1.0) if backward else ELEMENTWISE_VARIANTS["dropout"]
    return {"op": "elementwise", "elements": int(elements), "variant": "dropout",
            "direction": "bwd" if backward else "fwd", "n_inputs": float(n_in), "n_outputs": float(n_out),
            "flops_per_element": float(fpe), "dtype": dtype}


def _rows_hidden(x: list[int]) -> tuple[int, int]:
    if not x:
        return 1, 1
    return max(1, math.prod(x[:-1])), x[-1]


#: FFT ops (``torch.fft``: FNet's token mixing, spectral convolutions, FFT-based long convolutions)
FFTS = frozenset({"_fft_c2c", "_fft_r2c", "_fft_c2r"})


def _map_fft(plain: str, tdims: list[list[int]], dtype: str, extra: dict[str, Any],
             out_dims: Sequence[Any]) -> OpMapping | None:
    """An FFT as one elementwise row over its real-side values (complex-to-complex: its complex values): the input
    read and the output written once (a complex value is two floats) and ``5 log2 L`` FLOPs per complex value, half
    that for a real transform (``L``: the transformed length, the product of the transformed dimensions'; the
    radix-2 count). No profile times FFTs: the trees price the row as the arithmetic rows nearest in features (on
    the project's CPU, 8 transforms of 4 Ki to 4 Mi values: 0.18-0.94x of measured, geomean 0.47x, the lowest real
    transforms along strided dimensions). The trace reader records no complex dtypes: a complex input prices as
    fp32 (complex64), a real fp64 input as fp64."""
    if not tdims or numel(tdims[0]) <= 0:
        return None
    src = tdims[0]
    dims = _ints(_concrete(extra, 1))
    if not src or not dims or any(not -len(src) <= d < len(src) for d in dims):
        return None  # the transformed dimensions not recorded (or not this tensor's): not guessed at
    dims = [d % len(src) for d in dims]
    out = next((d for d in out_dims if _is_shape(d) and d), None)
    if plain == "_fft_c2c":
        n_real, n_in, n_out = numel(src), 2.0, 2.0
        length = math.prod(src[d] for d in dims)
        per = 5.0
    elif plain == "_fft_r2c":
        onesided = _concrete(extra, 3) not in ("False", "0")
        half = [*src[:dims[-1]], src[dims[-1]] // 2 + 1, *src[dims[-1] + 1:]] if onesided else src
        spectrum = numel(out) if out is not None else numel(half)
        n_real, n_in, n_out = numel(src), 1.0, 2.0 * spectrum / max(numel(src), 1)
        length = math.prod(src[d] for d in dims)
        per = 2.5
    else:  # _fft_c2r: a half spectrum in, the real signal of last_dim_size (argument 3) out
        last = (_ints(_concrete(extra, 3)) or [0])[0]
        if out is None and last <= 0:
            return None
        full = out if out is not None else [*src[:dims[-1]], last, *src[dims[-1] + 1:]]
        n_real = numel(full)
        n_in, n_out = 2.0 * numel(src) / max(n_real, 1), 1.0
        length = math.prod(full[d] for d in dims)
        per = 2.5
    if n_real <= 0 or length <= 0:
        return OpMapping("view", "view")
    return OpMapping("op", "fft", {"op": "elementwise", "elements": int(n_real), "variant": "add",
                                   "n_inputs": round(n_in, 4), "n_outputs": round(n_out, 4),
                                   "flops_per_element": round(per * math.log2(max(length, 2)), 4),
                                   "dtype": dtype})


#: Fractional max pooling (``nn.FractionalMaxPool2d/3d``): name -> (index of the input, backward). Arguments:
#: ``(input, kernel_size, output_size, random_samples)``, backward ``(grad_output, input, kernel_size, output_size,
#: indices)``.
FRACTIONAL_POOLS = {"fractional_max_pool2d": (0, False), "fractional_max_pool3d": (0, False),
                    "fractional_max_pool2d_backward": (1, True), "fractional_max_pool3d_backward": (1, True)}


def _map_fractional_pool(plain: str, dims: list[list[int]], dtype: str, extra: dict[str, Any],
                         out_dims: Sequence[Any]) -> OpMapping | None:
    """A fractional max pooling (pseudo-random window positions, ``kernel_size`` windows, ``output_size`` out) as
    the max-pooling row of :func:`hybrid.ops.families.pool_row`, with its argmax indices (it always returns them).
    Unmodelled before 2026-12-06."""
    xi, bwd = FRACTIONAL_POOLS[plain]
    if len(dims) <= xi or len(dims[xi]) < 3 or not _is_shape(dims[xi]):
        return None
    x = dims[xi]
    spatial = 3 if "3d" in plain else 2
    kern = _ints(_concrete(extra, 2 if bwd else 1))
    if bwd:
        y: list[int] | None = dims[0] if _is_shape(dims[0]) else None
    else:
        y = next((d for d in out_dims if _is_shape(d) and d), None)
        size = _ints(_concrete(extra, 2))
        if y is None and size:
            y = list(x[:-spatial]) + (size * spatial)[:spatial]
    if y is None or not kern:
        return None
    n_in, n_out = numel(x), numel(y)
    if n_in <= 0 or n_out <= 0:
        return OpMapping("view", "view")
    window = math.prod((kern * spatial)[:spatial])
    return OpMapping("op", "pool", pool_row("max", "bwd" if bwd else "fwd", n_in, n_out, int(window), dtype, True))


def _map_bucketize(plain: str, tdims: list[list[int]], types: Sequence[Any], extra: dict[str, Any]
                   ) -> OpMapping | None:
    """``bucketize(input, boundaries, out_int32, right)`` / ``searchsorted(sorted_sequence, input, out_int32,
    ...)``: a binary search of each value among the boundaries (label ``sort``): every value read once, the
    boundaries once, an int64 (int32) index written per value, counted in the input's bytes, and ``log2`` of the
    boundaries' length comparisons per value (quantile binning, relative-position buckets). Unmodelled before
    2026-12-06."""
    if len(tdims) < 2:
        return None
    vi, bi = (0, 1) if plain == "bucketize" else (1, 0)
    vals, bounds = tdims[vi], tdims[bi]
    n = numel(vals)
    if n <= 0:
        return OpMapping("view", "view")
    length = bounds[-1] if bounds else 1
    src = types[vi] if vi < len(types) and types[vi] in _BYTES else "fp32"
    dtype = src if src in _FLOATS else "fp32"
    idx_bytes = 4 if _concrete(extra, 2) == "True" else 8
    return OpMapping("op", "sort", {"op": "elementwise", "elements": int(n), "variant": "add",
                                    "n_inputs": round((n * _BYTES[src] / _BYTES[dtype] + numel(bounds)) / n, 4),
                                    "n_outputs": round(idx_bytes / _BYTES[dtype], 4),
                                    "flops_per_element": round(max(math.log2(max(length, 1) + 1), 1.0), 4),
                                    "dtype": dtype})


#: Connectionist temporal classification loss kernels (``F.ctc_loss``: wav2vec 2.0, HuBERT, OCR heads; cuDNN's on
#: a GPU). Forward ``(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)``; backward
#: ``(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha, blank, ...)``.
CTC_OPS = frozenset({"_ctc_loss", "_ctc_loss_backward", "_cudnn_ctc_loss"})


def _map_ctc(plain: str, tdims: list[list[int]], dims: Sequence[Any], dtype: str, extra: dict[str, Any]
             ) -> OpMapping | None:
    """A CTC loss (label ``ctc``): its dynamic program has ``B x T x (2S + 1)`` cells (batch, input frames, the
    longest target), each a log-sum-exp of up to three predecessors: an ``exp`` row of 4 evaluations per cell,
    reading the log-probabilities ``[T, B, C]`` and the targets once and writing the cells (log alpha) once; the
    backward runs the recursion backwards (log beta) and writes the ``[T, B, C]`` gradient, twice the work. A lower
    bound: the cells are scalar, dependent work (on the project's CPU 15-31 ns per cell forward, which the CPU
    profile's exp rows price at 0.06-0.41x of that), and a GPU runs the T steps in series inside its kernel
    (``trace predict`` says so on another device). Before 2026-12-06 it was left unmodelled, at 0 on any other
    device."""
    bwd = plain == "_ctc_loss_backward"
    off = 1 if bwd else 0
    if len(tdims) < 2 + off:
        return None
    lp, tg = tdims[off], tdims[off + 1]
    if len(lp) not in (2, 3) or numel(lp) <= 0:
        return None
    t_len, batch = lp[0], (lp[1] if len(lp) == 3 else 1)
    tl = _ints(_concrete(extra, off + 3))  # target lengths as recorded (an IntArrayRef; a CUDA tensor: not)
    if len(tg) == 2:
        s_len = tg[1]
    else:
        s_len = max(tl) if tl else -(-numel(tg) // max(batch, 1))
    cells = batch * t_len * (2 * max(s_len, 0) + 1)
    if cells <= 0:
        return OpMapping("view", "view")
    n_lp = numel(lp)
    if bwd:  # log_probs, log_alpha and the targets read; log beta and the [T, B, C] gradient written
        n_in, n_out = (n_lp + cells + numel(tg)) / cells, (cells + n_lp) / cells
    else:
        n_in, n_out = (n_lp + numel(tg)) / cells, 1.0
    return OpMapping("op", "ctc", {"op": "elementwise", "elements": int(cells), "variant": "exp",
                                   "n_inputs": round(n_in, 4), "n_outputs": round(n_out, 4),
                                   "flops_per_element": 16.0 if bwd else 8.0, "dtype": dtype,
                                   **({"direction": "bwd"} if bwd else {})})


#: LAPACK (cuSOLVER / MAGMA on a GPU) factorisations and solves: the ATen ops that call the library themselves
#: (the composites above them, ``linalg_solve``, ``linalg_inv``, ``linalg_det``, are looked into). See
#: :func:`_map_linalg`.
LINALG_OPS = frozenset({
    "linalg_qr", "geqrf", "linalg_householder_product", "orgqr", "ormqr", "linalg_lu_factor_ex", "lu_factor_ex",
    "linalg_lu_solve", "lu_solve", "linalg_cholesky_ex", "cholesky", "_cholesky_solve_helper", "cholesky_inverse",
    "linalg_solve_triangular", "triangular_solve", "_linalg_eigh", "_linalg_svd", "linalg_eig", "linalg_eigvals",
    "linalg_lstsq"})


def _getrf_flops(m: int, n: int) -> float:
    """LU with partial pivoting of an m x n matrix (LAWN 41: ``2n^3/3`` square, ``mn^2 - n^3/3`` for m >= n)."""
    k = min(m, n)
    return 2.0 * m * n * k - (m + n) * k * k + 2.0 * k ** 3 / 3.0


def _geqrf_flops(m: int, n: int) -> float:
    """Householder QR of an m x n matrix (LAWN 41: ``2mn^2 - 2n^3/3`` for m >= n, ``2nm^2 - 2m^3/3`` else)."""
    k = min(m, n)
    return 4.0 * m * n * k - 2.0 * (m + n) * k * k + 4.0 * k ** 3 / 3.0


def _orgqr_flops(m: int, q: int, k: int) -> float:
    """Forming the m x q matrix Q from k Householder reflectors (LAWN 41 ``DORGQR``: ``4mqk - 2(m + q)k^2 + 4k^3/3``)."""
    return max(4.0 * m * q * k - 2.0 * (m + q) * k * k + 4.0 * k ** 3 / 3.0, 0.0)


def _map_linalg(plain: str, tdims: list[list[int]], dtype: str, extra: dict[str, Any],
                out_dims: Sequence[Any]) -> OpMapping | None:
    """A LAPACK factorisation or solve (:data:`LINALG_OPS`) as one arithmetic row (label ``linalg``): its
    inputs read and the factored matrix written once, and the textbook FLOP count of the algorithm per matrix
    (LAWN 41 for LU, QR and Cholesky; Golub and Van Loan for the eigen- and singular value decompositions:
    symmetric eigenvalues ``4n^3/3``, with vectors ``9n^3``; a general matrix ``10n^3`` / ``25n^3``; SVD values
    ``4mn^2 - 4n^3/3``, with thin U, V ``6mn^2 + 20n^3``), times the batch. So the roofline prices it at the
    device's FP32 (FP64) rate of its dtype: a lower bound, since a factorisation's panels run well below peak,
    most of all a small one on a GPU (``trace predict`` says so on another device). Before 2026-12-06 these ops
    were unmapped: ``linalg_qr`` was looked into for the ``triu`` it calls and its own time (the LAPACK calls)
    priced at 0 on any other device, with no warning."""
    if not tdims or len(tdims[0]) < 2 or numel(tdims[0]) <= 0:
        return None
    a = tdims[0]
    m, n = a[-2], a[-1]
    batch = math.prod(a[:-2]) if len(a) > 2 else 1
    k = min(m, n)
    outs = [d for d in out_dims if _is_shape(d)]
    rhs = tdims[1] if len(tdims) > 1 else None  # B of a solve (the second tensor input)
    if plain == "linalg_qr":
        # mode: the ET's recorded argument, else the shape of Q it returned (a Chrome trace records neither:
        # the default, "reduced"); mode "r" returns an empty Q
        mode = _concrete(extra, 1).strip("'\" ")
        if not mode and outs:
            q = outs[0]
            mode = "r" if numel(q) == 0 else ("complete" if len(q) >= 2 and q[-1] == m and m > n else "reduced")
        f = _geqrf_flops(m, n) + (0.0 if mode == "r" else _orgqr_flops(m, m if mode == "complete" else k, k))
    elif plain == "geqrf":
        f = _geqrf_flops(m, n)
    elif plain in ("linalg_householder_product", "orgqr"):
        tau = tdims[1] if len(tdims) > 1 and tdims[1] else [k]
        f = _orgqr_flops(m, n, min(tau[-1], n))
    elif plain == "ormqr":
        # C (the third tensor) multiplied by Q of k reflectors: about two products with the reflectors' panel
        c = tdims[2] if len(tdims) > 2 else a
        f = 4.0 * numel(c[-2:]) * min(k, (tdims[1][-1] if len(tdims) > 1 and tdims[1] else k))
    elif plain in ("linalg_lu_factor_ex", "lu_factor_ex"):
        f = _getrf_flops(m, n)
    elif plain in ("linalg_lu_solve", "lu_solve", "_cholesky_solve_helper"):
        # two triangular solves per right-hand side: B is argument 2 of lu_solve (LU, pivots, B), 0 of the
        # Cholesky solve (B, L)
        b = tdims[2] if plain != "_cholesky_solve_helper" and len(tdims) > 2 else tdims[0]
        lu = tdims[0] if plain != "_cholesky_solve_helper" else (tdims[1] if len(tdims) > 1 else None)
        if lu is None or len(lu) < 2 or len(b) < 2:
            return None
        batch, f = 1, 2.0 * lu[-1] * numel(b)  # (B's elements hold its batch)
    elif plain in ("linalg_cholesky_ex", "cholesky"):
        f = n ** 3 / 3.0
    elif plain == "cholesky_inverse":
        f = 2.0 * n ** 3 / 3.0
    elif plain in ("linalg_solve_triangular", "triangular_solve"):
        # one triangular solve per right-hand side (linalg_solve_triangular(A, B), triangular_solve(B, A))
        tri, b = (a, rhs) if plain == "linalg_solve_triangular" else (rhs, a)
        if tri is None or b is None or len(tri) < 2:
            return None
        batch, f = 1, float(tri[-1]) * numel(b)  # (B's elements hold its batch)
    elif plain == "_linalg_eigh":
        vectors = _concrete(extra, 2) not in ("False", "0")
        f = (9.0 if vectors else 4.0 / 3.0) * n ** 3
    elif plain == "linalg_eig":
        f = 25.0 * n ** 3
    elif plain == "linalg_eigvals":
        f = 10.0 * n ** 3
    elif plain == "_linalg_svd":
        big = max(m, n)
        uv = _concrete(extra, 2) not in ("False", "0")
        f = (6.0 * big * k * k + 20.0 * k ** 3) if uv else (4.0 * big * k * k - 4.0 * k ** 3 / 3.0)
    elif plain == "linalg_lstsq":
        # a QR of A, Q^T applied to B and a triangular solve (LAPACK's gelsy on a CPU, gels on a GPU)
        r = numel(rhs) // max(m, 1) if rhs else 1
        f = _geqrf_flops(m, n) + 4.0 * m * k * r + float(k * k * r)
    else:
        return None
    flops = float(f) * batch
    sizes = [numel(d) for d in tdims]
    elements = max(sizes)
    if flops <= 0 or elements <= 0:
        return OpMapping("view", "view")
    return OpMapping("op", "linalg", {"op": "elementwise", "elements": int(elements), "variant": "add",
                                      "n_inputs": round(sum(sizes) / elements, 4), "n_outputs": 1.0,
                                      "flops_per_element": round(flops / elements, 4), "dtype": dtype})


def _map_fold(plain: str, tdims: list[list[int]], dtype: str, extra: dict[str, Any],
              out_dims: Sequence[Any]) -> OpMapping | None:
    """``im2col`` (``F.unfold``: every sliding window's values gathered into a column) and ``col2im`` (``F.fold``:
    the columns added back into a zero-filled map), each the other's backward, as the nearest-neighbour
    interpolation rows they resemble (:func:`hybrid.ops.families.upsample_row`): im2col is a forward over the
    columns (each column value read from one computed source position, the map read once), col2im its backward
    (each column value added into its source element). Measured on the project's CPU (F.unfold / F.fold, 5 shapes
    from 2x32x32 to 8x64x56x56): predicted 0.33-1.18x of measured; as plain copies 0.05-1.16x (a CPU's im2col is a
    strided gather, 10-20x slower per value than a copy). The columns' shape comes from the recorded output, else
    from the kernel, dilation, padding and stride arguments."""
    if not tdims or len(tdims[0]) < 2 or numel(tdims[0]) <= 0:
        return None
    src = tdims[0]
    out = next((d for d in out_dims if _is_shape(d) and d), None)
    first = 1 if plain == "im2col" else 2  # col2im's output size comes first
    kern, dil, pad, stride = (_ints(_concrete(extra, first + i)) for i in range(4))
    if out is None:
        if not all(len(x) == 2 for x in (kern, dil, pad, stride)) or min(kern + dil + stride) <= 0:
            return None
        if plain == "im2col":
            if len(src) < 3:
                return None
            blocks = math.prod((n + 2 * p - d * (k - 1) - 1) // s + 1
                               for n, k, d, p, s in zip(src[-2:], kern, dil, pad, stride, strict=True))
            out = [*src[:-3], src[-3] * kern[0] * kern[1], max(blocks, 0)]
        else:
            size = _ints(_concrete(extra, 1))
            if len(size) != 2 or src[-2] % (kern[0] * kern[1]):
                return None
            out = [*src[:-2], src[-2] // (kern[0] * kern[1]), *size]
    col_shape = out if plain == "im2col" else src
    cols, image = numel(col_shape), (numel(src) if plain == "im2col" else numel(out))
    if cols <= 0 or image <= 0:
        return OpMapping("view", "view")  # nothing to copy: no kernel
    width = col_shape[-1] if col_shape[-1] > 0 and cols % col_shape[-1] == 0 else None
    return OpMapping("op", "fold", upsample_row("nearest", "fwd" if plain == "im2col" else "bwd", image, cols,
                                               dtype, out_width=width))


def _elementwise(label: str, variant: str, fpe: float, in_dims: list[list[int]], out_dims: Sequence[Any],
                 dtype: str, inplace: bool) -> OpMapping | None:
    sizes = [numel(d) for d in in_dims]
    outs = [numel(d) for d in out_dims if _is_shape(d) or isinstance(d, list)]
    elements = max(sizes + outs + [0])
    # An op whose result is empty (a zero extent: its recorded outputs, or a pointwise op's broadcast inputs)
    # launches no kernel in PyTorch: host dispatch only, like a view. (A reduction of an empty tensor still
    # writes its identity: costed from its output.) Without any recorded shape, the op is not mapped.
    empty_in = any(_is_shape(d) and 0 in d for d in in_dims)
    if label != "reduction" and ((outs and max(outs) == 0) or (not outs and label == "elementwise" and empty_in)):
        return OpMapping("view", "view")
    if label == "reduction" and elements <= 0 and empty_in and not outs:
        outs, elements = [1], 1  # output not recorded: read as a full reduction, which writes its identity
    if elements <= 0:
        return OpMapping("view", "view") if empty_in or any(_is_shape(d) and 0 in d for d in out_dims) else None
    if label == "reduction":
        n_in, n_out = sum(sizes) / elements, (sum(outs) / elements if outs else 0.0)
    elif label == "copy":
        n_in = sum(sizes) / elements if sizes else 0.0
        n_out = 1.0
        if variant == "copy" and not sizes:
            n_in = 0.0
    else:
        n_in = sum(sizes) / elements
        n_out = 1.0
    if inplace and label != "reduction":
        variant += "_"  # writes into its first input: no new output tensor (see families.variant_base)
    return OpMapping("op", label, {"op": "elementwise", "elements": int(elements), "variant": variant,
                                   "n_inputs": round(float(n_in), 4), "n_outputs": round(float(n_out), 4),
                                   "flops_per_element": float(fpe), "dtype": dtype})


def map_collective(name: str, dims: list[list[int]], dtype: str, group_size: int,
                   extra: dict[str, Any]) -> OpMapping | None:
    if not _COLLECTIVE_RE.match(name):
        return None
    low = name.split(":")[-1].lower()
    canon = next((c for frag, c in COLLECTIVES if frag in low), None)
    if canon is None or "wait" in low:
        return None
    comm = extra.get("comm", {}) if isinstance(extra, dict) else {}
    n = int(comm.get("Group size", group_size) or group_size)
    elems = numel(dims[0]) if dims else 0
    if comm:
        elems = max(int(comm.get("In msg nelems", 0) or 0), int(comm.get("Out msg nelems", 0) or 0), elems)
    elif canon in ("all_gather", "reduce_scatter") and "base" not in low and "tensor" not in low and len(dims) >= 2:
        # nccl-tests' size: the whole gathered buffer (all_gather's output list, reduce_scatter's input list), a
        # list of lists the Chrome trace leaves empty ([]) and the execution trace records nested; else n x the
        # one rank's share on the other side
        whole, share = (dims[0], dims[1]) if canon == "all_gather" else (dims[1], dims[0])
        total = _list_numel(whole)
        elems = total if total is not None else (_list_numel(share) or 0) * n
    elif canon == "all_gather":
        elems = elems * n if "base" not in low else max(numel(d) for d in dims[:2])
    elif canon == "reduce_scatter" and len(dims) >= 2:
        elems = max(numel(d) for d in dims[:2])  # the input: n x the output
    if "barrier" in low:
        elems = 1
    dt = dtype if dtype in _BYTES else "fp32"
    size = max(1, int(elems * _BYTES.get(dt, 4)))
    return OpMapping("collective", "collective", {"op": canon, "size_bytes": size, "n_ranks": max(n, 1),
                                                  "dtype": dt if dt in _FLOATS else "fp32"})


#: Fused attention ops and the positions of two of their traced inputs (the ATen schemas of PyTorch 2.x): the causal
#: flag (``is_causal``, or the memory-efficient kernels' ``custom_mask_type``, where 0 means no mask) and
#: ``dropout_p``, the probability of the dropout mask drawn inside the kernel (BERT's and GPT-2's training SDPA
#: calls use 0.1: the H200's traced GPT-2 forward, 8 x 12 x 1024, d 64, causal, cuDNN, runs ~6x its roofline
#: against ~2x without, so the row records it as ``dropout`` where it is above 0). The dispatcher wrapper
#: ``scaled_dot_product_attention`` is a unit only as a leaf: with children it ran either a fused kernel (mapped
#: itself) or the math fallback (``_scaled_dot_product_attention_math``: matmuls, softmax, dropout, as separate ops
#: that are costed one by one), so the importer looks inside.
ATTENTION_ARGS: dict[str, tuple[int, int]] = {  # op -> (causal position, dropout_p position)
    "scaled_dot_product_attention": (5, 4),
    "_scaled_dot_product_flash_attention": (4, 3), "_scaled_dot_product_flash_attention_for_cpu": (4, 3),
    "_scaled_dot_product_efficient_attention": (6, 5), "_scaled_dot_product_cudnn_attention": (6, 5),
    "_scaled_dot_product_fused_attention_overrideable": (5, 4),
    "_scaled_dot_product_flash_attention_backward": (11, 10),
    "_scaled_dot_product_flash_attention_for_cpu_backward": (7, 6),
    "_scaled_dot_product_efficient_attention_backward": (11, 9),
    "_scaled_dot_product_cudnn_attention_backward": (14, 13),
    "_scaled_dot_product_fused_attention_overrideable_backward": (13, 12),
    "_flash_attention_forward": (8, 7), "_flash_attention_backward": (11, 10),
    "_efficient_attention_forward": (9, 8), "_efficient_attention_backward": (14, 11),
}


def _map_attention(base: str, tdims: list[list[int]], dtype: str, extra: dict, leaf: bool) -> OpMapping | None:
    """One fused attention op: ``batch, heads, q_len, kv_len, head_dim, kv_heads, causal`` from Q and K
    ([batch, heads, length, head_dim]; the flash/efficient kernels' own layout is [batch, length, heads, dim])."""
    if base == "scaled_dot_product_attention" and not leaf:
        return None
    bwd = base.endswith("_backward")
    q_i = 1 if bwd else 0  # backward ops take the output gradient first
    if len(tdims) <= q_i + 1 or len(tdims[q_i]) != 4 or len(tdims[q_i + 1]) != 4:
        return None
    q, k = tdims[q_i], tdims[q_i + 1]
    if base.startswith(("_flash_attention", "_efficient_attention")):  # [batch, length, heads, dim]
        q, k = [q[0], q[2], q[1], q[3]], [k[0], k[2], k[1], k[3]]
    causal_at, dropout_at = ATTENTION_ARGS[base]
    flag = _concrete(extra, causal_at)
    causal = flag == "True" or (base.startswith("_efficient_attention") and flag not in ("", "0", "None"))
    row = {"op": "attention", "batch": q[0], "heads": q[1], "q_len": q[2], "kv_len": k[2], "head_dim": q[3],
           "kv_heads": k[1], "causal": int(causal), "dtype": dtype, "direction": "bwd" if bwd else "fwd"}
    try:
        dropout = float(_concrete(extra, dropout_at))
    except ValueError:  # not recorded (an empty concrete input, None)
        dropout = 0.0
    if math.isfinite(dropout) and 0.0 < dropout < 1.0:  # (1 drops every score: no kernel to price)
        row["dropout"] = dropout
    if "flash" in base or "efficient" in base:
        # PyTorch's flash backend is FlashAttention-2 and its efficient backend a CUTLASS kernel of the same
        # shape: the softmax runs in series with the matrix multiplies on every GPU (cuDNN's kernel, and the
        # generic wrapper, keep the GPU generation's default: hybrid.ops.roofline.softmax_overlap)
        row["softmax_overlap"] = 0
    return OpMapping("op", "attention", row)


#: Ops that order or select values along one dimension (MoE routers' top-k, samplers' and schedulers' sorts) ->
#: the index of their ``dim`` argument (None: the whole tensor). Each is one row that reads the input once and
#: writes the selected values and their int64 indices, with the comparisons per value as its FLOPs: 1 + log2(k) for
#: a top-k (a compare with the k-th best, then an insert into the k kept), log2 of the length otherwise (a sort's
#: passes; ``kthvalue``, ``median`` and ``mode`` priced as a sort of their dimension, which PyTorch's GPU kernels
#: do or radix-select in as many passes, and an upper bound for a CPU's quickselect).
SELECTS: dict[str, int | None] = {"topk": 2, "kthvalue": 2, "sort": 1, "argsort": 1, "median": 1, "nanmedian": 1,
                                  "mode": 1, "_unique2": None, "unique_dim": 1}


def _map_select(base: str, n_args: int, tdims: list[list[int]], types: Sequence[Any], dtype: str, extra: dict,
                out_dims: Sequence[Any]) -> OpMapping | None:
    """The row of one sort or selection (see :data:`SELECTS`); integer keys (a router's expert ids) count their own
    bytes in the row's passes (the row's dtype is fp32 then). Its backward (``value_selecting_reduction_backward``:
    a zero-fill and a scatter) is costed from its child ops."""
    if base not in SELECTS or not tdims:
        return None
    x = tdims[0]
    if numel(x) <= 0:
        return OpMapping("view", "view")  # nothing to order: no kernel
    elements = numel(x)
    whole = SELECTS[base] is None or (base in ("median", "nanmedian") and n_args <= 1)  # median(self): all values
    length = elements
    if not whole and x:
        dim = _ints(_concrete(extra, SELECTS[base]))
        if base == "sort" and not dim:  # sort.stable(self, *, stable, dim, descending)
            dim = _ints(_concrete(extra, 2))
        d = dim[0] if dim else -1
        length = x[d] if -len(x) <= d < len(x) else x[-1]
    length = max(int(length), 1)
    k = None
    if base in ("topk", "kthvalue"):
        k = (_ints(_concrete(extra, 1)) or [length if base == "topk" else 1])[0]
        k = max(1, min(int(k), length))
    compares = 1.0 + math.log2(k) if base == "topk" else float(max(1.0, math.ceil(math.log2(length))))
    outs = [numel(d) for d in out_dims if isinstance(d, list) and _is_shape(d)]
    if not outs:
        kept = elements // length * (k if base == "topk" else 1 if base in ("kthvalue", "median", "nanmedian",
                                                                            "mode") else length)
        outs = [kept] if base == "argsort" else [kept, kept]
    row_bytes = float(_BYTES.get(dtype, 4))
    key_type = str(types[0]) if types and types[0] else dtype
    key = _BYTES.get(key_type, row_bytes) / row_bytes  # the keys' bytes in units of the row's dtype
    values, indices = (0, sum(outs)) if base == "argsort" else (outs[0], sum(outs[1:]))
    n_out = (values * key + indices * 8.0 / row_bytes) / elements
    return OpMapping("op", "sort", {"op": "elementwise", "elements": int(elements), "variant": "copy",
                                    "n_inputs": round(key, 4), "n_outputs": round(n_out, 4),
                                    "flops_per_element": round(compares, 4), "dtype": dtype})


def _map_isin(types: Sequence[Any], dims: Sequence[Any], dtype: str) -> OpMapping | None:
    """``isin(elements, test_elements)`` (a generation loop's stopping criteria, vocabulary masks) as the one row of
    what PyTorch runs: every element compared with every test value where the test set is small (``M < 10
    N^0.145``, its brute-force branch), else a sort of both sets together (label ``sort``, as :func:`_map_select`).
    A scalar on either side counts as one value; the output is one byte per element."""
    if len(dims) < 2:
        return None

    def size(i: int) -> int:  # a tensor argument's values; a scalar (no type recorded) is one
        t = types[i] if i < len(types) else None
        return numel(dims[i]) if _is_shape(dims[i]) and (t is not None or dims[i]) else 1

    n, m = size(0), size(1)
    if n <= 0:
        return OpMapping("view", "view")  # nothing to test: no kernel
    m = max(int(m), 1)
    row_bytes = float(_BYTES.get(dtype, 4))
    key = _BYTES.get(str(types[0]) if types and types[0] else dtype, row_bytes) / row_bytes
    if m < 10.0 * n ** 0.145:  # brute force: N x M comparisons, the test set read once per element block
        return OpMapping("op", "sort", {"op": "elementwise", "elements": int(n), "variant": "copy",
                                        "n_inputs": round(key * (1.0 + m / n), 4), "n_outputs": round(1.0 / row_bytes, 4),
                                        "flops_per_element": float(m), "dtype": dtype})
    total = n + m  # sorted together, each element then checked against its neighbour
    return OpMapping("op", "sort", {"op": "elementwise", "elements": int(total), "variant": "copy",
                                    "n_inputs": round(key, 4), "n_outputs": round((key * total + n / row_bytes) / total, 4),
                                    "flops_per_element": float(max(1.0, math.ceil(math.log2(total)))), "dtype": dtype})


def _map_weight_norm(plain: str, tdims: list[list[int]], dtype: str) -> OpMapping | None:
    """Weight normalisation's fused kernels (``nn.utils.weight_norm`` / ``parametrizations.weight_norm``: wav2vec
    2.0's and HuBERT's positional convolution, WaveNet-style vocoders) were unmodelled: one elementwise row over
    the weight ``v``. Forward (``w = g v / ||v||`` per slice): ``v`` read for the slice norms and again for the
    scaling (2 inputs), ``w`` written, 3 FLOPs per value (square-add, scale). Backward
    (``_weight_norm_interface_backward``): ``grad_w`` and ``v`` read for the per-slice dot product and again for
    ``grad_v`` (4 inputs), ``grad_v`` written, 5 FLOPs per value. Both are fused kernels whose only children
    allocate (and on a CPU zero a per-slice buffer): the op is the unit, children included. The per-slice ``g``, norms and ``grad_g`` are negligible. On the project's CPU
    (one thread, 5 weights of 4 Ki to 4.6 Mi values) the forward took 0.6-2.1x and the backward 1.3-6.4x the time
    of a plain two-input multiply of the weight's size; no profile times weight norm itself."""
    bwd = plain.endswith("backward")
    v = tdims[1] if bwd and len(tdims) >= 2 else tdims[0]
    n = numel(v)
    if n <= 0:
        return OpMapping("view", "view")  # an empty weight: no kernel
    return OpMapping("op", "elementwise", {"op": "elementwise", "elements": int(n), "variant": "mul",
                                           "n_inputs": 4.0 if bwd else 2.0, "n_outputs": 1.0,
                                           "flops_per_element": 5.0 if bwd else 3.0, "dtype": dtype})


def map_op(name: str, dims: Sequence[Any], types: Sequence[Any], out_dims: Sequence[Any] = (),
           extra: dict[str, Any] | None = None, *, leaf: bool = True, group_size: int = 1) -> OpMapping | None:
    """The family mapping of one traced op (see the module docstring). A pure function: callers that map many
    ops map each distinct one once (:func:`hybrid.workloads.trace_units.trace_units` does)."""
    extra = extra or {}
    tdims = _tensor_dims(dims, types)
    dims_all = [d if isinstance(d, list) else [] for d in dims]
    dtype = _dtype(types)
    if _COLLECTIVE_RE.match(name):
        return map_collective(name, [d for d in dims if isinstance(d, list)], dtype, group_size, extra)
    if name in CUDA_SYNC_CALLS:
        return OpMapping("view", "view")  # the host waits for the device (the graph makes it wait for the streams)
    if not name.startswith("aten::"):
        # the bare inner half of a view (``aten::detach`` calls ``detach``)
        if leaf and ((("::" not in name) and name in VIEW_OPS) or re.search(r"Backward\d*$", name)
                     or name == "torch::autograd::AccumulateGrad"):
            return OpMapping("view", "view")  # autograd bookkeeping that launched no kernel
        return None
    base = base_name(name)
    # an in-place op's name ends in one "_" (``mul_``, ``_index_put_impl_``); operators (``__and__``) are not in-place
    plain = base.rstrip("_") if base.endswith("_") and not base.startswith("__") else base
    inplace = plain != base
    if base in VIEW_OPS or plain in VIEW_OPS:
        if base == "dropout" and _concrete(extra, 2) == "True" and tdims and not _zero_p(extra):
            return OpMapping("op", "dropout", dropout_row(numel(tdims[0]), dtype))  # training dropout: one unit
        return OpMapping("view", "view") if leaf else None
    if plain in RECURRENT:
        return _map_recurrent(plain, dims, dtype, extra)
    mp = (_map_gemm(plain, tdims, dtype, out_dims, extra) or _map_conv(plain, dims_all, dtype, extra, out_dims)
          or _map_batch_norm(plain, dims_all, dtype, extra) or _map_pool(plain, dims_all, dtype, extra, out_dims, leaf)
          or _map_upsample(plain, dims_all, dtype, extra, out_dims) or _map_grid_sample(plain, dims_all, dtype, extra))
    if mp:
        return mp
    if base in ATTENTION_ARGS:
        return _map_attention(base, tdims, dtype, extra, leaf)
    if plain in ("layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm", "native_layer_norm_backward",
                 "_fused_rms_norm_backward") and tdims:
        # (batch norm: _map_batch_norm above; group norm: GROUP_NORM below; instance norm runs batch norm)
        x = tdims[0]
        bwd = "backward" in plain
        rows, hidden = _rows_hidden(x)
        op = "rmsnorm" if "rms" in plain else "layernorm"
        return OpMapping("op", "norm", {"op": op, "rows": rows, "hidden": hidden, "dtype": dtype,
                                        "direction": "bwd" if bwd else "fwd"})
    if plain in GROUP_NORM and tdims:
        # a group norm is a layer norm of each (sample, group) over its channels x pixels: one mean and variance
        # per row, then a per-channel scale and shift
        x = tdims[GROUP_NORM[plain][0]]
        groups = _first_int(_concrete(extra, GROUP_NORM[plain][1]), 0)
        if len(x) < 2 or groups <= 0 or x[1] % groups or numel(x) <= 0:
            return None
        return OpMapping("op", "norm", {"op": "layernorm", "rows": x[0] * groups, "hidden": numel(x) // (x[0] * groups),
                                        "dtype": dtype, "direction": "bwd" if "backward" in plain else "fwd"})
    # (``_masked_softmax``: nn.MultiheadAttention's inference fast path with a padding mask, the masked scores'
    # softmax in one kernel; its mask is a fraction of the scores' bytes)
    if plain in ("softmax", "_softmax", "log_softmax", "_log_softmax", "_softmax_backward_data",
                 "_log_softmax_backward_data", "_safe_softmax", "_masked_softmax", "_masked_softmax_backward") and tdims:
        rows, hidden = _rows_hidden(tdims[0])
        return OpMapping("op", "softmax", {"op": "softmax", "rows": rows, "hidden": hidden, "dtype": dtype,
                                           "direction": "bwd" if "backward" in plain else "fwd"})
    if plain in ("native_dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout") and tdims:
        if (plain != "native_dropout" and _concrete(extra, 2) == "False") or _zero_p(extra):
            return OpMapping("view", "view") if leaf else None  # inference: the identity
        return OpMapping("op", "dropout", dropout_row(numel(tdims[0]), dtype))
    if plain == "native_dropout_backward" and tdims:
        return OpMapping("op", "dropout", dropout_row(numel(tdims[0]), dtype, backward=True))
    if plain == "embedding" and len(tdims) >= 2 and len(tdims[0]) == 2:
        v, d = tdims[0]
        return OpMapping("op", "embedding", {"op": "embedding_bag", "num_embeddings": v, "embedding_dim": d,
                                             "pooling_factor": 1.0, "batch_size": max(1, numel(tdims[1])),
                                             "num_tables": 1, "variant": "sum", "dtype": dtype, "direction": "fwd"})
    if plain in ("embedding_bag", "_embedding_bag", "_embedding_bag_forward_only") and len(tdims) >= 3:
        v, d = tdims[0]
        bags = max(1, numel(tdims[2]))
        return OpMapping("op", "embedding", {"op": "embedding_bag", "num_embeddings": v, "embedding_dim": d,
                                             "pooling_factor": max(numel(tdims[1]) / bags, 1.0),
                                             "batch_size": bags, "num_tables": 1, "variant": "sum", "dtype": dtype,
                                             "direction": "fwd"})
    if plain in ("embedding_dense_backward", "embedding_backward", "_embedding_bag_dense_backward") and tdims:
        grad = tdims[0]
        # num_weights: argument 2 of embedding_(dense_)backward, 5 of _embedding_bag_dense_backward (grad, indices,
        # offset2bag, bag_size, maximum_indices, num_weights, ...)
        rows = (_ints(_concrete(extra, 5 if plain == "_embedding_bag_dense_backward" else 2)) or [0])[0]
        d = grad[-1] if grad else 1
        elements = rows * d + numel(grad)
        if elements <= 0:
            return None
        # zero the dense table gradient, then index-add every looked-up row into it
        return OpMapping("op", "embedding", {"op": "elementwise", "elements": int(elements), "variant": "copy",
                                             "n_inputs": round(numel(grad) / elements, 4), "n_outputs": 1.0,
                                             "flops_per_element": 0.0, "dtype": dtype})
    if plain == "addr" and len(tdims) >= 3 and len(tdims[0]) == 2 and len(tdims[1]) == 1 and len(tdims[2]) == 1:
        # M + u v^T (beta * M + alpha * u_i * v_j): each of M's elements read and written once, u and v read once
        return _elementwise("elementwise", "add", 3.0, tdims[:3], [], dtype, base.endswith("_"))
    if plain == "linalg_cross" and len(tdims) >= 2:
        # u x v per 3-vector: two products and a difference per output component
        return _elementwise("elementwise", "mul", 3.0, tdims[:2], out_dims, dtype, False)
    if plain in ("_pdist_forward", "_pdist_backward"):
        # torch.pdist over N rows of M: N (N - 1) / 2 pairs, M components each (difference, square, sum)
        fwd = plain == "_pdist_forward"
        x = (tdims[0] if fwd else tdims[1]) if len(tdims) >= (1 if fwd else 2) else []
        if len(x) == 2:
            n, m = x
            pairs = n * (n - 1) // 2
            work = pairs * m
            if work <= 0:
                return OpMapping("view", "view")
            # forward: the rows read once, one distance per pair written; backward: the pairs' gradients and
            # distances and the rows read, every row's gradient written
            read, written = (n * m, pairs) if fwd else (2 * pairs + n * m, n * m)
            return OpMapping("op", "elementwise", {"op": "elementwise", "elements": int(work), "variant": "mul",
                                                   "n_inputs": round(read / work, 4),
                                                   "n_outputs": round(written / work, 4),
                                                   "flops_per_element": 3.0, "dtype": dtype})
    if base.rstrip("_") == "_amp_update_scale":  # GradScaler's scale update: one scalar kernel
        return _elementwise("elementwise", "add", 1.0, [[1], [1]], [], "fp32", True)
    if (base.startswith("_foreach_") or base.startswith("_fused_adam") or base.startswith("_fused_sgd")
            or base.startswith("_amp_foreach_")):  # (GradScaler's unscale-and-check-finite over every gradient)
        at = [i for i, d in enumerate(dims) if isinstance(d, list) and d and all(_is_shape(x) for x in d)]
        # a ScalarList (Adam's bias corrections and step sizes) reads no tensor: the execution trace records it as
        # one 0-d shape per value, with no dtype (a TensorList has its tensors' dtype)
        typed = [i for i in at if i < len(types) and types[i] is not None]
        lists = [dims[i] for i in (typed or at)]
        if not lists:
            return None
        elements = numel(lists[0])
        variant = ("adam" if "adam" in base else "mul" if base.startswith("_amp_foreach_")  # x *= 1/scale, checked
                   else base.replace("_foreach_", "").rstrip("_"))
        if base.endswith("_") and "adam" not in base:
            variant += "_"  # updates its first list in place (no new tensors), like ``mul_``
        fpe = 12.0 if "adam" in base else 1.0
        n_in = len(lists) if "adam" not in base else 4.0
        n_out = 1.0 if "adam" not in base else 3.0
        if variant in ("norm", "max"):  # a reduction per tensor (clip_grad_norm_'s norms): one value each
            n_out = len(lists[0]) / max(elements, 1)
        return OpMapping("op", "optimizer", {"op": "elementwise", "elements": int(max(elements, 1)),
                                             "variant": variant, "n_inputs": float(n_in),
                                             "n_outputs": round(float(n_out), 4),
                                             "flops_per_element": fpe, "dtype": dtype})
    if plain == "isin":
        return _map_isin(types, dims, dtype)
    if plain in SELECTS:
        return _map_select(plain, len(dims), tdims, types, dtype, extra, out_dims)
    if ((plain in ("nll_loss_forward", "nll_loss2d_forward")
         or (leaf and plain in ("nll_loss", "nll_loss_nd", "nll_loss2d")))
            and len(tdims) >= 2 and numel(tdims[1]) > 0):
        # (the composites take the same arguments; an execution trace has recorded ``nll_loss`` without children.
        # With children they are looked into: under autocast ``nll_loss`` casts its [N, vocab] input first)
        # picks one log-probability per target (a gather): target-sized, not the [N, C] input's size
        return _elementwise("elementwise", "add", 1.0, [tdims[1], tdims[1]], [], dtype, False)
    if plain in ("nll_loss_backward", "nll_loss2d_backward") and len(tdims) >= 3 and numel(tdims[1]) > 0:
        # zero-fills the [N, C] input gradient, then scatters one value per target
        n, t = numel(tdims[1]), numel(tdims[2])
        return OpMapping("op", "elementwise", {"op": "elementwise", "elements": int(n), "variant": "copy",
                                               "n_inputs": round(2.0 * t / n, 4), "n_outputs": 1.0,
                                               "flops_per_element": 0.0, "dtype": dtype})
    if plain in FFTS:
        return _map_fft(plain, tdims, dtype, extra, out_dims)
    if plain in ("im2col", "col2im"):
        return _map_fold(plain, tdims, dtype, extra, out_dims)
    if plain in LINALG_OPS:
        return _map_linalg(plain, tdims, dtype, extra, out_dims)
    if plain in FRACTIONAL_POOLS:
        return _map_fractional_pool(plain, dims_all, dtype, extra, out_dims)
    if plain in ("bucketize", "searchsorted"):
        return _map_bucketize(plain, tdims, [t for d, t in zip(dims, types, strict=False) if _is_shape(d)
                                             and (t is not None or d)], extra)
    if plain in CTC_OPS:
        return _map_ctc(plain, tdims, dims, dtype, extra)
    if plain == "trace" and tdims and len(tdims[0]) == 2:
        # the sum of a matrix's diagonal: min(m, n) values read (strided), one written
        k = min(tdims[0])
        return _elementwise("reduction", "sum", 1.0, [[k]], [[]], dtype, False)
    if plain in CONCAT_OPS and dims and isinstance(dims[0], list) and dims[0] and all(_is_shape(x) for x in dims[0]):
        # a TensorList joined into one new tensor: every input element read once and written once (one kernel)
        total = numel(dims[0])
        if total <= 0:
            return OpMapping("view", "view")  # all inputs empty: no kernel
        return _elementwise("copy", "copy", 0.0, [[total]], [[total]], dtype, False)
    if plain == "_transform_bias_rescale_qkv" and tdims:
        # the fused multi-head attention's fast path (nn.TransformerEncoder / MultiheadAttention in inference): the
        # QKV projection's bias added and q scaled, split into q, k, v: one pass over the [B, T, 3 x D] tensor
        return _elementwise("elementwise", "add", 2.0, tdims[:2], [tdims[0]], dtype, False)
    if plain in ("_weight_norm_interface", "_weight_norm_interface_backward") and tdims:
        # (fused kernels, leaves or not: their children only allocate and zero their outputs)
        return _map_weight_norm(plain, tdims, dtype)
    if plain == "glu" and tdims and numel(tdims[0]) > 0:
        # a gated linear unit (the Conformer's convolution module, gated CNNs): out = a x sigmoid(b) over the two
        # halves of the input along ``dim``: per output value both halves read once, a sigmoid and a product (a
        # leaf or not: on a CPU its children are the two halves' views)
        half = numel(tdims[0]) // 2
        return OpMapping("op", "elementwise", {"op": "elementwise", "elements": int(half), "variant": "swiglu",
                                               "n_inputs": 2.0, "n_outputs": 1.0, "flops_per_element": 5.0,
                                               "dtype": dtype})
    if plain == "glu_backward" and leaf and len(tdims) >= 2 and numel(tdims[0]) > 0:
        # (one kernel on a GPU; a CPU's composite of sigmoid and products is looked into): per output value the
        # gradient and both halves read, both halves' gradients written
        return OpMapping("op", "elementwise", {"op": "elementwise", "elements": int(numel(tdims[0])),
                                               "variant": "swiglu", "n_inputs": 3.0, "n_outputs": 2.0,
                                               "flops_per_element": 8.0, "dtype": dtype, "direction": "bwd"})
    if plain == "unfold_backward" and tdims:
        # ``Tensor.unfold``'s backward (grad, input_sizes, dim, size, step): the input-sized gradient zero-filled,
        # then every window value added into it (one kernel with helpers: a self share near one half made it flip
        # between looked into and unmodelled)
        n_out, n_grad = math.prod(_ints(_concrete(extra, 1)) or [0]), numel(tdims[0])
        if n_out <= 0 or n_grad <= 0:
            return None
        return OpMapping("op", "copy", {"op": "elementwise", "elements": int(n_out), "variant": "copy",
                                        "n_inputs": round(n_grad / n_out, 4), "n_outputs": 1.0,
                                        "flops_per_element": 0.0, "dtype": dtype})
    if plain == "_prelu_kernel_backward" and len(tdims) >= 2 and numel(tdims[1]) > 0:
        # the gradients of the input and of the (broadcast) weight, each input-sized (the weight's then reduced
        # by a sum of its own): the gradient and the input read, both written
        return OpMapping("op", "elementwise", {"op": "elementwise", "elements": int(numel(tdims[1])),
                                               "variant": "relu", "n_inputs": 2.0, "n_outputs": 2.0,
                                               "flops_per_element": 2.0, "dtype": dtype, "direction": "bwd"})
    if plain in ACTIVATION_BACKWARD_OPS:
        # an activation's backward: the profile's backward row of that activation (its variant, FLOPs and
        # direction), so that a trace and a profile describe the same kernel alike
        act = ACTIVATION_BACKWARD_OPS[plain]
        mp = _elementwise("elementwise", act, ACTIVATION_BWD_FLOPS[act], tdims[:2], out_dims, dtype, inplace)
        return None if mp is None else OpMapping(mp.kind, mp.label, {**mp.row, "direction": "bwd"})
    entry = ELEMENTWISE.get(plain) or ELEMENTWISE.get(base)
    if entry is not None:
        label, variant, fpe = entry
        if label == "copy" and plain in ("copy", "_to_copy", "clone") and len(tdims) >= 1:
            tdims = tdims[-1:] if plain == "copy" else tdims[:1]
        if not tdims and plain in CREATION_OPS and not any(_is_shape(d) and d for d in out_dims):
            # a factory op (zeros, ones, full, ...) given its size as an argument: allocate and fill ("[]" is a
            # 0-d tensor, one element; a zero extent is an empty tensor, allocated without a kernel)
            text = _concrete(extra, 0).strip()
            if plain == "randint":  # randint(high, size, ...) or randint(low, high, size, ...): the list argument
                text = next((t for t in (_concrete(extra, i).strip() for i in range(len(dims)))
                             if t.startswith(("[", "("))), "")
            size = _ints(text)
            if not size and text not in ("[]", "()"):
                return OpMapping("view", "view") if leaf else None  # size not recorded
            if math.prod(size) <= 0:
                return OpMapping("view", "view")  # empty tensor: no kernel
            out_dims = [size]
        if not tdims and plain in ("linspace", "logspace") and not any(_is_shape(d) and d for d in out_dims):
            steps = _ints(_concrete(extra, 2))  # linspace(start, end, steps, ...)
            if not steps:
                return OpMapping("view", "view") if leaf else None  # steps not recorded
            if steps[0] <= 0:
                return OpMapping("view", "view")
            out_dims = [[steps[0]]]
        if not tdims and plain == "arange" and not any(_is_shape(d) and d for d in out_dims):
            count = arange_count([_concrete(extra, i) for i in range(len(dims))])
            if count is None:
                return OpMapping("view", "view") if leaf else None  # bounds not recorded
            if count == 0:
                return OpMapping("view", "view")
            out_dims = [[count]]
        mp = _elementwise(label, variant, fpe, tdims, out_dims, dtype, inplace)
        if mp is not None and plain == "_to_copy":
            mp = _cast(mp, types, _concrete(extra, 1))
        return mp
    return None


#: ATen ScalarType codes (``Concrete Inputs`` of ``aten::_to_copy``'s dtype argument) -> dtype name
SCALAR_TYPES = {"0": "uint8", "1": "int8", "3": "int32", "4": "int64", "5": "fp16", "6": "fp32", "7": "fp64",
                "11": "bool", "15": "bf16"}


def _cast(mp: OpMapping, types: Sequence[Any], code: str) -> OpMapping:
    """A ``_to_copy`` that converts (autocast's fp32 -> bf16 casts): the output is written in the target dtype, so
    its passes count in the input dtype's bytes (``n_outputs`` = output bytes / input bytes per element)."""
    src = next((t for t in types if t in _BYTES), None)
    dst = SCALAR_TYPES.get(code.strip())
    if src is None or dst is None or dst == src or dst not in _BYTES:
        return mp
    row = dict(mp.row)
    row["dtype"] = src if src in _FLOATS else row["dtype"]
    row["n_outputs"] = round(float(row["n_outputs"]) * _BYTES[dst] / _BYTES.get(row["dtype"], 4), 4)
    return OpMapping(mp.kind, mp.label, row)


#: Factory ops whose size is their first argument (no tensor input).
CREATION_OPS = frozenset({"zeros", "ones", "full", "rand", "randn", "randint"})
#: Ops that join a TensorList (their first argument) into one new tensor.
CONCAT_OPS = frozenset({"cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack"})


def arange_count(args: Sequence[str]) -> int | None:
    """Elements of ``aten::arange`` from its recorded scalar arguments: ``arange(end, dtype, layout, device,
    pin_memory)`` (5 arguments), ``arange.start(start, end, ...)`` (6) or ``arange.start_step(start, end, step,
    ...)`` (7); None where the bounds were not recorded."""
    n = len(args)
    picks = {5: (None, 0, None), 6: (0, 1, None), 7: (0, 1, 2)}.get(n)
    if picks is None:
        return None
    try:
        start = float(args[picks[0]]) if picks[0] is not None else 0.0
        end = float(args[picks[1]])
        step = float(args[picks[2]]) if picks[2] is not None else 1.0
    except ValueError:
        return None
    if step == 0 or not all(map(math.isfinite, (start, end, step))):
        return None
    return max(0, math.ceil((end - start) / step))
