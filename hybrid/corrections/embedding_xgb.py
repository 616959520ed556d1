"""XGBoost correction for embedding-bag lookups (forward and backward).

Same recipe as the kernel models (learn ``log(measured / reference)``), with features that describe the
lookup pattern: table rows, embedding dim, pooling factor, batch, number of tables, dtype, index
distribution, the expected number of distinct rows touched
(:func:`hybrid.ops.families.expected_unique_rows`), the bytes touched against the device's cache and the
optimizer variant. The reference is the roofline, except for backward passes with a *dense* gradient
(variant ``dense_*``): PyTorch materialises a table-sized gradient (zero-fill, scatter, then the optimizer reads
and writes every row), which the sparse roofline ignores and which grows with the table, not the lookups. For
those rows the reference adds :data:`DENSE_GRAD_TABLE_PASSES` passes over the tables at memory bandwidth, so
the model extrapolates to tables larger than it was trained on instead of saturating.
The training data is the project's own profiler output (CPU bundles under ``datasets/``; GPU bundles where a
GPU was available), as there are no public embedding-bag measurements.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybrid.corrections.features import FEATURE_VERSION, dense_gradient, table_pass_us
from hybrid.corrections.kernel_xgb import XGBCorrection, XGBParams
from hybrid.hardware.catalog import Catalog

#: Full passes over the tables a dense-gradient backward makes (write zeros into the gradient, read it and
#: read + write the weights in the SGD update counts as ~3 streamed table sizes).
DENSE_GRAD_TABLE_PASSES = 3.0


def default_embedding_params() -> XGBParams:
    """Smaller trees than the kernel models: embedding profiles have hundreds, not tens of thousands, of rows."""
    return XGBParams(n_estimators=300, max_depth=5, learning_rate=0.06, min_child_weight=2.0)


class EmbeddingXGB(XGBCorrection):
    """Forward/backward embedding-bag time from table and batch features."""

    kind = "embedding"
    name = "embedding-xgb"
    families = ("embedding",)
    min_rows = 20

    def __init__(self, params: XGBParams | None = None, use_device_features: bool = True,
                 feature_version: int = FEATURE_VERSION, transfer: bool | None = None):
        super().__init__(params or default_embedding_params(), use_device_features, feature_version, transfer)

    def reference_us(self, table: pd.DataFrame, baseline: pd.DataFrame, catalog: Catalog) -> np.ndarray:
        """Roofline time, plus :data:`DENSE_GRAD_TABLE_PASSES` table passes for dense-gradient backward rows
        (feature version 2 on; version-1 models were fitted against the plain roofline)."""
        roof = baseline["time_us"].to_numpy(dtype=np.float64)
        if self.feature_version < 2:
            return roof
        return roof + DENSE_GRAD_TABLE_PASSES * dense_gradient(table) * table_pass_us(table, catalog)
