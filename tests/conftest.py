"""Shared fixtures: the real public datasets beside the checkout, and an isolated MLflow/tmp environment.

Tests that need data the checkout may lack (``../shared/datasets``, a committed profile bundle) call
:func:`skip_or_fail`: on a developer's machine they skip; in CI (``CI`` set to a true value, as GitHub Actions
and most CI systems do) a missing dataset is a failure, so a broken data mount cannot pass silently.
"""

from __future__ import annotations

import os
from pathlib import Path

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In CI, a test parametrized over data files that found none (pytest's "got empty parameter set" skip)
    fails instead of skipping."""
    if not in_ci():
        return
    for item in items:
        empty = [m for m in item.own_markers
                 if m.name == "skip" and "empty parameter set" in str(m.kwargs.get("reason", ""))]
        if empty:
            item.own_markers = [m for m in item.own_markers if m not in empty]
            reason = str(empty[0].kwargs["reason"]).split(",")[0]
            item.user_properties.append(("missing_data", reason))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    reason = dict(item.user_properties).get("missing_data")
    if reason:
        pytest.fail(f"{reason}: no data files found (CI=true: required data must be present)", pytrace=False)


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
