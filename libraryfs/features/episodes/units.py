"""Scene-event units: one structured record m_t per step of an episode (S3Mem, PAPERS.md §4 "Write").

m_t = (t, action a_t, salient objects O_t, event types E_t, relations R_t, state/inventory S_t,
location L_t, summary u_t). A step record appended to ``steps.jsonl`` may carry these as structured fields
(an environment such as Crafter gives them: they are taken as they are) or only as free text; free text is
turned into fields by :func:`extract_text` (deterministic) or, when configured, by the LLM
(:mod:`libraryfs.features.episodes.llm`).

:class:`EpisodeState` carries what a unit needs from the steps before it — inventory (for gained/lost),
per-event and per-item counters (occurrence ordinals ``#k``), the current place and its visit count — so
units can be built one appended step at a time and still carry their anchor marks (``marks``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any

VITALS = ("health", "food", "drink", "energy")


@dataclass
class Unit:
    """One step's unit. ``marks`` holds anchor ordinals computed from the episode so far:
    ``{"visit": k}`` when the step starts the k-th visit to ``location``, ``"ev": {event: k}`` (k-th
    occurrence of each event), ``"gain": {item: k}`` / ``"lose": {item: k}`` (k-th transition)."""

    t: int
    action: str = ""
    objects: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    relations: list[list[str]] = field(default_factory=list)  #: [subject, relation, object] triples
    inventory: dict[str, int] = field(default_factory=dict)
    vitals: dict[str, int] = field(default_factory=dict)
    location: str = ""
    position: list[int] | None = None
    gained: list[str] | None = field(default_factory=list)  #: None until derived by EpisodeState.mark
    lost: list[str] | None = field(default_factory=list)
    summary: str = ""
    marks: dict[str, Any] = field(default_factory=dict)
    source: str = "structured"  #: "structured" | "text" | "llm"

    @property
    def facing(self) -> str:
        """Object of the ``facing`` relation, or ""."""
        return next((o for s, r, o in self.relations if r == "facing"), "")

    def to_json(self) -> dict:
        """JSON-ready dict (all fields)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> Unit:
        """Inverse of :meth:`to_json` (unknown keys ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    # -- renderings ---------------------------------------------------------------------------------
    def line(self) -> str:
        """The compact evidence line of the step (no inventory: see :meth:`state_line`), e.g.
        ``t=412 act=move_left at=zone-2-2 visit=4 face=tree near=cow,water ev=collect_wood#2 gain=wood#3``."""
        parts = [f"t={self.t}", f"act={self.action or '?'}"]
        if self.location:
            parts.append(f"at={self.location}")
        if "visit" in self.marks:
            parts.append(f"visit={self.marks['visit']}")
        if self.facing:
            parts.append(f"face={self.facing}")
        if self.objects:
            parts.append("near=" + ",".join(self.objects))
        ev = self.marks.get("ev", {})
        if self.events:
            parts.append("ev=" + ",".join(f"{e}#{ev[e]}" if e in ev else e for e in self.events))
        for key, items in (("gain", self.gained), ("lose", self.lost)):
            nth = self.marks.get(key, {})
            if items:
                parts.append(f"{key}=" + ",".join(f"{i}#{nth[i]}" if i in nth else i for i in items))
        return " ".join(parts)

    def occurrence_line(self, kind: str, name: str) -> str:
        """The short line of one occurrence: ``t=317 at=zone-0-2 ev=collect_stone#1`` (kind ev/gain/lose/visit)."""
        if kind == "visit":
            return f"t={self.t} at={self.location} visit={self.marks.get('visit', '?')}"
        k = self.marks.get(kind, {}).get(name)
        return f"t={self.t} {kind}={name}#{k}" if k else f"t={self.t} {kind}={name}"

    def state_line(self) -> str:
        """The state fact of the step: ``t=412 inv=sapling:1,wood:2 pos=34,40 hp=9 food=7 drink=6 energy=8``."""
        inv = ",".join(f"{k}:{v}" for k, v in sorted(self.inventory.items())) or "none"
        parts = [f"t={self.t}", f"inv={inv}"]
        if self.position:
            parts.append(f"pos={self.position[0]},{self.position[1]}")
        parts += [f"{'hp' if k == 'health' else k}={self.vitals[k]}" for k in VITALS if k in self.vitals]
        return " ".join(parts)

    def terms(self) -> str:
        """Text indexed by BM25: the line, the state line and the summary."""
        return f"{self.line()} {self.state_line()} {self.summary}"


