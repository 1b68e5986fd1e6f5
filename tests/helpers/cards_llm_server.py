"""A real OpenAI-compatible HTTP server on 127.0.0.1 for the cards tests (scripted chat completions).

``with ScriptedLLMServer(responder) as srv:`` serves ``POST /v1/chat/completions``; ``responder(request)``
gets the decoded JSON request and returns the assistant's text (or an ``int`` HTTP status to fail with).
Every request is kept in ``srv.requests``. Usage is reported as 10 tokens per message + 5 per reply.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedLLMServer:
    def __init__(self, responder):
        self.responder = responder
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep test output quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with outer._lock:
                    outer.requests.append(body)
                    reply = outer.responder(body)
                if not self.path.endswith("/chat/completions"):
                    reply = 404
                if isinstance(reply, int):
                    data = json.dumps({"error": {"message": "scripted failure", "type": "x"}}).encode()
                    self.send_response(reply)
                else:
                    data = json.dumps(
                        {
                            "id": f"chatcmpl-{len(outer.requests)}",
                            "object": "chat.completion",
                            "created": 0,
                            "model": body.get("model", "m"),
                            "choices": [
                                {
                                    "index": 0,
                                    "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": reply},
                                }
                            ],
                            "usage": {
                                "prompt_tokens": 10 * len(body.get("messages", [])),
                                "completion_tokens": 5,
                                "total_tokens": 10 * len(body.get("messages", [])) + 5,
                            },
                        }
                    ).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


def chat_client(base_url: str, model: str):
    """The shared chat client (:class:`libraryfs.llm.client.ChatClient`) over ``base_url`` with the card
    commands' defaults (temperature 0.7, 120 s requests): what ``libraryfs solve`` hands the solver."""
    from libraryfs.cli.cards_cmds import CARD_LLM_DEFAULTS
    from libraryfs.llm.client import ChatClient
    from libraryfs.llm.config import LLMConfig

    return ChatClient(LLMConfig(base_url=base_url, model=model, **CARD_LLM_DEFAULTS))
