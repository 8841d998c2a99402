"""triangle."""
