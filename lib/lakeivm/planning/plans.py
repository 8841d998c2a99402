"""Instances, plans and their replay: states, validity against the deadline C, plan cost (paper §2).

Time is discrete, t = 0..T; ``arrivals[t][i]`` is d_t[i], the changes to table i arriving at t.
A plan is p_0..p_T; pre-action state s_t = s_{(t-1)+} + d_t, post-action s_{t+} = s_t - p_t.
A plan is valid iff 0 <= p_t <= s_t, f(s_{t+}) <= C for t < T, and p_T = s_T (the refresh).
One predicate, ``Instance.is_full`` (f(s) > C, strict), is used everywhere
(docs/design/planner.md#choices-the-paper-leaves-open).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from lakeivm.errors import InvalidInput
from lakeivm.planning.costs import CostFunction

State = tuple[int, ...]


@dataclass(frozen=True)
class Instance:
    """One planning problem: cost functions f_i, arrivals d_0..d_T and the deadline C (paper §2)."""

    costs: tuple[CostFunction, ...]
    arrivals: tuple[State, ...]
    deadline: float
    names: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        n = len(self.costs)
        if n == 0 or not self.arrivals:
            raise InvalidInput("an instance needs at least one table and one tick (T >= 0)")
        if any(len(d) != n or any(k < 0 for k in d) for d in self.arrivals):
            raise InvalidInput(f"every arrival vector needs {n} counts >= 0, got {self.arrivals}")
        if self.deadline < 0:
            raise InvalidInput(f"the deadline C must be >= 0, got {self.deadline}")
        object.__setattr__(self, "arrivals", tuple(tuple(int(k) for k in d) for d in self.arrivals))
        object.__setattr__(self, "costs", tuple(self.costs))
        if not self.names:
            object.__setattr__(self, "names", tuple(f"R{i + 1}" for i in range(n)))
        if len(self.names) != n:
            raise InvalidInput(f"{len(self.names)} names for {n} tables")

    @property
    def n(self) -> int:
        """Number of source tables."""
        return len(self.costs)

    @property
    def horizon(self) -> int:
        """T, the refresh time (last tick)."""
        return len(self.arrivals) - 1

    def cost(self, v: Sequence[int]) -> float:
        """f(v) = sum_i f_i(v[i]), never charging a table with v[i] = 0 (paper §3.3: f_i(0) = 0); O(n)."""
        return sum(f(k) for f, k in zip(self.costs, v) if k > 0)

    def is_full(self, v: Sequence[int]) -> bool:
        """f(v) > C: a refresh from v would miss the deadline (paper Definition 1, strict)."""
        return self.cost(v) > self.deadline

    def prefix(self, horizon: int) -> Instance:
        """The same problem refreshed at ``horizon`` instead of T (used by ADAPT, Theorem 4)."""
        return Instance(self.costs, self.arrivals[: horizon + 1], self.deadline, self.names)


@dataclass(frozen=True)
class Plan:
    """Actions p_0..p_T on an instance, with the reason for each nonzero action."""

    instance: Instance
    actions: tuple[State, ...]
    reasons: tuple[str, ...]
    policy: str

    @property
    def cost(self) -> float:
        """f(P) = sum_t f(p_t), the refresh at T included (paper §2)."""
        return sum(self.instance.cost(p) for p in self.actions)

    def states(self) -> tuple[list[State], list[State]]:
        """Pre-action and post-action states s_t, s_{t+} for t = 0..T; O(nT)."""
        return replay(self.instance, self.actions)

    def check_invariants(self) -> None:
        """The plan is valid (paper §2): every post-action backlog fits C, the refresh empties all."""
        problems = violations(self.instance, self.actions)
        assert not problems, f"{self.policy} plan invalid: {problems}"

    def __str__(self) -> str:
        inst = self.instance
        lines = [f"{self.policy}: cost {float(self.cost):.6g} over ticks 0..{inst.horizon}, deadline C={float(inst.deadline):.6g}"]
        _, post = self.states()
        for t, (p, why) in enumerate(zip(self.actions, self.reasons)):
            if not any(p):
                continue
            applied = ", ".join(f"{inst.names[i]} x{k}" for i, k in enumerate(p) if k)
            lines.append(
                f"  t={t}: apply {applied} (cost {float(inst.cost(p)):.6g}; backlog after {float(inst.cost(post[t])):.6g}) -- {why}"
            )
        return "\n".join(lines)


class Policy(Protocol):
    """A tick-by-tick decision rule: sees the arrivals and pending counts of tick t < T only."""

    name: str

    def act(self, t: int, arrived: State, pending: State) -> tuple[State, str]:
        """The action p_t for pre-action state ``pending`` and the reason for it."""
        ...


def simulate(instance: Instance, policy: Policy) -> Plan:
    """Run a policy over the instance's arrivals, flushing everything at T (the refresh); O(T * policy)."""
    post: State = (0,) * instance.n
    actions: list[State] = []
    reasons: list[str] = []
    for t, d in enumerate(instance.arrivals):
        pre = add_state(post, d)
        if t == instance.horizon:
            p, why = pre, f"on-demand refresh at T: apply everything (cost {float(instance.cost(pre)):.6g})"
        else:
            p, why = policy.act(t, d, pre)
        actions.append(p)
        reasons.append(why)
        post = sub_state(pre, p)
    return Plan(instance, tuple(actions), tuple(reasons), policy.name)


