"""The device/system catalog: packaged TOML data, user overrides, and name resolution through aliases."""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from hybrid.errors import InvalidInputError, UnknownDeviceError
from hybrid.hardware.device import (
    DEVICE_FIELDS,
    SYSTEM_FIELDS,
    Device,
    System,
    check_entry_fields,
    fabric_class,
)

#: Environment variable naming extra catalog files (``os.pathsep``-separated) that add or override entries.
CATALOG_ENV = "HYBRID_CATALOG"


#: A board-power annotation some tools append to the name, e.g. MLPerf's ``NVIDIA A100-SXM4-80GB (400W)``.
_POWER_SUFFIX = re.compile(r"\(\s*\d+(\.\d+)?\s*w\s*\)")
#: Leading vendor/brand words (any number of them, each followed by a separator).
_VENDOR_PREFIX = re.compile(r"^((nvidia|amd|tesla|geforce|radeon|instinct)[\s_-]+)+")
#: A ROCm gfx target, optionally with feature flags (``gfx942:sramecc+:xnack-``).
_ROCM_TARGET = re.compile(r"^gfx[0-9a-f]+(:[a-z0-9_-]+[+-]?)*$", re.I)
#: A memory size in a product string (``-180GB``, ``192GB``, ``HBM3e``): MLPerf and cloud tools append them.
_MEMORY_SIZE = re.compile(r"(?<![a-z0-9])(\d+(?:\.\d+)?)\s*(gb|gib|g)(?![a-z0-9])")
_MEMORY_KIND = re.compile(r"(?<![a-z0-9])(hbm\d*e?|gddr\d*x?|lpddr\d*x?)(?![a-z0-9])")
#: Packaging words around a GPU's name (``GH200 Grace Hopper Superchip``, ``GB200 NVL72``, ``B200-SXM``), tried
#: off only after the exact name and the name without its memory size found nothing. ``VF``: an SR-IOV virtual
#: function of the GPU, what a cloud VM's driver reports (``AMD Instinct MI300X VF`` on Azure's ND MI300X v5).
#: ``HGX`` / ``DGX``: the baseboard or system a GPU string names it by (``NVIDIA HGX H100 80GB``: the SXM part).
_PACKAGING = re.compile(r"(?<![a-z0-9])(grace([\s_-]*(hopper|blackwell))?|superchip|nvl\d+|nvbridge|cts|oam|hgx|dgx|"
                        r"sxm\d?|mezzanine|module|vf)(?![a-z0-9])")
#: An SXM board generation stated in a name (``V100 SXM3``): it must agree with the part the name resolves to.
_SXM_GENERATION = re.compile(r"(?<![a-z0-9])sxm(\d)(?![a-z0-9])")
#: Architecture and marketing words some result tables put around the name (``Blackwell B200``, ``H100 Tensor
#: Core GPU``, ``MI300X Accelerator``): never part of a catalog name, so tried off first.
_MARKETING = re.compile(r"(?<![a-z0-9])(blackwell|hopper|ampere|volta|turing|pascal|tensor[\s_-]*core|gpu|"
                        r"accelerator)(?![a-z0-9])")
#: A name that states its memory matches a device only within this relative distance of its capacity (GB or GiB).
MEMORY_MATCH_TOLERANCE = 0.05


def _tokens(name: str) -> list[str]:
    """The words of a device name (lower case, vendor words and power annotation off, split at separators)."""
    s = _VENDOR_PREFIX.sub("", _POWER_SUFFIX.sub("", str(name).strip().lower()).strip())
    return [w for w in re.split(r"[\s_\-./()]+", s) if w]


def normalize_name(name: str) -> str:
    """Canonical form for alias matching.

    Lower case; leading vendor words (nvidia, amd, tesla, geforce, radeon, instinct, each followed by a
    separator), a
    power annotation such as ``(400W)`` and the separators `` _-./()`` are removed:
    ``normalize_name("NVIDIA A100-SXM4-80GB (400W)") == "a100sxm480gb"``.
    """
    s = _POWER_SUFFIX.sub("", str(name).strip().lower()).strip()
    s = _VENDOR_PREFIX.sub("", s)
    return re.sub(r"[\s_\-./()]+", "", s)


