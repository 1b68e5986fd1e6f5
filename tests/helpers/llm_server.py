"""The one OpenAI-compatible chat-completions server of the test suite: real HTTP on 127.0.0.1, scripted.

Usage::

    from helpers.llm_server import LLMServer, Reply, Status, Raw, Truncated, Delay, Gate, Hang, Close, IndexModel

    with LLMServer(default=IndexModel()) as srv:      # default answers every request nothing else claims
        srv.on("summarize", Status(500))              # every "summarize" request, whatever order they come in
        srv.script(Status(429, headers={"Retry-After": "0"}), Reply({"summaries": []}))
        ...  # point the code under test at srv.base_url ("http://127.0.0.1:<port>/v1")
        assert len(srv.requests) == 2
        srv.requests[0].payload                       # the JSON of the last user message, if any

Each request to ``POST <base>/chat/completions`` is answered by, in this order: the first rule added with
:meth:`LLMServer.on` whose match accepts it (keyed by content, so concurrent requests get the right answer
whatever order they arrive in); else the next scripted action (:meth:`LLMServer.script`, first in, first
out — only for requests a test sends one at a time); else ``default``. Without any of these the server
answers HTTP 500. An action may also be a callable ``(Request) -> action``; a ``dict``/``list``/``str``
result is a :class:`Reply`, an ``int`` a :class:`Status`. Every request is recorded in
:attr:`LLMServer.requests` as a :class:`Request` before it is answered.

Actions:

- :class:`Reply` — a ``chat.completion`` whose message content is the given text (a dict/list is sent
  as its JSON), optionally with ``tool_calls``, with ``usage`` and ``finish_reason``; the server's
  ``usage`` callable (default: ~4 characters per token) counts tokens when the reply does not say;
- :class:`Status` — an HTTP error status with an OpenAI-style error body and optional headers
  (``Retry-After``) — 429, 500, 503, 400 (e.g. to reject ``response_format``);
- :class:`Raw` — any body bytes with any status and content type (garbage, truncated JSON);
- :class:`Truncated` — declares a longer ``Content-Length`` than it sends, then closes the connection;
- :class:`Delay` — waits ``seconds`` then performs another action (or calls a callable default);
- :class:`Gate` — waits until the test sets an event, then performs another action;
- :class:`Hang` — never answers (until the server stops or ``max_s`` passes), then closes;
- :class:`Close` — closes the connection without any response.

:class:`IndexModel` is a callable default that answers libraryfs's index prompts (``summarize``,
``describe``, ``file``, ``group``) validly and predictably, so end-to-end tests can check that the TOC
carries the model's text ("Model summary of <name>", "Model description of <path>").
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# -- actions ------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Reply:
    """A successful completion with ``content`` (``dict``/``list`` sent as JSON text)."""

    content: Any
    usage: dict | None = None  #: {"prompt_tokens": n, "completion_tokens": m}; None = the server's count
    finish_reason: str | None = None  #: None = "tool_calls" when there are tool calls, else "stop"
    status: int = 200
    tool_calls: list[dict] | None = None  #: [{"name": str, "arguments": dict | str}] (a str is sent as is)


@dataclasses.dataclass
class Status:
    """An HTTP error: ``code`` with an OpenAI-style JSON error body and extra ``headers``."""

    code: int
    message: str = "scripted error"
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Raw:
    """Arbitrary body bytes (e.g. garbage or truncated JSON with a correct Content-Length)."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Truncated:
    """Send headers declaring ``declared_bytes`` but only ``body`` bytes, then close the connection."""

    body: bytes = b'{"id": "chatcmpl-1", "object": "chat.completion", "choi'
    declared_bytes: int = 4096


@dataclasses.dataclass
class Delay:
    """Sleep ``seconds`` then perform ``then``."""

    seconds: float
    then: Any


@dataclasses.dataclass
class Gate:
    """Wait until ``event`` is set (by the test), then perform ``then``; close the connection unanswered if
    the server stops or ``max_s`` passes first. A model that answers only after the test saw what it must
    see without the answer: causal, whatever the machine's load."""

    event: threading.Event
    then: Any
    max_s: float = 120.0


@dataclasses.dataclass
class Hang:
    """Never answer: hold the connection until the server stops (or ``max_s`` passes), then close it."""

    max_s: float = 60.0


@dataclasses.dataclass
class Close:
    """Close the connection without sending a response."""


