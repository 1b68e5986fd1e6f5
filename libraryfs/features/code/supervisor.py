"""The supervisor: run a gated plan node by node, each sub-agent inside its own budgeted mount (PAPERS.md §3).

:meth:`Supervisor.run` takes a :class:`~libraryfs.features.code.plan.Plan` and

1. runs the three gates (:func:`~libraryfs.features.code.plan.run_gates`) and raises
   :class:`~libraryfs.features.code.plan.PlanRefused` — before any mount or model call — if one refuses;
2. writes ``plan.json`` and the ``task`` artifact (``TaskSpec``) under ``code/.runs/<run>/``;
3. runs the agents in data-flow order. Each gets a :class:`~libraryfs.features.code.budget.BudgetTracker`
   spawned from the supervisor's (one handoff, its contract's budget reserved; the unused part refunded
   when it ends) and a **mount session whose read budget is the node's** (``reads=…,tokens=…``): reading its
   input artifacts and its code goes through the mount, which fails a read past the budget with EDQUOT.
   Inputs must all be read (else the node fails); code is read until the budget runs out (the node goes
   on with what it has: ``truncated``). Then one model call (refused by the tracker, without a request, if
   the estimated prompt + the answer limit would pass the contract's tokens), and the answer, checked
   against the output type, is written as the node's artifact;
4. writes ``result.json`` (every node's calls, tokens, mount reads, status) and returns a :class:`RunResult`.

A node whose inputs are missing (an upstream node failed) is skipped. Sessions come from a callable
``sessions(budget_spec | None) -> context manager yielding a root directory`` — in production
:func:`libraryfs.daemon.session.mount_session` bound to the library; the supervisor never imports the
daemon. ``client`` is anything with ``complete_json(job, user, max_output_tokens) -> (dict, usage)`` (the
one chat client, :class:`libraryfs.llm.client.ChatClient`).

**Coordination messages** (what :attr:`RunResult.messages` counts): one delegation per agent (its
contract and the task spec), one per artifact an agent reads that another agent produced, and the final
result back to the supervisor.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from typing import Any

from libraryfs.features.code.agents import ROLE_JOBS, outputs_from_answer, user_message
from libraryfs.features.code.artifacts import ArtifactError, read_artifact, run_dir, write_artifact
from libraryfs.features.code.budget import BudgetExceeded, BudgetTracker, make_contract
from libraryfs.features.code.plan import (
    DEFAULT_SIZES,
    Plan,
    PlanNode,
    PlanRefused,
    PlanSizes,
    run_gates,
    supervisor_seconds,
)
from libraryfs.fs.budget import budget_state
from libraryfs.index.tokens import count_tokens

Sessions = Callable[[str | None], AbstractContextManager[str]]


@dataclass(slots=True)
class NodeRun:
    """What one agent did: ``status`` (``done`` | ``failed`` | ``skipped``), model calls and tokens as the
    server reported them, the mount's read accounting (``reads``, ``read_tokens``, ``refused_reads``),
    ``truncated`` (its code reading hit EDQUOT), artifacts written, inputs read from other agents, error."""

    id: str
    role: str
    status: str = "skipped"
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reads: int = 0
    read_tokens: int = 0
    refused_reads: int = 0
    truncated: bool = False
    handoffs_in: int = 0
    artifacts: list[str] = field(default_factory=list)
    error: str = ""


@dataclass(slots=True)
class RunResult:
    """A finished run: id, topology, the per-node records, the final artifact (value and path) and totals."""

    run_id: str
    topology: str
    nodes: list[NodeRun]
    final: Any = None
    final_path: str = ""
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        """Every agent finished and the final artifact exists."""
        return self.final is not None and all(n.status == "done" for n in self.nodes)

    @property
    def messages(self) -> int:
        """Coordination messages (module docstring)."""
        return sum(1 + n.handoffs_in for n in self.nodes) + (1 if self.final is not None else 0)

    def totals(self) -> dict:
        """Sums over the nodes: agents, calls, prompt/completion/total tokens, mount reads and read tokens,
        refused reads, coordination messages."""
        s = {k: sum(getattr(n, k) for n in self.nodes) for k in
             ("calls", "prompt_tokens", "completion_tokens", "reads", "read_tokens", "refused_reads")}  # fmt: skip
        s.update(
            agents=len(self.nodes), tokens=s["prompt_tokens"] + s["completion_tokens"], messages=self.messages
        )
        return s

    def as_dict(self) -> dict:
        """JSON-ready dict (``result.json``)."""
        return {
            "run_id": self.run_id,
            "topology": self.topology,
            "ok": self.ok,
            "final_path": self.final_path,
            "elapsed_s": round(self.elapsed_s, 3),
            "totals": self.totals(),
            "nodes": [asdict(n) for n in self.nodes],
        }


def new_run_id() -> str:
    """A run id: UTC time and 6 random hex digits (``20261201-181500-1a2b3c``)."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


