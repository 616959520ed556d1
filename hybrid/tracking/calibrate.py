"""One calibration run: fit every correction the data supports, evaluate on held-out data, record everything
in MLflow and register the calibrated predictor.

Evaluation splits (each reports the calibrated model beside the roofline-only baseline):

- ``random``: a stratified random hold-out (``test_fraction`` of every device/op group; collective rows held out by
  measurement point, every row of one message size at one layout of a system together: in-place / out-of-place
  twins and repeated logs never on both sides, :data:`~hybrid.corrections.intervals.COLLECTIVE_SPLIT_GROUPS`, logged
  as the param ``split.collective_groups``), model fitted on the rest;
- ``lodo``: leave-one-device-out where the data has several devices (or the devices named in
  ``holdout_devices``): each device's rows are predicted by a model fitted without that device (column
  ``sibling``: the rows whose die that model fitted in another variant, which calibrate the sibling band);
- ``adapted``: each ``lodo`` device's model adapted (``HybridPredictor.adapt``, strategy ``auto``) with 5, 10, 20
  and 50 of its rows per correction (column ``shots``) and scored on its other rows
  (:meth:`HybridPredictor.adaptation_holdouts <hybrid.corrections.predictor.HybridPredictor.adaptation_holdouts>`);
  these residuals calibrate the intervals of adapted devices;
- ``few``: only when the final fit up-weighted few-row devices (a new GPU's handful of rows beside the public
  tables): each ``lodo`` device keeps that many of its rows in the fit and the rest are predicted
  (:meth:`HybridPredictor.few_row_splits <hybrid.corrections.predictor.HybridPredictor.few_row_splits>`); these
  residuals calibrate the intervals of few-row devices;
- ``edge``: the edge sizes of measured collective layouts held out (two folds of layouts, the collective corrections
  alone refitted; :meth:`HybridPredictor.edge_splits <hybrid.corrections.predictor.HybridPredictor.edge_splits>`),
  scored where they lie more than 4x beyond the sizes left to their curve; these residuals calibrate the ``edge``
  band of collectives far beyond their curve's sizes;
- ``train``: the final model (fitted on all rows) on its own training rows.

With ``base`` (a registered model), the run instead adapts that model to new measurements (usually a new
device, 5..50 rows) with ``HybridPredictor.adapt``; the ``adapt`` split holds out part of the new rows and
compares the adapted model, the unadapted base and roofline on them.

The run records: parameters (name, seed, splits, correction hyper-parameters from ``describe()``), the input
data digest (sha256 of the canonical table) and rows per op/device, metrics named
``<split>.<model>.<statistic>``, ``<split>.<model>.op.<family>.<statistic>`` and
``<split>.<model>.device.<device>.<statistic>`` (model = ``model``, ``roofline`` or ``base``), and artifacts
``summary.json``, ``predictions/<split>.csv``, ``plots/<split>_*.png``, ``report.html`` and the pyfunc model
``model/`` (see :mod:`hybrid.tracking.registry`).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from hybrid import __version__
from hybrid.corrections.intervals import (  # noqa: F401  (stratified_split: re-exported)
    COLLECTIVE_SPLIT_GROUPS,
    MIN_ROWS_FOR_SPLIT,
    IntervalCalibration,
    default_lodo_devices,
    stratified_split,
)
from hybrid.errors import InvalidInputError, RunStateWarning, SchemaError, UnknownDeviceError
from hybrid.hardware.catalog import Catalog
from hybrid.tracking.evaluation import prediction_frame, split_summaries
from hybrid.tracking.inputs import Measurements, merge_catalog, table_digest
from hybrid.tracking.registry import (
    MODEL_ARTIFACT_PATH,
    download_model,
    drop_if_empty,
    parse_model_ref,
    register_version,
    resolve_version,
    save_pyfunc,
)
from hybrid.tracking.store import (
    DEFAULT_EXPERIMENT,
    RETRY_ATTEMPTS,
    Store,
    ensure_experiment,
    is_lost_insert_race,
    is_transient,
    open_store,
    quiet_mlflow,
    redact_uri,
    retry,
    store_lock,
)

#: Fewest rows for a random hold-out split (below this every row is needed for fitting).
#: Fewest new-device rows for an adaptation hold-out split.
MIN_ROWS_FOR_ADAPT_SPLIT = 6
#: MLflow limits per log_batch call.
_BATCH_METRICS, _BATCH_PARAMS = 1000, 100
_PARAM_MAX_CHARS = 500


@dataclass
class CalibrationConfig:
    """What a calibration run does. ``holdout_devices`` names the devices of the leave-one-device-out split
    (empty: every device when there are several); ``exclude_devices`` drops devices from the data entirely
    (e.g. to adapt to them later with ``base``)."""

    name: str
    base: str | None = None
    holdout_devices: tuple[str, ...] = ()
    exclude_devices: tuple[str, ...] = ()
    seed: int = 0
    test_fraction: float = 0.2
    lodo: bool = True
    max_lodo_devices: int = 8
    experiment: str = DEFAULT_EXPERIMENT
    register: bool = True
    #: collectives of systems never measured get the cross-system transfer model (``collective-transfer``)
    #: instead of the alpha-beta estimate; every fit of the run (hold-outs included) uses it. None (default): on
    #: for a new calibration (it beats alpha-beta on leave-one-system-out, experiments/collectives_accuracy),
    #: off for an adaptation (``base``: the base's collective model is kept); resolved in ``__post_init__``
    collective_transfer: bool | None = None
    #: few-shot strategy of an adaptation (``base``): one of :data:`hybrid.corrections.adapt.STRATEGIES`
    #: (``auto``, the default: scale, per-op shift or both per correction, chosen by cross-validation on the new
    #: rows; see experiments/few_shot and experiments/h100_transfer)
    adapt_strategy: str = "auto"
    #: the GEMM model's sibling rule (``HybridPredictor(sibling_blend=...)``): a GPU never measured whose die was, in
    #: another product of its power class, is priced from that product too; every fit of the run uses it. None
    #: (default): on for a new calibration, the base's setting for an adaptation; resolved in ``__post_init__``
    sibling_blend: bool | None = None

    def __post_init__(self) -> None:
        if not self.name or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]*", self.name):
            raise InvalidInputError(f"bad model name {self.name!r}: use letters, digits, '-', '_' and '.'")
        if self.name == "roofline":
            raise InvalidInputError("'roofline' is reserved for the analytical baseline")
        if not isinstance(self.experiment, str) or not self.experiment.strip():
            # MLflow refuses '' only when the run is created (after the tables are read) and takes ' ' as a name
            raise InvalidInputError(f"experiment name must not be empty, got {self.experiment!r}")
        if not 0 < self.test_fraction < 1:
            raise InvalidInputError(f"test fraction must be in (0, 1), got {self.test_fraction}")
        if self.holdout_devices and not self.lodo:
            # the holdout list won: the leave-one-device-out split (and its adapted band) ran anyway, minutes on a
            # large table, for a user who asked to skip it
            raise InvalidInputError("holdout devices choose the leave-one-device-out folds, which lodo=False "
                                    "(--no-lodo) skips: give one or the other")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            # numpy's generators take only non-negative seeds: refused here, before a run is created
            raise InvalidInputError(f"seed must be a non-negative integer, got {self.seed!r}")
        if self.base:
            parse_model_ref(self.base)
            if self.holdout_devices:
                # an adaptation has no leave-one-device-out folds (its score is the adapt split: half the new rows
                # held out), so the devices were accepted and nothing was held out
                raise InvalidInputError("holdout devices choose the leave-one-device-out folds of a new calibration; "
                                        "an adaptation (base, --base) has none: it is scored on half of its new "
                                        "rows held out (the adapt split)")
            if self.collective_transfer is not None:
                raise InvalidInputError("collective_transfer applies to a new calibration; an adapted model (base) "
                                        "keeps the collective model of its base")
            if self.sibling_blend is not None:
                raise InvalidInputError("sibling_blend applies to a new calibration; an adapted model (base) "
                                        "keeps the GEMM model of its base")
        if self.collective_transfer is None:
            self.collective_transfer = not self.base
        if self.sibling_blend is None and not self.base:
            self.sibling_blend = True
        from hybrid.corrections.adapt import STRATEGIES

        if self.adapt_strategy not in STRATEGIES:
            raise InvalidInputError(f"unknown adaptation strategy {self.adapt_strategy!r}; known: "
                                    f"{', '.join(STRATEGIES)}")
        if self.adapt_strategy != "auto" and not self.base:
            raise InvalidInputError("an adaptation strategy applies to adapting a registered model (base)")


@dataclass
class CalibrationResult:
    """What a run produced: ids, the registered version, per-row predictions and error summaries."""

    run_id: str
    experiment_id: str
    name: str
    version: int | None
    tracking_uri: str
    predictor: Any
    predictions: pd.DataFrame
    summaries: dict[str, dict[str, dict[str, Any]]]
    summary: dict[str, Any] = field(default_factory=dict)
    #: the run's self-contained HTML report (also logged as ``report.html``)
    report_html: str = ""

    @property
    def model_ref(self) -> str | None:
        return f"models:/{self.name}/{self.version}" if self.version is not None else None


# ------------------------------------------------------------------------------------------------- splits
def lodo_devices(table: pd.DataFrame, config: CalibrationConfig, catalog: Catalog) -> list[str]:
    """Devices the leave-one-device-out split holds out, one at a time."""
    counts = table["device"].astype(str).value_counts()
    if config.holdout_devices:
        devs = [catalog.resolve_device(d) for d in config.holdout_devices]
        missing = [d for d in devs if d not in counts.index]
        if missing:
            raise InvalidInputError(f"holdout device(s) {', '.join(map(str, missing))} have no rows; "
                                    f"devices in the data: {', '.join(counts.index)}")
        if set(devs) >= set(counts.index):
            raise InvalidInputError("holding out every device leaves no rows to fit on")
        return [str(d) for d in devs]
    if not config.lodo:
        return []
    # by default only devices whose kind (GPU / CPU) keeps another device in the fit; explicit
    # --holdout-device choices above are honoured as given
    from hybrid.ops.families import family_array

    return default_lodo_devices(table["device"], {d: catalog.device(d).kind for d in counts.index},
                                config.max_lodo_devices,
                                family_array(table["op"]) == "collective" if "op" in table.columns else None)


# ------------------------------------------------------------------------------------------------- the run
def calibrate(
    data: Measurements | pd.DataFrame,
    config: CalibrationConfig,
    *,
    tracking_uri: str | None = None,
    catalog: Catalog | None = None,
    progress: bool = False,
) -> CalibrationResult:
    """Run one calibration (see the module doc) and return its result. ``data`` is a validated canonical
    table or :class:`~hybrid.tracking.inputs.Measurements` (whose catalog includes bundle devices)."""
    from hybrid.corrections.predictor import HybridPredictor

    if isinstance(data, pd.DataFrame):
        from hybrid.hardware.catalog import default_catalog

        data = Measurements(data.reset_index(drop=True), catalog or default_catalog(), ["<table>"])
    table, cat = data.table, data.catalog
    if len(table) == 0:
        raise InvalidInputError("no measured rows to calibrate on")
    if "time_us" not in table.columns or table["time_us"].isna().any():
        raise InvalidInputError("every row needs a measured time_us to calibrate on")
    if config.exclude_devices:
        drop = {cat.resolve_device(d) for d in config.exclude_devices}
        present = set(table["device"].astype(str))
        # a name that resolves to another variant than the data's (V100 is the catalog's V100-SXM2-16GB, NeuSight's
        # is V100-PCIE-32GB) excluded nothing, and the "unseen" device stayed in the fit without a word
        missing = [f"{d} ({key})" if str(key) != d else d for d in config.exclude_devices
                   if str(key := cat.resolve_device(d)) not in present]
        if missing:
            raise InvalidInputError(f"exclude device(s) {', '.join(missing)} have no rows, so nothing would be "
                                    f"excluded; devices in the data: {', '.join(sorted(present))}")
        table = table[~table["device"].isin(drop)].reset_index(drop=True)
        if len(table) == 0:
            raise InvalidInputError(f"excluding {', '.join(sorted(map(str, drop)))} leaves no rows")
    dropped: list[str] = []  # what was left out of the fit and every score, for the run's summary and report
    table, left_out = _drop_implausible(table, cat, dropped)

    with _sigterm_interrupts() as interrupted:  # a SIGTERM ends the run as KILLED, not RUNNING forever
        store = open_store(tracking_uri)
        client = store.client()
        with store_lock(store):
            exp_id = ensure_experiment(client, store, config.experiment)
            run = retry(lambda: client.create_run(exp_id, run_name=f"calibrate-{config.name}", tags={
                "hybrid.model_name": config.name, "hybrid.base": config.base or "", "hybrid.version": __version__,
                "mlflow.source.name": "hybrid calibrate", "mlflow.source.type": "LOCAL"}))
        run_id = run.info.run_id
        t0 = time.time()
        registered: list[int] = []  # the version _publish registered, if it got that far before a failure
        created: list[str] = []  # the registered model's name, where _publish created it (a new name)
        try:
            if left_out:
                retry(lambda: client.set_tag(run_id, "hybrid.left_out_implausible", left_out[:4000]))
            if config.base:
                predictor, frames, base_info = _adapt_run(client, store, table, cat, config, progress)
                # the version the reference resolved to (`--base gpus` is whatever is latest; an alias moves), and
                # its run: the tag held the reference as typed
                resolved = f"{base_info['name']}/{base_info['version']}"
                retry(lambda: client.set_tag(run_id, "hybrid.base", resolved))
                retry(lambda: client.set_tag(run_id, "hybrid.base_run_id", str(base_info["run_id"] or "")))
            else:
                predictor, frames = _fit_run(HybridPredictor, table, cat, config, progress)
                base_info = None
            interrupted()  # a SIGTERM whose interrupt a finaliser swallowed during the fits
            predictions = pd.concat(frames, ignore_index=True)
            summaries = split_summaries(predictions)
            publishing = tqdm(total=1, desc="record the run and register the model", unit="step",
                              disable=not progress, leave=False, bar_format="{desc} ...")

            def stage(what: str) -> None:  # each slow step of the publishing (a remote store: seconds each)
                interrupted()
                publishing.set_description_str(f"record the run and register the model: {what}")

            with publishing, store_lock(store), quiet_mlflow():
                version, summary, report_html = _publish(client, store, run, table, data, config, predictor, predictions,
                                            summaries, base_info, time.time() - t0, stage, registered,
                                            left_out=dropped, created=created)
                interrupted()
                retry(lambda: client.set_terminated(run_id, "FINISHED"))
        except BaseException as exc:
            _end_failed_run(client, store, run_id, exc, (config.name, registered[0]) if registered else None,
                            created_model=created[0] if created else None)
            raise
    return CalibrationResult(run_id, exp_id, config.name, version, store.uri, predictor, predictions,
                             summaries, summary, report_html)


def _end_failed_run(client: Any, store: Store, run_id: str, exc: BaseException,
                    registered: tuple[str, int] | None = None, created_model: str | None = None) -> None:
    """End the run of a calibration that raised ``exc``: bad input found while fitting (nothing fits, a split
    leaves no rows) deletes it, as for input refused before the run started; an interrupt (Ctrl-C, or the SIGTERM
    the CLI and :func:`calibrate` turn into one) marks it ``KILLED``; any other failure ``FAILED``.

    A version ``registered`` (name, version) before the failure is deleted first: its run never recorded what
    ``evaluate`` and ``report`` read back (the training rows, the report), and ``NAME`` (latest) would load it
    as if the calibration had succeeded. A registered model this run created (``created_model``: the first
    calibration of a new name) is deleted with it when no version is left: ``hybrid models`` listed it, with no
    version, after the first calibration of a name was interrupted. Where the store cannot be told (the server went away mid-run, it
    refuses the request), a :class:`~hybrid.errors.RunStateWarning` says the run stays ``RUNNING`` there, and
    names the version left registered; the original failure is raised by the caller either way."""
    import warnings

    bad_input = isinstance(exc, (InvalidInputError, UnknownDeviceError, SchemaError))  # a typo: no run
    status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
    uri = redact_uri(store.uri)
    # the failure itself was the store out of reach through every retry (~40 s): one more try each, not as long again
    attempts = 1 if is_transient(exc) else RETRY_ATTEMPTS
    left_registered = ""
    if registered is not None:
        name, version = registered
        try:
            with quiet_mlflow():
                retry(lambda: client.delete_model_version(name, str(version)), attempts)
        except Exception as del_exc:  # noqa: BLE001 - said below, with the run's state
            reason = str(del_exc).splitlines()[0] if str(del_exc) else type(del_exc).__name__
            left_registered = (f"; models:/{name}/{version}, registered from it before the failure, stays in the "
                               f"registry and is incomplete: delete it with `MlflowClient({uri!r})."
                               f"delete_model_version({name!r}, '{version}')` ({reason[:200]})")
            if is_transient(del_exc) or "timed out" in reason.lower():  # the store is gone: marking the run
                # would only wait as long again
                warnings.warn(f"run {run_id} stays RUNNING in {uri}: it could not be marked {status} there"
                              f"{left_registered}", RunStateWarning, stacklevel=3)
                return
    if created_model is not None and not left_registered:
        try:
            with store_lock(store), quiet_mlflow():  # no other hybrid process registers a version meanwhile
                drop_if_empty(client, created_model, attempts)
        except Exception as drop_exc:  # noqa: BLE001 - said below, with the run's state
            reason = str(drop_exc).splitlines()[0] if str(drop_exc) else type(drop_exc).__name__
            left_registered = (f"; the registered model {created_model!r}, created by it, stays in the registry with "
                               f"no versions: delete it with `MlflowClient({uri!r}).delete_registered_model("
                               f"{created_model!r})` ({reason[:200]})")
    try:
        with quiet_mlflow():
            if bad_input:
                retry(lambda: client.delete_run(run_id), attempts)
            else:
                retry(lambda: client.set_terminated(run_id, status), attempts)
    except Exception as mark_exc:  # noqa: BLE001 - the original failure matters more: said, not raised
        what = "deleted" if bad_input else f"marked {status}"
        reason = str(mark_exc).splitlines()[0] if str(mark_exc) else type(mark_exc).__name__
        warnings.warn(f"run {run_id} stays RUNNING in {uri}: it could not be {what} there ({reason[:200]})"
                      f"{left_registered}", RunStateWarning, stacklevel=3)
        return
    if left_registered:
        warnings.warn(f"run {run_id} was marked {status} in {uri}{left_registered}", RunStateWarning, stacklevel=3)


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[Callable[[], None]]:
    """While a calibration runs in the main thread of a process that left SIGTERM at its default (the process
    would die on the spot, its run left ``RUNNING``), SIGTERM raises :class:`KeyboardInterrupt` so the run is
    marked ``KILLED``; a handler already installed (the CLI's) is left alone.

    An exception raised by a signal handler is lost when the signal lands inside a finaliser or a weakref callback
    (Python prints "Exception ignored in ..." and goes on: SQLAlchemy's ``_collection_gced`` swallowed it, the
    calibration finished and registered its model after the kill). So the handler also records the signal, and the
    yielded ``check()`` raises the same interrupt at the calibration's checkpoints if it was recorded; leaving the
    block with a recorded signal and no exception raises it too."""
    got: list[int] = []

    def check() -> None:  # raises a recorded signal once
        if got:
            got.clear()
            raise KeyboardInterrupt("SIGTERM")

    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield check
        return

    def interrupt(signum: int, frame: Any) -> None:
        got.append(signum)  # for check(), where a finaliser swallowed this raise
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield check
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    check()  # (reached only without an exception in flight)


def _drop_implausible(table: pd.DataFrame, cat: Catalog,
                      notes: list[str] | None = None) -> tuple[pd.DataFrame, str]:
    """``table`` without the GPU GEMM groups faster than the datasheet peak allows (:mod:`hybrid.data.quality`),
    before any split: every fit leaves them out, so no split scores them either (a group timed in ms where us
    belong scored thousands of percent). Warns naming them, and appends each warning's text to ``notes`` (the
    run's summary keeps them: its report says what its row counts leave out); refuses a table of nothing else,
    before a run starts."""
    import warnings

    from hybrid.corrections.predictor import HybridPredictor
    from hybrid.data.quality import (
        describe,
        failed_validation,
        implausible_collectives,
        implausible_rows,
        nothing_plausible,
    )
    from hybrid.errors import DataQualityWarning

    wrong = failed_validation(table)
    if wrong.any():
        if wrong.all():
            raise InvalidInputError(f"every one of the {len(table):,} rows reports wrong results (#wrong > 0): "
                                    "nothing to calibrate on")
        said = (f"left out of the fit and of every score, {int(wrong.sum()):,} collective rows whose benchmark "
                "reported wrong results (#wrong > 0)")
        warnings.warn(said, DataQualityWarning, stacklevel=3)
        if notes is not None:
            notes.append(said)
        table = table.loc[~wrong].reset_index(drop=True)
    # one validation and roofline of the rows for both checks (each predictor method would compute its own)
    norm, base = HybridPredictor(catalog=cat)._prepare(table, training=True)
    coll, bad_coll = implausible_collectives(norm, base)
    if coll.any():  # a collective log in ms (or on the wrong system) would calibrate a fabric 1000x too fast
        from hybrid.data.quality import describe_collectives

        if coll.all():
            raise InvalidInputError(f"every training row is a collective far faster than its system's fabric allows "
                                    f"({describe_collectives(bad_coll)})")
        said = ("left out of the fit and of every score, collectives far faster than the fabric allows "
                f"(hybrid.data.quality): {describe_collectives(bad_coll)}")
        warnings.warn(said, DataQualityWarning, stacklevel=3)
        if notes is not None:
            notes.append(said)
        table = table.loc[~coll].reset_index(drop=True)
        norm, base = norm.loc[~coll], base.loc[~coll]
    drop, bad = implausible_rows(norm, base, cat)
    if not drop.any():
        return table, ""
    if drop.all():
        raise nothing_plausible(bad)
    said = ("left out of the fit and of every score, GEMMs faster than the datasheet peak allows "
            f"(hybrid.data.quality): {describe(bad)}")
    warnings.warn(said, DataQualityWarning, stacklevel=3)
    if notes is not None:
        notes.append(said)
    return table.loc[~drop].reset_index(drop=True), describe(bad)


def _fit_run(predictor_cls: Any, table: pd.DataFrame, cat: Catalog, config: CalibrationConfig,
             progress: bool) -> tuple[Any, list[pd.DataFrame]]:
    def new() -> Any:
        extra = {} if config.sibling_blend is None else {"sibling_blend": config.sibling_blend}
        return predictor_cls(catalog=cat, collective_transfer=config.collective_transfer, **extra)

    holdouts = lodo_devices(table, config, cat)
    do_random = len(table) >= MIN_ROWS_FOR_SPLIT
    steps = int(do_random) + len(holdouts) + 1
    frames: list[pd.DataFrame] = []
    bar = tqdm(total=steps, desc=f"calibrate {config.name}", unit="fit", disable=not progress, leave=False)
    try:
        if do_random:
            bar.set_postfix_str("random hold-out")
            tr, te = stratified_split(table, config.test_fraction, config.seed)
            if len(te) and len(tr):
                p = new().fit(table.iloc[tr].reset_index(drop=True))
                test = table.iloc[te].reset_index(drop=True)
                frames.append(prediction_frame(test, p.predict(test), "random"))
            bar.update()
        lodo = []
        for dev in holdouts:
            bar.set_postfix_str(f"leave out {dev}")
            held = (table["device"] == dev).to_numpy()
            p = new().fit(table.loc[~held].reset_index(drop=True))
            test = table.loc[held].reset_index(drop=True)
            # rows whose die this fit measured in another variant calibrate the sibling band
            lodo.append(prediction_frame(test, p.predict(test), "lodo").assign(sibling=p.sibling_rows(test)))
            # the same device adapted with k of its rows (strategy auto): the bands of adapted devices
            for shots, fit_rows, scored in p.adaptation_holdouts(test, config.seed):
                held = test.loc[scored].reset_index(drop=True)
                adapted = p.adapt(test.loc[fit_rows].reset_index(drop=True))
                lodo.append(prediction_frame(held, adapted.predict(held), "adapted").assign(shots=shots))
            bar.update()
        frames += lodo
        bar.set_postfix_str("final fit (all rows)")
        final = new().fit(table, progress=False)
        bar.update()
        # a fit that up-weighted few-row devices: the band of such devices, from fits that keep as many rows of
        # each held-out device (HybridPredictor.few_row_splits; none otherwise)
        few = final.few_row_splits(table, holdouts, config.seed)
        bar.total += len(few)
        bar.refresh()
        for dev, held in few:
            bar.set_postfix_str(f"{dev} with a few rows")
            p = new().fit(table.loc[~held].reset_index(drop=True))
            test = table.loc[held].reset_index(drop=True)
            frames.append(prediction_frame(test, p.predict(test), "few"))
            bar.update()
        # collectives far beyond a curve's measured sizes: the edge sizes of measured layouts held out (two folds,
        # the collective corrections alone refitted), their rows beyond 4x of what stays in calibrate the edge band
        edge = final.edge_splits(table) if hasattr(final, "edge_splits") else []
        bar.total += len(edge)
        bar.refresh()
        for held in edge:
            bar.set_postfix_str("collective edge sizes")
            p = final.edge_clone(table.loc[~held])
            test = table.loc[held].reset_index(drop=True)
            keep = p.edge_rows(test)
            if keep.any():
                test = test.loc[keep].reset_index(drop=True)
                frames.append(prediction_frame(test, p.predict(test), "edge"))
            bar.update()
        # 80% intervals from the held-out residuals above: random split = seen devices, lodo = unseen ones (sibling
        # where the fold fitted another variant of the die), few = devices the fit knew from a few rows, adapted =
        # devices adapted with k rows
        final.intervals = IntervalCalibration.from_prediction_frames(pd.concat(frames, ignore_index=True)) \
            if frames else IntervalCalibration()
        frames.append(prediction_frame(table, final.predict(table), "train"))
    finally:
        bar.close()
    return final, frames


def _load_base(client: Any, config: CalibrationConfig, cat: Catalog, tmp: Path) -> tuple[Any, Any, Path]:
    from hybrid.corrections.predictor import HybridPredictor

    mv = resolve_version(client, config.base or "")
    pred_dir = download_model(client, mv, tmp)

    def load() -> Any:
        p = HybridPredictor.load(pred_dir)
        p.catalog, _ = merge_catalog(p.catalog, cat)
        return p

    return mv, load, pred_dir


def _adapt_run(client: Any, store: Store, table: pd.DataFrame, cat: Catalog, config: CalibrationConfig,
               progress: bool) -> tuple[Any, list[pd.DataFrame], dict[str, Any]]:
    tmp = Path(tempfile.mkdtemp(prefix="hybrid-base-"))
    try:
        mv, load, _ = _load_base(client, config, cat, tmp)
        frames = []
        bar = tqdm(total=2, desc=f"adapt {mv.name}/{mv.version} -> {config.name}", unit="fit",
                   disable=not progress, leave=False)
        if len(table) >= MIN_ROWS_FOR_ADAPT_SPLIT:
            rng = np.random.default_rng(config.seed)
            perm = rng.permutation(len(table))
            k = len(table) // 2
            fit_rows, test = table.iloc[np.sort(perm[:k])], table.iloc[np.sort(perm[k:])].reset_index(drop=True)
            base_pred = load().predict(test)["time_us"].to_numpy(np.float64)
            adapted = load().adapt(fit_rows.reset_index(drop=True), strategy=config.adapt_strategy)
            frames.append(prediction_frame(test, adapted.predict(test), "adapt", base=base_pred))
        bar.update()
        base_all = load().predict(table)["time_us"].to_numpy(np.float64)
        final = load().adapt(table, strategy=config.adapt_strategy)
        frames.append(prediction_frame(table, final.predict(table), "train", base=base_all))
        bar.update()
        bar.close()
        info = {"name": mv.name, "version": int(mv.version), "run_id": mv.run_id}
        return final, frames, info
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------------- logging
def _metric_key(*parts: str) -> str:
    return ".".join(re.sub(r"[^\w\-. /]", "_", str(p)) for p in parts)


def summary_metrics(summaries: dict[str, dict[str, dict[str, Any]]]) -> dict[str, float]:
    """Flatten ``{split: {model: error_summary}}`` into MLflow metric names (see the module doc)."""
    out: dict[str, float] = {}
    for split, models in summaries.items():
        for model, s in models.items():
            for k in ("geomean_pct", "mape_pct", "median_pct", "p90_pct"):
                out[_metric_key(split, model, k)] = float(s[k])
            out[_metric_key(split, "n_rows")] = float(s["n_rows"])
            for group, label in (("by_op", "op"), ("by_device", "device"), ("by_shots", "shots")):
                for name, g in s.get(group, {}).items():
                    for k in ("geomean_pct", "mape_pct", "median_pct", "p90_pct"):
                        out[_metric_key(split, model, label, name, k)] = float(g[k])
                    out[_metric_key(split, label, name, "n_rows")] = float(g["n_rows"])
    return out


def flatten_params(prefix: str, obj: Any, out: dict[str, str] | None = None) -> dict[str, str]:
    """Nested dicts (e.g. ``describe()``) as ``prefix.key.sub`` -> string value (long values truncated)."""
    out = {} if out is None else out
    if isinstance(obj, dict):
        for k, v in obj.items():
            flatten_params(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        text = obj if isinstance(obj, str) else json.dumps(obj, default=str)
        out[_metric_key(prefix)[:250]] = text[:_PARAM_MAX_CHARS]
    return out


def data_profile(table: pd.DataFrame) -> dict[str, Any]:
    """Row counts per op and per device (and per op family)."""
    from hybrid.ops.families import family_array

    return {
        "n_rows": int(len(table)),
        "rows_per_op": {str(k): int(v) for k, v in table["op"].value_counts().sort_index().items()},
        "rows_per_family": {str(k): int(v) for k, v in
                            pd.Series(family_array(table["op"])).value_counts().sort_index().items()},
        "rows_per_device": {str(k): int(v) for k, v in table["device"].value_counts().sort_index().items()},
    }


def _describe_corrections(predictor: Any) -> dict[str, Any]:
    out = {}
    for c in getattr(predictor, "corrections", []) or []:
        if not getattr(c, "fitted", True):
            continue
        try:
            out[str(getattr(c, "key", c.name))] = c.describe()
        except Exception as exc:  # noqa: BLE001 - an unfitted correction may not describe itself
            out[str(getattr(c, "name", type(c).__name__))] = {"error": str(exc)}
    return out


def _publish(client: Any, store: Store, run: Any, table: pd.DataFrame, data: Measurements,
             config: CalibrationConfig, predictor: Any, predictions: pd.DataFrame,
             summaries: dict[str, Any], base_info: dict[str, Any] | None, elapsed_s: float,
             stage: Callable[[str], None] = lambda what: None,
             registered: list[int] | None = None,
             left_out: list[str] | None = None,
             created: list[str] | None = None) -> tuple[int | None, dict[str, Any], str]:
    """Log the run's parameters, metrics, dataset, model and report to the store and register the model;
    ``stage`` is told each step as it starts (the progress line on stderr); the registered version is appended
    to ``registered`` as soon as it exists, so that a later failure can take it back (and the model's name to
    ``created`` where this run created the registered model)."""
    from mlflow.entities import Dataset, DatasetInput, Metric, Param, RunTag

    from hybrid.reports.html import envelope_rows, plotted_splits, render_report
    from hybrid.reports.plots import figure_png, standard_figures

    run_id = run.info.run_id
    digest = table_digest(table)
    profile = data_profile(table)
    corrections = _describe_corrections(predictor)
    cfg = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items()}
    if config.base:  # an adaptation has no leave-one-device-out split (it is scored on the adapt split): say so
        cfg["lodo"] = False
    params = flatten_params("", {
        "name": config.name, "base": config.base or "", "seed": config.seed, "test_fraction": config.test_fraction,
        "holdout_devices": ",".join(sorted(set(predictions.loc[predictions["split"] == "lodo", "device"]
                                               .astype(str)))),
        "exclude_devices": ",".join(config.exclude_devices),
        "splits": ",".join(summaries), "data_sha256": digest, "n_rows": len(table),
        "sources": ",".join(data.sources), "collective_transfer": "base" if config.base else bool(config.collective_transfer),
        "sibling_blend": "base" if config.sibling_blend is None else bool(config.sibling_blend),
        "adapt_strategy": config.adapt_strategy if config.base else "",
        # what the random hold-out holds out together for collective rows (stratified_split): every measurement of
        # one message size at one layout ("rows": each row on its own, an adaptation's own split)
        "split.collective_groups": "rows" if config.base else ",".join(COLLECTIVE_SPLIT_GROUPS),
    })
    params.update(flatten_params("rows.op", profile["rows_per_op"]))
    params.update(flatten_params("rows.device", profile["rows_per_device"]))
    params.update(flatten_params("correction", corrections))
    if config.base and hasattr(predictor, "adaptation"):
        # few-shot constants per (correction, device): scale (efficiency ratio), shift_us (per-op host time),
        # boosted, and the form strategy ``auto`` chose
        params.update(flatten_params("adapt", {k: {d: {n: v for n, v in e.items() if n != "cv_loss"}
                                                   for d, e in per.items()}
                                               for k, per in predictor.adaptation().items()}))
    metrics = summary_metrics(summaries)
    metrics["calibration_seconds"] = elapsed_s
    now = int(time.time() * 1000)
    mlist = [Metric(k, v, now, 0) for k, v in metrics.items() if np.isfinite(v)]
    plist = [Param(k, v) for k, v in params.items()]
    stage(f"log {len(plist)} parameters and {len(mlist)} metrics")
    retry(lambda: client.log_batch(run_id, tags=[RunTag("hybrid.data_sha256", digest)]))
    for i in range(0, len(plist), _BATCH_PARAMS):
        retry(lambda i=i: client.log_batch(run_id, params=plist[i:i + _BATCH_PARAMS]))
    for i in range(0, len(mlist), _BATCH_METRICS):
        retry(lambda i=i: client.log_batch(run_id, metrics=mlist[i:i + _BATCH_METRICS]))
    dataset = Dataset(name="measurements", digest=digest[:32], source_type="local",
                      source=json.dumps(data.sources), schema=json.dumps({"columns": list(table.columns)}),
                      profile=json.dumps(profile))
    stage("log the dataset")
    # the store creates the dataset row on first use: two runs logging the same data at once race on that insert
    retry(lambda: client.log_inputs(run_id, datasets=[DatasetInput(dataset)]), also=is_lost_insert_race)

    summary: dict[str, Any] = {
        "name": config.name, "run_id": run_id, "tracking_uri": redact_uri(store.uri), "hybrid_version": __version__,
        "config": cfg, "base": base_info, "data": {"sha256": digest, "sources": data.sources, **profile},
        "extra_devices": data.extra_devices, "errors": summaries, "corrections": corrections,
        "predictor": _safe_summary(predictor), "calibration_seconds": elapsed_s,
        "left_out": list(left_out or []),
    }
    tmp = Path(tempfile.mkdtemp(prefix="hybrid-run-"))
    try:
        stage("save the model")
        save_pyfunc(predictor, tmp / "saved")
        stage("upload the model")
        retry(lambda: client.log_artifacts(run_id, str(tmp / "saved" / MODEL_ARTIFACT_PATH), MODEL_ARTIFACT_PATH))
        version = None
        if config.register:
            source = f"{run.info.artifact_uri}/{MODEL_ARTIFACT_PATH}"
            stage(f"register a version of {config.name}")
            # the base as the version it resolved to: `--base gpus` names whatever is latest, and once gpus has a
            # newer version the tag (what `hybrid models` lists) would name a model this one was not adapted from
            base_tag = f"{base_info['name']}/{base_info['version']}" if base_info else (config.base or "")
            version = register_version(
                client, config.name, run_id, source,
                tags={"data_sha256": digest, "base": base_tag, "hybrid_version": __version__},
                description=f"hybrid calibrate on {len(table):,} rows ({', '.join(profile['rows_per_device'])})",
                created=created)
            if registered is not None:
                registered.append(version)
            retry(lambda: client.set_tag(run_id, "hybrid.registered_version", str(version)))
        summary["version"] = version
        out = tmp / "run"
        (out / "predictions").mkdir(parents=True)
        (out / "plots").mkdir()
        images: dict[str, dict[str, bytes]] = {}
        with_figures = plotted_splits([str(s) for s in pd.unique(predictions["split"])])
        stage("write predictions and draw plots")
        for split, sub in predictions.groupby("split", sort=False):
            sub.to_csv(out / "predictions" / f"{split}.csv", index=False)
            if split not in with_figures:
                continue
            images[str(split)] = {}
            for stem, fig in standard_figures(sub, title=str(split)).items():
                png = figure_png(fig)
                images[str(split)][stem] = png
                (out / "plots" / f"{split}_{stem}.png").write_bytes(png)
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8")
        title = f"hybrid calibration: {config.name}" + (f" v{version}" if version else "")
        stage("render the report")
        report_html = render_report(predictions, title=title, meta=report_meta(summary), summaries=summaries,
                                    images=images, envelope=envelope_rows(summary.get("predictor") or {}))
        (out / "report.html").write_text(report_html, encoding="utf-8")
        stage("upload predictions, plots and report")
        retry(lambda: client.log_artifacts(run_id, str(out)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return version, summary, report_html


def _safe_summary(predictor: Any) -> dict[str, Any]:
    try:
        return predictor.summary()
    except Exception as exc:  # noqa: BLE001
        return {"error": str(exc)}


def report_meta(summary: dict[str, Any]) -> dict[str, Any]:
    """The key facts of a run for the top of its HTML report."""
    data = summary.get("data", {})
    meta = {
        "model": f"{summary.get('name')}" + (f" (version {summary['version']})" if summary.get("version") else ""),
        "run id": summary.get("run_id"),
        "tracking URI": summary.get("tracking_uri"),
        "rows": f"{data.get('n_rows', 0):,}",
        "rows per device": ", ".join(f"{k}: {v:,}" for k, v in data.get("rows_per_device", {}).items()),
        "rows per op": ", ".join(f"{k}: {v:,}" for k, v in data.get("rows_per_op", {}).items()),
        "data sha256": data.get("sha256"),
        "corrections fitted": ", ".join(summary.get("corrections", {})) or "none (roofline only)",
        "hybrid version": summary.get("hybrid_version"),
    }
    if summary.get("base"):
        b = summary["base"]
        meta["adapted from"] = f"models:/{b['name']}/{b['version']}"
    for i, note in enumerate(summary.get("left_out") or []):  # rows the counts above and every split leave out
        meta["left out" if i == 0 else f"left out ({i + 1})"] = note
    return meta
