"""Many agents at once through a real mount served by several FUSE worker threads (issue 18).

The server runs libfuse's multithreaded loop with its Python handlers under one lock and ``fsync`` waiting
for the store's group commit outside it (docs/architecture.md "Threading"). These tests drive it from many
processes at once — creating, writing, fsyncing, renaming within and across directories, hard-linking and
unlinking, in shared and private directories — and then check every byte, every listing and
``libraryfs check`` (the ``mounted`` fixture's teardown): a race between workers shows up as lost or
misplaced data, a wrong listing, an error from a request, a damaged store, or a hang (each worker process
has a deadline). Each test repeats its rounds, so a race has many chances to show.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import time

import pytest
from helpers.mount import mount

#: worker processes of each round, and rounds per test (a race has many chances to show)
PROCS = 8
ROUNDS = 3
FILES = 40  #: files per worker per round
DEADLINE_S = 120.0  #: a worker still running after this is a hang (a deadlock in the server)


def _content(worker: int, i: int, rnd: int) -> bytes:
    """The bytes worker ``worker`` writes to its file ``i`` in round ``rnd`` (distinct per file, varied size)."""
    return (f"w{worker} f{i} r{rnd} ".encode() * (1 + (i * 37 + worker) % 300))[
        : 1 + (i * 977 + worker) % 9000
    ]


def _churn(root: str, worker: int, rnd: int) -> None:
    """One worker's round: in its own directory and in the shared one, create + write + fsync files, rename
    some within and across directories, hard-link and unlink others, fsync directories; every step checked
    at once (a wrong answer raises)."""
    own = os.path.join(root, f"own{worker}")
    shared = os.path.join(root, "shared")
    os.makedirs(own, exist_ok=True)
    for i in range(FILES):
        d = own if i % 2 else shared
        path = os.path.join(d, f"f-{worker}-{i}-{rnd}")
        data = _content(worker, i, rnd)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            assert os.write(fd, data) == len(data)
            if i % 3 == 0:
                os.fsync(fd)
        finally:
            os.close(fd)
        assert os.stat(path).st_size == len(data)
        if i % 5 == 1:  # rename within its directory, then across to the other one
            moved = path + ".m"
            os.rename(path, moved)
            other = shared if d == own else own
            final = os.path.join(other, os.path.basename(path))
            os.rename(moved, final)
            path = final
        if i % 7 == 2:  # a second name, then the first one removed: the data stays under the second
            alias = path + ".lnk"
            os.link(path, alias)
            assert os.stat(alias).st_nlink == 2
            os.chmod(path, 0o600)  # through one name while the other is known to the kernel
            _eventually_mode(alias, 0o600)
            os.unlink(path)
            assert os.stat(alias).st_nlink == 1
            os.rename(alias, path)
        if i % 11 == 3:  # written, then removed
            os.unlink(path)
        if os.path.exists(path):
            with open(path, "rb") as f:
                assert f.read() == data, path
    dfd = os.open(own, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _eventually_mode(path: str, mode: int) -> None:
    """``path``'s permission bits become ``mode`` at once — or, with several workers, within the mount's
    background pass: the kernel sends the RELEASE of a just-closed file in the background, a worker may
    serve the chmod first, and the other name's cached attributes are then dropped by the background
    thread (≤ 0.2 s; docs/architecture.md "Threading"), never later than the 1 s attribute timeout."""
    deadline = time.monotonic() + 1.5
    while os.stat(path).st_mode & 0o777 != mode:
        assert time.monotonic() < deadline, f"{path}: mode still stale after the attribute timeout"
        time.sleep(0.02)


def _expected(worker: int, rnd: int) -> dict[str, bytes]:
    """Relative path → content of what one worker's round leaves (the same rules as :func:`_churn`)."""
    out = {}
    for i in range(FILES):
        d = f"own{worker}" if i % 2 else "shared"
        if i % 5 == 1:
            d = "shared" if d != "shared" else f"own{worker}"
        if i % 11 == 3:
            continue
        out[f"{d}/f-{worker}-{i}-{rnd}"] = _content(worker, i, rnd)
    return out


def _run_workers(target, args_of, n: int = PROCS) -> None:
    """Run ``target(*args_of(k))`` in ``n`` processes released together; fail on an error or a hang."""
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=target, args=args_of(k)) for k in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(DEADLINE_S)
    hung = [p.pid for p in procs if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    assert not hung, f"workers {hung} still running after {DEADLINE_S:.0f} s: the server hangs"
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]


