"""One prepared measurement session on a lent GPU machine: what to measure, in what order, within a time budget.

A lent GPU comes with a fixed budget of device minutes (start-up included), no network and no MLflow/XGBoost, so
a session must be one command that measures the most valuable things first, never loses finished work to a later
step that hangs or runs out of time, and says what it did. :func:`run_session` runs :class:`Step` s one after the
other as subprocesses of the checkout (``python -m hybrid.cli.main ...``), each with its own timeout (the lesser of
its own limit and the budget left), skips a step that cannot finish in the time left, and writes
``OUT/session.json`` after every step (argv, exit code, seconds, status, the tail of its output).

The default plan (:func:`default_steps`), in priority order:

1. ``profile-attention``: fused attention (no public source times it; the LLM figures need it);
2. ``profile-<family>`` for the other kernel families, one process each (a hang costs one family), with
   ``--skip-existing`` the committed bundle of the same GPU where there is one, so a GPU measured before gets only
   configurations it lacks (except the :data:`REMEASURE` family, whose timing changed since: measured whole);
3. ``traces`` (right after ``profile-gemm``, :data:`TRACES_AFTER`: ~35 s): traced bf16 training steps of BERT,
   GPT-2 and Llama with fused attention (SDPA; ``experiments/trace_gpu/record.py --attention sdpa``); needs
   ``transformers``, skipped with a reason when it is missing;
4. ``dlrm``: a short DLRM campaign on one GPU (``hybrid bench campaign --device cuda --ranks 1``), last (on the
   H200, 2026-11-27, four configurations took 167-200 s: it ran out of the budget after the kernel families);
5. ``dlrm-adagrad``: two more configurations, both training with sparse Adagrad (:data:`DLRM_ADAGRAD_SEED`).

Nothing here imports torch, MLflow or XGBoost: the steps do, in their own processes.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hybrid.atomic import write_text
from hybrid.data.profiler.kernel_times import MAX_PASS_S
from hybrid.errors import InvalidInputError
from hybrid.invocation import command

#: Kernel families profiled after attention, most valuable first (every one in ``PROFILE_FAMILIES`` but
#: attention and collectives, which one GPU cannot measure).
KERNEL_FAMILIES = ("gemm", "embedding", "norm", "softmax", "elementwise", "conv", "pool", "optimizer")
#: Families measured whole even where the GPU has a committed bundle: ``norm`` (its backward was timed through
#: the autograd engine before 2026-11-27, ~100 us of host time in every backward row of ``datasets/H100-SXM``).
#: Every other family measures only the configurations its committed bundle lacks (a GPU measured before gets
#: the sweep's new shapes: the 16-bit GEMM grid and the smaller attention shapes added 2026-11-27).
REMEASURE = ("norm",)
#: Families whose profile step also times every configuration by its CUPTI kernels (``hybrid profile
#: --kernel-times``; at most :data:`~hybrid.data.profiler.kernel_times.MAX_PASS_S` each, added to the step's limit):
#: their small ops are where an eager timing is the host's dispatch floor instead of the kernel.
KERNEL_TIME_FAMILIES = ("gemm", "elementwise", "norm", "softmax")
#: Per-step time limits (s): the longest each was seen to need on an H100/H200 with room to spare (the H200's
#: full sweep, 2026-11-27: attention 121 s for 352 cases, gemm 35 s for 452, embedding 67 s, DLRM 4 configs
#: 167-200 s; attention and gemm have grown since by 192 and 504 cases).
STEP_LIMITS = {"profile-attention": 300, "profile-gemm": 180, "profile": 120, "dlrm": 200, "traces": 180,
               "dlrm-adagrad": 150}
#: Seed of the ``dlrm-adagrad`` step's configurations (other configurations than the committed campaigns': the
#: H100's seed 7, the H200's seed 0), every one training with sparse Adagrad (``--adagrad-share 1``): the
#: GPU coalesce's hottest-row term (``COALESCE_US_PER_DUPLICATE``) was fitted on the H100 profile and checked on the
#: H100's Adagrad runs only.
DLRM_ADAGRAD_SEED = 11
#: A step is started only if at least this share of its limit (and 20 s) is left in the budget.
MIN_SHARE = 0.5
#: The traces step runs right after this step (when the plan has it).
TRACES_AFTER = "profile-gemm"
#: Characters of a step's output kept in the manifest.
TAIL_CHARS = 2000
MANIFEST = "session.json"
#: The reason of a step skipped because an earlier session into the same OUT measured its family whole.
MEASURED_BEFORE = "measured whole by an earlier session"


@dataclass
class Step:
    """One subprocess of the session: ``argv`` run in the checkout with ``timeout_s`` at most."""

    name: str
    argv: list[str]
    timeout_s: float
    #: why the step cannot run on this machine (then it is recorded as skipped, not run)
    unavailable: str | None = None
    #: (bundle, rest): the step measures what an earlier session's partial ``bundle`` lacks into ``rest``, which
    #: :func:`run_session` then merges into ``bundle`` (:func:`default_steps`, a session run again)
    resume: tuple[str, str] | None = None
    #: partial bundles an earlier session left beside ``bundle`` (:func:`partial_leftovers`), merged into it with the
    #: rest before the step runs
    fold: tuple[str, ...] = ()


@dataclass
class StepResult:
    name: str
    status: str  # ok | failed | timeout | skipped | interrupted (the session itself was stopped during the step)
    seconds: float = 0.0
    returncode: int | None = None
    argv: list[str] = field(default_factory=list)
    reason: str = ""
    output_tail: str = ""


def _module_available(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def default_steps(out: Path, *, skip_existing: Path | None = None, python: str = sys.executable,
                  families: Sequence[str] = ("attention", *KERNEL_FAMILIES), dlrm_configs: int = 4,
                  dlrm_adagrad_configs: int = 2,
                  traces: bool = True, cpu: bool = False, remeasure: Sequence[str] = REMEASURE) -> list[Step]:
    """The session plan of the module docstring (``cpu``: profile the CPU instead, for trying the plan out).

    Paths in the steps are absolute: :func:`run_session` runs them in the checkout, so a relative ``out`` put the
    steps' bundles under the checkout while ``session.json`` went to ``out`` beside the caller.

    A session run again into the same ``out`` resumes (:func:`bundle_state`): a family whose ``profile-F`` bundle is
    complete is not measured again (skipped, with the reason), and one whose bundle is partial (the step ran out of
    time, was interrupted or failed) measures only the configurations it lacks, into ``profile-F-rest``, which
    :func:`run_session` merges into ``profile-F``. Partial bundles an earlier session left beside it
    (:func:`partial_leftovers`: ``profile-F-partial``, written when a ``--force`` run over ``profile-F`` was cut short)
    are merged in first, so their configurations are not measured again; beside a complete ``profile-F`` the skip
    reason names them and the merge command. Measuring everything again re-ran every finished family (minutes
    of a lent GPU), and a second interruption left ``profile-F`` and ``profile-F-partial`` holding the same
    configurations."""
    cli = [python, "-m", "hybrid.cli.main"]
    out = Path(out).absolute()
    skip_existing = Path(skip_existing).absolute() if skip_existing is not None else None
    steps = []
    for fam in dict.fromkeys(families):  # `--families gemm,gemm` measured the family twice, into one directory
        name = f"profile-{fam}"
        target = out / name
        recover_swap(target)  # a session stopped in the middle of merging a rest into the bundle
        state = bundle_state(target)
        leftovers = partial_leftovers(target)
        if state is None and leftovers and not target.exists():  # the leftovers become the bundle to resume
            state = "partial"
        rest = out / f"{name}-rest"
        dest = rest if state == "partial" else target
        argv = [*cli, "profile", "--only", fam, "-o", str(dest), "--no-progress", "--force"]
        if cpu:
            argv += ["--cpu", "--threads", "1", "--quick"]
        limit = STEP_LIMITS.get(name, STEP_LIMITS["profile"])
        if fam in KERNEL_TIME_FAMILIES and not cpu:
            argv += ["--kernel-times"]
            limit += int(MAX_PASS_S)
        if skip_existing is not None and fam not in remeasure:
            argv += ["--skip-existing", str(skip_existing)]
        if state == "complete":
            left = ""
            if leftovers:  # measured again over a complete bundle: whether they should replace its rows is not ours
                left = (f"; {', '.join(leftovers)} (left by an earlier session) hold configurations measured again: "
                        f"`{command('data', 'merge', str(target), *leftovers, '-o', 'ALL', '--replace')}` keeps them")
            steps.append(Step(name, argv, limit, unavailable=f"{target} holds the {fam} family {MEASURED_BEFORE} "
                                                             f"(remove it to measure it again){left}"))
        elif state == "partial":
            steps.append(Step(name, [*argv, "--skip-existing", str(target)], limit,
                              resume=(str(target), str(rest)), fold=tuple(leftovers)))
        else:
            steps.append(Step(name, argv, limit))
    tail: list[Step] = []
    if dlrm_configs > 0:
        tail.append(Step("dlrm", [*cli, "bench", "campaign", str(out / "dlrm"), "--device", "cpu" if cpu else "cuda",
                                   "--ranks", "1", "--configs", str(dlrm_configs), "--iters", "10", "--warmup", "3"],
                          STEP_LIMITS["dlrm"]))
    if dlrm_configs > 0 and dlrm_adagrad_configs > 0:  # (no DLRM step: neither)
        tail.append(Step("dlrm-adagrad", [*cli, "bench", "campaign", str(out / "dlrm-adagrad"), "--device",
                                          "cpu" if cpu else "cuda", "--ranks", "1", "--configs",
                                          str(dlrm_adagrad_configs), "--seed", str(DLRM_ADAGRAD_SEED),
                                          "--adagrad-share", "1", "--iters", "10", "--warmup", "3"],
                         STEP_LIMITS["dlrm-adagrad"]))
    if traces:
        record = Path(__file__).resolve().parents[2] / "experiments" / "trace_gpu" / "record.py"
        why = None
        if not record.is_file():
            why = f"{record} not in this checkout"
        elif not _module_available("transformers"):
            why = "transformers is not installed (carry its wheel to record traces of real models)"
        elif cpu:
            why = "traces are recorded on a CUDA GPU only"
        # the committed traces (datasets/traces-h100) run eager attention: record the fused (SDPA) kind in bf16
        step = Step("traces", [python, str(record), "--out", str(out / "traces"), "--models", "bert,gpt2,llama",
                               "--dtypes", "bf16", "--attention", "sdpa"], STEP_LIMITS["traces"], unavailable=why)
        # short (~35 s on an H200) and what the trace benchmarks lack most: right after the GEMMs, before the
        # families the LLM and trace work needs least; a full sweep of a new GPU leaves no budget at the end
        names = [st.name for st in steps]
        at = names.index(TRACES_AFTER) + 1 if TRACES_AFTER in names else len(steps)
        steps.insert(at, step)
    return steps + tail


def bundle_state(path: Path) -> str | None:
    """``"complete"`` or ``"partial"`` for a profile bundle at ``path`` (its ``meta.json``'s ``partial``: a merged
    bundle's per-run list says complete when its last run, the one that measured the rest, finished), None when
    ``path`` holds no bundle whose meta can be read (the step then runs as in a new session)."""
    from hybrid.data.bundle import partial_stop

    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or not (path / "measurements.csv").is_file():
        return None
    return "partial" if partial_stop(meta) is not None else "complete"


def partial_leftovers(bundle: Path) -> list[str]:
    """The partial bundles beside ``bundle`` that runs into it left (``<bundle>-partial``, ``-partial-2``, ...: a
    ``--force`` run over an existing bundle writes what it measured before it was cut short there, as sessions did
    before they resumed; ``<bundle>-rest-partial...`` of a resumed step whose earlier rest was not merged), in the
    order they were written. A session that looked at ``profile-F`` alone measured their configurations again."""
    out = []
    for stem in (bundle.name, f"{bundle.name}-rest"):
        n = 1
        while True:
            cand = bundle.with_name(f"{stem}-partial" + (f"-{n}" if n > 1 else ""))
            if not cand.exists():
                break
            if bundle_state(cand) is not None:
                out.append(str(cand))
            n += 1
    return out


def committed_bundle_for(device_name: str, datasets: Path | None = None) -> Path | None:
    """The committed bundle (``datasets/<catalog key>/``) of the GPU ``device_name`` names, if there is one."""
    from hybrid.data.paths import project_datasets_dir
    from hybrid.hardware.catalog import default_catalog

    key = default_catalog().resolve_device(device_name, missing_ok=True)
    if key is None:
        return None
    path = (datasets or project_datasets_dir()) / key
    return path if (path / "measurements.csv").is_file() else None


def run_session(out: str | os.PathLike, budget_s: float, steps: Sequence[Step], *,
                env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None,
                progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run ``steps`` in order within ``budget_s`` seconds; returns (and writes to ``OUT/session.json``) the
    manifest. A step's own files stay where it wrote them whatever its status."""
    if not (budget_s > 0 and math.isfinite(budget_s)):  # inf would also write `Infinity`, not JSON, to session.json
        raise InvalidInputError(f"the session budget must be a finite number of seconds > 0, got {budget_s}")
    if not steps:
        raise InvalidInputError("the session has no steps")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(cwd) if cwd is not None else Path(__file__).resolve().parents[2]
    run_env = dict(os.environ if env is None else env)
    run_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), run_env.get("PYTHONPATH", "")) if p)
    start = time.monotonic()
    manifest: dict[str, Any] = {"budget_s": budget_s, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                                "steps": []}
    say = progress or (lambda _msg: None)

    def record(res: StepResult) -> None:  # the manifest on disk after every step, so a stopped session keeps it
        manifest["steps"].append(asdict(res))
        manifest["elapsed_s"] = round(time.monotonic() - start, 1)
        write_text(out / MANIFEST, json.dumps(manifest, indent=2) + "\n")

    for step in steps:
        left = budget_s - (time.monotonic() - start)
        if step.unavailable:
            res = StepResult(step.name, "skipped", argv=step.argv, reason=step.unavailable)
        elif left < max(20.0, MIN_SHARE * step.timeout_s):
            res = StepResult(step.name, "skipped", argv=step.argv,
                             reason=f"{left:.0f} s left of the budget, the step may need {step.timeout_s:.0f} s")
        else:
            before = ""
            if step.resume is not None:  # a rest left by a session stopped before it merged, leftovers: merged first
                before = _merge_rest(*step.resume, fold=step.fold)
            t0 = time.monotonic()
            try:
                res = _run_step(step, min(step.timeout_s, left), run_env, root)
            except BaseException as exc:  # Ctrl-C or the SIGTERM of a time limit on the session: said, then on
                res = StepResult(step.name, "interrupted", time.monotonic() - t0, argv=step.argv,
                                 reason=f"the session was stopped ({type(exc).__name__}) during the step; the step "
                                        "got SIGTERM to keep what it measured")
                record(res)
                raise
            if step.resume is not None:
                merged = _merge_rest(*step.resume)
                res.reason = "; ".join(r for r in (res.reason, before, merged) if r)
        record(res)
        say(f"{res.name}: {res.status} ({res.seconds:.0f} s){' - ' + res.reason if res.reason else ''}")
    return manifest


