"""The indexer process: ``libraryfs indexer LIBDIR`` (also ``python -m libraryfs.daemon.indexer LIBDIR``).

:func:`run_process` is the whole process; the click command in :mod:`libraryfs.cli.mount_cmds` parses the
flags and prints its errors. Order: settings (flags > ``LIBRARYFS_*`` environment > ``<libdir>/config.toml``
> defaults, :mod:`libraryfs.settings`) → logging → background priority (:func:`lower_priority`:
``index.nice``, ``SCHED_BATCH`` and the session's autogroup; the mount server and the user's programs win the
CPU when they want it) → ``indexer.lock`` (:func:`libraryfs.layout.acquire_lock`: one indexer per
library) → store → builder (the LLM where one is configured) → the features' hooks
(:func:`libraryfs.hooks.indexer_hooks`) → loop.

Under systemd: ``READY=1`` once the store is open and the lock is held, a ``STATUS=`` line after each pass,
``WATCHDOG=1`` every ``WatchdogSec/2`` while the loop makes progress — the :class:`~libraryfs.daemon.indexer.
Indexer` calls its ``heartbeat`` at every step of a pass and of its idle loop; with none for
``index.stall_s`` seconds the pings stop and systemd restarts the process. ``STOPPING=1`` on SIGTERM/SIGINT:
the lock file then says ``<pid> stopping`` (:func:`libraryfs.layout.mark_lock_stopping`: a new mount starts
a fresh indexer once this one has exited instead of adopting it) and the pass in progress ends at its next
entry, builder batch or TOC, without committing its cursor (:mod:`libraryfs.daemon.indexer`). SIGHUP reloads the settings and the builder (the LLM endpoint)
between passes; a new TOC bound C re-renders every TOC.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Mapping
from typing import Any

from libraryfs import notify
from libraryfs.daemon.entries import PassStopped
from libraryfs.daemon.indexer import Indexer, PassReport, needs_full_pass
from libraryfs.errors import LibraryError, Unavailable
from libraryfs.fs import schema as S
from libraryfs.fs.holder import Holder, clear_standby, describe_holder, write_standby
from libraryfs.fs.store import Store
from libraryfs.hooks import HookContext, indexer_hooks
from libraryfs.index import termindex
from libraryfs.index.jobs import DeterministicBuilder, IndexBuilder
from libraryfs.index.toc import DEFAULT_MAX_TOKENS
from libraryfs.layout import (
    INDEXER_LOCK,
    adopt_lock,
    mark_lock_stopping,
    reset_signal_mask,
    take_tie,
    term_index_path,
    wait_untied,
)
from libraryfs.settings import PROCESS_TABLES, configure_logging, load_settings
from libraryfs.words import count

log = logging.getLogger("libraryfs.indexer")


class StandbyTerms:
    """This host's term index (``<libdir>/terms.sqlite``, :mod:`libraryfs.index.termindex`) kept in line with a
    shared store while another host's indexer is active: the finder (``libraryfs find``, ``.find/``, MCP) of a
    standby host then ranks as the active one's does, and ``check`` there finds no rows out of line.

    The active indexer trims the journal after each pass, so a standby cannot follow it record by record; it
    watches the TOC generation (``CFG_TOC_GEN``, + 1 per pass) instead and, when it moved, reconciles every row
    with the store (:func:`~libraryfs.index.termindex.reconcile`: one read of every inode, entries re-read only
    where they changed). Amortised: the next reconcile waits 10× the last one's duration (at most a tenth of
    this process's time). A failure is logged in one line and retried at a later poll (derived data)."""

    DUTY_FACTOR = 10.0  #: wait this many times the last reconcile's duration before the next

    def __init__(self, store: Store, libdir: str) -> None:
        self.store, self.path = store, term_index_path(libdir)
        self.db: Any = None
        self.gen: int | None = None
        self.next_at = 0.0  # time.monotonic() of the earliest next reconcile

    def poll(self) -> None:
        """Reconcile when the TOC generation moved since the last one and the duty bound allows."""
        if time.monotonic() < self.next_at:
            return
        t0 = time.monotonic()
        try:
            with self.store.read() as t:
                gen = t.cfg_int(S.CFG_TOC_GEN)
            if gen == self.gen:
                return
            self.db, fixed = termindex.upkeep(self.store, self.path, self.db, (), True)
            self.gen = gen
            if fixed:
                log.info("standby: term index: %d rows brought in line with the store", fixed)
        except Exception as e:  # derived data: a later poll retries
            log.warning("standby: term index not updated: %s: %s", type(e).__name__, e)
        finally:
            self.next_at = time.monotonic() + self.DUTY_FACTOR * (time.monotonic() - t0)

    def close(self) -> None:
        """Close the SQLite connection (the active indexer opens its own)."""
        if self.db is not None:
            self.db.close()
            self.db = None


