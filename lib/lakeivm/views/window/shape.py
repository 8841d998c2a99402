"""The shape the window kind maintains: window functions over one relation, confined to partitions.

A ``SELECT`` over one relation (a lake table or a view) with an optional row-level ``WHERE``, whose
window functions all have a ``PARTITION BY`` -- or a row filter and projection of such a SELECT, a
derived table or the only CTE (``lakeivm.sql.tree.windowed_select``: the latest row per key).
``partition_of`` finds P, the plain columns of the relation common to every window's ``PARTITION
BY`` that are also columns of the result (possibly renamed), so that the stored result can be
addressed by P (fewer columns than the windows': coarser partitions, a change still confined to
them). Anything else is refused with the
construct named (``docs/kinds/window.md``).
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from lakeivm.errors import UnsupportedQuery
from lakeivm.sql import DIALECT, Query
from lakeivm.sql.tree import plain_column, result_columns, windowed_select

WHOLE_TABLE = "recomputing a window over the whole table: no partition to confine a change to"


@dataclass(frozen=True)
class Top:
    """A query keeping each partition's first rows by one ranking (``_top_rows``):
    ``ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn ... WHERE rn = 1`` (the latest row per
    key), ``rn <= n``, ``RANK``, ``DENSE_RANK``. A partition whose change deletes none of its kept
    rows keeps its first rows among those kept and those inserted: a new latest row per key reads the
    key's latest row, not its history. ``stored``: (relation column, result column) of every column
    the windowed SELECT reads, where each is a result column unchanged: the kept rows are then read
    from the result, whatever the ORDER BY. Else the window orders by one column O, in the result as
    ``output``, and a run reads the relation's rows at or above the lowest kept O."""

    order: str | None  # None: ordered otherwise (several columns, an expression), and ``stored``
    output: str | None
    descending: bool
    stored: tuple[tuple[str, str], ...] | None = None


@dataclass(frozen=True)
class Partition:
    """P: the relation's partition ``columns`` and the result ``outputs`` holding them (same order);
    ``order``: (O, its result column) where every window looks back along O (``_looked_back``);
    ``reach``: N where, besides, no window reads more than the N rows before a row (``_reach``);
    ``sliding``: where, besides, every window is an aggregate over such a frame (``sliding_frames``);
    ``top``: where the query keeps each partition's top rows by one ranking (``Top``);
    ``one_to_one``: where each row of the relation is one row of the result (no WHERE, DISTINCT,
    QUALIFY or outer filter), so that a change appending rows after every touched partition's last
    one is seen by counting the rows recomputed."""

    table: str
    columns: tuple[str, ...]
    outputs: tuple[str, ...]
    order: tuple[str, str] | None = None
    reach: int | None = None
    sliding: bool = False
    top: Top | None = None
    one_to_one: bool = False

    def __post_init__(self) -> None:
        if not self.columns or len(self.columns) != len(self.outputs):
            raise UnsupportedQuery(f"a window partition needs columns, each with its result column: {self}")


def partition_of(query: Query, source: str = "<sql>") -> Partition:
    """P of a windowed query (``lakeivm.sql.parse_full``'s Query), or UnsupportedQuery naming why not.

    >>> from lakeivm.sql import parse_full
    >>> q = parse_full("SELECT k AS key, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v) AS rn FROM t", {"t": {"k": "int", "v": "int"}})
    >>> partition_of(q)
    Partition(table='t', columns=('k',), outputs=('key',), order=None, reach=None, sliding=False)
    """
    tree = query.tree
    windowed = windowed_select(tree) or tree  # a top-rows-per-partition query: the SELECT it filters
    windows = list(windowed.find_all(exp.Window))
    if not windows:
        raise UnsupportedQuery(f"{source}: kind window maintains window functions (f(...) OVER (PARTITION BY ...)); "
                               "this SELECT has none: remove `kind: window`")
    _check_select(windowed, source)
    table = windowed.args["from_"].this.name
    unpartitioned = next((w for w in windows if not w.args.get("partition_by")), None)
    if unpartitioned is not None:
        raise UnsupportedQuery(f"{source}: {_written(unpartitioned)}: {WHOLE_TABLE}; add a PARTITION BY to every window")
    columns = {c.lower(): c for c in query.columns_of(table)}
    common = [plain_column(e, columns) for e in windows[0].args["partition_by"]]
    common = [c for c in common if c is not None and all(c in _partition_columns(w, columns) for w in windows[1:])]
    if not common:
        raise UnsupportedQuery(f"{source}: the windows' PARTITION BY have no plain column of {table} in common; "
                               f"{WHOLE_TABLE} (partition every window by at least one same column)")
    outputs = result_columns(windowed, columns)
    if windowed is not tree:  # the filtering query's own columns that are the windowed SELECT's unchanged
        outer = result_columns(tree, {c.lower(): c for c in outputs.values()})
        outputs = {c: outer[o] for c, o in outputs.items() if o in outer}
    kept = [c for c in common if c in outputs]  # fewer columns than every window's: coarser partitions, still confined
    if not kept:
        raise UnsupportedQuery(f"{source}: partition column {common[0]!r} is not a column of the result, so a changed "
                               f"partition cannot be found in the stored view; select it (e.g. `{common[0]}`)")
    order = _looked_back(windowed, columns)
    if order not in outputs:
        return Partition(table, tuple(kept), tuple(outputs[c] for c in kept), top=_top_rows(tree, windowed, columns, kept, outputs))
    reach = _reach(windowed, columns, kept)
    one_to_one = windowed is tree and not any(tree.args.get(a) for a in ("where", "distinct", "qualify"))
    return Partition(table, tuple(kept), tuple(outputs[c] for c in kept), (order, outputs[order]), reach,
                     reach is not None and windowed is tree and sliding_frames(tree) is not None, one_to_one=one_to_one)


