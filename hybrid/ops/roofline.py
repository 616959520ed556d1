"""Vectorised roofline (compute ops) and alpha-beta (collectives) estimates for whole tables of ops.

``time = max(FLOPs / peak(dtype), bytes / bandwidth) + kernel latency`` for kernels, and for collectives a
hierarchical alpha-beta model: algorithm bus factor, intra-node fabric and per-GPU NIC bandwidth, and a
per-step latency. Each row also reports which term bounds it. Fused attention's compute term also holds the
softmax's exps on the special-function units, in series or overlapped with the matrix multiplies depending on
the kernel (:func:`softmax_overlap`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from hybrid.errors import InvalidInputError, at_row
from hybrid.hardware.catalog import Catalog, default_catalog
from hybrid.hardware.device import Device, System, full_mesh, nvls_bus_factor, nvls_capable, pair_bridge_bw
from hybrid.ops.families import (
    FAMILIES,
    attention_dropout_ops,
    attention_exps,
    bus_factor,
    col,
    dtype_bytes_vec,
    elementwise_defaults,
    factor_map,
    family_array,
    is_backward,
)
from hybrid.units import format_bytes, normalize_dtype

#: Output columns added by :func:`roofline`.
#: ``compute_us`` is the FLOP term, ``busy_us`` the compute side of the bound: ``compute_us`` and, for fused
#: attention, the softmax's exps on the special-function units (in series or overlapped, :func:`softmax_overlap`).
ROOFLINE_COLUMNS = ("family", "flops", "bytes", "compute_us", "busy_us", "memory_us", "latency_us", "time_us",
                    "bound")

#: Categories of the ``bound`` column.
BOUNDS = ("compute", "memory", "latency", "bandwidth")

#: Effective PCIe bandwidth per direction (GB/s) by generation, used when a device has no GPU-to-GPU link (~0.76 of
#: the x16 link rate; a device that states none: :data:`hybrid.hardware.device.PCIE_GEN_NOT_STATED`). Every
#: generation a catalog entry may name (:data:`hybrid.hardware.device.PCIE_GENERATIONS`) is here: gen 1, 2 and 7
#: fell back to gen3's 12 GB/s.
PCIE_GBPS = {1: 3.0, 2: 6.0, 3: 12.0, 4: 24.0, 5: 48.0, 6: 96.0, 7: 192.0}
#: Default NIC share per GPU when a node description is synthesised from a bare device (100 Gb/s).
DEFAULT_NIC_GBPS = 12.5


def _on_hgx_switch(device: Device) -> bool:
    """An NVIDIA SXM-class part of Ampere or later with NVLink to a switch, not a bridge: its 8-GPU boards (HGX
    A100 / A800 / H100 / H800 / H20 / H200 / B200 / B300) connect every GPU to NVSwitch chips. Volta's SXM2 parts
    are excluded (DGX-1's hybrid cube mesh has no switch)."""
    link = device.link_name.lower()
    return device.compute_capability >= 80 and "nvlink" in link and "bridge" not in link


def system_for_device(device: Device, gpus_per_node: int = 8) -> System:
    """A generic node of ``device`` GPUs for collectives on a device that has no catalog system: its NVLink (to
    the NVSwitch of an 8-GPU HGX board for Ampere-or-later SXM parts, so Hopper-or-later ones get NVLS) or PCIe."""
    intra = device.link_bw / 1e9 if device.link_bw > 0 else PCIE_GBPS[device.pcie_generation]
    fabric = device.link_name or f"PCIe gen{device.pcie_generation}"
    if _on_hgx_switch(device) and "switch" not in fabric.lower():
        fabric = f"{fabric} + NVSwitch (generic 8-GPU HGX board)"
    return System.from_entry(
        f"{device.key}-node",
        {
            "device": device.key,
            "gpus_per_node": gpus_per_node,
            "intra_node_gbps": intra,
            "intra_fabric": fabric,
            "inter_node_gbps": DEFAULT_NIC_GBPS,
            "inter_fabric": "generic 100 Gb/s NIC per GPU",
            "max_nodes": 1024,
            "source": f"synthesised from device {device.key} (no system in catalog)",
        },
    )


def cpu_collective_system(catalog: Catalog, device: Device, named: str,
                          ranks: int | None = None) -> tuple[System | None, str | None]:
    """Where the collectives of a job on a bare CPU device (named ``named``: a device, not a catalog system) run:
    ``(system, note)``, ``system`` the catalog system that prices them instead of a generic node (None: keep the
    target as named) and ``note`` what to tell the user (None where there is nothing to say).

    A bare GPU's collectives run on a generic node of it (its NVLink or PCIe, :func:`system_for_device`); a CPU has
    no such link: its ranks are processes exchanging over gloo (shared memory, loopback). So a bare CPU device takes
    the catalog's one system of that CPU (``hybrid profile`` measures its gloo collectives, e.g.
    ``cpu-amd-epyc-1c-gloo``); with none, or several, or a job of more ``ranks`` than that single-node system holds,
    it keeps the generic node and the note says why. Before, a 2-rank gloo all-reduce of 0.5 MB was priced over a
    generic PCIe gen3 link at 0.06 ms (1.9 ms traced; 0.7 ms on the profiled gloo system). Shared by the workloads
    that price a bare device's collectives (DLRM, LLM training, traces)."""
    if device.kind != "cpu" or catalog.resolve_system(named, missing_ok=True) is not None:
        return None, None
    own = sorted(k for k, s in catalog.systems.items() if s.device == device.key)
    if len(own) == 1:
        system = catalog.systems[own[0]]
        if ranks is None or ranks <= system.gpus_per_node or not system.single_node:
            return system, (f"collectives priced on {own[0]}, the catalog's system of CPU {device.key} (its "
                            "processes' gloo collectives as profiled); --system names another")
        found = (f"{ranks} processes are more than the {system.gpus_per_node} of {own[0]}, the catalog's system of "
                 "it (one node, no network between nodes): fewer ranks price them there")
    else:
        found = f"several systems of it ({', '.join(own)}): name one with --system" if own else (
            "no system of it in the catalog (`hybrid profile` measures one; --system names it)")
    return None, (f"collectives between the processes on CPU {device.key} priced over a generic "
                  f"{system_for_device(device).intra_fabric} link, which a CPU's processes do not use: {found}")


def resolve_system(catalog: Catalog, name: str) -> System:
    """A catalog system by name, or a generic node built from a device name."""
    key = catalog.resolve_system(name, missing_ok=True)
    if key is not None:
        return catalog.systems[key]
    dev_key = catalog.resolve_device(name, missing_ok=True)
    if dev_key is None and name.endswith("-node"):  # the key of a generic node (system_for_device) names its device
        dev_key = catalog.resolve_device(name[: -len("-node")], missing_ok=True)
    if dev_key is not None:
        return system_for_device(catalog.devices[dev_key])
    raise catalog.unknown_target(name)


def cluster_notes(catalog: Catalog, system: str, gpus: int, gpus_per_node: int, device: str | None = None) -> list[str]:
    """Check a job of ``gpus`` GPUs on ``system`` (a catalog system key, or a device key / the key of its generic
    node, :func:`system_for_device`) at ``gpus_per_node`` GPUs per node: refuse several nodes of a single-node
    catalog system (no network between its nodes) with a one-line error; return notes on more nodes than the catalog
    describes, on what a bare ``device`` across nodes is costed as (a generic node and NIC), and on a partly filled
    last node (costed as if the ranks were spread evenly)."""
    nodes = max(1, math.ceil(gpus / gpus_per_node))
    # `hybrid predict collective` refuses ranks that do not split evenly over the nodes; a job still runs on a
    # partly filled last node, so it is costed, and said to be costed, as if the ranks were spread evenly
    uneven = ([f"{gpus} GPUs fill {nodes - 1} node(s) of {gpus_per_node} and {gpus - (nodes - 1) * gpus_per_node} "
               f"GPU(s) of another: collectives across nodes are costed as if the ranks were spread evenly over the "
               f"{nodes} nodes (the collective models assume as many ranks on every node; a full node's NICs carry "
               "more than that average)"] if nodes > 1 and gpus % gpus_per_node else [])
    entry = catalog.systems.get(system)
    if entry is not None:
        if nodes > 1 and entry.single_node:
            raise InvalidInputError(
                f"{gpus} GPUs need {nodes} nodes of system {entry.key} ({entry.gpus_per_node} GPUs per node), "
                "a single-node system (no network between nodes in the catalog); choose a multi-node system "
                "(`hybrid devices`) or fewer GPUs")
        if nodes > entry.max_nodes:
            return [f"{gpus} GPUs are {nodes} nodes of {entry.key}, more than the {entry.max_nodes} the "
                    "catalog describes: its network is costed as if it scaled that far", *uneven]
        return uneven
    if nodes > 1:
        dev = catalog.device(device or (system[: -len("-node")] if system.endswith("-node") else system))
        generic = system_for_device(dev, gpus_per_node)
        return [f"{dev.key} is a device, not a catalog system: {gpus} GPUs are costed as {nodes} generic "
                f"nodes of {gpus_per_node} ({generic.intra_fabric} inside a node, {generic.inter_fabric} between "
                "nodes); name a system (`hybrid devices`) for a real cluster's network", *uneven]
    return []


#: Optional numeric columns that may be zero (``fill`` reads no input; a uniform index has zipf_alpha 0).
NONNEGATIVE_OPTIONAL = frozenset({"n_inputs", "n_outputs", "flops_per_element", "zipf_alpha", "causal", "padding",
                                  "softmax_overlap", "dropout"})
#: Accepted values of the ``direction`` column (case-insensitive; missing means fwd).
DIRECTIONS = ("fwd", "bwd")


def _raise_bad(df: pd.DataFrame, c: str, bad: np.ndarray, family: str, what: str) -> None:
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        value = df[c].iloc[i]
        value = value.item() if isinstance(value, np.generic) else value
        raise InvalidInputError(f"{family}: column {c!r} must be {what}, got {value!r} {at_row(df.index, i)}")


def _positive(df: pd.DataFrame, columns: tuple[str, ...], family: str) -> None:
    """Required shape columns: present, numeric, finite and > 0 on every row."""
    for c in columns:
        values = col(df, c)
        _raise_bad(df, c, ~((values > 0) & (values < np.inf)), family, "positive and finite")


def _optional(df: pd.DataFrame, fam) -> None:
    """Optional numeric columns (``b``, ``n_nodes``, ``num_tables``...): NaN means "use the default", any other
    value must be finite and positive (or >= 0 for :data:`NONNEGATIVE_OPTIONAL`). ``direction`` must be fwd/bwd."""
    for c, default in fam.optional_columns.items():
        if c not in df.columns or isinstance(default, str):
            continue
        raw = df[c]
        values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64, copy=False)
        if raw.dtype == bool:
            continue
        not_number = np.isnan(values) & raw.notna().to_numpy()
        _raise_bad(df, c, not_number, fam.name, "a number")
        present = ~np.isnan(values)
        ok = (values >= 0) if c in NONNEGATIVE_OPTIONAL else (values > 0)
        _raise_bad(df, c, present & ~(ok & (values < np.inf)), fam.name,
                   "finite and >= 0" if c in NONNEGATIVE_OPTIONAL else "positive and finite")
    if "direction" in df.columns:
        codes, uniques = pd.factorize(df["direction"], use_na_sentinel=True)
        valid = np.array([str(u).lower() in DIRECTIONS for u in uniques] + [True])
        _raise_bad(df, "direction", ~valid[codes], fam.name, f"one of {DIRECTIONS}")
    if fam.name == "attention" and "dropout" in df.columns:  # a probability: 1 would drop every score
        _raise_bad(df, "dropout", col(df, "dropout", 0.0) >= 1.0, fam.name, "a probability below 1")
    if fam.name == "collective" and "n_nodes" in df.columns:
        nodes = col(df, "n_nodes", 1.0)
        _raise_bad(df, "n_nodes", nodes > col(df, "n_ranks"), fam.name, "<= n_ranks")


