"""The background request queue (libraryfs.llm.deferred): items the model could not answer are given up for
GIVE_UP_S, then asked again, and a long-running indexer does not keep every key it ever gave up on.

``ask`` here is a plain function standing for the builder's fetch closure (the queue's contract); the real
client against a loopback server is exercised in tests/integration/test_llm_background.py.
"""

import time

from helpers.wait import wait_until

from libraryfs.llm import deferred
from libraryfs.llm.deferred import Deferred, Unit


def test_given_up_items_are_asked_again_after_the_window_and_then_forgotten(monkeypatch):
    monkeypatch.setattr(deferred, "GIVE_UP_S", 0.5)
    monkeypatch.setattr(deferred, "PRUNE_MIN", 8)
    asked: list[str] = []

    def ask(items):
        asked.extend(k for k, _ in items)
        return {}  # no valid answer: every item is given up

    def unit(keys, tag):
        return Unit("summarize", "v1", [(k, {"name": k}) for k in keys], ask, ("s", tag), ("batch",))

    q = Deferred(lambda: 0.0)
    try:
        assert q.submit(unit([f"a{i}" for i in range(10)], "a")) == list(range(10))
        wait_until(lambda: q.status()["given_up"] == 10, 10, "ten items given up")
        assert q.submit(unit(["a0", "a1"], "again")) == []  # within the window: not asked again
        time.sleep(0.6)
        assert q.status()["given_up"] == 0  # the window passed
        assert q.submit(unit(["a0"], "later")) == [0]  # asked again
        wait_until(lambda: asked.count("a0") == 2, 10, "a0 asked a second time")
        q.submit(unit([f"b{i}" for i in range(10)], "b"))
        wait_until(lambda: q.status()["given_up"] == 11, 10, "the new items given up")
        assert asked.count("a1") == 1
        # memory: the expired give-ups (a1..a9) were dropped when the table reached PRUNE_MIN
        assert len(q._gave_up) <= 11, sorted(q._gave_up)
    finally:
        q.close()


def test_an_answer_that_arrived_before_submit_keeps_its_item_waiting():
    """The worker can bring an item's answer between the builder's ``take_arrived`` and its ``submit`` of the
    same item (the indexer summarises a file again while the first request is answered): ``submit`` must count
    it as waiting (its line stays provisional) and wake the indexer, whose refresh pass then takes it. Before,
    it was neither waiting nor taken: the line kept its deterministic fallback for good, the answer stayed in
    memory (seen in CI: ``test_a_new_file_is_listed_without_waiting_for_a_slow_model``, "arrived": 7)."""
    wakes: list[float] = []

    def ask(items):
        return {i: f"answer for {k}" for i, (k, _item) in enumerate(items)}

    q = Deferred(lambda: 0.0, on_answers=lambda: wakes.append(time.monotonic()))
    try:
        first = Unit("summarize", "v1", [("k1", {"name": "a"})], ask, ("s", 1), ("batch",))
        assert q.submit(first) == [0]
        wait_until(lambda: q.status()["arrived"] == 1, 10, "the answer to arrive")
        woken = len(wakes)
        again = Unit(
            "summarize", "v1", [("k1", {"name": "a"}), ("k2", {"name": "b"})], ask, ("s", 2), ("batch",)
        )
        assert q.submit(again) == [0, 1]  # k1: arrived, not taken; k2: queued now
        assert len(wakes) > woken  # the indexer is told again: a refresh pass will take k1
        assert q.take_arrived("v1", ["k1"]) == {0: "answer for k1"}
    finally:
        q.close()
