"""The question parser on phrasings written for these tests (not taken from any phrasing file the parser was
developed on): the grammar's parts one by one, then every template of tests/unit/data/episode_phrasings.jsonl
instantiated over a real Crafter episode and resolved over its units against the generator's ground truth,
and the same parses under two PYTHONHASHSEED values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from libraryfs.features.episodes.anchors import parse_question
from libraryfs.features.episodes.index import EpisodeIndex
from libraryfs.features.episodes.resolve import resolve
from libraryfs_bench.episodes import crafter_data, phrasings, questions
from libraryfs_bench.episodes.bench import build_units, norm

PHRASINGS = Path(__file__).parent / "data" / "episode_phrasings.jsonl"
VOCAB = {"labels": ["zone-1-2", "zone-0-3", "forest", "lake shore", "cave"]}


def p(q: str) -> dict:
    return parse_question(q, VOCAB).to_json()


def occ(kind: str, name: str, k: int = 1, **kw) -> dict:
    return {"op": "occ", "kind": kind, "name": name, "k": k, **kw}


@pytest.mark.parametrize(
    "q,k",
    [
        ("When did I collect wood for the twelfth time?", 12),
        ("When did I collect wood for the 12th time?", 12),
        ("When was my 3rd wood collection?", 3),
        ("When did I most recently collect wood?", -1),
        ("When did I collect wood for the very last time?", -1),
        ("When was the latest wood collection?", -1),
        ("When did I collect wood initially?", 1),
        ("At what step did I first gather wood?", 1),
        ("When did I chop a tree for the second time?", 2),
    ],
)
def test_ordinals(q, k):
    assert p(q)["ref"] == occ("ev", "collect_wood", k)


@pytest.mark.parametrize(
    "q,kind,name",
    [
        ("When did my coal go up for the 2nd time?", "gain", "coal"),
        ("When did my stock of coal grow for the 2nd time?", "gain", "coal"),
        ("When did I obtain coal for the 2nd time?", "gain", "coal"),
        ("When did I spend coal for the 2nd time?", "lose", "coal"),
        ("When did the coal I carried fall for the 2nd time?", "lose", "coal"),
        ("Step of the 2nd decrease in coal?", "lose", "coal"),
        ("When did my food drop for the 2nd time?", "drop", "food"),
        ("When did my health rise for the 2nd time?", "rise", "health"),
        ("When did my thirst go up for the 2nd time?", "drop", "drink"),
        ("When did my hunger fall for the 2nd time?", "rise", "food"),
        ("When did my fatigue increase for the 2nd time?", "drop", "energy"),
        ("When did I become thirsty for the 2nd time?", "drop", "drink"),
        ("When did I lose health for the 2nd time?", "drop", "health"),
    ],
)
def test_directions_and_vital_synonyms(q, kind, name):
    assert p(q)["ref"] == occ(kind, name, 2)


def test_fields_and_steps():
    assert p("What was I doing at step 77?") == {
        **p("What was I doing at step 77?"),
        "type": "value",
        "field": "action",
    }
    assert p("what was in front of me at t=5")["field"] == "facing"
    assert p("Which area was I in at step 9?")["ref"] == {"op": "step", "t": 9}
    assert p("How many saplings did I have at step 9?")["field"] == "count:sapling"
    assert p("How thirsty was I, i.e. my drink level, at step 9?")["field"] == "vital:drink"
    assert p("step 1,204: where was I?")["ref"] == {"op": "step", "t": 1204}


@pytest.mark.parametrize(
    "q,d",
    [
        ("What did I do two steps after my 3rd wood collection?", 2),
        ("What did I do 2 steps later than my 3rd wood collection?", 2),
        ("What did I do four steps before I collected wood for the third time?", -4),
        ("What did I do right after my 3rd wood collection?", 1),
        ("What did I do just before my 3rd wood collection?", -1),
        ("What did I do immediately prior to my 3rd wood collection?", -1),
        ("On the step following my 3rd wood collection, what did I do?", 1),
        ("After I collected wood for the 3rd time, what did I do 5 steps later?", 5),
    ],
)
def test_offsets(q, d):
    got = p(q)
    assert got["field"] == "action"
    assert got["ref"] == {"op": "offset", "base": occ("ev", "collect_wood", 3), "d": d}


def test_ranges_and_counts():
    count = p("How many times did I drink water between step 40 and step 90?")["count"]
    assert count == occ("ev", "collect_drink", within={"op": "range", "lo": 40, "hi": 90})
    assert p("How often did I eat a cow before step 300?")["count"]["within"] == {"op": "range", "hi": 299}
    assert p("How often did I eat a cow after step 300?")["count"]["within"] == {"op": "range", "lo": 301}
    assert p("Count my cow meals in steps 5-50.")["count"]["within"] == {"op": "range", "lo": 5, "hi": 50}
    within = p("How many times did I place a table during my second visit to zone-1-2?")["count"]["within"]
    assert within == {"op": "visit", "name": "zone-1-2", "k": 2}
    assert p("How many separate visits did I pay to the forest?")["count"] == occ("visit", "forest")
    visits = p("Before step 500, how many times had I been in zone-0-3?")["count"]
    assert visits == occ("visit", "zone-0-3", within={"op": "range", "hi": 499})


@pytest.mark.parametrize(
    "q,edge,k",
    [
        ("When did my 2nd visit to zone-1-2 begin?", "start", 2),
        ("When did I enter the forest for the 4th time?", "start", 4),
        ("When did I arrive at zone-1-2 for the last time?", "start", -1),
        ("When did my third stay in the lake shore end?", "end", 3),
        ("What was the last step of my 2nd trip to zone-1-2?", "end", 2),
        ("When did I leave the cave for the first time?", "end", 1),
    ],
)
def test_visit_begin_and_end(q, edge, k):
    name = next(lab for lab in VOCAB["labels"] if lab in q)
    assert p(q)["ref"] == {"op": "visit", "name": name, "k": k, "edge": edge}


def test_offset_from_a_visit_edge():
    got = p("Where was I 3 steps after my 2nd visit to zone-1-2 ended?")
    assert got["ref"] == {
        "op": "offset",
        "base": {"op": "visit", "name": "zone-1-2", "k": 2, "edge": "end"},
        "d": 3,
    }


def test_chains():
    e1, e2 = occ("ev", "collect_wood", 2), "place_table"
    want = {"op": "offset", "base": occ("ev", e2, 1, after=e1), "d": 3}
    for q in (
        "What did I do 3 steps after the first table placement that followed my 2nd wood collection?",
        "After my second wood collection, when I next placed a table, what did I do three steps later?",
        "Take my 2nd wood collection; then the next time I placed a table - what did I do 3 steps after that?",
    ):
        assert p(q)["ref"] == want, q
    inside = p("During my 3rd visit to the forest, where was I when I collected wood for the 2nd time?")
    assert inside["field"] == "where"
    assert inside["ref"] == occ("ev", "collect_wood", 2, within={"op": "visit", "name": "forest", "k": 3})


def test_order_questions():
    for q in (
        "Which came first: my 2nd wood collection or my first table placement?",
        "Did I collect wood for the 2nd time first, or place a table for the first time first?",
        "Which happened earlier, the 2nd time I collected wood or the 1st time I placed a table?",
    ):
        got = p(q)
        assert got["type"] == "order", q
        assert got["order"] == [occ("ev", "collect_wood", 2), occ("ev", "place_table", 1)], q


def test_unknown_question_is_untyped():
    assert not parse_question("tell me a story about dragons").typed()
    assert not parse_question("").typed()


@pytest.fixture(scope="module")
def episode():
    recs = crafter_data.load_rollout(2, 1200)
    return recs, EpisodeIndex(build_units(recs))


def test_own_phrasings_resolve_to_the_ground_truth(episode):
    """Every template of our own phrasing file, filled over a real episode: the parse resolved over the units
    gives the generator's answer (computed from the raw records)."""
    recs, idx = episode
    qs, _notes = questions.generate(recs, phrasings.load(PHRASINGS), "seed2", key="parser-test")
    assert len(qs) >= 110
    wrong = []
    for q in qs:
        query = parse_question(q.text, idx.vocab)
        got = resolve(idx, query, idx.last_t)[0] if query.typed() else None
        if norm(got) != norm(q.answer):
            wrong.append((q.text, q.answer, got))
    assert not wrong, wrong[:5]


