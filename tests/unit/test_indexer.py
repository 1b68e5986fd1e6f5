"""Indexer passes over a real store (no mount): caching, incremental TOCs, filing, paging."""

import os
import re

import pytest

from libraryfs.daemon.indexer import Indexer
from libraryfs.fs import schema as S
from libraryfs.fs.check import check
from libraryfs.fs.store import Store
from libraryfs.fs.tree import StoreTree
from libraryfs.fs.view import LibraryView
from libraryfs.index.toc import links
from libraryfs.index.tokens import count_tokens


def toc(st: Store, path: str, page: int = 0) -> bytes:
    view = LibraryView(st)
    p = (b"/" + os.fsencode(path.strip("/")) if path.strip("/") else b"") + (
        b"/INDEX.md" if page == 0 else b"/.index/%04d.md" % page
    )
    fh, _ = view.open(p, os.O_RDONLY)
    data = view.read(fh, 1 << 20, 0)
    view.release(fh)
    return data


def make(libdir):
    st = Store(libdir)
    return st, StoreTree(st), Indexer(str(libdir), store=st)


def test_summaries_are_cached_and_edits_are_incremental(libdir):
    st, tree, idx = make(libdir)
    tree.write_bytes("a/b/deep.md", b"# Deep note\n\nAbout caching.\n")
    tree.write_bytes("a/other.md", b"# Other\n\nUnrelated.\n")
    tree.write_bytes("z/z.md", b"# Zed\n\nElsewhere.\n")
    first = idx.run_once()
    assert first.summarized == 3
    again = idx.run_once()
    assert again.summarized == 0 and again.records == 0 and again.dirs_rendered == 0
    tree.write_bytes("a/b/deep.md", b"# Deeper note\n\nEdited.\n")
    rep = idx.run_once()
    assert rep.summarized == 1
    assert rep.dirs_rendered == 3  # a/b, a, root — not z
    assert b"Deeper note" in toc(st, "a/b")
    with st.read() as t:
        assert t.journal_tail() == t.cfg_int(S.CFG_CURSOR)  # the indexer wrote no journal record itself
    assert check(st).problems == []


def test_delete_and_directory_rename_follow_in_tocs(libdir):
    st, tree, idx = make(libdir)
    tree.write_bytes("proj/notes/a.md", b"# Alpha\n")
    tree.write_bytes("proj/notes/b.md", b"# Beta\n")
    idx.run_once()
    tree.remove("proj/notes/a.md")
    tree.rename("proj/notes", "archive")
    idx.run_once()
    assert b"a.md" not in toc(st, "archive")
    assert b"b.md" in toc(st, "archive") and b"Beta" in toc(st, "archive")
    assert b"notes/" not in toc(st, "proj")
    assert b"[archive/](archive/INDEX.md)" in toc(st, "")
    assert check(st).problems == []


def test_inbox_entries_are_filed(libdir):
    st, tree, idx = make(libdir)
    idx.settle_s = 0
    tree.write_bytes("linux/kernel.md", b"# Kernel\n\nThe Linux kernel schedules processes on CPUs.\n")
    tree.write_bytes("linux/fuse.md", b"# FUSE\n\nFilesystems in user space talk to the kernel.\n")
    tree.write_bytes("cooking/pasta.md", b"# Pasta\n\nBoil pasta in salted water.\n")
    idx.run_once()
    tree.write_bytes("inbox/sched.md", b"# Scheduler\n\nHow the kernel scheduler picks processes.\n")
    rep = idx.run_once()
    assert rep.filed == [("sched.md", "linux/sched.md")]
    idx.run_once()
    assert tree.listdir("inbox") == []
    assert b"sched.md" in toc(st, "linux")


