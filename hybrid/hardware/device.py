"""Device and system dataclasses. All quantities are stored in SI base units (FLOP/s, bytes/s, bytes, s)."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hybrid.errors import InvalidInputError
from hybrid.units import DTYPE_FALLBACK, normalize_dtype

#: Fields a device entry must define (TOML names, human units).
DEVICE_REQUIRED = ("vendor", "kind", "peak_tflops", "mem_bw_gbps", "mem_gib", "source")
#: Every field a device entry may have (a misspelt one is an error, not a silently ignored override).
DEVICE_FIELDS = frozenset({*DEVICE_REQUIRED, "arch", "l2_mib", "l2_bw_gbps", "sms", "boost_clock_mhz",
                           "sfu_per_clk_per_sm", "int32_per_clk_per_sm", "tdp_w", "link", "link_gbps", "pcie_gen", "host_link_gbps",
                           "kernel_latency_us",
                           "mem_bw_shared_gbps", "aliases", "notes", "key"})

#: The largest value a catalog field may hold, in its unit, and the unit slip a larger one suggests. Each bound is
#: at least ~7x the largest figure the packaged catalog holds (GB300's 15,000 TFLOP/s dense fp4, MI355X's 8,000 GB/s
#: and 288 GiB, HGX B300's 900 GB/s NVLink), yet below the same figure written in base units (FLOP/s, B/s, bytes)
#: or one prefix down (GB/s as MB/s, GiB as MiB, MHz as kHz), which the loader took silently: a 4e12
#: ``mem_bw_gbps`` (B/s written in GB/s) costed every memory-bound kernel at ~0 and a 450e9 ``intra_node_gbps``
#: an all-reduce of 1 GB at its latency alone.
UNIT_CEILINGS: dict[str, tuple[float, str]] = {
    "peak_tflops": (1e6, "TFLOP/s (1e12 FLOP/s): was it written in FLOP/s or GFLOP/s?"),
    "mem_bw_gbps": (1e5, "GB/s (1e9 B/s): was it written in B/s or MB/s?"),
    "mem_bw_shared_gbps": (1e5, "GB/s (1e9 B/s): was it written in B/s or MB/s?"),
    "l2_bw_gbps": (1e6, "GB/s (1e9 B/s): was it written in B/s or MB/s?"),
    "link_gbps": (1e5, "GB/s per direction (1e9 B/s): was it written in B/s, b/s or MB/s?"),
    "host_link_gbps": (1e5, "GB/s per direction (1e9 B/s): was it written in B/s, b/s or MB/s?"),
    "l2_mib": (1e4, "MiB: was it written in bytes or KiB?"),
    "boost_clock_mhz": (1e4, "MHz: was it written in Hz or kHz?"),
    "tdp_w": (1e5, "W: was it written in mW?"),
    "kernel_latency_us": (1e4, "us: was it written in ns?"),
    "intra_node_gbps": (1e5, "GB/s per GPU per direction (1e9 B/s): was it written in B/s, b/s or MB/s?"),
    "inter_node_gbps": (1e5, "GB/s per GPU per direction (1e9 B/s): was it written in B/s, b/s or MB/s?"),
    "intra_latency_us": (1e5, "us: was it written in ns?"),
    "inter_latency_us": (1e5, "us: was it written in ns?"),
    "host_mem_gib": (1e6, "GiB: was it written in bytes or MiB?"),
}
#: ``mem_gib`` of one GPU (of a CPU device: its host's memory, up to UNIT_CEILINGS's 1e6 GiB): 10 TiB, ~35x MI355X's
#: 288 GiB and below an 80 GiB card written in MiB (81,920).
GPU_MEM_GIB_CEILING = 1e4
#: The least a non-zero ``boost_clock_mhz`` may be: a clock written in GHz (``1.98``) rather than MHz; no catalog
#: device, GPU or CPU, boosts below 50 MHz.
MIN_BOOST_CLOCK_MHZ = 50.0
#: The least a GPU's ``mem_bw_gbps`` may be: a bandwidth written in TB/s (``3.35``) rather than GB/s; the slowest
#: catalog GPU (M60) has 160 GB/s, a Jetson Nano 25.6. CPUs are exempt: one core of a profile may stream ~10 GB/s.
MIN_GPU_MEM_BW_GBPS = 10.0


def check_units(what: str, key: str, entry: dict[str, Any], kind: str = "") -> None:
    """Refuse a catalog value whose size says it was written in another unit than the field's (bytes for GiB, B/s
    for GB/s, GHz for MHz: :data:`UNIT_CEILINGS`, :data:`MIN_BOOST_CLOCK_MHZ`, :data:`MIN_GPU_MEM_BW_GBPS`),
    naming the field, its unit and the likely slip. Run after the fields are known to be finite numbers."""
    def refuse(name: str, value: float, bound: str, hint: str) -> None:
        raise InvalidInputError(f"{what} {key!r}: field {name} = {value:g} is {bound}, implausible in "
                                f"{hint}")

    for name, (ceiling, hint) in UNIT_CEILINGS.items():
        if name not in entry:
            continue
        values = entry[name].items() if isinstance(entry[name], dict) else [(None, entry[name])]
        for sub, value in values:
            if float(value) > ceiling:
                refuse(name if sub is None else f"{name}.{sub}", float(value), f"above {ceiling:,.0f}", hint)
    if kind == "gpu" and float(entry.get("mem_gib", 0)) > GPU_MEM_GIB_CEILING:
        refuse("mem_gib", float(entry["mem_gib"]), f"above {GPU_MEM_GIB_CEILING:,.0f} (for one GPU's memory)",
               "GiB: was it written in bytes or MiB?")
    clock = float(entry.get("boost_clock_mhz", 0))
    if 0 < clock < MIN_BOOST_CLOCK_MHZ:
        refuse("boost_clock_mhz", clock, f"below {MIN_BOOST_CLOCK_MHZ:g}", "MHz: was it written in GHz?")
    if kind == "gpu" and float(entry.get("mem_bw_gbps", MIN_GPU_MEM_BW_GBPS)) < MIN_GPU_MEM_BW_GBPS:
        refuse("mem_bw_gbps", float(entry["mem_bw_gbps"]), f"below {MIN_GPU_MEM_BW_GBPS:g} (for a GPU's memory)",
               "GB/s (1e9 B/s): was it written in TB/s?")


#: L2 bytes per clock per SM of the A100 whitepaper (5120 B/clk, 108 SMs): the estimate :meth:`Device.l2_bandwidth`
#: uses for GPUs whose L2 bandwidth is not published.
L2_BYTES_PER_CLK_PER_SM = 5120 / 108
#: PCIe generations a catalog ``pcie_gen`` may name (0 = not stated). The bandwidth tables that read it
#: (``hybrid.ops.roofline.PCIE_GBPS``, ``hybrid.workloads.dlrm_graph.PCIE_X16_BW``) know each of them: a generation
#: they lacked (``pcie_gen = 7`` for a PCIe 7.0 design) was priced as PCIe gen3 (or gen4) without a word.
PCIE_GENERATIONS = range(0, 8)
#: The generation a device that states none (``pcie_gen = 0``) is priced as, wherever PCIe is read (a generic
#: node's GPU-to-GPU path, a host link): gen 4, the slot of the A100 / MI100 generation onwards. The roofline read
#: gen 3 and DLRM's host link gen 4 before, so one user device had two PCIe speeds.
PCIE_GEN_NOT_STATED = 4
#: An NVIDIA ``arch``: ``sm_90``, or with the arch-specific / family-specific suffix (``sm_90a``, ``sm_100f``).
_SM_ARCH = re.compile(r"sm_(\d+)[af]?")


@dataclass(frozen=True)
class Device:
    """One accelerator (or CPU socket) with its datasheet ceilings.

    ``peak_flops`` maps canonical dtype names to *dense* peak FLOP/s (no 2:4 sparsity). For GPUs ``fp32``
    is the non-tensor-core FP32 rate and ``tf32`` the tensor-core TF32 rate.
    """

    key: str
    vendor: str
    kind: str  # "gpu" or "cpu"
    peak_flops: dict[str, float]
    mem_bw: float  # bytes/s
    mem_capacity: float  # bytes
    source: str
    arch: str = ""
    l2_cache: float = 0.0  # bytes (last-level cache)
    #: L2 read bandwidth, bytes/s, where the vendor publishes it (0: :meth:`l2_bandwidth` estimates it)
    l2_bw: float = 0.0
    num_sms: int = 0  # SMs / CUs / cores
    clock_mhz: float = 0.0  # boost clock
    #: special-function-unit ops (exp, the softmax's transcendental) per SM / CU per clock: 16 on NVIDIA SMs from
    #: Volta to Blackwell and on AMD CDNA CUs (quarter-rate transcendentals on 64 lanes), 32 on Blackwell Ultra
    sfu_per_sm_clk: float = 16.0
    #: 32-bit integer ops per SM / CU per clock (the INT32 lanes: 64 on NVIDIA SMs from Volta to Blackwell, which
    #: Hopper's doubled FP32 lanes did not double; 64 lanes per AMD CDNA CU): the rate of a fused attention's
    #: dropout mask, a counter-based Philox random number per score
    int32_per_sm_clk: float = 64.0
    tdp_w: float = 0.0
    link_bw: float = 0.0  # GPU-to-GPU (NVLink / Infinity Fabric) bytes/s per direction, all links of one GPU
    link_name: str = ""
    pcie_gen: int = 0
    #: bytes/s per direction between the GPU and its host's memory over a link that is not PCIe (NVLink-C2C of a
    #: Grace superchip); 0: a PCIe x16 slot of ``pcie_gen`` (``hybrid.workloads.dlrm_graph.host_link_bw``)
    host_link_bw: float = 0.0
    kernel_latency_us: float = 4.0  # fixed per-kernel cost (launch + ramp) used by the roofline
    #: bytes/s the whole memory system sustains with every core streaming at once (0 = not measured). A CPU's
    #: ``mem_bw`` is one core's stream; ranks sharing the socket share this (``hybrid.engine.costs``).
    mem_bw_shared: float = 0.0
    aliases: tuple[str, ...] = ()
    notes: str = ""

    def peak_dtype(self, dtype: str) -> str:
        """The dtype whose peak :meth:`peak` uses for ``dtype``: itself, or the first fallback of
        :data:`~hybrid.units.DTYPE_FALLBACK` (a slower dtype) the device has units for."""
        name = normalize_dtype(dtype)
        if name in self.peak_flops:
            return name
        for alt in DTYPE_FALLBACK.get(name, ()):
            # a bf16 listed at the FP32 rate (no bf16 units: :meth:`lacks_units`) is FP32, and named so; a CPU's bf16
            # units (AMX, AVX512-BF16) do not run fp16 or int8: those stay on its FP32 path
            if alt == "bf16" and (self.lacks_units(alt) and "fp32" in self.peak_flops
                                  or self.kind != "gpu" and name in ("fp16", "int8")):
                continue
            if alt in self.peak_flops:
                return alt
        raise InvalidInputError(f"device {self.key} has no peak for dtype {name} (known: {sorted(self.peak_flops)})")

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``, falling back to a slower dtype the hardware does run
        (:meth:`peak_dtype` says which)."""
        return self.peak_flops[self.peak_dtype(dtype)]

    def lacks_units(self, dtype: str) -> bool:
        """True when ``dtype`` has no arithmetic units of its own on this GPU and runs converted to FP32: bf16 on
        GPUs before Ampere / CDNA2, which the catalog lists at the FP32 rate ("no bf16 hardware"). Frameworks
        accept it there, so nothing refuses it, but it runs at a fraction of the 16-bit rate a user may expect."""
        name = normalize_dtype(dtype)
        return (self.kind == "gpu" and name == "bf16" and "bf16" in self.peak_flops and "fp32" in self.peak_flops
                and self.peak_flops["bf16"] <= self.peak_flops["fp32"])

    def slow_dtype_note(self, dtype: str) -> str:
        """A one-line warning for a dtype this GPU runs without units of its own ('' otherwise)."""
        if not self.lacks_units(dtype):
            return ""
        fast = [d for d in ("fp16",) if self.peak_flops.get(d, 0.0) > self.peak_flops["fp32"]]
        tip = f"; fp16 runs on its {self.peak_flops['fp16'] / 1e12:.4g} TFLOP/s units" if fast else ""
        return (f"{self.key} has no {normalize_dtype(dtype)} units: it runs converted to fp32, at the fp32 peak "
                f"({self.peak_flops['fp32'] / 1e12:.4g} TFLOP/s){tip}")

    @property
    def half_accumulates_in_half(self) -> bool:
        """True for GPUs whose 16-bit float units add in 16 bits only: NVIDIA before Volta's tensor cores (P100's
        half2 FMA at 2x FP32, consumer and inference Pascal at 1/64) and AMD Vega 10 (gfx900, packed half FMA;
        Vega 20's ``v_dot2_f32_f16`` sums in FP32 at the packed rate)."""
        if self.kind != "gpu":
            return False
        if str(self.vendor).lower() == "nvidia":
            return 0 < self.compute_capability < 70
        return str(self.arch).lower() == "gfx900"

    def compute_peak_dtype(self, dtype: str) -> str:
        """The units a kernel in ``dtype`` runs on as libraries build it: :meth:`peak_dtype`, except FP16
        on a GPU whose 16-bit units add in 16 bits (:attr:`half_accumulates_in_half`): cuBLAS / rocBLAS GEMMs and
        convolutions with FP32 sums (PyTorch's and DeepBench's default for FP16) and PyTorch's elementwise math
        (computed in FP32 registers) run on the FP32 units there. DeepBench's FP16 GEMMs on a P100 peak at 9.1
        TFLOP/s, its FP32 rate, not the 18.7 of its half2 units."""
        name = self.peak_dtype(dtype)
        if name == "fp16" and self.half_accumulates_in_half and "fp32" in self.peak_flops:
            return "fp32"
        return name

    def compute_peak(self, dtype: str) -> float:
        """Peak FLOP/s of the units :meth:`compute_peak_dtype` names: the roofline's compute ceiling (:meth:`peak`
        stays the datasheet figure, e.g. for MFU)."""
        return self.peak_flops[self.compute_peak_dtype(dtype)]

    @property
    def compute_capability(self) -> int:
        """NVIDIA compute capability as an integer (``arch`` ``sm_90`` -> 90); 0 for other vendors or no ``arch``.

        The architecture-specific and family-specific targets nvcc and XLA print (``sm_90a``, ``sm_100a``,
        ``sm_100f``) are the same compute capability: a catalog file that copies one into ``arch`` read as 0 before,
        which turned off what depends on the generation (NVLS on an NVSwitch node, the HGX switch of a generic node,
        the overlapped attention softmax)."""
        match = _SM_ARCH.fullmatch(str(self.arch).strip().lower())
        return int(match.group(1)) if str(self.vendor).lower() == "nvidia" and match else 0

    @property
    def pcie_generation(self) -> int:
        """The PCIe generation its PCIe links are priced at: ``pcie_gen``, or :data:`PCIE_GEN_NOT_STATED`."""
        return self.pcie_gen or PCIE_GEN_NOT_STATED

    def l2_bandwidth(self) -> float:
        """L2 read bandwidth in bytes/s: the catalog's published figure, else an estimate from the SMs and clock at
        A100's published rate per SM (5120 B/clk over 108 SMs; a rough figure across generations: V100's published
        2048 B/clk is half that rate per SM); 0 where neither is known."""
        if self.l2_bw > 0:
            return self.l2_bw
        return L2_BYTES_PER_CLK_PER_SM * self.num_sms * self.clock_mhz * 1e6

    @property
    def exp_rate(self) -> float:
        """Exponentials per second the special-function units sustain (SFU ops x SMs x boost clock); 0 for a CPU
        (exps are vectorised polynomials on its FMA units, already in the FLOP ceiling) or when SMs / clock are
        unknown."""
        if self.kind != "gpu" or self.num_sms <= 0 or self.clock_mhz <= 0:
            return 0.0
        return self.sfu_per_sm_clk * self.num_sms * self.clock_mhz * 1e6

    @property
    def int_rate(self) -> float:
        """32-bit integer ops per second (INT32 lanes x SMs x boost clock); 0 for a CPU or when SMs / clock are
        unknown."""
        if self.kind != "gpu" or self.num_sms <= 0 or self.clock_mhz <= 0:
            return 0.0
        return self.int32_per_sm_clk * self.num_sms * self.clock_mhz * 1e6

    def features(self) -> dict[str, float]:
        """Numeric description used by learned corrections to transfer across devices."""
        return {
            "dev_peak_fp32": self.peak("fp32"),
            "dev_peak_fp16": self.peak("fp16"),
            "dev_mem_bw": self.mem_bw,
            "dev_l2_cache": self.l2_cache,
            "dev_num_sms": float(self.num_sms),
            "dev_clock_mhz": self.clock_mhz,
            "dev_mem_capacity": self.mem_capacity,
        }

    @classmethod
    def from_entry(cls, key: str, entry: dict[str, Any]) -> Device:
        """Build from a catalog entry in human units (TFLOP/s, GB/s, GiB, MiB)."""
        missing = [f for f in DEVICE_REQUIRED if f not in entry]
        if missing:
            raise InvalidInputError(f"device {key!r}: missing field(s) {', '.join(missing)}")
        check_entry_fields("device", key, entry, DEVICE_FIELDS)
        peaks = {}
        if not isinstance(entry["peak_tflops"], dict):
            raise InvalidInputError(f"device {key!r}: peak_tflops must be a table of TFLOP/s per dtype "
                                    f"({{ fp32 = ..., bf16 = ... }}), got {entry['peak_tflops']!r}")
        for dt, value in entry["peak_tflops"].items():
            try:
                dtype = normalize_dtype(dt)
            except InvalidInputError as exc:  # say where: a catalog file may hold many devices
                raise InvalidInputError(f"device {key!r}: peak_tflops: {exc}") from None
            peaks[dtype] = _positive(key, f"peak_tflops.{dt}", value) * 1e12
        if "fp32" not in peaks:
            raise InvalidInputError(f"device {key!r}: peak_tflops must include fp32")
        kind = str(entry["kind"]).lower()
        if kind not in ("gpu", "cpu"):
            raise InvalidInputError(f"device {key!r}: kind must be 'gpu' or 'cpu', got {kind!r}")
        _check_nvidia_arch(key, str(entry["vendor"]).lower(), kind, str(entry.get("arch", "")))
        device = cls(
            key=key,
            vendor=str(entry["vendor"]).lower(),
            kind=kind,
            arch=str(entry.get("arch", "")),
            peak_flops=peaks,
            mem_bw=_positive(key, "mem_bw_gbps", entry["mem_bw_gbps"]) * 1e9,
            mem_capacity=_positive(key, "mem_gib", entry["mem_gib"]) * 2**30,
            l2_cache=_nonneg(key, "l2_mib", entry.get("l2_mib", 0.0)) * 2**20,
            l2_bw=_nonneg(key, "l2_bw_gbps", entry.get("l2_bw_gbps", 0.0)) * 1e9,
            num_sms=_count(key, "sms", entry.get("sms", 0), positive=False),
            clock_mhz=_nonneg(key, "boost_clock_mhz", entry.get("boost_clock_mhz", 0.0)),
            sfu_per_sm_clk=_positive(key, "sfu_per_clk_per_sm", entry.get("sfu_per_clk_per_sm", 16.0)),
            int32_per_sm_clk=_positive(key, "int32_per_clk_per_sm", entry.get("int32_per_clk_per_sm", 64.0)),
            tdp_w=_nonneg(key, "tdp_w", entry.get("tdp_w", 0.0)),
            link_bw=_nonneg(key, "link_gbps", entry.get("link_gbps", 0.0)) * 1e9,
            link_name=str(entry.get("link", "")),
            pcie_gen=_pcie_gen(key, entry.get("pcie_gen", 0)),
            host_link_bw=_nonneg(key, "host_link_gbps", entry.get("host_link_gbps", 0.0)) * 1e9,
            kernel_latency_us=_nonneg(key, "kernel_latency_us", entry.get("kernel_latency_us", 4.0 if kind == "gpu" else 1.0)),
            mem_bw_shared=_nonneg(key, "mem_bw_shared_gbps", entry.get("mem_bw_shared_gbps", 0.0)) * 1e9,
            aliases=_names(key, "aliases", entry.get("aliases", ())),
            source=str(entry["source"]),
            notes=str(entry.get("notes", "")),
        )
        check_units("device", key, entry, kind)  # every number is a finite one by now
        return device

    def to_entry(self) -> dict[str, Any]:
        """Inverse of :meth:`from_entry` (human units), for display and JSON output."""
        return {
            "key": self.key,
            "vendor": self.vendor,
            "kind": self.kind,
            "arch": self.arch,
            "peak_tflops": {k: v / 1e12 for k, v in self.peak_flops.items()},
            "mem_bw_gbps": self.mem_bw / 1e9,
            "mem_gib": self.mem_capacity / 2**30,
            "l2_mib": self.l2_cache / 2**20,
            "l2_bw_gbps": self.l2_bw / 1e9,
            "sms": self.num_sms,
            "boost_clock_mhz": self.clock_mhz,
            "sfu_per_clk_per_sm": self.sfu_per_sm_clk,
            "int32_per_clk_per_sm": self.int32_per_sm_clk,
            "tdp_w": self.tdp_w,
            "link": self.link_name,
            "link_gbps": self.link_bw / 1e9,
            "pcie_gen": self.pcie_gen,
            "host_link_gbps": self.host_link_bw / 1e9,
            "kernel_latency_us": self.kernel_latency_us,
            "mem_bw_shared_gbps": self.mem_bw_shared / 1e9,
            "aliases": list(self.aliases),
            "source": self.source,
            "notes": self.notes,
        }


