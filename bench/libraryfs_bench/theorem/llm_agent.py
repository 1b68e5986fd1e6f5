"""The paper's LLM agent over the shared chat client (:class:`libraryfs.llm.client.ChatClient`), its tools
served from the store files.

Protocol (Mainen 2026, ``experiment.py``; PAPERS.md §1): a system prompt and one user message, the
condition's tools (``read_page``, ``get_index``, ``get_section_index``, ``submit_answer``; PATH/AUTO:
``read_file``), temperature 0, ``max_tokens`` 256 per reply, and the whole history re-sent on every call.
Stop rules: an API error (recorded in ``error``; the client used for the protocol tries once:
:data:`PROTOCOL_TRANSPORT_ATTEMPTS`), a reply without tool calls, ``submit_answer``, or ``max_turns`` calls. Scoring: :func:`libraryfs_bench.theorem.accounting.score` (hash: ``strip().upper()[:4]``).
Tokens: the API's ``usage.total_tokens`` summed over calls. Every tool result is the text of a file read
at call time under the store directory (through the mount when the store lives in one).
"""

from __future__ import annotations

import json
import posixpath
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from libraryfs.fs.generated import INDEX_FILE, PAGES_DIRNAME
from libraryfs_bench.theorem import protocol
from libraryfs_bench.theorem.accounting import TrialRecord, score
from libraryfs_bench.theorem.stores import ItemStore, PaperStore

if TYPE_CHECKING:
    from libraryfs.llm.client import ChatClient

#: The paper records an API failure and stops the trial: the protocol's client does not retry.
PROTOCOL_TRANSPORT_ATTEMPTS = 1


def make_client(
    base_url: str | None, api_key: str | None, timeout_s: float = 60.0, overrides: dict | None = None
) -> ChatClient:
    """The shared chat client for the paper's agent: ``base_url`` None means the ``openai`` package's
    default (``OPENAI_BASE_URL``, else OpenAI's); one try per request (:data:`PROTOCOL_TRANSPORT_ATTEMPTS`)
    unless ``overrides`` (LLM setting fields, e.g. from ``--llm-timeout-s``) say otherwise."""
    from libraryfs.llm.client import ChatClient
    from libraryfs.llm.config import LLMConfig

    cfg = LLMConfig(
        base_url=base_url,
        api_key=api_key,
        timeout_s=timeout_s,
        transport_attempts=PROTOCOL_TRANSPORT_ATTEMPTS,
    )
    for field, value in (overrides or {}).items():
        setattr(cfg, field, value)
    return ChatClient(cfg)


def _read(path: Path) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


class ToolServer:
    """Answers tool calls for one trial from the store's files and counts them the paper's way."""

    def __init__(self, condition: str, store: PaperStore | ItemStore) -> None:
        self.condition = condition
        self.store = store
        self.page_reads = 0
        self.index_reads = 0
        self.section_index_reads = 0

    def _page(self, args: dict) -> str:
        assert isinstance(self.store, PaperStore)
        self.page_reads += 1
        try:
            pn = int(args.get("page_num", 1))
            return _read(self.store.page_path(self.condition, pn))
        except (ValueError, TypeError, FileNotFoundError):
            return f"Page {args.get('page_num')} not found. Valid range: 1–{self.store.num_pages}."

    def _index(self) -> str:
        assert isinstance(self.store, PaperStore)
        self.index_reads += 1
        path = self.store.index_path(self.condition)
        return _read(path) if path else "No index available."

    def _section(self, args: dict) -> str:
        assert isinstance(self.store, PaperStore)
        self.section_index_reads += 1
        try:
            return _read(self.store.section_path(int(args.get("section_num", -1))))
        except (ValueError, TypeError, FileNotFoundError):
            sections = sorted(p.stem for p in (self.store.dir / "sections").iterdir())
            valid = [int(s[1:]) for s in sections]
            return f"Section {args.get('section_num')} not found. Valid sections: {valid}."

    def _file(self, args: dict) -> str:
        rel = posixpath.normpath(str(args.get("path", INDEX_FILE)).lstrip("/"))
        if rel.startswith(".."):
            return f"{rel}: outside the store"
        path = self.store.dir / rel
        if path.is_dir():
            path = path / INDEX_FILE
        name = path.name
        is_toc = name == INDEX_FILE or path.parent.name == PAGES_DIRNAME
        try:
            text = _read(path)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return f"{rel}: no such file"
        if is_toc:
            self.index_reads += 1
        else:
            self.page_reads += 1
        return text

    def call(self, name: str, args: dict) -> str:
        """Result text of tool ``name`` with ``args`` (unknown tools get the paper's message)."""
        if name == "read_page":
            return self._page(args)
        if name == "get_index":
            return self._index()
        if name == "get_section_index":
            return self._section(args)
        if name == "read_file":
            return self._file(args)
        return f"Unknown tool: {name}"


