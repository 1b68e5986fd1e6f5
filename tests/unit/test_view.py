"""POSIX semantics of LibraryView over a real store, without a mount. Every test ends with ``check``."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from libraryfs.errors import (
    AccessDenied,
    BadHandle,
    Exists,
    FileTooBig,
    InvalidArgument,
    IsADir,
    NameTooLong,
    NoAttr,
    NotADir,
    NotEmpty,
    NotFound,
    NotPermitted,
    NotSupported,
    to_errno,
)
from libraryfs.fs import schema as S
from libraryfs.fs.attrs import UTIME_NOW, UTIME_OMIT, XATTR_CREATE, XATTR_REPLACE
from libraryfs.fs.check import check
from libraryfs.fs.nameops import RENAME_EXCHANGE, RENAME_NOREPLACE
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView

UID, GID = os.getuid(), os.getgid()
HIDDEN = b"/.fuse_hidden0000000a00000001"


@pytest.fixture
def v(store):
    return LibraryView(store)


from helpers.view import cat, mkfile, names  # noqa: E402,F401
from helpers.wait import wait_until  # noqa: E402


def real_names(v: LibraryView, path: bytes) -> list[bytes]:
    return [
        n for n in names(v, path) if n not in (b".", b"..", b"INDEX.md", b".index", b".libraryfs", b".find")
    ]


# ---- files ------------------------------------------------------------------------------------------------
def test_create_write_read_and_o_trunc(v):
    mkfile(v, b"/a.md", b"line one is long\n")
    fh, direct = v.open(b"/a.md", os.O_WRONLY | os.O_TRUNC)
    assert direct is False
    v.write(fh, b"short\n", 0)
    v.release(fh)
    assert cat(v, b"/a.md") == b"short\n"
    assert v.getattr(b"/a.md")["st_size"] == 6


def test_exclusive_create_and_create_of_a_directory(v):
    mkfile(v, b"/lock")
    with pytest.raises(Exists):
        v.create(b"/lock", 0o644, os.O_CREAT | os.O_EXCL | os.O_WRONLY, UID, GID)
    fh = v.create(b"/lock", 0o644, os.O_CREAT | os.O_WRONLY, UID, GID)  # plain O_CREAT opens it
    v.release(fh)
    v.mkdir(b"/d", 0o755, UID, GID)
    with pytest.raises(IsADir):
        v.create(b"/d", 0o644, os.O_CREAT | os.O_WRONLY, UID, GID)
    with pytest.raises(IsADir):
        v.open(b"/d", os.O_WRONLY)


def test_o_append_writes_at_the_stored_end_not_the_kernel_offset(v):
    mkfile(v, b"/a.md", b"first\n")
    stale = v.open(b"/a.md", os.O_WRONLY | os.O_APPEND)[0]
    other = v.open(b"/a.md", os.O_WRONLY | os.O_APPEND)[0]
    v.write(other, b"Z\n", 0)
    v.write(stale, b"third\n", 6)  # the kernel's idea of the end is stale: 6, the real end is 8
    v.release(stale)
    v.release(other)
    assert cat(v, b"/a.md") == b"first\nZ\nthird\n"


def test_sparse_write_and_truncate_grow_read_zeros(v):
    mkfile(v, b"/sp")
    fh = v.open(b"/sp", os.O_RDWR)[0]
    v.write(fh, b"Z", 5_000_000)
    v.truncate(None, 10 << 20, fh)
    assert v.getattr(b"/sp")["st_blocks"] == 40  # one chunk of 19,265 bytes: 5 pages of 4 KiB (I9)
    assert v.read(fh, 3, 4_999_999) == b"\0Z\0"
    assert v.read(fh, 10, (10 << 20) - 5) == b"\0" * 5
    v.truncate(None, 3, fh)
    assert v.read(fh, 10, 0) == b"\0\0\0"
    v.release(fh)
    assert v.getattr(b"/sp")["st_size"] == 3


def test_write_on_a_read_only_handle_and_unknown_handles(v):
    mkfile(v, b"/a")
    fh = v.open(b"/a", os.O_RDONLY)[0]
    with pytest.raises(BadHandle):
        v.write(fh, b"x", 0)
    v.release(fh)
    with pytest.raises(BadHandle):
        v.read(999, 1, 0)


def test_unlink_while_open_keeps_data_until_last_close(v, store):
    mkfile(v, b"/t.md", b"keep me")
    fh = v.open(b"/t.md", os.O_RDWR)[0]
    ino = v.getattr(b"/t.md")["st_ino"]
    v.unlink(b"/t.md")
    with pytest.raises(NotFound):
        v.getattr(b"/t.md")
    assert v.read(fh, 100, 0) == b"keep me"
    assert v.getattr(None, fh)["st_nlink"] == 0
    v.write(fh, b"!", 7)
    v.truncate(None, 4, fh)
    v.chmod(None, 0o600, fh)
    assert v.getattr(None, fh)["st_size"] == 4
    v.release(fh)
    with store.read() as t:
        assert t.inode(ino) is None


def test_libfuse_hidden_rename_is_an_unlink_that_keeps_a_path(v, store):
    """libfuse renames a file unlinked while open to .fuse_hidden…; it must never be listed or stored."""
    mkfile(v, b"/t.md", b"keep me")
    fh = v.open(b"/t.md", os.O_RDWR)[0]
    ino = v.getattr(b"/t.md")["st_ino"]
    v.rename(b"/t.md", HIDDEN)
    assert real_names(v, b"/") == []
    st = v.getattr(HIDDEN)  # libfuse's fstat without a handle goes through the hidden path
    assert (st["st_ino"], st["st_nlink"], st["st_size"]) == (ino, 0, 7)
    v.truncate(HIDDEN, 4)
    v.release(fh)
    v.unlink(HIDDEN)  # what libfuse does after the last close
    assert v.getattr(HIDDEN)["st_ino"] == ino  # the file lingers for a kernel node of the name (C03)
    assert v.files.expire_hidden(everything=True) == 1
    with pytest.raises(NotFound):
        v.getattr(HIDDEN)
    with store.read() as t:
        assert t.inode(ino) is None
    assert v.hidden == {}


def test_a_hidden_looking_rename_of_a_closed_file_is_a_plain_rename(v):
    mkfile(v, b"/t.md", b"x")
    v.rename(b"/t.md", HIDDEN)
    assert real_names(v, b"/") == [HIDDEN[1:]]
    assert cat(v, HIDDEN) == b"x"


def test_with_several_workers_a_hide_that_comes_after_the_last_close_is_an_unlink(v, store):
    """libfuse (several workers) checks that a file is open, the last close is served by another worker,
    then libfuse renames the file to its hidden name and never unlinks that name (its open count is 0):
    the view must not leave a visible ``.fuse_hidden…`` file (bench/crash_run.py found one)."""
    v.serve_from(lambda: True, workers=4)
    mkfile(v, b"/t.md", b"x")
    ino = v.getattr(b"/t.md")["st_ino"]
    v.rename(b"/t.md", HIDDEN)  # closed already: the unlink it stands for
    assert real_names(v, b"/") == []
    assert v.files.expire_hidden(everything=True) == 1  # it lingered (C03), now freed
    assert v.hidden == {}
    with pytest.raises(NotFound):
        v.getattr(HIDDEN)
    with store.read() as t:
        assert t.inode(ino) is None


def test_mknod_fifo_socket_device_and_regular(v):
    v.mknod(b"/fifo", stat.S_IFIFO | 0o644, 0, UID, GID)
    v.mknod(b"/sock", stat.S_IFSOCK | 0o600, 0, UID, GID)
    v.mknod(b"/chr", stat.S_IFCHR | 0o600, os.makedev(1, 2), UID, GID)
    v.mknod(b"/reg", 0o640, 0, UID, GID)
    assert stat.S_ISFIFO(v.getattr(b"/fifo")["st_mode"])
    assert stat.S_ISSOCK(v.getattr(b"/sock")["st_mode"])
    a = v.getattr(b"/chr")
    assert stat.S_ISCHR(a["st_mode"]) and a["st_rdev"] == os.makedev(1, 2)
    assert v.getattr(b"/reg")["st_mode"] == stat.S_IFREG | 0o640
    with pytest.raises(Exists):
        v.mknod(b"/fifo", stat.S_IFIFO | 0o644, 0, UID, GID)
    with pytest.raises(InvalidArgument):
        v.mknod(b"/d", stat.S_IFDIR | 0o755, 0, UID, GID)
    v.unlink(b"/fifo")
    assert sorted(real_names(v, b"/")) == [b"chr", b"reg", b"sock"]


# ---- names and directories ----------------------------------------------------------------------------------
def test_name_limits_and_non_utf8_names(v):
    mkfile(v, b"/" + b"a" * 255)
    with pytest.raises(NameTooLong):
        mkfile(v, b"/" + b"a" * 256)
    with pytest.raises(NameTooLong):
        v.getattr(b"/" + "飞".encode() * 86)
    mkfile(v, b"/caf\xe9.md", b"latin-1")
    mkfile(v, b"/nl\nname")
    assert b"caf\xe9.md" in names(v, b"/") and b"nl\nname" in names(v, b"/")
    assert cat(v, b"/caf\xe9.md") == b"latin-1"
    d = b""
    for _ in range(3):
        d += b"/" + b"b" * 200
        v.mkdir(d, 0o755, UID, GID)
    mkfile(v, d + b"/f.md", b"ok")
    assert cat(v, d + b"/f.md") == b"ok"


def test_a_name_holding_a_nul_byte_is_refused_by_every_call_that_makes_one(v):
    """The kernel never passes a NUL in a name; the MCP server calls the view directly, and a trial stored
    ``a\0b.md`` through it (listed as ``a``, unreachable, ``readdir`` of its directory EIO, check I2). Every
    call that makes a dirent refuses it with EINVAL and stores nothing."""
    mkfile(v, b"/a.md")
    v.mkdir(b"/d", 0o755, UID, GID)
    before = sorted(real_names(v, b"/")), sorted(real_names(v, b"/d"))
    makers = [
        lambda: v.create(b"/d/a\0b.md", 0o644, os.O_WRONLY, UID, GID),
        lambda: v.mkdir(b"/d/\0", 0o755, UID, GID),
        lambda: v.mknod(b"/d/x\0", stat.S_IFIFO | 0o644, 0, UID, GID),
        lambda: v.symlink(b"/d/l\0", b"a.md", UID, GID),
        lambda: v.link(b"/a.md", b"/d/h\0ard"),
        lambda: v.rename(b"/a.md", b"/d/r\0"),
    ]
    for make in makers:
        with pytest.raises(InvalidArgument):
            make()
    assert (sorted(real_names(v, b"/")), sorted(real_names(v, b"/d"))) == before


def test_generated_names_are_lookup_only_and_index_md_can_be_claimed(v, store):
    v.mkdir(b"/d", 0o755, UID, GID)
    for p in (b"/.libraryfs", b"/.find"):
        with pytest.raises(Exists):
            mkfile(v, p)
    with pytest.raises(AccessDenied):  # .index is reserved but absent (one-page TOC): EACCES, not EEXIST
        mkfile(v, b"/d/.index")
    with pytest.raises(NotFound):  # a directory never indexed has no INDEX.md until it settles (~1 s)
        v.getattr(b"/d/INDEX.md")
    a = wait_until(lambda: v.getattr(b"/d/INDEX.md"), 30, "the new directory to settle", ignore=(NotFound,))
    assert a["st_mode"] == stat.S_IFREG | 0o444 and a["st_size"] > 0
    fh, direct = v.open(b"/d/INDEX.md", os.O_RDONLY)  # the size the kernel holds: the page cache serves it
    assert direct is False and v.keep_cache(fh) is False  # (shared mmap works), never a stale one
    v.release(fh)
    mkfile(v, b"/d/new.md")  # the pending page lists it: a new size the kernel has not been told
    with pytest.raises(NotFound):  # the directory changed: unsettled again (still never indexed)
        v.getattr(b"/d/INDEX.md")
    fh, direct = wait_until(
        lambda: v.open(b"/d/INDEX.md", os.O_RDONLY), 30, "the directory to settle again", ignore=(NotFound,)
    )
    assert direct is True and b"new.md" in v.read(fh, 1 << 16, 0)  # direct_io: reads are not cut short
    v.release(fh)
    v.unlink(b"/d/new.md")
    # `rm -r d` unlinks INDEX.md and rmdirs .index/ before the directory: both succeed, nothing changes
    with store.read() as t:
        dino = t.lookup(S.ROOT_INO, b"d")
    store.run_write(lambda t: t.put_toc_pages(dino, [b"# d\n", b"page 1\n"]))
    a = v.getattr(b"/d/INDEX.md")
    assert a["st_mode"] == stat.S_IFREG | 0o444 and a["st_size"] > 0
    fh, direct = v.open(b"/d/INDEX.md", os.O_RDONLY)  # the size just reported: page cache, dropped at open
    assert direct is False and v.keep_cache(fh) is False and v.read(fh, 1 << 16, 0) == b"# d\n"
    v.release(fh)
    # resolvable, never listed (issue 14: cp -a, rsync --delete, tar, diff -r, git status see stored names)
    assert names(v, b"/d")[2:] == [] and [n for n in names(v, b"/")[2:] if n.startswith(b".")] == []
    assert names(v, b"/d/.index")[2:] == [b"0001.md"]
    # `rm` of a page or rmdir of .index/ succeeds and changes nothing (C05)
    v.unlink(b"/d/.index/0001.md")
    v.rmdir(b"/d/.index")
    assert cat(v, b"/d/INDEX.md") == b"# d\n"
    # unlinking the generated INDEX.md claims the name: ENOENT as on any filesystem; TOC in .index/
    v.unlink(b"/d/INDEX.md")
    with pytest.raises(NotFound):
        v.getattr(b"/d/INDEX.md")
    assert cat(v, b"/d/.index/INDEX.md") == b"# d\n"
    assert names(v, b"/d/.index")[2:] == [b"INDEX.md", b"0001.md"]
    v.rmdir(b"/d")
    with pytest.raises(NotFound):
        v.getattr(b"/d")


def test_mkdir_rmdir_and_directory_nlink(v):
    v.mkdir(b"/t", 0o755, UID, GID)
    v.mkdir(b"/t/a", 0o700, UID, GID)
    v.mkdir(b"/t/a/b", 0o755, UID, GID)
    assert v.getattr(b"/t")["st_nlink"] == 3
    assert v.getattr(b"/t/a")["st_mode"] == stat.S_IFDIR | 0o700
    with pytest.raises(Exists):
        v.mkdir(b"/t/a", 0o755, UID, GID)
    with pytest.raises(NotEmpty):
        v.rmdir(b"/t/a")
    mkfile(v, b"/t/f")
    with pytest.raises(NotADir):
        v.rmdir(b"/t/f")
    with pytest.raises(NotADir):
        v.getattr(b"/t/f/x")
    with pytest.raises(IsADir):
        v.unlink(b"/t/a")
    v.rmdir(b"/t/a/b")
    v.rmdir(b"/t/a")
    assert v.getattr(b"/t")["st_nlink"] == 2


def test_readdir_offsets_resume_and_never_repeat(v):
    v.mkdir(b"/big", 0o755, UID, GID)
    for i in range(300):
        mkfile(v, b"/big/n%05d.md" % i)
    fh = v.opendir(b"/big")
    first = list(v.readdir(fh, 0))
    resumed = []
    off = 0
    while True:
        chunk = list(v.readdir(fh, off))[:37]  # the kernel's buffer fills: continue from the last offset
        if not chunk:
            break
        resumed += chunk
        off = chunk[-1][3]
    v.releasedir(fh)
    assert resumed == first
    got = [n for n, *_ in first]
    assert len(got) == len(set(got)) == 300 + 2  # . .. (generated names are not listed)


# ---- rename -----------------------------------------------------------------------------------------------------
def _errno_of(fn, *args) -> int | None:
    """The errno ``fn(*args)`` fails with (None: it succeeded)."""
    try:
        fn(*args)
    except Exception as e:
        return to_errno(e)
    return None


def test_a_hidden_name_libfuse_has_unlinked_reaches_the_old_file_then_is_stale(v, store):
    """docs/posix.md C03: ``mv -f tmp t.md`` over an open ``t.md``: libfuse hides it, unlinks the hidden
    name after the last close, and may then still send OPEN for the node (a path walk that found ``t.md``
    just before the rename); the view answered ENOENT, which failed the open. The file now lingers: such an
    open reads the replaced bytes (as on ext4); once freed, the name is ESTALE (the kernel walks again)."""
    mkfile(v, b"/t.md", b"old")
    ino = v.getattr(b"/t.md")["st_ino"]
    fh = v.open(b"/t.md", os.O_RDONLY)[0]
    v.rename(b"/t.md", HIDDEN)  # libfuse's hide, then the rename it is for
    mkfile(v, b"/tmp", b"new")
    v.rename(b"/tmp", b"/t.md")
    v.release(fh)
    v.unlink(HIDDEN)  # libfuse, after the last close
    assert cat(v, HIDDEN) == b"old"  # the late OPEN of the old node
    assert v.getattr(HIDDEN)["st_ino"] == ino
    assert cat(v, b"/t.md") == b"new" and real_names(v, b"/") == [b"t.md"]
    assert v.files.expire_hidden(everything=True) == 1
    with store.read() as t:
        assert t.inode(ino) is None
    assert _errno_of(v.open, HIDDEN, os.O_RDONLY) == errno.ESTALE
    assert _errno_of(v.getattr, HIDDEN) == errno.ESTALE
    v.unlink(HIDDEN)  # a late unlink of a retired name changes nothing
    # a hidden name never used is absent, as libfuse's probe for a free hidden name needs
    assert _errno_of(v.getattr, b"/.fuse_hidden0000000b00000002") == errno.ENOENT


def test_with_several_workers_a_close_before_the_hide_is_marked_lets_the_file_linger(v, store):
    """With several workers the last ``release`` can be served after the view hid the file but before
    libfuse marked its node hidden: libfuse then never unlinks the hidden name. The view kept the name
    mapped to the freed inode (ENOENT, and an entry never dropped); now the file lingers, then is freed."""
    v.serve_from(lambda: True, workers=4)
    mkfile(v, b"/t.md", b"old")
    ino = v.getattr(b"/t.md")["st_ino"]
    fh = v.open(b"/t.md", os.O_RDONLY)[0]
    v.rename(b"/t.md", HIDDEN)
    v.release(fh)  # no unlink of HIDDEN follows
    assert cat(v, HIDDEN) == b"old"
    assert v.files.expire_hidden(everything=True) == 1
    with store.read() as t:
        assert t.inode(ino) is None
    assert v.hidden == {}
    assert _errno_of(v.open, HIDDEN, os.O_RDONLY) == errno.ESTALE
    # the hide of a file closed already (an unlink, above) lingers the same way
    mkfile(v, b"/u.md", b"x")
    v.rename(b"/u.md", b"/.fuse_hidden0000000c00000003")
    assert cat(v, b"/.fuse_hidden0000000c00000003") == b"x"
    assert v.files.expire_hidden(everything=True) == 1
    assert _errno_of(v.getattr, b"/.fuse_hidden0000000c00000003") == errno.ESTALE


def test_a_view_beside_a_mount_registers_the_files_it_unnames_for_the_mount_to_free(store):
    """docs/posix.md C03: a view that cannot see a mount's handles (the MCP server) never frees a file
    whose last name it removes while a mount runs: the mount may hold it open. The mount's view reads the
    old bytes through its handle, and frees the file once closed (two background passes)."""
    alive = [True]
    mcp = LibraryView(store, mount_alive=lambda: alive[0])
    mnt = LibraryView(store)
    mkfile(mnt, b"/a.md", b"old")
    mkfile(mnt, b"/b.md", b"gone")
    a, b = (mnt.getattr(p)["st_ino"] for p in (b"/a.md", b"/b.md"))
    fh = mnt.open(b"/a.md", os.O_RDWR)[0]
    mkfile(mcp, b"/a.tmp", b"new")
    mcp.rename(b"/a.tmp", b"/a.md")  # what write_file does, in one transaction
    mcp.unlink(b"/b.md")
    assert mcp.settle_orphans() == 0  # a mount runs: left to it
    with store.read() as t:
        assert t.orphans() == {a, b} and t.inode(a).nlink == 0 and t.inode(b) is not None
    assert mnt.read(fh, 100, 0) == b"old"
    mnt.write(fh, b"OLD", 0)
    assert mnt.read(fh, 100, 0) == b"OLD" and cat(mnt, b"/a.md") == b"new"
    assert mnt.reclaim_orphans() == 0  # first seen: not yet
    assert mnt.reclaim_orphans() == 1  # b: nobody holds it; a: open here
    mnt.release(fh)  # the last close frees it (this view wrote since, so it reads the inode at close)
    mnt.reclaim_orphans()  # else the next pass would
    with store.read() as t:
        assert t.orphans() == set() and t.inode(a) is None and t.inode(b) is None
    # with no mount running the MCP server frees at once
    alive[0] = False
    mkfile(mcp, b"/c.tmp", b"newer")
    ino = mcp.getattr(b"/a.md")["st_ino"]
    mcp.rename(b"/c.tmp", b"/a.md")  # the façade settles after the commit
    with store.read() as t:
        assert t.orphans() == set() and t.inode(ino) is None


def test_a_mount_starting_alone_frees_registered_orphans(store):
    """After a crash the next mount's purge frees what the register (and any nlink-0 file) held."""
    mcp = LibraryView(store, mount_alive=lambda: True)
    mkfile(mcp, b"/a.md", b"x")
    mcp.unlink(b"/a.md")
    with store.read() as t:
        assert len(t.orphans()) == 1
    assert LibraryView(store).purge_orphans() == 1
    with store.read() as t:
        assert t.orphans() == set()


