"""Plots of predictions against measurements, drawn from a prediction frame
(:func:`hybrid.tracking.evaluation.prediction_frame`: ``family``, ``device``, ``size``, ``measured_us``,
``predicted_us``, ``roofline_us`` and optionally ``base_us``).

Every function returns a :class:`matplotlib.figure.Figure` built with the Agg canvas directly, so no pyplot
state (or display) is involved; :func:`figure_png` turns one into PNG bytes.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

#: Colour and label per compared model.
STYLE = {
    "model": {"color": "#1f77b4", "label": "hybrid (calibrated)", "column": "predicted_us"},
    "base": {"color": "#2ca02c", "label": "base model (not adapted)", "column": "base_us"},
    "roofline": {"color": "#d62728", "label": "roofline only", "column": "roofline_us"},
}
#: Most points drawn per series and panel (a random subset beyond that keeps PNGs small and readable).
MAX_POINTS = 4000
DPI = 110


def _models(frame: pd.DataFrame) -> list[str]:
    return [m for m, s in STYLE.items() if s["column"] in frame.columns and frame[s["column"]].notna().any()]


def _thin(frame: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    if len(frame) <= MAX_POINTS:
        return frame
    return frame.sample(MAX_POINTS, random_state=seed)


def _grid(n: int, ncols: int = 3) -> tuple[int, int]:
    ncols = min(ncols, max(n, 1))
    return (n + ncols - 1) // ncols, ncols


def plain(text: object) -> str:
    """``text`` as matplotlib draws it literally: a user's name (a device key, a model or file name) holding two
    ``$`` would otherwise be parsed as mathtext, drawn as formula or failing the whole figure at save time
    (``Unknown symbol: \\x``)."""
    return str(text).replace("$", r"\$")


def new_figure(width: float, height: float) -> Figure:
    """A figure on the Agg canvas (no pyplot state), constrained layout."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def predicted_vs_measured(frame: pd.DataFrame, title: str = "Predicted vs measured") -> Figure:
    """Log-log scatter of predicted against measured time, one panel per op family, with the y = x line and
    a factor-of-2 band; the calibrated model over the roofline baseline."""
    fams = sorted(frame["family"].astype(str).unique())
    rows, cols = _grid(len(fams))
    fig = new_figure(4.2 * cols, 3.8 * rows)
    models = _models(frame)
    for i, fam in enumerate(fams):
        ax = fig.add_subplot(rows, cols, i + 1)
        sub = _thin(frame[frame["family"].astype(str) == fam])
        meas = sub["measured_us"].to_numpy(np.float64)
        lo, hi = np.nanmin(meas), np.nanmax(meas)
        for m in reversed(models):  # model drawn last, on top
            pred = sub[STYLE[m]["column"]].to_numpy(np.float64)
            ax.scatter(meas, pred, s=6, alpha=0.45, color=STYLE[m]["color"], label=STYLE[m]["label"],
                       edgecolors="none")
            lo, hi = min(lo, np.nanmin(pred)), max(hi, np.nanmax(pred))
        lo, hi = max(lo, 1e-3) / 1.5, hi * 1.5
        ref = np.array([lo, hi])
        ax.plot(ref, ref, color="black", lw=1)
        ax.plot(ref, ref * 2, color="gray", lw=0.8, ls="--")
        ax.plot(ref, ref / 2, color="gray", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured (us)")
        ax.set_ylabel("predicted (us)")
        ax.set_title(plain(f"{fam} ({len(frame[frame['family'].astype(str) == fam]):,} rows)"))
        ax.grid(True, which="major", alpha=0.3)
        if i == 0:
            _legend(ax, loc="upper left", fontsize=8, markerscale=2)
    fig.suptitle(plain(f"{title}  (dashed: factor of 2)"))
    return fig


def relative_error(frame: pd.DataFrame, model: str) -> np.ndarray:
    """``|pred - meas| / meas`` of one compared model, per row."""
    pred = frame[STYLE[model]["column"]].to_numpy(np.float64)
    meas = frame["measured_us"].to_numpy(np.float64)
    return np.abs(pred - meas) / meas


def _ecdf(err: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Step points of the empirical CDF of sorted ``err``, rising from 0 at the smallest error: without that first
    point a family of one row drew nothing (one point, no step) and every curve began at 1/n, not 0."""
    return np.r_[err[:1], err], np.r_[0.0, np.arange(1, len(err) + 1) / len(err)]


def error_cdf(frame: pd.DataFrame, title: str = "Error distribution") -> Figure:
    """Cumulative distribution of the relative error, model against roofline: overall (left) and per op
    family for the calibrated model (right; the roofline's in a frame without a calibrated model)."""
    fig = new_figure(11, 4.2)
    ax, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for m in _models(frame):
        err = np.sort(relative_error(frame, m)) * 100
        err = np.maximum(err, 1e-3)
        med = np.median(err)
        ax.step(*_ecdf(err), where="post", color=STYLE[m]["color"], label=f"{STYLE[m]['label']} (median {med:.1f}%)")
    first = (_models(frame) or ["model"])[0]  # the calibrated model; the roofline where it is all there is
    for fam, sub in frame.groupby(frame["family"].astype(str)):
        err = np.maximum(np.sort(relative_error(sub, first)) * 100, 1e-3)
        ax2.step(*_ecdf(err), where="post", label=plain(f"{fam} (median {np.median(err):.1f}%)"))
    for a, t in ((ax, "all rows"), (ax2, f"{STYLE[first]['label']}, per family")):
        a.set_xscale("log")
        a.set_xlabel("|predicted - measured| / measured (%)")
        a.set_ylabel("fraction of rows")
        a.set_ylim(0, 1.01)
        for x in (10, 25, 50, 100):
            a.axvline(x, color="gray", lw=0.6, ls=":")
        a.grid(True, alpha=0.3)
        a.legend(fontsize=8, loc="lower right")
        a.set_title(t)
    fig.suptitle(plain(title))
    return fig


def error_vs_size(frame: pd.DataFrame, title: str = "Error vs problem size") -> Figure:
    """Predicted/measured ratio against the problem size (FLOPs for GEMM/attention, bytes otherwise), one
    panel per op family: shows where each model over- or under-predicts."""
    fams = sorted(frame["family"].astype(str).unique())
    rows, cols = _grid(len(fams))
    fig = new_figure(4.2 * cols, 3.6 * rows)
    models = _models(frame)
    for i, fam in enumerate(fams):
        ax = fig.add_subplot(rows, cols, i + 1)
        sub = _thin(frame[frame["family"].astype(str) == fam])
        size = sub["size"].to_numpy(np.float64)
        for m in reversed(models):
            ratio = sub[STYLE[m]["column"]].to_numpy(np.float64) / sub["measured_us"].to_numpy(np.float64)
            ax.scatter(size, ratio, s=6, alpha=0.45, color=STYLE[m]["color"], label=STYLE[m]["label"],
                       edgecolors="none")
        ax.axhline(1.0, color="black", lw=1)
        for r in (0.5, 2.0):
            ax.axhline(r, color="gray", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        _ratio_ticks(ax)
        unit = str(sub["size_unit"].iloc[0]) if "size_unit" in sub.columns and len(sub) else ""
        ax.set_xlabel(f"problem size ({unit})")
        ax.set_ylabel("predicted / measured")
        ax.set_title(plain(fam))
        ax.grid(True, alpha=0.3)
        if i == 0:
            _legend(ax, fontsize=8, markerscale=2)
    fig.suptitle(plain(title))
    return fig


def _ratio_ticks(ax) -> None:
    """Plain labels (0.25, 0.5, 1, 2, 4, ...; one per decade over more than 2.5 decades) on a log-scaled ratio
    axis: the fixed list left ratios under 0.01 unlabelled and crowded eight labels into the decade around 1."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    lo, hi = ax.get_ylim()
    if np.log10(hi / lo) > 2.5:  # ratios over decades (a roofline 1000x off): a label per decade, none crowded
        ticks = [10.0 ** k for k in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
                 if lo <= 10.0 ** k <= hi]
    else:
        ticks = [t for t in (0.01, 0.03, 0.1, 0.25, 0.5, 1, 2, 4, 10, 30, 100) if lo <= t <= hi]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def _legend(ax, **kw) -> None:
    """Legend in STYLE order (calibrated model first) whatever the drawing order."""
    handles, labels = ax.get_legend_handles_labels()
    order = {s["label"]: i for i, s in enumerate(STYLE.values())}
    pairs = sorted(zip(handles, labels, strict=True), key=lambda hl: order.get(hl[1], len(order)))
    if pairs:
        ax.legend(*zip(*pairs, strict=True), **kw)


def error_by_device(frame: pd.DataFrame, title: str = "Geomean error per device") -> Figure:
    """Bar chart of the geometric-mean relative error per device, for each compared model."""
    devices = sorted(frame["device"].astype(str).unique())
    models = _models(frame)
    fig = new_figure(max(6.0, 1.1 * len(devices) + 2), 4.0)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / max(len(models), 1)
    x = np.arange(len(devices))
    for j, m in enumerate(models):
        vals = []
        for d in devices:
            err = relative_error(frame[frame["device"].astype(str) == d], m)
            vals.append(float(np.exp(np.mean(np.log(np.maximum(err, 1e-6))))) * 100)
        bars = ax.bar(x + (j - (len(models) - 1) / 2) * width, vals, width, color=STYLE[m]["color"],
                      label=STYLE[m]["label"])
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(x, [plain(d) for d in devices], rotation=20, ha="right")
    ax.set_ylabel("geomean |error| (%)")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title(plain(title))
    return fig


def figure_png(fig: Figure, dpi: int = DPI) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


#: File formats a figure is written in, by suffix.
FIGURE_FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}


def save_png(fig: Figure, path: str | os.PathLike) -> Path:
    """Write the figure atomically (nothing half-written on failure) in the format its suffix names (PNG, SVG or
    PDF; PNG without a suffix); returns the path. Missing parent directories are created, as for every output
    (:func:`hybrid.atomic.atomic_file`, which also says why a path cannot be written: a parent that is a file,
    no permission)."""
    from hybrid.atomic import atomic_file
    from hybrid.errors import InvalidInputError

    p = Path(path)
    fmt = FIGURE_FORMATS.get(p.suffix.lower(), "png" if not p.suffix else None)
    if fmt is None:
        raise InvalidInputError(f"cannot write a plot as {p.name}: use a .png, .svg or .pdf file name")
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=DPI)
    with atomic_file(p) as tmp:
        tmp.write_bytes(buf.getvalue())
    return p


#: The standard set of report figures: file stem -> function.
STANDARD_FIGURES = {
    "pred_vs_measured": predicted_vs_measured,
    "error_cdf": error_cdf,
    "error_vs_size": error_vs_size,
    "error_by_device": error_by_device,
}


def standard_figures(frame: pd.DataFrame, title: str = "") -> dict[str, Figure]:
    """Every figure of :data:`STANDARD_FIGURES` for one prediction frame (titles prefixed by ``title``)."""
    out = {}
    for stem, fn in STANDARD_FIGURES.items():
        default = fn.__defaults__[-1] if fn.__defaults__ else stem
        out[stem] = fn(frame, title=f"{title}: {default}" if title else default)
    return out
