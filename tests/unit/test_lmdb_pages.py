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
from libraryfs.fs.isolated import run_isolated, start_isolated
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
    wait = start_isolated(lambda: os.getpid())  # the child runs while this process goes on
    assert wait() not in (os.getpid(), None)
    wait = start_isolated(os.abort)
    with pytest.raises(Damaged, match="SIGABRT"):
        wait()


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


def pages_of(record: str) -> str:
    """The ledger ``verify_since`` keeps beside its state file."""
    return record[: -len(".json")] + ".pages"


def write_files(libdir, names) -> None:
    st = Store(libdir)
    try:
        tree = StoreTree(st)
        for name in names:
            tree.write_bytes(name, b"x" * 30)
    finally:
        st.close()


def test_after_a_commit_only_the_changed_pages_are_walked(filled, tmp_path):
    """The walk after LMDB commits reads the paths from the roots to what changed (copy-on-write), takes
    the records under byte-identical pages from the ledger, and counts every table as a full walk does."""
    store, record = os.path.join(filled, "store"), str(tmp_path / "verified.json")
    write_files(filled, [f"big/f{i}.md" for i in range(400)])  # deep enough trees to leave pages unread
    first = lmdb_pages.verify_since(store, record, settle_s=3600)
    assert first is not None and first.clean and not first.incremental and os.path.exists(pages_of(record))
    write_files(filled, ["big/one-more.md"])
    report = lmdb_pages.verify_since(store, record, settle_s=3600)
    full = lmdb_pages.walk(store)
    assert report is not None and report.clean and report.incremental, report
    assert report.reused > 0 and report.pages < full.pages // 2, (report.pages, full.pages)
    assert report.records == full.records and report.expected == full.expected


def test_damage_on_a_changed_path_is_found_by_the_incremental_walk(filled, tmp_path):
    """A commit, then a table's root page overwritten behind LMDB's back (txnid and size as LMDB left
    them): the root is read on every walk, its bytes differ from the ledger's, it is checked, and the
    verdict is the full walk's line."""
    store, record = os.path.join(filled, "store"), str(tmp_path / "verified.json")
    lmdb_pages.verify_since(store, record, settle_s=3600)
    write_files(filled, ["after.md"])
    root = _named_root(store, b"inodes")
    with open(lmdb_pages.data_path(store), "r+b") as f:
        f.seek(root * 4096 + 12)  # keep the page number, break the free-space bounds
        f.write(b"\xff\xff\x10\x00")
    with pytest.raises(Damaged, match=rf"page {root} of table inodes: bad free-space bounds"):
        lmdb_pages.verify_since(store, record, settle_s=3600)


def _ledger_and_a_damaged_leaf(filled, tmp_path) -> tuple[str, str, int]:
    """A store with a ledger, then the first leaf of its inodes table given impossible bounds behind
    LMDB's back (every page above it unchanged): (store, record, leaf)."""
    store, record = os.path.join(filled, "store"), str(tmp_path / "verified.json")
    write_files(filled, [f"big/f{i}.md" for i in range(400)])
    lmdb_pages.verify_since(store, record, settle_s=3600)
    leaf = _first_leaf_under_a_branch(store, b"inodes")
    with open(lmdb_pages.data_path(store), "r+b") as f:
        f.seek(leaf * 4096 + 12)
        f.write(b"\xff\xff\x10\x00")
    return store, record, leaf


def test_damage_under_unchanged_pages_is_not_read_by_the_incremental_walk(filled, tmp_path, monkeypatch):
    """The limit of the incremental walk alone (the scrub turned off): a leaf overwritten while every page
    above it is byte-identical to the ledger's is not read; ``verify`` (check, mount, every read-write
    open) finds it, and so does ``verify_since`` once the ledger is gone."""
    monkeypatch.setattr(lmdb_pages, "SCRUB_PAGES", 0)
    store, record, leaf = _ledger_and_a_damaged_leaf(filled, tmp_path)
    report = lmdb_pages.verify_since(store, record, settle_s=3600)
    assert report is not None and report.clean and report.incremental  # not seen: the limit
    with pytest.raises(Damaged, match=rf"page {leaf} of table inodes"):
        lmdb_pages.verify(store)
    os.unlink(pages_of(record))
    with pytest.raises(Damaged, match=rf"page {leaf} of table inodes"):
        lmdb_pages.verify_since(store, record, settle_s=3600)


def test_damage_under_unchanged_pages_is_found_by_the_rotating_scrub(filled, tmp_path, monkeypatch):
    """Each incremental walk re-reads the next ``SCRUB_PAGES`` pages of the ledger: the same damage is
    found within one rotation of the ledger (here 16 pages a call), with the full walk's line."""
    monkeypatch.setattr(lmdb_pages, "SCRUB_PAGES", 16)
    store, record, leaf = _ledger_and_a_damaged_leaf(filled, tmp_path)
    st = os.stat(lmdb_pages.data_path(store))
    ledger = lmdb_pages.Ledger.load(pages_of(record), st.st_dev, st.st_ino, 4096)
    assert ledger is not None and ledger.digests[leaf] and len(ledger.digests) > 64
    ledger.cursor = leaf + 1  # the scrub starts just past the leaf: it must go round the ledger
    ledger.save(pages_of(record))
    calls = []
    with pytest.raises(Damaged, match=rf"page {leaf} of table inodes"):
        while len(calls) <= len(ledger.digests) // 16 + 1:
            report = lmdb_pages.verify_since(store, record, settle_s=3600)
            assert report is not None and report.incremental and report.scrubbed <= 16
            calls.append(report.scrubbed)
    assert len(calls) > 1 and sum(calls) > 16, calls  # the rotation, not the first call, reached it


