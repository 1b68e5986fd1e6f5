"""Parse one source file into symbols, imports and calls with tree-sitter (CODE-AGENT, PAPERS.md §3).

One grammar wheel per language (``tree-sitter-python``, ``tree-sitter-javascript``, ``tree-sitter-go``); the
grammars are compiled in, so nothing is downloaded. Every language is read through tree-sitter *queries*
(matched in C), not a Python walk over every node: a 200-file repository parses in tens of milliseconds.

A :class:`FileParse` holds, for one file: its symbols (functions, classes/types, methods) with qualified
name, kind, signature, 1-based inclusive line span, byte span and one-line summary; the raw import
specifiers it names; and the call names found inside each symbol (or at module level), a bare call as
``"name"`` and an attribute/method/selector call as ``".name"`` (receiver unknown).
Resolution of imports/calls to files and symbols is :mod:`libraryfs.features.code.index`'s job.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from functools import cache

from tree_sitter import Language, Node, Parser, Query, QueryCursor

#: file-name suffix → language name.
EXTENSIONS: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".go": "go",
}

#: Comment prefix per language (used for headers in rendered symbol files).
COMMENT: dict[str, str] = {"python": "#", "javascript": "//", "go": "//"}

_QUERIES: dict[str, dict[str, str]] = {
    "python": {
        "defs": """
            (function_definition name: (identifier) @name) @function
            (class_definition name: (identifier) @name) @class
        """,
        "calls": """
            (call function: (identifier) @callee)
            (call function: (attribute attribute: (identifier) @attr))
        """,
        "imports": """
            (import_statement) @imp
            (import_from_statement) @imp
        """,
    },
    "javascript": {
        "defs": """
            (function_declaration name: (identifier) @name) @function
            (generator_function_declaration name: (identifier) @name) @function
            (class_declaration name: (identifier) @name) @class
            (method_definition name: (_) @name) @method
            (variable_declarator name: (identifier) @name value: (arrow_function)) @function
            (variable_declarator name: (identifier) @name value: (function_expression)) @function
        """,
        "calls": """
            (call_expression function: (identifier) @callee)
            (call_expression function: (member_expression property: (property_identifier) @attr))
        """,
        "imports": """
            (import_statement source: (string) @src)
            (export_statement source: (string) @src)
            (call_expression function: (identifier) @fn arguments: (arguments . (string) @src))
        """,
    },
    "go": {
        "defs": """
            (function_declaration name: (identifier) @name) @function
            (method_declaration name: (field_identifier) @name) @method
            (type_spec name: (type_identifier) @name) @class
        """,
        "calls": """
            (call_expression function: (identifier) @callee)
            (call_expression function: (selector_expression field: (field_identifier) @attr))
        """,
        "imports": """
            (import_spec path: (interpreted_string_literal) @src)
        """,
    },
}


def _language_module(name: str):
    if name == "python":
        import tree_sitter_python as mod
    elif name == "javascript":
        import tree_sitter_javascript as mod
    elif name == "go":
        import tree_sitter_go as mod
    else:
        raise ValueError(f"unsupported language: {name}")
    return mod


@cache
def _grammar(name: str) -> tuple[Parser, dict[str, Query]]:
    lang = Language(_language_module(name).language())
    return Parser(lang), {k: Query(lang, src) for k, src in _QUERIES[name].items()}


def language_of(path: str) -> str | None:
    """Language name for a file path by its suffix (``"python"``, ``"javascript"``, ``"go"``), else None."""
    dot = path.rfind(".")
    return EXTENSIONS.get(path[dot:]) if dot >= 0 else None


@dataclass(slots=True)
class Symbol:
    """One definition. ``qualname`` is dotted from the file's top (``Class.method``, ``outer.inner``);
    ``parent`` is the enclosing symbol's qualname (``""`` at top level); lines are 1-based inclusive;
    bytes are ``[start_byte, end_byte)`` offsets into the file (decorators included)."""

    name: str
    qualname: str
    kind: str  # "function" | "class" | "method"
    signature: str
    start_line: int
    end_line: int
    start_byte: int
    end_byte: int
    summary: str = ""
    parent: str = ""
    calls: list[str] = field(default_factory=list)

    def to_list(self) -> list:
        """Compact JSON form (a list, in field order)."""
        return [
            self.name,
            self.qualname,
            self.kind,
            self.signature,
            self.start_line,
            self.end_line,
            self.start_byte,
            self.end_byte,
            self.summary,
            self.parent,
            self.calls,
        ]

    @classmethod
    def from_list(cls, v: list) -> Symbol:
        """Inverse of :meth:`to_list`."""
        return cls(*v)


@dataclass(slots=True)
class FileParse:
    """Everything the index keeps about one file. ``imports`` are raw specifiers (Python dotted names with
    leading dots for relative imports, JS module strings, Go import paths); ``module_calls`` are call names
    outside any symbol; ``sha`` identifies the content it was parsed from."""

    path: str
    language: str
    sha: str
    lines: int
    symbols: list[Symbol]
    imports: list[str]
    module_calls: list[str]
    summary: str = ""

    def to_dict(self) -> dict:
        """JSON-ready dict."""
        return {
            "path": self.path,
            "language": self.language,
            "sha": self.sha,
            "lines": self.lines,
            "summary": self.summary,
            "imports": self.imports,
            "module_calls": self.module_calls,
            "symbols": [s.to_list() for s in self.symbols],
        }

    @classmethod
    def from_dict(cls, d: dict) -> FileParse:
        """Inverse of :meth:`to_dict`."""
        return cls(
            d["path"],
            d["language"],
            d["sha"],
            d["lines"],
            [Symbol.from_list(s) for s in d["symbols"]],
            d["imports"],
            d["module_calls"],
            d.get("summary", ""),
        )


_QUOTES = re.compile(r'^[rRbBuUfF]*("""|\'\'\'|"|\')|("""|\'\'\'|"|\')$')
_COMMENT_MARK = re.compile(r"^\s*(/\*\*?|\*/|\*|//+|#)\s?")


