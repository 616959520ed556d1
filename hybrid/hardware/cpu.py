"""Describe the local CPU as a catalog device, so the roofline and corrections work on the machine at hand.

Datasheet-style numbers are estimated from ``/proc/cpuinfo`` (cores, SIMD width, clock); the profiler replaces
them with measured ceilings (large-GEMM FLOP/s, large-copy bandwidth) when it has run.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

from hybrid.errors import InvalidInputError
from hybrid.hardware.device import Device

#: Key under which the local CPU appears in a catalog.
LOCAL_CPU_KEY = "local-cpu"


def available_memory_bytes(meminfo: str | Path = "/proc/meminfo") -> float | None:
    """Host memory available to a new allocation (``MemAvailable`` of ``/proc/meminfo``, Linux), in bytes;
    None when unknown (no such file, or no parseable entry)."""
    try:
        for line in Path(meminfo).read_text(encoding="ascii", errors="replace").splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    path = Path("/proc/cpuinfo")
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                info.setdefault(k.strip(), v.strip())
    return info


def cpu_model_name() -> str:
    return _cpuinfo().get("model name", platform.processor() or platform.machine() or "unknown CPU")


#: Sysfs folder describing CPU 0 (caches, frequency limits) on Linux.
_SYSFS_CPU0 = Path("/sys/devices/system/cpu/cpu0")


def _sysfs_size(text: str) -> float | None:
    match = re.fullmatch(r"\s*([0-9]+)\s*([KMG]?)\s*", text)
    if not match:
        return None
    return float(match.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match.group(2)]


def last_level_cache_bytes(cpuinfo: dict[str, str] | None = None) -> float | None:
    """Size of the highest cache level CPU 0 sees (sysfs), else ``cache size`` from ``/proc/cpuinfo``."""
    best: tuple[int, float] | None = None
    for index in sorted(_SYSFS_CPU0.glob("cache/index*")):
        try:
            level = int((index / "level").read_text().strip())
            size = _sysfs_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if size is not None and (best is None or level > best[0]):
            best = (level, size)
    if best is not None:
        return best[1]
    match = re.search(r"([0-9.]+)\s*KB", (cpuinfo or _cpuinfo()).get("cache size", ""))
    return float(match.group(1)) * 1024 if match else None


def _max_clock_mhz(info: dict[str, str]) -> float:
    """Maximum clock (sysfs ``cpuinfo_max_freq``), else the current ``cpu MHz``, else 2.5 GHz."""
    try:
        return float((_SYSFS_CPU0 / "cpufreq" / "cpuinfo_max_freq").read_text().strip()) / 1000.0
    except (OSError, ValueError):
        pass
    match = re.search(r"([0-9.]+)", info.get("cpu MHz", ""))
    return float(match.group(1)) if match else 2500.0


def flops_per_cycle(info: dict[str, str]) -> float:
    """Peak FP32 FLOP per core per cycle from the SIMD flags (two FMA pipes assumed).

    AVX-512: 64, except AMD Zen 4 (family 25), whose 512-bit FMAs are double-pumped 256-bit units: 32.
    AVX2+FMA: 32. Anything else: 8.
    """
    flags = set(info.get("flags", "").split())
    if "avx512f" in flags:
        amd_zen4 = info.get("vendor_id") == "AuthenticAMD" and info.get("cpu family", "").strip() == "25"
        return 32.0 if amd_zen4 else 64.0
    if "avx2" in flags and "fma" in flags:
        return 32.0
    return 8.0


def describe_local_cpu(
    *,
    key: str = LOCAL_CPU_KEY,
    cores: int | None = None,
    measured_fp32_flops: float | None = None,
    measured_mem_bw: float | None = None,
    l3_bytes: float | None = None,
) -> Device:
    """A :class:`Device` for this machine's CPU.

    Without measurements, peak FP32 = cores x max clock x FLOP/cycle (:func:`flops_per_cycle`) and memory
    bandwidth defaults to a conservative 10 GB/s per core (capped at 200 GB/s). ``l2_cache`` holds the
    last-level cache (L3 on most x86 parts). Add the result to a catalog with ``catalog.with_device(dev)``.
    """
    info = _cpuinfo()
    if cores is not None:
        ncores = cores
    elif hasattr(os, "sched_getaffinity"):
        ncores = len(os.sched_getaffinity(0))
    else:
        ncores = os.cpu_count() or 1
    mhz = _max_clock_mhz(info)
    fp32 = measured_fp32_flops or ncores * mhz * 1e6 * flops_per_cycle(info)
    bw = measured_mem_bw or min(10e9 * ncores, 200e9)
    for name, value in (("cores", ncores), ("measured_fp32_flops", fp32), ("measured_mem_bw", bw)):
        if not value > 0:
            raise InvalidInputError(f"describe_local_cpu: {name} must be positive, got {value!r}")
    l3 = l3_bytes if l3_bytes is not None else (last_level_cache_bytes(info) or 32 * 2**20)
    try:
        mem_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        mem_total = 16 * 2**30
    measured = measured_fp32_flops is not None or measured_mem_bw is not None
    return Device(
        key=key,
        vendor="cpu",
        kind="cpu",
        arch=platform.machine(),
        peak_flops={"fp32": fp32, "fp64": fp32 / 2, "bf16": fp32, "fp16": fp32},
        mem_bw=bw,
        mem_capacity=float(mem_total),
        l2_cache=l3,
        num_sms=int(ncores),
        clock_mhz=mhz,
        kernel_latency_us=1.0,
        source=("measured by hybrid profile" if measured else "estimated from /proc/cpuinfo") + f": {cpu_model_name()}",
    )
