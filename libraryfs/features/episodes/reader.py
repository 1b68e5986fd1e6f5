"""The deterministic reader: answers a question from packed evidence text alone.

:func:`parse_lines` turns evidence lines (the formats of :mod:`.index`: unit, state, key and observation
lines) into per-step facts; :class:`EvidenceTimeline` exposes them as a
:class:`~libraryfs.features.episodes.resolve.Timeline`; :func:`read` parses the question
(:func:`~libraryfs.features.episodes.anchors.parse_question`, with the labels and names that occur in the
evidence as vocabulary) and resolves it over that timeline. Nothing but the question and the evidence text
is read: an answer is None when the evidence does not determine it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from libraryfs.features.episodes.anchors import parse_question
from libraryfs.features.episodes.index import OCC_KINDS
from libraryfs.features.episodes.query import Query
from libraryfs.features.episodes.resolve import resolve
from libraryfs.features.episodes.units import LOCATION_KEYS, VITALS

_LINE = re.compile(r"^t=(\d+)\s+(.*)$")
_KV = re.compile(r'([A-Za-z_][\w]*)=((?:"(?:[^"\\]|\\.)*"|[^\s"])+)')


def _elems(value: str) -> list[str]:
    """Comma-separated elements of a value; quoted elements keep their ``#k`` suffix."""
    out = []
    for m in re.finditer(r'("(?:[^"\\]|\\.)*"|[^,"]+)(#\d+)?', value):
        part = m.group(1)
        name = json.loads(part) if part.startswith('"') else part
        out.append(name + (m.group(2) or ""))
    return out


def _val(value: str) -> str:
    return json.loads(value) if value.startswith('"') and value.endswith('"') else value


@dataclass
class StepFacts:
    """What the evidence says about one step."""

    action: str | None = None
    facing: str | None = None
    near: list[str] | None = None
    labels: dict[str, str] = field(default_factory=dict)  #: line key → label, in line order
    vitals: dict[str, str] = field(default_factory=dict)
    inventory: dict[str, int] | None = None  #: complete inventory (an ``inv=`` line)
    has: dict[str, int] = field(default_factory=dict)  #: single item counts (``has=`` facts)
    marks: dict[str, dict[str, int | None]] = field(default_factory=dict)  #: ev/gain/.../visit/end


def _marks(value: str) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for e in _elems(value):
        name, _, k = e.rpartition("#") if re.search(r"#\d+$", e) else (e, "", "")
        out[name] = int(k) if k else None
    return out


def _apply(f: StepFacts, key: str, value: str) -> None:
    if key == "act":  # ``act=do``, or ``act=drink#2`` (an action counted: its ordinal, index.fragment)
        marks = _marks(value)
        f.action = next(iter(marks), _val(value))
        seen = f.marks.setdefault("act", {})
        for n, k in marks.items():  # a step's full line (``act=drink``) keeps the ordinal a key line gave
            if k is not None or n not in seen:
                seen[n] = k
    elif key == "face":
        f.facing = _val(value)
    elif key == "near":
        f.near = [_val(x) if x.startswith('"') else x for x in _elems(value)]
    elif key in OCC_KINDS or key in ("visit", "end"):
        f.marks.setdefault(key, {}).update(_marks(value))
    elif key == "inv":
        inv: dict[str, int] = {}
        if value != "none":
            for e in _elems(value):
                name, _, n = e.rpartition(":")
                if n.isdigit():
                    inv[name] = int(n)
        f.inventory = inv
    elif key == "has":
        name, _, n = _val(value).rpartition(":")
        if n.isdigit():
            f.has[name] = int(n)
    elif key == "pos":
        return
    elif (
        key in VITALS
        or key.startswith("v_")
        or (key not in LOCATION_KEYS and not key.startswith("loc_") and value.isdigit())
    ):
        f.vitals[key[2:] if key.startswith("v_") else key] = value
    else:
        f.labels[key] = _val(value)


