"""A self-contained HTML report of a calibration or evaluation: error tables per split, op family and device
(calibrated model beside the roofline baseline) and the standard plots inlined as base64 PNGs.

:func:`render_report` returns the HTML text; :func:`write_report` writes it atomically. The input is a
prediction frame with a ``split`` column (see :mod:`hybrid.tracking.evaluation`).
"""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid.atomic import write_text
from hybrid.reports.plots import STYLE, figure_png, standard_figures

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1300px;color:#222}
h1{font-size:1.6em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}h3{margin-top:1.4em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}
.better{background:#e6f4ea}.worse{background:#fdecea}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}
.meta td{text-align:left}.note{color:#666;font-size:.9em}
"""

#: Explanation of each split a calibration run evaluates on.
SPLIT_NOTES = {
    "random": "random hold-out: the model was fitted without these rows (same devices as training).",
    "lodo": ("leave-one-device-out: each device's rows were predicted by a model fitted without that device (rows "
             "whose die that model measured in another variant calibrate the sibling band, the others the unseen "
             "band)."),
    "few": ("few rows: each held-out device kept as many rows in the fit as the few-row devices of the final fit "
            "have (their intervals are calibrated on these rows)."),
    "adapted": ("leave-one-device-out models adapted with 5, 10, 20 and 50 of the held-out device's rows (strategy "
                "auto), scored on its other rows (the intervals of adapted devices are calibrated on these)."),
    "train": "training rows (in-sample): how well the final model fits what it was calibrated on.",
    "adapt": "few-shot adaptation hold-out: rows of the new device not used for adaptation.",
    "all": "every row of the given tables.",
}


def plotted_splits(splits: list[str]) -> list[str]:
    """Splits that get figures: the held-out ones when there are any (in-sample ``train`` plots add little
    and cost time), else all."""
    held = [s for s in splits if s != "train"]
    return held or list(splits)


def _esc(v: Any) -> str:
    return html.escape(str(v))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "-" if v != v else (f"{v:,.1f}" if abs(v) < 1e5 else f"{v:.3g}")
    return _esc(v)


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{_esc(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


#: The first column's heading of each grouping of :func:`error_table`.
_GROUP_LABELS = {"by_op": "op", "by_device": "device", "by_shots": "rows adapted to"}


def _natural(key: str) -> tuple[float, str]:
    """Sort key of a group label: by its leading number where it has one ("5 rows" before "10 rows"), else by text."""
    head = key.split(" ", 1)[0]
    try:
        return float(head), key
    except ValueError:
        return float("inf"), key


def error_table(summaries: Mapping[str, Mapping[str, Any]], group: str | None = None) -> str:
    """HTML table: one row per group value (``by_op``/``by_device``/``by_shots``) or one overall row, with geomean, MAPE,
    median and p90 of each compared model side by side; the model's cell is green where it beats roofline."""
    models = [m for m in ("model", "base", "roofline") if m in summaries]
    keys = sorted(summaries[models[0]][group], key=_natural) if group else ["all rows"]
    stats = ("geomean_pct", "mape_pct", "median_pct", "p90_pct")
    head = "".join(f"<th>{STYLE[m]['label']}<br>{s.replace('_pct', '')} %</th>" for s in stats for m in models)
    label = _GROUP_LABELS.get(group, group.replace("by_", "")) if group else ""
    out = [f"<table><tr><th>{_esc(label)}</th><th>rows</th>{head}</tr>"]
    for k in keys:
        per = {m: (summaries[m][group].get(k) if group else summaries[m]) for m in models}
        first = per[models[0]]
        cells = []
        for s in stats:
            for m in models:
                v = per[m][s] if per[m] else float("nan")
                cls = ""
                if m == "model" and "roofline" in per and per["roofline"] and v != per["roofline"][s]:
                    cls = ' class="better"' if v < per["roofline"][s] else ' class="worse"'
                cells.append(f"<td{cls}>{_fmt(float(v))}</td>")
        out.append(f"<tr><td>{_esc(k)}</td><td>{first['n_rows']:,}</td>{''.join(cells)}</tr>")
    out.append("</table>")
    return "\n".join(out)


def interval_table(frame: pd.DataFrame) -> str:
    """HTML table of the 80% prediction intervals of one split: per device, the share of measurements inside
    their interval (nominal 80%) and the median interval width (high / low), over the rows that have an interval
    (a model without collective measurements gives its collectives none: docs/corrections.md); a device without
    any says so, and a note counts the rows left out. Empty without intervals."""
    from hybrid.tracking.evaluation import interval_coverage

    cov = interval_coverage(frame)
    if not cov["coverage_by_device"]:
        return ""
    low, high = (frame[c].astype(np.float64) for c in ("predicted_us_low", "predicted_us_high"))
    has = pd.Series(np.isfinite(low) & np.isfinite(high), index=frame.index)
    ratio = (high / low)[has]
    out = ["<table><tr><th>device</th><th>rows with an interval</th><th>inside 80% interval %</th>"
           "<th>median width (high / low)</th></tr>"]
    for dev, g in frame.groupby("device", sort=True):
        n = int(has[g.index].sum())
        if not n:
            out.append(f"<tr><td>{_esc(dev)}</td><td>0 of {len(g):,}</td><td>no interval</td><td>-</td></tr>")
            continue
        pct = cov["coverage_by_device"].get(str(dev), float("nan"))
        cls = ' class="better"' if 70 <= pct <= 90 else ' class="worse"'
        rows = f"{n:,}" if n == len(g) else f"{n:,} of {len(g):,}"
        out.append(f"<tr><td>{_esc(dev)}</td><td>{rows}</td><td{cls}>{_fmt(float(pct))}</td>"
                   f"<td>{float(ratio.reindex(g.index).median()):.2f}x</td></tr>")
    n = int(has.sum())
    rows = f"{n:,}" if n == len(frame) else f"{n:,} of {len(frame):,}"
    out.append(f"<tr><td>all rows</td><td>{rows}</td><td>{_fmt(float(cov['coverage_pct']))}</td>"
               f"<td>{float(ratio.median()):.2f}x</td></tr></table>")
    if n < len(frame):
        out.append(f"<p class='note'>{len(frame) - n:,} rows have no prediction interval (a model calibrated without "
                   "measurements of their kind gives them none) and are not counted.</p>")
    return "\n".join(out)


def envelope_rows(predictor_summary: Mapping[str, Any]) -> list[dict[str, str]]:
    """Per correction and kind of op, the unseen-GPU envelope a fitted predictor holds (from
    ``HybridPredictor.summary()``: each correction's ``describe()``): the fitted GPUs that bound a GPU the fit never
    saw, least efficient first, and the kind's margin beyond them (``XGBCorrection.fit_envelope_margins``; a kind
    without one of its own takes the pooled ``*``; none saved: 1). Empty without an envelope."""
    rows = []
    for key, desc in (predictor_summary.get("corrections") or {}).items():
        devices = (desc or {}).get("envelope_devices") or {}
        margins = (desc or {}).get("envelope_margins") or {}
        for kind, devs in devices.items():
            margin = float(margins.get(kind, margins.get("*", 1.0)))
            rows.append({"correction": str(key), "kind of op": str(kind), "fitted GPUs (least efficient first)":
                         ", ".join(map(str, devs)), "margin": f"{margin:.2f}x"})
    return rows


def envelope_table(rows: list[dict[str, str]]) -> str:
    """HTML section of :func:`envelope_rows` (empty string without rows)."""
    if not rows:
        return ""
    cols = list(rows[0])
    body = "".join("<tr>" + "".join(f"<td>{_esc(r[c])}</td>" for c in cols) + "</tr>" for r in rows)
    return ("<h2>GPUs never measured: the envelope</h2><p class='note'>A kernel on a GPU the fit never saw is "
            "priced no further from its own roofline than the model prices the same kernel on the least efficient "
            "fitted GPU of its kind of op (family | dtype | roofline bound), times the kind's margin: how far a "
            "fitted GPU taken out of the fit sat beyond the others (docs/corrections.md).</p><table><tr>"
            + "".join(f"<th>{_esc(c)}</th>" for c in cols) + "</tr>" + body + "</table>")


def render_report(predictions: pd.DataFrame, *, title: str, meta: Mapping[str, Any] | None = None,
                  summaries: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
                  images: Mapping[str, Mapping[str, bytes]] | None = None,
                  envelope: list[dict[str, str]] | None = None) -> str:
    """The whole report as one HTML string (no external files). ``meta`` is shown as a key/value table;
    ``summaries`` (``{split: {model: error_summary}}``) is computed from ``predictions`` when not given;
    ``images`` (``{split: {figure stem: PNG bytes}}``) are drawn when not given; ``envelope``
    (:func:`envelope_rows`) adds the unseen-GPU envelope's table at the end."""
    from hybrid.tracking.evaluation import split_summaries

    summaries = summaries or split_summaries(predictions)
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_esc(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{_esc(title)}</h1>"]
    if meta:
        rows = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in meta.items())
        parts.append(f"<table class='meta'>{rows}</table>")
    compared = any({"model", "roofline"} <= set(per) for per in summaries.values())  # a roofline-only page: no colours
    parts.append("<p class='note'>Errors are |predicted - measured| / measured. Geomean is the geometric mean "
                 "of the relative errors." + (" Green: the calibrated model beats the roofline baseline (red: it "
                                              "does not)." if compared else "") + "</p>")
    splits = [str(s) for s in pd.unique(predictions["split"])]
    with_figures = plotted_splits(splits)
    for split, sub in predictions.groupby("split", sort=False):
        split = str(split)
        summ = summaries[split]
        parts.append(f"<h2>Split: {_esc(split)}</h2><p class='note'>{_esc(SPLIT_NOTES.get(split, ''))}</p>")
        parts.append("<h3>Overall</h3>" + error_table(summ))
        parts.append("<h3>Per op family</h3>" + error_table(summ, "by_op"))
        parts.append("<h3>Per device</h3>" + error_table(summ, "by_device"))
        if summ and all("by_shots" in per for per in summ.values()):  # the adapted split: how the error falls with the rows adapted to
            parts.append("<h3>Per number of rows adapted to</h3>" + error_table(summ, "by_shots"))
        intervals = interval_table(sub)
        if intervals:
            in_sample = split == "train"
            parts.append("<h3>80% prediction intervals</h3><p class='note'>Share of measurements inside their "
                         "predicted interval (nominal 80%; green within 70-90%). Intervals are conformal bands "
                         "of held-out residuals, wider for devices the model was not fitted on."
                         + (" <b>In-sample:</b> the model was fitted on these rows, so more of them fall inside "
                            "than would of new measurements; held-out coverage is measured in "
                            "experiments/interval_coverage." if in_sample else "") + "</p>" + intervals)
        if split not in with_figures:
            parts.append("<p class='note'>(figures are drawn for the held-out splits above)</p>")
            continue
        pngs = (images or {}).get(split) or {stem: figure_png(fig)
                                             for stem, fig in standard_figures(sub, title=split).items()}
        for stem, png in pngs.items():
            parts.append(_img(png, f"{split} {stem}"))
    parts.append(envelope_table(envelope or []))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(text: str, path: str | os.PathLike) -> Path:
    """Write the report atomically (temporary file renamed into place)."""
    return write_text(path, text)
