"""Schema migrations: a library made by the previous releases opens, migrates, checks clean and reads the same;
read-only opens, batches, resumption, concurrent openers, refusals and the registry.

The fixture (tests/fixtures/schema1-784e628.tar.gz) was made by releases 03194f1 and 784e628 themselves; how
is written in tests/helpers/schema1_fixture.py.
"""

from __future__ import annotations

import json
import logging
import os

import pytest
from helpers.schema1_fixture import snapshot, unpack

from libraryfs.errors import SchemaMismatch
from libraryfs.fs import migrations
from libraryfs.fs import schema as S
from libraryfs.fs.check import check, describe
from libraryfs.fs.lmdb_backend import LmdbBackend
from libraryfs.fs.meta import EntryMeta, SectionMeta
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView
from libraryfs.index.find import find

# a migration announces itself (and its end) at WARNING: it changes what older releases can open
pytestmark = pytest.mark.expect_log(r"migrating the library from schema", r"schema \d+ → \d+ done")


def short_dirents(st: Store) -> int:
    with st.read() as t:
        return sum(1 for _k, v in t.kv.range(S.DB_DIRENTS) if len(v) == 8)


def version(st: Store) -> int:
    with st.read() as t:
        return t.cfg_int(S.CFG_SCHEMA_VERSION)


def view_snapshot(st: Store) -> dict:
    def finder(term: bytes) -> list[bytes]:
        with st.read() as t:
            return find(t, term)

    return json.loads(json.dumps(snapshot(LibraryView(st), finder)))


@pytest.fixture
def old_lib(tmp_path):
    libdir, manifest = unpack(str(tmp_path))
    return libdir, manifest


def test_the_fixture_is_a_schema_1_library_with_both_dirent_forms(old_lib):
    libdir, manifest = old_lib
    st = Store(libdir, readonly=True)
    try:
        assert st.schema_version == 1 and version(st) == 1
        assert short_dirents(st) > 0  # written by 03194f1: no type byte
        with st.read() as t:
            assert any(len(v) == 9 for _k, v in t.kv.range(S.DB_DIRENTS))  # written by 784e628
            assert t.count(S.DB_META) > 100 and t.count(S.DB_TOC) > 3 and t.count(S.DB_NAMES) > 100
    finally:
        st.close()
    assert len(manifest["tree"]) > 130 and manifest["find"]["entry 17"]


def test_previous_release_library_migrates_checks_clean_and_reads_the_same(old_lib, caplog):
    libdir, manifest = old_lib
    caplog.set_level(logging.WARNING, logger="libraryfs.migrations")
    st = Store(libdir)  # a read-write open migrates
    try:
        assert st.schema_version == S.SCHEMA_VERSION == version(st) == 3
        assert short_dirents(st) == 0
        assert "migrating the library from schema 1 to 2" in caplog.text  # never silent
        assert "migrating the library from schema 2 to 3" in caplog.text
        report = check(st)
        assert report.problems == [] and report.schema_version == 3 and not report.pending_migrations
        with st.read() as t:
            history = S.loads(t.cfg(S.CFG_SCHEMA_HISTORY))
            assert t.cfg(S.CFG_MIGRATION) is None
            for _ino, rec in t.iter_meta():  # every record the previous release wrote decodes, typed
                assert isinstance(rec, EntryMeta | SectionMeta) and rec.extra == {}
        assert [(h["from"], h["to"]) for h in history] == [(1, 2), (2, 3)] and history[0]["records"] >= 11
        assert history[1]["records"] == report.inodes  # every inode record rewritten once
        got = view_snapshot(st)
    finally:
        st.close()
    assert got["tree"] == manifest["tree"]  # every file, link, xattr, directory listing and TOC page
    assert got["find"] == manifest["find"]  # names table and meta summaries
    st = Store(libdir)  # the next open has nothing to do
    try:
        assert version(st) == 3
        with st.read() as t:
            assert len(S.loads(t.cfg(S.CFG_SCHEMA_HISTORY))) == 2
    finally:
        st.close()


