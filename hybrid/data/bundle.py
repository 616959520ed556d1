"""Measurement bundles: a directory holding ``measurements.csv``, ``catalog.toml`` and ``meta.json``.

``hybrid profile`` writes one per run. ``catalog.toml`` has the same format as the packaged
``hybrid/hardware/devices.toml`` / ``systems.toml`` (``[devices.<key>]`` and ``[systems.<key>]`` tables) and
describes the measured device (and, for collectives, the system), so the table validates against
``default_catalog()`` plus that file. Bundles are written atomically: everything goes into a temporary sibling
directory that is renamed into place, so a failed run leaves nothing behind.
"""

from __future__ import annotations

import json
import math
import os
import tomllib
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid.atomic import atomic_directory, check_creatable
from hybrid.errors import InvalidInputError, SchemaError
from hybrid.hardware.catalog import CATALOG_ENV, Catalog, default_catalog

TABLE_FILE = "measurements.csv"
CATALOG_FILE = "catalog.toml"
META_FILE = "meta.json"
#: Optional: the same configurations timed by their CUPTI kernels alone (``hybrid profile --kernel-times`` on a
#: GPU; ``framework = "cupti"``), beside the eager timings of :data:`TABLE_FILE`. Kept apart because a
#: configuration appears once per table (merging and ``--skip-existing`` key on it) and because the pointwise
#: models cannot yet tell the two timings apart (``docs/profiler.md``); :func:`load_kernel_times` reads it.
KERNEL_TIMES_FILE = "kernel_times.csv"


def _catalog_file(path: Path) -> Path | None:
    """The catalog.toml belonging to a bundle directory or to a table file inside one."""
    candidate = path / CATALOG_FILE if path.is_dir() else path.parent / CATALOG_FILE
    return candidate if candidate.is_file() else None


def _table_file(path: Path) -> Path:
    if path.is_dir():
        table = path / TABLE_FILE
        if not table.is_file():
            from hybrid.data.schema import looks_like_nccl_tests

            logs = any(looks_like_nccl_tests(f) for f in sorted(path.iterdir())[:50] if f.is_file())
            hint = (f"; it holds raw nccl-tests output: import it first with `hybrid data import nccl-tests {path} "
                    "-o table.csv --system NAME`" if logs else "")
            raise SchemaError(f"{path} is not a measurement bundle: it has no {TABLE_FILE}{hint}")
        return table
    if not path.is_file():
        raise SchemaError(f"measurement bundle or table not found: {path}")
    return path


def bundle_catalog(paths: str | os.PathLike | Iterable[str | os.PathLike], base_files: Iterable[str] | None = None
                   ) -> Catalog:
    """The default catalog (plus ``$HYBRID_CATALOG`` files, or ``base_files``) merged with the ``catalog.toml``
    of each bundle in ``paths`` (a bundle directory, or a table file whose directory holds one)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if base_files is None:
        base_files = [p for p in os.environ.get(CATALOG_ENV, "").split(os.pathsep) if p]
    extra = list(base_files)
    for p in paths:
        cat = _catalog_file(Path(p))
        if cat is not None and str(cat) not in extra:
            extra.append(str(cat))
    return default_catalog(extra)


def load_bundle(path: str | os.PathLike) -> tuple[pd.DataFrame, Catalog]:
    """Read a bundle directory (or a plain table file) and return ``(validated table, catalog)``.

    The catalog is :func:`default_catalog` merged with the bundle's ``catalog.toml`` (if any), so the bundle's
    own device and system resolve. Rows the roofline refuses are named by file, row and CSV line
    (:func:`hybrid.data.schema.check_rows`).
    """
    table, catalog, _ = load_bundle_checked(path)
    return table, catalog


def load_bundle_checked(path: str | os.PathLike, catalog: Catalog | None = None
                        ) -> tuple[pd.DataFrame, Catalog, pd.DataFrame]:
    """:func:`load_bundle` and the roofline frame of its rows, computed while checking them (same index; empty
    for a bundle without eager rows), for callers that would compute it again. ``catalog``: the one to read a
    bundle without a ``catalog.toml`` with (a model's, which knows the devices it was fitted on; a bundle copied
    without its catalog file named its own device unknown although the model knew it), instead of the default."""
    from hybrid.data.schema import check_rows, read_table

    p = Path(path)
    table_path = _table_file(p)
    catalog = catalog if catalog is not None and _catalog_file(p) is None else bundle_catalog([p])
    if p.is_dir() and _no_eager_rows(p):  # kernel times alone, or the record of a run that failed at once
        return pd.DataFrame(columns=pd.read_csv(table_path, nrows=0).columns), catalog, pd.DataFrame()
    table = read_table(table_path, catalog)
    return table, catalog, check_rows(table, catalog, str(table_path))


def _header_only(path: Path) -> bool:
    """Whether the bundle's eager table is a header alone."""
    try:
        with open(path / TABLE_FILE, encoding="utf-8") as fh:
            return sum(1 for line in fh if line.strip()) <= 1
    except OSError:
        return False


