"""The saved recall index (libraryfs.features.episodes.indexcache): an index loaded from it answers exactly
as the one built from the units; a damaged, foreign or stale file is never trusted; ``libraryfs recall``
prints the same evidence whether it builds, loads, or rebuilds after damage or a change of the units
(issue 18: CLI latency)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from libraryfs.features.episodes import indexcache
from libraryfs.features.episodes.answer import answer
from libraryfs.features.episodes.index import EpisodeIndex
from libraryfs.features.episodes.recall import recall
from libraryfs.features.episodes.unitdb import UnitDB
from libraryfs.fs.store import Store
from libraryfs_bench.episodes import crafter_data, phrasings, questions
from libraryfs_bench.episodes.bench import build_units

PHRASINGS = Path(__file__).parent / "data" / "episode_phrasings.jsonl"
BUDGETS = (0, 200, 800)


def _records(units) -> dict[int, bytes]:
    """Each unit's JSON as UnitDB stores it."""
    return {u.t: json.dumps(u.to_json(), separators=(",", ":")).encode() for u in units}


@pytest.fixture(scope="module")
def episode():
    recs = crafter_data.load_rollout(4, 1200)
    qs, _ = questions.generate(recs, phrasings.load(PHRASINGS), "seed4", key="indexcache-test")
    return build_units(recs), [q.text for q in qs]


def _same(a, b) -> None:
    assert (a.text, a.tokens, a.resolved, [dataclasses.astuple(i) for i in a.items]) == (
        b.text,
        b.tokens,
        b.resolved,
        [dataclasses.astuple(i) for i in b.items],
    )


def test_a_loaded_index_answers_exactly_as_the_built_one(episode, tmp_path):
    units, qs = episode
    built = EpisodeIndex(units)
    path = str(tmp_path / "ix")
    assert indexcache.save(path, "k", EpisodeIndex(units).state(_records(units)))
    key, state = indexcache.load(path)
    loaded = EpisodeIndex.from_state(state)
    assert key == "k" and loaded._units is None
    questions_ = qs[:30] + ["what is the meaning of life", "", "where did I last drink water?"]
    for q in questions_:
        for budget in BUDGETS:
            _same(recall(loaded, q, budget), recall(built, q, budget))
        _same(recall(loaded, q, 200, use_anchors=False), recall(built, q, 200, use_anchors=False))
        a, b = answer(loaded, q, 200, "rules", None), answer(built, q, 200, "rules", None)
        assert a.to_json() == b.to_json()
    assert loaded._units is None  # the queries parsed only the units they showed


def test_damaged_foreign_or_other_format_files_are_not_trusted(tmp_path):
    path = str(tmp_path / "ix")
    assert indexcache.save(path, "k", {"ts": [1, 2]})
    good = Path(path).read_bytes()
    assert indexcache.load(path) == ("k", {"ts": [1, 2]})
    head = len(indexcache.MAGIC) + 12
    bad = [
        b"",
        good[: len(good) // 2],  # truncated
        good[:-1] + bytes([good[-1] ^ 1]),  # one bit of the payload
        good[: head - 1] + bytes([good[head - 1] ^ 1]) + good[head:],  # one bit of the checksum
        b"x" + good[1:],  # the magic
        good + b"tail",
        os.urandom(len(good)),
    ]
    for data in bad:
        Path(path).write_bytes(data)
        assert indexcache.load(path) is None, data[:40]
    assert indexcache.load(str(tmp_path / "missing")) is None


def _store_episode(libdir: str, units) -> None:
    st = Store(libdir)
    try:
        UnitDB(st).put("e1", units, {"units": len(units)})
    finally:
        st.close()


def _recall_cli(libdir: str, q: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "libraryfs.cli.main", "recall", "e1", q, "--library", libdir, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_recall_command_builds_loads_and_rebuilds_the_saved_index(episode, tmp_path):
    units, qs = episode
    units = units[:400]
    libdir = str(tmp_path / "lib")
    Store.create(libdir).close()
    _store_episode(libdir, units)
    q = next(x for x in qs if "wood" in x) if any("wood" in x for x in qs) else qs[0]
    want = recall(EpisodeIndex(units), q, 200).to_json()
    path = indexcache.path_for(libdir, "e1")
    assert not os.path.exists(path)
    assert _recall_cli(libdir, q) == want  # built, then saved
    saved = Path(path).read_bytes()
    assert indexcache.load(path) is not None
    assert _recall_cli(libdir, q) == want  # loaded
    assert Path(path).read_bytes() == saved  # a current file is not rewritten
    damaged = bytearray(saved)
    damaged[-10] ^= 0xFF
    Path(path).write_bytes(bytes(damaged))
    assert _recall_cli(libdir, q) == want  # damage detected: rebuilt from the units, and saved again
    assert indexcache.load(path) is not None
    resaved = Path(path).read_bytes()  # (marshal's bytes need not equal the first save's)
    # a changed unit makes the saved index stale: the answer follows the store
    changed = [*units[:-1], dataclasses.replace(units[-1], observation="I found a golden key by the lake.")]
    _store_episode(libdir, changed)
    q2 = "where did I find the golden key?"
    got = _recall_cli(libdir, q2)
    assert got == recall(EpisodeIndex(changed), q2, 200).to_json()
    assert got != recall(EpisodeIndex(units), q2, 200).to_json()  # what the stale index would answer
    assert got["items"][0]["t"] == changed[-1].t  # the only step with those words ranks first
    assert Path(path).read_bytes() not in (saved, resaved)
    # the side file is a hint only: naming a key the index does not hold (or missing), the answer is the
    # store's and the side file is put right
    current = indexcache.load(path)[0]
    assert indexcache.load_key(path) == current
    Path(path).write_bytes(saved)  # stale (the first units' index) while the side file names the current key:
    assert _recall_cli(libdir, q2) == got  # the reader left the records out; read again, rebuilt
    assert indexcache.load(path)[0] == current
    Path(path + indexcache.KEY_SUFFIX).write_text("not a key")
    assert _recall_cli(libdir, q2) == got  # a wrong side file: the records come back, the index is current
    assert indexcache.load_key(path) == indexcache.load(path)[0]
    os.unlink(path + indexcache.KEY_SUFFIX)
    assert _recall_cli(libdir, q2) == got  # current index, no side file: loaded, and the side file written
    assert indexcache.load_key(path) == indexcache.load(path)[0]
