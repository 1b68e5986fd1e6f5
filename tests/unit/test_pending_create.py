"""A new file's create is committed with its first write: one write transaction per create + write + close
(``libraryfs.fs.pending``, issue 18), and an fsync with nothing new to sync does not sync the store."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from libraryfs.errors import BadHandle, Exists, NoSpace
from libraryfs.fs import schema as S
from libraryfs.fs.check import check
from libraryfs.fs.nameops import add_child
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView

UID, GID = os.getuid(), os.getgid()
NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL


class Counted:
    """Counts the store's write transactions and syncs (wrapping the real ones)."""

    def __init__(self, st: Store) -> None:
        self.writes = self.syncs = 0
        run_write, sync = st.run_write, st.backend.sync

        def counted_write(fn):
            self.writes += 1
            return run_write(fn)

        def counted_sync():
            self.syncs += 1
            return sync()

        st.run_write = counted_write  # type: ignore[method-assign]
        st.backend.sync = counted_sync  # type: ignore[method-assign]


@pytest.fixture
def v(store):
    view = LibraryView(store)
    view.mkdir(b"/d", 0o755, UID, GID)
    fh = view.create(b"/d/first", 0o644, NEW, UID, GID)  # the first create reserves inode numbers
    view.release(fh)
    return view


def journal_ops(store: Store, ino: int) -> list[int]:
    with store.read() as t:
        return [r.op for _seq, r in t.journal_since(0) if r.ino == ino]


def test_create_write_close_is_one_write_transaction(v, store):
    c = Counted(store)
    for i in range(20):
        fh = v.create(b"/d/f%d" % i, 0o644, NEW, UID, GID)
        v.getattr(b"/d/f%d" % i, fh)  # libfuse's entry reply of CREATE
        assert v.write(fh, b"x" * 1000 + b"%d" % i, 0) == 1000 + len(b"%d" % i)
        v.release(fh)
    assert c.writes == 20
    st = v.getattr(b"/d/f7")
    assert st["st_size"] == 1001 and stat.S_ISREG(st["st_mode"]) and st["st_nlink"] == 1
    fh = v.open(b"/d/f7", os.O_RDONLY)[0]
    assert v.read(fh, 4096, 0) == b"x" * 1000 + b"7"
    v.release(fh)
    assert journal_ops(store, st["st_ino"]) == [S.OP_CREATE]  # one record: the indexer reads the bytes for it
    d, f18, f19 = v.getattr(b"/d"), v.getattr(b"/d/f18"), v.getattr(b"/d/f19")
    assert f18["st_ctime"] <= d["st_mtime"] <= f19["st_ctime"]  # the directory changed at the last create


def test_a_pending_file_is_answered_from_memory_and_committed_before_anything_else_reads(v, store):
    c = Counted(store)
    fh = v.create(b"/d/new", 0o640, NEW, UID, GID)
    by_fh, by_path = v.getattr(b"/d/new", fh), v.getattr(b"/d/new")
    assert c.writes == 0 and by_fh == by_path and by_fh["st_size"] == 0
    assert stat.S_IMODE(by_fh["st_mode"]) == 0o640
    assert b"new" in [n for n, *_ in v.readdir(v.opendir(b"/d"), 0)]  # opendir's read commits it first
    assert c.writes == 1
    assert v.getattr(b"/d/new")["st_ino"] == by_fh["st_ino"]
    v.write(fh, b"abc", 0)
    v.release(fh)
    assert c.writes == 2


def test_another_opener_sees_the_new_file_and_its_bytes(v):
    fh = v.create(b"/d/shared", 0o644, os.O_RDWR | os.O_CREAT | os.O_EXCL, UID, GID)
    other = v.open(b"/d/shared", os.O_RDWR)[0]
    v.write(other, b"from the other", 0)
    v.write(fh, b"FROM", 0)
    assert v.read(fh, 100, 0) == b"FROM the other"
    v.release(other)
    v.release(fh)


def test_create_and_close_without_a_write_commits_the_empty_file(v, store):
    c = Counted(store)
    fh = v.create(b"/d/empty", 0o600, NEW, UID, GID)
    v.release(fh)
    assert c.writes == 1
    with store.read() as t:
        ino = t.lookup(v.getattr(b"/d")["st_ino"], b"empty")
        assert ino is not None and t.inode(ino).size == 0
    with pytest.raises(Exists):
        v.create(b"/d/empty", 0o600, NEW, UID, GID)


def test_fsync_commits_a_pending_create_and_skips_a_sync_with_nothing_new(v, store):
    c = Counted(store)
    fh = v.create(b"/d/s", 0o644, NEW, UID, GID)
    v.fsync(fh)
    assert (c.writes, c.syncs) == (1, 1)
    v.fsync(fh)
    v.fsync()
    assert c.syncs == 1  # nothing committed since: no whole-store sync
    v.write(fh, b"data", 0)
    v.fsync(fh)
    assert (c.writes, c.syncs) == (2, 2)
    v.release(fh)


