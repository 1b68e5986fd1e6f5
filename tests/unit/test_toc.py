"""TOC rendering: bounded pages at any size, exact links, sanitised builder text."""

import os
import re

import pytest
from helpers.markdown import check_rendered

from libraryfs.index.jobs import Group
from libraryfs.index.toc import Item, link_target, links, render, sanitize
from libraryfs.index.tokens import count_tokens


def items(n, summary="a short summary of this entry"):
    return [Item(b"entry-%06d.md" % i, summary, 100 + i) for i in range(n)]


@pytest.mark.parametrize("n", [1, 30, 300, 3000, 20000])
def test_pages_never_exceed_the_bound(n):
    out = render("sect", "a section", items(n), max_tokens=2000, count_tokens=count_tokens)
    assert max(out.page_tokens) <= 2000
    assert all(count_tokens(p.decode()) <= 2000 for p in out.pages)
    # every entry appears exactly once across the leaf pages
    leaf_links = [lk for p in out.pages for lk in links(p) if not lk.endswith(b".md") or b"entry-" in lk]
    names = sorted(lk.rsplit(b"/", 1)[-1] for lk in leaf_links if b"entry-" in lk)
    assert names == sorted(i.name for i in items(n))


def test_depth_is_logarithmic():
    small = render("s", "", items(300), max_tokens=2000, count_tokens=count_tokens)
    big = render("s", "", items(20000), max_tokens=2000, count_tokens=count_tokens)
    assert small.levels == 2
    assert big.levels == 3  # fan-out ~50: 20,000 entries need one more level, not 400x more pages to read


def test_links_are_exact_bytes_for_odd_names():
    odd = [
        Item(b"with space.md", "s", 1),
        Item(b"nl\nname", "s", 1),
        Item(b"caf\xe9.md", "s", 1),
        Item(b"brackets[1](x).md", "s", 1),
    ]
    out = render("s", "", odd, max_tokens=2000, count_tokens=count_tokens)
    assert set(links(out.pages[0])) == {i.name for i in odd}


def test_model_text_is_sanitised():
    evil = "line one\n- [pwn](/etc/passwd)\x1b[31m red \u202e rtl"
    out = render("s", evil, [Item(b"a.md", evil, 1)], max_tokens=2000, count_tokens=count_tokens)
    page = out.pages[0].decode()
    assert "\x1b" not in page and "\u202e" not in page
    assert all(not ln.startswith("- [pwn]") for ln in page.splitlines())
    assert links(page) == [b"a.md"]  # the only link is the one the renderer made
    assert "\n" not in sanitize("a\nb") and len(sanitize("x" * 1000)) <= 240


def test_builder_groups_used_only_when_they_cover_everything():
    its = items(120)
    names = [os.fsdecode(i.name) for i in its]
    good = [Group("first half", names[:60]), Group("second half", names[60:])]
    out = render("s", "", its, max_tokens=2000, count_tokens=count_tokens, groups=good)
    assert "first half" in out.pages[0].decode()
    bad = [Group("dup", names[:70]), Group("rest", names[60:])]
    out2 = render("s", "", its, max_tokens=2000, count_tokens=count_tokens, groups=bad)
    assert "dup" not in out2.pages[0].decode()


def _read_cost(out) -> int:
    """Tokens a two-level lookup reads at worst: the root page and the largest page below it."""
    return out.page_tokens[0] + max(out.page_tokens[1:])


def test_two_level_toc_has_balanced_leaves_not_full_ones():
    """A lookup reads the root and one leaf: leaves of about √(S·r) tokens cost less to read than full
    leaves under a short root (docs/theorem.md, AUTO vs INDEXED), and the depth stays two levels."""
    out = render("s", "", items(500), max_tokens=2000, count_tokens=count_tokens)
    assert out.levels == 2
    assert max(out.page_tokens[1:]) < 1000  # full leaves were ~1,900 tokens
    assert _read_cost(out) < 1600  # root + full leaf was ~2,200
    assert len(out.pages) - 1 >= 10


def test_a_line_longer_than_the_balanced_leaf_size_is_no_error():
    long_name = ("é" * 125).encode() + b".md"  # 253 bytes; its link ~750 characters, ~640 tokens: within C
    its = sorted([*items(60), Item(long_name, "a long one", 5)], key=lambda i: i.name)  # leaves of ~300
    out = render("s", "", its, max_tokens=2000, count_tokens=count_tokens)
    assert max(out.page_tokens) <= 2000
    assert any(long_name in lk for p in out.pages for lk in links(p))


