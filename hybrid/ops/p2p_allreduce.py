"""Latency-optimised all-reduce inside one NVLink node: the one-shot / two-shot kernels of TensorRT-LLM (and vLLM's
custom all-reduce), analytically.

Inference engines replace NCCL's ring for the small tensor-parallel all-reduces of decoding: every GPU maps its
peers' buffers over NVLink (CUDA IPC) and

* **one-shot**: reads the whole message from each of the ``n - 1`` peers and reduces locally (one barrier):
  ``(n - 1) * size`` bytes over the GPU's links;
* **two-shot**: reduce-scatter then all-gather through the same mappings (two barriers):
  ``2 (n - 1) / n * size`` bytes.

Time = kernel launch + barriers x per-step latency + bytes / (efficiency x the GPU's NVLink bandwidth per
direction). The strategy follows TensorRT-LLM's ``AUTO`` rule (``customAllReduceKernels`` / ``allreducePlugin``,
releases 0.8 to 0.12): messages above the IPC workspace (16 MB for 2 GPUs, 8 MB beyond) go to NCCL; 2 GPUs always
one-shot; up to 4 GPUs one-shot below 1 MB, else two-shot; more GPUs one-shot below 500 kB, else two-shot.
"""

from __future__ import annotations

import numpy as np

#: Strategy codes of :func:`trtllm_strategy`.
NCCL, ONESHOT, TWOSHOT = 0, 1, 2


def workspace_bytes(ranks: int) -> float:
    """TensorRT-LLM's IPC workspace per rank: the largest message the custom kernels take."""
    return 16e6 if ranks <= 2 else 8e6


def trtllm_strategy(size_bytes: np.ndarray, ranks: int) -> np.ndarray:
    """Per message, :data:`NCCL`, :data:`ONESHOT` or :data:`TWOSHOT` by TensorRT-LLM's ``AUTO`` rule."""
    size = np.asarray(size_bytes, dtype=np.float64)
    oneshot_below = np.inf if ranks <= 2 else 1e6 if ranks <= 4 else 5e5
    return np.where(size > workspace_bytes(ranks), NCCL, np.where(size < oneshot_below, ONESHOT, TWOSHOT))


def p2p_allreduce_us(size_bytes: np.ndarray, ranks: int, link_bw: float, efficiency: float, step_latency_us: float,
                     launch_us: float, strategy: np.ndarray) -> np.ndarray:
    """Time (us) of one-shot / two-shot all-reduces (``strategy`` per message; NaN where it says NCCL) on ``ranks``
    GPUs of one node, each with ``link_bw`` bytes/s of NVLink per direction reached at ``efficiency``."""
    size = np.asarray(size_bytes, dtype=np.float64)
    if ranks < 2 or link_bw <= 0 or efficiency <= 0:
        return np.full(size.shape, np.nan)
    n = float(ranks)
    moved = np.where(strategy == ONESHOT, (n - 1.0) * size, 2.0 * (n - 1.0) / n * size)
    barriers = np.where(strategy == ONESHOT, 1.0, 2.0)
    t = launch_us + barriers * step_latency_us + moved / (efficiency * link_bw) * 1e6
    return np.where(strategy == NCCL, np.nan, t)
