"""Offline evaluation: the Monte-Carlo simulator, the champ-dataset replay, and seeding cards from it."""

import json

import pytest
from click.testing import CliRunner

from libraryfs.cli.main import cli
from libraryfs.features.cards.cards import block_paths, read_card
from libraryfs.fs.tree import DirTree
from libraryfs_bench.cards.simulate import SimConfig, concordance, simulate


def test_concordance_counts_pairs():
    assert concordance([0, 1, 2], [0.9, 0.5, 0.1]) == (1.0, 3)
    assert concordance([0, 1, 2], [0.1, 0.5, 0.9]) == (0.0, 3)
    c, n = concordance([0, 0, 1], [0.9, 0.1, 0.5])  # ties in level are skipped
    assert (c, n) == (0.5, 2)


def test_simulator_equal_calls_and_signal():
    r = simulate(SimConfig(n_problems=300, seeds=2, card_lift=0.3, spread=0.8))
    m = r["methods"]
    assert m["best-of-N (equal calls)"]["mean_calls"] == pytest.approx(m["tiered"]["mean_calls"], abs=0.25)
    assert 2 <= m["tiered"]["mean_calls"] <= 10
    assert sum(r["exit_histogram"].values()) == pytest.approx(1.0)
    # with helpful cards, tiered beats Best-of-N at equal calls, and the exit tier tracks difficulty
    assert m["tiered"]["accuracy"] > m["best-of-N (equal calls)"]["accuracy"]
    assert r["concordance"] > 0.6


def test_simulator_all_solvable_exits_easy():
    r = simulate(SimConfig(n_problems=50, seeds=1, alpha=1000, beta=0.001))
    assert r["exit_histogram"]["easy"] == 1.0 and r["methods"]["tiered"]["mean_calls"] == 2.0


def test_replay_small_subset(tmp_path):
    from libraryfs_bench.cards.replay import format_table, load_records, replay

    cache = tmp_path / "classes.json"
    recs = load_records(limit=3, workers=1, cache_path=str(cache))
    assert [r["domain"] for r in recs] == ["combinatorics", "inequality", "number-theory"]
    assert all(len(r["no_card"]) == 12 and len(r["card"]) == 16 and len(r["held_out"]) == 44 for r in recs)
    assert recs[0]["gold"] == "239" and 0 in recs[0]["no_card"]  # some recorded attempt is right
    assert load_records(limit=3, cache_path=str(cache)) == recs  # served from the cache
    res = replay(recs, seeds=4)
    assert res["problems"] == 3 and 2 <= res["methods"]["tiered"]["mean_calls"] <= 10
    assert "tiered" in format_table(res) and "concordance" in format_table(res)