def _check_select(tree: exp.Expression, source: str) -> None:
    """UnsupportedQuery unless ``tree`` is one SELECT over one relation, windows its only aggregation."""
    if not isinstance(tree, exp.Select):
        raise UnsupportedQuery(f"{source}: a window over {tree.key.upper()} is recomputed in full; the window kind "
                               "maintains one SELECT over one table or view")
    from_ = tree.args.get("from_")
    checks = [
        (tree.args.get("with_"), "a CTE", "read the table or view itself"),
        (tree.args.get("joins"), "a JOIN", "join in a view of its own and window over that view"),
        (from_ is None or not isinstance(from_.this, exp.Table), "a FROM that is not one table or view",
         "window over a table or view"),
        (any(s is not tree for s in tree.find_all(exp.Select)), "a subquery", "split it off as a view of its own"),
        (tree.args.get("group"), "GROUP BY", "aggregate in a view of its own and window over that view"),
        (next((a for a in tree.find_all(exp.AggFunc) if not _in_window(a)), None), "an aggregate outside a window",
         "aggregate in a view of its own"),
        (tree.args.get("having"), "HAVING", "filter in a view over this one"),
        (tree.args.get("limit"), "ORDER BY ... LIMIT", "keep a top-n per partition with ROW_NUMBER() <= n"),
    ]
    for found, construct, fix in checks:
        if found:
            raise UnsupportedQuery(f"{source}: {construct} beside window functions is not maintained by kind window "
                                   f"(it recomputes the partitions a change touches); {fix}")


_RANKING = (exp.RowNumber, exp.Rank, exp.DenseRank, exp.Lag)  # a row's value from the rows before it
_FRAMED = (exp.Sum, exp.Count, exp.Min, exp.Max, exp.Avg, exp.FirstValue, exp.LastValue)  # from its frame's rows


def _looked_back(select: exp.Select, columns: dict[str, str]) -> str | None:
    """O, where every window of ``select`` orders by the one relation column O, ascending with NULLs
    first (Spark's default), and its value at a row depends only on the rows up to it (and its peers)
    in that order: ROW_NUMBER, RANK, DENSE_RANK, LAG, or an aggregate or FIRST/LAST_VALUE over a frame
    ending at the current row or before it. A change whose first changed row has O = o then leaves
    every row with O < o as it was; None where a window looks ahead (LEAD, NTILE, FOLLOWING, ...)."""
    found = set()
    for window in select.find_all(exp.Window):
        keys = window.args["order"].expressions if window.args.get("order") else []
        if len(keys) != 1 or keys[0].args.get("desc") or not keys[0].args.get("nulls_first"):
            return None
        func, spec = _function(window), window.args.get("spec")
        offset = func.args.get("offset") if isinstance(func, exp.Lag) else None
        ranking = isinstance(func, _RANKING) and (offset is None or (isinstance(offset, exp.Literal) and offset.is_int
                                                                     and int(offset.this) >= 0))
        framed = isinstance(func, _FRAMED) and (spec is None or (not spec.args.get("exclude") and (
            spec.args.get("end") == "CURRENT ROW" or spec.args.get("end_side") == "PRECEDING")))
        column = plain_column(keys[0].this, columns)
        if column is None or not (ranking or framed):
            return None
        found.add(column)
    return found.pop() if len(found) == 1 else None


def _reach(select: exp.Select, columns: dict[str, str], partition: list[str]) -> int | None:
    """N, where every window of ``select`` (each looks back, ``_looked_back``) reads at most the N rows
    before a row -- a ROWS frame from n PRECEDING, LAG(n) -- and is partitioned by exactly the columns
    ``partition`` over every row of the relation (no WHERE): the rows from a partition's first changed
    O on then need only the N rows before it. None where a window reads back without bound
    (ROW_NUMBER, RANK, a running total, a RANGE frame) or over other partitions."""
    if select.args.get("where"):
        return None
    reach = 0
    for window in select.find_all(exp.Window):
        if len(window.args["partition_by"]) != len(partition) or _partition_columns(window, columns) != set(partition):
            return None
        func, spec = _function(window), window.args.get("spec")
        start = spec.args.get("start") if spec is not None else None
        if isinstance(func, exp.Lag):
            offset = func.args.get("offset")
            reach = max(reach, 1 if offset is None else int(offset.this))
        elif (isinstance(func, _FRAMED) and spec is not None and spec.args.get("kind") == "ROWS"
              and spec.args.get("start_side") == "PRECEDING" and isinstance(start, exp.Literal) and start.is_int):
            reach = max(reach, int(start.this))
        else:
            return None
    return reach


