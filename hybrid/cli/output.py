"""Small helpers shared by CLI commands: JSON output and plain-text tables."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Sequence
from typing import Any

import click
import numpy as np


def _default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def echo_json(obj: Any) -> None:
    """Print ``obj`` as JSON (NaN becomes null)."""
    click.echo(json.dumps(_clean(obj), indent=2, default=_default))


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        return _clean(obj.item())
    return obj


def echo_table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> None:
    """Print an aligned plain-text table."""
    cells = [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    click.echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    click.echo("  ".join("-" * w for w in widths))
    for r in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 1e5 or abs(v) < 1e-2:
            return f"{v:.3g}"
        return f"{v:.2f}"
    return str(v)


#: At most this many warnings are printed one per line; the rest are counted.
MAX_WARNINGS = 20


def report_warnings(caught: list[warnings.WarningMessage]) -> None:
    """Print caught warnings as ``warning:`` lines on stderr, each distinct message once."""
    msgs = list(dict.fromkeys(str(w.message) for w in caught))
    for m in msgs[:MAX_WARNINGS]:
        click.echo(f"warning: {m}", err=True)
    if len(msgs) > MAX_WARNINGS:
        click.echo(f"warning: ... and {len(msgs) - MAX_WARNINGS} more", err=True)


def e2e_line(parts: Sequence[str], values: dict[str, Any], what: str) -> str:
    """The end-to-end interval line: ``parts`` (e.g. ``"TTFT 10.1 - 12.3 ms"``) and, from ``values``
    (:func:`hybrid.engine.form_error.e2e_interval`), the margin and how often it held on unseen software."""
    lo, hi = values["e2e_heldout_coverage_range_pct"]
    return (f"end-to-end 80% interval: {', '.join(parts)} (the op-cost interval widened x{values['e2e_margin_factor']:.2f} "
            "on each side for what op costs do not describe: framework, runtime, schedule; published "
            f"{what} of software it was not calibrated on fell inside {values['e2e_heldout_coverage_pct']:.0f}% of "
            f"the time on average, {lo:.0f}-{hi:.0f}% per software, experiments/e2e_intervals)")


#: Said (JSON ``notes`` / ``interval_note`` and stderr) when a calibrated model gives no interval for some op.
NO_INTERVAL_NOTE = ("no 80% interval: the calibrated model gives none for some op of this {what} (a collective of a "
                    "model calibrated without collective measurements, say)")
