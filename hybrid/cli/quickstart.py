"""``hybrid quickstart``: calibrate from the measurements available locally, track and register the model,
and show how well it predicts, in one command (no server needed)."""

from __future__ import annotations

import glob
import sys
import warnings
from pathlib import Path

import click
import pandas as pd
from tqdm.auto import tqdm

from hybrid.cli.output import named
from hybrid.errors import HybridError, InvalidInputError

#: Public subset imported when a data directory is available: (label, importer module:function, glob patterns
#: relative to the data directory, importer keyword arguments). Small on purpose: quickstart must finish in a
#: few minutes on 2 cores.
PUBLIC_SUBSET = (
    ("NeuSight kernel test collections", "hybrid.data.importers.neusight:import_neusight",
     ("neusight/test-dev/*.csv", "neusight/test/*.csv", "neusight/scripts/asplos/data/dataset/test/*.csv"), {}),
    ("nccl-tests Sophia (DGX A100, 2 nodes)", "hybrid.data.importers.nccl_tests:import_nccl_tests",
     ("nccl-tests/argonne-lcf_alcf-nccl-tests/results_sophia/n2.g8/*/*_output.dat*",), {"skip_empty": True}),
    ("nccl-tests Polaris (A100, 2 and 8 nodes)", "hybrid.data.importers.nccl_tests:import_nccl_tests",
     ("nccl-tests/argonne-lcf_alcf-nccl-tests/results_polaris/nccl_2_21/n2.g4.*/*_output.dat*",
      "nccl-tests/argonne-lcf_alcf-nccl-tests/results_polaris/nccl_2_21/n8.g4.*/*_output.dat*"),
     {"skip_empty": True}),
)
#: Rows kept from the public subset (evenly over device/op groups).
PUBLIC_MAX_ROWS = 4000
#: Public sources kept whole, beside the sub-sampled subset (same tuple form): XLA's H100 matmul table, the only
#: public timing of large 16-bit GEMMs on a Hopper GPU. Sub-sampled with the rest (a few dozen rows) or left out,
#: the GPU profiles' few large eager bf16/fp16 GEMMs (one of them misaligned, 5x slower) set the H100's level and
#: an aligned 4096^3 bf16 GEMM was predicted at ~340-390 TFLOP/s (XLA measures 780); kept whole, ~660. Its fp8 rows are
#: left out of the fit by the plausibility check (``hybrid.data.quality``).
PUBLIC_WHOLE = (
    ("XLA matmuls (H100 SXM: bf16, f32, fp8)", "hybrid.data.importers.xla:import_xla_matmul",
     ("xla/matmul_sm90_*.csv",), {}),
)
#: Devices quickstart holds out one at a time (the ones with the most rows): each costs a full fit.
QUICKSTART_LODO_DEVICES = 2
#: GPUs without another variant of their die in the data that quickstart holds out as well, the largest first (up
#: to this many in all): their errors calibrate the interval of GPUs the model never measured. The devices with the
#: most rows are the H100 and H200 profiles, each the other's sibling, so without them that interval was the
#: siblings' band: 33% of DeepBench's never-measured GPUs' rows covered (48% with the T4 and P100 held out too).
QUICKSTART_UNSEEN_DEVICES = 2


def quickstart_holdouts(data, config) -> list[str]:
    """The devices quickstart's leave-one-device-out split holds out: the default choice for ``config`` (the
    devices with the most rows), then GPUs whose die no other device of the data shares (``Catalog.same_die``
    within ``SIBLING_MAX_TDP_RATIO``), most kernel rows first, until :data:`QUICKSTART_UNSEEN_DEVICES` of the
    held-out devices are such GPUs."""
    from hybrid.corrections.intervals import SIBLING_MAX_TDP_RATIO
    from hybrid.ops.families import family_array
    from hybrid.tracking.calibrate import lodo_devices

    held = lodo_devices(data.table, config, data.catalog)
    devices = data.table["device"].astype(str)
    present = set(devices.unique())
    gpus = [d for d in present if data.catalog.device(d).kind == "gpu"]

    def lone(d: str) -> bool:
        return data.catalog.device(d).kind == "gpu" and not (
            set(data.catalog.same_die(d, SIBLING_MAX_TDP_RATIO)) & (present - {d}))

    need = QUICKSTART_UNSEEN_DEVICES - sum(lone(d) for d in held)
    if need <= 0 or len(gpus) < 2:
        return held
    kernel_rows = devices[family_array(data.table["op"]) != "collective"].value_counts()
    extra = [d for d in kernel_rows.index if d not in held and lone(d)][:need]
    return held + extra


