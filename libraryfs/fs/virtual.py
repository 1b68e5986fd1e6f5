"""The generated namespace: TOC pages, ``.index/``, the ``/.libraryfs/`` control plane, ``/.find/``,
``/.catalogue/``.

The view resolves every path that does not name a stored dirent through one :class:`VirtualNamespace`
(ARCHITECTURE §2), and this class is the one place that dispatches on the generated kinds
(:class:`~libraryfs.fs.nodes.Kind`): resolution, ``stat``, listings, ``open``, ``readlink`` and xattrs. The
names are :mod:`libraryfs.fs.generated`'s; the bytes come from :class:`~libraryfs.fs.tocpages.TocPages` and
:class:`~libraryfs.fs.control.ControlPlane`. Paths are absolute bytes, names raw bytes, errors
:mod:`libraryfs.errors` classes. Nothing here writes the store except :func:`set_index_claim`, a step of
its caller's write transaction. The design and what still differs from tmpfs: docs/posix.md "Generated
files and tools".

* every real directory that is not excluded (:mod:`libraryfs.fs.exclude`: dot-directories, ignored paths)
  resolves a generated, read-only ``INDEX.md`` and, when its TOC needs more than one page, a virtual
  ``.index/`` directory of pages ``0001.md`` …;
* generated names are resolved by lookup only, never listed by ``readdir``: tools that walk a tree (``cp -a``,
  ``rsync``, ``tar``, ``git status``, ``diff -r``) see exactly the stored files, so a copy never meets a
  name that exists but cannot be created (the kernel answers ``O_CREAT|O_EXCL`` with EEXIST from the
  lookup alone), and ``cat INDEX.md`` still reads the current TOC;
* ``INDEX.md`` is the user's name when the user wants it: a stored ``INDEX.md`` (created, renamed or
  written over the generated one) wins, and so does its absence once the user has removed an ``INDEX.md``
  there (the directory's *claim*, kept in its section meta, so ``unlink`` then ``stat`` says ENOENT as on
  any filesystem), and inside a git work tree, where every name is git's. The generated page 0 is then
  served as ``.index/INDEX.md``. Writing back bytes identical to the stored page 0 hands the name back to
  the generated TOC (:meth:`VirtualNamespace.absorbs`);
* a directory never indexed has no ``INDEX.md`` until it has settled (:func:`dir_settled`), so a copy
  filling it can still create its own;
* ``/.libraryfs/`` is the read-only control plane;
* ``/.find/<term>/`` resolves a name deterministically: its entries are relative symlinks to the matches
  (a match whose link target would exceed :data:`LINK_TARGET_MAX` bytes is left out: the kernel rejects a
  longer readlink reply, so the link would read as EIO);
* ``/.catalogue/`` (once the indexer has built it) holds the name catalogue's TOC pages: ``INDEX.md`` and
  ``.index/NNNN.md`` of the pseudo directory :data:`~libraryfs.fs.schema.CATALOGUE_INO`
  (:mod:`libraryfs.index.catalogue`); ``/.subjects/`` likewise the subject index's, of
  :data:`~libraryfs.fs.schema.SUBJECTS_INO` (:mod:`libraryfs.index.subjects`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from libraryfs.errors import AccessDenied, Exists, InvalidArgument, IsADir, NoAttr, NotADir, NotFound
from libraryfs.fs import generated as G
from libraryfs.fs import schema as S
from libraryfs.fs.control import ControlPlane
from libraryfs.fs.exclude import Placement, TocExclusion
from libraryfs.fs.nodes import Kind, Resolved, inode_stat
from libraryfs.fs.store import Txn, now_ns
from libraryfs.fs.tocpages import TocPages

#: Longest ``/.find`` symlink target in bytes: PATH_MAX - 1. The kernel refuses a longer READLINK reply
#: ("fuse: writing device: Invalid argument") and the reader gets EIO, so such matches are left out.
LINK_TARGET_MAX = 4095
FIND_MATCHES_MAX = 50  #: links listed under one ``/.find/<term>/``
CUT_NOTE = b"~ %d of %d shown; libraryfs find --limit lists more"  #: last link of a cut ``/.find/<term>/``
CUT_TARGET = b"more-matches-than-listed"  #: the cut note's (dangling) target
XATTR_PREFIX = "user.libraryfs."  #: namespace of the freshness xattrs of TOC pages

_DIR_MODE = S.S_IFDIR | 0o555
_FILE_MODE = S.S_IFREG | 0o444


CLAIM_KEY = "index_md_user"  #: section-meta ``extra`` key: the user has removed an INDEX.md here (module doc)
#: root names of the pseudo directories whose TOC pages are served like a directory's (no inode)
_PSEUDO_DIRS = {G.CATALOGUE_DIR: S.CATALOGUE_INO, G.SUBJECTS_DIR: S.SUBJECTS_INO}
SETTLE_S = 1.0  #: a directory never indexed shows ``INDEX.md`` once nothing in it changed for this long


def dir_settled(t: Txn, dir_ino: int, now: int, settle_s: float = SETTLE_S) -> bool:
    """Whether neither directory ``dir_ino`` nor any entry in it changed (ctime) in the ``settle_s``
    seconds before ``now`` (ns). A directory being filled by a copy (``cp -a``, ``tar x``) is not settled:
    until it is, a directory never indexed has no ``INDEX.md`` (no placeholder either), so the copy can
    create its own ``INDEX.md`` with ``O_EXCL`` (the kernel answers EEXIST from a positive lookup). The
    root is always settled."""
    if dir_ino == S.ROOT_INO:
        return True  # nothing copies into the root itself: its INDEX.md (or placeholder) is always there
    limit = now - int(settle_s * 1e9)
    node = t.inode(dir_ino)  # ctime only: every change sets it, and no one can set it (mtime can be future)
    if node is None or node.ctime_ns > limit:
        return False
    for _name, child in t.iter_dir(dir_ino):
        cn = t.inode(child)
        if cn is not None and cn.ctime_ns > limit:
            return False
    return True


def page0_moved(t: Txn, place: Placement, dir_ino: int) -> bool:
    """Whether page 0 of TOC directory ``dir_ino`` is served as ``.index/INDEX.md`` because ``INDEX.md``
    is the user's there: claimed (:func:`index_claimed`) or inside a git work tree (``place``)."""
    return place.work_tree or index_claimed(t, dir_ino)


