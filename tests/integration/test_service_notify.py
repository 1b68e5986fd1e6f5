"""sd_notify over a real datagram socket, the watchdog pinger, and the journald log format."""

from __future__ import annotations

import logging
import os
import socket
import threading

import pytest

from libraryfs import notify


@pytest.fixture
def notify_socket(monkeypatch, tmp_path):
    """A bound datagram socket standing in for systemd; NOTIFY_SOCKET points at it (abstract namespace)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = f"libraryfs-test-{os.getpid()}-{id(s)}"
    s.bind("\0" + name)
    s.settimeout(10)
    monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
    yield s
    s.close()


def test_no_socket_is_a_noop(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify.notify("READY=1") is False
    assert notify.ready() is False


def test_abstract_socket_gets_ready_status_stopping(notify_socket):
    assert notify.ready("mounted at /x")
    assert notify_socket.recv(4096) == b"READY=1\nSTATUS=mounted at /x"
    assert notify.status("two\nlines")
    assert notify_socket.recv(4096) == b"STATUS=two lines"
    assert notify.stopping()
    assert notify_socket.recv(4096) == b"STOPPING=1"
    assert notify.reloading()
    msg = notify_socket.recv(4096).split(b"\n")
    assert msg[0] == b"RELOADING=1" and msg[1].startswith(b"MONOTONIC_USEC=")


def test_path_socket_and_unset_environment(monkeypatch, tmp_path):
    path = str(tmp_path / "n.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.settimeout(10)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    try:
        assert notify.notify("WATCHDOG=1", unset_environment=True)
        assert s.recv(4096) == b"WATCHDOG=1"
        assert "NOTIFY_SOCKET" not in os.environ
        assert notify.notify("READY=1") is False
    finally:
        s.close()


@pytest.mark.expect_log(r"sd_notify '.*' failed")
def test_dead_socket_is_logged_not_raised(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens.sock"))
    with caplog.at_level(logging.WARNING, logger="libraryfs.notify"):
        assert notify.notify("READY=1") is False
    assert "sd_notify" in caplog.text


def test_watchdog_interval_respects_pid(monkeypatch):
    monkeypatch.setenv("WATCHDOG_USEC", "3000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    assert notify.watchdog_interval_s() == 3.0
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert notify.watchdog_interval_s() == 3.0
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))  # leaked to a child: not ours
    assert notify.watchdog_interval_s() is None
    monkeypatch.delenv("WATCHDOG_USEC")
    assert notify.watchdog_interval_s() is None


@pytest.mark.expect_log(r"liveness check failed", r"liveness check passes again")
def test_watchdog_pings_only_while_alive(notify_socket):
    alive = threading.Event()
    alive.set()
    checks = {"n": 0, "after_stall": 0}
    stalled_seen = threading.Event()
    resumed = threading.Event()

    def is_alive() -> bool:
        checks["n"] += 1
        if not alive.is_set():
            checks["after_stall"] += 1
            if checks["after_stall"] >= 4:
                stalled_seen.set()
        return alive.is_set()

    dog = notify.Watchdog(is_alive, interval_s=0.02)
    dog.start()
    try:
        assert notify_socket.recv(64) == b"WATCHDOG=1"
        assert notify_socket.recv(64) == b"WATCHDOG=1"
        alive.clear()
        assert stalled_seen.wait(10)
        # drain what was sent before the stall was noticed, then nothing more may arrive
        notify_socket.settimeout(0.0)
        drained = 0
        try:
            while True:
                notify_socket.recv(64)
                drained += 1
        except BlockingIOError:
            pass
        before = checks["after_stall"]
        while checks["after_stall"] < before + 3:  # three more failing checks, no pings
            threading.Event().wait(0.01)
        with pytest.raises(BlockingIOError):
            notify_socket.recv(64)
        alive.set()
        notify_socket.settimeout(10)
        assert notify_socket.recv(64) == b"WATCHDOG=1"  # pings resume
        resumed.set()
    finally:
        dog.stop()
        dog.join(5)
    assert drained <= 2 and resumed.is_set()


def test_watchdog_does_not_start_without_timeout(monkeypatch):
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    dog = notify.Watchdog(lambda: True)
    dog.start()
    assert not dog.is_alive()


def test_journal_formatter_priorities():
    f = notify.JournalFormatter()

    def line(level: int, msg: str) -> str:
        return f.format(logging.LogRecord("libraryfs.x", level, __file__, 1, msg, None, None))

    assert line(logging.ERROR, "boom") == "<3>libraryfs.x: boom"
    assert line(logging.WARNING, "hm") == "<4>libraryfs.x: hm"
    assert line(logging.INFO, "a\nb") == "<6>libraryfs.x: a\n    b"
    assert line(logging.DEBUG, "d") == "<7>libraryfs.x: d"


def test_under_journal_needs_matching_stream(monkeypatch):
    st = os.fstat(2)
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
    assert notify.under_journal()
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino + 1}")
    assert not notify.under_journal()
    monkeypatch.delenv("JOURNAL_STREAM")
    assert not notify.under_journal()


@pytest.mark.expect_log(r"sd_notify .* dropped: the supervisor's queue is full")
def test_a_supervisor_that_stops_reading_never_blocks_the_sender(notify_socket, monkeypatch):
    """A datagram ``sendto`` waits while the receiver's queue is full (Linux: 10 unread datagrams): an
    indexer's exit once hung on its next ``STATUS=`` after the test's listener stopped reading while the
    watchdog pinged. Past the queue, each notification waits ``FULL_QUEUE_WAIT_S`` at most and returns
    False; the first one the supervisor can take again is sent."""
    monkeypatch.setattr(notify, "FULL_QUEUE_WAIT_S", 0.2)
    sent = [notify.notify("WATCHDOG=1", wait_s=0) for _ in range(40)]
    assert sent[0] is True and sent[-1] is False  # the queue filled up and the pings were dropped
    done = threading.Event()
    results: list[bool] = []
    t = threading.Thread(target=lambda: (results.append(notify.status("still here")), done.set()))
    t.start()
    assert done.wait(30), "notify blocked on a full queue"
    t.join()
    assert results == [False]
    notify_socket.setblocking(False)
    while True:  # the supervisor reads again: the next notification goes through
        try:
            notify_socket.recv(4096)
        except BlockingIOError:
            break
    notify_socket.settimeout(10)
    assert notify.stopping("bye") is True
    assert notify_socket.recv(4096) == b"STOPPING=1\nSTATUS=bye"
