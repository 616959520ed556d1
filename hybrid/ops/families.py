"""Op families: which canonical op names belong together, their shape columns, FLOPs and minimum bytes.

Every function here takes a whole :class:`pandas.DataFrame` of ops of one family and returns numpy arrays, so
costing a million ops is one call. Single ops are described by the dataclasses in :mod:`hybrid.ops.spec`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from hybrid.errors import InvalidInputError
from hybrid.units import DTYPE_BYTES, normalize_dtype

Frame = pd.DataFrame
Vector = np.ndarray


def col(df: Frame, name: str, default: float | None = None) -> Vector:
    """Column ``name`` as float64 (``default`` where the column is absent or NaN)."""
    if name in df.columns:
        values = pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=np.float64, copy=False)
        if default is not None:
            values = np.where(np.isnan(values), default, values)
        return values
    if default is None:
        raise InvalidInputError(f"missing column {name!r}")
    return np.full(len(df), float(default))


def factor_map(values: pd.Series | np.ndarray, fn: Callable[[str], object], default: str | None = None) -> np.ndarray:
    """``fn`` applied once per distinct value, broadcast back to every row (fast on millions of rows)."""
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    uniques = np.asarray(uniques, dtype=object)
    if (codes < 0).any():
        if default is None:
            raise InvalidInputError("missing value in a categorical column")
        uniques = np.append(uniques, default)
        codes = np.where(codes < 0, len(uniques) - 1, codes)
    mapped = np.array([fn(str(u)) for u in uniques])
    return mapped[codes]


def dtype_bytes_vec(df: Frame, column: str = "dtype", default: str = "fp32") -> Vector:
    """Bytes per element for each row's dtype (vectorised over unique values)."""
    if column not in df.columns:
        return np.full(len(df), DTYPE_BYTES[default])
    return factor_map(df[column], lambda d: DTYPE_BYTES[normalize_dtype(d)], default).astype(np.float64)


def op_is(df: Frame, *names: str) -> Vector:
    """Boolean mask of rows whose ``op`` is one of ``names``."""
    if "op" not in df.columns:
        return np.zeros(len(df), dtype=bool)
    return factor_map(df["op"], lambda o: o in names, "").astype(bool)


def is_backward(df: Frame) -> Vector:
    if "direction" not in df.columns:
        return np.zeros(len(df), dtype=bool)
    return factor_map(df["direction"], lambda d: d.lower() == "bwd", "fwd").astype(bool)


@dataclass(frozen=True)
class OpFamily:
    """A family of ops that share shape columns and a cost formula."""

    name: str
    ops: tuple[str, ...]
    shape_columns: tuple[str, ...]
    flops: Callable[[Frame], Vector]
    bytes: Callable[[Frame], Vector]
    optional_columns: dict[str, float | str] = field(default_factory=dict)
    description: str = ""


# --------------------------------------------------------------------------------------------- GEMM family
def _gemm_flops(df: Frame) -> Vector:
    return 2.0 * col(df, "b", 1) * col(df, "m") * col(df, "n") * col(df, "k")


def _gemm_bytes(df: Frame) -> Vector:
    b, m, n, k = col(df, "b", 1), col(df, "m"), col(df, "n"), col(df, "k")
    eb = dtype_bytes_vec(df)
    # `linear` shares one weight matrix [K, N] across the batch; gemm/bmm/gemv have one per batch entry.
    shared = op_is(df, "linear")
    weight = np.where(shared, k * n, b * k * n)
    return eb * (b * m * k + weight + b * m * n)


# --------------------------------------------------------------------------------------------- elementwise
#: Per-variant (inputs, outputs, FLOPs per element) defaults, used where a table leaves them out.
ELEMENTWISE_VARIANTS: dict[str, tuple[int, int, float]] = {
    "add": (2, 1, 1), "sub": (2, 1, 1), "mul": (2, 1, 1), "div": (2, 1, 1), "residual": (2, 1, 1),
    "relu": (1, 1, 1), "gelu": (1, 1, 8), "silu": (1, 1, 4), "swiglu": (2, 1, 5), "sigmoid": (1, 1, 4),
    "tanh": (1, 1, 4), "exp": (1, 1, 2), "copy": (1, 1, 0), "scale": (1, 1, 1), "rope": (2, 1, 6),
    "dropout": (1, 2, 2), "cast": (1, 1, 0), "fill": (0, 1, 0), "adam": (4, 3, 12), "sgd": (2, 1, 2),
    # optimizer steps (see hybrid.data.profiler.optimizer): dense Adagrad; sparse updates per gradient value
    "adagrad": (7, 4, 5), "sparse_sgd": (3, 2, 2), "sparse_adagrad": (10, 8, 6),
    # pooling over a 2x2 window with stride 2 (``elements`` = input elements; see :func:`pool_row`)
    "maxpool": (1, 0.75, 1), "avgpool": (1, 0.25, 1),
    # 2x upsampling of a 2-D map (``elements`` = output elements; see :func:`upsample_row`)
    "upsample_nearest": (0.25, 1, 1), "upsample_bilinear": (0.25, 1, 7),
}


