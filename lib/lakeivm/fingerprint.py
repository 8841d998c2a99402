"""A view definition's fingerprint: what its maintained state depends on, hashed.

The log row of every run records it; a run whose spec no longer has the fingerprint of the last
committed run rebuilds the view from snapshots (an edited WHERE, another ``epsilon``, other
``features``...) instead of applying changes to state built for another definition. Settings that
only steer *when* a view is refreshed (deadline, tick, planner, cost priors) are left out: editing
them keeps the state.
"""
from __future__ import annotations

import hashlib
import json
import re

from lakeivm.spec import ViewSpec

# The version of what a STDDEV or VARIANCE's state holds: 2 sums a wide DECIMAL's values scaled to
# whole numbers, where 1 summed their doubles. A view whose state an older version built is rebuilt.
VARIANCE_STATE = 2
_VARIANCE = re.compile(r"\b(STDDEV|STDDEV_SAMP|STDDEV_POP|STD|VARIANCE|VAR_SAMP|VAR_POP)\s*\(", re.IGNORECASE)

# Spec options that do not change what the state holds.
SCHEDULING_OPTIONS = frozenset({"planner", "chain_planner", "cost_prior", "fit_costs", "headroom", "description", "retries", "retry_delay"})


def fingerprint(spec: ViewSpec) -> str:
    """16 hex digits of SHA-256 over the normalized SQL, the kind and the state-shaping options.

    >>> a = ViewSpec("v", "SELECT a FROM t WHERE x > 0", 30.0)
    >>> fingerprint(a) == fingerprint(ViewSpec("v", "select  A from T where X > 0", 60.0))
    True
    >>> fingerprint(a) == fingerprint(ViewSpec("v", "SELECT a FROM t WHERE x > 20", 30.0))
    False
    """
    options = {k: v for k, v in sorted(spec.options.items()) if k not in SCHEDULING_OPTIONS}
    definition = {"sql": normalized_sql(spec.sql), "kind": spec.kind, "options": options}
    if _VARIANCE.search(definition["sql"]):  # the state a variance sums changed (``sql.parse._variance_value``): rebuilt
        definition["variance_state"] = VARIANCE_STATE
    if spec.refresh_policy == "full":  # recomputed: another state (auto and incremental pick the same kind when both can)
        definition["refresh_policy"] = spec.refresh_policy
    payload = json.dumps(definition, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


_NORMALIZED: dict[str, str] = {}  # normalized_sql's results in this process (``remember``: the spec cache's)


def normalized_sql(sql: str) -> str:
    """The SQL re-rendered by sqlglot: case of keywords and identifiers, spacing and comments do not count."""
    if sql not in _NORMALIZED:
        import sqlglot

        try:
            _NORMALIZED[sql] = sqlglot.parse_one(sql, dialect="spark").sql(dialect="spark", normalize=True, comments=False)
        except sqlglot.errors.ParseError:
            _NORMALIZED[sql] = " ".join(sql.split())
    return _NORMALIZED[sql]


def remember(normalized: dict[str, str]) -> None:
    """Take ``normalized_sql``'s results computed by another process (``spec_cache.cached_specs``)."""
    _NORMALIZED.update(normalized)
