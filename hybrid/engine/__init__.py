"""Workload-agnostic multi-rank critical-path engine: task graphs, batched op costing, simulation, traces."""

from hybrid.engine.costs import OpCostModel, RooflineCostModel, default_cost_model
from hybrid.engine.graph import CompiledGraph, TaskGraph
from hybrid.engine.overheads import Overheads
from hybrid.engine.simulate import SimResult, simulate, simulate_durations
from hybrid.engine.trace import chrome_trace, write_chrome_trace

__all__ = ["CompiledGraph", "OpCostModel", "Overheads", "RooflineCostModel", "SimResult", "TaskGraph",
           "chrome_trace", "default_cost_model", "simulate", "simulate_durations", "write_chrome_trace"]