def _kernel_only(path: Path) -> bool:
    """A bundle whose eager table is a header alone beside a kernel-times table (see :func:`write_bundle`)."""
    return (path / KERNEL_TIMES_FILE).is_file() and _header_only(path)


def _failure_record(path: Path) -> bool:
    """A partial bundle of no rows: the record of a profile that failed on its first configuration (``meta.json``
    names it, so that a resume skips it; see :func:`write_bundle`'s ``record``)."""
    if not _header_only(path):
        return False
    try:
        meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and partial_stop(meta) is not None


def _no_eager_rows(path: Path) -> bool:
    """A bundle whose eager table is a header alone by design: kernel times alone, or a failure record."""
    return _kernel_only(path) or _failure_record(path)


#: Device kinds :func:`project_bundles` can select.
BUNDLE_KINDS = ("gpu", "cpu")


def project_bundles(kind: str | None = None, root: str | os.PathLike | None = None) -> list[Path]:
    """The committed measurement bundles (``datasets/*/`` holding a ``measurements.csv``; ``root`` instead of the
    checkout's ``datasets/``), sorted by name. ``kind`` (``"gpu"`` or ``"cpu"``) keeps the bundles whose measured
    devices are all of that kind in the bundle's catalog.

    These are the project's own measurements (``hybrid profile`` runs). The LLM and kernel benchmarks calibrate
    on public data only unless asked (``--with-gpu-bundles``): the GPU bundles time eager PyTorch ops (host
    dispatch included) and made the held-out figures worse (``experiments/gpu_bundles/results.md``)."""
    from hybrid.data.paths import project_datasets_dir

    if kind is not None and kind not in BUNDLE_KINDS:
        raise InvalidInputError(f"unknown bundle kind {kind!r}; expected one of {', '.join(BUNDLE_KINDS)}")
    base = Path(root) if root is not None else project_datasets_dir()
    if not base.is_dir():
        return []
    found = sorted((p for p in base.iterdir() if p.is_dir() and (p / TABLE_FILE).is_file()), key=lambda p: p.name)
    if kind is None:
        return found
    out = []
    for p in found:
        devices = pd.read_csv(p / TABLE_FILE, usecols=["device"])["device"].dropna().astype(str).unique()
        catalog = bundle_catalog([p])
        if len(devices) and all(catalog.device(d).kind == kind for d in devices):
            out.append(p)
    return out


def load_project_bundles(kind: str | None = None, root: str | os.PathLike | None = None
                         ) -> tuple[pd.DataFrame, Catalog]:
    """Every bundle of :func:`project_bundles` (``kind``, ``root``) as one validated table (a ``bundle`` column
    names its directory) and the catalog of them all; an empty table when there is none."""
    paths = project_bundles(kind, root)
    catalog = bundle_catalog(paths)
    if not paths:
        return pd.DataFrame(), catalog
    frames = [load_bundle(p)[0].assign(bundle=p.name) for p in paths]
    return pd.concat(frames, ignore_index=True, sort=False), catalog


