"""nccl-tests importer on every real log under nccl-tests/, plus truncated, empty and foreign files."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pandas as pd
import pytest

from hybrid.data.importers import IMPORTERS, DataImportWarning, import_nccl_tests, import_paths
from hybrid.errors import ImportFormatError, InvalidInputError

# an independent, deliberately simple notion of "a data row": size, count, type, then numbers
_ROW = re.compile(r"^\s*\d+\s+\d+\s+[a-z0-9_]+\s+\w+\s+-?\d+\s+[\d.eE+]+\s", re.M)



def _expected_layout(path: Path) -> tuple[int, int] | None:
    """(nodes, gpus per node) from the directory (``n8.g4``) or file name (``nccl_N2_G8``)."""
    for part in reversed(path.parts):
        if m := re.match(r"n(\d+)\.g(\d+)", part):
            return int(m.group(1)), int(m.group(2))
        if m := re.search(r"N(\d+)_G(\d+)", part):
            return int(m.group(1)), int(m.group(2))
    return None


def test_registry_finds_the_logs(shared_datasets):
    files = IMPORTERS["nccl-tests"].find(shared_datasets)
    assert len(files) == 745
    assert not any(p.name in ("nodes.dat", "summary.csv") or "mpi_profile" in p.name for p in files)


@pytest.mark.data_files("nccl-tests")
def test_every_log(path, catalog):
    text = path.read_text(errors="replace")
    if not _ROW.search(text):
        with pytest.raises(ImportFormatError, match=re.escape(str(path)) + ": no nccl-tests data rows"):
            import_nccl_tests(path, catalog=catalog)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataImportWarning)
        df = import_nccl_tests(path, catalog=catalog)
    assert len(df) > 0 and (df["size_bytes"] > 0).all() and (df["time_us"] > 0).all()
    assert set(df["op"]) <= {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"}
    layout = _expected_layout(path)
    assert layout is not None
    nodes, gpus = layout
    assert (df["n_ranks"] == nodes * gpus).all(), (nodes, gpus, df["n_ranks"].unique())
    assert (df["n_nodes"] == nodes).all()
    dev = "H100-SXM" if "xxrjun" in str(path) else "A100-SXM4-40GB"
    assert (df["device"] == dev).all()
    expected_system = {"results_polaris": "Polaris", "results_sophia": "Sophia", "results_sirius": "Sirius",
                       "example-cluster00": "xxrjun-H100-cluster00", "example-cluster01": "xxrjun-H100-NDR"}
    sys_name = next(v for k, v in expected_system.items() if k in path.parts)
    assert (df["system"] == catalog.resolve_system(sys_name)).all()
    # algorithm bandwidth = size / time is physical: below 1 TB/s per rank
    assert (df["size_bytes"] / df["time_us"] * 1e-3 < 1000).all()
    # every data row of the file gives an out-of-place row (zero-byte rows excepted)
    n_rows = sum(1 for m in _ROW.finditer(text) if int(m.group(0).split()[0]) > 0)
    assert (~df["in_place"]).sum() == n_rows
    assert df["wrong"].dropna().ge(0).all()


LOG = """\
srun: job 1234 queued and waiting for resources
# nccl-tests version 2.13.8 nccl-headers=21903 nccl-library=21903
# Collective test starting: reduce_scatter_perf
# nThread 1 nGpus 1 minBytes 1024 maxBytes 8192 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  11 on node-a device  0 [0000:1b:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  12 on node-a device  1 [0000:2b:00] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid  13 on node-b device  0 [0000:1b:00] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid  14 on node-b device  1 [0000:2b:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
        1024           128      half     sum      -1    20.10    0.05    0.04       0    19.90    0.05    0.04       0
MPICH Slingshot Network Summary: 0 network timeouts
        2048           256      half     sum      -1    21.00    0.10    0.07       3    20.50    0.10    0.07       0
        4096           512      half     sum      -1    22.00    0.19    0.14       0    21.50    0.19    0.14       0
        8192          1024      half     sum      -1    24.00    0.34    0.26       0    23.50    0.35    0.26       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.12
