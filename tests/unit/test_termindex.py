"""The finder's term index over a real store: defined names reach the page that defines them, directories
match, results are ranked and cut with a total, the indexer keeps it incrementally, a kill -9 between the
store's commit and the index's is reconciled, and ``libraryfs check`` reports drift and damage."""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from helpers.checklogs import assert_logs

from libraryfs.cli.query_cmds import _error_age
from libraryfs.daemon.indexer import Indexer
from libraryfs.fs import schema as S
from libraryfs.fs.store import Store
from libraryfs.fs.tree import StoreTree
from libraryfs.index import termindex
from libraryfs.index.find import find_ranked
from libraryfs.layout import term_index_path

JSON_DOC = b"""json --- JSON encoder and decoder
==================================

.. module:: json

.. function:: dumps(obj, *, skipkeys=False)

   Serialize *obj* to a JSON formatted str.

.. function:: loads(s)

   Deserialize *s* to a Python object.
"""

PICKLE_DOC = b"""pickle --- Python object serialization
=======================================

.. module:: pickle

.. function:: dumps(obj, protocol=None)

   Return the pickled representation of the object as a bytes object. Unlike json it is binary.
"""

FUNCTOOLS_DOC = b"""functools --- Higher-order functions
====================================

.. module:: functools

.. decorator:: lru_cache(maxsize=128)

   Decorator to wrap a function with a memoizing callable.
"""

DATETIME_DOC = b"""datetime --- Basic date and time types
======================================

.. module:: datetime

.. class:: datetime

   .. classmethod:: strptime(date_string, format)

      Return a datetime corresponding to date_string, parsed according to format.
"""


def library(tmp_path):
    d = tmp_path / "lib"
    Store.create(d, {"toc_max_tokens": 2000}).close()
    st = Store(d)
    tree = StoreTree(st)
    tree.makedirs("docs/library")
    tree.makedirs("kitchen")
    tree.write_bytes("docs/library/json.rst.txt", JSON_DOC)
    tree.write_bytes("docs/library/pickle.rst.txt", PICKLE_DOC)
    tree.write_bytes("docs/library/functools.rst.txt", FUNCTOOLS_DOC)
    tree.write_bytes("docs/library/datetime.rst.txt", DATETIME_DOC)
    for k in range(30):
        tree.write_bytes(f"kitchen/recipe{k:02d}.md", f"# Recipe {k}\n\nTomato soup, variant {k}.\n".encode())
    return d, st, tree


def ranked(st: Store, term: str, limit: int = 10):
    db = termindex.connect(term_index_path(st.libdir), readonly=True)
    try:
        with st.read() as t:
            return find_ranked(t, db, term, limit)
    finally:
        db.close()


def test_defined_names_reach_their_page_and_directories_match(tmp_path):
    d, st, _tree = library(tmp_path)
    Indexer(str(d), store=st).run_once(full=True)
    assert ranked(st, "json.dumps").paths[0] == b"/docs/library/json.rst.txt"
    assert ranked(st, "lru_cache").paths[0] == b"/docs/library/functools.rst.txt"
    assert ranked(st, "datetime.datetime.strptime").paths[0] == b"/docs/library/datetime.rst.txt"
    assert ranked(st, "strptime").paths[0] == b"/docs/library/datetime.rst.txt"  # a dotted suffix
    dumps = ranked(st, "dumps").paths
    assert set(dumps[:2]) == {b"/docs/library/json.rst.txt", b"/docs/library/pickle.rst.txt"}
    kitchen = ranked(st, "kitchen")
    assert kitchen.matches[0].path == b"/kitchen" and kitchen.matches[0].kind == "dir"
    st.close()


def test_results_are_cut_with_a_total(tmp_path):
    d, st, _tree = library(tmp_path)
    Indexer(str(d), store=st).run_once(full=True)
    found = ranked(st, "tomato soup", limit=5)
    # 30 recipes and their directory (its section profile holds both words)
    assert len(found.matches) == 5 and found.total == 31 and found.cut
    every = ranked(st, "tomato soup", limit=100)
    assert len(every.matches) == 31 and not every.cut and b"/kitchen" in every.paths
    assert not ranked(st, "lru_cache", limit=5).cut
    st.close()


