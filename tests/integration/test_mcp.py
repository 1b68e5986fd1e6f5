"""``libraryfs mcp`` driven by the MCP SDK's real client, over stdio and streamable HTTP, against the real
server process and a real LMDB library (issue 16): tools, the TOC appearing after a write, find, recall,
resource notifications, and clean errors for bad input (nothing written partially)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings

import anyio
import pytest
from helpers.mcp_server import http_server, stdio_params, wait_for
from mcp import Client
from mcp.client.stdio import stdio_client
from mcp.types import ResourceUpdatedNotification

from libraryfs.fs.check import check
from libraryfs.fs.store import Store

FS_TOOLS = {
    "read_text_file",
    "read_multiple_files",
    "write_file",
    "edit_file",
    "create_directory",
    "list_directory",
    "directory_tree",
    "move_file",
    "search_files",
    "get_file_info",
}
TOC_HEADER = "<!-- libraryfs toc: "  #: first bytes of every TOC page 0, pending or rendered
OWN_TOOLS = {"read_index", "find", "recall", "cards_block", "code_outline", "budget_verify", "status"}


def _text(r) -> str:
    return r.content[0].text


async def _call(c, name: str, args: dict, *, error: bool = False):
    r = await c.call_tool(name, args)
    assert bool(r.is_error) is error, f"{name}({args}) → {_text(r)}"
    return r


def _check_store(libdir) -> None:
    st = Store(libdir)
    try:
        assert check(st).problems == []
    finally:
        st.close()


async def _tools_and_toc(c) -> None:
    tools = {t.name: t for t in (await c.list_tools()).tools}
    assert set(tools) >= FS_TOOLS | OWN_TOOLS
    for t in tools.values():
        a = t.annotations
        assert a is not None and a.open_world_hint is False
        assert a.read_only_hint is (
            t.name not in {"write_file", "edit_file", "create_directory", "move_file"}
        )
    assert tools["write_file"].annotations.destructive_hint is True
    assert tools["create_directory"].annotations.destructive_hint is False
    master = (await c.read_resource("library://INDEX.md")).contents[0].text
    # the pending placeholder ("# Index of /") or, once the indexer has run, the rendered TOC ("# /"): both
    # open with the TOC header comment
    assert master.startswith(TOC_HEADER), master
    r = await _call(c, "read_index", {"path": "/"})
    assert r.structured_content["path"] == "/INDEX.md"


async def _write_edit_index_find(c) -> None:
    await _call(c, "create_directory", {"path": "notes/deep"})
    body = "# Quarterly plan\n\nShip the zebra index by Friday.\n"
    r = await _call(c, "write_file", {"path": "notes/plan.md", "content": body})
    assert r.structured_content["created"] is True
    r = await _call(
        c,
        "edit_file",
        {"path": "/notes/plan.md", "edits": [{"oldText": "Friday", "newText": "Monday"}], "dryRun": True},
    )
    assert "-Ship the zebra index by Friday." in _text(r) and "+Ship the zebra index by Monday." in _text(r)
    assert "Friday" in _text(
        await _call(c, "read_text_file", {"path": "notes/plan.md"})
    )  # dry run wrote nothing
    await _call(
        c, "edit_file", {"path": "notes/plan.md", "edits": [{"oldText": "Friday", "newText": "Monday"}]}
    )
    assert (
        _text(await _call(c, "read_text_file", {"path": "notes/plan.md", "head": 1})) == "# Quarterly plan\n"
    )
    assert "Monday" in _text(await _call(c, "read_text_file", {"path": "notes/plan.md", "tail": 1}))

    async def listed():
        r = await c.call_tool("read_index", {"path": "notes"})
        return not r.is_error and "plan.md" in _text(r) and "Quarterly plan" in _text(r)

    await wait_for(listed)  # the indexer summarised it into notes/INDEX.md
    r = await _call(c, "read_index", {"path": "notes"})
    assert {"path": "/notes/plan.md", "kind": "entry"} in r.structured_content["links"]

    async def found():
        r = await c.call_tool("find", {"term": "plan.md"})
        return [m["path"] for m in r.structured_content["matches"]] if not r.is_error else None

    assert (await wait_for(found))[0] == "/notes/plan.md"
    info = (await _call(c, "get_file_info", {"path": "notes/plan.md"})).structured_content
    assert info["isFile"] and info["size_bytes"] == len(body.replace("Friday", "Monday").encode())
    r = await _call(c, "search_files", {"path": "/", "pattern": "*.md"})
    assert r.structured_content["matches"] == ["/notes/plan.md"]
    await _call(c, "move_file", {"source": "notes/plan.md", "destination": "notes/deep/plan.md"})

    async def deep_listed():
        r = await _call(c, "list_directory", {"path": "notes/deep"})
        got = [(e["name"], e["generated"]) for e in r.structured_content["entries"]]
        return got if ("INDEX.md", True) in got else None

    # INDEX.md is listed over MCP (marked generated) while it resolves: once the changed directory settled
    assert await wait_for(deep_listed) == [("INDEX.md", True), ("plan.md", False)]


async def _recall(c) -> None:
    steps = [
        {"t": 0, "text": "I entered the hall."},
        {"t": 1, "text": "I picked up the red key from the table."},
        {"t": 2, "text": "I opened the blue door."},
    ]
    await _call(c, "create_directory", {"path": "episodes/ep1"})
    lines = "".join(json.dumps(s) + "\n" for s in steps)
    await _call(c, "write_file", {"path": "episodes/ep1/steps.jsonl", "content": lines})
    r = await _call(
        c, "recall", {"episode": "ep1", "question": "where did I pick up the red key", "budget_tokens": 100}
    )
    assert r.structured_content["items"][0]["t"] == 1  # the step that answers ranks first
    assert r.structured_content["tokens"] <= 100
    await _call(c, "recall", {"episode": "../x", "question": "q"}, error=True)
    for blank in ("", " \t"):  # trial 1203b: it answered with the first steps, as if they answered it
        r = await _call(c, "recall", {"episode": "ep1", "question": blank}, error=True)
        assert "EINVAL: the question is empty" in _text(r), _text(r)


async def _bad_input(c) -> None:
    cases = [
        ({"path": "../etc/passwd"}, "EINVAL"),
        ({"path": "notes/../../x"}, "EINVAL"),
        ({"path": "a\x00b"}, "EINVAL"),
        ({"path": "x" * 4096}, "ENAMETOOLONG"),
        ({"path": "nope.md"}, "ENOENT"),
        ({"path": "notes"}, "EISDIR"),
    ]
    for args, code in cases:
        assert code in _text(await _call(c, "read_text_file", args, error=True)), args
    assert "validation error" in _text(await _call(c, "read_text_file", {"path": 5}, error=True))
    assert "Unknown tool" in _text(await _call(c, "no_such_tool", {}, error=True))
    # huge content: refused whole (the server runs with --max-write-bytes 100000)
    r = await _call(c, "write_file", {"path": "notes/huge.md", "content": "x" * 200_000}, error=True)
    assert "at most 100,000" in _text(r)
    assert "ENOENT" in _text(await _call(c, "get_file_info", {"path": "notes/huge.md"}, error=True))
    # binary file
    await _call(c, "write_file", {"path": "notes/bin.dat", "content": "a\x00b"})
    assert "binary" in _text(await _call(c, "read_text_file", {"path": "notes/bin.dat"}, error=True))
    # edits whose oldText is absent or ambiguous: an error, and the file is unchanged
    await _call(c, "write_file", {"path": "notes/e.md", "content": "one two two\n"})
    for old, why in (("three", "not found"), ("two", "ambiguous")):
        edits = [{"oldText": "one", "newText": "1"}, {"oldText": old, "newText": "3"}]
        assert why in _text(await _call(c, "edit_file", {"path": "notes/e.md", "edits": edits}, error=True))
    assert _text(await _call(c, "read_text_file", {"path": "notes/e.md"})) == "one two two\n"
    # generated files are the mount's: EACCES
    assert "EACCES" in _text(await _call(c, "write_file", {"path": "INDEX.md", "content": "x"}, error=True))
    assert "EEXIST" in _text(
        await _call(c, "move_file", {"source": "notes/e.md", "destination": "notes/bin.dat"}, error=True)
    )


@contextlib.contextmanager
def _server(transport: str, libdir, *args: str):
    """What ``Client`` connects to: stdio parameters, or the URL of a running HTTP server."""
    if transport == "stdio":
        yield stdio_params(str(libdir), *args)
    else:
        with http_server(str(libdir), *args) as url:
            yield url


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_tools_index_find_recall_and_errors(libdir, transport):
    async def main(target):
        async with Client(target) as c:
            await _tools_and_toc(c)
            await _write_edit_index_find(c)
            await _recall(c)
            await _bad_input(c)

    with _server(transport, libdir, "--max-write-bytes", "100000") as target:
        anyio.run(main, target)
    _check_store(libdir)


def test_stdio_subscription_hears_the_indexer_rewrite_a_toc(libdir):
    """``subscriptions/listen`` (protocol 2026-07-28)."""

    async def main():
        async with Client(stdio_params(str(libdir))) as c:
            uri = await _section(c, libdir)
            async with c.listen(resource_subscriptions=[uri]) as sub:
                await _call(c, "write_file", {"path": "notes/new.md", "content": "# Fresh note\n"})
                # the indexer may re-render the page before it renders the write (an earlier change's
                # pass): wait for the notification after which the page lists the new file
                with anyio.fail_after(30):
                    async for event in sub:
                        if getattr(event, "uri", None) == uri:
                            page = await c.read_resource(uri)
                            if "new.md" in page.contents[0].text:
                                break

    anyio.run(main)


def test_legacy_resources_subscribe_hears_the_indexer_rewrite_a_toc(libdir):
    """``resources/subscribe`` and ``notifications/resources/updated`` (protocol versions before 2026-07-28,
    the initialize handshake: what most desktop clients speak)."""
    heard: list[str] = []

    async def on_message(message) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            heard.append(str(message.params.uri))

    async def main():
        async with Client(stdio_params(str(libdir)), mode="legacy", message_handler=on_message) as c:
            assert c.server_capabilities.resources.subscribe is True
            uri = await _section(c, libdir)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the SDK marks resources/subscribe deprecated (2026-07-28)
                await c.subscribe_resource(uri)
            await _call(c, "write_file", {"path": "notes/new.md", "content": "# Fresh note\n"})

            async def got():  # a notification, after which the page lists the new file (an earlier
                # change's re-render may be heard first)
                if uri not in heard:
                    return False
                heard.clear()
                return "new.md" in (await c.read_resource(uri)).contents[0].text

            await wait_for(got, libdir=libdir)

    anyio.run(main)


def test_an_indexer_that_dies_is_restarted_and_the_tocs_follow_writes_again(libdir):
    """kill -9 of the indexer the server started: the server notices at its next TOC poll, logs how it ended,
    starts another, and a file written afterwards reaches its INDEX.md (before, the TOCs silently stopped)."""

    async def main():
        async with Client(stdio_params(str(libdir))) as c:
            await _section(c, libdir)
            first = await _indexer_pid(c, libdir)
            os.kill(first, signal.SIGKILL)
            await _call(c, "write_file", {"path": "notes/after.md", "content": "# Written after the kill\n"})

            async def listed():  # its summary (the title): an indexer read it (a pending entry has none)
                return await _has(c, "read_index", {"path": "notes"}, "Written after the kill")

            await wait_for(listed, libdir=libdir)
            second = (await _call(c, "status", {})).structured_content["indexer_pid"]
            assert second and second != first

    anyio.run(main)


def test_an_indexer_the_server_found_running_is_replaced_when_it_stops(libdir):
    """An indexer runs when the server starts (a user's ``libraryfs indexer``, as a mount's would): the server
    starts none. When that indexer stops (SIGTERM, as ``libraryfs umount`` stops a mount's), the server starts
    one at its next TOC poll, and a file written afterwards reaches its INDEX.md (before, the server went on
    taking writes that no indexer indexed)."""
    from helpers.wait import wait_until

    from libraryfs.layout import indexer_pid

    theirs = subprocess.Popen(
        [sys.executable, "-m", "libraryfs.cli.main", "indexer", str(libdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(lambda: indexer_pid(str(libdir)) == theirs.pid, 60, "the user's indexer to hold its lock")

        async def main():
            async with Client(stdio_params(str(libdir))) as c:
                await _section(c, libdir)
                assert await _indexer_pid(c, libdir) == theirs.pid
                theirs.send_signal(signal.SIGTERM)
                assert theirs.wait(60) == 0
                await _call(
                    c, "write_file", {"path": "notes/after.md", "content": "# Written after the stop\n"}
                )

                async def listed():  # its summary (the title): an indexer read it
                    return await _has(c, "read_index", {"path": "notes"}, "Written after the stop")

                await wait_for(listed, libdir=libdir)
                ours = (await _call(c, "status", {})).structured_content["indexer_pid"]
                assert ours and ours != theirs.pid

        anyio.run(main)
    finally:
        if theirs.poll() is None:
            theirs.kill()
            theirs.wait()


HOLD_STOPPING = """
import sys
from libraryfs.layout import INDEXER_LOCK, acquire_lock, mark_lock_stopping
fd = acquire_lock(sys.argv[1], INDEXER_LOCK)
mark_lock_stopping(fd)
print("held", flush=True)
sys.stdin.read()
"""  #: a process holding the library's indexer lock marked ``<pid> stopping`` until its stdin closes


def _kill_and_hold_stopping(server: int, indexer: int, libdir: str) -> subprocess.Popen:
    """With the MCP server ``server`` SIGSTOPped (no TOC poll, so no restart, until SIGCONT): kill -9 its
    ``indexer``, wait until the kernel released the lock, and start a process that holds ``indexer.lock``
    marked ``<pid> stopping`` (:data:`HOLD_STOPPING`; it exits when its stdin closes). Returns that process."""
    from helpers.wait import wait_until

    from libraryfs.layout import indexer_pid

    os.kill(server, signal.SIGSTOP)
    try:
        os.kill(indexer, signal.SIGKILL)
        wait_until(lambda: indexer_pid(libdir) is None, 60, "the killed indexer's lock to be free")
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_STOPPING, libdir],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert holder.stdout.readline() == "held\n"
        return holder
    finally:
        os.kill(server, signal.SIGCONT)


#: the restart's wait for an indexer still shutting down (``mcp.indexer_restart_wait_s``) in the restart
#: tests: long, so that a loaded machine never reaches it before the step the test bounds by it
RESTART_WAIT_S = 120


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_requests_are_answered_while_the_indexer_is_being_restarted(libdir, tmp_path, transport, monkeypatch):
    """The restart of a dead indexer waits (up to ``mcp.indexer_restart_wait_s``) for one still shutting down
    before it starts another; it does so off the event loop: a ``status`` issued meanwhile answers at once (it
    stalled until the restart was over). Deterministic, no timing: a real process holds ``indexer.lock``
    marked ``<pid> stopping`` (taken while the server is SIGSTOPped, so its restart cannot slip in first), so
    the restart cannot complete until the test lets that process go; the server's log says when the restart
    began and when it ended. The one bound: the restart gives up waiting after :data:`RESTART_WAIT_S` (set
    through ``LIBRARYFS_MCP_INDEXER_RESTART_WAIT_S``; the default 10 s was reached under load), and
    ``status`` must answer before that. Over HTTP the tools run in worker threads, but the requests are read
    on the event loop: they stalled too."""
    from libraryfs.layout import indexer_pid, pid_alive, wait_exit

    monkeypatch.setenv("LIBRARYFS_MCP_INDEXER_RESTART_WAIT_S", str(RESTART_WAIT_S))
    err_path = tmp_path / "mcp.err"
    holder = None

    def log() -> str:
        return err_path.read_text(errors="replace")

    async def main(target):
        nonlocal holder
        async with Client(target) as c:
            first = await _indexer_pid(c, libdir)
            server = int(
                pathlib.Path(f"/proc/{first}/stat").read_text().rsplit(")", 1)[1].split()[1]
            )  # its parent
            holder = _kill_and_hold_stopping(server, first, str(libdir))
            await wait_for(_async(lambda: f"the indexer (pid {first}) killed by SIGKILL" in log()))
            await wait_for(_async(lambda: f"waiting up to {RESTART_WAIT_S} s for the indexer" in log()))
            t0 = time.monotonic()
            st = (await _call(c, "status", {})).structured_content
            answered_s = time.monotonic() - t0
            assert st["indexer_pid"] == holder.pid  # the lock's holder, marked stopping
            assert pid_alive(holder.pid)
            assert "another indexer" not in log(), f"status answered only once the restart was over:\n{log()}"
            holder.stdin.close()  # the "stopping" indexer exits: the restart goes on and starts one
            started = await wait_for(
                _async(lambda: re.search(r"started another indexer \(pid (\d+)\)", log()))
            )
            second = int(started.group(1))
            restart_s = time.monotonic() - t0
            assert await _indexer_pid(c, libdir) == second != first
            print(f"status answered in {answered_s:.3f} s; the restart took {restart_s:.3f} s")

    try:
        with open(err_path, "w") as err, _logged_server(transport, str(libdir), err, err_path) as target:
            anyio.run(main, target)
    finally:
        if holder is not None:
            if holder.stdin and not holder.stdin.closed:
                holder.stdin.close()
            holder.wait(30)
            holder.stdout.close()
        # the server's indexer ends with it; one the restart started as the test failed must not outlive it
        left = indexer_pid(str(libdir))
        stopped = wait_exit(left, 60)
        if not stopped and left:
            os.kill(left, signal.SIGKILL)
    assert stopped


def test_a_restart_that_cannot_start_an_indexer_is_logged_and_retried(libdir, tmp_path):
    """The indexer dies and the replacement cannot be spawned (its log, ``logs/indexer.log``, is a directory:
    ``open`` fails with EISDIR): the server logs it, keeps answering, and retries at the next TOC poll; once
    the log is a file again an indexer starts and a write reaches its INDEX.md (before, the spawn's OSError
    ended the TOC notifier and the server)."""
    from libraryfs.layout import log_path

    err_path = tmp_path / "mcp.err"
    indexer_log = pathlib.Path(log_path(str(libdir), "indexer"))

    def log() -> str:
        return err_path.read_text(errors="replace")

    async def main(target):
        async with Client(target) as c:
            await _section(c, libdir)
            first = await _indexer_pid(c, libdir)
            indexer_log.rename(indexer_log.with_suffix(".aside"))
            indexer_log.mkdir()
            os.kill(first, signal.SIGKILL)
            await wait_for(_async(lambda: "could not start another indexer" in log()))
            assert "Is a directory" in log(), log()
            st = (await _call(c, "status", {})).structured_content  # the server still answers
            assert st["indexer_pid"] is None, st
            indexer_log.rmdir()
            started = await wait_for(
                _async(lambda: re.search(r"started another indexer \(pid (\d+)\)", log()))
            )
            assert int(started.group(1)) != first
            await _call(
                c, "write_file", {"path": "notes/later.md", "content": "# After the failed restart\n"}
            )
            await wait_for(
                lambda: _has(c, "read_index", {"path": "notes"}, "After the failed restart"), libdir=libdir
            )

    with open(err_path, "w") as err, _logged_server("stdio", str(libdir), err, err_path) as target:
        anyio.run(main, target)


@contextlib.contextmanager
def _logged_server(transport: str, libdir: str, err, err_path):
    """``libraryfs mcp LIBDIR`` with its stderr (its log) in the open file ``err`` at ``err_path``: the MCP
    client's target (over stdio the client starts it; over HTTP a subprocess on a port the OS picks, stopped
    with SIGTERM on exit)."""
    if transport == "stdio":
        yield stdio_client(stdio_params(libdir), errlog=err)
        return
    from helpers.wait import wait_until

    server = subprocess.Popen(
        [sys.executable, "-m", "libraryfs.cli.main", "mcp", libdir, "--transport", "http", "--port", "0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
    )  # fmt: skip
    try:
        line = wait_until(
            lambda: server.poll() is None and re.search(r"serving (http://\S+)", err_path.read_text()),
            60,
            "the MCP server to listen",
        )
        yield line.group(1)
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_a_server_shut_down_while_restarting_its_indexer_exits_and_starts_none(libdir, tmp_path):
    """End of stdin while the restart waits for an indexer still shutting down (as above): the server exits
    (status 0) without waiting for it and starts no indexer after it stopped (IndexerKeeper.stop and the
    restart's thread share one lock and a stop flag). The bound: the exit comes before half the restart's
    own wait, :data:`RESTART_WAIT_S` (``LIBRARYFS_MCP_INDEXER_RESTART_WAIT_S``; half the default 10 s was
    exceeded under load): a restart that ignored the stop kept the process until that wait ended."""
    from helpers.wait import wait_until

    from libraryfs.layout import indexer_pid, pid_alive

    err_path = tmp_path / "mcp.err"
    with open(err_path, "wb") as err:
        server = subprocess.Popen(
            [sys.executable, "-m", "libraryfs.cli.main", "mcp", str(libdir)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
            env=dict(os.environ, LIBRARYFS_MCP_INDEXER_RESTART_WAIT_S=str(RESTART_WAIT_S)),
        )  # fmt: skip
    holder = None
    try:
        first = wait_until(lambda: indexer_pid(str(libdir)), 60, "the MCP server's indexer to hold its lock")
        holder = _kill_and_hold_stopping(server.pid, first, str(libdir))
        wait_until(  # the restart has begun and waits for the holder, as long as this test set
            lambda: f"waiting up to {RESTART_WAIT_S} s for the indexer" in err_path.read_text(),
            60,
            "the restart to wait",
        )
        t0 = time.monotonic()
        server.stdin.close()
        status = server.wait(RESTART_WAIT_S / 2)
        exit_s = time.monotonic() - t0
        log = err_path.read_text()
        assert status == 0, log[-3000:]
        assert pid_alive(holder.pid)  # the server did not wait for it
        assert "another indexer" not in log and "Traceback" not in log, log[-3000:]
        print(f"the server exited {exit_s:.3f} s after the end of its stdin")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        if not server.stdin.closed:
            server.stdin.close()
        if holder is not None:
            holder.stdin.close()
            holder.wait(30)
            holder.stdout.close()
    assert indexer_pid(str(libdir)) is None  # the holder's lock is gone and the server started none
    _check_store(libdir)


async def _indexer_pid(c, libdir) -> int:
    """The pid of the indexer once it holds its lock (``status``): under load the server answers, and even
    serves a pending TOC page, before the indexer it started has imported its modules and taken the lock."""

    async def held():
        return (await _call(c, "status", {})).structured_content["indexer_pid"]

    return await wait_for(held, libdir=libdir)


def _async(predicate):
    """``predicate`` as the coroutine function :func:`wait_for` awaits."""

    async def check():
        return predicate()

    return check


async def _section(c, libdir) -> str:
    """Create ``notes/``, wait until it has a TOC page 0 (the pending placeholder, served once the directory
    has settled, or the indexer's page, whichever comes first: the placeholder says "# Index of /notes", the
    rendered page "# notes"), return the TOC's URI."""
    await _call(c, "create_directory", {"path": "notes"})
    await wait_for(lambda: _has(c, "read_index", {"path": "notes"}, TOC_HEADER), libdir=libdir)
    return "library://notes/INDEX.md"


async def _has(c, tool: str, args: dict, needle: str) -> bool:
    r = await c.call_tool(tool, args)
    return not r.is_error and needle in _text(r)


@pytest.mark.parametrize("transport, given_by", [("stdio", "flag"), ("http", "config.toml")])
def test_read_only_refuses_every_write_tool(libdir, transport, given_by):
    async def main(target):
        async with Client(target) as c:
            writes = [
                ("write_file", {"path": "a.md", "content": "x"}),
                ("create_directory", {"path": "d"}),
                ("edit_file", {"path": "a.md", "edits": [{"oldText": "x", "newText": "y"}]}),
                ("move_file", {"source": "inbox", "destination": "inbox2"}),
            ]
            for name, args in writes:
                assert "EROFS" in _text(await _call(c, name, args, error=True))
            r = await _call(c, "list_directory", {"path": "/"})
            assert [e["name"] for e in r.structured_content["entries"] if not e["generated"]] == []

    if given_by == "config.toml":  # the one settings loader: [mcp] in the library's config.toml
        (libdir / "config.toml").write_text("[mcp]\nread_only = true\n")
    with _server(transport, libdir, *(["--read-only"] if given_by == "flag" else [])) as target:
        anyio.run(main, target)


def test_http_binds_loopback_caps_bodies_and_requires_a_token_elsewhere(libdir):
    with http_server(str(libdir), "--no-indexer") as url:
        assert url.startswith("http://127.0.0.1:")
        # request bodies are capped: a declared 40 MiB body is refused (413) before it is sent
        assert _declare_body(url, 40 << 20) == 413

    token_env = {"LIBRARYFS_MCP_TOKEN": "s3cret-token"}
    with http_server(str(libdir), "--no-indexer", env=token_env) as url:
        assert _post(url, b"{}") == 401
        assert _post(url, b"{}", token="wrong") == 401
        assert _post(url, b"{}", token="s3cret-token") != 401
        # the scheme is case-insensitive (RFC 9110 §11.1); the token is not
        for header in ("bearer s3cret-token", "BEARER s3cret-token", "Bearer  s3cret-token"):
            assert _post(url, b"{}", authorization=header) != 401, header
        for header in ("Bearer S3CRET-TOKEN", "Basic s3cret-token", "Bearers3cret-token", "s3cret-token"):
            assert _post(url, b"{}", authorization=header) == 401, header

    # off loopback without a token: refused at start, one line, exit 1
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "libraryfs.cli.main",
            "mcp",
            str(libdir),
            "--transport",
            "http",
            "--host",
            "0.0.0.0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "LIBRARYFS_MCP_TOKEN"},
    )
    assert r.returncode == 1 and "bearer token" in r.stderr and r.stderr.count("\n") == 1


