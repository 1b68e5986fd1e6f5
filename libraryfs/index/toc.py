"""TOC rendering: a directory's entries → bounded Markdown pages (ARCHITECTURE §2, "the B-tree").

No page exceeds ``max_tokens`` o200k_base tokens. A directory that fits gets one page (``INDEX.md``). A
larger one gets a tree of pages without moving any entry: leaf pages hold runs of entry lines (contiguous
name ranges, or the builder's named groups), and index pages above them hold one line per child page,
level by level until the root (``INDEX.md``) fits. With fan-out b ≈ C / (tokens per line), a lookup costs
⌈log_b N⌉ page reads + 1 entry read at any N (PAPERS.md §1).

Every string that came from a builder (possibly a model) is sanitised here: control characters and escape
sequences removed, whitespace collapsed, length capped. Paths and links are computed by this module only:
link targets are percent-encoded names relative to the page, so any name (spaces, newlines, non-UTF-8 bytes)
is reachable; ``urllib.parse.unquote_to_bytes`` of a link target gives the exact bytes of the path.

A file whose whole content is one short line that needs no sanitising (:func:`whole_text`) is quoted on its
line instead of summarised: ``- name — "text"``, no size, and the page head says once what the quote means
(:data:`QUOTE_NOTE`). A reader then knows the file without opening it; the quote is as fresh as the page
(the root's header carries the generation). No summary starts with a bare ``"`` (:func:`said`), so a quoted
line is never mistaken for one; :func:`whole_texts` reads them back.
"""

from __future__ import annotations

import functools
import os
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from libraryfs.fs.generated import INDEX_FILE, page_file, page_relpath
from libraryfs.index import DEFAULT_MAX_TOKENS  # noqa: F401 - re-exported (defined there: cheap to import)
from libraryfs.index.jobs import Group
from libraryfs.index.lines import (
    QUOTE_MAX_BYTES,
    QUOTE_MAX_CHARS,
    looks_like_instructions,
    neutralise_toc_markup,
    range_summary,
    shared_span,
    span_text,
)
from libraryfs.index.sections import MAX_TERMS, terms_for
from libraryfs.index.terms import distinctive
from libraryfs.index.terms import words as _words
from libraryfs.index.tocplan import Leaf as _Leaf
from libraryfs.index.tocplan import Levels as _Levels
from libraryfs.index.tocplan import Plan as _Plan
from libraryfs.index.tocplan import cheapest_plan
from libraryfs.shown import CTRL, show_name
from libraryfs.words import noun


@dataclass
class Item:
    """One TOC line's facts: an entry of the directory."""

    name: bytes
    summary: str
    tokens: int  #: o200k_base tokens of the entry (for a section: of everything below it)
    is_dir: bool = False
    entries: int = 0  #: for a section: the files below it, in all (recursively; sections not counted)
    is_link: bool = False
    approx: bool = False
    terms: dict[str, int] | None = None  #: profile (term → entries holding it) for range lines
    names: list[str] | None = None  #: defined or representative names, best first, for range lines
    toc_link: str = INDEX_FILE  #: for a section: its page 0, relative to it (``.index/INDEX.md`` when moved)
    direct: int | None = None  #: for a section: its own entries (the lines of its TOC); None: not known yet
    #: a regular file's whole text when it may be quoted on its line (:func:`whole_text`), else None; the
    #: renderer checks it again (:func:`quotable`) and summarises a text that fails
    whole: str | None = None

    @property
    def in_all(self) -> int:
        """Entries this item stands for, recursively: a section's count below it, else 1."""
        return self.entries if self.is_dir else 1


@dataclass
class Rendered:
    """The pages of one directory: ``pages[k]`` is the page at :func:`~libraryfs.fs.generated.page_relpath`
    ``(k)`` (``INDEX.md``, then ``.index/0001.md`` …)."""

    pages: list[bytes]
    page_tokens: list[int]
    levels: int  #: 1 when the directory fits one page


