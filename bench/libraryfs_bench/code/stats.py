"""Statistics of the routing evaluation: Wilson intervals, exact McNemar, Spearman's ρ, a cluster bootstrap.

Pure Python (no numpy): every figure in docs/code.md is reproducible from the tasks file alone.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Sequence


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials (95% by default). (0, 1) when n = 0."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for discordant counts b (A wrong, B right) and c (A right, B wrong)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def _ranks(xs: Sequence[float]) -> list[float]:
    """Average ranks (ties share the mean of their positions), 0-based."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation (Pearson's r of the average ranks; ties handled). ``None`` when either
    side is constant or there are fewer than 3 pairs."""
    if len(xs) != len(ys):
        raise ValueError("spearman: sequences of different lengths")
    if len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    if vx == 0 or vy == 0:
        return None
    return cov / math.sqrt(vx * vy)


def cluster_bootstrap(
    keys: Sequence[Hashable],
    a_wrong: Sequence[bool],
    b_wrong: Sequence[bool],
    iters: int = 2000,
    seed: int = 0,
) -> dict:
    """Percentile 95% intervals of two routers' misrouting rates (A, B) and of their difference (A − B),
    resampling whole clusters (``keys[i]`` is task i's cluster) with replacement ``iters`` times. Wider than
    Wilson's when tasks inside a cluster are alike. Fewer than 2 clusters: the intervals are ``None``."""
    groups: dict[Hashable, list[int]] = {}
    for k, a, b in zip(keys, a_wrong, b_wrong, strict=True):
        g = groups.setdefault(k, [0, 0, 0])
        g[0] += 1
        g[1] += bool(a)
        g[2] += bool(b)
    sums = list(groups.values())
    if len(sums) < 2:
        return {"clusters": len(sums), "a95": None, "b95": None, "diff95": None}
    rng = random.Random(seed)
    a_rates, b_rates, diffs = [], [], []
    for _ in range(iters):
        n = aw = bw = 0
        for g in rng.choices(sums, k=len(sums)):
            n += g[0]
            aw += g[1]
            bw += g[2]
        a_rates.append(aw / n)
        b_rates.append(bw / n)
        diffs.append((aw - bw) / n)

    def pct(xs: list[float]) -> tuple[float, float]:
        xs.sort()
        return xs[int(0.025 * (len(xs) - 1))], xs[int(math.ceil(0.975 * (len(xs) - 1)))]

    return {"clusters": len(sums), "a95": pct(a_rates), "b95": pct(b_rates), "diff95": pct(diffs)}
