"""Measurement inputs named on the command line: canonical CSV/Parquet tables and profiler bundle directories.

A bundle directory (``measurements.csv`` + ``catalog.toml`` + ``meta.json``, written by ``hybrid profile``) is
read with :func:`hybrid.data.bundle.load_bundle`; the devices its catalog describes (e.g. the CPU it was
measured on) are merged into the catalog used for everything else.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.data.schema import COLUMN_BY_NAME, COLUMNS, check_rows, read_table
from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import Catalog, default_catalog
from hybrid.hardware.device import Device


@dataclass
class Measurements:
    """Measured rows from one or more inputs, with the catalog that knows all their devices."""

    table: pd.DataFrame
    catalog: Catalog
    sources: list[str] = field(default_factory=list)
    #: devices that came from bundle catalogs (not in the packaged catalog)
    extra_devices: list[str] = field(default_factory=list)
    #: the roofline frame of ``table``'s rows (same index), computed with ``catalog`` while checking them
    #: (:func:`~hybrid.data.schema.check_rows`); None when not computed. Read it through :meth:`roofline`, which
    #: recomputes it for a ``table`` replaced since (a subsample, rows dropped).
    base: pd.DataFrame | None = field(default=None, repr=False)

    def roofline(self) -> pd.DataFrame:
        """The roofline frame of :attr:`table`'s rows: :attr:`base` when it still describes them (same length and
        index), else computed (and kept) now."""
        if self.base is None or len(self.base) != len(self.table) or not self.base.index.equals(self.table.index):
            from hybrid.ops.roofline import roofline

            self.base = (roofline(self.table, self.catalog) if len(self.table)
                         else pd.DataFrame(index=self.table.index))
        return self.base

    @property
    def digest(self) -> str:
        return table_digest(self.table)


#: Relative difference beyond which two descriptions of one device key (a compute peak, the memory bandwidth) are
#: taken for two different machines: a re-profile of the same machine moves these by a few percent, another VM
#: of the same CPU model or another software stack by tens of percent (this VM's fp32 GEMM peak 0.054 TFLOP/s
#: against 0.097 in the committed ``datasets/cpu-amd-epyc-1c``, both named ``cpu-amd-epyc-1c``).
SPEC_RTOL = 0.25


def spec_differences(new: Device, old: Device, rtol: float = SPEC_RTOL) -> list[str]:
    """What makes ``new`` another machine than ``old`` (the same device key): compute peaks of a dtype both have
    and memory bandwidths more than ``rtol`` apart, another kind or unit count; empty when they agree that far
    (a re-profile of one machine, a datasheet entry restated)."""
    out = [f"{k} {getattr(new, k)} vs {getattr(old, k)}" for k in ("kind", "vendor") if getattr(new, k) != getattr(old, k)]
    if new.num_sms and old.num_sms and new.num_sms != old.num_sms:
        out.append(f"{new.num_sms} vs {old.num_sms} {'cores' if new.kind == 'cpu' else 'SMs'}")
    for dt in sorted(set(new.peak_flops) & set(old.peak_flops)):
        a, b = new.peak_flops[dt], old.peak_flops[dt]
        if abs(a - b) > rtol * min(a, b):
            out.append(f"{dt} peak {a / 1e12:.3g} vs {b / 1e12:.3g} TFLOP/s")
    if abs(new.mem_bw - old.mem_bw) > rtol * min(new.mem_bw, old.mem_bw):
        out.append(f"memory bandwidth {new.mem_bw / 1e9:.3g} vs {old.mem_bw / 1e9:.3g} GB/s")
    return out


def warn_other_machine(key: str, new_src: str, new: Device, old_src: str, old: Device, effect: str) -> None:
    """A :class:`~hybrid.errors.DataQualityWarning` when ``new`` (described by ``new_src``) and ``old`` (by
    ``old_src``) name one device key but differ like two machines (:func:`spec_differences`); ``effect`` says what
    the tool does with them."""
    diff = spec_differences(new, old)
    if not diff:
        return
    import warnings

    from hybrid.errors import DataQualityWarning

    warnings.warn(f"{new_src} describes device {key!r} unlike {old_src} ({', '.join(diff)}): {effect}; if they are "
                  "different machines, profile one with `hybrid profile --device-name NAME` to tell them apart",
                  DataQualityWarning, stacklevel=3)


def merge_catalog(base: Catalog, other: Catalog) -> tuple[Catalog, list[str]]:
    """``base`` plus every device and system of ``other``; also returns the device keys that were new or
    differed (recorded with the run)."""
    added = [k for k, dev in other.devices.items() if base.devices.get(k) != dev]
    return base.merge(other), added


def load_measurements(paths: Sequence[str | os.PathLike], catalog: Catalog | None = None) -> Measurements:
    """Read canonical tables and bundle directories, validate, and concatenate them. A bundle's ``catalog.toml``
    names its devices, also for a table file read from inside a bundle (``my-bundle/measurements.csv``), as
    ``hybrid data validate`` reads it."""
    from hybrid.data.bundle import CATALOG_FILE, bundle_catalog, load_bundle_checked

    if not paths:
        raise InvalidInputError("no measurement tables given")
    # the same table named twice would count its rows twice (and let a random split score copies of fitted rows)
    seen: dict[Path, str] = {}
    for p in paths:
        seen.setdefault(Path(p).resolve(), str(p))
    if len(seen) < len(paths):
        import warnings

        from hybrid.errors import DataQualityWarning

        warnings.warn(f"{len(paths) - len(seen)} measurement table(s) named more than once; each is read once",
                      DataQualityWarning, stacklevel=2)
        paths = list(seen.values())
    cat = catalog or default_catalog()
    bundles = [Path(p) for p in paths if Path(p).is_dir()]
    files = [Path(p) for p in paths if not Path(p).is_dir()]
    frames: list[pd.DataFrame] = []
    bases: list[pd.DataFrame] = []  # each frame's roofline, computed once while checking its rows
    checked_with: list[tuple[Catalog, str]] = []  # the catalog each was computed with, and its file
    extra: list[str] = []
    described: dict[str, tuple[str, Device]] = {}  # device key -> the first bundle that measured it, its entry
    for b in bundles:
        table, bcat, base = load_bundle_checked(b, catalog)
        for key in pd.unique(table["device"].astype(str)):
            if key not in bcat.devices:
                continue
            if key in described:  # two bundles measured one device key: the same machine?
                warn_other_machine(key, str(b), bcat.devices[key], described[key][0], described[key][1],
                                   f"their rows are fitted as one device, with {b}'s specs")
            else:
                described[key] = (str(b), bcat.devices[key])
        cat, added = merge_catalog(cat, bcat)
        extra += added
        frames.append(table)
        bases.append(base)
        checked_with.append((bcat, str(b)))
    in_bundles = [f for f in files if (f.parent / CATALOG_FILE).is_file()]
    if in_bundles:
        cat, added = merge_catalog(cat, bundle_catalog(in_bundles))
        extra += added
    for f in files:  # file by file, so that a row the estimate refuses is named by file, row and CSV line
        table = read_table([f], cat)
        frames.append(table)
        bases.append(check_rows(table, cat, str(f)))
        checked_with.append((cat, str(f)))
    for i, (c, source) in enumerate(checked_with):
        # a bundle checked with its own catalog, which a later one changed: its rows are estimated with the merged
        if c is not cat and not _agrees(c, cat) and len(frames[i]):
            bases[i] = check_rows(frames[i], cat, source)
    out = pd.concat(frames, ignore_index=True, sort=False) if len(frames) > 1 else frames[0].reset_index(drop=True)
    ordered = [c.name for c in COLUMNS if c.name in out.columns]
    out = out[ordered + [c for c in out.columns if c not in COLUMN_BY_NAME]]
    base = pd.concat(bases, ignore_index=True, sort=False) if len(bases) > 1 else bases[0].reset_index(drop=True)
    for c in [c for c in bases[0].columns if isinstance(bases[0][c].dtype, pd.CategoricalDtype)]:
        # as one roofline of every row gives it (the concat drops it): categories in order of appearance
        base[c] = pd.Categorical(base[c], categories=pd.unique(base[c].dropna()))
    base = base if len(base) == len(out) else None  # (a guard: every frame's roofline has its rows)
    return Measurements(out, cat, [str(p) for p in paths], list(dict.fromkeys(extra)), base=base)


def _agrees(part: Catalog, whole: Catalog) -> bool:
    """Whether ``whole`` holds every device and system of ``part`` as ``part`` has it."""
    return (all(whole.devices.get(k) == d for k, d in part.devices.items())
            and all(whole.systems.get(k) == s for k, s in part.systems.items()))


def table_digest(table: pd.DataFrame) -> str:
    """sha256 of the table as canonical CSV (column order as given, no index): the run's data fingerprint."""
    return hashlib.sha256(table.to_csv(index=False).encode("utf-8")).hexdigest()


