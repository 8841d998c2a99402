"""Views over views: a view's FROM may name another view (its *upstream*).

The downstream reads the upstream's committed result as it reads a table, with the upstream's log
seq standing for a table version: a run pins the seq of the upstream's last consistent committed run
(never a run in progress, never state a crash left), its log row records that seq as the
upstream's pin and watermark, and the upstream's changes over ``(watermark, pin]`` are read

- from the change data feed of the upstream's stored result, between the result versions the two
  runs logged, where that feed says them exactly (``_from_change_feed``): the runs of one kind and of
  the current definition, a kind whose result is its stored rows row by row, and only MERGEs and
  appends between them. A MERGEd result's feed holds only the rows a run changed, so a small change
  of a large upstream costs a small read (``lakeivm bench upstream``);
- else as the signed difference of its results at the two seqs: of its stored rows, read by
  delta-rs, each taken as its run's kind has readers see them and netted by DuckDB in this process,
  where both results are small (``_from_stored_difference``: a recompute or a small result's
  rewrite writes the result whole, auto switches between a kind and a full recompute, and Spark
  diffing two results costs a second); else read through the upstream's
  own reader by Spark: exact whatever happened between the two (a crash rolled back -- RESTORE
  writes no change data --, a rebuild, an edited definition, a large result auto switched between
  incremental and full).

A view read so is a ``ViewSource``, the other ``changes.Source`` beside a table's, registered on
the lake (``lake.upstreams``) so that ``changes.source`` finds it without importing this module. Reading a view's result needs its kind, so the binding of a spec to its context and
maintainer (``prepare``, ``reader``) lives here too, below the engine that runs it.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from lakeivm.columns import HIDDEN, MULTIPLICITY
from lakeivm.errors import ChangeRangeError, LakeIVMError, StateError, analysed_as
from lakeivm.spec import FULL
from lakeivm.views.base import Context, Maintainer

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lakeivm.views.state import Readable

    from lakeivm.store.commit import LogRow
    from lakeivm.store.lake import Lake
    from lakeivm.spec import ViewSpec

class InjectedFailure(LakeIVMError):
    """Raised by fault-injection tests at a named point of a run."""


def prepare(lake: Lake, spec: ViewSpec, fail_at: str | None = None) -> tuple[Context, Maintainer]:
    """Classify the view and build the run's context (pins and watermarks filled by the run)."""
    from lakeivm.views.kinds import maintainer_for  # here, not above: a run with nothing to do parses no SQL (lakeivm.spec)
    from lakeivm.catalog.registry import choose

    choice = choose(spec, schemas_for(lake, spec))

    def checkpoint(label: str) -> None:
        if fail_at == label:
            raise InjectedFailure(f"injected failure at {label}")

    ctx = Context(lake, spec, choice.query, pins={}, watermarks={}, seed=int(spec.options.get("seed", 0)), checkpoint=checkpoint,
                  why_full=choice.why_full, auto=choice.auto)
    return ctx, maintainer_for(choice.kind)


def run_spec(spec: ViewSpec, row: LogRow | None) -> ViewSpec:
    """The spec ``row``'s run ran: ``spec``, or the view as declared (``ViewSpec.whole``) where auto
    recomputed a split view in one query."""
    from lakeivm.fingerprint import fingerprint

    whole = spec.whole
    return whole if whole is not None and row is not None and row.fingerprint == fingerprint(whole) else spec


def reader(lake: Lake, spec: ViewSpec, row: LogRow | None) -> tuple[Context, Maintainer]:
    """The context and the maintainer of the result ``row`` committed: the view's kind, or the full
    kind (its query: the SQL as written) where auto recomputed that run in full (``run_spec``: the
    view as declared, where auto recomputed it whole)."""
    from lakeivm.views.kinds import maintainer_for
    from lakeivm.sql import parse_full

    if (ran := run_spec(spec, row)) is not spec:
        return prepare(lake, ran)
    ctx, maintainer = prepare(lake, spec)
    if ctx.auto and row is not None and row.kind == FULL:
        full = parse_full(spec.sql, schemas_for(lake, spec), spec.source)
        return replace(ctx, query=full, why_full="auto chose a full recompute"), maintainer_for(FULL)
    return ctx, maintainer


