"""Recall without numpy and without bpe_openai's package import gives the same answers, bit for bit: the
plain-Python BM25 (libraryfs.features.episodes.bm25) scores exactly as ``rank_bm25.BM25Okapi``, and recall
packs the same lines with the same token counts as with ``rank_bm25`` and ``bpe_openai.get_encoding``
(issue 18: CLI latency)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from rank_bm25 import BM25Okapi

from libraryfs.features.episodes.bm25 import Okapi
from libraryfs.features.episodes.index import EpisodeIndex, tokenize
from libraryfs.features.episodes.recall import recall
from libraryfs_bench.episodes import crafter_data, phrasings, questions
from libraryfs_bench.episodes.bench import build_units

PHRASINGS = Path(__file__).parent / "data" / "episode_phrasings.jsonl"


@pytest.fixture(scope="module")
def episode():
    recs = crafter_data.load_rollout(3, 1500)
    qs, _ = questions.generate(recs, phrasings.load(PHRASINGS), "seed3", key="bm25-test")
    return build_units(recs), [q.text for q in qs]


class _RankBM25:
    """The former scorer of EpisodeIndex.bm25: rank_bm25 (numpy), its scores as Python floats."""

    def __init__(self, corpus):
        self.bm = BM25Okapi(corpus)

    def get_scores(self, tokens):
        return [float(x) for x in self.bm.get_scores(tokens)]


def test_scores_equal_rank_bm25_on_a_real_episode(episode):
    units, qs = episode
    corpus = [tokenize(u.terms()) for u in units]
    ours, ref = Okapi(corpus), BM25Okapi(corpus)
    assert len(qs) > 20
    words = sorted({w for d in corpus for w in d})
    rng = random.Random(7)
    queries = [tokenize(q) for q in qs] + [rng.sample(words, 3) + ["zzz-unseen"] for _ in range(30)]
    for q in queries:
        assert ours.get_scores(q) == [float(x) for x in ref.get_scores(q)], q


def test_scores_equal_rank_bm25_on_random_corpora():
    rng = random.Random(18)
    for _ in range(30):
        vocab = [f"w{i}" for i in range(rng.randrange(1, 40))]
        corpus = [
            [rng.choice(vocab) for _ in range(rng.randrange(1, 25))] for _ in range(rng.randrange(1, 60))
        ]
        ours, ref = Okapi(corpus), BM25Okapi(corpus)
        for _ in range(10):
            q = [rng.choice(vocab + ["absent"]) for _ in range(rng.randrange(0, 6))]
            assert ours.get_scores(q) == [float(x) for x in ref.get_scores(q)]


def test_recall_packs_the_same_lines_and_tokens_as_with_rank_bm25_and_bpe_openai(episode):
    import bpe_openai

    enc = bpe_openai.get_encoding("o200k_base")
    units, qs = episode
    ours, ref = EpisodeIndex(units), EpisodeIndex(units)
    ref._bm25 = _RankBM25([tokenize(u.terms()) for u in ref.units])
    for q in qs[:25]:
        for budget in (0, 200, 1000):
            a, b = recall(ours, q, budget), recall(ref, q, budget)
            assert (a.text, a.tokens, [(i.t, i.kind, i.score) for i in a.items]) == (
                b.text,
                b.tokens,
                [(i.t, i.kind, i.score) for i in b.items],
            )
            assert a.tokens == len(enc.encode(a.text, disallowed_special=())) <= budget
