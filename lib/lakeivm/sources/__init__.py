"""What a run reads: a table's change feed and a view's committed results, one Source protocol (floors 2-3)."""
