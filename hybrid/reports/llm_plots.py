"""Plots of LLM training predictions: memory per GPU (stacked bars against the capacity line) and the
iteration-time breakdown across systems (PNG files, written atomically)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from hybrid.reports.plots import new_figure, plain, save_png

MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "logits", "gathered", "reserve")



def memory_bars(rows: Mapping[str, Mapping[str, float]], capacity_gib: float, path: str | os.PathLike,
                title: str = "Memory per GPU") -> Path:
    """Stacked bars (GiB) per labelled configuration with a horizontal capacity line."""
    labels = list(rows)
    fig = new_figure(max(6.0, 0.7 * len(labels) + 2), 4.5)
    ax = fig.add_subplot()
    x = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    for part in MEMORY_PARTS:
        vals = np.array([float(rows[k].get(part, 0.0)) for k in labels])
        if vals.any():
            ax.bar(x, vals, bottom=bottom, label=part)
            bottom += vals
    ax.axhline(capacity_gib, color="k", ls="--", lw=1, label=f"capacity {capacity_gib:.1f} GiB")
    ax.set_xticks(x, [plain(k) for k in labels], rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("GiB per GPU")
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(plain(title), fontsize=10)
    return save_png(fig, path)


def breakdown_bars(rows: Mapping[str, Mapping[str, float]], path: str | os.PathLike,
                   title: str = "Iteration time (normalised to the fastest)") -> Path:
    """Stacked bars of compute / communication / other per labelled system, normalised to the fastest."""
    labels = list(rows)
    totals = np.array([sum(rows[k].values()) for k in labels])
    ref = totals.min()
    fig = new_figure(max(6.0, 0.9 * len(labels) + 2), 4.5)
    ax = fig.add_subplot()
    x = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    parts = list(dict.fromkeys(p for k in labels for p in rows[k]))
    for part in parts:
        vals = np.array([float(rows[k].get(part, 0.0)) for k in labels]) / ref
        ax.bar(x, vals, bottom=bottom, label=plain(part))
        bottom += vals
    ax.set_xticks(x, [plain(k) for k in labels], rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("time / fastest")
    ax.legend(fontsize=8)
    ax.set_title(plain(title))
    return save_png(fig, path)
