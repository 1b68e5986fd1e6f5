"""Execution plans: a DAG of sub-agent contracts ⟨I, C, T, M⟩ and the three pre-execution gates (PAPERS.md §3).

A :class:`Plan` is a delegation tree — a ``supervisor`` root whose children are the sub-agents — plus a data
flow between them: every node names the typed artifacts it consumes (``inputs``) and produces (``outputs``);
an artifact is a file under the mount (:mod:`libraryfs.features.code.artifacts`). Each node carries its
contract ⟨I, C, T, M⟩ (:class:`~libraryfs.features.code.budget.Contract`: input names, the six-dimensional
budget, tools, output names) and the read budget its mount session gets (``read_tokens``/``read_count``).

Before any model call, :func:`run_gates` runs the three gates; each reports only its own kind of defect:

1. **contracts** (:func:`gate_contracts`) — every agent has a contract; its I and M name exactly the node's
   inputs and outputs; its tools are known (:data:`TOOLS`); a node that calls the model has a calls and a
   tokens budget; the mount's read budget fits inside the contract's tokens.
2. **budget** (:func:`gate_budget`) — VERIFYCONSERVATION
   (:func:`~libraryfs.features.code.budget.verify_plan`) over the nodes that have a contract, with the
   run's total budget as the forest budget.
3. **hand-offs** (:func:`gate_handoffs`) — every consumed artifact is produced by exactly one other node,
   with the same type, upstream (the data flow has no cycle); every artifact type is known.

:func:`build_plan` turns a routing decision into a plan: FASTPATH → one ``solo`` agent (``reader`` for a
read-only lookup); SUBAGENT → one ``specialist``; MULTIAGENT → ``planner`` (pipeline only) → one ``editor``
per group of files → ``integrator``; DEEPRESEARCH → ``investigator`` s → ``synthesizer``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from libraryfs.features.code.artifacts import ARTIFACT_TYPES
from libraryfs.features.code.budget import DIMENSIONS, Budget, Contract, make_contract, verify_plan
from libraryfs.features.code.render import SOURCE_STEM, SYMBOLS_NAME, file_dir

#: Tools a contract may grant: read files under the mount, call the model, write its own artifacts.
TOOLS = frozenset({"read", "model", "write"})
#: Roles that call the model once per iteration.
MODEL_ROLES = frozenset(
    {"solo", "reader", "specialist", "planner", "editor", "integrator", "investigator", "synthesizer"}
)
#: Most agents working side by side (editors, investigators).
MAX_WORKERS = 3
#: Wall-clock seconds the supervisor allows itself per mount session (start + stop): its direct cost is
#: this for each agent's session and for its own three (plan and task spec, final read, result).
SESSION_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class PlanSizes:
    """Per-node allowances (tokens): code read per agent, artifacts read per agent, the prompt's fixed part
    (instructions and schema), and the longest answer; ``seconds`` per agent (wall clock). A contract's
    tokens = ⌈read × ``encoding_slack``⌉ + prompt + answer."""

    context_tokens: int = 3000
    artifact_tokens: int = 1500
    prompt_tokens: int = 600
    output_tokens: int = 400
    seconds: float = 120.0
    #: what is read reaches the model JSON-escaped (quotes, newlines): its tokens count this much more there
    encoding_slack: float = 1.25


#: The allowances plans are built with unless told otherwise.
DEFAULT_SIZES = PlanSizes()


@dataclass(slots=True)
class PlanNode:
    """One node: ``role``, contract (``None`` = missing), typed ``inputs``/``outputs`` (artifact name →
    type), ``focus`` (library paths of the code it reads), delegation ``children``, direct ``cost``, and its
    mount session's read budget."""

    id: str
    role: str
    contract: Contract | None
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    focus: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    parallel: bool = False
    cost: Budget = Budget()
    read_tokens: int = 0
    read_count: int = 0


