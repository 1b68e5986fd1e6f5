"""The index of one episode's units: occurrence lists, visit spans, vocabulary, evidence lines.

:class:`EpisodeIndex` is the complete :class:`~libraryfs.features.episodes.resolve.Timeline` recall resolves
questions against, and it renders the evidence lines recall packs. Line formats (one step per line, ``key=value``
tokens; a value with spaces, commas, quotes or ``=``/``#`` is JSON-quoted)::

    t=412 act=do place=zone-2-2 area=forest face=tree near=cow,water ev=collect_wood#2 gain=wood#3
          lose=sapling#1 rise=drink#2 drop=food#4 visit=zone-2-2#4 end=forest#2        (the unit line)
    t=412 inv=sapling:1,wood:2 pos=34,40 health=9 food=7 drink=6 energy=8               (the state line)
    t=412 obs: I chopped the oak by the lake.                                          (the observation)
    t=412 ev=collect_wood#2 act=do                                                      (a key line)

``#k`` is the ordinal: the k-th collect_wood, the k-th increase of wood, the k-th drop of food; ``visit=L#k``
marks the first step of the k-th visit to label L and ``end=L#k`` its last step. Key lines carry only the
facts a question's resolution used (:attr:`~libraryfs.features.episodes.resolve.Resolver.trace`), so a
chain of three hops fits in ~30 tokens. Label kinds (``place``, ``area``, ...) are keys of their own; a kind
that collides with another key is written ``loc_<kind>``.
"""

from __future__ import annotations

import json
import re
from array import array
from bisect import bisect_left
from collections.abc import Callable

from libraryfs.features.episodes.units import CHANGE_KINDS, Unit
from libraryfs.index.tokens import PieceCounter, count_tokens

OCC_KINDS = ("ev", *CHANGE_KINDS)
RESERVED_KEYS = frozenset(
    {"t", "act", "face", "near", "inv", "pos", "has", "obs", "visit", "end", *OCC_KINDS, "where", "step"}
)
_PLAIN = re.compile(r"^[^\s\",=#:]+$")
#: texts whose pieces key lines hold and the steps' own lines may not (numbers of 1–3 digits, as o200k
#: splits them; ``has=``, ``=?``, ``none``): counted when an index is saved (:meth:`EpisodeIndex.state`)
PIECE_SEEDS = (
    *(f"{n:0{w}d}" for w in (1, 2, 3) for n in range(10**w)),
    "has=none=?",
    " has",
    " none",
    "\n",
)


def enc(s: str) -> str:
    """A value as written in a line: bare when safe, else JSON-quoted."""
    return s if _PLAIN.match(s) else json.dumps(s, ensure_ascii=False)


def label_key(kind: str) -> str:
    """The line key of a location label kind."""
    return f"loc_{kind}" if kind in RESERVED_KEYS else kind


def vital_key(v: str) -> str:
    """The line key of a vital."""
    return f"v_{v}" if v in RESERVED_KEYS else v