def test_the_indexer_keeps_the_index_incrementally(tmp_path):
    d, st, tree = library(tmp_path)
    idx = Indexer(str(d), store=st)
    idx.run_once(full=True)
    tree.write_bytes("docs/library/json.rst.txt", JSON_DOC.replace(b"dumps", b"dumpz"))
    tree.rename("docs/library/functools.rst.txt", "docs/functools.rst.txt")
    tree.remove("docs/library/pickle.rst.txt")
    idx.run_once()
    assert ranked(st, "json.dumpz").paths[0] == b"/docs/library/json.rst.txt"
    assert ranked(st, "lru_cache").paths[0] == b"/docs/functools.rst.txt"
    assert ranked(st, "pickle.dumps").paths == []
    db = termindex.connect(term_index_path(str(d)))
    assert termindex.drift(st, db).total == 0
    db.close()
    st.close()


def test_directories_without_a_toc_keep_the_index_in_line(tmp_path):
    """A dot-directory (no TOC: never rendered) made, renamed into and out of a dot name, and removed
    between passes: the index follows without the reconcile a new indexer runs (before, a dot-directory
    made after the first pass was a row the index lacked: ``check`` after a clean unmount said "T2 term
    index out of line … 1 missing", and the next mount's first pass quietly fixed it)."""
    d, st, tree = library(tmp_path)
    idx = Indexer(str(d), store=st)
    idx.run_once(full=True)
    db = termindex.connect(term_index_path(str(d)))
    for change in (
        lambda: tree.makedirs("docs/.hidden"),
        lambda: tree.makedirs("docs/.hidden/deeper"),
        lambda: tree.rename("docs/.hidden", "docs/visible"),
        lambda: tree.rename("docs/visible", "docs/.again"),
        lambda: tree.remove("docs/.again/deeper"),
    ):
        change()
        idx.run_once()
        assert termindex.drift(st, db).total == 0
    db.close()
    st.close()


def test_a_full_disk_is_one_warning_and_the_rows_are_written_at_a_later_pass(tmp_path, caplog, run_cli):
    """SQLite's "database or disk is full" (SQLITE_FULL, here from ``max_page_count`` — the same error a full
    tmpfs gives) while the indexer writes the term index: one line without a traceback, the pass goes on,
    and the rows it could not write are written at the next pass once there is room."""
    d, st, tree = library(tmp_path)
    idx = Indexer(str(d), store=st)
    idx.run_once(full=True)
    pages = idx._terms.execute("PRAGMA page_count").fetchone()[0]
    idx._terms.execute(f"PRAGMA max_page_count = {pages}")  # this connection cannot grow the file
    body = " ".join(f"zanzibar{k}" for k in range(3000))
    tree.write_bytes("docs/library/big.rst.txt", f".. function:: zanzibar_fn(x)\n\n   {body}\n".encode())
    with assert_logs(
        r"^term index not updated: the disk is full \(database or disk is full\); retrying", count=1
    ):
        idx.run_once()
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "\n" not in lines[0], lines  # one line: no traceback for an expected condition
    assert "disk is full" in (idx.last_error or "")
    assert json.loads(idx._status_json())["passes_since_error"] == 0
    # the index trails the store: find says so and adds the store's own scan (a user's trial on a full
    # tmpfs got "no match" for a file written after the disk filled, until a remount)
    behind = ranked(st, "zanzibar_fn")
    assert behind.behind >= 1 and json.loads(idx._status_json())["terms_pending"] == behind.behind
    assert [(m.path, m.match) for m in behind.matches] == [(b"/docs/library/big.rst.txt", "fallback")]
    r = run_cli("find", str(d), "zanzibar_fn")
    assert r.returncode == 0 and r.stdout.startswith("/docs/library/big.rst.txt"), (r.stdout, r.stderr)
    assert f"the term index is behind by {behind.behind} entr" in r.stderr, r.stderr
    assert (
        json.loads(run_cli("find", str(d), "zanzibar_fn", "--json").stdout)["index_behind"] == behind.behind
    )
    idx._terms.execute("PRAGMA max_page_count = 1073741823")  # space freed
    tree.write_bytes("kitchen/recipe00.md", b"# Recipe 0\n\nTomato soup again.\n")  # a later pass
    idx.run_once()
    caught_up = ranked(st, "zanzibar_fn")
    assert caught_up.paths[0] == b"/docs/library/big.rst.txt" and caught_up.behind == 0
    assert caught_up.matches[0].match != "fallback"
    # status tells the error the later pass got past from a current one
    record = json.loads(idx._status_json())
    assert record["passes_since_error"] == 1 and record["last_error_time"] <= time.time(), record
    assert re.fullmatch(r" \(\d+s ago; 1 pass committed since\)", _error_age(record)), _error_age(record)
    db = termindex.connect(term_index_path(str(d)))
    assert termindex.drift(st, db).total == 0
    db.close()
    st.close()


