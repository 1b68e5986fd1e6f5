"""Tiered self-consistency as a pure function: answers in → exit tier, final answer, calls out (KACE §2).

Schedule (PAPERS.md §2):

=========  ========  ==========================================  ====================================
tier       attempts  exit gate                                    cards read (cards.block_paths)
=========  ========  ==========================================  ====================================
easy       2         2/2 agree (unanimous)                        none
medium     3         a 2/3 majority (> half of the 3)             (medium, domain) + universal
hard       5         a unique plurality of at least 2/5           (hard, domain) + universal
fallback   0 more    plurality over the pool of all 10 attempts   —
=========  ========  ==========================================  ====================================

**Decision: earlier tiers' votes are *not* pooled in the gates; the fallback *is* the pool.** Each gate
counts only the attempts of its own tier, because each tier samples from a different context (no cards,
then the medium block, then the hard block): a 1-1 split without cards says nothing about agreement under
the hard cards, and pooling would let two stale easy votes outvote the card-informed ones. The fallback
"pool of 10" is exactly the 2 + 3 + 5 attempts already made, so it costs no extra call and the worst case is
10 calls. ``Schedule(pooled=True)`` is the ablation (every gate counts all attempts so far, with the same
rule applied to the grown pool); ``bench/cards_sim.py`` measures both: pooled gates are stricter (the medium
gate then needs 3 of 5), exit later and spend 0.2–0.7 more calls per problem for an accuracy change within
about ±1.5 points — not worth the calls (docs/cards.md).

Answers are opaque values compared with an equivalence function (``answers.equivalent`` for text, ``==``
by default); ``None`` is "no answer extracted" and never agrees with anything. Ties in the fallback are
broken by the earliest first occurrence, so the function is deterministic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

Equiv = Callable[[Any, Any], bool]


@dataclasses.dataclass(frozen=True)
class TierSpec:
    """One tier: ``attempts`` fresh calls, then a gate ``rule`` (unanimous | majority | plurality)
    that needs at least ``min_votes`` agreeing answers."""

    name: str
    attempts: int
    rule: str
    min_votes: int = 2


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The tier schedule; ``pooled`` makes every gate count all attempts so far (ablation)."""

    tiers: tuple[TierSpec, ...] = (
        TierSpec("easy", 2, "unanimous"),
        TierSpec("medium", 3, "majority"),
        TierSpec("hard", 5, "plurality"),
    )
    pooled: bool = False

    @property
    def max_calls(self) -> int:
        """Worst-case solver calls (the fallback adds none): 10 for the default."""
        return sum(t.attempts for t in self.tiers)

    def exit_calls(self) -> dict[str, int]:
        """Calls spent when exiting at each tier: ``{"easy": 2, "medium": 5, "hard": 10, "fallback": 10}``."""
        out, total = {}, 0
        for t in self.tiers:
            total += t.attempts
            out[t.name] = total
        out["fallback"] = total
        return out


DEFAULT_SCHEDULE = Schedule()


@dataclasses.dataclass
class Decision:
    """Result of one controlled solve. ``votes[tier]`` are that tier's answers in draw order."""

    exit_tier: str
    answer: Any
    calls: int
    votes: dict[str, list[Any]]
    top_votes: int  # size of the winning cluster in the deciding gate (0 if no answer)


def _eq(a: Any, b: Any) -> bool:
    return a is not None and b is not None and a == b


def cluster(answers: Sequence[Any], equiv: Equiv = _eq) -> list[tuple[Any, list[int]]]:
    """Group answers into equivalence classes, in order of first occurrence.

    Returns ``[(representative, [indices])]``; ``None`` answers are left out. Greedy against each class's
    first member (``equiv`` should be an equivalence; math-verify's is close enough).
    """
    groups: list[tuple[Any, list[int]]] = []
    for i, a in enumerate(answers):
        if a is None:
            continue
        for rep, idx in groups:
            if equiv(rep, a):
                idx.append(i)
                break
        else:
            groups.append((a, [i]))
    return groups


def gate(spec: TierSpec, answers: Sequence[Any], equiv: Equiv = _eq) -> tuple[Any, int] | None:
    """Apply one tier's exit gate to ``answers`` (the votes it counts).

    Returns ``(answer, votes_for_it)`` on exit, ``None`` to escalate. unanimous: every vote agrees and
    there are ≥ ``min_votes``; majority: more than half of the votes; plurality: a unique largest class of
    ≥ ``min_votes``.
    """
    groups = cluster(answers, equiv)
    if not groups:
        return None
    sizes = sorted((len(idx) for _, idx in groups), reverse=True)
    rep, idx = max(groups, key=lambda g: len(g[1]))  # max() keeps the first of equal sizes
    top, n = len(idx), len(answers)
    if top < spec.min_votes:
        return None
    if spec.rule == "unanimous":
        ok = top == n
    elif spec.rule == "majority":
        ok = 2 * top > n
    elif spec.rule == "plurality":
        ok = len(sizes) == 1 or sizes[1] < top
    else:
        raise ValueError(f"unknown gate rule {spec.rule!r}")
    return (rep, top) if ok else None


def run(
    draw: Callable[[str, int], Sequence[Any]],
    schedule: Schedule = DEFAULT_SCHEDULE,
    equiv: Equiv = _eq,
) -> Decision:
    """Drive the tiers: ``draw(tier_name, k)`` returns the ``k`` answers of that tier's fresh attempts.

    ``draw`` is called at most once per tier, in schedule order, and only while no gate has exited; a
    ``draw`` that returns fewer than ``k`` answers is padded with ``None`` (failed calls). Calls counted =
    attempts requested. Pure if ``draw`` is.
    """
    votes: dict[str, list[Any]] = {}
    pool: list[Any] = []
    calls = 0
    for spec in schedule.tiers:
        got = list(draw(spec.name, spec.attempts))[: spec.attempts]
        got += [None] * (spec.attempts - len(got))
        calls += spec.attempts
        votes[spec.name] = got
        pool += got
        hit = gate(spec, pool if schedule.pooled else got, equiv)
        if hit is not None:
            return Decision(spec.name, hit[0], calls, votes, hit[1])
    groups = cluster(pool, equiv)
    if not groups:
        return Decision("fallback", None, calls, votes, 0)
    rep, idx = max(groups, key=lambda g: len(g[1]))
    return Decision("fallback", rep, calls, votes, len(idx))


def control(
    attempts: Mapping[str, Sequence[Any]],
    schedule: Schedule = DEFAULT_SCHEDULE,
    equiv: Equiv = _eq,
) -> Decision:
    """:func:`run` over pre-drawn answers: ``attempts[tier]`` lists the answers that tier would get
    (at least its attempt count if it is reached; missing entries count as failed calls)."""
    return run(lambda tier, k: list(attempts.get(tier, ()))[:k], schedule, equiv)


def tier_index(name: str) -> int:
    """Escalation order of a tier name: easy 0, medium 1, hard 2, fallback 3."""
    return ("easy", "medium", "hard", "fallback").index(name)


def majority_vote(answers: Sequence[Hashable | Any], equiv: Equiv = _eq) -> Any:
    """Best-of-N self-consistency: the plurality answer (ties → earliest), ``None`` if no answers."""
    groups = cluster(answers, equiv)
    return max(groups, key=lambda g: len(g[1]))[0] if groups else None
