"""Write a :class:`~libraryfs.features.code.index.CodeIndex` into the library as files (PAPERS.md §3, issue 9 item 1).

Layout under ``code/<repo>/`` (every directory also gets an ``INDEX.md`` from the library's own indexer)::

    code/<repo>/REPO.md                 repo card: source, counts, languages, how to navigate
    code/<repo>/.codeindex.json         the serialized index (what ``libraryfs code route`` loads)
    code/<repo>/<dir>/<file.py>/        one directory per source file, at the file's own path
        SYMBOLS.md                      symbol list: qualname, kind, lines, signature, one-line summary,
                                        resolved calls; the file's imports and importers
        SOURCE.py                       the whole file
        <qualname>.py                   each symbol's source lines, under a one-line header comment
                                        (``# Parser.parse — method · pkg/mod.py:12-30 · Parse bytes.``)

Writes go through the :class:`~libraryfs.fs.tree.Tree` interface only, and only where bytes changed: a
:class:`Renderer` remembers a digest of everything it wrote, so one edited file costs one directory's
rewrite plus any SYMBOLS.md whose cross-file lines (importers, callers) changed.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Callable

from libraryfs.features.code.index import CodeIndex
from libraryfs.features.code.parse import COMMENT, FileParse
from libraryfs.fs.tree import Tree

#: Bumped when the rendered layout changes (a re-add then rewrites everything).
LAYOUT_VERSION = 1
#: Reserved names inside a file's directory.
SYMBOLS_NAME = "SYMBOLS.md"
SOURCE_STEM = "SOURCE"
_BAD = re.compile(r"[/\x00]")


def repo_dir(repo: str) -> str:
    """Library-relative directory of a repository: ``code/<repo>``."""
    return f"code/{repo}"


def file_dir(repo: str, rel: str) -> str:
    """Library-relative directory that holds one source file's SYMBOLS.md, SOURCE and symbol files."""
    return f"code/{repo}/{rel}"


def _ext(rel: str) -> str:
    dot = rel.rfind(".")
    return rel[dot:] if dot > rel.rfind("/") else ""


def symbol_filenames(fp: FileParse) -> list[str]:
    """File name of each symbol of ``fp`` (same order): ``<qualname><ext>``, made safe (no ``/``, ≤ 200
    bytes) and unique (a repeated qualname — a property setter, a redefinition — gets ``~2``, ``~3``…)."""
    ext = _ext(fp.path)
    seen: dict[str, int] = {SYMBOLS_NAME: 1, SOURCE_STEM + ext: 1}
    names = []
    for s in fp.symbols:
        base = _BAD.sub("_", s.qualname)[:200]
        name = base + ext
        n = seen.get(name, 0)
        if n:
            while f"{base}~{n + 1}{ext}" in seen:
                n += 1
            name = f"{base}~{n + 1}{ext}"
        seen[name] = 1
        names.append(name)
    return names


def symbol_path(repo: str, fp: FileParse, qualname: str) -> str:
    """Library-relative path of one symbol's source file (first definition with that qualname)."""
    names = symbol_filenames(fp)
    for s, n in zip(fp.symbols, names, strict=False):
        if s.qualname == qualname:
            return f"{file_dir(repo, fp.path)}/{n}"
    raise KeyError(f"{fp.path}::{qualname}")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_symbols_md(index: CodeIndex, rel: str) -> bytes:
    """SYMBOLS.md of one file: a header, its resolved imports/importers, then one table row per symbol."""
    fp = index.files[rel]
    edges = index.edges
    names = symbol_filenames(fp)
    out = [
        f"# {rel} — {fp.summary or f'{fp.language} source'}",
        "",
        f"{fp.language} · {fp.lines} lines · {len(fp.symbols)} symbols · blob {fp.sha[:12]} · "
        f"whole file: [{SOURCE_STEM}{_ext(rel)}]({SOURCE_STEM}{_ext(rel)})",
        "",
    ]
    imps = edges.imports.get(rel, [])
    users = sorted(edges.importers.get(rel, []))
    if imps:
        out.append("imports: " + ", ".join(f"`{p}`" for p in imps))
    if users:
        out.append(
            "imported by: "
            + ", ".join(f"`{p}`" for p in users[:20])
            + (f" (+{len(users) - 20} more)" if len(users) > 20 else "")
        )
    if imps or users:
        out.append("")
    if fp.symbols:
        out += [
            "| symbol | kind | lines | signature | summary | calls | called by |",
            "|---|---|---|---|---|---|---|",
        ]
        for s, n in zip(fp.symbols, names, strict=False):
            sid = f"{rel}::{s.qualname}"
            calls = [c.split("::", 1)[1] if c.startswith(rel + "::") else c for c in edges.calls.get(sid, [])]
            called = edges.callers.get(sid, [])
            out.append(
                f"| [{_cell(s.qualname)}]({n}) | {s.kind} | {s.start_line}-{s.end_line} | "
                f"`{_cell(s.signature)}` | {_cell(s.summary)} | {_cell(', '.join(calls[:6]))}"
                f"{' …' if len(calls) > 6 else ''} | {len(called)} |"
            )
    else:
        out.append("(no functions, classes or methods)")
    return ("\n".join(out) + "\n").encode()