#
# Collective test concluded: reduce_scatter_perf
"""


def test_synthetic_log_fields(tmp_path, catalog):
    p = tmp_path / "results_polaris" / "my.log"
    p.parent.mkdir()
    p.write_text(LOG)
    df = import_nccl_tests(p, catalog=catalog)
    assert len(df) == 8 and (df["op"] == "reduce_scatter").all() and (df["dtype"] == "fp16").all()
    assert (df["n_ranks"] == 4).all() and (df["n_nodes"] == 2).all() and (df["device"] == "H100-SXM").all()
    assert (df["system"] == "Polaris").all()  # inferred from the directory name
    assert df["library_version"].iloc[0] == "NCCL 2.19.3" and df["framework_version"].iloc[0] == "2.13.8"
    flagged = df[df["wrong"] > 0]
    assert len(flagged) == 1 and flagged["size_bytes"].iloc[0] == 2048 and not flagged["in_place"].iloc[0]
    assert sorted(df.loc[df["in_place"], "time_us"]) == [19.9, 20.5, 21.5, 23.5]
    # --system overrides the directory
    assert (import_nccl_tests(p, catalog=catalog, system="Sophia")["system"] == "Sophia").all()


@pytest.mark.parametrize("tag", ["[1,{r}]<stdout>:", "{r}: ", "[{r}] "])
def test_launcher_tagged_lines_and_the_mpi_binary(tmp_path, catalog, tag):
    """``mpirun --tag-output``, ``srun --label`` and MPICH / Intel MPI's ``mpiexec -l`` put a tag before every line
    (and interleave the ranks' noise);
    the MPI build names its test ``<name>_perf_mpi``."""
    body = LOG.replace("reduce_scatter_perf", "reduce_scatter_perf_mpi")
    lines = [tag.format(r=0) + line for line in body.splitlines()]
    lines.insert(len(lines) // 2, tag.format(r=1) + "nodeb:21:21 [0] NCCL INFO comm 0x7f9c0c000f60 rank 1 nranks 4")
    p = tmp_path / "job.out"  # nothing in the name: the collective comes from the tagged "test starting" line
    p.write_text("\n".join(lines) + "\n")
    df = import_nccl_tests(p, catalog=catalog)
    plain = tmp_path / "plain.out"
    plain.write_text(LOG)
    ref = import_nccl_tests(plain, catalog=catalog)
    assert (df["op"] == "reduce_scatter").all() and len(df) == len(ref) == 8
    assert df["time_us"].tolist() == ref["time_us"].tolist() and (df["n_ranks"] == 4).all()


def test_truncated_log_keeps_complete_rows(tmp_path, catalog):
    p = tmp_path / "cut.log"
    cut = LOG.index("        8192")
    p.write_text(LOG[: cut + 40])  # killed while printing the 8192-byte row
    with pytest.warns(DataImportWarning, match=r"cut\.log"):
        df = import_nccl_tests(p, catalog=catalog)
    assert sorted(df.loc[~df["in_place"], "size_bytes"]) == [1024, 2048, 4096]


def test_collective_inferred_from_file_name_and_data(tmp_path, catalog):
    body = LOG.replace("# Collective test starting: reduce_scatter_perf\n", "").replace(
        "# Collective test concluded: reduce_scatter_perf\n", "")
    named = tmp_path / "reduce_scatter_output.dat.3"
    named.write_text(body)
    df = import_nccl_tests(named, catalog=catalog)
    assert (df["op"] == "reduce_scatter").all() and (df["algorithm"] == "env-setup-3").all()
    anon = tmp_path / "job.out"
    anon.write_text(body)  # sum reduction with count = size / (2 bytes x 4 ranks): reduce_scatter
    assert (import_nccl_tests(anon, catalog=catalog)["op"] == "reduce_scatter").all()
    ambiguous = tmp_path / "job2.out"
    ambiguous.write_text(body.replace(" sum ", " none "))
    with pytest.raises(ImportFormatError, match=r"job2\.out.*cannot tell which collective"):
        import_nccl_tests(ambiguous, catalog=catalog)


def test_empty_garbage_and_unknown_gpu(tmp_path, catalog):
    empty = tmp_path / "empty.log"
    empty.write_text("")
    with pytest.raises(ImportFormatError, match=r"empty\.log: no nccl-tests data rows"):
        import_nccl_tests(empty, catalog=catalog)
    garbage = tmp_path / "garbage.log"
    garbage.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ImportFormatError, match=r"garbage\.log"):
        import_nccl_tests(garbage, catalog=catalog)
    odd = tmp_path / "all_reduce.log"
    odd.write_text(LOG.replace("NVIDIA H100 80GB HBM3", "Mystery Accelerator X"))
    with pytest.raises(Exception, match=r"all_reduce\.log: unknown device 'Mystery Accelerator X'.*--device"):
        import_nccl_tests(odd, catalog=catalog)
    assert (import_nccl_tests(odd, device="H100", catalog=catalog)["device"] == "H100-SXM").all()


def test_directory_import_skips_failed_jobs(shared_datasets, catalog):
    d = shared_datasets / "nccl-tests/argonne-lcf_alcf-nccl-tests/results_sophia"
    with pytest.warns(DataImportWarning, match="file skipped"):
        df = import_paths("nccl-tests", [d], catalog=catalog)
    assert set(df["system"]) == {"Sophia"} and (df["n_ranks"] == 16).all()


def test_a_system_that_does_not_match_the_logs_gpu_warns(shared_datasets, catalog):
    """ALCF's Sirius logs ran on A100-SXM4-40GB nodes of 4: labelling them DGX-A100 (8 x 80 GB) is allowed, but
    said; a run on fewer GPUs per node than the system has is a subset run and says nothing."""
    import warnings

    from hybrid.data.importers.nccl_tests import import_nccl_tests

    log = (shared_datasets / "nccl-tests/argonne-lcf_alcf-nccl-tests/results_sirius/nccl_2_18/"
           "n2.g4.2024-04-29-22-00-42/all_reduce_output.dat.1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = import_nccl_tests(log, catalog=catalog, system="DGX-A100")
    msgs = [str(w.message) for w in caught if "does not match system" in str(w.message)]
    assert len(rows) and msgs and "the log's GPU A100-SXM4-40GB does not match system DGX-A100" in msgs[0]
    assert set(rows["system"]) == {"DGX-A100"}


def test_wrong_counts_split_groups_and_tests_the_table_has_no_op_for(tmp_path, catalog):
    """#wrong printed with %g (1.04858e+06) is a count, not missing; NCCL_TESTS_SPLIT_MASK groups are communicators
    of their own size; a gather / scatter / alltoallv section is skipped with a warning, never labelled as another
    collective."""
    big = tmp_path / "big.log"
    big.write_text(LOG.replace("0.07       3", "0.07 1.04858e+06"))
    df = import_nccl_tests(big, catalog=catalog)
    assert df.loc[(df["size_bytes"] == 2048) & ~df["in_place"], "wrong"].iloc[0] == 1048580
    split = tmp_path / "split.log"
    split.write_text(LOG.replace("Rank  2 Group  0", "Rank  2 Group  1").replace("Rank  3 Group  0",
                                                                                 "Rank  3 Group  1"))
    with pytest.warns(DataImportWarning, match="2 communicator groups ran at once"):
        df = import_nccl_tests(split, catalog=catalog)
    assert (df["n_ranks"] == 2).all() and (df["n_nodes"] == 1).all()
    gather = LOG.replace("reduce_scatter_perf", "gather_perf")
    both = tmp_path / "both.log"
    both.write_text(LOG + gather)
    with pytest.warns(DataImportWarning, match="test 'gather' is not a collective the canonical table has"):
        df = import_nccl_tests(both, catalog=catalog)
    assert set(df["op"]) == {"reduce_scatter"} and len(df) == 8


def test_a_file_name_speaks_only_for_sections_that_count_like_it(tmp_path, catalog):
    """A file of several unnamed sections (an old format) named after one test: the others are not labelled with
    it; an unnamed 1-element-per-rank section tells all-reduce from send/recv by its bus-bandwidth factor."""
    body = LOG.replace("# Collective test starting: reduce_scatter_perf\n", "").replace(
        "# Collective test concluded: reduce_scatter_perf\n", "")
    two = tmp_path / "all_reduce_and_more.log"
    two.write_text(body + body)  # reduce-scatter counts (size / count = ranks x 2 bytes) under an all_reduce name
    with pytest.warns(DataImportWarning, match="its counts say reduce_scatter, not the file name's all_reduce"):
        assert set(import_nccl_tests(two, catalog=catalog)["op"]) == {"reduce_scatter"}
    gathers = tmp_path / "all_reduce_then_more.log"
    gathers.write_text(body.replace(" sum ", " none ") * 2)  # all-gather or all-to-all counts: the data cannot say
    with pytest.raises(ImportFormatError, match="counts elements as another collective"):
        import_nccl_tests(gathers, catalog=catalog)
    # an unnamed section, one element per rank, sum: all-reduce (busbw = 2 (n-1)/n algbw) or send/recv (= algbw)
    rows = ("        {s}  {c}  half  sum  -1  100.0  {a:.2f}  {b:.2f}  0  100.0  {a:.2f}  {b:.2f}  0\n")
    data = "".join(rows.format(s=2**k, c=2**k // 2, a=2**k / 100e3, b=2**k / 100e3 * f)
                   for k in range(20, 24) for f in [1.5])
    head = LOG.split("#       size")[0].replace("# Collective test starting: reduce_scatter_perf\n", "")
    header = "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n"
    ar = tmp_path / "job.out"
    ar.write_text(head + header + data)
    assert (import_nccl_tests(ar, catalog=catalog)["op"] == "all_reduce").all()  # 4 ranks: 2 x 3/4 = 1.5
    sr = tmp_path / "job2.out"
    sr.write_text(head + header + data.replace(f"{2**20 / 100e3 * 1.5:.2f}", f"{2**20 / 100e3:.2f}")
                  .replace(f"{2**21 / 100e3 * 1.5:.2f}", f"{2**21 / 100e3:.2f}")
                  .replace(f"{2**22 / 100e3 * 1.5:.2f}", f"{2**22 / 100e3:.2f}")
                  .replace(f"{2**23 / 100e3 * 1.5:.2f}", f"{2**23 / 100e3:.2f}"))
    assert (import_nccl_tests(sr, catalog=catalog)["op"] == "send_recv").all()


def test_rows_without_a_system_are_said_to_be_unreachable_by_system(tmp_path, catalog):
    """Calibration keys a log's curves on its system; a log imported with none (no --system, no catalog system in
    its folders) is keyed on the GPU, which `predict collective --system X` never reads: the import says so."""
    log = tmp_path / "run.log"
    log.write_text(LOG)
    with pytest.warns(DataImportWarning, match=r"8 rows name no system .*H100-SXM.*pass --system"):
        df = import_nccl_tests(log, catalog=catalog)
    assert "system" not in df.columns or df["system"].isna().all()
    log.write_text(LOG.replace("       3    20.50", "       0    20.50"))  # (a #wrong row is said too)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataImportWarning)
        df = import_nccl_tests(log, catalog=catalog, system="DGX-H100")
    assert (df["system"] == "DGX-H100").all()


def test_time_unit_of_the_header_is_read(tmp_path, catalog):
    """The units line under the column header says what the times are in: an edited ``(ms)`` is converted (with a
    warning naming the file and line), a unit that is no time or a line that does not pair up is refused."""
    units = "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)"
    assert units in LOG
    units_line = LOG.splitlines().index(units) + 1
    ref = tmp_path / "ref.log"
    ref.write_text(LOG)
    base = import_nccl_tests(ref, catalog=catalog)
    p = tmp_path / "ms.log"
    p.write_text(LOG.replace(units, units.replace("(us)", "(ms)")))
    with pytest.warns(DataImportWarning, match=rf"ms\.log: .*line {units_line} gives the times in ms.*converted to "
                                               "microseconds"):
        df = import_nccl_tests(p, catalog=catalog)
    assert df["time_us"].tolist() == pytest.approx((base["time_us"] * 1e3).tolist())
    # only the in-place column edited: each column has its own unit
    one = tmp_path / "one.log"
    head, tail = units.rsplit("(us)", 1)
    one.write_text(LOG.replace(units, head + "(s) " + tail))
    with pytest.warns(DataImportWarning, match=r"us / s"):
        df = import_nccl_tests(one, catalog=catalog)
    assert df.loc[~df["in_place"], "time_us"].tolist() == base.loc[~base["in_place"], "time_us"].tolist()
    assert df.loc[df["in_place"], "time_us"].tolist() == pytest.approx(
        (base.loc[base["in_place"], "time_us"] * 1e6).tolist())
    bad = tmp_path / "bad.log"
    bad.write_text(LOG.replace(units, units.replace("(us)", "(min)")))
    with pytest.raises(ImportFormatError, match=rf"bad\.log: line {units_line}: unknown time unit \(min\)"):
        import_nccl_tests(bad, catalog=catalog)
    short = tmp_path / "short.log"
    short.write_text(LOG.replace(units, head))
    with pytest.raises(ImportFormatError, match=rf"short\.log: line {units_line}: the units line gives 1 time unit"):
        import_nccl_tests(short, catalog=catalog)


def test_duplicated_data_lines_within_a_section_are_dropped(tmp_path, catalog):
    """A data line repeated in one section (doubled or concatenated output) is one measurement, with a warning
    naming the file and the count; the same lines in another section (a second run) are kept."""
    row = "        2048           256      half     sum      -1    21.00    0.10    0.07       3    20.50    0.10    0.07       0\n"
    assert row in LOG
    p = tmp_path / "dup.log"
    p.write_text(LOG.replace(row, row * 3))
    with pytest.warns(DataImportWarning, match=r"dup\.log: section starting at line 4: dropped 2 duplicated data "
                                               r"line\(s\).*first: line 18 repeats line 17"):
        df = import_nccl_tests(p, catalog=catalog)
    assert len(df) == 8 and (df["size_bytes"] == 2048).sum() == 2
    twice = tmp_path / "twice.log"
    twice.write_text(LOG + LOG)  # two runs: separate sections, separate measurements
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DataImportWarning)
        assert len(import_nccl_tests(twice, catalog=catalog)) == 16
    assert not [str(w.message) for w in caught if "duplicated data line" in str(w.message)]


def test_a_second_run_of_the_same_job_is_kept_and_said(tmp_path, catalog):
    """Two runs of one job in one log measure each size twice: every row is kept (each a sample for the fits, whose
    collective curves take the median per size), and the import says how many configurations repeat and how far
    their times spread (here one size's out-of-place time, 20.10 then 30.15 us: 1.50x)."""
    p = tmp_path / "results_polaris" / "two_runs.log"
    p.parent.mkdir()
    p.write_text(LOG + LOG.replace("  20.10  ", "  30.15  "))
    with pytest.warns(DataImportWarning, match=r"nccl-tests import: 8 configuration\(s\) measured more than once "
                                               r"\(16 rows\), 1 of them with different times \(widest max/min: "
                                               r"H100-SXM reduce_scatter 1\.500x, median 1\.500x over 1\); all kept"):
        df = import_paths("nccl-tests", [p], catalog=catalog)
    assert len(df) == 16
    assert sorted(df.loc[(df["size_bytes"] == 1024) & ~df["in_place"], "time_us"]) == [20.1, 30.15]
    one = tmp_path / "results_polaris" / "one_run.log"
    one.write_text(LOG)
    with warnings.catch_warnings(record=True) as caught:  # one run: nothing repeats, nothing said
        warnings.simplefilter("always", DataImportWarning)
        assert len(import_paths("nccl-tests", [one], catalog=catalog)) == 8
    assert not [w for w in caught if "measured more than once" in str(w.message)]


def test_every_type_in_one_section(tmp_path, catalog):
    """``-d all`` sweeps every type in one section (int8 rows count one element per byte, half two bytes, ...): the
    file name and the data are checked row by row against each row's own type size, not the first row's."""
    body = LOG.replace("# Collective test starting: reduce_scatter_perf\n", "").replace(
        "# Collective test concluded: reduce_scatter_perf\n", "")
    head, rest = body.split("        1024", 1)
    tail = rest[rest.index("# Out of bounds"):]
    rows = []
    for name, nbytes in (("int8", 1), ("half", 2), ("float", 4), ("double", 8)):
        for size in (1024, 4096):
            rows.append(f"{size:>12} {size // (nbytes * 4):>13} {name:>9}     sum      -1    20.00    0.05    0.04"
                        "       0    19.90    0.05    0.04       0")
    text = head + "\n".join(rows) + "\n" + tail
    for fname in ("reduce_scatter_perf.log", "job.out"):  # named by the file, and inferred from the data
        p = tmp_path / fname
        p.write_text(text)
        df = import_nccl_tests(p, catalog=catalog)
        assert (df["op"] == "reduce_scatter").all() and (df["n_ranks"] == 4).all()
        assert sorted(set(df["dtype"])) == ["fp16", "fp32", "fp64", "int8"] and len(df) == 16
    no_ranks = tmp_path / "reduce_scatter_noranks.log"  # ranks from size / (count x type size), per row
    no_ranks.write_text("\n".join(line for line in text.splitlines() if "Rank" not in line) + "\n")
    df = import_nccl_tests(no_ranks, catalog=catalog, device="H100")
    assert (df["n_ranks"] == 4).all() and len(df) == 16


def test_a_directory_says_which_logs_its_name_patterns_left_out(tmp_path, catalog):
    """In a directory of one's own, the files named like the format's (``*.log``) are read; a log saved under
    another name beside them (Slurm's ``slurm-1234.out``) was left out without a word. It is named in a warning;
    files that are not nccl-tests output (scripts, notes) are not."""
    d = tmp_path / "runs"
    (d / "a").mkdir(parents=True)
    (d / "a" / "reduce_scatter_perf.log").write_text(LOG)
    (d / "slurm-1234.out").write_text("\n".join("[1,0]<stdout>:" + line for line in LOG.splitlines()) + "\n")
    (d / "a" / "job.sh").write_text("#!/bin/bash\nsrun ./reduce_scatter_perf -b 1K -e 8K\n")
    (d / "notes.txt").write_text("# nThreads were 1 in every run\n")
    with pytest.warns(DataImportWarning, match=r"1 file\(s\) hold nccl-tests output .* not read: .*slurm-1234\.out;"
                                               r" name them explicitly") as caught:
        df = import_paths("nccl-tests", [d], catalog=catalog, system="DGX-H100")
    assert len(df) == 8 and set(df["source"]) == {f"nccl-tests:{(d / 'a' / 'reduce_scatter_perf.log').as_posix()}"}
    assert not any("job.sh" in str(w.message) or "notes.txt" in str(w.message) for w in caught)
    (d / "slurm-1234.out").unlink()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import_paths("nccl-tests", [d], catalog=catalog, system="DGX-H100")
    assert not [w for w in caught if "not read" in str(w.message)]  # nothing left out: nothing said


def test_one_rank_sections_are_skipped_with_the_likely_cause(tmp_path, catalog):
    """A build without MPI started by mpirun prints one independent 1-rank test per process: local copies, no
    communication, which `predict collective` refuses (at least 2 ranks). Such sections are skipped with a
    warning saying so; the multi-rank sections of the file are kept."""
    one = "\n".join(line for line in LOG.splitlines() if not re.search(r"Rank\s+[123]\b", line)) + "\n"
    p = tmp_path / "reduce_scatter_perf.log"
    p.write_text(one.replace("        1024           128", "        1024           512")
                 .replace("        2048           256", "        2048          1024")
                 .replace("        4096           512", "        4096          2048")
                 .replace("        8192          1024", "        8192          4096") + LOG)
    with pytest.warns(DataImportWarning, match=r"section at line \d+ ran on 1 rank: it measures no communication"
                                               r" .*MPI=1.*; skipped"):
        df = import_nccl_tests(p, catalog=catalog, system="DGX-H100")
    assert len(df) == 8 and (df["n_ranks"] == 4).all()
    alone = tmp_path / "alone_reduce_scatter_perf.log"
    alone.write_text(p.read_text().split("# Collective test concluded")[0])
    with pytest.raises(ImportFormatError, match="no nccl-tests data rows"), pytest.warns(DataImportWarning,
                                                                                        match="ran on 1 rank"):
        import_nccl_tests(alone, catalog=catalog, system="DGX-H100")


def test_a_system_whose_nodes_cannot_hold_the_run_is_an_error(tmp_path, catalog):
    """8 ranks on one host labelled Polaris (4 GPUs per node): imported with a warning, the table was then read as
    2 nodes of it (the roofline takes n_nodes 1 for 'not said'), costing a network the run never crossed. The
    import refuses it, and so does reading a table that states such a layout."""
    from hybrid.data.schema import check_rows

    ranks = "".join(f"#  Rank  {r} Group  0 Pid  {20 + r} on node-a device  {r} [0000:1b:00] NVIDIA A100-SXM4-40GB\n"
                    for r in range(8))
    head, tail = LOG.split("#  Rank  0", 1)
    p = tmp_path / "reduce_scatter_perf.log"
    p.write_text(head + ranks + tail[tail.index("#\n"):])
    assert (import_nccl_tests(p, catalog=catalog, system="DGX-A100")["n_ranks"] == 8).all()
    with pytest.raises(ImportFormatError, match=r"line \d+: 8 ranks on 1 host\(s\) are 8 GPUs per node, more than "
                                                r"system Polaris has \(4 x A100-SXM4-40GB per node\); check --system"):
        import_nccl_tests(p, catalog=catalog, system="Polaris")
    table = pd.DataFrame({"device": "H100-SXM", "op": "all_reduce", "time_us": [100.0, 100.0],
                          "size_bytes": 1 << 20, "n_ranks": [8, 16], "n_nodes": [1, 1], "system": "DGX-H100"})
    with pytest.raises(InvalidInputError, match=r"t\.csv: row 2 \(CSV line 3\): collective: 16 ranks on 1 node\(s\) "
                                                r"of DGX-H100 \(8 GPUs per node\)"):
        check_rows(table, catalog, "t.csv")
    assert len(check_rows(table.head(1), catalog, "t.csv")) == 1
    assert len(check_rows(table.drop(columns="n_nodes"), catalog, "t.csv")) == 2  # not said: spread over nodes


def test_a_run_over_several_hosts_on_a_single_node_system_is_an_error(tmp_path, catalog):
    """LOG ran on two hosts; a single-node system (no network between nodes: XLA-H100x8) cannot hold it. The import
    wrote the table anyway, which `data validate` and calibration then refused ('several nodes of a single-node
    system'); it is refused at import, naming the hosts. One host of the same system is fine."""
    p = tmp_path / "reduce_scatter_perf.log"
    p.write_text(LOG)
    with pytest.raises(ImportFormatError, match=r"reduce_scatter_perf\.log: line 4: 4 ranks on 2 hosts \(node-a, "
                                                r"node-b\), but system XLA-H100x8 is a single node"):
        import_nccl_tests(p, catalog=catalog, system="XLA-H100x8")
    one = tmp_path / "one_host.log"
    one.write_text(LOG.replace(" on node-b ", " on node-a "))
    df = import_nccl_tests(one, catalog=catalog, system="XLA-H100x8")
    assert (df["n_nodes"] == 1).all() and (df["system"] == "XLA-H100x8").all()


def test_alcf_logs_without_a_setup_number_are_its_first_setup(shared_datasets, catalog):
    """ALCF's file names give the environment setup (``*_output.dat.N``); a name without N is the first run, the
    default environment (Sirius' NCCL 2.21 folder has ``all_reduce_output.dat`` in place of ``.1``; Polaris' 2023
    ``output.dat`` holds the bus bandwidths of its ``all_reduce_output.dat.1``). Unlabelled, their curves were the
    ones a query naming no setting found, instead of the fastest setting's (a Polaris all-reduce at 3.4x)."""
    alcf = shared_datasets / "nccl-tests/argonne-lcf_alcf-nccl-tests"
    sirius = import_paths("nccl-tests", [alcf / "results_sirius/nccl_2_21/n2.g4.2024-04-29-21-10-30"], catalog=catalog)
    assert "" not in set(sirius["algorithm"].fillna(""))
    assert set(sirius["algorithm"]) == {f"env-setup-{n}" for n in range(1, 6)}
    early = alcf / "results_polaris/nccl_2_18/n8.g4.2023-10-13-14-07-13"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataImportWarning)
        plain, first = (import_nccl_tests(early / f, catalog=catalog) for f in ("output.dat", "all_reduce_output.dat.1"))
        second = import_nccl_tests(early / "output.dat.2", catalog=catalog)
    assert set(plain["algorithm"]) == set(first["algorithm"]) == {"env-setup-1"}
    assert set(second["algorithm"]) == {"env-setup-2"}
    cols = ["op", "size_bytes", "n_ranks", "in_place", "time_us"]
    assert plain[cols].reset_index(drop=True).equals(first[cols].reset_index(drop=True))


