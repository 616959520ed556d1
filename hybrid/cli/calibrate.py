"""``hybrid calibrate``: fit corrections to measurements (or adapt a registered model to a new device), evaluate
on held-out data, track the run in MLflow and register the model."""

from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource

from hybrid.cli.evaluate import echo_comparison
from hybrid.cli.output import echo_json, named, quality_warnings
from hybrid.errors import InvalidInputError
from hybrid.tracking.store import DEFAULT_EXPERIMENT, redact_uri

#: ``--strategy`` choices: :data:`hybrid.corrections.adapt.STRATEGIES` (listed here so that ``--help`` does not
#: import the numerical stack; a test keeps the two equal)
ADAPT_STRATEGIES = ("auto", "scale", "boost", "residual", "shift", "scale-trees")


def sparse_devices(result: Any) -> dict[str, list[str]]:
    """Per correction, the training devices the fit's device floor up-weighted (``HybridPredictor.devices_sparse``)."""
    predictor = result.summary.get("predictor", {})
    return dict(predictor.get("devices_sparse", {})) if isinstance(predictor, dict) else {}


def sibling_devices(result: Any) -> list[str]:
    """Devices of the leave-one-device-out split held out while their fit had another variant of their die (the
    rows that calibrate the sibling interval band)."""
    frame = getattr(result, "predictions", None)
    if frame is None or "sibling" not in getattr(frame, "columns", ()):
        return []
    rows = frame[(frame["split"] == "lodo") & frame["sibling"].astype("boolean").fillna(False).to_numpy(dtype=bool)]
    return sorted(rows["device"].astype(str).unique())


def sibling_line(siblings: list[str]) -> str | None:
    """What ``hybrid calibrate`` says about the held-out devices that had another variant of their die in their
    fit: their rows calibrate the sibling band, or, fewer than ``MIN_SIBLING_DEVICES`` of them, do not (such GPUs
    then get the band halfway between the seen and unseen ones, flagged not calibrated)."""
    from hybrid.corrections.intervals import MIN_SIBLING_DEVICES

    if not siblings:
        return None
    if len(siblings) >= MIN_SIBLING_DEVICES:
        return ("held out beside another variant of their die (their rows calibrate the sibling band): "
                + ", ".join(siblings))
    return ("held out beside another variant of their die: " + ", ".join(siblings)
            + f" (fewer than {MIN_SIBLING_DEVICES}: no sibling band is calibrated; a GPU whose die this model measured "
            "in another variant gets the band halfway between the seen and unseen ones, flagged not calibrated)")


#: Fewest devices held out by the leave-one-device-out split for the unseen interval band to be more than one
#: GPU's errors (below it, ``hybrid calibrate`` says so).
MIN_UNSEEN_DEVICES = 2


def lodo_held_out(result: Any) -> list[str]:
    """The devices the run's leave-one-device-out split held out (whose residuals calibrate the unseen band)."""
    frame = getattr(result, "predictions", None)
    if frame is None or "split" not in getattr(frame, "columns", ()):
        return []
    return sorted(frame.loc[frame["split"] == "lodo", "device"].astype(str).unique())


def unseen_line(held_out: list[str]) -> str | None:
    """A warning when the unseen interval band rests on fewer than :data:`MIN_UNSEEN_DEVICES` held-out devices: the
    80% intervals of GPUs the model never saw are then one GPU's errors, which a new GPU's need not resemble (a
    NeuSight model held out on the T4 alone covered 3% of an H100's rows)."""
    if not held_out or len(held_out) >= MIN_UNSEEN_DEVICES:
        return None
    return (f"warning: the 80% intervals of devices this model never measured are calibrated on one held-out device "
            f"({', '.join(held_out)}): one GPU's errors, not a spread of GPUs, so their coverage on another new GPU "
            "is unknown; hold out more devices (--holdout-device several times, or leave it out: up to 8)")


def sibling_unseen_line(held_out: list[str], siblings: list[str]) -> str | None:
    """A warning when every held-out device had another variant of its die in its fit: the unseen interval band is
    then calibrated on those siblings' errors (``IntervalCalibration.from_residuals`` takes them when no held-out
    device lacked one), narrower than a chip never measured needs (the quickstart model held out on the H100 and
    H200 profiles alone covered 33% of DeepBench's never-measured GPUs' rows)."""
    if not held_out or set(held_out) - set(siblings):
        return None
    return ("warning: every held-out device had another variant of its die in its fit "
            f"({', '.join(held_out)}), so the 80% interval of GPUs never measured is calibrated on these siblings' "
            "errors, narrower than a new chip's; hold out a GPU whose die no other device of the data shares as well "
            "(--holdout-device)")


