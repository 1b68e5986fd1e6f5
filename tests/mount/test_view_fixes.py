"""Fixes from the new-user trial of the view: long ``/.find`` targets, reserved names, xattr namespaces and the
stale-index marker. Unit tests run :class:`LibraryView` over a real store (ending with ``check``); the mount
tests run the same through the kernel and real tools, where the kernel's part matters."""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import subprocess

import pytest
from helpers.facility import unavailable
from helpers.files import read_file
from helpers.view import cat, mkfile  # noqa: F401 (shared helpers)
from helpers.view import names as view_names
from helpers.wait import wait_until

from libraryfs.daemon.indexer import Indexer
from libraryfs.errors import AccessDenied, Exists, NoAttr, NotFound, NotSupported, to_errno
from libraryfs.fs import schema as S
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView
from libraryfs.fs.virtual import LINK_TARGET_MAX
from libraryfs.index.find import find
from libraryfs.layout import acquire_lock

UID, GID = os.getuid(), os.getgid()
STALE = b"> **Stale index**"
NAME = b"d" * 255  # one maximal component: "/" + NAME adds 256 bytes to a path


def names(v: LibraryView, path: bytes) -> list[bytes]:
    """Listing without ``.`` and ``..``."""
    return view_names(v, path)[2:]


def dino(store: Store, path: bytes) -> int:
    with store.read() as t:
        ino = S.ROOT_INO
        for name in path.strip(b"/").split(b"/"):
            ino = t.lookup(ino, name)
        return ino


# ---- 1. /.find/ leaves out matches whose link target exceeds PATH_MAX - 1 ------------------------------
def test_find_leaves_out_matches_whose_target_is_too_long(store):
    v = LibraryView(store, finder=find)
    deep = b""
    for _ in range(15):  # 15 × 256 = 3,840 bytes of directories
        deep += b"/" + NAME
        v.mkdir(deep, 0o755, UID, GID)
    fits = deep + b"/leaf" + b"x" * 245  # path 4,090 bytes: target "../.." + path = 4,095 = PATH_MAX - 1
    over = deep + b"/leaf" + b"x" * 246  # one byte more: the kernel would refuse the readlink reply (EIO)
    for p in (fits, over, b"/leaf.md"):
        mkfile(v, p, b"# leaf\n")
    assert len(b"../.." + fits) == LINK_TARGET_MAX and len(b"../.." + over) == LINK_TARGET_MAX + 1
    Indexer(store.libdir, store=store, settle_s=0).run_once(full=True)  # keeps the names the finder uses
    with store.read() as t:
        assert set(find(t, b"leaf")) == {fits, over, b"/leaf.md"}
    listing = names(v, b"/.find/leaf")
    assert len(listing) == 2 and all(n.startswith((b"01-", b"02-")) for n in listing)
    targets = {v.readlink(b"/.find/leaf/" + n) for n in listing}
    assert targets == {b"../.." + fits, b"../../leaf.md"}
    assert all(v.getattr(b"/.find/leaf/" + n)["st_size"] <= LINK_TARGET_MAX for n in listing)
    with pytest.raises(NotFound):  # no third link by lookup either
        v.getattr(b"/.find/leaf/03-" + over.rsplit(b"/", 1)[1])


def test_find_link_names_fit_name_max(store):
    """A match named with 251 bytes gains the ``NN-`` prefix: its link name is cut to NAME_MAX (255) with
    its extension kept, and it resolves (a longer name would be ENAMETOOLONG to every tool)."""
    v = LibraryView(store, finder=find)
    long_name = b"x" * 251 + b".md"
    mkfile(v, b"/" + long_name, b"# long\n")
    Indexer(store.libdir, store=store, settle_s=0).run_once(full=True)
    listing = names(v, b"/.find/" + b"x" * 20)
    assert len(listing) == 1 and len(listing[0]) == 255 and listing[0].endswith("…".encode() + b".md")
    assert v.readlink(b"/.find/" + b"x" * 20 + b"/" + listing[0]) == b"../../" + long_name


