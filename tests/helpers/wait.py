"""Waiting on conditions, never on sleeps: the one polling loop of the test suite.

* :func:`wait_until` — poll a predicate until it holds; on timeout fail with what was awaited, how long,
  and the last value (or exception) seen;
* :func:`wait_idle` — until a library's indexer has consumed the journal and is idle;
* :func:`wait_exit` — until a process is gone (:func:`libraryfs.layout.pid_alive`, re-exported here: a
  zombie child counts as gone).

Timeouts are generous on purpose (the suite runs on a loaded 2-core machine): a timeout is a failure to
investigate, never a number to raise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from libraryfs.layout import pid_alive  # noqa: F401  (re-exported: the one liveness test)

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout_s: float = 30.0,
    what: str = "the condition",
    *,
    ignore: tuple[type[BaseException], ...] = (),
    poll_s: float = 0.01,
    max_poll_s: float = 0.1,
) -> T:
    """Call ``predicate()`` until it returns a truthy value; return that value.

    Polls from every ``poll_s`` seconds, backing off to every ``max_poll_s``. Exceptions of the types in
    ``ignore`` count as "not yet" (e.g. ``FileNotFoundError`` while a file is being created); any other
    exception propagates. Raises ``AssertionError`` after ``timeout_s`` seconds: "timed out after N s
    waiting for <what> (last value: …)".
    """
    t0 = time.monotonic()
    last: Any = None
    while True:
        try:
            last = predicate()
        except ignore as e:
            last = e
        else:
            if last:
                return last
        waited = time.monotonic() - t0
        if waited >= timeout_s:
            raise AssertionError(
                f"timed out after {waited:.1f} s waiting for {what} (last value: {last!r:.300})"
            )
        time.sleep(min(poll_s, max(0.0, timeout_s - waited)))
        poll_s = min(max_poll_s, poll_s * 1.5)


def wait_exit(pid: int | None, timeout_s: float = 10.0) -> bool:
    """Wait until process ``pid`` is gone (:func:`libraryfs.layout.pid_alive`); True if it went within
    ``timeout_s`` (never raises)."""
    try:
        wait_until(lambda: not pid_alive(pid), timeout_s, f"process {pid} to exit")
    except AssertionError:
        return False
    return True


def wait_idle(libdir: str, timeout_s: float = 60.0) -> None:
    """Wait until the indexer of ``libdir`` has consumed every journal record, run its hooks and says it is
    idle (:func:`libraryfs.layout.index_backlog`, the condition of ``libraryfs.layout.wait_until_idle``).

    Raises ``AssertionError`` naming the pending records and the indexer's state on timeout.
    """
    from libraryfs.fs.store import Store
    from libraryfs.layout import index_backlog

    st = Store(libdir, readonly=True)
    last: list[dict] = [{}]

    def idle() -> bool:
        with st.read() as t:
            last[0] = index_backlog(t)
        return last[0]["pending_records"] == 0 and last[0]["state"] == "idle"

    try:
        wait_until(idle, timeout_s, f"the indexer of {libdir} to be idle")
    except AssertionError as e:
        raise AssertionError(f"{e}; backlog {last[0]}") from None
    finally:
        st.close()