def load_project_attention(kind: str | None = "gpu", root: str | os.PathLike | None = None) -> pd.DataFrame:
    """The fused-attention rows of the project's bundles (:func:`load_project_bundles`) that the attention model
    learns and answers: square attention (``q_len == kv_len``, prefill and training) of at least
    :data:`~hybrid.corrections.kernel_xgb.CHUNK_MIN_QUERIES` queries (the H200 profile's 272 SDPA rows in fp32,
    fp16 and bf16); empty when no bundle has any. No public source times an attention kernel, so a calibration on
    public data joins these to price attention from a measurement (decode rows are left out: the pointwise model
    keeps pricing decode steps as it did)."""
    from hybrid.corrections.kernel_xgb import ATTENTION_ONLY_SOURCE, CHUNK_MIN_QUERIES

    table, _ = load_project_bundles(kind, root)
    if table.empty or "q_len" not in table.columns:
        return pd.DataFrame()
    q = pd.to_numeric(table["q_len"], errors="coerce")
    kv = pd.to_numeric(table["kv_len"], errors="coerce")
    rows = (table["op"] == "attention") & (q == kv) & (q >= CHUNK_MIN_QUERIES)
    # tagged so that the pointwise trees leave them to the attention model (PointwiseXGB.square_attention_elsewhere)
    return table[rows].reset_index(drop=True).assign(source=ATTENTION_ONLY_SOURCE)


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The bundle's ``meta.json`` (empty dict if it has none)."""
    meta = Path(path) / META_FILE
    if not meta.is_file():
        return {}
    try:
        return json.loads(meta.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{meta}: not valid JSON ({exc})") from None


def partial_stop(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``interrupted`` record of a bundle whose profile was cut short (interrupted or failed), ``{}`` where it
    has none, None for a whole bundle. A merged bundle keeps ``partial`` and ``interrupted`` per run, in order: it
    is partial when its last run, the one that measured what the others left (a resumed ``gpu-session`` step),
    was cut short too."""
    partial, stop = meta.get("partial", False), meta.get("interrupted")
    if isinstance(partial, list):
        partial = bool(partial[-1]) if partial else False
        stop = stop[-1] if isinstance(stop, list) and stop else {}
    if partial is not True:
        return None
    return stop if isinstance(stop, dict) else {}


def run_options(meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The profiler options of each run behind a bundle's ``meta.json``: one dict for a single ``hybrid profile``
    run, one per run for a merged bundle (:func:`merge_bundles` keeps ``options`` per run); [] without any."""
    opts = meta.get("options")
    if isinstance(opts, Mapping):
        return [dict(opts)]
    if isinstance(opts, list):
        return [dict(o) for o in opts if isinstance(o, Mapping)]
    return []


# ------------------------------------------------------------------------------------------------ writing
def _usual_permissions(directory: Path) -> None:
    """mkdtemp/mkstemp create private (0700/0600) entries; give the bundle the permissions of a normal write."""
    umask = os.umask(0)
    os.umask(umask)
    directory.chmod(0o777 & ~umask)
    for f in directory.iterdir():
        f.chmod(0o666 & ~umask)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError(f"cannot write non-finite number {value!r} to a catalog file")
        return repr(float(f"{value:.6g}"))
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise InvalidInputError(f"cannot write {type(value).__name__} to a catalog file")


def _toml_key(key: str) -> str:
    return key if key.replace("-", "").replace("_", "").isalnum() else json.dumps(key)


def catalog_toml(devices: Mapping[str, Mapping[str, Any]], systems: Mapping[str, Mapping[str, Any]] | None = None,
                 header: str = "") -> str:
    """Catalog entries (human units, as in ``devices.toml``) as TOML text that :class:`Catalog` can load."""
    lines = [f"# {line}" for line in header.splitlines()] if header else []
    for section, entries in (("devices", devices), ("systems", systems or {})):
        for key, entry in entries.items():
            lines += ["", f"[{section}.{_toml_key(key)}]"]
            lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in entry.items() if v is not None]
    return "\n".join(lines).lstrip("\n") + "\n"


def check_bundle_outdir(out: Path, force: bool) -> None:
    """Where a bundle may be written: a new or empty directory, or (``force``) an existing bundle it replaces; never
    a file, nor a directory of something else (``--force`` would delete it whole). Checked before any work."""
    if out.exists() and not out.is_dir():
        raise InvalidInputError(f"output path {out} exists and is not a directory")
    check_creatable(out)
    if not (out.is_dir() and any(out.iterdir())):
        return
    if not force:
        raise InvalidInputError(f"output directory {out} already exists and is not empty (use --force to replace it)")
    if not ((out / TABLE_FILE).is_file() and (out / CATALOG_FILE).is_file()):
        held = ", ".join(sorted(p.name for p in out.iterdir())[:5])
        raise InvalidInputError(f"output directory {out} is not a bundle (it holds {held}); --force replaces only "
                                "a bundle: choose another directory")


def write_bundle(outdir: str | os.PathLike, table: pd.DataFrame, catalog_text: str, meta: Mapping[str, Any], *,
                 force: bool = False, kernel_times: pd.DataFrame | None = None, record: bool = False) -> Path:
    """Write a bundle atomically: validate ``table`` against the default catalog plus ``catalog_text``, write
    all three files into a temporary sibling directory, then rename it to ``outdir``. ``kernel_times`` (rows
    timed by their kernels alone, if any) goes to :data:`KERNEL_TIMES_FILE`, validated the same way. ``record``:
    an empty ``table`` is written as a header alone (a partial bundle recording, in ``meta``, a profile that failed
    before it measured anything), not refused.

    An existing non-empty ``outdir`` is an error unless ``force`` (then it is replaced).
    """
    from hybrid.data.schema import write_table

    out = Path(outdir)
    check_bundle_outdir(out, force)
    kernel_only = len(table) == 0 and (record or (kernel_times is not None and len(kernel_times) > 0))
    with atomic_directory(out) as tmp:
        (tmp / CATALOG_FILE).write_text(catalog_text, encoding="utf-8")
        catalog = bundle_catalog([tmp])
        if kernel_only:  # every configuration was measured before (--skip-existing): the header alone
            columns = list(table.columns) or (list(kernel_times.columns) if kernel_times is not None else [])
            pd.DataFrame(columns=columns or ["device", "op", "time_us"]).to_csv(tmp / TABLE_FILE, index=False)
        else:
            write_table(table, tmp / TABLE_FILE, catalog)
        if kernel_times is not None and len(kernel_times):
            write_table(kernel_times, tmp / KERNEL_TIMES_FILE, catalog)
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=False, default=str) + "\n", encoding="utf-8")
        _usual_permissions(tmp)
    return out


