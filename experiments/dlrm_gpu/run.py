"""DLRM on GPUs: predicted vs published training iterations (MLPerf Training DLRM, DeepLearningExamples).

    python experiments/dlrm_gpu/run.py [--data-dir DIR] [--out results.md]      # writes results.md + scaling.png
    python experiments/dlrm_gpu/run.py --mlperf FILE... --json                 # score any MLPerf-format table

Every published GPU run that can be mapped is predicted by the critical-path engine on the built-in model
variant it ran (:mod:`hybrid.workloads.dlrm_variants`: ``mlperf`` for MLPerf, ``dle-small`` / ``dle-large`` for
DeepLearningExamples), hybrid parallel (tables model-parallel with all-to-all, MLPs data-parallel with DDP
all-reduce), on a node built from the run's accelerator, GPUs per node and node count. Rows that cannot be
mapped (TPUs, CPUs, accelerators not in the catalog, rows without a per-iteration time, rows of another MLPerf
benchmark, malformed counts, accelerators per node that are not a node of the catalog system the row names or
more than any catalog system holds, fractional global batches or ones the GPUs do not share evenly; with
``--mlperf`` also runs whose tables no plan can place even with host memory, e.g. DLRM-DCNv2 on one 8 GB P4) are
skipped and counted with the reason.

Predictors, side by side:

- ``roofline``: datasheet roofline kernels + alpha-beta collectives, the engine's default host overheads;
- ``calibrated``: a HybridPredictor fitted on public kernel and collective measurements only (NeuSight,
  XLA H100 matmuls, Vidur A100 ops; nccl-tests Sophia DGX A100 and xxrjun H100, Vidur and XLA collectives),
  default host overheads;
- ``fitted``: per framework family, the kernel model (roofline or calibrated) with the lower error on ONE
  MLPerf round (``--fit-round``, default v1.0) plus two framework constants fitted on that round (the
  per-kernel launch gap and a per-iteration constant, :meth:`hybrid.engine.overheads.Overheads.fit_report`),
  scored on the other rounds and on DeepLearningExamples.
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid.atomic import write_text
from hybrid.corrections.predictor import HybridPredictor
from hybrid.data.paths import public_data_dir
from hybrid.engine.overheads import Overheads
from hybrid.engine.simulate import simulate
from hybrid.errors import HybridError, InvalidInputError
from hybrid.hardware.catalog import Catalog, default_catalog
from hybrid.hardware.device import System
from hybrid.reports.markdown import write_benchmark_results
from hybrid.sharding.heuristics import size_lookup_greedy
from hybrid.sharding.plan import Shard, ShardingPlan
from hybrid.sharding.search import greedy_plan
from hybrid.workloads.dlrm import MAX_INT_PRICED
from hybrid.workloads.dlrm_graph import PCIE_X16_BW, build_dlrm_graph
from hybrid.workloads.dlrm_hybrid_embedding import HybridEmbedding
from hybrid.workloads.dlrm_variants import dlrm_variant

MLPERF_GLOB = "mlperf/mlperf_training_v*_dlrm_runs.csv"
DLE_FILE = "published/dlrm_nvidia_deeplearningexamples_pytorch.csv"
MLPERF_COLUMNS = ("mlperf_version", "org", "system", "accelerator", "nodes", "acc_per_node", "global_batch_size",
                  "median_ms_per_iteration")
#: Measured systems whose calibrated collective curves stand in for an unmeasured node of the same fabric.
COLLECTIVE_STAND_IN = {("A100", 8): "Sophia", ("H100", 8): "xxrjun-H100-NDR"}
#: Per-GPU NIC bandwidth assumed for a multi-node system the catalog does not describe (one 200 Gb/s HDR NIC per
#: GPU, as in DGX A100).
DEFAULT_NIC_BW = 25e9
TARGET_PCT = 5.0
#: Where each framework family runs the bottom MLP. NVIDIA's PyTorch DLRM (DeepLearningExamples, the NGC PyTorch
#: container the MLPerf PyTorch submissions use) is "hybrid parallel": tables AND the bottom MLP model-parallel
#: (one GPU, global batch), the top MLP data-parallel. HugeCTR and the others: data-parallel MLPs.
BOTTOM_BY_FAMILY = {"pytorch": "model_parallel"}
#: Columns the dot interaction's output is padded to a multiple of, by framework family: NVIDIA's fused
#: dot-interaction kernels pad it (HugeCTR's ``Interaction`` layer one zero column, DeepLearningExamples'
#: ``padding_size`` to the next multiple of 8: 479 -> 480 for the 26 MLPerf tables either way), which the NVIDIA
#: PyTorch submissions run too; the others unpadded.
INTERACTION_PAD_BY_FAMILY = {"hugectr": 8, "pytorch": 8}
#: Host overheads by framework family, known from how the framework runs (not fitted): HugeCTR's MLPerf DLRM
#: captures the whole training step in CUDA graphs (``use_cuda_graph``), so a kernel costs the host no launch
#: of its own (~1 us per graph node on the GPU's front end) and there is no Python optimizer loop. The other
#: families keep the engine's eager-PyTorch defaults.
OVERHEADS_BY_FAMILY = {"hugectr": Overheads(kernel_launch_us=1.0, framework_us=0.0, collective_launch_us=1.0,
                                            optimizer_step_us=0.0, iteration_us=20.0)}
#: Rounds whose HugeCTR ran the hybrid embedding (HugeCTR 3.1, MLPerf v1.0 on); v0.7's HugeCTR placed whole
#: tables model-parallel.
NO_HYBRID_EMBEDDING_ROUNDS = ("v0.7",)
#: HugeCTR hybrid-embedding parameters (``HybridEmbeddingParam``) of the submitted configurations that differ from
#: HugeCTR's defaults (``p_dup_max`` 0.01, all-to-all 1.9e11 B/s, all-reduce 1.3e11 B/s, which v1.0's JSON configs
#: keep, e.g. training_results_v1.0 NVIDIA ``dgx_a100_8x8x1120.json``), by (first round, nodes: "single" / "multi",
#: device prefix or "" for any). From v2.0 (HugeCTR in NGC 22.04, also every v2.1 A100 submission) the single-node
#: configs set ``p_dup_max = 0.03`` (training_results_v2.0 NVIDIA ``hugectr/dgx_a100.py``, v2.1 GIGABYTE
#: ``G492-ZD2.py``, v2.1 NVIDIA ``hugectr-preview/dgx_h100.py``): a category is frequent from sqrt(3) = 1.73x as
#: many occurrences per iteration as v1.0's. The multi-node A100 configs keep the defaults (v2.1 HPE
#: ``675D_a100_x8.py``, NVIDIA's 8-node template); the v2.1 H100 4-node preview sets an all-to-all bandwidth of
#: 23.75e9 B/s (``dgx_h100_4x8x2240.py``): threshold 0.97 instead of 7.8 occurrences per iteration.
HUGECTR_HYBRID_PARAMS: tuple[tuple[float, str, str, dict[str, float]], ...] = (
    (2.0, "single", "", {"p_dup_max": 0.03}),
    (2.1, "multi", "H100", {"a2a_bw": 23.75e9}),
)


def hugectr_hybrid_params(round_: object, nodes: int, device: str) -> dict[str, float]:
    """:class:`HybridEmbedding` keyword arguments of the HugeCTR configuration a run of MLPerf round ``round_``
    (``v2.1``) on ``nodes`` nodes of ``device`` submitted (:data:`HUGECTR_HYBRID_PARAMS`; HugeCTR's defaults
    otherwise, and for a round that names no number)."""
    number = round_number(round_)
    kind = "multi" if int(nodes) > 1 else "single"
    out: dict[str, float] = {}
    for first, where, prefix, params in HUGECTR_HYBRID_PARAMS:
        if number >= first and where == kind and str(device).startswith(prefix):
            out.update(params)
    return out


#: First MLPerf round whose multi-node HugeCTR DLRM overlaps consecutive iterations: every NVIDIA multi-node config
#: from v1.1 on trains with HugeCTR's overlapped pipeline (``ModelPerfExt``: ``use_overlapped_pipeline``,
#: ``overlap_ar_a2a``, the next batch's indices precomputed during this one; training_results_v1.1
#: ``dgx_a100_14x8x640.py``; HugeCTR 4.0 renamed the knobs ``train_intra/inter_iteration_overlap``, both on in
#: training_results_v2.1 ``hugectr-preview/dgx_h100_4x8x2240.py``), v1.0's JSON configs predate it. Those runs are
#: timed in the steady state of overlapped iterations (each GPU's busiest resource: its network or its compute).
#: One node (``NVLink_SingleNode``) has no exchange to hide: HugeCTR reads and writes the peers' embedding vectors
#: with kernels on the main stream between GPU barriers (``forward_network_direct`` / ``update_model_direct``), so
#: single-node runs keep the one-iteration critical path. Rule set after the v2.1 multi-node errors had been seen
#: (results.md says so).
HUGECTR_OVERLAPPED_FROM = 1.1
#: Variants whose trainers distribute the next batch's inputs during the current iteration: the DLRM-DCNv2 rounds
#: run HugeCTR's embedding collection with ``train_inter_iteration_overlap`` (on by default in its MLPerf
#: ``train.py``: the data distributor's output is cached one iteration ahead) or TorchRec's
#: ``TrainPipelineSparseDist`` (the reference; ``input_dist`` on a stream of its own, "to hide the all2all latency").
PREFETCH_INPUT_DIST_VARIANTS = ("mlperf-dcnv2",)
#: HugeCTR's grouped weight-gradient buffer: one all-reduce for every dense gradient (a bucket of any size).
HUGECTR_GROUPED_WGRAD = 1 << 40
#: Zipf exponents tried for the Criteo category counts behind the hybrid embedding split (fitted on one round).
ZIPF_GRID = (0.0, 0.6, 0.8, 0.9, 1.0, 1.05, 1.1, 1.15, 1.2, 1.3, 1.4, 1.6)
#: Exponent used when no fit round is available (the value the default fit round, v1.0, selects; results.md).
DEFAULT_ZIPF_ALPHA = 0.6


def hugectr_overlapped(round_: object, nodes: int, hybrid_embedding: bool) -> bool:
    """Whether a HugeCTR hybrid-embedding run of MLPerf round ``round_`` on ``nodes`` nodes overlapped consecutive
    iterations (:data:`HUGECTR_OVERLAPPED_FROM`)."""
    return bool(hybrid_embedding) and int(nodes) > 1 and round_number(round_) >= HUGECTR_OVERLAPPED_FROM


def family_overheads(family: str) -> Overheads | None:
    return OVERHEADS_BY_FAMILY.get(family)


# --------------------------------------------------------------------------------------------- mapping
def framework_family(text: str) -> str:
    """``hugectr``, ``pytorch`` or ``other`` from a submission's framework string."""
    t = str(text).lower()
    if "hugectr" in t:
        return "hugectr"
    if "pytorch" in t and "mxnet" not in t and "tensorflow" not in t:
        return "pytorch"
    return "other"


