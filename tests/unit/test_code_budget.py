"""VERIFYCONSERVATION (hypothesis properties), the runtime tracker, the core ReadBudget, and ``libraryfs budget verify``."""

from __future__ import annotations

import errno
import json

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from libraryfs.cli.main import cli
from libraryfs.errors import QuotaExceeded, to_errno
from libraryfs.features.code.budget import (
    DIMENSIONS,
    Budget,
    BudgetExceeded,
    BudgetTracker,
    ContractViolation,
    make_contract,
    verify_plan,
)
from libraryfs.fs.budget import ReadBudget, parse_budget_spec

vec = st.fixed_dictionaries({d: st.integers(0, 50) for d in DIMENSIONS})


@st.composite
def conserving_plans(draw):
    """A random forest (parent of node i is some j < i, or none) whose budgets are built bottom-up to fit:
    budget = cost + combine(children) + slack."""
    n = draw(st.integers(1, 25))
    parents = [None] + [draw(st.one_of(st.none(), st.integers(0, i - 1))) for i in range(1, n)]
    costs = [draw(vec) for _ in range(n)]
    slack = [draw(vec) for _ in range(n)]
    par = [draw(st.booleans()) for _ in range(n)]
    kids = {i: [j for j in range(n) if parents[j] == i] for i in range(n)}
    budgets: dict[int, dict] = {}
    for i in reversed(range(n)):
        b = {}
        for d in DIMENSIONS:
            vals = [budgets[c][d] for c in kids[i]]
            comb = (max(vals) if vals else 0) if (d == "seconds" and par[i]) else sum(vals)
            b[d] = costs[i][d] + comb + slack[i][d]
        budgets[i] = b
    nodes = [
        {
            "id": f"n{i}",
            "budget": budgets[i],
            "cost": costs[i],
            "children": [f"n{c}" for c in kids[i]],
            "parallel": par[i],
        }
        for i in range(n)
    ]
    return {"nodes": nodes}, parents, slack, par


@settings(max_examples=150, deadline=None)
@given(conserving_plans())
def test_conserving_plans_are_accepted(data):
    plan, parents, _, _ = data
    r = verify_plan(plan)
    assert r.ok, [str(v) for v in r.violations]
    assert r.n_edges == sum(p is not None for p in parents)
    assert r.roots == [f"n{i}" for i, p in enumerate(parents) if p is None]


@settings(max_examples=150, deadline=None)
@given(conserving_plans(), st.data())
def test_overspend_names_node_and_dimension(data, draw):
    plan, parents, slack, par = data
    children = [i for i, p in enumerate(parents) if p is not None]
    if not children:
        return
    c = draw.draw(st.sampled_from(children))
    d = draw.draw(st.sampled_from(DIMENSIONS))
    p = parents[c]
    # raise the child's budget past the parent's slack (for parallel seconds: past the slowest sibling too)
    node = plan["nodes"][c]
    siblings = [plan["nodes"][s]["budget"][d] for s, q in enumerate(parents) if q == p]
    bump = slack[p][d] + 1 + (max(siblings) if d == "seconds" and par[p] else 0)
    node["budget"][d] += bump
    node["cost"][d] += bump  # keep the child itself conserving
    r = verify_plan(plan)
    assert not r.ok
    assert [(v.kind, v.node, v.dimension) for v in r.violations] == [("overspend", f"n{p}", d)]
    assert f"n{p}" in str(r.violations[0]) and d in str(r.violations[0])


@settings(max_examples=100, deadline=None)
@given(conserving_plans(), st.data())
def test_second_parent_and_cycles_rejected(data, draw):
    plan, parents, _, _ = data
    n = len(parents)
    if n < 2:
        return
    a, b = draw.draw(st.integers(0, n - 1)), draw.draw(st.integers(0, n - 1))
    if a == b:
        return
    plan["nodes"][a]["children"].append(f"n{b}")
    r = verify_plan(plan)
    kinds = {v.kind for v in r.violations}
    assert not r.ok
    if parents[b] is not None:
        assert any(v.kind == "two-parents" and v.node == f"n{b}" for v in r.violations)
    else:  # b was a root: a cycle only if a hangs below b
        x, below = a, False
        while x is not None:
            below |= x == b
            x = parents[x]
        assert ("cycle" in kinds) == below


def test_pure_cycle_and_unknown_child_and_forest_budget():
    r = verify_plan(
        {"nodes": {"a": {"children": ["b"]}, "b": {"children": ["a"]}, "c": {"children": ["zz"]}}}
    )
    kinds = sorted(v.kind for v in r.violations)
    assert kinds == ["cycle", "unknown-child"]
    cyc = next(v for v in r.violations if v.kind == "cycle")
    assert "a → b → a" in cyc.detail or "b → a → b" in cyc.detail
    r = verify_plan(
        {
            "budget": {"tokens": 10},
            "nodes": [{"id": "x", "budget": {"tokens": 6}}, {"id": "y", "budget": {"tokens": 6}}],
        }
    )
    assert [(v.kind, v.dimension) for v in r.violations] == [("forest-overspend", "tokens")]


