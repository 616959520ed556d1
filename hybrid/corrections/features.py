"""Vectorised feature building for the learned kernel and embedding models.

Features describe an op *relative to the device it runs on* (arithmetic intensity against the device's ridge
point, fractional waves of output tiles over the SM count, working set against the L2 cache, roofline times),
plus a few plain device descriptors, so a model fitted on some GPUs transfers to a GPU known only from its
catalog entry. Everything is computed on whole columns; per-device values are looked up once per distinct
(device, dtype) pair and broadcast.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybrid.corrections.base import str_codes
from hybrid.hardware.catalog import Catalog
from hybrid.ops.families import (
    col,
    dense_gradient_rows,
    dtype_bytes_vec,
    elementwise_defaults,
    expected_unique_rows,
    factor_map,
    is_backward,
    is_grid_sample_variant,
    is_inplace_variant,
    is_pool_variant,
    is_upsample_variant,
)
from hybrid.units import normalize_dtype

#: Highest version of the feature sets below (1 = before the transfer model, 2 adds the transfer set, 3
#: :data:`DEVICE_FEATURES_V3`, 4 :data:`GEMM_FEATURES_V4`); also the default of :func:`build_features` and
#: :func:`feature_names`, whose version-4 sets are every model's current one (pointwise, conv and embedding keep
#: their version-3 sets at 4). A saved model records the version it was fitted with and is rebuilt with exactly
#: those features (``feature_names(kind, use_device, version)``).
LATEST_FEATURE_VERSION = 4

#: Output tile edges (elements) used for the wave-quantisation features: common cuBLAS/rocBLAS tile sizes.
TILE_EDGES = (64, 128)
#: Output tile edge (elements) of the tiled-traffic estimate: every 128-column strip of C re-reads A (and every
#: 128-row strip re-reads B) from DRAM unless both operands fit in the last-level cache.
TRAFFIC_TILE = 128
#: Elements one GPU block of a row-wise kernel typically handles per row chunk (vector loads of 4 x 32 lanes).
ROW_CHUNK = 128

#: Device descriptors (per row, via the row's device and dtype).
DEVICE_FEATURES = ("dev_log_peak", "dev_log_bw", "dev_log_ridge", "dev_log_l2", "dev_sms", "dev_clock_ghz",
                   "dev_amd", "dev_log_bw_per_sm")
#: Added in version 3: why a device falls short of its datasheet. ``dev_log_path_ratio`` = log(peak of the
#: row's dtype / FP32 peak): 0 on the CUDA-core path, log 8-16 on the tensor-core path, whose kernels need larger
#: tiles to reach their peak; ``dev_log_tdp_per_sm`` = log(board power / SMs): watts each SM may draw, low on
#: 70-75 W cards that cannot hold their boost clock under load; ``dev_cpu`` = a CPU (library: oneDNN/MKL).
DEVICE_FEATURES_V3 = (*DEVICE_FEATURES, "dev_log_path_ratio", "dev_log_tdp_per_sm", "dev_cpu")
#: Every column :func:`device_columns` computes (a superset of each version's device descriptors).
DEVICE_COLUMNS = DEVICE_FEATURES_V3
#: Roofline-derived features shared by every kernel.
BASE_FEATURES = ("dtype_bytes", "log_flops", "log_bytes", "log_compute_us", "log_memory_us", "log_latency_us",
                 "log_roofline_us", "log_intensity_over_ridge", "log_bytes_over_l2", "body_over_latency")
#: GEMM-family features (version 1).
GEMM_FEATURES = ("log_b", "log_m", "log_n", "log_k", "is_gemv", "is_bmm", "is_linear", "align8",
                 "waves64", "wave_eff64", "waves128", "wave_eff128", "log_mn_over_k")
#: Added in version 2: estimated DRAM traffic of a tiled GEMM over the minimum bytes the roofline counts.
GEMM_FEATURES_V2 = (*GEMM_FEATURES, "log_traffic_over_bytes")
#: Added in version 3: integer arithmetic (int8 dot products: DP4A on Pascal, IMMA on tensor cores), so 1-byte
#: floating point (fp8 on Hopper tensor cores) is not learned from int8 rows.
GEMM_FEATURES_V3 = (*GEMM_FEATURES_V2, "is_int")
#: Added in version 4: how the row was timed. ``kernel_timing`` = 1 when the time is the kernel alone (XLA's
#: profiled perf tables, DeepBench's back-to-back library calls), 0 when it includes the framework's per-op
#: host dispatch (eager PyTorch: ~5-30 us per op, which dominates small GEMMs). The quantity being predicted
#: differs, not the device, so it is an input (column ``framework``), see :data:`KERNEL_TIMING_FRAMEWORKS`.
GEMM_FEATURES_V4 = (*GEMM_FEATURES_V3, "kernel_timing")
#: Values of the ``framework`` column whose times are kernel-only (lower case); anything else, or no
#: ``framework`` column, counts as framework-dispatched (what the project's own PyTorch profiler measures).
#: ``vidur``: Vidur's compute rows marked as the kernel times they are
#: (:func:`hybrid.data.importers.vidur.kernel_timed`; the importer itself writes ``pytorch``, see there).
KERNEL_TIMING_FRAMEWORKS = frozenset({"xla", "deepbench", "cublas", "rocblas", "hipblaslt", "cutlass", "cupti",
                                      "nsight", "kernel", "vidur"})
#: The only device descriptor of the *transfer* model (used for devices absent from the training data): the
#: vendor, i.e. which BLAS library (cuBLAS / rocBLAS) runs the kernel. Raw descriptors (peak, bandwidth, SMs,
#: L2, clock) identify each of the few training GPUs and hurt on an unseen one
#: (``experiments/kernel_accuracy/results.md``).
TRANSFER_DEVICE_FEATURES = ("dev_amd",)
#: Version-3 transfer descriptors: the library (vendor, CPU), the dtype's path and power per SM: ratios that
#: describe a class of devices rather than naming one.
TRANSFER_DEVICE_FEATURES_V3 = ("dev_amd", "dev_cpu", "dev_log_path_ratio", "dev_log_tdp_per_sm")
#: Elementwise / norm / softmax / attention features.
POINTWISE_FEATURES = ("op_code", "is_bwd", "log_elements", "log_rows", "log_hidden", "hidden_vec4", "n_inputs",
                      "n_outputs", "flops_per_element", "row_waves", "row_wave_eff")
#: Fused-attention features (:class:`~hybrid.corrections.kernel_xgb.AttentionXGB`, every feature version): the
#: kernel's own shape (direction, causal mask, head size, sequence lengths, query heads per KV head), its query
#: tiles per SM (FlashAttention-style kernels run one thread block per 128 queries of a head: ``batch x heads x
#: ceil(q_len / 128)`` blocks over the device's SMs, and their wave quantisation), how far above its ridge it sits
#: and what share of its compute bound the softmax's exps take (``busy_us / compute_us`` of the roofline). No
#: descriptor names a device: the efficiency learned is relative to the row's own roofline (the dtype's tensor-core
#: peak for long prefill), so it carries to GPUs without attention rows through the SM count and these ratios.
ATTENTION_FEATURES = ("is_bwd", "causal", "log_head_dim", "log_q_len", "log_kv_len", "log_gqa", "log_tile_waves",
                      "tile_wave_eff", "dtype_bytes", "log_intensity_over_ridge", "log_exp_share")
#: Device descriptors of the attention model: the class of device (vendor, CPU) and the dtype's path (tensor
#: cores or not), never raw peaks or sizes (:data:`TRANSFER_DEVICE_FEATURES_V3`' ratios less the power per SM,
#: which with one or two fitted GPUs only names them).
ATTENTION_DEVICE_FEATURES = ("dev_amd", "dev_cpu", "dev_log_path_ratio")
#: Queries per thread block of the FlashAttention-style kernels (FlashAttention-2 / cuDNN / CUTLASS forward tiles).
ATTENTION_QUERY_TILE = 128
#: Embedding-bag features (version 1).
EMBEDDING_FEATURES = ("is_bwd", "dense_grad", "log_num_embeddings", "log_dim", "log_pooling", "log_batch", "log_tables",
                      "zipf_alpha", "log_lookups", "log_unique", "unique_fraction", "log_table_bytes_over_l2",
                      "log_touched_over_l2", "log_row_bytes")
#: Added in version 2: optimizer state words per row updated in backward (variant names: ``*adagrad*`` 1,
#: ``*adam*`` 2, ``*momentum*`` 1, plain SGD / forward 0), so new optimizer variants get their own splits.
EMBEDDING_FEATURES_V2 = (*EMBEDDING_FEATURES, "optimizer_state")
#: Optimizer state words per variant-name fragment (first match wins; unknown variants have none).
OPTIMIZER_STATE_WORDS = (("adam", 2.0), ("adagrad", 1.0), ("momentum", 1.0), ("rmsprop", 1.0))

#: Convolution features: the implicit GEMM (M = batch x output pixels, N = out channels / groups, K = in channels
#: / groups x kernel area), the layer's own sizes, which gradients a backward computes, channel blocking (oneDNN
#: and cuDNN tile channels by 8/16) and depthwise grouping.
CONV_FEATURES = ("is_bwd", "grad_input", "grad_weight", "log_m", "log_n", "log_k", "log_mn_over_k", "log_groups",
                 "depthwise", "log_batch", "log_in_channels", "log_out_channels", "log_out_pixels", "log_kernel_area",
                 "stride", "channels_align16")

#: Codes of the pointwise ops (a single ordinal feature; trees split it as needed).
POINTWISE_OPS = {"elementwise": 0, "layernorm": 1, "rmsnorm": 2, "softmax": 3, "attention": 4, "batchnorm": 5}
#: Code of an in-place elementwise kernel (variant ending in ``_``, e.g. ``mul_``): it allocates no output, which
#: on a CPU saves the page faults of a fresh output buffer (several times the kernel's own time for large tensors)
INPLACE_ELEMENTWISE_CODE = 6
#: Code of a pooling row (variant ``maxpool``/``avgpool``, :func:`hybrid.ops.families.pool_row`). Its output is a
#: sliver of its input (global average pooling: ``n_outputs`` ~ 2e-4), the same corner of the elementwise features
#: as a reduction's (a bias gradient's ``sum``); with its own code, and no ``n_inputs``/``n_outputs`` features
#: (as the in-place code), a slow pooling kernel no longer prices every reduction of the device class.
POOL_ELEMENTWISE_CODE = 7
#: Code of an interpolation row (variant ``upsample_<mode>``, :func:`hybrid.ops.families.upsample_row`): a gather
#: of each output value from a few source values through computed indices (a scatter-add in the backward), which
#: a CPU runs far slower than a copy of the same bytes (a nearest 2x upsample of [4, 8, 64, 64]: 162 us measured,
#: 7 us as a copy); with its own code it is priced by the rows of its kind only.
UPSAMPLE_ELEMENTWISE_CODE = 8
#: Code of a grid-sampling row (variant ``grid_sample_<mode>``, :func:`hybrid.ops.families.grid_sample_row`):
#: an interpolation whose source points are read from a grid (next to :data:`UPSAMPLE_ELEMENTWISE_CODE`, so that
#: a device with no grid-sampling rows prices them from its interpolation rows); it keeps its passes and FLOPs.
GRID_SAMPLE_ELEMENTWISE_CODE = 9


def _elementwise_variant_code(variant: str) -> int:
    """The pointwise ``op_code`` of an ``elementwise`` row of this variant: :data:`GRID_SAMPLE_ELEMENTWISE_CODE`,
    :data:`UPSAMPLE_ELEMENTWISE_CODE`, :data:`POOL_ELEMENTWISE_CODE`, :data:`INPLACE_ELEMENTWISE_CODE` (first that
    applies), else 0."""
    if is_grid_sample_variant(variant):
        return GRID_SAMPLE_ELEMENTWISE_CODE
    if is_upsample_variant(variant):
        return UPSAMPLE_ELEMENTWISE_CODE
    if is_pool_variant(variant):
        return POOL_ELEMENTWISE_CODE
    return INPLACE_ELEMENTWISE_CODE if is_inplace_variant(variant) else 0


def _log(x: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(np.asarray(x, dtype=np.float64), 1e-30))


def device_columns(table: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """Per-row device descriptors (:data:`DEVICE_FEATURES_V3`) for each row's device and dtype."""
    return pd.DataFrame(device_array(table, catalog), columns=list(DEVICE_COLUMNS), index=table.index)