_CRASH = textwrap.dedent(
    """
    import os, signal, sys
    from libraryfs.daemon.indexer import Indexer
    from libraryfs.index import termindex
    from libraryfs.fs.store import Store
    from libraryfs.fs.tree import StoreTree

    st = Store(sys.argv[1])
    idx = Indexer(sys.argv[1], store=st)
    idx.run_once()  # the index is current (the first pass reconciles)
    StoreTree(st).write_bytes("docs/library/json.rst.txt", open(sys.argv[2], "rb").read())

    def die(*_a, **_k):  # the store has committed the pass; the term index has not
        os.kill(os.getpid(), signal.SIGKILL)

    termindex.sync = die
    idx.run_once()
    """
)


def test_kill_9_between_the_two_commits_is_reconciled(tmp_path, run_cli):
    d, st, _tree = library(tmp_path)
    Indexer(str(d), store=st).run_once(full=True)
    st.close()
    new = tmp_path / "json.rst.txt"
    new.write_bytes(JSON_DOC.replace(b"dumps", b"dump_text"))
    p = subprocess.run([sys.executable, "-c", _CRASH, str(d), str(new)], capture_output=True, text=True)
    assert p.returncode == -9, p.stderr
    r = run_cli("check", str(d), "--json")
    assert r.returncode == 1
    problems = json.loads(r.stdout)["problems"]
    # the entry and the sections above it (their profiles changed) were committed to the store only
    assert [p["code"] for p in problems] == ["T2"] and "0 missing, 3 stale, 0 orphaned" in problems[0][
        "message"
    ]
    st = Store(d)
    assert ranked(st, "dump_text").paths == []  # the index still holds the old content
    Indexer(str(d), store=st).run_once()  # a new indexer's first pass reconciles
    assert ranked(st, "json.dump_text").paths[0] == b"/docs/library/json.rst.txt"
    # the entry, then the sections whose names now list it
    found = ranked(st, "dump_text").paths
    assert found[0] == b"/docs/library/json.rst.txt" and set(found[1:]) == {b"/docs/library", b"/docs"}
    st.close()
    assert run_cli("check", str(d)).returncode == 0


