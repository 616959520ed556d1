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
