"""The full kind: any query, recomputed on the pinned snapshots (refresh_policy: full, or auto's fallback)."""