@pytest.mark.parametrize("stop_after", ["first TOC", "last TOC"])
def test_check_after_a_stopped_pass_is_clean_and_the_next_start_reconciles(tmp_path, run_cli, stop_after):
    """``libraryfs umount`` stops the indexer with SIGTERM (its :attr:`~Indexer.stop_event`): a stop after
    some TOCs were committed ends the pass uncommitted, one after every TOC commits it; either way the term
    index has not taken in what the store committed, and the next start reconciles it. ``check`` after such
    a clean unmount said "T2 term index out of line … 2 stale", exit 1 (new-user trial, a deep tree
    unmounted mid-pass); the stopping indexer now notes that its successor owes the reconcile."""
    d, st, tree = library(tmp_path)
    Indexer(str(d), store=st).run_once(full=True)
    tree.write_bytes("docs/library/json.rst.txt", JSON_DOC.replace(b"dumps", b"dump_text"))
    idx = Indexer(str(d), store=st)
    stop = threading.Event()
    render = idx._render_dir

    def render_then_stop(ino, *a, **k):  # SIGTERM arrives once this TOC is committed
        done = render(ino, *a, **k)
        if stop_after == "first TOC" or ino == 1:
            stop.set()
        return done

    idx._render_dir = render_then_stop
    idx.run_forever(stop, poll_s=0.01, debounce_s=0.01)
    assert idx.state == "stopped"
    st.close()
    r = run_cli("check", str(d))
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "clean", r.stdout
    st = Store(d)
    Indexer(str(d), store=st).run_once()  # the next start's first pass reconciles every row
    assert ranked(st, "json.dump_text").paths[0] == b"/docs/library/json.rst.txt"
    st.close()
    db = termindex.connect(term_index_path(str(d)))
    assert not termindex.behind(db)  # the note is gone with the drift: check judges every row again
    db.close()


def test_check_detects_and_repairs_a_damaged_or_missing_index(tmp_path, run_cli):
    d, st, _tree = library(tmp_path)
    Indexer(str(d), store=st).run_once(full=True)
    st.close()
    path = term_index_path(str(d))
    db = termindex.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    size = os.path.getsize(path)
    with open(path, "r+b") as f:  # overwrite every page after the header with garbage
        f.seek(4096)
        f.write(b"\xa5" * (size - 4096))
    r = run_cli("check", str(d))
    assert r.returncode == 1 and "T1" in r.stdout and "damaged" in r.stdout, r.stdout
    r = run_cli("find", str(d), "json.dumps")  # a damaged index never breaks find: the store answers
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr
    r = run_cli("check", str(d), "--repair")
    assert r.returncode == 0 and "(repaired)" in r.stdout, r.stdout + r.stderr
    assert run_cli("check", str(d)).returncode == 0
    assert (
        run_cli("find", str(d), "json.dumps", check_rc=True).stdout.splitlines()[0].endswith("json.rst.txt")
    )
    os.unlink(path)  # derived data: a missing index is no problem (the indexer builds it); --repair does too
    assert run_cli("check", str(d)).returncode == 0
    r = run_cli("check", str(d), "--repair")
    assert r.returncode == 0 and "T1" in r.stdout and os.path.exists(path), r.stdout
    assert (
        run_cli("find", str(d), "json.dumps", check_rc=True).stdout.splitlines()[0].endswith("json.rst.txt")
    )