def _merge_rest(bundle: str, rest: str, fold: Sequence[str] = ()) -> str:
    """Merge the bundle ``rest`` (what a resumed step measured), after the partial bundles ``fold`` (an earlier
    session's leftovers), into ``bundle``, replacing it (created when it does not exist), and remove them; what
    happened, for the step's ``reason`` ('' when there is nothing to merge). A merge that fails leaves them all as
    they are and says how to merge them by hand."""

    from hybrid.data.bundle import merge_bundles
    from hybrid.errors import HybridError

    base = Path(bundle)
    recover_swap(base)
    extras = [Path(p) for p in (*fold, rest) if bundle_state(Path(p)) is not None]
    if not extras:
        return ""
    parts = [base, *extras] if base.exists() else extras
    names = " and ".join(e.name for e in extras)
    tmp = _merging(base)
    if len(parts) == 1:  # one leftover and no bundle: it becomes the bundle
        parts[0].rename(base)
        return f"resumed: {parts[0]} (left by an earlier session) is now {base} ({bundle_state(base)})"
    try:
        with warnings.catch_warnings():  # the two runs' measured CPU ceilings differ a little: expected here
            warnings.simplefilter("ignore", UserWarning)
            _, table = merge_bundles(parts, tmp, on_duplicate="last",
                                     note=f"{names} (what interrupted session steps measured) merged in")
    except (HybridError, OSError, ValueError) as exc:
        what = f"the rest is in {extras[0]}" if len(extras) == 1 else f"{names} are beside it"
        return (f"{what} and could not be merged into {base} ({exc}); merge them with "
                f"`{command('data', 'merge', *map(str, parts), '-o', 'ALL', '--replace')}`")
    if base.exists():
        _swap_in(base, tmp)
    else:
        tmp.rename(base)
    for extra in extras:  # only once the merged bundle is in place: a crash before this merges them again
        _remove(extra)
    left = [e.name for e in extras if str(e) in {str(p) for p in fold}]
    return (f"resumed: merged into {base} ({len(table)} rows, {bundle_state(base)})"
            + (f", with {' and '.join(left)} left by an earlier session" if left else ""))


