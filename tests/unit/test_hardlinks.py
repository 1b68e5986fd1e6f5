"""Hard links in the index: every link of a file is a name ``find`` answers (the ``names`` table, the term index),
unlinking one keeps the others findable, renaming one moves only that name, each directory's TOC lists its
link, incremental passes and a full rebuild give the same rows, and ``check`` judges the ``names`` table
(``N1``). Real stores, the real indexer, links made through the view (``link(2)``).

Before, the ``names`` table and the term index knew an inode by one name: a create and a link in one pass
left only the link's name (``find solo.md`` listed only ``solo-link.md``), unlinking the name the meta
record held took the file out of the term index although its other name lived on, and a link named alike
in another directory shared one ``names`` key with the first."""

from __future__ import annotations

import os

from libraryfs.daemon.indexer import Indexer
from libraryfs.fs import schema as S
from libraryfs.fs.check import check
from libraryfs.fs.store import Store
from libraryfs.fs.tree import StoreTree
from libraryfs.fs.view import LibraryView
from libraryfs.index import names, termindex
from libraryfs.index.find import find_ranked
from libraryfs.layout import term_index_path


def make(libdir):
    st = Store(libdir)
    return st, StoreTree(st), LibraryView(st), Indexer(str(libdir), store=st)


def found(st: Store, term: str) -> list[bytes]:
    """``libraryfs find``'s paths of entries for ``term`` (the term index and the ``names`` table)."""
    db = termindex.connect(term_index_path(st.libdir), readonly=True)
    try:
        with st.read() as t:
            return [m.path for m in find_ranked(t, db, term).matches if m.kind == "entry"]
    finally:
        db.close()


def exact(st: Store, name: bytes) -> list[bytes]:
    """The paths the ``names`` table gives for the exact name ``name`` (confirmed by the live dirent)."""
    from libraryfs.index.find import entry_path

    with st.read() as t:
        return sorted(
            entry_path(t, p, n) or b"?" for ino, p, n in t.iter_names(name) if t.lookup(p, n) == ino
        )


def derived(st: Store) -> tuple[dict, dict, list]:
    """Everything the indexer derives from names: the ``names`` rows, each entry's recorded names, the term
    index's rows (inode, kind, name, hash)."""
    with st.read() as t:
        rows = dict(t.kv.range(S.DB_NAMES))
        metas = {ino: (m.name, m.parent, m.links) for ino, m in t.iter_meta() if isinstance(m, S.EntryMeta)}
    db = termindex.connect(term_index_path(st.libdir), readonly=True)
    try:
        terms = sorted(db.execute("SELECT ino, kind, name, hash FROM rows"))
    finally:
        db.close()
    return rows, metas, terms


def in_line(st: Store) -> None:
    """The store check, the ``names`` table and the term index agree with the tree."""
    assert check(st).problems == []
    assert names.verify(st) == []
    with st.read() as t:
        assert names.drift(t).total == 0
    db = termindex.connect(term_index_path(st.libdir))
    try:
        assert termindex.drift(st, db).total == 0
    finally:
        db.close()


def forget_derived(st: Store) -> None:
    """Drop what the indexer derives from the names (``names`` rows, entries' recorded meta, the term index),
    so that a full pass must rebuild it from scratch."""

    def forget(t):
        t.kv.delete_range(S.DB_NAMES, b"", b"\xff" * 64)
        for ino, m in list(t.iter_meta()):
            if isinstance(m, S.EntryMeta):
                t.del_meta(ino)

    st.run_write(forget)
    os.unlink(term_index_path(st.libdir))