#: Rounds published before a part's larger-memory variant existed: a bare name there can only be the part of the
#: time. MLPerf Training v0.7 (July 2020) predates the A100 80GB (November 2020), so its bare "NVIDIA A100"
#: (Inspur nf5488) is the 40 GB SXM4 part (1555 GB/s), not the catalog's default for a bare "A100" (the 80 GB).
BARE_NAME_BY_ROUND = {("A100", "v0.7"): "A100-SXM4-40GB"}


def map_device(name: str, catalog: Catalog, round_: str | None = None) -> str | None:
    """Catalog key of a published accelerator string (power limits, 'NVIDIA ' and 'CTS' removed), or None;
    ``round_`` (the row's ``mlperf_version``) resolves a bare name that round can only mean
    (:data:`BARE_NAME_BY_ROUND`)."""
    raw = str(name)
    clean = re.sub(r"\(.*?\)", "", raw).replace("NVIDIA ", "").replace(" CTS", "").strip()
    era = BARE_NAME_BY_ROUND.get((clean, str(round_).strip().lower() if round_ is not None else ""))
    if era is not None and era in catalog.devices:
        return era
    for cand in (raw, clean, clean.replace("-SXM-", "-SXM4-")):
        key = catalog.resolve_device(cand, missing_ok=True) if cand else None
        if key is not None and catalog.devices[key].kind == "gpu":
            return key
    return None


def node_system(catalog: Catalog, device: str, gpn: int) -> tuple[Catalog, str, str | None]:
    """A catalog system for ``gpn`` GPUs of ``device`` per node (an existing one, else a generic node: NVLink for
    SXM parts, PCIe for PCIe cards, NVLink-bridged ones included; NICs :data:`DEFAULT_NIC_BW` per GPU), and the
    measured system whose collective curves stand in for it (or None: alpha-beta)."""
    dev = catalog.devices[device]
    family = "H100" if device.startswith("H100") else "A100" if device.startswith("A100-SXM") else device
    stand_in = COLLECTIVE_STAND_IN.get((family, gpn))
    for key, s in catalog.systems.items():
        if s.device == device and s.gpus_per_node == gpn and not key.startswith(("Vidur", "XLA", "xxrjun")):
            return catalog, key, stand_in
    # rack-scale NVLink domains (GB200 / GB300 NVL72): MLPerf counts a tray of 4 GPUs as a node, but every GPU of
    # the rack shares one NVLink switch fabric, so the run is costed on the rack system (its NICs only between racks)
    for key, s in catalog.systems.items():
        if s.device == device and s.gpus_per_node != gpn and fits_node(key, s.gpus_per_node, gpn):
            return catalog, key, stand_in
    key = f"{device}-x{gpn}-node"
    if key in catalog.systems:
        return catalog, key, stand_in
    # a GPU-to-GPU fabric for the whole node: NVLink/NVSwitch on SXM parts; a PCIe card's NVLink *bridge* joins
    # pairs (or 4) of cards only, so its node-wide collectives run over PCIe
    nvlink = dev.link_bw > 0 and "PCIE" not in device.upper() and "bridge" not in dev.link_name.lower()
    intra = dev.link_bw if nvlink else PCIE_X16_BW.get(int(dev.pcie_gen or 4), PCIE_X16_BW[4])
    system = System(key=key, device=device, gpus_per_node=gpn, intra_bw=intra, inter_bw=DEFAULT_NIC_BW,
                    source="generic node built by experiments/dlrm_gpu (not a datasheet entry)",
                    intra_fabric="NVLink" if nvlink else "PCIe", inter_fabric="1x 200 Gb/s per GPU (assumed)",
                    max_nodes=1024)
    return catalog.with_system(system), key, stand_in


def read_mlperf(files: list[Path]) -> pd.DataFrame:
    frames = []
    seen: dict[Path, Path] = {}
    for f in files:
        if (key := Path(f).resolve()) in seen:  # (its runs were scored, and counted, twice)
            raise InvalidInputError(f"MLPerf table {f} is given twice (as {seen[key]} too): give each table once")
        seen[key] = Path(f)
    for f in files:
        try:
            df = pd.read_csv(f)
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"cannot read MLPerf table {f}: {str(exc).splitlines()[0]}") from None
        missing = [c for c in MLPERF_COLUMNS if c not in df.columns]
        if missing:
            raise InvalidInputError(f"{f}: not an MLPerf DLRM runs table (missing column(s) {missing})")
        if df.empty:  # (a table of unmappable runs answers with its skips; one without runs is a mistake)
            raise InvalidInputError(f"{f}: has no data rows (a header only)")
        frames.append(df.assign(file_name=Path(f).name))
    if not frames:
        raise InvalidInputError("no MLPerf table given")
    return pd.concat(frames, ignore_index=True, sort=False)


