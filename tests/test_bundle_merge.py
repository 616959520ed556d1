"""Merging profiler bundles of one device (`hybrid data merge`): rows, duplicates, meta, refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from hybrid.cli.main import cli
from hybrid.data.bundle import load_bundle, merge_bundles, read_meta, write_bundle
from hybrid.data.paths import project_datasets_dir
from hybrid.errors import InvalidInputError
from hybrid.ops.families import family_array

H100 = project_datasets_dir() / "H100-SXM"


def _split(tmp_path: Path) -> tuple[pd.DataFrame, list[Path]]:
    """The committed H100 bundle split into three per-family bundles, as one profiler run per family writes them."""
    table, _ = load_bundle(H100)
    fam = family_array(table["op"])
    text = (H100 / "catalog.toml").read_text()
    meta = read_meta(H100)
    paths = []
    for i, fams in enumerate((("gemm",), ("norm", "softmax"), ("embedding",))):
        part = table[pd.Series(fam).isin(fams).to_numpy()].reset_index(drop=True)
        run_meta = {**{k: v for k, v in meta.items() if k not in ("date", "command", "ceilings_each_run")},
                    "date": f"2026-11-2{i}", "command": f"hybrid profile --only {fams[0]}",
                    "ceilings": {**meta["ceilings"], "mem_bw_gbps": 3000.0 + i}}
        paths.append(write_bundle(tmp_path / f"part{i}", part, f"# run {i}\n" + text, run_meta))
    return table, paths


def test_merge_concatenates_runs_and_keeps_each_runs_meta(tmp_path):
    table, parts = _split(tmp_path)
    sizes = [len(load_bundle(p)[0]) for p in parts]
    path, merged = merge_bundles(parts, tmp_path / "all")
    back, _ = load_bundle(path)
    assert len(back) == len(merged) == sum(sizes)
    assert sorted(back["op"].unique()) == sorted(
        {"gemm", "gemv", "bmm", "linear", "layernorm", "rmsnorm", "batchnorm", "softmax", "embedding_bag"})
    meta = read_meta(path)
    assert meta["date"] == ["2026-11-20", "2026-11-21", "2026-11-22"]
    assert [r["rows_kept"] for r in meta["merged_from"]] == sizes
    assert meta["merged_from"][1]["families"] == ["norm", "softmax"]
    assert meta["ceilings"]["mem_bw_gbps"] == 3000.0  # the first run's
    assert [c["mem_bw_gbps"] for c in meta["ceilings_each_run"]] == [3000.0, 3001.0, 3002.0]
    assert meta["n_rows"] == len(back) and meta["replaced_rows"] == 0
    assert meta["device"] == "H100-SXM"  # shared fields stay scalars
    # the measured times are the parts' own, row for row
    pd.testing.assert_series_equal(back["time_us"], pd.concat([load_bundle(p)[0]["time_us"] for p in parts],
                                                              ignore_index=True), check_names=False)


def test_merging_a_merged_bundle_keeps_every_run(tmp_path):
    """A committed (merged) bundle plus a later run: the per-run lists grow by the new run, not by one entry per
    bundle, so ceilings_each_run still has one entry per profiler run."""
    _, parts = _split(tmp_path)
    first, _ = merge_bundles(parts[:2], tmp_path / "first")
    path, merged = merge_bundles([first, parts[2]], tmp_path / "second")
    meta = read_meta(path)
    assert [c["mem_bw_gbps"] for c in meta["ceilings_each_run"]] == [3000.0, 3001.0, 3002.0]
    assert meta["date"] == ["2026-11-20", "2026-11-21", "2026-11-22"]
    assert [r["runs"] for r in meta["merged_from"]] == [2, 1]
    assert meta["n_rows"] == len(merged) == len(load_bundle(first)[0]) + len(load_bundle(parts[2])[0])
    assert "merged_from" not in {k for k, v in meta.items() if isinstance(v, list) and v and isinstance(v[0], list)}


def test_a_configuration_in_two_bundles_is_an_error_unless_replaced(tmp_path):
    _, parts = _split(tmp_path)
    again, _ = load_bundle(parts[1])
    again = again[again["op"] == "softmax"].reset_index(drop=True)
    timed = [c for c in ("time_us", "time_us_min", "time_us_max", "time_us_std") if c in again.columns]
    again[timed] = again[timed] * 2.0  # measured again, twice as slow: every statistic of the repeats with it
    redo = write_bundle(tmp_path / "redo", again, (H100 / "catalog.toml").read_text(), {"date": "later"})
    with pytest.raises(InvalidInputError, match=r"configuration\(s\) are in more than one bundle.*--replace"):
        merge_bundles([*parts, redo], tmp_path / "bad")
    assert not (tmp_path / "bad").exists()  # nothing half-written
    path, merged = merge_bundles([*parts, redo], tmp_path / "ok", on_duplicate="last")
    soft = merged[merged["op"] == "softmax"].reset_index(drop=True)
    assert len(soft) == len(again)
    assert soft["time_us"].to_numpy() == pytest.approx(again["time_us"].to_numpy())  # the later measurement
    meta = read_meta(path)
    assert meta["replaced_rows"] == len(again)
    assert meta["merged_from"][1]["rows_kept"] == meta["merged_from"][1]["rows_in"] - len(again)


def test_merge_refuses_other_devices_catalogs_and_bad_arguments(tmp_path):
    _, parts = _split(tmp_path)
    one, _ = load_bundle(parts[0])
    other = write_bundle(tmp_path / "a100", one.assign(device="A100-SXM-40GB"), "", {})
    with pytest.raises(InvalidInputError, match="different devices.*A100.*H100-SXM"):
        merge_bundles([parts[0], other], tmp_path / "x")
    changed = write_bundle(tmp_path / "cat", one.iloc[:3], '[devices.H100-SXM]\nmem_bw_gbps = 3000\n', {},)
    with pytest.raises(InvalidInputError, match="catalog.toml entries differ"):
        merge_bundles([parts[0], changed], tmp_path / "x")
    with pytest.raises(InvalidInputError, match="at least two bundles"):
        merge_bundles([parts[0]], tmp_path / "x")
    with pytest.raises(InvalidInputError, match="on_duplicate"):
        merge_bundles(parts, tmp_path / "x", on_duplicate="first")
    with pytest.raises(InvalidInputError, match="is one of the bundles"):
        merge_bundles(parts, parts[0])
    with pytest.raises(InvalidInputError, match="not a bundle directory"):
        merge_bundles([parts[0], tmp_path / "missing"], tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_cli_merge(tmp_path):
    _, parts = _split(tmp_path)
    res = CliRunner().invoke(cli, ["data", "merge", *map(str, parts), "-o", str(tmp_path / "m"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["rows"] == sum(r["rows_kept"] for r in out["merged_from"]) and out["replaced_rows"] == 0
    res = CliRunner().invoke(cli, ["data", "merge", *map(str, parts), "-o", str(tmp_path / "m")])
    assert isinstance(res.exception, InvalidInputError) and "already exists" in str(res.exception)


def test_readers_of_meta_accept_a_merged_bundle(tmp_path):
    """A merged bundle keeps ``options`` per run: run_options lists them, and the trace CLI's thread check reads
    every run's thread count instead of failing on the list (it did on datasets/H200)."""
    from types import SimpleNamespace

    from hybrid.cli.trace import thread_mismatch
    from hybrid.data.bundle import run_options

    _, parts = _split(tmp_path)
    path, _ = merge_bundles(parts, tmp_path / "m")
    opts = run_options(read_meta(path))
    assert len(opts) == 3 and all(isinstance(o, dict) for o in opts)
    assert run_options({"options": {"threads": 1}}) == [{"threads": 1}] and run_options({}) == []
    meta = read_meta(path)
    meta["options"] = [{**o, "threads": 1} for o in opts]
    (path / "meta.json").write_text(json.dumps(meta))
    traced = [SimpleNamespace(meta={"hybrid_torch_threads": "2"})]
    assert "profiled with 1" in thread_mismatch(traced, str(path))
    assert thread_mismatch([SimpleNamespace(meta={"hybrid_torch_threads": "1"})], str(path)) is None
    assert thread_mismatch(traced, str(project_datasets_dir() / "H200")) is None  # GPU runs: threads not set


