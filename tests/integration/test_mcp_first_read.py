"""The first TOC an MCP client reads from a server that starts its own indexer: it must not say "the indexer
is not running … run `libraryfs index`" (a command that the indexer starting up then refuses). The server
now takes ``indexer.lock`` before it serves and hands it to the indexer it starts, as ``libraryfs mount``
does; before, the lock stayed free until the indexer process had started up (about a second)."""

from __future__ import annotations

import anyio
from helpers.mcp_server import stdio_params
from mcp import Client

from libraryfs.daemon.mcpd import Served, ServerOptions
from libraryfs.layout import indexer_pid


def test_the_first_toc_read_does_not_call_the_index_stale(libdir):
    s = Served(str(libdir), ServerOptions(indexer=False))
    try:
        s.ops.makedirs(b"/notes")  # a journal record pending when the server starts
    finally:
        s.close()

    async def main():
        async with Client(stdio_params(str(libdir))) as c:
            r = await c.call_tool("read_index", {"path": "/"})
            assert not r.is_error and "Stale index" not in r.content[0].text, r.content[0].text
            assert indexer_pid(str(libdir))

    anyio.run(main)