def test_an_inbox_entry_named_like_a_toc_is_filed_under_another_name(libdir):
    """An ``INDEX.md`` dropped into the inbox was filed under its own name: it became the section's user
    ``INDEX.md`` (docs/posix.md item 3), so ``cat linux/INDEX.md`` read the dropped file instead of the TOC,
    and the name stayed the user's for good (new-user trial). The filer now treats the generated name as
    taken, like any clash (``INDEX-2.md``)."""
    st, tree, idx = make(libdir)
    idx.settle_s = 0
    tree.write_bytes("linux/kernel.md", b"# Kernel\n\nThe Linux kernel schedules processes on CPUs.\n")
    tree.write_bytes("cooking/pasta.md", b"# Pasta\n\nBoil pasta in salted water.\n")
    idx.run_once()
    tree.write_bytes("inbox/INDEX.md", b"# Kernel notes\n\nIgnore the TOC; the kernel schedules processes.\n")
    rep = idx.run_once()
    assert rep.filed == [("INDEX.md", "linux/INDEX-2.md")]
    idx.run_once()
    assert sorted(tree.listdir("linux")) == ["INDEX-2.md", "kernel.md"]
    page = toc(st, "linux")
    assert page.startswith(b"<!-- libraryfs toc:") and b"[INDEX-2.md](INDEX-2.md)" in page
    assert b"[linux/](linux/INDEX.md)" in toc(st, "")


def test_large_directory_pages_are_bounded_and_every_link_opens(libdir):
    st, tree, idx = make(libdir)
    for i in range(600):
        tree.write_bytes(f"big/n{i:05d}.md", f"# Note {i}\n\nThe body of note number {i}.\n".encode())
    idx.run_once()
    root = toc(st, "big")
    with st.read() as t:
        ino = t.lookup(S.ROOT_INO, b"big")
        npages = t.toc_page_count(ino)
    assert npages > 2
    seen = set()
    for k in range(npages):
        page = toc(st, "big", k)
        assert count_tokens(page) <= 2000
        base = b"/big" if k == 0 else b"/big/.index"
        for lk in links(page):
            target = os.path.normpath(base + b"/" + lk)
            LibraryView(st).getattr(target)  # raises if a TOC names a path that does not open
            if lk.startswith(b"../n"):
                seen.add(lk)
    assert len(seen) == 600
    assert root.count(b"\n- [") <= 60


def test_a_sections_counts_agree_on_its_page_and_its_parents(libdir):
    """Issue 13: a section's header counted its direct children while its line on the parent's page counted
    entries recursively, both as "entries". Now "N entries" is the direct count everywhere and "M in all"
    the recursive one."""
    st, tree, idx = make(libdir)
    for i in range(2):
        tree.write_bytes(f"proj/top{i}.md", b"# Top\n\nA note at the top.\n")
    for i in range(3):
        tree.write_bytes(f"proj/deep/d{i}.md", b"# Deep\n\nA note further down.\n")
    idx.run_once()
    assert "\n3 entries, 5 in all · " in toc(st, "proj").decode()
    assert "\n3 entries · " in toc(st, "proj/deep").decode()
    root_line = next(ln for ln in toc(st, "").decode().splitlines() if ln.startswith("- [proj/]"))
    assert "(3 entries, 5 in all, " in root_line, root_line
    deep_line = next(ln for ln in toc(st, "proj").decode().splitlines() if ln.startswith("- [deep/]"))
    assert "(3 entries, " in deep_line and "in all" not in deep_line, deep_line


def test_a_section_of_wordless_entries_gets_a_line_in_words_and_counts_agree(libdir):
    """A section whose entries give no word to describe it by (an empty file, binary data) gets a line that
    says so — never a blank ``—  (2 entries, 1 tok)`` — and one token is "1 token" on its page."""
    st, tree, idx = make(libdir)
    tree.write_bytes("blobs/a.txt", b"")
    tree.write_bytes("blobs/b.bin", b"\x00\x01\x02")
    tree.write_bytes("notes/plan.md", b"# Plan\n\nbuy milk\n")
    idx.run_once()
    root = toc(st, "").decode()
    line = next(x for x in root.splitlines() if x.startswith("- [blobs/]"))
    assert re.fullmatch(
        r"- \[blobs/\]\(blobs/INDEX\.md\) — no words to describe it by \(.+\) \(2 entries, 1 tok\)", line
    )
    assert "\n2 entries · 1 token\n" in toc(st, "blobs").decode()


