"""The cases of ../shared/cases/POSIX.md as mount tests, run through real shell tools.

C01 and C03 are plain file API behaviour: tests/posix_behaviour runs them (and the file API side of the
others) in process and through a mount. What stays here needs the kernel's caches, the indexer, real tools
(sed, perl, touch, cp, dd, flock, sqlite3), other users, concurrency, a crash or a full disk.

Each test runs the case's shell commands (bash, sed, cat, mv, touch, stat, perl, sqlite3, flock, setfattr,
inotifywait, cp, dd, truncate, python3) against a real mount and asserts the expected values the case gives.
Steps in <angle brackets> are harness steps done here in Python: waiting for the indexer, writing to the
store behind the kernel, killing the server, mounting a small library directory.

Most cases share one module-scoped mount and work in their own subdirectory (``$M`` = that subdirectory);
the cases that need the root, a crash or a full disk get their own mount. One deliberate difference from the
case text: every directory shows a generated ``INDEX.md``, so listings are compared without it.

System packages: bash coreutils sed perl sqlite3 util-linux (flock, setpriv) attr (setfattr/getfattr)
inotify-tools fuse3.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from helpers.facility import unavailable
from helpers.files import read_file
from helpers.mount import Mounted, mount
from helpers.wait import wait_exit, wait_until

from libraryfs.fs import schema as S
from libraryfs.fs.store import Store
from libraryfs.fs.tree import StoreTree
from libraryfs.fs.view import LibraryView

TOOLS = (
    "bash",
    "sed",
    "perl",
    "sqlite3",
    "flock",
    "setfattr",
    "getfattr",
    "inotifywait",
    "dd",
    "truncate",
    "setpriv",
)


def _need_tools() -> None:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        msg = f"missing tools: {missing} (apt-get install sqlite3 attr inotify-tools util-linux perl)"
        unavailable(msg)


def sh(script: str, m: str, *, timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``script`` with bash, ``$M`` set to ``m``, python3 = this interpreter, TZ=UTC; output as text."""
    penv = dict(
        os.environ,
        M=m,
        TZ="UTC",
        LC_ALL="C.UTF-8",
        PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
    )
    penv.update(env or {})
    return subprocess.run(
        ["bash", "-c", script],
        env=penv,
        capture_output=True,
        timeout=timeout,
        text=True,
        errors="surrogateescape",
    )


def out(script: str, m: str, **kw) -> str:
    """stdout of :func:`sh` (stderr is appended on failure to make assertion messages useful)."""
    r = sh(script, m, **kw)
    return r.stdout


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One mount for the cases that cannot interfere with each other (each uses its own subdirectory)."""
    _need_tools()
    base = tmp_path_factory.mktemp("posix")
    Store.create(base / "lib", {"toc_max_tokens": 2000}).close()
    with mount(base / "lib", base / "mnt") as m:  # its teardown also scans the indexer log for tracebacks
        yield m


def case_dir(m: Mounted, name: str) -> str:
    """A fresh subdirectory of the mount for one case (its ``$M``)."""
    d = m.p(name)
    os.mkdir(d)
    return d


def rel(m: Mounted, path: str) -> bytes:
    """Path inside the library (``b"/a/b"``) of an absolute mount path."""
    return os.fsencode("/" + os.path.relpath(path, m.mnt))


def store_append(m: Mounted, path: str, data: bytes) -> None:
    """Append to a file through the store, bypassing the kernel (what the daemon itself may do)."""
    st = m.store()
    try:
        v = LibraryView(st)
        fh, _direct = v.open(rel(m, path), os.O_WRONLY | os.O_APPEND)
        v.write(fh, data, 0)
        v.release(fh)
    finally:
        st.close()


def store_create(m: Mounted, path: str, data: bytes) -> None:
    """Create a file through the store, bypassing the kernel."""
    st = m.store()
    try:
        v = LibraryView(st)
        fh = v.create(rel(m, path), 0o644, os.O_WRONLY | os.O_CREAT, os.getuid(), os.getgid())
        v.write(fh, data, 0)
        v.release(fh)
    finally:
        st.close()


def toc_generation(m: Mounted) -> int:
    st = Store(m.libdir, readonly=True)
    try:
        with st.read() as t:
            return t.cfg_int(S.CFG_TOC_GEN)
    finally:
        st.close()


# ---------------------------------------------------------------------------------------------------------
def test_c02_append_uses_the_real_end(shared):
    M = case_dir(shared, "c02")
    o = out(
        """