def schemas_for(lake: Lake, spec: ViewSpec) -> dict[str, dict[str, str]]:
    """{source: {column: type}} the view's SQL is checked against: the lake's tables, and the results
    of the views it reads (a name that is both is refused)."""
    register(lake, spec)
    tables = lake.table_schemas()
    both = sorted(set(tables) & set(spec.upstreams))
    if both:
        raise LakeIVMError(f"{spec.source}: {', '.join(both)} is both a lake table and a view; rename the view "
                           f"or the table so that the view's FROM names one thing.")
    return {**tables, **{name: schema(lake, up) for name, up in spec.upstreams.items()}}


@dataclass(frozen=True, eq=False)
class ViewSource:
    """A view read by other views as a source (``changes.Source``): its log seqs stand for a table's
    versions."""

    lake: Lake
    spec: ViewSpec

    def pin(self) -> int:
        return pin(self.lake, self.spec)

    def span(self, watermark: int, head: int) -> str:
        return f"view {self.spec.name}'s runs #{watermark + 1}..#{head}"

    def identity(self) -> None:
        return None  # its runs are numbered by the log the reading view shares: never replaced under it

    def pending_rows(self, watermark: int, head: int) -> int:
        return pending_rows(self.lake, self.spec, watermark, head)

    def pending_age_seconds(self, watermark: int, head: int) -> float:
        return pending_age_seconds(self.lake, self.spec, watermark, head)

    def check_readable(self, watermark: int, head: int, columns: Iterable[str]) -> None:
        check_readable(self.lake, self.spec, watermark, head, columns)

    def read_counted(self, watermark: int, head: int, columns: Iterable[str]) -> tuple[DataFrame, int]:
        from lakeivm.store import storage

        delta = read_delta(self.lake, self.spec, watermark, head, columns)
        return delta, storage.counted(delta)

    def snapshot(self, seq: int, oracle: bool = False) -> DataFrame:
        return snapshot(self.lake, self.spec, seq)


def register(lake: Lake, spec: ViewSpec) -> None:
    """Make the views ``spec`` reads (and theirs) readable as sources of ``lake``."""
    for name, upstream in spec.upstreams.items():
        known = lake.upstreams.get(name)
        if known is None or known.spec is not upstream:
            lake.upstreams[name] = ViewSource(lake, upstream)
            register(lake, upstream)


def readable(lake: Lake, spec: ViewSpec) -> bool:
    """Whether a downstream run can read the upstream now (``pin`` does not raise)."""
    try:
        pin(lake, spec)
    except StateError:
        return False
    return True


def pin(lake: Lake, spec: ViewSpec) -> int:
    """The seq of the upstream's last consistent committed run: what a downstream run reads."""
    from lakeivm.store import commit

    row = commit.last_committed(lake, spec.name, consistent=True)
    if row is None or not _of_current_definition(row, spec):
        state = "no consistent committed run" if row is None else "a new definition it has not run with yet"
        raise StateError(f"view {spec.name!r} has {state}, and other views read it: refresh it first "
                         f"(`lakeivm refresh VIEW` refreshes the views VIEW reads before it).")
    return row.seq


def run_at(lake: Lake, spec: ViewSpec, seq: int) -> LogRow:
    """The upstream's committed run ``seq``."""
    from lakeivm.store import commit

    for row in commit.log_rows(lake, spec.name):
        if row.seq == seq:
            return row
    raise ChangeRangeError(f"view {spec.name!r}: its committed run #{seq}, which a view reading it last read, is not in "
                           "the log; the reading view is rebuilt from the upstream's current result.")


def snapshot(lake: Lake, spec: ViewSpec, seq: int) -> DataFrame:
    """The upstream's rows as its committed run ``seq`` left them (as ``lakeivm read`` shows them).

    Only a run of the upstream's current definition and kind can be read so (another definition's
    state may hold other columns): an older one raises ChangeRangeError, and the reading view is
    rebuilt from the upstream's current result (its ``on_unreadable_changes`` policy)."""
    row = run_at(lake, spec, seq)
    ctx, maintainer = reader(lake, spec, row)
    if not _of_current_definition(row, spec) or getattr(maintainer, "kind", row.kind) != row.kind:
        raise ChangeRangeError(f"view {spec.name!r} was redefined or is maintained otherwise since its run #{seq} "
                               f"({row.kind} then, {getattr(maintainer, 'kind', '?')} now); the views reading it are "
                               "rebuilt from its current result.")
    return maintainer.result(ctx, row.state_versions["result"])


