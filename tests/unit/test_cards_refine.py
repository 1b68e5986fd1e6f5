"""REFINE acts only on trace evidence, and every change it makes is reverted byte for byte.

The tree is a real directory (DirTree); the seeded tree is champ-dataset's 89 concepts (`cards seed --champ`).
Traces are solver traces written out by hand: each tier record names the exact cards its prompt held and
its attempts' answers; the gold answer is "9".
"""

import json
import os

import pytest
from click.testing import CliRunner

from libraryfs.cli.main import cli
from libraryfs.features.cards.audit import RevertConflict, RevertError, moves, records, revert
from libraryfs.features.cards.cards import Card, all_card_paths, block_paths, read_card, write_card
from libraryfs.features.cards.evidence import card_evidence, readings
from libraryfs.features.cards.learn import DUPLICATE_JACCARD, similarity
from libraryfs.features.cards.refine import refine
from libraryfs.fs.tree import DirTree
from libraryfs_bench.cards.replay import seed_champ

RIGHT, WRONG = "9", "2"


def tr(pid, *tiers, domain="number-theory"):
    """A trace of problem ``pid``: ``tiers`` are (tier, card paths, answers)."""
    recs = [
        {"tier": t, "cards": list(cards), "attempts": [{"answer": a, "text": ""} for a in ans]}
        for t, cards, ans in tiers
    ]
    final = tiers[-1][2][0]
    return {
        "problem_id": pid,
        "problem": f"problem {pid}",
        "domain": domain,
        "gold": RIGHT,
        "exit_tier": tiers[-1][0],
        "answer": final,
        "correct": final == RIGHT,
        "tiers": recs,
    }


def snapshot(root) -> dict[str, bytes]:
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if rel != os.path.join("cards", "AUDIT.jsonl"):
                with open(p, "rb") as f:
                    out[rel] = f.read()
    return out


@pytest.fixture(scope="module")
def champ_seed(tmp_path_factory):
    """One seeded tree per module; tests copy its snapshot into their own directory."""
    root = tmp_path_factory.mktemp("seed")
    seed_champ(DirTree(root))
    return snapshot(root)


@pytest.fixture
def seeded(tmp_path, champ_seed):
    for rel, data in champ_seed.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return DirTree(tmp_path)


def failed_block_traces(tree, n=3, domain="number-theory"):
    """``n`` problems that failed at medium reading the whole block (universal cards included), each also
    solved in another run at the easy tier (no cards): the old REFINE demoted every card they read."""
    block = block_paths(tree, "medium", domain)
    out = []
    for i in range(n):
        pid = f"F{i}"
        out.append(
            tr(pid, ("easy", [], [RIGHT, WRONG]), ("medium", block, [WRONG, WRONG, "3"]), domain=domain)
        )
        out.append(tr(pid, ("easy", [], [RIGHT, RIGHT]), domain=domain))
    return out


def test_refine_without_traces_changes_nothing(seeded):
    before = snapshot(seeded.root)
    assert refine(seeded, []) == []
    assert snapshot(seeded.root) == before
    assert not seeded.exists("cards/AUDIT.jsonl")


def test_refine_leaves_blocks_no_trace_read_byte_identical(seeded):
    """Failed traces in (medium, number-theory): that block and universal/ are re-scored, nothing is merged
    or demoted (the old REFINE merged 39 of 165 cards by word overlap and demoted every card these read),
    and every other block keeps its exact bytes."""
    before = snapshot(seeded.root)
    traces = failed_block_traces(seeded)
    read = set(block_paths(seeded, "medium", "number-theory"))
    recs = refine(seeded, traces)
    assert {r["op"] for r in recs} == {"rescore"}
    assert {r["path"] for r in recs} == read
    after = snapshot(seeded.root)
    assert after.keys() == before.keys()  # nothing moved, nothing added
    changed = {p for p in before if before[p] != after[p]}
    assert changed == read
    untouched_blocks = {os.path.dirname(p) for p in before} - {
        "cards/medium/number-theory",
        "cards/universal",
    }
    assert len(untouched_blocks) == 9  # 5 domains x 2 tiers, minus the one read
    c = read_card(seeded, sorted(read)[0])
    assert (c.uses, c.helped, c.hurt) == (3, 0, 3)
    # a second pass over the same traces counts nothing again
    assert refine(seeded, traces) == []
    assert snapshot(seeded.root) == after


