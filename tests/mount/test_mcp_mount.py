"""``libraryfs mcp`` and a FUSE mount serving one library at once (issue 16): each side sees the other's
writes, both are indexed by the mount's one indexer, and the store stays consistent (the fixture checks)."""

from __future__ import annotations

import os
import time

import anyio
import pytest
from helpers.mcp_server import stdio_params, wait_for

pytestmark = pytest.mark.mount
from mcp import Client  # noqa: E402


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


async def _until_mount_shows(path: str, content: str, timeout_s: float = 15.0) -> None:
    """Wait until a read through the mount returns ``content`` (the kernel's caches expire within the
    mount's entry/attribute timeouts, 1 s here)."""
    deadline = time.monotonic() + timeout_s
    while _read(path) != content:
        assert time.monotonic() < deadline, f"{path}: {_read(path)!r} != {content!r}"
        await anyio.sleep(0.05)


def test_mcp_beside_a_mount_each_sees_the_other(mounted):
    os.makedirs(mounted.p("notes"))
    with open(mounted.p("notes/from-mount.md"), "w") as f:
        f.write("# Written through FUSE\n")

    async def main():
        async with Client(stdio_params(mounted.libdir)) as c:
            status = (await c.call_tool("status", {})).structured_content
            assert status["mount"]["mountpoint"] == mounted.mnt  # it sees the live mount
            assert status["indexer_pid"] == mounted.info["indexer_pid"]  # and adopts its indexer
            # the mount's write, read over MCP (by library path and by mount path)
            for p in ("notes/from-mount.md", mounted.p("notes/from-mount.md")):
                r = await c.call_tool("read_text_file", {"path": p})
                assert r.content[0].text == "# Written through FUSE\n", r.content[0].text
            # MCP writes and edits, read through the mount
            r = await c.call_tool(
                "write_file", {"path": "notes/from-mcp.md", "content": "# Written over MCP\n"}
            )
            assert not r.is_error, r.content[0].text
            await _until_mount_shows(mounted.p("notes/from-mcp.md"), "# Written over MCP\n")
            edits = [{"oldText": "FUSE", "newText": "FUSE, edited over MCP"}]
            r = await c.call_tool("edit_file", {"path": "notes/from-mount.md", "edits": edits})
            assert not r.is_error, r.content[0].text
            await _until_mount_shows(
                mounted.p("notes/from-mount.md"), "# Written through FUSE, edited over MCP\n"
            )
            # the mount appends; MCP reads the append
            with open(mounted.p("notes/from-mcp.md"), "a") as f:
                f.write("appended through FUSE\n")
            r = await c.call_tool("read_text_file", {"path": "notes/from-mcp.md"})
            assert r.content[0].text == "# Written over MCP\nappended through FUSE\n"

            # one indexer (the mount's) indexes both sides' writes
            async def both_listed():
                r = await c.call_tool("read_index", {"path": "notes"})
                if r.is_error:  # ENOENT while the new directory settles (docs/posix.md)
                    return False
                paths = {link["path"] for link in r.structured_content["links"]}
                return {"/notes/from-mount.md", "/notes/from-mcp.md"} <= paths

            await wait_for(both_listed)

    anyio.run(main)
    mounted.wait_indexed()
    toc = _read(mounted.p("notes/INDEX.md")) or ""
    assert "from-mount.md" in toc and "from-mcp.md" in toc


def test_mcp_given_the_mountpoint_serves_the_library_mounted_there(mounted):
    """``libraryfs mcp MNT`` opened the mountpoint as a library directory and refused it ("is not a libraryfs
    library (run `libraryfs init` first)"). Now it serves the library mounted there and says so on stderr."""
    os.makedirs(mounted.p("notes"))
    with open(mounted.p("notes/from-mount.md"), "w") as f:
        f.write("# Written through FUSE\n")

    async def main():
        async with Client(stdio_params(mounted.mnt, "--no-indexer")) as c:
            r = await c.call_tool("read_text_file", {"path": "notes/from-mount.md"})
            assert not r.is_error and r.content[0].text == "# Written through FUSE\n", r
            r = await c.call_tool("status", {})
            assert not r.is_error and r.structured_content["mount"]["mountpoint"] == mounted.mnt, r

    anyio.run(main)
