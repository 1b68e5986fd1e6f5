"""What a tree walk (``ls -laR``, ``rg``) asks of the view, over a real store without a mount (issue 18, cold
metadata walks): READDIRPLUS entries (:meth:`LibraryView.readdir_plus`; an entry carries a ``stat`` only
when it is exactly what a lookup of the name would answer at that moment, libraryfs.fs.listing's module doc)
and the adapter's bookkeeping for them; ``getxattr`` of absent names without exceptions
(:meth:`LibraryView.find_xattr`)."""

from __future__ import annotations

import errno
import os

import pytest
from helpers.view import mkfile

from libraryfs.errors import BadHandle, NoAttr, NotFound, NotSupported
from libraryfs.fs.fuse_adapter import FuseOps
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView

UID, GID = os.getuid(), os.getgid()


@pytest.fixture
def v(tmp_path):
    st = Store.create(tmp_path / "lib")
    yield LibraryView(st)
    st.close()


def plus(v: LibraryView, path: bytes) -> dict[bytes, dict | None]:
    """name → the ``stat`` READDIRPLUS hands the kernel (None: left to a lookup), for a fresh handle."""
    fh = v.opendir(path)
    try:
        return {name: attrs for name, _t, _i, _o, attrs in v.readdir_plus(fh, 0)}
    finally:
        v.releasedir(fh)


def test_stored_entries_carry_the_stat_a_lookup_answers(v):
    v.mkdir(b"/d", 0o755, UID, GID)
    v.mkdir(b"/d/sub", 0o700, UID, GID)
    for i in range(100):  # more than one batch of PLUS_BATCH
        mkfile(v, b"/d/f%03d" % i, b"y" * i)
    got = plus(v, b"/d")
    assert got[b"."] is None and got[b".."] is None
    names = [n for n in got if n not in (b".", b"..")]
    assert len(names) == 101
    for n in names:
        assert got[n] == v.getattr(b"/d/" + n), n


def test_entries_changed_since_the_snapshot_get_no_stat(v):
    v.mkdir(b"/d", 0o755, UID, GID)
    for n in (b"gone", b"moved", b"kept"):
        mkfile(v, b"/d/" + n)
    fh = v.opendir(b"/d")  # the snapshot lists all three
    v.unlink(b"/d/gone")
    v.rename(b"/d/moved", b"/moved")
    mkfile(v, b"/d/replaced")
    v.rename(b"/d/replaced", b"/d/kept")  # same name, another inode
    got = {name: (ino, attrs) for name, _t, ino, _o, attrs in v.readdir_plus(fh, 0)}
    v.releasedir(fh)
    assert got[b"gone"][1] is None
    assert got[b"moved"][1] is None  # a lookup of /d/moved is ENOENT now: no positive dentry for it
    assert got[b"kept"][1] is None  # the snapshot's inode is no longer the one the name holds
    assert v.getattr(b"/d/kept")["st_ino"] != got[b"kept"][0]


def test_hard_linked_files_and_generated_directories_are_left_to_lookups(v):
    v.mkdir(b"/d", 0o755, UID, GID)
    mkfile(v, b"/d/one")
    mkfile(v, b"/d/a")
    v.link(b"/d/a", b"/d/b")
    got = plus(v, b"/d")
    assert got[b"one"] is not None
    # a lookup of a hard-linked name records it for alias invalidation (libraryfs.fs.aliases)
    assert got[b"a"] is None and got[b"b"] is None
    assert all(attrs is None for attrs in plus(v, b"/.libraryfs").values())


def test_readdir_plus_resumes_from_an_offset_and_rejects_unknown_handles(v):
    v.mkdir(b"/d", 0o755, UID, GID)
    for i in range(40):
        mkfile(v, b"/d/f%02d" % i)
    fh = v.opendir(b"/d")
    first = list(v.readdir_plus(fh, 0))
    again = list(v.readdir_plus(fh, 17))
    v.releasedir(fh)
    assert again == first[17:]
    assert [o for *_x, o, _a in first] == list(range(1, len(first) + 1))
    with pytest.raises(BadHandle):
        v.readdir_plus(fh, 0)


