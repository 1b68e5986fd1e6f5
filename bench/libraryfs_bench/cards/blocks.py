"""Per-block evidence on champ-dataset's recorded answers: did a block's cards help or hurt? (KACE §2)

A block is (tier, domain), tier ∈ {medium, hard}. The replay (:mod:`libraryfs_bench.cards.replay`) draws a
problem's medium and hard attempts from the answers recorded with its concepts in the prompt (the block's
cards); *without the block's cards* that tier draws from the no-card answers instead (the easy tier and the
other tier unchanged, same shuffles). Per problem the accuracy of the tiered controller is averaged over the
shuffles; a block's effect is the mean over its domain's problems of (with − without), with a percentile
bootstrap 95% interval over problems (paired). Verdict: *helps* if the interval is above 0, *hurts* if
below, else *no evidence*.

Honest evaluation: the problems are split into a tuning and a held-out part **before** anything is looked
at, by a hash of the problem id (:func:`split`). Pruning policies are chosen on the tuning part and scored on
the held-out part, beside tiered without any cards and Best-of-N at equal calls, all in the same run.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from typing import Any

from libraryfs.features.cards.controller import DEFAULT_SCHEDULE, Schedule, control, majority_vote
from libraryfs_bench.cards.replay import draws, same_class

SPLIT_SALT = "libraryfs-cards-split-v1"
HELD_SHARE = 0.5
CARD_TIERS = ("medium", "hard")
#: Configurations of the replay: name → tiers whose cards are off.
CONFIGS: dict[str, frozenset[str]] = {
    "all": frozenset(),
    "-medium": frozenset({"medium"}),
    "-hard": frozenset({"hard"}),
    "none": frozenset({"medium", "hard"}),
}


def split(records: list[dict], held_share: float = HELD_SHARE, salt: str = SPLIT_SALT) -> tuple[list, list]:
    """(tuning, held-out): a problem is held out iff ``sha256(salt + ":" + id) mod 10_000 < held_share·10_000``.

    Depends on the problem id only (not on answers or order), so it is fixed before any tuning."""
    tune, held = [], []
    for r in records:
        h = int(hashlib.sha256(f"{salt}:{r['id']}".encode()).hexdigest(), 16) % 10_000
        (held if h < held_share * 10_000 else tune).append(r)
    return tune, held


def config_of(off: frozenset[str]) -> str:
    """The :data:`CONFIGS` name of a set of tiers whose cards are off."""
    return next(k for k, v in CONFIGS.items() if v == frozenset(off))


def per_problem(rec: dict, seeds: int, schedule: Schedule = DEFAULT_SCHEDULE) -> dict[str, Any]:
    """One problem over ``seeds`` shuffles: mean accuracy and calls per :data:`CONFIGS` entry, the share of
    shuffles reaching each card tier (all cards on), and Best-of-n accuracy (no cards) for n = 1..12."""
    acc = dict.fromkeys(CONFIGS, 0.0)
    calls = dict.fromkeys(CONFIGS, 0.0)
    reach = dict.fromkeys(CARD_TIERS, 0.0)
    bon = [0.0] * len(rec["no_card"])
    for s in range(seeds):
        nc, wc = draws(rec, s)
        for name, off in CONFIGS.items():
            medium = nc[2:5] if "medium" in off else wc[:3]
            hard = nc[5:10] if "hard" in off else wc[3:8]
            d = control({"easy": nc[:2], "medium": medium, "hard": hard}, schedule, same_class)
            acc[name] += d.answer == 0
            calls[name] += d.calls
            if name == "all":
                reach["medium"] += d.exit_tier != "easy"
                reach["hard"] += d.exit_tier in ("hard", "fallback")
        for n in range(1, len(nc) + 1):
            bon[n - 1] += majority_vote(nc[:n], same_class) == 0
    k = float(seeds)
    return {
        "id": rec["id"],
        "domain": rec["domain"],
        "acc": {c: v / k for c, v in acc.items()},
        "calls": {c: v / k for c, v in calls.items()},
        "reach": {t: v / k for t, v in reach.items()},
        "bon": [v / k for v in bon],
    }


def bootstrap_ci(
    values: Sequence[float], reps: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (resampling the values, ``reps`` times)."""
    if not values:
        return (math.nan, math.nan)
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(reps))
    lo = means[int((1 - level) / 2 * reps)]
    hi = means[min(reps - 1, int((1 + level) / 2 * reps))]
    return (lo, hi)


def _verdict(lo: float, hi: float) -> str:
    return "helps" if lo > 0 else "hurts" if hi < 0 else "no evidence"


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def compare(probs: list[dict], a: list[float], b: list[float]) -> dict[str, Any]:
    """Paired comparison of two per-problem accuracy lists: means, difference, its interval, verdict."""
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    lo, hi = bootstrap_ci(diffs)
    return {
        "n": len(probs),
        "with": _mean(a),
        "without": _mean(b),
        "diff": _mean(diffs),
        "ci": [lo, hi],
        "verdict": _verdict(lo, hi) if diffs else "no evidence",
    }


def block_table(probs: list[dict]) -> list[dict[str, Any]]:
    """One row per block (tier × domain) plus one per tier over all domains: the effect of its cards."""
    rows = []
    domains = sorted({p["domain"] for p in probs})
    for dom in [*domains, "all"]:
        sub = [p for p in probs if dom in ("all", p["domain"])]
        for tier in CARD_TIERS:
            row = compare(sub, [p["acc"]["all"] for p in sub], [p["acc"][f"-{tier}"] for p in sub])
            row.update(block=f"{tier}/{dom}", reach=_mean([p["reach"][tier] for p in sub]))
            rows.append(row)
    return rows