printf 'first line\\n' > $M/a.md; echo second >> $M/a.md; cat $M/a.md
printf 'x%.0s' {1..5000} > $M/b.md; echo END >> $M/b.md; tail -c 4 $M/b.md; stat -c %s $M/b.md
""",
        M,
    )
    assert o == "first line\nsecond\nEND\n5004\n"
    cat_a = out("cat $M/a.md", M)  # the kernel now has a.md's size and pages cached
    assert cat_a == "first line\nsecond\n"
    store_append(shared, M + "/a.md", b"Z\n")
    o = out("echo third >> $M/a.md; cat $M/a.md", M)
    assert o == "first line\nsecond\nZ\nthird\n"


def test_c04_sed_in_place(shared):
    M = case_dir(shared, "c04")
    o = out(
        """
printf 'alpha\\nbeta\\n' > $M/s.md; chmod 644 $M/s.md
sed -i 's/beta/gamma/' $M/s.md; echo rc=$?; cat $M/s.md; stat -c %a $M/s.md
ls -a $M | grep -c '^sed'; sed -i.bak 's/alpha/ALPHA/' $M/s.md; cat $M/s.md.bak | head -1
cat $M/s.md
""",
        M,
    )
    assert o == "rc=0\nalpha\ngamma\n644\n0\nalpha\nALPHA\ngamma\n"


def test_c05_big_directories_ls_find_rm(shared):
    M = case_dir(shared, "c05")
    r = sh(
        """
mkdir $M/big; (cd $M/big && seq -f 'n%05g.md' 3000 | xargs touch)
timeout 20 ls $M/big | grep -c '^n[0-9]*\\.md$'; ls -f $M/big | sort | uniq -d | wc -l
mkdir -p $M/t/a/b/c && touch $M/t/a/b/c/leaf.md; stat -c %h $M/t/a
perl -MFile::Find -e 'find(sub{print "$File::Find::name\\n" if /leaf/}, shift)' $M/t
timeout 30 rm -rf $M/big; echo rm_rc=$?; ls $M | grep -c '^big$'
""",
        M,
        timeout=90,
    )
    assert r.stdout.splitlines() == ["3000", "0", "3", f"{M}/t/a/b/c/leaf.md", "rm_rc=0", "0"], r.stderr


def test_c06_touch_times(shared):
    M = case_dir(shared, "c06")
    o = out(
        """
echo x > $M/ts.md; sleep 2; touch $M/ts.md; echo $(( $(date +%s) - $(stat -c %Y $M/ts.md) ))
touch -d '2020-01-02 03:04:05' $M/ts.md; touch -a $M/ts.md; stat -c %y $M/ts.md
touch -m -d '2021-06-01' $M/ts.md; stat -c '%x | %y' $M/ts.md
python3 -c "import os;p='$M/ts.md';os.utime(p,ns=(10**18,2*10**18));print(os.stat(p).st_mtime_ns)"
""",
        M,
    )
    lines = o.splitlines()
    assert lines[0] in ("0", "1")
    assert lines[1] == "2020-01-02 03:04:05.000000000 +0000"
    atime, mtime = lines[2].split(" | ")
    assert mtime == "2021-06-01 00:00:00.000000000 +0000"
    assert atime[:4] == time.strftime("%Y", time.gmtime())  # touch -a set it to now; touch -m left it
    assert lines[3] == "2000000000000000000"


def test_c07_directory_rename(shared):
    M = case_dir(shared, "c07")
    o = out(
        """