UNAVAILABLE_RETRY_MAX_S = 10.0  #: longest wait between two tries of a store unavailable at start, seconds

AUTOGROUP = "/proc/self/autogroup"  #: this process's autogroup and its nice value (sched(7))


def lower_priority(increment: int) -> dict:
    """Make this process background work for the CPU scheduler, by ``increment`` (``index.nice``, 0–19;
    0 or less: only ``nice(2)`` is applied, as before). Returns what it did: ``{"nice": the new nice value,
    "policy": "batch" | None, "autogroup_nice": int | None}`` (None: not changed), plus ``nice_before`` and
    ``autogroup_before`` (the values before, for :func:`restore_priority`). Never raises: each step that the
    kernel refuses is left out.

    Three steps, all from the calling thread before the process starts any thread (threads inherit them;
    on Linux nice and policy are per thread):

    1. ``nice(increment)``;
    2. ``SCHED_BATCH``: a CPU-bound non-interactive task, which never preempts a task that wakes (the mount
       server answering the kernel, the user's ``tar``); its share still follows its nice value, so it is
       never starved — unlike ``SCHED_IDLE``, which gets the CPU only when nothing else wants it and could
       wait forever on a busy machine;
    3. the **autogroup** (``/proc/self/autogroup``, sched(7)): with ``kernel.sched_autogroup_enabled`` the
       CFS shares CPU time between *sessions* first and nice values count only inside a session. The
       launcher starts the indexer in a session of its own, so its nice value alone changed nothing: its
       session competed with the user's shell and the mount server's session as an equal (docs/benchmarks.md
       "The indexer's share of a bulk write"). The session's own nice value is set
       to the process's, only when this process leads its session (it then holds the session's only
       autogroup members: itself and what it starts) — a ``libraryfs index`` run from a shell must not
       lower the shell's whole session.
    """
    done: dict = {"nice": None, "policy": None, "autogroup_nice": None}
    try:
        before = os.nice(0)
        done["nice"] = os.nice(increment)
    except OSError:
        return done
    done["nice_before"] = before
    if increment <= 0:
        return done
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        done["policy"] = "batch"
    except (OSError, AttributeError):  # not Linux, or refused
        pass
    if os.getsid(0) == os.getpid():
        try:
            with open(AUTOGROUP) as f:  # "/autogroup-123 nice 0"
                current = int(f.read().split()[-1])
            target = min(19, max(current, done["nice"]))
            if target > current:
                with open(AUTOGROUP, "w") as f:
                    f.write(f"{target}\n")
            done["autogroup_nice"], done["autogroup_before"] = target, current
        # no autogroups in this kernel, the default autogroup (the file is empty), or refused
        except (OSError, ValueError, IndexError):
            pass
    return done