def _per_row(names: pd.Series, lookup) -> tuple[np.ndarray, list]:
    codes, uniques = pd.factorize(names, use_na_sentinel=True)
    if (codes < 0).any():
        raise InvalidInputError(f"missing {names.name!r} {at_row(names.index, int(np.flatnonzero(codes < 0)[0]))}")
    return codes, [lookup(str(u)) for u in uniques]


def _dtypes(df: pd.DataFrame) -> pd.Series:
    if "dtype" not in df.columns:
        return pd.Series(["fp32"] * len(df), index=df.index, name="dtype")
    return df["dtype"].fillna("fp32").rename("dtype")


def _check_table(table: pd.DataFrame) -> None:
    """What :func:`roofline` and :func:`footprint_bytes` need of a table before any formula reads it."""
    if not isinstance(table, pd.DataFrame):
        raise InvalidInputError(f"expected a DataFrame, got {type(table).__name__}")
    if "op" not in table.columns:
        raise InvalidInputError("table has no 'op' column")
    if len(table) == 0:
        raise InvalidInputError("table is empty")
    dup = table.columns[table.columns.duplicated()]
    if len(dup):  # table["m"] is then a frame: a pandas TypeError deep in a formula
        raise InvalidInputError(f"table has the column {str(dup[0])!r} more than once")


