"""OPT^LGM by A* over the LGM plan graph (paper §4.1, Theorem 3) with a safe heuristic.

Nodes are (t, s): the post-action state s right after a nonzero LGM action at t; the source is
(-1, 0) and the destination (T, 0). From (t1, s) the backlog grows until it is first full at t2 < T,
giving one edge per minimal greedy action at t2, or until T, giving one edge (the refresh) to the
destination. Paths are LGM plans and path weight is plan cost (Theorem 3).

The paper's heuristic (Lemma 7) is neither consistent nor, for non-concave costs, admissible
(docs/design/planner.md#the-a-heuristic). ``h_safe`` = sum_i N_i * r_i with
r_i = min_{1<=k<=b_i} f_i(k)/k is both, so the closed-set A* below is exact with it; ``h_batches``
(the default) tightens it on linear tables and stays consistent. ``h_paper`` is kept for the regression test that shows why it had to go.
"""
from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from lakeivm.planning.costs import is_linear
from lakeivm.planning.lgm import greedy_action, minimal_greedy_sets
from lakeivm.planning.plans import Instance, Plan, State, add_state, sub_state

Node = tuple[int, State]
Heuristic = Callable[[Node], float]


@dataclass(frozen=True)
class Edge:
    """An LGM action q at tick t taking ``source`` to ``target``, of weight f(q)."""

    target: Node
    tick: int
    action: State
    weight: float


@dataclass(frozen=True)
class SearchResult:
    """The best LGM plan found, its cost, and how many nodes the search expanded."""

    plan: Plan
    cost: float
    expanded: int


