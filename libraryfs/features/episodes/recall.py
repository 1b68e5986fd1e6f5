"""Token-budgeted recall over an episode's units (S3Mem's retrieval and packing, PAPERS.md §4).

1. **Anchors** — :func:`~libraryfs.features.episodes.anchors.parse_question`, resolved against the episode's
   occurrence lists (k-th event, k-th visit, k-th gained/lost item) plus the temporal offset.
2. **Candidates** — BM25 (``rank_bm25.BM25Okapi``) over each unit's evidence text.
3. **Re-ranking** — ``0.5·anchor compatibility + 0.3·chain support + 0.2·text similarity``: compatibility is
   the share of the question's named things (events, items, places, objects) the unit carries; chain
   support decays with the distance in steps to the nearest resolved anchor (``exp(-d/3)``); text
   similarity is BM25 divided by the best BM25.
4. **Packing** — one fixed order of evidence lines, independent of the budget: anchor and target steps
   first (with the target's state line when the question asks about state), then the minimal
   neighbourhood (the steps between an anchor and an offset target when the offset is ≤ 3, and the step
   before a transition), then the missing state facts of those steps, then the re-ranked candidates. The
   packed evidence is the longest prefix of that order whose text fits the budget (o200k tokens, counted
   on the exact text returned). Hence: never over budget, deterministic, anchors first, and monotone —
   a larger budget packs a superset.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from dataclasses import dataclass, field

from rank_bm25 import BM25Okapi

from libraryfs.features.episodes.anchors import Anchors, parse_question
from libraryfs.features.episodes.units import Unit
from libraryfs.index.tokens import count_tokens

W_ANCHOR, W_CHAIN, W_TEXT = 0.5, 0.3, 0.2
CHAIN_DECAY_STEPS = 3.0
NEIGHBOURHOOD_MAX_OFFSET = 3
MAX_CANDIDATES = 200  #: re-ranked candidates kept after the anchor groups (lines beyond any budget ≤ ~8k)

_TOK = re.compile(r"[a-z0-9]+(?:[-_][a-z0-9]+)*")


def tokenize(text: str) -> list[str]:
    """BM25 terms: lower-cased words; ``collect_wood`` and ``zone-2-1`` also yield their parts."""
    out = []
    for w in _TOK.findall(text.lower()):
        out.append(w)
        if "_" in w or "-" in w:
            out += [p for p in re.split(r"[-_]", w) if p and not p.isdigit()]
    return out


class EpisodeIndex:
    """Units of one episode with occurrence lists and a BM25 index (build once, query many times)."""

    def __init__(self, units: list[Unit]) -> None:
        self.units = sorted(units, key=lambda u: u.t)
        self.by_t = {u.t: u for u in self.units}
        self.ts = [u.t for u in self.units]
        self.occ: dict[tuple[str, str], list[int]] = {}
        for u in self.units:
            for e in u.events:
                self.occ.setdefault(("ev", e), []).append(u.t)
            for i in u.gained or []:
                self.occ.setdefault(("gain", i), []).append(u.t)
            for i in u.lost or []:
                self.occ.setdefault(("lose", i), []).append(u.t)
            if "visit" in u.marks:
                self.occ.setdefault(("visit", u.location), []).append(u.t)
        self.vocab = {
            "events": sorted({n for k, n in self.occ if k == "ev"}),
            "items": sorted(
                {n for k, n in self.occ if k in ("gain", "lose")}
                | {i for u in self.units for i in u.inventory}
            ),
            "places": sorted({n for k, n in self.occ if k == "visit"}),
            "objects": sorted({o for u in self.units for o in u.objects}),
        }
        self._bm25 = BM25Okapi([tokenize(u.terms()) for u in self.units]) if self.units else None

    def occurrences(self, kind: str, name: str) -> list[int]:
        """Steps of every occurrence of (kind, name), in order."""
        return self.occ.get((kind, name), [])

    def bm25(self, question: str) -> list[float]:
        """BM25 score of each unit (in :attr:`units` order) for ``question``."""
        if self._bm25 is None:
            return []
        return [float(x) for x in self._bm25.get_scores(tokenize(question))]

    def nearest_t(self, t: int) -> int | None:
        """``t`` if a unit has it, else None."""
        return t if t in self.by_t else None


@dataclass
class Item:
    """One evidence line: a step's unit line or its state line."""

    t: int
    kind: str  #: "anchor" | "chain" | "state" | "candidate"
    text: str
    score: float = 0.0


