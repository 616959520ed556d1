"""``hybrid evaluate``: predict every row of measured tables with a calibrated model (or roofline) and report
the error per op family and device."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import click
import numpy as np
import pandas as pd

from hybrid.atomic import atomic_file
from hybrid.cli.output import echo_json, echo_table, named, quality_warnings, refuse_output_among_tables
from hybrid.errors import InvalidInputError

_STATS = ("geomean_pct", "mape_pct", "median_pct", "p90_pct")


def load_registered(ref: str, tracking_uri: str | None) -> Any:
    """The registered model ``ref`` names (None for ``roofline``), loaded before the tables it scores are read, so
    that :func:`catalog_for_tables` can name the devices it was fitted on."""
    from hybrid.tracking.registry import ROOFLINE, load_predictor, parse_model_ref

    parsed = parse_model_ref(ref)
    if parsed.name == ROOFLINE and parsed.version is None and parsed.alias is None:
        return None
    return load_predictor(ref, tracking_uri=tracking_uri)


def catalog_for_tables(loaded: Any) -> Any:
    """The catalog measured tables are checked against when ``loaded`` (a registered model, or None) scores them:
    the packaged catalog (with ``$HYBRID_CATALOG``) plus the devices and systems the model was fitted on that it
    lacks. A device known only from a bundle's catalog (a machine ``hybrid profile`` measured) is part of a model
    fitted on that bundle (``HybridPredictor.save`` keeps its entry, and ``predict gemm --device`` takes it), but
    a plain table of its rows was "unknown device" to ``evaluate`` and ``predict table`` and to ``calibrate
    --base``, unless the bundle's catalog was given again."""
    from hybrid.hardware.catalog import Catalog, default_catalog

    cat = default_catalog()
    if loaded is None:
        return cat
    fitted = loaded.predictor.catalog
    devices = {k: d for k, d in fitted.devices.items() if k not in cat.devices}
    systems = {k: v for k, v in fitted.systems.items() if k not in cat.systems}
    # one catalog of both: a system of a site catalog file on a packaged GPU (the model's `Lab-Node` of A100s) named
    # a device the extra entries alone lacked ("system 'Lab-Node' names unknown device 'A100-SXM4-40GB'")
    return Catalog({**cat.devices, **devices}, {**cat.systems, **systems}) if devices or systems else cat


def load_model_for(ref: str, tracking_uri: str | None, catalog: Any, devices: Any = (), loaded: Any = None) -> Any:
    """A predictor for ``ref`` (``roofline`` or a registry reference) that knows every device of ``catalog``.

    A device the model was fitted on keeps the model's catalog entry (``HybridPredictor.fitted_devices``: its
    corrections are efficiencies relative to that entry's roofline); ``catalog`` adds the others and wins for
    devices the model only knows from the packaged catalog. For each of ``devices`` (the keys the measured rows
    name) that ``catalog`` describes unlike the fitted entry (:func:`~hybrid.tracking.inputs.spec_differences`: a
    profile of another machine under the name of a committed bundle's, or the same machine measured under other
    load) a :class:`~hybrid.errors.DataQualityWarning` says so. ``loaded``: the model as
    :func:`load_registered` gave it (not loaded again)."""
    from hybrid.hardware.catalog import Catalog
    from hybrid.tracking.inputs import merge_catalog, warn_other_machine
    from hybrid.tracking.registry import load_predictor

    if loaded is None:
        loaded = load_predictor(ref, tracking_uri=tracking_uri, catalog=catalog if ref == "roofline" else None)
    if ref == "roofline":
        return loaded
    model = loaded.predictor
    fitted = model.catalog
    keep = {d: fitted.devices[d] for d in model.fitted_devices() if d in fitted.devices}
    for key in dict.fromkeys(str(d) for d in devices):
        if key in keep and key in catalog.devices:
            warn_other_machine(key, "the measured table's catalog", catalog.devices[key],
                               f"the entry {loaded.ref} was fitted with", keep[key],
                               "predictions use the model's entry, which its corrections are relative to")
    merged, _ = merge_catalog(fitted, catalog)
    if any(merged.devices.get(k) is not d for k, d in keep.items()):
        merged = Catalog({**merged.devices, **keep}, merged.systems)
    model.catalog = merged
    return loaded


