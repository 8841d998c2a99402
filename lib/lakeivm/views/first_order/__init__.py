"""First-order IVM: the classical delta rule; the baseline and the fallback kind."""
