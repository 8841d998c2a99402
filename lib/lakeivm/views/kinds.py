"""The kinds lakeivm maintains views with, most specific first: a new kind is a package plus one line here.

The classifier (``lakeivm.catalog.registry``) asks them in this order which one claims a view; ``full``
recomputes whatever none maintains (``docs/design/run.md#kinds-and-their-maintainers``).
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lakeivm.views.kind import Kind
from lakeivm.views.first_order.kind import KIND as FIRST_ORDER
from lakeivm.views.fivm.kind import KIND as FIVM
from lakeivm.views.full.kind import KIND as FULL_KIND
from lakeivm.views.join_sample.kind import KIND as JOIN_SAMPLE
from lakeivm.views.nested.kind import KIND as NESTED
from lakeivm.views.triangle.kind import KIND as TRIANGLE
from lakeivm.views.window.kind import KIND as WINDOW

if TYPE_CHECKING:
    from lakeivm.views.base import Maintainer

INCREMENTAL: tuple[Kind, ...] = (
    JOIN_SAMPLE,
    NESTED,
    TRIANGLE,
    FIVM,
    WINDOW,
    FIRST_ORDER,
)
BY_NAME: dict[str, Kind] = {kind.name: kind for kind in (*INCREMENTAL, FULL_KIND)}


def kind(name: str) -> Kind:
    """The kind called ``name`` (``full`` included)."""
    return BY_NAME[name]


def owner_of(option: str) -> Kind | None:
    """The kind that declares spec option ``option``, or None for a common option."""
    return next((k for k in INCREMENTAL if option in k.options), None)


def kind_options() -> dict[str, Mapping[str, Any]]:
    """Every kind's options with their JSON schemas (merged into the view spec's schema)."""
    return {name: schema for k in INCREMENTAL for name, schema in k.options.items()}


def maintainer_for(name: str) -> Maintainer:
    """A fresh maintainer of kind ``name``, its module imported on first use."""
    module, cls = BY_NAME[name].maintainer.split(":")
    maintainer = getattr(importlib.import_module(module), cls)()
    maintainer.kind = name
    return maintainer
