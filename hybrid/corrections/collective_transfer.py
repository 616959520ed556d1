"""Collectives on systems never measured: one physical model fitted across every measured system.

The per-system sigmoid curves (:mod:`hybrid.corrections.collective_sigmoid`) need measurements of the system
they predict. This *transfer model* needs only the system's catalog entry (GPUs per node, intra-node fabric and
bandwidth per GPU, NIC share per GPU, fabric names, the device's memory bandwidth and links). It is an
alpha-beta model whose constants are learned across systems::

    bw   = size * (max(c_intra / (eta_intra[fabric] * m_op * B_intra),  # intra-node bytes per message byte
                       c_inter / (eta_inter[nic] * m_op * B_inter))      # NIC-share bytes (pipelined: max)
                   + c_local * f_local / B_mem)                          # local copies
    lat  = lat0_us[op] + s_intra * L_intra_us[fabric] + s_inter * L_inter_us[nic] + peers * L_peer_us
           + s_paced * max(L_intra_us[fabric], L_post_us)                    # steps of a multi-node ring
    time = (lat^p + bw^p)^(1/p)                                           # p = 1: exactly alpha + beta * size

``c_*`` and ``s_*`` are the algorithm's bytes and latency steps (:func:`ring_terms`: NCCL flat-ring byte
counts; NCCL's step counts: a ring all-gather / reduce-scatter n - 1 steps, every one of them paced by a network
post on more than one node, a tree all-reduce 2 (GPUs per node - 1) + 2 log2(nodes); on an NVSwitch node with
NVLink SHARP the all-reduce's in-node bytes of NCCL's NVLS algorithm, :func:`nvls_terms`), ``B_*`` the catalog
bandwidths. The fitted constants are physical:
``eta`` is the fraction of the catalog link bandwidth a collective reaches (bus-bandwidth efficiency), per
fabric class; ``m_op`` how an operation's bandwidth compares with all-reduce's (all-to-all moves through more
links at once, so it differs); ``L`` are per-step latency floors in microseconds per fabric class; ``lat0`` a
launch floor per operation class; ``p`` how much of the latency hides behind the data transfer (1: none, large:
all of it, ``time = max(lat, bw)``); all-to-all also pays a set-up latency per peer.

Fabric classes are read from the catalog's fabric strings (:func:`intra_class`, :func:`inter_class`). Every
class parameter is a shared value times a per-class factor with a prior at 1 (ln-normal, sigma
:data:`CLASS_PRIOR_SIGMA`), so a class no measured system has (say Slingshot when Polaris is held out) falls
back to the shared value instead of being unconstrained. Topology rule: on a PCIe node whose GPUs are bridged in
pairs (``intra_fabric`` says PCIe and "pair" or "bridge"), a 2-rank collective runs over the bridge (the
device's ``link_gbps``, NVLink class) and larger ones over PCIe (``intra_node_gbps``, PCIe class).

The shared efficiencies have a physical prior (0.8, sigma :data:`PRIOR_SD_ETA` in ln units): a system whose
logs fall far below its catalog links (Vidur's DGX) moves its own random effect, not the typical system's value.

Fitting: robust least squares (soft-L1) on ln time over the fastest library setting of every (system,
collective), one point per size (the median over repeats); each system's curves are weighted by
1/sqrt(number of its curves). Every training system also gets its own ln factors on its intra-node and NIC
efficiencies (random effects with prior sigma :data:`SYSTEM_EFFECT_SIGMA`), so a catalog entry that misstates
a system's links does not bias the shared constants; an unseen system is predicted with effect 0.
A catalog bandwidth named in the system's ``measured_links`` is a measured bus bandwidth (an entry estimated from
that system's logs): its efficiency is 1, not the fitted ``eta``, and no collective exceeds it (``m_op`` only
where below 1).
Leave-one-system-out accuracy: ``experiments/collectives_accuracy/results.md`` (better than alpha-beta over all
rows and on the mean over systems; the predictor's default collectives use it, ``CollectiveSigmoid(transfer=True)``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hybrid.hardware.catalog import Catalog
from hybrid.hardware.device import System, intra_fabric_class, nvls_bus_factor, nvls_capable, pair_bridge_bw

#: Intra-node fabric classes (by catalog ``intra_fabric`` text) and inter-node classes (``inter_fabric``).
INTRA_CLASSES = ("nvswitch", "nvlink", "pcie-pairs", "pcie", "infinity-fabric")
INTER_CLASSES = ("infiniband", "slingshot", "ethernet", "other", "unspecified")
#: Operation classes: bandwidth multiplier and launch floor per class (all_reduce is the reference for m_op).
OP_CLASSES = ("all_reduce", "all_gather/reduce_scatter", "all_to_all", "p2p", "broadcast/reduce")
#: Prior sigma (ln units) of a per-class factor around the shared value.
CLASS_PRIOR_SIGMA = 0.7
#: Prior centres: bus-bandwidth efficiency, latency floors (us), op launch floor (us), local copy fraction.
PRIOR_ETA_INTRA, PRIOR_ETA_INTER = 0.8, 0.8
PRIOR_LAT_INTRA_US, PRIOR_LAT_INTER_US, PRIOR_LAT0_US = 4.0, 8.0, 10.0
PRIOR_LOCAL_FRACTION = 0.05
PRIOR_LAT_PEER_US = 0.5
#: Prior sigma (ln units) of the shared bus-bandwidth efficiencies around PRIOR_ETA_*: NCCL's bus bandwidth on a
#: healthy fabric reaches roughly 0.6-0.95 of the link rate (nccl-tests on NVSwitch, NVLink, PCIe and InfiniBand),
#: so a system far below that (a catalog entry that overstates its links) moves its own random effect, not the
#: value a system never measured is predicted with.
PRIOR_SD_ETA = 0.3
#: Prior centre (us) of the network post overhead that paces every step of a multi-node ring.
PRIOR_LAT_NETPOST_US = 2.0
#: NIC bandwidth (bytes/s per GPU) assumed for a multi-node row on a system whose entry has no inter-node link.
DEFAULT_NIC_BPS = 12.5e9
#: Bounds of the latency/bandwidth overlap exponent p of ``time = (lat^p + bw^p)^(1/p)``.
P_BOUNDS = (0.5, 4.0)
LOSS_SCALE = 0.1
#: Prior sigma (ln units) of a training system's own efficiency factors (random effects).
SYSTEM_EFFECT_SIGMA = 1.5


#: Fabric class of a system's intra-node links (one classifier, in the hardware layer).
intra_class = intra_fabric_class


def inter_class(system: System) -> str:
    """Fabric class of the scale-out network from the catalog text."""
    text = system.inter_fabric.lower()
    if not text.strip() or "not published" in text or "unknown" in text:
        return "unspecified"  # no fabric given (Vidur's pairwise set-ups across hosts, DeepBench's cluster)
    if "infiniband" in text or "hdr" in text or "ndr" in text or "edr" in text or " ib" in f" {text}":
        return "infiniband"
    if "slingshot" in text:
        return "slingshot"
    if "ethernet" in text or "roce" in text or "efa" in text or "gbe" in text:
        return "ethernet"
    return "other"


def op_class(op: np.ndarray) -> np.ndarray:
    """Index into :data:`OP_CLASSES` per row."""
    op = np.asarray(op, dtype=object)
    return np.select([op == "all_reduce", np.isin(op, ["all_gather", "reduce_scatter"]), op == "all_to_all",
                      np.isin(op, ["send_recv", "collective_permute", "sendrecv", "p2p"])], [0, 1, 2, 3], default=4)


def ring_terms(op: np.ndarray, ranks: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """:func:`layout_terms` with NCCL's flat-ring byte counts for all-reduce / all-gather / reduce-scatter: one
    ring per NIC, so every GPU's intra-node link and its NIC share carry ``bus_factor(op, n)`` bytes per message
    byte (bus bandwidth ~ GPUs per node x NIC share across nodes, as nccl-tests shows), instead of the
    hierarchical counts (which predict twice that across 2 nodes); NCCL's latency step counts (ring all-gather /
    reduce-scatter linear in ranks, tree all-reduce) and a seventh column: the intra-node steps of a multi-node
    ring, each no faster than a network post."""
    from hybrid.corrections.collective_sigmoid import layout_terms
    from hybrid.ops.families import bus_factor

    op = np.asarray(op, dtype=object)
    terms = layout_terms(op, ranks, nodes)
    n = np.maximum(np.asarray(ranks, dtype=np.float64), 1.0)
    nn = np.maximum(np.asarray(nodes, dtype=np.float64), 1.0)
    g = np.maximum(n / nn, 1.0)
    ring = np.isin(op, ["all_reduce", "all_gather", "reduce_scatter"])
    bf = bus_factor(op, n)
    terms[:, 3] = np.where(ring & (g > 1), bf, terms[:, 3])
    terms[:, 4] = np.where(ring & (nn > 1), bf / g, terms[:, 4])
    # latency steps as NCCL's own tuning model counts them (src/graph/tuning.cc). A ring all-gather /
    # reduce-scatter takes n - 1 steps (no tree exists for them), nodes - 1 of them across the network; on more
    # than one node every other step is paced by a network post too (NCCL: intra-step latency = max(intra hop,
    # network overhead)), column 6. An all-reduce runs the tree where latency matters: 2 (GPUs per node - 1)
    # intra-node and 2 log2(nodes) network steps.
    agrs = np.isin(op, ["all_gather", "reduce_scatter"])
    ar = op == "all_reduce"
    multi_ring = agrs & (nn > 1)
    paced = np.where(multi_ring, n - nn, 0.0)
    terms[:, 1] = np.where(agrs, np.where(multi_ring, 0.0, n - nn), np.where(ar, 2.0 * (g - 1.0), terms[:, 1]))
    terms[:, 2] = np.where(agrs, nn - 1.0, np.where(ar, 2.0 * np.log2(nn), terms[:, 2]))
    return np.column_stack([terms, paced])


def nvls_terms(terms: np.ndarray, op: np.ndarray, ranks: np.ndarray, nodes: np.ndarray,
               nvls: np.ndarray) -> np.ndarray:
    """``terms`` (:func:`ring_terms`) with NVLS all-reduce where it moves fewer bytes per GPU link than the ring.

    NVLS reduce-scatters with in-switch loads (each GPU sends its whole buffer once, receives its reduced 1/g) and
    all-gathers with multicast stores (sends its 1/g once, receives the other (g - 1)/g): (g + 1)/g bytes per
    message byte on the busier direction of a GPU's link, against the ring's 2 (n - 1)/n. NCCL takes the better:
    NVLS from 4 GPUs per node on (8 GPUs: 1.125 vs 1.75), the ring for 2. Across nodes (NVLS-tree) only the
    intra-node share changes; the NIC bytes stay. Same fitted link efficiency as the ring: no new constant."""
    op = np.asarray(op, dtype=object)
    g = np.maximum(np.asarray(ranks, np.float64) / np.maximum(np.asarray(nodes, np.float64), 1.0), 1.0)
    use = np.asarray(nvls, dtype=bool) & (op == "all_reduce") & (g > 2.0)
    out = terms.copy()
    out[:, 3] = np.where(use, np.minimum(terms[:, 3], nvls_bus_factor(g)), terms[:, 3])
    return out


def a2a_peers(op: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Peers each rank exchanges with in an all-to-all (n - 1), 0 for other collectives."""
    n = np.maximum(np.asarray(ranks, dtype=np.float64), 1.0)
    return np.where(np.asarray(op, dtype=object) == "all_to_all", n - 1.0, 0.0)


