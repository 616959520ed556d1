"""``hybrid predict``: time one op on a device or system."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np
import pandas as pd

from hybrid.cli.output import echo_json, named, refuse_output_among_tables, said_warnings, warn_arch_device
from hybrid.data.schema import MAX_INT
from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import default_catalog
from hybrid.ops.families import COLLECTIVE_OPS, family_array, family_of
from hybrid.ops.roofline import cpu_collective_system, memory_fit, resolve_system, roofline
from hybrid.ops.spec import Collective, Gemm
from hybrid.units import dtype_bytes, format_bytes, normalize_dtype, parse_count, parse_size


@click.group()
def predict() -> None:
    """Predict the runtime of one op, or of every row of a table (roofline, or a calibrated model with --model)."""


def _model_options(fn):
    """``--model`` / ``--tracking-uri`` shared by the predict sub-commands."""
    fn = click.option("--tracking-uri", envvar="MLFLOW_TRACKING_URI",
                      help="MLflow store holding --model (default: local SQLite store).")(fn)
    return click.option("--model", "model_ref", default=None, callback=lambda c, p, v: None if v == "roofline" else named(c, p, v),
                        help="Calibrated model (NAME, NAME/3, models:/NAME/3); default (or 'roofline'): "
                             "analytical only.")(fn)


def _report(result: dict, as_json: bool) -> None:
    if as_json:
        echo_json(result)
        return
    for k, v in result.items():
        if isinstance(v, float):
            v = f"{v:,.3f}" if abs(v) < 1e6 else f"{v:.4g}"
        click.echo(f"{k:>16}: {v}")


def _interval(row, what: str, between: bool = False, reason: str = "") -> dict:
    """``time_us_low`` / ``time_us_high``: the model's 80% prediction interval (None when it has none), whether
    it was calibrated for this kind of prediction (``interval_calibrated``) and, where not, ``interval_note``
    (also printed to stderr). ``what``: the kind of op, for the note; ``between``: an uncalibrated sibling band is
    the one between the key's seen and unseen bands (``IntervalCalibration.sibling_fallback``); ``reason``: why a
    row is on the unseen band, named in the note instead of "an unseen system or layout" / "an unseen device" (a
    collective's ``extrapolation_reason``: a size beyond the measured ones, a layout never measured; a GEMM of a
    fitted device: :func:`_seen_device_reason`)."""
    lo, hi = float(row.get("time_us_low", float("nan"))), float(row.get("time_us_high", float("nan")))
    calibrated = bool(row.get("interval_calibrated", lo == lo and hi == hi))
    method = str(row.get("method", "the model"))
    out: dict = {"time_us_low": lo, "time_us_high": hi, "interval_calibrated": calibrated}
    band = row.get("interval_band")
    if isinstance(band, str):  # seen / unseen / few / adapted-k / sibling / edge: what the model knew of this device (or system)
        out["interval_band"] = band
    if not (lo == lo and hi == hi):  # NaN: no interval for this kind of op (or a model saved without any)
        out.update(time_us_low=None, time_us_high=None,
                   interval_note=f"no 80% interval: the model has no held-out {what} residuals of {method} or of "
                                 "any comparable model to calibrate one on (calibrate with such measurements)")
    elif not calibrated and band == "unseen":
        unseen = (f"extrapolated {what} ({reason})" if reason else
                  f"unseen {'system or layout' if what == 'collective' else 'device'}")
        out["interval_note"] = (f"80% interval of an {unseen} "
                                f"borrowed: the model calibrated no unseen band for {method} {what} predictions, so "
                                "this is the nearest band it has (the seen one where that is all), narrower than "
                                "its errors there are likely to be; its coverage is unknown")
    elif band == "unseen (default)":  # IntervalCalibration.default_unseen: the public default collective band
        unseen = f"extrapolated {what} ({reason})" if reason else "unseen system or layout"
        out["interval_note"] = (f"80% interval of an {unseen}: the calibration data could not calibrate an unseen "
                                f"band for {method} (no, or too few, held-out systems), so this is the default band "
                                "from public nccl-tests / XLA leave-one-system-out and leave-layout-out residuals "
                                "(DEFAULT_COLLECTIVE_UNSEEN_BAND, docs/corrections.md), at least as wide as the seen "
                                "band; not calibrated on this system")
    elif not calibrated and band == "sibling" and between:
        out["interval_note"] = (f"80% interval of a GPU priced from a measured sibling (the same die) not calibrated: "
                                f"too few held-out GPUs of the calibration had a sibling to calibrate a sibling band "
                                f"for {method} {what} predictions, so this is the band halfway between its seen and "
                                "unseen ones; its coverage is unknown")
    elif not calibrated:
        out["interval_note"] = (f"80% interval borrowed from another op family or model: {method} {what} "
                                "predictions had no held-out residuals of their own, so its coverage is unknown")
    if "interval_note" in out:
        click.echo(f"warning: {out['interval_note']}", err=True)
    return out


def _sibling_between(predictor, row, op: str) -> bool:
    """Whether ``row``'s uncalibrated sibling band is the one between its key's seen and unseen bands."""
    from hybrid.ops.families import family_of

    intervals = getattr(predictor, "intervals", None)
    return intervals is not None and intervals.sibling_fallback(f"{row.get('method')}:{family_of(op).name}")


def _seen_device_reason(predictor, row, device: str, dtype: str, op: str, what: str) -> str:
    """Why a GEMM of a device the model fitted is on the unseen band (``reason`` of :func:`_interval`; '' for a
    device it never fitted): its dtype was never fitted on that device's units, or the device was fitted only in
    other op families (``HybridPredictor._bands``). The note called such a row's band that of an "unseen device"."""
    from hybrid.ops.families import family_of

    if row.get("interval_band") != "unseen" or device not in getattr(predictor, "devices_seen", ()):
        return ""
    family = family_of(op).name
    corr = next((c for c in getattr(predictor, "corrections", []) if family in c.families and c.fitted), None)
    if corr is None:
        return ""
    dtypes = (getattr(predictor, "dtypes_fitted", {}) or {}).get(corr.key, {}).get(device)
    if dtypes:  # (a dtype it was fitted in: unseen for another reason, an adaptation, say; the note stays generic)
        return "" if dtype in dtypes else f"{dtype} on {device}, whose {what}s the model fitted only in {', '.join(dtypes)}"
    return f"{device} was fitted only in other op families than {what}s"