def round_number(version: object) -> float:
    """``v3.1`` -> 3.1 (NaN when the string names no round)."""
    m = re.search(r"(\d+)\.(\d+)", str(version))
    return float(f"{m.group(1)}.{m.group(2)}") if m else float("nan")


def mlperf_variant(r) -> str:
    """``mlperf-dcnv2`` or ``mlperf`` for one run: the benchmark's name where the row gives it (a ``benchmark``
    column, the file name, or the result path: ``.../dlrm_dcnv2/result_0.txt`` vs ``.../dlrm/result_0.txt``),
    else the round (MLPerf Training replaced DLRM by DLRM-DCNv2 from v3.0 on)."""
    text = f"{getattr(r, 'benchmark', '')} {getattr(r, 'file_name', '')} {getattr(r, 'file', '')}".lower()
    if "dcnv2" in text:
        return "mlperf-dcnv2"
    named = f"{getattr(r, 'benchmark', '')} {getattr(r, 'file', '')}".lower()
    if "dlrm" in re.split(r"[/\s]+", named):  # a benchmark column or result directory named plain "dlrm"
        return "mlperf"
    return "mlperf-dcnv2" if round_number(r.mlperf_version) >= 3.0 else "mlperf"


def named_benchmark(r) -> str | None:
    """The MLPerf benchmark a row names (its ``benchmark`` column, else the directory of a result file in MLPerf's
    layout: ``.../bert/result_0.txt`` is BERT), lower case, or None where it names none."""
    bench = getattr(r, "benchmark", None)
    if isinstance(bench, str) and bench.strip():
        return bench.strip().lower()
    path = getattr(r, "file", None)
    parts = re.split(r"[/\\]+", path.strip()) if isinstance(path, str) else []
    if len(parts) >= 2 and parts[-2] and re.fullmatch(r"result_\d+\.txt", parts[-1]):
        return parts[-2].lower()
    return None


def is_dlrm_benchmark(name: str) -> bool:
    """True for MLPerf's DLRM benchmarks by any of their names (``dlrm``, ``dlrm_dcnv2``, ``recommendation``)."""
    return "dlrm" in name or name.startswith("recommend")


def fits_node(key: str, gpus_per_node: int, gpn: float) -> bool:
    """Whether ``gpn`` accelerators per node is a node of catalog system ``key``: its own count, or a tray of a
    rack-scale NVLink system (GB200 NVL72: MLPerf counts 4 GPUs a node), as :func:`node_system` maps them."""
    return gpn == gpus_per_node or ("NVL" in key.upper() and gpus_per_node > gpn and gpus_per_node % gpn == 0)


def map_mlperf(df: pd.DataFrame, catalog: Catalog) -> tuple[pd.DataFrame, Counter]:
    """Mappable GPU runs (one row per run) and the count of skipped runs per reason."""
    skipped: Counter = Counter()
    rows = []
    largest_node = max((s.gpus_per_node for s in catalog.systems.values()), default=8)
    for r in df.itertuples(index=False):
        bench = named_benchmark(r)
        if bench is not None and not is_dlrm_benchmark(bench):  # (another benchmark's rows were priced as DLRM)
            skipped[f"not a DLRM run (benchmark {bench})"] += 1
            continue
        ms = pd.to_numeric(r.median_ms_per_iteration, errors="coerce")
        gpn = pd.to_numeric(r.acc_per_node, errors="coerce")
        nodes = pd.to_numeric(r.nodes, errors="coerce")
        batch = pd.to_numeric(r.global_batch_size, errors="coerce")
        if not (np.isfinite(ms) and ms > 0):
            skipped["no per-iteration time"] += 1
            continue
        if not (np.isfinite(gpn) and gpn > 0 and np.isfinite(nodes) and nodes > 0):
            # CPU-only rows leave the accelerator count empty or 0; a count that is no number or negative is garbage
            garbage = any((pd.notna(raw) and not np.isfinite(v)) or v < 0
                          for raw, v in ((r.acc_per_node, gpn), (r.nodes, nodes)))
            skipped["malformed node or accelerator count" if garbage else "no accelerators (CPU-only run)"] += 1
            continue
        if gpn != round(gpn) or nodes != round(nodes):  # 0.5 nodes was 0 nodes of 4 GPUs: no run to predict
            skipped["node or accelerator count not a whole number"] += 1
            continue
        dev = map_device(r.accelerator, catalog, getattr(r, "mlperf_version", None))
        if dev is None:
            name = str(r.accelerator).strip() if pd.notna(r.accelerator) else ""
            # which one: a judge adds it to a catalog file (HYBRID_CATALOG) or learns the spelling is new
            reason = ("not a GPU (TPU)" if "tpu" in name.lower() else
                      f"accelerator not in the catalog: {name}" if name else "no accelerator named")
            skipped[reason] += 1
            continue
        named = catalog.resolve_system(str(r.system), missing_ok=True) if isinstance(r.system, str) else None
        if named is not None and not fits_node(named, catalog.systems[named].gpus_per_node, gpn):
            # a table naming a catalog system (DGX-A100: 8 GPUs a node) with another count was costed on a node
            # of that count built for it, not on the system it names
            skipped[f"accelerators per node not those of system {named} "
                    f"({catalog.systems[named].gpus_per_node} GPUs per node)"] += 1
            continue
        if gpn > largest_node:  # a generic node of 1000 GPUs, all on one NVLink fabric, was built and costed
            skipped[f"more accelerators per node than any catalog system holds ({largest_node})"] += 1
            continue
        if not (np.isfinite(batch) and batch > 0):
            skipped["no global batch"] += 1
            continue
        if batch != round(batch):  # (65536.0 is a whole batch; 55296.5 samples is no run anyone made)
            skipped["global batch not a whole number"] += 1
            continue
        if batch < gpn * nodes:  # (rounded up to a sample per GPU it priced another batch; 1e9 nodes: MemoryError)
            skipped["global batch smaller than the GPU count (fewer than one sample per GPU)"] += 1
            continue
        if batch > MAX_INT_PRICED:  # (counted as a run that "does not fit", with the config's error as the reason)
            skipped["malformed global batch (more than 10**18 samples)"] += 1
            continue
        if batch % (gpn * nodes):  # (priced as round(batch / GPUs) per GPU: 100 samples on 64 GPUs ran 128)
            skipped["global batch not a multiple of the GPU count (samples per GPU not whole)"] += 1
            continue
        family = framework_family(getattr(r, "framework", ""))
        variant = mlperf_variant(r)
        rows.append({"source": f"MLPerf {r.mlperf_version}", "round": str(r.mlperf_version),
                     "system_label": f"{r.mlperf_version} {r.org} {r.system}", "device": dev,
                     "gpn": int(gpn), "nodes": int(nodes), "gpus": int(gpn * nodes), "global_batch": int(batch),
                     "family": family, "variant": variant, "dtype": "fp16", "embedding_dtype": "fp16",
                     # NVIDIA's PyTorch DLRM (one-hot rounds) runs the bottom MLP model-parallel; the DCNv2
                     # rounds' TorchRec reference and HugeCTR keep every dense layer data-parallel
                     "bottom": ("data_parallel" if variant == "mlperf-dcnv2"
                                else BOTTOM_BY_FAMILY.get(family, "data_parallel")),
                     # the hybrid embedding splits one-hot categories by frequency; DCNv2's multi-hot rounds run
                     # HugeCTR's embedding collection instead (tables placed by its planner, ``run_plan``)
                     "hybrid_emb": (family == "hugectr" and variant == "mlperf"
                                    and str(r.mlperf_version) not in NO_HYBRID_EMBEDDING_ROUNDS),
                     "measured_ms": float(ms)})
    return pd.DataFrame(rows), skipped


