"""Describe the local CPU as a catalog device, so the roofline and corrections work on the machine at hand.

Datasheet-style numbers are estimated from ``/proc/cpuinfo`` (cores, SIMD width, clock); the profiler replaces
them with measured ceilings (large-GEMM FLOP/s, large-copy bandwidth) when it has run.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

from hybrid.hardware.device import Device

#: Key under which the local CPU appears in a catalog.
LOCAL_CPU_KEY = "local-cpu"


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


def describe_local_cpu(
    *,
    key: str = LOCAL_CPU_KEY,
    cores: int | None = None,
    measured_fp32_flops: float | None = None,
    measured_mem_bw: float | None = None,
    l3_bytes: float | None = None,
) -> Device:
    """A :class:`Device` for this machine's CPU.

    Without measurements, peak FP32 = cores x clock x FLOP/cycle (AVX-512: 64, AVX2+FMA: 32, else 8) and
    memory bandwidth defaults to a conservative 10 GB/s per core (capped at 200 GB/s).
    """
    info = _cpuinfo()
    if cores is not None:
        ncores = cores
    elif hasattr(os, "sched_getaffinity"):
        ncores = len(os.sched_getaffinity(0))
    else:
        ncores = os.cpu_count() or 1
    flags = info.get("flags", "")
    mhz_match = re.search(r"([0-9.]+)", info.get("cpu MHz", ""))
    mhz = float(mhz_match.group(1)) if mhz_match else 2500.0
    if "avx512f" in flags:
        flop_per_cycle = 64.0
    elif "avx2" in flags and "fma" in flags:
        flop_per_cycle = 32.0
    else:
        flop_per_cycle = 8.0
    fp32 = measured_fp32_flops or ncores * mhz * 1e6 * flop_per_cycle
    bw = measured_mem_bw or min(10e9 * ncores, 200e9)
    cache_match = re.search(r"([0-9.]+)\s*KB", info.get("cache size", ""))
    l3 = l3_bytes if l3_bytes is not None else (float(cache_match.group(1)) * 1024 if cache_match else 32 * 2**20)
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
