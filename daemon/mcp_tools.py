"""The filesystem tools of ``libraryfs mcp``: the reference filesystem server's tools (names and argument
shapes where the meaning matches) over :class:`~libraryfs.daemon.mcp_ops.LibraryOps`, added through a
:class:`~libraryfs.daemon.mcp_registry.ToolRegistry` (annotations, token budget, errors: see there).

Nothing is written partially: writes are atomic (:meth:`LibraryOps.write`), and ``edit_file`` checks every
edit before writing.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
from collections.abc import Callable
from typing import Any

from mcp.types import CallToolResult
from pydantic import BaseModel, Field

from libraryfs.daemon.mcp_ops import is_dir, is_link, show
from libraryfs.daemon.mcp_registry import (
    CHANGE,
    CREATE,
    MARKER,
    READ,
    REPLACE,
    ToolRegistry,
    at_path,
    error_text,
    result,
)
from libraryfs.errors import InvalidArgument, IsADir, LibraryError, NotADir, NotFound

TEXT_SNIFF_BYTES = 8192  #: bytes looked at for a NUL byte (binary file)
#: directory levels ``search_files`` walks below its path. Each level's directories are listed by path, and a
#: path is resolved from the root, so the walk's cost grows with the cube of the depth (1,000 levels: ~10
#: minutes on a loaded host); a deeper tree is reported as such (``depth_limit_reached``), never as "No
#: matches found". ``find`` (the term index) has no such bound.
SEARCH_DEPTH = 64


def decode_text(data: bytes, path: bytes, complete: bool) -> str:
    """``data`` as UTF-8 text; a trailing partial character is dropped when ``complete`` is False.
    Raises InvalidArgument (EINVAL) for a binary file (a NUL byte, or not UTF-8)."""
    if b"\x00" in data[:TEXT_SNIFF_BYTES]:
        raise at_path(InvalidArgument("binary file (a NUL byte): not readable as text"), path)
    for cut in range(0, 1 if complete else 4):
        try:
            return data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    raise at_path(InvalidArgument("binary file (not UTF-8): not readable as text"), path)


class Edit(BaseModel):
    """One replacement of ``edit_file``: ``oldText`` must occur exactly once."""

    oldText: str = Field(description="Text to replace; must occur exactly once in the file")
    newText: str = Field(description="Replacement text")


class FsTools:
    """The filesystem tools (module doc); :meth:`register` adds them to a :class:`ToolRegistry`."""

    def __init__(self, reg: ToolRegistry, *, max_write_bytes: int) -> None:
        self.reg = reg
        self.ops = reg.ops
        self.budget = reg.budget
        self.max_write_bytes = max_write_bytes

    def register(self) -> None:
        """Add every filesystem tool to the registry."""
        r = self.reg
        r.add(self.read_text_file, "read_text_file", "Read a text file", READ)
        r.add(self.read_multiple_files, "read_multiple_files", "Read several text files", READ)
        r.add(self.write_file, "write_file", "Create or replace a file", REPLACE)
        r.add(self.edit_file, "edit_file", "Edit a file by exact replacements", CHANGE)
        r.add(self.create_directory, "create_directory", "Create a directory (with parents)", CREATE)
        r.add(self.list_directory, "list_directory", "List a directory", READ)
        r.add(self.directory_tree, "directory_tree", "A directory's tree", READ)
        r.add(self.move_file, "move_file", "Move or rename a file or directory", CHANGE)
        r.add(self.search_files, "search_files", "Find files by name pattern", READ)
        r.add(self.get_file_info, "get_file_info", "A file's metadata and index facts", READ)

    # -- reading ---------------------------------------------------------------------------------------
    def _text(self, p: bytes, offset: int, tokens: int) -> tuple[str, int, int, bool]:
        """``(text, next offset, size in bytes, cut)``: the file's text from byte ``offset`` within
        ``tokens``. Reads at most 16 bytes per token of the budget."""
        data, _start, size = self.ops.read_range(p, offset, tokens * 16)  # one snapshot: data and size agree
        skip = 0
        while offset and skip < 3 and skip < len(data) and data[skip] & 0xC0 == 0x80:
            skip += 1  # an offset inside a UTF-8 character: start at the next one
        data, offset = data[skip:], offset + skip
        text = decode_text(data, p, complete=offset + len(data) >= size)
        kept, cut = self.budget.fit(text, tokens)
        nxt = offset + len(kept.encode())
        return kept, nxt, size, cut or nxt < size

    def read_text_file(
        self, path: str, head: int | None = None, tail: int | None = None, offset: int = 0
    ) -> CallToolResult:
        """Read a UTF-8 text file of the library (INDEX.md pages included). `head`/`tail`: only the first /
        last N lines. `offset`: start at this byte (a truncated answer names the offset of the rest).
        Paths are library paths: 'notes/plan.md' or '/notes/plan.md'."""
        p = self.reg.path(path)
        if head is not None and tail is not None:
            raise ValueError("give head or tail, not both")
        if offset < 0 or (head is not None and head < 0) or (tail is not None and tail < 0):
            raise ValueError("offset, head and tail must be ≥ 0")
        try:
            if head is None and tail is None:
                text, nxt, size, cut = self._text(p, offset, self.budget.tokens)
                start = nxt - len(text.encode())  # past a partial character at ``offset``
                if cut:
                    text += f"\n{MARKER} at byte {nxt} of {size}; call read_text_file with offset={nxt} for the rest]"
                return result(
                    text,
                    path=show(p),
                    size_bytes=size,
                    offset=start,
                    next_offset=nxt if cut else None,
                    truncated=cut,
                )
            # one snapshot of at most what one answer can hold (16 bytes per token, as _text): the first or
            # the last bytes of the file, however large it is
            window = self.budget.tokens * 16
            data, start, size = self.ops.read_range(p, 0, window, from_end=tail is not None)
        except LibraryError as e:
            raise at_path(e, p) from None
        whole = start == 0 and len(data) == size
        if b"\x00" in data[:TEXT_SNIFF_BYTES]:  # before a part line is dropped: a window of NULs (a sparse
            # file's hole) has no line end, and was dropped whole into an empty answer
            raise at_path(InvalidArgument("binary file (a NUL byte): not readable as text"), p)
        if tail is not None and start > 0:  # the window begins inside a line: drop that part line
            data = data[data.find(b"\n") + 1 :] if b"\n" in data else b""
        lines = decode_text(data, p, complete=head is None or whole).splitlines(keepends=True)
        asked = head if head is not None else tail or 0
        part = lines[:head] if head is not None else lines[len(lines) - asked :] if asked else []
        text, cut = self.budget.fit("".join(part))
        # the window held fewer lines than asked for: the answer is cut, as by the budget
        cut = cut or (not whole and len(part) == len(lines) and len(part) < asked)
        if cut:
            text += f"\n{MARKER} to the token budget; read fewer lines, or use offset]"
        return result(text, path=show(p), size_bytes=size, lines=len(part), truncated=cut)

    def read_multiple_files(self, paths: list[str]) -> CallToolResult:
        """Read several text files at once; the token budget is shared equally. A file that cannot be read
        gets its error in place of its content (the others are still returned)."""
        if not paths:
            raise ValueError("paths is empty")
        share = max(64, self.budget.tokens // len(paths))
        parts, files = [], []
        for raw in paths:
            try:
                p = self.reg.path(raw)
                text, nxt, size, cut = self._text(p, 0, share)
                if cut:
                    text += f"\n{MARKER} at byte {nxt} of {size}; call read_text_file with offset={nxt}]"
                parts.append(f"{show(p)}:\n{text}")
                files.append({"path": show(p), "size_bytes": size, "truncated": cut, "error": None})
            except LibraryError as e:
                msg = error_text(e, raw)
                parts.append(f"{raw}: Error - {msg}")
                files.append({"path": raw, "size_bytes": None, "truncated": False, "error": msg})
        return result("\n---\n".join(parts), files=files)

    # -- writing ---------------------------------------------------------------------------------------
    def _check_content(self, content: str) -> bytes:
        data = content.encode("utf-8", "surrogatepass")
        if len(data) > self.max_write_bytes:
            raise InvalidArgument(
                f"content is {len(data):,} bytes; this server accepts at most {self.max_write_bytes:,} "
                "(--max-write-bytes)"
            )
        return data

    def _file_path(self, path: str) -> bytes:
        """The library path of a file to write: as :meth:`ToolRegistry.path`, but a trailing ``/`` (which
        names a directory) is refused as open(2) refuses it — ENOTDIR on an existing non-directory, else
        EISDIR — instead of being dropped (``notes/plan.md/`` wrote ``notes/plan.md``)."""
        p = self.reg.path(path)
        if path.endswith("/"):
            try:
                is_directory = is_dir(self.ops.stat(self.ops.follow(p)))
            except NotFound:
                is_directory = True  # open("new/", O_CREAT): EISDIR
            except LibraryError as e:
                raise at_path(e, p) from None
            why = "a path ending in '/' names a directory; give the file's path without it"
            raise at_path(IsADir(why) if is_directory else NotADir(why), p)
        return p

    def write_file(self, path: str, content: str) -> CallToolResult:
        """Create a file or replace its content (atomically: readers see the old or the new content). The
        directory must exist (create_directory). The indexer then lists it in its directory's INDEX.md."""
        p = self._file_path(path)
        data = self._check_content(content)
        try:
            created = self.ops.write(p, data)
        except LibraryError as e:
            raise at_path(e, p) from None
        verb = "Created" if created else "Replaced"
        return result(
            f"{verb} {show(p)} ({len(data):,} bytes)", path=show(p), size_bytes=len(data), created=created
        )

    def edit_file(self, path: str, edits: list[Edit], dryRun: bool = False) -> CallToolResult:
        """Apply exact text replacements to a file, in order; each oldText must occur exactly once (else
        nothing is written). Returns a unified diff; dryRun=true only shows it."""
        p = self._file_path(path)
        if not edits:
            raise ValueError("edits is empty")
        diff = ""

        def apply(data: bytes | None) -> bytes:
            """The edited bytes of ``data`` (the file as the write transaction reads it); sets ``diff``.
            Raises InvalidArgument (EINVAL) for a binary file, an empty, absent or ambiguous oldText, or an
            edited file over the write cap: the transaction aborts and nothing is written."""
            nonlocal diff
            old = decode_text(data or b"", p, complete=True)
            new = old
            for k, e in enumerate(edits, 1):
                if not e.oldText:
                    raise at_path(InvalidArgument(f"edit {k}: oldText is empty"), p)
                n = new.count(e.oldText)
                if n != 1:
                    why = "not found" if n == 0 else f"ambiguous: it occurs {n} times (add context)"
                    raise at_path(InvalidArgument(f"edit {k}: oldText {why}; nothing was written"), p)
                new = new.replace(e.oldText, e.newText, 1)
            diff = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), show(p), show(p)))
            return self._check_content(new)

        try:
            if dryRun:
                apply(self.ops.read(p))
            else:  # the read, the edits and the write in one write transaction (LibraryOps.replace)
                self.ops.replace(p, apply)
        except LibraryError as e:
            raise at_path(e, p) from None
        text, cut = self.budget.fit(diff or "(no change)\n")
        if cut:
            text += f"\n{MARKER}: the diff is longer than the token budget]"
        return result(text, path=show(p), applied=not dryRun, truncated=cut)

    def create_directory(self, path: str) -> CallToolResult:
        """Create a directory and any missing parents (an existing directory is fine). A directory is a
        section: the indexer gives it an INDEX.md."""
        p = self.reg.path(path)
        try:
            made = self.ops.makedirs(p)
        except LibraryError as e:
            raise at_path(e, p) from None
        text = f"Created {show(p)}" if made else f"{show(p)} already exists"
        return result(text, path=show(p), created=[show(m) for m in made])

    def move_file(self, source: str, destination: str) -> CallToolResult:
        """Move or rename a file or directory. Fails if the destination exists."""
        src, dst = self.reg.path(source), self.reg.path(destination)
        try:
            self.ops.move(src, dst)
        except LibraryError as e:
            raise e if getattr(e, "path", None) else at_path(e, src) from None
        return result(f"Moved {show(src)} to {show(dst)}", source=show(src), destination=show(dst))

    # -- listing ---------------------------------------------------------------------------------------
    @staticmethod
    def _kind(st: dict) -> str:
        if is_dir(st):
            return "directory"
        if is_link(st):
            return "symlink"
        return "file" if st["st_mode"] & 0o170000 == 0o100000 else "other"  # FIFOs, sockets, devices

    def list_directory(self, path: str = "/", cursor: int = 0, limit: int = 200) -> CallToolResult:
        """List a directory: [DIR]/[FILE]/[LINK] lines, generated names (INDEX.md, .index/, .find/,
        .libraryfs/) marked. Paginated: pass the returned next_cursor as cursor for the next page."""
        p = self.reg.path(path)
        if cursor < 0 or limit < 1:
            raise ValueError("cursor must be ≥ 0 and limit ≥ 1")
        try:
            items = self.ops.listdir(p, stat=False)  # names and types; sizes only for this page
            real = self.ops.follow(p).rstrip(b"/")
        except LibraryError as e:
            raise at_path(e, p) from None
        lines, entries = [], []
        tag = {"directory": "[DIR]", "file": "[FILE]", "symlink": "[LINK]", "other": "[OTHER]"}
        end = min(len(items), cursor + limit)
        for name, st in items[cursor:end]:
            kind, gen = self._kind(st), self.ops.generated(name, p)
            try:
                size = self.ops.stat(real + b"/" + name)["st_size"]
            except LibraryError:  # removed by another process since the listing
                size = None
            n = show(name)
            lines.append(f"{tag[kind]} {n}{' (generated)' if gen else ''}")
            entries.append({"name": n, "type": kind, "size_bytes": size, "generated": gen})
        text, shown = self.budget.fit_lines(lines)
        if shown < len(lines):
            end, entries = cursor + shown, entries[:shown]
        nxt = end if end < len(items) else None
        if nxt is not None:
            text += f"\n{MARKER}: {len(items) - end} more; call list_directory with cursor={nxt}]"
        return result(text, path=show(p), entries=entries, total=len(items), next_cursor=nxt)

    def _walk(self, root: bytes, depth: int, visit: Callable[[bytes, bytes, dict, int], bool]) -> bool:
        """Breadth-first over real entries below ``root`` to ``depth`` levels (a loop over one level's
        directories at a time, no recursion); ``visit(parent, name, stat, level) -> descend``; generated
        directories are not entered. Returns whether directories below the ``depth`` bound were left
        unentered (the answer is then cut and must say so)."""
        level = [root]
        d = 0
        while level:
            d += 1
            if d > depth:
                return True
            nxt = []
            for parent in level:
                try:
                    items = self.ops.listdir(parent, stat=False)
                except LibraryError:
                    continue
                for name, st in items:
                    if self.ops.generated(name, parent):
                        continue
                    if visit(parent, name, st, d) and is_dir(st):
                        nxt.append(parent.rstrip(b"/") + b"/" + name)
            level = nxt
        return False

    def directory_tree(self, path: str = "/", depth: int = 2, max_entries: int = 500) -> CallToolResult:
        """A directory's tree as JSON ({name, type, children}), `depth` levels deep (1–8), generated files
        left out. Cut at max_entries or the token budget (marked)."""
        p = self.reg.path(path)
        if not 1 <= depth <= 8 or max_entries < 1:
            raise ValueError("depth must be 1–8 and max_entries ≥ 1")
        try:
            if not is_dir(self.ops.stat(self.ops.follow(p))):
                raise at_path(InvalidArgument("not a directory"), p)
        except LibraryError as e:
            raise at_path(e, p) from None
        nodes: dict[bytes, list] = {p.rstrip(b"/") or b"/": []}
        count = [0]

        def visit(parent: bytes, name: bytes, st: dict, _d: int) -> bool:
            """Add entry ``name`` of ``parent`` to its parent's children (a directory with its own children
            list); False, stop descending, once ``max_entries`` are taken."""
            if count[0] >= max_entries:
                return False
            count[0] += 1
            node: dict[str, Any] = {"name": show(name), "type": self._kind(st)}
            if is_dir(st):
                node["children"] = nodes.setdefault(parent.rstrip(b"/") + b"/" + name, [])
            nodes[parent.rstrip(b"/") or b"/"].append(node)
            return True

        self._walk(p, depth, visit)
        tree = nodes[p.rstrip(b"/") or b"/"]
        text, cut = self.budget.fit(json.dumps(tree, indent=1, ensure_ascii=False))
        cut = cut or count[0] >= max_entries
        if cut:
            text += f"\n{MARKER}: more entries; use a deeper path, a smaller depth or list_directory]"
        return result(text, path=show(p), tree=tree if not cut else None, entries=count[0], truncated=cut)

    def search_files(
        self,
        path: str,
        pattern: str,
        excludePatterns: list[str] | None = None,
        limit: int = 200,
    ) -> CallToolResult:
        """Find files and directories below `path` whose name or relative path matches the glob `pattern`
        (case-insensitive; '*.md', 'notes/**' style), at most 64 directory levels below `path` (a deeper
        tree is marked: truncated, depth_limit_reached). For a name whose section you do not know, `find`
        (the index) is faster and has no depth limit."""
        p = self.reg.path(path)
        if not pattern or limit < 1:
            raise ValueError("pattern must be non-empty and limit ≥ 1")
        pat, excl = pattern.lower(), [x.lower() for x in excludePatterns or []]
        found: list[str] = []
        base = len(p.rstrip(b"/")) + 1

        def visit(parent: bytes, name: bytes, st: dict, _d: int) -> bool:
            """Keep ``name`` when its name or relative path matches the glob (case-insensitive); False for an
            excluded entry (not entered) or once ``limit`` matches are found."""
            full = parent.rstrip(b"/") + b"/" + name
            rel, n = show(full[base:]).lower(), show(name).lower()
            if any(fnmatch.fnmatchcase(rel, x) or fnmatch.fnmatchcase(n, x) for x in excl):
                return False
            if len(found) < limit and (fnmatch.fnmatchcase(n, pat) or fnmatch.fnmatchcase(rel, pat)):
                found.append(show(full))
            return len(found) < limit

        try:
            self.ops.stat(self.ops.follow(p))
        except LibraryError as e:
            raise at_path(e, p) from None
        deeper = self._walk(p, SEARCH_DEPTH, visit) and len(found) < limit
        text, shown = self.budget.fit_lines(found)
        cut = shown < len(found) or len(found) >= limit
        found = found[:shown]
        if cut:
            text += f"\n{MARKER}: limit of {limit} matches or the token budget; narrow the pattern]"
        elif deeper:  # never "No matches found" for a tree not searched to its end
            note = (
                f"{MARKER}: directories more than {SEARCH_DEPTH} levels below {show(p)} were not searched; "
                "search_files from a deeper path, or find (the index) for a name]"
            )
            text = f"{text}\n{note}" if text else note
        return result(
            text or "No matches found", matches=found, truncated=cut or deeper, depth_limit_reached=deeper
        )

    def get_file_info(self, path: str) -> CallToolResult:
        """Metadata of a file or directory (size, times, permissions, type) and what the index knows about
        it (its one-line summary and size in tokens)."""
        p = self.reg.path(path)
        try:
            st = self.ops.stat(p)
            meta = self.ops.entry_meta(p)
        except LibraryError as e:
            raise at_path(e, p) from None
        parent, name = p.rsplit(b"/", 1)
        info = {
            "path": show(p),
            "type": self._kind(st),
            "size_bytes": st["st_size"],
            "modified_ns": st["st_mtime"],
            "accessed_ns": st["st_atime"],
            "changed_ns": st["st_ctime"],
            "permissions": oct(st["st_mode"] & 0o7777)[2:],
            "isDirectory": is_dir(st),
            "isFile": self._kind(st) == "file",
            "generated": bool(name) and self.ops.generated(name, parent or b"/"),
            **meta,
        }
        text = "\n".join(f"{k}: {v}" for k, v in info.items())
        return result(text, **info)