#: characters that could start Markdown markup anywhere in a line (CommonMark: code spans, emphasis, links,
#: raw HTML and autolinks; GFM: strikethrough): always backslash-escaped in generated text
_MD_ALWAYS = frozenset("`*[]<>~")
_MD_SPECIAL = re.compile(r"[`*\[\]<>~_\\&]|^#")
#: an entity or numeric character reference (``&lt;``, ``&#60;``): CommonMark would render the character
_MD_ENTITY = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]{0,31}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});")
_ASCII_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def md_escape(text: str) -> str:
    """``text`` (one line) backslash-escaped so that CommonMark renders it as itself, never as markup
    (CommonMark 0.31 §2.4 backslash escapes, §6.2 emphasis, §6.6 raw HTML): `````*[]<>~`` always; ``_``
    unless its run stands between two letters or digits (intraword: ``lru_cache`` keeps its ``_``, never
    emphasis); ``\\`` before ASCII punctuation or at the end; ``&`` that starts a character reference; a
    ``#`` that starts the text (a heading). Other characters are left alone (escapes cost a reader tokens)."""
    if not _MD_SPECIAL.search(text):
        return text
    out = []
    n = len(text)
    for k, c in enumerate(text):
        if c in _MD_ALWAYS or (c == "#" and k == 0):
            out.append("\\" + c)
        elif c == "_":
            lo, hi = k, k
            while lo > 0 and text[lo - 1] == "_":
                lo -= 1
            while hi + 1 < n and text[hi + 1] == "_":
                hi += 1
            intraword = lo > 0 and hi + 1 < n and text[lo - 1].isalnum() and text[hi + 1].isalnum()
            out.append(c if intraword else "\\_")
        elif c == "\\":
            out.append("\\\\" if k + 1 == n or text[k + 1] in _ASCII_PUNCT else c)
        elif c == "&" and _MD_ENTITY.match(text, k):
            out.append("\\&")
        else:
            out.append(c)
    return "".join(out)


def sanitize(text: str, max_chars: int = 240) -> str:
    """Make builder/model text safe for one TOC line: no control chars, one line, no TOC markup
    (:func:`~libraryfs.index.lines.neutralise_toc_markup`), no Markdown markup (:func:`md_escape`),
    ≤ ``max_chars``. The one place every summary, description and title passes before it goes on a page."""
    text = CTRL.sub(" ", text)
    text = md_escape(neutralise_toc_markup(" ".join(text.split())))  # no links, HTML or emphasis
    if len(text) > max_chars:
        text = text[: max_chars - 1].rstrip() + "…"
    return text


#: what a quoted line means, said once in the head of a page that has one (a reader need not open the file)
QUOTE_NOTE = '"…" = the file\'s whole text'


@functools.lru_cache(maxsize=1 << 16)
def quotable(text: str) -> bool:
    """Whether ``text`` (a file's content, its trailing newline removed) may stand quoted on a TOC line as the
    file's whole text: 1 to :data:`~libraryfs.index.lines.QUOTE_MAX_CHARS` characters, all printable (no
    newline, tab, control, format or bidi character, no space but U+0020), unchanged by :func:`sanitize`
    (no runs of spaces, no leading or trailing space, no TOC markup, nothing Markdown would need escaped:
    the quote is the file's bytes exactly), and not text addressed to a model as instructions
    (:func:`~libraryfs.index.lines.looks_like_instructions`: such text is never reproduced). Cached: a
    render asks it of each line several times."""
    return (
        0 < len(text) <= QUOTE_MAX_CHARS
        and text.isprintable()
        and sanitize(text, QUOTE_MAX_CHARS) == text
        and not looks_like_instructions(text)
    )


def whole_text(data: bytes) -> str | None:
    """The text of a regular file's whole content ``data`` when its TOC line may quote it (:func:`quotable`):
    at most :data:`~libraryfs.index.lines.QUOTE_MAX_BYTES` bytes of strict UTF-8, one line after one trailing
    ``\n`` is removed (a ``\r\n`` ending is not removed, and fails); else None. Never raises."""
    if len(data) > QUOTE_MAX_BYTES:
        return None
    if data.endswith(b"\n"):
        data = data[:-1]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if quotable(text) else None


def quote_of(item: Item) -> str | None:
    """The text a regular file's line quotes (``item.whole`` when :func:`quotable`), else None (sections,
    symlinks, files without a whole text)."""
    if item.is_dir or item.is_link or item.whole is None:
        return None
    return item.whole if quotable(item.whole) else None


def said(text: str, max_chars: int = 240) -> str:
    """What a line says after its dash: :func:`sanitize` of ``text``, a leading ``"`` escaped (``\\"``,
    which CommonMark renders as ``"``): only a quoted line (:data:`QUOTE_NOTE`) starts with a bare quote."""
    out = sanitize(text, max_chars)
    return "\\" + out if out.startswith('"') else out