def restore_priority(done: dict) -> dict:
    """Undo :func:`lower_priority` (``done``: what it returned) for the way out: shutting down is not
    background work — ``umount`` waits for it. At nice +10 and SCHED_BATCH on a busy machine the indexer
    got a few per cent of a CPU and finished its last item after ``umount``'s 10 s (exit 10, "still shutting
    down"). Every thread of the process goes back to ``SCHED_OTHER`` and to the nice value before (lowering
    a nice value needs CAP_SYS_NICE or RLIMIT_NICE, setpriority(2): without them the threads keep theirs);
    the session's autogroup goes back to its value before (a value ≥ 0 needs no privilege, sched(7); the
    kernel may refuse a second change within seconds, EAGAIN). Returns ``{"threads": threads whose policy
    and nice value were restored, "autogroup_nice": the value written or None}``. Never raises."""
    out: dict = {"threads": 0, "autogroup_nice": None}
    if done.get("nice") is None:
        return out
    base = done.get("nice_before", 0)
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            if done.get("policy") == "batch":
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
            os.setpriority(os.PRIO_PROCESS, tid, base)
            out["threads"] += 1
        except (OSError, AttributeError):  # a thread that has exited, or not allowed
            pass
    before = done.get("autogroup_before")
    if done.get("autogroup_nice") is not None and before is not None:
        try:
            with open(AUTOGROUP, "w") as f:
                f.write(f"{before}\n")
            out["autogroup_nice"] = before
        except OSError:
            pass
    return out


def make_builder(
    libdir: str, store: Store, use_llm: bool | None = None, overrides: dict | None = None
) -> IndexBuilder:
    """The builder for a library: the LLM builder when an endpoint is configured (and ``use_llm`` is not
    False), else the deterministic one. ``overrides``: LLM flag values by field. ``use_llm=True`` without an
    endpoint raises :class:`~libraryfs.errors.LibraryError`; a bad LLM setting raises
    :class:`~libraryfs.settings.SettingsError`."""
    if use_llm is False:
        return DeterministicBuilder()
    from libraryfs.llm import make_builder as llm_make_builder

    builder = llm_make_builder(libdir, store, overrides)
    if use_llm and isinstance(builder, DeterministicBuilder):
        raise LibraryError(
            "no LLM endpoint configured (set LIBRARYFS_LLM_BASE_URL and LIBRARYFS_LLM_MODEL; see docs/llm.md)"
        )
    return builder


def _close_builder(builder: IndexBuilder) -> None:
    close = getattr(builder, "close", None)
    if close is not None:
        close()


