"""Small helpers shared by CLI commands: JSON output and plain-text tables."""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import click

from hybrid.json_ready import json_ready


def echo_json(obj: Any) -> None:
    """Print ``obj`` as JSON (NaN becomes null)."""
    click.echo(json.dumps(json_ready(obj), indent=2))


def echo_table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> None:
    """Print an aligned plain-text table."""
    cells = [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    click.echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    click.echo("  ".join("-" * w for w in widths))
    for r in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 1e5 or abs(v) < 1e-2:
            return f"{v:.3g}"
        return f"{v:.2f}"
    return str(v)


#: At most this many warnings are printed one per line; the rest are counted.
MAX_WARNINGS = 20


def report_warnings(caught: list[warnings.WarningMessage]) -> None:
    """Print caught warnings as ``warning:`` lines on stderr, each distinct message once."""
    msgs = list(dict.fromkeys(str(w.message) for w in caught))
    for m in msgs[:MAX_WARNINGS]:
        click.echo(f"warning: {m}", err=True)
    if len(msgs) > MAX_WARNINGS:
        click.echo(f"warning: ... and {len(msgs) - MAX_WARNINGS} more", err=True)


@contextlib.contextmanager
def said_warnings(show: bool = True) -> Iterator[list[warnings.WarningMessage]]:
    """Collect every warning of the block and print each once as a ``warning:`` line when it ends (unless
    ``show`` is false), also when it fails: then they come before the CLI's ``error:`` line, and say why (an
    import that found no rows: the sections skipped as failed, truncated or of a test the table has no op for)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield caught
        finally:
            if show:
                report_warnings(caught)


@contextlib.contextmanager
def quality_warnings() -> Iterator[None]:
    """Inside the block, data-quality warnings (:class:`~hybrid.errors.DataQualityWarning`, raised once per fit of a
    calibration's splits) and predictions across kinds of processor (:class:`~hybrid.errors.TransferWarning`) are
    collected and printed once each as ``warning:`` lines at its end; every other
    warning goes on as it would have. A calibration run the tracking store could not be told about
    (:class:`~hybrid.errors.RunStateWarning`: left ``RUNNING``) is a ``warning:`` line too, also when the block
    fails (before the CLI's ``error:`` line); the data-quality ones are too when the failure refuses the input
    (:class:`~hybrid.errors.InvalidInputError`, :class:`~hybrid.errors.SchemaError`), which they may explain."""
    from hybrid.errors import (
        DataQualityWarning,
        InvalidInputError,
        RunStateWarning,
        SchemaError,
        TransferWarning,
    )

    ours = (DataQualityWarning, RunStateWarning, TransferWarning)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DataQualityWarning)
        warnings.simplefilter("always", TransferWarning)
        try:
            yield
        except BaseException as exc:
            # where the input was refused, the data-quality notes too: they often say why (a typo'd `dtpye` column
            # read as fp32 made every GEMM faster than the peak, and the error came without the warning naming the
            # typo); an unreachable store or an interrupt is one line, as before
            said = (DataQualityWarning, RunStateWarning) if isinstance(exc, (InvalidInputError, SchemaError)) \
                else RunStateWarning
            report_warnings([w for w in caught if issubclass(w.category, said)])
            raise
    for w in caught:
        if not issubclass(w.category, ours):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    report_warnings([w for w in caught if issubclass(w.category, ours)])


def e2e_line(parts: Sequence[str], values: dict[str, Any], what: str) -> str:
    """The end-to-end interval line: ``parts`` (e.g. ``"TTFT 10.1 - 12.3 ms"``) and, from ``values``
    (:func:`hybrid.engine.form_error.e2e_interval`), the margin and how often it held on unseen software."""
    lo, hi = values["e2e_heldout_coverage_range_pct"]
    factor = values["e2e_margin_factor"]
    # the training margin can be negative (form_error.toml): op ends moving together over-cover, so it narrows
    how = (f"widened x{factor:.2f} on each side for what op costs do not describe: framework, runtime, schedule"
           if factor >= 1.0 else
           f"narrowed x{factor:.2f} on each side: the op ends, each at its own extreme at once, over-cover")
    return (f"end-to-end 80% interval: {', '.join(parts)} (the op-cost interval {how}; published "
            f"{what} of software it was not calibrated on fell inside {values['e2e_heldout_coverage_pct']:.0f}% of "
            f"the time on average, {lo:.0f}-{hi:.0f}% per software, experiments/e2e_intervals)")


#: Said (JSON ``notes`` / ``interval_note`` and stderr) when a calibrated model gives no interval for some op.
NO_INTERVAL_NOTE = ("no 80% interval: the calibrated model gives none for some op of this {what} (a collective of a "
                    "model calibrated without collective measurements, say)")


#: Said after a text prediction costed by the roofline alone because no ``--model`` was given.
ROOFLINE_NOTE = ("note: no --model given, so every op is costed by the roofline alone (datasheet peaks, no measured "
                 "correction): times are usually optimistic, throughput and MFU too high (few kernels reach their "
                 "datasheet peak); `hybrid quickstart` or `hybrid calibrate` registers a calibrated model to pass as "
                 "--model NAME")


def roofline_note(cost_model: str) -> None:
    """Print :data:`ROOFLINE_NOTE` when ``cost_model`` (the name a command reports) is the default roofline."""
    if cost_model == "roofline":
        click.echo(ROOFLINE_NOTE)


def arch_note(name: str, catalog: Any = None) -> str | None:
    """A warning for a device given as a bare architecture string that several catalog GPUs share (``sm_90``,
    ``gfx90a``): which GPU it was taken as and which others it could mean; None for any other name."""
    from hybrid.hardware.catalog import default_catalog

    cat = catalog if catalog is not None else default_catalog()
    others = cat.arch_alternatives(name)
    if not others:
        key = cat.resolve_device(name, missing_ok=True)
        if key is not None and f"{key}-GCD" in cat.devices:  # a multi-die module: software sees each die
            return (f"device {key} is a whole module of two dies (GCDs), each one device to ROCm and PyTorch: a kernel "
                    f"or a rank runs on one of them, {key}-GCD, at half the module's peaks and bandwidth; name that "
                    "unless you mean the module")
        return None
    key = cat.resolve_device(name)
    dev = cat.devices[key]
    shown = ", ".join(others[:6]) + (f" and {len(others) - 6} more" if len(others) > 6 else "")
    return (f"device {name!r} is an architecture that {len(others) + 1} catalog GPUs share; costed as {key} "
            f"({dev.mem_capacity / 2**30:g} GiB, {dev.mem_bw / 1e9:g} GB/s); name the GPU instead if it is "
            f"another one: {shown}")


def warn_arch_device(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Click callback for ``--device`` options: print :func:`arch_note` on stderr (unknown names are left to the
    command, which names them in its error); an empty or blank value is refused (:func:`named`: an unset shell
    variable was "unknown device ''" with the closest names to nothing)."""
    value = named(ctx, param, value)
    if value:
        from hybrid.errors import UnknownDeviceError

        try:
            note = arch_note(value)
        except UnknownDeviceError:
            note = None
        if note:
            click.echo(f"warning: {note}", err=True)
    return value


def gpu_hour_price_option(adds: str, example: str = "DGX-H100=3.9,A100-SXM4-80GB=1.6") -> Any:
    """The ``--gpu-hour-price`` option of the commands that price a prediction
    (:mod:`hybrid.workloads.llm.pricing`); ``adds`` says what it adds to that command's output."""
    return click.option("--gpu-hour-price", "gpu_hour_price", default=None,
                        help="Price of one GPU-hour (any currency; none is built in): 2.5 for every GPU, or per "
                             f"catalog system or GPU, e.g. {example}. {adds}")


def compare_names(compare: str | None, catalog: Any) -> list[str]:
    """The systems or devices of a ``--compare`` option, each checked against ``catalog`` before anything is
    predicted (a typo is an error now, not after the work), each system once (the first of the names that resolve
    to it: ``DGX-H100,dgx-h100`` was searched and ranked twice); [] without the option."""
    if compare is None:
        return []
    from hybrid.errors import InvalidInputError
    from hybrid.ops.roofline import resolve_system

    names = [c.strip() for c in compare.split(",") if c.strip()]
    if not names:
        raise InvalidInputError(f"--compare names no system (got {compare!r}); e.g. --compare DGX-H100,DGX-A100")
    seen: dict[str, str] = {}
    for name in names:
        seen.setdefault(resolve_system(catalog, name).key, name)  # a system, or a device's generic node
    return list(seen.values())


def named(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Click callback for options naming something (``--model NAME``, ``--system S``, ``--trace FILE``): an empty or
    blank value is refused.

    Commands test such options for truth (``if model_ref:``), so ``--model ''`` (an unset shell variable,
    ``--model "$MODEL"``) silently meant "no model" and gave roofline-only numbers under the user's nose, and
    ``--trace ''`` wrote no trace without a word."""
    if value is not None and not value.strip():
        from hybrid.errors import InvalidInputError

        flag = max(param.opts, key=len) if param.opts else str(param.name)
        raise InvalidInputError(f"{flag} is empty: give a value or leave the option out")
    return value


def named_path(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    """:func:`named`, then the value as a :class:`~pathlib.Path`: the callback of path options that must not be
    empty (``-o ""``, an unset shell variable).

    The option keeps a plain ``click.Path`` type (no ``path_type``): ``Path("")`` is ``Path(".")``, so once converted
    an empty value could no longer be told from ``.``, and ``data pull -o ""`` materialised the source in the
    working directory with exit 0."""
    value = named(ctx, param, value)
    return None if value is None else Path(value)


def named_device(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """:func:`named`, then :func:`warn_arch_device`: the callback of optional ``--device`` options."""
    return warn_arch_device(ctx, param, named(ctx, param, value))


def refuse_output_among_tables(output: str | Path, tables: Sequence[str | Path]) -> None:
    """Refuse an ``-o`` that is one of the measurement tables read (a table named, or a bundle directory's
    ``measurements.csv``): `evaluate -o my.csv` on `my.csv` replaced the user's measurements with the predictions
    frame (another layout, which no command reads back as a table) and said only "predictions written"."""
    from hybrid.data.bundle import TABLE_FILE
    from hybrid.errors import InvalidInputError

    out = Path(output)
    if not out.exists():
        return
    for t in map(Path, tables):
        src = t / TABLE_FILE if t.is_dir() else t
        if src.exists() and src.resolve() == out.resolve():
            raise InvalidInputError(f"output {output} is the measurement table {t} read: writing it would replace "
                                    "those measurements; choose another output path")
