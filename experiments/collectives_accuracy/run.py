"""Collective-correction accuracy: held-out message sizes and held-out rank/node counts.

    python experiments/collectives_accuracy/run.py [--data-dir DIR] [--out results.md]

Data: nccl-tests logs (ALCF Polaris 2..540 nodes, Sophia DGX A100, Sirius; xxrjun H100 1 and 10 nodes),
Vidur A100 DGX / pairwise NVLink / A40, the XLA H100x8 collective table and DeepBench's all-reduce sheets
(5 GPU models, 8 per node, 1-4 nodes; system ``DeepBench-<GPU>``), via the project importers.
Rows with nccl-tests #wrong > 0 are dropped by the model. Each split prints the alpha-beta (roofline) error
beside the sigmoid error. The last sections hold out one whole *system* at a time: the per-system curves cannot
predict it, so the transfer model (``hybrid/corrections/collective_transfer.py``) answers from its catalog entry.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.corrections import CollectiveSigmoid
from hybrid.data.importers import import_paths
from hybrid.data.paths import public_data_dir
from hybrid.hardware.catalog import default_catalog
from hybrid.ops.roofline import roofline
from hybrid.reports.markdown import write_benchmark_results
from hybrid.reports.metrics import error_summary


def load(data_dir: Path) -> pd.DataFrame:
    cat = default_catalog()
    frames = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fmt in ("nccl-tests", "vidur-network", "xla-collectives"):
            frames.append(import_paths(fmt, data_dir, catalog=cat))
        frames.append(deepbench(data_dir, cat))
    table = pd.concat(frames, ignore_index=True, sort=False)
    if "wrong" in table.columns:
        table = table[~(pd.to_numeric(table["wrong"], errors="coerce").fillna(0) > 0)]
    table["algorithm"] = table["algorithm"].astype("string").fillna("") if "algorithm" in table else ""
    return table.reset_index(drop=True)


#: DeepBench GPU (catalog device key) -> catalog system of its all-reduce set-up.
DEEPBENCH_SYSTEMS = {"M40": "DeepBench-M40", "TitanX": "DeepBench-TitanX", "TitanX-Pascal": "DeepBench-TitanX-Pascal",
                     "GTX-1080Ti": "DeepBench-1080Ti", "P100-PCIE-16GB": "DeepBench-P100"}


def deepbench(data_dir: Path, cat) -> pd.DataFrame:
    """DeepBench all-reduce rows with their system; the ``algorithm`` column there names the fastest library per
    size (not a setting measured at every size), so it is dropped: one curve per (GPU, ranks, nodes)."""
    from hybrid.data.importers.deepbench import import_deepbench

    path = data_dir / "deepbench" / "deepbench_allreduce_tidy.csv"
    if not path.is_file():
        return pd.DataFrame()
    t = import_deepbench(path, catalog=cat)
    t = t[t["device"].isin(list(DEEPBENCH_SYSTEMS))].copy()
    t["system"] = t["device"].map(DEEPBENCH_SYSTEMS)
    t["algorithm"] = ""
    return t


def fmt(s: dict) -> str:
    return f"{s['geomean_pct']:.1f} / {s['median_pct']:.1f} / {s['p90_pct']:.1f}"


def held_out_sizes(table: pd.DataFrame, cat) -> pd.DataFrame:
    """Every third distinct size of each configuration held out (interpolation along the curve)."""
    keys = ["system", "op", "algorithm", "n_ranks", "n_nodes"]
    rank = table.groupby(keys)["size_bytes"].rank(method="dense").astype(int)
    test = (rank % 3 == 0).to_numpy()
    base = roofline(table, cat)
    model = CollectiveSigmoid().fit(table[~test], base[~test], cat)
    pred = model.predict(table[test], base[test], cat)
    out = table[test].assign(pred=pred, ab=base.loc[test, "time_us"].to_numpy())
    return out[np.isfinite(out["pred"])]


def dataset(table: pd.DataFrame) -> np.ndarray:
    """Reporting label: the system, with xxrjun's H100 NDR cluster split into 1-node and 10-node runs."""
    sys_ = table["system"].astype(str).to_numpy()
    multi = (table["n_nodes"].fillna(1) > 1).to_numpy()
    return np.where(sys_ == "xxrjun-H100-NDR", np.where(multi, "xxrjun-H100-NDR multi-node", "xxrjun-H100-NDR 1 node"),
                    sys_)


