"""Data types and human-readable sizes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hybrid.errors import InvalidInputError
from hybrid.units import DTYPE_BYTES, DTYPE_FALLBACK, dtype_bytes, format_bytes, normalize_dtype, parse_size


@pytest.mark.parametrize(("name", "canon"), [
    ("float16", "fp16"), ("torch.float16", "fp16"), ("half", "fp16"), ("BF16", "bf16"), ("torch.bfloat16", "bf16"),
    ("float", "fp32"), ("F32", "fp32"), ("double", "fp64"), ("fp8_e4m3", "fp8"), ("e5m2", "fp8"), (" int8 ", "int8"),
    ("tf32", "tf32"), ("long", "int64"), ("NVFP4", "fp4"), ("mxfp4", "fp4"), ("fp4_e2m1", "fp4"),
    # PyTorch's own fp8 / fp4 names, as str(torch.float8_e4m3fn) prints them, were unknown dtypes
    ("torch.float8_e4m3fn", "fp8"), ("float8_e5m2", "fp8"), ("torch.float8_e4m3fnuz", "fp8"),
    ("float8_e5m2fnuz", "fp8"), ("torch.float4_e2m1fn_x2", "fp4"), ("FP8_E4M3FN", "fp8"),
    # the same names without their separators or with hyphens (ONNX's FLOAT8E4M3FN, fp8-e5m2)
    ("FLOAT8E4M3FN", "fp8"), ("fp8e4m3", "fp8"), ("fp8-e5m2", "fp8"), ("bf_16", "bf16"),
])
def test_normalize_dtype(name: str, canon: str) -> None:
    assert normalize_dtype(name) == canon


@pytest.mark.parametrize("bad", ["fp13", "", "   ", None, 16, "float17"])
def test_normalize_dtype_rejects(bad) -> None:
    with pytest.raises(InvalidInputError):
        normalize_dtype(bad)


def test_dtype_bytes_and_fallbacks() -> None:
    assert [dtype_bytes(d) for d in ("fp64", "float32", "bf16", "fp8")] == [8, 4, 2, 1]
    assert dtype_bytes("nvfp4") == 0.5 + 1 / 16  # 4-bit values and one fp8 scale per 16
    assert DTYPE_FALLBACK["fp4"][0] == "fp8"
    for dtype, chain in DTYPE_FALLBACK.items():
        assert dtype in DTYPE_BYTES and all(alt in DTYPE_BYTES for alt in chain)
        assert "fp32" in chain or dtype == "fp32" or chain[-1] in ("fp32", "fp64")


@pytest.mark.parametrize(("text", "value"), [
    ("4096", 4096), (4096, 4096), ("64KiB", 65536), ("64MiB", 64 * 2**20), ("1GB", 10**9), ("1.5 GiB", 3 * 2**29),
    ("2k", 2048), ("8G", 8 * 2**30), ("1e3", 1000), ("8 B", 8), (2.6, 3),  # bare K/M/G: nccl-tests' -b/-e units
])
def test_parse_size(text, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("bad", ["0", "-4", "abc", "12 parsecs", "", "nan", float("nan"), 0, -1, True, "0.4", 0.3])
def test_parse_size_rejects(bad) -> None:
    with pytest.raises(InvalidInputError):
        parse_size(bad)


@pytest.mark.parametrize("bits", ["64Kb", "1Mb", "2Gb"])
def test_parse_size_refuses_bit_units(bits) -> None:
    """Kb / Mb / Gb are bits in the usual notation: refused, naming the byte units, not read as bytes."""
    with pytest.raises(InvalidInputError, match="reads as bits"):
        parse_size(bits)
    assert parse_size(bits.lower()) == parse_size(bits[:-1] + "B")  # "64kb" stays the casual kilobytes


@given(st.integers(min_value=1, max_value=2**50))
def test_format_then_parse_round_trip(n: int) -> None:
    text = format_bytes(n)
    back = parse_size(text.replace(" ", ""))
    assert abs(back - n) <= max(0.051 * n, 1)  # one decimal of the chosen unit


def test_format_bytes() -> None:
    assert format_bytes(67108864) == "64.0 MiB"
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.5 KiB"


@pytest.mark.parametrize("negative", ["-5", "-64MiB", " -1.5 GB", -5])
def test_a_negative_size_is_said_to_be_negative_not_unparseable(negative) -> None:
    """``--size -5`` said "cannot parse size '-5'" (the pattern has no sign), as for a word."""
    with pytest.raises(InvalidInputError, match="size must be positive"):
        parse_size(negative)
    with pytest.raises(InvalidInputError, match="cannot parse size"):
        parse_size("-abc")
