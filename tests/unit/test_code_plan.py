"""Execution plans: shapes per topology, and the three pre-execution gates — each refuses its own broken plan
and only that one (PAPERS.md §3; issue 17)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from libraryfs.features.code.artifacts import ArtifactError, read_artifact, validate, write_artifact
from libraryfs.features.code.budget import Budget, make_contract, verify_plan
from libraryfs.features.code.plan import (
    MAX_WORKERS,
    build_plan,
    code_focus,
    gate_budget,
    gate_contracts,
    gate_handoffs,
    run_gates,
)
from libraryfs.features.code.supervisor import monolithic_plan

FILES = ["pkg/a.py", "pkg/b.py", "pkg/c.py", "pkg/d.py", "tests/test_a.py"]


def _plans():
    return {
        "fast": build_plan("Fix a", "demo", "FASTPATH", FILES[:1]),
        "read": build_plan("who calls a", "demo", "FASTPATH", FILES[:2], intent="read"),
        "sub": build_plan("Fix a and its test", "demo", "SUBAGENT", [FILES[0], FILES[4]]),
        "pipeline": build_plan("Refactor", "demo", "MULTIAGENT", FILES, shape="pipeline"),
        "swarm": build_plan("Refactor", "demo", "MULTIAGENT", FILES, shape="swarm"),
        "deep": build_plan("why?", "demo", "DEEPRESEARCH", [], hits=["code/demo/pkg/a.py/f.py"] * 1),
    }


@pytest.mark.parametrize("name", list(_plans()))
def test_built_plans_pass_every_gate(name):
    plan = _plans()[name]
    report = run_gates(plan)
    assert report.ok, str(report)
    assert verify_plan(plan.to_dict()).ok
    order = plan.order()
    assert order[0] == "supervisor" and set(order) == {n.id for n in plan.nodes}
    # every consumer runs after every producer of what it consumes
    prod = plan.producers()
    for n in plan.nodes:
        for a in n.inputs:
            assert order.index(prod[a][0]) < order.index(n.id)
    json.dumps(plan.to_dict())  # plan.json is JSON


def test_shapes_per_topology():
    p = _plans()
    assert [n.role for n in p["fast"].nodes] == ["supervisor", "solo"] and p["fast"].final == "patch"
    assert [n.role for n in p["read"].nodes] == ["supervisor", "reader"] and p["read"].final == "answer"
    assert all(path.endswith("SYMBOLS.md") for path in p["read"].nodes[1].focus)
    assert [n.role for n in p["sub"].nodes] == ["supervisor", "specialist"]
    roles = [n.role for n in p["pipeline"].nodes]
    assert roles == ["supervisor", "planner"] + ["editor"] * MAX_WORKERS + ["integrator"]
    editors = [n for n in p["pipeline"].nodes if n.role == "editor"]
    assert sorted(f for e in editors for f in e.focus) == sorted(
        p for f in FILES for p in (f"code/demo/{f}/SOURCE.py", f"code/demo/{f}/SYMBOLS.md")
    )  # every footprint file is edited by exactly one editor (no retrieved symbol: the whole file)
    assert all("plan" in e.inputs for e in editors)
    assert "planner" not in [n.role for n in p["swarm"].nodes]
    assert [n.role for n in p["deep"].nodes][-1] == "synthesizer" and p["deep"].final == "report"
    sup = p["pipeline"].nodes[0]
    assert sup.cost.handoffs == len(p["pipeline"].nodes) - 1
    assert sup.contract.budget.tokens == sum(n.contract.budget.tokens for n in p["pipeline"].nodes[1:])


def _broken(kind: str):
    """A pipeline plan with exactly one defect of ``kind``."""
    plan = build_plan("Refactor", "demo", "MULTIAGENT", FILES, shape="pipeline")
    if kind == "contracts":
        ed = plan.node("editor2")
        ed.contract = None  # its data flow is intact: only the contract is missing
    elif kind == "budget":
        plan.budget = Budget(*[x // 2 for x in plan.budget])  # the run cannot afford the plan
    elif kind == "handoffs":
        plan.node("integrator").inputs["patch2"] = "EditPlan"  # wrong type for editor2's patch
        c = plan.node("integrator").contract
        assert "patch2" in c.inputs
    return plan


@pytest.mark.parametrize("kind", ["contracts", "budget", "handoffs"])
def test_each_gate_refuses_its_own_broken_plan_only(kind):
    report = run_gates(_broken(kind))
    assert report.failed() == [kind], str(report)


def test_gate_details():
    assert "editor2: no contract" in gate_contracts(_broken("contracts"))
    assert any("forest-overspend" in s or "overspends" in s for s in gate_budget(_broken("budget")))
    assert any("as EditPlan" in s for s in gate_handoffs(_broken("handoffs")))
    # more handoff defects, each caught by gate 3 alone
    plan = build_plan("Refactor", "demo", "MULTIAGENT", FILES, shape="swarm")
    plan.node("integrator").inputs["ghost"] = "Patch"
    plan.node("integrator").contract = plan.node("integrator").contract._replace(
        inputs=(*plan.node("integrator").contract.inputs, "ghost")
    )
    report = run_gates(plan)
    assert report.failed() == ["handoffs"] and "no other node produces" in str(report)
    cyc = build_plan("Refactor", "demo", "MULTIAGENT", FILES, shape="swarm")
    ed = cyc.node("editor1")
    ed.inputs["patch"] = "Patch"  # editor1 consumes the integrator's output, which consumes editor1's
    ed.contract = ed.contract._replace(inputs=(*ed.contract.inputs, "patch"))
    report = run_gates(cyc)
    assert report.failed() == ["handoffs"] and "cycle" in str(report)


def test_contract_gate_checks_tools_and_read_budget():
    plan = build_plan("Fix a", "demo", "FASTPATH", FILES[:1])
    solo = plan.node("solo")
    solo.read_tokens = int(solo.contract.budget.tokens) + 1
    assert run_gates(plan).failed() == ["contracts"]
    plan = build_plan("Fix a", "demo", "FASTPATH", FILES[:1])
    plan.node("solo").contract = plan.node("solo").contract._replace(
        tools=frozenset({"read", "write", "shell"})
    )
    assert run_gates(plan).failed() == ["contracts"]
    plan = build_plan("Fix a", "demo", "FASTPATH", FILES[:1])
    plan.node("solo").contract = make_contract(
        ("task",), {"tokens": 100}, ("read", "model", "write"), ("patch",)
    )
    assert "calls the model" in str(run_gates(plan))


def test_code_focus_reads_retrieved_symbols_first():
    hits = [
        "code/demo/pkg/a.py/f.py",
        "code/demo/pkg/a.py/C.m.py",
        "code/demo/pkg/a.py/SYMBOLS.md",
        "code/demo/pkg/b.py/g.py",
        "code/demo/pkg/a.py.x/h.py",  # another file whose name starts alike
    ]
    assert code_focus("demo", "pkg/a.py", hits) == [
        "code/demo/pkg/a.py/f.py",
        "code/demo/pkg/a.py/C.m.py",
        "code/demo/pkg/a.py/SYMBOLS.md",
    ]
    assert code_focus("demo", "pkg/c.py", hits) == [
        "code/demo/pkg/c.py/SYMBOLS.md",
        "code/demo/pkg/c.py/SOURCE.py",
    ]
    plan = build_plan("Fix f", "demo", "SUBAGENT", ["pkg/a.py", "pkg/b.py"], hits=hits)
    assert plan.node("specialist").focus == code_focus("demo", "pkg/a.py", hits) + code_focus(
        "demo", "pkg/b.py", hits
    )


def test_monolithic_plan_reads_everything_once():
    plan = _plans()["pipeline"]
    mono = monolithic_plan(plan)
    assert run_gates(mono).ok
    (agent,) = mono.nodes[1:]
    assert sorted(agent.focus) == sorted({f for n in plan.nodes for f in n.focus})
    assert agent.outputs == {"patch": "Patch"} and agent.read_tokens == sum(n.read_tokens for n in plan.nodes)


def test_artifacts_are_typed(tmp_path):
    rel = write_artifact(str(tmp_path), "r1", "solo", "patch", "Patch", {"summary": "s", "edits": []})
    assert rel == "code/.runs/r1/solo/patch.json"
    assert read_artifact(str(tmp_path), "r1", "solo", "patch", "Patch")["summary"] == "s"
    with pytest.raises(ArtifactError):
        read_artifact(str(tmp_path), "r1", "solo", "patch", "EditPlan")  # it has no steps
    with pytest.raises(ArtifactError):
        read_artifact(str(tmp_path), "r1", "solo", "missing", "Patch")
    with pytest.raises(ArtifactError):
        validate("Patch", {"summary": 1, "edits": []})
    with pytest.raises(ArtifactError):
        validate("Answer", "   ")
    with pytest.raises(ArtifactError):
        write_artifact(str(tmp_path), "r1", "solo", "x", "Nope", {})


def test_plan_budget_defaults_to_need_and_refuses_a_smaller_one():
    plan = build_plan("Fix a", "demo", "SUBAGENT", FILES[:2])
    assert plan.budget == plan.nodes[0].contract.budget
    small = dataclasses.replace(plan, budget=plan.budget._replace(tokens=plan.budget.tokens - 1))
    assert run_gates(small).failed() == ["budget"]
