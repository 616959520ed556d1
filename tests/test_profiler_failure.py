"""A `hybrid profile` run that FAILS keeps what it measured, as an interrupted one does.

A lent GPU comes with a fixed budget of minutes; a family that raised (a kernel that fails, collectives whose ranks
cannot connect) threw away every family measured before it: the bundle was written only at the end, and the user
saw one error line and no files. Now the finished families, and the finished configurations of the family that
failed, are written as a partial bundle whose ``meta.json`` names the error and the command that measures the rest.
"""

from __future__ import annotations

import json

import pytest

from hybrid.data.bundle import load_bundle

torch = pytest.importorskip("torch")


def test_collectives_that_cannot_connect_keep_the_kernel_family_measured_before(tmp_path, monkeypatch, capsys):
    """A real failure: gloo told to use a network interface that does not exist (a wrong GLOO_SOCKET_IFNAME, as a
    machine's setup script may leave) fails the collective family after softmax was measured."""
    from hybrid.cli.main import main

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "no-such-if-hybrid")  # the spawned ranks inherit it
    out = tmp_path / "p"
    rc = main(["profile", "--quick", "--cpu", "--threads", "2", "--device-name", "lab-box", "--only",
               "softmax,collective", "--no-progress", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err, err
    line = err.rstrip().splitlines()[-1]
    assert line.startswith("error: collective failed (2 ranks): collective benchmark with 2 processes failed"), err
    assert "no-such-if-hybrid" in line and f"are in {out}, a partial bundle" in line, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]  # no temporary left beside it
    table, _ = load_bundle(out)  # validates
    assert set(table["op"]) == {"softmax"} and len(table) > 0
    meta = json.loads((out / "meta.json").read_text())
    stop = meta["interrupted"]
    assert meta["partial"] is True and meta["n_rows"] == len(table) and meta["system"] is None
    assert stop["by"] == "error" and "no-such-if-hybrid" in stop["error"]
    assert stop["families_complete"] == ["softmax"] and stop["families_not_complete"] == ["collective"]
    assert stop["during"] == {"family": "collective", "step": "2 ranks"}
    assert f"--only collective --ranks 2 --skip-existing {out} -o {out}-rest" in stop["resume"]
    assert "run_collectives" in stop["traceback"]  # for whoever debugs it later, never printed
    # the check before a bundle is committed says why it is partial
    assert main(["data", "validate", str(out)]) == 0
    err = capsys.readouterr().err
    assert "is a partial bundle: its profile failed (collective benchmark with 2 processes failed" in err


def test_a_family_failing_midway_keeps_its_finished_configurations(tmp_path, monkeypatch):
    """The third norm configuration raises (a project case builder made to fail, as a CUDA error would): softmax
    and the two norm configurations before it are kept, meta.json names the configuration that failed. A failure
    before anything was measured writes nothing and still names the family."""
    from hybrid.data.profiler import kernels
    from hybrid.data.profiler.runner import ProfileFailedError, ProfileOptions, run_profile

    real = kernels.norm_cases

    def failing_norm_cases(*args, **kwargs):
        cases = real(*args, **kwargs)

        def boom():
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
                               "asynchronously reported")

        cases[2].build = boom
        return cases

    monkeypatch.setattr(kernels, "norm_cases", failing_norm_cases)
    opts = ProfileOptions(quick=True, families=("softmax", "norm"), progress=False, force_cpu=True, threads=2,
                          device_name="lab-box")
    with pytest.raises(ProfileFailedError) as info:
        run_profile(opts, tmp_path / "b")
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("norm failed (measuring, 2 of ") and "RuntimeError: CUDA error: an illegal memory" in msg
    assert info.value.path == tmp_path / "b"
    table, _ = load_bundle(tmp_path / "b")
    meta = json.loads((tmp_path / "b" / "meta.json").read_text())
    stop = meta["interrupted"]
    assert stop["families_complete"] == ["softmax"] and stop["during"]["measured"] == 2
    norm_ops = table["op"].isin(["layernorm", "rmsnorm"])
    assert int(norm_ops.sum()) == 2 and int((table["op"] == "softmax").sum()) == len(table) - 2
    assert stop["configuration"]["op"] in ("layernorm", "rmsnorm") and "hidden" in stop["configuration"]
    assert stop["error"].startswith("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert meta["row_counts"] == table.groupby("op").size().to_dict()

    # nothing measured yet: the same one-line error; the configuration is recorded (a bundle of no rows) for the
    # resume to skip (tests/test_profiler_resume.py)
    def first_fails(*args, **kwargs):
        cases = real(*args, **kwargs)
        cases[0].build = lambda: (_ for _ in ()).throw(RuntimeError("boom"))
        return cases

    monkeypatch.setattr(kernels, "norm_cases", first_fails)
    with pytest.raises(ProfileFailedError, match=r"^norm failed \(measuring, 0 of \d+ configurations done\): "
                                                 r"RuntimeError: boom, before any configuration was measured: "
                                                 r"the failing configuration is recorded in .*"
                                                 r"\(HYBRID_DEBUG=1 for a traceback\)$"):
        run_profile(ProfileOptions(**{**opts.__dict__, "families": ("norm",)}), tmp_path / "c")
    assert json.loads((tmp_path / "c" / "meta.json").read_text())["n_rows"] == 0


def test_a_cpu_case_that_cannot_allocate_is_skipped_not_fatal(tmp_path, monkeypatch):
    """PyTorch's CPU allocator says out of memory with a RuntimeError ("DefaultCPUAllocator: can't allocate memory"),
    not MemoryError: a CPU case too large for the process's memory limit ended the run instead of being recorded
    under skipped_cases as a GPU case out of memory is."""
    from hybrid.data.profiler import kernels
    from hybrid.data.profiler.runner import ProfileOptions, run_profile

    real = kernels.softmax_cases
    listed = []

    def one_too_large(*args, **kwargs):
        cases = listed[:] = real(*args, **kwargs)
        cases[1].build = lambda: (torch.empty(2**62, dtype=torch.uint8), None)  # a real allocation failure
        return cases

    monkeypatch.setattr(kernels, "softmax_cases", one_too_large)
    res = run_profile(ProfileOptions(quick=True, families=("softmax",), progress=False, force_cpu=True, threads=2,
                                     device_name="lab-box"), tmp_path / "b")
    assert res.meta["partial"] is False and len(res.table) == len(listed) - 1 > 0
    (skip,) = res.meta["skipped_cases"]
    assert skip["op"] == "softmax" and "can't allocate memory" in skip["reason"]


def test_hybrid_debug_shows_the_traceback_of_a_failed_family(tmp_path, monkeypatch, capsys):
    """The one-line error wraps the family's exception; HYBRID_DEBUG=1, which shows the traceback of any other
    failure, showed nothing more for it."""
    from hybrid.cli.main import main
    from hybrid.data.profiler import kernels
    from hybrid.data.profiler.runner import ProfileFailedError

    real = kernels.softmax_cases

    def first_fails(*args, **kwargs):
        cases = real(*args, **kwargs)
        cases[0].build = lambda: (_ for _ in ()).throw(RuntimeError("boom"))
        return cases

    monkeypatch.setattr(kernels, "softmax_cases", first_fails)
    argv = ["profile", "--quick", "--cpu", "--threads", "2", "--only", "softmax", "--no-progress", "-o",
            str(tmp_path / "p")]
    assert main(argv) == 2
    assert capsys.readouterr().err.rstrip().splitlines()[-1].startswith("error: softmax failed (measuring, 0 of ")
    monkeypatch.setenv("HYBRID_DEBUG", "1")
    with pytest.raises(ProfileFailedError) as info:
        main([*argv[:-1], str(tmp_path / "p2")])  # p holds the first run's record of the failure
    assert isinstance(info.value.__cause__, RuntimeError) and str(info.value.__cause__) == "boom"
