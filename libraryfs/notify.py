"""systemd readiness and watchdog notifications (``sd_notify``), and the journald log format.

The protocol is the documented ``NOTIFY_SOCKET`` one (sd_notify(3), systemd.service(5) ``Type=notify``):
one ``AF_UNIX`` ``SOCK_DGRAM`` datagram per notification, its payload newline-separated ``KEY=VALUE``
assignments (``READY=1``, ``STOPPING=1``, ``RELOADING=1``, ``STATUS=…``, ``WATCHDOG=1``, ``MAINPID=…``).
``NOTIFY_SOCKET`` names a filesystem socket (``/run/…``) or an abstract one (leading ``@``, sent as a
leading NUL byte). Without ``NOTIFY_SOCKET`` every call is a no-op returning False, so the same code runs
under systemd, under ``libraryfs mount`` and in tests. Written here rather than taken from a library: the
protocol is twenty lines, and the PyPI wrappers (``sdnotify``, ``systemd-python``) either swallow errors
or need libsystemd headers to build.

Watchdog (systemd.service(5) ``WatchdogSec=``): systemd exports ``WATCHDOG_USEC`` (and ``WATCHDOG_PID``);
:class:`Watchdog` pings ``WATCHDOG=1`` every half interval, but only while a liveness check passes, so a
wedged loop stops the pings and systemd restarts the unit.

Journal: :func:`under_journal` tells whether stderr is connected to journald (``JOURNAL_STREAM`` names
stderr's device:inode); :class:`JournalFormatter` then prefixes each line with its syslog priority
(``<3>`` … ``<7>``, sd-daemon(3)) and leaves the timestamp to the journal.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable

log = logging.getLogger("libraryfs.notify")

#: syslog priorities of the logging levels (sd-daemon(3) ``SD_ERR`` … ``SD_DEBUG``)
_PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6, logging.DEBUG: 7}


def socket_address(value: str | None = None) -> str | bytes | None:
    """The address to send to: ``NOTIFY_SOCKET`` (or ``value``) as ``sendto`` wants it, or None if unset.

    ``@name`` → ``b"\\0name"`` (Linux abstract namespace); ``/path`` → ``"/path"``. Other forms
    (``vsock:``, relative paths) are not supported and give None (logged once).
    """
    v = os.environ.get("NOTIFY_SOCKET") if value is None else value
    if not v:
        return None
    if v.startswith("@"):
        return b"\0" + v[1:].encode()
    if v.startswith("/"):
        return v
    log.warning("NOTIFY_SOCKET=%r is not a path or an abstract socket; notifications disabled", v)
    return None


#: Seconds a notification waits for room in the supervisor's queue before it is dropped (``WATCHDOG=1``: 0)
FULL_QUEUE_WAIT_S = 1.0
_full_queue = threading.Event()  # a notification was dropped and no send has succeeded since (log once)


def notify(state: str, *, unset_environment: bool = False, wait_s: float | None = None) -> bool:
    """Send one notification ``state`` (e.g. ``"READY=1\\nSTATUS=mounted"``) to systemd.

    Returns True if a datagram was sent, False when ``NOTIFY_SOCKET`` is unset or the send failed (a
    failed send is logged, never raised: the service must not die because its supervisor went away).
    Never blocks for long: a datagram socket's ``sendto`` waits while the receiver's queue is full (on
    Linux ``net.unix.max_dgram_qlen``, 10 unread datagrams), so a supervisor that stops reading — a
    stalled systemd, a test's listener done with its checks — would stop the caller for good (an indexer's
    exit hung on its next ``STATUS=``). The send is non-blocking (``MSG_DONTWAIT``) and retried for
    ``wait_s`` seconds (default :data:`FULL_QUEUE_WAIT_S`; ``WATCHDOG=1`` pings pass 0), then the
    notification is dropped (logged once until a send succeeds again).
    ``unset_environment`` removes ``NOTIFY_SOCKET`` afterwards, so children do not inherit it.
    """
    addr = socket_address()
    if unset_environment:
        os.environ.pop("NOTIFY_SOCKET", None)
    if addr is None:
        return False
    deadline = time.monotonic() + (FULL_QUEUE_WAIT_S if wait_s is None else wait_s)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            while True:
                try:
                    s.sendto(state.encode(), socket.MSG_DONTWAIT, addr)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        if not _full_queue.is_set():
                            _full_queue.set()
                            log.warning(
                                "sd_notify %r dropped: the supervisor's queue is full (it is not reading)",
                                state.split("\n", 1)[0],
                            )
                        return False
                    time.sleep(0.01)
        _full_queue.clear()
        return True
    except OSError as e:
        log.warning("sd_notify %r failed: %s", state.split("\n", 1)[0], e)
        return False


def ready(status: str | None = None) -> bool:
    """``READY=1`` (plus ``STATUS=``): the service is up. Send only once it really answers."""
    return notify("READY=1" + (f"\nSTATUS={status}" if status else ""))


def stopping(status: str | None = None) -> bool:
    """``STOPPING=1``: shutdown has begun (systemd shows the unit as deactivating)."""
    return notify("STOPPING=1" + (f"\nSTATUS={status}" if status else ""))


def reloading(status: str | None = None) -> bool:
    """``RELOADING=1`` with the monotonic timestamp systemd ≥ 253 expects (older ones ignore it)."""
    usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    return notify(f"RELOADING=1\nMONOTONIC_USEC={usec}" + (f"\nSTATUS={status}" if status else ""))


def status(text: str) -> bool:
    """``STATUS=text``: one line shown by ``systemctl status``."""
    return notify("STATUS=" + text.replace("\n", " "))


def watchdog_interval_s() -> float | None:
    """The watchdog timeout systemd asked for (``WATCHDOG_USEC``, seconds), or None if none applies to us.

    None also when ``WATCHDOG_PID`` names another process (the variable leaked to a child).
    """
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec:
        return None
    if pid and pid != str(os.getpid()):
        return None
    try:
        v = int(usec)
    except ValueError:
        return None
    return v / 1e6 if v > 0 else None


class Watchdog(threading.Thread):
    """Pings ``WATCHDOG=1`` every ``interval_s`` while ``is_alive()`` returns True.

    ``interval_s`` defaults to half of :func:`watchdog_interval_s`. When ``is_alive`` returns False the
    pings stop (logged once) and systemd kills and restarts the unit after ``WatchdogSec``; if the check
    recovers first, pings resume. :meth:`start` does nothing without a watchdog timeout.
    """

    def __init__(self, is_alive: Callable[[], bool], interval_s: float | None = None) -> None:
        super().__init__(name="libraryfs-watchdog", daemon=True)
        timeout = watchdog_interval_s()
        self.interval_s = interval_s if interval_s is not None else (timeout / 2 if timeout else None)
        self.is_alive_check = is_alive
        self.stop_event = threading.Event()
        self.pings = 0

    def start(self) -> None:
        """Start pinging (no thread is started when no watchdog is configured)."""
        if self.interval_s:
            super().start()

    def run(self) -> None:
        """Send WATCHDOG=1 every ``interval_s`` seconds while the owner's heartbeat is recent (stall → stop pinging)."""
        stalled = False
        while True:
            try:
                ok = bool(self.is_alive_check())
            except Exception as e:  # a failing check counts as not alive
                log.error("watchdog liveness check raised %s", e)
                ok = False
            if ok:
                if notify("WATCHDOG=1", wait_s=0):  # the next ping comes soon: never wait for room
                    self.pings += 1
                if stalled:
                    log.warning("liveness check passes again; watchdog pings resumed")
                stalled = False
            elif not stalled:
                log.error("liveness check failed: watchdog pings stopped (systemd will restart us)")
                stalled = True
            if self.stop_event.wait(self.interval_s):
                return

    def stop(self) -> None:
        """Stop pinging (call before a clean exit)."""
        self.stop_event.set()


