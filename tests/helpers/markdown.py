"""CommonMark rendering checks of generated pages (TOC, catalogue, subject index) with markdown-it-py: names
and text render as themselves, never as raw HTML, code or emphasis."""

import urllib.parse

from markdown_it import MarkdownIt


def check_rendered(
    page: bytes, names: set[bytes], base: str = "", code: frozenset[str] = frozenset()
) -> set[bytes]:
    """Render ``page`` with markdown-it-py (CommonMark, GFM strikethrough on): no raw HTML but the page's
    header comment, no code, emphasis, image or strikethrough from a name or text; the text of a link to one
    of ``names`` (``base`` + name) is that name; ``code``: code spans the page's own fixed text holds (the
    catalogue's intro). Returns every link target (exact bytes)."""
    md = MarkdownIt("commonmark").enable("strikethrough")
    text = page.decode("utf-8", "surrogateescape")
    tokens = md.parse(text)
    html_blocks = [t.content for t in tokens if t.type == "html_block"]
    assert html_blocks == [text.splitlines()[0] + "\n"], html_blocks  # the header comment only
    targets = set()
    for tok in tokens:
        kids = tok.children or []
        kinds = {c.type for c in kids if c.type != "code_inline" or c.content not in code}
        banned = {"html_inline", "code_inline", "em_open", "strong_open", "image", "s_open"}
        assert not kinds & banned, (tok.content, kinds)
        label, target = None, b""
        for c in kids:
            if c.type == "link_open":
                label, target = "", urllib.parse.unquote_to_bytes(c.attrs["href"])
            elif c.type == "link_close":
                name = target[len(base) :] if target.startswith(base.encode()) else None
                if name in names:
                    shown = name.decode("utf-8", "backslashreplace")
                    assert label in (shown, shown + "/"), (label, shown)  # renders as itself
                targets.add(target)
                label = None
            elif label is not None and c.type == "text":
                label += c.content
    return targets