def index_claimed(t: Txn, dir_ino: int) -> bool:
    """Whether ``INDEX.md`` in directory ``dir_ino`` is the user's name: a stored dirent of that name, or
    the claim a removal left. The generated page 0 is then ``.index/INDEX.md`` (the indexer renders its
    links for that place)."""
    if t.lookup(dir_ino, G.INDEX_NAME) is not None:
        return True
    m = t.section_meta(dir_ino)
    return m is not None and bool(m.extra.get(CLAIM_KEY))


def set_index_claim(t: Txn, dir_ino: int, claimed: bool) -> None:
    """Record (or drop) the claim of directory ``dir_ino`` on ``INDEX.md`` in its section meta (one step of
    the caller's write transaction; the indexer keeps ``extra`` when it rewrites the record)."""
    m = t.section_meta(dir_ino) or S.SectionMeta()
    if bool(m.extra.get(CLAIM_KEY)) == claimed:
        return
    m.extra = dict(m.extra)
    if claimed:
        m.extra[CLAIM_KEY] = True
    else:
        m.extra.pop(CLAIM_KEY, None)
    t.put_meta(dir_ino, m)


@dataclass(slots=True)
class Snapshot:
    """A generated file opened for reading: its bytes now, and what its first read costs."""

    content: bytes
    is_toc: bool  #: a TOC page (its first read counts as a TOC page read)
    toc_tokens: int  #: tokens of the page as served (0 for control files)
    key: tuple = ()  #: the object's key (its inode number is :meth:`VirtualNamespace.vino` of it)


