"""Vidur profiling tables (microsoft/vidur ``data/profiling``).

``compute/<device>/<org>/<model>/mlp.csv`` is wide: one row per ``(num_tokens,
num_tensor_parallel_workers)`` with ``time_stats.<op>.{min,max,mean,median,std}`` in milliseconds for the ops
of one transformer layer, profiled in FP16 by ``vidur/profiling/mlp/mlp_impl.py`` (sarathi layers):

==========================  ==================================================================================
``attn_pre_proj``           QKV projection, ``[T, h] x [h, (q + 2 kv) d / tp]``
``attn_post_proj``          output projection, ``[T, q d / tp] x [q d / tp, h]``
``mlp_up_proj``             ``[T, h] x [h, (2 if gated else 1) f / tp]``
``mlp_down_proj``           ``[T, f / tp] x [f / tp, h]``
``mlp_act``                 SiLU-and-multiply (gated: reads 2 f/tp, writes f/tp per token) or GELU
``input_layernorm``         RMSNorm (LayerNorm for phi-2) over ``[T, h]``; also ``post_attention_layernorm``
``attn_rope``               rotary embedding of q and k: ``T (q + kv) d / tp`` elements (rotary dim = head dim)
``add``                     residual add over ``[T, h]``; phi-2's parallel block adds attention + MLP + residual
                            (two add kernels, timed together)
``emb``                     vocab-parallel embedding gather with masking: not a canonical op, not imported
==========================  ==================================================================================

(``T`` tokens, ``h`` hidden size, ``q``/``kv`` query/key-value heads, ``d = h / q`` head dim, ``f`` MLP size,
``tp`` tensor-parallel degree.) GEMMs with ``T = 1`` are recorded as ``gemv``. The model dimensions come from
the CSV's own ``n_head, n_kv_head, n_embd, n_expanded_embd, use_gated_mlp`` columns and are checked against
:data:`MODEL_CONFIGS` (published configurations); a file without those columns needs a known model folder.

``network/<system>/{all_reduce,send_recv}.csv``: one row per ``(size, num_workers, devices_per_node)``; ``size``
is the FP16 buffer in bytes (``vidur/profiling/collectives``: ``"size": self._size * 2``), which is the
nccl-tests size for both ops; ``n_nodes = num_workers / devices_per_node``; 3 timed steps per row.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid.data.importers._common import (
    as_paths,
    catalog_or_default,
    concat,
    csv_line,
    display_path,
    finish,
    numeric,
    read_csv_checked,
    resolve_system_name,
    warn,
)
from hybrid.errors import HybridError, ImportFormatError, UnknownDeviceError
from hybrid.hardware.catalog import Catalog


@dataclass(frozen=True)
class ModelConfig:
    """Transformer dimensions that fix the GEMM shapes of one layer."""

    hidden: int
    heads: int
    kv_heads: int
    intermediate: int  # one MLP projection's width (for gated MLPs: gate and up each)
    gated: bool
    norm: str  # "rmsnorm" or "layernorm"
    activation: str  # elementwise variant of mlp_act
    parallel_block: bool = False  # attention and MLP read the same input (no post-attention norm)
    source: str = ""


#: Published configurations (Hugging Face ``config.json`` of each model at its release).
MODEL_CONFIGS: dict[str, ModelConfig] = {
    "Llama-2-7b-hf": ModelConfig(4096, 32, 32, 11008, True, "rmsnorm", "swiglu",
                                 source="meta-llama/Llama-2-7b-hf config.json"),
    "Llama-2-70b-hf": ModelConfig(8192, 64, 8, 28672, True, "rmsnorm", "swiglu",
                                  source="meta-llama/Llama-2-70b-hf config.json"),
    "Meta-Llama-3-8B": ModelConfig(4096, 32, 8, 14336, True, "rmsnorm", "swiglu",
                                   source="meta-llama/Meta-Llama-3-8B config.json"),
    "Meta-Llama-3-70B": ModelConfig(8192, 64, 8, 28672, True, "rmsnorm", "swiglu",
                                    source="meta-llama/Meta-Llama-3-70B config.json"),
    "CodeLlama-34b-Instruct-hf": ModelConfig(8192, 64, 8, 22016, True, "rmsnorm", "swiglu",
                                             source="codellama/CodeLlama-34b-Instruct-hf config.json"),
    "internlm-20b": ModelConfig(5120, 40, 40, 13824, True, "rmsnorm", "swiglu",
                                source="internlm/internlm-20b config.json"),
    # Qwen's config.json gives intermediate_size 49152 for gate+up together, i.e. 24576 per projection.
    "Qwen-72B": ModelConfig(8192, 64, 64, 24576, True, "rmsnorm", "swiglu",
                            source="Qwen/Qwen-72B config.json (intermediate_size 49152 = 2 x 24576)"),
    "phi-2": ModelConfig(2560, 32, 32, 10240, False, "layernorm", "gelu", parallel_block=True,
                         source="microsoft/phi-2 config.json (parallel attention + MLP, gelu_new)"),
}

#: Vidur op -> canonical op kind handled in :func:`_op_rows`.
VIDUR_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "mlp_act", "input_layernorm",
             "post_attention_layernorm", "attn_rope", "add")
NOT_IMPORTED = ("emb",)
MS_TO_US = 1000.0  # Vidur's time_stats are milliseconds
_STATS = {"median": "time_us", "std": "time_us_std", "min": "time_us_min", "max": "time_us_max"}


def _model_dims(df: pd.DataFrame, path: Path) -> ModelConfig:
    name = path.parent.name
    known = MODEL_CONFIGS.get(name)
    cols = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp")
    if all(c in df.columns for c in cols):
        # each column checked with its line: int() of the first row crashed on an empty column (NaN) and cut a
        # fractional 4096.5 to 4096 without a word
        dims = []
        for c in cols[:4]:
            v = numeric(df, c, path, positive=True)
            frac = v != np.floor(v)
            if frac.any():
                i = int(np.flatnonzero(frac)[0])
                raise ImportFormatError(f"{path}: line {csv_line(df, i)}, column {c!r}: {v[i]:g} is not a whole number")
            dims.append(v)
        gated_col = df["use_gated_mlp"].astype("string").str.strip().str.lower()
        flags = gated_col.isin(["true", "1", "1.0"]).to_numpy(dtype=bool)
        known_flag = gated_col.isin(["true", "false", "1", "0", "1.0", "0.0"]).fillna(False).to_numpy(dtype=bool)
        if not known_flag.all():
            i = int(np.flatnonzero(~known_flag)[0])
            raise ImportFormatError(f"{path}: line {csv_line(df, i)}, column 'use_gated_mlp': expected true/false, "
                                    f"got {df['use_gated_mlp'].iloc[i]!r}")
        for c, v in (*zip(cols[:4], dims, strict=True), ("use_gated_mlp", flags)):
            differs = v != v[0]
            if differs.any():
                i = int(np.flatnonzero(differs)[0])
                raise ImportFormatError(f"{path}: line {csv_line(df, i)}, column {c!r}: {df[c].iloc[i]} differs from "
                                        f"line {csv_line(df, 0)}'s {df[c].iloc[0]}: the model dimension columns change "
                                        "between rows; one model per file")
        gated = bool(flags[0])
        heads, kv, hidden, inter = (int(v[0]) for v in dims)
        row = dict(zip(cols, (heads, kv, hidden, inter, gated), strict=True))
        if min(heads, kv, hidden, inter) <= 0 or hidden % heads:
            raise ImportFormatError(f"{path}: implausible model dimensions {dict(row)}")
        post_norm = any(c.startswith("time_stats.post_attention_layernorm.") for c in df.columns)
        if known is not None:
            if (known.hidden, known.heads, known.kv_heads, known.intermediate, known.gated) != (
                    hidden, heads, kv, inter, gated):
                warn(path, f"model dimensions in the file differ from the published {name} config "
                           f"({known.source}); using the file's")
            norm, act = known.norm, known.activation
        else:
            norm = "rmsnorm" if gated else "layernorm"
            act = "swiglu" if gated else "gelu"
        return ModelConfig(hidden, heads, kv, inter, gated, norm, act, parallel_block=not post_norm,
                           source="file columns")
    if known is None:
        raise ImportFormatError(
            f"{path}: no model dimension columns ({', '.join(cols)}) and unknown model folder {name!r} "
            f"(known: {', '.join(MODEL_CONFIGS)})")
    return known


def _path_device(path: Path, catalog: Catalog) -> str:
    """The device folder of a compute file: ``compute/<device>/<org>/<model>/mlp.csv`` (the current layout) or
    ``profiling/<device>/mlp.csv`` (Vidur's earlier one, no model folders), whichever names a catalog device; the
    current layout's folder (resolved later, with its error) when neither does."""
    layered = path.parents[2].name if len(path.parents) > 2 else ""
    flat = path.parent.name if path.parent != path else ""
    for name in (layered, flat):
        if name:
            try:
                catalog.device(name)
                return name
            except HybridError:
                continue
    if not (layered or flat):
        raise ImportFormatError(f"{path}: cannot tell the device from the path; pass --device")
    return layered or flat


def _compute_file(path: Path, device: str | None, catalog: Catalog) -> pd.DataFrame:
    df = read_csv_checked(path, ("num_tokens",), what="Vidur compute (mlp.csv)")
    present = [op for op in VIDUR_OPS if f"time_stats.{op}.median" in df.columns]
    if not present:
        raise ImportFormatError(f"{path}: no time_stats.<op>.median columns for any of {', '.join(VIDUR_OPS)}")
    cfg = _model_dims(df, path)
    tokens = numeric(df, "num_tokens", path, positive=True)
    tp = (numeric(df, "num_tensor_parallel_workers", path, positive=True)
          if "num_tensor_parallel_workers" in df.columns else np.ones(len(df)))
    h, q, kv, f = cfg.hidden, cfg.heads, cfg.kv_heads, cfg.intermediate
    d = h // q
    if device is None:
        device = _path_device(path, catalog)
    frames = []
    for name in present:
        t = {k: MS_TO_US * numeric(df, f"time_stats.{name}.{stat}", path, required=stat == "median",
                                   positive=stat == "median")
             for stat, k in _STATS.items() if f"time_stats.{name}.{stat}" in df.columns}
        out = pd.DataFrame({"device": device, **t})
        out["variant"] = None
        if name in ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"):
            n_k = {
                "attn_pre_proj": ((q + 2 * kv) * d / tp, np.full(len(df), float(h))),
                "attn_post_proj": (np.full(len(df), float(h)), q * d / tp),
                "mlp_up_proj": ((2 if cfg.gated else 1) * f / tp, np.full(len(df), float(h))),
                "mlp_down_proj": (np.full(len(df), float(h)), f / tp),
            }[name]
            out["op"] = np.where(tokens == 1, "gemv", "gemm")
            out["b"], out["m"], out["n"], out["k"] = 1, tokens, n_k[0], n_k[1]
            out["variant"] = name
        elif name == "mlp_act":
            out["op"] = "elementwise"
            out["elements"] = tokens * f / tp
            out["variant"] = cfg.activation
        elif name in ("input_layernorm", "post_attention_layernorm"):
            out["op"] = cfg.norm
            out["rows"], out["hidden"] = tokens, float(h)
            out["variant"] = name
        elif name == "attn_rope":
            out["op"] = "elementwise"
            out["elements"] = tokens * (q + kv) * d / tp
            out["variant"] = "rope"
        elif name == "add":
            out["op"] = "elementwise"
            out["elements"] = tokens * h
            if cfg.parallel_block:  # attn + mlp + residual: two add kernels
                out["variant"], out["n_inputs"], out["n_outputs"], out["flops_per_element"] = "add3", 4, 2, 2.0
            else:
                out["variant"] = "add"
        out["tp"] = tp
        out["num_tokens"] = tokens
        out["_row"] = np.arange(len(df))
        out["_where"] = name  # the file's op, said with the line in the schema's errors
        frames.append(out)
    table = pd.concat(frames, ignore_index=True, sort=False)
    frac = np.zeros(len(table), dtype=bool)
    for c in ("n", "k", "elements"):
        if c in table.columns:
            frac |= (np.abs(table[c] - np.round(table[c])) > 1e-9).to_numpy()
    if frac.any():
        j = int(np.flatnonzero(frac)[0])
        i = int(table["_row"].iloc[j])
        raise ImportFormatError(
            f"{path}: line {csv_line(df, i)}: tensor-parallel degree {tp[i]:g} does not divide the model dimensions "
            f"of {table['variant'].iloc[j]} (hidden {h}, heads {q}, kv heads {kv}, MLP {f})")
    rows = table.pop("_row").to_numpy()
    table["_line"] = df.index.to_numpy()[rows] + 2  # the file's line of each row (csv_line), for the schema's errors
    table["dtype"] = "fp16"
    table["direction"] = "fwd"
    table["framework"] = "pytorch"
    table["model"] = path.parent.name
    return finish(table, path, catalog, source=f"vidur-compute:{display_path(path)}", device=None)


#: ``framework`` of Vidur compute rows marked as kernel times (:func:`kernel_timed`); listed in
#: :data:`hybrid.corrections.features.KERNEL_TIMING_FRAMEWORKS`.
KERNEL_TIMED_FRAMEWORK = "vidur"


def kernel_timed(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its Vidur compute rows (``source`` ``vidur-compute:...``) labelled as the kernel times they
    are (``framework`` = :data:`KERNEL_TIMED_FRAMEWORK`); other rows unchanged.

    Vidur's profiler (its default ``record_function`` method) reports the CUDA kernel time the PyTorch profiler
    records under each op, not the op's host dispatch: its smallest A100 ops take 1-7 us, which no host-timed
    eager op can. The importer still writes ``framework = "pytorch"`` (framework-timed) because the calibrations
    that mix many sources (``hybrid quickstart``, ``experiments/kernel_accuracy``, ``dlrm_gpu``) were developed
    with that label and transfer worse to a GPU they never saw with the correct one (``docs/corrections.md``,
    "Which rows are kernel-only"). Calibrations for kernel-bound workloads whose GPU ops run back to back
    (LLM serving and training: ``experiments/llm_inference``, ``llm_training``) use this, so their Hopper GEMMs
    are priced as XLA measured the H100's kernels, without a fitted "dispatch" that Vidur's rows never paid.
    """
    if "source" not in table.columns or "framework" not in table.columns:
        return table
    mask = table["source"].astype("string").str.startswith("vidur-compute:").fillna(False).to_numpy(dtype=bool)
    if not mask.any():
        return table
    out = table.copy()
    fw = out["framework"].astype(object).to_numpy()
    out["framework"] = np.where(mask, KERNEL_TIMED_FRAMEWORK, fw)
    return out


def import_vidur_compute(paths: Iterable[str | os.PathLike] | str | os.PathLike, device: str | None = None,
                         catalog: Catalog | None = None, system: str | None = None) -> pd.DataFrame:
    """Import Vidur ``mlp.csv`` compute profiles (one canonical row per op per token count and TP degree).

    The device is the ``compute/<device>/`` folder name unless ``device`` is given. Extra columns ``tp``,
    ``num_tokens`` and ``model`` record where each row came from.
    """
    del system
    cat = catalog_or_default(catalog)
    return concat([_compute_file(p, device, cat) for p in as_paths(paths)], "Vidur compute")


# ------------------------------------------------------------------------------------------ network
def _network_file(path: Path, device: str | None, system: str | None, catalog: Catalog) -> pd.DataFrame:
    df = read_csv_checked(path, ("size", "num_workers", "collective"), what="Vidur network")
    median = [c for c in df.columns if c.startswith("time_stats.") and c.endswith(".median")]
    if len(median) != 1:
        raise ImportFormatError(f"{path}: expected exactly one time_stats.<collective>.median column, "
                                f"found {len(median)}")
    stat = median[0][len("time_stats."):-len(".median")]
    coll = df["collective"].astype("string").str.strip().str.lower()
    if coll.isna().any() or (coll != stat).any():
        i = int(np.flatnonzero((coll.isna() | (coll != stat)).to_numpy())[0])
        if pd.isna(df["collective"].iloc[i]):
            # nothing from the collective column on: the line ends early (a truncated copy), not another collective
            after = list(df.columns[list(df.columns).index("collective"):])
            cut = bool(df.iloc[i][after].isna().all())
            raise ImportFormatError(f"{path}: line {csv_line(df, i)}: no collective"
                                    + (f" (nor any of {', '.join(after[1:])}): the line looks cut short; restore the "
                                       "complete file" if cut and len(after) > 1 else f" (expected {stat!r})"))
        raise ImportFormatError(f"{path}: line {csv_line(df, i)}: collective {df['collective'].iloc[i]!r} does not "
                                f"match the time_stats column ({stat!r})")
    if stat not in ("all_reduce", "send_recv", "all_gather", "reduce_scatter", "broadcast"):
        raise ImportFormatError(f"{path}: unknown collective {stat!r}")
    size = numeric(df, "size", path, positive=True)
    workers = numeric(df, "num_workers", path, positive=True)
    per_node = (numeric(df, "devices_per_node", path, positive=True) if "devices_per_node" in df.columns
                else workers)
    cap = (numeric(df, "max_devices_per_node", path, required=False, positive=True)
           if "max_devices_per_node" in df.columns else np.full(len(df), np.nan))
    # n_nodes = num_workers / devices_per_node: a devices_per_node of 1.5 was read as 2 nodes (rounded up), 1000 as
    # 1 node, 3 for 4 workers as 2 nodes of an uneven spread, all without a word
    for bad, why in ((per_node != np.floor(per_node), lambda i: f"devices_per_node {per_node[i]:g} is not a whole "
                      "number"),
                     (per_node > cap, lambda i: f"devices_per_node {per_node[i]:g} is more than max_devices_per_node "
                      f"{cap[i]:g}"),
                     (np.fmod(workers, per_node) != 0, lambda i: f"num_workers {workers[i]:g} is not a multiple of "
                      f"devices_per_node {per_node[i]:g} (workers are devices_per_node on each node)")):
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ImportFormatError(f"{path}: line {csv_line(df, i)}: {why(i)}")
    t = {k: MS_TO_US * numeric(df, f"time_stats.{stat}.{s}", path, required=s == "median", positive=s == "median")
         for s, k in _STATS.items() if f"time_stats.{stat}.{s}" in df.columns}
    folder = path.parent.name
    sys_key = resolve_system_name(system, catalog, path) if system else catalog.resolve_system(folder,
                                                                                               missing_ok=True)
    if device is None:
        if sys_key is not None:
            device = catalog.systems[sys_key].device
        else:
            device = folder.split("_")[0]
            if catalog.resolve_device(device, missing_ok=True) is None:
                # Neither reading of the folder names anything: say that the folder is read as the system and
                # how to name one, rather than only "unknown device 'mycluster'" (which suggests --device alone).
                raise UnknownDeviceError(
                    f"{path}: folder name {folder!r} is read as the system (Vidur's network/<system>/ layout), "
                    f"but the catalog has no system {folder!r} and no device {device!r}; pass --system NAME "
                    "(a catalog system, see `hybrid devices --systems`) or --device NAME (the GPU that ran it)")
            warn(path, f"catalog has no system {folder!r}; system left empty, device taken as {device!r}")
    out = pd.DataFrame({
        "device": device, "op": stat, "dtype": "fp16", **t, "repeats": 3, "size_bytes": size,
        "n_ranks": workers, "n_nodes": workers / per_node, "system": sys_key, "in_place": True if stat == "all_reduce" else None,
        "framework": "pytorch",
    })
    return finish(out, path, catalog, source=f"vidur-network:{display_path(path)}", device=None)


def import_vidur_network(paths: Iterable[str | os.PathLike] | str | os.PathLike, device: str | None = None,
                         catalog: Catalog | None = None, system: str | None = None) -> pd.DataFrame:
    """Import Vidur collective profiles (``all_reduce.csv``, ``send_recv.csv``).

    The system is the folder name (``a100_dgx``, ...) when the catalog knows it, else ``system``; the device is
    the system's device unless ``device`` is given.
    """
    cat = catalog_or_default(catalog)
    return concat([_network_file(p, device, system, cat) for p in as_paths(paths)], "Vidur network")
