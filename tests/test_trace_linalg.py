"""LAPACK factorisations, CTC losses and the other ops real models use that traces left unmodelled: real CPU
traces, mapped to op families with their FLOPs and bytes, and priced on another device instead of at 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from hybrid.cli.main import main as cli_main  # noqa: E402
from hybrid.data.bundle import load_bundle  # noqa: E402
from hybrid.data.traces import load_traces  # noqa: E402
from hybrid.data.traces.opmap import map_op  # noqa: E402
from hybrid.data.traces.record import record_step  # noqa: E402
from hybrid.engine.costs import RooflineCostModel  # noqa: E402
from hybrid.workloads.trace_graph import build_trace_graph, predict_trace  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "datasets" / "cpu-amd-epyc-1c"
CPU = "cpu-amd-epyc-1c"


def _flops(mp) -> float:
    return mp.row["elements"] * mp.row["flops_per_element"]


def test_factorisation_flops_are_the_textbook_counts():
    """LAWN 41's counts: QR of m x n (m >= n) 2mn^2 - 2n^3/3, forming the thin Q as much again (mode "reduced",
    the default), the full m x m Q more (told from the returned Q's shape where the trace has it), none for mode
    "r"; LU 2n^3/3; Cholesky n^3/3; a triangular solve n^2 per right-hand side; the batch multiplies."""
    m, n = 512, 256
    qr = 2 * m * n**2 - 2 * n**3 / 3
    reduced = map_op("aten::linalg_qr", [[m, n], []], ["fp32", None])
    assert reduced.kind == "op" and reduced.label == "linalg" and reduced.row["dtype"] == "fp32"
    assert _flops(reduced) == pytest.approx(2 * qr, rel=1e-4)
    assert _flops(map_op("aten::linalg_qr", [[m, n], []], ["fp32", None], [[m, n], [n, n]])) == pytest.approx(
        2 * qr, rel=1e-4)
    assert _flops(map_op("aten::linalg_qr", [[m, n], []], ["fp32", None], [[0], [n, n]])) == pytest.approx(
        qr, rel=1e-4)  # mode "r": R only
    complete = map_op("aten::linalg_qr", [[m, n], []], ["fp32", None], [[m, m], [m, n]])
    assert _flops(complete) == pytest.approx(qr + 4 * m * m * n - 4 * m * n**2 + 4 * n**3 / 3, rel=1e-4)
    assert _flops(map_op("aten::linalg_lu_factor_ex", [[4, 64, 64], [], []], ["fp64", None, None])) == \
        pytest.approx(4 * 2 * 64**3 / 3, rel=1e-4)
    assert map_op("aten::linalg_lu_factor_ex", [[64, 64], [], []], ["fp64", None, None]).row["dtype"] == "fp64"
    assert _flops(map_op("aten::linalg_cholesky_ex", [[64, 64], [], []], ["fp32", None, None])) == \
        pytest.approx(64**3 / 3, rel=1e-4)
    assert _flops(map_op("aten::linalg_solve_triangular", [[64, 64], [64, 8], [], [], []],
                         ["fp32", "fp32", None, None, None])) == pytest.approx(64 * 64 * 8)
    assert _flops(map_op("aten::linalg_lu_solve", [[64, 64], [64], [64, 8], [], [], []],
                         ["fp32", "int32", "fp32", None, None, None])) == pytest.approx(2 * 64 * 64 * 8)


def test_a_traced_qr_is_priced_by_its_flops_on_another_device_and_said_to_be_a_lower_bound(tmp_path, capsys):
    """``linalg_qr`` calls ``triu`` for R, so it was looked into, and its own time (the LAPACK calls, most of the
    step) went to the host gaps: kept on the traced CPU, priced at 0 on a GPU with no warning (0.18 ms predicted
    on an H100 for a step whose QR took 2.7 ms on this CPU). It is one ``linalg`` unit now: its traced time on
    the traced CPU, its FLOPs at the FP32 rate elsewhere, with a warning."""
    torch.manual_seed(0)
    a = torch.randn(512, 256)
    w = torch.nn.Linear(64, 64)
    x = torch.randn(32, 64)

    def step():
        q, r = torch.linalg.qr(a)
        (w(x).sum() + q.sum() + r.sum()).backward()

    torch.set_num_threads(1)
    paths = record_step(step, tmp_path, warmup=1, measure_overhead=False, memory=False, timed=0)
    cat = load_bundle(BUNDLE)[1]
    traces = load_traces([paths["kineto"], paths["et"]])
    it = build_trace_graph(traces, "H100-SXM", cat)
    u = it.units[it.units["label"] == "linalg"]
    assert list(u["name"]) == ["aten::linalg_qr"]
    assert "aten::linalg_qr" not in set(it.own_time()["name"])
    pred = predict_trace(it, RooflineCostModel(cat))
    bd = pred.breakdown().set_index("label")
    flops = 4 * 512 * 256**2 - 4 * 256**3 / 3
    assert bd.loc["linalg", "predicted_us"] >= flops / cat.device("H100-SXM").compute_peak("fp32") * 1e6
    # on the traced CPU: the QR's traced time (the count is a lower bound), not the roofline's
    same = build_trace_graph(traces, CPU, cat)
    sbd = predict_trace(same, RooflineCostModel(cat)).breakdown().set_index("label")
    assert sbd.loc["linalg", "predicted_us"] == pytest.approx(sbd.loc["linalg", "measured_us"])
    assert cli_main(["trace", "predict", str(tmp_path), "--device", "H100-SXM", "--roofline", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["breakdown_ms"]["linalg"] > 0 and out["unmodelled"]["own_time"]["ops"] == 0
    assert any("1 LAPACK factorisation/solve op(s) (linalg_qr x1)" in w and "lower bound" in w
               for w in out["warnings"]), out["warnings"]
    # the traced CPU compared with a GPU: the GPU's row is the lower bound, said with its name
    assert cli_main(["trace", "predict", str(tmp_path), "--device", CPU, "--bundle", str(BUNDLE), "--roofline",
                     "--compare", "H100-SXM", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any(w.startswith("--compare H100-SXM: 1 LAPACK factorisation/solve op(s)") for w in out["warnings"]), \
        out["warnings"]


def test_a_traced_step_with_bucketize_trace_fractional_pooling_lu_and_ctc_leaves_nothing_unmodelled(tmp_path):
    """Ops real models use that were unmodelled (priced at 0 on any other device): ``bucketize`` (quantile binning,
    relative-position buckets), ``trace``, ``fractional_max_pool2d`` and its backward, ``linalg_lu_factor_ex``
    and CTC's ``_ctc_loss`` / ``_ctc_loss_backward``. Each maps to its family now, with its bytes and FLOPs."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    pool = torch.nn.FractionalMaxPool2d(2, output_ratio=0.5)
    lin = torch.nn.Linear(8 * 8 * 8, 16 * 5)
    x = torch.randn(2, 3, 16, 16)
    targets, frames, lengths = torch.randint(1, 5, (2, 4)), torch.full((2,), 16), torch.full((2,), 4)
    bounds = torch.linspace(-2, 2, 9)
    s = (torch.randn(16, 16) + 16 * torch.eye(16)).requires_grad_(True)

    def step():
        h = pool(conv(x))
        logp = lin(h.flatten(1)).view(2, 16, 5).transpose(0, 1).log_softmax(-1)
        ids = torch.bucketize(h.detach(), bounds)
        lu, _ = torch.linalg.lu_factor(s)
        loss = (torch.nn.functional.ctc_loss(logp, targets, frames, lengths) + torch.trace(s @ s) * 1e-3
                + lu.sum() * 1e-3 + ids.float().mean())
        loss.backward()

    torch.set_num_threads(1)
    paths = record_step(step, tmp_path, warmup=1, measure_overhead=False, memory=False, timed=0)
    for files in ([paths["kineto"]], [paths["kineto"], paths["et"]], [paths["et"]]):
        it = build_trace_graph(load_traces(files), "H100-SXM")
        assert it.unmodelled().empty, (files, it.unmodelled())
        units = it.units.set_index("name")
        rows = {n: units.loc[n, "row"] for n in ("aten::bucketize", "aten::trace", "aten::fractional_max_pool2d",
                                                  "aten::fractional_max_pool2d_backward", "aten::_ctc_loss",
                                                  "aten::_ctc_loss_backward", "aten::linalg_lu_factor_ex")}
        assert units.loc["aten::bucketize", "label"] == "sort"
        assert rows["aten::bucketize"]["elements"] == 2 * 8 * 8 * 8
        assert rows["aten::bucketize"]["n_outputs"] == 2.0  # int64 indices in fp32's bytes
        assert rows["aten::trace"]["elements"] == 16 and units.loc["aten::trace", "label"] == "reduction"
        fwd, bwd = rows["aten::fractional_max_pool2d"], rows["aten::fractional_max_pool2d_backward"]
        assert fwd["variant"] == bwd["variant"] == "maxpool" and fwd["elements"] == bwd["elements"] == 2 * 8 * 16 * 16
        assert fwd["flops_per_element"] == pytest.approx(4 * 0.25)  # 2 x 2 windows over a quarter of the map
        # the dynamic program's cells: batch 2 x 16 frames x (2 x 4 + 1) states; the backward twice the work
        assert rows["aten::_ctc_loss"]["elements"] == rows["aten::_ctc_loss_backward"]["elements"] == 2 * 16 * 9
        assert rows["aten::_ctc_loss_backward"]["flops_per_element"] == 2 * rows["aten::_ctc_loss"]["flops_per_element"]
        assert rows["aten::linalg_lu_factor_ex"]["elements"] * rows["aten::linalg_lu_factor_ex"][
            "flops_per_element"] == pytest.approx(2 * 16**3 / 3, rel=1e-3)
        bd = predict_trace(it, RooflineCostModel()).breakdown().set_index("label")
        assert (bd.loc[["ctc", "linalg", "pool", "sort"], "predicted_us"] > 0).all()
