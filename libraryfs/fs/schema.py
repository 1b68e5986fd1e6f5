"""What a library stores: every named DB (table), its key and value encoding, config keys and invariants.

This module is the one place that says what is stored (ARCHITECTURE §3; idea from s3ql's ``database.py``);
the backends (:mod:`libraryfs.fs.backend`) store opaque bytes in these tables, the typed layer
(:mod:`libraryfs.fs.store`) reads and writes them only through the codecs below and the ``meta`` record
codec of :mod:`libraryfs.fs.meta` (re-exported here: :class:`EntryMeta`, :class:`SectionMeta`,
:func:`decode_meta`, and :func:`dumps`/:func:`loads` for JSON values). All integers inside keys
are big-endian so that the backends' unsigned byte order of keys is numeric order. Schema version
:data:`SCHEMA_VERSION`; older stores are upgraded by :mod:`libraryfs.fs.migrations` (the history of the
format is there).

Tables
======

``inodes``   key ``ino:u64``               → :class:`Inode` (72 bytes, :data:`INODE_FMT`; its last field
             ``blocks`` is the allocated size in 512-byte units, ``st_blocks``: see I9. Schemas 1 and 2
             stored 64 bytes without it — migration 2 → 3 adds it, and :meth:`Inode.unpack` reads both)
``dirents``  key ``parent:u64 + name``     → ``child:u64 + type:u8`` (:func:`dirent_value`): ``type`` is the
             child's ``S_IFMT >> 12`` (4 directory, 8 regular file, 10 symlink, ...) so that ``readdir``
             needs no inode fetch. Schema 1 allowed 8-byte values without the type byte (written before
             commit f0cb335); migration 1 → 2 adds it, and :func:`dirent_type` reads both forms
``dirparent``key ``ino:u64`` (directories) → ``parent:u64 + name`` (the one dirent naming a directory)
``data``     key ``ino:u64 + chunk:u64``   → ``bytes`` of at most :data:`CHUNK_SIZE`; regular files only;
             symlink targets are chunk 0 of the link's inode
``xattrs``   key ``ino:u64 + name``        → value bytes
``meta``     key ``ino:u64``               → the indexer's record: :class:`EntryMeta` for a file or symlink,
             :class:`SectionMeta` for a directory (:func:`decode_meta`; JSON object; the keys, their types and
             the tolerance rules are in :mod:`libraryfs.fs.meta`)
``journal``  key ``seq:u64``               → :class:`JournalRecord` (one per mutation of the tree)
``toc``      key ``dir ino:u64 + page:u32``→ rendered TOC page (UTF-8 Markdown); page 0 is ``INDEX.md``
``names``    key ``casefold(name) + 0x00 + ino:u64 + parent:u64 + blake2b-64(name)`` (:func:`names_key`)
             → ``parent:u64 + name`` (the original name): kept by the indexer for ``find``, one row per
             name (dirent) of an examined entry that is not excluded — every link of a hard-linked file
             (links named alike in two directories, or differing only in case, are distinct rows; the
             name's digest, not the name, keeps the key within LMDB's 511 bytes). Format
             :data:`NAMES_FORMAT` (``config[names_format]``); format 1 keys ended at ``ino`` (one row per
             inode and folded name); a store whose rows are of another format gets a full indexer pass,
             which rebuilds them (:mod:`libraryfs.index.names`)
``config``   key ASCII name                → value bytes; every key is a ``CFG_*`` constant below

Extension tables (opened with :meth:`Store.open_table <libraryfs.fs.store.Store.open_table>`; ``check``
only checks that they open). Their key/value layout is owned by the module named:

``llmcache`` :mod:`libraryfs.llm.cache`: ``job + 0x00 + sha256`` → JSON ``{"v": answer, "t": unix s}``;
             ``0x00 + b"spend"`` → JSON spending window
``units``    :mod:`libraryfs.features.episodes.unitdb`: ``b"u" + episode + 0x00 + step:u64`` → unit JSON;
             ``b"m" + episode`` → episode meta JSON (with the episode's generation: derived data is keyed by it)
``catalogue`` :mod:`libraryfs.index.catalogue`: the name catalogue (every name an entry defines → the
             entry, as a B+tree): ``b"n" + casefold(name) + 0x00 + name + 0x00 + ino:u64`` → ``u32`` (how many
             names that entry defines); ``b"p" + page:u32`` → node JSON; ``b"d" + page:u32`` → ``b""`` (a leaf
             to re-render); ``b"s"`` → state JSON. Its rendered pages are ``toc`` pages of the pseudo
             directory :data:`CATALOGUE_INO`, with a section record there (token counts); ``check``
             accepts both
``(none)``   the subject index (:mod:`libraryfs.index.subjects`) keeps no table: its pages are ``toc``
             pages of the pseudo directory :data:`SUBJECTS_INO` with a section record there, rebuilt from
             the term index (``terms.sqlite``)
``extra``    reserved for extensions (no user yet)

Invariants (verified by :mod:`libraryfs.fs.check`)
=================================================

I1  Inode 1 is the root directory; ``dirparent[1]`` is absent.
I2  Every dirent ``(p, name) → c`` names an existing inode ``c``; ``p`` is an existing directory;
    ``1 ≤ len(name) ≤ NAME_MAX``; name contains no ``/`` and no NUL and is not ``.`` or ``..``; its type
    byte equals ``c``'s file type (required from schema 2 on).
I3  A directory is named by exactly one dirent, mirrored in ``dirparent``; following ``dirparent`` from
    any directory reaches the root without a cycle.
I4  ``nlink`` of a regular file or symlink equals the number of dirents naming it (0 only while a
    handle of a running mount holds it open, or while ``config[orphans]`` registers it for the mount to
    free — such orphans are removed at the next mount or by ``check --repair``). ``nlink`` of a directory equals ``2 + number of child directories``.
I5  Data chunks exist only for regular files and symlinks, only for chunk numbers
    ``< ceil(size / CHUNK_SIZE)``, and no chunk extends past ``size``. A missing chunk reads as zeros
    (sparse file).
I6  ``config[next_ino]`` is greater than every inode number in use.
I7  Journal sequence numbers are strictly increasing; ``config[indexer_cursor] ≤`` the last one.
I9  (schema 3) ``blocks`` of a regular file equals the sum over its data chunks of
    :func:`chunk_blocks` (each chunk counted in whole 4 KiB pages, as tmpfs allocates); 0 for every other
    file type. A hole costs nothing, so ``du`` of a sparse file counts only what is stored.
I8  ``toc`` pages and ``meta`` records refer to existing inodes (stale ones are harmless and are
    removed by the indexer and by ``check --repair``); a ``meta`` record decodes, and is an entry record
    for a file or symlink, a section record for a directory.
I10 Once the indexer has committed a pass, a reachable directory with entries that is not excluded from
    TOCs has page 0 of its TOC, or the indexer owes it one: a journal record after the cursor names it,
    or ``config[toc_pending]`` lists it (:mod:`libraryfs.fs.check_tocs`).

Names are raw bytes (non-UTF-8 names round-trip). Times are nanoseconds since the epoch.
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass

# The ``meta`` records and the JSON value encoding live in libraryfs.fs.meta; they are part of the layout
# documented here, so this module names them too (``S.EntryMeta``, ``S.dumps``).
from libraryfs.fs.meta import EntryMeta as EntryMeta
from libraryfs.fs.meta import SectionMeta as SectionMeta
from libraryfs.fs.meta import decode_meta as decode_meta
from libraryfs.fs.meta import dumps as dumps
from libraryfs.fs.meta import loads as loads

SCHEMA_VERSION = 3  #: the format this release writes; :mod:`libraryfs.fs.migrations` upgrades older ones

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

_TREE_DBS = (DB_INODES, DB_DIRENTS, DB_DIRPARENT, DB_DATA, DB_XATTRS)  # the filesystem
_INDEX_DBS = (DB_META, DB_JOURNAL, DB_TOC, DB_NAMES, DB_CONFIG)  # the journal, the index, the settings
CORE_DBS = _TREE_DBS + _INDEX_DBS  #: the core tables, opened with every store
DB_LLMCACHE = b"llmcache"
DB_UNITS = b"units"
DB_EXTRA = b"extra"
DB_CATALOGUE = b"catalogue"
#: Tables that extensions may create (checked for existence only).
EXTENSION_DBS = (DB_LLMCACHE, DB_UNITS, DB_EXTRA, DB_CATALOGUE)
#: Pseudo directory inode whose ``toc`` pages and ``meta`` section record are the name catalogue's (no
#: inode has this number: inode numbers are handed out from 1 upwards).
CATALOGUE_INO = (1 << 64) - 2
#: Pseudo directory inode whose ``toc`` pages and ``meta`` section record are the subject index's
#: (:mod:`libraryfs.index.subjects`; no extension table: the pages are rebuilt from the term index).
SUBJECTS_INO = (1 << 64) - 3
#: The pseudo directories (no inode, a section record and TOC pages only).
PSEUDO_INOS = (CATALOGUE_INO, SUBJECTS_INO)
MAX_DBS = 32

# ---- config keys (table ``config``); u64 values are big-endian ------------------------------------------
CFG_SCHEMA_VERSION = b"schema_version"  #: u64: the format of this store (:data:`SCHEMA_VERSION` once current)
CFG_NEXT_INO = b"next_ino"  #: u64: the next inode number to hand out (I6)
CFG_CLEAN = b"clean_shutdown"  #: b"1" after a clean unmount (of the last mount), b"0" while mounted
CFG_CURSOR = b"indexer_cursor"  #: u64: last journal seq the indexer has processed
CFG_TOC_GEN = b"toc_generation"  #: u64: bumped by the indexer each time it commits TOC pages
CFG_TOC_DIRTY = b"toc_dirty"  #: JSON list of directory inos whose TOC changed in the last indexer commit
CFG_TOC_DIRTY_LOG = (
    b"toc_dirty_log"  #: JSON ``[[generation, [dir inos] | null], …]`` of the last indexer commits
)
#: JSON list of directory inos the indexer owes a TOC although no journal record after the cursor names them
#: (deferred until they settle; queued by ``check --repair``): committed with the cursor, read at each pass
CFG_TOC_PENDING = b"toc_pending"
#: JSON list of inode numbers left with nlink 0 by a process that cannot know whether a mount holds them open
#: (the MCP server replacing or removing a file's last name): the mount frees each once no handle of it holds
#: the inode (its background pass), the MCP server when no mount runs, the next mount's start after a crash
CFG_ORPHANS = b"orphans"
CFG_INDEXER_STATUS = b"indexer_status"  #: JSON written by the indexer (state, pid, passes, last report)
CFG_MOUNT_STATUS = b"mount_status"  #: JSON written by the mount server (mountpoint, pid, options)
#: prefix on a shared (etcd) store: one such JSON per live read-write mount, key + ``host:libdir``
CFG_MOUNTS = b"mount_status/"
CFG_SETTINGS = b"settings"  #: JSON library settings (toc_max_tokens, ...)
CFG_CREATED = b"created_ns"  #: u64: creation time of the library (ns)
CFG_SECURITY_XATTRS = b"has_security_xattrs"  #: b"1" once any ``security.*`` xattr has been stored
CFG_MIGRATION = b"migration_progress"  #: u64 source version + resume key of a migration under way
CFG_SCHEMA_HISTORY = b"schema_history"  #: JSON list of {"from", "to", "at_ns", "release", "records"}
CFG_TOC_FORMAT = (
    b"toc_format"  #: ASCII int: the TOC text rules the last full pass used (libraryfs.index.lines)
)
#: ASCII int: the format of the ``names`` rows (:data:`NAMES_FORMAT`), written by the pass (or repair) that
#: rebuilt them all; absent or another value: the indexer's next pass is a full one
CFG_NAMES_FORMAT = b"names_format"
NAMES_FORMAT = 2  #: the ``names`` key carries the parent and name (every link of an inode is a row; 1: not)

# Inode flags
F_GENERATED = 1  #: content produced by a builder (read-only through the mount)

S_IFMT = 0o170000
S_IFDIR = 0o040000
S_IFREG = 0o100000
S_IFLNK = 0o120000

INODE_FMT = ">IIIIQqqqQIIQ"  # mode uid gid nlink size atime mtime ctime generation flags rdev blocks
INODE_SIZE = struct.calcsize(INODE_FMT)  #: 72 bytes (schema 3)
INODE_FMT_V2 = INODE_FMT[:-1]  #: schemas 1 and 2: the same fields without ``blocks``
INODE_SIZE_V2 = struct.calcsize(INODE_FMT_V2)  #: 64 bytes
_INODE = struct.Struct(INODE_FMT)  # compiled once: every getattr decodes an inode
ALLOC_UNIT = 4096  #: bytes: a data chunk occupies whole pages of this size in ``st_blocks`` (I9)


def chunk_blocks(n_bytes: int) -> int:
    """``st_blocks`` (512-byte units) of a data chunk of ``n_bytes`` bytes: whole :data:`ALLOC_UNIT` pages
    (``stat(2)``: st_blocks counts 512-byte units allocated; tmpfs allocates 4 KiB pages)."""
    return -(-n_bytes // ALLOC_UNIT) * (ALLOC_UNIT // 512)


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


def dirent_value(child: int, mode: int) -> bytes:
    """``dirents`` value: the child's inode number and its file type (``mode & S_IFMT`` as one byte)."""
    return u64(child) + bytes(((mode & S_IFMT) >> 12,))