def test_a_file_and_its_link_made_in_one_pass_are_each_found_by_their_own_name(libdir):
    """The repro: ``echo hello > solo.md; ln solo.md solo-link.md`` before the indexer's pass. The pass saw
    both records and kept the last name only: ``find solo.md`` listed ``solo-link.md``."""
    st, tree, view, idx = make(libdir)
    tree.write_bytes("solo.md", b"hello\n")
    view.link(b"/solo.md", b"/solo-link.md")
    idx.run_once()
    assert exact(st, b"solo.md") == [b"/solo.md"]
    assert exact(st, b"solo-link.md") == [b"/solo-link.md"]
    assert found(st, "solo.md")[0] == b"/solo.md"
    assert found(st, "solo-link.md")[0] == b"/solo-link.md"
    assert sorted(found(st, "hello")) == [b"/solo-link.md", b"/solo.md"]  # a word of it: every name
    in_line(st)


def test_unlinking_either_link_keeps_the_other_findable(libdir):
    """The meta record named one link; unlinking that one dropped the file's term-index row (``find hello``
    found nothing) while the other name still held it."""
    for gone, kept in ((b"solo-link.md", b"solo.md"), (b"solo.md", b"solo-link.md")):
        d = libdir.parent / gone.decode()
        Store.create(d, {"toc_max_tokens": 2000}).close()
        st, tree, view, idx = make(d)
        tree.write_bytes("solo.md", b"hello\n")
        idx.run_once()
        view.link(b"/solo.md", b"/solo-link.md")
        idx.run_once()
        view.unlink(b"/" + gone)
        idx.run_once()
        assert exact(st, gone) == []
        assert exact(st, kept) == [b"/" + kept]
        assert found(st, "hello") == [b"/" + kept], gone
        assert found(st, kept.decode())[0] == b"/" + kept
        in_line(st)
        st.close()


def test_renaming_one_link_moves_only_that_name(libdir):
    st, tree, view, idx = make(libdir)
    tree.write_bytes("notes/solo.md", b"hello\n")
    view.link(b"/notes/solo.md", b"/notes/solo-link.md")
    idx.run_once()
    view.rename(b"/notes/solo-link.md", b"/moved.md")
    idx.run_once()
    assert exact(st, b"solo-link.md") == []
    assert exact(st, b"moved.md") == [b"/moved.md"]
    assert exact(st, b"solo.md") == [b"/notes/solo.md"]
    assert sorted(found(st, "hello")) == [b"/moved.md", b"/notes/solo.md"]
    in_line(st)


def test_links_named_alike_in_two_directories_are_two_names(libdir):
    """``a/x.md`` and its link ``b/x.md``: one ``names`` key (folded name + inode) held both, so the second
    overwrote the first, and unlinking either dropped the name of both."""
    st, tree, view, idx = make(libdir)
    tree.write_bytes("a/x.md", b"# Xenon\n\nA noble gas.\n")
    idx.run_once()
    tree.makedirs("b")
    view.link(b"/a/x.md", b"/b/x.md")
    view.link(b"/a/x.md", b"/a/X.md")  # the same folded name in the same directory: a third name
    idx.run_once()
    assert exact(st, b"x.md") == [b"/a/X.md", b"/a/x.md", b"/b/x.md"]
    assert found(st, "x.md")[:3] == [b"/a/X.md", b"/a/x.md", b"/b/x.md"]
    view.unlink(b"/a/x.md")
    view.unlink(b"/a/X.md")
    idx.run_once()
    assert exact(st, b"x.md") == [b"/b/x.md"]
    assert found(st, "xenon") == [b"/b/x.md"]
    in_line(st)


def test_each_directory_listing_a_link_shows_its_new_content(libdir):
    """A content-only write re-rendered the TOC of the directory the meta record named, not that of the
    file's other link."""
    st, tree, view, idx = make(libdir)
    tree.write_bytes("a/x.md", b"# Alpha\n\nFirst words.\n")
    tree.makedirs("b")
    view.link(b"/a/x.md", b"/b/y.md")
    idx.run_once()
    fh, _ = view.open(b"/b/y.md", os.O_WRONLY | os.O_TRUNC)
    view.write(fh, b"# Omega\n\nLast words.\n", 0)
    view.release(fh)
    idx.run_once()
    for d in (b"a", b"b"):
        fh, _ = view.open(b"/" + d + b"/INDEX.md", os.O_RDONLY)
        page = view.read(fh, 1 << 20, 0)
        view.release(fh)
        assert b"Omega" in page and b"Alpha" not in page, (d, page)
    in_line(st)


