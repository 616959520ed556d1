"""Orchestration of ``hybrid profile``: options, device identity, sweeps, catalog entries, meta, the bundle.

:func:`run_profile` measures on the machine at hand (a CUDA GPU if PyTorch sees one, else the CPU) and writes a
measurement bundle (see :mod:`hybrid.data.bundle`). Options are checked before anything is measured or written.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid.data.bundle import KERNEL_TIMES_FILE, catalog_toml, check_bundle_outdir, write_bundle
from hybrid.data.profiler import attention as attn
from hybrid.data.profiler import collectives as coll
from hybrid.data.profiler import conv as cnn
from hybrid.data.profiler import embedding as emb
from hybrid.data.profiler import kernels
from hybrid.data.profiler import optimizer as optim
from hybrid.data.profiler.backend import Backend, available_cores, open_backend, require_torch
from hybrid.data.profiler.cases import PROFILE_FAMILIES, Case, config_key
from hybrid.data.profiler.ceilings import Ceilings, measure_ceilings
from hybrid.data.profiler.kernel_times import KERNEL_FRAMEWORK, kernel_pass, kernel_time_rows
from hybrid.data.profiler.timing import (
    FULL_POLICY,
    QUICK_POLICY,
    choose_clock,
    last_level_cache_bytes,
    measure,
)
from hybrid.errors import HybridError, InvalidInputError
from hybrid.invocation import command as cli_command
from hybrid.invocation import invocation

#: ``source`` column of every profiler row.
SOURCE = "hybrid-profile"
#: Embedding weight arena: at most this many bytes, and at most this share of available memory.
ARENA_MAX_BYTES = {False: 2 * 2**30, True: 64 * 2**20}
ARENA_MEMORY_SHARE = 0.15
#: The largest ``--seed`` (numpy's 32-bit seed range; the per-table seeds derived from it fit torch's 64 bits).
MAX_SEED = 2**32 - 1


@dataclass
class ProfileOptions:
    """What to measure. ``families`` is a subset of :data:`PROFILE_FAMILIES` (ceilings always run)."""

    quick: bool = False
    families: tuple[str, ...] = PROFILE_FAMILIES
    ranks: tuple[int, ...] | None = None  # default: (2, 4), quick: (2,)
    device_name: str | None = None
    threads: int | None = None  # default: all cores in the affinity mask
    seed: int = 0
    progress: bool = True
    force_cpu: bool = False
    clock: str = "auto"  # auto (CPU with 1 thread: on-core thread time; else wall / CUDA events), wall, thread
    #: measurement table(s) whose configurations are not measured again (extending a bundle)
    skip_existing: tuple[str, ...] = ()
    #: GPU only: also time every configuration by its CUPTI kernels alone (:mod:`hybrid.data.profiler.kernel_times`)
    kernel_times: bool = False

    def checked(self) -> ProfileOptions:
        """A copy with defaults filled in; raises :class:`InvalidInputError` on a bad option."""
        fams = tuple(dict.fromkeys(f.strip().lower() for f in self.families if f.strip()))
        unknown = [f for f in fams if f not in PROFILE_FAMILIES]
        if unknown or not fams:
            raise InvalidInputError(f"unknown op family {', '.join(unknown) or '(none given)'}; "
                                    f"choose from {', '.join(PROFILE_FAMILIES)}")
        ranks = self.ranks if self.ranks is not None else ((2,) if self.quick else (2, 4))
        ranks = tuple(sorted(set(int(r) for r in ranks)))
        if any(r < 2 for r in ranks):
            raise InvalidInputError(f"--ranks must be >= 2 (collectives need peers), got {list(ranks)}")
        if any(r > 64 for r in ranks):
            raise InvalidInputError(f"--ranks {max(ranks)} is more local processes than sensible (max 64)")
        if "collective" not in fams:
            if self.ranks is not None:  # was ignored in silence, and meta.json recorded the counts as if measured
                raise InvalidInputError(f"--ranks sets the process counts of the collectives, which --only "
                                        f"{','.join(fams)} does not measure: add collective to --only, or drop --ranks")
            ranks = ()  # meta.json's options say no collective was run
        if not 0 <= int(self.seed) <= MAX_SEED:
            # the embedding and optimizer designs seed each table's generator with seed * 100003 + i: a larger seed
            # overflowed torch's 64-bit seed when the embedding family started, after minutes of other families
            raise InvalidInputError(f"--seed must be between 0 and {MAX_SEED}, got {self.seed}")
        if self.threads is not None and self.threads < 1:
            raise InvalidInputError(f"--threads must be >= 1, got {self.threads}")
        cores = available_cores()
        if self.threads is not None and self.threads > cores:
            # more threads than cores time the scheduler, and the bundle would describe a CPU of that many cores
            raise InvalidInputError(f"--threads {self.threads} exceeds the {cores} cores this process may run on; "
                                    "a CPU profile measures at most all of them")
        if self.device_name is not None and not self.device_name.strip():
            raise InvalidInputError("--device-name must not be empty")
        if self.device_name is not None:
            device_key_for(self.device_name)  # a name no key can be made of fails before anything is measured
        clock = (self.clock or "auto").strip().lower()
        if clock not in ("auto", "wall", "thread"):
            raise InvalidInputError(f"--clock must be auto, wall or thread, got {self.clock!r}")
        if clock == "thread" and self.threads != 1:
            raise InvalidInputError("--clock thread measures the calling thread only: it needs --threads 1")
        skip = tuple(str(p) for p in self.skip_existing)
        for p in skip:
            if not Path(p).exists():
                raise InvalidInputError(f"--skip-existing: {p} not found")
        return ProfileOptions(self.quick, fams, ranks, self.device_name, self.threads, self.seed, self.progress,
                              self.force_cpu, clock, skip, bool(self.kernel_times))


@dataclass
class ProfileResult:
    """What a run produced: the bundle path, its table, catalog text and meta."""

    path: Path
    table: pd.DataFrame
    catalog_text: str
    meta: dict[str, Any] = field(default_factory=dict)


def sanitize(name: str) -> str:
    """A catalog-key-friendly form of a hardware name: ``AMD EPYC 7B13 64-Core Processor`` -> ``amd-epyc-7b13``."""
    s = re.sub(r"\((r|tm|c)\)", "", name.lower())
    s = re.sub(r"@.*$", "", s)
    s = re.sub(r"\b(processor|cpu|\d+-core)\b", "", s)
    s = re.sub(r"[^a-z0-9]+", "-", s).strip("-")
    return s or "unknown"


def device_key_for(name: str) -> str:
    """The catalog key of a device the user names (``--device-name``): the name as given, with each run of
    characters a TOML bare key cannot hold replaced by ``-``. Not :func:`sanitize`, which drops words such as
    ``cpu`` or ``processor`` from hardware-reported names: ``cpu-lab2-1c`` would have been recorded as
    ``lab2-1c``, and ``cpu`` as ``unknown``. :class:`InvalidInputError` for a name with no letter or digit."""
    key = re.sub(r"[^A-Za-z0-9_-]+", "-", name.strip()).strip("-")
    if not re.search(r"[A-Za-z0-9]", key):
        raise InvalidInputError(f"--device-name {name!r} has no letter or digit to make a device key of")
    return key


def cpu_device_key(model: str, cores: int) -> str:
    """``cpu-<sanitised model>-<cores>c``; ``cores`` is the thread count the profile ran with."""
    return f"cpu-{sanitize(model)}-{cores}c"


def default_outdir(device_key: str) -> Path:
    return Path.cwd() / f"profile-{device_key}"


def check_outdir(outdir: Path | None, force: bool) -> None:
    """The output directory may take a bundle (:func:`hybrid.data.bundle.check_bundle_outdir`), checked up front."""
    if outdir is not None:
        check_bundle_outdir(outdir, force)


def _refuse_extending_in_place(out: Path, skip_existing: Sequence[str]) -> None:
    """``--skip-existing B -o B --force`` read B, then replaced it with the new configurations alone: every row B
    held was lost. Refused before anything is measured (measure into another directory and merge)."""
    target = out.resolve()
    for p in skip_existing:
        given = Path(p).resolve()
        if target in (given, given.parent if given.is_file() else given):
            raise InvalidInputError(f"--skip-existing {p} is the output directory {out}: the new bundle would replace "
                                    f"it with the new configurations alone; write to another directory (-o) and "
                                    f"combine the two with `{cli_command('data', 'merge', str(p), 'NEW', '-o', 'ALL')}`")


def run_profile(options: ProfileOptions, outdir: str | os.PathLike | None = None, *, force: bool = False,
                command: Sequence[str] | None = None,
                log: Callable[[str], None] | None = None) -> ProfileResult:
    """Measure this machine and write a bundle to ``outdir`` (default ``./profile-<device key>``)."""
    started = time.perf_counter()
    opts = options.checked()
    out = Path(outdir) if outdir is not None else None
    check_outdir(out, force)
    existing = _existing_tables(opts.skip_existing)
    failures = _failed_before(opts.skip_existing)
    torch = require_torch()
    backend = open_backend(torch, threads=opts.threads, force_cpu=opts.force_cpu)
    say = log or (lambda _msg: None)
    if opts.kernel_times and not backend.is_cuda:
        raise InvalidInputError("--kernel-times reads CUPTI kernel records: it needs a CUDA GPU (this run profiles "
                                f"the {backend.kind})")
    durations: dict[str, float] = {}
    key, _ = _device_key(backend, opts)  # a --device-name that cannot be used fails before a minute of ceilings
    check_outdir(out or default_outdir(key), force)
    _refuse_extending_in_place(out or default_outdir(key), opts.skip_existing)

    llc = last_level_cache_bytes(backend)
    t0 = time.perf_counter()
    say(f"measuring ceilings on {backend.kind} ({backend.device_name()}, {backend.threads} threads)")
    ceilings = measure_ceilings(backend, quick=opts.quick, llc_bytes=llc)
    if not backend.is_cuda and backend.threads == 1:  # one-thread ranks: how they share the memory system
        from hybrid.data.profiler.memory_sharing import measure_shared_bandwidth

        say("measuring memory bandwidth with every core streaming")
        try:
            shared = measure_shared_bandwidth(int(ceilings.details["copy_bytes"]), repeats=5 if opts.quick else 10,
                                              trials=1 if opts.quick else 3)
        except HybridError as exc:  # an optional catalog field: the profile goes on without it
            say(f"memory bandwidth with every core streaming not measured ({exc}); the catalog entry has no "
                "mem_bw_shared_gbps")
            shared = None
        if shared is not None:
            ceilings.details.update(shared.details(ceilings.mem_bw))
    durations["ceilings"] = time.perf_counter() - t0
    device_key, device_entry = _device_identity(backend, opts, ceilings)
    if opts.device_name and device_key != opts.device_name.strip():
        say(f"device key: {device_key} (--device-name {opts.device_name!r}: characters a catalog key cannot hold "
            "replaced)" if device_entry is not None else f"device key: {device_key} (the catalog's name for "
            f"--device-name {opts.device_name!r})")
    out = out or default_outdir(device_key)
    check_outdir(out, force)

    policy = QUICK_POLICY if opts.quick else FULL_POLICY
    clock = choose_clock(backend, opts.clock)
    known, other_rows = _existing_keys(existing, device_key)
    failed_before = {k: err for dev, k, err in failures if dev in (None, device_key)}
    n_failed_before = 0
    if opts.skip_existing and other_rows:
        say(f"--skip-existing: {other_rows} rows of other devices than {device_key} are not skipped (only "
            f"{device_key}'s own configurations are)")
    n_known = 0
    rows: list[dict[str, Any]] = []
    kernel_rows: list[dict[str, Any]] = []
    kernel_notes: dict[str, str] = {}
    skipped: list[dict[str, Any]] = []
    coll_rows: list[dict[str, Any]] = []
    coll_notes: dict[str, Any] = {}
    system_key = f"{device_key}-{'nccl' if backend.is_cuda else 'gloo'}"
    done: list[str] = []  # families measured to their end
    now: dict[str, Any] = {}  # the step under way: what an interruption cut short
    interrupted: KeyboardInterrupt | None = None
    failed: Exception | None = None  # a family that raised: what it measured is kept as for an interruption
    t0 = time.perf_counter()
    try:
        for family in opts.families:
            if family == "collective":
                continue
            t0 = time.perf_counter()
            now = {"family": family, "step": "listing cases"}
            cases = family_cases(backend, family, quick=opts.quick, seed=opts.seed, llc_bytes=llc,
                                 arena_bytes=_arena_bytes(opts.quick))
            every = cases
            if known:
                fresh = [c for c in cases if config_key(c.row) not in known]
                n_known += len(cases) - len(fresh)
                cases = fresh
            if failed_before:  # failed in a run this one extends: skipped, counted, so a resume gets past it
                again = [c for c in cases if config_key(c.row) in failed_before]
                for c in again:
                    err = failed_before[config_key(c.row)]
                    skipped.append({**c.row, "reason": f"failed in an earlier run ({err}); not measured again",
                                    "failed_before": err})
                n_failed_before += len(again)
                cases = [c for c in cases if config_key(c.row) not in failed_before]
                every = [c for c in every if config_key(c.row) not in failed_before]
            now = {"family": family, "step": "measuring", "rows_before": len(rows), "cases": len(cases)}
            say(f"{family}: {len(cases)} configurations")  # with --no-progress the only sign of progress
            _measure_cases(backend, family, cases, policy, opts.progress, skipped, clock, into=rows, current=now)
            durations[family] = time.perf_counter() - t0
            _release(backend)
            if opts.kernel_times and every:
                # every configuration of the family, the ones --skip-existing left out included: kernel rows are a
                # table of their own, and a GPU measured before has none yet; the fresh ones first
                fresh_ids = {id(c) for c in cases}
                order = cases + [c for c in every if id(c) not in fresh_ids]
                t0 = time.perf_counter()
                now = {"family": family, "step": "kernel times"}
                found, note = _kernel_times(backend, family, order, say)
                kernel_rows += found
                kernel_notes[family] = note
                durations[f"{family} kernel times"] = time.perf_counter() - t0
                _release(backend)
            done.append(family)

        if "collective" in opts.families:
            t0 = time.perf_counter()
            for world in opts.ranks or ():
                if backend.is_cuda and torch.cuda.device_count() < world:
                    coll_notes[f"x{world}"] = f"skipped: {torch.cuda.device_count()} GPU(s) < {world} ranks"
                    continue
                now = {"family": "collective", "step": f"{world} ranks"}
                say(f"collective: {world} processes")
                res = coll.run_collectives(backend, world, quick=opts.quick, progress=opts.progress,
                                           skip=_known_collectives(known, world))
                n_known += res.already
                coll_rows += [{**r, "system": system_key} for r in res.rows]
                coll_notes[f"x{world}"] = {"calls": res.calls, "unsupported": res.unsupported,
                                           **({"already_measured": res.already} if res.already else {})}
            durations["collective"] = time.perf_counter() - t0
            done.append("collective")
    except (KeyboardInterrupt, Exception) as exc:
        # Ctrl-C, the SIGTERM of a time limit that the CLI raises as one, or a family that failed (a kernel that
        # raises, a collective whose ranks cannot connect): what was measured is kept (a partial bundle below),
        # then the interruption goes on or the failure is reported with where the rows are
        if isinstance(exc, KeyboardInterrupt):
            interrupted = exc
        else:
            failed = exc
        if now:
            durations[now["family"] + (" kernel times" if now["step"] == "kernel times" else "")] = \
                time.perf_counter() - t0
        if now.get("step") == "kernel times":
            kernel_notes[now["family"]] = "interrupted"
        if now.get("step") == "measuring":
            now["measured"] = len(rows) - now.pop("rows_before")
    failing_case = now.pop("case", None)  # the configuration under way (_measure_cases), said for a failure only
    stopped: BaseException | None = interrupted or failed
    system_entry = None
    if coll_rows:
        system_entry = _system_entry(backend, device_key, coll_rows)
        rows += coll_rows
    else:
        system_key = None
    if interrupted is not None and not rows and not kernel_rows:
        say(f"interrupted {_during(now)}, before any configuration was measured: nothing written")
        raise interrupted
    # failed before a row: recorded (a partial bundle of no rows) when the failure was a configuration's, which a
    # resume then skips; writing nothing made every resume fail on the same configuration, the family never measured
    record = failed is not None and not rows and not kernel_rows and failing_case is not None
    if failed is not None and not rows and not kernel_rows and not record:
        hint = "" if isinstance(failed, HybridError) else " (HYBRID_DEBUG=1 for a traceback)"
        raise ProfileFailedError(f"{_failure(failed, now)}, before any configuration was measured: nothing "
                                 f"written{hint}") from failed

    if opts.skip_existing:
        say(f"{n_known} configuration(s) already in --skip-existing, not measured again")
    if n_failed_before:
        say(f"{n_failed_before} configuration(s) that failed in an earlier run skipped (meta.json: skipped_cases; "
            "a run without --skip-existing measures them again)")
    if not rows and not kernel_rows and not record:  # name what left nothing to measure: the log says no more than this
        why = []
        if n_known:
            why.append(f"{'' if skipped else 'all '}{n_known} configuration(s) of {', '.join(opts.families)} "
                       f"are already in --skip-existing {', '.join(opts.skip_existing)}")
        if n_failed_before:
            why.append(f"{n_failed_before} configuration(s) failed in an earlier run and were skipped")
        if len(skipped) > n_failed_before:
            first = next(c for c in skipped if "failed_before" not in c)
            why.append(f"{len(skipped) - n_failed_before} case(s) failed and were skipped (first: {first['reason']})")
        hint = (" (measure other families with --only, or leave out --skip-existing to measure these again)"
                if n_known else "")
        raise HybridError(f"the profile produced no measurements: {'; '.join(why) or 'no case to measure'}{hint}")
    # kernel times alone (every configuration already in --skip-existing): the eager table is a header only
    table = (_finish_table(backend, device_key, rows) if rows else
             pd.DataFrame(columns=["device", *(failing_case or {}), "time_us"] if record else ["device", "op", "time_us"]))
    kernel_table = None
    if kernel_rows:
        kernel_table = _finish_table(backend, device_key, kernel_rows, framework=KERNEL_FRAMEWORK)
    devices = {device_key: device_entry} if device_entry is not None else {}
    systems = {system_key: system_entry} if system_entry is not None else {}
    header = (f"Written by `hybrid profile` on {_dt.date.today().isoformat()} "
              f"({backend.device_name()}, {backend.threads} threads). Human units as in hybrid/hardware/devices.toml.")
    text = catalog_toml(devices, systems, header=header)
    durations["total"] = time.perf_counter() - started
    meta = _meta(backend, opts, ceilings, device_key, system_key, durations, skipped, coll_notes, command, table)
    meta["clock"] = {"name": clock, "what": _CLOCK_DOC[clock]}
    if opts.skip_existing:
        meta["skip_existing"] = {"tables": list(opts.skip_existing), "cases_not_measured_again": n_known,
                                 "cases_failed_before": n_failed_before}
    if opts.kernel_times:
        meta["kernel_times"] = {"file": KERNEL_TIMES_FILE, "rows": 0 if kernel_table is None else len(kernel_table),
                                "per_family": kernel_notes,
                                "what": "median CUPTI kernel time of 3 marked calls per configuration (framework "
                                        "cupti), measured after the family's eager timings"}
    meta["partial"] = stopped is not None
    if stopped is not None and out.is_dir() and any(out.iterdir()):
        # --force replaces a bundle when the run ends; a run cut short leaves it and writes its rows beside it
        # (an empty directory, as a run without --force may fill, is no bundle to keep)
        out, force = _free_sibling(out, "partial"), False
    if stopped is not None:
        meta["interrupted"] = _interruption(stopped, now, done, opts, coll_notes, out)
        if failed is not None:
            meta["interrupted"]["error"] = _error_line(failed)
            if failing_case is not None:
                meta["interrupted"]["configuration"] = failing_case
            meta["interrupted"]["traceback"] = "".join(traceback.format_exception(failed))[-4000:]
    path = write_bundle(out, table, text, meta, force=force, kernel_times=kernel_table, record=record)
    rest = (f"the {len(table)} rows measured so far are in {path}, a partial bundle (meta.json: partial); measure "
            f"the rest with `{meta['interrupted']['resume']}`, then "
            f"`{cli_command('data', 'merge', str(path), f'{path}-rest', '-o', 'ALL')}`"
            if stopped is not None else "")
    if record:
        hint = "" if isinstance(failed, HybridError) else " (HYBRID_DEBUG=1 for a traceback)"
        raise ProfileFailedError(f"{_failure(failed, now)}, before any configuration was measured: the failing "
                                 f"configuration is recorded in {path} (meta.json; a bundle of no rows), to be "
                                 f"skipped by the resume `{meta['interrupted']['resume']}`{hint}",
                                 path=path, meta=meta) from failed
    if interrupted is not None:
        say(f"interrupted {_during(now)}: {rest}")
        raise interrupted
    if failed is not None:
        raise ProfileFailedError(f"{_failure(failed, now)}; {rest}", path=path, meta=meta) from failed
    return ProfileResult(path=path, table=table, catalog_text=text, meta=meta)


class ProfileFailedError(HybridError):
    """A family of :func:`run_profile` raised (a kernel that fails, a collective whose ranks cannot connect). What
    was measured before it is in the partial bundle ``path`` (None when nothing was), as an interrupted run's is;
    ``meta`` is its ``meta.json`` (``interrupted``: ``by = "error"``, the ``error``, the ``resume`` command)."""

    def __init__(self, message: str, *, path: Path | None = None, meta: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.meta = meta


def _error_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (a torch error's message runs over many lines of C++ context)."""
    text = str(exc).strip().splitlines()
    if isinstance(exc, HybridError) and text:  # hybrid's own one-line messages say what failed without a type
        return text[0][:300]
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def _failure(exc: BaseException, now: dict[str, Any]) -> str:
    """The one-line head of a failed run's error: the family, the step and the failure."""
    if not now:
        return f"the profile failed before the first family ({_error_line(exc)})"
    where = now["step"]
    if now.get("step") == "measuring" and "cases" in now:
        where = f"measuring, {now.get('measured', 0)} of {now['cases']} configurations done"
    return f"{now['family']} failed ({where}): {_error_line(exc)}"