def dirent_type(raw: bytes) -> int | None:
    """File type bits (``S_IFMT`` part of a mode) of a ``dirents`` value, or None where unrecorded
    (an 8-byte value of schema 1)."""
    return (raw[8] << 12) if len(raw) > 8 else None


def name_fold(name: bytes) -> bytes:
    """A name as the ``names`` table sorts it: Unicode casefold, undecodable bytes kept (surrogateescape)."""
    return os.fsdecode(name).casefold().encode("utf-8", "surrogateescape")


def names_key(name: bytes, ino: int, parent: int) -> bytes:
    """Key of ``names`` for the link ``name`` of ``ino`` in directory ``parent``: casefolded name, NUL,
    inode number, parent directory's inode number, an 8-byte digest of the name (two links of one inode in
    one directory differing only in case are two keys; the whole name could exceed LMDB's key limit)."""
    return name_fold(name) + b"\0" + u64(ino) + u64(parent) + hashlib.blake2b(name, digest_size=8).digest()


@dataclass(slots=True)
class Inode:
    """One inode: POSIX attributes plus a generation bumped on every change (times in ns, size in bytes,
    ``blocks`` in 512-byte units: I9)."""

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
    blocks: int = 0

    def pack(self) -> bytes:
        """Encode as the 72-byte ``inodes`` value."""
        return _INODE.pack(
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
            self.blocks,
        )

    @classmethod
    def unpack(cls, ino: int, raw: bytes) -> Inode:
        """Decode an ``inodes`` value; raises ``struct.error`` on a corrupt record. A 64-byte record of
        schema ≤ 2 (served read-only before its migration) gets ``blocks`` from its size, as those releases
        reported it."""
        if len(raw) != INODE_SIZE_V2:
            return cls(ino, *_INODE.unpack(raw))
        node = cls(ino, *struct.unpack(INODE_FMT_V2, raw))
        node.blocks = (node.size + 511) // 512 if node.is_reg else 0
        return node

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
        return {
            "op": OP_NAMES.get(self.op, str(self.op)),
            "ino": self.ino,
            "parent": self.parent,
            "name": os.fsdecode(self.name),
            "time_ns": self.time_ns,
            "old_parent": self.old_parent,
            "old_name": os.fsdecode(self.old_name),
        }
