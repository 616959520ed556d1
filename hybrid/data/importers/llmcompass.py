"""LLMCompass real-hardware matmul tables (PrincetonUniversity/LLMCompass ``ae/figure5/*/real_hardware/``).

Files ``figure5__ab__matmul_<GPU>.csv`` (renamed in the public layout) have no header; each line is
``M, N, K, <time>ms, <throughput>Tflops`` for ``C[M,N] = A[M,K] x B[K,N]`` in FP16 (the paper's setting; the
A100 rows reach 258 TFLOP/s, above the 19.5 TFLOP/s FP32 peak, so they are tensor-core FP16). The GPU comes
from the file name: ``A100`` is LLMCompass's ``A100_80GB`` (SXM4) model, ``MI210`` the AMD Instinct MI210.
The time column is checked against the throughput column (2MNK / time) so a column mix-up fails loudly.

The softmax, layernorm and GELU tables of the same figure (``figure5__cf__softmax_<GPU>.csv``,
``figure5__de__layernorm_<GPU>.csv``, ``figure5__g__gelu_<GPU>.csv``) are a second format,
``llmcompass-pointwise`` (:func:`import_llmcompass_pointwise`): header-less lines ``M, N, <throughput>`` (softmax,
layernorm over ``[M, N]``) or ``M, <throughput>`` (GELU over ``M`` elements), where the throughput is giga-elements
per second. The files do not say so; the upstream scripts that wrote them do: ``ae/figure5/{cf,de,g}/test_*.py``
print ``M*N/latency/1e9`` (GELU ``M/latency/1e9``) and the plotting scripts label the axis "G Elements/s". The
real-hardware latency is ``run_on_gpu`` of ``software_model/{softmax,layernorm,gelu}.py``: the op on an FP16
tensor from ``torch.randn``, host-timed (``time.time`` around the op and a synchronise), median of the
iterations, so a time includes the op's host dispatch. So ``time_us = elements / throughput / 1e3``. Softmax is
eager ``torch.softmax`` (``framework`` ``pytorch``, as NeuSight's collections); layernorm and GELU are functions
under ``@torch.compile`` (one generated Triton kernel each, behind the compiled function's guards: the A100 rows
never go below ~47 us, against 13 us for the eager softmax), so their ``framework`` is ``pytorch-compile`` and a
fit of eager kernels should leave them out. (Read from the stored upstream version of the scripts, commit
b95c6c95; the data files are from 2e015fd2.)
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.data.importers._common import (
    as_paths,
    catalog_or_default,
    concat,
    display_path,
    finish,
    refuse_compressed,
)
from hybrid.errors import ImportFormatError
from hybrid.hardware.catalog import Catalog

#: File-name GPU label -> catalog device.
DEVICES = {"A100": "A100-SXM4-80GB", "MI210": "MI210"}
_NAME = re.compile(r"matmul_(?P<gpu>[A-Za-z0-9]+)\.csv$")
_LINE = re.compile(r"^\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*([0-9.eE+-]+)\s*ms\s*,\s*([0-9.eE+-]+)\s*Tflops\s*$")


def _gpu(path: Path, label: str, device: str | None) -> str:
    """The catalog device of a file: ``device`` if given, else the file name's GPU label."""
    gpu = device or DEVICES.get(label)
    if gpu is None:
        raise ImportFormatError(f"{path}: unknown LLMCompass GPU label {label!r} (known: {', '.join(DEVICES)}); "
                                "pass --device")
    return gpu


#: How Python writes a float (``f"{x}"``, the shortest repr): digits after a point, or an exponent. Never "167." or
#: "167", which is what a file cut inside such a value ends with.
_PY_FLOAT = re.compile(r"^(?:[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9](?:\.[0-9]+)?[eE][+-]?[0-9]+)$")


