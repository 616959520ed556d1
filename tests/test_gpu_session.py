"""hybrid bench gpu-session: steps run in order within a budget, a hang or failure costs only its own step, the
manifest says what happened after every step, and the CPU dry run measures for real."""

from __future__ import annotations

import json
import sys

import pytest

from hybrid.bench import gpu_session as gs
from hybrid.cli.main import main
from hybrid.data.bundle import load_bundle
from hybrid.data.paths import project_datasets_dir
from hybrid.errors import InvalidInputError


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_steps_run_in_order_and_failures_stay_local(tmp_path):
    steps = [gs.Step("ok", _py("print('hello')"), 30),
             gs.Step("fails", _py("import sys; sys.stderr.write('boom'); sys.exit(3)"), 30),
             gs.Step("hangs", _py("import time; time.sleep(30)"), 1.5),
             gs.Step("missing", _py("pass"), 30, unavailable="needs a GPU"),
             gs.Step("too long", _py("pass"), 500),
             gs.Step("after", _py("open('after.txt', 'w').write('x')"), 30)]
    man = gs.run_session(tmp_path / "s", 60, steps, cwd=tmp_path)
    got = {s["name"]: s for s in man["steps"]}
    assert [s["name"] for s in man["steps"]] == [s.name for s in steps]
    assert got["ok"]["status"] == "ok" and "hello" in got["ok"]["output_tail"]
    assert got["fails"]["status"] == "failed" and got["fails"]["returncode"] == 3 and "boom" in got["fails"]["output_tail"]
    assert got["hangs"]["status"] == "timeout" and got["hangs"]["seconds"] < 10
    assert got["missing"]["status"] == "skipped" and got["missing"]["reason"] == "needs a GPU"
    assert got["too long"]["status"] == "skipped" and "left of the budget" in got["too long"]["reason"]
    assert got["after"]["status"] == "ok" and (tmp_path / "after.txt").is_file()
    assert json.loads((tmp_path / "s" / gs.MANIFEST).read_text()) == man


def test_session_input_is_checked(tmp_path):
    with pytest.raises(InvalidInputError, match="budget"):
        gs.run_session(tmp_path, 0, [gs.Step("x", _py("pass"), 1)])
    for bad in (float("inf"), float("nan")):  # inf wrote `"budget_s": Infinity` (not JSON) to session.json
        with pytest.raises(InvalidInputError, match="finite number of seconds"):
            gs.run_session(tmp_path / "inf", bad, [gs.Step("x", _py("pass"), 1)])
    assert not (tmp_path / "inf").exists()
    with pytest.raises(InvalidInputError, match="no steps"):
        gs.run_session(tmp_path, 10, [])


def test_default_plan(tmp_path, monkeypatch):
    monkeypatch.setattr(gs, "_module_available", lambda name: False)
    bundle = project_datasets_dir() / "H100-SXM"
    steps = gs.default_steps(tmp_path, skip_existing=bundle)
    names = [s.name for s in steps]
    assert names[:3] == ["profile-attention", "profile-gemm", "traces"] and names[-2:] == ["dlrm", "dlrm-adagrad"]
    only = [st.name for st in gs.default_steps(tmp_path, families=("attention", "norm"), dlrm_adagrad_configs=0)]
    assert only == ["profile-attention", "profile-norm", "traces", "dlrm"]  # no GEMM step: after the profiles
    # a family named twice was measured twice, the second run replacing the first in the same directory
    twice = [st.name for st in gs.default_steps(tmp_path, families=("norm", "attention", "norm"), dlrm_configs=0)]
    assert twice == ["profile-norm", "profile-attention", "traces"]
    assert {f"profile-{f}" for f in gs.KERNEL_FAMILIES} <= set(names)
    by = {s.name: s for s in steps}
    assert "--skip-existing" not in by["profile-norm"].argv  # re-timed since the H100 bundle: measured whole
    for fam in ("attention", "gemm"):  # only the configurations the bundle lacks (H100: all of attention)
        assert by[f"profile-{fam}"].argv[-2:] == ["--skip-existing", str(bundle)]
    assert by["profile-attention"].timeout_s == gs.STEP_LIMITS["profile-attention"]
    # the small-op families also time their kernels (--kernel-times), within MAX_PASS_S more
    assert by["profile-gemm"].timeout_s == gs.STEP_LIMITS["profile-gemm"] + gs.MAX_PASS_S
    assert by["profile-softmax"].timeout_s == gs.STEP_LIMITS["profile"] + gs.MAX_PASS_S
    assert by["profile-conv"].timeout_s == gs.STEP_LIMITS["profile"] and "--kernel-times" not in by["profile-conv"].argv
    assert "cuda" in by["dlrm"].argv and "transformers" in by["traces"].unavailable
    # the second DLRM step: other configurations (its own seed), every one with sparse Adagrad
    ada = by["dlrm-adagrad"].argv
    assert ada[ada.index("--adagrad-share") + 1] == "1" and ada[ada.index("--seed") + 1] == str(gs.DLRM_ADAGRAD_SEED)
    assert by["dlrm-adagrad"].timeout_s == gs.STEP_LIMITS["dlrm-adagrad"]
    assert by["traces"].argv[-2:] == ["--attention", "sdpa"]  # the committed traces run eager attention
    assert gs.committed_bundle_for("NVIDIA H100 80GB HBM3") == bundle
    assert gs.committed_bundle_for("NVIDIA H200") == project_datasets_dir() / "H200"
    assert gs.committed_bundle_for("NVIDIA B200") is None  # in the catalog, never measured here
    assert gs.committed_bundle_for("not a gpu at all") is None


