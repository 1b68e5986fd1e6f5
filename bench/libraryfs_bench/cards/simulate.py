"""Monte-Carlo comparison of tiered self-consistency with Best-of-N at equal expected calls (KACE §2).

Model of a problem set (no LLM): problem *i* has a solve probability ``p_i`` per attempt without cards,
drawn from ``Beta(alpha, beta)``; attempts that read cards solve with ``p_i + card_lift · (1 − p_i)``. A
wrong attempt returns one of ``n_wrong`` distractor answers with weights ∝ ``spread**k`` (spread → 0: wrong
answers pile onto one distractor, the hard case for voting; spread → 1: they scatter). Answer 0 is correct.

Compared, on the same problems and seeds: tiered (controller.run, fresh gates — the default), tiered with
pooled gates (the ablation), Best-of-N (plurality of N attempts without cards) for N = floor and ceil of
tiered's mean calls and a randomised mix of the two whose expected calls equal tiered's exactly, and
Best-of-5. Also the pairwise concordance of the exit tier with the true solve probability.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter

from libraryfs.features.cards.controller import DEFAULT_SCHEDULE, Schedule, majority_vote, run, tier_index


@dataclasses.dataclass
class SimConfig:
    """Parameters of one simulated problem set (see module docstring)."""

    n_problems: int = 2000
    seeds: int = 5
    alpha: float = 0.6
    beta: float = 0.6
    card_lift: float = 0.0
    spread: float = 0.5
    n_wrong: int = 12
    seed: int = 0


def _sampler(rng: random.Random, p: float, cfg: SimConfig):
    weights = [cfg.spread**k for k in range(cfg.n_wrong)]

    def one(with_cards: bool) -> int:
        q = p + cfg.card_lift * (1 - p) if with_cards else p
        if rng.random() < q:
            return 0
        return 1 + rng.choices(range(cfg.n_wrong), weights)[0]

    return one


def concordance(levels: list[float], solve_rates: list[float]) -> tuple[float, int]:
    """Pairwise concordance: among pairs with different level and different solve rate, the fraction
    where the lower level (earlier exit) has the higher solve rate. Returns ``(fraction, pairs)``;
    ``(nan, 0)`` when no pair qualifies. O(n²) pairs — fine for a few thousand problems."""
    good = total = 0
    n = len(levels)
    for i in range(n):
        for j in range(i + 1, n):
            dl, dr = levels[i] - levels[j], solve_rates[i] - solve_rates[j]
            if dl == 0 or dr == 0:
                continue
            total += 1
            good += (dl < 0) == (dr > 0)
    return (good / total if total else math.nan), total


def simulate(cfg: SimConfig, schedule: Schedule = DEFAULT_SCHEDULE) -> dict:
    """Run the comparison; returns a JSON-able dict of methods → accuracy / mean calls, the exit-tier
    histogram and the concordance (fractions in [0, 1], calls per problem)."""
    rng = random.Random(cfg.seed)
    ps = [rng.betavariate(cfg.alpha, cfg.beta) for _ in range(cfg.n_problems)]
    pooled = dataclasses.replace(schedule, pooled=True)
    acc: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    hist: Counter[str] = Counter()
    level_sum = [0.0] * cfg.n_problems
    runs = cfg.n_problems * cfg.seeds
    tier_cards = {t.name: t.name != "easy" for t in schedule.tiers}
    for s in range(cfg.seeds):
        for i, p in enumerate(ps):
            one = _sampler(random.Random(hash((cfg.seed, 0, s, i))), p, cfg)
            for name, sch in (("tiered", schedule), ("tiered-pooled", pooled)):
                d = run(lambda tier, k, one=one: [one(tier_cards[tier]) for _ in range(k)], sch)
                acc[name] += d.answer == 0
                calls[name] += d.calls
                if name == "tiered":
                    hist[d.exit_tier] += 1
                    level_sum[i] += tier_index(d.exit_tier)
    mean_calls = calls["tiered"] / runs
    lo, hi = math.floor(mean_calls), math.ceil(mean_calls)
    frac_hi = mean_calls - lo
    for s in range(cfg.seeds):
        for i, p in enumerate(ps):
            r = random.Random(hash((cfg.seed, 1, s, i)))
            one = _sampler(r, p, cfg)
            draws = [one(False) for _ in range(max(hi, 5))]
            for name, n in {f"best-of-{n}": n for n in (lo, hi, 5)}.items():
                acc[name] += majority_vote(draws[:n]) == 0
                calls[name] += n
            n_mix = hi if r.random() < frac_hi else lo
            acc["best-of-N (equal calls)"] += majority_vote(draws[:n_mix]) == 0
            calls["best-of-N (equal calls)"] += n_mix
    conc, pairs = concordance([lv / cfg.seeds for lv in level_sum], ps)
    methods = {m: {"accuracy": acc[m] / runs, "mean_calls": calls[m] / runs} for m in acc}
    return {
        "config": dataclasses.asdict(cfg),
        "methods": methods,
        "exit_histogram": {t: hist[t] / runs for t in ("easy", "medium", "hard", "fallback")},
        "concordance": conc,
        "concordance_pairs": pairs,
        "oracle_single_attempt": sum(ps) / len(ps),
    }


def format_table(result: dict) -> str:
    """The simulator's result as a fixed-width text table."""
    lines = [f"{'method':<26}{'accuracy':>10}{'mean calls':>12}"]
    for name, m in result["methods"].items():
        lines.append(f"{name:<26}{m['accuracy']:>10.3f}{m['mean_calls']:>12.2f}")
    h = result["exit_histogram"]
    lines.append("exit tiers: " + "  ".join(f"{t} {v:.1%}" for t, v in h.items()))
    lines.append(
        f"exit-tier/solve-rate pairwise concordance: {result['concordance']:.3f}"
        f" over {result['concordance_pairs']} pairs"
    )
    return "\n".join(lines)