# ------------------------------------------------------------------------------------------------ merging
#: What :func:`merge_bundles` does with a configuration measured in more than one bundle.
ON_DUPLICATE = ("error", "last")
#: ``meta.json`` keys that differ per profiler run and are kept per run (a list, in the order of the bundles).
_PER_RUN_META = ("date", "command", "options", "row_counts", "durations_s", "skipped_cases", "skip_existing",
                 "ceilings", "machine", "partial", "interrupted")


def _catalog_body(text: str) -> str:
    """A ``catalog.toml`` without its comment lines (profiler runs differ only in the date of their header)."""
    return "\n".join(line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))


#: How the ``source`` of a catalog entry that ``hybrid profile`` measured begins (``hybrid.data.profiler.runner``).
PROFILER_SOURCE = "measured by hybrid profile"
#: Device fields ``hybrid profile`` measures (its ceilings): two runs on one machine differ in them by noise.
MEASURED_DEVICE_FIELDS = ("peak_tflops", "mem_bw_gbps", "kernel_latency_us", "boost_clock_mhz", "source", "notes",
                          "mem_bw_shared_gbps", "mem_gib")  # mem_gib: a CPU's MemTotal moves by kilobytes between boots
#: System fields its collective sweep measures (``gpus_per_node``: the most processes a run used, ``--ranks``).
MEASURED_SYSTEM_FIELDS = ("intra_node_gbps", "intra_latency_us", "inter_node_gbps", "inter_latency_us", "source",
                          "gpus_per_node")


def _described(text: str) -> dict[str, Any]:
    """A ``catalog.toml``'s entries without the fields a profiler run measures (what says *which* device it is)."""
    try:
        raw = tomllib.loads(text) if text.strip() else {}
    except tomllib.TOMLDecodeError:
        return {"text": text}
    # the profiler's own measurements: a CPU entry, and the entry it writes for a GPU the catalog does not know
    # (`hybrid profile` on a new GPU, or with a --device-name of its own: its ceilings differ run by run, and the
    # per-family bundles of a session could not be merged); a GPU's other entries come from the packaged catalog
    # or a user override
    cpus = {k for k, e in raw.get("devices", {}).items() if str(e.get("kind", "")).lower() == "cpu"
            or str(e.get("source", "")).startswith(PROFILER_SOURCE)}
    devs = {k: {f: v for f, v in e.items() if k not in cpus or f not in MEASURED_DEVICE_FIELDS}
            for k, e in raw.get("devices", {}).items()}
    syss = {k: {f: v for f, v in e.items() if e.get("device") not in cpus or f not in MEASURED_SYSTEM_FIELDS}
            for k, e in raw.get("systems", {}).items()}
    return {"devices": devs, "systems": syss}


