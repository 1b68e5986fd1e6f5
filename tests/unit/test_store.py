"""Store: chunked data, sparse files, map growth, journal, names as bytes."""

import errno
import os
import random

import pytest

from libraryfs.errors import LibraryMissing, NoSpace
from libraryfs.fs import schema as S
from libraryfs.fs.check import check
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView


def _write(view: LibraryView, path: bytes, data: bytes, offset: int = 0) -> None:
    fh = view.create(path, 0o644, os.O_WRONLY, 0, 0)
    view.write(fh, data, offset)
    view.release(fh)


def _read(view: LibraryView, path: bytes) -> bytes:
    fh, _ = view.open(path, os.O_RDONLY)
    out = view.read(fh, 1 << 30, 0)
    view.release(fh)
    return out


def test_chunked_write_touches_only_its_chunks(libdir):
    st = Store(libdir)
    view = LibraryView(st)
    data = os.urandom(3 * S.CHUNK_SIZE + 123)
    _write(view, b"/big", data)
    with st.read() as t:
        ino = t.lookup(S.ROOT_INO, b"big")
        before = {c: t.kv.get(S.DB_DATA, S.data_key(ino, c)) for c in range(4)}
    fh, _ = view.open(b"/big", os.O_RDWR)
    view.write(fh, b"XY", S.CHUNK_SIZE + 10)
    view.release(fh)
    with st.read() as t:
        after = {c: t.kv.get(S.DB_DATA, S.data_key(ino, c)) for c in range(4)}
    assert [c for c in range(4) if before[c] != after[c]] == [1]
    expect = bytearray(data)
    expect[S.CHUNK_SIZE + 10 : S.CHUNK_SIZE + 12] = b"XY"
    assert _read(view, b"/big") == bytes(expect)
    assert check(st).problems == []
    st.close()


def test_writes_inside_past_and_across_chunks_read_back_as_a_byte_model(libdir):
    """Writes at every kind of place — inside a chunk's stored bytes (SQLite's 24-byte and 4 KiB writes into
    a 64 KiB chunk of its WAL), over a chunk's stored end, at its end (an append), past it (a gap of
    zeros), across chunk boundaries, whole chunks — read back as the same writes applied to a bytearray,
    each chunk keeps at most CHUNK_SIZE bytes and none extends past the size (I5), and ``check`` finds the
    blocks of every chunk (I9) right."""
    st = Store(libdir)
    view = LibraryView(st)
    cs = S.CHUNK_SIZE
    rnd = random.Random(18)
    fh = view.create(b"/model", 0o644, os.O_RDWR, 0, 0)
    model = bytearray()
    for _ in range(300):
        size = len(model)
        off = rnd.choice(
            [rnd.randrange(0, 3 * cs), cs - 3, cs, 2 * cs + 5, size, max(0, size - 10), size + 100]
        )
        n = rnd.choice([1, 24, 4072, 4096, cs, cs + 7, rnd.randrange(1, 2 * cs)])
        data = os.urandom(n)
        assert view.write(fh, data, off) == n
        if len(model) < off + n:
            model += bytes(off + n - len(model))
        model[off : off + n] = data
    view.release(fh)
    assert _read(view, b"/model") == bytes(model)
    with st.read() as t:
        ino = t.lookup(S.ROOT_INO, b"model")
        chunks = {S.from_u64(k[8:]): v for k, v in t.kv.prefix(S.DB_DATA, S.u64(ino))}
    assert all(len(v) <= cs and c * cs + len(v) <= len(model) for c, v in chunks.items())
    assert check(st).problems == []


def test_sparse_truncate_and_holes(libdir):
    st = Store(libdir)
    view = LibraryView(st)
    _write(view, b"/sp", b"abcdef")
    view.truncate(b"/sp", 3)
    view.truncate(b"/sp", 10)
    assert _read(view, b"/sp") == b"abc" + bytes(7)
    view.truncate(b"/sp", 1 << 30)  # 1 GiB sparse: no data written
    fh, _ = view.open(b"/sp", os.O_RDWR)
    view.write(fh, b"Z", 5_000_000)
    assert view.read(fh, 3, 4_999_999) == b"\0Z\0"
    view.release(fh)
    with st.read() as t:
        ino = t.lookup(S.ROOT_INO, b"sp")
        assert t.inode(ino).size == 1 << 30
        chunks = sum(1 for _ in t.kv.prefix(S.DB_DATA, S.u64(ino), keys_only=True))
    assert chunks == 2
    assert check(st).problems == []
    st.close()