def test_rename_replaces_atomically_and_an_open_reader_keeps_the_old_bytes(v):
    mkfile(v, b"/n.md", b"old\n")
    reader = v.open(b"/n.md", os.O_RDONLY)[0]
    mkfile(v, b"/n.md.tmp", b"new\n")
    v.rename(b"/n.md.tmp", b"/n.md")
    assert cat(v, b"/n.md") == b"new\n" and real_names(v, b"/") == [b"n.md"]
    assert v.read(reader, 100, 0) == b"old\n"
    v.release(reader)
    with pytest.raises(NotFound):
        v.rename(b"/n.md", b"/nonexistent/x.md")
    assert cat(v, b"/n.md") == b"new\n"


def test_rename_directories_posix_errors(v):
    v.mkdir(b"/p", 0o755, UID, GID)
    v.mkdir(b"/p/q", 0o755, UID, GID)
    mkfile(v, b"/p/q/f.md", b"1")
    v.rename(b"/p", b"/p2")
    assert cat(v, b"/p2/q/f.md") == b"1"
    v.mkdir(b"/e", 0o755, UID, GID)
    v.rename(b"/p2", b"/e")  # onto an empty directory
    assert real_names(v, b"/e/q") == [b"f.md"]
    v.mkdir(b"/full", 0o755, UID, GID)
    v.mkdir(b"/full/x", 0o755, UID, GID)
    v.mkdir(b"/src", 0o755, UID, GID)
    with pytest.raises(NotEmpty):
        v.rename(b"/src", b"/full")
    with pytest.raises(InvalidArgument):
        v.rename(b"/e", b"/e/q/inside")
    mkfile(v, b"/file")
    with pytest.raises(NotADir):
        v.rename(b"/src", b"/file")
    with pytest.raises(IsADir):
        v.rename(b"/file", b"/src")
    assert sorted(real_names(v, b"/")) == [b"e", b"file", b"full", b"src"]
    # nlink of parents follows subdirectories moving between them
    v.rename(b"/full/x", b"/src/x")
    assert v.getattr(b"/full")["st_nlink"] == 2 and v.getattr(b"/src")["st_nlink"] == 3


