"""Faults under real read-write mounts of an etcd library (issue 15 "Faults"), on the session's real 3-member
loopback cluster.

Writer processes (``bench/acked_writers.py``: create, rewrite with fsync, rename, unlink in 4 shared
directories) record every acknowledged change; each test ends with every acknowledged change read back right
through the mounts and ``libraryfs check`` clean, and leaves the cluster with its 3 members healthy (the
session cluster is shared):

- kill -9 of the etcd leader while 3 writers write through a mount: no call fails (a commit whose answer was
  lost is resolved by its commit marker, docs/scale-out.md "Transactions"), writes go on, and the member,
  restarted, rejoins;
- quorum lost (2 of 3 members killed) under a mount: a write and a stat fail with EIO (``Unavailable``, the
  table in docs/scale-out.md) within the client's bound (the library's ``[store] timeout_s``, here
  :data:`QUORUM_TIMEOUT_S`), never hang; once the members return the same mount serves again and its indexer
  indexes again;
- kill -9 of one host's mount server and indexer while writers write through both of two read-write mounts:
  the other mount's writers go on, its standby indexer takes the lease within the TTL and indexes a new file,
  and every change acknowledged on either side is there.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path

import pytest
from helpers.etcd_mounts import acked_writers, finish_writers, indexer_role, mount, start_writers, unmount
from helpers.facility import unavailable
from helpers.mount import fuse_available
from helpers.wait import wait_until

from libraryfs.fs.holder import TTL_S
from libraryfs.layout import proc_mount, wait_exit, wait_until_idle

pytestmark = pytest.mark.etcd

DIRS = 4  #: the writers' shared directories d0 … d3
TIMEOUTS = "1,1,1"  #: kernel cache timeouts (s): a stat a second after the last one reaches the server
#: the quorum-loss test's etcd client bound (``[store] timeout_s``, s): every failing request waits it out, so
#: one shorter than the default (``etcd_gateway.TIMEOUT_S``, 10 s) halves the test; what it proves (EIO
#: within 3 × the bound, never a hang, the same mount serving again) holds for any bound
QUORUM_TIMEOUT_S = 5.0


def _files(mnt: Path) -> int:
    """How many names the writers' directories hold (read through ``mnt``: readdir is never cached)."""
    return sum(len(os.listdir(mnt / f"d{d}")) for d in range(DIRS))


def _leader(url: str) -> str:
    """The client endpoint of the member leading the cluster now."""
    from libraryfs.fs.etcd_backend import EtcdBackend

    b = EtcdBackend.open(url)
    try:
        leaders = [m["client_urls"][0] for m in b.info()["members"] if m.get("leader")]
    finally:
        b.close()
    assert len(leaders) == 1, leaders
    return leaders[0]


def _check_clean(run_cli, lib: Path) -> None:
    r = run_cli("check", str(lib))
    assert r.returncode == 0, r.stdout + r.stderr


def _assert_all_acknowledged(mounts: list[Path], ledgers: list[dict]) -> dict:
    result = acked_writers().verify([str(m) for m in mounts], ledgers)
    assert result["wrong"] == [], result["wrong"][:20]
    assert result["present"] > 0
    return result


def _library(run_cli, url: str, lib: Path) -> None:
    if why := fuse_available():
        unavailable(why)
    run_cli("init", str(lib), "--store", url, check_rc=True)


def test_kill_9_of_the_etcd_leader_under_a_writing_mount(run_cli, etcd_url, etcd_cluster, tmp_path):
    lib, mnt, stop = tmp_path / "lib", tmp_path / "mnt", tmp_path / "stop"
    _library(run_cli, etcd_url, lib)
    info = mount(lib, mnt, timeouts=TIMEOUTS)
    try:
        for d in range(DIRS):
            (mnt / f"d{d}").mkdir()
        procs = start_writers({"w": mnt}, 3, tmp_path, until_file={"w": stop})
        try:
            wait_until(lambda: _files(mnt) >= 15, 120, "the writers under way")
            victim = etcd_cluster.member_of(_leader(etcd_url))  # its death forces an election
            etcd_cluster.kill(victim)
            n = _files(mnt)
            wait_until(lambda: _files(mnt) >= n + 30, 120, "writes going on without the killed leader")
            etcd_cluster.restart(victim)
            wait_until(lambda: etcd_cluster.status()[victim] == "healthy", 60, "the killed member rejoining")
            n = _files(mnt)
            wait_until(lambda: _files(mnt) >= n + 10, 120, "writes going on with the member back")
        finally:
            stop.touch()
            ledgers = finish_writers(procs, tmp_path)
        assert [e for led in ledgers for e in led["errors"]] == []  # no call failed, election included
        result = _assert_all_acknowledged([mnt], ledgers)
        print(f"{sum(led['acked'] for led in ledgers)} changes acknowledged, read back: {result}")
        wait_until_idle(str(lib), 300)
    finally:
        unmount(mnt, info)
        etcd_cluster.restart_all()
    assert set(etcd_cluster.status().values()) == {"healthy"}
    _check_clean(run_cli, lib)


