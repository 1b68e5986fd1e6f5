"""Smoke test of the findability benchmark (issue 13 item 1) on a tiny corpus, end to end.

Real parts only: the corpus is built with the real CLI (init, mount with its indexer, ingest), every
navigator reads through the real FUSE mount, and the LLM navigator talks to a real OpenAI-compatible HTTP
server on loopback (``tests/helpers/llm_server.py``) whose scripted "model" reads only the conversation it is sent:
it reads INDEX.md, follows the link line sharing most words with the request, and answers the entry it
reached. The flat baselines must find every known-name target (each name occurs in exactly one note).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.facility import unavailable  # noqa: E402
from helpers.llm_server import LLMServer, Reply  # noqa: E402
from helpers.mount import fuse_available  # noqa: E402

NOTES = {
    "garden/tomatoes.md": "# Tomatoes\n\nStake the tomato plants in May; water at the roots, never the leaves. "
    "Blight shows as brown spots: remove the leaves at once.\n",
    "garden/compost.md": "# Compost\n\nLayer green kitchen scraps with brown dry leaves; turn the heap every "
    "two weeks so it stays warm and smells of earth, not ammonia.\n",
    "garden/pruning.md": "# Pruning\n\nCut roses back in late winter above an outward-facing bud.\n",
    "kitchen/sourdough.md": "# Sourdough\n\nFeed the starter flour and water daily; bake when it doubles in "
    "four hours. Autolyse the dough thirty minutes before adding salt.\n",
    "kitchen/stock.md": "# Stock\n\nSimmer roasted bones with onion, carrot and celery for six hours; skim "
    "the scum, strain, and chill so the fat sets on top.\n",
    "kitchen/pickles.md": "# Pickles\n\nBrine cucumbers in five percent salt water with dill and garlic.\n",
    "bikes/chain.md": "# Chain\n\nClean the drivetrain with degreaser, then oil each roller and wipe the "
    "outside dry. Replace the chain at 0.5% stretch.\n",
    "bikes/tubeless.md": "# Tubeless\n\nSeat the bead with a burst of air, add sealant through the valve, "
    "spin the wheel so it coats the tyre.\n",
    "bikes/brakes.md": "# Brakes\n\nBleed hydraulic brakes with mineral oil when the lever feels spongy.\n",
}
QUERIES = [  # (kind, query, target)
    ("name", "Sourdough", "notes/kitchen/sourdough.md"),
    ("name", "Tubeless", "notes/bikes/tubeless.md"),
    ("name", "Compost", "notes/garden/compost.md"),
    ("name", "Pickles", "notes/kitchen/pickles.md"),
    ("topic", "oil the rollers of a bicycle drivetrain", "notes/bikes/chain.md"),
    ("topic", "simmer bones for a broth", "notes/kitchen/stock.md"),
]
NAVIGATORS = ("toc", "find", "grep", "bm25", "llm")


def scripted_model(req) -> Reply:
    """A tool-calling "model" that navigates by word overlap, reading only the messages it is sent."""
    msgs = req.json["messages"]
    want = set(re.findall(r"[a-z]+", msgs[1]["content"].split(":", 1)[1].lower()))
    tool_results = [m["content"] for m in msgs if m["role"] == "tool"]

    def call(name: str, path: str) -> Reply:
        return Reply(None, tool_calls=[{"name": name, "arguments": {"path": path}}])

    if not tool_results:
        return call("read_toc", "INDEX.md")
    last = tool_results[-1]
    m = re.match(r"\(entry (\S+)\)", last)
    if m:
        return call("answer", m.group(1))
    here = re.match(r"\(TOC page \S+; its links are relative to (\S*)/\)", last)
    base = "" if here is None or here.group(1) == "the root" else here.group(1) + "/"
    best, best_n = None, -1
    for label, target, rest in re.findall(r"^- \[([^\]]*)\]\(([^)]+)\)(.*)$", last, re.M):
        if re.search(r"\(0 entries", rest):
            continue
        n = len(want & set(re.findall(r"[a-z]+", (label + rest).lower())))
        if n > best_n:
            best, best_n = target, n
    if best is None:
        return Reply("nothing here")
    tool = "read_toc" if best.endswith("INDEX.md") or ".index/" in best else "read_entry"
    return call(tool, os.path.normpath(base + best))


@pytest.mark.mount
def test_findability_smoke(tmp_path: Path) -> None:
    why = fuse_available()
    if why:
        unavailable(why)
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    from libraryfs_bench.findability.queries import make_query
    from libraryfs_bench.findability.run import Options, run

    src = tmp_path / "notes"
    for rel, text in NOTES.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    qfile = tmp_path / "queries.jsonl"
    qfile.write_text(
        "".join(json.dumps(make_query("notes", k, q, [t], "test")) + "\n" for k, q, t in QUERIES)
    )
    out = tmp_path / "out"
    with LLMServer(default=scripted_model) as srv:
        doc = run(
            Options(
                corpora=["notes"],
                out_dir=str(out),
                custom={"notes": (str(src), str(qfile))},
                llm={"base_url": srv.base_url, "model": "scripted", "protocol": "tools", "timeout_s": 30.0},
                plots=True,
            ),
            log=lambda s: None,
        )
        reqs = srv.chat_requests()
    saved = json.loads((out / "summary.json").read_text())
    assert saved["rows"] == doc["rows"]
    assert any(r["split"] == "heldout" for r in doc["rows"])  # the id of "Compost" hashes below 0.3
    assert (out / "success.png").stat().st_size > 0 and (out / "tokens.png").stat().st_size > 0
    facts = doc["corpora"]["notes"]
    assert facts["entries"] == len(NOTES) and facts["queries"] == len(QUERIES)
    from libraryfs_bench.findability.reader import count_tokens

    assert facts["flat_tokens"] == sum(count_tokens(t.encode()) for t in NOTES.values())
    lookups = [json.loads(ln) for ln in (out / "lookups.jsonl").read_text().splitlines()]
    by_nav: dict[str, list[dict]] = {}
    for r in lookups:
        by_nav.setdefault(r["navigator"], []).append(r)
    assert set(by_nav) == set(NAVIGATORS), sorted(by_nav)
    assert {r["navigator"] for r in doc["rows"]} == set(NAVIGATORS)
    for nav in ("grep", "bm25"):  # the flat baselines find every known name, first
        names = [r for r in by_nav[nav] if r["kind"] == "name"]
        assert len(names) == 4 and all(r["hit1"] for r in names), [(r["query"], r["ranked"]) for r in names]
        assert all(r["tokens"] == facts["flat_tokens"] for r in by_nav[nav])
    for nav in ("toc", "llm"):  # walkers read through the mount: TOC pages first, counted in tokens
        for r in by_nav[nav]:
            assert r["reads"] >= 1 and r["toc_reads"] >= 1 and r["tokens"] > 0
    llm = by_nav["llm"]
    assert all(not r.get("error") for r in llm)
    answered = [r for r in llm if r["answer"]]
    assert answered and all(r["answer"].removeprefix("notes/") in NOTES for r in answered), answered
    assert sum(r["hit"] for r in llm) >= 1, [(r["query"], r["answer"], r["trace"]) for r in llm]
    assert all(r["api_tokens"] > 0 for r in llm)
    resent = [m for r in reqs for m in r.messages if m["role"] == "assistant"]  # the history goes back whole
    assert resent and all(
        m["tool_calls"][0]["function"]["name"] in ("read_toc", "read_entry") for m in resent
    )
    assert reqs and all(
        r.json["temperature"] == 0
        and {t["function"]["name"] for t in r.json["tools"]} == {"read_toc", "read_entry", "answer"}
        for r in reqs
    )