def test_map_grows_instead_of_failing(tmp_path):
    st = Store.create(tmp_path / "lib", map_size=1 << 20)
    view = LibraryView(st)
    for i in range(8):
        _write(view, b"/f%d" % i, os.urandom(1 << 20))
    assert st.map_info()["map_size"] > 1 << 20
    assert len(_read(view, b"/f7")) == 1 << 20
    assert check(st).problems == []
    st.close()


def test_full_disk_is_enospc_and_loses_nothing(small_disk):
    st = Store.create(small_disk / "lib", map_size=1 << 20)
    view = LibraryView(st)
    written = {}
    with pytest.raises(NoSpace):
        for i in range(64):
            data = os.urandom(512 * 1024)
            _write(view, b"/f%d" % i, data)
            written[i] = data
    assert len(written) >= 4
    for i, data in written.items():  # everything committed before the failure is intact
        assert _read(view, b"/f%d" % i) == data
    view.unlink(b"/f0")  # space is reusable after removing
    _write(view, b"/after", b"ok")
    assert _read(view, b"/after") == b"ok"
    st.close()
    st = Store(small_disk / "lib")
    assert [p for p in check(st).problems if p.code != "I4"] == []
    st.close()


def test_non_utf8_names_round_trip(libdir):
    st = Store(libdir)
    view = LibraryView(st)
    name = b"caf\xe9 \n\x01.md"
    _write(view, b"/" + name, b"x")
    fh = view.opendir(b"/")
    names = [n for n, *_ in view.readdir(fh, 0)]
    view.releasedir(fh)
    assert name in names
    assert _read(view, b"/" + name) == b"x"
    st.close()


def test_journal_records_mutations_in_order(libdir):
    st = Store(libdir)
    view = LibraryView(st)
    view.mkdir(b"/d", 0o755, 0, 0)
    _write(view, b"/d/a", b"1")
    view.rename(b"/d/a", b"/d/b")
    view.unlink(b"/d/b")
    with st.read() as t:
        ops = [S.OP_NAMES[r.op] for _s, r in t.journal_since(0)]
        seqs = [s for s, _r in t.journal_since(0)]
    assert ops == ["mkdir", "create", "write", "rename", "unlink"]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    st.close()


def test_missing_and_corrupt_library(tmp_path):
    with pytest.raises(LibraryMissing):
        Store(tmp_path / "nope")
    d = tmp_path / "lib"
    Store.create(d).close()
    st = Store(d)
    st.run_write(lambda t: t.put_cfg(S.CFG_SCHEMA_VERSION, S.u64(999)))
    st.close()
    from libraryfs.errors import SchemaMismatch

    for readonly in (False, True):  # a newer format is never reinterpreted, not even read-only
        with pytest.raises(SchemaMismatch, match="schema 999, newer than this release"):
            Store(d, readonly=readonly)


def test_library_dir_is_private(tmp_path):
    d = tmp_path / "lib"
    Store.create(d).close()
    assert os.stat(d).st_mode & 0o777 == 0o700


def test_an_lmdb_store_of_another_program_is_refused_untouched(tmp_path):
    """A library directory whose ``store/`` is another program's LMDB environment: opening it (read-write,
    as ``mount`` does) is refused as not a library, and no table of ours is added to it. The other program
    is a separate process (only the LMDB backend imports lmdb here)."""
    import subprocess
    import sys

    from libraryfs.errors import LibraryMissing

    path = tmp_path / "foreign" / "store"
    path.mkdir(parents=True)
    other = (
        "import lmdb, sys\n"
        "env = lmdb.open(sys.argv[1], max_dbs=4)\n"
        "if sys.argv[2] == 'make':\n"
        "    users = env.open_db(b'users')\n"
        "    with env.begin(write=True) as t:\n"
        "        t.put(b'alice', b'1', db=users)\n"
        "with env.begin() as t:\n"
        "    print(','.join(bytes(k).decode() for k, _v in t.cursor()))\n"
    )
    run = [sys.executable, "-c", other, str(path)]
    assert (
        subprocess.run([*run, "make"], capture_output=True, text=True, check=True).stdout.strip() == "users"
    )
    with pytest.raises(LibraryMissing, match="not a libraryfs library"):
        Store(tmp_path / "foreign")
    assert (
        subprocess.run([*run, "look"], capture_output=True, text=True, check=True).stdout.strip() == "users"
    )


