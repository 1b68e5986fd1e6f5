"""Units of every episode in the store's ``units`` table (registered in ``schema.EXTENSION_DBS``).

Why a named DB rather than one JSON file per step under ``episodes/<id>/units/``: recall reads a whole
episode's units with one range scan in one read transaction (MVCC — it works beside a live mount, and
1,000 units load in milliseconds instead of 1,000 file opens through FUSE); a batch of appended steps is
one write transaction; the units are the builder's source of truth and the files under
``episodes/<id>/`` are views derived from them (rebuildable), so the tree does not carry the same facts
twice. The per-step view ``steps/<t>.md`` shows every field of a unit to an agent with only a shell.

Keys (``ep`` is the episode id as UTF-8, ``t`` a u64 big-endian so keys sort by step)::

    b"u" + ep + b"\\x00" + u64(t)  → unit JSON (:meth:`Unit.to_json`)
    b"m" + ep                     → episode meta JSON: {"state": EpisodeState, "consumed_bytes": n,
                                     "units": n, "errors": [...], "built_ns": ns, "generation": hex}

``generation`` (:data:`GENERATION`) names the current set of the episode's unit records: :meth:`UnitDB.put`
gives it a new random value in the same write transaction whenever it writes a unit, and keeps it when it
writes the meta record alone. Derived data (the saved recall index,
:mod:`~libraryfs.features.episodes.indexcache`) is keyed by it, so a reader learns whether that data is
current from one record instead of reading and hashing every unit. A meta record without one — written by
a release before it, or by any writer that rebuilds the meta record without carrying it — makes readers
fall back to a digest of the records.

Episode ids are path components: 1–200 bytes, no ``/`` and no NUL.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from libraryfs.features.episodes.units import Unit
from libraryfs.fs import schema as S
from libraryfs.fs.backend import prefix_end
from libraryfs.fs.store import Store

DB_NAME = S.DB_UNITS
GENERATION = "generation"  #: meta field naming the current set of unit records (see the module doc)
_GENERATION_BYTES = 16  #: random bytes of a generation (128 bits: a repeat is never expected)


def check_question(question: str) -> str:
    """The question of ``libraryfs recall``/``answer`` and the MCP ``recall`` tool, refused when blank as a
    search term is (:func:`libraryfs.index.find.check_term`): an empty question asks nothing, and before,
    ``recall ep ""`` printed the episode's first steps as if they answered it (trial 1203b). Returns
    ``question``; raises ``ValueError`` (the MCP tool's EINVAL; the CLI makes it a usage error)."""
    if not question.strip():
        raise ValueError("the question is empty")
    return question


def check_episode_id(ep: str) -> bytes:
    """UTF-8 bytes of a valid episode id; ``ValueError`` otherwise."""
    b = ep.encode("utf-8", "surrogateescape")
    if not b or len(b) > 200 or b"/" in b or b"\x00" in b or ep in (".", ".."):
        raise ValueError(f"not a valid episode id: {ep!r}")
    return b


class UnitDB:
    """Read and write episodes' units and meta in ``store`` (one transaction per call)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.open_table(DB_NAME)

    def meta(self, ep: str) -> dict[str, Any]:
        """Episode meta (``{}`` for an unknown episode)."""
        with self.store.read() as t:
            raw = t.kv.get(DB_NAME, b"m" + check_episode_id(ep))
        return json.loads(raw) if raw else {}

    def put(self, ep: str, units: list[Unit], meta: dict[str, Any]) -> None:
        """Store ``units`` (replacing those with the same ``t``) and ``meta`` in one write transaction.

        The meta record gets the episode's :data:`GENERATION` (whatever ``meta`` holds under that name is
        replaced): a new random one when ``units`` is not empty, else the stored one (a new one when there
        is none)."""
        e = check_episode_id(ep)
        recs = [
            (b"u" + e + b"\x00" + S.u64(u.t), json.dumps(u.to_json(), separators=(",", ":")).encode())
            for u in units
        ]

        def put(t: Any) -> None:
            """The write transaction body: put every unit record, then the episode's meta record."""
            gen = None if units else _generation(t.kv.get(DB_NAME, b"m" + e))
            m = {**meta, GENERATION: gen or os.urandom(_GENERATION_BYTES).hex()}
            for k, v in recs:
                t.kv.put(DB_NAME, k, v)
            t.kv.put(DB_NAME, b"m" + e, json.dumps(m, separators=(",", ":")).encode())

        self.store.run_write(put)

    def units(self, ep: str, t_from: int = 0, t_to: int | None = None) -> list[Unit]:
        """Units of ``ep`` with ``t_from ≤ t ≤ t_to`` in step order (one read transaction)."""
        return parse_units(self.records(ep, t_from, t_to))

    def records(self, ep: str, t_from: int = 0, t_to: int | None = None) -> list[bytes]:
        """The stored JSON of the units :meth:`units` returns (what crosses a pipe cheaply: pickling 10⁴
        ``Unit`` objects and back cost ~0.6 s of CPU, the bytes ~10 ms)."""
        prefix = b"u" + check_episode_id(ep) + b"\x00"
        end = prefix + S.u64(t_to + 1) if t_to is not None and t_to + 1 < 1 << 64 else prefix_end(prefix)
        with self.store.read() as t:
            return [bytes(v) for _k, v in t.kv.range(DB_NAME, prefix + S.u64(t_from), end)]

    def snapshot(
        self, ep: str, need_records: Callable[[str | None], bool]
    ) -> tuple[str | None, list[bytes] | None]:
        """``(generation, records)`` of ``ep`` from one read transaction: its :data:`GENERATION` (None when
        its meta record has none, or there is none) and — only when ``need_records(generation)`` — the
        stored JSON of all its units (:meth:`records`; None otherwise)."""
        prefix = b"u" + check_episode_id(ep) + b"\x00"
        with self.store.read() as t:
            gen = _generation(t.kv.get(DB_NAME, b"m" + prefix[1:-1]))
            if not need_records(gen):
                return gen, None
            return gen, [bytes(v) for _k, v in t.kv.range(DB_NAME, prefix, prefix_end(prefix))]

    def episodes(self) -> list[str]:
        """Ids of the episodes with meta, sorted."""
        with self.store.read() as t:
            return [
                k[1:].decode("utf-8", "surrogateescape")
                for k, _ in t.kv.prefix(DB_NAME, b"m", keys_only=True)
            ]

    def drop(self, ep: str) -> int:
        """Delete an episode's units and meta; returns the number of units deleted."""
        e = check_episode_id(ep)
        prefix = b"u" + e + b"\x00"

        def drop(t: Any) -> int:
            """The write transaction body: delete the episode's unit records and meta; returns the number of
            units deleted."""
            n = t.kv.delete_range(DB_NAME, prefix, prefix_end(prefix))
            t.kv.delete(DB_NAME, b"m" + e)
            return n

        return self.store.run_write(drop)


def parse_units(records: list[bytes]) -> list[Unit]:
    """:class:`Unit` objects of stored unit JSON records (:meth:`UnitDB.records`)."""
    return [Unit.from_json(json.loads(v)) for v in records]


def _generation(raw: bytes | None) -> str | None:
    """The :data:`GENERATION` of a stored meta record (None: no record, or a record without one). A meta
    record that is not a JSON object counts as having none."""
    if not raw:
        return None
    try:
        gen = json.loads(raw).get(GENERATION)
    except (ValueError, AttributeError):
        return None
    return gen if isinstance(gen, str) and gen else None