BIG = """\
# nccl-tests version 2.17.6 nccl-headers=22807 nccl-library=22807
# Collective test starting: alltoall_perf
# nThread 1 nGpus 1 minBytes 33554432 maxBytes 67108864 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid 355580 on cnode2-006 device  0 [0000:61:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid 343125 on cnode2-010 device  0 [0000:1b:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
    33554432       2097152    double    none      -1  1292.74   25.96   12.98       0  1281.34   26.19   13.09    N/A
    67108864       4194304    double    none      -1  2524.08   26.59   13.29       0  2525.66   26.57   13.29    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 13.3723
#
# Collective test concluded: alltoall_perf
"""


def test_a_time_unit_that_the_bandwidth_contradicts_is_an_error(tmp_path, catalog):
    """nccl-tests prints algbw = size / time beside every time, so a time in another unit than the one read for it
    (a units line edited or pasted over data it does not describe, a tool printing ms without a units line) is an
    error naming the line, not a table 1000x off; a units line that matches its data still converts."""
    units = "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)"
    assert units in BIG
    ref = tmp_path / "ref.log"
    ref.write_text(BIG)
    base = import_nccl_tests(ref, catalog=catalog, system="xxrjun-H100-NDR")
    assert base["time_us"].tolist() == [1292.74, 1281.34, 2524.08, 2525.66]
    wrong = tmp_path / "wrong_unit.log"
    wrong.write_text(BIG.replace(units, units.replace("(us)", "(ms)")))
    with pytest.raises(ImportFormatError, match=r"wrong_unit\.log: line 12: out-of-place time 1292\.74, read as "
                                                r"1\.29274e\+06 us \(the units line 11\), disagrees with its algbw "
                                                r"25\.96 GB/s"):
        import_nccl_tests(wrong, catalog=catalog, system="xxrjun-H100-NDR")
    in_ms = BIG
    for us in ("1292.74", "1281.34", "2524.08", "2525.66"):
        in_ms = in_ms.replace(us, f"{float(us) / 1e3:.5f}")
    no_units = tmp_path / "ms_without_units.log"
    no_units.write_text(in_ms.replace(units + "\n", ""))
    with pytest.raises(ImportFormatError, match=r"ms_without_units\.log: line 11: .* time 1\.29274, read as "
                                                r"1\.29274 us \(no units line"):
        import_nccl_tests(no_units, catalog=catalog, system="xxrjun-H100-NDR")
    ms = tmp_path / "ms.log"
    ms.write_text(in_ms.replace(units, units.replace("(us)", "(ms)")))
    with pytest.warns(DataImportWarning, match="gives the times in ms"):
        df = import_nccl_tests(ms, catalog=catalog, system="xxrjun-H100-NDR")
    assert df["time_us"].tolist() == pytest.approx(base["time_us"].tolist())