class IndexerProcess:
    """One indexer process over ``libdir`` (see module doc). ``overrides``: flag values by dotted setting
    key (``index.*``, ``log.*``, ``llm.*``); ``use_llm``: ``--llm``/``--no-llm`` (None: as configured)."""

    def __init__(
        self, libdir: str, mountpoint: str | None, overrides: Mapping[str, Any], use_llm: bool | None
    ) -> None:
        self.libdir = os.path.abspath(libdir)
        self.mountpoint = mountpoint
        self.process_overrides = {k: v for k, v in overrides.items() if not k.startswith("llm.")}
        self.llm_overrides = {k.split(".", 1)[1]: v for k, v in overrides.items() if k.startswith("llm.")}
        self.use_llm = use_llm
        self.settings = load_settings(self.libdir, self.process_overrides, tables=PROCESS_TABLES)
        self.stop = threading.Event()
        self.reload_requested = False
        self.quit_requested = False
        self._setting_stop = False  #: a handler is inside ``stop.set()`` (:meth:`_set_stop`)
        self.stop_reason: str | None = (
            None  #: why it stops (``stopping (SIGTERM)``, …): logged on the way out
        )
        self.lease_lost = False  # set by the lease's renewal thread when the lease expired under us
        self.beat = notify.Heartbeat()
        self.lock_fd: int | None = None
        self.store: Store | None = None
        self.holder: Holder | None = None
        self.indexer: Indexer | None = None
        self.priority: dict = {}  #: what :func:`lower_priority` did (set by :meth:`open`)

    def open(self, standby: bool = False) -> Indexer | None:
        """Lock, store, lease, builder, hooks; returns the :class:`Indexer`. Raises LibraryError (nothing
        held). ``standby``: when another host's indexer holds the etcd lease, wait for it (:meth:`_standby`)
        instead of raising :class:`~libraryfs.errors.Busy`; None when stopped (SIGTERM) while waiting.

        A daemon (``standby``) that finds its store unavailable (:class:`~libraryfs.errors.Unavailable`: an
        etcd cluster without quorum) keeps its lock and tries again, every 0.5 s doubling up to
        :data:`UNAVAILABLE_RETRY_MAX_S`, until the store answers or a SIGTERM/SIGINT stops it (None), as the
        mount server resumes once the quorum is back. Before, it exited, and a mount that had just started it
        took that for "ended while starting" and never started another: its TOCs stopped following writes. One
        pass (``libraryfs index``) reports the error instead."""
        configure_logging(self.settings)
        self.priority = lower_priority(self.settings["index"]["nice"])
        log.debug("priority: %s", self.priority)
        self.lock_fd = adopt_lock(self.libdir, INDEXER_LOCK)  # the launcher may have taken it for us
        wait_s = 0.5
        while True:
            try:
                return self._open_store(standby)
            except Unavailable as e:
                self._close_opened()
                if not standby:
                    self.close()
                    raise
                if wait_s == 0.5:  # once: from then on it waits quietly
                    signal.signal(signal.SIGTERM, self._on_stop)
                    signal.signal(signal.SIGINT, self._on_stop)
                    log.warning("the store is unavailable (%s); trying again until it answers", e)
                if self.stop.wait(wait_s):
                    self.close()
                    return None
                wait_s = min(2 * wait_s, UNAVAILABLE_RETRY_MAX_S)

    def _open_store(self, standby: bool) -> Indexer | None:
        """:meth:`open` once the lock is held: store, lease, builder, hooks."""
        try:
            self.store = Store(self.libdir)
            # a shared (etcd) store: one indexer across hosts; losing the lease stops this one
            facts = {"libdir": self.libdir}
            if standby:
                self.holder = self._standby(facts)
                if self.stop.is_set():
                    self.close()
                    return None
            else:
                self.holder = Holder.take(
                    self.store.backend, "indexer", facts, "indexed", on_lost=self._lost_lease
                )
            builder = make_builder(self.libdir, self.store, self.use_llm, self.llm_overrides or None)
            ctx = HookContext(self.libdir, self.store, self.mountpoint, self.beat.beat)
            self.indexer = Indexer(
                self.libdir,
                builder=builder,
                mountpoint=self.mountpoint,
                store=self.store,
                toc_max_tokens=self.settings["index"]["toc_max_tokens"],
                hooks=indexer_hooks(ctx),
                heartbeat=self.beat.beat,
            )
        except Unavailable:
            raise  # the caller closes what was opened and tries again
        except BaseException:
            self.close()
            raise
        return self.indexer

    def _standby(self, facts: dict) -> Holder | None:
        """Take the indexer lease, waiting as a standby while another process holds it (SIGTERM/SIGINT end the
        wait): ``<state dir>/indexer-standby.json`` and the systemd status say ``standby`` meanwhile."""
        assert self.store is not None
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)

        def on_standby(active: dict) -> None:
            """Called once when the lease is found held by ``active`` (the holder's facts): log it, write
            ``indexer-standby.json`` and tell systemd (``READY=1`` with a standby status)."""
            log.info(
                "standby: the indexer lease is held by %s; taking over when it ends", describe_holder(active)
            )
            write_standby(self.libdir, active)
            notify.ready(f"standby: the indexer runs on {describe_holder(active)}")

        terms = StandbyTerms(self.store, self.libdir)

        def on_poll() -> None:
            """Each standby poll (TTL/5 s): feed the systemd watchdog, keep this host's term index current."""
            self.beat.beat()
            terms.poll()

        try:
            holder = Holder.wait_take(
                self.store.backend,
                "indexer",
                facts,
                self.stop,
                on_standby,
                on_lost=self._lost_lease,
                on_poll=on_poll,
            )
        finally:
            terms.close()
            clear_standby(self.libdir)
        if holder is not None:
            log.info("took the indexer lease: this indexer is active")
        return holder

    def _stand_by_again(self) -> bool:
        """The lease expired under this indexer (another host may index now): stand by until it is ours again.
        False when stopped meanwhile."""
        assert self.holder is not None
        self.holder.release()
        self.lease_lost = False
        self.stop = threading.Event()
        if self.quit_requested:  # asked to stop while the old event was being replaced
            return False
        self.holder = self._standby({"libdir": self.libdir})
        return self.holder is not None and not self.quit_requested

    def close(self) -> None:
        """Close the hooks, the builder and the store, release the lock (each once)."""
        self._close_opened()
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None

    def _close_opened(self) -> None:
        """Close the hooks, the builder, the lease and the store (each once); the lock stays held."""
        if self.indexer is not None:
            for hook in self.indexer.hooks:
                hook.close()
            _close_builder(self.indexer.builder)
            self.indexer = None
        if self.holder is not None:
            self.holder.release()
            self.holder = None
        if self.store is not None:
            self.store.close()
            self.store = None

    def _lost_lease(self) -> None:
        """The indexer lease expired (the cluster was unreachable past its TTL, or the lease was revoked):
        end the loop; :meth:`serve` stands by again (another indexer may hold it now)."""
        self.lease_lost = True
        self.stop.set()

    # -- the daemon loop -------------------------------------------------------------------------------------
    def serve(self, full: bool) -> int:
        """Run until SIGTERM/SIGINT; reload on SIGHUP; stand by again when the etcd lease is lost. Returns the
        exit status (0)."""
        idx = self.indexer
        assert idx is not None
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)
        tie = take_tie()
        if tie is not None:  # started tied to its starter (an MCP server): stop when the starter is gone
            threading.Thread(target=self._watch_tie, args=(tie,), name="tie", daemon=True).start()
        dog = notify.Watchdog(lambda: self.beat.age_s() < self.settings["index"]["stall_s"])
        dog.start()
        idx.ask_in_background()  # a slow model never holds up a TOC (libraryfs.daemon.llm_refresh)
        log.info(
            "indexer started (pid %d, builder %s)%s",
            os.getpid(),
            idx.builder.name,
            f", filing through {self.mountpoint}" if self.mountpoint else "",
        )  # a line of its own: `status` and the mount's restart warnings quote this log's last line
        try:
            notify.ready(f"indexing {idx.libdir}")
            while True:
                if full:
                    idx.stop_event = self.stop
                    try:
                        idx.run_once(full=True)
                    except PassStopped:
                        idx.publish_stopped()
                        return 0
                    full = False
                idx.run_forever(self.stop, poll_s=self.settings["index"]["poll_s"], on_pass=self._on_pass)
                if self.lease_lost and not self.quit_requested:
                    if not self._stand_by_again():
                        return 0
                    idx.resync_terms()
                    continue
                if self.quit_requested or not self.reload_requested:
                    return 0
                self.reload_requested = False
                self.stop = threading.Event()
                if self.quit_requested:  # asked to stop while the old event was being replaced
                    return 0
                full = self.reload()
        except BaseException as e:
            self.stop_reason = self.stop_reason or f"{type(e).__name__}: {e}"
            raise
        finally:
            dog.stop()
            log.info("indexer stopped (pid %d): %s", os.getpid(), self.stop_reason or "its loop ended")

    def reload(self) -> bool:
        """Re-read the settings and rebuild the builder (SIGHUP); True when the TOC bound changed (every TOC
        must be re-rendered). A bad setting keeps the current ones and says so."""
        idx, store = self.indexer, self.store
        assert idx is not None and store is not None
        notify.reloading("reloading settings")
        try:
            new = load_settings(self.libdir, self.process_overrides, tables=PROCESS_TABLES)
            configure_logging(new)
            bound = int(
                new["index"]["toc_max_tokens"] or store.settings().get("toc_max_tokens") or DEFAULT_MAX_TOKENS
            )
            builder = make_builder(self.libdir, store, self.use_llm, self.llm_overrides or None)
        except LibraryError as e:
            log.error("reload failed, keeping the current settings: %s", e)
            notify.notify(f"READY=1\nSTATUS=reload failed: {e}")
            return False
        old, idx.builder = idx.builder, builder
        if old is not builder:
            _close_builder(old)
        idx.ask_in_background()
        changed = bound != idx.max_tokens
        idx.max_tokens = bound
        self.settings = new
        log.info(
            "settings reloaded (SIGHUP): builder %s, TOC bound %d tokens, poll %.2f s",
            getattr(builder, "name", "?"),
            bound,
            new["index"]["poll_s"],
        )
        notify.notify(f"READY=1\nSTATUS=indexing {idx.libdir} (settings reloaded)")
        return changed

    def _on_pass(self, rep: PassReport) -> None:
        idx, store = self.indexer, self.store
        assert idx is not None and store is not None
        with store.read() as t:
            gen, pending = t.cfg_int(S.CFG_TOC_GEN), max(0, t.journal_tail() - t.cfg_int(S.CFG_CURSOR))
        notify.status(
            f"idle: TOC generation {gen}, {count(pending, 'record')} pending; last pass "
            f"{count(rep.records, 'record')}, {count(rep.dirs_rendered, 'TOC')} in {rep.seconds:.2f} s"
            + (f"; last error: {idx.last_error}" if idx.last_error else "")
        )

    def _on_stop(self, signum, _frame) -> None:
        """SIGTERM/SIGINT: stop. A second one while the first is handled returns at once: CPython runs a
        handler again between the bytecodes of the one it interrupts, and ``Event.set`` holds a plain
        (non-reentrant) lock — a handler re-entered inside it deadlocked the indexer for good (``umount``
        sends SIGTERM a moment after the mount server does: CI saw "still shutting down after 10 s")."""
        if self.quit_requested:
            return
        self._quit(f"stopping ({signal.Signals(signum).name})")

    def _quit(self, why: str) -> None:
        self.quit_requested = True  # first (see _on_stop); before reading self.stop: serve() checks it after
        self.stop_reason = self.stop_reason or why  # replacing the event
        if self.lock_fd is not None:  # a mount started now must not adopt this indexer: it is on its way out
            try:
                mark_lock_stopping(self.lock_fd)
            except OSError:
                pass
        notify.stopping(why)
        if self.priority:
            restore_priority(self.priority)  # finish the last item at the foreground's priority
        self._set_stop()

    def _set_stop(self) -> None:
        """Set :attr:`stop`, unless a signal handler that this one interrupted is setting it now (it will:
        ``Event.set`` holds a non-reentrant lock, so setting it again from inside would wait forever)."""
        if self._setting_stop:
            return
        self._setting_stop = True
        try:
            self.stop.set()
        finally:
            self._setting_stop = False

    def _watch_tie(self, fd: int) -> None:
        """Thread: wait until the process that started this indexer is gone (the tie's EOF), then stop."""
        wait_untied(fd)
        if not self.quit_requested:
            log.info("the process that started the indexer has exited; stopping")
            self._quit("stopping (its starter exited)")

    def _on_hup(self, _signum, _frame) -> None:
        """SIGHUP: reload between passes (:meth:`_set_stop`: safe against a stop signal's handler run inside
        this one)."""
        if self.reload_requested or self.quit_requested:
            return
        self.reload_requested = True
        self._set_stop()