#: Fields a system entry must define.
SYSTEM_REQUIRED = ("device", "gpus_per_node", "intra_node_gbps", "source")
#: Every field a system entry may have.
SYSTEM_FIELDS = frozenset({*SYSTEM_REQUIRED, "intra_fabric", "inter_node_gbps", "inter_fabric", "intra_latency_us",
                           "inter_latency_us", "max_nodes", "aliases", "notes", "measured_links", "nvls", "key",
                           "host_mem_gib", "host_mem_source", "host_mem_borrowed_by"})


def check_entry_fields(what: str, key: str, entry: dict[str, Any], known: frozenset[str]) -> None:
    """A clear error for a catalog entry field no device (system) has, with the closest known name: a misspelt
    override would otherwise change nothing, silently."""
    unknown = sorted(set(entry) - known)
    if unknown:
        hints = [f"{u} (did you mean {m[0]}?)" if (m := difflib.get_close_matches(u, sorted(known), n=1)) else u
                 for u in unknown]
        raise InvalidInputError(f"{what} {key!r}: unknown field(s) {', '.join(hints)}; known: {', '.join(sorted(known))}")


@dataclass(frozen=True)
class System:
    """A node type (and optionally a cluster of them): GPUs per node, intra-node fabric, NICs.

    Bandwidths are per GPU and per direction: ``intra_bw`` is what one GPU can push to its peers inside the node
    (NVLink/NVSwitch or PCIe), ``inter_bw`` what one GPU can push out of the node (its share of the NICs).
    They are datasheet link rates unless ``measured_links`` names them (``"intra"``, ``"inter"``): then the entry
    gives the bus bandwidth collectives were measured to reach on this system (nccl-tests ``busbw``), which
    already includes the protocol efficiency a datasheet rate does not.
    """

    key: str
    device: str
    gpus_per_node: int
    intra_bw: float  # bytes/s per GPU per direction
    source: str
    intra_fabric: str = ""
    inter_bw: float = 0.0  # bytes/s per GPU per direction (NIC share); 0 = single node only
    inter_fabric: str = ""
    intra_latency_us: float = 5.0  # per algorithm step inside a node
    inter_latency_us: float = 10.0  # per algorithm step across nodes
    max_nodes: int = 1
    aliases: tuple[str, ...] = ()
    notes: str = ""
    #: which of the two bandwidths ("intra", "inter") are measured bus bandwidths rather than datasheet rates
    measured_links: tuple[str, ...] = ()
    #: NVLink SHARP (in-switch reduction, NCCL's NVLS algorithm) on the intra-node fabric: None = decided from the
    #: hardware (an NVSwitch node of Hopper or later NVIDIA GPUs), True / False = the entry says so (``nvls``)
    nvls: bool | None = None
    #: host (CPU) memory per node, bytes (datasheet ``host_mem_gib``); 0 = not stated (nothing checks it)
    host_mem: float = 0.0
    #: what states ``host_mem`` (``host_mem_source``, e.g. "DGX H100 datasheet (2 TB DDR5)"; a catalog file that
    #: sets ``host_mem_gib`` without one: "catalog file PATH")
    host_mem_source: str = ""
    #: names of this entry (its key or aliases) that ``host_mem_source`` does not describe, ``host_mem_borrowed_by``:
    #: HGX baseboards ship in OEM servers whose host memory varies, so for them the figure is borrowed from the DGX
    host_mem_borrowed_by: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def single_node(self) -> bool:
        """One node and no network between nodes in the catalog: a job cannot span several of them."""
        return self.max_nodes <= 1 and self.inter_bw <= 0

    def host_mem_origin(self, name: str | None = None) -> tuple[str, str]:
        """Where ``host_mem`` comes from for this system as named ``name`` (default: its key): ``(kind, note)``,
        kind ``"stated"`` (the source describes this very system: its datasheet, or a catalog file),
        ``"borrowed"`` (a name in ``host_mem_borrowed_by``: another system's figure, an assumption) or
        ``"unstated"`` (no host memory in the catalog: nothing checks it)."""
        from hybrid.hardware.catalog import normalize_name

        if self.host_mem <= 0:
            return "unstated", f"the catalog states no host memory for {self.key}: not checked"
        source = self.host_mem_source or f"catalog entry {self.key}"
        named = normalize_name(name if name is not None else self.key)
        if named in {normalize_name(n) for n in self.host_mem_borrowed_by}:
            return "borrowed", (f"assumed, borrowed from the {source}; {name or self.key} servers come from several "
                                "vendors and their host memory varies: give yours with --host-mem-gib")
        return "stated", source

    def check_layout(self, ranks: int, nodes: int, generic: bool = False) -> str:
        """A collective's ``ranks`` over ``nodes`` must fit this system: at most ``gpus_per_node`` ranks per
        node, the same number on every node, one node of a single-node system; else :class:`InvalidInputError`
        (``generic``: the system is a generic node of its device, not a catalog entry, and says so). Returns a
        note where the layout is costed beyond what the catalog describes ('' otherwise): more than ``max_nodes``
        nodes of a system with a network, whose network is costed as if it scaled that far, as the engine and
        every workload do (the largest installation a catalog entry describes is no limit of the design)."""
        what = (f"a generic node of {self.device} ({self.gpus_per_node} GPUs per node, no catalog system)"
                if generic else f"system {self.key} ({self.gpus_per_node} GPUs per node)")
        if ranks < 1 or nodes < 1:
            raise InvalidInputError(f"--ranks and --nodes must be positive, got {ranks} and {nodes}")
        if ranks < nodes:
            raise InvalidInputError(f"{ranks} rank(s) cannot span {nodes} nodes: every node needs a rank")
        if ranks > nodes * self.gpus_per_node:
            need = -(-ranks // self.gpus_per_node)
            raise InvalidInputError(f"{ranks} ranks do not fit on {nodes} node(s) of {what}: "
                                    f"use --nodes {need} or more")
        if ranks % nodes:
            raise InvalidInputError(f"{ranks} ranks do not split evenly over {nodes} nodes of {what}; the model "
                                    "assumes the same number of ranks on every node")
        if nodes > 1 and self.single_node:
            raise InvalidInputError(f"{what} is a single node (no network between nodes in the catalog); got --nodes "
                                    f"{nodes}")
        if nodes > self.max_nodes:
            return (f"{nodes} nodes of {self.key}, more than the {self.max_nodes} the catalog describes: its network "
                    "is costed as if it scaled that far")
        return ""

    @classmethod
    def from_entry(cls, key: str, entry: dict[str, Any]) -> System:
        missing = [f for f in SYSTEM_REQUIRED if f not in entry]
        if missing:
            raise InvalidInputError(f"system {key!r}: missing field(s) {', '.join(missing)}")
        check_entry_fields("system", key, entry, SYSTEM_FIELDS)
        gpn = _count(key, "gpus_per_node", entry["gpus_per_node"])
        measured = _names(key, "measured_links", entry.get("measured_links", ()))
        if set(measured) - {"intra", "inter"}:
            raise InvalidInputError(f"system {key!r}: measured_links may name 'intra' and 'inter', got {list(measured)}")
        host_mem = _nonneg(key, "host_mem_gib", entry.get("host_mem_gib", 0.0)) * 2**30
        borrowed = _names(key, "host_mem_borrowed_by", entry.get("host_mem_borrowed_by", ()))
        if borrowed:
            from hybrid.hardware.catalog import normalize_name

            names = {normalize_name(n) for n in (key, *_names(key, "aliases", entry.get("aliases", ())))}
            strangers = [b for b in borrowed if normalize_name(b) not in names]
            if strangers or host_mem <= 0:
                raise InvalidInputError(
                    f"system {key!r}: host_mem_borrowed_by names the entry's own names (key or aliases) that borrow "
                    f"its host_mem_gib; got {strangers or list(borrowed)}"
                    + ("" if host_mem > 0 else " without host_mem_gib"))
        max_nodes = _count(key, "max_nodes", entry.get("max_nodes", 1))
        inter_bw = _nonneg(key, "inter_node_gbps", entry.get("inter_node_gbps", 0.0)) * 1e9
        if max_nodes > 1 and inter_bw <= 0:  # several nodes and no network: costed at a default NIC no one stated
            raise InvalidInputError(f"system {key!r}: max_nodes {max_nodes} but no inter_node_gbps (the GPU's share "
                                    "of the node's NICs, GB/s per direction): collectives across its nodes would "
                                    "be costed at an assumed NIC; give inter_node_gbps, or max_nodes = 1 for a "
                                    "single node")
        system = cls(
            key=key,
            device=str(entry["device"]),
            gpus_per_node=gpn,
            intra_bw=_positive(key, "intra_node_gbps", entry["intra_node_gbps"]) * 1e9,
            intra_fabric=str(entry.get("intra_fabric", "")),
            inter_bw=inter_bw,
            inter_fabric=str(entry.get("inter_fabric", "")),
            intra_latency_us=_nonneg(key, "intra_latency_us", entry.get("intra_latency_us", 5.0)),
            inter_latency_us=_nonneg(key, "inter_latency_us", entry.get("inter_latency_us", 10.0)),
            max_nodes=max_nodes,
            aliases=_names(key, "aliases", entry.get("aliases", ())),
            source=str(entry["source"]),
            notes=str(entry.get("notes", "")),
            measured_links=measured,
            nvls=_optional_bool(key, "nvls", entry.get("nvls")),
            host_mem=host_mem,
            host_mem_source=str(entry.get("host_mem_source", "")),
            host_mem_borrowed_by=borrowed,
        )
        check_units("system", key, entry)  # every number is a finite one by now
        return system

    def to_entry(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "device": self.device,
            "gpus_per_node": self.gpus_per_node,
            "intra_fabric": self.intra_fabric,
            "intra_node_gbps": self.intra_bw / 1e9,
            "inter_fabric": self.inter_fabric,
            "inter_node_gbps": self.inter_bw / 1e9,
            "intra_latency_us": self.intra_latency_us,
            "inter_latency_us": self.inter_latency_us,
            "max_nodes": self.max_nodes,
            "aliases": list(self.aliases),
            "source": self.source,
            "notes": self.notes,
            **({"measured_links": list(self.measured_links)} if self.measured_links else {}),
            **({"nvls": self.nvls} if self.nvls is not None else {}),
            **({"host_mem_gib": self.host_mem / 2**30} if self.host_mem > 0 else {}),
            **({"host_mem_source": self.host_mem_source} if self.host_mem_source else {}),
            **({"host_mem_borrowed_by": list(self.host_mem_borrowed_by)} if self.host_mem_borrowed_by else {}),
        }


def fabric_class(text: str) -> str | None:
    """The fabric class an ``intra_fabric`` text names: ``pcie-pairs`` (PCIe cards bridged in pairs), ``nvswitch``
    (NVSwitch, an NVLink switch, an NVL36 / NVL72 rack), ``nvlink``, ``infinity-fabric`` (or xGMI) or ``pcie``; any
    case, any separator or none between the words; None for text that names none of them (``UALink``)."""
    # separators as one space: "NVLink-Switch", "NV Switch" or "NVL 36" read as PCIe (or NVLink) before, so a new
    # NVSwitch system written so lost NVLS and was costed as another fabric, without a word
    t = re.sub(r"[\s_\-]+", " ", text.lower())
    pcie = re.search(r"pci ?e|pci express", t) is not None
    if pcie and ("pair" in t or "bridge" in t):
        return "pcie-pairs"
    if re.search(r"nv ?switch|nv ?link ?switch|(?<![a-z0-9])nvl ?\d+", t):
        return "nvswitch"
    if re.search(r"nv ?link", t):
        return "nvlink"
    if "infinity" in t or "xgmi" in t:
        return "infinity-fabric"
    return "pcie" if pcie else None


def intra_fabric_class(system: System) -> str:
    """Class of a system's intra-node links (:func:`fabric_class` of its ``intra_fabric``): text naming no class,
    or none at all, is ``pcie`` (a GPU system's unreadable text is refused when its catalog loads)."""
    return fabric_class(system.intra_fabric) or "pcie"


def full_mesh(system: System) -> bool:
    """Whether the node's GPUs are linked point to point, every pair directly (Polaris' NVLink3, AMD's xGMI): a GPU's
    ``intra_bw`` is spread over its links to the other ``gpus_per_node - 1`` GPUs, so a collective among fewer of
    them reaches only the links to those (two Polaris GPUs: 100 of 300 GB/s). Read from ``intra_fabric``."""
    return "fully connected" in system.intra_fabric.lower()


def pair_bridge_bw(system: System, device: Device | None) -> float:
    """Bytes/s per direction of the bridge between two GPUs of a ``pcie-pairs`` system (PCIe cards bridged in
    pairs, :func:`intra_fabric_class`): the device's link where it is faster than the node's ``intra_bw``, else 0.
    A collective of at most 2 GPUs per node runs over the bridge; with more, a ring crosses PCIe between pairs
    and the node's ``intra_bw`` bounds it."""
    if device is None or intra_fabric_class(system) != "pcie-pairs":
        return 0.0
    return device.link_bw if device.link_bw > system.intra_bw else 0.0


def nvls_capable(system: System, device: Device | None) -> bool:
    """Whether NCCL's NVLS all-reduce (NVLink SHARP: the NVSwitch reduces and multicasts) runs on ``system``: the
    entry's ``nvls`` where given, else an NVSwitch node (:func:`intra_fabric_class`) of NVIDIA GPUs of compute
    capability 9.0 or later (Hopper: third-generation NVSwitch, the first with SHARP; NCCL 2.17+ picks NVLS there
    by default)."""
    if system.nvls is not None:
        return bool(system.nvls)
    return (device is not None and device.compute_capability >= 90
            and intra_fabric_class(system) == "nvswitch")


def nvls_bus_factor(ranks_per_node: Any) -> Any:
    """Bytes per message byte on a GPU's busier link direction for NVLS all-reduce with ``g`` GPUs of a node:
    reduce-scatter by in-switch loads (send the whole buffer once, receive the reduced 1/g), all-gather by multicast
    stores (send 1/g once, receive the other (g - 1)/g): (g + 1)/g, against the ring's 2 (g - 1)/g."""
    g = np.maximum(np.asarray(ranks_per_node, dtype=np.float64), 1.0)
    return (g + 1.0) / g


def _optional_bool(key: str, name: str, value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise InvalidInputError(f"{key!r}: field {name} must be true or false, got {value!r}")


def _check_nvidia_arch(key: str, vendor: str, kind: str, arch: str) -> None:
    """An NVIDIA GPU's ``arch`` must be a compute capability as nvcc names it (``sm_90``, ``sm_100a``) or empty
    (unknown): everything that depends on the generation reads it so (:meth:`Device.compute_capability`: NVLS on an
    NVSwitch node, the generic node's switch, the attention softmax, Pascal's half sums), and ``9.0`` (what
    ``nvidia-smi --query-gpu=compute_cap`` prints), ``sm90`` or ``hopper`` read as no generation at all: a Hopper
    NVSwitch system lost NVLS without a word."""
    if vendor != "nvidia" or kind != "gpu" or not arch.strip() or _SM_ARCH.fullmatch(arch.strip().lower()):
        return
    digits = re.fullmatch(r"(?:sm|compute)?[_ ]?(\d+)(?:\.(\d))?([af]?)", arch.strip().lower())
    hint = f" (sm_{digits[1]}{digits[2] or ''}{digits[3]}?)" if digits else ""
    raise InvalidInputError(f"device {key!r}: field arch = {arch!r} is no NVIDIA compute capability: write it as nvcc "
                            f"names it{hint}, e.g. 'sm_90' for Hopper (compute capability 9.0), or leave arch out")


def _number(key: str, name: str, value: Any) -> float:
    """A catalog number: an int or float of the TOML file, finite (a string, a boolean, inf or nan is refused)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidInputError(f"{key!r}: field {name} must be a number, got {value!r}")
    v = float(value)
    if not np.isfinite(v):
        raise InvalidInputError(f"{key!r}: field {name} must be a finite number, got {value!r}")
    return v


def _count(key: str, name: str, value: Any, positive: bool = True) -> int:
    """A catalog count (GPUs per node, nodes, SMs, PCIe generation): a whole number, > 0 (or >= 0)."""
    v = _positive(key, name, value) if positive else _nonneg(key, name, value)
    if v != int(v):
        raise InvalidInputError(f"{key!r}: field {name} must be a whole number, got {value!r}")
    return int(v)


def _pcie_gen(key: str, value: Any) -> int:
    """A catalog ``pcie_gen``: a whole number among :data:`PCIE_GENERATIONS` (0 = not stated)."""
    gen = _count(key, "pcie_gen", value, positive=False)
    if gen not in PCIE_GENERATIONS:
        raise InvalidInputError(f"{key!r}: field pcie_gen must be a PCIe generation from {PCIE_GENERATIONS[1]} to "
                                f"{PCIE_GENERATIONS[-1]} (0 = not stated), got {value!r}")
    return gen


def _names(key: str, name: str, value: Any) -> tuple[str, ...]:
    """A catalog list of names (``aliases``, ``measured_links``, ``host_mem_borrowed_by``): a list of strings. A
    bare string would otherwise be taken letter by letter (``aliases = "RTX 5090"``: the aliases ``R``, ``T``...,
    each then resolving to this entry)."""
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v.strip() for v in value):
        raise InvalidInputError(f"{key!r}: field {name} must be a list of non-empty strings ({name} = [\"...\"]), "
                                f"got {value!r}")
    return tuple(value)


def _positive(key: str, name: str, value: Any) -> float:
    v = _number(key, name, value)
    if not v > 0:
        raise InvalidInputError(f"{key!r}: field {name} must be positive, got {value!r}")
    return v


def _nonneg(key: str, name: str, value: Any) -> float:
    v = _number(key, name, value)
    if not v >= 0:
        raise InvalidInputError(f"{key!r}: field {name} must be >= 0, got {value!r}")
    return v