def _post(url: str, body: bytes, token: str | None = None, authorization: str | None = None) -> int:
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    if authorization:
        headers["authorization"] = authorization
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def _declare_body(url: str, length: int) -> int:
    """Status of a POST that declares a ``length``-byte body and sends none of it."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.putrequest("POST", u.path)
        conn.putheader("content-type", "application/json")
        conn.putheader("accept", "application/json, text/event-stream")
        conn.putheader("content-length", str(length))
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("transport", "sig", "status"),
    [("stdio", signal.SIGKILL, -signal.SIGKILL), ("http", signal.SIGKILL, -signal.SIGKILL),
     ("http", signal.SIGTERM, 0)],
)  # fmt: skip
def test_the_indexer_an_mcp_server_started_stops_with_the_server(libdir, tmp_path, transport, sig, status):
    """No indexer outlives the ``libraryfs mcp`` that started it: ``kill -9`` (the indexer is tied to the
    server by a pipe, libraryfs.layout.tie_pipe, and stops at its EOF) or SIGTERM over HTTP (a clean exit,
    status 0: uvicorn raises the SIGTERM it shut down on again, which once killed the server before it
    stopped its indexer and closed the store)."""
    from helpers.wait import wait_until

    from libraryfs.layout import indexer_pid, pid_alive, wait_exit

    args = ["--transport", "http", "--port", "0"] if transport == "http" else []
    with open(tmp_path / "mcp.err", "wb") as err:
        server = subprocess.Popen(
            [sys.executable, "-m", "libraryfs.cli.main", "mcp", str(libdir), *args],
            stdin=subprocess.PIPE,  # kept open: over stdio the server would stop on its EOF
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    child = None
    try:
        listening = (
            (lambda: "serving http://" in (tmp_path / "mcp.err").read_text()) if args else lambda: True
        )
        wait_until(listening, 60, "the MCP server to listen")
        child = wait_until(lambda: indexer_pid(str(libdir)), 60, "the MCP server's indexer to hold its lock")
        assert server.poll() is None
        server.send_signal(sig)
        assert server.wait(60) == status, (tmp_path / "mcp.err").read_text()[-2000:]
        assert wait_exit(child, 60), f"indexer {child} outlived its MCP server"
        assert indexer_pid(str(libdir)) is None
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        server.stdin.close()
        if child and pid_alive(child):  # the failure is reported above; leave no process behind
            os.kill(child, signal.SIGTERM)
            wait_exit(child, 30)
    _check_store(libdir)


EDITS_PER_SERVER = 40


def test_concurrent_edits_from_two_servers_are_all_kept(libdir):
    """Two real servers on one library, each with 40 ``edit_file`` calls in flight at once, every one
    inserting its own line before ``END``: all 80 succeed and all 80 lines are in the file. Before the
    edit's read, match and write were one write transaction, an edit that read the file while the other
    server's edit was between its read and its write overwrote it (the tester saw 47 of 50 lines)."""

    async def edits(c, tag: str) -> None:
        async def one(i: int) -> None:
            edit = {"oldText": "END\n", "newText": f"{tag}{i}\nEND\n"}
            await _call(c, "edit_file", {"path": "notes/lost.md", "edits": [edit]})

        async with anyio.create_task_group() as tg:
            for i in range(EDITS_PER_SERVER):
                tg.start_soon(one, i)

    async def main():
        async with Client(stdio_params(str(libdir))) as a, Client(stdio_params(str(libdir))) as b:
            await _call(a, "create_directory", {"path": "notes"})
            await _call(a, "write_file", {"path": "notes/lost.md", "content": "START\nEND\n"})
            async with anyio.create_task_group() as tg:
                tg.start_soon(edits, a, "A")
                tg.start_soon(edits, b, "B")
            return _text(await _call(b, "read_text_file", {"path": "notes/lost.md"}))

    text = anyio.run(main)
    lines = text.splitlines()
    want = {f"{t}{i}" for t in "AB" for i in range(EDITS_PER_SERVER)}
    assert want - set(lines) == set(), f"{len(want - set(lines))} edits lost"
    assert lines[0] == "START" and lines[-1] == "END" and len(lines) == len(want) + 2
    _check_store(libdir)