def test_a_log_saved_with_a_byte_order_mark_is_still_recognised(tmp_path, catalog):
    """Older nccl-tests print ``# nThread`` on the first line; saved by a Windows editor it starts with a UTF-8 BOM.
    Such a file beside the logs a directory search reads must still be named as left out (the sniff did not see
    the header behind the BOM), and imported by name it gives the plain file's rows."""
    body = LOG[LOG.index("# nThread"):]
    d = tmp_path / "runs"
    d.mkdir()
    (d / "reduce_scatter_perf.log").write_text(LOG)
    (d / "slurm-1234.out").write_bytes(b"\xef\xbb\xbf" + body.encode())
    with pytest.warns(DataImportWarning, match=r"1 file\(s\) hold nccl-tests output .* not read: .*slurm-1234\.out"):
        import_paths("nccl-tests", [d], catalog=catalog, system="DGX-H100")
    plain = tmp_path / "plain.log"
    plain.write_text(body)
    ref = import_nccl_tests(plain, catalog=catalog, system="DGX-H100")
    got = import_nccl_tests(d / "slurm-1234.out", catalog=catalog, system="DGX-H100")
    assert got["time_us"].tolist() == ref["time_us"].tolist() and len(got) == 8


PER_ITER = """\
# nccl-tests version 2.17.8 nccl-headers=22807 nccl-library=22807
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 4 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
# Per-Iteration Report: CUDA event timing; i_* uses max over process rows
#
# Using devices
#  Rank  0 Group  0 Pid  41230 on     node-a device  0 [0000:07:00] NVIDIA A100-SXM4-40GB
#  Rank  1 Group  0 Pid  41230 on     node-a device  1 [0000:0b:00] NVIDIA A100-SXM4-40GB
#  Rank  2 Group  0 Pid  41230 on     node-a device  2 [0000:48:00] NVIDIA A100-SXM4-40GB
#  Rank  3 Group  0 Pid  41230 on     node-a device  3 [0000:4c:00] NVIDIA A100-SXM4-40GB
#
#                                                      out-of-place (+ per-iteration)                                in-place (+ per-iteration)
#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)     (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)
     1048576        262144     float     sum      -1    29.51   35.53   53.30       0    28.10    31.20    31.20     2.11    29.80   35.19   52.78       0    28.40    31.90    31.90     2.40
     2097152        524288     float     sum      -1    40.12   52.27   78.41       0    39.00    42.10    42.10     1.50    40.50   51.78   77.67       0    39.20    42.90    42.90     1.61
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 65.54
#
# Collective test concluded: all_reduce_perf
"""


