"""The saved recall index of an episode: ``recall``/``answer`` load it instead of rebuilding the episode's
:class:`~libraryfs.features.episodes.index.EpisodeIndex` from every unit on every call (issue 18: at 10⁴
steps the rebuild — parse every unit, occurrence lists, names, BM25 statistics — is ~1.5 s of CPU).

Derived data, rebuildable at any time, never trusted: one file per episode under
``<state dir>/recall-index/`` (:func:`libraryfs.layout.state_dir`), written whole under a temporary name
and renamed (a process killed while writing leaves the previous file, or none, and a temporary file the
next save removes). Its **key** names what it was derived from:

* :func:`generation_key` — the episode's generation (:data:`~libraryfs.features.episodes.unitdb.GENERATION`,
  a random token :meth:`UnitDB.put <libraryfs.features.episodes.unitdb.UnitDB.put>` renews in the write
  transaction of every change of the units) and the identity of the store's data file (a salvaged or
  replaced store is a new file): the reader learns whether the file is current from one record;
* :func:`records_digest` — a digest of every unit record, when the episode has no generation (stored by a
  release before generations, or its meta record rewritten by one);

both prefixed by :func:`code_key` (the source of the deriving modules, the Python version and byte order).

The file (:data:`FORMAT` 2)::

    MAGIC  format:u32  key_len:u16  head_len:u64  head_crc:u32   (big-endian)
    key    (key_len bytes, ASCII)
    head   (head_len bytes: marshal of {"state": the index state without its records,
            "offsets": array("Q") bytes, "crcs": array("I") bytes})
    blob   (the unit records back to back: record i is blob[offsets[i]:offsets[i + 1]])

``head_crc`` is the CRC-32 of key + head: the key is read alone (:func:`open_saved`, a few hundred bytes)
so that the forked reader can be told it before this process loads anything; the head is checked whole when
loaded (:meth:`Saved.state`, ~2.7 MB at 10⁴ steps); the records are read one at a time with ``pread`` when a
query shows their step, each checked against its own CRC-32 (:class:`Records`; a mismatch raises
:class:`Damaged`: the caller discards the file and rebuilds). Units stay as their stored JSON until then.
"""

from __future__ import annotations

import functools
import hashlib
import marshal
import os
import struct
import sys
import zlib
from array import array

FORMAT = 2
MAGIC = b"libraryfs recall index\n"
DIR_NAME = "recall-index"
_HEADER = struct.Struct(">IHQI")  #: format, key length, head length, CRC-32 of key + head
_MAX_KEY = 1024
_TMP_PREFIX = ".tmp-"
_DIGEST_BYTES = 32


class Damaged(Exception):
    """A record of a saved index failed its checksum or could not be read whole (the file was damaged or
    truncated after it was opened): the index must not be used; discard it (:func:`discard`) and rebuild."""


def records_digest(records: list[bytes]) -> str:
    """The key of an index derived from ``records`` (an episode's unit records: their order and every
    byte), for an episode without a generation."""
    h = hashlib.blake2b(digest_size=_DIGEST_BYTES)
    for r in records:
        h.update(len(r).to_bytes(8, "big"))
        h.update(r)
    return f"{code_key()}:d:{h.hexdigest()}"


def generation_key(store_id: str, generation: str) -> str:
    """The key of an index derived from the units of generation ``generation`` in the store whose data file
    is ``store_id`` (:func:`store_identity`)."""
    return f"{code_key()}:g:{store_id}:{generation}"


def store_identity(data_file: str) -> str:
    """``"<st_dev>.<st_ino>"`` of the store's data file (``stat(2)``), or ``""`` when there is none (an
    etcd store). A salvaged store (``check --repair``) is a new file, so an index keyed by a generation of
    the old one is not used with it even where the salvage kept the episode's meta record."""
    try:
        st = os.stat(data_file)
    except OSError:
        return ""
    return f"{st.st_dev}.{st.st_ino}"