@dataclass
class Recall:
    """Packed evidence: ``items`` (in order), ``text`` (the lines joined), ``tokens`` (of ``text``)."""

    question: str
    budget_tokens: int
    anchors: Anchors
    resolved: dict
    items: list[Item] = field(default_factory=list)
    text: str = ""
    tokens: int = 0

    def steps(self) -> list[int]:
        """Distinct steps with any packed line, in packing order."""
        return list(dict.fromkeys(i.t for i in self.items))

    def anchor_summary(self) -> str:
        """A short description of the resolved anchors."""
        r = self.resolved
        if not r.get("anchor_steps") and r.get("target") is None:
            return "none (text ranking only)"
        return f"anchor steps {r.get('anchor_steps')}, target {r.get('target')}"

    def to_json(self) -> dict:
        """``{"question", "budget_tokens", "tokens", "anchors", "resolved", "items": [...]}``."""
        return {
            "question": self.question,
            "budget_tokens": self.budget_tokens,
            "tokens": self.tokens,
            "anchors": self.anchors.to_json(),
            "resolved": self.resolved,
            "items": [
                {
                    "t": i.t,
                    "kind": i.kind,
                    "score": round(i.score, 4),
                    "text": i.text,
                    "tokens": count_tokens(i.text),
                }
                for i in self.items
            ],
        }


def resolve(idx: EpisodeIndex, a: Anchors) -> dict:
    """``{"anchor_steps": [...], "target": t|None, "chain": [...], "state": bool}`` for an anchor tuple."""
    anchor_steps: list[int] = []
    target = None
    chain: list[int] = []
    if a.t_range is not None:
        lo, hi = a.t_range
        if a.kind:
            anchor_steps = [t for t in idx.occurrences(a.kind, a.name or "") if lo <= t <= hi]
        else:
            anchor_steps = [t for t in idx.ts[bisect_left(idx.ts, lo) :] if t <= hi][:50]
    elif a.target_t is not None:
        base = idx.nearest_t(a.target_t)
        if base is not None:
            anchor_steps = [base]
            target = idx.nearest_t(base + a.offset)
    elif a.kind is not None:
        occ = idx.occurrences(a.kind, a.name or "")
        k = a.k or 1
        if occ and (k == -1 or 1 <= k <= len(occ)):
            base = occ[-1] if k == -1 else occ[k - 1]
            anchor_steps = [base]
            target = idx.nearest_t(base + a.offset)
    if target is not None and anchor_steps:
        base = anchor_steps[0]
        if 0 < abs(a.offset) <= NEIGHBOURHOOD_MAX_OFFSET:
            lo, hi = sorted((base, target))
            chain = [t for t in range(lo + 1, hi) if t in idx.by_t]
        if a.kind in ("gain", "lose") and a.offset == 0 and base - 1 in idx.by_t:
            chain.append(base - 1)
    state = a.focus.startswith("inv:") or a.kind in ("gain", "lose")
    return {"anchor_steps": anchor_steps, "target": target, "chain": chain, "state": state}