def test_the_per_iteration_report_columns_are_not_time_columns(tmp_path, catalog):
    """nccl-tests' per-iteration report adds i_min / i_max / i_p99 (us) and i_cv% (%) to each timing group, and
    their units to the units line: each group's time unit is still the one before its bandwidths (the line was
    refused as 10 time units for 2 time columns)."""
    p = tmp_path / "all_reduce_perf.log"
    p.write_text(PER_ITER)
    df = import_nccl_tests(p, catalog=catalog, system="DGX-A100")
    assert df["time_us"].tolist() == [29.51, 29.80, 40.12, 40.50]
    assert df["in_place"].tolist() == [False, True, False, True] and (df["wrong"] == 0).all()
    # the group's own time column still says its unit
    ms = tmp_path / "ms.log"
    units = next(line for line in PER_ITER.splitlines() if "(elements)" in line)
    head, tail = units.split("(us)", 1)
    ms.write_text(PER_ITER.replace(units, head + "(ms)" + tail))
    with pytest.warns(DataImportWarning, match="in ms / us"), \
            pytest.raises(ImportFormatError, match=r"ms\.log: line 15: out-of-place time 29\.51, read as 29510 us"):
        import_nccl_tests(ms, catalog=catalog, system="DGX-A100")


RCCL_IN_PLACE = """\
# nThread 1 nGpus 8 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
rccl-tests: Version develop:b0a3bd4
# Using devices
""" + "".join(f"#   Rank {r:2d} Pid  51234 on mi300x-n01 device {r:2d} [0000:{12 + 16 * r:02x}:00.0] AMD Instinct MI300X\n"
              for r in range(8)) + """\
#
#                                                 in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    32.02   32.75   57.31      0
     2097152        524288     float     sum      -1    34.03   61.62  107.83      0
# Errors with asterisks indicate errors that have exceeded the maximum threshold.
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 82.57
#
"""