def test_two_runs_on_one_cpu_merge_despite_their_measured_ceilings(tmp_path):
    """Each CPU profile run measures the machine's ceilings anew (a little differently): runs of the same CPU
    merge, keeping the first run's catalog entry and saying so; another CPU (another arch) still does not."""
    cpu = project_datasets_dir() / "cpu-amd-epyc-1c"
    table, _ = load_bundle(cpu)
    text = (cpu / "catalog.toml").read_text()
    fam = family_array(table["op"])
    a = write_bundle(tmp_path / "a", table[fam == "gemm"].reset_index(drop=True), text, {"date": "1"})
    other = text.replace("mem_bw_gbps = 27.1029", "mem_bw_gbps = 26.5").replace("kernel_latency_us = 1.261",
                                                                               "kernel_latency_us = 1.3")
    # the machine's MemTotal moves by kilobytes between boots: another mem_gib in the last digits
    other = re.sub(r"mem_gib = ([0-9.]+)", lambda m: f"mem_gib = {float(m.group(1)) - 0.0003:.4f}", other)
    assert other != text and "mem_gib" in other
    b = write_bundle(tmp_path / "b", table[fam == "embedding"].reset_index(drop=True), other, {"date": "2"})
    with pytest.warns(UserWarning, match="ceilings slightly differently"):
        path, merged = merge_bundles([a, b], tmp_path / "ab")
    assert len(merged) == int((fam == "gemm").sum() + (fam == "embedding").sum())
    assert (path / "catalog.toml").read_text() == text
    c = write_bundle(tmp_path / "c", table[fam == "embedding"].reset_index(drop=True),
                     text.replace('arch = "x86_64"', 'arch = "aarch64"'), {"date": "3"})
    with pytest.raises(InvalidInputError, match="catalog.toml entries differ"):
        merge_bundles([a, c], tmp_path / "ac")