def subsample(table: pd.DataFrame, max_rows: int, seed: int = 0) -> pd.DataFrame:
    """At most ``max_rows`` rows, drawn evenly from every (device, op) group so small groups survive."""
    if max_rows <= 0:
        raise InvalidInputError(f"max rows must be positive, got {max_rows}")
    if seed < 0:  # numpy's generators take only non-negative seeds
        raise InvalidInputError(f"seed must be a non-negative integer, got {seed}")
    if len(table) <= max_rows:
        return table
    groups = table.groupby(["device", "op"], sort=True, dropna=False).indices
    # water-filling: equal share per group, leftovers to the groups that still have rows
    sizes = {k: len(v) for k, v in groups.items()}
    quota = dict.fromkeys(sizes, 0)
    left = max_rows
    open_groups = sorted(sizes)
    while left > 0 and open_groups:
        share = max(1, left // len(open_groups))
        for k in list(open_groups):
            take = min(share, sizes[k] - quota[k], left)
            quota[k] += take
            left -= take
            if quota[k] >= sizes[k]:
                open_groups.remove(k)
            if left == 0:
                break
    rng = np.random.default_rng(seed)
    keep = np.concatenate([rng.choice(groups[k], size=q, replace=False) for k, q in quota.items() if q > 0])
    return table.iloc[np.sort(keep)].reset_index(drop=True)