def _free_sibling(path: Path, tag: str) -> Path:
    """``<path>-<tag>``, or ``<path>-<tag>-2``, ...: the first that does not exist."""
    n = 1
    while True:
        cand = path.with_name(f"{path.name}-{tag}" + (f"-{n}" if n > 1 else ""))
        if not cand.exists():
            return cand
        n += 1


def _during(now: dict[str, Any]) -> str:
    """Where a run was interrupted, for the log: ``in gemm (measuring)``."""
    return f"in {now['family']} ({now['step']})" if now else "before the first family"


def _interruption(exc: BaseException, now: dict[str, Any], done: list[str], opts: ProfileOptions,
                  coll_notes: dict[str, Any], out: Path) -> dict[str, Any]:
    """``meta.json``'s ``interrupted``: what stopped the run, where, which families are whole, and the command that
    measures the rest. A family cut short keeps the configurations it finished (each row a complete measurement),
    which ``--skip-existing`` passes over when the run is resumed; collectives are kept per process count."""
    rest = [f for f in opts.families if f not in done]
    # the CLI as this process was started (`python -m hybrid.cli.main` from a checkout has no `hybrid` script)
    resume = [*invocation(), "profile", *(["--quick"] if opts.quick else []), *(["--cpu"] if opts.force_cpu else [])]
    for flag, value in (("--threads", opts.threads), ("--device-name", opts.device_name),
                        ("--seed", opts.seed or None), ("--clock", None if opts.clock == "auto" else opts.clock)):
        if value is not None:
            resume += [flag, str(value)]
    if opts.kernel_times:
        resume.append("--kernel-times")
    resume += ["--only", ",".join(rest)]
    if "collective" in rest:  # the process counts not finished (--skip-existing passes over their points held)
        resume += ["--ranks", ",".join(str(r) for r in opts.ranks if f"x{r}" not in coll_notes)]
    for table in (*opts.skip_existing, str(out)):
        resume += ["--skip-existing", table]
    resume += ["-o", f"{out}-rest"]
    return {
        "by": "SIGTERM" if type(exc).__name__ == "Terminated" else "SIGINT" if type(exc) is KeyboardInterrupt
              else "error" if not isinstance(exc, KeyboardInterrupt) else type(exc).__name__,
        "during": now or None,
        "families_complete": list(done),
        "families_not_complete": rest,
        "resume": shlex.join(resume),
    }