def test_a_create_refused_on_a_full_disk_leaves_nothing_behind(small_disk):
    """`init` on a full disk fails with NoSpace and leaves no `store/` behind: the retry after space is
    freed works instead of being refused as "not empty" (a new user's report)."""
    filler = small_disk / "filler"
    with open(filler, "wb") as f, pytest.raises(OSError) as full:
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    assert full.value.errno == errno.ENOSPC
    (small_disk / "empty").mkdir()
    for lib in (small_disk / "lib", small_disk / "empty"):
        with pytest.raises(NoSpace):
            Store.create(lib)
    assert not (small_disk / "lib").exists() and os.listdir(small_disk / "empty") == []
    filler.unlink()
    for lib in (small_disk / "lib", small_disk / "empty"):
        Store.create(lib).close()
        st = Store(lib)
        assert check(st).problems == []
        st.close()


def test_concurrent_syncs_share_one_sync_that_began_after_their_commits(libdir):
    """Group commit (issue 18): a sync called while a sync that began after its commits runs waits for that
    one and returns without its own; callers whose commits came later start one sync at once, which the
    others of them share. Before, each call ran its own fdatasync of the whole store (4 calls → 4 syncs
    here, not 2)."""
    import threading

    st = Store(libdir)
    real_sync = st.backend.sync
    entered, release = threading.Semaphore(0), threading.Event()
    calls = []

    def slow_sync() -> None:
        """The real sync, held until the test releases it (a disk that takes its time)."""
        calls.append(st.write_seq)
        entered.release()
        release.wait(10)
        real_sync()

    st.backend.sync = slow_sync  # type: ignore[method-assign]
    try:
        view = LibraryView(st)
        view.mkdir(b"/a", 0o755, 0, 0)
        results: dict[str, bool] = {}

        def sync(name: str) -> threading.Thread:
            """``st.sync()`` in a thread, its result kept under ``name``."""
            th = threading.Thread(target=lambda: results.__setitem__(name, st.sync()))
            th.start()
            return th

        first = sync("first")  # syncs the mkdir; held inside the backend
        assert entered.acquire(timeout=10)
        covered = sync("covered")  # nothing committed since `first` began: waits for it
        covered.join(0.3)
        assert len(calls) == 1, "a sync started although the running one covers its commits"
        view.mkdir(b"/b", 0o755, 0, 0)  # committed while `first` runs: not covered by it
        later = [sync("later1"), sync("later2")]
        assert entered.acquire(timeout=10)  # one of them starts a sync at once, beside `first`
        for th in later:
            th.join(0.3)
        assert len(calls) == 2, "the second later caller did not share the first one's sync"
        release.set()
        for th in [first, covered, *later]:
            th.join(10)
        assert len(calls) == 2 and calls[1] == st.write_seq
        assert results["first"] and not results["covered"]
        assert sorted((results["later1"], results["later2"])) == [False, True]
        assert st.synced_seq == st.write_seq
        assert st.sync() is False  # nothing new since
    finally:
        release.set()
        st.close()


def test_reads_and_seek_data_hole_follow_a_byte_model(libdir):
    """Random writes (some of zeros) into a sparse file: every read equals the model, and SEEK_DATA/SEEK_HOLE
    equal the model's page map (a 4 KiB page is data when it holds a non-zero byte; ENXIO → None)."""
    import random

    rng = random.Random(1)
    st = Store(libdir)
    view = LibraryView(st)
    model = bytearray(3 << 20)
    fh = view.create(b"/m", S.S_IFREG | 0o644, os.O_RDWR | os.O_CREAT, 0, 0)
    view.truncate(None, len(model), fh)
    for _ in range(150):
        off, n = rng.randrange(len(model) - 70_000), rng.randrange(1, 70_000)
        data = bytes(n) if rng.random() < 0.2 else rng.randbytes(n)
        view.write(fh, data, off)
        model[off : off + n] = data
    for _ in range(500):
        off, n = rng.randrange(len(model) + 10), rng.randrange(0, 300_000)
        assert view.read(fh, n, off) == bytes(model[off : off + n]), (off, n)
    pages = [any(model[i : i + 4096]) for i in range(0, len(model), 4096)]
    with st.read() as t:
        ino = t.lookup(S.ROOT_INO, b"m")
        for off in [0, len(model) - 1, len(model), -1] + [rng.randrange(len(model)) for _ in range(1000)]:
            inside = 0 <= off < len(model)
            later = [(i, p) for i, p in enumerate(pages) if (i + 1) * 4096 > off]
            want_data = next((max(off, i * 4096) for i, p in later if p), None) if inside else None
            want_hole = next((max(off, i * 4096) for i, p in later if not p), len(model)) if inside else None
            assert t.seek_data(ino, off, len(model)) == want_data, off
            assert t.seek_hole(ino, off, len(model)) == want_hole, off
    view.release(fh)
    st.close()
