"""View specs: loading, linking views over views, the spec cache (floor 2)."""
