"""The tiered self-consistency controller as a pure function (unit + hypothesis property tests)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from libraryfs.features.cards.controller import (
    DEFAULT_SCHEDULE,
    Schedule,
    TierSpec,
    cluster,
    control,
    gate,
    majority_vote,
    tier_index,
)

ans = st.one_of(st.none(), st.integers(0, 4))
attempts = st.fixed_dictionaries(
    {
        "easy": st.lists(ans, min_size=2, max_size=2),
        "medium": st.lists(ans, min_size=3, max_size=3),
        "hard": st.lists(ans, min_size=5, max_size=5),
    }
)


def test_easy_exit_on_two_of_two():
    d = control({"easy": [7, 7], "medium": [1, 2, 3], "hard": [1] * 5})
    assert (d.exit_tier, d.answer, d.calls) == ("easy", 7, 2)
    assert list(d.votes) == ["easy"]  # later tiers never drawn


def test_medium_exit_on_two_of_three_without_pooling():
    d = control({"easy": [1, 2], "medium": [3, 3, 1], "hard": [9] * 5})
    assert (d.exit_tier, d.answer, d.calls) == ("medium", 3, 5)
    # the easy vote for 1 is not pooled: 1 has 2 votes overall but only 1 in the medium gate
    d = control({"easy": [1, 2], "medium": [1, 3, 4], "hard": [9, 9, 8, 7, 6]})
    assert (d.exit_tier, d.answer, d.calls) == ("hard", 9, 10)


def test_pooled_ablation_counts_earlier_votes():
    pooled = Schedule(pooled=True)
    d = control({"easy": [1, 2], "medium": [1, 1, 4], "hard": [9] * 5}, pooled)
    assert (d.exit_tier, d.answer) == ("medium", 1)  # 3 of 5 pooled votes
    d = control({"easy": [1, 2], "medium": [3, 3, 4], "hard": [9] * 5}, pooled)
    assert d.exit_tier == "hard"  # 2 of 5 pooled is no majority


def test_hard_needs_a_unique_plurality_of_two():
    assert control({"easy": [1, 2], "medium": [3, 4, 5], "hard": [6, 6, 7, 8, 9]}).exit_tier == "hard"
    d = control({"easy": [1, 2], "medium": [3, 4, 5], "hard": [6, 6, 7, 7, 9]})
    assert d.exit_tier == "fallback" and d.calls == 10


def test_fallback_is_the_pool_of_ten_with_earliest_tiebreak():
    d = control({"easy": [1, 2], "medium": [2, 3, 4], "hard": [5, 6, 7, 8, 1]})
    assert (d.exit_tier, d.calls, d.top_votes) == ("fallback", 10, 2)
    assert d.answer == 1  # 1 and 2 both have 2 votes in the pool; 1 came first


def test_none_answers_never_agree():
    d = control({"easy": [None, None], "medium": [None] * 3, "hard": [None] * 5})
    assert (d.exit_tier, d.answer, d.top_votes) == ("fallback", None, 0)
    assert control({"easy": [None, 4], "medium": [4, 4, None]}).exit_tier == "medium"


def test_short_draws_count_as_failed_calls():
    d = control({"easy": [3]})
    assert d.calls == 10 and d.votes["easy"] == [3, None] and d.answer == 3


def test_custom_equivalence():
    d = control({"easy": ["1/2", "0.5"]}, equiv=lambda a, b: float(eval(a)) == float(eval(b)))
    assert d.exit_tier == "easy"


def test_gate_rules():
    assert gate(TierSpec("t", 3, "majority"), [1, 1, 2]) == (1, 2)
    assert gate(TierSpec("t", 4, "majority"), [1, 1, 2, 3]) is None
    assert gate(TierSpec("t", 2, "unanimous"), [1, None]) is None
    assert gate(TierSpec("t", 5, "plurality", 3), [1, 1, 2, 3, 4]) is None


def test_cluster_and_majority_vote():
    assert cluster([2, None, 3, 2]) == [(2, [0, 3]), (3, [2])]
    assert majority_vote([5, 6, 6, None]) == 6 and majority_vote([None]) is None


@given(attempts, st.booleans())
@settings(max_examples=150, deadline=None)
def test_calls_follow_the_schedule(att, pooled):
    sch = Schedule(pooled=pooled)
    d = control(att, sch)
    assert d.calls <= sch.max_calls == 10
    assert d.calls == sch.exit_calls()[d.exit_tier]
    assert list(d.votes) == ["easy", "medium", "hard"][: min(3, tier_index(d.exit_tier) + 1)]


@given(attempts)
@settings(max_examples=150, deadline=None)
def test_answer_is_one_of_the_votes_and_gates_hold(att):
    d = control(att)
    pool = [a for v in d.votes.values() for a in v if a is not None]
    assert (d.answer is None) == (not pool)
    if d.answer is not None:
        assert d.answer in pool
    if d.exit_tier == "easy":
        assert att["easy"][0] == att["easy"][1] is not None
    else:
        assert not (att["easy"][0] == att["easy"][1] is not None)
    if d.exit_tier in ("medium", "hard"):
        assert d.votes[d.exit_tier].count(d.answer) >= 2


@given(attempts, st.integers(0, 9))
@settings(max_examples=150, deadline=None)
def test_more_agreement_never_delays_the_exit(att, pos):
    """Replacing one reached attempt by its tier's leading answer never makes the exit later."""
    d = control(att)
    flat = [(t, i) for t in ("easy", "medium", "hard") for i in range(len(att[t]))]
    tier, i = flat[pos]
    if tier not in d.votes:
        return
    leader = majority_vote(att[tier])
    if leader is None:
        return
    att2 = {t: list(v) for t, v in att.items()}
    att2[tier][i] = leader
    assert tier_index(control(att2).exit_tier) <= tier_index(d.exit_tier)


@given(attempts)
@settings(max_examples=100, deadline=None)
def test_unanimity_everywhere_exits_easy_with_two_calls(att):
    a = att["easy"][0] if att["easy"][0] is not None else 0
    d = control({t: [a] * len(v) for t, v in att.items()})
    assert (d.exit_tier, d.answer, d.calls) == ("easy", a, 2)


def test_default_schedule_matches_the_paper():
    assert [(t.name, t.attempts, t.rule) for t in DEFAULT_SCHEDULE.tiers] == [
        ("easy", 2, "unanimous"),
        ("medium", 3, "majority"),
        ("hard", 5, "plurality"),
    ]
    assert DEFAULT_SCHEDULE.exit_calls() == {"easy": 2, "medium": 5, "hard": 10, "fallback": 10}
