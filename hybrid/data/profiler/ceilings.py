"""Device ceilings: large-GEMM FLOP/s per dtype, large-copy memory bandwidth and the per-op launch cost.

These become the measured device's ``peak_tflops``, ``mem_bw_gbps`` and ``kernel_latency_us`` in the bundle's
``catalog.toml``. Ceilings use the *fastest* repeat (the attainable peak), not the median.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from hybrid.data.profiler.backend import Backend
from hybrid.data.profiler.cases import random_tensor, torch_dtype
from hybrid.data.profiler.timing import TimingPolicy, measure

#: Square GEMM edge for the FLOP/s ceiling, per (backend kind, quick).
GEMM_EDGE = {("cpu", False): 2048, ("cpu", True): 1024, ("cuda", False): 8192, ("cuda", True): 4096}
#: Copy buffer size floor (bytes); the buffer is also at least 8x the last-level cache.
COPY_BYTES = {("cpu", False): 512 * 2**20, ("cpu", True): 128 * 2**20, ("cuda", False): 2**31, ("cuda", True): 2**29}
CEILING_POLICY = TimingPolicy(warmup=1, min_repeats=3, max_repeats=12, target_s=0.6, max_s=3.0)
QUICK_CEILING_POLICY = TimingPolicy(warmup=1, min_repeats=3, max_repeats=6, target_s=0.15, max_s=1.0)


@dataclass
class Ceilings:
    """Measured ceilings (SI units) and how they were obtained."""

    peak_flops: dict[str, float]  # dtype -> FLOP/s
    mem_bw: float  # bytes/s, (read + written) / time for a large copy
    kernel_latency_us: float  # median time of a one-element add
    llc_bytes: int
    details: dict[str, object] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def ceiling_dtypes(backend: Backend) -> tuple[str, ...]:
    # CPU: fp16 GEMMs are not vectorised in PyTorch's CPU backend (far below 1 GFLOP/s), so not measured.
    return ("fp32", "tf32", "fp16", "bf16") if backend.is_cuda else ("fp32", "bf16")


def measure_ceilings(backend: Backend, *, quick: bool, llc_bytes: int) -> Ceilings:
    """Time a large square GEMM per dtype, a large copy, and a one-element add."""
    torch = backend.torch
    mode = ("cuda" if backend.is_cuda else "cpu", quick)
    policy = QUICK_CEILING_POLICY if quick else CEILING_POLICY
    dev = backend.torch_device
    edge = GEMM_EDGE[mode]
    peaks: dict[str, float] = {}
    details: dict[str, object] = {"gemm_edge": edge}
    for dtype in ceiling_dtypes(backend):
        if backend.is_cuda:
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        dt = torch_dtype(torch, dtype)
        a, b = random_tensor(torch, (edge, edge), dt, dev), random_tensor(torch, (edge, edge), dt, dev)
        t = measure(backend, lambda i, a=a, b=b: torch.mm(a, b), policy=policy)
        peaks[dtype] = 2.0 * edge**3 / (t.min_us * 1e-6)
        details[f"gemm_{dtype}_median_us"] = t.median_us
    if backend.is_cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
    nbytes = max(COPY_BYTES[mode], 8 * llc_bytes)
    t = _copy_timing(backend, nbytes, policy)
    mem_bw = 2.0 * nbytes / (t.min_us * 1e-6)
    details.update(copy_bytes=nbytes, copy_median_us=t.median_us, copy_median_gbps=2.0 * nbytes / t.median_us / 1e3)
    x, y = random_tensor(torch, (1,), torch.float32, dev), random_tensor(torch, (1,), torch.float32, dev)
    lat = measure(backend, lambda i: torch.add(x, y), policy=TimingPolicy(warmup=20, min_repeats=200,
                                                                         max_repeats=2000, target_s=0.05))
    details["tiny_add_min_us"] = lat.min_us
    return Ceilings(peak_flops=peaks, mem_bw=mem_bw, kernel_latency_us=lat.median_us, llc_bytes=int(llc_bytes),
                    details=details)


def _copy_timing(backend: Backend, nbytes: int, policy: TimingPolicy):
    torch = backend.torch
    src = random_tensor(torch, (nbytes // 4,), torch.float32, backend.torch_device)
    dst = torch.empty_like(src)
    return measure(backend, lambda i: dst.copy_(src), policy=policy)