def stored_rows(lake: Lake, spec: ViewSpec, seq: int) -> tuple[str, int, Readable] | None:
    """(its result table, the version its committed run ``seq`` left, how its readers see the stored
    rows) where the upstream's rows at that run are the table's stored rows as its kind's ``readable``
    says (those passing a HAVING column, each a count of copies), their columns not named
    ``_lakeivm_*``: a reader may then filter them by key in its own process. None otherwise (a top-k,
    a kind without ``readable``, and where ``snapshot`` would refuse the run)."""
    try:
        row = run_at(lake, spec, seq)
        ctx, maintainer = reader(lake, spec, row)
    except ChangeRangeError:
        return None
    if not _of_current_definition(row, spec) or getattr(maintainer, "kind", row.kind) != row.kind:
        return None
    version = row.state_versions.get("result")
    seen = maintainer.readable(ctx) if hasattr(maintainer, "readable") else None
    return None if version is None or seen is None else (maintainer.state_tables(ctx)["result"], version, seen)


def schema(lake: Lake, spec: ViewSpec) -> dict[str, str]:
    """{column: Spark SQL type} of the upstream's result (at its pin): what the downstream's SQL sees.
    An upstream that has not run yet (or not with its current definition): the columns its SQL
    declares (``declared_schema``), so that a view over it can be explained and checked before."""
    try:
        seq = pin(lake, spec)
    except StateError:
        return declared_schema(lake, spec)
    return types_at(lake, spec, seq)


def types_at(lake: Lake, spec: ViewSpec, seq: int) -> dict[str, str]:
    """{column: Spark SQL type} of the upstream's rows as its committed run ``seq`` left them
    (``snapshot``'s, and its ChangeRangeError); kept per run: a committed run's result never changes."""
    from lakeivm.fingerprint import fingerprint

    key = ("result schema", spec.name, seq, fingerprint(spec))
    if key not in lake.cache:
        lake.cache[key] = _stored_types(lake, spec, seq) or dict(_types(snapshot(lake, spec, seq)))
    return lake.cache[key]


def _stored_types(lake: Lake, spec: ViewSpec, seq: int) -> dict[str, str] | None:
    """``schema`` from the stored result's Delta schema at run ``seq`` (its log, read by delta-rs),
    where its readers see the stored columns (``stored_rows``): Spark's read of a version it has not
    seen loads a snapshot (~0.1 s), for every run of every upstream a reader plans. None otherwise."""
    found = stored_rows(lake, spec, seq)
    if found is None:
        return None
    path, version, _ = found
    return {name: kind for name, kind in lake.schema_at(path, version).items() if not name.startswith(HIDDEN)}


def declared_schema(lake: Lake, spec: ViewSpec) -> dict[str, str]:
    """{column: Spark SQL type} of ``spec``'s SQL, analysed by Spark (not run) over empty frames of
    its sources' types; its own upstreams' the same way when they have not run either."""
    from lakeivm.sql import as_written, backquoted, referenced_tables

    sources, names = schemas_for(lake, spec), {}
    try:
        with analysed_as(spec):
            for source in referenced_tables(spec.sql):
                if source in sources:
                    names[source] = f"lakeivm_declared_{spec.name}_{source}"
                    ddl = ", ".join(f"{backquoted(column)} {kind}" for column, kind in sources[source].items())
                    lake.spark.createDataFrame([], ddl).createOrReplaceTempView(names[source])
            return dict(_types(lake.spark.sql(as_written(spec.sql, names))))
    finally:
        for name in names.values():
            lake.spark.catalog.dropTempView(name)


def pending_rows(lake: Lake, spec: ViewSpec, watermark: int, head: int) -> int:
    """The upstream's change rows over its runs in ``(watermark, head]`` (a cost proxy; at least 1
    when anything is pending, so the planner never takes it for a commit without changes)."""
    if head <= watermark:
        return 0
    return max(1, sum(sum(r.delta_rows.values()) for r in _runs(lake, spec, watermark, head)))