def held_out_ranks(table: pd.DataFrame, cat) -> pd.DataFrame:
    """Leave one rank count out per system (every layout with that count); both rank models predict it.

    ``kind``: "interpolated" when the same (system, collective, setting) keeps measured rank counts below and
    above the held-out one, "extrapolated" otherwise; rows of a (system, collective, setting) with no other
    measured rank count are not scored (nothing to transfer from)."""
    base = roofline(table, cat)
    keys = ["system", "op", "algorithm"]
    results = []
    for system in sorted(table["system"].unique()):
        in_sys = (table["system"] == system).to_numpy()
        for r in sorted(table.loc[in_sys, "n_ranks"].unique()):
            test = in_sys & (table["n_ranks"] == r).to_numpy()
            train = in_sys & ~test
            if not train.any():
                continue
            preds = {}
            for name in ("ratio", "joint"):
                model = CollectiveSigmoid(rank_model=name).fit(table[train], base[train], cat)
                preds[name] = model.predict(table[test], base[test], cat)
            out = table[test].assign(ratio=preds["ratio"], pred=preds["joint"], ab=base.loc[test, "time_us"].to_numpy())
            span = table[train].groupby(keys)["n_ranks"].agg(["min", "max"])
            idx = pd.MultiIndex.from_frame(out[keys].astype(str))
            span.index = pd.MultiIndex.from_frame(span.index.to_frame().astype(str))
            lo, hi = span["min"].reindex(idx).to_numpy(), span["max"].reindex(idx).to_numpy()
            out["kind"] = np.where(np.isnan(lo), "", np.where((lo < r) & (r < hi), "interpolated", "extrapolated"))
            results.append(out[(out["kind"] != "") & np.isfinite(out["pred"]) & np.isfinite(out["ratio"])])
    res = pd.concat(results, ignore_index=True)
    res["dataset"] = dataset(res)
    return res


def held_out_systems(table: pd.DataFrame, cat) -> pd.DataFrame:
    """Leave one system out: fit on every other system, predict all rows of the held-out one (transfer model)."""
    from tqdm.auto import tqdm

    base = roofline(table, cat)
    results = []
    for system in tqdm(sorted(table["system"].unique()), desc="leave-one-system-out", unit="system"):
        test = (table["system"] == system).to_numpy()
        model = CollectiveSigmoid(transfer=True).fit(table[~test], base[~test], cat)
        pred, source = model.predict_with_source(table[test], base[test], cat)
        results.append(table[test].assign(pred=pred, source=source, ab=base.loc[test, "time_us"].to_numpy()))
    res = pd.concat(results, ignore_index=True)
    return res[np.isfinite(res["pred"])]


#: The two columns of the leave-one-system-out subset tables.
LOSO_COLS = {"ab": "alpha-beta (roofline)", "pred": "transfer model"}


def subset_table(intro: str, rest: pd.DataFrame, extra: list[tuple[str, pd.DataFrame]] = ()) -> list[str]:
    """A leave-one-system-out subset: pooled and mean-over-systems errors of ``rest``, plus pooled rows of each
    ``extra`` (label, rows)."""
    pooled = [fmt(error_summary(rest[c], rest["time_us"])) for c in LOSO_COLS]
    means = [np.mean([error_summary(g[c], g["time_us"])["geomean_pct"] for _, g in rest.groupby("system")])
             for c in LOSO_COLS]
    lines = [intro, "", "| | " + " | ".join(LOSO_COLS.values()) + " |", "|---|" + "---|" * len(LOSO_COLS),
             "| all rows | " + " | ".join(pooled) + " |",
             "| mean over systems (geomean) | " + " | ".join(f"{m:.1f}" for m in means) + " |"]
    for label, rows in extra:
        lines.append(f"| {label} | " + " | ".join(fmt(error_summary(rows[c], rows["time_us"])) for c in LOSO_COLS)
                     + " |")
    return lines + [""]


def independent_entries(loso: pd.DataFrame, cat) -> list[str]:
    """Leave-one-system-out figures without the systems whose catalog bandwidths were estimated from the very
    logs scored here (``measured_links``): there both alpha-beta and the transfer model read the answer."""
    flagged = sorted(s for s in loso["system"].unique() if cat.systems[str(s)].measured_links)
    rest = loso[~loso["system"].isin(flagged)]
    return subset_table(f"Without the systems whose catalog bandwidths were estimated from their own logs "
                        f"({', '.join(flagged)}; `measured_links` in `systems.toml`): {rest['system'].nunique()} "
                        f"systems, {len(rest)} rows.", rest)


#: ALCF runs in which NCCL used its TCP socket transport: the default environment and set-ups 1-2 of
#: argonne-lcf/alcf-nccl-tests (README: set-up 3 on load the "AWS Libfabric" plugin, NCCL's path to Slingshot's
#: RDMA). A catalog entry describes the links, not which transport a job's environment picks: these runs reach
#: 3-10 GB/s on 25 GB/s NICs, which no hardware description predicts.
SOCKET_TRANSPORT = {"Polaris": ("", "env-setup-1", "env-setup-2"), "Sirius": ("", "env-setup-1", "env-setup-2")}