# ---- 2. reserved names: EEXIST only while the generated object exists, else EACCES -------------------------
def test_creating_a_reserved_name_that_does_not_exist_is_eacces(store):
    v = LibraryView(store)
    v.mkdir(b"/d", 0o755, UID, GID)
    mkfile(v, b"/d/f.md", b"x")
    with pytest.raises(NotFound):
        v.getattr(b"/d/.index")  # one TOC page: no .index/ here
    attempts = {
        "mkdir": lambda p: v.mkdir(p, 0o755, UID, GID),
        "create": lambda p: mkfile(v, p),
        "mknod": lambda p: v.mknod(p, S.S_IFREG | 0o644, 0, UID, GID),
        "symlink": lambda p: v.symlink(p, b"f.md", UID, GID),
        "link": lambda p: v.link(b"/d/f.md", p),
        "rename": lambda p: v.rename(b"/d/f.md", p),
    }
    for op, fn in attempts.items():
        with pytest.raises(AccessDenied) as ei:
            fn(b"/d/.index")
        assert to_errno(ei.value) == errno.EACCES, op
        # (INDEX.md is not reserved: the user's own wins, tests/unit/test_generated_and_tools.py)
    for p in (b"/.libraryfs", b"/.find"):
        with pytest.raises(Exists):
            v.mkdir(p, 0o755, UID, GID)
    # a TOC of two pages shows .index/: now the name is taken
    store.run_write(lambda t: t.put_toc_pages(dino(store, b"/d"), [b"# d\n", b"page 1\n"]))
    assert v.getattr(b"/d/.index")["st_mode"] & S.S_IFMT == S.S_IFDIR
    for fn in attempts.values():
        with pytest.raises(Exists):
            fn(b"/d/.index")
    # .libraryfs and .find are reserved at the root only; nothing was created by the refused calls
    v.mkdir(b"/d/.find", 0o755, UID, GID)
    assert sorted(names(v, b"/d")) == [b".find", b"f.md"]  # generated names are not listed


# ---- 3. xattr names outside the Linux namespaces are ENOTSUP ------------------------------------------------
def test_xattr_names_outside_the_linux_namespaces_are_enotsup(store):
    v = LibraryView(store)
    mkfile(v, b"/f", b"x")
    for name in (b"bogus.x", b"user", b"User.x", b"x"):
        with pytest.raises(NotSupported) as ei:
            v.setxattr(b"/f", name, b"1", 0)
        assert to_errno(ei.value) == errno.EOPNOTSUPP == errno.ENOTSUP
        with pytest.raises(NotSupported):
            v.getxattr(b"/f", name)
        with pytest.raises(NotSupported):
            v.removexattr(b"/f", name)
        with pytest.raises(NotSupported):
            v.getxattr(b"/INDEX.md", name)
    for name in (b"user.x", b"trusted.x", b"security.x", b"system.x"):
        v.setxattr(b"/f", name, b"1", 0)
        assert v.getxattr(b"/f", name) == b"1"
    assert sorted(v.listxattr(b"/f")) == [b"security.x", b"system.x", b"trusted.x", b"user.x"]
    with pytest.raises(NotSupported):  # POSIX ACLs stay refused (sed -i falls back to fchmod, C04)
        v.setxattr(b"/f", b"system.posix_acl_access", b"\2\0\0\0", 0)
    with pytest.raises(NoAttr):
        v.getxattr(b"/f", b"user.none")


def settle(store: Store, path: bytes) -> None:
    """Date directory ``path`` and its entries 10 s back (store-side), so it counts as settled: a directory
    never indexed shows its INDEX.md placeholder only then (libraryfs.fs.virtual.dir_settled)."""
    ino = dino(store, path)

    def fn(t):
        with_children = [ino] + [c for _n, c in t.iter_dir(ino)]
        for i in with_children:
            node = t.inode(i)
            node.ctime_ns = node.ctime_ns - 10 * 10**9
            t.put_inode(node)

    store.run_write(fn)


