"""The exceptions lakeivm raises. Every message names the problem and how to fix it."""
from __future__ import annotations


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
