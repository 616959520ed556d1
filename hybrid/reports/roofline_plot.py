"""Roofline plots of LLM inference ops: achieved FLOP/s against arithmetic intensity, one roof per device.

Input is a frame with ``intensity`` (FLOP/byte), ``achieved_tflops``, ``phase`` (prefill/decode), ``name`` and
optionally ``device`` (one roof and marker colour per device: the Optimus figure of GEMM/GEMV boundedness
across GPU systems). Returns a Figure built on the Agg canvas (see :mod:`hybrid.reports.plots`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from hybrid.hardware.device import Device
from hybrid.reports.plots import new_figure, plain

MARKERS = {"prefill": "o", "decode": "^"}
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")


def op_roofline(points: pd.DataFrame, devices: list[Device], dtype: str = "fp16",
                title: str = "Roofline of prefill and decode ops") -> Figure:
    """Roofs ``min(peak, intensity x bandwidth)`` of ``devices`` and the ops as points (label = op name)."""
    fig = new_figure(7.5, 5.0)
    ax = fig.add_subplot(1, 1, 1)
    pts = points[np.isfinite(points["intensity"]) & (points["intensity"] > 0) & (points["achieved_tflops"] > 0)]
    lo = max(min(float(pts["intensity"].min()) / 2, 0.5), 0.05) if len(pts) else 0.1
    hi = max(float(pts["intensity"].max()) * 2, 2000.0) if len(pts) else 2000.0
    x = np.geomspace(lo, hi, 200)
    for i, dev in enumerate(devices):
        c = COLORS[i % len(COLORS)]
        peak = dev.compute_peak(dtype) / 1e12
        ax.plot(x, np.minimum(peak, x * dev.mem_bw / 1e12), color=c, lw=1.5,
                label=plain(f"{dev.key} roof ({peak:.0f} TFLOP/s, {dev.mem_bw / 1e9:.0f} GB/s)"))
        ax.axvline(dev.compute_peak(dtype) / dev.mem_bw, color=c, ls=":", lw=0.8)
        sub = pts[pts["device"] == dev.key] if "device" in pts.columns else pts
        for phase, marker in MARKERS.items():
            s = sub[sub["phase"] == phase]
            if len(s):
                ax.scatter(s["intensity"], s["achieved_tflops"], marker=marker, color=c, s=28, alpha=0.8,
                           label=plain(f"{dev.key} {phase} ops" if len(devices) > 1 else f"{phase} ops"))
        if i == 0:
            for _, r in sub.drop_duplicates(["phase", "name"]).iterrows():
                ax.annotate(plain(r["name"]), (r["intensity"], r["achieved_tflops"]), fontsize=6, alpha=0.7,
                            xytext=(3, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel(f"achieved TFLOP/s ({dtype})")
    ax.set_title(plain(title), fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")
    return fig