def test_parse_independent_of_hash_seed(episode):
    recs, idx = episode
    qs, _ = questions.generate(recs, phrasings.load(PHRASINGS), "seed2", key="hash-test")
    texts = [q.text for q in qs]
    code = (
        "import json, sys\n"
        "from libraryfs.features.episodes.anchors import parse_question\n"
        "vocab, texts = json.load(sys.stdin)\n"
        "print(json.dumps([parse_question(t, vocab).to_json() for t in texts]))\n"
    )
    outs = []
    for seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        r = subprocess.run(
            [sys.executable, "-c", code],
            input=json.dumps([idx.vocab, texts]),
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=True,
        )
        outs.append(r.stdout)
    assert outs[0] == outs[1]


@pytest.mark.parametrize(
    "q,want",
    [
        (
            "times i drank water between 100 and 400",
            {"type": "count", "within": {"op": "range", "lo": 100, "hi": 400}},
        ),
        ("no. of wood collections before step 800", {"type": "count", "within": {"op": "range", "hi": 799}}),
        ("visits to zone-1-2 in total", {"type": "count"}),
        ("When did I walk out of zone-1-2 for the 2nd time?", {"edge": "end", "k": 2}),
        ("When did my energy go back up for the 2nd time?", {"kind": "rise", "name": "energy"}),
        ("When did my health take a hit for the 3rd time?", {"kind": "drop", "name": "health", "k": 3}),
        ("When was wood first taken from my inventory?", {"kind": "lose", "name": "wood", "k": 1}),
        (
            "which happened later: my 2nd table placement or my 5th wood collection?",
            {"type": "order", "field": "later"},
        ),
        ("2nd time i collected wood - what step", {"type": "step", "k": 2}),
        ("food at the 2nd decrease of wood", {"field": "vital:food", "kind": "lose", "name": "wood"}),
    ],
)
def test_casual_and_terse_phrasings(q, want):
    got = p(q)
    flat = {**got, **(got["ref"] or {}), **(got["count"] or {})}
    assert {k: flat.get(k) for k in want} == want, got


