"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1 for the theorem LLM-agent tests.

It speaks real HTTP (``POST /v1/chat/completions``) and answers with tool calls chosen by a small
protocol "model" that reads only the conversation it is sent: it asks for the index, reads the covering
page (or scans pages for FLAT), follows INDEX.md links (AUTO), and submits the value it saw. Every request
body is kept in ``requests`` so tests can check temperature, tools and the re-sent history.
``script`` (a list of canned replies) overrides the protocol model reply by reply when given.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_RANGE = re.compile(r"(Page|Section)\s+(\d+):\s+keys\s+(\S+)\s*[–-]\s*(\S+)")
_LINK = re.compile(r"\[([^\]]*)\]\(([^)]+)\)")


def _num(x: str):
    return int(x) if x.isdigit() else x


def protocol_reply(body: dict) -> dict:
    """Next assistant message (a tool call or text) for the request ``body``."""
    msgs = body["messages"]
    tools = {t["function"]["name"] for t in body.get("tools", [])}
    key = re.search(r"key (\S+?)\.?$", msgs[1]["content"]).group(1)
    tool_msgs = [m for m in msgs if m["role"] == "tool"]
    calls = [tc for m in msgs if m["role"] == "assistant" for tc in m.get("tool_calls", [])]
    last = tool_msgs[-1]["content"] if tool_msgs else None
    last_call = calls[-1]["function"] if calls else None

    def call(name: str, **args) -> dict:
        return {"name": name, "args": args}

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
        return {"text": "The index does not cover the key."}
    if last_call["name"] == "read_page":
        n = json.loads(last_call["arguments"])["page_num"]
        return call("read_page", page_num=n + 1)
    if last_call["name"] == "read_file":
        here = json.loads(last_call["arguments"])["path"].rsplit("/", 1)
        base = here[0] + "/" if len(here) == 2 else ""
        for label, href in _LINK.findall(last):
            if label == key:
                return call("read_file", path=base + href)
            if "…" in label:
                lo, hi = (s.strip() for s in label.split("…"))
                if _num(lo) <= _num(key) <= _num(hi):
                    return call("read_file", path=base + href)
    return {"text": "I could not find it."}


class ScriptedLLM:
    """The server: ``url`` is the base URL for ``openai.OpenAI(base_url=...)``."""

    def __init__(self, script: list[dict] | None = None) -> None:
        self.requests: list[dict] = []
        self.script = list(script or [])
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                owner.requests.append(body)
                if owner.script:
                    reply = owner.script.pop(0)
                else:
                    reply = protocol_reply(body)
                if reply.get("status"):
                    self._send(reply["status"], {"error": {"message": reply.get("text", "error")}})
                    return
                n = len(owner.requests)
                message: dict = {"role": "assistant", "content": reply.get("text")}
                if "name" in reply:
                    message["tool_calls"] = [
                        {
                            "id": f"call_{n}",
                            "type": "function",
                            "function": {
                                "name": reply["name"],
                                "arguments": reply.get("raw_args") or json.dumps(reply.get("args", {})),
                            },
                        }
                    ]
                prompt = sum(len(json.dumps(m)) for m in body["messages"]) // 4
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{n}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "message": message,
                                "finish_reason": "tool_calls" if "name" in reply else "stop",
                            }
                        ],
                        "usage": {
                            "prompt_tokens": prompt,
                            "completion_tokens": 10,
                            "total_tokens": prompt + 10,
                        },
                    },
                )

            def _send(self, status: int, obj: dict) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