def roofline(
    table: pd.DataFrame,
    catalog: Catalog | None = None,
    *,
    device: str | None = None,
    system: str | None = None,
) -> pd.DataFrame:
    """Analytical estimate for every row of ``table`` (any mix of op families, devices and systems).

    ``table`` needs an ``op`` column, the family's shape columns, ``dtype`` (default fp32) and ``device``
    (or pass ``device=``). Collective rows use ``system`` (column or argument); a row with only a device
    gets a generic node of that device. Returns a DataFrame with :data:`ROOFLINE_COLUMNS`, same index.
    """
    _check_table(table)
    cat = catalog or default_catalog()
    op_codes, op_uniques = pd.factorize(table["op"], use_na_sentinel=True)
    if (op_codes < 0).any():
        raise InvalidInputError(f"missing op {at_row(table.index, int(np.flatnonzero(op_codes < 0)[0]))}")
    fam_of_unique = [FAMILIES[family_array(pd.Series([o]))[0]].name for o in op_uniques]
    fam_names = list(dict.fromkeys(fam_of_unique))
    fam_codes = np.array([fam_names.index(f) for f in fam_of_unique], dtype=np.int8)[op_codes]
    n = len(table)
    numeric = np.empty((n, len(ROOFLINE_COLUMNS) - 2))
    bound = np.empty(n, dtype=np.int8)
    for i, fam_name in enumerate(fam_names):
        whole = len(fam_names) == 1
        rows = slice(None) if whole else np.flatnonzero(fam_codes == i)
        sub = table if whole else table.take(rows)
        fam = FAMILIES[str(fam_name)]
        _positive(sub, fam.shape_columns, fam.name)
        _optional(sub, fam)
        if fam.name == "collective":
            res = _collective(sub, cat, system or device)
        else:
            res = _kernel(sub, fam.name, cat, device)
        numeric[rows] = np.column_stack([np.broadcast_to(res[c], len(sub)) for c in ROOFLINE_COLUMNS[1:-1]])
        bound[rows] = res["bound"]
    out = pd.DataFrame(numeric, columns=list(ROOFLINE_COLUMNS[1:-1]), index=table.index, copy=False)
    out.insert(0, "family", pd.Categorical.from_codes(fam_codes, categories=fam_names))
    out["bound"] = pd.Categorical.from_codes(bound, categories=list(BOUNDS))
    return out


