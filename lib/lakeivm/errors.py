"""The exceptions lakeivm raises. Every message names the problem and how to fix it."""
from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lakeivm.spec import ViewSpec


class LakeIVMError(Exception):
    """Base class of every error lakeivm raises on purpose."""


class SpecError(LakeIVMError):
    """A view spec (YAML) is malformed or violates lakeivm/schemas/view.schema.json."""


class UnsupportedQuery(LakeIVMError):
    """The view's SQL uses a construct no maintainer can keep incrementally."""


class ChangeRangeError(LakeIVMError):
    """A table's pending change range cannot be read (CDF off, vacuumed, schema changed)."""


class UnknownView(LakeIVMError):
    """No view of that name is registered."""


class LeaseHeld(LakeIVMError):
    """Another maintenance run of the same view holds the lease."""


class LeaseLost(LakeIVMError):
    """This run's claim on its view expired and another run took it over: the run must not commit."""


class StateError(LakeIVMError):
    """Maintained state is corrupt or inconsistent with the maintenance log."""


class InvalidInput(LakeIVMError):
    """Input data violates what an algorithm needs (e.g. a negative weight where an index needs >= 0)."""


# Spark/Delta failures a user meets in normal operation, by a marker of their message: what to say.
_KNOWN_FAILURES = (
    (("ConcurrentAppendException", "ConcurrentDeleteReadException", "ConcurrentDeleteDeleteException",
      "ConcurrentTransactionException", "ConcurrentWriteException", "MetadataChangedException",
      "ProtocolChangedException", "DELTA_CONCURRENT"),
     "another writer committed to a table this run read or wrote ({marker}); nothing was committed: refresh again"),
    (("FAILED_READ_FILE", "FileNotFoundException", "DELTA_FILE_NOT_FOUND"),
     "a file the run needed could not be read ({marker}{file}); nothing was committed. Refresh again; if "
     "it fails again the file is gone (VACUUM, or by hand): rebuild the view (lakeivm refresh VIEW --rebuild) "
     "or restore the file"),
    (("ChecksumException", "DELTA_CHECKSUM"),
     "a file of the lake failed its checksum ({marker}: written partly, or damaged); refresh again, and if it "
     "persists restore the file or rebuild the view"),
    # The server killed or restarted mid-run: pyspark closes a session whose server changed, and a
    # dead one's calls fail once its retries run out; the next run recovers what this one left.
    (("INVALID_HANDLE.SESSION_CHANGED", "NO_ACTIVE_SESSION", "StatusCode.UNAVAILABLE"),
     "the Spark Connect server at {remote} went away mid-run ({marker}: stopped, killed or restarted). Check it "
     "(`lakeivm spark status`), start it if it is down (`lakeivm spark start`), then refresh again: the next run "
     "recovers what this one left"),
)


def known_failure(err: BaseException) -> str | None:
    """One line for a known Spark/Delta failure (concurrent modification, missing files, checksum, the
    Connect server lost), or None."""
    text = f"{type(err).__name__}: {err}"
    named = re.search(r"(?:file|File) (\S+\.(?:parquet|json|crc|checkpoint\.parquet))", text)
    for markers, message in _KNOWN_FAILURES:
        marker = next((m for m in markers if m in text), None)
        if marker is not None:
            remote = _remote() if "{remote}" in message else ""
            return message.format(marker=marker, file=f" {named.group(1)}" if named else "", remote=remote)
    return None


def _remote() -> str:
    """The Spark Connect server this process is set to use (LAKEIVM_SPARK_REMOTE or lakeivm.toml)."""
    from lakeivm.config import load_settings

    try:
        return load_settings().spark_remote or "(none set)"
    except ValueError:  # a broken setting: the CLI said so before it ran anything
        return "(unreadable settings)"


def analysis_error(err: BaseException) -> str | None:
    """Spark's failure to analyse a query (an ``AnalysisException``, classic or Connect) as one line:
    its error class and first sentence, without the plan Spark appends; None for any other error.

    >>> class AnalysisException(Exception): pass
    >>> analysis_error(AnalysisException("[TABLE_OR_VIEW_NOT_FOUND] The table `s1` cannot be found. Verify the "
    ...                                  "spelling. SQLSTATE: 42P01; line 1 pos 40;\\n'Aggregate [k]"))
    '[TABLE_OR_VIEW_NOT_FOUND] The table `s1` cannot be found.'
    """
    if not any(cls.__name__ == "AnalysisException" for cls in type(err).__mro__):
        return None
    text = str(err).strip()
    first = text.splitlines()[0] if text else type(err).__name__
    return re.split(r"(?<=\.) (?=[A-Z])| SQLSTATE: |; line \d+ pos \d+", first)[0]


@contextmanager
def analysed_as(spec: ViewSpec) -> Iterator[None]:
    """Spark's failure to analyse a query of view ``spec`` as one line naming the view and its spec
    file (an UnsupportedQuery), not Spark's multi-KB plan. Nested, the innermost view's name wins: the
    outer ones see an UnsupportedQuery, which they pass on."""
    try:
        yield
    except Exception as err:
        problem = analysis_error(err)
        if problem is None:
            raise
        split = f" (split off the SQL of view {spec.derived_from})" if spec.derived_from else ""
        raise UnsupportedQuery(f"{spec.source}: view {spec.name}{split}: Spark cannot analyse its SQL: {problem}") from err