def display_name(name: bytes) -> str:
    """A name as shown in a TOC line's link text: undecodable bytes and control chars as ``\\xNN``, Markdown
    markup escaped (:func:`md_escape`: ``<img …>``, backticks, ``*x*`` render as themselves). The name part is
    :func:`libraryfs.shown.show_name`, as ``libraryfs find``, the MCP tools and the logs show names."""
    return md_escape(show_name(name))


def link_target(name: bytes, prefix: str = "") -> str:
    """Percent-encoded relative link to ``name`` (exact bytes recoverable with ``unquote_to_bytes``)."""
    return prefix + urllib.parse.quote(name, safe="-._~+,=@")


def _fmt_tokens(n: int, approx: bool = False) -> str:
    return f"{'~' if approx else ''}{n:,} tok"


def count_text(direct: int | None, in_all: int) -> str:
    """How a TOC states a directory's (or a range's) size, one meaning per word: ``N entries`` counts its own
    entries — the lines one level down, files and sections alike — and ``M in all`` the files below it,
    recursively (sections not counted: two sections holding one file are ``2 entries, 1 in all``), said only
    when it differs (``12 entries, 497 in all``). ``direct`` None: not known yet
    (a section rendered by an older release), only ``M in all`` is said."""
    if direct is None:
        return f"{in_all:,} in all"
    text = f"{direct:,} entr{'y' if direct == 1 else 'ies'}"
    return text if direct == in_all else f"{text}, {in_all:,} in all"


def entry_line(item: Item, prefix: str = "", size: bool = True, implied: bool = False) -> str:
    """``- [name](link) — summary (N tok)``; a section links to its own page 0 (``INDEX.md``). ``size``
    False leaves a file's ``(N tok)`` out: its page says the size once for all its files
    (:func:`shared_span`). ``implied`` (leaf pages of a multi-page TOC): a file whose name is its own link
    (:func:`plain_name`) is ``- name — summary``, its path ``prefix + name`` said once by the page's
    :data:`FILES_NOTE`. A file with a quotable whole text (:func:`quote_of`) is ``- [name](link) — "text"``
    (or ``- name — "text"``), never with a size: the page says once what the quote means (:data:`QUOTE_NOTE`)."""
    if item.is_dir:
        target = link_target(item.name, prefix) + "/" + item.toc_link
        direct = item.direct if item.direct is not None or item.entries else 0
        facts = f"{count_text(direct, item.entries)}, {_fmt_tokens(item.tokens)}"
        return f"- [{display_name(item.name)}/]({target}) — {said(item.summary)} ({facts})"
    if item.is_link:
        return f"- [{display_name(item.name)}]({link_target(item.name, prefix)}) — {said(item.summary)}"
    quote = quote_of(item)
    text = f'"{quote}"' if quote is not None else said(item.summary)
    if implied and plain_name(item.name):
        line = f"- {item.name.decode()} — {text}"
    else:
        line = f"- [{display_name(item.name)}]({link_target(item.name, prefix)}) — {text}"
    return f"{line} ({_fmt_tokens(item.tokens, item.approx)})" if size and quote is None else line


#: the end of a line whose name is cut and whose link alone would exceed the page bound (:func:`fit_line`)
UNLINKED = "(unlinked: its link exceeds the page bound)"


def fit_line(item: Item, prefix: str, cap: int, count_tokens: Callable[[str], int]) -> str:
    """A shortened TOC line for ``item`` of at most ``cap`` tokens, for a line that cannot fit a page
    (a name near NAME_MAX = 255 bytes, percent-encoded up to 765 characters, with C near its minimum of
    200). In order: ``- [name…](exact link)`` with the displayed name cut by characters and an ellipsis
    (the link target stays exact, :func:`link_target`); else, when the link alone is over ``cap``,
    ``- name… (unlinked: …)`` (:data:`UNLINKED`), unlinked: the entry is still listed, found by ``ls``;
    else ``- …``."""
    text = show_name(item.name)
    target = link_target(item.name, prefix) + ("/" + item.toc_link if item.is_dir else "")
    slash = "/" if item.is_dir else ""

    def cut(n: int) -> str:
        """The shown name's first ``n`` characters, Markdown-escaped, with ``…`` when some are cut."""
        return md_escape(text[:n].rstrip("\\")) + ("…" if n < len(text) else "")

    forms = [lambda n: f"- [{cut(n)}{slash}]({target})", lambda n: f"- {cut(n)}{slash} {UNLINKED}"]
    for form in forms:
        if count_tokens(form(0)) > cap:
            continue
        lo, hi = 0, len(text)  # the longest cut that fits (token counts grow with the characters kept)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if count_tokens(form(mid)) <= cap else (lo, mid - 1)
        return form(lo)
    return "- …"