#: GPUs from this NVIDIA compute capability on (Hopper, Blackwell) run attention kernels that overlap the softmax
#: with the matrix multiplies (FlashAttention-3's ping-pong warpgroups, cuDNN's and TensorRT-LLM's Hopper and
#: Blackwell kernels); earlier GPUs and AMD's run FlashAttention-2-style kernels, the softmax in series.
SOFTMAX_OVERLAP_FROM_CC = 90
#: ``framework`` values whose attention rows ran a FlashAttention-2-style kernel on every GPU when the row does not
#: say (``torch.nn.functional.scaled_dot_product_attention`` picks its flash backend, FlashAttention-2, first).
SERIAL_SOFTMAX_FRAMEWORKS = frozenset({"pytorch"})


#: Names of the attention-softmax schedule (``--softmax``): the ``softmax_overlap`` value each sets on attention rows.
SOFTMAX_SCHEDULES = {"auto": None, "serial": 0.0, "overlapped": 1.0}


def softmax_schedule(name: str) -> float | None:
    """``softmax_overlap`` for a schedule name: ``serial`` (FlashAttention-2, PyTorch's SDPA default) 0,
    ``overlapped`` (FlashAttention-3, cuDNN / Transformer Engine and TensorRT-LLM on Hopper+) 1, ``auto`` None
    (the row's framework and GPU generation decide)."""
    key = str(name).strip().lower()
    if key not in SOFTMAX_SCHEDULES:
        raise InvalidInputError(f"softmax schedule must be one of {', '.join(SOFTMAX_SCHEDULES)}, got {name!r}")
    return SOFTMAX_SCHEDULES[key]