def parse_lines(text: str) -> dict[int, StepFacts]:
    """``{t: StepFacts}`` from evidence text (lines that are not evidence lines are ignored)."""
    facts: dict[int, StepFacts] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m or m.group(2).startswith("obs:"):
            continue
        f = facts.setdefault(int(m.group(1)), StepFacts())
        for km in _KV.finditer(m.group(2)):
            _apply(f, km.group(1), km.group(2))
    return facts


class EvidenceTimeline:
    """A :class:`~libraryfs.features.episodes.resolve.Timeline` over the facts of packed evidence."""

    start_t = 0

    def __init__(self, facts: dict[int, StepFacts]) -> None:
        self.facts = dict(sorted(facts.items()))

    def occurrences(self, kind: str, name: str) -> list[tuple[int, int | None]]:
        """Visible occurrences ``[(t, ordinal)]`` (kind ``visit``: visit starts)."""
        return [(t, f.marks[kind][name]) for t, f in self.facts.items() if name in f.marks.get(kind, {})]

    def visits(self, label: str) -> list[tuple[int | None, int | None, int | None]]:
        """Visits whose first or last step is visible, merged by ordinal."""
        by_k: dict[int | None, list[int | None]] = {}
        loose = []
        for key, slot in (("visit", 0), ("end", 1)):
            for t, k in self.occurrences(key, label):
                if k is None:
                    loose.append((None, t, None) if slot == 0 else (None, None, t))
                else:
                    by_k.setdefault(k, [None, None])[slot] = t
        out = [(k, v[0], v[1]) for k, v in sorted(by_k.items(), key=lambda kv: kv[0] or 0)]
        return out or loose

    def value(self, t: int, field: str, exclude: str | None = None) -> str | None:
        """The answer string of ``field`` at step ``t`` when the evidence shows it."""
        f = self.facts.get(t)
        if f is None:
            return None
        if field == "action":
            return f.action
        if field == "facing":
            return f.facing
        if field == "near":
            return None if f.near is None else (",".join(f.near) or "none")
        if field.startswith("count:"):
            item = field[6:]
            if item in f.has:
                return str(f.has[item])
            return None if f.inventory is None else str(f.inventory.get(item, 0))
        if field.startswith("vital:"):
            return f.vitals.get(field[6:])
        if field == "where":
            return next((v for v in f.labels.values() if v != exclude), None)
        if field in f.labels:
            return f.labels[field]
        if field == "place":
            return f.labels.get("loc_place") or next(iter(f.labels.values()), None)
        return f.labels.get(f"loc_{field}")


def evidence_vocab(facts: dict[int, StepFacts]) -> dict[str, list[str]]:
    """Labels, events, items, vitals and actions that occur in the evidence (the reader's vocabulary)."""
    labels: set[str] = set()
    events: set[str] = set()
    items: set[str] = set()
    vitals: set[str] = set()
    actions: set[str] = set()
    for f in facts.values():
        labels.update(f.labels.values())
        for key in ("visit", "end"):
            labels.update(f.marks.get(key, {}))
        events.update(f.marks.get("ev", {}))
        if f.action:
            actions.add(f.action)
        for key in ("gain", "lose"):
            items.update(f.marks.get(key, {}))
        items.update(f.inventory or {})
        items.update(f.has)
        vitals.update(f.vitals)
    return {
        "labels": sorted(labels),
        "events": sorted(events),
        "items": sorted(items),
        "vitals": sorted(vitals),
        "actions": sorted(actions),
    }


def read(question: str, evidence: str) -> tuple[str | None, Query]:
    """``(answer or None, query)`` of ``question`` from ``evidence`` text alone."""
    facts = parse_lines(evidence)
    q = parse_question(question, evidence_vocab(facts))
    if not q.typed():
        return None, q
    ans, _ = resolve(EvidenceTimeline(facts), q)
    return ans, q
