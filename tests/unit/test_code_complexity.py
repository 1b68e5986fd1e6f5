"""Complexity vector against Python's own ``ast`` as an oracle, on generated fixture repositories; router
and query typing on a small real repository."""

from __future__ import annotations

import ast
import os
import random

import pytest

from libraryfs.features.code.complexity import complexity, import_depths
from libraryfs.features.code.index import CodeIndex
from libraryfs.features.code.retrieve import Retriever, classify
from libraryfs.features.code.router import TOPOLOGIES, regex_route, route


def make_repo(root: str, seed: int) -> None:
    """A package ``pkg`` of modules m0..mK: an import DAG (mi imports mj only for j > i), unique function
    names f<i>_<j>, a class with methods and a nested function, bare calls to imported/local functions,
    and a module-level call."""
    rng = random.Random(seed)
    k = rng.randint(3, 7)
    os.makedirs(os.path.join(root, "pkg", "sub"))
    open(os.path.join(root, "pkg", "__init__.py"), "w").close()
    open(os.path.join(root, "pkg", "sub", "__init__.py"), "w").close()
    funcs = {i: [f"f{i}_{j}" for j in range(rng.randint(1, 4))] for i in range(k)}
    for i in range(k):
        deps = sorted(rng.sample(range(i + 1, k), rng.randint(0, min(2, k - i - 1)))) if i < k - 1 else []
        lines = []
        for j in deps:
            where = "pkg.sub" if j % 2 else "pkg"
            lines.append(f"from {where}.m{j} import {', '.join(funcs[j])}")
        callable_names = list(funcs[i]) + [n for j in deps for n in funcs[j]]
        for name in funcs[i]:
            calls = rng.sample(callable_names, rng.randint(0, min(3, len(callable_names))))
            calls = [c for c in calls if c != name]
            body = "".join(f"    {c}()\n" for c in calls) or "    pass\n"
            lines.append(f'def {name}():\n    """Doc of {name}."""\n{body}')
        lines.append(
            f"class C{i}:\n    def meth{i}(self):\n        def inner{i}():\n"
            f"            {rng.choice(callable_names)}()\n        return inner{i}()\n"
        )
        if rng.random() < 0.5:
            lines.append(f"{rng.choice(funcs[i])}()\n")
        path = os.path.join(root, "pkg", "sub" if i % 2 else "", f"m{i}.py")
        with open(path, "w") as f:
            f.write("\n".join(lines))


class Oracle:
    """The same quantities computed independently from ``ast`` and brute force."""

    def __init__(self, root: str) -> None:
        self.files: dict[str, ast.Module] = {}
        for dirpath, _, names in os.walk(root):
            for n in names:
                if n.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, n), root).replace(os.sep, "/")
                    with open(os.path.join(dirpath, n)) as f:
                        self.files[rel] = ast.parse(f.read())
        self.module_file = {}
        for rel in self.files:
            mod = rel[:-3].replace("/", ".")
            self.module_file[mod[: -len(".__init__")] if mod.endswith(".__init__") else mod] = rel
        self.level: dict[str, int] = {}  # symbol id → nesting level (1 = top)
        self.owner_calls: list[tuple[str, str]] = []  # (owner id or file, callee name)
        self.defined: dict[str, str] = {}  # name → symbol id
        self.imports: dict[str, set[str]] = {rel: set() for rel in self.files}
        for rel, tree in self.files.items():
            self._walk(rel, tree, rel, "", 0)
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module in self.module_file:
                    self.imports[rel].add(self.module_file[node.module])
                elif isinstance(node, ast.Import):
                    for a in node.names:
                        if a.name in self.module_file:
                            self.imports[rel].add(self.module_file[a.name])
        self.edges = {
            (o, self.defined[c]) for o, c in self.owner_calls if c in self.defined and self.defined[c] != o
        }

    def _walk(self, rel: str, node: ast.AST, owner: str, qual: str, level: int) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                q = f"{qual}.{child.name}" if qual else child.name
                sid = f"{rel}::{q}"
                self.level[sid] = level + 1
                self.defined[child.name] = sid
                self._walk(rel, child, sid, q, level + 1)
            else:
                if isinstance(child, ast.Call) and isinstance(child.func, ast.Name):
                    self.owner_calls.append((owner, child.func.id))
                self._walk(rel, child, owner, qual, level)

    def longest(self, f: str) -> int:
        best = 0
        for g in self.imports[f]:
            best = max(best, 1 + self.longest(g))
        return best

    def vector(self, nodes: list[str]) -> tuple:
        files = {n.split("::")[0] for n in nodes}
        syms = {n for n in nodes if "::" in n}
        h_t = max(
            [f.count("/") + 1 for f in files]
            + [s.split("::")[0].count("/") + 1 + self.level[s] for s in syms]
        )
        d_dep = max(self.longest(f) for f in files)
        owners = syms | files
        inc = {(a, b) for a, b in self.edges if a in owners or b in syms}
        cross = sum(a.split("::")[0] != b.split("::")[0] for a, b in inc)
        rho = round(cross / len(inc), 4) if inc else 0.0
        return d_dep, len(files), len(syms), h_t, rho