def _file_entries(path: Path, raw: dict[str, Any], table: str,
                  entries: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The ``[devices.*]`` / ``[systems.*]`` entries of one catalog file, checked against the entries so far.

    Each must be a table. A key that is not an entry's key but another spelling of one (its key or an alias after
    :func:`normalize_name`: ``[devices.h100-sxm]``, ``[devices."NVIDIA H100 80GB HBM3"]``) would be a new entry,
    so an override meant for the existing one would fail on missing fields, or a full entry on a claimed alias,
    neither naming the entry to override: say so instead."""
    what = table.removesuffix("s")
    section = raw.get(table, {})
    if not isinstance(section, dict):
        raise InvalidInputError(f"catalog file {path}: `{table}` must be a table of [{table}.NAME] entries, "
                                f"got {section!r}")
    names: dict[str, str] = {}
    for key, entry in entries.items():
        aliases = entry.get("aliases", ())  # not checked yet (Device.from_entry does): a bare string is no list
        for name in (key, *(aliases if isinstance(aliases, list | tuple) else ())):
            names.setdefault(normalize_name(name), key)
    for key, entry in section.items():
        if not isinstance(entry, dict):
            raise InvalidInputError(f"catalog file {path}: {what} {key!r} must be a table of fields "
                                    f"([{table}.{key}]), got {entry!r}")
        known = names.get(normalize_name(key))
        if key not in entries and known is not None:
            raise InvalidInputError(
                f"catalog file {path}: {what} {key!r} is another name of the catalog's {what} {known!r}; to change "
                f"that entry, name it by its key ([{table}.{known}]), or give a new {what} a name of its own")
    return section


#: Fields an override may change without changing what the entry's ``source`` vouches for.
_UNSOURCED_FIELDS = frozenset({"source", "notes", "aliases", "key", "host_mem_source", "host_mem_borrowed_by"})


def _overridden_source(path: Path, old: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` (a catalog file's table for an entry that exists already, ``old``) with a ``source`` that says
    which of its figures the file changed, unless the file states a source of its own: the merged entry kept the
    datasheet's, so ``hybrid devices show H100-SXM`` credited NVIDIA's datasheet with a user's measured
    ``mem_bw_gbps = 3000``."""
    if not old or "source" in entry:
        return entry
    changed = sorted(f for f, v in entry.items() if f not in _UNSOURCED_FIELDS and old.get(f) != v)
    if not changed:
        return entry
    return {**entry, "source": f"{old.get('source', '')}; {', '.join(changed)} from catalog file {path}".lstrip("; ")}


def _check_key_field(path: Path, table: str, key: str, entry: dict[str, Any]) -> None:
    """A file entry's ``key`` field (accepted so that `hybrid devices show NAME --json` output reads back) must be
    its table's name, which is the key: ``key = "OTHER"`` under [devices.NEW] was ignored without a word, the entry
    staying NEW."""
    if "key" in entry and entry["key"] != key:
        raise InvalidInputError(f"catalog file {path}: {table.removesuffix('s')} {key!r}: field key = {entry['key']!r} "
                                f"differs from the entry's name: the table name is the key ([{table}.{key}]); rename "
                                "the table, or drop the field")


def _from_entry(build: Callable[[str, dict[str, Any]], Any], what: str, key: str, entry: dict[str, Any],
                origin: dict[tuple[str, str], Path]) -> Any:
    """``build(key, entry)``, its error naming the catalog file that last set the entry (if one did)."""
    try:
        return build(key, entry)
    except InvalidInputError as exc:
        path = origin.get((what, key))
        if path is None:
            raise
        raise InvalidInputError(f"catalog file {path}: {exc}") from None