def test_cli_sim_and_seed(tmp_path):
    out = tmp_path / "sim.json"
    r = CliRunner().invoke(cli, ["cards", "sim", "--problems", "100", "--seeds", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "best-of-N (equal calls)" in r.output and json.loads(out.read_text())["methods"]["tiered"]
    r = CliRunner().invoke(cli, ["cards", "sim", "--spread", "1.5"])
    assert r.exit_code == 1
    r = CliRunner().invoke(cli, ["cards", "seed", "--champ", "--tree", str(tmp_path / "t")])
    assert r.exit_code == 0, r.output
    tree = DirTree(tmp_path / "t")
    nt = block_paths(tree, "medium", "number-theory")
    assert "cards/medium/number-theory/fermat-little.md" in nt
    assert block_paths(tree, "hard", "number-theory")[0].startswith("cards/hard/number-theory/")
    assert block_paths(tree, "easy", "number-theory") == []
    uni = [p for p in nt if p.startswith("cards/universal/")]
    assert uni and all(read_card(tree, p).tier == "universal" for p in uni)
    assert read_card(tree, "cards/medium/number-theory/fermat-little.md").provenance == [
        "champ:C_Fermat_little"
    ]


@pytest.fixture(scope="module")
def champ_cache(tmp_path_factory):
    """Answer-class cache of the first 8 problems (domain-interleaved: every domain) — a small real slice."""
    from libraryfs_bench.cards.replay import load_records

    cache = tmp_path_factory.mktemp("champ") / "classes.json"
    load_records(limit=8, workers=1, cache_path=str(cache))
    return cache


@pytest.fixture
def champ_slice(champ_cache):
    from libraryfs_bench.cards.replay import load_records

    return load_records(limit=8, cache_path=str(champ_cache))


def test_block_verdicts_follow_the_interval():
    from libraryfs_bench.cards.blocks import bootstrap_ci, compare

    probs = [{}] * 20
    up = compare(probs, [1.0] * 20, [0.0] * 20)
    assert (up["diff"], up["ci"], up["verdict"]) == (1.0, [1.0, 1.0], "helps")
    assert compare(probs, [0.2] * 20, [0.7] * 20)["verdict"] == "hurts"
    mixed = compare(probs, [1.0, 0.0] * 10, [0.0, 1.0] * 10)
    assert mixed["diff"] == 0 and mixed["ci"][0] < 0 < mixed["ci"][1] and mixed["verdict"] == "no evidence"
    lo, hi = bootstrap_ci([0.0, 1.0] * 50)
    assert 0.35 < lo < 0.5 < hi < 0.65


def test_split_is_fixed_by_problem_id(champ_slice):
    from libraryfs_bench.cards.blocks import split

    tune, held = split(champ_slice)
    assert tune and held and len(tune) + len(held) == len(champ_slice)
    assert {r["id"] for r in tune}.isdisjoint(r["id"] for r in held)
    t2, h2 = split(list(reversed(champ_slice)))
    assert {r["id"] for r in t2} == {r["id"] for r in tune} and {r["id"] for r in h2} == {
        r["id"] for r in held
    }
    assert split(champ_slice, held_share=0.0)[1] == [] and split(champ_slice, held_share=1.0)[0] == []


def test_block_report_shape_on_a_real_slice(champ_slice):
    from libraryfs_bench.cards.blocks import block_report, format_report

    rep = block_report(champ_slice, seeds=5)
    assert rep["split"]["tuning"] + rep["split"]["held_out"] == 8
    for part in ("tuning", "held_out"):
        rows = rep["blocks"][part]
        doms = sorted({r["block"].split("/")[1] for r in rows} - {"all"})
        assert [r["block"] for r in rows] == [f"{t}/{d}" for d in [*doms, "all"] for t in ("medium", "hard")]
        for r in rows:
            assert r["n"] >= 1 and 0 <= r["with"] <= 1 and 0 <= r["without"] <= 1 and 0 <= r["reach"] <= 1
            assert r["diff"] == pytest.approx(r["with"] - r["without"])
            assert r["ci"][0] <= r["diff"] + 1e-9 and r["diff"] <= r["ci"][1] + 1e-9
            assert r["verdict"] == (
                "helps" if r["ci"][0] > 0 else "hurts" if r["ci"][1] < 0 else "no evidence"
            )
        pol = {p["method"]: p for p in rep["policies"][part]}
        assert set(pol) == {
            "tiered, all cards",
            "tiered, no cards",
            "pruned where tuning verdict is hurts",
            "pruned where tuning diff < 0",
        }
        assert all(2 <= p["calls"] <= 10 for p in pol.values())
    text = format_report(rep)
    assert "held-out part" in text and "verdict" in text and "BoN=" in text


def test_champ_traces_refine_a_seeded_tree_only_where_read(champ_slice, tmp_path):
    from libraryfs.features.cards.cards import all_card_paths
    from libraryfs.features.cards.refine import refine
    from libraryfs_bench.cards.replay import champ_traces, seed_champ

    tree = DirTree(tmp_path)
    seed_champ(tree)
    before = {p: tree.read_bytes(p) for p in all_card_paths(tree)}
    traces = champ_traces(champ_slice)
    read = {p for t in traces for rec in t["tiers"] for p in rec["cards"]}
    assert read and all(p in before for p in read)
    assert all(len(t["tiers"][0]["attempts"]) == 12 and t["tiers"][0]["cards"] == [] for t in traces)
    recs = refine(tree, traces)
    after = {p: tree.read_bytes(p) for p in all_card_paths(tree)}
    touched = {p for r in recs for f in r.get("files", []) for p in [f["path"]]}
    assert touched <= read | {r.get("to") for r in recs}  # only cards the traces read (and where they went)
    assert {p for p in before if before[p] != after.get(p)} <= read


def test_cli_replay_blocks_and_traces(champ_cache, tmp_path):
    out, traces = tmp_path / "r.json", tmp_path / "t.jsonl"
    args = ["cards", "replay", "--problems", "8", "--seeds", "3", "--cache", str(champ_cache), "--blocks"]
    r = CliRunner().invoke(cli, [*args, "--traces-out", str(traces), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "per-block effect of the cards, held-out part:" in r.output and "verdict" in r.output
    res = json.loads(out.read_text())
    assert res["by_block"]["split"]["tuning"] + res["by_block"]["split"]["held_out"] == 8
    lines = traces.read_text().splitlines()
    assert len(lines) == 8 and [t["tier"] for t in json.loads(lines[0])["tiers"]] == [
        "easy",
        "medium",
        "hard",
    ]
