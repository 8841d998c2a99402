"""View specs (YAML) -> validated ViewSpec objects; the classifier that picks each view's kind.

A spec is validated against ``lakeivm/schemas/view.schema.json`` (package data); every error names the file and field.
"""
from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from lakeivm.catalog import dbt, pipeline
from lakeivm.sql import ddl
from lakeivm.store import storage
from lakeivm.errors import LakeIVMError, SpecError, UnsupportedQuery
from lakeivm.views.kinds import BY_NAME, FIRST_ORDER, INCREMENTAL, JOIN_SAMPLE, Kind, kind_options, owner_of
from lakeivm.spec import (FULL, NAME_PATTERN, REFRESH_POLICIES, SCHEMA_PATH, BrokenSpec,  # noqa: F401
                          Specs, ViewSpec, find_spec)
from lakeivm.sql import (Query, compares_with_subquery, decorrelated_views, derived_views, grouped, parse_full,
                         parse_query, referenced_tables)
from lakeivm.sql.functions import check_sql
from lakeivm.views.nested.shape import nested_shape

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: float | int | str) -> float:
    """Seconds in a duration: a number of seconds or '500ms', '30s', '1m', '2h'.

    >>> parse_duration("1m"), parse_duration(2.5), parse_duration("500ms")
    (60.0, 2.5, 0.5)
    """
    if isinstance(value, (int, float)):
        return float(value)
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)", value)
    if not match:
        raise SpecError(f"bad duration {value!r}: use seconds or e.g. 500ms, 30s, 1m, 2h")
    return float(match.group(1)) * _UNITS[match.group(2)]


def load_spec(path: str | Path, schemas: Callable[[], Mapping[str, Mapping[str, str]]] | None = None) -> ViewSpec:
    """Read and validate one YAML spec file; a SpecError names the file, the line and what is wrong.
    ``schemas`` gives the lake tables' columns, for decorrelating subqueries (``with_derived_views``)."""
    path = Path(path)
    try:
        data, lines = _parse_yaml(path.read_text())
    except yaml.YAMLError as err:
        raise SpecError(_yaml_problem(path, err)) from err
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"{path}: cannot read the spec: {err}") from err
    return spec_from_dict(data, source=str(path), lines=lines, schemas=schemas)


def spec_from_dict(data: Any, source: str = "<spec>", lines: Mapping[str, int] | None = None,
                   schemas: Callable[[], Mapping[str, Mapping[str, str]]] | None = None) -> ViewSpec:
    """Validate a parsed spec against the JSON schema and build a ViewSpec.

    ``lines`` maps top-level keys to their line in the file ("" to the mapping's first line), so a
    schema violation names the line as well as the field.
    """
    if not isinstance(data, dict):
        raise SpecError(f"{source}: a view spec must be a mapping with name, sql, deadline; got {type(data).__name__}")
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.path))
    if errors:
        raise SpecError("\n".join(f"{_where(source, e, lines or {})}: {_field(e)}: {e.message}" for e in errors))
    known = {"name", "sql", "deadline", "tick", "kind", "on_unreadable_changes", "nullable_keys", "max_pending_age", "description",
             "refresh_policy"}
    check_sql(data["sql"], source)  # a function no view may call: the spec does not load
    return with_derived_views(ViewSpec(
        name=data["name"],
        sql=data["sql"],
        deadline_s=parse_duration(data["deadline"]),
        tick_s=parse_duration(data.get("tick", 60)),
        kind=data.get("kind"),
        on_unreadable_changes=data.get("on_unreadable_changes", "rebuild"),
        nullable_keys=tuple(data.get("nullable_keys", ())),
        max_pending_age_s=parse_duration(data["max_pending_age"]) if "max_pending_age" in data else None,
        options={k: v for k, v in data.items() if k not in known},
        source=source,
        refresh_policy=data.get("refresh_policy", "auto"),
    ), schemas)


