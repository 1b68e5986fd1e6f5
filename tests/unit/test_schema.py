"""The schema's codecs: dirent values (both forms), names keys, and the typed meta records (round trip,
unknown keys kept, old records decoded, damage detected by decode and by check)."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from libraryfs.errors import Corrupt
from libraryfs.fs import schema as S
from libraryfs.fs.check import check
from libraryfs.fs.meta import EntryMeta, SectionMeta, decode_meta
from libraryfs.fs.store import Store
from libraryfs.fs.tree import StoreTree


def test_dirent_values_carry_the_file_type_and_old_ones_read_without_it():
    for mode in (S.S_IFDIR | 0o755, S.S_IFREG | 0o644, S.S_IFLNK | 0o777, 0o010644):  # fifo too
        raw = S.dirent_value(42, mode)
        assert len(raw) == 9 and S.from_u64(raw) == 42 and S.dirent_type(raw) == mode & S.S_IFMT
    assert S.dirent_type(S.u64(42)) is None  # schema 1's 8-byte form


def test_names_keys_fold_case_and_keep_undecodable_bytes():
    fold = S.name_fold(b"README.md") + b"\0"
    assert S.names_key(b"README.md", 7, 1).startswith(fold) and S.names_key(b"readme.MD", 7, 1).startswith(
        fold
    )
    # every link is its own key: another directory, or the same directory and another case
    keys = {S.names_key(b"README.md", 7, 1), S.names_key(b"README.md", 7, 2), S.names_key(b"readme.MD", 7, 1)}
    assert len(keys) == 3
    assert S.name_fold(b"CAF\xe9") == b"caf\xe9"  # undecodable bytes survive the fold
    # an exact-name scan of "a" (prefix b"a\0") meets every "a" and no "ab": the NUL sorts first
    assert S.names_key(b"a", 1, 9) < S.names_key(b"a", 1 << 40, 1) < S.names_key(b"ab", 0, 0)


ENTRY = {
    "name": "caf\udce9.md",  # a non-UTF-8 name, as the indexer stores it (surrogateescape)
    "parent": 5,
    "size": 120,
    "gen": 3,
    "hash": "ab" * 32,
    "tokens": 30,
    "approx": False,
    "link": False,
    "summary": "A note.",
    "by": "deterministic",
}
SECTION = {
    "description": "3 entries: notes",
    "tokens_total": 90,
    "entries_total": 3,
    "toc_generation": 4,
    "toc_journal_seq": 17,
    "toc_pages": 1,
    "toc_levels": 1,
    "toc_max_page_tokens": 80,
    "toc_page_tokens": [80],
}


def test_meta_records_round_trip_by_kind():
    e = decode_meta(json.dumps(ENTRY).encode())
    s = decode_meta(json.dumps(SECTION).encode())
    assert isinstance(e, EntryMeta) and e.name == ENTRY["name"] and e.tokens == 30 and e.extra == {}
    assert isinstance(s, SectionMeta) and s.toc_page_tokens == [80] and s.toc_journal_seq == 17
    assert json.loads(e.encode()) == ENTRY and json.loads(s.encode()) == SECTION
    assert decode_meta(e.encode()) == e and decode_meta(s.encode()) == s


def test_missing_keys_take_defaults_and_none_is_not_written():
    e = decode_meta(b'{"name":"x","parent":1}')
    assert isinstance(e, EntryMeta) and e.summary is None and e.tokens is None and e.size is None
    assert "summary" not in json.loads(e.encode())
    s = decode_meta(b"{}")
    assert isinstance(s, SectionMeta) and s.toc_journal_seq is None and s.description is None
    assert decode_meta(b'{"name":"x","summary":null}').summary is None  # a null counts as absent


def test_unknown_keys_are_kept_and_written_back():
    rec = decode_meta(json.dumps({**ENTRY, "language": "en", "later": {"a": [1, 2]}}).encode())
    assert rec.extra == {"language": "en", "later": {"a": [1, 2]}}
    rec.summary = "changed"
    out = json.loads(rec.encode())
    assert out["language"] == "en" and out["later"] == {"a": [1, 2]} and out["summary"] == "changed"


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[1, 2]",
        b'"a string"',
        b'{"name": "x", "tokens": "many"}',
        b'{"name": "x", "tokens": true}',  # a bool is not a count
        b'{"name": "x", "approx": 1}',
        b'{"name": "x", "parent": 1.5}',
        b'{"toc_page_tokens": [1, "2"]}',
        b'{"toc_page_tokens": 3}',
        b"\xff\xfe",
    ],
)
def test_damaged_meta_records_raise_corrupt(raw):
    with pytest.raises(Corrupt):
        decode_meta(raw)


def test_every_meta_field_is_in_the_codec_table_and_the_fast_path_agrees():
    for cls, full in ((EntryMeta, ENTRY), (SectionMeta, SECTION)):
        fields = [f.name for f in dataclasses.fields(cls) if f.name != "extra"]
        assert fields == list(cls._TYPES)
        keys = list(full)
        for n in range(len(keys) + 1):  # every prefix of the keys: the defaults of the rest agree
            part = {k: full[k] for k in keys[:n]}
            assert cls._known(part) == cls(**part)


@pytest.fixture
def populated(libdir):
    st = Store(libdir)
    tree = StoreTree(st)
    tree.write_bytes("a/x.md", b"hello")
    tree.write_bytes("a/b/y.md", os.urandom(100))
    yield st
    st.close()


def _ino(st: Store, *names: bytes) -> int:
    with st.read() as t:
        ino = S.ROOT_INO
        for n in names:
            ino = t.lookup(ino, n)
        return ino


def _codes(st: Store) -> list[str]:
    return sorted({p.code for p in check(st).problems})


def test_check_requires_and_repairs_dirent_types(populated):
    st = populated
    a, x = _ino(st, b"a"), _ino(st, b"a", b"x.md")
    st.run_write(lambda t: t.kv.put(S.DB_DIRENTS, S.dirent_key(a, b"x.md"), S.u64(x)))  # schema 1 form
    assert _codes(st) == ["I2"]
    st.run_write(lambda t: t.kv.put(S.DB_DIRENTS, S.dirent_key(a, b"x.md"), S.dirent_value(x, S.S_IFDIR)))
    assert _codes(st) == ["I2"]  # a wrong type
    assert check(st, repair=True).clean and check(st).problems == []
    with st.read() as t:
        assert [(n, ty) for n, _c, ty in t.iter_dir_typed(a) if n == b"x.md"] == [(b"x.md", S.S_IFREG)]


def test_check_reports_undecodable_and_misplaced_meta(populated):
    st = populated
    a, x = _ino(st, b"a"), _ino(st, b"a", b"x.md")
    st.run_write(lambda t: t.kv.put(S.DB_META, S.u64(x), b"{broken"))
    assert _codes(st) == ["I8"]
    st.run_write(lambda t: t.put_meta(x, SectionMeta(description="a file is no section")))
    st.run_write(lambda t: t.put_meta(a, EntryMeta(name="a", parent=1)))
    report = check(st)
    assert sorted(p.ino for p in report.problems) == sorted([a, x]) and _codes(st) == ["I8"]
    with st.read() as t:  # typed readers treat a record of the wrong kind as absent
        assert t.entry_meta(x) is None and t.section_meta(a) is None
    assert check(st, repair=True).clean and check(st).problems == []
