"""The raw step log as evidence: what flat retrieval (BM25 over step texts) hands to the reader.

Raw lines (:func:`libraryfs_bench.episodes.crafter_data.step_text`) carry no ordinals — ``Step 412: action
do. At (34, 40) in zone-2-2, area forest. Facing tree. Nearby: cow. Events: collect_wood. Inventory
change: wood +1. Vitals change: food -1. Inventory: wood 2. Health 9, food 7, drink 6, energy 8.`` — so
the reader can count the k-th occurrence only among the occurrences it sees, and a visit only where the
steps on both sides of its border are retrieved. :class:`RawTimeline` implements
:class:`libraryfs.features.episodes.resolve.Timeline` over such lines; :func:`read_raw` answers a question
from them with the same parser and resolver as the deterministic reader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from libraryfs.features.episodes.anchors import parse_question
from libraryfs.features.episodes.query import Query
from libraryfs.features.episodes.resolve import resolve

_STEP = re.compile(
    r"Step (\d+): action (\w+)\. At \((-?\d+), (-?\d+)\) in ([\w-]+), area ([a-z ]+)\. Facing (\w+)\.(.*?)"
    r"(?=Step \d+:|$)",
    re.S,
)


@dataclass
class RawFacts:
    """What one raw line says."""

    action: str
    labels: dict[str, str]
    facing: str
    events: list[str] = field(default_factory=list)
    inv_delta: dict[str, int] = field(default_factory=dict)
    vit_delta: dict[str, int] = field(default_factory=dict)
    inventory: dict[str, int] = field(default_factory=dict)
    vitals: dict[str, str] = field(default_factory=dict)


def _deltas(s: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"([a-z_]+) ([+-]\d+)", s)}


def parse_raw(text: str) -> dict[int, RawFacts]:
    """``{t: RawFacts}`` of the raw step lines in ``text``."""
    out: dict[int, RawFacts] = {}
    for m in _STEP.finditer(text):
        rest = m.group(8)
        f = RawFacts(m.group(2), {"place": m.group(5), "area": m.group(6)}, m.group(7))
        if mm := re.search(r"Events: ([^.]*)\.", rest):
            f.events = [e.strip() for e in mm.group(1).split(",") if e.strip()]
        if mm := re.search(r"Inventory change: ([^.]*)\.", rest):
            f.inv_delta = _deltas(mm.group(1))
        if mm := re.search(r"Vitals change: ([^.]*)\.", rest):
            f.vit_delta = _deltas(mm.group(1))
        if mm := re.search(r"Inventory: ([^.]*)\.", rest):
            f.inventory = {k: int(v) for k, v in re.findall(r"([a-z_]+) (\d+)", mm.group(1))}
        if mm := re.search(r"Health (\d+), food (\d+), drink (\d+), energy (\d+)\.", rest):
            f.vitals = dict(zip(("health", "food", "drink", "energy"), mm.groups(), strict=True))
        out[int(m.group(1))] = f
    return out


class RawTimeline:
    """A Timeline over raw facts: no ordinals; visits only where their borders are visible."""

    start_t = 0

    def __init__(self, facts: dict[int, RawFacts]) -> None:
        self.facts = dict(sorted(facts.items()))
        self._kind = {}
        for f in self.facts.values():
            for kind, lab in f.labels.items():
                self._kind.setdefault(lab, kind)

    def _edge(self, t: int, label: str, step: int) -> bool:
        kind = self._kind.get(label, "place")
        if t + step < 0:
            return True
        other = self.facts.get(t + step)
        return other is not None and other.labels.get(kind) != label

    def occurrences(self, kind: str, name: str) -> list[tuple[int, int | None]]:
        """Visible occurrences, without ordinals."""
        out = []
        for t, f in self.facts.items():
            hit = {
                "ev": name in f.events,
                "gain": f.inv_delta.get(name, 0) > 0,
                "lose": f.inv_delta.get(name, 0) < 0,
                "rise": f.vit_delta.get(name, 0) > 0,
                "drop": f.vit_delta.get(name, 0) < 0,
                "visit": name in f.labels.values() and self._edge(t, name, -1),
            }.get(kind, False)
            if hit:
                out.append((t, None))
        return out

    def visits(self, label: str) -> list[tuple[int | None, int | None, int | None]]:
        """Visits whose first step is visible, with their last step when that is visible too."""
        out: list[tuple[int | None, int | None, int | None]] = []
        for t, f in self.facts.items():
            if label not in f.labels.values():
                continue
            if self._edge(t, label, -1):
                out.append((None, t, None))
            if self._edge(t, label, 1) and out and out[-1][2] is None:
                out[-1] = (None, out[-1][1], t)
        return out

    def value(self, t: int, field: str, exclude: str | None = None) -> str | None:
        """The field at a visible step."""
        f = self.facts.get(t)
        if f is None:
            return None
        if field == "action":
            return f.action
        if field == "facing":
            return f.facing
        if field in f.labels:
            return f.labels[field]
        if field == "where":
            return next((v for v in f.labels.values() if v != exclude), None)
        if field.startswith("count:"):
            return str(f.inventory.get(field[6:], 0))
        if field.startswith("vital:"):
            return f.vitals.get(field[6:])
        return None


def raw_vocab(facts: dict[int, RawFacts]) -> dict[str, list[str]]:
    """Labels, events and items that occur in raw evidence."""
    labels = sorted({v for f in facts.values() for v in f.labels.values()})
    events = sorted({e for f in facts.values() for e in f.events})
    items = sorted({i for f in facts.values() for i in (*f.inventory, *f.inv_delta)})
    return {"labels": labels, "events": events, "items": items}


def read_raw(question: str, facts: dict[int, RawFacts]) -> tuple[str | None, Query]:
    """The reader's answer to ``question`` from raw facts."""
    q = parse_question(question, raw_vocab(facts))
    if not q.typed():
        return None, q
    return resolve(RawTimeline(facts), q)[0], q