def test_first_write_with_o_append_or_at_an_offset(v):
    fh = v.create(b"/d/app", 0o644, NEW | os.O_APPEND, UID, GID)
    v.write(fh, b"one", 1000)  # O_APPEND: at the end of the (empty) file
    v.write(fh, b"two", 0)
    v.release(fh)
    fh = v.create(b"/d/hole", 0o644, NEW, UID, GID)
    v.write(fh, b"end", 70_000)  # past the first chunk: a hole before it
    v.release(fh)
    r = v.open(b"/d/app", os.O_RDONLY)[0]
    assert v.read(r, 100, 0) == b"onetwo"
    r = v.open(b"/d/hole", os.O_RDONLY)[0]
    assert v.read(r, 100_000, 0) == bytes(70_000) + b"end"
    assert v.getattr(b"/d/hole")["st_size"] == 70_003


def test_set_group_id_directory_and_set_id_bits_on_the_first_write(v):
    v.mkdir(b"/g", 0o2775, UID, GID)
    v.chown(b"/g", -1, GID + 1 if UID == 0 else GID)
    gid = v.getattr(b"/g")["st_gid"]
    fh = v.create(b"/g/f", 0o6755, NEW, UID, GID + 7)
    assert v.getattr(b"/g/f", fh)["st_gid"] == gid
    v.write(fh, b"x", 0)
    v.release(fh)
    st = v.getattr(b"/g/f")
    assert st["st_gid"] == gid and stat.S_IMODE(st["st_mode"]) == 0o755


def test_inode_numbers_stay_unique_across_reserved_blocks(v):
    inos = set()
    for i in range(600):  # more than two blocks of reserved numbers
        fh = v.create(b"/d/n%d" % i, 0o644, NEW, UID, GID)
        inos.add(v.getattr(None, fh)["st_ino"])
        v.release(fh)
    assert len(inos) == 600
    assert {v.getattr(b"/d/n%d" % i)["st_ino"] for i in range(600)} == inos


def test_a_name_taken_by_another_writer_fails_the_first_write_cleanly(v, store):
    fh = v.create(b"/d/race", 0o644, NEW, UID, GID)

    def other_writer(t):  # a writer outside the FUSE thread (as another process would be)
        dino = t.lookup(S.ROOT_INO, b"d")
        add_child(t, dino, t.inode(dino), b"race", S.S_IFREG | 0o644, UID, GID)

    th = threading.Thread(target=store.run_write, args=(other_writer,))
    th.start()
    th.join()
    with pytest.raises(Exists):
        v.write(fh, b"lost", 0)
    with pytest.raises(BadHandle):  # the handle's inode was never stored
        v.write(fh, b"again", 0)
    v.release(fh)
    assert v.getattr(b"/d/race")["st_size"] == 0  # the other writer's file is untouched


def test_other_threads_see_the_store_as_committed(v, store):
    fh = v.create(b"/d/t", 0o644, NEW, UID, GID)
    seen = []

    def reader():
        with store.read() as t:
            seen.append(t.lookup(t.lookup(S.ROOT_INO, b"d"), b"t"))

    th = threading.Thread(target=reader)
    th.start()
    th.join()
    assert seen == [None] and fh in v.files.pending.by_fh  # the watch/sync threads never commit for it
    v.release(fh)
    reader()
    assert seen[-1] is not None


def test_release_reads_the_store_only_when_something_may_have_unlinked_the_file(v, store):
    fh = v.create(b"/d/r", 0o644, NEW, UID, GID)
    v.write(fh, b"bytes", 0)
    v.release(fh)
    reads = []
    read = store.read

    def counted_read():
        reads.append(1)
        return read()

    store.read = counted_read  # type: ignore[method-assign]
    fh = v.open(b"/d/r", os.O_RDONLY)[0]
    n = len(reads)
    v.release(fh)
    assert len(reads) == n  # nothing was written since the open: the file is still linked
    a, b = v.open(b"/d/r", os.O_RDONLY)[0], v.open(b"/d/r", os.O_RDONLY)[0]
    v.unlink(b"/d/r")  # while open: the inode lives until the last close
    v.release(a)
    assert v.read(b, 100, 0) == b"bytes"
    v.release(b)  # the last close frees it (the fixture's check finds no orphan)
    with read() as t:
        assert not [n for n in t.iter_inodes() if n.nlink == 0]


def test_a_first_write_that_does_not_fit_keeps_the_new_file_as_on_a_local_disk(small_disk):
    """ENOSPC on the first write of a new file fails that write only: the file stays (empty), later writes
    through the same handle work once there is room (before: the create was dropped with the write, and the
    handle answered EBADF)."""
    st = Store.create(small_disk / "lib", map_size=1 << 20)
    try:
        view = LibraryView(st)
        fh = view.create(b"/warm", 0o644, NEW, UID, GID)  # reserves a block of inode numbers
        view.release(fh)
        filler = view.create(b"/filler", 0o644, NEW, UID, GID)
        with pytest.raises(NoSpace):
            for i in range(64):
                view.write(filler, os.urandom(512 * 1024), i * 512 * 1024)
        view.release(filler)
        fh = view.create(b"/new", 0o644, NEW, UID, GID)
        with pytest.raises(NoSpace):
            view.write(fh, os.urandom(4 << 20), 0)
        assert view.getattr(b"/new")["st_size"] == 0
        view.unlink(b"/filler")
        assert view.write(fh, b"fits now", 0) == 8
        view.release(fh)
        fh = view.open(b"/new", os.O_RDONLY)[0]
        assert view.read(fh, 100, 0) == b"fits now"
        view.release(fh)
        assert [p for p in check(st).problems if p.code != "I4"] == []
    finally:
        st.close()


