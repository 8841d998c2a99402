"""One maintenance run and what reads its results: engine, recovery, reading, audit, status (floor 4)."""