@functools.cache
def spec_schema() -> dict[str, Any]:
    """The view spec's JSON schema: the common fields of ``schemas/view.schema.json``, the kinds' names
    and each kind's options (``lakeivm.views.kinds``)."""
    schema = json.loads(SCHEMA_PATH.read_text())
    schema["properties"]["kind"] = {**schema["properties"]["kind"], "enum": [k.name for k in INCREMENTAL]}
    schema["properties"].update(kind_options())
    return schema


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    """The view spec's JSON schema validator, built once per process."""
    return jsonschema.Draft202012Validator(spec_schema())


def with_derived_views(spec: ViewSpec, schemas: Callable[[], Mapping[str, Mapping[str, str]]] | None = None) -> ViewSpec:
    """``spec`` with each aggregating CTE, derived table or uncorrelated subquery of its SQL split off as
    a view of its own, ``<view>__<alias>`` (``__in<i>``/``__sq<i>`` for a subquery), that it reads
    (``lakeivm.sql.derived_views``): an aggregate over an aggregate is then maintained as a view over a
    view. The split views share the spec's file, deadline, tick and policy. Left whole: a spec
    recomputed in full, one with a ``kind:`` or kind options.

    With the lake tables' ``schemas`` (called once needed), a correlated scalar subquery is split off
    too, decorrelated, where the SQL as written has no incremental kind (TPC-H Q2, Q20; Q17 stays
    the nested kind's)."""
    from lakeivm.fingerprint import SCHEDULING_OPTIONS

    if spec.refresh_policy == FULL or spec.kind is not None or set(spec.options) - SCHEDULING_OPTIONS:
        return spec

    def name_of(alias: str) -> str | None:
        name = f"{spec.name}__{alias.lower()}"
        return name if NAME_PATTERN.fullmatch(name) else None

    sql, bodies = derived_views(spec.sql, name_of)
    if schemas is not None and compares_with_subquery(sql):
        sql, bodies = _decorrelated(spec, sql, bodies, name_of, schemas)
    derived = {name: with_derived_views(replace(spec, name=name, sql=body, nullable_keys=(), upstreams={}, derived_from=spec.name),
                                        schemas)
               for name, body in bodies.items()}
    return replace(spec, sql=sql, whole_sql=spec.sql, upstreams={**spec.upstreams, **derived}) if derived else spec


def _decorrelated(spec: ViewSpec, sql: str, bodies: dict[str, str], name_of: Callable[[str], str | None],
                  schemas: Callable[[], Mapping[str, Mapping[str, str]]]) -> tuple[str, dict[str, str]]:
    """``derived_views`` of ``spec`` with the lake tables' columns, where its SQL split so far (``sql``,
    ``bodies``) has no incremental kind; else, or if the lake cannot say (a table it reads is not
    there yet), that split unchanged."""
    try:
        tables = schemas()
        if not set(referenced_tables(spec.sql)) <= set(tables):
            return sql, bodies
        as_written = _incremental_kind(replace(spec, sql=sql), tables)
        if as_written not in (None, GENERAL_NESTED):
            return sql, bodies
        split = decorrelated_views(spec.sql, name_of, tables, (sql, bodies))
        if as_written == GENERAL_NESTED and compares_with_subquery(split[0]):
            return sql, bodies  # a subquery stays in place: the general nested algorithm keeps the SQL whole
        return split
    except Exception:  # noqa: BLE001 -- a lake or a query this cannot read: the spec loads as without it
        return sql, bodies


GENERAL_NESTED = "nested/general"


def _incremental_kind(spec: ViewSpec, schemas: Mapping[str, Mapping[str, str]]) -> str | None:
    """``spec``'s incremental kind over ``schemas`` as its SQL stands (``GENERAL_NESTED`` for the nested kind's
    general algorithm, which a decorrelated split beats: its sweep costs the distinct keys per commit), or None."""
    try:
        kind, query = _classify_incremental(spec, schemas)
    except LakeIVMError:
        return None
    return GENERAL_NESTED if kind == "nested" and nested_shape(query).name == "general" else kind


