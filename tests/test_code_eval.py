"""Routing tasks from a real git history built in the test; rubric labels; Wilson and McNemar."""

from __future__ import annotations

import os
import subprocess

import pytest
from click.testing import CliRunner

from libraryfs.cli.main import cli
from libraryfs.code.evalset import BlobReader, build_tasks, gold_label, index_at, mcnemar_exact, summarize, wilson
from libraryfs.code.router import TOPOLOGIES


def _git(repo, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@x")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env).stdout


def _commit(repo, msg, files):
    for rel, text in files.items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", msg)
    return _git(repo, "rev-parse", "HEAD").decode().strip()


@pytest.fixture()
def history(tmp_path):
    repo = tmp_path / "proj"
    repo.mkdir()
    _git(repo, "init", "-q")
    mods = {f"pkg/m{i}.py": f"def f{i}(x):\n    \"\"\"Step {i}.\"\"\"\n    return x + {i}\n" for i in range(5)}
    _commit(repo, "Initial import", {**mods, "pkg/__init__.py": "", "README.md": "hi\n"})
    _commit(repo, "Fix off-by-one in f1", {"pkg/m1.py": "def f1(x):\n    \"\"\"Step 1.\"\"\"\n    return x + 2\n"})
    _commit(repo, "Update README", {"README.md": "hello\n"})
    _commit(repo, "Investigate why f2 is slow?", {"pkg/m2.py": mods["pkg/m2.py"] + "# measured\n"})
    _commit(repo, "Refactor all steps to share a base", {f"pkg/m{i}.py": f"def f{i}(x, base=0):\n    return x + base\n" for i in range(5)})
    _commit(repo, "Add brand_new_feature and wire it into f0",
            {"pkg/new.py": "def brand_new_feature():\n    return 1\n",
             "pkg/m0.py": "from pkg.new import brand_new_feature\n\ndef f0(x, base=0):\n    return brand_new_feature()\n"})
    return repo


def test_tasks_from_history(history):
    tasks, counts = build_tasks(str(history))
    assert counts == {"commits": 6, "root": 1, "no_code": 1, "tasks": 4}
    by_msg = {t.message.splitlines()[0]: t for t in tasks}
    assert by_msg["Fix off-by-one in f1"].gold == "FASTPATH"
    assert by_msg["Fix off-by-one in f1"].symbols == ["pkg/m1.py::f1"]
    assert by_msg["Investigate why f2 is slow?"].gold == "DEEPRESEARCH"
    assert by_msg["Refactor all steps to share a base"].gold == "MULTIAGENT"
    t = by_msg["Add brand_new_feature and wire it into f0"]
    assert t.gold == "SUBAGENT" and sorted(t.code_files) == ["pkg/m0.py", "pkg/new.py"]
    assert sorted(t.symbols) == ["pkg/m0.py::f0", "pkg/new.py::brand_new_feature"]
    assert all(x.predicted in TOPOLOGIES and x.baseline in TOPOLOGIES for x in tasks)
    s = summarize(tasks, counts)
    assert s["n"] == 4 and sum(s["gold_distribution"].values()) == 4
    assert s["router"]["misrouted"] == sum(x.predicted != x.gold for x in tasks)


def test_router_sees_only_the_parent(history):
    reader = BlobReader(str(history))
    try:
        head = index_at(reader, "HEAD", "p")
        parent = index_at(reader, "HEAD~1", "p")
    finally:
        reader.close()
    assert "pkg/new.py" in head.files and "pkg/new.py" not in parent.files


def test_rubric_and_statistics():
    assert gold_label("Explore caching\n\nbody", ["a.py"], []) == "DEEPRESEARCH"
    assert gold_label("Fix", ["a.py"], ["a.py::x"] * 4) == "SUBAGENT"
    assert gold_label("Fix", ["a.py", "b.py", "c.py", "d.py"], []) == "MULTIAGENT"
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and abs(hi - 0.2775) < 1e-3
    lo, hi = wilson(5, 10)
    assert abs(lo - 0.2366) < 1e-3 and abs(hi - 0.7634) < 1e-3
    assert wilson(0, 0) == (0.0, 1.0)
    assert mcnemar_exact(0, 6) == pytest.approx(0.03125)
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0


def test_eval_cli(history, tmp_path):
    out = tmp_path / "tasks.jsonl"
    r = CliRunner().invoke(cli, ["code", "eval", str(history), "--tasks-out", str(out)])
    assert r.exit_code == 0, r.output
    assert "6 commits seen, 1 root, 1 without code → 4 tasks" in r.output and "McNemar exact" in r.output
    assert len(out.read_text().splitlines()) == 4
    r = CliRunner().invoke(cli, ["code", "eval", str(tmp_path)])
    assert r.exit_code == 1 and "not a git checkout" in r.output