def _deleting(path: Path) -> Path:
    """Where :func:`_remove` moves a merged leftover before deleting it."""
    return path.with_name(f".{path.name}-deleting")


def _remove(path: Path) -> None:
    """Delete the directory ``path``: renamed aside first (one atomic step), so a stop during the deletion leaves a
    hidden, half-deleted directory (removed by the next :func:`recover_swap`) rather than a half-deleted bundle
    under the name the next step writes to (``-o profile-F-rest --force`` refused it as "not a bundle")."""
    import shutil

    gone = _deleting(path)
    if gone.exists():
        shutil.rmtree(gone)
    path.rename(gone)
    shutil.rmtree(gone)


def _merging(bundle: Path) -> Path:
    """Where :func:`_merge_rest` writes the merged bundle before it replaces ``bundle``."""
    return bundle.with_name(f".{bundle.name}-merging")


def _aside(bundle: Path) -> Path:
    """Where :func:`_swap_in` keeps the replaced ``bundle`` until the new one is in place."""
    return bundle.with_name(f".{bundle.name}-merged-away")


def _swap_in(bundle: Path, new: Path) -> None:
    """Replace the directory ``bundle`` by ``new``: two renames, which a signal can split (no atomic exchange of
    two directories here). Between them ``bundle`` does not exist and the old one is at :func:`_aside`, which
    :func:`recover_swap` puts back on the next start; after them the aside one is only removed."""
    import shutil

    old = _aside(bundle)
    bundle.rename(old)
    new.rename(bundle)
    shutil.rmtree(old)