#: a name that is its own percent-encoded link and renders as itself in Markdown: letters, digits and
#: ``._+,=@~-`` (no leading punctuation: ``_x_`` would render as emphasis, ``-x`` as a list; no trailing dot:
#: ``1.`` starts an ordered list)
_PLAIN = re.compile(rb"[A-Za-z0-9][A-Za-z0-9._+,=@~-]*(?<!\.)")
#: the line of a leaf page that says where its unlinked entry names are: ``../`` + the name
FILES_NOTE = "files: ../NAME"


def plain_name(name: bytes) -> bool:
    """Whether ``name`` can stand on a leaf page without its link (see :data:`_PLAIN`): it needs no Markdown
    escape either (``a._b_.md`` would render ``b`` as emphasis, ``a~b~`` struck through in GFM)."""
    if _PLAIN.fullmatch(name) is None or name == INDEX_FILE.encode():
        return False
    text = name.decode()
    return md_escape(text) == text


def file_sizes(items: list[Item]) -> tuple[int, int] | None:
    """The size all of a directory's files share (:func:`shared_span`), None when they differ, when one is
    approximate, or with fewer than three files; sections and symlinks keep their own facts, and quoted files
    (:func:`quote_of`) show no size."""
    files = [i for i in items if not i.is_dir and not i.is_link and quote_of(i) is None]
    if any(i.approx for i in files):
        return None
    return shared_span([i.tokens for i in files])


def render(
    dir_title: str,
    description: str,
    items: list[Item],
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    count_tokens: Callable[[str], int],
    header_facts: str = "",
    groups: list[Group] | None = None,
    root_extra: list[str] | None = None,
    root_in_pages_dir: bool = False,
) -> Rendered:
    """Render the pages of one directory. ``items`` must be sorted by name bytes.

    ``pages[0]`` is ``INDEX.md``; ``pages[k]`` is ``.index/`` + :func:`~libraryfs.fs.generated.page_file`
    ``(k)`` (names from :mod:`libraryfs.fs.generated`). With ``root_in_pages_dir`` (the user owns the
    directory's ``INDEX.md``) page 0 is served as ``.index/INDEX.md``, and every link is written for that
    place (entries ``../name``, pages as siblings). Every page is at most ``max_tokens`` tokens of
    ``count_tokens`` (o200k_base in the indexer). ``groups`` (from a builder) are used only if they cover every
    item exactly once; each group then starts a new run of leaf pages titled by the group name. Raises
    ``ValueError`` if ``max_tokens`` < 200. An entry line that alone would exceed a page (a name near
    NAME_MAX with C near 200) is shortened (:func:`fit_line`), never an error.

    ``root_extra``: link lines the caller made (the master page's lines to the name catalogue and the subject
    index), their links written for where page 0 is served (``../`` first with ``root_in_pages_dir``), appended
    to ``INDEX.md`` after the entries and counted against its bound. A range line of a multi-page
    directory says what its range holds: the terms that tell it apart from the other ranges of its level
    and its first defined names (from ``Item.terms`` and ``Item.names``).
    """
    if max_tokens < 200:
        raise ValueError("max_tokens must be at least 200")
    sizes = file_sizes(items)
    quoted = [quote_of(i) is not None for i in items]
    head = _Head(
        sanitize(dir_title, 120) or "/", sanitize(description), items, header_facts, sizes, any(quoted)
    )

    # one page?
    extra = list(root_extra or [])
    lines0 = [entry_line(i, "../" if root_in_pages_dir else "", sizes is None) for i in items] + extra
    head_cost = count_tokens("\n".join(head(0, 1, "", _NOTE_ROOM))) + 24
    line_cost = [count_tokens(ln) + 1 for ln in lines0]
    if head_cost + sum(line_cost) <= max_tokens:
        text = "\n".join(head(0, 1) + lines0) + "\n"
        return Rendered([text.encode("utf-8", "surrogateescape")], [count_tokens(text)], 1)

    budget = max_tokens - head_cost - 60  # room for a page's subtitle and its ↑ up line
    leaf_lines = [entry_line(i, "../", sizes is None, implied=True) for i in items]
    leaf_cost = [count_tokens(ln) + 1 for ln in leaf_lines]
    for k, cost in enumerate(leaf_cost):
        if cost > budget:  # a name near NAME_MAX with C near its minimum: shorten this one line
            leaf_lines[k] = fit_line(items[k], "../", budget - 1, count_tokens)
            leaf_cost[k] = count_tokens(leaf_lines[k]) + 1
    if sum(count_tokens(ln) + 1 for ln in extra) > budget // 4:  # C near 200: the root's own lines need room
        extra = [ln.split(" — ", 1)[0] for ln in extra]  # the links without what they say
    ranges = _Ranges(items, set(_words(dir_title)))
    runs = _runs(items, groups)

    def plan(target: int) -> _Plan:
        """Leaves of about ``target`` tokens and the index levels above them; never below the longest
        line (a line over the planned size but within the bound is no error)."""
        size = min(budget, max(target, max(leaf_cost)))
        leaves = _leaf_pages(items, runs, leaf_lines, leaf_cost, size, budget)
        return leaves, _index_levels(leaves, budget, count_tokens, ranges, extra, root_in_pages_dir)

    leaves, built = cheapest_plan(plan, leaf_cost, budget, count_tokens, answered=quoted)
    root_lines, all_pages, page_titles, levels, notes = built
    npages = len(all_pages) + 1
    up = f"- [↑ up]({INDEX_FILE})" if root_in_pages_dir else _UP_LINE
    out = ["\n".join(head(0, npages, "", notes[0]) + root_lines) + "\n"]
    for k, lines in enumerate(all_pages, start=1):
        leaf_quotes = k <= len(leaves) and any(quoted[i] for i in leaves[k - 1][3])
        note = notes[k] or (_leaf_note(lines, head.size_note, leaf_quotes) if k <= len(leaves) else "")
        title = cut_tokens(page_titles[k - 1], SUBTITLE_TOKENS, count_tokens)
        out.append("\n".join(head(k, npages, title, note) + lines + ["", up]) + "\n")
    return Rendered(
        [p.encode("utf-8", "surrogateescape") for p in out], [count_tokens(p) for p in out], levels
    )