def _memory_fit(frame, cat, **target: str) -> dict:
    """``footprint_bytes`` / ``fits_memory`` of the op (:func:`hybrid.ops.roofline.memory_fit`) and, when its
    operands exceed the device's memory, ``memory_note`` (also printed to stderr)."""
    fit = memory_fit(frame, cat, **target)
    out: dict = {"footprint_bytes": float(fit["footprint_bytes"].iloc[0]), "fits_memory": bool(fit["fits_memory"].iloc[0])}
    if not out["fits_memory"]:
        out["memory_note"] = (f"the operands ({format_bytes(out['footprint_bytes'])}) exceed the device's memory "
                              f"({format_bytes(float(fit['device_memory_bytes'].iloc[0]))}): the real device cannot "
                              "run this op; the time assumes it could")
        click.echo(f"warning: {out['memory_note']}", err=True)
    return out


def _unseen_dtype(predictor, dtype: str) -> dict:
    """``dtype_proxy`` / ``dtype_note`` when the predictor's GEMM model was never fitted on ``dtype``, else {}."""
    corr = next((c for c in getattr(predictor, "corrections", []) if getattr(c, "fitted_dtypes", None)), None)
    if corr is None or normalize_dtype(dtype) in corr.fitted_dtypes:
        return {}
    proxy = corr.proxy_for(dtype)
    how = (f"priced at the model's {proxy} efficiency for this shape on the {dtype} roofline (dtype proxy)" if proxy
           else "the trees extrapolate from the fitted dtypes")
    return {"dtype_proxy": proxy or None,
            "dtype_note": f"no {dtype} GEMM in the calibration ({', '.join(sorted(corr.fitted_dtypes))}): {how}"}


class _Count(click.ParamType):
    """A GEMM dimension as `predict op` reads one (:func:`~hybrid.units.parse_count`): 4096, 64K; 64MiB refused."""

    name = "integer"

    def convert(self, value, param, ctx):
        try:
            return parse_count(value)
        except InvalidInputError as exc:
            self.fail(str(exc), param, ctx)


COUNT = _Count()


