"""The full kind: any query, recomputed on the pinned snapshots (refresh_policy full, or auto's fallback)."""
from __future__ import annotations

from lakeivm.views.kind import Kind

KIND = Kind(
    name="full",
    maintainer="lakeivm.views.full.maintainer:FullMaintainer",
    summary="recomputes the SQL on the pinned snapshots and replaces the result",
)
