"""Trace evidence for REFINE: what the solver's traces show about single cards (KACE §2 "REFINE").

The solver reads whole blocks, so a trace that failed while reading 21 cards says nothing about which of
them was at fault. REFINE therefore acts only on *comparisons of readings of the same problem*:

* A **reading** is one tier record of a trace: the problem, the exact set of cards in the prompt (paths,
  followed through the audit log's moves), the tier, and how many of its attempts were right against the
  gold answer (an attempt's own ``correct`` if recorded, else ``answers.equivalent(gold, answer)``; attempts
  whose call failed are left out). Readings with the same problem, card set and tier are pooled. A reading
  *succeeded* when more than half its attempts were right, *failed* when fewer than half were; a tie is
  neither. Traces without a gold answer and without per-attempt ``correct`` give no reading.
* **Hurt / help of a card** (per problem, then summed): a failed reading R and a succeeded reading R' of the
  same problem with different card sets differ by D = R △ R'. Each card in R − R' (present when it failed,
  absent when it succeeded) gets hurt evidence 1/|D| on that problem; each card in R' − R gets help
  evidence 1/|D|. Per problem a card keeps its largest weight. One card swapped alone (|D| = 1) scores 1 per
  problem; three failed problems that read a 21-card block against the no-card easy tier give each card
  3/21 — never a demotion (REFINE demotes at net hurt ≥ ``min_evidence``, default 3).
* **Substitution of two cards A, B** (interchangeable use, per problem): a succeeded reading with A and
  not B, a succeeded reading with B and not A, and a failed reading with neither — each card alone was
  enough, and without both the problem failed. Weight 2/|R_A △ R_B| (1 for a pure swap). Contra-evidence:
  the A-only and B-only readings of a problem disagree (one succeeded, the other failed). Shared words or
  boilerplate are never evidence.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import defaultdict
from collections.abc import Callable
from itertools import combinations
from typing import Any

Equiv = Callable[[Any, Any], bool]


def trace_key(trace: dict[str, Any]) -> str:
    """A stable id of one trace: 16 hex digits of the SHA-256 of its canonical JSON."""
    blob = json.dumps(trace, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]


def problem_key(trace: dict[str, Any]) -> str:
    """The problem a trace is about: its ``problem_id``, else a hash of the problem text."""
    if trace.get("problem_id"):
        return str(trace["problem_id"])
    return "text:" + hashlib.sha256(str(trace.get("problem", "")).encode()).hexdigest()[:16]


@dataclasses.dataclass
class Reading:
    """Attempts of one problem under one card set (paths) at one tier; ``right`` of ``total`` correct."""

    problem: str
    domain: str
    tier: str
    cards: frozenset[str]
    right: int = 0
    total: int = 0

    @property
    def succeeded(self) -> bool:
        """More than half of the attempts were right."""
        return 2 * self.right > self.total

    @property
    def failed(self) -> bool:
        """Fewer than half of the attempts were right."""
        return 2 * self.right < self.total


def _attempt_right(att: dict[str, Any], gold: Any, equiv: Equiv) -> bool | None:
    if att.get("error"):
        return None
    if isinstance(att.get("correct"), bool):
        return att["correct"]
    if gold is None:
        return None
    return att.get("answer") is not None and bool(equiv(gold, att["answer"]))


def readings(traces: list[dict[str, Any]], moved: dict[str, str], equiv: Equiv) -> list[Reading]:
    """Pool the traces' tier records into readings (see module docstring), in first-seen order."""
    pooled: dict[tuple[str, str, frozenset[str]], Reading] = {}
    for t in traces:
        prob = problem_key(t)
        for rec in t.get("tiers", []):
            cards = frozenset(moved.get(p, p) for p in rec.get("cards", []))
            outcomes = [_attempt_right(a, t.get("gold"), equiv) for a in rec.get("attempts", [])]
            outcomes = [o for o in outcomes if o is not None]
            if not outcomes:
                continue
            key = (prob, rec.get("tier", ""), cards)
            r = pooled.setdefault(key, Reading(prob, t.get("domain", ""), rec.get("tier", ""), cards))
            r.right += sum(outcomes)
            r.total += len(outcomes)
    return list(pooled.values())


def _by_problem(rs: list[Reading]) -> dict[str, list[Reading]]:
    out: dict[str, list[Reading]] = defaultdict(list)
    for r in rs:
        out[r.problem].append(r)
    return out


@dataclasses.dataclass
class CardEvidence:
    """Summed per-problem evidence of one card (units: problems, fractional by the size of the difference).

    ``by_domain[d] = [hurt, help]``; ``help_tiers[(d, tier)]``: help evidence per domain and tier of the
    succeeded reading."""

    hurt: float = 0.0
    help: float = 0.0
    by_domain: dict[str, list[float]] = dataclasses.field(
        default_factory=lambda: defaultdict(lambda: [0.0, 0.0])
    )
    help_tiers: dict[tuple[str, str], float] = dataclasses.field(default_factory=lambda: defaultdict(float))

    @property
    def net_hurt(self) -> float:
        """Hurt minus help evidence."""
        return self.hurt - self.help


def card_evidence(rs: list[Reading]) -> dict[str, CardEvidence]:
    """Hurt/help evidence of every card that differs between a failed and a succeeded reading of a problem."""
    out: dict[str, CardEvidence] = defaultdict(CardEvidence)
    for group in _by_problem(rs).values():
        hurt: dict[str, float] = {}
        helped: dict[str, tuple[float, str]] = {}
        for bad in (r for r in group if r.failed):
            for good in (r for r in group if r.succeeded):
                diff = bad.cards ^ good.cards
                if not diff:
                    continue
                w = 1.0 / len(diff)
                for c in bad.cards - good.cards:
                    hurt[c] = max(hurt.get(c, 0.0), w)
                for c in good.cards - bad.cards:
                    if w > helped.get(c, (0.0, ""))[0]:
                        helped[c] = (w, good.tier)
        dom = group[0].domain
        for c, w in hurt.items():
            out[c].hurt += w
            out[c].by_domain[dom][0] += w
        for c, (w, tier) in helped.items():
            out[c].help += w
            out[c].by_domain[dom][1] += w
            out[c].help_tiers[(dom, tier)] += w
    return dict(out)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0]


def substitutions(rs: list[Reading]) -> dict[tuple[str, str], list[float]]:
    """Interchangeable-use evidence of card pairs of one directory: ``{(a, b): [support, contra]}``, a < b.

    See the module docstring; per problem a pair keeps its largest support and its largest contra weight.
    """
    out: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for group in _by_problem(rs).values():
        support: dict[tuple[str, str], float] = {}
        contra: dict[tuple[str, str], float] = {}
        for ra, rb in combinations(group, 2):
            if not (ra.succeeded or ra.failed) or not (rb.succeeded or rb.failed):
                continue
            diff = ra.cards ^ rb.cards
            only_a, only_b = ra.cards - rb.cards, rb.cards - ra.cards
            if not only_a or not only_b:
                continue
            w = 2.0 / len(diff)
            for a in only_a:
                for b in only_b:
                    if _parent(a) != _parent(b):
                        continue
                    pair = (a, b) if a < b else (b, a)
                    if ra.succeeded and rb.succeeded:
                        if any(r.failed and a not in r.cards and b not in r.cards for r in group):
                            support[pair] = max(support.get(pair, 0.0), w)
                    elif ra.succeeded != rb.succeeded:
                        contra[pair] = max(contra.get(pair, 0.0), w)
        for pair, w in support.items():
            out[pair][0] += w
        for pair, w in contra.items():
            out[pair][1] += w
    return dict(out)
