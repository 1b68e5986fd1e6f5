"""The store-backend seam: the LMDB backend against a model of the interface (a sorted dict), its behaviour
at the edges (map growth, prefixes ending in 0xFF, deletes under ranges), and the one-importer rule for lmdb.
"""

from __future__ import annotations

import ast
import os
import random
from pathlib import Path

import pytest

from libraryfs.fs import schema as S
from libraryfs.fs.backend import bound_getter, prefix_end
from libraryfs.fs.lmdb_backend import LmdbBackend
from libraryfs.fs.store import Store

REPO = Path(__file__).resolve().parents[2]
TABLES = [S.DB_DATA, S.DB_META]
ALPHABET = [b"\x00", b"\x01", b"a", b"b", b"\xfe", b"\xff"]


class Model:
    """The interface's semantics written as plainly as possible over dicts (docs: libraryfs/fs/backend.py)."""

    def __init__(self) -> None:
        self.t: dict[bytes, dict[bytes, bytes]] = {name: {} for name in TABLES}

    def get(self, table, key):
        return self.t[table].get(key)

    def range(self, table, start=b"", end=None, *, reverse=False, limit=None, keys_only=False):
        keys = sorted(k for k in self.t[table] if k >= start and (end is None or k < end))
        if reverse:
            keys.reverse()
        if limit is not None:
            keys = keys[: max(limit, 0)]
        return iter([(k, b"" if keys_only else self.t[table][k]) for k in keys])

    def prefix(self, table, prefix, **kw):
        return self.range(table, prefix, prefix_end(prefix), **kw)

    def count(self, table):
        return len(self.t[table])

    def put(self, table, key, value, *, append=False):
        self.t[table][key] = value

    def delete(self, table, key):
        return self.t[table].pop(key, None) is not None

    def delete_range(self, table, start, end):
        dead = [k for k in self.t[table] if k >= start and (end is None or k < end)]
        for k in dead:
            del self.t[table][k]
        return len(dead)


def _key(rng: random.Random) -> bytes:
    return b"".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 3)))


def _op(rng: random.Random, write: bool) -> tuple[str, tuple, dict]:
    table = rng.choice(TABLES)
    kinds = ["get", "range", "prefix", "count"] + (["put"] * 3 + ["delete", "delete_range"] if write else [])
    kind = rng.choice(kinds)
    if kind in ("get", "delete"):
        return kind, (table, _key(rng)), {}
    if kind == "count":
        return kind, (table,), {}
    if kind == "put":
        return kind, (table, _key(rng), bytes(rng.randrange(256) for _ in range(rng.randint(0, 4)))), {}
    a, b = sorted([_key(rng), _key(rng)])
    end = rng.choice([b, None])
    if kind == "delete_range":
        return kind, (table, rng.choice([b"", a]), end), {}
    kw = {
        "reverse": rng.random() < 0.4,
        "limit": rng.choice([None, 0, 1, 2, 5]),
        "keys_only": rng.random() < 0.2,
    }
    if kind == "prefix":
        return kind, (table, a[: rng.randint(0, len(a))]), kw
    return kind, (table, rng.choice([b"", a]), end), kw


def _apply(txn, ops) -> list:
    return [
        list(r) if name in ("range", "prefix") else r
        for name, args, kw in ops
        for r in [getattr(txn, name)(*args, **kw)]
    ]


@pytest.mark.parametrize("seed", range(4))
def test_lmdb_backend_answers_as_the_model(tmp_path, seed):
    """Gets, ranges (start/end/reverse/limit/keys_only), prefixes with 0x00/0xFF bytes, counts, puts, deletes
    and range deletes, inside write transactions too (reads see the transaction's own writes)."""
    backend = LmdbBackend.create(tmp_path / "lib")
    model = Model()
    rng = random.Random(seed)
    try:
        for step in range(60):
            write = rng.random() < 0.6
            ops = [_op(rng, write) for _ in range(rng.randint(1, 8))]
            if write:
                got = backend.run_write(lambda txn, ops=ops: _apply(txn, ops))
            else:
                with backend.read() as txn:
                    got = _apply(txn, ops)
            assert got == _apply(model, ops), f"seed {seed} step {step}: {ops}"
    finally:
        backend.close()


