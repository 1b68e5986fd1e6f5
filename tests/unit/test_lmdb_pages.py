"""The store's data file read with plain reads (meta pages, page walk, salvage) and the isolated reader."""

import os
import signal
import struct

import pytest
from helpers.wait import wait_until

from libraryfs.errors import Damaged, NotFound
from libraryfs.fs import lmdb_pages
from libraryfs.fs import schema as S
from libraryfs.fs.check import check
from libraryfs.fs.isolated import run_isolated
from libraryfs.fs.salvage import salvage
from libraryfs.fs.store import Store
from libraryfs.fs.tree import StoreTree


@pytest.fixture
def filled(libdir):
    st = Store(libdir)
    tree = StoreTree(st)
    for i in range(40):
        tree.write_bytes(f"d{i % 4}/f{i}.md", os.urandom(50 + i * 2000))
    st.close()
    return str(libdir)


def tables(libdir) -> dict:
    """Every record of every core table, read through LMDB (the independent source)."""
    st = Store(libdir, readonly=True)
    try:
        with st.read() as t:
            return {name: list(t.kv.range(name)) for name in S.CORE_DBS}
    finally:
        st.close()


def test_walk_reaches_every_record_lmdb_has(filled):
    seen: dict[str, int] = {}
    report = lmdb_pages.walk(
        os.path.join(filled, "store"), lambda t, k, v: seen.__setitem__(t, seen.get(t, 0) + 1)
    )
    assert report.clean, report.problems
    want = {name.decode(): len(rows) for name, rows in tables(filled).items() if rows}
    assert {t: n for t, n in seen.items() if n} == want


def test_a_bad_meta_page_is_damage_before_lmdb_opens(filled):
    path = os.path.join(filled, "store", "data.mdb")
    psize = lmdb_pages.check_meta(os.path.join(filled, "store")).page_size
    with open(path, "r+b") as f:
        f.seek(psize + 16)
        f.write(struct.pack("<I", 0x12345678))  # meta page 1's magic number
    with pytest.raises(Damaged, match="meta page 1 has no LMDB magic"):
        Store(filled, readonly=True)


def test_salvage_of_an_intact_store_is_byte_exact(filled):
    before = tables(filled)
    report = salvage(filled)
    assert report.problems == [] and os.path.isdir(report.kept)
    assert tables(filled) == before
    st = Store(filled)
    try:
        assert check(st).problems == []
    finally:
        st.close()


def test_a_crashing_reader_is_a_report_not_a_crash():
    with pytest.raises(Damaged, match="SIGABRT"):
        run_isolated(os.abort)
    with pytest.raises(Damaged, match="SIGSEGV"):
        run_isolated(lambda: os.kill(os.getpid(), signal.SIGSEGV))
    assert run_isolated(lambda: {"answer": 42}) == {"answer": 42}
    with pytest.raises(NotFound, match="gone"):
        run_isolated(lambda: (_ for _ in ()).throw(NotFound("gone")))


def remembered(store: str, record: str) -> None:
    """Call ``verify_since`` until it skips the walk: it has remembered the data file's state (once the
    file's last change is :data:`lmdb_pages.SETTLE_S` old; every call before walks)."""
    wait_until(
        lambda: lmdb_pages.verify_since(store, record) is None, 60, "verify_since to remember the state"
    )


def test_verify_since_walks_again_after_any_write_to_the_file(filled, tmp_path):
    """``status``'s page walk is skipped only while the data file is in the state the last clean walk saw;
    pages overwritten behind LMDB's back (its txnid and meta pages unchanged, even with the mtime put back)
    are found."""
    store, record = os.path.join(filled, "store"), str(tmp_path / "verified.json")
    remembered(store, record)
    path = lmdb_pages.data_path(store)
    before = os.stat(path)
    txnid = lmdb_pages.check_meta(store).txnid
    npages = before.st_size // 4096
    with open(path, "r+b") as f:  # every page after the meta pages, with zeros: no reachable page survives
        for pgno in range(2, npages):
            f.seek(pgno * 4096)
            f.write(bytes(4096))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert lmdb_pages.check_meta(store).txnid == txnid and os.path.getsize(path) == before.st_size
    with pytest.raises(Damaged, match="damaged"):
        lmdb_pages.verify_since(store, record)


def test_verify_since_remembers_no_state_younger_than_the_timestamp_resolution(filled, tmp_path):
    """A data file written less than ``settle_s`` ago is walked every time: a second write within the same
    ctime tick would leave the remembered state as it was. ``settle_s`` is set to an hour so the fixture's
    store is young however slow the machine; the same store is remembered once the window is passed."""
    store, record = os.path.join(filled, "store"), str(tmp_path / "verified.json")
    for _ in range(2):
        report = lmdb_pages.verify_since(store, record, settle_s=3600)
        assert report is not None and report.clean
        assert not os.path.exists(record)
    assert lmdb_pages.verify_since(store, record, settle_s=0) is not None  # old enough: walked, remembered
    assert os.path.exists(record)
    assert lmdb_pages.verify_since(store, record, settle_s=0) is None


def test_verify_since_walks_again_after_a_commit(filled, tmp_path):
    store, record = os.path.join(filled, "store"), str(tmp_path / "verified.json")
    remembered(store, record)
    st = Store(filled)
    StoreTree(st).write_bytes("new.md", b"x")
    st.close()
    assert lmdb_pages.verify_since(store, record) is not None  # a new txnid: walked
    remembered(store, record)


@pytest.mark.parametrize("pages", [1, 12])
def test_a_page_past_the_end_of_a_cut_file_is_said_plainly(filled, pages):
    """A fresh-user trial read ``page 66 ((free)): page number outside 2..0`` from `check` on a cut file:
    doubled parentheses and a backwards range. The finding names the tree in words and says where the file
    ends."""
    from libraryfs.fs.check import describe_damage
    from libraryfs.fs.lmdb_backend import store_path

    path = lmdb_pages.data_path(store_path(filled))
    meta = lmdb_pages.walk(store_path(filled)).meta
    cut = [
        (r, w)
        for r, w in ((meta.free_root, "free-page list"), (meta.main_root, "list of tables"))
        if r >= pages
    ]
    assert meta is not None and cut  # the cut leaves a tree's root past the end
    os.truncate(path, pages * meta.page_size)
    report = lmdb_pages.walk(store_path(filled))
    text = describe_damage(report)
    assert "((" not in text and "2..0" not in text and "outside 2.." not in text, text
    held = "page 0 only" if pages == 1 else f"pages 0 to {pages - 1}"
    for root, words in cut:
        want = f"page {root} of LMDB's {words}: past the end of the file, which holds {held}"
        assert f"{want} ({pages * meta.page_size:,} bytes)" in report.problems, text