# -- requests -----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Request:
    """One recorded HTTP request."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    time: float

    @property
    def json(self) -> Any:
        """The decoded request body (``None`` if it is not JSON)."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    @property
    def messages(self) -> list[dict]:
        """The chat messages of the request."""
        j = self.json
        return j.get("messages", []) if isinstance(j, dict) else []

    @property
    def user_text(self) -> str:
        """The content of the last user message (``""`` if none)."""
        for m in reversed(self.messages):
            if m.get("role") == "user":
                return m.get("content") or ""
        return ""

    @property
    def payload(self) -> Any:
        """The last user message decoded as JSON (libraryfs sends ``{"task": ..., ...}``), else ``None``."""
        for m in reversed(self.messages):
            if m.get("role") == "user":
                try:
                    return json.loads(m.get("content") or "")
                except ValueError:
                    return None
        return None

    @property
    def task(self) -> str | None:
        """``payload["task"]`` (``"summarize"``, ``"describe"``, ``"file"``, ``"group"``) or ``None``."""
        p = self.payload
        return p.get("task") if isinstance(p, dict) else None

    @property
    def response_format(self) -> str | None:
        """``response_format.type`` the client asked for (``None`` = plain prompt)."""
        j = self.json
        rf = j.get("response_format") if isinstance(j, dict) else None
        return rf.get("type") if isinstance(rf, dict) else None


# -- server -------------------------------------------------------------------------------------------------


class LLMServer:
    """The scripted server. Start with ``with`` (or :meth:`start`/:meth:`stop`); thread-safe."""

    def __init__(self, default: Any = None, *, usage: Any = None) -> None:
        """``default``: the action for requests no rule or script claims; ``usage(request, content) ->
        {"prompt_tokens", "completion_tokens"}`` counts tokens of replies that give none (default ~4
        characters per token)."""
        self.default = default
        self.usage = usage or _estimated_usage
        self.requests: list[Request] = []
        self._script: deque[Any] = deque()
        self._rules: list[list[Any]] = []  # [match, action, times left or None]
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one request per connection: a scripted close hits one request

            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                req = Request(
                    "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.time()
                )
                with server._lock:
                    server.requests.append(req)
                    action = server._claim(req)
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    action = Status(404, f"no route {self.path}")
                server._perform(self, req, action)

            do_GET = do_POST  # noqa: N815  (GET /models etc. are answered by the script too)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="llm-server", daemon=True
        )

    # public API
    @property
    def port(self) -> int:
        """TCP port on 127.0.0.1."""
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """The OpenAI base URL to configure: ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *actions: Any) -> None:
        """Queue actions answering the next requests, one each, in order."""
        with self._lock:
            self._script.extend(actions)

    def on(self, match: Any, action: Any, times: int | None = None) -> None:
        """Answer every request that ``match`` accepts with ``action`` (``times`` requests at most, None =
        all). ``match`` is a task name (``"summarize"``, the ``task`` of the JSON user message) or a
        callable ``(Request) -> bool``. Rules are tried in the order they were added, before the script."""
        with self._lock:
            self._rules.append([match, action, times])

    def _claim(self, req: Request) -> Any:
        """The action for ``req`` (rule, then script, then default); call with the lock held."""
        for rule in self._rules:
            match, action, left = rule
            if left == 0:
                continue
            if match == req.task if isinstance(match, str) else match(req):
                if left is not None:
                    rule[2] = left - 1
                return action
        if self._script:
            return self._script.popleft()
        return self.default

    def pending(self) -> int:
        """Scripted actions not consumed yet."""
        with self._lock:
            return len(self._script)

    def chat_requests(self, task: str | None = None) -> list[Request]:
        """Recorded chat-completion requests (of ``task`` when given)."""
        with self._lock:
            reqs = list(self.requests)
        return [
            r
            for r in reqs
            if r.path.rstrip("/").endswith("/chat/completions") and (task is None or r.task == task)
        ]

    def start(self) -> LLMServer:
        """Start serving in a daemon thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Release hanging handlers and stop serving."""
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # actions
    def _perform(self, h: BaseHTTPRequestHandler, req: Request, action: Any) -> None:
        if callable(action) and not isinstance(action, type):
            action = action(req)
        if action is None:
            action = Status(500, "no scripted answer and no default")
        if isinstance(action, dict | list | str):
            action = Reply(action)
        if isinstance(action, int) and not isinstance(action, bool):
            action = Status(action)
        if isinstance(action, Delay):
            if self._stopping.wait(action.seconds):
                return
            return self._perform(h, req, action.then)
        if isinstance(action, Gate):
            deadline = time.monotonic() + action.max_s
            while not action.event.wait(0.05):
                if self._stopping.is_set() or time.monotonic() > deadline:
                    h.close_connection = True
                    return
            return self._perform(h, req, action.then)
        if isinstance(action, Hang):
            self._stopping.wait(action.max_s)
            h.close_connection = True
            return
        if isinstance(action, Close):
            h.close_connection = True
            return
        if isinstance(action, Truncated):
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(action.declared_bytes))
            h.end_headers()
            h.wfile.write(action.body)
            h.wfile.flush()
            h.close_connection = True
            return
        if isinstance(action, Status):
            body = json.dumps(
                {"error": {"message": action.message, "type": "scripted", "code": action.code}}
            ).encode()
            _send(h, action.code, body, "application/json", action.headers)
            return
        if isinstance(action, Raw):
            _send(h, action.status, action.body, action.content_type, action.headers)
            return
        if isinstance(action, Reply):
            _send(h, action.status, self._completion(req, action), "application/json", {})
            return
        raise TypeError(f"unknown scripted action {action!r}")

    def _completion(self, req: Request, action: Reply) -> bytes:
        """The JSON body of a ``chat.completion`` answering ``req`` with ``action``."""
        content = action.content
        if content is not None and not isinstance(content, str):
            content = json.dumps(content)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if action.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{len(self.requests)}_{i}",
                    "type": "function",
                    "function": {
                        "name": tc["name"],
                        "arguments": tc["arguments"]
                        if isinstance(tc.get("arguments"), str)
                        else json.dumps(tc.get("arguments") or {}),
                    },
                }
                for i, tc in enumerate(action.tool_calls)
            ]
        usage = action.usage or self.usage(req, content or "")
        usage = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
        j = req.json if isinstance(req.json, dict) else {}
        finish = action.finish_reason or ("tool_calls" if action.tool_calls else "stop")
        return json.dumps(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": j.get("model", "scripted"),
                "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                "usage": usage,
            }
        ).encode()


def _estimated_usage(req: Request, content: str) -> dict:
    """~4 characters per token of the request body and of the reply."""
    return {"prompt_tokens": max(1, len(req.body) // 4), "completion_tokens": max(1, len(content) // 4)}


def _send(h: BaseHTTPRequestHandler, code: int, body: bytes, ctype: str, headers: dict[str, str]) -> None:
    h.send_response(code)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(body)))
    for k, v in headers.items():
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(body)


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A TCP port on 127.0.0.1 where a connection is refused, for as long as the block runs: a socket bound
    there and never listening (the kernel answers a SYN with RST). Being bound, the port cannot be handed to
    another process meanwhile — unlike a port picked free and released, which any server may take next."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def chat_client(base_url: str, model: str):
    """The shared chat client (:class:`libraryfs.llm.client.ChatClient`) over ``base_url`` with the card
    commands' defaults (temperature 0.7, 120 s requests): what ``libraryfs solve`` hands the solver."""
    from libraryfs.cli.cards_cmds import CARD_LLM_DEFAULTS
    from libraryfs.llm.client import ChatClient
    from libraryfs.llm.config import LLMConfig

    return ChatClient(LLMConfig(base_url=base_url, model=model, **CARD_LLM_DEFAULTS))