def test_adapter_counts_and_reports_paths_of_entries_with_attributes(v):
    """The adapter tells the remote invalidator (``seen``) every path it let the kernel cache, and counts
    READDIRPLUS requests and entries in ``requests`` (status.json ``fuse_requests``)."""
    v.mkdir(b"/d", 0o755, UID, GID)
    v.mkdir(b"/d/e", 0o755, UID, GID)
    mkfile(v, b"/d/e/x")
    mkfile(v, b"/d/e/y")
    ops = FuseOps(v)
    seen: list[tuple[bytes, int]] = []
    ops.seen = lambda path, ino: seen.append((path, ino))
    fh = ops.opendir("/d/e")
    entries = list(ops.readdir_plus(None, 0, fh))  # libfuse passes no path (nullpath_ok)
    ops.releasedir(None, fh)
    assert sorted(seen) == sorted((b"/d/e/" + n, i) for n, _t, i, _o, a in entries if a is not None)
    assert [p for p, _i in sorted(seen)] == [b"/d/e/x", b"/d/e/y"]
    assert ops.requests["readdir_plus"] == 1 and ops.requests["readdirplus_attrs"] == 2
    with pytest.raises(OSError) as ei:
        ops.readdir_plus(None, 0, fh)  # a released handle: EBADF through the adapter's translation
    assert ei.value.errno == errno.EBADF


def test_find_xattr_answers_absent_names_as_none_and_stored_ones_by_value(v):
    v.mkdir(b"/d", 0o755, UID, GID)
    mkfile(v, b"/d/f")
    v.setxattr(b"/d/f", b"user.k", b"v1", 0)
    assert v.find_xattr(b"/d/f", b"user.k") == b"v1" == v.getxattr(b"/d/f", b"user.k")
    assert v.find_xattr(b"/d/f", b"user.none") is None
    # what ls -l asks of every entry: answered without the store (none can be stored yet)
    for name in (b"security.selinux", b"security.capability", b"system.posix_acl_access"):
        assert v.find_xattr(b"/d/f", name) is None
        with pytest.raises(NoAttr):
            v.getxattr(b"/d/f", name)
    with pytest.raises(NotSupported):
        v.setxattr(b"/d/f", b"system.posix_acl_access", b"\x02\0\0\0", 0)
    # once a security.* attribute is stored, security.* names are looked up in the store
    v.setxattr(b"/d/f", b"security.selinux", b"ctx", 0)
    assert v.find_xattr(b"/d/f", b"security.selinux") == b"ctx"
    assert v.find_xattr(b"/d", b"security.selinux") is None
    assert v.find_xattr(b"/", b"user.libraryfs.generation") is None  # a stored directory: no such name
    with pytest.raises(NotFound):
        v.find_xattr(b"/d/missing", b"user.k")
    with pytest.raises(NotSupported):
        v.find_xattr(b"/d/f", b"bogus.k")


def test_adapter_find_xattr_translates_errors(v):
    ops = FuseOps(v)
    v.mkdir(b"/d", 0o755, UID, GID)
    assert ops.find_xattr(b"/d", b"user.none") is None
    with pytest.raises(OSError) as ei:
        ops.find_xattr(b"/missing", b"user.k")
    assert ei.value.errno == errno.ENOENT
    assert ops.requests["find_xattr"] == 2


def test_fill_stat_writes_what_mfusepy_would(v):
    """The adapter's ``stat`` copy (every getattr and READDIRPLUS entry) is byte-for-byte mfusepy's."""
    import mfusepy

    from libraryfs.fs.fuse_adapter import fill_stat

    v.mkdir(b"/d", 0o755, UID, GID)
    mkfile(v, b"/d/f", b"abc")
    cases = [v.getattr(p) for p in (b"/", b"/d", b"/d/f", b"/.libraryfs", b"/.libraryfs/status.json")]
    cases.append({**cases[2], "st_birthtime": 5 * 10**9 + 7, "not_a_field": 1})
    for attrs in cases:
        ours, theirs = mfusepy.c_stat(), mfusepy.c_stat()
        fill_stat(ours, attrs)
        mfusepy.set_st_attrs(theirs, attrs, use_ns=True)
        assert bytes(ours) == bytes(theirs), attrs
        assert ours.st_mtimespec.tv_sec * 10**9 + ours.st_mtimespec.tv_nsec == attrs["st_mtime"]


def test_a_security_xattr_stored_by_another_process_is_seen_after_a_refresh(v):
    """Another view on the same store (another process or host) stores a ``security.*`` xattr: this view's
    shortcut stops answering ENODATA once the mount's background pass re-reads the flag."""
    mkfile(v, b"/f")
    other = LibraryView(v.store)
    other.setxattr(b"/f", b"security.selinux", b"ctx", 0)
    assert v.find_xattr(b"/f", b"security.selinux") is None  # the flag as this view read it at start
    v.attrs.refresh_security_flag()
    assert v.find_xattr(b"/f", b"security.selinux") == b"ctx"