#: FLOPs per element of the backward of a pointwise activation (derivative evaluation + product with the gradient),
#: by the forward's variant: how ``hybrid profile`` labels its activation-backward rows (``direction = "bwd"``).
ACTIVATION_BWD_FLOPS: dict[str, float] = {"relu": 1.0, "gelu": 16.0, "silu": 8.0, "sigmoid": 3.0, "tanh": 3.0}
#: ATen activation-backward op -> the forward variant whose profiled backward rows price it (a trace's
#: ``threshold_backward`` is the profile's ``relu`` bwd row: same op, same FLOPs and passes); activations the
#: profiler does not time take the closest profiled derivative.
ACTIVATION_BACKWARD_OPS: dict[str, str] = {
    "threshold_backward": "relu", "hardtanh_backward": "relu", "leaky_relu_backward": "relu",
    "gelu_backward": "gelu", "silu_backward": "silu", "sigmoid_backward": "sigmoid", "tanh_backward": "tanh",
    "elu_backward": "silu", "softplus_backward": "sigmoid", "hardswish_backward": "silu",
    "hardsigmoid_backward": "relu", "mish_backward": "gelu",
    "hardshrink_backward": "relu", "softshrink_backward": "relu", "rrelu_with_noise_backward": "relu",
    "log_sigmoid_backward": "sigmoid", "logit_backward": "sigmoid",
}


def variant_base(variant: str) -> str:
    """An elementwise variant without its in-place marker: ``mul_`` -> ``mul`` (``_`` = the op writes into its
    first input, as PyTorch names in-place ops: no new output tensor is allocated)."""
    return variant[:-1] if variant.endswith("_") and len(variant) > 1 else variant


def is_inplace_variant(variant: object) -> bool:
    """True for an elementwise variant marked in-place (trailing ``_``, see :func:`variant_base`)."""
    return isinstance(variant, str) and len(variant) > 1 and variant.endswith("_")


#: Elementwise variants of pooling rows (:func:`pool_row`).
POOL_VARIANTS = ("maxpool", "avgpool")


def is_pool_variant(variant: object) -> bool:
    """True for the elementwise variant of a pooling row (:func:`pool_row`)."""
    return isinstance(variant, str) and variant_base(variant) in POOL_VARIANTS


#: Interpolation modes of an upsampling row (:func:`upsample_row`) -> input values each output value combines
#: (taps): nearest (and ``nearest-exact``) one, linear two, bilinear four, bicubic sixteen, trilinear eight.
UPSAMPLE_TAPS: dict[str, int] = {"nearest": 1, "linear": 2, "bilinear": 4, "bicubic": 16, "trilinear": 8}
#: Variant prefix of upsampling rows (``upsample_<mode>``).
UPSAMPLE_PREFIX = "upsample_"


def is_upsample_variant(variant: object) -> bool:
    """True for the elementwise variant of an upsampling / interpolation row (:func:`upsample_row`)."""
    return isinstance(variant, str) and variant_base(variant).startswith(UPSAMPLE_PREFIX)


