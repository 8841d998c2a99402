"""Names of the columns lakeivm adds to the rows it passes around and stores."""
from __future__ import annotations

MULTIPLICITY = "_lakeivm_m"  # a delta's signed multiplicity (a change feed netted: changes.read_delta)
HIDDEN = "_lakeivm_"  # the prefix of every column lakeivm adds: a view's stored columns its readers do not see
