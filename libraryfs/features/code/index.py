"""The hierarchical code index: root → directory → file → symbol, with import and call edges (PAPERS.md §3).

:class:`CodeIndex` holds one :class:`~libraryfs.features.code.parse.FileParse` per source file and derives:

* **import edges** file → file, resolved inside the repository (Python dotted modules incl. relative
  imports and ``src/``-style prefixes by longest dotted suffix; JS relative specifiers with the usual
  ``.js``/``index.js`` probing; Go import paths by the ``go.mod`` module prefix or a directory suffix).
* **call edges** symbol → symbol, by name: a callee defined in the caller's own file wins, then one in a
  file the caller's file imports, then (bare calls only) a name defined exactly once in the repository;
  a method/attribute call ``x.name()`` resolves only within the caller's file and the files it imports
  (its receiver type is unknown); otherwise the call stays unresolved (name-based resolution is a heuristic; it never invents an edge between two ambiguous
  definitions).

Node ids: a file is its repo-relative path; a symbol is ``"path::qualname"``. Edges are rebuilt lazily
after any change (:meth:`CodeIndex.update_file` re-parses one file only; resolution is a linear pass over
the repository's import and call names, cheap next to parsing).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import subprocess
from collections import defaultdict
from dataclasses import dataclass

from libraryfs.features.code.parse import FileParse, Symbol, language_of, parse_source

#: Directory names never indexed.
IGNORED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        "build",
        "dist",
        ".eggs",
        "site-packages",
        "vendor",
    }
)
#: Files larger than this are skipped (generated or minified code; bytes).
MAX_FILE_BYTES = 1_000_000


def is_indexable(rel: str) -> bool:
    """Whether a repo-relative path is a source file the index keeps (supported language, not in an ignored
    or hidden directory)."""
    parts = rel.split("/")
    if any(p in IGNORED_DIRS or (p.startswith(".") and p not in (".", "..")) for p in parts[:-1]):
        return False
    return language_of(parts[-1]) is not None and not parts[-1].startswith(".")


def list_source_files(root: str) -> list[str]:
    """Repo-relative POSIX paths of indexable files under ``root``, sorted. Uses ``git ls-files`` (tracked
    and untracked-but-not-ignored) when ``root`` is a git work tree, else a directory walk."""
    if os.path.exists(os.path.join(root, ".git")):
        try:
            out = subprocess.run(
                ["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                check=True,
                capture_output=True,
            ).stdout
            paths = [p for p in os.fsdecode(out).split("\0") if p]
            return sorted(p for p in set(paths) if is_indexable(p) and os.path.isfile(os.path.join(root, p)))
        except (OSError, subprocess.CalledProcessError):
            pass
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in IGNORED_DIRS and not d.startswith(".")]
        rel_dir = os.path.relpath(dirpath, root)
        for name in filenames:
            rel = name if rel_dir == "." else f"{rel_dir.replace(os.sep, '/')}/{name}"
            if is_indexable(rel):
                found.append(rel)
    return sorted(found)


def content_sha(data: bytes) -> str:
    """Git-compatible blob id of ``data`` (hex), so parses cached by blob id are shared with git history."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(slots=True)
class Edges:
    """Resolved edges. ``imports[f]`` = files ``f`` imports; ``calls[s]`` = symbols ``s`` calls;
    ``callers`` and ``importers`` are the reverse maps. Module-level calls have the file path as source."""

    imports: dict[str, list[str]]
    importers: dict[str, list[str]]
    calls: dict[str, list[str]]
    callers: dict[str, list[str]]


