"""Tensor memory of a traced step (hybrid.data.traces.memory): measured, stored in the trace, compared with the
target's memory by ``trace predict``."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from hybrid.cli.main import main as cli_main  # noqa: E402
from hybrid.data.traces import load_trace  # noqa: E402
from hybrid.data.traces.memory import (  # noqa: E402
    METADATA_KEY,
    NEAR_CAPACITY_FRACTION,
    StepMemory,
    measure_step_memory,
    memory_of,
    memory_verdict,
)
from hybrid.data.traces.record import record_step  # noqa: E402
from hybrid.errors import InvalidInputError  # noqa: E402
from hybrid.hardware.catalog import default_catalog  # noqa: E402

MB = 1_000_000


def test_peak_counts_what_is_alive_at_once_and_frees():
    keep = torch.zeros(1000)  # resident: 4,000 bytes (and whatever else this process holds)

    def step():
        a = torch.empty(MB // 4)  # 1 MB
        b = torch.empty(MB // 2)  # 2 MB
        del a
        c = torch.empty(3 * MB // 4)  # 3 MB: 2 + 3 alive at once, not 1 + 2 + 3
        return b.view(-1)[:1] + c.view(-1)[:1]

    m = measure_step_memory(step)
    assert m.device == "cpu" and m.resident_bytes >= keep.nbytes
    # the 5 MB peak, plus the few bytes of the returned slice sum (views share their storage: not counted twice)
    assert 5 * MB <= m.step_bytes <= 5 * MB + 64
    assert m.end_bytes == m.resident_bytes  # the result is dropped, every temporary freed
    del keep


def test_tensors_merely_alive_on_another_device_do_not_make_it_the_steps():
    """A process that holds meta tensors (a compiler's, a model sized on the meta device) and runs its step on the
    CPU: the step's device is the CPU, where it allocated."""
    parked = torch.empty(64 * MB, device="meta")  # resident on meta, untouched by the step

    def step():
        return torch.empty(MB // 4) + 1

    assert measure_step_memory(step).device == "cpu"
    # on meta when the step allocates there
    assert measure_step_memory(lambda: torch.empty(MB, device="meta") * 2).device == "meta"
    del parked


def test_a_meta_training_step_by_hand():
    """Parameters and input resident; gradients alive at the end; the activations saved for backward on top."""
    lin = torch.nn.Linear(1024, 512, device="meta")
    x = torch.ones(64, 1024, device="meta")

    def step():
        torch.relu(lin(x)).sum().backward()

    params = (1024 * 512 + 512) * 4
    m = measure_step_memory(step, "meta")
    assert m.device == "meta"
    assert m.resident_bytes == params + x.nbytes
    assert m.end_bytes == m.resident_bytes + params  # the gradients (weight and bias)
    act = 64 * 512 * 4  # relu's saved output; its gradient of the same size
    assert m.resident_bytes + params + act <= m.peak_bytes <= m.resident_bytes + params + 2 * act + 64


def test_gradients_left_by_an_earlier_backward_are_resident():
    """A training step that adds into the gradients of the step before (no ``zero_grad``, as NeuSight's labelled
    steps): the gradients autograd made have no Python object until ``.grad`` is read, and were not counted as
    resident (1 x the parameters instead of 2 x), nor at all until the backward wrote into them."""
    lin = torch.nn.Linear(1024, 512, device="meta")
    x = torch.ones(64, 1024, device="meta")

    def step():
        torch.relu(lin(x)).sum().backward()

    step()  # gradients made, never read
    params = (1024 * 512 + 512) * 4
    m = measure_step_memory(step, "meta")
    assert m.resident_bytes == 2 * params + x.nbytes
    assert m.end_bytes == m.resident_bytes  # added into in place: nothing new alive at the end
    act = 64 * 512 * 4  # and the new gradients, alive until added into the resident ones
    assert m.resident_bytes + params + act <= m.peak_bytes <= m.resident_bytes + params + 2 * act + 64


def test_verdict_fractions_and_the_near_capacity_warning():
    m = StepMemory("meta", resident_bytes=10 << 30, peak_bytes=60 << 30, end_bytes=12 << 30)
    assert m.step_bytes == 50 << 30
    v = memory_verdict(m, 80 << 30)
    assert v["fraction"] == pytest.approx(0.75) and v["fits"] and not v["near_capacity"] and "note" not in v
    assert v["peak_gib"] == pytest.approx(60) and v["capacity_gib"] == pytest.approx(80)
    near = memory_verdict(m, 64 << 30)  # 94%
    assert near["fits"] and near["near_capacity"] and "near capacity" in near["note"]
    assert NEAR_CAPACITY_FRACTION < near["fraction"] < 1
    over = memory_verdict(m, 48 << 30)
    assert not over["fits"] and over["near_capacity"] and over["note"].startswith("does not fit")
    assert "fraction" not in memory_verdict(m, 0) and "capacity" in memory_verdict(m, float("nan"))["note"]


@pytest.mark.parametrize("raw, match", [
    ('{"device": "cpu"}', "resident_bytes"),
    ("not json", METADATA_KEY),
    ('{"device": "cpu", "resident_bytes": -1, "peak_bytes": 2, "end_bytes": 0}', "resident_bytes must be"),
    ('{"device": "cpu", "resident_bytes": 5, "peak_bytes": 2, "end_bytes": 0}', "peak_bytes .2. is below"),
])
def test_malformed_memory_metadata_gets_a_clear_error(raw, match):
    with pytest.raises(InvalidInputError, match=match):
        memory_of({METADATA_KEY: raw})
    assert memory_of({}) is None


@pytest.fixture(scope="module")
def meta_mlp_dir(tmp_path_factory):
    """A 4-layer MLP training step of ~1.1 GB of fp32 weights, traced on the meta device."""
    model = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192, device="meta") for _ in range(4)])
    x = torch.ones(512, 8192, device="meta")
    out = tmp_path_factory.mktemp("meta-mlp")
    record_step(lambda: model(x).sum().backward(), out, warmup=0, execution_trace=False, device="meta")
    return out