@predict.command("gemm")
@click.option("--device", "-d", required=True, callback=warn_arch_device, help="Catalog device (any alias).")
@click.option("--dtype", default="bf16", show_default=True)
@click.option("-m", type=COUNT, required=True)
@click.option("-n", type=COUNT, required=True)
@click.option("-k", type=COUNT, required=True)
@click.option("-b", "--batch", "b", type=COUNT, default=1, show_default=True, help="Batch count (BMM).")
@click.option("--json", "as_json", is_flag=True)
@_model_options
def gemm(device: str, dtype: str, m: int, n: int, k: int, b: int, as_json: bool, model_ref: str | None,
         tracking_uri: str | None) -> None:
    """C[b,m,n] = A[b,m,k] @ B[b,k,n]; GEMV when m or n is 1."""
    dims = (("-m", m), ("-n", n), ("-k", k), ("--batch", b))
    bad = [f"{flag} must be > 0, got {v}" for flag, v in dims if v < 1]
    # the measurement schema's bound on a count (--model validates through it; it said "row 1 (CSV line 2), column
    # 'm': ... too large" there, and the roofline timed the GEMM)
    bad += [f"{flag} must be below 2^62, got {v}" for flag, v in dims if v >= MAX_INT]
    if bad:
        raise InvalidInputError("; ".join(bad))
    spec = Gemm(m=m, n=n, k=k, b=b, dtype=dtype, op="bmm" if b > 1 else ("gemv" if 1 in (m, n) else "gemm"))
    _predict_kernel(spec.to_frame(), device, spec.dtype, spec.op, "GEMM" if spec.op != "gemv" else "GEMV",
                    as_json, model_ref, tracking_uri)



def _fallback_path(frame, cat) -> dict:
    """``path_note`` (also printed to stderr) and ``fallback_kernel_us`` when the GEMM is a 16-bit one whose row
    strides a Hopper / Blackwell cannot feed to its TMA tensor cores (:mod:`hybrid.ops.gemm_paths`): a calibrated
    model never prices it under that time; the roofline alone does not know it."""
    from hybrid.ops.gemm_paths import misaligned_kernel_us

    us = float(misaligned_kernel_us(frame, cat)[0])
    if not np.isfinite(us):
        return {}
    note = ("n or k is not a multiple of 8 elements (16 bytes): this GPU cannot feed such a GEMM to its TMA tensor "
            f"cores; cuBLAS runs older kernels, at least {us:.4g} us of kernel time (padding n and k to multiples "
            "of 8 avoids it)")
    click.echo(f"warning: {note}", err=True)
    return {"fallback_kernel_us": us, "path_note": note}


def _predict_kernel(frame, device: str, dtype: str, op: str, what: str, as_json: bool, model_ref: str | None,
                    tracking_uri: str | None, shape: dict | None = None) -> None:
    """Predict and print the one kernel row ``frame`` (any family but collectives; no ``device`` column) on
    ``device``: the roofline or, with ``model_ref``, the calibrated model with its interval, the peak-dtype and
    memory-fit notes. ``predict gemm`` and ``predict op`` share it, so both print the same keys; ``what`` names
    the kind of op in the interval notes; ``shape`` (``predict op``: the columns given) is printed after the
    dtype."""
    cat = default_catalog()
    extra: dict = {}
    if model_ref:
        # the model's catalog may know devices the packaged one does not (a profiled CPU, say)
        from hybrid.tracking.registry import load_predictor

        loaded = load_predictor(model_ref, tracking_uri=tracking_uri)
        cat = loaded.predictor.catalog
        dev = cat.device(device)
        out = loaded.predictor.predict(frame.assign(device=dev.key)).iloc[0]
        why = _seen_device_reason(loaded.predictor, out, dev.key, dtype, op, what)
        extra = {"model": loaded.ref, "roofline_us": float(out["roofline_us"]), "method": str(out["method"]),
                 **_interval(out, what, _sibling_between(loaded.predictor, out, op), reason=why)}
        if family_of(op).name == "gemm":  # the GEMM model's fitted dtypes (other families have no dtype proxy)
            unseen = _unseen_dtype(loaded.predictor, dtype)
            if unseen:
                extra.update(unseen)
                click.echo(f"warning: {unseen['dtype_note']}", err=True)
    dev = cat.device(device)
    used = dev.compute_peak_dtype(dtype)
    if used != dtype:
        extra["peak_dtype"] = used
        why = (f"its {dtype} units add in 16 bits, so FP32-accumulating kernels run" if
               dev.peak_dtype(dtype) == dtype else f"it has no {dtype} units: timed")
        extra["note"] = (f"{dev.key}: {why} at its {used} peak ({dev.peak(used) / 1e12:.4g} TFLOP/s) with "
                         f"{dtype} operand sizes")
        click.echo(f"warning: {extra['note']}", err=True)  # stderr: the --json output stays one object
    elif dev.lacks_units(dtype):  # bf16 before Ampere: listed (and run) at the fp32 rate
        extra["note"] = dev.slow_dtype_note(dtype)
        click.echo(f"warning: {extra['note']}", err=True)
    row = roofline(frame, cat, device=dev.key).iloc[0]
    extra.update(_memory_fit(frame, cat, device=dev.key))
    if family_of(op).name == "gemm":
        extra.update(_fallback_path(frame.assign(device=dev.key, op=op), cat))
    t = float(out["time_us"]) if model_ref else float(row["time_us"])
    flops, nbytes = float(row["flops"]), float(row["bytes"])
    _report({
        "device": dev.key, "op": op, "dtype": dtype, **(shape or {}), "model": "roofline",
        "time_us": t, "tflops_achieved": flops / (t * 1e-6) / 1e12,
        "bound": str(out["bound"] if model_ref else row["bound"]), "flops": flops,
        "bytes": nbytes, "arithmetic_intensity": flops / nbytes if nbytes > 0 else float("nan"),
        **extra,
    }, as_json)


