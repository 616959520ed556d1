"""Workload builders: configurations of ML jobs and the per-rank task graphs of one iteration."""

from hybrid.workloads.dlrm import DLRMConfig, TableConfig, TableGenerator

__all__ = ["DLRMConfig", "TableConfig", "TableGenerator"]
