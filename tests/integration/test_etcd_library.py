"""A library whose store is on etcd, through the real CLI: ``init --store``, ``--join``, ``status`` (backend,
members, health), ``check``, ``find``, an unreachable cluster (one line, exit status 8), and ``copy`` between
LMDB and etcd in both directions, verified through real mounts (issue 15 "Operations")."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.etcd_mounts import indexer_role
from helpers.facility import unavailable
from helpers.mount import fuse_available
from helpers.wait import wait_until

from libraryfs.errors import EXIT_UNAVAILABLE
from libraryfs.fs import schema as S
from libraryfs.fs.backends import store_url
from libraryfs.fs.store import Store
from libraryfs.layout import pid_alive, wait_exit

pytestmark = pytest.mark.etcd


def _write(lib: Path, path: bytes, data: bytes) -> None:
    """Create a file in a library that is not mounted, through the view (as a mount would)."""
    from libraryfs.fs.view import LibraryView

    st = Store(lib)
    try:
        view = LibraryView(st)
        fh = view.create(path, S.S_IFREG | 0o644, os.O_WRONLY | os.O_CREAT, os.getuid(), os.getgid())
        try:
            view.write(fh, data, 0)
        finally:
            view.release(fh)
    finally:
        st.close()


def _one_line(r) -> str:
    err = r.stderr.strip()
    assert err and "\n" not in err and "Traceback" not in err, r.stderr
    return err


def test_init_store_puts_the_store_on_etcd_and_every_command_opens_it(run_cli, etcd_url, tmp_path):
    lib = tmp_path / "lib"
    r = run_cli("init", str(lib), "--store", etcd_url, check_rc=True)
    assert etcd_url in r.stdout
    assert store_url(lib) == etcd_url and not (lib / "store").exists()
    assert oct(lib.stat().st_mode & 0o777) == "0o700"
    st = Store(lib)  # the one open: etcd, because the library's config names it
    try:
        assert st.backend.name == "etcd"
        with st.read() as t:
            assert t.lookup(S.ROOT_INO, b"inbox") is not None  # init's drop zone is in etcd
    finally:
        st.close()
    facts = json.loads(run_cli("status", str(lib), "--json", check_rc=True).stdout)
    assert facts["backend"] == "etcd" and facts["store_url"] == etcd_url
    members = facts["map"]["members"]
    assert len(members) == 3 and all(m["healthy"] for m in members)
    assert sum(m["leader"] for m in members) == 1
    human = run_cli("status", str(lib), check_rc=True).stdout
    assert f"backend     etcd {etcd_url} (3 of 3 members healthy)" in human
    assert human.count("\nmember      ") == 3 and "leader" in human
    _write(lib, b"/apples.md", b"# Apples\n")
    run_cli("index", str(lib), "--no-llm", check_rc=True)
    assert run_cli("find", str(lib), "apples.md", check_rc=True).stdout.strip() == "/apples.md"
    r = run_cli("check", str(lib))
    assert r.returncode == 0 and "clean" in r.stdout, r.stdout + r.stderr


def test_init_refuses_a_prefix_holding_a_library_and_join_shares_it(run_cli, etcd_url, tmp_path):
    run_cli("init", str(tmp_path / "a"), "--store", etcd_url, check_rc=True)
    r = run_cli("init", str(tmp_path / "b"), "--store", etcd_url)
    assert r.returncode == 1 and "already holds a library" in _one_line(r)
    assert not (tmp_path / "b" / "config.toml").exists()
    run_cli("init", str(tmp_path / "b"), "--store", etcd_url, "--join", check_rc=True)
    _write(tmp_path / "a", b"/shared.md", b"written through a\n")
    run_cli("index", str(tmp_path / "b"), "--no-llm", check_rc=True)  # the other directory sees the write
    assert run_cli("find", str(tmp_path / "b"), "shared.md", check_rc=True).stdout.strip() == "/shared.md"
    r = run_cli("init", str(tmp_path / "c"), "--store", etcd_url.rsplit("/", 1)[0] + "/empty-x", "--join")
    assert r.returncode == 1 and "holds no library" in _one_line(r)


def test_bad_store_urls_fail_in_one_line_before_anything_is_made(run_cli, tmp_path):
    for url in ("etcd://127.0.0.1/p", "http://127.0.0.1:2379/p", "etcd://127.0.0.1:2379/a b"):
        r = run_cli("init", str(tmp_path / "lib"), "--store", url)  # a usage error (README "Exit status")
        last = r.stderr.strip().splitlines()[-1]
        assert r.returncode == 2 and last.startswith("Error: ") and url in last, r.stderr
        assert "Traceback" not in r.stderr
        assert not (tmp_path / "lib").exists()


#: the unreachable library's etcd client bound (``[store] timeout_s``): each command waits it out once
UNREACHABLE_TIMEOUT_S = 2


def _unreachable_library(tmp_path: Path) -> Path:
    """A library directory naming a store on a port nothing listens on (bound, then released), with a
    client bound of :data:`UNREACHABLE_TIMEOUT_S` seconds."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lib = tmp_path / "lib"
    lib.mkdir(mode=0o700)
    (lib / "config.toml").write_text(
        f'[store]\nurl = "etcd://127.0.0.1:{port}/gone"\ntimeout_s = {UNREACHABLE_TIMEOUT_S}\n'
    )
    return lib