def test_read_only_open_of_schema_1_serves_it_unchanged_and_check_says_what_is_pending(old_lib):
    libdir, manifest = old_lib
    st = Store(libdir, readonly=True)
    try:
        assert st.schema_version == 1
        report = check(st)
        assert report.problems == [] and report.schema_version == 1
        assert report.pending_migrations == [
            "1 → 2: dirents record the child's file type",
            "2 → 3: inodes record their allocated blocks (st_blocks without holes)",
        ]
        assert describe(report).splitlines()[0].startswith("schema 1 (this release writes 3; pending")
        got = view_snapshot(st)
        assert short_dirents(st) > 0 and version(st) == 1  # nothing written
    finally:
        st.close()
    assert got["tree"] == manifest["tree"] and got["find"] == manifest["find"]


def test_a_migration_in_small_batches_resumes_where_it_stopped(old_lib, monkeypatch):
    """A crash between two batches (here: the step raises in its second batch) leaves the first batch
    committed with its progress; the next read-write open resumes from there."""
    libdir, _ = old_lib
    st = Store(libdir, readonly=True)
    n_short = short_dirents(st)
    st.close()
    real = migrations.MIGRATIONS[1]
    calls: list[bytes] = []

    def crashing(t, resume: bytes, batch: int):
        calls.append(resume)
        if len(calls) == 2:
            raise RuntimeError("power cut")
        return real.step(t, resume, batch)

    monkeypatch.setattr(
        migrations,
        "MIGRATIONS",
        {**migrations.MIGRATIONS, 1: migrations.Migration(1, real.summary, crashing, True)},
    )
    monkeypatch.setattr(migrations, "BATCH_RECORDS", 7)
    with pytest.raises(RuntimeError, match="power cut"):
        Store(libdir)
    st = Store(libdir, readonly=True)
    try:
        with st.read() as t:
            progress = t.cfg(S.CFG_MIGRATION)
        assert version(st) == 1 and progress is not None and S.from_u64(progress) == 1
        done_early = n_short - short_dirents(st)
        assert 0 < done_early < n_short
    finally:
        st.close()
    monkeypatch.setattr(migrations, "MIGRATIONS", {**migrations.MIGRATIONS, 1: real})
    st = Store(libdir)  # the next writer finishes the job from the recorded progress
    try:
        assert version(st) == 3 and short_dirents(st) == 0 and check(st).problems == []
        with st.read() as t:
            history = S.loads(t.cfg(S.CFG_SCHEMA_HISTORY))
            assert t.cfg(S.CFG_MIGRATION) is None
        assert history[-2]["records"] == n_short  # each dirent rewritten once over both runs
    finally:
        st.close()


def test_steps_are_idempotent(old_lib):
    libdir, _ = old_lib
    st = Store(libdir)
    try:
        before = _dump(st)
        nxt, changed = st.run_write(lambda t: migrations.MIGRATIONS[1].step(t, b"", 10_000))
        assert (nxt, changed) == (None, 0) and _dump(st) == before
    finally:
        st.close()


def _dump(st: Store) -> dict:
    with st.read() as t:
        return {table: list(t.kv.range(table)) for table in S.CORE_DBS}


def test_a_damaged_old_store_still_migrates_and_check_repair_fixes_it(old_lib):
    """A dangling 8-byte dirent cannot get a type byte: the step leaves it to check (I2) instead of failing."""
    libdir, _ = old_lib
    raw = LmdbBackend(libdir)  # the backend alone: no schema check, no migration
    raw.run_write(lambda t: t.put(S.DB_DIRENTS, S.dirent_key(S.ROOT_INO, b"ghost"), S.u64(987654)))
    raw.close()
    st = Store(libdir)
    try:
        assert version(st) == 3
        assert sorted({p.code for p in check(st).problems}) == ["I2"]
        assert check(st, repair=True).clean and check(st).problems == []
    finally:
        st.close()


def test_a_newer_schema_is_refused_on_every_open(libdir):
    st = Store(libdir)
    st.run_write(lambda t: t.put_cfg(S.CFG_SCHEMA_VERSION, S.u64(S.SCHEMA_VERSION + 1)))
    st.close()
    for readonly in (True, False):
        with pytest.raises(SchemaMismatch, match="upgrade libraryfs"):
            Store(libdir, readonly=readonly)


