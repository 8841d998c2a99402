"""Brute-force oracles the tests check the view kinds against, one module per kind.

Each recomputes or maintains a view the plain way, sharing no code with the structure under test
where it can: ``fivm`` (F-IVM view trees, Fig. 3-4), ``triangle`` (the IVM^ε batch rule over dicts)
and ``nested`` (nested aggregates evaluated literally, and the DBToaster-style delta rules the
benchmarks compare against). The triangle's single-update oracles stay in
``lakeivm.views.triangle.oracle``: its ``check_invariants`` uses them.
"""
