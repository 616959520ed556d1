"""PyTorch traces (torch.profiler Chrome/Kineto JSON and execution traces): parsing and op-family mapping.

The task graph a trace becomes is built by :mod:`hybrid.workloads.trace_graph`.
"""

from hybrid.data.traces.parse import RankTrace, TraceFormatError, link, load_trace, load_traces, trace_files

__all__ = ["RankTrace", "TraceFormatError", "link", "load_trace", "load_traces", "trace_files"]