class EpisodeIndex:
    """Units of one episode with occurrence lists, visit spans and vocabulary (build once, query many times).

    Implements :class:`~libraryfs.features.episodes.resolve.Timeline`; ordinals are recomputed here from the
    units in step order, so they agree with the occurrence lists even after out-of-order appends.
    """

    #: what :meth:`state` saves besides the units, the names and the BM25 statistics
    STATE_FIELDS = (
        "ts",
        "start_t",
        "last_t",
        "occ",
        "ordinal",
        "spans",
        "label_kinds",
        "_starts",
        "_ends",
        "vocab",
    )

    _acts: dict[str, list[int]] | None = None  #: action → its steps (:meth:`_actions`), built on first use

    def __init__(self, units: list[Unit]) -> None:
        self._units: list[Unit] | None = sorted(units, key=lambda u: u.t)
        self.by_t: dict[int, Unit] | _LazyUnits = {u.t: u for u in self._units}
        self.ts = [u.t for u in self._units]
        self.start_t = self.ts[0] if self.ts else 0
        self.last_t = self.ts[-1] if self.ts else None
        self.occ: dict[tuple[str, str], list[int]] = {}
        self.ordinal: dict[tuple[str, str, int], int] = {}
        self.spans: dict[str, list[tuple[int, int | None]]] = {}  #: label → [(first, last|None)]
        self.label_kinds: dict[str, str] = {}  #: label → its kind (the first kind seen)
        self._starts: dict[int, list[str]] = {}
        self._ends: dict[int, list[str]] = {}
        for u in self._units:
            for kind, names in zip(
                OCC_KINDS, (u.events, u.gained or [], u.lost or [], u.rises, u.drops), strict=True
            ):
                for n in names:
                    lst = self.occ.setdefault((kind, n), [])
                    lst.append(u.t)
                    self.ordinal[(kind, n, u.t)] = len(lst)
        self._visits()
        self.vocab = self._vocab()
        self._bm25 = None
        self._names: list[frozenset[str]] | None = None
        self._mention_index: dict[str, array] | None = None  #: name → units carrying it (positions)
        self._packed_mentions: dict[str, bytes] = {}
        #: o200k token count of a text (recall's packing): the tokenizer here; a loaded index counts by pieces
        self.count_tokens: Callable[[str], int] = count_tokens

    @property
    def units(self) -> list[Unit]:
        """Every unit in step order (an index loaded by :meth:`from_state` parses them on first use)."""
        if self._units is None:
            self._units = [self.by_t[t] for t in self.ts]
        return self._units

    def state(self, records: dict[int, bytes], pieces: tuple[dict[str, int], set[int]] | None = None) -> dict:
        """Everything recall reads, as plain ``marshal``-able data (``records``: each step's stored unit JSON,
        kept so that :meth:`from_state` parses only the units a query shows); builds the names and the BM25
        statistics if no query has yet. ``pieces``: ``(table, steps)`` — a piece table saved before (its
        counts hold for any text) and the steps whose lines may hold pieces it lacks: only their lines are
        rendered for the new table (:meth:`_piece_counts`; a piece still missing is counted by the
        tokenizer)."""
        from libraryfs.features.episodes.bm25 import Okapi

        if self._bm25 is None:
            self._bm25 = Okapi([tokenize(u.terms()) for u in self.units])
        out = {k: getattr(self, k) for k in self.STATE_FIELDS}
        out.update(
            mentions={n: a.tobytes() for n, a in self._mentions().items()},
            bm25=self._bm25.state(),
            records=[records[t] for t in self.ts],
            pieces=self._piece_counts(*(pieces or ({}, None))),
        )
        return out

    def _piece_counts(self, known: dict[str, int], steps: set[int] | None = None) -> dict[str, int]:
        """``known`` and the token counts of the pre-tokeniser pieces (:func:`libraryfs.index.tokens.
        piece_counts`) of every line of every step (of ``steps`` only, when given) as recall joins them
        (``"\\n"``; a line's last piece alone too: what it is at the end of the evidence), and of
        :data:`PIECE_SEEDS`: what an index loaded by :meth:`from_state` counts the evidence with. Lines that
        are not ASCII are left out (their texts are counted by the tokenizer)."""
        from libraryfs.index.tokens import piece_counts, pieces

        lines = [
            text
            for t in (self.ts if steps is None else sorted(steps & set(self.ts)))
            for text in (self.line(t), self.state_line(t), self.obs_line(t))
            if text and text.isascii()
        ]
        joined = "\n".join(lines)
        last = {p.rstrip("\n") for p in pieces(joined) or () if p.endswith("\n")}
        return piece_counts([joined, *sorted(last), *PIECE_SEEDS], known)

    @classmethod
    def from_state(cls, state: dict) -> EpisodeIndex:
        """The index :meth:`state` saved: equal in every answer to the one built from the units."""
        from libraryfs.features.episodes.bm25 import Okapi

        idx = cls.__new__(cls)
        for k in cls.STATE_FIELDS:
            setattr(idx, k, state[k])
        idx._units = None
        idx.by_t = _LazyUnits(idx.ts, state["records"])
        idx._names = None
        idx._mention_index = None
        idx._packed_mentions = state["mentions"]
        idx._bm25 = Okapi.from_state(state["bm25"])
        idx.count_tokens = PieceCounter(state["pieces"])
        return idx

    def _visits(self) -> None:
        current: dict[str, tuple[str, int]] = {}  # kind → (label, first step)
        prev_t: int | None = None
        for u in self.units:
            for kind, label in u.locations.items():
                cur = current.get(kind)
                if cur is not None and cur[0] == label:
                    continue
                if cur is not None and prev_t is not None:
                    self._close(cur[0], prev_t)
                current[kind] = (label, u.t)
                self.label_kinds.setdefault(label, kind)
                self.spans.setdefault(label, []).append((u.t, None))
                self._starts.setdefault(u.t, []).append(label)
                k = len(self.spans[label])
                self.ordinal[("visit", label, u.t)] = k
                self.occ.setdefault(("visit", label), []).append(u.t)
            prev_t = u.t

    def _close(self, label: str, end: int) -> None:
        first, _ = self.spans[label][-1]
        self.spans[label][-1] = (first, end)
        self._ends.setdefault(end, []).append(label)
        self.ordinal[("end", label, end)] = len(self.spans[label])

    def _vocab(self) -> dict[str, list[str]]:
        kinds: dict[str, set[str]] = {}
        for label, kind in self.label_kinds.items():
            kinds.setdefault(kind, set()).add(label)
        items = {n for k, n in self.occ if k in ("gain", "lose")}
        vitals: set[str] = set()
        for u in self.units:
            items.update(u.inventory or {})
            vitals.update(u.vitals or {})
        return {
            "events": sorted({n for k, n in self.occ if k == "ev"}),
            "items": sorted(items),
            "vitals": sorted(vitals),
            "labels": sorted(self.label_kinds),
            "objects": sorted(
                {o for u in self.units for o in u.objects} | {u.facing for u in self.units} - {""}
            ),
            "actions": sorted({u.action for u in self.units if u.action}),
            **{f"labels:{k}": sorted(v) for k, v in sorted(kinds.items())},
        }

    # -- Timeline -------------------------------------------------------------------------------------------
    def occurrences(self, kind: str, name: str) -> list[tuple[int, int | None]]:
        """``[(t, k)]`` of every occurrence of (kind, name) in step order (kind ``visit``: visit starts; kind
        ``act``: the steps whose action is ``name``)."""
        steps = self._actions().get(name, []) if kind == "act" else self.occ.get((kind, name), [])
        return [(t, i + 1) for i, t in enumerate(steps)]

    def _actions(self) -> dict[str, list[int]]:
        """Action name → the steps taking it, in step order (built on first use: it reads every unit)."""
        acts = self._acts
        if acts is None:
            acts = {}
            for t in self.ts:
                u = self.by_t.get(t)
                if u is not None and u.action:
                    acts.setdefault(u.action, []).append(t)
            self._acts = acts
        return acts

    def visits(self, label: str) -> list[tuple[int | None, int | None, int | None]]:
        """``[(k, first, last)]`` of every visit to ``label``; ``last`` is None for an ongoing visit."""
        return [(i + 1, a, b) for i, (a, b) in enumerate(self.spans.get(label, []))]

    def value(self, t: int, field: str, exclude: str | None = None) -> str | None:
        """The answer string of ``field`` at step ``t`` (see :mod:`.query` for the fields)."""
        u = self.by_t.get(t)
        if u is None:
            return None
        if field.startswith("count:"):
            return str((u.inventory or {}).get(field[6:], 0))
        return field_fact(u, field, exclude)[1]

    def names(self) -> list[frozenset[str]]:
        """Per unit (in :attr:`units` order), the names it carries: objects, events, changed items and vitals,
        labels, what it faces — what anchor compatibility compares a question's mentions with (cached)."""
        if self._names is None:
            self._names = [
                frozenset(
                    {*u.objects, *u.events, *(u.gained or []), *(u.lost or []), *u.locations.values()}
                    | {u.facing, *u.rises, *u.drops}
                )
                for u in self.units
            ]
        return self._names

    def _mentions(self) -> dict[str, array]:
        """Name → the positions (in :attr:`units` order, ascending) of the units whose :meth:`names` hold it."""
        if self._mention_index is None:
            inv: dict[str, array] = {}
            for i, names in enumerate(self.names()):
                for n in names:
                    a = inv.get(n)
                    if a is None:
                        a = inv[n] = array("I")
                    a.append(i)
            self._mention_index = inv
        return self._mention_index

    def mention_counts(self, wanted: set[str]) -> dict[int, int]:
        """Position → how many of the names ``wanted`` the unit carries (``len(wanted & names()[i])``), for
        the units carrying any: only those are touched."""
        out: dict[int, int] = {}
        for n in wanted:
            if self._mention_index is None and self._units is None:  # loaded by from_state: decode n only
                a = array("I")
                a.frombytes(self._packed_mentions.get(n, b""))
            else:
                a = self._mentions().get(n, array("I"))
            for i in a:
                out[i] = out.get(i, 0) + 1
        return out

    def has(self, t: int) -> bool:
        """Whether a unit has step ``t``."""
        return t in self.by_t

    def steps_between(self, lo: int, hi: int) -> list[int]:
        """Steps with a unit in ``lo..hi``."""
        return [t for t in self.ts[bisect_left(self.ts, lo) :] if t <= hi]

    # -- lines ------------------------------------------------------------------------------------------------
    def _marks(self, kind: str, names: list[str], t: int) -> str:
        return marks_text(names, lambda n: self.ordinal.get((kind, n, t)))

    def line(self, t: int) -> str:
        """The unit line of step ``t`` (see the module doc)."""
        u = self.by_t[t]
        return unit_line(
            u,
            lambda kind, n: self.ordinal.get((kind, n, t)),
            self._starts.get(t, []),
            self._ends.get(t, []),
        )

    def state_line(self, t: int) -> str:
        """The state line of step ``t``: inventory, position, vitals."""
        return state_line(self.by_t[t])

    def obs_line(self, t: int) -> str | None:
        """The observation line of step ``t`` (None when the step has none)."""
        u = self.by_t[t]
        text = " ".join(u.observation.split())
        return f"t={t} obs: {text}" if text else None

    def fragment(self, t: int, frag: tuple[str, ...]) -> str:
        """One fact of a key line: ``ev=collect_wood#2``, ``visit=zone-1-2#3``, ``act=do``, ``has=wood:3``."""
        kind = frag[0]
        if kind == "line":
            return self.line(t).split(" ", 1)[1]
        if kind == "field":
            key, val = field_fact(self.by_t[t], frag[1], frag[2] or None)
            return f"{key}={enc(val or '?')}" if key != "has" else f"has={val}"
        if kind == "act":  # an action counted: with its ordinal among the steps taking it, ``act=drink#2``
            steps = self._actions().get(frag[1], [])
            k = bisect_left(steps, t) + 1 if t in steps else None
            return f"act={marks_text([frag[1]], lambda _n: k)}"
        return f"{kind}={self._marks(kind, [frag[1]], t)}"

    # -- text ranking -----------------------------------------------------------------------------------------
    def bm25(self, tokens: list[str]) -> list[float]:
        """BM25 score of each unit (in :attr:`units` order) for the question's ``tokens``
        (:class:`~libraryfs.features.episodes.bm25.Okapi`: ``rank_bm25.BM25Okapi``'s scores without numpy)."""
        from libraryfs.features.episodes.bm25 import Okapi

        if not self.ts:
            return []
        if self._bm25 is None:
            self._bm25 = Okapi([tokenize(u.terms()) for u in self.units])
        return self._bm25.get_scores(tokens)


