"""View specs kept between commands: a folder's loaded specs, reused while nothing they depend on changed.

Loading a folder parses every view's SQL with sqlglot and validates it with jsonschema; a command
that only runs, reads or checks a view -- a refresh with nothing to do, an Airflow task parsing its
DAG file -- takes the specs kept from the last load instead, and imports neither library.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from lakeivm.catalog import dbt, pipeline
from lakeivm.config import cache_home
from lakeivm.errors import SpecError
from lakeivm.spec import SCHEMA_PATH, Specs, ViewSpec

CACHE_DAYS = 7  # a cached folder not loaded for this long is removed (tests make many folders)


def cached_specs(folder: str | Path, lake: str | None = None) -> Specs:
    """``registry.load_specs(folder, lake)``, kept between commands (``specs_cache``):
    one file per folder, valid while the folder's spec files and lakeivm's own code are byte for
    byte and file for file what they were, and the lake's tables' columns where loading them read
    those (a correlated subquery is split by them: ``registry.with_derived_views``). With it go the
    fingerprints' normalized SQL (``fingerprint.remember``), so that a hit parses no SQL."""
    from lakeivm import fingerprint
    from lakeivm.store import storage

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
    from lakeivm.catalog.registry import load_specs

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
    files = [*folder.glob("*.yaml"), *folder.glob("*.yml"), *folder.glob("*.sql")]
    with contextlib.suppress(SpecError):  # two spec files: loading the folder says so
        if (spec := pipeline.spec_file(folder)) is not None:  # a pipeline: every file of its folder
            files = [path for path in spec.parent.rglob("*") if path.is_file() and "__pycache__" not in path.parts]
    if (manifest := dbt.project_manifest(folder)) is not None:  # a dbt project: what its last compile left
        files = [folder / dbt.PROJECT_FILE, manifest]
    for path in sorted(files):
        digest.update(path.name.encode() + b"\0")
        try:
            digest.update(path.read_bytes() + b"\0")
        except OSError:
            digest.update(b"<unreadable>\0")
    package = Path(__file__).parents[1]  # lakeivm itself
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
