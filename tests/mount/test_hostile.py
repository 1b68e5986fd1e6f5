"""Hostile input (issue 6 item 4): random operation sequences against the mount with a plain directory on
tmpfs as the oracle (hypothesis), fuzzed names/offsets/sizes, a directory of 10⁴ entries, deep paths, and a
library directory that is read-only, full or corrupt (one-line CLI error, never a crash loop).

The property-based part runs a bounded number of examples (``LIBRARYFS_HYPOTHESIS_EXAMPLES``, default 200) so
the file finishes well under a minute on 2 cores. The 10⁵-entry directory is a script::

    PYTHONPATH=tests python tests/mount/test_hostile.py --entries 100000
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

import pytest
from helpers.disks import fill, tmpfs
from helpers.files import read_file
from helpers.mount import mount, require_fuse
from helpers.wait import wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libraryfs.fs import schema as S
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView

EXAMPLES = int(os.environ.get("LIBRARYFS_HYPOTHESIS_EXAMPLES", "200"))
ORACLE_ROOT = "/dev/shm" if os.path.isdir("/dev/shm") else None  # tmpfs


# =====================================================================================================
# property-based: random operation sequences, mount vs tmpfs
# =====================================================================================================

GENERATED = {
    b"INDEX.md",
    b".index",
}  # names the library generates in every directory (EEXIST while shown, else EACCES)
GENERATED_ROOT = {b".libraryfs", b".find"}


def _valid(name: bytes) -> bool:
    return (
        b"/" not in name
        and b"\0" not in name
        and name not in (b".", b"..")
        and name not in GENERATED
        and name not in GENERATED_ROOT
    )


POOL = [b"a", b"b", b"c.md", b"d d", "é".encode(), b"\xff\xfe", b"-x", b"x" * 255]
names = st.one_of(
    st.sampled_from(POOL),
    st.binary(min_size=1, max_size=12).filter(_valid),
    st.integers(250, 260).map(lambda n: b"n" * n),  # around NAME_MAX: 256+ is ENAMETOOLONG on both
)
paths = st.one_of(names.map(lambda n: (n,)), st.tuples(st.sampled_from(POOL[:3]), names))
datas = st.one_of(
    st.binary(max_size=3000),
    st.builds(lambda n, b: b * n, st.integers(0, 140_000), st.sampled_from([b"a", b"\0", b"xyz\n"])),
)
offsets = st.one_of(
    st.integers(0, 4096), st.integers(0, 300_000), st.sampled_from([65535, 65536, 65537, 131072 - 1, 131072])
)
sizes = st.one_of(st.integers(0, 5000), st.integers(0, 200_000))

ops = st.one_of(
    st.tuples(st.just("create"), paths, datas),
    st.tuples(st.just("pwrite"), paths, offsets, datas),
    st.tuples(st.just("append"), paths, datas),
    st.tuples(st.just("truncate"), paths, sizes),
    st.tuples(st.just("read"), paths, offsets, sizes),
    st.tuples(st.just("rename"), paths, paths),
    st.tuples(st.just("unlink"), paths),
    st.tuples(st.just("mkdir"), paths),
    st.tuples(st.just("rmdir"), paths),
    st.tuples(st.just("listdir"), paths),
    st.tuples(st.just("stat"), paths),
    st.tuples(st.just("link"), paths, paths),
    st.tuples(
        st.just("symlink"), st.binary(min_size=1, max_size=300).filter(lambda b: b"\0" not in b), paths
    ),
)


def _apply(root: bytes, op: tuple):
    """Run one operation under ``root``; returns ``("ok", result)`` or ``("err", errno name)``."""

    def P(p: tuple) -> bytes:
        return os.path.join(root, *p)

    kind = op[0]
    try:
        if kind == "create":
            fd = os.open(P(op[1]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, op[2]) if op[2] else None
            finally:
                os.close(fd)
            return "ok", None
        if kind == "pwrite":
            fd = os.open(P(op[1]), os.O_WRONLY)
            try:
                return "ok", os.pwrite(fd, op[3], op[2]) if op[3] else 0
            finally:
                os.close(fd)
        if kind == "append":
            fd = os.open(P(op[1]), os.O_WRONLY | os.O_APPEND)
            try:
                return "ok", os.write(fd, op[2]) if op[2] else 0
            finally:
                os.close(fd)
        if kind == "truncate":
            os.truncate(P(op[1]), op[2])
            return "ok", None
        if kind == "read":
            fd = os.open(P(op[1]), os.O_RDONLY)
            try:
                return "ok", os.pread(fd, op[3], op[2])
            finally:
                os.close(fd)
        if kind == "rename":
            os.rename(P(op[1]), P(op[2]))
            return "ok", None
        if kind == "unlink":
            os.unlink(P(op[1]))
            return "ok", None
        if kind == "mkdir":
            os.mkdir(P(op[1]))
            return "ok", None
        if kind == "rmdir":
            os.rmdir(P(op[1]))
            return "ok", None
        if kind == "listdir":
            return "ok", _listing(P(op[1]), top=False)
        if kind == "stat":
            s = os.lstat(P(op[1]))
            size = None if stat.S_ISDIR(s.st_mode) else s.st_size
            return "ok", (stat.S_IFMT(s.st_mode), stat.S_IMODE(s.st_mode), size, s.st_nlink)
        if kind == "link":
            os.link(P(op[1]), P(op[2]))
            return "ok", None
        if kind == "symlink":
            os.symlink(op[1], P(op[2]))
            return "ok", os.readlink(P(op[2]))
    except OSError as e:
        return "err", errno.errorcode.get(e.errno, str(e.errno))
    raise AssertionError(kind)


def remove_tree(path) -> None:
    """``rm -rf`` that leaves the generated INDEX.md alone (see :func:`test_rm_rf_of_a_section`)."""
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for n in filenames:
            if n not in ("INDEX.md", b"INDEX.md"):
                os.unlink(os.path.join(dirpath, n))
        for n in dirnames:
            if n not in (".index", b".index"):
                if os.path.islink(os.path.join(dirpath, n)):
                    os.unlink(os.path.join(dirpath, n))
                else:
                    os.rmdir(os.path.join(dirpath, n))
    os.rmdir(path)


def _listing(path: bytes, top: bool) -> list[bytes]:
    skip = GENERATED | (GENERATED_ROOT if top else set())
    return sorted(n for n in os.listdir(path) if n not in skip)


def _tree(root: bytes) -> dict:
    """``{relative path: ("d",) | ("f", bytes) | ("l", target)}`` of a whole tree (generated names left out)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in GENERATED]
        rel = os.path.relpath(dirpath, root)
        for n in dirnames:
            out[os.path.join(rel, n)] = ("d",)
        for n in filenames:
            if n in GENERATED:
                continue
            p = os.path.join(dirpath, n)
            if os.path.islink(p):
                out[os.path.join(rel, n)] = ("l", os.readlink(p))
            else:
                with open(p, "rb") as f:
                    out[os.path.join(rel, n)] = ("f", f.read())
    return out