def test_a_cpus_collective_run_merges_with_its_other_runs(tmp_path):
    """Only the collective sweep writes the CPU's gloo system, and every run measures the shared memory bandwidth
    anew: a per-family profile of one CPU still merges (the run with the system gives the merged catalog)."""
    cpu = project_datasets_dir() / "cpu-amd-epyc-1c"
    table, _ = load_bundle(cpu)
    text = (cpu / "catalog.toml").read_text()
    head, _, systems = text.partition("[systems.")
    assert systems, "the committed CPU bundle has its gloo system"
    fam = family_array(table["op"])
    kernels = write_bundle(tmp_path / "k", table[fam == "gemm"].reset_index(drop=True),
                           head.replace("mem_bw_gbps = 27.1029", "mem_bw_gbps = 26.5"),
                           {"date": "1", "ceilings": {"mem_bw_gbps": 26.5}})
    coll = write_bundle(tmp_path / "c", table[fam == "collective"].reset_index(drop=True), text,
                        {"date": "2", "ceilings": {"mem_bw_gbps": 27.1029}})
    with pytest.warns(UserWarning, match="keeps those of"):
        path, merged = merge_bundles([kernels, coll], tmp_path / "kc")
    assert len(merged) == int((fam == "gemm").sum() + (fam == "collective").sum())
    assert (path / "catalog.toml").read_text() == text  # the run that has the system
    assert read_meta(path)["ceilings"] == read_meta(coll)["ceilings"]  # the same run's, in meta.json too
    _, cat = load_bundle(path)
    assert any(k.startswith("cpu-amd-epyc-1c") for k in cat.systems)
    # the same ceilings, only the system missing from one run: nothing to warn about
    same = write_bundle(tmp_path / "k2", table[fam == "gemm"].reset_index(drop=True), head, {"date": "3"})
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        merge_bundles([same, coll], tmp_path / "k2c")


def test_force_replaces_a_bundle_but_never_another_directory(tmp_path):
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "notes.txt").write_text("mine")
    _, paths = _split(tmp_path)
    with pytest.raises(InvalidInputError, match="is not a bundle .*notes.txt"):
        merge_bundles(paths[:2], victim, force=True)
    assert (victim / "notes.txt").read_text() == "mine"
    first, _ = merge_bundles(paths[:2], tmp_path / "m")
    merge_bundles(paths[1:], first, force=True)  # a bundle: replaced