def training_overlap(loaded: Any, frame: pd.DataFrame) -> tuple[np.ndarray, list[str]] | None:
    """Mask of the rows of ``frame`` that the registered model was fitted on, and the models whose training data
    they were (``models:/NAME/V (run ID)``), or None for the roofline / a model without a readable run.

    The rows come from the ``train`` split each run recorded. An adapted model (``hybrid calibrate --base``) was
    fitted on its base's rows as well as its own, and its run's ``train`` split holds only the new rows: its base's
    run (recorded in the summary, and that one's base, ...) is read too. Before, a model adapted to a few T4 rows
    and evaluated on its base's training table said ``rows_in_training_data: 0`` and gave in-sample errors (0.2%
    geomean) as a test."""
    from hybrid.errors import HybridError
    from hybrid.tracking.evaluation import in_training_data
    from hybrid.tracking.runs import read_run

    if loaded.name == "roofline" or not loaded.run_id:
        return None
    mask: np.ndarray | None = None
    sources: list[str] = []
    run_id, ref, visited = str(loaded.run_id), loaded.ref, set()
    while run_id and run_id not in visited:
        visited.add(run_id)
        try:
            rec = read_run(run_id, tracking_uri=loaded.tracking_uri)
        except HybridError:
            break
        train = rec.predictions[rec.predictions["split"] == "train"]
        seen = np.asarray(in_training_data(frame, train), dtype=bool)
        mask = seen if mask is None else mask | seen
        if seen.any():
            sources.append(f"{ref} (run {run_id})" if ref == loaded.ref
                           else f"{ref} (run {run_id}, which {loaded.ref} was adapted from)")
        base = rec.summary.get("base") or {}
        run_id = str(base.get("run_id") or "") if isinstance(base, dict) else ""
        ref = f"models:/{base.get('name')}/{base.get('version')}" if run_id else ref
    return None if mask is None else (mask, sources)


def dtype_fallback_notes(table: pd.DataFrame, catalog: Any) -> list[str]:
    """One note per (device, dtype) of ``table`` that the device runs on other units (the roofline's fallback):
    a dtype it has no units for (fp8 on a T4: its fp16 peak) or bf16 converted to fp32 on a GPU before Ampere.
    ``predict gemm`` / ``predict op`` warn of these; a table of such rows was scored or predicted in silence,
    although the README promises every fallback as a ``warning:`` line and in ``--json`` output."""
    from hybrid.errors import HybridError

    if not len(table) or "dtype" not in table.columns:
        return []
    notes = []
    for (dev, dtype), n in table.groupby(["device", "dtype"], sort=True).size().items():
        try:
            device = catalog.device(str(dev))
            used = device.peak_dtype(str(dtype))
        except HybridError:  # no peak at all: the roofline's own error names the row
            continue
        if used != dtype:
            notes.append(f"{n:,} {dtype} row(s) on {device.key}: it has no {dtype} units: timed at its {used} peak "
                         f"({device.peak(used) / 1e12:.4g} TFLOP/s) with {dtype} operand sizes")
        elif device.lacks_units(str(dtype)):
            notes.append(f"{n:,} {dtype} row(s) on {device.key}: {device.slow_dtype_note(str(dtype))}")
    return notes