@dataclass
class EpisodeState:
    """What the next unit needs from the previous ones (JSON-serialisable, stored with the episode)."""

    next_t: int = 0
    place: str = ""
    visit_start: int = -1  #: step that started the current visit to ``place``
    visits: dict[str, int] = field(default_factory=dict)
    ev: dict[str, int] = field(default_factory=dict)
    gain: dict[str, int] = field(default_factory=dict)
    lose: dict[str, int] = field(default_factory=dict)
    inventory: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        """JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict | None) -> EpisodeState:
        """Inverse of :meth:`to_json`; ``None`` gives a fresh state."""
        return cls(**(d or {}))

    def mark(self, u: Unit) -> Unit:
        """Fill ``u.gained``/``u.lost`` (when not given) and ``u.marks``; advance the state. Returns ``u``."""
        if u.gained is None:  # not given: derived from the inventory change
            u.gained = sorted(k for k, v in u.inventory.items() if v > self.inventory.get(k, 0))
        if u.lost is None:
            u.lost = sorted(k for k, v in self.inventory.items() if u.inventory.get(k, 0) < v)
        marks: dict[str, Any] = {}
        if u.location and u.location != self.place:
            self.visits[u.location] = self.visits.get(u.location, 0) + 1
            marks["visit"] = self.visits[u.location]
            self.place = u.location
            self.visit_start = u.t
        for key, names in (("ev", u.events), ("gain", u.gained), ("lose", u.lost)):
            counters = getattr(self, key)
            for n in names:
                counters[n] = counters.get(n, 0) + 1
            if names:
                marks[key] = {n: counters[n] for n in names}
        u.marks = marks
        self.inventory = dict(u.inventory)
        self.next_t = u.t + 1
        if not u.summary:
            u.summary = summarize(u)
        return u


def summarize(u: Unit) -> str:
    """Deterministic one-line summary u_t (≤ ~25 words)."""
    bits = [u.action or "step"]
    if u.location:
        bits.append(f"in {u.location}")
    if u.facing:
        bits.append(f"facing {u.facing}")
    if u.objects:
        bits.append("near " + ", ".join(u.objects[:4]))
    if u.events:
        bits.append("events " + ", ".join(u.events))
    if u.gained:
        bits.append("gained " + ", ".join(u.gained))
    if u.lost:
        bits.append("lost " + ", ".join(u.lost))
    return "; ".join(bits)


STRUCTURED_KEYS = (
    "nearby",
    "objects",
    "inventory",
    "place",
    "location",
    "position",
    "events",
    "achievements",
)


def has_structure(rec: dict) -> bool:
    """Whether a step record carries structured fields (else its text must be extracted)."""
    return any(k in rec for k in STRUCTURED_KEYS)


def from_record(rec: dict) -> Unit:
    """A unit from a structured step record (Crafter's fields, or the unit's own field names).

    Raises ``ValueError`` when ``t`` is missing or not an integer.
    """
    t = rec.get("t")
    if not isinstance(t, int):
        raise ValueError(f"step record needs an integer 't': {str(rec)[:80]}")
    rel = [list(r) for r in rec.get("relations", [])]
    if rec.get("facing") and not any(r[1] == "facing" for r in rel):
        rel.insert(0, ["agent", "facing", str(rec["facing"])])
    if rec.get("sleeping"):
        rel.append(["agent", "is", "sleeping"])
    return Unit(
        t=t,
        action=str(rec.get("action", "")),
        objects=sorted(str(o) for o in rec.get("objects", rec.get("nearby", []))),
        events=[str(e) for e in rec.get("events", rec.get("achievements", []))],
        relations=rel,
        inventory={str(k): int(v) for k, v in (rec.get("inventory") or {}).items() if int(v) > 0},
        vitals={str(k): int(v) for k, v in (rec.get("vitals") or {}).items()},
        location=str(rec.get("location", rec.get("place", "")) or ""),
        position=[int(v) for v in rec["position"]] if rec.get("position") else None,
        gained=sorted(rec["gained"]) if "gained" in rec else None,
        lost=sorted(rec["lost"]) if "lost" in rec else None,
        summary=str(rec.get("summary", "")),
        source="structured",
    )


# -- deterministic extraction from free text ----------------------------------------------------------------
_ITEM = r"[a-z][a-z_]*"
_RE = {
    "action": re.compile(r"\baction[:\s]+(\w+)|\bI (?:did|chose|took action) (\w+)", re.I),
    "pos": re.compile(r"\(\s*(-?\d+)\s*,\s*(-?\d+)\s*\)"),
    "place": re.compile(r"\b(?:in|at|entered)\s+((?:zone|room|area)[-\w]*)", re.I),
    "facing": re.compile(r"\bfacing[:\s]+(?:an?\s+|the\s+)?(" + _ITEM + ")", re.I),
    "nearby": re.compile(r"\b(?:nearby|near|I see|you see)[:\s]+([a-z_ ,]+?)(?:\.|$)", re.I),
    "events": re.compile(r"\bevents?[:\s]+([a-z_ ,]+?)(?:\.|$)", re.I),
    "gained": re.compile(
        r"\b(?:gained|got|collected|picked up)[:\s]+(?:an?\s+|the\s+)?([a-z_ ,]+?)(?:\.|$)", re.I
    ),
    "lost": re.compile(r"\b(?:lost|used up|dropped)[:\s]+(?:an?\s+|the\s+)?([a-z_ ,]+?)(?:\.|$)", re.I),
    "inventory": re.compile(r"\binventory[:\s]+([^.]*)", re.I),
    "vital": re.compile(r"\b(health|food|drink|energy)[:\s]+(\d+)", re.I),
}


def _names(s: str) -> list[str]:
    out = []
    for part in re.split(r",|\band\b", s):
        w = part.strip().lower().replace(" ", "_")
        if w and w not in ("empty", "none", "nothing"):
            out.append(w)
    return sorted(set(out))


def extract_text(t: int, text: str) -> Unit:
    """Deterministic extraction of a unit from a free-text step (the fallback of the LLM extractor).

    Recognises phrases such as ``action X``, ``at (x, y) in zone-1-2``, ``facing tree``, ``Nearby: a, b``,
    ``Events: e``, ``Gained: i``, ``Inventory: wood 2, sapling 1``, ``health 9``.
    """
    m = _RE["action"].search(text)
    action = (m.group(1) or m.group(2)).lower() if m else ""
    pos = _RE["pos"].search(text)
    place = _RE["place"].search(text)
    facing = _RE["facing"].search(text)
    near = _RE["nearby"].search(text)
    ev = _RE["events"].search(text)
    inv: dict[str, int] = {}
    mi = _RE["inventory"].search(text)
    if mi:
        for name, n in re.findall(r"([a-z][a-z_ ]*?)\s*[: ]\s*(\d+)", mi.group(1).lower()):
            if int(n) > 0:
                inv[name.strip().replace(" ", "_")] = int(n)
    g, lo = _RE["gained"].search(text), _RE["lost"].search(text)
    return Unit(
        t=t,
        action=action,
        objects=_names(near.group(1)) if near else [],
        events=_names(ev.group(1)) if ev else [],
        relations=[["agent", "facing", facing.group(1).lower()]] if facing else [],
        inventory=inv,
        vitals={k.lower(): int(v) for k, v in _RE["vital"].findall(text)},
        location=place.group(1).lower() if place else "",
        position=[int(pos.group(1)), int(pos.group(2))] if pos else None,
        gained=_names(g.group(1)) if g else None,
        lost=_names(lo.group(1)) if lo else None,
        source="text",
    )


def unit_from_line(line: str | bytes | dict, extractor: Any = None) -> Unit:
    """A unit (before :meth:`EpisodeState.mark`) from one ``steps.jsonl`` line.

    Structured fields are taken as given; a record with only ``text`` goes to ``extractor(t, text)``
    (the LLM extractor) when one is given and it returns a unit, else to :func:`extract_text`.
    Raises ``ValueError`` for a line that is not a JSON object with an integer ``t``.
    """
    try:
        rec = line if isinstance(line, dict) else json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not a JSON line: {e}") from None
    if not isinstance(rec, dict):
        raise ValueError("a step must be a JSON object")
    if has_structure(rec):
        return from_record(rec)
    t = rec.get("t")
    if not isinstance(t, int):
        raise ValueError("step record needs an integer 't'")
    text = str(rec.get("text") or rec.get("observation") or "")
    u = extractor(t, text) if extractor is not None else None
    if u is None:
        u = extract_text(t, text)
    if rec.get("action") and not u.action:
        u.action = str(rec["action"])
    return u
