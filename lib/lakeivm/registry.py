"""View specs (YAML) -> validated ViewSpec objects; the classifier that picks each view's kind.

A spec is validated against ``schemas/view.schema.json``; every error names the file and field.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from lakeivm.config import REPO_ROOT
from lakeivm.errors import SpecError, UnknownView, UnsupportedQuery
from lakeivm.sql import Query, parse_query
from lakeivm.views.join_sample.plan import plan_sample
from lakeivm.views.nested.shape import diagnose, nested_shape
from lakeivm.views.fivm.plan import build_plan, fit_query
from lakeivm.views.triangle.shape import triangle_shape

SCHEMA_PATH = REPO_ROOT / "schemas" / "view.schema.json"
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
KINDS = ("first_order", "fivm", "triangle", "nested", "join_sample")
AVAILABLE_KINDS = ("first_order", "triangle", "join_sample", "nested", "fivm")


@dataclass(frozen=True)
class ViewSpec:
    """One registered view: its SQL, deadline and tick (seconds), and kind-specific options."""

    name: str
    sql: str
    deadline_s: float
    tick_s: float = 60.0
    kind: str | None = None
    on_unreadable_changes: str = "rebuild"
    nullable_keys: tuple[str, ...] = ()
    max_pending_age_s: float | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<spec>"


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


def load_spec(path: str | Path) -> ViewSpec:
    """Read and validate one YAML spec file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise SpecError(f"{path}: malformed YAML: {err}") from err
    return spec_from_dict(data, source=str(path))


def spec_from_dict(data: Any, source: str = "<spec>") -> ViewSpec:
    """Validate a parsed spec against the JSON schema and build a ViewSpec."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: a view spec must be a mapping with name, sql, deadline; got {type(data).__name__}")
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.path))
    if errors:
        raise SpecError("\n".join(f"{source}: {_field(e)}: {e.message}" for e in errors))
    known = {"name", "sql", "deadline", "tick", "kind", "on_unreadable_changes", "nullable_keys", "max_pending_age", "description"}
    return ViewSpec(
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
    )


def load_specs(folder: str | Path) -> dict[str, ViewSpec]:
    """All specs in a folder (``*.yaml``/``*.yml``), by name; duplicate names are an error."""
    specs: dict[str, ViewSpec] = {}
    for path in sorted([*Path(folder).glob("*.yaml"), *Path(folder).glob("*.yml")]):
        spec = load_spec(path)
        if spec.name in specs:
            raise SpecError(f"{path}: name: view {spec.name!r} is already defined in {specs[spec.name].source}")
        specs[spec.name] = spec
    return specs


def find_spec(specs: Mapping[str, ViewSpec], name: str) -> ViewSpec:
    """The spec called ``name``, or UnknownView listing the registered ones."""
    if name not in specs:
        raise UnknownView(f"unknown view {name!r}; registered views: {', '.join(sorted(specs)) or 'none'}")
    return specs[name]


FIVM_OPTIONS = frozenset({"features", "label", "updatable"})  # spec options only the fivm kind reads


def classify(spec: ViewSpec, schemas: Mapping[str, Mapping[str, str]]) -> tuple[str, Query]:
    """Parse the view's SQL and pick its maintainer kind, or raise UnsupportedQuery saying why."""
    query = parse_query(spec.sql, schemas, source=spec.source)
    kind = spec.kind or _default_kind(spec, query)
    if kind not in AVAILABLE_KINDS:
        raise UnsupportedQuery(
            f"{spec.source}: kind {kind!r} is not available in this version of lakeivm "
            f"(available: {', '.join(AVAILABLE_KINDS)})."
        )
    if kind == "first_order":
        _check_first_order(spec, query)
    if kind == "fivm":
        query = _check_fivm(spec, query, schemas)
    elif FIVM_OPTIONS & set(spec.options):
        raise UnsupportedQuery(f"{spec.source}: {'/'.join(sorted(FIVM_OPTIONS & set(spec.options)))} need kind fivm, "
                               f"not {kind}; remove `kind:` (or the option).")
    if kind == "triangle" and triangle_shape(query) is None:
        raise UnsupportedQuery(
            f"{spec.source}: kind triangle needs a triangle count: SELECT COUNT(*) over three relations joined "
            "in a cycle R(a,b), S(b,c), T(c,a) (or one edge table joined with itself so), with no filters "
            "or GROUP BY. Remove `kind: triangle` to let the classifier choose."
        )
    if "foreign_keys" in spec.options and kind != "join_sample":
        raise UnsupportedQuery(f"{spec.source}: foreign_keys need a join_sample view (sample_size: k), not kind {kind}; "
                               "remove the option.")
    if kind == "join_sample":
        plan_sample(query, spec.options, spec.source)  # raises UnsupportedQuery naming the construct
    if kind == "nested" and nested_shape(query) is None:
        raise UnsupportedQuery(f"{spec.source}: kind nested: {diagnose(query)}.")
    return kind, query


def _default_kind(spec: ViewSpec, query: Query) -> str:
    if "sample_size" in spec.options:
        return "join_sample"
    if query.has_subquery:
        return "nested"
    if triangle_shape(query) is not None:
        return "triangle"
    if FIVM_OPTIONS & set(spec.options) or why_not_fivm(spec, query) is None:
        return "fivm"
    return "first_order"


def why_not_fivm(spec: ViewSpec, query: Query) -> str | None:
    """Why F-IVM cannot maintain the view (it then defaults to first_order), or None if it can."""
    try:
        build_plan(query, spec.options)
    except UnsupportedQuery as err:
        return str(err)
    return None


def _check_fivm(spec: ViewSpec, query: Query, schemas: Mapping[str, Mapping[str, str]]) -> Query:
    try:
        query = fit_query(query, spec.options, schemas)
        build_plan(query, spec.options)
    except UnsupportedQuery as err:
        raise UnsupportedQuery(f"{spec.source}: kind fivm: {err}") from err
    return query


def _check_first_order(spec: ViewSpec, query: Query) -> None:
    if query.has_subquery:
        raise UnsupportedQuery(f"{spec.source}: first_order cannot maintain a nested subquery; it needs the nested kind.")
    if not query.aggregates:
        raise UnsupportedQuery(
            f"{spec.source}: a first_order view needs aggregates (SUM/COUNT/AVG with or without GROUP BY); "
            "a plain join is kept as a sample with sample_size."
        )


def _field(error: jsonschema.ValidationError) -> str:
    path = ".".join(str(p) for p in error.path)
    return path or "(top level)"