def mk(tree, cid, body, tier="medium", domain="combinatorics"):
    c = Card(id=cid, type="lemma", tier=tier, domain=domain, title=cid, body=body)
    write_card(tree, c)
    return c.path


def test_merge_needs_interchangeable_use_not_word_overlap(tmp_path):
    tree = DirTree(tmp_path)
    # near-identical wording, always read together: no evidence they are interchangeable
    amgm2 = mk(tree, "am-gm-2", "For nonnegative reals a, b: (a + b) / 2 >= sqrt(ab), equality iff a = b.")
    amhm2 = mk(
        tree, "am-hm-2", "For nonnegative reals a, b: (a + b) / 2 >= 2ab / (a + b), equality iff a = b."
    )
    # no shared words, but each alone solves the same problems and without both they fail
    sub_a = mk(tree, "stars-and-bars", "Distribute n identical balls into k boxes: C(n+k-1, k-1) ways.")
    sub_b = mk(tree, "gen-function", "Coefficient of x^n in (1-x)^(-k) counts multisets of size n.")
    assert similarity(read_card(tree, amgm2), read_card(tree, amhm2)) >= DUPLICATE_JACCARD  # old rule: merged
    traces = []
    for i in range(3):
        pid = f"S{i}"
        traces.append(tr(pid, ("easy", [], [WRONG, "5"]), ("medium", [amgm2, amhm2, sub_a], [RIGHT] * 3)))
        traces.append(
            tr(pid, ("easy", [], [WRONG, "5"]), ("medium", [amgm2, amhm2, sub_b], [RIGHT] * 2 + [WRONG]))
        )
        traces.append(tr(pid, ("easy", [], [WRONG, "5"]), ("medium", [amgm2, amhm2], [WRONG] * 3)))
    recs = refine(tree, traces)
    merges = [r for r in recs if r["op"] == "merge"]
    assert len(merges) == 1
    assert {merges[0]["path"], merges[0]["demoted"]} == {sub_a, sub_b}
    assert merges[0]["evidence"] == {"support": 3.0, "contra": 0.0}
    live = all_card_paths(tree)
    assert amgm2 in live and amhm2 in live  # word overlap alone never merges
    kept = read_card(tree, merges[0]["path"])
    assert kept.provenance == [] and tree.exists(merges[0]["to"])
    assert not any(r["op"] == "demote" for r in recs)


def test_merge_needs_enough_support_and_no_contradiction(tmp_path):
    tree = DirTree(tmp_path)
    a = mk(tree, "a", "first")
    b = mk(tree, "b", "second")
    traces = []
    for i in range(2):  # two problems of support: below the default 3
        traces += [tr(f"P{i}", ("medium", [a], [RIGHT] * 3)), tr(f"P{i}", ("medium", [b], [RIGHT] * 3))]
        traces.append(tr(f"P{i}", ("easy", [], [WRONG, WRONG])))
    assert not any(r["op"] == "merge" for r in refine(tree, traces))
    # a third supporting problem, but a fourth where only one of them works: net 2 < 3
    traces += [tr("P2", ("medium", [a], [RIGHT] * 3)), tr("P2", ("medium", [b], [RIGHT] * 3))]
    traces += [tr("P2", ("easy", [], [WRONG, WRONG]))]
    traces += [tr("P3", ("medium", [a], [RIGHT] * 3)), tr("P3", ("medium", [b], [WRONG] * 3))]
    assert not any(r["op"] == "merge" for r in refine(tree, traces))
    assert refine(tree, traces, min_evidence=2.0)[-1]["op"] == "merge"


def test_three_failed_problems_do_not_demote_the_cards_they_read(seeded):
    traces = failed_block_traces(seeded, n=3, domain="combinatorics")
    ev = card_evidence(readings(traces, {}, lambda g, a: g == a))
    block = block_paths(seeded, "medium", "combinatorics")
    assert {p for p in ev} == set(block)
    assert all(e.hurt == pytest.approx(3 / len(block)) and e.help == 0 for e in ev.values())
    recs = refine(seeded, traces)
    assert not [r for r in recs if r["op"] != "rescore"]
    assert set(all_card_paths(seeded)) >= set(block)


