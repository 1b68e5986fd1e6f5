"""code/ through a real FUSE mount (issue 9 acceptance and scope 6).

(a) ``libraryfs code add`` into a mounted library, then navigation root INDEX.md → repo → directory → file
    → symbol by following the INDEX.md links the library's own indexer wrote;
(b) ``libraryfs code add --watch`` as a subprocess: an edit to a checkout file reaches that file's INDEX.md
    in the mount (polled up to 10 s; the delay is printed, not asserted);
(c) a mount started with a read budget: reads past it fail with EDQUOT and ``.libraryfs/budget`` shows what
    is left.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.files import read_file
from helpers.mount import mount
from helpers.wait import wait_until

from libraryfs.fs.store import Store
from libraryfs.fs.tree import open_tree

pytestmark = pytest.mark.mount

_LINK = re.compile(r"\[([^\]]+)\]\(([^)]+)\)")

PARSER_PY = '''"""Parse tiny key=value configs."""

from pkg.util import strip_comment


class Parser:
    """Reads key=value lines."""

    def parse(self, text):
        """Split lines into a dict."""
        out = {}
        for line in text.splitlines():
            line = strip_comment(line)
            if "=" in line:
                k, v = line.split("=", 1)
                out[k.strip()] = v.strip()
        return out
'''

UTIL_PY = '''"""Helpers for the parser."""


def strip_comment(line):
    """Drop a trailing # comment."""
    return line.split("#", 1)[0]
