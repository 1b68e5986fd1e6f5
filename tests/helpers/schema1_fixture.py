"""A schema-1 library made by the previous releases, for the migration test (tests/unit/test_migrations.py).

The fixture ``tests/fixtures/schema1-784e628.tar.gz`` holds ``lib/store/data.mdb`` and ``manifest.json``.
It was made in two phases, each by a release's own code in its own virtualenv, so that it holds both dirent
forms schema 1 allowed:

1. commit 03194f1 (before f0cb335, which added the file-type byte to dirents): creates the library,
   sections, text/binary/sparse/non-UTF-8-named files, a symlink, a hard link, an xattr, and runs one
   deterministic indexer pass (``meta``, ``names``, ``toc`` records). Its dirents are 8 bytes (child ino).
2. commit 784e628 (the last release before the store/schema rework): adds files and a 120-entry section
   (multi-page TOC), renames a file into a new section, runs another indexer pass. Its
   dirents carry the type byte; the manifest is then taken by this release's view (:func:`snapshot`).

Reproduce (about two minutes; ``$OLD`` is a scratch directory)::

    git -C REPO archive 03194f1 | (mkdir -p $OLD/a && tar -x -C $OLD/a)
    git -C REPO archive 784e628 | (mkdir -p $OLD/b && tar -x -C $OLD/b)
    python3 -m venv $OLD/venv
    $OLD/venv/bin/pip install $OLD/a && $OLD/venv/bin/python tests/helpers/schema1_fixture.py build $OLD/lib 1
    $OLD/venv/bin/pip install $OLD/b && $OLD/venv/bin/python tests/helpers/schema1_fixture.py build $OLD/lib 2
    $OLD/venv/bin/python tests/helpers/schema1_fixture.py pack $OLD/lib tests/fixtures/schema1-784e628.tar.gz

``build`` and ``pack`` import the old module paths (``libraryfs.store``, ``libraryfs.view``, ...), so they
only run under those releases; :func:`snapshot` and :func:`unpack` use only the view's FUSE operations and
run under any release.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
from collections.abc import Callable

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "schema1-784e628.tar.gz")
#: generated subtrees whose content changes with time (status, live search) are listed, not read
DYNAMIC = (b".libraryfs", b".find")
#: generated TOC names: their inode numbers are handed out in order of first use and their mtime is the
#: view's start time at the latest, so neither is recorded
GENERATED = (b"INDEX.md", b".index")
FIND_TERMS = ("a.md", "note", "deep", "entry 17", "caf")
S_IFMT, S_IFDIR, S_IFREG, S_IFLNK = 0o170000, 0o040000, 0o100000, 0o120000


def _read_all(view, path: bytes) -> bytes:
    fh, _ = view.open(path, os.O_RDONLY)
    try:
        out, off = b"", 0
        while True:
            chunk = view.read(fh, 1 << 16, off)
            if not chunk:
                return out
            out += chunk
            off += len(chunk)
    finally:
        view.release(fh)


def _entry(view, path: bytes, ftype: int) -> dict:
    st = view.getattr(path)
    rec = {k: st[k] for k in ("st_ino", "st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_mtime")}
    if any(part in GENERATED for part in path.split(b"/")):
        del rec["st_ino"], rec["st_mtime"]
    rec["type"] = ftype
    if ftype == S_IFLNK:
        rec["target"] = view.readlink(path).hex()
    elif ftype == S_IFREG:
        data = _read_all(view, path)
        rec["sha256"] = hashlib.sha256(data).hexdigest()
        if path.endswith(b".md"):  # TOC pages and notes: kept whole so a failure shows the difference
            rec["text"] = data.decode("utf-8", "backslashreplace")
    try:
        names = sorted(view.listxattr(path))
    except Exception:  # noqa: BLE001 - generated files may refuse xattrs: record that as no xattrs
        names = []
    rec["xattrs"] = {n.decode("utf-8", "backslashreplace"): view.getxattr(path, n).hex() for n in names}
    return rec


def _lookup_only(view, d: bytes, listed: set[bytes]) -> list[tuple[bytes, int]]:
    """Generated names of directory ``d`` that resolve without being listed (this release lists none of
    them; earlier ones listed all): ``(name, type bits)``, so snapshots of both releases compare."""
    out: list[tuple[bytes, int]] = []
    if d.rsplit(b"/", 1)[-1] in GENERATED:
        return out
    for name in sorted(set(GENERATED + (DYNAMIC if d == b"/" else ())) - listed):
        try:
            st = view.getattr(d.rstrip(b"/") + b"/" + name)
        except Exception:  # noqa: BLE001 - absent here (a LibraryError of any release)
            continue
        out.append((name, st["st_mode"] & 0o170000))
    return out


def snapshot(view, finder: Callable[[bytes], list[bytes]] | None = None) -> dict:
    """Everything a reader sees through ``view`` (a LibraryView of any release): ``{"tree": {path hex:
    record}, "find": {term: [path hex]}}``; records hold stat fields, the readdir type, content hash (and
    text of ``*.md``), symlink target and xattrs. ``finder(term) -> paths`` adds the finder's answers."""
    tree: dict[str, dict] = {}
    todo = [b"/"]
    while todo:
        d = todo.pop()
        fh = view.opendir(d)
        try:
            listing = [(n, m) for n, m, _ino, _off in view.readdir(fh, 0) if n not in (b".", b"..")]
        finally:
            view.releasedir(fh)
        listing += _lookup_only(view, d, {n for n, _m in listing})
        for name, ftype in sorted(listing):
            path = d.rstrip(b"/") + b"/" + name
            if name in DYNAMIC:
                tree[path.hex()] = {"type": ftype, "dynamic": True}
                continue
            tree[path.hex()] = _entry(view, path, ftype)
            if ftype == S_IFDIR:
                todo.append(path)
    found = {term: [p.hex() for p in finder(term.encode())] for term in FIND_TERMS} if finder else {}
    return {"tree": tree, "find": found}


