"""Join specs for reservoir sampling over joins: named relations, named attributes, one join tree (§2, §4.1).

A spec maps each relation (a slot: a self-join lists one slot per occurrence) to its attribute
names; relations join naturally on shared names. The spec must be connected and α-acyclic: its
join tree is the maximum-weight spanning tree of the relations' shared-attribute graph, which is a
join tree exactly when the hypergraph is acyclic (Bernstein & Goodman), checked by the running
intersection property. ``directed_edges()`` lists every tree edge in both directions: the counts
of the paper's rooted tree copies depend only on the edge direction, so all copies share them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lakeivm.errors import InvalidInput, UnsupportedQuery


@dataclass(frozen=True)
class DirectedEdge:
    """Tree edge child -> parent: key(child) = shared attributes, in the spec's global attribute order.

    ``child_key``/``parent_key`` are the key's positions in the child's and the parent's rows;
    ``children`` are the ids of the edges (c -> child) for c a tree neighbour of child other than parent.
    """

    child: str
    parent: str
    key: tuple[str, ...]
    child_key: tuple[int, ...]
    parent_key: tuple[int, ...]
    children: tuple[int, ...]


@dataclass(frozen=True)
class JoinSpec:
    """A natural join of named relations over named attributes, with its join tree.

    >>> spec = JoinSpec.from_mapping({"R1": ("a", "b"), "R2": ("b", "c"), "R3": ("c", "d")})
    >>> spec.tree
    (('R1', 'R2'), ('R2', 'R3'))
    """

    relations: tuple[tuple[str, tuple[str, ...]], ...]
    tree: tuple[tuple[str, str], ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        _validate(self.relations)
        object.__setattr__(self, "tree", _join_tree(self.relations))

    @classmethod
    def from_mapping(cls, relations: Mapping[str, Sequence[str]]) -> JoinSpec:
        """Build a spec from ``{relation: (attribute, ...)}`` in the mapping's order."""
        return cls(tuple((str(name), tuple(attrs)) for name, attrs in relations.items()))

    def to_mapping(self) -> dict[str, list[str]]:
        """The JSON form ``{relation: [attribute, ...]}`` that ``from_mapping`` reads back."""
        return {name: list(attrs) for name, attrs in self.relations}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.relations)

    @property
    def attributes(self) -> tuple[str, ...]:
        """Every attribute once, in order of first appearance."""
        return tuple(dict.fromkeys(a for _, attrs in self.relations for a in attrs))

    def attrs(self, relation: str) -> tuple[str, ...]:
        for name, attrs in self.relations:
            if name == relation:
                return attrs
        raise InvalidInput(f"unknown relation {relation!r}; the join spec has {list(self.names)}")

    def neighbors(self, relation: str) -> tuple[str, ...]:
        """Tree neighbours of ``relation``, in tree-edge order."""
        return tuple(b if a == relation else a for a, b in self.tree if relation in (a, b))

    def directed_edges(self) -> tuple[DirectedEdge, ...]:
        """Both directions of every tree edge; edge i's ``children`` index this same tuple."""
        pairs = [(a, b) for a, b in self.tree] + [(b, a) for a, b in self.tree]
        ids = {pair: i for i, pair in enumerate(pairs)}
        order = self.attributes
        edges = []
        for child, parent in pairs:
            shared = set(self.attrs(child)) & set(self.attrs(parent))
            key = tuple(a for a in order if a in shared)
            edges.append(DirectedEdge(
                child=child,
                parent=parent,
                key=key,
                child_key=tuple(self.attrs(child).index(a) for a in key),
                parent_key=tuple(self.attrs(parent).index(a) for a in key),
                children=tuple(ids[(c, child)] for c in self.neighbors(child) if c != parent),
            ))
        return tuple(edges)


def _validate(relations: tuple[tuple[str, tuple[str, ...]], ...]) -> None:
    if not relations:
        raise InvalidInput("a join spec needs at least one relation, e.g. {'R1': ('a', 'b')}")
    names = [name for name, _ in relations]
    if len(set(names)) != len(names):
        raise InvalidInput(f"relation names {names} repeat; give each self-join occurrence its own slot name")
    for name, attrs in relations:
        if not name or not attrs or len(set(attrs)) != len(attrs) or not all(isinstance(a, str) and a for a in attrs):
            raise InvalidInput(f"relation {name!r} needs distinct non-empty attribute names, got {attrs!r}")


def _join_tree(relations: tuple[tuple[str, tuple[str, ...]], ...]) -> tuple[tuple[str, str], ...]:
    """Kruskal's maximum spanning tree on |shared attributes|, then the running-intersection check."""
    attrs = {name: set(a) for name, a in relations}
    names = [name for name, _ in relations]
    candidates = sorted(
        ((-len(attrs[a] & attrs[b]), i, j) for i, a in enumerate(names) for j, b in enumerate(names)
         if i < j and attrs[a] & attrs[b]),
    )
    root = {name: name for name in names}

    def find(x: str) -> str:
        while root[x] != x:
            x = root[x]
        return x

    tree = []
    for _, i, j in candidates:
        a, b = find(names[i]), find(names[j])
        if a != b:
            root[a] = b
            tree.append((names[i], names[j]))
    if len(tree) != len(names) - 1:
        raise UnsupportedQuery(f"join of {names} is disconnected (a Cartesian product); add a join attribute linking every relation")
    _check_running_intersection(names, attrs, tree)
    return tuple(tree)


def _check_running_intersection(names: list[str], attrs: dict[str, set[str]], tree: list[tuple[str, str]]) -> None:
    for attribute in set().union(*attrs.values()):
        holders = {n for n in names if attribute in attrs[n]}
        links = [(a, b) for a, b in tree if a in holders and b in holders]
        if len(links) != len(holders) - 1:
            raise UnsupportedQuery(
                f"join of {names} is cyclic (attribute {attribute!r} breaks the join tree); "
                "only acyclic joins are supported: drop or rename a join attribute"
            )