@pytest.mark.parametrize("seed", range(12))
def test_complexity_matches_ast_oracle(tmp_path, seed):
    make_repo(str(tmp_path), seed)
    idx = CodeIndex.build(str(tmp_path), "fx")
    oracle = Oracle(str(tmp_path))
    assert set(idx.symbols()) == set(oracle.level)
    rng = random.Random(1000 + seed)
    all_nodes = sorted(idx.symbols()) + sorted(idx.files)
    for _ in range(15):
        nodes = rng.sample(all_nodes, rng.randint(1, min(8, len(all_nodes))))
        v = complexity(idx, nodes)
        assert (v.d_dep, v.n_f, v.n_s, v.h_t, v.rho_x) == oracle.vector(nodes), nodes


def test_import_depths_collapse_cycles():
    g = {"a": ["b"], "b": ["c"], "c": ["b", "d"], "d": []}
    d = import_depths(g)
    assert d == {"a": 2, "b": 1, "c": 1, "d": 0}
    assert import_depths({}) == {}


def _small_repo(root):
    files = {
        "app/cli.py": 'from app.core import run\n\ndef main():\n    """Entry point."""\n    run()\n',
        "app/core.py": 'from app.store import save, load\n\ndef run():\n    """Run the job."""\n    save(load())\n',
        "app/store.py": 'def save(x):\n    """Persist a record to disk."""\n    return x\n\n'
        'def load():\n    """Load a record from disk."""\n    return 1\n',
        "app/__init__.py": "",
    }
    for rel, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "w") as f:
            f.write(text)


def test_query_types():
    assert classify("parse_source") == "identifier"
    assert classify("CodeIndex.update_file") == "identifier"
    assert classify('"def run("') == "exact"
    assert classify("who calls save") == "dependency"
    assert classify("list all classes in app") == "structural"
    assert classify("make the store persist records") == "conceptual"


def test_route_decisions(tmp_path):
    _small_repo(str(tmp_path))
    r = Retriever(CodeIndex.build(str(tmp_path), "app"))
    d = route(r, "save")
    assert d.hits[0].path == "code/app/app/store.py/save.py"
    d = route(r, "who calls save")
    assert d.qtype == "dependency" and "app/core.py::run" in [h.node for h in d.hits]
    assert d.topology == "FASTPATH" and d.intent == "read" and "app/core.py" in d.files
    assert route(r, "why does quantum flux decohere?").topology == "DEEPRESEARCH"


def test_regex_baseline_reaches_every_topology():
    assert {regex_route(q) for q in ("fix typo", "refactor all", "why slow", "add x")} == set(TOPOLOGIES)
