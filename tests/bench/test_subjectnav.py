"""The findability benchmark's subject-index reader: range labels, word lines and the combination of
words into a ranking, on page text as libraryfs renders it (no mount)."""

from __future__ import annotations

from libraryfs.index import subjects
from libraryfs_bench.findability import subjectnav as SN
from libraryfs_bench.findability.reader import parse_toc

LEAF = "\n".join(
    [
        "<!-- libraryfs subjects: page=3 words=3 -->",
        "# Subject index — mulch … mulled",
        "",
        subjects.subject_line(
            "mulch", (2, [("beds.md", b"/garden/beds.md"), ("a b.md", b"/x/a b.md")]), "../../"
        ),
        subjects.subject_line("mulched", (9, [("tools.md", b"/garden/tools.md")]), "../../"),
        subjects.subject_line("compost", (1, [("tools.md", b"/garden/tools.md")]), "../../"),
        "",
        "- [↑ up](../INDEX.md)",
    ]
)


def test_word_lines_resolve_links_against_the_page():
    got = SN.word_lines(LEAF, ".subjects/.index/0003.md")
    assert got == [
        ("mulch", 2, ["garden/beds.md", "x/a b.md"]),
        ("mulched", 9, ["garden/tools.md"]),
        ("compost", 1, ["garden/tools.md"]),
    ]


def test_rare_words_and_shared_entries_rank_first():
    found = SN.word_lines(LEAF, ".subjects/.index/0003.md")
    ranked = SN.score_entries(["mulch", "compost"], found)
    # tools.md: linked first by the rare "compost" and by "mulched" (same stem as "mulch")
    assert [p for _s, p in ranked] == ["garden/tools.md", "garden/beds.md", "x/a b.md"]
    assert SN.score_entries(["absent"], found) == []


def test_ranges_and_the_master_line():
    assert (
        SN.in_range("mulch", "mu … mz")
        and SN.in_range("mzzz", "mu … mz")
        and not SN.in_range("na", "mu … mz")
    )
    assert SN.in_range("mulch", "mulch") and not SN.in_range("mul", "mulch")
    assert SN.index_words(["a", "mulch", "x2", "json.dumps", "the", "compost"]) == ["compost", "mulch", "the"]
    master = "# /\n\n- [docs/](docs/INDEX.md) — notes (3 entries, 40 tok)\n- [names A–Z](.catalogue/INDEX.md) — name index: 3 exact names\n"
    assert SN.subject_index_line(parse_toc(master, "INDEX.md")) is None
    with_subjects = (
        master + "- [subjects](.subjects/INDEX.md) — subject index: 12 words of the entries' text\n"
    )
    line = SN.subject_index_line(parse_toc(with_subjects, "INDEX.md"))
    assert line is not None and line.path == ".subjects/INDEX.md"
