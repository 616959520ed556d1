"""Calibration runs and the model registry, tracked in MLflow.

- :mod:`hybrid.tracking.store`      tracking-URI resolution, the default local SQLite store, locking/retries
- :mod:`hybrid.tracking.inputs`     measurement tables and profiler bundles given on the command line
- :mod:`hybrid.tracking.evaluation` per-row prediction frames and their error figures
- :mod:`hybrid.tracking.registry`   logging, registering and loading calibrated predictors by name/version
- :mod:`hybrid.tracking.calibrate`  one calibration run: fit, evaluate on held-out data, log, register

Submodules import MLflow lazily; importing this package is cheap.
"""
