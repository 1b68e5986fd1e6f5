"""Phrasing files (``/work/notes/phrasings/hand*.jsonl`` style): loading, slot meanings and slot formatters.

A phrasing file holds one JSON object per line::

    {"kind": "K8", "template": "Where was I {d:num} steps before my {k:ordnum} {event:noun}?",
     "field": "place", "slots": {"d": "2-5", "k": "ordinal or last", "direction": "before"}}

``kind`` is one of K1–K18 (their meaning: KINDS.md, reproduced in docs/episodes.md); ``field`` what a
value question asks (``action``, ``place``, ``area``, ``facing``, ``count:{item}``, ``vital:{vital}``, or
with the item/vital written in); ``slots`` describes or fixes the slots: a value such as ``2``, ``"last"``,
``"fixed: 1"``, ``"fixed: energy (written into the phrasing)"`` fixes it, a description (``"ordinal or
last"``, ``"2-5"``) leaves it to the generator; ``direction`` (before/after, up/down, rose/dropped),
``anchor`` (visit began/ended) and ``target`` (place/area) say which variant of the kind is meant, and are
read from the template's own words when absent.

Placeholders and formatters (``{name:format}``):

=====================  ===========================================================================
``{N}``, ``{M}``        step numbers (digits)
``{k}``, ``{j}``        ordinals: ``:ord`` first/second/…/last (default), ``:ordnum`` 1st/2nd/…/last,
                        ``:num`` 1/2/… (``last`` stays a word)
``{d}``                 a step offset: ``:num`` 2 (default), ``:word`` two
``{event}``             ``collect wood`` (``:base``, default), ``:past`` collected wood, ``:noun`` wood
``{event1}``/``{event2}``  collection, ``:gerund`` collecting wood
``{item}``              ``wood``, ``wood pickaxe`` (``:plain``, default), ``:the`` the wood pickaxe
``{vital}``             health / food / drink / energy
``{place}``/``{area}``  a place label (zone-1-2) / an area label (forest, lake shore)
=====================  ===========================================================================
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ORD_WORDS = (
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth fourteenth "
    "fifteenth sixteenth seventeenth eighteenth nineteenth twentieth"
).split()
NUM_WORDS = "zero one two three four five six seven eight nine ten eleven twelve".split()
KINDS = tuple(f"K{i}" for i in range(1, 19))
FAMILY = {
    "K1": "single",
    **{k: "occurrence" for k in ("K2", "K3", "K4", "K5", "K6", "K7")},
    **{k: "offset" for k in ("K8", "K9", "K11")},
    "K10": "transition",
    **{k: "counting" for k in ("K12", "K13", "K14", "K15")},
    **{k: "multihop" for k in ("K16", "K17", "K18")},
}
FAMILIES = ("single", "occurrence", "offset", "transition", "counting", "multihop")
#: (base, past, noun, gerund) of Crafter's events
EVENT_FORMS = {
    "collect_drink": ("drink water", "drank water", "drink of water", "drinking water"),
    "collect_sapling": (
        "collect a sapling",
        "collected a sapling",
        "sapling collection",
        "collecting a sapling",
    ),
    "place_plant": ("plant a sapling", "planted a sapling", "sapling planting", "planting a sapling"),
    "eat_cow": ("eat a cow", "ate a cow", "cow meal", "eating a cow"),
    "eat_plant": ("eat a plant", "ate a plant", "plant meal", "eating a plant"),
    "defeat_zombie": ("defeat a zombie", "defeated a zombie", "zombie kill", "defeating a zombie"),
    "defeat_skeleton": ("defeat a skeleton", "defeated a skeleton", "skeleton kill", "defeating a skeleton"),
    "wake_up": ("wake up", "woke up", "wake-up", "waking up"),
    "died": ("die", "died", "death", "dying"),
}
_PLACEHOLDER = re.compile(r"\{(\w+)(?::(\w+))?\}")
#: other spellings of placeholder names (lower-cased) → the names of KINDS.md
ALIASES = {
    "n": "N", "t": "N", "step": "N", "step1": "N", "n1": "N", "start": "N", "m": "M", "step2": "M", "n2": "M",
    "end": "M", "ord": "k", "ordinal": "k", "kth": "k", "nth": "k", "k1": "k", "k2": "j", "ordinal2": "j",
    "offset": "d", "delta": "d", "steps": "d", "e": "event", "e1": "event1", "e2": "event2",
    "event_1": "event1", "event_2": "event2", "zone": "place", "location": "place", "label": "place",
    "biome": "area", "region": "area", "inventory_item": "item", "stat": "vital",
}  # fmt: skip
#: words of the template text that fix an ordinal the slots leave open
_ORD_TEXT = {**{w: i + 1 for i, w in enumerate(ORD_WORDS)}, "last": -1, "latest": -1, "final": -1}


def event_forms(e: str) -> tuple[str, str, str, str]:
    """(base, past, noun, gerund) phrases of an event name."""
    if e in EVENT_FORMS:
        return EVENT_FORMS[e]
    verb, _, obj = e.partition("_")
    o = obj.replace("_", " ")
    art = "" if o in ("wood", "stone", "coal", "iron", "diamond") else "a "
    past = {"collect": "collected", "place": "placed", "make": "made"}.get(verb, verb + "ed")
    noun = {"collect": "collection", "place": "placement", "make": "crafting"}.get(verb, verb + "ing")
    ger = {"make": "making", "place": "placing"}.get(verb, verb + "ing")
    return f"{verb} {art}{o}", f"{past} {art}{o}", f"{o} {noun}", f"{ger} {art}{o}"


def ordinal(k: int, fmt: str | None) -> str:
    """An ordinal in a format: ``ord`` (second), ``ordnum`` (2nd), ``num`` (2); ``k = -1`` is ``last``."""
    if k == -1:
        return "last"
    if fmt == "num":
        return str(k)
    if fmt == "ordnum":
        suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
        return f"{k}{suffix}"
    return ORD_WORDS[k - 1] if k <= len(ORD_WORDS) else ordinal(k, "ordnum")


def render(name: str, fmt: str | None, value: Any) -> str:
    """The text of one slot value (see the module doc); unknown formats fall back to the default."""
    base = re.sub(r"\d+$", "", name)
    if base in ("k", "j"):
        return ordinal(int(value), fmt)
    if base == "d":
        return NUM_WORDS[value] if fmt == "word" and value < len(NUM_WORDS) else str(value)
    if base == "event":
        forms = event_forms(value)
        return {"past": forms[1], "noun": forms[2], "gerund": forms[3]}.get(fmt or "", forms[0])
    if base == "item":
        plain = str(value).replace("_", " ")
        return ("the " + plain if "_" in str(value) else plain) if fmt == "the" else plain
    return str(value)


@dataclass
class Template:
    """One phrasing line (see the module doc)."""

    kind: str
    text: str
    field: str | None
    slots: dict[str, Any]
    line: int
    placeholders: dict[str, str | None] = field(default_factory=dict)  #: name → format

    def fixed(self, name: str) -> Any:
        """The fixed value of slot ``name`` (an int, ``-1`` for last, or a string), or None."""
        v = self.slots.get(name)
        if v is None or isinstance(v, bool):
            return None
        if isinstance(v, int):
            return v
        s = str(v).strip().lower()
        explicit = s.startswith("fixed")
        if explicit:
            s = s.split(":", 1)[1].strip() if ":" in s else s[5:].strip()
        word = re.split(r"[\s(,;]", s, maxsplit=1)[0] if s else ""
        if re.fullmatch(r"\d+(?:st|nd|rd|th)?", word):
            return int(re.match(r"\d+", word).group())
        if word in ("last", "final", "latest"):
            return -1
        if word in ORD_WORDS:
            return ORD_WORDS.index(word) + 1
        if explicit or s in (
            "health",
            "food",
            "drink",
            "energy",
            "place",
            "area",
            "before",
            "after",
            "up",
            "down",
        ):
            return word
        return None

    def from_text(self, name: str, near: tuple[str, ...]) -> int | None:
        """An ordinal (or, for ``d``, a step count) written into the template's words when the slot is neither
        a placeholder nor fixed: the one nearest to the first of the ``near`` placeholders present."""
        if name in self.placeholders or self.fixed(name) is not None:
            return None
        text = self.text.lower()
        if name == "d":
            m = re.search(r"\b(\d+|" + "|".join(NUM_WORDS[1:]) + r") steps?\b", text)
            if not m:
                return None
            w = m.group(1)
            return int(w) if w.isdigit() else NUM_WORDS.index(w)
        found = [(m.start(), v) for w, v in _ORD_TEXT.items() for m in re.finditer(rf"\b{w}\b", text)]
        found += [(m.start(), int(m.group(1))) for m in re.finditer(r"\b(\d+)(?:st|nd|rd|th)\b", text)]
        if not found:
            return None
        anchor = next((text.find("{" + p) for p in near if "{" + p in text), 0)
        return min(found, key=lambda f: (abs(f[0] - anchor), f[0]))[1]

    def asked(self) -> str | None:
        """The field a value question asks: ``field`` when given, else read from the template's words."""
        if self.field:
            return self.field
        w = self.words()
        if "item" in self.placeholders:
            return "count:{item}"
        if "vital" in self.placeholders:
            return "vital:{vital}"
        for name, pat in (
            ("action", r"\b(?:action|do|doing|did)\b"),
            ("facing", r"\b(?:facing|face|front)\b"),
            ("area", r"\b(?:area|region|terrain|biome)\b"),
            ("place", r"\b(?:where|zone|place|location)\b"),
        ):
            if re.search(pat, w):
                return name
        return None

    def allows_last(self, name: str) -> bool:
        """Whether a free ordinal slot may be "last" (its description does not say otherwise)."""
        s = str(self.slots.get(name, "")).lower()
        return "not last" not in s and "no last" not in s

    def d_range(self) -> tuple[int, int]:
        """Range of a free offset slot ``d`` (its description "2-5"; default 2–5)."""
        m = re.search(r"(\d+)\s*[-–]\s*(\d+)", str(self.slots.get("d", "")))
        return (int(m.group(1)), int(m.group(2))) if m else (2, 5)

    def words(self) -> str:
        """The template's literal words (placeholders removed), lower-cased."""
        return _PLACEHOLDER.sub(" ", self.text).lower()

    def variant(self, key: str, options: dict[str, tuple[str, ...]], default: str) -> str:
        """Which variant of the kind is meant: the slot ``key`` when it names one, else the first option
        whose cue words occur in the template, else ``default``."""
        given = str(self.slots.get(key, "")).lower()
        for name, cues in options.items():
            if given and any(re.search(rf"\b{c}", given) for c in (name, *cues)):
                return name
        words = self.words()
        for name, cues in options.items():
            if any(re.search(rf"\b{c}\b", words) for c in cues):
                return name
        return default