# -- a predictable model for libraryfs's index prompts -----------------------------------------------------


class IndexModel:
    """Answers libraryfs's index prompts validly. Callable as an :class:`LLMServer` default.

    - summarize → ``"Model summary of <name>"``;
    - describe → ``"Model description of <path>"``;
    - file → ``file_to[name]`` if given, else the first listed section whose last path component occurs
      in the entry's name or text, else ``new_section`` (``is_new`` true);
    - group → consecutive runs of ``max_items`` entries titled ``"Group 1"``, ``"Group 2"``, …
    """

    def __init__(self, file_to: dict[str, str] | None = None, new_section: str = "model-new") -> None:
        self.file_to = file_to or {}
        self.new_section = new_section

    def __call__(self, req: Request) -> Reply:
        p = req.payload or {}
        task = p.get("task")
        if task == "summarize":
            return Reply(
                {
                    "summaries": [
                        {"id": e["id"], "summary": f"Model summary of {e['name']}"} for e in p["entries"]
                    ]
                }
            )
        if task == "describe":
            return Reply(
                {
                    "descriptions": [
                        {"id": s["id"], "description": f"Model description of {s['path']}"}
                        for s in p["sections"]
                    ]
                }
            )
        if task == "file":
            out = []
            for e in p["entries"]:
                if e["name"] in self.file_to:
                    sec = self.file_to[e["name"]]
                else:
                    hay = (e["name"] + " " + e.get("text", "")).lower()
                    sec = next(
                        (s["path"] for s in p["sections"] if s["path"].rsplit("/", 1)[-1] in hay),
                        self.new_section,
                    )
                out.append(
                    {"id": e["id"], "section": sec, "is_new": sec not in [s["path"] for s in p["sections"]]}
                )
            return Reply({"filings": out})
        if task == "group":
            ids = [e["id"] for e in p["entries"]]
            k = int(p["max_items"])
            return Reply(
                {
                    "groups": [
                        {"title": f"Group {n + 1}", "ids": ids[i : i + k]}
                        for n, i in enumerate(range(0, len(ids), k))
                    ]
                }
            )
        return Reply("I do not know this task.")