@predict.command("collective")
@click.option("--system", "-s", required=True, callback=named, help="Catalog system (or a device: a generic node of it; a CPU: the catalog's system of "
                   "it, its processes' gloo collectives).")
@click.option("--op", "op", required=True,
              type=click.Choice(list(COLLECTIVE_OPS)))  # every collective a table (nccl-tests) can hold
@click.option("--size", required=True, help="Message size as nccl-tests reports it: 4096, 64KiB, 64MiB, 1GB (decimal), 8G (binary, as nccl-tests' "
                   "-b/-e read it).")
@click.option("--ranks", type=click.IntRange(min=2), required=True,
              help="GPUs taking part (at least 2: a collective of one rank moves nothing).")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True, help="Nodes the ranks span.")
@click.option("--dtype", default="fp32", show_default=True)
@click.option("--json", "as_json", is_flag=True)
@_model_options
def collective(system: str, op: str, size: str, ranks: int, nodes: int, dtype: str, as_json: bool,
               model_ref: str | None, tracking_uri: str | None) -> None:
    """Collective time from the alpha-beta model (bus factor, intra-node fabric, NICs), or a calibrated model."""
    cat = default_catalog()
    size_bytes = parse_size(size)
    if size_bytes >= MAX_INT:  # as -m/-n/-k: the schema's bound, refused by --model, timed by the roofline
        raise InvalidInputError(f"--size {size!r} must be below 2^62 bytes (4 EiB)")
    if ranks >= MAX_INT:
        raise InvalidInputError(f"--ranks must be below 2^62, got {ranks}")
    if nodes > ranks:  # said with the options (the spec named its fields: "n_nodes (4) cannot exceed n_ranks (2)")
        raise InvalidInputError(f"--ranks {ranks} cannot span --nodes {nodes}: every node needs a rank")
    elem = int(dtype_bytes(dtype))  # also refuses an unknown dtype
    if elem >= 1 and size_bytes % elem:  # said here with what was typed: the spec's error named the rounded bytes
        read = "" if size.strip() == str(size_bytes) else f"; it reads as {size_bytes:,} B"  # (--size 1.5: "2 B")
        raise InvalidInputError(f"--size {size!r} is not a whole number of {dtype} elements ({elem} B each{read}): "
                                f"give a multiple of {elem} bytes")
    parse_size(size, whole=True)  # 1000.5 B was priced as 1000 B: refused, naming what was typed
    spec = Collective(op=op, size_bytes=size_bytes, n_ranks=ranks, n_nodes=nodes, dtype=dtype)
    frame = spec.to_frame()
    extra: dict = {}
    if model_ref:
        from hybrid.tracking.registry import load_predictor

        loaded = load_predictor(model_ref, tracking_uri=tracking_uri)
        cat = loaded.predictor.catalog
    sys_ = resolve_system(cat, system)
    generic = cat.resolve_system(system, missing_ok=True) is None
    cpu_note = None
    if generic:  # a bare CPU's processes exchange over gloo: its catalog system, as DLRM, LLM and traces price it
        gloo, cpu_note = cpu_collective_system(cat, cat.device(sys_.device), system, ranks)
        if gloo is not None:  # (a generic node priced them over a PCIe gen3 link: 97 us for 1 MiB, gloo 1.2 ms)
            system, sys_, generic = gloo.key, gloo, False
    beyond = sys_.check_layout(ranks, nodes, generic=generic)
    if cpu_note:
        extra["note"] = cpu_note
    elif generic:
        extra["note"] = (f"{system!r} is a device, not a catalog system: a hypothetical node of "
                         f"{sys_.gpus_per_node} x {sys_.device} ({sys_.intra_fabric}, {sys_.inter_fabric} between "
                         "nodes); name a catalog system (hybrid devices --systems) for a real one")
    if beyond:  # as the engine and the workloads cost it (a note, not a refusal)
        extra["note"] = f"{extra['note']}; {beyond}" if "note" in extra else beyond
    row = roofline(frame, cat, system=system).iloc[0]
    extra.update(_memory_fit(frame, cat, system=system))
    t = float(row["time_us"])
    bound = str(row["bound"])
    if model_ref:
        frame["device"] = sys_.device
        if cat.resolve_system(system, missing_ok=True) is not None:
            frame["system"] = sys_.key
        out = loaded.predictor.predict(frame).iloc[0]
        t, bound = float(out["time_us"]), str(out["bound"])
        why = loaded.predictor.collective_reasons(frame)[0]  # (and what a few-shot adaptation changed)
        extra.update({"model": loaded.ref, "roofline_us": float(out["roofline_us"]), "method": str(out["method"]),
                      **_interval(out, "collective", reason=why)})
        if why:  # why the row is on the unseen band (or the transfer model answered)
            extra["extrapolated"] = why
    _report({
        "system": sys_.key, "op": op, "size_bytes": spec.size_bytes, "size": format_bytes(spec.size_bytes),
        "ranks": ranks, "nodes": nodes, "model": "alpha-beta", "time_us": t,
        "algbw_gbps": spec.size_bytes / (t * 1e-6) / 1e9, "busbw_gbps": float(row["bytes"]) / (t * 1e-6) / 1e9,
        "bound": bound, **extra,
    }, as_json)


