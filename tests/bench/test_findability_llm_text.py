"""The LLM navigator's text protocol (for servers without function calling, like small local models),
against a real OpenAI-compatible HTTP server on loopback serving scripted replies."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.llm_server import LLMServer, Reply  # noqa: E402


def _library(root: Path) -> None:
    (root / "notes").mkdir()
    (root / "INDEX.md").write_text(
        "# /\n\n- [notes/](notes/INDEX.md) — 2 entries: garden, kitchen (2 entries, 40 tok)\n"
    )
    (root / "notes" / "INDEX.md").write_text(
        "# notes\n\n- [a.md](a.md) — Compost: layering scraps (20 tok)\n- [b.md](b.md) — Stock: simmer bones (20 tok)\n"
    )
    (root / "notes" / "a.md").write_text("# Compost\n\nLayer scraps.\n")
    (root / "notes" / "b.md").write_text("# Stock\n\nSimmer bones for six hours.\n")


def _navigate(root: Path, *replies: str):
    from libraryfs_bench.findability.llmnav import LLMNavigator, make_client
    from libraryfs_bench.findability.reader import Lookup

    with LLMServer() as srv:
        srv.script(*[Reply(r) for r in replies])
        nav = LLMNavigator(make_client(srv.base_url, None, 10.0), "scripted", protocol="text")
        lk = Lookup(str(root), {})
        out = nav.run("simmer bones for a broth", "topic", lk)
        return out, lk, srv.chat_requests()


def test_text_protocol_follows_relative_links_and_answers(tmp_path: Path) -> None:
    _library(tmp_path)
    out, lk, reqs = _navigate(
        tmp_path,
        "READ INDEX.md",
        "I will open the notes.\nREAD notes/INDEX.md",
        "READ `b.md`",
        "ANSWER notes/b.md",
    )
    assert out.answer == "notes/b.md" and out.error is None
    assert [(r.path, r.kind) for r in lk.reads] == [
        ("INDEX.md", "toc"),
        ("notes/INDEX.md", "toc"),
        ("notes/b.md", "entry"),
    ]
    assert len(reqs) == 4 and "tools" not in reqs[0].json
    last = reqs[-1].messages
    assert last[-1]["role"] == "user" and "Simmer bones for six hours." in last[-1]["content"]
    assert all(r.json["temperature"] == 0 for r in reqs)
    assert out.api_tokens > 0


def test_text_protocol_stops_on_a_reply_without_an_action(tmp_path: Path) -> None:
    _library(tmp_path)
    out, lk, reqs = _navigate(tmp_path, "READ INDEX.md", "The answer is probably the stock note.")
    assert out.answer is None and len(reqs) == 2 and [r.path for r in lk.reads] == ["INDEX.md"]
