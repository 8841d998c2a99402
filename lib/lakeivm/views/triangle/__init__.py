"""IVM^ε triangle counts: heavy/light partitions and auxiliary views (Kara et al.)."""