def test_cli_find_json_and_the_cut_note(tmp_path, run_cli):
    d, st, _tree = library(tmp_path)
    Indexer(str(d), store=st).run_once(full=True)
    st.close()
    r = run_cli("find", str(d), "tomato", "--limit", "3", check_rc=True)
    assert len(r.stdout.splitlines()) == 3
    assert "3 of 31 matches shown" in r.stderr
    r = run_cli("find", str(d), "kitchen", "--json", check_rc=True)
    out = json.loads(r.stdout)
    assert out["matches"][0] == {
        "rank": 1,
        "path": "/kitchen",
        "kind": "dir",
        "match": "all",
        "score": out["matches"][0]["score"],
    }
    assert out["total"] >= 1 and out["shown"] == len(out["matches"])
    r = run_cli("find", str(d), "tomato", "--limit", "2", "--json", check_rc=True)
    out = json.loads(r.stdout)
    assert out["cut"] and out["total"] == 31 and out["shown"] == 2
    r = run_cli("find", str(d), "json.dumps", check_rc=True)
    assert r.stdout.splitlines()[0] == "/docs/library/json.rst.txt"
    r = run_cli("find", str(d), "zzzz-nothing", "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["total"] == 0


def test_undecodable_names_are_indexed_and_searchable(tmp_path):
    d, st, tree = library(tmp_path)
    tree.write_bytes(os.fsdecode(b"kitchen/caf\xe9-menu.md"), b"# Menu\n\nEspresso.\n")
    Indexer(str(d), store=st).run_once(full=True)
    assert ranked(st, "caf").paths[0] == b"/kitchen/caf\xe9-menu.md"
    assert ranked(st, os.fsdecode(b"caf\xe9")).paths[0] == b"/kitchen/caf\xe9-menu.md"
    db = termindex.connect(term_index_path(str(d)))
    assert termindex.drift(st, db).total == 0
    db.close()
    st.close()


def test_cli_find_json_of_an_undecodable_name_is_valid_unicode(tmp_path, run_cli):
    """``find --json`` of a name that is not UTF-8: the path is ``\\xNN``-escaped text (as the plain output and
    the TOCs show it) with its exact bytes in ``path_hex``; before, it was ``os.fsdecode``'s lone surrogate
    (``"\\udce9"``), which strict JSON parsers (Go, Rust's serde) reject. Found by the new-user trial."""
    d, st, tree = library(tmp_path)
    tree.write_bytes(os.fsdecode(b"kitchen/caf\xe9-menu.md"), b"# Menu\n\nEspresso.\n")
    Indexer(str(d), store=st).run_once(full=True)
    st.close()
    r = run_cli("find", str(d), "espresso", "--json", check_rc=True)
    m = json.loads(r.stdout)["matches"][0]
    m["path"].encode("utf-8")  # strict: a lone surrogate raises UnicodeEncodeError
    assert m["path"] == "/kitchen/caf\\xe9-menu.md"
    assert bytes.fromhex(m["path_hex"]) == b"/kitchen/caf\xe9-menu.md"
    r = run_cli("find", str(d), "json.dumps", "--json", check_rc=True)
    assert "path_hex" not in json.loads(r.stdout)["matches"][0]  # only where the text is not the bytes


def test_an_indexer_reopening_the_index_leaves_no_write_lock(tmp_path):
    """The first pass of a second indexer process checks the index (FTS5 integrity-check, an INSERT); it
    must not keep the write transaction that begins, or every other writer meets "database is locked"."""
    d, st, _tree = library(tmp_path)
    Indexer(str(d), store=st).run_once(full=True)
    again = Indexer(str(d), store=st)
    again.run_once(full=True)  # no drift: nothing written after the check
    assert again._terms is not None and not again._terms.in_transaction
    other = termindex.connect(term_index_path(str(d)))  # another writer (check --repair) gets the lock
    other.execute("BEGIN IMMEDIATE")
    other.rollback()
    other.close()
    st.close()


def test_a_reader_never_opens_an_index_without_its_tables(tmp_path):
    """The indexer creates the index while `libraryfs check` may look: a file that exists has its tables
    (no "no such table: terms" window between the file's creation and its schema)."""
    path = str(tmp_path / "terms.sqlite")
    stop = threading.Event()
    seen: list[str] = []

    def look() -> None:
        while not stop.is_set():
            if not os.path.exists(path):
                continue
            try:
                db = sqlite3.connect(
                    f"file:{path}?mode=ro&immutable=1", uri=True, timeout=5.0
                )  # no -shm of ours
            except sqlite3.Error:
                continue  # removed between the test and the open
            try:
                db.execute("SELECT count(*) FROM terms").fetchone()
                seen.append("ok")
            except sqlite3.DatabaseError as e:  # immutable=1 may also read a page mid-checkpoint: not ours
                if "no such table" in str(e):
                    seen.append(str(e))
            finally:
                db.close()

    watcher = threading.Thread(target=look)
    watcher.start()
    try:
        for _ in range(40):
            termindex.connect(path).close()
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.unlink(path + suffix)
    finally:
        stop.set()
        watcher.join()
    assert [s for s in seen if s != "ok"] == []


_FULL_DISK = """
import os, resource, signal, sqlite3, sys
from libraryfs.index import termindex
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
try:
    termindex.connect(sys.argv[1])
except sqlite3.Error as e:
    print("failed:", e)
"""


def test_an_index_that_cannot_be_written_leaves_no_temporary_file(tmp_path):
    """A disk that fills while the index is created (a library on a 20 MiB tmpfs): the error reaches the
    caller and the temporary ``terms.sqlite.new-PID`` is removed (it was left behind, one per attempt)."""
    import subprocess
    import sys

    path = tmp_path / "terms.sqlite"
    r = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(path)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and r.stdout.startswith("failed:"), (r.stdout, r.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_section_matched_by_its_text_comes_after_its_entries_that_match(tmp_path):
    """A section's text (its TOC line's terms, drawn from its entries) is short, and BM25 favours short
    texts: `find cathode` on the demo library listed `dictionary/c/` before the entries that define cathode
    words. Now such a directory comes after its matching entries; one whose own name holds the
    term keeps its place (`kitchen` above), and one none of whose entries matched keeps its rank."""
    d, st, tree = library(tmp_path)
    tree.makedirs("physics")
    filler = b" ".join(b"word%d" % k for k in range(150))  # entries are longer than a section's line
    tree.write_bytes(
        "physics/cathodograph.md",
        b"# Cathodograph\n\nA photograph produced by cathode rays in a tube. " + filler + b"\n",
    )
    tree.write_bytes("physics/tube.md", b"# Tube\n\nA hollow cylinder. See cathode. " + filler + b"\n")
    for k in range(6):
        tree.write_bytes(
            f"physics/other{k}.md", f"# Other {k}\n\nUnrelated words about levers {k}.\n".encode()
        )
    Indexer(str(d), store=st).run_once(full=True)
    found = ranked(st, "cathode")
    # its line lists the word: after the entries that hold it
    assert set(found.paths[:2]) == {b"/physics/cathodograph.md", b"/physics/tube.md"}, found.paths
    assert found.paths[2] == b"/physics", found.paths
    kitchen = ranked(st, "kitchen")
    assert kitchen.matches[0].path == b"/kitchen"
    st.close()


def test_one_file_below_a_chain_of_sections_comes_first(tmp_path):
    """The trial's `find zebras`: eleven directories deep/a/…/j, each section line carrying the one word of
    the one file below them, were ranks 1–11 and the file 12th — past the 10 shown, so not listed at all (the
    reordering only saw the first 10 hits). Now the window searched is wider than the one shown."""
    d = tmp_path / "lib"
    Store.create(d, {"toc_max_tokens": 2000}).close()
    st = Store(d)
    tree = StoreTree(st)
    tree.makedirs("deep/a/b/c/d/e/f/g/h/i/j")
    tree.write_bytes(
        "deep/a/b/c/d/e/f/g/h/i/j/z.txt", b"All about zebras and their stripes. " + b"filler " * 100
    )
    Indexer(str(d), store=st).run_once(full=True)
    found = ranked(st, "zebras", limit=10)
    assert found.paths[0] == b"/deep/a/b/c/d/e/f/g/h/i/j/z.txt", found.paths
    assert found.paths[1] == b"/deep/a/b/c/d/e/f/g/h/i/j" and found.cut and found.total == 12
    st.close()


def test_an_entry_holding_every_word_outranks_a_section_holding_them_across_its_files(tmp_path):
    """`find 'zebra count'` listed `zebra/` first: its row joins its name (`zebra`) and its files' words
    (`count`, of another file), so it matched both words and BM25 favoured its short text over
    `notes/census.md`, the one file saying "the zebra count". Now, for a term of several words, a section
    matched by its text comes after every entry matching the whole term; with one word nothing changes
    (`zebra/` keeps its place for `zebra`, which its name holds)."""
    d, st, tree = library(tmp_path)
    tree.makedirs("zebra")
    tree.makedirs("notes")
    tree.write_bytes("zebra/herd.md", b"# Zebra herd\n\nThe zebra herd crossed the river at dawn.\n")
    tree.write_bytes("zebra/stripes.md", b"# Stripes\n\nThe count of stripes varies.\n")
    filler = b" ".join(b"word%d" % k for k in range(150))  # longer than a section's line
    tree.write_bytes("notes/census.md", b"# Census\n\nThe zebra count this year was 412. " + filler + b"\n")
    Indexer(str(d), store=st).run_once(full=True)
    found = ranked(st, "zebra count")
    assert found.paths[0] == b"/notes/census.md", [(m.path, m.kind, m.match) for m in found.matches]
    assert b"/zebra" in found.paths
    assert ranked(st, "zebra").paths[0] == b"/zebra"
    st.close()


def _hidden_state(st: Store, ino: int) -> dict:
    """What the store and the term index keep of entry ``ino`` that ``find`` and ``/.catalogue/`` show."""
    from libraryfs.index import catalogue

    db = termindex.connect(term_index_path(st.libdir), readonly=True)
    try:
        row = db.execute("SELECT 1 FROM rows WHERE ino=?", (ino,)).fetchone() is not None
    finally:
        db.close()
    with st.read() as t:
        prefix = catalogue.OWNER + S.u64(ino)
        return {
            "row": row,
            "meta": t.entry_meta(ino) is not None,
            "name": any(i == ino for i, _p, _n in t.iter_names(b"t.py")),
            "catalogue": any(True for _ in t.kv.prefix(catalogue.TABLE, prefix, keys_only=True)),
        }


def _in_subjects(st: Store, word: bytes) -> bool:
    """Whether a page of the subject index (``/.subjects/``) holds ``word``."""
    with st.read() as t:
        pages = (t.toc_page(S.SUBJECTS_INO, k) for k in range(64))
        return any(word in p for p in pages if p is not None)


def test_an_ignore_file_added_later_hides_what_was_indexed_and_its_removal_brings_it_back(tmp_path):
    """A ``.gitignore`` written after its paths were indexed: the next pass drops their term-index rows,
    names, catalogue rows and meta, as for paths ignored from the start (before, the TOCs left them out at
    once but ``find`` and ``/.find/`` kept returning them and ``check`` said clean: user trial). Removing it,
    a write to the open ignore file (journaled without its name), moving a directory under an ignored path
    and renaming one to a dot-name all follow the same rule, with no full pass."""
    d, st, tree = library(tmp_path)
    tree.write_bytes("gi2/private/t.py", b'def secretdef():\n    """the token is xylophonequartz"""\n')
    tree.write_bytes("gi2/open.md", b"# Open\n\nnothing private here\n")
    tree.write_bytes("elsewhere/moved/m.md", b"# Moved\n\nthe word is marimbaquartz\n")
    idx = Indexer(str(d), store=st)
    idx.run_once(full=True)
    with st.read() as t:
        gi2 = t.lookup(1, b"gi2")
        private = t.lookup(gi2, b"private")
        secret = t.lookup(private, b"t.py")
    assert ranked(st, "xylophonequartz").paths[0] == b"/gi2/private/t.py"
    assert ranked(st, "t.py").paths == [b"/gi2/private/t.py"]
    assert _hidden_state(st, secret) == {"row": True, "meta": True, "name": True, "catalogue": True}
    assert _in_subjects(st, b"xylophonequartz")
    db = termindex.connect(term_index_path(str(d)))

    tree.write_bytes("gi2/.gitignore", b"private/\n")
    idx.run_once()
    for term in ("xylophonequartz", "t.py", "secretdef", "private"):
        assert not [p for p in ranked(st, term, 100).paths if b"private" in p], term
    assert _hidden_state(st, secret) == {"row": False, "meta": False, "name": False, "catalogue": False}
    assert not _in_subjects(st, b"xylophonequartz")  # rebuilt in the same pass
    with st.read() as t:
        assert t.toc_page(private, 0) is None and b"(private/" not in t.toc_page(gi2, 0)
    assert termindex.drift(st, db).total == 0

    tree.remove("gi2/.gitignore")  # included again: examined afresh, its TOC rendered
    idx.run_once()
    assert ranked(st, "xylophonequartz").paths[0] == b"/gi2/private/t.py"
    assert _hidden_state(st, secret) == {"row": True, "meta": True, "name": True, "catalogue": True}
    with st.read() as t:
        assert t.toc_page(private, 0) is not None and b"(private/" in t.toc_page(gi2, 0)
    assert termindex.drift(st, db).total == 0

    tree.write_bytes("gi2/.gitignore", b"# nothing yet\n")
    idx.run_once()
    tree.append_bytes("gi2/.gitignore", b"*.py\n")  # a write naming no directory
    idx.run_once()
    assert ranked(st, "xylophonequartz").paths == [] and ranked(st, "secretdef").paths == []
    assert _hidden_state(st, secret)["meta"] is False
    assert ranked(st, "nothing private").paths[0] == b"/gi2/open.md"
    tree.remove("gi2/.gitignore")
    idx.run_once()
    assert ranked(st, "secretdef").paths[0] == b"/gi2/private/t.py"

    tree.write_bytes("gi2/.gitignore", b"private/\n")
    tree.rename("elsewhere/moved", "gi2/private/moved")  # moved under an ignored path
    idx.run_once()
    assert ranked(st, "marimbaquartz").paths == []
    tree.rename("gi2/private/moved", "elsewhere/.moved")  # out of it, to a dot-name
    idx.run_once()
    assert ranked(st, "marimbaquartz").paths == []
    tree.rename("elsewhere/.moved", "elsewhere/moved")
    idx.run_once()
    assert ranked(st, "marimbaquartz").paths[0] == b"/elsewhere/moved/m.md"
    assert termindex.drift(st, db).total == 0
    db.close()
    st.close()


def test_check_reports_and_repairs_rows_of_excluded_paths(tmp_path, run_cli):
    """An excluded path that still has term-index rows (the indexer has not taken in a new ignore file, or
    an earlier release kept them) is ``T3``; ``check --repair`` drops the rows, and so does a full
    reconcile (the indexer's first pass)."""
    d, st, tree = library(tmp_path)
    tree.write_bytes("gi2/private/t.py", b"the token is xylophonequartz\n")
    Indexer(str(d), store=st).run_once(full=True)
    tree.write_bytes("gi2/.gitignore", b"private/\n")  # no pass since
    st.close()
    r = run_cli("check", str(d), "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    problems = json.loads(r.stdout)["problems"]
    assert [p["code"] for p in problems] == ["T3"], problems
    assert "term index holds 2 rows of excluded paths" in problems[0]["message"]
    r = run_cli("check", str(d), "--repair")
    assert r.returncode == 0 and "T3" in r.stdout and "(repaired)" in r.stdout, r.stdout + r.stderr
    assert run_cli("check", str(d)).stdout.splitlines()[-1] == "clean"
    r = run_cli("find", str(d), "xylophonequartz")
    assert "private" not in r.stdout, r.stdout  # /gi2 until a pass renders it again (its profile words)


_REPAIR_FULL = """
import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
limit = int(sys.argv[2])  # bytes any file may reach: the new term index cannot be written
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from libraryfs.cli.main import main
sys.argv = ["libraryfs", "check", "--repair", sys.argv[1]]
main()
"""


def test_check_repair_on_a_full_disk_says_what_it_could_not_repair(tmp_path):
    """`check --repair` of a library whose disk is full printed a Python traceback
    (``sqlite3.OperationalError: database or disk is full``, a user's trial on a 20 MiB tmpfs). Now the
    finding says it was not repaired and why, and the exit status says a problem remains."""
    import subprocess
    import sys

    d, st, _tree = library(tmp_path)
    Indexer(str(d), store=st).run_once(full=True)
    st.close()
    os.unlink(term_index_path(str(d)))  # T1: missing; its repair must write a new file
    limit = 8192  # two SQLite pages: the new index cannot be written; the clean store needs no write
    r = subprocess.run(
        [sys.executable, "-c", _REPAIR_FULL, str(d), str(limit)], capture_output=True, text=True, timeout=120
    )
    out = r.stdout + r.stderr
    assert "Traceback" not in out, out
    assert r.returncode != 0 and "T1" in out and "not repaired:" in out, (r.returncode, out)
