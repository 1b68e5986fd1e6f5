"""Units against Crafter's ground truth; deterministic text extraction; anchor parsing of generated
questions against their gold anchor tuples; builder over a library store (no mount)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from libraryfs.features.episodes.anchors import parse_question
from libraryfs.features.episodes.builder import EpisodeBuilder
from libraryfs.features.episodes.recall import EpisodeIndex
from libraryfs.features.episodes.units import EpisodeState, extract_text, unit_from_line
from libraryfs.fs.store import Store
from libraryfs.fs.tree import StoreTree
from libraryfs_bench.episodes import crafter_data, questions
from libraryfs_bench.episodes.bench import build_units

crafter = pytest.importorskip("crafter")


def test_units_match_crafter_ground_truth():
    """Step a real env with a fixed action script; each unit equals what Crafter's info says."""
    env = crafter.Env(seed=11)
    env.reset()
    names = crafter_data._id_names(env)
    rng = np.random.default_rng(0)
    _, _, done, info = env.step(0)
    prev_ach = {k: 0 for k in info["achievements"]}
    prev_inv: dict = {}
    state = EpisodeState()
    counts: dict[str, int] = {}
    action = "start"
    for t in range(150):
        rec = crafter_data._record(env, info, t, action, names, prev_ach, prev_inv)
        u = unit_from_line(json.dumps(rec))
        state.mark(u)
        x, y = (int(v) for v in info["player_pos"])
        assert u.position == [x, y] and u.location == f"zone-{x // 16}-{y // 16}"
        assert u.inventory == {
            k: v for k, v in info["inventory"].items() if v > 0 and k not in crafter_data.VITALS
        }
        assert u.vitals == {k: info["inventory"][k] for k in crafter_data.VITALS}
        sem = info["semantic"]
        near = set()
        for dx in range(-2, 3):
            for dy in range(-2, 3):
                if 0 <= x + dx < 64 and 0 <= y + dy < 64:
                    near.add(names.get(int(sem[x + dx, y + dy])))
        assert set(u.objects) == near - {"grass", "sand", "path", "player", None}
        for e, n in info["achievements"].items():  # events = achievement increments; ordinals count them
            if t and n > prev_ach[e]:
                assert e in u.events
                counts[e] = counts.get(e, 0) + 1
                assert u.marks["ev"][e] == counts[e]
        assert u.action == action
        prev_ach = dict(info["achievements"])
        prev_inv = {k: v for k, v in info["inventory"].items() if k not in crafter_data.VITALS}
        if done:
            break
        a = int(rng.integers(0, 6)) if t % 7 else 5
        action = env.action_names[a]
        _, _, done, info = env.step(a)


def test_text_extraction_recovers_structured_fields():
    recs = crafter_data.load_rollout(2, 1200)[:300]
    for r in recs:
        s = unit_from_line(r)
        x = extract_text(r["t"], r["text"])
        assert (x.action, x.location, x.position, x.facing) == (s.action, s.location, s.position, s.facing)
        assert (x.objects, x.events, x.inventory, x.vitals) == (s.objects, s.events, s.inventory, s.vitals)
        assert (x.gained or [], x.lost or []) == (s.gained, s.lost)


@pytest.mark.parametrize("seed", [0, 4])
def test_anchor_parsing_matches_gold(seed):
    recs = crafter_data.load_rollout(seed, 1200)
    idx = EpisodeIndex(build_units(recs))
    qs = questions.generate(recs, 15, seed=seed)
    assert len(qs) >= 60
    for q in qs:
        a = parse_question(q.text, idx.vocab)
        sp = q.spec
        assert (a.focus, a.kind, a.name, a.offset) == (
            sp["focus"],
            sp["kind"],
            sp["name"],
            sp["offset"],
        ), q.text
        if sp["kind"] and sp["focus"] != "count":
            assert a.k == sp["k"], q.text
        if sp.get("t") is not None:
            assert a.target_t == sp["t"], q.text
        if sp.get("range"):
            assert list(a.t_range) == sp["range"], q.text


def test_parse_free_phrasings():
    a = parse_question("what did I do 3 steps before I crafted a stone pickaxe for the 2nd time")
    assert (a.focus, a.kind, a.name, a.k, a.offset) == ("action", "ev", "make_stone_pickaxe", 2, -3)
    a = parse_question("How much wood did I have right after I last obtained the wood sword?")
    assert (a.focus, a.kind, a.name, a.k, a.offset) == ("inv:wood", "gain", "wood_sword", -1, 1)
    assert not parse_question("tell me a story").any()


def test_builder_on_store_incremental(libdir):
    recs = crafter_data.load_rollout(2, 1200)[:120]
    store = Store(libdir)
    try:
        tree = StoreTree(store)
        b = EpisodeBuilder(tree, store)
        tree.write_bytes(
            "episodes/e1/steps.jsonl", "".join(json.dumps(r) + "\n" for r in recs[:100]).encode()
        )
        tree.append_bytes("episodes/e1/steps.jsonl", json.dumps(recs[100])[:40].encode())  # partial line
        rep = b.build("e1")
        assert rep.new_units == 100
        tree.append_bytes("episodes/e1/steps.jsonl", (json.dumps(recs[100])[40:] + "\nnot json\n").encode())
        rep = b.build("e1")
        assert rep.new_units == 1 and len(rep.errors) == 1
        for r in recs[101:]:
            b.append("e1", r)
        units = b.db.units("e1")
        assert [u.t for u in units] == list(range(120))
        full = EpisodeBuilder(tree, store)
        full.build("e1", rebuild=True)
        assert [u.to_json() for u in full.db.units("e1")] == [u.to_json() for u in units]
        assert tree.read_bytes("episodes/e1/steps/000042.md").startswith(b"# step 42:")
        assert tree.exists("episodes/e1/visits/" + recs[0]["place"] + "/1.md")
    finally:
        store.close()
