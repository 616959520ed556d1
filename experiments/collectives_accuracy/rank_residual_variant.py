"""Tried, not adopted (2026-11-29): the layout model between measured rank counts times its interpolated residual.

Beyond the measured rank counts the layout model is multiplied by the nearest measured layout's residual
(sigmoid / layout model at the same sizes); between them it is used as is. This script scores the variant that
also corrects interpolated layouts, by the residuals of the nearest measured layouts below and above, interpolated
linearly in log2(ranks) (``interp``), against the default (``asis``), on exactly ``run.py``'s held-out rank counts:

    python experiments/collectives_accuracy/rank_residual_variant.py asis
    python experiments/collectives_accuracy/rank_residual_variant.py interp

It prints, for interpolated and extrapolated rank counts, the geomean error over all rows, the mean over datasets
(as ``run.py`` reports them) and each dataset's geomean. Results and the decision are in results.md (Discussion).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import run as ca  # noqa: E402  (this benchmark's loader and held-out rank counts)

from hybrid.corrections.collective_sigmoid import CollectiveSigmoid  # noqa: E402
from hybrid.data.paths import public_data_dir  # noqa: E402
from hybrid.hardware.catalog import default_catalog  # noqa: E402


def interpolate_residuals() -> None:
    """Patch :class:`CollectiveSigmoid` so an interpolated layout gets the interpolated residual too."""
    original = CollectiveSigmoid._layout_predict

    def patched(self, lm, op, ranks, nodes, size):
        if self._layout_extrapolates(lm, ranks):
            return original(self, lm, op, ranks, nodes, size)
        pred = self._layout_us(lm, op, ranks, nodes, size)
        same = [f for f in self.fits if f.system == lm.system and f.op == lm.op and f.algorithm == lm.algorithm]
        below = [f for f in same if f.n_ranks < ranks]
        above = [f for f in same if f.n_ranks > ranks]
        if not below or not above:
            return pred

        def distance(f):
            return abs(np.log2(f.n_ranks) - np.log2(ranks)), abs(f.n_nodes - nodes)

        def residual(f):
            return np.log(self._curve_us(f, size)) - np.log(self._layout_us(lm, op, f.n_ranks, f.n_nodes, size))

        lo, hi = min(below, key=distance), min(above, key=distance)
        w = (np.log2(ranks) - np.log2(lo.n_ranks)) / (np.log2(hi.n_ranks) - np.log2(lo.n_ranks))
        return pred * np.exp((1 - w) * residual(lo) + w * residual(hi))

    CollectiveSigmoid._layout_predict = patched


def _geomean_pct(pred: np.ndarray, meas: np.ndarray) -> float:
    err = np.maximum(np.abs(pred / meas - 1), 1e-6)
    return float(np.exp(np.mean(np.log(err))) * 100)


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "asis"
    if mode not in ("asis", "interp"):
        raise SystemExit(f"mode must be 'asis' or 'interp', not {mode!r}")
    if mode == "interp":
        interpolate_residuals()
    ranks = ca.held_out_ranks(ca.load(public_data_dir(None)), default_catalog())
    for kind in ("interpolated", "extrapolated"):
        sub = ranks[ranks["kind"] == kind]
        per = {name: _geomean_pct(g["pred"].to_numpy(), g["time_us"].to_numpy()) for name, g in sub.groupby("dataset")}
        print(f"{mode} {kind}: all rows {_geomean_pct(sub['pred'].to_numpy(), sub['time_us'].to_numpy()):.2f}%, "
              f"mean over datasets {np.mean(list(per.values())):.2f}%")
        for name, v in per.items():
            print(f"  {name:30s} {v:.1f}")


if __name__ == "__main__":
    main()
