"""The cross-system collective model: answers for systems never measured, from their catalog entry only."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from hybrid.corrections import CollectiveSigmoid, HybridPredictor
from hybrid.corrections.collective_transfer import INTER_CLASSES, INTRA_CLASSES, inter_class, intra_class
from hybrid.ops.roofline import roofline


@pytest.fixture(scope="module")
def measured(shared_datasets, catalog) -> pd.DataFrame:
    """Two measured systems of different fabrics: Sophia (DGX A100, 2 nodes, IB) and the XLA H100x8 node."""
    from hybrid.data.importers import import_paths

    root = shared_datasets / "nccl-tests" / "argonne-lcf_alcf-nccl-tests" / "results_sophia"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sophia = import_paths("nccl-tests", root, catalog=catalog)
        xla = import_paths("xla-collectives", shared_datasets / "xla", catalog=catalog)
    table = pd.concat([sophia, xla], ignore_index=True, sort=False)
    table = table[~(pd.to_numeric(table.get("wrong", 0), errors="coerce").fillna(0) > 0)].reset_index(drop=True)
    assert set(table["system"]) == {"Sophia", "XLA-H100x8"}
    return table


@pytest.fixture(scope="module")
def fitted(measured, catalog) -> HybridPredictor:
    return HybridPredictor(catalog, [CollectiveSigmoid(transfer=True)]).fit(measured)


def _query(system: str, device: str, sizes: list[float], ranks: int = 8, nodes: int = 1, op: str = "all_reduce"):
    return pd.DataFrame({"device": device, "system": system, "op": op, "size_bytes": sizes, "n_ranks": ranks,
                         "n_nodes": nodes})


def test_unseen_system_gets_the_transfer_model_and_says_so(fitted, measured):
    q = pd.concat([_query("DGX-H100", "H100-SXM", [1 << 20, 1 << 30]),
                   measured[measured["system"] == "Sophia"].head(2)[["device", "system", "op", "size_bytes", "n_ranks",
                                                                       "n_nodes"]]], ignore_index=True)
    out = fitted.predict(q)
    assert list(out["method"]) == ["collective-transfer"] * 2 + ["collective-sigmoid"] * 2
    assert np.isfinite(out["time_us"]).all() and (out["time_us"] > 0).all()
    # the transfer model is not the alpha-beta estimate
    assert not np.allclose(out["time_us"].iloc[:2], out["roofline_us"].iloc[:2])
    cov = fitted.corrections[0].coverage(q)
    assert cov.iloc[0] == "transfer model: unseen system"


def test_transfer_follows_the_catalog_bandwidth(fitted):
    """1 GiB all-reduce on 8 GPUs: a B200 node (900 GB/s NVLink) is faster than an H100 node (450), which is faster
    than a PCIe node; time grows with size."""
    sizes = [1 << 16, 1 << 24, 1 << 30]
    b200 = fitted.predict(_query("DGX-B200", "B200", sizes))["time_us"].to_numpy()
    h100 = fitted.predict(_query("DGX-H100", "H100-SXM", sizes))["time_us"].to_numpy()
    pcie = fitted.predict(_query("DeepBench-P100", "P100-PCIE-16GB", sizes))["time_us"].to_numpy()
    assert np.all(np.diff(h100) > 0)
    assert b200[-1] < h100[-1] < pcie[-1]
    busbw = (1 << 30) * 2 * 7 / 8 / (h100[-1] * 1e-6) / 1e9
    assert 150 < busbw < 600  # GB/s: an H100 NVSwitch node's bus bandwidth, not a unit slip


def test_a_system_never_measured_is_said_to_be_priced_by_what_prices_it(fitted, measured, catalog):
    """Without a fitted transfer model (`--no-collective-transfer`) a system never measured gets the alpha-beta
    estimate (its method), but its `extrapolated` note said "the transfer model prices it"."""
    q = _query("DGX-H100", "H100-SXM", [1 << 26])
    plain = HybridPredictor(catalog, [CollectiveSigmoid(transfer=False)]).fit(measured)
    assert plain.predict(q)["method"].iloc[0] == "alpha-beta"
    assert plain.corrections[0].extrapolation_reason(q) == ["no log of system DGX-H100: the alpha-beta estimate "
                                                              "prices it"]
    assert fitted.predict(q)["method"].iloc[0] == "collective-transfer"
    assert fitted.corrections[0].extrapolation_reason(q) == ["no log of system DGX-H100: the transfer model prices it"]


@pytest.mark.parametrize("transfer", [True, False])
def test_a_system_adapted_to_few_shot_rows_is_not_said_to_have_no_log(measured, catalog, transfer):
    """After ``adapt`` (``hybrid calibrate --base``) with the user's own logs of a system the base fit never saw, the
    answer still said "no log of system XLA-H100x8": it now says the base fit lacked it, what prices it and that it
    was adapted to those rows. Rows of a device no adaptation touched keep their plain wording."""
    sophia = measured[measured["system"] == "Sophia"]
    xla = measured[(measured["system"] == "XLA-H100x8") & (measured["op"] == "all_reduce")]
    base = HybridPredictor(catalog, [CollectiveSigmoid(transfer=transfer)]).fit(sophia)
    adapted = base.adapt(xla.head(12))
    cols = ["device", "system", "op", "size_bytes", "n_ranks", "n_nodes"]
    q = pd.concat([xla.head(1)[cols], _query("DGX-A100", "A100-SXM4-40GB", [1 << 26])], ignore_index=True)
    priced = "the transfer model" if transfer else "the alpha-beta estimate"
    assert base.collective_reasons(q) == [f"no log of system XLA-H100x8: {priced} prices it",
                                          f"no log of system DGX-A100: {priced} prices it"]
    said = adapted.collective_reasons(q)
    assert said[0].startswith(f"system XLA-H100x8 was not in the base fit: {priced} prices it, adapted")
    assert "12 measured rows of H100-SXM" in said[0] and "no log" not in said[0]
    assert said[1] == f"no log of system DGX-A100: {priced} prices it"


def test_constants_are_physical(fitted):
    c = fitted.corrections[0].transfer.constants()
    for eff in (*c["bus_bw_efficiency_intra"].values(), *c["bus_bw_efficiency_inter"].values()):
        assert 0.002 < eff < 25
    for lat in (*c["latency_per_intra_step_us"].values(), *c["latency_per_inter_step_us"].values(),
                *c["launch_floor_us"].values()):
        assert 0.005 < lat < 5000  # microseconds
    assert 0.5 <= c["latency_bandwidth_overlap_p"] <= 4.0


def test_transfer_survives_save_and_load_and_is_the_predictor_default(fitted, measured, catalog, tmp_path):
    q = _query("HGX-B300", "B300", [1 << 26], ranks=16, nodes=2)
    before = fitted.predict(q)
    again = HybridPredictor.load(fitted.save(tmp_path / "p"))
    after = again.predict(q)
    assert after["method"].iloc[0] == "collective-transfer"
    np.testing.assert_allclose(after["time_us"], before["time_us"], rtol=1e-9)
    default = HybridPredictor(catalog, [CollectiveSigmoid()]).fit(measured).predict(q)
    assert default["method"].iloc[0] == "alpha-beta"
    # the predictor's default corrections include the transfer model; False keeps alpha-beta
    for kwargs, on in (({}, True), ({"collective_transfer": True}, True), ({"collective_transfer": False}, False)):
        made = HybridPredictor(catalog, **kwargs)
        assert [c for c in made.corrections if isinstance(c, CollectiveSigmoid)][0].use_transfer is on
    assert default["time_us"].iloc[0] == pytest.approx(roofline(q, catalog)["time_us"].iloc[0])


def test_fabric_classes_from_catalog_text(catalog):
    assert intra_class(catalog.systems["DGX-H100"]) == "nvswitch"
    assert intra_class(catalog.systems["Polaris"]) == "nvlink"
    assert intra_class(catalog.systems["Vidur-A100-pairwise-NVLink"]) == "pcie-pairs"
    # the A40 node's bridges are unused in its logs (peer-to-peer off: ~4 GB/s within a node): plain PCIe
    assert intra_class(catalog.systems["Vidur-A40-pairwise-NVLink"]) == "pcie"
    assert intra_class(catalog.systems["MI300X-Platform"]) == "infinity-fabric"
    assert inter_class(catalog.systems["Polaris"]) == "slingshot"
    assert inter_class(catalog.systems["DGX-A100"]) == "infiniband"
    assert inter_class(catalog.systems["XLA-H100x8"]) == "unspecified"
    for s in catalog.systems.values():
        assert intra_class(s) in INTRA_CLASSES and inter_class(s) in INTER_CLASSES


def test_calibrate_cli_collective_transfer_flag(measured, tmp_path):
    """``hybrid calibrate`` on the two measured systems: the transfer model is the default (an MLflow param), the
    registered model answers a system never measured with it (``method``), while a model calibrated with
    ``--no-collective-transfer`` keeps alpha-beta there; a measured system keeps its sigmoid curves."""
    import contextlib
    import io

    from mlflow import MlflowClient
    from test_tracking_support import last_json, write_csv

    from hybrid.cli.main import main

    def cli(args: list[str]) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(args)
        return rc, out.getvalue(), err.getvalue()

    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    csv = write_csv(measured, tmp_path / "collectives.csv")
    runs = {}
    for name, flag in (("coll-transfer", []), ("coll-plain", ["--no-collective-transfer"])):
        rc, out, err = cli(["calibrate", str(csv), "--name", name, "--tracking-uri", uri, "--no-lodo", "--json",
                            "-q", *flag])
        assert rc == 0, err
        runs[name] = last_json(out)
    assert runs["coll-transfer"]["collective_transfer"] is True and runs["coll-plain"]["collective_transfer"] is False
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    assert client.get_run(runs["coll-transfer"]["run_id"]).data.params["collective_transfer"] == "true"
    assert client.get_run(runs["coll-plain"]["run_id"]).data.params["collective_transfer"] == "false"

    def ask(name: str, system: str, ranks: int = 8) -> dict:
        rc, out, err = cli(["predict", "collective", "--system", system, "--op", "all_reduce", "--size", "64MiB",
                            "--ranks", str(ranks), "--model", name, "--tracking-uri", uri, "--json"])
        assert rc == 0, err
        return last_json(out)

    unseen = ask("coll-transfer", "DGX-H100")
    assert unseen["method"] == "collective-transfer"
    assert unseen["time_us_low"] < unseen["time_us"] < unseen["time_us_high"]
    assert unseen["time_us"] != pytest.approx(unseen["roofline_us"], rel=1e-3)
    assert ask("coll-plain", "DGX-H100")["method"] == "alpha-beta"
    assert ask("coll-transfer", "XLA-H100x8")["method"] == "collective-sigmoid"
    # Sophia measured all-gathers (16 ranks on 2 nodes), never a reduce-scatter: read off the all-gather's curve
    both = {}
    for op in ("reduce_scatter", "all_gather"):
        rc, out, err = cli(["predict", "collective", "--system", "Sophia", "--op", op, "--size", "64MiB", "--ranks",
                            "16", "--nodes", "2", "--model", "coll-transfer", "--tracking-uri", uri, "--json"])
        assert rc == 0, err
        both[op] = last_json(out)
    assert both["reduce_scatter"]["method"] == "collective-sigmoid (all_gather curve)"
    assert "priced from the all_gather curve" in both["reduce_scatter"]["extrapolated"]
    assert both["reduce_scatter"]["time_us"] == pytest.approx(both["all_gather"]["time_us"], rel=0.02)
    # not its own curve: the unseen band (this calibration holds out one system: the public default band)
    assert both["reduce_scatter"]["interval_band"] in ("unseen", "unseen (default)")
    assert both["all_gather"]["interval_band"] == "seen"
    rc, _, err = cli(["calibrate", str(csv), "--name", "x", "--tracking-uri", uri, "--base", "coll-plain",
                      "--collective-transfer", "-q"])
    assert rc == 2 and "base" in err and len(err.strip().splitlines()) == 1
    # an adapted model keeps its base's collective model, and --json says which (it said false for every --base)
    few = write_csv(measured.head(40), tmp_path / "few.csv")
    for base, on in (("coll-transfer", True), ("coll-plain", False)):
        rc, out, err = cli(["calibrate", str(few), "--name", f"{base}-adapted", "--base", base, "--tracking-uri", uri,
                            "--json", "-q"])
        assert rc == 0, err
        assert last_json(out)["collective_transfer"] is on, base
    assert ask("coll-transfer-adapted", "DGX-H100")["method"] == "collective-transfer"
    from hybrid.tracking.calibrate import CalibrationConfig

    assert CalibrationConfig(name="a").collective_transfer is True  # default: on for a new calibration
    assert CalibrationConfig(name="a", base="coll-plain").collective_transfer is False  # adaptation keeps the base's


def test_measured_bus_bandwidth_is_not_discounted_again(fitted, catalog):
    """A catalog bandwidth flagged in ``measured_links`` is what collectives reached there: the transfer model uses
    it at efficiency 1, so a NIC-bound collective is faster, by exactly the fitted NIC efficiency, than on the same
    entry read as a datasheet rate."""
    import dataclasses

    from hybrid.hardware.catalog import Catalog

    tr = fitted.corrections[0].transfer
    c00 = catalog.systems["xxrjun-H100-cluster00"]
    assert c00.measured_links == ("inter",)
    plain = dataclasses.replace(c00, key="c00-datasheet", aliases=(), measured_links=())
    cat = Catalog(dict(catalog.devices), {**catalog.systems, plain.key: plain})
    size = np.array([float(1 << 30)])
    args = (np.array(["send_recv"], dtype=object), np.array([2.0]), np.array([2.0]), size)
    t_meas = tr.predict_us(cat, np.array([c00.key]), *args)[0]
    t_sheet = tr.predict_us(cat, np.array([plain.key]), *args)[0]
    eta = tr.constants()["bus_bw_efficiency_inter"]["other"]
    assert t_meas < t_sheet
    assert t_meas / t_sheet == pytest.approx(eta, rel=0.05)  # bandwidth-bound at 1 GiB: time ~ 1 / efficiency


def test_latency_steps_are_nccls():
    """NCCL's step counts (tuning.cc): a ring all-gather takes n - 1 steps (nodes - 1 across the network, the rest
    paced by a network post on more than one node); a tree all-reduce 2 (GPUs per node - 1) + 2 log2(nodes)."""
    from hybrid.corrections.collective_transfer import ring_terms

    t = ring_terms(np.array(["all_gather", "all_gather", "all_reduce", "reduce_scatter"], dtype=object),
                   np.array([8.0, 2160.0, 16.0, 32.0]), np.array([1.0, 540.0, 2.0, 8.0]))
    assert t.shape[1] == 7
    assert list(t[:, 1]) == [7.0, 0.0, 14.0, 0.0]  # intra-node steps (not paced)
    assert list(t[:, 2]) == [0.0, 539.0, 2.0, 7.0]  # network steps
    assert list(t[:, 6]) == [0.0, 1620.0, 0.0, 24.0]  # intra-node steps of a multi-node ring


def test_all_gather_latency_grows_linearly_with_nodes(fitted):
    """A small all-gather on 4-GPU nodes: ring steps grow with the ranks, so 540 nodes take several times as
    long as 128 (the log-step form predicted 10-30x too fast on ALCF Polaris at that scale)."""
    t = [fitted.predict(_query("Polaris", "A100-SXM4-40GB", [1 << 12], ranks=4 * nn, nodes=nn,
                               op="all_gather"))["time_us"].iloc[0] for nn in (2, 128, 540)]
    assert t[0] < t[1] < t[2] and t[2] / t[1] > 2.5


def test_layout_model_counts_ring_all_gather_steps_linearly():
    """The per-system layout model too: a ring all-gather / reduce-scatter takes n - nodes intra-node and
    nodes - 1 network steps; all-reduce keeps its log2 (tree) steps."""
    from hybrid.corrections.collective_sigmoid import layout_terms

    t = layout_terms(np.array(["all_gather", "reduce_scatter", "all_reduce"], dtype=object),
                     np.array([2160.0, 8.0, 16.0]), np.array([540.0, 1.0, 2.0]))
    assert list(t[:, 1]) == [1620.0, 7.0, 6.0] and list(t[:, 2]) == [539.0, 0.0, 2.0]


def test_nvls_is_decided_from_the_hardware_and_the_entry_can_say_otherwise(catalog):
    """NVLink SHARP needs a third-generation (Hopper) or later NVSwitch: DGX H100 / B200 and a GB200 NVL72 rack have
    it, a DGX A100, a PCIe node and a bridged pair do not; ``nvls = false`` in an entry turns it off."""
    import dataclasses

    from hybrid.hardware.device import System, nvls_capable

    def cap(key: str) -> bool:
        s = catalog.systems[key]
        return nvls_capable(s, catalog.device(s.device))

    assert cap("DGX-H100") and cap("DGX-B200") and cap("HGX-H200")
    assert not cap("DGX-A100") and not cap("Sophia") and not cap("DeepBench-P100")
    assert not cap("Vidur-A100-pairwise-NVLink")
    off = dataclasses.replace(catalog.systems["DGX-H100"], nvls=False)
    assert not nvls_capable(off, catalog.device(off.device))
    entry = {**catalog.systems["DGX-A100"].to_entry(), "nvls": True}
    assert System.from_entry("a100-forced", entry).nvls is True
    with pytest.raises(Exception, match="nvls"):
        System.from_entry("bad", {**entry, "nvls": "yes"})


def test_nvls_all_reduce_moves_fewer_bytes_per_link_than_the_ring():
    """NVLS: (g + 1) / g bytes per message byte on a GPU's link against the ring's 2 (n - 1) / n, taken where it
    is fewer (from 4 GPUs per node on); other collectives, 2-GPU all-reduces and nodes without NVLS keep the ring."""
    from hybrid.corrections.collective_transfer import nvls_terms, ring_terms

    op = np.array(["all_reduce", "all_reduce", "all_reduce", "all_gather", "all_reduce", "all_reduce"], dtype=object)
    ranks = np.array([8.0, 4.0, 2.0, 8.0, 80.0, 8.0])
    nodes = np.array([1.0, 1.0, 1.0, 1.0, 10.0, 1.0])
    nvls = np.array([True, True, True, True, True, False])
    ring = ring_terms(op, ranks, nodes)
    t = nvls_terms(ring, op, ranks, nodes, nvls)
    assert t[:, 3] == pytest.approx([9 / 8, 5 / 4, 1.0, 7 / 8, 9 / 8, 7 / 4])
    assert np.array_equal(t[:, 4], ring[:, 4])  # NIC bytes of the multi-node row unchanged
    assert np.array_equal(np.delete(t, 3, axis=1), np.delete(ring, 3, axis=1))


def test_nvls_makes_an_h100_node_all_reduce_faster_than_its_ring(fitted, catalog):
    """A 1 GiB all-reduce on 8 H100s (NVLS) is predicted 1.75 / 1.125 = 1.56x the bus bandwidth of the same node
    without NVLS (bandwidth-bound at that size; the measured 8-GPU H100 NVSwitch node in ../shared reaches ~480 GB/s
    all-reduce against ~366 GB/s all-gather), while all-gather is unchanged."""
    import dataclasses

    from hybrid.hardware.catalog import Catalog

    tr = fitted.corrections[0].transfer
    h = catalog.systems["DGX-H100"]
    off = dataclasses.replace(h, key="h100-no-nvls", aliases=(), nvls=False)
    cat = Catalog(dict(catalog.devices), {**catalog.systems, off.key: off})
    size = np.array([float(1 << 30)])
    for op, ratio in (("all_reduce", 1.75 / 1.125), ("all_gather", 1.0)):
        args = (np.array([op], dtype=object), np.array([8.0]), np.array([1.0]), size)
        t_nvls = tr.predict_us(cat, np.array([h.key]), *args)[0]
        t_ring = tr.predict_us(cat, np.array([off.key]), *args)[0]
        assert t_ring / t_nvls == pytest.approx(ratio, rel=0.03)


def test_no_collective_beats_a_measured_bus_bandwidth(fitted, catalog):
    """On a link whose catalog value is a measured bus bandwidth, every collective is at most that fast: the op
    multipliers fitted on datasheet links (all-to-all, send/recv above 1) do not apply on top of it. At 1 GiB
    (bandwidth-bound) the time is at least the NIC bytes over the measured bandwidth."""
    from hybrid.corrections.collective_transfer import ring_terms

    tr = fitted.corrections[0].transfer
    assert max(tr.constants()["op_bandwidth_multiplier"].values()) > 1.0  # the cap has something to cap
    c00 = catalog.systems["xxrjun-H100-cluster00"]
    size = float(1 << 30)
    for op in ("all_to_all", "send_recv", "all_gather", "all_reduce"):
        ops = np.array([op], dtype=object)
        t_us = tr.predict_us(catalog, np.array([c00.key]), ops, np.array([16.0]), np.array([2.0]),
                             np.array([size]))[0]
        floor_us = size * ring_terms(ops, np.array([16.0]), np.array([2.0]))[0, 4] / c00.inter_bw * 1e6
        assert t_us >= floor_us * 0.999, op


def test_cpu_gloo_collectives_do_not_set_the_pcie_gpu_fabric():
    """A ``hybrid profile`` CPU bundle's gloo collectives (hundreds of microseconds a step; catalog text in the PCIe
    class) fitted beside GPU rows made the transfer model price a 16 KiB all-reduce on four PCIe GPUs (an L40S node)
    at ~2 ms, and every fabric class it had no data for (Infinity Fabric) ~5x slow. GPU systems only now; the CPU
    system keeps its own curves, and an op it never measured goes to alpha-beta, not to the GPU model."""
    from hybrid.data.bundle import load_bundle

    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    table, catalog = load_bundle(root / "datasets" / "cpu-amd-epyc-1c")
    cpu = table[table["system"] == "cpu-amd-epyc-1c-gloo"].reset_index(drop=True)
    sizes = [2.0 ** k for k in range(10, 31, 2)]
    gpu = pd.DataFrame([dict(device="H100-SXM", system="DGX-H100", op=op, dtype="fp32", size_bytes=s, n_ranks=r,
                             n_nodes=1, algorithm="ring", source="synthetic")
                        for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
                        for r in (2, 4, 8) for s in sizes])
    gpu["time_us"] = roofline(gpu, catalog)["time_us"].to_numpy() * 1.3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = HybridPredictor(catalog, [CollectiveSigmoid(transfer=True)]).fit(
            pd.concat([cpu, gpu], ignore_index=True, sort=False))
    assert p.corrections[0].transfer.systems == ["DGX-H100"]
    q = pd.DataFrame({"device": ["L40S", "MI300X", "cpu-amd-epyc-1c", "cpu-amd-epyc-1c"],
                      "system": ["L40S", "MI300X-Platform", "cpu-amd-epyc-1c-gloo", "cpu-amd-epyc-1c-gloo"],
                      "op": ["all_reduce"] * 3 + ["send_recv"], "dtype": "bf16", "size_bytes": 16384.0,
                      "n_ranks": [4, 4, 4, 2], "n_nodes": 1})
    out = p.predict(q)
    assert list(out["method"].iloc[:3]) == ["collective-transfer", "collective-transfer", "collective-sigmoid"]
    assert out["method"].iloc[3] != "collective-transfer"
    # a small all-reduce inside one GPU node is tens of microseconds, as alpha-beta says, not milliseconds
    assert (out["time_us"].iloc[:2] < 3 * out["roofline_us"].iloc[:2]).all()
    assert out["time_us"].iloc[2] > 200  # the CPU's own gloo curve is untouched
    # a query of the CPU's rows alone, one op without a curve among them (a DDP trace on the CPU): alpha-beta, the
    # same as beside GPU rows (the transfer model was called with no rows left and raised IndexError)
    alone = p.predict(q.iloc[2:].reset_index(drop=True))
    assert np.allclose(alone["time_us"], out["time_us"].iloc[2:]) and alone["method"].iloc[1] != "collective-transfer"
    # and coverage says so, given the catalog that tells a CPU's system (without it: the transfer model's label)
    sig = p.corrections[0]
    assert sig.coverage(q, catalog).tolist()[1:] == ["transfer model: unseen system", "sigmoid",
                                                     "alpha-beta: unseen collective on this system"]


def test_a_model_without_fitted_collectives_does_not_claim_the_transfer_model():
    """A calibration on a table without collectives reported `collective_transfer: true` although every collective
    is then priced by alpha-beta (and its adapted models, which do not carry the unsaved setting, said false)."""
    from hybrid.cli.calibrate import carries_collective_transfer
    from hybrid.corrections.predictor import HybridPredictor

    assert not carries_collective_transfer(HybridPredictor(collective_transfer=True))