def test_an_excluded_link_is_not_a_name_and_the_last_included_one_takes_the_file_out(libdir):
    st, tree, view, idx = make(libdir)
    tree.write_bytes("pub/x.md", b"# Zephyr\n\nwind\n")
    tree.makedirs(".private")
    view.link(b"/pub/x.md", b"/.private/x.md")
    view.link(b"/pub/x.md", b"/pub/x.md~")  # an editor's backup name: hidden
    idx.run_once()
    assert exact(st, b"x.md") == [b"/pub/x.md"] and exact(st, b"x.md~") == []
    in_line(st)
    view.unlink(b"/pub/x.md")
    idx.run_once()
    assert exact(st, b"x.md") == [] and found(st, "zephyr") == []
    with st.read() as t:
        assert t.kv.count(S.DB_NAMES) == 0
        ino = t.lookup(t.lookup(S.ROOT_INO, b".private"), b"x.md")
        assert t.entry_meta(ino) is None
    in_line(st)


def test_incremental_passes_and_a_full_rebuild_give_the_same_rows(libdir):
    st, tree, view, idx = make(libdir)
    tree.write_bytes("a/one.md", b"# One\n\nfirst\n")
    tree.write_bytes("a/two.md", b"# Two\n\nsecond\n")
    tree.makedirs("b")
    idx.run_once()
    view.link(b"/a/one.md", b"/b/one.md")
    view.link(b"/a/one.md", b"/b/uno.md")
    view.link(b"/a/two.md", b"/b/two.md")
    idx.run_once()
    view.unlink(b"/a/one.md")
    view.rename(b"/b/uno.md", b"/a/eins.md")
    view.link(b"/a/two.md", b"/a/zwei.md")
    view.rename(b"/a/zwei.md", b"/b/zwei.md")
    idx.run_once()
    incremental = derived(st)
    assert len(incremental[0]) == 5  # b/one.md, a/eins.md, a/two.md, b/two.md, b/zwei.md
    in_line(st)
    idx.run_once(full=True)
    assert derived(st) == incremental

    forget_derived(st)  # from scratch: no names rows, no recorded names, no term index
    fresh = Indexer(str(libdir), store=st)
    fresh.run_once(full=True)
    assert derived(st) == incremental
    in_line(st)


def test_rows_of_the_older_format_are_rebuilt_by_the_next_full_pass_and_by_check_repair(libdir):
    """A library indexed by an earlier release has ``names`` keys without the parent and no
    ``config[names_format]``: the daemon's next pass is a full one (as for a new TOC format), which
    rebuilds them; ``check`` does not judge them meanwhile and ``check --repair`` rebuilds them too."""
    st, tree, view, idx = make(libdir)
    tree.write_bytes("solo.md", b"hello\n")
    view.link(b"/solo.md", b"/solo-link.md")
    idx.run_once()
    want = derived(st)

    def downgrade(t):
        """The rows as release 1 of the table wrote them: one per folded name and inode."""
        rows = list(t.kv.range(S.DB_NAMES))
        t.kv.delete_range(S.DB_NAMES, b"", b"\xff" * 64)
        for k, v in rows:
            t.kv.put(S.DB_NAMES, k[: k.index(b"\0") + 9], v)
        t.kv.delete(S.DB_CONFIG, S.CFG_NAMES_FORMAT)

    for rebuild in ("pass", "repair"):
        st.run_write(downgrade)
        with st.read() as t:
            assert not names.current(t)
        assert names.verify(st) == []  # not judged: the next pass rebuilds them
        assert exact(st, b"solo.md") == [b"/solo.md"]  # and find reads them meanwhile
        if rebuild == "pass":
            idx.run_once(full=True)
        else:
            assert names.verify(st, repair=True) == []
        with st.read() as t:
            assert names.current(t)
        assert derived(st) == want, rebuild
        in_line(st)


