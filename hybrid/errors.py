"""Exception types. Every user-facing failure is a :class:`HybridError` with a one-line message."""

from __future__ import annotations


class HybridError(Exception):
    """Base class for errors the CLI reports as one clear line (no traceback)."""


class UnknownDeviceError(HybridError, KeyError):
    """A device or system name that is not in the catalog."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class InvalidInputError(HybridError, ValueError):
    """A size, dtype or parameter that is out of range or malformed."""


class SchemaError(HybridError, ValueError):
    """A measurement table that does not follow the canonical schema."""


class ImportFormatError(HybridError, ValueError):
    """A file that cannot be parsed by the importer it was given to."""


class ModelNotFoundError(HybridError, LookupError):
    """A calibrated model name or version that is not in the tracking store."""


class OutputPathError(HybridError, OSError):
    """An output path the user gave that cannot be written (missing permission, a file in the way, ...)."""


class DataQualityWarning(UserWarning):
    """Measurements a fit leaves out because they cannot be physical (``hybrid.data.quality``), or rows kept whose
    labels disagree (a collective row whose device is not its system's GPU, ``hybrid.data.schema.check_rows``)."""


class DtypeFallbackWarning(UserWarning):
    """Ops priced in another dtype than the traced program called them in, or from measurements of another dtype
    only (``hybrid.workloads.trace_costing.TracePrediction.dtype_fallbacks``): e.g. a bf16 attention on a CPU
    priced from a profile's fp32 attention rows."""


class WorkloadWarning(UserWarning):
    """A workload the tool prices as given but that no published run it knows matches, or a value at the edge of
    sense (``hybrid.workloads.dlrm.DLRMConfig.unusual``: an fp8 or fp64 DLRM training dtype, a pooling factor
    below one lookup in a thousand samples)."""


class TransferWarning(UserWarning):
    """Predictions a model makes for hardware unlike any it was fitted on: rows of a kind of processor (CPU or GPU)
    that the correction answering them never measured (``HybridPredictor._cross_kind_rows``), e.g. a CPU priced
    by kernel trees fitted on GPUs only. Their intervals are not calibrated for them."""


class RunStateWarning(UserWarning):
    """A calibration run that failed or was interrupted and whose tracking store could not be told (unreachable,
    refused): the run stays ``RUNNING`` there (``hybrid.tracking.calibrate``)."""


def at_row(index: object, i: int) -> str:
    """``at row index LABEL`` for the ``i``-th row of a frame whose ``index`` is given: the label as Python prints
    it (``101``, not ``np.int64(101)``), so that ``frame.loc[LABEL]`` finds the row whatever the index."""
    label = index[i]  # type: ignore[index]
    if hasattr(label, "item") and not isinstance(label, str | bytes):
        label = label.item()
    return f"at row index {label!r}"