@dataclass
class SystemFeatures:
    """What the transfer model reads of a system, per row (vectors)."""

    intra_bw: np.ndarray  # bytes/s per GPU the row's intra-node collective runs over
    inter_bw: np.ndarray  # bytes/s per GPU (NIC share)
    mem_bw: np.ndarray  # bytes/s device memory
    intra_cls: np.ndarray  # index into INTRA_CLASSES
    inter_cls: np.ndarray  # index into INTER_CLASSES
    #: the catalog's bandwidth is a measured bus bandwidth (``System.measured_links``): efficiency 1, not eta
    intra_measured: np.ndarray | None = None
    inter_measured: np.ndarray | None = None
    #: NCCL's NVLS all-reduce runs on the row's node (:func:`nvls_capable`)
    nvls: np.ndarray | None = None


def system_features(catalog: Catalog, systems: np.ndarray, ranks: np.ndarray, nodes: np.ndarray) -> SystemFeatures:
    """Catalog values per row (``systems`` are catalog system keys or device names)."""
    from hybrid.ops.roofline import resolve_system

    codes, uniques = pd.factorize(pd.Series(systems, dtype="string").fillna(""))
    sys_objs = [resolve_system(catalog, str(u)) for u in uniques]
    intra = np.array([s.intra_bw for s in sys_objs])[codes]
    inter = np.array([s.inter_bw if s.inter_bw > 0 else DEFAULT_NIC_BPS for s in sys_objs])[codes]
    devs = [catalog.system_device(s, missing_ok=True) for s in sys_objs]
    mem = np.array([d.mem_bw if d is not None else s.intra_bw * 10 for d, s in zip(devs, sys_objs, strict=True)])[codes]
    bridge = np.array([pair_bridge_bw(s, d) for s, d in zip(sys_objs, devs, strict=True)])[codes]
    icls = np.array([INTRA_CLASSES.index(intra_class(s)) for s in sys_objs])[codes]
    ecls = np.array([INTER_CLASSES.index(inter_class(s)) for s in sys_objs])[codes]
    imeas = np.array([("intra" in s.measured_links) for s in sys_objs], dtype=bool)[codes]
    emeas = np.array([("inter" in s.measured_links and s.inter_bw > 0) for s in sys_objs], dtype=bool)[codes]
    nvls = np.array([nvls_capable(s, d) for s, d in zip(sys_objs, devs, strict=True)], dtype=bool)[codes]
    gpn = np.asarray(ranks, dtype=np.float64) / np.maximum(np.asarray(nodes, dtype=np.float64), 1.0)
    pairs = icls == INTRA_CLASSES.index("pcie-pairs")
    pair = pairs & (gpn <= 2.0) & (bridge > 0)
    intra = np.where(pair, bridge, intra)
    # the class is that of the link the collective runs over: the NVLink bridge for a bridged pair, PCIe beyond
    icls = np.where(pair, INTRA_CLASSES.index("nvlink"), np.where(pairs, INTRA_CLASSES.index("pcie"), icls))
    return SystemFeatures(intra, inter, mem, icls, ecls, imeas & ~pair, emeas, nvls)