@dataclass(slots=True)
class Plan:
    """A run's plan: the task, the routing it came from, the nodes (``nodes[0]`` is the supervisor), the
    run's total ``budget`` and the ``final`` artifact the run returns."""

    task: str
    repo: str
    topology: str
    shape: str
    nodes: list[PlanNode]
    budget: Budget
    final: str
    files: list[str] = field(default_factory=list)

    def node(self, nid: str) -> PlanNode:
        """The node called ``nid`` (``KeyError`` if none)."""
        for n in self.nodes:
            if n.id == nid:
                return n
        raise KeyError(nid)

    def producers(self) -> dict[str, list[str]]:
        """Artifact name → ids of the nodes that produce it."""
        out: dict[str, list[str]] = {}
        for n in self.nodes:
            for a in n.outputs:
                out.setdefault(a, []).append(n.id)
        return out

    def order(self) -> list[str]:
        """Agents in execution order: Kahn's algorithm over producer → consumer edges, ties in plan order.
        Raises ``ValueError`` on a cycle (gate 3 refuses such a plan first)."""
        prod = self.producers()
        ids = [n.id for n in self.nodes]
        deps = {n.id: {p for a in n.inputs for p in prod.get(a, ()) if p != n.id} for n in self.nodes}
        done: list[str] = []
        while len(done) < len(ids):
            ready = [i for i in ids if i not in done and deps[i] <= set(done)]
            if not ready:
                raise ValueError("the data flow has a cycle")
            done.append(ready[0])
        return done

    def to_dict(self) -> dict:
        """JSON form (``plan.json``); also the input of :func:`~libraryfs.features.code.budget.verify_plan`
        (nodes without a contract are left out of ``nodes`` and listed under ``uncontracted``)."""
        nodes = []
        for n in self.nodes:
            if n.contract is None:
                continue
            c = n.contract
            nodes.append(
                {
                    "id": n.id,
                    "role": n.role,
                    "budget": dict(zip(DIMENSIONS, c.budget, strict=True)),
                    "cost": dict(zip(DIMENSIONS, n.cost, strict=True)),
                    "children": [k for k in n.children if self.node(k).contract is not None],
                    "parallel": n.parallel,
                    "inputs": n.inputs,
                    "outputs": n.outputs,
                    "tools": sorted(c.tools),
                    "focus": n.focus,
                    "read_budget": {"reads": n.read_count, "tokens": n.read_tokens},
                }
            )
        return {
            "task": self.task,
            "repo": self.repo,
            "topology": self.topology,
            "shape": self.shape,
            "final": self.final,
            "files": self.files,
            "budget": dict(zip(DIMENSIONS, self.budget, strict=True)),
            "nodes": nodes,
            "uncontracted": [n.id for n in self.nodes if n.contract is None],
        }


@dataclass(slots=True)
class GateReport:
    """Outcome of :func:`run_gates`: problems per gate (``contracts``, ``budget``, ``handoffs``)."""

    problems: dict[str, list[str]]

    @property
    def ok(self) -> bool:
        """No gate found a problem."""
        return not any(self.problems.values())

    def failed(self) -> list[str]:
        """Names of the gates that refused."""
        return [g for g, p in self.problems.items() if p]

    def __str__(self) -> str:
        """``gate: problem | problem; gate: …`` of the refusing gates, or ``all gates pass``."""
        return "; ".join(f"{g}: {' | '.join(p)}" for g, p in self.problems.items() if p) or "all gates pass"


class PlanRefused(Exception):
    """A gate refused the plan; nothing was run. ``report`` is the :class:`GateReport`."""

    def __init__(self, report: GateReport) -> None:
        super().__init__(f"plan refused before any model call: {report}")
        self.report = report


def gate_contracts(plan: Plan) -> list[str]:
    """Gate 1 (module docstring)."""
    out: list[str] = []
    for n in plan.nodes:
        c = n.contract
        if c is None:
            out.append(f"{n.id}: no contract")
            continue
        if set(c.inputs) != set(n.inputs) or set(c.outputs) != set(n.outputs):
            out.append(
                f"{n.id}: contract I/M {sorted(c.inputs)}/{sorted(c.outputs)} ≠ node {sorted(n.inputs)}/{sorted(n.outputs)}"
            )
        if not c.tools <= TOOLS:
            out.append(f"{n.id}: unknown tools {sorted(c.tools - TOOLS)}")
        if n.role in MODEL_ROLES and ("model" not in c.tools or c.budget.calls < 1 or c.budget.tokens < 1):
            out.append(f"{n.id}: a {n.role} calls the model but its contract grants no model/calls/tokens")
        if n.read_tokens > c.budget.tokens:
            out.append(f"{n.id}: read budget {n.read_tokens} tokens > contract tokens {c.budget.tokens:g}")
    return out