def test_rename_flags_noreplace_exchange_and_unknown(v):
    mkfile(v, b"/a", b"A")
    mkfile(v, b"/b", b"B")
    with pytest.raises(Exists):
        v.rename(b"/a", b"/b", RENAME_NOREPLACE)
    v.rename(b"/a", b"/b", RENAME_EXCHANGE)
    assert (cat(v, b"/a"), cat(v, b"/b")) == (b"B", b"A")
    with pytest.raises(NotFound):
        v.rename(b"/a", b"/none", RENAME_EXCHANGE)
    for bad in (RENAME_NOREPLACE | RENAME_EXCHANGE, 4, 8):
        with pytest.raises(InvalidArgument):
            v.rename(b"/a", b"/c", bad)
    v.rename(b"/a", b"/c", RENAME_NOREPLACE)
    assert cat(v, b"/c") == b"B"


# ---- links ------------------------------------------------------------------------------------------------------
def test_symlinks_and_hard_links(v):
    mkfile(v, b"/target.md", b"t")
    v.symlink(b"/rel.md", b"target.md", UID, GID)
    assert v.readlink(b"/rel.md") == b"target.md"
    assert stat.S_ISLNK(v.getattr(b"/rel.md")["st_mode"])
    with pytest.raises(InvalidArgument):
        v.readlink(b"/target.md")
    v.link(b"/target.md", b"/hard.md")
    assert v.getattr(b"/target.md")["st_nlink"] == 2
    assert v.getattr(b"/hard.md")["st_ino"] == v.getattr(b"/target.md")["st_ino"]
    v.unlink(b"/target.md")
    assert cat(v, b"/hard.md") == b"t" and v.getattr(b"/hard.md")["st_nlink"] == 1
    v.mkdir(b"/d", 0o755, UID, GID)
    with pytest.raises(NotPermitted):
        v.link(b"/d", b"/d2")
    with pytest.raises(NotPermitted):
        v.link(b"/INDEX.md", b"/idx")
    with pytest.raises(Exists):
        v.link(b"/hard.md", b"/rel.md")


