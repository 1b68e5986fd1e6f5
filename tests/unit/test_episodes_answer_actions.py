"""Counting an episode's actions: a count question whose word names one of the episode's actions."""

from __future__ import annotations

import pytest

from libraryfs.features.episodes.answer import answer
from libraryfs.features.episodes.index import EpisodeIndex
from libraryfs.features.episodes.units import from_record


def _episode(n: int) -> EpisodeIndex:
    return EpisodeIndex(
        [
            from_record({"t": i, "action": "drink" if i % 2 == 0 else "move", "place": f"zone-{i}"})
            for i in range(n)
        ]
    )


@pytest.mark.parametrize("n", [6, 200])
def test_a_count_of_an_action_is_read_from_the_actions_the_evidence_shows(n):
    """ "How many times did I drink?" over steps saying ``act=drink`` was parsed as Crafter's event
    ``collect_drink``, which this episode never has: the reader answered a confident 0 beside evidence that
    showed every drink. The count now reads the action (kind ``act``); over a long episode the evidence
    carries the first and the last occurrence with ordinals (``act=drink#100``), so the budget suffices."""
    a = answer(_episode(n), "How many times did I drink?", 200, "rules")
    assert a.query.count is not None and (a.query.count.kind, a.query.count.name) == ("act", "drink")
    assert a.answer == str((n + 1) // 2)
    assert a.recall.tokens <= 200


def test_a_crafter_event_the_episode_has_is_still_counted_as_the_event():
    units = [
        from_record({"t": i, "action": "do", "events": ["collect_drink"] if i < 3 else []}) for i in range(5)
    ]
    a = answer(EpisodeIndex(units), "How many times did I drink water?", 200, "rules")
    assert (a.query.count.kind, a.query.count.name) == ("ev", "collect_drink")
    assert a.answer == "3"