def _device_entries(text: str) -> Any:
    """A ``catalog.toml``'s device entries as parsed (measured fields included), or its text when it does not parse."""
    try:
        return tomllib.loads(text).get("devices", {}) if text.strip() else {}
    except tomllib.TOMLDecodeError:
        return text


def merge_bundles(paths: Iterable[str | os.PathLike], outdir: str | os.PathLike, *, on_duplicate: str = "error",
                  note: str | None = None, force: bool = False) -> tuple[Path, pd.DataFrame]:
    """Merge profiler bundles of one device (e.g. one ``hybrid profile --only F`` run per family, or a committed
    bundle and the families re-measured later) into one bundle at ``outdir``; returns ``(path, table)``.

    Rows are concatenated in the order of ``paths``. A configuration (op, dtype, variant, direction, shape: the
    profiler's :func:`~hybrid.data.profiler.cases.config_key`) present in more than one bundle is an error unless
    ``on_duplicate="last"``, which keeps the row of the last bundle that has it (a re-measurement replaces the
    old one). Every bundle must describe the same device with the same ``catalog.toml`` entries. The merged
    ``meta.json`` keeps the shared fields once, the per-run fields (date, command, ceilings, ...) as one entry
    per bundle (``ceilings`` stays the first run's; ``ceilings_each_run`` lists them all), and records where each
    row came from (``merged_from``).
    """
    from hybrid.data.profiler.cases import config_key

    if on_duplicate not in ON_DUPLICATE:
        raise InvalidInputError(f"on_duplicate must be one of {', '.join(ON_DUPLICATE)}, got {on_duplicate!r}")
    dirs = [Path(p) for p in paths]
    if len(dirs) < 2:
        raise InvalidInputError(f"merging needs at least two bundles, got {len(dirs)}")
    out = Path(outdir)
    if any(d.resolve() == out.resolve() for d in dirs):
        raise InvalidInputError(f"the output {out} is one of the bundles to merge; write to a new directory")
    check_bundle_outdir(out, force)  # before the bundles are read and compared (their warnings, a slow load)
    tables, metas, bodies, texts = [], [], [], []
    for d in dirs:
        if not d.is_dir():
            raise InvalidInputError(f"{d}: not a bundle directory")
        table, _ = load_bundle(d)
        if table.empty and not _no_eager_rows(d):
            raise InvalidInputError(f"{d}: the bundle's table has no rows")
        cat = _catalog_file(d)
        text = cat.read_text(encoding="utf-8") if cat is not None else ""
        tables.append(table)
        metas.append(read_meta(d))
        bodies.append(_catalog_body(text))
        texts.append(text)
    devices = sorted({str(v) for t in tables for v in t["device"].unique()}
                     | {str(m["device"]) for t, m in zip(tables, metas, strict=True) if t.empty and m.get("device")})
    if len(devices) != 1:
        raise InvalidInputError(f"bundles of different devices cannot be merged: {', '.join(devices)}")
    base = 0  # the bundle whose catalog.toml the merge keeps
    if len(set(bodies)) > 1:
        described = [_described(t) for t in texts]
        # a system only some runs wrote (the collective sweep's node) is no disagreement: the catalog of a run that
        # has every system of the merge stands
        names = [set(d.get("systems", {})) for d in described]
        union = set().union(*names)
        whole = [i for i, n in enumerate(names) if n == union]
        if not whole:
            raise InvalidInputError(f"the bundles' systems differ ({', '.join(sorted(union))} over "
                                    f"{', '.join(map(str, dirs))}) and no one bundle has them all")
        base = whole[0]
        ref = described[base]

        def agrees(d: dict[str, Any]) -> bool:
            return d.get("devices") == ref.get("devices") and all(
                ref["systems"][k] == v for k, v in d.get("systems", {}).items())

        differ = [str(d) for d, x in zip(dirs, described, strict=True) if not agrees(x)]
        if differ:
            raise InvalidInputError(f"the bundles' catalog.toml entries differ ({', '.join(differ)} vs {dirs[base]}); "
                                    "merge only runs that describe the device the same way")
        # a measured device (a CPU) whose runs differ only in their measured ceilings: one run's stand (the first
        # with every system), as meta.json's ``ceilings`` (``ceilings_each_run`` keeps them all)
        devs = [_device_entries(t) for t in texts]
        if any(d != devs[base] for d in devs):
            warnings.warn(f"the runs measured {devices[0]}'s ceilings slightly differently; the merged catalog.toml "
                          f"keeps those of {dirs[base]} (meta.json lists every run's)", UserWarning, stacklevel=2)
    keys = [pd.Series([config_key(r) for r in t.to_dict("records")], index=t.index) for t in tables]
    within = [(d, int(k.duplicated().sum())) for d, k in zip(dirs, keys, strict=True) if k.duplicated().any()]
    if within:
        raise InvalidInputError("a bundle holds the same configuration twice: "
                                + ", ".join(f"{d} ({n} rows)" for d, n in within))
    origin = pd.Series(np.concatenate([np.full(len(t), i) for i, t in enumerate(tables)]))
    allkeys = pd.concat(keys, ignore_index=True)
    repeated = allkeys.duplicated(keep="last")
    if repeated.any() and on_duplicate == "error":
        pairs = sorted({(int(origin[i]), int(origin[j])) for i, j in _first_pairs(allkeys)})
        raise InvalidInputError(
            f"{int(repeated.sum())} configuration(s) are in more than one bundle ("
            + ", ".join(f"{dirs[a]} and {dirs[b]}" for a, b in pairs)
            + "); `hybrid data merge --replace` (API: on_duplicate='last') keeps the later measurement")
    merged = pd.concat(tables, ignore_index=True, sort=False)
    keep = ~repeated.to_numpy()
    merged, origin = merged[keep].reset_index(drop=True), origin[keep].reset_index(drop=True)
    meta = _merged_meta(dirs, metas, [len(t) for t in tables], merged, origin, int(repeated.sum()), note, base)
    # kernel-timed rows ride along: concatenated in the same order, a configuration's last row kept
    kts = [k for k in (load_kernel_times(d) for d in dirs) if len(k)]
    kernel = None
    if kts:
        kernel = pd.concat(kts, ignore_index=True, sort=False)
        kkeys = pd.Series([config_key(r) for r in kernel.to_dict("records")])
        kernel = kernel[~kkeys.duplicated(keep="last").to_numpy()].reset_index(drop=True)
    path = write_bundle(out, merged, _widest_cpu_systems(texts, base), meta, force=force, kernel_times=kernel,
                        record=merged.empty)
    return path, merged


