"""Collectives: bus bandwidth as a sigmoid of log message size, per (system, collective, ranks, nodes).

Model (nccl-tests conventions: ``busbw = size * bus_factor(op, ranks) / time``)::

    busbw(s) = B / (1 + exp(-(ln s - x0) / w))         time(s) = s * bus_factor / busbw(s)

With ``w = 1`` this is *exactly* the alpha-beta model ``time = alpha + s * bus_factor / B`` (alpha =
``bus_factor * e^x0 / B``): bandwidth grows linearly with size while latency dominates and saturates at
``B``. Letting ``w`` float (bounded to [0.3, 4]) absorbs the smoother or sharper transitions NCCL's protocol
switches (LL / LL128 / Simple) produce, so the curve keeps the alpha-beta asymptotes but fits the knee.
The three parameters are fitted with :func:`scipy.optimize.curve_fit` on ``log time`` (relative error),
with bounds and an initial guess from the data (B from the largest sizes, x0 where half of it is reached).

Curves are kept per library setting too (the ``algorithm`` column: nccl-tests environment set-ups differ
by up to 10x on the same machine); rows that name no setting, or an unmeasured one, use the fastest measured
setting of that (system, collective), i.e. what a tuned deployment reaches.

Unmeasured rank/node counts (``rank_model="joint"``, the default): per (system, collective, setting) one
*layout model* is fitted jointly over every measured (ranks, nodes) layout and size: a hierarchical alpha-beta
whose latencies (constant, per intra-node step, per inter-node step) and seconds-per-byte (intra-node fabric,
inter-node NIC share, local copy, a bridged pair's link, the node's aggregate network link: the network term is the
slower of the NIC share and the node link, grown by the fabric's congestion per doubling of the nodes) are free,
with the sigmoid's knee ``w``, fitted by robust least squares on log time with a weak prior at the catalog's values
(so a system with one measured layout stays close to the catalog's scaling). Between measured rank counts the
layout model is used as is; beyond them (extrapolation) it is multiplied by the nearest measured layout's residual
``sigmoid / layout model`` at the row's size (held constant, i.e. capped). ``rank_model="ratio"`` keeps the previous rule (interpolate
``log(sigmoid / catalog alpha-beta)`` in ``log2(ranks)`` within a GPUs-per-node ladder) for comparison; a
model saved before layout models existed predicts that way.
An all-gather never measured at a (system, ranks, nodes) where a reduce-scatter was, or the reverse, is read off the
sibling's curve there first (:data:`SIBLING_OPS`: the same bytes per rank over the same rings; ``sibling=False`` turns
it off), with ``method`` ``collective-sigmoid (all_gather curve)`` / ``(reduce_scatter curve)``.
Each curve answers only within the message sizes it was fitted on; beyond them the time is anchored at its nearest
measured size (:meth:`CollectiveSigmoid._anchored`, ``method`` ``collective-sigmoid (edge-anchored)``), and more than
:attr:`CollectiveSigmoid.SIZE_MARGIN` x out the row is extrapolated (the unseen interval band).
Systems or collectives never measured get the *transfer model* with ``transfer=True``
(:class:`hybrid.corrections.collective_transfer.CollectiveTransfer`): one physical model fitted across every
measured system that reads only the catalog entry of the system it predicts. The predictor's default corrections
turn it on (it beats alpha-beta on leave-one-system-out, ``experiments/collectives_accuracy``); this class on its
own defaults to ``transfer=False``.
:meth:`CollectiveSigmoid.predict_with_source` says per row which model answered (``collective-sigmoid`` or
``collective-transfer``). With ``transfer=False`` (the default, or a model saved before it existed) those rows get NaN,
which the predictor reports as the ``alpha-beta`` fallback; curve fits that fail (too few sizes, no
convergence) are recorded with their reason and treated the same way.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from hybrid.corrections.base import Correction, family_mask, read_json, write_json
from hybrid.corrections.collective_transfer import CollectiveTransfer
from hybrid.errors import InvalidInputError, at_row
from hybrid.hardware.catalog import Catalog
from hybrid.hardware.device import System
from hybrid.ops.families import COLLECTIVE_OPS, bus_factor, col

#: Collectives whose sibling's curve prices them at a layout where they were never measured but the sibling was
#: (:meth:`CollectiveSigmoid.sibling_ops`): NCCL's ring all-gather and reduce-scatter move the same bytes per rank,
#: ``(n - 1) / n x size_bytes`` (``size_bytes`` the total buffer: the gather's output, the scatter's input), over the
#: same rings, and share the bus factor, so equal bus bandwidth at equal ``size_bytes`` is equal time. On the 9 public
#: layouts with both measured a hidden one read off the other's curve was 1.4-1.5% geomean off (p90 9-11%), against
#: 4.5-8.4% (p90 18-27%) for the layout or transfer model that priced it before
#: (``experiments/collectives_accuracy/borrow_results.md``).
SIBLING_OPS = {"all_gather": "reduce_scatter", "reduce_scatter": "all_gather"}
#: Fewest distinct message sizes a curve is fitted to.
MIN_SIZES = 5
#: How much faster than its alpha-beta bandwidth term (the catalog's link rate) a collective may be predicted at a
#: layout no log measured (:meth:`CollectiveSigmoid.predict_with_source`): the public nccl-tests logs beat it by at
#: most 1.38x at 1 MiB and up (xxrjun's H100 NDR cluster, 80 ranks: its catalog NIC rate is below what NCCL
#: reaches there), so 1.5x leaves every measurement alone and stops an extrapolation across layouts from
#: claiming more bandwidth than the links have (Polaris 2 GPUs extrapolated from 8 / 32 ranks: 2.3x).
LINK_BEAT_MAX = 1.5
#: Parameter bounds: B in GB/s, x0 in ln(bytes), w dimensionless.
B_BOUNDS_GBPS = (1e-3, 1e4)
X0_BOUNDS = (0.0, 40.0)
W_BOUNDS = (0.3, 4.0)
#: Layout-model parameters (all stored as natural logs): latencies in us, seconds per byte, knee width.
LAYOUT_PARAMS = ("lat0_us", "lat_intra_us", "lat_inter_us", "s_per_byte_intra", "s_per_byte_inter",
                 "s_per_byte_local", "w", "s_per_byte_pair", "s_per_byte_node", "fabric_per_doubling")
#: Prior standard deviations (ln units) of the layout-model parameters around the catalog values: loose, so
#: measurements dominate wherever they constrain a parameter; the knee prior is tighter (w = 1 is alpha-beta).
LAYOUT_PRIOR_SIGMA = (6.0, 4.5, 4.5, 3.0, 3.0, 6.0, 1.5, 3.0, 3.0, 10.0)
#: Prior constant latency (us) and local-copy share of device memory bandwidth for the layout model.
LAYOUT_PRIOR_LAT0_US = 5.0
LAYOUT_PRIOR_LOCAL_FRACTION = 0.05
#: Assumed NIC bandwidth (bytes/s per GPU) for the prior of a system without an inter-node entry.
LAYOUT_PRIOR_NIC = 12.5e9
#: Robust loss scale (ln units): residuals beyond ~35% (protocol-switch bumps) count linearly, not squared.
LAYOUT_LOSS_SCALE = 0.3
#: ln seconds per byte of a node link that never binds (layout models saved before the node's link existed).
LAYOUT_NODE_UNBOUND = -200.0
#: Prior of ``fabric_per_doubling`` (the network's congestion: the share of the network time, the slower of the NIC
#: share and the node link, added per doubling of the node count beyond 2): next to nothing, with a loose prior
#: (sigma 10 ln units), so a system measured on at most two nodes keeps the flat network of the alpha-beta model and
#: one measured on more node counts sets it.
LAYOUT_PRIOR_FABRIC_SHARE = 1e-3
#: Second start of the fabric term's fit (share of the network time per doubling; see :func:`fit_layout_model`).
LAYOUT_FABRIC_START_SHARE = 0.3
#: ln of a fabric term that is absent (layout models saved before it existed).
LAYOUT_FABRIC_NONE = -200.0


@dataclass
class SigmoidFit:
    """One fitted curve for one (system, collective, ranks, nodes) configuration."""

    system: str
    op: str
    algorithm: str  # library setting / environment the curve was measured with ("" if not recorded)
    n_ranks: int
    n_nodes: int
    log_b: float  # ln(bytes/s)
    x0: float
    log_w: float
    n_sizes: int
    rmse_log: float  # RMS of log(pred/measured time) on its own data
    #: smallest and largest message size (bytes) the curve was fitted on: beyond them it does not answer
    #: (:meth:`CollectiveSigmoid._predict_measured`); NaN for a curve saved before they were recorded
    size_min: float = float("nan")
    size_max: float = float("nan")

    @property
    def gpn(self) -> float:
        return self.n_ranks / max(self.n_nodes, 1)


@dataclass
class LayoutFit:
    """Hierarchical alpha-beta + sigmoid knee for one (system, collective, setting) over all its layouts."""

    system: str
    op: str
    algorithm: str
    log_params: list[float]  # ln of LAYOUT_PARAMS
    layouts: list[list[int]]  # measured [ranks, nodes] it was fitted on
    n_points: int
    rmse_log: float
    #: the system's ``intra_bw`` over the bridge of a GPU pair (:func:`pair_link_factor`; 1 elsewhere): the
    #: intra-node bytes of a layout with at most 2 GPUs per node move over the bridge, not PCIe; its prior rate
    pair_factor: float = 1.0

    def __post_init__(self) -> None:
        # saved before the bridge had its own rate (7 parameters: the pair's bytes at pair_factor x the intra-node
        # seconds per byte): the same prediction with that rate as the bridge's
        if len(self.log_params) == 7:
            self.log_params = [*self.log_params, float(self.log_params[3] + np.log(self.pair_factor))]
        # saved before the node's own network link (8 parameters): a link too fast to bind, as it predicted
        if len(self.log_params) == 8:
            self.log_params = [*self.log_params, LAYOUT_NODE_UNBOUND]
        # saved before the fabric's congestion term (9 parameters): a network as fast at any node count
        if len(self.log_params) == 9:
            self.log_params = [*self.log_params, LAYOUT_FABRIC_NONE]


#: Ops :func:`layout_terms` gives collective byte counts (every other op is a point-to-point transfer: one byte
#: across per message byte, from one GPU of a node when it spans nodes).
LAYOUT_COLLECTIVES = tuple(o for o in COLLECTIVE_OPS if o != "send_recv")


def layout_terms(op: np.ndarray, ranks: np.ndarray, nodes: np.ndarray, pair_factor: float = 1.0) -> np.ndarray:
    """Per row, the coefficients of the layout model: latency (1, intra steps, inter steps) and bytes moved
    (intra-node fabric, inter-node NIC share, local copy) per byte of message, as in the alpha-beta model.
    ``pair_factor`` (:func:`pair_link_factor`) scales the intra-node bytes of layouts with at most 2 GPUs per
    node, which run over a pair's bridge on a system of bridged PCIe cards."""
    op = np.asarray(op, dtype=object)
    n = np.maximum(np.asarray(ranks, dtype=np.float64), 1.0)
    nn = np.maximum(np.asarray(nodes, dtype=np.float64), 1.0)
    g = np.maximum(n / nn, 1.0)
    multi = nn > 1
    rg, rn = (g - 1.0) / g, (nn - 1.0) / nn
    ar, a2a = op == "all_reduce", op == "all_to_all"
    agrs = np.isin(op, ["all_gather", "reduce_scatter"])
    bc = np.isin(op, ["broadcast", "reduce"])
    intra = np.select([ar, agrs, a2a, bc], [2 * rg, rg, (g - 1.0) / n, rg + 1.0 / n], default=np.where(multi, 0.0, 1.0))
    intra = intra * np.where(g <= 2.0, pair_factor, 1.0)
    # broadcast / reduce: every node receives (sends) the whole message through its g NICs (the roofline's term)
    inter = np.select([ar, agrs, a2a, bc], [2 * rn / g, rn / g, (n - g) / n, 1.0 / g], default=1.0)
    inter = np.where(multi, inter, 0.0)
    steps = np.where(ar, 2.0, 1.0)
    # latency steps: log2 (tree-like) for all-reduce and the rest; a ring all-gather / reduce-scatter takes n - 1
    # steps, nodes - 1 of them across the network (NCCL has no tree for them, src/graph/tuning.cc)
    lat_intra = np.where(agrs, n - nn, steps * np.log2(g) + np.where(a2a, 0.25 * (g - 1.0), 0.0))
    lat_inter = np.where(multi, np.where(agrs, nn - 1.0, steps * np.log2(nn) + np.where(a2a, 0.25 * (nn - 1.0), 0.0)),
                         0.0)
    one = np.ones_like(n)
    return np.stack([one, lat_intra, lat_inter, intra, inter, one], axis=1)


