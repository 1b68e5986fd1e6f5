"""The generated and virtual namespace: TOC pages, ``.index/``, the ``/.libraryfs/`` control plane, ``/.find/``.

:class:`~libraryfs.fs.view.LibraryView` keeps the POSIX semantics over the store and hands every path that does
not name a stored dirent to one :class:`VirtualNamespace` (ARCHITECTURE §2). Paths are absolute bytes; names
are raw bytes; errors are :mod:`libraryfs.errors` classes. Nothing here writes the store.

* every real directory shows a generated, read-only ``INDEX.md`` (TOC page 0 written by the indexer, or a
  pending placeholder until it has run) and, when its TOC needs more than one page, a virtual ``.index/``
  directory of pages ``0001.md`` …;
* ``/.libraryfs/`` is the read-only control plane: ``status.json``, ``stats.json``, ``journal``, ``budget``;
* ``/.find/<term>/`` resolves a name deterministically: its entries are relative symlinks to the matches
  (a match whose link target would exceed :data:`LINK_TARGET_MAX` bytes is left out: the kernel rejects a
  longer readlink reply, so the link would read as EIO).

When the indexer is not running (nobody holds ``<libdir>/indexer.lock``) and journal records are pending,
every TOC page served gets one ``> **Stale index**`` line after its header comment (:meth:`toc_served`), so an
agent reading it knows the TOC lags the directory.

The namespace also does the read accounting behind ``stats.json`` and ``budget``: each first read of a TOC
page costs one read and its exact o200k_base token count (stored by the indexer); an entry read costs its
share of the entry's token count (:mod:`libraryfs.fs.stats`).
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import time
from dataclasses import dataclass

from libraryfs.errors import AccessDenied, IsADir, NoAttr, NotADir, NotFound, QuotaExceeded
from libraryfs.fs import schema as S
from libraryfs.fs.stats import ReadStats
from libraryfs.fs.store import Store, Txn, now_ns

INDEX_NAME = b"INDEX.md"
PAGES_DIR = b".index"
CTL_DIR = b".libraryfs"
FIND_DIR = b".find"
#: Names the user cannot create anywhere (they are generated).
RESERVED_NAMES = frozenset({INDEX_NAME, PAGES_DIR})
#: Names the user cannot create at the root.
RESERVED_ROOT = frozenset({CTL_DIR, FIND_DIR})

BLKSIZE = 128 * 1024  #: st_blksize: preferred I/O size in bytes (tools size their buffers from it)
VIRT_BASE = 1 << 60  #: virtual inode numbers start here (use_ino)
#: Virtual kinds that are directories (opening one is EISDIR).
VIRTUAL_DIRS = ("pages", "ctl", "find", "findterm")
#: Longest ``/.find`` symlink target in bytes: PATH_MAX - 1. The kernel refuses a longer READLINK reply
#: ("fuse: writing device: Invalid argument") and the reader gets EIO, so such matches are left out.
LINK_TARGET_MAX = 4095
INDEXER_LOCK = "indexer.lock"  #: file in the library directory the indexer daemon holds an exclusive flock on
INDEXER_CHECK_S = 1.0  #: how long (seconds) one answer to "is the indexer running?" is reused


@dataclass
class Resolved:
    """Result of resolving a path: a real inode or a virtual object."""

    kind: str  # "real" | "toc" | "pages" | "page" | "ctl" | "ctlfile" | "find" | "findterm" | "findlink"
    ino: int = 0  # real inode, or the directory a toc/pages/page belongs to
    node: S.Inode | None = None
    page: int = 0
    name: bytes = b""
    extra: bytes = b""


def is_reserved(name: bytes, parent: int) -> bool:
    """Whether ``name`` in directory inode ``parent`` is generated (so the user cannot create it)."""
    return name in RESERVED_NAMES or (parent == S.ROOT_INO and name in RESERVED_ROOT)


def reserved_exists(t: Txn, name: bytes, parent: int) -> bool:
    """Whether the generated object ``name`` in directory inode ``parent`` exists now: ``INDEX.md`` always,
    ``.index`` only while the directory's TOC has more than one page, ``/.libraryfs`` and ``/.find`` always.
    False for a name that is not reserved there."""
    if name == INDEX_NAME:
        return True
    if name == PAGES_DIR:
        return t.toc_page_count(parent) > 1
    return parent == S.ROOT_INO and name in RESERVED_ROOT


def indexer_running(libdir: str) -> bool:
    """Whether an indexer holds ``<libdir>/indexer.lock`` (exclusive flock; a non-blocking shared flock of
    ours fails then). No lock file: not running. An unexpected error counts as running (claim no staleness)."""
    try:
        fd = os.open(os.path.join(libdir, INDEXER_LOCK), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def page_name(page: int) -> bytes:
    """File name of TOC page ``page`` (>= 1) in ``.index/``: ``b"0001.md"``."""
    return b"%04d.md" % page


def page_number(name: bytes) -> int:
    """Page number of a ``.index/`` file name, 0 when ``name`` is not one."""
    if len(name) == 7 and name.endswith(b".md") and name[:4].isdigit():
        return int(name[:4])
    return 0


class VirtualNamespace:
    """What the mount shows beyond the stored dirents (one instance per :class:`LibraryView`).

    ``finder(txn, term) -> list[bytes]`` returns matching absolute paths for ``/.find/``;
    ``status_provider() -> dict`` adds mount-process facts to ``status.json``; ``budget`` (``charge(reads=,
    tokens=)``, ``to_json()``) meters reads; ``count_tokens(bytes) -> int`` counts a TOC page the indexer has
    not counted (default ``bytes/4``). All are optional and supplied by higher layers (the daemon).
    """

    def __init__(
        self,
        store: Store,
        *,
        read_only: bool = False,
        finder=None,
        status_provider=None,
        budget=None,
        count_tokens=None,
    ) -> None:
        self.store = store
        self.read_only = read_only
        self.finder = finder
        self.status_provider = status_provider
        self.budget = budget
        self.stats = ReadStats()
        self.started_ns = now_ns()
        self._count_tokens = count_tokens
        self._vino: dict[tuple, int] = {}
        self._toc_tokens_cache: dict[tuple[int, int, bytes], int] = {}
        self._indexer_seen: tuple[float, bool] = (float("-inf"), True)  # (monotonic s, running)

    # ------------------------------------------------------------------------------------------------
    # resolution and attributes
    def vino(self, key: tuple) -> int:
        """Stable inode number (>= :data:`VIRT_BASE`) of the virtual object ``key`` for this mount."""
        v = self._vino.get(key)
        if v is None:
            v = self._vino[key] = VIRT_BASE + len(self._vino) + 1
        return v

    def resolve(self, t: Txn, dir_ino: int, parts: list[bytes], i: int) -> Resolved:
        """Resolve ``parts[i:]`` where ``parts[i]`` is not a dirent of real directory ``dir_ino``.

        Raises NotFound (no such generated object), NotADir (a path below ``INDEX.md``).
        """
        name = parts[i]
        rest = parts[i + 1 :]
        if name == INDEX_NAME:
            if rest:
                raise NotADir("not a directory")
            return Resolved("toc", dir_ino, page=0)
        if name == PAGES_DIR and t.toc_page_count(dir_ino) > 1:
            if not rest:
                return Resolved("pages", dir_ino)
            if len(rest) == 1:
                page = page_number(rest[0])
                if page and page < t.toc_page_count(dir_ino):
                    return Resolved("page", dir_ino, page=page)
            raise NotFound("no such TOC page")
        if dir_ino == S.ROOT_INO and name == CTL_DIR:
            if not rest:
                return Resolved("ctl")
            if len(rest) == 1 and rest[0] in self.ctl_files():
                return Resolved("ctlfile", name=rest[0])
            raise NotFound("no such control file")
        if dir_ino == S.ROOT_INO and name == FIND_DIR:
            if not rest:
                return Resolved("find")
            if len(rest) == 1:
                return Resolved("findterm", name=rest[0])
            if len(rest) == 2:
                links = dict(self.find_links(t, rest[0]))
                if rest[1] in links:
                    return Resolved("findlink", name=rest[0], extra=links[rest[1]])
            raise NotFound("no such match")
        raise NotFound("no such file or directory")

    def stat(self, key: tuple, mode: int, size: int, times_ns: int, nlink: int = 1) -> dict:
        """``stat`` dict of a virtual object (owned by the mounting user; sizes in bytes, times in ns)."""
        uid, gid = os.getuid(), os.getgid()
        return {
            "st_ino": self.vino(key),
            "st_mode": mode,
            "st_nlink": nlink,
            "st_uid": uid,
            "st_gid": gid,
            "st_size": size,
            "st_atime": times_ns,
            "st_mtime": times_ns,
            "st_ctime": times_ns,
            "st_blocks": (size + 511) // 512,
            "st_blksize": BLKSIZE,
        }

    def stat_snapshot(self, fh: int, size: int) -> dict:
        """``fstat`` of open handle ``fh`` on a generated file: its snapshot of ``size`` bytes."""
        return self.stat(("h", fh), S.S_IFREG | 0o444, size, self.started_ns)

    def getattr(self, t: Txn, r: Resolved) -> dict:
        """``stat`` of a resolved virtual object; TOC times follow the directory and the TOC generation."""
        if r.kind in ("toc", "page"):
            content = self.toc_served(t, r.ino, r.page)
            dnode = t.inode(r.ino)
            mtime = dnode.mtime_ns if dnode else self.started_ns
            return self.stat(
                ("toc", r.ino, r.page), S.S_IFREG | 0o444, len(content), max(mtime, self._toc_time(t))
            )
        if r.kind == "pages":
            return self.stat(("pages", r.ino), S.S_IFDIR | 0o555, 0, self._toc_time(t), 2)
        if r.kind in ("ctl", "find"):
            return self.stat((r.kind,), S.S_IFDIR | 0o555, 0, self.started_ns, 2)
        if r.kind == "findterm":
            return self.stat(("findterm", r.name), S.S_IFDIR | 0o555, 0, self.started_ns, 2)
        if r.kind == "findlink":
            return self.stat(("findlink", r.name, r.extra), S.S_IFLNK | 0o777, len(r.extra), self.started_ns)
        if r.kind == "ctlfile":
            content = self.ctl_content(t, r.name)
            return self.stat(("ctl", r.name), S.S_IFREG | 0o444, len(content), now_ns())
        raise NotFound("no such file or directory")

    # ------------------------------------------------------------------------------------------------
    # listings, open, xattrs
    def dir_entries(self, t: Txn, dir_ino: int) -> list[tuple[bytes, int, int]]:
        """Generated entries ``(name, type bits, ino)`` listed first in real directory ``dir_ino``."""
        out = [(INDEX_NAME, S.S_IFREG, self.vino(("toc", dir_ino, 0)))]
        if t.toc_page_count(dir_ino) > 1:
            out.append((PAGES_DIR, S.S_IFDIR, self.vino(("pages", dir_ino))))
        if dir_ino == S.ROOT_INO:
            out.append((CTL_DIR, S.S_IFDIR, self.vino(("ctl",))))
            out.append((FIND_DIR, S.S_IFDIR, self.vino(("find",))))
        return out

    def listdir(self, t: Txn, r: Resolved) -> list[tuple[bytes, int, int]]:
        """Entries ``(name, type bits, ino)`` of a virtual directory. Raises NotADir for a virtual file."""
        if r.kind == "pages":
            return [
                (page_name(p), S.S_IFREG, self.vino(("toc", r.ino, p)))
                for p in range(1, t.toc_page_count(r.ino))
            ]
        if r.kind == "ctl":
            return [(name, S.S_IFREG, self.vino(("ctl", name))) for name in self.ctl_files()]
        if r.kind == "find":
            return []
        if r.kind == "findterm":
            return [
                (name, S.S_IFLNK, self.vino(("findlink", r.name, target)))
                for name, target in self.find_links(t, r.name)
            ]
        raise NotADir("not a directory")

    def open(self, t: Txn, r: Resolved, flags: int) -> tuple[bytes, str, int]:
        """Snapshot a generated file for reading: ``(content bytes, handle kind "toc"|"ctl", toc tokens)``.

        Raises IsADir (a virtual directory), AccessDenied (opened for writing or with O_TRUNC), NotFound.
        """
        if r.kind in VIRTUAL_DIRS:
            raise IsADir("is a directory")
        if flags & os.O_ACCMODE != os.O_RDONLY or flags & os.O_TRUNC:
            raise AccessDenied("generated files are read-only")
        if r.kind in ("toc", "page"):
            content, raw, marker = self._served(t, r.ino, r.page)
            tokens = self._toc_tokens(t, r.ino, r.page, raw)
            if marker:
                tokens += self._count_tokens(marker) if self._count_tokens else (len(marker) + 3) // 4
            return content, "toc", tokens
        if r.kind == "ctlfile":
            return self.ctl_content(t, r.name), "ctl", 0
        raise NotFound("no such file")

    def getxattr(self, t: Txn, r: Resolved, name: bytes) -> bytes:
        """``user.libraryfs.*`` freshness facts of a TOC page (generation, built_from, pages, stale).

        Raises NoAttr for any other name or virtual object.
        """
        if r.kind in ("toc", "page"):
            facts = self._toc_facts(t, r.ino)
            key = name.decode(errors="replace")
            if key.startswith("user.libraryfs.") and key[15:] in facts:
                return str(facts[key[15:]]).encode()
        raise NoAttr("no such attribute")

    def listxattr(self, t: Txn, r: Resolved) -> list[bytes]:
        """Names of the extended attributes of a virtual object (only TOC pages have any)."""
        if r.kind in ("toc", "page"):
            return [b"user.libraryfs." + k.encode() for k in self._toc_facts(t, r.ino)]
        return []

    # ------------------------------------------------------------------------------------------------
    # TOC pages
    def _toc_time(self, t: Txn) -> int:
        return max(self.started_ns, t.cfg_int(S.CFG_TOC_GEN))

    def toc_bytes(self, t: Txn, dir_ino: int, page: int) -> bytes:
        """TOC page ``page`` of directory ``dir_ino`` as stored by the indexer, or the pending placeholder
        for page 0. Raises NotFound for a missing page > 0."""
        raw = t.toc_page(dir_ino, page)
        if raw is not None:
            return raw
        if page:
            raise NotFound("no such TOC page")
        return self._pending_toc(t, dir_ino)

    def toc_served(self, t: Txn, dir_ino: int, page: int) -> bytes:
        """The bytes served for TOC page ``page`` of ``dir_ino`` now: :meth:`toc_bytes` plus the stale marker
        when it applies. ``getattr`` and ``open`` both use this, so ``st_size`` equals the bytes read (C14)."""
        return self._served(t, dir_ino, page)[0]

    def _served(self, t: Txn, dir_ino: int, page: int) -> tuple[bytes, bytes, bytes]:
        """``(served bytes, stored page bytes, marker line inserted or b"")`` of one TOC page. The marker
        goes after the first line when that is the header comment (``<!--``); pages without one are served
        as stored."""
        raw = self.toc_bytes(t, dir_ino, page)
        marker = self._stale_line(t) if raw.startswith(b"<!--") else b""
        if not marker:
            return raw, raw, b""
        nl = raw.find(b"\n")
        head, tail = (raw + b"\n", b"") if nl < 0 else (raw[: nl + 1], raw[nl + 1 :])
        return head + marker + tail, raw, marker

    def _stale_line(self, t: Txn) -> bytes:
        """The ``> **Stale index**`` line (with its newline) when the indexer is not running and journal
        records are pending, else ``b""``. The lock test is reused for :data:`INDEXER_CHECK_S` seconds."""
        pending = t.journal_tail() - t.cfg_int(S.CFG_CURSOR)
        if pending <= 0 or self._indexer_is_running():
            return b""
        libdir = shlex.quote(os.fsdecode(self.store.libdir))
        return (
            f"> **Stale index**: the indexer is not running; {pending} change(s) are not reflected here "
            f"(run `libraryfs index {libdir}`).\n"
        ).encode("utf-8", "surrogateescape")

    def _indexer_is_running(self) -> bool:
        checked_s, running = self._indexer_seen
        now_s = time.monotonic()
        if now_s - checked_s >= INDEXER_CHECK_S:
            running = indexer_running(os.fsdecode(self.store.libdir))
            self._indexer_seen = (now_s, running)
        return running

    def _pending_toc(self, t: Txn, dir_ino: int) -> bytes:
        """What INDEX.md shows before the indexer has built it: the first names, marked pending."""
        path = t.path_of(dir_ino) or b"/"
        lines = [
            f"<!-- libraryfs toc: dir={os.fsdecode(path)} page=0 generation=0 stale=yes -->",
            f"# Index of {os.fsdecode(path)}",
            "",
            "_Index pending: the indexer has not summarised this directory yet._",
            "",
        ]
        for k, (name, _child) in enumerate(t.iter_dir(dir_ino)):
            if k >= 40:
                lines.append("- …")
                break
            lines.append(f"- {os.fsdecode(name)!s}".replace("\n", "\\n"))
        return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")

    def _toc_facts(self, t: Txn, dir_ino: int) -> dict:
        m = t.section_meta(dir_ino) or S.SectionMeta()
        return {
            "generation": m.toc_generation,
            "built_from": m.toc_journal_seq or 0,
            "pages": t.toc_page_count(dir_ino),
            "stale": int(m.toc_journal_seq is None),
        }

    def _toc_tokens(self, t: Txn, dir_ino: int, page: int, content: bytes) -> int:
        # the indexer stores each page's o200k count (meta "toc_page_tokens"): the mount never loads the
        # tokenizer (~2 s) on a read path
        m = t.section_meta(dir_ino)
        counts = m.toc_page_tokens if m is not None else []
        if page < len(counts) and counts[page] and t.toc_page(dir_ino, page) == content:
            return counts[page]
        key = (dir_ino, page, content[:200])
        n = self._toc_tokens_cache.get(key)
        if n is None:
            n = self._count_tokens(content) if self._count_tokens else (len(content) + 3) // 4
            if len(self._toc_tokens_cache) > 10_000:
                self._toc_tokens_cache.clear()
            self._toc_tokens_cache[key] = n
        return n

    # ------------------------------------------------------------------------------------------------
    # read accounting (stats.json, budget)
    def charge_toc(self, pid: int, nbytes: int, toc_tokens: int) -> None:
        """Count the first read of a TOC page handle: one read and ``toc_tokens``. Raises QuotaExceeded."""
        if self.budget is not None:
            self._charge(reads=1, tokens=toc_tokens)
        self.stats.toc_page(pid, nbytes, toc_tokens)

    def charge_entry(self, t: Txn, ino: int, size: int, nbytes: int, pid: int, first: bool) -> None:
        """Count ``nbytes`` read from entry ``ino`` of ``size`` bytes (``first``: the handle's first read
        costs one read). Raises QuotaExceeded when the budget is spent (nothing is counted then)."""
        tokens = self._entry_tokens(t, ino, size, nbytes)
        if self.budget is not None:
            self._charge(reads=1 if first else 0, tokens=tokens)
        self.stats.entry(pid, nbytes, tokens, first)

    def count_bytes(self, pid: int, nbytes: int) -> None:
        """Count bytes read from a control file (no tokens, no budget)."""
        self.stats.bytes_only(pid, nbytes)

    def _entry_tokens(self, t: Txn, ino: int, size: int, nbytes: int) -> int:
        m = t.entry_meta(ino)
        if m is None or m.tokens is None or m.size != size or not size:
            return (nbytes + 3) // 4
        return max(1, round(m.tokens * nbytes / size))

    def _charge(self, reads: int, tokens: int) -> None:
        try:
            self.budget.charge(reads=reads, tokens=tokens)
        except Exception as e:  # the budget's own exception type (libraryfs.features.code.budget)
            if type(e).__name__ == "BudgetExceeded":
                raise QuotaExceeded(str(e)) from e
            raise

    # ------------------------------------------------------------------------------------------------
    # control plane and finder
    def ctl_files(self) -> list[bytes]:
        """Names in ``/.libraryfs/`` (``budget`` only when a budget is set)."""
        names = [b"status.json", b"stats.json", b"journal"]
        if self.budget is not None:
            names.append(b"budget")
        return names

    def ctl_content(self, t: Txn, name: bytes) -> bytes:
        """Bytes of control file ``name`` now (``journal``: the last 100 records as JSON lines)."""
        if name == b"status.json":
            return (json.dumps(self.status(t), indent=2, sort_keys=True) + "\n").encode()
        if name == b"stats.json":
            return (json.dumps(self.stats.to_json(), indent=2, sort_keys=True) + "\n").encode()
        if name == b"journal":
            tail = t.journal_tail()
            recs = t.journal_since(max(0, tail - 100), 100)
            return "".join(json.dumps({"seq": s, **r.to_json()}) + "\n" for s, r in recs).encode()
        if name == b"budget" and self.budget is not None:
            return (self.budget.to_json() + "\n").encode()
        raise NotFound("no such control file")

    def status(self, t: Txn) -> dict:
        """The facts of ``.libraryfs/status.json`` (indexer status, journal backlog, TOC generation)."""
        tail = t.journal_tail()
        cursor = t.cfg_int(S.CFG_CURSOR)
        out = {
            "library": self.store.libdir,
            "read_only": self.read_only,
            "journal_tail": tail,
            "indexer_cursor": cursor,
            "pending_records": max(0, tail - cursor),
            "toc_generation": t.cfg_int(S.CFG_TOC_GEN),
            "indexer": S.loads(t.cfg(S.CFG_INDEXER_STATUS), {}),
            "inodes": t.count(S.DB_INODES),
            "map": self.store.map_info(),
            "mount_started_ns": self.started_ns,
        }
        if self.status_provider is not None:
            out["mount"] = self.status_provider()
        return out

    def find_links(self, t: Txn, term: bytes) -> list[tuple[bytes, bytes]]:
        """``(link name, relative target)`` for the matches of ``term`` under ``/.find/<term>/`` (max 50).

        A match whose target (``../..`` + its absolute path) is longer than :data:`LINK_TARGET_MAX` bytes is
        left out, and the others are numbered without it: the kernel cannot return such a link (EIO).
        """
        if self.finder is None:
            return []
        targets = [b"../.." + p for p in self.finder(t, term)]
        out = []
        for k, target in enumerate([x for x in targets if len(x) <= LINK_TARGET_MAX][:50], start=1):
            base = target.rsplit(b"/", 1)[-1]
            out.append((b"%02d-" % k + base, target))
        return out