def load_specs(folder: str | Path, lake: str | None = None) -> Specs:
    """All specs in a folder (``*.yaml``/``*.yml``, and ``*.sql``: ``load_sql_specs``) by name, each loaded on its own; with the
    ``lake``'s root, its tables' columns (read once, if a spec needs them) let a correlated
    subquery split off as a view of its own (``with_derived_views``).

    A file that does not load goes to ``broken`` and the others still load (one malformed spec must
    not stop every view); so does every file of a name declared twice, since neither is the view.
    """
    read: list[dict[str, dict[str, str]]] = []  # the lake's tables' columns, once read

    def lake_schemas() -> dict[str, dict[str, str]]:
        read.append(storage.lake_table_schemas(str(lake)))
        return read[0]

    schemas = functools.cache(lake_schemas) if lake is not None else None
    loaded: dict[str, list[ViewSpec]] = {}
    broken: list[BrokenSpec] = []
    declared, not_taken = _declared(folder, schemas)
    for declared_in_file in declared:
        for spec in declared_in_file:
            if isinstance(spec, BrokenSpec):
                broken.append(spec)
                continue
            for one in (spec, *spec.split_off):
                loaded.setdefault(one.name, []).append(one)
    clashing: set[str] = set()  # files declaring a name another file declares too, directly or by a split view
    for name, same in loaded.items():
        for spec in same if len(same) > 1 else ():
            others = ", ".join(other.source for other in same if other is not spec)
            line = _name_line(spec)
            split = f" (split off the SQL of view {spec.derived_from!r})" if spec.derived_from else ""
            names = tuple(dict.fromkeys([name, *(one.name for ones in loaded.values() for one in ones if one.source == spec.source)]))
            broken.append(BrokenSpec(spec.source, f"{spec.source}: line {line}: name: view {name!r}{split} is also declared in "
                                     f"{others}; give each view its own name", names))
            clashing.add(spec.source)
    # A file with a clash loads none of its views: a view must not read a split view that is not its own.
    specs = {name: same[0] for name, same in loaded.items() if len(same) == 1 and same[0].source not in clashing}
    specs, over_broken = _over_broken(specs, broken)
    broken += over_broken
    specs, cyclic = link_upstreams(specs)
    broken += cyclic
    return Specs(specs, sorted(broken, key=lambda entry: entry.path), lake_schemas=read[0] if read else None,
                 not_taken=not_taken)


def _declared(folder: str | Path, schemas: Callable[[], Mapping[str, Mapping[str, str]]] | None
              ) -> tuple[list[list[ViewSpec | BrokenSpec]], list[str]]:
    """What each spec file of ``folder`` declares, and what of it is not taken: a views folder's
    ``*.yaml``/``*.yml``/``*.sql`` files, a Spark Declarative Pipelines spec's SQL files where
    ``folder`` is that spec or holds it (``lakeivm.catalog.pipeline``), or a dbt project's
    materialized views where ``folder`` holds ``dbt_project.yml`` (``lakeivm.catalog.dbt``)."""
    try:
        if dbt.project_manifest(folder) is not None:
            project = dbt.read_project(folder)
            return [load_sql_specs(Path(folder) / project.files[name], schemas, text=statement)
                    for name, statement in project.views.items()], project.not_taken
        spec_path = pipeline.spec_file(folder)
        if spec_path is None:
            paths = sorted([*Path(folder).glob("*.yaml"), *Path(folder).glob("*.yml"), *Path(folder).glob("*.sql")])
            return [_load_file(path, schemas) for path in paths], []
        read = pipeline.read_pipeline(spec_path)
    except SpecError as err:
        return [[BrokenSpec(str(folder), str(err), (Path(folder).name,))]], []
    declared, others = [], []
    for path, text in sorted(read.sql_files.items()):
        skipped: list[ddl.Declaration] = []
        declared.append(load_sql_specs(path, schemas, text=text, defaults=read.defaults, skipped=skipped))
        others += [f"{path.relative_to(read.spec_path.parent)}: line {one.line}: {one.other} ...: not a materialized view, "
                   "not run by lakeivm (a view reading its name reads the lake's table of that name)" for one in skipped]
    return declared, [*read.not_taken, *others]