def rank(
    idx: EpisodeIndex, question: str, a: Anchors, resolved: dict, use_anchors: bool = True
) -> list[tuple[float, int]]:
    """``[(score, t)]`` of every unit, best first (ties by step)."""
    bm = idx.bm25(question)
    top = max(bm) if bm and max(bm) > 0 else 1.0
    pins = resolved["anchor_steps"] + ([resolved["target"]] if resolved["target"] is not None else [])
    wanted = set(a.mentions)
    scored = []
    for u, b in zip(idx.units, bm, strict=False):
        text_sim = b / top
        if not use_anchors:
            scored.append((text_sim, u.t))
            continue
        have = (
            set(u.objects) | set(u.events) | set(u.gained or []) | set(u.lost or []) | {u.location, u.facing}
        )
        compat = len(wanted & have) / len(wanted) if wanted else 0.0
        d = min((abs(u.t - p) for p in pins), default=None)
        chain = math.exp(-d / CHAIN_DECAY_STEPS) if d is not None else 0.0
        scored.append((W_ANCHOR * compat + W_CHAIN * chain + W_TEXT * text_sim, u.t))
    scored.sort(key=lambda x: (-x[0], x[1]))
    return scored


def order_items(
    idx: EpisodeIndex, question: str, use_anchors: bool = True
) -> tuple[Anchors, dict, list[Item]]:
    """The budget-independent packing order of evidence lines for ``question``."""
    a = parse_question(question, idx.vocab)
    resolved = (
        resolve(idx, a) if use_anchors else {"anchor_steps": [], "target": None, "chain": [], "state": False}
    )
    items: list[Item] = []
    seen: set[tuple[int, str]] = set()

    counting = a.focus == "count" and a.kind is not None

    def add(t: int, kind: str, state: bool = False, score: float = 1.0) -> None:
        key = (t, "state" if state else "line")
        if key in seen or t not in idx.by_t:
            return
        seen.add(key)
        u = idx.by_t[t]
        if counting and kind == "anchor":  # one short occurrence line per counted step
            text = u.occurrence_line(a.kind or "", a.name or "")
        else:
            text = u.state_line() if state else u.line()
        items.append(Item(t, kind, text, score))

    pins = list(resolved["anchor_steps"])
    if resolved["target"] is not None:
        pins.append(resolved["target"])
    for t in pins:  # 1. anchors (and the answer's state fact)
        add(t, "anchor")
        if resolved["state"] and t == (resolved["target"] if resolved["target"] is not None else t):
            add(t, "anchor", state=True)
    for t in resolved["chain"]:  # 2. minimal neighbourhood
        add(t, "chain")
    for t in pins + resolved["chain"]:  # 3. missing state facts
        add(t, "state", state=True)
    for score, t in rank(idx, question, a, resolved, use_anchors)[:MAX_CANDIDATES]:  # 4. candidates
        add(t, "candidate", score=score)
    return a, resolved, items


def prefix_tokens(items: list[Item], max_tokens: int) -> list[int]:
    """Token counts of the joined text of each prefix ``items[:k+1]``, stopping after the first prefix
    over ``max_tokens`` (so ``pack`` for any budget ≤ ``max_tokens`` is a lookup)."""
    out: list[int] = []
    text = ""
    for it in items:
        text = f"{text}\n{it.text}" if text else it.text
        out.append(count_tokens(text))
        if out[-1] > max_tokens:
            break
    return out


def pack(items: list[Item], budget_tokens: int) -> tuple[list[Item], str, int]:
    """The longest prefix of ``items`` whose joined text (``"\n"``) stays within ``budget_tokens``
    (counted on that exact text): ``(items, text, tokens)``. Stops at the first line that does not fit,
    so the result for a larger budget always extends the result for a smaller one."""
    counts = prefix_tokens(items, budget_tokens)
    n = 0
    while n < len(counts) and counts[n] <= budget_tokens:
        n += 1
    text = "\n".join(i.text for i in items[:n])
    return items[:n], text, (counts[n - 1] if n else 0)


def recall(idx: EpisodeIndex, question: str, budget_tokens: int, use_anchors: bool = True) -> Recall:
    """Evidence for ``question`` within ``budget_tokens`` (o200k tokens of :attr:`Recall.text`).

    Raises ``ValueError`` for a negative budget.
    """
    if budget_tokens < 0:
        raise ValueError("budget_tokens must be ≥ 0")
    a, resolved, items = order_items(idx, question, use_anchors)
    packed, text, tokens = pack(items, budget_tokens)
    return Recall(question, budget_tokens, a, resolved, packed, text, tokens)
