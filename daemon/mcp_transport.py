"""The transports of ``libraryfs mcp`` (stdio, and streamable HTTP behind a bearer token) and the process
(:func:`run_process`).

HTTP binds to loopback by default. Bound to any other address it refuses to start without a token
(``LIBRARYFS_MCP_TOKEN`` or ``--token-file``): every request must then carry ``Authorization: Bearer
<token>`` (compared in constant time), else 401. Request bodies are capped (413 past
``max_body_bytes``, the SDK's ``RequestBodyLimitMiddleware``); the SDK's DNS-rebinding protection (Host and
Origin checks) is on for loopback binds.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import logging
import signal
import socket
import sys
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import uvicorn

from libraryfs.daemon.mcpd import IndexerKeeper, Served, ServerOptions
from libraryfs.errors import InvalidArgument

log = logging.getLogger("libraryfs.mcp")

MCP_PATH = "/mcp"  #: the streamable HTTP endpoint


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is a loopback address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse a non-loopback bind without a token: raises InvalidArgument."""
    if not is_loopback(host) and not token:
        raise InvalidArgument(
            f"--host {host} is not loopback: set a bearer token (LIBRARYFS_MCP_TOKEN or --token-file)"
        )


class BearerAuth:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer <token>`` (else 401). The scheme
    is matched without regard to case (RFC 9110 §11.1: ``bearer``, ``BEARER``), the token exactly (in
    constant time); spaces between them are allowed (RFC 9110 §11.4: ``1*SP``)."""

    def __init__(self, app, token: str) -> None:
        self.app = app
        self.expected = token.encode()

    async def __call__(self, scope, receive, send) -> None:
        """Pass lifespan events through; answer 401 to an HTTP request without the token."""
        if scope["type"] == "http":
            got = dict(scope.get("headers") or []).get(b"authorization", b"")
            scheme, _sp, credentials = got.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(
                credentials.lstrip(b" "), self.expected
            ):
                body = b'{"error": "missing or wrong bearer token"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="libraryfs"'),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def serve_stdio(served: Served) -> None:
    """Serve over stdin/stdout until the client closes stdin (blocks)."""

    async def main() -> None:
        """Run the TOC-change notifier beside the SDK's stdio server; cancel it once the client closes
        stdin."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(served.notify_tocs)
            await served.server.run_stdio_async()
            tg.cancel_scope.cancel()

    anyio.run(main)


def serve_http(
    served: Served,
    host: str,
    port: int,
    *,
    token: str | None,
    max_body_bytes: int,
    on_listening: Callable[[str], None] | None = None,
) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` until SIGINT/SIGTERM (blocks). ``port`` 0 lets the
    OS pick one; ``on_listening(url)`` gets the URL once the socket listens (default: one line on stderr).
    Raises InvalidArgument for a non-loopback ``host`` without ``token``, ``OSError`` when it cannot bind."""
    check_bind(host, token)
    app = served.server.streamable_http_app(
        streamable_http_path=MCP_PATH, max_request_body_size=max_body_bytes, host=host
    )
    asgi = BearerAuth(app, token) if token else app
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(128)
    bound = sock.getsockname()[1]
    shown = f"[{host.strip('[]')}]" if family == socket.AF_INET6 else host
    url = f"http://{shown}:{bound}{MCP_PATH}"
    config = uvicorn.Config(asgi, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)

    async def main() -> None:
        """Run uvicorn on the bound socket and the TOC-change notifier in one task group, then announce the
        URL once uvicorn has started."""
        async with anyio.create_task_group() as tg:

            async def run_server() -> None:
                """Serve until uvicorn stops (SIGINT/SIGTERM), swallowing the ``SystemExit`` it raises again,
                then cancel the notifier."""
                with contextlib.suppress(SystemExit):  # run_process's SIGTERM handler, raised again by
                    await server.serve([sock])  # uvicorn once it has shut down on that SIGTERM
                tg.cancel_scope.cancel()  # uvicorn stopped (signal): stop the notifier too

            tg.start_soon(served.notify_tocs)
            tg.start_soon(run_server)
            while not server.started:
                await anyio.sleep(0.01)
            (on_listening or _announce)(url)

    try:
        anyio.run(main)
    finally:
        sock.close()


def _announce(url: str) -> None:
    print(f"libraryfs mcp: serving {url}", file=sys.stderr, flush=True)


def run_process(
    libdir: str, overrides: Mapping[str, Any] | None = None, *, token: str | None = None, indexer: bool = True
) -> int:
    """The ``libraryfs mcp`` process: settings (``[mcp]``, ``[log]``: flags in ``overrides`` > environment >
    ``config.toml`` > defaults) and logging (stderr), the server, an indexer when none runs and ``indexer``
    (stopped on exit), then the transport until the client leaves or a signal; returns the exit status.

    Raises :class:`~libraryfs.errors.LibraryError` (a :class:`~libraryfs.settings.SettingsError` for a bad
    setting) when the library cannot be opened or the bind is refused, ``OSError`` when it cannot bind.
    """
    from libraryfs.settings import MCP_TABLES, configure_logging, load_settings

    settings = load_settings(libdir, overrides, tables=MCP_TABLES)
    configure_logging(settings)
    m = settings["mcp"]
    stdio = m["transport"] == "stdio"
    if not stdio:
        check_bind(m["host"], token)
    opts = ServerOptions(
        read_only=m["read_only"],
        response_tokens=m["response_tokens"],
        max_write_bytes=m["max_write_bytes"],
        indexer=indexer,
        inline_tools=stdio,
        indexer_restart_wait_s=m["indexer_restart_wait_s"],
    )
    served = Served(libdir, opts)
    keeper = served.keeper = IndexerKeeper(served.libdir, opts, served.store, served.ops.lock)
    try:
        # SIGTERM ends the server like a closed stdin: the finally below runs (its indexer stopped, the store
        # closed). Over HTTP uvicorn takes SIGTERM while it serves, shuts down, then raises it again under the
        # handler it found — without this one, the default action killed the process before the finally.
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
        if stdio:
            serve_stdio(served)
        else:
            body = 2 * opts.max_write_bytes + (1 << 20)  # JSON escaping can double a content's size
            serve_http(served, m["host"], m["port"], token=token, max_body_bytes=body)
    finally:
        keeper.stop()
        served.close()
    return 0


def _stop_on_sigterm(_signum, _frame) -> None:
    raise SystemExit(0)