def test_an_in_place_only_run_is_labelled_in_place(tmp_path, catalog):
    """rccl-tests run with ``-O 0`` measures in place only: one timing group, titled "in-place" above the column
    header. Its rows were labelled out-of-place (a one-group header was taken for the out-of-place group)."""
    p = tmp_path / "all_reduce_perf.log"
    p.write_text(RCCL_IN_PLACE)
    df = import_nccl_tests(p, catalog=catalog, system="MI300X-Platform")
    assert df["in_place"].tolist() == [True, True] and df["time_us"].tolist() == [32.02, 34.03]
    assert (df["device"] == "MI300X").all() and (df["n_ranks"] == 8).all()
    # a one-group header without that title keeps the old reading (out-of-place first)
    plain = tmp_path / "plain_all_reduce_perf.log"
    plain.write_text(RCCL_IN_PLACE.replace("in-place\n", "\n"))
    assert not import_nccl_tests(plain, catalog=catalog, system="MI300X-Platform")["in_place"].any()


def test_cpu_launch_times_are_refused(tmp_path, catalog):
    """``-C 1`` prints 'cputime' in place of 'time': the host's time to enqueue the iterations, taken before they
    complete (algbw and busbw beside it still come from the completed time). The header was not recognised, the
    default layout read those launch times as the collectives' times (LOG's small sizes, algbw under 1, passed
    unchecked); now the file is refused, naming the header line."""
    header = next(line for line in LOG.splitlines() if "#wrong" in line)
    p = tmp_path / "reduce_scatter_perf.log"
    p.write_text(LOG.replace(header, header.replace("    time", " cputime")))
    with pytest.raises(ImportFormatError, match=r"reduce_scatter_perf\.log: line 13: the time columns are 'cputime' "
                                                r"\(nccl-tests run with -C 1\)"):
        import_nccl_tests(p, catalog=catalog, system="DGX-H100")


