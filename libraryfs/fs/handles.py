"""The open-file and directory-handle table of one mount (in memory only; never stored).

A *file handle* names an open real inode, or a snapshot of a generated file's bytes taken at ``open`` (so
every read of one handle sees one version of a TOC page). A *directory handle* holds a snapshot of a
listing, so ``readdir`` offsets stay stable while the directory changes (ARCHITECTURE C05). Handle numbers
are positive ints, never reused while the mount lives.

The table also counts the open handles of each inode (an unlinked inode lives until its last close, POSIX
unlink(2)), the names of hard-linked files the kernel knows (:class:`~libraryfs.fs.aliases.LinkNames`),
and keeps libfuse's *hidden names*: a file unlinked while open is renamed by libfuse to
``.fuse_hidden<16 hex digits>`` (``hard_remove`` off) so that ``fstat`` on its descriptor keeps a path
(C11); the view unlinks it for real and remembers the hidden name here only. After the last close libfuse
unlinks the hidden name, but the kernel may still send OPEN or GETATTR for that name's node: a path walk
that found the file's name just before a rename replaced it (``mv -f tmp name`` beside ``cat name``). So
the file *lingers*: its hidden name keeps reaching it for :data:`LINGER_S` after its last close, as an ext4
inode lives while the kernel still holds it, and such an open reads the replaced bytes; then the file is
freed and the name *retired* (the last :data:`RETIRED_MAX` are remembered), which the resolver answers
ESTALE so the kernel walks the path again (docs/posix.md C03).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from libraryfs.fs import schema as S
from libraryfs.fs.aliases import LinkNames

#: seconds a file reachable only by a libfuse hidden name stays after its last close (module doc): the
#: kernel sends OPEN for such a node microseconds to milliseconds after its path walk; later it is ESTALE.
#: Kept short: ``libraryfs check`` of a mounted library counts such a file as an orphan meanwhile
LINGER_S = 0.5

#: retired hidden names remembered (module doc); a name is reachable only by a node id the kernel looked up
#: before the name was retired, which it forgets within moments, and libfuse never makes the same hidden
#: name again (its names carry a node id and a counter), so a few thousand cover any burst of replacements
RETIRED_MAX = 4096


@dataclass(slots=True)
class Handle:
    """An open file: a real inode, or a snapshot of a generated file's bytes."""

    ino: int  #: the real inode (0 for a snapshot)
    flags: int  #: the ``open(2)`` flags
    virtual: bytes | None = None  #: content of a generated file, fixed at open (consistent reads)
    is_toc: bool = False  #: the snapshot is a TOC page (its first read counts as a TOC page read)
    toc_tokens: int = 0  #: tokens charged for the first read of a TOC page snapshot
    journaled: bool = False  #: a WRITE record for this handle is already in the journal
    wrote_after_journal: bool = False  #: written again since that record (release journals once more)
    read_any: bool = False  #: the handle has returned data (its first read costs one read)
    index_dir: int = 0  #: the directory whose ``INDEX.md`` this handle created or wrote (absorb check)
    vkey: tuple = ()  #: a snapshot's object key (:class:`~libraryfs.fs.virtual.Snapshot`)
    keep_cache: bool = False  #: the kernel may keep this file's cached pages at this open (FOPEN_KEEP_CACHE)
    #: ``Store.write_seq`` when this handle last saw its file linked (at open, or right after its own write
    #: transaction): while the count is unchanged nothing in this process unlinked it (release skips a read)
    committed_seq: int = -1
    #: ``(snapshot id, inode record)`` open read the file's record in (None: unknown): a read in the same
    #: snapshot uses it instead of reading it again (:meth:`Txn.snapshot <libraryfs.fs.store.Txn.snapshot>`)
    seen: tuple[int, S.Inode] | None = None


@dataclass(slots=True)
class DirHandle:
    """An open directory: a snapshot of its listing, ``(name, type bits, ino)`` per entry; ``ino`` is the
    stored directory's inode (0 for a generated directory, whose entries get no readdirplus attributes)."""

    entries: list[tuple[bytes, int, int]] = field(default_factory=list)
    ino: int = 0