# ---- metadata -----------------------------------------------------------------------------------------------------
def test_utimens_now_and_omit(v):
    mkfile(v, b"/ts.md")
    v.utimens(b"/ts.md", 1577934245 * 10**9, 1577934245 * 10**9)
    v.utimens(b"/ts.md", UTIME_NOW, UTIME_OMIT)  # touch -a
    a = v.getattr(b"/ts.md")
    assert a["st_mtime"] == 1577934245 * 10**9 and a["st_atime"] > 1.7e18
    v.utimens(b"/ts.md", UTIME_OMIT, 1622505600 * 10**9)  # touch -m -d
    b = v.getattr(b"/ts.md")
    assert b["st_atime"] == a["st_atime"] and b["st_mtime"] == 1622505600 * 10**9
    v.utimens(b"/ts.md", 10**18, 2 * 10**18)
    assert v.getattr(b"/ts.md")["st_mtime"] == 2 * 10**18


def test_chmod_chown_keep_the_type_and_clear_setid(v):
    mkfile(v, b"/s.sh", mode=0o600)
    v.chmod(b"/s.sh", 0o4755)
    assert v.getattr(b"/s.sh")["st_mode"] == stat.S_IFREG | 0o4755
    v.chown(b"/s.sh", -1, 1234)
    a = v.getattr(b"/s.sh")
    assert (a["st_uid"], a["st_gid"]) == (UID, 1234)
    assert a["st_mode"] & stat.S_ISUID == 0  # chown of a regular file clears set-user-id