def test_ranks_spread_unevenly_over_hosts_are_said_and_the_fullest_host_must_fit(tmp_path, catalog):
    """The table keeps ranks and nodes only, which every model reads as an even spread: a run of 3 + 1 ranks was
    imported as 4 ranks on 2 nodes without a word (a warning names the hosts now), and 5 + 1 ranks on Polaris (4 GPUs
    per node) passed the node check as 3 per node although one host held 5."""
    uneven = LOG.replace("Rank  2 Group  0 Pid  13 on node-b", "Rank  2 Group  0 Pid  13 on node-a")
    p = tmp_path / "reduce_scatter_perf.log"
    p.write_text(uneven)
    with pytest.warns(DataImportWarning, match=r"its 4 ranks are spread unevenly over 2 hosts \(3 on node-a, 1 on "
                                               r"node-b\); the table records 4 ranks on 2 nodes, which the models "
                                               r"read as 2 per node"):
        df = import_nccl_tests(p, catalog=catalog, system="DGX-H100")
    assert (df["n_ranks"] == 4).all() and (df["n_nodes"] == 2).all()
    ranks = "".join(f"#  Rank  {r} Group  0 Pid  {20 + r} on node-{'a' if r < 5 else 'b'} device  {r} [0000:1b:00] "
                    "NVIDIA A100-SXM4-40GB\n" for r in range(6))
    head, tail = LOG.split("#  Rank  0", 1)
    five = tmp_path / "five_and_one.log"
    five.write_text(head + ranks + tail[tail.index("#\n"):])
    with pytest.warns(DataImportWarning, match="spread unevenly"), \
            pytest.raises(ImportFormatError, match=r"6 ranks on 2 host\(s\) are 5 GPUs per node, more than system "
                                                   r"Polaris has \(4 x A100-SXM4-40GB per node\)"):
        import_nccl_tests(five, catalog=catalog, system="Polaris")


OLD_ERROR = """\
# nThread 1 nGpus 4 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  20405 on       dgx1 device  0 [0x06] Tesla V100-SXM2-32GB
#   Rank  1 Pid  20405 on       dgx1 device  1 [0x07] Tesla V100-SXM2-32GB
#   Rank  2 Pid  20405 on       dgx1 device  2 [0x0a] Tesla V100-SXM2-32GB
#   Rank  3 Pid  20405 on       dgx1 device  3 [0x0b] Tesla V100-SXM2-32GB
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144   float     sum    35.12   29.86   44.79  0e+00    35.40   29.62   44.43  0e+00
     2097152        524288   float     sum    52.31   40.09   60.14  2e-01*    52.02   40.31   60.47  0e+00
     4194304       1048576   float     sum    88.50   47.39   71.09  0e+00    88.71   47.28   70.92  4e+00*
# Out of bounds values : 2 FAILED
# Avg bus bandwidth    : 58.64
#
"""


