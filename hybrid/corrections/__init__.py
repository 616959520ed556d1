"""Learned corrections on top of the analytical roofline: XGBoost kernel and embedding-lookup models,
sigmoid bus-bandwidth curves for collectives, and :class:`HybridPredictor`, which dispatches rows to them."""

from hybrid.corrections.base import Correction
from hybrid.corrections.collective_sigmoid import CollectiveSigmoid
from hybrid.corrections.embedding_xgb import EmbeddingXGB
from hybrid.corrections.kernel_xgb import GemmXGB, PointwiseXGB, XGBCorrection, XGBParams
from hybrid.corrections.predictor import HybridPredictor, default_corrections

__all__ = ["CollectiveSigmoid", "Correction", "EmbeddingXGB", "GemmXGB", "HybridPredictor", "PointwiseXGB",
           "XGBCorrection", "XGBParams", "default_corrections"]
