"""What the CLI says when the library's processes or disk are in trouble (issue 14, a new user's trial):

* a mount server stopped with SIGSTOP: ``status``, ``umount`` and ``mount`` hung forever in the kernel
  (they asked its mount for ``statvfs``); now each says so in one line with exit status 9 without touching
  the mount, and ``umount --lazy`` detaches it;
* ``status --json`` on a damaged or unreachable store printed no JSON; now one object on stdout;
* ``mount`` on a full disk said only "No space left on device"; now it names the file.
"""

from __future__ import annotations

import json
import os
import signal
import socket

import pytest
from helpers.disks import fill, tmpfs
from helpers.mount import mount, require_fuse
from helpers.wait import wait_exit, wait_until

from libraryfs.errors import EXIT_DAMAGED, EXIT_STOPPED, EXIT_UNAVAILABLE
from libraryfs.layout import is_libraryfs_mount
from libraryfs.probes import process_state


def one_line(r) -> str:
    """The single line a failing command wrote on stderr (no traceback)."""
    err = r.stderr.strip()
    assert err and "\n" not in err and "Traceback" not in err, r.stderr
    return err


def test_a_stopped_mount_server_is_named_and_its_mount_never_touched(tmp_path, run_cli):
    """The commands' timeouts are only a guard (before, each hung until killed): the assertions are on
    the line and the exit status."""
    lib, mnt = str(tmp_path / "lib"), str(tmp_path / "mnt")
    run_cli("init", lib, check_rc=True)
    with mount(lib, mnt) as m:
        with open(m.p("groceries.md"), "w") as f:
            f.write("# Groceries\n\nTomatoes.\n")
        m.wait_indexed()
        pid = m.server_pid
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_until(lambda: process_state(pid) == "T", 30, "the mount server to stop")
            r = run_cli("find", lib, "groceries.md", timeout=60)  # the store answers; the mount is not asked
            assert r.returncode == 0 and r.stdout.strip() == f"{mnt}/groceries.md", (r.returncode, r.stderr)
            commands = (
                ("status", lib),
                ("status", mnt),
                ("umount", mnt),
                ("umount", lib),
                ("mount", lib, mnt),
            )
            for args in (*commands, ("index", lib)):
                r = run_cli(*args, timeout=60)
                line = one_line(r)
                assert r.returncode == EXIT_STOPPED, (args, r.returncode, line)
                assert f"mount server PID {pid} of {lib} is stopped (SIGSTOP)" in line, line
                assert f"`kill -CONT {pid}`" in line and f"`libraryfs umount --lazy {mnt}`" in line, line
            r = run_cli("status", "--json", mnt, timeout=60)
            doc = json.loads(r.stdout)
            assert r.returncode == EXIT_STOPPED and doc == {
                "error": one_line(r).removeprefix("Error: "),
                "exit_code": EXIT_STOPPED,
                "library": lib,
            }
            assert is_libraryfs_mount(mnt)  # none of them unmounted it
            r = run_cli("umount", "--lazy", mnt, timeout=60)
            assert r.returncode == 0, r.stderr
            assert f"detached {mnt}; its mount server PID {pid} is stopped (SIGSTOP)" in r.stdout
            assert not is_libraryfs_mount(mnt)
            r = run_cli("status", lib, timeout=60)  # detached, but the stopped server still holds the library
            assert r.returncode == EXIT_STOPPED and "still holds the library" in one_line(r)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert wait_exit(pid, 30), "the detached server did not exit once continued"
        assert wait_exit(m.indexer_pid, 30), "umount --lazy left the indexer running"
        m.expect_server_alive = False
    r = run_cli("status", lib, check_rc=True)
    assert "mounted     no" in r.stdout


