"""ADD and REFINE: tree changes through Tree file operations, each audited in cards/AUDIT.jsonl."""

import json

from click.testing import CliRunner
from helpers.cards_llm_server import ScriptedLLMServer

from libraryfs.cli.main import cli
from libraryfs.features.cards.cards import (
    AUDIT_PATH,
    Card,
    all_card_paths,
    block_paths,
    read_card,
    write_card,
)
from libraryfs.features.cards.learn import add, refine, score
from libraryfs.features.cards.llm import ChatLLM
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
    prompt = req["messages"][-1]["content"]
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
    with ScriptedLLMServer(teacher) as srv:
        recs = add(tree, traces, ChatLLM(srv.base_url, "teach"))
        assert len(srv.requests) == 5  # P1 P2 P3, P4 twice (retry); P5 easy and P6 solved: no call
    ops = [(r["op"], r.get("trace")) for r in recs]
    assert ops == [
        ("skip", "P5"),
        ("add", "trace:P3"),
        ("skip", "P4"),  # blocks in sorted order: hard first
        ("add", "trace:P1"),
        ("merge", "trace:P2"),
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


def test_refine_rescores_demotes_relocates_merges(tmp_path):
    tree = DirTree(tmp_path)
    good = mk(tree, "good", body="Split by the last digit and write a recurrence.")
    bad = mk(tree, "bad", body="Every prime above three is one more or less than a multiple of six.")
    dup = mk(tree, "good-copy", body="Split by the last digit; write a recurrence.")
    uni = mk(tree, "uni", tier="universal", domain="universal", body="Check small cases first.")
    traces = []
    for i in range(4):
        traces.append(trace(f"A{i}", "medium", correct=True, cards=[good, uni]))
        traces.append(trace(f"B{i}", "medium", correct=False, cards=[bad, uni]))
    traces.append(trace("C", "medium", domain="combinatorics", correct=True, cards=[dup]))
    s = score(traces)
    assert (s[good]["uses"], s[good]["helped"], s[bad]["hurt"], s[uni]["uses"]) == (4, 4, 4, 8)
    recs = refine(tree, traces)
    ops = {(r["op"], r["path"]) for r in recs}
    assert ("demote", bad) in ops and ("relocate", uni) in ops and ("merge", good) in ops
    live = all_card_paths(tree)
    assert live == ["cards/hard/combinatorics/uni.md", good]
    assert tree.exists("cards/attic/medium/combinatorics/bad.md")
    assert tree.exists("cards/attic/medium/combinatorics/good-copy.md")
    g = read_card(tree, good)
    assert (g.uses, g.helped, g.hurt) == (4, 4, 0)
    assert read_card(tree, "cards/hard/combinatorics/uni.md").tier == "hard"
    assert len(audit_lines(tree)) == len(recs)
    # idempotent: a second pass over the same traces finds nothing to change
    assert refine(tree, traces) == []


def test_refine_curator_edits_weak_cards(tmp_path):
    tree = DirTree(tmp_path)
    weak = mk(tree, "weak")
    traces = [trace(f"W{i}", "medium", correct=i == 0, cards=[weak]) for i in range(3)]
    with ScriptedLLMServer(
        lambda req: json.dumps({"title": "Sharper", "body": "A better statement."})
    ) as srv:
        recs = refine(tree, traces, ChatLLM(srv.base_url, "cur"), demote_below=0.2)
    assert [r["op"] for r in recs] == ["rescore", "edit"]
    c = read_card(tree, weak)
    assert (c.title, c.body, c.uses, c.helped) == ("Sharper", "A better statement.", 3, 1)


def test_cli_add_refine_seed(tmp_path):
    tree = DirTree(tmp_path / "t")
    tf = tmp_path / "tr.jsonl"
    tf.write_text("\n".join(json.dumps(t) for t in [trace("P1", "medium"), trace("P3", "hard")]) + "\n")
    with ScriptedLLMServer(teacher) as srv:
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
    """Through libraryfs.layout.open_tree (store access, not mounted), then the real indexer and check."""
    from libraryfs.daemon.indexer import Indexer
    from libraryfs.fs.check import check, describe
    from libraryfs.fs.store import Store
    from libraryfs.layout import open_tree

    tree = open_tree(str(libdir))
    try:
        with ScriptedLLMServer(teacher) as srv:
            add(tree, [trace("P1", "medium"), trace("P3", "hard")], ChatLLM(srv.base_url, "t"))
        med = block_paths(tree, "medium", "combinatorics")
        refine(tree, [trace(f"B{i}", "medium", cards=med) for i in range(3)])  # hurt 3/3: demoted
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