def load_sql_specs(path: str | Path, schemas: Callable[[], Mapping[str, Mapping[str, str]]] | None = None,
                   text: str | None = None, defaults: Mapping[str, str] | None = None,
                   skipped: list[ddl.Declaration] | None = None) -> list[ViewSpec | BrokenSpec]:
    """The views a ``.sql`` file's ``CREATE MATERIALIZED VIEW`` statements declare (``lakeivm.sql.ddl``), each
    validated as a YAML spec is (``spec_from_dict``); a statement that does not load is a BrokenSpec
    naming the file and its line, and the file's other statements still load. A pipeline's file
    (``defaults``: the fields its spec gives every view) may hold other statements: they go to ``skipped``."""
    path = Path(path)
    try:
        text = path.read_text() if text is None else text
        declared = ddl.declarations(text, str(path), dict(defaults or {}), others=skipped is not None)
    except (OSError, UnicodeDecodeError) as err:
        return [BrokenSpec(str(path), f"{path}: cannot read the spec: {err}", (path.stem,))]
    except SpecError as err:
        return [BrokenSpec(str(path), str(err), tuple(dict.fromkeys([*ddl.declared_names(text), path.stem])))]
    out: list[ViewSpec | BrokenSpec] = []
    for one in declared:
        if one.other is not None:
            skipped.append(one)  # type: ignore[union-attr] -- others only where skipped is given
            continue
        try:
            if one.problem:
                raise SpecError(one.problem)
            check_sql("\n" * (one.sql_line - 1) + one.data["sql"], str(path))  # a refused call named at its line in the file
            out.append(spec_from_dict(one.data, source=str(path), lines=one.lines, schemas=schemas))
        except SpecError as err:
            out.append(BrokenSpec(str(path), str(err), (one.name,) if one.name else (path.stem,)))
    return out


def _load_file(path: Path, schemas: Callable[[], Mapping[str, Mapping[str, str]]] | None) -> list[ViewSpec | BrokenSpec]:
    """The views one file of a views folder declares, or why they do not load."""
    if path.suffix == ".sql":
        return load_sql_specs(path, schemas)
    try:
        return [load_spec(path, schemas)]
    except SpecError as err:
        return [BrokenSpec(str(path), str(err), _declared_names(path))]


def _name_line(spec: ViewSpec) -> int:
    """The line of the file declaring ``spec`` (or the view it is split off) that names it."""
    text = Path(spec.source).read_text()
    if not spec.source.endswith(".sql"):
        return _key_lines(text).get("name", 1)
    names = {one.name: one.line for one in ddl.declarations(text, spec.source)}
    return names.get(spec.name) or names.get(spec.derived_from or "") or 1


def _over_broken(specs: dict[str, ViewSpec], broken: list[BrokenSpec]) -> tuple[dict[str, ViewSpec], list[BrokenSpec]]:
    """``specs`` less each view that reads a view whose spec does not load (a name its file declares),
    directly or through other views: it cannot run either, and is listed saying which."""
    unloaded = {entry.names[0]: (entry.names[0], entry) for entry in broken if _declares(entry.path, entry.names[0])}
    out: list[BrokenSpec] = []
    while reading := {name: read for name, spec in specs.items() for read in referenced_tables(spec.sql) if read in unloaded}:
        for name, read in reading.items():
            spec, (root, entry) = specs.pop(name), unloaded[read]
            through = "" if read == root else f", which reads view {root!r}"
            out.append(BrokenSpec(spec.source, f"{spec.source}: sql: reads view {read!r}{through}, whose spec does not load "
                                  f"({entry.summary}); fix that spec first", (name,)))
            unloaded[name] = (root, entry)
    return specs, out


def _declares(path: str, name: str) -> bool:
    """Whether the spec file at ``path`` has the line ``name: <name>`` (a ``.sql`` file: declares view
    ``name``), not just that file name."""
    try:
        if path.endswith(".sql"):
            return name in ddl.declared_names(Path(path).read_text())
        return re.search(rf"^name:\s*[\"']?{re.escape(name)}\b", Path(path).read_text(), re.MULTILINE) is not None
    except (OSError, UnicodeDecodeError):
        return False