@pytest.fixture(scope="module")
def shared_mount(tmp_path_factory):
    """One mount (with its indexer) for every example; checked clean at the end."""
    require_fuse()
    base = tmp_path_factory.mktemp("hostile")
    libdir, mnt = str(base / "lib"), str(base / "mnt")
    Store.create(libdir, {"toc_max_tokens": 2000}).close()
    oracle = tempfile.mkdtemp(prefix="lfs-oracle-", dir=ORACLE_ROOT)
    with mount(libdir, mnt) as m:
        yield {
            "libdir": libdir,
            "mnt": os.fsencode(mnt),
            "oracle": os.fsencode(oracle),
            "n": [0],
            "mounted": m,
        }
    shutil.rmtree(oracle, ignore_errors=True)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(seq=st.lists(ops, min_size=1, max_size=25))
def test_random_operations_match_tmpfs(shared_mount, seq):
    """Every operation has the same outcome (result or errno) on the mount as on tmpfs; so do the trees."""
    shared_mount["n"][0] += 1
    case = b"ex%05d" % shared_mount["n"][0]
    mroot = os.path.join(shared_mount["mnt"], case)
    oroot = os.path.join(shared_mount["oracle"], case)
    os.mkdir(mroot)
    os.mkdir(oroot)
    try:
        for op in seq:
            want = _apply(oroot, op)
            got = _apply(mroot, op)
            assert (
                got == want
            ), f"{op[0]}{tuple(x if not isinstance(x, bytes) or len(x) < 40 else x[:20] + b'...' for x in op[1:])}: mount {got!r:.200} vs tmpfs {want!r:.200}"
        assert _tree(mroot) == _tree(oroot)
    finally:
        shutil.rmtree(oroot, ignore_errors=True)
        remove_tree(mroot)


