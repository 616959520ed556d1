"""Predictions versus measurements for a DLRM campaign: end-to-end error and sharding success rates.

For every (config, plan) row of a campaign results table the engine predicts the iteration time of exactly the
stored config and plan; :func:`sharding_success` then asks, per config, whether the plan predicted fastest is the
measured fastest (*strict*) or measured within the run-to-run spread of the fastest (*tolerant*).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from hybrid.errors import InvalidInputError
from hybrid.reports.metrics import error_summary

#: A predictor of one (config, plan): returns the predicted iteration time in milliseconds.
PredictFn = Callable[[Any, Any], float]


def sharding_success(
    table: pd.DataFrame,
    predicted: str = "predicted_ms",
    measured: str = "median_ms",
    spread: str = "std_ms",
    group: str = "config_name",
    plan: str = "plan_name",
    k: float = 1.0,
) -> dict[str, Any]:
    """Per-config plan choice quality.

    For each ``group`` with at least two plans: the chosen plan is the one with the smallest ``predicted``;
    *strict* success if it also has the smallest ``measured``; *tolerant* success if
    ``measured[chosen] <= measured[best] + k * max(spread[best], spread[chosen])``. Also reported: the mean
    slowdown of the chosen plan over the measured best (``regret_pct``).

    Returns ``{n_configs, strict, tolerant, strict_pct, tolerant_pct, regret_pct, per_config: DataFrame}``.
    """
    need = [group, plan, predicted, measured, spread]
    missing = [c for c in need if c not in table.columns]
    if missing:
        raise InvalidInputError(f"table lacks column(s) {missing}")
    df = table[need].copy()
    for c in (predicted, measured, spread):
        v = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float)
        if not np.all(np.isfinite(v)):
            raise InvalidInputError(f"column {c} has NaN or non-numeric values")
        df[c] = v
    if (df[measured] <= 0).any():
        raise InvalidInputError(f"column {measured} must be positive")
    counts = df.groupby(group, sort=True)[plan].transform("size")
    df = df[counts >= 2]
    if df.empty:
        raise InvalidInputError("no config has two or more plans to choose between")
    g = df.groupby(group, sort=True)
    chosen = df.loc[g[predicted].idxmin()].set_index(group)
    best = df.loc[g[measured].idxmin()].set_index(group)
    tol = k * np.maximum(best[spread].to_numpy(), chosen[spread].to_numpy())
    per = pd.DataFrame({
        "chosen_plan": chosen[plan], "best_plan": best[plan],
        "chosen_ms": chosen[measured], "best_ms": best[measured], "tolerance_ms": tol,
        "n_plans": g.size(),
    })
    per["strict"] = per["chosen_plan"] == per["best_plan"]
    per["tolerant"] = per["strict"] | (per["chosen_ms"] <= per["best_ms"] + per["tolerance_ms"])
    per["regret_pct"] = (per["chosen_ms"] / per["best_ms"] - 1.0) * 100
    n = len(per)
    return {
        "n_configs": n, "strict": int(per["strict"].sum()), "tolerant": int(per["tolerant"].sum()),
        "strict_pct": float(per["strict"].mean() * 100), "tolerant_pct": float(per["tolerant"].mean() * 100),
        "regret_pct": float(per["regret_pct"].mean()), "per_config": per,
    }


def predict_campaign(
    results: pd.DataFrame,
    campaign_dir: str | os.PathLike,
    predict: PredictFn,
    progress: bool = False,
) -> pd.DataFrame:
    """A copy of ``results`` with ``predicted_ms`` filled by ``predict(config, plan)`` for every row (the stored
    config/plan files beside the table; the config's ``gpus`` set to the measured ``ranks``)."""
    from hybrid.bench.campaign import load_pair

    out = results.copy()
    preds = np.empty(len(out))
    base = Path(campaign_dir)
    for i, (_, row) in enumerate(tqdm(out.iterrows(), total=len(out), desc="predict", disable=not progress)):
        cfg, plan = load_pair(base, row)
        if int(row["ranks"]) != cfg.gpus:
            cfg = cfg.with_(gpus=int(row["ranks"]))
        preds[i] = float(predict(cfg, plan))
    if not np.all(np.isfinite(preds)) or np.any(preds <= 0):
        bad = int(np.flatnonzero(~np.isfinite(preds) | (preds <= 0))[0])
        raise InvalidInputError(f"predictor returned {preds[bad]!r} ms for row {bad} "
                                f"({out['config_name'].iloc[bad]}, {out['plan_name'].iloc[bad]})")
    out["predicted_ms"] = preds
    return out


@dataclass
class ValidationReport:
    """End-to-end error and sharding success of one predictor on one campaign."""

    table: pd.DataFrame  #: results with predicted_ms
    errors: dict[str, Any]
    success: dict[str, Any]
    split: dict[str, Any] = field(default_factory=dict)  #: half-split fit of overheads, when available

    def summary(self) -> dict[str, Any]:
        s = {k: v for k, v in self.success.items() if k != "per_config"}
        return {"errors": {k: v for k, v in self.errors.items() if not isinstance(v, dict)},
                "errors_by_plan": self.errors.get("by_plan", {}), "sharding": s, "split": self.split}


def evaluate(table: pd.DataFrame, k: float = 1.0) -> tuple[dict[str, Any], dict[str, Any]]:
    """Error summary (overall, by plan type) and sharding success of a table with ``predicted_ms``."""
    errors = error_summary(table["predicted_ms"], table["median_ms"], groups={"by_plan": table["plan_name"]})
    return errors, sharding_success(table, k=k)


def half_split(configs: list[str], seed: int = 0) -> tuple[list[str], list[str]]:
    """Configs split in two halves at random (reproducible)."""
    names = sorted(set(configs))
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(names))
    half = len(names) // 2
    return [names[i] for i in sorted(perm[:half])], [names[i] for i in sorted(perm[half:])]
