"""The LLM navigator: the Library Theorem agent's tools over a mounted library, any OpenAI-compatible endpoint.

Tools (PAPERS.md §1, adapted from pages to a directory tree): ``read_toc(path)`` reads a TOC page,
``read_entry(path)`` reads an entry, ``answer(path)`` ends the lookup. Temperature 0, the whole history
re-sent on every call (as the paper's agent), at most ``max_turns`` calls. Paths are library-relative; a
path that does not exist from the root is tried relative to the directory of the last TOC page read (links
inside a page are relative to it), and a directory means its ``INDEX.md``. Every tool result is the file
read at call time through the mount; reads are counted by what was read (TOC page or entry), not by the
tool's name.

``protocol="tools"`` uses the API's function calling; ``protocol="text"`` is for servers without it
(small local models): the model answers one line ``READ <path>`` or ``ANSWER <path>`` and tool results come
back as user messages. Tokens: the API's ``usage.total_tokens`` summed over calls (``api_tokens``), beside
the o200k_base tokens of what was read (the same unit as every other navigator).
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import TYPE_CHECKING, Any

from libraryfs.fs.generated import INDEX_FILE, PAGES_DIRNAME

from ..theorem.llm_agent import make_client  # noqa: F401  (re-exported: the one client factory)

if TYPE_CHECKING:
    from libraryfs.llm.client import ChatClient
from .navigators import Outcome
from .reader import INDEX_NAME, Lookup, is_toc_path


def _tool(name: str, description: str) -> dict:
    """An OpenAI function-tool schema taking one string argument ``path``."""
    params = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


TOOLS = [
    _tool("read_toc", f"Read a table-of-contents page ({INDEX_FILE} or {PAGES_DIRNAME}/NNNN.md)."),
    _tool("read_entry", "Read an entry (a document) of the library."),
    _tool("answer", "Give the path of the entry that answers the request; ends the task."),
]

SYSTEM = (
    f"You find one entry in a library of files. Every directory has a table of contents, {INDEX_FILE}: one "
    f"line per entry or section, '- [name](link) — summary (size)'. A large directory's {INDEX_FILE} links to "
    f"further TOC pages under {PAGES_DIRNAME}/. Links are relative to the page that holds them. Start at "
    f"{INDEX_FILE}, follow the "
    "lines that match the request, read an entry if you need to check it, then answer with the entry's "
    "path. Read as little as you can. A page whose head says '\"…\" = the file's whole text' quotes some "
    "files whole on their lines ('- name — \"text\"'): such a file holds that text and nothing else, so it "
    "need not be read."
)
TEXT_RULES = (
    " Reply with exactly one line: 'READ <path>' to read a TOC page or an entry, or "
    "'ANSWER <path>' when you have found it."
)
#: the first line that starts with the keyword, as instructed (upper case: "the answer is …" is no action)
_TEXT_ACTION = re.compile(r"^\s*(READ|ANSWER)\b:?\s+`?([^\s`]+)`?", re.M)


def user_message(query: str, kind: str) -> str:
    """The task as the agent sees it."""
    if kind == "name":
        return f"Find the entry that documents or defines: {query}"
    return f"Find the entry about: {query}"


class LLMNavigator:
    """Runs the agent loop for one query at a time (see module docstring)."""

    name = "llm"

    def __init__(
        self,
        client: ChatClient,
        model: str,
        *,
        protocol: str = "tools",
        max_turns: int = 12,
        max_tokens: int = 128,
    ) -> None:
        if protocol not in ("tools", "text"):
            raise ValueError("protocol must be 'tools' or 'text'")
        self.client, self.model, self.protocol = client, model, protocol
        self.max_turns, self.max_tokens = max_turns, max_tokens

    def _resolve(self, path: str, lookup: Lookup, here: str) -> str:
        p = path.strip().strip("`'\"").lstrip("/")
        if p.startswith("./"):
            p = p[2:]
        cands = [posixpath.normpath(p) if p else INDEX_NAME]
        if here:
            cands.append(posixpath.normpath(posixpath.join(here, p)))
        for c in cands:
            full = posixpath.join(lookup.root, c)
            if posixpath.isdir(full):
                return posixpath.join(c, INDEX_NAME) if c != "." else INDEX_NAME
            if posixpath.isfile(full):
                return c
        return cands[0]

    def _tool(self, name: str, path: str, lookup: Lookup, state: dict) -> str:
        rel = self._resolve(path, lookup, state["here"])
        if rel.startswith(".."):
            return f"{path}: outside the library"
        text = lookup.read(rel)
        if text is None:
            return f"{path}: no such file"
        if is_toc_path(rel):
            state["here"] = posixpath.dirname(rel)
            return f"(TOC page {rel}; its links are relative to {state['here'] or 'the root'}/)\n{text}"
        return f"(entry {rel})\n{text[:6000]}"

    def run(self, query: str, kind: str, lookup: Lookup) -> Outcome:
        """One lookup. API errors end it (recorded in ``error``)."""
        sys_text = SYSTEM + (TEXT_RULES if self.protocol == "text" else "")
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": sys_text},
            {"role": "user", "content": user_message(query, kind)},
        ]
        state = {"here": ""}
        out = Outcome(None)
        for _turn in range(self.max_turns):
            kwargs: dict[str, Any] = dict(model=self.model, temperature=0, max_tokens=self.max_tokens)
            if self.protocol == "tools":
                kwargs["tools"] = TOOLS
            try:
                resp, _usage = self.client.create(messages, **kwargs)
            except Exception as exc:  # noqa: BLE001 - any API failure ends the lookup, recorded
                out.error = f"{type(exc).__name__}: {exc}"[:300]
                break
            if resp.usage:
                out.api_tokens += resp.usage.total_tokens or 0
            msg = resp.choices[0].message
            done = (
                self._text_step(msg, messages, lookup, state, out)
                if self.protocol == "text"
                else self._tools_step(msg, messages, lookup, state, out)
            )
            if done:
                break
        return out

    def _tools_step(self, msg: Any, messages: list, lookup: Lookup, state: dict, out: Outcome) -> bool:
        if not msg.tool_calls:
            out.trace.append({"text": (msg.content or "")[:200]})
            return True
        echo = msg.model_dump(exclude_none=True)  # the assistant turn as sent back: role, content, tool_calls
        echo["content"] = echo.get("content") or ""
        messages.append(echo)
        done = False
        for tc in msg.tool_calls:
            try:
                args = json.loads(tc.function.arguments or "{}")
            except json.JSONDecodeError:
                args = {}
            path = str(args.get("path", "")) if isinstance(args, dict) else ""
            out.trace.append({"call": tc.function.name, "path": path})
            if tc.function.name == "answer":
                out.answer = self._resolve(path, lookup, state["here"])
                result, done = "Answer recorded.", True
            elif tc.function.name in ("read_toc", "read_entry"):
                result = self._tool(tc.function.name, path, lookup, state)
            else:
                result = f"Unknown tool: {tc.function.name}"
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": result})
        return done

    def _text_step(self, msg: Any, messages: list, lookup: Lookup, state: dict, out: Outcome) -> bool:
        content = msg.content or ""
        m = _TEXT_ACTION.search(content)
        out.trace.append({"text": content[:200]})
        if not m:
            return True
        messages.append({"role": "assistant", "content": content})
        if m.group(1).upper() == "ANSWER":
            out.answer = self._resolve(m.group(2), lookup, state["here"])
            return True
        messages.append({"role": "user", "content": self._tool("read", m.group(2), lookup, state)})
        return False
