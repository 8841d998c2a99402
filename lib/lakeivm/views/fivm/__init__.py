"""fivm."""
