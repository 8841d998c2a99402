"""first_order."""