def test_check_reports_and_repairs_names_out_of_line(libdir):
    st, tree, view, idx = make(libdir)
    tree.write_bytes("solo.md", b"hello\n")
    view.link(b"/solo.md", b"/solo-link.md")
    idx.run_once()
    with st.read() as t:
        ino = t.lookup(S.ROOT_INO, b"solo.md")

    def damage(t):
        t.del_name(b"solo.md", ino, S.ROOT_INO)  # missing
        t.put_name(b"ghost.md", ino, S.ROOT_INO)  # leftover
        m = t.entry_meta(ino)
        m.links = None  # records one name only
        t.put_meta(ino, m)

    st.run_write(damage)
    found_ = names.verify(st)
    assert [f.code for f in found_] == ["N1"] and not found_[0].repaired
    assert (
        "1 missing and 1 leftover" in found_[0].message
        and "1 entries recording other names" in found_[0].message
    )
    fixed = names.verify(st, repair=True)
    assert [f.code for f in fixed] == ["N1"] and fixed[0].repaired
    assert exact(st, b"solo.md") == [b"/solo.md"] and exact(st, b"ghost.md") == []
    in_line(st)


def test_check_cli_reports_n1_and_repair_fixes_it(libdir, run_cli):
    st, tree, view, idx = make(libdir)
    tree.write_bytes("solo.md", b"hello\n")
    view.link(b"/solo.md", b"/solo-link.md")
    idx.run_once()
    with st.read() as t:
        ino = t.lookup(S.ROOT_INO, b"solo-link.md")
    st.run_write(lambda t: t.del_name(b"solo-link.md", ino, S.ROOT_INO))
    st.close()
    r = run_cli("check", str(libdir))
    assert r.returncode != 0 and "N1" in r.stdout + r.stderr, r
    run_cli("check", str(libdir), "--repair", check_rc=True)
    run_cli("check", str(libdir), check_rc=True)
    out = run_cli("find", str(libdir), "solo-link.md", check_rc=True).stdout.splitlines()
    assert out[0] == "/solo-link.md", out


def test_links_of_a_meta_record_round_trip_and_a_bad_one_is_corrupt():
    import pytest

    from libraryfs.errors import Corrupt

    m = S.EntryMeta()
    names.set_links(m, [(7, b"b.md"), (3, b"z.md"), (7, b"a.md")])
    assert (m.parent, m.name) == (3, "z.md") and m.links == [[3, "z.md"], [7, "a.md"], [7, "b.md"]]
    back = S.decode_meta(m.encode())
    assert isinstance(back, S.EntryMeta) and names.links_of(back) == [
        (3, b"z.md"),
        (7, b"a.md"),
        (7, b"b.md"),
    ]
    names.set_links(m, [(9, b"only.md")])
    assert m.links is None and b"links" not in m.encode() and names.links_of(m) == [(9, b"only.md")]
    with pytest.raises(Corrupt):
        S.decode_meta(b'{"name":"x","parent":1,"links":[[1]]}')


def files(st: Store, dirs: list[bytes]) -> list[bytes]:
    """The paths of the files and symlinks directly in ``dirs`` (``b""``: the root; others one level below)."""
    out = []
    with st.read() as t:
        for x in dirs:
            ino = S.ROOT_INO if not x else t.lookup(S.ROOT_INO, x[1:])
            out += [x + b"/" + n for n, _c, kind in t.iter_dir_typed(ino) if kind != S.S_IFDIR]
    return sorted(p for p in out if not p.endswith(b"INDEX.md"))