def test_parallel_seconds_combine_by_max():
    kids = [{"id": f"k{i}", "budget": {"seconds": 10, "tokens": 5}} for i in range(3)]
    plan = {
        "nodes": [
            {
                "id": "r",
                "budget": {"seconds": 11, "tokens": 15},
                "cost": {"seconds": 1},
                "children": ["k0", "k1", "k2"],
                "parallel": True,
            },
            *kids,
        ]
    }
    assert verify_plan(plan).ok
    plan["nodes"][0]["parallel"] = False
    r = verify_plan(plan)
    assert [(v.node, v.dimension, v.need) for v in r.violations] == [("r", "seconds", 31)]


def test_tracker_enforces_and_conserves():
    root = BudgetTracker(
        make_contract(["q"], {"tokens": 100, "calls": 3, "handoffs": 1, "seconds": 60}, ["grep"], ["a"])
    )
    root.check_inputs({"q": 1})
    with pytest.raises(ContractViolation):
        root.check_inputs({})
    root.call_tool("grep", tokens=10)
    with pytest.raises(ContractViolation):
        root.call_tool("rm")
    child = root.spawn(make_contract(budget={"tokens": 50, "calls": 1, "seconds": 5}), "child")
    assert root.remaining()["tokens"] == 40 and root.remaining()["handoffs"] == 0
    with pytest.raises(BudgetExceeded) as e:
        root.spawn(make_contract(budget={"tokens": 1}), "second")  # no handoff left
    assert e.value.dimension == "handoffs"
    child.charge("tokens", 20)
    with pytest.raises(BudgetExceeded) as e:
        child.charge("tokens", 31)
    assert (e.value.node, e.value.dimension, e.value.used) == ("child", "tokens", 20)
    child.close()
    assert root.remaining()["tokens"] == 70  # 30 unused tokens refunded
    with pytest.raises(ContractViolation):
        root.check_outputs({})
    root.check_outputs({"a": 1})


def test_read_budget():
    assert parse_budget_spec("reads=100, tokens=5000") == {"reads": 100, "tokens": 5000}
    for bad in ("reads", "bytes=1", "reads=-1", "reads=1,reads=2", ""):
        with pytest.raises(ValueError):
            parse_budget_spec(bad)
    rb = ReadBudget({"reads": 2, "tokens": 100})
    rb.charge(reads=1, tokens=60)
    with pytest.raises(QuotaExceeded) as e:
        rb.charge(reads=1, tokens=41)
    assert not isinstance(e.value, OSError) and e.value.dimension == "tokens"
    assert (e.value.used, e.value.requested, e.value.limit) == (60, 41, 100)
    assert to_errno(e.value) == errno.EDQUOT  # through the one errno table, not by class name
    assert rb.remaining() == {"reads": 1, "tokens": 40}  # a refused charge consumes nothing
    child = rb.child({"reads": 1, "tokens": 30})
    assert rb.remaining() == {"reads": 0, "tokens": 10}
    with pytest.raises(ValueError):
        rb.child({"tokens": 1})
    doc = json.loads(rb.to_json())
    assert doc["refused"] == 1 and doc["remaining"] == {"reads": 0, "tokens": 10}
    child.charge(reads=1)
    assert ReadBudget({"reads": 1}).remaining() == {"reads": 1, "tokens": None}


def test_budget_verify_cli(tmp_path):
    good = {
        "nodes": [
            {"id": "lead", "budget": {"tokens": 100, "calls": 4}, "cost": {"calls": 1}, "children": ["w"]},
            {"id": "w", "budget": {"tokens": 100, "calls": 3}},
        ]
    }
    p = tmp_path / "plan.yaml"
    p.write_text(yaml.safe_dump(good))
    res = CliRunner().invoke(cli, ["budget", "verify", str(p)])
    assert res.exit_code == 0 and "conserves" in res.output
    good["nodes"][1]["budget"]["tokens"] = 101
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(good))
    res = CliRunner().invoke(cli, ["budget", "verify", str(p)])
    assert res.exit_code == 1
    assert "node 'lead' overspends tokens" in res.output and "plan rejected: 1 violation" in res.output
    p.write_text("{not json")
    res = CliRunner().invoke(cli, ["budget", "verify", str(p)])
    assert res.exit_code == 1 and "cannot parse" in res.output


def test_budget_from_mapping_rejects_unknown():
    with pytest.raises(ValueError):
        Budget.from_mapping({"tokenz": 1})
    with pytest.raises(ValueError):
        Budget.from_mapping({"tokens": -1})
