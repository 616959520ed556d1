"""Error metrics, plots and reports comparing predictions with measured runtimes."""

from hybrid.reports.metrics import ERROR_KEYS, error_summary, relative_errors

__all__ = ["ERROR_KEYS", "error_summary", "relative_errors"]