def test_a_failed_write_leaves_nothing_and_a_read_snapshot_ignores_later_commits(tmp_path):
    backend = LmdbBackend.create(tmp_path / "lib")
    try:
        backend.run_write(lambda t: t.put(S.DB_DATA, b"k", b"old"))

        def fail(t):
            t.put(S.DB_DATA, b"k", b"new")
            raise ValueError("abort")

        with pytest.raises(ValueError):
            backend.run_write(fail)
        with backend.read() as t:
            assert t.get(S.DB_DATA, b"k") == b"old"
            get = bound_getter(t, S.DB_DATA)
            assert get(b"k") == b"old" and get(b"missing") is None
    finally:
        backend.close()


def test_the_map_grows_under_a_write_that_does_not_fit(tmp_path):
    backend = LmdbBackend.create(tmp_path / "lib", map_size=1 << 20)
    try:
        blob = os.urandom(60_000)
        backend.run_write(lambda t: [t.put(S.DB_DATA, b"%06d" % i, blob) for i in range(60)])  # ~3.6 MB
        assert backend.info()["map_size"] > 1 << 20
        with backend.read() as t:
            assert t.count(S.DB_DATA) == 60 and t.get(S.DB_DATA, b"000059") == blob
    finally:
        backend.close()


def test_extension_tables_must_be_opened_and_survive_reopening(tmp_path):
    st = Store.create(tmp_path / "lib")
    st.open_table(S.DB_UNITS)
    st.run_write(lambda t: t.kv.put(S.DB_UNITS, b"mx", b"1"))
    st.close()
    st = Store(tmp_path / "lib", readonly=True)
    try:
        with st.read() as t, pytest.raises(KeyError):
            t.kv.get(S.DB_UNITS, b"mx")
        st.open_table(S.DB_UNITS)
        with st.read() as t:
            assert t.kv.get(S.DB_UNITS, b"mx") == b"1"
    finally:
        st.close()


@pytest.mark.parametrize(
    ("prefix", "end"),
    [
        (b"ab", b"ac"),
        (b"a\xff", b"b"),
        (b"\x00", b"\x01"),
        (b"", None),
        (b"\xff\xff", None),
        (b"a\xff\xff", b"b"),
    ],
)
def test_prefix_end(prefix, end):
    assert prefix_end(prefix) == end


def _imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_nothing_outside_the_lmdb_backend_imports_lmdb():
    """The seam holds: every reader and writer of the store goes through the backend interface."""
    allowed = {REPO / "libraryfs" / "fs" / "lmdb_backend.py"}
    offenders = [
        str(p.relative_to(REPO))
        for top in ("libraryfs", "daemon", "cli", "bench", "tests")
        for p in (REPO / top).rglob("*.py")
        if p not in allowed and "lmdb" in _imports_of(p)
    ]
    assert offenders == []
    assert "lmdb" in _imports_of(REPO / "libraryfs" / "fs" / "lmdb_backend.py")  # the scan sees imports


def test_a_store_over_a_given_backend_checks_its_schema_like_any_open(tmp_path):
    """How another backend plugs in: ``Store(libdir, backend=...)`` gets the typed layer, the schema check
    and the migrations of an open."""
    from libraryfs.errors import SchemaMismatch

    lib = tmp_path / "lib"
    Store.create(lib, backend=LmdbBackend.create(lib)).close()
    st = Store(lib, backend=LmdbBackend(lib))
    st.run_write(lambda t: t.put_cfg(S.CFG_SCHEMA_VERSION, S.u64(S.SCHEMA_VERSION + 5)))
    st.close()
    with pytest.raises(SchemaMismatch):
        Store(lib, backend=LmdbBackend(lib, readonly=True), readonly=True)