def dle_amp(amp: bool, gpus: int) -> dict[str, object]:
    """How DeepLearningExamples' ``--amp`` runs its FP32 tables (``dlrm/scripts/main.py``, ``dlrm/nn/parts.py``):
    ``torch.cuda.amp.GradScaler`` unscales the gradients before both optimizers; on one GPU (26 tables of dim
    128) the fused joint embedding writes FP16 outputs itself, on several the sparse joint embedding writes FP32
    and ``.half()`` casts them before the all-to-all."""
    if not amp:
        return {"grad_scaler": False, "lookup_output_dtype": ""}
    return {"grad_scaler": True, "lookup_output_dtype": "fp16" if gpus == 1 else ""}


def map_dle(path: Path, catalog: Catalog) -> pd.DataFrame:
    """DeepLearningExamples DLRM throughput rows, both precisions, as per-iteration times (global batch /
    samples per second)."""
    df = pd.read_csv(path, comment="#")
    systems = {"DGX A100": "DGX-A100", "DGX-1": "DGX-1", "DGX-2": "DGX-2"}
    rows = []
    for r in df.itertuples(index=False):
        sys_key = catalog.resolve_system(systems.get(r.system, r.system))
        s = catalog.systems[sys_key]
        variant = "dle-large" if "large" in str(r.model_size) else "dle-small"
        gpus = int(r.num_gpus)
        fp = str(r.full_precision_type).strip().lower()
        for label, dtype, emb, thr in (("full", "tf32" if fp == "tf32" else "fp32", "fp32",
                                        r.throughput_full_precision_samples_per_s),
                                       ("mixed", "fp16", "fp32", r.throughput_mixed_precision_samples_per_s)):
            thr = pd.to_numeric(thr, errors="coerce")
            if not (np.isfinite(thr) and thr > 0):
                continue
            rows.append({"source": "DeepLearningExamples", "round": "dle",
                         "system_label": f"DLE {r.system} {label} ({fp.upper() if label == 'full' else 'AMP'})",
                         "device": s.device, "gpn": s.gpus_per_node, "nodes": 1, "gpus": gpus, "global_batch": 65536,
                         "family": "pytorch", "variant": variant, "dtype": dtype, "embedding_dtype": emb,
                         "bottom": "model_parallel", "hybrid_emb": False, **dle_amp(label == "mixed", gpus),
                         "measured_ms": 65536 / float(thr) * 1e3, "system_key": sys_key})
    return pd.DataFrame(rows)


def hybrid_parallel_plan(config) -> ShardingPlan:
    """Tables model-parallel: table-wise, balanced by lookups x log(rows), when there are at least as many tables
    as GPUs; else every table row-wise over every GPU except those cheaper to replicate: a replicated
    (data-parallel) table all-reduces its whole gradient every iteration, a sharded one exchanges its pooled
    lookups (global batch x dim, forward and backward), so a table is replicated only when it has fewer rows than
    twice the global batch (the same bytes either way; with dim 128 and a 55k batch, tables under ~110k rows)."""
    if config.gpus <= config.num_tables:
        return size_lookup_greedy(config, capacity=1e18)
    ranks = tuple(range(config.gpus))
    global_batch = config.batch_size_per_gpu * config.gpus
    return ShardingPlan({t.name: Shard("data_parallel", ranks) if t.num_embeddings <= 2 * global_batch
                         else Shard("row_wise", ranks) for t in config.tables})


def run_plan(config, variant: str, catalog: Catalog) -> ShardingPlan:
    """The plan a run's framework uses: DLRM-DCNv2 rounds (HugeCTR's embedding collection with its ``auto`` /
    ``hier_auto`` planner, TorchRec's planner) place tables by a cost model, modelled as the predicted-cost greedy
    placement on the roofline (:func:`hybrid.sharding.search.greedy_plan`: data-parallel small tables, heavy
    ones split); the one-hot DLRM rounds the fixed hybrid-parallel layout (:func:`hybrid_parallel_plan`)."""
    if variant == "mlperf-dcnv2":
        return greedy_plan(config, HybridPredictor.roofline_only(catalog))
    return hybrid_parallel_plan(config)


# --------------------------------------------------------------------------------------------- prediction
def with_node_systems(runs: pd.DataFrame, catalog: Catalog) -> Catalog:
    """``catalog`` plus a generic node system for every (device, GPUs per node) of ``runs`` it lacks."""
    if len(runs) == 0:
        return catalog
    for dev, gpn in runs[["device", "gpn"]].drop_duplicates().itertuples(index=False):
        catalog, _, _ = node_system(catalog, str(dev), int(gpn))
    return catalog


def costed_system(r: Any, catalog: Catalog) -> str:
    """The catalog system run ``r`` is costed on (:func:`run_config`): the one a table names, else a node of its GPU
    and count (a catalog system of them: Lenovo's SR670v2 with 4 A100-SXM4-40GB is costed as Polaris)."""
    return run_config(r, catalog)[0].system


def run_config(r: Any, catalog: Catalog) -> tuple[Any, str | None, Catalog]:
    """(the DLRM config of run ``r``, the measured system its collectives stand in for or None, the catalog with
    the run's node system added)."""
    cat = catalog
    if isinstance(getattr(r, "system_key", None), str):
        system, stand_in = r.system_key, None
    else:
        cat, system, stand_in = node_system(cat, r.device, int(r.gpn))
    if stand_in is None and r.device.startswith(("A100-SXM", "H100")) and int(r.gpn) == 8:
        stand_in = COLLECTIVE_STAND_IN[("H100" if r.device.startswith("H100") else "A100", 8)]
    # a table of MLPerf and DeepLearningExamples runs together leaves the columns only one source sets NaN in the
    # other's rows: NaN is no dtype (the config refused it), and bool(NaN) is True (a grad scaler nobody ran)
    scaler = getattr(r, "grad_scaler", False)
    lookup_dtype = getattr(r, "lookup_output_dtype", None)
    cfg = dlrm_variant(r.variant, system=system, gpus=int(r.gpus),
                       batch_size_per_gpu=max(1, int(round(r.global_batch / r.gpus))), dtype=r.dtype,
                       embedding_dtype=r.embedding_dtype, embedding_placement="auto",
                       bottom_mlp_placement=r.bottom, grad_scaler=bool(scaler) and not pd.isna(scaler),
                       lookup_output_dtype=lookup_dtype if isinstance(lookup_dtype, str) and lookup_dtype else None,
                       interaction_pad_to=(INTERACTION_PAD_BY_FAMILY.get(str(r.family), 1)
                                           if dlrm_variant(r.variant).interaction == "dot" else None))
    return cfg, stand_in, cat


def drop_unplaceable(runs: pd.DataFrame, catalog: Catalog, skipped: Counter) -> pd.DataFrame:
    """``runs`` without those whose tables no plan can place (each configuration planned once, as the
    benchmark plans it), each counted in ``skipped`` with the planner's reason: one such run (a single GPU whose
    memory cannot hold a table, say) is skipped, not the end of the whole table."""
    if len(runs) == 0:
        return runs
    keep = np.ones(len(runs), dtype=bool)
    seen: dict[tuple, str | None] = {}
    for i, r in enumerate(runs.itertuples(index=False)):
        k = (r.variant, r.device, r.gpn, r.gpus, r.global_batch, r.dtype, r.embedding_dtype, r.bottom)
        if k not in seen:
            try:
                cfg, _, cat = run_config(r, catalog)
                run_plan(cfg, r.variant, cat)
                seen[k] = None
            except InvalidInputError as exc:
                seen[k] = str(exc)
        if seen[k] is not None:
            keep[i] = False
            skipped[f"does not fit: {seen[k]}"] += 1
    return runs[keep].reset_index(drop=True)