class LGMGraph:
    """The LGM plan graph of an instance (paper §4.1); nodes are generated on demand."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        zero: State = (0,) * instance.n
        self.source: Node = (-1, zero)
        self.destination: Node = (instance.horizon, zero)
        suffix = [zero] * (instance.horizon + 2)
        for t in range(instance.horizon, -1, -1):
            suffix[t] = add_state(suffix[t + 1], instance.arrivals[t])
        self.suffix = suffix

    def remaining(self, t: int) -> State:
        """K(t) = sum of d_tau over tau in (t, T]."""
        return self.suffix[t + 1]

    def edges(self, node: Node) -> list[Edge]:
        """Out-edges of (t1, s): walk to the next full tick t2 < T, or to the refresh at T; O(T + 2^n n)."""
        inst = self.instance
        t, backlog = node
        while True:
            t += 1
            backlog = add_state(backlog, inst.arrivals[t])
            if t == inst.horizon:
                return [Edge(self.destination, t, backlog, inst.cost(backlog))]
            if inst.is_full(backlog):
                result = []
                for tables in minimal_greedy_sets(inst.is_full, backlog):
                    q = greedy_action(backlog, tables)
                    result.append(Edge((t, sub_state(backlog, q)), t, q, inst.cost(q)))
                return result


def h_zero(graph: LGMGraph) -> Heuristic:
    """h = 0: A* becomes Dijkstra, the reference oracle."""
    return lambda node: 0.0


def h_safe(graph: LGMGraph) -> Heuristic:
    """sum_i N_i * r_i, r_i = min_{1<=k<=b_i} f_i(k)/k: admissible and consistent.

    Every LGM batch of table i has at most b_i changes and so costs >= k * r_i
    (docs/design/planner.md#the-a-heuristic). Precomputation costs O(sum_i b_i) evaluations; each
    call O(n).
    """
    rates = _safe_rates(graph)

    def h(node: Node) -> float:
        t, s = node
        return sum(r * (k + rest) for r, k, rest in zip(rates, s, graph.remaining(t)))

    return h


def h_batches(graph: LGMGraph) -> Heuristic:
    """h_safe tightened on linear tables: a_i*N_i + b_i*ceil(N_i / b_max) (the default).

    A linear table (f = a*k + b, a, b >= 0) must take at least ceil(N_i / b_max) batches for its
    N_i remaining changes (every LGM batch is <= b_max, paper §4.1), each paying b once.
    Consistent: an edge emptying 1 <= q <= b_max changes lowers the term by
    a*q + b*(ceil(N/b_max) - ceil((N-q)/b_max)) <= a*q + b = f(q); admissible as a sum of per-batch
    lower bounds. Non-linear tables keep the h_safe term N_i * r_i. On the plateaus of equal-cost
    plans of the paper's example it expands orders of magnitude fewer nodes. Each call costs O(n).
    """
    rates = _safe_rates(graph)
    terms = [
        (f(2) - f(1), 2 * f(1) - f(2), bound) if is_linear(f) and bound else None
        for f, bound in zip(graph.instance.costs, batch_bounds(graph))
    ]

    def h(node: Node) -> float:
        t, s = node
        total = 0.0
        for term, r, k, rest in zip(terms, rates, s, graph.remaining(t)):
            if term is None:
                total += r * (k + rest)
            else:
                a, fixed, bound = term
                total += a * (k + rest) + fixed * -(-(k + rest) // bound)
        return total

    return h


def _safe_rates(graph: LGMGraph) -> list[float]:
    """r_i = min_{1<=k<=b_i} f_i(k)/k, the least cost per change of any LGM batch of table i."""
    return [
        min((f(k) / k for k in range(1, b + 1)), default=0.0)
        for f, b in zip(graph.instance.costs, batch_bounds(graph))
    ]


def h_paper(graph: LGMGraph) -> Heuristic:
    """The paper's sum_i floor(N_i / b_i) * f_i(b_i) (Lemma 7): NOT consistent; regression use only."""
    bounds = batch_bounds(graph)
    costs = graph.instance.costs

    def h(node: Node) -> float:
        t, s = node
        return sum(
            ((k + rest) // b) * f(b) for f, b, k, rest in zip(costs, bounds, s, graph.remaining(t)) if b
        )

    return h


def batch_bounds(graph: LGMGraph) -> list[int]:
    """b_i = m_i + B_i: B_i = max{k : f_i(k) <= C} capped at K_i, m_i = max_t d_t[i] (paper §4.1).

    The cap: docs/design/planner.md#the-a-heuristic.
    """
    inst = graph.instance
    total = graph.remaining(-1)
    bounds = []
    for i, f in enumerate(inst.costs):
        low, high = 0, total[i]
        while low < high:
            middle = (low + high + 1) // 2
            if f(middle) <= inst.deadline:
                low = middle
            else:
                high = middle - 1
        bounds.append(low + max(d[i] for d in inst.arrivals))
    return bounds


def astar(
    instance: Instance,
    heuristic: Callable[[LGMGraph], Heuristic] = h_batches,
    reopen: bool = False,
) -> SearchResult:
    """Best-first search for the cheapest LGM plan (paper §4.1).

    A node is expanded once unless ``reopen`` (then an improved closed node is pushed again,
    which keeps an inconsistent heuristic exact). Priorities g + h are compared at 12 significant
    digits so float noise does not split plateaus of equal-cost plans; ties then go to the deeper
    node (larger g), then to the earliest pushed. The result is optimal up to that relative
    tolerance. Costs O(E log E) for E generated edges, each O(T + 2^n n) to generate.
    """
    graph = LGMGraph(instance)
    h = heuristic(graph)
    g: dict[Node, float] = {graph.source: 0.0}
    parent: dict[Node, tuple[Node, Edge]] = {}
    closed: set[Node] = set()
    counter = itertools.count()
    queue = [(_priority(h(graph.source)), 0.0, next(counter), graph.source)]
    while queue:
        _, _, _, node = heapq.heappop(queue)
        if node in closed:
            continue
        if node == graph.destination:
            return SearchResult(_plan_from_path(graph, parent), g[node], len(closed))
        closed.add(node)
        for edge in graph.edges(node):
            y = edge.target
            if y in closed and not reopen:
                continue
            cost = g[node] + edge.weight
            if cost < g.get(y, float("inf")):
                g[y] = cost
                parent[y] = (node, edge)
                closed.discard(y)
                heapq.heappush(queue, (_priority(cost + h(y)), -cost, next(counter), y))
    raise AssertionError("the LGM graph always reaches the destination (Theorem 3)")


def _priority(value: float) -> float:
    """g + h rounded to 12 significant digits (see astar)."""
    return float(f"{float(value):.12g}")


def optimal_lgm_plan(instance: Instance) -> Plan:
    """OPT^LGM: <= 2 OPT for monotone subadditive costs, = OPT for linear ones (Theorems 1, 2)."""
    return astar(instance).plan


def _plan_from_path(graph: LGMGraph, parent: dict[Node, tuple[Node, Edge]]) -> Plan:
    """Back-pointers to a plan: q at each edge's tick, 0 elsewhere (Theorem 3)."""
    inst = graph.instance
    actions: list[State] = [(0,) * inst.n] * (inst.horizon + 1)
    reasons = [""] * (inst.horizon + 1)
    node = graph.destination
    while node != graph.source:
        previous, edge = parent[node]
        actions[edge.tick] = edge.action
        pending = add_state(edge.action, edge.target[1])
        if edge.tick == inst.horizon:
            reasons[edge.tick] = f"on-demand refresh at T: apply everything (cost {float(edge.weight):.6g})"
        else:
            names = ", ".join(inst.names[i] for i, k in enumerate(edge.action) if k)
            reasons[edge.tick] = (
                f"forced: backlog {float(inst.cost(pending)):.6g} > C; A* picks the minimal set {{{names}}} on a cheapest LGM path"
            )
        node = previous
    return Plan(inst, tuple(actions), tuple(reasons), "A*")
