"""The name catalogue over a real store: bounded pages, every name reachable by key order in
⌈log_b N⌉ page reads, links that open, incremental upkeep equal to a rebuild, hostile names escaped."""

from __future__ import annotations

import os
import posixpath
import re
import time
import urllib.parse

import pytest

from libraryfs.daemon.indexer import Indexer
from libraryfs.errors import NotFound
from libraryfs.fs import schema as S
from libraryfs.fs.check import check
from libraryfs.fs.meta import EntryMeta
from libraryfs.fs.store import Store
from libraryfs.fs.tree import StoreTree
from libraryfs.fs.view import LibraryView
from libraryfs.index import catalogue
from libraryfs.index.catpages import MASTER_LABEL, range_labels, sort_key
from libraryfs.index.toc import links
from libraryfs.index.tokens import count_tokens

_LINE = re.compile(r"^- \[((?:\\.|[^\]\\])*)\]\(([^)\s]+)\)", re.M)


def make(tmp_path, bound: int = 2000):
    d = tmp_path / "lib"
    Store.create(d, {"toc_max_tokens": bound}).close()
    st = Store(d)
    return st, StoreTree(st), Indexer(str(d), store=st)


def module_doc(mod: str, n: int, extra: str = "") -> bytes:
    funcs = "".join(f".. function:: {mod}_f{i:03d}(x)\n\n   Does {i}.\n\n" for i in range(n))
    return f"{mod}\n{'=' * len(mod)}\n\n.. module:: {mod}\n\n{funcs}{extra}".encode()


def read(st: Store, path: str) -> str:
    view = LibraryView(st)
    fh, _ = view.open(os.fsencode(path), os.O_RDONLY)
    data = view.read(fh, 1 << 22, 0)
    view.release(fh)
    return data.decode()


def lines(page: str, page_path: str) -> list[tuple[str, str]]:
    """``(unescaped label, absolute target)`` of a page's link lines."""
    base = posixpath.dirname(page_path)
    out = []
    for lab, target in _LINE.findall(page):
        path = posixpath.normpath(posixpath.join(base, urllib.parse.unquote(target)))
        out.append((re.sub(r"\\(.)", r"\1", lab), path))
    return out


def catalogue_pages(st: Store) -> list[str]:
    with st.read() as t:
        n = t.toc_page_count(S.CATALOGUE_INO)
    return ["/.catalogue/INDEX.md"] + [f"/.catalogue/.index/{k:04d}.md" for k in range(1, n)]


def listed(st: Store) -> dict[str, str]:
    """Every name on a leaf page → the entry it links."""
    out: dict[str, str] = {}
    for p in catalogue_pages(st):
        for lab, target in lines(read(st, p), p):
            if ".catalogue" not in target and not lab.startswith("↑"):
                assert lab not in out, f"{lab} listed twice"
                out[lab] = target
    return out


def walk(st: Store, name: str) -> tuple[str | None, int]:
    """Follow key order from the master INDEX.md (its ``names A–Z`` line, then the range ``lo … hi`` holding
    the name's sort key) to the line of ``name``; returns (its target, catalogue pages read)."""
    key = sort_key(name)
    page_path, reads = "/INDEX.md", 0
    for _ in range(10):
        ls = lines(read(st, page_path), page_path)
        for lab, target in ls:
            if lab == name and ".catalogue" not in target:
                return target, reads
        nxt = None
        for lab, target in ls:
            if ".catalogue" not in target or lab.startswith("↑"):
                continue
            lo, _sep, hi = lab.partition(" … ")
            hi = hi or lo
            if lab == MASTER_LABEL or sort_key(lo) <= key <= sort_key(hi) + "\uffff":  # "names A–Z": all
                nxt = target if target.endswith(".md") else target + "/INDEX.md"
                break
        if nxt is None:
            return None, reads
        page_path, reads = nxt, reads + 1
    return None, reads


def expected(st: Store) -> dict[str, str]:
    """name → entry path, from the entries' meta records (the most specific entry for a repeated name)."""
    best: dict[str, tuple[int, str]] = {}
    with st.read() as t:
        for _ino, m in t.iter_meta():
            if isinstance(m, EntryMeta) and m.defines:
                path = os.fsdecode(t.path_of(m.parent).rstrip(b"/") + b"/" + os.fsencode(m.name))
                for n in m.defines:
                    if n not in best or len(m.defines) < best[n][0]:
                        best[n] = (len(m.defines), path)
    return {n: p for n, (_c, p) in best.items()}


@pytest.mark.parametrize("bound", [400, 2000])
def test_every_page_bounded_every_name_reachable_in_log_reads(tmp_path, bound):
    st, tree, idx = make(tmp_path, bound)
    for k in range(12):
        tree.write_bytes(f"docs/m{k:02d}.rst", module_doc(f"mod{k:02d}", 60))
    idx.run_once()
    pages = catalogue_pages(st)
    assert len(pages) > 3
    for p in pages:
        assert count_tokens(read(st, p)) <= bound
    assert count_tokens(read(st, "/INDEX.md")) <= bound
    want = expected(st)
    assert len(want) == 12 * 61 and listed(st) == {n: p for n, p in want.items()}
    with st.read() as t:
        root = catalogue.load_node(t, 0)
        depth = root["depth"]
    for name in list(want)[::7]:
        target, reads = walk(st, name)
        assert target == want[name] and reads <= depth
        LibraryView(st).getattr(os.fsencode(target))  # the link opens
    assert check(st).problems == []