mkdir -p $M/p/q && echo 1 > $M/p/q/f.md && echo 2 > $M/p/g.md
mv $M/p $M/p2 && cat $M/p2/q/f.md $M/p2/g.md; ls $M/p 2>&1 | grep -c 'No such'
mkdir $M/e; mv -T $M/p2 $M/e && ls $M/e/q
mkdir -p $M/full/x $M/src; python3 -c "import os;os.rename('$M/src','$M/full')" 2>&1 | grep -c 'not empty'
ls $M/full; ls -d $M/src
""",
        M,
    )
    assert o.splitlines() == ["1", "2", "1", "f.md", "1", "x", M + "/src"]  # INDEX.md: not listed
    shared.wait_indexed()
    top = read_file(M + "/INDEX.md")
    assert "](e/INDEX.md)" in top and "p2/" not in top and "(p/" not in top
    assert "q/" in read_file(M + "/e/INDEX.md")
    assert "f.md" in read_file(M + "/e/q/INDEX.md")


def test_c08_odd_names_and_long_paths(mounted):
    _need_tools()
    shared = mounted  # own mount: a non-UTF-8 name must not take the shared indexer down with it
    M = case_dir(shared, "c08")
    r = sh(
        """
touch "$M/with space.md" "$M/$(printf 'nl\\nname')" "$M/日本語 ✅.md"
python3 -c "import os;print({'with space.md','nl\\nname','日本語 ✅.md'} <= set(os.listdir('$M')))"
cat "$M/with space.md" "$M/$(printf 'nl\\nname')" "$M/日本語 ✅.md" && echo opened
touch "$M/$(printf '飞%.0s' {1..85}).md" 2>&1 | grep -c 'too long'
touch "$M/$(printf 'a%.0s' {1..255})" && ls $M | grep -c '^a\\{255\\}$'
python3 -c "import os;open(b'$M/caf\\xe9.md','wb').close();print(b'caf\\xe9.md' in os.listdir(b'$M'))"
d=$M; for i in 1 2 3; do d="$d/$(printf 'b%.0s' {1..200})"; mkdir "$d"; done; echo ok > "$d/f.md"; cat "$d/f.md"
python3 -c "import os;os.open('$M/'+'c'*256, os.O_CREAT|os.O_WRONLY)" 2>&1 | grep -c 'File name too long'
""",
        M,
    )
    assert r.stdout.splitlines() == ["True", "opened", "1", "1", "True", "ok", "1"], r.stderr
    shared.wait_indexed()  # the indexer survives all of it and lists the Latin-1 name
    assert "caf" in read_file(M + "/INDEX.md", errors="replace")


def test_c11_unlink_while_open(shared):
    M = case_dir(shared, "c11")
    o = out(
        """
python3 - <<PY
import os; d='$M/ul'; os.makedirs(d); p=d+'/t.md'; open(p,'w').write('keep me')
fd=os.open(p, os.O_RDWR); os.unlink(p)
print(os.read(fd,100), os.fstat(fd).st_size); os.write(fd,b'!'); os.ftruncate(fd,4); os.fchmod(fd, 0o600)
print(os.fstat(fd).st_size); os.close(fd)
print([n for n in os.listdir(d) if n != 'INDEX.md']); os.rmdir(d); print('rmdir ok')
PY
""",
        M,
    )
    assert o == "b'keep me' 7\n4\n[]\nrmdir ok\n"
    shared.wait_indexed()
    assert ".fuse_hidden" not in read_file(M + "/INDEX.md")


def test_c12_exclusive_create_under_concurrency(shared):
    M = case_dir(shared, "c12")
    o = out(
        """
python3 - <<PY
import os, multiprocessing as mp
def grab(_):
    try: os.close(os.open('$M/lock', os.O_CREAT|os.O_EXCL|os.O_WRONLY)); return 1
    except FileExistsError: return 0
