"""The one gate of every non-Spark path to the lake: may delta-rs read (or write) this table version?

lakeivm reads and writes small tables and change ranges in the run's own process (delta-rs reads,
filtered scans, change feeds, MERGEs, overwrites and RESTOREs; DuckDB over the Arrow they give), so
that a refresh costs its work rather than Spark jobs. That makes delta-rs a second reader of the
lake beside Spark's Delta, and where the two disagree a view is silently wrong (a column-mapped
table read by logical name where Spark reads physical names swapped two columns' values).

So every such path asks here first, and only a table whose protocol and features delta-rs is known
to handle exactly as Spark does is admitted; everything else goes through Spark. Admitted:

- reads: reader version 1, or 3 with no reader feature but timestamps without time zone; no column
  mapping in any mode (reader version 2 needs no reader feature, so the protocol alone does not show
  it). Refused among others: deletion vectors, column mapping, type widening, v2 checkpoints.
- writes, also: no writer feature beyond ``WRITABLE`` and none of the features that constrain or
  generate values in use (append-only, CHECK constraints, invariants, generated and identity
  columns), no row tracking, in-commit timestamps or clustering -- Spark enforces or maintains them
  on every write, and a write by delta-rs that skipped one would be a wrong table, not an error.

``tests/test_fastpath.py`` proves it: for each feature a table that uses it, every fast path
against Spark's answer on the same version; a feature joins the admitted set with that test.
"""
from __future__ import annotations

import json
from typing import Any

READABLE_FEATURES = frozenset({"timestampNtz"})  # reader features delta-rs reads exactly as Spark (tests/test_fastpath.py)
WRITABLE = frozenset({"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns",  # when not in use
                      "timestampNtz"})
_CONSTRAINING = {"delta.appendOnly": "append-only", "delta.enableRowTracking": "row tracking",
                 "delta.enableInCommitTimestamps": "in-commit timestamps"}
_FIELD_FEATURES = {"delta.generationExpression": "a generated column", "delta.invariants": "a column invariant",
                   "delta.identity.start": "an identity column", "delta.columnMapping.id": "column mapping"}


def refusal(table: Any, write: bool = False) -> str | None:
    """Why delta-rs may not read (``write``: nor write) the loaded delta-rs ``DeltaTable`` as Spark
    does, or None if it may."""
    protocol, metadata = table.protocol(), table.metadata()
    config = metadata.configuration or {}
    mapping = config.get("delta.columnMapping.mode", "none")
    if mapping != "none" or protocol.min_reader_version == 2:
        return f"column mapping (mode {mapping})"
    reader = protocol.min_reader_version
    unread = sorted(set(protocol.reader_features or ()) - READABLE_FEATURES)
    if reader not in (1, 3) or unread:
        return f"reader version {reader}" + (f" with {', '.join(unread)}" if unread else "")
    if not write:
        return None
    writer = protocol.min_writer_version
    unwritten = sorted(set(protocol.writer_features or ()) - WRITABLE)
    if writer in (5, 6) or writer > 7 or unwritten:
        return f"writer version {writer}" + (f" with {', '.join(unwritten)}" if unwritten else "")
    in_use = [what for key, what in _CONSTRAINING.items() if str(config.get(key, "false")).lower() == "true"]
    in_use += ["a CHECK constraint"] * any(key.startswith("delta.constraints.") for key in config)
    in_use += sorted({what for field in _fields(table) for key, what in _FIELD_FEATURES.items() if key in field})
    return ", ".join(dict.fromkeys(in_use)) or None


def admits(table: Any, write: bool = False) -> bool:
    """Whether delta-rs may read (``write``: and write) the loaded table (``refusal`` is None)."""
    return refusal(table, write) is None


def load(path: str, version: int | None = None, write: bool = False) -> Any | None:
    """The Delta table at ``path`` (at ``version``) loaded by delta-rs if the gate admits it, else
    None: the caller goes through Spark. A table that does not exist raises delta-rs's
    ``TableNotFoundError``, as ``DeltaTable`` does."""
    from deltalake import DeltaTable

    table = DeltaTable(path, version=version)
    return table if admits(table, write) else None


def _fields(table: Any) -> list[dict[str, Any]]:
    """The metadata of every column (nested ones too) of a loaded delta-rs table."""
    found: list[dict[str, Any]] = []

    def walk(kind: Any) -> None:
        if isinstance(kind, dict):
            for field in kind.get("fields", ()):
                found.append(field.get("metadata") or {})
                walk(field["type"])
            for key in ("elementType", "keyType", "valueType"):
                walk(kind.get(key))

    walk(json.loads(table.schema().to_json()))
    return found