def print_result(result: Any) -> None:
    """Human-readable summary of a :class:`~hybrid.tracking.calibrate.CalibrationResult`."""
    from hybrid.tracking.store import describe_store, open_store

    click.echo(f"run {result.run_id}" + (f"  ->  registered {result.model_ref}" if result.version else ""))
    fitted = ", ".join(result.summary.get("corrections", {})) or "none (too few rows: roofline only)"
    click.echo(f"corrections fitted: {fitted}")
    if line := unfitted_curves_line(result.predictor):
        click.echo(line, err=True)
    sparse = sparse_devices(result)
    if sparse:
        click.echo("few-row devices (each weighs as if it had the correction's device floor of rows; their intervals "
                   "use the few-row band of the `few` split, else the unseen band): " + "; ".join(f"{k}: {', '.join(v)}" for k, v in sparse.items()))
    for split, summ in result.summaries.items():
        click.echo("")
        click.echo(f"[{split}] " + {"random": "random hold-out rows",
                                    "lodo": "leave-one-device-out (device unseen in fitting)",
                                    "few": "held-out devices that kept a few-row device's number of rows in fitting",
                                    "adapted": "held-out devices adapted with 5-50 of their rows (strategy auto), "
                                               "their other rows",
                                    "train": "training rows (in-sample)",
                                    "adapt": "new-device rows not used for adaptation"}.get(split, split))
        echo_comparison(summ, groups=("by_op",) if split == "train" else
                        ("by_shots", "by_op", "by_device") if split == "adapted" else ("by_op", "by_device"))
        if split == "lodo":
            line = sibling_line(sibling_devices(result))
            if line:
                click.echo(line)
            for line in (unseen_line(lodo_held_out(result)),
                         sibling_unseen_line(lodo_held_out(result), sibling_devices(result))):
                if line:
                    click.echo(line, err=True)
    click.echo("")
    where = describe_store(open_store(result.tracking_uri))
    click.echo(f"tracking store: {where['tracking_uri']}")
    if "ui_command" in where:
        click.echo(f"browse runs:    {where['ui_command']}")
    click.echo(f"report command: hybrid report --run {result.run_id} -o report.html")


def unfitted_curves_line(predictor: Any, shown: int = 5) -> str | None:
    """What ``hybrid calibrate`` says (stderr) of the measured collective layouts that got no curve (a truncated log
    left too few message sizes): they were only in the run's MLflow params, and a user learnt of them from
    ``predict collective``'s ``extrapolated`` text on one layout at a time."""
    from hybrid.corrections.collective_sigmoid import CollectiveSigmoid

    missing: dict[tuple[str, str, int, int], str] = {}
    for c in getattr(predictor, "corrections", ()):
        if isinstance(c, CollectiveSigmoid) and c.fitted:
            missing.update(c.unfitted_layouts())
    if not missing:
        return None
    items = sorted(missing.items())
    listed = "; ".join(f"{op} on {r} ranks / {n} node(s) of {s}: {why}" for (s, op, r, n), why in items[:shown])
    more = f"; {len(items) - shown} more in the run's params (collective-sigmoid failures)" if len(items) > shown else ""
    return (f"warning: {len(items)} measured collective layout(s) got no curve and are priced across layouts: "
            f"{listed}{more}")


def carries_collective_transfer(predictor: Any) -> bool:
    """Whether ``predictor`` prices collectives of systems never measured with the cross-system transfer model:
    the new calibration's ``--collective-transfer`` setting, or an adapted model's base's (which it keeps). The
    config's flag is False for every ``--base`` run, and ``--json`` reported that even for a base fitted with the
    transfer model on, whose adapted model still answers with it. False where no collective was fitted (a table
    without collectives): such a model prices every collective with the alpha-beta estimate, and the setting is
    not saved with it, so its adapted models said false where the base had said true."""
    from hybrid.corrections.collective_sigmoid import CollectiveSigmoid

    return any(isinstance(c, CollectiveSigmoid) and c.fitted and c.use_transfer
               for c in getattr(predictor, "corrections", ()))


