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
            self.seen.append((S.loads(t.cfg(S.CFG_INDEXER_STATUS), {}) or {}).get("state"))
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
                states.append((S.loads(t.cfg(S.CFG_INDEXER_STATUS), {}) or {}).get("state"))

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