def socket_transport_rows(frame: pd.DataFrame) -> np.ndarray:
    """Rows of :data:`SOCKET_TRANSPORT` runs (system and set-up)."""
    alg = frame["algorithm"].astype("string").fillna("")
    mask = np.zeros(len(frame), dtype=bool)
    for system, setups in SOCKET_TRANSPORT.items():
        mask |= ((frame["system"] == system) & alg.isin(list(setups))).to_numpy()
    return mask


def without_socket_transport(loso: pd.DataFrame) -> list[str]:
    """Leave-one-system-out figures on the runs whose NCCL used the fabric's RDMA transport."""
    sock = socket_transport_rows(loso)
    rest = loso[~sock]
    return subset_table(f"Without the ALCF runs over NCCL's TCP socket transport (Polaris and Sirius, default "
                        f"environment and set-ups 1-2: no libfabric plugin, 3-10 GB/s on 25 GB/s Slingshot NICs): "
                        f"{int(sock.sum())} of {len(loso)} rows left out, {rest['system'].nunique()} systems.", rest,
                        [("the socket-transport rows alone", loso[sock])])


def transfer_constants(table: pd.DataFrame, cat) -> list[str]:
    """The transfer model fitted on every system: its physical constants."""
    base = roofline(table, cat)
    tr = CollectiveSigmoid(transfer=True).fit(table, base, cat).transfer
    c = tr.constants()
    lines = ["## Transfer model fitted on all systems: constants", "",
             f"{tr.n_points} points (median per size, fastest setting), {len(tr.systems)} systems, in-sample RMS "
             f"ln error {tr.rmse_log:.2f}.", "", "| constant | values |", "|---|---|"]
    for key, val in c.items():
        text = ", ".join(f"{k}: {v:.3g}" for k, v in val.items()) if isinstance(val, dict) else f"{val:.3g}"
        lines.append(f"| {key} | {text} |")
    return lines + [""]


def section(title: str, df: pd.DataFrame, by: str, cols: dict[str, str]) -> list[str]:
    lines = [f"## {title}", "", f"| {by} | rows | " + " | ".join(cols.values()) + " |",
             "|---|---|" + "---|" * len(cols)]
    for key, g in df.groupby(by, sort=True):
        lines.append(f"| {key} | {len(g)} | " + " | ".join(fmt(error_summary(g[c], g["time_us"])) for c in cols) + " |")
    lines.append(f"| **all rows** | {len(df)} | " + " | ".join(fmt(error_summary(df[c], df["time_us"])) for c in cols) + " |")
    means = [np.mean([error_summary(g[c], g["time_us"])["geomean_pct"] for _, g in df.groupby(by)]) for c in cols]
    lines.append(f"| **mean over {by}s (geomean)** | | " + " | ".join(f"{m:.1f}" for m in means) + " |")
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.md")))
    args = ap.parse_args()
    t0 = time.time()
    cat = default_catalog()
    table = load(public_data_dir(args.data_dir))
    sizes = held_out_sizes(table, cat)
    ranks = held_out_ranks(table, cat)
    lines = ["# Collective correction accuracy (sigmoid busbw curves vs alpha-beta)", "",
             "Command: `python experiments/collectives_accuracy/run.py`", "",
             f"{len(table)} rows after dropping #wrong > 0; systems: {', '.join(sorted(table['system'].unique()))}.",
             "Errors: |pred - meas| / meas in %, geomean / median / p90.", ""]
    lines += section("Held-out message sizes (every 3rd size of each curve)", sizes, "system",
                     {"ab": "alpha-beta (roofline)", "pred": "sigmoid"})
    rank_cols = {"ab": "alpha-beta (roofline)", "ratio": "previous: ratio interpolation",
                 "pred": "layout model (default)"}
    for kind in ("interpolated", "extrapolated"):
        lines += section(f"Held-out rank counts, {kind}, by dataset", ranks[ranks["kind"] == kind], "dataset",
                         rank_cols)
    lines += section("Held-out rank counts, all, by kind", ranks, "kind", rank_cols)
    loso = held_out_systems(table, cat)
    lines += section("Held-out systems (leave one system out; transfer model from the catalog entry)", loso, "system",
                     {"ab": "alpha-beta (roofline)", "pred": "transfer model"})
    lines += independent_entries(loso, cat)
    lines += without_socket_transport(loso)
    lines += section("Held-out systems by collective (transfer model, all systems' rows)", loso, "op",
                     {"ab": "alpha-beta (roofline)", "pred": "transfer model"})
    lines += transfer_constants(table, cat)
    lines.append(f"Total wall time: {time.time() - t0:.0f} s")
    text = "\n".join(lines) + "\n"
    print(text)
    write_benchmark_results(args.out, text)


if __name__ == "__main__":
    main()