# ---- 4. the stale-index marker --------------------------------------------------------------------------
def test_toc_pages_say_stale_while_the_indexer_is_stopped_and_changes_are_pending(store):
    v = LibraryView(store)
    v.mkdir(b"/d", 0o755, UID, GID)
    mkfile(v, b"/d/a.md", b"# A\n")
    settle(store, b"/d")
    with store.read() as t:
        pending = t.journal_tail() - t.cfg_int(S.CFG_CURSOR)
    assert pending == 3 and not os.path.exists(os.path.join(store.libdir, "indexer.lock"))
    page = cat(v, b"/d/INDEX.md")  # the pending placeholder: marked too
    lines = page.split(b"\n")
    assert lines[0].startswith(b"<!--") and lines[1].startswith(STALE)
    assert lines[1] == (
        b"> **Stale index**: the indexer is not running; 3 changes are not reflected here "
        b"(run `libraryfs index " + os.fsencode(store.libdir) + b"`)."
    )
    assert page.count(STALE) == 1 and v.getattr(b"/d/INDEX.md")["st_size"] == len(page)

    # after a pass nothing is pending: the stored page is served as it is
    Indexer(store.libdir, store=store, settle_s=0).run_once()
    d = dino(store, b"/d")
    with store.read() as t:
        stored = t.toc_page(d, 0)
    v2 = LibraryView(store)
    assert cat(v2, b"/d/INDEX.md") == stored and STALE not in stored
    # one more file (create + write: 2 records): "2 changes" in every page, page 0 and .index/0001.md, sizes matching the bytes
    two = [stored, b"<!-- libraryfs toc: page=1/2 -->\n# d \xe2\x80\x94 more\n\n- b.md\n"]
    store.run_write(lambda t: t.put_toc_pages(d, two))
    mkfile(v2, b"/d/b.md", b"# B\n")
    for path, raw in ((b"/d/INDEX.md", two[0]), (b"/d/.index/0001.md", two[1])):
        got = cat(v2, path)
        head, rest = raw.split(b"\n", 1)
        marker = b"> **Stale index**: the indexer is not running; 2 changes are"
        assert got.startswith(head + b"\n" + marker) and got.endswith(b"`).\n" + rest), got
        assert v2.getattr(path)["st_size"] == len(got)
        fh, _ = v2.open(path, os.O_RDONLY)  # fstat of the open handle: its snapshot
        assert v2.getattr(None, fh)["st_size"] == len(got)
        v2.release(fh)
    # a read is charged the indexer's count of the stored page plus the marker's estimate (bytes/4)
    with store.read() as t:
        stored_tokens = t.section_meta(d).toc_page_tokens[0]
    v3 = LibraryView(store)
    got = cat(v3, b"/d/INDEX.md")
    marker_bytes = len(got) - len(two[0])
    assert v3.stats.to_json()["total"]["toc_tokens_read"] == stored_tokens + (marker_bytes + 3) // 4

    # a running indexer holds indexer.lock: no marker, though records are pending
    lock_fd = acquire_lock(store.libdir, "indexer.lock")
    try:
        v4 = LibraryView(store)
        assert cat(v4, b"/d/INDEX.md") == two[0] and v4.getattr(b"/d/INDEX.md")["st_size"] == len(two[0])
    finally:
        os.close(lock_fd)
    # released (the indexer stopped): the marker is back for a view that asks again
    assert STALE in cat(LibraryView(store), b"/d/INDEX.md")


def test_pages_without_a_header_comment_are_served_as_stored(store):
    v = LibraryView(store)
    v.mkdir(b"/d", 0o755, UID, GID)
    store.run_write(lambda t: t.put_toc_pages(dino(store, b"/d"), [b"# d\n"]))
    assert cat(v, b"/d/INDEX.md") == b"# d\n" and v.getattr(b"/d/INDEX.md")["st_size"] == 4


# ---- through the kernel -----------------------------------------------------------------------------------
def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"))