class _LazyUnits:
    """Step → :class:`Unit`, each parsed from its stored JSON when first asked for (the ``by_t`` of an index
    loaded by :meth:`EpisodeIndex.from_state`)."""

    def __init__(self, ts: list[int], records: list[bytes]) -> None:
        self._pos = {t: i for i, t in enumerate(ts)}
        self._records = records
        self._parsed: dict[int, Unit] = {}

    def __contains__(self, t: object) -> bool:
        return t in self._pos

    def get(self, t: int, default: Unit | None = None) -> Unit | None:
        """The unit of step ``t`` (``default`` when there is none)."""
        u = self._parsed.get(t)
        if u is None:
            i = self._pos.get(t)
            if i is None:
                return default
            u = self._parsed[t] = Unit.from_json(json.loads(self._records[i]))
        return u

    def __getitem__(self, t: int) -> Unit:
        u = self.get(t)
        if u is None:
            raise KeyError(t)
        return u


def marks_text(names: list[str], ordinal: Callable[[str], int | None]) -> str:
    """``a#1,b#3`` — names with their ordinals (a name without one is written bare)."""
    out = []
    for n in names:
        k = ordinal(n)
        out.append(f"{enc(n)}#{k}" if k else enc(n))
    return ",".join(out)


def unit_line(u: Unit, ordinal: Callable[[str, str], int | None], starts: list[str], ends: list[str]) -> str:
    """The unit line of ``u``: ``ordinal(kind, name)`` gives the ``#k`` marks; ``starts``/``ends`` the labels
    whose visit begins/ends at this step."""
    parts = [f"t={u.t}", f"act={enc(u.action or '?')}"]
    parts += [f"{label_key(k)}={enc(v)}" for k, v in u.locations.items()]
    if u.facing:
        parts.append(f"face={enc(u.facing)}")
    if u.objects:
        parts.append("near=" + ",".join(enc(o) for o in u.objects))
    for kind, names in zip(
        OCC_KINDS, (u.events, u.gained or [], u.lost or [], u.rises, u.drops), strict=True
    ):
        if names:
            parts.append(f"{kind}=" + marks_text(names, lambda n, kind=kind: ordinal(kind, n)))
    for key, labels in (("visit", starts), ("end", ends)):
        if labels:
            parts.append(f"{key}=" + marks_text(labels, lambda n, key=key: ordinal(key, n)))
    return " ".join(parts)