def test_incremental_upkeep_equals_a_rebuild(tmp_path):
    st, tree, idx = make(tmp_path, 600)
    for k in range(6):
        tree.write_bytes(f"a/m{k}.rst", module_doc(f"m{k}", 40))
    idx.run_once()
    tree.write_bytes("a/m1.rst", module_doc("m1", 90))  # grows: a leaf splits
    tree.write_bytes("a/new.rst", module_doc("aaa", 5))
    tree.remove("a/m3.rst")
    tree.rename("a/m4.rst", "a/renamed.rst")
    idx.run_once()
    assert listed(st) == expected(st)
    with st.read() as t:
        st_rec = catalogue.state(t)
    assert not st_rec.get("rebuild")
    tree.rename("a", "b")  # a directory moves: every link below it changes
    idx.run_once()
    got = listed(st)
    assert got == expected(st) and all(p.startswith("/b/") for p in got.values())
    for p in catalogue_pages(st):
        assert count_tokens(read(st, p)) <= 600
    incremental = got
    st.run_write(catalogue.mark_rebuild)
    catalogue.refresh(st, 600, count_tokens)
    assert listed(st) == incremental
    assert check(st).problems == []


def test_hostile_names_are_escaped_and_links_exact(tmp_path):
    st, tree, idx = make(tmp_path)
    text = (
        "Odd\n===\n\n.. envvar:: br]ack[et\n\n.. data:: a … z\n\n"
        ".. envvar:: [x](/etc/passwd)\n\n.. function:: " + "long" * 80 + "()\n"
    )
    tree.write_bytes("we ird/na[me].rst", text.encode())
    idx.run_once()
    master = read(st, "/INDEX.md")
    page = read(st, "/.catalogue/INDEX.md")
    targets = {t for _lab, t in lines(page, "/.catalogue/INDEX.md")}
    assert targets == {"/we ird/na[me].rst"}
    assert {lk for lk in links(page)} == {b"../we ird/na[me].rst"}  # the renderer's links only
    assert all(b"passwd" not in lk for lk in links(master))
    labels = [lab for lab, _t in lines(page, "/.catalogue/INDEX.md")]
    assert "br]ack[et" in labels and "[x](/etc/passwd)" in labels


def test_no_catalogue_without_names_and_check_accepts_one(tmp_path):
    st, tree, idx = make(tmp_path)
    tree.write_bytes("notes/a.md", b"# A note\n\nNo names here.\n")
    idx.run_once()
    with pytest.raises(NotFound):
        read(st, "/.catalogue/INDEX.md")
    tree.write_bytes("notes/b.rst", module_doc("b", 3))
    idx.run_once()
    assert "/.catalogue/INDEX.md" in [t for _l, t in lines(read(st, "/INDEX.md"), "/INDEX.md")]
    assert check(st).problems == []


def _pages(st: Store) -> list[bytes]:
    return [read(st, p).encode() for p in catalogue_pages(st)]


def _settle(idx: Indexer) -> None:
    """Run passes until the indexer says ``idle`` (an unsettled catalogue says ``settling`` until its
    amortised re-plan is allowed; bounded by a deadline, not a sleep)."""
    deadline = time.monotonic() + 60
    while idx.state != "idle":
        assert time.monotonic() < deadline, f"indexer still {idx.state}"
        idx.run_once()
        time.sleep(0.01)


def test_pages_depend_on_the_names_not_on_the_passes(tmp_path):
    """The same files ingested in one pass and in passes of 5 give byte-identical catalogue pages once the
    indexer is idle (issue 13: incremental splits made page ranges depend on how a mount cut the passes)."""
    docs = {f"lib/m{k:02d}.rst": module_doc(f"mod{k:02d}", 25 + 7 * (k % 5)) for k in range(30)}
    st1, tree1, idx1 = make(tmp_path / "one", 500)
    for path, data in docs.items():
        tree1.write_bytes(path, data)
    idx1.run_once()
    assert idx1.state == "idle"
    one = _pages(st1)
    st2, tree2, idx2 = make(tmp_path / "passes", 500)
    order = sorted(docs, key=lambda p: (int(p[5:7]) * 7) % 30)  # not A–Z: names arrive out of order
    for k in range(0, len(order), 5):
        for path in order[k : k + 5]:
            tree2.write_bytes(path, docs[path])
        idx2._catalogue.last_end, idx2._catalogue.last_s = time.monotonic(), 3600.0  # no re-plan yet
        idx2.run_once()
    with st2.read() as t:
        assert catalogue.unsettled(t)
    assert idx2.state == "settling"
    assert _pages(st2) != one  # incremental splits: ranges of their own
    idx2._catalogue.last_s = 0.0  # the amortisation window passed
    _settle(idx2)
    assert _pages(st2) == one
    assert listed(st2) == expected(st2)
    assert check(st2).problems == []


def test_range_labels_separate_neighbours_and_never_read_backwards():
    """A range label is a prefix B-tree separator (every key of the page starts at or after ``lo`` and at or
    before ``hi``, neighbours' keys outside it) that people read in order: ``hi`` never sorts before ``lo``
    (``att … a`` for attach … axis did)."""
    pages = [("abacus", "atom"), ("attach", "axis"), ("bark", "bzz"), ("ca", "cat"), ("cave", "cz")]
    kids = [[0, 0, lo, hi, 1] for lo, hi in pages]
    labels = range_labels(kids)
    for (first, last), label in zip(pages, labels, strict=True):
        lo, _, hi = label.partition(" … ")
        hi = hi or lo
        assert first.startswith(lo) and last.startswith(hi), label
        assert lo <= hi, label
    assert labels[1] == "att … ax"
    for (_, last), (nfirst, _), label in zip(pages, pages[1:], labels, strict=False):  # neighbours excluded
        hi = label.partition(" … ")[2] or label
        assert not nfirst.startswith(hi) and last.startswith(hi)