def run_llm_trial(
    client: ChatClient,
    model: str,
    condition: str,
    store: PaperStore | ItemStore,
    target: tuple,
    n: int,
    trial: int,
    content: str = "hash",
    key_low: int = 1000,
    max_turns: int = protocol.MAX_TURNS,
    max_tokens: int = 256,
) -> TrialRecord:
    """Run one trial with the paper's agent loop and return its record (paper's field names).

    ``client`` is the shared chat client (its model is ``model``, given per request). ``target`` is (key,
    value); PATH/AUTO address the entry by :meth:`ItemStore.name_of`. API errors are caught and recorded in
    ``error`` (the trial stops), as the paper does.
    """
    num_pages = store.num_pages if isinstance(store, PaperStore) else n
    key = target[0] if isinstance(store, PaperStore) else store.name_of(target[0])
    rec = TrialRecord(
        condition=condition,
        model=model,
        n=n,
        num_pages=num_pages,
        trial=trial,
        target_key=target[0],
        target_val=target[1],
        content=content,
        agent="llm",
        key_low=key_low,
        via="",
    )
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": protocol.system_prompt(condition, num_pages, key)},
        {"role": "user", "content": protocol.user_message(key)},
    ]
    tools = protocol.TOOLS[condition]
    server = ToolServer(condition, store)
    start = time.perf_counter()
    for turn in range(max_turns):
        try:
            resp, _usage = client.create(
                messages, model=model, tools=tools, max_tokens=max_tokens, temperature=0
            )
        except Exception as exc:  # noqa: BLE001 - the paper records any API failure and stops
            rec.error = str(exc)
            break
        rec.num_turns = turn + 1
        if resp.usage:
            rec.total_tokens += resp.usage.total_tokens
        msg = resp.choices[0].message
        if not msg.tool_calls:
            break
        messages.append(
            {
                "role": "assistant",
                "content": msg.content or "",
                "tool_calls": [
                    {
                        "id": tc.id,
                        "type": "function",
                        "function": {"name": tc.function.name, "arguments": tc.function.arguments},
                    }
                    for tc in msg.tool_calls
                ],
            }
        )
        done = False
        for tc in msg.tool_calls:
            try:
                args = json.loads(tc.function.arguments or "{}")
            except json.JSONDecodeError:
                args = {}
            if tc.function.name == "submit_answer":
                value = str(args.get("value", ""))
                rec.answer = value.strip().upper()[:4] if content == "hash" else value.strip()
                rec.answered = True
                rec.correct = score(value, target[1], content)
                result = "Answer recorded."
                done = True
            else:
                result = server.call(tc.function.name, args)
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": result})
        if done:
            break
    rec.page_reads = server.page_reads
    rec.index_reads = server.index_reads
    rec.section_index_reads = server.section_index_reads
    rec.wall_time_s = time.perf_counter() - start
    return rec