class Supervisor:
    """Runs plans (module docstring). ``sizes`` must be the allowances the plans were built with (its
    ``output_tokens`` bounds every answer)."""

    def __init__(self, client: Any, sessions: Sessions, sizes: PlanSizes = DEFAULT_SIZES) -> None:
        self.client = client
        self.sessions = sessions
        self.sizes = sizes

    def run(self, plan: Plan, run_id: str | None = None) -> RunResult:
        """Gate, then run ``plan``. Raises :class:`PlanRefused` (nothing mounted, no model call) when a gate
        refuses; returns a :class:`RunResult` otherwise (failed nodes are recorded, not raised)."""
        report = run_gates(plan)
        if not report.ok:
            raise PlanRefused(report)
        t0 = time.monotonic()
        run_id = run_id or new_run_id()
        sup = plan.nodes[0]
        spec = {"task": plan.task, "repo": plan.repo, "topology": plan.topology, "files": plan.files}
        with self.sessions(None) as root:
            os.makedirs(os.path.join(root, run_dir(run_id)), exist_ok=True)
            with open(os.path.join(root, run_dir(run_id), "plan.json"), "w", encoding="utf-8") as f:
                json.dump(plan.to_dict(), f, indent=1)
            write_artifact(root, run_id, sup.id, "task", "TaskSpec", spec)
        tracker = BudgetTracker(sup.contract, sup.id)
        producers = {a: ids[0] for a, ids in plan.producers().items()}
        records: dict[str, NodeRun] = {}
        for nid in plan.order():
            node = plan.node(nid)
            if node is sup:
                continue
            rec = records[nid] = NodeRun(nid, node.role)
            if any(producers[a] != sup.id and records[producers[a]].status != "done" for a in node.inputs):
                rec.error = "an input's producer did not finish"
                continue
            try:
                child = tracker.spawn(node.contract, nid)
            except BudgetExceeded as e:  # e.g. the slower agents before it used up the run's seconds
                rec.status, rec.error = "failed", f"not started: {e}"
                continue
            try:
                spec_r = f"reads={node.read_count},tokens={node.read_tokens}"
                with self.sessions(spec_r) as root:
                    self._run_node(plan, node, root, child, run_id, producers, rec)
            finally:
                child.close()
        result = RunResult(run_id, plan.topology, list(records.values()))
        final_node = producers[plan.final]
        if records.get(final_node) and records[final_node].status == "done":
            typ = plan.node(final_node).outputs[plan.final]
            with self.sessions(None) as root:
                result.final = read_artifact(root, run_id, final_node, plan.final, typ)
                result.final_path = records[final_node].artifacts[0]
        result.elapsed_s = time.monotonic() - t0
        with (
            self.sessions(None) as root,
            open(os.path.join(root, run_dir(run_id), "result.json"), "w", encoding="utf-8") as f,
        ):
            json.dump(result.as_dict(), f, indent=1)
        return result

    def _run_node(
        self, plan: Plan, node: PlanNode, root: str, tracker: BudgetTracker, run_id: str,
        producers: dict[str, str], rec: NodeRun,
    ) -> None:  # fmt: skip
        """One agent inside its mount session (module docstring, step 3); fills ``rec``."""
        try:
            inputs = {a: read_artifact(root, run_id, producers[a], a, t) for a, t in node.inputs.items()}
            rec.handoffs_in = sum(producers[a] != plan.nodes[0].id for a in node.inputs)
            code = self._read_code(root, node, rec)
            user = user_message(node.role, plan.task, inputs, code, rec.truncated)
            job = ROLE_JOBS[node.role]
            est = count_tokens(job.system_prompt()) + count_tokens(user) + 16
            tracker.charge("iterations", 1)
            left = tracker.remaining()["tokens"]
            if est + self.sizes.output_tokens > left:
                raise BudgetExceeded("tokens", tracker.limits[2] - left, est + self.sizes.output_tokens,
                                     tracker.limits[2], node.id)  # fmt: skip
            try:
                answer, usage = self.client.complete_json(job, user, self.sizes.output_tokens)
            except Exception as e:
                self._charge_bad_answer(rec, tracker, e)
                raise
            self._spent(rec, tracker, usage)
            for name, value in outputs_from_answer(node.role, answer, node.outputs).items():
                rec.artifacts.append(write_artifact(root, run_id, node.id, name, node.outputs[name], value))
            tracker.check_outputs(dict.fromkeys(node.outputs))
            rec.status = "done"
        except OSError as e:
            rec.status, rec.error = (
                "failed",
                f"{'EDQUOT: read budget spent' if e.errno == errno.EDQUOT else e}",
            )
        except (ArtifactError, BudgetExceeded, ValueError) as e:
            rec.status, rec.error = "failed", str(e)
        except Exception as e:  # noqa: BLE001 - a model/transport error fails this node, not the run
            rec.status, rec.error = "failed", f"{type(e).__name__}: {e}"
        finally:
            state = _budget_state(root)
            if state:
                rec.reads, rec.read_tokens = state["used"]["reads"], state["used"]["tokens"]
                rec.refused_reads = state["refused"]

    @classmethod
    def _charge_bad_answer(cls, rec: NodeRun, tracker: BudgetTracker, e: Exception) -> None:
        """Charge node ``rec`` what a failed model request spent when ``e`` says so — only a
        :class:`libraryfs.llm.client.BadAnswer` does: the server answered (prompt read, tokens generated)
        but the answer was not usable, and the client set its ``usage`` (a
        :class:`~libraryfs.llm.client.Usage` it measured for that very request). Any other error is not charged, whatever it carries: a
        ``usage`` attribute on an arbitrary exception (an SDK's error, another client's) has no such
        contract — its shape is unknown (a ``dict`` here once raised ``AttributeError`` inside this handler
        and replaced the model's error in the node's record) and it need not be this request's spend.
        Imported here, on the error path: at module level it would import ``openai`` for every user of the
        supervisor (``libraryfs.llm.client`` is loaded already whenever the real client raised)."""
        from libraryfs.llm.client import BadAnswer

        if isinstance(e, BadAnswer) and e.usage is not None:
            cls._spent(rec, tracker, e.usage)

    @staticmethod
    def _spent(rec: NodeRun, tracker: BudgetTracker, usage: Any) -> None:
        """Count one answered model request of node ``rec`` (``usage``: a :class:`libraryfs.llm.client.Usage`,
        tokens) and charge the run's budget."""
        rec.calls += 1
        rec.prompt_tokens += usage.prompt_tokens
        rec.completion_tokens += usage.completion_tokens
        tracker.call_tool("model", tokens=usage.prompt_tokens + usage.completion_tokens)

    def _read_code(self, root: str, node: PlanNode, rec: NodeRun) -> list[dict]:
        """Read the node's focus files through the mount, most relevant first. A file whose size (``stat``,
        free) says it cannot fit in what is left of the read budget (``.libraryfs/budget``, free) is
        skipped; a read the mount refuses anyway (EDQUOT) ends the reading. Either marks ``truncated``."""
        code: list[dict] = []
        for rel in node.focus:
            path = os.path.join(root, rel)
            try:
                size = os.stat(path).st_size
            except FileNotFoundError:
                continue
            state = _budget_state(root)
            left = state["remaining"]["tokens"] if state else None
            if left is not None and (size + 3) // 4 > left:
                rec.truncated = True
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    code.append({"path": rel, "text": f.read()})
            except OSError as e:
                if e.errno != errno.EDQUOT:
                    raise
                rec.truncated = True
                break
        return code


