"""``hybrid data``: import public measurement formats, list and pull sources, validate tables, print the schema."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import click

from hybrid.cli.output import echo_json, echo_table, named_path, said_warnings, warn_arch_device
from hybrid.errors import InvalidInputError


@click.group()
def data() -> None:
    """Measurement data: import public formats into the canonical table, sources, validation, schema."""


@data.command("formats")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def formats(as_json: bool) -> None:
    """List the import formats and the files each reads in the public data layout."""
    from hybrid.data.importers import IMPORTERS

    rows = [{"format": i.name, "description": i.description, "globs": list(i.globs)} for i in IMPORTERS.values()]
    if as_json:
        echo_json(rows)
        return
    echo_table([[r["format"], r["description"]] for r in rows], ["format", "description"])


@data.command("import")
@click.argument("fmt", metavar="FORMAT")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(), callback=named_path,
              help="Output table (.csv or .parquet); written atomically.")
@click.option("--device", default=None, callback=warn_arch_device,
              help="Catalog device that ran the measurements (overrides the files).")
@click.option("--system", default=None, help="Catalog system the collectives ran on (overrides inference).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar, no warnings.")
@click.option("--kernel-times", is_flag=True,
              help="vidur-compute only: label the rows as the kernel times they are (framework 'vidur'), for "
                   "calibrating kernel-bound LLM serving/training; default: framework-timed, as the mixed-source "
                   "calibrations use them (hybrid.data.importers.vidur.kernel_timed).")
def import_cmd(fmt: str, paths: tuple[Path, ...], output: Path, device: str | None, system: str | None,
               quiet: bool, kernel_times: bool) -> None:
    """Import FILES/DIRECTORIES of FORMAT into a canonical measurement table.

    Directories are searched with the format's patterns (see `hybrid data formats`). Example:

        hybrid data import nccl-tests ../shared/datasets/nccl-tests -o nccl.parquet
    """
    from hybrid.data.importers import get_importer, import_paths
    from hybrid.data.schema import check_table_path, write_table
    from hybrid.hardware.catalog import default_catalog

    check_table_path(output)
    _refuse_output_among_inputs(get_importer(fmt), list(paths), output)
    if system is not None and not get_importer(fmt).takes_system:
        raise InvalidInputError(f"--system names the system collectives ran on; {get_importer(fmt).name} files hold "
                                "single-device kernels (use --device to name the device)")
    if kernel_times and get_importer(fmt).name != "vidur-compute":
        raise InvalidInputError(f"--kernel-times applies to vidur-compute only, not {fmt!r}")
    cat = default_catalog()
    if device is not None:  # checked here, where it is the option's fault, not each file's ("pass --device")
        from hybrid.errors import UnknownDeviceError

        try:
            cat.resolve_device(device)
        except UnknownDeviceError as exc:
            raise InvalidInputError(f"--device: {exc}") from None
    with said_warnings(show=not quiet):  # also when it fails: they say why no rows were found
        table = import_paths(fmt, list(paths), device=device, system=system, catalog=cat, progress=not quiet)
    if not quiet:
        for note in _override_notes(fmt, list(paths), table, device, system, cat):
            click.echo(f"warning: {note}", err=True)
    if kernel_times:
        from hybrid.data.importers.vidur import kernel_timed

        table = kernel_timed(table)
    write_table(table, output, cat, validate_rows=False)
    summary = table.groupby(["op", "device"], dropna=False).size()
    n_ops, n_dev = summary.index.get_level_values(0).nunique(), table["device"].nunique()
    click.echo(f"wrote {len(table)} rows ({n_ops} op{'s' * (n_ops != 1)}, {n_dev} device{'s' * (n_dev != 1)}) "
               f"to {output}")


def _refuse_output_among_inputs(importer: Any, paths: list[Path], output: Path) -> None:
    """An output that is one of the files read (named, or found in a named directory) would replace the raw
    measurements with their canonical table: the import succeeded and the source file was gone. Refused."""
    if not output.exists():
        return
    out = output.resolve()
    for p in paths:
        inputs = [p] if p.is_file() else importer.find(p) if p.is_dir() and out.is_relative_to(p.resolve()) else []
        if any(f.resolve() == out for f in inputs):
            raise InvalidInputError(f"output {output} is one of the {importer.name} files read (from {p}); writing "
                                    "it would replace those measurements: choose another output path")


def _override_notes(fmt: str, paths: list[Path], table: Any, device: str | None, system: str | None,
                    cat: Any) -> list[str]:
    """What --device / --system changed that the files said otherwise: rows the files attribute to other devices
    (relabelled), and rows of a device other than the system's own GPU (kept, costed on that system's fabric)."""
    from hybrid.data.importers import import_paths
    from hybrid.errors import HybridError

    notes = []
    if device is not None:
        try:  # what the files say without the override (formats whose files name no device refuse: nothing to say)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                said = import_paths(fmt, paths, system=system, catalog=cat)["device"].astype(str)
        except HybridError:
            said = None
        if said is not None:
            other = said[said != str(table["device"].iloc[0])]
            if len(other):
                names = sorted(set(other))
                notes.append(f"--device relabelled {len(other)} rows the files attribute to {', '.join(names[:6])}"
                             + (f" and {len(names) - 6} more" if len(names) > 6 else "") + f" as "
                             f"{table['device'].iloc[0]}")
    if system is not None and "system" in table.columns:
        own = cat.systems[cat.resolve_system(system)].device
        others = sorted(set(table["device"].astype(str)) - {own})
        if others:
            notes.append(f"system {system}'s GPUs are {own}; rows of {', '.join(others)} keep their device and are "
                         "costed on its fabric")
    return notes


@data.command("validate")
@click.argument("tables", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def validate_cmd(tables: tuple[Path, ...], as_json: bool) -> None:
    """Check measurement TABLES (canonical CSV/Parquet files, or `hybrid profile` bundle directories) against the
    schema; print row counts per op and device. A bundle's catalog.toml (or that of a table's directory) names
    its devices."""
    from hybrid.data.bundle import bundle_catalog
    from hybrid.data.quality import failed_validation, implausible_findings, repeated_configs
    from hybrid.tracking.inputs import load_measurements

    with said_warnings():
        data = load_measurements(list(tables), bundle_catalog(list(tables)))
    df = data.table
    partial, unreadable_meta = _partial_bundles(tables)
    counts = df.groupby(["op", "device"]).size().reset_index(name="rows")
    # physically implausible groups (GPU GEMMs faster than the datasheet peak): valid rows, but every fit leaves
    # them out; said here so that a unit slip (ms in time_us) shows before a calibration
    # (on the roofline computed while the rows were checked: not a second time)
    # collectives far faster than their fabric allows (a log in ms, the wrong system): calibration leaves them out
    findings = implausible_findings(df, data.roofline(), data.catalog)
    # rows whose benchmark reported wrong results (nccl-tests #wrong > 0): calibrate and evaluate drop them
    wrong = int(failed_validation(df).sum())
    # configurations measured more than once: kept (each a sample for the fits), said with how far they spread
    _, repeats = repeated_configs(df)
    if as_json:
        echo_json({"rows": len(df), "by_op_device": counts.to_dict(orient="records"),
                   **{key: value for key, (value, _) in findings.items()},
                   "failed_validation": {"rows": wrong},
                   "partial_bundles": [{"bundle": str(p), **stop} for p, stop in partial],
                   "unreadable_meta": [str(m) for m in unreadable_meta],
                   "repeated": {"configs": int(repeats["configs"].sum()), "rows": int(repeats["rows"].sum()),
                                "differing": int(repeats["differing"].sum()),
                                "by_op_device": repeats.astype(object).where(repeats.notna(), None)
                                .to_dict("records")}})
        return
    echo_table(counts.values.tolist(), ["op", "device", "rows"])
    if len(repeats):
        click.echo("\nconfigurations measured more than once (all kept: each is a sample for the fits; spread: "
                   "slowest / fastest time of a configuration whose times differ):")
        echo_table([[r.op, r.device, r.configs, r.rows, r.differing,
                     "" if r.spread_median != r.spread_median else f"{r.spread_median:.3f}x",
                     "" if r.spread_max != r.spread_max else f"{r.spread_max:.3f}x"] for r in repeats.itertuples()],
                   ["op", "device", "configs", "rows", "differing", "median spread", "max spread"])
    for _, said in findings.values():
        if said:
            click.echo(f"warning: {said}", err=True)
    for p, stop in partial:
        how = f"failed ({stop['error']})" if stop.get("by") == "error" and stop.get("error") else "was interrupted"
        click.echo(f"warning: {p} is a partial bundle: its profile {how} (families not complete: "
                   f"{', '.join(stop.get('families_not_complete') or []) or 'unknown'}); measure the rest with "
                   f"`{stop.get('resume', 'hybrid profile --skip-existing ...')}` and merge the two", err=True)
    for m in unreadable_meta:
        click.echo(f"warning: {m} is not valid JSON: whether its profile completed is unknown (an interrupted one "
                   "names the families it lacks there); its rows are checked all the same", err=True)
    if wrong:
        click.echo(f"warning: {wrong:,} of {len(df):,} rows report wrong results (#wrong > 0 in the benchmark's own "
                   "check), which calibration and evaluate leave out", err=True)
    click.echo(f"ok: {len(df)} rows in {len(tables)} table(s)")


def _partial_bundles(paths: tuple[Path, ...]) -> tuple[list[tuple[Path, dict[str, Any]]], list[Path]]:
    """The bundles among ``paths`` whose ``meta.json`` says the profile was interrupted (``partial``), with their
    ``interrupted`` record, and the ``meta.json`` files that are not valid JSON (whether their profile completed is
    unknown; the table's rows are checked all the same). A merged bundle lists both per run: flagged when its last
    run, the one that measured the rest (a resumed ``gpu-session`` step), was cut short too; an earlier partial run's
    rest may be in it."""
    from hybrid.data.bundle import META_FILE, partial_stop, read_meta
    from hybrid.errors import SchemaError

    found, unreadable = [], []
    for p in paths:
        try:
            meta = read_meta(p) if p.is_dir() else {}
        except SchemaError:  # said (was skipped in silence: a partial bundle cut mid-write validated as whole)
            unreadable.append(p / META_FILE)
            continue
        stop = partial_stop(meta)
        if stop is not None:
            found.append((p, stop))
    return found, unreadable


@data.command("schema")
def schema_cmd() -> None:
    """Print the canonical table's columns and op families as markdown."""
    from hybrid.data.schema import schema_markdown

    click.echo(schema_markdown())


@data.command("sources")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with upstream URLs).")
def sources_cmd(as_json: bool) -> None:
    """List the public measurement sources with upstream repository, commit, license and importer."""
    from hybrid.data.sources import load_sources

    srcs = load_sources()
    if as_json:
        echo_json([{**s.to_dict(), "urls": s.urls()[:3]} for s in srcs.values()])
        return
    echo_table([[s.name, s.local_path, f"{s.repository}@{s.commit[:8]}" if s.repository else "-", s.license,
                 s.importer or "-", len(s.files) or s.file_count, "yes" if s.derived else ""]
                for s in srcs.values()], ["source", "local path", "upstream", "license", "importer", "files", "derived"])


