"""Typed questions about an episode: the anchor tuple of S3Mem (PAPERS.md §4) as a small tree.

A :class:`Query` asks for one of four things:

- ``step``  — the step a reference resolves to ("when did I collect wood for the 2nd time?");
- ``value`` — a field at that step (``action``, ``facing``, ``near``, a location label kind such as
  ``place``/``area``, ``where`` (the location label other than the one the question is already inside),
  ``count:<item>``, ``vital:<vital>``; empty when the step is named but not what is asked about it);
- ``count`` — how many occurrences (of an event, an item/vital change, or visits to a label) fall in a span;
- ``order`` — which of two references came first (the answer is the earlier one's name; with ``field``
  ``later``, the later one's).

A :class:`Ref` names a step: ``step`` (step N), ``occ`` (the k-th occurrence of ``kind``/``name``, optionally
``within`` a :class:`Span` or strictly ``after``/``before`` another reference — chains resolve
recursively), ``visit`` (the first or last step of the k-th visit to a label) or ``offset`` (``d`` steps
from ``base``). ``k = -1`` is the last one. Occurrence kinds: ``ev`` (event), ``gain``/``lose`` (an
inventory item went up/down), ``rise``/``drop`` (a vital went up/down), ``visit`` (a visit began).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any

LAST = -1


@dataclass(frozen=True)
class Span:
    """A range of steps: the k-th visit to ``name`` (``op="visit"``) or ``lo..hi`` inclusive (``op="range"``,
    either end may be None = open)."""

    op: str
    name: str | None = None
    k: int = 1
    lo: int | None = None
    hi: int | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (None fields and a range's ordinal left out)."""
        return {
            k: v for k, v in self.__dict__.items() if v is not None and not (k == "k" and self.op == "range")
        }


@dataclass(frozen=True)
class Ref:
    """A step reference (see the module doc)."""

    op: str  #: "step" | "occ" | "visit" | "offset"
    t: int | None = None
    kind: str | None = None  #: occ: "ev" | "gain" | "lose" | "rise" | "drop" | "visit" | "act" (an action)
    name: str | None = None
    k: int = 1
    edge: str = "start"  #: visit: "start" | "end"
    within: Span | None = None
    after: Ref | None = None
    before: Ref | None = None
    base: Ref | None = None
    d: int = 0

    def to_json(self) -> dict[str, Any]:
        """JSON-ready nested dict (defaults left out)."""
        out: dict[str, Any] = {"op": self.op}
        for k, v in self.__dict__.items():
            if k == "op" or v is None or (k == "edge" and self.op != "visit"):
                continue
            if k == "k" and self.op in ("step", "offset"):
                continue
            if k == "d" and self.op != "offset":
                continue
            out[k] = v.to_json() if hasattr(v, "to_json") else v
        return out

    def with_(self, **kw: Any) -> Ref:
        """A copy with fields replaced."""
        return replace(self, **kw)


@dataclass
class Query:
    """The typed form of a question (see the module doc). ``type == "none"``: nothing was understood."""

    type: str = "none"
    field: str = ""
    ref: Ref | None = None
    count: Ref | None = None  #: what is counted: an ``occ`` (any kind) with ``within`` as the span
    order: tuple[Ref, Ref] | None = None
    mentions: list[str] = dataclasses.field(default_factory=list)  #: vocabulary names in the question

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "type": self.type,
            "field": self.field,
            "ref": self.ref.to_json() if self.ref else None,
            "count": self.count.to_json() if self.count else None,
            "order": [r.to_json() for r in self.order] if self.order else None,
            "mentions": list(self.mentions),
        }

    def typed(self) -> bool:
        """Whether the question was understood (a deterministic reader can answer it)."""
        return self.type != "none"