def _budget_state(root: str) -> dict | None:
    """The session's read budget (:func:`libraryfs.fs.budget.budget_state`); ``None`` when there is none or
    it cannot be read (the accounting is then missing from the record; the mount still enforces it)."""
    try:
        return budget_state(root)
    except (OSError, ValueError):
        return None


def monolithic_plan(plan: Plan) -> Plan:
    """The same task as one agent: it reads every file any agent of ``plan`` reads (its context allowance
    the sum of theirs) and produces ``plan``'s final artifact type, with no delegation between agents."""
    from libraryfs.features.code.budget import Budget

    agents = plan.nodes[1:]
    focus = list(dict.fromkeys(p for a in agents for p in a.focus))
    final_type = next(a.outputs[plan.final] for a in agents if plan.final in a.outputs)
    role = {"Answer": "reader", "Report": "synthesizer"}.get(final_type, "solo")
    read = sum(a.read_tokens for a in agents)
    tokens = read + sum(a.contract.budget.tokens - a.read_tokens for a in agents if a.contract)
    seconds = sum(a.contract.budget.seconds for a in agents if a.contract)
    contract = make_contract({"task": "TaskSpec"}, {"iterations": 1, "calls": 1, "tokens": tokens, "seconds": seconds},
                             ("read", "model", "write"), {plan.final: final_type})  # fmt: skip
    mono = PlanNode("monolith", role, contract, {"task": "TaskSpec"}, {plan.final: final_type}, focus,
                    read_tokens=read, read_count=len(focus) + 2)  # fmt: skip
    sup = plan.nodes[0]
    cost = Budget(seconds=supervisor_seconds(1), handoffs=1)
    need = Budget(*[x + c for x, c in zip(contract.budget, cost, strict=True)])
    sup_c = make_contract((), need, ("write",), ("task",))
    head = PlanNode(sup.id, sup.role, sup_c, {}, dict(sup.outputs), children=["monolith"], cost=cost)
    return Plan(
        plan.task, plan.repo, plan.topology, "monolithic", [head, mono], sup_c.budget, plan.final, plan.files
    )