class VirtualNamespace:
    """What the mount shows beyond the stored dirents (one instance per view).

    ``finder(txn, term) -> list[bytes]`` (optional, from the daemon) returns matching absolute paths for
    ``/.find/``; ``started_ns`` is when the mount started (ns; the times of generated directories).
    """

    def __init__(
        self,
        toc: TocPages,
        control: ControlPlane,
        *,
        started_ns: int,
        finder: Callable[[Txn, bytes], list[bytes]] | None = None,
    ) -> None:
        self.toc = toc
        self.control = control
        self.started_ns = started_ns
        self.finder = finder
        self.exclusion = TocExclusion()
        self._vino: dict[tuple, int] = {}
        #: key → the last ``st_size`` this mount reported for the object: what the kernel holds as its size
        self.reported_size: dict[tuple, int] = {}

    # -- where generated names exist ----------------------------------------------------------------------------
    def tocs_here(self, t: Txn, dir_ino: int) -> bool:
        """Whether real directory ``dir_ino`` has generated TOC names (not excluded: dot-directories and
        ignored paths have none, :mod:`libraryfs.fs.exclude`)."""
        return not self.exclusion.excluded(t, dir_ino)

    def page0_moved(self, t: Txn, dir_ino: int) -> bool:
        """Whether page 0 of TOC directory ``dir_ino`` is ``.index/INDEX.md`` (:func:`page0_moved`)."""
        return page0_moved(t, self.exclusion.classify(t, dir_ino), dir_ino)

    def pages_dir_exists(self, t: Txn, dir_ino: int) -> bool:
        """Whether ``.index/`` exists in TOC directory ``dir_ino``: more than one page, or page 0 moved there
        because ``INDEX.md`` is the user's."""
        return t.toc_page_count(dir_ino) > 1 or self.page0_moved(t, dir_ino)

    def check_new_name(self, t: Txn, name: bytes, parent: int) -> None:
        """Refuse ``name`` as a new dirent of real directory ``parent`` when it is generated there:
        ``.index`` in a TOC directory, ``.libraryfs`` and ``.find`` at the root. Exists while the generated
        object exists (so ``stat`` and ``mkdir`` agree), AccessDenied while it does not (``.index`` of a
        one-page TOC: the name is reserved, not taken). ``INDEX.md`` is never refused: the user's wins."""
        if parent == S.ROOT_INO and name in G.RESERVED_ROOT:
            if name in _PSEUDO_DIRS and not t.toc_page_count(_PSEUDO_DIRS[name]):
                raise AccessDenied(f"{os.fsdecode(name)} is reserved for libraryfs")  # not built yet
            raise Exists(f"{os.fsdecode(name)} is generated by libraryfs")
        if name == G.PAGES_DIR and self.tocs_here(t, parent):
            if self.pages_dir_exists(t, parent):
                raise Exists(f"{os.fsdecode(name)} is generated by libraryfs")
            raise AccessDenied(f"{os.fsdecode(name)} is reserved for libraryfs")

    def is_generated_name(self, t: Txn, name: bytes, parent: int) -> bool:
        """Whether a lookup of ``name`` in real directory ``parent`` with no stored dirent reaches a
        generated object's name (for the errno of removing it: EACCES rather than ENOENT)."""
        if parent == S.ROOT_INO and name in G.RESERVED_ROOT:
            return True
        return name == G.PAGES_DIR and self.tocs_here(t, parent)

    def absorbs(self, t: Txn, dir_ino: int, node: S.Inode) -> bool:
        """Whether regular file ``node``, about to be the user's ``INDEX.md`` in directory ``dir_ino``, is a
        copy of the generated page 0 written back (``cp .index/INDEX.md INDEX.md``, a copy of a tree that
        had it): its bytes equal the stored page 0. The caller then drops the stored file and the generated
        TOC takes the name back, so copies converge instead of shadowing the TOC with a stale one."""
        place = self.exclusion.classify(t, dir_ino)
        if not node.is_reg or place.excluded or place.work_tree:
            return False  # in a git work tree INDEX.md is git's: a checked-out copy stays
        raw = t.toc_page(dir_ino, 0)
        if raw is None or len(raw) != node.size:
            return False
        return t.read_data(node.ino, 0, node.size, node.size) == raw

    def vino(self, key: tuple) -> int:
        """Stable inode number (> :data:`~libraryfs.fs.generated.VIRT_BASE`) of virtual object ``key``."""
        v = self._vino.get(key)
        if v is None:
            v = self._vino[key] = G.VIRT_BASE + len(self._vino) + 1
        return v

    # -- resolution -------------------------------------------------------------------------------------------
    def resolve(self, t: Txn, dir_ino: int, parts: list[bytes], i: int) -> Resolved:
        """Resolve ``parts[i:]`` where ``parts[i]`` is not a dirent of real directory ``dir_ino``.

        Raises NotFound (no such generated object), NotADir (a path below ``INDEX.md``).
        """
        name, rest = parts[i], parts[i + 1 :]
        if name in G.RESERVED_NAMES:
            place = self.exclusion.classify(t, dir_ino)
            if not place.excluded:
                return self._resolve_toc(t, dir_ino, name, rest, page0_moved(t, place, dir_ino))
        if dir_ino == S.ROOT_INO and name == G.CTL_DIR:
            if not rest:
                return Resolved(Kind.CTL)
            if len(rest) == 1 and rest[0] in self.control.files():
                return Resolved(Kind.CTLFILE, name=rest[0])
            raise NotFound("no such control file")
        if dir_ino == S.ROOT_INO and name == G.FIND_DIR:
            return self._resolve_find(t, rest)
        pseudo = _PSEUDO_DIRS.get(name) if dir_ino == S.ROOT_INO else None
        if pseudo is not None and t.toc_page_count(pseudo):
            if not rest:
                return Resolved(Kind.CATALOGUE, pseudo)
            if rest[0] in (G.INDEX_NAME, G.PAGES_DIR):
                return self.resolve(t, pseudo, parts, i + 1)
            raise NotFound("no such catalogue page")
        raise NotFound("no such file or directory")

    def _resolve_toc(self, t: Txn, dir_ino: int, name: bytes, rest: list[bytes], claimed: bool) -> Resolved:
        """``INDEX.md`` or ``.index/…`` of TOC directory ``dir_ino`` (no stored dirent of that name);
        ``claimed``: page 0 is ``.index/INDEX.md`` (:func:`page0_moved`)."""
        if name == G.INDEX_NAME:
            if claimed:
                raise NotFound("INDEX.md is the user's here: the generated TOC is .index/INDEX.md")
            if rest:
                raise NotADir("not a directory")
            if t.toc_page(dir_ino, 0) is None and not dir_settled(t, dir_ino, now_ns()):
                raise NotFound("not indexed yet: the directory is still being filled")
            return Resolved(Kind.TOC, dir_ino, page=0)
        npages = t.toc_page_count(dir_ino)
        if npages <= 1 and not claimed:
            raise NotFound("no such file or directory")
        if not rest:
            return Resolved(Kind.PAGES, dir_ino)
        if len(rest) == 1:
            if claimed and rest[0] == G.INDEX_NAME:
                return Resolved(Kind.PAGE, dir_ino, page=0)
            page = G.page_number(rest[0])
            if page and page < npages:
                return Resolved(Kind.PAGE, dir_ino, page=page)
        raise NotFound("no such TOC page")

    def _resolve_find(self, t: Txn, rest: list[bytes]) -> Resolved:
        """``/.find`` itself, ``/.find/<term>`` or one of its links (``rest``: the components after
        ``.find``). The term passes :func:`libraryfs.index.find.check_term`, the rule of every front end:
        a blank one (``.find/ ``, a tab) is InvalidArgument (EINVAL), as ``libraryfs find "  "`` (exit 2)
        and the MCP ``find`` tool refuse it — before, it was an empty directory (trial 1203b). Raises
        NotFound for a link that is not a match."""
        if not rest:
            return Resolved(Kind.FIND)
        from libraryfs.index.find import check_term  # the index layer's rule; fs does not import it at load

        check_term(rest[0])  # NUL and > NAME_MAX never get here: the kernel refuses them first
        if len(rest) == 1:
            return Resolved(Kind.FINDTERM, name=rest[0])
        if len(rest) == 2:
            links = dict(self.find_links(t, rest[0]))
            if rest[1] in links:
                return Resolved(Kind.FINDLINK, name=rest[0], extra=links[rest[1]])
        raise NotFound("no such match")

    # -- attributes ---------------------------------------------------------------------------------------------
    def stat(self, key: tuple, mode: int, size: int, times_ns: int, nlink: int = 1) -> dict:
        """``stat`` dict of a virtual object (owned by the mounting user; sizes in bytes, times in ns)."""
        node = S.Inode(
            self.vino(key), mode, os.getuid(), os.getgid(), nlink, size, times_ns, times_ns, times_ns
        )
        node.blocks = S.chunk_blocks(size)  # as if stored
        self.reported_size[key] = size
        return inode_stat(node)

    def stat_snapshot(self, fh: int, size: int, key: tuple = ()) -> dict:
        """``fstat`` of open handle ``fh`` on a generated file (the object ``key``): its snapshot of ``size``
        bytes."""
        return self.stat(key or ("h", fh), _FILE_MODE, size, self.started_ns)

    def size_is_known(self, snap: Snapshot) -> bool:
        """Whether the kernel holds ``len(snap.content)`` as the object's size (the last size this mount
        reported for it). When it does not, the page cache must not serve the snapshot: the kernel would
        cut reads at the old size (for up to the attribute timeout, or until the mount invalidates it)."""
        return self.reported_size.get(snap.key) == len(snap.content)

    def getattr(self, t: Txn, r: Resolved) -> dict:
        """``stat`` of a resolved virtual object; TOC times follow the directory and the TOC generation."""
        k = r.kind
        if k.is_toc_page:
            content = self.toc.served(t, r.ino, r.page)[0]
            dnode = t.inode(r.ino)
            mtime = max(dnode.mtime_ns if dnode else self.started_ns, self.toc.time_ns(t))
            return self.stat(("toc", r.ino, r.page), _FILE_MODE, len(content), mtime)
        if k is Kind.PAGES:
            return self.stat(("pages", r.ino), _DIR_MODE, 0, self.toc.time_ns(t), 2)
        if k is Kind.CTL or k is Kind.FIND:
            return self.stat((k.value,), _DIR_MODE, 0, self.started_ns, 2)
        if k is Kind.FINDTERM:
            return self.stat(("findterm", r.name), _DIR_MODE, 0, self.started_ns, 2)
        if k is Kind.CATALOGUE:
            subdirs = 1 if t.toc_page_count(r.ino) > 1 else 0
            return self.stat(("catalogue", r.ino), _DIR_MODE, 0, self.toc.time_ns(t), 2 + subdirs)
        if k is Kind.FINDLINK:
            return self.stat(("findlink", r.name, r.extra), S.S_IFLNK | 0o777, len(r.extra), self.started_ns)
        if k is Kind.CTLFILE:
            content = self.control.content(t, r.name)
            return self.stat(("ctl", r.name), _FILE_MODE, len(content), now_ns())
        raise NotFound("no such file or directory")

    def getxattr(self, t: Txn, r: Resolved, name: bytes) -> bytes:
        """``user.libraryfs.*`` freshness facts of a TOC page (generation, built_from, pages, stale).

        Raises NoAttr for any other name or virtual object.
        """
        if r.kind.is_toc_page:
            facts = self.toc.facts(t, r.ino)
            key = name.decode(errors="replace")
            if key.startswith(XATTR_PREFIX) and key[len(XATTR_PREFIX) :] in facts:
                return str(facts[key[len(XATTR_PREFIX) :]]).encode()
        raise NoAttr("no such attribute")

    def listxattr(self, t: Txn, r: Resolved) -> list[bytes]:
        """Names of the extended attributes of a virtual object (only TOC pages have any)."""
        if r.kind.is_toc_page:
            return [(XATTR_PREFIX + k).encode() for k in self.toc.facts(t, r.ino)]
        return []

    # -- listings, open, readlink ---------------------------------------------------------------------------------
    def _toc_entries(self, t: Txn, dir_ino: int) -> list[tuple[bytes, int, int]]:
        """``INDEX.md`` and (when paged) ``.index`` of the name catalogue's pseudo directory ``dir_ino``:
        listed, since ``/.catalogue/`` is itself a generated directory that only holds them."""
        out = [(G.INDEX_NAME, S.S_IFREG, self.vino(("toc", dir_ino, 0)))]
        if t.toc_page_count(dir_ino) > 1:
            out.append((G.PAGES_DIR, S.S_IFDIR, self.vino(("pages", dir_ino))))
        return out

    def dir_inos(self, t: Txn, r: Resolved) -> tuple[int, int]:
        """``(ino, parent ino)`` of a virtual directory, as ``stat`` reports them (the ``.`` and ``..``
        dirents). Raises NotADir for a virtual file."""
        k = r.kind
        if not k.is_virtual_dir:
            raise NotADir("not a directory")
        ino = self.getattr(t, r)["st_ino"]
        if k is Kind.PAGES:
            return ino, r.ino
        if k is Kind.FINDTERM:
            return ino, self.vino((Kind.FIND.value,))
        return ino, S.ROOT_INO

    def listdir(self, t: Txn, r: Resolved) -> list[tuple[bytes, int, int]]:
        """Entries ``(name, type bits, ino)`` of a virtual directory. Raises NotADir for a virtual file."""
        k = r.kind
        if k is Kind.PAGES:
            moved = self.page0_moved(t, r.ino)
            out = [(G.INDEX_NAME, S.S_IFREG, self.vino(("toc", r.ino, 0)))] if moved else []
            out.extend(
                (G.page_name(p), S.S_IFREG, self.vino(("toc", r.ino, p)))
                for p in range(1, t.toc_page_count(r.ino))
            )
            return out
        if k is Kind.CTL:
            return [(name, S.S_IFREG, self.vino(("ctl", name))) for name in self.control.files()]
        if k is Kind.CATALOGUE:
            return self._toc_entries(t, r.ino)
        if k is Kind.FIND:
            return []
        if k is Kind.FINDTERM:
            return [
                (name, S.S_IFLNK, self.vino(("findlink", r.name, target)))
                for name, target in self.find_links(t, r.name)
            ]
        raise NotADir("not a directory")

    def open(self, t: Txn, r: Resolved, flags: int) -> Snapshot:
        """Snapshot a generated file for reading.

        Raises IsADir (a virtual directory), AccessDenied (opened for writing or with O_TRUNC), NotFound.
        """
        if r.kind.is_virtual_dir:
            raise IsADir("is a directory")
        if flags & os.O_ACCMODE != os.O_RDONLY or flags & os.O_TRUNC:
            raise AccessDenied("generated files are read-only")
        if r.kind.is_toc_page:
            content, raw, marker = self.toc.served(t, r.ino, r.page)
            tokens = self.toc.tokens(t, r.ino, r.page, raw, marker)
            return Snapshot(content, True, tokens, ("toc", r.ino, r.page))
        if r.kind is Kind.CTLFILE:
            return Snapshot(self.control.content(t, r.name), False, 0, ("ctl", r.name))
        raise NotFound("no such file")

    def readlink(self, r: Resolved) -> bytes:
        """Target of a generated symlink (a ``/.find`` match). Raises InvalidArgument for anything else."""
        if r.kind is Kind.FINDLINK:
            return r.extra
        raise InvalidArgument("not a symbolic link")

    def removal_is_noop(self, r: Resolved, want_dir: bool) -> bool:
        """Whether removing ``r`` succeeds without effect: a page of ``.index/`` (``unlink``), or ``.index/``
        itself (``rmdir``, ``want_dir``). They are derived from the directory and come back. (Removing the
        generated ``INDEX.md`` is not a no-op: it claims the name, :func:`set_index_claim`.)"""
        return r.kind is Kind.PAGES if want_dir else r.kind is Kind.PAGE

    # -- finder -------------------------------------------------------------------------------------------------
    def find_links(self, t: Txn, term: bytes) -> list[tuple[bytes, bytes]]:
        """``(link name, relative target)`` for the matches of ``term`` under ``/.find/<term>/`` (at most
        :data:`FIND_MATCHES_MAX`, named ``NN-<name>`` in rank order), and, when more matched than are
        listed, a last dangling link named ``~ N of TOTAL shown; …`` that says so (the cut note).

        The finder returns a list of absolute paths or an object with ``paths`` and ``total``
        (:class:`libraryfs.index.find.Found`). A match whose target (``../..`` + its absolute path) is
        longer than :data:`LINK_TARGET_MAX` bytes is left out, and the others are numbered without it: the
        kernel cannot return such a link (EIO).
        """
        if self.finder is None:
            return []
        found = self.finder(t, term)
        paths = getattr(found, "paths", found)
        total = getattr(found, "total", len(paths))
        targets = [b"../.." + p for p in paths]
        out = []
        fitting = [x for x in targets if len(x) <= LINK_TARGET_MAX][:FIND_MATCHES_MAX]
        for k, target in enumerate(fitting, start=1):
            base = target.rstrip(b"/").rsplit(b"/", 1)[-1]
            out.append((_fit_name(b"%02d-" % k + base), target))
        if total > min(len(paths), FIND_MATCHES_MAX):  # cut by the limit (a link left out for length is not)
            out.append((CUT_NOTE % (len(out), total), CUT_TARGET))
        return out


def _fit_name(name: bytes) -> bytes:
    """``name`` cut to :data:`~libraryfs.fs.schema.NAME_MAX` bytes, keeping a short extension and marking the cut with ``…``
    (a ``.find/`` link named after a 251-byte file gains its ``NN-`` prefix; the kernel refuses longer names
    with ENAMETOOLONG)."""
    if len(name) <= S.NAME_MAX:
        return name
    dot = name.rfind(b".")
    ext = name[dot:] if dot > 0 and len(name) - dot <= 16 else b""
    mark = "…".encode()
    return name[: S.NAME_MAX - len(ext) - len(mark)] + mark + ext
