"""fsck: each test breaks one invariant and asserts that exactly that check notices, then repairs it."""

import os

import pytest

from libraryfs.fs import schema as S
from libraryfs.fs.check import check
from libraryfs.fs.store import Store
from libraryfs.fs.tree import StoreTree


@pytest.fixture
def populated(libdir):
    st = Store(libdir)
    tree = StoreTree(st)
    tree.write_bytes("a/x.md", b"hello")
    tree.write_bytes("a/b/y.md", os.urandom(70_000))
    assert check(st).problems == []
    yield st
    st.close()


def ino_of(st, path: bytes) -> int:
    with st.read() as t:
        ino = S.ROOT_INO
        for comp in path.strip(b"/").split(b"/"):
            ino = t.lookup(ino, comp)
        return ino


def codes(st):
    return sorted({p.code for p in check(st).problems})


def breaks_then_repairs(st, code):
    assert codes(st) == [code]
    rep = check(st, repair=True)
    assert rep.repaired >= 1 and rep.clean
    assert check(st).problems == []


def test_dangling_dirent(populated):
    st = populated
    a = ino_of(st, b"/a")
    st.run_write(lambda t: t.kv.put(S.DB_DIRENTS, S.dirent_key(a, b"ghost"), S.u64(99999)))
    breaks_then_repairs(st, "I2")


def test_wrong_nlink(populated):
    st = populated
    x = ino_of(st, b"/a/x.md")

    def bump(t):
        n = t.inode(x)
        n.nlink = 5
        t.put_inode(n)

    st.run_write(bump)
    breaks_then_repairs(st, "I4")


def test_orphan_inode(populated):
    st = populated
    st.run_write(lambda t: t.put_inode(S.Inode(t.alloc_ino(), S.S_IFREG | 0o644, nlink=0)))
    breaks_then_repairs(st, "I4")


def test_chunk_past_eof(populated):
    st = populated
    x = ino_of(st, b"/a/x.md")
    st.run_write(lambda t: t.kv.put(S.DB_DATA, S.data_key(x, 7), b"junk"))
    breaks_then_repairs(st, "I5")


def test_blocks_disagree_with_the_chunks(populated):
    st = populated
    y = ino_of(st, b"/a/b/y.md")

    def bump(t):
        node = t.inode(y)
        assert node.blocks == 128 + 16  # 65,536 + 4,464 bytes in 4 KiB pages
        node.blocks = 1
        t.put_inode(node)

    st.run_write(bump)
    breaks_then_repairs(st, "I9")
    with st.read() as t:
        assert t.inode(y).blocks == 144


def test_next_ino_too_low(populated):
    st = populated
    st.run_write(lambda t: t.put_cfg(S.CFG_NEXT_INO, S.u64(2)))
    breaks_then_repairs(st, "I6")


def test_dirparent_mismatch(populated):
    st = populated
    b = ino_of(st, b"/a/b")
    st.run_write(lambda t: t.kv.put(S.DB_DIRPARENT, S.u64(b), S.u64(S.ROOT_INO) + b"wrong"))
    breaks_then_repairs(st, "I3")


def test_toc_of_missing_directory(populated):
    st = populated
    st.run_write(lambda t: t.put_toc_pages(123456, [b"# stale"]))
    breaks_then_repairs(st, "I8")


def test_a_directory_whose_dirent_was_lost_is_reconnected_under_lost_found_with_everything_below(populated):
    st = populated
    a, y = ino_of(st, b"/a"), ino_of(st, b"/a/b/y.md")
    body = StoreTree(st).read_bytes("a/b/y.md")
    st.run_write(lambda t: t.del_dirent(S.ROOT_INO, b"a"))
    report = check(st)
    # one finding for the directory (none per child), and the root's link count that counted it
    assert [(p.code, p.ino) for p in report.problems] == [("I4", a), ("I4", S.ROOT_INO)], report.problems
    assert not report.clean
    rep = check(st, repair=True)
    assert rep.clean, rep.problems
    assert f"reconnected as /lost+found/#{a}" in " ".join(p.message for p in rep.problems)
    assert check(st).problems == []
    tree = StoreTree(st)
    assert tree.read_bytes(f"lost+found/#{a}/x.md") == b"hello"
    assert (
        tree.read_bytes(f"lost+found/#{a}/b/y.md") == body
        and ino_of(st, f"/lost+found/#{a}/b/y.md".encode()) == y
    )
    with st.read() as t:
        lf = t.inode(ino_of(st, b"/lost+found"))
        assert lf.mode & 0o777 == 0o700 and lf.nlink == 3  # ., its entry in /, #a's ..
        assert t.inode(S.ROOT_INO).nlink == 3  # / holds lost+found only now


def test_a_file_whose_dirent_was_lost_is_reconnected_and_lost_found_is_reused(populated):
    st = populated
    x, y = ino_of(st, b"/a/x.md"), ino_of(st, b"/a/b/y.md")
    st.run_write(lambda t: t.del_dirent(ino_of(st, b"/a"), b"x.md"))
    breaks_then_repairs(st, "I4")
    assert StoreTree(st).read_bytes(f"lost+found/#{x}") == b"hello"
    lf = ino_of(st, b"/lost+found")
    st.run_write(lambda t: t.del_dirent(ino_of(st, b"/a/b"), b"y.md"))
    breaks_then_repairs(st, "I4")
    assert ino_of(st, b"/lost+found") == lf and ino_of(st, f"/lost+found/#{y}".encode()) == y


def test_lost_found_takes_a_free_name_beside_a_file_called_lost_found(populated):
    st = populated
    StoreTree(st).write_bytes("lost+found", b"mine")
    x = ino_of(st, b"/a/x.md")
    st.run_write(lambda t: t.del_dirent(ino_of(st, b"/a"), b"x.md"))
    breaks_then_repairs(st, "I4")
    tree = StoreTree(st)
    assert tree.read_bytes("lost+found") == b"mine"
    assert tree.read_bytes(f"lost+found.1/#{x}") == b"hello"