def test_xattrs(v):
    mkfile(v, b"/x")
    with pytest.raises(NoAttr):
        v.getxattr(b"/x", b"user.nope")
    v.setxattr(b"/x", b"user.k", b"v", 0)
    with pytest.raises(Exists):
        v.setxattr(b"/x", b"user.k", b"w", XATTR_CREATE)
    with pytest.raises(NoAttr):
        v.setxattr(b"/x", b"user.other", b"w", XATTR_REPLACE)
    assert v.getxattr(b"/x", b"user.k") == b"v" and v.listxattr(b"/x") == [b"user.k"]
    v.removexattr(b"/x", b"user.k")
    with pytest.raises(NoAttr):
        v.removexattr(b"/x", b"user.k")
    # no POSIX ACLs: refused, so libacl (sed -i, cp -a) falls back to chmod (C04)
    with pytest.raises(NotSupported):
        v.setxattr(b"/x", b"system.posix_acl_access", b"\2\0\0\0", 0)
    assert to_errno(NotSupported("x")) == errno.ENOTSUP
    # generated files expose their freshness as xattrs
    assert b"user.libraryfs.generation" in v.listxattr(b"/INDEX.md")


def test_statfs_and_read_only_view(store):
    v = LibraryView(store)
    s = v.statfs()
    assert s["f_namemax"] == 255 and s["f_bavail"] > 0 and s["f_blocks"] >= s["f_bfree"]
    mkfile(v, b"/a", b"x")
    ro = LibraryView(store, read_only=True)
    assert cat(ro, b"/a") == b"x"
    for op in (
        lambda: mkfile(ro, b"/b"),
        lambda: ro.unlink(b"/a"),
        lambda: ro.mkdir(b"/d", 0o755, UID, GID),
        lambda: ro.open(b"/a", os.O_WRONLY),
    ):
        with pytest.raises(AccessDenied) as ei:
            op()
        assert to_errno(ei.value) == errno.EROFS