def test_find_link_to_a_deep_path_is_left_out_and_the_rest_read(mounted):
    """Regression: ``cat .find/leaf.txt/01-leaf.txt`` gave EIO when the target exceeded PATH_MAX - 1 (the
    kernel rejected the READLINK reply: "fuse: writing device: Invalid argument")."""
    fits = "fits" + "x" * 245  # at depth 15 its target is 5 + 15 × 256 + 250 = 4,095 bytes: the longest kept
    fds = [os.open(mounted.mnt, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for depth in range(1, 18):  # 17 × 256 bytes: the target of leaf.txt would be 4,366 bytes
            os.mkdir(NAME, dir_fd=fds[-1])
            fds.append(os.open(NAME, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
            if depth == 15:
                fd = os.open(fits, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fds[-1])
                os.write(fd, b"fits\n")
                os.close(fd)
        fd = os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fds[-1])
        os.write(fd, b"deep\n")
        os.close(fd)
    finally:
        for fd in fds:
            os.close(fd)
    os.mkdir(mounted.p("short"))
    with open(mounted.p("short/leaf.txt"), "w") as f:
        f.write("short\n")
    mounted.wait_indexed()
    assert os.listdir(mounted.p(".find/leaf.txt")) == ["01-leaf.txt"]
    r = _run("cat", mounted.p(".find/leaf.txt/01-leaf.txt"))
    assert r.returncode == 0 and r.stdout == "short\n", r.stderr
    assert os.readlink(mounted.p(".find/leaf.txt/01-leaf.txt")) == "../../short/leaf.txt"
    assert not os.path.lexists(mounted.p(".find/leaf.txt/02-leaf.txt"))
    link = mounted.p(f".find/{fits}/01-{fits}")  # exactly PATH_MAX - 1 bytes: the kernel takes it
    assert len(os.readlink(link)) == 4095
    r = _run("cat", link)
    assert r.returncode == 0 and r.stdout == "fits\n", r.stderr


@pytest.mark.no_indexer
def test_reserved_names_xattr_namespaces_and_stale_marker_through_the_kernel(mounted):
    if shutil.which("setfattr") is None:
        unavailable("setfattr is missing (apt-get install attr)")
    d = mounted.p("d")
    os.mkdir(d)
    with open(os.path.join(d, "f.md"), "w") as f:
        f.write("# F\n")
    # 2. stat says ENOENT, so creating says EACCES (not EEXIST); .find exists, so EEXIST
    for argv in (
        ["stat", d + "/.index"],
        ["mkdir", d + "/.index"],
        ["touch", d + "/.index"],
    ):
        r = _run(*argv)
        assert r.returncode != 0
    assert "No such file or directory" in _run("stat", d + "/.index").stderr
    assert "Permission denied" in _run("mkdir", d + "/.index").stderr
    assert "Permission denied" in _run("touch", d + "/.index").stderr
    assert "File exists" in _run("mkdir", mounted.p(".find")).stderr
    # 3. a name outside the Linux xattr namespaces is refused as on ext4/tmpfs
    r = _run("setfattr", "-n", "bogus.x", "-v", "1", d + "/f.md")
    assert r.returncode != 0 and "Operation not supported" in r.stderr
    with pytest.raises(OSError) as ei:
        os.setxattr(d + "/f.md", "bogus.x", b"1")
    assert ei.value.errno == errno.EOPNOTSUPP
    assert _run("setfattr", "-n", "user.x", "-v", "1", d + "/f.md").returncode == 0
    assert os.getxattr(d + "/f.md", "user.x") == b"1"
    # 4. no indexer and pending records: INDEX.md says so, and stat's size is the bytes cat gives. A new
    # directory shows its INDEX.md (the pending placeholder) once nothing in it changed for SETTLE_S.
    wait_until(lambda: os.path.exists(d + "/INDEX.md"), 10, "the new directory's INDEX.md")
    r = _run("bash", "-c", f"stat -c %s {d}/INDEX.md; cat {d}/INDEX.md")
    size, page = r.stdout.split("\n", 1)
    assert page.split("\n")[1].startswith("> **Stale index**: the indexer is not running;")
    assert f"(run `libraryfs index {mounted.libdir}`)." in page
    assert int(size) == len(page.encode())
    # an indexer takes its lock (here: this process, the same flock): the marker goes within ~1 s
    lock_fd = acquire_lock(mounted.libdir, "indexer.lock")
    try:

        def fresh() -> bool:
            page = read_file(d + "/INDEX.md", "rb")
            return STALE not in page and os.stat(d + "/INDEX.md").st_size == len(page)

        wait_until(fresh, 30, "the stale marker to go once the indexer lock is held")
    finally:
        fcntl.flock(lock_fd, fcntl.LOCK_UN)
        os.close(lock_fd)
