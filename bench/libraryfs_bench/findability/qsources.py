"""Independent sources of queries and their answers (never the TOC text, never the summariser).

* :func:`sphinx_inventory` — Sphinx's ``objects.inv`` shipped by python3-doc: every documented object
  name → the page that documents it (written by Sphinx from the docs' directives).
* :func:`stdlib_synopses` — the first sentence of each stdlib module's own docstring (``pydoc``'s synopsis,
  kept whole when it wraps onto a second line), read from the module's *source code* (``ast``, no import) or, for C modules, from the
  compiled module's ``__doc__``.
* :func:`wordnet_glosses` — WordNet 3.0's gloss of a word's most frequent sense (Debian ``wordnet-base``):
  a second dictionary's words for what a GCIDE headword means.
* :func:`python_symbols` — function/class/method qualnames of a source tree (``ast``).
* :func:`commit_subjects` — ``git log`` subjects with the files each commit touched.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
import zlib
from dataclasses import dataclass

OBJECTS_INV = "/usr/share/doc/python3-doc/html/objects.inv"
WORDNET_DIR = "/usr/share/wordnet"
_INV_LINE = re.compile(r"(?x)(.+?)\s+(\S+:\S+)\s+(-?\d+)\s+?(\S*)\s+(.*)")


@dataclass(frozen=True)
class InvObject:
    """One ``objects.inv`` row: ``name``, ``role`` (``py:function`` …) and ``docname`` (``library/json``)."""

    name: str
    role: str
    docname: str


def sphinx_inventory(path: str = OBJECTS_INV) -> list[InvObject]:
    """Rows of a Sphinx inventory (format version 2: four header lines, then zlib-compressed lines
    ``name domain:role priority uri dispname``). Raises ``FileNotFoundError`` / ``ValueError``."""
    with open(path, "rb") as f:
        data = f.read()
    head = data.split(b"\n", 4)
    if not head[0].startswith(b"# Sphinx inventory version 2"):
        raise ValueError(f"{path}: not a Sphinx inventory v2")
    out = []
    for line in zlib.decompress(head[4]).decode("utf-8").splitlines():
        m = _INV_LINE.match(line.rstrip())
        if not m:
            continue
        name, role, _prio, uri, _disp = m.groups()
        out.append(InvObject(name, role, uri.split("#", 1)[0].removesuffix(".html")))
    return out


def _first_line(doc: str | None) -> str:
    """The docstring's first sentence: its first paragraph joined into one line, cut after the first
    ``. `` (a synopsis line that wraps onto the next line is kept whole)."""
    para = []
    for line in (doc or "").strip().splitlines():
        if not line.strip():
            break
        para.append(line.strip())
    text = " ".join(para)
    m = re.search(r"(?<=[a-z)\]])\.(\s|$)", text)
    return text[: m.start() + 1] if m else text


def stdlib_synopses(modules: list[str], lib_dir: str | None = None) -> dict[str, str]:
    """``{module: first docstring sentence}`` for the stdlib modules found (pure-Python ones parsed from
    source; built-in and extension modules imported, which runs no Python code of theirs)."""
    lib_dir = lib_dir or os.path.dirname(os.__file__)
    out: dict[str, str] = {}
    for mod in modules:
        rel = mod.replace(".", "/")
        for cand in (f"{rel}.py", f"{rel}/__init__.py"):
            path = os.path.join(lib_dir, cand)
            if os.path.exists(path):
                try:
                    with open(path, "rb") as f:
                        tree = ast.parse(f.read())
                    line = _first_line(ast.get_docstring(tree))
                except (SyntaxError, ValueError):
                    line = ""
                if line:
                    out[mod] = line
                break
        else:
            if mod in sys.builtin_module_names or _is_extension(mod, lib_dir):
                try:
                    line = _first_line(importlib.import_module(mod).__doc__)
                except ImportError:
                    line = ""
                if line:
                    out[mod] = line
    return out


def _is_extension(mod: str, lib_dir: str) -> bool:
    dyn = os.path.join(lib_dir, "lib-dynload")
    return (
        "." not in mod
        and os.path.isdir(dyn)
        and any(n.startswith(mod + ".") and n.endswith(".so") for n in os.listdir(dyn))
    )


_POS = (("noun", "n"), ("verb", "v"), ("adj", "a"), ("adv", "r"))


def wordnet_glosses(words: set[str], wn_dir: str = WORDNET_DIR) -> dict[str, tuple[str, str]]:
    """``{word: (pos, gloss)}``: the gloss of the first (most frequent) sense of ``word`` in the part of
    speech where WordNet has the most tagged senses for it, examples (quoted parts) removed.
    Raises ``FileNotFoundError`` if WordNet is not installed (``apt-get install wordnet-base``)."""
    best: dict[str, tuple[int, str, int]] = {}  # word -> (tagsense_cnt, pos, offset)
    for pos, _ in _POS:
        with open(os.path.join(wn_dir, f"index.{pos}"), encoding="utf-8") as f:
            for line in f:
                if line.startswith(" "):
                    continue
                p = line.split()
                lemma = p[0].replace("_", " ")
                if lemma not in words:
                    continue
                n_ptr = int(p[3])
                tagged = int(p[5 + n_ptr])
                offset = int(p[6 + n_ptr])
                if lemma not in best or tagged > best[lemma][0]:
                    best[lemma] = (tagged, pos, offset)
    out: dict[str, tuple[str, str]] = {}
    for pos, _ in _POS:
        with open(os.path.join(wn_dir, f"data.{pos}"), "rb") as f:
            for word, (_t, p, off) in best.items():
                if p != pos:
                    continue
                f.seek(off)
                line = f.readline().decode("utf-8", "replace")
                gloss = line.split(" | ", 1)[1].strip() if " | " in line else ""
                gloss = re.sub(r';?\s*"[^"]*"', "", gloss).strip(" ;")
                if gloss:
                    out[word] = (pos, gloss)
    return out


@dataclass(frozen=True)
class PySymbol:
    """A definition in a Python file: ``qualname`` (``Class.method``), ``kind``, repo-relative ``path``."""

    qualname: str
    kind: str
    path: str


def python_symbols(root: str) -> list[PySymbol]:
    """Top-level functions and classes and their methods in every ``.py`` file under ``root`` (hidden
    directories skipped); files that do not parse are skipped."""
    out: list[PySymbol] = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and x != "__pycache__")
        for fn in sorted(files):
            if not fn.endswith(".py") or fn.startswith("."):
                continue
            path = os.path.join(d, fn)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            try:
                with open(path, "rb") as f:
                    tree = ast.parse(f.read())
            except (SyntaxError, ValueError):
                continue
            for node in tree.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    out.append(PySymbol(node.name, "function", rel))
                elif isinstance(node, ast.ClassDef):
                    out.append(PySymbol(node.name, "class", rel))
                    for sub in node.body:
                        if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
                            out.append(PySymbol(f"{node.name}.{sub.name}", "method", rel))
    return out


def commit_subjects(repo: str, until: str) -> list[tuple[str, str, list[str]]]:
    """``(sha, subject, touched paths)`` of every non-merge commit reachable from ``until`` (oldest
    first). Raises ``subprocess.CalledProcessError`` if ``repo`` is not a git repository."""
    log = subprocess.run(
        ["git", "-C", repo, "log", "--no-merges", "--reverse", "--format=%x00%H%x01%s", "--name-only", until],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    out = []
    for block in log.split("\0")[1:]:
        head, _, rest = block.partition("\n")
        sha, _, subject = head.partition("\x01")
        out.append((sha, subject.strip(), [p for p in rest.splitlines() if p.strip()]))
    return out
