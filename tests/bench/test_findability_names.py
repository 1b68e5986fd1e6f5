"""The TOC-only navigator inside an A–Z name index: a name query follows the range line whose range holds
the whole name, not the one whose label shares most of its parts (no mount; page text as rendered by
:mod:`libraryfs.index.catpages`)."""

from __future__ import annotations

from libraryfs.index import catpages
from libraryfs_bench.findability import navigators as N
from libraryfs_bench.findability.reader import parse_toc


def _range_page(ranges: list[tuple[str, str]]) -> str:
    """An inner catalogue page over leaves holding ``(first, last)`` names, rendered by the catalogue's
    own range-line code."""
    kids = [[k + 1, "", lo, hi, 70] for k, (lo, hi) in enumerate(ranges)]
    labels = catpages.range_labels(kids)
    lines = [catpages.range_line(kid, lab, False) for kid, lab in zip(kids, labels, strict=True)]
    return "# Name catalogue\n\n" + "\n".join(lines) + "\n"


PAGE = _range_page(
    [
        ("asyncio", "asyncio.Event"),
        ("asyncio.Future", "asyncio.loop.run_until_complete"),
        ("asyncio.loop.sock_accept", "asyncio.sleep"),
        ("asyncio.start_server", "asyncio.Task"),
    ]
)


def test_the_range_holding_the_name_is_followed_alone():
    lines = parse_toc(PAGE, ".catalogue/.index/0135.md")
    q = "asyncio.sleep"
    lexical = N.rank_lines(N.query_terms(q), lines, True)
    contained = N.rank_lines(N.query_terms(q), lines, True, index_name=q)
    assert len(lexical) == 4  # the parts ("asyncio") match every range: a tie the page order breaks
    assert [ln.label for _s, ln in contained] == ["asyncio.loop.s … asyncio.sl"]


def test_range_holds_reads_labels_as_an_index_files_names():
    assert N.range_holds(N.index_key("--mode"), "mo … ms")  # leading punctuation ignored
    assert N.range_holds(N.index_key("Py_UNICODE_ISLOWER"), "Py_U … PyByteA")  # case ignored
    assert N.range_holds("nonlocal", "n") and not N.range_holds("os", "n")
    assert N.range_holds("struct.struct", "stru … sum") and not N.range_holds("sun", "stru … sum")
    assert N.range_holds("x", "(no names)") is None