def pending_age_seconds(lake: Lake, spec: ViewSpec, watermark: int, head: int) -> float:
    """Seconds since the oldest upstream run in ``(watermark, head]`` committed."""
    runs = _runs(lake, spec, watermark, head)
    if not runs:
        return 0.0
    return max(0.0, (datetime.now(timezone.utc) - min(r.finished_at for r in runs)).total_seconds())


def check_readable(lake: Lake, spec: ViewSpec, watermark: int, head: int, columns: Iterable[str]) -> None:
    """Raise ChangeRangeError if the upstream's results at the two seqs cannot be compared: a run gone
    from the log, or a column the downstream reads that changed type or went away."""
    if head == watermark:
        return
    if head < watermark:
        raise ChangeRangeError(f"view {spec.name!r} is at run #{head}, behind run #{watermark} a view reading it last read: "
                               "its log was rewound. The reading view is rebuilt from the upstream's current result.")
    _check_columns(spec, watermark, head, types_at(lake, spec, watermark), types_at(lake, spec, head), columns)


def read_delta(lake: Lake, spec: ViewSpec, watermark: int, head: int, columns: Iterable[str]) -> DataFrame:
    """The upstream's netted signed delta over ``(watermark, head]``: its result at ``head`` minus its
    result at ``watermark``, projected to ``columns`` (rows carry ``_lakeivm_m``, as ``changes.read_delta``)."""
    from pyspark.sql import functions as F

    columns = list(columns)
    if head < watermark:
        check_readable(lake, spec, watermark, head, columns)  # raises: the log was rewound
    stored = _stored_results(lake, spec, watermark, head)  # the log read and the SQL classified once for both
    fed = _from_change_feed(lake, spec, watermark, head, columns, stored)
    if fed is None:
        fed = _from_stored_difference(lake, spec, watermark, head, columns)
    if fed is not None:
        return fed
    old, new = snapshot(lake, spec, watermark), snapshot(lake, spec, head)  # each built once: checked, then diffed
    _check_columns(spec, watermark, head, _types(old), _types(new), columns)
    try:
        after = new.select(*columns, F.lit(1).alias(MULTIPLICITY))
        before = old.select(*columns, F.lit(-1).alias(MULTIPLICITY))
        delta = (after.unionByName(before).groupBy(*columns).agg(F.sum(MULTIPLICITY).cast("bigint").alias(MULTIPLICITY))
                 .where(F.col(MULTIPLICITY) != 0))
        return delta.localCheckpoint(eager=True)
    except (ChangeRangeError, StateError):
        raise
    except Exception as err:  # e.g. a result version removed by VACUUM
        raise ChangeRangeError(f"view {spec.name!r}: its results of runs #{watermark} and #{head} cannot be read "
                               f"({str(err).splitlines()[0] if str(err) else type(err).__name__}); the reading view "
                               "is rebuilt from the upstream's current result.") from err


READ_FEED = True  # False: always the difference of two results (``lakeivm bench upstream``'s baseline)
FEED_OPERATIONS = ("MERGE", "UPDATE", "DELETE", "OPTIMIZE", "SET TBLPROPERTIES")  # and appends: a result's changes only


def _from_change_feed(lake: Lake, spec: ViewSpec, watermark: int, head: int, columns: list[str],
                      stored: tuple | None = ...) -> DataFrame | None:
    """``read_delta`` read from the change data feed of the upstream's stored result between the
    versions its runs ``watermark`` and ``head`` logged, where that feed gives the changes exactly and
    costs less than two results: the runs of ``_stored_results``, and every commit of the result over
    the range a MERGE or an append (a rewrite's feed is both results whole; a RESTORE, recovery's
    rollback, writes no change data). None: read the difference."""
    from lakeivm.sources import changes

    stored = _stored_results(lake, spec, watermark, head) if stored is ... else stored
    if stored is None or not READ_FEED:
        return None
    ctx, maintainer, path, since, until = stored
    if until == since:  # runs that left the result as it was (their changes netted to nothing): no change
        types = lake.schema_at(path, until)
        if any(c not in types for c in columns):
            return None
        return lake.spark.createDataFrame([], ", ".join(f"`{c}` {types[c]}" for c in columns) + f", `{MULTIPLICITY}` bigint")
    result = changes.TableSource(lake, f"view {spec.name}'s result", path)
    if not all(_feeds(commit) for commit in result.history(since, until)):  # read_counted reuses it
        return None
    stored_columns = list(lake.schema_at(path, until))
    try:  # check_readable: a commit gone, the feed off, a column changed raise ChangeRangeError
        result.check_readable(since, until, stored_columns)
        netted = result.netted_locally(since, until, stored_columns)
        seen = None if netted is None else _seen_locally(lake, path, until, columns, netted=(maintainer.readable(ctx), netted))
        if seen is not None:
            return seen
        rows, _ = result.read_counted(since, until, stored_columns)
        return _as_read(ctx, maintainer, rows, columns)
    except ChangeRangeError:  # the feed cannot be read (a column changed, files vacuumed): the difference may be
        return None


