"""Recall over a real Crafter episode: packing invariants as property tests (never over budget, deterministic,
key lines first, monotone in the budget); steps where things happened inside a visit; multi-hop chains
resolved to every hop; and evidence recall / reader answers on questions from our own phrasing file."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libraryfs.features.episodes.index import EpisodeIndex
from libraryfs.features.episodes.reader import read
from libraryfs.features.episodes.recall import recall
from libraryfs.index.tokens import count_tokens
from libraryfs_bench.episodes import crafter_data, phrasings, questions
from libraryfs_bench.episodes.bench import build_units, norm
from libraryfs_bench.episodes.truth import Truth

PHRASINGS = Path(__file__).parent / "data" / "episode_phrasings.jsonl"
ORDER = {"key": 0, "anchor": 1, "state": 2, "chain": 3, "obs": 4, "candidate": 5}


@pytest.fixture(scope="module")
def episode():
    recs = crafter_data.load_rollout(2, 1200)
    qs, _ = questions.generate(recs, phrasings.load(PHRASINGS), "seed2", key="recall-test")
    return recs, EpisodeIndex(build_units(recs)), qs


def _question_strategy(qs):
    free = st.text(alphabet=st.characters(codec="utf-8", categories=("L", "N", "P", "Zs")), max_size=80)
    return st.one_of(st.sampled_from([q.text for q in qs]), free)


PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@PROPS
@given(data=st.data(), budget=st.integers(min_value=0, max_value=1500))
def test_never_over_budget_and_deterministic(episode, data, budget):
    _, idx, qs = episode
    q = data.draw(_question_strategy(qs))
    r1, r2 = recall(idx, q, budget), recall(idx, q, budget)
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
def test_key_lines_first(episode, data, budget):
    _, idx, qs = episode
    q = data.draw(st.sampled_from(qs))
    r = recall(idx, q.text, budget)
    kinds = [i.kind for i in r.items]
    assert kinds == sorted(kinds, key=ORDER.__getitem__)
    assert {i.t for i in r.items if i.kind == "key"} <= set(r.resolved["steps"])


def test_inside_a_visit_recall_returns_the_event_steps(episode):
    """Counting inside a visit packs the steps where the event happened, not only the visit's first step."""
    recs, idx, _ = episode
    tr = Truth(recs)
    cases = []
    for (kind, lab), spans in sorted(tr.visits.items()):
        for k, (a, b) in enumerate(spans, 1):
            inside = [t for t in tr.occurrences("ev", "collect_wood") if a <= t <= (tr.T if b is None else b)]
            if kind == "place" and len(inside) >= 3:
                cases.append((lab, k, a, inside))
    assert cases
    for lab, k, start, inside in cases[:5]:
        q = f"How many times did I collect wood during my {phrasings.ordinal(k, 'ord')} visit to {lab}?"
        r = recall(idx, q, 200)
        assert set(inside) | {start} <= set(r.steps()), q
        assert read(q, r.text)[0] == str(len(inside))
        where = f"Where was I when I collected wood for the 3rd time during my visit number {k} to {lab}?"
        r = recall(idx, where, 200)
        assert inside[2] in r.steps() and read(where, r.text)[0] == recs[inside[2]]["area"]


def test_multi_hop_chain_resolved_to_every_hop(episode):
    recs, idx, _ = episode
    tr = Truth(recs)
    wood = tr.occurrences("ev", "collect_wood")
    t1 = wood[1]
    e2, t2 = min(((e, next(x for x in tr.occurrences("ev", e) if x > t1)) for e in tr.names("ev") if e != "collect_wood" and any(x > t1 for x in tr.occurrences("ev", e))), key=lambda p: (p[1], p[0]))  # fmt: skip
    text = phrasings.event_forms(e2)[1]
    q = f"What was I facing 2 steps after I first {text} following my second wood collection?"
    r = recall(idx, q, 64)
    assert [t for t, *_ in r.resolved["trace"]] == [t1, t2, t2 + 2]
    assert {t1, t2, t2 + 2} <= set(r.steps())
    assert read(q, r.text)[0] == recs[t2 + 2]["facing"]


def test_own_phrasings_recalled_and_answered_at_200_tokens(episode):
    """Every family: gold evidence within 200 tokens and the deterministic reader's answer from that text."""
    _, idx, qs = episode
    assert {q.family for q in qs} == set(phrasings.FAMILIES)
    missed, wrong = [], []
    for q in qs:
        r = recall(idx, q.text, 200)
        assert r.tokens <= 200
        if not set(q.gold_steps) <= set(r.steps()):
            missed.append((q.kind, q.text))
        if norm(read(q.text, r.text)[0]) != norm(q.answer):
            wrong.append((q.kind, q.text, q.answer))
    assert len(missed) <= len(qs) // 20, missed
    assert len(wrong) <= len(qs) // 20, wrong


def test_without_anchors_loses_chains(episode):
    """The ablation is really different: text ranking alone misses offset/multi-hop chains."""
    _, idx, qs = episode
    hard = [q for q in qs if q.family in ("offset", "multihop")]
    got = sum(set(q.gold_steps) <= set(recall(idx, q.text, 200, use_anchors=False).steps()) for q in hard)
    assert got < len(hard) // 2


def _former_rank(idx, question, q, pins, use_anchors=True):
    """The ranking recall used before the single-pass one (a loop with a bisect and ``min`` per unit, sorted
    with a key function): the reference the current :func:`recall.rank` must equal exactly."""
    import math
    from bisect import bisect_left

    from libraryfs.features.episodes import recall as R
    from libraryfs.features.episodes.index import tokenize

    bm = idx.bm25(tokenize(question))
    top = max(bm) if bm and max(bm) > 0 else 1.0
    wanted = set(q.mentions)
    scored = []
    counts = idx.mention_counts(wanted) if use_anchors and wanted else None
    pins_sorted = sorted(set(pins))
    for i, (t, b) in enumerate(zip(idx.ts, bm, strict=False)):
        text_sim = b / top
        if not use_anchors:
            scored.append((text_sim, t))
            continue
        compat = counts.get(i, 0) / len(wanted) if counts is not None else 0.0
        chain = 0.0
        if pins_sorted:
            j = bisect_left(pins_sorted, t)
            d = min(abs(t - pins_sorted[x]) for x in (j - 1, j) if 0 <= x < len(pins_sorted))
            chain = math.exp(-d / R.CHAIN_DECAY_STEPS)
        scored.append((R.W_ANCHOR * compat + R.W_CHAIN * chain + R.W_TEXT * text_sim, t))
    scored.sort(key=lambda x: (-x[0], x[1]))
    return scored


def test_rank_equals_the_former_ranking_exactly(episode):
    """Scores (bit for bit) and order of every unit, and the best ``limit``, for generated questions, free
    text, no pins, the resolved pins, random pins and pins outside the episode, with and without anchors."""
    import random

    from libraryfs.features.episodes import recall as R
    from libraryfs.features.episodes.anchors import parse_question

    _recs, idx, qs = episode
    rng = random.Random(5)
    for text in [q.text for q in qs[:25]] + ["", "hello", "where did I last drink water?"]:
        q = parse_question(text, idx.vocab)
        resolved = R.resolve_query(idx, q)["steps"]
        for pins in ([], resolved, sorted(rng.sample(idx.ts, 7)), [idx.ts[0] - 50, idx.ts[-1] + 50]):
            for use_anchors in (True, False):
                want = _former_rank(idx, text, q, pins, use_anchors)
                assert R.rank(idx, text, q, pins, use_anchors) == want
                assert R.rank(idx, text, q, pins, use_anchors, 37) == want[:37]
