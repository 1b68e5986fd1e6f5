"""Outlines of source code: the names a file defines and what it says it is (rules in :mod:`.outline`).

No parser per language (a file that does not parse still has names): one line-anchored pattern per
definition form, with indentation deciding which class a Python ``def`` belongs to. The code index's
symbol files (:mod:`libraryfs.features.code.render`) start with a header comment
``# Parser.parse — method · pkg/mod.py:12-30 · Summary.`` that names the symbol exactly; it wins.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from libraryfs.index.markup import Paragraphs, clean, first_sentence, is_boilerplate, split_sentence

if TYPE_CHECKING:
    from libraryfs.index.outline import Outline

LINE_CHARS = 2_000
MAX_LINES = 20_000

#: file extension → language
EXTENSIONS = {
    ".py": "python",
    ".pyi": "python",
    ".js": "js",
    ".mjs": "js",
    ".cjs": "js",
    ".jsx": "js",
    ".ts": "js",
    ".tsx": "js",
    ".go": "go",
    ".rs": "rust",
    ".c": "c",
    ".h": "c",
    ".cc": "c",
    ".cpp": "c",
    ".hpp": "c",
    ".java": "java",
    ".kt": "java",
    ".cs": "java",
    ".rb": "ruby",
    ".sh": "shell",
    ".bash": "shell",
    ".zsh": "shell",
    ".lua": "lua",
    ".php": "php",
}

#: the code index's symbol-file header (``# Qual — kind · path:1-9 · summary``)
_HEADER = re.compile(r"^(?:#|//|--|;+|%)\s+(\S+) — ([\w ]+?) · (\S+?):(\d+)-(\d+)(?: · (.*))?$")
_PATTERNS: dict[str, list[re.Pattern[str]]] = {
    "python": [
        re.compile(r"^(\s*)(?:async\s+)?def\s+([A-Za-z_]\w*)"),
        re.compile(r"^(\s*)class\s+([A-Za-z_]\w*)"),
        re.compile(r"^()([A-Z][A-Z0-9_]{2,})\s*(?::[^=]{0,80})?=(?!=)"),
    ],
    "js": [
        re.compile(r"^(\s*)(?:export\s+)?(?:default\s+)?(?:async\s+)?function\s*\*?\s*([A-Za-z_$][\w$]*)"),
        re.compile(r"^(\s*)(?:export\s+)?(?:default\s+)?(?:abstract\s+)?class\s+([A-Za-z_$][\w$]*)"),
        re.compile(
            r"^()(?:export\s+)?(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*=\s*(?:async\s*)?(?:function|\()"
        ),
        re.compile(r"^()(?:export\s+)?(?:interface|type|enum)\s+([A-Za-z_$][\w$]*)"),
    ],
    "go": [
        re.compile(r"^()func\s+(?:\([^)]{0,80}\)\s*)?([A-Za-z_]\w*)"),
        re.compile(r"^()type\s+([A-Za-z_]\w*)"),
    ],
    "rust": [
        re.compile(r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:async\s+|const\s+|unsafe\s+)*fn\s+([A-Za-z_]\w*)"),
        re.compile(r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:struct|enum|trait|type|mod)\s+([A-Za-z_]\w*)"),
    ],
    "c": [
        re.compile(r"^()#\s*define\s+([A-Za-z_]\w*)"),
        re.compile(r"^()(?:typedef\s+)?(?:struct|union|enum|class)\s+([A-Za-z_]\w*)\s*\{?\s*$"),
        re.compile(r"^()[A-Za-z_][\w \t\*&:<>,]{0,120}?[\s\*&]([A-Za-z_]\w*)\s*\([^;]{0,300}$"),
    ],
    "java": [
        re.compile(
            r"^(\s*)(?:(?:public|private|protected|static|final|abstract|sealed|data)\s+)*"
            r"(?:class|interface|enum|record|object)\s+([A-Za-z_]\w*)"
        ),
        re.compile(
            r"^(\s*)(?:(?:public|private|protected|static|final|abstract|synchronized|override)\s+)+"
            r"[\w<>\[\], ?]+\s+([A-Za-z_]\w*)\s*\("
        ),
        re.compile(r"^(\s*)(?:override\s+)?fun\s+(?:<[^>]*>\s*)?([A-Za-z_]\w*)"),
    ],
    "ruby": [
        re.compile(r"^(\s*)def\s+(?:self\.)?([A-Za-z_]\w*[?!=]?)"),
        re.compile(r"^(\s*)(?:class|module)\s+([A-Z]\w*)"),
    ],
    "shell": [
        re.compile(r"^()(?:function\s+)?([A-Za-z_][\w-]*)\s*\(\)\s*\{?"),
        re.compile(r"^()function\s+([A-Za-z_][\w-]*)"),
    ],
    "lua": [re.compile(r"^(\s*)(?:local\s+)?function\s+([A-Za-z_][\w.:]*)")],
    "php": [
        re.compile(
            r"^(\s*)(?:(?:public|private|protected|static|final|abstract)\s+)*function\s+([A-Za-z_]\w*)"
        ),
        re.compile(r"^(\s*)(?:abstract\s+|final\s+)?(?:class|interface|trait)\s+([A-Za-z_]\w*)"),
    ],
}
_NESTING = frozenset({"python", "ruby", "java", "php", "rust"})
_CLASS_LINE = re.compile(
    r"\s*(?:(?:export|default|abstract|public|private|protected|static|final|sealed|data|pub)\s+)*"
    r"(?:class|module|interface|trait|struct|enum|impl|object|record)\s"
)
_C_KEYWORDS = frozenset("if for while switch return sizeof else do case".split())
_SHEBANG = re.compile(r"^#!\s*/\S*(?:env\s+)?(\w+)")
_DOCSTRING = re.compile(r'^\s*[rRbBuU]?("""|\'\'\')')
_COMMENT = re.compile(r"^\s*(?:#+|//+|/\*+|\*+/?|--|;+)\s?")