def project_bundles() -> list[Path]:
    """Committed measurement bundles (``datasets/*/`` with a ``measurements.csv``): every kind, GPU bundles
    included (quickstart calibrates on all local measurements; :func:`hybrid.data.bundle.project_bundles`)."""
    from hybrid.data.bundle import project_bundles as committed

    return committed()


def import_public_subset(data_dir: Path, catalog, seed: int = 0, progress: bool = True) -> tuple[pd.DataFrame, list[str]]:
    """Import :data:`PUBLIC_SUBSET` from ``data_dir`` (sub-sampled to :data:`PUBLIC_MAX_ROWS`) and
    :data:`PUBLIC_WHOLE` (every row); a source that is missing or fails is skipped with a note on stderr."""
    from hybrid.tracking.inputs import subsample

    table, used = _import_sources(PUBLIC_SUBSET, data_dir, catalog, progress)
    if len(table):
        table = subsample(table, PUBLIC_MAX_ROWS, seed)
    whole, used_whole = _import_sources(PUBLIC_WHOLE, data_dir, catalog, progress)
    used += [f"{u} (all kept)" for u in used_whole]
    if len(whole):
        table = pd.concat([table, whole], ignore_index=True, sort=False) if len(table) else whole
    return table, used


def public_patterns() -> list[str]:
    """The file patterns (relative to the public-data directory) of every source quickstart reads."""
    return [pat for _, _, patterns, _ in PUBLIC_SUBSET + PUBLIC_WHOLE for pat in patterns]


def _import_sources(sources: tuple, data_dir: Path, catalog, progress: bool) -> tuple[pd.DataFrame, list[str]]:
    import importlib

    from hybrid.data.schema import validate

    frames, used = [], []
    for label, target, patterns, kwargs in tqdm(sources, desc="import public data", unit="source",
                                                disable=not progress, leave=False):
        files = sorted(f for pat in patterns for f in glob.glob(str(data_dir / pat)))
        if not files:
            # through tqdm: a plain echo was glued to the end of the drawn bar ("...?source/s]note: ...")
            tqdm.write(f"note: {label}: no files under {data_dir}, skipped", file=sys.stderr)
            continue
        module, fn = target.split(":")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                df = getattr(importlib.import_module(module), fn)(files, catalog=catalog, **kwargs)
            df = df[pd.to_numeric(df.get("wrong", 0), errors="coerce").fillna(0) == 0] if "wrong" in df else df
            frames.append(validate(df, catalog, source=label))
            used.append(f"{label}: {len(df):,} rows")
        except (HybridError, ImportError, OSError) as exc:
            tqdm.write(f"note: {label}: skipped ({str(exc).splitlines()[0]})", file=sys.stderr)
    if not frames:
        return pd.DataFrame(), used
    return pd.concat(frames, ignore_index=True, sort=False), used


def lodo_coverage(data, config) -> str:
    """One line saying how many of the data's devices the leave-one-device-out table covers, and why."""
    from hybrid.tracking.calibrate import lodo_devices

    n_devices = int(data.table["device"].nunique())
    held = lodo_devices(data.table, config, data.catalog)
    if not held:
        return ""
    if len(held) == n_devices:
        return f"leave-one-device-out covers all {n_devices} devices."
    return (f"note: leave-one-device-out covers {len(held)} of {n_devices} devices ({', '.join(held)}: the "
            f"devices with the most rows, and GPUs whose die no other device of the data shares, which calibrate "
            f"the interval of GPUs never measured; each costs a full fit, and a device is held out only if another "
            f"of its kind stays in the fit). For more: hybrid calibrate TABLES --name NAME "
            f"--holdout-device DEVICE ...")


def example_prediction(predictor, table: pd.DataFrame) -> list[tuple[str, str]]:
    """One GEMM (and one collective, if the data had any) predicted by the calibrated model, with the
    command that reproduces each."""
    from hybrid.ops.spec import Collective, Gemm

    out = []
    gemm_rows = table[table["op"].isin(["gemm", "bmm", "linear", "matmul"])]
    if len(gemm_rows):
        dev = str(gemm_rows["device"].value_counts().index[0])
        dtype = str(gemm_rows["dtype"].mode().iloc[0])
        frame = Gemm(m=4096, n=4096, k=4096, dtype=dtype, op="gemm").to_frame().assign(device=dev)
        r = predictor.predict(frame).iloc[0]
        out.append((f"GEMM 4096^3 {dtype} on {dev}: {r['time_us']:,.1f} us ({r['method']}; roofline "
                    f"{r['roofline_us']:,.1f} us)",
                    f"hybrid predict gemm -d {dev} -m 4096 -n 4096 -k 4096 --dtype {dtype} --model {{model}}"))
    coll = table[table["op"] == "all_reduce"]
    if len(coll) and "system" in coll.columns and coll["system"].notna().any():
        row = coll[coll["system"].notna()].iloc[0]
        frame = Collective(op="all_reduce", size_bytes=64 * 2**20, n_ranks=int(row["n_ranks"]),
                           n_nodes=int(row["n_nodes"])).to_frame().assign(device=row["device"], system=row["system"])
        r = predictor.predict(frame).iloc[0]
        out.append((f"all_reduce 64MiB over {int(row['n_ranks'])} ranks / {int(row['n_nodes'])} nodes on "
                    f"{row['system']}: {r['time_us']:,.1f} us ({r['method']}; alpha-beta {r['roofline_us']:,.1f} us)",
                    f"hybrid predict collective -s {row['system']} --op all_reduce --size 64MiB "
                    f"--ranks {int(row['n_ranks'])} --nodes {int(row['n_nodes'])} --model {{model}}"))
    return out