def _first_line(text: str, limit: int = 120) -> str:
    for line in text.splitlines():
        line = _COMMENT_MARK.sub("", line).strip().rstrip("*/").strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def _docstring_of(block: Node) -> str:
    """First line of the docstring opening ``block`` (a module or a definition's body), else ``""``."""
    if block.named_child_count == 0:
        return ""
    first = block.named_children[0]
    if (
        first.type == "expression_statement"
        and first.named_child_count
        and first.named_children[0].type == "string"
    ):
        raw = first.named_children[0].text.decode("utf-8", "replace")
        return _first_line(_QUOTES.sub("", raw))
    return ""


def _py_docstring(node: Node) -> str:
    body = node.child_by_field_name("body")
    return "" if body is None else _docstring_of(body)


def _leading_comment(node: Node) -> str:
    """Summary from the comment block right above a declaration (JSDoc, Go doc comment)."""
    anchor = node
    while anchor.parent is not None and anchor.parent.type in (
        "export_statement",
        "lexical_declaration",
        "variable_declaration",
        "type_declaration",
    ):
        anchor = anchor.parent
    prev = anchor.prev_sibling
    if prev is None or prev.type != "comment" or anchor.start_point[0] - prev.end_point[0] > 1:
        return ""
    # walk up the contiguous comment block to its first line
    block = prev
    while (
        block.prev_sibling is not None
        and block.prev_sibling.type == "comment"
        and block.start_point[0] - block.prev_sibling.end_point[0] <= 1
    ):
        block = block.prev_sibling
    return _first_line(block.text.decode("utf-8", "replace"))


def _signature(node: Node, data: bytes, language: str) -> str:
    body = node.child_by_field_name("body")
    if language == "go" and node.type == "type_spec":
        body = node.child_by_field_name("type")
        end = (
            body.start_byte
            if body is not None and body.type in ("struct_type", "interface_type")
            else node.end_byte
        )
        sig = "type " + data[node.start_byte : end].decode("utf-8", "replace")
        if body is not None and body.type in ("struct_type", "interface_type"):
            sig += body.type.split("_")[0]
    elif node.type == "variable_declarator":
        value = node.child_by_field_name("value")
        vbody = value.child_by_field_name("body") if value is not None else None
        end = vbody.start_byte if vbody is not None else node.end_byte
        sig = data[node.start_byte : end].decode("utf-8", "replace")
    else:
        end = body.start_byte if body is not None else node.end_byte
        sig = data[node.start_byte : end].decode("utf-8", "replace")
    sig = " ".join(sig.split()).rstrip(":{ =>").rstrip()
    return sig if len(sig) <= 200 else sig[:199] + "…"


def _go_receiver(node: Node) -> str:
    recv = node.child_by_field_name("receiver")
    if recv is None:
        return ""
    names = re.findall(r"[A-Za-z_]\w*", recv.text.decode("utf-8", "replace"))
    return names[-1] if names else ""


def _py_imports(node: Node) -> list[str]:
    out: list[str] = []
    if node.type == "import_statement":
        for child in node.children_by_field_name("name"):
            target = child.child_by_field_name("name") if child.type == "aliased_import" else child
            if target is not None:
                out.append(target.text.decode())
        return out
    module = node.child_by_field_name("module_name")
    base = module.text.decode() if module is not None else ""
    names = node.children_by_field_name("name")
    if not names:  # from x import *
        return [base]
    for child in names:
        target = child.child_by_field_name("name") if child.type == "aliased_import" else child
        if target is None:
            continue
        sub = target.text.decode()
        # "from pkg import mod" may name a submodule; the index tries "pkg.mod" first, then "pkg".
        out.append(f"{base}.{sub}" if not base.endswith(".") else base + sub)
    return out