def test_the_needle_prefilter_changes_no_tagging(episode, monkeypatch):
    """``_Text.longest`` skips compiling a pattern none of whose literal needles (``tagging._needles``) occurs
    in the text (issue 18: compiling the ~100 vocabulary patterns was most of a fresh process's parse). Over
    every generated question and the terse phrasings: the tagging is the same without the prefilter, and
    every pattern that matches a text contains one of its needles."""
    import re

    from libraryfs.features.episodes import tagging

    recs, idx = episode
    qs, _ = questions.generate(recs, phrasings.load(PHRASINGS), "seed2", key="needle-test")
    texts = [q.text for q in qs] + [
        "times i drank water between 100 and 400",
        "When did I walk out of zone-1-2 for the 2nd time?",
        "food at the 2nd decrease of wood",
        "where did I last drink water?",
        "how many wooden pickaxes did I craft after the lake shore?",
    ]
    seen: dict[str, tuple[str, ...] | None] = {}
    needles = tagging._needles

    def recording(pat: str):
        seen[pat] = needles(pat)
        return seen[pat]

    monkeypatch.setattr(tagging, "_needles", recording)
    with_filter = [tagging.tag(t, idx.vocab) for t in texts]
    monkeypatch.setattr(tagging, "_needles", lambda pat: None)
    without = [tagging.tag(t, idx.vocab) for t in texts]
    assert with_filter == without
    assert len(seen) > 80 and sum(v is not None for v in seen.values()) > 0.8 * len(seen)
    normalised = [tagging._prenormalise(t) for t in texts] + [
        " " + w + " " for w in idx.vocab.get("labels", [])
    ]
    for pat, need in seen.items():
        if need is None:
            continue
        rx = re.compile(pat)
        for s in normalised:
            if rx.search(s):
                assert any(n in s for n in need), (pat, need, s)