@pytest.mark.parametrize("n", [200, 201, 333, 500])
def test_leaves_of_a_run_are_about_equal_no_short_tail(n):
    """A one-entry last leaf would get that entry's name as its range label (an agent reads it as the
    entry): the leaves of a run are cut at equal shares."""
    out = render("s", "", items(n), max_tokens=2000, count_tokens=count_tokens)
    leaf_sizes = [sum(1 for lk in links(p) if b"entry-" in lk) for p in out.pages[1:]]
    assert min(leaf_sizes) * 2 >= max(leaf_sizes) and sum(leaf_sizes) == n


def _keyed_items(n):
    """A key-value store's entries as the indexer sees them (``bench theorem``'s AUTO stores): 4-digit
    keys, a 4-letter value as the summary and as the entry's only term — no term shared by two entries."""
    import random

    rng = random.Random(7)
    keys = sorted(rng.sample(range(1000, 10000), n))
    vals: dict[str, None] = {}
    while len(vals) < n:  # distinct: a value two entries share is a term of their range (kept)
        vals.setdefault("".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(4)))
    return [Item(b"%d" % k, v, 6, terms={v.lower(): 1}) for k, v in zip(keys, vals, strict=True)]


def _resent_cost(out) -> float:
    """What a two-level lookup sends under the paper's re-sent history: the root 3×, the leaf (the mean
    over entries) 2×."""
    leaves = out.page_tokens[1:]
    per_leaf = [sum(1 for lk in links(p) if not lk.endswith(b".md")) for p in out.pages[1:]]
    mean_leaf = sum(t * k for t, k in zip(leaves, per_leaf, strict=True)) / sum(per_leaf)
    return 3 * out.page_tokens[0] + 2 * mean_leaf


@pytest.mark.parametrize("n", [500, 2000, 5000])
def test_key_value_store_toc_costs_what_its_ranges_need(n):
    """Range lines of a store whose entries share no term carry no terms (a sample of 12 random values
    per line was ~40 of a line's ~60 tokens), their counts and the files' sizes, about the same on every
    line, are said once on the page, and the leaves are cut where the re-sent cost is least: two levels
    up to 5,000 entries. Before: 3 × 890 + 2 × 620 tokens at 500, 3 × 1,808 + 2 × 1,223 at 2,000, three
    levels at 5,000; TOC_FORMAT 4 (a count and a size on every line): 2,182 / 4,226 / 6,591 at 500 / 2,000 /
    5,000, now 1,799 / 3,412 / 5,315 (docs/theorem.md)."""
    out = render("t00", "", _keyed_items(n), max_tokens=2000, count_tokens=count_tokens)
    assert out.levels == 2
    root = out.pages[0].decode()
    range_lines = [ln for ln in root.splitlines() if ln.startswith("- [")]
    assert all(re.fullmatch(r"- \[\d+ … \d+\]\(\.index/\d{4}\.md\)", ln) for ln in range_lines)
    assert re.search(
        r"^[\d,]+ entries · [\d,]+ tokens · each file 6 tok · each range \d+–\d+ entries$", root, re.M
    )
    leaf = out.pages[1].decode()
    assert (
        "\nfiles: ../NAME · each file 6 tok\n" in leaf
        and " tok)" not in leaf
        and "](../" not in leaf.split("↑")[0]
    )
    bound = {500: 1900, 2000: 3600, 5000: 5600}[n]
    assert _resent_cost(out) < bound, (n, out.page_tokens[0], max(out.page_tokens[1:]))


def test_range_lines_keep_terms_their_entries_share():
    """Terms two or more entries of a range hold still describe it (the python docs' ``email`` pages)."""
    its = [
        Item(
            b"%s-%03d.md" % (topic, i),
            f"{topic.decode()} note {i}",
            200,
            terms={topic.decode(): 1, f"u{i}": 1},
        )
        for topic in (b"alpha", b"beta", b"gamma", b"delta")
        for i in range(40)
    ]
    out = render("s", "", its, max_tokens=2000, count_tokens=count_tokens)
    root = out.pages[0].decode()
    assert out.levels == 2
    assert "alpha" in root and "delta" in root  # the shared term of each run
    assert not re.search(r"\bu\d+\b", root)  # no entry's own term


