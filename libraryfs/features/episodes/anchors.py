"""Questions → typed queries (S3Mem's anchor tuples, PAPERS.md §4): the second half of the parser.

:func:`parse_question` tags the question (:mod:`.tagging`: labels, events, items, vitals, words of change,
offsets, ranges, steps, ordinals become placeholder tokens) and assembles a
:class:`~libraryfs.features.episodes.query.Query` with a small grammar instead of templates:

1. **Changes** — an item or vital next to a word of change in the same clause ("wood in my inventory went
   up", "spent wood", "decrease in food", "my thirst rose") becomes one occurrence head
   (``gain``/``lose``/``rise``/``drop``); pairs are made nearest-first.
2. **Ordinals** attach to heads: a visit noun phrase ("my 2nd stay at P", "visit 3 to P", "my last time in
   the forest"), then "(for) the k-th time" (backwards after "for" or a head, forwards before "I/my/the"),
   then an ordinal next to a head ("my 2nd wood collection", "I first obtained", "food last went down"),
   then "next" (the first one after another anchor), then whatever is left to the nearest free head.
3. **Visit roles** — a label is the beginning of a visit ("arrived", "entered", "began", "first step of"),
   its end ("ended", "left", "last step of") or, when the question also names an event, the span the
   event is counted or looked for in ("during my 2nd visit to P").
4. **Type and field** — which-came-first, how-many, a field (action, facing, area, where, an item's count,
   a vital's level), else the step itself.
5. **Chains** — with two point anchors, a link word ("after", "following", "once", "since", "then",
   "after it") or "next" makes one the base and the other the first occurrence after it; the offset
   ("3 steps after", "right before", "2 steps later") applies to the last anchor of the chain.

Everything is deterministic (no dependence on set or dict hash order). A question without any anchor gives
``Query(type="none")``; recall then ranks by text only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from libraryfs.features.episodes.query import LAST, Query, Ref, Span
from libraryfs.features.episodes.tagging import Tagged, tag

BREAKS = {
    ",",
    "when",
    "while",
    "where",
    "after",
    "before",
    "during",
    "once",
    "then",
    "or",
    "and",
    "but",
    "whereas",
}
SKIP = {
    "my",
    "the",
    "a",
    "an",
    "i",
    "did",
    "had",
    "have",
    "has",
    "was",
    "were",
    "it",
    "its",
    "our",
    "of",
    "ever",
}
TIME_WORDS = {"time", "times", "occasion", "instance", "occurrence", "round", "go", "occasions"}
VISIT_NOUNS = {
    "visit", "visits", "stay", "stays", "trip", "trips", "time", "times", "sojourn", "excursion", "tour", "stint",
    "spell", "period", "session", "round", "pass", "passage",
}  # fmt: skip
VISIT_FILLER = VISIT_NOUNS | {
    "the",
    "to",
    "at",
    "in",
    "of",
    "into",
    "inside",
    "on",
    "my",
    "this",
    "that",
    "number",
}
END_WORDS = {
    "end", "ended", "ends", "ending", "finish", "finished", "finishes", "finishing", "over", "conclude",
    "concluded", "leave", "left", "leaving", "leaves", "exit", "exited", "exiting", "depart", "departed",
    "departing", "§endstep", "out", "wrap", "wrapped", "wraps", "closed", "close", "terminated", "stopped", "quit",
    "quitted", "abandoned",
}  # fmt: skip
BEGIN_WORDS = {
    "begin", "began", "begun", "beginning", "begins", "start", "started", "starts", "starting", "arrive",
    "arrived", "arrival", "arriving", "arrives", "enter", "entered", "entering", "enters", "entry", "reach",
    "reached", "reaching", "§beginstep", "§begin", "onset", "commence", "commenced", "commences", "opened",
    "kicked", "initiated",
}  # fmt: skip
ROLE_WINDOW = 8  #: tokens around a label searched for a begin/end word
LINK_AFTER = {"after", "following", "once", "since", "subsequent", "then", "afterwards", "followed"}
LINK_BEFORE = {"before", "preceding"}
PRONOUNS = {"it", "that", "this", "which", "those"}
FIELD_CUES = (
    (
        "action",
        r"\b(?:what (?:did|do) i do|what i did|what was i doing|what i was doing|(?:which|what) (?:action|move)"
        r"|action|actions|doing|did what|my move|was i up to|i was up to|what did i perform)\b",
    ),
    ("facing", r"\b(?:facing|faced|face|in front(?: of)?|looking at|pointed at|ahead of me)\b"),
    ("area", r"\b(?:area|region|biome|terrain|surroundings|environment)\b"),
    ("where", r"(?<!step )(?<!moment )(?<!point )(?<!time )\b(?:where|location|whereabouts)\b"),
    ("place", r"\b(?:zone|place)\b"),
    ("near", r"\b(?:near|nearby|around me|close by|next to me)\b"),
)
COUNT_RE = re.compile(
    r"\bhow many times\b|\bhow often\b|\bnumber of (?:\w+ ){0,2}(?:times|visits|occasions|trips|stays)\b"
    r"|\bcount\b(?! of)|\btally\b"
    r"|\bhow many (?:\w+ ){0,2}(?:visits|trips|stays|times|occasions|occurrences|instances|events|stints)\b"
    r"|\bhow many (?=§[ec])|\b(?:number|no) of (?=§[ec])|\bin total\b|\btotal number\b|^times\b"
    r"|\btimes (?:i|did i|that i|when i)\b"
)


@dataclass
class Head:
    """An anchor head in the token list: an event, a change or a location label."""

    key: str
    kind: str  #: "ev" | "gain" | "lose" | "rise" | "drop" | "label"
    name: str
    pos: int
    k: int | None = None
    next: bool = False
    role: str = ""  #: labels: "start" | "end" | "span"

    def point(self) -> bool:
        """Whether the head names a step (not a span)."""
        return self.kind != "label" or self.role in ("start", "end")

    def ref(self) -> Ref:
        """The reference of this head."""
        k = 1 if self.k is None else self.k
        if self.kind == "label":
            return Ref("visit", name=self.name, k=k, edge=self.role or "start")
        return Ref("occ", kind=self.kind, name=self.name, k=k)


def _is(tok: str, prefix: str) -> bool:
    return tok.startswith(prefix) and tok[len(prefix) :].isdigit()


def _breaks(tok: str) -> bool:
    return tok in BREAKS or (tok.startswith("§") and _ord(tok) is None and tok not in ("§up", "§down"))


def _pair_changes(tg: Tagged) -> list[str]:
    """Items/vitals next to a word of change become change heads ``§cN`` (see the module doc)."""
    toks = list(tg.tokens)
    things = [i for i, t in enumerate(toks) if _is(t, "§i") or _is(t, "§v")]
    dirs = [i for i, t in enumerate(toks) if t in ("§up", "§down")]
    cands = []
    for i in things:
        for j in dirs:
            lo, hi = sorted((i, j))
            between = toks[lo + 1 : hi]
            if any(_breaks(b) for b in between):
                continue
            dist = hi - lo
            if dist <= (5 if j > i else 3):
                cands.append((dist, 0 if j > i else 1, i, j))
    used_i: set[int] = set()
    used_j: set[int] = set()
    for _d, _side, i, j in sorted(cands):
        if i in used_i or j in used_j:
            continue
        used_i.add(i)
        used_j.add(j)
        up = toks[j] == "§up"
        info = tg.meta[toks[i]]
        key = "§c" + toks[i][2:]
        if _is(toks[i], "§i"):
            tg.meta[key] = ("gain" if up else "lose", info)
        else:
            vital, inverted = info
            tg.meta[key] = ("rise" if up != inverted else "drop", vital)
        toks[i] = key
    return [t for n, t in enumerate(toks) if n not in used_j and t not in ("§up", "§down")]


def _heads(toks: list[str], meta: dict) -> list[Head]:
    out = []
    for i, t in enumerate(toks):
        if _is(t, "§e"):
            out.append(Head(t, "ev", meta[t], i))
        elif _is(t, "§c"):
            kind, name = meta[t]
            out.append(Head(t, kind, name, i))
        elif _is(t, "§l"):
            out.append(Head(t, "label", meta[t], i))
    return out


def _ord(tok: str) -> int | None:
    if not tok.startswith("§o") or tok == "§order":
        return None
    v = tok[2:]
    return LAST if v == "L" else (0 if v == "N" else int(v) if v.isdigit() else None)


def _nearest(heads: list[Head], pos: int, side: int, free: bool = True) -> Head | None:
    cands = [h for h in heads if (h.pos < pos if side < 0 else h.pos > pos) and (not free or h.k is None)]
    if not cands:
        return None
    return max(cands, key=lambda h: h.pos) if side < 0 else min(cands, key=lambda h: h.pos)


def _scan(toks: list[str], heads: list[Head], i: int, step: int, skip: set[str], n: int) -> Head | None:
    by_pos = {h.pos: h for h in heads}
    j = i + step
    while 0 <= j < len(toks) and abs(j - i) <= n:
        if j in by_pos:
            return by_pos[j]
        if toks[j] not in skip:
            return None
        j += step
    return None


def _attach(toks: list[str], heads: list[Head]) -> None:
    """Attach ordinals to heads (see the module doc, step 2)."""
    used: set[int] = set()
    ords = [(i, _ord(t)) for i, t in enumerate(toks) if _ord(t) is not None]
    for h in heads:  # visit noun phrases: "my 2nd stay at P", "visit 3 to P", "my last time in the forest"
        if h.kind != "label":
            continue
        j = h.pos - 1
        while j >= 0 and h.pos - j <= 6 and (toks[j] in VISIT_FILLER or _ord(toks[j]) not in (None, 0)):
            k = _ord(toks[j])
            if k not in (None, 0) and j not in used:
                near = set(toks[max(0, j - 1) : h.pos])
                if near & VISIT_NOUNS:
                    h.k = k
                    used.add(j)
                break
            j -= 1
    for i, k in ords:  # "(for) the k-th time"
        if i in used or k == 0 or i + 1 >= len(toks) or toks[i + 1] not in TIME_WORDS:
            continue
        start = i - 1 if i > 0 and toks[i - 1] == "the" else i
        has_for = start > 0 and toks[start - 1] == "for"
        after = toks[i + 2] if i + 2 < len(toks) else ""
        left, right = _nearest(heads, start, -1), _nearest(heads, i + 1, 1)
        forward = not has_for and (
            after in ("i", "my", "that", "when", "the", "it", "we") or _is(after, "§e")
        )
        pick = (right or left) if forward else (left or right)
        if pick is not None:
            pick.k = k
            used.add(i)
    for i, k in ords:  # next to a head
        if i in used or k == 0:
            continue
        h = _scan(toks, heads, i, 1, SKIP, 3) or _scan(toks, heads, i, -1, SKIP, 2)
        if h is not None and h.k is None:
            h.k = k
            used.add(i)
    for i, k in ords:  # "next": the first one after another anchor
        if k == 0:
            h = (
                _scan(toks, heads, i, 1, SKIP | TIME_WORDS, 4)
                or _nearest(heads, i, 1)
                or _nearest(heads, i, -1)
            )
            if h is not None:
                h.next, h.k = True, 1
                used.add(i)
    for i, k in ords:  # the rest: the nearest free head
        if i in used or k == 0:
            continue
        cands = [h for h in heads if h.k is None]
        if cands:
            h = min(cands, key=lambda h: (abs(h.pos - i), -h.pos))
            h.k = k


def _dedupe(heads: list[Head]) -> list[Head]:
    """A head naming the same thing as an earlier one without an ordinal of its own is a repetition
    ("when did I get thirsty for the 3rd time (drink went down)?")."""
    out: list[Head] = []
    for h in heads:
        same = next((o for o in out if (o.kind, o.name) == (h.kind, h.name)), None)
        if same is not None and h.k is None and not h.next:
            continue
        if same is not None and same.k is None and not same.next and h.k is not None:
            same.k = h.k
            continue
        out.append(h)
    return out


def _roles(toks: list[str], heads: list[Head]) -> None:
    """Visit roles of label heads (see the module doc, step 3)."""
    others = {h.pos for h in heads}
    for h in heads:
        if h.kind != "label":
            continue
        best: tuple[int, str] | None = None
        for step in (-1, 1):
            j = h.pos + step
            while (
                0 <= j < len(toks)
                and abs(j - h.pos) <= ROLE_WINDOW
                and j not in others
                and not _is(toks[j], "§s")
            ):
                role = "end" if toks[j] in END_WORDS else "start" if toks[j] in BEGIN_WORDS else None
                if role and (best is None or abs(j - h.pos) < best[0]):
                    best = (abs(j - h.pos), role)
                    break
                j += step
        if best:
            h.role = best[1]
    has_event = any(h.kind != "label" for h in heads)
    for h in heads:
        if h.kind == "label" and not h.role:
            h.role = "span" if has_event else "start"


def _field(text: str, toks: list[str], meta: dict) -> tuple[str, int] | None:
    """The asked field and where its cue is, or None."""
    for i, t in enumerate(toks):
        if _is(t, "§i"):
            return "count:" + meta[t], i
        if _is(t, "§v"):
            return "vital:" + meta[t][0], i
    best = None
    for name, pat in FIELD_CUES:
        m = re.search(pat, text)
        if m and (best is None or m.start() < best[1]):
            best = (name, m.start())
    return best


def _chain(toks: list[str], pts: list[Head]) -> tuple[Head, dict[str, Head]]:
    """The last anchor of a two-anchor chain and its link: ``(dependent, {"after"|"before": base})``."""
    a, b = pts[0], pts[1]
    nxt = [h for h in (a, b) if h.next]
    if nxt:
        dep = nxt[0]
        return dep, {"after": b if dep is a else a}
    for i, t in enumerate(toks):
        if t not in LINK_AFTER and t not in LINK_BEFORE:
            continue
        rel = "before" if t in LINK_BEFORE else "after"
        if t == "then" or (t == "followed" and i + 1 < len(toks) and toks[i + 1] == "by"):  # A then B
            dep = next((h for h in (a, b) if h.pos > i), None)
            if dep is not None and any(h.pos < i for h in (a, b)):
                return dep, {rel: b if dep is a else a}
            continue
        j = i + 1
        while j < len(toks) and toks[j] in ("the", "my", "i", "had", "have"):
            j += 1
        if j < len(toks) and toks[j] in PRONOUNS:
            dep = next((h for h in sorted((a, b), key=lambda h: -h.pos) if h.pos < i), None)
        else:
            base = next((h for h in (a, b) if h.pos > i and h.pos - i <= 8), None)
            dep = None if base is None else (b if base is a else a)
        if dep is not None:
            return dep, {rel: b if dep is a else a}
    if a.k not in (None, 1) and b.k in (None, 1):
        return b, {"after": a}
    if b.k not in (None, 1) and a.k in (None, 1):
        return a, {"after": b}
    return b, {"after": a}


def _plain_link(toks: list[str], h: Head) -> int:
    """+1/−1 for "after X"/"before X" right before the only anchor of a value question."""
    j = h.pos - 1
    while j >= 0 and toks[j] in ("i", "my", "the", "had", "was"):
        j -= 1
    if j >= 0 and toks[j] in ("after", "following"):
        return 1
    if j >= 0 and toks[j] in ("before", "preceding"):
        return -1
    return 0


def named_action(question: str, actions: list[str]) -> str | None:
    """The action of ``actions`` (an episode's action names) that ``question`` names word for word
    (``move_left`` as "move left", "move-left" or "move_left"; case-insensitive), the longest when several
    do; None when none does."""
    text = question.lower()
    for a in sorted(actions, key=lambda a: (-len(a), a)):
        words = [w for w in re.split(r"[\s_-]+", a.lower()) if w]
        if words and re.search(r"(?<!\w)" + r"[\s_-]+".join(map(re.escape, words)) + r"(?!\w)", text):
            return a
    return None


def parse_question(question: str, vocab: dict[str, list[str]] | None = None) -> Query:
    """The typed :class:`~libraryfs.features.episodes.query.Query` of ``question``.

    ``vocab`` is the episode's vocabulary (``EpisodeIndex.vocab``: ``events``, ``items``, ``vitals``,
    ``labels``, ``actions``); Crafter's events, items and vitals are always known. A count of a Crafter event
    the episode never has, asked with a word that names one of its actions, counts that action
    (:func:`named_action`; kind ``act``). Never raises on any text.
    """
    vocab = vocab or {}
    tg = tag(question, vocab)
    toks = _pair_changes(tg)
    heads = _heads(toks, tg.meta)
    _attach(toks, heads)
    heads = _dedupe(heads)
    _roles(toks, heads)
    text = " ".join(toks)
    meta = tg.meta
    mentions = [h.name for h in heads] + [
        meta[t] if _is(t, "§i") else meta[t][0] for t in toks if _is(t, "§i") or _is(t, "§v")
    ]
    q = Query(mentions=list(dict.fromkeys(mentions)))
    offs = [meta[t][0] for t in toks if _is(t, "§off")]
    ranges = [meta[t] for t in toks if _is(t, "§r")]
    steps = [meta[t] for t in toks if _is(t, "§s")]
    pts = [h for h in heads if h.point()]
    spans = [h for h in heads if not h.point()]
    rng = Span("range", lo=ranges[0][0], hi=ranges[0][1]) if ranges else None
    fld = _field(text, toks, meta)
    counting = COUNT_RE.search(text) and not (fld and fld[0].startswith("count:") and "times" not in text)
    if tg.order_cue and len(pts) >= 2:
        q.type, q.order = "order", (pts[0].ref(), pts[1].ref())
        q.field = "later" if tg.order_cue == "later" else ""
        return q
    if counting and (heads or ranges):
        counted = next((h for h in heads if h.kind != "label"), None) or heads[0] if heads else None
        if counted is None:
            return q
        if counted.kind == "label":
            q.count = Ref("occ", kind="visit", name=counted.name, within=rng)
        else:
            sp = Span("visit", name=spans[0].name, k=spans[0].k or 1) if spans else rng
            kind, name = counted.kind, counted.name
            act = named_action(question, vocab.get("actions", [])) if "events" in vocab else None
            if kind == "ev" and name not in vocab.get("events", []) and act is not None:
                # a built-in (Crafter) event this episode never has, read from a word that names one of its
                # actions ("drink" → collect_drink, while the episode's steps say act=drink): count the action
                kind, name = "act", act
                q.mentions = [act if m == counted.name else m for m in q.mentions]
            q.count = Ref("occ", kind=kind, name=name, within=sp)
        q.type = "count"
        return q
    ref = _point_ref(toks, pts, spans, steps, rng)
    if ref is None:
        return q
    q.type, q.field = ("value", fld[0]) if fld else ("step", "")
    if q.type == "step" and ref.op == "step":  # "what about step 5?": the step is given, the field unknown
        q.type = "value"
    if offs:
        ref = Ref("offset", base=ref, d=offs[0])
    elif q.type == "value" and len(pts) == 1 and not spans:
        d = _plain_link(toks, pts[0])
        if d:
            ref = Ref("offset", base=ref, d=d)
    q.ref = ref
    return q


def _point_ref(
    toks: list[str], pts: list[Head], spans: list[Head], steps: list[int], rng: Span | None
) -> Ref | None:
    """The reference a value/step question is about (before its offset)."""
    if not pts:
        if steps:
            return Ref("step", t=steps[0])
        if spans:
            return Ref("visit", name=spans[0].name, k=spans[0].k or 1, edge="start")
        return None
    if len(pts) >= 2:
        dep, link = _chain(toks, pts)
        ref = dep.ref()
        base = next(iter(link.values()))
        ref = ref.with_(**{next(iter(link)): base.ref()})
    else:
        dep = pts[0]
        ref = dep.ref()
    if ref.op == "occ":
        if spans:
            ref = ref.with_(within=Span("visit", name=spans[0].name, k=spans[0].k or 1))
        elif rng is not None:
            ref = ref.with_(within=rng)
    return ref