_TOP = (exp.RowNumber, exp.Rank, exp.DenseRank)


def _top_rows(tree: exp.Select, windowed: exp.Select, columns: dict[str, str], partition: list[str],
              outputs: dict[str, str]) -> Top | None:
    """``Top`` where ``tree`` keeps, of ``windowed``'s rows, those whose one window -- ROW_NUMBER, RANK
    or DENSE_RANK partitioned by exactly ``partition`` -- is at most n (its WHERE exactly ``rn = 1``,
    ``rn <= n`` or ``rn < n``), and either the result holds every column ``windowed`` reads (``stored``:
    any ORDER BY) or the window is ordered by one column O of the result. Any other row filter of the
    outer query would hide kept rows, which a run reads instead of the relation, or from whose lowest
    O it reads the relation."""
    windows = list(windowed.find_all(exp.Window))
    where = tree.args.get("where")
    if windowed is tree or len(windows) != 1 or where is None:
        return None
    window = windows[0]
    keys = window.args["order"].expressions if window.args.get("order") else []
    if (not isinstance(window.this, _TOP) or not keys or len(window.args["partition_by"]) != len(partition)
            or _partition_columns(window, columns) != set(partition) or window.args.get("spec")):
        return None
    named = next((item.alias_or_name for item in windowed.expressions if item.unalias() is window), None)
    test = where.this
    if named is None or not isinstance(test, (exp.EQ, exp.LTE, exp.LT)):
        return None
    rank, bound = test.this, test.expression
    if not (isinstance(rank, exp.Column) and rank.name.lower() == named.lower() and isinstance(bound, exp.Literal)
            and bound.is_int and int(bound.this) >= (2 if isinstance(test, exp.LT) else 1)):
        return None
    if isinstance(test, exp.EQ) and int(bound.this) != 1:  # rn = 2 keeps a row whose kept rows above it are not stored
        return None
    star = any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)) for e in windowed.expressions)
    read = [c for c in columns.values() if star or any(col.name.lower() == c.lower() for col in windowed.find_all(exp.Column))]
    stored = tuple((c, outputs[c]) for c in read) if all(c in outputs for c in read) else None
    order = plain_column(keys[0].this, columns) if len(keys) == 1 else None
    if order is None or order not in outputs:
        return None if stored is None else Top(None, None, False, stored)
    return Top(order, outputs[order], bool(keys[0].args.get("desc")), stored)


_SLIDING = (exp.Sum, exp.Count, exp.Min, exp.Max, exp.Avg)


def sliding_frames(select: exp.Select) -> list[tuple[exp.Window, exp.AggFunc, int]] | None:
    """(window, its aggregate, n) of each window of ``select``, where every one is SUM, COUNT, MIN,
    MAX or AVG (not DISTINCT) over ``ROWS BETWEEN n PRECEDING AND CURRENT ROW``: a row's value is
    then that aggregate over itself and the n rows before it, which a join of the row with those rows
    computes as Spark's sliding frame would. None otherwise."""
    found = []
    for window in select.find_all(exp.Window):
        func, spec = window.this, window.args.get("spec")
        start = spec.args.get("start") if spec is not None else None
        if (not isinstance(func, _SLIDING) or isinstance(func.this, exp.Distinct) or spec is None
                or spec.args.get("kind") != "ROWS" or spec.args.get("start_side") != "PRECEDING"
                or not (isinstance(start, exp.Literal) and start.is_int) or spec.args.get("end") != "CURRENT ROW"
                or spec.args.get("exclude")):
            return None
        found.append((window, func, int(start.this)))
    return found or None


def _function(window: exp.Window) -> exp.Expression:
    """The function a window computes, without its IGNORE / RESPECT NULLS."""
    func = window.this
    while isinstance(func, (exp.IgnoreNulls, exp.RespectNulls)):
        func = func.this
    return func


def _in_window(call: exp.Expression) -> bool:
    node = call
    while isinstance(node.parent, (exp.IgnoreNulls, exp.RespectNulls)):
        node = node.parent
    return isinstance(node.parent, exp.Window) and node.parent.this is node


def _partition_columns(window: exp.Window, columns: dict[str, str]) -> set[str]:
    return {c for c in (plain_column(e, columns) for e in window.args["partition_by"]) if c is not None}


def _written(window: exp.Window) -> str:
    return f"{window.this.sql(DIALECT)} OVER ({window.sql(DIALECT).split('OVER (', 1)[-1]}"