@functools.cache
def code_key() -> str:
    """Digest of the source of the modules that derive the index (and count its pieces' tokens), and the
    Python version: a change of either makes every saved index stale."""
    from libraryfs.features.episodes import bm25, index, units
    from libraryfs.index import tokens

    h = hashlib.blake2b(digest_size=16)
    h.update(repr((FORMAT, sys.version_info[:2], sys.byteorder)).encode())
    for mod in (index, bm25, units, tokens):
        with open(mod.__file__ or "", "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def path_for(libdir: str, episode: str) -> str:
    """Where the saved index of ``episode`` lives: a name derived from the id (ids may hold any byte) and
    the format, so that a release writing another format keeps its own file instead of replacing this one
    on every call (format 1's files, named without the suffix, are left alone)."""
    from libraryfs.layout import state_dir

    name = hashlib.sha256(episode.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return os.path.join(state_dir(libdir), DIR_NAME, f"{name}.{FORMAT}")


class Records:
    """The unit records of a saved index, read one at a time (``records[i]``: ``pread`` of record ``i``,
    checked against its CRC-32; :class:`Damaged` when it does not match or the file is shorter)."""

    def __init__(self, fd: int, base: int, offsets: array, crcs: array) -> None:
        self._fd, self._base, self._offsets, self._crcs = fd, base, offsets, crcs

    def __len__(self) -> int:
        """The number of records."""
        return len(self._crcs)

    def __getitem__(self, i: int) -> bytes:
        """Record ``i`` (0-based, step order); :class:`Damaged` when it fails its checksum or is cut short."""
        lo, hi = self._offsets[i], self._offsets[i + 1]
        data = os.pread(self._fd, hi - lo, self._base + lo)
        if len(data) != hi - lo or zlib.crc32(data) != self._crcs[i]:
            raise Damaged(f"record {i} of the saved recall index is damaged")
        return data


class Saved:
    """A saved index opened by :func:`open_saved`: its :attr:`key`; :meth:`state` loads the rest."""

    def __init__(self, fd: int, key: str, head_len: int, head_crc: int, start: int) -> None:
        self.key = key
        self._fd, self._head_len, self._crc, self._start = fd, head_len, head_crc, start

    def state(self) -> dict | None:
        """The index state (:meth:`EpisodeIndex.state <libraryfs.features.episodes.index.EpisodeIndex.state>`
        with ``records`` a :class:`Records`), or None when the head is not intact."""
        head = os.pread(self._fd, self._head_len, self._start)
        if len(head) != self._head_len or zlib.crc32(head, zlib.crc32(self.key.encode())) != self._crc:
            return None
        try:
            out = marshal.loads(head)
        except (ValueError, EOFError, TypeError):
            return None
        if not isinstance(out, dict) or not isinstance(out.get("state"), dict):
            return None
        offsets, crcs = array("Q"), array("I")
        try:
            offsets.frombytes(out["offsets"])
            crcs.frombytes(out["crcs"])
        except (KeyError, TypeError, ValueError):
            return None
        if len(offsets) != len(crcs) + 1:
            return None
        state = out["state"]
        state["records"] = Records(self._fd, self._start + self._head_len, offsets, crcs)
        return state


def reusable_pieces(state: dict, ts: list[int], records: list[bytes]) -> tuple[dict[str, int], set[int]]:
    """For rebuilding over a saved ``state`` that is stale (the units changed since): its piece table (the
    counts are the tokenizer's, true for any text) and the steps of ``ts`` (with their ``records``) that are
    new or whose record changed — only their lines need rendering for the new table
    (:meth:`EpisodeIndex.state <libraryfs.features.episodes.index.EpisodeIndex.state>`). A step whose record
    is unchanged can still gain a visit-end mark from a new neighbour; a piece that brings and the table
    lacks is counted by the tokenizer when a query shows it."""
    old = dict(zip(state.get("ts", []), getattr(state.get("records"), "_crcs", []), strict=False))
    changed = {t for t, r in zip(ts, records, strict=True) if old.get(t) != zlib.crc32(r)}
    table = state.get("pieces")
    return (table if isinstance(table, dict) else {}), changed


def open_saved(path: str) -> Saved | None:
    """The saved index at ``path`` with its key read (the rest is read by :meth:`Saved.state` and
    :class:`Records`), or None when there is none or its header is not ours. The file stays open for the
    life of the process (a CLI call): a file renamed over it meanwhile does not change what this one
    reads."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    head = os.pread(fd, len(MAGIC) + _HEADER.size + _MAX_KEY, 0)
    fixed = len(MAGIC) + _HEADER.size
    if len(head) >= fixed and head.startswith(MAGIC):
        fmt, key_len, head_len, crc = _HEADER.unpack_from(head, len(MAGIC))
        key = head[fixed : fixed + key_len]
        if fmt == FORMAT and len(key) == key_len:
            try:
                return Saved(fd, key.decode("ascii"), head_len, crc, fixed + key_len)
            except UnicodeDecodeError:
                pass
    os.close(fd)
    return None


def save(path: str, key: str, state: dict) -> bool:
    """Write the index (atomically: a temporary file renamed over ``path``; temporary files left by killed
    writers are removed first); False when the directory cannot be written (the next call rebuilds it
    again, nothing else changes). ``state["records"]``: the records in step order."""
    records = state["records"]
    rest = {k: v for k, v in state.items() if k != "records"}
    offsets, crcs, pos = array("Q", [0]), array("I"), 0
    for r in records:
        pos += len(r)
        offsets.append(pos)
        crcs.append(zlib.crc32(r))
    head = marshal.dumps({"state": rest, "offsets": offsets.tobytes(), "crcs": crcs.tobytes()})
    k = key.encode("ascii")
    header = MAGIC + _HEADER.pack(FORMAT, len(k), len(head), zlib.crc32(head, zlib.crc32(k))) + k
    import fcntl

    d = os.path.dirname(path)
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        _remove_orphans(d)
        tmp = os.path.join(d, f"{_TMP_PREFIX}{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held until closed: not an orphan (:func:`_remove_orphans`)
            with os.fdopen(fd, "wb") as f:
                f.write(header)
                f.write(head)
                for r in records:
                    f.write(r)
                f.flush()
                os.replace(tmp, path)  # while the lock is held
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return False
    return True


def _remove_orphans(d: str) -> None:
    """Remove the temporary files in ``d`` whose writer is gone (killed while saving: ``kill -9``, a power
    cut): a writer holds ``flock(2)`` on its temporary file until it is renamed, so one that can be locked
    here is an orphan."""
    import fcntl

    for name in os.listdir(d):
        p = os.path.join(d, name)
        if name.startswith(_TMP_PREFIX):
            try:
                fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                _unlink(p)
            except OSError:  # its writer runs
                pass
            finally:
                os.close(fd)


def _unlink(path: str) -> None:
    """Remove ``path``; nothing when it is gone or cannot be removed."""
    try:
        os.unlink(path)
    except OSError:
        pass


def discard(path: str) -> None:
    """Remove the saved index at ``path`` (it was found damaged); nothing when it is gone."""
    _unlink(path)