#: Columns ``predict op`` accepts for any family besides its shape and optional ones: what a measured row of it
#: may say that the predictor reads (the kernel flavour, the pass, the framework that ran it).
_COMMON_OP_COLUMNS = ("variant", "direction", "framework")
#: Columns of the schema that a family reads beyond its shape and optional ones (an elementwise row of an
#: interpolation gives its lines: ``hybrid.ops.families.upsample_row``).
_EXTRA_OP_COLUMNS = {"elementwise": ("rows", "hidden")}


def _op_columns(family) -> tuple[str, ...]:
    """The KEY=VALUE columns ``predict op`` accepts for ``family`` (an :class:`~hybrid.ops.families.OpFamily`)."""
    return tuple(dict.fromkeys((*family.shape_columns, *family.optional_columns,
                                *_EXTRA_OP_COLUMNS.get(family.name, ()), *_COMMON_OP_COLUMNS)))


def _op_value(key: str, text: str) -> object:
    """``text`` as the schema's column ``key`` holds it: counts as integers (or with a count suffix,
    :func:`~hybrid.units.parse_count`: 64K, 1M; a byte unit such as 1MB is refused), fractions as floats, flags and names as given (the schema decides)."""
    from hybrid.data.schema import COLUMN_BY_NAME

    kind = COLUMN_BY_NAME[key].kind
    if kind in ("str", "bool"):
        return text.strip()
    if text.strip().lower() in ("nan", "+nan", "-nan"):  # read as the column left out (its default), or "missing"
        raise InvalidInputError(f"{key}={text!r}: not a number (give one; an optional column left out takes its default)")
    try:
        return float(text) if kind == "float" or not text.strip().lstrip("+-").isdigit() else int(text)
    except ValueError:
        if kind == "float":
            raise InvalidInputError(f"{key}={text!r}: expected a number") from None
    try:
        return parse_count(text)  # 64K, 1M; a byte unit (64MiB, 1MB) is refused, as `predict gemm -m` refuses it
    except InvalidInputError as exc:
        raise InvalidInputError(f"{key}={text}: {exc}") from None