def _widest_cpu_systems(texts: list[str], base: int) -> str:
    """``texts[base]`` with each CPU system's ``gpus_per_node`` the largest of all runs: a run with ``--ranks 2``
    writes 2 and one with ``--ranks 4`` (or the rest of an interrupted run) 4, and the merged 4-process rows would
    not fit a system of 2 (the merge was refused as 'catalog.toml entries differ')."""
    try:
        parsed = [tomllib.loads(t) if t.strip() else {} for t in texts]
    except tomllib.TOMLDecodeError:
        return texts[base]
    ref = parsed[base]
    cpus = {k for k, e in ref.get("devices", {}).items() if str(e.get("kind", "")).lower() == "cpu"}
    changed = False
    for key, entry in ref.get("systems", {}).items():
        if entry.get("device") not in cpus:
            continue
        widest = max(int(p.get("systems", {}).get(key, {}).get("gpus_per_node", 0)) for p in parsed)
        if widest > int(entry.get("gpus_per_node", 0)):
            entry["gpus_per_node"] = widest
            changed = True
    if not changed:
        return texts[base]
    header = "\n".join(line.lstrip()[1:].strip() for line in texts[base].splitlines() if line.lstrip().startswith("#"))
    return catalog_toml(ref.get("devices", {}), ref.get("systems", {}), header=header)


