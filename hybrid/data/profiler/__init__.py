"""The local profiler behind ``hybrid profile``: timing discipline, kernel / embedding / collective sweeps,
device ceilings, and the orchestration that writes a measurement bundle (see :mod:`hybrid.data.bundle`).

PyTorch is imported lazily (it is the optional ``profile`` extra); importing this package does not need it.
"""

from hybrid.data.profiler.cases import PROFILE_FAMILIES
from hybrid.data.profiler.runner import ProfileOptions, ProfileResult, run_profile

__all__ = ["PROFILE_FAMILIES", "ProfileOptions", "ProfileResult", "run_profile"]
