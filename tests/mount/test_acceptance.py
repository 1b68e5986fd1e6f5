"""The foundation issue's acceptance, through real mounts and the real CLI."""

import errno
import os
import signal
import subprocess

from helpers.files import read_file
from helpers.wait import wait_exit, wait_until

from libraryfs.fs.check import check
from libraryfs.fs.store import Store
from libraryfs.index.toc import links
from libraryfs.index.tokens import count_tokens
from libraryfs.layout import read_run


def wait_for(pred, timeout_s=30.0):
    return wait_until(pred, timeout_s, "the TOC to follow the shell")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def test_shell_write_edit_delete_and_directory_rename_reach_the_tocs(mounted):
    os.makedirs(mounted.p("proj/notes"))
    mounted.wait_indexed()
    subprocess.run(f"echo '# Meeting' > '{mounted.p('proj/notes/m.md')}'", shell=True, check=True)
    wait_for(lambda: b"m.md" in read(mounted.p("proj/notes/INDEX.md")))
    subprocess.run(
        f"printf '# Retro\\n\\nWhat went well.\\n' > '{mounted.p('proj/notes/m.md')}'", shell=True, check=True
    )
    wait_for(lambda: b"Retro" in read(mounted.p("proj/notes/INDEX.md")))
    assert b"Meeting" not in read(mounted.p("proj/notes/INDEX.md"))
    subprocess.run(["mv", mounted.p("proj/notes"), mounted.p("proj/archive")], check=True)
    wait_for(lambda: b"archive/" in read(mounted.p("proj/INDEX.md")))
    assert b"notes/" not in read(mounted.p("proj/INDEX.md"))
    assert b"m.md" in read(mounted.p("proj/archive/INDEX.md"))
    os.unlink(mounted.p("proj/archive/m.md"))
    try:
        wait_for(lambda: b"m.md" not in read(mounted.p("proj/archive/INDEX.md")))
    except AssertionError:
        print(
            read(mounted.p("proj/archive/INDEX.md")).decode(),
            read_file(os.path.join(mounted.libdir, "logs", "indexer.log"))[-2000:],
        )
        raise
    st = os.stat(mounted.p("proj/archive/INDEX.md"))
    assert st.st_size == len(read(mounted.p("proj/archive/INDEX.md")))


def test_kill_9_then_mount_again_recovers(mounted, run_cli):
    for i in range(20):
        with open(mounted.p(f"f{i}.md"), "w") as f:
            f.write(f"note {i}\n" * (i + 1))
    os.kill(mounted.server_pid, signal.SIGKILL)
    assert wait_exit(mounted.server_pid, 30)
    try:
        os.listdir(mounted.mnt)
        raise AssertionError("the mount should be dead")
    except OSError as e:  # a dead mount: ENOTCONN, or ECONNABORTED for a request the server never answered
        assert e.errno in (errno.ENOTCONN, errno.ECONNABORTED), e
    r = run_cli("mount", mounted.libdir, mounted.mnt, "--no-indexer")
    assert r.returncode == 0, r.stderr
    mounted.info["server_pid"] = read_run(mounted.libdir)["server_pid"]
    for i in range(20):
        assert read(mounted.p(f"f{i}.md")) == (f"note {i}\n" * (i + 1)).encode()
    log = read(os.path.join(mounted.libdir, "logs", "mount.log"))
    assert b"unclean shutdown detected" in log


def test_cli_errors_are_one_line(tmp_path, run_cli):
    r = run_cli("mount", str(tmp_path / "nolib"), str(tmp_path / "mnt"))
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and "not a libraryfs library" in r.stderr
    lib = tmp_path / "lib"
    assert run_cli("init", str(lib)).returncode == 0
    r = run_cli("mount", str(lib), str(lib / "inside"))
    assert r.returncode != 0 and "inside the library" in r.stderr
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    r = run_cli("mount", str(lib), str(busy))
    assert r.returncode != 0 and "not empty" in r.stderr
    r = run_cli("init", str(lib))
    assert r.returncode != 0 and "already holds a library" in r.stderr


def test_demo_on_real_input(tmp_path, run_cli):
    lib, mnt = tmp_path / "demo", tmp_path / "mnt"
    r = run_cli("demo", str(lib), str(mnt), "--words", "120", timeout=300)
    try:
        assert r.returncode == 0, r.stderr
        assert "head -14" in r.stdout and "INDEX.md" in r.stdout
        root = read(mnt / "INDEX.md")
        assert b"python-docs/" in root and b"dictionary/" in root
        n_entries, pages = 0, 0
        for dirpath, _dirs, files in os.walk(mnt):
            n_entries += len(files)
            # TOC pages are resolved by name, never listed (docs/posix.md "Generated files and tools")
            toc = [os.path.join(dirpath, "INDEX.md")]
            idx = os.path.join(dirpath, ".index")
            if os.path.isdir(idx):
                toc += [os.path.join(idx, n) for n in sorted(os.listdir(idx))]
            for p in toc:
                page = read(p)
                pages += 1
                assert count_tokens(page) <= 2000, p
                for lk in links(page):
                    assert os.path.exists(os.path.join(os.path.dirname(p), os.fsdecode(lk))), (p, lk)
        assert n_entries >= 500 and pages > 20
    finally:
        run_cli("umount", str(mnt))
    st = Store(lib)
    assert check(st).problems == []
    st.close()
