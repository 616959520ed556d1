"""LLMCompass real-hardware matmul tables (PrincetonUniversity/LLMCompass ``ae/figure5/*/real_hardware/``).

Files ``figure5__ab__matmul_<GPU>.csv`` (renamed in the public layout) have no header; each line is
``M, N, K, <time>ms, <throughput>Tflops`` for ``C[M,N] = A[M,K] x B[K,N]`` in FP16 (the paper's setting; the
A100 rows reach 258 TFLOP/s, above the 19.5 TFLOP/s FP32 peak, so they are tensor-core FP16). The GPU comes
from the file name: ``A100`` is LLMCompass's ``A100_80GB`` (SXM4) model, ``MI210`` the AMD Instinct MI210.
The time column is checked against the throughput column (2MNK / time) so a column mix-up fails loudly.

The softmax, layernorm and GELU tables of the same figure give a throughput whose unit the files do not state,
so they are not imported (``hybrid data import llmcompass`` on them fails with a message saying so).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.data.importers._common import as_paths, catalog_or_default, concat, display_path, finish
from hybrid.errors import ImportFormatError
from hybrid.hardware.catalog import Catalog

#: File-name GPU label -> catalog device.
DEVICES = {"A100": "A100-SXM4-80GB", "MI210": "MI210"}
_NAME = re.compile(r"matmul_(?P<gpu>[A-Za-z0-9]+)\.csv$")
_LINE = re.compile(r"^\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*([0-9.eE+-]+)\s*ms\s*,\s*([0-9.eE+-]+)\s*Tflops\s*$")


def _one_file(path: Path, device: str | None, catalog: Catalog) -> pd.DataFrame:
    match = _NAME.search(path.name)
    if match is None:
        raise ImportFormatError(f"{path}: not an LLMCompass matmul table (expected figure5__*matmul_<GPU>.csv; the "
                                "softmax/layernorm/GELU tables state no unit and are not imported)")
    gpu = device or DEVICES.get(match.group("gpu"))
    if gpu is None:
        raise ImportFormatError(f"{path}: unknown LLMCompass GPU label {match.group('gpu')!r} (known: "
                                f"{', '.join(DEVICES)}); pass --device")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ImportFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    rows = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        m = _LINE.match(line)
        if m is None:
            raise ImportFormatError(f"{path}: line {i}: expected 'M, N, K, <t>ms, <x>Tflops', got {line.strip()[:60]!r}")
        rows.append([float(m.group(j)) for j in range(1, 6)])
    if not rows:
        raise ImportFormatError(f"{path}: no data lines")
    a = np.asarray(rows)
    mm, nn, kk, ms, tflops = a.T
    if (a[:, :4] <= 0).any():
        i = int(np.flatnonzero((a[:, :4] <= 0).any(axis=1))[0])
        raise ImportFormatError(f"{path}: line {i + 1}: sizes and time must be positive")
    implied = 2 * mm * nn * kk / (ms * 1e-3) / 1e12
    off = np.abs(implied / tflops - 1) > 0.02
    if off.any():
        i = int(np.flatnonzero(off)[0])
        raise ImportFormatError(f"{path}: line {i + 1}: time {ms[i]} ms and {tflops[i]} TFLOP/s disagree "
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
