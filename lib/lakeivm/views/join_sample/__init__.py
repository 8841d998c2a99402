"""join_sample."""