def test_an_old_error_column_marked_failed_is_flagged_wrong(tmp_path, catalog):
    """Old nccl-tests (and rccl-tests) print the max error, not a count, and mark one past the type's threshold with
    '*' ("2e-01*": the check failed). Such rows were imported with an empty `wrong`, as valid measurements that
    calibration then fitted; they are flagged now (wrong = 1: the count is not printed), the others stay empty."""
    p = tmp_path / "all_reduce_perf.log"
    p.write_text(OLD_ERROR)
    df = import_nccl_tests(p, catalog=catalog, system="DGX-1")
    flagged = df[df["wrong"] > 0]
    assert list(zip(flagged["size_bytes"], flagged["in_place"], strict=True)) == [(2097152, False), (4194304, True)]
    assert (flagged["wrong"] == 1).all() and df["wrong"].isna().sum() == 4 and len(df) == 6


def test_a_section_over_different_gpus_is_refused_unless_device_names_them(tmp_path, catalog):
    """Ranks on two GPU models (2 x H100 + 2 x A100) were imported as the "most common" one with a warning: on a
    tie, rank 0's GPU, so the A100s' collective entered the table as H100 measurements. Refused now (naming the file,
    the section's line and the GPUs) unless --device says what to label them; two spellings of one catalog GPU are
    no mix at all and pass without a word."""
    p = tmp_path / "all_gather.log"
    mixed = LOG.replace("on node-b device  0 [0000:1b:00] NVIDIA H100 80GB HBM3",
                        "on node-b device  0 [0000:1b:00] NVIDIA A100-SXM4-80GB").replace(
                        "on node-b device  1 [0000:2b:00] NVIDIA H100 80GB HBM3",
                        "on node-b device  1 [0000:2b:00] NVIDIA A100-SXM4-80GB")
    p.write_text(mixed)
    with pytest.raises(ImportFormatError, match=r"all_gather\.log: line 4: the ranks run on different GPUs "
                                                r"\(2 x H100-SXM, 2 x A100-SXM4-80GB\).*pass --device"):
        import_nccl_tests(p, catalog=catalog)
    df = import_nccl_tests(p, catalog=catalog, device="A100-SXM4-80GB")
    assert len(df) == 8 and (df["device"] == "A100-SXM4-80GB").all()
    p.write_text(LOG.replace("on node-b device  1 [0000:2b:00] NVIDIA H100 80GB HBM3",
                             "on node-b device  1 [0000:2b:00] H100-SXM").replace("       3    20.50",
                                                                                 "       0    20.50"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataImportWarning)
        df = import_nccl_tests(p, catalog=catalog, system="DGX-H100")
    assert len(df) == 8 and (df["device"] == "H100-SXM").all()


def test_rows_with_wrong_results_are_said_at_import(tmp_path, catalog):
    """A log whose #wrong column is > 0 (the collective returned wrong data) was imported without a word: the rows
    are kept (column ``wrong``) and every fit and score leaves them out, which the user learnt only from the
    calibration's counts. The import says how many and where the first is."""
    p = tmp_path / "rs.log"
    p.write_text(LOG)
    with pytest.warns(DataImportWarning, match=r"rs\.log: 1 row\(s\) report #wrong > 0 \(first: line 17, "
                                               r"out-of-place\).*left out of calibration"):
        df = import_nccl_tests(p, catalog=catalog, system="DGX-H100")
    assert (df["wrong"] > 0).sum() == 1
    p.write_text(LOG.replace("       3    20.50", "       0    20.50"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataImportWarning)
        assert (import_nccl_tests(p, catalog=catalog, system="DGX-H100")["wrong"] == 0).all()


def test_a_file_named_twice_is_read_once(shared_datasets, tmp_path, catalog):
    """A file given twice (two overlapping shell globs, a directory and a file in it, a path spelt two ways) was read
    twice: every row doubled, said only as "configurations measured more than once ... each a sample"."""
    p = tmp_path / "rs.log"
    p.write_text(LOG.replace("       3    20.50", "       0    20.50"))
    once = import_paths("nccl-tests", [p], system="DGX-H100", catalog=catalog)
    with pytest.warns(DataImportWarning, match=r"rs\.log: given more than once \(as .*\); read once"):
        twice = import_paths("nccl-tests", [p, tmp_path / ".." / tmp_path.name / "rs.log"], system="DGX-H100",
                             catalog=catalog)
    assert len(twice) == len(once) == 8
    with pytest.warns(DataImportWarning, match=r"rs\.log: given more than once"):
        assert len(import_paths("nccl-tests", [tmp_path, p], system="DGX-H100", catalog=catalog)) == 8
    d = shared_datasets / "llmcompass"
    with pytest.warns(DataImportWarning, match=r"figure5__ab__matmul_A100\.csv: given more than once"):
        both = import_paths("llmcompass", [d, d / "figure5__ab__matmul_A100.csv"], catalog=catalog)
    assert len(both) == len(import_paths("llmcompass", [d], catalog=catalog)) == 42


def test_a_short_data_line_is_counted_once(tmp_path, catalog):
    """A data line cut after its out-of-place algbw (4 sizes, one of them short) was said as "skipped 2 incomplete
    or malformed data line(s)": the line was counted once for its out-of-place and once for its in-place group. It
    is one line; the other three lines' six rows are kept."""
    short = "        4096           512      half     sum      -1    22.00    0.19"
    body = "\n".join(short if line.startswith("        4096") else line for line in LOG.splitlines()) + "\n"
    p = tmp_path / "short.log"
    p.write_text(body)
    with pytest.warns(DataImportWarning) as said:
        df = import_nccl_tests(p, catalog=catalog)
    lines = [str(w.message) for w in said if "incomplete or malformed" in str(w.message)]
    line_no = body.splitlines().index(short) + 1
    assert len(lines) == 1 and f"skipped 1 incomplete or malformed data line(s) (first: line {line_no})" in lines[0], \
        lines
    assert len(df) == 6 and 4096 not in set(df["size_bytes"])
