"""Compiled (fused) execution of an eagerly traced step: ``torch.compile``-style fusion as a unit rewrite.

A trace records the eager program: every pointwise op, norm, softmax, dropout, reduction and copy is its own
kernel, reading its inputs from and writing its outputs to memory, each launched by its own dispatch. A compiler
such as TorchInductor fuses each run of such ops between two library calls (GEMMs, convolutions, attention,
embeddings, collectives) into one generated kernel that streams the run's tensors once. :func:`compiled_fusion`
rewrites the units of a trace (:func:`hybrid.workloads.trace_units.trace_units`) that way before the graph is built
(``build_trace_graph(..., transform=compiled_fusion())``):

* a *fusible run* is a maximal sequence of op units whose breakdown label is in :data:`FUSIBLE_LABELS`, on one
  thread and in one phase (forward and backward are compiled as separate graphs), with only view/host units
  between them; a GEMM, convolution, attention, embedding, collective or unmodelled op ends it;
* the run becomes one kernel costed as its member that moves the most bytes (one pass over the largest tensors:
  the fused kernel reads its external inputs and writes its outputs once, and its largest member already reads
  and writes tensors of that size); the other members become host-only units with no predicted time (no kernel, no
  dispatch or launch of their own; their traced span is not handed to the host gap after them). Views stay
  host-only as in eager mode.

This is a first-order model of fusion (no epilogue fusion into GEMMs, no recomputation or layout changes the
compiler may choose); ``experiments/nlp_e2e`` scores it on NeuSight's ``torch.compile`` labels.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from hybrid.data.traces.parse import RankTrace
from hybrid.ops.families import family_of

#: Breakdown labels of the units a compiler fuses (pointwise and row-wise kernels).
FUSIBLE_LABELS = frozenset({"elementwise", "norm", "softmax", "dropout", "reduction", "copy"})
#: Unit kind of a fused-away member (host only, as a view).
FUSED_KIND = "view"
#: Unit column that marks a fused-away member: placed as a view with no predicted host time (its traced time is
#: still the re-simulation's, which reproduces the traced step).
FUSED_COLUMN = "fused"


def _unit_bytes(rows: list[dict]) -> np.ndarray:
    """Bytes each op row moves (its family's roofline byte count)."""
    out = np.zeros(len(rows))
    frame = pd.DataFrame(rows)
    if frame.empty or "op" not in frame.columns:
        return out
    for op, idx in frame.groupby("op").groups.items():
        sub = frame.loc[idx]
        out[np.asarray(idx)] = np.asarray(family_of(str(op)).bytes(sub), dtype=np.float64)
    return out


def fusible_runs(units: pd.DataFrame) -> np.ndarray:
    """Run id per unit (the position of the run's first member; -1: not fused). A run stays open across view
    units and the other threads' units; a non-fusible unit of its thread or a phase change closes it. Runs of
    one member are not fused. Vectorised: per thread, the non-view units in trace order, a run starting at each
    fusible unit whose predecessor is not fusible or in another phase."""
    run = np.full(len(units), -1, dtype=np.int64)
    pos = np.flatnonzero(units["kind"].to_numpy() != "view")
    if not len(pos):
        return run
    sub = units.iloc[pos]
    fusible = ((sub["kind"] == "op") & sub["label"].isin(FUSIBLE_LABELS)).to_numpy()
    order = np.lexsort((pos, sub["tid"].astype(str).to_numpy()))  # by thread, then trace order
    p, f = pos[order], fusible[order]
    tid = sub["tid"].astype(str).to_numpy()[order]
    phase = sub["phase"].astype(str).to_numpy()[order]
    same = np.r_[False, (tid[1:] == tid[:-1]) & (phase[1:] == phase[:-1]) & f[:-1]]
    start = f & ~same
    first = np.maximum.accumulate(np.where(start, np.arange(len(p)), -1))  # the current run's first member
    run[p[f]] = p[first[f]]
    ids, counts = np.unique(run[run >= 0], return_counts=True)
    run[np.isin(run, ids[counts < 2])] = -1
    return run


def compiled_fusion() -> Callable[[RankTrace, pd.DataFrame], pd.DataFrame]:
    """A ``build_trace_graph`` transform that fuses the trace's pointwise runs (see the module docstring)."""

    def transform(trace: RankTrace, units: pd.DataFrame) -> pd.DataFrame:
        del trace
        if units.empty:
            return units
        u = units.reset_index(drop=True).copy()
        run = fusible_runs(u)
        if not (run >= 0).any():
            return u
        members = np.flatnonzero(run >= 0)
        nbytes = np.zeros(len(u))
        nbytes[members] = _unit_bytes([u.at[i, "row"] for i in members])
        frame = pd.DataFrame({"run": run[members], "bytes": nbytes[members], "pos": members})
        keep = frame.loc[frame.groupby("run")["bytes"].idxmax(), "pos"].to_numpy()
        fused_away = np.setdiff1d(members, keep)
        u.loc[fused_away, "kind"] = FUSED_KIND
        u.loc[fused_away, "device_us"] = np.nan
        # compiled code does not dispatch them: no host time of their own (:data:`FUSED_COLUMN`). Their traced
        # span stays: the host gaps are measured between traced spans, and a span cut to nothing would hand the
        # op's traced time to the gap before the next unit, which the traced host keeps (the traced CPU: a
        # compiled step predicted slower than the eager one)
        u[FUSED_COLUMN] = False
        u.loc[fused_away, FUSED_COLUMN] = True
        return u

    return transform