def test_collective_runs_of_two_process_counts_merge(tmp_path):
    """`--ranks 2` and `--ranks 4` runs of one CPU (or an interrupted run and its rest) write gloo systems of 2 and 4
    processes per node: the merge was refused ('catalog.toml entries differ'). The merged system holds the most
    processes of any run, so the 4-process rows fit it."""
    cpu = project_datasets_dir() / "cpu-amd-epyc-1c"
    table, _ = load_bundle(cpu)
    text = (cpu / "catalog.toml").read_text()
    coll = table[family_array(table["op"]) == "collective"]
    two = write_bundle(tmp_path / "x2", coll[coll["n_ranks"] == 2].reset_index(drop=True),
                       text.replace("gpus_per_node = 4", "gpus_per_node = 2"), {"date": "1"})
    four = write_bundle(tmp_path / "x4", coll[coll["n_ranks"] == 4].reset_index(drop=True), text, {"date": "2"})
    path, merged = merge_bundles([two, four], tmp_path / "all")
    back, cat = load_bundle(path)
    assert len(back) == len(coll) and cat.systems["cpu-amd-epyc-1c-gloo"].gpus_per_node == 4
    assert (path / "catalog.toml").read_text().startswith("#")  # the header comment kept


def test_two_runs_on_a_gpu_the_catalog_does_not_know_merge(tmp_path):
    """On a GPU the catalog does not know (or with a --device-name of its own), `hybrid profile` writes the GPU's
    entry with its measured ceilings, which differ run by run: the per-family bundles of a gpu-session could not be
    merged ('catalog.toml entries differ'). A GPU entry of the catalog's own, changed, is still refused."""
    from hybrid.data.bundle import catalog_toml

    table, _ = load_bundle(H100)
    fam = family_array(table["op"])
    table = table.assign(device="lab-gpu")

    def entry(peak: float, bw: float, sms: int = 132, source: str = "measured by hybrid profile on 2026-12-06: "
                                                                       "lab-gpu (not in the catalog)") -> dict:
        return {"vendor": "nvidia", "kind": "gpu", "arch": "sm_90", "peak_tflops": {"fp32": peak, "bf16": 10 * peak},
                "mem_bw_gbps": bw, "mem_gib": 79.2, "l2_mib": 50.0, "sms": sms, "kernel_latency_us": 5.1,
                "aliases": ["lab-gpu"], "source": source}

    a = write_bundle(tmp_path / "a", table[fam == "gemm"].reset_index(drop=True),
                     catalog_toml({"lab-gpu": entry(50.1, 3000.2)}, {}), {"date": "1"})
    b = write_bundle(tmp_path / "b", table[fam == "norm"].reset_index(drop=True),
                     catalog_toml({"lab-gpu": entry(50.3, 2990.7)}, {}), {"date": "2"})
    with pytest.warns(UserWarning, match="ceilings slightly differently"):
        _, merged = merge_bundles([a, b], tmp_path / "ab")
    assert len(merged) == int((fam == "gemm").sum() + (fam == "norm").sum())
    other = write_bundle(tmp_path / "c", table[fam == "norm"].reset_index(drop=True),
                         catalog_toml({"lab-gpu": entry(50.3, 2990.7, sms=108)}, {}), {"date": "3"})
    with pytest.raises(InvalidInputError, match="catalog.toml entries differ"):  # another GPU (SM count)
        merge_bundles([a, other], tmp_path / "ac")
    user = [write_bundle(tmp_path / f"u{i}", table[fam == f].reset_index(drop=True),
                         catalog_toml({"lab-gpu": entry(50.0 + i, 3000.0, source="datasheet")}, {}), {"date": str(i)})
            for i, f in enumerate(("gemm", "norm"))]
    with pytest.raises(InvalidInputError, match="catalog.toml entries differ"):  # not a profiler measurement
        merge_bundles(user, tmp_path / "uu")


def test_an_existing_output_is_refused_before_the_bundles_are_read(tmp_path):
    """Merging into an existing bundle without --force read and compared every bundle first: two CPU runs said
    'warning: the runs measured ...'s ceilings slightly differently' and only then that the output exists. The
    output is checked first: the error alone, no warning."""
    import warnings

    cpu = project_datasets_dir() / "cpu-amd-epyc-1c"
    table, _ = load_bundle(cpu)
    text = (cpu / "catalog.toml").read_text()
    fam = family_array(table["op"])
    a = write_bundle(tmp_path / "a", table[fam == "gemm"].reset_index(drop=True), text, {"date": "1"})
    b = write_bundle(tmp_path / "b", table[fam == "embedding"].reset_index(drop=True),
                     text.replace("mem_bw_gbps = 27.1029", "mem_bw_gbps = 26.5"), {"date": "2"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the ceilings warning would be raised before the output's error
        with pytest.raises(InvalidInputError, match="already exists and is not empty"):
            merge_bundles([a, b], _existing(tmp_path))


def _existing(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    return out
