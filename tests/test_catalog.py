"""The hardware catalog: every entry validates, every public data set's device/system names resolve, user
override files add and replace entries, and bad names/files fail with clear errors."""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import re
import tomllib
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid.errors import InvalidInputError, UnknownDeviceError
from hybrid.hardware.catalog import Catalog, default_catalog, normalize_name
from hybrid.hardware.cpu import LOCAL_CPU_KEY, describe_local_cpu, flops_per_cycle
from hybrid.hardware.device import DEVICE_REQUIRED, SYSTEM_REQUIRED, Device

RAW_DEVICES = tomllib.loads(resources.files("hybrid.hardware").joinpath("devices.toml").read_text())["devices"]
RAW_SYSTEMS = tomllib.loads(resources.files("hybrid.hardware").joinpath("systems.toml").read_text())["systems"]

#: Devices the brief requires by key (datasheet entries).
REQUIRED_DEVICES = (
    "P4", "P100-PCIE-16GB", "V100-PCIE-32GB", "V100-SXM2-32GB", "T4", "A10", "A40", "L4", "A100-PCIE-40GB",
    "A100-PCIE-80GB", "A100-SXM4-40GB", "A100-SXM4-80GB", "H100-PCIE", "H100-SXM", "H200", "B200", "GB200",
    "MI100", "MI210", "MI250X", "MI300X", "MI355X", "M40", "TitanX", "TitanX-Pascal", "TitanXp", "GTX-1080Ti",
    "MI25", "Vega-FE", "B300", "GB300", "H20", "L40S", "L40", "H800-SXM", "A800-SXM4-80GB", "H100-NVL", "H200-NVL",
    "MI300A", "MI325X", "MI350X", "V100S-PCIE-32GB", "MI50", "MI60", "B100", "A16", "A10G",
)

#: MLPerf accelerators that are not GPUs (and "N/A" for CPU-only runs); the predictor targets GPU systems, so
#: these stay unresolved on purpose.
NON_GPU_ACCELERATORS = re.compile(r"^(TPU|Ascend|Graphcore|Habana|N/A$)", re.IGNORECASE)


# ------------------------------------------------------------------------------------------------ entry validity
@pytest.mark.parametrize("key", sorted(RAW_DEVICES))
def test_device_entry_is_complete_and_positive(key: str, catalog) -> None:
    raw = RAW_DEVICES[key]
    assert not [f for f in DEVICE_REQUIRED if f not in raw]
    dev = catalog.devices[key]
    assert dev.kind == "gpu" and dev.vendor in ("nvidia", "amd")
    assert "fp32" in dev.peak_flops
    assert all(v > 0 for v in dev.peak_flops.values())
    for field in ("mem_bw", "mem_capacity", "l2_cache", "num_sms", "clock_mhz", "tdp_w", "pcie_gen"):
        assert getattr(dev, field) > 0, field
    assert dev.arch.startswith("sm_" if dev.vendor == "nvidia" else "gfx")
    assert len(dev.source) > 20


@pytest.mark.parametrize("key", sorted(RAW_DEVICES))
def test_device_peaks_are_ordered_like_real_hardware(key: str, catalog) -> None:
    """Cheap physics checks that catch unit slips (TFLOPS vs GFLOPS, sparse vs dense, GB vs GiB)."""
    dev = catalog.devices[key]
    p = {k: v / 1e12 for k, v in dev.peak_flops.items()}
    assert 3 <= p["fp32"] <= 200  # every catalog GPU lies in this range of FP32 TFLOP/s
    assert p.get("fp64", 0) <= p["fp32"] * 1.01
    for low, high in (("tf32", "fp16"), ("fp16", "fp8"), ("bf16", "fp8")):
        if low in p and high in p:
            assert p[low] <= p[high] * 1.01, (low, high)
    if "tf32" in p:
        assert p["tf32"] >= p["fp32"]
    # dense tensor-core fp16 is at most 32x the fp32 rate on every generation so far (Blackwell: 28x)
    assert p.get("fp16", p["fp32"]) <= 32 * p["fp32"]
    assert 100e9 <= dev.mem_bw <= 10e12
    assert 8 * 2**30 <= dev.mem_capacity <= 300 * 2**30
    # FP32 rate implied by the clock: peak / (SMs x clock) FLOP per SM per cycle is a power-of-two-ish 64..512
    per_sm_cycle = dev.peak_flops["fp32"] / (dev.num_sms * dev.clock_mhz * 1e6)
    assert 60 <= per_sm_cycle <= 520, per_sm_cycle


def test_fp64_is_the_dgemm_rate_where_tensor_or_matrix_units_run_it(catalog) -> None:
    """FP64 GEMMs run on FP64 tensor cores (A100, H100, H200) and matrix cores (MI200, MI300) at twice the vector
    rate; the catalog lists the DGEMM rate and keeps the vector one in ``notes``. Pricing an A100 DGEMM at the
    vector 9.7 TFLOP/s made it 2x slow."""
    checked = 0
    for key, dev in catalog.devices.items():
        found = re.search(r"fp64 = (?:tensor-core|matrix) \(DGEMM\) rate; vector ([0-9]+(?:\.[0-9]+)?)", dev.notes)
        if found:
            checked += 1
            assert dev.peak("fp64") / 1e12 == pytest.approx(2 * float(found.group(1)), rel=0.02), key
    assert checked >= 20
    # B200: the HGX B200 per-GPU FP64 / FP64 Tensor Core figure of NVIDIA's current spec (37; 40 was the 2024 launch one)
    for key, rate in (("A100-SXM4-80GB", 19.5), ("H100-SXM", 67), ("MI300X", 163.4), ("V100-SXM2-32GB", 7.8),
                      ("B200", 37)):
        assert catalog.device(key).peak("fp64") / 1e12 == pytest.approx(rate), key


def test_required_devices_present(catalog) -> None:
    missing = [k for k in REQUIRED_DEVICES if k not in catalog.devices]
    assert not missing


@pytest.mark.parametrize("key", sorted(RAW_SYSTEMS))
def test_system_entry_is_complete(key: str, catalog) -> None:
    raw = RAW_SYSTEMS[key]
    assert not [f for f in SYSTEM_REQUIRED if f not in raw]
    sys_ = catalog.systems[key]
    dev = catalog.system_device(sys_)
    assert dev.kind == "gpu"
    assert sys_.gpus_per_node >= 1 and sys_.intra_bw > 0 and sys_.max_nodes >= 1
    # one GPU cannot push more into its node than its own links (or PCIe when it has none) carry
    assert sys_.intra_bw <= max(dev.link_bw, 64e9) * 1.001
    if sys_.max_nodes > 1:
        assert 0 < sys_.inter_bw < sys_.intra_bw
    assert len(sys_.source) > 20


def test_known_values_spot_check(catalog) -> None:
    """A few datasheet numbers, converted to SI units by the loader."""
    a100 = catalog.device("A100-SXM4-80GB")
    assert a100.peak("bf16") == pytest.approx(312e12)
    assert a100.mem_bw == pytest.approx(2039e9)
    assert a100.mem_capacity == 80 * 2**30
    assert catalog.device("T4").peak("fp16") == pytest.approx(65e12)
    assert catalog.device("P100-PCIE-16GB").peak("fp16") == pytest.approx(2 * 9.3e12, rel=0.01)
    # Pascal consumer/inference parts run fp16 at 1/64 of fp32
    p4 = catalog.device("P4")
    assert p4.peak("fp16") == pytest.approx(p4.peak("fp32") / 64, rel=0.01)
    # dense, not sparse: H100 SXM bf16 989 TFLOP/s, MI300X 1307
    assert catalog.device("H100-SXM").peak("bf16") == pytest.approx(989.4e12)
    assert catalog.device("MI300X").peak("bf16") == pytest.approx(1307.4e12)
    # bf16 on a GPU without bf16 hardware is not credited with the tensor-core fp16 rate
    v100 = catalog.device("V100-SXM2-32GB")
    assert v100.peak("bf16") == v100.peak("fp32") < v100.peak("fp16")
    # tf32 falls back to fp32 where the hardware has none
    assert catalog.device("T4").peak("tf32") == catalog.device("T4").peak("fp32")
    dgx = catalog.system("DGX-A100")
    assert (dgx.gpus_per_node, dgx.intra_bw, dgx.inter_bw) == (8, 300e9, 25e9)
    assert catalog.system("GB200-NVL72").gpus_per_node == 72


def test_aliases_unique_after_normalisation() -> None:
    owners: dict[str, str] = {}
    for key, raw in RAW_DEVICES.items():
        for name in (key, *raw.get("aliases", ())):
            norm = normalize_name(name)
            assert owners.setdefault(norm, key) == key, f"{name!r}: {owners[norm]} vs {key}"
    sys_owners: dict[str, str] = {}
    for key, raw in RAW_SYSTEMS.items():
        for name in (key, *raw.get("aliases", ())):
            norm = normalize_name(name)
            assert sys_owners.setdefault(norm, key) == key, f"{name!r}: {sys_owners[norm]} vs {key}"


def test_duplicate_alias_in_user_file_is_rejected(tmp_path: Path) -> None:
    f = tmp_path / "dup.toml"
    f.write_text('[devices.MyGPU]\nvendor="nvidia"\nkind="gpu"\npeak_tflops={fp32=10}\nmem_bw_gbps=500\n'
                 'mem_gib=16\nsource="test"\naliases=["Tesla T4"]\n')
    with pytest.raises(InvalidInputError, match="claimed by both"):
        Catalog.load([f])