def test_a_step_that_old_readers_cannot_serve_refuses_read_only_opens(libdir, monkeypatch):
    """How a later step is added: register it, bump SCHEMA_VERSION; until a writer migrates, a read-only
    open is refused with the command that migrates when the step is not read-compatible."""
    seen: list[bytes] = []

    def mark_inodes(t, resume: bytes, batch: int):
        rows = list(t.kv.range(S.DB_INODES, resume, limit=batch))
        for k, _v in rows:
            if t.kv.get(S.DB_XATTRS, k + b"user.v3") is None:
                t.kv.put(S.DB_XATTRS, k + b"user.v3", b"1")
                seen.append(k)
        return (rows[-1][0] + b"\0" if len(rows) == batch else None), len(rows)

    registry = dict(migrations.MIGRATIONS)
    registry[3] = migrations.Migration(3, "test step", mark_inodes, read_compatible=False)
    monkeypatch.setattr(migrations, "MIGRATIONS", registry)
    monkeypatch.setattr(S, "SCHEMA_VERSION", 4)
    with pytest.raises(SchemaMismatch, match="open it read-write once"):
        Store(libdir, readonly=True)
    st = Store(libdir)
    try:
        assert version(st) == 4 and seen == [S.u64(S.ROOT_INO)]
    finally:
        st.close()
    Store(libdir, readonly=True).close()


def test_the_registry_covers_every_version_in_order():
    assert sorted(migrations.MIGRATIONS) == list(range(1, S.SCHEMA_VERSION))
    for source, m in migrations.MIGRATIONS.items():
        assert m.source == source and m.summary and m.step.__doc__
    with pytest.raises(ValueError, match="registered twice"):
        migrations.migration(1, "again", read_compatible=True)(lambda t, r, b: (None, 0))


def _as_schema_2(libdir) -> None:
    """Rewrite a current library in the schema-2 form: 64-byte inode records (no ``blocks``), version 2."""
    raw = LmdbBackend(libdir)

    def downgrade(t) -> None:
        for k, v in list(t.range(S.DB_INODES)):
            node = S.Inode.unpack(S.from_u64(k), v)
            t.put(S.DB_INODES, k, node.pack()[: S.INODE_SIZE_V2])
        t.put(S.DB_CONFIG, S.CFG_SCHEMA_VERSION, S.u64(2))

    raw.run_write(downgrade)
    raw.close()


def test_schema_2_inodes_get_their_allocated_blocks_and_du_stops_counting_holes(libdir):
    st = Store(libdir)
    v = LibraryView(st)
    fh = v.create(b"/sparse", 0o644, os.O_RDWR, 0, 0)
    v.truncate(None, 1 << 30, fh)
    v.write(fh, b"x", 0)
    v.release(fh)
    fh = v.create(b"/dense", 0o644, os.O_RDWR, 0, 0)
    v.write(fh, b"y" * 100_000, 0)
    v.release(fh)
    st.close()
    _as_schema_2(libdir)
    st = Store(libdir, readonly=True)  # read-compatible: served with the old estimate, nothing written
    try:
        assert st.schema_version == 2
        assert LibraryView(st).getattr(b"/sparse")["st_blocks"] == (1 << 30) // 512
        assert check(st).pending_migrations == [
            "2 → 3: inodes record their allocated blocks (st_blocks without holes)"
        ]
    finally:
        st.close()
    st = Store(libdir)  # a writer migrates
    try:
        assert version(st) == 3
        v = LibraryView(st)
        assert v.getattr(b"/sparse")["st_blocks"] == 8  # one byte stored: one 4 KiB page
        assert v.getattr(b"/dense")["st_blocks"] == 128 + 72  # 64 KiB + 34,464 bytes in 4 KiB pages
        assert v.getattr(b"/")["st_blocks"] == 0
        with st.read() as t:
            assert all(len(val) == S.INODE_SIZE for _k, val in t.kv.range(S.DB_INODES))
            history = S.loads(t.cfg(S.CFG_SCHEMA_HISTORY))
        assert history[-1]["from"] == 2 and history[-1]["records"] == 3
        assert check(st).problems == []
        nxt, changed = st.run_write(lambda t: migrations.MIGRATIONS[2].step(t, b"", 10_000))
        assert (nxt, changed) == (None, 0)  # idempotent
    finally:
        st.close()