def build_graphs(runs: pd.DataFrame, catalog: Catalog, zipf_alpha: float = DEFAULT_ZIPF_ALPHA
                 ) -> tuple[pd.Series, list, Catalog]:
    """One compiled graph per distinct configuration; ``key`` per run row. Runs flagged ``hybrid_emb`` get
    HugeCTR's hybrid embedding with Criteo categories of Zipf exponent ``zipf_alpha``."""
    runs = runs.assign(**{c: runs[c].fillna(d) if c in runs else d
                          for c, d in (("grad_scaler", False), ("lookup_output_dtype", ""))})
    # (the round: HugeCTR's hybrid-embedding parameters changed between rounds, :func:`hugectr_hybrid_params`)
    keys = runs[["variant", "device", "gpn", "nodes", "gpus", "global_batch", "dtype", "embedding_dtype",
                 "bottom", "hybrid_emb", "family", "grad_scaler", "lookup_output_dtype", "round"]].astype(str)
    key = keys.agg("|".join, axis=1)
    graphs, cat = {}, catalog
    for k, r in zip(key, runs.itertuples(index=False), strict=True):
        if k in graphs:
            continue
        cfg, stand_in, cat = run_config(r, cat)
        he = (HybridEmbedding(zipf_alpha, **hugectr_hybrid_params(r.round, int(r.nodes), str(r.device)))
              if bool(r.hybrid_emb) else None)
        ec = r.variant == "mlperf-dcnv2" and r.family == "hugectr"  # HugeCTR's embedding collection (DCNv2 rounds)
        # HugeCTR all-reduces every dense weight gradient at once from one grouped buffer (no DDP buckets)
        buckets = ({"bucket_bytes": HUGECTR_GROUPED_WGRAD, "first_bucket_bytes": HUGECTR_GROUPED_WGRAD}
                   if he or ec else {})
        it = build_dlrm_graph(cfg, run_plan(cfg, r.variant, cat), cat, collective_system=stand_in,
                              hybrid_embedding=he, hierarchical_all_to_all=True if ec else None,
                              overlap_iterations=hugectr_overlapped(r.round, int(r.nodes), he is not None),
                              prefetch_input_dist=r.variant in PREFETCH_INPUT_DIST_VARIANTS, **buckets)
        graphs[k] = it.graph.compile()
    return key, [graphs[k] for k in key.unique()], cat


def predict(graphs: list, model, overheads: Overheads | list | None) -> np.ndarray:
    """Iteration ms per graph; ``overheads`` one for all or one per graph."""
    return predict_bounds(graphs, model, overheads)[0]