def test_planned_cut_is_no_worse_than_full_or_square_root_leaves(monkeypatch):
    """The planner's cut costs a lookup no more than full leaves or the √(S·r) cut it replaced."""
    import libraryfs.index.tocplan as tocplan

    its = _keyed_items(2000)
    chosen = _resent_cost(render("t", "", its, max_tokens=2000, count_tokens=count_tokens))
    for forced in (lambda s, b, r=45, *_: b, lambda s, b, r=45, *_: max(300, int((s * 45) ** 0.5))):
        monkeypatch.setattr(tocplan, "balanced_leaf_budget", forced)
        other = render("t", "", its, max_tokens=2000, count_tokens=count_tokens)
        if other.levels == 2:
            assert chosen <= _resent_cost(other) + 1
        monkeypatch.undo()


def test_counts_say_one_thing_per_word():
    """``N entries`` is a directory's own entries (its lines), ``M in all`` everything below, said when it
    differs: on the page header, a section's line, and (multi-page) a range line."""
    its = [
        Item(b"a.md", "a note", 10),
        Item(b"deep", "a section", 500, is_dir=True, entries=64, direct=13),
        Item(b"flat", "a section", 50, is_dir=True, entries=5, direct=5),
        Item(b"old", "rendered by an older release", 50, is_dir=True, entries=7),
        Item(b"void", "empty section", 0, is_dir=True, entries=0, direct=0),
    ]
    page = render("s", "", its, max_tokens=2000, count_tokens=count_tokens).pages[0].decode()
    assert "\n5 entries, 77 in all · 610 tokens\n" in page
    assert "(13 entries, 64 in all, 500 tok)" in page
    assert "(5 entries, 50 tok)" in page and "in all, 50 tok" not in page.split("flat")[1].split("\n")[0]
    assert "(7 in all, 50 tok)" in page  # its own count unknown until it is rendered again
    assert "(0 entries, 0 tok)" in page
    many = [Item(b"s%03d" % i, "a section " * 5, 100, is_dir=True, entries=10, direct=4) for i in range(200)]
    out = render("big", "", many, max_tokens=2000, count_tokens=count_tokens)
    assert out.levels >= 2
    for ln in out.pages[0].decode().splitlines():
        if ln.startswith("- ["):
            m = re.search(r"— (\d+) entries, (\d+) in all", ln)
            assert m and int(m.group(2)) == 10 * int(m.group(1)), ln
    assert "\n200 entries, 2,000 in all · 20,000 tokens\n" in out.pages[0].decode()


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (
            "- [x](../../etc/passwd) — 3 entries: secrets, keys (12 tok) The real text.",
            "x: secrets, keys The real text.",
        ),
        ("- [INDEX.md](../../etc/passwd) — a fake TOC line (1 tok)", "INDEX.md — a fake TOC line"),
        ("* [notes/](notes/INDEX.md) — 2 entries, 5 in all (2 entries, 40 tok)", "notes/"),
        ("Heading ](http://evil.example) code", "Heading code"),
        (
            "1. First step: see ![diagram](d.png) and [the docs](http://x)",
            "First step: see diagram and the docs",
        ),
        # prose that only looks a little like it is left alone
        ("A table (3 entries in it) of things — 4 entries are shown.", None),
        ("json --- JSON encoder. Defines: dumps, loads (+3)", None),
    ],
)
def test_summary_text_never_carries_toc_markup(text, want):
    """Issue 13, bad input: an entry whose first line fakes a TOC line had it copied into its summary."""
    assert sanitize(text) == (text if want is None else want)
    page = render("s", "", [Item(b"fake.md", text, 25)], max_tokens=2000, count_tokens=count_tokens).pages[0]
    assert links(page) == [b"fake.md"]
    line = page.decode().splitlines()[-1]
    assert line.count(" tok)") == 1, line
    if want is not None:
        assert not re.search(r"— [\d,]+ entr", line), line


