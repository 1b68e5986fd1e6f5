"""Which directories get no generated TOC: dot-directories and paths an ignore file matches (issue 14).

A TOC in every directory breaks the tools agents run inside their memory: git reads every file under
``.git/`` as its own (``refs/INDEX.md`` is "a bad ref", ``objects/xx/INDEX.md`` "a bad object"), and build
trees, caches and virtual environments are noise to an index. So a directory is *excluded* — no ``INDEX.md``,
no ``.index/``, both names free for the user — when

* any component of its path starts with ``.`` (``.git/``, ``.venv/``, ``.cache/`` …: the Unix convention
  for "not content"; the root's generated ``.libraryfs/`` and ``.find/`` are not directories of the store), or
* it, or one of its ancestors, is matched by a ``.gitignore`` file in the library, with git's rules
  (gitignore(5)): patterns are relative to the directory holding the file, a deeper file's match overrides
  a shallower one's, the last matching line of a file wins, ``!`` re-includes, and nothing below an
  excluded directory can be re-included.

Matching is the maintained ``pathspec`` library's :class:`pathspec.GitIgnoreSpec` (it follows git's own
wildmatch rules and edge cases; a hand-written matcher would drift from git). This is the one module that
imports it. Compiled specs are cached by the ``.gitignore`` inode's ``(ino, mtime_ns, size)``: an edit
changes the key, so a new rule applies at the next lookup.

A directory inside a git work tree (it, or an ancestor, holds a ``.git`` entry) keeps its TOC, but every
name in it is git's to create: git checks that a name is absent before it checks a file out ("untracked
working tree file would be overwritten"), so there the generated page 0 is served as ``.index/INDEX.md``
and ``INDEX.md`` is left to the repository (:attr:`Placement.work_tree`).

Both the view (:class:`libraryfs.fs.virtual.VirtualNamespace`: what a lookup shows) and the indexer (which
TOCs it computes at all, and where page 0 lives) ask :meth:`TocExclusion.classify`, so the two never
disagree; the indexer asks :meth:`TocExclusion.chain`, the same verdicts built from the parent directory's
for the whole of one pass (a change d levels down re-renders d TOCs: O(d) reads, where walking from the root
for each was O(d²): ``python bench/deep_tree.py``). Paths are absolute
bytes; non-UTF-8 names are matched in their ``surrogateescape`` decoding.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from libraryfs.fs import schema as S
from libraryfs.fs.store import DEEP, Txn

if TYPE_CHECKING:  # imported where a spec is compiled: ~10 ms that `find`, `status` and the mount never pay
    import pathspec

IGNORE_FILE = b".gitignore"  #: the ignore file read in every directory (gitignore(5) syntax)
GIT_DIR = b".git"  #: a directory holding this entry (a directory, or a file for worktrees) is a git work tree
IGNORE_MAX_BYTES = 1 << 20  #: a larger ignore file is read up to this many bytes
_SPECS_MAX = 4096  #: compiled specs kept (a cache, cleared when full)
_TEMP = re.compile(
    rb"^(\..*|.*~|.*\.(tmp|swp|swx|swo|part|crdownload)|#.*#|sed[A-Za-z0-9]{6}|4913|" rb"\.goutputstream-.*)$"
)


def is_hidden(name: bytes) -> bool:
    """Names left out of TOCs, filing and everything derived from entries (the ``names`` table, the term
    index): dotfiles and editors' temporary files (they are transient)."""
    return bool(_TEMP.match(name))


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a directory stands for generated TOCs."""

    excluded: bool  #: no TOC at all (a dot-directory, an ignored path)
    work_tree: bool  #: inside a git work tree: ``INDEX.md`` is git's, page 0 is ``.index/INDEX.md``


def dot_path(path: bytes) -> bool:
    """Whether a component of the absolute path ``path`` starts with ``.`` (a dot-directory or below)."""
    return any(c.startswith(b".") for c in path.split(b"/") if c)


@dataclass(frozen=True, slots=True)
class Chain:
    """What a directory's ancestors say about it (:meth:`TocExclusion.chain`): its path components from the
    root, the ignore files of it and of every ancestor as ``(depth of the file's directory, spec)``, whether a
    component is a dot-name, and its :class:`Placement`."""

    comps: tuple[bytes, ...]
    specs: tuple[tuple[int, pathspec.GitIgnoreSpec], ...]
    dot: bool
    place: Placement

    @property
    def path(self) -> bytes:
        """The absolute path (``b"/"`` for the root)."""
        return b"/" + b"/".join(self.comps)

    def ignored(self, name: bytes, is_dir: bool) -> bool:
        """:meth:`TocExclusion.child_filter`'s verdict on entry ``name`` of this directory."""
        return bool(self.specs) and _ignored(list(self.specs), [*self.comps, name], is_dir)


class TocExclusion:
    """Decides whether a directory of the store is excluded from generated TOCs (module doc).

    One instance per view or indexer: it holds only the cache of compiled ``.gitignore`` specs.
    """

    def __init__(self) -> None:
        self._specs: dict[tuple[int, int, int], pathspec.GitIgnoreSpec | None] = {}
        #: ignore-file inode → the directory holding it, for every ignore file looked up so far: a write to
        #: an open ``.gitignore`` is journaled without its name, and the indexer finds its directory here
        self.files: dict[int, int] = {}

    def excluded(self, t: Txn, dir_ino: int, path: bytes | None = None) -> bool:
        """Whether directory ``dir_ino`` (at absolute ``path``, looked up when None) gets no TOC."""
        return self.classify(t, dir_ino, path).excluded

    def classify(self, t: Txn, dir_ino: int, path: bytes | None = None) -> Placement:
        """Where directory ``dir_ino`` (at absolute ``path``, looked up when None) stands (module doc).

        The root is never excluded; a directory no longer reachable from the root is not excluded (it has
        no path to match). Cost: two dirent lookups per ancestor (``.gitignore``, ``.git``), plus a read of
        each ignore file whose inode changed since it was last compiled.
        """
        if path is None:
            path = b"/" if dir_ino == S.ROOT_INO else t.path_of(dir_ino)
            if path is None:
                return Placement(False, False)
        comps = [c for c in path.split(b"/") if c]
        if any(c.startswith(b".") for c in comps):
            return Placement(True, False)
        specs: list[tuple[int, pathspec.GitIgnoreSpec]] = []  # (depth of the file's directory, spec)
        work_tree = False
        ino: int | None = S.ROOT_INO
        for depth, comp in enumerate(comps):
            assert ino is not None
            work_tree = work_tree or t.lookup(ino, GIT_DIR) is not None
            spec = self._spec(t, ino)
            if spec is not None:
                specs.append((depth, spec))
            if specs and _ignored(specs, comps[: depth + 1]):
                return Placement(True, work_tree)
            ino = t.lookup(ino, comp)
            if ino is None:
                return Placement(False, work_tree)
        return Placement(False, work_tree or t.lookup(dir_ino, GIT_DIR) is not None)

    def child_filter(self, t: Txn, dir_path: bytes) -> Callable[[bytes, bool], bool]:
        """``ignored(name, is_dir) -> bool`` for the entries of the (not excluded) directory at ``dir_path``:
        whether an ignore file matches the entry, so the indexer leaves it out of the directory's TOC (as git
        leaves it out of a commit). The ignore files above are read once, not once per entry."""
        comps = [c for c in dir_path.split(b"/") if c]
        specs: list[tuple[int, pathspec.GitIgnoreSpec]] = []
        ino: int | None = S.ROOT_INO
        for depth in range(len(comps) + 1):
            assert ino is not None
            spec = self._spec(t, ino)
            if spec is not None:
                specs.append((depth, spec))
            if depth == len(comps):
                break
            ino = t.lookup(ino, comps[depth])
            if ino is None:
                break

        def ignored(name: bytes, is_dir: bool) -> bool:
            """Whether an ignore file at or above the directory matches entry ``name`` (a directory when
            ``is_dir``), by gitignore rules."""
            return bool(specs) and _ignored(specs, [*comps, name], is_dir)

        return ignored

    def chain(self, t: Txn, dir_ino: int, memo: dict[int, Chain | None]) -> Chain | None:
        """:meth:`classify` and :meth:`child_filter` of directory ``dir_ino`` at once, built from its parent's
        chain and kept in ``memo`` (directory inode → chain; None: not reachable from the root): over the
        directories of one indexer pass each costs a few reads, where :meth:`classify` reads every ancestor
        again (a pass re-rendering the d ancestors of a change d levels down cost O(d²) lookups). ``memo``
        holds one pass's view: the caller drops it when the tree may have changed (the next pass).
        Raises :class:`~libraryfs.errors.Corrupt` on a ``dirparent`` cycle, as :meth:`Txn.path_of` does."""
        from libraryfs.errors import Corrupt

        up: list[tuple[int, bytes]] = []  # (directory, its name) from dir_ino up to a known chain
        seen: set[int] | None = None  # the directories of ``up``, kept once it is deeper than DEEP
        ino = dir_ino
        while ino not in memo:
            if ino == S.ROOT_INO:
                spec = self._spec(t, ino)
                work_tree = t.lookup(ino, GIT_DIR) is not None
                memo[ino] = Chain(
                    (), ((0, spec),) if spec is not None else (), False, Placement(False, work_tree)
                )
                break
            link = t.dirparent(ino)
            if link is None:
                memo[ino] = None
                break
            up.append((ino, link[1]))
            ino = link[0]
            if len(up) > DEEP:  # past DEEP levels remember the directories met: a real cycle only
                if seen is None:
                    seen = {d for d, _name in up}
                if ino in seen:
                    raise Corrupt("dirparent cycle")
                seen.add(ino)
        parent = memo[ino]
        for child, name in reversed(up):
            parent = memo[child] = None if parent is None else self._extend(t, parent, child, name)
        return memo[dir_ino]

    def entry_excluded(
        self, t: Txn, parent: int, name: bytes, is_dir: bool, memo: dict[int, Chain | None]
    ) -> bool:
        """Whether entry ``name`` of directory ``parent`` (a directory itself when ``is_dir``) is left out of
        the TOCs, and so of everything derived from the entries (the finder's term index, the ``names``
        table, the name catalogue): a dot-name, a directory that is excluded, or a name an ignore file
        matches. A detached ``parent`` (no path) excludes nothing. ``memo`` as for :meth:`chain` (one
        pass's, or one read transaction's); raises :class:`~libraryfs.errors.Corrupt` as it does."""
        if name.startswith(b"."):
            return True
        ch = self.chain(t, parent, memo)
        return ch is not None and (ch.place.excluded or ch.ignored(name, is_dir))

    def _extend(self, t: Txn, parent: Chain, ino: int, name: bytes) -> Chain:
        """The chain of directory ``ino``, named ``name`` in the directory of chain ``parent``; the same
        verdicts as :meth:`classify` (a dot-path first, then the first excluded ancestor, then the ignore
        files above)."""
        comps = (*parent.comps, name)
        dot = parent.dot or name.startswith(b".")
        if dot:
            place = Placement(True, False)
        elif parent.place.excluded:
            place = parent.place
        elif parent.specs and _ignored(list(parent.specs), list(comps)):
            place = Placement(True, parent.place.work_tree)
        else:
            place = Placement(False, parent.place.work_tree or t.lookup(ino, GIT_DIR) is not None)
        spec = self._spec(t, ino)
        specs = (*parent.specs, (len(comps), spec)) if spec is not None else parent.specs
        return Chain(comps, specs, dot, place)

    def _spec(self, t: Txn, dir_ino: int) -> pathspec.GitIgnoreSpec | None:
        """The compiled ``.gitignore`` of directory ``dir_ino``, or None (no such regular file, or empty)."""
        ino = t.lookup(dir_ino, IGNORE_FILE)
        if ino is None:
            return None
        self.files[ino] = dir_ino
        node = t.inode(ino)
        if node is None or not node.is_reg:
            return None
        key = (ino, node.mtime_ns, node.size)
        if key in self._specs:
            return self._specs[key]
        size = min(node.size, IGNORE_MAX_BYTES)
        text = t.read_data(ino, 0, size, node.size).decode("utf-8", "surrogateescape")
        lines = text.splitlines()
        spec = None
        if any(ln.strip() for ln in lines):
            import pathspec

            spec = pathspec.GitIgnoreSpec.from_lines(lines)
        if len(self._specs) >= _SPECS_MAX:
            self._specs.clear()
        self._specs[key] = spec
        return spec


def _ignored(
    specs: list[tuple[int, pathspec.GitIgnoreSpec]], comps: list[bytes], is_dir: bool = True
) -> bool:
    """git's verdict on the path ``comps`` (from the root) given the ignore files above it, deepest first:
    the first file with a matching line decides (``!`` lines re-include)."""
    for depth, spec in reversed(specs):
        rel = os.fsdecode(b"/".join(comps[depth:])) + ("/" if is_dir else "")
        res = spec.check_file(rel)
        if res.include is not None:
            return bool(res.include)
    return False
