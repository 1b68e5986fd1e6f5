"""Feature hooks (libraryfs.hooks) and the indexer's explicit liveness: features register through entry
points, a missing extra is one line, the indexer runs hooks after a pass and publishes idle only after them,
and every step of a pass beats the heartbeat the daemon's watchdog reads."""

from __future__ import annotations

import threading

from libraryfs.daemon.indexer import Indexer
from libraryfs.fs import schema as S
from libraryfs.fs.store import Store
from libraryfs.fs.tree import StoreTree
from libraryfs.hooks import Feature, HookContext, HookResult, features, indexer_hooks, missing_extra
from libraryfs.layout import index_backlog


def test_the_features_register_through_entry_points():
    by_name = {f.name: f for f in features()}
    assert set(by_name) >= {"episodes", "code", "cards"}
    assert by_name["cards"].modules == ("math_verify",) and by_name["episodes"].indexer_hook
    assert missing_extra("episodes") is None  # the test environment installs every extra
    why = missing_extra(Feature("kinds", "kinds", ("no_such_module_xyz",)))
    assert (
        why
        == "this command needs the kinds extra: pip install 'libraryfs[kinds]' (missing: no_such_module_xyz)"
    )
    assert "not installed" in missing_extra("nonesuch")


def test_indexer_hooks_are_built_for_the_context(libdir):
    st = Store(libdir)
    try:
        hooks = indexer_hooks(HookContext(str(libdir), st, None))
        assert [h.name for h in hooks] == ["episodes"]
        assert hooks[0].after_pass() == HookResult()  # not mounted: nothing to write through
    finally:
        st.close()


class CountingHook:
    """A feature hook that asks to be called again until it has run ``rounds`` times, recording the indexer's
    published state at each call."""

    name = "counting"

    def __init__(self, store: Store, rounds: int) -> None:
        self.store, self.rounds, self.seen = store, rounds, []

    def after_pass(self) -> HookResult:
        with self.store.read() as t:
            self.seen.append(t.cfg_json(S.CFG_INDEXER_STATUS).get("state"))
        return HookResult([f"round {len(self.seen)}"], again=len(self.seen) < self.rounds)

    def close(self) -> None:
        pass


def test_idle_only_after_the_hooks_and_every_step_beats(libdir):
    st = Store(libdir)
    beats = []
    try:
        StoreTree(st).write_bytes("notes/a.md", b"# A\n\nSomething.\n")
        hook = CountingHook(st, rounds=3)
        idx = Indexer(  # settle_s=0: the new directory is rendered in the first pass (no settling pass)
            str(libdir), store=st, hooks=[hook], heartbeat=lambda: beats.append(1), settle_s=0
        )
        stop = threading.Event()
        states = []

        def on_pass(_rep) -> None:
            with st.read() as t:
                states.append(t.cfg_json(S.CFG_INDEXER_STATUS).get("state"))

        worker = threading.Thread(
            target=idx.run_forever, args=(stop,), kwargs={"poll_s": 0.01, "on_pass": on_pass}
        )
        worker.start()
        try:
            while len(hook.seen) < 3 or idx.state != "idle":  # a condition, bounded by the join below
                if not worker.is_alive():
                    break
                stop.wait(0.01)
        finally:
            stop.set()
            worker.join(30)
        assert hook.seen == ["hooks", "hooks", "hooks"]  # while hooks run the indexer is not idle
        assert states and states[0] == "hooks"
        assert len(beats) > 5  # the journal read, each TOC, each builder call, each hook
    finally:
        st.close()


class WritingHook:
    """A hook that, on its first call, writes a file into the library (a new journal record: the indexer's
    next pass consumes it) and, on its second call, stops the indexer. ``events`` gets ``"hook"`` per call."""

    name = "writing"

    def __init__(self, store: Store, stop: threading.Event, events: list) -> None:
        self.store, self.stop, self.events, self.calls = store, stop, events, 0

    def after_pass(self) -> HookResult:
        self.calls += 1
        self.events.append("hook")
        if self.calls == 1:
            StoreTree(self.store).write_bytes("notes/b.md", b"# B\n\nWritten between two passes.\n")
        else:
            self.stop.set()
        return HookResult()

    def close(self) -> None:
        pass


def test_no_commit_shows_every_record_consumed_beside_a_stale_idle(libdir):
    """The pass commits its cursor and the state it leaves the indexer in ("hooks") in one transaction: after
    no write transaction does a reader see the journal consumed while the published state is still the
    previous pass's "idle" — what :func:`libraryfs.layout.wait_until_idle` would take for "done" before the
    hooks of the new records ran. Observed after every write transaction the indexer commits."""
    st = Store(libdir)
    events: list = []
    commit = st.run_write

    def observed(fn, *args, **kw):  # the real commit, then a read of what any other reader now sees
        out = commit(fn, *args, **kw)
        with st.read() as t:
            events.append(index_backlog(t))
        return out

    try:
        StoreTree(st).write_bytes("notes/a.md", b"# A\n\nFirst.\n")
        stop = threading.Event()
        idx = Indexer(str(libdir), store=st, hooks=[WritingHook(st, stop, events)])
        st.run_write = observed  # type: ignore[method-assign]
        idx.run_forever(stop, poll_s=0.01, debounce_s=0.0)  # pass, hook (writes b.md), pass, hook (stops)
    finally:
        st.run_write = commit  # type: ignore[method-assign]
        st.close()
    first, second = (i for i, e in enumerate(events) if e == "hook")
    between = [e for e in events[first + 1 : second] if e != "hook"]
    assert any(e["pending_records"] > 0 for e in between)  # the hook's write was seen pending
    stale = [e for e in between if e["pending_records"] == 0 and e["state"] == "idle"]
    assert stale == [], between
    assert events[-1]["state"] == "stopped"
