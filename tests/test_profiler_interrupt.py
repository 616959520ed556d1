"""An interrupted `hybrid profile` keeps what it measured: a valid bundle marked partial, resumable.

A lent GPU comes with a fixed budget of minutes; a run stopped by Ctrl-C or by the SIGTERM of a time limit threw
away every family it had finished (the bundle was written only at the end). These tests interrupt real, short
profile runs in a subprocess once the first family is complete (the log names each family as it starts).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hybrid.data.bundle import load_bundle

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]


def _as_from_a_terminal() -> None:
    """In the profiler's process before it starts: Ctrl-C's default disposition, and the lowest priority.

    A test run started in the background (``cmd &`` in a script, as nohup and some CI runners start it) ignores
    SIGINT, and an ignored signal stays ignored across fork and exec (Python then installs no KeyboardInterrupt
    handler): the profiler never saw the test's Ctrl-C and ran to the end, exit 0. The niceness lets the test
    process, on a loaded machine, see the line and send the signal before the quick run it watches has finished."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.nice(19)


def _interrupt_after(argv: list[str], line: str, sig: int, timeout: float = 120.0) -> tuple[int, str]:
    """Run ``hybrid <argv>`` and send ``sig`` once a stderr line starts with ``line``; (exit code, stderr)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "hybrid.cli.main", *argv], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_as_from_a_terminal if hasattr(os, "nice") else None)
    err: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        for text in proc.stderr:
            err.append(text)
            if text.startswith(line):
                proc.send_signal(sig)
                break
            assert time.monotonic() < deadline, "".join(err)
        rest = proc.communicate(timeout=timeout)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, "".join(err) + rest


def test_an_interrupted_profile_keeps_the_finished_families_as_a_partial_bundle(tmp_path):
    """Ctrl-C once elementwise is under way: gemm (finished) is kept in a bundle that validates, meta.json says it
    is partial and how to resume, and the resumed run measures none of the configurations kept again.

    Three more families follow elementwise: on a loaded machine (a parallel test worker on the other core) the
    signal may land after elementwise's quick sweep is done, and the run must be cut short, in whichever family."""
    from hybrid.data.profiler.runner import ProfileOptions, run_profile
    from hybrid.errors import HybridError

    out = tmp_path / "p"
    families = ["gemm", "elementwise", "norm", "softmax", "pool"]
    rc, err = _interrupt_after(["profile", "--quick", "--cpu", "--threads", "2", "--device-name", "lab-box",
                                "--only", ",".join(families), "--no-progress", "-o", str(out)],
                               "elementwise:", signal.SIGINT)
    assert rc == 130, err
    assert "a partial bundle" in err and "Traceback" not in err, err
    assert err.rstrip().endswith("interrupted"), err  # Ctrl-C said as such (click's Abort printed 'aborted')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]  # no temporary left beside it
    table, _ = load_bundle(out)  # validates
    meta = json.loads((out / "meta.json").read_text())
    assert meta["partial"] is True
    stop = meta["interrupted"]
    during = stop["during"]["family"]
    assert during in families[1:]
    cut = families.index(during)
    assert stop["by"] == "SIGINT" and stop["families_complete"] == families[:cut]
    assert stop["families_not_complete"] == families[cut:]
    gemm = table[table["op"].isin(["gemm", "gemv", "bmm", "linear"])]
    # the ops of the families that may finish before the signal lands
    ops = {"gemm": ["gemm", "gemv", "bmm", "linear"], "elementwise": ["elementwise"],
           "norm": ["layernorm", "rmsnorm"], "softmax": ["softmax"]}
    complete = table["op"].isin([o for f in families[:cut] for o in ops[f]])
    n_cut = len(table) - int(complete.sum())  # the rows kept of the family cut short
    assert len(gemm) == 14 and n_cut == stop["during"]["measured"] < stop["during"]["cases"]
    assert meta["n_rows"] == len(table)
    assert f"--only {','.join(families[cut:])} --skip-existing {out} -o {out}-rest" in stop["resume"]

    # resuming: gemm is complete (nothing left to measure), and the cut family would skip the rows kept
    with pytest.raises(HybridError, match="all 14 configuration"):
        run_profile(ProfileOptions(quick=True, families=("gemm",), threads=2, device_name="lab-box", force_cpu=True,
                                   progress=False, skip_existing=(str(out),)), tmp_path / "rest")
    assert not (tmp_path / "rest").exists()