def _from_stored_difference(lake: Lake, spec: ViewSpec, watermark: int, head: int, columns: list[str]) -> DataFrame | None:
    """``read_delta`` as the difference of the upstream's stored rows at its runs ``watermark`` and
    ``head``, each read by delta-rs and taken as its run's kind has its readers see them
    (``Maintainer.readable``), the two netted by DuckDB on ``columns`` in this process, where each
    holds at most ``limits.difference_rows`` rows and those columns are of plain types: what the feed
    would say had the runs MERGEd, for a result a recompute (or a small result's rewrite) wrote whole,
    and across auto's switch between a kind and a full recompute -- Spark diffing two results of
    20,000 rows costs a second. None: Spark diffs them."""
    from lakeivm.store.lake import read_with_delta_rs

    ends = [run_at(lake, spec, watermark), *_runs(lake, spec, watermark, head)[-1:]]
    if len(ends) != 2 or not all(_of_current_definition(r, spec) for r in ends):
        return None
    sides = []
    for row in ends:
        ctx, maintainer = reader(lake, spec, row)
        how = maintainer.readable(ctx) if hasattr(maintainer, "readable") else None
        version = row.state_versions.get("result")
        if how is None or version is None or maintainer.state_tables(ctx)["result"] != lake.view_path(spec.name):
            return None
        sides.append((how, version))
    (old_how, since), (new_how, until) = sides
    if until < since:  # the result was created anew (a rebuild) or rolled back: Spark reads through the log
        return None
    most, path = lake.limits.difference_rows, lake.view_path(spec.name)
    old = read_with_delta_rs(path, most, since)
    new = None if old is None else read_with_delta_rs(path, most, until)
    if new is None:
        return None
    if any(c in old[1].schema.names and c in new[1].schema.names and old[1].schema.field(c).type != new[1].schema.field(c).type
           for c in columns):
        return None  # (a column the reader reads changed type: Spark's difference says so)
    return _seen_locally(lake, path, until, columns, new=(new_how, new[1]), old=(old_how, old[1]))


def _seen_locally(lake: Lake, path: str, version: int, columns: list[str], **sides) -> DataFrame | None:
    """The netted changes of ``columns`` of what a reader sees, by DuckDB in this process, from
    ``sides``: {"new" / "old": (Readable, stored rows as Arrow)}, counted once each (``old``
    subtracted), or {"netted": (Readable, signed changes of the stored rows, with ``_lakeivm_m``)};
    None where a kind cannot say them (a top-k), a column is missing, or DuckDB would not group a
    column's type as Spark does (``_nets``)."""
    from lakeivm.sql import backquoted
    from lakeivm.store import storage
    from lakeivm.views.state import duckdb_query, quoted

    names = ", ".join(quoted(c) for c in columns)
    seen = []
    for side, (how, rows) in sides.items():
        fields = {f.name: f.type for f in rows.schema}
        if how is None or any(c not in fields or not _nets(fields[c]) for c in columns) or any(
                c and c not in fields for c in (how.where, how.weight)):
            return None
        count = {"new": "1", "old": "-1", "netted": MULTIPLICITY}[side]
        weight = f" * CAST({quoted(how.weight)} AS BIGINT)" if how.weight else ""
        seen.append(f"SELECT {names}, {count}{weight} AS {MULTIPLICITY} FROM {side}" + (f" WHERE {quoted(how.where)}" if how.where else ""))
    netted = duckdb_query(f"SELECT {names}, CAST(SUM({MULTIPLICITY}) AS BIGINT) AS {MULTIPLICITY} FROM "
                          f"({' UNION ALL '.join(seen)}) GROUP BY {names} HAVING SUM({MULTIPLICITY}) <> 0",
                          **{side: rows for side, (_, rows) in sides.items()})
    types = lake.schema_at(path, version)
    return storage.local_rows(lake.spark, netted, ", ".join(f"{backquoted(c)} {types[c]}" for c in columns) + f", `{MULTIPLICITY}` bigint")


