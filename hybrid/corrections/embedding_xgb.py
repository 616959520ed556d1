"""XGBoost correction for embedding-bag lookups (forward and backward).

Same recipe as the kernel models (learn ``log(measured / roofline)``), with features that describe the
lookup pattern: table rows, embedding dim, pooling factor, batch, number of tables, dtype, index
distribution, the expected number of distinct rows touched
(:func:`hybrid.ops.families.expected_unique_rows`) and the bytes touched against the device's cache.
The training data is the project's own profiler output (CPU bundles under ``datasets/``; GPU bundles where a
GPU was available), as there are no public embedding-bag measurements.
"""

from __future__ import annotations

from hybrid.corrections.kernel_xgb import XGBCorrection, XGBParams


def default_embedding_params() -> XGBParams:
    """Smaller trees than the kernel models: embedding profiles have hundreds, not tens of thousands, of rows."""
    return XGBParams(n_estimators=300, max_depth=5, learning_rate=0.06, min_child_weight=2.0)


class EmbeddingXGB(XGBCorrection):
    """Forward/backward embedding-bag time from table and batch features."""

    kind = "embedding"
    name = "embedding-xgb"
    families = ("embedding",)
    min_rows = 20

    def __init__(self, params: XGBParams | None = None, use_device_features: bool = True):
        super().__init__(params or default_embedding_params(), use_device_features)