#: NVIDIA architectures no catalog entry has, and the parts they are, for the refusal of a bare ``sm_NNN``
#: (nearest-named products were no help: ``sm_121`` offered an MI210). Sources: NVIDIA cuRANDDx 0.2.1 release notes
#: ("Thor SM renaming from sm_101 to sm_110 starting from CUDA 13.0"; CUDA 12.9 and older label Thor sm_101) and
#: NVIDIA's DGX Spark / CUDA GPU compute capability pages (GB10: compute capability 12.1).
UNCATALOGUED_ARCHS = {"sm_101": "Jetson Thor (called sm_110 from CUDA 13.0 on)", "sm_110": "Jetson Thor",
                      "sm_121": "DGX Spark's GB10"}
_UNCATALOGUED_CC = {int(k.removeprefix("sm_")) for k in UNCATALOGUED_ARCHS}


def _bare_arch(arch: str) -> str:
    """An architecture string without nvcc's arch- / family-specific suffix: ``sm_90a`` and ``sm_100f`` are
    ``sm_90`` and ``sm_100``; ``gfx90a`` stays (its ``a`` is part of the AMD target name)."""
    arch = arch.strip().lower()
    return arch[:-1] if re.fullmatch(r"sm_\d+[af]", arch) else arch

class Catalog:
    """Devices and systems by key, with alias resolution.

    >>> cat = default_catalog()
    >>> cat.device("NVIDIA A100-PCIE-40GB").key
    'A100-PCIE-40GB'
    """

    def __init__(self, devices: dict[str, Device], systems: dict[str, System], check_names: bool = True):
        self.devices = dict(devices)
        self.systems = dict(systems)
        self._device_index = _build_index(self.devices.values(), "device")
        self._system_index = _build_index(self.systems.values(), "system")
        for key, sys in list(self.systems.items()):
            dev_key = self.resolve_device(sys.device, missing_ok=True)
            if dev_key is None:
                raise InvalidInputError(f"system {sys.key!r} names unknown device {sys.device!r}")
            if dev_key != sys.device:
                # A system may name its GPU by any alias ("NVIDIA H100 80GB HBM3"); everything downstream compares
                # it with device keys (the rows' `device`, the importers' GPU check), so keep the key.
                self.systems[key] = replace(sys, device=dev_key)
            if self.devices[dev_key].kind == "gpu" and sys.intra_fabric.strip() and fabric_class(sys.intra_fabric) is None:
                # a GPU fabric the cost model cannot read (UALink, "custom 900 GB/s fabric") was costed as PCIe,
                # without a word (a CPU's gloo "shared memory" system has no GPU fabric to read)
                raise InvalidInputError(
                    f"system {sys.key!r}: field intra_fabric = {sys.intra_fabric!r} names no GPU fabric the cost model "
                    "reads (it takes the class from the words NVSwitch / NVLink Switch / NVL72, NVLink, Infinity "
                    "Fabric / xGMI, or PCIe, with 'pairs' or 'bridges' for bridged PCIe cards): write the closest of "
                    "them (the class picks the collective algorithms, NVLS on an NVSwitch node, and the transfer "
                    "model's link type), or leave intra_fabric out for PCIe")
        clash = self.name_clash() if check_names else None
        if clash is not None:
            raise InvalidInputError(clash)

    def name_clash(self, system_keys: Iterable[str] | None = None) -> str | None:
        """Why a name of a system (of ``system_keys``, default all) also names a device, or None.

        Where a system is expected (``--system``, a row's ``system``) a device name means a generic node of that
        device, and where a device is expected a system name means its GPU (``DGX-H100`` is an H100-SXM); a system
        named exactly as a device (``A100`` for a node of H100s, in a user's catalog file) made ``-s A100`` and
        ``-d A100`` two different GPUs and ``hybrid devices show A100`` the system. Refused: one name, one thing.
        A system name that reads as another GPU than its own (``resolve_device``'s loose matching included) is
        refused too; one that reads as its own GPU (``DGX-H100``, ``HGX H100``) is the catalog's convention."""
        for key in (self.systems if system_keys is None else system_keys):
            sys = self.systems[key]
            for name in (key, *sys.aliases):
                norm = normalize_name(name)
                exact = self._device_index.get(norm)
                if exact is not None:
                    return (f"system {key!r}: the name {name!r} also names device {exact!r}; systems and devices "
                            "need distinct names (a device name where a system is expected means a generic node "
                            "of it): rename the system or drop that alias")
                dev = self.resolve_device(name, missing_ok=True)
                if dev is not None and dev != sys.device:
                    return (f"system {key!r}: the name {name!r} reads as device {dev!r} but the system holds "
                            f"{sys.device!r}: rename the system or drop that alias")
        return None

    # ----------------------------------------------------------------- loading
    @classmethod
    def load(cls, extra: Iterable[str | os.PathLike] | str | os.PathLike = ()) -> Catalog:
        """The packaged catalog, then each file in ``extra`` (later entries override earlier ones; one path given
        alone is that one file: ``extra="site.toml"`` was read letter by letter, "catalog file not found: s")."""
        if isinstance(extra, str | os.PathLike):
            extra = [extra]
        pkg = resources.files("hybrid.hardware")
        devices_raw = tomllib.loads(pkg.joinpath("devices.toml").read_text(encoding="utf-8"))
        systems_raw = tomllib.loads(pkg.joinpath("systems.toml").read_text(encoding="utf-8"))
        dev_entries: dict[str, dict[str, Any]] = dict(devices_raw.get("devices", {}))
        sys_entries: dict[str, dict[str, Any]] = dict(systems_raw.get("systems", {}))
        origin: dict[tuple[str, str], Path] = {}  # the catalog file that last set each entry: errors name it
        for path in extra:
            if not isinstance(path, str | os.PathLike):
                raise InvalidInputError(f"catalog files are paths, got {path!r}")
            p = Path(path)
            if p.is_dir():
                raise InvalidInputError(f"catalog file {p} is a directory (name its .toml file)")
            if not p.is_file():
                raise InvalidInputError(f"catalog file not found: {p}")
            try:
                raw = tomllib.loads(p.read_text(encoding="utf-8"))
            except tomllib.TOMLDecodeError as exc:
                raise InvalidInputError(f"catalog file {p} is not valid TOML: {exc}") from None
            unknown = set(raw) - {"devices", "systems"}
            if unknown:
                raise InvalidInputError(f"catalog file {p}: unknown top-level table(s) {sorted(unknown)}")
            for key, entry in _file_entries(p, raw, "devices", dev_entries).items():
                # An override may give only some fields of an existing device (but no field the catalog lacks).
                check_entry_fields(f"catalog file {p}: device", key, entry, DEVICE_FIELDS)
                _check_key_field(p, "devices", key, entry)
                old = dev_entries.get(key, {})
                if isinstance(entry.get("peak_tflops"), dict) and isinstance(old.get("peak_tflops"), dict):
                    # dtype by dtype, as every other field: `peak_tflops = { bf16 = 800 }` changes the bf16 peak
                    # and keeps the datasheet's others (replacing the table would drop fp8, tf32, ... silently)
                    entry = {**entry, "peak_tflops": {**old["peak_tflops"], **entry["peak_tflops"]}}
                dev_entries[key] = {**old, **_overridden_source(p, old, entry)}
                origin[("device", key)] = p
            for key, entry in _file_entries(p, raw, "systems", sys_entries).items():
                check_entry_fields(f"catalog file {p}: system", key, entry, SYSTEM_FIELDS)
                _check_key_field(p, "systems", key, entry)
                if "host_mem_gib" in entry:  # the file's own figure: its source, borrowed by none unless it says
                    entry = {"host_mem_source": f"catalog file {p}", "host_mem_borrowed_by": [], **entry}
                old = sys_entries.get(key, {})
                sys_entries[key] = {**old, **_overridden_source(p, old, entry)}
                origin[("system", key)] = p
        devices = {k: _from_entry(Device.from_entry, "device", k, v, origin) for k, v in dev_entries.items()}
        systems = {k: _from_entry(System.from_entry, "system", k, v, origin) for k, v in sys_entries.items()}
        try:
            known = cls(devices, {}) if origin else None  # the packaged entries agree (tests/test_catalog.py)
        except AliasClashError as exc:
            raise _named_clash(exc, origin) from None
        for key, sys in systems.items() if known is not None else ():
            # what __init__ refuses, said here with the file and the closest names
            if known.resolve_device(sys.device, missing_ok=True) is None:
                where = f"catalog file {origin[('system', key)]}: " if ("system", key) in origin else ""
                close = ", ".join(_close_names(sys.device, known._device_index, known.devices))
                raise InvalidInputError(f"{where}system {key!r} names unknown device {sys.device!r}"
                                        + (f" (closest known: {close})" if close else ""))
        if known is not None:  # a name shared by a system and a device: refused naming the file that made it
            try:
                whole = cls(devices, systems, check_names=False)
            except AliasClashError as exc:
                raise _named_clash(exc, origin) from None
            for key in systems:
                clash = whole.name_clash([key])
                if clash is not None:
                    where = origin.get(("system", key))
                    culprit = None if where is not None else next(
                        (d for d in devices if ("device", d) in origin and repr(d) in clash), None)
                    if culprit is not None:
                        # the file's device took a packaged system's name: renaming that system is no advice
                        where = origin[("device", culprit)]
                        clash = (clash.removesuffix(": rename the system or drop that alias")
                                 + f": rename device {culprit!r} of this file or drop that alias of it")
                    raise InvalidInputError(f"catalog file {where}: {clash}" if where else clash)
        return cls(devices, systems)

    def with_device(self, device: Device) -> Catalog:
        """A copy with ``device`` added (or replaced), e.g. a CPU whose ceilings were just measured."""
        devices = dict(self.devices)
        devices[device.key] = device
        return Catalog(devices, self.systems)

    def with_system(self, system: System) -> Catalog:
        """A copy with ``system`` added (or replaced); its device must be in the catalog."""
        systems = dict(self.systems)
        systems[system.key] = system
        return Catalog(self.devices, systems)

    def merge(self, other: Catalog) -> Catalog:
        """A copy with every device and system of ``other`` added; ``other`` wins where both define a key."""
        if all(self.devices.get(k) == d for k, d in other.devices.items()) and all(
            self.systems.get(k) == s for k, s in other.systems.items()
        ):
            return self
        return Catalog({**self.devices, **other.devices}, {**self.systems, **other.systems})

    # ----------------------------------------------------------------- lookup
    def resolve_device(self, name: str, missing_ok: bool = False) -> str | None:
        """Catalog key for a device name as tools print it (``Tesla T4``, ``sm_90``, ``gfx942``...).

        A name no alias matches is tried again without architecture and marketing words (``NVIDIA Blackwell
        B200``, ``H100 Tensor Core GPU``), then without a memory size and memory kind (``NVIDIA B200-SXM-180GB``,
        ``AMD MI300X-192GB``), then also without packaging words (``GH200 Grace Hopper Superchip 96GB``,
        ``GB200 NVL72``), as later MLPerf rounds and cloud tools print them; a stated memory size must then agree
        with the device's capacity (:data:`MEMORY_MATCH_TOLERANCE`), so ``H100 SXM5 94GB`` is not taken for the
        80 GB part."""
        key = self._device_index.get(normalize_name(name))
        if key is None and _ROCM_TARGET.match(str(name).strip()):
            # a ROCm target with feature flags (rocminfo: gfx90a:sramecc+:xnack-): the flags do not change the part
            key = self._device_index.get(normalize_name(str(name).strip().split(":", 1)[0]))
        variant = None
        if key is None:
            key, variant = self._loose_device(name)
        if key is None and not missing_ok:
            msg = _unknown("device", name, self._device_index, self.devices)
            same_arch = self.arch_alternatives(name)
            nearest = self._nearest_arch_parts(name) if not same_arch else None
            if nearest:  # an NVIDIA architecture no catalog GPU has (sm_110): what it is, and the nearest we have
                part = UNCATALOGUED_ARCHS.get(_bare_arch(str(name)))
                msg = (f"unknown device {name!r}: " + (f"the architecture of {part}, which the catalog lacks"
                                                         if part else "an NVIDIA architecture no catalog GPU has")
                       + "; closest known parts: " + ", ".join(nearest[:5])
                       + f" (see `hybrid devices`, or add it with a catalog file via {CATALOG_ENV})")
            if same_arch:  # an architecture no default maps (sm_61): its GPUs, not the names that spell alike
                msg = (f"unknown device {name!r}: an architecture, not a product, and {len(same_arch)} catalog GPUs "
                       f"have it: {', '.join(same_arch)}; name the one you mean (see `hybrid devices`)")
            if variant is not None:  # a known part in a memory configuration the catalog lacks: say which
                dev = self.devices[variant]
                close = ", ".join(_close_names(name, self._device_index, self.devices))
                msg = (f"unknown device {name!r}: {variant} is in the catalog with {dev.mem_capacity / 2**30:g} GiB "
                       f"({dev.mem_bw / 1e9:g} GB/s), not in this memory configuration"
                       + (f" (closest known: {close})" if close else "")
                       + f"; add it with a catalog file via {CATALOG_ENV} (a copy of the {variant} entry under a new "
                       "name, with its mem_gib, mem_bw_gbps and aliases), see docs/hardware.md")
            raise UnknownDeviceError(msg)
        return key

    def _nearest_arch_parts(self, name: str) -> list[str]:
        """For a bare NVIDIA architecture string no catalog GPU has (``sm_110``, ``sm_121a``), the catalog GPUs of the
        two nearest compute capabilities present, as ``KEY (sm_NNN)``, nearest first (a tie: the older first);
        empty for anything else, and for a number far from every catalogued part (``sm_999``) unless it is a known
        uncatalogued part (:data:`UNCATALOGUED_ARCHS`)."""
        m = re.fullmatch(r"sm_(\d+)[af]?", str(name).strip().lower())
        if not m:
            return []
        cc = int(m.group(1))
        by_cc: dict[int, list[str]] = {}
        for key, d in self.devices.items():
            if d.kind == "gpu" and d.compute_capability > 0:
                by_cc.setdefault(d.compute_capability, []).append(key)
        if not by_cc or cc in by_cc or (cc not in _UNCATALOGUED_CC and min(abs(c - cc) for c in by_cc) > 20):
            return []  # a known one, or no architecture near any part (sm_999: a typo, not a new GPU)
        near = sorted(by_cc, key=lambda c: (abs(c - cc), c))[:2]
        return [f"{k} (sm_{c})" for c in near for k in by_cc[c]]

    def arch_alternatives(self, name: str) -> list[str]:
        """Other catalog devices that ``name`` could equally mean when it is a bare architecture string (``sm_90``,
        ``gfx90a``, ``gfx942:sramecc+:xnack-``) that several devices share: the keys of those other devices in
        catalog order (empty for a product name or an architecture only one device has). ``resolve_device`` picks
        one of them (see its catalog ``notes``); a caller that takes names from users says which it picked."""
        text = str(name).strip().split(":", 1)[0] if _ROCM_TARGET.match(str(name).strip()) else str(name).strip()
        arch = text.lower()
        if not re.fullmatch(r"sm_\d+[af]?|gfx[0-9a-f]+", arch):
            return []
        key = self.resolve_device(name, missing_ok=True)
        # the arch-specific / family-specific suffixes (sm_90a, sm_100f) name the same chips, on either side
        return [k for k, d in self.devices.items() if _bare_arch(str(d.arch)) == _bare_arch(arch) and k != key]

    def same_die(self, name: str, max_tdp_ratio: float | None = None) -> list[str]:
        """Other catalog GPUs built from the same die configuration as ``name``: the same vendor, architecture
        (``arch``) and number of SMs / CUs, i.e. the same chip in another board, memory size or power limit (A100
        PCIe 40GB / 80GB and SXM4 80GB; H100 SXM, H200 and H800; V100 PCIe and SXM2). With ``max_tdp_ratio``, only
        those whose power limit is within that factor of ``name``'s (where both are known): the clock a chip
        sustains under load follows its power limit, so a 250 W PCIe A100 is not a 400 W SXM4 one. Keys in catalog
        order; empty for a device without ``arch`` or SM count, or a CPU. What the prediction intervals' ``sibling``
        band reads (a GPU never measured whose chip was measured in another variant)."""
        dev = self.device(name)
        if dev.kind != "gpu" or not dev.arch or dev.num_sms <= 0:
            return []

        def power_alike(d: Device) -> bool:
            if max_tdp_ratio is None or d.tdp_w <= 0 or dev.tdp_w <= 0:
                return True
            return max(d.tdp_w, dev.tdp_w) / min(d.tdp_w, dev.tdp_w) <= max_tdp_ratio

        return [k for k, d in self.devices.items()
                if k != dev.key and d.kind == "gpu" and str(d.vendor).lower() == str(dev.vendor).lower()
                and str(d.arch).lower() == str(dev.arch).lower() and d.num_sms == dev.num_sms and power_alike(d)]

    def _loose_device(self, name: str) -> tuple[str | None, str | None]:
        """(catalog key, None) for a loosely written name, or (None, the part it names) when the name states a
        memory size that no configuration of that part in the catalog has, or (None, None)."""
        text = _VENDOR_PREFIX.sub("", _POWER_SUFFIX.sub("", str(name).strip().lower()).strip())
        text = _VENDOR_PREFIX.sub("", _MARKETING.sub(" ", text).strip())
        key = self._device_index.get(normalize_name(text))
        if key is not None:
            return key, None
        sizes = [float(m.group(1)) for m in _MEMORY_SIZE.finditer(text)]
        bare = _MEMORY_KIND.sub(" ", _MEMORY_SIZE.sub(" ", text))
        # a stated SXM generation names one board: ``V100 SXM3`` is the SXM3 part (its only entry is named with its
        # memory), never the SXM2 part the name without the word would find; ``H100 SXM9`` is no part at all
        sxm = set(_SXM_GENERATION.findall(bare))
        if sxm:
            stem = _tokens(bare)
            hits = {k for k, d in self.devices.items() for alias in (k, *d.aliases)
                    if _tokens(alias)[:len(stem)] == stem}
            if len(hits) == 1 and (not sizes or self._memory_agrees(next(iter(hits)), sizes)):
                return next(iter(hits)), None
        for cand in (bare, _PACKAGING.sub(" ", bare)):
            key = self._device_index.get(normalize_name(cand))
            if key is None:
                continue
            if sxm and not any(f"sxm{g}" in alias for alias, k in self._device_index.items() if k == key
                               for g in sxm):
                return None, None
            if sizes and not self._memory_agrees(key, sizes):
                # another memory configuration of the part: its own entry, named with the size (``GH200 144GB``)
                for x in sizes:
                    other = self._device_index.get(normalize_name(f"{cand} {x:g}gb"))
                    if other is not None and self._memory_agrees(other, [x]):
                        return other, None
                return None, key  # a configuration the catalog lacks
            return key, None
        return None, None

    def _memory_agrees(self, key: str, sizes: list[float]) -> bool:
        """Whether one of the stated sizes (GB or GiB) matches the device's capacity."""
        cap_gib = self.devices[key].mem_capacity / 2**30
        return any(abs(x - c) <= MEMORY_MATCH_TOLERANCE * c for x in sizes for c in (cap_gib, cap_gib * 1.073741824))

    def device(self, name: str) -> Device:
        return self.devices[self.resolve_device(name)]  # type: ignore[index]

    def device_column(self, names: Any, value: Callable[[Device], Any], missing: Any = None) -> Any:
        """``value(device)`` for every entry of ``names`` (a pandas Series or array of device names) as a numpy
        array, each distinct name resolved once; names the catalog lacks (and missing entries) get ``missing``."""
        import numpy as np
        import pandas as pd

        # factorised as given (categorical codes, object arrays): no per-row text conversion; missing -> code -1
        codes, uniques = pd.factorize(pd.Series(names), use_na_sentinel=True)
        keys = [self.resolve_device(str(u), missing_ok=True) for u in uniques]
        return np.array([value(self.devices[k]) if k is not None else missing for k in keys] + [missing])[codes]

    def resolve_system(self, name: str, missing_ok: bool = False) -> str | None:
        key = self._system_index.get(normalize_name(name))
        if key is None and not missing_ok:
            raise UnknownDeviceError(_unknown("system", name, self._system_index, self.systems))
        return key

    def system(self, name: str) -> System:
        return self.systems[self.resolve_system(name)]  # type: ignore[index]

    def unknown_target(self, name: str) -> UnknownDeviceError:
        """The error for a name that is neither a system nor a device (where either is accepted): the closest
        names of both kinds."""
        index = {**self._system_index, **self._device_index}
        return UnknownDeviceError(_unknown("system or device", name, index, {**self.systems, **self.devices}))

    def system_device(self, system: str | System, missing_ok: bool = False) -> Device | None:
        """The GPU (or CPU) of ``system``; with ``missing_ok``, None when the catalog lacks that device."""
        sys = system if isinstance(system, System) else self.system(system)
        if missing_ok and self.resolve_device(sys.device, missing_ok=True) is None:
            return None
        return self.device(sys.device)

    def __iter__(self) -> Iterator[Device]:
        return iter(self.devices.values())

    def __len__(self) -> int:
        return len(self.devices)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.resolve_device(name, missing_ok=True) is not None

    def override(self, key: str, **fields: Any) -> Catalog:
        """A copy where device ``key`` has some fields replaced (SI units, dataclass field names)."""
        dev = self.device(key)
        return self.with_device(replace(dev, **fields))