def load_kernel_times(path: str | os.PathLike) -> pd.DataFrame:
    """The bundle's kernel-timed rows (:data:`KERNEL_TIMES_FILE`, validated with the bundle's catalog); an empty
    frame when the bundle has none."""
    from hybrid.data.schema import check_rows, read_table

    f = Path(path) / KERNEL_TIMES_FILE
    if not f.is_file():
        return pd.DataFrame()
    catalog = bundle_catalog([Path(path)])
    table = read_table(f, catalog)
    check_rows(table, catalog, str(f))  # a row the roofline refuses: named by file, row and CSV line
    return table


def _first_pairs(keys: pd.Series) -> list[tuple[int, int]]:
    """(first index, later index) of each repeated key."""
    first: dict[Any, int] = {}
    pairs = []
    for i, k in enumerate(keys):
        if k in first:
            pairs.append((first[k], i))
        else:
            first[k] = i
    return pairs


#: ``meta.json`` keys a merge writes itself (never compared or carried over from the inputs).
_MERGE_META = ("ceilings_each_run", "merged_from", "replaced_rows", "note", "n_rows", "row_counts")


def _runs(meta: dict[str, Any]) -> int:
    """Profiler runs behind a bundle's meta: one, or as many as a merged bundle lists (``ceilings_each_run``)."""
    each = meta.get("ceilings_each_run")
    return len(each) if isinstance(each, list) and each else 1


def _per_run(meta: dict[str, Any], key: str) -> list[Any]:
    """``key`` of each run behind ``meta``: a merged bundle's per-run list as it is, else the one value."""
    value = meta.get(key)
    n = _runs(meta)
    if n > 1 and isinstance(value, list) and len(value) == n:
        return list(value)
    return [value] * n if n > 1 else [value]


def _merged_meta(dirs: list[Path], metas: list[dict[str, Any]], rows_in: list[int], table: pd.DataFrame,
                 origin: pd.Series, replaced: int, note: str | None, kept: int = 0) -> dict[str, Any]:
    """The merged ``meta.json``; ``ceilings`` is the run whose ``catalog.toml`` the merge kept (``kept``, else the
    first that has ceilings)."""
    skip = (*_PER_RUN_META, *_MERGE_META)
    base = {k: v for k, v in metas[0].items() if k not in skip}
    for m in metas[1:]:  # shared fields: keep a field only where every run agrees (else record each bundle's)
        for k in list(base):
            if m.get(k) != base[k]:
                base[k] = [mm.get(k) for mm in metas]
    per_run = {k: [v for m in metas for v in _per_run(m, k)] for k in _PER_RUN_META if any(k in m for m in metas)}
    per_run.pop("ceilings", None)
    if "skipped_cases" in per_run:  # one list of every run's skipped cases (a merged bundle's is one list already)
        per_run["skipped_cases"] = [c for m in metas for c in (m.get("skipped_cases") or [])]
    meta: dict[str, Any] = {**base, **per_run}
    meta["ceilings"] = metas[kept].get("ceilings") or next((m["ceilings"] for m in metas if m.get("ceilings")), {})
    meta["ceilings_each_run"] = [c for m in metas for c in (m.get("ceilings_each_run") if _runs(m) > 1
                                                             else [m.get("ceilings")])]
    from hybrid.ops.families import family_array

    fam = pd.Series(family_array(table["op"]))
    meta["row_counts"] = {str(k): int(v) for k, v in table["op"].astype(str).value_counts().sort_index().items()}
    meta["n_rows"] = int(len(table))
    meta["merged_from"] = [{"bundle": str(d), "runs": _runs(metas[i]), "rows_in": int(rows_in[i]),
                            "rows_kept": int((origin == i).sum()),
                            "families": sorted(fam[origin == i].unique().tolist())}
                           for i, d in enumerate(dirs)]
    meta["replaced_rows"] = replaced
    meta["note"] = note or (f"{len(dirs)} profiler bundles of one device merged by hybrid.data.bundle.merge_bundles: "
                            f"'ceilings' is {dirs[kept]}'s (whose catalog.toml is kept), 'ceilings_each_run' and "
                            "the per-run fields "
                            f"({', '.join(k for k in _PER_RUN_META if k in per_run)}) list each run in "
                            "'merged_from' order (a merged input contributes its runs)")
    return meta
