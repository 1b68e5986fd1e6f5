"""How MCP tools are registered and answered: the :class:`ToolRegistry` every tool is added through (the
filesystem tools of :mod:`libraryfs.daemon.mcp_tools`, libraryfs's own in :mod:`libraryfs.daemon.mcpd`, and
each feature's through ``Feature.mcp_tools``), the annotation presets, the response token :class:`Budget`,
and the error text.

Every tool carries MCP annotations (read-only, destructive, idempotent; never open-world: it touches
nothing but the library), returns text for the model beside structured content for programs, and keeps
each response within the token budget: a cut response ends with an explicit ``[libraryfs: truncated …]``
line naming the argument that gets the rest (``offset``, ``cursor``).

Errors are tool errors (``isError``, the message for the model), never crashes: a
:class:`~libraryfs.errors.LibraryError` becomes ``"ENOENT: /notes/x.md: no such file"`` — the errno the
mount would return.
"""

from __future__ import annotations

import errno as errno_mod
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from libraryfs.daemon.mcp_ops import LibraryOps, clean_path, show, unescape_shown
from libraryfs.errors import LibraryError, to_errno
from libraryfs.fs.tree import DirTree, StoreTree, Tree
from libraryfs.index.tokens import count_tokens, decode_bytes, encode
from libraryfs.layout import is_live

MARKER = "[libraryfs: truncated"  #: how every cut response's last line begins


def error_text(e: LibraryError, path: str | None = None) -> str:
    """``"ENOENT: /notes/x.md: no such file"``: the errno name the mount would answer, the path, the reason."""
    code = to_errno(e) or errno_mod.EIO
    name = errno_mod.errorcode.get(code, "EIO")
    where = f"{path}: " if path else ""
    return f"{name}: {where}{e or os.strerror(code)}"


