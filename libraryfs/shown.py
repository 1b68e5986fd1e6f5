"""How a name or path is shown to a person or a model: one line, what it holds visible. The one escaping
of names for display — TOC link text (:func:`libraryfs.index.toc.display_name`), the MCP tools' paths
(:func:`libraryfs.daemon.mcp_ops.show`), ``libraryfs find``'s text output and every log line that names a
file (``indexer.log``: a name holding a newline must not start a forged line). No dependencies: every layer
(core, daemons, CLI) may use it."""

from __future__ import annotations

import os
import re

#: the characters :func:`escape_controls` escapes: C0, DEL, C1, zero-width (U+200B–U+200F), line and
#: paragraph separators and the bidi embeddings/overrides (U+2028–U+202E), the bidi isolates (U+2066–U+2069)
CTRL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")


def escape_controls(s: str) -> str:
    """``s`` with every control or invisible character (C0, DEL, C1, zero-width, line/paragraph separators,
    bidi controls: :data:`CTRL`) written as ``\\xNN`` (its code point in hex, two digits below U+0100, four
    above): a name shown on one line stays one line and shows what it holds — ``new\\nline.md`` →
    ``new\\x0aline.md``, U+202E → ``\\x202e``."""
    if CTRL.search(s):
        s = "".join(f"\\x{ord(c):02x}" if CTRL.match(c) else c for c in s)
    return s


def is_escaped_control(c: str) -> bool:
    """Whether :func:`escape_controls` writes the character ``c`` as ``\\xNN`` (its code point in hex: two
    digits below U+0100, four for the zero-width, separator and bidi controls) — what a reader of an escaped
    name needs to take ``\\x200b`` back as U+200B."""
    return len(c) == 1 and CTRL.match(c) is not None


def show_name(name: bytes | str) -> str:
    """A name or path (bytes, or ``str`` from ``os.fsdecode`` with its lone surrogates) as one line of text:
    bytes that are not UTF-8 as ``\\xNN`` (``caf\\xe9.txt``, never ``caf\\udce9.txt``), control and invisible
    characters escaped (:func:`escape_controls`: ``plan\\x0anotes.md``, ``invoice\\x202efdp.exe``). As the TOC
    pages, ``libraryfs find`` and the MCP tools show names."""
    raw = os.fsencode(name) if isinstance(name, str) else name
    return escape_controls(raw.decode("utf-8", "backslashreplace"))