def _leaf_note(lines: list[str], size_note: str, quotes: bool = False) -> str:
    """A leaf page's note: where its unlinked names are (:data:`FILES_NOTE`), what its quoted lines are
    (:data:`QUOTE_NOTE`, when ``quotes``) and the size its files share."""
    bare = any(not ln.startswith("- [") and not ln.endswith(UNLINKED) for ln in lines)
    return " · ".join(x for x in (FILES_NOTE if bare else "", QUOTE_NOTE if quotes else "", size_note) if x)


#: the longest note a page head may carry (room kept for it when the head is priced)
_NOTE_ROOM = "each range 99,999–99,999 entries"

#: the last line of every page below ``INDEX.md``: back to the directory's root page
_UP_LINE = f"- [↑ up](../{INDEX_FILE})"


class _Head:
    """The head lines of a page: header comment, title (with a subtitle below the root), and on the root the
    description and the totals. The freshness facts (``header_facts``: generation, journal position,
    builder) are on the root only: all pages of a directory are written together. ``sizes``: the size its
    files share (said once, on the root and on every leaf, instead of on each file's line). ``quotes``: some
    of the lines quote a file's whole text (a one-page TOC's root then says :data:`QUOTE_NOTE`; a leaf's
    note says it for its own lines)."""

    def __init__(
        self,
        title: str,
        desc: str,
        items: list[Item],
        header_facts: str,
        sizes: tuple[int, int] | None,
        quotes: bool = False,
    ) -> None:
        self.title, self.desc, self.header_facts, self.quotes = title, desc, header_facts, quotes
        self.n = len(items)
        self.in_all = sum(i.in_all for i in items)
        self.total_tokens = sum(i.tokens for i in items)
        self.size_note = f"each file {span_text(sizes)} tok" if sizes else ""

    def __call__(self, page_no: int, npages: int, subtitle: str = "", note: str = "") -> list[str]:
        """Head lines of page ``page_no`` of ``npages``; ``note``: a fact its lines share (``each range 41–42
        entries``; a leaf's file size is added here)."""
        facts = f" {self.header_facts}" if page_no == 0 and self.header_facts else ""
        lines = [f"<!-- libraryfs toc: page={page_no}/{npages}{facts} -->"]
        lines.append(f"# {self.title}" + (f" — {subtitle}" if subtitle else ""))
        if page_no == 0:
            if self.desc:
                lines.append(self.desc)
            parts = [
                f"{count_text(self.n, self.in_all)}",
                f"{self.total_tokens:,} {noun(self.total_tokens, 'token')}",
                QUOTE_NOTE if self.quotes and npages == 1 else "",
                self.size_note,
                note,
            ]
            lines.append(" · ".join(x for x in parts if x))
        elif note:
            lines.append(note)
        lines.append("")
        return lines


