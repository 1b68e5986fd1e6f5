"""Run the real ``libraryfs mcp`` server for tests: over stdio (the SDK's client starts it) or over
streamable HTTP (a subprocess on a port the OS picks; its URL read from the line it prints on stderr)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
from mcp import StdioServerParameters

from libraryfs.layout import pid_alive, wait_exit


def stdio_params(libdir: str, *args: str) -> StdioServerParameters:
    """Parameters for the SDK's stdio client to start ``libraryfs mcp LIBDIR ARGS`` with this interpreter."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "libraryfs.cli.main", "mcp", libdir, *args],
        env=dict(os.environ),
    )


@contextmanager
def http_server(libdir: str, *args: str, env: dict | None = None, timeout_s: float = 60.0) -> Iterator[str]:
    """``libraryfs mcp LIBDIR --transport http --port 0 ARGS`` in a subprocess; yields its URL; SIGTERM and
    wait on exit. Raises AssertionError with the server's stderr if it exits before listening."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "libraryfs.cli.main",
            "mcp",
            libdir,
            "--transport",
            "http",
            "--port",
            "0",
            *args,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, **(env or {})),
    )
    try:
        url, seen = None, []
        deadline = time.monotonic() + timeout_s
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()  # type: ignore[union-attr]
            if not line:
                raise AssertionError(f"mcp server exited ({proc.wait()}): {''.join(seen)}")
            seen.append(line)
            if "serving http://" in line:
                url = line.rsplit(" ", 1)[-1].strip()
        assert url, f"mcp server did not listen within {timeout_s} s: {''.join(seen)}"
        yield url
    finally:
        proc.terminate()
        if not wait_exit(proc.pid, 15) and pid_alive(proc.pid):
            proc.kill()
        proc.wait()
        proc.stderr.close()  # type: ignore[union-attr]  # an open pipe is a ResourceWarning (an error here)


async def wait_for(check, timeout_s: float = 30.0, poll_s: float = 0.1, libdir: str | None = None):
    """Await ``check()`` until it returns a truthy value (returned); AssertionError after ``timeout_s``,
    with the tail of ``libdir``'s indexer log and its status when ``libdir`` is given."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = await check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(
                f"condition not met within {timeout_s} s (last: {got!r})" + indexer_facts(libdir)
            )
        await anyio.sleep(poll_s)


def indexer_facts(libdir: str | None, lines: int = 40) -> str:
    """The last ``lines`` lines of ``libdir``'s ``logs/indexer.log`` and ``libraryfs status --json``, for a
    failure's message ("" without ``libdir``)."""
    if libdir is None:
        return ""
    from libraryfs.layout import log_path

    path = log_path(str(libdir), "indexer")
    try:
        with open(path, errors="replace") as f:
            log = "".join(f.readlines()[-lines:])
    except OSError as e:
        log = f"({e})"
    st = subprocess.run(
        [sys.executable, "-m", "libraryfs.cli.main", "status", "--json", str(libdir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return (
        f"\n--- {path}:\n{log}\n--- libraryfs status --json (exit {st.returncode}):\n{st.stdout}{st.stderr}"
    )