def _tree(root: str) -> dict[str, bytes]:
    """Every regular file below ``root`` (relative path → content), as ``os.walk`` lists them."""
    out = {}
    for d, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(d, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


@pytest.mark.parametrize("threads", [8, 1])
def test_many_processes_churning_shared_and_own_directories_keep_every_byte(libdir, tmp_path, threads):
    """8 processes × 3 rounds × 40 files: creates, writes, fsyncs, renames within and across directories,
    hard links and unlinks, in a shared directory and their own; afterwards the tree holds exactly what the
    rules say, byte for byte, seen through the mount and after a remount, and ``libraryfs check`` is clean."""
    with mount(libdir, tmp_path / "mnt", indexer=False, overrides={"mount.threads": threads}) as m:
        root = m.p("work")
        os.makedirs(os.path.join(root, "shared"))
        want: dict[str, bytes] = {}
        for rnd in range(ROUNDS):
            _run_workers(_churn, lambda k, r=rnd: (root, k, r))
            for k in range(PROCS):
                want.update(_expected(k, rnd))
            assert _tree(root) == want
    with mount(libdir, tmp_path / "mnt", indexer=False) as m:  # what the store holds, not the kernel's caches
        assert _tree(m.p("work")) == want


def _create_then_signal(path: str, ready, done) -> None:
    """Create ``path`` (no write: the create is pending in the server), say so, and keep it open until told."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    ready.set()
    done.wait(DEADLINE_S)
    os.close(fd)


def _pending_pair(root: str, k: int) -> None:
    """Round after round: one child creates a file and holds it open unwritten, another process (this one)
    must then see it in ``stat``, the listing and an ``O_EXCL`` create of the same name (EEXIST)."""
    ctx = mp.get_context("fork")
    for i in range(60):
        path = os.path.join(root, f"p{k}-{i}")
        ready, done = ctx.Event(), ctx.Event()
        child = ctx.Process(target=_create_then_signal, args=(path, ready, done))
        child.start()
        try:
            assert ready.wait(DEADLINE_S)
            assert os.stat(path).st_size == 0
            assert os.path.basename(path) in os.listdir(root)
            with pytest.raises(FileExistsError):
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        finally:
            done.set()
            child.join(DEADLINE_S)
        assert child.exitcode == 0


def test_a_file_created_by_one_process_is_seen_by_others_whichever_worker_serves_them(libdir, tmp_path):
    """A new file's create is committed with its first write (fs/pending.py); until then every other
    request — served by any worker thread — must see the file: ``stat``, ``readdir`` and ``O_EXCL`` from
    other processes right after ``open(O_CREAT)`` returned (4 pairs at once, 60 files each)."""
    with mount(libdir, tmp_path / "mnt", indexer=False, overrides={"mount.threads": 8}) as m:
        root = m.p("pending")
        os.mkdir(root)
        _run_workers(_pending_pair, lambda k: (root, k), n=4)
        assert len(os.listdir(root)) == 4 * 60
        assert _status(m.libdir)["mount"]["threads"] == 8  # status says how the mount serves
        assert ", 8 threads" in _status(m.libdir, human=True)


def _fsync_loop(path: str, n: int) -> None:
    """Append a numbered line and fsync it, ``n`` times (SQLite's commit pattern, one file per process)."""
    with open(path, "ab") as f:
        for i in range(n):
            f.write(b"%d\n" % i)
            f.flush()
            os.fsync(f.fileno())


def test_concurrent_fsyncs_return_with_every_line_in_place(mounted):
    """8 processes appending and fsyncing 100 times each at once (their fsyncs share store syncs: group
    commit); every line is there afterwards, and through a read-only store opened beside the mount."""
    root = mounted.p("logs")
    os.mkdir(root)
    _run_workers(_fsync_loop, lambda k: (os.path.join(root, f"log{k}"), 100))
    want = b"".join(b"%d\n" % i for i in range(100))
    for k in range(PROCS):
        with open(os.path.join(root, f"log{k}"), "rb") as f:
            assert f.read() == want
    st = mounted.store(readonly=True)
    try:
        from libraryfs.fs import schema as S

        with st.read() as t:
            logs = t.lookup(S.ROOT_INO, b"logs")
            assert logs is not None and len(list(t.iter_dir(logs))) == PROCS
    finally:
        st.close()


def _close_while_unlinking(root: str, k: int) -> None:
    """Round after round: a file written and open, then its ``close`` (another thread) and its ``unlink``
    (this one) at once — libfuse may hide it as ``.fuse_hidden…`` after its last close was served."""
    import threading

    for i in range(400):
        path = os.path.join(root, f"c{k}-{i}")
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, b"x" * 100)
        go = threading.Barrier(2)
        closer = threading.Thread(target=lambda fd=fd, go=go: (go.wait(), os.close(fd)))
        closer.start()
        go.wait()
        os.unlink(path)
        closer.join()


def test_a_file_closed_while_being_unlinked_leaves_no_hidden_name(libdir, tmp_path):
    """A close and an unlink of the same file at once, from 8 processes × 400 files: nothing is left in
    the directory (before, a hide that libfuse issued after the last close became a visible
    ``.fuse_hidden…`` file, and stayed)."""
    with mount(libdir, tmp_path / "mnt", indexer=False, overrides={"mount.threads": 8}) as m:
        root = m.p("race")
        os.mkdir(root)
        _run_workers(_close_while_unlinking, lambda k: (root, k))
        assert os.listdir(root) == []


def _status(libdir: str, human: bool = False):
    """``libraryfs status LIBDIR [--json]``: the dict, or the human text when ``human``."""
    r = subprocess.run(
        [sys.executable, "-m", "libraryfs.cli.main", "status", libdir, *([] if human else ["--json"])],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout if human else json.loads(r.stdout)


def test_the_threads_setting_is_a_mount_option(libdir, tmp_path):
    """``--threads N`` / ``mount.threads``: 1 serves with the single-threaded loop; 0 is refused, naming the
    flag; ``config show`` lists the setting."""
    from libraryfs.daemon.launcher import LaunchError

    with mount(libdir, tmp_path / "mnt", indexer=False, overrides={"mount.threads": 1}) as m:
        with open(m.p("one"), "wb") as f:
            f.write(b"x")
        assert os.path.getsize(m.p("one")) == 1
        assert _status(m.libdir)["mount"]["threads"] == 1 and " threads)" not in _status(m.libdir, human=True)
    with pytest.raises(LaunchError, match="--threads"):
        mount(libdir, tmp_path / "mnt", indexer=False, overrides={"mount.threads": 0}).__enter__()
    r = subprocess.run(
        [sys.executable, "-m", "libraryfs.cli.main", "config", "show", "--library", str(libdir)],
        capture_output=True,
        text=True,
    )
    assert "mount.threads" in r.stdout and r.returncode == 0, r.stderr
