"""The real mount server and indexer under a real NOTIFY_SOCKET, as systemd runs them.

* READY=1 only once the mountpoint answers; STOPPING=1 on SIGTERM, then the clean flag;
* SIGHUP reloads the settings (RELOADING=1 … READY=1); a broken config file keeps the old settings;
* kill -9, then a restart: the stale mount is cleared, the consistency check runs, data is there;
* a second server on the same library fails with one line naming the holder;
* the indexer: READY=1, WATCHDOG=1 pings, SIGHUP reload, STOPPING=1 on SIGTERM;
* `libraryfs status` while mounted and after a crash; journald log format under JOURNAL_STREAM.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.mount import require_fuse, unmount_and_stop

from libraryfs.fs import schema as S
from libraryfs.fs.check import check, describe
from libraryfs.fs.store import Store
from libraryfs.layout import mount_state

TIMEOUT_S = 30.0


@pytest.fixture(autouse=True)
def need_fuse():
    require_fuse()


class Listener:
    """A datagram socket bound where NOTIFY_SOCKET points: what systemd would receive."""

    def __init__(self, abstract: bool, tmp_path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = f"libraryfs-svc-{os.getpid()}-{id(self)}"
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self.address = str(tmp_path / "notify.sock")
            self.sock.bind(self.address)
        self.messages: list[dict[str, str]] = []

    def next(self, timeout_s: float = TIMEOUT_S) -> dict[str, str]:
        self.sock.settimeout(timeout_s)
        raw = self.sock.recv(65536).decode()
        msg = dict(line.split("=", 1) for line in raw.split("\n") if line)
        self.messages.append(msg)
        return msg

    def wait_for(self, key: str, timeout_s: float = TIMEOUT_S, on_each=None) -> dict[str, str]:
        """Receive until a message carries ``key``; ``on_each(msg)`` runs on every message as it arrives."""
        deadline = time.monotonic() + timeout_s
        while True:
            msg = self.next(max(0.1, deadline - time.monotonic()))
            if on_each:
                on_each(msg)
            if key in msg:
                return msg

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listener(tmp_path):
    lst = Listener(abstract=True, tmp_path=tmp_path)
    yield lst
    lst.close()


@pytest.fixture
def procs(tmp_path):
    """Processes started by a test; killed and their mounts cleared in teardown."""
    started: list[tuple[subprocess.Popen, str | None]] = []
    yield started
    for p, mnt in started:
        if mnt and mount_state(mnt) in ("live", "stale"):
            unmount_and_stop(mnt, [p.pid])
        if p.poll() is None:
            p.kill()
        p.wait(10)


def spawn(
    procs, args: list[str], log: Path, notify_socket: str | None, mnt: str | None = None, **env
) -> subprocess.Popen:
    e = {k: v for k, v in dict(os.environ, **env).items() if v is not None}  # None: remove the variable
    e.pop("NOTIFY_SOCKET", None)
    if notify_socket:
        e["NOTIFY_SOCKET"] = notify_socket
    with open(log, "ab") as f:
        p = subprocess.Popen([sys.executable, *args], stdin=subprocess.DEVNULL, stdout=f, stderr=f, env=e)
    procs.append((p, mnt))
    return p


def mountd(libdir, mnt) -> list[str]:
    return ["-m", "libraryfs.daemon.mountd", str(libdir), str(mnt)]


def clean_flag(libdir) -> bytes | None:
    st = Store(str(libdir), readonly=True)
    try:
        with st.read() as t:
            return t.cfg(S.CFG_CLEAN)
    finally:
        st.close()


def assert_checked_clean(libdir) -> None:
    st = Store(str(libdir))
    try:
        report = check(st)
    finally:
        st.close()
    assert report.problems == [], describe(report)


def live(mnt: str) -> bool:
    return mount_state(mnt) == "live" and os.path.exists(
        os.path.join(mnt, "INDEX.md")
    )  # resolved, not listed


def test_ready_after_mount_answers_stopping_on_sigterm_then_clean(libdir, tmp_path, listener, procs):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "server.log"
    p = spawn(procs, mountd(libdir, mnt), log, listener.address, str(mnt))
    seen_before_ready: list[bool] = []

    def observe(msg):
        if "READY" not in msg:
            seen_before_ready.append(live(str(mnt)))

    ready = listener.wait_for("READY", on_each=observe)
    assert ready["READY"] == "1" and str(mnt) in ready["STATUS"]
    assert live(str(mnt))  # READY means the mountpoint already answers
    assert clean_flag(libdir) == b"0"  # mounted: a crash from here on is detected at the next start
    # a write in progress when the stop comes: the open file is finished, the data kept
    fd = os.open(mnt / "kept.txt", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"written before SIGTERM\n")
    p.send_signal(signal.SIGTERM)
    stopping = listener.wait_for("STOPPING")
    assert stopping["STOPPING"] == "1" and "SIGTERM" in stopping["STATUS"]
    assert p.wait(TIMEOUT_S) == 0
    try:
        os.close(fd)  # the server is gone: the kernel may report ENOTCONN for the flush
    except OSError:
        pass
    assert mount_state(str(mnt)) == "none"  # unmounted
    assert clean_flag(libdir) == b"1"
    assert not [m for m in listener.messages if "READY" in m and m is not ready]
    text = log.read_text()
    assert "SIGTERM received" in text and "clean shutdown" in text
    st = Store(str(libdir), readonly=True)
    try:
        with st.read() as t:
            ino = t.lookup(S.ROOT_INO, b"kept.txt")
            node = t.inode(ino)
            assert t.read_data(ino, 0, node.size, node.size) == b"written before SIGTERM\n"
    finally:
        st.close()
    assert_checked_clean(libdir)
    assert seen_before_ready == [False] * len(seen_before_ready)


def test_sighup_reloads_and_bad_config_keeps_serving(libdir, tmp_path, procs):
    lst = Listener(abstract=False, tmp_path=tmp_path)  # a filesystem-path socket this time
    try:
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        log = tmp_path / "server.log"
        p = spawn(procs, mountd(libdir, mnt), log, lst.address, str(mnt))
        lst.wait_for("READY")
        (Path(libdir) / "config.toml").write_text(
            '[log]\nlevels = "libraryfs.fs.view=DEBUG"\n' "[mount]\nattr_timeout_s = 3\n"
        )
        p.send_signal(signal.SIGHUP)
        assert "RELOADING" in lst.wait_for("RELOADING")
        done = lst.wait_for("READY")
        assert "reloaded" in done["STATUS"]
        (Path(libdir) / "config.toml").write_text('[mount]\nattr_timeout_s = "soon"\n')
        p.send_signal(signal.SIGHUP)
        failed = lst.wait_for("READY")
        assert "reload failed" in failed["STATUS"] and "mount.attr_timeout_s" in failed["STATUS"]
        assert live(str(mnt)) and p.poll() is None
        p.send_signal(signal.SIGINT)
        assert "SIGINT" in lst.wait_for("STOPPING")["STATUS"]
        assert p.wait(TIMEOUT_S) == 0
        text = log.read_text()
        assert (
            "settings reloaded (SIGHUP): mount.attr_timeout_s, log.levels changed; mount.attr_timeout_s "
            "take effect at the next mount" in text
        )
        assert "reload failed, keeping the current settings" in text
        assert clean_flag(libdir) == b"1"
    finally:
        lst.close()


def test_kill9_then_restart_recovers_and_checks(libdir, tmp_path, listener, procs, run_cli):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "server.log"
    p = spawn(procs, mountd(libdir, mnt), log, listener.address, str(mnt))
    listener.wait_for("READY")
    (mnt / "notes").mkdir()
    (mnt / "notes" / "a.md").write_text("survives a crash\n")
    os.kill(p.pid, signal.SIGKILL)
    p.wait(TIMEOUT_S)
    assert mount_state(str(mnt)) == "stale"
    assert clean_flag(libdir) == b"0"
    r = run_cli("status", str(libdir))
    assert r.returncode == 0 and f"server pid {p.pid} died without unmounting" in r.stdout
    assert "stale (ENOTCONN)" in r.stdout
    # what systemd's Restart=on-failure runs: the unit's own command line
    log2 = tmp_path / "server2.log"
    p2 = spawn(
        procs,
        ["-m", "libraryfs.cli.main", "mount", "--foreground", "--no-indexer", str(libdir), str(mnt)],
        log2,
        listener.address,
        str(mnt),
    )
    ready = listener.wait_for("READY")
    assert "READY" in ready and live(str(mnt))
    assert (mnt / "notes" / "a.md").read_text() == "survives a crash\n"
    text = log2.read_text()
    assert re.search(r"unclean shutdown detected: check found \d+ problems?, repaired \d+\n", text), text
    assert "after an unclean stop" in text
    at = {id(m): i for i, m in enumerate(listener.messages)}
    checking = [m for m in listener.messages if "checking the store" in m.get("STATUS", "")]
    assert checking and at[id(checking[-1])] < at[id(ready)]  # the check ran before READY
    r = run_cli("status", str(libdir))
    assert f"mounted     yes at {mnt} (server pid {p2.pid}, up" in r.stdout
    p2.send_signal(signal.SIGTERM)
    listener.wait_for("STOPPING")
    assert p2.wait(TIMEOUT_S) == 0
    assert clean_flag(libdir) == b"1"
    assert_checked_clean(libdir)


def test_bare_server_clears_stale_mount_itself(libdir, tmp_path, listener, procs):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = spawn(procs, mountd(libdir, mnt), tmp_path / "a.log", listener.address, str(mnt))
    listener.wait_for("READY")
    os.kill(p.pid, signal.SIGKILL)
    p.wait(TIMEOUT_S)
    assert mount_state(str(mnt)) == "stale"
    log = tmp_path / "b.log"
    p2 = spawn(procs, mountd(libdir, mnt), log, listener.address, str(mnt))
    listener.wait_for("READY")
    assert "cleared a stale mount" in log.read_text() and live(str(mnt))
    p2.send_signal(signal.SIGTERM)
    assert p2.wait(TIMEOUT_S) == 0 and clean_flag(libdir) == b"1"


def test_second_server_on_same_library_fails_with_one_line(libdir, tmp_path, listener, procs, run_cli):
    mnt, mnt2 = tmp_path / "mnt", tmp_path / "mnt2"
    mnt.mkdir()
    mnt2.mkdir()
    p = spawn(procs, mountd(libdir, mnt), tmp_path / "a.log", listener.address, str(mnt))
    listener.wait_for("READY")
    r = subprocess.run([sys.executable, *mountd(libdir, mnt2)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert (
        r.stderr.strip() == f"libraryfs-mountd: library {libdir} is already mounted at {mnt} by pid {p.pid}"
    )
    r = run_cli("mount", "--foreground", "--no-indexer", str(libdir), str(mnt2))
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and f"already mounted at {mnt} by pid {p.pid}" in r.stderr
    assert mount_state(str(mnt2)) == "none" and live(str(mnt))
    p.send_signal(signal.SIGTERM)
    assert p.wait(TIMEOUT_S) == 0


def test_journald_format_when_stderr_is_the_journal(libdir, tmp_path, listener, procs):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "journal.log"
    log.touch()
    st = os.stat(log)
    p = spawn(
        procs,
        mountd(libdir, mnt),
        log,
        listener.address,
        str(mnt),
        JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}",
        INVOCATION_ID="0123456789abcdef",
        LIBRARYFS_LOG_LEVELS="libraryfs.mount=DEBUG",
    )
    listener.wait_for("READY")
    p.send_signal(signal.SIGTERM)
    assert p.wait(TIMEOUT_S) == 0
    lines = log.read_text().splitlines()
    assert f"<6>libraryfs.mount: mounted {libdir} at {mnt}" in lines
    assert all(ln[:3] in ("<2>", "<3>", "<4>", "<6>", "<7>") or ln.startswith("    ") for ln in lines), lines


def test_indexer_ready_watchdog_reload_stopping(libdir, tmp_path, listener, procs):
    log = tmp_path / "indexer.log"
    p = spawn(
        procs,
        ["-m", "libraryfs.daemon.indexer", str(libdir), "--no-llm"],
        log,
        listener.address,
        WATCHDOG_USEC="100000",
    )
    ready = listener.wait_for("READY")
    assert str(libdir) in ready["STATUS"]
    pings = 0
    while pings < 3:
        pings += "WATCHDOG" in listener.next()
    idle = listener.wait_for("STATUS", on_each=None)
    while not idle.get("STATUS", "").startswith("idle"):
        idle = listener.wait_for("STATUS")
    said = r"idle: TOC generation \d+, \d+ records? pending; last pass \d+ records?, \d+ TOCs? in [\d.]+ s"
    assert re.fullmatch(said, idle["STATUS"]), idle["STATUS"]  # no "record(s)": libraryfs.words.count
    (Path(libdir) / "config.toml").write_text("[index]\ntoc_max_tokens = 500\n")
    p.send_signal(signal.SIGHUP)
    listener.wait_for("RELOADING")
    assert "reloaded" in listener.wait_for("READY")["STATUS"]
    p.send_signal(signal.SIGTERM)
    assert "SIGTERM" in listener.wait_for("STOPPING")["STATUS"]
    assert p.wait(TIMEOUT_S) == 0
    assert "TOC bound 500 tokens" in log.read_text()
    st = Store(str(libdir), readonly=True)
    try:
        with st.read() as t:
            status = t.cfg_json(S.CFG_INDEXER_STATUS)
    finally:
        st.close()
    assert status["state"] == "stopped" and status["toc_max_tokens"] == 500


def test_indexer_second_instance_fails_with_one_line(libdir, tmp_path, listener, procs):
    p = spawn(
        procs,
        ["-m", "libraryfs.daemon.indexer", str(libdir), "--no-llm"],
        tmp_path / "i.log",
        listener.address,
    )
    listener.wait_for("READY")
    r = subprocess.run(
        [sys.executable, "-m", "libraryfs.daemon.indexer", str(libdir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1
    assert r.stderr.strip() == f"libraryfs-indexer: library {libdir} is already indexed by pid {p.pid}"
    p.send_signal(signal.SIGTERM)
    assert p.wait(TIMEOUT_S) == 0


def test_the_indexer_lowers_its_priority_by_default(libdir, tmp_path, listener, procs):
    """``index.nice`` defaults to 10: by READY the indexer has added it to the nice value it started with
    (the suite runs its daemons at its own priority, tests/conftest.py, so the default is tested here)."""
    p = spawn(
        procs,
        ["-m", "libraryfs.daemon.indexer", str(libdir), "--no-llm"],
        tmp_path / "i.log",
        listener.address,
        LIBRARYFS_INDEX_NICE=None,
        LIBRARYFS_INDEXER_NICE=None,
    )
    listener.wait_for("READY")
    with open(f"/proc/{p.pid}/stat") as f:
        nice = int(f.read().rsplit(")", 1)[1].split()[16])  # field 19 of proc(5)
    assert nice == min(19, os.nice(0) + 10)
    p.kill()  # a niced process on a loaded machine may take long to stop; its lock goes with it
    p.wait(TIMEOUT_S)
