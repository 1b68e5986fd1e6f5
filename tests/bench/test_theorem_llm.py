"""The paper's LLM agent end to end over real HTTP against a scripted loopback server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from helpers.theorem_llm_server import ScriptedLLM  # noqa: E402

from libraryfs_bench.theorem.llm_agent import make_client, run_llm_trial  # noqa: E402
from libraryfs_bench.theorem.reftoc import render_dir  # noqa: E402
from libraryfs_bench.theorem.stores import StoreSpec, write_item_store, write_paper_store  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write_paper_store(tmp_path_factory.mktemp("lib"), StoreSpec("hash", 200, 3, 1000))


@pytest.mark.parametrize(
    "condition,pages,index,sections",
    [
        ("INDEXED", 1, 1, 0),
        ("DEEP-INDEXED", 1, 1, 1),
        ("INDEXED-CORRUPTED", None, 1, 0),
    ],
)
def test_indexed_conditions_end_to_end(store, condition, pages, index, sections):
    with ScriptedLLM() as srv:
        rec = run_llm_trial(make_client(srv.url, "k"), "scripted", condition, store, store.target, 200, 3)
        reqs = srv.requests
    if condition == "INDEXED-CORRUPTED":
        # the scripted model trusts the (shuffled) TOC; whatever happens, the counts follow the paper's rules
        assert rec.index_reads == 1 and rec.num_turns == len(reqs)
        return
    assert rec.correct and rec.answered and rec.answer == store.target[1]
    assert (rec.page_reads, rec.index_reads, rec.section_index_reads) == (pages, index, sections)
    assert rec.num_turns == len(reqs) == pages + index + sections + 1
    assert all(r["temperature"] == 0 and r["max_tokens"] == 256 for r in reqs)
    # the whole history is re-sent: each request holds every earlier message
    for earlier, later in zip(reqs, reqs[1:], strict=False):
        assert later["messages"][: len(earlier["messages"])] == earlier["messages"]
        assert len(later["messages"]) == len(earlier["messages"]) + 2
    # tool results are the store's files, verbatim
    tool_texts = [m["content"] for m in reqs[-1]["messages"] if m["role"] == "tool"]
    assert tool_texts[0] == store.index_path(condition).read_text()
    assert rec.total_tokens == sum(  # usage summed over calls
        sum(len(json.dumps(m)) for m in r["messages"]) // 4 + 10 for r in reqs
    )


def test_flat_scan_matches_target_page(store):
    with ScriptedLLM() as srv:
        rec = run_llm_trial(make_client(srv.url, "k"), "scripted", "FLAT", store, store.target, 200, 3)
    assert rec.correct
    assert rec.page_reads == store.flat_target_page
    assert [t["function"]["name"] for t in srv.requests[0]["tools"]] == ["read_page", "submit_answer"]


def test_stop_rules_and_errors(store):
    # a text reply stops the trial unanswered
    with ScriptedLLM(script=[{"text": "no idea"}]) as srv:
        rec = run_llm_trial(make_client(srv.url, "k"), "scripted", "FLAT", store, store.target, 200, 3)
    assert not rec.answered and not rec.correct and rec.num_turns == 1
    # an HTTP error is recorded and stops
    with ScriptedLLM(script=[{"status": 500, "text": "boom"}]) as srv:
        rec = run_llm_trial(make_client(srv.url, "k"), "scripted", "FLAT", store, store.target, 200, 3)
    assert rec.error and rec.num_turns == 0
    # max_turns bounds the loop; a wrong answer is scored wrong; bad JSON args read page 1
    script = [
        {"name": "read_page", "raw_args": "{oops"},
        {"name": "submit_answer", "args": {"value": "zzzzq"}},
    ]
    with ScriptedLLM(script=list(script)) as srv:
        rec = run_llm_trial(make_client(srv.url, "k"), "scripted", "FLAT", store, store.target, 200, 3)
    assert rec.page_reads == 1 and rec.answered and rec.answer == "ZZZZ" and not rec.correct
    with ScriptedLLM(script=[{"name": "read_page", "args": {"page_num": 1}}] * 5) as srv:
        rec = run_llm_trial(
            make_client(srv.url, "k"), "scripted", "FLAT", store, store.target, 200, 3, max_turns=3
        )
    assert rec.num_turns == 3 and rec.page_reads == 3 and not rec.answered


def test_auto_follows_index_pages(tmp_path):
    items = write_item_store(tmp_path, StoreSpec("hash", 600, 1, 1000))
    render_dir(items.dir, budget_tokens=400)  # forces .index/ pages
    with ScriptedLLM() as srv:
        rec = run_llm_trial(make_client(srv.url, "k"), "scripted", "AUTO", items, items.target, 600, 1)
    assert rec.correct, srv.requests[-1]["messages"][-1]
    assert rec.page_reads == 1 and rec.index_reads >= 2


def test_cli_llm_mode(tmp_path):
    from click.testing import CliRunner

    from libraryfs_bench.cli import bench

    with ScriptedLLM() as srv:
        res = CliRunner().invoke(
            bench,
            [
                "theorem",
                "--dir",
                str(tmp_path / "root"),
                "--n",
                "100",
                "--conditions",
                "INDEXED,DEEP-INDEXED,AUTO",
                "--content",
                "hash",
                "--trials",
                "2",
                "--steps",
                "0",
                "--no-plots",
                "--out",
                str(tmp_path / "out"),
                "--llm-model",
                "scripted",
                "--base-url",
                srv.url,
                "--api-key",
                "k",
            ],
        )
    assert res.exit_code == 0, res.output
    trials = [json.loads(line) for line in (tmp_path / "out" / "trials.jsonl").read_text().splitlines()]
    assert len(trials) == 6 and all(t["model"] == "scripted" and t["correct"] for t in trials)
    assert len(srv.requests) == sum(t["num_turns"] for t in trials)
