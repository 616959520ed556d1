"""Map traced ATen ops to op families: one canonical op row (shapes, dtype) per op the tool can cost.

:func:`map_op` looks at an op's name, input shapes and types (and output shapes and concrete arguments where
the trace has them) and answers with an :class:`OpMapping`:

* ``kind="op"``: a row of the canonical measurement table (``op`` + the family's shape columns + ``dtype``)
  that any :class:`~hybrid.engine.costs.OpCostModel` can cost on any device, and a breakdown ``label`` (gemm,
  attention, norm, softmax, dropout, embedding, elementwise, reduction, optimizer, copy);
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

#: Ops that launch no kernel when they are leaves (views, allocation, metadata); a composite op of these names
#: (``aten::reshape`` that copies, ``aten::to`` that converts) is looked into instead.
VIEW_OPS = frozenset(
    "view reshape _reshape_alias _unsafe_view t transpose transpose_ permute expand expand_as as_strided slice "
    "select unsqueeze unsqueeze_ squeeze squeeze_ split split_with_sizes chunk narrow detach detach_ alias "
    "unflatten flatten view_as resolve_conj resolve_neg empty empty_like empty_strided new_empty "
    "new_empty_strided resize_ lift_fresh set_ size stride numel is_nonzero result_type to contiguous dropout "
    "unbind movedim swapaxes diagonal indices values coalesce _indices _values _nested_tensor_from_mask "
    "is_same_size _has_compatible_shallow_copy_type item _local_scalar_dense scalar_tensor "
    "unsafe_split align_tensors broadcast_tensors meshgrid type_as".split())

#: Elementwise op base name -> (breakdown label, variant, FLOPs per element). Inputs/outputs come from shapes.
ELEMENTWISE: dict[str, tuple[str, str, float]] = {}
for _names, _label, _var, _f in (
    ("add sub rsub mul div true_divide floor_divide remainder maximum minimum eq ne lt le gt ge logical_and "
     "logical_or bitwise_and bitwise_or", "elementwise", "add", 1.0),
    ("neg abs sign reciprocal relu clamp clamp_min clamp_max threshold hardtanh leaky_relu logical_not "
     "bitwise_not masked_fill where square tril triu flip roll sgn", "elementwise", "relu", 1.0),
    ("gelu erf softplus mish", "elementwise", "gelu", 8.0),
    ("silu sigmoid tanh hardswish hardsigmoid elu selu", "elementwise", "silu", 4.0),
    ("exp log log1p expm1 sqrt rsqrt pow sin cos", "elementwise", "exp", 2.0),
    ("gelu_backward", "elementwise", "gelu", 10.0),
    ("silu_backward sigmoid_backward tanh_backward threshold_backward hardtanh_backward leaky_relu_backward "
     "elu_backward softplus_backward", "elementwise", "relu", 2.0),
    ("lerp addcmul addcdiv", "elementwise", "add", 2.0),
    ("native_dropout_backward", "dropout", "mul", 1.0),
    ("copy _to_copy clone _copy_from _copy_from_and_resize cat stack index_select gather scatter scatter_add "
     "index_add index index_put _index_put_impl masked_select repeat constant_pad_nd pad fill zero "
     "zeros_like ones_like full full_like zeros ones fill_ zero_ arange bernoulli uniform normal randn rand "
     "masked_scatter embedding_renorm", "copy", "copy", 0.0),
    ("sum mean amax amin max min argmax argmin var std norm linalg_vector_norm prod all any cumsum "
     "var_mean std_mean logsumexp count_nonzero", "reduction", "sum", 1.0),
    ("mse_loss mse_loss_backward l1_loss smooth_l1_loss binary_cross_entropy "
     "binary_cross_entropy_with_logits nll_loss_forward nll_loss_backward nll_loss2d_forward "
     "nll_loss2d_backward", "elementwise", "add", 2.0),
):
    for _n in _names.split():
        ELEMENTWISE[_n] = (_label, _var, _f)

#: canonical collective per c10d / backend op name fragment
COLLECTIVES = (("allreduce", "all_reduce"), ("all_reduce", "all_reduce"), ("allgather", "all_gather"),
               ("all_gather", "all_gather"), ("reduce_scatter", "reduce_scatter"), ("alltoall", "all_to_all"),
               ("all_to_all", "all_to_all"), ("broadcast", "broadcast"), ("reduce_", "reduce"), ("send", "send_recv"),
               ("recv", "send_recv"), ("barrier", "all_reduce"))
_COLLECTIVE_RE = re.compile(r"^(c10d::|nccl:|gloo:|c10d_functional::|_c10d_functional::)")
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


def _map_gemm(base: str, dims: list[list[int]], dtype: str, out_dims: Sequence[Any]) -> OpMapping | None:
    if base == "mm" and len(dims) >= 2 and len(dims[0]) == 2 and len(dims[1]) == 2:
        (m, k), (_, n) = dims[0], dims[1]
        return _gemm(m, n, k, 1, dtype, "mm")
    if base == "addmm" and len(dims) >= 3 and len(dims[1]) == 2 and len(dims[2]) == 2:
        (m, k), (_, n) = dims[1], dims[2]
        return _gemm(m, n, k, 1, dtype, "addmm")
    if base == "bmm" and len(dims) >= 2 and len(dims[0]) == 3 and len(dims[1]) == 3:
        (b, m, k), (_, _, n) = dims[0], dims[1]
        return _gemm(m, n, k, b, dtype, "bmm")
    if base == "baddbmm" and len(dims) >= 3 and len(dims[1]) == 3 and len(dims[2]) == 3:
        (b, m, k), (_, _, n) = dims[1], dims[2]
        return _gemm(m, n, k, b, dtype, "baddbmm")
    if base in ("linear", "_addmm_activation") and len(dims) >= 2 and len(dims[1]) == 2 and dims[0]:
        x, w = dims[0], dims[1]
        if base == "_addmm_activation":
            x, w = dims[1], dims[2][::-1] if len(dims) > 2 else dims[1]
        return _gemm(math.prod(x[:-1]) if len(x) > 1 else 1, w[0], x[-1], 1, dtype, "linear")
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


def _conv_out(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    return max(1, (size + 2 * pad - dil * (k - 1) - 1) // stride + 1)


def _map_conv(base: str, dims: list[list[int]], dtype: str, extra: dict, out_dims: Sequence[Any]
              ) -> OpMapping | None:
    """Convolutions as the implicit GEMM they are: M = N x output pixels, N = C_out, K = C_in/groups x kernel."""
    if base in ("conv1d", "conv2d", "conv3d", "convolution", "_convolution", "mkldnn_convolution",
                "cudnn_convolution", "thnn_conv2d") and len(dims) >= 2 and len(dims[0]) >= 3:
        x, w = dims[0], dims[1]
        if len(w) != len(x):
            return None
        spatial = len(x) - 2
        off = 3 if len(dims) > 2 or base != "conv2d" else 2
        stride = _ints(_concrete(extra, off)) or [1] * spatial
        pad = _ints(_concrete(extra, off + 1)) or [0] * spatial
        dil = _ints(_concrete(extra, off + 2)) or [1] * spatial
        groups = (_ints(_concrete(extra, off + 3)) or [1])[0] if base in ("conv1d", "conv2d", "conv3d") else 1
        if out_dims and _is_shape(out_dims[0]) and len(out_dims[0]) == len(x):
            opix = math.prod(out_dims[0][2:])
        else:
            def pick(v: list[int], i: int, d: int) -> int:
                return v[i] if i < len(v) else (v[0] if v else d)
            opix = math.prod(_conv_out(x[2 + i], w[2 + i], pick(stride, i, 1), pick(pad, i, 0), pick(dil, i, 1))
                             for i in range(spatial))
        groups = max(1, groups if groups > 0 else x[1] // max(w[1], 1))
        m, n, k = x[0] * opix, w[0], w[1] * math.prod(w[2:])
        mp = _gemm(m, n // groups if groups > 1 else n, k, groups, dtype, "conv")
        return OpMapping("op", "conv", mp.row) if mp else None
    if base in ("convolution_backward", "mkldnn_convolution_backward", "cudnn_convolution_backward") \
            and len(dims) >= 3 and len(dims[0]) >= 3:
        g, x, w = dims[0], dims[1], dims[2]
        m, n, k = g[0] * math.prod(g[2:]), w[0], w[1] * math.prod(w[2:])
        # data grad and/or weight grad (output_mask, the last argument): one GEMM of the forward's size each
        mask = re.findall(r"True|False", _concrete(extra, len(dims) - 1))
        grads = max(1, sum(v == "True" for v in mask[:2])) if len(mask) >= 2 else 2
        mp = _gemm(m, n, k, grads, dtype, "conv_bwd")
        return OpMapping("op", "conv", mp.row) if mp else None
    return None


def _rows_hidden(x: list[int]) -> tuple[int, int]:
    if not x:
        return 1, 1
    return max(1, math.prod(x[:-1])), x[-1]


def _elementwise(label: str, variant: str, fpe: float, in_dims: list[list[int]], out_dims: Sequence[Any],
                 dtype: str, inplace: bool) -> OpMapping | None:
    sizes = [numel(d) for d in in_dims]
    outs = [numel(d) for d in out_dims if _is_shape(d) or isinstance(d, list)]
    elements = max(sizes + outs + [0])
    if elements <= 0:
        return None
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
    elif canon == "all_gather" and "base" not in low and "into_tensor" not in low and len(dims) >= 2:
        elems = numel(dims[0])  # output list: the whole gathered buffer
    elif canon == "all_gather":
        elems = elems * n if "base" not in low else max(numel(d) for d in dims[:2])
    if "barrier" in low:
        elems = 1
    dt = dtype if dtype in _BYTES else "fp32"
    size = max(1, int(elems * _BYTES.get(dt, 4)))
    return OpMapping("collective", "collective", {"op": canon, "size_bytes": size, "n_ranks": max(n, 1),
                                                  "dtype": dt if dt in _FLOATS else "fp32"})


def map_op(name: str, dims: Sequence[Any], types: Sequence[Any], out_dims: Sequence[Any] = (),
           extra: dict[str, Any] | None = None, *, leaf: bool = True, group_size: int = 1) -> OpMapping | None:
    """The family mapping of one traced op (see the module docstring)."""
    extra = extra or {}
    tdims = _tensor_dims(dims, types)
    dtype = _dtype(types)
    if _COLLECTIVE_RE.match(name):
        return map_collective(name, [d for d in dims if isinstance(d, list)], dtype, group_size, extra)
    if not name.startswith("aten::"):
        # the bare inner half of a view (``aten::detach`` calls ``detach``)
        if leaf and ((("::" not in name) and name in VIEW_OPS) or re.search(r"Backward\d*$", name)
                     or name == "torch::autograd::AccumulateGrad"):
            return OpMapping("view", "view")  # autograd bookkeeping that launched no kernel
        return None
    base = base_name(name)
    plain = base.rstrip("_") if base.endswith("_") and not base.startswith("_") else base
    inplace = plain != base
    if base in VIEW_OPS or plain in VIEW_OPS:
        if base == "dropout" and _concrete(extra, 2) == "True" and tdims:  # training dropout without children
            return OpMapping("op", "dropout", {"op": "elementwise", "elements": numel(tdims[0]), "variant": "dropout",
                                               "dtype": dtype})
        return OpMapping("view", "view") if leaf else None
    mp = _map_gemm(plain, tdims, dtype, out_dims) or _map_conv(plain, tdims, dtype, extra, out_dims)
    if mp:
        return mp
    if "scaled_dot_product" in base or base in ("_flash_attention_forward", "_efficient_attention_forward",
                                                 "_flash_attention_backward", "_efficient_attention_backward"):
        bwd = "backward" in base
        q_i = 1 if bwd else 0
        if len(tdims) <= q_i + 1 or len(tdims[q_i]) != 4:
            return None
        q, k = tdims[q_i], tdims[q_i + 1]
        causal = any(_concrete(extra, i) == "True" for i in ((5,) if base == "scaled_dot_product_attention"
                                                             else (3, 4, 5, 6)))
        row = {"op": "attention", "batch": q[0], "heads": q[1], "q_len": q[2], "kv_len": k[2], "head_dim": q[3],
               "kv_heads": k[1], "causal": int(causal), "dtype": dtype, "direction": "bwd" if bwd else "fwd"}
        return OpMapping("op", "attention", row)
    if plain in ("layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm", "native_layer_norm_backward",
                 "_fused_rms_norm_backward") and tdims:
        # (batch/group norm normalise across rows of an NCHW tensor: no family models that layout; unmodelled)
        x = tdims[0]
        bwd = "backward" in plain
        rows, hidden = _rows_hidden(x)
        op = "rmsnorm" if "rms" in plain else "layernorm"
        return OpMapping("op", "norm", {"op": op, "rows": rows, "hidden": hidden, "dtype": dtype,
                                        "direction": "bwd" if bwd else "fwd"})
    if plain in ("softmax", "_softmax", "log_softmax", "_log_softmax", "_softmax_backward_data",
                 "_log_softmax_backward_data", "_safe_softmax") and tdims:
        rows, hidden = _rows_hidden(tdims[0])
        return OpMapping("op", "softmax", {"op": "softmax", "rows": rows, "hidden": hidden, "dtype": dtype,
                                           "direction": "bwd" if "backward" in plain else "fwd"})
    if plain in ("native_dropout", "feature_dropout", "alpha_dropout") and tdims:
        return OpMapping("op", "dropout", {"op": "elementwise", "elements": numel(tdims[0]), "variant": "dropout",
                                           "n_inputs": 1.0, "n_outputs": 1.25, "flops_per_element": 4.0,
                                           "dtype": dtype})
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
        rows = (_ints(_concrete(extra, 2)) or [0])[0]
        d = grad[-1] if grad else 1
        elements = rows * d + numel(grad)
        if elements <= 0:
            return None
        # zero the dense table gradient, then index-add every looked-up row into it
        return OpMapping("op", "embedding", {"op": "elementwise", "elements": int(elements), "variant": "copy",
                                             "n_inputs": round(numel(grad) / elements, 4), "n_outputs": 1.0,
                                             "flops_per_element": 0.0, "dtype": dtype})
    if base.startswith("_foreach_") or base.startswith("_fused_adam") or base.startswith("_fused_sgd"):
        lists = [d for d in dims if isinstance(d, list) and d and all(_is_shape(x) for x in d)]
        if not lists:
            return None
        elements = numel(lists[0])
        variant = "adam" if "adam" in base else base.replace("_foreach_", "").rstrip("_")
        fpe = 12.0 if "adam" in base else 1.0
        n_in = len(lists) if "adam" not in base else 4.0
        n_out = 1.0 if "adam" not in base else 3.0
        return OpMapping("op", "optimizer", {"op": "elementwise", "elements": int(max(elements, 1)),
                                             "variant": variant, "n_inputs": float(n_in), "n_outputs": n_out,
                                             "flops_per_element": fpe, "dtype": dtype})
    entry = ELEMENTWISE.get(plain) or ELEMENTWISE.get(base)
    if entry is not None:
        label, variant, fpe = entry
        if label == "copy" and plain in ("copy", "_to_copy", "clone") and len(tdims) >= 1:
            tdims = tdims[-1:] if plain == "copy" else tdims[:1]
        mp = _elementwise(label, variant, fpe, tdims, out_dims, dtype, inplace)
        return mp
    return None