def gate_budget(plan: Plan) -> list[str]:
    """Gate 2: VERIFYCONSERVATION over the contracted nodes, the run's budget as the forest budget."""
    return [str(v) for v in verify_plan(plan.to_dict()).violations]


def gate_handoffs(plan: Plan) -> list[str]:
    """Gate 3 (module docstring)."""
    out: list[str] = []
    prod = plan.producers()
    for n in plan.nodes:
        for name, typ in list(n.inputs.items()) + list(n.outputs.items()):
            if typ not in ARTIFACT_TYPES:
                out.append(f"{n.id}: artifact {name!r} has unknown type {typ!r}")
        for name, typ in n.inputs.items():
            who = [p for p in prod.get(name, ()) if p != n.id]
            if not who:
                out.append(f"{n.id}: consumes {name!r} ({typ}) that no other node produces")
                continue
            made = plan.node(who[0]).outputs[name]
            if made != typ:
                out.append(f"{n.id}: consumes {name!r} as {typ}, {who[0]} produces it as {made}")
    for name, who in prod.items():
        if len(who) > 1:
            out.append(f"artifact {name!r} produced by {len(who)} nodes: {', '.join(who)}")
    if plan.final not in prod:
        out.append(f"the run's result {plan.final!r} is produced by no node")
    if not out:
        try:
            plan.order()
        except ValueError as e:
            out.append(str(e))
    return out


def run_gates(plan: Plan) -> GateReport:
    """All three gates; O(|V| + |E|) each (the data-flow ordering is O(|V|²) on plans of a handful of
    agents)."""
    return GateReport(
        {"contracts": gate_contracts(plan), "budget": gate_budget(plan), "handoffs": gate_handoffs(plan)}
    )


def _agent(
    nid: str, role: str, inputs: dict, outputs: dict, focus: list[str], sizes: PlanSizes, artifacts: int
) -> PlanNode:
    """An agent node with a contract sized from ``sizes``: it may read its focus and ``artifacts`` inputs."""
    read = (sizes.context_tokens if focus else 0) + sizes.artifact_tokens * artifacts
    tokens = math.ceil(read * sizes.encoding_slack) + sizes.prompt_tokens + sizes.output_tokens
    contract = make_contract(
        inputs,
        {"iterations": 1, "calls": 1, "tokens": tokens, "seconds": sizes.seconds},
        ("read", "model", "write"),
        outputs,
    )
    return PlanNode(nid, role, contract, dict(inputs), dict(outputs), list(focus), read_tokens=read,
                    read_count=len(focus) + len(inputs) + 1)  # fmt: skip


#: Retrieved symbols of one file an editing agent reads before the file's symbol table.
SYMBOLS_PER_FILE = 4


def code_focus(repo: str, rel: str, hits: list[str]) -> list[str]:
    """What an editing agent reads of one file, most relevant first: the retrieved symbols' files inside it
    (at most :data:`SYMBOLS_PER_FILE`), then its SYMBOLS.md; without a retrieved symbol, its SYMBOLS.md and
    the whole SOURCE."""
    base = file_dir(repo, rel)
    mine = [h for h in hits if h.startswith(base + "/") and h.count("/") == base.count("/") + 1]
    mine = [h for h in mine if not h.endswith("/" + SYMBOLS_NAME)][:SYMBOLS_PER_FILE]
    if mine:
        return [*mine, f"{base}/{SYMBOLS_NAME}"]
    return [f"{base}/{SYMBOLS_NAME}", f"{base}/{SOURCE_STEM}{rel[rel.rfind('.') :] if '.' in rel else ''}"]


