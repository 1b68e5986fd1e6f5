"""Units: the input contract (every field kept, deltas and labels derived when absent), units against
Crafter's ground truth, deterministic text extraction, the builder over a library store (no mount)."""

from __future__ import annotations

import json

import crafter
import numpy as np
import pytest

from libraryfs.features.episodes.builder import EpisodeBuilder
from libraryfs.features.episodes.extract import extract_text
from libraryfs.features.episodes.index import EpisodeIndex
from libraryfs.features.episodes.units import EpisodeState, unit_from_line
from libraryfs.fs.store import Store
from libraryfs.fs.tree import StoreTree
from libraryfs_bench.episodes import crafter_data
from libraryfs_bench.episodes.bench import build_units

WORKED = {  # the worked example of docs/episodes.md
    "t": 412,
    "action": "do",
    "place": "zone-2-2",
    "area": "forest",
    "position": [34, 40],
    "facing": "tree",
    "nearby": ["cow", "tree"],
    "achievements": ["collect_wood"],
    "inventory": {"wood": 3, "sapling": 1},
    "inventory_delta": {"wood": 1},
    "vitals": {"health": 9, "food": 6, "drink": 7, "energy": 8},
    "vitals_delta": {"food": -1},
    "observation": "I chopped the oak at the edge of the forest; a cow watched.",
    "weather": "rain",
    "mood": {"calm": True},
}


def _marked(*recs: dict):
    st = EpisodeState()
    return [st.mark(unit_from_line(r)) for r in recs], st


def test_every_field_is_kept():
    (u,), _ = _marked(WORKED)
    assert u.locations == {"place": "zone-2-2", "area": "forest"} and u.location == "zone-2-2"
    assert (u.action, u.facing, u.objects, u.events, u.position) == (
        "do",
        "tree",
        ["cow", "tree"],
        ["collect_wood"],
        [34, 40],
    )
    assert u.inventory == {"sapling": 1, "wood": 3} and u.inventory_delta == {"wood": 1}
    assert u.vitals == WORKED["vitals"] and u.vitals_delta == {"food": -1}
    assert u.gained == ["wood"] and u.lost == [] and u.drops == ["food"] and u.rises == []
    assert u.observation == WORKED["observation"]
    assert u.extra == {"weather": "rain", "mood": {"calm": True}}
    assert u.marks == {
        "visit": {"place": 1, "area": 1},
        "ev": {"collect_wood": 1},
        "gain": {"wood": 1},
        "drop": {"food": 1},
    }


def test_absent_fields_are_derived_and_labels_carried():
    units, st = _marked(
        {"t": 0, "place": "hall", "area": "north wing", "inventory": {"key": 1}, "vitals": {"health": 5}},
        {
            "t": 1,
            "inventory_delta": {"key": -1, "coin": 2},
            "vitals": {"health": 3},
        },  # no labels, no inventory
        {"t": 2, "place": "kitchen", "inventory": {"coin": 5}},  # area carried, vitals carried
        {"t": 3, "locations": {"room": "pantry", "floor": "1"}, "gained": ["spoon"]},
    )
    u0, u1, u2, u3 = units
    assert u1.locations == {"place": "hall", "area": "north wing"} and "visit" not in u1.marks
    assert u1.inventory == {"coin": 2} and u1.gained == ["coin"] and u1.lost == ["key"]
    assert u1.vitals_delta == {"health": -2} and u1.marks["drop"] == {"health": 1}
    assert u2.inventory_delta == {"coin": 3} and u2.vitals == {"health": 3} and u2.vitals_delta == {}
    assert u2.marks["visit"] == {"place": 1} and u2.locations["area"] == "north wing"
    assert u3.locations == {"place": "kitchen", "area": "north wing", "room": "pantry", "floor": "1"}
    assert u3.gained == ["spoon"] and u3.marks["visit"] == {"room": 1, "floor": 1}
    assert st.visits == {
        "place": {"hall": 1, "kitchen": 1},
        "area": {"north wing": 1},
        "room": {"pantry": 1},
        "floor": {"1": 1},
    }


