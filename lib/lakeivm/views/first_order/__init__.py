"""First-order IVM: the classical delta rule; the baseline and the fallback kind."""
from lakeivm.views.first_order.maintainer import FirstOrderMaintainer

__all__ = ["FirstOrderMaintainer"]
