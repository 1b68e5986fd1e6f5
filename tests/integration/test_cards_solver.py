"""The tiered solver and its CLI end to end over a real loopback OpenAI-compatible server."""

import json
import re

import pytest
from click.testing import CliRunner
from helpers.llm_server import LLMServer, chat_client

from libraryfs.cli.main import cli
from libraryfs.features.cards.cards import Card, write_card
from libraryfs.features.cards.solver import solve
from libraryfs.fs.tree import DirTree

PROBLEM = "How many strings of length 6 over {1,2,3} have adjacent digits differing by at most 1?"


@pytest.fixture
def tree(tmp_path):
    t = DirTree(tmp_path / "lib")
    for tier in ("medium", "hard"):
        for dom in ("combinatorics", "number-theory"):
            write_card(
                t,
                Card(
                    id=f"{tier}-{dom}",
                    type="lemma",
                    tier=tier,
                    domain=dom,
                    title=f"TITLE-{tier}-{dom}",
                    body=f"BODY-{tier}-{dom}",
                ),
            )
    write_card(
        t,
        Card(
            id="uni",
            type="verification",
            tier="universal",
            domain="universal",
            title="TITLE-universal",
            body="BODY-universal",
        ),
    )
    return t


def card_usage(req, content):
    """Token counts the card tests assert on: 10 per request message, 5 per reply."""
    return {"prompt_tokens": 10 * len(req.messages), "completion_tokens": 5}


def scripted(answers_by_tier):
    """Responder: the answer depends on which block's cards the prompt holds (none → easy)."""

    def respond(req):
        user = req.user_text
        m = re.search(r"TITLE-(medium|hard)-", user)
        tier = m.group(1) if m else "easy"
        seq = answers_by_tier[tier]
        return f"Work...\n\\boxed{{{seq.pop(0)}}}" if seq else "no idea"

    return respond


def card_titles(req):
    return sorted(set(re.findall(r"TITLE-[a-z-]+", req.user_text)))


def test_easy_exit_reads_no_cards(tree):
    with LLMServer(
        default=scripted({"easy": ["239", "239"], "medium": [], "hard": []}), usage=card_usage
    ) as srv:
        t = solve(PROBLEM, tree, chat_client(srv.base_url, "m"), domain="combinatorics", gold="239")
        assert len(srv.requests) == 2
        assert all(card_titles(r) == [] for r in srv.requests)
    assert (t["exit_tier"], t["answer"], t["correct"], t["calls"]) == ("easy", "239", True, 2)
    assert t["cards_read"] == [] and t["tiers"][0]["cards"] == [] and t["tiers"][0]["card_tokens"] == 0
    assert (t["prompt_tokens"], t["completion_tokens"]) == (40, 10)  # server usage: 20 + 5 per call


def test_escalation_reads_exactly_its_block(tree):
    script = {"easy": ["1", "2"], "medium": ["3", "4", "5"], "hard": ["239", "7", "239", "8", "9"]}
    with LLMServer(default=scripted(script), usage=card_usage) as srv:
        t = solve(PROBLEM, tree, chat_client(srv.base_url, "m"), domain="combinatorics", gold="239")
        seen = [card_titles(r) for r in srv.requests]
    assert (t["exit_tier"], t["answer"], t["correct"], t["calls"]) == ("hard", "239", True, 10)
    assert seen[:2] == [[], []]
    assert all(s == ["TITLE-medium-combinatorics", "TITLE-universal"] for s in seen[2:5])
    assert all(s == ["TITLE-hard-combinatorics", "TITLE-universal"] for s in seen[5:])
    assert [r["cards"] for r in t["tiers"]] == [
        [],
        ["cards/medium/combinatorics/medium-combinatorics.md", "cards/universal/uni.md"],
        ["cards/hard/combinatorics/hard-combinatorics.md", "cards/universal/uni.md"],
    ]
    assert [r["card_tokens"] > 10 for r in t["tiers"]] == [False, True, True]


def test_failed_calls_count_and_unparsable_answers(tree):
    calls = {"n": 0}

    def respond(req):
        calls["n"] += 1
        return 400 if calls["n"] == 1 else "The answer is 5."

    with LLMServer(default=respond, usage=card_usage) as srv:
        t = solve(PROBLEM, tree, chat_client(srv.base_url, "m"), domain="number-theory")
    assert t["tiers"][0]["attempts"][0]["error"].startswith("Rejected: HTTP 400")
    assert (t["exit_tier"], t["answer"], t["calls"], t["correct"]) == ("medium", "5", 5, None)


