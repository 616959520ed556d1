"""Shared fixtures: the real public datasets beside the checkout, and an isolated MLflow/tmp environment.

Tests that need data the checkout may lack (``../shared/datasets``, a committed profile bundle) use the
``shared_datasets`` fixture, the ``data_files(fmt)`` marker (one case per data file) or call
:func:`skip_or_fail`: on a developer's machine they skip; in CI (``CI`` set to a true value, as GitHub Actions
and most CI systems do) a missing dataset is a failure, so a broken data mount cannot pass silently. Only
pytest's public hooks and markers are used (``pytest_generate_tests``, ``pytest_runtest_setup``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from hybrid.data.paths import public_data_dir

_TRUE = {"1", "true", "yes", "on"}


def in_ci() -> bool:
    """True when the ``CI`` environment variable is set to a true value."""
    return os.environ.get("CI", "").strip().lower() in _TRUE


def skip_or_fail(reason: str) -> None:
    """Skip the test (developer machine) or fail it (CI) because required data is missing."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: required data must be present)", pytrace=False)
    pytest.skip(reason)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "data_files(fmt): parametrize the test's `path` argument over every public "
                            "data file of importer format `fmt` (none found: skip locally, fail in CI)")
    config.addinivalue_line("markers", "missing_data(reason): the data this test needs is missing "
                            "(skip locally, fail in CI)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``@pytest.mark.data_files(fmt)``: one test per data file of importer ``fmt``; when there are none, a single
    ``no-data`` case marked ``missing_data`` (pytest's own empty parameter set would always skip)."""
    marker = metafunc.definition.get_closest_marker("data_files")
    if marker is None:
        return
    from hybrid.data.importers import IMPORTERS

    fmt = marker.args[0]
    root = public_data_dir(required=False)
    files = IMPORTERS[fmt].find(root) if root is not None else []
    if files:
        metafunc.parametrize("path", files, ids=[p.relative_to(root).as_posix() for p in files])
    else:
        reason = f"no {fmt} data files (public datasets not available: set HYBRID_DATA_DIR)"
        metafunc.parametrize("path", [pytest.param(None, id="no-data", marks=pytest.mark.missing_data(reason))])


def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("missing_data")
    if marker is not None:
        skip_or_fail(marker.args[0])


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    """``../shared/datasets`` (or ``$HYBRID_DATA_DIR``). CI must have it (a failure there); elsewhere tests
    needing it skip."""
    path = public_data_dir(required=False)
    if path is None:
        skip_or_fail("public datasets not available (set HYBRID_DATA_DIR)")
    return path


@pytest.fixture(scope="session")
def catalog():
    from hybrid.hardware.catalog import default_catalog

    return default_catalog()


@pytest.fixture(scope="session")
def load_experiment():
    """A loader of benchmark scripts: ``load_experiment("nlp_e2e")`` is ``experiments/nlp_e2e/run.py`` as a fresh
    module (registered in ``sys.modules``, where dataclasses look their module up); ``script`` names another file
    of that folder."""
    root = Path(__file__).resolve().parents[1] / "experiments"

    def load(name: str, script: str = "run.py") -> ModuleType:
        key = f"experiment_{name}_{Path(script).stem}"
        spec = importlib.util.spec_from_file_location(key, root / name / script)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[key] = mod
        spec.loader.exec_module(mod)
        return mod

    return load


@pytest.fixture(scope="session")
def cpu_variant_holdout():
    """A held-out check on the committed CPU profile: ``fit(prefix)`` fits a pointwise model (200 trees, depth 6)
    on its pointwise rows without a random quarter (seed 0) of those whose variant starts with ``prefix`` and
    returns ``(model, held-out rows, catalog, the prefix's rows)``."""
    import numpy as np

    from hybrid.corrections import PointwiseXGB, XGBParams
    from hybrid.data.bundle import load_bundle
    from hybrid.ops.roofline import roofline

    bundle = Path(__file__).resolve().parents[1] / "datasets" / "cpu-amd-epyc-1c"

    def fit(prefix: str):
        table, cat = load_bundle(bundle)
        pw = table[table["op"].isin(["elementwise", "layernorm", "rmsnorm", "softmax", "batchnorm"])]
        pw = pw.reset_index(drop=True)
        mine = pw["variant"].astype("string").str.startswith(prefix, na=False).to_numpy()
        test = mine & (np.random.default_rng(0).random(len(pw)) < 0.25)
        train, held = pw[~test].reset_index(drop=True), pw[test].reset_index(drop=True)
        model = PointwiseXGB(XGBParams(n_estimators=200, max_depth=6)).fit(train, roofline(train, cat), cat)
        return model, held, cat, pw[mine]

    return fit
