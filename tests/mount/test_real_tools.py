"""Generated files never break tools (issue 14): git, cp, rsync and tar inside the mount, exactly as on a
local directory.

Each test runs one script of real commands twice — in the mount and in a plain temporary directory — and
compares what the commands printed and returned: every command must exit 0 in both places and print the
same (paths normalised). The mount-only assertions check the design (docs/posix.md "Generated files and
tools"): no TOC inside ``.git/`` or ignored paths, generated names never listed, ``cat INDEX.md`` still
reads the current TOC in every indexed directory, and a user's own ``INDEX.md`` is stored byte-exact.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from helpers.facility import unavailable

from libraryfs.index.toc import links

pytestmark = pytest.mark.mount
USER_INDEX = b"# My own index\n\nTracked by the repository, not generated.\n"
USER_INDEX_SH = USER_INDEX.decode().replace("\n", "\\n")  #: the same bytes as a printf format


def _need(*exes: str) -> None:
    for exe in exes:
        if not shutil.which(exe):
            unavailable(f"{exe} is missing (apt-get install {exe})")


class Shell:
    """Runs commands in ``root`` with a fixed git identity and no user or system git configuration;
    records ``(command, exit code, stdout)`` with ``root`` replaced by ``$ROOT``."""

    def __init__(self, root: str, home: str) -> None:
        self.root = root
        self.log: list[tuple[str, int, str]] = []
        self.env = dict(
            os.environ,
            HOME=home,
            GIT_CONFIG_NOSYSTEM="1",
            GIT_AUTHOR_NAME="t",
            GIT_AUTHOR_EMAIL="t@example.org",
            GIT_COMMITTER_NAME="t",
            GIT_COMMITTER_EMAIL="t@example.org",
            GIT_AUTHOR_DATE="2026-01-01T00:00:00Z",
            GIT_COMMITTER_DATE="2026-01-01T00:00:00Z",
            LC_ALL="C",
        )

    def __call__(self, cmd: str, cwd: str = "") -> str:
        r = subprocess.run(
            cmd,
            shell=True,
            cwd=os.path.join(self.root, cwd),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        out = r.stdout.replace(self.root, "$ROOT")
        self.log.append((cmd, r.returncode, out))
        assert r.returncode == 0, f"{cmd!r} in {self.root}: rc {r.returncode}\n{r.stdout}\n{r.stderr}"
        return out


def _twice(mounted, tmp_path, script, prepare=None) -> tuple[Shell, Shell]:
    """Run ``script(shell)`` in ``<mount>/work`` and in a temporary directory (after ``prepare(root)``);
    every command exits 0 in both, and both logs (commands, exit codes, output) are equal."""
    home = tmp_path / "home"
    home.mkdir()
    local = tmp_path / "local"
    local.mkdir()
    os.mkdir(mounted.p("work"))
    shells = Shell(mounted.p("work"), str(home)), Shell(str(local), str(home))
    for sh in shells:
        if prepare:
            prepare(sh.root)
        script(sh)
    assert shells[0].log == shells[1].log
    return shells


def _tree(base: str) -> None:
    """A small source tree: notes with a user's INDEX.md, a nested section, a symlink, an old mtime."""
    os.makedirs(os.path.join(base, "notes", "deep"))
    os.makedirs(os.path.join(base, "src"))
    for rel, data in (
        ("notes/plan.md", b"# Plan\n\nShip the index.\n"),
        ("notes/INDEX.md", USER_INDEX),
        ("notes/deep/idea.md", b"# Idea\n" * 50),
        ("src/main.py", b"print('hello')\n"),
        ("README", b"top\n"),
    ):
        with open(os.path.join(base, rel), "wb") as f:
            f.write(data)
    os.symlink("notes/plan.md", os.path.join(base, "plan-link"))
    os.utime(os.path.join(base, "README"), ns=(1_700_000_000_000_000_000,) * 2)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _is_toc(data: bytes) -> bool:
    return data.startswith(b"<!-- libraryfs toc:")


