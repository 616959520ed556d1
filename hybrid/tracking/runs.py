"""Reading back what a calibration run recorded: its summary and per-row predictions (for reports)."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from hybrid.errors import ModelNotFoundError
from hybrid.tracking.registry import resolve_version
from hybrid.tracking.store import Store, open_store, quiet_mlflow, retry


@dataclass
class RunRecord:
    """A finished calibration run: id, summary JSON and the concatenated prediction frames of its splits."""

    run_id: str
    summary: dict[str, Any]
    predictions: pd.DataFrame
    metrics: dict[str, float]
    #: the figures the run drew of its splits (``plots/{split}_{stem}.png``), ``{split: {stem: PNG bytes}}``; empty
    #: for a run that logged none
    images: dict[str, dict[str, bytes]] = field(default_factory=dict)


def read_run(run_id: str, tracking_uri: str | None = None, store: Store | None = None) -> RunRecord:
    """Fetch a calibration run's ``summary.json`` and ``predictions/*.csv``."""
    store = store or open_store(tracking_uri)
    client = store.client(create=False)
    try:
        run = retry(lambda: client.get_run(run_id))
    except Exception as exc:
        if "RESOURCE_DOES_NOT_EXIST" in str(exc) or "not found" in str(exc).lower():
            raise ModelNotFoundError(f"no run {run_id!r} in {store.uri}") from None
        raise
    tmp = Path(tempfile.mkdtemp(prefix="hybrid-runread-"))
    try:
        try:
            with quiet_mlflow():
                summary_path = retry(lambda: client.download_artifacts(run_id, "summary.json", str(tmp)))
                pred_dir = Path(retry(lambda: client.download_artifacts(run_id, "predictions", str(tmp))))
        except Exception as exc:
            raise ModelNotFoundError(f"run {run_id} is not a finished hybrid calibration "
                                     f"(no summary.json / predictions: {str(exc).splitlines()[0]})") from None
        summary = json.loads(Path(summary_path).read_text(encoding="utf-8"))
        frames = [pd.read_csv(p, low_memory=False) for p in sorted(pred_dir.glob("*.csv"))]  # one dtype per column
        images = _run_images(client, run_id, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not frames:
        raise ModelNotFoundError(f"run {run_id} has no prediction files")
    order = {s: i for i, s in enumerate(summary.get("errors", {}))}
    pred = pd.concat(frames, ignore_index=True)
    pred = pred.iloc[pred["split"].map(lambda s: order.get(s, len(order))).argsort(kind="stable")]
    return RunRecord(run_id, summary, pred.reset_index(drop=True), dict(run.data.metrics), images)


def _run_images(client: Any, run_id: str, tmp: Path) -> dict[str, dict[str, bytes]]:
    """The run's logged figures, ``{split: {stem: PNG bytes}}`` (file names ``{split}_{stem}.png``, stems of
    :data:`hybrid.reports.plots.STANDARD_FIGURES`); empty when it has none or they cannot be read."""
    from hybrid.reports.plots import STANDARD_FIGURES

    try:
        with quiet_mlflow():
            plot_dir = Path(retry(lambda: client.download_artifacts(run_id, "plots", str(tmp))))
    except Exception:  # a run that logged no plots: the report draws them
        return {}
    out: dict[str, dict[str, bytes]] = {}
    for png in sorted(plot_dir.glob("*.png")):
        stem = next((k for k in STANDARD_FIGURES if png.stem.endswith(f"_{k}")), None)
        if stem is not None:
            out.setdefault(png.stem[: -len(stem) - 1], {})[stem] = png.read_bytes()
    return out


def run_of_model(ref: str, tracking_uri: str | None = None, store: Store | None = None) -> str:
    """The run that produced a registered model version."""
    store = store or open_store(tracking_uri)
    mv = resolve_version(store.client(create=False), ref)
    if not mv.run_id:
        raise ModelNotFoundError(f"models:/{mv.name}/{mv.version} is not linked to a run")
    return str(mv.run_id)