def recover_swap(bundle: str | os.PathLike) -> str:
    """Undo or finish a :func:`_swap_in` of ``bundle`` that a crash (SIGTERM, SIGKILL, a machine given back) cut
    short, and remove a half-written merge: a session stopped between the two renames left ``profile-F`` missing,
    so the next session measured the family from scratch and the bundle stayed hidden in ``.profile-F-merged-away``.
    The old bundle is put back (its rest, removed only once a merge is in place, is merged again). What was done,
    '' when nothing was left over."""
    import shutil

    base = Path(bundle)
    old, tmp = _aside(base), _merging(base)
    said = ""
    if old.exists():
        if base.exists():  # the merged bundle is in place: the aside one is what the swap had still to remove
            shutil.rmtree(old)
        else:
            old.rename(base)
            said = f"{base} put back from {old} (a merge into it was cut short)"
    if tmp.exists():
        shutil.rmtree(tmp)
    for gone in base.parent.glob(f".{base.name}*-deleting"):  # a deletion of merged leftovers cut short
        if gone.is_dir():
            shutil.rmtree(gone)
    return said


#: A step that runs out of time gets SIGTERM this long (at most a tenth of its limit) before its limit, then
#: SIGKILL at the limit: ``hybrid profile`` writes what it measured as a partial bundle on SIGTERM
#: (docs/profiler.md, interrupted runs), which a SIGKILL at the limit threw away.
TERM_GRACE_S = 20.0
#: A step under way when the session itself is stopped (Ctrl-C, the SIGTERM of ``timeout 555 ... gpu-session``)
#: gets SIGTERM and this long to write what it measured, then SIGKILL: it was SIGKILLed at once, and a profile step
#: lost the configurations it had measured. Shorter than :data:`TERM_GRACE_S`: whoever stopped the session may
#: kill it soon.
INTERRUPT_GRACE_S = 10.0


