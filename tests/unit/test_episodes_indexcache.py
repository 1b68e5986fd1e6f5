"""The saved recall index (libraryfs.features.episodes.indexcache): an index loaded from it answers exactly
as the one built from the units; a damaged, foreign or stale file is never trusted; ``libraryfs recall`` and
``answer`` print the same output whether they build, load, or rebuild after damage, a change of the units
(a new generation, or a writer that keeps none) or a ``kill -9`` while the index was being saved
(issue 18: CLI latency)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from libraryfs.features.episodes import indexcache
from libraryfs.features.episodes.answer import answer
from libraryfs.features.episodes.index import EpisodeIndex
from libraryfs.features.episodes.recall import recall
from libraryfs.features.episodes.unitdb import GENERATION, UnitDB
from libraryfs.fs import schema as S
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


def _load(path: str):
    """``(key, state)`` of the saved index at ``path``, or None (no file, or not intact)."""
    saved = indexcache.open_saved(path)
    state = saved.state() if saved is not None else None
    return None if state is None else (saved.key, state)


def test_a_loaded_index_answers_exactly_as_the_built_one(episode, tmp_path):
    units, qs = episode
    built = EpisodeIndex(units)
    path = str(tmp_path / "ix")
    assert indexcache.save(path, "k", EpisodeIndex(units).state(_records(units)))
    key, state = _load(path)
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
    recs = [b'{"t":1}', b'{"t":2,"x":"yy"}']
    assert indexcache.save(path, "k", {"ts": [1, 2], "records": recs})
    good = Path(path).read_bytes()
    key, state = _load(path)
    assert (key, state["ts"], [state["records"][i] for i in range(2)]) == ("k", [1, 2], recs)
    blob = len(good) - sum(map(len, recs))  # where the records start
    head = len(indexcache.MAGIC) + indexcache._HEADER.size
    bad = [
        b"",
        good[: blob // 2],  # truncated in the head
        good[:head] + b"x" + good[head + 1 :],  # one byte of the key
        good[: blob - 1] + bytes([good[blob - 1] ^ 1]) + good[blob:],  # one bit of the head
        good[: head - 1] + bytes([good[head - 1] ^ 1]) + good[head:],  # one bit of the checksum
        b"x" + good[1:],  # the magic
        os.urandom(len(good)),
    ]
    for data in bad:
        Path(path).write_bytes(data)
        assert _load(path) is None or _load(path)[0] != "k", data[:40]
    assert _load(str(tmp_path / "missing")) is None
    # a damaged or missing record is found when it is read (records are read one at a time, on demand)
    for data in (good[:-1] + bytes([good[-1] ^ 1]), good[:-3]):
        Path(path).write_bytes(data)
        key, state = _load(path)
        assert state["records"][0] == recs[0]
        with pytest.raises(indexcache.Damaged):
            state["records"][1]


def _store_episode(libdir: str, units) -> None:
    st = Store(libdir)
    try:
        UnitDB(st).put("e1", units, {"units": len(units)})
    finally:
        st.close()


def _store_without_generation(libdir: str, units) -> None:
    """The units and a meta record without a generation, as a release before generations wrote them."""
    st = Store(libdir)
    try:
        st.open_table(S.DB_UNITS)

        def put(t) -> None:
            for u in units:
                t.kv.put(
                    S.DB_UNITS,
                    b"ue1\x00" + S.u64(u.t),
                    json.dumps(u.to_json(), separators=(",", ":")).encode(),
                )
            t.kv.put(S.DB_UNITS, b"me1", json.dumps({"units": len(units)}).encode())

        st.run_write(put)
    finally:
        st.close()


def _cli(libdir: str, cmd: str, q: str, *extra: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "libraryfs.cli.main", cmd, "e1", q, "--library", libdir, "--json", *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode in (0, 7), r.stderr
    return json.loads(r.stdout)


def _recall_cli(libdir: str, q: str) -> dict:
    return _cli(libdir, "recall", q)


def _answer_cli(libdir: str, q: str) -> dict:
    return _cli(libdir, "answer", q, "--reader", "rules")


def _want(units, q: str) -> tuple[dict, dict]:
    """What ``recall --json`` and ``answer --json --reader rules`` print for ``q`` over ``units``, from an
    index built in this process (no saved file involved)."""
    idx = EpisodeIndex(units)
    return recall(idx, q, 200).to_json(), answer(idx, q, 200, "rules", None).to_json()


def _both_cli(libdir: str, q: str) -> tuple[dict, dict]:
    return _recall_cli(libdir, q), _answer_cli(libdir, q)


def _key(path: str) -> str | None:
    saved = indexcache.open_saved(path)
    return saved.key if saved is not None else None


def test_the_recall_command_builds_loads_and_rebuilds_the_saved_index(episode, tmp_path):
    units, qs = episode
    units = units[:400]
    libdir = str(tmp_path / "lib")
    Store.create(libdir).close()
    _store_episode(libdir, units)
    q = next(x for x in qs if "wood" in x) if any("wood" in x for x in qs) else qs[0]
    want = _want(units, q)
    path = indexcache.path_for(libdir, "e1")
    assert not os.path.exists(path)
    assert _both_cli(libdir, q) == want  # built, then saved
    saved = Path(path).read_bytes()
    assert _load(path) is not None and ":g:" in _key(path)  # keyed by the episode's generation
    assert _both_cli(libdir, q) == want  # loaded
    assert Path(path).read_bytes() == saved  # a current file is not rewritten
    damaged = bytearray(saved)
    damaged[len(saved) // 4] ^= 0xFF  # in the head
    Path(path).write_bytes(bytes(damaged))
    assert _recall_cli(libdir, q) == want[0]  # damage detected: rebuilt from the units, and saved again
    assert _load(path) is not None
    shown = {i["t"] for i in want[0]["items"]}
    damaged = bytearray(Path(path).read_bytes())  # a record the query shows (read on demand)
    saved_state = _load(path)[1]
    i = saved_state["ts"].index(min(shown))
    rec = saved_state["records"]
    damaged[rec._base + rec._offsets[i] + 2] ^= 0xFF
    Path(path).write_bytes(bytes(damaged))
    assert _recall_cli(libdir, q) == want[0]  # found while answering: discarded, rebuilt, answered again
    assert _load(path)[1]["records"][i] == _records(units)[min(shown)]
    resaved = Path(path).read_bytes()
    # a changed unit makes the saved index stale: the answer follows the store
    changed = [*units[:-1], dataclasses.replace(units[-1], observation="I found a golden key by the lake.")]
    stale = _load(path)[1]
    _store_episode(libdir, changed)
    # the rebuild reuses the stale file's piece table and renders only the changed step's lines
    recs = _records(changed)
    table, steps = indexcache.reusable_pieces(stale, [u.t for u in changed], [recs[u.t] for u in changed])
    assert steps == {changed[-1].t} and table == stale["pieces"]
    q2 = "where did I find the golden key?"
    got = _both_cli(libdir, q2)
    assert " golden" in _load(path)[1]["pieces"]
    assert got == _want(changed, q2)
    assert got[0] != _want(units, q2)[0]  # what the stale index would answer
    assert got[0]["items"][0]["t"] == changed[-1].t  # the only step with those words ranks first
    assert Path(path).read_bytes() not in (saved, resaved)
    # writing the meta record alone (the builder's answered questions) keeps the generation: still current
    st = Store(libdir)
    try:
        db = UnitDB(st)
        gen = db.meta("e1")[GENERATION]
        db.put("e1", [], {**db.meta("e1"), "asks": {"q": "x"}})
        assert db.meta("e1")[GENERATION] == gen
    finally:
        st.close()
    current = Path(path).read_bytes()
    assert _recall_cli(libdir, q2) == got[0] and Path(path).read_bytes() == current


def test_a_store_written_without_generations_is_keyed_by_a_digest_of_its_units(episode, tmp_path):
    """A meta record without a generation (a release before them, or a writer that rebuilds the meta record
    without carrying it): the key is the digest of the records, so a change of the units by such a writer is
    seen even after an index keyed by a generation was saved."""
    units, qs = episode
    units = units[:300]
    libdir = str(tmp_path / "lib")
    Store.create(libdir).close()
    _store_episode(libdir, units)
    path = indexcache.path_for(libdir, "e1")
    q = "where did I find the golden key?"
    assert _both_cli(libdir, q) == _want(units, q)
    assert ":g:" in _key(path)
    changed = [*units[:-1], dataclasses.replace(units[-1], observation="I found a golden key by the lake.")]
    _store_without_generation(libdir, changed)  # the units changed, and the generation is gone
    got = _both_cli(libdir, q)
    assert got == _want(changed, q) and got[0]["items"][0]["t"] == changed[-1].t
    assert ":d:" in _key(path)
    assert _both_cli(libdir, q) == got  # loaded under the digest
    _store_without_generation(libdir, units)
    assert _both_cli(libdir, q) == _want(units, q)


def test_kill_9_while_the_index_is_saved_leaves_nothing_stale_behind(episode, tmp_path):
    """``kill -9`` of ``recall`` at any moment of a rebuild (after the units changed, so a stale saved index
    is on disk): the next call answers from the current units, and the temporary file of the killed writer
    is removed by the next save."""
    units, qs = episode
    libdir = str(tmp_path / "lib")
    Store.create(libdir).close()
    _store_episode(libdir, units)
    q = "where did I find the golden key?"
    path = indexcache.path_for(libdir, "e1")
    argv = [sys.executable, "-m", "libraryfs.cli.main", "recall", "e1", q, "--library", libdir, "--json"]
    t0 = time.monotonic()
    assert _recall_cli(libdir, q) == _want(units, q)[0]
    full = time.monotonic() - t0  # one call that builds and saves: the kills land across it
    killed_writing = 0
    for n in range(8):
        changed = [
            *units[:-1],
            dataclasses.replace(units[-1], observation=f"I found golden key {n} by the lake."),
        ]
        _store_episode(libdir, changed)  # a new generation: the saved index is stale
        stale = _key(path)
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tmp = os.path.join(os.path.dirname(path), f"{indexcache._TMP_PREFIX}{p.pid}")
        deadline = time.monotonic() + full * (0.3 + 0.1 * n)
        while time.monotonic() < deadline and not os.path.exists(tmp) and p.poll() is None:
            time.sleep(0.0005)
        p.send_signal(signal.SIGKILL)
        p.wait()
        killed_writing += os.path.exists(tmp)
        assert _key(path) == stale or _load(path) is not None  # the old file, or a whole new one
        got = _both_cli(libdir, q)
        assert got == _want(changed, q)  # never the stale index's answer
        assert got[0]["items"][0]["t"] == changed[-1].t
        assert not os.path.exists(tmp)  # the next save removed the killed writer's temporary file
    assert killed_writing >= 1  # at least one kill landed while the file was being written
