"""Coarse domain classifier by keyword rules (KACE §2: the domain axis of a block).

Deterministic: each domain has weighted keyword patterns; the domain with the highest total wins, ties go
to the earlier domain in :data:`RULES`; no hit → ``algebra``. Measured on champ-dataset's 270 problems
(5 domains) by ``bench/cards_replay.py`` (docs/cards.md).
"""

from __future__ import annotations

import re

#: domain → [(regex, weight)]. Order matters for ties.
RULES: dict[str, list[tuple[str, float]]] = {
    "geometry": [
        (
            (
                r"\b(triangle|circle|angle|polygon|radius|diameter|perimeter|area|tangent|chord|circumcircle|"
                r"incircle|quadrilateral|square|rectangle|parallelogram|trapezoid|segment|perpendicular|"
                r"parallel|vertex|vertices|hexagon|pentagon|sphere|cube|volume)\b"
            ),
            1.0,
        ),
    ],
    "combinatorics": [
        (
            (
                r"\b(how many|number of ways|ways to|strings?|arrangements?|permutations?|combinations?|"
                r"subsets?|choose|select|committee|colou?r(ing|ed|s)?|graph|paths?|grid|tournament|"
                r"pigeonhole|probability|seats?|dice|cards|chess|rooks?|objects|distinct)\b"
            ),
            1.0,
        ),
    ],
    "number-theory": [
        (
            (
                r"\b(prime|primes|divisible|divides|divisor|divisors|gcd|lcm|modulo|mod|remainder|integers?|"
                r"digits?|congruen\w*|coprime|relatively prime|perfect square|factorial|odd|even|"
                r"positive integer|natural number)\b"
            ),
            1.0,
        ),
        (r"\\equiv|\\pmod|\\mid", 1.5),
    ],
    "inequality": [
        (
            (
                r"\b(inequality|prove that .*(≥|≤|>=|<=)|maximum|minimum|max|min|largest|smallest|at least|"
                r"at most|non-?negative reals?|positive reals?|real numbers? [a-z], [a-z])\b"
            ),
            1.0,
        ),
        (r"≥|≤|>=|<=|\\ge|\\le", 1.5),
    ],
    "polynomial": [
        (r"\b(polynomials?|roots?|coefficients?|degree|quadratic|cubic|monic|factori[sz]e|zeros?)\b", 1.5),
        (r"\b[pfq]\(x\)|x\^\d", 1.0),
    ],
    "sequence": [
        (
            (
                r"\b(sequences?|series|terms?|recurrence|recursive|a_n|a_\{n|a_1|fibonacci|converge\w*|limit|"
                r"arithmetic progression|geometric progression|bounded)\b"
            ),
            1.5,
        ),
        (r"a_\{?n\+1\}?|x_\{?n\+1\}?", 1.5),
    ],
    "algebra": [
        (r"\b(equations?|solve|system|functions?|real numbers?|variables?|expression|simplify)\b", 0.5),
    ],
}
DEFAULT_DOMAIN = "algebra"
_COMPILED = {d: [(re.compile(p, re.IGNORECASE), w) for p, w in rules] for d, rules in RULES.items()}


def scores(problem: str) -> dict[str, float]:
    """Keyword score of every domain for a problem text (sum of weight × number of matches)."""
    return {d: sum(w * len(rx.findall(problem)) for rx, w in rules) for d, rules in _COMPILED.items()}


def classify(problem: str) -> str:
    """The problem's coarse domain slug (one of :data:`RULES`' keys)."""
    s = scores(problem)
    best = max(s.values())
    if best <= 0:
        return DEFAULT_DOMAIN
    return next(d for d in RULES if s[d] == best)
