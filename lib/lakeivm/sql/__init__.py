"""View SQL -> a small query IR (sqlglot), and the SQL rewrites every maintainer runs on Spark.

The IR names what maintenance needs: the relations (table + alias) and the columns used of each,
the equi-join graph, single-table filters, the GROUP BY keys and the aggregates. Each maintainer
keeps a *state* per group -- a row count and, per aggregated expression, the sum of its non-null
values and their count -- from which SQL's SUM/COUNT/AVG (with SQL's NULL rules) are finalized.

Example::

    >>> q = parse_query("SELECT a, SUM(b) AS s FROM t GROUP BY a", {"t": {"a": "int", "b": "int"}})
    >>> [r.table for r in q.relations], [k.name for k in q.group_keys], q.outputs[1].name
    (['t'], ['a'], 's')

The modules: ``ir`` (the IR's records), ``tree`` (helpers over sqlglot trees), ``parse`` (SQL -> IR,
refusing what no kind maintains), ``split`` (views split off a view's SQL), ``emit`` (the SQL the
maintainers run), ``functions`` and ``spark_builtins`` (the functions a view may call), ``ddl``
(``CREATE MATERIALIZED VIEW`` files). This package re-exports the IR and the public functions.
"""
from lakeivm.sql.ir import COUNT, DIALECT, HAVING, MULTISET_FUNCS, Aggregate, EquiJoin, GroupKey, OuterJoin, Output, Query, Relation  # noqa: F401
from lakeivm.sql.tree import backquoted, conjuncts, has_window, named_outputs, referenced_tables  # noqa: F401
from lakeivm.sql.parse import grouped, parse_full, parse_query  # noqa: F401
from lakeivm.sql.split import COMPARED, as_written, compares_with_subquery, decorrelated_views, derived_views  # noqa: F401
from lakeivm.sql.emit import (join_links, join_order, multiset_of_sql, multiset_sql, recompute_sql, reduced_sql, rolled_up_sql, state_sql,  # noqa: F401
                              thresholds, typed_empty_sql)
