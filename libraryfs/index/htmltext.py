"""Outline of an HTML document (rules in :mod:`.outline`): title, headings, the meta description or the
first sentence of content, the names its definition terms anchor (``<dt id="json.dumps">``); markup,
scripts, styles and navigation chrome never reach the result. Parsed with the standard
library's tolerant :class:`html.parser.HTMLParser`."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import TYPE_CHECKING

from libraryfs.index.markup import clean, first_sentence

if TYPE_CHECKING:
    from libraryfs.index.outline import Outline


#: elements whose text is a page's chrome, not its content: navigation bars, site headers and footers,
#: sidebars (HTML5 sectioning elements; and any element with one of :data:`_CHROME_ROLES`, as Sphinx marks
#: its "related" bar and its sidebar with ``role="navigation"``)
_CHROME_TAGS = frozenset({"nav", "header", "footer", "aside"})
_CHROME_ROLES = frozenset({"navigation", "search", "banner", "contentinfo", "complementary"})
#: classes of elements that are chrome too: a heading's or definition's permalink (Sphinx ``headerlink``)
_CHROME_CLASSES = frozenset({"headerlink"})
#: permalink marks a documentation generator appends to headings (Sphinx ``¶``, MkDocs ``🔗``; not ``#``:
#: a heading may end with one, "C#")
_PERMALINK = "¶🔗 \t"


#: a definition term's ``id`` that names an API object (``json.dumps``, ``asyncio.Task.cancel``): a dotted
#: identifier of at most 100 characters; generated ids (``id1``, ``index-0``) have no dot and are left out
_NAME_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*){1,8}")


class _HtmlScan(HTMLParser):
    """Collects ``<title>``, ``<h1>``–``<h3>``, the meta description and paragraph text (no script/style, no
    navigation chrome: :data:`_CHROME_TAGS`, :data:`_CHROME_ROLES`)."""

    _BLOCK = frozenset({"p", "li", "div", "td", "section", "article", "br", "dd", "dt", "blockquote"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.description = ""
        self.headings: list[str] = []
        self.paragraphs: list[str] = []
        self._where: str = ""
        self._buf: list[str] = []
        self._skip = 0
        self.names: list[str] = []  #: anchors of definition terms (:data:`_NAME_ID`)
        self._chrome: str | None = None  #: the tag of the chrome element being skipped
        self._chrome_depth = 0  #: its nesting depth (same-tag elements inside it)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Count a script/style/noscript/template/svg nesting level, take the meta description, or end the
        current text at a heading, title or block tag (overrides
        :meth:`html.parser.HTMLParser.handle_starttag`)."""
        if tag in ("script", "style", "noscript", "template", "svg"):
            self._skip += 1
            return
        if self._chrome is not None:
            self._chrome_depth += tag == self._chrome
            return
        a = dict(attrs)  # once per tag: chrome, anchors and the meta description read it
        if (
            tag in _CHROME_TAGS
            or (a.get("role") or "").lower() in _CHROME_ROLES
            or not _CHROME_CLASSES.isdisjoint((a.get("class") or "").split())
        ):
            self._end_text()
            self._chrome, self._chrome_depth = tag, 1
            return
        if tag == "dt" and len(self.names) < 2000:  # a definition term's anchor names what it defines:
            anchor = a.get("id") or ""  # Sphinx writes <dt class="sig …" id="json.dumps">
            if _NAME_ID.fullmatch(anchor):
                self.names.append(anchor)
        if tag == "meta":
            if (a.get("name") or "").lower() == "description" and a.get("content") and not self.description:
                self.description = clean(a["content"] or "")
            return
        if tag in ("title", "h1", "h2", "h3") or tag in self._BLOCK:
            self._end_text()
            self._where = tag if tag in ("title", "h1", "h2", "h3") else "p"

    def handle_endtag(self, tag: str) -> None:
        """Close a skipped element, or end the current text at a heading, title or block end tag (overrides
        :meth:`html.parser.HTMLParser.handle_endtag`)."""
        if tag in ("script", "style", "noscript", "template", "svg"):
            self._skip = max(0, self._skip - 1)
            return
        if self._chrome is not None:
            if tag == self._chrome:
                self._chrome_depth -= 1
                if self._chrome_depth <= 0:
                    self._chrome = None
            return
        if tag in ("title", "h1", "h2", "h3") or tag in self._BLOCK:
            self._end_text()

    def handle_data(self, data: str) -> None:
        """Collect text inside a title, heading or block, never inside a skipped element (overrides
        :meth:`html.parser.HTMLParser.handle_data`)."""
        if not self._skip and self._chrome is None and self._where:
            self._buf.append(data)

    def _end_text(self) -> None:
        text = " ".join("".join(self._buf).split())  # text nodes carry their own spaces: "(", "Notation", ")"
        self._buf = []
        where, self._where = self._where, "p" if self._where else ""
        if not text:
            return
        if where == "title" and not self.title:
            self.title = text
        elif where in ("h1", "h2", "h3"):
            self.headings.append(text)
        elif len(self.paragraphs) < 40:
            self.paragraphs.append(text)


def html_outline(text: str) -> Outline:
    """Outline of an HTML document (see :mod:`.outline`): markup never reaches the result."""
    from libraryfs.index.outline import Outline

    scan = _HtmlScan()
    try:
        scan.feed(text[:400_000])
        scan.close()
    except (AssertionError, ValueError):  # pragma: no cover - html.parser is tolerant; be safe anyway
        pass
    scan._end_text()
    headings = [h for h in (clean(h).rstrip(_PERMALINK) for h in scan.headings) if h]
    title = clean(scan.title)
    # the page's own first heading, when the <title> is it plus the site's name ("json — JSON encoder and
    # decoder — Python 3.11.2 documentation"): every page of a site repeats the suffix
    if headings and (not title or (headings[0] in title and len(headings[0]) < len(title))):
        title = headings[0]
    paragraphs = [clean(p) for p in scan.paragraphs]
    lead = scan.description or first_sentence(paragraphs)
    return Outline(
        title=title,
        names=scan.names,
        headings=headings,
        lead=lead,
        text="\n".join([*headings, *paragraphs]),
    )
