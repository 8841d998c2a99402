"""The functions a view's SQL may call: a vetted set of deterministic Spark built-ins.

View SQL runs in the maintenance job's driver and executors, so a function outside this set is
refused at registration: ``reflect``/``java_method`` call arbitrary JVM methods, a UDF runs code
lakeivm cannot see, and an unknown name may be any of those. Non-deterministic functions (``rand``,
``now``, ``uuid``, ...) are refused too: a value that differs between runs makes the maintained
view drift from a recomputation of its SQL.

Example::

    >>> import sqlglot
    >>> check_functions(sqlglot.parse_one("SELECT UPPER(g), COUNT(*) FROM s GROUP BY 1"), "", "v.yaml")
    >>> check_functions(sqlglot.parse_one("SELECT reflect('java.lang.System', 'exit', 1)"), "", "v.yaml")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    lakeivm.errors.UnsupportedQuery: v.yaml: line 1: function reflect() is not allowed in a view: ...
"""
from __future__ import annotations

from sqlglot import exp

from lakeivm.errors import UnsupportedQuery

ALLOWED: frozenset[type[exp.Func]] = frozenset({
    # logic and conditionals (operators such as +, =, LIKE, IN, BETWEEN are not function calls)
    exp.And, exp.Or, exp.Case, exp.If, exp.Coalesce, exp.Nullif, exp.Nvl2, exp.Greatest, exp.Least, exp.Exists,
    exp.Cast, exp.TryCast,
    # numbers
    exp.Abs, exp.Round, exp.Floor, exp.Ceil, exp.Sqrt, exp.Pow, exp.Ln, exp.Log, exp.Exp, exp.Sign,
    # strings
    exp.Substring, exp.Upper, exp.Lower, exp.Concat, exp.ConcatWs, exp.Trim, exp.Length, exp.Left, exp.Right,
    exp.Pad, exp.StrPosition, exp.Replace, exp.Initcap, exp.StartsWith, exp.EndsWith,
    # dates and times
    exp.Year, exp.Quarter, exp.Month, exp.WeekOfYear, exp.Day, exp.DayOfMonth, exp.DayOfWeek, exp.DayOfYear,
    exp.Hour, exp.Minute, exp.Second, exp.Extract, exp.DateAdd, exp.DateSub, exp.TsOrDsAdd, exp.DateDiff,
    exp.TsOrDsToDate, exp.StrToDate, exp.DateTrunc, exp.TimestampTrunc, exp.AddMonths, exp.MonthsBetween,
    exp.LastDay, exp.TimeToStr, exp.TimeStrToTime,
    # aggregates (lakeivm.sql decides which it maintains)
    exp.Sum, exp.Count, exp.Avg, exp.Min, exp.Max,
})

# What a view recomputed in full (refresh_policy: full) may call besides: window functions and more
# aggregates. Still deterministic built-ins only: the result must equal its SQL at the pinned snapshots.
RECOMPUTE_ALLOWED: frozenset[type[exp.Func]] = ALLOWED | frozenset({
    exp.RowNumber, exp.Rank, exp.DenseRank, exp.PercentRank, exp.CumeDist, exp.Ntile, exp.Lag, exp.Lead,
    exp.FirstValue, exp.LastValue, exp.NthValue,
    exp.Stddev, exp.StddevPop, exp.StddevSamp, exp.Variance, exp.VariancePop, exp.CountIf, exp.Median,
    exp.PercentileCont, exp.PercentileDisc, exp.Corr, exp.CovarPop, exp.CovarSamp,
})

NONDETERMINISTIC: frozenset[str] = frozenset({
    "rand", "randn", "random", "uuid", "shuffle", "now", "current_timestamp", "current_date", "current_time",
    "localtimestamp", "current_timezone", "current_user", "user", "session_user", "current_database",
    "current_schema", "current_catalog", "monotonically_increasing_id", "spark_partition_id",
    "input_file_name", "input_file_block_start", "input_file_block_length",
})
_NONDETERMINISTIC_TYPES = (exp.Rand, exp.Randn, exp.Uuid, exp.Shuffle, exp.CurrentTimestamp, exp.CurrentDate,
                           exp.CurrentTime, exp.Localtimestamp, exp.CurrentTimezone, exp.CurrentUser,
                           exp.SessionUser, exp.CurrentDatabase, exp.CurrentSchema, exp.CurrentCatalog)


def check_functions(tree: exp.Expression, sql: str, source: str, allowed: frozenset[type[exp.Func]] = ALLOWED) -> None:
    """Raise UnsupportedQuery naming the first function of ``tree`` that is non-deterministic or not
    in ``allowed``, with ``source``, its line in ``sql`` and the fix. Non-deterministic calls are named
    first, even inside another refused call (``unix_timestamp()`` reads the current time)."""
    calls = list(tree.find_all(exp.Func))
    for call in calls:
        if isinstance(call, _NONDETERMINISTIC_TYPES) or _name(call, sql).lower() in NONDETERMINISTIC:
            raise UnsupportedQuery(
                f"{source}: line {_line(call, sql)}: non-deterministic function {_name(call, sql)}() cannot be "
                "maintained incrementally (its value changes between runs, so the view would drift from a "
                "recomputation); store the value in a column of the source table and use that column."
            )
    for call in calls:
        if type(call) not in allowed:
            raise UnsupportedQuery(
                f"{source}: line {_line(call, sql)}: function {_name(call, sql)}() is not allowed in a view: only "
                "vetted deterministic built-ins are (CASE/COALESCE/NULLIF/IF, casts, arithmetic, ABS/ROUND/FLOOR/CEIL, "
                "string functions such as SUBSTRING/UPPER/LOWER/CONCAT/TRIM/LENGTH, date functions such as "
                "YEAR/MONTH/DATE_ADD/DATEDIFF/EXTRACT/TO_DATE/DATE_TRUNC, SUM/COUNT/AVG/MIN/MAX; no UDFs, "
                "reflect or java_method); rewrite it with those, or compute the value into a column of the "
                "source table."
            )


def _name(call: exp.Func, sql: str) -> str:
    """The function's name as written in ``sql`` (``random``, not sqlglot's ``RAND``) where known."""
    if isinstance(call, exp.Anonymous):
        return call.name
    start, end = call.meta.get("start"), call.meta.get("end")
    if start is not None and end is not None and sql[start:end + 1].replace("_", "").isalnum():
        return sql[start:end + 1]
    return call.sql_name()


def _line(call: exp.Func, sql: str) -> int:
    """The call's line in ``sql``: its own position, else its enclosing call's, else where its name is."""
    node: exp.Expression | None = call
    while node is not None:
        if "line" in node.meta:
            return int(node.meta["line"])
        node = node.parent if isinstance(node.parent, exp.Func) else None
    position = sql.lower().find(_name(call, sql).lower())
    return sql.count("\n", 0, position) + 1 if position >= 0 else 1
