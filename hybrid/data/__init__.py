"""Measurements: the canonical table (schema, validation, I/O), importers for public formats, the profiler."""

from hybrid.data.schema import COLUMNS, read_table, validate, write_table

__all__ = ["COLUMNS", "read_table", "validate", "write_table"]