def device_array(table: pd.DataFrame, catalog: Catalog) -> np.ndarray:
    """:func:`device_columns` as a (rows, :data:`DEVICE_COLUMNS`) float64 array."""
    dev_codes, dev_names = str_codes(table["device"])
    if "dtype" in table.columns:
        dt_codes, dt_names = str_codes(table["dtype"].fillna("fp32"))
    else:
        dt_codes, dt_names = np.zeros(len(table), dtype=np.int64), ["fp32"]
    # one lookup per distinct (device, dtype) pair, combined from the two factorizations
    codes, pairs = np.unique(dev_codes.astype(np.int64) * len(dt_names) + dt_codes, return_inverse=True)
    uniques = [(dev_names[int(c) // len(dt_names)], dt_names[int(c) % len(dt_names)]) for c in codes]
    codes = pairs.reshape(-1)
    rows = []
    for name, dtype in uniques:
        d = catalog.device(name)
        peak = d.compute_peak(normalize_dtype(dtype))
        sms = float(max(d.num_sms, 1))
        fp32 = d.peak("fp32")
        tdp = d.tdp_w if d.tdp_w > 0 else np.nan
        rows.append([np.log(peak), np.log(d.mem_bw), np.log(peak / d.mem_bw), np.log(max(d.l2_cache, 1.0)),
                     sms, d.clock_mhz / 1e3, float(d.vendor == "amd"), np.log(d.mem_bw / sms),
                     np.log(peak / fp32), np.log(tdp / sms), float(d.kind == "cpu")])
    return np.asarray(rows, dtype=np.float64).reshape(len(uniques), len(DEVICE_COLUMNS))[codes]


def _sms(table: pd.DataFrame, catalog: Catalog) -> np.ndarray:
    codes, uniques = pd.factorize(table["device"])
    return np.array([max(catalog.device(str(u)).num_sms, 1) for u in uniques], dtype=np.float64)[codes]


def _l2(table: pd.DataFrame, catalog: Catalog) -> np.ndarray:
    codes, uniques = pd.factorize(table["device"])
    return np.array([max(catalog.device(str(u)).l2_cache, 1.0) for u in uniques], dtype=np.float64)[codes]


def base_columns(table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """Roofline-derived features (:data:`BASE_FEATURES`)."""
    return pd.DataFrame(base_arrays(table, baseline, catalog), index=table.index)


def base_arrays(table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> dict[str, np.ndarray]:
    """:func:`base_columns` as a dict of float64 arrays."""
    flops = baseline["flops"].to_numpy(dtype=np.float64)
    nbytes = baseline["bytes"].to_numpy(dtype=np.float64)
    comp = baseline["compute_us"].to_numpy(dtype=np.float64)
    mem = baseline["memory_us"].to_numpy(dtype=np.float64)
    lat = baseline["latency_us"].to_numpy(dtype=np.float64)
    # intensity / ridge == compute time / memory time
    out = {
        "dtype_bytes": dtype_bytes_vec(table),
        "log_flops": _log(flops + 1.0),
        "log_bytes": _log(nbytes),
        "log_compute_us": _log(comp + 1e-6),
        "log_memory_us": _log(mem),
        "log_latency_us": _log(lat + 1e-3),
        "log_roofline_us": _log(baseline["time_us"].to_numpy(dtype=np.float64)),
        "log_intensity_over_ridge": _log(comp + 1e-6) - _log(mem),
        "log_bytes_over_l2": _log(nbytes) - _log(_l2(table, catalog)),
        "body_over_latency": np.maximum(comp, mem) / np.maximum(lat, 1e-3),
    }
    return out


def gemm_columns(table: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """GEMM shape features (:data:`GEMM_FEATURES`), including tile/wave quantisation over the SM count."""
    return pd.DataFrame(gemm_arrays(table, catalog), index=table.index)


def gemm_arrays(table: pd.DataFrame, catalog: Catalog) -> dict[str, np.ndarray]:
    """:func:`gemm_columns` as a dict of arrays."""
    b, m, n, k = col(table, "b", 1), col(table, "m"), col(table, "n"), col(table, "k")
    sms = _sms(table, catalog)
    if "op" in table.columns:
        op_codes, op_names = str_codes(table["op"])
        ops = np.asarray(op_names + ["gemm"], dtype=object)[op_codes]
    else:
        ops = np.full(len(table), "gemm", dtype=object)
    out = {
        "log_b": _log(b), "log_m": _log(m), "log_n": _log(n), "log_k": _log(k),
        "is_gemv": ((np.minimum(m, n) == 1) | (ops == "gemv")).astype(np.float64),
        "is_bmm": (ops == "bmm").astype(np.float64),
        "is_linear": (ops == "linear").astype(np.float64),
        "align8": ((m % 8 == 0).astype(float) + (n % 8 == 0) + (k % 8 == 0)),
        "log_mn_over_k": _log(m * n) - _log(k),
    }
    for t in TILE_EDGES:
        tiles = b * np.ceil(m / t) * np.ceil(n / t)
        waves = tiles / sms
        out[f"waves{t}"] = _log(waves)
        out[f"wave_eff{t}"] = waves / np.ceil(waves)
    if "dtype" in table.columns:
        dt_codes, dt_names = str_codes(table["dtype"].fillna("fp32"))
        out["is_int"] = np.array([normalize_dtype(d).startswith("int") for d in dt_names] + [False],
                                 dtype=np.float64)[dt_codes]
    else:
        out["is_int"] = np.zeros(len(table))
    out["kernel_timing"] = kernel_timing(table)
    out["log_traffic_over_bytes"] = _log(tiled_traffic_ratio(b, m, n, k, dtype_bytes_vec(table), _l2(table, catalog)))
    return out


def kernel_timing(table: pd.DataFrame) -> np.ndarray:
    """1.0 where the row's ``framework`` times the kernel alone (:data:`KERNEL_TIMING_FRAMEWORKS`), else 0.0."""
    if "framework" not in table.columns:
        return np.zeros(len(table))
    # decided once per distinct value (missing: ""), as ``astype("string").fillna("")`` of the column would read
    return factor_map(table["framework"], lambda n: n.strip().lower() in KERNEL_TIMING_FRAMEWORKS, "") \
        .astype(np.float64)


def tiled_traffic_ratio(b: np.ndarray, m: np.ndarray, n: np.ndarray, k: np.ndarray, elem_bytes: np.ndarray,
                        l2: np.ndarray) -> np.ndarray:
    """Estimated DRAM bytes of a :data:`TRAFFIC_TILE`-tiled GEMM over the minimum (A + B + C once).

    A is re-read once per column strip of C and B once per row strip, but never more often than the operands
    overflow the cache ((A + B) / L2); operands that fit in the cache are read once.
    """
    a_bytes, b_bytes, c_bytes = b * m * k * elem_bytes, b * k * n * elem_bytes, b * m * n * elem_bytes
    overflow = np.maximum(1.0, (a_bytes + b_bytes) / l2)
    reread_a = np.minimum(np.ceil(n / TRAFFIC_TILE), overflow)
    reread_b = np.minimum(np.ceil(m / TRAFFIC_TILE), overflow)
    return (a_bytes * reread_a + b_bytes * reread_b + c_bytes) / (a_bytes + b_bytes + c_bytes)


def pointwise_columns(table: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """Elementwise / norm / softmax / attention features (:data:`POINTWISE_FEATURES`)."""
    return pd.DataFrame(pointwise_arrays(table, catalog), index=table.index)


def pointwise_arrays(table: pd.DataFrame, catalog: Catalog) -> dict[str, np.ndarray]:
    """:func:`pointwise_columns` as a dict of arrays (op names decided once per distinct op)."""
    op_code = factor_map(table["op"], lambda o: POINTWISE_OPS.get(o, -1), "nan").astype(np.float64)
    if "variant" in table.columns and (op_code == 0).any():
        # an elementwise row's own code by its variant (_elementwise_variant_code), decided once per variant
        code = factor_map(table["variant"], _elementwise_variant_code, "").astype(np.float64)
        op_code = np.where(op_code == 0, code, op_code)
    rows = col(table, "rows", np.nan)
    hidden = col(table, "hidden", np.nan)
    elements = col(table, "elements", np.nan)
    if "batch" in table.columns:  # attention: rows = batch*heads*q_len, hidden = kv_len
        att = factor_map(table["op"], lambda o: o == "attention", "nan").astype(bool)
        rows = np.where(att, col(table, "batch", 1) * col(table, "heads", 1) * col(table, "q_len", 1), rows)
        hidden = np.where(att, col(table, "kv_len", 1), hidden)
    elements = np.where(np.isnan(elements), rows * hidden, elements)
    if "elements" in table.columns or (op_code == 0).any():
        n_in, n_out, fpe = elementwise_defaults(table)
        # (interpolation and grid sampling keep them: the scale is in the source share, the mode in the FLOPs)
        is_elem = np.isin(op_code, (0, UPSAMPLE_ELEMENTWISE_CODE, GRID_SAMPLE_ELEMENTWISE_CODE))
        n_in, n_out, fpe = (np.where(is_elem, v, np.nan) for v in (n_in, n_out, fpe))
    else:
        n_in = n_out = fpe = np.full(len(table), np.nan)
    sms = _sms(table, catalog)
    # row-wise kernels put one block per row (or per chunk of rows); element-wise ones tile the flat range
    blocks = np.where(np.isnan(rows), np.ceil(elements / (ROW_CHUNK * 4)), rows)
    waves = blocks / sms
    out = {
        "op_code": op_code,
        "is_bwd": is_backward(table).astype(np.float64),
        "log_elements": _log(elements),
        "log_rows": np.where(np.isnan(rows), np.nan, _log(rows)),
        "log_hidden": np.where(np.isnan(hidden), np.nan, _log(hidden)),
        "hidden_vec4": np.where(np.isnan(hidden), np.nan, (hidden % 4 == 0).astype(np.float64)),
        "n_inputs": n_in, "n_outputs": n_out, "flops_per_element": fpe,
        "row_waves": _log(waves),
        "row_wave_eff": waves / np.ceil(np.maximum(waves, 1e-9)),
    }
    return out


def attention_arrays(table: pd.DataFrame, catalog: Catalog) -> dict[str, np.ndarray]:
    """Own features of fused-attention rows (:data:`ATTENTION_FEATURES` less the roofline ones)."""
    batch, heads = col(table, "batch", 1), col(table, "heads", 1)
    q, kv, d = col(table, "q_len", 1), col(table, "kv_len", 1), col(table, "head_dim", 1)
    kv_heads = col(table, "kv_heads", np.nan)
    kv_heads = np.where(np.isnan(kv_heads) | (kv_heads <= 0), heads, kv_heads)
    causal = np.nan_to_num(col(table, "causal", 0).astype(np.float64))
    waves = batch * heads * np.ceil(q / ATTENTION_QUERY_TILE) / _sms(table, catalog)
    return {"is_bwd": is_backward(table).astype(np.float64), "causal": (causal != 0).astype(np.float64),
            "log_head_dim": _log(d), "log_q_len": _log(q), "log_kv_len": _log(kv), "log_gqa": _log(heads / kv_heads),
            "log_tile_waves": _log(waves), "tile_wave_eff": waves / np.ceil(np.maximum(waves, 1e-9))}


def conv_columns(table: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """Convolution features (:data:`CONV_FEATURES`)."""
    return pd.DataFrame(conv_arrays(table, catalog), index=table.index)


def conv_arrays(table: pd.DataFrame, catalog: Catalog) -> dict[str, np.ndarray]:
    """:func:`conv_columns` as a dict of arrays."""
    from hybrid.ops.families import conv_grads, conv_implicit_gemm, conv_output_hw

    g, m, n, k = conv_implicit_gemm(table)
    oh, ow = conv_output_hw(table)
    gin, gw = conv_grads(table)
    cin, cout = col(table, "in_channels"), col(table, "out_channels")
    out = {
        "is_bwd": is_backward(table).astype(np.float64), "grad_input": gin, "grad_weight": gw,
        "log_m": _log(m), "log_n": _log(n), "log_k": _log(k), "log_mn_over_k": _log(m * n) - _log(k),
        "log_groups": _log(g), "depthwise": ((g > 1) & (g == cin)).astype(np.float64),
        "log_batch": _log(col(table, "batch")), "log_in_channels": _log(cin), "log_out_channels": _log(cout),
        "log_out_pixels": _log(oh * ow), "log_kernel_area": _log(col(table, "kernel_h") * col(table, "kernel_w")),
        "stride": col(table, "stride", 1),
        "channels_align16": ((cin % 16 == 0).astype(np.float64) + (cout % 16 == 0)),
    }
    return out


def embedding_columns(table: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """Embedding-bag features (:data:`EMBEDDING_FEATURES`): sizes, expected unique rows, bytes vs cache."""
    return pd.DataFrame(embedding_arrays(table, catalog), index=table.index)


def embedding_arrays(table: pd.DataFrame, catalog: Catalog) -> dict[str, np.ndarray]:
    """:func:`embedding_columns` as a dict of arrays."""
    t = col(table, "num_tables", 1)
    rows = col(table, "num_embeddings")
    dim = col(table, "embedding_dim")
    pool = col(table, "pooling_factor")
    batch = col(table, "batch_size")
    alpha = col(table, "zipf_alpha", 0.0)
    if "index_dist" in table.columns:
        alpha = np.where(uniform_index(table), 0.0, alpha)
    eb = dtype_bytes_vec(table)
    lookups = t * batch * pool
    unique = t * expected_unique_rows(rows, batch * pool, alpha)
    l2 = _l2(table, catalog)
    out = {
        "is_bwd": is_backward(table).astype(np.float64),
        # backward with a dense gradient (variant "dense_*") touches the whole table, sparse only the used rows
        "dense_grad": _variant_map(table, lambda v: "dense" in v).astype(np.float64),
        "log_num_embeddings": _log(rows), "log_dim": _log(dim), "log_pooling": _log(pool),
        "log_batch": _log(batch), "log_tables": _log(t), "zipf_alpha": alpha,
        "log_lookups": _log(lookups), "log_unique": _log(unique),
        "unique_fraction": unique / np.maximum(lookups, 1.0),
        "log_table_bytes_over_l2": _log(t * rows * dim * eb) - _log(l2),
        "log_touched_over_l2": _log(unique * dim * eb) - _log(l2),
        "log_row_bytes": _log(dim * eb),
        "optimizer_state": optimizer_state_words(table),
    }
    return out


def _variant(table: pd.DataFrame) -> pd.Series:
    if "variant" not in table.columns:
        return pd.Series("", index=table.index, dtype="string")
    return table["variant"].astype("string").fillna("").str.lower()


def _variant_map(table: pd.DataFrame, fn) -> np.ndarray:
    """``fn(variant)`` per row on the lower-case variant (missing or no column: ``""``), as :func:`_variant` reads
    it, decided once per distinct variant."""
    if "variant" not in table.columns:
        return np.array([fn("")] * len(table))
    return factor_map(table["variant"], lambda v: fn(v.lower()), "")


def uniform_index(table: pd.DataFrame) -> np.ndarray:
    """True where the row's ``index_dist`` is uniform (missing counts as uniform; case-insensitive), decided once
    per distinct value; all True without the column."""
    if "index_dist" not in table.columns:
        return np.ones(len(table), dtype=bool)
    return factor_map(table["index_dist"], lambda d: d.lower() == "uniform", "uniform").astype(bool)


def _optimizer_words(variant: str) -> float:
    for fragment, words in OPTIMIZER_STATE_WORDS:  # first match wins
        if fragment in variant:
            return words
    return 0.0


def optimizer_state_words(table: pd.DataFrame) -> np.ndarray:
    """Optimizer state words per updated row, from the variant name (:data:`OPTIMIZER_STATE_WORDS`); 0 in fwd."""
    out = _variant_map(table, _optimizer_words).astype(np.float64)
    return np.where(is_backward(table), out, 0.0)


def dense_gradient(table: pd.DataFrame) -> np.ndarray:
    """1.0 where a backward embedding row materialises a dense table-sized gradient (variant ``dense_*``; the
    roofline's own rule, :func:`hybrid.ops.families.dense_gradient_rows`)."""
    return dense_gradient_rows(table).astype(np.float64)


def table_pass_us(table: pd.DataFrame, catalog: Catalog) -> np.ndarray:
    """Time (us) to stream every embedding table once at the device's memory bandwidth."""
    nbytes = col(table, "num_tables", 1) * col(table, "num_embeddings") * col(table, "embedding_dim") * dtype_bytes_vec(table)
    codes, uniques = pd.factorize(table["device"].astype(str))
    bw = np.array([catalog.device(str(u)).mem_bw for u in uniques], dtype=np.float64)[codes]
    return nbytes / bw * 1e6


#: Own-feature builders per model kind (dicts of per-row arrays).
_OWN_ARRAYS = {"gemm": gemm_arrays, "pointwise": pointwise_arrays, "embedding": embedding_arrays,
               "conv": conv_arrays, "attention": attention_arrays}


def feature_arrays(kind: str, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
                   use_device: bool = True, version: int = LATEST_FEATURE_VERSION,
                   transfer: bool = False) -> dict[str, np.ndarray]:
    """Every feature ``kind``'s models may read, by name, as per-row arrays (device descriptors only when the
    set of :func:`feature_names` with these arguments has some)."""
    names = feature_names(kind, use_device, version, transfer)
    out = {**_OWN_ARRAYS[kind](table, catalog), **base_arrays(table, baseline, catalog)}
    if kind == "attention":  # the share of the compute bound the softmax's exps add (hybrid.ops.roofline)
        busy = baseline["busy_us"].to_numpy(dtype=np.float64) if "busy_us" in baseline.columns \
            else baseline["compute_us"].to_numpy(dtype=np.float64)
        if "dropout" in table.columns and "device" in table.columns:
            # a dropout mask's random numbers are not part of the kernel's shape: its efficiency is read as without
            # them, and applies to the whole roofline (theirs included)
            from hybrid.ops.roofline import attention_dropout_us, device_int_rate

            busy = busy - attention_dropout_us(table, device_int_rate(table, catalog))
        out["log_exp_share"] = _log(busy + 1e-6) - _log(baseline["compute_us"].to_numpy(dtype=np.float64) + 1e-6)
    if any(n.startswith("dev_") for n in names):
        values = device_array(table, catalog)
        out.update({name: values[:, j] for j, name in enumerate(DEVICE_COLUMNS)})
    return out


def build_features(kind: str, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
                   use_device: bool = True, version: int = LATEST_FEATURE_VERSION, transfer: bool = False) -> pd.DataFrame:
    """The feature frame for ``kind`` in {"gemm", "pointwise", "embedding"} (float64, order of
    :func:`feature_names` with the same arguments)."""
    names = feature_names(kind, use_device, version, transfer)
    arrays = feature_arrays(kind, table, baseline, catalog, use_device, version, transfer)
    return feature_frame(arrays, names, table.index)


def feature_frame(arrays: dict[str, np.ndarray], names: list[str], index: pd.Index) -> pd.DataFrame:
    """The columns ``names`` of ``arrays`` as a float64 frame."""
    return pd.DataFrame({n: np.asarray(arrays[n], dtype=np.float64) for n in names}, index=index, columns=names)


def feature_matrix(arrays: dict[str, np.ndarray], names: list[str], rows: np.ndarray | None = None) -> np.ndarray:
    """The columns ``names`` of ``arrays`` (rows ``rows``, a boolean mask or positions; all by default) as the
    C-contiguous float32 block a booster reads: the values of ``feature_frame(...).to_numpy(np.float32)``
    without the frame."""
    pos = None if rows is None else (np.flatnonzero(rows) if np.asarray(rows).dtype == bool else np.asarray(rows))
    cols = [np.asarray(arrays[n], dtype=np.float64) for n in names]
    if pos is not None:
        cols = [c.take(pos) for c in cols]
    out = np.empty((len(cols[0]), len(names)), dtype=np.float32)
    for j, c in enumerate(cols):
        out[:, j] = c
    return out


def feature_names(kind: str, use_device: bool = True, version: int = LATEST_FEATURE_VERSION,
                  transfer: bool = False) -> list[str]:
    """Ordered feature names of ``kind`` for feature-set ``version`` (1 to :data:`LATEST_FEATURE_VERSION`).

    ``transfer=True`` (version 2 on) is the set of the transfer model used for devices absent from the
    training data: own and roofline features plus :data:`TRANSFER_DEVICE_FEATURES` (version 3 on:
    :data:`TRANSFER_DEVICE_FEATURES_V3`) instead of the device descriptors. Version 4 adds
    :data:`GEMM_FEATURES_V4` for GEMMs (the other kinds keep their version-3 sets here; the embedding model adds
    its cost-term shares itself).
    """
    if version not in (1, 2, 3, 4):
        raise ValueError(f"unknown feature version {version!r} (this hybrid knows 1 to {LATEST_FEATURE_VERSION})")
    if kind == "attention":  # one set for every version and use: no descriptor that names a device
        return list(ATTENTION_FEATURES) + list(ATTENTION_DEVICE_FEATURES)
    if version == 1:
        own = {"gemm": GEMM_FEATURES, "pointwise": POINTWISE_FEATURES, "embedding": EMBEDDING_FEATURES,
               "conv": CONV_FEATURES}[kind]
    elif version >= 4:
        own = {"gemm": GEMM_FEATURES_V4, "pointwise": POINTWISE_FEATURES, "embedding": EMBEDDING_FEATURES_V2,
               "conv": CONV_FEATURES}[kind]
    elif version == 3:
        own = {"gemm": GEMM_FEATURES_V3, "pointwise": POINTWISE_FEATURES, "embedding": EMBEDDING_FEATURES_V2,
               "conv": CONV_FEATURES}[kind]
    else:
        own = {"gemm": GEMM_FEATURES_V2, "pointwise": POINTWISE_FEATURES, "embedding": EMBEDDING_FEATURES_V2,
               "conv": CONV_FEATURES}[kind]
    if transfer:
        dev = TRANSFER_DEVICE_FEATURES_V3 if version >= 3 else TRANSFER_DEVICE_FEATURES
        return list(own) + list(BASE_FEATURES) + list(dev)
    dev = DEVICE_FEATURES_V3 if version >= 3 else DEVICE_FEATURES
    return list(own) + list(BASE_FEATURES) + (list(dev) if use_device else [])
