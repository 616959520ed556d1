"""LLMCompass matmul importer on the real tables, plus broken copies."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid.data.importers import IMPORTERS, import_llmcompass, import_paths
from hybrid.errors import ImportFormatError


def test_real_tables_import_with_consistent_throughput(shared_datasets, catalog):
    files = IMPORTERS["llmcompass"].find(shared_datasets)
    assert sorted(p.name for p in files) == ["figure5__ab__matmul_A100.csv", "figure5__ab__matmul_MI210.csv"]
    t = import_paths("llmcompass", shared_datasets, catalog=catalog)
    assert set(t["device"]) == {"A100-SXM4-80GB", "MI210"} and (t["dtype"] == "fp16").all()
    assert len(t) == 42
    achieved = 2 * t["m"] * t["n"] * t["k"] / (t["time_us"] * 1e-6)
    for dev, a in achieved.groupby(t["device"]):
        peak = catalog.devices[dev].peak("fp16")
        # tensor-core FP16: large GEMMs reach well above the FP32 peak, never above the FP16 one
        assert a.max() < peak and a.max() > 0.5 * peak, dev


def test_broken_tables_fail_with_file_and_line(tmp_path, catalog):
    bad = tmp_path / "figure5__ab__matmul_A100.csv"
    bad.write_text("64, 12288, 12288, 0.1900ms, 101.7124Tflops\n64, 12288, 12288, 1.9ms, 101.7Tflops\n")
    with pytest.raises(ImportFormatError, match=r"line 2: .*disagree"):
        import_llmcompass(bad, catalog=catalog)
    bad.write_text("64, 12288\n")
    with pytest.raises(ImportFormatError, match="line 1"):
        import_llmcompass(bad, catalog=catalog)
    other = tmp_path / "figure5__cf__softmax_A100.csv"
    other.write_text("4096, 32, 9.99\n")
    with pytest.raises(ImportFormatError, match="not an LLMCompass matmul table"):
        import_llmcompass(other, catalog=catalog)
    unknown = tmp_path / "figure5__ab__matmul_TPUv3.csv"
    unknown.write_text("64, 64, 64, 0.01ms, 0.0524Tflops\n")
    with pytest.raises(ImportFormatError, match="unknown LLMCompass GPU"):
        import_llmcompass(unknown, catalog=catalog)
    t = import_llmcompass(unknown, device="H100-SXM", catalog=catalog)
    np.testing.assert_allclose(t["time_us"], [10.0])
