"""umount during a long indexer pass, then mount again (issue 14, "Damaged or unusual libraries").

Before: `umount` waited 10 s, printed "unmounted" and exited 0 while the SIGTERMed indexer went on with its
pass (it checked for a stop only between passes); the next `mount` adopted that dying indexer ("indexer
pid N"), which exited soon after, so the new mount had no indexer and new files were never indexed. Now the
indexer stops at its next entry/batch/TOC, its lock says ``<pid> stopping``, `umount` waits for it (exit 10
if it is still there after ``--timeout``), and `mount` waits for it to exit and starts a fresh one.

The pass is made long by volume (thousands of files written into the store before the mount, so the first
pass has them all to examine); every wait is on a condition.
"""

import os
import subprocess
import sys

import pytest
from helpers.mount import check_store, require_fuse
from helpers.wait import wait_until

from libraryfs.fs import schema as S
from libraryfs.fs.store import Store
from libraryfs.fs.tree import StoreTree
from libraryfs.layout import index_backlog, indexer_pid, is_libraryfs_mount, pid_alive

FILES = 8000  #: files the first pass must examine: long enough to be in flight when umount comes


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "libraryfs.cli.main", *args], capture_output=True, text=True, timeout=120
    )


def backlog(lib: str) -> dict:
    st = Store(lib, readonly=True)
    try:
        with st.read() as t:
            return index_backlog(t)
    finally:
        st.close()


def sections(lib: str, prefix: bytes = b"d") -> dict[str, int]:
    """Entries the TOC of each top-level directory named ``prefix…`` counts (its section record; 0 while the
    indexer has not rendered it)."""
    st = Store(lib, readonly=True)
    try:
        with st.read() as t:
            out = {}
            for name, ino in t.iter_dir(S.ROOT_INO):
                if name.startswith(prefix):
                    m = t.section_meta(ino) if t.toc_page(ino, 0) is not None else None
                    out[name.decode()] = m.entries_direct if m else 0
            return out
    finally:
        st.close()


@pytest.fixture
def big_library(tmp_path):
    require_fuse()
    lib = str(tmp_path / "lib")
    assert cli("init", lib).returncode == 0
    st = Store(lib)
    try:
        tree = StoreTree(st)
        for i in range(FILES):
            tree.write_bytes(f"d{i % 40:02d}/n{i:05d}.md", f"# Note {i}\n\nAbout topic {i % 97}.\n".encode())
    finally:
        st.close()
    return lib


def test_umount_during_a_long_pass_then_mount_again_indexes_new_files(big_library, tmp_path):
    lib, mnt = big_library, str(tmp_path / "mnt")
    r = cli("mount", lib, mnt, "--no-llm")
    assert r.returncode == 0, r.stderr
    old = indexer_pid(lib)
    assert old
    try:
        wait_until(
            lambda: (b := backlog(lib))["state"] == "indexing" and b["pending_records"] > 0,
            60,
            "the first pass to be in flight",
        )
        r = cli("umount", mnt, "--timeout", "0")  # no wait at all: the "still shutting down" path may show
        assert r.returncode in (0, 10), r.stderr
        if r.returncode == 10:
            assert "still shutting down" in r.stderr and r.stderr.count("\n") == 1, r.stderr
        assert not is_libraryfs_mount(mnt)

        r = cli("mount", lib, mnt, "--no-llm")
        assert r.returncode == 0, r.stderr
        assert not pid_alive(old), "mount adopted the indexer it had asked to stop"
        new = indexer_pid(lib)
        assert new and new != old
        os.makedirs(os.path.join(mnt, "later"))
        with open(os.path.join(mnt, "later", "fresh.md"), "w") as f:
            f.write("# Fresh\n\nWritten after the remount.\n")

        def indexed() -> bool:  # rendered by an indexer (a stale placeholder page lists names too)
            return sections(lib, b"later").get("later") == 1

        wait_until(indexed, 120, "the new mount's indexer to index later/fresh.md")
        wait_until(lambda: backlog(lib)["pending_records"] == 0, 120, "every record indexed")
        with open(os.path.join(mnt, "later", "INDEX.md")) as f:
            assert "fresh.md" in f.read()
        assert indexer_pid(lib) == new
        assert sections(lib) == {f"d{k:02d}": FILES // 40 for k in range(40)}  # the stopped pass's records
        # were redone, not dropped: every directory's TOC counts all its entries
    finally:
        if is_libraryfs_mount(mnt):
            cli("umount", mnt)
        if pid_alive(old):  # the indexer this test's mount started
            os.kill(old, 15)
    check_store(lib)
