"""The benchmark scripts that score label files given as arguments answer a header-only file (a header, no data
row: an export that kept nothing) alike: an error naming the file and saying it has no data rows, a non-zero exit,
nothing written. They used to differ: the DLRM script printed an empty JSON summary (exit 0, also without
``--json``), the llm-foundry one "0 rows" (exit 0), the inference one "missing rows", NeuSight's "no rows"; and an
empty file (no header either) was a pandas traceback in two of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid.errors import HybridError

HEADERS = {
    "nlp_e2e": ("--labels", "gpu,config,model,mode,seqlen,batch,extra,num_layer,e2e_latency,fw_latency,bwall_latency,"
                            "source_path"),
    "dlrm_gpu": ("--mlperf", "mlperf_version,org,system,file,accelerator,nodes,acc_per_node,interconnect,host_network,"
                             "framework,global_batch_size,train_samples,run_time_s,n_evals,median_ms_per_iteration,"
                             "samples_per_s"),
    "llm_inference": ("--tables", "trtllm_version,gpu,precision,model,batch_size,tp,input_len,output_len,"
                                  "output_tokens_per_s_per_gpu"),
    "llm_training": ("--mosaic", "section,Model,SeqLen (T),# GPUs,GPU,MFU,HFU,Model TFLOP,MicroBatchSize,GradAccum,"
                                 "GlobalBatchSize,Throughput (S/s),Throughput (T/s),Throughput (T/s/GPU),"
                                 "GlobalBatchSize (T),Precision,MP Mode,Sharding Strategy,Activation Checkpointing,"
                                 "Activation CPUOffload,NumParams"),
}


@pytest.mark.parametrize("script", sorted(HEADERS))
@pytest.mark.parametrize("content", ["header", "empty"])
def test_a_header_only_labels_file_is_an_error(script, content, load_experiment, shared_datasets, tmp_path, capsys):
    option, header = HEADERS[script]
    f = tmp_path / "labels.csv"
    f.write_text(header + "\n" if content == "header" else "")
    out = tmp_path / "out.md"
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = [option, str(f), "--data-dir", str(shared_datasets), "--json"]
    try:
        rc = load_experiment(script).main(argv + (["--out", str(out)] if script == "nlp_e2e" else []))
        err = capsys.readouterr().err
    except HybridError as exc:  # (nlp_e2e's main raises; its ``__main__`` block says it and exits 2)
        rc, err = 2, f"error: {exc}"
    assert rc != 0
    assert str(f) in err and "Traceback" not in err
    if content == "header":
        assert "has no data rows" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not Path(out).exists()


@pytest.mark.parametrize("script", ["dlrm_gpu", "llm_inference", "llm_training"])
def test_a_table_given_twice_is_an_error(script, load_experiment, shared_datasets, tmp_path, capsys):
    """The same table given twice (or as two spellings of one path) had its rows scored and counted twice (the
    DLRM script: n_input 6 and n_rows 4 for a 3-row table)."""
    option, header = HEADERS[script]
    f = tmp_path / "t.csv"
    f.write_text(header + "\n")
    other = tmp_path / "sub" / ".." / "t.csv"
    (tmp_path / "sub").mkdir()
    rc = load_experiment(script).main([option, str(f), str(other), "--data-dir", str(shared_datasets), "--json"])
    err = capsys.readouterr().err
    assert rc == 2 and "is given twice" in err and "Traceback" not in err
