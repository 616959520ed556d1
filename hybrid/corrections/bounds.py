"""Physical lower bounds of corrected predictions, per op family, on GPUs.

A learned correction multiplies the roofline by a ratio the trees extrapolate; on a GPU the fit never saw
nothing stops that ratio from going below what the hardware allows. :func:`floor_us` is the lowest time
:meth:`HybridPredictor.predict <hybrid.corrections.predictor.HybridPredictor.predict>` returns for a GPU row of a
floored family (after every correction and few-shot adaptation, and for the low end of the interval too), so the
CLI, the engine and the LLM builders all get it.

The floors are set by what measurements show, not by the datasheet alone (``experiments/bounds_audit``): a family
is floored at the roofline only where measured rows never beat it, at a fraction where some kernels legitimately
do, and not at all where they beat it by large factors. Families not listed here are not floored by this module:

- ``gemm``: floored at 1.0x inside the GEMM correction (``GEMM_ROOFLINE_FLOOR``, feature version 4), after the
  groups faster than the datasheet peak are left out of the fit (:mod:`hybrid.data.quality`);
- ``attention``: GPU DRAM streams floored at their roofline inside the pointwise correction
  (``ATTENTION_DRAM_FLOOR_L2``);
- ``elementwise`` / ``norm`` / ``softmax``: measured down to 0.22x / 0.64x of their DRAM roofline (Vidur's fp16
  rows whose operands sit in L2): no floor;
- ``embedding``: pooled lookups re-read hot rows from cache (the CPU profile runs at 0.18x); no floor;
- collectives: their own floor at the links' bandwidth (``CollectiveSigmoid.floor_us``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybrid.corrections.base import isin_fast
from hybrid.hardware.catalog import Catalog
from hybrid.ops.families import col

#: Convolutions on GPUs are predicted at least this multiple of their roofline. The roofline counts the
#: direct-convolution FLOPs, which cuDNN's Winograd (and FFT) kernels beat: F(2x2, 3x3) does 2.25x fewer multiplies,
#: and the lowest of the 24,962 measured GPU conv rows (NeuSight's FP32 3x3 sweep on five GPUs, the H100 / H200
#: bundles) is 0.444x (V100, 1 / 2.25), the 0.1% quantile 0.50x (experiments/bounds_audit/results.md). 0.4 leaves
#: 10% below the measured minimum.
CONV_ROOFLINE_FLOOR = 0.4
#: ... and a compute-bound convolution no such algorithm applies to (a 1x1 kernel: a GEMM; a stride or dilation
#: above 1: cuDNN's Winograd and FFT kernels need stride 1 and no dilation) at least its roofline, as a GEMM
#: (``GEMM_ROOFLINE_FLOOR``): nothing does fewer multiplies than the direct convolution there. No measured GPU row
#: of that kind goes below 1.0x (the H100 / H200 bundles' 1x1 and strided rows: 2.7x and up; NeuSight's sweep has none).
CONV_DIRECT_ROOFLINE_FLOOR = 1.0

#: family -> lowest predicted time on a GPU as a multiple of the roofline time (conv: the lower of its two
#: floors, :func:`family_factor`; see the module docstring for the families left out and why).
ROOFLINE_FLOORS: dict[str, float] = {"conv": CONV_ROOFLINE_FLOOR}


def conv_factor(table: pd.DataFrame, bound: np.ndarray) -> np.ndarray:
    """Per conv row, its floor as a multiple of the roofline: :data:`CONV_DIRECT_ROOFLINE_FLOOR` for a
    compute-bound row with a 1x1 kernel, a stride or a dilation above 1, else :data:`CONV_ROOFLINE_FLOOR`."""
    kernel = np.maximum(col(table, "kernel_h", 1.0), col(table, "kernel_w", 1.0))
    direct = (kernel <= 1) | (col(table, "stride", 1.0) > 1) | (col(table, "dilation", 1.0) > 1)
    return np.where(direct & (np.asarray(bound, dtype=object) == "compute"), CONV_DIRECT_ROOFLINE_FLOOR,
                    CONV_ROOFLINE_FLOOR)


def family_factor(table: pd.DataFrame, baseline: pd.DataFrame, floors: dict[str, float] | None = None
                  ) -> np.ndarray:
    """Per row, its family's floor as a multiple of the roofline (0: none), whatever the device."""
    floors = ROOFLINE_FLOORS if floors is None else floors
    factor = np.zeros(len(table))
    if not floors or not len(table):
        return factor
    family = baseline["family"]
    for fam, f in floors.items():
        rows = isin_fast(family, (fam,))
        if rows.any():
            factor[rows] = conv_factor(table.loc[rows], baseline["bound"].to_numpy(dtype=object)[rows]) \
                if fam == "conv" else f
    return factor


def floor_us(table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog,
             floors: dict[str, float] | None = None) -> np.ndarray:
    """Per row of the normalised ``table`` and its roofline ``baseline`` (``family``, ``bound``, ``time_us``), the
    physical lower bound of its predicted time (us): its family's floor (:data:`ROOFLINE_FLOORS`, default; conv
    per :func:`conv_factor`) x its roofline time on GPUs, 0 for other families and devices."""
    factor = family_factor(table, baseline, floors)
    if not factor.any():
        return factor
    gpu = catalog.device_column(table["device"], lambda d: d.kind == "gpu", False).astype(bool)
    return np.where(gpu, factor * baseline["time_us"].to_numpy(dtype=np.float64), 0.0)
