"""A real OpenAI-compatible chat-completions server on 127.0.0.1 for the episode extraction tests.

``with EpisodeLLMServer(answer) as srv:`` — ``answer(messages) -> str | int`` gives the message content of
each completion (an ``int`` answers with that HTTP status instead); ``srv.base_url`` is
``http://127.0.0.1:<port>/v1``; ``srv.requests`` holds every request's JSON body.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class EpisodeLLMServer:
    """Scripted chat-completions endpoint in a thread (see module doc)."""

    def __init__(self, answer: Callable[[list[dict]], str | int]) -> None:
        self.answer = answer
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                outer.requests.append(body)
                got = outer.answer(body.get("messages", []))
                if isinstance(got, int):
                    data = json.dumps({"error": {"message": "scripted", "type": "server_error"}}).encode()
                    self.send_response(got)
                else:
                    data = json.dumps(
                        {
                            "id": "cmpl-1",
                            "object": "chat.completion",
                            "created": 0,
                            "model": body.get("model", "m"),
                            "choices": [
                                {
                                    "index": 0,
                                    "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": got},
                                }
                            ],
                            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
                        }
                    ).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> EpisodeLLMServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