def render_symbol_files(fp: FileParse, source: bytes) -> dict[str, bytes]:
    """``{name: bytes}`` for one file's directory except SYMBOLS.md: ``SOURCE<ext>`` and one file per symbol
    (its whole lines, decorators included, under a header comment that the library's summary picks up)."""
    mark = COMMENT[fp.language]
    lines = source.splitlines(keepends=True)
    files = {SOURCE_STEM + _ext(fp.path): source}
    for s, n in zip(fp.symbols, symbol_filenames(fp), strict=False):
        head = f"{mark} {s.qualname} — {s.kind} · {fp.path}:{s.start_line}-{s.end_line}"
        if s.summary:
            head += f" · {s.summary}"
        body = b"".join(lines[s.start_line - 1 : s.end_line])
        files[n] = head.encode() + b"\n" + body
    return files


def render_repo_md(index: CodeIndex) -> bytes:
    """REPO.md: what this repository is, its size, and how an agent navigates it."""
    langs: dict[str, int] = {}
    for fp in index.files.values():
        langs[fp.language] = langs.get(fp.language, 0) + 1
    n_sym = sum(len(fp.symbols) for fp in index.files.values())
    top = sorted({p.split("/", 1)[0] + ("/" if "/" in p else "") for p in index.files})
    text = [
        f"# {index.name} — code index",
        "",
        f"source: `{index.root}` · {len(index.files)} files · {n_sym} symbols · "
        + ", ".join(f"{k} {v}" for k, v in sorted(langs.items())),
        "",
        "Navigate root → directory → file → symbol: every source file is a directory holding",
        "`SYMBOLS.md` (signatures, summaries, calls), `SOURCE.<ext>` and one file per symbol.",
        "",
        "top level: " + ", ".join(f"`{t}`" for t in top),
    ]
    return ("\n".join(text) + "\n").encode()


