"""The topology router: intents from the task's words, the footprint estimate (co-change, tests, imports),
fitted thresholds, and the three hand cases of issue 17 on this repository's own source."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest

from libraryfs.features.code.cues import classify_intent, regex_route
from libraryfs.features.code.footprint import FEATURES, Candidate, Footprint, candidates, is_test_path
from libraryfs.features.code.history import CoChange, parse_name_only_log
from libraryfs.features.code.index import CodeIndex
from libraryfs.features.code.retrieve import Retriever, tokenize
from libraryfs.features.code.router import THRESHOLDS, Thresholds, decide, route

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "query, intent",
    [
        ("who calls verify_plan", "read"),
        ("Where is parse_budget_spec defined?", "read"),
        ("callers of Store.put", "read"),
        ("find the usages of open_tree", "read"),
        ("Explain how the indexer rebuilds INDEX.md", "read"),
        ("what does CoChange.partners return", "read"),
        ("how does the mount budget work", "read"),
        ("why does the watcher miss renames?", "explore"),
        ("investigate memory growth in the indexer", "explore"),
        ("Fix the typo in the docstring of verify_plan", "small"),
        ("release version 8.1.7", "small"),
        ("Add a --limit option to the libraryfs recall command", "edit"),
        ("Updated references to previous requests/requests GitHub path", "edit"),
        ("Reduce overall memory usage of Requests module by removing cgi module dependency", "edit"),
        ("Show default values in help", "edit"),
    ],
)
def test_intent(query, intent):
    assert classify_intent(query, "conceptual") == intent


def _fp(score: float, n_files: int = 3) -> Footprint:
    cands = [Candidate(f"f{i}.py", [0.0] * len(FEATURES), 0.9) for i in range(n_files)]
    return Footprint(cands, 2.7, 1.0, score)


def test_decide_applies_intent_then_thresholds():
    t = Thresholds(0.5, 1.0)
    assert decide("edit", _fp(0.5), t)[0] == "FASTPATH" and decide("edit", _fp(0.5), t)[2] == 1
    assert decide("edit", _fp(0.51), t)[0] == "SUBAGENT"
    assert decide("edit", _fp(1.01), t)[0] == "MULTIAGENT"
    assert decide("small", _fp(5.0), t)[:3:2] == ("FASTPATH", 1)  # a typo fix is one file whatever z says
    assert decide("read", _fp(5.0), t)[0] == "FASTPATH"
    assert decide("explore", _fp(0.0), t)[0] == "DEEPRESEARCH"
    assert decide("edit", Footprint([], 0.0, 1.0, -9.0), t)[0] == "DEEPRESEARCH"
    assert THRESHOLDS.fast_max <= THRESHOLDS.sub_max


def test_tokenize_expands_abbreviations():
    assert tokenize("recall_cmd") == tokenize("recall command")
    assert "config" in tokenize("cfg") and "repository" in tokenize("repo_dir")


def test_test_paths():
    for p in (
        "tests/test_core.py",
        "pkg/core_test.go",
        "web/app.test.js",
        "conftest.py",
        "src/__tests__/a.ts",
    ):
        assert is_test_path(p), p
    for p in ("src/click/testing.py", "pkg/core.py", "contest.py"):
        assert not is_test_path(p), p


def _git(repo, *args):
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x",
           "PATH": "/usr/bin:/bin", "HOME": str(repo)}  # fmt: skip
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env).stdout


def test_cochange_from_real_git_history(tmp_path):
    repo = tmp_path / "r"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    _git(repo, "init", "-q")

    def commit(files: dict, msg: str):
        for rel, text in files.items():
            (repo / rel).write_text(text)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", msg)

    commit({"pkg/core.py": "def run():\n    return 1\n", "pkg/util.py": "def u():\n    pass\n"}, "init")
    for i in range(3):  # core and its test change together three times; util alone once
        commit(
            {"pkg/core.py": f"def run():\n    return {i + 2}\n", "tests/test_core.py": f"# {i}\n"}, f"fix {i}"
        )
    commit({"pkg/util.py": "def u():\n    return 0\n", "README.md": "x\n"}, "util")
    h = CoChange.from_git(str(repo))
    assert h is not None and len(h) == 5  # README.md is not source
    assert h.changes("pkg/core.py") == 4 and h.partners("pkg/core.py") == {"tests/test_core.py": 0.75}
    assert h.sizes("pkg/util.py") == [2, 1] and h.recent_sizes(2) == [2, 1]
    assert CoChange.from_git(str(tmp_path / "nope")) is None
    assert CoChange.from_list(h.to_list()).commits == h.commits
    # the index keeps the history (code add stores it; code route reads it back)
    idx = CodeIndex.build(str(repo), "r")
    idx.history = h.to_list()
    assert CodeIndex.from_json(idx.to_json()).history == h.to_list()
    # candidates: the test that co-changes with the seed, named after it, is among them with its evidence
    r = Retriever(idx).retrieve("make run return the right value", limit=30)
    cands, seeds, habit = candidates(idx, r, h, "make run return the right value")
    assert seeds[0] == "pkg/core.py"
    by = {c.path: dict(zip(FEATURES, c.x, strict=True)) for c in cands}
    t = by["tests/test_core.py"]
    assert t["cochange"] > 0.5 and t["is_test"] == 1.0 and t["test_name_of_seed"] == 1.0
    assert t["recency"] == pytest.approx(1 / 2)  # last changed one commit before the last
    assert by["pkg/util.py"]["recency"] == 1.0  # changed by the last commit
    assert habit == 2.0  # median source files of the five commits: 2, 2, 2, 2, 1


def test_parse_name_only_log_keeps_source_files_only():
    out = b"\x1eaaa\x00\npkg/a.py\x00docs/x.md\x00\x1ebbb\x00\n"
    assert parse_name_only_log(out) == [["pkg/a.py"], []]


#: The history the hand cases read is pinned to a commit of main: recency weighs the files of the last commits,
#: so with the tip's history the answer would depend on what the newest commit happened to touch.
HISTORY_REV = "c58a0a6"


@pytest.fixture(scope="module")
def own():
    """This repository's own source: its index and (when it is a git checkout holding
    :data:`HISTORY_REV`) its history up to that commit."""
    idx = CodeIndex.build(str(ROOT), "libraryfs")
    return Retriever(idx), CoChange.from_git(str(ROOT), rev=HISTORY_REV)


@pytest.mark.parametrize("with_history", [True, False])
def test_issue_17_hand_cases(own, with_history):
    retriever, history = own
    history = history if with_history else None
    d = route(retriever, "who calls verify_plan", history=history)
    assert d.topology == "FASTPATH" and d.intent == "read"  # a lookup, never MULTIAGENT
    assert "libraryfs/features/code/budget.py" in d.files and "cli/code_cmds.py" in d.files  # its callers
    d = route(retriever, "Fix the typo in the docstring of verify_plan", history=history)
    assert d.topology == "FASTPATH" and d.vector.n_f == 1
    assert d.files == ["libraryfs/features/code/budget.py"]
    d = route(retriever, "Add a --limit option to the libraryfs recall command", history=history)
    assert "cli/episode_cmds.py" in {h.node.partition("::")[0] for h in d.hits}
    assert d.topology in ("FASTPATH", "SUBAGENT", "MULTIAGENT") and math.isfinite(d.footprint.score)
    assert regex_route("who calls verify_plan") == "SUBAGENT"  # what the keyword router would have said