def softmax_overlap(df: pd.DataFrame, cc: np.ndarray) -> np.ndarray:
    """Per attention row, whether the kernel overlaps its exps with the matrix multiplies: the row's
    ``softmax_overlap`` where given, else 0 for :data:`SERIAL_SOFTMAX_FRAMEWORKS`, else by GPU generation
    (:data:`SOFTMAX_OVERLAP_FROM_CC`)."""
    given = col(df, "softmax_overlap", np.nan)
    default = cc >= SOFTMAX_OVERLAP_FROM_CC
    if "framework" in df.columns:
        fw = factor_map(df["framework"], lambda f: str(f).strip().lower() in SERIAL_SOFTMAX_FRAMEWORKS, "")
        default = default & ~fw.astype(bool)
    return np.where(np.isnan(given), default, given > 0)


def attention_dropout_us(df: pd.DataFrame, int_rate: np.ndarray) -> np.ndarray:
    """Time (us) of a fused attention's dropout mask on the integer lanes
    (:func:`~hybrid.ops.families.attention_dropout_ops` / ``int_rate`` ops/s per row); 0 without a ``dropout``
    column or rate."""
    if "dropout" not in df.columns:
        return np.zeros(len(df))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(int_rate > 0, attention_dropout_ops(df) / int_rate * 1e6, 0.0)


def device_int_rate(df: pd.DataFrame, catalog: Catalog) -> np.ndarray:
    """Per row, its device's 32-bit integer op rate (:attr:`~hybrid.hardware.device.Device.int_rate`)."""
    codes, devs = _per_row(df["device"], catalog.device)
    return np.array([d.int_rate for d in devs], dtype=np.float64)[codes]


def _attention_compute_us(df: pd.DataFrame, matmul_us: np.ndarray, exp_rate: np.ndarray,
                          cc: np.ndarray, int_rate: np.ndarray | None = None) -> np.ndarray:
    """Compute time of fused attention: its matrix multiplies and the softmax's exps on the special-function
    units (one per score, :func:`~hybrid.ops.families.attention_exps`), in series for FlashAttention-2-style
    kernels, overlapped (the larger of the two) for FlashAttention-3-style ones. On an H100 the exps of a head
    dimension of 64 take as long as the matrix multiplies (4.2 T exp/s against 989 TFLOP/s), which is why
    FlashAttention-3 and cuDNN run such shapes up to 2x faster than FlashAttention-2 there."""
    with np.errstate(divide="ignore", invalid="ignore"):
        exp_us = np.where(exp_rate > 0, attention_exps(df) / exp_rate * 1e6, 0.0)
        # a dropout mask's Philox draws on the integer lanes, in series with the rest (the same warps compute them
        # between the two matrix multiplies)
        rng_us = attention_dropout_us(df, int_rate) if int_rate is not None else 0.0
    return np.where(softmax_overlap(df, cc), np.maximum(matmul_us, exp_us), matmul_us + exp_us) + rng_us


