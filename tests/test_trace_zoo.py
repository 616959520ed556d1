"""Trace coverage beyond the benchmark models: transposed / split views, the loss composites, composites whose one
slow call looks like a kernel of its own, and real traced steps of architectures with those ops (Falcon's ``.T``,
Mamba's ``tensor_split``) that leave nothing unmodelled (``experiments/trace_zoo`` runs 23 architectures)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybrid.data.traces import load_traces
from hybrid.data.traces.opmap import map_op
from hybrid.workloads.trace_graph import trace_units

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "datasets" / "cpu-amd-epyc-1c"
CPU = "cpu-amd-epyc-1c"


@contextlib.contextmanager
def _one_thread():
    """One intra-op thread, as the committed CPU profile was measured; the caller's count restored."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield torch
    finally:
        torch.set_num_threads(threads)


def _traced_step_predicted(build, tmp_path, capsys) -> dict:
    """Record one step of ``build(torch)`` (one thread) and ``hybrid trace predict`` it on this CPU: its JSON."""
    from hybrid.cli.main import main as cli_main
    from hybrid.data.traces.record import record_step

    with _one_thread() as torch:
        torch.manual_seed(0)
        record_step(build(torch), tmp_path, warmup=1, timed=1, measure_overhead=False)
    assert cli_main(["trace", "predict", str(tmp_path), "--device", CPU, "--bundle", str(BUNDLE), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _median_us(fn, warmup: int = 2, runs: int = 9) -> float:
    """Median on-core time of ``fn`` on this thread (one intra-op thread: the op runs here), as the committed CPU
    profile was timed (``--clock thread``): other processes on the machine do not inflate it."""
    import time

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.thread_time()
        fn()
        times.append(time.thread_time() - t0)
    return float(np.median(times)) * 1e6


@pytest.fixture(scope="module")
def cpu_model():
    """A HybridPredictor fitted on the committed CPU profile (no FFT or fold/unfold rows in it)."""
    from hybrid.corrections.predictor import HybridPredictor
    from hybrid.data.bundle import load_bundle

    table, cat = load_bundle(BUNDLE)
    return HybridPredictor(catalog=cat).fit(table)


@pytest.mark.parametrize("name", ["aten::numpy_T", "aten::mT", "aten::adjoint", "aten::tensor_split",
                                  "aten::hsplit", "aten::swapdims", "aten::moveaxis", "aten::reshape_as"])
def test_transposed_and_split_views_launch_nothing(name):
    mp = map_op(name, [[96, 64]], ["float"], [], {})
    assert mp is not None and mp.kind == "view"
    # a composite of them (not a leaf) is looked into, as every view is
    assert map_op(name, [[96, 64]], ["float"], [], {}, leaf=False) is None


@pytest.mark.parametrize("name", ["aten::_nnz", "aten::is_coalesced", "aten::_coalesced_", "aten::sparse_dim",
                                  "aten::dense_dim"])
def test_a_sparse_tensor_s_metadata_launches_nothing(name):
    """SparseAdam's step over an ``EmbeddingBag(sparse=True)`` gradient reads (and sets) the sparse tensor's metadata:
    no kernel, so a view, not 26 unmodelled ops that took a seventh of the unmodelled time of such a step."""
    mp = map_op(name, [[1000, 32]], ["float"], [], {})
    assert mp is not None and mp.kind == "view"


@pytest.mark.parametrize("name", ["aten::nll_loss", "aten::nll_loss_nd"])
def test_the_loss_composites_cost_what_their_forward_costs(name):
    """An execution trace has recorded ``aten::nll_loss`` without its children: it is the gather of one value per
    target that ``nll_loss_forward`` is, not the [N, vocab] input's size and not an unmodelled op."""
    dims, types = [[64, 128], [64], [], [], []], ["float", "long", None, None, None]
    fwd = map_op("aten::nll_loss_forward", dims, types, [], {})
    mp = map_op(name, dims, types, [], {})
    assert mp is not None and mp.kind == "op" and mp.row == fwd.row
    assert mp.row["elements"] == 64  # one per target, not 64 x 128
    # with children it is looked into (under autocast, bf16 ``nll_loss`` casts its [N, vocab] input to fp32 first:
    # a copy kernel that a gather-sized row would hide)
    assert map_op(name, dims, types, [], {}, leaf=False) is None


def _x(name, ts, dur, **args):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _slice_backward(ts: float, dur: float) -> list[dict]:
    g, full = {"Input Dims": [[2, 4, 32, 4]], "Input type": ["float"]}, [[2, 4, 32, 8]]
    return [_x("aten::slice_backward", ts, dur, **g),
            _x("aten::zeros", ts + 1, 20),
            _x("aten::zero_", ts + 2, 8, **{"Input Dims": full, "Input type": ["float"]}),
            _x("aten::copy_", ts + dur - 14, 12, **{"Input Dims": [[2, 4, 32, 4], [2, 4, 32, 4]],
                                                     "Input type": ["float", "float"]})]


def test_one_slow_call_of_a_composite_is_still_looked_into(tmp_path):
    """A composite whose first call spends most of its time outside its children (a first call's dispatch and
    recording) is judged by its calls' median: looked into like its other calls, its zero-fill and copy costed,
    not one unmodelled unit, and so is a composite that forwards its arguments to one op of its family, however
    slow its one call. An unmapped op that spends most of every call outside its children stays one unit."""
    ev = [_x("ProfilerStep#0", 0, 2000)]
    ev += _slice_backward(10, 232)  # self share 0.83
    ev += _slice_backward(300, 60)  # self share 0.33
    ev += _slice_backward(400, 58)
    for ts in (600, 800):  # a kernel with a helper, every call: self share 0.9
        ev += [_x("aten::_my_kernel", ts, 100, **{"Input Dims": [[64]], "Input type": ["float"]}),
               _x("aten::zero_", ts + 1, 10, **{"Input Dims": [[64]], "Input type": ["float"]})]
    # a loss composite forwarding its arguments down two layers, its one call descheduled inside (FNet's traced
    # step: self share 0.52 at 133 us, 0.28 at 44 us on other runs): its forward's gather is costed
    loss = {"Input Dims": [[2, 2], [2], [], [], []], "Input type": ["float", "long", "Scalar", "Scalar", "Scalar"]}
    ev += [_x("aten::nll_loss_nd", 1000, 133, **loss), _x("aten::nll_loss", 1060, 64, **loss),
           _x("aten::nll_loss_forward", 1080, 40, **loss)]
    path = tmp_path / "kineto_rank0.json"
    path.write_text(json.dumps({"schemaVersion": 1, "record_shapes": 1, "traceEvents": ev}))
    units = trace_units(load_traces([str(path)])[0])
    assert "aten::slice_backward" not in set(units["name"])
    fwd = units[units["name"].str.startswith("aten::nll_loss")]
    assert list(fwd["name"]) == ["aten::nll_loss_forward"] and list(fwd["kind"]) == ["op"]
    assert (units["name"] == "aten::zeros").sum() == 3 and (units["name"] == "aten::copy_").sum() == 3
    mine = units[units["name"] == "aten::_my_kernel"]
    assert len(mine) == 2 and (mine["kind"] == "unmodelled").all()


def test_a_zero_filled_backward_called_once_is_looked_into_however_slow_its_call(tmp_path):
    """Backwards of indexing ops that PyTorch writes as zeros plus one write into them (``slice_backward``,
    ``trace_backward``, ...) are composites whatever their one call's self share: a call descheduled between its
    helpers (613 against ~200 us on a loaded CI machine) had made ``trace_backward`` one unmodelled unit, priced
    at 0 us on another device. An unmapped op of another name with the same helpers and self share stays one
    unit (a kernel with helpers)."""
    ev = [_x("ProfilerStep#0", 0, 3000)] + _slice_backward(10, 600)  # its only call: self share 0.93
    sq = {"Input Dims": [[16, 16]], "Input type": ["float"]}
    for name, ts in (("aten::trace_backward", 1000), ("aten::_my_trace_like", 2000)):
        ev += [_x(name, ts, 600, **{"Input Dims": [[], []], "Input type": ["float", "ScalarList"]}),
               _x("aten::zeros", ts + 1, 20), _x("aten::zero_", ts + 2, 8, **sq),
               _x("aten::arange", ts + 30, 6, **{"Input Dims": [[], [], [], [], []], "Input type": ["Scalar"]}),
               _x("aten::index_fill_", ts + 40, 10, **{"Input Dims": [[256], [16], []],
                                                         "Input type": ["float", "long", "Scalar"]})]
    path = tmp_path / "kineto_rank0.json"
    path.write_text(json.dumps({"schemaVersion": 1, "record_shapes": 1, "traceEvents": ev}))
    units = trace_units(load_traces([str(path)])[0])
    names = set(units["name"])
    assert "aten::slice_backward" not in names and "aten::trace_backward" not in names
    assert (units["name"] == "aten::copy_").sum() == 1 and (units["name"] == "aten::index_fill_").sum() == 1
    mine = units[units["name"] == "aten::_my_trace_like"]
    assert len(mine) == 1 and (mine["kind"] == "unmodelled").all()


def test_a_descheduled_composite_calling_compute_ops_is_still_looked_into(tmp_path):
    """A composite called once in the step (``cross_entropy_loss``: a log-softmax, then the loss gather) whose one
    call was descheduled between its children spends most of that call outside them; it is still looked into:
    its softmax and gather are costed, on another device too, and its time outside them is listed as its own. As
    one unmodelled unit it was priced at 0 on a GPU, the ops it calls with it."""
    from hybrid.engine.costs import RooflineCostModel
    from hybrid.hardware.catalog import default_catalog
    from hybrid.workloads.trace_graph import build_trace_graph, predict_trace

    desched = 400.0
    ls = {"Input Dims": [[64, 1000], [], []], "Input type": ["float", "Scalar", ""]}
    loss = {"Input Dims": [[64, 1000], [64], [], [], []], "Input type": ["float", "long", "Scalar", "Scalar",
                                                                       "Scalar"]}
    ce = {"Input Dims": [[64, 1000], [64], [], [], [], []],
          "Input type": ["float", "long", "", "Scalar", "Scalar", "Scalar"]}
    ev = [_x("ProfilerStep#0", 0, 2000),
          _x("aten::cross_entropy_loss", 10, 60 + desched, **ce),  # self share 0.87
          _x("aten::log_softmax", 12, 30, **ls), _x("aten::_log_softmax", 14, 26, **ls),
          _x("aten::nll_loss_nd", 45 + desched, 20, **loss), _x("aten::nll_loss", 47 + desched, 16, **loss),
          _x("aten::nll_loss_forward", 49 + desched, 12, **loss)]
    path = tmp_path / "kineto_rank0.json"
    path.write_text(json.dumps({"schemaVersion": 1, "record_shapes": 1, "traceEvents": ev}))
    traces = load_traces([str(path)])
    units = trace_units(traces[0])
    assert list(units["name"]) == ["aten::log_softmax", "aten::nll_loss_forward"]
    assert list(units["kind"]) == ["op", "op"]
    it = build_trace_graph(traces, "A100-SXM4-80GB")
    assert it.unmodelled().empty
    own = it.own_time().set_index("name")
    assert own.at["aten::cross_entropy_loss", "own_us"] == pytest.approx(60 + desched - 30 - 20)
    pred = predict_trace(it, RooflineCostModel(default_catalog()))
    bd = pred.breakdown().set_index("label")["predicted_us"]
    assert bd["softmax"] > 0 and bd["elementwise"] > 0


@pytest.mark.parametrize("index_arithmetic", [False, True])
def test_a_composite_that_forwards_to_one_copy_is_looked_into_however_slow_its_one_call(tmp_path,
                                                                                       index_arithmetic):
    """``aten::tile`` calls only ``aten::repeat`` (a copy) with its own arguments. Its one call in the step,
    descheduled before the copy, spends most of its time outside it; it is still looked into: the copy is costed,
    on another device too. As one unmodelled unit it was priced at 0 there. On a CPU the copy calls index
    arithmetic inside (``aten::add``): part of the copy's unit, not work of ``tile``'s. A kernel that fills its own
    argument first (``zero_``, the same shapes) stays one unit, and so does one whose helper, a copy, happens to
    call an elementwise op inside."""
    from hybrid.engine.costs import RooflineCostModel
    from hybrid.hardware.catalog import default_catalog
    from hybrid.workloads.trace_graph import build_trace_graph, predict_trace

    desched = 800.0
    big = {"Input Dims": [[256, 1024], []], "Input type": ["float", "ScalarList"]}
    ev = [_x("ProfilerStep#0", 0, 3000),
          _x("aten::tile", 10, 100 + desched, **big),  # self share 0.9
          _x("aten::repeat", 12 + desched, 96, **big),
          _x("aten::empty", 14 + desched, 4),
          _x("aten::copy_", 20 + desched, 70, **{"Input Dims": [[4, 256, 1024], [4, 256, 1024], []],
                                                  "Input type": ["float", "float", "Scalar"]})]
    if index_arithmetic:  # as on a CPU
        ev.append(_x("aten::add", 92 + desched, 10, **{"Input Dims": [[2], [], []],
                                                        "Input type": ["long", "Scalar", "Scalar"]}))
    one = {"Input Dims": [[64]], "Input type": ["float"]}
    for ts in (1000, 1200):  # kernels with a helper, every call: self share 0.9
        ev += [_x("aten::_my_kernel", ts, 100, **one), _x("aten::zero_", ts + 1, 10, **one)]
        ev += [_x("aten::_my_other", ts + 100, 100, **{"Input Dims": [[64], [64]], "Input type": ["float", "float"]}),
               _x("aten::clone", ts + 101, 10, **{"Input Dims": [[64], []], "Input type": ["float", ""]}),
               _x("aten::add", ts + 102, 5, **{"Input Dims": [[2], [], []], "Input type": ["long", "Scalar",
                                                                                           "Scalar"]})]
    path = tmp_path / "kineto_rank0.json"
    path.write_text(json.dumps({"schemaVersion": 1, "record_shapes": 1, "traceEvents": ev}))
    traces = load_traces([str(path)])
    units = trace_units(traces[0]).set_index("name")
    assert "aten::tile" not in units.index and units.at["aten::repeat", "kind"] == "op"
    assert (units.loc["aten::_my_kernel", "kind"] == "unmodelled").all()
    assert (units.loc["aten::_my_other", "kind"] == "unmodelled").all() and "aten::clone" not in units.index
    it = build_trace_graph(traces, "A100-SXM4-80GB")
    assert set(it.unmodelled()["name"]) == {"aten::_my_kernel", "aten::_my_other"}
    assert it.own_time().set_index("name").at["aten::tile", "own_us"] == pytest.approx(100 + desched - 96)
    bd = predict_trace(it, RooflineCostModel(default_catalog())).breakdown().set_index("label")["predicted_us"]
    assert bd["copy"] > 0


def test_a_composite_is_judged_by_its_calls_on_every_rank_of_the_job(tmp_path):
    """A composite called once per step on each rank of a 2-rank job, rank 0's call descheduled before its copies
    (self share 0.9), rank 1's not (0.2): looked into on both ranks, its copies costed on another device. Judged
    rank by rank, rank 0 made it one unmodelled unit, priced at 0 there while rank 1 costed the same copies."""
    from hybrid.workloads.trace_graph import build_trace_graph, job_units

    cp = {"Input Dims": [[256, 1024], [256, 1024], []], "Input type": ["float", "float", "Scalar"]}
    comp = {"Input Dims": [[256, 1024], [2]], "Input type": ["float", "long"]}
    paths = []
    for rank, desched in ((0, 900.0), (1, 0.0)):
        ev = [_x("ProfilerStep#0", 0, 3000),
              _x("aten::_my_composite", 10, 100 + desched, **comp),
              _x("aten::copy_", 12 + desched, 40, **cp), _x("aten::copy_", 60 + desched, 40, **cp),
              _x("c10d::allreduce_", 2000, 50, **{"Input Dims": [[[1024]], [], [], [], [], []],
                                                  "Input type": ["GenericList[Tensor(float)]", "", "", "", "Int",
                                                                 "Int"]}),
              _x("record_param_comms", 2010, 30, **{"Process Group Name": "0", "Group size": 2,
                                                   "In msg nelems": 1024, "Out msg nelems": 1024,
                                                   "dtype": "Float"})]
        path = tmp_path / f"kineto_rank{rank}.json"
        path.write_text(json.dumps({"schemaVersion": 1, "record_shapes": 1, "traceEvents": ev,
                                    "distributedInfo": {"rank": rank, "world_size": 2, "backend": "gloo",
                                                        "pg_config": [{"pg_name": "0", "ranks": [0, 1]}]}}))
        paths.append(str(path))
    traces = load_traces(paths)
    assert (trace_units(traces[0])["name"] == "aten::_my_composite").any()  # alone: one unit on rank 0
    for units in job_units(traces):
        assert "aten::_my_composite" not in set(units["name"]) and (units["name"] == "aten::copy_").sum() == 2
    it = build_trace_graph(traces, "A100-SXM4-80GB")
    assert it.unmodelled().empty
    assert set(it.info["own_time"]["rank"]) == {0, 1}
    assert it.own_time().set_index("name").at["aten::_my_composite", "count"] == 2


def test_sampling_a_token_leaves_nothing_unmodelled(tmp_path):
    """``torch.multinomial`` (``generate(do_sample=True)``'s sampler) checks its probabilities with ``aminmax`` and
    ``_assert_async`` before its exponential / divide / argmax: a reduction and a check of one value, not 3 unmodelled
    ops per sampled token (0 ms on another device, a GPU's check kernel lost)."""
    from hybrid.data.traces.record import record_step

    with _one_thread() as torch:
        probs = torch.softmax(torch.randn(2, 128), -1)
        paths = record_step(lambda: torch.multinomial(probs, 1), tmp_path, warmup=1, execution_trace=False,
                            measure_overhead=False, memory=False, timed=0)
    tr = load_traces([paths["kineto"]])[0]
    names = set(tr.ops["name"])
    assert {"aten::aminmax", "aten::_assert_async"} <= names
    units = trace_units(tr)
    assert (units["kind"] != "unmodelled").all(), units[units["kind"] == "unmodelled"]["name"].tolist()
    red = units[units["name"].isin(["aten::aminmax", "aten::_assert_async"])]
    assert set(red["label"]) == {"reduction"} and 128 * 2 in {r["elements"] for r in red["row"]}


@pytest.mark.parametrize("arch", ["falcon", "mamba"])
def test_a_traced_step_of_these_architectures_leaves_nothing_unmodelled(tmp_path, capsys, arch):
    tf = pytest.importorskip("transformers")
    if not hasattr(tf, "FalconConfig") or not hasattr(tf, "MambaConfig"):
        pytest.skip("transformers without Falcon / Mamba")

    def build(torch):
        if arch == "falcon":
            model = tf.FalconForCausalLM(tf.FalconConfig(vocab_size=128, hidden_size=64, num_hidden_layers=1,
                                                         num_attention_heads=4))
        else:
            model = tf.MambaForCausalLM(tf.MambaConfig(vocab_size=128, hidden_size=64, num_hidden_layers=1,
                                                       state_size=8))
        ids = torch.randint(0, 100, (2, 32))
        return lambda: model(input_ids=ids, labels=ids).loss.backward()

    out = _traced_step_predicted(build, tmp_path, capsys)
    names = set()
    for t in load_traces(sorted(str(p) for p in tmp_path.glob("*.json"))):
        names |= set(t.ops["name"])
    assert ("aten::numpy_T" if arch == "falcon" else "aten::tensor_split") in names  # the op this test is about
    assert out["unmodelled"]["ops"] == 0, out["unmodelled"]
    assert out["predicted_ms"] > 0


# ConvBERT's dynamic convolution, as traced: F.unfold of [2, 32, 32, 1] with a 9x1 kernel, padding 4 -> [2, 288, 32]
UNFOLD_ARGS = ['', '[9, 1]', '[1, 1]', '[4, 0]', '[1, 1]']
FOLD_ARGS = ['', '[32, 1]', '[9, 1]', '[1, 1]', '[4, 0]', '[1, 1]']


def test_unfold_and_fold_are_nearest_interpolation_rows_over_the_columns():
    dims, types = [[2, 32, 32, 1], [], [], [], []], ["float", None, None, None, None]
    mp = map_op("aten::im2col", dims, types, [[2, 288, 32]], {"concrete": UNFOLD_ARGS})
    assert mp.kind == "op" and mp.label == "fold"
    r = mp.row
    assert (r["variant"], r["direction"], r["elements"]) == ("upsample_nearest", "fwd", 2 * 288 * 32)
    assert r["n_inputs"] == pytest.approx(2048 / 18432, abs=1e-4) and r["n_outputs"] == 1.0
    assert (r["rows"], r["hidden"]) == (2 * 288, 32)
    # the columns' shape from the kernel, dilation, padding and stride when the output is not recorded
    assert map_op("aten::im2col", dims, types, [], {"concrete": UNFOLD_ARGS}).row == r
    cols = [[2, 288, 32], [], [], [], [], []]
    back = map_op("aten::col2im", cols, ["float"] + [None] * 5, [[2, 32, 32, 1]], {"concrete": FOLD_ARGS})
    b = back.row
    assert (b["variant"], b["direction"], b["elements"]) == ("upsample_nearest", "bwd", 18432)
    assert b["n_inputs"] == 1.0 and b["n_outputs"] == pytest.approx(2048 / 18432, abs=1e-4)
    assert map_op("aten::col2im", cols, ["float"] + [None] * 5, [], {"concrete": FOLD_ARGS}).row == b
    # nothing to go on (no output, no arguments), a column count the kernel does not divide: not guessed at
    assert map_op("aten::col2im", cols, ["float"] + [None] * 5, [], {}) is None
    bad = ['', '[32, 1]', '[5, 1]', '[1, 1]', '[2, 0]', '[1, 1]']
    assert map_op("aten::col2im", cols, ["float"] + [None] * 5, [], {"concrete": bad}) is None


def test_unfold_and_fold_on_this_cpu_within_a_loose_factor_of_their_time(cpu_model):
    """F.unfold / F.fold of a 16 x 128 x 14 x 14 map (3x3, stride 2), timed here, against the CPU profile's model:
    within 0.15-4x (0.33x and 0.63x measured on the project's VM, 0.25x in a full CI run on a slow minute; as plain
    copies they were 0.05x and 0.14x, which the lower bound still refuses)."""
    with _one_thread() as torch:
        x = torch.randn(16, 128, 14, 14)
        cols = torch.nn.functional.unfold(x, 3, padding=1, stride=2)
        measured = [_median_us(lambda: torch.nn.functional.unfold(x, 3, padding=1, stride=2)),
                    _median_us(lambda: torch.nn.functional.fold(cols, (14, 14), 3, padding=1, stride=2))]
    rows = [map_op("aten::im2col", [[16, 128, 14, 14], [], [], [], []], ["float"] + [None] * 4,
                   [list(cols.shape)], {"concrete": ['', '[3, 3]', '[1, 1]', '[1, 1]', '[2, 2]']}).row,
            map_op("aten::col2im", [list(cols.shape), [], [], [], [], []], ["float"] + [None] * 5, [[16, 128, 14, 14]],
                   {"concrete": ['', '[14, 14]', '[3, 3]', '[1, 1]', '[1, 1]', '[2, 2]']}).row]
    out = cpu_model.predict(pd.DataFrame([{**r, "device": CPU} for r in rows]))["time_us"].to_numpy()
    ratio = out / np.asarray(measured)
    assert ((ratio > 0.15) & (ratio < 4.0)).all(), (out, measured)


def test_ffts_are_one_arithmetic_row_with_the_radix_2_flop_count():
    # complex-to-complex over [32, 64] of a [2, 32, 64] tensor: 4096 complex values, 5 log2(2048) FLOPs each
    c2c = map_op("aten::_fft_c2c", [[2, 32, 64], [], [], []], [None] * 4, [[2, 32, 64]],
                 {"concrete": ['', '[1, 2]', '0', 'True']})
    assert c2c.kind == "op" and c2c.label == "fft"
    r = c2c.row
    assert (r["elements"], r["n_inputs"], r["n_outputs"]) == (4096, 2.0, 2.0)
    assert r["flops_per_element"] == pytest.approx(5 * 11)
    # real-to-complex, one-sided along the last dim: 64 -> 33 complex values, half the FLOPs per value
    r2c = map_op("aten::_fft_r2c", [[2, 32, 64], [], [], []], ["float", None, None, None], [],
                 {"concrete": ['', '[-1]', '0', 'True']}).row
    assert r2c["elements"] == 4096 and r2c["n_inputs"] == 1.0
    assert r2c["n_outputs"] == pytest.approx(2 * 2 * 32 * 33 / 4096, abs=1e-4)
    assert r2c["flops_per_element"] == pytest.approx(2.5 * 6) and r2c["dtype"] == "fp32"
    # a real fp64 input keeps its dtype (the trace reader records no complex dtypes: complex prices as fp32)
    assert map_op("aten::_fft_r2c", [[2, 32, 64], [], [], []], ["fp64", None, None, None], [],
                  {"concrete": ['', '[-1]', '0', 'True']}).row["dtype"] == "fp64"
    # complex-to-real back to a last dim of 64 (the argument), same count of real values
    c2r = map_op("aten::_fft_c2r", [[2, 32, 33], [], [], []], [None] * 4, [],
                 {"concrete": ['', '[2]', '0', '64']}).row
    assert c2r["elements"] == 4096 and c2r["n_outputs"] == 1.0 and c2r["flops_per_element"] == r2c["flops_per_element"]
    # no transformed dimensions recorded, or no output size for a complex-to-real: not guessed at
    assert map_op("aten::_fft_c2c", [[2, 32, 64], [], [], []], [None] * 4, [], {}) is None
    assert map_op("aten::_fft_c2r", [[2, 32, 33], [], [], []], [None] * 4, [],
                  {"concrete": ['', '[2]', '0', '']}) is None
    # a transformed dimension the tensor does not have
    assert map_op("aten::_fft_c2c", [[2, 32, 64], [], [], []], [None] * 4, [],
                  {"concrete": ['', '[1, 3]', '0', 'True']}) is None


def test_a_traced_fnet_step_leaves_nothing_unmodelled(tmp_path, capsys):
    tf = pytest.importorskip("transformers")
    if not hasattr(tf, "FNetConfig"):
        pytest.skip("transformers without FNet")

    def build(torch):
        model = tf.FNetForSequenceClassification(tf.FNetConfig(
            vocab_size=128, hidden_size=64, num_hidden_layers=1, intermediate_size=128, max_position_embeddings=64))
        ids, y = torch.randint(0, 100, (2, 32)), torch.randint(0, 2, (2,))
        return lambda: model(input_ids=ids, labels=y).loss.backward()

    out = _traced_step_predicted(build, tmp_path, capsys)
    assert out["unmodelled"]["ops"] == 0, out["unmodelled"]
    assert out["breakdown_ms"]["fft"] > 0 and out["breakdown_measured_ms"]["fft"] > 0


def test_ffts_on_this_cpu_within_a_loose_factor_of_their_time(cpu_model):
    """A complex FFT over [512, 768] of 8 maps and a one-sided real FFT along 65,536 values of 64 rows, timed here,
    against the CPU profile's model (no FFT in it): within 6x (0.78x and 0.37x measured on the project's VM)."""
    with _one_thread() as torch:
        z, r = torch.randn(8, 512, 768, dtype=torch.complex64), torch.randn(64, 65536)
        measured = [_median_us(lambda: torch.fft.fftn(z, dim=(1, 2)), runs=7),
                    _median_us(lambda: torch.fft.rfft(r, dim=1), runs=7)]
    rows = [map_op("aten::_fft_c2c", [[8, 512, 768], [], [], []], [None] * 4, [[8, 512, 768]],
                   {"concrete": ['', '[1, 2]', '0', 'True']}).row,
            map_op("aten::_fft_r2c", [[64, 65536], [], [], []], ["float", None, None, None], [[64, 32769]],
                   {"concrete": ['', '[1]', '0', 'True']}).row]
    out = cpu_model.predict(pd.DataFrame([{**row, "device": CPU} for row in rows]))["time_us"].to_numpy()
    ratio = out / np.asarray(measured)
    assert ((ratio > 1 / 6) & (ratio < 4.0)).all(), (out, measured)


def test_glu_the_gamma_functions_samplers_and_helper_views_are_mapped():
    # GLU over [2, 64, 399] along dim 1: one value per output (half the input), both halves read
    glu = map_op("aten::glu", [[2, 64, 399], []], ["fp32", None], [[2, 32, 399]], {"concrete": ['', '1']}, leaf=False)
    assert glu.kind == "op" and glu.row["elements"] == 2 * 32 * 399
    assert (glu.row["n_inputs"], glu.row["n_outputs"]) == (2.0, 1.0)
    bwd_dims, bwd_types = [[2, 32, 399], [2, 64, 399], []], ["fp32", "fp32", None]
    bwd = map_op("aten::glu_backward", bwd_dims, bwd_types, [[2, 64, 399]], {})
    assert bwd.row["elements"] == 2 * 32 * 399 and bwd.row["n_outputs"] == 2.0 and bwd.row["direction"] == "bwd"
    # a CPU's GLU backward is a composite of a sigmoid and products: looked into
    assert map_op("aten::glu_backward", bwd_dims, bwd_types, [[2, 64, 399]], {}, leaf=False) is None
    for name in ("aten::lgamma", "aten::digamma"):
        assert map_op(name, [[2, 8]], ["fp32"], [[2, 8]], {}).row["elements"] == 16
    assert map_op("aten::random_", [[8], [], [], []], ["int64", None, None, None], [[8]], {}).kind == "op"
    assert map_op("aten::equal", [[2, 32, 64], [2, 32, 64]], ["fp32", "fp32"], [[]], {}).row["n_inputs"] == 2.0
    for name, dims in (("aten::broadcast_to", [[2, 1, 3], [[], [], []]]), ("aten::resize_as_", [[0], [2, 64, 399], []])):
        assert map_op(name, dims, ["fp32", "fp32", None], [], {}).kind == "view"
        assert map_op(name, dims, ["fp32", "fp32", None], [], {}, leaf=False) is None


def _audio_ctc(tf, torch, cfg: str, cls: str, **kw):
    model = getattr(tf, cls)(getattr(tf, cfg)(
        vocab_size=32, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2, **kw))
    x = torch.randn(2, 4000)
    # no labels: these tests are about the encoders' ops
    return lambda: model(input_values=x).logits.float().pow(2).mean().backward()


def _time_series(tf, torch):
    model = tf.TimeSeriesTransformerForPrediction(tf.TimeSeriesTransformerConfig(
        prediction_length=8, context_length=16, lags_sequence=[1, 2, 3], num_time_features=1, d_model=16,
        encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
        decoder_ffn_dim=32))
    past, future = torch.randn(2, 19), torch.randn(2, 8)
    return lambda: model(past_values=past, past_time_features=torch.randn(2, 19, 1),
                         past_observed_mask=torch.ones(2, 19), future_values=future,
                         future_time_features=torch.randn(2, 8, 1)).loss.backward()


def test_a_traced_ctc_step_costs_its_ctc_loss_at_its_traced_time_here_and_by_count_elsewhere(tmp_path, capsys):
    """CTC loss (a scalar dynamic program over T dependent steps) was left unmodelled: its traced time on the
    traced CPU, 0 on any other device (a wav2vec 2.0 fine-tuning step predicted on a GPU without its loss). It is
    a ``ctc`` row now: on the traced CPU still at its traced time (the count is a lower bound there), elsewhere
    priced by its cells, with a warning that this is a lower bound; nothing is left unmodelled."""
    from hybrid.cli.main import main as cli_main

    tf = pytest.importorskip("transformers")
    if not hasattr(tf, "Wav2Vec2ForCTC"):
        pytest.skip("transformers without Wav2Vec2")

    def build(torch):
        model = tf.Wav2Vec2ForCTC(tf.Wav2Vec2Config(
            vocab_size=32, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
            conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=2))
        x, labels = torch.randn(2, 4000), torch.randint(1, 32, (2, 12))
        return lambda: model(input_values=x, labels=labels).loss.backward()

    out = _traced_step_predicted(build, tmp_path, capsys)
    assert out["unmodelled"]["ops"] == 0, out["unmodelled"]
    assert out["breakdown_ms"]["ctc"] == pytest.approx(out["breakdown_measured_ms"]["ctc"], rel=0.05)
    assert cli_main(["trace", "predict", str(tmp_path), "--device", "H100-SXM", "--roofline", "--json"]) == 0
    gpu = json.loads(capsys.readouterr().out)
    assert gpu["unmodelled"]["ops"] == 0 and gpu["breakdown_ms"]["ctc"] > 0
    assert any("2 CTC loss op(s) (_ctc_loss x1, _ctc_loss_backward x1)" in w and "lower bound" in w
               for w in gpu["warnings"]), gpu["warnings"]


# (architecture, the ops it was left with unmodelled)
STEPS = {"wav2vec2-conformer": ("aten::glu", "aten::resize_as_"), "wavlm": ("aten::broadcast_to",),
         "time-series": ("aten::lgamma", "aten::digamma")}


@pytest.mark.parametrize("arch", list(STEPS))
def test_a_traced_step_with_glu_broadcast_or_gamma_ops_leaves_nothing_unmodelled(tmp_path, capsys, arch):
    tf = pytest.importorskip("transformers")
    if not all(hasattr(tf, c) for c in ("Wav2Vec2ConformerForCTC", "WavLMForCTC", "TimeSeriesTransformerConfig")):
        pytest.skip("transformers without these models")

    def build(torch):
        if arch == "time-series":
            return _time_series(tf, torch)
        if arch == "wavlm":
            return _audio_ctc(tf, torch, "WavLMConfig", "WavLMForCTC")
        return _audio_ctc(tf, torch, "Wav2Vec2ConformerConfig", "Wav2Vec2ConformerForCTC",
                          position_embeddings_type="relative", conv_depthwise_kernel_size=7)

    out = _traced_step_predicted(build, tmp_path, capsys)
    names = set()
    for t in load_traces(sorted(str(p) for p in tmp_path.glob("*.json"))):
        names |= set(t.ops["name"])
    assert set(STEPS[arch]) <= names  # the ops this test is about
    assert out["unmodelled"]["ops"] == 0, out["unmodelled"]


def test_a_traced_multihead_attention_inference_with_a_padding_mask_leaves_nothing_unmodelled(tmp_path, capsys):
    """nn.MultiheadAttention's inference fast path with a key padding mask runs ``_masked_softmax`` (the masked
    scores' softmax, one kernel): a softmax row over the scores, not an unmodelled op."""
    dims, types = [[2, 4, 32, 32], [2, 32], [], []], ["fp32", "bool", None, None]
    mp = map_op("aten::_masked_softmax", dims, types, [[2, 4, 32, 32]], {"concrete": ['', '', '3', '1']}, leaf=False)
    assert mp.kind == "op" and mp.row == {"op": "softmax", "rows": 256, "hidden": 32, "dtype": "fp32",
                                          "direction": "fwd"}

    def build(torch):
        att = torch.nn.MultiheadAttention(64, 4, batch_first=True).eval()
        x, mask = torch.randn(2, 32, 64), torch.zeros(2, 32, dtype=torch.bool)
        mask[:, -4:] = True

        def step():
            with torch.inference_mode():
                att(x, x, x, key_padding_mask=mask, need_weights=False)
        return step

    out = _traced_step_predicted(build, tmp_path, capsys)
    names = set()
    for t in load_traces(sorted(str(p) for p in tmp_path.glob("*.json"))):
        names |= set(t.ops["name"])
    assert "aten::_masked_softmax" in names
    assert out["unmodelled"]["ops"] == 0, out["unmodelled"]
    assert out["breakdown_ms"]["softmax"] > 0


def test_a_traced_step_with_3d_pooling_costs_every_pooling_and_its_backward(tmp_path):
    """3-D max, average and adaptive pooling (and LocalResponseNorm, which runs avg_pool3d over the channels) were
    unmodelled forwards, and their backwards were looked into for their zero-fills, the pooling kernel lost: each
    is a pooling row now, forward and backward."""
    from hybrid.data.traces.record import record_step

    with _one_thread() as torch:
        x = torch.randn(2, 4, 8, 8, 8, requires_grad=True)
        img = torch.randn(2, 8, 16, 16, requires_grad=True)
        lrn = torch.nn.LocalResponseNorm(3)

        def step():
            y = (torch.nn.functional.max_pool3d(x, 2).sum() + torch.nn.functional.avg_pool3d(x, 2).sum()
                 + torch.nn.functional.adaptive_avg_pool3d(x, 2).sum() + lrn(img).sum())
            y.backward()

        record_step(step, tmp_path, warmup=1, timed=0, measure_overhead=False, memory=False)
    units = trace_units(load_traces(sorted(str(p) for p in tmp_path.glob("*.json")))[0])
    assert not (units["kind"] == "unmodelled").any(), sorted(set(units.loc[units["kind"] == "unmodelled", "name"]))
    pools = units[units["label"] == "pool"]
    # max, avg, adaptive avg and LRN's avg pooling, each forward and backward
    assert (pools["phase"] == "forward").sum() == 4 and (pools["phase"] == "backward").sum() == 4
    assert {r["variant"] for r in pools["row"]} == {"maxpool", "avgpool"}


def test_activations_losses_and_helpers_of_a_traced_step_leave_nothing_unmodelled(tmp_path):
    """PReLU, log-sigmoid, hard / soft shrinkage, RReLU, logit, xlogy, logaddexp, sinc, the Huber and smooth-L1
    losses' backwards, ``Tensor.unfold`` (a view), matrix x vector products, ``randint`` and autograd's storage-less
    zero tensor were unmodelled ops of a traced CPU step (each costed at 0 on any other device)."""
    from hybrid.data.traces.record import record_step

    f = pytest.importorskip("torch").nn.functional
    with _one_thread() as torch:
        torch.manual_seed(0)
        x = torch.randn(2, 8, 16, 16, requires_grad=True)
        prelu, w = torch.nn.PReLU(8), torch.randn(8, 16, requires_grad=True)

        def step():
            p = torch.sigmoid(x)
            y = (prelu(x).sum() + f.logsigmoid(x).sum() + f.hardshrink(x).sum() + f.softshrink(x).sum()
                 + f.rrelu(x, training=True).sum() + torch.logit(p).sum() + torch.xlogy(p, p + 1).sum()
                 + torch.logaddexp(x, 2 * x).sum() + torch.sinc(x).sum() + f.huber_loss(x, torch.zeros_like(x))
                 + f.smooth_l1_loss(x, torch.zeros_like(x)) + x.unfold(3, 4, 2).sum()
                 + torch.addmv(x[0, 0, 0, :8], w, x[0, 0, 1]).sum() + (torch.sgn(x) * x).sum())
            y = y + torch.randint(0, 4, (8,)).sum()
            y.backward()

        record_step(step, tmp_path, warmup=1, timed=0, measure_overhead=False, memory=False)
    units = trace_units(load_traces(sorted(str(p) for p in tmp_path.glob("*.json")))[0])
    assert not (units["kind"] == "unmodelled").any(), sorted(set(units.loc[units["kind"] == "unmodelled", "name"]))
    names = set(units["name"])
    assert {"aten::prelu", "aten::logit", "aten::xlogy", "aten::sinc", "aten::addmv", "aten::unfold"} <= names
    gemv = units[units["name"] == "aten::addmv"]["row"].iloc[0]
    assert (gemv["op"], gemv["m"], gemv["n"], gemv["k"]) == ("gemv", 8, 1, 16)


def test_matrix_vector_products_are_gemv_rows_and_randint_takes_its_size_argument():
    assert map_op("aten::mv", [[16, 8], [8]], ["fp32", "fp32"], [[16]], {}).row == {
        "op": "gemv", "m": 16, "n": 1, "k": 8, "dtype": "fp32", "variant": "mv"}
    # randint(low, high, size) without a recorded output: the list argument
    dims, types = [[], [], [[]], [], [], [], []], [None] * 7
    mp = map_op("aten::randint", dims, types, [], {"concrete": ['0', '8', '[8, 3]', '4', '', '', 'False']})
    assert mp.kind == "op" and mp.row["elements"] == 24
    pb = map_op("aten::_prelu_kernel_backward", [[2, 8, 16, 16], [2, 8, 16, 16], [1, 8, 1, 1]], ["fp32"] * 3,
                [[2, 8, 16, 16], [2, 8, 16, 16]], {})
    assert pb.row["elements"] == 2 * 8 * 16 * 16 and pb.row["n_outputs"] == 2.0
    # Tensor.unfold's backward: the [2, 8, 64] input's gradient filled from [2, 8, 15, 8] windows (argument 1: its size)
    ub = map_op("aten::unfold_backward", [[2, 8, 15, 8], [[], [], []], [], [], []], ["fp32"] + [None] * 4, [],
                {"concrete": ['', '[2, 8, 64]', '2', '8', '4']}, leaf=False)
    assert ub.kind == "op" and ub.row["elements"] == 2 * 8 * 64
    assert ub.row["n_inputs"] == pytest.approx(15 * 8 / 64, abs=1e-4)
