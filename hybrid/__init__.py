"""hybrid: analytical-plus-learned performance prediction for ML workloads on GPU systems.

The package is organised by layer:

- :mod:`hybrid.hardware`    device and system descriptions (catalog of datasheet specs)
- :mod:`hybrid.ops`         analytical op cost models (FLOPs, bytes, roofline, alpha-beta collectives)
- :mod:`hybrid.data`        canonical measurement schema, importers for public formats, local profiler
- :mod:`hybrid.corrections` learned corrections (XGBoost kernel/embedding models, sigmoid collectives)
- :mod:`hybrid.tracking`    calibration runs and model registry in MLflow
- :mod:`hybrid.engine`      multi-rank critical-path simulation
- :mod:`hybrid.workloads`   DLRM and transformer workload builders
- :mod:`hybrid.sharding`    embedding-table sharding plans and search
- :mod:`hybrid.reports`     error metrics, plots and HTML reports
- :mod:`hybrid.cli`         the ``hybrid`` command line
"""

__version__ = "0.1.0"
