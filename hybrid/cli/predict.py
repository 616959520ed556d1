"""``hybrid predict``: time one op on a device or system."""

from __future__ import annotations

import click

from hybrid.cli.output import echo_json, warn_arch_device
from hybrid.data.schema import MAX_INT
from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import default_catalog
from hybrid.ops.families import COLLECTIVE_OPS
from hybrid.ops.roofline import cpu_collective_system, memory_fit, resolve_system, roofline
from hybrid.ops.spec import Collective, Gemm
from hybrid.units import format_bytes, normalize_dtype, parse_size


@click.group()
def predict() -> None:
    """Predict the runtime of one op (roofline, or a calibrated model with --model)."""


def _model_options(fn):
    """``--model`` / ``--tracking-uri`` shared by the predict sub-commands."""
    fn = click.option("--tracking-uri", envvar="MLFLOW_TRACKING_URI",
                      help="MLflow store holding --model (default: local SQLite store).")(fn)
    return click.option("--model", "model_ref", default=None, callback=lambda _c, _p, v: None if v == "roofline" else v,
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


@predict.command("gemm")
@click.option("--device", "-d", required=True, callback=warn_arch_device, help="Catalog device (any alias).")
@click.option("--dtype", default="bf16", show_default=True)
@click.option("-m", type=int, required=True)
@click.option("-n", type=int, required=True)
@click.option("-k", type=int, required=True)
@click.option("-b", "--batch", "b", type=int, default=1, show_default=True, help="Batch count (BMM).")
@click.option("--json", "as_json", is_flag=True)
@_model_options
def gemm(device: str, dtype: str, m: int, n: int, k: int, b: int, as_json: bool, model_ref: str | None,
         tracking_uri: str | None) -> None:
    """C[b,m,n] = A[b,m,k] @ B[b,k,n]; GEMV when m or n is 1."""
    cat = default_catalog()
    dims = (("-m", m), ("-n", n), ("-k", k), ("--batch", b))
    bad = [f"{flag} must be > 0, got {v}" for flag, v in dims if v < 1]
    # the measurement schema's bound on a count (--model validates through it; it said "row 1 (CSV line 2), column
    # 'm': ... too large" there, and the roofline timed the GEMM)
    bad += [f"{flag} must be below 2^62, got {v}" for flag, v in dims if v >= MAX_INT]
    if bad:
        raise InvalidInputError("; ".join(bad))
    spec = Gemm(m=m, n=n, k=k, b=b, dtype=dtype, op="bmm" if b > 1 else ("gemv" if 1 in (m, n) else "gemm"))
    frame = spec.to_frame()
    extra: dict = {}
    if model_ref:
        # the model's catalog may know devices the packaged one does not (a profiled CPU, say)
        from hybrid.tracking.registry import load_predictor

        loaded = load_predictor(model_ref, tracking_uri=tracking_uri)
        cat = loaded.predictor.catalog
        dev = cat.device(device)
        frame["device"] = dev.key
        out = loaded.predictor.predict(frame).iloc[0]
        what = "GEMM" if spec.op != "gemv" else "GEMV"
        why = _seen_device_reason(loaded.predictor, out, dev.key, spec.dtype, spec.op, what)
        extra = {"model": loaded.ref, "roofline_us": float(out["roofline_us"]), "method": str(out["method"]),
                 **_interval(out, what, _sibling_between(loaded.predictor, out, spec.op), reason=why)}
        unseen = _unseen_dtype(loaded.predictor, spec.dtype)
        if unseen:
            extra.update(unseen)
            click.echo(f"warning: {unseen['dtype_note']}", err=True)
    dev = cat.device(device)
    used = dev.compute_peak_dtype(spec.dtype)
    if used != spec.dtype:
        extra["peak_dtype"] = used
        why = (f"its {spec.dtype} units add in 16 bits, so FP32-accumulating kernels run" if
               dev.peak_dtype(spec.dtype) == spec.dtype else f"it has no {spec.dtype} units: timed")
        extra["note"] = (f"{dev.key}: {why} at its {used} peak ({dev.peak(used) / 1e12:.4g} TFLOP/s) with "
                         f"{spec.dtype} operand sizes")
        click.echo(f"warning: {extra['note']}", err=True)  # stderr: the --json output stays one object
    elif dev.lacks_units(spec.dtype):  # bf16 before Ampere: listed (and run) at the fp32 rate
        extra["note"] = dev.slow_dtype_note(spec.dtype)
        click.echo(f"warning: {extra['note']}", err=True)
    row = roofline(frame, cat, device=dev.key).iloc[0]
    extra.update(_memory_fit(frame, cat, device=dev.key))
    t = float(out["time_us"]) if model_ref else float(row["time_us"])
    _report({
        "device": dev.key, "op": spec.op, "dtype": spec.dtype, "model": "roofline",
        "time_us": t, "tflops_achieved": float(row["flops"]) / (t * 1e-6) / 1e12,
        "bound": str(out["bound"] if model_ref else row["bound"]), "flops": float(row["flops"]),
        "bytes": float(row["bytes"]), "arithmetic_intensity": float(row["flops"]) / float(row["bytes"]),
        **extra,
    }, as_json)


@predict.command("collective")
@click.option("--system", "-s", required=True, help="Catalog system (or a device: a generic node of it; a CPU: the catalog's system of "
                   "it, its processes' gloo collectives).")
@click.option("--op", "op", required=True,
              type=click.Choice(list(COLLECTIVE_OPS)))  # every collective a table (nccl-tests) can hold
@click.option("--size", required=True, help="Message size as nccl-tests reports it: 4096, 64KiB, 64MiB, 1GB (decimal), 8G (binary, as nccl-tests' "
                   "-b/-e read it).")
@click.option("--ranks", type=click.IntRange(min=2), required=True,
              help="GPUs taking part (at least 2: a collective of one rank moves nothing).")
@click.option("--nodes", type=int, default=1, show_default=True)
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
    sys_.check_layout(ranks, nodes, generic=generic)
    if cpu_note:
        extra["note"] = cpu_note
    elif generic:
        extra["note"] = (f"{system!r} is a device, not a catalog system: a hypothetical node of "
                         f"{sys_.gpus_per_node} x {sys_.device} ({sys_.intra_fabric}, {sys_.inter_fabric} between "
                         "nodes); name a catalog system (hybrid devices --systems) for a real one")
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
        sigmoid = next((c for c in loaded.predictor.corrections if hasattr(c, "extrapolation_reason") and c.fitted),
                       None)
        why = sigmoid.extrapolation_reason(frame)[0] if sigmoid is not None else ""
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
