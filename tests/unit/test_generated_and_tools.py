"""Where generated TOC names exist and who owns ``INDEX.md`` (issue 14; docs/posix.md "Generated files and
tools"), without a mount: :class:`LibraryView` and the indexer over a real store, ending with ``check``.
The same behaviour through the kernel and real tools: tests/mount/test_real_tools.py."""

from __future__ import annotations

import os

import pytest
from helpers.view import GID, UID, cat, mkfile, names

from libraryfs.daemon.indexer import Indexer
from libraryfs.errors import NotFound
from libraryfs.fs import schema as S
from libraryfs.fs.exclude import Placement, TocExclusion
from libraryfs.fs.store import Store, Txn
from libraryfs.fs.view import LibraryView
from libraryfs.index.toc import links


@pytest.fixture
def v(store):
    return LibraryView(store)


def index(store: Store) -> Indexer:
    """One full indexing pass (settle 0: every directory is rendered at once)."""
    ix = Indexer(store.libdir, store=store, settle_s=0)
    ix.run_once(full=True)
    return ix


def ino_of(store: Store, path: bytes) -> int:
    with store.read() as t:
        ino = S.ROOT_INO
        for name in path.strip(b"/").split(b"/"):
            ino = t.lookup(ino, name)
        return ino


def exists(v: LibraryView, path: bytes) -> bool:
    try:
        v.getattr(path)
        return True
    except NotFound:
        return False


def mkdirs(v: LibraryView, *paths: bytes) -> None:
    for p in paths:
        v.mkdir(p, 0o755, UID, GID)


# ---- exclusion: dot-directories and .gitignore, git's precedence ---------------------------------------------
def test_gitignore_rules_follow_git(v, store):
    mkdirs(v, b"/p", b"/p/build", b"/p/keep", b"/p/keep/build", b"/p/sub", b"/p/sub/out", b"/p/.hidden")
    mkdirs(v, b"/p/sub/out/deep", b"/p/logs", b"/p/logs/important")
    mkfile(v, b"/p/.gitignore", b"# comment\nbuild/\nout/\nlogs/\n!logs/important/\n")
    mkfile(v, b"/p/keep/.gitignore", b"!build/\n")  # a deeper file overrides a shallower one
    index(store)
    ex = TocExclusion()
    with store.read() as t:
        verdict = {
            p: ex.excluded(t, ino_of(store, p))
            for p in (
                b"/p",
                b"/p/build",
                b"/p/keep",
                b"/p/keep/build",
                b"/p/sub",
                b"/p/sub/out",
                b"/p/sub/out/deep",
                b"/p/.hidden",
                b"/p/logs",
                b"/p/logs/important",
            )
        }
    assert verdict == {
        b"/p": False,
        b"/p/build": True,
        b"/p/keep": False,
        b"/p/keep/build": False,  # re-included by the deeper file
        b"/p/sub": False,
        b"/p/sub/out": True,  # a pattern without a leading slash matches at any depth
        b"/p/sub/out/deep": True,  # below an ignored directory
        b"/p/.hidden": True,  # a dot-directory
        b"/p/logs": True,
        b"/p/logs/important": True,  # git: nothing below an excluded directory can be re-included
    }
    assert not exists(v, b"/p/build/INDEX.md") and exists(v, b"/p/keep/build/INDEX.md")
    # an edit of the ignore file applies at the next lookup (cache keyed by inode, mtime, size)
    fh = v.open(b"/p/.gitignore", os.O_WRONLY | os.O_TRUNC)[0]
    v.write(fh, b"sub/\n", 0)
    v.release(fh)
    index(store)
    assert exists(v, b"/p/build/INDEX.md") and not exists(v, b"/p/sub/INDEX.md")


