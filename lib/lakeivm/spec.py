"""A view's spec as lakeivm holds it (``ViewSpec``), a views folder's specs (``Specs``), and those
specs kept between commands (``cached_specs``).

Light on purpose: it imports neither sqlglot nor jsonschema (``lakeivm.registry`` parses and
validates a spec with them), so that a command with nothing to do -- a no-op refresh, an Airflow
task parsing its DAG file -- reads its specs from the cache and never imports them: loading a
folder of ten specs parsed every spec's SQL (with the split views, the links between views and the
fingerprints) and imported both libraries, ~0.3 s of a no-op command's ~0.55-0.8 s.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakeivm.config import SCHEMAS, cache_home
from lakeivm.errors import SpecError, UnknownView

SCHEMA_PATH = SCHEMAS / "view.schema.json"
KINDS = ("first_order", "fivm", "triangle", "nested", "join_sample")  # the incremental kinds (spec `kind:`)
AVAILABLE_KINDS = ("first_order", "triangle", "join_sample", "nested", "fivm")
GROUP_KINDS = ("first_order", "fivm")  # the kinds that keep a state per group: top-k and views over views
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
    columns of a correlated subquery are its own)."""

    def __init__(self, specs: Mapping[str, ViewSpec], broken: Sequence[BrokenSpec] = (),
                 lake_schemas: Mapping[str, Mapping[str, str]] | None = None) -> None:
        super().__init__(specs)
        self.broken = tuple(broken)
        self.lake_schemas = lake_schemas


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


CACHE_DAYS = 7  # a cached folder not loaded for this long is removed (tests make many folders)


def cached_specs(folder: str | Path, lake: str | None = None) -> Specs:
    """``registry.load_specs(folder, lake)``, kept between commands (``specs_cache``):
    one file per folder, valid while the folder's spec files and lakeivm's own code are byte for
    byte and file for file what they were, and the lake's tables' columns where loading them read
    those (a correlated subquery is split by them: ``registry.with_derived_views``). With it go the
    fingerprints' normalized SQL (``fingerprint.remember``), so that a hit parses no SQL."""
    from lakeivm import fingerprint, storage

    folder = Path(folder)
    key = _folder_key(folder, lake)
    entry = specs_cache() / f"{hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:24]}.pickle"
    try:
        stored_key, specs, normalized = pickle.loads(entry.read_bytes())
        if stored_key == key and (specs.lake_schemas is None or storage.lake_table_schemas(str(lake)) == specs.lake_schemas):
            fingerprint.remember(normalized)
            os.utime(entry)  # kept while used
            return specs
    except (OSError, EOFError, ValueError, TypeError, AttributeError, ImportError, pickle.UnpicklingError):
        pass  # no entry, or one of another lakeivm: load the folder
    from lakeivm.registry import load_specs

    specs = load_specs(folder, lake)
    normalized = {spec.sql: fingerprint.normalized_sql(spec.sql) for spec in _every_spec(specs)}
    _write(entry, pickle.dumps((key, specs, normalized), protocol=pickle.HIGHEST_PROTOCOL))
    return specs


def specs_cache() -> Path:
    """Where kept specs go: ``$LAKEIVM_SPEC_CACHE``, else ``specs`` in lakeivm's cache (``config.cache_home``)."""
    return Path(os.environ["LAKEIVM_SPEC_CACHE"]) if os.environ.get("LAKEIVM_SPEC_CACHE") else cache_home() / "specs"


def _folder_key(folder: Path, lake: str | None) -> str:
    """What a folder's loaded specs depend on: its spec files' names and bytes, whether a lake was
    given, and lakeivm's code (each module's size and modification time)."""
    digest = hashlib.sha256(repr(lake is not None).encode())
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        digest.update(path.name.encode() + b"\0")
        try:
            digest.update(path.read_bytes() + b"\0")
        except OSError:
            digest.update(b"<unreadable>\0")
    package = Path(__file__).parent
    for path in sorted([*package.rglob("*.py"), SCHEMA_PATH]):
        stat = path.stat()
        digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def _every_spec(specs: Mapping[str, ViewSpec]) -> list[ViewSpec]:
    """Every spec of ``specs`` and of their upstreams."""
    seen: dict[int, ViewSpec] = {}
    pending = list(specs.values())
    while pending:
        spec = pending.pop()
        if id(spec) not in seen:
            seen[id(spec)] = spec
            pending.extend(spec.upstreams.values())
    return list(seen.values())


def _write(entry: Path, data: bytes) -> None:
    """Write a cache entry atomically and prune entries unused for CACHE_DAYS; a cache that cannot be
    written (a read-only home) only costs the next command the load."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=entry.parent, suffix=".tmp")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, entry)
        stale = time.time() - CACHE_DAYS * 86400
        for other in entry.parent.iterdir():
            if other.stat().st_mtime < stale:
                other.unlink(missing_ok=True)
    except OSError:
        pass