def upsample_row(mode: str, direction: str, in_elements: int, out_elements: int, dtype: str = "fp32",
                 out_width: int | None = None) -> dict[str, object]:
    """The canonical ``elementwise`` row of an interpolation (``F.interpolate`` / ``nn.Upsample``: ATen's
    ``upsample_<mode><n>d``, any scale, up or down) or its backward.

    ``elements`` is the interpolated (output) map's size, ``in_elements`` the source map's. Forward: every output
    value is computed from its ``taps`` source values (:data:`UPSAMPLE_TAPS`; neighbours share them, so the source
    map is read once, or only the sampled part of it when it is larger) and written once. Backward: the output
    gradient is read once and the source gradient (zeroed, then accumulated into) written. FLOPs per element:
    the taps' weighted sum, ``2 taps - 1`` (nearest: the index arithmetic, 1). ``out_width`` (the interpolated
    map's last dimension) adds ``rows`` (its lines) and ``hidden`` (their length): the kernels loop over lines, and
    a CPU runs a map of short lines several times slower per value than one of long lines. The profiler and the
    trace mapping both build rows with this function, so measured and traced interpolations describe the same
    passes."""
    taps = UPSAMPLE_TAPS.get(mode)
    if taps is None:
        raise InvalidInputError(f"upsample_row: unknown mode {mode!r}; known: {', '.join(UPSAMPLE_TAPS)}")
    if direction not in ("fwd", "bwd"):
        raise InvalidInputError(f"upsample_row: direction must be 'fwd' or 'bwd', got {direction!r}")
    if in_elements <= 0 or out_elements <= 0:
        raise InvalidInputError(f"upsample_row: sizes must be positive, got in={in_elements} out={out_elements}")
    if out_width is not None and (out_width <= 0 or out_elements % out_width):
        raise InvalidInputError(f"upsample_row: out_width {out_width} does not divide the {out_elements} output "
                                "elements")
    share = in_elements / out_elements
    n_in, n_out = (min(share, float(taps)), 1.0) if direction == "fwd" else (1.0, share)
    row: dict[str, object] = {"op": "elementwise", "variant": f"{UPSAMPLE_PREFIX}{mode}", "direction": direction,
                              "elements": int(out_elements), "n_inputs": round(n_in, 4), "n_outputs": round(n_out, 4),
                              "flops_per_element": float(2 * taps - 1), "dtype": normalize_dtype(dtype)}
    if out_width is not None:
        row.update(rows=int(out_elements // out_width), hidden=int(out_width))
    return row


GRID_SAMPLE_PREFIX = "grid_sample_"


def is_grid_sample_variant(variant: object) -> bool:
    """True for the elementwise variant of a grid-sampling row (:func:`grid_sample_row`)."""
    return isinstance(variant, str) and variant_base(variant).startswith(GRID_SAMPLE_PREFIX)


def grid_sample_row(mode: str, direction: str, in_elements: int, channels: int, positions: int, dtype: str = "fp32",
                    out_width: int | None = None, coords: int = 2) -> dict[str, object]:
    """The canonical ``elementwise`` row of a grid sampling (``F.grid_sample``: ATen's ``grid_sampler_2d/3d``) or
    its backward: an interpolation (:func:`upsample_row`'s passes and FLOPs for ``mode``) whose output map is
    ``channels`` x ``positions`` (the grid's points) and whose source points come from the grid, read once more
    (``coords`` values per point, shared by the channels: ``coords / channels`` per output value; the backward
    also writes the grid's gradient). Variant ``grid_sample_<mode>``: the kernels compute each point's source
    indices and weights from the grid, a different loop from an upsampling's (this project's one-thread CPU runs a
    bilinear grid sample's forward 1.5x faster per value than ``upsample_bilinear2d``'s, its backward 1.6x slower).
    The profiler and the trace mapping both build rows with this function."""
    if channels <= 0 or positions <= 0:
        raise InvalidInputError(f"grid_sample_row: channels and positions must be positive, got {channels}, "
                                f"{positions}")
    if coords not in (2, 3):
        raise InvalidInputError(f"grid_sample_row: coords must be 2 (2-D) or 3 (3-D), got {coords}")
    row = upsample_row(mode, direction, in_elements, channels * positions, dtype, out_width=out_width)
    share = coords / channels
    row["variant"] = f"{GRID_SAMPLE_PREFIX}{mode}"
    row["n_inputs"] = round(float(row["n_inputs"]) + share, 4)  # type: ignore[arg-type]
    if direction == "bwd":
        row["n_outputs"] = round(float(row["n_outputs"]) + share, 4)  # type: ignore[arg-type]
    return row


def pool_row(kind: str, direction: str, in_elements: int, out_elements: int, window: int, dtype: str = "fp32",
             indices: bool = True) -> dict[str, object]:
    """The canonical ``elementwise`` row of a 2-D max/avg pooling (``kind`` = "max" or "avg") or its backward.

    ``elements`` is the input (feature-map) size; the passes over it: fwd reads the input once and writes the
    output (``out/in`` of it, plus the int64 argmax indices of a max pool); bwd reads the output gradient (and
    the indices) and writes (zeroes, then scatters into) the input gradient. FLOPs per element: ``window`` /
    (in/out) comparisons or additions per input element. The profiler and the trace mapping both build rows with
    this function, so measured and traced pooling rows describe the same passes.
    """
    if in_elements <= 0 or out_elements <= 0 or window <= 0:
        raise InvalidInputError(f"pool_row: sizes must be positive, got in={in_elements} out={out_elements} "
                                f"window={window}")
    eb = DTYPE_BYTES[normalize_dtype(dtype)]
    share = out_elements / in_elements
    idx = (8.0 / eb) if (kind == "max" and indices) else 0.0
    fpe = window * share
    if direction == "bwd":
        n_in, n_out = share * (1.0 + idx), 1.0
    else:
        n_in, n_out = 1.0, share * (1.0 + idx)
    return {"op": "elementwise", "variant": f"{kind}pool", "direction": direction, "elements": int(in_elements),
            "n_inputs": round(n_in, 4), "n_outputs": round(n_out, 4), "flops_per_element": round(fpe, 4),
            "dtype": normalize_dtype(dtype)}


def elementwise_defaults(df: Frame) -> tuple[Vector, Vector, Vector]:
    """(inputs, outputs, flops/element) per row: explicit columns win, else the variant's defaults."""
    if "variant" in df.columns:
        # once per distinct variant: lower case, an in-place "_" suffix dropped, missing = "add", unknown = 1 / 1 / 1
        def lookup(name: str) -> tuple[float, float, float]:
            n = name.lower()
            return ELEMENTWISE_VARIANTS.get(n[:-1] if len(n) > 1 and n.endswith("_") else n, (1.0, 1.0, 1.0))

        looked = factor_map(df["variant"], lookup, "add").astype(np.float64).reshape(len(df), 3)
        d_in, d_out, d_f = looked[:, 0], looked[:, 1], looked[:, 2]
    else:
        d_in, d_out, d_f = (np.ones(len(df)),) * 3
    n_in = col(df, "n_inputs", np.nan) if "n_inputs" in df.columns else np.full(len(df), np.nan)
    n_out = col(df, "n_outputs", np.nan) if "n_outputs" in df.columns else np.full(len(df), np.nan)
    fpe = col(df, "flops_per_element", np.nan) if "flops_per_element" in df.columns else np.full(len(df), np.nan)
    return (np.where(np.isnan(n_in), d_in, n_in), np.where(np.isnan(n_out), d_out, n_out),
            np.where(np.isnan(fpe), d_f, fpe))


def _elementwise_flops(df: Frame) -> Vector:
    _, _, fpe = elementwise_defaults(df)
    return col(df, "elements") * fpe


def _elementwise_bytes(df: Frame) -> Vector:
    n_in, n_out, _ = elementwise_defaults(df)
    return col(df, "elements") * (n_in + n_out) * dtype_bytes_vec(df)


# --------------------------------------------------------------------------------------------- norms, softmax
def _norm_flops(df: Frame) -> Vector:
    per = np.where(op_is(df, "rmsnorm"), 5.0, 8.0)
    bwd = is_backward(df)
    return col(df, "rows") * col(df, "hidden") * per * np.where(bwd, 2.5, 1.0)


def _norm_bytes(df: Frame) -> Vector:
    rows, hidden, eb = col(df, "rows"), col(df, "hidden"), dtype_bytes_vec(df)
    bwd = is_backward(df)
    # layer/RMS norm normalise each of `rows` rows over `hidden`: gamma/beta have `hidden` values. Batch norm
    # (training) normalises each of `rows` = C channels over `hidden` = N x H x W values: gamma/beta (and the
    # saved mean / inverse std) have `rows` values.
    params = np.where(op_is(df, "batchnorm"), rows, hidden)
    # fwd: read x, write y, read gamma/beta. bwd: read x, dy, write dx (+ weight grads).
    return eb * (rows * hidden * np.where(bwd, 3.0, 2.0) + params * np.where(bwd, 4.0, 2.0))


def _softmax_flops(df: Frame) -> Vector:
    return 5.0 * col(df, "rows") * col(df, "hidden") * np.where(is_backward(df), 1.6, 1.0)


def _softmax_bytes(df: Frame) -> Vector:
    return dtype_bytes_vec(df) * col(df, "rows") * col(df, "hidden") * np.where(is_backward(df), 3.0, 2.0)


# --------------------------------------------------------------------------------------------- embedding bags
def expected_unique_rows(num_rows: Vector, lookups: Vector, zipf_alpha: Vector | None = None) -> Vector:
    """Expected number of distinct rows touched by ``lookups`` draws from a table of ``num_rows`` rows.

    Uniform: ``N (1 - (1 - 1/N)^L)``. Zipf(alpha) over ranks: ``sum_i 1 - (1 - p_i)^L`` evaluated on a
    log-spaced grid of ranks (64 points, trapezoid rule), vectorised over rows.
    """
    n = np.maximum(np.asarray(num_rows, dtype=np.float64), 1.0)
    lk = np.maximum(np.asarray(lookups, dtype=np.float64), 0.0)
    uniform = n * -np.expm1(lk * np.log1p(-1.0 / np.maximum(n, 1.0000001)))
    uniform = np.where(n <= 1, np.minimum(1.0, lk), uniform)
    if zipf_alpha is None:
        return uniform
    alpha = np.nan_to_num(np.asarray(zipf_alpha, dtype=np.float64), nan=0.0)
    skewed = alpha > 0
    if not skewed.any():
        return uniform
    ns, ls, a = n[skewed], lk[skewed], alpha[skewed]
    grid = np.linspace(0.0, 1.0, 64)
    ranks = np.exp(grid[None, :] * np.log(ns)[:, None])  # 1 .. N, log-spaced
    weights = ranks ** (-a[:, None])
    # normaliser H_N(a) approximated by the same integral (sum ~ integral of r^-a dr plus the first term)
    dr = np.gradient(ranks, axis=1)
    h = np.sum(weights * dr, axis=1) + 0.5
    p = weights / h[:, None]
    touched = -np.expm1(ls[:, None] * np.log1p(-np.minimum(p, 1 - 1e-12)))
    unique = np.sum(touched * dr, axis=1)
    out = uniform.copy()
    out[skewed] = np.clip(unique, np.minimum(1.0, ls), np.minimum(ns, ls))
    return out


def generalized_harmonic(n: Vector, alpha: Vector) -> Vector:
    """``sum_{i=1..n} i^-alpha`` by Euler-Maclaurin (three terms; exact at n = 1, within 3% of the sum for
    alpha <= 2.5, closer for large n), vectorised; ``n`` may be fractional (a cache holding part of a row count)."""
    n = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
    a = np.asarray(alpha, dtype=np.float64)
    one = np.abs(a - 1.0) < 1e-9
    am = np.where(one, 0.5, a)
    general = (n ** (1.0 - am) - 1.0) / (1.0 - am) + 0.5 * (1.0 + n ** -am) + am / 12.0 * (1.0 - n ** (-am - 1.0))
    harmonic = np.log(n) + 0.5 + 0.5 / n + (1.0 - n ** -2.0) / 12.0
    return np.where(one, harmonic, general)


def expected_hottest_row_lookups(num_rows: Vector, lookups: Vector, zipf_alpha: Vector | None = None) -> Vector:
    """Expected lookups of a table's most looked-up row among ``lookups`` draws from ``num_rows`` rows.

    Zipf(alpha): the first rank's share, ``lookups / H(N, alpha)`` (:func:`generalized_harmonic`). Uniform (``alpha`` 0 or NaN): the mean count
    plus the normal approximation of the maximum of ``N`` bins, ``L/N + sqrt(2 (L/N) ln N)``, at least 1 (and at
    most ``lookups``). This is how long one row's duplicates are: what a kernel that sums each row's duplicates
    serially (CUDA's sparse ``coalesce``) waits for.
    """
    n = np.maximum(np.asarray(num_rows, dtype=np.float64), 1.0)
    lk = np.maximum(np.asarray(lookups, dtype=np.float64), 0.0)
    alpha = (np.zeros_like(n) if zipf_alpha is None
             else np.nan_to_num(np.asarray(zipf_alpha, dtype=np.float64), nan=0.0))
    n, lk, alpha = np.broadcast_arrays(n, lk, alpha)
    shape = n.shape
    n, lk, alpha = n.ravel(), lk.ravel(), alpha.ravel()
    mean = lk / n
    out = mean + np.sqrt(2.0 * mean * np.log(n))
    skewed = alpha > 0
    if skewed.any():
        out[skewed] = lk[skewed] / generalized_harmonic(n[skewed], alpha[skewed])
    return np.minimum(np.maximum(out, np.minimum(lk, 1.0)), lk).reshape(shape)


def embedding_lookups(df: Frame) -> Vector:
    """Total row gathers: tables x batch x pooling factor."""
    return col(df, "num_tables", 1) * col(df, "batch_size") * col(df, "pooling_factor")


def _embedding_flops(df: Frame) -> Vector:
    return embedding_lookups(df) * col(df, "embedding_dim")


#: Full passes over the tables of a backward row with a *dense* gradient (``variant`` ``dense_*``: what
#: ``nn.EmbeddingBag(sparse=False)`` and ``torch.optim.SGD`` do and what ``hybrid profile`` times as
#: ``dense_sgd``): the table-sized gradient is zero-filled (1 write), then the update ``w.add_(grad)`` reads the
#: gradient and reads and writes the weights (3).
DENSE_GRAD_ZERO_PASSES = 1.0
DENSE_SGD_UPDATE_PASSES = 3.0


def dense_gradient_rows(df: Frame) -> Vector:
    """True for backward embedding rows whose gradient is dense, table-sized (``variant`` naming ``dense``, any
    case); the embedding correction's ``dense_gradient`` feature reads the same rule."""
    if "variant" not in df.columns:
        return np.zeros(len(df), dtype=bool)
    dense = factor_map(df["variant"], lambda v: "dense" in v.lower(), "").astype(bool)
    return dense & is_backward(df)


def _embedding_bwd_parts(df: Frame) -> tuple[Vector, Vector]:
    """(bytes of the gradient formed over the touched rows, bytes of the table passes of a dense gradient) of
    backward embedding rows."""
    t, bs, dim = col(df, "num_tables", 1), col(df, "batch_size"), col(df, "embedding_dim")
    eb = dtype_bytes_vec(df)
    index_bytes = embedding_lookups(df) * 8.0
    out_bytes = t * bs * dim * eb
    alpha = col(df, "zipf_alpha", 0.0)
    unique = t * expected_unique_rows(col(df, "num_embeddings"), bs * col(df, "pooling_factor"), alpha)
    # read output grads, read indices, read+write each touched row once (the fused sparse update, or the
    # scatter-add into a dense gradient)
    sparse = out_bytes + index_bytes + 2.0 * unique * dim * eb
    table_bytes = t * col(df, "num_embeddings") * dim * eb
    dense = np.where(dense_gradient_rows(df), (DENSE_GRAD_ZERO_PASSES + DENSE_SGD_UPDATE_PASSES) * table_bytes, 0.0)
    return sparse, dense


def dense_sgd_update_share(df: Frame) -> Vector:
    """Share of a backward embedding row's bytes that its dense SGD update moves (:data:`DENSE_SGD_UPDATE_PASSES`
    of the table passes; 0 for rows without a dense gradient): what a task graph that steps the table in its
    optimizer phase takes out of the profiled backward + update row."""
    sparse, dense = _embedding_bwd_parts(df)
    update = dense * (DENSE_SGD_UPDATE_PASSES / (DENSE_GRAD_ZERO_PASSES + DENSE_SGD_UPDATE_PASSES))
    return np.where(dense > 0, update / np.maximum(sparse + dense, 1e-300), 0.0)


def _embedding_bytes(df: Frame) -> Vector:
    t, bs, dim = col(df, "num_tables", 1), col(df, "batch_size"), col(df, "embedding_dim")
    eb = dtype_bytes_vec(df)
    lookups = embedding_lookups(df)
    fwd = lookups * dim * eb + lookups * 8.0 + t * bs * dim * eb  # gather rows, read indices, write pooled output
    sparse, dense = _embedding_bwd_parts(df)
    return np.where(is_backward(df), sparse + dense, fwd)


# --------------------------------------------------------------------------------------------- attention
def _attention_pairs(df: Frame) -> Vector:
    q, kv = col(df, "q_len"), col(df, "kv_len")
    causal = col(df, "causal", 0).astype(bool)
    qq = np.minimum(q, kv)
    causal_pairs = q * kv - qq * (qq - 1) / 2.0
    return np.where(causal, causal_pairs, q * kv)


def attention_exps(df: Frame) -> Vector:
    """Exponentials of a fused attention kernel: one per (query, key) score, forward and backward alike
    (FlashAttention's backward recomputes the probabilities ``exp(S - logsumexp)`` once per score)."""
    return col(df, "batch") * col(df, "heads") * _attention_pairs(df)


#: Integer ops a fused attention kernel spends per score on its dropout mask: FlashAttention-2 (and PyTorch's copy of
#: it) draws one Philox4x32-10 call per 16 scores (10 rounds of two 32-bit multiply-high/low pairs, four XORs and
#: the key's two adds: ~100 ops for 4 x 32 random bits, read as 16 bytes) and per score extracts its byte,
#: compares it with the keep threshold and selects the scaled value (3). From the algorithm, not fitted.
DROPOUT_INT_OPS_PER_SCORE = 100.0 / 16.0 + 3.0


def attention_dropout_ops(df: Frame) -> Vector:
    """Integer ops of a fused attention's dropout mask (``dropout`` > 0: its probability): one Philox draw per
    score (:data:`DROPOUT_INT_OPS_PER_SCORE`), in the forward and again in the backward, which regenerates the mask
    from the same seed instead of storing it; 0 without dropout."""
    p = np.nan_to_num(col(df, "dropout", 0.0), nan=0.0)
    return np.where(p > 0, attention_exps(df) * DROPOUT_INT_OPS_PER_SCORE, 0.0)


def _attention_flops(df: Frame) -> Vector:
    f = 4.0 * col(df, "batch") * col(df, "heads") * col(df, "head_dim") * _attention_pairs(df)
    return f * np.where(is_backward(df), 2.5, 1.0)


def _attention_bytes(df: Frame) -> Vector:
    b, h, d = col(df, "batch"), col(df, "heads"), col(df, "head_dim")
    kvh = col(df, "kv_heads", np.nan)
    kvh = np.where(np.isnan(kvh), h, kvh)
    q, kv = col(df, "q_len"), col(df, "kv_len")
    eb = dtype_bytes_vec(df)
    fwd = eb * b * d * (2.0 * q * h + 2.0 * kv * kvh)  # read Q, K, V; write O
    return fwd * np.where(is_backward(df), 2.5, 1.0)


# --------------------------------------------------------------------------------------------- convolution
#: Gradients a convolution backward computes, by ``variant`` (``input_weight`` when absent): the data gradient
#: (``input``), the weight (+ bias) gradient (``weight``) or both (``input_weight``, the usual case; the first
#: layer of a network needs no input gradient).
CONV_BWD_VARIANTS = {"input_weight": (1.0, 1.0), "input": (1.0, 0.0), "weight": (0.0, 1.0)}


def conv_output_hw(df: Frame) -> tuple[Vector, Vector]:
    """Output height and width: ``(size + 2 padding - dilation (kernel - 1) - 1) // stride + 1`` (at least 1)."""
    s, p, d = col(df, "stride", 1), col(df, "padding", 0), col(df, "dilation", 1)

    def out(size: Vector, k: Vector) -> Vector:
        return np.maximum(1.0, np.floor((size + 2 * p - d * (k - 1) - 1) / s) + 1)

    return out(col(df, "height"), col(df, "kernel_h")), out(col(df, "width"), col(df, "kernel_w"))


def conv_implicit_gemm(df: Frame) -> tuple[Vector, Vector, Vector, Vector]:
    """(groups, M, N, K) of the implicit GEMM of a convolution's forward: M = batch x output pixels,
    N = out_channels / groups, K = in_channels / groups x kernel area (one GEMM per group)."""
    g = col(df, "groups", 1)
    oh, ow = conv_output_hw(df)
    m = col(df, "batch") * oh * ow
    n = col(df, "out_channels") / g
    k = col(df, "in_channels") / g * col(df, "kernel_h") * col(df, "kernel_w")
    return g, m, n, k


def conv_grads(df: Frame) -> tuple[Vector, Vector]:
    """(input-gradient, weight-gradient) flags (0/1) per row from :data:`CONV_BWD_VARIANTS`; (0, 0) on forward
    rows."""
    bwd = is_backward(df)
    if "variant" in df.columns:
        flags = factor_map(df["variant"], lambda v: CONV_BWD_VARIANTS.get(v.lower(), (1.0, 1.0)), "input_weight")
        flags = np.asarray(flags, dtype=np.float64).reshape(len(df), 2)
        gin, gw = flags[:, 0], flags[:, 1]
    else:
        gin, gw = np.ones(len(df)), np.ones(len(df))
    return np.where(bwd, gin, 0.0), np.where(bwd, gw, 0.0)


def _conv_flops(df: Frame) -> Vector:
    g, m, n, k = conv_implicit_gemm(df)
    one = 2.0 * g * m * n * k
    gin, gw = conv_grads(df)
    # each gradient is a GEMM of the forward's size (data: dY W^T, weight: X^T dY)
    return np.where(is_backward(df), one * (gin + gw), one)


def _conv_bytes(df: Frame) -> Vector:
    eb = dtype_bytes_vec(df)
    b, h, w = col(df, "batch"), col(df, "height"), col(df, "width")
    oh, ow = conv_output_hw(df)
    x = b * col(df, "in_channels") * h * w
    y = b * col(df, "out_channels") * oh * ow
    wt = col(df, "out_channels") * col(df, "in_channels") / col(df, "groups", 1) * col(df, "kernel_h") * \
        col(df, "kernel_w")
    gin, gw = conv_grads(df)
    # fwd: read x, w; write y. bwd: read dy; data grad reads w, writes dx; weight grad reads x, writes dw
    bwd = y + gin * (wt + x) + gw * (x + wt)
    return eb * np.where(is_backward(df), bwd, x + wt + y)


# --------------------------------------------------------------------------------------------- collectives
#: Bus factor per collective (nccl-tests convention): bytes each rank moves = size * factor(n).
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "broadcast", "reduce")


def bus_factor(op: Vector | pd.Series, ranks: Vector) -> Vector:
    n = np.maximum(np.asarray(ranks, dtype=np.float64), 1.0)
    ops = np.asarray(op, dtype=object)
    ring = (n - 1.0) / n
    return np.select(
        [ops == "all_reduce", np.isin(ops, ["all_gather", "reduce_scatter", "all_to_all"])],
        [2.0 * ring, ring],
        default=1.0,
    )


def _collective_flops(df: Frame) -> Vector:
    ops = np.asarray(df["op"], dtype=object)
    reduces = np.isin(ops, ["all_reduce", "reduce_scatter", "reduce"])
    return np.where(reduces, col(df, "size_bytes") / dtype_bytes_vec(df), 0.0)


def _collective_bytes(df: Frame) -> Vector:
    return col(df, "size_bytes") * bus_factor(df["op"], col(df, "n_ranks"))


#: ``index_dist`` values of embedding rows.
INDEX_DISTS = ("uniform", "zipf")

FAMILIES: dict[str, OpFamily] = {
    f.name: f
    for f in (
        OpFamily("gemm", ("gemm", "bmm", "linear", "gemv", "matmul"), ("m", "n", "k"), _gemm_flops, _gemm_bytes,
                 {"b": 1}, "C[b,m,n] = A[b,m,k] @ B[b,k,n]; GEMV is m=1 or n=1; `linear` shares B across b"),
        OpFamily("elementwise", ("elementwise",), ("elements",), _elementwise_flops, _elementwise_bytes,
                 {"variant": "add", "n_inputs": np.nan, "n_outputs": np.nan, "flops_per_element": np.nan},
                 "pointwise kernels; `variant` (add, gelu, ...) supplies inputs/outputs/FLOPs defaults"),
        OpFamily("norm", ("layernorm", "rmsnorm", "batchnorm"), ("rows", "hidden"), _norm_flops, _norm_bytes, {},
                 "row-wise normalisation over `hidden` (batchnorm: `rows` = channels, `hidden` = N x H x W)"),
        OpFamily("softmax", ("softmax",), ("rows", "hidden"), _softmax_flops, _softmax_bytes, {},
                 "row-wise softmax over `hidden`"),
        OpFamily("embedding", ("embedding_bag",),
                 ("num_embeddings", "embedding_dim", "pooling_factor", "batch_size"),
                 _embedding_flops, _embedding_bytes, {"num_tables": 1, "index_dist": "uniform", "zipf_alpha": 0.0},
                 "pooled embedding-bag lookups over `num_tables` tables; `direction` fwd/bwd"),
        OpFamily("attention", ("attention",), ("batch", "heads", "q_len", "kv_len", "head_dim"),
                 _attention_flops, _attention_bytes,
                 {"kv_heads": np.nan, "causal": 0, "softmax_overlap": np.nan, "dropout": 0.0},
                 "fused (flash) attention; GQA through `kv_heads`; `softmax_overlap` 1 = the softmax's exps overlap "
                 "the matrix multiplies (FlashAttention-3, cuDNN on Hopper+), 0 = in series (FlashAttention-2); "
                 "`dropout` = the attention dropout's probability (its mask's random numbers on the integer lanes)"),
        OpFamily("conv", ("conv2d",), ("batch", "in_channels", "out_channels", "height", "width", "kernel_h",
                                       "kernel_w"), _conv_flops, _conv_bytes,
                 {"stride": 1, "padding": 0, "dilation": 1, "groups": 1},
                 "2-D convolution (NCHW; 1-D as width 1); `direction` bwd with `variant` input_weight / input / "
                 "weight = which gradients"),
        OpFamily("collective", COLLECTIVE_OPS, ("size_bytes", "n_ranks"), _collective_flops, _collective_bytes,
                 {"n_nodes": 1}, "collectives; `size_bytes` follows nccl-tests (total buffer size)"),
    )
}

#: op name -> family name
OP_TO_FAMILY: dict[str, str] = {op: fam.name for fam in FAMILIES.values() for op in fam.ops}


def family_of(op: str) -> OpFamily:
    try:
        return FAMILIES[OP_TO_FAMILY[op]]
    except KeyError:
        raise InvalidInputError(f"unknown op {op!r}; known: {', '.join(sorted(OP_TO_FAMILY))}") from None


def family_array(ops: pd.Series) -> np.ndarray:
    """Family name per row (vectorised); raises on unknown ops."""
    return factor_map(ops, lambda o: family_of(o).name)