def test_a_chain_says_what_classify_and_child_filter_say(v, store):
    """:meth:`TocExclusion.chain` (each directory from its parent's, for one indexer pass) gives every
    directory the placement, path and entry verdicts that :meth:`~TocExclusion.classify`, ``path_of`` and
    :meth:`~TocExclusion.child_filter` give from the root: dot-paths, ignore files at several depths with
    re-includes, git work trees nested in ignored and plain directories."""
    mkdirs(v, b"/p", b"/p/build", b"/p/keep", b"/p/keep/build", b"/p/sub", b"/p/sub/out", b"/p/.hidden")
    mkdirs(v, b"/p/sub/out/deep", b"/p/logs", b"/p/logs/important", b"/p/.hidden/x", b"/w", b"/w/.git")
    mkdirs(v, b"/w/src", b"/w/src/gen", b"/w/docs", b"/p/keep/repo", b"/p/keep/repo/.git", b"/p/keep/repo/a")
    mkdirs(v, b"/p/build/repo", b"/p/build/repo/.git", b"/p/build/repo/b")
    mkfile(v, b"/p/.gitignore", b"build/\nout/\nlogs/\n!logs/important/\n*.log\n")
    mkfile(v, b"/p/keep/.gitignore", b"!build/\n")
    mkfile(v, b"/w/.gitignore", b"gen/\n/docs/\n")
    mkfile(v, b"/w/src/.gitignore", b"*.tmp\n!keep.tmp\n")
    for f in (b"/p/a.log", b"/w/src/x.tmp", b"/w/src/keep.tmp", b"/p/keep/build/b.log", b"/w/src/gen/y.c"):
        mkfile(v, f, b"x\n")
    ex, memo = TocExclusion(), {}
    with store.read() as t:
        dirs = [S.ROOT_INO]
        for d in dirs:  # every directory, parents first
            dirs += [c for _n, c in t.iter_dir(d) if t.inode(c).is_dir]
        for d in reversed(dirs):  # deepest first, as a pass renders: the chains fill in from below
            path = t.path_of(d)
            chain = ex.chain(t, d, memo)
            assert (chain.path, chain.place) == (path, ex.classify(t, d)), path
            verdict = ex.child_filter(t, path)
            for name, c in t.iter_dir(d):
                is_dir = t.inode(c).is_dir
                assert chain.ignored(name, is_dir) == verdict(name, is_dir), (path, name)
    assert memo[ino_of(store, b"/w/src")].place == Placement(False, True)  # a work tree, not excluded
    assert memo[ino_of(store, b"/p/build/repo/b")].place.excluded


def test_a_change_deep_down_costs_each_ancestors_toc_a_few_lookups(v, store, monkeypatch):
    """A new file d directories down re-renders the d TOCs above it. Each render classified its directory by
    walking every ancestor again (exclusion, ignore files, its path): O(d²) store lookups per pass, 404,207
    at d = 400 (3.9 s; new-user trial: a pass of 19 s at d ≈ 1,700). Built from the parent's, each costs a
    few (:meth:`TocExclusion.chain`)."""
    depth = 300
    path = b""
    for _ in range(depth):
        path += b"/d"
        v.mkdir(path, 0o755, UID, GID)
    mkfile(v, path + b"/a.md", b"# A\n\nfirst\n")
    ix = index(store)
    mkfile(v, path + b"/b.md", b"# B\n\nsecond\n")
    calls = {"n": 0}
    lookup, dirparent = Txn.lookup, Txn.dirparent

    def counted(f):
        def call(self, *a):
            calls["n"] += 1
            return f(self, *a)

        return call

    monkeypatch.setattr(Txn, "lookup", counted(lookup))
    monkeypatch.setattr(Txn, "dirparent", counted(dirparent))
    rep = ix.run_once()
    assert rep.dirs_rendered == depth + 1
    assert calls["n"] < 20 * (depth + 1), calls  # 20 per rendered TOC; it was ~1,000 at this depth
    assert b"b.md" in cat(v, path + b"/INDEX.md")


