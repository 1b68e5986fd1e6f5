"""Token-budgeted recall over an episode's units (S3Mem's retrieval and packing, PAPERS.md §4).

1. **Anchors** — the question is parsed into a typed query (:func:`~libraryfs.features.episodes.anchors.
   parse_question`) and resolved against the episode's unit index
   (:class:`~libraryfs.features.episodes.resolve.Resolver`): every fact the resolution used — the k-th
   occurrence of each hop of a chain, a visit's first and last step, the occurrences inside a visit up to
   the one asked for, every counted occurrence, the asked field at the target step — is recorded.
2. **Candidates** — BM25 (:class:`~libraryfs.features.episodes.bm25.Okapi`, ``rank_bm25.BM25Okapi``'s scores) over each unit's text (fields, observation, summary).
3. **Re-ranking** — ``0.5·anchor compatibility + 0.3·chain support + 0.2·text similarity``: compatibility is
   the share of the question's named things the unit carries; chain support decays with the distance in
   steps to the nearest resolved step (``exp(-d/3)``); text similarity is BM25 divided by the best BM25.
4. **Packing** — one fixed order of evidence lines, independent of the budget: the **key lines** (the
   facts used, one short line per step, chain order: ``t=120 ev=collect_wood#2``, ``t=123 act=do``), then
   the unit lines of the anchor and target steps, the target's state line, the steps between an anchor
   and an offset target (offset ≤ 3), the observations of those steps, then the re-ranked candidates. The
   packed evidence is the longest prefix of that order whose text fits the budget (o200k tokens, counted
   on the exact text returned): never over budget, deterministic, anchors first, and monotone — a larger
   budget packs a superset.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from libraryfs.features.episodes.anchors import parse_question
from libraryfs.features.episodes.index import EpisodeIndex, tokenize
from libraryfs.features.episodes.query import Query, Ref
from libraryfs.features.episodes.resolve import Resolver
from libraryfs.index.tokens import count_tokens

W_ANCHOR, W_CHAIN, W_TEXT = 0.5, 0.3, 0.2
CHAIN_DECAY_STEPS = 3.0
NEIGHBOURHOOD_MAX_OFFSET = 3
MAX_CANDIDATES = 200  #: re-ranked candidates kept after the anchor groups (lines beyond any budget ≤ ~8k)


@dataclass
class Item:
    """One evidence line."""

    t: int
    kind: str  #: "key" | "anchor" | "state" | "chain" | "obs" | "candidate"
    text: str
    score: float = 0.0


@dataclass
class Recall:
    """Packed evidence: ``items`` (in order), ``text`` (the lines joined), ``tokens`` (of ``text``)."""

    question: str
    budget_tokens: int
    query: Query
    resolved: dict
    items: list[Item] = field(default_factory=list)
    text: str = ""
    tokens: int = 0
    #: the token counter of :meth:`to_json` (the index's: :attr:`EpisodeIndex.count_tokens`)
    count_tokens: Callable[[str], int] = field(default=count_tokens, repr=False, compare=False)

    def steps(self) -> list[int]:
        """Distinct steps with any packed line, in packing order."""
        return list(dict.fromkeys(i.t for i in self.items))

    def anchor_summary(self) -> str:
        """A short description of the resolved anchors."""
        steps = self.resolved.get("steps") or []
        if not steps:
            return "none (text ranking only)"
        shown = ", ".join(str(t) for t in steps[:8]) + (" …" if len(steps) > 8 else "")
        return f"{self.query.type} question; steps {shown}"

    def to_json(self) -> dict:
        """``{"question", "budget_tokens", "tokens", "query", "resolved", "items": [...]}``."""
        return {
            "question": self.question,
            "budget_tokens": self.budget_tokens,
            "tokens": self.tokens,
            "query": self.query.to_json(),
            "resolved": self.resolved,
            "items": [
                {
                    "t": i.t,
                    "kind": i.kind,
                    "score": round(i.score, 4),
                    "text": i.text,
                    "tokens": self.count_tokens(i.text),
                }
                for i in self.items
            ],
        }


def _offset_of(r: Ref | None) -> Ref | None:
    return r if r is not None and r.op == "offset" else None


def resolve_query(idx: EpisodeIndex, q: Query) -> dict:
    """``{"steps": [...], "trace": [[t, fragment...]], "target": t|None, "points": [...]}`` for a query."""
    r = Resolver(idx, idx.last_t)
    r.answer(q)
    steps = list(dict.fromkeys(t for t, _ in r.trace))
    target = r.trace[-1][0] if r.trace and q.type in ("value", "step") else None
    if q.type == "count":  # the counted occurrences are key lines only; the span's ends are the points
        points = [t for t, f in r.trace if f[0] in ("visit", "end") and q.count and q.count.kind != "visit"]
    else:
        points = steps
    chain: list[int] = []
    off = _offset_of(q.ref)
    if off is not None and target is not None and 0 < abs(off.d) <= NEIGHBOURHOOD_MAX_OFFSET:
        base = target - off.d
        lo, hi = sorted((base, target))
        chain = [t for t in idx.steps_between(lo + 1, hi - 1)]
    return {
        "steps": steps,
        "trace": [[t, *f] for t, f in r.trace],
        "target": target,
        "points": list(dict.fromkeys(points)),
        "chain": chain,
        "state": q.field.startswith(("count:", "vital:")),
    }


def rank(
    idx: EpisodeIndex,
    question: str,
    q: Query,
    pins: list[int],
    use_anchors: bool = True,
    limit: int | None = None,
) -> list[tuple[float, int]]:
    """``[(score, t)]`` of every unit (the best ``limit`` when given), best first (ties by step).

    One pass over the units with the same floating-point operations in the same order as the formula
    reads (``W_ANCHOR·compat + W_CHAIN·chain + W_TEXT·text``; the chain weight of each distance computed
    once), ordered as ``(-score, t)`` tuples (no key function; ``heapq.nsmallest`` for a ``limit``, which
    equals sorting and slicing)."""
    bm = idx.bm25(tokenize(question))
    top = max(bm) if bm and max(bm) > 0 else 1.0
    if not use_anchors:
        neg = [(-(b / top), t) for t, b in zip(idx.ts, bm, strict=False)]
    else:
        wanted = set(q.mentions)
        counts = idx.mention_counts(wanted) if wanted else {}
        n_wanted = len(wanted)
        chain = _chain_weights(idx.ts, sorted(set(pins)))
        neg = [
            (
                -(
                    W_ANCHOR * (counts.get(i, 0) / n_wanted if n_wanted else 0.0)
                    + W_CHAIN * c
                    + W_TEXT * (b / top)
                ),
                t,
            )
            for i, (t, b, c) in enumerate(zip(idx.ts, bm, chain, strict=False))
        ]
    if limit is None:
        neg.sort()
    else:
        neg = heapq.nsmallest(limit, neg)
    return [(-s, t) for s, t in neg]


def _chain_weights(ts: list[int], pins: list[int]) -> list[float]:
    """Per step of ``ts`` (ascending), ``exp(-d / CHAIN_DECAY_STEPS)`` where ``d`` is its distance in steps to
    the nearest of ``pins`` (ascending); all 0.0 without pins."""
    if not pins:
        return [0.0] * len(ts)
    out: list[float] = []
    weight: dict[int, float] = {}
    j, last = 0, len(pins) - 1
    for t in ts:
        while j <= last and pins[j] < t:  # j: the first pin ≥ t (bisect_left)
            j += 1
        if j == 0:
            d = pins[0] - t
        elif j > last:
            d = t - pins[last]
        else:
            d = min(t - pins[j - 1], pins[j] - t)
        w = weight.get(d)
        if w is None:
            w = weight[d] = math.exp(-d / CHAIN_DECAY_STEPS)
        out.append(w)
    return out


def _key_lines(idx: EpisodeIndex, trace: list[list]) -> list[Item]:
    per_t: dict[int, list[str]] = {}
    for t, *frag in trace:
        if idx.has(t):
            per_t.setdefault(t, []).append(idx.fragment(t, tuple(frag)))
    return [Item(t, "key", f"t={t} " + " ".join(dict.fromkeys(fr))) for t, fr in per_t.items()]


def order_items(idx: EpisodeIndex, question: str, use_anchors: bool = True) -> tuple[Query, dict, list[Item]]:
    """The budget-independent packing order of evidence lines for ``question``."""
    q = parse_question(question, idx.vocab)
    empty = {"steps": [], "trace": [], "target": None, "points": [], "chain": [], "state": False}
    resolved = resolve_query(idx, q) if use_anchors and q.typed() else empty
    items: list[Item] = []
    seen: set[tuple[int, str]] = set()

    def add(t: int, kind: str, score: float = 1.0) -> None:
        """Append the evidence line of step ``t`` (its state, observation or unit line, by ``kind``) once per
        step and line; steps not in the index are skipped."""
        line = {"state": "state", "obs": "obs"}.get(kind, "line")
        if (t, line) in seen or not idx.has(t):
            return
        seen.add((t, line))
        text = idx.state_line(t) if line == "state" else idx.obs_line(t) if line == "obs" else idx.line(t)
        if text:
            items.append(Item(t, kind, text, score))

    items += _key_lines(idx, resolved["trace"])  # 1. the facts the resolution used
    for t in resolved["points"]:  # 2. the unit lines of anchor and target steps
        add(t, "anchor")
    if resolved["target"] is not None and resolved["state"]:
        add(resolved["target"], "state")
    for t in resolved["chain"]:  # 3. the minimal neighbourhood of an offset
        add(t, "chain")
    for t in resolved["points"]:
        add(t, "obs")
    pins = resolved["steps"]
    for score, t in rank(idx, question, q, pins, use_anchors, MAX_CANDIDATES):  # 4. candidates
        add(t, "candidate", score)
    return q, resolved, items


def prefix_tokens(
    items: list[Item], max_tokens: int, count: Callable[[str], int] = count_tokens
) -> list[int]:
    """Token counts (``count``: o200k, :func:`~libraryfs.index.tokens.count_tokens` or a counter equal to
    it) of the joined text of each prefix ``items[:k+1]``, stopping after the first prefix over
    ``max_tokens`` (so ``pack`` for any budget ≤ ``max_tokens`` is a lookup)."""
    out: list[int] = []
    text = ""
    for it in items:
        text = f"{text}\n{it.text}" if text else it.text
        out.append(count(text))
        if out[-1] > max_tokens:
            break
    return out


def pack(
    items: list[Item], budget_tokens: int, count: Callable[[str], int] = count_tokens
) -> tuple[list[Item], str, int]:
    """The longest prefix of ``items`` whose joined text (``"\\n"``) stays within ``budget_tokens``
    (counted on that exact text by ``count``, as :func:`prefix_tokens`): ``(items, text, tokens)``. Stops at
    the first line that does not fit, so the result for a larger budget always extends the result for a
    smaller one."""
    counts = prefix_tokens(items, budget_tokens, count)
    n = 0
    while n < len(counts) and counts[n] <= budget_tokens:
        n += 1
    text = "\n".join(i.text for i in items[:n])
    return items[:n], text, (counts[n - 1] if n else 0)


def recall(idx: EpisodeIndex, question: str, budget_tokens: int, use_anchors: bool = True) -> Recall:
    """Evidence for ``question`` within ``budget_tokens`` (o200k tokens of :attr:`Recall.text`, counted by
    :attr:`EpisodeIndex.count_tokens`).

    Raises ``ValueError`` for a negative budget. A blank question ranks no step above another (the front
    ends refuse it first: :func:`~libraryfs.features.episodes.unitdb.check_question`).
    """
    if budget_tokens < 0:
        raise ValueError("budget_tokens must be ≥ 0")
    q, resolved, items = order_items(idx, question, use_anchors)
    packed, text, tokens = pack(items, budget_tokens, idx.count_tokens)
    return Recall(question, budget_tokens, q, resolved, packed, text, tokens, idx.count_tokens)