# ---- git ------------------------------------------------------------------------------------------------
def _git_script(sh: Shell) -> None:
    sh("git init -q -b main r")
    sh("mkdir -p notes/deep build && printf '# Plan\\n\\nShip it.\\n' > notes/plan.md", "r")
    sh(
        "printf 'x\\n' > notes/deep/idea.md && printf 'obj\\n' > build/out.o && printf 'build/\\n' > .gitignore",
        "r",
    )
    sh("git add -A && git commit -q -m one && git status --porcelain && git ls-files", "r")
    sh("git gc -q && git fsck --strict && git repack -a -d -q && git prune && git show-ref", "r")
    # a branch that tracks its own INDEX.md files; checkouts back and forth
    sh(
        f"git checkout -q -b tracked && printf '{USER_INDEX_SH}' > INDEX.md && printf 'mine\\n' > notes/INDEX.md",
        "r",
    )
    sh("git add -A && git commit -q -m two && git status --porcelain && git ls-files", "r")
    sh("git checkout -q main && git status --porcelain && ls -A . notes", "r")
    sh("git checkout -q tracked && git status --porcelain && cat INDEX.md notes/INDEX.md", "r")
    sh("git stash list && git checkout -q main && git status --porcelain", "r")
    # clone from the repository in place, push into a bare repository in place, clone the tracked branch
    sh("git clone -q r c && git -C c status --porcelain && git -C c log --oneline && git -C c fsck --strict")
    sh("git init -q --bare b.git && git -C r push -q ../b.git main tracked && git -C b.git fsck --strict")
    sh("git clone -q -b tracked b.git d && git -C d status --porcelain && cat d/INDEX.md d/notes/INDEX.md")
    sh("git -C d checkout -q main && git -C d status --porcelain && git -C d checkout -q tracked && ls -A d")


def test_git_works_in_the_mount_as_on_a_local_disk(mounted, tmp_path):
    _need("git")
    _twice(mounted, tmp_path, _git_script)
    mounted.wait_indexed()
    r = mounted.p("work/r")
    for rel in (".git/INDEX.md", ".git/refs/INDEX.md", ".git/objects/INDEX.md", "build/INDEX.md"):
        assert not os.path.exists(os.path.join(r, rel)), rel  # no TOC in a dot-directory or an ignored path
    # in a git work tree INDEX.md is git's name: every TOC there is .index/INDEX.md, and links say so
    for rel in ("", "notes", "notes/deep"):
        assert not os.path.exists(os.path.join(r, rel, "INDEX.md")), rel
    deep = _read(os.path.join(r, "notes", "deep", ".index", "INDEX.md"))
    assert _is_toc(deep) and b"../idea.md" in links(deep)
    page = _read(os.path.join(r, ".index", "INDEX.md"))
    assert _is_toc(page) and b"../notes/.index/INDEX.md" in links(page)
    assert not [x for x in links(page) if x.startswith(b"../build")]  # an ignored directory is left out
    work = _read(mounted.p("work/INDEX.md"))  # outside the work tree: `cat INDEX.md` as everywhere
    assert _is_toc(work) and b"r/.index/INDEX.md" in links(work)
    # the clone of the tracked branch: the repository's own INDEX.md, byte-exact; the TOC in .index/
    d = mounted.p("work/d")
    assert _read(os.path.join(d, "INDEX.md")) == USER_INDEX
    alias = _read(os.path.join(d, ".index", "INDEX.md"))
    assert _is_toc(alias) and b"../INDEX.md" in links(alias)


# ---- cp, rsync, tar ------------------------------------------------------------------------------------------
def test_cp_a_and_cp_r_of_a_directory_in_the_mount(mounted, tmp_path):
    _need("cp", "diff")
    _tree(str(tmp_path / "src"))

    def prepare(root: str) -> None:
        shutil.copytree(tmp_path / "src", os.path.join(root, "src"), symlinks=True)

    def script(sh: Shell) -> None:
        sh("cp -a src dir2 && cp -r src dir3 && diff -r src dir2 && diff -r src dir3 && ls -AR dir2")
        sh("cp -a dir2/. dir3/ && diff -r src dir3 && cp -a src/notes dir3/ && rm -r dir3 && ls -A")

    _twice(mounted, tmp_path, script, prepare)
    mounted.wait_indexed()
    assert _read(mounted.p("work/dir2/notes/INDEX.md")) == USER_INDEX  # the user's INDEX.md, byte-exact
    assert _is_toc(_read(mounted.p("work/dir2/INDEX.md")))  # a generated one where the user has none


