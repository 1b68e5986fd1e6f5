"""What a cold read (the kernel's LOOKUP, OPEN, READ, RELEASE of a name it has not cached) asks of the store,
over a real LMDB store without a mount (issue 18, docs/benchmarks.md "Cold reads"): an OPEN right after the
LOOKUP (getattr) or the READDIRPLUS entry of the same name, and the first READ right after the OPEN, reuse
what the previous request read when no commit happened since (same snapshot id) — and read the store again
when one did, by this process or another."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers.view import GID, UID, mkfile

from libraryfs.errors import NotFound
from libraryfs.fs.resolve import Resolver
from libraryfs.fs.store import Store, Txn
from libraryfs.fs.view import LibraryView


@pytest.fixture
def v(tmp_path):
    st = Store.create(tmp_path / "lib")
    yield LibraryView(st)
    st.close()


@pytest.fixture
def walks(monkeypatch) -> list[bytes]:
    """Paths :meth:`Resolver.resolve` walks from now on (the real walk runs; this only records it)."""
    seen: list[bytes] = []
    real = Resolver.resolve

    def spy(self, t, path):
        seen.append(path)
        return real(self, t, path)

    monkeypatch.setattr(Resolver, "resolve", spy)
    return seen


@pytest.fixture
def inode_reads(monkeypatch) -> list[int]:
    """Inode numbers :meth:`Txn.inode` reads from now on (the real read runs)."""
    seen: list[int] = []
    real = Txn.inode

    def spy(self, ino):
        seen.append(ino)
        return real(self, ino)

    monkeypatch.setattr(Txn, "inode", spy)
    return seen


def _tree(v: LibraryView) -> None:
    v.mkdir(b"/d", 0o755, UID, GID)
    mkfile(v, b"/d/f", b"abc")
    mkfile(v, b"/d/g", b"xyz")


def test_open_after_lookup_and_read_after_open_read_nothing_again(v, walks, inode_reads):
    _tree(v)
    walks.clear()
    st = v.getattr(b"/d/f")  # the kernel's LOOKUP
    assert walks == [b"/d/f"]
    fh, direct = v.open(b"/d/f", os.O_RDONLY)
    assert walks == [b"/d/f"]  # OPEN: no second walk
    inode_reads.clear()
    assert v.read(fh, 65536, 0) == b"abc"
    assert inode_reads == []  # READ: the record open read
    v.release(fh)
    assert not direct and st["st_size"] == 3


def test_open_after_readdirplus_walks_no_path(v, walks):
    _tree(v)
    dh = v.opendir(b"/d")
    listed = {n: a for n, _t, _i, _o, a in v.readdir_plus(dh, 0)}
    v.releasedir(dh)
    assert listed[b"f"] is not None
    walks.clear()
    fh, _ = v.open(b"/d/f", os.O_RDONLY)
    assert walks == []
    assert v.read(fh, 10, 0) == b"abc"
    v.release(fh)


def test_a_commit_of_this_process_between_lookup_and_open_is_seen(v):
    _tree(v)
    v.getattr(b"/d/f")
    v.rename(b"/d/g", b"/d/f")  # same name, another inode and content
    fh, _ = v.open(b"/d/f", os.O_RDONLY)
    assert v.read(fh, 10, 0) == b"xyz"
    v.release(fh)
    v.getattr(b"/d/f")
    v.unlink(b"/d/f")
    with pytest.raises(NotFound):
        v.open(b"/d/f", os.O_RDONLY)


def test_a_write_between_open_and_read_is_read(v):
    _tree(v)
    v.getattr(b"/d/f")
    fh, _ = v.open(b"/d/f", os.O_RDONLY)
    wfh, _ = v.open(b"/d/f", os.O_WRONLY)
    v.write(wfh, b"abcdef", 0)  # a larger size: a stale record would cut the read at 3 bytes
    v.release(wfh)
    assert v.read(fh, 100, 0) == b"abcdef"
    v.release(fh)


_OTHER = """
import sys
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView
st = Store(sys.argv[1])
v = LibraryView(st)
v.rename(b"/d/f", b"/d/moved")
fh = v.open(b"/d/g", 1)[0]
v.write(fh, b"longer than before", 0)
v.release(fh)
st.close()
"""


def test_a_commit_of_another_process_between_requests_is_seen(v, tmp_path):
    _tree(v)
    v.getattr(b"/d/f")
    fh, _ = v.open(b"/d/g", os.O_RDONLY)
    subprocess.run([sys.executable, "-c", _OTHER, str(tmp_path / "lib")], check=True, timeout=120)
    with pytest.raises(NotFound):
        v.open(b"/d/f", os.O_RDONLY)
    assert v.read(fh, 100, 0) == b"longer than before"
    v.release(fh)