def test_find_term_rule_is_the_clis(libdir, run_cli):
    """The MCP ``find`` tool counted characters (a 200-``é`` term, 400 bytes, passed) where ``/.find/TERM``
    and now ``libraryfs find`` count bytes: one rule (``find.check_term``), ENAMETOOLONG over 255 bytes,
    EINVAL for a blank term, and a 255-byte term is searched like any other."""

    async def main():
        async with Client(stdio_params(str(libdir), "--no-indexer")) as c:
            r = await _call(c, "find", {"term": "é" * 200}, error=True)
            assert "ENAMETOOLONG: the search term is 400 bytes; at most 255" in _text(r), _text(r)
            assert "EINVAL: the search term is empty" in _text(
                await _call(c, "find", {"term": "  "}, error=True)
            )
            r = await _call(c, "find", {"term": "é" * 127 + "x"})  # 255 bytes: searched, no match
            assert r.structured_content["matches"] == []

    anyio.run(main)
    assert run_cli("find", str(libdir), "é" * 200).returncode == 2  # the CLI refuses the same term


def test_read_index_labels_a_users_own_index_md_an_entry(libdir):
    """A user's own ``notes/INDEX.md`` (stored: the section's TOC is then ``notes/.index/INDEX.md``,
    docs/posix.md) is one of the section's entries; ``read_index`` labelled its link a ``page`` by its name
    alone. A generated INDEX.md (``notes/sub/``, the root's sections) stays a ``page``."""
    from libraryfs.daemon.mcpd import Served, ServerOptions
    from libraryfs.fs.tree import StoreTree

    s = Served(str(libdir), ServerOptions(indexer=False))
    try:
        s.ops.makedirs(b"/notes/sub")
        s.ops.write(b"/notes/plan.md", b"# Plan\n\nShip it.\n")
        s.ops.write(b"/notes/sub/x.md", b"# Sub note\n")
        StoreTree(s.store).write_bytes("notes/INDEX.md", b"# My own index\n\nWritten by hand.\n")
    finally:
        s.close()

    async def main():
        async with Client(stdio_params(str(libdir))) as c:

            async def listed():  # the server's indexer rendered notes/ with the user's file in it
                r = await c.call_tool("read_index", {"path": "notes"})
                return not r.is_error and "My own index" in _text(r) and "sub" in _text(r) and r

            r = await wait_for(listed, libdir=libdir)
            assert r.structured_content["path"] == "/notes/.index/INDEX.md"
            links = r.structured_content["links"]
            assert {"path": "/notes/INDEX.md", "kind": "entry"} in links, links
            assert {"path": "/notes/sub/INDEX.md", "kind": "page"} in links, links
            root = (await _call(c, "read_index", {"path": "/"})).structured_content["links"]
            assert {"path": "/notes/.index/INDEX.md", "kind": "page"} in root, root

    anyio.run(main)


