"""Where data lives: the user's public-data directory and the project's own committed measurements."""

from __future__ import annotations

import os
from pathlib import Path

from hybrid.errors import InvalidInputError

#: Environment variable naming a local mirror of the public datasets (the layout of ``shared/datasets``).
DATA_DIR_ENV = "HYBRID_DATA_DIR"


def repo_root() -> Path:
    """The source checkout this package was imported from (``hybrid/..``)."""
    return Path(__file__).resolve().parents[2]


def public_data_dir(explicit: str | os.PathLike | None = None, *, required: bool = True) -> Path | None:
    """The public-data directory: ``explicit``, else ``$HYBRID_DATA_DIR``, else ``../shared/datasets`` beside
    the checkout (how CI and developers' machines are laid out). Raises if none exists and ``required``."""
    candidates = []
    if explicit:
        candidates.append(Path(explicit))
    elif os.environ.get(DATA_DIR_ENV):
        candidates.append(Path(os.environ[DATA_DIR_ENV]))
    else:
        candidates.append(repo_root().parent / "shared" / "datasets")
    for c in candidates:
        if c.is_dir():
            return c.resolve()
    if required:
        raise InvalidInputError(
            f"public data directory not found ({candidates[0]}); pass --data-dir or set {DATA_DIR_ENV} "
            "to a local mirror (see `hybrid data sources` for where each file comes from)"
        )
    return None


def project_datasets_dir() -> Path:
    """The project's own committed measurements (``datasets/`` in the checkout)."""
    return repo_root() / "datasets"
