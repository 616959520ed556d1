"""Raw nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ``reduce_scatter_perf``, ``alltoall_perf``,
``sendrecv_perf``, ``broadcast_perf``, ``reduce_perf``, ...) as users' clusters print it.

A file may hold several tests (newer nccl-tests print ``# Collective test starting: <name>_perf`` before each)
and any amount of Slurm/MPI/launcher noise. Each test section has a ``# nThread ...`` header, ``#  Rank  N
Group G Pid P on HOST device D [BUSID] GPU NAME`` lines (``Group`` is absent in old versions), a column header
(``size count type redop root time algbw busbw #wrong time algbw busbw #wrong``) and data rows. Every data row
gives two canonical rows, out-of-place and in-place (``in_place``), each with ``time_us``, ``size_bytes`` (the
nccl-tests ``size``), ``wrong`` (``#wrong``; ``N/A`` -> empty) and ``dtype``.

* The collective comes from ``Collective test starting``, else a ``*_perf`` command line in the file, else the
  file name (``all_reduce_output.dat.1``, ``nccl_alltoall.log``), else the data (root >= 0 -> broadcast/reduce;
  count = size / type size -> all_reduce, or sendrecv without a reduction; ``size / (count x type size)`` =
  ranks -> reduce_scatter with a reduction). A section whose collective stays ambiguous is an error.
* ``n_ranks`` = number of Rank lines (else ``size / (count x type size)`` for gather-like tests), ``n_nodes`` =
  number of distinct hosts, ``device`` = the GPU name the Rank lines print (``--device`` overrides); ranks on
  different catalog GPUs are an error unless ``--device`` names one.
* ``system``: ``--system``, else the nearest directory whose name is a catalog system alias
  (``results_polaris`` -> ``Polaris``), else empty.
* Rows with ``#wrong > 0`` are kept (column ``wrong``); calibration drops them. Zero-byte rows are skipped.
* A time that is not a positive finite number (``nan``, ``inf``, ``0``, ``-12.5``) drops that measurement with
  a warning listing each one (line, in-place or not, token, reason) and the count.
* Times are in the unit the units line under the column header gives per time column (nccl-tests prints
  ``(us)``); ``ns``/``ms``/``s`` are converted to microseconds with a warning, anything else is an
  :class:`ImportFormatError` naming the line. No units line: microseconds.
* A data line that exactly repeats an earlier one of the same section (doubled or concatenated output) is dropped
  with a warning (count, first repeat); repeats across sections (separate runs) are kept.
* Truncated sections (a job killed mid-run) keep their complete rows with a warning; a file without any data
  row is an :class:`ImportFormatError` (when importing directories such files are skipped with a warning).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.data.importers._common import (
    as_paths,
    catalog_or_default,
    display_path,
    infer_system,
    refuse_compressed,
    resolve_device_names,
    resolve_system_name,
    warn,
)
from hybrid.data.schema import validate
from hybrid.errors import ImportFormatError
from hybrid.hardware.catalog import Catalog
from hybrid.units import DTYPE_BYTES

#: nccl-tests binary stem -> canonical op.
NCCL_TESTS: dict[str, str] = {
    "all_reduce": "all_reduce", "allreduce": "all_reduce",
    "all_gather": "all_gather", "allgather": "all_gather",
    "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all", "all_to_all": "all_to_all",
    "sendrecv": "send_recv", "send_recv": "send_recv",
    "broadcast": "broadcast", "reduce": "reduce",
}
#: nccl-tests type names -> canonical dtype (unsigned types map to the signed type of the same size).
NCCL_TYPES: dict[str, str] = {
    "float": "fp32", "float32": "fp32", "half": "fp16", "float16": "fp16", "bfloat16": "bf16", "bf16": "bf16",
    "double": "fp64", "float64": "fp64", "int8": "int8", "uint8": "int8", "char": "int8",
    "int32": "int32", "int": "int32", "uint32": "int32", "int64": "int64", "uint64": "int64",
    "f8e4m3": "fp8", "f8e5m2": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
}

_STARTING = re.compile(r"Collective test starting:\s*(\w+?)(?:_perf)?(?:_mpi)?\b", re.I)
#: What launchers put before each line: ``mpirun --tag-output`` (``[1,0]<stdout>:``), ``srun --label`` (``0: ``),
#: MPICH / Intel MPI ``mpiexec -l`` / ``-prepend-rank`` (``[0] ``).
_LAUNCHER_TAG = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+:\s|\[\d+\]\s)")
_COMMAND = re.compile(r"(?:^|[/\s])(\w+?)_perf(?:_mpi)?\b")
_NTHREAD = re.compile(r"^#\s*nThread\s+\d+")
_RANK = re.compile(
    r"^#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$")
_VERSION = re.compile(r"nccl-tests version\s+(\S+)(?:.*?nccl-library=(\d+))?", re.I)
_NCCL_DIR = re.compile(r"nccl[_\-.]?(\d+)[_\-.](\d+)(?:[_\-.](\d+))?", re.I)
#: ALCF's alcf-nccl-tests file names: ``<collective>_output.dat.N`` (N = environment setup); a name without N
#: (``all_reduce_output.dat``, an early run's ``output.dat`` / ``output.dat.2``) is setup 1 or N: its first run is
#: the default environment (Sirius' NCCL 2.21 folder has it in place of ``.1``; Polaris' 2023 ``output.dat`` holds
#: the same bus bandwidths as its ``all_reduce_output.dat.1``)
_SETUP = re.compile(r"(?:^|_)output\.dat(?:\.(\d+))?$")
_NUM = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
#: Time units a units line may give (nccl-tests prints ``(us)``), as a factor to microseconds.
TIME_UNITS: dict[str, float] = {"ns": 1e-3, "nsec": 1e-3, "us": 1.0, "usec": 1.0, "\u00b5s": 1.0,
                                "ms": 1e3, "msec": 1e3, "s": 1e6, "sec": 1e6}


@dataclass
class _Section:
    start_line: int
    name: str | None = None  # "?test" for a test no canonical op covers (gather, scatter, alltoallv): skipped
    ranks: dict[int, tuple[str, str, int]] = field(default_factory=dict)  # rank -> (host, GPU, split group)
    columns: list[str] | None = None
    columns_line: int = 0
    rows: list[tuple[int, list[str]]] = field(default_factory=list)
    bad_lines: list[int] = field(default_factory=list)
    concluded: bool = False
    units: tuple[int, list[str]] | None = None  # (line, tokens) of the units line under the column header
    places: list[bool] | None = None  # per timing group, in-place or not, from the title line above the header


#: How much of a file :func:`looks_like_log` reads: the header comes before the data.
_SNIFF_BYTES = 1 << 16


def looks_like_log(path: Path) -> bool:
    """Whether ``path`` holds nccl-tests output (a ``# nThread`` header, launcher tags allowed) within its first
    64 KiB, whatever its name (``slurm-1234.out``, ``job.txt``); unreadable files are not."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except OSError:
        return False
    # the reader's own patterns: a launcher's tag taken off, then the header line
    return any(_NTHREAD.match(_LAUNCHER_TAG.sub("", ln, count=1))
               for ln in head.decode("utf-8-sig", "replace").splitlines())


def _nccl_version(code: str) -> str:
    """``22807`` -> ``2.28.7``; ``2708`` (pre-2.9 encoding) -> ``2.7.8``."""
    v = int(code)
    if v >= 10000:
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
    return f"{v // 1000}.{v // 100 % 10}.{v % 100}"


def _name_from(text: str) -> str | None:
    key = text.lower().replace("-", "_")
    return NCCL_TESTS.get(key) or NCCL_TESTS.get(key.replace("_", ""))


def _file_test_name(path: Path) -> str | None:
    stem = path.name.lower()
    for key in sorted(NCCL_TESTS, key=len, reverse=True):  # longest first: all_reduce before reduce
        if re.search(rf"(^|[^a-z]){key}([^a-z]|$)", stem):
            return NCCL_TESTS[key]
    return None


def _split_sections(lines: list[str], path: Path) -> tuple[list[_Section], dict[str, str]]:
    sections: list[_Section] = []
    meta: dict[str, str] = {}
    pending_name: str | None = None
    pending_places: list[bool] | None = None  # the "out-of-place ... in-place" title line above a column header
    cur: _Section | None = None
    for no, raw in enumerate(lines, start=1):
        line = raw.rstrip("\n")
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            if m := _VERSION.search(s):
                meta["framework_version"] = m.group(1)
                if m.group(2):
                    meta["library_version"] = f"NCCL {_nccl_version(m.group(2))}"
                continue
            if m := _STARTING.search(s):
                pending_name = _name_from(m.group(1))
                if pending_name is None:  # a test the canonical ops do not cover: its section is skipped
                    pending_name = f"?{m.group(1)}"
                if cur is not None and not cur.rows and cur.name is None:
                    cur.name = pending_name
                continue
            if "Collective test concluded" in s or s.lstrip("#").strip().lower().startswith("avg bus bandwidth"):
                if cur is not None:
                    cur.concluded = True
                continue
            if _NTHREAD.match(s):
                cur = _Section(no, name=pending_name)
                sections.append(cur)
                pending_name = None
                continue
            if m := _RANK.match(s):
                if cur is None:
                    cur = _Section(no, name=pending_name)
                    sections.append(cur)
                cur.ranks[int(m.group(1))] = (m.group(3), m.group(4), int(m.group(2) or 0))
                continue
            toks = s.lstrip("#").split()
            if cur is not None and cur.columns is not None and toks and ("(B)" in toks or "(elements)" in toks) \
                    and all(t.startswith("(") and t.endswith(")") for t in toks):
                cur.units = (no, toks)  # "(B) (elements) (us) (GB/s) (GB/s) (us) (GB/s) (GB/s)"
                continue
            if "size" in toks and "count" in toks and ("time" in toks or "cputime" in toks):
                if cur is None:
                    cur = _Section(no, name=pending_name)
                    sections.append(cur)
                cur.columns, cur.columns_line = toks, no
                cur.places, pending_places = pending_places, None
                continue
            if places := [t == "in-place" for t in toks if t in ("out-of-place", "in-place")]:
                # "out-of-place  in-place" (rccl-tests -O 0: "in-place" alone, one timing group)
                pending_places = places
                continue
            continue
        toks = s.split()
        if cur is not None and toks and toks[0].isdigit() and len(toks) >= 5 and toks[1].isdigit():
            cur.rows.append((no, toks))
            continue
        if cur is not None and toks and toks[0].isdigit() and cur.columns is not None:
            cur.bad_lines.append(no)  # a numeric line too short to be a row: truncated
            continue
        if cur is not None and cur.columns is not None and len(toks) >= 5 and toks[2].lower() in NCCL_TYPES:
            cur.bad_lines.append(no)  # a data row whose size or count is not a whole number: malformed
            continue
        if pending_name is None and (m := _COMMAND.search(s)) and _name_from(m.group(1)):
            pending_name = _name_from(m.group(1))
            if cur is not None and not cur.rows and cur.name is None:
                cur.name = pending_name
    return sections, meta


def _layout(columns: list[str] | None, places: list[bool] | None = None) -> tuple[int, list[tuple[int, bool]]]:
    """(index of the first timing column, [(start index of a time/algbw/busbw/wrong group, in_place)]). Which
    group is in place comes from the title line above the header where it names one per group (rccl-tests run
    with ``-O 0`` measures in place only: one group, titled "in-place"), else out-of-place then in-place."""
    if columns is None:  # modern default layout
        return 5, [(5, False), (9, True)]
    cols = [c.lower() for c in columns]
    starts = [i for i, c in enumerate(cols) if c == "time"][:2]
    if places is None or len(places) != len(starts):
        places = [k == 1 for k in range(len(starts))]
    # column names include "size count type redop root": timings start after them
    return (starts[0] if starts else 5), list(zip(starts, places, strict=True))


def _time_scales(sec: _Section, path: Path, n_groups: int) -> list[float]:
    """Factor to microseconds of each timing group's ``time`` column, from the section's units line (none: the
    nccl-tests default, microseconds). Times in another unit the line states unambiguously are converted with a
    warning; a unit that is not a time, or a line whose time units do not pair up with the time columns, is an
    :class:`ImportFormatError` naming the line."""
    if sec.units is None or n_groups == 0:
        return [1.0] * n_groups
    no, toks = sec.units
    # the units line: (B) and (elements) for size and count, then per timing group the time's unit and two
    # bandwidths (GB/s); #wrong has none. Where the line gives bandwidths, a group's time unit is the one right
    # before them: nccl-tests' per-iteration report (-I) adds four more columns per group, i_min / i_max / i_p99
    # in (us) and i_cv% in (%), which are no time column of the table
    rest = [t for t in toks if t not in ("(B)", "(elements)")]
    is_bw = ["/s" in t.lower() for t in rest]
    if any(is_bw):
        units = [t[1:-1] for i, t in enumerate(rest)
                 if not is_bw[i] and i + 1 < len(rest) and is_bw[i + 1]]
    else:
        units = [t[1:-1] for t in rest]
    if len(units) != n_groups:
        raise ImportFormatError(f"{path}: line {no}: the units line gives {len(units)} time unit(s) "
                                f"({', '.join(units) or 'none'}) for {n_groups} time column(s); cannot tell which "
                                "unit a time is in (nccl-tests prints (us) above each time column)")
    scales = []
    for u in units:
        scale = TIME_UNITS.get(u.lower())
        if scale is None:
            raise ImportFormatError(f"{path}: line {no}: unknown time unit ({u}) in the units line (known: "
                                    f"{', '.join(TIME_UNITS)}; nccl-tests prints (us))")
        scales.append(scale)
    if any(x != 1.0 for x in scales):
        warn(path, f"section starting at line {sec.start_line}: line {no} gives the times in "
                   f"{' / '.join(dict.fromkeys(units))}, not nccl-tests' us; converted to microseconds")
    return scales


def _dedup_rows(sec: _Section, path: Path) -> list[tuple[int, list[str]]]:
    """The section's data lines less exact repeats of an earlier line of the same section (concatenated or
    doubled output), with a warning. Zero-byte lines repeat legitimately (small sizes rounded down to 0) and are
    skipped later anyway; repeats across sections (separate runs) are separate measurements and kept."""
    seen: dict[tuple[str, ...], int] = {}
    kept: list[tuple[int, list[str]]] = []
    dups: list[tuple[int, int]] = []
    for no, toks in sec.rows:
        key = tuple(toks)
        if key in seen and toks[0] != "0":
            dups.append((no, seen[key]))
            continue
        seen.setdefault(key, no)
        kept.append((no, toks))
    if dups:
        warn(path, f"section starting at line {sec.start_line}: dropped {len(dups)} duplicated data line(s), "
                   f"each an exact repeat of an earlier line of the section (first: line {dups[0][0]} repeats "
                   f"line {dups[0][1]}); concatenated output?")
    return kept


def _parse_number(tok: str) -> float:
    if _NUM.match(tok):
        return float(tok)
    return np.nan


_FIELDS = ("device", "op", "dtype", "time_us", "size_bytes", "n_ranks", "n_nodes", "in_place", "wrong",
           "source_line", "framework", "framework_version", "library_version", "algorithm", "system", "source")


def _section_rows(sec: _Section, path: Path) -> list[tuple]:
    """(line, size, count, type, redop, root, in_place, time_us, wrong, busbw / algbw) per measured row of a
    section."""
    header_cols = [c.lower() for c in sec.columns] if sec.columns else None
    if header_cols is not None and "cputime" in header_cols:
        # nccl-tests / rccl-tests -C 1: the host's time to enqueue the iterations, taken before they complete (the
        # algbw / busbw beside it still come from the completed time): read as the collective's time it entered
        # the table as a launch overhead, or failed the algbw check as a time "in another unit"
        raise ImportFormatError(f"{path}: line {sec.columns_line}: the time columns are 'cputime' (nccl-tests run "
                                "with -C 1): the CPU time to launch the iterations, not the collectives' duration; "
                                "rerun without -C (or with -C 0)")
    first_time, groups = _layout(sec.columns, sec.places)
    has_root = header_cols is None or "root" in header_cols
    records: list[tuple] = []
    bad = list(sec.bad_lines)
    unusable: list[str] = []  # timings that are not a positive finite number, as "line N (place): token"
    scales = _time_scales(sec, path, len(groups))
    for no, toks in _dedup_rows(sec, path):
        if len(toks) < first_time + 2:
            bad.append(no)
            continue
        size, count = int(toks[0]), int(toks[1])
        dtype_name, redop = toks[2], toks[3]
        root = int(toks[4]) if has_root and len(toks) > 4 and re.fullmatch(r"-?\d+", toks[4]) else -1
        for (start, in_place), scale in zip(groups, scales, strict=True):
            chunk = toks[start:start + 4]
            if len(chunk) < 3:
                bad.append(no)
                continue
            t = _parse_number(chunk[0])
            if not (t > 0) or not np.isfinite(t):
                reason = "not a number" if np.isnan(t) else ("infinite" if np.isinf(t) else "not positive")
                unusable.append(f"line {no} {'in-place' if in_place else 'out-of-place'} time "
                                f"{chunk[0]!r} ({reason})")
                continue
            wrong_tok = chunk[3] if len(chunk) > 3 else "N/A"
            wrong = _parse_number(wrong_tok)  # nccl-tests prints the count with %6g: 1.04858e+06 too
            if not wrong >= 0:
                wrong = np.nan
            if header_cols is not None and (start + 3 >= len(header_cols)
                                            or header_cols[start + 3].lstrip("#") != "wrong"):
                wrong = np.nan  # old nccl-tests print the max error, not a count; some layouts have no count
            if wrong_tok.endswith("*") and not wrong > 0:
                # old nccl-tests / rccl-tests mark an error past the type's threshold with '*' ("2e-01*": the check
                # failed): flagged as one wrong element (the count is not printed), left out of calibration
                wrong = 1.0
            algbw, busbw = _parse_number(chunk[1]), _parse_number(chunk[2])
            if algbw >= 1.0 and np.isfinite(algbw) and size > 0 and not 0.5 < t * scale * algbw * 1e3 / size < 2.0:
                # nccl-tests prints algbw = size / time (GB/s) beside each time: a time that is not size / algbw in
                # the unit read for it is in another unit (a units line that does not match the data, or a
                # tool printing ms without one), and would enter the table off by 1000x. Every public row
                # agrees within 5% (two printed decimals).
                unit = (f"the units line {sec.units[0]}" if sec.units is not None
                        else "no units line: nccl-tests' microseconds")
                raise ImportFormatError(
                    f"{path}: line {no}: {'in-place' if in_place else 'out-of-place'} time {chunk[0]}, read as "
                    f"{t * scale:g} us ({unit}), disagrees with its algbw {chunk[1]} GB/s, which makes it "
                    f"{size / algbw / 1e3:g} us: the time is not in the unit read for it")
            # nccl-tests' bus-bandwidth factor of the test (two printed decimals: only where algbw has digits)
            factor = busbw / algbw if algbw >= 1.0 else np.nan
            records.append((no, size, count, dtype_name, redop, root, in_place, t * scale, wrong, factor))
    if bad:
        # a line short of both its out-of-place and in-place groups is listed once per group: one line all the same
        lines = sorted(set(bad))
        warn(path, f"section starting at line {sec.start_line}: skipped {len(lines)} incomplete or malformed data "
                   f"line(s) (first: line {lines[0]}); truncated log?")
    if unusable:
        shown = "; ".join(unusable[:5]) + (f"; ... and {len(unusable) - 5} more" if len(unusable) > 5 else "")
        warn(path, f"section starting at line {sec.start_line}: dropped {len(unusable)} measurement(s) whose "
                   f"time is not a positive finite number: {shown}")
    if records and not sec.concluded:
        warn(path, f"section starting at line {sec.start_line} did not finish (no closing summary); kept its "
                   f"{len({r[0] for r in records})} complete data row(s)")
    return records


def _per_element(records: list[tuple], type_bytes: list[float]) -> np.ndarray:
    """size / (count x type size) of each record with a non-zero count, each by its own type: ``-d all`` runs
    every type in one section."""
    return np.array([r[1] / (r[2] * tb) for r, tb in zip(records, type_bytes, strict=True) if r[2] > 0])


def _counts_agree(op: str, records: list[tuple], type_bytes: list[float], ranks: int | None) -> bool:
    """Whether a section's element counts are those nccl-tests prints for ``op``: size / (count x type size) is the
    number of ranks for all-gather, reduce-scatter and all-to-all, 1 for the others."""
    per = _per_element(records, type_bytes)
    if not len(per):
        return True
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return ranks is None or bool(np.allclose(per, ranks, rtol=0.01))
    return bool(np.allclose(per, 1.0, rtol=0.01))


def _infer_op(records: list[tuple], type_bytes: list[float], ranks: int | None) -> str | None:
    nz = [r for r in records if r[2] > 0]
    if not nz:
        return None
    per = _per_element(records, type_bytes)
    reduces = str(nz[0][4]).lower() not in ("none", "-")
    if all(r[5] >= 0 for r in nz):
        return "reduce" if reduces else "broadcast"
    if np.allclose(per, 1.0):
        # all-reduce and send/recv both count one element per rank, and sendrecv prints the "sum" redop too:
        # told apart by nccl-tests' bus-bandwidth factor, 2 (n - 1) / n for an all-reduce, 1 for send/recv
        factor = np.array([r[9] for r in nz], dtype=np.float64)
        factor = factor[np.isfinite(factor)]
        if not ranks or ranks <= 2 or not len(factor):
            return None if reduces else "send_recv"
        typical = float(np.median(factor))
        if abs(typical / (2.0 * (ranks - 1) / ranks) - 1.0) < 0.03:
            return "all_reduce"
        if abs(typical - 1.0) < 0.03:
            return "send_recv"
        return None
    if reduces and ranks and np.allclose(per, ranks):
        return "reduce_scatter"
    return None


def _one_file(path: Path, device: str | None, system: str | None, catalog: Catalog,
              skip_empty: bool) -> list[tuple]:
    """Rows of one log as tuples in :data:`_FIELDS` order (plain Python: hundreds of small files)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ImportFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    refuse_compressed(path, raw)
    text = raw.decode("utf-8-sig", errors="replace")  # a byte-order mark is not part of the first line
    lines = [_LAUNCHER_TAG.sub("", line, count=1) for line in text.splitlines()]
    if lines and not text.endswith("\n"):
        # the last line was cut off mid-write: even a complete-looking number in it may be truncated
        last = lines.pop()
        if re.match(r"^\s*\d+\s+\d+\s", last):
            warn(path, f"line {len(lines) + 1}: last line has no newline (truncated log); data row dropped")
        elif last.strip():
            warn(path, f"line {len(lines) + 1}: last line has no newline (truncated log?); ignored")
    sections, meta = _split_sections(lines, path)
    file_name = _file_test_name(path)
    lib = meta.get("library_version")
    if lib is None:
        m = next((m for part in reversed(path.parent.parts) if (m := _NCCL_DIR.fullmatch(part))), None)
        lib = "NCCL " + ".".join(g for g in m.groups() if g) if m else None
    setup = _SETUP.search(path.name)
    algorithm = f"env-setup-{setup.group(1) or 1}" if setup else None
    sys_key = resolve_system_name(system, catalog, path) if system else infer_system(path, catalog)
    source = f"nccl-tests:{display_path(path)}"
    out: list[tuple] = []
    for sec in sections:
        if sec.name is not None and sec.name.startswith("?"):
            warn(path, f"section starting at line {sec.start_line}: test {sec.name[1:]!r} is not a collective the "
                       "canonical table has (all_reduce, all_gather, reduce_scatter, all_to_all, send_recv, "
                       "broadcast, reduce); skipped")
            continue
        records = _section_rows(sec, path)
        if not records:
            if sec.columns is not None or sec.ranks:
                warn(path, f"section starting at line {sec.start_line} has no complete data rows "
                           "(the test failed or was killed)")
            continue
        types = []
        for r in records:
            t = NCCL_TYPES.get(r[3].lower())
            if t is None:
                raise ImportFormatError(f"{path}: line {r[0]}: unknown nccl-tests type {r[3]!r} "
                                        f"(known: {', '.join(sorted(NCCL_TYPES))})")
            types.append(t)
        groups = Counter(g for _, _, g in sec.ranks.values())
        if len(groups) > 1:  # NCCL_TESTS_SPLIT_MASK: several communicators measured at once, one row each
            group = min(groups)
            members = {r: v for r, v in sec.ranks.items() if v[2] == group}
            warn(path, f"section at line {sec.start_line}: {len(groups)} communicator groups ran at once "
                       f"(NCCL_TESTS_SPLIT_MASK); rows are one group's {len(members)} ranks, sharing links with "
                       "the others")
        else:
            members = sec.ranks
        ranks = len(members) or None
        op = sec.name
        type_bytes = [DTYPE_BYTES[t] for t in types]  # per record: `-d all` sweeps every type in one section
        inferred = _infer_op(records, type_bytes, ranks) if op is None else None
        if op is None and file_name is not None:
            # a file name speaks for a section only if the section counts elements as that collective does (a
            # file of several tests names at most one of them)
            if _counts_agree(file_name, records, type_bytes, ranks):
                op = file_name
            elif inferred is not None:
                warn(path, f"section at line {sec.start_line}: its counts say {inferred}, not the file name's "
                           f"{file_name}; labelled {inferred}")
        if op is None:
            op = inferred
            if op is None:
                why = (f"the file name says {file_name}, but this section counts elements as another collective "
                       "does and has no 'Collective test starting' line; split the file per test and name each "
                       "like all_gather_perf.log" if file_name is not None else
                       "cannot tell which collective this section measured (no 'Collective test starting' line, "
                       "no *_perf command, no collective in the file name); rename the file like "
                       "all_gather_perf.log")
                raise ImportFormatError(f"{path}: line {sec.start_line}: {why}")
        if ranks is None:
            per = {round(x) for x in _per_element(records, type_bytes)}
            if op in ("all_gather", "reduce_scatter", "all_to_all") and len(per) == 1:
                ranks = int(per.pop())
            else:
                raise ImportFormatError(f"{path}: line {sec.start_line}: no '#  Rank ...' lines, so the number "
                                        "of ranks is unknown")
        if ranks == 1:
            # one rank communicates with nobody: its times are a local copy (busbw 0). A build without MPI started
            # by mpirun / srun prints one such section per process, which the canonical table cannot tell from
            # collectives between GPUs (and `predict collective` refuses: at least 2 ranks)
            warn(path, f"section at line {sec.start_line} ran on 1 rank: it measures no communication (a "
                       "nccl-tests build without MPI started by mpirun / srun runs one independent 1-rank test per "
                       "process; build it with MPI=1, or give one process all GPUs with -g N); skipped")
            continue
        hosts = {h for h, _, _ in members.values()}
        gpu_names = Counter(g for _, g, _ in members.values())
        if device is None and not gpu_names:
            raise ImportFormatError(f"{path}: line {sec.start_line}: no '#  Rank ... device' lines naming the "
                                    "GPU; pass --device")
        if device is None:
            keys = resolve_device_names(list(gpu_names), catalog, path)
            by_key: Counter[str] = Counter()
            for name, n in gpu_names.items():
                by_key[keys[name]] += n
            if len(by_key) > 1:
                # (labelled "the most common" with a warning: on a tie rank 0's GPU, so a collective over A100s and
                # H100s entered the table as H100 measurements)
                raise ImportFormatError(f"{path}: line {sec.start_line}: the ranks run on different GPUs ("
                                        + ", ".join(f"{n} x {k}" for k, n in by_key.most_common()) + "): a "
                                        "collective over them measures none of them alone; pass --device to label "
                                        "its rows anyway")
            dev_key = next(iter(by_key))
        else:
            dev_key = resolve_device_names([device], catalog, path)[device]
        nodes = max(1, len(hosts))
        per_host = Counter(h for h, _, _ in members.values())
        if len(set(per_host.values())) > 1:  # the table keeps ranks and nodes only: read as an even spread
            shown = ", ".join(f"{n} on {h}" for h, n in sorted(per_host.items(), key=lambda x: (-x[1], x[0]))[:4])
            warn(path, f"section at line {sec.start_line}: its {ranks} ranks are spread unevenly over {nodes} hosts "
                       f"({shown}{', ...' if nodes > 4 else ''}); the table records {ranks} ranks on {nodes} nodes, "
                       f"which the models read as {ranks / nodes:g} per node")
        if sys_key is not None and sys_key in catalog.systems:
            sobj = catalog.systems[sys_key]
            per_node = max(max(per_host.values(), default=0), -(-ranks // nodes))  # the fullest host
            if per_node > sobj.gpus_per_node:  # no node of the system holds the run: the table would be refused
                raise ImportFormatError(f"{path}: line {sec.start_line}: {ranks} ranks on {nodes} host(s) are "
                                        f"{per_node} GPUs per node, more than system {sys_key} has "
                                        f"({sobj.gpus_per_node} x {sobj.device} per node); check --system")
            if nodes > 1 and sobj.single_node:  # no network between its nodes: the table would be refused too
                raise ImportFormatError(f"{path}: line {sec.start_line}: {ranks} ranks on {nodes} hosts "
                                        f"({', '.join(sorted(hosts)[:3])}{', ...' if nodes > 3 else ''}), but "
                                        f"system {sys_key} is a single node (max_nodes {sobj.max_nodes}, no "
                                        "inter_node_gbps); check --system, or give the system its network")
            if sobj.device != dev_key:  # fewer GPUs per node than the system has: a subset run, said nothing
                warn(path, f"section at line {sec.start_line}: the log's GPU {dev_key} does not match system "
                           f"{sys_key} ({sobj.gpus_per_node} x {sobj.device} per node); its rows are labelled "
                           f"{sys_key} anyway: check --system")
        for r, t in zip(records, types, strict=True):
            if r[1] > 0:  # zero-byte calls measure launch overhead only; size_bytes must be positive
                out.append((dev_key, op, t, r[7], r[1], ranks, nodes, r[6], r[8], r[0], "nccl-tests",
                            meta.get("framework_version"), lib, algorithm, sys_key, source))
    if not out:
        msg = f"{path}: no nccl-tests data rows found"
        if not sections:
            msg += " (no '# nThread' header: not an nccl-tests output file?)"
        if skip_empty:
            warn(path, msg.split(": ", 1)[1] + "; file skipped")
            return []
        raise ImportFormatError(msg)
    return out


def import_nccl_tests(paths: Iterable[str | os.PathLike] | str | os.PathLike, device: str | None = None,
                      catalog: Catalog | None = None, system: str | None = None, *,
                      skip_empty: bool = False) -> pd.DataFrame:
    """Import raw nccl-tests logs; one canonical row per (test, size, in-place) with ``wrong`` kept.

    ``skip_empty`` turns "no data rows" into a warning (used when whole directories are imported).
    An extra column ``source_line`` gives the log line of each row.
    """
    cat = catalog_or_default(catalog)
    files = as_paths(paths)
    rows = [row for p in files for row in _one_file(p, device, system, cat, skip_empty)]
    if not rows:
        raise ImportFormatError(f"no nccl-tests data rows in {len(files)} file(s)")
    table = pd.DataFrame.from_records(rows, columns=list(_FIELDS))
    unnamed = table["system"].isna()
    if unnamed.any():  # calibration keys their curves on the GPU: `predict --system X` would not find them
        devices = ", ".join(sorted(set(table.loc[unnamed, "device"])))
        warn(files[0] if len(files) == 1 else Path(f"{len(files)} files"),
             f"{int(unnamed.sum()):,} rows name no system (no --system, and no catalog system in their folders): "
             f"their collective curves will be keyed on the GPU ({devices}): `hybrid predict collective --system "
             "GPU` (a generic node of it) reads them, a catalog system's name does not; pass --system (a catalog "
             "system, or one added with HYBRID_CATALOG)")
    wrong = pd.to_numeric(table["wrong"], errors="coerce").fillna(0.0).to_numpy() > 0
    if wrong.any():  # kept (column wrong), but no fit or score reads them: said here, not only in the fit's counts
        i = int(np.flatnonzero(wrong)[0])
        n_files = table.loc[wrong, "source"].nunique()
        first = str(table["source"].iloc[i]).split(":", 1)[-1]
        warn(first if n_files == 1 else f"{n_files} files",
             f"{int(wrong.sum()):,} row(s) report #wrong > 0 (first: {'' if n_files == 1 else first + ' '}"
             f"line {table['source_line'].iloc[i]}, "
             f"{'in-place' if table['in_place'].iloc[i] else 'out-of-place'}): the collective returned wrong data; "
             "kept with their count in column wrong, and left out of calibration and scores")
    table = table.dropna(axis=1, how="all")
    # one validation for all files (rows were built from parsed numbers; devices are already catalog keys)
    where = str(files[0]) if len(files) == 1 else f"nccl-tests import of {len(files)} files"
    return validate(table, cat, source=where)
