"""Which kernel path a 16-bit GEMM can take: misaligned operands leave a TMA GPU's tensor-core path.

Hopper and data-center Blackwell GPUs feed their tensor cores (``wgmma`` / ``tcgen05``) through the Tensor Memory
Accelerator, which needs every operand's row stride to be a multiple of 16 bytes (8 fp16/bf16 elements). A GEMM
whose ``n`` or ``k`` is not (GPT-2's 50,257-token vocabulary, BERT's 30,522: the LM head and its two gradients)
cannot use those kernels; cuBLAS falls back to the previous generations' ``mma.sync`` kernels with narrower loads
(the project's H100 traces, ``datasets/traces-h100``: ``cutlass_80_tensorop_..._align2`` for BERT's head,
``cutlass_75_tensorop_..._align1`` for GPT-2's, against ``nvjet_sm90`` kernels everywhere else), which reach a
fraction of the chip's peak. Its rate per SM and clock is a property of that legacy path, not of the new tensor
cores, so it is kept per SM per clock (the catalog's ``sms`` and ``boost_clock_mhz``) and carries to other TMA GPUs.

A row's ``align`` column (elements), where given, is the alignment of its operands' actual row strides (a traced
GEMM's, from the trace's ``Input Strides``). Without it, only ``n`` and ``k`` set the alignment: with row-major
operands ``m`` is a stride only of a transposed operand (a weight gradient's), which a bare row does not mark (such
a gradient whose ``m`` is the odd dimension is missed; an odd token count, never a stride of a forward GEMM, is not
penalised).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import Catalog
from hybrid.ops.families import col, factor_map, op_is
from hybrid.units import normalize_dtype

#: NVIDIA architectures whose fast tensor-core GEMMs are fed by TMA (16-byte-aligned strides): Hopper, data-center
#: Blackwell.
TMA_ARCHS = frozenset({"sm_90", "sm_100", "sm_103"})
#: Elements per 16 bytes for the dtypes the rule covers (only 16-bit was measured misaligned).
ALIGN_ELEMENTS = {"fp16": 8, "bf16": 8}
#: FLOP per SM per clock (boost) of the fallback kernels, by the operands' alignment in elements, from the H100's
#: own measurements: alignment 1 = the geometric mean of GPT-2's LM head and its two gradients in the H100 traces
#: (``cutlass_75`` s1688 align1 kernels, 8 x 1024 tokens, bf16: 368 / 568 / 542; the forward, whose output rows
#: are the misaligned ones, runs slowest) and the profile's one large misaligned GEMM (2398 x 6915 x 5571, fp16 /
#: bf16: 539 / 558): 510; alignment 2 = BERT's LM head and gradients (``cutlass_80`` s16816 align2: 964 / 1023 /
#: 961): 980. The H200's traces and profile (the same die, another machine) give 361-563 and 956-1026 (a check,
#: ``tests/test_gemm_paths.py``). Alignment 4 was not measured: priced as alignment 2 (the same kernels with wider
#: loads can only be faster, so this errs slow).
FALLBACK_FLOP_PER_CLK_PER_SM = {1: 510.0, 2: 980.0, 4: 980.0}
#: The same, indexed by the alignment (elements 0..8; NaN where no fallback applies).
_RATE_BY_ALIGN = np.array([FALLBACK_FLOP_PER_CLK_PER_SM.get(a, np.nan) for a in range(9)])


def alignment_elements(n: np.ndarray, k: np.ndarray, full: int = 8) -> np.ndarray:
    """Largest of ``full``, 4, 2, 1 (elements) that divides both ``n`` and ``k``, per row."""
    n = np.asarray(n, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    out = np.ones(n.shape, dtype=np.int64)
    for a in (2, 4, full):
        out = np.where((n % a == 0) & (k % a == 0), a, out)
    return out


def misaligned_kernel_us(table: pd.DataFrame, catalog: Catalog) -> np.ndarray:
    """Per GEMM row (``gemm`` / ``bmm`` / ``linear``, neither ``m`` nor ``n`` 1: a GEMV's kernels are not the
    tensor-core GEMMs) in fp16 or bf16 on a TMA GPU (:data:`TMA_ARCHS`) whose row strides (its ``align`` column,
    else ``n`` and ``k``) are not multiples of 8 elements: the fallback kernels' time, ``2 b m n k`` FLOP at
    :data:`FALLBACK_FLOP_PER_CLK_PER_SM` x SMs x boost clock. NaN for every other row."""
    out = np.full(len(table), np.nan)
    if len(table) == 0 or not {"op", "m", "n", "k", "dtype", "device"} <= set(table.columns):
        return out
    full = factor_map(table["dtype"], lambda d: ALIGN_ELEMENTS.get(_dtype(d), 0), "").astype(np.int64)
    tma = catalog.device_column(table["device"], lambda d: d.arch in TMA_ARCHS, False).astype(bool)
    rows = (full > 0) & tma & op_is(table, "gemm", "bmm", "linear")
    if not rows.any():
        return out
    m, n, k = (col(table, c) for c in ("m", "n", "k"))
    b = col(table, "b", 1.0)
    ok = rows & np.isfinite(m) & np.isfinite(n) & np.isfinite(k) & (m > 1) & (n > 1) & (k > 0)
    align = np.full(len(table), 8, dtype=np.int64)
    align[ok] = alignment_elements(n[ok], k[ok])
    if "align" in table.columns:  # a traced GEMM's own strides (:func:`hybrid.data.traces.opmap`), where recorded
        given = col(table, "align", np.nan)
        known = ok & np.isfinite(given) & (given >= 1)
        # the largest power of two it holds (a stride alignment is one), at most 8 (16 bytes: the TMA path)
        align[known] = np.minimum(2 ** np.floor(np.log2(given[known])), 8).astype(np.int64)
    hit = ok & (align < 8)
    if not hit.any():
        return out
    rate_clk = _RATE_BY_ALIGN[align[hit]]
    sms = catalog.device_column(table["device"], lambda d: float(d.num_sms), 0.0).astype(np.float64)[hit]
    clock = catalog.device_column(table["device"], lambda d: float(d.clock_mhz), 0.0).astype(np.float64)[hit]
    flops = 2.0 * np.where(b[hit] > 0, b[hit], 1.0) * m[hit] * n[hit] * k[hit]
    rate = rate_clk * sms * clock * 1e6  # FLOP/s
    out[hit] = np.where(rate > 0, flops / rate * 1e6, np.nan)
    return out


def _dtype(value: object) -> str:
    try:
        return normalize_dtype(str(value))
    except InvalidInputError:  # an unknown dtype string: not a dtype this rule covers
        return ""
