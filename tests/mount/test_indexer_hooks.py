"""The indexer runs the episode builder: steps appended through the mount become units and views."""

import json
import os
import time


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
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not os.path.isdir(mounted.p("episodes/e1/visits/meadow")):
        time.sleep(0.2)
    visits = sorted(os.listdir(mounted.p("episodes/e1/visits/meadow")))
    assert "2.md" in visits and "last.md" in visits
    assert "t=2" in open(mounted.p("episodes/e1/visits/meadow/2.md")).read()
    mounted.wait_indexed()
    assert b"visits/" in open(mounted.p("episodes/e1/INDEX.md"), "rb").read()