def _numeric_lines(path: Path, line_re: re.Pattern, groups: int, want: str,
                   float_group: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The first ``groups`` groups of every non-blank line of ``path`` as floats (one row per line) and each row's
    1-based line number; a line that does not match ``line_re`` fails naming its number and the expected form
    ``want``.

    ``float_group`` is a group the upstream writer always formats as a Python float. The public tables lack a final
    newline, so a file cut inside its last value parses; when the last line has no newline and that group is not a
    float as Python writes one (``167.`` or ``167`` for ``167.54...``), the file is refused as cut. Any other line
    whose group is no such float is refused too (a line cut mid-value and ended with a newline, by an editor or a
    copy: ``4096, 2048, 16`` imported a throughput 10x low). (A cut after a decimal digit, ``167.5``, looks like a
    complete value and cannot be told.)"""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ImportFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    refuse_compressed(path, raw)
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark (Windows editors) is not data
    except UnicodeDecodeError as exc:
        raise ImportFormatError(f"{path}: not a UTF-8 text table (byte {exc.start}: {exc.reason})") from None
    rows, numbers = [], []
    lines = text.splitlines()
    n_lines, ends_newline = len(lines), text.endswith(("\n", "\r"))
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        m = line_re.match(line)
        if m is None:
            raise ImportFormatError(f"{path}: line {i}: expected '{want}', got {line.strip()[:60]!r}")
        try:  # the patterns admit any run of digits, dots, signs and exponents ("1.2.3" too)
            rows.append([float(m.group(j)) for j in range(1, groups + 1)])
        except ValueError:
            raise ImportFormatError(f"{path}: line {i}: not a number in {line.strip()[:60]!r} (expected "
                                    f"'{want}')") from None
        numbers.append(i)
        last = (i, line, m)
        if float_group is not None and (i < n_lines or ends_newline):  # (the last line without one: below)
            value = m.group(float_group).strip()
            # (a value that is no positive number gets the plainer "must be positive" below)
            if not _PY_FLOAT.match(value) and rows[-1][float_group - 1] > 0:
                raise ImportFormatError(
                    f"{path}: line {i}: {value!r} is not a float as the upstream script writes one (digits after a "
                    f"decimal point): the line looks cut mid-value or edited ({line.strip()[:60]!r}); restore the "
                    "complete file")
    if not rows:
        raise ImportFormatError(f"{path}: no data lines")
    if float_group is not None and not ends_newline and last[0] == n_lines:
        value = last[2].group(float_group).strip()
        if not _PY_FLOAT.match(value):
            raise ImportFormatError(
                f"{path}: line {last[0]} has no final newline and ends in {value!r}, not a float as the upstream "
                f"script writes one (digits after a decimal point): the file looks cut mid-value "
                f"({last[1].strip()[:60]!r}); restore the complete file")
    return np.asarray(rows), np.asarray(numbers)


def _require_positive(path: Path, values: np.ndarray, lines: np.ndarray, what: str) -> None:
    """Raise naming the first data line of ``path`` whose ``values`` are not all finite and positive."""
    bad = ~(np.isfinite(values) & (values > 0)).all(axis=1)
    if bad.any():
        raise ImportFormatError(f"{path}: line {lines[np.flatnonzero(bad)[0]]}: {what} must be positive numbers")


def _one_file(path: Path, device: str | None, catalog: Catalog) -> pd.DataFrame:
    match = _NAME.search(path.name)
    if match is None:
        raise ImportFormatError(f"{path}: not an LLMCompass matmul table (expected figure5__*matmul_<GPU>.csv; the "
                                "softmax/layernorm/GELU tables are the 'llmcompass-pointwise' format)")
    gpu = _gpu(path, match.group("gpu"), device)
    a, lines = _numeric_lines(path, _LINE, 5, "M, N, K, <t>ms, <x>Tflops")
    mm, nn, kk, ms, tflops = a.T
    _require_positive(path, a[:, :4], lines, "sizes and time")
    implied = 2 * mm * nn * kk / (ms * 1e-3) / 1e12
    off = np.abs(implied / tflops - 1) > 0.02
    if off.any():
        i = int(np.flatnonzero(off)[0])
        raise ImportFormatError(f"{path}: line {lines[i]}: time {ms[i]} ms and {tflops[i]} TFLOP/s disagree "
                                f"(2MNK/time = {implied[i]:.1f} TFLOP/s)")
    out = pd.DataFrame({"device": gpu, "op": "gemm", "dtype": "fp16", "time_us": ms * 1e3, "direction": "fwd",
                        "b": 1.0, "m": mm, "n": nn, "k": kk, "framework": "pytorch"})
    return finish(out, path, catalog, source=f"llmcompass:{display_path(path)}", device=device)


def import_llmcompass(paths: Iterable[str | os.PathLike] | str | os.PathLike, device: str | None = None,
                      catalog: Catalog | None = None, system: str | None = None) -> pd.DataFrame:
    """Import LLMCompass real-hardware matmul tables (one row per measured GEMM, FP16)."""
    del system
    cat = catalog_or_default(catalog)
    return concat([_one_file(p, device, cat) for p in as_paths(paths)], "LLMCompass")


#: Pointwise table kind (from the file name) -> (op, number of shape columns before the throughput).
POINTWISE_KINDS = {"softmax": ("softmax", 2), "layernorm": ("layernorm", 2), "gelu": ("elementwise", 1)}
_PW_NAME = re.compile(r"(?P<kind>softmax|layernorm|gelu)_(?P<gpu>[A-Za-z0-9]+)\.csv$")
_NUM = r"\s*([0-9.eE+-]+)\s*"


def _pointwise_file(path: Path, device: str | None, catalog: Catalog) -> pd.DataFrame:
    match = _PW_NAME.search(path.name)
    if match is None:
        raise ImportFormatError(f"{path}: not an LLMCompass softmax/layernorm/GELU table (expected "
                                "figure5__*{softmax,layernorm,gelu}_<GPU>.csv)")
    gpu = _gpu(path, match.group("gpu"), device)
    op, n_shape = POINTWISE_KINDS[match.group("kind")]
    line_re = re.compile("^" + ",".join([_NUM] * (n_shape + 1)) + "$")
    want = "M, N, <G elements/s>" if n_shape == 2 else "M, <G elements/s>"
    a, lines = _numeric_lines(path, line_re, n_shape + 1, want, float_group=n_shape + 1)
    _require_positive(path, a, lines, "sizes and throughput")
    elements = a[:, :n_shape].prod(axis=1)
    out = pd.DataFrame({"device": gpu, "op": op, "dtype": "fp16", "direction": "fwd",
                        "time_us": elements / a[:, -1] / 1e3,
                        "framework": "pytorch" if op == "softmax" else "pytorch-compile"})
    if n_shape == 2:
        out["rows"], out["hidden"] = a[:, 0], a[:, 1]
    else:
        out["elements"] = elements
        out["variant"], out["n_inputs"], out["n_outputs"], out["flops_per_element"] = "gelu", 1, 1, 8.0
    # the M = N = 4096 point is in both sweeps of a softmax/layernorm file: two measurements, both kept
    return finish(out, path, catalog, source=f"llmcompass-pointwise:{display_path(path)}", device=device)


def import_llmcompass_pointwise(paths: Iterable[str | os.PathLike] | str | os.PathLike, device: str | None = None,
                                catalog: Catalog | None = None, system: str | None = None) -> pd.DataFrame:
    """Import LLMCompass real-hardware softmax, layernorm and GELU tables (FP16, one row per measured shape;
    softmax eager, layernorm and GELU compiled: ``framework``; see the module docstring for the unit)."""
    del system
    cat = catalog_or_default(catalog)
    return concat([_pointwise_file(p, device, cat) for p in as_paths(paths)], "LLMCompass pointwise")
