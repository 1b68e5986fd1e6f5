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
                                     "units": n, "errors": [...], "built_ns": ns}

Episode ids are path components: 1–200 bytes, no ``/`` and no NUL.
"""

from __future__ import annotations

import json
from typing import Any

from libraryfs.features.episodes.units import Unit
from libraryfs.fs import schema as S
from libraryfs.fs.backend import prefix_end
from libraryfs.fs.store import Store

DB_NAME = S.DB_UNITS


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
        """Store ``units`` (replacing those with the same ``t``) and ``meta`` in one write transaction."""
        e = check_episode_id(ep)
        recs = [
            (b"u" + e + b"\x00" + S.u64(u.t), json.dumps(u.to_json(), separators=(",", ":")).encode())
            for u in units
        ]
        m = json.dumps(meta, separators=(",", ":")).encode()

        def put(t: Any) -> None:
            """The write transaction body: put every unit record, then the episode's meta record."""
            for k, v in recs:
                t.kv.put(DB_NAME, k, v)
            t.kv.put(DB_NAME, b"m" + e, m)

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