@pytest.mark.parametrize(
    "line",
    [
        '{"t": "x"}',
        '{"t": 1, "inventory": [1]}',
        '{"t": 1, "vitals_delta": {"food": "lots"}}',
        "[1, 2]",
        "{bad",
        '{"t": 1, "objects": 5}',  # these three were a TypeError, which `episode build` did not catch
        '{"t": 1, "relations": 5}',
        '{"t": 1, "position": [[1]]}',
    ],
)
def test_bad_records_raise_value_error(line):
    with pytest.raises(ValueError):
        unit_from_line(line)


def test_append_refuses_what_build_would_refuse_and_writes_nothing(libdir):
    """Trial 1203b finding 9: ``episode append ep '{"t": "x"}'`` wrote the line (exit 0) and the build then
    reported it as a bad line; a wrong-shaped field (``"objects": 5``) ended the build in a TypeError. Now
    append checks the build's rule (``units.check_step``; a missing ``t`` still takes the next number) and
    writes nothing for a record it refuses."""
    store = Store(libdir)
    try:
        tree = StoreTree(store)
        b = EpisodeBuilder(tree, store)
        assert b.append("e1", '{"action": "noop"}').new_units == 1
        before = tree.read_bytes("episodes/e1/steps.jsonl")
        for bad in ('{"t": "x"}', '{"t": null}', '{"t": true}', '{"objects": 5}', '{"inventory": [1]}'):
            with pytest.raises(ValueError):
                b.append("e1", bad)
        assert tree.read_bytes("episodes/e1/steps.jsonl") == before
        rep = b.append("e1", {"t": 7, "action": "walk"})
        assert rep.new_units == 1 and rep.errors == [], rep.errors
        assert [u.t for u in b.db.units("e1")] == [0, 7]
        tree.append_bytes("episodes/e1/steps.jsonl", b'{"t": 8, "relations": 5}\n')  # written by hand
        rep = b.build("e1")
        assert rep.new_units == 0 and len(rep.errors) == 1 and "wrong shape" in rep.errors[0], rep.errors
    finally:
        store.close()


def test_text_only_record_is_extracted_and_kept_as_observation():
    text = "Step 7: action do. At (3, 4) in zone-0-0, area lake shore. Facing water. Events: collect_drink."
    (u,), _ = _marked({"t": 7, "text": text, "action": "do"})
    assert (u.source, u.location, u.locations["area"], u.facing, u.events) == (
        "text", "zone-0-0", "lake shore", "water", ["collect_drink"]
    )  # fmt: skip
    assert u.observation == text and "text" not in u.extra


def test_units_match_crafter_ground_truth():
    """Step a real env with a fixed action script; each unit equals what Crafter's info says."""
    env = crafter.Env(seed=11)
    env.reset()
    names = crafter_data._id_names(env)
    rng = np.random.default_rng(0)
    _, _, done, info = env.step(0)
    prev_ach = {k: 0 for k in info["achievements"]}
    prev: dict | None = None
    state = EpisodeState()
    counts: dict[str, int] = {}
    action = "start"
    for t in range(150):
        rec = crafter_data._record(env, info, t, action, names, prev_ach, prev)
        u = state.mark(unit_from_line(json.dumps(rec)))
        x, y = (int(v) for v in info["player_pos"])
        assert u.position == [x, y] and u.location == f"zone-{x // 16}-{y // 16}"
        assert u.locations["area"] in ("forest", "grassland", "lake shore", "mountain", "cave")
        inv = {k: v for k, v in info["inventory"].items() if v > 0 and k not in crafter_data.VITALS}
        assert u.inventory == inv
        if prev is not None:
            assert u.inventory_delta == {
                k: inv.get(k, 0) - prev["inventory"].get(k, 0)
                for k in set(inv) | set(prev["inventory"])
                if inv.get(k, 0) != prev["inventory"].get(k, 0)
            }
        assert u.vitals == {k: info["inventory"][k] for k in crafter_data.VITALS}
        sem = info["semantic"]
        near = {
            names.get(int(sem[x + dx, y + dy]))
            for dx in range(-2, 3)
            for dy in range(-2, 3)
            if 0 <= x + dx < 64 and 0 <= y + dy < 64
        }
        assert set(u.objects) == near - {"grass", "sand", "path", "player", None}
        for e, n in info["achievements"].items():  # events = achievement increments; ordinals count them
            if t and n > prev_ach[e]:
                counts[e] = counts.get(e, 0) + 1
                assert e in u.events and u.marks["ev"][e] == counts[e]
        assert u.action == action and u.observation
        prev_ach, prev = dict(info["achievements"]), rec
        if done:
            break
        a = int(rng.integers(0, 6)) if t % 7 else 5
        action = env.action_names[a]
        _, _, done, info = env.step(a)