class Budget:
    """The token budget of one response (o200k tokens, :func:`libraryfs.index.tokens.count_tokens`)."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    def fit(self, text: str, tokens: int | None = None) -> tuple[str, bool]:
        """The longest prefix of ``text`` within ``tokens`` (default: the whole budget), cut at a line
        end when one is in the second half; ``(prefix, cut)``. One tokenisation of a prefix a few times
        the budget long (the cut is where the budget's last token ends), one count to confirm."""
        limit = self.tokens if tokens is None else tokens
        if len(text) <= limit:  # a token is at least one character
            return text, False
        span = limit * 5  # ~4 characters per token in English text; doubled until it holds the budget
        while True:
            ids = encode(text[:span])
            if len(ids) > limit or span >= len(text):
                break
            span *= 2
        if len(ids) <= limit:
            return text, False
        keep = len(decode_bytes(ids[:limit]).decode("utf-8", "ignore"))
        nl = text.rfind("\n", 0, keep)
        if nl > keep // 2:
            keep = nl + 1
        while keep > 1 and count_tokens(text[:keep]) > limit:  # re-tokenising a prefix can differ at its end
            keep = keep * 19 // 20
        return text[:keep], True

    def fit_lines(self, lines: list[str]) -> tuple[str, int]:
        """The first lines of ``lines`` (joined by newlines) within the budget, whole lines only;
        ``(text, how many)`` — fewer than ``len(lines)`` when cut (never 0 for a non-empty list)."""
        text, cut = self.fit("\n".join(lines))
        if not cut:
            return text, len(lines)
        n = max(1, min(text.count("\n"), len(lines)))  # at least one line: a cursor always moves on
        return "\n".join(lines[:n]), n


def result(text: str, **structured: Any) -> CallToolResult:
    """A tool result: ``text`` for the model, ``structured`` (JSON-able) for programs."""
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


@dataclass
class ToolAnn:
    """What a tool does to the library (MCP ToolAnnotations hints)."""

    read_only: bool = True
    destructive: bool = False
    idempotent: bool = True

    def mcp(self, title: str) -> ToolAnnotations:
        """As MCP ``ToolAnnotations`` (never open-world: only the library is touched)."""
        return ToolAnnotations(
            title=title,
            read_only_hint=self.read_only,
            destructive_hint=self.destructive,
            idempotent_hint=self.idempotent,
            open_world_hint=False,
        )


READ = ToolAnn()
CREATE = ToolAnn(read_only=False, destructive=False, idempotent=True)
REPLACE = ToolAnn(read_only=False, destructive=True, idempotent=True)
CHANGE = ToolAnn(read_only=False, destructive=True, idempotent=False)


def at_path(e: LibraryError, path: bytes) -> LibraryError:
    """``e`` with the library path it concerns, for :func:`error_text` (``ENOENT: /notes/x.md: …``)."""
    e.path = show(path)  # type: ignore[attr-defined]
    return e


class ToolRegistry:
    """Adds tools to an :class:`MCPServer`, each wrapped so that library errors become tool errors, and
    write tools are refused on a read-only server. ``inline``: run tools on the event loop (one client, as
    over stdio: saves a worker-thread hop per call, measured in ``bench/mcp_latency.py``) instead of in a
    worker thread (HTTP: a long call must not stall other sessions). Also what features register through
    (:meth:`libraryfs.hooks.Feature.mcp_tools`): ``add(fn, name, title, ann)``, :attr:`budget`,
    :attr:`ops`, :attr:`libdir`, :meth:`path`, :meth:`result`, :meth:`at_path`."""

    def __init__(
        self, server: MCPServer, ops: LibraryOps, libdir: str, budget: Budget, *, inline: bool = False
    ) -> None:
        self.server = server
        self.inline = inline
        self.ops = ops
        self.libdir = libdir
        self.budget = budget
        self.names: list[str] = []
        self._tree: StoreTree | None = None

    def path(self, p: str) -> bytes:
        """An agent's path confined to the library (:func:`~libraryfs.daemon.mcp_ops.clean_path`). A name
        that is not UTF-8 reaches the agent escaped (``caf\\xe9.txt``: :func:`~libraryfs.daemon.mcp_ops.show`)
        and comes back so, as do control and invisible characters (``new\\x0aline.md``, ``zero\\x200bwidth.md``:
        :func:`~libraryfs.daemon.mcp_ops.unescape_shown`). The first of these that exists is taken: the path as
        typed (a name holding a literal backslash), the escapes undone with ``\\x80``–``\\x9f`` as bytes, then
        as C1 characters (``show`` writes both alike); for a path that does not exist yet, the escapes as
        bytes."""
        raw = clean_path(p, self.ops.mountpoint)
        if b"\\x" not in raw:
            return raw
        tried = []
        for cand in (raw, unescape_shown(raw), unescape_shown(raw, c1_chars=True)):
            if cand in tried:
                continue
            tried.append(cand)
            try:
                self.ops.stat(cand)
                return cand
            except LibraryError:
                pass
        return tried[1] if len(tried) > 1 else raw  # a new name: the escapes as bytes

    result = staticmethod(result)
    #: :func:`at_path`, for features: a :class:`LibraryError` that names the library path it concerns
    at_path = staticmethod(at_path)
    #: the annotation presets, for features (which do not import this module)
    READ, CREATE, REPLACE, CHANGE = READ, CREATE, REPLACE, CHANGE

    def tree(self) -> Tree:
        """A :class:`~libraryfs.fs.tree.Tree` over the library for features' builders and readers: through
        the mount when it is live (the kernel's caches stay coherent), else over this server's store. Use
        it under :attr:`ops`'s ``lock``."""
        mp = self.ops.mountpoint
        if mp and is_live(mp):
            return DirTree(mp)
        if self._tree is None:
            self._tree = StoreTree(self.ops.view.store)
        return self._tree

    def add(self, fn: Callable[..., CallToolResult], name: str, title: str, ann: ToolAnn = READ) -> None:
        """Register ``fn`` (a sync function; its docstring is the tool's description, its type hints the
        input schema) as tool ``name``. A :class:`LibraryError` or ``ValueError`` it raises becomes a tool
        error; a write tool on a read-only server fails with EROFS before ``fn`` runs."""
        ops = self.ops

        def call(*args: Any, **kwargs: Any) -> CallToolResult:
            """Run ``fn``: EROFS on a read-only server for a write tool; a :class:`LibraryError` becomes a
            :class:`ToolError` ``"ENOENT: path: reason"`` (:func:`error_text`), a ``ValueError`` or
            ``UnicodeError`` one ``"EINVAL: reason"``."""
            if not ann.read_only and ops.read_only:
                raise ToolError(f"EROFS: {name}: the library is served read-only (--read-only)")
            try:
                return fn(*args, **kwargs)
            except LibraryError as e:
                raise ToolError(error_text(e, getattr(e, "path", None))) from None
            except (ValueError, UnicodeError) as e:
                raise ToolError(f"EINVAL: {e}") from None

        if self.inline:  # a coroutine function: the SDK runs it on the event loop, no thread hop

            @functools.wraps(fn)
            async def wrapper(*args: Any, **kwargs: Any) -> CallToolResult:
                """The tool as a coroutine function for the MCP SDK (runs ``call`` on the event loop;
                ``functools.wraps`` gives it ``fn``'s name, docstring and signature)."""
                return call(*args, **kwargs)

        else:  # a plain function: the SDK runs it in a worker thread

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> CallToolResult:
                """The tool as a plain function for the MCP SDK (run in a worker thread; ``functools.wraps``
                gives it ``fn``'s name, docstring and signature)."""
                return call(*args, **kwargs)

        self.server.add_tool(wrapper, name=name, title=title, annotations=ann.mcp(title))
        self.names.append(name)
