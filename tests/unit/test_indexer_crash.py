"""An indexer that dies or is stopped inside a pass loses no TOC (issue 14, "Damaged or unusual libraries").

Real store (LMDB, or etcd with ``LIBRARYFS_TEST_STORE=etcd``), real :class:`Indexer` passes, no mount. A
crash is the loss of the process's memory: the :class:`Indexer` object is dropped and a new one opened on the
same store, as a restarted daemon would.
"""

import threading

import pytest

from libraryfs.daemon.entries import PassStopped
from libraryfs.daemon.indexer import Indexer
from libraryfs.fs import schema as S
from libraryfs.fs.check import check
from libraryfs.fs.store import Store
from libraryfs.fs.tree import StoreTree


def _dir(st: Store, name: bytes) -> int:
    with st.read() as t:
        ino = t.lookup(S.ROOT_INO, name)
    assert ino is not None
    return ino


def _has_toc(st: Store, ino: int) -> bool:
    with st.read() as t:
        return t.toc_page(ino, 0) is not None


def _section_entries(st: Store, ino: int) -> int:
    with st.read() as t:
        m = t.section_meta(ino)
    return m.entries_direct if m else 0


def test_a_directory_deferred_by_a_killed_pass_is_rendered_after_restart(libdir):
    """The killed pass consumed k2's records but deferred its TOC (k2 still filling); its commit advanced
    the cursor. The restarted indexer must still render k2 (before the fix it never did: no record named it
    any more, and the deferred set lived only in the dead process's memory)."""
    st = Store(libdir)
    tree = StoreTree(st)
    Indexer(str(libdir), store=st).run_once()  # the library indexed once
    for i in range(30):
        tree.write_bytes(f"k2/f{i:03d}.md", f"# Note {i}\n\nAbout item {i}.\n".encode())
    dying = Indexer(str(libdir), store=st, settle_s=3600.0)  # k2 has not settled as far as this pass knows
    rep = dying.run_once(settle=True)
    k2 = _dir(st, b"k2")
    assert rep.records > 0 and not _has_toc(st, k2)
    with st.read() as t:
        assert t.cfg_int(S.CFG_CURSOR) == t.journal_tail()  # every record consumed
    assert check(st).problems == []  # owed, not lost: nothing for check to flag
    del dying  # kill -9: the process's memory is gone

    restarted = Indexer(str(libdir), store=st, settle_s=0.0)
    restarted.run_once(settle=True)
    assert _has_toc(st, k2), "k2 stayed 'Index pending' after the restart"
    assert _section_entries(st, k2) == 30
    with st.read() as t:
        assert t.toc_pending() == set()
    assert check(st).problems == []


def test_check_finds_a_directory_with_entries_but_no_toc_and_repair_queues_it(libdir):
    """I10: a directory the indexer dropped (its TOC pages gone, no record or pending entry owing one) is
    reported; ``--repair`` queues it, and the next pass renders it."""
    st = Store(libdir)
    tree = StoreTree(st)
    idx = Indexer(str(libdir), store=st)
    tree.write_bytes("k2/a.md", b"# A\n\nAlpha.\n")
    tree.write_bytes("k3/b.md", b"# B\n\nBeta.\n")
    tree.write_bytes("k3/.hidden/c.md", b"# C\n")  # excluded (dot-directory): owes no TOC
    idx.run_once()
    k2 = _dir(st, b"k2")
    assert check(st).problems == []
    st.run_write(
        lambda t: t.kv.delete_range(S.DB_TOC, S.u64(k2), S.u64(k2 + 1))
    )  # the state a lost pass left

    found = check(st).problems
    assert [(p.code, p.ino) for p in found] == [("I10", k2)]
    assert not idx.run_once().dirs_rendered  # nothing tells the indexer: it stays so for good
    fixed = check(st, repair=True)
    assert fixed.clean and [(p.code, p.repaired) for p in fixed.problems] == [("I10", True)]
    assert check(st).problems == []  # owed now
    idx.run_once()
    assert _has_toc(st, k2)
    with st.read() as t:
        assert t.toc_pending() == set()
    assert check(st).problems == []


def test_a_stop_inside_a_pass_commits_no_cursor_and_the_next_pass_renders_everything(libdir):
    """A stop asked while the pass summarises entries (here: at the indexer's 6th heartbeat, its real
    progress hook, called around each builder batch) ends it before its commit (PassStopped); the cursor
    does not move, so the next process's pass renders every directory the records name, and asks the
    builder only for the summaries the stopped pass had not stored."""
    st = Store(libdir)
    tree = StoreTree(st)
    for d in range(3):
        for i in range(40):
            tree.write_bytes(f"d{d}/n{i:03d}.md", f"# Note {d}/{i}\n\nText {i}.\n".encode())
    stop = threading.Event()
    beats = {"n": 0}

    def beat() -> None:
        beats["n"] += 1
        if beats["n"] == 6:
            stop.set()

    idx = Indexer(str(libdir), store=st, batch=8, heartbeat=beat)
    idx.stop_event = stop
    with pytest.raises(PassStopped):
        idx.run_once()
    with st.read() as t:
        assert t.cfg_int(S.CFG_CURSOR) == 0 and t.journal_tail() > 0  # nothing consumed
        kept = sum(1 for _ in t.kv.range(S.DB_META, keys_only=True))
        assert t.cfg(S.CFG_TOC_GEN) is None  # no commit
    assert 0 < kept < 120  # stopped midway, what it summarised kept
    rep = Indexer(str(libdir), store=st).run_once()
    assert rep.summarized == 120 - kept
    for d in range(3):
        assert _section_entries(st, _dir(st, f"d{d}".encode())) == 40
    assert check(st).problems == []