def _kernel(df: pd.DataFrame, family: str, cat: Catalog, device: str | None) -> dict[str, np.ndarray]:
    fam = FAMILIES[family]
    flops = fam.flops(df)
    nbytes = fam.bytes(df)
    if device is not None:
        dev = cat.device(device)
        peak = factor_map(_dtypes(df), dev.compute_peak).astype(np.float64)
        bw = np.full(len(df), dev.mem_bw)
        lat = np.full(len(df), dev.kernel_latency_us)
        exp_rate, cc = np.full(len(df), dev.exp_rate), np.full(len(df), dev.compute_capability)
        int_rate = np.full(len(df), dev.int_rate)
    else:
        if "device" not in df.columns:
            raise InvalidInputError("table has no 'device' column; pass device=")
        dev_codes, devs = _per_row(df["device"], cat.device)
        dt_codes, dts = _per_row(_dtypes(df), normalize_dtype)
        peak_matrix = np.array([[d.compute_peak(t) for t in dts] for d in devs])
        peak = peak_matrix[dev_codes, dt_codes]
        bw = np.array([d.mem_bw for d in devs])[dev_codes]
        lat = np.array([d.kernel_latency_us for d in devs])[dev_codes]
        exp_rate = np.array([d.exp_rate for d in devs])[dev_codes]
        int_rate = np.array([d.int_rate for d in devs])[dev_codes]
        cc = np.array([d.compute_capability for d in devs])[dev_codes]
    compute_us = flops / peak * 1e6
    # the compute side of the bound: attention adds its softmax's exps; ``compute_us`` stays the FLOP term (the
    # learned corrections read it as a feature, and a memory-bound kernel's exps change nothing)
    busy_us = _attention_compute_us(df, compute_us, exp_rate, cc, int_rate) if family == "attention" else compute_us
    memory_us = nbytes / bw * 1e6
    body = np.maximum(busy_us, memory_us)
    bound = np.where(lat > body, 2, np.where(busy_us >= memory_us, 0, 1)).astype(np.int8)
    return {"flops": flops, "bytes": nbytes, "compute_us": compute_us, "busy_us": busy_us, "memory_us": memory_us,
            "latency_us": lat, "time_us": body + lat, "bound": bound}


