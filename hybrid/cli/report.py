"""``hybrid report``: a self-contained HTML report of a calibration run or registered model."""

from __future__ import annotations

from typing import Any

import click

from hybrid.cli.output import named, quality_warnings
from hybrid.errors import InvalidInputError


@click.command()
@click.option("--model", "-m", "model_ref", callback=named, help="Registered model (NAME, NAME/3, models:/NAME/3): its run.")
@click.option("--run", "run_id", callback=named, help="Calibration run id.")
@click.option("--table", "tables", multiple=True, type=click.Path(exists=True),
              help="Instead of the run's own evaluation, evaluate --model on these measured tables.")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False), callback=named,
              help="HTML file to write.")
@click.option("--tracking-uri", envvar="MLFLOW_TRACKING_URI", help="MLflow store (default: local SQLite store).")
@click.option("--quiet", "-q", is_flag=True, help="No progress line.")
def report(model_ref: str | None, run_id: str | None, tables: tuple[str, ...], output: str,
           tracking_uri: str | None, quiet: bool) -> None:
    """Write an HTML report (plots inlined): predicted vs measured per family, error CDF model vs roofline,
    error vs size and per-device tables, for each evaluation split of the run."""
    from tqdm.auto import tqdm

    from hybrid.reports.html import write_report
    from hybrid.tracking.store import open_store

    if bool(model_ref) == bool(run_id):
        raise InvalidInputError("give exactly one of --model NAME or --run RUN_ID")
    from pathlib import Path

    if Path(output).suffix.lower() not in (".html", ".htm"):  # checked before any work: the report is HTML
        raise InvalidInputError(f"output {output}: the report is an HTML page; use a .html file name")
    from hybrid.atomic import check_creatable

    check_creatable(output)  # before loading the run and drawing its plots (a parent that is a file, no permission)
    store = open_store(tracking_uri)
    # the stages on stderr, as `hybrid calibrate` shows its own (a large run takes tens of seconds)
    bar = tqdm(total=1, desc="report", disable=quiet, leave=False, bar_format="{desc} ...")

    def stage(what: str) -> None:
        bar.set_description_str(f"report: {what}")

    # the bar is cleared on every exit (an error line must not follow a half-drawn stage); data-quality notes (a
    # table named twice, ...) are `warning:` lines, as calibrate and evaluate give them
    with quality_warnings():
        try:
            if tables:
                if not model_ref:
                    raise InvalidInputError("--table needs --model (the model to evaluate)")
                text = _evaluation_page(model_ref, tables, store.uri, stage)
            else:
                text = _run_page(model_ref, run_id, store, stage)
            stage(f"write {output}")
            path = write_report(text, output)
        finally:
            bar.close()
    click.echo(f"report written to {path} ({path.stat().st_size / 1e6:.1f} MB)")


#: The report header's label for each of :func:`hybrid.cli.evaluate.implausible_notes`'s keys.
_IMPLAUSIBLE_LABELS = {"implausible": "implausible GEMMs", "implausible_collectives": "implausible collectives"}


def _evaluation_page(model_ref: str, tables: tuple[str, ...], uri: str, stage) -> str:
    """The report of ``model_ref`` evaluated on measured ``tables`` (as ``hybrid evaluate`` scores them). The
    data-quality and transfer warnings met on the way (a table named twice, a machine unlike the one the model was
    fitted on, a kind of processor it never measured) go in the header too, not only on stderr: the page is what
    is kept and shared."""
    import warnings

    from hybrid.errors import DataQualityWarning, TransferWarning
    from hybrid.reports.html import render_report

    ours = (DataQualityWarning, TransferWarning)
    with warnings.catch_warnings(record=True) as caught:
        for kind in ours:
            warnings.simplefilter("always", kind)
        frame, title, meta = _evaluation(model_ref, tables, uri, stage)
    said = list(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, ours)))
    for i, message in enumerate(said):
        meta["warning" if i == 0 else f"warning {i + 1}"] = message
    for w in caught:  # on to the caller's handling (quality_warnings: warning: lines on stderr)
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    images = _plots(frame, stage)
    stage("render the HTML")
    return render_report(frame, title=title, meta=meta, images=images)