def layout_fit_terms(op: np.ndarray, ranks: np.ndarray, nodes: np.ndarray, bridged: bool) -> np.ndarray:
    """:func:`layout_terms` (with ``pair_factor`` 1) plus two columns. Seventh: the bytes that cross a pair's
    bridge: on a system of PCIe cards bridged in pairs (``bridged``) the intra-node bytes of a layout with at most 2
    GPUs per node move there (column 3 then 0), priced by the layout model's own ``s_per_byte_pair``, so that
    measuring one link says nothing about the other (a bridge at 65% of its datasheet rate says nothing of the PCIe
    hop between pairs); zero elsewhere. Eighth: the bytes the whole node sends across the network per message
    byte (GPUs per node x each GPU's NIC share, column 4, for a collective; a send/recv ring crosses between
    nodes at one GPU per node), priced by ``s_per_byte_node``: the node's aggregate link, which binds where fewer
    NICs serve the node than its GPUs could fill (the network term is the slower of the two). Ninth: log2(nodes /
    2) (0 on one or two nodes): the network term grows by ``fabric_per_doubling`` of itself per doubling, a fabric
    that slows as a job spans more of it (oversubscribed spine or dragonfly global links, congestion, adaptive
    routing); measured per system, e.g. nccl-tests send/recv at 40 GB/s between two H100 nodes and 15-25 GB/s in a
    ring over ten of the same nodes."""
    terms = layout_terms(op, ranks, nodes)
    n = np.maximum(np.asarray(ranks, dtype=np.float64), 1.0)
    g = np.maximum(n / np.maximum(np.asarray(nodes, dtype=np.float64), 1.0), 1.0)
    pair = np.zeros(len(terms))
    if bridged:
        pair = np.where(g <= 2.0, terms[:, 3], 0.0)
        terms[:, 3] = terms[:, 3] - pair
    collective = np.isin(np.asarray(op, dtype=object), LAYOUT_COLLECTIVES)
    doublings = np.log2(np.maximum(np.asarray(nodes, dtype=np.float64), 2.0) / 2.0)
    return np.column_stack([terms, pair, np.where(collective, g, 1.0) * terms[:, 4], doublings])


def layout_log_time(log_params: np.ndarray, terms: np.ndarray, size: np.ndarray) -> np.ndarray:
    """ln time (s) of the layout model: ``t = bw + lat * (bw / lat)^(1 - 1/w)`` (``w = 1``: alpha + beta s),
    the same knee as the sigmoid busbw curve; ``terms`` as :func:`layout_fit_terms` gives them (6 columns, as
    :func:`layout_terms`: no bridged pair)."""
    p = np.exp(np.asarray(log_params, dtype=np.float64))
    log_lat = np.log(terms[:, :3] @ p[:3] * 1e-6)
    per_byte = terms[:, 3:6] @ p[3:6]
    if terms.shape[1] > 6:
        per_byte = per_byte + terms[:, 6] * p[7]
    if terms.shape[1] > 7:  # the network: the slower of each GPU's NIC share and the node's aggregate link
        per_byte = per_byte + np.maximum(terms[:, 7] * p[8] - terms[:, 4] * p[4], 0.0)
    if terms.shape[1] > 8 and len(p) > 9:  # the fabric's congestion: that network time grows per doubling of nodes
        network = np.maximum(terms[:, 7] * p[8], terms[:, 4] * p[4]) if terms.shape[1] > 7 else terms[:, 4] * p[4]
        per_byte = per_byte + network * terms[:, 8] * p[9]
    log_bw = np.log(per_byte) + np.log(size)
    return np.logaddexp(log_bw, log_lat + (1.0 - 1.0 / p[6]) * (log_bw - log_lat))


def pair_link_factor(catalog: Catalog, system: str) -> float:
    """``intra_bw / bridge`` of a system of PCIe cards bridged in pairs (:func:`hybrid.hardware.device.pair_bridge_bw`),
    1 for every other system: the layout model's intra-node bandwidth is the node's (a ring over more than 2 GPUs
    crosses PCIe between pairs), and a pair's bytes cost that fraction of it. Catalog values, nothing fitted."""
    from hybrid.hardware.device import pair_bridge_bw
    from hybrid.ops.roofline import resolve_system

    sysobj = resolve_system(catalog, system)
    bridge = pair_bridge_bw(sysobj, catalog.system_device(sysobj, missing_ok=True))
    return float(sysobj.intra_bw / bridge) if bridge > 0 else 1.0


def layout_prior(catalog: Catalog, system: str) -> np.ndarray:
    """Catalog values of the layout-model parameters (ln), the prior centre of the fit."""
    from hybrid.ops.roofline import resolve_system

    sysobj = resolve_system(catalog, system)
    known = catalog.resolve_device(sysobj.device, missing_ok=True) is not None
    mem_bw = catalog.device(sysobj.device).mem_bw if known else sysobj.intra_bw * 10
    inter = sysobj.inter_bw if sysobj.inter_bw > 0 else LAYOUT_PRIOR_NIC
    return np.log([LAYOUT_PRIOR_LAT0_US, max(sysobj.intra_latency_us, 0.5), max(sysobj.inter_latency_us, 0.5),
                   1.0 / sysobj.intra_bw, 1.0 / inter, LAYOUT_PRIOR_LOCAL_FRACTION / mem_bw, 1.0,
                   pair_link_factor(catalog, system) / sysobj.intra_bw,
                   1.0 / (max(sysobj.gpus_per_node, 1) * inter),  # every GPU's NIC share at once
                   LAYOUT_PRIOR_FABRIC_SHARE])


