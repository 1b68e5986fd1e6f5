"""Scene-event units: one structured record m_t per step of an episode (S3Mem, PAPERS.md §4 "Write").

m_t = (t, action a_t, salient objects O_t, event types E_t, relations R_t, state S_t (inventory, vitals and
their deltas), location L_t (one or more labels: place, area, ...), observation/summary u_t).

**The input contract** (one JSON object per line of ``steps.jsonl``; docs/episodes.md has a worked example).
Every field a user gives is kept: the fields below become unit fields, and any other key is kept verbatim in
:attr:`Unit.extra` (shown in ``steps/<t>.md``).

====================  ==================================================================================
``t``                 step number (int); a line without it gets the next one
``action``            the action taken (string)
``observation``       free-text sentence of what was seen/done (kept; indexed for text search). ``text``
                      is free text too: a record with only text is turned into fields (LLM or
                      :func:`~libraryfs.features.episodes.extract.extract_text`); otherwise kept in ``extra``
location labels       any of ``place``, ``location``, ``area``, ``zone``, ``room``, ``region``, ``biome``,
                      ``level`` (strings) and/or ``locations: {kind: label}``; each kind has its own visits.
                      A kind not given on a step keeps its previous label
``position``          ``[x, y]``
``facing``            what the agent faces (also as a ``relations`` triple)
``nearby``/``objects``  salient things around
``events``/``achievements``  event names of this step
``inventory``         ``{item: count}`` (absent: previous inventory plus ``inventory_delta``)
``inventory_delta``   ``{item: ±n}`` explicit change (absent: derived from the inventory)
``gained``/``lost``   item lists (absent: from the delta's signs)
``vitals``            ``{health|food|drink|energy|...: level}``; top-level ``health`` etc. are accepted
``vitals_delta``      ``{vital: ±n}`` (absent: derived from the vitals)
``relations``         ``[[subject, relation, object], ...]``
``summary``           one-line summary (absent: a deterministic one)
====================  ==================================================================================

:class:`EpisodeState` carries what a unit needs from the steps before it — labels, inventory, vitals,
per-kind counters — so units are built one appended step at a time and still carry their anchor marks:
``ev``/``gain``/``lose``/``rise``/``drop`` ordinals (the k-th occurrence of an event, the k-th increase or
decrease of an item, the k-th rise or drop of a vital) and ``visit`` ordinals per label kind.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

VITALS = ("health", "food", "drink", "energy")
#: top-level keys read as location labels, in this order (the first present is the primary label)
LOCATION_KEYS = ("place", "location", "area", "zone", "room", "region", "biome", "level")
STATE_VERSION = 2  #: bump when EpisodeState changes shape: the builder then rebuilds the episode
CHANGE_KINDS = ("gain", "lose", "rise", "drop")  #: item increase/decrease, vital rise/drop
_CONTRACT_KEYS = frozenset(
    {
        "t",
        "action",
        "observation",
        "locations",
        "position",
        "facing",
        "nearby",
        "objects",
        "events",
        "achievements",
        "inventory",
        "inventory_delta",
        "gained",
        "lost",
        "vitals",
        "vitals_delta",
        "relations",
        "summary",
        *LOCATION_KEYS,
        *VITALS,
    }
)


@dataclass
class Unit:
    """One step's unit (see the module doc for the fields).

    ``inventory``, ``vitals`` and the deltas are ``None`` only between :func:`from_record` and
    :meth:`EpisodeState.mark`, which fills them from the previous steps. ``marks`` holds the anchor ordinals:
    ``{"ev": {event: k}, "gain": {item: k}, "lose": {item: k}, "rise": {vital: k}, "drop": {vital: k},
    "visit": {label_kind: k}}`` (``visit`` when the step begins the k-th visit to its label of that kind).
    """

    t: int
    action: str = ""
    objects: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    relations: list[list[str]] = field(default_factory=list)  #: [subject, relation, object] triples
    inventory: dict[str, int] | None = field(default_factory=dict)
    vitals: dict[str, int] | None = field(default_factory=dict)
    locations: dict[str, str] = field(default_factory=dict)  #: label kind → label, primary first
    position: list[int] | None = None
    inventory_delta: dict[str, int] | None = field(default_factory=dict)
    vitals_delta: dict[str, int] | None = field(default_factory=dict)
    gained: list[str] | None = field(default_factory=list)  #: None until derived by EpisodeState.mark
    lost: list[str] | None = field(default_factory=list)
    observation: str = ""
    summary: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  #: every other field of the record, as given
    marks: dict[str, Any] = field(default_factory=dict)
    source: str = "structured"  #: "structured" | "text" | "llm"

    @property
    def facing(self) -> str:
        """Object of the ``facing`` relation, or ""."""
        return next((o for s, r, o in self.relations if r == "facing"), "")

    @property
    def location(self) -> str:
        """The primary location label (``place`` when given), or ""."""
        return next(iter(self.locations.values()), "")

    @property
    def rises(self) -> list[str]:
        """Vitals that went up at this step, sorted."""
        return sorted(k for k, v in (self.vitals_delta or {}).items() if v > 0)

    @property
    def drops(self) -> list[str]:
        """Vitals that went down at this step, sorted."""
        return sorted(k for k, v in (self.vitals_delta or {}).items() if v < 0)

    def to_json(self) -> dict:
        """JSON-ready dict (all fields)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> Unit:
        """Inverse of :meth:`to_json` (unknown keys ignored; a version-1 unit's ``location`` becomes the
        ``place`` label)."""
        names = _unit_fields()
        u = cls(**{k: v for k, v in d.items() if k in names})
        if "location" in d and not u.locations and d["location"]:
            u.locations = {"place": d["location"]}
            if isinstance(u.marks.get("visit"), int):
                u.marks["visit"] = {"place": u.marks["visit"]}
        return u

    def terms(self) -> str:
        """Text indexed by BM25: every field's words, the observation and the summary."""
        parts = [self.action, " ".join(self.locations.values()), self.facing, " ".join(self.objects)]
        parts += self.events + (self.gained or []) + (self.lost or []) + self.rises + self.drops
        parts += [" ".join(f"{k} {v}" for k, v in sorted((self.inventory or {}).items()))]
        return " ".join(p for p in [*parts, self.observation, self.summary] if p)


