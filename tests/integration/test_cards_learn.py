"""ADD and REFINE: tree changes through Tree file operations, each audited in cards/AUDIT.jsonl."""

import json

from click.testing import CliRunner
from helpers.llm_server import LLMServer, chat_client

from libraryfs.cli.main import cli
from libraryfs.features.cards.cards import (
    AUDIT_PATH,
    Card,
    all_card_paths,
    block_paths,
    read_card,
    write_card,
)
from libraryfs.features.cards.learn import add
from libraryfs.features.cards.refine import refine, score
from libraryfs.fs.tree import DirTree


def audit_lines(tree):
    return [json.loads(x) for x in tree.read_bytes(AUDIT_PATH).decode().splitlines()]


def trace(pid, exit_tier, domain="combinatorics", correct=False, cards=()):
    tiers = [{"tier": "easy", "cards": [], "attempts": [{"answer": "1", "text": "attempt text"}]}]
    if exit_tier != "easy":
        tiers.append(
            {"tier": "medium", "cards": list(cards), "attempts": [{"answer": "2", "text": "medium try"}]}
        )
    return {
        "problem_id": pid,
        "problem": f"problem {pid}",
        "domain": domain,
        "gold": "9",
        "exit_tier": exit_tier,
        "answer": "2",
        "correct": correct,
        "tiers": tiers,
    }


TEACHER_CARDS = {
    "P1": [
        {
            "type": "decomposition",
            "title": "Count by last digit",
            "body": "Split strings by their last digit and set up a linear recurrence for each class.",
        }
    ],
    # near-duplicate of P1's card: must merge, not add
    "P2": [
        {
            "type": "decomposition",
            "title": "Count by the last digit",
            "body": "Split strings by their last digit and set up a linear recurrence for each class.",
        }
    ],
    "P3": [
        {
            "type": "verification",
            "title": "Check n=1,2,3",
            "body": "Recompute small cases by brute force before trusting a recurrence.",
        }
    ],
}


def teacher(req):
    prompt = req.user_text
    pid = prompt.split("Problem: problem ")[1].split()[0]
    if pid == "P4":
        return "not json at all"
    return "```json\n" + json.dumps({"cards": TEACHER_CARDS.get(pid, [])}) + "\n```"


def test_add_distils_per_block_and_deduplicates(tmp_path):
    tree = DirTree(tmp_path)
    traces = [
        trace("P1", "medium"),
        trace("P2", "medium"),
        trace("P3", "fallback"),
        trace("P4", "hard"),
        trace("P5", "easy"),
        trace("P6", "medium", correct=True),
    ]
    with LLMServer(default=teacher) as srv:
        recs = add(tree, traces, chat_client(srv.base_url, "teach"))
        assert len(srv.requests) == 5  # P1 P2 P3, P4 twice (retry); P5 easy and P6 solved: no call
    ops = [(r["op"], r.get("trace")) for r in recs]
    assert ops == [
        ("skip", "P5"),
        ("add", "trace:P3"),
        ("skip", "P4"),  # blocks in sorted order: hard first
        ("add", "trace:P1"),
        ("dedupe", "trace:P2"),
    ]
    med = block_paths(tree, "medium", "combinatorics")
    hard = block_paths(tree, "hard", "combinatorics")
    assert len(med) == 1 and len(hard) == 1  # fallback failures go to the hard block
    c = read_card(tree, med[0])
    assert c.type == "decomposition" and c.provenance == ["trace:P1", "trace:P2"]
    assert read_card(tree, hard[0]).title == "Check n=1,2,3"
    assert [r["op"] for r in audit_lines(tree)] == [r["op"] for r in recs]


def mk(tree, cid, tier="medium", domain="combinatorics", body=None):
    c = Card(
        id=cid, type="lemma", tier=tier, domain=domain, title=cid, body=body or f"unique words for {cid}"
    )
    write_card(tree, c)
    return c.path


def reading_trace(pid, cards, ok, tier="medium", domain="combinatorics"):
    """One tier record reading exactly ``cards``; its three attempts are right (gold 9) iff ``ok``."""
    ans = ["9", "9", "2"] if ok else ["2", "2", "9"]
    return {
        "problem_id": pid,
        "problem": f"problem {pid}",
        "domain": domain,
        "gold": "9",
        "exit_tier": tier,
        "answer": ans[0],
        "correct": ok,
        "tiers": [{"tier": tier, "cards": list(cards), "attempts": [{"answer": a} for a in ans]}],
    }