def implausible_notes(table: pd.DataFrame, catalog: Any) -> dict[str, tuple[dict[str, Any], str]]:
    """The rows of ``table`` that calibration leaves out as physically implausible, as ``{JSON key: (value,
    warning: line)}``; empty without any (:func:`hybrid.data.quality.implausible_findings`, the words and JSON
    of ``data validate``: GEMMs faster than the datasheet peak, collectives far faster than their fabric).

    Every fit (GEMMs) and every calibration (both) leaves them out, but ``evaluate`` scored them in silence: a
    group timed in ms where us belong, or sparse kernels, moves the error figures without a word. They are kept
    (a score of the table as given) and said."""
    from hybrid.data.quality import implausible_findings
    from hybrid.ops.roofline import roofline

    if not len(table):
        return {}
    return {key: (value, f"warning: {said}; scored here as measured")
            for key, (value, said) in implausible_findings(table, roofline(table, catalog), catalog).items() if said}


def by_method(frame: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Error figures per model that answered (the prediction frame's ``method``: ``kernel-xgb``,
    ``collective-sigmoid`` (curves of a measured system), ``collective-transfer`` (the cross-system model),
    ``alpha-beta``, ``roofline``, ...)."""
    import numpy as np

    from hybrid.reports.metrics import error_summary

    return error_summary(frame["predicted_us"].to_numpy(np.float64), frame["measured_us"].to_numpy(np.float64),
                         groups={"by_method": frame["method"].astype(str).to_numpy()})["by_method"]


def one_device_band_line(loaded: Any, frame: pd.DataFrame, by_band: dict[str, Any]) -> str | None:
    """A warning when rows got an interval band that the model calibrated on one held-out device's errors
    (``IntervalCalibration.one_device_band``: a calibration with one ``--holdout-device``, whose unseen, few-row and
    adapted bands all rest on that device; or a model adapted from one): their coverage then says how much these
    devices err like that one, not how well the intervals are calibrated (a NeuSight model held out on the V100
    alone: 8.7% of the T4's rows covered by the unseen band; adapted to 30 T4 rows, 45%)."""
    intervals = getattr(loaded.predictor, "intervals", None)
    if intervals is None or "interval_band" not in frame.columns:
        return None
    band = frame["interval_band"].astype(object)
    rows = frame[band.notna() & (band != "seen")]
    if len(rows) == 0:
        return None
    from hybrid.corrections.intervals import interval_keys

    keys = pd.Series(interval_keys(rows["method"].to_numpy(), rows["family"].to_numpy()), index=rows.index)
    pairs = pd.DataFrame({"key": keys, "band": rows["interval_band"].astype(str)})
    distinct = pairs.drop_duplicates()
    one = distinct[[intervals.one_device_band(k, b) for k, b in zip(distinct["key"], distinct["band"], strict=True)]]
    if len(one) == 0:
        return None
    joined = pairs["key"] + "\x1f" + pairs["band"]
    hit = joined.isin(set(one["key"] + "\x1f" + one["band"])).to_numpy(bool)
    devices = ", ".join(sorted(rows.loc[hit, "device"].astype(str).unique()))
    bands = sorted(set(one["band"]), key=_natural)
    cover = [f"{b} {by_band[b]['coverage_pct']:.1f}%" for b in bands
             if b in by_band and np.isfinite(by_band[b].get("coverage_pct", np.nan))]
    said = f" (covered: {', '.join(cover)})" if cover else ""
    return (f"warning: {int(hit.sum()):,} rows ({devices}) got 80% intervals that {loaded.ref} calibrated on one "
            f"held-out device's errors ({', '.join(bands)} band of {', '.join(sorted(set(one['key'])))}){said}: one "
            "device's errors, not a spread of devices, so their coverage says how much these devices err like that "
            "one; recalibrate (an adapted model: its base) with several devices held out (--holdout-device several "
            "times, or none: up to 8) to calibrate intervals for new GPUs")


def _natural(name: str) -> tuple:
    """Sort key putting "5 rows" before "10 rows" (numbers in a label compare as numbers)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(name)))


def echo_comparison(summaries: dict[str, dict[str, Any]], groups: tuple[str, ...] = ("by_op", "by_device")) -> None:
    """Print error tables for one split: overall and per group, every compared model side by side."""
    models = [m for m in ("model", "base", "roofline") if m in summaries]
    label = {"model": "hybrid", "base": "base", "roofline": "roofline"}
    headers = ["", "rows"] + [f"{label[m]} {s.replace('_pct', '')}%" for m in models for s in ("geomean", "mape")] \
        + [f"{label[models[0]]} median%", f"{label[models[0]]} p90%"]

    def row(name: str, per: dict[str, Any]) -> list[Any]:
        first = per[models[0]]
        cells: list[Any] = [name, first["n_rows"]]
        for m in models:
            cells += [per[m]["geomean_pct"], per[m]["mape_pct"]]
        return cells + [first["median_pct"], first["p90_pct"]]

    rows = [row("all rows", summaries)]
    for g in groups:
        for k in sorted(summaries[models[0]].get(g, {}), key=_natural):
            rows.append(row(f"{g.replace('by_', '')}: {k}", {m: summaries[m][g][k] for m in models}))
    echo_table(rows, headers)


def write_predictions(frame: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write a prediction frame atomically: Parquet for a ``.parquet`` / ``.pq`` name (as canonical tables are
    written; CSV text under that name is unreadable to Parquet readers), else CSV."""
    with atomic_file(path) as tmp:
        if Path(path).suffix.lower() in (".parquet", ".pq"):
            frame.to_parquet(tmp, index=False)
        else:
            frame.to_csv(tmp, index=False)
    return Path(path)


@click.command()
@click.argument("tables", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--model", "-m", "model_ref", required=True, callback=named,
              help="Registered model (NAME, NAME/3, models:/NAME/3) or 'roofline' for the analytical baseline.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with the error figures.")
@click.option("--output", "-o", type=click.Path(), callback=named,
              help="Write per-row predictions (a .csv name: CSV; .parquet: Parquet).")
@click.option("--max-rows", type=int, help="Evaluate on a random sample of at most this many rows.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of --max-rows sampling.")
@click.option("--tracking-uri", envvar="MLFLOW_TRACKING_URI", help="MLflow store (default: local SQLite store).")
def evaluate(tables: tuple[str, ...], model_ref: str, as_json: bool, output: str | None, max_rows: int | None,
             seed: int, tracking_uri: str | None) -> None:
    """Predict every row of measured TABLES (canonical CSV/Parquet or profiler bundle directories) and report
    |predicted - measured| / measured: geomean, mean (MAPE), median and p90, per op family and per device, and
    how many measurements fall inside their 80% prediction interval (``coverage_pct``, overall and per device;
    ``coverage_by_band``: per interval band, seen / unseen / few / adapted-k / sibling / edge;
    ``rows_without_interval``: rows it has no interval for, not counted; ``rows_interval_borrowed``: rows whose
    band was borrowed from another family or model),
    and which model answered how many rows (``by_method``: per-system collective curves, the cross-system
    transfer model, alpha-beta, the kernel models or the roofline)."""
    from hybrid.data.quality import failed_validation
    from hybrid.data.schema import check_table_path
    from hybrid.tracking.evaluation import interval_coverage, prediction_frame, summarize
    from hybrid.tracking.inputs import load_measurements, subsample

    if output:  # before any work, as `predict table`: CSV text was written under any other name (out.txt)
        check_table_path(output)
        refuse_output_among_tables(output, tables)
    with quality_warnings():  # data-quality notes (a table named twice, ...) as `warning:` lines, as calibrate's
        registered = load_registered(model_ref, tracking_uri)
        data = load_measurements(tables, catalog_for_tables(registered))
        table = subsample(data.table, max_rows, seed) if max_rows is not None else data.table
        wrong = failed_validation(table)
        if wrong.any():  # a broken run's times are not a measurement to score against
            if wrong.all():
                raise InvalidInputError(f"every one of the {len(table):,} rows reports wrong results (#wrong > 0)")
            click.echo(f"warning: left out {int(wrong.sum()):,} collective rows whose benchmark reported wrong "
                       "results (#wrong > 0)", err=True)
            table = table.loc[~wrong].reset_index(drop=True)
        loaded = load_model_for(model_ref, tracking_uri, data.catalog, pd.unique(table["device"].astype(str)),
                                loaded=registered)
        predicted = loaded.predictor.predict(table)
    frame = prediction_frame(table, predicted, "all")
    result = summarize(frame, "model")
    overlap = training_overlap(loaded, frame)
    seen, seen_in = overlap if overlap is not None else (None, [])
    if seen is not None:
        result = {**result, "rows_in_training_data": int(seen.sum())}
    result["by_method"] = by_method(frame)
    cov = interval_coverage(frame)
    result["coverage_pct"] = cov["coverage_pct"]
    for dev, per in result["by_device"].items():  # every device has the key (null without intervals: roofline)
        per["coverage_pct"] = cov["coverage_by_device"].get(dev, float("nan"))
    result["coverage_by_band"] = cov["coverage_by_band"]
    no_band = int(frame["predicted_us_low"].isna().sum())
    borrowed = (int((~predicted["interval_calibrated"].to_numpy(bool)).sum()) - no_band
                if "interval_calibrated" in predicted.columns else 0)
    result["rows_without_interval"], result["rows_interval_borrowed"] = no_band, borrowed
    fallbacks = dtype_fallback_notes(table, loaded.predictor.catalog)
    if fallbacks:
        result["dtype_fallbacks"] = fallbacks
    for note in fallbacks:
        click.echo(f"warning: {note}", err=True)
    for key, (value, line) in implausible_notes(table, data.catalog).items():
        result[key] = value
        click.echo(line, err=True)
    if output:
        write_predictions(frame, output)
    if seen is not None and seen.any():
        click.echo(f"warning: {int(seen.sum()):,} of {len(frame):,} rows ({100 * seen.mean():.0f}%) were in the "
                   f"training data of {' and '.join(seen_in)}: their errors are in-sample, not a test "
                   "of the model; evaluate on held-out measurements", err=True)
    line = one_device_band_line(loaded, frame, cov["coverage_by_band"])
    if line:
        click.echo(line, err=True)
    if as_json:
        echo_json(result)
        return
    name = "roofline" if loaded.name == "roofline" else loaded.ref
    click.echo(f"{len(frame):,} rows, model {name}")
    # the roofline alone is labelled so (its columns read "hybrid" as if a calibrated model had answered)
    summaries = {"roofline": result} if loaded.name == "roofline" else {"model": result,
                                                                        "roofline": summarize(frame, "roofline")}
    echo_comparison(summaries)
    per_method = ", ".join(f"{m} {g['n_rows']:,} rows (geomean {g['geomean_pct']:.1f}%)" for m, g in result["by_method"].items())
    click.echo(f"answered by: {per_method}")
    if cov["coverage_by_device"]:
        per = ", ".join(f"{d} {p:.0f}%" for d, p in cov["coverage_by_device"].items())
        click.echo(f"80% interval coverage: {cov['coverage_pct']:.1f}% of rows ({per})")
        if cov["coverage_by_band"]:
            bands = ", ".join(f"{b} {v['coverage_pct']:.0f}% of {v['n_rows']:,}" for b, v in cov["coverage_by_band"].items())
            click.echo(f"  per band (what the model knew of the device): {bands}")
    if (no_band or borrowed) and getattr(loaded.predictor, "intervals", None) is not None:
        click.echo(f"note: {no_band:,} rows have no interval (nothing calibrated for their kind of op: coverage is "
                   f"over the others) and {borrowed:,} an interval not calibrated for their case (borrowed from another "
                   "band, op family or model: its coverage is what this run measures)")
    if output:
        click.echo(f"predictions written to {output}")
