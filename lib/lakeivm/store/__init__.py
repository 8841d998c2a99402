"""The lake's storage: files, Delta tables, the fast-path gate, system tables and the maintenance log (floor 2)."""