def test_refine_rescores_and_relocates_on_evidence(tmp_path):
    tree = DirTree(tmp_path)
    good = mk(tree, "good", body="Split by the last digit and write a recurrence.")
    copy = mk(tree, "good-copy", body="Split by the last digit; write a recurrence.")
    uni = mk(tree, "uni", tier="universal", domain="universal", body="Check small cases first.")
    traces = []
    for i in range(3):  # with uni, combinatorics problems succeed and without it they fail ...
        traces += [reading_trace(f"A{i}", [good, uni], True), reading_trace(f"A{i}", [good], False)]
    for i in range(3):  # ... and number-theory problems the other way round
        dom = "number-theory"
        traces += [
            reading_trace(f"B{i}", [uni], False, domain=dom),
            reading_trace(f"B{i}", [], True, domain=dom),
        ]
    s = score(traces)
    assert (s[good]["uses"], s[good]["helped"], s[uni]["uses"], s[uni]["helped"]) == (6, 3, 6, 3)
    recs = refine(tree, traces)
    assert [(r["op"], r["path"]) for r in recs if r["op"] != "rescore"] == [("relocate", uni)]
    assert recs[-1]["targets"] == ["cards/medium/combinatorics/uni.md"]  # the tier where it helped
    assert recs[-1]["evidence"] == {"combinatorics": [0.0, 3.0], "number-theory": [3.0, 0.0]}
    assert all_card_paths(tree) == sorted([good, copy, "cards/medium/combinatorics/uni.md"])  # no word merge
    g = read_card(tree, good)
    assert (g.uses, g.helped, g.hurt) == (6, 3, 3)
    assert len(audit_lines(tree)) == len(recs)
    # idempotent: a second pass over the same traces finds nothing to change
    assert refine(tree, traces) == []


def test_refine_curator_edits_cards_with_some_hurt_evidence(tmp_path):
    tree = DirTree(tmp_path)
    weak = mk(tree, "weak")
    other = mk(tree, "other")
    traces = [
        reading_trace("W", [weak], False),
        reading_trace("W", [], True),
        reading_trace("X", [other], True),
    ]
    with LLMServer(
        default=lambda req: json.dumps({"title": "Sharper", "body": "A better statement."})
    ) as srv:
        recs = refine(tree, traces, chat_client(srv.base_url, "cur"))
        assert len(srv.requests) == 1  # only the card with hurt evidence (1 < 3: not demoted)
    assert [r["op"] for r in recs] == ["rescore", "rescore", "edit"]
    c = read_card(tree, weak)
    assert (c.title, c.body, c.uses, c.helped) == ("Sharper", "A better statement.", 1, 0)


def test_cli_add_refine_seed(tmp_path):
    tree = DirTree(tmp_path / "t")
    tf = tmp_path / "tr.jsonl"
    tf.write_text("\n".join(json.dumps(t) for t in [trace("P1", "medium"), trace("P3", "hard")]) + "\n")
    with LLMServer(default=teacher) as srv:
        r = CliRunner().invoke(
            cli, ["cards", "add", str(tf), "--tree", tree.root, "--base-url", srv.base_url, "--model", "t"]
        )
    assert r.exit_code == 0, r.output
    assert "changes: add 2" in r.output
    r = CliRunner().invoke(cli, ["cards", "refine", str(tf), "--tree", tree.root])
    assert r.exit_code == 0 and "changes: none" in r.output
    r = CliRunner().invoke(cli, ["cards", "refine", str(tmp_path / "missing.jsonl"), "--tree", tree.root])
    assert r.exit_code == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{nope\n")
    r = CliRunner().invoke(cli, ["cards", "refine", str(bad), "--tree", tree.root])
    assert r.exit_code == 1 and "not JSON" in r.output


def test_add_and_refine_on_a_library_store_keep_check_clean_and_tocs_current(libdir):
    """Through libraryfs.fs.tree.open_tree (store access, not mounted), then the real indexer and check."""
    from libraryfs.daemon.indexer import Indexer
    from libraryfs.fs.check import check, describe
    from libraryfs.fs.store import Store
    from libraryfs.fs.tree import open_tree

    tree = open_tree(str(libdir))
    try:
        with LLMServer(default=teacher) as srv:
            add(tree, [trace("P1", "medium"), trace("P3", "hard")], chat_client(srv.base_url, "t"))
        med = block_paths(tree, "medium", "combinatorics")
        # on three problems the block failed with the card and succeeded without it: demoted
        refine(
            tree,
            [reading_trace(f"B{i}", cards, ok) for i in range(3) for ok, cards in ((False, med), (True, []))],
        )
        assert block_paths(tree, "medium", "combinatorics") == []
        assert len(audit_lines(tree)) == 4  # add, add, rescore, demote
    finally:
        tree.close()
    Indexer(str(libdir), settle_s=0).run_once(full=True)
    tree = open_tree(str(libdir))
    try:
        hard_toc = tree.read_bytes("cards/hard/combinatorics/INDEX.md").decode()
        attic_toc = tree.read_bytes("cards/attic/medium/combinatorics/INDEX.md").decode()
        assert block_paths(tree, "hard", "combinatorics")[0].rsplit("/", 1)[1] in hard_toc
        assert med[0].rsplit("/", 1)[1] in attic_toc
        assert "AUDIT.jsonl" in tree.read_bytes("cards/INDEX.md").decode()
    finally:
        tree.close()
    st = Store(str(libdir))
    try:
        report = check(st)
        assert report.clean and not report.problems, describe(report)
    finally:
        st.close()
