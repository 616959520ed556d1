"""Published DLRM model variants, built in by name with their sources.

=================  ==========================================================================================
``mlperf``         MLPerf Training DLRM (v0.7-v2.1): Criteo Terabyte, 26 one-hot tables with the reference
                   cardinalities at ``--max-ind-range=40000000``, dim 128, bottom 13-512-256-128, top
                   1024-1024-512-256-1, dot interaction, SGD. Source: facebookresearch/dlrm
                   ``dlrm_s_pytorch.py`` / ``bench/run_and_time.sh`` (the MLPerf reference implementation).
``mlperf-dcnv2``   MLPerf Training DLRM-DCNv2 (v3.0 on): Criteo 1TB multi-hot (per-table bag sizes 1..100),
                   3 low-rank (512) DCNv2 cross layers, same MLPs, Adagrad. Source: mlcommons/training
                   ``recommendation_v2/torchrec_dlrm`` README (``--num_embeddings_per_feature``,
                   ``--multi_hot_sizes``, ``--interaction_type=dcn --dcn_num_layers=3 --dcn_low_rank_dim=512``).
``dle-small``      NVIDIA DeepLearningExamples PyTorch DLRM, "small" = frequency threshold 15 (~15 GB of FP32
                   tables), same MLPs and dot interaction as MLPerf.
``dle-large``      same, "large" = frequency threshold 3 (~82 GB).
=================  ==========================================================================================

DeepLearningExamples publishes the total model size of its two variants, not the per-table row counts (they
come out of its preprocessing). The built-in tables keep the MLPerf cardinalities of every table below
:data:`DLE_ROW_CAP` and give the big tables the rows that make the total match the published size; their
lookup cost (one-hot, 128-wide rows) does not depend on how the rows split, only placement does. Their parallelism
is the README's "hybrid parallel": tables and the bottom MLP model-parallel (``bottom_mlp_placement:
model_parallel``: one GPU runs the bottom MLP on the global batch and sends its output in the all-to-all), the
top MLP data-parallel.

``dlrm_variant("mlperf", gpus=8, system="DGX-A100", ...)`` returns a :class:`DLRMConfig`; every keyword is a
config field. Mixed precision is ``dtype="fp16"`` (MLP GEMMs and exchanges in half precision) with
``embedding_dtype`` the tables' storage type (``fp32`` for DeepLearningExamples' AMP, ``fp16`` for HugeCTR).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hybrid.errors import InvalidInputError
from hybrid.workloads.dlrm import DLRMConfig, TableConfig

#: Criteo Terabyte table cardinalities of the MLPerf reference (``--max-ind-range=40000000``).
CRITEO_TB_40M = (39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951, 2953546, 403346, 10, 2208,
                 11938, 155, 4, 976, 14, 39979771, 25641295, 39664984, 585935, 12972, 108, 36)
#: Criteo 1TB cardinalities of the DCNv2 reference (``--num_embeddings_per_feature``).
CRITEO_1TB_DCNV2 = (40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209,
                    11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36)
#: Multi-hot bag size per table of the DCNv2 reference (``--multi_hot_sizes``).
DCNV2_MULTI_HOT = (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1)
#: Published FP32 model sizes of the DeepLearningExamples variants (bytes; README: ~15 GB and ~82 GB).
DLE_MODEL_BYTES = {"dle-small": 15e9, "dle-large": 82e9}
#: Tables at or above this many rows are the ones the frequency threshold prunes (scaled to the model size).
DLE_ROW_CAP = 1_000_000

MLP_BOTTOM = (512, 256, 128)
MLP_TOP = (1024, 1024, 512, 256, 1)


def _mlperf_tables() -> list[TableConfig]:
    return [TableConfig(f"C{i + 1}", n, 128, 1.0) for i, n in enumerate(CRITEO_TB_40M)]


def _dcnv2_tables() -> list[TableConfig]:
    return [TableConfig(f"C{i + 1}", n, 128, float(h))
            for i, (n, h) in enumerate(zip(CRITEO_1TB_DCNV2, DCNV2_MULTI_HOT, strict=True))]


def _dle_tables(name: str) -> list[TableConfig]:
    total_rows = DLE_MODEL_BYTES[name] / (128 * 4)
    small = sum(n for n in CRITEO_TB_40M if n < DLE_ROW_CAP)
    big = sum(n for n in CRITEO_TB_40M if n >= DLE_ROW_CAP)
    scale = (total_rows - small) / big
    return [TableConfig(f"C{i + 1}", n if n < DLE_ROW_CAP else max(int(round(n * scale)), 1), 128, 1.0)
            for i, n in enumerate(CRITEO_TB_40M)]


def _model(name: str, tables: list[TableConfig], **model: Any) -> DLRMConfig:
    """The published model as a :class:`DLRMConfig`; the job fields (system, GPUs, batch, dtype) are defaults that
    :func:`dlrm_variant` overrides: 8 GPUs of a DGX A100, 55296 / 8 samples per GPU, FP32."""
    return DLRMConfig(tables=tuple(tables), name=name, system="DGX-A100", gpus=8, batch_size_per_gpu=55296 // 8,
                      dtype="fp32", dense_features=13, bottom_mlp=MLP_BOTTOM, top_mlp=MLP_TOP, embedding_dim=128,
                      dcn_layers=3, dcn_low_rank=512, **model)


@dataclass(frozen=True)
class Variant:
    """A named DLRM model: the :class:`DLRMConfig` it is (tables, MLPs, interaction, optimizer, placement of the
    bottom MLP) and where it comes from."""

    name: str
    description: str
    source: str
    config: DLRMConfig

    def tables(self) -> list[TableConfig]:
        return list(self.config.tables)


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("mlperf", "MLPerf Training DLRM (Criteo Terabyte, 26 one-hot tables, dot interaction)",
            "facebookresearch/dlrm dlrm_s_pytorch.py + bench/run_and_time.sh (--max-ind-range=40000000); "
            "MLCommons training_results_v0.7-v2.1", _model("mlperf", _mlperf_tables())),
    Variant("mlperf-dcnv2", "MLPerf Training DLRM-DCNv2 (Criteo 1TB multi-hot, 3 low-rank cross layers, Adagrad)",
            "mlcommons/training recommendation_v2/torchrec_dlrm README",
            _model("mlperf-dcnv2", _dcnv2_tables(), interaction="dcn", optimizer="adagrad")),
    Variant("dle-small", "NVIDIA DeepLearningExamples PyTorch DLRM, frequency threshold 15 (~15 GB FP32 tables)",
            "NVIDIA/DeepLearningExamples PyTorch/Recommendation/DLRM README (model sizes; per-table rows derived)",
            _model("dle-small", _dle_tables("dle-small"), bottom_mlp_placement="model_parallel")),
    Variant("dle-large", "NVIDIA DeepLearningExamples PyTorch DLRM, frequency threshold 3 (~82 GB FP32 tables)",
            "NVIDIA/DeepLearningExamples PyTorch/Recommendation/DLRM README (model sizes; per-table rows derived)",
            _model("dle-large", _dle_tables("dle-large"), bottom_mlp_placement="model_parallel")),
)}
ALIASES = {"mlperf-dlrm": "mlperf", "dlrm-dcnv2": "mlperf-dcnv2", "dcnv2": "mlperf-dcnv2", "fl15": "dle-small",
           "fl3": "dle-large", "dle-fl15": "dle-small", "dle-fl3": "dle-large"}


def resolve_variant(name: str) -> Variant:
    """A variant by name or alias (case-insensitive); unknown names list the known ones."""
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key not in VARIANTS:
        raise InvalidInputError(f"unknown DLRM variant {name!r}; known: {', '.join(VARIANTS)} "
                                f"(aliases: {', '.join(ALIASES)})")
    return VARIANTS[key]


def apply_overrides(doc: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """A variant's document ``doc`` (:meth:`DLRMConfig.to_dict`) with ``fields`` over it. Tables given anew
    (``tables``, ``num_tables``, ``table_generator``) replace the variant's; else an ``embedding_dim`` is the width
    of the variant's own tables, which carry the variant's width each (it was only the default of tables given
    without one, so the override was dropped: the config said 64, every table stayed 128)."""
    out = dict(doc)
    if any(k in fields for k in ("tables", "num_tables", "table_generator")):
        out.pop("tables", None)
    elif fields.get("embedding_dim") is not None:
        out["tables"] = [{**t, "embedding_dim": fields["embedding_dim"]} for t in out["tables"]]
    out.update(fields)
    return out


def dlrm_variant(name: str, **fields: Any) -> DLRMConfig:
    """The config of a published DLRM variant; ``fields`` (gpus, system, batch_size_per_gpu, dtype, plan, ...)
    override the defaults (8 GPUs of a DGX A100, 55296 / 8 samples per GPU, FP32)."""
    v = resolve_variant(name)
    doc = v.config.to_dict()
    doc["description"] = f"{v.description}. Source: {v.source}"
    doc = apply_overrides(doc, {k: val for k, val in fields.items() if val is not None})
    plan = doc.pop("plan", None)
    config = DLRMConfig.from_dict(doc)
    return config.with_plan(plan) if plan is not None else config