def _former_structure(pat: str, i: int = 0):
    """The character-by-character scan ``tagging._structure`` replaced (the reference it must equal)."""

    def class_end(j: int):
        j += 1
        if j < len(pat) and pat[j] == "^":
            j += 1
        if j < len(pat) and pat[j] == "]":
            j += 1
        while j < len(pat):
            if pat[j] == "\\":
                j += 2
                continue
            if pat[j] == "]":
                return j
            j += 1
        return None

    while i < len(pat):
        c = pat[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            j = class_end(i)
            if j is None:
                yield i, None
                return
            i = j + 1
            continue
        yield i, c
        i += 1


def _patterns_parsed(episode, monkeypatch, key: str) -> set[str]:
    """Every pattern ``tagging._needles`` is asked about while the first 40 generated questions (``key``)
    are parsed."""
    from libraryfs.features.episodes import tagging

    recs, idx = episode
    qs, _ = questions.generate(recs, phrasings.load(PHRASINGS), "seed2", key=key)
    seen: set[str] = set()
    needles = tagging._needles.__wrapped__

    def recording(pat: str):
        seen.add(pat)
        return needles(pat)

    monkeypatch.setattr(tagging, "_needles", recording)
    for q in qs[:40]:
        parse_question(q.text, idx.vocab)
    return seen


def test_the_structure_scan_equals_the_character_loop(episode, monkeypatch):
    """``tagging._structure`` (one regular-expression step per escape, class or structural character) yields
    the ``(``, ``)``, ``|`` and unclosed-class marks the former character loop yielded, from every start, on every pattern parsing the generated
    questions compiles or prefilters, and on random strings of regular-expression characters; and the
    needles of optional groups (``(?:the )?zone``) are what follows them."""
    import random

    from libraryfs.features.episodes import tagging

    needles = tagging._needles.__wrapped__
    seen = _patterns_parsed(episode, monkeypatch, "structure-test")
    rng = random.Random(7)
    pats = sorted(seen) + [
        "".join(rng.choice("ab()|[]^\\?*{}0,\n") for _ in range(rng.randrange(0, 30))) for _ in range(3000)
    ]
    assert len(seen) > 100
    for pat in pats:
        for i in range(0, len(pat) + 1, max(1, len(pat) // 5)):
            want = [(j, c) for j, c in _former_structure(pat, i) if c is None or c in "()|"]
            assert list(tagging._structure(pat, i)) == want, (pat, i)
    assert needles("(?:the )?zone[ _-]?1(?: area)?(?![\\w])") == ("zone",)
    assert needles(r"\b(?:the )?(?:very )?(?:step|moment) x") == ("step", "moment")
    assert (
        needles("(?:ab){2}c") is None and needles("(?:ab){0,2}c") == ("c",) and needles("(?:the )?") is None
    )


def _former_split_top(pat: str):
    """The former ``tagging._split_top`` (a walk over the structure characters): the reference."""
    parts, depth, start = [], 0, 0
    for i, c in _former_structure(pat):
        if c is None:
            return [None]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                return [None]
        elif c == "|" and depth == 0:
            parts.append(pat[start:i])
            start = i + 1
    if depth:
        return [None]
    parts.append(pat[start:])
    return parts


def test_the_top_level_split_equals_the_former_walk(episode, monkeypatch):
    """``tagging._split_top`` (escapes, classes and innermost groups blanked out in C) splits every pattern
    the parser meets, and 5,000 random pattern-like strings, as the former walk over the structure
    characters did (unbalanced brackets and unclosed classes included)."""
    import random

    from libraryfs.features.episodes import tagging

    seen = _patterns_parsed(episode, monkeypatch, "split-test")
    rng = random.Random(11)
    pats = sorted(seen) + [
        "".join(rng.choice("ab()|[]^\\\\?*_\\n") for _ in range(rng.randrange(0, 30))) for _ in range(5000)
    ]
    for pat in pats:
        assert tagging._split_top(pat) == _former_split_top(pat), pat