def parse_source(path: str, data: bytes, language: str | None = None, sha: str = "") -> FileParse:
    """Parse one file's bytes into a :class:`FileParse`.

    ``path`` is repository-relative (POSIX); ``language`` defaults to :func:`language_of`. Raises
    ``ValueError`` for an unsupported language. Syntax errors do not raise: tree-sitter recovers and the
    symbols it could read are kept.
    """
    language = language or language_of(path)
    if language is None:
        raise ValueError(f"no grammar for {path}")
    parser, queries = _grammar(language)
    root = parser.parse(data).root_node
    symbols = _symbols(_definitions(root, queries["defs"]), data, language)
    module_calls = _attribute_calls(root, queries["calls"], symbols)
    return FileParse(
        path=path,
        language=language,
        sha=sha,
        lines=data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1),
        symbols=symbols,
        imports=list(dict.fromkeys(_imports(root, queries["imports"], language))),
        module_calls=module_calls,
        summary=_file_summary(root, language),
    )


def _definitions(root: Node, query: Query) -> list[tuple[int, Node, Node, str]]:
    """``(start_byte, definition node, name node, kind)`` of every match of the ``defs`` query, outer
    definitions before the inner ones starting at the same byte."""
    defs: list[tuple[int, Node, Node, str]] = []
    for _, caps in QueryCursor(query).matches(root):
        kind = next(k for k in caps if k != "name")
        node = caps[kind][0]
        defs.append((node.start_byte, node, caps["name"][0], kind))
    defs.sort(key=lambda t: (t[0], -t[1].end_byte))
    return defs


def _symbols(defs: list[tuple[int, Node, Node, str]], data: bytes, language: str) -> list[Symbol]:
    """The :class:`Symbol` of each definition (in :func:`_definitions` order), nested by byte range: a
    Python function inside a class is a method; qualified names run from the file's top (Go methods:
    ``Receiver.name``)."""
    symbols: list[Symbol] = []
    stack: list[tuple[int, Symbol]] = []  # (end_byte, symbol) of open enclosing definitions
    for start, node, name_node, kind in defs:
        while stack and stack[-1][0] <= start:
            stack.pop()
        parent = stack[-1][1] if stack else None
        name = name_node.text.decode("utf-8", "replace")
        span = node.parent if node.parent is not None and node.parent.type == "decorated_definition" else node
        if language == "python":
            if kind == "function" and parent is not None and parent.kind == "class":
                kind = "method"
            summary = _py_docstring(node)
        else:
            summary = _leading_comment(node)
        if language == "go" and kind == "method":
            recv = _go_receiver(node)
            qual = f"{recv}.{name}" if recv else name
        else:
            qual = f"{parent.qualname}.{name}" if parent is not None else name
        sym = Symbol(
            name=name,
            qualname=qual,
            kind=kind,
            signature=_signature(node, data, language),
            start_line=span.start_point[0] + 1,
            end_line=span.end_point[0] + 1,
            start_byte=span.start_byte,
            end_byte=span.end_byte,
            summary=summary,
            parent=parent.qualname if parent is not None else "",
        )
        symbols.append(sym)
        stack.append((node.end_byte, sym))
    return symbols


def _attribute_calls(root: Node, query: Query, symbols: list[Symbol]) -> list[str]:
    """Append each call name (``"name"``, or ``".name"`` for an attribute call) to the innermost symbol
    enclosing it; return the calls outside every symbol (module level)."""
    # ranges nest, so walk parents from the last symbol starting before the call
    starts = [s.start_byte for s in symbols]
    by_qual = {s.qualname: s for s in symbols}
    module_calls: list[str] = []
    for _, caps in QueryCursor(query).matches(root):
        attr = "attr" in caps
        callee = caps["attr" if attr else "callee"][0]
        pos = callee.start_byte
        i = bisect.bisect_right(starts, pos) - 1
        owner = symbols[i] if i >= 0 else None
        while owner is not None and not (owner.start_byte <= pos < owner.end_byte):
            owner = by_qual.get(owner.parent) if owner.parent else None
        name = ("." if attr else "") + callee.text.decode("utf-8", "replace")
        (owner.calls if owner is not None else module_calls).append(name)
    return module_calls


def _imports(root: Node, query: Query, language: str) -> list[str]:
    """Raw import specifiers in file order (duplicates kept): Python dotted names, JS module strings
    (``import``/``export from``/``require``), Go import paths."""
    imports: list[str] = []
    for _, caps in QueryCursor(query).matches(root):
        if language == "python":
            imports.extend(_py_imports(caps["imp"][0]))
            continue
        if "fn" in caps and caps["fn"][0].text not in (b"require",):
            continue
        imports.append(caps["src"][0].text.decode("utf-8", "replace").strip("\"'`"))
    return imports


def _file_summary(root: Node, language: str) -> str:
    """The file's one-line summary: a Python module docstring's first line, else a leading comment's."""
    if language == "python":
        return _docstring_of(root)
    if root.named_child_count and root.named_children[0].type == "comment":
        return _first_line(root.named_children[0].text.decode("utf-8", "replace"))
    return ""