def op_frame(op: str, pairs: tuple[str, ...], dtype: str, device: str) -> tuple[pd.DataFrame, dict]:
    """The one-row canonical frame of kernel ``op`` from ``KEY=VALUE`` ``pairs`` (validated by the measurement
    schema, without a device column) and the given columns' values as the schema read them. Errors name the unknown op (and the known ones),
    the family's missing shape columns, keys the family does not accept (and those it does), and a bad value by
    its KEY=VALUE."""
    from hybrid.data.schema import validate
    from hybrid.errors import SchemaError
    from hybrid.ops.families import OP_TO_FAMILY

    name = op.strip().lower()
    kernels = sorted(o for o in OP_TO_FAMILY if o not in COLLECTIVE_OPS)
    if name in COLLECTIVE_OPS:
        raise InvalidInputError(f"{name} is a collective: use `hybrid predict collective --op {name}` (it takes "
                                "a system, ranks and nodes)")
    if name not in OP_TO_FAMILY:
        raise InvalidInputError(f"unknown op {op!r}; known: {', '.join(kernels)}")
    family = family_of(name)
    accepted = _op_columns(family)
    given: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        key = key.strip().lower()
        if not eq or not key or not value.strip():
            raise InvalidInputError(f"{pair!r}: shape values are KEY=VALUE (e.g. rows=4096); {name} takes "
                                    f"{', '.join(accepted)}")
        if key in given:
            raise InvalidInputError(f"{key} given twice ({key}={given[key]}, {pair})")
        given[key] = value
    unknown = [k for k in given if k not in accepted]
    if unknown:
        raise InvalidInputError(f"{name} ({family.name} family) does not take {', '.join(unknown)}; it takes "
                                f"{', '.join(accepted)}")
    missing = [c for c in family.shape_columns if c not in given]
    if missing:
        raise InvalidInputError(f"{name} needs {', '.join(f'{c}=...' for c in missing)} (the {family.name} "
                                f"family's shape: {', '.join(family.shape_columns)})")
    values = {k: _op_value(k, v) for k, v in given.items()}
    if name == "gemv" and 1 not in (values.get("m"), values.get("n")):  # the kernel model's is_gemv reads the op
        raise InvalidInputError(f"gemv m={values.get('m')} n={values.get('n')}: a GEMV has m=1 or n=1 (a vector); "
                                "use `hybrid predict op gemm` for a matrix")
    raw = pd.DataFrame([{"device": device, "op": name, "dtype": dtype, "time_us": 1.0, **values}])
    try:
        norm = validate(raw, resolve_devices=False)
    except SchemaError as exc:
        args = getattr(exc, "row_args", None)
        if args is None:
            raise
        column, problem = args[1], args[2]
        label = f"--dtype {dtype}" if column == "dtype" else f"{column}={given.get(column, values.get(column))}"
        raise InvalidInputError(f"{name} {label}: {problem}") from None
    # the values as the schema read them (causal=yes -> true, direction=BWD -> bwd), for the report
    shown = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in norm.iloc[0].items() if k in given}
    return norm.drop(columns=["device", "time_us"]), shown


def unknown_variant_note(values: dict) -> str | None:
    """The warning for an elementwise ``variant`` the library has no counts for (:data:`hybrid.ops.families.
    ELEMENTWISE_VARIANTS`, pooling / upsampling / grid-sampling rows aside) whose inputs, outputs or FLOPs per
    element were left out: they take 1 / 1 / 1 (``variant=foo`` was priced so without a word); None otherwise."""
    from hybrid.ops.families import (
        ELEMENTWISE_VARIANTS,
        is_grid_sample_variant,
        is_pool_variant,
        is_upsample_variant,
        variant_base,
    )

    variant = values.get("variant")
    if not isinstance(variant, str) or not variant:
        return None
    base = variant_base(variant.lower())
    if (base in ELEMENTWISE_VARIANTS or is_pool_variant(base) or is_upsample_variant(base)
            or is_grid_sample_variant(base)):
        return None
    left = [k for k in ("n_inputs", "n_outputs", "flops_per_element") if k not in values]
    if not left:
        return None
    return (f"variant {variant!r} is not one the library has counts for (known: {', '.join(sorted(ELEMENTWISE_VARIANTS))}"
            f"): {', '.join(left)} taken as 1; give {'/'.join(f'{k}=...' for k in left)} for its real traffic and work")


