"""LLMCompass matmul and pointwise importers on the real tables, plus broken copies."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid.data.importers import IMPORTERS, import_llmcompass, import_llmcompass_pointwise, import_paths
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
    with pytest.raises(ImportFormatError, match="not an LLMCompass matmul table.*llmcompass-pointwise"):
        import_llmcompass(other, catalog=catalog)
    unknown = tmp_path / "figure5__ab__matmul_TPUv3.csv"
    unknown.write_text("64, 64, 64, 0.01ms, 0.0524Tflops\n")
    with pytest.raises(ImportFormatError, match="unknown LLMCompass GPU"):
        import_llmcompass(unknown, catalog=catalog)
    t = import_llmcompass(unknown, device="H100-SXM", catalog=catalog)
    np.testing.assert_allclose(t["time_us"], [10.0])


def test_real_pointwise_tables_import_as_giga_elements_per_second(shared_datasets, catalog):
    files = IMPORTERS["llmcompass-pointwise"].find(shared_datasets)
    assert len(files) == 6 and not any("matmul" in p.name for p in files)
    t = import_paths("llmcompass-pointwise", shared_datasets, catalog=catalog)
    assert set(t["device"]) == {"A100-SXM4-80GB", "MI210"} and (t["dtype"] == "fp16").all()
    assert t.groupby(["device", "op"]).size().to_dict() == {
        ("A100-SXM4-80GB", "elementwise"): 20, ("A100-SXM4-80GB", "layernorm"): 22, ("A100-SXM4-80GB", "softmax"): 22,
        ("MI210", "elementwise"): 20, ("MI210", "layernorm"): 22, ("MI210", "softmax"): 22}
    # first line of the A100 softmax file: "4096, 32, 9.99556025250909" G elements/s -> 13.1 us
    first = t[(t["device"] == "A100-SXM4-80GB") & (t["op"] == "softmax")].iloc[0]
    assert (first["rows"], first["hidden"]) == (4096, 32)
    np.testing.assert_allclose(first["time_us"], 4096 * 32 / 9.99556025250909e9 * 1e6)
    # large ops: the bytes an FP16 op reads and writes over the time stay below the datasheet bandwidth and
    # above a tenth of it (a unit mix-up, e.g. elements/s for G elements/s, would break either bound)
    big = t[t[["rows", "elements"]].max(axis=1).fillna(0) > 0]
    elems = big["elements"].fillna(big["rows"] * big["hidden"])
    big = big[elems >= 2**26]
    bw = 2 * 2 * elems[big.index] / (big["time_us"] * 1e-6)
    for dev, b in bw.groupby(big["device"]):
        assert 0.1 * catalog.devices[dev].mem_bw < b.max() < catalog.devices[dev].mem_bw, dev
    gelu = t[t["op"] == "elementwise"]
    assert (gelu["variant"] == "gelu").all() and (gelu["n_inputs"] == 1).all()


def test_broken_pointwise_tables_fail_with_file_and_line(tmp_path, catalog):
    bad = tmp_path / "figure5__cf__softmax_A100.csv"
    bad.write_text("4096, 32, 10.0\n4096, 64\n")
    with pytest.raises(ImportFormatError, match=r"line 2: expected 'M, N, <G elements/s>'"):
        import_llmcompass_pointwise(bad, catalog=catalog)
    bad.write_text("4096, 32, 0\n")
    with pytest.raises(ImportFormatError, match="line 1: sizes and throughput must be positive"):
        import_llmcompass_pointwise(bad, catalog=catalog)
    bad.write_text("\n")
    with pytest.raises(ImportFormatError, match="no data lines"):
        import_llmcompass_pointwise(bad, catalog=catalog)
    gelu = tmp_path / "gelu_MI210.csv"
    gelu.write_text("1024, 1024, 5.0\n")
    with pytest.raises(ImportFormatError, match="expected 'M, <G elements/s>'"):
        import_llmcompass_pointwise(gelu, catalog=catalog)
    gelu.write_text("1000000, 2.0\n")
    np.testing.assert_allclose(import_llmcompass_pointwise(gelu, catalog=catalog)["time_us"], [500.0])
    matmul = tmp_path / "figure5__ab__matmul_A100.csv"
    matmul.write_text("64, 64, 64, 0.01ms, 0.0524Tflops\n")
    with pytest.raises(ImportFormatError, match="not an LLMCompass softmax/layernorm/GELU table"):
        import_llmcompass_pointwise(matmul, catalog=catalog)
    with pytest.raises(ImportFormatError, match="unknown LLMCompass GPU"):
        import_llmcompass_pointwise(tmp_path / "softmax_TPUv3.csv", catalog=catalog)


def test_byte_order_mark_blank_lines_and_malformed_numbers(tmp_path, catalog):
    """A BOM (a table saved by a Windows editor) is not data; an error after a blank line names the file's own line
    number, not the data row's; a number the line pattern admits but float() does not ("1.2.3") is a clear error
    naming the file and line, not a bare ValueError."""
    soft = tmp_path / "figure5__cf__softmax_A100.csv"
    soft.write_bytes(b"\xef\xbb\xbf4096, 32, 10.0\r\n4096, 64, 20.0\r\n")
    np.testing.assert_allclose(import_llmcompass_pointwise(soft, catalog=catalog)["time_us"],
                               [4096 * 32 / 10.0 / 1e3, 4096 * 64 / 20.0 / 1e3])
    matmul = tmp_path / "figure5__ab__matmul_A100.csv"
    matmul.write_bytes(b"\xef\xbb\xbf64, 64, 64, 0.01ms, 0.0524288Tflops\n")
    np.testing.assert_allclose(import_llmcompass(matmul, catalog=catalog)["time_us"], [10.0])
    soft.write_text("4096, 32, 10.0\n\n4096, 64, 0\n")
    with pytest.raises(ImportFormatError, match="line 3: sizes and throughput must be positive"):
        import_llmcompass_pointwise(soft, catalog=catalog)
    matmul.write_text("\n64, 64, 64, 0.01ms, 0.0524Tflops\n64, 64, 64, 1.0ms, 0.0524Tflops\n")
    with pytest.raises(ImportFormatError, match=r"line 3: time 1.0 ms .* disagree"):
        import_llmcompass(matmul, catalog=catalog)
    soft.write_text("4096, 32, 1.2.3\n")
    with pytest.raises(ImportFormatError, match=r"figure5__cf__softmax_A100.csv: line 1: not a number"):
        import_llmcompass_pointwise(soft, catalog=catalog)
    matmul.write_text("64, 64, 64, 0.01ms, 0.05Tflops\n64, 64, 64, 0.01.0ms, 0.05Tflops\n")
    with pytest.raises(ImportFormatError, match=r"figure5__ab__matmul_A100.csv: line 2: not a number"):
        import_llmcompass(matmul, catalog=catalog)


@pytest.mark.parametrize("cut", [185, 183])
def test_pointwise_table_cut_inside_its_last_value_is_refused(shared_datasets, tmp_path, catalog, cut):
    """The public tables end without a newline, so a copy cut inside the last value (167.54... -> 167. or 16) was
    imported with the wrong throughput. The upstream script writes every throughput as a Python float (digits after
    a point), which a cut at or before the point is not; the complete tables all import."""
    src = shared_datasets / "llmcompass/figure5__cf__softmax_A100.csv"
    p = tmp_path / src.name
    p.write_bytes(src.read_bytes()[:cut])
    with pytest.raises(ImportFormatError, match=r"softmax_A100\.csv: line 7 has no final newline and ends in "
                                                r"'16(7\.)?', not a float .*cut"):
        import_llmcompass_pointwise(p, catalog=catalog)
    # a newline after the cut (an editor's, a copy's) was taken as a complete line: 16 G elements/s for 167.54,
    # a time 10x too long; no line of the upstream script is written so
    p.write_bytes(src.read_bytes()[:cut] + b"\n")
    with pytest.raises(ImportFormatError, match=r"softmax_A100\.csv: line 7: '16(7\.)?' is not a float as the "
                                                r"upstream script writes one .*cut mid-value"):
        import_llmcompass_pointwise(p, catalog=catalog)
    whole = src.read_bytes()  # the same, with a line after it: every line is checked, not only the last
    p.write_bytes(whole[:cut] + b"\n" + whole[whole.index(b"\n", cut) + 1:])
    with pytest.raises(ImportFormatError, match=r"line 7: '16(7\.)?' is not a float"):
        import_llmcompass_pointwise(p, catalog=catalog)
    p.write_bytes(whole + b"\n")  # the complete table with a final newline imports as without one
    assert len(import_llmcompass_pointwise(p, catalog=catalog)) == len(import_llmcompass_pointwise(src,
                                                                                                   catalog=catalog))
    for table in sorted((shared_datasets / "llmcompass").glob("figure5__*_*.csv")):
        if any(k in table.name for k in ("softmax", "layernorm", "gelu")):
            assert not table.read_bytes().endswith(b"\n")
            assert len(import_llmcompass_pointwise(table, catalog=catalog)) > 0
