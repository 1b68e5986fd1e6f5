"""The one owner of generated names (libraryfs.fs.generated): the names and the page-name scheme that the
view, the renderer, the mount lifecycle and the benchmarks share. Expected values are the documented names
(README layout), spelled out here on purpose."""

from __future__ import annotations

import posixpath

import pytest

from libraryfs.fs import generated as G
from libraryfs.fs.schema import ROOT_INO
from libraryfs.index.toc import Item, links, render


def test_page_names_round_trip_and_reject_lookalikes():
    for k in (1, 2, 10, 999, 9999):
        assert G.page_number(G.page_name(k)) == k == G.page_number(G.page_file(k))
    assert G.page_name(1) == b"0001.md" and G.page_file(42) == "0042.md"
    for bad in (b"1.md", b"00001.md", b"abcd.md", b"0001.txt", b"0001.md\n", b"INDEX.md", "０００１.md"):
        assert G.page_number(bad) == 0, bad
    assert [G.page_relpath(k) for k in range(3)] == ["INDEX.md", ".index/0001.md", ".index/0002.md"]
    assert G.toc_page_paths(b"/a/b/", 3) == [b"/a/b/INDEX.md", b"/a/b/.index/0001.md", b"/a/b/.index/0002.md"]
    assert G.toc_page_paths(b"/", 0) == [b"/INDEX.md"]


@pytest.mark.parametrize(
    ("name", "anywhere", "at_root"),
    [
        (b"INDEX.md", True, True),
        (b".index", True, True),
        (b".libraryfs", False, True),
        (b".find", False, True),
        (b"index.md", False, False),
        (b".index.md", False, False),
        (b"notes", False, False),
    ],
)
def test_reserved_names(name, anywhere, at_root):
    assert G.is_reserved(name, 7) is anywhere
    assert G.is_reserved(name, ROOT_INO) is at_root
    assert G.is_generated(name.decode(), at_root=False) is anywhere
    assert G.is_generated(name.decode(), at_root=True) is at_root
    assert G.VIRT_BASE > 1 << 48  # far above any inode a store allocates


def test_every_page_the_renderer_links_has_a_generated_name():
    items = [Item(b"entry-%05d.md" % k, f"note number {k} about a topic", 40) for k in range(400)]
    out = render("d", "", items, max_tokens=300, count_tokens=lambda s: len(s) // 3)
    assert out.levels >= 3  # root, at least one index level, leaves
    names = {G.page_relpath(k) for k in range(len(out.pages))}
    linked = set()
    for k, page in enumerate(out.pages):
        here = posixpath.dirname(G.page_relpath(k))
        for target in links(page):
            t = posixpath.normpath(posixpath.join(here, target.decode()))
            if t.startswith(G.PAGES_DIRNAME + "/") or t == G.INDEX_FILE:
                linked.add(t)
    assert linked == names  # every page reachable, nothing linked that is not a page