@click.command()
@click.argument("tables", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--name", required=True, help="Registered model name (a new version is added per run).")
@click.option("--base", callback=named, help="Adapt this registered model (NAME, NAME/3) to the new measurements (few-shot). "
                            "With the training tables at hand, calibrating on them plus the new rows (no --base; a "
                            "device with under 100 rows weighs as if it had 100) is the alternative: more accurate "
                            "on the public-GPU benchmark, not on every GPU (docs/corrections.md).")
@click.option("--holdout-device", multiple=True,
              help="Device(s) the leave-one-device-out split holds out (default: the 8 with the most kernel rows, "
                   "then up to 8 more with the most collective rows; only devices whose kind, GPU or CPU, keeps "
                   "another in the fit).")
@click.option("--exclude-device", multiple=True, help="Drop these devices' rows entirely.")
@click.option("--no-lodo", is_flag=True, help="Skip the leave-one-device-out split. Not needed with --base: an "
                                                "adaptation has no such split (it is scored on half its new rows, "
                                                "the adapt split).")
@click.option("--test-fraction", type=float, default=0.2, show_default=True, help="Random hold-out share.")
@click.option("--max-rows", type=int, help="Calibrate on a sample of at most this many rows in all, drawn evenly "
                                           "from every (device, op) group so that small groups survive.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--collective-transfer/--no-collective-transfer", default=None,
              help="Collectives of systems never measured get the cross-system transfer model (method "
                   "collective-transfer; the default for a new calibration) or the alpha-beta estimate "
                   "(--no-collective-transfer). Not with --base (an adapted model keeps its base's).")
@click.option("--sibling-blend/--no-sibling-blend", default=None,
              help="A GPU the calibration never measured, whose die it measured in another product of its power "
                   "class (A100 PCIe 40 / 80 GB, V100 PCIe / SXM2, H100 / H200), gets the geometric mean of the GEMM "
                   "trees and that product's efficiency on its own roofline (the default for a new calibration; "
                   "--no-sibling-blend: the trees alone; docs/corrections.md). Not with --base (an adapted model "
                   "keeps its base's).")
@click.option("--strategy", "adapt_strategy", default="auto", show_default=True,
              type=click.Choice(ADAPT_STRATEGIES),
              help="With --base: the few-shot adaptation (auto: per device and correction a scale, an additive "
                   "per-op time or both, chosen by cross-validation on the new rows, plus trees from 20 rows; "
                   "see docs/corrections.md).")
@click.option("--experiment", default=DEFAULT_EXPERIMENT, show_default=True, help="MLflow experiment.")
@click.option("--tracking-uri", envvar="MLFLOW_TRACKING_URI", help="MLflow store (default: local SQLite store).")
@click.option("--json", "as_json", is_flag=True, help="Print run id, version and error summaries as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
def calibrate(tables: tuple[str, ...], name: str, base: str | None, holdout_device: tuple[str, ...],
              exclude_device: tuple[str, ...], no_lodo: bool, test_fraction: float, max_rows: int | None,
              seed: int, collective_transfer: bool | None, sibling_blend: bool | None, adapt_strategy: str,
              experiment: str, tracking_uri: str | None, as_json: bool, quiet: bool) -> None:
    """Calibrate on measured TABLES (canonical CSV/Parquet, or profiler bundle directories whose catalog.toml
    is merged), evaluate on held-out rows (random split + leave-one-device-out), record the run in MLflow and
    register the predictor as NAME. With --base, adapt an existing model to a new device from a few rows."""
    from hybrid.cli.evaluate import catalog_for_tables, load_registered
    from hybrid.tracking.calibrate import CalibrationConfig
    from hybrid.tracking.calibrate import calibrate as run_calibration
    from hybrid.tracking.inputs import load_measurements, subsample

    if base and click.get_current_context().get_parameter_source("test_fraction") != ParameterSource.DEFAULT:
        # the adapt split holds out half of the new rows whatever the share asked for: it was taken and ignored
        raise InvalidInputError("--test-fraction is the random hold-out of a new calibration; an adaptation (--base) "
                               "is scored on half of its new rows held out (the adapt split)")
    config = CalibrationConfig(name=name, base=base, holdout_devices=holdout_device, exclude_devices=exclude_device,
                               seed=seed, test_fraction=test_fraction, lodo=not no_lodo, experiment=experiment,
                               collective_transfer=collective_transfer, adapt_strategy=adapt_strategy,
                               sibling_blend=sibling_blend)
    with quality_warnings():
        # an adaptation's rows may name a device only its base knows (a profiled machine it was fitted on)
        known = catalog_for_tables(load_registered(base, tracking_uri)) if base else None
        data = load_measurements(tables, known)
        if max_rows is not None:
            data.table = subsample(data.table, max_rows, seed)
        result = run_calibration(data, config, tracking_uri=tracking_uri, progress=not quiet)
    if as_json:
        echo_json({"run_id": result.run_id, "name": result.name, "version": result.version,
                   "model": result.model_ref, "tracking_uri": redact_uri(result.tracking_uri),
                   "corrections": list(result.summary.get("corrections", {})),
                   "collective_transfer": carries_collective_transfer(result.predictor), "errors": result.summaries,
                   "devices_sparse": sparse_devices(result), "lodo_held_out": lodo_held_out(result)})
        held = lodo_held_out(result)  # on stderr, as the text form gives them: JSON stays on stdout
        for line in (unseen_line(held), sibling_unseen_line(held, sibling_devices(result)),
                     unfitted_curves_line(result.predictor)):
            if line:
                click.echo(line, err=True)
        return
    print_result(result)