def _groups(items: list, k: int) -> list[list]:
    k = max(1, min(k, len(items)))
    return [items[i::k] for i in range(k)]


def build_plan(
    task: str,
    repo: str,
    topology: str,
    files: list[str],
    *,
    intent: str = "edit",
    shape: str = "",
    hits: list[str] = (),
    budget: Budget | None = None,
    sizes: PlanSizes = DEFAULT_SIZES,
) -> Plan:
    """The plan for a routed task (module docstring). ``files``: the footprint's repository paths;
    ``hits``: library paths of retrieved symbols (what editing agents read first, :func:`code_focus`, and what
    investigators read); ``budget``: the run's total (``None``: exactly what the plan needs)."""
    per_file = [code_focus(repo, f, hits) for f in files]
    src = [p for focus in per_file for p in focus]
    syms = [f"{file_dir(repo, f)}/{SYMBOLS_NAME}" for f in files]
    task_in = {"task": "TaskSpec"}
    agents: list[PlanNode] = []
    if topology == "FASTPATH" and intent == "read":
        agents.append(
            _agent("reader", "reader", task_in, {"answer": "Answer"}, syms + list(hits)[:6], sizes, 1)
        )
        final = "answer"
    elif topology in ("FASTPATH", "SUBAGENT"):
        role = "solo" if topology == "FASTPATH" else "specialist"
        agents.append(_agent(role, role, task_in, {"patch": "Patch"}, src, sizes, 1))
        final = "patch"
    elif topology == "MULTIAGENT":
        edit_in = dict(task_in)
        if shape == "pipeline":
            agents.append(_agent("planner", "planner", task_in, {"plan": "EditPlan"}, syms, sizes, 1))
            edit_in["plan"] = "EditPlan"
        groups = [[p for focus in g for p in focus] for g in _groups(per_file, MAX_WORKERS)]
        for i, g in enumerate(groups, 1):
            agents.append(
                _agent(f"editor{i}", "editor", edit_in, {f"patch{i}": "Patch"}, g, sizes, len(edit_in))
            )
        merge_in = dict(task_in) | {f"patch{i}": "Patch" for i in range(1, len(groups) + 1)}
        agents.append(
            _agent("integrator", "integrator", merge_in, {"patch": "Patch"}, [], sizes, len(merge_in))
        )
        final = "patch"
    else:  # DEEPRESEARCH
        slices = _groups(list(hits) or syms, MAX_WORKERS)
        for i, g in enumerate(slices, 1):
            agents.append(
                _agent(f"investigator{i}", "investigator", task_in, {f"findings{i}": "Findings"}, g, sizes, 1)
            )
        syn_in = dict(task_in) | {f"findings{i}": "Findings" for i in range(1, len(slices) + 1)}
        agents.append(
            _agent("synthesizer", "synthesizer", syn_in, {"report": "Report"}, [], sizes, len(syn_in))
        )
        final = "report"
    return _with_supervisor(task, repo, topology, shape, files, agents, final, budget, sizes)


def supervisor_seconds(agents: int) -> float:
    """The supervisor's own wall-clock cost: :data:`SESSION_SECONDS` per mount session it opens."""
    return SESSION_SECONDS * (agents + 3)


def _with_supervisor(task, repo, topology, shape, files, agents, final, budget, sizes) -> Plan:
    """Put ``agents`` under a supervisor that writes the task spec: its direct cost is one handoff per
    agent and :func:`supervisor_seconds`; its budget is exactly what its children and that cost need."""
    cost = Budget(seconds=supervisor_seconds(len(agents)), handoffs=len(agents))
    need = [sum(col) for col in zip(*(a.contract.budget for a in agents), strict=True)]
    need = [x + c for x, c in zip(need, cost, strict=True)]
    sup = PlanNode(
        "supervisor",
        "supervisor",
        make_contract((), Budget(*need), ("write",), ("task",)),
        {},
        {"task": "TaskSpec"},
        children=[a.id for a in agents],
        cost=cost,
    )
    return Plan(task, repo, topology, shape, [sup, *agents], budget or Budget(*need), final, list(files))
