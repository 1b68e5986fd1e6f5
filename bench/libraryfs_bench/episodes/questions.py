"""Questions K1–K18 instantiated from a phrasing file over a recorded episode, with exact answers and gold
evidence steps computed from the raw records (:mod:`.truth`), never from libraryfs units.

For each template of a phrasing file (:mod:`.phrasings`) and each episode, :func:`generate` draws slot
values from what happened in the episode (an event with enough occurrences, a visit that ended, a range
holding 1–8 occurrences ...), fills the template, and computes the answer and the gold evidence steps:

=====  ====================================  =================================================================
kind   answer                                gold evidence steps
=====  ====================================  =================================================================
K1     the field at step N                   N
K2–K7  the step of the occurrence            that step
K8,11  the field d steps from the anchor     anchor, target
K9     the field d steps from a visit edge   visit's first (or last) step, target
K10    the field at the k-th change          that step
K12–3  the count (1–8)                       every counted occurrence
K14    the count (1–8) in the visit          the visit's first and last step (when it has ended), every
                                             counted occurrence
K15    the number of visits (1–8)            the first step of every counted visit
K16    field d steps after the first e2      e1's step, e2's step, target
       after the k-th e1
K17    the other location label (the area    the visit's first step and its occurrences up to the k-th;
       of a place visit, the place of an     for "last": the first step, the last occurrence and the
       area visit) at the k-th e in visit j  visit's last step
K18    the name of the earlier event         both occurrences
=====  ====================================  =================================================================

Counts are kept to 1–8 so the gold evidence fits a small budget. Drawing is deterministic: each
(template, episode, repetition) has its own ``random.Random`` seeded with a string.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from libraryfs_bench.episodes.phrasings import FAMILY, Template, fill
from libraryfs_bench.episodes.truth import VITALS, Truth

MAX_COUNT = 8
MAX_K = 8
ATTEMPTS = 80


@dataclass
class Question:
    """A generated question."""

    kind: str
    family: str
    text: str
    answer: str
    gold_steps: list[int]
    episode: str = ""
    template: int = 0  #: line of the template in its phrasing file
    spec: dict = field(default_factory=dict)  #: the drawn slot values (for inspection)

    def to_json(self) -> dict:
        """JSON-ready dict."""
        return asdict(self)


class _Draw:
    """Slot drawing for one template over one episode."""

    def __init__(self, tr: Truth, t: Template, rng: random.Random) -> None:
        self.tr, self.t, self.rng = tr, t, rng
        self.v: dict[str, Any] = {}

    def k(self, name: str, n: int, near: tuple[str, ...] = ("event", "event1")) -> int | None:
        """An ordinal for a list of ``n`` occurrences (fixed by the template or its words, or drawn)."""
        fixed = self.t.fixed(name)
        if fixed is None and name not in self.t.placeholders:
            fixed = self.t.from_text(name, near) or 1
        if isinstance(fixed, int):
            self.v[name] = fixed
            return fixed if (fixed == -1 and n >= 1) or 1 <= fixed <= n else None
        if n < 1:
            return None
        if self.t.allows_last(name) and n >= 2 and self.rng.random() < 0.25:
            k = -1
        else:
            k = self.rng.randint(1, min(n, MAX_K))
        self.v[name] = k
        return k

    def d(self, default: tuple[int, int]) -> int:
        fixed = self.t.fixed("d")
        if fixed is None and "d" not in self.t.placeholders:
            fixed = self.t.from_text("d", ()) or default[0]
        if isinstance(fixed, int) and fixed > 0:
            self.v["d"] = fixed
            return fixed
        lo, hi = self.t.d_range() if "d" in self.t.placeholders else default
        d = self.rng.randint(lo, hi)
        self.v["d"] = d
        return d

    def pick(self, name: str, options: list[str]) -> str | None:
        fixed = self.t.fixed(name)
        if isinstance(fixed, str):
            self.v[name] = fixed
            return fixed if fixed in options else None
        if not options:
            return None
        self.v[name] = self.rng.choice(options)
        return self.v[name]

    def event(self, name: str = "event", min_n: int = 1) -> tuple[str, list[int]] | None:
        e = self.pick(name, self.tr.names("ev", min_n))
        return None if e is None else (e, self.tr.occurrences("ev", e))

    def field(self) -> str | None:
        """The asked field with its item/vital drawn."""
        f = str(self.t.asked() or "")
        if "{item}" in f or (f.startswith("count:") and "item" in self.t.placeholders):
            item = self.pick("item", sorted({i for r in self.tr.recs.values() for i in r["inventory"]}))
            return None if item is None else "count:" + item
        if "{vital}" in f or (f == "vital:" and "vital" in self.t.placeholders):
            vital = self.pick("vital", list(VITALS))
            return None if vital is None else "vital:" + vital
        return f or None

    def label_kind(self) -> str:
        return "area" if "area" in self.t.placeholders else self.t.variant("target", {"area": ()}, "place")

    def visit(
        self, name: str, min_visits: int = 1, ended: bool = False
    ) -> tuple[str, str, int, int, int | None] | None:
        kind = self.label_kind()
        labels = [lab for lab in self.tr.labels(kind) if len(self.tr.visits[(kind, lab)]) >= min_visits]
        lab = self.pick(kind, labels)
        if lab is None:
            return None
        spans = self.tr.visits[(kind, lab)]
        k = self.k(name, len(spans), ("place", "area"))
        if k is None:
            return None
        start, end = spans[k - 1] if k != -1 else spans[-1]
        if ended and end is None:
            return None
        return kind, lab, k, start, end


def _kth(lst: list[int], k: int) -> int:
    return lst[-1] if k == -1 else lst[k - 1]


def _direction(t: Template, options: dict[str, tuple[str, ...]], default: str) -> str:
    return t.variant("direction", options, default)


UPDOWN = {
    "up": ("up", "rose", "rise", "increase", "increased", "gain", "gained", "grew", "obtain", "obtained", "got", "recover"),
    "down": ("down", "drop", "dropped", "fell", "fall", "decrease", "decreased", "lost", "lose", "spent", "spend", "lower"),
}  # fmt: skip
BEFORE_AFTER = {
    "before": ("before", "prior", "earlier", "preceding"),
    "after": ("after", "later", "following", "into"),
}


def _occurrence(dr: _Draw, kind: str) -> tuple[dict, str, list[int]] | None:
    tr, t = dr.tr, dr.t
    if kind == "K2":
        got = dr.event()
        if got is None:
            return None
        k = dr.k("k", len(got[1]))
        return None if k is None else ({}, str(_kth(got[1], k)), [_kth(got[1], k)])
    if kind in ("K3", "K4"):
        got = dr.visit("k", ended=kind == "K4")
        if got is None:
            return None
        step = got[3] if kind == "K3" else got[4]
        return {}, str(step), [step]
    occ_kind = {"K5": "gain", "K6": "lose"}.get(kind)
    if kind == "K7":
        occ_kind = "rise" if _direction(t, UPDOWN, "down") == "up" else "drop"
        name = dr.pick("vital", [v for v in VITALS if tr.occurrences(occ_kind, v)])
    else:
        name = dr.pick("item", tr.names(occ_kind or ""))
    if name is None:
        return None
    occ = tr.occurrences(occ_kind or "", name)
    k = dr.k("k", len(occ))
    return None if k is None else ({}, str(_kth(occ, k)), [_kth(occ, k)])


def _value_at(dr: _Draw, anchor: int, sign: int, d: int, gold: list[int], inside: str | None = None):
    target = anchor + sign * d
    f = dr.field()
    if f is None or not 0 <= target <= dr.tr.T:
        return None
    return {"field": f}, dr.tr.value(target, f, inside), [*gold, target]


def _offsets(dr: _Draw, kind: str):
    t = dr.t
    if kind in ("K8", "K11"):
        got = dr.event()
        if got is None:
            return None
        k = dr.k("k", len(got[1]))
        if k is None:
            return None
        sign = -1 if _direction(t, BEFORE_AFTER, "after") == "before" else 1
        d = dr.d((1, 1) if kind == "K11" else (2, 5))
        a = _kth(got[1], k)
        return _value_at(dr, a, sign, d, [a])
    if kind == "K9":
        edge = t.variant(
            "anchor",
            {
                "end": (
                    "end",
                    "ended",
                    "finish",
                    "finished",
                    "left",
                    "leave",
                    "leaving",
                    "exit",
                    "depart",
                    "over",
                )
            },
            "start",
        )
        got = dr.visit("k", ended=edge == "end")
        if got is None:
            return None
        a = got[3] if edge == "start" else got[4]
        sign = -1 if _direction(t, BEFORE_AFTER, "after") == "before" else 1
        return _value_at(dr, a, sign, dr.d((2, 5)), [a])
    if kind == "K10":
        occ_kind = "gain" if _direction(t, UPDOWN, "up") == "up" else "lose"
        item = dr.pick("item", dr.tr.names(occ_kind))
        if item is None:
            return None
        occ = dr.tr.occurrences(occ_kind, item)
        k = dr.k("k", len(occ))
        return None if k is None else _value_at(dr, _kth(occ, k), 1, 0, [])
    return None


def _counting(dr: _Draw, kind: str):
    tr, rng = dr.tr, dr.rng
    if kind == "K15":
        vkind = dr.label_kind()
        labels = tr.labels(vkind)
        if "N" in dr.t.placeholders:
            lab = dr.pick(vkind, labels)
            if lab is None:
                return None
            starts = [s for s, _ in tr.visits[(vkind, lab)]]
            c = rng.randint(1, min(MAX_COUNT, len(starts)))
            hi = starts[c] if c < len(starts) else tr.T + 1
            dr.v["N"] = rng.randint(starts[c - 1] + 1, hi)
            return {}, str(c), starts[:c]
        lab = dr.pick(vkind, [lab for lab in labels if len(tr.visits[(vkind, lab)]) <= MAX_COUNT])
        if lab is None:
            return None
        starts = [s for s, _ in tr.visits[(vkind, lab)]]
        return {}, str(len(starts)), starts
    if kind == "K14":
        got = dr.visit("k")
        ev = dr.event()
        if got is None or ev is None:
            return None
        start, end = got[3], got[4] if got[4] is not None else tr.T
        inside = [x for x in ev[1] if start <= x <= end]
        if not 1 <= len(inside) <= MAX_COUNT:
            return None
        return {}, str(len(inside)), sorted({start, *inside} | ({got[4]} if got[4] is not None else set()))
    ev = dr.event()
    if ev is None:
        return None
    occ = ev[1]
    c = rng.randint(1, min(MAX_COUNT, len(occ)))
    if kind == "K12":
        i = rng.randint(0, len(occ) - c)
        lo_min = occ[i - 1] + 1 if i else 0
        hi_max = occ[i + c] - 1 if i + c < len(occ) else tr.T
        dr.v["N"], dr.v["M"] = rng.randint(lo_min, occ[i]), rng.randint(occ[i + c - 1], hi_max)
        if dr.v["N"] >= dr.v["M"]:
            return None
        return {}, str(c), occ[i : i + c]
    if _direction(dr.t, BEFORE_AFTER, "before") == "before":  # count of t < N is c
        hi = occ[c] if c < len(occ) else tr.T + 1
        dr.v["N"] = rng.randint(occ[c - 1] + 1, hi)
        return {}, str(c), occ[:c]
    lo = occ[-c - 1] if c < len(occ) else 0  # count of t > N is c
    dr.v["N"] = rng.randint(lo, occ[-c] - 1) if occ[-c] > lo else None
    return None if dr.v["N"] is None else ({}, str(c), occ[-c:])


def _multihop(dr: _Draw, kind: str):
    tr = dr.tr
    if kind == "K16":
        e1 = dr.event("event1")
        if e1 is None:
            return None
        k = dr.k("k", len(e1[1]))
        if k is None:
            return None
        t1 = _kth(e1[1], k)
        e2 = dr.pick(
            "event2",
            [e for e in tr.names("ev") if e != e1[0] and any(x > t1 for x in tr.occurrences("ev", e))],
        )
        if e2 is None:
            return None
        t2 = next(x for x in tr.occurrences("ev", e2) if x > t1)
        return _value_at(dr, t2, 1, dr.d((2, 5)), [t1, t2])
    if kind == "K17":
        got = dr.visit("j")
        ev = dr.event()
        if got is None or ev is None:
            return None
        vkind, _lab, _j, start, end = got
        inside = [x for x in ev[1] if start <= x <= (end if end is not None else tr.T)]
        k = dr.k("k", len(inside))
        if k is None:
            return None
        t = _kth(inside, k)
        gold = [start, *([t] if k == -1 else inside[:k])] + ([end] if k == -1 and end is not None else [])
        f = dr.t.field if dr.t.field in ("place", "area") else "where"
        return {"field": f}, tr.value(t, f, vkind), sorted(set(gold))
    e1, e2 = dr.event("event1"), dr.event("event2")
    if e1 is None or e2 is None or e1[0] == e2[0]:
        return None
    k, j = dr.k("k", len(e1[1]), ("event1",)), dr.k("j", len(e2[1]), ("event2",))
    if k is None or j is None:
        return None
    t1, t2 = _kth(e1[1], k), _kth(e2[1], j)
    if t1 == t2:
        return None
    return {}, e1[0] if t1 < t2 else e2[0], sorted({t1, t2})


def _draw(dr: _Draw) -> tuple[dict, str, list[int]] | None:
    kind = dr.t.kind
    if kind == "K1":
        f = dr.field()
        n = dr.t.fixed("N")
        dr.v["N"] = n if isinstance(n, int) and n <= dr.tr.T else dr.rng.randint(0, dr.tr.T)
        return None if f is None else ({"field": f}, dr.tr.value(dr.v["N"], f), [dr.v["N"]])
    if kind in ("K2", "K3", "K4", "K5", "K6", "K7"):
        return _occurrence(dr, kind)
    if kind in ("K8", "K9", "K10", "K11"):
        return _offsets(dr, kind)
    if kind in ("K12", "K13", "K14", "K15"):
        return _counting(dr, kind)
    return _multihop(dr, kind)


def generate(
    recs: list[dict], templates: list[Template], episode: str, per_template: int = 1, key: str = ""
) -> tuple[list[Question], list[str]]:
    """Questions for every template over one episode, and notes on templates that could not be filled."""
    tr = Truth(recs)
    out: list[Question] = []
    notes: list[str] = []
    texts: set[str] = set()
    for t in templates:
        made = 0
        for rep in range(per_template):
            rng = random.Random(f"{key}|{episode}|{t.line}|{rep}")
            for _ in range(ATTEMPTS):
                dr = _Draw(tr, t, rng)
                got = _draw(dr)
                if got is None or any(p not in dr.v for p in t.placeholders):
                    continue
                extra, answer, gold = got
                text = fill(t, dr.v)
                if text in texts:
                    continue
                texts.add(text)
                spec = {**dr.v, **extra}
                out.append(
                    Question(t.kind, FAMILY[t.kind], text, answer, sorted(set(gold)), episode, t.line, spec)
                )
                made += 1
                break
        if made < per_template:
            notes.append(f"{episode}: line {t.line} ({t.kind}) filled {made}/{per_template}")
    return out, notes
