"""The raw step log as evidence: what flat retrieval (BM25 over step texts) hands to the reader.

Raw lines (:func:`libraryfs_bench.episodes.crafter_data.step_text`) carry no ordinals — ``Step 412: action
do. At (34, 40) in zone-2-2, area forest. Facing tree. Nearby: cow. Events: collect_wood. Inventory
change: wood +1. Vitals change: food -1. Inventory: wood 2. Health 9, food 7, drink 6, energy 8.`` — so
the reader can count the k-th occurrence only among the occurrences it sees, and a visit only where the
steps on both sides of its border are retrieved. :func:`parse_raw` reads such lines into the reader's
per-step facts and :class:`RawTimeline` exposes them as a :class:`libraryfs.features.episodes.resolve.Timeline`;
:func:`read_raw` answers a question from them with the same parser and resolver as the deterministic reader.
"""

from __future__ import annotations

import re

from libraryfs.features.episodes.anchors import parse_question
from libraryfs.features.episodes.query import Query
from libraryfs.features.episodes.reader import EvidenceTimeline, StepFacts, evidence_vocab
from libraryfs.features.episodes.resolve import resolve

_STEP = re.compile(
    r"Step (\d+): action (\w+)\. At \((-?\d+), (-?\d+)\) in ([\w-]+), area ([a-z ]+)\. Facing (\w+)\.(.*?)"
    r"(?=Step \d+:|$)",
    re.S,
)


def _deltas(s: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"([a-z_]+) ([+-]\d+)", s)}


def parse_raw(text: str) -> dict[int, StepFacts]:
    """``{t: StepFacts}`` of the raw step lines in ``text`` (occurrences without ordinals, no visit marks)."""
    out: dict[int, StepFacts] = {}
    for m in _STEP.finditer(text):
        rest = m.group(8)
        f = StepFacts(action=m.group(2), facing=m.group(7), labels={"place": m.group(5), "area": m.group(6)})
        if mm := re.search(r"Events: ([^.]*)\.", rest):
            f.marks["ev"] = {e.strip(): None for e in mm.group(1).split(",") if e.strip()}
        for label, up, down in (("Inventory change", "gain", "lose"), ("Vitals change", "rise", "drop")):
            if mm := re.search(rf"{label}: ([^.]*)\.", rest):
                for name, v in _deltas(mm.group(1)).items():
                    f.marks.setdefault(up if v > 0 else down, {})[name] = None
        if mm := re.search(r"Inventory: ([^.]*)\.", rest):
            f.inventory = {k: int(v) for k, v in re.findall(r"([a-z_]+) (\d+)", mm.group(1))}
        if mm := re.search(r"Health (\d+), food (\d+), drink (\d+), energy (\d+)\.", rest):
            f.vitals = dict(zip(("health", "food", "drink", "energy"), mm.groups(), strict=True))
        out[int(m.group(1))] = f
    return out


class RawTimeline(EvidenceTimeline):
    """The evidence timeline of raw facts: no ordinals, and a visit's first (last) step is known only where
    the step before (after) it is visible too."""

    def __init__(self, facts: dict[int, StepFacts]) -> None:
        super().__init__(facts)
        self._kind: dict[str, str] = {}
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
        """Visible occurrences, without ordinals (kind ``visit``: visible visit starts)."""
        if kind != "visit":
            return super().occurrences(kind, name)
        return [
            (t, None) for t, f in self.facts.items() if name in f.labels.values() and self._edge(t, name, -1)
        ]

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


def read_raw(question: str, facts: dict[int, StepFacts]) -> tuple[str | None, Query]:
    """The reader's answer to ``question`` from raw facts."""
    q = parse_question(question, evidence_vocab(facts))
    if not q.typed():
        return None, q
    return resolve(RawTimeline(facts), q)[0], q
