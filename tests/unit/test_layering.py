"""Imports go one way (ARCHITECTURE §5): cli → daemon → libraryfs core; the features hang off the core.

An AST scan of every module, every ``import``/``from … import`` anywhere in it (function-level imports
included) and every ``importlib.import_module("…")``/``__import__("…")`` with a literal name:

* the core (``libraryfs/`` except ``libraryfs/features/``) never imports ``libraryfs.features``,
  ``libraryfs.cli`` or ``libraryfs.daemon`` — features register through ``libraryfs.hooks``;
* ``daemon/`` (``libraryfs.daemon``) never imports ``libraryfs.cli`` or ``libraryfs.features``;
* nothing installed (``libraryfs/``, ``daemon/``, ``cli/``) imports ``libraryfs_bench``.

One exemption, named here: a daemon module's ``if __name__ == "__main__":`` block is the program's entry
(``python -m libraryfs.daemon.mountd``) and may hand the command line to the CLI's parser; importing the
module never runs it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: source directory → the package it installs as
SOURCES = {"libraryfs": "libraryfs", "daemon": "libraryfs.daemon", "cli": "libraryfs.cli"}


def _is_main_block(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in node.test.comparators)
    )


def imports(tree: ast.AST, package: str, skip_main: bool) -> list[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in ``tree`` (a module of ``package``)."""
    out: list[tuple[int, str]] = []
    stack = list(ast.iter_child_nodes(tree))
    while stack:
        node = stack.pop()
        if skip_main and _is_main_block(node):
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the module's package
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out.append((node.lineno, base))
            out += [(node.lineno, f"{base}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                out.append((node.lineno, node.args[0].value))
        stack.extend(ast.iter_child_nodes(node))
    return out


def modules() -> list[tuple[str, str, Path]]:
    """``(source dir, installed package of the file, path)`` of every installed module."""
    out = []
    for src, pkg in SOURCES.items():
        for path in sorted((ROOT / src).rglob("*.py")):
            rel = path.relative_to(ROOT / src).parent.parts
            out.append((src, ".".join((pkg, *rel)), path))
    return out


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def forbidden_for(src: str, package: str) -> list[str]:
    """Module prefixes a module of ``package`` (from source dir ``src``) must not import."""
    forbidden = ["libraryfs_bench"]
    if src == "libraryfs" and not _under(package, "libraryfs.features"):
        forbidden += ["libraryfs.features", "libraryfs.cli", "libraryfs.daemon"]
    elif src == "daemon":
        forbidden += ["libraryfs.cli", "libraryfs.features"]
    return forbidden


def violations(src: str, package: str, code: str, where: str) -> list[str]:
    """The imports in ``code`` (a module of ``package``) that break the layering, as ``where:line name``."""
    found = imports(ast.parse(code, where), package, skip_main=src == "daemon")
    forbidden = forbidden_for(src, package)
    return [
        f"{where}:{line} imports {name}" for line, name in found if any(_under(name, f) for f in forbidden)
    ]


def test_the_layering_holds():
    bad = []
    for src, pkg, path in modules():
        bad += violations(src, pkg, path.read_text(), str(path.relative_to(ROOT)))
    assert len(modules()) > 60  # the scan sees the whole tree
    assert bad == [], "\n".join(bad)


@pytest.mark.parametrize(
    "src, package, code, caught",
    [
        ("libraryfs", "libraryfs.fs", "from libraryfs.features.code import budget", True),
        ("libraryfs", "libraryfs.fs", "def f():\n    import libraryfs.cli.main\n", True),
        (
            "libraryfs",
            "libraryfs.fs",
            "import importlib\nimportlib.import_module('libraryfs.daemon.x')",
            True,
        ),
        ("libraryfs", "libraryfs.fs", "from ..features import cards", True),
        ("libraryfs", "libraryfs.fs", "from libraryfs import features", True),
        ("libraryfs", "libraryfs.features.code", "from libraryfs.fs import store", False),
        ("libraryfs", "libraryfs.features.code", "from libraryfs_bench import x", True),
        ("daemon", "libraryfs.daemon", "from libraryfs.features.episodes import builder", True),
        ("daemon", "libraryfs.daemon", "from libraryfs.cli import options", True),
        (
            "daemon",
            "libraryfs.daemon",
            "if __name__ == '__main__':\n    from libraryfs.cli import x\n",
            False,
        ),
        ("libraryfs", "libraryfs", "if __name__ == '__main__':\n    from libraryfs.cli import x\n", True),
        ("cli", "libraryfs.cli", "from libraryfs.features.cards import cards", False),
        ("cli", "libraryfs.cli", "import libraryfs_bench.cli", True),
    ],
)
def test_the_scan_catches_what_it_should(src, package, code, caught):
    assert bool(violations(src, package, code, "probe.py")) is caught


def test_only_the_chat_client_imports_openai():
    """One client: ``libraryfs/llm/client.py`` is the only module (package, daemons, CLI, benchmarks) that
    imports ``openai`` — everything else receives a :class:`~libraryfs.llm.client.ChatClient`."""
    found = []
    for path in sorted(ROOT.glob("*/**/*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] not in ("libraryfs", "daemon", "cli", "bench") or "results" in rel.parts:
            continue
        names = [n for _line, n in imports(ast.parse(path.read_text()), "", skip_main=False)]
        if any(_under(n, "openai") for n in names):
            found.append(str(rel))
    assert found == ["libraryfs/llm/client.py"]