def test_recorded_trace_carries_its_memory_and_predict_compares_it(meta_mlp_dir, capsys):
    mem = memory_of(load_trace(meta_mlp_dir / "kineto_rank0.json").meta)
    weights = 4 * (8192 * 8192 + 8192) * 4
    assert mem is not None and mem.device == "meta"
    # measured on the call after the traced one: the gradients the traced call left (never zeroed) are resident
    assert mem.resident_bytes == 2 * weights + 512 * 8192 * 4 and mem.end_bytes == mem.resident_bytes

    def predict(device: str, *extra: str) -> dict:
        code = cli_main(["trace", "predict", str(meta_mlp_dir), "--device", device, "--roofline", "--json", *extra])
        out = capsys.readouterr()
        assert code == 0, out.err
        return json.loads(out.out)

    cat = default_catalog()
    for dev in ("A100-SXM4-80GB", "T4"):
        m = predict(dev)["memory"]
        assert m["peak_gib"] == pytest.approx(mem.peak_bytes / 2**30)
        assert m["fraction"] == pytest.approx(mem.peak_bytes / cat.device(dev).mem_capacity)
        assert m["fits"] and not m["near_capacity"] and m["ranks_measured"] == 1
    # a re-mapped tensor-parallel job: the traced process's memory is not its GPUs'
    assert "not estimated" in predict("T4", "--tp", "2", "--tokens", "512", "--hidden", "8192")["memory"]["note"]
    dp = predict("T4", "--dp", "2")["memory"]
    assert "fraction" in dp  # each data-parallel rank holds the traced tensors
    assert dp["ranks_measured"] == 1  # one traced process, replicated: not two measurements
    assert cli_main(["trace", "predict", str(meta_mlp_dir), "--device", "T4", "--roofline"]) == 0
    text = capsys.readouterr().out
    assert "memory: peak" in text and "of the device's 16.0 GiB" in text


