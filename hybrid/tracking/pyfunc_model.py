"""MLflow "models from code" entry point for a calibrated :class:`~hybrid.corrections.predictor.HybridPredictor`.

MLflow copies this file into every logged model and runs it when the model is loaded with
``mlflow.pyfunc.load_model``; nothing is unpickled. The predictor itself is the ``predictor`` artifact: the
directory written by ``HybridPredictor.save`` (manifest JSON + XGBoost JSON/UBJ + sigmoid parameter JSON).
Hybrid's own commands do not go through pyfunc: they download that directory and call
``HybridPredictor.load`` on it (see :mod:`hybrid.tracking.registry`).
"""

from __future__ import annotations

import mlflow.pyfunc
import pandas as pd
from mlflow.models import set_model


class HybridPyfuncModel(mlflow.pyfunc.PythonModel):
    """``predict(table)`` -> the predictor's output (time_us, roofline_us, method, bound) per row."""

    def load_context(self, context) -> None:
        from hybrid.corrections.predictor import HybridPredictor

        self.predictor = HybridPredictor.load(context.artifacts["predictor"])

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        return self.predictor.predict(model_input)


set_model(HybridPyfuncModel())
