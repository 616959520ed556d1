"""What recording a trace costs the host: measured at record time, stored in the trace, taken off its host times."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hybrid.data.bundle import load_bundle  # noqa: E402
from hybrid.data.traces import load_traces  # noqa: E402
from hybrid.data.traces.overhead import (  # noqa: E402
    METADATA_KEY,
    ProfilerOverhead,
    input_counts,
    measure_profiler_overhead,
    overhead_of,
)
from hybrid.data.traces.record import record_step  # noqa: E402
from hybrid.errors import InvalidInputError  # noqa: E402
from hybrid.workloads.trace_graph import build_trace_graph  # noqa: E402
from tests.test_traces import BUNDLE, CPU, _tiny_step  # noqa: E402


def test_input_counts_count_tensor_lists_by_their_tensors():
    dims = [[[2, 3], [3]], [[[4], [4], [4]], []], [], "x"]
    assert input_counts(dims).tolist() == [2.0, 4.0, 0.0, 0.0]


def test_overhead_cost_round_trip_and_bad_values():
    o = ProfilerOverhead(5.0, 0.5, 10.0, True, "cuda")
    assert o.cost_us(100, 300, 20) == pytest.approx(100 * 5 + 300 * 0.5 + 20 * 10)
    assert np.allclose(o.cost_us(np.array([1, 2]), np.array([0, 4])), [5.0, 12.0])
    back = ProfilerOverhead.from_json(o.to_json())
    assert back == o
    assert overhead_of({METADATA_KEY: json.loads(o.to_json())}) == o  # as Kineto writes it: a JSON object
    assert overhead_of({}) is None
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidInputError, match="per_event_us"):
            ProfilerOverhead(bad)
    with pytest.raises(InvalidInputError, match=METADATA_KEY):
        ProfilerOverhead.from_json('{"per_input_us": 1}')
    with pytest.raises(InvalidInputError, match=METADATA_KEY):
        ProfilerOverhead.from_json("{not json")


def test_measured_overhead_fits_its_loops_and_the_execution_trace_costs_most():
    torch.set_num_threads(1)
    # (timings on a shared 2-core VM: the fastest of 5 runs each; on a quiet machine the execution trace costs
    # 12-30x Kineto's per event and the fit explains each loop within 20%, under a full test run as little as
    # 2.5x and 42%, so the bounds below leave room for that noise)
    et = measure_profiler_overhead("cpu", execution_trace=True, repeats=5)
    kineto = measure_profiler_overhead("cpu", execution_trace=False, repeats=5)
    assert et.device == "cpu" and et.execution_trace and not kineto.execution_trace
    assert et.per_launch_us == 0.0  # nothing launches on a CPU
    # serialising every op with its inputs costs several times what Kineto's own recording does: compared on the
    # loops' measured extra time (the same loops in both), not on the fitted per-event coefficient, whose split
    # from the per-input one is ill-conditioned (one CI run fitted 0 per event and put it all on the inputs)
    assert et.loops.keys() == kineto.loops.keys()
    et_extra = sum(loop["extra_us"] for loop in et.loops.values())
    assert et_extra / sum(loop["events"] for loop in et.loops.values()) > 0.5  # us per recorded op
    assert et_extra > 2 * sum(loop["extra_us"] for loop in kineto.loops.values())
    # the fitted costs explain the loops' extra time (the loops differ in events per input): their total within
    # 30%, each loop within a factor of 3 (quiet machine: 0.65-1.21x per loop over 8 runs, 0.72-1.54x with the
    # training-step loop over 3 runs on 2026-12-06; a full CI run on 2026-12-06 put one loop beyond 2x) or by less
    # than 5% of the total: the views loop, 1-2% of it, is as small as the others' noise (its extra time measured
    # 17-49 us per iteration in six back-to-back runs on the loaded VM, 0.46-2.27x the fit); a loop the fit misses
    # by a factor, the tensor-list loop's 15-35% say, is still refused
    fits = [et.cost_us(loop["events"], loop["inputs"], loop["launches"]) for loop in et.loops.values()]
    extras = [loop["extra_us"] for loop in et.loops.values()]
    assert all(loop["events"] > 0 for loop in et.loops.values())
    assert sum(fits) == pytest.approx(sum(extras), rel=0.3)
    assert all(1 / 3 < f / x < 3.0 or abs(f - x) < 0.05 * sum(extras)
               for f, x in zip(fits, extras, strict=True)), (fits, extras)
    with pytest.raises(InvalidInputError, match="iters"):
        measure_profiler_overhead("cpu", iters=5)
    if not torch.cuda.is_available():
        with pytest.raises(InvalidInputError, match="no GPU"):
            measure_profiler_overhead("cuda")


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("overhead")
    return record_step(_tiny_step(), out, warmup=1)


def test_recorded_trace_carries_its_overhead_and_predictions_take_it_off(traced):
    cat = load_bundle(BUNDLE)[1]
    with_ovh = load_traces([traced["kineto"]])
    ovh = overhead_of(with_ovh[0].meta)
    assert ovh is not None and ovh.execution_trace and ovh.per_event_us + ovh.per_input_us > 0  # (the split between the two is ill-conditioned)
    without = load_traces([traced["kineto"]])
    without[0].meta.pop(METADATA_KEY)
    a = build_trace_graph(with_ovh, CPU, cat, host="trace")
    b = build_trace_graph(without, CPU, cat, host="trace")
    assert a.info["recording_overhead"]["measured"] and not b.info["recording_overhead"]["measured"]
    dur_a, dur_b = a.graph.compile().fixed_us, b.graph.compile().fixed_us  # each node's fixed (host) cost
    labels = np.asarray(a.node_label)
    meas = np.asarray(a.node_measured_us)
    for label in ("host gaps", "view/host ops"):
        sel = labels == label
        assert sel.any()
        # without the metadata the traced host is kept as traced; with it, less, never below 5% of it
        assert dur_b[sel] == pytest.approx(meas[sel])
        assert dur_a[sel].sum() < dur_b[sel].sum()
        assert (dur_a[sel] >= 0.05 * meas[sel] - 1e-9).all()
    # each view unit loses exactly what recording its own events and inputs cost (or keeps its 5% floor)
    units = a.units[a.units["kind"] == "view"]
    expect = np.maximum(units["dur"] - ovh.cost_us(units["n_events"], units["n_inputs"]), 0.05 * units["dur"])
    got = dur_a[units["node"].to_numpy()]
    assert got == pytest.approx(expect.to_numpy())
    # the gaps keep the share the events outside the units leave
    share = a.info["recording_overhead"]["gap_share"][0]
    gaps = labels == "host gaps"
    assert dur_a[gaps].sum() == pytest.approx(share * meas[gaps].sum())
    # every op of the step is counted once: inside a unit or in the gaps
    assert a.units["n_events"].sum() <= len(with_ovh[0].ops)


def test_meta_device_and_opt_out_record_no_overhead(tmp_path):
    torch.set_num_threads(1)
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8)
    paths = record_step(lambda: lin(x).sum().backward(), tmp_path / "off", warmup=0, execution_trace=False,
                        measure_overhead=False)
    assert overhead_of(load_traces([paths["kineto"]])[0].meta) is None


def test_trace_record_names_the_failing_line_of_the_users_script(tmp_path, capsys):
    from hybrid.cli.main import main

    boom = tmp_path / "boom.py"
    boom.write_text("x = 1\ndef step():\n    raise ValueError('boom')\n")
    assert main(["trace", "record", str(boom), "-o", str(tmp_path / "t"), "--no-overhead"]) == 2
    assert f"{boom}, line 3: step() raised ValueError: boom" in capsys.readouterr().err
    quits = tmp_path / "quits.py"
    quits.write_text("import sys\nsys.exit(3)\n")
    assert main(["trace", "record", str(quits), "-o", str(tmp_path / "u")]) == 2
    assert "exited (status 3) while its top level ran" in capsys.readouterr().err
    # sys.exit() inside the step (after the top level ran): a message and exit code 2, not the script's status
    # without a word, and nothing written
    ends = tmp_path / "ends.py"
    ends.write_text("import sys\ndef step():\n    sys.exit(3)\n")
    assert main(["trace", "record", str(ends), "-o", str(tmp_path / "v"), "--no-overhead"]) == 2
    assert f"{ends}: step() exited (status 3) instead of returning" in capsys.readouterr().err
    assert not (tmp_path / "v").exists()
    # an output directory that cannot be created (under a file): said so, not blamed on the script's step
    (tmp_path / "a_file").write_text("")
    ok = tmp_path / "ok.py"
    ok.write_text("import torch\ndef step():\n    torch.ones(4).sum()\n")
    assert main(["trace", "record", str(ok), "-o", str(tmp_path / "a_file" / "t"), "--no-overhead"]) == 2
    err = capsys.readouterr().err
    assert f"cannot write the trace into {tmp_path / 'a_file' / 't'}" in err and "step() raised" not in err
