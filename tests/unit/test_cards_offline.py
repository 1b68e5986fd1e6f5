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
