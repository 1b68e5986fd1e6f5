"""Routing tasks from a real git history built in the test; rubric labels; Wilson and McNemar."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from click.testing import CliRunner

from libraryfs.cli.main import cli
from libraryfs.features.code.router import TOPOLOGIES
from libraryfs_bench.code.evalset import (
    BlobReader,
    RepoHistory,
    build_tasks,
    gold_label,
    index_at,
    load_tasks,
    repo_name,
    save_tasks,
    select_commits,
)
from libraryfs_bench.code.stats import cluster_bootstrap, mcnemar_exact, spearman, wilson


def _git(repo, *args):
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@x",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@x",
    )
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
    mods = {f"pkg/m{i}.py": f'def f{i}(x):\n    """Step {i}."""\n    return x + {i}\n' for i in range(5)}
    _commit(repo, "Initial import", {**mods, "pkg/__init__.py": "", "README.md": "hi\n"})
    _commit(repo, "Fix off-by-one in f1", {"pkg/m1.py": 'def f1(x):\n    """Step 1."""\n    return x + 2\n'})
    _commit(repo, "Update README", {"README.md": "hello\n"})
    _commit(repo, "Investigate why f2 is slow?", {"pkg/m2.py": mods["pkg/m2.py"] + "# measured\n"})
    _commit(
        repo,
        "Refactor all steps to share a base",
        {f"pkg/m{i}.py": f"def f{i}(x, base=0):\n    return x + base\n" for i in range(5)},
    )
    _commit(
        repo,
        "Add brand_new_feature and wire it into f0",
        {
            "pkg/new.py": "def brand_new_feature():\n    return 1\n",
            "pkg/m0.py": "from pkg.new import brand_new_feature\n\ndef f0(x, base=0):\n    return brand_new_feature()\n",
        },
    )
    return repo


def test_tasks_from_history(history):
    tasks, counts = build_tasks(str(history))
    head = _git(history, "rev-parse", "HEAD").decode().strip()
    assert counts.pop("head") == head
    index_files = {p.relative_to(history).as_posix() for p in history.rglob("*.py")}
    assert counts == {
        "commits": 6,
        "merge": 0,
        "root": 1,
        "bot": 0,
        "eligible": 5,
        "selected": 5,
        "no_code": 1,
        "tasks": 4,
        "renames": 0,
        "symbols_skipped": 0,
    }
    by_msg = {t.message.splitlines()[0]: t for t in tasks}
    assert by_msg["Fix off-by-one in f1"].gold == "FASTPATH"
    assert by_msg["Fix off-by-one in f1"].symbols == ["pkg/m1.py::f1"]
    assert by_msg["Investigate why f2 is slow?"].gold == "DEEPRESEARCH"
    assert by_msg["Refactor all steps to share a base"].gold == "MULTIAGENT"
    t = by_msg["Add brand_new_feature and wire it into f0"]
    assert t.gold == "SUBAGENT" and sorted(t.code_files) == ["pkg/m0.py", "pkg/new.py"]
    assert sorted(t.symbols) == ["pkg/m0.py::f0", "pkg/new.py::brand_new_feature"]
    assert t.parent_files == ["pkg/m0.py"]  # new.py did not exist at the parent: it cannot be retrieved
    assert all(x.predicted in TOPOLOGIES and x.baseline in TOPOLOGIES for x in tasks)
    assert all(set(x.retrieved_files) <= set(index_files) for x in tasks)
    # the router's features are stored with each task, candidates only among files existing at the parent
    for x in tasks:
        assert x.candidates and x.intent in ("read", "explore", "small", "edit") and len(x.text_features) == 3
        assert all(path in index_files for path, _ in x.candidates)
        assert x.commit_time_s > 0
    assert by_msg["Investigate why f2 is slow?"].intent == "explore"


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
    out = tmp_path / "tasks.jsonl.gz"
    r = CliRunner().invoke(
        cli, ["code", "eval", str(history), "--tasks-out", str(out), "--train-share", "0.5"]
    )
    assert r.exit_code == 0, r.output
    assert (
        "6 commits seen (0 merge, 1 root, 0 bot), 5 eligible, 5 selected, 1 without code → 4 tasks"
        in r.output
    )
    assert "split: 2 training / 2 held-out tasks" in r.output and "HELD-OUT (2 later tasks)" in r.output
    for name in ("regex", "always FASTPATH", "always SUBAGENT", "always MULTIAGENT", "training majority"):
        assert name in r.output
    assert len(load_tasks(str(out))) == 4
    # the same tasks from the file: same result, no git needed
    result = tmp_path / "result.json"
    r2 = CliRunner().invoke(
        cli,
        ["code", "eval", "--from-tasks", str(out), "--train-share", "0.5", "--json", "--out", str(result)],
    )
    assert r2.exit_code == 0, r2.output
    doc = json.loads(r2.output)
    assert doc["held_out"]["n"] == 2 and doc["parameters"]["fitted"] is True
    assert json.loads(result.read_text())["held_out"] == doc["held_out"]
    r = CliRunner().invoke(cli, ["code", "eval", str(tmp_path)])
    assert r.exit_code == 1 and "not a git repository" in r.output
    r = CliRunner().invoke(cli, ["code", "eval", f"{history}@nosuchrev"])
    assert r.exit_code == 1 and "unknown revision" in r.output


def test_history_at_a_commit_sees_only_its_ancestors(history):
    h = RepoHistory(str(history))
    log = subprocess.run(
        ["git", "-C", str(history), "rev-list", "--reverse", "HEAD"], capture_output=True, text=True
    )
    commits = log.stdout.split()
    at_second = h.at(commits[1])
    # the initial import and the fix of f1 (ordered by committer time, then id: here the same second)
    initial = tuple(sorted(["pkg/__init__.py"] + [f"pkg/m{i}.py" for i in range(5)]))
    assert sorted(tuple(sorted(c)) for c in at_second.commits) == sorted([initial, ("pkg/m1.py",)])
    assert len(h.at(commits[-1])) == 5  # the README-only commit has no source file
    # the documented order: committer time, then commit id
    expected = sorted((c for c in commits if h.files.get(c)), key=lambda c: (h.time[c], c))
    assert h.at(commits[-1]).commits == [h.files[c] for c in expected]
    assert repo_name("/x/click.git") == "click" and repo_name("/x/proj/") == "proj"


def test_public_tasks_file_drops_messages(history, tmp_path):
    tasks, _ = build_tasks(str(history))
    save_tasks(str(tmp_path / "p.jsonl"), tasks, public=True)
    back = load_tasks(str(tmp_path / "p.jsonl"))
    assert [t.commit for t in back] == [t.commit for t in tasks]
    assert all(t.message == "" and t.author != "t" and len(t.author) == 12 for t in back)
    assert [t.candidates for t in back] == [t.candidates for t in tasks]
    (tmp_path / "bad.jsonl").write_text('{"nope": 1}\n')
    with pytest.raises(ValueError, match="not a task"):
        load_tasks(str(tmp_path / "bad.jsonl"))


HELPERS = 'def h():\n    """Two, three or four."""\n    return {}\n\n\ndef k():\n    """Unchanged."""\n    return 0\n'


@pytest.fixture()
def messy_history(tmp_path):
    """A history with what real repositories have: a merge, a pure rename, a rename with an edit, a bot
    commit, a vendored-only change, a symlink, a shell script, and one commit over the symbol cap."""
    repo = tmp_path / "messy"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    body = "".join(f"def g{i}(x):\n    return x * {i}\n\n\n" for i in range(8))
    _commit(
        repo,
        "Initial import",
        {
            "pkg/__init__.py": "",
            "pkg/a.py": body,
            "pkg/b.py": HELPERS.format(2),
            "vendor/lib.py": "def v():\n    return 0\n",
            "run.sh": "echo hi\n",
        },
    )
    _git(repo, "mv", "pkg/a.py", "pkg/core.py")
    _git(repo, "commit", "-q", "-m", "Move a to core")
    _git(repo, "mv", "pkg/b.py", "pkg/helpers.py")
    (repo / "pkg/helpers.py").write_text(HELPERS.format(3))
    _git(repo, "commit", "-q", "-am", "Rename b to helpers and fix h")
    (repo / "pkg/helpers.py").write_text(HELPERS.format(4))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--author", "dependabot[bot] <bot@x>", "-m", "Bump h")
    _commit(repo, "Update vendored lib", {"vendor/lib.py": "def v():\n    return 1\n"})
    os.symlink("pkg/core.py", repo / "link.py")
    _commit(repo, "Add a symlink and tweak the script", {"run.sh": "echo hello\n"})
    _git(repo, "checkout", "-q", "-b", "side")
    _commit(repo, "Side change to g1", {"pkg/core.py": body.replace("x * 1\n", "x * 10\n")})
    _git(repo, "checkout", "-q", "main")
    _git(repo, "merge", "-q", "--no-ff", "-m", "Merge branch side", "side")
    _commit(
        repo,
        "Split every g into its own module",
        {f"pkg/g{i}.py": f"def g{i}(x):\n    return x * {i}\n" for i in range(8)},
    )
    return repo


def test_real_history_shapes(messy_history, monkeypatch):
    import libraryfs_bench.code.evalset as ev

    monkeypatch.setattr(ev, "MAX_SYMBOL_FILES", 5)
    tasks, counts = build_tasks(str(messy_history))
    by = {t.message.splitlines()[0]: t for t in tasks}
    assert counts["merge"] == 1 and counts["root"] == 1 and counts["bot"] == 1
    assert counts["no_code"] == 1  # the vendored-only change
    assert set(by) == {
        "Move a to core",
        "Rename b to helpers and fix h",
        "Add a symlink and tweak the script",
        "Side change to g1",
        "Split every g into its own module",
    }
    # a pure rename is one file and changes no symbol
    t = by["Move a to core"]
    assert t.code_files == ["pkg/core.py"] and t.symbols == [] and t.gold == "FASTPATH"
    # a rename with an edit: one file, the edited symbol under its new path
    t = by["Rename b to helpers and fix h"]
    assert t.code_files == ["pkg/helpers.py"] and t.symbols == ["pkg/helpers.py::h"] and t.gold == "FASTPATH"
    assert counts["renames"] == 2
    # the symlink is not code; the shell script is code without symbols
    t = by["Add a symlink and tweak the script"]
    assert t.code_files == ["run.sh"] and t.symbols == []
    # the side branch's own commit is a task (diffed against its parent, not the merge)
    assert by["Side change to g1"].symbols == ["pkg/core.py::g1"]
    # over the symbol cap: symbols skipped, the label (from the file count) is unaffected
    t = by["Split every g into its own module"]
    assert t.symbols_skipped and t.symbols == [] and len(t.code_files) == 8 and t.gold == "MULTIAGENT"
    assert counts["symbols_skipped"] == 1


def test_selection_window_and_sample(messy_history):
    everything, c_all = select_commits(str(messy_history), max_commits=100)
    assert c_all["eligible"] == len(everything) == 6 and c_all["commits"] == 9
    recent, c = select_commits(str(messy_history), max_commits=3)
    assert [x[0] for x in recent] == [x[0] for x in everything[:3]] and c["selected"] == 3
    s1, _ = select_commits(str(messy_history), max_commits=3, sample=True, seed=1)
    s2, _ = select_commits(str(messy_history), max_commits=3, sample=True, seed=1)
    assert s1 == s2 and len(s1) == 3 and {x[0] for x in s1} <= {x[0] for x in everything}
    assert [x[3] for x in s1] == sorted((x[3] for x in s1), reverse=True)
    none, c = select_commits(str(messy_history), until="2000-01-01")
    assert none == [] and c["commits"] == 0


def test_cluster_bootstrap_is_wider_for_clustered_tasks():
    # 40 tasks in 4 clusters of 10 identical outcomes: the effective sample is 4, not 40
    wrong = [k % 2 == 0 for k in range(4) for _ in range(10)]
    clustered = cluster_bootstrap([k for k in range(4) for _ in range(10)], wrong, [False] * 40)
    spread = cluster_bootstrap(list(range(40)), [k % 2 == 0 for k in range(40)], [False] * 40)
    assert clustered["clusters"] == 4 and spread["clusters"] == 40
    width = lambda b: b["a95"][1] - b["a95"][0]  # noqa: E731
    assert width(clustered) > width(spread)
    lo, hi = wilson(20, 40)
    assert width(clustered) > hi - lo
    assert cluster_bootstrap([0] * 10, wrong[:10], [False] * 10)["a95"] is None  # one cluster: no interval


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties get average ranks: scipy.stats.spearmanr([1, 2, 2, 3], [1, 3, 2, 4]) = 0.9486832980505138
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(0.9486832980505138)
    assert spearman([1, 1, 1], [1, 2, 3]) is None and spearman([1, 2], [1, 2]) is None
    with pytest.raises(ValueError):
        spearman([1, 2, 3], [1, 2])