def test_an_unreachable_cluster_fails_every_command_in_one_line_with_exit_status_8(run_cli, tmp_path):
    if why := fuse_available():
        unavailable(why)
    lib = _unreachable_library(tmp_path)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    for args in (("mount", str(lib), str(mnt)), ("status", str(lib)), ("check", str(lib))):
        r = run_cli(*args, timeout=60)
        line = _one_line(r)
        assert r.returncode == EXIT_UNAVAILABLE, (args, r.returncode, line)
        assert "unavailable" in line and "127.0.0.1" in line
        assert f"gave up after {UNREACHABLE_TIMEOUT_S} s" in line  # the library's bound, in every process
    assert not os.path.ismount(mnt)


# -- copy between backends, verified through real mounts --------------------------------------------------
def _mount(lib: Path, mnt: Path) -> dict:
    from libraryfs.daemon import launcher

    mnt.mkdir(exist_ok=True)
    return launcher.start(str(lib), str(mnt), indexer=True, timeouts="1,1,1", llm=False)


def _unmount(mnt: Path, info: dict) -> None:
    from libraryfs.daemon import launcher

    launcher.stop(str(mnt))
    for key in ("indexer_pid", "server_pid"):
        wait_exit(info.get(key), 10)
        assert not pid_alive(info.get(key))


def _fill(mnt: Path) -> None:
    """Files of every kind through the mount: nested dirs, a 3-chunk file, a hole, a symlink, a hard link,
    an xattr, an empty file, a non-UTF-8 name."""
    (mnt / "notes" / "deep").mkdir(parents=True)
    (mnt / "notes" / "apples.md").write_text("# Apples\n\nAbout apples.\n")
    (mnt / "notes" / "deep" / "big.bin").write_bytes(os.urandom(150_000))
    with open(mnt / "sparse.bin", "wb") as f:
        f.seek(200_000)
        f.write(b"end")
    (mnt / "empty").write_bytes(b"")
    os.symlink("notes/apples.md", mnt / "link")
    os.link(mnt / "notes" / "apples.md", mnt / "hard.md")
    os.setxattr(mnt / "notes" / "apples.md", "user.colour", b"red")
    with open(os.path.join(os.fsencode(mnt), b"caf\xe9.txt"), "wb") as f:
        f.write(b"latin-1 name")
    os.chmod(mnt / "empty", 0o600)