def test_demotion_needs_isolated_hurt_evidence(tmp_path):
    """A card added to a block: on the same problems the block without it succeeded and with it failed."""
    tree = DirTree(tmp_path)
    base = [mk(tree, f"c{i}", f"card number {i}") for i in range(3)]
    new = mk(tree, "misleading", "a wrong shortcut")
    uni = mk(tree, "check", "check small cases", tier="universal", domain="universal")
    block = [*base, uni]

    def pair(pid, with_new_ok: bool):
        good, bad = [RIGHT, RIGHT, WRONG], [WRONG, WRONG, RIGHT]
        return [
            tr(pid, ("medium", block, good if not with_new_ok else bad)),
            tr(pid, ("medium", [*block, new], good if with_new_ok else bad)),
        ]

    traces = pair("Q0", False) + pair("Q1", False)
    assert [r["op"] for r in refine(tree, traces) if r["op"] != "rescore"] == []  # 2 problems: not enough
    traces += pair("Q2", False)
    recs = [r for r in refine(tree, traces) if r["op"] != "rescore"]
    assert [(r["op"], r["path"]) for r in recs] == [("demote", new)]
    assert recs[0]["evidence"] == {"hurt": 3.0, "help": 0.0}
    assert sorted(all_card_paths(tree)) == sorted(block)
    # help evidence on other problems offsets hurt: revert, add two problems where it helped, net 1 < 3
    revert(tree, [recs[0]["id"]])
    recs = refine(tree, traces + pair("H0", True) + pair("H1", True))
    assert not any(r["op"] == "demote" for r in recs)


def evidence_traces(tree):
    """Traces that make REFINE rescore, merge and demote on the seeded tree (combinatorics, medium)."""
    block = block_paths(tree, "medium", "combinatorics")
    own = [p for p in block if p.startswith("cards/medium/")]
    a, b, bad = own[0], own[1], own[2]
    rest = [p for p in block if p not in (a, b, bad)]
    traces = []
    for i in range(3):
        pid = f"M{i}"
        traces.append(tr(pid, ("medium", [*rest, a], [RIGHT] * 3), domain="combinatorics"))
        traces.append(tr(pid, ("medium", [*rest, b], [RIGHT] * 3), domain="combinatorics"))
        traces.append(tr(pid, ("medium", rest, [WRONG] * 3), domain="combinatorics"))
        pid = f"D{i}"
        traces.append(tr(pid, ("medium", [*rest, bad], [WRONG] * 3), domain="combinatorics"))
        traces.append(tr(pid, ("medium", rest, [RIGHT] * 3), domain="combinatorics"))
    return traces, (a, b, bad)


def test_every_change_reverts_to_the_exact_bytes(seeded):
    before = snapshot(seeded.root)
    traces, (a, b, bad) = evidence_traces(seeded)
    recs = refine(seeded, traces)
    ops = [r["op"] for r in recs]
    assert ops.count("merge") == 1 and ops.count("demote") == 1 and "rescore" in ops
    mid = snapshot(seeded.root)
    assert mid != before
    assert moves(seeded)[bad].startswith("cards/attic/")
    # undo the whole run by its id: every file (moved, rewritten, re-scored) has its old bytes back
    done = revert(seeded, [recs[0]["run"]])
    assert len(done) == len(recs)
    assert snapshot(seeded.root) == before  # every file, moved back, with its exact bytes
    assert all_card_paths(seeded) == sorted(p for p in before if p.endswith(".md"))
    assert moves(seeded) == {}
    with pytest.raises(RevertError, match="already reverted"):
        revert(seeded, [recs[0]["id"]])
    # reverting the reverts redoes the run, byte for byte
    for r in reversed(done):
        revert(seeded, [r["id"]])
    assert snapshot(seeded.root) == mid
    assert moves(seeded)[bad].startswith("cards/attic/")