def _collective(df: pd.DataFrame, cat: Catalog, system: str | None) -> dict[str, np.ndarray]:
    if system is not None:
        names = pd.Series([system] * len(df), index=df.index, name="system")
    elif "system" in df.columns and df["system"].notna().all():
        names = df["system"].rename("system")
    elif "device" in df.columns:
        names = df["system"].fillna(df["device"]) if "system" in df.columns else df["device"]
        names = names.rename("system")
    else:
        raise InvalidInputError("collective rows need a 'system' (or 'device') column, or pass system=")
    codes, systems = _per_row(names, lambda s: resolve_system(cat, s))
    intra = np.array([s.intra_bw for s in systems])[codes]
    inter = np.array([s.inter_bw if s.inter_bw > 0 else DEFAULT_NIC_GBPS * 1e9 for s in systems])[codes]
    lat_intra = np.array([s.intra_latency_us for s in systems])[codes]
    lat_inter = np.array([s.inter_latency_us for s in systems])[codes]
    gpn_sys = np.array([s.gpus_per_node for s in systems], dtype=np.float64)[codes]
    devices = [cat.system_device(s, missing_ok=True) for s in systems]
    nvls = np.array([nvls_capable(s, d) for s, d in zip(systems, devices, strict=True)], dtype=bool)[codes]
    bridge = np.array([pair_bridge_bw(s, d) for s, d in zip(systems, devices, strict=True)])[codes]

    size = col(df, "size_bytes")
    n = col(df, "n_ranks")
    nodes = np.maximum(col(df, "n_nodes", 1.0), 1.0)
    g = np.maximum(n / nodes, 1.0)  # GPUs per node taking part
    if (nodes > 1).any() or (g > gpn_sys).any():
        # more ranks than fit in one node of this system means several nodes
        nodes = np.where((nodes == 1) & (n > gpn_sys), np.ceil(n / gpn_sys), nodes)
        g = np.maximum(n / nodes, 1.0)
    # layouts no node of the system can hold are refused: more ranks per node than its GPUs, or several nodes of a
    # system without a network between them (a single-node entry); beyond max_nodes (the largest installation the
    # catalog describes) workloads still scale, as Megatron's 384-node DGX A100 runs do
    single = np.array([s.single_node for s in systems], dtype=bool)[codes]
    for bad, what in ((g > gpn_sys, "more ranks per node than the system's GPUs per node"),
                      (single & (nodes > 1), "several nodes of a single-node system (no network between nodes)")):
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            sy = systems[codes[i]]
            raise InvalidInputError(f"collective: {int(n[i])} ranks on {int(nodes[i])} node(s) of {sy.key} "
                                    f"({sy.gpus_per_node} GPUs per node, at most {sy.max_nodes} node(s)): {what}, "
                                    f"{at_row(df.index, i)}")
    # PCIe cards bridged in pairs: at most 2 GPUs per node talk over the bridge, more cross PCIe between pairs
    intra = np.where((bridge > 0) & (g <= 2.0), bridge, intra)
    # a fully connected node: g of its GPUs use only the links among themselves, (g - 1) of each GPU's gpn - 1
    mesh = np.array([full_mesh(s) for s in systems], dtype=bool)[codes]
    share = np.maximum(g - 1.0, 1.0) / np.maximum(gpn_sys - 1.0, 1.0)
    intra = np.where(mesh & (g < gpn_sys), intra * np.minimum(share, 1.0), intra)
    op = np.asarray(df["op"], dtype=object)
    multi = nodes > 1
    ring_g = (g - 1.0) / g
    ring_n = (nodes - 1.0) / nodes
    # bandwidth term (seconds): hierarchical over intra-node fabric and the GPUs' NICs
    # all-reduce inside a node: the ring's 2 (g - 1)/g bytes per link, or NCCL's NVLS where the NVSwitch reduces
    # ((g + 1)/g, fewer from 4 GPUs on; Hopper-or-later NVSwitch nodes, hybrid.hardware.device.nvls_capable)
    ar_intra = np.where(nvls & (g > 2.0), np.minimum(2.0 * ring_g, nvls_bus_factor(g)), 2.0 * ring_g)
    ar = ar_intra * size / intra + np.where(multi, 2.0 * ring_n * size / (g * inter), 0.0)
    ag = ring_g * size / intra + np.where(multi, ring_n * size / (g * inter), 0.0)
    a2a = np.maximum((g - 1.0) / n * size / intra, np.where(multi, (n - g) / n * size / inter, 0.0))
    p2p = size / np.where(multi, inter, intra)
    # broadcast / reduce (nccl-tests' bus factor 1): inside a node a GPU's links carry the whole message, and across
    # nodes every node receives (sends) all of it through its g NICs, whatever the node count: the all-gather's
    # (nodes - 1)/nodes share there priced 2 nodes of 1 GPU at half the NIC's time (bus bandwidth above its rate)
    bc = (ring_g + 1.0 / n) * size / intra + np.where(multi, size / (g * inter), 0.0)
    bw_s = np.select(
        [op == "all_reduce", np.isin(op, ["all_gather", "reduce_scatter"]), op == "all_to_all"],
        [ar, ag, a2a],
        default=np.where(np.isin(op, ["broadcast", "reduce"]), bc, p2p),
    )
    # latency term: tree-like number of steps inside and across nodes; all_reduce pays it twice
    steps = np.where(op == "all_reduce", 2.0, 1.0)
    latency_us = steps * (lat_intra * np.ceil(np.log2(np.maximum(g, 2.0))) +
                          np.where(multi, lat_inter * np.ceil(np.log2(np.maximum(nodes, 2.0))), 0.0))
    latency_us = np.where(op == "all_to_all", latency_us + lat_intra * 0.25 * (n - 1), latency_us)
    bw_us = bw_s * 1e6
    return {
        "flops": np.zeros(len(df)),
        "bytes": size * bus_factor(op, n),
        "compute_us": np.zeros(len(df)),
        "busy_us": np.zeros(len(df)),
        "memory_us": bw_us,
        "latency_us": latency_us,
        "time_us": bw_us + latency_us,
        "bound": np.where(latency_us > bw_us, 2, 3).astype(np.int8),
    }


#: Output columns of :func:`memory_fit`.
MEMORY_FIT_COLUMNS = ("footprint_bytes", "device_memory_bytes", "fits_memory")