def _children(pid: int) -> set[int]:
    """Direct child processes of ``pid`` (Linux /proc)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found.update(int(c) for c in (task / "children").read_text().split())
        except OSError:
            pass
    return found


def _running(pid: int) -> bool:
    """``pid`` exists and is not a zombie (an orphan's zombie may never be reaped in a container)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads child processes from /proc")
def test_sigterm_during_the_collectives_stops_the_ranks_and_keeps_the_kernel_families(tmp_path):
    """SIGTERM to the profiler alone (a job scheduler's or `kill`'s, not the terminal's Ctrl-C to the whole group)
    while the gloo ranks ran: the profiler never exited (multiprocessing waits at exit for its non-daemonic
    children, which went on without it) and the ranks were left running. Now it stops them and exits 143, and
    the partial bundle holds the finished gemm family."""
    out = tmp_path / "p"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "hybrid.cli.main", "profile", "--quick", "--cpu", "--threads",
                             "2", "--only", "gemm,collective", "--no-progress", "-o", str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ranks: set[int] = set()
    try:
        for text in proc.stderr:
            if text.startswith("collective:"):
                break
        deadline = time.monotonic() + 60
        while len(ranks) < 2 and time.monotonic() < deadline:  # the two gloo ranks (and a resource tracker)
            ranks = {c for c in _children(proc.pid) if "spawn_main" in Path(f"/proc/{c}/cmdline").read_text()
                     and "pipe_handle" in Path(f"/proc/{c}/cmdline").read_text()}
            time.sleep(0.1)
        assert len(ranks) == 2, ranks
        time.sleep(1.0)  # the ranks under way
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=30)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in ranks:  # never leave them behind, even when the test fails
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 143, err
    time.sleep(0.5)
    assert not [pid for pid in ranks if _running(pid)]
    table, _ = load_bundle(out)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["interrupted"]["by"] == "SIGTERM" and meta["interrupted"]["families_complete"] == ["gemm"]
    assert meta["interrupted"]["during"] == {"family": "collective", "step": "2 ranks"}
    assert "--only collective --ranks 2" in meta["interrupted"]["resume"]
    assert len(table) == 14 and meta["system"] is None