def test_map_growth_from_a_tiny_map(tmp_path):
    """A library created with a 1 MiB map takes 8 MiB of writes: the map grows, nothing fails (C26)."""
    st = Store.create(tmp_path / "small", map_size=1 << 20)
    try:
        v = LibraryView(st)
        for i in range(8):
            mkfile(v, b"/fill%d.bin" % i, os.urandom(1 << 20))
        assert st.map_info()["map_size"] > 8 << 20
        assert v.getattr(b"/fill7.bin")["st_size"] == 1 << 20
        assert check(st).problems == []
    finally:
        st.close()


def test_fallocate_extends_keeps_punches_and_refuses_other_modes(v):
    mkfile(v, b"/f", b"a" * 200_000)
    fh = v.open(b"/f", os.O_RDWR)[0]
    blocks = v.getattr(b"/f")["st_blocks"]
    v.fallocate(None, fh, 0, 0, 300_000)  # mode 0: the size grows, nothing is stored
    assert v.getattr(b"/f")["st_size"] == 300_000 and v.getattr(b"/f")["st_blocks"] == blocks
    v.fallocate(None, fh, 1, 0, 1 << 20)  # KEEP_SIZE
    assert v.getattr(b"/f")["st_size"] == 300_000
    v.fallocate(b"/f", None, 3, 65_536, 70_000)  # PUNCH_HOLE | KEEP_SIZE: chunk 1 freed, chunk 2 zeroed
    assert v.read(fh, 200_000, 0) == b"a" * 65_536 + bytes(70_000) + b"a" * 64_464
    assert v.getattr(b"/f")["st_blocks"] == blocks - 128
    v.fallocate(None, fh, 3, 190_000, 50_000)  # the tail of the last chunk: cut short
    assert v.read(fh, 20_000, 180_000) == b"a" * 10_000 + bytes(10_000)
    for mode, exc in ((0x08, NotSupported), (0x10, NotSupported), (2, InvalidArgument)):
        with pytest.raises(exc):  # collapse, zero range, punch without KEEP_SIZE
            v.fallocate(None, fh, mode, 0, 10)
    with pytest.raises(InvalidArgument):
        v.fallocate(None, fh, 0, 0, 0)
    with pytest.raises(FileTooBig):
        v.fallocate(None, fh, 0, 0, 1 << 52)
    v.release(fh)


