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


def test_a_leaf_page_s_unlinked_names_are_entries():
    """TOC_FORMAT 5: on a leaf page that says ``files: ../NAME`` a line ``- name — summary`` is the entry
    ``../name``; without that line a bare list item is no entry."""
    page = (
        "<!-- libraryfs toc: page=3/9 -->\n# library — json.rst.txt … zlib.rst.txt\nfiles: ../NAME\n\n"
        "- json.rst.txt — JSON encoder and decoder. Defines: dumps, loads (4,210 tok)\n"
        "- [odd name.txt](../odd%20name.txt) — spaces (12 tok)\n\n- [↑ up](../INDEX.md)\n"
    )
    lines = parse_toc(page, "library/.index/0003.md")
    assert [(ln.label, ln.path, ln.is_toc) for ln in lines] == [
        ("json.rst.txt", "library/json.rst.txt", False),
        ("odd name.txt", "library/odd name.txt", False),
        ("↑ up", "library/INDEX.md", True),
    ]
    assert lines[0].rest.startswith("— JSON encoder") and "dumps" in lines[0].rest
    assert [ln.label for ln in parse_toc(page.replace("files: ../NAME\n", ""), "library/.index/0003.md")] == [
        "odd name.txt",
        "↑ up",
    ]