def stored_line(u: Unit) -> str:
    """The unit line from the ordinals stored in ``u.marks`` (the views' rendering; no visit ends)."""
    starts = [u.locations[k] for k in u.marks.get("visit", {}) if k in u.locations]

    def ordinal(kind: str, name: str) -> int | None:
        """The ordinal stored for ``name`` under ``kind`` in ``u.marks`` (for ``visit``: under the location
        key whose value is ``name``); None without one."""
        if kind == "visit":
            kind_of = next((k for k, v in u.locations.items() if v == name), None)
            return u.marks.get("visit", {}).get(kind_of)
        return u.marks.get(kind, {}).get(name)

    return unit_line(u, ordinal, starts, [])


def state_line(u: Unit) -> str:
    """The state line of ``u``: ``t=412 inv=sapling:1,wood:2 pos=34,40 health=9 food=7 drink=6 energy=8``."""
    inv = ",".join(f"{enc(k)}:{v}" for k, v in sorted((u.inventory or {}).items())) or "none"
    parts = [f"t={u.t}", f"inv={inv}"]
    if u.position:
        parts.append(f"pos={u.position[0]},{u.position[1]}")
    parts += [f"{vital_key(k)}={v}" for k, v in (u.vitals or {}).items()]
    return " ".join(parts)