def load(path: str | Path) -> list[Template]:
    """Templates of a phrasing file; raises ``ValueError`` naming the line of a malformed one, or when the
    file holds no phrasing line."""
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            kind, text = str(d["kind"]).upper(), str(d["template"])
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}:{n}: not a phrasing line ({e})") from None
        if kind not in KINDS:
            raise ValueError(f"{path}:{n}: unknown kind {kind!r}")
        slots = d.get("slots") if isinstance(d.get("slots"), dict) else {}
        text = _PLACEHOLDER.sub(_canonical, text)
        slots = {_alias(k): v for k, v in slots.items()}
        ph = {m.group(1): m.group(2) for m in _PLACEHOLDER.finditer(text)}
        out.append(Template(kind, text, normal_field(d.get("field")), slots, n, ph))
    if not out:
        raise ValueError(f"{path}: no phrasing lines")
    return out


def _alias(name: str) -> str:
    if name in ("N", "M", "k", "j", "d") or name.lower() not in ALIASES:
        return name if name in ("N", "M") else name.lower() if name.lower() in ALIASES.values() else name
    return ALIASES[name.lower()]


def _canonical(m: re.Match) -> str:
    name = _alias(m.group(1))
    return "{" + name + (f":{m.group(2)}" if m.group(2) else "") + "}"