class AliasClashError(InvalidInputError):
    """Two catalog entries of one kind answer to the same name; ``what`` (device / system) and ``keys`` (both
    entries, the later last) let :meth:`Catalog.load` name the catalog file that made the clash."""

    def __init__(self, message: str, what: str, keys: tuple[str, str]) -> None:
        super().__init__(message)
        self.what, self.keys = what, keys


def _build_index(entries: Iterable[Device | System], what: str) -> dict[str, str]:
    index: dict[str, str] = {}
    for entry in entries:
        for name in (entry.key, *entry.aliases):
            norm = normalize_name(name)
            if not norm:
                continue
            other = index.get(norm)
            if other is not None and other != entry.key:
                raise AliasClashError(f"{what} alias {name!r} is claimed by both {other!r} and {entry.key!r}", what,
                                      (other, entry.key))
            index[norm] = entry.key
    return index


def _named_clash(exc: AliasClashError, origin: dict[tuple[str, str], Path]) -> InvalidInputError:
    """``exc`` prefixed with the catalog file that set one of the two entries (the later one first), as the other
    errors of :meth:`Catalog.load` name theirs."""
    where = next((origin[(exc.what, k)] for k in reversed(exc.keys) if (exc.what, k) in origin), None)
    return InvalidInputError(f"catalog file {where}: {exc}" if where is not None else str(exc))


def _close_names(name: str, index: dict[str, str], entries: dict[str, Any]) -> list[str]:
    """Up to 5 catalog keys whose names are closest to ``name``."""
    close = difflib.get_close_matches(normalize_name(name), list(index), n=8, cutoff=0.5)
    keys = list(dict.fromkeys(index[c] for c in close))[:5]
    return keys or difflib.get_close_matches(str(name), list(entries), n=5, cutoff=0.0)


def _unknown(what: str, name: str, index: dict[str, str], entries: dict[str, Any]) -> str:
    keys = _close_names(name, index, entries)
    hint = f"; closest known: {', '.join(keys)}" if keys else ""
    return f"unknown {what} {name!r}{hint} (see `hybrid devices`, or add it with a catalog file via {CATALOG_ENV})"


def default_catalog(extra: Iterable[str | os.PathLike] | str | os.PathLike | None = None) -> Catalog:
    """The packaged catalog plus the files named in ``$HYBRID_CATALOG`` (or ``extra`` if given).

    Loading takes a few milliseconds; callers that need it repeatedly should keep the returned object.
    """
    if extra is None:
        env = os.environ.get(CATALOG_ENV, "")
        extra = [p for p in env.split(os.pathsep) if p]
    return Catalog.load(extra)
