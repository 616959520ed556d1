"""Record the traces ``hybrid trace`` reads, for one step of a user's training (or inference) loop.

>>> from hybrid.data.traces.record import trace_step          # doctest: +SKIP
>>> for i in range(3):                                          # doctest: +SKIP
...     step()                                                  # warm-up: caches, allocator, autotuning
>>> with trace_step("traces/"):                                 # doctest: +SKIP
...     step()                                                  # the recorded step
>>> # traces/kineto_rank0.json (+ traces/et_rank0.json)

:func:`record_step` (and ``hybrid trace record``) also times a few untraced calls of the step before the recorded
one (:data:`UNTRACED_KEY`: the step without the profiler, which ``trace predict`` compares with on the traced
hardware) and runs the step once more, after the recorded one, to measure its tensor memory
(:mod:`hybrid.data.traces.memory`); the Chrome trace carries both. With :func:`trace_step` alone, pass
``untraced_us=`` your own timings and ``memory=measure_step_memory(step)``.

Under ``torch.distributed`` every rank records its own files (``..._rank<r>.json``); the Chrome trace then names
the rank, the world size and the process groups. ``device="meta"`` marks a step whose tensors live on the meta
device (shapes without data: a model too big to run here), so the trace is never taken as measured hardware.
"""

from __future__ import annotations

import json
import math
import os
import runpy
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybrid.errors import InvalidInputError

if TYPE_CHECKING:
    from hybrid.data.traces.memory import StepMemory


#: Chrome-trace metadata: wall times (us) of untraced calls of the step just before the recorded one, and their
#: median: the step as the program runs it without the profiler (:func:`record_step`'s ``timed``).
UNTRACED_KEY = "hybrid_untraced_step"


def untraced_step_us(meta: dict[str, Any]) -> float | None:
    """The median untraced step time (us) stored in a parsed trace's metadata (``RankTrace.meta``), or None."""
    raw = meta.get(UNTRACED_KEY)
    if raw in (None, ""):
        return None
    try:
        d = json.loads(raw) if isinstance(raw, str) else dict(raw)
        median = float(d["median_us"])
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidInputError(f"malformed {UNTRACED_KEY} metadata in the trace: {exc}") from None
    if not (math.isfinite(median) and median > 0):
        raise InvalidInputError(f"malformed {UNTRACED_KEY} metadata in the trace: median_us {median} is not > 0")
    return median


