"""A view's spec as lakeivm holds it (``ViewSpec``) and a views folder's specs (``Specs``).

Light on purpose: it imports neither sqlglot nor jsonschema (``lakeivm.catalog.registry`` parses and
validates a spec with them), so that a command with nothing to do reads its specs kept by
``lakeivm.catalog.spec_cache`` and never imports them.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lakeivm.config import SCHEMAS
from lakeivm.errors import SpecError, UnknownView

SCHEMA_PATH = SCHEMAS / "view.schema.json"
FULL = "full"  # the kind that recomputes the SQL on the pinned snapshots (refresh_policy: full, or auto's fallback)
REFRESH_POLICIES = ("auto", "incremental", "full")
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,62}")  # = the schema's name pattern (a test checks they agree)


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
    refresh_policy: str = "auto"
    upstreams: Mapping[str, ViewSpec] = field(default_factory=dict, compare=False, repr=False)  # views its FROM names (link_upstreams)
    derived_from: str | None = None  # the view whose aggregating CTE, derived table or subquery this view is (with_derived_views)
    whole_sql: str | None = field(default=None, compare=False, repr=False)  # its SQL as declared, where with_derived_views split it

    @property
    def whole(self) -> ViewSpec | None:
        """The view as declared, recomputed in one query: what auto runs where that costs less than
        maintaining it and the views split off it (``planning.auto.choose_whole``); None: not split."""
        if self.whole_sql is None:
            return None
        split = self.split_off
        names = {one.name for one in split}  # the views it reads are theirs too: a split-off CTE may read a view
        read = {name: up for one in (self, *split) for name, up in one.upstreams.items() if name not in names}
        return replace(self, sql=self.whole_sql, whole_sql=None, refresh_policy=FULL, upstreams=read)

    @property
    def split_off(self) -> list[ViewSpec]:
        """The views split off this view's SQL (``with_derived_views``), at any depth."""
        out = []
        for up in self.upstreams.values():
            if up.derived_from == self.name:
                out += [up, *up.split_off]
        return out

    def __post_init__(self) -> None:
        # The name is spliced into SQL (log filters, state paths); a spec built in Python skips the schema.
        if not isinstance(self.name, str) or not NAME_PATTERN.fullmatch(self.name):
            raise SpecError(f"{self.source}: name: {self.name!r} is not a view name: use lower-case letters, digits "
                            "and underscores, starting with a letter (at most 63 characters)")
        if self.refresh_policy not in REFRESH_POLICIES:
            raise SpecError(f"{self.source}: refresh_policy: {self.refresh_policy!r} is not one of {', '.join(REFRESH_POLICIES)}")


@dataclass(frozen=True)
class BrokenSpec:
    """A spec file that does not load: ``problem`` names the file and line (one line per problem);
    ``names`` are the views it may be meant to declare (its readable ``name:``, its file name)."""

    path: str
    problem: str
    names: tuple[str, ...]

    @property
    def summary(self) -> str:
        """The first problem, on one line."""
        first, *more = self.problem.splitlines()
        return f"{first} (and {len(more)} more problems)" if more else first


class Specs(dict[str, ViewSpec]):
    """The specs of a views folder by name, and ``broken``: the files that did not load.
    ``lake_schemas``: the lake's tables' columns, where loading them read those (they decide which
    columns of a correlated subquery are its own). ``not_taken``: what of a Spark Declarative
    Pipelines spec lakeivm does not maintain, one line each (``lakeivm.catalog.pipeline``)."""

    def __init__(self, specs: Mapping[str, ViewSpec], broken: Sequence[BrokenSpec] = (),
                 lake_schemas: Mapping[str, Mapping[str, str]] | None = None, not_taken: Sequence[str] = ()) -> None:
        super().__init__(specs)
        self.broken = tuple(broken)
        self.lake_schemas = lake_schemas
        self.not_taken = tuple(not_taken)


def find_spec(specs: Mapping[str, ViewSpec], name: str) -> ViewSpec:
    """The spec called ``name``; SpecError naming the file and the fix if its spec does not load;
    otherwise UnknownView listing the registered views."""
    if name in specs:
        return specs[name]
    broken = getattr(specs, "broken", ())
    for entry in broken:
        if name in entry.names:
            raise SpecError(f"view {name!r} cannot run: its spec does not load:\n{entry.problem}\n"
                            f"Fix {entry.path} (the fields are described in {SCHEMA_PATH}); the other views are not affected.")
    unloaded = f"; spec files that do not load: {', '.join(entry.path for entry in broken)}" if broken else ""
    raise UnknownView(f"unknown view {name!r}; registered views: {', '.join(sorted(specs)) or 'none'}{unloaded}")
