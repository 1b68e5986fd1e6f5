"""Contracts, six-dimensional budgets, VERIFYCONSERVATION, and runtime enforcement (CODE-AGENT, PAPERS.md §3).

A **contract** ⟨I, C, T, M⟩ = (inputs, budget, tools, outputs): the inputs a sub-agent needs, its budget
vector, the tools it may call, the outputs it must produce. A **budget** is six numbers:
iterations, calls, tokens, seconds, retries, handoffs. A dimension missing from a plan means 0.

**VERIFYCONSERVATION** (:func:`verify_plan`) checks a delegation plan before any model call, in
O(|V| + |E|): every node has at most one parent (two parents → rejected), the parent links contain no
cycle (rejected, members named), every child exists, and for every node and dimension
``cost(v) + combine(children budgets) ≤ budget(v)``, where *combine* is the **sum** for every dimension
except ``seconds`` of a node marked ``parallel: true``: children that run concurrently share wall-clock
time, so their seconds combine by **max** (the parent waits for the slowest), while their iterations,
calls, tokens, retries and handoffs still add up. Each violation names the node and the dimension.
If a plan carries a top-level ``budget``, the roots' budgets together must fit in it too.

Under deterministic tool costs this gives the paper's theorem: the whole delegation forest never consumes
more than its root budget. :class:`BudgetTracker` enforces a contract at run time (a charge that would
pass a limit raises :class:`BudgetExceeded` before anything is consumed; spawning a child reserves its
whole budget from the parent and closing it refunds what it did not use). The small two-dimensional
(reads, tokens) budget a mount enforces is core: :class:`libraryfs.fs.budget.ReadBudget`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from libraryfs.words import noun

DIMENSIONS = ("iterations", "calls", "tokens", "seconds", "retries", "handoffs")
_DIM_INDEX = {d: i for i, d in enumerate(DIMENSIONS)}
_SECONDS = _DIM_INDEX["seconds"]


class BudgetExceeded(Exception):
    """A charge would pass a limit. Attributes: ``node`` (tracker/plan node name, or ``""``), ``dimension``,
    ``used`` (before the charge), ``requested``, ``limit``. Not an ``OSError`` and not a domain error: it
    never reaches a mount (a mount's read budget raises :class:`libraryfs.errors.QuotaExceeded`)."""

    def __init__(self, dimension: str, used: float, requested: float, limit: float, node: str = "") -> None:
        self.node, self.dimension, self.used, self.requested, self.limit = (
            node,
            dimension,
            used,
            requested,
            limit,
        )
        where = f"{node}: " if node else ""
        super().__init__(
            f"{where}{dimension} budget exceeded: used {used:g} + {requested:g} > limit {limit:g}"
        )


class ContractViolation(Exception):
    """A contract's inputs, tools or outputs were not honoured (message names which)."""


class Budget(NamedTuple):
    """Six-dimensional budget vector (counts; ``seconds`` in seconds, wall clock)."""

    iterations: float = 0
    calls: float = 0
    tokens: float = 0
    seconds: float = 0
    retries: float = 0
    handoffs: float = 0

    @classmethod
    def from_mapping(cls, m: Mapping[str, float] | None) -> Budget:
        """From a dict; missing dimensions are 0. Raises ``ValueError`` on an unknown dimension or a negative
        or non-numeric value."""
        if not m:
            return cls()
        vals = [m.get(d, 0) for d in DIMENSIONS]
        if (
            len(m) <= len(DIMENSIONS)
            and all(type(v) in (int, float) and v >= 0 for v in vals)
            and m.keys() <= _DIM_INDEX.keys()
        ):
            return cls(*vals)  # fast path: the common, valid case
        bad = set(m) - _DIM_INDEX.keys()
        if bad:
            raise ValueError(
                f"unknown {noun(len(bad), 'budget dimension')}: {', '.join(sorted(bad))} "
                f"(known: {', '.join(DIMENSIONS)})"
            )
        vals = []
        for d in DIMENSIONS:
            v = m.get(d, 0)
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                raise ValueError(f"budget {d} must be a non-negative number, got {v!r}")
            vals.append(v)
        return cls(*vals)


class Contract(NamedTuple):
    """⟨inputs, budget, tools, outputs⟩ (PAPERS.md §3): names of required inputs, the budget vector, the
    tools the holder may call, the names of outputs it must produce."""

    inputs: tuple[str, ...]
    budget: Budget
    tools: frozenset[str]
    outputs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Violation:
    """One reason a plan is rejected. ``kind``: ``overspend`` | ``cycle`` | ``two-parents`` |
    ``unknown-child`` | ``duplicate`` | ``bad-node`` | ``forest-overspend``."""

    kind: str
    node: str
    dimension: str = ""
    need: float = 0
    have: float = 0
    detail: str = ""

    def __str__(self) -> str:
        """One line naming the node, the kind and, for an overspend, ``need > budget`` of the dimension."""
        if self.kind in ("overspend", "forest-overspend"):
            return (
                f"node {self.node!r} overspends {self.dimension}: {self.detail} = {self.need:g} "
                f"> budget {self.have:g}"
            )
        return f"node {self.node!r}: {self.kind}: {self.detail}"


@dataclass(slots=True)
class VerifyResult:
    """Outcome of :func:`verify_plan`: ``ok`` iff no violations; ``roots`` in plan order; sizes."""

    ok: bool
    violations: list[Violation]
    roots: list[str]
    n_nodes: int
    n_edges: int

    def to_json(self) -> dict:
        """``{"ok", "nodes", "edges", "roots", "violations": [{"kind", "node", "dimension", "need", "have",
        "message"}]}`` (``budget verify --json``, the MCP tool ``budget_verify``)."""
        return {
            "ok": self.ok,
            "nodes": self.n_nodes,
            "edges": self.n_edges,
            "roots": self.roots,
            "violations": [
                {
                    "kind": v.kind,
                    "node": v.node,
                    "dimension": v.dimension,
                    "need": v.need,
                    "have": v.have,
                    "message": str(v),
                }
                for v in self.violations
            ],
        }


def _node_list(plan: Mapping) -> list[dict]:
    nodes = plan.get("nodes", plan) if isinstance(plan, Mapping) else plan
    if isinstance(nodes, Mapping):
        return [dict(v or {}, id=k) for k, v in nodes.items()]
    if isinstance(nodes, list):
        return [dict(n) for n in nodes]
    raise ValueError("a plan is {'nodes': [...]} or {'nodes': {id: node}}")


@dataclass(slots=True)
class _Nodes:
    """A plan's nodes by id: budget and direct cost vectors, child ids, whether children run in parallel."""

    budgets: dict[str, Budget]
    costs: dict[str, Budget]
    children: dict[str, list[str]]
    parallel: dict[str, bool]


def _read_nodes(raw: list[dict], out: list[Violation]) -> _Nodes:
    """Read the node list; a node without an id, a duplicate id or an unreadable vector is a violation."""
    nodes = _Nodes({}, {}, {}, {})
    for n in raw:
        nid = str(n.get("id", ""))
        if not nid:
            out.append(Violation("bad-node", "?", detail="node without an id"))
            continue
        if nid in nodes.budgets:
            out.append(Violation("duplicate", nid, detail="id used twice"))
            continue
        try:
            nodes.budgets[nid] = Budget.from_mapping(n.get("budget"))
            nodes.costs[nid] = Budget.from_mapping(n.get("cost"))
        except ValueError as e:
            out.append(Violation("bad-node", nid, detail=str(e)))
            nodes.budgets[nid], nodes.costs[nid] = Budget(), Budget()
        nodes.children[nid] = [str(c) for c in n.get("children") or ()]
        nodes.parallel[nid] = bool(n.get("parallel", False))
    return nodes


def _link_parents(nodes: _Nodes, out: list[Violation]) -> tuple[dict[str, str], int]:
    """``(child → its one parent, number of edges)``; an unknown child or a second parent is a violation."""
    parent: dict[str, str] = {}
    n_edges = 0
    for nid, kids in nodes.children.items():
        for c in kids:
            n_edges += 1
            if c not in nodes.budgets:
                out.append(Violation("unknown-child", nid, detail=f"child {c!r} is not a node"))
            elif c in parent:
                out.append(Violation("two-parents", c, detail=f"child of both {parent[c]!r} and {nid!r}"))
            else:
                parent[c] = nid
    return parent, n_edges


def _find_cycles(nodes: _Nodes, parent: dict[str, str], roots: list[str], out: list[Violation]) -> None:
    """Report each cycle of parent links once (its members named): whatever the roots do not reach along
    the parent links hangs off a cycle."""
    reached: set[str] = set()
    stack = list(roots)
    while stack:
        v = stack.pop()
        if v in reached:
            continue
        reached.add(v)
        stack.extend(c for c in nodes.children[v] if parent.get(c) == v)
    reported: set[str] = set()
    for v in nodes.budgets:
        if v in reached or v in reported:
            continue
        path: list[str] = []
        pos: dict[str, int] = {}
        u = v
        while u not in pos and u not in reported:
            pos[u] = len(path)
            path.append(u)
            u = parent[u]
        if u in pos:
            cyc = path[pos[u] :]
            out.append(Violation("cycle", cyc[0], detail=" → ".join(cyc + [cyc[0]])))
        reported.update(path)


def _check_conservation(nodes: _Nodes, out: list[Violation]) -> None:
    """``cost(v) + combine(children's budgets) ≤ budget(v)`` per node and dimension (module doc)."""
    zero = Budget()
    budgets = nodes.budgets
    for nid, b in budgets.items():
        kids = [c for c in nodes.children[nid] if c in budgets]
        cost = nodes.costs[nid]
        if not kids:
            if cost == zero or all(c <= x for c, x in zip(cost, b, strict=False)):
                continue  # leaf within budget: the common case, one tuple comparison
        elif not nodes.parallel[nid]:
            agg = [sum(col) for col in zip(*(budgets[c] for c in kids), strict=False)]
            if all(c + a <= x for c, a, x in zip(cost, agg, b, strict=False)):
                continue
        for i, d in enumerate(DIMENSIONS):
            vals = [budgets[c][i] for c in kids]
            if i == _SECONDS and nodes.parallel[nid]:
                combined, how = (max(vals) if vals else 0), "max"
            else:
                combined, how = sum(vals), "sum"
            need = cost[i] + combined
            if need > b[i]:
                detail = f"direct cost {cost[i]:g} + {how} of {len(kids)} children's {d} {combined:g}"
                out.append(Violation("overspend", nid, d, need, b[i], detail))


def verify_plan(plan: Mapping) -> VerifyResult:
    """VERIFYCONSERVATION over a plan: ``{"budget": {...}?, "nodes": [{"id", "budget", "cost", "children",
    "parallel"?, "inputs"?, "tools"?, "outputs"?}, ...]}`` (or ``nodes`` as a mapping id → node).

    O(|V| + |E|); collects every violation rather than stopping at the first. Raises ``ValueError`` only
    for a plan whose shape is unreadable."""
    out: list[Violation] = []
    nodes = _read_nodes(_node_list(plan), out)
    parent, n_edges = _link_parents(nodes, out)
    roots = [n for n in nodes.budgets if n not in parent]
    _find_cycles(nodes, parent, roots, out)
    _check_conservation(nodes, out)
    if isinstance(plan, Mapping) and plan.get("budget") is not None:
        total = Budget.from_mapping(plan["budget"])
        for i, d in enumerate(DIMENSIONS):
            need = sum(nodes.budgets[r][i] for r in roots)
            if need > total[i]:
                detail = f"sum of {len(roots)} root budgets' {d}"
                out.append(Violation("forest-overspend", "(plan)", d, need, total[i], detail))
    return VerifyResult(not out, out, roots, len(nodes.budgets), n_edges)


def load_plan(path: str) -> dict:
    """Read a plan file: ``.json``, or ``.yaml``/``.yml``. Raises ``ValueError`` on a parse error,
    ``OSError`` if unreadable."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        if path.endswith((".yaml", ".yml")):
            import yaml

            return yaml.safe_load(text) or {}
        return json.loads(text)
    except Exception as e:  # noqa: BLE001 - parse errors of either format become one user error
        raise ValueError(f"cannot parse {path}: {e}") from e


def make_contract(
    inputs: Iterable[str] = (),
    budget: Mapping[str, float] | Budget | None = None,
    tools: Iterable[str] = (),
    outputs: Iterable[str] = (),
) -> Contract:
    """Build a :class:`Contract` (budget from a mapping, missing dimensions 0)."""
    b = budget if isinstance(budget, Budget) else Budget.from_mapping(budget)
    return Contract(tuple(inputs), b, frozenset(tools), tuple(outputs))


class BudgetTracker:
    """Runtime enforcement of one contract (a node of a delegation tree).

    ``charge(dim, amount)`` raises :class:`BudgetExceeded` if ``used + amount`` would pass the limit (nothing
    is consumed then). ``seconds`` is wall clock since construction, checked by :meth:`check_time` and by
    every :meth:`spawn`. ``spawn`` charges one handoff and reserves the child's whole budget (except
    seconds, which must fit in the time left); ``close`` refunds the child's unused reservation."""

    __slots__ = ("name", "contract", "limits", "used", "parent", "start_s", "closed")

    def __init__(self, contract: Contract, name: str = "root", parent: BudgetTracker | None = None) -> None:
        self.name = name
        self.contract = contract
        self.limits = list(contract.budget)
        self.used = [0.0] * len(DIMENSIONS)
        self.parent = parent
        self.start_s = time.monotonic()
        self.closed = False

    def charge(self, dim: str, amount: float = 1) -> None:
        """Consume ``amount`` of ``dim``; raises :class:`BudgetExceeded` (nothing consumed) past the limit,
        ``KeyError`` for an unknown dimension."""
        i = _DIM_INDEX[dim]
        used = self.used[i]
        if used + amount > self.limits[i]:
            raise BudgetExceeded(dim, used, amount, self.limits[i], self.name)
        self.used[i] = used + amount

    def call_tool(self, tool: str, tokens: int = 0) -> None:
        """One tool call: the tool must be in the contract (else :class:`ContractViolation`); charges one call
        and ``tokens`` tokens atomically."""
        if tool not in self.contract.tools:
            raise ContractViolation(f"{self.name}: tool {tool!r} not in contract")
        ci, ti = _DIM_INDEX["calls"], _DIM_INDEX["tokens"]
        if self.used[ci] + 1 > self.limits[ci]:
            raise BudgetExceeded("calls", self.used[ci], 1, self.limits[ci], self.name)
        if self.used[ti] + tokens > self.limits[ti]:
            raise BudgetExceeded("tokens", self.used[ti], tokens, self.limits[ti], self.name)
        self.used[ci] += 1
        self.used[ti] += tokens

    def elapsed_s(self) -> float:
        """Wall-clock seconds since this tracker started."""
        return time.monotonic() - self.start_s

    def check_time(self) -> None:
        """Raise :class:`BudgetExceeded` on ``seconds`` when the wall-clock budget is spent."""
        e = self.elapsed_s()
        if e > self.limits[_SECONDS]:
            raise BudgetExceeded("seconds", e, 0, self.limits[_SECONDS], self.name)

    def check_inputs(self, given: Mapping[str, object]) -> None:
        """Raise :class:`ContractViolation` if a required input is missing."""
        missing = [k for k in self.contract.inputs if k not in given]
        if missing:
            raise ContractViolation(f"{self.name}: missing inputs {missing}")

    def check_outputs(self, produced: Mapping[str, object]) -> None:
        """Raise :class:`ContractViolation` if a promised output is missing."""
        missing = [k for k in self.contract.outputs if k not in produced]
        if missing:
            raise ContractViolation(f"{self.name}: missing outputs {missing}")

    def spawn(self, contract: Contract, name: str) -> BudgetTracker:
        """Delegate to a child under ``contract``: one handoff plus a reservation of the child's budget."""
        self.check_time()
        left_s = self.limits[_SECONDS] - self.elapsed_s()
        if contract.budget.seconds > left_s:
            raise BudgetExceeded(
                "seconds", self.elapsed_s(), contract.budget.seconds, self.limits[_SECONDS], self.name
            )
        want = list(contract.budget)
        want[_DIM_INDEX["handoffs"]] += 1
        for i, d in enumerate(DIMENSIONS):
            if i != _SECONDS and self.used[i] + want[i] > self.limits[i]:
                raise BudgetExceeded(d, self.used[i], want[i], self.limits[i], self.name)
        for i in range(len(DIMENSIONS)):
            if i != _SECONDS:
                self.used[i] += want[i]
        return BudgetTracker(contract, name, self)

    def close(self) -> None:
        """Finish this child: refund its unused budget to the parent (seconds excluded). Idempotent."""
        if self.closed or self.parent is None:
            self.closed = True
            return
        for i in range(len(DIMENSIONS)):
            if i != _SECONDS:
                self.parent.used[i] -= self.limits[i] - self.used[i]
        self.closed = True

    def remaining(self) -> dict[str, float]:
        """Budget left per dimension (seconds from the wall clock)."""
        left = {d: self.limits[i] - self.used[i] for i, d in enumerate(DIMENSIONS)}
        left["seconds"] = max(0.0, self.limits[_SECONDS] - self.elapsed_s())
        return left