def test_a_size_or_count_every_line_repeats_is_said_once():
    """TOC_FORMAT 5: files of about one size (within 10% or 3 tokens) get the size once on the page, not a
    ``(N tok)`` each; sizes that differ, approximate ones and sections keep their own facts; a page's range
    lines of about equal counts say the count once (docs/theorem.md, AUTO against INDEXED)."""
    tiny = [Item(b"k%03d" % i, f"v{i}", 5 + i % 4) for i in range(20)]
    page = render("s", "", tiny, max_tokens=2000, count_tokens=count_tokens).pages[0].decode()
    assert "\n20 entries · 130 tokens · each file 5–8 tok\n" in page and " tok)" not in page
    assert links(page) == [i.name for i in tiny]
    mixed = render("s", "", items(20), max_tokens=2000, count_tokens=count_tokens).pages[0].decode()
    assert mixed.count(" tok)") == 20 and "each file" not in mixed  # 100–119 tok: more than 10% apart
    approx = [*tiny[:19], Item(b"k999", "v", 6, approx=True)]
    assert (
        render("s", "", approx, max_tokens=2000, count_tokens=count_tokens).pages[0].decode().count(" tok)")
        == 20
    )
    with_dir = [*tiny, Item(b"sub", "a section", 40, is_dir=True, entries=3, direct=3)]
    page = render("s", "", with_dir, max_tokens=2000, count_tokens=count_tokens).pages[0].decode()
    assert "each file 5–8 tok" in page and "(3 entries, 40 tok)" in page
    many = [Item(b"k%05d" % i, "a value", 6 + i % 2) for i in range(3000)]
    out = render("s", "", many, max_tokens=2000, count_tokens=count_tokens)
    root = out.pages[0].decode()
    assert re.search(
        r"^3,000 entries · [\d,]+ tokens · each file 6–7 tok · each range \d+(–\d+)? entries$", root, re.M
    )
    assert not re.search(r"\.md\) — \d+ entries", root)
    for p in out.pages[1:]:
        assert "\nfiles: ../NAME · each file 6–7 tok\n" in p.decode() and " tok)" not in p.decode()
    assert max(out.page_tokens) <= 2000
    sections = [
        Item(b"s%03d" % i, "a section", 100, is_dir=True, entries=10 + i, direct=4) for i in range(200)
    ]
    root = render("big", "", sections, max_tokens=2000, count_tokens=count_tokens).pages[0].decode()
    assert all(re.search(r"— \d+ entries, [\d,]+ in all", ln) for ln in root.splitlines() if ".index/" in ln)


def test_freshness_facts_are_on_the_root_page_only():
    """All pages of a directory are written together: the generation and journal position the root page
    states hold for every page; a leaf's header says only which page it is."""
    out = render(
        "s",
        "",
        items(600),
        max_tokens=2000,
        count_tokens=count_tokens,
        header_facts="generation=7 journal_seq=9",
    )
    assert (
        out.pages[0]
        .decode()
        .startswith(f"<!-- libraryfs toc: page=0/{len(out.pages)} generation=7 journal_seq=9 -->\n")
    )
    for k, p in enumerate(out.pages[1:], start=1):
        assert p.decode().startswith(f"<!-- libraryfs toc: page={k}/{len(out.pages)} -->\n")


def test_leaf_pages_leave_out_links_a_name_implies():
    """On a leaf page an entry whose name is its own link is ``- name — summary`` and the page says once
    where such names are (``files: ../NAME``); odd names keep their links, single pages keep every link, and
    :func:`links` gives every entry of every page exactly once (TOC_FORMAT 5)."""
    odd = [b"_init_.py", b"a b.md", b"x[1].md", b"1.", b"-v", b"caf\xe9", b"INDEX.md"]
    names = sorted([b"k%04d.md" % i for i in range(400)] + odd)
    its = [Item(n, "a note on " + n.decode("utf-8", "replace"), 50 + len(n)) for n in names]
    out = render("s", "", its, max_tokens=2000, count_tokens=count_tokens)
    assert out.levels == 2 and max(out.page_tokens) <= 2000
    leaves = [p.decode("utf-8", "surrogateescape") for p in out.pages[1:]]
    assert all("\nfiles: ../NAME\n" in p for p in leaves if "\n- k0" in p)
    assert "\n- k0001.md — a note on k0001.md (58 tok)\n" in "".join(leaves)
    for n in odd:
        assert sum(f"]({link_target(n, '../')}) — " in p for p in leaves) == 1, n
    got = sorted(t[3:] for p in out.pages[1:] for t in links(p) if t != b"../INDEX.md")
    assert got == [n for n in names if n != b"INDEX.md"]  # a user's INDEX.md: its line was checked above
    single = render("s", "", its[:20], max_tokens=2000, count_tokens=count_tokens).pages[0].decode()
    assert "files:" not in single and links(single) == names[:20]


#: names (and first lines) a user may give that are Markdown markup: raw HTML, code, emphasis, links, entities,
#: escapes, headings, strikethrough; each must render as itself and its link resolve
HOSTILE_NAMES = [
    b"<img src=x onerror=alert(1)>.md",
    b"`code`.md",
    b"*bold*.md",
    b"**strong**.md",
    b"__init__.py",
    b"_private.py",
    b"a._b_.md",
    b"lru_cache.py",
    b"x[1](y).md",
    b"![img](x).md",
    b"&lt;script&gt;.md",
    b"R&D notes.md",
    b"back\\slash\\*.md",
    b"ends in backslash\\",
    b"#heading.md",
    b"~~struck~~.md",
    b"<https://example.com>",
    b"caf\xe9.md",
]


