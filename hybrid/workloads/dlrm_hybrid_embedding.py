"""HugeCTR's *hybrid embedding* (MLPerf DLRM from v1.0): frequent categories replicated, the rest model-parallel.

HugeCTR splits the categories of every table by how often they occur. A *frequent* category is replicated on
every GPU (data-parallel): its lookups are local and its gradient joins an all-reduce once per iteration. An
*infrequent* category lives on one GPU (model-parallel, spread evenly over all GPUs): each of its lookups sends one
embedding vector over the all-to-all (and its gradient back). A category is frequent when replicating it costs
less than sending its lookups, with the thresholds of HugeCTR's ``calculate_threshold``
(``HugeCTR/src/embeddings/hybrid_embedding/model.cu``), as occurrences per iteration:

- multi-node (``IB_NVLink[_Hier]``): ``nodes * a2a_bw / ar_bw * efficiency * nodes / (nodes - 1)``
  (HugeCTR's defaults: all-to-all 1.9e11, all-reduce 1.3e11 B/s, efficiency 1);
- one node (``NVLink_SingleNode``): ``global_batch * sqrt(2 p_dup_max / (M (M - 1)))`` with ``M`` the per-GPU
  batch and ``p_dup_max = 0.01`` (a category is frequent once it would appear twice in a GPU's batch more
  often than 1% of the time).

HugeCTR measures each category's count on the first iterations of the data set. The category-frequency
distribution of Criteo Terabyte is not in the public data this project may use, so every table is taken to
follow a Zipf law of one exponent ``zipf_alpha`` over its rows (0 = uniform): the share of a table's lookups that
hit its frequent categories follows from the exponent and the threshold. The exponent is a property of the data
set, not of the system; :mod:`experiments.dlrm_gpu` fits it on one MLPerf round and scores the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hybrid.errors import InvalidInputError

#: HugeCTR's defaults (``HybridEmbeddingParam``): all-to-all and all-reduce bandwidths (B/s) that set the
#: multi-node threshold, their efficiency ratio, and the single-node duplication probability.
HUGECTR_A2A_BW = 1.9e11
HUGECTR_AR_BW = 1.3e11
HUGECTR_P_DUP_MAX = 0.01
#: Terms summed exactly before the Euler-Maclaurin tail of a generalised harmonic number.
_EXACT_TERMS = 2048


def zipf_harmonic(n: np.ndarray | float, alpha: float) -> np.ndarray:
    """Generalised harmonic numbers ``H(n, alpha) = sum_{k=1..n} k^-alpha`` (vectorised over ``n``): exact for
    the first terms, Euler-Maclaurin (integral + half end term) beyond; relative error < 1e-6."""
    n = np.maximum(np.floor(np.asarray(n, dtype=np.float64)), 0.0)
    k = np.arange(1, _EXACT_TERMS + 1, dtype=np.float64)
    prefix = np.concatenate([[0.0], np.cumsum(k ** -alpha)])
    head = prefix[np.minimum(n, _EXACT_TERMS).astype(np.int64)]
    m = float(_EXACT_TERMS)
    if abs(alpha - 1.0) < 1e-9:
        integral = np.log(np.maximum(n, m) / m)
    else:
        integral = (np.maximum(n, m) ** (1 - alpha) - m ** (1 - alpha)) / (1 - alpha)
    tail = integral + 0.5 * (np.maximum(n, m) ** -alpha - m ** -alpha)
    return head + np.where(n > m, tail, 0.0)


@dataclass(frozen=True)
class HybridEmbedding:
    """How HugeCTR's hybrid embedding splits the tables: the category skew and the threshold's inputs."""

    zipf_alpha: float  #: Zipf exponent of every table's category counts (0 = uniform)
    p_dup_max: float = HUGECTR_P_DUP_MAX
    a2a_bw: float = HUGECTR_A2A_BW
    ar_bw: float = HUGECTR_AR_BW
    efficiency_bandwidth_ratio: float = 1.0

    def __post_init__(self) -> None:
        for name in ("zipf_alpha", "p_dup_max", "a2a_bw", "ar_bw", "efficiency_bandwidth_ratio"):
            v = float(getattr(self, name))
            if not math.isfinite(v) or v < 0 or (v == 0 and name != "zipf_alpha"):
                raise InvalidInputError(f"hybrid embedding {name} must be a finite "
                                        f"{'non-negative' if name == 'zipf_alpha' else 'positive'} number, got {v}")

    def count_threshold(self, global_batch: int, gpus: int, nodes: int) -> float:
        """Occurrences per iteration from which a category is frequent (HugeCTR's ``calculate_threshold``)."""
        if global_batch <= 0 or gpus <= 0 or nodes <= 0:
            raise InvalidInputError("hybrid embedding needs a positive global batch, GPU and node count")
        if nodes > 1:
            return nodes * self.a2a_bw / self.ar_bw * self.efficiency_bandwidth_ratio * nodes / (nodes - 1)
        m = global_batch / gpus
        if m <= 1:
            return 0.0  # one sample per GPU: nothing can be duplicated, every category is worth replicating
        return global_batch * math.sqrt(2.0 * self.p_dup_max / (m * (m - 1)))

    def split(self, num_rows: np.ndarray, lookups_per_sample: np.ndarray, global_batch: int, gpus: int,
              nodes: int) -> tuple[np.ndarray, np.ndarray]:
        """Per table: frequent categories (rows replicated on every GPU) and the share of its lookups they take.

        Category ``k`` (1 = most frequent) of a table of ``N`` rows occurs ``L k^-a / H(N, a)`` times per
        iteration (``L`` = global batch x lookups per sample); it is frequent when that reaches the threshold.
        """
        rows = np.asarray(num_rows, dtype=np.float64)
        lookups = global_batch * np.asarray(lookups_per_sample, dtype=np.float64)
        if np.any(rows < 1) or np.any(lookups < 0):
            raise InvalidInputError("hybrid embedding split needs tables of at least one row")
        c = self.count_threshold(global_batch, gpus, nodes)
        a = float(self.zipf_alpha)
        h_all = zipf_harmonic(rows, a)
        if c <= 0:
            k = rows
        elif a == 0.0:
            k = np.where(lookups / rows >= c, rows, 0.0)
        else:
            k = np.floor((lookups / (c * h_all)) ** (1.0 / a))
        k = np.clip(k, 0.0, rows)
        share = np.where(k > 0, zipf_harmonic(k, a) / h_all, 0.0)
        return k.astype(np.int64), np.clip(share, 0.0, 1.0)