_CLOCK_DOC = {
    "thread": "time.thread_time_ns around each repeat: time the measuring thread spent on a core (1 intra-op "
              "thread, so the op runs on it); robust to other processes sharing the cores",
    "wall": "time.perf_counter_ns around each repeat (wall clock)",
    "cuda-events": "CUDA events around each repeat, after a device synchronise",
}


def family_cases(backend: Backend, family: str, *, quick: bool, seed: int = 0, llc_bytes: int = 2**20,
                 arena_bytes: float | None = None) -> list[Case]:
    """The configurations ``hybrid profile`` measures of one kernel family (every family of
    :data:`PROFILE_FAMILIES` but ``collective``) on ``backend``, repeats removed. Enumerating them builds no
    tensor, so a CUDA backend's sweep can be listed on a machine without a GPU (``Backend(torch, "cuda", 1)``):
    which rows a profile of a GPU would hold. ``llc_bytes`` only sizes the cache-rotation sets; ``arena_bytes``
    (default: this machine's share, as a profile run uses) caps the embedding and optimizer tables."""
    arena = _arena_bytes(quick) if arena_bytes is None else float(arena_bytes)
    builders: dict[str, Callable[[], list[Case]]] = {
        "gemm": lambda: kernels.gemm_cases(backend, quick=quick, seed=seed, llc_bytes=llc_bytes),
        "elementwise": lambda: kernels.elementwise_cases(backend, quick=quick, seed=seed, llc_bytes=llc_bytes),
        "norm": lambda: kernels.norm_cases(backend, quick=quick, seed=seed, llc_bytes=llc_bytes),
        "softmax": lambda: kernels.softmax_cases(backend, quick=quick, seed=seed, llc_bytes=llc_bytes),
        "attention": lambda: attn.attention_cases(backend, quick=quick, seed=seed, llc_bytes=llc_bytes),
        "embedding": lambda: emb.embedding_cases(backend, quick=quick, seed=seed, llc_bytes=llc_bytes,
                                                 arena_bytes=arena),
        "optimizer": lambda: optim.optimizer_cases(backend, quick=quick, seed=seed, arena_bytes=arena),
        "conv": lambda: cnn.conv_cases(backend, quick=quick, seed=seed, llc_bytes=llc_bytes),
        "pool": lambda: cnn.pool_cases(backend, quick=quick, seed=seed, llc_bytes=llc_bytes),
    }
    if family not in builders:
        raise InvalidInputError(f"unknown kernel family {family!r}; expected one of {', '.join(builders)}")
    return _unique_cases(builders[family]())