# ------------------------------------------------------------------------------------------------ name resolution
@pytest.mark.parametrize(("name", "key"), [
    ("Tesla T4", "T4"), ("Tesla_P100-PCIE-16GB", "P100-PCIE-16GB"), ("NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"),
    ("NVIDIA_A100-SXM4-40GB", "A100-SXM4-40GB"), ("sm_90", "H100-SXM"), ("NVIDIA H100 80GB HBM3", "H100-SXM"),
    ("NVIDIA H200", "H200"), ("NVIDIA B200", "B200"), ("sm_100_B200", "B200"), ("gfx942", "MI300X"),
    ("gfx950", "MI355X"), ("gfx908", "MI100"), ("gfx90a", "MI210"), ("AMD_Instinct_MI250", "MI250"),
    ("NV_TitanX_Pascal", "TitanX-Pascal"), ("NV_TitanXp", "TitanXp"), ("NV_TitanX", "TitanX"),
    ("AMD_VegaFE", "Vega-FE"), ("a100", "A100-SXM4-80GB"), ("a40", "A40"),
    ("NVIDIA A100-SXM4-80GB (400W)", "A100-SXM4-80GB"), ("NVIDIA A100-SXM4-80GB(400W)", "A100-SXM4-80GB"),
    ("nvidia  a100-pcie-40gb", "A100-PCIE-40GB"),
    # issue 13: 2020-2025 data-center GPUs by the strings tools print
    ("sm_103", "B300"), ("NVIDIA B300 SXM6 AC", "B300"), ("NVIDIA GB300", "GB300"), ("sm_120", "RTX-PRO-6000-Blackwell"),
    ("NVIDIA H20", "H20"), ("NVIDIA L40S", "L40S"), ("NVIDIA L40", "L40"), ("NVIDIA H800", "H800-SXM"),
    ("NVIDIA H800 PCIe", "H800-PCIE"), ("NVIDIA A800-SXM4-80GB", "A800-SXM4-80GB"), ("NVIDIA A800 80GB PCIe", "A800-PCIE-80GB"),
    ("NVIDIA H100 NVL", "H100-NVL"), ("NVIDIA H200 NVL", "H200-NVL"), ("NVIDIA GH200 480GB", "GH200"),
    ("gfx942:sramecc+:xnack-", "MI300X"), ("gfx950:sramecc+:xnack-", "MI355X"), ("gfx90a:sramecc+:xnack-", "MI210"),
    ("AMD Instinct MI300A", "MI300A"), ("AMD Instinct MI325X", "MI325X"), ("AMD Instinct MI350X", "MI350X"),
    ("Tesla V100S-PCIE-32GB", "V100S-PCIE-32GB"), ("Tesla V100-PCIE-32GB", "V100-PCIE-32GB"), ("NVIDIA B100", "B100"),
    ("AMD Instinct MI50", "MI50"), ("gfx906:sramecc+:xnack-", "MI50"), ("Radeon Instinct MI60", "MI60"), ("NVIDIA A16", "A16"),
    ("NVIDIA A10G", "A10G"), ("NVIDIA A10", "A10"), ("Tesla P100-SXM2-16GB", "P100-SXM2-16GB"),
    ("Tesla P100-PCIE-16GB", "P100-PCIE-16GB"), ("NVIDIA RTX A5000", "RTX-A5000"), ("NVIDIA GeForce RTX 3080", "RTX-3080"),
    ("NVIDIA GeForce RTX 4080", "RTX-4080"),  # AWS's variant is not the A10 (80 SMs, half-rate tensor cores)
    # compute capabilities as compilers and XLA print them: the data-center part of each target
    ("sm_80", "A100-SXM4-80GB"), ("sm_86", "A10"), ("sm_89", "L4"), ("sm_75", "T4"), ("sm_70", "V100-SXM2-16GB"),
    ("sm_90a", "H100-SXM"), ("sm_100a", "B200"), ("sm_103a", "B300"), ("sm_120a", "RTX-PRO-6000-Blackwell"),
])
def test_resolve_device_aliases(catalog, name: str, key: str) -> None:
    assert catalog.resolve_device(name) == key


@pytest.mark.parametrize(("name", "key"), [
    ("a100_dgx", "Vidur-A100-DGX"), ("a100_pairwise_nvlink", "Vidur-A100-pairwise-NVLink"),
    ("a40_pairwise_nvlink", "Vidur-A40-pairwise-NVLink"), ("xla-h100x8", "XLA-H100x8"), ("DGX A100", "DGX-A100"),
    ("DGX-2 (V100)", "DGX-2"), ("polaris", "Polaris"), ("Sophia", "Sophia"), ("sirius", "Sirius"),
    ("example-cluster01", "xxrjun-H100-NDR"), ("GB200 NVL72", "GB200-NVL72"),
    ("GB300 NVL72", "GB300-NVL72"), ("HGX B300", "HGX-B300"), ("HGX B100", "HGX-B100"), ("HGX H20", "HGX-H20"),
    ("AMD Instinct MI325X Platform", "MI325X-Platform"), ("MI355X 8-GPU", "MI355X-Platform"),
])
def test_resolve_system_aliases(catalog, name: str, key: str) -> None:
    assert catalog.resolve_system(name) == key


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(sorted(RAW_DEVICES)), data=st.data())
def test_any_spelling_of_an_alias_resolves(catalog, key: str, data) -> None:
    """Case, separators and a vendor prefix never change which device a name means (a vendor word keeps a
    separator after it: ``NVIDIA A10``, not ``NVIDIAA10``)."""
    name = data.draw(st.sampled_from([key, *RAW_DEVICES[key].get("aliases", ())]))
    sep = data.draw(st.sampled_from(["-", "_", " ", ""]))
    head = re.match(r"(?i)((nvidia|amd|tesla|geforce|radeon|instinct)[\s_-]+)*", name).group(0)
    spelled = head + re.sub(r"[\s_\-]+", sep, name[len(head):])
    spelled = data.draw(st.sampled_from([spelled.upper(), spelled.lower(), spelled]))
    prefix = data.draw(st.sampled_from(["", "NVIDIA " if RAW_DEVICES[key]["vendor"] == "nvidia" else "AMD "]))
    assert catalog.resolve_device(prefix + spelled) == key


@pytest.mark.parametrize(("name", "close"), [("H900", "H100-SXM"), ("A100-SXM4-60GB", "A100-SXM4-40GB"),
                                             ("MI310X", "MI300X"), ("Tesla V100-PCIE-64GB", "V100-PCIE-32GB")])
def test_unknown_device_lists_close_names(catalog, name: str, close: str) -> None:
    with pytest.raises(UnknownDeviceError) as info:
        catalog.device(name)
    msg = str(info.value)
    assert repr(name) in msg and close in msg and "HYBRID_CATALOG" in msg


@pytest.mark.parametrize(("name", "key"), [
    # MLPerf v3.0+ and cloud spellings: a memory size, a memory kind, packaging words around the GPU's name
    ("NVIDIA B200-SXM-180GB", "B200"), ("NVIDIA B300-SXM-288GB", "B300"), ("AMD MI300X-192GB", "MI300X"),
    ("AMD Instinct MI300X 192GB HBM3", "MI300X"), ("AMD MI325X-256GB", "MI325X"), ("MI355X 288GB HBM3E", "MI355X"),
    ("NVIDIA GH200 Grace Hopper Superchip 96GB", "GH200"), ("NVIDIA GB200 NVL72", "GB200"),
    # another memory configuration with its own entry, found by the size the name states
    ("NVIDIA GH200 Grace Hopper Superchip 144GB", "GH200-144GB"), ("NVIDIA GH200-GraceHopper-Superchip-144GB", "GH200-144GB"),
    ("NVIDIA H200-SXM-141GB", "H200"),
    # the SXM5 form factor spelled out, as for the H100 (NVIDIA's GPU feature discovery: NVIDIA-H200-SXM5-141GB)
    ("NVIDIA H200-SXM5-141GB", "H200"), ("NVIDIA-H200-SXM5-141GB", "H200"),
    # architecture and marketing words some result tables put around the name
    ("NVIDIA Blackwell B200-SXM-180GB", "B200"), ("NVIDIA Hopper H100 80GB HBM3", "H100-SXM"),
    ("NVIDIA H100 Tensor Core GPU", "H100-SXM"), ("NVIDIA Ampere A100-SXM4-80GB", "A100-SXM4-80GB"),
    ("Tesla V100-SXM2-32GB GPU", "V100-SXM2-32GB"), ("AMD Instinct MI300X Accelerator", "MI300X"),
    # an SR-IOV virtual function, as a cloud VM's driver names the GPU
    ("AMD Instinct MI300X VF", "MI300X"), ("AMD Instinct MI325X VF", "MI325X"),
    # the baseboard or system the GPU string names it by
    ("NVIDIA HGX H100 80GB", "H100-SXM"), ("NVIDIA HGX B200", "B200"), ("NVIDIA DGX H200", "H200"),
    ("NVIDIA HGX H20 96GB", "H20"),
])
def test_names_with_memory_and_packaging_words_resolve(catalog, name: str, key: str) -> None:
    assert catalog.resolve_device(name) == key


@pytest.mark.parametrize(("name", "part"), [("NVIDIA H100-SXM5-64GB", "H100-SXM"),
                                            ("NVIDIA GH200 Grace Hopper Superchip 288GB", None),
                                            ("A100-SXM 16GB", None), ("NVIDIA B200-SXM-96GB", "B200"),
                                            ("NVIDIA H20 141GB", "H20")])
def test_a_stated_memory_size_must_match_the_part(catalog, name: str, part: str | None) -> None:
    # the loose match drops the size only when it agrees with the catalog part's capacity (a 64 GB H100 is
    # another memory configuration, with another bandwidth, than the 80 GB one)
    assert catalog.resolve_device(name, missing_ok=True) is None
    with pytest.raises(UnknownDeviceError, match="unknown device") as exc:
        catalog.device(name)
    if part is not None:  # the error names the part and its configuration, and how to add the missing one
        gib = catalog.devices[part].mem_capacity / 2**30
        assert f"{part} is in the catalog with {gib:g} GiB" in str(exc.value)
        assert "not in this memory configuration" in str(exc.value) and "HYBRID_CATALOG" in str(exc.value)


def test_unknown_system_raises(catalog) -> None:
    with pytest.raises(UnknownDeviceError, match="unknown system 'DGX-Z100'.*DGX"):
        catalog.system("DGX-Z100")
    assert catalog.resolve_system("DGX-Z100", missing_ok=True) is None
    assert "nonsense-gpu" not in catalog and "Tesla T4" in catalog


# ------------------------------------------------------------------------------------------------ public data sets
def _csv_column_values(path: Path, column: str) -> set[str]:
    with path.open(newline="", encoding="utf-8", errors="replace") as fh:
        lines = (line for line in fh if not line.startswith("#"))
        reader = csv.DictReader(lines)
        if reader.fieldnames is None or column not in reader.fieldnames:
            return set()
        return {row[column] for row in reader if row.get(column)}