@functools.cache
def _unit_fields() -> frozenset[str]:
    """The field names of :class:`Unit` (computed once: ``from_json`` runs per unit, 10⁴ per recall)."""
    return frozenset(f.name for f in dataclasses.fields(Unit))


def _diff(old: dict[str, int], new: dict[str, int], keys: Any = None) -> dict[str, int]:
    """``{k: new[k] - old[k]}`` for the keys that changed (``keys``: only these), sorted by key."""
    ks = sorted(set(old) | set(new)) if keys is None else sorted(keys)
    return {k: new.get(k, 0) - old.get(k, 0) for k in ks if new.get(k, 0) != old.get(k, 0)}


def _apply(base: dict[str, int], delta: dict[str, int]) -> dict[str, int]:
    out = dict(base)
    for k, v in delta.items():
        out[k] = out.get(k, 0) + v
    return {k: v for k, v in sorted(out.items()) if v > 0}


@dataclass
class EpisodeState:
    """What the next unit needs from the previous ones (JSON-serialisable, stored with the episode)."""

    version: int = STATE_VERSION
    next_t: int = 0
    labels: dict[str, str] = field(default_factory=dict)  #: label kind → current label
    visit_start: dict[str, int] = field(default_factory=dict)  #: label kind → step the current visit began
    visits: dict[str, dict[str, int]] = field(default_factory=dict)  #: kind → label → visits so far
    ev: dict[str, int] = field(default_factory=dict)
    gain: dict[str, int] = field(default_factory=dict)
    lose: dict[str, int] = field(default_factory=dict)
    rise: dict[str, int] = field(default_factory=dict)
    drop: dict[str, int] = field(default_factory=dict)
    inventory: dict[str, int] = field(default_factory=dict)
    vitals: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        """JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict | None) -> EpisodeState:
        """Inverse of :meth:`to_json`; ``None`` (or a state of another version) gives a fresh state."""
        if not d or d.get("version") != STATE_VERSION:
            return cls()
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def _fill_state(self, u: Unit) -> None:
        """Labels carried, inventory/vitals and their deltas filled, gained/lost derived."""
        for kind, label in self.labels.items():
            u.locations.setdefault(kind, label)
        if u.inventory is None:
            u.inventory = _apply(self.inventory, u.inventory_delta or {})
        if u.inventory_delta is None:
            u.inventory_delta = _diff(self.inventory, u.inventory)
        if u.gained is None:
            u.gained = sorted(k for k, v in u.inventory_delta.items() if v > 0)
        if u.lost is None:
            u.lost = sorted(k for k, v in u.inventory_delta.items() if v < 0)
        if u.vitals is None:
            u.vitals = {k: v for k, v in _apply(self.vitals, u.vitals_delta or {}).items()}
        if u.vitals_delta is None:
            u.vitals_delta = _diff(self.vitals, u.vitals, set(self.vitals) & set(u.vitals))

    def mark(self, u: Unit) -> Unit:
        """Fill what ``u`` did not give (see :class:`Unit`) and ``u.marks``; advance the state. Returns ``u``."""
        self._fill_state(u)
        marks: dict[str, Any] = {}
        for kind, label in u.locations.items():
            if label and label != self.labels.get(kind):
                per = self.visits.setdefault(kind, {})
                per[label] = per.get(label, 0) + 1
                marks.setdefault("visit", {})[kind] = per[label]
                self.labels[kind] = label
                self.visit_start[kind] = u.t
        for key, names in (
            ("ev", u.events),
            ("gain", u.gained),
            ("lose", u.lost),
            ("rise", u.rises),
            ("drop", u.drops),
        ):
            counters = getattr(self, key)
            for n in names or []:
                counters[n] = counters.get(n, 0) + 1
            if names:
                marks[key] = {n: counters[n] for n in names}
        u.marks = marks
        self.inventory = dict(u.inventory or {})
        self.vitals = dict(u.vitals or {})
        self.next_t = u.t + 1
        if not u.summary:
            u.summary = summarize(u)
        return u


def summarize(u: Unit) -> str:
    """Deterministic one-line summary u_t (≤ ~25 words)."""
    bits = [u.action or "step"]
    if u.locations:
        bits.append("in " + ", ".join(u.locations.values()))
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


def has_structure(rec: dict) -> bool:
    """Whether a step record carries structured fields beyond ``t``/``action``/free text (else its text
    is turned into fields)."""
    return any(k in _CONTRACT_KEYS and k not in ("t", "action", "observation", "summary") for k in rec)


def _label_kind(k: str) -> str:
    s = re.sub(r"[^a-z0-9_]", "_", str(k).lower()).strip("_") or "label"
    return s


def _locations(rec: dict) -> dict[str, str]:
    out: dict[str, str] = {}
    for k in LOCATION_KEYS:
        if isinstance(rec.get(k), str | int) and str(rec[k]).strip():
            out[k] = str(rec[k]).strip()
    given = rec.get("locations")
    if isinstance(given, dict):
        for k in sorted(given, key=str):
            if isinstance(given[k], str | int) and str(given[k]).strip():
                out.setdefault(_label_kind(k), str(given[k]).strip())
    return out


def _int_map(d: Any, what: str) -> dict[str, int]:
    if not isinstance(d, dict):
        raise ValueError(f"{what} must be an object of integers")
    try:
        return {str(k): int(v) for k, v in sorted(d.items())}
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be an object of integers") from None


def _vitals(rec: dict) -> dict[str, int] | None:
    if "vitals" in rec:
        return _int_map(rec["vitals"], "vitals")
    top = {k: rec[k] for k in VITALS if k in rec}
    return _int_map(top, "vitals") if top else None


def from_record(rec: dict) -> Unit:
    """A unit from a step record (the contract in the module doc), before :meth:`EpisodeState.mark`.

    Raises ``ValueError`` when ``t`` is missing or not an integer, or a field has the wrong shape (also
    one that is not a list where a list is read: ``"objects": 5`` was a ``TypeError`` that ended
    ``episode build`` with a traceback).
    """
    t = rec.get("t")
    if not isinstance(t, int) or isinstance(t, bool):
        raise ValueError(f"step record needs an integer 't': {str(rec)[:80]}")
    try:
        return _unit_of(rec, t)
    except TypeError as e:
        raise ValueError(f"step record has a field of the wrong shape ({e}): {str(rec)[:80]}") from None


def check_step(rec: dict) -> None:
    """Refuse a step record now that ``episode build`` would refuse later: the rule of
    :func:`from_record`, with a missing ``t`` allowed (the build gives it the next step number, as
    :meth:`~libraryfs.features.episodes.builder.EpisodeBuilder.build` does). Raises ``ValueError``.
    Before, ``episode append ep '{"t": "x"}'`` wrote the line and exited 0, and the build then counted it
    as a bad line (trial 1203b)."""
    from_record(rec if "t" in rec else {**rec, "t": 0})


def _unit_of(rec: dict, t: int) -> Unit:
    """The :class:`Unit` of step record ``rec`` whose ``t`` is checked (:func:`from_record`)."""
    rel = [[str(x) for x in r][:3] for r in rec.get("relations", []) if isinstance(r, list) and len(r) >= 3]
    if rec.get("facing") and not any(r[1] == "facing" for r in rel):
        rel.insert(0, ["agent", "facing", str(rec["facing"])])
    inv = rec.get("inventory")
    pos = rec.get("position")
    return Unit(
        t=t,
        action=str(rec.get("action", "")),
        objects=sorted({str(o) for o in rec.get("objects", rec.get("nearby", [])) or []}),
        events=[str(e) for e in rec.get("events", rec.get("achievements", [])) or []],
        relations=rel,
        inventory={k: v for k, v in _int_map(inv, "inventory").items() if v > 0} if inv is not None else None,
        vitals=_vitals(rec),
        locations=_locations(rec),
        position=[int(v) for v in pos] if isinstance(pos, list | tuple) and pos else None,
        inventory_delta=(
            {k: v for k, v in _int_map(rec["inventory_delta"], "inventory_delta").items() if v}
            if rec.get("inventory_delta") is not None
            else None
        ),
        vitals_delta=(
            {k: v for k, v in _int_map(rec["vitals_delta"], "vitals_delta").items() if v}
            if rec.get("vitals_delta") is not None
            else None
        ),
        gained=sorted(str(x) for x in rec["gained"]) if isinstance(rec.get("gained"), list) else None,
        lost=sorted(str(x) for x in rec["lost"]) if isinstance(rec.get("lost"), list) else None,
        observation=str(rec.get("observation") or ""),
        summary=str(rec.get("summary", "")),
        extra={k: rec[k] for k in rec if k not in _CONTRACT_KEYS},
        source="structured",
    )


def _merge_extracted(u: Unit, x: Unit) -> Unit:
    """Fields of an extracted unit ``x`` where the record gave none."""
    for f in ("action", "objects", "events", "relations", "locations", "position", "summary"):
        if not getattr(u, f) and getattr(x, f):
            setattr(u, f, getattr(x, f))
    for f in ("inventory", "vitals", "gained", "lost", "inventory_delta", "vitals_delta"):
        if getattr(u, f) is None and getattr(x, f) not in (None, {}, []):
            setattr(u, f, getattr(x, f))
    u.source = x.source
    return u


def unit_from_line(line: str | bytes | dict, extractor: Any = None) -> Unit:
    """A unit (before :meth:`EpisodeState.mark`) from one ``steps.jsonl`` line.

    Structured fields are taken as given; a record with only free text (``text`` or ``observation``, plus
    optionally ``t``/``action``) goes to ``extractor(t, text)`` (the LLM extractor) when one is given and
    it returns a unit, else to :func:`~libraryfs.features.episodes.extract.extract_text`; the text is kept
    as the observation. Raises ``ValueError`` for a line that is not a JSON object with an integer ``t``.
    """
    from libraryfs.features.episodes.extract import extract_text

    try:
        rec = line if isinstance(line, dict) else json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not a JSON line: {e}") from None
    if not isinstance(rec, dict):
        raise ValueError("a step must be a JSON object")
    u = from_record(rec)
    if has_structure(rec):
        return u
    text = str(rec.get("text") or rec.get("observation") or "")
    if not text:
        return u
    x = extractor(u.t, text) if extractor is not None else None
    if x is None:
        x = extract_text(u.t, text)
    u = _merge_extracted(u, x)
    if not u.observation:
        u.observation = text
        u.extra.pop("text", None)
    return u
