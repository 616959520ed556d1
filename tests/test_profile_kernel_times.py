"""Kernel-only timings of profiled configurations (``hybrid profile --kernel-times``): the attribution of CUPTI
kernels to marked calls (checked on the committed real GPU traces), the pass itself on this CPU, the bundle file
and its merge, the refusal without a GPU, and the GPU session's plan."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid.bench import gpu_session as gs
from hybrid.data.bundle import (
    KERNEL_TIMES_FILE,
    load_bundle,
    load_kernel_times,
    merge_bundles,
    read_meta,
    write_bundle,
)
from hybrid.data.paths import project_datasets_dir
from hybrid.data.traces import load_traces, trace_files
from hybrid.data.traces.annotations import annotation_kernel_us
from hybrid.data.traces.parse import RankTrace
from hybrid.errors import InvalidInputError
from hybrid.ops.families import family_array

ROOT = Path(__file__).resolve().parents[1]
H100 = project_datasets_dir() / "H100-SXM"


@pytest.mark.parametrize("trace", ["traces-h100/bert-bf16", "traces-h200/llama-bf16-sdpa"])
def test_a_marked_range_gets_every_kernel_launched_inside_it_on_any_thread(trace):
    # a real GPU step: ProfilerStep#0 is a top-level range on the main thread; the backward's ops run on
    # autograd's thread (outside its op tree) but inside its time, and so does every kernel of the step
    tr = load_traces(trace_files([ROOT / "datasets" / trace]))[0]
    assert tr.ops["tid"].nunique() == 2
    got = annotation_kernel_us(tr, "ProfilerStep#")
    assert list(got) == ["ProfilerStep#0"]
    assert got["ProfilerStep#0"] == pytest.approx(float(tr.kernels["dur"].sum()), rel=1e-9)
    # the forward alone (the ops nested under the step on its own thread) is well short of it
    assert annotation_kernel_us(tr, "no-such-range") == {}


def test_ranges_split_kernels_by_launch_time():
    ops = pd.DataFrame({"name": ["m:0", "aten::mm", "m:1", "aten::add", "aten::mul", "outside"],
                        "tid": ["1", "1", "1", "2", "1", "1"], "ts": [0.0, 1.0, 10.0, 12.0, 30.0, 40.0],
                        "dur": [9.0, 5.0, 9.0, 2.0, 1.0, 1.0], "parent": [-1, 0, -1, -1, -1, -1]})
    kernels = pd.DataFrame({"name": ["k0", "k1", "k2", "k3"], "stream": "7", "ts": [2.0, 13.0, 31.0, 41.0],
                            "dur": [4.0, 3.0, 5.0, 7.0], "op": [1, 3, 4, 5]})
    tr = RankTrace("t", "kineto", 0, 1, "cuda", "GPU", ops, kernels)
    # k0 from the mm inside m:0; k1 from an op of another thread inside m:1's time; k2, k3 from ops outside both
    assert annotation_kernel_us(tr, "m:") == {"m:0": 4.0, "m:1": 3.0}


def test_the_pass_runs_here_and_times_nothing_without_cuda():
    torch = pytest.importorskip("torch")
    from hybrid.data.profiler.backend import open_backend
    from hybrid.data.profiler.kernel_times import kernel_pass, kernel_time_rows
    from hybrid.data.profiler.runner import family_cases

    backend = open_backend(torch, threads=1, force_cpu=True)
    cases = family_cases(backend, "elementwise", quick=True)[:4]
    # profiler session, marked calls, export and parse all run; a CPU launches no kernel, so no time
    assert kernel_pass(backend, cases) == {}
    # what a GPU's times become: each case's shape columns, cupti-timed
    rows = kernel_time_rows(cases, {1: 3.5, 0: 2.0})
    assert [r["time_us"] for r in rows] == [2.0, 3.5] and [r["repeats"] for r in rows] == [3, 3]
    assert rows[1]["elements"] == cases[1].row["elements"]
    # a pass past its time cap stops before the next case
    assert kernel_pass(backend, cases, max_s=0.0) == {}


def test_profile_refuses_kernel_times_without_a_gpu(tmp_path):
    pytest.importorskip("torch")
    from hybrid.data.profiler.runner import ProfileOptions, run_profile

    out = tmp_path / "p"
    with pytest.raises(InvalidInputError, match="needs a CUDA GPU"):
        run_profile(ProfileOptions(quick=True, families=("elementwise",), force_cpu=True, threads=1,
                                   kernel_times=True, progress=False), out)
    assert not out.exists()


def _kernel_rows(table: pd.DataFrame, scale: float) -> pd.DataFrame:
    # as kernel_time_rows writes them: a median kernel time and its call count, no eager min/max/std
    k = table.drop(columns=[c for c in ("time_us_min", "time_us_max", "time_us_std") if c in table.columns])
    k["time_us"] = k["time_us"] * scale
    k["framework"] = "cupti"
    return k


def test_kernel_times_file_is_written_read_and_merged(tmp_path):
    table, _ = load_bundle(H100)
    fam = pd.Series(family_array(table["op"]))
    text = (H100 / "catalog.toml").read_text()
    meta = read_meta(H100)
    gemm = table[(fam == "gemm").to_numpy()].reset_index(drop=True)
    norm = table[(fam == "norm").to_numpy()].reset_index(drop=True)
    a = write_bundle(tmp_path / "a", gemm, text, meta, kernel_times=_kernel_rows(gemm.head(5), 0.5))
    b = write_bundle(tmp_path / "b", norm, text, meta)
    # the second run re-times two of the first run's configurations: its rows win, as --replace does
    c = write_bundle(tmp_path / "c", norm.head(3), text, meta,
                     kernel_times=_kernel_rows(pd.concat([gemm.head(2), norm.head(3)]), 0.25))
    assert (a / KERNEL_TIMES_FILE).is_file() and not (b / KERNEL_TIMES_FILE).exists()
    back = load_kernel_times(a)
    assert len(back) == 5 and set(back["framework"]) == {"cupti"}
    np.testing.assert_allclose(back["time_us"], gemm["time_us"].head(5) * 0.5)
    assert load_kernel_times(b).empty
    # the eager table is unchanged by the extra file
    assert len(load_bundle(a)[0]) == len(gemm)
    path, _ = merge_bundles([a, b, c], tmp_path / "all", on_duplicate="last")
    merged = load_kernel_times(path)
    assert len(merged) == 5 + 3  # 5 gemm (2 of them re-timed) + 3 norm
    regemm = merged[merged["op"].isin(gemm["op"].unique())]
    np.testing.assert_allclose(np.sort(regemm["time_us"]),
                               np.sort(np.r_[gemm["time_us"].iloc[2:5] * 0.5, gemm["time_us"].iloc[:2] * 0.25]))


def test_gpu_session_times_kernels_of_the_small_op_families_only(tmp_path):
    steps = {st.name: st for st in gs.default_steps(tmp_path, families=("attention", "gemm", "norm", "conv"),
                                                    traces=False, dlrm_configs=0)}
    with_kt = {n for n, st in steps.items() if "--kernel-times" in st.argv}
    assert with_kt == {"profile-gemm", "profile-norm"}
    assert steps["profile-gemm"].timeout_s == gs.STEP_LIMITS["profile-gemm"] + gs.MAX_PASS_S
    # the CPU trial plan never asks for CUPTI
    cpu = gs.default_steps(tmp_path, families=("gemm",), traces=False, dlrm_configs=0, cpu=True)
    assert all("--kernel-times" not in st.argv for st in cpu)


def test_a_kernel_only_run_writes_a_bundle_that_merges(tmp_path):
    # a GPU measured before, revisited with --skip-existing --kernel-times: no eager row is new, the kernel rows
    # are; the bundle holds a header-only measurements.csv beside kernel_times.csv and merges into the old one
    table, _ = load_bundle(H100)
    text = (H100 / "catalog.toml").read_text()
    meta = read_meta(H100)
    norm = table[(pd.Series(family_array(table["op"])) == "norm").to_numpy()].reset_index(drop=True)
    only = write_bundle(tmp_path / "kt", table.iloc[:0], text, meta, kernel_times=_kernel_rows(norm, 0.3))
    empty, _ = load_bundle(only)
    assert empty.empty and "time_us" in empty.columns
    assert len(load_kernel_times(only)) == len(norm)
    path, merged = merge_bundles([H100, only], tmp_path / "all")
    assert len(merged) == len(table)  # the eager rows are the committed bundle's, unchanged
    assert len(load_kernel_times(path)) == len(norm)
    with pytest.raises(Exception, match="empty|no rows"):  # an eager table without rows and nothing beside it
        write_bundle(tmp_path / "bad", table.iloc[:0], text, meta)
