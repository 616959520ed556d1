"""Hardware description: devices (GPUs, CPUs) and systems (nodes, fabrics, clusters).

Specs come from a catalog shipped with the package (``devices.toml``, ``systems.toml``), and users can add or
override entries from their own TOML file (``HYBRID_CATALOG`` or ``Catalog.load(extra=...)``).
"""

from hybrid.hardware.catalog import Catalog, default_catalog
from hybrid.hardware.device import Device, System

__all__ = ["Catalog", "Device", "System", "default_catalog"]