def _hashes(mnt: Path) -> dict[bytes, tuple]:
    """Path → (mode, size, content SHA-256 or link target, user xattrs) of everything read through a mount,
    the generated INDEX.md files and the control directory left out (they are rendered, not stored)."""
    out: dict[bytes, tuple] = {}
    root = os.fsencode(mnt)
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(b".")]
        for name in dirs + files:
            p = os.path.join(d, name)
            if name == b"INDEX.md":
                continue
            st = os.lstat(p)
            if os.path.islink(p):
                what = os.readlink(p)
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    what = hashlib.sha256(f.read()).hexdigest()
            else:
                what = "dir"
            xattrs = sorted(
                (a, os.getxattr(p, a, follow_symlinks=False))
                for a in os.listxattr(p, follow_symlinks=False)
                if a.startswith("user.")
            )
            out[os.path.relpath(p, root)] = (
                st.st_mode,
                st.st_size if not os.path.isdir(p) else 0,
                what,
                xattrs,
            )
    return out


@pytest.mark.parametrize("direction", ["lmdb-to-etcd", "etcd-to-lmdb"])
def test_copy_between_backends_is_lossless_through_real_mounts(run_cli, etcd_url, tmp_path, direction):
    if why := fuse_available():
        unavailable(why)
    src, dst = tmp_path / "src", tmp_path / "dst"
    to_etcd = direction == "lmdb-to-etcd"
    run_cli("init", str(src), *(() if to_etcd else ("--store", etcd_url)), check_rc=True)
    info = _mount(src, tmp_path / "m1")
    try:
        _fill(tmp_path / "m1")
        before = _hashes(tmp_path / "m1")
    finally:
        _unmount(tmp_path / "m1", info)
    files = sum(1 for mode, *_ in before.values() if not stat.S_ISDIR(mode))
    assert (len(before), files) == (10, 7)  # 3 directories (inbox, notes, notes/deep), 6 files, 1 symlink
    r = run_cli("copy", str(src), str(dst), *(("--store", etcd_url) if to_etcd else ()))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "check clean" in r.stdout and "7 files' content hashes equal" in r.stdout
    assert (store_url(dst) == etcd_url) == to_etcd and (dst / "store").exists() == (not to_etcd)
    assert run_cli("check", str(dst)).returncode == 0
    info = _mount(dst, tmp_path / "m2")
    try:
        after = _hashes(tmp_path / "m2")
    finally:
        _unmount(tmp_path / "m2", info)
    assert after == before


def test_copy_refuses_a_destination_in_use_and_a_prefix_holding_a_library(run_cli, etcd_url, tmp_path):
    run_cli("init", str(tmp_path / "src"), check_rc=True)
    run_cli("init", str(tmp_path / "other"), "--store", etcd_url, check_rc=True)
    r = run_cli("copy", str(tmp_path / "src"), str(tmp_path / "other"))
    assert r.returncode == 1 and "not empty" in _one_line(r)
    r = run_cli("copy", str(tmp_path / "src"), str(tmp_path / "new"), "--store", etcd_url)
    assert r.returncode == 1 and "already holds a library" in _one_line(r)
    assert not (tmp_path / "new").exists()


