"""The indexer runs the episodes hook (registered through the ``libraryfs.features`` entry points): steps
appended through the mount become units and views, and the indexer reports idle only once the hook and the
pass over the hook's own files are done."""

import json
import os

from helpers.files import read_file
from helpers.wait import wait_until

from libraryfs.fs.store import Store
from libraryfs.hooks import features
from libraryfs.layout import index_backlog, view_writer


def test_the_episodes_feature_registers_an_indexer_hook():
    (episodes,) = (f for f in features() if f.name == "episodes")
    assert episodes.indexer_hook == "libraryfs.features.episodes.feature:make_hook"


def test_steps_appended_through_the_mount_become_anchor_views(mounted):
    os.makedirs(mounted.p("episodes/e1"))
    steps = [
        {"t": 0, "action": "noop", "location": "meadow", "inventory": {}},
        {"t": 1, "action": "collect_wood", "location": "forest", "inventory": {"wood": 1}},
        {"t": 2, "action": "noop", "location": "meadow", "inventory": {"wood": 1}},
    ]
    with open(mounted.p("episodes/e1/steps.jsonl"), "a") as f:
        for s in steps:
            f.write(json.dumps(s) + "\n")
    # the condition, not a poll for the first file: idle comes after the hook and the pass over its views
    mounted.wait_indexed(timeout_s=60)
    visits = sorted(os.listdir(mounted.p("episodes/e1/visits/meadow")))
    assert "2.md" in visits and "last.md" in visits
    assert "t=2" in read_file(mounted.p("episodes/e1/visits/meadow/2.md"))
    assert b"visits/" in read_file(mounted.p("episodes/e1/INDEX.md"), "rb")


def test_the_hook_waits_for_another_episodes_writer(mounted):
    """While another writer (here: this test, as ``libraryfs episode build`` would) holds the library's
    episodes lock, the indexer's hook writes nothing and the indexer does not say idle; once the lock is
    free the hook builds the episode."""
    os.makedirs(mounted.p("episodes/e2"))
    st = Store(mounted.libdir, readonly=True)
    try:
        with view_writer(mounted.libdir, "episodes"):
            with open(mounted.p("episodes/e2/steps.jsonl"), "w") as f:
                f.write(json.dumps({"t": 0, "action": "noop", "location": "cave"}) + "\n")

            # the pass consumed the journal, then the hook found the lock taken: "hooks", not "idle"
            def hook_waiting() -> bool:
                with st.read() as t:
                    backlog = index_backlog(t)
                return backlog["pending_records"] == 0 and backlog["state"] == "hooks"

            wait_until(hook_waiting, 60, "the indexer to wait in its hooks for the episodes lock")
            assert not os.path.exists(mounted.p("episodes/e2/steps"))  # nothing written while we hold it
    finally:
        st.close()
    mounted.wait_indexed(timeout_s=60)
    assert os.listdir(mounted.p("episodes/e2/steps")) and os.path.exists(mounted.p("episodes/e2/episode.md"))