_REPLACE = """
import sys
from libraryfs.daemon.mcpd import Served, ServerOptions
s = Served(sys.argv[1], ServerOptions(indexer=False))
try:
    s.ops.write(b"/big.log", b"replaced\\n")
finally:
    s.close()
"""  #: another process replacing ``/big.log`` (write_file: temporary file + rename; the old inode is freed)


def test_read_text_file_is_one_snapshot_while_another_process_replaces_the_file(libdir, monkeypatch):
    """``read_text_file`` read a large file (``tail``: all of it) in 1 MiB chunks, each in its own read
    transaction: another process's ``write_file`` of the same path between two chunks freed the inode, and
    the next chunk failed with EBADF ("file vanished"). Now the requested range is read in one read
    transaction: the answer is the file as it was when the read began. The other process's write is made
    exactly after the server's first read of file data (a hook on ``Txn.read_data``, which runs it and waits
    for it): no timing involved. The SDK's real client, connected in memory."""
    import subprocess

    from libraryfs.daemon.mcpd import Served, ServerOptions
    from libraryfs.fs.store import Txn

    body = b"".join(b"line %07d of the old file\n" % i for i in range(120_000))  # 3.2 MB: 4 chunks
    s = Served(str(libdir), ServerOptions(indexer=False))
    try:
        s.ops.write(b"/big.log", body)
        real_read_data = Txn.read_data
        replaced: list[int] = []

        def read_data(self, ino, offset, size, file_size):
            out = real_read_data(self, ino, offset, size, file_size)
            if file_size == len(body) and not replaced:  # after the first read of the old file's data
                r = subprocess.run(
                    [sys.executable, "-c", _REPLACE, str(libdir)], capture_output=True, text=True
                )
                replaced.append(r.returncode)
                assert r.returncode == 0, r.stderr
            return out

        monkeypatch.setattr(Txn, "read_data", read_data)

        async def main():
            async with Client(s.server) as c:
                r = await c.call_tool("read_text_file", {"path": "big.log", "tail": 2})
                assert not r.is_error, _text(r)
                assert _text(r) == "line 0119998 of the old file\nline 0119999 of the old file\n", _text(r)
                assert r.structured_content["size_bytes"] == len(body)
                r = await c.call_tool("read_text_file", {"path": "big.log"})  # the new file, after
                assert not r.is_error and _text(r) == "replaced\n", _text(r)

        anyio.run(main)
        assert replaced == [0]
    finally:
        s.close()
    _check_store(libdir)