def test_fchown_chmod_and_utime_of_a_new_file_wait_for_its_first_write(v, store):
    """SQLite's rollback journal: open(O_CREAT), fchown, then writes. The attribute changes of a file not yet
    in the store are made to its pending inode and stored with its first write: one write transaction for
    create + fchown + chmod + write + close (before: three — the chown's transaction committed the create
    in a transaction of its own, then its own)."""
    c = Counted(store)
    fh = v.create(b"/d/journal", 0o644, NEW, UID, GID)
    created = v.getattr(None, fh)
    v.chown(None, UID, GID, fh)  # fchown
    v.chmod(b"/d/journal", 0o600)
    changed = v.getattr(b"/d/journal")
    assert c.writes == 0 and fh in v.files.pending.by_fh
    assert stat.S_IMODE(changed["st_mode"]) == 0o600 and changed["st_ctime"] >= created["st_ctime"]
    assert changed["st_mtime"] == created["st_mtime"]  # chmod/chown change the ctime only
    v.utimens(None, 1_000_000_000, 2_000_000_000, fh)
    assert v.getattr(None, fh)["st_mtime"] == 2_000_000_000 and c.writes == 0
    v.release(fh)  # closed without a write: stored as it is now
    assert c.writes == 1
    st, d = v.getattr(b"/d/journal"), v.getattr(b"/d")
    assert st["st_ino"] == created["st_ino"] and stat.S_IMODE(st["st_mode"]) == 0o600
    assert (st["st_atime"], st["st_mtime"]) == (1_000_000_000, 2_000_000_000)
    assert st["st_ctime"] >= changed["st_ctime"]
    assert d["st_mtime"] == created["st_ctime"]  # the directory changed when the name was created

    fh = v.create(b"/d/journal2", 0o644, NEW, UID, GID)
    v.chown(None, UID, GID, fh)
    before_write = v.getattr(None, fh)
    v.write(fh, b"header", 0)
    v.release(fh)
    assert c.writes == 2  # create + fchown + write + close: one transaction
    st = v.getattr(b"/d/journal2")
    assert st["st_size"] == 6 and st["st_mtime"] == st["st_ctime"] >= before_write["st_ctime"]
    assert journal_ops(store, st["st_ino"]) == [S.OP_CREATE]


def test_the_next_write_transaction_commits_a_pending_create_with_its_own_writes(v, store):
    c = Counted(store)
    fh = v.create(b"/d/a", 0o644, NEW, UID, GID)
    v.rename(b"/d/first", b"/d/renamed")  # another name's request: the create goes into its transaction
    assert c.writes == 1 and not v.files.pending.by_fh
    v.write(fh, b"x", 0)
    v.release(fh)
    assert c.writes == 2 and v.getattr(b"/d/a")["st_size"] == 1
    assert journal_ops(store, v.getattr(b"/d/a")["st_ino"]) == [S.OP_CREATE, S.OP_WRITE]


def test_several_pending_creates_commit_in_one_transaction(v, store):
    c = Counted(store)
    fhs = [v.create(b"/d/p%d" % i, 0o644, NEW, UID, GID) for i in range(3)]
    assert c.writes == 0
    names = [n for n, *_ in v.readdir(v.opendir(b"/d"), 0)]  # a read: one write transaction first
    assert {b"p0", b"p1", b"p2"} <= set(names) and c.writes == 1
    for fh in fhs:
        v.release(fh)
    assert c.writes == 1
    fhs = [v.create(b"/d/q%d" % i, 0o644, NEW, UID, GID) for i in range(3)]
    v.mkdir(b"/d/sub", 0o755, UID, GID)  # a write: the three creates and the mkdir in one transaction
    assert c.writes == 2 and not v.files.pending.by_fh
    for fh in fhs:
        v.release(fh)
    assert all(v.getattr(b"/d/q%d" % i)["st_size"] == 0 for i in range(3))


def test_a_request_that_fails_leaves_the_creates_pending(v, store):
    dino = v.getattr(b"/d")["st_ino"]
    c = Counted(store)
    fh = v.create(b"/d/x", 0o644, NEW, UID, GID)
    with pytest.raises(Exists):
        v.mkdir(b"/d/x", 0o755, UID, GID)  # decided with the pending file in the store, then aborted
    assert c.writes == 1 and fh in v.files.pending.by_fh  # counted, but nothing committed
    with store.backend.read() as kv:  # the store itself, without the FUSE thread's hook
        assert kv.get(S.DB_DIRENTS, S.dirent_key(dino, b"x")) is None
    v.write(fh, b"ok", 0)
    v.release(fh)
    assert v.getattr(b"/d/x")["st_size"] == 2 and c.writes == 2