@data.command("pull")
@click.argument("name")
@click.option("--from", "from_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Local mirror in the public data layout (default: download from upstream at the pinned commit).")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False), callback=named_path,
              help="Directory to materialise the source in (public data layout).")
def pull_cmd(name: str, from_dir: Path | None, out_dir: Path) -> None:
    """Materialise source NAME under OUTPUT, verified by sha256 (nothing is written unless all files match)."""
    from hybrid.data.sources import pull

    target = pull(name, out_dir, from_dir=from_dir, progress=True)
    click.echo(f"pulled {name} to {target}")


@data.command("merge")
@click.argument("bundles", nargs=-1, required=True, type=click.Path(path_type=Path, file_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False), callback=named_path,
              help="Directory of the merged bundle (written atomically).")
@click.option("--replace", is_flag=True,
              help="A configuration in several bundles keeps the last bundle's row (a re-measurement replaces it); "
                   "without it such a configuration is an error.")
@click.option("--note", default=None, help="Text for the merged meta.json's 'note'.")
@click.option("--force", is_flag=True, help="Replace an existing output directory.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def merge_cmd(bundles: tuple[Path, ...], output: Path, replace: bool, note: str | None, force: bool,
              as_json: bool) -> None:
    """Merge profiler BUNDLES of one device (e.g. one `hybrid profile --only F` run per family, or a committed
    bundle and families measured again) into one bundle."""
    from hybrid.data.bundle import merge_bundles, read_meta

    with said_warnings():  # as warning: lines, once the merge is written (or failed)
        path, table = merge_bundles(bundles, output, on_duplicate="last" if replace else "error", note=note,
                                    force=force)
    meta = read_meta(path)
    if as_json:
        echo_json({"path": str(path), "rows": len(table), "replaced_rows": meta["replaced_rows"],
                   "merged_from": meta["merged_from"]})
        return
    echo_table([[m["bundle"], m["rows_in"], m["rows_kept"], ", ".join(m["families"])] for m in meta["merged_from"]],
               ["bundle", "rows", "kept", "families"])
    click.echo(f"wrote {len(table)} rows ({meta['replaced_rows']} replaced by a later bundle) to {path}")