def predict_bounds(graphs: list, model, overheads: Overheads | list | None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(iteration ms, its 80% interval's low and high ends: NaN without intervals) per graph."""
    ovs = overheads if isinstance(overheads, list) else [overheads] * len(graphs)
    sims = [simulate(g, model, ov) for g, ov in zip(graphs, ovs, strict=True)]
    return tuple(np.array([getattr(r, a) / 1e3 for r in sims], dtype=float)  # type: ignore[return-value]
                 for a in ("iteration_us", "iteration_us_low", "iteration_us_high"))


def choose_zipf_alpha(runs: pd.DataFrame, catalog: Catalog, fit_mask: np.ndarray) -> tuple[float, dict]:
    """The Criteo Zipf exponent that best predicts (roofline kernels, the family's host overheads; lowest
    geomean error) the hybrid-embedding runs of the fit round; ``(alpha, {alpha: geomean %})``."""
    sel = runs[fit_mask & runs["hybrid_emb"].astype(bool).to_numpy()]
    if len(sel) == 0:
        return DEFAULT_ZIPF_ALPHA, {}
    scores = {}
    for a in ZIPF_GRID:
        key, graphs, cat = build_graphs(sel, catalog, a)
        roof = HybridPredictor.roofline_only(cat)
        fams = sel.assign(key=key.to_numpy()).drop_duplicates("key")["family"]
        p = predict(graphs, roof, [family_overheads(f) for f in fams])
        pred = pd.Series(p, index=key.unique())[key].to_numpy()
        scores[a] = geomean(err_pct(pred, sel["measured_ms"].to_numpy()))
    return min(scores, key=scores.get), scores


def public_calibration(data_dir: Path, catalog: Catalog, max_rows: int = 12000,
                       extra: pd.DataFrame | None = None) -> tuple[HybridPredictor, str]:
    """HybridPredictor fitted on public kernel and collective measurements (no end-to-end data); ``extra`` rows
    (e.g. a profile bundle) join after the sub-sampling, so the public rows are the same with and without them."""
    from hybrid.data.importers import import_paths
    from hybrid.data.importers.neusight import collections
    from hybrid.tracking.inputs import subsample

    sources = [("neusight", collections(data_dir, "test")), ("xla-matmul", [data_dir / "xla"]),
               ("vidur-compute", [data_dir / "vidur"]), ("vidur-network", [data_dir / "vidur"]),
               ("xla-collectives", [data_dir / "xla"]),
               ("nccl-tests", [data_dir / "nccl-tests/argonne-lcf_alcf-nccl-tests/results_sophia",
                               data_dir / "nccl-tests/xxrjun_nccl-tests-cluster"])]
    frames, used = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fmt, paths in sources:
            paths = [p for p in paths if p.exists()]
            if not paths:
                continue
            df = import_paths(fmt, paths, catalog=catalog)
            frames.append(df)
            used.append(f"{fmt} ({len(df):,} rows)")
    if not frames:
        raise InvalidInputError(f"no public kernel/collective data under {data_dir}")
    table = pd.concat(frames, ignore_index=True, sort=False)
    if "wrong" in table.columns:
        table = table[~(pd.to_numeric(table["wrong"], errors="coerce").fillna(0) > 0)]
    table = subsample(table, max_rows, 0)
    note = ", ".join(used) + f"; {len(table):,} rows kept (even per device/op)"
    if extra is not None and len(extra):
        table = pd.concat([table, extra], ignore_index=True, sort=False)
        note += f", plus {len(extra):,} profile rows"
    # with its 80% intervals calibrated as `hybrid calibrate` does (point predictions unchanged)
    return HybridPredictor(catalog).fit(table, intervals=True), note + "; 80% intervals calibrated"


def err_pct(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.abs(np.asarray(pred) - np.asarray(meas)) / np.asarray(meas) * 100


def geomean(e: np.ndarray) -> float:
    """Geometric mean of |error| % (floored at 0.01% like the project's error_summary)."""
    e = np.maximum(np.asarray(e, dtype=float), 1e-2)
    return float(np.exp(np.mean(np.log(e)))) if e.size else float("nan")


def fit_constants(runs: pd.DataFrame, graphs_by_key: dict, models: dict, fit_mask: np.ndarray) -> dict[str, tuple]:
    """Per framework family (and ``all`` as the fall-back), on the ``fit_mask`` runs only: the kernel model
    (``roofline`` or ``calibrated``, whichever has the lower geomean error there) and the two framework constants
    fitted with it, kept only where they beat, on the same runs, the calibrated kernel model with the family's
    default overheads (nothing fitted; ``report["gate"]``), which answers for the family otherwise. Returns
    ``family -> (model name, Overheads, fit report, runs, systems)``."""
    out = {}
    for fam in ("all", *sorted(runs.loc[fit_mask, "family"].unique())):
        sel = fit_mask & ((runs["family"] == fam).to_numpy() if fam != "all" else True)
        if sel.sum() == 0:
            continue
        sub = runs[sel]
        name = min(("roofline", "calibrated"), key=lambda n: geomean(sub[f"err_{n}_pct"]))
        gs = [graphs_by_key[k] for k in sub["key"]]
        ov, rep = Overheads.fit_report(gs, sub["measured_ms"].to_numpy() * 1e3, models[name],
                                       start=family_overheads(fam), fit=("launch_us", "iteration_us"))
        # the gate: a fit that does not beat, on its own runs, the calibrated kernel model with the family's
        # default host overheads (nothing fitted) is not used; that predictor answers for the family instead
        keys = list(sub["key"].unique())  # one simulation per distinct graph (a system's runs share one)
        ms = dict(zip(keys, predict([graphs_by_key[k] for k in keys], models[name], ov), strict=True))
        fitted = geomean(err_pct(sub["key"].map(ms).to_numpy(), sub["measured_ms"].to_numpy()))
        unfitted = geomean(sub["err_calibrated_pct"].to_numpy())
        rep = {**rep, "kernel_model": name,
               "gate": {"fitted_pct": fitted, "calibrated_pct": unfitted, "kept": fitted < unfitted}}
        if not fitted < unfitted:
            name, ov = "calibrated", family_overheads(fam)
        out[fam] = (name, ov, rep, int(sel.sum()), int(sub["system_label"].nunique()))
    return out


def score(runs: pd.DataFrame, catalog: Catalog, calibrated, fit_round: str | None) -> tuple[pd.DataFrame, dict]:
    """Predictions of every run by the three predictors; the fitted constants (``fits["zipf"]``: the Criteo Zipf
    exponent chosen on the fit round and the score of each tried)."""
    fit_mask = (runs["round"] == fit_round).to_numpy() if fit_round is not None else np.zeros(len(runs), bool)
    alpha, alpha_scores = choose_zipf_alpha(runs, catalog, fit_mask)
    key, graphs, cat = build_graphs(runs, catalog, alpha)
    # the system each run was costed on, beside the one its submitter named (system_label): they differ
    costed = {k: costed_system(r, cat) for k, r in zip(key, runs.itertuples(index=False), strict=True)}
    runs = runs.assign(key=key.to_numpy(), costed_system=key.map(costed).to_numpy())
    uniq = list(key.unique())
    by_key = dict(zip(uniq, graphs, strict=True))
    fam_of = runs.drop_duplicates("key").set_index("key")["family"]
    roof = HybridPredictor.roofline_only(cat)
    models = {"roofline": roof, "calibrated": calibrated}
    ovs = [family_overheads(fam_of[k]) for k in uniq]
    bounds = {name: predict_bounds(graphs, m, ovs) for name, m in models.items()}
    idx = pd.Index(uniq)
    for name, (p, low, high) in bounds.items():
        runs[f"pred_{name}_ms"] = p[idx.get_indexer(runs["key"])]
        runs[f"err_{name}_pct"] = err_pct(runs[f"pred_{name}_ms"], runs["measured_ms"])
        if np.isfinite(low).all() and np.isfinite(high).all():  # the model's 80% iteration-time interval
            runs[f"pred_{name}_low_ms"] = low[idx.get_indexer(runs["key"])]
            runs[f"pred_{name}_high_ms"] = high[idx.get_indexer(runs["key"])]
    fits: dict = {"zipf": (alpha, alpha_scores)}
    runs["pred_fit_ms"] = runs["pred_calibrated_ms"]
    runs["fit_set"] = False
    if fit_round is not None:
        mask = (runs["round"] == fit_round).to_numpy()
        if mask.any():
            fits.update(fit_constants(runs, by_key, models, mask))
            runs["fit_set"] = mask
            for fam in runs["family"].unique():
                name, ov = fits.get(fam, fits["all"])[:2]
                sel = (runs["family"] == fam).to_numpy()
                ks = runs.loc[sel, "key"].unique()
                p = dict(zip(ks, predict([by_key[k] for k in ks], models[name], ov), strict=True))
                runs.loc[sel, "pred_fit_ms"] = runs.loc[sel, "key"].map(p).to_numpy()
    for name in ("roofline", "calibrated", "fit"):
        runs[f"err_{name}_pct"] = err_pct(runs[f"pred_{name}_ms"], runs["measured_ms"])
    return runs, fits


def summary_json(runs: pd.DataFrame, skipped: Counter, n_input: int, fit_note: str) -> dict:
    def block(g: pd.DataFrame) -> dict:
        return {"n_rows": int(len(g)), **({"costed_system": costed_on(g)} if "costed_system" in g.columns else {}),
                "geomean_pct": round(geomean(g["err_fit_pct"]), 2),
                "max_pct": round(float(g["err_fit_pct"].max()), 2),
                "roofline_geomean_pct": round(geomean(g["err_roofline_pct"]), 2),
                "measured_ms_median": round(float(g["measured_ms"].median()), 4),
                "predicted_ms_median": round(float(g["pred_fit_ms"].median()), 4)}

    out = {"n_input": n_input, "n_rows": int(len(runs)), "n_skipped": int(sum(skipped.values())),
           "skipped": dict(skipped), "predictor": "kernel model + framework constants per family", "fit": fit_note}
    if len(runs):
        out.update(geomean_pct=round(geomean(runs["err_fit_pct"]), 2),
                   max_pct=round(float(runs["err_fit_pct"].max()), 2),
                   roofline_geomean_pct=round(geomean(runs["err_roofline_pct"]), 2),
                   calibrated_default_overheads_geomean_pct=round(geomean(runs["err_calibrated_pct"]), 2),
                   by_system={k: block(g) for k, g in runs.groupby("system_label", sort=True)},
                   by_gpus={str(k): block(g) for k, g in runs.groupby("gpus", sort=True)})
        if "fit_set" in runs.columns:  # runs of the round the framework constants were fitted on: in-sample
            fit_set = runs["fit_set"].to_numpy(bool)
            held = runs[~fit_set]
            out.update(n_fit_round=int(fit_set.sum()),
                       held_out_geomean_pct=round(geomean(held["err_fit_pct"]), 2) if len(held) else None)
    else:
        out.update(geomean_pct=None, max_pct=None, by_system={}, by_gpus={})
    return out


# --------------------------------------------------------------------------------------------- report
def costed_on(g: pd.DataFrame) -> str:
    """The catalog system(s) the runs ``g`` were costed on, comma-separated."""
    return ", ".join(sorted(map(str, g["costed_system"].unique())))


def table_lines(runs: pd.DataFrame, by: str) -> list[str]:
    """A markdown table of the scores per ``by``; per system (``system_label``) with the catalog system the runs
    were costed on (the label is the submitter's name for it)."""
    costed = by == "system_label" and "costed_system" in runs.columns
    lines = [f"| {by} |{' costed on |' if costed else ''} runs | measured ms (median) | roofline geomean / max % | "
             "calibrated geomean / max % | fitted geomean / max % | in fit set |",
             "|---|" + ("---|" if costed else "") + "---|---|---|---|---|---|"]
    for k, g in runs.groupby(by, sort=True):
        cells = [f"{geomean(g[f'err_{n}_pct']):.1f} / {g[f'err_{n}_pct'].max():.1f}"
                 for n in ("roofline", "calibrated", "fit")]
        lines.append(f"| {k} |{f' {costed_on(g)} |' if costed else ''} {len(g)} | {g['measured_ms'].median():.3f} | "
                     + " | ".join(cells)
                     + f" | {'yes' if g['fit_set'].all() else 'no' if not g['fit_set'].any() else 'part'} |")
    return lines


def scaling_plot(runs: pd.DataFrame, path: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = []
    dle = runs[runs["source"] == "DeepLearningExamples"].copy()
    dle["series"] = dle["system_label"]
    series.append(dle)
    ml = runs[(runs["source"] != "DeepLearningExamples") & runs["system_label"].str.contains("NVIDIA dgxa100")
              & (runs["family"] == "hugectr")].copy()
    ml["series"] = ml["source"] + " NVIDIA DGX A100 HugeCTR"
    series.append(ml)
    data = pd.concat(series, ignore_index=True)
    fig, ax = plt.subplots(figsize=(13, 5.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, g) in enumerate(data.groupby("series", sort=True)):
        g = g.groupby("gpus").agg(measured=("measured_ms", "median"), pred=("pred_fit_ms", "median"),
                                  roof=("pred_roofline_ms", "median"), cal=("pred_calibrated_ms", "median"),
                                  batch=("global_batch", "median")).reset_index()
        c = colors[i % len(colors)]
        def thr(ms: pd.Series, batch: pd.Series = g["batch"]) -> pd.Series:  # M samples/s
            return batch / (ms / 1e3) / 1e6

        ax.plot(g["gpus"], thr(g["measured"]), "o", color=c, label=f"{name}: measured")
        ax.plot(g["gpus"], thr(g["pred"]), "-", color=c, label=f"{name}: predicted (fitted)")
        ax.plot(g["gpus"], thr(g["cal"]), "--", color=c, alpha=0.7)
        ax.plot(g["gpus"], thr(g["roof"]), ":", color=c, alpha=0.5)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("training throughput (M samples/s)")
    ax.set_title("DLRM scaling: published (points) vs predicted (solid: fitted, dashed: calibrated, dotted: roofline)")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def given_intro(runs: pd.DataFrame, skipped: Counter, n_input: int, fit_round: str, fit_note: str,
                calib_note: str, given: list[str]) -> list[str]:
    """The opening of the report of tables given with ``--mlperf``: what was read, scored and fitted (the
    committed report's opening describes the public rounds and DeepLearningExamples, none of which it scored)."""
    fit_on = fit_note.startswith("framework constants fitted")
    in_round = int(runs["fit_set"].sum())
    return [
        f"Tables scored: {', '.join(f'`{g}`' for g in given)}: {n_input} MLPerf rows read; mapped and scored: "
        f"{len(runs)}. Skipped: " + (", ".join(f"{v} {k}" for k, v in sorted(skipped.items())) or "none") + ".", "",
        "Error = |predicted - measured| / measured of the per-iteration time (throughput = global batch / time; "
        "errors here are on the time); geomean and max over runs.", "",
        f"Calibration (public kernel and collective data only, no end-to-end data): {calib_note}.", "",
        ("Fitted (`fitted` column): per framework family, the kernel model and two framework constants "
         f"{fit_note.removeprefix('framework constants ')} of the public data (the MLPerf {fit_round} round), "
         "not on these tables; "
         + (f"{in_round} of the scored runs are of that round (in-sample where they are that file's runs: the "
            "`fit round` rows and the `in fit set` column)." if in_round else "none of the scored runs is of that "
            "round.")
         if fit_on else
         f"Fitted (`fitted` column): nothing fitted (no public MLPerf {fit_round} table to fit the framework "
         "constants on), so it is the calibrated kernel model with each family's default overheads."),
        ""]


def report(runs: pd.DataFrame, skipped: Counter, n_input: int, fits: dict, fit_round: str, calib_note: str,
           command: str, seconds: float, plot: str | None, given: list[str] | None = None,
           fit_note: str = "") -> str:
    """The markdown report; ``given`` (tables scored with ``--mlperf``, ``fit_note`` saying what was fitted) opens
    it with what was read from them instead of the public rounds' description, and drops the scaling curve."""
    held = runs[~runs["fit_set"]]
    fitted = runs[runs["fit_set"]]
    L = ["# DLRM on GPUs: predicted vs published training iterations", "",
         f"Command: `{command}` ({seconds:.0f} s on a shared, loaded 2-core machine; the timing does not affect "
         "the numbers).", ""]
    if given is not None:
        L += given_intro(runs, skipped, n_input, fit_round, fit_note, calib_note, given)
    else:
        L += [
         f"Published runs read: {n_input} MLPerf rows + DeepLearningExamples; mapped and scored: {len(runs)} "
         f"(MLPerf {int((runs['source'] != 'DeepLearningExamples').sum())}, DeepLearningExamples "
         f"{int((runs['source'] == 'DeepLearningExamples').sum())} = 7 systems x 2 precisions). Skipped (MLPerf): "
         + (", ".join(f"{v} {k}" for k, v in sorted(skipped.items())) or "none") + ".", "",
         "Error = |predicted - measured| / measured of the per-iteration time (throughput = global batch / time; "
         "errors here are on the time); geomean and max over runs.", "",
         f"Calibration (public kernel and collective data only, no end-to-end data): {calib_note}.", "",
         f"Fitted (`fitted` column), on the MLPerf {fit_round} runs only ({len(fitted)} runs), per "
         "framework family (HugeCTR, PyTorch, other): which kernel model to use (roofline or calibrated, the one "
         "with the lower geomean error on that family's fit-round runs) and two framework constants with it; "
         f"scored on everything else ({len(held)} runs: the other MLPerf rounds and DeepLearningExamples, whose "
         "PyTorch rows use the PyTorch family's choice). Rows of the fit round are in-sample for that column.", ""]
    L += ["## Headline", "",
         "| runs | n | roofline geomean / max % | calibrated geomean / max % | fitted geomean / max % | "
         f"target (< {TARGET_PCT:.0f}% geomean) |", "|---|---|---|---|---|---|"]
    single = runs["nodes"] == 1
    for label, g in (("held out (not the fit round)", held), ("held out, single-node runs", held[single[~runs["fit_set"]]]),
                     (f"fit round {fit_round} (in-sample)", fitted), ("all", runs)):
        if len(g) == 0:
            continue
        cells = [f"{geomean(g[f'err_{n}_pct']):.1f} / {g[f'err_{n}_pct'].max():.1f}"
                 for n in ("roofline", "calibrated", "fit")]
        ok = "met" if geomean(g["err_fit_pct"]) < TARGET_PCT else "**missed**"
        L.append(f"| {label} | {len(g)} | " + " | ".join(cells) + f" | {ok} |")
    if "pred_calibrated_low_ms" in runs.columns:
        from hybrid.corrections.intervals import coverage_pct

        L += ["", "## 80% iteration-time intervals (calibrated column)", "",
              "Each run's interval is its graph scheduled with every op at the low / high end of the calibrated "
              "model's own 80% interval (`hybrid.engine.simulate`; the embedding lookups, which no public source "
              "times, stay at the roofline and borrow the widest kernel band calibrated, flagged uncalibrated: "
              "a band borrowed from no embedding measurement). Share of runs whose published time is inside "
              "(target 75-85%):", "", "| runs | n | inside % | median width (high/low) |", "|---|---|---|---|"]
        for label, g in (("held out (not the fit round)", held), (f"fit round {fit_round}", fitted), ("all", runs),
                         *((f"source: {k}", v) for k, v in runs.groupby("source")),
                         *((f"nodes: {k}", v) for k, v in runs.groupby("nodes"))):
            if len(g) == 0:
                continue
            cov = coverage_pct(g["measured_ms"].to_numpy(), g["pred_calibrated_low_ms"].to_numpy(),
                               g["pred_calibrated_high_ms"].to_numpy())
            width = float(np.median(g["pred_calibrated_high_ms"] / g["pred_calibrated_low_ms"]))
            L.append(f"| {label} | {len(g)} | {cov:.1f} | {width:.2f}x |")
    L += ["", "## Per source", ""] + table_lines(runs, "source")
    L += ["", "## Per GPU count", ""] + table_lines(runs, "gpus")
    L += ["", "## Per framework family", ""] + table_lines(runs, "family")
    L += ["", "## Per system", ""] + table_lines(runs, "system_label")
    if not any(k != "zipf" for k in fits):  # nothing fitted (tables given without a fit round): no table
        return "\n".join(L) + "\n"
    L += ["", "## Fitted framework constants (us)", "",
          "Fitted with `Overheads.fit_report(..., fit=('launch_us', 'iteration_us'))`: log error of the iteration "
          "+ a weak prior at the family's host overheads (engine defaults, launch 15 us and iteration 100 us; "
          "HugeCTR: its CUDA-graph values, launch 1 us, iteration 20 us); `se` from the Jacobian; "
          "`identified` = the data determine it (se < half the value). Unidentified constants are the prior's.", "",
          "The gate: the fit is used only where it beats, on its own fit-round runs (in-sample), the calibrated "
          "kernel model with the family's default overheads (nothing fitted); otherwise that predictor answers for "
          "the family in the `fitted` column (the last columns; gate added 2026-11-27, after the held-out columns "
          "had been read: before it, every family used its fit).", "",
          "| family | fit runs (systems) | kernel model chosen on the fit round | launch_us (se, identified) | "
          "iteration_us (se, identified) | median abs log error | fit-round geomean %: fitted / calibrated, "
          "defaults | used |",
          "|---|---|---|---|---|---|---|---|"]
    for fam, val in fits.items():
        if fam == "zipf":
            continue
        name, _ov, rep, n, nsys = val
        gate = rep["gate"]
        chosen = rep["kernel_model"]
        cells = [f"{rep['params'][p]:.1f} ({rep['se_us'][p]:.1f}, {'yes' if rep['identified'][p] else 'no'})"
                 for p in ("launch_us", "iteration_us")]
        used = f"fit ({chosen})" if gate["kept"] else "calibrated, default overheads"
        L.append(f"| {fam} | {n} ({nsys}) | {chosen} | " + " | ".join(cells)
                 + f" | {rep['median_abs_log_error']:.3f} | {gate['fitted_pct']:.1f} / {gate['calibrated_pct']:.1f}"
                 f" | {used} |")
    if fits.get("zipf") and fits["zipf"][1]:
        alpha, scores = fits["zipf"]
        L += ["", "## Hybrid embedding: Criteo category skew (fitted on the fit round)", "",
              f"HugeCTR runs from v1.0 on are built with its hybrid embedding "
              "(`hybrid.workloads.dlrm_hybrid_embedding`: frequent categories replicated, infrequent ones spread "
              "over all GPUs, HugeCTR's own frequency thresholds; hierarchical all-to-all across nodes; one grouped "
              "all-reduce; CUDA-graph host overheads). The one unknown, the Zipf exponent of every table's category "
              f"counts, is chosen on the {fit_round} HugeCTR runs (roofline kernels, lowest geomean error) and used "
              f"unchanged everywhere else: **alpha = {alpha:g}**.", "",
              "| zipf alpha | " + " | ".join(f"{a:g}" for a in scores) + " |",
              "|---|" + "---|" * len(scores),
              f"| {fit_round} HugeCTR geomean % | " + " | ".join(f"{v:.1f}" for v in scores.values()) + " |"]
    if plot is None:
        return "\n".join(L) + "\n"
    L += ["", "## Scaling curve", "", f"![predicted vs measured throughput]({plot})", "",
          "| series | GPUs | global batch | measured ms | fitted ms | calibrated ms | roofline ms |", "|---|---|---|---|---|---|---|"]
    sc = runs[(runs["source"] == "DeepLearningExamples") | (runs["system_label"].str.contains("NVIDIA dgxa100")
                                                             & (runs["family"] == "hugectr"))]
    for (lab, gpus), g in sc.groupby([np.where(sc["source"] == "DeepLearningExamples", sc["system_label"],
                                               sc["source"] + " NVIDIA DGX A100 HugeCTR"), "gpus"], sort=True):
        L.append(f"| {lab} | {gpus} | {int(g['global_batch'].median())} | {g['measured_ms'].median():.3f} | "
                 f"{g['pred_fit_ms'].median():.3f} | {g['pred_calibrated_ms'].median():.3f} | "
                 f"{g['pred_roofline_ms'].median():.3f} |")
    return "\n".join(L) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--mlperf", nargs="+", default=None, help="MLPerf-format DLRM runs tables to score")
    ap.add_argument("--json", action="store_true", help="print a JSON summary (with --mlperf), write nothing")
    ap.add_argument("--fit-round", default="v1.0", help="MLPerf round the framework constants are fitted on")
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.md")))
    args = ap.parse_args(argv)
    t0 = time.time()
    command = "python " + " ".join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])])
    catalog = default_catalog()
    try:
        data_dir = public_data_dir(args.data_dir, required=args.mlperf is None)

        def calibrate(cat: Catalog) -> tuple:
            if data_dir is None:
                return HybridPredictor.roofline_only(cat), "no public data directory: roofline"
            return public_calibration(data_dir, cat)

        if args.mlperf:
            given = read_mlperf([Path(f) for f in args.mlperf])
            runs, skipped = map_mlperf(given, catalog)
            runs = drop_unplaceable(runs, with_node_systems(runs, catalog), skipped)
            n_input = len(given)
            fit_note = "none (default overheads)"
            if len(runs) == 0:  # nothing to score: no calibration and fit-round scoring (minutes) for an empty answer
                print(json.dumps(summary_json(runs, skipped, n_input, fit_note), indent=2) if args.json else
                      f"no run to score: {n_input} MLPerf rows read, all skipped ("
                      + ", ".join(f"{v} {k}" for k, v in sorted(skipped.items())) + ")")
                return 0
            in_fit_round = (runs["round"] == args.fit_round).to_numpy()
            fit_rows = pd.DataFrame()
            if data_dir is not None:
                fit_files = sorted(Path(f) for f in glob.glob(str(data_dir / MLPERF_GLOB)))
                fit_files = [f for f in fit_files if f"_{args.fit_round}_" in f.name]
                if fit_files:
                    fit_rows, _ = map_mlperf(read_mlperf(fit_files), catalog)
                    fit_note = f"framework constants fitted on {fit_files[0].name} ({len(fit_rows)} runs)"
            catalog = with_node_systems(pd.concat([runs, fit_rows], ignore_index=True), catalog)
            calibrated, calib_note = calibrate(catalog)
            scored_in = pd.concat([fit_rows.assign(round="__fit__"), runs.assign(round="__score__")],
                                  ignore_index=True) if len(fit_rows) else runs.assign(round="__score__")
            scored, fits = score(scored_in, catalog, calibrated, "__fit__" if len(fit_rows) else None)
            # the given runs of the fit round (in-sample where they are the fitted file's own runs)
            scored = scored[scored["round"] == "__score__"].assign(fit_set=in_fit_round & (len(fit_rows) > 0))
            summary = summary_json(scored, skipped, n_input, fit_note)
            if args.json:
                print(json.dumps(summary, indent=2))
            else:
                print(report(scored, skipped, n_input, fits if len(fit_rows) else {}, args.fit_round, calib_note,
                             command, time.time() - t0, None, given=list(args.mlperf), fit_note=fit_note))
            return 0
        files = sorted(Path(f) for f in glob.glob(str(data_dir / MLPERF_GLOB)))
        given = read_mlperf(files)
        runs, skipped = map_mlperf(given, catalog)
        dle = map_dle(data_dir / DLE_FILE, catalog)
        all_runs = pd.concat([runs, dle], ignore_index=True, sort=False)
        catalog = with_node_systems(all_runs, catalog)
        calibrated, calib_note = calibrate(catalog)
        scored, fits = score(all_runs, catalog, calibrated, args.fit_round)
        plot = scaling_plot(scored, Path(args.out).with_name("scaling.png"))
        text = report(scored, skipped, len(given), fits, args.fit_round, calib_note, command, time.time() - t0, plot)
    except HybridError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text)
    write_benchmark_results(args.out, text)
    if "pred_calibrated_low_ms" in scored.columns:  # per-row intervals for experiments/e2e_intervals (form error)
        rows = pd.DataFrame({"source": "DLRM " + scored["source"], "kind": "training",
                             "key": scored["system_label"].astype(str) + " " + scored["gpus"].astype(str) + " GPUs",
                             "measured": scored["measured_ms"], "predicted": scored["pred_calibrated_ms"],
                             "low": scored["pred_calibrated_low_ms"], "high": scored["pred_calibrated_high_ms"],
                             "unit": "ms"})
        write_text(Path(args.out).with_name("e2e_rows.csv"), rows.to_csv(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