@functools.cache
def _dataset_device_names(root: Path) -> dict[str, set[str]]:
    """Every device string the public data sets use, with the files that use it (scanned once per session)."""
    found: dict[str, set[str]] = {}

    def add(name: str, where: Path) -> None:
        found.setdefault(name.strip(), set()).add(str(where.relative_to(root)))

    # NeuSight: `Device` column of every collection (and the per-GPU file names), `gpu` of the e2e labels
    for path in (root / "neusight").rglob("*.csv"):
        for v in _csv_column_values(path, "Device") | _csv_column_values(path, "gpu"):
            add(v, path)
        if "collect" in path.parts and path.parent.name.startswith("p2"):
            add(path.stem, path)
    for path in (root / "xla").glob("*.csv"):
        for v in _csv_column_values(path, "device"):
            add(v, path)
    for path in (root / "deepbench").glob("*_tidy.csv"):
        for v in _csv_column_values(path, "gpu"):
            add(v, path)
    for path in (root / "mlperf").glob("*.csv"):
        for v in _csv_column_values(path, "accelerator"):
            add(v, path)
    for path in (root / "published").glob("*.csv"):
        for v in _csv_column_values(path, "gpu"):
            add(v, path)
    # nccl-tests: "#  Rank  0 Group  0 Pid ... device  0 [0x07] NVIDIA A100-SXM4-40GB"
    rank_line = re.compile(r"^#\s+Rank\s+\d+.*?device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$")
    for path in (root / "nccl-tests").rglob("*"):
        if not path.is_file() or path.suffix in (".csv", ".md", ".txt") or path.name == "nodes.dat":
            continue
        with path.open(encoding="utf-8", errors="replace") as fh:
            for i, line in enumerate(fh):
                m = rank_line.match(line)
                if m:
                    add(m.group(1), path)
                    break  # one header line per file is enough: all ranks of a run share the GPU model
                if i > 60:
                    break
    # Vidur compute folders are device names; LLMCompass file names end in the device tag
    for path in (root / "vidur" / "data" / "profiling" / "compute").iterdir():
        add(path.name, path)
    for path in (root / "llmcompass").glob("*.csv"):
        add(path.stem.rsplit("_", 1)[-1], path)
    return found


def test_every_dataset_device_name_resolves(shared_datasets: Path, catalog) -> None:
    names = _dataset_device_names(shared_datasets)
    # the scan really read the files (guards against a silently empty walk)
    for expected in ("Tesla P4", "sm_90", "NV_TitanXp", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "a100",
                     "AMD Instinct MI210", "MI210"):
        assert expected in names, expected
    unresolved = {n: sorted(w)[:2] for n, w in names.items()
                  if not NON_GPU_ACCELERATORS.match(n) and catalog.resolve_device(n, missing_ok=True) is None}
    assert not unresolved, f"device names in the public data with no catalog entry: {unresolved}"


def test_dataset_device_names_map_to_the_right_generation(shared_datasets: Path, catalog) -> None:
    """Resolution is not only non-empty but right: the architecture in the name matches the entry."""
    names = _dataset_device_names(shared_datasets)
    arch_hint = {"P4": "sm_61", "P100": "sm_60", "V100": "sm_70", "T4": "sm_75", "A100": "sm_80", "H100": "sm_90",
                 "MI100": "gfx908", "MI210": "gfx90a", "MI25": "gfx900"}
    checked = 0
    for name in names:
        if NON_GPU_ACCELERATORS.match(name):
            continue
        for hint, arch in arch_hint.items():
            if re.search(rf"(?<![0-9A-Za-z]){hint}(?![0-9])", name, re.IGNORECASE):
                assert catalog.device(name).arch == arch, name
                checked += 1
    assert checked >= 20


def test_dataset_system_names_resolve(shared_datasets: Path, catalog) -> None:
    network = shared_datasets / "vidur" / "data" / "profiling" / "network"
    folders = [p.name for p in network.iterdir() if p.is_dir()]
    clusters = [p.name for p in (shared_datasets / "nccl-tests" / "argonne-lcf_alcf-nccl-tests").iterdir()]
    clusters += [p.name for p in (shared_datasets / "nccl-tests" / "xxrjun_nccl-tests-cluster" / "benchmarks").iterdir()]
    systems = set()
    for path in (shared_datasets / "published").glob("*.csv"):
        systems |= _csv_column_values(path, "system")
    for name in [*folders, *clusters, *systems]:
        assert catalog.resolve_system(name, missing_ok=True) is not None, name
    assert len(folders) == 3 and len(clusters) >= 5


def test_nccl_header_device_matches_system_device(shared_datasets: Path, catalog) -> None:
    """The GPU printed in each cluster's nccl-tests header is the device its catalog system names."""
    base = shared_datasets / "nccl-tests" / "argonne-lcf_alcf-nccl-tests"
    for cluster in ("results_polaris", "results_sirius", "results_sophia"):
        path = next(p for p in sorted((base / cluster).rglob("all_reduce_output.dat*")))
        header = next(line for line in path.read_text(errors="replace").splitlines() if "device" in line and "Rank" in line)
        printed = header.split("]", 1)[1].strip()
        assert catalog.resolve_device(printed) == catalog.system(cluster).device


# ------------------------------------------------------------------------------------------------ user overrides
def test_user_file_adds_device_and_overrides_field(tmp_path: Path, monkeypatch) -> None:
    f = tmp_path / "site.toml"
    f.write_text(
        "[devices.Lab-GPU]\n"
        'vendor = "nvidia"\nkind = "gpu"\narch = "sm_89"\n'
        "peak_tflops = { fp32 = 40, bf16 = 160 }\nmem_bw_gbps = 900\nmem_gib = 48\n"
        'aliases = ["Lab GPU 48GB"]\nsource = "our own measurements"\n\n'
        "[devices.H100-SXM]\nmem_bw_gbps = 3000\n\n"
        "[systems.Lab-Node]\n"
        'device = "Lab GPU 48GB"\ngpus_per_node = 4\nintra_node_gbps = 32\nsource = "lab"\n'
    )
    monkeypatch.setenv("HYBRID_CATALOG", str(f))
    cat = default_catalog()
    dev = cat.device("lab gpu 48gb")
    assert dev.key == "Lab-GPU" and dev.peak("bf16") == 160e12 and dev.mem_capacity == 48 * 2**30
    h100 = cat.device("H100")
    assert h100.mem_bw == 3000e9
    assert h100.peak("bf16") == pytest.approx(989.4e12)  # fields not in the override keep the packaged value
    assert cat.system("Lab-Node").gpus_per_node == 4
    # without the variable the packaged value is back
    monkeypatch.delenv("HYBRID_CATALOG")
    assert default_catalog().device("H100").mem_bw == 3350e9


def test_user_file_cpu_entry(tmp_path: Path) -> None:
    f = tmp_path / "cpu.toml"
    f.write_text('[devices.Xeon-8480]\nvendor = "intel"\nkind = "cpu"\narch = "x86_64"\n'
                 "peak_tflops = { fp32 = 6.9, bf16 = 55 }\nmem_bw_gbps = 307\nmem_gib = 512\nsms = 56\n"
                 'source = "Intel Xeon Platinum 8480+ product brief"\n')
    cat = Catalog.load([f])
    dev = cat.device("xeon 8480")
    assert dev.kind == "cpu" and dev.kernel_latency_us == 1.0 and dev.peak("fp16") == 6.9e12


@pytest.mark.parametrize("arch, cc", [("sm_90", 90), ("sm_90a", 90), ("sm_100a", 100), ("sm_100f", 100),
                                      ("SM_103A", 103), ("sm_120", 120), ("", 0)])
def test_user_device_arch_suffix_keeps_its_generation(tmp_path: Path, arch: str, cc: int) -> None:
    """nvcc / XLA print Hopper and Blackwell targets with an arch- or family-specific suffix (``sm_90a``,
    ``sm_100f``); a catalog file copying one into ``arch`` read as compute capability 0, so its NVSwitch system lost
    NVLS (and its attention the overlapped softmax) without a word."""
    from hybrid.hardware.device import nvls_capable

    f = tmp_path / "site.toml"
    f.write_text(f'[devices.Next-GPU]\nvendor = "nvidia"\nkind = "gpu"\narch = "{arch}"\n'
                 "peak_tflops = { fp32 = 80, bf16 = 2500 }\nmem_bw_gbps = 8000\nmem_gib = 192\n"
                 'link = "NVLink5"\nlink_gbps = 900\nsource = "design study"\n\n'
                 '[systems.Next-Node]\ndevice = "Next-GPU"\ngpus_per_node = 8\nintra_fabric = "NVSwitch"\n'
                 'intra_node_gbps = 900\nsource = "design study"\n')
    cat = Catalog.load([f])
    assert cat.device("Next-GPU").compute_capability == cc
    assert nvls_capable(cat.system("Next-Node"), cat.device("Next-GPU")) == (cc >= 90)

@pytest.mark.parametrize("gen", [1, 2, 7])
def test_user_device_pcie_generation_is_priced_as_itself(tmp_path: Path, gen: int) -> None:
    """``pcie_gen`` outside the generations the bandwidth tables listed (3-6) was priced as gen3 by the generic
    node (a PCIe 7.0 design got 12 GB/s, an eighth of gen6's 96) and as gen4 by DLRM's host link, silently."""
    from hybrid.ops.roofline import PCIE_GBPS, system_for_device
    from hybrid.workloads.dlrm_graph import PCIE_X16_BW, host_link_bw

    f = tmp_path / "site.toml"
    f.write_text(f'[devices.Card]\nvendor = "nvidia"\nkind = "gpu"\narch = "sm_120"\npcie_gen = {gen}\n'
                 "peak_tflops = { fp32 = 100 }\nmem_bw_gbps = 2000\nmem_gib = 96\nsource = \"design study\"\n")
    dev = Catalog.load([f]).device("Card")
    intra, host = system_for_device(dev).intra_bw, host_link_bw(dev)
    assert (intra > PCIE_GBPS[6] * 1e9 and host > PCIE_X16_BW[6]) if gen == 7 else \
        (intra < PCIE_GBPS[3] * 1e9 and host < PCIE_X16_BW[3])


def test_a_device_stating_no_pcie_generation_has_one_pcie_speed(tmp_path: Path) -> None:
    """``pcie_gen = 0`` (not stated) was gen 3 for a generic node's GPU-to-GPU path and gen 4 for DLRM's host link:
    one card, two PCIe generations. Both read :data:`PCIE_GEN_NOT_STATED` now."""
    from hybrid.hardware.device import PCIE_GEN_NOT_STATED
    from hybrid.ops.roofline import PCIE_GBPS, system_for_device
    from hybrid.workloads.dlrm_graph import PCIE_X16_BW, host_link_bw

    f = tmp_path / "site.toml"
    f.write_text('[devices.Card]\nvendor = "nvidia"\nkind = "gpu"\n'
                 "peak_tflops = { fp32 = 100 }\nmem_bw_gbps = 2000\nmem_gib = 96\nsource = \"design study\"\n")
    dev = Catalog.load([f]).device("Card")
    node = system_for_device(dev)
    assert dev.pcie_gen == 0 and dev.pcie_generation == PCIE_GEN_NOT_STATED
    assert node.intra_bw == pytest.approx(PCIE_GBPS[PCIE_GEN_NOT_STATED] * 1e9)
    assert host_link_bw(dev) == pytest.approx(PCIE_X16_BW[PCIE_GEN_NOT_STATED])
    assert f"gen{PCIE_GEN_NOT_STATED}" in node.intra_fabric or f"gen{PCIE_GEN_NOT_STATED}" in str(node.notes)