def test_record_without_memory_and_a_step_the_measurement_breaks(tmp_path):
    calls = []

    def step():
        calls.append(1)
        if len(calls) == 2:  # the memory pass (after the traced call, no warm-up or timed calls): fails; the
            # trace is kept
            raise RuntimeError("not under a dispatch mode")
        torch.ones(8).sum()

    with pytest.warns(RuntimeWarning, match="tensor memory .RuntimeError: not under a dispatch mode"):
        paths = record_step(step, tmp_path / "a", warmup=0, execution_trace=False, measure_overhead=False,
                            timed=0)
    assert memory_of(load_trace(paths["kineto"]).meta) is None and len(calls) == 2
    paths = record_step(lambda: torch.ones(8).sum(), tmp_path / "b", warmup=0, execution_trace=False,
                        measure_overhead=False, memory=False)
    assert memory_of(load_trace(paths["kineto"]).meta) is None


def test_a_step_too_large_for_the_target_is_warned_and_flagged_in_compare(tmp_path, capsys):
    """Two 32768 x 32768 fp32 layers: 8.6 GB of weights, as much again of gradients: not on a 16 GiB T4."""
    model = torch.nn.Sequential(*[torch.nn.Linear(32768, 32768, device="meta") for _ in range(2)])
    x = torch.ones(64, 32768, device="meta")
    record_step(lambda: model(x).sum().backward(), tmp_path, warmup=0, execution_trace=False, device="meta")
    code = cli_main(["trace", "predict", str(tmp_path), "--device", "T4", "--roofline", "--json",
                     "--compare", "T4,A100-SXM4-80GB"])
    out = capsys.readouterr()
    assert code == 0
    s = json.loads(out.out)
    assert not s["memory"]["fits"] and s["memory"]["fraction"] > 1
    assert "warning: does not fit" in out.err
    notes = {r["device"]: r["note"] for r in s["compare"]}
    assert notes["T4"].startswith("does not fit") and notes["A100-SXM4-80GB"] == ""
    assert {r["device"]: r["memory_pct"] > 100 for r in s["compare"]} == {"T4": True, "A100-SXM4-80GB": False}


def test_the_memory_pass_runs_after_the_traced_call(tmp_path):
    """Under a dispatch mode a torch.compile step falls back to eager for good: measured first, the trace recorded
    another program. The traced call comes first; the memory still lands in its Chrome trace."""
    order: list[str] = []

    def step():
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        order.append("memory" if _get_current_dispatch_mode() is not None else "plain")
        return torch.ones(64, 64) @ torch.ones(64, 64)

    paths = record_step(step, tmp_path, warmup=1, execution_trace=False, measure_overhead=False)
    assert order == ["plain"] * 5 + ["memory"]  # warm-up, 3 timed untraced calls, the traced one, then memory
    mem = memory_of(load_trace(paths["kineto"]).meta)
    assert mem is not None and mem.peak_bytes >= 3 * 64 * 64 * 4


def test_recording_without_an_execution_trace_removes_an_earlier_one(tmp_path):
    """`--no-et` into a directory of an earlier recording left its et_rank0.json beside the new Chrome trace, and
    the next predict paired the two (and refused them as different steps)."""
    first = record_step(lambda: torch.ones(8).sum(), tmp_path, warmup=0, measure_overhead=False, memory=False)
    assert first["et"].exists()
    second = record_step(lambda: torch.ones(8).sum(), tmp_path, warmup=0, execution_trace=False,
                         measure_overhead=False, memory=False)
    assert "et" not in second and not (tmp_path / "et_rank0.json").exists() and second["kineto"].exists()