def test_random_operations_leave_a_clean_store_and_valid_tocs(shared_mount):
    """After all examples: the indexer caught up with the fuzzed names and every TOC link resolves."""
    from libraryfs.index.toc import links

    mnt = shared_mount["mnt"]
    for k in range(3):  # leave a few fuzzed names behind for the indexer
        d = os.path.join(mnt, b"left%d" % k)
        os.mkdir(d)
        for n in (b"\xff\xfe-bin", b"new\nline", b"[bracket](x)", "é ñ".encode(), b"%41", b"n" * 255):
            with open(os.path.join(d, n), "wb") as f:
                f.write(b"# title " + n + b"\n")
    shared_mount["mounted"].wait_indexed()
    for k in range(3):
        d = os.path.join(mnt, b"left%d" % k)
        page = read_file(os.path.join(d, b"INDEX.md"), "rb")
        targets = set(links(page))
        assert targets == set(os.listdir(d)) - {b"INDEX.md"}, page
        for t in targets:
            assert os.path.exists(os.path.join(d, t))


@pytest.mark.no_indexer
@pytest.mark.parametrize("tool", ["rm -rf", "shutil.rmtree"])
def test_rm_rf_of_a_section(mounted, tool):
    """``rm -rf section`` (cases C05) and ``shutil.rmtree`` remove a directory tree (regression: every
    directory lists the generated ``INDEX.md``, and its ``unlink`` was once EACCES, which stopped both)."""
    os.makedirs(mounted.p("t/a/b"))
    for rel in ("t/y.md", "t/a/b/x.md"):
        with open(mounted.p(rel), "w") as f:
            f.write("x\n")
    if tool == "rm -rf":
        r = subprocess.run(["rm", "-rf", mounted.p("t")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    else:
        shutil.rmtree(mounted.p("t"))
    assert not os.path.exists(mounted.p("t"))


def test_non_utf8_name_does_not_stop_the_indexer(mounted):
    """A file named with bytes that are not UTF-8 is indexed like any other (regression: ``schema.dumps``
    once raised UnicodeEncodeError on the surrogate-escaped name and every later indexer pass failed)."""
    os.makedirs(mounted.p("s"))
    with open(os.path.join(os.fsencode(mounted.p("s")), b"\xff\xfe-latin1.md"), "wb") as f:
        f.write(b"# bytes name\n")
    with open(mounted.p("s/plain.md"), "w") as f:
        f.write("# plain\n")
    mounted.wait_indexed()  # an indexer failing every pass is never idle (the wait's generous default)
    page = read_file(mounted.p("s/INDEX.md"), "rb")
    assert b"plain.md" in page and b"%FF%FE-latin1.md" in page


# =====================================================================================================
# big and deep
# =====================================================================================================


def fill_directory(libdir: str, rel: bytes, n: int) -> float:
    """Create ``n`` empty entries ``f0000000`` … in directory ``rel`` directly in the store (unmounted);
    returns seconds. (Creating them through FUSE costs ~0.8 ms each; the listing is what is tested.)"""
    st_ = Store(libdir)
    t0 = time.monotonic()
    try:
        view = LibraryView(st_)
        view.mkdir(b"/" + rel, 0o755, os.getuid(), os.getgid())
        for i in range(n):
            view.release(view.create(b"/%s/f%07d" % (rel, i), 0o644, os.O_WRONLY, os.getuid(), os.getgid()))
    finally:
        st_.close()
    return time.monotonic() - t0


def big_directory_check(libdir: str, mnt: str, n: int) -> dict:
    """Mount a library whose ``big/`` holds ``n`` entries; list, look up, mutate, and wait for its TOC tree.
    Returns timings in seconds. Raises AssertionError on any wrong answer."""
    from libraryfs.index.toc import links

    out = {"fill_s": fill_directory(libdir, b"big", n)}
    with mount(libdir, mnt) as m:
        big = os.path.join(mnt, "big")
        t0 = time.monotonic()
        names = os.listdir(big)
        out["listdir_s"] = time.monotonic() - t0
        assert len(names) == n  # generated names (INDEX.md, .index) are not listed
        t0 = time.monotonic()
        with os.scandir(big) as it:
            kinds = {e.name: e.is_file(follow_symlinks=False) for e in it}
        out["scandir_s"] = time.monotonic() - t0
        assert sum(kinds.values()) == n
        for i in (0, n // 2, n - 1):
            assert os.stat(os.path.join(big, f"f{i:07d}")).st_size == 0
        with pytest.raises(FileNotFoundError):
            os.stat(os.path.join(big, f"f{n:07d}"))
        os.rename(os.path.join(big, "f0000000"), os.path.join(big, "zz-renamed"))
        os.unlink(os.path.join(big, f"f{n - 1:07d}"))
        with open(os.path.join(big, "aa-new.md"), "w") as f:
            f.write("# a new entry among many\n")
        t0 = time.monotonic()
        m.wait_indexed(timeout_s=max(60.0, n / 200))
        out["index_s"] = time.monotonic() - t0
        # walk the TOC tree: every entry is reachable from INDEX.md within the page bound
        seen: set[bytes] = set()
        todo = [b"INDEX.md"]
        pages = 0
        while todo:
            rel = todo.pop()
            page = read_file(os.path.join(os.fsencode(big), rel), "rb")
            pages += 1
            base = os.path.dirname(rel)
            for t in links(page):
                full = os.path.normpath(os.path.join(base, t)) if base else t
                if full.endswith(b".md") and (full.startswith(b".index/") or full == b"INDEX.md"):
                    if full != b"INDEX.md" and full not in seen:
                        seen.add(full)
                        todo.append(full)
                elif not full.endswith(b".md") or not full.startswith(b".index"):
                    seen.add(full)
        entries = {x for x in seen if not x.startswith(b".index/") and x != b"INDEX.md"}
        want = set(os.listdir(os.fsencode(big))) - {b"INDEX.md", b".index"}
        assert entries == want, (
            len(entries),
            len(want),
            sorted(want - entries)[:5],
            sorted(entries - want)[:5],
        )
        out["toc_pages"] = pages
    return out


def test_directory_of_ten_thousand_entries(tmp_path):
    require_fuse()
    libdir = str(tmp_path / "lib")
    Store.create(libdir, {"toc_max_tokens": 2000}).close()
    out = big_directory_check(libdir, str(tmp_path / "mnt"), 10_000)
    assert out["toc_pages"] > 10  # a tree of bounded pages, not one giant INDEX.md


@pytest.mark.no_indexer
def test_deep_paths_beyond_path_max(mounted):
    """A chain of 40 directories with 255-byte names (≈10 KiB paths, > PATH_MAX) works through dir fds;
    a path longer than PATH_MAX fails with ENAMETOOLONG, never EIO or a crash."""
    name = "d" * 255
    fds = [os.open(mounted.mnt, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for _ in range(40):
            os.mkdir(name, dir_fd=fds[-1])
            fds.append(os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
        fd = os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fds[-1])
        os.write(fd, b"deep\n")
        os.close(fd)
        fd = os.open("leaf.txt", os.O_RDONLY, dir_fd=fds[-1])
        assert os.read(fd, 100) == b"deep\n"
        os.close(fd)
        with pytest.raises(OSError) as e:
            os.stat(os.path.join(mounted.mnt, *([name] * 40), "leaf.txt"))
        assert e.value.errno == errno.ENAMETOOLONG
        with pytest.raises(OSError) as e:
            os.mkdir("x" * 256, dir_fd=fds[-1])
        assert e.value.errno == errno.ENAMETOOLONG
    finally:
        for fd in fds:
            os.close(fd)
    st_ = Store(mounted.libdir, readonly=True)
    try:
        with st_.read() as t:
            leaf_dir = S.ROOT_INO
            for _ in range(40):
                leaf_dir = t.lookup(leaf_dir, name.encode())
            assert len(t.path_of(leaf_dir)) == 40 * 256
    finally:
        st_.close()


def test_deep_tree_is_indexed(mounted):
    """300 nested directories: the indexer renders the deepest TOC (no recursion limit, no cycle alarm)."""
    fds = [os.open(mounted.mnt, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for _ in range(300):
            os.mkdir("s", dir_fd=fds[-1])
            fds.append(os.open("s", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
        fd = os.open("bottom.md", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fds[-1])
        os.write(fd, b"# The bottom of the well\n")
        os.close(fd)
        mounted.wait_indexed(timeout_s=60)
        fd = os.open("INDEX.md", os.O_RDONLY, dir_fd=fds[-1])
        page = os.read(fd, 100_000)
        os.close(fd)
        assert b"bottom.md" in page and b"bottom of the well" in page
    finally:
        for fd in fds:
            os.close(fd)


# =====================================================================================================
# a hostile library directory: read-only, full, corrupt, killed
# =====================================================================================================


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "libraryfs.cli.main", *args], capture_output=True, text=True, timeout=timeout
    )


def assert_one_line_error(r: subprocess.CompletedProcess) -> str:
    """Non-zero exit, no traceback, exactly one line on stderr starting with ``Error:``."""
    assert r.returncode != 0, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    return lines[0]


def _no_server_left(libdir: str) -> None:
    r = subprocess.run(["pgrep", "-f", f"libraryfs.daemon.mountd {libdir}"], capture_output=True, text=True)
    assert r.stdout.strip() == "", f"a mount server is still running: {r.stdout}"


def test_read_only_library_directory_gives_one_line_errors(tmp_path, run_cli):
    require_fuse()
    fs = str(tmp_path / "fs")
    with tmpfs(fs, "32m"):
        libdir = os.path.join(fs, "lib")
        run_cli("init", libdir, check_rc=True)
        assert subprocess.run(["mount", "-o", "remount,ro", fs]).returncode == 0
        mnt = str(tmp_path / "mnt")
        line = assert_one_line_error(run_cli("mount", libdir, mnt))
        assert "read-only" in line.lower() or "permission" in line.lower() or "cannot" in line.lower(), line
        _no_server_left(libdir)
        for args in (("check", libdir), ("index", libdir)):
            r = run_cli(*args)
            if r.returncode != 0:
                assert_one_line_error(r)
        assert_one_line_error(run_cli("init", os.path.join(fs, "other")))


def test_full_disk_is_enospc_and_recovers(tmp_path, run_cli):
    """A library on a 6 MiB filesystem: writes fail with ENOSPC (never EIO/EINVAL), the mount stays up,
    deleting frees room, and the store stays consistent."""
    require_fuse()
    fs = str(tmp_path / "fs")
    with tmpfs(fs, "6m"):
        libdir = os.path.join(fs, "lib")
        run_cli("init", libdir, "--map-size-mb", "1", check_rc=True)
        mnt = str(tmp_path / "mnt")
        with mount(libdir, mnt, indexer=False):
            chunk = os.urandom(256 << 10)
            written = []
            err = None
            for i in range(100):
                p = os.path.join(mnt, f"blob{i}")
                try:
                    with open(p, "wb") as f:
                        f.write(chunk)
                    written.append(p)
                except OSError as e:
                    err = e
                    break
            assert err is not None, "a 6 MiB filesystem accepted 25 MiB"
            assert err.errno in (errno.ENOSPC, errno.EDQUOT), err
            assert os.statvfs(mnt)  # still mounted and answering
            for p in written:
                with open(p, "rb") as f:
                    assert f.read() == chunk
            for p in written[: len(written) // 2 + 1]:
                os.unlink(p)
            with open(os.path.join(mnt, "after.txt"), "wb") as f:
                f.write(b"room again\n")
            assert read_file(os.path.join(mnt, "after.txt"), "rb") == b"room again\n"
        assert fill(fs)
        assert_one_line_error(run_cli("init", os.path.join(fs, "lib2")))


@pytest.mark.parametrize("damage", ["garbage", "truncated", "bad_schema"])
def test_corrupt_library_gives_one_line_errors_and_no_crash_loop(tmp_path, run_cli, damage):
    require_fuse()
    libdir = str(tmp_path / "lib")
    run_cli("init", libdir, check_rc=True)
    data = os.path.join(libdir, "store", "data.mdb")
    if damage == "garbage":
        with open(data, "r+b") as f:
            f.write(os.urandom(16384))
    elif damage == "truncated":
        os.truncate(data, 100)
    else:
        st_ = Store(libdir)
        st_.run_write(lambda t: t.put_cfg(S.CFG_SCHEMA_VERSION, S.u64(999)))
        st_.close()
    mnt = str(tmp_path / "mnt")
    assert_one_line_error(run_cli("mount", libdir, mnt))
    _no_server_left(libdir)
    assert not os.path.ismount(mnt)
    assert not os.path.exists(mnt) or os.listdir(mnt) == []  # not left as a stale mount
    for args in (("status", libdir), ("check", libdir), ("index", libdir)):
        assert_one_line_error(run_cli(*args))


def test_corrupt_records_are_reported_by_check_not_crashed_on(libdir, run_cli):
    """A bad inode record and a dangling dirent: ``check`` names both and exits 1; ``--repair`` fixes them."""
    st_ = Store(libdir)

    def damage(t):
        t.kv.put(S.DB_INODES, S.u64(77), b"short")
        t.add_dirent(S.ROOT_INO, b"ghost", 9999, False)
        t.put_cfg(S.CFG_NEXT_INO, S.u64(100))

    st_.run_write(damage)
    st_.close()
    r = run_cli("check", str(libdir))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "I0" in r.stdout and "I2" in r.stdout
    r = run_cli("check", str(libdir), "--repair")
    assert "Traceback" not in r.stderr
    run_cli("check", str(libdir), check_rc=True)


@pytest.mark.no_indexer
def test_remount_after_server_killed(mounted, run_cli):
    """kill -9 of the mount server leaves ENOTCONN; ``libraryfs mount`` again clears it and serves.

    Regression: once the kernel's cached attributes of the mount root had expired, ``launcher.preflight``
    saw ``os.path.exists(mountpoint)`` False (ENOTCONN) and failed in ``os.makedirs`` ("Error: File
    exists") before probing for the stale mount (bench/crash_run.py counts restarts that hit it)."""
    with open(mounted.p("kept.txt"), "w") as f:
        f.write("kept\n")
    os.kill(mounted.server_pid, signal.SIGKILL)
    # the regression needs the kernel's cached attributes of the mount root expired: stat is ENOTCONN then
    wait_until(lambda: not os.path.exists(mounted.mnt), 15, "stat of the dead mount's root to fail")
    r = run_cli("mount", mounted.libdir, mounted.mnt, "--no-indexer")
    assert r.returncode == 0, r.stderr
    from libraryfs.layout import read_run

    mounted.info["server_pid"] = read_run(mounted.libdir)["server_pid"]
    assert read_file(mounted.p("kept.txt")) == "kept\n"


# =====================================================================================================
# the 10⁵ script
# =====================================================================================================


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(description="A directory of N entries through a real mount.")
    ap.add_argument("--entries", type=int, default=100_000)
    a = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="lfs-big-")
    try:
        libdir = os.path.join(work, "lib")
        Store.create(libdir, {"toc_max_tokens": 2000}).close()
        out = big_directory_check(libdir, os.path.join(work, "mnt"), a.entries)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["entries"] = a.entries
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def test_markup_names_render_as_themselves_on_every_generated_page(mounted):
    """Names that are Markdown markup (raw HTML with an event handler, backticks, ``*bold*``, ``__init__``,
    an entity) through a real mount: the directory's TOC, the master page, the subject index and the name
    catalogue render in CommonMark (markdown-it-py) with no raw HTML but their header comment, no code or
    emphasis, each link's text the name itself; and every link opens on the mount."""
    from helpers.markdown import check_rendered

    names = [
        b"<img src=x onerror=alert(1)>.md",
        b"`code`.md",
        b"*bold*.md",
        b"__init__.py",
        b"a._b_.md",
        b"&lt;script&gt;.md",
        b"ends in backslash\\",
        b"#heading.md",
    ]
    d = os.fsencode(mounted.p("odd"))
    os.makedirs(d)
    for k, n in enumerate(names):
        with open(os.path.join(d, n), "wb") as f:
            f.write(b"# <b>Title</b> `x` *y*\n\nThe marmalade recipe number %d.\n" % k)
    with open(os.path.join(d, b"defs.rst"), "wb") as f:
        f.write(
            b"Defs\n====\n\n.. function:: __init__(self)\n\n   Make one.\n\n.. class:: _Private\n\n   Hidden.\n"
        )
    mounted.wait_indexed()
    pages = ["odd/INDEX.md", "INDEX.md", ".subjects/INDEX.md", ".catalogue/INDEX.md"]
    for rel in pages:
        page = read_file(mounted.p(rel), "rb")
        targets = check_rendered(page, set(names), code=frozenset({"__init__"}))  # the catalogue's intro
        assert targets, rel
        base = os.path.dirname(os.fsencode(mounted.p(rel)))
        for t in targets:
            assert os.path.lexists(os.path.join(base, t)), (rel, t)
    odd = check_rendered(read_file(mounted.p("odd/INDEX.md"), "rb"), set(names))
    assert set(names) <= odd
