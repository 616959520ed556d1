"""Data types and human-readable sizes."""

from __future__ import annotations

import re

from hybrid.errors import InvalidInputError

#: Canonical dtype names and their storage size in bytes.
DTYPE_BYTES: dict[str, float] = {
    "fp64": 8,
    "fp32": 4,
    "tf32": 4,
    "fp16": 2,
    "bf16": 2,
    "fp8": 1,
    # fp4 (e2m1) with its block scales: NVFP4 keeps one fp8 scale per 16 values (0.5 + 1/16 bytes); OCP MXFP4
    # (AMD CDNA4, also on Blackwell) one 8-bit scale per 32 (0.53125). The larger, NVFP4, is the storage here.
    "fp4": 0.5 + 1.0 / 16,
    "int8": 1,
    "int32": 4,
    "int64": 8,
}

_DTYPE_ALIASES: dict[str, str] = {
    "float64": "fp64", "double": "fp64", "f64": "fp64",
    "float32": "fp32", "float": "fp32", "f32": "fp32",
    "tensorfloat32": "tf32",
    "float16": "fp16", "half": "fp16", "f16": "fp16",
    "bfloat16": "bf16",
    "float8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "e4m3": "fp8", "e5m2": "fp8", "f8e4m3fn": "fp8",
    "f8e5m2": "fp8", "f8e4m3": "fp8", "f8e4m3fnuz": "fp8", "f8e5m2fnuz": "fp8", "fp8_e4m3fn": "fp8", "e4m3fn": "fp8",
    # PyTorch's (torch.float8_e4m3fn, as a trace or a model config prints it), also ml_dtypes' / JAX's names
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8", "float8_e5m2fnuz": "fp8",
    "float8_e4m3": "fp8",
    "nvfp4": "fp4", "mxfp4": "fp4", "float4": "fp4", "fp4_e2m1": "fp4", "e2m1": "fp4", "f4e2m1fn": "fp4",
    "float4_e2m1fn": "fp4", "float4_e2m1fn_x2": "fp4",
    "i8": "int8", "s8": "int8", "int": "int32", "int32_t": "int32", "i32": "int32", "s32": "int32",
    "uint8": "int8", "u8": "int8", "i64": "int64", "s64": "int64", "long": "int64",
}

#: When a device has no peak for a dtype, fall back along this chain (e.g. bf16 on V100 runs at fp32 rate).
DTYPE_FALLBACK: dict[str, tuple[str, ...]] = {
    "tf32": ("fp32",),
    "bf16": ("fp16", "fp32"),
    # a GPU listing only bf16 tensor-core units (a user entry, a bf16-first accelerator) runs fp16 on them at the
    # same width: priced at fp32 it was 8-16x too slow (a CPU's bf16 units do not: Device.peak_dtype)
    "fp16": ("bf16", "fp32"),
    "fp8": ("fp16", "bf16", "fp32"),
    "fp4": ("fp8", "fp16", "bf16", "fp32"),  # no FP4 units: dequantised to the next narrowest path the device has
    "int8": ("fp16", "bf16", "fp32"),
    "int32": ("fp32",),
    "int64": ("fp64", "fp32"),
    "fp64": ("fp32",),
}


def _bare(key: str) -> str:
    return key.replace("_", "").replace("-", "")


#: Every canonical name and alias without ``_`` / ``-``: ONNX's ``FLOAT8E4M3FN``, ``fp8-e5m2``, ``bf_16``.
_BARE_DTYPES: dict[str, str] = {_bare(k): v for k, v in (*((k, k) for k in DTYPE_BYTES), *_DTYPE_ALIASES.items())}