def _time_calls(step: Callable[[], Any], n: int) -> list[float]:
    """Wall time (us) of ``n`` calls of ``step``, each waited for on the GPU where CUDA is in use."""
    import time

    import torch

    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    out = []
    for _ in range(n):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def _dist_int(getter: str, env: str, default: int) -> int:
    """``torch.distributed.<getter>()`` in an initialised process group, else the launcher's environment variable
    ``env`` (torchrun sets ``RANK`` / ``WORLD_SIZE``), else ``default``."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(getattr(dist, getter)())
    except ImportError:  # pragma: no cover
        pass
    return int(os.environ.get(env, default))


def _rank() -> int:
    return _dist_int("get_rank", "RANK", 0)


#: Whether a :func:`trace_step` is recording in this process: a second one inside it would start a second profiler
#: and execution-trace observer on the same process, which crashed it (a segmentation fault, torch 2.13).
_RECORDING = False


def _refuse_nested() -> None:
    """Refuse to record while this process is already being profiled (an enclosing :func:`trace_step`, or a
    ``torch.profiler.profile`` of the program's own), before any profiler or observer is started."""
    import torch

    if _RECORDING:
        raise InvalidInputError("trace_step inside another trace_step: one step is recorded at a time (nested "
                                "profilers crash the process); end the outer one first, or trace the inner step alone")
    enabled = getattr(getattr(torch._C, "_autograd", None), "_profiler_enabled", None)
    if enabled is not None and enabled():
        raise InvalidInputError("trace_step while a torch profiler is already running in this process: one "
                                "profiler at a time (nested profilers crash the process); stop the other one first")


@contextmanager
def trace_step(out_dir: str | os.PathLike, *, execution_trace: bool = True, device: str | None = None,
               name: str = "ProfilerStep#0", cuda: bool | None = None,
               measure_overhead: bool = True, memory: StepMemory | None = None,
               untraced_us: Sequence[float] | float | None = None) -> Iterator[dict[str, Path]]:
    """Profile the enclosed step: Chrome trace with shapes (and an execution trace) written to ``out_dir``.

    Yields a dict that holds, after the block, ``{"kineto": path, "et": path}``. Files are written to a
    temporary name and renamed, so an interrupted step leaves nothing half-written. With ``measure_overhead``
    (and a step that runs, i.e. not ``device="meta"``), what recording costs the host on this machine is measured
    first (:func:`hybrid.data.traces.overhead.measure_profiler_overhead`, ~1-3 s) and stored in the Chrome trace,
    so that predictions can take it off the traced host times. ``memory``: the step's tensor memory
    (:class:`~hybrid.data.traces.memory.StepMemory`), stored in the Chrome trace. ``untraced_us``: wall times (us)
    of untraced calls of the same step (or one time), stored with their median (:data:`UNTRACED_KEY`).
    """
    import torch
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, record_function

    global _RECORDING
    _refuse_nested()
    untraced = None
    given = ([untraced_us] if isinstance(untraced_us, int | float | str) or not hasattr(untraced_us, "__iter__")
             else list(untraced_us)) if untraced_us is not None else []
    if given:
        import numpy as np

        try:
            times = np.asarray(given, dtype=np.float64)
        except (TypeError, ValueError):
            times = np.array([np.nan])
        if not (times.ndim == 1 and np.isfinite(times).all() and (times > 0).all()):
            raise InvalidInputError(f"untraced_us must be times > 0 (us): one number or a list of them, got "
                                    f"{untraced_us!r}")
        untraced = json.dumps({"times_us": [round(float(t), 3) for t in times], "calls": len(times),
                               "median_us": round(float(np.median(times)), 3)})
    out = Path(out_dir)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    rank = _rank()
    kin = out / f"kineto_rank{rank}.json"
    etp = out / f"et_rank{rank}.json"
    acts = [ProfilerActivity.CPU]
    if cuda if cuda is not None else torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
    paths: dict[str, Path] = {}
    overhead = None
    if measure_overhead and str(device or "") != "meta":
        from hybrid.data.traces.overhead import measure_profiler_overhead

        try:
            overhead = measure_profiler_overhead("cuda" if ProfilerActivity.CUDA in acts else "cpu", execution_trace)
        except Exception as exc:  # the step's trace matters more than this measurement: record it without
            import warnings

            warnings.warn(f"could not measure what recording costs the host ({type(exc).__name__}: {exc}); the "
                          "trace is recorded without it", RuntimeWarning, stacklevel=3)
    # a process's first record_function costs 1-9 ms (PyTorch sets up its profiler ops on first use; no profiler
    # runs here, nothing is recorded); as the step's annotation it put that time between the step's start and its
    # first op, a host gap the program never has, kept in predictions on the traced CPU (0.7-15 ms in 1-3 ms steps
    # recorded without the overhead measurement above, whose own annotations used to absorb it)
    with record_function("hybrid: profiler warm-up"):
        pass
    # every rank of a job starts its traced step together: the overhead measurement above takes each rank its own
    # 1-3 s, and ranks that start apart make the traced step's first collective absorb the skew (up to 10x the step)
    _sync_ranks()
    et = None
    tmp_et = etp.with_name(f".{etp.name}.tmp")
    _RECORDING = True
    try:
        if execution_trace:
            tmp_et.unlink(missing_ok=True)
            et = ExecutionTraceObserver().register_callback(str(tmp_et))
            # PyTorch keeps one execution-trace observer per process and opens its file when it registers one: no
            # file, the program's own observer holds it (``_registered`` says True all the same, torch 2.13)
            if not getattr(et, "_registered", True) or not tmp_et.exists():
                # not ours to start, stop or unregister, and neither may its finaliser (``__del__`` unregisters the
                # process's observer, the program's own, whose next stop() then crashes the process)
                et._registered = False
                et = None
                raise InvalidInputError(_ET_TAKEN)
        with profile(activities=acts, record_shapes=True) as prof:
            if device:
                prof.add_metadata("hybrid_traced_device", str(device))
            # intra-op threads of the traced step: a CPU profile bundle is only comparable at the same count
            prof.add_metadata("hybrid_torch_threads", str(torch.get_num_threads()))
            # the program's fp32 math switches (TF32 or not): what its matmuls / convolutions run on a GPU
            from hybrid.data.traces.precision import METADATA_KEY as PRECISION_KEY
            from hybrid.data.traces.precision import current_switches

            prof.add_metadata_json(PRECISION_KEY, json.dumps(current_switches()))
            if overhead is not None:
                from hybrid.data.traces.overhead import METADATA_KEY

                prof.add_metadata_json(METADATA_KEY, overhead.to_json())  # a JSON object, not a string
            if memory is not None:
                from hybrid.data.traces.memory import METADATA_KEY as MEMORY_KEY

                prof.add_metadata_json(MEMORY_KEY, memory.to_json())
            if untraced is not None:
                prof.add_metadata_json(UNTRACED_KEY, untraced)
            if et is not None:
                et.start()
            with record_function(name):
                yield paths
            if et is not None:
                et.stop()
        if et is not None:
            et.unregister_callback()
            et = None
            if not tmp_et.is_file():
                raise InvalidInputError(_ET_TAKEN)
        tmp_k = kin.with_name(f".{kin.name}.tmp")
        prof.export_chrome_trace(str(tmp_k))
        os.replace(tmp_k, kin)
        paths["kineto"] = kin
        if execution_trace:
            from hybrid.data.traces.precision import METADATA_KEY as PRECISION_KEY
            from hybrid.data.traces.precision import current_switches

            # the execution trace alone (no Chrome trace) says which fp32 math its program allowed too
            _stamp_json(tmp_et, PRECISION_KEY, current_switches())
            os.replace(tmp_et, etp)
            paths["et"] = etp
        else:  # an execution trace of an earlier recording would be read with this step's Chrome trace
            etp.unlink(missing_ok=True)
        _warn_other_files(out, rank)
    finally:
        _RECORDING = False
        if et is not None:
            try:
                et.unregister_callback()
            except Exception:  # pragma: no cover - best effort cleanup
                pass
        for p in (tmp_et, kin.with_name(f".{kin.name}.tmp")):
            p.unlink(missing_ok=True)
        # after the temporary files went: the observer's open file kept the directory from being empty, and a
        # failed step left the directory it had created behind
        if created and not paths and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # nothing recorded: no empty directory left behind


def _stamp_json(path: Path, key: str, value: Any) -> None:
    """Add ``key: value`` to the top-level object of a written JSON file without parsing it (an execution trace
    runs to gigabytes): a streamed copy with the member put first. A file that is not a JSON object is left as
    it is (the trace reader says what is wrong with it)."""
    import shutil

    with open(path, "rb") as src:
        head = src.read(4096)
        lead = len(head) - len(head.lstrip())
        if head[lead:lead + 1] != b"{":
            return
        src.seek(lead + 1)
        tmp = path.with_name(path.name + ".stamp")
        try:
            with open(tmp, "wb") as dst:
                dst.write(b"{" + json.dumps(key).encode() + b": " + json.dumps(value).encode())
                rest = head[lead + 1:].lstrip()
                if not rest.startswith(b"}"):
                    dst.write(b", ")  # members follow (an empty object gets none)
                shutil.copyfileobj(src, dst)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


def _world_size() -> int:
    return _dist_int("get_world_size", "WORLD_SIZE", 1)


def _warn_other_files(out: Path, rank: int) -> None:
    """Warn (rank 0 only) when ``out`` holds JSON files that are not this recording's: ``trace predict`` and
    ``import`` read every ``*.json`` / ``*.json.gz`` of a directory, so an earlier recording's ranks (a 2-rank run
    where one process is recorded now) or any other JSON there is read with this step, and refused or mixed in."""
    if rank != 0:
        return
    from hybrid.data.traces.parse import TRACE_GLOBS

    ours = {f"{kind}_rank{r}.json" for kind in ("kineto", "et") for r in range(_world_size())}
    other = sorted({f.name for g in TRACE_GLOBS for f in out.glob(g) if f.is_file()} - ours)
    if other:
        import warnings

        shown = ", ".join(other[:5]) + (f" and {len(other) - 5} more" if len(other) > 5 else "")
        warnings.warn(f"{out} also holds {shown}, not of this recording ({_world_size()} rank(s)): `hybrid trace "
                      f"predict {out}` reads every *.json and *.json.gz there; move them out, or give this "
                      "recording's files themselves", UserWarning, stacklevel=2)


#: Why a step cannot be recorded with its execution trace while the program runs an observer of its own.
_ET_TAKEN = ("the execution trace cannot be recorded: another torch.profiler.ExecutionTraceObserver is registered "
             "in this process (PyTorch keeps one per process); stop and unregister it first, or record without the "
             "execution trace (execution_trace=False, `hybrid trace record --no-et`)")


def _sync_ranks() -> None:
    """A barrier over the default process group when this process is one rank of an initialised job."""
    import torch

    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def record_step(step: Callable[[], Any], out_dir: str | os.PathLike, *, warmup: int = 2,
                execution_trace: bool = True, device: str | None = None,
                measure_overhead: bool = True, memory: bool = True, timed: int = 3) -> dict[str, Path]:
    """Run ``step`` ``warmup`` times, then ``timed`` more times timed (untraced: their median, stored in the
    Chrome trace, is the step without the profiler, :data:`UNTRACED_KEY`; not on the meta device), then once
    under :func:`trace_step`, then (``memory``) once more to measure its tensor memory, stored in the written
    Chrome trace; returns the written paths. The memory pass runs after the traced call: run under a dispatch
    mode, a ``torch.compile`` step falls back to eager for good, and the trace would have recorded another
    program. A step the memory measurement cannot run under (a warning says why) is recorded without it."""
    if warmup < 0:
        raise InvalidInputError(f"warmup must be >= 0, got {warmup}")
    if timed < 0:
        raise InvalidInputError(f"timed must be >= 0, got {timed}")
    for _ in range(warmup):
        step()
    untraced = _time_calls(step, timed) if timed and str(device or "") != "meta" else None
    with trace_step(out_dir, execution_trace=execution_trace, device=device,
                    measure_overhead=measure_overhead, untraced_us=untraced) as paths:
        step()
    mem = _step_memory(step, device) if memory else None
    if mem is not None:
        _store_memory(paths["kineto"], mem)
    return paths


def _store_memory(kineto: Path, mem: StepMemory) -> None:
    """Add the step memory to a written Chrome trace's metadata (what ``trace_step(memory=...)`` stores)."""
    from hybrid.atomic import atomic_file
    from hybrid.data.traces.memory import METADATA_KEY as MEMORY_KEY

    doc = json.loads(kineto.read_text())
    doc[MEMORY_KEY] = json.loads(mem.to_json())
    with atomic_file(kineto) as tmp:
        tmp.write_text(json.dumps(doc))


def _step_memory(step: Callable[[], Any], device: str | None) -> StepMemory | None:
    from hybrid.data.traces.memory import measure_step_memory

    try:
        return measure_step_memory(step, device)
    except Exception as exc:  # e.g. a compiled step that a dispatch mode breaks: the trace matters more
        import warnings

        warnings.warn(f"could not measure the step's tensor memory ({type(exc).__name__}: {exc}); the trace is "
                      "recorded without it", RuntimeWarning, stacklevel=3)
        return None


def record_script(script: str | os.PathLike, out_dir: str | os.PathLike, *, step_fn: str = "step",
                  warmup: int = 2, execution_trace: bool = True, args: list[str] | None = None,
                  threads: int | None = None, measure_overhead: bool = True,
                  memory: bool = True, timed: int = 3) -> dict[str, Path]:
    """Run ``script`` as ``__main__``-less module (its top level sets things up), then trace its ``step_fn()``.

    ``threads`` sets PyTorch's intra-op thread count first (to match the profile bundle the trace is predicted
    with, e.g. 1 for ``datasets/cpu-amd-epyc-1c``); the script may still change it."""
    p = Path(script)
    if not p.is_file():
        raise InvalidInputError(f"script not found: {p}")
    if threads is not None:
        if threads < 1:
            raise InvalidInputError(f"threads must be >= 1, got {threads}")
        import torch

        torch.set_num_threads(threads)
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [str(p), *(args or [])]
    # as `python SCRIPT` does: the script's directory first on the import path, so that it imports the modules
    # beside it (its model, its data loader); kept while its step runs (imports inside it), then taken off
    sys.path.insert(0, str(p.resolve().parent))
    try:
        return _record_script(p, out_dir, step_fn, warmup, execution_trace, measure_overhead, memory, timed)
    finally:
        sys.argv = old_argv
        sys.path[:] = old_path


def _record_script(p: Path, out_dir: str | os.PathLike, step_fn: str, warmup: int, execution_trace: bool,
                   measure_overhead: bool, memory: bool, timed: int) -> dict[str, Path]:
    """:func:`record_script` once its arguments, import path and threads are set."""
    try:
        ns = runpy.run_path(str(p), run_name="__hybrid_trace__")
    except SyntaxError as exc:
        raise InvalidInputError(f"{p}: not a Python script ({exc.msg}, line {exc.lineno})") from None
    except SystemExit as exc:
        raise InvalidInputError(f"{p} exited (status {exc.code}) while its top level ran: it must define "
                                f"{step_fn}() and return (guard a training loop with `if __name__ == "
                                "'__main__':`)") from None
    except Exception as exc:
        raise _script_error(p, "its top level", exc) from exc
    fn = ns.get(step_fn)
    if not callable(fn):
        raise InvalidInputError(f"{p} defines no function {step_fn!r} to trace (define `def {step_fn}(): ...` that "
                                "runs one training step, or pass --step-fn)")
    device = ns.get("TRACE_DEVICE")
    try:
        return record_step(fn, out_dir, warmup=warmup, execution_trace=execution_trace,
                           device=str(device) if device else None, measure_overhead=measure_overhead,
                           memory=memory, timed=timed)
    except InvalidInputError:
        raise
    except SystemExit as exc:  # sys.exit() inside the step: the process ended with its status and not a word
        raise InvalidInputError(f"{p}: {step_fn}() exited (status {exc.code}) instead of returning: it must run one "
                                "step and return; nothing was recorded") from None
    except OSError as exc:
        if not _script_frames(p, exc):  # not raised through the step: writing the trace (an output path that
            # cannot be created or written) was blamed on the script's step
            raise InvalidInputError(f"cannot write the trace into {out_dir}: {exc}") from None
        raise _script_error(p, f"{step_fn}()", exc) from exc
    except Exception as exc:
        raise _script_error(p, f"{step_fn}()", exc) from exc


def _script_frames(script: Path, exc: BaseException) -> list[Any]:
    """The frames of ``exc``'s traceback that run ``script``'s own code."""
    import traceback

    return [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == script.resolve()]


def _script_error(script: Path, where: str, exc: BaseException) -> InvalidInputError:
    """The user's script failed: one line naming the exception and the script's last line on its way."""
    frames = _script_frames(script, exc)
    at = f", line {frames[-1].lineno}" if frames else ""
    return InvalidInputError(f"{script}{at}: {where} raised {type(exc).__name__}: {exc} (run the script directly "
                             "for its traceback)")
