"""View trees over a variable order and the choice of views to store (F-IVM §3.2 Fig. 3, §4 Fig. 5).

Each order variable X gives a view V@X whose keys are dep(X) (the ancestors its subtree's relations
mention) plus the free variables of its subtree. V@X joins its children's views and, if X is bound,
marginalizes X (multiplying by g_X). Each relation R gives a leaf view: R grouped by its order
variables, with its private bound variables marginalized (chain compression, F-IVM §3;
docs/kinds/fivm.md#choices-the-paper-leaves-open). A free variable whose view has one child with the
same keys is identical to that child and is dropped (the paper keeps only one of identical views).

An update to R travels ``path_to_root(R)``; at each step the delta joins the sibling views, which
``materialize`` (Fig. 5) guarantees are stored. The root is always stored.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lakeivm.errors import InvalidInput
from lakeivm.views.fivm.vorder import OrderNode, VariableOrder


@dataclass(frozen=True)
class View:
    """One view of the tree. A leaf has ``relation`` set and no children; an inner view has
    ``variable`` set. ``marginalized`` lists the variables summed out here; ``lifted`` every
    variable marginalized in the subtree (the non-zero block of a cofactor payload)."""

    id: str
    variable: str | None
    relation: str | None
    keys: tuple[str, ...]
    marginalized: tuple[str, ...]
    lifted: tuple[str, ...]
    relations: frozenset[str]
    children: tuple[View, ...]

    @property
    def name(self) -> str:
        """Paper-style name, e.g. ``V_ST@C[A]``."""
        at = self.variable if self.variable else ",".join(self.marginalized)
        rels = "".join(sorted(self.relations)) if all(len(r) == 1 for r in self.relations) else "_".join(sorted(self.relations))
        return f"V_{rels}" + (f"@{at}" if at else "") + f"[{', '.join(self.keys)}]"


@dataclass(frozen=True)
class Step:
    """One step of a delta's path: the delta of ``child`` joins ``siblings`` into the delta of ``view``."""

    view: View
    child: View
    siblings: tuple[View, ...]


class ViewTree:
    """A view tree τ(ω, F) with the stored views μ(τ, U) for updatable relations U.

    ``views`` maps id -> View (preorder from the root); ``stored`` holds the ids to materialize.
    """

    def __init__(self, order: VariableOrder, updatable: Iterable[str]) -> None:
        self.order = order
        self.updatable = frozenset(updatable)
        unknown = self.updatable - set(order.relations)
        if unknown:
            raise InvalidInput(f"updatable relations {sorted(unknown)} are not in the query; use aliases {order.relations}.")
        self.root = _build_root(order)
        self.views: dict[str, View] = {v.id: v for v in _preorder(self.root)}
        self.parent: dict[str, View] = {c.id: v for v in self.views.values() for c in v.children}
        self.stored = materialize(self.root, self.updatable)

    def leaf(self, alias: str) -> View:
        """The leaf view of relation ``alias``."""
        for view in self.views.values():
            if view.relation == alias:
                return view
        raise InvalidInput(f"no relation {alias!r} in the view tree; relations: {self.order.relations}.")

    def path_to_root(self, alias: str) -> tuple[Step, ...]:
        """The steps an update to ``alias`` takes from its leaf to the root (Fig. 4's delta tree)."""
        steps = []
        node = self.leaf(alias)
        while node.id in self.parent:
            up = self.parent[node.id]
            steps.append(Step(up, node, tuple(c for c in up.children if c.id != node.id)))
            node = up
        return tuple(steps)

    def check_invariants(self) -> None:
        """The root is stored and keyed by the free variables; each relation is exactly one leaf;
        a child's keys are its parent's keys or the parent's marginalized variable (so ⊕ is a
        group-by); every sibling on an updatable relation's path is stored (Fig. 5)."""
        assert self.root.id in self.stored
        assert set(self.root.keys) == set(self.order.free)
        leaves = [v.relation for v in self.views.values() if v.relation]
        assert sorted(leaves) == sorted(self.order.relations)
        for view in self.views.values():
            for child in view.children:
                assert set(child.keys) <= set(view.keys) | set(view.marginalized), (view.id, child.id)
            if view.relations & self.updatable:
                for step in self.path_to_root(next(iter(view.relations & self.updatable))):
                    assert all(s.id in self.stored for s in step.siblings)

    def render(self) -> str:
        """The tree, one view per line: name, keys, what it marginalizes, stored or not."""
        return "\n".join(_render(self.root, self.stored, 0))


def build_view_tree(order: VariableOrder, updatable: Iterable[str]) -> ViewTree:
    """τ(ω, F) with μ(τ, U) chosen for the updatable relations U (Fig. 3 and Fig. 5)."""
    tree = ViewTree(order, updatable)
    tree.check_invariants()
    return tree


def materialize(root: View, updatable: frozenset[str]) -> frozenset[str]:
    """μ(τ, U) of Fig. 5: the root, plus every view with a sibling over an updatable relation."""
    out = {root.id}
    stack = [root]
    while stack:
        view = stack.pop()
        for child in view.children:
            if any(s.id != child.id and s.relations & updatable for s in view.children):
                out.add(child.id)
            stack.append(child)
    return frozenset(out)


def _build_root(order: VariableOrder) -> View:
    if order.root is None:
        (alias,) = order.relations
        return _leaf(order, alias, ())
    return _build(order, order.root, ())


def _build(order: VariableOrder, node: OrderNode, ancestors: tuple[str, ...]) -> View:
    below = ancestors + (node.variable,)
    children = tuple(_build(order, c, below) for c in node.children)
    children += tuple(_leaf(order, a, below) for a in node.relations)
    relations = frozenset().union(*(c.relations for c in children))
    mentioned = {v for a in relations for v in order.variables_of(a)}
    free = set(order.free)
    subtree = set(node.variables())
    keys = tuple(v for v in ancestors if v in mentioned) + tuple(v for v in node.variables() if v in free)
    bound = node.variable not in free
    if not bound and len(children) == 1 and set(children[0].keys) == set(keys):
        return children[0]
    lifted = tuple(v for c in children for v in c.lifted) + ((node.variable,) if bound else ())
    assert not (set(keys) - set(ancestors) - subtree)
    return View(f"at_{node.variable}", node.variable, None, keys, (node.variable,) if bound else (), lifted, relations, children)


def _leaf(order: VariableOrder, alias: str, path: tuple[str, ...]) -> View:
    mine = order.variables_of(alias)
    keys = tuple(v for v in path if v in mine)
    private = tuple(v for v in mine if v not in path)
    return View(f"leaf_{alias}", None, alias, keys, private, private, frozenset({alias}), ())


def _preorder(view: View) -> list[View]:
    return [view] + [v for c in view.children for v in _preorder(c)]


def _render(view: View, stored: frozenset[str], depth: int) -> list[str]:
    tag = "stored" if view.id in stored else "not stored"
    summed = f" sums out {', '.join(view.marginalized)}" if view.marginalized else ""
    line = f"{'  ' * depth}{view.name}{summed}  ({view.id}, {tag})"
    return [line] + [x for c in view.children for x in _render(c, stored, depth + 1)]