@predict.command("op")
@click.argument("op")
@click.argument("shape", nargs=-1)
@click.option("--device", "-d", required=True, callback=warn_arch_device, help="Catalog device (any alias).")
@click.option("--dtype", default="fp32", show_default=True, help="Element type (the schema's default, fp32).")
@click.option("--json", "as_json", is_flag=True)
@_model_options
def op_command(op: str, shape: tuple[str, ...], device: str, dtype: str, as_json: bool, model_ref: str | None,
               tracking_uri: str | None) -> None:
    """One kernel of any op family by its op name (layernorm, softmax, elementwise, embedding_bag, attention,
    conv2d, gemm, ...), its shape as the measurement schema's columns: KEY=VALUE ... (`hybrid data schema`;
    counts take K/M/G/T, elements=64M, and no byte unit; direction=fwd|bwd, variant=gelu, causal=true, index_dist=zipf).

    Example: hybrid predict op layernorm -d H100 --dtype bf16 rows=16384 hidden=8192 direction=bwd"""
    dtype = normalize_dtype(dtype)
    frame, values = op_frame(op, shape, dtype, device)
    name = str(frame["op"].iloc[0])
    note = unknown_variant_note(values)
    if note:
        click.echo(f"warning: {note}", err=True)
    _predict_kernel(frame, device, dtype, name, name.upper() if name in ("gemm", "gemv", "bmm") else name,
                    as_json, model_ref, tracking_uri, shape=values)


def _predicted_columns(table: pd.DataFrame, predicted: pd.DataFrame) -> pd.DataFrame:
    """``table`` (the rows to predict) with the prediction columns appended: ``predicted_us``, ``roofline_us``,
    ``bound``, ``method`` and, where the model has intervals, ``predicted_us_low`` / ``predicted_us_high`` /
    ``interval_band`` (the names ``hybrid evaluate -o`` writes)."""
    out = table.reset_index(drop=True).copy()
    taken = [c for c in ("predicted_us", "roofline_us", "bound", "method", "predicted_us_low", "predicted_us_high",
                         "interval_band") if c in out.columns]
    if taken:
        raise InvalidInputError(f"the table already has the column(s) {', '.join(taken)} that the predictions "
                                "are written to (a predictions file? predict its input table)")
    out["predicted_us"] = predicted["time_us"].to_numpy(dtype=float)
    out["roofline_us"] = predicted["roofline_us"].to_numpy(dtype=float)
    out["bound"] = predicted["bound"].astype(str).to_numpy()
    out["method"] = predicted["method"].astype(str).to_numpy()
    if "time_us_low" in predicted.columns and predicted["time_us_low"].notna().any():
        out["predicted_us_low"] = predicted["time_us_low"].to_numpy(dtype=float)
        out["predicted_us_high"] = predicted["time_us_high"].to_numpy(dtype=float)
        if "interval_band" in predicted.columns:
            out["interval_band"] = predicted["interval_band"].astype(object).to_numpy()
    return out


@predict.command("table")
@click.argument("table", type=click.Path(exists=True, dir_okay=False))
@click.option("--output", "-o", required=True, type=click.Path(), callback=named,
              help="Where to write the predictions (CSV; Parquet for a .parquet name).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object summarising what was written.")