def test_other_names_of_a_hard_linked_file_are_known_for_invalidation(v):
    mkfile(v, b"/a", b"x")
    assert v.aliases(b"/a") == ([], True)  # one name: nothing to refresh
    v.mkdir(b"/d", 0o755, UID, GID)
    v.link(b"/a", b"/d/b")
    assert v.aliases(b"/d/b") == ([b"/a"], True)
    v.link(b"/a", b"/c")
    assert v.getattr(b"/a")["st_nlink"] == 3
    assert v.aliases(b"/a") == ([b"/c", b"/d/b"], True)
    fh = v.open(b"/c", os.O_RDONLY)[0]  # open: the refresh is deferred (not safe inside a request)
    assert v.aliases(b"/a") == ([b"/c", b"/d/b"], False)
    v.release(fh)
    v.rename(b"/c", b"/e")
    v.unlink(b"/a")
    assert v.aliases(b"/d/b") == ([b"/e"], True)
    assert v.aliases(b"/a") == ([], True)


def test_dot_entries_carry_inode_numbers(v):
    v.mkdir(b"/d", 0o755, UID, GID)

    def dots(path: bytes) -> list[tuple[bytes, int]]:
        fh = v.opendir(path)
        out = [(n, ino) for n, _m, ino, _nxt in v.readdir(fh, 0)][:2]
        v.releasedir(fh)
        return out

    d, root, ctl = (v.getattr(p)["st_ino"] for p in (b"/d", b"/", b"/.libraryfs"))
    assert dots(b"/") == [(b".", root), (b"..", root)]  # the root is its own parent
    assert dots(b"/d") == [(b".", d), (b"..", root)]
    assert dots(b"/.libraryfs") == [(b".", ctl), (b"..", root)]
    assert 0 not in (d, root, ctl)


def test_unlink_leaves_no_row_of_the_inode_in_any_table(v, store):
    """unlink skips the tables only directories have rows in (dirparent, toc); nothing of the file stays."""
    v.mkdir(b"/d", 0o755, 0, 0)
    mkfile(v, b"/d/f.md", os.urandom(200_000))  # several data chunks
    v.setxattr(b"/d/f.md", b"user.k", b"v", 0)
    ino = v.getattr(b"/d/f.md")["st_ino"]
    v.unlink(b"/d/f.md")
    key = S.u64(ino)
    with store.read() as t:
        left = {
            name: [k for k, _ in t.kv.range(name, key, S.u64(ino + 1))]
            for name in (S.DB_INODES, S.DB_DATA, S.DB_XATTRS, S.DB_META, S.DB_DIRPARENT, S.DB_TOC)
        }
    assert left == {name: [] for name in left}
    with pytest.raises(NotFound):
        v.unlink(b"/d/f.md")
    with pytest.raises(NotFound):
        v.unlink(b"/nodir/f.md")