def test_random_link_unlink_rename_write_sequences_stay_in_line(tmp_path):
    """Seeded random sequences of link, unlink, rename (within and across directories, into and out of a
    dot-directory, over another file), exchange and content writes, with a pass every few operations: after
    each pass the ``names`` table, the recorded names and the term index agree with the tree, and a full
    rebuild from scratch gives the same rows as the incremental passes."""
    import random

    from libraryfs.errors import LibraryError

    for seed in range(6):
        d = tmp_path / f"lib{seed}"
        Store.create(d, {"toc_max_tokens": 2000}).close()
        st, tree, view, idx = make(d)
        rnd = random.Random(seed)
        dirs = [b"", b"/a", b"/b", b"/.dot"]
        for x in dirs[1:]:
            tree.makedirs(x.decode()[1:])
        for i in range(4):
            tree.write_bytes(f"a/f{i}.md", f"# File {i}\n\nword{i} shared\n".encode())
        idx.run_once()

        for step in range(40):
            have = files(st, dirs)
            new = rnd.choice(dirs) + b"/n%d.md" % rnd.randrange(8)
            op = rnd.choice(["link", "link", "unlink", "rename", "write", "exchange"])
            try:
                if op == "link" and have:
                    view.link(rnd.choice(have), new)
                elif op == "unlink" and len(have) > 1:
                    view.unlink(rnd.choice(have))
                elif op == "rename" and have:
                    view.rename(rnd.choice(have), new)
                elif op == "exchange" and len(have) > 1:
                    a, b = rnd.sample(have, 2)
                    view.rename(a, b, 2)  # RENAME_EXCHANGE
                elif op == "write" and have:
                    fh, _ = view.open(rnd.choice(have), os.O_WRONLY | os.O_TRUNC)
                    view.write(fh, b"# Edited %d\n\nstep%d shared\n" % (step, step), 0)
                    view.release(fh)
            except LibraryError:
                pass  # e.g. the new name exists
            if step % 3 == 2:
                idx.run_once()
                in_line(st)
                for p in files(st, dirs[:3]):  # every name outside the dot-directory is found as itself
                    assert p in exact(st, p.rsplit(b"/", 1)[1]), (seed, step, p)
        idx.run_once()
        in_line(st)
        incremental = derived(st)

        forget_derived(st)
        Indexer(str(d), store=st).run_once(full=True)
        assert derived(st) == incremental, seed
        st.close()


def test_the_catalogue_links_a_defined_name_to_a_live_name_of_the_entry(libdir):
    """The name catalogue has one line per defined name, linking one path of the entry that defines it: the
    entry's first name. Unlinking that name moves the line to the name left (the record's first name
    changed: its leaf is re-rendered)."""
    st, tree, view, idx = make(libdir)
    doc = b"json\n====\n\n.. module:: json\n\n.. function:: dumps(obj)\n\n   Serialize obj.\n"
    tree.write_bytes("a/json.rst.txt", doc)
    tree.makedirs("b")
    view.link(b"/a/json.rst.txt", b"/b/json-copy.rst.txt")
    idx.run_once()

    def catalogue_text() -> bytes:
        fh, _ = view.open(b"/.catalogue/INDEX.md", os.O_RDONLY)
        try:
            return view.read(fh, 1 << 20, 0)
        finally:
            view.release(fh)

    page = catalogue_text()
    assert b"a/json.rst.txt" in page and b"json-copy" not in page, page
    view.unlink(b"/a/json.rst.txt")
    idx.run_once()
    page = catalogue_text()
    assert b"b/json-copy.rst.txt" in page and b"a/json.rst.txt" not in page, page
    in_line(st)


def test_names_of_the_longest_length_are_indexed(libdir):
    """A ``names`` key holding the whole name after the folded one exceeded LMDB's 511-byte key limit for a
    255-byte name (MDB_BAD_VALSIZE: every pass failed); the key holds a digest of the name instead."""
    st, tree, view, idx = make(libdir)
    long_a, long_b = "a" * 252 + ".md", "B" * 252 + ".md"
    tree.write_bytes(long_a, b"# Long\n\nlengthy\n")
    view.link(b"/" + long_a.encode(), b"/" + long_b.encode())
    idx.run_once()
    assert exact(st, long_a.encode()) == [b"/" + long_a.encode()]
    assert exact(st, long_b.lower().encode()) == [b"/" + long_b.encode()]
    in_line(st)
