"""Values made JSON-ready for output meant to be read (``--json`` answers, Chrome traces): what JSON cannot hold
becomes the nearest thing it can. Saved models use :func:`hybrid.corrections.base.write_json` instead, which
refuses anything it cannot store exactly."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def json_ready(value: Any) -> Any:
    """``value`` as JSON holds it: numpy scalars as Python numbers, NaN / inf as null (JSON has neither), arrays,
    tuples and sets (sorted where they can be) as lists, mappings with text keys, anything else (a path, an
    object) as its text."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        v = float(value)
        return v if math.isfinite(v) else None
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, np.ndarray):
        return [json_ready(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [json_ready(v) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    return str(value)