def test_a_ledger_whose_counts_disagree_is_not_trusted(filled, tmp_path):
    """A page number LMDB freed and reused with the same bytes can carry a stale record count: a table
    that does not add up to its header's count sends the call to the full walk, which decides (clean)."""
    store, record = os.path.join(filled, "store"), str(tmp_path / "verified.json")
    write_files(filled, [f"big/f{i}.md" for i in range(400)])
    lmdb_pages.verify_since(store, record, settle_s=3600)
    st = os.stat(lmdb_pages.data_path(store))
    ledger = lmdb_pages.Ledger.load(pages_of(record), st.st_dev, st.st_ino, 4096)
    assert ledger is not None
    leaf = _first_leaf_under_a_branch(store, b"inodes")  # the oldest inodes: a new one goes elsewhere
    ledger.put(leaf, ledger.digests[leaf], ledger.records[leaf] + 1)
    ledger.save(pages_of(record))
    write_files(filled, ["big/one-more.md"])  # a new identity: walked, the leaf unchanged and not read
    report = lmdb_pages.verify_since(store, record, settle_s=3600)
    assert report is not None and report.clean and not report.incremental
    again = lmdb_pages.verify_since(store, record, settle_s=3600)  # the full walk left a true ledger
    assert again is not None and again.clean and again.incremental


def test_a_ledger_of_another_file_is_not_used(filled, tmp_path):
    """A copy of the library (another inode number) walks every page: the ledger names its file."""
    import shutil

    store, record = os.path.join(filled, "store"), str(tmp_path / "verified.json")
    lmdb_pages.verify_since(store, record, settle_s=3600)
    copy = str(tmp_path / "copy")
    shutil.copytree(store, copy)
    report = lmdb_pages.verify_since(copy, record, settle_s=3600)
    assert report is not None and report.clean and not report.incremental


def _named_root(store: str, name: bytes) -> int:
    """A named table's root page number, from the main DB read with plain reads."""
    found: dict[bytes, int] = {}
    meta = lmdb_pages.check_meta(store)
    with open(lmdb_pages.data_path(store), "rb") as f:
        raw = os.pread(f.fileno(), 4096, meta.main_root * 4096)
    lower = struct.unpack_from("<H", raw, 12)[0]
    for off in struct.unpack_from(f"<{(lower - 16) // 2}H", raw, 16):
        lo, hi, flags, ksize = struct.unpack_from("<HHHH", raw, off)
        key = raw[off + 8 : off + 8 + ksize]
        value = raw[off + 8 + ksize : off + 8 + ksize + (lo | hi << 16)]
        if flags & lmdb_pages.F_SUBDATA:
            found[key] = struct.unpack_from("<Q", value, 40)[0]
    return found[name]


def _first_leaf_under_a_branch(store: str, name: bytes) -> int:
    """The page number of the first leaf of a named table whose root is a branch page."""
    root = _named_root(store, name)
    with open(lmdb_pages.data_path(store), "rb") as f:
        raw = os.pread(f.fileno(), 4096, root * 4096)
    assert struct.unpack_from("<H", raw, 10)[0] & lmdb_pages.P_BRANCH, "the table fits one page"
    off = struct.unpack_from("<H", raw, 16)[0]
    lo, hi, flags, _ = struct.unpack_from("<HHHH", raw, off)
    return lo | hi << 16 | flags << 32


def test_incremental_walks_agree_with_full_walks_over_many_commits(filled, tmp_path):
    """Writes, rewrites (inline and overflow values) and deletes, a check after each: every incremental
    walk is clean and counts every table as a full walk of the same snapshot does, or hands over to one."""
    import random

    store, record = os.path.join(filled, "store"), str(tmp_path / "verified.json")
    rng = random.Random(18)
    st = Store(filled)
    tree = StoreTree(st)
    modes = []
    try:
        for i in range(60):
            name = f"p/f{rng.randrange(40)}.md"
            if rng.random() < 0.25 and tree.exists(name):
                tree.remove(name)
            else:
                tree.write_bytes(name, os.urandom(rng.choice([20, 900, 9000])))
            report = lmdb_pages.verify_since(store, record, settle_s=3600)
            assert report is not None and report.clean, report.problems
            full = lmdb_pages.walk(store)
            assert report.records == full.records and report.expected == full.expected, i
            modes.append(report.incremental)
    finally:
        st.close()
    assert modes[0] is False and sum(modes) >= 50, modes  # the first builds the ledger