def language(name: str, text: str) -> str | None:
    """The programming language of a file by its name (extension) or shebang line; None if not code."""
    dot = name.rfind(".")
    if dot > 0:
        lang = EXTENSIONS.get(name[dot:].lower())
        if lang:
            return lang
    m = _SHEBANG.match(text[:200])
    if m:
        interp = m.group(1)
        if interp.startswith("python"):
            return "python"
        if interp in ("sh", "bash", "zsh", "dash", "ksh"):
            return "shell"
        if interp == "node":
            return "js"
        if interp == "ruby":
            return "ruby"
    return None


def is_code(name: str, text: str) -> bool:
    """Whether the entry is source code (by extension, shebang, or a code-index symbol header)."""
    return language(name, text) is not None or bool(_HEADER.match(text[:LINE_CHARS].split("\n", 1)[0]))


def code_outline(name: str, text: str) -> Outline:
    """Outline of a source file or a code-index symbol file (see the module docstring)."""
    from libraryfs.index.outline import Outline

    first = text[:LINE_CHARS].split("\n", 1)[0]
    m = _HEADER.match(first)
    if m:
        qual, kind, path = m.group(1), m.group(2).strip(), m.group(3)
        lead = split_sentence(clean(m.group(6) or ""))
        del path  # the symbol's file is its directory: the line need not repeat it
        if kind == "function" and "." in qual:  # a function defined inside another: local, not a name
            return Outline(title=qual, lead=lead, detail="local function", symbol=True)
        if is_test_case(qual):
            return Outline(title=qual, lead=lead, detail=f"test {kind}", symbol=True)
        return Outline(title=qual, names=[qual], lead=lead, detail=kind, symbol=True)
    lang = language(name, text) or "python"
    lines = text.split("\n", MAX_LINES)[:MAX_LINES]
    names = definitions(lang, lines)
    return Outline(names=names, lead=_code_lead(lang, lines), detail=lang)


_TEST_CASE = re.compile(r"^test$|(?:^|\.)(?:test_\w*|Test[A-Z0-9_]\w*)$")


def is_test_case(qual: str) -> bool:
    """Whether a symbol is a test case (``test_*`` functions and methods, ``Test*`` classes, as pytest and
    unittest collect them): a name no one calls or looks up, so not a name the entry defines."""
    return bool(_TEST_CASE.search(qual))


def definitions(lang: str, lines: list[str]) -> list[str]:
    """Names defined in ``lines`` of language ``lang``, in order; methods as ``Class.method``; functions
    nested in a function (local helpers) are not definitions of the file."""
    pats = _PATTERNS.get(lang, [])
    out: list[str] = []
    scopes: list[tuple[int, str, bool]] = []  # (indent, qualname, is_class) of enclosing definitions
    in_doc = ""
    for raw in lines:
        line = raw[:LINE_CHARS]
        if lang == "python":  # skip docstring bodies: an example ``def`` in a docstring defines nothing
            if in_doc:
                if in_doc in line:
                    in_doc = ""
                continue
            dm = _DOCSTRING.match(line)
            if dm and line.count(dm.group(1)) == 1:
                in_doc = dm.group(1)
                continue
        for p in pats:
            m = p.match(line)
            if not m:
                continue
            name = m.group(2)
            if lang == "c" and name in _C_KEYWORDS:
                break
            indent = len(m.group(1).expandtabs(4))
            while scopes and scopes[-1][0] >= indent:
                scopes.pop()
            is_class = bool(_CLASS_LINE.match(line))
            if scopes and not scopes[-1][2]:
                scopes.append((indent, name, is_class))  # inside a function: a local helper
                break
            qual = f"{scopes[-1][1]}.{name}" if scopes and lang in _NESTING else name
            if not is_test_case(qual):
                out.append(qual)
            scopes.append((indent, qual, is_class))
            break
    return out


def _code_lead(lang: str, lines: list[str]) -> str:
    """The module docstring (Python) or the first comment block that is not a licence or shebang."""
    i = 0
    n = min(len(lines), 200)
    while i < n and (not lines[i].strip() or lines[i].startswith("#!") or "coding" in lines[i][:40]):
        i += 1
    if lang == "python" and i < n:
        m = _DOCSTRING.match(lines[i])
        while not m and i < n and lines[i].lstrip().startswith("#"):
            i += 1
            while i < n and not lines[i].strip():
                i += 1
            m = _DOCSTRING.match(lines[i]) if i < n else None
        if m:
            quote = m.group(1)
            body = lines[i][:LINE_CHARS].split(quote, 1)[1]
            parts = [body]
            j = i + 1
            while quote not in parts[-1] and j < n:
                parts.append(lines[j][:LINE_CHARS])
                j += 1
            doc = " ".join(parts).split(quote, 1)[0]
            paras = [clean(p) for p in re.split(r"\n\s*\n", "\n".join(parts).split(quote, 1)[0])]
            return first_sentence(paras) or first_sentence([clean(doc)])
    # the first comment block that is not boilerplate
    blocks = Paragraphs()
    for raw in lines[:n]:
        s = raw[:LINE_CHARS]
        if _COMMENT.match(s) and s.strip():
            text = _COMMENT.sub("", s, count=1).strip()
            if text:
                blocks.add(text)
            else:
                blocks.end()
            continue
        blocks.end()
        if s.strip():
            break
    blocks.end()
    return first_sentence([b for b in blocks.out if not is_boilerplate(b)])