class Renderer:
    """Writes one index into a tree, touching only what changed (digests of written files are kept).

    ``read_source(rel) -> bytes`` supplies a file's bytes (from the checkout, or from git objects)."""

    def __init__(self, tree: Tree, index: CodeIndex, read_source: Callable[[str], bytes]) -> None:
        self.tree = tree
        self.index = index
        self.read_source = read_source
        self.written: dict[str, str] = {}  # library path → sha1 of bytes last written
        self.writes = 0
        self._last_edges = None  # edges as of the last render (to find SYMBOLS.md that mention a change)

    def _put(self, path: str, data: bytes) -> None:
        digest = hashlib.sha1(data).hexdigest()
        known = self.written.get(path)
        if known == digest:
            return
        if known is None:  # not written by this renderer yet: skip a write that would change nothing
            try:
                if hashlib.sha1(self.tree.read_bytes(path)).hexdigest() == digest:
                    self.written[path] = digest
                    return
            except OSError:
                pass
        self.tree.write_bytes(path, data)
        self.written[path] = digest
        self.writes += 1

    def _render_file_dir(self, rel: str) -> None:
        fp = self.index.files[rel]
        d = file_dir(self.index.name, rel)
        desired = render_symbol_files(fp, self.read_source(rel))
        desired[SYMBOLS_NAME] = render_symbols_md(self.index, rel)
        if self.tree.isdir(d):
            for stale in set(self.tree.listdir(d)) - set(desired):
                self.tree.remove(f"{d}/{stale}")
                self.written.pop(f"{d}/{stale}", None)
        for name, data in desired.items():
            self._put(f"{d}/{name}", data)

    def _drop_file_dir(self, rel: str) -> None:
        d = file_dir(self.index.name, rel)
        self.tree.remove(d)
        for k in [k for k in self.written if k.startswith(d + "/")]:
            del self.written[k]
        # prune now-empty parent directories up to the repo dir
        parent = posixpath.dirname(d)
        root = repo_dir(self.index.name)
        while parent != root and self.tree.isdir(parent) and not self.tree.listdir(parent):
            self.tree.remove(parent)
            parent = posixpath.dirname(parent)

    def full(self, previous: CodeIndex | None = None) -> None:
        """Render the whole repository. With ``previous`` (the index last written there), files whose blob
        is unchanged keep their symbol files (only SYMBOLS.md is re-checked) and vanished files are removed."""
        root = repo_dir(self.index.name)
        self.tree.makedirs(root)
        old = previous.files if previous is not None else {}
        if previous is not None:
            for rel in set(old) - set(self.index.files):
                self._drop_file_dir(rel)
        elif self.tree.isdir(root):
            for stale in self._existing_file_dirs(root):
                if stale not in self.index.files:
                    self._drop_file_dir(stale)
        for rel, fp in self.index.files.items():
            if (
                rel in old
                and old[rel].sha == fp.sha
                and self.tree.exists(f"{file_dir(self.index.name, rel)}/{SYMBOLS_NAME}")
            ):
                self._put(
                    f"{file_dir(self.index.name, rel)}/{SYMBOLS_NAME}", render_symbols_md(self.index, rel)
                )
            else:
                self._render_file_dir(rel)
        self._put(f"{root}/REPO.md", render_repo_md(self.index))
        self.save_index()
        self._last_edges = self.index.edges

    def _existing_file_dirs(self, root: str) -> list[str]:
        out: list[str] = []
        stack = [""]
        while stack:
            rel = stack.pop()
            d = f"{root}/{rel}" if rel else root
            for name in self.tree.listdir(d):
                sub = f"{rel}/{name}" if rel else name
                if not self.tree.isdir(f"{root}/{sub}"):
                    continue
                if self.tree.exists(f"{root}/{sub}/{SYMBOLS_NAME}"):
                    out.append(sub)
                else:
                    stack.append(sub)
        return out

    def update(self, changed: list[str], removed: list[str] = ()) -> None:
        """After ``index.update_file``/``remove_file`` for these paths: rewrite their directories, refresh every
        SYMBOLS.md whose text changed (importers, callers), REPO.md and the saved index."""
        for rel in removed:
            self._drop_file_dir(rel)
        for rel in changed:
            if rel in self.index.files:
                self._render_file_dir(rel)
        for rel in self._affected(changed, removed):
            if rel not in changed and rel in self.index.files:
                self._put(
                    f"{file_dir(self.index.name, rel)}/{SYMBOLS_NAME}", render_symbols_md(self.index, rel)
                )
        self._put(f"{repo_dir(self.index.name)}/REPO.md", render_repo_md(self.index))
        self.save_index()
        self._last_edges = self.index.edges

    def _affected(self, changed: list[str], removed: list[str]) -> set[str]:
        """Files whose SYMBOLS.md can mention a changed/removed file: its import and call neighbours under the
        edges before the change (kept from the last render) and after it."""
        touched = set(changed) | set(removed)
        out: set[str] = set()
        for e in (self._last_edges, self.index.edges):
            if e is None:
                return set(self.index.files)
            for f in touched:
                out.update(e.imports.get(f, ()))
                out.update(e.importers.get(f, ()))
            for table in (e.calls, e.callers):
                for src, dsts in table.items():
                    src_file = src.partition("::")[0]
                    if src_file in touched:
                        out.update(d.partition("::")[0] for d in dsts)
                    elif any(d.partition("::")[0] in touched for d in dsts):
                        out.add(src_file)
        return out

    def save_index(self) -> None:
        """Write ``code/<repo>/.codeindex.json``."""
        self._put(f"{repo_dir(self.index.name)}/.codeindex.json", self.index.to_json())


def load_index(tree: Tree, repo: str) -> CodeIndex:
    """Load ``code/<repo>/.codeindex.json`` from a tree. Raises ``FileNotFoundError`` if the repo was never
    added."""
    return CodeIndex.from_json(tree.read_bytes(f"{repo_dir(repo)}/.codeindex.json"))