_TOK = re.compile(r"[a-z0-9]+(?:[-_][a-z0-9]+)*")


def tokenize(text: str) -> list[str]:
    """BM25 terms: lower-cased words; ``collect_wood`` and ``zone-2-1`` also yield their parts."""
    out = []
    for w in _TOK.findall(text.lower()):
        out.append(w)
        if "_" in w or "-" in w:
            out += [p for p in re.split(r"[-_]", w) if p and not p.isdigit()]
    return out


def field_fact(u: Unit, field: str, exclude: str | None = None) -> tuple[str, str | None]:
    """``(line key, value)`` of ``field`` at unit ``u``: ``("act", "do")``, ``("has", "wood:3")``, ..."""
    if field == "action":
        return "act", u.action or None
    if field == "facing":
        return "face", u.facing or None
    if field == "near":
        return "near", ",".join(u.objects) or "none"
    if field.startswith("count:"):
        item = field[6:]
        return "has", f"{item}:{(u.inventory or {}).get(item, 0)}"
    if field.startswith("vital:"):
        v = field[6:]
        got = (u.vitals or {}).get(v)
        return vital_key(v), None if got is None else str(got)
    if field == "where":
        for kind, label in u.locations.items():
            if label != exclude:
                return label_key(kind), label
        return "place", None
    if field in u.locations:
        return label_key(field), u.locations[field]
    if field == "place" and u.locations:  # no "place" kind: the primary label
        kind, label = next(iter(u.locations.items()))
        return label_key(kind), label
    return label_key(field), None