class HandleTable:
    """File handles, directory handles, open counts per inode, and libfuse's hidden names (module doc).

    Not thread-safe by itself: the FUSE handlers run one at a time (the single-threaded loop, or under the
    multithreaded server's lock, :mod:`libraryfs.fs.serverlock`); the hidden names are also retired by the
    mount's background thread, under :attr:`lock`.
    """

    def __init__(self) -> None:
        self._files: dict[int, Handle] = {}
        self._dirs: dict[int, DirHandle] = {}
        self._open: dict[int, int] = {}  # inode → open file handles
        #: ``(parent ino, .fuse_hidden name) → ino`` of files unlinked while open (never stored, never listed)
        self.hidden: dict[tuple[int, bytes], int] = {}
        #: ``(parent ino, .fuse_hidden name)`` of hidden names libfuse has unlinked (module doc), oldest first
        self.retired: OrderedDict[tuple[int, bytes], None] = OrderedDict()
        #: hidden names whose file no handle holds: ``(parent ino, name) → monotonic deadline``, oldest first
        self.linger: OrderedDict[tuple[int, bytes], float] = OrderedDict()
        #: held while hidden names are retired (the mount's background thread) and while a request that
        #: may resolve one opens a handle, so no handle is opened on a file being freed
        self.lock = threading.RLock()
        #: names of hard-linked files the kernel has looked up (:mod:`libraryfs.fs.aliases`)
        self.links = LinkNames()
        self._next_fh = 1

    def _new_fh(self) -> int:
        fh = self._next_fh
        self._next_fh += 1
        return fh

    def retire_hidden(self, key: tuple[int, bytes]) -> None:
        """Forget hidden name ``key`` = ``(parent ino, name)`` and remember it as retired (the resolver
        answers it ESTALE; at most :data:`RETIRED_MAX` are kept, the oldest dropped first)."""
        with self.lock:
            self.hidden.pop(key, None)
            self.linger.pop(key, None)
            self.retired[key] = None
            self.retired.move_to_end(key)
            while len(self.retired) > RETIRED_MAX:
                self.retired.popitem(last=False)

    def hidden_names(self, ino: int) -> list[tuple[int, bytes]]:
        """The hidden names (``(parent ino, name)``) that reach inode ``ino``."""
        return [k for k, v in self.hidden.items() if v == ino] if self.hidden else []

    def linger_ino(self, ino: int, now: float) -> None:
        """Let every hidden name of inode ``ino`` (no handle holds it any more) reach it until ``now`` +
        :data:`LINGER_S` (monotonic s), then :meth:`due` hands it over to be freed."""
        with self.lock:
            for key in self.hidden_names(ino):
                self.linger[key] = now + LINGER_S
                self.linger.move_to_end(key)

    def due(self, now: float, everything: bool = False) -> list[tuple[tuple[int, bytes], int]]:
        """The lingering hidden names whose time is up at ``now`` (all of them with ``everything``), removed
        from :attr:`linger`: ``((parent ino, name), ino)`` each. The caller frees each inode no handle
        holds and retires the name (:meth:`retire_hidden`); one opened again lingers anew at its last close."""
        out = []
        with self.lock:
            while self.linger:
                key, deadline = next(iter(self.linger.items()))
                if deadline > now and not everything:
                    break
                del self.linger[key]
                ino = self.hidden.get(key)
                if ino is not None:
                    out.append((key, ino))
        return out

    # -- files ---------------------------------------------------------------------------------------------
    def open_file(self, ino: int, flags: int, keep_cache: bool = False, committed_seq: int = -1) -> int:
        """A new handle on real inode ``ino``; counts it as open. Returns the handle number.
        ``committed_seq``: :attr:`Handle.committed_seq` (the store's write count at which the file was seen
        linked; -1: unknown)."""
        fh = self._new_fh()
        self._files[fh] = Handle(ino, flags, keep_cache=keep_cache, committed_seq=committed_seq)
        self._open[ino] = self._open.get(ino, 0) + 1
        return fh

    def open_snapshot(
        self, content: bytes, flags: int, *, is_toc: bool, toc_tokens: int, vkey: tuple = ()
    ) -> int:
        """A new handle on the ``content`` bytes of a generated file (object ``vkey``). Returns the handle
        number."""
        fh = self._new_fh()
        self._files[fh] = Handle(0, flags, content, is_toc, toc_tokens, vkey=vkey)
        return fh

    def file(self, fh: int | None) -> Handle | None:
        """The open file ``fh``, or None (unknown number or None)."""
        return self._files.get(fh) if fh is not None else None

    def close_file(self, fh: int) -> tuple[Handle, int] | None:
        """Forget file handle ``fh``: ``(its handle, handles still open on its inode)``, or None if unknown.
        A snapshot handle reports 0 open handles."""
        h = self._files.pop(fh, None)
        if h is None:
            return None
        if h.virtual is not None:
            return h, 0
        n = self._open.get(h.ino, 1) - 1
        if n <= 0:
            self._open.pop(h.ino, None)
        else:
            self._open[h.ino] = n
        return h, n

    def open_count(self, ino: int) -> int:
        """Number of open file handles on real inode ``ino``."""
        return self._open.get(ino, 0)

    # -- directories ------------------------------------------------------------------------------------------
    def open_dir(self, entries: list[tuple[bytes, int, int]], ino: int = 0) -> int:
        """A new directory handle on the listing ``entries`` of stored directory ``ino`` (0: generated).
        Returns the handle number."""
        fh = self._new_fh()
        self._dirs[fh] = DirHandle(entries, ino)
        return fh

    def dir(self, fh: int) -> DirHandle | None:
        """The open directory ``fh``, or None."""
        return self._dirs.get(fh)

    def close_dir(self, fh: int) -> None:
        """Forget directory handle ``fh`` (unknown numbers are ignored)."""
        self._dirs.pop(fh, None)