@pytest.mark.parametrize("damage", ["truncated", "bad meta pages"])
def test_status_json_on_a_damaged_store_is_one_json_object(tmp_path, run_cli, damage):
    lib = str(tmp_path / "lib")
    run_cli("init", lib, check_rc=True)
    data = os.path.join(lib, "store", "data.mdb")
    if damage == "truncated":
        os.truncate(data, os.path.getsize(data) // 2)
    else:
        with open(data, "r+b") as f:
            f.write(os.urandom(2 * 4096))
    for args in (("status", "--json", lib), ("find", "--json", lib, "x")):  # every --json command: one object
        r = run_cli(*args)
        doc = json.loads(r.stdout)
        assert r.returncode == EXIT_DAMAGED, (args, r.returncode, r.stderr)
        assert doc == {
            "error": one_line(r).removeprefix("Error: "),
            "exit_code": EXIT_DAMAGED,
            "library": lib,
        }
        assert "damaged" in doc["error"]


def test_status_json_on_an_unreachable_store_is_one_json_object(tmp_path, run_cli):
    with socket.socket() as s:  # a port nothing listens on: bound, then released
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lib = tmp_path / "lib"
    lib.mkdir(mode=0o700)
    (lib / "config.toml").write_text(f'[store]\nurl = "etcd://127.0.0.1:{port}/gone"\n')
    # the etcd client's bound from the environment (over config.toml's, default 10 s): waited out once
    r = run_cli("status", "--json", str(lib), timeout=60, env={"LIBRARYFS_STORE_TIMEOUT_S": "1.5"})
    doc = json.loads(r.stdout)
    assert r.returncode == EXIT_UNAVAILABLE, (r.returncode, r.stderr)
    assert doc == {
        "error": one_line(r).removeprefix("Error: "),
        "exit_code": EXIT_UNAVAILABLE,
        "library": str(lib),
    }
    assert f"127.0.0.1:{port}" in doc["error"] and "gave up after 1.5 s" in doc["error"]


@pytest.mark.parametrize("indexer", [True, False], ids=["with-indexer", "no-indexer"])
def test_mount_on_a_full_disk_names_the_file(tmp_path, run_cli, indexer):
    """With an indexer the launcher's own lock write fails; without one the server fails and cannot even
    write its log: either way the line names a file of the library."""
    require_fuse()
    mnt = str(tmp_path / "mnt")
    with tmpfs(str(tmp_path / "fs"), "6m") as fs:
        lib = os.path.join(fs, "lib")
        run_cli("init", lib, "--map-size-mb", "1", check_rc=True)
        assert fill(fs)
        r = run_cli("mount", lib, mnt, "--no-llm", *([] if indexer else ["--no-indexer"]), timeout=60)
        line = one_line(r)
        assert r.returncode == 1, (r.returncode, line)
        assert "No space left on device" in line and f"{lib}/" in line, line
        assert not is_libraryfs_mount(mnt)


def _processes_of(lib: str) -> list[str]:
    """Command lines of the running processes whose arguments name the library ``lib`` (its mount server,
    its indexer)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if lib.encode() in argv and any(b"libraryfs.daemon" in a for a in argv):
            out.append(" ".join(a.decode(errors="replace") for a in argv))
    return out


@pytest.mark.parametrize("foreground", [False, True], ids=["background", "foreground"])
def test_mount_that_cannot_write_run_json_is_undone(tmp_path, run_cli, foreground):
    """Trial 1203b finding 1: a library mounted once before (its lock files and log hold a block each, so
    they can be written again; its store's file is allocated to its 1 MiB map) on a disk then filled: the server comes up, the indexer starts, and only
    ``run.json`` cannot be written. Before: exit 1, yet the mount, its server and its indexer stayed, and a
    0-byte ``run.json.tmp`` was left. Now: exit 1 and nothing is left — no mount, no process, no temporary
    file, no mountpoint made for it; a mount once space is back works. ``--foreground`` writes ``run.json``
    before it mounts: it stops the indexer it started (before: a traceback, the indexer left running)."""
    require_fuse()
    mnt = str(tmp_path / "a" / "mnt")
    with tmpfs(str(tmp_path / "fs"), "8m") as fs:
        lib = os.path.join(fs, "lib")
        run_cli("init", lib, "--map-size-mb", "1", check_rc=True)
        run_cli("mount", lib, mnt, "--no-llm", check_rc=True)
        run_cli("umount", mnt, check_rc=True)
        os.rmdir(mnt)
        os.rmdir(os.path.dirname(mnt))
        fd = os.open(os.path.join(lib, "store", "data.mdb"), os.O_RDWR)
        try:  # the store's whole map in blocks already: the server's own writes need no new one
            os.posix_fallocate(fd, 0, 1 << 20)
        finally:
            os.close(fd)
        assert fill(fs)
        r = run_cli("mount", lib, mnt, "--no-llm", *(["--foreground"] if foreground else []), timeout=120)
        try:
            line = one_line(r)
            assert r.returncode == 1, (r.returncode, line)
            assert "No space left on device" in line and "run.json" in line, line
            assert not is_libraryfs_mount(mnt), "the mount is undone"
            wait_until(lambda: not _processes_of(lib), 30, "the mount server and indexer to be gone")
            assert not os.path.lexists(os.path.dirname(mnt)), "the mountpoint (and parent) made is removed"
            assert sorted(n for n in os.listdir(lib) if n.startswith("run.json")) == []
            assert ("nothing was mounted" if foreground else "the mount was undone") in line, line
        finally:  # the code before the fix left all of it
            if is_libraryfs_mount(mnt):
                run_cli("umount", mnt)
        os.unlink(os.path.join(fs, "filler"))
        r = run_cli("mount", lib, mnt, "--no-llm", check_rc=True)
        try:
            assert is_libraryfs_mount(mnt)
        finally:
            run_cli("umount", mnt, check_rc=True)
