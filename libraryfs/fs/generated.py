"""The one owner of the names libraryfs generates in every mount (ARCHITECTURE §2).

Every other module (the view, the adapter and mount lifecycle, the TOC renderer, the indexer, ingest, the CLI,
features and benchmarks) takes these names from here instead of spelling them:

* ``INDEX.md`` in every directory: TOC page 0, the root of the directory's tree of TOC pages;
* ``.index/`` in a directory whose TOC needs more than one page, holding pages ``0001.md``, ``0002.md``, …
  (the page-name scheme: four decimal digits, from 1; page 0 is ``INDEX.md``);
* at the root only: the control plane ``.libraryfs/`` (``status.json``, ``stats.json``, ``journal``, and
  ``budget`` when the mount has a read budget), the finder ``.find/<term>/`` and the name catalogue
  ``.catalogue/`` (its own ``INDEX.md`` and ``.index/`` pages: every name the library's entries define,
  sorted, :mod:`libraryfs.index.catalogue`; present once the indexer has built it), and the subject index
  ``.subjects/`` (the same shape over the words of the entries' text, :mod:`libraryfs.index.subjects`).

Generated names are resolved by lookup only and never listed by ``readdir``, and a directory excluded from
TOCs (a dot-directory or an ignored path, :mod:`libraryfs.fs.exclude`) has none of them. ``INDEX.md`` is
the user's when the user wants it: a stored ``INDEX.md`` wins, and the generated page 0 is then
``.index/INDEX.md`` (:func:`index_alias_path`); the other names cannot be created where they are generated
(:func:`is_reserved` says which names are generated at all). The rules live in
:class:`libraryfs.fs.virtual.VirtualNamespace`. Virtual objects (everything above except stored TOC bytes)
get inode numbers from :data:`VIRT_BASE` up, far above any stored inode.

Names come in two spellings: bytes for the view and the store (names are raw bytes there), and ``str``
(``*_FILE``/``*_DIRNAME``) for code that builds paths with :mod:`os.path` or renders Markdown links. Both
spell the same ASCII names.
"""

from __future__ import annotations

from libraryfs.fs.schema import ROOT_INO

INDEX_FILE = "INDEX.md"  #: a directory's generated TOC (page 0)
PAGES_DIRNAME = ".index"  #: the directory of further TOC pages (1, 2, …)
CTL_DIRNAME = ".libraryfs"  #: the read-only control plane, at the root only
FIND_DIRNAME = ".find"  #: the deterministic finder, at the root only
CATALOGUE_DIRNAME = ".catalogue"  #: the name catalogue (TOC pages over every defined name), at the root only
SUBJECTS_DIRNAME = ".subjects"  #: the subject index (TOC pages over the entries' words), at the root only

INDEX_NAME = INDEX_FILE.encode()
PAGES_DIR = PAGES_DIRNAME.encode()
CTL_DIR = CTL_DIRNAME.encode()
FIND_DIR = FIND_DIRNAME.encode()
CATALOGUE_DIR = CATALOGUE_DIRNAME.encode()
SUBJECTS_DIR = SUBJECTS_DIRNAME.encode()

#: Names generated in every directory that has a TOC (``INDEX.md`` may be the user's: module doc).
RESERVED_NAMES = frozenset({INDEX_NAME, PAGES_DIR})
#: Names generated at the root (the user cannot create them there).
RESERVED_ROOT = frozenset({CTL_DIR, FIND_DIR, CATALOGUE_DIR, SUBJECTS_DIR})
#: Every generated name, as ``str`` (for checks on relative paths outside the view, e.g. ingest).
GENERATED_NAMES = frozenset(n.decode() for n in RESERVED_NAMES | RESERVED_ROOT)

# Files of the control plane (``/.libraryfs/<name>``).
STATUS_FILE = b"status.json"  #: indexer status, journal backlog, TOC generation, mount facts (JSON)
STATS_FILE = b"stats.json"  #: read counters per process (JSON, :mod:`libraryfs.fs.stats`)
JOURNAL_FILE = b"journal"  #: the last journal records (JSON lines)
BUDGET_FILE = b"budget"  #: the read budget: limits, used, remaining (JSON; only with a budget)
CTL_FILES = (STATUS_FILE, STATS_FILE, JOURNAL_FILE)  #: always present, in listing order

VIRT_BASE = 1 << 60  #: virtual inode numbers start above this (``use_ino``; stored inodes are far below)


def page_file(page: int) -> str:
    """File name (``str``) of TOC page ``page`` (>= 1) in ``.index/``: ``"0001.md"``."""
    return f"{page:04d}.md"


def page_name(page: int) -> bytes:
    """File name (bytes) of TOC page ``page`` (>= 1) in ``.index/``: ``b"0001.md"``."""
    return b"%04d.md" % page


def page_number(name: bytes | str) -> int:
    """Page number of a ``.index/`` file name (``b"0001.md"`` → 1); 0 when ``name`` is not one."""
    b = name.encode("utf-8", "surrogateescape") if isinstance(name, str) else name
    if len(b) == 7 and b.endswith(b".md") and b[:4].isdigit():
        return int(b[:4])
    return 0


def page_relpath(page: int) -> str:
    """Path of TOC page ``page`` relative to its directory: ``INDEX.md`` for 0, ``.index/0001.md`` after."""
    return INDEX_FILE if page == 0 else f"{PAGES_DIRNAME}/{page_file(page)}"


def toc_page_paths(dir_path: bytes, npages: int) -> list[bytes]:
    """Absolute paths (bytes) of the ``npages`` TOC pages of the directory at ``dir_path`` (``INDEX.md``
    first; at least that one even when ``npages`` is 0)."""
    base = dir_path.rstrip(b"/")
    out = [base + b"/" + INDEX_NAME]
    out.extend(base + b"/" + PAGES_DIR + b"/" + page_name(k) for k in range(1, npages))
    return out


def index_alias_path(dir_path: bytes) -> bytes:
    """Where page 0 of the directory at ``dir_path`` is served when the user owns its ``INDEX.md``:
    ``<dir>/.index/INDEX.md``."""
    return dir_path.rstrip(b"/") + b"/" + PAGES_DIR + b"/" + INDEX_NAME


def is_reserved(name: bytes, parent: int) -> bool:
    """Whether ``name`` in directory inode ``parent`` is a generated name (in a directory with a TOC)."""
    return name in RESERVED_NAMES or (parent == ROOT_INO and name in RESERVED_ROOT)


def is_generated(name: str, at_root: bool) -> bool:
    """``str`` form of :func:`is_reserved` for a path component: ``at_root`` says whether its directory is
    the library's root (``.libraryfs``, ``.find`` and ``.catalogue`` are generated only there)."""
    return is_reserved(name.encode("utf-8", "surrogateescape"), ROOT_INO if at_root else 0)