# parameter vector layout (all ln): shared values first, then per-class factors
_N_I, _N_E, _N_O = len(INTRA_CLASSES), len(INTER_CLASSES), len(OP_CLASSES)
_SLICES: dict[str, slice] = {}
_pos = 0
for _name, _n in (("eta_intra", 1), ("eta_inter", 1), ("lat_intra_us", 1), ("lat_inter_us", 1), ("lat0_us", 1),
                  ("overlap_p", 1), ("local_fraction", 1), ("lat_peer_us", 1), ("lat_netpost_us", 1), ("eta_intra_cls", _N_I), ("eta_inter_cls", _N_E),
                  ("lat_intra_cls", _N_I), ("lat_inter_cls", _N_E), ("m_op", _N_O - 1), ("lat0_op", _N_O - 1)):
    _SLICES[_name] = slice(_pos, _pos + _n)
    _pos += _n
N_PARAMS = _pos


def _prior() -> tuple[np.ndarray, np.ndarray]:
    centre = np.zeros(N_PARAMS)
    sigma = np.full(N_PARAMS, CLASS_PRIOR_SIGMA)
    for name, value, sd in (("eta_intra", PRIOR_ETA_INTRA, PRIOR_SD_ETA), ("eta_inter", PRIOR_ETA_INTER, PRIOR_SD_ETA),
                            ("lat_intra_us", PRIOR_LAT_INTRA_US, 3.0), ("lat_inter_us", PRIOR_LAT_INTER_US, 3.0),
                            ("lat0_us", PRIOR_LAT0_US, 3.0), ("lat_peer_us", PRIOR_LAT_PEER_US, 3.0), ("lat_netpost_us", PRIOR_LAT_NETPOST_US, 3.0), ("overlap_p", 1.0, 1.0), ("local_fraction", PRIOR_LOCAL_FRACTION, 1.0)):
        centre[_SLICES[name]] = np.log(value)
        sigma[_SLICES[name]] = sd
    sigma[_SLICES["m_op"]] = 0.3  # nccl-tests bus factors already put collectives on one bandwidth scale
    sigma[_SLICES["lat0_op"]] = 1.5
    return centre, sigma