def normalize_dtype(name: str) -> str:
    """Return the canonical dtype name for ``name`` (``float16`` -> ``fp16``), or raise."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidInputError(f"dtype must be a non-empty string, got {name!r}")
    key = name.strip().lower().replace("torch.", "")
    if key in DTYPE_BYTES:
        return key
    if key in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[key]
    if _bare(key) in _BARE_DTYPES:
        return _BARE_DTYPES[_bare(key)]
    raise InvalidInputError(f"unknown dtype {name!r}; known: {', '.join(sorted(DTYPE_BYTES))}")


def dtype_bytes(name: str) -> float:
    """Bytes per element of ``name``."""
    return DTYPE_BYTES[normalize_dtype(name)]


_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")
#: Byte units: KB/MB/GB/TB decimal (SI), KiB/MiB/GiB/TiB binary, and a bare K/M/G/T binary, as nccl-tests' own
#: ``-b 8 -e 8G`` flags read them (8G = 8 GiB): a size copied from a nccl-tests command means what it meant there.
_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 2**10, "kb": 1e3, "m": 2**20, "mb": 1e6, "g": 2**30, "gb": 1e9, "t": 2**40, "tb": 1e12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


def parse_size(text: str | int | float, whole: bool = False) -> int:
    """Parse ``64MiB``, ``1.5GB``, ``4096`` into a positive number of bytes (a fraction of a byte rounded, or with
    ``whole`` refused: a message of 1000.5 bytes is no collective anyone ran, and rounding it priced another)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        raw = str(text).strip()
        match = _SIZE_RE.match(raw)
        if match is None and raw.startswith("-") and _SIZE_RE.match(raw[1:]) is not None:
            raise InvalidInputError(f"size must be positive, got {text!r}")  # (-5, -64MiB: not "cannot parse")
        if not match or match.group(2).lower() not in _SIZE_UNITS:
            raise InvalidInputError(f"cannot parse size {text!r} (examples: 4096, 64KiB, 64MiB, 1GB)")
        unit = match.group(2)
        if len(unit) == 2 and unit[1] == "b" and unit[0] in "KMGT":  # Kb, Mb, Gb: bits, not bytes (kb, mb: bytes)
            raise InvalidInputError(f"size {text!r}: {unit} reads as bits; write bytes ({unit[:-1].upper()}B or "
                                    f"{unit[:-1].upper()}iB)")
        value = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    if not value > 0 or value != value:
        raise InvalidInputError(f"size must be positive, got {text!r}")
    if value == float("inf"):
        raise InvalidInputError(f"size {text!r} is too large (not a finite number of bytes)")
    if round(value) < 1:  # rounded to whole bytes below (1.3GiB is fine), but not to nothing
        raise InvalidInputError(f"size {text!r} is less than one byte ({value:g} B)")
    if whole and value != round(value):
        raise InvalidInputError(f"size {text!r} is {value:,.12g} B, not a whole number of bytes")
    return int(round(value))


#: Count suffixes: a bare K/M/G/T, binary as in :func:`parse_size` (64K = 65,536 rows).
_COUNT_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_count(text: str | int) -> int:
    """Parse a dimension (rows, m, elements): ``4096``, or with a count suffix ``64K``, ``1M`` (binary, as
    ``--size`` reads a bare K/M/G/T). A byte unit (``64MiB``, ``1MB``, ``4096B``) is refused: a dimension is a
    count, not a size in bytes. Signs and zero pass through as integers for the caller's own bound checks."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    raw = str(text).strip()
    if re.fullmatch(r"[+-]?[0-9]+", raw):
        return int(raw)
    match = _SIZE_RE.match(raw)
    if match is not None and match.group(2).lower() not in _COUNT_UNITS and match.group(2).lower() in _SIZE_UNITS:
        raise InvalidInputError(f"{text!r} is a size in bytes ({match.group(2)}); a dimension is a count: write it as "
                                f"a number, or with a count suffix (64K = 65,536, 1M = 1,048,576)")
    if match is None or match.group(2).lower() not in _COUNT_UNITS:
        raise InvalidInputError(f"cannot parse {text!r} as a count (examples: 4096, 64K, 1M)")
    value = float(match.group(1)) * _COUNT_UNITS[match.group(2).lower()]
    if value != round(value) or value == float("inf"):
        raise InvalidInputError(f"{text!r} is {value:,.12g}, not a whole number")
    return int(round(value))


def format_bytes(n: float) -> str:
    """``67108864`` -> ``64.0 MiB``."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"