def test_an_interrupted_forced_run_leaves_the_bundle_it_would_replace(tmp_path):
    """`--force` replaces a bundle when the run ends; a run cut short must not swap a whole bundle for a partial
    one: the old one stays and the partial rows go beside it (``<out>-partial``). The interruption is raised from
    the log callback as the second family starts, where a Ctrl-C would land."""
    from hybrid.data.profiler.runner import ProfileOptions, run_profile

    opts = ProfileOptions(quick=True, families=("softmax",), progress=False, force_cpu=True, device_name="lab-box")
    old = run_profile(opts, tmp_path / "b")

    def log(msg: str) -> None:
        if msg.startswith("norm:"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_profile(ProfileOptions(**{**opts.__dict__, "families": ("softmax", "norm")}), tmp_path / "b",
                    force=True, log=log)
    kept = json.loads((tmp_path / "b" / "meta.json").read_text())
    assert kept["partial"] is False and kept["date"] == old.meta["date"]
    table, _ = load_bundle(tmp_path / "b-partial")
    meta = json.loads((tmp_path / "b-partial" / "meta.json").read_text())
    assert meta["partial"] and meta["interrupted"]["families_complete"] == ["softmax"] and len(table) == len(old.table)
    assert f"-o {tmp_path / 'b-partial'}-rest" in meta["interrupted"]["resume"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "b-partial"]
    # an empty output directory is no bundle to keep: the partial one goes there
    (tmp_path / "e").mkdir()
    with pytest.raises(KeyboardInterrupt):
        run_profile(ProfileOptions(**{**opts.__dict__, "families": ("softmax", "norm")}), tmp_path / "e", log=log)
    assert json.loads((tmp_path / "e" / "meta.json").read_text())["partial"] is True
    assert not (tmp_path / "e-partial").exists()


def test_data_validate_says_which_bundles_are_partial(tmp_path, capsys):
    """A partial bundle validates (its rows are whole measurements), but `hybrid data validate`, the check before a
    bundle is committed or calibrated on, said nothing of the families it lacks."""
    from hybrid.cli.main import main
    from hybrid.data.profiler.runner import ProfileOptions, run_profile

    def log(msg: str) -> None:
        if msg.startswith("norm:"):
            raise KeyboardInterrupt

    opts = ProfileOptions(quick=True, families=("softmax", "norm"), progress=False, force_cpu=True,
                          device_name="lab-box")
    with pytest.raises(KeyboardInterrupt):
        run_profile(opts, tmp_path / "b", log=log)
    capsys.readouterr()
    assert main(["data", "validate", str(tmp_path / "b")]) == 0
    err = capsys.readouterr().err
    assert f"{tmp_path / 'b'} is a partial bundle" in err and "not complete: norm" in err and "--skip-existing" in err
    assert main(["data", "validate", "--json", str(tmp_path / "b")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["families_not_complete"] for p in out["partial_bundles"]] == [["norm"]]


def test_data_validate_flags_a_merged_bundle_whose_last_run_was_cut_short(tmp_path, capsys):
    """A merged bundle keeps ``partial`` and ``interrupted`` per run. A resumed `gpu-session` step whose rest was
    cut short again is ``partial: [true, true]``, and validate said nothing (only ``partial is True`` was read);
    ``[true, false]`` (the rest measured by the last run) is whole."""
    from hybrid.cli.main import main
    from hybrid.data.profiler.runner import ProfileOptions, run_profile

    def log(msg: str) -> None:
        if msg.startswith("norm:"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_profile(ProfileOptions(quick=True, families=("softmax", "norm"), progress=False, force_cpu=True,
                                   device_name="lab-box"), tmp_path / "b", log=log)
    meta_file = tmp_path / "b" / "meta.json"
    meta = json.loads(meta_file.read_text())
    stop = meta["interrupted"]
    for runs, flagged in (([True, True], True), ([True, False], False)):
        meta_file.write_text(json.dumps({**meta, "partial": runs,
                                         "interrupted": [stop, stop if runs[-1] else None]}))
        capsys.readouterr()
        assert main(["data", "validate", "--json", str(tmp_path / "b")]) == 0
        out = json.loads(capsys.readouterr().out)
        assert [p["families_not_complete"] for p in out["partial_bundles"]] == ([["norm"]] if flagged else [])


def test_data_validate_says_a_bundle_whose_meta_json_is_unreadable(tmp_path, capsys):
    """A bundle whose meta.json is not valid JSON (cut short by a full disk, edited by hand) validated as "ok" without
    a word: the record that says whether its profile was interrupted, and which families it lacks, was skipped in
    silence. Its rows still validate; validate now says that the bundle's completeness is unknown."""
    import shutil

    from hybrid.cli.main import main

    src = Path(__file__).resolve().parents[1] / "datasets" / "H200"
    bundle = tmp_path / "H200"
    shutil.copytree(src, bundle)
    text = (bundle / "meta.json").read_text()
    (bundle / "meta.json").write_text(text[: len(text) // 2])  # cut in the middle
    assert main(["data", "validate", str(bundle)]) == 0
    captured = capsys.readouterr()
    assert f"warning: {bundle / 'meta.json'} is not valid JSON" in captured.err, captured.err
    assert "whether its profile completed is unknown" in captured.err
    assert main(["data", "validate", "--json", str(bundle)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["unreadable_meta"] == [str(bundle / "meta.json")] and out["partial_bundles"] == []
    # a whole bundle says nothing of the kind
    assert main(["data", "validate", "--json", str(src)]) == 0
    assert json.loads(capsys.readouterr().out)["unreadable_meta"] == []