def _timed_errno(fn) -> tuple[int | None, float]:
    """``(errno or None, seconds)`` of calling ``fn``."""
    t0 = time.monotonic()
    try:
        fn()
    except OSError as e:
        return e.errno, time.monotonic() - t0
    return None, time.monotonic() - t0


def _write_new(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, b"# Written during the outage\n")
        os.fsync(fd)
    finally:
        os.close(fd)


def test_an_indexer_started_without_quorum_waits_for_it_and_then_indexes(
    run_cli, etcd_url, etcd_cluster, tmp_path
):
    """An indexer daemon whose etcd store is unavailable at its start (2 of 3 members down) keeps its lock and
    tries again until the quorum is back, then indexes. Before, it exited ("etcd cluster … unavailable"), and a
    mount that had just started it took that for "ended while starting" and started no other: found by a
    suite run under load, where the quorum was lost while the mount's indexer was still starting."""
    import subprocess
    import sys

    from libraryfs.layout import indexer_pid

    lib = tmp_path / "lib"
    _library(run_cli, etcd_url, lib)
    config = lib / "config.toml"
    config.write_text(config.read_text().rstrip() + f"\ntimeout_s = {QUORUM_TIMEOUT_S}\n")
    survivor = etcd_cluster.member_of(_leader(etcd_url))
    indexer = None
    try:
        try:
            for n in (1, 2, 3):
                if n != survivor:
                    etcd_cluster.kill(n)
            err = tmp_path / "indexer.err"  # in the foreground its log goes to stderr
            with open(err, "wb") as f:
                indexer = subprocess.Popen(
                    [sys.executable, "-m", "libraryfs.cli.main", "indexer", str(lib), "--no-llm"],
                    stdout=subprocess.DEVNULL, stderr=f,
                )  # fmt: skip
            wait_until(
                lambda: "the store is unavailable" in err.read_text(errors="replace")
                or indexer.poll() is not None,
                120,
                "the indexer to find the store unavailable",
            )
            assert indexer.poll() is None, err.read_text(errors="replace")[-2000:]
            assert indexer_pid(str(lib)) == indexer.pid  # alive, holding its lock
        finally:
            etcd_cluster.restart_all()
        wait_until_idle(str(lib), 120)  # it opened the store and ran its passes
        assert indexer.poll() is None
        indexer.send_signal(signal.SIGTERM)
        assert indexer.wait(60) == 0
    finally:  # however the test ends, no indexer outlives it
        if indexer is not None and indexer.poll() is None:
            indexer.kill()
            indexer.wait()