class CodeIndex:
    """Index of one repository (see module docstring). ``name`` is the repo's name in the library
    (``code/<name>/``); ``root`` the checkout it was read from (may be empty for an index built from git
    objects)."""

    def __init__(self, name: str, root: str = "") -> None:
        self.name = name
        self.root = root
        self.files: dict[str, FileParse] = {}
        self.go_module = ""
        #: Co-change history: the source files of each past commit, oldest first (see
        #: :class:`libraryfs.features.code.history.CoChange`); empty when the checkout has no git history.
        self.history: list[list[str]] = []
        self._edges: Edges | None = None

    # ---- building -----------------------------------------------------------------------------------
    @classmethod
    def build(cls, root: str, name: str | None = None) -> CodeIndex:
        """Parse every indexable file under ``root`` (see :func:`list_source_files`)."""
        root = os.path.abspath(root)
        idx = cls(name or os.path.basename(root.rstrip("/")), root)
        idx._read_go_mod()
        for rel in list_source_files(root):
            idx.update_file(rel)
        return idx

    def _read_go_mod(self) -> None:
        try:
            with open(os.path.join(self.root, "go.mod"), encoding="utf-8") as f:
                for line in f:
                    if line.startswith("module "):
                        self.go_module = line.split()[1].strip()
                        break
        except OSError:
            pass

    def update_file(self, rel: str, data: bytes | None = None) -> FileParse | None:
        """(Re-)parse one file (read from ``root`` unless ``data`` is given); a vanished or oversized file is
        removed. Returns the new parse, or None when the file is gone. Only this file is re-parsed."""
        if data is None:
            try:
                with open(os.path.join(self.root, rel), "rb") as f:
                    data = f.read(MAX_FILE_BYTES + 1)
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                self.remove_file(rel)
                return None
        if len(data) > MAX_FILE_BYTES:
            self.remove_file(rel)
            return None
        fp = parse_source(rel, data, sha=content_sha(data))
        self.files[rel] = fp
        self._edges = None
        return fp

    def add_parse(self, fp: FileParse) -> None:
        """Insert an already-parsed file (e.g. from a cache keyed by blob id)."""
        self.files[fp.path] = fp
        self._edges = None

    def remove_file(self, rel: str) -> None:
        """Forget one file (missing is fine)."""
        if self.files.pop(rel, None) is not None:
            self._edges = None

    # ---- navigation ---------------------------------------------------------------------------------
    def symbols(self) -> dict[str, Symbol]:
        """All symbols by id ``path::qualname``."""
        return {f"{p}::{s.qualname}": s for p, fp in self.files.items() for s in fp.symbols}

    def directories(self) -> list[str]:
        """Every directory that holds an indexed file (``""`` is the root), sorted."""
        dirs = {""}
        for p in self.files:
            d = posixpath.dirname(p)
            while d:
                dirs.add(d)
                d = posixpath.dirname(d)
        return sorted(dirs)

    # ---- edges --------------------------------------------------------------------------------------
    @property
    def edges(self) -> Edges:
        """Resolved import and call edges (recomputed after a change)."""
        if self._edges is None:
            self._edges = self._resolve()
        return self._edges

    def _module_table(self) -> dict[str, str]:
        table: dict[str, str] = {}
        for p, fp in self.files.items():
            if fp.language != "python":
                continue
            stem = p[: p.rfind(".")]
            parts = stem.split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
            # every dotted suffix names the file too (src/ layouts, package-dir mappings); the longest wins
            for i in range(len(parts)):
                key = ".".join(parts[i:])
                if key and (key not in table or table[key].count("/") > p.count("/")):
                    table[key] = p
        return table

    def _resolve_import(
        self, src: str, spec: str, modules: dict[str, str], dirs: dict[str, list[str]]
    ) -> list[str]:
        lang = self.files[src].language
        if lang == "python":
            if spec.startswith("."):
                level = len(spec) - len(spec.lstrip("."))
                pkg = posixpath.dirname(src).split("/") if posixpath.dirname(src) else []
                if level > 1:
                    pkg = pkg[: len(pkg) - (level - 1)] if level - 1 <= len(pkg) else []
                rest = spec[level:]
                spec = ".".join([*pkg, *([rest] if rest else [])])
            parts = spec.split(".")
            # "pkg.mod.name" → "pkg.mod" → "pkg"; then, for a checkout of a sub-package, without the
            # leading components ("lib.code.index" → "code.index" → "index")
            for lead in range(len(parts)):
                for end in range(len(parts), lead, -1):
                    key = ".".join(parts[lead:end])
                    if key in modules:
                        return [modules[key]]
                if lead == 0 and parts[0] in modules:
                    break  # the top package is in the repo: do not guess further
            return []
        if lang == "javascript":
            if not spec.startswith("."):
                return []
            base = posixpath.normpath(posixpath.join(posixpath.dirname(src), spec))
            for cand in (base, base + ".js", base + ".mjs", base + ".cjs", base + ".jsx", base + "/index.js"):
                if cand in self.files:
                    return [cand]
            return []
        if lang == "go":
            if self.go_module and (spec == self.go_module or spec.startswith(self.go_module + "/")):
                d = spec[len(self.go_module) :].lstrip("/")
                return dirs.get(d, [])
            for d, files in dirs.items():
                if d and (spec == d or spec.endswith("/" + d)):
                    return files
        return []

    def _resolve(self) -> Edges:
        modules = self._module_table()
        go_dirs: dict[str, list[str]] = defaultdict(list)
        for p, fp in self.files.items():
            if fp.language == "go":
                go_dirs[posixpath.dirname(p)].append(p)
        imports: dict[str, list[str]] = {}
        importers: dict[str, list[str]] = defaultdict(list)
        for p, fp in self.files.items():
            targets: list[str] = []
            for spec in fp.imports:
                for t in self._resolve_import(p, spec, modules, go_dirs):
                    if t != p and t not in targets:
                        targets.append(t)
            imports[p] = targets
            for t in targets:
                importers[t].append(p)

        by_name: dict[str, list[str]] = defaultdict(list)
        for p, fp in self.files.items():
            for s in fp.symbols:
                by_name[s.name].append(f"{p}::{s.qualname}")
        calls: dict[str, list[str]] = {}
        callers: dict[str, list[str]] = defaultdict(list)
        for p, fp in self.files.items():
            near = {p, *imports[p]}
            if fp.language == "go":  # a Go package is its directory: its files see each other
                near.update(go_dirs.get(posixpath.dirname(p), ()))
            owners = [(f"{p}::{s.qualname}", s.calls) for s in fp.symbols] + [(p, fp.module_calls)]
            for owner, names in owners:
                out: list[str] = []
                for name in dict.fromkeys(names):
                    attr = name.startswith(".")
                    cands = by_name.get(name[1:] if attr else name)
                    if not cands:
                        continue
                    if attr:  # receiver unknown: only this file or files it imports, never a global guess
                        cands = [c for c in cands if c.split("::", 1)[0] in near]
                        if len(cands) > 1:
                            cands = [c for c in cands if c.split("::", 1)[0] == p] or cands
                        if len(cands) != 1:
                            continue
                    elif len(cands) > 1:
                        local = [c for c in cands if c.split("::", 1)[0] == p]
                        cands = local or [c for c in cands if c.split("::", 1)[0] in near]
                        if len(cands) != 1:
                            continue
                    if cands[0] != owner:
                        out.append(cands[0])
                if out:
                    calls[owner] = out
                    for t in out:
                        callers[t].append(owner)
        return Edges(imports, dict(importers), calls, dict(callers))

    # ---- persistence --------------------------------------------------------------------------------
    def to_json(self) -> bytes:
        """Serialize (UTF-8 JSON bytes) for ``code/<repo>/.codeindex.json``."""
        return json.dumps(
            {
                "version": 1,
                "name": self.name,
                "root": self.root,
                "go_module": self.go_module,
                "files": [fp.to_dict() for fp in self.files.values()],
                **({"history": self.history} if self.history else {}),
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> CodeIndex:
        """Inverse of :meth:`to_json`. Raises ``ValueError`` on an unknown version."""
        d = json.loads(data)
        if d.get("version") != 1:
            raise ValueError(f"unknown code index version {d.get('version')!r}")
        idx = cls(d["name"], d.get("root", ""))
        idx.go_module = d.get("go_module", "")
        idx.history = [list(c) for c in d.get("history", ())]
        for f in d["files"]:
            fp = FileParse.from_dict(f)
            idx.files[fp.path] = fp
        return idx