def plain(i):
    with open('$M/shared.md','a') as f: f.write(f'{i}\\n')
    return 1
with mp.Pool(16) as p: print(sum(p.map(grab, range(64))), sum(p.map(plain, range(64))))
PY
wc -l < $M/shared.md; (set -o noclobber; echo x > $M/lock) 2>&1 | grep -c existing
sort -n $M/shared.md | uniq | wc -l
""",
        M,
        timeout=90,
    )
    assert o.split() == ["1", "64", "64", "1", "64"]


def test_c14_no_stale_reads_after_daemon_rewrites(shared):
    M = case_dir(shared, "c14")
    shared.wait_indexed()
    o = out(
        """
cat $M/INDEX.md > $M/../c14.before; echo note > $M/new.md
""",
        M,
    )
    shared.wait_indexed()
    o = out(
        """
diff -q $M/INDEX.md $M/../c14.before >/dev/null && echo STALE; grep -c 'new.md' $M/INDEX.md
""",
        M,
    )
    os.unlink(M + "/../c14.before")
    assert "STALE" not in o and int(o.split()[-1]) >= 1
    old = read_file(M + "/INDEX.md", "rb")
    # <store-side rewrite of INDEX.md with different text of identical length>
    new = old.swapcase()
    assert new != old and len(new) == len(old)
    st = shared.store()
    try:

        def rewrite(t):
            ino = t.lookup(S.ROOT_INO, b"c14")
            pages = [t.toc_page(ino, k) for k in range(t.toc_page_count(ino))]
            t.put_toc_pages(ino, [new] + pages[1:])
            t.put_cfg(S.CFG_TOC_GEN, S.u64(t.cfg_int(S.CFG_TOC_GEN) + 1))
            t.put_cfg(S.CFG_TOC_DIRTY, S.dumps([ino]))

        st.run_write(rewrite)
    finally:
        st.close()
    r = sh("cat $M/INDEX.md | head -3; stat -c %s $M/INDEX.md; cat $M/INDEX.md | wc -c", M)
    lines = r.stdout.splitlines()
    assert lines[:3] == new.decode().splitlines()[:3]
    assert lines[3] == lines[4] == str(len(new))


def test_c15_inotify_sees_shell_ops_not_daemon_writes(shared):
    M = case_dir(shared, "c15")
    shared.wait_indexed()
    ev = M + "/../c15.ev"
    with open(ev, "w") as evf:
        iw = subprocess.Popen(
            ["inotifywait", "-mr", "-e", "close_write,moved_to,create,delete", "--format", "%e %w%f", M],
            stdout=evf,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        # inotifywait says "Watches established." on stderr once it listens
        wait_until(lambda: "Watches established" in iw.stderr.readline(), 30, "inotifywait to listen")
        out("echo a > $M/x.md; mv $M/x.md $M/y.md; rm $M/y.md", M)
        store_create(shared, M + "/z.md", b"daemon\n")  # <daemon-internal write of z.md>
        out("touch $M/barrier.md", M)  # events arrive in order: once this one is there, so are the others
        wait_until(lambda: f"CREATE {M}/barrier.md" in read_file(ev), 30, "the barrier's inotify event")
    finally:
        iw.terminate()
        iw.wait()
        iw.stderr.close()
    events = read_file(ev).splitlines()
    os.unlink(ev)
    assert f"CREATE {M}/x.md" in events
    assert f"CLOSE_WRITE,CLOSE {M}/x.md" in events
    assert f"MOVED_TO {M}/y.md" in events
    assert f"DELETE {M}/y.md" in events
    assert not [e for e in events if "z.md" in e]
    # the indexer learns about z.md from the store (the journal), not from inotify
    shared.wait_indexed()
    assert "z.md" in read_file(M + "/INDEX.md")
    # <count INDEX.md rewrites with no user activity>: none (it never re-triggers on its own writes); an
    # observation window of 3 s (15 indexer polls), not a wait for anything
    gen = toc_generation(shared)
    time.sleep(3)
    assert toc_generation(shared) == gen
    # and it holds no inotify watches at all, so inotify limits cannot kill it
    ipid = shared.info["indexer_pid"]
    fds = [os.readlink(f"/proc/{ipid}/fd/{f}") for f in os.listdir(f"/proc/{ipid}/fd")]
    assert not [f for f in fds if "inotify" in f]


def test_c16_indexer_handles_temp_files_moves_appends(shared):
    M = case_dir(shared, "c16")
    out(
        """