def test_rsync_delete_into_the_mount_converges(mounted, tmp_path):
    _need("rsync", "diff")
    _tree(str(tmp_path / "src"))

    def prepare(root: str) -> None:  # each run changes its own copy of the source, outside the mount
        src = str(tmp_path / ("src-" + os.path.basename(root)))
        shutil.copytree(tmp_path / "src", src, symlinks=True)
        os.symlink(src, os.path.join(tmp_path, "cur-src"))

    def script(sh: Shell) -> None:
        src = os.readlink(tmp_path / "cur-src")
        os.unlink(tmp_path / "cur-src")
        sh.env["SRC"] = src
        sh('rsync -a --delete "$SRC"/ mirror/ && diff -r "$SRC" mirror')
        sh('rsync -a --delete --itemize-changes "$SRC"/ mirror/')  # nothing left to do
        sh('printf \'more\\n\' >> "$SRC"/src/main.py && rm "$SRC"/README')
        sh('rsync -a --delete --itemize-changes "$SRC"/ mirror/ | grep -v "^\\.d" | sed "s/^>f\\.st/>f.s./"')
        stats = "grep -E '^Number of (regular files transferred|deleted files)'"
        sh(f'rsync -a --delete --stats "$SRC"/ mirror/ | {stats}')
        sh(
            'diff -r "$SRC" mirror && rsync -a --delete mirror/ mirror2/ && rsync -ai --delete mirror/ mirror2/'
        )

    mount_sh, _local = _twice(mounted, tmp_path, script, prepare)
    assert mount_sh.log[1][2] == "" and mount_sh.log[5][2] == ""  # the second runs transferred nothing
    assert (
        mount_sh.log[3][2] == ">f.s...... src/main.py\n*deleting   README\n" or "README" in mount_sh.log[3][2]
    )
    assert "transferred: 0" in mount_sh.log[4][2] and "deleted files: 0" in mount_sh.log[4][2]
    assert _read(mounted.p("work/mirror/notes/INDEX.md")) == USER_INDEX
    mounted.wait_indexed()
    assert _is_toc(_read(mounted.p("work/mirror/src/INDEX.md")))


def test_tar_x_then_diff_r(mounted, tmp_path):
    _need("tar", "diff")
    _tree(str(tmp_path / "src"))
    archive = str(tmp_path / "src.tar")
    subprocess.run(["tar", "cf", archive, "-C", str(tmp_path), "src"], check=True)

    def script(sh: Shell) -> None:
        sh(f"tar xf {archive} && diff -r {tmp_path}/src src")
        sh(
            "mkdir again && tar cf - src | tar xf - -C again && diff -r src again/src"
        )  # a tar of the tree itself
        sh(f"tar xf {archive} && diff -r {tmp_path}/src src")  # extracting over it again

    _twice(mounted, tmp_path, script)
    assert _read(mounted.p("work/again/src/notes/INDEX.md")) == USER_INDEX


def test_touch_of_the_generated_index_leaves_it_generated(mounted):
    """`touch INDEX.md` opens the generated TOC for writing and writes nothing: the claimed copy (the
    generated bytes) is absorbed at its close, so the TOC keeps following the directory."""
    os.makedirs(mounted.p("tdir"))
    with open(mounted.p("tdir/a.md"), "w") as f:
        f.write("# Apples\n\nAbout apples.\n")
    mounted.wait_indexed()
    subprocess.run(["touch", mounted.p("tdir/INDEX.md")], check=True)
    assert "INDEX.md" not in os.listdir(mounted.p("tdir"))  # still the generated, unlisted TOC
    with open(mounted.p("tdir/b.md"), "w") as f:
        f.write("# Bananas\n\nAbout bananas.\n")
    mounted.wait_indexed()
    assert b"b.md" in _read(mounted.p("tdir/INDEX.md"))