'''


def _make_repo(root: Path) -> Path:
    repo = root / "tinyrepo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "parser.py").write_text(PARSER_PY)
    (repo / "pkg" / "util.py").write_text(UTIL_PY)
    return repo


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "libraryfs.cli.main", *args], capture_output=True, text=True, timeout=timeout
    )


def _links(index_md: str) -> dict[str, str]:
    """``{link text: target}`` of every markdown link in an INDEX.md."""
    with open(index_md, encoding="utf-8") as f:
        return {m.group(1): m.group(2) for m in _LINK.finditer(f.read())}


def _follow(mnt: str, here: str, text: str) -> str:
    """Path (inside the mount) that the INDEX.md of directory ``here`` links as ``text``."""
    links = _links(os.path.join(mnt, here, "INDEX.md"))
    assert text in links, f"{here}/INDEX.md has no link {text!r}: {sorted(links)}"
    target = links[text]
    if target.endswith("INDEX.md"):  # a subdirectory is linked by its own INDEX.md
        target = target[: -len("INDEX.md")]
    target = target.rstrip("/")
    return os.path.normpath(os.path.join(here, target)) if here else target


def _wait_for(path: str, needle: str, timeout_s: float = 30.0) -> None:
    """Until ``needle`` appears in the file at ``path`` (re-read each time); AssertionError on timeout."""

    def has() -> bool:
        with open(path, encoding="utf-8") as f:
            return needle in f.read()

    wait_until(has, timeout_s, f"{needle!r} in {path}", ignore=(OSError,))


def test_add_and_navigate_root_to_symbol(mounted, tmp_path):
    repo = _make_repo(tmp_path)
    assert open_tree(mounted.libdir).__class__.__name__ == "DirTree"  # writes go through the mount
    r = _cli("code", "add", str(repo), "--library", mounted.libdir)
    assert r.returncode == 0, r.stderr
    assert "indexed tinyrepo: 3 files, 3 symbols, 1 import edges, 1 call edges" in r.stdout
    mounted.wait_indexed()
    print("\n" + read_file(mounted.p("code/tinyrepo/pkg/parser.py/INDEX.md"), encoding="utf-8"))

    # root → code/ → tinyrepo/ → pkg/ → parser.py/ → Parser.parse.py, each step a link in an INDEX.md
    code = _follow(mounted.mnt, "", "code/")
    assert code == "code"
    repo_dir = _follow(mounted.mnt, code, "tinyrepo/")
    assert repo_dir == "code/tinyrepo"
    assert "REPO.md" in _links(os.path.join(mounted.mnt, repo_dir, "INDEX.md"))
    pkg = _follow(mounted.mnt, repo_dir, "pkg/")
    file_dir = _follow(mounted.mnt, pkg, "parser.py/")
    assert file_dir == "code/tinyrepo/pkg/parser.py"
    index_text = read_file(mounted.p(f"{file_dir}/INDEX.md"), encoding="utf-8")
    # the symbol's header comment gives its line in the file's INDEX.md: kind and summary (the link is its name)
    assert "[Parser.parse.py](Parser.parse.py) — method: Split lines into a dict." in index_text
    sym = _follow(mounted.mnt, file_dir, "Parser.parse.py")
    with open(mounted.p(sym), encoding="utf-8") as f:
        body = f.read()
    assert body.splitlines()[0] == "# Parser.parse — method · pkg/parser.py:9-17 · Split lines into a dict."
    assert "    def parse(self, text):" in body and "strip_comment(line)" in body
    # SYMBOLS.md carries the resolved cross-file call; SOURCE.py is the whole file
    symbols_md = read_file(mounted.p(f"{file_dir}/SYMBOLS.md"), encoding="utf-8")
    assert "pkg/util.py::strip_comment" in symbols_md
    assert read_file(mounted.p(f"{file_dir}/SOURCE.py"), encoding="utf-8") == PARSER_PY

    # code route reads the index back through the mount
    r = _cli(
        "code", "route", "fix strip_comment", "--repo", "tinyrepo", "--library", mounted.libdir, "--json"
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["hits"][0]["path"] == "code/tinyrepo/pkg/util.py/strip_comment.py"
    assert os.path.isfile(mounted.p(d["hits"][0]["path"]))


def test_watch_edit_reaches_index_md(mounted, tmp_path):
    repo = _make_repo(tmp_path)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "libraryfs.cli.main",
            "code",
            "add",
            str(repo),
            "--watch",
            "--debounce",
            "0.1",
            "--library",
            mounted.libdir,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:

        def watching() -> bool:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, proc.stderr.read()
            return line.startswith("watching")

        wait_until(watching, 60, "`code add --watch` to say it is watching")
        mounted.wait_indexed()
        index_md = mounted.p("code/tinyrepo/pkg/util.py/INDEX.md")
        assert "strip_comment.py" in read_file(index_md, encoding="utf-8")
        assert "join_lines" not in read_file(index_md, encoding="utf-8")

        t0 = time.monotonic()
        with open(repo / "pkg" / "util.py", "a") as f:
            f.write(
                '\n\ndef join_lines(lines):\n    """Join lines back with newlines."""\n'
                '    return "\\n".join(lines)\n'
            )
        _wait_for(index_md, "[join_lines.py](join_lines.py) — function: Join lines back with newlines.")
        print(f"\nedit → file's INDEX.md in the mount: {time.monotonic() - t0:.2f} s")
        with open(mounted.p("code/tinyrepo/pkg/util.py/join_lines.py"), encoding="utf-8") as f:
            assert f.read().startswith("# join_lines — function")

        # a deletion reaches the mount too: the file's directory goes, the parent INDEX.md drops it
        os.remove(repo / "pkg" / "util.py")
        wait_until(
            lambda: not os.path.exists(mounted.p("code/tinyrepo/pkg/util.py")),
            30,
            "util.py/ to go from the mount",
        )
        assert read_file(mounted.p("code/tinyrepo/pkg/INDEX.md"))  # readable
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        err = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == 0, err


def test_budget_mount_refuses_reads_with_edquot(tmp_path):
    libdir = tmp_path / "blib"
    Store.create(libdir, {"toc_max_tokens": 2000}).close()
    tree = open_tree(str(libdir))  # not mounted: writes straight into the store (no page cache to hide reads)
    for i in range(5):
        tree.write_bytes(f"notes/n{i}.md", f"# note {i}\n\nsome words about note {i}\n".encode())
    tree.close()

    mnt = tmp_path / "bmnt"
    with mount(libdir, mnt, indexer=False, budget="reads=3,tokens=100000"):
        budget_file = os.path.join(mnt, ".libraryfs", "budget")
        first = json.loads(read_file(budget_file))
        assert first["limits"] == {"reads": 3, "tokens": 100000}
        assert first["remaining"]["reads"] == 3 and first["refused"] == 0

        got, refused_at = [], None
        for i in range(5):
            try:
                with open(os.path.join(mnt, "notes", f"n{i}.md"), encoding="utf-8") as f:
                    got.append(f.read())
            except OSError as e:
                assert e.errno == errno.EDQUOT == 122, e
                refused_at = i
                break
        assert refused_at == 3
        assert got == [f"# note {i}\n\nsome words about note {i}\n" for i in range(3)]

        left = json.loads(read_file(budget_file))  # the control file itself is free
        assert left["used"]["reads"] == 3 and left["remaining"]["reads"] == 0
        assert (
            0 < left["used"]["tokens"] < 100
            and left["remaining"]["tokens"] == 100000 - left["used"]["tokens"]
        )
        # a refused read() can reach the server more than once (the kernel retries a failed readahead
        # page with a plain read), so refusals count FUSE read requests: at least one
        assert left["refused"] >= 1
        # still refused, and nothing more is consumed
        with pytest.raises(OSError) as ei:
            read_file(os.path.join(mnt, "notes", "n4.md"))
        assert ei.value.errno == errno.EDQUOT
        again = json.loads(read_file(budget_file))
        print("\n.libraryfs/budget after the refusals:", json.dumps(again))
        assert again["used"] == left["used"] and again["refused"] > left["refused"]
