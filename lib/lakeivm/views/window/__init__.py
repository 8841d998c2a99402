"""The window kind: window functions with a PARTITION BY, recomputed per partition a change touches."""
