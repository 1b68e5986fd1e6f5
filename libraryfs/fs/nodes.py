"""What a path resolves to (:class:`Resolved`, its :class:`Kind`) and how an object is described to ``stat``.

A path names either a stored inode (:attr:`Kind.REAL`) or one of the generated objects of
:mod:`libraryfs.fs.generated`. Only :class:`~libraryfs.fs.virtual.VirtualNamespace` dispatches on the
generated kinds; every other service asks :attr:`Resolved.is_real` and hands generated objects to it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from libraryfs.fs import schema as S

BLKSIZE = 128 * 1024  #: st_blksize: preferred I/O size in bytes (tools size their buffers from it)


class Kind(enum.Enum):
    """What a resolved path names."""

    REAL = "real"  #: a stored inode (any file type)
    TOC = "toc"  #: ``<dir>/INDEX.md``: TOC page 0 of a real directory
    PAGES = "pages"  #: ``<dir>/.index/``: the directory of further TOC pages
    PAGE = "page"  #: ``<dir>/.index/NNNN.md``: TOC page NNNN
    CTL = "ctl"  #: ``/.libraryfs/``: the control plane
    CTLFILE = "ctlfile"  #: ``/.libraryfs/<name>``: a control file
    FIND = "find"  #: ``/.find/``: the finder
    FINDTERM = "findterm"  #: ``/.find/<term>/``: the matches of a term
    FINDLINK = "findlink"  #: ``/.find/<term>/<NN-name>``: a symlink to one match
    #: ``/.catalogue/`` or ``/.subjects/``: the name catalogue or the subject index; its pages are the
    #: TOC/PAGES/PAGE of pseudo directory :data:`~libraryfs.fs.schema.CATALOGUE_INO` or
    #: :data:`~libraryfs.fs.schema.SUBJECTS_INO` (``Resolved.ino``)
    CATALOGUE = "catalogue"

    @property
    def is_toc_page(self) -> bool:
        """A generated TOC page (``INDEX.md`` or ``.index/NNNN.md``)."""
        return self is Kind.TOC or self is Kind.PAGE

    @property
    def is_virtual_dir(self) -> bool:
        """A generated directory (``.index/``, ``/.libraryfs/``, ``/.find/``, ``/.find/<term>/``,
        ``/.catalogue/``)."""
        return self in _VIRTUAL_DIRS


_VIRTUAL_DIRS = frozenset({Kind.PAGES, Kind.CTL, Kind.FIND, Kind.FINDTERM, Kind.CATALOGUE})


@dataclass(slots=True)
class Resolved:
    """Result of resolving a path: a real inode or a generated object.

    ``ino``: the real inode, or the real directory a TOC page or ``.index/`` belongs to; ``node``: the
    real inode's record (REAL only); ``page``: the TOC page number (TOC: 0, PAGE: ≥ 1); ``name``: the
    control file or the finder's term; ``extra``: a finder link's target.
    """

    kind: Kind
    ino: int = 0
    node: S.Inode | None = None
    page: int = 0
    name: bytes = b""
    extra: bytes = b""

    @property
    def is_real(self) -> bool:
        """Whether the path names a stored inode (``node`` is set)."""
        return self.kind is Kind.REAL


def inode_stat(node: S.Inode) -> dict:
    """The ``stat`` dict the adapter hands to libfuse for inode record ``node`` (stored, or built in memory for
        a generated object): sizes in bytes, times in ns, ``st_blocks`` = the allocated 512-byte units (schema I9:
    holes cost nothing), ``st_blksize`` =
        :data:`BLKSIZE` (stat(2) / ``struct stat``)."""
    return {
        "st_ino": node.ino,
        "st_mode": node.mode,
        "st_nlink": node.nlink,
        "st_uid": node.uid,
        "st_gid": node.gid,
        "st_size": node.size,
        "st_atime": node.atime_ns,
        "st_mtime": node.mtime_ns,
        "st_ctime": node.ctime_ns,
        "st_blocks": node.blocks,
        "st_blksize": BLKSIZE,
        "st_rdev": node.rdev,
    }