def test_pcie_generation_outside_the_known_ones_is_refused(tmp_path: Path) -> None:
    from hybrid.hardware.device import PCIE_GENERATIONS
    from hybrid.ops.roofline import PCIE_GBPS
    from hybrid.workloads.dlrm_graph import PCIE_X16_BW

    assert set(PCIE_GENERATIONS) - {0} <= set(PCIE_GBPS) and set(PCIE_GENERATIONS) - {0} <= set(PCIE_X16_BW)
    f = tmp_path / "site.toml"
    f.write_text('[devices.Card]\nvendor = "nvidia"\nkind = "gpu"\npcie_gen = 8\n'
                 "peak_tflops = { fp32 = 100 }\nmem_bw_gbps = 2000\nmem_gib = 96\nsource = \"design study\"\n")
    with pytest.raises(InvalidInputError, match="pcie_gen must be a PCIe generation from 1 to 7"):
        Catalog.load([f])



@pytest.mark.parametrize(("text", "match"), [
    ("[devices.X\nvendor='nvidia'", "not valid TOML"),
    ("[gpus.X]\nvendor='nvidia'", "unknown top-level"),
    ("[devices.X]\nvendor='nvidia'\nkind='gpu'\npeak_tflops={fp32=1}\nmem_gib=8\nsource='s'", "missing field.*mem_bw_gbps"),
    ("[devices.X]\nvendor='nvidia'\nkind='gpu'\npeak_tflops={fp16=1}\nmem_bw_gbps=1\nmem_gib=8\nsource='s'",
     "must include fp32"),
    ("[devices.X]\nvendor='nvidia'\nkind='gpu'\npeak_tflops={fp32=-1}\nmem_bw_gbps=1\nmem_gib=8\nsource='s'",
     "must be positive"),
    ("[devices.X]\nvendor='nvidia'\nkind='gpu'\npeak_tflops={fp32=1}\nmem_bw_gbps='fast'\nmem_gib=8\nsource='s'",
     "must be a number"),
    ("[devices.X]\nvendor='nvidia'\nkind='tpu'\npeak_tflops={fp32=1}\nmem_bw_gbps=1\nmem_gib=8\nsource='s'",
     "kind must be"),
    ("[devices.X]\nvendor='nvidia'\nkind='gpu'\npeak_tflops={fp13=1, fp32=1}\nmem_bw_gbps=1\nmem_gib=8\nsource='s'",
     "unknown dtype"),
    ("[systems.S]\ndevice='NoSuchGPU'\ngpus_per_node=8\nintra_node_gbps=100\nsource='s'", "unknown device"),
    ("[systems.S]\ndevice='H100'\ngpus_per_node=0\nintra_node_gbps=100\nsource='s'", "gpus_per_node must be positive"),
    # what float() would have let through: a quoted number, a boolean, infinity, fractional counts
    ("[devices.X]\nvendor='nvidia'\nkind='gpu'\npeak_tflops={fp32=1}\nmem_bw_gbps='900'\nmem_gib=8\nsource='s'",
     "mem_bw_gbps must be a number, got '900'"),
    ("[devices.X]\nvendor='nvidia'\nkind='gpu'\npeak_tflops={fp32=1}\nmem_bw_gbps=true\nmem_gib=8\nsource='s'",
     "mem_bw_gbps must be a number, got True"),
    ("[devices.X]\nvendor='nvidia'\nkind='gpu'\npeak_tflops={fp32=inf}\nmem_bw_gbps=1\nmem_gib=8\nsource='s'",
     "peak_tflops.fp32 must be a finite number"),
    ("[devices.X]\nvendor='nvidia'\nkind='gpu'\npeak_tflops={fp32=1}\nmem_bw_gbps=1\nmem_gib=8\nsms=1.5\n"
     "source='s'", "sms must be a whole number"),
    ("[systems.S]\ndevice='H100'\ngpus_per_node=0.5\nintra_node_gbps=100\nsource='s'",
     "gpus_per_node must be a whole number"),
])
def test_malformed_user_file_gives_clear_error(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(InvalidInputError, match=match):
        Catalog.load([f])


def test_missing_user_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="not found"):
        Catalog.load([tmp_path / "nope.toml"])


def test_one_user_file_given_alone_is_that_file(tmp_path: Path) -> None:
    """``default_catalog(extra="site.toml")`` iterated the string: "catalog file not found: s". A path given alone
    is the one file; a directory (a profiler bundle) or a non-path says what it is."""
    f = tmp_path / "site.toml"
    f.write_text('[devices.H100-SXM]\nkernel_latency_us = 3.5\n')
    for extra in (str(f), f):
        assert default_catalog(extra=extra).device("H100").kernel_latency_us == 3.5
        assert Catalog.load(extra).device("H100").kernel_latency_us == 3.5
    with pytest.raises(InvalidInputError, match="is a directory"):
        Catalog.load([tmp_path])
    with pytest.raises(InvalidInputError, match="catalog files are paths, got None"):
        Catalog.load([None])


# ------------------------------------------------------------------------------------------------ local CPU
def test_local_cpu_joins_a_catalog(catalog) -> None:
    cpu = describe_local_cpu()
    assert cpu.key == LOCAL_CPU_KEY and cpu.kind == "cpu"
    assert cpu.peak("fp32") > 1e9 and cpu.mem_bw > 0 and cpu.num_sms >= 1 and cpu.l2_cache > 0
    cat = catalog.with_device(cpu)
    assert cat.device("local cpu") is cpu
    assert LOCAL_CPU_KEY not in catalog.devices  # with_device returns a copy
    measured = describe_local_cpu(measured_fp32_flops=2.5e11, measured_mem_bw=1.5e10, cores=4)
    assert measured.peak("fp32") == 2.5e11 and measured.mem_bw == 1.5e10 and measured.num_sms == 4
    assert measured.source.startswith("measured")
    with pytest.raises(InvalidInputError):
        describe_local_cpu(cores=0)


@pytest.mark.parametrize(("info", "expected"), [
    ({"flags": "sse avx avx2 fma avx512f", "vendor_id": "GenuineIntel", "cpu family": "6"}, 64.0),
    ({"flags": "sse avx avx2 fma avx512f", "vendor_id": "AuthenticAMD", "cpu family": "25"}, 32.0),
    ({"flags": "sse avx avx2 fma", "vendor_id": "AuthenticAMD", "cpu family": "23"}, 32.0),
    ({"flags": "sse sse2", "vendor_id": "GenuineIntel"}, 8.0),
])
def test_cpu_flops_per_cycle(info: dict[str, str], expected: float) -> None:
    assert flops_per_cycle(info) == expected


def test_features_are_finite_for_every_device(catalog) -> None:
    for dev in [*catalog, describe_local_cpu()]:
        feats = Device.features(dev)
        assert all(v > 0 for v in feats.values()), dev.key