@_model_options
def table_command(table: str, output: str, as_json: bool, model_ref: str | None, tracking_uri: str | None) -> None:
    """Predict every row of a canonical op TABLE (CSV/Parquet, the measurement schema's columns; time_us and the
    other measured columns are optional and ignored) in one call and write it with predicted_us, roofline_us,
    bound, method and, with a calibrated model, the 80% interval (predicted_us_low / predicted_us_high,
    interval_band). A bad row fails with its row and CSV line named, and nothing is written."""
    from hybrid.cli.evaluate import (
        catalog_for_tables,
        dtype_fallback_notes,
        load_model_for,
        load_registered,
        write_predictions,
    )
    from hybrid.corrections.predictor import MEASURED_COLUMNS
    from hybrid.data.bundle import CATALOG_FILE, bundle_catalog
    from hybrid.data.schema import check_rows, check_table_path, read_table, resolve_system_names, validate
    from hybrid.tracking.inputs import merge_catalog

    check_table_path(output)  # before any work: a bad name fails fast
    refuse_output_among_tables(output, [table])
    path = Path(table)
    registered = load_registered(model_ref, tracking_uri) if model_ref else None
    cat = catalog_for_tables(registered)  # with the devices only the model knows (a profiled machine's)
    if (path.parent / CATALOG_FILE).is_file():  # a table inside a bundle: its devices, as `hybrid evaluate` reads it
        cat, _ = merge_catalog(cat, bundle_catalog([path]))
    # in the file's column order: the written table is the user's, their columns as they laid them out
    raw = read_table([path], cat, validate_rows=False, file_order=True, required=("device", "op"))
    # the measured columns are not inputs: a table of ops to time need not have them, and their values are ignored
    inputs = raw.drop(columns=[c for c in MEASURED_COLUMNS if c in raw.columns]).assign(time_us=1.0)
    norm = validate(inputs, cat, source=str(path))
    with said_warnings():  # rows kept but said (a collective's device that is not its system's GPU)
        base = check_rows(norm, cat, str(path))  # the roofline's per-row checks, named by row and CSV line
    norm = resolve_system_names(norm, cat)  # systems as the catalog names them, as the devices are
    if model_ref:
        loaded = load_model_for(model_ref, tracking_uri, cat, pd.unique(norm["device"].astype(str)),
                                loaded=registered)
        predicted = loaded.predictor.predict(norm.drop(columns=["time_us"]))
        ref = loaded.ref
    else:
        predicted = pd.DataFrame({"time_us": base["time_us"].to_numpy(dtype=float),
                                  "roofline_us": base["time_us"].to_numpy(dtype=float),
                                  "bound": base["bound"].astype(str).to_numpy(), "method": "roofline"})
        ref = "roofline"
    # the rows as the schema reads them (device keys, whole numbers written as such), measured columns as given
    rows = norm.drop(columns=["time_us"]).assign(**{c: raw[c].to_numpy() for c in MEASURED_COLUMNS if c in raw})
    frame = _predicted_columns(rows[[c for c in raw.columns if c in rows] + [c for c in rows if c not in raw]],
                               predicted)
    write_predictions(frame, output)
    result = {"output": str(output), "n_rows": len(frame), "model": ref,
              "total_predicted_us": float(frame["predicted_us"].sum()),
              "by_method": {str(k): int(v) for k, v in frame["method"].value_counts().items()}}
    notes = []
    if "predicted_us_low" in frame.columns:
        no_band = int(frame["predicted_us_low"].isna().sum())
        # what `predict gemm` / `op` say of one row (interval_note, dtype_note), counted over the table: an interval
        # not calibrated for its case and a GEMM dtype the model never fitted, which the table used to hide
        borrowed = (int((~predicted["interval_calibrated"].to_numpy(bool)).sum()) - no_band
                    if "interval_calibrated" in predicted.columns else 0)
        result["rows_without_interval"], result["rows_interval_borrowed"] = no_band, borrowed
        if borrowed:
            notes.append(f"{borrowed:,} of {len(frame):,} rows have an 80% interval not calibrated for their case "
                         "(borrowed from another band, op family or model: its coverage is unknown; `hybrid predict "
                         "gemm|op|collective --model` says why for one row)")
    if model_ref:
        gemm_rows = family_array(norm["op"]) == "gemm"
        dtype_notes = [n for d in pd.unique(norm.loc[gemm_rows, "dtype"].astype(str))
                       if (n := _unseen_dtype(loaded.predictor, d).get("dtype_note"))]
        if dtype_notes:
            result["dtype_notes"] = dtype_notes
        notes += dtype_notes
    fallbacks = dtype_fallback_notes(norm, loaded.predictor.catalog if model_ref else cat)
    if fallbacks:
        result["dtype_fallbacks"] = fallbacks
    for note in notes + fallbacks:  # stderr: the --json output stays one object
        click.echo(f"warning: {note}", err=True)
    if as_json:
        echo_json(result)
        return
    per = ", ".join(f"{m} {n:,}" for m, n in result["by_method"].items())
    click.echo(f"{len(frame):,} rows predicted with {ref} ({per}): {output}")
