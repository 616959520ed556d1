"""End-to-end form error: the margin that widens iteration-time intervals, calibrated across published sources.

    python experiments/e2e_intervals/run.py [--rows FILE ...] [--out results.md] [--no-package]

Reads the per-row outputs of the end-to-end benchmarks (run them first; each writes its file beside its
results.md): ``experiments/nlp_e2e/e2e_rows.csv`` (NeuSight labels, written with ``--intervals``),
``experiments/llm_training/predictions.csv``, ``experiments/llm_inference/e2e_rows.csv`` (TensorRT-LLM tables)
and ``experiments/dlrm_gpu/e2e_rows.csv`` (MLPerf and DeepLearningExamples DLRM runs). Each row holds a published
figure, the calibrated point prediction and its op-cost 80% interval (every op at the low / high end of its own).
``--rows`` adds tables of the same columns (``hybrid.engine.form_error.ROW_COLUMNS``), e.g. a user's own runs.

Rows are grouped by the software that produced them (one group per harness: NeuSight's Hugging Face eager runs,
Megatron-LM, MosaicML llm-foundry, each TensorRT-LLM version, MLPerf DLRM, DeepLearningExamples DLRM), because a
user's run is new software as much as new hardware. The margin (``hybrid.engine.form_error``) is the 80% quantile
of how far measured figures fall outside the op-cost interval, each group weighing the same; it is scored
leave-one-group-out (each group with the margin of the others). Two pools are compared by that score: one margin
for every workload, and one per kind (training / inference); the better pool (closer to 80% on the mean over
held-out groups) is packaged in ``hybrid/engine/form_error.toml`` with the margins calibrated on every group.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.atomic import write_text
from hybrid.engine import form_error as fe
from hybrid.errors import HybridError, InvalidInputError
from hybrid.reports.markdown import write_benchmark_results

HERE = Path(__file__).resolve().parent
EXP = HERE.parent
PACKAGE_FILE = EXP.parent / "hybrid" / "engine" / "form_error.toml"
#: benchmark -> (its per-row file, the command that writes it)
INPUTS = {
    "nlp_e2e": ("e2e_rows.csv", "python experiments/nlp_e2e/run.py --intervals"),
    "llm_training": ("predictions.csv", "python experiments/llm_training/run.py"),
    "llm_inference": ("e2e_rows.csv", "python experiments/llm_inference/run.py"),
    "dlrm_gpu": ("e2e_rows.csv", "python experiments/dlrm_gpu/run.py"),
}


def software_group(table: str) -> str:
    """The harness a published table comes from (rows of one harness share its form error)."""
    t = table.lower()
    for key, group in (("neusight", "NeuSight, HF eager PyTorch"), ("mosaicml", "MosaicML llm-foundry"),
                       ("korthikanti", "Megatron-LM"), ("narayanan", "Megatron-LM"), ("megatron", "Megatron-LM"),
                       ("trtllm_v0.9.0", "TensorRT-LLM v0.9.0"), ("trtllm_v0.6.1", "TensorRT-LLM v0.6.1"),
                       ("mlperf", "MLPerf DLRM"), ("deeplearningexamples", "DeepLearningExamples DLRM")):
        if key in t:
            return group
    return table


def read_inputs(extra: list[str]) -> pd.DataFrame:
    """Every benchmark's per-row table in ``ROW_COLUMNS`` form, with ``table`` (the published table) and
    ``benchmark``; ``source`` is the software group."""
    frames = []
    for bench, (name, command) in INPUTS.items():
        path = EXP / bench / name
        if not path.exists():
            raise InvalidInputError(f"{path} is missing: run `{command}` first (it writes the per-row intervals)")
        t = pd.read_csv(path)
        if bench == "llm_training":
            t = t[t["calibrated_low_s"].notna() & t["published_s"].notna()]
            t = pd.DataFrame({"source": t["table"], "kind": "training", "key": t["row"], "measured": t["published_s"],
                              "predicted": t["calibrated_s"], "low": t["calibrated_low_s"],
                              "high": t["calibrated_high_s"], "unit": "s"})
        frames.append(t.assign(benchmark=bench))
    for f in extra:
        frames.append(pd.read_csv(f).assign(benchmark=Path(f).name))
    rows = pd.concat(frames, ignore_index=True)
    # rows without an op-cost interval (a step with an op the calibration has no band for: the collectives of a
    # calibration without collective measurements) say nothing about a margin: left out, counted in the report
    has = rows["low"].notna() & rows["high"].notna()
    without = rows.loc[~has, "benchmark"].value_counts().to_dict()
    rows = rows[has].reset_index(drop=True)
    rows.attrs["without_interval"] = without
    rows["table"] = rows["source"]
    rows["source"] = rows["source"].map(software_group)
    # a group's rows under one kind (NeuSight has both: one group per kind, the harness is shared but the
    # training step runs a backward pass and an optimizer the inference pass does not)
    both = rows.groupby("source")["kind"].transform("nunique") > 1
    rows.loc[both, "source"] = rows.loc[both, "source"] + " (" + rows.loc[both, "kind"] + ")"
    return rows


def pool_scores(rows: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Leave-one-group-out per pool: one margin for all rows, or one per kind."""
    per_kind = pd.concat([fe.leave_one_source_out(rows[rows["kind"] == k]) for k in fe.KINDS], ignore_index=True)
    return {"one margin": fe.leave_one_source_out(rows), "per kind": per_kind}


