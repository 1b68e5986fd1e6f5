"""The LMDB layout of a library: every named DB, its key/value encoding and its invariants.

This module is the one place that says what is stored (ARCHITECTURE §3; idea from s3ql's ``database.py``).
All integers are big-endian so that LMDB's byte-order key comparison is numeric order.

Named DBs
=========

``inodes``   key ``ino:u64``                → :class:`Inode` (64 bytes, :data:`INODE_FMT`)
``dirents``  key ``parent:u64 + name``      → ``child:u64``   (a directory's entries, sorted by name bytes)
``dirparent``key ``ino:u64`` (directories) → ``parent:u64 + name`` (the one dirent naming a directory)
``data``     key ``ino:u64 + chunk:u64``    → ``bytes`` of at most :data:`CHUNK_SIZE`; regular files only;
             symlink targets are chunk 0 of the link's inode
``xattrs``   key ``ino:u64 + name``         → value bytes
``meta``     key ``ino:u64``                → JSON written by the indexer: summary, tokens, content hash,
             indexed generation, section description (directories)
``journal``  key ``seq:u64``                → :class:`JournalRecord` (one per mutation of the tree)
``toc``      key ``dir ino:u64 + page:u32`` → rendered TOC page (UTF-8 Markdown); page 0 is ``INDEX.md``
``names``    key ``casefolded name + 0x00 + ino:u64`` → ``parent:u64`` (kept by the indexer for ``find``)
``config``   key ASCII name                  → value bytes (see ``CFG_*``)

Extensions (LLM cache, episodic units, ...) open their own named DBs with :meth:`Store.open_db`; their names
are registered in :data:`EXTENSION_DBS` so that ``check`` knows them.

Invariants (verified by :mod:`libraryfs.fs.check`)
===============================================

I1  Inode 1 is the root directory; ``dirparent[1]`` is absent.
I2  Every dirent ``(p, name) → c`` names an existing inode ``c``; ``p`` is an existing directory;
    ``1 ≤ len(name) ≤ NAME_MAX``; name contains no ``/`` and no NUL and is not ``.`` or ``..``.
I3  A directory is named by exactly one dirent, mirrored in ``dirparent``; following ``dirparent`` from
    any directory reaches the root without a cycle.
I4  ``nlink`` of a regular file or symlink equals the number of dirents naming it (0 only while a
    handle of a running mount holds it open — such orphans are removed at the next mount or by ``check
    --repair``). ``nlink`` of a directory equals ``2 + number of child directories``.
I5  Data chunks exist only for regular files and symlinks, only for chunk numbers
    ``< ceil(size / CHUNK_SIZE)``, and no chunk extends past ``size``. A missing chunk reads as zeros
    (sparse file).
I6  ``config[next_ino]`` is greater than every inode number in use.
I7  Journal sequence numbers are strictly increasing; ``config[indexer_cursor] ≤`` the last one.
I8  ``toc`` pages and ``meta`` records refer to existing inodes (stale ones are harmless and are
    removed by the indexer and by ``check --repair``).

Names are raw bytes (non-UTF-8 names round-trip). Times are nanoseconds since the epoch.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

SCHEMA_VERSION = 1

ROOT_INO = 1
CHUNK_SIZE = 64 * 1024  #: bytes per data chunk: a write at an offset touches only its chunks
NAME_MAX = 255  #: bytes per name component (POSIX NAME_MAX on Linux)
MAX_FILE_SIZE = 1 << 50  #: bytes; larger sizes are EFBIG

DB_INODES = b"inodes"
DB_DIRENTS = b"dirents"
DB_DIRPARENT = b"dirparent"
DB_DATA = b"data"
DB_XATTRS = b"xattrs"
DB_META = b"meta"
DB_JOURNAL = b"journal"
DB_TOC = b"toc"
DB_NAMES = b"names"
DB_CONFIG = b"config"

CORE_DBS = (
    DB_INODES,
    DB_DIRENTS,
    DB_DIRPARENT,
    DB_DATA,
    DB_XATTRS,
    DB_META,
    DB_JOURNAL,
    DB_TOC,
    DB_NAMES,
    DB_CONFIG,
)
#: Named DBs that extensions may create (checked for existence only).
EXTENSION_DBS = (b"llmcache", b"units", b"extra")
MAX_DBS = 32

CFG_SCHEMA_VERSION = b"schema_version"
CFG_NEXT_INO = b"next_ino"
CFG_CLEAN = b"clean_shutdown"  #: b"1" after a clean unmount, b"0" while mounted
CFG_CURSOR = b"indexer_cursor"  #: last journal seq the indexer has processed (u64)
CFG_TOC_GEN = b"toc_generation"  #: bumped by the indexer each time it commits TOC pages (u64)
CFG_TOC_DIRTY = b"toc_dirty"  #: JSON list of directory inos whose TOC changed in the last indexer commit
CFG_INDEXER_STATUS = b"indexer_status"  #: JSON written by the indexer
CFG_MOUNT_STATUS = b"mount_status"  #: JSON written by the mount server
CFG_SETTINGS = b"settings"  #: JSON library settings (toc_max_tokens, ...)
CFG_CREATED = b"created_ns"

# Inode flags
F_GENERATED = 1  #: content produced by a builder (read-only through the mount)

S_IFMT = 0o170000
S_IFDIR = 0o040000
S_IFREG = 0o100000
S_IFLNK = 0o120000

INODE_FMT = ">IIIIQqqqQII"  # mode uid gid nlink size atime mtime ctime generation flags rdev
INODE_SIZE = struct.calcsize(INODE_FMT)


def u64(n: int) -> bytes:
    """Encode a non-negative integer as 8 big-endian bytes (a key that sorts numerically)."""
    return n.to_bytes(8, "big")


def from_u64(b: bytes) -> int:
    """Decode :func:`u64`."""
    return int.from_bytes(b[:8], "big")


def dirent_key(parent: int, name: bytes) -> bytes:
    """Key of the dirent ``name`` in directory ``parent``."""
    return u64(parent) + name


def data_key(ino: int, chunk: int) -> bytes:
    """Key of chunk number ``chunk`` (covering bytes ``[chunk*CHUNK_SIZE, (chunk+1)*CHUNK_SIZE)``)."""
    return u64(ino) + u64(chunk)


def toc_key(dir_ino: int, page: int) -> bytes:
    """Key of TOC page ``page`` of directory ``dir_ino`` (page 0 is ``INDEX.md``)."""
    return u64(dir_ino) + page.to_bytes(4, "big")


@dataclass(slots=True)
class Inode:
    """One inode: POSIX attributes plus a generation bumped on every change (times in ns, size in bytes)."""

    ino: int
    mode: int
    uid: int = 0
    gid: int = 0
    nlink: int = 1
    size: int = 0
    atime_ns: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0
    generation: int = 0
    flags: int = 0
    rdev: int = 0

    def pack(self) -> bytes:
        """Encode as the 64-byte ``inodes`` value."""
        return struct.pack(
            INODE_FMT,
            self.mode,
            self.uid,
            self.gid,
            self.nlink,
            self.size,
            self.atime_ns,
            self.mtime_ns,
            self.ctime_ns,
            self.generation,
            self.flags,
            self.rdev,
        )

    @classmethod
    def unpack(cls, ino: int, raw: bytes) -> Inode:
        """Decode an ``inodes`` value; raises ``struct.error`` on a corrupt record."""
        return cls(ino, *struct.unpack(INODE_FMT, raw))

    @property
    def is_dir(self) -> bool:
        """True for a directory."""
        return self.mode & S_IFMT == S_IFDIR

    @property
    def is_reg(self) -> bool:
        """True for a regular file."""
        return self.mode & S_IFMT == S_IFREG

    @property
    def is_lnk(self) -> bool:
        """True for a symbolic link."""
        return self.mode & S_IFMT == S_IFLNK


# ---- journal ------------------------------------------------------------------------------------------

OP_CREATE = 1
OP_MKDIR = 2
OP_WRITE = 3  #: content changed (write, truncate)
OP_UNLINK = 4
OP_RMDIR = 5
OP_RENAME = 6
OP_SYMLINK = 7
OP_LINK = 8
OP_SETATTR = 9  #: mode/owner/times changed (does not change TOC text)
OP_NAMES = {
    OP_CREATE: "create",
    OP_MKDIR: "mkdir",
    OP_WRITE: "write",
    OP_UNLINK: "unlink",
    OP_RMDIR: "rmdir",
    OP_RENAME: "rename",
    OP_SYMLINK: "symlink",
    OP_LINK: "link",
    OP_SETATTR: "setattr",
}

_JHEAD = ">BQQQqH"  # op ino parent old_parent time_ns len(name); then name, then old_name
_JHEAD_SIZE = struct.calcsize(_JHEAD)


@dataclass(slots=True)
class JournalRecord:
    """One change to the tree: ``op`` on inode ``ino`` named ``name`` in directory ``parent``.

    For a rename, ``old_parent``/``old_name`` give the source; otherwise they are 0 / ``b""``.
    """

    op: int
    ino: int
    parent: int
    name: bytes
    time_ns: int
    old_parent: int = 0
    old_name: bytes = b""

    def pack(self) -> bytes:
        """Encode as a ``journal`` value."""
        return (
            struct.pack(_JHEAD, self.op, self.ino, self.parent, self.old_parent, self.time_ns, len(self.name))
            + self.name
            + self.old_name
        )

    @classmethod
    def unpack(cls, raw: bytes) -> JournalRecord:
        """Decode a ``journal`` value."""
        op, ino, parent, old_parent, t, n = struct.unpack_from(_JHEAD, raw)
        name = raw[_JHEAD_SIZE : _JHEAD_SIZE + n]
        old = raw[_JHEAD_SIZE + n :]
        return cls(op, ino, parent, name, t, old_parent, old)

    def to_json(self) -> dict:
        """A JSON-able dict (names decoded with surrogateescape)."""
        import os

        return {
            "op": OP_NAMES.get(self.op, str(self.op)),
            "ino": self.ino,
            "parent": self.parent,
            "name": os.fsdecode(self.name),
            "time_ns": self.time_ns,
            "old_parent": self.old_parent,
            "old_name": os.fsdecode(self.old_name),
        }


def dumps(obj: object) -> bytes:
    """Compact JSON bytes for ``meta``/``config`` values."""
    try:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    except (
        UnicodeEncodeError
    ):  # a non-UTF-8 name (surrogateescape): ASCII JSON keeps \udcXX, which round-trips
        return json.dumps(obj, separators=(",", ":")).encode()


def loads(raw: bytes | None, default: object = None) -> object:
    """Inverse of :func:`dumps`; ``default`` for a missing value."""
    if raw is None:
        return default
    return json.loads(raw)
