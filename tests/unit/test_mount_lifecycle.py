"""The mount's background work without a mount: which TOC files an indexer commit invalidates, and the
thread's explicit start/stop (libraryfs.fs.mount). A real store and a real indexer pass."""

from __future__ import annotations

import threading

import pytest

from libraryfs.daemon.indexer import Indexer
from libraryfs.fs import schema as S
from libraryfs.fs.mount import MountTasks, TocWatcher
from libraryfs.fs.store import Store
from libraryfs.fs.tree import StoreTree


@pytest.fixture
def lib(libdir):
    st = Store(libdir)
    try:
        yield st, StoreTree(st), Indexer(str(libdir), store=st, toc_max_tokens=300)
    finally:
        st.close()


def test_the_watcher_names_every_page_the_indexer_rewrote(lib):
    st, tree, idx = lib
    tree.write_bytes("a/x.md", b"# X\n\nFirst.\n")
    w = TocWatcher(st)
    assert w.poll() == []  # the first poll only records the generation
    idx.run_once()
    # INDEX.md of each rewritten directory, and .index/INDEX.md (page 0 where the user owns INDEX.md)
    assert sorted(w.poll()) == [b"/.index/INDEX.md", b"/INDEX.md", b"/a/.index/INDEX.md", b"/a/INDEX.md"]
    assert w.poll() == []  # nothing new
    for k in range(60):  # enough lines to overflow one page of 300 tokens
        tree.write_bytes(f"b/entry-{k:03d}.md", f"# Entry {k}\n\nA note about topic {k}.\n".encode())
    idx.run_once()
    paths = w.poll()
    with st.read() as t:
        npages = t.toc_page_count(t.lookup(S.ROOT_INO, b"b"))
    assert npages > 1
    assert b"/b/INDEX.md" in paths and b"/b/.index/0001.md" in paths
    assert len([p for p in paths if p.startswith(b"/b/")]) == npages + 1  # + /b/.index/INDEX.md
    assert not any(p.startswith(b"/a/") for p in paths)  # a/ was not re-rendered


def test_tasks_invalidate_in_the_background_and_stop_when_told(lib):
    st, tree, idx = lib
    seen: list[bytes] = []
    arrived = threading.Event()

    def invalidate(path: bytes) -> int:
        seen.append(path)
        if path == b"/c/INDEX.md":
            arrived.set()
        return 0

    tasks = MountTasks(st, invalidate, poll_s=0.01, sync_interval_s=0.0)
    tasks.watcher.poll()  # as if the thread had run once: the next generation counts
    tasks.start()
    with pytest.raises(RuntimeError):
        tasks.start()
    try:
        tree.write_bytes("c/y.md", b"# Y\n")
        idx.run_once()
        assert arrived.wait(30), seen
    finally:
        assert tasks.stop()
    n = len(seen)
    tree.write_bytes("c/z.md", b"# Z\n")
    idx.run_once()
    assert tasks.watcher.poll()  # there was something to invalidate, but the thread is gone
    assert len(seen) == n


def test_a_tick_syncs_once_the_interval_has_passed(lib):
    st, _tree, _idx = lib
    tasks = MountTasks(st, lambda p: 0, sync_interval_s=3600.0)
    assert tasks.tick(last_sync_s=float("inf")) == float("inf")  # not due: no sync, time kept
    assert tasks.tick(last_sync_s=float("-inf")) > float("-inf")  # due: synced now
    assert MountTasks(st, lambda p: 0).stop()  # never started: nothing to wait for


def test_the_watcher_names_the_pages_of_every_commit_since_its_last_poll(lib):
    """Two indexer commits between polls (a poll thread descheduled under load): the pages of both, not only
    the last commit's (subscribers missed the first one's pages); a watcher behind commits the log does not
    hold (an indexer of an earlier release, or more than LOG_COMMITS behind) names every TOC."""
    st, tree, idx = lib
    w = TocWatcher(st)
    tree.write_bytes("a/x.md", b"# X\n")
    idx.run_once()
    w.poll()
    tree.write_bytes("a/y.md", b"# Y\n")
    idx.run_once()
    tree.write_bytes("b/z.md", b"# Z\n")
    idx.run_once()
    paths = w.poll()
    assert b"/a/INDEX.md" in paths and b"/b/INDEX.md" in paths, paths
    tree.write_bytes("c/w.md", b"# W\n")
    idx.run_once()
    # an indexer of an earlier release kept no log: a watcher two commits behind then names every TOC
    st.run_write(lambda t: t.put_cfg(S.CFG_TOC_DIRTY_LOG, S.dumps([])))
    with st.read() as t:
        w.last_gen = t.cfg_int(S.CFG_TOC_GEN) - 2
    paths = w.poll()
    assert {b"/INDEX.md", b"/a/INDEX.md", b"/b/INDEX.md", b"/c/INDEX.md"} <= set(paths), paths
