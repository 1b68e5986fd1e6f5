"""The indexer's signal handlers are safe to re-enter (CI, 2026-12-03: ``libraryfs umount`` said the indexer
was "still shutting down after 10 s"; the mount server and ``umount`` each send it SIGTERM, a moment apart).

CPython runs a Python signal handler between the bytecodes of whatever the main thread runs — another
handler included — and ``threading.Event.set`` holds a plain lock: a stop handler re-entered while the first
was inside ``stop.set()`` waited for that lock forever. These tests hold the event's lock in the calling
thread, as the interrupted handler does, and call the handlers again: they must return at once."""

from __future__ import annotations

import signal
import threading

from libraryfs.daemon.indexerd import IndexerProcess
from libraryfs.fs.store import Store


def _process(tmp_path) -> IndexerProcess:
    Store.create(tmp_path / "lib").close()
    return IndexerProcess(str(tmp_path / "lib"), None, {}, False)


def _returns(fn, *args) -> bool:
    """Whether ``fn(*args)`` returns within 5 s when called with the event's lock held by its own thread."""
    done = threading.Event()

    def body() -> None:
        fn(*args)
        done.set()

    t = threading.Thread(target=body, daemon=True)  # a daemon: a deadlocked one does not hold up pytest
    t.start()
    return done.wait(5.0)


def test_a_second_stop_signal_inside_the_first_returns_at_once(tmp_path):
    proc = _process(tmp_path)

    def inside_first_handler() -> None:
        proc.quit_requested = True  # the first handler's first step (_quit)
        with proc.stop._cond:  # ... and now it is inside stop.set(), holding the event's lock
            proc._on_stop(signal.SIGTERM, None)  # the second SIGTERM's handler, run by CPython right here

    assert _returns(inside_first_handler), "a re-entered SIGTERM handler waited for the event's lock"


def test_a_stop_signal_inside_the_reload_handler_returns_at_once(tmp_path):
    proc = _process(tmp_path)

    def inside_hup_handler() -> None:
        proc.reload_requested = True
        proc._setting_stop = True  # the SIGHUP handler is inside _set_stop → stop.set()
        with proc.stop._cond:
            proc._on_stop(signal.SIGTERM, None)

    assert _returns(inside_hup_handler), "a SIGTERM handler run inside the SIGHUP handler deadlocked"
    assert proc.quit_requested and proc.stop_reason == "stopping (SIGTERM)"
