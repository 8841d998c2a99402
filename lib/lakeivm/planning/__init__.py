"""Deadline-aware asymmetric batch planning (He et al., asymmetric batch IVM; docs/design/planner.md)."""
from __future__ import annotations

from lakeivm.planning.costs import CostModel, LinearCost, fit_cost_model
from lakeivm.planning.decide import Decision, decide, refresh_decision
from lakeivm.planning.paper_example import simulate_paper_example

__all__ = ["CostModel", "Decision", "LinearCost", "decide", "fit_cost_model", "refresh_decision", "simulate_paper_example"]
