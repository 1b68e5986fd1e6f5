"""Anchor tuples from questions about an episode (S3Mem's anchor-aware retrieval, PAPERS.md §4).

An :class:`Anchors` tuple names what must be found before anything is read:

- a **target-step** anchor — ``at step 412`` (``target_t``) or ``between step 200 and step 450`` (``t_range``);
- an **occurrence** anchor — ``the second time I collected wood``, ``my last visit to zone-2-1``
  (``kind`` ∈ {``ev``, ``visit``, ``gain``, ``lose``}, ``name``, ordinal ``k``; ``k = -1`` is the last);
- a **state-transition** anchor — ``when I first got the wood pickaxe``, ``after I lost sapling`` (kind
  ``gain``/``lose``, the item as ``name``);
- a **temporal offset** — ``two steps after``, ``right before`` (``offset``, in steps; signed);
- the **focus** — what is asked about the target step: ``action``, ``place``, ``facing``, ``near``,
  ``inv:<item>``, ``step`` (which step) or ``count`` (how many occurrences in ``t_range``).

Parsing is deterministic (regular expressions over a normalised question); ``vocab`` — the event, item and
place names of the episode — lets names with underscores be matched from plain words (``wood pickaxe``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

NUMBER_WORDS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "a": 1,
}
ORDINALS = {
    "first": 1,
    "second": 2,
    "third": 3,
    "fourth": 4,
    "fifth": 5,
    "sixth": 6,
    "seventh": 7,
    "eighth": 8,
    "ninth": 9,
    "tenth": 10,
    "last": -1,
    "final": -1,
    "latest": -1,
    "most recent": -1,
}
#: event names of Crafter (used besides an episode's own vocabulary)
CRAFTER_EVENTS = (
    "collect_coal",
    "collect_diamond",
    "collect_drink",
    "collect_iron",
    "collect_sapling",
    "collect_stone",
    "collect_wood",
    "defeat_skeleton",
    "defeat_zombie",
    "eat_cow",
    "eat_plant",
    "make_iron_pickaxe",
    "make_iron_sword",
    "make_stone_pickaxe",
    "make_stone_sword",
    "make_wood_pickaxe",
    "make_wood_sword",
    "place_furnace",
    "place_plant",
    "place_stone",
    "place_table",
    "wake_up",
    "died",
)
CRAFTER_ITEMS = (
    "sapling",
    "wood",
    "stone",
    "coal",
    "iron",
    "diamond",
    "wood_pickaxe",
    "stone_pickaxe",
    "iron_pickaxe",
    "wood_sword",
    "stone_sword",
    "iron_sword",
)

_VERBS = [  # (pattern, canonical verb) applied in order to the lower-cased question
    (r"\bdrank( some)? water\b", "collect drink"),
    (r"\bdrink water\b", "collect drink"),
    (r"\bwoke up\b|\bwake up\b|\bwoken up\b", "wake up"),
    (r"\bcollected\b|\bcollecting\b|\bgathered\b", "collect"),
    (r"\bplaced\b|\bplacing\b|\bput down\b", "place"),
    (r"\bmade\b|\bcrafted\b|\bcraft\b|\bmaking\b", "make"),
    (r"\bate\b|\beaten\b|\beating\b", "eat"),
    (r"\bdefeated\b|\bkilled\b|\bkill\b", "defeat"),
    (r"\bdie\b|\bdeath\b", "died"),
    (r"\bget\b|\bgot\b|\bgained\b|\bobtained\b|\breceived\b|\bpicked up\b|\bacquired\b", "gain"),
    (r"\blost\b|\bused up\b|\bspent\b", "lose"),
    (r"\bvisited\b|\bentered\b|\bwent to\b", "visit"),
]


@dataclass
class Anchors:
    """The anchor tuple of a question (see module doc). ``resolved`` is filled by recall."""

    focus: str = ""
    target_t: int | None = None
    t_range: tuple[int, int] | None = None
    kind: str | None = None
    name: str | None = None
    k: int | None = None
    offset: int = 0
    mentions: list[str] = field(default_factory=list)  #: vocabulary names mentioned anywhere

    def to_json(self) -> dict:
        """JSON-ready dict."""
        d = asdict(self)
        d["t_range"] = list(self.t_range) if self.t_range else None
        return d

    def any(self) -> bool:
        """Whether the question has a step or occurrence anchor."""
        return self.target_t is not None or self.kind is not None or self.t_range is not None


def normalise(q: str) -> str:
    """Lower-case, canonical verbs, articles removed, single spaces."""
    s = " " + q.lower().replace("?", " ").replace(",", " ") + " "
    for pat, rep in _VERBS:
        s = re.sub(pat, rep, s)
    s = re.sub(r"\b(a|an|the|some|my|of)\b", " ", s)
    return re.sub(r"\s+", " ", s).strip()


def _number(w: str) -> int | None:
    if w.isdigit():
        return int(w)
    return NUMBER_WORDS.get(w)


def _ordinal(s: str) -> int | None:
    m = re.search(r"\b(\d+)(?:st|nd|rd|th)\b", s)
    if m:
        return int(m.group(1))
    best = None
    for w, k in ORDINALS.items():
        m = re.search(rf"\b{w}\b", s)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), k)
    return best[1] if best else None


def _phrase(name: str) -> str:
    return re.escape(name.replace("_", " ").replace("-", " ")).replace(r"\ ", r"[ _-]")


def parse_question(question: str, vocab: dict[str, list[str]] | None = None) -> Anchors:
    """The anchor tuple of ``question``.

    ``vocab``: ``{"events": [...], "items": [...], "places": [...], "objects": [...]}`` of the episode
    (Crafter's events and items are always known). Unknown phrasing gives an :class:`Anchors` without
    ``kind``/``target_t`` (recall then ranks by text only).
    """
    vocab = vocab or {}
    events = sorted(set(vocab.get("events", [])) | set(CRAFTER_EVENTS), key=len, reverse=True)
    items = sorted(set(vocab.get("items", [])) | set(CRAFTER_ITEMS), key=len, reverse=True)
    places = sorted(set(vocab.get("places", [])), key=len, reverse=True)
    objects = sorted(set(vocab.get("objects", [])), key=len, reverse=True)
    raw = question.lower()
    s = normalise(question)
    a = Anchors()

    # focus
    m_inv = re.search(r"how (?:many|much) ([a-z_ ]+?) did i (?:have|hold|carry)", s)
    if re.search(r"how many times", s):
        a.focus = "count"
    elif m_inv:
        item = m_inv.group(1).strip()
        a.focus = "inv:" + next((i for i in items if re.fullmatch(_phrase(i), item)), item.replace(" ", "_"))
    elif re.search(r"\b(which|what) step\b|\bwhen did\b|\bat which\b", s):
        a.focus = "step"
    elif re.search(r"what action|what did i do|which action", s):
        a.focus = "action"
    elif re.search(r"\bfacing\b", s):
        a.focus = "facing"
    elif re.search(r"\bwhere\b|which zone|what zone|which place", s):
        a.focus = "place"
    elif re.search(r"\bnear\b|\bnearby\b|around me", s):
        a.focus = "near"

    # target-step anchors
    m = re.search(r"between step (\d+) and (?:step )?(\d+)", s)
    if m:
        a.t_range = (int(m.group(1)), int(m.group(2)))
    else:
        m = re.search(r"\b(?:at|on|in|during) step (\d+)\b|\bt ?= ?(\d+)\b", s)
        if m:
            a.target_t = int(m.group(1) or m.group(2))

    # temporal offset
    m = re.search(
        r"\b(\d+|one|two|three|four|five|six|seven|eight|nine|ten) steps? (after|later|before|earlier)", s
    )
    if m:
        n = _number(m.group(1)) or 0
        a.offset = n if m.group(2) in ("after", "later") else -n
    elif re.search(r"\b(right|just|immediately) after\b|\bstep after\b|\bnext step after\b", s):
        a.offset = 1
    elif re.search(r"\b(right|just|immediately) before\b|\bstep before\b", s):
        a.offset = -1

    # occurrence / transition anchors (event, gained/lost item, visit)
    for e in events:
        if re.search(rf"\b{_phrase(e)}\b", s):
            a.kind, a.name = "ev", e
            break
    if a.kind is None:
        for verb, kind in (("gain", "gain"), ("lose", "lose")):
            for i in items:
                if re.search(rf"\b{verb} (?:first |second |third |last )?{_phrase(i)}\b", s):
                    a.kind, a.name = kind, i
                    break
            if a.kind:
                break
    if a.kind is None and a.focus != "count":
        for p in places:
            if re.search(rf"\b{re.escape(p)}\b", raw) and re.search(r"\bvisit|\bwas in\b|\bbeen in\b", s):
                a.kind, a.name = "visit", p
                break
    if a.kind is None and a.focus == "count":
        for e in events:
            if re.search(rf"\b{_phrase(e)}\b", s):
                a.kind, a.name = "ev", e
                break
    if a.kind is not None and a.focus != "count":
        a.k = _ordinal(s) or 1
    if a.focus == "count" and a.kind is None:
        for i in items:
            if re.search(rf"\bgain {_phrase(i)}\b", s):
                a.kind, a.name = "gain", i

    a.mentions = [
        n
        for n in (*events, *items, *places, *objects)
        if re.search(rf"\b{_phrase(n)}\b", s) or re.search(rf"\b{re.escape(n)}\b", raw)
    ]
    return a