def normal_field(f: Any) -> str | None:
    """A ``field`` as written in a phrasing file, in the generator's names: ``action``, ``place``, ``area``,
    ``facing``, ``where``, ``count:<item|{item}>``, ``vital:<vital|{vital}>`` (None when absent/unknown)."""
    if not isinstance(f, str) or not f.strip():
        return None
    s = f.strip().lower().replace(" ", "_")
    head, _, rest = s.partition(":")
    if head in ("action", "act", "doing", "move"):
        return "action"
    if head in ("place", "zone", "location", "position_label"):
        return "place"
    if head in ("area", "region", "terrain", "biome"):
        return "area"
    if head in ("facing", "face", "front", "in_front"):
        return "facing"
    if head in ("where", "location_label"):
        return "where"
    if head in ("count", "inventory", "inv", "item", "amount", "count_of_item"):
        return "count:" + (rest or "{item}").replace("_of_", "")
    if head in ("vital", "level", "vital_level", "stat"):
        return "vital:" + (rest or "{vital}")
    if head in ("health", "food", "drink", "energy"):
        return "vital:" + head
    return None


#: a placeholder with a plural ``s`` written after it (``{event:noun}s``)
_PLACEHOLDER_S = re.compile(r"\{(\w+)(?::(\w+))?\}(s\b)?")


def plural(phrase: str) -> str:
    """The plural of a noun phrase: its head noun pluralised, which is the word before ``of`` when there is
    one (``drink of water`` → ``drinks of water``), else the last word (``wood collection`` → ``wood
    collections``); ``-s/-x/-ch/-sh`` take ``-es``, a consonant + ``y`` becomes ``-ies``."""
    words = phrase.split(" ")
    i = words.index("of") - 1 if "of" in words[1:] else len(words) - 1
    w = words[i]
    if re.search(r"(s|x|ch|sh)$", w):
        w += "es"
    elif re.search(r"[^aeiou]y$", w):
        w = w[:-1] + "ies"
    else:
        w += "s"
    words[i] = w
    return " ".join(words)


def fill(t: Template, values: dict[str, Any]) -> str:
    """The template with its placeholders replaced by ``values`` (see :func:`render`); a placeholder
    followed by a plural ``s`` (``{event:noun}s``) becomes the phrase's :func:`plural` (``drinks of water``,
    not ``drink of waters``)."""

    def one(m: re.Match) -> str:
        text = render(m.group(1), m.group(2), values[m.group(1)])
        return plural(text) if m.group(3) else text

    return _PLACEHOLDER_S.sub(one, t.text)