#: Physical bounds (not ln): shared efficiencies, latencies (us), op multipliers; class factors within e^+-1.5.
ETA_BOUNDS = (0.05, 1.2)
LAT_BOUNDS_US = (0.3, 200.0)
LAT0_BOUNDS_US = (0.5, 300.0)
M_OP_BOUNDS = (0.1, 3.0)
LOCAL_BOUNDS = (0.01, 2.0)
CLASS_BOUND = 3.0


def _bounds(centre: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = np.full(N_PARAMS, -CLASS_BOUND), np.full(N_PARAMS, CLASS_BOUND)
    for name, (a, b) in (("eta_intra", ETA_BOUNDS), ("eta_inter", ETA_BOUNDS), ("lat_intra_us", LAT_BOUNDS_US),
                         ("lat_netpost_us", (0.1, 50.0)),
                         ("lat_inter_us", LAT_BOUNDS_US), ("lat0_us", LAT0_BOUNDS_US), ("lat_peer_us", (0.01, 50.0)), ("overlap_p", P_BOUNDS),
                         ("local_fraction", LOCAL_BOUNDS), ("m_op", M_OP_BOUNDS)):
        lo[_SLICES[name]], hi[_SLICES[name]] = np.log(a), np.log(b)
    lo[_SLICES["lat0_op"]], hi[_SLICES["lat0_op"]] = -3.0, 3.0
    return lo, hi


def transfer_log_time(theta: np.ndarray, terms: np.ndarray, size: np.ndarray, feats: SystemFeatures,
                      opc: np.ndarray, peers: np.ndarray, sys_offset: np.ndarray | None = None) -> np.ndarray:
    """ln time (s) of the transfer model for rows with layout ``terms`` (:func:`layout_terms`); ``peers``: the
    number of peers an all-to-all rank exchanges with (n - 1; 0 for other collectives), each costing
    ``lat_peer_us`` of message set-up. ``sys_offset`` (fitting only): per row, ln factors on the intra-node and
    NIC efficiency of the row's training system (random effects, see :meth:`CollectiveTransfer.fit`)."""
    th = np.asarray(theta, dtype=np.float64)
    g = {k: th[s] for k, s in _SLICES.items()}
    m_op = np.concatenate([[0.0], g["m_op"]])[opc]
    lat0 = g["lat0_us"][0] + np.concatenate([[0.0], g["lat0_op"]])[opc]
    log_eta_i = g["eta_intra"][0] + g["eta_intra_cls"][feats.intra_cls]
    log_eta_e = g["eta_inter"][0] + g["eta_inter_cls"][feats.inter_cls]
    # a measured bus bandwidth already is what collectives reach: efficiency 1 (ln 0) instead of the fitted one
    if feats.intra_measured is not None:
        log_eta_i = np.where(feats.intra_measured, 0.0, log_eta_i)
    if feats.inter_measured is not None:
        log_eta_e = np.where(feats.inter_measured, 0.0, log_eta_e)
    log_eta_i, log_eta_e = log_eta_i + m_op, log_eta_e + m_op
    # a measured bus bandwidth is what the system's collectives reach: no collective exceeds it (an op multiplier
    # above 1, fitted on datasheet links, does not apply on top of it)
    if feats.intra_measured is not None:
        log_eta_i = np.where(feats.intra_measured, np.minimum(log_eta_i, 0.0), log_eta_i)
    if feats.inter_measured is not None:
        log_eta_e = np.where(feats.inter_measured, np.minimum(log_eta_e, 0.0), log_eta_e)
    if sys_offset is not None:
        log_eta_i = log_eta_i + sys_offset[:, 0]
        log_eta_e = log_eta_e + sys_offset[:, 1]
    # a pipelined ring / tree is bound by its slowest link: intra-node and NIC shares overlap (max, not sum)
    s_per_byte = (np.maximum(terms[:, 3] * np.exp(-log_eta_i) / feats.intra_bw,
                             terms[:, 4] * np.exp(-log_eta_e) / feats.inter_bw)
                  + terms[:, 5] * np.exp(g["local_fraction"][0]) / feats.mem_bw)
    lat_step = np.exp(g["lat_intra_us"][0] + g["lat_intra_cls"][feats.intra_cls])
    lat_us = (np.exp(lat0) + terms[:, 1] * lat_step
              + terms[:, 2] * np.exp(g["lat_inter_us"][0] + g["lat_inter_cls"][feats.inter_cls])
              + peers * np.exp(g["lat_peer_us"][0]))
    if terms.shape[1] > 6:  # ring steps inside nodes of a multi-node ring: no faster than a network post
        lat_us = lat_us + terms[:, 6] * np.maximum(lat_step, np.exp(g["lat_netpost_us"][0]))
    log_lat = np.log(lat_us * 1e-6)
    log_bw = np.log(s_per_byte) + np.log(size)
    p = np.exp(g["overlap_p"][0])  # (lat^p + bw^p)^(1/p): p = 1 alpha-beta, larger p = latency hidden behind data
    return np.logaddexp(p * log_bw, p * log_lat) / p


@dataclass
class CollectiveTransfer:
    """The cross-system model: fitted ln parameters and what they were fitted on."""

    log_params: list[float] = field(default_factory=list)
    systems: list[str] = field(default_factory=list)
    n_points: int = 0
    rmse_log: float = float("nan")
    #: per training system, fitted ln factors on its [intra-node, NIC] efficiency (diagnostic; not used to predict)
    system_effects: dict[str, list[float]] = field(default_factory=dict)

    @property
    def fitted(self) -> bool:
        return len(self.log_params) == N_PARAMS

    def fit(self, frame: pd.DataFrame, catalog: Catalog) -> CollectiveTransfer:
        """``frame``: one row per (system, op, n_ranks, n_nodes, size) with ``time_s`` (median), fastest setting."""
        op = frame["op"].to_numpy(dtype=object)
        ranks, nodes = frame["n_ranks"].to_numpy(np.float64), frame["n_nodes"].to_numpy(np.float64)
        size, log_t = frame["size"].to_numpy(np.float64), np.log(frame["time_s"].to_numpy(np.float64))
        systems = frame["system"].astype(str).to_numpy()
        feats = system_features(catalog, systems, ranks, nodes)
        terms = nvls_terms(ring_terms(op, ranks, nodes), op, ranks, nodes, feats.nvls)
        opc = op_class(op)
        peers = a2a_peers(op, ranks)
        # weights: each system 1 in total, each (op, layout) curve equal within its system
        curve = pd.Series(systems) + "|" + pd.Series(op).astype(str) + "|" + pd.Series(ranks).astype(str) + "|" \
            + pd.Series(nodes).astype(str)
        n_curve = curve.map(curve.value_counts()).to_numpy(np.float64)
        sys_s = pd.Series(systems)
        curves_per_sys = sys_s.map(curve.groupby(sys_s).nunique()).to_numpy(np.float64)
        weight = np.sqrt(1.0 / (n_curve * np.sqrt(curves_per_sys)))
        weight *= np.sqrt(len(frame) / np.sum(weight**2))  # rows' total weight = row count (prior stays weak)
        centre, sigma = _prior()
        # per-class factors of classes no system has stay at the prior (zero residual, no data).
        # Random effects: every training system gets its own ln factor on its intra-node and its NIC efficiency
        # (prior sigma SYSTEM_EFFECT_SIGMA): a catalog entry that misstates a system's links (Vidur's DGX reaches
        # an eighth of its datasheet NICs) is absorbed there instead of biasing the shared constants. An unseen
        # system has effect 0 (the typical system).
        sys_codes, sys_names = pd.factorize(sys_s)
        n_sys = len(sys_names)
        centre = np.concatenate([centre, np.zeros(2 * n_sys)])
        sigma = np.concatenate([sigma, np.full(2 * n_sys, SYSTEM_EFFECT_SIGMA)])

        def split(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return theta[:N_PARAMS], theta[N_PARAMS:].reshape(n_sys, 2)[sys_codes]

        def resid(theta: np.ndarray) -> np.ndarray:
            base, eff = split(theta)
            return np.concatenate([(transfer_log_time(base, terms, size, feats, opc, peers, eff) - log_t) * weight,
                                   (theta - centre) / sigma])

        lo, hi = _bounds(centre[:N_PARAMS])
        lo = np.concatenate([lo, np.full(2 * n_sys, -4.0)])
        hi = np.concatenate([hi, np.full(2 * n_sys, 4.0)])
        start = np.clip(centre, lo + 1e-6, hi - 1e-6)
        # fitting only: predicting a saved model does not import SciPy
        from scipy.optimize import least_squares

        sol = least_squares(resid, start, bounds=(lo, hi), loss="soft_l1", f_scale=LOSS_SCALE, max_nfev=400)
        base, eff = split(sol.x)
        err = transfer_log_time(base, terms, size, feats, opc, peers, eff) - log_t
        self.system_effects = {str(n): [float(v) for v in e] for n, e in zip(sys_names, sol.x[N_PARAMS:].reshape(n_sys, 2),
                                                                            strict=True)}
        self.log_params = [float(v) for v in base]
        self.systems = sorted(set(systems))
        self.n_points = len(frame)
        self.rmse_log = float(np.sqrt(np.mean(err**2)))
        return self

    def predict_us(self, catalog: Catalog, systems: np.ndarray, op: np.ndarray, ranks: np.ndarray,
                   nodes: np.ndarray, size: np.ndarray) -> np.ndarray:
        """Predicted time (us) per row from the catalog entries of ``systems``."""
        op = np.asarray(op, dtype=object)
        feats = system_features(catalog, systems, ranks, nodes)
        terms = nvls_terms(ring_terms(op, ranks, nodes), op, ranks, nodes, feats.nvls)
        return np.exp(transfer_log_time(np.asarray(self.log_params), terms, np.asarray(size, np.float64), feats,
                                        op_class(op), a2a_peers(op, ranks))) * 1e6

    def constants(self) -> dict[str, Any]:
        """The fitted constants in physical units (efficiencies, latencies in us) per class."""
        th = np.asarray(self.log_params)
        g = {k: th[s] for k, s in _SLICES.items()}
        return {
            "bus_bw_efficiency_intra": {c: float(np.exp(g["eta_intra"][0] + g["eta_intra_cls"][i]))
                                        for i, c in enumerate(INTRA_CLASSES)},
            "bus_bw_efficiency_inter": {c: float(np.exp(g["eta_inter"][0] + g["eta_inter_cls"][i]))
                                        for i, c in enumerate(INTER_CLASSES)},
            "op_bandwidth_multiplier": {c: float(np.exp(np.concatenate([[0.0], g["m_op"]])[i]))
                                        for i, c in enumerate(OP_CLASSES)},
            "latency_per_intra_step_us": {c: float(np.exp(g["lat_intra_us"][0] + g["lat_intra_cls"][i]))
                                          for i, c in enumerate(INTRA_CLASSES)},
            "latency_per_inter_step_us": {c: float(np.exp(g["lat_inter_us"][0] + g["lat_inter_cls"][i]))
                                          for i, c in enumerate(INTER_CLASSES)},
            "launch_floor_us": {c: float(np.exp(g["lat0_us"][0] + np.concatenate([[0.0], g["lat0_op"]])[i]))
                                for i, c in enumerate(OP_CLASSES)},
            "latency_bandwidth_overlap_p": float(np.exp(g["overlap_p"][0])),
            "all_to_all_latency_per_peer_us": float(np.exp(g["lat_peer_us"][0])),
            "network_post_per_ring_step_us": float(np.exp(g["lat_netpost_us"][0])),
            "local_copy_passes_at_mem_bw": float(np.exp(g["local_fraction"][0])),
        }

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "param_layout": {k: [s.start, s.stop] for k, s in _SLICES.items()},
                "constants": self.constants() if self.fitted else {}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CollectiveTransfer:
        return cls(list(d.get("log_params", [])), list(d.get("systems", [])), int(d.get("n_points", 0)),
                   float(d.get("rmse_log", float("nan"))), dict(d.get("system_effects", {})))


def intra_fabric_constants(cost_model: Any, fabric: str) -> tuple[float, float]:
    """(bus-bandwidth efficiency, per-step latency us) of intra-node fabric class ``fabric``: the fitted transfer
    model's when ``cost_model`` (a predictor) carries one among its corrections, else the priors."""
    for corr in getattr(cost_model, "corrections", ()) or ():
        tr = getattr(corr, "transfer", None)
        if isinstance(tr, CollectiveTransfer) and tr.fitted:
            c = tr.constants()
            return float(c["bus_bw_efficiency_intra"][fabric]), float(c["latency_per_intra_step_us"][fabric])
    return PRIOR_ETA_INTRA, PRIOR_LAT_INTRA_US