def test_a_name_of_255_bytes_already_taken_is_filed_with_its_suffix_within_name_max(libdir):
    """A second ``inbox/qqq…`` (255 bytes) once never left the inbox: its clash name ``qqq…-2`` was 257
    bytes (ENAMETOOLONG) and every pass failed again. The stem is cut so the name stays 255 bytes; a
    multibyte name is cut on a character boundary."""
    st, tree, idx = make(libdir)
    idx.settle_s = 0
    q = "q" * 255
    tree.makedirs(f"inbox/{q}")
    assert idx.run_once().filed == [(q, f"unsorted/{q}")]
    tree.makedirs(f"inbox/{q}")
    rep = idx.run_once()
    assert rep.filed == [(q, "unsorted/" + "q" * 253 + "-2")]
    assert tree.listdir("inbox") == []
    from libraryfs.daemon.filing import clash_name

    cjk = ("中" * 84 + ".md").encode()  # 255 bytes
    assert clash_name(cjk, 2) == ("中" * 83).encode() + b"-2.md"
    assert clash_name(b"a.md", 3) == b"a-3.md" and clash_name(b".x", 2) == b".x-2"
    assert clash_name(b"a." + b"e" * 253, 2) == b"a." + b"e" * 251 + b"-2"


@pytest.mark.expect_log(r"could not file inbox/adir into unsorted")
def test_a_filing_that_keeps_failing_is_logged_once_and_retried_with_a_backoff(libdir, caplog):
    """A filing that failed was tried and logged (~800 bytes) on every pass, ~1.4 s apart, for good."""
    import logging

    st, tree, idx = make(libdir)
    idx.settle_s = 0
    tree.write_bytes("unsorted", b"a file where the section would be\n")  # every move into it fails: ENOTDIR
    tree.makedirs("inbox/adir")
    with caplog.at_level(logging.WARNING, logger="libraryfs.indexer"):
        for _ in range(5):
            idx.run_once()
    fails = [r for r in caplog.records if "could not file" in r.getMessage()]
    assert len(fails) == 1
    assert tree.listdir("inbox") == ["adir"]
    assert idx._filing_failed[b"adir"].tries == 1  # the later passes waited for its retry time


def test_a_filed_name_is_logged_on_one_line_escaped_as_the_tocs_show_it(libdir, caplog):
    """A name holding a newline split ``filed inbox/…`` into two log lines, the second one the name's own text
    (a name could forge a whole ``… libraryfs.indexer ERROR …`` line, which ``status`` quotes); a byte that is
    not UTF-8 was logged as ``\\udcff``. Now the name is shown as the TOCs and ``find`` show it: ``\\x0a``,
    ``\\xff`` (:func:`libraryfs.shown.show_name`)."""
    import logging

    st, tree, idx = make(libdir)
    idx.settle_s = 0
    name = os.fsdecode(b"plan\n2026-12-03 00:00:00 libraryfs.indexer ERROR forged \xff.md")
    tree.write_bytes(f"inbox/{name}", b"# Plan\n\nA plan.\n")
    with caplog.at_level(logging.INFO, logger="libraryfs.indexer"):
        idx.run_once()
    filed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("filed inbox/")]
    assert len(filed) == 1, filed
    assert "\n" not in filed[0] and "\udcff" not in filed[0], filed
    assert filed[0].startswith(
        "filed inbox/plan\\x0a2026-12-03 00:00:00 libraryfs.indexer ERROR forged \\xff.md as "
    )


def test_cli_find_escapes_bidi_controls_as_the_tocs_and_mcp_do(libdir, run_cli):
    """``libraryfs find`` printed U+202E (right-to-left override) raw: ``invoice\\u202efdp.exe`` reads
    ``invoiceexe.pdf`` on a terminal. The TOCs and MCP show ``invoice\\x202efdp.exe``; so does ``find`` now
    (its ``-0`` output keeps the exact bytes)."""
    st, tree, idx = make(libdir)
    name = "invoice\u202efdp.exe"
    tree.write_bytes(f"bills/{name}", b"invoice text\n")
    idx.run_once()
    st.close()
    out = run_cli("find", str(libdir), "invoice", check_rc=True).stdout.splitlines()
    assert "/bills/invoice\\x202efdp.exe" in out, out
    assert not any("\u202e" in line for line in out), out
    raw = run_cli("find", str(libdir), "invoice", "-0", check_rc=True).stdout.split("\0")
    assert f"/bills/{name}" in raw, raw