def test_quorum_loss_under_a_mount_is_eio_in_bounded_time_and_the_mount_resumes(
    run_cli, etcd_url, etcd_cluster, tmp_path
):
    lib, mnt = tmp_path / "lib", tmp_path / "mnt"
    _library(run_cli, etcd_url, lib)
    config = lib / "config.toml"  # init writes the [store] table last: the bound joins it
    assert config.read_text().rstrip().splitlines()[-1].startswith("url = ")
    config.write_text(config.read_text().rstrip() + f"\ntimeout_s = {QUORUM_TIMEOUT_S}\n")
    info = mount(lib, mnt, timeouts="0,0,0")  # nothing cached in the kernel: every stat asks the server
    try:
        before = b"# Before\n\nWritten before the quorum was lost.\n"
        (mnt / "before.md").write_bytes(before)
        fd = os.open(mnt / "open.md", os.O_WRONLY | os.O_CREAT, 0o644)  # open across the outage
        try:
            survivor = etcd_cluster.member_of(_leader(etcd_url))
            for n in (1, 2, 3):
                if n != survivor:
                    etcd_cluster.kill(n)
            # a FUSE request fails after one store call's bound (failover included), plus the last
            # attempt's overrun; a stat of a name the kernel holds an expired dentry for sends LOOKUP twice
            # (a failed revalidation drops the dentry, then a fresh lookup: Linux fuse_dentry_revalidate)
            for what, fn in (
                ("stat", lambda: os.stat(mnt / "before.md")),
                ("create+write", lambda: _write_new(mnt / "during.md")),
                ("write+fsync of an open file", lambda: (os.write(fd, b"x"), os.fsync(fd))),
                ("readdir", lambda: os.listdir(mnt)),
            ):
                code, took_s = _timed_errno(fn)
                print(f"{what}: errno {code} after {took_s:.1f} s")
                assert code == errno.EIO, f"{what}: {code and errno.errorcode[code]}"
                assert took_s < 3 * QUORUM_TIMEOUT_S, f"{what} took {took_s:.1f} s"
            assert proc_mount(str(mnt)) is not None  # still mounted (its root's getattr fails too)
            etcd_cluster.restart_all()
            # the same mount serves again, without remounting
            assert os.stat(mnt / "before.md").st_size == len(before)
            (mnt / "after.md").write_bytes(b"# After\n\nWritten once the quorum was back.\n")
            os.write(fd, b"after\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        assert (mnt / "after.md").read_bytes() == b"# After\n\nWritten once the quorum was back.\n"
        assert not (mnt / "during.md").exists()
        wait_until(lambda: "after.md" in (mnt / "INDEX.md").read_text(), 120, "after.md's TOC line")
        wait_until_idle(str(lib), 300)
    finally:
        unmount(mnt, info)
        etcd_cluster.restart_all()
    _check_clean(run_cli, lib)


def test_kill_9_of_a_mount_host_while_both_mounts_write(run_cli, etcd_url, tmp_path):
    from libraryfs.daemon import launcher

    a, b, ma, mb = tmp_path / "a", tmp_path / "b", tmp_path / "ma", tmp_path / "mb"
    _library(run_cli, etcd_url, a)
    run_cli("init", str(b), "--store", etcd_url, "--join", check_rc=True)  # another host's directory
    info_a = mount(a, ma, timeouts=TIMEOUTS)
    try:
        pa = info_a["indexer_pid"]
        wait_until(lambda: indexer_role(run_cli, a, pa) == "active", 60, "a's indexer active")
        info_b = mount(b, mb, timeouts=TIMEOUTS)
        try:
            pb = info_b["indexer_pid"]
            wait_until(lambda: indexer_role(run_cli, b, pb) == "standby", 60, "b's indexer standing by")
            ledgers = _kill_host_a(run_cli, info_a, b, pb, ma, mb, tmp_path)
            launcher.clear_stale(str(ma))
            _assert_all_acknowledged([mb], ledgers)
            # host a comes back: its new mount (not alone: b serves) sees every change too
            info_a = mount(a, ma, indexer=False, timeouts=TIMEOUTS)
            result = _assert_all_acknowledged([ma, mb], ledgers)
            print(f"{sum(led['acked'] for led in ledgers)} changes acknowledged, read back: {result}")
            wait_until_idle(str(b), 300)
        finally:
            unmount(mb, info_b)
    finally:
        if proc_mount(str(ma)) is not None:
            unmount(ma, info_a)
    _check_clean(run_cli, b)  # b's indexer is the active one: its term index is whole


def _kill_host_a(run_cli, info_a: dict, b: Path, pb: int, ma: Path, mb: Path, tmp_path: Path) -> list[dict]:
    """Writers on ``ma`` and ``mb``; kill -9 of a's mount server and indexer under them; b's writers go on and
    b's standby indexer takes over and indexes a new file. Returns every writer's ledger."""
    for d in range(DIRS):
        (ma / f"d{d}").mkdir()
    stop = {"a": tmp_path / "stop-a", "b": tmp_path / "stop-b"}
    procs = start_writers({"a": ma, "b": mb}, 2, tmp_path, until_file=stop)
    try:
        wait_until(lambda: _files(mb) >= 20, 120, "the writers under way on both mounts")
        for pid in (info_a["server_pid"], info_a["indexer_pid"]):  # the host dies: both at once
            os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        for pid in (info_a["server_pid"], info_a["indexer_pid"]):
            wait_exit(pid, 10)
        stop["a"].touch()  # a's writers now fail at once (ENOTCONN): end them
        n = _files(mb)
        wait_until(lambda: _files(mb) >= n + 20, 120, "b's writers going on")
        wait_until(lambda: indexer_role(run_cli, b, pb) == "active", TTL_S + 30, "b's indexer taking over")
        print(f"b's indexer (pid {pb}) active {time.monotonic() - killed:.1f} s after the kill")
        (mb / "after-kill.md").write_text("# After the kill\n\nWritten through b once a's host died.\n")
        wait_until(lambda: "after-kill.md" in (mb / "INDEX.md").read_text(), 120, "its TOC line")
    finally:
        for f in stop.values():
            f.touch()
        ledgers = finish_writers(procs, tmp_path)
    assert [e for led in ledgers if led["writer"].startswith("b") for e in led["errors"]] == []  # b went on
    assert all(led["acked"] > 0 for led in ledgers)  # a's writers too had changes acknowledged before
    return ledgers