# -- one mount and one indexer across library directories (hosts) --------------------------------------------
def _two_hosts(run_cli, etcd_url: str, tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """``(a, b, ma, mb)``: library directory ``a`` made with ``init --store``, ``b`` another host's directory
    joined to it (``--join``), and their mountpoint paths (not made). Needs FUSE (skips/fails without)."""
    if why := fuse_available():
        unavailable(why)
    a, b, ma, mb = tmp_path / "a", tmp_path / "b", tmp_path / "ma", tmp_path / "mb"
    run_cli("init", str(a), "--store", etcd_url, check_rc=True)
    run_cli("init", str(b), "--store", etcd_url, "--join", check_rc=True)  # another host's directory
    return a, b, ma, mb


def _with_indexer(run_cli, lib: Path) -> dict | None:
    """``status --json`` of ``lib`` once an indexer holds the library's indexer lease, else None."""
    facts = json.loads(run_cli("status", str(lib), "--json", check_rc=True).stdout)
    return facts if facts["holders"]["indexer"] else None


def test_one_indexer_per_etcd_library_and_its_mounts_listed_from_every_host(run_cli, etcd_url, tmp_path):
    a, b, ma, mb = _two_hosts(run_cli, etcd_url, tmp_path)
    info = _mount(a, ma)
    try:
        # the launcher spawns the indexer without waiting for its lease: wait until it holds it
        facts = wait_until(lambda: _with_indexer(run_cli, b), 60, "a's indexer holding the indexer lease")
        r = run_cli("index", str(b), "--no-llm")
        assert r.returncode == 1 and "already indexed on host" in _one_line(r)
        assert [m["pid"] for m in facts["holders"]["mount"]] == [info["server_pid"]]
        assert facts["holders"]["mount"][0]["mountpoint"] == str(ma)
        assert facts["holders"]["indexer"]["pid"] == info["indexer_pid"]
        assert f"at {ma}" in run_cli("status", str(b), check_rc=True).stdout
        r = run_cli("check", str(b), "--repair")
        assert r.returncode == 1 and "mounted on host" in _one_line(r)
        (ma / "from-a.md").write_text("written on a\n")
    finally:
        _unmount(ma, info)
    info = _mount(b, mb)  # the leases went with a's processes: b mounts, and sees a's write
    try:
        assert (mb / "from-a.md").read_text() == "written on a\n"
    finally:
        _unmount(mb, info)


def test_a_killed_mount_is_waited_out_not_refused(run_cli, etcd_url, tmp_path):
    from libraryfs.daemon import launcher

    a, b, ma, mb = _two_hosts(run_cli, etcd_url, tmp_path)
    ma.mkdir()
    info = launcher.start(str(a), str(ma), indexer=False, timeouts="1,1,1", llm=False)
    os.kill(info["server_pid"], 9)
    wait_exit(info["server_pid"], 10)
    launcher.clear_stale(str(ma))
    info = _mount(b, mb)  # its lease outlives the process by up to the TTL: waited out (same host, pid gone)
    try:
        (mb / "after.md").write_text("ok\n")
    finally:
        _unmount(mb, info)
    assert run_cli("check", str(b)).returncode == 0


def test_a_read_only_mount_drops_its_caches_when_the_writer_host_changes_a_file(run_cli, etcd_url, tmp_path):
    """B caches for 60 s; A's rewrite must reach B's readers through the journal watch, long before that."""
    from libraryfs.daemon import launcher

    a, b, ma, mb = _two_hosts(run_cli, etcd_url, tmp_path)
    info_a = _mount(a, ma)
    try:
        (ma / "f.md").write_bytes(b"version 1\n")
        mb.mkdir()
        info_b = launcher.start(
            str(b), str(mb), read_only=True, indexer=False, timeouts="60,60,60", llm=False
        )
        try:
            fd = os.open(mb / "f.md", os.O_RDONLY)  # B's reader keeps the file open
            try:
                assert os.pread(fd, 100, 0) == b"version 1\n"  # B's page cache and attributes: 60 s
                assert os.stat(mb / "f.md").st_size == 10
                (ma / "f.md").write_bytes(b"version 2, longer\n")
                deadline = time.monotonic() + 30  # half B's cache timeouts: only an invalidation is in time
                while os.stat(mb / "f.md").st_size != 18 or os.pread(fd, 100, 0) != b"version 2, longer\n":
                    assert time.monotonic() < deadline, "B still serves its cached attributes or pages"
                    time.sleep(0.05)
            finally:
                os.close(fd)
            with pytest.raises(OSError):  # and B stays read-only
                (mb / "g.md").write_bytes(b"x")
        finally:
            _unmount(mb, info_b)
    finally:
        _unmount(ma, info_a)


# -- indexer takeover: one active indexer across hosts, the others stand by ---------------------------------
def _indexer(lib: Path) -> subprocess.Popen:
    """A ``libraryfs indexer`` daemon on library directory ``lib`` (no LLM), its output in ``lib/idx.out``."""
    with open(lib / "idx.out", "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "libraryfs.daemon.indexer", str(lib), "--no-llm"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )


def _revoke_indexer_lease(url: str) -> None:
    """Revoke the etcd lease of the library's indexer, as its expiry would end it."""
    from libraryfs.fs.etcd_backend import LEASES, EtcdBackend
    from libraryfs.fs.etcd_gateway import b64

    b = EtcdBackend.open(url)
    try:
        kvs = b.gw.call("kv/range", {"key": b64(b.ks.base + LEASES + b"indexer")}).get("kvs") or []
        assert kvs, "nobody holds the indexer lease"
        b.gw.call("lease/revoke", {"ID": kvs[0]["lease"]})
    finally:
        b.close()


def test_a_standby_indexer_takes_over_when_the_active_one_is_killed(run_cli, etcd_url, tmp_path):
    from libraryfs.daemon import launcher
    from libraryfs.fs.holder import TTL_S

    a, b, _, mb = _two_hosts(run_cli, etcd_url, tmp_path)
    pa = _indexer(a)
    procs = [pa]
    try:
        wait_until(lambda: indexer_role(run_cli, a, pa.pid) == "active", 60, "a's indexer active")
        pb = _indexer(b)
        procs.append(pb)
        wait_until(lambda: indexer_role(run_cli, b, pb.pid) == "standby", 60, "b's indexer standing by")
        assert indexer_role(run_cli, a, pa.pid) == "active"  # exactly one active: b's waits, a's still holds
        assert (
            f"(standby, pid {pb.pid}; takes over from host" in run_cli("status", str(b), check_rc=True).stdout
        )
        mb.mkdir()
        info = launcher.start(str(b), str(mb), indexer=False, timeouts="1,1,1", llm=False)
        try:
            doc = json.loads((mb / ".libraryfs" / "status.json").read_text())
            assert doc["indexer_standby"]["state"] == "standby" and doc["indexer_standby"]["pid"] == pb.pid
            os.kill(pa.pid, signal.SIGKILL)  # stops renewing: its lease ends within the TTL
            pa.wait(10)
            wait_until(
                lambda: indexer_role(run_cli, b, pb.pid) == "active",
                TTL_S + 30,
                "b's indexer taking over (TTL + margin)",
            )
            assert pb.poll() is None
            assert json.loads((mb / ".libraryfs" / "status.json").read_text())["indexer_standby"] is None
            (mb / "after-takeover.md").write_text("# After takeover\n\nWritten once b's indexer is active.\n")
            wait_until(lambda: "after-takeover.md" in (mb / "INDEX.md").read_text(), 60, "its TOC line")
            # an indexer whose lease ends under it (revoked here; a cluster unreachable past the TTL alike)
            # stands by again instead of stopping; whichever indexer takes the lease, exactly one is active
            pa2 = _indexer(a)
            procs.append(pa2)
            wait_until(
                lambda: indexer_role(run_cli, a, pa2.pid) == "standby", 60, "a's new indexer standing by"
            )
            _revoke_indexer_lease(etcd_url)
            wait_until(lambda: "lost the etcd lease" in (b / "idx.out").read_text(), TTL_S + 30, "b's loss")
            wait_until(
                lambda: sorted([indexer_role(run_cli, a, pa2.pid), indexer_role(run_cli, b, pb.pid)])
                == ["active", "standby"],
                TTL_S + 30,
                "one active indexer and one standby again",
            )
            assert pb.poll() is None and pa2.poll() is None
            (mb / "after-loss.md").write_text("# After loss\n\nWritten after the lease was revoked.\n")
            wait_until(lambda: "after-loss.md" in (mb / "INDEX.md").read_text(), 60, "its TOC line")
            # a standby keeps its host's term index (local SQLite) in line with the shared store while the
            # other host indexes: its `find` answers from the content the active one indexed ("revoked" is
            # only in after-loss.md's body; its reconcile is amortised, so waited for)
            standby = a if indexer_role(run_cli, a, pa2.pid) == "standby" else b
            wait_until(
                lambda: "after-loss.md" in run_cli("find", str(standby), "revoked").stdout,
                60,
                "the standby host's find answering from its term index",
            )
            active = b if standby == a else a
        finally:
            _unmount(mb, info)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
            p.wait(20)
    assert all(p.returncode == 0 for p in procs[1:])  # SIGTERM: a clean stop (procs[0] was killed)
    r = run_cli("check", str(active))
    assert r.returncode == 0, r.stdout + r.stderr
