"""``hybrid models``: the registered models of a tracking store and their versions."""

from __future__ import annotations

import datetime as _dt

import click

from hybrid.cli.output import echo_json, echo_table


def _when(ms: object) -> str:
    """An MLflow creation timestamp (ms since the epoch) as UTC ``YYYY-MM-DD HH:MM``."""
    try:
        return _dt.datetime.fromtimestamp(int(ms) / 1000, tz=_dt.UTC).strftime("%Y-%m-%d %H:%M")  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return ""


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print every model with all its versions as JSON.")
@click.option("--tracking-uri", envvar="MLFLOW_TRACKING_URI", help="MLflow store (default: local SQLite store).")
def models(as_json: bool, tracking_uri: str | None) -> None:
    """List the registered models (what --model NAME, NAME/V accepts): latest version, its run, when it was
    registered, its run's status (FINISHED for a calibration that completed, DELETED for a run deleted in MLflow;
    a version whose run did not finish or was deleted is also a warning line), from what data (sha256 prefix), and its base model where it was adapted (--base)."""
    from hybrid.tracking.registry import incomplete_note, list_models
    from hybrid.tracking.store import open_store, redact_uri

    uri = redact_uri(open_store(tracking_uri).uri)  # shown, not opened: a password in it stays out of sight
    found = list_models(tracking_uri)
    if as_json:
        echo_json({"tracking_uri": uri, "models": found})
        return
    if not found:
        click.echo(f"no models are registered in {uri} (run `hybrid calibrate` or `hybrid quickstart`)")
        return
    rows, notes = [], []
    for m in sorted(found, key=lambda m: m["name"]):
        last = m["versions"][-1] if m["versions"] else {}
        tags = last.get("tags", {})
        rows.append([m["name"], last.get("version", ""), len(m["versions"]), _when(last.get("created")),
                     last.get("run_id", ""), last.get("run_status") or "-", str(tags.get("data_sha256", ""))[:12],
                     tags.get("base", "") or "-"])
        notes += [n for v in m["versions"] if (n := incomplete_note(f"models:/{m['name']}/{v['version']}",
                                                                     v.get("run_id"), v.get("run_status")))]
    echo_table(rows, ["name", "latest", "versions", "registered (UTC)", "run id", "run", "data sha256", "base"])
    click.echo(f"tracking store: {uri}")
    for note in notes:  # a version a failed calibration left registered is not listed as if it were usable
        click.echo(f"warning: {note}", err=True)