@click.command()
@click.option("--data-dir", type=click.Path(file_okay=False), callback=named,
              help="Public datasets directory (default: $HYBRID_DATA_DIR or ../shared/datasets if present).")
@click.option("--no-public", is_flag=True, help="Use only the project's committed measurement bundles.")
@click.option("--name", default="quickstart", show_default=True, help="Registered model name.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--tracking-uri", envvar="MLFLOW_TRACKING_URI", help="MLflow store (default: local SQLite store).")
def quickstart(data_dir: str | None, no_public: bool, name: str, seed: int, tracking_uri: str | None) -> None:
    """Calibrate from local measurements (committed bundles in datasets/, plus a NeuSight + nccl-tests subset
    and XLA's H100 matmul table from the public data when available), track the run in MLflow, register the
    model, print its error against measured runtimes (model vs roofline, per op family) and an example
    prediction."""
    from hybrid.cli.calibrate import print_result
    from hybrid.cli.output import quality_warnings
    from hybrid.data.paths import public_data_dir
    from hybrid.reports.html import write_report
    from hybrid.tracking.calibrate import CalibrationConfig, calibrate
    from hybrid.tracking.inputs import Measurements, load_measurements
    from hybrid.tracking.store import hybrid_home

    # a bad --name or --data-dir first, before minutes of reading and importing measurements
    config = CalibrationConfig(name=name, seed=seed, max_lodo_devices=QUICKSTART_LODO_DEVICES)
    public = None if no_public else public_data_dir(data_dir, required=data_dir is not None)
    if public is not None and data_dir is not None and not any(glob.glob(str(public / p)) for p in public_patterns()):
        # a directory above or below the mirror (../shared, ../shared/datasets/neusight): every source was skipped
        # with a note and the model fitted on the project's bundles alone, minutes later, as if that was asked for
        raise InvalidInputError(f"--data-dir {data_dir} holds none of the public data quickstart reads ("
                                + ", ".join(public_patterns()[:2]) + ", ...): name the directory that holds "
                                "neusight/, nccl-tests/ and xla/ (or leave --data-dir out, or pass --no-public)")
    bundles = project_bundles()
    if bundles:
        data = load_measurements(bundles)
        click.echo(f"project bundles: {', '.join(b.name for b in bundles)} ({len(data.table):,} rows)")
    else:
        from hybrid.hardware.catalog import default_catalog

        data = Measurements(pd.DataFrame(), default_catalog(), [])
    if public is not None:
        table, used = import_public_subset(public, data.catalog, seed)
        if len(table):
            click.echo(f"public data from {public}: " + "; ".join(used) + f" -> {len(table):,} rows used")
            data.table = pd.concat([data.table, table], ignore_index=True, sort=False) if len(data.table) else table
            data.sources += [f"{public}: {u}" for u in used]
    if len(data.table) == 0:
        raise InvalidInputError("no measurements found: no bundles in datasets/ and no public data directory "
                                "(pass --data-dir or set HYBRID_DATA_DIR, or run `hybrid profile`)")
    n_devices = data.table["device"].nunique()
    click.echo(f"calibrating on {len(data.table):,} rows, {n_devices} devices ...")
    config.holdout_devices = tuple(quickstart_holdouts(data, config))
    lodo_note = lodo_coverage(data, config)
    with quality_warnings():  # data-quality notes as `warning:` lines, as calibrate gives them
        result = calibrate(data, config, tracking_uri=tracking_uri, progress=True)
    print_result(result)
    if lodo_note:
        click.echo(lodo_note)
    examples = example_prediction(result.predictor, data.table)
    if examples:
        click.echo("\nexample predictions:")
        for text, cmd in examples:
            click.echo(f"  {text}\n    $ {cmd.format(model=result.name)}")
    report = hybrid_home() / "reports" / f"{name}-v{result.version}.html"
    write_report(result.report_html, report)
    click.echo(f"\nHTML report:    {report}")
