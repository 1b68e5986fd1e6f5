"""Deterministic index-construction jobs."""

from libraryfs.index.jobs import (
    DeterministicBuilder,
    EntryDoc,
    SectionDoc,
    deterministic_summary,
    safe_section_name,
)


def doc(name, text):
    return EntryDoc(path=name, name=name, content_hash="h", text=text, size_bytes=len(text))


def test_summary_from_markdown_rst_and_plain():
    # "Buy milk." has two content words: the next sentence joins it (markup.MIN_LEAD_WORDS)
    assert (
        deterministic_summary(doc("a.md", "# Groceries\n\nBuy milk. And eggs."))
        == "Groceries: Buy milk. And eggs."
    )
    md = "# Groceries\n\nBuy fresh milk today. And eggs."
    assert deterministic_summary(doc("a.md", md)) == "Groceries: Buy fresh milk today."
    rst = "=====\nTitle\n=====\n\nThe opening sentence describes things. Second one.\n"
    assert deterministic_summary(doc("a.rst", rst)) == "Title: The opening sentence describes things."
    s = deterministic_summary(doc("a.txt", " ".join(["word"] * 50) + "."))
    assert s.endswith("…") and len(s.split()) == 21
    assert deterministic_summary(EntryDoc("b", "b", "h", "", 10, True)) == "binary data, 10 bytes"


def test_filing_picks_the_lexically_closest_section():
    b = DeterministicBuilder()
    sections = [
        SectionDoc(
            "cooking",
            [("pasta.md", "Boil pasta in salted water"), ("bread.md", "Knead the dough and bake bread")],
        ),
        SectionDoc(
            "linux",
            [
                ("kernel.md", "The Linux kernel schedules processes"),
                ("fuse.md", "FUSE filesystems in user space"),
            ],
        ),
    ]
    out = b.file(
        [
            doc("sched.txt", "How the kernel scheduler picks processes"),
            doc("zzz.bin", "qwertyuiop asdfghjkl"),
        ],
        sections,
    )
    assert out == ["linux", "unsorted"]


def test_safe_section_names():
    assert safe_section_name("Machine Learning") == "machine-learning"
    assert safe_section_name("../../etc") is None
    assert safe_section_name("a/b/c/d") is None
    assert safe_section_name(".libraryfs") == "libraryfs"  # never a hidden or reserved name
    assert safe_section_name("inbox") is None
