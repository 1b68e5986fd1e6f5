"""Deterministic extraction of a unit from a free-text step (the fallback of the LLM extractor).

It reads the phrases an agent's log line typically carries — ``action X``, ``at (x, y) in zone-1-2, area
forest``, ``Facing tree``, ``Nearby: a, b``, ``Events: e``, ``Gained: i``, ``Lost: i``, ``Inventory: wood 2``,
``Inventory change: wood +1``, ``Vitals change: food -1``, ``health 9`` — and leaves out what it does not
find (an absent inventory is then carried from the previous step by
:meth:`~libraryfs.features.episodes.units.EpisodeState.mark`).
"""

from __future__ import annotations

import re

from libraryfs.features.episodes.units import Unit

_ITEM = r"[a-z][a-z_]*"
_RE = {
    "action": re.compile(r"\baction[:\s]+(\w+)|\bI (?:did|chose|took action) (\w+)", re.I),
    "pos": re.compile(r"\(\s*(-?\d+)\s*,\s*(-?\d+)\s*\)"),
    "place": re.compile(r"\b(?:in|at|entered)\s+((?:zone|room)[-\w]*)", re.I),
    "area": re.compile(r"\barea[:\s]+([a-z][a-z ]*?)\s*(?:[.,;]|$)", re.I),
    "facing": re.compile(r"\bfacing[:\s]+(?:an?\s+|the\s+)?(" + _ITEM + ")", re.I),
    "nearby": re.compile(r"\b(?:nearby|near|I see|you see)[:\s]+([a-z_ ,]+?)(?:\.|$)", re.I),
    "events": re.compile(r"\bevents?[:\s]+([a-z_ ,]+?)(?:\.|$)", re.I),
    "gained": re.compile(
        r"\b(?:gained|got|collected|picked up)[:\s]+(?:an?\s+|the\s+)?([a-z_ ,]+?)(?:\.|$)", re.I
    ),
    "lost": re.compile(r"\b(?:lost|used up|dropped)[:\s]+(?:an?\s+|the\s+)?([a-z_ ,]+?)(?:\.|$)", re.I),
    "inventory": re.compile(r"\binventory[:\s]+(?!change)([^.]*)", re.I),
    "inv_delta": re.compile(r"\binventory change[:\s]+([^.]*)", re.I),
    "vit_delta": re.compile(r"\bvitals? change[:\s]+([^.]*)", re.I),
    "vital": re.compile(r"\b(health|food|drink|energy)[:\s]+(\d+)", re.I),
}


def _names(s: str) -> list[str]:
    out = set()
    for part in re.split(r",|\band\b", s):
        w = part.strip().lower().replace(" ", "_")
        if w and w not in ("empty", "none", "nothing"):
            out.add(w)
    return sorted(out)


def _deltas(s: str) -> dict[str, int]:
    return {
        name.strip().replace(" ", "_"): int(sign + n)
        for name, sign, n in re.findall(r"([a-z][a-z_ ]*?)\s*([+-])\s*(\d+)", s.lower())
        if int(n)
    }


def extract_text(t: int, text: str) -> Unit:
    """A unit (source ``"text"``) from the phrases of a free-text step; see the module doc."""
    m = _RE["action"].search(text)
    action = (m.group(1) or m.group(2)).lower() if m else ""
    pos, place, area = _RE["pos"].search(text), _RE["place"].search(text), _RE["area"].search(text)
    facing, near, ev = _RE["facing"].search(text), _RE["nearby"].search(text), _RE["events"].search(text)
    inv: dict[str, int] | None = None
    mi = _RE["inventory"].search(text)
    if mi:
        inv = {}
        for name, n in re.findall(r"([a-z][a-z_ ]*?)\s*[: ]\s*(\d+)", mi.group(1).lower()):
            if int(n) > 0:
                inv[name.strip().replace(" ", "_")] = int(n)
    g, lo = _RE["gained"].search(text), _RE["lost"].search(text)
    di, dv = _RE["inv_delta"].search(text), _RE["vit_delta"].search(text)
    vitals = {k.lower(): int(v) for k, v in _RE["vital"].findall(text)}
    locations = {}
    if place:
        locations["place"] = place.group(1).lower()
    if area:
        locations["area"] = area.group(1).strip().lower()
    return Unit(
        t=t,
        action=action,
        objects=_names(near.group(1)) if near else [],
        events=_names(ev.group(1)) if ev else [],
        relations=[["agent", "facing", facing.group(1).lower()]] if facing else [],
        inventory=inv,
        vitals=vitals or None,
        locations=locations,
        position=[int(pos.group(1)), int(pos.group(2))] if pos else None,
        inventory_delta=_deltas(di.group(1)) if di else None,
        vitals_delta=_deltas(dv.group(1)) if dv else None,
        gained=_names(g.group(1)) if g else None,
        lost=_names(lo.group(1)) if lo else None,
        source="text",
    )
