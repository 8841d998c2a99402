"""nested."""
