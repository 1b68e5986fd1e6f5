"""Reading a mounted library the way an agent does, and counting what each lookup costs.

A :class:`Lookup` reads files through the mount (plain ``open``; every call is a real read) and records
each read: its library-relative path, whether it was a TOC page (``INDEX.md`` or ``.index/NNNN.md``) or
an entry, and its size in o200k_base tokens (libraryfs's token counter, the unit of the Library Theorem).
TOC pages are parsed by this module's own Markdown-link reader, not by libraryfs's renderer code.
"""

from __future__ import annotations

import os
import posixpath
import re
import urllib.parse
from dataclasses import dataclass, field

from libraryfs.fs.generated import INDEX_FILE, PAGES_DIRNAME
from libraryfs.index.tokens import count_tokens

INDEX_NAME = INDEX_FILE
#: ``- [label](target) rest``: a TOC line; ``\\]`` inside the label is an escaped bracket
_LINK_LINE = re.compile(r"^\s*[-*]\s+\[((?:\\.|[^\]\\])*)\]\(([^)\s]+)\)(.*)$")
#: a page's statement of where its unlinked entry names are (``files: ../NAME``), and such a line
_FILES_AT = re.compile(r"^files: (\S*)NAME\b", re.MULTILINE)
_BARE_LINE = re.compile(r"^\s*[-*]\s+([^\s\[\]()]+)(?:\s+—\s|$)")
#: a page's statement that an entry line's text in quotes is the file's whole text, and such a line's rest
QUOTE_NOTE = '"…" = the file\'s whole text'
_QUOTED = re.compile(r'^(?:—\s+)?"(.*)"$')


@dataclass
class TocLine:
    """One link line of a TOC page: ``label`` (unescaped), ``path`` (library-relative, resolved against
    the page), ``rest`` (the text after the link: summary and facts), ``is_toc`` (the link is a TOC page)."""

    label: str
    path: str
    rest: str
    is_toc: bool
    raw: str
    #: the file's whole text when the line quotes it on a page that says what quotes mean, else None
    whole: str | None = None


def is_toc_path(rel: str) -> bool:
    """Whether a library-relative path names a TOC page."""
    base = posixpath.basename(rel)
    return base == INDEX_NAME or posixpath.basename(posixpath.dirname(rel)) == PAGES_DIRNAME


def parse_toc(text: str, page_rel: str) -> list[TocLine]:
    """Link lines of a TOC page at ``page_rel``; targets percent-decoded and resolved to library-relative
    paths (a link to a directory means its INDEX.md). Links leaving the library are dropped. On a page that
    says where its unlinked names are (``files: ../NAME``), a list line ``- name — summary`` is the entry
    at that path too. On a page whose head says :data:`QUOTE_NOTE`, an entry line whose text is in quotes
    (``- name — "text"``) carries the file's whole text (``TocLine.whole``)."""
    base = posixpath.dirname(page_rel)
    at = _FILES_AT.search(text)
    quotes = QUOTE_NOTE in (text if text.startswith("- ") else text.split("\n- ", 1)[0])
    out = []
    for raw in text.splitlines():
        m = _LINK_LINE.match(raw)
        bare = None if m or at is None else _BARE_LINE.match(raw)
        if bare:
            path = posixpath.normpath(posixpath.join(base, at.group(1) + bare.group(1)))
            rest = raw[bare.end(1) :].strip()
            out.append(TocLine(bare.group(1), path, rest, False, raw, _whole(rest) if quotes else None))
        if not m:
            continue
        label = re.sub(r"\\(.)", r"\1", m.group(1))
        target = urllib.parse.unquote(m.group(2))
        if "://" in target or target.startswith("/"):
            continue
        path = posixpath.normpath(posixpath.join(base, target))
        if path.startswith(".."):
            continue
        if target.endswith("/"):
            path = posixpath.join(path, INDEX_NAME)
        rest = m.group(3).strip()
        is_toc = is_toc_path(path)
        out.append(TocLine(label, path, rest, is_toc, raw, _whole(rest) if quotes and not is_toc else None))
    return out


def _whole(rest: str) -> str | None:
    """The text a line quotes (``rest``: ``— "text"``), else None."""
    q = _QUOTED.match(rest)
    return q.group(1) if q else None


@dataclass
class Read:
    """One read of a lookup."""

    path: str
    kind: str  # "toc" | "entry" | "listing"
    tokens: int


@dataclass
class Lookup:
    """The reads of one lookup through the mount at ``root``; token counts cached per path."""

    root: str
    token_cache: dict[str, int]
    reads: list[Read] = field(default_factory=list)

    def read(self, rel: str) -> str | None:
        """Read ``rel`` through the mount (counted); None if it does not exist or is not a file."""
        try:
            with open(os.path.join(self.root, rel), "rb") as f:
                data = f.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
            return None
        text = data.decode("utf-8", "replace")
        n = self.token_cache.get(rel)
        if n is None or is_toc_path(rel):  # TOC pages may change between runs: always counted afresh
            n = count_tokens(text)
            self.token_cache[rel] = n
        self.reads.append(Read(rel, "toc" if is_toc_path(rel) else "entry", n))
        return text

    def charge(self, what: str, text: str, kind: str = "listing") -> None:
        """Count a non-file read (a directory listing such as ``.find/<term>/``)."""
        self.reads.append(Read(what, kind, count_tokens(text)))

    @property
    def tokens(self) -> int:
        """Tokens read so far."""
        return sum(r.tokens for r in self.reads)


def is_hit(path: str | None, targets: list[str]) -> bool:
    """Whether ``path`` answers a query: equal to a target, or below a target that ends with ``/``."""
    if not path:
        return False
    path = path.strip("/")
    for t in targets:
        if t.endswith("/"):
            if (path + "/").startswith(t):
                return True
        elif path == t:
            return True
    return False


def list_entries(root: str) -> list[str]:
    """Library-relative paths of every entry (regular file) under ``root``: no TOC pages, nothing hidden
    (``.index/``, ``.find/``, ``.libraryfs/``, dotfiles), sorted."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        rel_d = os.path.relpath(d, root)
        for fn in sorted(files):
            if fn.startswith(".") or fn == INDEX_NAME:
                continue
            rel = fn if rel_d == "." else f"{rel_d}/{fn}"
            if os.path.isfile(os.path.join(root, rel)) and not os.path.islink(os.path.join(root, rel)):
                out.append(rel.replace(os.sep, "/"))
    return out


def list_toc_pages(root: str) -> list[str]:
    """Library-relative paths of every TOC page (each directory's INDEX.md and its ``.index/`` pages)."""
    out = []
    for d, dirs, files in os.walk(root):
        rel_d = os.path.relpath(d, root)
        rel_d = "" if rel_d == "." else rel_d.replace(os.sep, "/")
        # probed by name: a mount resolves its TOC pages but never lists them (docs/posix.md)
        if INDEX_NAME in files or os.path.isfile(os.path.join(d, INDEX_NAME)):
            out.append(posixpath.join(rel_d, INDEX_NAME))
        if PAGES_DIRNAME in dirs or os.path.isdir(os.path.join(d, PAGES_DIRNAME)):
            for fn in sorted(os.listdir(os.path.join(d, PAGES_DIRNAME))):
                out.append(posixpath.join(rel_d, PAGES_DIRNAME, fn))
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
    return out
