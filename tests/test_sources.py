"""The sources registry against the real public files: checksums, manifests, pulling, URLs."""

from __future__ import annotations

import shutil
import warnings

import pytest

from hybrid.data.importers import IMPORTERS
from hybrid.data.sources import (
    SourceError,
    get_source,
    load_sources,
    manifest_sha256,
    pull,
    recompute,
    render_toml,
    unlisted_files,
    verify_dir,
)
from hybrid.errors import InvalidInputError


def test_every_source_verifies_against_the_public_files(shared_datasets):
    sources = load_sources()
    readme = (shared_datasets / "README.md").read_text()
    for s in sources.values():
        assert s.local_path.split("/")[0] in readme  # every README folder has an entry and vice versa
        rels = verify_dir(s, shared_datasets / s.local_path)
        assert len(rels) == (len(s.files) or s.file_count) > 0
        assert s.license and s.description
        if s.repository:
            assert len(s.commit) >= 8 and s.commit in readme
        if s.importer:  # one format, or several (a folder of matmul and pointwise tables), comma-separated
            assert all(name.strip() in IMPORTERS for name in s.importer.split(",")), s.importer
    # a folder that importers read names them (LLMCompass's showed "-": two formats read it)
    assert sources["llmcompass"].importer.replace(" ", "").split(",") == ["llmcompass", "llmcompass-pointwise"]
    assert sum(s.file_count for s in sources.values() if s.glob) == 148 + 622


def test_every_importer_file_belongs_to_a_source(shared_datasets):
    """Every file an importer reads lies in a registered source folder; files the registry does not list yet
    (added upstream later) are reported, not a failure: a checksum covers the listed files only."""
    sources = load_sources()
    covered, unlisted = set(), set()
    for s in sources.values():
        root = shared_datasets / s.local_path
        covered |= {(root / r).resolve() for r in verify_dir(s, root)}
        unlisted |= {(root / r).resolve() for r in unlisted_files(s, root)}
    folders = [(shared_datasets / s.local_path).resolve() for s in sources.values()]
    new = []
    for imp in IMPORTERS.values():
        for p in imp.find(shared_datasets):
            p = p.resolve()
            assert p in covered or any(p.is_relative_to(f) for f in folders), p
            if p not in covered:
                assert p in unlisted, p
                new.append(p)
    if new:
        warnings.warn(f"{len(new)} public file(s) not in sources.toml yet (first: {new[0]}); run "
                      "python -m hybrid.data.sources DATA_DIR to add them", stacklevel=1)


def test_a_new_upstream_file_is_reported_not_fatal(shared_datasets, tmp_path):
    mirror = tmp_path / "mirror"
    src = get_source("nccl-tests-alcf")
    shutil.copytree(shared_datasets / src.local_path, mirror / src.local_path)
    new = mirror / src.local_path / "results_polaris" / "all_reduce_output.dat.99"
    new.write_text("# nThread 1 nGpus 1\n")
    xla = get_source("xla-matmul")
    (mirror / xla.local_path).mkdir(parents=True)
    for rel in xla.files:
        shutil.copyfile(shared_datasets / xla.local_path / rel, mirror / xla.local_path / rel)
    (mirror / xla.local_path / "matmul_sm100_B200.csv").write_text("device,b\n")
    assert len(verify_dir(src, mirror / src.local_path)) == src.file_count
    assert unlisted_files(src, mirror / src.local_path) == ["results_polaris/all_reduce_output.dat.99"]
    assert verify_dir(xla, mirror / xla.local_path) == sorted(xla.files)
    assert unlisted_files(xla, mirror / xla.local_path) == ["matmul_sm100_B200.csv"]
    out = pull("nccl-tests-alcf", tmp_path / "out", from_dir=mirror)
    assert not (out / "results_polaris" / "all_reduce_output.dat.99").exists()  # only listed files are pulled
    grown = recompute({src.name: src}, mirror)[src.name]  # the deliberate registry update picks it up
    assert grown.file_count == src.file_count + 1 and "results_polaris/all_reduce_output.dat.99" in grown.files


def test_registry_round_trips_and_recomputes(shared_datasets, tmp_path):
    sources = load_sources()
    p = tmp_path / "s.toml"
    p.write_text(render_toml(sources, "# header"))
    assert load_sources(p) == sources
    assert recompute(sources, shared_datasets, add_new=False) == sources  # checksums are what the files hash to


def test_manifest_is_order_independent_and_sensitive():
    a = manifest_sha256([("b", "2"), ("a", "1")])
    assert a == manifest_sha256([("a", "1"), ("b", "2")])
    assert a != manifest_sha256([("a", "1"), ("b", "3")]) and a != manifest_sha256([("a", "1")])


