"""The subject index over a real store and a real term index (SQLite FTS5): every page within the bound C,
every kept word listed once in key order and reachable by its range labels, its links open, pruning, the
master page's labelled line, amortised rebuilds, and ``check`` on its record."""

from __future__ import annotations

import os
import random
import re

import pytest
from test_catalogue import lines, make, read

from libraryfs.errors import NotFound
from libraryfs.fs import schema as S
from libraryfs.fs.check import check
from libraryfs.fs.view import LibraryView
from libraryfs.index import subjects
from libraryfs.index.tokens import count_tokens

_WORD_LINE = re.compile(r"^- (\S+) — ([\d,]+) entr(?:y|ies): (.*)$", re.M)

# made-up words, so no stopword list or dictionary decides what is kept
_SYL = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pu", "gra", "ble", "dro", "fen", "qui"]


def _words(n: int, seed: int = 5) -> list[str]:
    rnd = random.Random(seed)
    out: set[str] = set()
    while len(out) < n:
        out.add("".join(rnd.choice(_SYL) for _ in range(rnd.randint(2, 4))))
    return sorted(out)


def subject_pages(st) -> list[str]:
    with st.read() as t:
        n = t.toc_page_count(S.SUBJECTS_INO)
    return ["/.subjects/INDEX.md"] + [f"/.subjects/.index/{k:04d}.md" for k in range(1, n)]


def listed(st) -> dict[str, tuple[int, list[str]]]:
    """word → (entries using it, [linked entry paths]) over every subject page."""
    out: dict[str, tuple[int, list[str]]] = {}
    for p in subject_pages(st):
        page = read(st, p)
        for word, df, rest in _WORD_LINE.findall(page):
            assert word not in out, f"{word} listed twice"
            targets = [t for _lab, t in lines("- " + rest.replace(", [", "\n- ["), p)]
            out[word] = (int(df.replace(",", "")), targets)
    return out


def walk(st, word: str) -> tuple[list[str] | None, int]:
    """From the master INDEX.md's ``subjects`` line down the ranges ``lo … hi`` holding ``word``."""
    page_path, reads = "/INDEX.md", 0
    for _ in range(10):
        page = read(st, page_path)
        for w, _df, rest in _WORD_LINE.findall(page):
            if w == word:
                return [t for _lab, t in lines("- " + rest.replace(", [", "\n- ["), page_path)], reads
        nxt = None
        for lab, target in lines(page, page_path):
            if ".subjects" not in target or lab.startswith("↑"):
                continue
            lo, _sep, hi = lab.partition(" … ")
            if lab == subjects.MASTER_LABEL or lo.lower() <= word <= (hi or lo).lower() + "\uffff":
                nxt = target if target.endswith(".md") else target + "/INDEX.md"
                break
        if nxt is None:
            return None, reads
        page_path, reads = nxt, reads + 1
    return None, reads


@pytest.mark.parametrize("bound", [300, 700, 2000])
def test_every_page_bounded_every_word_reachable(tmp_path, bound):
    st, tree, idx = make(tmp_path, bound)
    vocab = _words(900)
    rnd = random.Random(bound)
    for k in range(60):  # each word in 1–4 of 60 notes: all within the share kept
        body = " ".join(rnd.sample(vocab, 45))
        tree.write_bytes(f"notes/n{k:02d}.md", f"# Note {k}\n\n{body}\n".encode())
    idx.run_once()
    pages = subject_pages(st)
    assert len(pages) > 3
    for p in pages:
        assert count_tokens(read(st, p)) <= bound, p
    assert count_tokens(read(st, "/INDEX.md")) <= bound
    got = listed(st)
    texts = [set(read(st, f"/notes/n{k:02d}.md").split()) for k in range(60)]
    dfs = {w: sum(1 for x in texts if w in x) for w in vocab}
    kept = {w for w, df in dfs.items() if 0 < df <= max(subjects.MIN_KEEP, subjects.MAX_SHARE * 60)}
    assert set(got) <= kept and len(got) > (10 if bound < 500 else 50)
    if bound == 2000:  # room for all: every kept word once, nothing else
        assert set(got) == kept
    with st.read() as t:
        assert t.section_meta(S.SUBJECTS_INO).toc_levels <= subjects.MAX_LEVELS
    assert list(got) == sorted(got)  # A–Z across pages
    for w in list(got)[::37]:
        targets, _reads = walk(st, w)
        assert targets == got[w][1]
        for t in targets:
            assert w in read(st, t).split()  # a linked entry uses the word
            LibraryView(st).getattr(os.fsencode(t))  # the link opens
        assert got[w][0] == dfs[w] and len(targets) == min(dfs[w], subjects.LINKS)
    assert check(st).problems == []


def test_pruning_and_ranking(tmp_path):
    st, tree, idx = make(tmp_path)
    for k in range(40):
        extra = "zorbulent zorbulent zorbulent" if k == 7 else ("zorbulent" if k in (3, 9) else "")
        tree.write_bytes(
            f"d/e{k:02d}.md", f"# E{k}\n\ncommonword the and 12345 abc_def x{k}y {extra} quillish\n".encode()
        )
    idx.run_once()
    got = listed(st)
    assert "commonword" not in got and "quillish" not in got  # in every entry: tells nothing apart
    assert "the" not in got and "12345" not in got and "abc_def" not in got and "x7y" not in got
    df, targets = got["zorbulent"]
    assert df == 3 and targets[0] == "/d/e07.md"  # where it weighs most first
    master = read(st, "/INDEX.md")
    assert "[subjects](.subjects/INDEX.md) — subject index:" in master


def test_rebuilt_after_enough_changes_and_dropped_by_check(tmp_path):
    st, tree, idx = make(tmp_path)
    for k in range(30):
        tree.write_bytes(f"d/e{k:02d}.md", f"# E{k}\n\nword{'abcdefghij'[k % 10]}x plain\n".encode())
    idx.run_once()
    assert "frobnicate" not in listed(st)
    tree.write_bytes("d/e01.md", b"# E1\n\nfrobnicate\n")  # 1 of 30 changed: below the share, waits
    idx.run_once()
    assert "frobnicate" not in listed(st)
    for k in range(2, 2 + int(30 * subjects.REBUILD_SHARE)):  # enough changes now: rebuilt
        tree.write_bytes(f"d/e{k:02d}.md", f"# E{k}\n\n{'frobnicate' if k == 2 else 'other'}\n".encode())
    idx.run_once()
    df, targets = listed(st)["frobnicate"]
    assert df == 2 and sorted(targets) == ["/d/e01.md", "/d/e02.md"]
    st.run_write(lambda t: t.kv.put(S.DB_META, S.u64(S.SUBJECTS_INO), b"\xffjunk"))
    rep = check(st)
    assert [p.code for p in rep.problems] == ["I8"] and "subject index" in rep.problems[0].message
    check(st, repair=True)
    assert check(st).problems == []
    with pytest.raises(NotFound):
        read(st, "/.subjects/INDEX.md")
    idx.run_once(full=True)  # the next full pass (or process start) rebuilds it
    assert "frobnicate" in listed(st)
