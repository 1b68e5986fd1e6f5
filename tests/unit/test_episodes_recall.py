"""Packing invariants of episodic recall as property tests over a real Crafter episode: never over budget,
deterministic, anchors first, monotone in the budget; and recall answers generated questions."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libraryfs.features.episodes.reader import answer, parse_evidence
from libraryfs.features.episodes.recall import EpisodeIndex, recall
from libraryfs.index.tokens import count_tokens
from libraryfs_bench.episodes import crafter_data, questions
from libraryfs_bench.episodes.bench import build_units

pytest.importorskip("crafter")


@pytest.fixture(scope="module")
def episode():
    recs = crafter_data.load_rollout(1, 1200)
    return recs, EpisodeIndex(build_units(recs)), questions.generate(recs, 6, seed=1)


def _question_strategy(qs):
    free = st.text(alphabet=st.characters(codec="utf-8", categories=("L", "N", "P", "Zs")), max_size=80)
    return st.one_of(st.sampled_from([q.text for q in qs]), free)


PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@PROPS
@given(data=st.data(), budget=st.integers(min_value=0, max_value=1500))
def test_never_over_budget_and_deterministic(episode, data, budget):
    _, idx, qs = episode
    q = data.draw(_question_strategy(qs))
    r1 = recall(idx, q, budget)
    r2 = recall(idx, q, budget)
    assert count_tokens(r1.text) == r1.tokens <= budget
    assert r1.text == r2.text and [i.t for i in r1.items] == [i.t for i in r2.items]


@PROPS
@given(
    data=st.data(), b1=st.integers(min_value=0, max_value=1200), extra=st.integers(min_value=0, max_value=800)
)
def test_monotone_in_budget(episode, data, b1, extra):
    _, idx, qs = episode
    q = data.draw(_question_strategy(qs))
    small, large = recall(idx, q, b1), recall(idx, q, b1 + extra)
    assert [(i.t, i.text) for i in large.items[: len(small.items)]] == [(i.t, i.text) for i in small.items]
    assert large.tokens >= small.tokens


@PROPS
@given(data=st.data(), budget=st.integers(min_value=0, max_value=1000))
def test_anchors_first(episode, data, budget):
    _, idx, qs = episode
    q = data.draw(st.sampled_from(qs))
    r = recall(idx, q.text, budget)
    kinds = [i.kind for i in r.items]
    rank = {"anchor": 0, "chain": 1, "state": 2, "candidate": 3}
    assert kinds == sorted(kinds, key=rank.__getitem__)
    pins = set(r.resolved["anchor_steps"]) | (
        {r.resolved["target"]} if r.resolved["target"] is not None else set()
    )
    assert {i.t for i in r.items if i.kind == "anchor"} <= pins


def test_generated_questions_answered_at_200_tokens(episode):
    """Every family: the rule-based reader answers from ≤ 200 tokens of recall (not from a mock)."""
    _, idx, qs = episode
    assert {q.family for q in qs} == set(questions.FAMILIES)
    wrong = []
    for q in qs:
        r = recall(idx, q.text, 200)
        assert r.tokens <= 200
        if answer(q.spec, parse_evidence(r.text)) != q.answer or not set(q.gold_steps) <= set(r.steps()):
            wrong.append((q.family, q.text))
    assert len(wrong) <= len(qs) // 10, wrong


def test_without_anchors_loses_chains(episode):
    """The ablation is really different: text ranking alone misses offset/multi-hop chains."""
    _, idx, qs = episode
    hard = [q for q in qs if q.family in ("offset", "multihop")]
    got = sum(set(q.gold_steps) <= set(recall(idx, q.text, 200, use_anchors=False).steps()) for q in hard)
    assert got < len(hard)
