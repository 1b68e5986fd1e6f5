"""The library directory's process state (libraryfs.layout): locks, the one-writer lock of a derived view,
run.json, process liveness and the one wait-until-idle helper — on real files, flocks and a real store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest
from helpers.wait import wait_until

from libraryfs.daemon.indexer import Indexer
from libraryfs.errors import Busy
from libraryfs.fs.store import Store
from libraryfs.fs.tree import StoreTree
from libraryfs.layout import (
    INDEXER_LOCK,
    LOCK_RECORD,
    MOUNT_LOCK,
    acquire_lock,
    hand_over_lock,
    index_backlog,
    indexer_pid,
    indexer_running,
    lock_holder,
    lock_path,
    lock_stopping,
    mark_lock_stopping,
    pid_alive,
    read_run,
    remove_run,
    view_writer,
    wait_exit,
    wait_until_idle,
    write_run,
)


def test_a_lock_has_one_holder_named_by_pid(tmp_path):
    lib = str(tmp_path)
    assert lock_holder(lib, MOUNT_LOCK) is None and not indexer_running(lib)  # no file: nobody
    fd = acquire_lock(lib, INDEXER_LOCK)
    try:
        assert lock_holder(lib, INDEXER_LOCK) == os.getpid() == indexer_pid(lib)
        assert indexer_running(lib)
        with pytest.raises(Busy, match=rf"is already indexed by pid {os.getpid()}$"):
            acquire_lock(lib, INDEXER_LOCK)
    finally:
        os.close(fd)
    assert lock_holder(lib, INDEXER_LOCK) is None and not indexer_running(lib)
    # another process holding it (flock, as the daemons do) is seen from here
    code = (
        "import sys, libraryfs.layout as L; fd = L.acquire_lock(sys.argv[1], L.MOUNT_LOCK); "
        "print('held', flush=True); sys.stdin.read()"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code, lib], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout.readline() == "held\n"
        assert lock_holder(lib, MOUNT_LOCK) == p.pid
        with pytest.raises(Busy, match=f"is already mounted by pid {p.pid}"):
            acquire_lock(lib, MOUNT_LOCK)
    finally:
        p.stdin.close()
        p.wait(30)
        p.stdout.close()
    assert lock_holder(lib, MOUNT_LOCK) is None


def test_a_holder_shutting_down_says_so_in_its_lock(tmp_path):
    """An indexer asked to stop marks its lock ``<pid> stopping`` (it holds it until it exits): it is still
    the holder, but a launcher must not adopt it (issue 14: a mount adopted a dying indexer)."""
    lib = str(tmp_path)
    fd = acquire_lock(lib, INDEXER_LOCK)
    try:
        assert lock_stopping(lib, INDEXER_LOCK) is None
        mark_lock_stopping(fd)
        assert lock_holder(lib, INDEXER_LOCK) == os.getpid() == indexer_pid(lib)
        assert lock_stopping(lib, INDEXER_LOCK) == os.getpid()
        with pytest.raises(Busy, match=rf"by pid {os.getpid()} \(shutting down\)$"):
            acquire_lock(lib, INDEXER_LOCK)
    finally:
        os.close(fd)
    assert lock_stopping(lib, INDEXER_LOCK) is None and lock_holder(lib, INDEXER_LOCK) is None


def test_a_lock_handed_over_always_names_a_holder(tmp_path):
    """The launcher takes ``indexer.lock``, hands it to the indexer it spawns, and the indexer writes its own
    pid again (``hand_over_lock`` three times). A reader looking meanwhile (``mount`` returned; the test, or
    ``status``, asks ``indexer_pid``) must see a pid every time, and one that was written. Before: each handover truncated the file and
    then wrote, and a reader between the two saw no pid — the CI failure of
    test_umount_during_a_long_pass_then_mount_again_indexes_new_files (``indexer_pid`` None just after
    ``mount``). The reader runs in a thread on its own file description (flock is per description)."""
    lib = str(tmp_path)
    fd = acquire_lock(lib, INDEXER_LOCK)
    seen: list[int | None] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.append(lock_holder(lib, INDEXER_LOCK))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(20000):
            hand_over_lock(fd, 10 + i % 2 * 1_000_000)  # a short pid over a long one and back
            if i % 1000 == 999:
                mark_lock_stopping(fd)  # a longer text, then the handover over it
    finally:
        stop.set()
        reader.join()
        os.close(fd)
    assert len(seen) > 100, "the reader hardly ran"
    bad = [p for p in seen if p not in (10, 1_000_010, os.getpid())]
    assert not bad, f"{len(bad)} of {len(seen)} reads named no holder: {sorted(set(map(str, bad)))}"
    # writing the pid already there writes nothing (the indexer re-claims what its launcher handed it)
    fd = acquire_lock(lib, INDEXER_LOCK)
    try:
        before = os.stat(lock_path(lib, INDEXER_LOCK)).st_mtime_ns
        hand_over_lock(fd, os.getpid())
        assert os.stat(lock_path(lib, INDEXER_LOCK)).st_mtime_ns == before
        assert os.pread(fd, 64, 0).split() == [str(os.getpid()).encode()]
        assert os.fstat(fd).st_size == LOCK_RECORD  # one record, rewritten in place: its size never changes
    finally:
        os.close(fd)


def test_a_derived_view_has_one_writer(tmp_path):
    lib = str(tmp_path)
    with view_writer(lib, "episodes") as got:
        assert got
        with view_writer(lib, "episodes", wait=False) as other:  # a second open file description
            assert other is False
        with view_writer(lib, "cards", wait=False) as other_view:  # another view is independent
            assert other_view is True
    with view_writer(lib, "episodes", wait=False) as got:
        assert got


def test_a_waiting_writer_enters_only_after_the_holder_left(tmp_path):
    lib = str(tmp_path)
    left = threading.Event()
    entered_after_release = []
    with view_writer(lib, "episodes"):

        def waiter() -> None:
            with view_writer(lib, "episodes") as got:
                entered_after_release.append(got and left.is_set())

        t = threading.Thread(target=waiter)
        t.start()
        left.set()  # set before the holder's flock is released: the waiter cannot enter earlier
    t.join(30)
    assert entered_after_release == [True]


def test_run_file_and_process_liveness(tmp_path):
    lib = str(tmp_path)
    assert read_run(lib) == {}
    write_run(lib, {"server_pid": 1, "mountpoint": "/m"})
    assert read_run(lib) == {"server_pid": 1, "mountpoint": "/m"}
    remove_run(lib)
    assert read_run(lib) == {}
    assert pid_alive(os.getpid()) and not pid_alive(None) and not pid_alive(0)
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()  # a reaped child: gone
    assert not pid_alive(p.pid) and wait_exit(p.pid, 0.0)
    z = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        assert wait_exit(z.pid, 30)  # a zombie child of ours counts as exited
    finally:
        z.wait()


def test_a_process_whose_main_thread_exited_first_is_alive_until_its_last_thread_is():
    """After SIGKILL the threads of a process exit one by one; the main thread may turn zombie first while
    another still holds the process's open files (a mount server's /dev/fuse: the FUSE connection is
    aborted only when the last thread is gone). ``pid_alive`` must say alive until then."""
    from libraryfs.probes import process_state

    code = (
        "import ctypes, os, sys, threading\n"
        "r, w = os.pipe()\n"
        "threading.Thread(target=lambda: os.read(r, 1)).start()\n"  # lives until the pipe closes
        "print(w, flush=True)\n"
        "ctypes.CDLL(None).pthread_exit(None)\n"  # the main thread exits alone: it turns zombie
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip()
        wait_until(lambda: process_state(p.pid) == "Z", 30, "the main thread to turn zombie")
        assert len(os.listdir(f"/proc/{p.pid}/task")) == 2
        assert pid_alive(p.pid) and not wait_exit(p.pid, 0.0)
        os.kill(p.pid, signal.SIGKILL)
        assert wait_exit(p.pid, 30)  # every thread gone: dead (a zombie child of ours)
    finally:
        p.kill()
        p.wait()
        p.stdout.close()


def _with_store(libdir, fn) -> None:
    st = Store(libdir)  # one environment per process at a time (py-lmdb): closed before waiting
    try:
        fn(st)
    finally:
        st.close()


def test_wait_until_idle_waits_for_the_indexer_and_names_what_is_pending(libdir):
    lib = str(libdir)
    _with_store(lib, lambda st: StoreTree(st).write_bytes("a/b.md", b"# B\n"))
    with pytest.raises(TimeoutError, match=r"3 records pending, state None"):
        wait_until_idle(lib, timeout_s=0.2)  # no indexer: a timeout saying why
    _with_store(lib, lambda st: Indexer(lib, store=st).run_once(full=True))
    assert wait_until_idle(lib, timeout_s=5) < 5
    _with_store(lib, lambda st: StoreTree(st).write_bytes("inbox/new.md", b"# New\n"))
    _with_store(lib, lambda st: Indexer(lib, store=st, settle_s=3600).run_once())  # unsettled: stays put
    assert wait_until_idle(lib, timeout_s=5) < 5
    with pytest.raises(TimeoutError, match="inbox not empty"):
        wait_until_idle(lib, timeout_s=0.2, inbox=True)
    st = Store(lib, readonly=True)
    try:
        with st.read() as t:
            assert index_backlog(t) == {"pending_records": 0, "state": "idle", "inbox_entries": True}
    finally:
        st.close()