def test_text_extraction_recovers_structured_fields():
    recs = crafter_data.load_rollout(2, 1200)[:300]
    st_s, st_x = EpisodeState(), EpisodeState()
    for r in recs:
        s = st_s.mark(unit_from_line(r))
        x = st_x.mark(extract_text(r["t"], r["text"]))
        assert (x.action, x.locations, x.position, x.facing) == (s.action, s.locations, s.position, s.facing)
        assert (x.objects, x.events, x.inventory, x.vitals) == (s.objects, s.events, s.inventory, s.vitals)
        assert (x.inventory_delta, x.vitals_delta, x.marks) == (s.inventory_delta, s.vitals_delta, s.marks)


def test_area_labels_have_hysteresis():
    assert crafter_data.area_of({"tree": 0.5}, None) == "forest"
    assert crafter_data.area_of({"tree": 0.15, "grass": 0.85}, "forest") == "forest"  # kept above 0.6 × 0.2
    assert crafter_data.area_of({"tree": 0.1, "grass": 0.9}, "forest") == "grassland"
    assert crafter_data.area_of({"water": 0.2, "tree": 0.3}, None) == "forest"  # larger ratio wins


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
        step = tree.read_bytes("episodes/e1/steps/000042.md").decode()
        assert step.startswith("# step 42:") and "- observation: " in step and '"life": 1' in step
        assert tree.exists("episodes/e1/visits/" + recs[0]["place"] + "/1.md")
        assert tree.exists("episodes/e1/visits/" + recs[0]["area"] + "/1.md")
        # the units equal the bench's in-memory build, and the index sees both label kinds
        assert [u.to_json() for u in units] == [u.to_json() for u in build_units(recs)]
        idx = EpisodeIndex(units)
        assert recs[0]["area"] in idx.vocab["labels:area"] and recs[0]["place"] in idx.vocab["labels:place"]
        # a stored state of an older unit format triggers a full rebuild
        meta = b.db.meta("e1")
        meta["state"]["version"] = 1
        b.db.put("e1", [], meta)
        assert b.build("e1").rebuilt
    finally:
        store.close()


def _files(tree: StoreTree, rel: str) -> dict[str, bytes]:
    """Every regular file under ``rel``: relative path → bytes."""
    out: dict[str, bytes] = {}
    for name in tree.listdir(rel):
        p = f"{rel}/{name}"
        if tree.isdir(p):
            out.update(_files(tree, p))
        else:
            out[p] = tree.read_bytes(p)
    return out


def test_builds_cut_anywhere_write_the_views_of_one_build(libdir, tmp_path):
    """A writer may find ``steps.jsonl`` half-appended (the indexer's hook runs while an agent appends):
    builds over every prefix cut at arbitrary bytes (mid-line, inside visits of both label kinds) leave the
    same units and the same view files, byte for byte, as one build of the whole file."""
    recs = crafter_data.load_rollout(3, 1200)[:400]
    data = "".join(json.dumps(r) + "\n" for r in recs).encode()
    cuts = [len(data) * k // 23 + 17 * k for k in range(1, 23)]  # not on line ends
    assert any(data[c - 1 : c] != b"\n" for c in cuts)
    Store.create(tmp_path / "lib2", {"toc_max_tokens": 2000}).close()
    stores = [Store(libdir), Store(tmp_path / "lib2")]
    try:
        once, cut = (StoreTree(s) for s in stores)
        once.write_bytes("episodes/e/steps.jsonl", data)
        EpisodeBuilder(once, stores[0]).build("e")
        b = EpisodeBuilder(cut, stores[1])
        prev = 0
        for c in [*cuts, len(data)]:
            cut.append_bytes("episodes/e/steps.jsonl", data[prev:c])
            b.build("e")
            prev = c
        assert b.db.meta("e")["units"] == len(recs)
        want, got = _files(once, "episodes/e"), _files(cut, "episodes/e")
        assert sorted(got) == sorted(want)
        assert {p for p in want if "/visits/" in p and p.endswith("/2.md")}  # visits of several labels
        assert [p for p in want if got[p] != want[p]] == []
    finally:
        for s in stores:
            s.close()