def test_hostile_names_render_as_themselves_and_links_resolve():
    """A name or first line that is Markdown markup (``<img onerror>``, backticks, ``*bold*``, ``__init__``,
    entities) renders as itself in CommonMark (markdown-it-py), never as HTML, code or emphasis, on a single
    page and on the leaf pages of a multi-page TOC (where only names needing no escape stand bare), and
    every entry's link gives its exact bytes (TOC_FORMAT 6)."""
    summary = "see <b onmouseover=x>this</b> and `rm -rf` *now* &amp; __dunder__ [x](y)"
    its = sorted((Item(n, summary, 30) for n in HOSTILE_NAMES), key=lambda i: i.name)
    single = render("<i>s</i>", "# <script>x</script>", its, max_tokens=2000, count_tokens=count_tokens)
    assert len(single.pages) == 1
    names = {i.name for i in its}
    assert check_rendered(single.pages[0], names) == names
    assert set(links(single.pages[0])) == names
    filler = [Item(b"k%04d.md" % i, "a note", 40) for i in range(300)]
    big = sorted(its + filler, key=lambda i: i.name)
    out = render("s", "", big, max_tokens=2000, count_tokens=count_tokens)
    assert out.levels == 2
    seen: set[bytes] = set()
    check_rendered(out.pages[0], names)  # range lines: "first … last" labels made of the names
    for page in out.pages[1:]:
        check_rendered(page, names, "../")
        seen |= {t[3:] for t in links(page) if t != b"../INDEX.md"}
    assert seen == {i.name for i in big}


@pytest.mark.parametrize("bound", [200, 400, 800])
def test_a_line_longer_than_a_page_is_shortened_not_an_error(bound):
    """Names of 255 bytes (84 CJK characters, ~800 tokens as a percent-encoded link) with C near its minimum:
    such a line once raised ValueError, and the indexer failed every pass. Every page stays within C, every
    entry is listed once, and a link shown is exact."""
    import random

    rnd = random.Random(1)
    names = sorted(
        ("".join(chr(rnd.randint(0x4E00, 0x9FA5)) for _ in range(84)) + ".md").encode() for _ in range(12)
    )
    assert all(len(n) == 255 for n in names)
    its = [Item(n, "a note", 3) for n in names]
    out = render("s", "", its, max_tokens=bound, count_tokens=count_tokens)
    assert all(count_tokens(p.decode()) <= bound for p in out.pages)
    lines = [ln for p in out.pages for ln in p.decode().splitlines()]
    linked = [ln for ln in lines if ln.startswith("- [") and "](../" in ln and "↑ up" not in ln]
    unlinked = [ln for ln in lines if ln.startswith("- ") and ln.endswith("exceeds the page bound)")]
    assert len(linked) + len(unlinked) == 12
    shown = [lk.rsplit(b"/", 1)[-1] for ln in linked for lk in links(ln)]
    assert set(shown) <= set(names)
    if bound >= 800:  # room for the exact link: every entry is linked
        assert sorted(shown) == names


@pytest.mark.parametrize("claimed", [False, True])
def test_the_master_pages_own_lines_leave_room_for_its_ranges_at_the_smallest_bound(claimed):
    """At C = 200 the master page's two lines to the name and subject indexes (~60 tokens) left its range
    lines no room: every level was one line a page, and the root failed "TOC tree too deep" on every pass.
    Those lines keep their links and drop what they say when they would take over a quarter of the page."""
    import random

    rnd = random.Random(2)
    names = sorted(
        ("".join(chr(rnd.randint(0x4E00, 0x9FA5)) for _ in range(84)) + ".md").encode() for _ in range(12)
    )
    extra = [
        "- [names A–Z](.catalogue/INDEX.md) — name index: 12 exact names (API names, symbols, headwords), "
        "each linked to the entry that defines it",
        "- [subjects](.subjects/INDEX.md) — subject index: 40 words of the entries' text, A–Z, each linked "
        "to the entries where it weighs most",
    ]
    its = [Item(n, "a note", 3) for n in names]
    out = render(
        "/",
        "a library",
        its,
        max_tokens=200,
        count_tokens=count_tokens,
        root_extra=extra,
        root_in_pages_dir=claimed,
    )
    assert all(count_tokens(p.decode()) <= 200 for p in out.pages)
    root = links(out.pages[0])
    assert b".catalogue/INDEX.md" in root and b".subjects/INDEX.md" in root