def test_revert_refuses_when_a_later_change_touched_the_file(seeded):
    traces, _ = evidence_traces(seeded)
    first = refine(seeded, traces[:1])  # rescore of the cards one trace read
    refine(seeded, traces[1:2])  # re-scores the same universal cards again
    before = snapshot(seeded.root)
    shared = next(r for r in first if r["path"].startswith("cards/universal/"))
    with pytest.raises(RevertConflict, match="was changed since by change"):
        revert(seeded, [shared["id"]])
    assert snapshot(seeded.root) == before  # nothing written
    with pytest.raises(RevertError, match="no change"):
        revert(seeded, ["nope"])
    revert(seeded, last=2 * len(first))  # newest first: the second run, then the first
    assert all(read_card(seeded, p).uses == 0 for p in all_card_paths(seeded))


def test_cli_refine_log_revert(seeded, tmp_path):
    traces, (a, b, bad) = evidence_traces(seeded)
    tf = tmp_path / "traces.jsonl"
    tf.write_text("".join(json.dumps(t) + "\n" for t in traces))
    before = snapshot(seeded.root)
    run = CliRunner()
    r = run.invoke(cli, ["cards", "refine", str(tf), "--tree", seeded.root])
    assert r.exit_code == 0, r.output
    assert "demote" in r.output and "merge" in r.output
    mid = snapshot(seeded.root)
    r = run.invoke(cli, ["cards", "log", "--tree", seeded.root, "--last", "0"])
    assert r.exit_code == 0 and bad in r.output and "[reverted]" not in r.output
    demote_id = next(x["id"] for x in records(seeded) if x["op"] == "demote")
    r = run.invoke(cli, ["cards", "revert", demote_id, "--tree", seeded.root])
    assert r.exit_code == 0, r.output
    attic = moves(DirTree(seeded.root)).get(bad)
    assert attic is None and not seeded.exists(bad.replace("cards/", "cards/attic/", 1))
    assert seeded.read_bytes(bad) == mid[bad.replace("cards/", "cards/attic/", 1)]
    r = run.invoke(cli, ["cards", "log", "--tree", seeded.root])
    assert f"{demote_id}" in r.output and "[reverted]" in r.output
    r = run.invoke(cli, ["cards", "revert", "--last", "1000", "--tree", seeded.root])
    assert r.exit_code == 0, r.output
    assert {p: v for p, v in snapshot(seeded.root).items()} == before
    for bad_args, code in ((["revert"], 2), (["revert", "x", "--last", "1"], 2), (["revert", "zzz"], 1)):
        r = run.invoke(cli, ["cards", *bad_args, "--tree", seeded.root])
        assert r.exit_code == code, (bad_args, r.output)
    r = run.invoke(cli, ["cards", "refine", str(tf), "--tree", seeded.root, "--min-evidence", "0"])
    assert r.exit_code == 2


def test_a_change_that_fails_half_way_is_recorded_and_reverts(tmp_path):
    tree = DirTree(tmp_path)
    a, b = (
        write_card(
            tree,
            Card(
                id=i,
                type="lemma",
                tier="medium",
                domain="combinatorics",
                title=i,
                body=i,
                provenance=[f"champ:{i}"],
            ),
        )
        for i in ("a", "b")
    )
    before = snapshot(tmp_path)
    os.makedirs(tmp_path / "cards/attic/medium/combinatorics/a.md")  # the merged-away card cannot move there
    os.makedirs(tmp_path / "cards/attic/medium/combinatorics/b.md")
    traces = []
    for i in range(3):
        traces += [tr(f"P{i}", ("medium", [a], [RIGHT] * 3)), tr(f"P{i}", ("medium", [b], [RIGHT] * 3))]
        traces.append(tr(f"P{i}", ("easy", [], [WRONG, WRONG])))
    with pytest.raises(OSError):
        refine(tree, traces)
    merge = records(tree)[-1]
    assert merge["op"] == "merge" and "Error" in merge["error"]
    assert [f["path"] for f in merge["files"]] == [merge["path"]]  # provenance written, move not done
    revert(tree, [merge["run"]])
    assert {p: v for p, v in snapshot(tmp_path).items()} == before
    with pytest.raises(RevertError, match="no change left"):
        revert(tree, [merge["run"]])