def replay(instance: Instance, actions: Sequence[State]) -> tuple[list[State], list[State]]:
    """Pre- and post-action states of a plan (paper §2: s_{t+} = s_t - p_t, s_{t+1} = s_{t+} + d_{t+1})."""
    if len(actions) != len(instance.arrivals):
        raise InvalidInput(f"a plan needs {len(instance.arrivals)} actions, got {len(actions)}")
    pre: list[State] = []
    post: list[State] = []
    current: State = (0,) * instance.n
    for d, p in zip(instance.arrivals, actions):
        s = add_state(current, d)
        pre.append(s)
        current = sub_state(s, p)
        post.append(current)
    return pre, post


def violations(instance: Instance, actions: Sequence[State]) -> list[str]:
    """Why a plan is invalid (empty if valid): over-applied, backlog full at t < T, refresh incomplete."""
    pre, post = replay(instance, actions)
    problems: list[str] = []
    for t, (s, p, s_after) in enumerate(zip(pre, actions, post)):
        if any(k < 0 or k > pending for k, pending in zip(p, s)):
            problems.append(f"t={t}: action {p} outside 0..{s}")
        if t < instance.horizon and instance.is_full(s_after):
            problems.append(f"t={t}: backlog {s_after} costs {float(instance.cost(s_after)):.6g} > C={instance.deadline}")
    if any(post[-1]):
        problems.append(f"refresh at T={instance.horizon} leaves {post[-1]} pending")
    return problems


def is_lazy(instance: Instance, actions: Sequence[State]) -> bool:
    """Every action before T is taken only when the pre-action state is full (Definition 2)."""
    pre, _ = replay(instance, actions)
    return all(not any(p) or instance.is_full(s) for s, p in zip(pre[:-1], actions[:-1]))


def is_greedy(instance: Instance, actions: Sequence[State]) -> bool:
    """Every action empties each table completely or leaves it alone (Definition 2)."""
    pre, _ = replay(instance, actions)
    return all(k in (0, pending) for s, p in zip(pre, actions) for k, pending in zip(p, s))


def is_minimal(instance: Instance, pending: State, action: State) -> bool:
    """No nonzero component of the action can be zeroed keeping f(s - p) <= C (Definition 3)."""
    after = sub_state(pending, action)
    for i, k in enumerate(action):
        if k and not instance.is_full(after[:i] + (after[i] + k,) + after[i + 1 :]):
            return False
    return True


def is_lgm(instance: Instance, actions: Sequence[State]) -> bool:
    """Lazy, greedy, and every action before T minimal (Definition 3)."""
    pre, _ = replay(instance, actions)
    minimal = all(not any(p) or is_minimal(instance, s, p) for s, p in zip(pre[:-1], actions[:-1]))
    return minimal and is_lazy(instance, actions) and is_greedy(instance, actions)


def add_state(a: State, b: Sequence[int]) -> State:
    """Componentwise a + b."""
    return tuple(x + y for x, y in zip(a, b))


def sub_state(a: State, b: Sequence[int]) -> State:
    """Componentwise a - b."""
    return tuple(x - y for x, y in zip(a, b))