def fit_layout_model(terms: np.ndarray, size: np.ndarray, time_s: np.ndarray, layout_id: np.ndarray,
                     prior: np.ndarray) -> tuple[np.ndarray, float]:
    """Robust least squares on ln time, each layout weighted equally, plus the prior; returns (ln params, rmse)."""
    counts = np.bincount(layout_id)
    weight = 1.0 / np.sqrt(counts[layout_id])
    log_t = np.log(time_s)
    sigma = np.asarray(LAYOUT_PRIOR_SIGMA)

    def resid(theta: np.ndarray) -> np.ndarray:
        return np.concatenate([(layout_log_time(theta, terms, size) - log_t) * weight, (theta - prior) / sigma])

    lo, hi = prior - 8.0, prior + 8.0
    lo[6], hi[6] = np.log(W_BOUNDS[0]), np.log(W_BOUNDS[1])
    if len(prior) > 9:  # the fabric term may reach ~22x the network time per doubling from its near-zero prior
        hi[9] = prior[9] + 10.0
    starts = [np.clip(prior, lo + 1e-6, hi - 1e-6)]
    if len(prior) > 8 and terms.shape[1] > 7 and (terms[:, 7] > terms[:, 4]).any():
        # the node's link has no gradient while each GPU's NIC share binds (the prior: every NIC in use), so the fit
        # also starts from a node served by one GPU's NIC share, and keeps the better of the two
        alt = starts[0].copy()
        alt[8] = np.clip(prior[4], lo[8] + 1e-6, hi[8] - 1e-6)
        starts.append(alt)
    if len(prior) > 9 and terms.shape[1] > 8 and (terms[:, 8] > 0).any():
        # likewise the fabric term, whose near-zero prior leaves it no gradient: also start every start from a
        # fabric that adds a third of the network time per doubling of the nodes
        starts += [np.concatenate([x[:9], [np.clip(np.log(LAYOUT_FABRIC_START_SHARE), lo[9] + 1e-6,
                                                   hi[9] - 1e-6)]]) for x in starts]
    # fitting only: predicting a saved model does not import SciPy
    from scipy.optimize import least_squares

    sol = min((least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=LAYOUT_LOSS_SCALE) for x0 in starts),
              key=lambda r: r.cost)
    err = layout_log_time(sol.x, terms, size) - log_t
    return sol.x, float(np.sqrt(np.mean(err**2)))


def _log_time(log_s: np.ndarray, log_b: float, x0: float, log_w: float, log_factor: float) -> np.ndarray:
    """ln time(s) in seconds for the sigmoid busbw model."""
    w = np.exp(log_w)
    # ln busbw = ln B - ln(1 + exp(-(ln s - x0) / w)); logaddexp keeps it finite for tiny s
    log_busbw = log_b - np.logaddexp(0.0, -(log_s - x0) / w)
    return log_s + log_factor - log_busbw