python3 -c "import os;p='$M/k.md';open(p+'.tmp','w').write('K');os.replace(p+'.tmp',p)"
sed -i 's/K/K2/' $M/k.md; echo more >> $M/k.md; mkdir -p $M/n1/n2 && echo deep > $M/n1/n2/deep.md
mv $M/k.md $M/n1/k-renamed.md
""",
        M,
    )
    shared.wait_indexed()
    o = out(
        """
T="$M/INDEX.md $M/n1/INDEX.md $M/n1/n2/INDEX.md"  # TOC pages are opened by name, never listed
grep -l 'k-renamed.md' $T | wc -l; grep -l 'deep.md' $T | wc -l
grep -E '\\.tmp|sed[A-Za-z0-9]{6}|4913|k\\.md' $T | wc -l
cat $M/n1/k-renamed.md
""",
        M,
    )
    a, b, c, *content = o.splitlines()
    assert int(a) >= 1 and int(b) >= 1 and c == "0"
    assert content == ["K2more"]  # k.md held "K" without a newline


def test_c17_modes_exec_bit_and_other_users(shared):
    M = case_dir(shared, "c17")
    o = out(
        """
printf '#!/bin/sh\\necho ran\\n' > $M/s.sh; chmod +x $M/s.sh && $M/s.sh; stat -c %a $M/s.sh
chmod 600 $M/s.sh; stat -c %a $M/s.sh; mkdir -m 700 $M/priv; stat -c %a $M/priv
setpriv --reuid=65534 --regid=65534 --clear-groups ls $M >/dev/null 2>&1; echo other_user_rc=$?
""",
        M,
    )
    # documented policy: a mount is private to its owner (no allow_other) → another user gets EACCES
    assert o.splitlines() == ["ran", "755", "600", "700", "other_user_rc=2"]


def test_c18_symlinks_and_hard_links(shared):
    M = case_dir(shared, "c18")
    r = sh(
        """
echo t > $M/target.md; ln -s target.md $M/rel.md && cat $M/rel.md && readlink $M/rel.md
mkdir $M/sub && ln -s ../target.md $M/sub/up.md && cat $M/sub/up.md
ln $M/target.md $M/hard.md; echo hard_rc=$?; stat -c %h $M/target.md $M/hard.md; cp -al $M/sub $M/sub2; echo cpl_rc=$?
readlink $M/sub2/up.md; stat -c %h $M/sub2/up.md
ln -s /etc/passwd $M/escape.md
""",
        M,
    )
    assert r.stdout.splitlines() == [
        "t",
        "target.md",
        "t",
        "hard_rc=0",
        "2",
        "2",
        "cpl_rc=0",
        "../target.md",
        "2",
    ], r.stderr
    # cp -al of a directory copies the stored names only: generated ones are not listed (docs/posix.md)
    assert r.stderr == ""
    shared.wait_indexed()
    o = out("grep -c 'root:' $M/INDEX.md $M/sub/INDEX.md $M/sub2/INDEX.md | grep -v ':0'", M)
    assert o == ""
    assert "escape.md" in read_file(M + "/INDEX.md")  # listed, but never followed


def test_c19_xattrs_cp_a_and_mv_from_other_fs(shared, tmp_path):
    M = case_dir(shared, "c19")
    src = tmp_path / "src.md"
    o = out(
        f"""
