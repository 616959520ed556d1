"""Few-shot adaptation of a fitted predictor to a new device from a handful (5-50) of its measurements.

Two strategies, compared in ``experiments/few_shot`` (see ``docs/corrections.md``):

``residual``
    Keep the transferred model and learn one multiplicative scale per (device, correction):
    ``offset = sum(log(measured / predicted)) / (n + SHRINK)``, i.e. the mean log residual shrunk towards 0
    when there are few rows. One parameter cannot over-fit 5 rows.
``boost`` (the default; better from ~20 rows on, equal at 5)
    Continue boosting the transferred XGBoost model with the new rows (shallow trees, low learning rate,
    ``BOOST_ROUNDS`` rounds); the resulting model is used only for that device. Collective and roofline rows
    fall back to ``residual``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Pseudo-count shrinking the residual offset towards 0 (n rows give weight n / (n + SHRINK)).
SHRINK = 2.0
#: Extra trees grown on the new device's rows by the ``boost`` strategy.
BOOST_ROUNDS = 30
#: Learning rate of those trees.
BOOST_LEARNING_RATE = 0.1
#: Strategies :meth:`HybridPredictor.adapt` accepts.
STRATEGIES = ("residual", "boost")


def residual_offsets(log_residual: np.ndarray, groups: pd.Series, shrink: float = SHRINK) -> dict[str, float]:
    """Shrunken mean log residual per group label (vectorised over rows)."""
    frame = pd.DataFrame({"g": groups.astype(str).to_numpy(), "r": np.asarray(log_residual, dtype=np.float64)})
    frame = frame[np.isfinite(frame["r"])]
    agg = frame.groupby("g")["r"].agg(["sum", "count"])
    return {str(g): float(row["sum"] / (row["count"] + shrink)) for g, row in agg.iterrows()}
