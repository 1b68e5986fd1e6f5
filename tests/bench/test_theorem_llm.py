"""The paper's LLM agent end to end over real HTTP against a scripted loopback server."""

from __future__ import annotations

import json
import re

import pytest
from helpers.llm_server import LLMServer, Reply, Request, Status

from libraryfs_bench.theorem.agents import parse_links
from libraryfs_bench.theorem.llm_agent import make_client, run_llm_trial
from libraryfs_bench.theorem.reftoc import render_dir
from libraryfs_bench.theorem.stores import StoreSpec, write_item_store, write_paper_store

_RANGE = re.compile(r"(Page|Section)\s+(\d+):\s+keys\s+(\S+)\s*[–-]\s*(\S+)")


def _num(x: str):
    return int(x) if x.isdigit() else x


def protocol_model(req: Request) -> Reply:
    """The scripted model's next message (a tool call or text), read only from the conversation it is sent:
    it asks for the index, reads the covering page (or scans pages for FLAT), follows INDEX.md links (AUTO),
    and submits the value it saw."""
    body = req.json
    msgs = body["messages"]
    tools = {t["function"]["name"] for t in body.get("tools", [])}
    key = re.search(r"key (\S+?)\.?$", msgs[1]["content"]).group(1)
    tool_msgs = [m for m in msgs if m["role"] == "tool"]
    calls = [tc for m in msgs if m["role"] == "assistant" for tc in m.get("tool_calls", [])]
    last = tool_msgs[-1]["content"] if tool_msgs else None
    last_call = calls[-1]["function"] if calls else None

    def call(name: str, **args) -> Reply:
        return Reply(None, tool_calls=[{"name": name, "arguments": args}])

    if last is None:
        if "get_index" in tools:
            return call("get_index")
        if "read_file" in tools:
            return call("read_file", path=key if "INDEX.md" not in msgs[0]["content"] else "INDEX.md")
        return call("read_page", page_num=1)
    for part in re.split(r",\s|\n", last):
        if "→" in part and part.split("→")[0].split(":")[-1].strip() == key:
            return call("submit_answer", value=part.split("→", 1)[1].strip())
    if last_call["name"] in ("get_index", "get_section_index"):
        for kind, num, lo, hi in _RANGE.findall(last):
            if _num(lo) <= _num(key) <= _num(hi):
                if kind == "Section":
                    return call("get_section_index", section_num=int(num))
                return call("read_page", page_num=int(num))
        return Reply("The index does not cover the key.")
    if last_call["name"] == "read_page":
        n = json.loads(last_call["arguments"])["page_num"]
        return call("read_page", page_num=n + 1)
    if last_call["name"] == "read_file":
        here = json.loads(last_call["arguments"])["path"].rsplit("/", 1)
        base = here[0] + "/" if len(here) == 2 else ""
        for label, href, _rest in parse_links(
            last
        ):  # links, and the bare names of a leaf page (TOC_FORMAT 5)
            if label == key:
                return call("read_file", path=base + href)
            if "…" in label:
                lo, hi = (s.strip() for s in label.split("…"))
                if _num(lo) <= _num(key) <= _num(hi):
                    return call("read_file", path=base + href)
    return Reply("I could not find it.")


def theorem_usage(req: Request, content: str) -> dict:
    """Token counts the trials sum: a quarter of the JSON of the messages sent, 10 per reply."""
    return {"prompt_tokens": sum(len(json.dumps(m)) for m in req.messages) // 4, "completion_tokens": 10}


def server(*script) -> LLMServer:
    """The loopback endpoint: ``script`` answers the first requests in order, then :func:`protocol_model`."""
    srv = LLMServer(default=protocol_model, usage=theorem_usage)
    srv.script(*script)
    return srv


def tool(name: str, arguments) -> Reply:
    """A reply that calls one tool (``arguments``: a dict, or raw text sent as is)."""
    return Reply(None, tool_calls=[{"name": name, "arguments": arguments}])


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
    with server() as srv:
        rec = run_llm_trial(
            make_client(srv.base_url, "k"), "scripted", condition, store, store.target, 200, 3
        )
        reqs = [r.json for r in srv.requests]
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
    with server() as srv:
        rec = run_llm_trial(make_client(srv.base_url, "k"), "scripted", "FLAT", store, store.target, 200, 3)
    assert rec.correct
    assert rec.page_reads == store.flat_target_page
    assert [t["function"]["name"] for t in srv.requests[0].json["tools"]] == ["read_page", "submit_answer"]


def test_stop_rules_and_errors(store):
    # a text reply stops the trial unanswered
    with server(Reply("no idea")) as srv:
        rec = run_llm_trial(make_client(srv.base_url, "k"), "scripted", "FLAT", store, store.target, 200, 3)
    assert not rec.answered and not rec.correct and rec.num_turns == 1
    # an HTTP error is recorded and stops
    with server(Status(500, "boom")) as srv:
        rec = run_llm_trial(make_client(srv.base_url, "k"), "scripted", "FLAT", store, store.target, 200, 3)
    assert rec.error and rec.num_turns == 0
    # max_turns bounds the loop; a wrong answer is scored wrong; bad JSON args read page 1
    script = [tool("read_page", "{oops"), tool("submit_answer", {"value": "zzzzq"})]
    with server(*script) as srv:
        rec = run_llm_trial(make_client(srv.base_url, "k"), "scripted", "FLAT", store, store.target, 200, 3)
    assert rec.page_reads == 1 and rec.answered and rec.answer == "ZZZZ" and not rec.correct
    with server(*[tool("read_page", {"page_num": 1})] * 5) as srv:
        rec = run_llm_trial(
            make_client(srv.base_url, "k"), "scripted", "FLAT", store, store.target, 200, 3, max_turns=3
        )
    assert rec.num_turns == 3 and rec.page_reads == 3 and not rec.answered


def test_auto_follows_index_pages(tmp_path):
    items = write_item_store(tmp_path, StoreSpec("hash", 600, 1, 1000))
    render_dir(items.dir, budget_tokens=400)  # forces .index/ pages
    with server() as srv:
        rec = run_llm_trial(make_client(srv.base_url, "k"), "scripted", "AUTO", items, items.target, 600, 1)
    assert rec.correct, srv.requests[-1].messages[-1]
    assert rec.page_reads == 1 and rec.index_reads >= 2


def test_cli_llm_mode(tmp_path):
    from click.testing import CliRunner

    from libraryfs_bench.cli import bench

    with server() as srv:
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
                srv.base_url,
                "--api-key",
                "k",
            ],
        )
    assert res.exit_code == 0, res.output
    trials = [json.loads(line) for line in (tmp_path / "out" / "trials.jsonl").read_text().splitlines()]
    assert len(trials) == 6 and all(t["model"] == "scripted" and t["correct"] for t in trials)
    assert len(srv.requests) == sum(t["num_turns"] for t in trials)