ls -la $M >/dev/null; echo ls_rc=$?; echo h > {src}; setfattr -n user.k -v v {src} 2>/dev/null; has=$?
cp -a {src} $M/; echo cp_rc=$?; mv {src} $M/moved.md; echo mv_rc=$?
getfattr -n user.nope $M/moved.md 2>&1 | grep -Eo 'No such attribute|Operation not supported'
[ $has = 0 ] && getfattr --only-values -n user.k $M/src.md && echo
""",
        M,
    )
    lines = o.splitlines()
    assert lines[:4] == ["ls_rc=0", "cp_rc=0", "mv_rc=0", "No such attribute"]
    assert lines[4:] in ([], ["v"])


def test_c20_df_and_statvfs(shared):
    M = case_dir(shared, "c20")
    r = sh(
        """
df -h $M >/dev/null && df -i $M >/dev/null && echo df_ok
python3 -c "import os;s=os.statvfs('$M');print(s.f_bsize>0, s.f_bavail>0, s.f_namemax)"
""",
        M,
    )
    assert r.stdout == "df_ok\nTrue True 255\n", r.stderr

    def used_blocks() -> int:
        s = os.statvfs(M)
        return s.f_blocks - s.f_bfree

    before = used_blocks()
    with open(M + "/fill.bin", "wb") as f:
        f.write(os.urandom(8 << 20))
    # what is used counts the stored data (LMDB may reuse free pages, so compare to the data, not a delta)
    assert used_blocks() >= (8 << 20) // os.statvfs(M).f_frsize and used_blocks() >= before
    os.unlink(M + "/fill.bin")


def test_c21_offsets_holes_large_files(shared, tmp_path):
    M = case_dir(shared, "c21")
    big = tmp_path / "big"
    r = sh(
        f"""
head -c 3000000 /dev/urandom > {big}; cp {big} $M/big.bin && cmp {big} $M/big.bin && echo same
printf XY | dd of=$M/big.bin bs=1 seek=1000 conv=notrunc status=none; dd if=$M/big.bin bs=1 skip=1000 count=2 status=none; echo
truncate -s 10M $M/sp; printf Z | dd of=$M/sp bs=1 seek=5000000 conv=notrunc status=none
python3 -c "f=open('$M/sp','rb');f.seek(4999999);print(f.read(3), __import__('os').path.getsize('$M/sp'))"
cp --sparse=always {big} $M/cp2 && cmp {big} $M/cp2 && echo same2
""",
        M,
    )
    assert r.stdout == "same\nXY\nb'\\x00Z\\x00' 10485760\nsame2\n", r.stderr


def test_c23_locks_and_sqlite(shared):
    M = case_dir(shared, "c23")
    r = sh(
        """
flock -n $M/l.lock -c "flock -n $M/l.lock -c true; echo inner=\\$?"
sqlite3 $M/db.sqlite 'create table t(x); insert into t values(1); select count(*) from t;'
python3 -c "import fcntl;f=open('$M/l.lock','w');fcntl.lockf(f,fcntl.LOCK_EX|fcntl.LOCK_NB);print('ok')"
""",
        M,
    )
    assert r.stdout == "inner=1\n1\nok\n", r.stderr


# ---- cases with their own mount -------------------------------------------------------------------------
def test_c25_killed_server_leaves_dead_mount_then_remount(mounted):
    _need_tools()
    from libraryfs.daemon import launcher

    M = mounted.mnt
    notes = {f"n{i}.md": f"note {i}\n" for i in range(20)}
    for name, text in notes.items():
        with open(mounted.p(name), "w") as f:
            f.write(text)
    mounted.wait_indexed()
    os.kill(mounted.server_pid, signal.SIGKILL)
    assert wait_exit(mounted.server_pid, 10)
    listing = out("ls $M 2>&1", M)  # shown with /proc/mounts when it fails (a run once saw no such line)
    assert listing.count("not connected") == 1, listing + out("grep ' '$M' ' /proc/mounts", M)
    # <start daemon>: the launcher finds the stale mount in /proc/mounts, clears it, remounts; the indexer
    # of the first start is still running and keeps indexing
    info = launcher.start(mounted.libdir, M, indexer=False, timeouts="1,1,1")
    mounted.info = dict(info, indexer_pid=mounted.info["indexer_pid"])
    o = out("echo ok > $M/after.md && cat $M/after.md; cat $M/INDEX.md >/dev/null && echo intact", M)
    assert o == "ok\nintact\n"
    for name, text in notes.items():
        assert read_file(mounted.p(name)) == text
    mounted.wait_indexed()
    assert "after.md" in read_file(mounted.p("INDEX.md"))


def test_c26_map_full_is_enospc_and_space_is_reused(tmp_path):
    """A library on a 24 MiB tmpfs created with a 16 MiB map: the map grows until the disk is full, then ENOSPC."""
    _need_tools()
    disk = tmp_path / "disk"
    disk.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)], capture_output=True
        ).returncode
        != 0
    ):
        unavailable("cannot mount a tmpfs (not root?)")
    try:
        Store.create(disk / "lib", map_size=16 << 20).close()
        with mount(disk / "lib", tmp_path / "mnt") as m:
            M = m.mnt
            r = sh(
                """