def test_pull_from_mirror_file_and_glob_sources(shared_datasets, tmp_path):
    out = pull("neusight-amd", tmp_path, from_dir=shared_datasets)
    assert out == tmp_path / "neusight/scripts/asplos/data/dataset_amd"
    assert len(verify_dir(get_source("neusight-amd"), out)) == 4
    out = pull("nccl-tests-alcf", tmp_path, from_dir=shared_datasets)
    assert len(verify_dir(get_source("nccl-tests-alcf"), out)) == 148
    pull("xla-matmul", tmp_path, from_dir=shared_datasets)
    pull("xla-collectives", tmp_path, from_dir=shared_datasets)  # shares xla/ with xla-matmul
    assert {p.name for p in (tmp_path / "xla").iterdir()} == {"matmul_sm90_H100.csv", "collectives_sm90_H100.csv"}
    assert not [p for p in tmp_path.rglob(".pull-*")]


def test_pull_errors_leave_nothing(shared_datasets, tmp_path):
    mirror = tmp_path / "mirror"
    shutil.copytree(shared_datasets / "vidur/data/profiling/network", mirror / "vidur/data/profiling/network")
    (mirror / "vidur/data/profiling/network/a40_pairwise_nvlink/send_recv.csv").unlink()
    with pytest.raises(SourceError, match=r"vidur-network: missing file .*send_recv\.csv"):
        pull("vidur-network", tmp_path / "out", from_dir=mirror)
    assert not (tmp_path / "out/vidur/data/profiling/network").exists()
    shutil.copytree(shared_datasets / "nccl-tests/xxrjun_nccl-tests-cluster", mirror / "nccl-tests/xxrjun_nccl-tests-cluster")
    victim = next((mirror / "nccl-tests/xxrjun_nccl-tests-cluster").rglob("*.log"))
    victim.write_text(victim.read_text().replace("1", "2", 1))
    with pytest.raises(SourceError, match=r"nccl-tests-xxrjun: manifest mismatch"):
        pull("nccl-tests-xxrjun", tmp_path / "out", from_dir=mirror)
    assert not (tmp_path / "out/nccl-tests").exists() or not any((tmp_path / "out/nccl-tests").rglob("*.log"))
    # a file-checksum mismatch names the mirror's file (not the deleted staging copy) and leaves no folder
    shutil.copytree(shared_datasets / "neusight/test-dev", mirror / "neusight/test-dev")
    bad = mirror / "neusight/test-dev/ln.csv"
    bad.write_bytes(bad.read_bytes()[:1000])
    with pytest.raises(SourceError, match=r"checksum mismatch: .*mirror/neusight/test-dev/ln\.csv"):
        pull("neusight-test-dev", tmp_path / "fresh", from_dir=mirror)
    assert not (tmp_path / "fresh").exists()
    with pytest.raises(SourceError, match=r"xla-matmul cannot be downloaded.*--from"):
        pull("xla-matmul", tmp_path / "out")
    for renamed in ("llmcompass", "deepbench-xlsx"):  # files renamed or moved in the public layout
        with pytest.raises(SourceError, match=rf"{renamed} cannot be downloaded file-for-file.*--from"):
            pull(renamed, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(InvalidInputError, match="unknown source 'nope'"):
        pull("nope", tmp_path / "out", from_dir=mirror)


def test_download_urls_are_pinned():
    s = get_source("neusight-train")
    url = s.file_url("collect/bmm/p2.1.0/Tesla P4.csv")
    assert url == ("https://raw.githubusercontent.com/sitar-lab/NeuSight/6945927d9afcca2b9daf021f8395e53edc5b4eef/"
                   "scripts/asplos/data/dataset/train/collect/bmm/p2.1.0/Tesla%20P4.csv")
    assert len(s.urls()) == len(s.files) and all(s.commit in u for u in s.urls())
    g = get_source("nccl-tests-xxrjun")
    assert g.urls() == ["https://codeload.github.com/xxrjun/nccl-tests-cluster/tar.gz/"
                        "455de4f8dee2fa94cd4044a7109fd8c576f9e6c1"]
    assert get_source("xla-matmul").urls() == []  # derived: mirror only


def test_the_sources_table_names_every_column():
    """`hybrid data sources` printed its last column ("derived" on some rows) under no header: each column of the
    table now has one, and the derived sources are the registry's."""
    from cli_run import run_cli

    rc, out, err = run_cli(["data", "sources"])
    assert rc == 0, err
    header, rule, *rows = out.splitlines()
    widths = [len(d) for d in rule.split("  ")]
    starts = [sum(widths[:i]) + 2 * i for i in range(len(widths))]
    names = [header[s:s + w].strip() for s, w in zip(starts, widths, strict=True)]
    assert all(names), names
    assert names[-1] == "derived"
    derived = {r[:starts[1]].strip() for r in rows if r[starts[-1]:].strip() == "yes"}
    assert derived == {s.name for s in load_sources().values() if s.derived}