def _evaluation(model_ref: str, tables: tuple[str, ...], uri: str, stage) -> tuple[Any, str, dict[str, Any]]:
    """The prediction frame, title and header of :func:`_evaluation_page`'s report."""
    import pandas as pd

    from hybrid.cli.evaluate import (
        catalog_for_tables,
        dtype_fallback_notes,
        implausible_notes,
        load_model_for,
        load_registered,
        one_device_band_line,
        training_overlap,
    )
    from hybrid.data.quality import failed_validation
    from hybrid.tracking.evaluation import interval_coverage, prediction_frame
    from hybrid.tracking.inputs import load_measurements

    stage(f"load the model {model_ref}")
    registered = load_registered(model_ref, uri)  # first: the tables may name devices only it knows
    stage(f"load {len(tables)} table(s)")
    data = load_measurements(tables, catalog_for_tables(registered))
    table = data.table
    wrong = failed_validation(table)
    if wrong.any():  # as `hybrid evaluate`: a broken run's times are not a measurement to score against
        if wrong.all():
            raise InvalidInputError(f"every one of the {len(table):,} rows reports wrong results (#wrong > 0)")
        click.echo(f"warning: left out {int(wrong.sum()):,} collective rows whose benchmark reported wrong "
                   "results (#wrong > 0)", err=True)
        table = table.loc[~wrong].reset_index(drop=True)
    loaded = load_model_for(model_ref, uri, data.catalog, pd.unique(table["device"].astype(str)), loaded=registered)
    stage(f"predict {len(table):,} rows")
    frame = prediction_frame(table, loaded.predictor.predict(table), "all")
    title = f"hybrid evaluation: {loaded.ref if loaded.version else 'roofline'}"
    meta = {"model": loaded.ref if loaded.version else "roofline", "tables": ", ".join(dict.fromkeys(tables)),
            "rows": f"{len(frame):,}"}
    overlap = training_overlap(loaded, frame)
    if overlap is not None and overlap[0].any():  # in-sample rows are no test of the model: say so, as evaluate does
        seen, seen_in = overlap
        said = (f"{int(seen.sum()):,} of {len(frame):,} rows ({100 * seen.mean():.0f}%) were in the training data "
                f"of {' and '.join(seen_in)}: their errors are in-sample, not a test of the model")
        meta["rows in training data"] = said
        click.echo(f"warning: {said}; evaluate on held-out measurements", err=True)
    fallbacks = dtype_fallback_notes(table, loaded.predictor.catalog)  # as evaluate warns of them
    if fallbacks:
        meta["dtype fallbacks"] = "; ".join(fallbacks)
    for note in fallbacks:
        click.echo(f"warning: {note}", err=True)
    # as evaluate warns of them: GEMMs over the datasheet peak, collectives far faster than their fabric (scored
    # as measured, but every calibration leaves them out)
    for key, (_, said) in implausible_notes(table, data.catalog).items():
        meta[_IMPLAUSIBLE_LABELS[key]] = said.removeprefix("warning: ")
        click.echo(said, err=True)
    line = one_device_band_line(loaded, frame, interval_coverage(frame)["coverage_by_band"])
    if line:  # as evaluate says it: intervals resting on one held-out device's errors
        meta["intervals"] = line.removeprefix("warning: ")
        click.echo(line, err=True)
    if not loaded.version:
        # the roofline baseline scored: its predictions are the roofline's, shown once as what they are, not again
        # under a "hybrid (calibrated)" heading beside identical roofline figures (every cell marked worse)
        frame["predicted_us"] = float("nan")
    return frame, title, meta


def _run_page(model_ref: str | None, run_id: str | None, store, stage) -> str:
    """The report of a calibration run (``run_id``, or the run of the registered ``model_ref``)."""
    from hybrid.reports.html import envelope_rows, render_report
    from hybrid.tracking.calibrate import report_meta
    from hybrid.tracking.runs import read_run, run_of_model

    stage(f"load the run of {model_ref or run_id}")
    rid = run_id or run_of_model(model_ref or "", store=store)
    rec = read_run(rid, store=store)
    s = rec.summary
    title = f"hybrid calibration: {s.get('name')}" + (f" v{s['version']}" if s.get("version") else "")
    images = _plots(rec.predictions, stage, drawn=rec.images)
    stage("render the HTML")
    return render_report(rec.predictions, title=title, meta=report_meta(s), summaries=s.get("errors"),
                         images=images, envelope=envelope_rows(s.get("predictor") or {}))


def _plots(predictions, stage, drawn: dict[str, dict[str, bytes]] | None = None) -> dict[str, dict[str, bytes]]:
    """The report's figures per plotted split (what :func:`~hybrid.reports.html.render_report` would draw), drawn
    here so that each split's plotting shows as a stage. ``drawn``: figures a calibration run logged of the same
    predictions (``RunRecord.images``), used where a split has every figure (a run's report took 14-22 s, most of
    it redrawing them)."""
    import pandas as pd

    from hybrid.reports.html import plotted_splits
    from hybrid.reports.plots import STANDARD_FIGURES, figure_png, standard_figures

    with_figures = plotted_splits([str(s) for s in pd.unique(predictions["split"])])
    images: dict[str, dict[str, bytes]] = {}
    for split, sub in predictions.groupby("split", sort=False):
        if str(split) not in with_figures:
            continue
        logged = (drawn or {}).get(str(split), {})
        if set(STANDARD_FIGURES) <= set(logged):  # the run's own figures of these rows
            images[str(split)] = {stem: logged[stem] for stem in STANDARD_FIGURES}
            continue
        stage(f"plot split {split} ({len(sub):,} rows)")
        images[str(split)] = {stem: figure_png(fig) for stem, fig in standard_figures(sub, title=str(split)).items()}
    return images
