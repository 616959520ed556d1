"""Shared fixtures: the real public datasets beside the checkout, and an isolated MLflow/tmp environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybrid.data.paths import public_data_dir


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    """``../shared/datasets`` (or ``$HYBRID_DATA_DIR``). CI always has it; elsewhere tests needing it skip."""
    path = public_data_dir(required=False)
    if path is None:
        pytest.skip("public datasets not available (set HYBRID_DATA_DIR)")
    return path


@pytest.fixture(scope="session")
def catalog():
    from hybrid.hardware.catalog import default_catalog

    return default_catalog()