def run_process(
    libdir: str,
    *,
    mountpoint: str | None = None,
    once: bool = False,
    full: bool = False,
    use_llm: bool | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> int:
    """The indexer process (see module doc): ``once`` runs one pass and returns; ``full`` re-examines every
    entry and directory first. ``overrides``: flag values by dotted setting key. Returns the exit status.
    On a shared (etcd) store the daemon (not ``once``) stands by while another host's indexer holds the
    lease, and takes over when that lease ends (:meth:`Holder.wait_take <libraryfs.fs.holder.Holder.wait_take>`).
    Raises :class:`~libraryfs.errors.LibraryError` when it cannot start (bad setting, another indexer holds
    the lock — :class:`~libraryfs.errors.Busy` names its pid —, no library, ``use_llm`` without an endpoint).
    """
    reset_signal_mask()  # started by a mount server's thread, it inherits SIGTERM blocked
    proc = IndexerProcess(libdir, mountpoint, overrides or {}, use_llm)
    idx = proc.open(standby=not once)  # the daemon waits for another host's indexer; one pass does not
    if idx is None:
        return 0  # stopped while standing by
    try:
        if once:
            with idx.store.read() as t:
                full = full or needs_full_pass(t)  # as `libraryfs index` and the daemon decide
            idx.run_once(full=full)
            return 0
        return proc.serve(full)
    finally:
        proc.close()