def _unique_cases(cases: list[Case]) -> list[Case]:
    """``cases`` without repeats of a configuration the table cannot tell apart (two NCHW maps with the same
    channels and N x H x W are one batch-norm row): the first of each is kept."""
    seen: set[frozenset] = set()
    out = []
    for c in cases:
        key = config_key(c.row)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def _existing_tables(paths: Sequence[str]) -> list[pd.DataFrame]:
    """The measurement tables / bundles of ``--skip-existing``, read before anything is measured (an unreadable one
    is an error naming it now, not after the ceilings)."""
    from hybrid.data.bundle import _table_file

    frames = []
    for p in paths:
        f = _table_file(Path(p))
        try:  # a canonical table is CSV or Parquet (hybrid.data.schema.read_table); Parquet was read as CSV
            frames.append(pd.read_parquet(f) if f.suffix.lower() in (".parquet", ".pq") else pd.read_csv(f))
        except (OSError, ValueError, ImportError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            raise InvalidInputError(f"--skip-existing {p}: cannot read {f} as a measurement table "
                                    f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
        if "device" not in frames[-1].columns:
            raise InvalidInputError(f"--skip-existing {p}: {f} has no device column")
    return frames


def _failed_before(paths: Sequence[str]) -> list[tuple[str | None, frozenset, str]]:
    """(device, configuration key, error) of the configurations that made a run behind a ``--skip-existing`` bundle
    fail (``meta.json``'s ``interrupted.configuration``, per run in a merged bundle) or that such a run skipped for
    having failed before (``skipped_cases`` with ``failed_before``). A configuration that fails every time (a
    kernel the GPU cannot run) stopped every resume at the same point with nothing measured; a resume skips them."""
    from hybrid.data.bundle import read_meta

    found: list[tuple[str | None, frozenset, str]] = []
    for p in paths:
        if not Path(p).is_dir():
            continue
        try:
            meta = read_meta(p)
        except HybridError:  # a table without a readable meta says nothing of failures
            continue
        device = meta.get("device") if isinstance(meta.get("device"), str) else None
        stops = meta.get("interrupted")
        for stop in stops if isinstance(stops, list) else [stops]:
            if isinstance(stop, dict) and stop.get("by") == "error" and isinstance(stop.get("configuration"), dict):
                found.append((device, config_key(stop["configuration"]), str(stop.get("error") or "an error")))
        for case in meta.get("skipped_cases") or []:
            if isinstance(case, dict) and case.get("failed_before"):
                row = {k: v for k, v in case.items() if k not in ("reason", "failed_before")}
                found.append((device, config_key(row), str(case["failed_before"])))
    return found


def _existing_keys(frames: Sequence[pd.DataFrame], device: str) -> tuple[set[frozenset], int]:
    """Configuration keys (:func:`~hybrid.data.profiler.cases.config_key`) of the rows of ``device`` in the
    ``--skip-existing`` tables (a bundle is extended for its own device; another device's rows say nothing of
    this one), and how many rows of other devices were passed over."""
    keys: set[frozenset] = set()
    other = 0
    for df in frames:
        mine = df["device"].astype(str) == device
        other += int((~mine).sum())
        keys.update(config_key(r) for r in df[mine.to_numpy()].to_dict("records"))
    return keys, other


def _known_collectives(known: set[frozenset], world: int) -> set[tuple[str, float]]:
    """(op, size_bytes) of the ``--skip-existing`` collective rows with ``world`` ranks on one node."""
    out = set()
    for key in known:
        d = dict(key)
        if d.get("op") in coll.COLLECTIVE_OPS and d.get("n_ranks") == world and d.get("n_nodes", 1) == 1 \
                and "size_bytes" in d:
            out.add((str(d["op"]), float(d["size_bytes"])))
    return out


def _arena_bytes(quick: bool) -> float:
    from hybrid.hardware.cpu import available_memory_bytes

    avail = available_memory_bytes()
    cap = ARENA_MAX_BYTES[quick]
    return float(min(cap, ARENA_MEMORY_SHARE * avail)) if avail else float(cap)


def _measure_cases(backend: Backend, family: str, cases: list[Case], policy: Any, progress: bool,
                   skipped: list[dict[str, Any]], clock: str = "wall",
                   into: list[dict[str, Any]] | None = None,
                   current: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Time ``cases``; each row is appended to ``into`` (returned; a new list by default) as soon as it is measured,
    so an interrupted family keeps the configurations it finished. ``current["case"]`` (when given) is the
    configuration under way, which a failure names."""
    from tqdm import tqdm

    rows = [] if into is None else into
    for case in tqdm(cases, desc=family, unit="cfg", disable=not progress, leave=False, file=sys.stderr):
        if current is not None:
            current["case"] = {k: (v.item() if hasattr(v, "item") else v) for k, v in case.row.items()}
        try:
            run, prepare = case.build()
            timing = measure(backend, run, prepare=prepare, policy=policy, clock=clock)
        except Exception as exc:
            if not _is_oom(backend, exc):
                raise
            # record, never drop silently
            skipped.append({**case.row, "reason": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"})
            _release(backend)
            continue
        finally:
            run = prepare = None  # free the case's tensors before the next one
        rows.append({**case.row, **timing.as_row()})
    if current is not None:
        current.pop("case", None)
    return rows


def _kernel_times(backend: Backend, family: str, cases: list[Case], say: Callable[[str], None]
                  ) -> tuple[list[dict[str, Any]], str]:
    """The family's kernel-timed rows and a note for ``meta.json``; a failure of the pass is logged and costs only
    these rows."""
    say(f"{family}: kernel times of {len(cases)} configurations (torch.profiler, CUPTI)")
    try:
        times = kernel_pass(backend, cases, skip=lambda exc: _is_oom(backend, exc))
    except Exception as exc:  # noqa: BLE001 - the eager rows are measured already; keep them
        msg = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        say(f"{family}: kernel-time pass {msg}")
        return [], msg
    return kernel_time_rows(cases, times), f"{len(times)} of {len(cases)} configurations"


def _oom_errors(backend: Backend) -> tuple[type[BaseException], ...]:
    """The exception types that mean a case did not fit in memory (recorded as skipped, never fatal)."""
    return tuple(t for t in (MemoryError, getattr(backend.torch, "OutOfMemoryError", None)) if t is not None)


#: What PyTorch's CPU allocator says when an allocation fails: a plain ``RuntimeError``, not ``MemoryError`` or
#: ``torch.OutOfMemoryError`` (which only the CUDA allocator raises).
_CPU_ALLOC_FAILED = "DefaultCPUAllocator: can't allocate memory"


def _is_oom(backend: Backend, exc: BaseException) -> bool:
    """Whether ``exc`` means a case did not fit in memory: a CPU case too large for the memory limit (``ulimit -v``,
    a container's address-space cap) failed the whole run instead of being skipped as a GPU case is."""
    return isinstance(exc, _oom_errors(backend)) or (isinstance(exc, RuntimeError)
                                                     and _CPU_ALLOC_FAILED in str(exc))


def _release(backend: Backend) -> None:
    if backend.is_cuda:
        backend.torch.cuda.empty_cache()


def _device_key(backend: Backend, opts: ProfileOptions) -> tuple[str, bool]:
    """(device key, whether the catalog knows it as this GPU: no entry to write). Needs no measurement, so
    :func:`run_profile` calls it before the ceilings: a ``--device-name`` naming a catalog GPU on a CPU run, or a
    default output directory that exists, fails at once, not after a minute of ceilings."""
    from hybrid.hardware.catalog import default_catalog

    catalog = default_catalog()
    if backend.is_cuda:
        name = opts.device_name or backend.device_name()
        key = catalog.resolve_device(name, missing_ok=True)
        if key is not None:
            return key, True
        return (device_key_for(name) if opts.device_name else sanitize(name)), False
    from hybrid.hardware.cpu import cpu_model_name

    key = device_key_for(opts.device_name) if opts.device_name else cpu_device_key(cpu_model_name(), backend.threads)
    known = catalog.resolve_device(key, missing_ok=True)
    if known is not None and catalog.devices[known].kind != "cpu":
        raise InvalidInputError(f"--device-name {opts.device_name!r} is the catalog GPU {known!r}; "
                                "this run measures the CPU")
    return key, False


def _device_identity(backend: Backend, opts: ProfileOptions, ceilings: Ceilings) -> tuple[str, dict | None]:
    """(device key, catalog entry to write or None when the catalog already knows the device)."""
    key, known = _device_key(backend, opts)
    if known:
        return key, None
    if backend.is_cuda:
        return key, _gpu_entry(backend, opts.device_name or backend.device_name(), ceilings)
    from hybrid.hardware.cpu import cpu_model_name

    return key, _cpu_entry(cpu_model_name(), backend.threads, ceilings)


def _cpu_entry(model: str, threads: int, c: Ceilings) -> dict[str, Any]:
    from hybrid.hardware.cpu import describe_local_cpu

    est = describe_local_cpu(cores=threads)
    vendor = _cpu_vendor()
    return {
        "vendor": vendor, "kind": "cpu", "arch": platform.machine(),
        "peak_tflops": {k: v / 1e12 for k, v in c.peak_flops.items()},
        "mem_bw_gbps": c.mem_bw / 1e9,
        "mem_gib": est.mem_capacity / 2**30,
        "l2_mib": c.llc_bytes / 2**20,
        "sms": threads,
        "boost_clock_mhz": est.clock_mhz,
        "kernel_latency_us": c.kernel_latency_us,
        **({"mem_bw_shared_gbps": float(c.details["mem_bw_shared"]) / 1e9} if "mem_bw_shared" in c.details else {}),
        "source": f"measured by hybrid profile on {_dt.date.today().isoformat()}: {model}, {threads} threads "
                  "(peaks = fastest large GEMM, mem_bw = large copy, latency = median one-element add"
                  + (f", mem_bw_shared = the copy in {c.details['shared_procs']} processes at once"
                     if "mem_bw_shared" in c.details else "") + ")",
        "notes": "l2_mib holds the last-level (L3) cache size; sms holds the threads used",
    }


def _cpu_vendor() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("vendor_id"):
                v = line.split(":", 1)[1].strip()
                return {"AuthenticAMD": "amd", "GenuineIntel": "intel"}.get(v, v.lower() or "cpu")
    except OSError:
        pass
    return "arm" if platform.machine().lower() in ("aarch64", "arm64") else "cpu"


def _gpu_entry(backend: Backend, name: str, c: Ceilings) -> dict[str, Any]:
    torch = backend.torch
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    vendor = "amd" if getattr(torch.version, "hip", None) else "nvidia"
    return {
        "vendor": vendor, "kind": "gpu", "arch": f"sm_{props.major}{props.minor}" if vendor == "nvidia" else "",
        "peak_tflops": {k: v / 1e12 for k, v in c.peak_flops.items()},
        "mem_bw_gbps": c.mem_bw / 1e9, "mem_gib": props.total_memory / 2**30, "l2_mib": c.llc_bytes / 2**20,
        "sms": int(props.multi_processor_count), "kernel_latency_us": c.kernel_latency_us, "aliases": [name],
        "source": f"measured by hybrid profile on {_dt.date.today().isoformat()}: {name} (not in the catalog)",
    }


def _system_entry(backend: Backend, device_key: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Local N-process system: bus bandwidth from the largest messages, step latency from the fastest message of the
    fewest ranks (any size: each costs at least the latency steps; usually the smallest)."""
    from hybrid.ops.families import bus_factor

    df = pd.DataFrame(rows)
    # all_reduce where measured; else (unsupported, or already in --skip-existing) the first op that was, with its
    # own bus factor ((n-1)/n, not all_reduce's 2(n-1)/n, which doubled the bandwidth) and latency steps
    op = next(o for o in (*coll.COLLECTIVE_OPS, *df["op"].unique()) if (df["op"] == o).any())
    ar = df[df["op"] == op]
    bus = ar["size_bytes"] * bus_factor(ar["op"], ar["n_ranks"]) / (ar["time_us"] * 1e-6)
    smallest = ar[ar["n_ranks"] == ar["n_ranks"].min()]
    # the fastest message of the fewest ranks, of any size: every message costs at least the latency steps, and
    # the smallest one alone can be the slowest on a busy machine (16 B in 3.7 ms, 64 KiB in 0.18 ms: 10x the latency)
    small = smallest.loc[smallest["time_us"].idxmin()]
    twice = 2.0 if op == "all_reduce" else 1.0  # the roofline's latency term: all_reduce pays the steps twice
    steps = twice * max(1.0, np.ceil(np.log2(max(float(small["n_ranks"]), 2.0))))
    fabric = "NCCL between local GPUs" if backend.is_cuda else "gloo over shared memory / loopback between local processes"
    return {
        "device": device_key, "gpus_per_node": int(df["n_ranks"].max()), "intra_fabric": fabric,
        "intra_node_gbps": float(bus.max()) / 1e9, "intra_latency_us": float(small["time_us"]) / steps,
        "source": f"measured by hybrid profile on {_dt.date.today().isoformat()}: intra_node_gbps = best {op} "
                  f"bus bandwidth, intra_latency_us = fastest {op} of the fewest ranks / ({'2 ' if twice == 2 else ''}log2 ranks)",
    }


def _library_version(backend: Backend, gloo: bool = False) -> str:
    torch = backend.torch
    if backend.is_cuda:
        parts = [f"cuda {torch.version.cuda}"]
        if torch.backends.cudnn.is_available():
            parts.append(f"cudnn {torch.backends.cudnn.version()}")
        try:
            parts.append("nccl " + ".".join(str(x) for x in torch.cuda.nccl.version()))
        except Exception:  # NCCL not built in
            pass
        return ", ".join(parts)
    cfg = torch.__config__.show()
    parts = []
    for pat, label in ((r"Math Kernel Library Version ([\w.\-]+)", "mkl"), (r"MKL-DNN v([\w.]+)", "onednn")):
        m = re.search(pat, cfg)
        if m:
            parts.append(f"{label} {m.group(1)}")
    if gloo:
        parts.append("gloo")
    return ", ".join(parts) or "unknown"


def _finish_table(backend: Backend, device_key: str, rows: list[dict[str, Any]],
                  framework: str = "pytorch") -> pd.DataFrame:
    df = pd.DataFrame(rows)
    df.insert(0, "device", device_key)
    df["source"] = SOURCE
    df["framework"] = framework
    df["framework_version"] = str(backend.torch.__version__)
    lib = _library_version(backend)
    coll_lib = _library_version(backend, gloo=not backend.is_cuda)
    is_coll = df["op"].isin(coll.COLLECTIVE_OPS)
    df["library_version"] = np.where(is_coll, coll_lib, lib)
    return df


def _meta(backend: Backend, opts: ProfileOptions, ceilings: Ceilings, device_key: str, system_key: str | None,
          durations: dict[str, float], skipped: list[dict[str, Any]], coll_notes: dict[str, Any],
          command: Sequence[str] | None, table: pd.DataFrame) -> dict[str, Any]:
    torch = backend.torch
    from hybrid.hardware.cpu import cpu_model_name

    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        mem = None
    counts = table.groupby("op").size().to_dict()
    return {
        "tool": "hybrid profile",
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": shlex.join(command) if command is not None else "run_profile() called from Python",
        "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(opts).items()},
        "device": device_key,
        "system": system_key,
        "backend": backend.kind,
        "device_name": backend.device_name(),
        "machine": {"hostname": platform.node(), "platform": platform.platform(), "arch": platform.machine(),
                    "cpu_model": cpu_model_name(), "cores_available": available_cores(),
                    "cpu_count": os.cpu_count(), "memory_bytes": mem,
                    "load_average_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None},
        "versions": {"python": platform.python_version(), "torch": str(torch.__version__),
                     "numpy": np.__version__, "pandas": pd.__version__,
                     "library": _library_version(backend, gloo=not backend.is_cuda)},
        "threads": {"torch_num_threads": torch.get_num_threads(),
                    "torch_num_interop_threads": torch.get_num_interop_threads(),
                    "requested": opts.threads, "policy": "torch.set_num_threads(--threads, default: all cores in "
                    "the affinity mask); collective ranks get threads // ranks each (at least 1)",
                    "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                    "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS")},
        "timing_policy": asdict(QUICK_POLICY if opts.quick else FULL_POLICY),
        "ceilings": {"peak_tflops": {k: v / 1e12 for k, v in ceilings.peak_flops.items()},
                     "mem_bw_gbps": ceilings.mem_bw / 1e9, "kernel_latency_us": ceilings.kernel_latency_us,
                     "llc_bytes": ceilings.llc_bytes, **ceilings.details},
        "collectives": coll_notes,
        "skipped_cases": skipped,
        "row_counts": {str(k): int(v) for k, v in counts.items()},
        "n_rows": len(table),
        "durations_s": {k: round(v, 2) for k, v in durations.items()},
    }