def _run_step(step: Step, timeout: float, env: dict[str, str], cwd: Path) -> StepResult:
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(step.argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, stdin=subprocess.DEVNULL)
    except OSError as exc:
        return StepResult(step.name, "failed", time.monotonic() - t0, None, step.argv, f"could not start: {exc}")
    grace = min(TERM_GRACE_S, 0.1 * timeout)
    try:
        out, err = proc.communicate(timeout=timeout - grace)
    except subprocess.TimeoutExpired:
        proc.terminate()  # the step keeps what it finished (a profile's partial bundle), then stops
        try:
            out, err = proc.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        return StepResult(step.name, "timeout", time.monotonic() - t0, proc.returncode, step.argv,
                          f"stopped after {timeout - grace:.0f} s (SIGTERM, then SIGKILL at {timeout:.0f} s)",
                          (_tail(out) + _tail(err))[-TAIL_CHARS:])
    except BaseException:
        proc.terminate()
        try:
            proc.communicate(timeout=INTERRUPT_GRACE_S)  # its output drained: a full pipe would block its exit
        except BaseException:  # still running, or stopped a second time: no more waiting
            proc.kill()
            proc.wait()
        raise
    status = "ok" if proc.returncode == 0 else "failed"
    return StepResult(step.name, status, time.monotonic() - t0, proc.returncode, step.argv,
                      "" if status == "ok" else f"exit code {proc.returncode}",
                      (_tail(out) + _tail(err))[-TAIL_CHARS:])


def _tail(text: Any) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return str(text)[-TAIL_CHARS:]
