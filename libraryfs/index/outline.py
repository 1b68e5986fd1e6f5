"""What an entry is and what it defines: a deterministic outline of its text (issue 13 item 2).

:func:`outline` reads an entry's text once and returns its :class:`Outline`: the kind of document, its
title, the names it *defines* and its first sentence of real content. The TOC line of the entry
(:func:`libraryfs.index.lines.entry_summary`), the section lines above it and the name catalogue are built
from outlines; the names are also kept in the entry's ``meta`` record (``EntryMeta.defines``) for the finder.

Rules, by kind (each has a test in ``tests/unit/test_outline.py``):

* **reStructuredText** (``.rst``, ``.rst.txt``, or an underlined title): the title; names from the object
  directives (``.. function:: / method:: / class:: / exception:: / data:: / attribute:: / module:: /
  c:function:: …``, qualified by ``.. module::`` / ``.. currentmodule::`` and by an enclosing ``.. class::``
  as Sphinx does), glossary terms; the ``:synopsis:`` of the module as the lead sentence; directive
  blocks, comments (``.. XXX …``, the "Anyone can add text" maintenance notes), field lists (``:Release:``),
  ``Source code: …`` lines and transitions are never a lead.
* **Markdown**: the first heading (ATX ``#`` or setext) is the title, later headings are kept; YAML or TOML
  front matter is skipped (its ``title:`` is used when there is no heading); badges, images and HTML
  comments are never a lead; the first column of a table headed ``symbol`` / ``name`` lists names (the
  code index's ``SYMBOLS.md``).
* **Code**: the code index's header comment (``# Parser.parse — method · pkg/mod.py:12-30 · Summary``)
  names the symbol; otherwise definitions are found per language (Python ``def``/``class`` qualified by
  their class, JavaScript/TypeScript, Go, Rust, C, shell), and the module docstring or first comment that
  is not a licence or shebang is the lead.
* **HTML** (by name or ``<!DOCTYPE html>`` / ``<html``): ``<title>``, ``<h1>``–``<h3>`` and the meta
  description, through :mod:`html.parser` (the standard library's tolerant parser); tags never reach a line.
* **JSON**: its top-level keys. **Plain text**: the first sentence.

Bounded work: at most :data:`SCAN_CHARS` characters are examined and no line longer than
:data:`LINE_CHARS` is matched against a pattern (a 1 MB single-line file costs one slice). Nothing here
raises on any input text; the caller (the indexer) still guards every entry.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from libraryfs.index import codeparse, htmltext, markup

#: version of these rules: entries extracted by an older one are examined again (``EntryMeta.outline``)
OUTLINE_VERSION = 2
SCAN_CHARS = 400_000  #: characters of an entry examined for names and headings
LINE_CHARS = 2_000  #: longer lines are cut before any pattern sees them
MAX_NAMES = 400  #: names kept per entry (in document order)
MAX_HEADINGS = 40


@dataclass
class Outline:
    """An entry's outline. ``kind``: rst, markdown, code, html, json, text, binary or empty; ``names``: the
    names it defines (fully qualified where the document says so, document order, unique); ``headings``:
    section headings below the title; ``lead``: its first sentence of content (markup removed)."""

    kind: str = "text"
    title: str = ""
    names: list[str] = field(default_factory=list)
    headings: list[str] = field(default_factory=list)
    lead: str = ""
    detail: str = ""  #: a fact line for kinds without prose (binary type, JSON keys), a symbol's kind
    symbol: bool = False  #: one symbol of a code index (its file holds that symbol only)
    #: the visible text, for kinds whose source is markup (html): keywords are drawn from it, not from tags
    text: str = ""


_RST_EXT = (".rst", ".rst.txt", ".rest")
_MD_EXT = (".md", ".markdown", ".mdown", ".mkd")
_HTML_EXT = (".html", ".htm", ".xhtml")
_HTML_START = re.compile(
    r"^\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html)\b", re.I | re.S
)

#: magic numbers of common binary formats → a name for the summary
_MAGIC = (
    (b"%PDF-", "PDF document"),
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"GIF87a", "GIF image"),
    (b"GIF89a", "GIF image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"PK\x03\x04", "ZIP archive"),
    (b"\x1f\x8b", "gzip data"),
    (b"\x7fELF", "ELF executable"),
    (b"SQLite format 3\x00", "SQLite database"),
    (b"BZh", "bzip2 data"),
    (b"\xfd7zXZ\x00", "xz data"),
    (b"RIFF", "RIFF media"),
    (b"OggS", "Ogg media"),
    (b"ID3", "MP3 audio"),
    (b"\x00asm", "WebAssembly module"),
)


def binary_kind(head: bytes) -> str:
    """A name for binary content from its first bytes (``"PNG image"``), else ``"binary data"``."""
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return what
    return "binary data"


def decode_text(data: bytes) -> tuple[str, str] | None:
    """Text of ``data`` and the encoding used, or None when it is binary.

    UTF-8 (a BOM is dropped); UTF-16 with a BOM; otherwise, when at most 2.5% of the bytes fail as UTF-8
    and there is no NUL, UTF-8 with replacement characters; when more fail but the bytes look like
    8-bit text (no NUL, few control bytes), Latin-1 (every byte decodes: an unknown 8-bit encoding
    still gives words). Anything else (NULs, control bytes) is binary.
    """
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16"), "utf-16"
        except UnicodeDecodeError:
            cut = len(data) - (len(data) % 2)
            return data[:cut].decode("utf-16", "replace"), "utf-16"
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    head = data[:4096]
    if b"\0" in head:
        return None
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    text = data.decode("utf-8", "replace")
    bad = text.count("\ufffd")
    if bad * 10 <= len(data) // 4 + 1:
        return text, "utf-8"
    ctrl = sum(1 for b in head if b < 9 or 13 < b < 32 or b == 127)
    if ctrl * 50 <= len(head):
        return data.decode("latin-1"), "latin-1"
    return None


def detect_kind(name: str, text: str) -> str:
    """The document kind of an entry named ``name`` holding ``text`` (see the module docstring)."""
    low = name.lower()
    if low.endswith(_HTML_EXT) or _HTML_START.match(text[:4096]):
        return "html"
    if low.endswith(_RST_EXT):
        return "rst"
    if low.endswith(_MD_EXT):
        return "markdown"
    if codeparse.is_code(low, text):
        return "code"
    if low.endswith(".json") or (text.lstrip()[:1] in ("{", "[") and low.endswith((".jsonl", ".geojson"))):
        return "json"
    if markup.looks_like_rst(text):
        return "rst"
    if markup.looks_like_markdown(text):
        return "markdown"
    return "text"


def outline(name: str, text: str, *, size_bytes: int | None = None, head: bytes = b"") -> Outline:
    """The outline of an entry called ``name`` whose (decoded) text is ``text``.

    ``size_bytes``: the entry's size (for the facts of empty and binary entries); ``head``: its first
    bytes when it is binary (``text`` is then ignored and should be ``""``). Never raises.
    """
    size = len(text.encode("utf-8", "surrogatepass")) if size_bytes is None else size_bytes
    if head and not text:
        return Outline(kind="binary", detail=f"{binary_kind(head)}, {size:,} bytes")
    if not text.strip():
        return Outline(kind="empty", detail="empty file" if size == 0 else f"blank, {size:,} bytes")
    text = text.lstrip("\ufeff")[:SCAN_CHARS].replace("\r\n", "\n").replace("\r", "\n")
    kind = detect_kind(name, text)
    try:
        if kind == "html":
            out = htmltext.html_outline(text)
        elif kind == "rst":
            out = markup.rst_outline(text)
        elif kind == "markdown":
            out = markup.markdown_outline(text)
        elif kind == "code":
            out = codeparse.code_outline(name, text)
        elif kind == "json":
            out = _json_outline(text)
        else:
            out = Outline(lead=markup.first_sentence(markup.prose_lines(text.split("\n"))))
    except (RecursionError, ValueError, IndexError):  # pragma: no cover - defensive: never fail an entry
        out = Outline(lead=markup.first_sentence(markup.prose_lines(text.split("\n")[:200])))
    out.kind = kind
    out.names = unique(out.names)[:MAX_NAMES]
    out.headings = unique(h for h in out.headings if h and h != out.title)[:MAX_HEADINGS]
    return out


SCAN_BYTES = SCAN_CHARS * 2  #: bytes of an entry decoded for :func:`extract`


@dataclass
class Extracted:
    """What the indexer keeps of an entry's content: ``text`` (the decoded first ``sample_bytes``, for
    builders; '' when binary), ``head`` (first bytes of binary content), its outline and keywords."""

    text: str
    binary: bool
    head: bytes
    outline: Outline
    keywords: list[str]


def extract(name: str, data: bytes, size_bytes: int, sample_bytes: int = 8192) -> Extracted:
    """Decode (:func:`decode_text`) and outline the first :data:`SCAN_BYTES` of ``data`` (an entry's
    content or its prefix); never raises."""
    from libraryfs.index.terms import keywords

    decoded = decode_text(data[:SCAN_BYTES])
    if decoded is None:
        o = outline(name, "", size_bytes=size_bytes, head=data[:64] or b"\0")
        return Extracted("", True, data[:64], o, [])
    text = decoded[0]
    o = outline(name, text, size_bytes=size_bytes)
    body = o.text or text  # html: its visible text (the tags' words are not the entry's: href, div, span)
    kw = keywords(o.title, o.lead, o.headings, o.names, body) if o.kind not in ("empty", "binary") else []
    sample = data[:sample_bytes]
    sample_text = (
        sample.decode(decoded[1], "replace") if decoded[1] != "utf-16" else text[: sample_bytes // 2]
    )
    return Extracted(sample_text.lstrip("\ufeff"), False, b"", o, kw)


def _json_outline(text: str) -> Outline:
    try:
        obj = json.loads(text)
    except ValueError:
        return Outline(lead=markup.first_sentence(markup.prose_lines(text.split("\n")[:50])))
    if isinstance(obj, dict):
        keys = [str(k)[:40] for k in list(obj)[:12]]
        title = obj.get("title") or obj.get("name") or ""
        return Outline(
            title=markup.clean(str(title)) if isinstance(title, str) else "",
            detail=f"JSON object: {', '.join(keys)}" + (" …" if len(obj) > 12 else ""),
        )
    if isinstance(obj, list):
        return Outline(detail=f"JSON array of {len(obj):,} items")
    return Outline(detail="JSON value")


def unique(items) -> list[str]:
    """Items in first-seen order without repeats (and without empty strings)."""
    seen: dict[str, None] = {}
    for x in items:
        if x and x not in seen:
            seen[x] = None
    return list(seen)