def test_docs_examples_load(tmp_path: Path) -> None:
    """The TOML examples in docs/hardware.md are valid catalog files."""
    doc = Path(__file__).resolve().parents[1] / "docs" / "hardware.md"
    blocks = re.findall(r"```toml\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 2
    for i, block in enumerate(blocks):
        f = tmp_path / f"example{i}.toml"
        f.write_text(block)
        cat = Catalog.load([f])
        assert {"RTX-5090", "Xeon-8480"} & set(cat.devices)


def test_merge_adds_devices_and_systems_and_other_wins(catalog):
    from dataclasses import replace

    from hybrid.hardware.catalog import Catalog
    from hybrid.hardware.device import System

    dev = replace(catalog.device("T4"), key="my-t4", aliases=("my t4 card",), mem_bw=1e9)
    sys_ = System.from_entry("my-t4-box", {"device": "my-t4", "gpus_per_node": 4, "intra_node_gbps": 10,
                                           "source": "test"})
    other = Catalog({"my-t4": dev}, {"my-t4-box": sys_})
    merged = catalog.merge(other)
    assert merged.device("my t4 card").mem_bw == 1e9
    assert merged.system("my-t4-box").gpus_per_node == 4
    assert "my-t4" not in catalog and catalog.resolve_system("my-t4-box", missing_ok=True) is None
    assert catalog.merge(Catalog({}, {})) is catalog


def test_peak_dtype_names_the_units_peak_uses(catalog):
    m40 = catalog.device("M40")  # Maxwell: no fp16 / tf32 units; its bf16 entry is the fp32 rate, and named fp32
    assert m40.peak_dtype("fp16") == "fp32" and m40.peak("fp16") == m40.peak_flops["fp32"]
    assert m40.peak_dtype("half") == "fp32" and m40.peak_dtype("fp8") == "fp32"
    assert catalog.device("P4").peak_dtype("fp8") == "fp16"
    for dt in ("fp32", "fp16", "bf16", "tf32", "fp8"):
        for name in ("A100-SXM4-80GB", "T4", "P4", "M40", "H100-SXM"):
            d = catalog.device(name)
            assert d.peak(dt) == d.peak_flops[d.peak_dtype(dt)]
    with pytest.raises(InvalidInputError):
        m40.peak_dtype("no-such-type")


def test_a_device_with_bf16_units_only_runs_fp16_and_int8_on_them(catalog):
    # a user's entry for a part whose datasheet lists bf16 tensor cores and no fp16 line: fp16 was priced at fp32
    base = catalog.device("H100-SXM")
    dev = dataclasses.replace(base, key="bf16-only", aliases=(), peak_flops={"fp32": 60e12, "bf16": 900e12})
    assert dev.peak_dtype("fp16") == "bf16" and dev.peak("fp16") == 900e12
    assert dev.peak_dtype("int8") == "bf16" and dev.peak_dtype("fp8") == "bf16"
    assert dev.peak_dtype("tf32") == "fp32"


def test_system_check_layout(catalog):
    sys_ = catalog.systems["Polaris"]  # 4 GPUs per node, 560 nodes
    assert sys_.check_layout(8, 2) == ""
    for ranks, nodes, msg in ((0, 1, "must be positive"), (2, 3, "cannot span 3 nodes"),
                              (9, 2, "use --nodes 3 or more"), (6, 4, "split evenly")):
        with pytest.raises(InvalidInputError, match=msg):
            sys_.check_layout(ranks, nodes)
    # beyond the installation the catalog describes: costed, with a note, as the engine and the workloads cost it
    # (`predict collective` refused what `simulate` ran)
    assert "more than the 560 the catalog describes" in sys_.check_layout(4 * 561, 561)
    with pytest.raises(InvalidInputError, match="is a single node"):
        catalog.systems["XLA-H100x8"].check_layout(16, 2)  # one node, no network in the catalog
    with pytest.raises(InvalidInputError, match="a generic node of"):
        sys_.check_layout(5, 1, generic=True)


def test_measured_links_round_trip_and_are_checked(catalog):
    from hybrid.hardware.device import System

    c00 = catalog.systems["xxrjun-H100-cluster00"]
    assert c00.measured_links == ("inter",) and catalog.systems["Polaris"].measured_links == ()
    again = System.from_entry(c00.key, c00.to_entry())
    assert again.measured_links == ("inter",) and again.inter_bw == c00.inter_bw
    assert "measured_links" not in catalog.systems["Polaris"].to_entry()
    with pytest.raises(InvalidInputError, match="measured_links may name"):
        System.from_entry("x", {**c00.to_entry(), "measured_links": ["nic"]})


@pytest.mark.parametrize("name,key", [
    ("NVIDIA GeForce RTX 3090", "RTX-3090"), ("NVIDIA_GeForce_RTX_4090", "RTX-4090"), ("NVIDIA RTX A6000", "RTX-A6000"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-Ada"), ("Quadro RTX 8000", "Quadro-RTX-8000"),
    ("Tesla V100-PCIE-16GB", "V100-PCIE-16GB"), ("NVIDIA GeForce RTX 5090", "RTX-5090"),
    ("Quadro RTX 6000", "Quadro-RTX-6000"), ("NVIDIA RTX A4000", "RTX-A4000"), ("Tesla M60", "M60"),
    ("NVIDIA H100-SXM5-94GB", "H100-SXM-94GB"), ("NVIDIA H100-PCIE-94GB", "H100-NVL"),
])
def test_workstation_and_consumer_gpus_resolve_from_their_nvidia_smi_names(catalog, name, key):
    dev = catalog.device(name)
    assert dev.key == key
    # GeForce tensor cores accumulate FP32 at half rate: the catalog's fp16 is the rate frameworks get
    if key in ("RTX-4090", "RTX-5090"):
        assert dev.peak("fp16") == pytest.approx(2 * dev.peak("fp32"), rel=0.01)


def test_system_device_names_the_gpu_or_none_when_the_catalog_lacks_it(catalog) -> None:
    assert catalog.system_device("Sophia").key == "A100-SXM4-40GB"
    system = catalog.system("Sophia")
    orphan = dataclasses.replace(system, key="orphan", device="no-such-gpu")
    assert catalog.system_device(orphan, missing_ok=True) is None
    with pytest.raises(UnknownDeviceError):
        catalog.system_device(orphan)


def test_a10g_is_not_the_a10(catalog) -> None:
    """AWS's A10G: more SMs at a higher clock (more FP32) but half-rate tensor cores (less FP16) than the A10;
    the same memory; its FP16 rate is its SMs x 512 FLOP/clock x boost clock."""
    a10, a10g = catalog.device("A10"), catalog.device("NVIDIA A10G")
    assert a10g.peak("fp32") > a10.peak("fp32") and a10g.peak("fp16") < 0.6 * a10.peak("fp16")
    assert a10g.mem_bw == a10.mem_bw
    assert abs(a10g.peak("fp16") - a10g.num_sms * 512 * a10g.clock_mhz * 1e6) < 0.01 * a10g.peak("fp16")


def test_fp16_on_gpus_whose_half_units_add_in_half_runs_at_the_fp32_rate(catalog):
    """Pascal (half2 at 2x, or 1/64 on consumer / inference parts) and Vega 10 add FP16 in 16 bits: the roofline's
    compute ceiling for FP16 kernels (FP32-accumulating GEMMs, PyTorch's FP32 'opmath') is their FP32 rate; the
    datasheet ``peak`` is unchanged, and GPUs with tensor / matrix cores or FP32-summing dot units keep theirs."""
    from hybrid.ops.roofline import roofline

    for name in ("P100-PCIE-16GB", "P4", "GTX-1080Ti", "P40", "MI25", "Vega-FE"):
        d = catalog.device(name)
        assert d.half_accumulates_in_half and d.compute_peak_dtype("fp16") == "fp32"
        assert d.compute_peak("fp16") == d.peak("fp32") and d.peak("fp16") != d.peak("fp32")
    for name in ("V100-SXM2-32GB", "T4", "RTX-3090", "A100-SXM4-80GB", "H100-SXM", "MI50", "MI100", "MI300X"):
        d = catalog.device(name)
        assert not d.half_accumulates_in_half and d.compute_peak("fp16") == d.peak("fp16")
    p100 = catalog.device("P100-PCIE-16GB")
    assert p100.compute_peak("bf16") == p100.peak("bf16") and p100.compute_peak("fp32") == p100.peak("fp32")
    assert catalog.device("P4").compute_peak_dtype("fp8") == "fp32"  # fp8 -> its fp16 fallback -> FP32 units
    gemm = pd.DataFrame({"device": ["P100-PCIE-16GB", "P100-PCIE-16GB", "GTX-1080Ti"], "op": "gemm",
                         "dtype": ["fp16", "fp32", "fp16"], "b": 1, "m": 8192, "n": 8192, "k": 8192})
    r = roofline(gemm, catalog)
    flops = 2.0 * 8192**3
    assert r["compute_us"].iloc[0] == pytest.approx(flops / p100.peak("fp32") * 1e6)
    assert r["compute_us"].iloc[0] == pytest.approx(r["compute_us"].iloc[1])  # same units, half the bytes
    assert r["memory_us"].iloc[0] == pytest.approx(r["memory_us"].iloc[1] / 2)
    assert r["time_us"].iloc[2] < 2 * flops / catalog.device("GTX-1080Ti").peak("fp32") * 1e6  # not at 1/64 rate


def test_a_misspelt_override_field_fails_loudly(tmp_path) -> None:
    """An override whose field the catalog does not know would otherwise change nothing, silently."""
    from hybrid.errors import InvalidInputError
    from hybrid.hardware.catalog import default_catalog

    bad = tmp_path / "ovr.toml"
    bad.write_text("[devices.H100-SXM]\nmem_bw_gpbs = 5000\n")
    with pytest.raises(InvalidInputError, match=r"ovr.toml: device 'H100-SXM': unknown field\(s\) mem_bw_gpbs "
                                                r"\(did you mean mem_bw_gbps\?\)"):
        default_catalog([bad])
    bad.write_text("[systems.DGX-H100]\nintra_node_gpbs = 900\n")
    with pytest.raises(InvalidInputError, match=r"system 'DGX-H100': unknown field\(s\) intra_node_gpbs"):
        default_catalog([bad])
    good = tmp_path / "good.toml"
    good.write_text("[devices.H100-SXM]\nmem_bw_gbps = 5000\n")
    assert default_catalog([good]).device("H100-SXM").mem_bw == 5000e9


@pytest.mark.parametrize("name, key", [("gfx90a:xnack-", "MI210"), ("gfx950:sramecc+", "MI355X"),
                                       ("gfx942:xnack-", "MI300X"), ("gfx906:sramecc-:xnack-", "MI50")])
def test_rocm_targets_with_any_feature_flags_resolve(catalog, name, key) -> None:
    assert catalog.resolve_device(name) == key


def test_bf16_without_bf16_units_is_said_where_it_is_priced(catalog, capsys) -> None:
    """bf16 on a GPU before Ampere runs converted to fp32 (listed at the fp32 rate): a GEMM prediction, an LLM
    inference and the fp8 advice say so, while an A100's bf16 (tensor cores) says nothing."""
    from hybrid.cli.main import main

    v100, a100 = catalog.device("V100-SXM2-32GB"), catalog.device("A100-SXM4-80GB")
    assert v100.lacks_units("bf16") and not v100.lacks_units("fp16") and not a100.lacks_units("bf16")
    assert "fp16 runs on its 125 TFLOP/s units" in v100.slow_dtype_note("bf16") and a100.slow_dtype_note("bf16") == ""
    gemm = ["predict", "gemm", "-m", "4096", "-n", "4096", "-k", "4096", "--dtype", "bf16", "--json"]
    assert main([*gemm, "--device", "V100-SXM2-32GB"]) in (0, None)
    out, err = capsys.readouterr()
    assert "no bf16 units" in err and "no bf16 units" in json.loads(out)["note"]
    assert main([*gemm, "--device", "A100-SXM4-80GB"]) in (0, None)
    assert "warning" not in capsys.readouterr().err
    assert main(["llm", "infer", "llama2-7b", "--device", "V100-SXM2-32GB", "--dtype", "bf16", "--batch", "1",
                 "--input", "128", "--output", "8"]) in (0, None)
    assert "warning: V100-SXM2-32GB has no bf16 units" in capsys.readouterr().err
    assert main(["llm", "infer", "llama2-7b", "--device", "V100-SXM2-32GB", "--dtype", "fp8"]) == 2
    assert "use --dtype fp16 (its bf16 runs at the fp32 rate)" in capsys.readouterr().err


@pytest.mark.parametrize("name, key, other", [("sm_90", "H100-SXM", "H200"), ("sm_90a", "H100-SXM", "H100-PCIE"),
                                              ("gfx90a", "MI210", "MI250X"), ("gfx942:sramecc+:xnack-", "MI300X",
                                                                                 "MI325X")])
def test_a_shared_architecture_string_names_the_other_gpus_it_could_be(catalog, name, key, other) -> None:
    """``sm_90`` resolves (to the XLA tables' H100) but is also every other Hopper part: the alternatives are the
    catalog devices with that arch, never the one picked; product names and one-device archs have none."""
    alts = catalog.arch_alternatives(name)
    assert catalog.resolve_device(name) == key and key not in alts and other in alts
    assert all(catalog.devices[k].arch.lower() == catalog.devices[key].arch.lower() for k in alts)
    assert catalog.arch_alternatives("H100") == [] and catalog.arch_alternatives("NVIDIA H200") == []
    assert catalog.arch_alternatives("gfx906") == [k for k, d in catalog.devices.items()
                                                   if d.arch == "gfx906" and k != catalog.resolve_device("gfx906")]


def test_arch_suffixes_name_the_same_chips_on_both_sides(catalog) -> None:
    """``sm_100f`` (nvcc's family-specific target) is B200's architecture as ``sm_100`` is, and a user's device whose
    ``arch`` was copied as ``sm_90a`` is one of the Hopper parts ``sm_90`` could mean: both were missed (exact match)."""
    assert "GB200" in catalog.arch_alternatives("sm_100f") and "GB200" in catalog.arch_alternatives("sm_100")
    mine = dataclasses.replace(catalog.device("H100-SXM"), key="lab-h100", aliases=(), arch="sm_90a")
    merged = catalog.merge(Catalog({"lab-h100": mine}, {}))
    assert "lab-h100" in merged.arch_alternatives("sm_90") and "lab-h100" in merged.arch_alternatives("sm_90a")
    assert merged.arch_alternatives("gfx90a") == catalog.arch_alternatives("gfx90a")  # AMD's "a" is the name


@pytest.mark.parametrize("name, members", [("sm_61", ("P4", "GTX-1080Ti", "TitanXp")), ("gfx900", ("MI25", "Vega-FE")),
                                           ("sm_52", ("M40", "TitanX"))])
def test_an_architecture_no_default_maps_names_its_gpus(catalog, name, members) -> None:
    """``sm_61`` is five catalog GPUs and none is its default: the error suggested A10, P100, RTX PRO 6000, B300
    and B200 (names spelt alike), not one Pascal GP10x part."""
    with pytest.raises(UnknownDeviceError) as err:
        catalog.resolve_device(name)
    msg = str(err.value)
    assert "an architecture, not a product" in msg and all(m in msg for m in members)
    listed = msg.split("have it: ", 1)[1].split(";", 1)[0].split(", ")
    assert listed == [k for k, d in catalog.devices.items() if d.arch.lower() == name]


def test_a_stated_sxm_generation_names_its_own_board(catalog):
    """``V100 SXM3`` was resolved as the SXM2 part (the SXM word stripped, then the bare V100), ``H100-SXM9`` as the
    H100 SXM, both silently."""
    for name in ("V100-SXM3", "Tesla V100-SXM3", "V100 SXM3 32GB"):
        assert catalog.resolve_device(name) == "V100-SXM3-32GB", name
    assert catalog.resolve_device("H100 SXM5") == "H100-SXM" and catalog.resolve_device("HGX H100") == "H100-SXM"
    assert catalog.resolve_device("NVIDIA H100 SXM5 94GB") == "H100-SXM-94GB"
    with pytest.raises(UnknownDeviceError, match="H100-SXM9"):
        catalog.resolve_device("H100-SXM9")


def test_user_system_naming_its_gpu_by_alias_keeps_the_device_key(tmp_path: Path, monkeypatch) -> None:
    # A site file may name a system's GPU as nvidia-smi prints it; code downstream compares System.device with
    # table rows' device keys (the nccl-tests importer warned "the log's GPU H100-SXM does not match system ..."
    # for every section of a log of that very GPU).
    f = tmp_path / "site.toml"
    f.write_text('[systems.My-H100]\ndevice = "NVIDIA H100 80GB HBM3"\ngpus_per_node = 8\nintra_node_gbps = 450\n'
                 'source = "lab"\n')
    monkeypatch.setenv("HYBRID_CATALOG", str(f))
    cat = default_catalog()
    assert cat.system("My-H100").device == "H100-SXM"
    assert cat.with_system(cat.system("My-H100")).system("My-H100").device == "H100-SXM"


@pytest.mark.parametrize(("text", "match"), [
    ("devices = 5\n", r"bad.toml: `devices` must be a table of \[devices.NAME\] entries, got 5"),
    ("systems = [1, 2]\n", r"bad.toml: `systems` must be a table"),
    ("[devices]\nX = 5\n", r"bad.toml: device 'X' must be a table of fields"),
    ("[devices.H100-SXM]\npeak_tflops = 5\n", r"device 'H100-SXM': peak_tflops must be a table"),
    ("[devices.H100-SXM]\naliases = 'foo'\n", r"'H100-SXM': field aliases must be a list of non-empty strings"),
    ("[devices.H100-SXM]\naliases = [5]\n", r"field aliases must be a list of non-empty strings"),
    ("[systems.DGX-H100]\nmeasured_links = 'intra'\n", r"field measured_links must be a list of non-empty strings"),
    ("[systems.DGX-H100]\nhost_mem_borrowed_by = 'HGX H100'\n", r"host_mem_borrowed_by must be a list of non-empty strings"),
    ("[devices.H100-SXM]\naliases = ['', 'x']\n", r"field aliases must be a list of non-empty strings"),
    ("[devices.H100-SXM]\naliases = ['  ']\n", r"field aliases must be a list of non-empty strings"),
])
def test_misshapen_user_file_gives_clear_error(tmp_path: Path, text: str, match: str) -> None:
    """A field or table of the wrong shape was a TypeError / AttributeError, or (a bare string for a list of names)
    taken letter by letter: `aliases = "foo"` made `f` and `o` names of the H100."""
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(InvalidInputError, match=match):
        Catalog.load([f])


@pytest.mark.parametrize(("text", "match"), [
    ("[devices.h100-sxm]\nmem_bw_gbps = 3000\n",
     r"ovr.toml: device 'h100-sxm' is another name of the catalog's device 'H100-SXM'.*\[devices.H100-SXM\]"),
    ("[devices.\"NVIDIA H100 80GB HBM3\"]\nmem_bw_gbps = 3000\n",
     r"ovr.toml: device 'NVIDIA H100 80GB HBM3' is another name of the catalog's device 'H100-SXM'"),
    ("[systems.\"dgx h100\"]\nintra_node_gbps = 400\n",
     r"ovr.toml: system 'dgx h100' is another name of the catalog's system 'DGX-H100'.*\[systems.DGX-H100\]"),
])
def test_an_override_under_another_spelling_names_the_entry(tmp_path: Path, text: str, match: str) -> None:
    """An override keyed by an alias or another spelling of an entry was taken for a new entry: `missing field(s)
    vendor, kind, ...` (or an alias `claimed by both`), naming neither the file nor the key to use."""
    f = tmp_path / "ovr.toml"
    f.write_text(text)
    with pytest.raises(InvalidInputError, match=match):
        Catalog.load([f])


def test_a_bad_value_names_the_catalog_file(tmp_path: Path) -> None:
    """Values are checked after the files are merged; the error names the file that set the entry."""
    first, second = tmp_path / "first.toml", tmp_path / "second.toml"
    first.write_text("[devices.H100-SXM]\nmem_bw_gbps = 3000\n")
    second.write_text("[devices.H100-SXM]\nmem_bw_gbps = -3000\n")
    with pytest.raises(InvalidInputError, match=r"catalog file \S*second.toml: 'H100-SXM': field mem_bw_gbps must "
                                                r"be positive"):
        Catalog.load([first, second])
    second.write_text("[systems.DGX-H100]\ngpus_per_node = 0\n")
    with pytest.raises(InvalidInputError, match=r"catalog file \S*second.toml: 'DGX-H100': field gpus_per_node"):
        Catalog.load([first, second])
    # a new entry under a name of its own still loads beside an existing one
    second.write_text("[devices.H100-Lab]\nvendor='nvidia'\nkind='gpu'\npeak_tflops={fp32=60}\nmem_bw_gbps=3000\n"
                      "mem_gib=80\nsource='lab'\n")
    assert Catalog.load([first, second]).device("h100 lab").mem_bw == 3000e9


def test_a_peak_override_merges_dtype_by_dtype(tmp_path: Path) -> None:
    """`peak_tflops = { bf16 = 500 }` on an existing device was refused (no fp32), and with fp32 added it dropped
    every other dtype: fp8 and tf32 then fell back to bf16 / fp32 (H100 tf32 494.7 -> 67 TFLOP/s), silently."""
    f = tmp_path / "ovr.toml"
    f.write_text("[devices.H100-SXM]\npeak_tflops = { bf16 = 500 }\n")
    dev = Catalog.load([f]).device("H100-SXM")
    assert dev.peak("bf16") == 500e12
    assert dev.peak("fp32") == pytest.approx(67e12) and dev.peak("tf32") == pytest.approx(494.7e12)
    assert dev.peak("fp8") == pytest.approx(1978.9e12)
    # a new device still needs fp32
    f.write_text("[devices.X]\nvendor='nvidia'\nkind='gpu'\npeak_tflops={bf16=1}\nmem_bw_gbps=1\nmem_gib=8\n"
                 "source='s'\n")
    with pytest.raises(InvalidInputError, match="must include fp32"):
        Catalog.load([f])


def test_a_system_on_an_unknown_gpu_names_the_file_and_the_closest(tmp_path: Path) -> None:
    f = tmp_path / "sys.toml"
    f.write_text("[systems.DGX-H100]\ndevice = 'H1OO'\n")
    with pytest.raises(InvalidInputError, match=r"catalog file \S*sys.toml: system 'DGX-H100' names unknown device "
                                                r"'H1OO' \(closest known: H100-SXM"):
        Catalog.load([f])
    f.write_text("[devices.H100-SXM]\npeak_tflops = { fp32 = 60, bf17 = 500 }\n")
    with pytest.raises(InvalidInputError, match=r"sys.toml: device 'H100-SXM': peak_tflops: unknown dtype 'bf17'"):
        Catalog.load([f])


def test_a_system_named_like_a_device_is_refused_at_load(tmp_path: Path, monkeypatch) -> None:
    """A site file's system `A100` (a node of H100s) made `-s A100` the H100 node, `-d A100` the A100-SXM4-80GB and
    `hybrid devices show A100` the system: one name, two things, chosen by the option. Refused when the catalog is
    loaded, naming the file; a system named as its own GPU reads (`DGX-H100` as H100-SXM) stays the convention."""
    entry = 'device = "{dev}"\ngpus_per_node = 8\nintra_node_gbps = 450\nsource = "lab"\n'
    f = tmp_path / "site.toml"
    f.write_text("[systems.A100]\n" + entry.format(dev="H100-SXM"))
    with pytest.raises(InvalidInputError, match=rf"catalog file {re.escape(str(f))}: system 'A100': the name 'A100' "
                                                r"also names device 'A100-SXM4-80GB'; systems and devices need "
                                                r"distinct names"):
        Catalog.load(f)
    f.write_text("[systems.H100-SXM]\n" + entry.format(dev="H100-SXM"))  # its own GPU's name: still two things
    with pytest.raises(InvalidInputError, match="also names device 'H100-SXM'"):
        Catalog.load(f)
    f.write_text("[systems.Lab]\n" + entry.format(dev="A100") + 'aliases = ["HGX H100 80GB"]\n')
    with pytest.raises(InvalidInputError, match=r"the name 'HGX H100 80GB' reads as device 'H100-SXM' but the system "
                                                r"holds 'A100-SXM4-80GB'"):
        Catalog.load(f)
    f.write_text("[systems.Lab]\n" + entry.format(dev="H100-SXM") + 'aliases = ["HGX H100 80GB"]\n')
    assert Catalog.load(f).system("HGX H100 80GB").key == "Lab"
    # through the CLI: one error line, exit 2
    f.write_text("[systems.A100]\n" + entry.format(dev="H100-SXM"))
    monkeypatch.setenv("HYBRID_CATALOG", str(f))
    from cli_run import run_cli

    rc, out, err = run_cli(["predict", "gemm", "-d", "A100", "-m", "64", "-n", "64", "-k", "64"])
    assert rc == 2 and not out and err.startswith("error: catalog file") and err.count("\n") == 1
    # catalogs built in code are checked too (a merged bundle catalog)
    cat = default_catalog([])
    with pytest.raises(InvalidInputError, match="also names device"):
        cat.with_system(dataclasses.replace(cat.system("DGX-H100"), key="V100-SXM2-32GB", aliases=()))


def test_an_alias_two_entries_claim_names_the_catalog_file_that_made_the_clash(tmp_path):
    """A site catalog giving a device an alias another device holds: refused naming that file, as every other
    catalog-file error does (it named only the two entries)."""
    from hybrid.hardware.catalog import Catalog

    site = tmp_path / "site.toml"
    site.write_text('[devices.T4]\naliases = ["H100"]\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match=rf"^catalog file {re.escape(str(site))}: device alias 'H100' is "
                                                r"claimed by both"):
        Catalog.load(site)
    site.write_text('[systems.DGX-A100]\naliases = ["DGX-H100"]\nhost_mem_borrowed_by = []\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match=rf"^catalog file {re.escape(str(site))}: system alias 'DGX-H100'"):
        Catalog.load(site)


def test_blackwell_fp32_fp64_tf32_are_nvidias_current_per_gpu_figures(catalog) -> None:
    """NVIDIA GB200 NVL72 / HGX B200 technical specifications (current revision), per-GPU columns: HGX B200 FP32 75,
    FP64 / FP64 Tensor Core 37 TFLOPS; GB200 NVL72 FP32 80, FP64 40 (5,760 / 2,880 TF per 72-GPU rack). NVIDIA HGX
    platform spec: HGX B200 600 TF FP32, 296 TF FP64, 18 PF TF32 with sparsity per 8 GPUs (1.125 PF dense each). The
    catalog held the 2024 launch figures (B200 80 / 40, GB200 90 / 45) and 1.1 PF TF32: FP32 GEMMs and DGEMMs on a
    B200 were priced 7-8% fast, on a GB200 12.5% fast, rates its own 148 SMs at their boost clock cannot reach."""
    def tflops(key: str, dtype: str) -> float:
        return catalog.device(key).peak(dtype) / 1e12

    assert (tflops("B200", "fp32"), tflops("B200", "fp64"), tflops("B200", "tf32")) == pytest.approx((75, 37, 1125))
    assert (tflops("GB200", "fp32"), tflops("GB200", "fp64"), tflops("GB200", "tf32")) == pytest.approx((80, 40, 1250))
    # Blackwell runs FP64 at half the FP32 rate on every SM (64 FP64 / 128 FP32 lanes)
    for key in ("B200", "GB200"):
        assert tflops(key, "fp64") == pytest.approx(tflops(key, "fp32") / 2, rel=0.02), key
    # the FP32 rate is what the SMs reach at the boost clock: 128 lanes x 2 FLOP (FMA) per SM per clock, within the
    # datasheet's rounding (B200: 148 SMs x 256 x 1.965 GHz = 74.4 against 75)
    for key in ("B100", "B200", "GB200", "B300", "GB300"):
        dev = catalog.device(key)
        assert dev.peak("fp32") == pytest.approx(dev.num_sms * 256 * dev.clock_mhz * 1e6, rel=0.01), key


def test_b200_memory_bandwidth_is_what_its_memory_bus_carries(catalog) -> None:
    """A B200 reports a 7680-bit HBM3e bus at a 3996 MHz memory clock (cudaGetDeviceProperties / nvidia-smi on a
    B200, pytorch/ao PR #4002): 7680 / 8 x 3996e6 x 2 (double data rate) = 7.67 TB/s, NVIDIA's current HGX B200
    figure 7.7 TB/s. The catalog held the DGX B200 datasheet's 8 TB/s (64 TB/s per 8 GPUs), which needs the full
    8192-bit bus: memory-bound ops on a B200 were priced 4% fast."""
    b200 = catalog.device("B200")
    assert b200.mem_bw == pytest.approx(7.7e12)
    assert b200.mem_bw == pytest.approx(7680 / 8 * 3996e6 * 2, rel=0.005)
    assert "7.7 TB/s" in b200.source


@pytest.mark.parametrize("key", ["B300", "GB300"])
def test_blackwell_ultra_int8_is_the_cut_rate_not_fp16s(key: str, catalog) -> None:
    """Blackwell Ultra cut INT8 tensor-core math (HGX B300: 2 POPS sparse per 8 GPUs against HGX B200's 72): with no
    int8 entry an int8 GEMM fell back to the fp16 rate, 18x faster than the part runs it."""
    dev = catalog.devices[key]
    assert dev.peak("int8") < dev.peak("fp16") / 10
    assert dev.peak("int8") < catalog.devices["B200"].peak("int8") / 20


def test_blackwell_ultra_rates_and_memory_are_nvidias(catalog) -> None:
    """HGX B300 spec (NVIDIA, 2025): 18 PF TF32 with sparsity per 8 GPUs = 1.125 PF dense per GPU (the catalog had 1.1).
    GB300 NVL72 spec: INT8 24 POPS with sparsity per 72 GPUs = 167 TOPS dense per GPU (the catalog had 139, B300's
    125 scaled by the FP64 ratio, an estimate from before the figure was found). Memory: the capacity nvidia-smi
    reports, as for every other entry (B200 183359 MiB, GB200 189471 MiB, H200 143771 MiB): B300 275040 MiB, GB300
    284208 MiB. GB300 held 268 GiB (288e9 bytes), 9.5 GiB short of what a GB300 holds."""
    b300, gb300 = catalog.device("B300"), catalog.device("GB300")
    assert b300.peak("tf32") == pytest.approx(18e15 / 8 / 2)
    assert gb300.peak("int8") == pytest.approx(24e15 / 72 / 2, rel=1e-3)
    assert b300.mem_capacity / 2**20 == pytest.approx(275040, rel=1e-3)
    assert gb300.mem_capacity / 2**20 == pytest.approx(284208, rel=1e-3)
    # a name stating the label's 288 GB still reaches both parts
    assert catalog.resolve_device("NVIDIA GB300 288GB") == "GB300" and catalog.resolve_device("B300 288GB") == "B300"


def test_blackwell_b200_hosts_on_pcie_gen5_blackwell_ultra_on_gen6(catalog) -> None:
    """NVIDIA's HGX B200 per-GPU spec lists "PCIe Gen5: 128GB/s" (MLPerf B200 systems: "PCIe Gen5 x16"); PCIe 6.0 came
    with Blackwell Ultra ("Inside NVIDIA Blackwell Ultra": PCIe 6.0 instead of 5.0). B100 / B200 / GB200 said gen 6:
    tables placed in host memory on a DGX B200 were read at 121 GB/s, twice what its x16 Gen5 slot carries (63)."""
    from hybrid.workloads.dlrm_graph import PCIE_X16_BW, host_link_bw

    for key in ("B100", "B200", "GB200"):
        assert catalog.device(key).pcie_generation == 5, key
    assert host_link_bw(catalog.device("B200")) == PCIE_X16_BW[5]
    for key in ("B300", "GB300"):
        assert catalog.device(key).pcie_generation == 6, key


def test_a_multi_node_system_without_a_network_is_refused_at_load(tmp_path: Path) -> None:
    """`max_nodes = 4` without `inter_node_gbps` (0 = a single node, by the field's definition) loaded, and
    collectives across its nodes were costed at a 12.5 GB/s NIC the file never stated (hybrid predict collective
    -s NoNet --nodes 2 answered with no word of it). Refused at load, naming the file and both fields; a single
    node (max_nodes 1 or left out) or a stated network still loads."""
    entry = ('[systems.NoNet]\ndevice = "A100-SXM4-40GB"\ngpus_per_node = 4\nintra_node_gbps = 200\n'
             'source = "lab"\n')
    f = tmp_path / "site.toml"
    f.write_text(entry + "max_nodes = 4\n")
    with pytest.raises(InvalidInputError, match=rf"catalog file {re.escape(str(f))}: system 'NoNet': max_nodes 4 but "
                                                r"no inter_node_gbps .* give inter_node_gbps, or max_nodes = 1"):
        Catalog.load(f)
    f.write_text(entry)
    assert Catalog.load(f).system("NoNet").single_node
    f.write_text(entry + "max_nodes = 4\ninter_node_gbps = 25\n")
    assert Catalog.load(f).system("NoNet").inter_bw == 25e9


@pytest.mark.parametrize("name, part, nearest", [
    ("sm_110", "Jetson Thor", "B300 (sm_103)"), ("sm_110f", "Jetson Thor", "B200 (sm_100)"),
    ("sm_101", "called sm_110 from CUDA 13.0 on", "B200 (sm_100)"), ("sm_101a", "Jetson Thor", "B300 (sm_103)"),
    ("sm_121", "DGX Spark's GB10", "RTX-PRO-6000-Blackwell (sm_120)"),
    ("sm_121a", "GB10", "RTX-PRO-6000-Blackwell (sm_120)")])
def test_an_architecture_no_catalog_gpu_has_names_the_part_and_the_nearest_parts(catalog, name, part,
                                                                                   nearest) -> None:
    """``sm_121`` (DGX Spark) suggested RTX PRO 6000, B300, B200 and an AMD MI210 (names spelt alike), ``sm_110``
    (Jetson Thor; ``sm_101`` before CUDA 13) A100 among them: the refusal now says which part the architecture is and
    lists the catalog GPUs of the nearest compute capabilities."""
    with pytest.raises(UnknownDeviceError) as err:
        catalog.resolve_device(name)
    msg = str(err.value)
    assert part in msg and nearest in msg and "MI210" not in msg and "A100" not in msg, msg
    listed = msg.split("closest known parts: ", 1)[1].split(" (see", 1)[0].split(", ")
    assert 0 < len(listed) <= 5 and all(catalog.devices[p.split(" (")[0]].arch.startswith("sm_1") for p in listed)


def test_gh200_as_nvidia_smi_names_it_with_its_hbm3_is_the_96gb_part(catalog) -> None:
    """``NVIDIA GH200 480GB`` names the Grace side's 480 GB LPDDR5X; its GPU has 96 GB HBM3. With the memory kind
    appended it was refused as "GH200 ... not in this memory configuration"."""
    for name in ("NVIDIA GH200 480GB HBM3", "GH200 480GB HBM3", "NVIDIA GH200 480GB"):
        assert catalog.resolve_device(name) == "GH200", name
    assert catalog.devices["GH200"].mem_capacity == 96 * 2**30
    assert catalog.resolve_device("NVIDIA GH200 144G HBM3e") == "GH200-144GB"


_GPU = "[devices.X]\nvendor='nvidia'\nkind='gpu'\nsource='s'\n"


@pytest.mark.parametrize(("fields", "match"), [
    ("peak_tflops={fp32=60e12}\nmem_bw_gbps=4000\nmem_gib=96", r"peak_tflops.fp32 = 6e\+13 .*FLOP/s or GFLOP/s"),
    ("peak_tflops={fp32=60, bf16=9e8}\nmem_bw_gbps=4000\nmem_gib=96", r"peak_tflops.bf16 = 9e\+08"),
    ("peak_tflops={fp32=60}\nmem_bw_gbps=4e12\nmem_gib=96", r"mem_bw_gbps = 4e\+12 .*B/s or MB/s"),
    ("peak_tflops={fp32=60}\nmem_bw_gbps=3.35\nmem_gib=96", r"mem_bw_gbps = 3.35 .*written in TB/s"),
    ("peak_tflops={fp32=60}\nmem_bw_gbps=4000\nmem_gib=98304", r"mem_gib = 98304 .*bytes or MiB"),
    ("peak_tflops={fp32=60}\nmem_bw_gbps=4000\nmem_gib=96\nboost_clock_mhz=1.98", r"boost_clock_mhz = 1.98 .*GHz"),
    ("peak_tflops={fp32=60}\nmem_bw_gbps=4000\nmem_gib=96\nlink_gbps=450e9", r"link_gbps = 4.5e\+11"),
    ("peak_tflops={fp32=60}\nmem_bw_gbps=4000\nmem_gib=96\nl2_mib=52428800", r"l2_mib = 5.24288e\+07 .*bytes"),
])
def test_a_value_in_the_wrong_unit_is_refused(tmp_path: Path, fields: str, match: str) -> None:
    """A figure written in base units or one prefix off (B/s in a GB/s field, GHz in a MHz one) loaded silently: a
    4e12 ``mem_bw_gbps`` priced memory-bound kernels at ~0. The error names the file, the entry, the field and the
    likely slip."""
    f = tmp_path / "units.toml"
    f.write_text(_GPU + fields + "\n")
    with pytest.raises(InvalidInputError, match=r"catalog file \S*units.toml: device 'X': field " + match):
        Catalog.load([f])


def test_a_system_bandwidth_in_the_wrong_unit_is_refused(tmp_path: Path) -> None:
    """A 450e9 ``intra_node_gbps`` (B/s) priced a 1 GB all-reduce at its 10 us of latency alone."""
    f = tmp_path / "sys.toml"
    f.write_text("[systems.Lab]\ndevice='H100'\ngpus_per_node=8\nintra_node_gbps=450e9\nsource='s'\n")
    with pytest.raises(InvalidInputError, match=r"catalog file \S*sys.toml: system 'Lab': field intra_node_gbps"):
        Catalog.load([f])
    # an override of a packaged entry is checked after the merge, too
    f.write_text("[devices.H100-SXM]\nmem_bw_gbps = 3.35\n")
    with pytest.raises(InvalidInputError, match=r"device 'H100-SXM': field mem_bw_gbps = 3.35"):
        Catalog.load([f])


def test_plausible_extremes_still_load(tmp_path: Path) -> None:
    """The unit bounds leave room for real parts: a CPU profiled on one core (a few GB/s, TiB of host memory), a
    future GPU several times the packaged catalog's largest figures."""
    f = tmp_path / "ok.toml"
    f.write_text("[devices.OneCore]\nvendor='amd'\nkind='cpu'\npeak_tflops={fp32=0.05}\nmem_bw_gbps=4\n"
                 "mem_gib=6144\nboost_clock_mhz=2600\nsource='s'\n"
                 "[devices.Future]\nvendor='nvidia'\nkind='gpu'\npeak_tflops={fp32=400, fp4=100000}\n"
                 "mem_bw_gbps=40000\nmem_gib=2048\nl2_mib=1024\nlink_gbps=7200\nboost_clock_mhz=3000\nsource='s'\n")
    cat = Catalog.load([f])
    assert cat.device("OneCore").mem_bw == 4e9 and cat.device("Future").peak("fp4") == 1e17
    for dev in default_catalog().devices.values():  # every packaged entry passes its own check
        Device.from_entry(dev.key, dev.to_entry())


def test_an_override_says_which_figures_its_file_changed(tmp_path: Path) -> None:
    """An override kept the packaged ``source``: `hybrid devices show H100-SXM` credited NVIDIA's datasheet with a
    user's measured 3000 GB/s. The merged source names the fields and the file; a file's own source wins, and a
    field restated at its packaged value changes nothing."""
    packaged = default_catalog()
    f = tmp_path / "site.toml"
    f.write_text("[devices.H100-SXM]\nmem_bw_gbps = 3000\npeak_tflops = { bf16 = 800, fp32 = 67 }\n"
                 "[systems.DGX-H100]\ninter_node_gbps = 25\ngpus_per_node = 8\n")
    cat = Catalog.load([f])
    dev, sys_ = cat.device("H100-SXM"), cat.system("DGX-H100")
    assert dev.source == f"{packaged.device('H100-SXM').source}; mem_bw_gbps, peak_tflops from catalog file {f}"
    assert sys_.source == f"{packaged.system('DGX-H100').source}; inter_node_gbps from catalog file {f}"
    f.write_text("[devices.H100-SXM]\nmem_bw_gbps = 3000\nsource = 'our STREAM run'\n"
                 "[systems.DGX-H100]\ngpus_per_node = 8\nnotes = 'ours'\n")
    cat = Catalog.load([f])
    assert cat.device("H100-SXM").source == "our STREAM run"
    assert cat.system("DGX-H100").source == packaged.system("DGX-H100").source


def test_a_key_field_other_than_the_table_name_is_refused(tmp_path: Path) -> None:
    """``key`` is a known field (the JSON of `hybrid devices show` reads back) but the table's name is the key:
    ``key = "OTHER"`` under [devices.NEW] was dropped silently and the device stayed NEW."""
    f = tmp_path / "k.toml"
    gpu = "vendor='nvidia'\nkind='gpu'\npeak_tflops={fp32=60}\nmem_bw_gbps=4000\nmem_gib=96\nsource='s'\n"
    f.write_text("[devices.NEW]\nkey = 'OTHER'\n" + gpu)
    with pytest.raises(InvalidInputError, match=r"catalog file \S*k.toml: device 'NEW': field key = 'OTHER' differs"):
        Catalog.load([f])
    f.write_text("[systems.DGX-H100]\nkey = 'MyDGX'\n")
    with pytest.raises(InvalidInputError, match=r"system 'DGX-H100': field key = 'MyDGX' .*\[systems.DGX-H100\]"):
        Catalog.load([f])
    f.write_text("[devices.NEW]\nkey = 'NEW'\n" + gpu)  # the same name: what `devices show --json` prints
    assert Catalog.load([f]).device("NEW").key == "NEW"


def test_a_device_taking_a_packaged_system_name_is_told_to_rename_the_device(tmp_path: Path) -> None:
    """A file's new device named like a packaged system was refused with "rename the system": the file holds no
    system, so the advice must name its device."""
    f = tmp_path / "dev.toml"
    f.write_text("[devices.Lab-GPU]\nvendor='nvidia'\nkind='gpu'\npeak_tflops={fp32=60}\nmem_bw_gbps=4000\n"
                 "mem_gib=96\nsource='s'\naliases=['DGX-H100']\n")
    with pytest.raises(InvalidInputError) as exc:
        Catalog.load([f])
    msg = str(exc.value)
    assert msg.startswith(f"catalog file {f}: system 'DGX-H100'") and "rename device 'Lab-GPU'" in msg
    assert "rename the system" not in msg


@pytest.mark.parametrize("arch, hint", [("9.0", "sm_90?"), ("sm90", "sm_90?"), ("compute_90", "sm_90?"),
                                        ("12.0", "sm_120?"), ("hopper", "as nvcc names it, e.g."),
                                        ("gfx942", "as nvcc names it, e.g."), ("sm_9x", "as nvcc names it, e.g.")])
def test_an_nvidia_arch_that_is_no_compute_capability_is_refused(tmp_path: Path, arch: str, hint: str) -> None:
    """``arch = "9.0"`` (what `nvidia-smi --query-gpu=compute_cap` prints), ``sm90`` or ``hopper`` loaded as
    compute capability 0: the new GPU's NVSwitch system lost NVLS (and its attention the overlapped softmax)
    without a word. An NVIDIA GPU's arch is nvcc's name or nothing; other vendors' and CPUs' are free text."""
    f = tmp_path / "site.toml"
    gpu = "kind = 'gpu'\npeak_tflops = { fp32 = 60 }\nmem_bw_gbps = 4000\nmem_gib = 96\nsource = 's'\n"
    f.write_text(f"[devices.XG]\nvendor = 'nvidia'\narch = '{arch}'\n" + gpu)
    with pytest.raises(InvalidInputError, match=rf"catalog file \S*site.toml: device 'XG': field arch = "
                                                rf"'{re.escape(arch)}' is no NVIDIA compute capability.*{re.escape(hint)}"):
        Catalog.load([f])
    f.write_text(f"[devices.XG]\nvendor = 'amd'\narch = '{arch}'\n" + gpu)
    assert Catalog.load([f]).device("XG").arch == arch


@pytest.mark.parametrize("fabric", ["NV Switch", "NVLink-Switch", "nvlink_switch tray", "GB300 NVL 72", "NVL36"])
def test_an_nvswitch_fabric_is_read_whatever_its_separators(tmp_path: Path, fabric: str) -> None:
    """``intra_fabric = "NVLink-Switch"`` (or "NV Switch", "NVL 72") read as NVLink or PCIe: a new Hopper NVSwitch
    system written so lost NVLS and was costed as another fabric, without a word."""
    from hybrid.hardware.device import intra_fabric_class, nvls_capable

    f = tmp_path / "site.toml"
    f.write_text(f'[systems.Lab]\ndevice = "H100-SXM"\ngpus_per_node = 8\nintra_fabric = "{fabric}"\n'
                 'intra_node_gbps = 450\nsource = "s"\n')
    cat = Catalog.load([f])
    assert intra_fabric_class(cat.system("Lab")) == "nvswitch"
    assert nvls_capable(cat.system("Lab"), cat.device("H100-SXM"))


@pytest.mark.parametrize("fabric", ["UALink", "custom 900 GB/s fabric", "proprietary mesh"])
def test_an_intra_fabric_no_class_reads_is_refused(tmp_path: Path, fabric: str) -> None:
    """An ``intra_fabric`` that names no fabric the cost model reads was costed as PCIe without a word (its class
    picks the collective algorithms, NVLS and the transfer model's link type): refused naming the words it reads;
    left out, a system is PCIe as documented; written with other separators, the class is read the same."""
    from hybrid.hardware.device import intra_fabric_class

    def load(text: str | None):
        f = tmp_path / "site.toml"
        line = "" if text is None else f'intra_fabric = "{text}"\n'
        f.write_text(f'[systems.Lab]\ndevice = "H100-SXM"\ngpus_per_node = 8\n{line}intra_node_gbps = 450\n'
                     'source = "s"\n')
        return Catalog.load([f]).system("Lab")

    with pytest.raises(InvalidInputError, match=r"intra_fabric = .*names no GPU fabric the cost model reads"):
        load(fabric)
    assert intra_fabric_class(load(None)) == "pcie"
    assert intra_fabric_class(load("nv-link bridges, fully connected")) == "nvlink"
    assert intra_fabric_class(load("PCI-E gen5, bridged in pairs")) == "pcie-pairs"