def _runs(items: list[Item], groups: list[Group] | None) -> list[tuple[str, list[int]]]:
    """Leaf runs ``(group title, item indexes)``: the builder's groups (when valid) or one contiguous run."""
    if groups and _valid_groups(groups, items):
        pos = {os.fsdecode(i.name): k for k, i in enumerate(items)}
        return [(sanitize(g.title, 60), sorted(pos[nm] for nm in g.names)) for g in groups]
    return [("", list(range(len(items))))]


def _leaf_pages(
    items: list[Item],
    runs: list[tuple[str, list[int]]],
    leaf_lines: list[str],
    leaf_cost: list[int],
    target: int,
    budget: int,
) -> list[_Leaf]:
    """Cut each run into leaf pages of about ``target`` and at most ``budget`` tokens of lines
    (``leaf_lines``: links ``../name`` from inside ``.index/``, ``leaf_cost`` their tokens): ``(group title,
    lines, range label, item indexes)`` per page. A run gets ⌈its tokens / target⌉ pages of about equal size
    (a cut where a line's middle passes the next equal share), so no page is a short tail (a one-entry
    leaf's label would read as that entry's name). Raises ValueError for a line over budget (the caller
    shortens such lines first, :func:`fit_line`)."""
    pages: list[_Leaf] = []
    for gtitle, idxs in runs:
        run_cost = sum(leaf_cost[k] for k in idxs)
        share = run_cost / max(1, -(-run_cost // max(1, target)))
        cur: list[int] = []
        cost = done = 0.0
        closed = 0
        for k in idxs:
            if leaf_cost[k] > budget:
                raise ValueError("one TOC line exceeds the page bound")
            past_share = done + cost + leaf_cost[k] / 2 > share * (closed + 1)
            if cur and (cost + leaf_cost[k] > budget or past_share):
                pages.append(_leaf(gtitle, cur, items, leaf_lines))
                done, cur, cost, closed = done + cost, [], 0.0, closed + 1
            cur.append(k)
            cost += leaf_cost[k]
        if cur:
            pages.append(_leaf(gtitle, cur, items, leaf_lines))
    return pages


def _index_levels(
    leaves: list[_Leaf],
    budget: int,
    count_tokens: Callable[[str], int],
    ranges: _Ranges,
    extra: list[str],
    root_in_pages_dir: bool = False,
) -> _Levels:
    """Build index levels above the leaf pages until the root's lines (and ``extra``) fit ``budget`` tokens.

    Returns ``(root lines, lines of pages 1.., their titles, levels, notes)``; ``notes[0]`` is the root's,
    ``notes[k]`` page k's (``each range 41–42 entries`` on an index page whose ranges all hold about as
    many entries, :func:`shared_span`; else ``""``). A level's entries are ``(label, page number, the
    directory's entries in the range, entries below them in all)``; links from the root go into ``.index/``
    (siblings when the root itself is ``.index/INDEX.md``), links between pages inside ``.index/`` are
    siblings; each line states the range's size (:func:`count_text`) unless its page's note says it, and
    ends with what it holds (``ranges``). Raises ValueError past 12 levels.
    """
    extra_cost = sum(count_tokens(ln) + 1 for ln in extra)
    root_link = page_file if root_in_pages_dir else page_relpath
    all_pages: list[list[str]] = []  # page k+1 content lines (without head)
    page_titles: list[str] = []
    notes = [""] * (len(leaves) + 1)
    level: list[tuple[str, int, int, int]] = []
    runs_of_level: list[_Run] = []  # what the pages of a level hold (for their range lines)
    for gtitle, lines, label, idxs in leaves:
        all_pages.append(lines)
        page_titles.append(gtitle or label)
        in_all = sum(ranges.items[k].in_all for k in idxs)
        level.append((f"{gtitle}: {label}" if gtitle else label, len(all_pages), len(lines), in_all))
        runs_of_level.append(ranges.of_items(idxs))
    levels = 2
    while True:
        descs = ranges.describe(runs_of_level, [cnt for _l, _p, cnt, _a in level])
        same = None if any(c != a for _l, _p, c, a in level) else shared_span([c for _l, _p, c, _a in level])
        note = f"each range {span_text(same)} entries" if same else ""

        def line(k: int, link: str) -> str:
            """Range line ``k`` of this level linking ``link``: its count unless the page's note says it,
            then what its range holds."""
            lab, _p, cnt, in_all = level[k]  # noqa: B023 (called within this iteration)
            said = "" if same else count_text(cnt, in_all)  # noqa: B023
            desc = descs[k]  # noqa: B023
            full = f"- [{lab}]({link})" + (f" — {said}{desc}" if said else f" — {desc[2:]}" if desc else "")
            if count_tokens(full) < budget // 2:
                return full
            # a long label (names of many-token characters) with C near 200: at least two lines a page, so
            # the levels converge; the label is cut, the link stays
            return cut_tokens(f"- [{lab}", budget // 2 - 4 - count_tokens(link), count_tokens) + f"]({link})"

        idx_lines = [line(k, root_link(p)) for k, (_l, p, _c, _a) in enumerate(level)]
        cost = [count_tokens(ln) + 1 for ln in idx_lines]
        if sum(cost) + extra_cost <= budget:
            notes[0] = note
            return idx_lines + extra, all_pages, page_titles, levels, notes
        nxt: list[tuple[str, int, int, int]] = []
        nxt_runs: list[_Run] = []
        for g in pack(cost, budget):
            all_pages.append([line(k, page_file(level[k][1])) for k in g])
            notes.append(note)
            lab = f"{_range_start(level[g[0]][0])} … {_range_end(level[g[-1]][0])}"
            page_titles.append(lab)
            nxt.append((lab, len(all_pages), sum(level[k][2] for k in g), sum(level[k][3] for k in g)))
            nxt_runs.append(_Run.merged([runs_of_level[k] for k in g]))
        level, runs_of_level = nxt, nxt_runs
        levels += 1
        if levels > 12:
            raise ValueError("TOC tree too deep")


def pack(cost: list[int], budget: int) -> list[list[int]]:
    """Consecutive indexes of ``cost`` grouped so that each group's sum stays within ``budget`` (a single
    item over it forms its own group)."""
    out: list[list[int]] = []
    cur: list[int] = []
    c = 0
    for k, x in enumerate(cost):
        if cur and c + x > budget:
            out.append(cur)
            cur, c = [], 0
        cur.append(k)
        c += x
    if cur:
        out.append(cur)
    return out


def _leaf(gtitle: str, idxs: list[int], items: list[Item], lines: list[str]) -> _Leaf:
    first, last = _short(display_name(items[idxs[0]].name)), _short(display_name(items[idxs[-1]].name))
    label = f"{first} … {last}" if first != last else first
    return gtitle, [lines[k] for k in idxs], label, idxs


#: names a range line shows (the run's most representative)
RANGE_NAMES = 3


@dataclass
class _Run:
    """What a run of items (a page's range) holds: summed term profiles and its first names."""

    terms: dict[str, int]
    names: list[str]

    @classmethod
    def merged(cls, runs: list[_Run]) -> _Run:
        """What consecutive runs hold together (an index page's range over its child pages)."""
        terms: dict[str, int] = {}
        for r in runs:
            for t, c in r.terms.items():
                terms[t] = terms.get(t, 0) + c
        return cls(terms, [n for r in runs for n in r.names][:RANGE_NAMES])


class _Ranges:
    """The range lines' descriptions of one directory: its items, and the words its title already says."""

    def __init__(self, items: list[Item], exclude: set[str]) -> None:
        self.items, self.exclude = items, exclude

    def of_items(self, idxs: list[int]) -> _Run:
        """What the items at ``idxs`` hold together."""
        terms: dict[str, int] = {}
        names: list[str] = []
        for k in idxs:
            it = self.items[k]
            for t, c in (it.terms or {}).items():
                terms[t] = terms.get(t, 0) + c
            if it.names and len(names) < RANGE_NAMES:
                names.append(it.names[0])
        return _Run(terms, names)

    def describe(self, runs: list[_Run], sizes: list[int]) -> list[str]:
        """``": terms · names: …"`` for each range line of one level (terms distinctive among that level's
        ranges and held by two or more of the range's entries, :func:`libraryfs.index.terms.distinctive`);
        ``""`` everywhere when the items carry no terms."""
        if not any(r.terms or r.names for r in runs):
            return [""] * len(runs)
        top = distinctive([r.terms for r in runs], sizes, top=MAX_TERMS, exclude=self.exclude, singles=False)
        out = []
        for r, t, size in zip(runs, top, sizes, strict=False):
            text = said(range_summary(t[: terms_for(size)], r.names), 200)
            out.append(f": {text}" if text else "")
        return out


def cut_tokens(s: str, cap: int, count_tokens: Callable[[str], int]) -> str:
    """``s``, or its longest prefix (by characters) with an ellipsis ``…``, within ``cap`` tokens of
    ``count_tokens`` (``…`` alone when nothing else fits)."""
    if count_tokens(s) <= cap:
        return s
    lo, hi = 0, len(s) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if count_tokens(s[:mid].rstrip("\\") + "…") <= cap else (lo, mid - 1)
    return s[:lo].rstrip("\\") + "…"


#: tokens a page's subtitle (its range label) may take: the page bound keeps room for it (``render``)
SUBTITLE_TOKENS = 40


def _short(s: str, n: int = 40) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _range_start(label: str) -> str:
    label = label.split(": ", 1)[-1]
    return label.split(" … ")[0]


def _range_end(label: str) -> str:
    label = label.split(": ", 1)[-1]
    return label.split(" … ")[-1]


def _valid_groups(groups: list[Group], items: list[Item]) -> bool:
    names = [os.fsdecode(i.name) for i in items]
    seen: list[str] = [nm for g in groups for nm in g.names]
    return len(seen) == len(names) and set(seen) == set(names) and all(g.names for g in groups)


#: the renderer's links: only at the start of a line ``- [text with \-escapes](target)``
_LINK = re.compile(r"^- \[(?:\\.|[^\\\]])*\]\(([^)\s]+)\)", re.MULTILINE)


#: an entry line without a link (a leaf page's plain name, :func:`plain_name`)
_BARE = re.compile(r"^- ([A-Za-z0-9][A-Za-z0-9._+,=@~-]*)(?: — |$)", re.MULTILINE)


def links(page: bytes | str) -> list[bytes]:
    """Relative link targets of a rendered page, decoded to exact path bytes (for tests and agents), in
    page order; on a page that says :data:`FILES_NOTE`, its unlinked entry names as ``../name``."""
    if isinstance(page, bytes):
        page = page.decode("utf-8", "surrogateescape")
    found = [(m.start(), urllib.parse.unquote_to_bytes(m.group(1))) for m in _LINK.finditer(page)]
    if re.search(rf"^{re.escape(FILES_NOTE)}\b", page, re.MULTILINE):
        found += [(m.start(), b"../" + m.group(1).encode()) for m in _BARE.finditer(page)]
    return [target for _pos, target in sorted(found)]


#: an entry line's text after its name or link when it is a quote: ``— "…"`` to the end of the line
_QUOTED = re.compile(r' — "(.*)"$')


def page_head(page: str) -> str:
    """The head of a rendered page: its lines before the first list line (``- …``)."""
    return page if page.startswith("- ") else page.split("\n- ", 1)[0]


def whole_texts(page: bytes | str) -> dict[bytes, str]:
    """The quoted lines of a rendered page (:data:`QUOTE_NOTE`), as ``{link target (exact path bytes, as
    :func:`links` gives them): the file's whole text}``; empty on a page whose head does not say
    :data:`QUOTE_NOTE`. Range and section lines are never quotes."""
    if isinstance(page, bytes):
        page = page.decode("utf-8", "surrogateescape")
    if QUOTE_NOTE not in page_head(page):
        return {}
    bare = re.search(rf"^{re.escape(FILES_NOTE)}\b", page, re.MULTILINE) is not None
    out: dict[bytes, str] = {}
    for line in page.splitlines():
        m = _LINK.match(line)
        if m is not None:
            target, rest = urllib.parse.unquote_to_bytes(m.group(1)), line[m.end() :]
        else:
            b = _BARE.match(line) if bare else None
            if b is None:
                continue
            target, rest = b"../" + b.group(1).encode(), line[b.end(1) :]
        q = _QUOTED.fullmatch(rest)  # only an entry's quote starts with a bare '"' (:func:`said`)
        if q is not None:
            out[target] = q.group(1)
    return out
