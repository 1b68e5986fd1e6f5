"""TOC rendering: bounded pages at any size, exact links, sanitised builder text."""

import os

import pytest

from libraryfs.index.jobs import Group
from libraryfs.index.toc import Item, links, render, sanitize
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