def _stored_results(lake: Lake, spec: ViewSpec, watermark: int, head: int) -> tuple | None:
    """(context, maintainer, path, version at ``watermark``, version at ``head``) of the upstream's
    stored result, where the stored rows of both runs mean the same: every run over the range of its
    current definition and of one kind, a kind whose readers see its stored rows (``readable``).
    None otherwise."""
    runs = [run_at(lake, spec, watermark), *_runs(lake, spec, watermark, head)]
    since, until = (r.state_versions.get("result") for r in (runs[0], runs[-1]))
    if since is None or until is None or until < since or any(not _of_current_definition(r, spec) or r.kind != runs[-1].kind for r in runs):
        return None
    ctx, maintainer = reader(lake, spec, runs[-1])  # the upstream's SQL classified: only once the log allows it
    if not hasattr(maintainer, "readable"):
        return None
    return ctx, maintainer, maintainer.state_tables(ctx)["result"], since, until


def _as_read(ctx: Context, maintainer: Maintainer, rows: DataFrame, columns: list[str]) -> DataFrame | None:
    """Signed changes of the stored rows -> the netted changes of ``columns`` of what a reader sees
    (the kind's ``readable``); None where the kind cannot say them (a top-k)."""
    from pyspark.sql import functions as F

    from lakeivm.views.state import as_read_changes

    seen = as_read_changes(rows, maintainer.readable(ctx))
    if seen is None or any(c not in seen.columns for c in columns):
        return None
    return (seen.groupBy(*columns).agg(F.sum(MULTIPLICITY).cast("bigint").alias(MULTIPLICITY))
            .where(F.col(MULTIPLICITY) != 0).localCheckpoint(eager=True))


def _nets(kind) -> bool:
    """Whether DuckDB groups values of the Arrow type ``kind`` as Spark does (NULLs, NaNs together)."""
    import pyarrow as pa

    return (pa.types.is_integer(kind) or pa.types.is_decimal(kind) or pa.types.is_floating(kind) or pa.types.is_string(kind)
            or pa.types.is_large_string(kind) or pa.types.is_boolean(kind) or pa.types.is_date(kind) or pa.types.is_timestamp(kind))


def _feeds(commit: Mapping) -> bool:
    """Whether a commit of a result is one whose change data feed holds only the rows it changed."""
    operation = commit["operation"]
    mode = str((commit["operationParameters"] or {}).get("mode", "")).lower()
    return operation in FEED_OPERATIONS or (operation in ("WRITE", "STREAMING UPDATE") and mode == "append")


def _check_columns(spec: ViewSpec, watermark: int, head: int, before: Mapping[str, str], after: Mapping[str, str],
                   columns: Iterable[str]) -> None:
    """ChangeRangeError if a column the downstream reads changed type or went away between the runs
    (``before``, ``after``: the results' {column: type})."""
    for column in columns:
        if before.get(column) != after.get(column):
            raise ChangeRangeError(f"view {spec.name!r}: column {column!r} changed between its runs #{watermark} and #{head} "
                                   f"({before.get(column) or 'absent'} -> {after.get(column) or 'absent'}); "
                                   "the reading view is rebuilt from the upstream's current result.")


def _of_current_definition(row: LogRow, spec: ViewSpec) -> bool:
    """Whether ``row`` ran the view as it is defined now (split, or whole: ``run_spec``)."""
    from lakeivm.fingerprint import fingerprint

    return row.fingerprint in (None, fingerprint(run_spec(spec, row)))


def _runs(lake: Lake, spec: ViewSpec, watermark: int, head: int) -> list[LogRow]:
    """The upstream's committed runs in ``(watermark, head]``."""
    from lakeivm.store import commit

    return [r for r in commit.log_rows(lake, spec.name) if watermark < r.seq <= head]


def _types(frame: DataFrame) -> Mapping[str, str]:
    return {f.name: f.dataType.simpleString() for f in frame.schema.fields}