def link_upstreams(specs: Mapping[str, ViewSpec]) -> tuple[dict[str, ViewSpec], list[BrokenSpec]]:
    """Each spec with ``upstreams``: the specs of the views its SQL names (a view over views reads
    their results, ``lakeivm.sources.upstream``), linked transitively; the specs on a cycle do not load
    (each is reported naming the cycle)."""
    from graphlib import CycleError, TopologicalSorter

    from lakeivm.sql import referenced_tables

    graph = {name: [t for t in referenced_tables(spec.sql) if t in specs] for name, spec in specs.items()}  # a self-loop is a cycle too
    broken: list[BrokenSpec] = []
    while True:
        try:
            order = list(TopologicalSorter(graph).static_order())
            break
        except CycleError as err:
            cycle = err.args[1]
            text = " -> ".join(cycle)
            for name in dict.fromkeys(cycle):
                broken.append(BrokenSpec(specs[name].source, f"{specs[name].source}: sql: views read each other in a cycle "
                                         f"({text}); a view may read only views that do not read it back", (name,)))
                graph.pop(name, None)
            graph = {name: [t for t in reads if t in graph] for name, reads in graph.items()}
    linked: dict[str, ViewSpec] = {}
    for name in order:  # upstreams first
        linked[name] = replace(specs[name], upstreams={t: linked[t] for t in graph[name]}) if graph[name] else specs[name]
    return {name: linked[name] for name in specs if name in linked}, broken


# Options that shape an incremental kind's state: a view that has them is never recomputed in full instead.
KIND_OPTIONS = frozenset(kind_options()) | {"seed"}


@dataclass(frozen=True)
class Choice:
    """How a view is maintained: its kind, its parsed query, and (for the full kind) why not incrementally."""

    kind: str
    query: Query
    why_full: str | None = None
    auto: bool = False  # refresh_policy auto over an incremental kind: a run may recompute in full instead (planning.auto)

    @property
    def mode(self) -> str:
        return "full" if self.kind == FULL else "incremental"


def classify(spec: ViewSpec, schemas: Mapping[str, Mapping[str, str]]) -> tuple[str, Query]:
    """Parse the view's SQL and pick its maintainer kind, or raise UnsupportedQuery saying why."""
    choice = choose(spec, schemas)
    return choice.kind, choice.query


def choose(spec: ViewSpec, schemas: Mapping[str, Mapping[str, str]]) -> Choice:
    """The view's refresh policy applied (Databricks' REFRESH POLICY, Snowflake's refresh modes):

    - ``incremental``: an incremental kind, or UnsupportedQuery naming the construct that prevents it;
    - ``full``: the full kind, any query (``lakeivm.sql.parse_full``);
    - ``auto`` (default): incremental where the SQL allows it, else full, with the construct as the reason.
      A spec that names a ``kind`` or a kind's options asked for that kind: it is never recomputed instead.
    """
    key = (repr(spec), tuple(sorted(spec.upstreams)), json.dumps(schemas, sort_keys=True))
    if key in _CHOSEN:  # every run of a chain classifies its views again (``upstream.prepare``): parsed once
        return _CHOSEN[key]
    if len(_CHOSEN) > 1000:
        _CHOSEN.clear()
    try:
        choice = _CHOSEN[key] = _choose(spec, schemas)
        return choice
    except UnsupportedQuery as err:
        if spec.derived_from and _UNRESOLVED in str(err):  # a split-off subquery naming the outer query's column
            raise UnsupportedQuery(f"{err} (view {spec.name} is split off the SQL of view {spec.derived_from}: if the "
                                   "column is the outer query's, qualify it with its table, `t.col`, and the subquery "
                                   "stays in place)") from err
        raise


_CHOSEN: dict[tuple, Choice] = {}  # choose's results in this process: a spec and its sources' schemas decide it
_UNRESOLVED = "could not be resolved"  # sqlglot's words for a column no table in scope has


