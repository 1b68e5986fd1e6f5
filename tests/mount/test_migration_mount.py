"""A library made by the previous releases, mounted by this one: the CLI reads it as schema 1 without
writing, the mount server migrates it on open, and every file, link, xattr and TOC reads the same through
the kernel as the previous release's view read it (tests/helpers/schema1_fixture.py)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from helpers.schema1_fixture import DYNAMIC, S_IFLNK, S_IFREG, unpack

from libraryfs.fs import migrations
from libraryfs.fs import schema as S
from libraryfs.fs.store import Store

pytestmark = [pytest.mark.mount, pytest.mark.no_indexer]  # no indexer: the TOCs stay the release's


@pytest.fixture
def libdir(tmp_path):
    """The fixture library (schema 1) instead of a new one: ``mounted`` mounts it."""
    lib, _manifest = unpack(str(tmp_path / "old"))
    return Path(lib)


def _check_entry(mnt: str, rel: bytes, want: dict) -> None:
    path = os.fsencode(mnt) + rel
    st = os.lstat(path)
    assert stat.S_IFMT(st.st_mode) == want["type"], rel
    if want.get("dynamic"):
        return
    assert (st.st_mode, st.st_nlink, st.st_size) == (want["st_mode"], want["st_nlink"], want["st_size"]), rel
    if "st_ino" in want:
        assert (st.st_ino, st.st_uid, st.st_gid) == (want["st_ino"], want["st_uid"], want["st_gid"]), rel
    if want["type"] == S_IFLNK:
        assert os.readlink(path).hex() == want["target"], rel
    elif want["type"] == S_IFREG:
        with open(path, "rb") as f:
            data = f.read()
        assert hashlib.sha256(data).hexdigest() == want["sha256"], (rel, data[:300])
    xattrs = {
        n: os.getxattr(path, n, follow_symlinks=False).hex()
        for n in os.listxattr(path, follow_symlinks=False)
    }
    assert {k: v for k, v in xattrs.items() if k.startswith("user.")} == want["xattrs"], rel


def test_previous_release_library_reads_the_same_through_a_mount(libdir, run_cli, request):
    lib = str(libdir)
    manifest = json.loads((libdir.parent / "manifest.json").read_text(encoding="utf-8"))
    r = run_cli("check", lib)  # read-only: served at schema 1, says what is pending, writes nothing
    assert r.returncode == 0 and r.stdout.startswith("schema 1 (this release writes 3; pending"), (
        r.stdout + r.stderr
    )
    st = Store(lib, readonly=True)
    try:
        assert st.schema_version == 1
    finally:
        st.close()
    m = request.getfixturevalue("mounted")  # the mount server opens it read-write: migrations 1 → 2 → 3
    st = m.store(readonly=True)
    try:
        assert st.schema_version == 3
        with st.read() as t:
            assert all(len(v) == 9 for _k, v in t.kv.range(S.DB_DIRENTS))
            assert all(len(v) == S.INODE_SIZE for _k, v in t.kv.range(S.DB_INODES))
            ino = t.lookup(t.lookup(S.ROOT_INO, b"notes"), b"a.md")
            blocks = migrations.allocated_blocks(t, ino)
    finally:
        st.close()
    assert os.stat(os.path.join(m.mnt, "notes", "a.md")).st_blocks == blocks > 0
    names = sorted(manifest["tree"])
    assert len(names) > 130
    for hexpath in names:
        rel = bytes.fromhex(hexpath)
        if any(part in DYNAMIC for part in rel.split(b"/")[:-1]):
            continue
        _check_entry(m.mnt, rel, manifest["tree"][hexpath])
    listings: dict[bytes, list[bytes]] = {}
    for h in names:
        parent, name = bytes.fromhex(h).rsplit(b"/", 1)
        listings.setdefault(parent, []).append(name)
    for parent, want in listings.items():  # the same listings, no more and no fewer names
        if not any(part in DYNAMIC for part in parent.split(b"/")):
            if parent.rsplit(b"/", 1)[-1] != b".index":  # stored names only: generated ones are not listed
                want = [n for n in want if n not in (b"INDEX.md", b".index", *DYNAMIC)]
            assert sorted(os.listdir(os.fsencode(m.mnt) + parent + b"/")) == sorted(want), parent
    with open(os.path.join(m.mnt, "notes", "a.md"), "a") as f:  # and it is writable as usual
        f.write("appended after the migration\n")