def test_excluded_directories_have_no_generated_names_and_the_indexer_skips_them(v, store):
    mkdirs(v, b"/r", b"/r/.git", b"/r/.git/refs", b"/r/build", b"/r/notes")
    mkfile(v, b"/r/.gitignore", b"build/\n*.log\n")
    mkfile(v, b"/r/.git/refs/HEAD", b"ref: refs/heads/main\n")
    mkfile(v, b"/r/build/out.o", b"\x00obj")
    mkfile(v, b"/r/notes/plan.md", b"# Plan\n")
    mkfile(v, b"/r/run.log", b"noise\n")
    # inside excluded directories INDEX.md and .index are ordinary names
    mkfile(v, b"/r/.git/refs/INDEX.md", b"a ref named INDEX.md\n")
    mkdirs(v, b"/r/build/.index")
    assert cat(v, b"/r/.git/refs/INDEX.md") == b"a ref named INDEX.md\n"
    assert not exists(v, b"/r/.git/INDEX.md") and not exists(v, b"/r/build/INDEX.md")
    ix = index(store)
    with store.read() as t:
        for p in (b"/r/.git", b"/r/.git/refs", b"/r/build"):
            assert t.toc_page(ino_of(store, p), 0) is None, p  # never computed
        assert t.entry_meta(ino_of(store, b"/r/.git/refs/HEAD")) is None  # never hashed or summarised
        assert t.entry_meta(ino_of(store, b"/r/build/out.o")) is None
    assert ix.last_report.dirs_rendered == 3  # /, /r, /r/notes
    # /r is a git work tree: page 0 is .index/INDEX.md, without the ignored entries
    assert not exists(v, b"/r/INDEX.md")
    page = cat(v, b"/r/.index/INDEX.md")
    assert set(links(page)) == {b"../notes/.index/INDEX.md"}
    assert b"r/.index/INDEX.md" in links(cat(v, b"/INDEX.md"))


# ---- INDEX.md is the user's when the user wants it ----------------------------------------------------------------
def test_a_users_index_md_wins_and_removing_it_keeps_the_name_free(v, store):
    mkdirs(v, b"/d")
    mkfile(v, b"/d/a.md", b"# A\n")
    index(store)
    generated = cat(v, b"/d/INDEX.md")
    assert b"a.md" in links(generated)
    mkfile(v, b"/d/INDEX.md", b"# mine\n")  # O_CREAT where only the generated one is: the user's wins
    assert cat(v, b"/d/INDEX.md") == b"# mine\n" and b"INDEX.md" in names(v, b"/d")
    index(store)
    alias = cat(v, b"/d/.index/INDEX.md")  # the TOC moved, links rendered for .index/
    assert set(links(alias)) == {b"../INDEX.md", b"../a.md"}
    assert b"d/.index/INDEX.md" in links(cat(v, b"/INDEX.md"))
    v.unlink(b"/d/INDEX.md")
    assert not exists(v, b"/d/INDEX.md")  # claimed: absent, as on any filesystem
    index(store)
    assert set(links(cat(v, b"/d/.index/INDEX.md"))) == {b"../a.md"}


def test_unlinking_the_generated_index_md_then_creating_with_o_excl(v, store):
    """What tar x and git checkout do: unlink, then open(O_CREAT|O_EXCL)."""
    mkdirs(v, b"/d")
    index(store)
    assert exists(v, b"/d/INDEX.md")
    v.unlink(b"/d/INDEX.md")
    assert not exists(v, b"/d/INDEX.md")
    fh = v.create(b"/d/INDEX.md", 0o644, os.O_WRONLY | os.O_CREAT | os.O_EXCL, UID, GID)
    v.write(fh, b"from the archive\n", 0)
    v.release(fh)
    assert cat(v, b"/d/INDEX.md") == b"from the archive\n"


def test_writing_the_generated_index_md_makes_it_the_users(v, store):
    mkdirs(v, b"/d", b"/e")
    index(store)
    generated = cat(v, b"/e/INDEX.md")
    fh, direct = v.open(b"/d/INDEX.md", os.O_WRONLY | os.O_TRUNC)  # `echo … > INDEX.md`
    v.write(fh, b"# notes\n", 0)
    v.release(fh)
    assert cat(v, b"/d/INDEX.md") == b"# notes\n" and direct
    fh, _ = v.open(b"/e/INDEX.md", os.O_WRONLY | os.O_APPEND)  # `echo … >> INDEX.md`: keeps the page
    v.write(fh, b"- my line\n", len(generated))
    v.release(fh)
    assert cat(v, b"/e/INDEX.md") == generated + b"- my line\n"