def footprint_bytes(table: pd.DataFrame) -> np.ndarray:
    """Per row, the bytes an op's operands must hold in device memory at once: a lower bound (an output that may
    overwrite its input is not counted twice). GEMM: A, B and C; elementwise: the larger of its inputs and
    outputs; norm / softmax: the rows (forward), the rows and their gradient (backward); embedding: every table
    plus the pooled outputs; attention: Q, K, V and O (twice as many backward: the gradients); conv: input, weight,
    output (backward: what it reads and writes); collective: ``size_bytes`` (nccl-tests' total buffer).

    The shape columns are checked as :func:`roofline` checks them (a GEMM of ``m=-4`` had -64 bytes and "fit", one
    of ``m='abc'`` NaN bytes and did not)."""
    _check_table(table)
    fams = family_array(table["op"])
    out = np.zeros(len(table))
    for name in dict.fromkeys(fams):
        rows = np.flatnonzero(fams == name)
        sub = table.take(rows)
        _positive(sub, FAMILIES[name].shape_columns, name)
        _optional(sub, FAMILIES[name])
        eb = dtype_bytes_vec(sub)
        bwd = is_backward(sub)
        if name in ("gemm", "conv"):
            fp = FAMILIES[name].bytes(sub)
        elif name == "elementwise":
            n_in, n_out, _ = elementwise_defaults(sub)
            fp = col(sub, "elements") * np.maximum(n_in, n_out) * eb
        elif name in ("norm", "softmax"):
            fp = col(sub, "rows") * col(sub, "hidden") * eb * np.where(bwd, 2.0, 1.0)
        elif name == "embedding":
            t, dim = col(sub, "num_tables", 1), col(sub, "embedding_dim")
            fp = t * dim * eb * (col(sub, "num_embeddings") + col(sub, "batch_size"))
        elif name == "attention":
            fp = FAMILIES[name].bytes(sub.assign(direction="fwd")) * np.where(bwd, 2.0, 1.0)
        else:  # collective
            fp = col(sub, "size_bytes")
        out[rows] = fp
    return out


def memory_fit(table: pd.DataFrame, catalog: Catalog | None = None, *, device: str | None = None,
               system: str | None = None) -> pd.DataFrame:
    """Whether each op of ``table`` fits in its device's memory (the catalog's ``mem_gib``), for whole tables at
    once: :data:`MEMORY_FIT_COLUMNS`, same index. ``footprint_bytes`` is :func:`footprint_bytes`; a collective row's
    device is its ``device`` column or, where that is empty, its system's GPU (``system=`` / ``device=`` as in
    :func:`roofline`). A row with ``fits_memory`` False describes an op the real device cannot run: its predicted
    time is a number all the same (see :func:`memory_warning`)."""
    cat = catalog or default_catalog()
    fp = footprint_bytes(table)
    if device is not None:
        mem = np.full(len(table), cat.device(device).mem_capacity)
    elif system is not None:
        mem = np.full(len(table), cat.device(resolve_system(cat, system).device).mem_capacity)
    else:
        names = table["device"] if "device" in table.columns else pd.Series([None] * len(table), index=table.index)
        if "system" in table.columns:  # collectives named by system only: the system's GPU
            sys_dev = factor_map(table["system"], lambda s: resolve_system(cat, s).device if s else "", "")
            names = names.where(names.notna(), pd.Series(sys_dev, index=table.index).replace("", None))
        codes, devs = _per_row(names.rename("device"), cat.device)
        mem = np.array([d.mem_capacity for d in devs], dtype=np.float64)[codes]
    return pd.DataFrame({"footprint_bytes": fp, "device_memory_bytes": mem, "fits_memory": fp <= mem},
                        index=table.index)


def memory_warning(fit: pd.DataFrame, limit: int = 10) -> str:
    """One line naming the rows of a :func:`memory_fit` frame whose operands exceed their device's memory ('' when
    all fit): their index labels (the first ``limit``) and the largest footprint against its device's memory."""
    bad = ~fit["fits_memory"].to_numpy(dtype=bool)
    if not bad.any():
        return ""
    idx = np.flatnonzero(bad)
    labels = [at_row(fit.index, int(i)).removeprefix("at row index ") for i in idx[:limit]]
    more = f" and {len(idx) - limit} more" if len(idx) > limit else ""
    worst = int(idx[np.argmax(fit["footprint_bytes"].to_numpy()[idx])])
    return (f"{len(idx)} op(s) need more memory than their device has, so the real device cannot run them (timed "
            f"all the same): row index {', '.join(labels)}{more} (largest: operands of "
            f"{format_bytes(fit['footprint_bytes'].iloc[worst])} on a device of "
            f"{format_bytes(fit['device_memory_bytes'].iloc[worst])})")
