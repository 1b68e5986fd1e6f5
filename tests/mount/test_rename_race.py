"""Atomic replacement by rename under concurrency (docs/posix.md C03; POSIX rename(2): "If newpath already
exists, it will be atomically replaced, so that there is no point at which another process attempting to
access newpath will find it missing").

1. ``open`` racing ``mv -f tmp target``: a path walk that found ``target`` just before the rename sends
   OPEN for the replaced file's node. When that file was open, libfuse had hidden it (``.fuse_hidden…``) and
   unlinked the hidden name at its last close, then turned the node id into that hidden path: the view
   answered ENOENT, which the kernel returns to the caller. The replaced file now lingers 0.5 s under its
   hidden name (such an open reads its bytes, as on ext4), and then the name answers ESTALE, so Linux walks
   the path again (``LOOKUP_REVAL``). Before the fix about half to all of the 200 renames made an open of
   the loop below fail (ENOENT).
2. A descriptor open through the mount on a file that an MCP server (another process, which cannot see the
   mount's handles) then replaces keeps reading the old bytes and writing until it is closed: the MCP server
   registers the replaced inode as an orphan, the mount frees it after its last close. Before, the MCP
   server freed it at once: reads gave ENOENT, writes EBADF.

Every test ends with ``libraryfs check`` on the unmounted store (the ``mount`` helper).
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections import Counter

import anyio
import pytest
from helpers.mcp_server import stdio_params
from helpers.mount import mount
from helpers.wait import wait_until

pytestmark = pytest.mark.mount
from mcp import Client  # noqa: E402

RENAMES = 200  #: rename-overs per test (before the fix, 0.5 to 1.2 failed opens of the loop per rename)

#: the writer: RENAMES × (write a temp file, ``mv -f`` it over ``target``) — what editors, git and SQLite do
_RENAMER = 'cd "$1" && for i in $(seq 1 "$2"); do echo "v$i" > "tmp.$i"; mv -f "tmp.$i" target; done'
#: a second reader beside the writer: ``cat target`` until the writer is done; each failure on stderr
_CATTER = 'cd "$1" && while [ ! -e done ]; do cat target > /dev/null || echo "cat failed"; done'


def _race(root: str) -> tuple[int, Counter[str], list[str]]:
    """Run the writer and the ``cat`` loop in ``root`` while this process opens ``target`` (O_APPEND, then
    ``fstat`` and close) in a loop; returns (opens, this loop's failures by errno name, the cat loop's
    failure lines)."""
    with open(os.path.join(root, "target"), "w") as f:
        f.write("v0\n")
    target = os.path.join(root, "target")
    catter = subprocess.Popen(
        ["bash", "-c", _CATTER, "_", root], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    renamer = subprocess.Popen(["bash", "-c", _RENAMER, "_", root, str(RENAMES)])
    opens, failed = 0, Counter()
    try:
        while renamer.poll() is None:
            opens += 1
            try:
                fd = os.open(target, os.O_WRONLY | os.O_APPEND)
                try:
                    os.fstat(fd)
                finally:
                    os.close(fd)
            except OSError as e:
                failed[errno.errorcode.get(e.errno, str(e.errno))] += 1
    finally:
        renamer.wait(timeout=120)
        open(os.path.join(root, "done"), "w").close()
        _out, err = catter.communicate(timeout=60)
    assert renamer.returncode == 0
    return opens, failed, [line for line in err.splitlines() if line.strip()]


@pytest.mark.parametrize("threads", [1, 4])
def test_opens_racing_rename_over_never_find_the_name_missing(libdir, tmp_path, threads):
    with mount(libdir, tmp_path / "mnt", indexer=False, overrides={"mount.threads": threads}) as m:
        os.makedirs(m.p("d"))
        opens, failed, cat_errors = _race(m.p("d"))
        assert opens > 0
        # never ENOENT (or anything else): the name is never missing
        stale = failed.pop("ESTALE", 0) + sum("Stale file handle" in line for line in cat_errors)
        assert not failed, f"{sum(failed.values())} of {opens} opens failed: {dict(failed)}"
        assert all("Stale file handle" in line for line in cat_errors), cat_errors
        # libfuse's own ESTALE for a file replaced while nobody had it open, met by one open and again by
        # the kernel's one retry, is left (docs/posix.md C03: about 1 in 1,000 renames, as before the fix)
        assert stale <= 1, f"{stale} opens or cats failed with ESTALE"
        with open(m.p("d/target")) as f:
            assert f.read() == f"v{RENAMES}\n"
        assert sorted(os.listdir(m.p("d"))) == ["done", "target"]  # no temp or hidden name left


def _mcp_write(libdir: str, path: str, content: str) -> None:
    """``write_file`` over MCP: the real server (``libraryfs mcp``, stdio) through the SDK's client."""

    async def main():
        async with Client(stdio_params(libdir)) as c:
            r = await c.call_tool("write_file", {"path": path, "content": content})
            assert not r.is_error, r.content[0].text

    anyio.run(main)


def _orphans(m) -> set[int]:
    """The orphan register of the mounted library (read in this process, read-only)."""
    st = m.store(readonly=True)
    try:
        with st.read() as t:
            return t.orphans()
    finally:
        st.close()


def test_a_descriptor_open_through_the_mount_outlives_its_replacement_over_mcp(libdir, tmp_path):
    with mount(libdir, tmp_path / "mnt", indexer=False) as m:
        os.makedirs(m.p("notes"))
        with open(m.p("notes/a.md"), "w") as f:
            f.write("old bytes\n")
        old_ino = os.stat(m.p("notes/a.md")).st_ino
        fd = os.open(m.p("notes/a.md"), os.O_RDWR)
        try:
            _mcp_write(m.libdir, "notes/a.md", "new content, longer\n")
            # the open descriptor still reaches the replaced file: its bytes, and writes to it
            assert os.pread(fd, 100, 0) == b"old bytes\n"
            assert os.pwrite(fd, b"OLD", 0) == 3
            assert os.pread(fd, 100, 0) == b"OLD bytes\n"
            os.fsync(fd)
            assert _orphans(m) == {old_ino}  # kept for the mount, which holds it open
            with open(m.p("notes/a.md")) as f:  # the name is the new file's
                assert f.read() == "new content, longer\n"
        finally:
            os.close(fd)
        # freed by the mount's background pass once closed (two passes of 0.2 s)
        wait_until(lambda: not _orphans(m), 30, "the mount to free the replaced file")
        st = m.store(readonly=True)
        try:
            with st.read() as t:
                assert t.inode(old_ino) is None
        finally:
            st.close()
    # the mount helper ran `libraryfs check` on the unmounted store: clean


def test_an_mcp_replacement_with_no_mount_running_frees_the_old_file_at_once(libdir):
    """Nothing can hold the replaced file open: the MCP server frees it (the register stays empty)."""
    from libraryfs.fs.store import Store

    st = Store(str(libdir))
    try:
        from libraryfs.fs.view import LibraryView

        view = LibraryView(st)
        fh = view.create(b"/a.md", 0o644, os.O_WRONLY, os.getuid(), os.getgid())
        view.write(fh, b"old\n", 0)
        view.release(fh)
        with st.read() as t:
            old = t.lookup(1, b"a.md")
    finally:
        st.close()
    _mcp_write(str(libdir), "a.md", "new\n")
    st = Store(str(libdir), readonly=True)
    try:
        with st.read() as t:
            assert t.orphans() == set() and t.inode(old) is None
    finally:
        st.close()