def _choose(spec: ViewSpec, schemas: Mapping[str, Mapping[str, str]]) -> Choice:
    asked = _asked_kind(spec)
    if spec.refresh_policy == FULL:
        if asked:
            raise UnsupportedQuery(f"{spec.source}: refresh_policy: full recomputes the view, so {asked} does not apply; "
                                   "remove it, or the refresh policy.")
        return Choice(FULL, parse_full(spec.sql, schemas, spec.source), "refresh_policy: full")
    try:
        kind, query = _classify_incremental(spec, schemas)
        return Choice(kind, query, auto=spec.refresh_policy == "auto" and not asked)
    except UnsupportedQuery as err:
        if spec.refresh_policy == "incremental" or asked or _UNRESOLVED in str(err):  # a column no table has: no view at all
            raise
        query = parse_full(spec.sql, schemas, spec.source)  # what no view may hold is refused by this too
        return Choice(FULL, query, str(err).removeprefix(f"{spec.source}: "))


def _asked_kind(spec: ViewSpec) -> str | None:
    """What in the spec asks for one incremental kind (``kind:`` or that kind's options), if anything."""
    if spec.kind:
        return f"kind {spec.kind}"
    return "/".join(sorted(KIND_OPTIONS & set(spec.options))) or None


def _classify_incremental(spec: ViewSpec, schemas: Mapping[str, Mapping[str, str]]) -> tuple[str, Query]:
    """The kind ``spec`` names, or the first in ``lakeivm.views.kinds`` order that claims it, and the query it
    maintains; UnsupportedQuery naming the construct or option that prevents it."""
    whole = next((k for k in INCREMENTAL if k.as_written and spec.kind in (None, k.name) and k.as_written(spec.sql)), None)
    query = parse_full(spec.sql, schemas, spec.source) if whole else parse_query(spec.sql, schemas, source=spec.source)
    if not whole and _is_projection(spec, query):  # rows with multiplicities, kept by first_order
        query = grouped(query, spec.source)
        if spec.kind not in (None, "first_order"):
            raise UnsupportedQuery(f"{spec.source}: kind {spec.kind} needs aggregates; a projection without them is kept "
                                   "by kind first_order (each distinct row and its multiplicity). Remove `kind:`.")
    if spec.kind is not None and spec.kind not in BY_NAME:
        raise UnsupportedQuery(f"{spec.source}: kind {spec.kind!r} is not available in this version of lakeivm "
                               f"(available: {', '.join(k.name for k in INCREMENTAL)}).")
    kind = BY_NAME[spec.kind] if spec.kind else whole or _default_kind(spec, query)
    only_set_kinds = "a query over UNION ALL" if query.branches else query.outer[0].construct if query.outer else None
    if only_set_kinds and not kind.set_operations:
        owners = " or ".join(k.name for k in INCREMENTAL if k.set_operations)
        raise UnsupportedQuery(f"{spec.source}: {only_set_kinds} is maintained by kind {owners}, not by kind {kind.name}; "
                               "remove `kind:` (and the kind's options)")
    foreign = sorted(option for option in spec.options if (owner := owner_of(option)) is not None and owner is not kind)
    if foreign:
        owner = owner_of(foreign[0])
        needs = ("need a join_sample view (sample_size: k)" if owner is JOIN_SAMPLE and "sample_size" not in spec.options
                 else f"need kind {owner.name}")
        raise UnsupportedQuery(f"{spec.source}: {'/'.join(foreign)} {needs}, not kind {kind.name}; remove `kind:` (or the option).")
    query = kind.fit(spec, query, schemas)
    if spec.upstreams and not kind.per_group:
        raise UnsupportedQuery(f"{spec.source}: a view over views ({', '.join(spec.upstreams)}) is maintained by kinds "
                               f"{_per_group()}, not by kind {kind.name}; under refresh_policy auto it is recomputed in full.")
    if query.limit is not None and not kind.per_group:
        raise UnsupportedQuery(f"{spec.source}: ORDER BY ... LIMIT (a top-k) is maintained over the groups of kinds "
                               f"{_per_group()}, not by kind {kind.name}.")
    return kind.name, query


