"""What a fresh-user trial found in `check` and `copy` on damaged stores, each fixed: `check` stopped at an
undecodable record ("Error: meta record is not JSON", no problem list, no hint) although `check --repair`
fixed it; `copy` printed its check's problems as Python reprs, and skipped the page pre-check of a damaged
store that every other command makes. Real LMDB stores, the real console script."""

from __future__ import annotations

import os

from libraryfs.daemon.indexer import Indexer
from libraryfs.fs import schema as S
from libraryfs.fs.lmdb_backend import store_path
from libraryfs.fs.lmdb_pages import walk
from libraryfs.fs.store import Store
from libraryfs.fs.tree import StoreTree

PAGE = 4096  # LMDB's page size here (the OS page size on x86-64 Linux)


def indexed_library(tmp_path):
    """A small library the indexer has run over (so the `names` table and the term index are judged);
    returns its directory and the inode of ``notes/a.md``."""
    d = tmp_path / "lib"
    Store.create(d, {}).close()
    st = Store(d)
    try:
        tree = StoreTree(st)
        tree.makedirs("notes")
        tree.write_bytes("notes/a.md", b"# Alpha\n\nThe alpha note.\n")
        tree.write_bytes("notes/b.md", b"# Beta\n\nThe beta note.\n")
        Indexer(str(d), store=st).run_once(full=True)
        with st.read() as t:
            ino = t.lookup(t.lookup(S.ROOT_INO, b"notes"), b"a.md")
            assert ino is not None and t.entry_meta(ino) is not None
        return d, ino, st
    except BaseException:
        st.close()
        raise


def break_meta(st: Store, ino: int) -> None:
    """Overwrite the meta record of ``ino`` with bytes that are not UTF-8 (what a few bytes written into
    its LMDB page did in the trial: "'utf-8' codec can't decode byte 0xfb")."""
    st.run_write(lambda t: t.kv.put(S.DB_META, S.u64(ino), b'{"name": "a.md\xfb\xfa", "parent": 2}'))


def test_check_lists_an_undecodable_record_as_a_problem_with_the_repair_hint(tmp_path, run_cli):
    """`check` found the record (I8) but the `names` check after it read the same record and the command
    ended with "Error: meta record is not JSON: …" (exit 1): no problem list, no word of `--repair`, which
    fixes it. Now every problem is listed, the derived checks that could not read past the record say so,
    and the last line is the repair hint; `--repair` then repairs, and `check` is clean."""
    d, ino, st = indexed_library(tmp_path)
    try:
        break_meta(st, ino)
    finally:
        st.close()
    r = run_cli("check", str(d))
    assert r.returncode == 1 and r.stderr == "", r
    lines = r.stdout.splitlines()
    assert any(ln.startswith(f"  I8 ino {ino}: undecodable meta record: ") for ln in lines), r.stdout
    hint = "run `libraryfs check --repair` to repair what can be (the library must not be mounted)"
    assert lines[-2:] == [f"{len([ln for ln in lines if ln.startswith('  ')])} problems found", hint]
    r = run_cli("check", str(d), "--repair")
    assert r.returncode == 0 and f"  I8 ino {ino}: undecodable meta record: " in r.stdout, r
    assert r.stdout.splitlines()[-1] == "repaired"
    r = run_cli("check", str(d))
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "clean", r


def test_copy_prints_its_checks_problems_as_check_does(tmp_path, run_cli):
    """`copy` of a store with an undecodable record copies and verifies it, then says what its check found
    as `check` says it (before: ``check: Problem(code='I8', ino=11, …)``); exit status 1."""
    d, ino, st = indexed_library(tmp_path)
    try:
        break_meta(st, ino)
    finally:
        st.close()
    r = run_cli("copy", str(d), str(tmp_path / "copy"))
    assert r.returncode == 1, r
    assert f"check: I8 ino {ino}: undecodable meta record: meta record is not JSON: " in r.stderr, r.stderr
    assert "Problem(" not in r.stderr


def overwrite_a_page_header(libdir) -> int:
    """Write a foreign page number into the header of the first page of a table whose walk then says
    "page N of table T: header names page 44811 (overwritten?)"; returns N. Plain file writes: LMDB is not open."""
    path = os.path.join(store_path(str(libdir)), "data.mdb")
    with open(path, "rb") as f:
        original = f.read()
    for pg in range(2, len(original) // PAGE):
        damaged = bytearray(original)
        damaged[pg * PAGE : pg * PAGE + 8] = (44811).to_bytes(8, "little")
        with open(path, "wb") as f:
            f.write(damaged)
        problems = walk(store_path(str(libdir))).problems
        if any(
            f"page {pg} of table " in p and "header names page 44811 (overwritten?)" in p for p in problems
        ):
            return pg
    raise AssertionError("no page of the store is walked")


def test_copy_refuses_a_damaged_store_as_every_command_does(tmp_path, run_cli):
    """`status` (and `find`, `check`, `mount`) walk the store's pages before LMDB maps it and refuse a
    damaged one (exit 4, the page named); `copy` did not: a page whose header was overwritten was copied and
    "verified: … check clean" (exit 0). Now it refuses with the same line, and makes no destination."""
    d, _ino, st = indexed_library(tmp_path)
    st.close()
    pg = overwrite_a_page_header(d)
    status = run_cli("status", str(d))
    assert status.returncode == 4 and f"page {pg} of table " in status.stderr, status
    dst = tmp_path / "copy"
    r = run_cli("copy", str(d), str(dst))
    assert (r.returncode, r.stderr) == (4, status.stderr), r
    assert not os.path.lexists(dst)