def unpack(dest: str, tarball: str = FIXTURE) -> tuple[str, dict]:
    """Extract the fixture into ``dest``; returns (library directory, manifest)."""
    with tarfile.open(tarball, "r:gz") as tar:
        tar.extractall(dest, filter="data")
    with open(os.path.join(dest, "manifest.json"), encoding="utf-8") as f:
        return os.path.join(dest, "lib"), json.load(f)


# ---- run under the old releases only -------------------------------------------------------------------
def _write(view, path: bytes, data: bytes, offset: int = 0) -> None:
    fh = view.create(path, S_IFREG | 0o644, os.O_WRONLY | os.O_CREAT, 1000, 1000)
    try:
        view.write(fh, data, offset)
    finally:
        view.release(fh)


def _phase1(view) -> None:
    for d in (b"/notes", b"/notes/deep", b"/projects"):
        view.mkdir(d, 0o755, 1000, 1000)
    _write(view, b"/notes/a.md", b"# A note\n\nAbout apples and the a.md name.\n")
    _write(view, b"/notes/deep/b.md", b"# Deep note\n\nA deeper note about pears.\n")
    _write(view, b"/notes/caf\xe9.txt", b"a name that is not UTF-8\n")
    _write(view, b"/projects/readme.md", b"# Projects\n\nWhat the projects are.\n")
    _write(view, b"/projects/blob.bin", bytes(range(256)) * 40)
    _write(view, b"/projects/sparse.dat", b"tail after a hole\n", offset=200_000)
    view.symlink(b"/notes/link-to-a", b"a.md", 1000, 1000)
    view.link(b"/notes/a.md", b"/projects/a-hardlink.md")
    view.setxattr(b"/notes/a.md", b"user.tag", b"fruit", 0)


def _phase2(view) -> None:
    view.mkdir(b"/archive", 0o755, 1000, 1000)
    view.rename(b"/projects/readme.md", b"/archive/readme.md")
    _write(view, b"/notes/new-note.md", b"# New\n\nWritten by the previous release.\n")
    view.mkdir(b"/many", 0o755, 1000, 1000)
    for k in range(120):
        _write(
            view,
            b"/many/entry-%03d.md" % k,
            b"# Entry %d\n\nEntry %d of a long section about topic %d.\n" % (k, k, k % 7),
        )


def build(libdir: str, phase: int) -> None:
    """Phase 1 (release 03194f1) creates the library; phase 2 (784e628) extends it. Both index it."""
    from libraryfs.daemon.indexer import Indexer
    from libraryfs.store import Store
    from libraryfs.view import LibraryView

    st = Store.create(libdir, {"toc_max_tokens": 2000}) if phase == 1 else Store(libdir)
    try:
        view = LibraryView(st)
        if phase == 1:
            view.mkdir(b"/inbox", 0o755, 1000, 1000)
            _phase1(view)
        else:
            _phase2(view)
        Indexer(libdir, store=st).run_once(full=phase == 1)
    finally:
        st.close()


def pack(libdir: str, out: str) -> None:
    """Write ``out``: the library's data.mdb (lock file left out) and the manifest taken by this release."""
    from libraryfs.find import find
    from libraryfs.store import Store
    from libraryfs.view import LibraryView

    st = Store(libdir)
    try:
        view = LibraryView(st)

        def finder(term: bytes) -> list[bytes]:
            with st.read() as t:
                return find(t, term)

        manifest = snapshot(view, finder)
    finally:
        st.close()
    blob = json.dumps(manifest, indent=1, sort_keys=True).encode()
    with tarfile.open(out, "w:gz", compresslevel=9) as tar:
        tar.add(os.path.join(libdir, "store", "data.mdb"), arcname="lib/store/data.mdb")
        info = tarfile.TarInfo("manifest.json")
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "pack":
        pack(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(f"usage: {sys.argv[0]} build LIBDIR 1|2 | pack LIBDIR OUT.tar.gz")