def packaged(rows: pd.DataFrame, loso: pd.DataFrame, pool: str) -> list[fe.FormMargin]:
    """One margin per kind: the pool's margin calibrated on every group (all groups for "one margin", the kind's
    for "per kind"), with the held-out coverage of that kind's groups (so a caller quotes what held for its kind)."""
    out = []
    for k in fe.KINDS:
        mine = rows[rows["kind"] == k]
        fitted = fe.fit_margin(rows if pool == "one margin" else mine, k)
        held = loso[loso["kind"] == k]
        out.append(fe.FormMargin(k, fitted.log_margin, fitted.n_rows, fitted.n_sources,
                                 float(held["coverage_pct"].mean()), float(held["op_only_coverage_pct"].mean()),
                                 fitted.calibrated_on, float(held["coverage_pct"].min()),
                                 float(held["coverage_pct"].max())))
    return out


def plot(loso: pd.DataFrame, path: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.3))
    y = np.arange(len(loso))
    ax.barh(y - 0.2, loso["op_only_coverage_pct"], height=0.4, label="op-cost interval")
    ax.barh(y + 0.2, loso["coverage_pct"], height=0.4, label="widened by the others' margin")
    ax.axvspan(75, 85, color="0.85", zorder=0, label="target 75-85%")
    ax.set_yticks(y, loso["source"])
    ax.set_xlabel("published figures inside the 80% interval (%)")
    ax.set_xlim(0, 100)
    ax.legend(loc="upper center", bbox_to_anchor=(0.4, -0.16), ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def report(rows: pd.DataFrame, pools: dict, chosen: str, margins: list[fe.FormMargin], fig: str,
           seconds: float) -> str:
    L = ["# End-to-end form error: widening iteration-time intervals, calibrated across published sources", "",
         f"Command: `python experiments/e2e_intervals/run.py` ({seconds:.1f} s). Inputs: the per-row outputs of "
         "the end-to-end benchmarks (published figure, calibrated prediction and its op-cost 80% interval: every "
         "op at the low / high end of its own), produced by the current code: "
         + ", ".join(f"`experiments/{b}/{n}`" for b, (n, _) in INPUTS.items()) + ".", "",
         f"{len(rows)} rows, {rows['source'].nunique()} software groups (a held-out group is software the margin "
         "never saw). Score of a row: how far (log) its published figure falls outside the op-cost interval, minus "
         "its distance to the nearer end inside. Margin: the 80% quantile of the scores, each group weighing the "
         "same. Widened interval: `[low / e^m, high * e^m]` (a negative margin narrows it, never past the point "
         "prediction)."
         + (" Left out, for having no op-cost interval: " + ", ".join(
             f"{n} rows of {b}" for b, n in rows.attrs.get("without_interval", {}).items()) + "."
            if rows.attrs.get("without_interval") else ""), "",
         "## Leave one software group out", "",
         "Each group scored with the margin calibrated on the other groups (of the same kind, for the per-kind "
         "pool).", ""]
    for name, loso in pools.items():
        L += [f"### {name}", "", "| group | kind | rows | margin (others) | inside, op-cost interval % | "
              "inside, widened % | median width (widened) |", "|---|---|---|---|---|---|---|"]
        for r in loso.itertuples():
            L.append(f"| {r.source} | {r.kind} | {r.rows} | x{np.exp(r.log_margin):.3f} | "
                     f"{r.op_only_coverage_pct:.1f} | {r.coverage_pct:.1f} | {r.median_width:.2f}x |")
        L += [f"| **mean over groups** | | {int(loso['rows'].sum())} | | "
              f"**{loso['op_only_coverage_pct'].mean():.1f}** | **{loso['coverage_pct'].mean():.1f}** | |", ""]
    by_kind = {name: {k: loso.loc[loso["kind"] == k, "coverage_pct"].mean() for k in fe.KINDS}
               for name, loso in pools.items()}
    L += ["Mean held-out coverage per kind (what a caller of that kind is told): " + "; ".join(
          f"{name}: " + ", ".join(f"{k} {v:.1f}%" for k, v in cov.items()) for name, cov in by_kind.items()) + ".", "",
          f"Chosen pool: **{chosen}** (each kind's mean held-out coverage closest to 80%, summed over kinds; groups "
          f"inside the 75-85% band: {int(pools[chosen]['coverage_pct'].between(75, 85).sum())} of "
          f"{len(pools[chosen])}).", "",
          f"![coverage per held-out group]({fig})", "",
          "## Packaged margins (`hybrid/engine/form_error.toml`, calibrated on every group)", "",
          "| kind | margin (factor on each side) | calibrated on: rows | groups | held-out groups of this kind: "
          "inside, widened % (lowest - highest group) | inside, op-cost only % |", "|---|---|---|---|---|---|"]
    for m in margins:
        L.append(f"| {m.kind} | x{m.factor:.3f} | {m.n_rows} | {m.n_sources} | {m.loso_coverage_pct:.1f} "
                 f"({m.loso_min_pct:.1f} - {m.loso_max_pct:.1f}) | {m.op_only_coverage_pct:.1f} |")
    L += ["", "Target: 75-85% of published figures inside the 80% interval on software never seen (mean over "
          "held-out groups)."]
    return "\n".join(L) + "\n"


def package_text(margins: list[fe.FormMargin], chosen: str) -> str:
    L = ["# End-to-end form-error margins (log-space, 80%): written by experiments/e2e_intervals/run.py; do not edit.",
         "# The op-cost interval of an iteration is widened to [low / exp(m), high * exp(m)] (m < 0 narrows it, never "
         "past the point); hybrid.engine.form_error.",
         f"# Pool: {chosen}; loso_coverage_pct: mean over held-out software groups (each with the others' margin).",
         ""]
    for m in margins:
        L += [f"[margins.{m.kind}]", f'kind = "{m.kind}"', f"log_margin = {m.log_margin:.6f}",
              f"n_rows = {m.n_rows}", f"n_sources = {m.n_sources}", f"loso_coverage_pct = {m.loso_coverage_pct:.2f}",
              f"op_only_coverage_pct = {m.op_only_coverage_pct:.2f}", f"loso_min_pct = {m.loso_min_pct:.2f}",
              f"loso_max_pct = {m.loso_max_pct:.2f}", f'calibrated_on = "{m.calibrated_on}"', ""]
    return "\n".join(L)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", nargs="*", default=[], help="more per-row tables (ROW_COLUMNS)")
    ap.add_argument("--out", default=str(HERE / "results.md"))
    ap.add_argument("--no-package", action="store_true", help="do not rewrite hybrid/engine/form_error.toml")
    args = ap.parse_args(argv)
    t0 = time.time()
    try:
        rows = read_inputs(args.rows)
        pools = pool_scores(rows)
    except HybridError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # the coverage a caller quotes is its kind's: the pool whose kinds are each closest to 80% on held-out groups
    dist = {k: sum(abs(v.loc[v["kind"] == kind, "coverage_pct"].mean() - 80.0) for kind in fe.KINDS)
            for k, v in pools.items()}
    chosen = min(dist, key=dist.get)
    margins = packaged(rows, pools[chosen], chosen)
    fig = plot(pools[chosen], Path(args.out).with_name("coverage.png"))
    text = report(rows, pools, chosen, margins, fig, time.time() - t0)
    print(text)
    write_benchmark_results(args.out, text)
    if not args.no_package:
        write_text(PACKAGE_FILE, package_text(margins, chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