for i in $(seq 40); do head -c 1000000 /dev/urandom > $M/fill$i.bin || { echo "fail at $i"; break; }; done
""",
                M,
                timeout=120,
            )
            fails = [ln for ln in r.stdout.splitlines() if ln.startswith("fail at")]
            assert fails, "a 24 MiB disk cannot hold 40 MB"
            errs = [ln for ln in r.stderr.splitlines() if ln.strip()]
            assert errs and all("No space left on device" in e for e in errs), r.stderr
            first_fail = int(fails[0].split()[-1])
            assert first_fail > 5
            assert m.info["server_pid"] and os.path.exists(f"/proc/{m.server_pid}")
            for i in range(1, first_fail):  # earlier files survive whole
                assert os.path.getsize(m.p(f"fill{i}.bin")) == 1000000
            o = out(
                """
cat $M/INDEX.md >/dev/null && echo readable; rm -f $M/fill*.bin; echo x > $M/post.md && cat $M/post.md
head -c 1000000 /dev/urandom > $M/again.bin && echo reused
""",
                M,
            )
            assert o == "readable\nx\nreused\n"
            m.wait_indexed()
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


_READER = (
    "import sys\nfrom libraryfs.fs.store import Store\nst = Store(sys.argv[1], readonly=True)\n"
    "with st.read():\n    print('holding', flush=True)\n    sys.stdin.read()\n"
)


def test_c26b_space_freed_under_a_reader_is_reused_once_it_ends(tmp_path):
    """On a full disk, pages freed by ``rm`` are reusable only once every reader holding an older snapshot
    ends (LMDB's freelist): the indexer reading during a pass made ``rm`` itself fail with ENOSPC (and the
    next create with EIO) under load. A write waits for such readers and then succeeds."""
    _need_tools()
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)]).returncode != 0:
        unavailable("cannot mount a tmpfs (not root?)")
    try:
        lib = disk / "lib"
        Store.create(lib, map_size=16 << 20).close()
        st = Store(lib)
        tree = StoreTree(st)
        n = 0
        with pytest.raises(OSError, match="no space left"):
            for n in range(1, 41):
                tree.write_bytes(f"fill{n}.bin", b"\xa5" * 1000000)
        reader = subprocess.Popen(
            [sys.executable, "-c", _READER, str(lib)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert reader.stdout.readline() == "holding\n"
            threading.Timer(0.2, reader.stdin.close).start()  # the reader ends while the removals run
            for i in range(1, n):
                tree.remove(f"fill{i}.bin")
            tree.write_bytes("again.bin", b"\x5a" * 1000000)
            assert tree.read_bytes("again.bin") == b"\x5a" * 1000000
        finally:
            reader.kill()
            reader.wait()
            reader.stdout.close()
            st.close()
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