def test_cli_cpu_dry_run_measures(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "sess"
    assert main(["bench", "gpu-session", str(out), "--cpu", "--families", "attention", "--dlrm-configs", "0",
                 "--no-traces", "--budget", "300"]) == 0
    man = json.loads((out / gs.MANIFEST).read_text())
    assert [(s["name"], s["status"]) for s in man["steps"]] == [("profile-attention", "ok")]
    table, _ = load_bundle(out / "profile-attention")
    assert set(table["op"]) == {"attention"}
    assert "1 of 1 steps ok" in capsys.readouterr().out
    # the same command again: the family measured whole is not measured again (it was, from the start)
    meta = (out / "profile-attention" / "meta.json").read_text()
    assert main(["bench", "gpu-session", str(out), "--cpu", "--families", "attention", "--dlrm-configs", "0",
                 "--no-traces", "--budget", "300"]) == 0
    assert "0 of 1 steps ok (1 measured by an earlier session into" in capsys.readouterr().out
    (step,) = json.loads((out / gs.MANIFEST).read_text())["steps"]
    assert step["status"] == "skipped" and gs.MEASURED_BEFORE in step["reason"]
    assert (out / "profile-attention" / "meta.json").read_text() == meta


def test_cli_refuses_bad_input(tmp_path, capsys):
    pytest.importorskip("torch")
    import torch

    if not torch.cuda.is_available():
        assert main(["bench", "gpu-session", str(tmp_path / "a")]) == 2
        assert "no CUDA GPU" in capsys.readouterr().err
    assert main(["bench", "gpu-session", str(tmp_path / "b"), "--cpu", "--families", "gemm,bogus"]) == 2
    assert "bogus" in capsys.readouterr().err
    assert main(["bench", "gpu-session", str(tmp_path / "c"), "--cpu", "--families", "collective"]) == 2
    capsys.readouterr()
    # an empty --families (an unset shell variable) ran every family, for minutes: refused like `profile --only ''`
    assert main(["bench", "gpu-session", str(tmp_path / "d"), "--cpu", "--families", ""]) == 2
    assert "unknown or unsupported profile family (none given)" in capsys.readouterr().err
    assert not any((tmp_path / n).exists() for n in "bcd")


def test_a_relative_output_dir_holds_the_steps_outputs(tmp_path, monkeypatch):
    """Steps run in the checkout: `hybrid bench gpu-session sess` from another directory wrote session.json to
    ./sess but every bundle to <checkout>/sess/; the plan's paths are now absolute."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(gs, "_module_available", lambda name: False)
    steps = gs.default_steps(gs.Path("sess"), skip_existing=gs.Path("bundle"), families=("gemm",), dlrm_configs=1)
    by = {s.name: s for s in steps}
    out = by["profile-gemm"].argv[by["profile-gemm"].argv.index("-o") + 1]
    assert out == str(tmp_path / "sess" / "profile-gemm")
    assert by["profile-gemm"].argv[-1] == str(tmp_path / "bundle")
    assert str(tmp_path / "sess" / "dlrm") in by["dlrm"].argv
    assert by["traces"].argv[by["traces"].argv.index("--out") + 1] == str(tmp_path / "sess" / "traces")


def test_a_step_out_of_time_gets_sigterm_before_it_is_killed(tmp_path):
    """A step past its limit was SIGKILLed: a `hybrid profile` step lost every family it had measured. It now gets
    SIGTERM first (the profiler then writes its partial bundle), and SIGKILL only at its limit."""
    code = ("import signal, sys, time\n"
            "def stop(*a):\n"
            "    open('term.txt', 'w').write('kept'); print('wrote partial'); sys.exit(143)\n"
            "signal.signal(signal.SIGTERM, stop)\n"
            "time.sleep(60)\n")
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    man = gs.run_session(tmp_path / "s", 60, [gs.Step("slow", _py(code), 3), gs.Step("deaf", _py(stubborn), 3)],
                         cwd=tmp_path)
    got = {s["name"]: s for s in man["steps"]}
    assert (tmp_path / "term.txt").read_text() == "kept"
    assert got["slow"]["status"] == "timeout" and got["slow"]["returncode"] == 143
    assert "wrote partial" in got["slow"]["output_tail"] and got["slow"]["seconds"] < 3.5
    assert got["deaf"]["status"] == "timeout" and got["deaf"]["returncode"] == -9 and got["deaf"]["seconds"] < 4.5


def test_a_session_run_again_resumes_the_families_cut_short(tmp_path, monkeypatch):
    """Running the session again into the same OUT measured every family again from the start (minutes of a lent
    GPU), and a second interruption of a step left `profile-F` and `profile-F-partial` holding the same
    configurations (merge refused them without --replace). Now a partial `profile-F` gets only the configurations it
    lacks, merged into it, and a complete one is not measured again."""
    pytest.importorskip("torch")
    from hybrid.data.profiler import kernels
    from hybrid.data.profiler.runner import ProfileOptions, run_profile

    sess = tmp_path / "sess"
    target = sess / "profile-norm"
    real = kernels.norm_cases
    listed = []

    def cut_short(*args, **kwargs):  # the earlier session's norm step stopped after two configurations
        cases = listed[:] = real(*args, **kwargs)
        # interrupted (a step's time limit), not failed: a configuration that failed is skipped by the resume
        cases[2].build = lambda: (_ for _ in ()).throw(KeyboardInterrupt())
        return cases

    monkeypatch.setattr(kernels, "norm_cases", cut_short)
    with pytest.raises(KeyboardInterrupt):
        run_profile(ProfileOptions(quick=True, families=("norm",), threads=2, progress=False, force_cpu=True,
                                   device_name="lab-box"), target)
    monkeypatch.undo()
    before, _ = load_bundle(target)
    assert len(before) == 2 and gs.bundle_state(target) == "partial"

    (step,) = gs.default_steps(sess, families=("norm",), dlrm_configs=0, traces=False, cpu=True)
    rest = sess / "profile-norm-rest"
    assert step.resume == (str(target), str(rest)) and step.unavailable is None
    assert step.argv[step.argv.index("-o") + 1] == str(rest) and step.argv[-2:] == ["--skip-existing", str(target)]
    # the same device key as the run before, and no one-thread shared-bandwidth probe (seconds of this test)
    argv = [*step.argv[:step.argv.index("--threads")], "--threads", "2", "--device-name", "lab-box",
            *step.argv[step.argv.index("--threads") + 2:]]
    man = gs.run_session(sess, 300, [gs.Step(step.name, argv, step.timeout_s, resume=step.resume)])
    (res,) = man["steps"]
    assert res["status"] == "ok", res
    assert res["reason"].startswith(f"resumed: merged into {target} ({len(listed)} rows, complete)"), res
    assert sorted(p.name for p in sess.iterdir()) == ["profile-norm", gs.MANIFEST]  # no rest, no -partial
    after, _ = load_bundle(target)
    assert len(after) == len(listed)
    kept = before.merge(after, on=list(before.columns), how="inner")  # the two rows measured before, as they were
    assert len(kept) == 2

    # a third run measures nothing of norm again
    (again,) = gs.default_steps(sess, families=("norm",), dlrm_configs=0, traces=False, cpu=True)
    assert "measured whole by an earlier session" in again.unavailable and again.resume is None


def _fake_bundle(path, *, partial: bool, rows: str = "x\n") -> None:
    """A directory bundle_state reads (meta.json's partial, a measurements.csv): the swap moves directories only."""
    path.mkdir(parents=True)
    (path / "meta.json").write_text(json.dumps({"partial": partial}))
    (path / "measurements.csv").write_text(rows)


def test_a_merge_cut_between_its_two_renames_is_recovered_on_the_next_start(tmp_path):
    """The merge of a resumed step swapped the directories with two renames: a SIGTERM between them left no
    `profile-F` (the bundle hidden in `.profile-F-merged-away`), and the next session measured the family from
    scratch and then deleted the hidden bundle. The next start now puts it back and resumes it."""
    sess = tmp_path / "sess"
    target, rest = sess / "profile-norm", sess / "profile-norm-rest"
    _fake_bundle(target, partial=True, rows="old\n")
    _fake_bundle(rest, partial=False)
    _fake_bundle(gs._merging(target), partial=False, rows="merged\n")
    target.rename(gs._aside(target))  # the first rename of gs._swap_in, then the process was killed
    assert not target.exists()

    (step,) = gs.default_steps(sess, families=("norm",), dlrm_configs=0, traces=False, cpu=True)
    assert step.resume == (str(target), str(rest)) and step.argv[-2:] == ["--skip-existing", str(target)]
    assert (target / "measurements.csv").read_text() == "old\n"  # the bundle as it was before the merge
    assert rest.is_dir()  # still there: merged again before the step runs
    assert sorted(p.name for p in sess.iterdir()) == ["profile-norm", "profile-norm-rest"]

    # killed after the second rename: the merged bundle stands, the aside one is only removed
    _fake_bundle(gs._aside(target), partial=True, rows="old\n")
    assert gs.recover_swap(target) == ""
    assert sorted(p.name for p in sess.iterdir()) == ["profile-norm", "profile-norm-rest"]
    assert (target / "measurements.csv").read_text() == "old\n"


def test_merged_leftovers_are_deleted_aside_and_a_cut_deletion_is_cleaned_up(tmp_path):
    """A merged rest is renamed aside before it is deleted, so a stop during the deletion never leaves a
    half-deleted bundle under the name the next step writes to; the hidden remains go on the next start."""
    sess = tmp_path / "sess"
    target, rest = sess / "profile-norm", sess / "profile-norm-rest"
    _fake_bundle(target, partial=True)
    _fake_bundle(rest, partial=False)
    gs._remove(rest)
    assert not rest.exists() and not gs._deleting(rest).exists()
    # a deletion cut short: the hidden directory, half gone, is all that is left of the rest
    half = gs._deleting(rest)
    _fake_bundle(half, partial=False)
    (half / "measurements.csv").unlink()
    assert gs.recover_swap(target) == ""
    assert sorted(p.name for p in sess.iterdir()) == ["profile-norm"]


def test_partial_bundles_left_beside_a_family_are_folded_into_its_resume(tmp_path, monkeypatch):
    """A `--force` run over an existing `profile-F` that is cut short writes its rows beside it, as
    `profile-F-partial` (sessions before resuming existed did so on every run). A session run again looked at
    `profile-F` alone: the leftover's configurations were measured again and the leftover stayed. It is now merged
    into `profile-F` before the step, which measures only what neither holds."""
    pytest.importorskip("torch")
    from hybrid.data.profiler import kernels
    from hybrid.data.profiler.runner import ProfileOptions, run_profile

    sess = tmp_path / "sess"
    target, leftover = sess / "profile-norm", sess / "profile-norm-partial"
    real = kernels.norm_cases
    listed: list = []

    def stop_at(i):
        def cases(*args, **kwargs):
            got = listed[:] = real(*args, **kwargs)
            got[i].build = lambda: (_ for _ in ()).throw(KeyboardInterrupt())
            return got
        return cases

    opts = ProfileOptions(quick=True, families=("norm",), threads=2, progress=False, force_cpu=True,
                          device_name="lab-box")
    for at in (2, 5):  # the first session's step, then a later one over it with --force: both cut short
        monkeypatch.setattr(kernels, "norm_cases", stop_at(at))
        with pytest.raises(KeyboardInterrupt):
            run_profile(opts, target, force=True)
    monkeypatch.undo()
    assert gs.bundle_state(target) == gs.bundle_state(leftover) == "partial"
    assert gs.partial_leftovers(target) == [str(leftover)]

    (step,) = gs.default_steps(sess, families=("norm",), dlrm_configs=0, traces=False, cpu=True)
    assert step.fold == (str(leftover),) and step.resume == (str(target), str(sess / "profile-norm-rest"))
    assert step.argv[-2:] == ["--skip-existing", str(target)]  # after the fold: what neither bundle holds
    # the step itself stands in for the profile it runs (the resume of a partial bundle is tested above)
    man = gs.run_session(sess, 60, [gs.Step(step.name, _py("pass"), 30, resume=step.resume, fold=step.fold)])
    (res,) = man["steps"]
    assert res["status"] == "ok", res
    assert f"merged into {target} (5 rows, partial), with profile-norm-partial left by an earlier" in res["reason"]
    assert sorted(p.name for p in sess.iterdir()) == ["profile-norm", gs.MANIFEST]
    table, _ = load_bundle(target)
    assert len(table) == 5  # the two configurations of the first run, and the five of the one over it, once each


def test_leftovers_beside_a_complete_family_are_named_with_the_merge_command(tmp_path):
    sess = tmp_path / "sess"
    _fake_bundle(sess / "profile-gemm", partial=False)
    _fake_bundle(sess / "profile-gemm-partial", partial=True)
    _fake_bundle(sess / "profile-gemm-partial-2", partial=True)
    (sess / "profile-gemm-partial-3").mkdir()  # no bundle: not named
    (step,) = gs.default_steps(sess, families=("gemm",), dlrm_configs=0, traces=False, cpu=True)
    left = [str(sess / "profile-gemm-partial"), str(sess / "profile-gemm-partial-2")]
    assert gs.partial_leftovers(sess / "profile-gemm") == left
    assert gs.MEASURED_BEFORE in step.unavailable and step.resume is None
    assert f"data merge {sess / 'profile-gemm'} {left[0]} {left[1]} -o ALL --replace" in step.unavailable
    # only a leftover, no profile-F (removed, or never renamed into place): the leftover becomes the bundle resumed
    _fake_bundle(sess / "profile-norm-partial", partial=True, rows="kept\n")
    (step,) = gs.default_steps(sess, families=("norm",), dlrm_configs=0, traces=False, cpu=True)
    assert step.unavailable is None and step.fold == (str(sess / "profile-norm-partial"),)
    man = gs.run_session(sess, 60, [gs.Step(step.name, _py("pass"), 30, resume=step.resume, fold=step.fold)])
    assert "profile-norm-partial (left by an earlier session) is now" in man["steps"][0]["reason"]
    assert (sess / "profile-norm" / "measurements.csv").read_text() == "kept\n"
    assert not (sess / "profile-norm-partial").exists()


def test_a_session_stopped_during_a_step_lets_the_step_keep_its_work(tmp_path):
    """Ctrl-C or the SIGTERM of `timeout 555 ... gpu-session` on the session SIGKILLed the step under way: a profile
    step lost every configuration it had measured (its partial bundle is written on SIGTERM), and session.json did
    not name the step. The step now gets SIGTERM first, and the manifest records it as interrupted."""
    import os
    import signal
    import threading
    import time

    code = ("import signal, sys, time\n"
            "def stop(*a):\n"
            "    open('term.txt', 'w').write('kept'); sys.exit(143)\n"
            "signal.signal(signal.SIGTERM, stop)\n"
            "open('started.txt', 'w').write('x')\n"
            "time.sleep(60)\n")

    def stop_session(*_):
        raise KeyboardInterrupt

    def when_started():  # the session's own interruption, once the step runs (its timeout is far away)
        deadline = time.monotonic() + 60
        while not (tmp_path / "started.txt").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, stop_session)
    watcher = threading.Thread(target=when_started, daemon=True)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            gs.run_session(tmp_path / "s", 120, [gs.Step("slow", _py(code), 90)], cwd=tmp_path)
    finally:
        watcher.join()
        signal.signal(signal.SIGUSR1, previous)
    assert (tmp_path / "term.txt").read_text() == "kept"
    (step,) = json.loads((tmp_path / "s" / gs.MANIFEST).read_text())["steps"]
    assert step["name"] == "slow" and step["status"] == "interrupted" and "KeyboardInterrupt" in step["reason"]