def _per_group() -> str:
    return " and ".join(k.name for k in INCREMENTAL if k.per_group)


def _is_projection(spec: ViewSpec, query: Query) -> bool:
    """A select-project-join without aggregates or GROUP BY that no kind's option claims (a sample, a regression)."""
    return (not query.aggregates and not query.group_keys and not query.has_subquery and spec.kind != "join_sample"
            and not any(k.claims(spec, query) for k in INCREMENTAL if not k.set_operations and set(k.options) & set(spec.options)))


def _default_kind(spec: ViewSpec, query: Query) -> Kind:
    """The first kind in ``lakeivm.views.kinds`` order that claims the view."""
    return next(candidate for candidate in INCREMENTAL if candidate.claims(spec, query))


def why_not(spec: ViewSpec, query: Query, chosen: str) -> list[str]:
    """For ``lakeivm explain``: why each kind ahead of ``chosen`` that says so did not take the view."""
    lines = []
    for candidate in INCREMENTAL:
        if candidate.name == chosen:
            break
        if candidate.why_not is not None and (reason := candidate.why_not(spec, query)):
            lines.append(f"not {candidate.name}: {reason}")
    return lines


def _yaml_problem(path: Path, err: yaml.YAMLError) -> str:
    """One line: where the YAML breaks and the fix. An unclosed bracket or quote is reported where it
    opened (the parser notices it lines later); a block mapping's context would only name line 1."""
    problem = getattr(err, "problem_mark", None)
    context = getattr(err, "context", None) or ""
    mark = (getattr(err, "context_mark", None) if "block" not in context else None) or problem
    line = mark.line + 1 if mark else 1
    what = ", ".join(part for part in (context, getattr(err, "problem", None)) if part) or str(err)
    seen = f" (noticed at line {problem.line + 1})" if problem and problem.line + 1 != line else ""
    return (f"{path}: line {line}: malformed YAML: {' '.join(what.split())}{seen}; fix the YAML there: quote a value "
            "with special characters, and write SQL as a block (`sql: |`, the query indented on the lines below)")


_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser, where PyYAML was built with it


def _parse_yaml(text: str) -> tuple[Any, dict[str, int]]:
    """The document and its top-level keys' lines (``_node_lines``) from one parse, by libyaml where
    installed: every command parses every spec as it starts, and PyYAML's pure-Python parser made
    that start slow. A malformed document is parsed again by PyYAML's loader, whose error names the
    context."""
    loader = _FAST_LOADER(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError:
        yaml.safe_load(text)  # raises PyYAML's own, more telling, error
        raise
    finally:
        loader.dispose()
    return data, _node_lines(node)


def _key_lines(text: str) -> dict[str, int]:
    """Line of each top-level key of a YAML mapping, and "" -> the mapping's first line (1-based)."""
    return _node_lines(yaml.compose(text, Loader=_FAST_LOADER))


def _node_lines(node: Any) -> dict[str, int]:
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {"": node.start_mark.line + 1, **{str(key.value): key.start_mark.line + 1 for key, _ in node.value}}


def _declared_names(path: Path) -> tuple[str, ...]:
    """The views a file that does not load may be meant to declare: a readable ``name:`` line, its stem."""
    try:
        match = re.search(r"^name:\s*[\"']?([A-Za-z0-9_-]+)", path.read_text(), re.MULTILINE)
    except (OSError, UnicodeDecodeError):
        match = None
    return tuple(dict.fromkeys([*([match.group(1)] if match else []), path.stem]))


def _where(source: str, error: jsonschema.ValidationError, lines: Mapping[str, int]) -> str:
    line = lines.get(str(error.path[0]) if error.path else "")
    return f"{source}: line {line}" if line else source


def _field(error: jsonschema.ValidationError) -> str:
    path = ".".join(str(p) for p in error.path)
    return path or "(top level)"
