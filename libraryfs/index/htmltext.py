"""Outline of an HTML document (rules in :mod:`.outline`): title, headings, the meta description or the
first sentence of content; markup, scripts and styles never reach the result. Parsed with the standard
library's tolerant :class:`html.parser.HTMLParser`."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import TYPE_CHECKING

from libraryfs.index.markup import clean, first_sentence

if TYPE_CHECKING:
    from libraryfs.index.outline import Outline


class _HtmlScan(HTMLParser):
    """Collects ``<title>``, ``<h1>``–``<h3>``, the meta description and paragraph text (no script/style)."""

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

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Count a script/style/noscript/template/svg nesting level, take the meta description, or end the
        current text at a heading, title or block tag (overrides
        :meth:`html.parser.HTMLParser.handle_starttag`)."""
        if tag in ("script", "style", "noscript", "template", "svg"):
            self._skip += 1
            return
        if tag == "meta":
            a = dict(attrs)
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
        if tag in ("title", "h1", "h2", "h3") or tag in self._BLOCK:
            self._end_text()

    def handle_data(self, data: str) -> None:
        """Collect text inside a title, heading or block, never inside a skipped element (overrides
        :meth:`html.parser.HTMLParser.handle_data`)."""
        if not self._skip and self._where:
            self._buf.append(data)

    def _end_text(self) -> None:
        text = " ".join(" ".join(self._buf).split())
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
    title = clean(scan.title) or (clean(scan.headings[0]) if scan.headings else "")
    headings = [clean(h) for h in scan.headings]
    lead = scan.description or first_sentence([clean(p) for p in scan.paragraphs])
    return Outline(title=title, headings=headings, lead=lead)