def _bon_equal_calls(p: dict, mean_calls: float) -> float:
    lo = max(1, min(len(p["bon"]), math.floor(mean_calls)))
    hi = max(1, min(len(p["bon"]), math.ceil(mean_calls)))
    return p["bon"][lo - 1] + (mean_calls - lo) * (p["bon"][hi - 1] - p["bon"][lo - 1])


def policy_scores(probs: list[dict], policies: dict[str, dict[str, frozenset[str]]]) -> list[dict[str, Any]]:
    """Each policy (domain → tiers whose cards are off) on ``probs``: accuracy, mean calls, the paired
    difference against Best-of-N without cards at the policy's own mean calls (interpolated), and
    ``vs_all``: the paired difference against tiered with all cards."""
    out = []
    all_cards = [p["acc"]["all"] for p in probs]
    for name, off in policies.items():
        acc = [p["acc"][config_of(off.get(p["domain"], frozenset()))] for p in probs]
        calls = _mean([p["calls"][config_of(off.get(p["domain"], frozenset()))] for p in probs])
        bon = [_bon_equal_calls(p, calls) for p in probs]
        row = compare(probs, acc, bon)
        row.update(method=name, calls=calls, pruned=sorted(f"{t}/{d}" for d, ts in off.items() for t in ts))
        vs = compare(probs, acc, all_cards)
        row["vs_all"] = {"diff": vs["diff"], "ci": vs["ci"]}
        out.append(row)
    return out


def block_report(records: list[dict], seeds: int = 50, held_share: float = HELD_SHARE) -> dict[str, Any]:
    """Split, per-block tables of both parts, and held-out scores of pruning policies chosen on tuning."""
    tune_recs, held_recs = split(records, held_share)
    tune = [per_problem(r, seeds) for r in tune_recs]
    held = [per_problem(r, seeds) for r in held_recs]
    tune_rows = block_table(tune)
    domains = sorted({p["domain"] for p in tune + held})
    everything = frozenset(CARD_TIERS)

    def pruned(rule) -> dict[str, frozenset[str]]:
        out: dict[str, set[str]] = {}
        for row in tune_rows:
            tier, dom = row["block"].split("/")
            if dom != "all" and rule(row):
                out.setdefault(dom, set()).add(tier)
        return {d: frozenset(v) for d, v in out.items()}

    policies = {
        "tiered, all cards": {},
        "tiered, no cards": dict.fromkeys(domains, everything),
        "pruned where tuning verdict is hurts": pruned(lambda r: r["verdict"] == "hurts"),
        "pruned where tuning diff < 0": pruned(lambda r: r["diff"] < 0),
    }
    return {
        "split": {"salt": SPLIT_SALT, "held_share": held_share, "tuning": len(tune), "held_out": len(held)},
        "seeds": seeds,
        "blocks": {"tuning": tune_rows, "held_out": block_table(held)},
        "policies": {"tuning": policy_scores(tune, policies), "held_out": policy_scores(held, policies)},
    }


def _ci(row: dict) -> str:
    return f"{row['diff']:+.3f} [{row['ci'][0]:+.3f}, {row['ci'][1]:+.3f}]"


def format_blocks(rows: list[dict]) -> str:
    """A per-block table as fixed-width text."""
    lines = [f"{'block':<22}{'n':>4}{'reach':>7}{'with':>7}{'without':>9}  {'diff [95% CI]':<26}verdict"]
    for r in rows:
        lines.append(
            f"{r['block']:<22}{r['n']:>4}{r['reach']:>7.2f}{r['with']:>7.3f}{r['without']:>9.3f}  "
            f"{_ci(r):<26}{r['verdict']}"
        )
    return "\n".join(lines)


def format_policies(rows: list[dict]) -> str:
    """Policy scores (accuracy, calls, Best-of-N at equal calls, difference) as fixed-width text."""
    lines = [
        f"{'method':<38}{'accuracy':>9}{'calls':>7}{'BoN=':>7}  {'- BoN= [95% CI]':<26}- all cards [95% CI]"
    ]
    for r in rows:
        lines.append(
            f"{r['method']:<38}{r['with']:>9.3f}{r['calls']:>7.2f}{r['without']:>7.3f}  {_ci(r):<26}"
            f"{_ci(r['vs_all'])}"
        )
        if r["pruned"] and r["method"].startswith("pruned"):
            lines.append(f"{'':<4}pruned: {', '.join(r['pruned'])}")
    return "\n".join(lines)


def format_report(rep: dict) -> str:
    """The whole per-block report as text."""
    sp = rep["split"]
    out = [
        f"split by sha256(\"{sp['salt']}:\" + problem id): tuning {sp['tuning']}, held-out {sp['held_out']}"
        f" problems; {rep['seeds']} shuffles each",
    ]
    for part in ("tuning", "held_out"):
        out += [
            "",
            f"per-block effect of the cards, {part.replace('_', '-')} part:",
            format_blocks(rep["blocks"][part]),
        ]
    for part in ("tuning", "held_out"):
        out += ["", f"methods vs Best-of-N (no cards) at equal calls, {part.replace('_', '-')} part:"]
        out.append(format_policies(rep["policies"][part]))
    return "\n".join(out)