def _effective_factor(op: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    f = bus_factor(op, ranks)
    return np.where(f > 0, f, 1.0)  # single-rank all_reduce: time = size / algbw


def _algorithms(table: pd.DataFrame) -> np.ndarray:
    if "algorithm" not in table.columns:
        return np.full(len(table), "", dtype=object)
    return table["algorithm"].astype("string").fillna("").astype(str).to_numpy(dtype=object)


#: How far from a measured layout's smallest / largest size the sizes :func:`edge_holdouts` holds out reach (16x:
#: four doublings, so the held-out rows reach beyond :attr:`CollectiveSigmoid.SIZE_MARGIN` of what stays in).
EDGE_WINDOW = 16.0


def edge_holdouts(table: pd.DataFrame, window: float = EDGE_WINDOW) -> list[np.ndarray]:
    """Hold-outs of the edge sizes of measured collective layouts, which calibrate the band of rows far beyond a
    curve's measured sizes (``edge`` band): the layouts (system, collective, setting, ranks, nodes) of each
    (system, collective) split into two folds (alternate layouts), and one side of each layout held out per mask:
    the sizes within ``window`` x of its smallest (``low``) or largest (``high``) measured size, where at least
    :data:`MIN_SIZES` distinct sizes stay in the fit, as ``experiments/collectives_accuracy/edge_sizes.py`` scores
    them (one side at a time: a layout measured over 10 doublings keeps 6 sizes, not 2). Two masks, low edges of the
    first fold with high edges of the second and the reverse, so every layout's edges are held out once in two fits.
    Empty for a table without collective rows with sizes and layouts; a mask with nothing to hold out is left out."""
    if not len(table) or not {"op", "size_bytes", "n_ranks"} <= set(table.columns):
        return []
    coll = np.isin(table["op"].astype(str).to_numpy(), list(COLLECTIVE_OPS))
    size = col(table, "size_bytes")
    coll &= np.isfinite(size) & (size > 0) & np.isfinite(col(table, "n_ranks"))
    if not coll.any():
        return []
    sub = table.loc[coll]
    lay, layouts = _layout_codes(sub)
    # alternate layouts of each (system, collective), in order of first appearance
    firsts = pd.DataFrame({"lay": np.arange(len(layouts)), "so": [f"{k[0]}|{k[1]}" for k in layouts]})
    fold = pd.Series(firsts.groupby("so").cumcount().to_numpy() % 2, index=firsts["lay"].to_numpy())
    fold = fold.reindex(lay).to_numpy()
    s = size[coll]
    g = pd.Series(s).groupby(lay)
    lo, hi = g.transform("min").to_numpy(), g.transform("max").to_numpy()
    sides = []
    for edge in (s < lo * window, s > hi / window):
        left = pd.Series(s[~edge]).groupby(lay[~edge]).nunique().reindex(lay).fillna(0).to_numpy()
        sides.append(edge & (left >= MIN_SIZES))
    out = []
    for f in (0, 1):
        held = (sides[0] & (fold == f)) | (sides[1] & (fold != f))
        mask = np.zeros(len(table), dtype=bool)
        mask[np.flatnonzero(coll)[held]] = True
        if mask.any():
            out.append(mask)
    return out


def host_system(catalog: Catalog, system: System) -> bool:
    """Whether a system's "GPUs" are CPU processes (a ``hybrid profile`` bundle's gloo system)."""
    key = catalog.resolve_device(system.device, missing_ok=True)
    return key is not None and catalog.devices[key].kind == "cpu"


def _host_rows(table: pd.DataFrame, catalog: Catalog) -> np.ndarray:
    """Per row, whether its system (or device) is a CPU's (:func:`host_system`); unknown names are not."""
    from hybrid.ops.roofline import resolve_system

    names = _group_key(table)
    host = {}
    for name in pd.unique(names):
        try:
            host[name] = host_system(catalog, resolve_system(catalog, str(name)))
        except InvalidInputError:
            host[name] = False
    return names.map(host).to_numpy(dtype=bool)


def _factorize_rows(frame: pd.DataFrame) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
    """``pd.factorize(pd.MultiIndex.from_frame(frame))`` of a small-key frame (code per row, the distinct rows as
    tuples in order of first appearance; a missing value is a value of its own), ~10x faster through the
    predictor's column-by-column :func:`~hybrid.corrections.predictor.distinct_rows` (the MultiIndex where that
    cannot be exact: text columns holding other objects)."""
    from hybrid.corrections.predictor import distinct_rows

    found = distinct_rows(frame, max_fraction=1.0) if len(frame) else None
    if found is None:
        codes, uniques = pd.factorize(pd.MultiIndex.from_frame(frame))
        return np.asarray(codes, dtype=np.int64), list(uniques)
    first, codes = found
    rows = frame.iloc[first]
    return np.asarray(codes, dtype=np.int64), list(zip(*(rows[c].tolist() for c in frame.columns), strict=True))


def _layout_codes(table: pd.DataFrame, op: np.ndarray | None = None) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
    """(code per row, distinct layouts as tuples): each row's (system, collective, setting, ranks, nodes), the key
    the curves are looked up by, factorised once (:func:`_factorize_rows`); ``op`` replaces the table's collective
    names (the rows' own, by default)."""
    frame = pd.DataFrame({"s": _group_key(table).astype(str).to_numpy(),
                          "o": table["op"].astype(str).to_numpy() if op is None else op,
                          "a": _algorithms(table), "r": col(table, "n_ranks"), "n": col(table, "n_nodes", 1.0)})
    return _factorize_rows(frame)


def _group_key(table: pd.DataFrame) -> pd.Series:
    if "system" in table.columns:
        names = table["system"].astype("string").fillna(table["device"].astype("string"))
    else:
        names = table["device"].astype("string")
    return names.astype(str)


class CollectiveSigmoid(Correction):
    """Per-configuration sigmoid busbw curves with interpolation over rank counts."""

    name = "collective-sigmoid"
    families = ("collective",)
    min_rows = 10

    #: how unmeasured rank/node counts are predicted: "joint" (layout model) or "ratio" (previous rule)
    RANK_MODELS = ("joint", "ratio")

    #: ``method`` names of the two models that answer (per row, see :meth:`predict_with_source`)
    SIGMOID, TRANSFER = "collective-sigmoid", "collective-transfer"

    #: how far beyond its measured message sizes (a factor either way) a (system, collective) curve still counts as
    #: seen for its interval: two doublings; further out the sigmoid's latency floor or bandwidth ceiling is a guess
    SIZE_MARGIN: ClassVar[float] = 4.0

    def __init__(self, rank_model: str = "joint", transfer: bool = False, sibling: bool = True) -> None:
        if rank_model not in self.RANK_MODELS:
            raise InvalidInputError(f"unknown rank_model {rank_model!r}; known: {self.RANK_MODELS}")
        self.rank_model = rank_model
        self.use_transfer = bool(transfer)
        #: price an all-gather / reduce-scatter never measured at a layout from its sibling's curve measured there
        #: (:data:`SIBLING_OPS`; False for a model saved before it existed: it predicts as it did)
        self.borrow_sibling = bool(sibling)
        #: cross-system model for systems / collectives never measured (None: not fitted)
        self.transfer: CollectiveTransfer | None = None
        self.fits: list[SigmoidFit] = []
        #: "system|op|algorithm" -> layout model over all measured layouts of that key
        self.layout_models: dict[str, LayoutFit] = {}
        self.failures: list[dict[str, Any]] = []
        self.dropped_wrong = 0
        #: "system|op" -> (smallest, largest) message size measured, bytes
        self.size_range: dict[str, tuple[float, float]] = {}
        #: (system, op) -> algorithm used for rows whose algorithm is missing or unseen: the fastest one
        self.default_algorithm: dict[str, str] = {}
        self._fitted = False

    # ------------------------------------------------------------------ fitting
    def fit(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> CollectiveSigmoid:
        mask = family_mask(baseline, self.families)
        sub = table.loc[mask]
        if len(sub) == 0:
            raise InvalidInputError("collective-sigmoid: no collective rows to fit on")
        if "time_us" not in sub.columns:
            raise InvalidInputError("collective-sigmoid: training table has no 'time_us' column")
        keep = np.ones(len(sub), dtype=bool)
        if "wrong" in sub.columns:
            keep &= ~(col(sub, "wrong", 0.0) > 0)
        self.dropped_wrong = int((~keep).sum())
        t = col(sub, "time_us")
        bad = ~(np.isfinite(t) & (t > 0))
        if (bad & keep).any():
            i = int(np.flatnonzero(bad & keep)[0])
            raise InvalidInputError(f"collective-sigmoid: time_us must be positive, got {sub['time_us'].iloc[i]!r} "
                                    f"{at_row(sub.index, i)}")
        sub = sub.loc[keep]
        frame = pd.DataFrame({
            "system": _group_key(sub).to_numpy(), "op": sub["op"].astype(str).to_numpy(),
            "algorithm": _algorithms(sub),
            "n_ranks": col(sub, "n_ranks").astype(np.int64), "n_nodes": col(sub, "n_nodes", 1.0).astype(np.int64),
            "size": col(sub, "size_bytes"), "time_s": col(sub, "time_us") * 1e-6,
        })
        # one point per size: the median over repeats, in-place/out-of-place and environment variants
        keys = ["system", "op", "algorithm", "n_ranks", "n_nodes"]
        frame = frame.groupby([*keys, "size"], sort=True, as_index=False)["time_s"].median()
        self.fits, self.failures = [], []
        for (system, op, algo, ranks, nodes), g in frame.groupby(keys, sort=True):
            fit = self._fit_one(str(system), str(op), str(algo), int(ranks), int(nodes), g["size"].to_numpy(),
                                g["time_s"].to_numpy())
            if isinstance(fit, SigmoidFit):
                self.fits.append(fit)
            else:
                self.failures.append({"system": system, "op": op, "algorithm": algo, "n_ranks": int(ranks),
                                      "n_nodes": int(nodes), "reason": fit})
        # the message sizes measured per (system, collective): beyond them the curves extrapolate
        rng = frame.groupby(["system", "op"], sort=True)["size"].agg(["min", "max"])
        self.size_range = {f"{sy}|{op}": (float(r["min"]), float(r["max"])) for (sy, op), r in rng.iterrows()}
        self.default_algorithm = self._fastest_algorithms()
        self.layout_models = self._fit_layout_models(frame, keys, catalog) if self.rank_model == "joint" else {}
        self.transfer = self._fit_transfer(frame, catalog) if self.use_transfer else None
        self._fitted = True
        return self

    def _fit_transfer(self, frame: pd.DataFrame, catalog: Catalog) -> CollectiveTransfer | None:
        """The cross-system model on the fastest setting of every (system, collective) whose system the catalog
        describes (rows keyed by a name the catalog cannot resolve are left out), GPU systems only: processes of a
        CPU exchanging through gloo and shared memory (a ``hybrid profile`` bundle's ``*-gloo`` system, hundreds of
        microseconds a step) are no GPU fabric, and their catalog text falls in the PCIe class, which they made
        price a 16 KiB all-reduce on four PCIe GPUs at about 2 ms."""
        from hybrid.ops.roofline import resolve_system

        best = (frame["system"] + "|" + frame["op"]).map(self.default_algorithm)
        sub = frame[(frame["algorithm"] == best.fillna("")).to_numpy()]
        known = {}
        for name in pd.unique(sub["system"]):
            try:
                known[name] = not host_system(catalog, resolve_system(catalog, str(name)))
            except InvalidInputError:
                known[name] = False
        sub = sub[sub["system"].map(known).to_numpy(dtype=bool)]
        if len(sub) < self.min_rows:
            return None
        try:
            return CollectiveTransfer().fit(sub.reset_index(drop=True), catalog)
        except (ValueError, np.linalg.LinAlgError) as exc:
            self.failures.append({"system": "*", "op": "*", "algorithm": "", "n_ranks": 0, "n_nodes": 0,
                                  "reason": f"transfer model: {exc}"})
            return None

    def _fit_layout_models(self, frame: pd.DataFrame, keys: list[str], catalog: Catalog) -> dict[str, LayoutFit]:
        out: dict[str, LayoutFit] = {}
        for (system, op, algo), g in frame.groupby(keys[:3], sort=True):
            factor = pair_link_factor(catalog, str(system))
            terms = layout_fit_terms(g["op"].to_numpy(), g["n_ranks"].to_numpy(), g["n_nodes"].to_numpy(),
                                     factor != 1.0)
            lay = g["n_ranks"].astype(str) + "/" + g["n_nodes"].astype(str)
            layout_id = pd.factorize(lay)[0]
            try:
                theta, rmse = fit_layout_model(terms, g["size"].to_numpy(dtype=np.float64), g["time_s"].to_numpy(),
                                               layout_id, layout_prior(catalog, str(system)))
            except (ValueError, np.linalg.LinAlgError) as exc:  # recorded, the "ratio" rule is used instead
                self.failures.append({"system": system, "op": op, "algorithm": algo, "n_ranks": 0, "n_nodes": 0,
                                      "reason": f"layout model: {exc}"})
                continue
            layouts = sorted({(int(r), int(n)) for r, n in zip(g["n_ranks"], g["n_nodes"], strict=True)})
            out[f"{system}|{op}|{algo}"] = LayoutFit(str(system), str(op), str(algo), [float(v) for v in theta],
                                                     [list(x) for x in layouts], len(g), rmse, factor)
        return out

    def _fastest_algorithms(self) -> dict[str, str]:
        """Per (system, op): the algorithm whose curves reach the highest median peak bus bandwidth."""
        best: dict[str, tuple[float, str]] = {}
        by: dict[tuple[str, str, str], list[float]] = {}
        for f in self.fits:
            by.setdefault((f.system, f.op, f.algorithm), []).append(f.log_b)
        for (system, op, algo), values in by.items():
            score = float(np.median(values))
            key = f"{system}|{op}"
            if key not in best or score > best[key][0]:
                best[key] = (score, algo)
        return {k: v[1] for k, v in best.items()}

    def _algorithm_for(self, system: str, op: str, algorithm: str) -> str:
        known = {f.algorithm for f in self.fits if f.system == system and f.op == op}
        return algorithm if algorithm in known else self.default_algorithm.get(f"{system}|{op}", "")

    @staticmethod
    def _fit_one(system: str, op: str, algo: str, ranks: int, nodes: int, size: np.ndarray, time_s: np.ndarray) -> SigmoidFit | str:
        from scipy.optimize import OptimizeWarning, curve_fit

        if len(size) < MIN_SIZES:
            return f"only {len(size)} message sizes (need {MIN_SIZES})"
        factor = float(_effective_factor(np.array([op]), np.array([ranks]))[0])
        log_s, log_t = np.log(size), np.log(time_s)
        busbw = size * factor / time_s
        b0 = float(np.max(busbw))
        half = np.flatnonzero(busbw >= 0.5 * b0)
        x0_0 = float(log_s[half[0]]) if len(half) else float(np.median(log_s))
        lo = [np.log(B_BOUNDS_GBPS[0] * 1e9), X0_BOUNDS[0], np.log(W_BOUNDS[0])]
        hi = [np.log(B_BOUNDS_GBPS[1] * 1e9), X0_BOUNDS[1], np.log(W_BOUNDS[1])]
        p0 = np.clip([np.log(b0 * 1.05), x0_0, 0.0], np.array(lo) + 1e-6, np.array(hi) - 1e-6)
        lf = float(np.log(factor))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OptimizeWarning)
                popt, _ = curve_fit(lambda x, a, b, c: _log_time(x, a, b, c, lf), log_s, log_t, p0=p0,
                                    bounds=(lo, hi), maxfev=4000)
        except (RuntimeError, ValueError) as exc:
            return f"curve_fit failed: {exc}"
        resid = _log_time(log_s, *popt, lf) - log_t
        if not np.all(np.isfinite(resid)):
            return "curve_fit returned non-finite parameters"
        return SigmoidFit(system, op, algo, ranks, nodes, float(popt[0]), float(popt[1]), float(popt[2]), len(size),
                          float(np.sqrt(np.mean(resid**2))), float(np.min(size)), float(np.max(size)))

    # ------------------------------------------------------------------ prediction
    def _ladder(self, system: str, op: str, algorithm: str, ranks: float, nodes: float) -> list[SigmoidFit]:
        """Fits of the same (system, collective, setting, GPUs per node), sorted by rank count."""
        algorithm = self._algorithm_for(system, op, algorithm)
        gpn = ranks / max(nodes, 1.0)
        return sorted((f for f in self.fits if f.system == system and f.op == op and f.algorithm == algorithm
                       and np.isclose(f.gpn, gpn)), key=lambda f: f.n_ranks)

    @staticmethod
    def _curve_us(fit: SigmoidFit, size: np.ndarray) -> np.ndarray:
        factor = np.log(_effective_factor(np.array([fit.op]), np.array([fit.n_ranks]))[0])
        return np.exp(_log_time(np.log(size), fit.log_b, fit.x0, fit.log_w, factor)) * 1e6

    def predict(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        return self.predict_with_source(table, baseline, catalog)[0]

    def predict_with_source(self, table: pd.DataFrame, baseline: pd.DataFrame,
                            catalog: Catalog) -> tuple[np.ndarray, np.ndarray]:
        """(time_us, source) per row: the per-system curves where the system and collective were measured
        (source ``collective-sigmoid``), else the transfer model (``collective-transfer``); NaN and source
        ``""`` where neither applies (not a collective, or no transfer model). Only the collective rows are
        worked on (a table of every family, mostly kernels, spent most of this method keying rows it never prices:
        0.47 of 1.7 s on 200,000 distinct rows of which ~3% collectives, ``experiments/corrected_throughput``)."""
        self._check_fitted()
        mask = family_mask(baseline, self.families)
        if not mask.all():
            out, source = np.full(len(table), np.nan), np.full(len(table), "", dtype=object)
            if mask.any():
                out[mask], source[mask] = self.predict_with_source(table.loc[mask], baseline.loc[mask], catalog)
            return out, source
        out = self._predict_measured(table, baseline, catalog)
        out = np.where(np.isfinite(out), np.maximum(out, self.floor_us(table, baseline, catalog)), out)  # the links
        source = np.where(np.isfinite(out), self.SIGMOID, "").astype(object)
        sibling = self.sibling_ops(table)
        for sib in np.unique(sibling[sibling != ""]):  # at most two: all_gather, reduce_scatter
            source[(sibling == sib) & np.isfinite(out)] = self.sibling_method(str(sib))
        if (beyond := self.beyond_curves(table) & np.isfinite(out)).any():  # anchored at the curve's edge
            for sib in np.unique(sibling[beyond]):
                source[beyond & (sibling == sib)] = self.anchored_method(str(sib))
        mask = family_mask(baseline, self.families)
        todo = mask & ~np.isfinite(out)
        if todo.any() and self.transfer is not None and self.transfer.fitted:
            # a CPU system's collectives are not what the GPU fabrics' model describes: alpha-beta prices them
            # (where only those are left there is nothing to transfer: the model's arrays were empty, and crashed)
            todo &= ~_host_rows(table, catalog)
            if todo.any():
                sub = table.loc[todo]
                out[todo] = self.transfer.predict_us(catalog, _group_key(sub).to_numpy(),
                                                     sub["op"].astype(str).to_numpy(), col(sub, "n_ranks"),
                                                     col(sub, "n_nodes", 1.0), col(sub, "size_bytes"))
                source[todo & np.isfinite(out)] = self.TRANSFER
        return out, source

    def _predict_measured(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """The measured systems' curves, each only within the message sizes it was fitted on: beyond them the time
        is anchored at the curve's nearest measured size (:meth:`_anchored`). Rows no curve measured at their
        layout prices (the layout model, the ratio rule) and curves saved before their sizes were recorded keep the
        rule before: below the smallest message measured for a (system, collective) the time keeps that size's
        ratio to the alpha-beta roofline, at most that size's time. (The curves themselves are only known where
        measured: a knee steeper than a latency floor, w < 1, fitted to 32 MiB and up, had a 1 KiB all-reduce over
        10 nodes take 20 s, slower than the 32 MiB one; an 8-GPU send/recv curve fitted from 128 MiB up put 32 MiB
        at 8.9x its measured time.)"""
        out = self._predict_curves(table, baseline, catalog)
        if "size_bytes" not in table.columns:
            return out
        size = col(table, "size_bytes")
        lo, hi = self._curve_span(table)
        edge = np.clip(size, lo, hi)  # NaN where no curve measured at the row's layout prices it
        beyond = np.isfinite(out) & np.isfinite(edge) & (edge != size)
        if beyond.any():
            out[beyond] = self._anchored(table.loc[beyond], baseline.loc[beyond], catalog, edge[beyond])
        if not self.size_range:
            return out
        # a row priced by its sibling's curve keeps that curve's smallest size
        sibling = self.sibling_ops(table)
        op = np.where(sibling != "", sibling, table["op"].astype(str).to_numpy(dtype=object))
        keys = (_group_key(table).astype(str) + "|" + pd.Series(op, index=table.index).astype(str)).to_numpy()
        codes, uniq = pd.factorize(keys)
        smallest = np.array([self.size_range.get(k, (0.0, np.inf))[0] for k in uniq])[codes]
        below = np.isfinite(out) & (size < smallest) & ~np.isfinite(lo)
        if not below.any():
            return out
        from hybrid.ops.roofline import roofline

        at = table.loc[below].copy()
        at["size_bytes"] = smallest[below]
        base_at = roofline(at, catalog)
        t_at = self._predict_curves(at, base_at, catalog)
        roof = baseline["time_us"].to_numpy(dtype=np.float64)[below]
        carried = roof * t_at / base_at["time_us"].to_numpy(dtype=np.float64)
        out[below] = np.where(np.isfinite(t_at), np.minimum(carried, t_at), out[below])
        return out

    def _anchored(self, rows: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog, edge: np.ndarray) -> np.ndarray:
        """Time (us) of ``rows`` whose message size lies beyond the sizes their curve was fitted on, ``edge`` the
        nearest one measured: the curve's time there, scaled by how the physical models say the time changes from
        that size to the row's. The models are the alpha-beta roofline (the catalog's link rates and latencies) and,
        where the transfer model is fitted (not for a CPU system's processes), the transfer model (fitted latencies
        and knees of every measured system): the ratio is the geometric mean of the two. Never faster than the edge
        above it, nor slower below it. On held-out edge sizes of the public layouts the curve extrapolated was 3.6% /
        5.9% off (all rows, below / above) and 41.9% / 13.5% (mean over systems); this rule 3.3% / 5.2% and 18.3% /
        11.0%, the alpha-beta ratio alone 2.6% / 4.5% and 23.2% / 13.1%, the transfer model's alone 5.9% / 6.5% and
        18.8% / 9.9% (``experiments/collectives_accuracy/edge_sizes.py``)."""
        from hybrid.ops.roofline import roofline

        at = rows.copy()
        at["size_bytes"] = edge
        base_at = roofline(at, catalog)
        t_at = self._predict_curves(at, base_at, catalog)
        log_ratio = np.log(baseline["time_us"].to_numpy(dtype=np.float64) / base_at["time_us"].to_numpy(dtype=np.float64))
        if self.transfer is not None and self.transfer.fitted:
            gpu = ~_host_rows(rows, catalog)
            if gpu.any():
                sub = rows.loc[gpu]
                args = (catalog, _group_key(sub).to_numpy(), sub["op"].astype(str).to_numpy(), col(sub, "n_ranks"),
                        col(sub, "n_nodes", 1.0))
                tr = np.log(self.transfer.predict_us(*args, col(sub, "size_bytes"))
                            / self.transfer.predict_us(*args, edge[gpu]))
                log_ratio[gpu] = np.where(np.isfinite(tr), 0.5 * (log_ratio[gpu] + tr), log_ratio[gpu])
        pred = t_at * np.exp(log_ratio)
        size = col(rows, "size_bytes")
        return np.where(size < edge, np.minimum(pred, t_at), np.maximum(pred, t_at))

    def _curve_span(self, table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Per row, the (smallest, largest) message size of the curve measured at its layout that prices it (its own,
        or its sibling's: :meth:`_sibling_fit`); NaN where no such curve prices it (another layout, the layout
        model, an unseen system) or the curve was saved before its sizes were recorded. Worked out once per distinct
        (system, collective, setting, ranks, nodes)."""
        lo, hi = np.full(len(table), np.nan), np.full(len(table), np.nan)
        if not self.fits or not len(table) or "op" not in table.columns:
            return lo, hi
        codes, uniques = _layout_codes(table)
        spans = np.full((len(uniques) + 1, 2), np.nan)
        for i, (s, o, a, r, n) in enumerate(uniques):
            if not (np.isfinite(r) and np.isfinite(n)) or o not in COLLECTIVE_OPS:
                continue
            exact = [f for f in self._ladder(str(s), str(o), str(a), float(r), float(n)) if f.n_ranks == r]
            fit = exact[0] if exact else self._sibling_fit(str(s), str(o), str(a), float(r), float(n))
            if fit is not None:
                spans[i] = (fit.size_min, fit.size_max)
        per = spans[np.where(codes >= 0, codes, len(uniques))]
        return per[:, 0], per[:, 1]

    def beyond_curves(self, table: pd.DataFrame) -> np.ndarray:
        """Per row, whether its message size lies beyond the sizes the curve measured at its layout was fitted on
        (:meth:`_curve_span`): that curve does not answer it, the rule anchored at its nearest measured size does
        (:meth:`_anchored`; ``method`` :meth:`anchored_method`)."""
        if "size_bytes" not in table.columns:
            return np.zeros(len(table), dtype=bool)
        lo, hi = self._curve_span(table)
        size = col(table, "size_bytes")
        return (size < lo) | (size > hi)

    @classmethod
    def anchored_method(cls, sibling: str = "") -> str:
        """``method`` of a row beyond its curve's measured sizes: ``collective-sigmoid (edge-anchored)``, or
        ``collective-sigmoid (all_gather curve, edge-anchored)`` where the sibling's curve is the one anchored (its
        interval bands are the ``collective-sigmoid`` ones, as :meth:`sibling_method`'s)."""
        return f"{cls.SIGMOID} ({sibling + ' curve, ' if sibling else ''}edge-anchored)"

    def _predict_curves(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        out = np.full(len(table), np.nan)
        mask = family_mask(baseline, self.families)
        if not mask.any() or not self.fits:
            return out
        sub = table.loc[mask]
        system = _group_key(sub).to_numpy()
        op = sub["op"].astype(str).to_numpy()
        algo = _algorithms(sub)
        ranks = col(sub, "n_ranks")
        nodes = col(sub, "n_nodes", 1.0)
        size = col(sub, "size_bytes")
        ab = baseline.loc[mask, "time_us"].to_numpy(dtype=np.float64)
        res = np.full(len(sub), np.nan)
        configs = pd.DataFrame({"s": system, "o": op, "a": algo, "r": ranks, "n": nodes})
        codes, uniques = _factorize_rows(configs)
        for ci, (s, o, a, r, n) in enumerate(uniques):
            rows = codes == ci
            ladder = self._ladder(str(s), str(o), str(a), float(r), float(n))
            exact = [f for f in ladder if f.n_ranks == r]
            if exact:
                res[rows] = self._curve_us(exact[0], size[rows])
                continue
            sibling = self._sibling_fit(str(s), str(o), str(a), float(r), float(n))
            if sibling is not None:  # the same bytes per rank over the same rings: the sibling's time
                res[rows] = self._curve_us(sibling, size[rows])
                continue
            lm = self._layout_model(str(s), str(o), str(a))
            if lm is not None:
                res[rows] = self._layout_predict(lm, str(o), float(r), float(n), size[rows])
                continue
            below = [f for f in ladder if f.n_ranks < r]
            above = [f for f in ladder if f.n_ranks > r]
            anchors = ([below[-1]] if below else []) + ([above[0]] if above else [])
            if not anchors:
                nearest = self._nearest_any_layout(str(s), str(o), str(a), float(r))
                if nearest is None:
                    continue
                anchors = [nearest]
            # log(sigmoid / alpha-beta) at each anchor, interpolated in log2(ranks) (held constant outside)
            ratios = [np.log(self._curve_us(f, size[rows])) - np.log(self._alpha_beta(sub.loc[rows], catalog, f))
                      for f in anchors]
            if len(anchors) == 2:
                x0, x1 = np.log2(anchors[0].n_ranks), np.log2(anchors[1].n_ranks)
                wt = (np.log2(r) - x0) / (x1 - x0)
                log_ratio = (1 - wt) * ratios[0] + wt * ratios[1]
            else:
                log_ratio = ratios[0]
            res[rows] = ab[rows] * np.exp(log_ratio)
        out[mask] = res
        return out

    def _layout_model(self, system: str, op: str, algorithm: str) -> LayoutFit | None:
        if self.rank_model != "joint" or not self.layout_models:
            return None
        return self.layout_models.get(f"{system}|{op}|{self._algorithm_for(system, op, algorithm)}")

    @staticmethod
    def _layout_us(lm: LayoutFit, op: str, ranks: float, nodes: float, size: np.ndarray) -> np.ndarray:
        terms = layout_fit_terms(np.full(len(size), op, dtype=object), np.full(len(size), ranks),
                                 np.full(len(size), nodes), lm.pair_factor != 1.0)
        return np.exp(layout_log_time(np.asarray(lm.log_params), terms, size)) * 1e6

    def _layout_extrapolates(self, lm: LayoutFit, ranks: float) -> bool:
        measured = [r for r, _ in lm.layouts]
        return not (min(measured) < ranks < max(measured))

    def _layout_predict(self, lm: LayoutFit, op: str, ranks: float, nodes: float, size: np.ndarray) -> np.ndarray:
        """Layout model at an unmeasured layout; beyond the measured rank counts times the nearest measured
        layout's residual (its sigmoid over the layout model at the same sizes), held constant."""
        pred = self._layout_us(lm, op, ranks, nodes, size)
        if not self._layout_extrapolates(lm, ranks):
            return pred
        same = [f for f in self.fits if f.system == lm.system and f.op == lm.op and f.algorithm == lm.algorithm]
        if not same:
            return pred
        near = min(same, key=lambda f: (abs(np.log2(f.n_ranks) - np.log2(ranks)), abs(f.n_nodes - nodes)))
        resid = np.log(self._curve_us(near, size)) - np.log(self._layout_us(lm, op, near.n_ranks, near.n_nodes, size))
        return pred * np.exp(resid)

    def _nearest_any_layout(self, system: str, op: str, algorithm: str, ranks: float) -> SigmoidFit | None:
        algorithm = self._algorithm_for(system, op, algorithm)
        same = [f for f in self.fits if f.system == system and f.op == op and f.algorithm == algorithm]
        if not same:
            return None
        return min(same, key=lambda f: (abs(np.log2(f.n_ranks) - np.log2(ranks)), f.n_nodes))

    def _sibling_fit(self, system: str, op: str, algorithm: str, ranks: float, nodes: float) -> SigmoidFit | None:
        """The sibling's curve (:data:`SIBLING_OPS`) that prices ``op`` at a layout where ``op`` was never measured
        in any setting on ``system``: the sibling's, at the same layout, in the setting that prices the sibling
        (:meth:`_algorithm_for`); None where ``op`` has no sibling, was measured at the layout, or the sibling was
        not, or for a model saved before siblings priced each other."""
        sib = SIBLING_OPS.get(op)
        if sib is None or not self.borrow_sibling:
            return None
        if any(f.system == system and f.op == op and f.n_ranks == ranks and f.n_nodes == nodes for f in self.fits):
            return None
        algo = self._algorithm_for(system, sib, algorithm)
        return next((f for f in self.fits if f.system == system and f.op == sib and f.algorithm == algo
                     and f.n_ranks == ranks and f.n_nodes == nodes), None)

    def sibling_ops(self, table: pd.DataFrame) -> np.ndarray:
        """Per row, the collective whose curve prices it (``all_gather`` for a reduce-scatter never measured at
        its layout where an all-gather was, and the reverse: :meth:`_sibling_fit`), ``""`` elsewhere. Worked out
        once per distinct (system, collective, setting, ranks, nodes), not per row."""
        out = np.full(len(table), "", dtype=object)
        if not self.borrow_sibling or not self.fits or not len(table) or "op" not in table.columns:
            return out
        op = table["op"].astype(str).to_numpy(dtype=object)
        cand = np.isin(op, list(SIBLING_OPS))
        if not cand.any():
            return out
        sub = table.loc[cand]
        codes, uniques = _layout_codes(sub, op[cand])
        per = np.array([(f.op if (f := self._sibling_fit(str(s), str(o), str(a), float(r), float(n))) is not None
                         else "") for s, o, a, r, n in uniques] + [""], dtype=object)
        out[cand] = per[np.where(codes >= 0, codes, len(uniques))]
        return out

    @classmethod
    def sibling_method(cls, sibling: str) -> str:
        """``method`` of a row priced from ``sibling``'s curve, e.g. ``collective-sigmoid (all_gather curve)``
        (its interval band is the ``collective-sigmoid`` one: :class:`~hybrid.corrections.intervals.IntervalCalibration`
        reads a qualified method's bands from its base model where it has none of its own)."""
        return f"{cls.SIGMOID} ({sibling} curve)"

    @staticmethod
    def _alpha_beta(rows: pd.DataFrame, catalog: Catalog, fit: SigmoidFit) -> np.ndarray:
        from hybrid.ops.roofline import roofline

        alt = rows.copy()
        alt["n_ranks"] = fit.n_ranks
        alt["n_nodes"] = fit.n_nodes
        return roofline(alt, catalog)["time_us"].to_numpy(dtype=np.float64)

    def outside_sizes(self, table: pd.DataFrame) -> np.ndarray:
        """Per row, whether its message size lies more than :attr:`SIZE_MARGIN` x beyond the sizes measured by the
        curve that prices it (the curve measured at its layout, :meth:`_curve_span`; for a row no such curve prices,
        or a curve saved before its sizes were recorded, the sizes measured for its (system, collective)): a time
        extrapolated there (a 1 KiB all-reduce predicted from 32 MiB and up) is as uncertain as an unseen system, so
        its interval band is the unseen one; so is a collective never measured on a system whose other collectives
        were. False on systems never measured (unseen already) and for models saved before the ranges were
        recorded."""
        out = np.zeros(len(table), dtype=bool)
        if not self.size_range or "size_bytes" not in table.columns:
            return out
        systems = _group_key(table).astype(str)
        keys = (systems + "|" + table["op"].astype(str)).to_numpy()
        codes, uniq = pd.factorize(keys)
        measured = {k.split("|")[0] for k in self.size_range}
        # a collective never measured on a system whose others were: priced from them, not from its own sizes
        never = np.array([k not in self.size_range and k.split("|")[0] in measured for k in uniq])
        lo = np.array([self.size_range.get(k, (0.0, np.inf))[0] for k in uniq])
        hi = np.array([self.size_range.get(k, (0.0, np.inf))[1] for k in uniq])
        size = col(table, "size_bytes")
        c_lo, c_hi = self._curve_span(table)
        lo = np.where(np.isfinite(c_lo), c_lo, lo[codes])
        hi = np.where(np.isfinite(c_hi), c_hi, hi[codes])
        return never[codes] | (size < lo / self.SIZE_MARGIN) | (size > hi * self.SIZE_MARGIN)

    def edge_extrapolated(self, table: pd.DataFrame) -> np.ndarray:
        """Per row, whether it is extrapolated (:meth:`extrapolated`) only because its message size lies more than
        :attr:`SIZE_MARGIN` x beyond the sizes of the curve measured at its layout (:meth:`_curve_span`; a collective
        measured on its system, at a layout measured in the setting that prices it): anchored at that curve's nearest
        measured size (:meth:`_anchored`). Such rows get the ``edge`` interval band where a calibration has one
        (residuals of held-out edge sizes, :func:`edge_holdouts`), else the unseen band."""
        if not self.size_range or "size_bytes" not in table.columns or not len(table):
            return np.zeros(len(table), dtype=bool)
        lo, _ = self._curve_span(table)
        keys = (_group_key(table).astype(str) + "|" + table["op"].astype(str)).to_numpy()
        codes, uniq = pd.factorize(keys)
        measured = np.array([k in self.size_range for k in uniq], dtype=bool)[codes]
        return self.outside_sizes(table) & np.isfinite(lo) & measured & ~self.unmeasured_layouts(table)

    def floor_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Per row, the lowest time predicted (us; the interval's low end stops there too): at a layout no log
        measured (:meth:`unmeasured_layouts`), the alpha-beta bandwidth term over :data:`LINK_BEAT_MAX`; 0 elsewhere
        (measured layouts keep their curves, whatever the catalog's link rate says)."""
        out = np.zeros(len(table))
        if not len(table) or "memory_us" not in baseline.columns:
            return out
        across = self.unmeasured_layouts(table)
        link = baseline["memory_us"].to_numpy(dtype=np.float64) / LINK_BEAT_MAX
        return np.where(across & np.isfinite(link), link, 0.0)

    def _layout_keys(self, table: pd.DataFrame) -> tuple[np.ndarray, list[tuple[str, str, str, int, int]]]:
        """(code per row, its distinct key): (system, collective, the setting that prices it (:meth:`_algorithm_for`),
        ranks, nodes), a layout not given as -1 ranks / nodes (never measured). What the layout checks look up, once
        per distinct key rather than per row."""
        codes, uniques = _layout_codes(table)
        keys = [(str(s), str(o), self._algorithm_for(str(s), str(o), str(a)), int(r) if np.isfinite(r) else -1,
                 int(n) if np.isfinite(n) else -1) for s, o, a, r, n in uniques]
        return codes, keys

    def unmeasured_layouts(self, table: pd.DataFrame) -> np.ndarray:
        """Per row, whether no curve was measured at its (ranks, nodes) layout for its (system, collective) in the
        setting it is priced with (its ``algorithm``, or the fastest measured one where it names none or an
        unmeasured one: :meth:`_algorithm_for`). Such a row is priced by the layout model, the ratio rule or another
        layout's curve, i.e. interpolated or extrapolated across layouts (held-out rank counts: 4.8% / 7.2% geomean,
        p90 60% and more, against 2.6% for held-out sizes of measured layouts), so its interval band is the unseen
        one, as is a layout measured only in settings other than the one that prices the row. False on systems
        never measured (unseen already) and for rows of other families."""
        out = np.zeros(len(table), dtype=bool)
        if not self.fits or not len(table):
            return out
        systems = {f.system for f in self.fits}
        measured = {(f.system, f.op, f.algorithm, f.n_ranks, f.n_nodes) for f in self.fits}
        codes, keys = self._layout_keys(table)
        per = np.array([k[0] in systems and k[1] in COLLECTIVE_OPS and k not in measured for k in keys], dtype=bool)
        out[codes >= 0] = per[codes[codes >= 0]]
        return out

    def extrapolation_reason(self, table: pd.DataFrame) -> list[str]:
        """Per row, why its prediction is extrapolated ('' where it is read off a curve measured for it): the
        system never measured, the collective never measured there, a message size beyond the measured ones, the
        layout never measured, or measured only in settings other than the one that prices the row; an all-gather /
        reduce-scatter never measured at its layout where its sibling was says it is priced from the sibling's
        curve (:meth:`sibling_ops`). Worked out once per distinct (system, collective, setting, layout), not per
        row."""
        if not self.fits or not len(table):
            return [""] * len(table)
        systems = {f.system for f in self.fits}
        pairs = {(f.system, f.op) for f in self.fits}
        layouts: dict[tuple[str, str, int, int], set[str]] = {}
        for f in self.fits:
            layouts.setdefault((f.system, f.op, f.n_ranks, f.n_nodes), set()).add(f.algorithm)
        codes, keys = self._layout_keys(table)
        # layouts measured but left without a curve (too few message sizes, a failed fit: a truncated log), which
        # are priced across layouts all the same, but were not "never measured"
        unfitted = self.unfitted_layouts()
        # what answers a system or collective never measured: the transfer model where one was fitted, else the
        # alpha-beta estimate (`--no-collective-transfer`, or too few systems to fit one; the row's method says so)
        priced = ("the transfer model prices it" if self.transfer is not None and self.transfer.fitted
                  else "the alpha-beta estimate prices it")

        def why(k: tuple[str, str, str, int, int]) -> str:
            s, o, used, r, n = k
            if o not in COLLECTIVE_OPS:
                return ""
            if s not in systems:
                return f"no log of system {s}: {priced}"
            if (s, o) not in pairs:
                return f"no {o} was measured on {s}: {priced}"
            measured = layouts.get((s, o, r, n), set())
            if r < 0 or n < 0:
                return "the row gives no ranks / nodes: no measured layout prices it"
            if not measured:
                if (reason := unfitted.get((s, o, r, n))) is not None:
                    return (f"{r} ranks on {n} node(s) were measured for {o} on {s} but gave no curve: {reason}; "
                            "priced across layouts")
                return f"{r} ranks on {n} node(s) were never measured for {o} on {s}: priced across layouts"
            if used not in measured:
                # (no trailing "extrapolated": `predict collective` prints it as the value of `extrapolated:`)
                return (f"this layout was measured only with {', '.join(sorted(measured))}, not with {used} that "
                        "prices the row (the fastest setting measured on the system)")
            return ""

        per = np.array([why(k) for k in keys] + [""], dtype=object)
        out = per[np.where(codes >= 0, codes, len(keys))]
        sibling = self.sibling_ops(table)
        if (sib := sibling != "").any():  # priced from the sibling's curve at the same layout (:meth:`sibling_ops`)
            rows = table.loc[sib]
            text = pd.Series(col(rows, "n_ranks").astype(np.int64).astype(str), index=rows.index)
            nodes = pd.Series(col(rows, "n_nodes", 1.0).astype(np.int64).astype(str), index=rows.index)
            from_ = pd.Series(sibling[sib], index=rows.index).astype(str)
            out[sib] = ("no " + rows["op"].astype(str) + " was measured at " + text + " ranks on " + nodes
                        + " node(s) on " + _group_key(rows).astype(str) + ": priced from the " + from_
                        + " curve measured there (the same bytes per rank over the same rings)").to_numpy(dtype=object)
        outside = self.outside_sizes(table)
        lo, hi = self._curve_span(table)
        # beyond the sizes of the curve itself: ``outside`` also holds a collective never measured on the system (a
        # reduce-scatter on the sibling all-gather's curve), whose size may lie well within that curve (a 64 MiB one
        # was "0.0625x beyond the sizes measured at this layout (128 B to 1.0 GiB)")
        sizes = col(table, "size_bytes")
        with np.errstate(invalid="ignore"):
            span = outside & np.isfinite(lo) & ((sizes < lo) | (sizes > hi))
        if span.any():  # beyond the sizes of the curve measured at the layout: say how far, and from which sizes
            from hybrid.units import format_bytes

            size = sizes[span]
            factor = np.where(size < lo[span], lo[span] / size, size / hi[span])
            edges = pd.factorize(pd.MultiIndex.from_arrays([lo[span], hi[span]]))
            measured = np.array([f"{format_bytes(a)} to {format_bytes(b)}" for a, b in edges[1]], dtype=object)
            text = ("the message size is " + pd.Series(factor).map("{:.3g}".format).to_numpy(dtype=object)
                    + "x beyond the sizes measured at this layout (" + measured[edges[0]]
                    + "): anchored at the nearest measured size, extrapolated")
            out[span] = np.where(out[span] == "", text, out[span] + "; " + text)
        beyond = outside & ~span & (out == "")
        out[beyond] = "the message size is beyond the measured ones: extrapolated"
        return out.tolist()

    def extrapolated(self, table: pd.DataFrame) -> np.ndarray:
        """Per row, whether its prediction is not read off a curve measured for it: a message size far beyond the
        measured ones (:meth:`outside_sizes`, which includes a collective never measured on its system) or a layout
        never measured in its setting (:meth:`unmeasured_layouts`). Those rows get the unseen interval band
        (``HybridPredictor`` predictions' ``interval_band``)."""
        return self.outside_sizes(table) | self.unmeasured_layouts(table)

    def coverage(self, table: pd.DataFrame, catalog: Catalog | None = None) -> pd.Series:
        """Per row, what answers it, as :meth:`predict_with_source` prices it:

        * ``sigmoid``: the curve measured at its layout; ``sigmoid (all_gather curve)`` / ``(reduce_scatter curve)``:
          its sibling's curve there (:meth:`sibling_ops`);
        * a curve answers only within the sizes it was fitted on (:meth:`_curve_span`): beyond them the row is
          ``sigmoid (edge-anchored)`` (``sigmoid (all_gather curve, edge-anchored)``), the time anchored at the
          nearest measured size (:meth:`_anchored`, ``method`` :meth:`anchored_method`), and more than
          :attr:`SIZE_MARGIN` x out ``sigmoid (edge-anchored, extrapolated)`` (the unseen interval band,
          :meth:`outside_sizes`);
        * ``layout model`` / ``layout model (extrapolated)`` (beyond the measured rank counts) at a layout no curve
          was measured at, ``rescaled`` (the ratio rule from another layout); such a row below the smallest size
          measured for its (system, collective) adds ``, below the measured sizes`` (that size's ratio to
          alpha-beta carried down), and more than :attr:`SIZE_MARGIN` x beyond them ``, size extrapolated`` (the
          unseen band);
        * a system or collective never measured: ``transfer model: unseen system`` / ``... unseen collective on
          this system`` (``alpha-beta: ...`` without a fitted transfer model, and, given ``catalog``, for a CPU
          system's processes, which the transfer model does not price).

        Worked out once per distinct (system, collective, setting, ranks, nodes), the sizes per row."""
        out = np.full(len(table), "", dtype=object)
        if not len(table):
            return pd.Series(out, index=table.index, name="coverage")
        codes, uniques = _layout_codes(table)
        seen_sys = {f.system for f in self.fits}
        transfer = self.transfer is not None and self.transfer.fitted
        host = _host_rows(table, catalog) if catalog is not None and transfer else np.zeros(len(table), dtype=bool)

        def label(s: str, o: str, a: str, r: float, n: float) -> str:
            if s not in seen_sys:
                return "transfer model: unseen system"
            if any(f.n_ranks == r and f.n_nodes == n for f in self._ladder(s, o, a, r, n)):
                return "sigmoid"
            if (sib := self._sibling_fit(s, o, a, r, n)) is not None:
                return f"sigmoid ({sib.op} curve)"
            if (lm := self._layout_model(s, o, a)) is not None:
                return "layout model (extrapolated)" if self._layout_extrapolates(lm, r) else "layout model"
            if self._ladder(s, o, a, r, n):
                return "sigmoid"
            if self._nearest_any_layout(s, o, a, r) is not None:
                return "rescaled"
            return "transfer model: unseen collective on this system"

        per = np.array([label(str(s), str(o), str(a), float(r), float(n)) for s, o, a, r, n in uniques] + [""],
                       dtype=object)
        out = per[np.where(codes >= 0, codes, len(uniques))]
        unseen = pd.Series(out, dtype=object).str.startswith("transfer model:").to_numpy(dtype=bool)
        ab = unseen & (host | (not transfer))  # what the transfer model does not price falls back to alpha-beta
        out[ab] = pd.Series(out[ab], dtype=object).str.replace("transfer model:", "alpha-beta:").to_numpy(dtype=object)
        if "size_bytes" in table.columns and not unseen.all():
            size = col(table, "size_bytes")
            lo, hi = self._curve_span(table)
            far = self.outside_sizes(table) & ~unseen
            curve = np.isfinite(lo) & ~unseen
            beyond = curve & ((size < lo) | (size > hi))
            # a curve's row beyond its sizes: "sigmoid (edge-anchored)", "sigmoid (all_gather curve, edge-anchored)"
            base = pd.Series(out[beyond], dtype=object).astype(str)
            qual = pd.Series(np.where(far[beyond], "edge-anchored, extrapolated", "edge-anchored"), dtype=object)
            sib = base.str.endswith(" curve)").to_numpy()
            out[beyond] = np.where(sib, base.str[:-1] + ", " + qual + ")", base + " (" + qual + ")")
            # a sibling's curve pricing a collective never measured on the system: the unseen band, say so
            never = curve & ~beyond & far
            out[never] = out[never] + ", extrapolated (this collective was never measured on the system)"
            other = ~curve & ~unseen
            if self.size_range and other.any():
                # the smallest size measured for each layout's (system, collective), looked up once per layout
                per = np.array([self.size_range.get(f"{u[0]}|{u[1]}", (0.0, np.inf))[0] for u in uniques] + [0.0])
                smallest = per[np.where(codes >= 0, codes, len(uniques))]
                below = other & (size < smallest) & ~far
                out[below] = out[below] + ", below the measured sizes"
            out[other & far] = out[other & far] + ", size extrapolated"
        return pd.Series(out, index=table.index, name="coverage")

    # ------------------------------------------------------------------ persistence
    def save(self, directory: Path) -> None:
        self._check_fitted()
        write_json(Path(directory) / "sigmoids.json", {
            "class": type(self).__name__, "name": self.name, "families": list(self.families),
            "model": "busbw = B / (1 + exp(-(ln s - x0) / w)); params stored as ln B (bytes/s), x0, ln w",
            "rank_interpolation": "log(sigmoid/alpha-beta) linear in log2(ranks); constant outside",
            "fits": [asdict(f) for f in self.fits], "failures": self.failures, "dropped_wrong": self.dropped_wrong,
            "default_algorithm": self.default_algorithm, "rank_model": self.rank_model,
            "layout_model": "t = bw + lat * (bw / lat)^(1 - 1/w); lat = terms . (lat0, lat_intra, lat_inter) us, "
                            "bw = size * (terms . (s/B intra, local, bridged pair) + max(inter NIC share, node link) + fabric per doubling "
                            "of nodes beyond 2 x network); params stored as ln " + ", ".join(LAYOUT_PARAMS),
            "layout_models": [asdict(m) for m in self.layout_models.values()],
            "use_transfer": self.use_transfer, "borrow_sibling": self.borrow_sibling,
            "transfer_model": self.transfer.to_dict() if self.transfer is not None else None,
            "size_range": {k: list(v) for k, v in self.size_range.items()},
        })

    @classmethod
    def load(cls, directory: Path) -> CollectiveSigmoid:
        meta = read_json(Path(directory) / "sigmoids.json")
        # files written before layout models existed have neither key: they predict with the "ratio" rule
        # saved before siblings priced each other (no "borrow_sibling"): it predicts as it did
        obj = cls(str(meta.get("rank_model", "ratio")), transfer=bool(meta.get("use_transfer", False)),
                  sibling=bool(meta.get("borrow_sibling", False)))
        if meta.get("transfer_model"):
            obj.transfer = CollectiveTransfer.from_dict(meta["transfer_model"])
        obj.fits = [SigmoidFit(**f) for f in meta["fits"]]
        obj.layout_models = {f"{m['system']}|{m['op']}|{m['algorithm']}": LayoutFit(**m)
                             for m in meta.get("layout_models", [])}
        obj.failures = list(meta["failures"])
        obj.dropped_wrong = int(meta.get("dropped_wrong", 0))
        obj.default_algorithm = dict(meta.get("default_algorithm", {}))
        obj.size_range = {k: (float(v[0]), float(v[1])) for k, v in meta.get("size_range", {}).items()}
        obj._fitted = True
        return obj

    def unfitted_layouts(self) -> dict[tuple[str, str, int, int], str]:
        """Layouts (system, collective, ranks, nodes) the table measured that got no curve in any setting (too few
        message sizes, a failed fit: a truncated log), with the first reason; they are priced across layouts."""
        curves = {(f.system, f.op, f.n_ranks, f.n_nodes) for f in self.fits}
        out: dict[tuple[str, str, int, int], str] = {}
        for f in self.failures:
            key = (str(f["system"]), str(f["op"]), int(f.get("n_ranks", 0)), int(f.get("n_nodes", 0)))
            if key[2] > 0 and key not in curves:
                out.setdefault(key, str(f["reason"]))
        return out

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "key": self.key, "families": list(self.families),
                               "fitted": self.fitted}
        if self.fitted:
            out.update({
                "n_curves": len(self.fits), "n_failed": len(self.failures), "rank_model": self.rank_model,
                "n_layout_models": len(self.layout_models), "dropped_wrong_rows": self.dropped_wrong,
                "borrow_sibling": self.borrow_sibling,
                "systems": sorted({f.system for f in self.fits}),
                "ops": sorted({f.op for f in self.fits}),
                "median_fit_rmse_log": float(np.median([f.rmse_log for f in self.fits])) if self.fits else None,
                "transfer_model": ({"systems": self.transfer.systems, "n_points": self.transfer.n_points,
                                    "rmse_log": self.transfer.rmse_log, "constants": self.transfer.constants()}
                                   if self.transfer is not None and self.transfer.fitted else None),
                "failures": self.failures[:20],
            })
        return out