class Heartbeat:
    """Monotonic time of the last sign of progress; :meth:`beat` is cheap and thread-safe enough (a float
    store). ``age_s()`` is seconds since the last beat."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def beat(self) -> None:
        """Record progress now."""
        self.last = time.monotonic()

    def age_s(self) -> float:
        """Seconds since the last :meth:`beat`."""
        return time.monotonic() - self.last


def under_journal() -> bool:
    """True when stderr is connected to journald (``JOURNAL_STREAM`` = stderr's ``device:inode``)."""
    js = os.environ.get("JOURNAL_STREAM")
    if not js:
        return False
    try:
        dev, ino = (int(x) for x in js.split(":", 1))
        st = os.fstat(2)
    except (ValueError, OSError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


def under_systemd() -> bool:
    """True when started by systemd as a unit (``INVOCATION_ID`` is set)."""
    return bool(os.environ.get("INVOCATION_ID"))


class JournalFormatter(logging.Formatter):
    """``<priority>logger: message`` — journald parses the prefix as the priority and adds the time.

    Multi-line messages (tracebacks) keep the prefix on the first line only; journald keeps one stream line
    per entry, so continuation lines are indented to stay readable.
    """

    def __init__(self) -> None:
        super().__init__("%(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """One journald line per record: ``<priority>logger: message`` (sd-daemon(3) prefixes)."""
        text = super().format(record)
        prio = _PRIORITY.get(record.levelno)
        if prio is None:
            prio = (
                7
                if record.levelno < logging.INFO
                else 6
                if record.levelno < logging.WARNING
                else (4 if record.levelno < logging.ERROR else 3)
            )
        return f"<{prio}>" + text.replace("\n", "\n    ")