def test_a_copy_of_the_generated_page_is_absorbed(v, store):
    mkdirs(v, b"/d")
    mkfile(v, b"/d/a.md", b"# A\n")
    index(store)
    v.unlink(b"/d/INDEX.md")
    index(store)
    page = cat(v, b"/d/.index/INDEX.md")
    mkfile(v, b"/d/INDEX.md", page)  # cp .index/INDEX.md INDEX.md: identical bytes, absorbed at close
    assert b"INDEX.md" not in names(v, b"/d") and cat(v, b"/d/INDEX.md").startswith(b"<!-- libraryfs toc:")
    index(store)
    assert set(links(cat(v, b"/d/INDEX.md"))) == {b"a.md"} and not exists(v, b"/d/.index")
    # the same through a rename (rsync writes a temporary file, then renames it onto the name)
    mkfile(v, b"/d/.INDEX.md.tmp", cat(v, b"/d/INDEX.md"))
    v.rename(b"/d/.INDEX.md.tmp", b"/d/INDEX.md")
    assert names(v, b"/d")[2:] == [b"a.md"] and exists(v, b"/d/INDEX.md")
    # a different INDEX.md is kept, byte-exact
    mkfile(v, b"/d/.tmp", b"# other\n")
    v.rename(b"/d/.tmp", b"/d/INDEX.md")
    assert cat(v, b"/d/INDEX.md") == b"# other\n"


def test_a_new_directory_has_no_index_md_until_it_settles(v, store):
    mkdirs(v, b"/new")
    mkfile(v, b"/new/a.md", b"# A\n")
    assert not exists(v, b"/new/INDEX.md")  # being filled: a copy may still create its own INDEX.md
    fh = v.create(b"/new/INDEX.md", 0o644, os.O_WRONLY | os.O_CREAT | os.O_EXCL, UID, GID)
    v.release(fh)
    ix = Indexer(store.libdir, store=store, settle_s=60)
    ix.run_once(full=True, settle=True)
    assert ino_of(store, b"/new") in ix._deferred and ix.state == "settling"
    with store.read() as t:
        assert t.toc_page(ino_of(store, b"/new"), 0) is None
    index(store)
    assert cat(v, b"/new/INDEX.md") == b""  # the user's (empty) file
    # a directory removed (or moved into a dot-directory) while it settles does not keep the indexer busy
    mkdirs(v, b"/gone", b"/hide")
    ix.run_once(settle=True)
    assert {ino_of(store, b"/gone"), ino_of(store, b"/hide")} <= ix._deferred
    v.rmdir(b"/gone")
    v.rename(b"/hide", b"/.hidden")
    ix.run_once(settle=True)
    assert ix._deferred == set() and ix.state == "idle"


def test_the_master_pages_links_to_the_subject_and_name_indexes_work_when_the_user_owns_the_root_index(
    v, store
):
    """With the root's ``INDEX.md`` the user's, the master page is ``/.index/INDEX.md``: its lines to
    ``.subjects/`` and ``.catalogue/`` were left root-relative (``.subjects/INDEX.md``, a dead link from
    ``.index/``) while every entry's was rewritten to ``../``."""
    mkdirs(v, b"/notes")
    mkfile(v, b"/notes/kernel.py", b"def schedule_tasks():\n    '''Pick the next process to run.'''\n")
    mkfile(v, b"/notes/fuse.md", b"# FUSE\n\nFilesystems in user space talk to the kernel scheduler.\n")
    index(store)
    master = links(cat(v, b"/INDEX.md"))
    assert b".subjects/INDEX.md" in master and b".catalogue/INDEX.md" in master  # both lines are there
    mkfile(v, b"/INDEX.md", b"my own index\n")
    index(store)
    page = links(cat(v, b"/.index/INDEX.md"))
    assert b"../.subjects/INDEX.md" in page and b"../.catalogue/INDEX.md" in page
    for lk in page:  # every link resolves from /.index/
        target = os.path.normpath(os.path.join(b"/.index", lk))
        assert exists(v, target), lk