def test_cli_solve_with_tree_and_env(tree, tmp_path, monkeypatch):
    script = {"easy": ["1", "2"], "medium": ["x^2", "x^{2}", "5"], "hard": []}
    out = tmp_path / "traces.jsonl"
    with LLMServer(default=scripted(script), usage=card_usage) as srv:
        monkeypatch.setenv("LIBRARYFS_LLM_BASE_URL", srv.base_url)
        monkeypatch.setenv("LIBRARYFS_LLM_MODEL", "m")
        r = CliRunner().invoke(
            cli, ["solve", PROBLEM, "--tree", tree.root, "--domain", "combinatorics", "--trace-out", str(out)]
        )
    assert r.exit_code == 0, r.output
    assert "answer: x^2" in r.output and "exit tier: medium" in r.output
    assert "cards/medium/combinatorics/medium-combinatorics.md" in r.output
    trace = json.loads(out.read_text())
    assert trace["exit_tier"] == "medium" and trace["calls"] == 5


def test_cli_solve_without_llm_is_a_user_error(monkeypatch, tmp_path):
    monkeypatch.delenv("LIBRARYFS_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("LIBRARYFS_LLM_MODEL", raising=False)
    r = CliRunner().invoke(cli, ["solve", "1+1?", "--tree", str(tmp_path)])
    assert r.exit_code == 1 and "no LLM configured" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(cli, ["solve", "1+1?", "--tree", str(tmp_path), "--domain", "Bad Domain"])
    assert r.exit_code == 1 and "slug" in r.output


def test_cli_block_and_bench(tree, tmp_path, monkeypatch):
    r = CliRunner().invoke(cli, ["cards", "block", "medium", "number-theory", "--tree", tree.root])
    assert r.output.split() == [
        "cards/medium/number-theory/medium-number-theory.md",
        "cards/universal/uni.md",
    ]
    r = CliRunner().invoke(cli, ["cards", "block", "easy", "number-theory", "--tree", tree.root])
    assert r.exit_code == 0 and r.output == ""
    probs = tmp_path / "p.jsonl"
    probs.write_text(
        json.dumps({"id": "a", "problem": PROBLEM, "answer": "239", "domain": "combinatorics"})
        + "\n"
        + json.dumps({"id": "b", "problem": "Find 2+2.", "answer": "4"})
        + "\n"
    )

    def respond(req):
        user = req.user_text
        if "2+2" in user:
            return "\\boxed{4}"
        return "\\boxed{239}" if "TITLE-" in user else f"\\boxed{{{len(srv.requests)}}}"

    with LLMServer(default=respond, usage=card_usage) as srv:
        r = CliRunner().invoke(
            cli,
            [
                "cards",
                "bench",
                str(probs),
                "--tree",
                tree.root,
                "--llm-base-url",
                srv.base_url,
                "--llm-model",
                "m",
                "--out",
                str(tmp_path / "res.json"),
            ],
        )
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "res.json").read_text())
    assert res["methods"]["tiered"] == {
        "accuracy": 1.0,
        "mean_calls": 3.5,
        "mean_tokens": 87.5,
    }  # 25 tokens a call
    assert res["methods"]["best-of-5"]["accuracy"] == 0.5
    assert res["exit_histogram"] == {"easy": 1, "medium": 1, "hard": 0, "fallback": 0}


def test_cli_solve_and_block_with_library(libdir, monkeypatch, tmp_path):
    from libraryfs.fs.tree import open_tree

    t = open_tree(str(libdir))
    try:
        write_card(
            t,
            Card(
                id="lib-card",
                type="lemma",
                tier="medium",
                domain="combinatorics",
                title="TITLE-medium-combinatorics",
                body="from the store",
            ),
        )
    finally:
        t.close()
    monkeypatch.setenv("LIBRARYFS_LIBRARY", str(libdir))
    r = CliRunner().invoke(cli, ["cards", "block", "medium", "combinatorics"])
    assert r.exit_code == 0 and r.output.split() == ["cards/medium/combinatorics/lib-card.md"]
    script = {"easy": ["1", "2"], "medium": ["6", "6", "6"], "hard": []}
    with LLMServer(default=scripted(script), usage=card_usage) as srv:
        r = CliRunner().invoke(
            cli,
            [
                "solve",
                PROBLEM,
                "--domain",
                "combinatorics",
                "--llm-base-url",
                srv.base_url,
                "--llm-model",
                "m",
                "--json",
            ],
        )
        assert "from the store" in srv.requests[2].user_text
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["cards_read"] == ["cards/medium/combinatorics/lib-card.md"]
    r = CliRunner().invoke(cli, ["cards", "block", "medium", "x", "--library", str(tmp_path / "nolib")])
    assert r.exit_code == 1 and "not a libraryfs library" in r.output
