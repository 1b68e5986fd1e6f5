"""The typed layer is the same over every backend: a library on the etcd backend (a real 3-member loopback
cluster) created, written through the view, indexed, searched and checked like an LMDB one."""

from __future__ import annotations

import os

from libraryfs.daemon.indexer import Indexer
from libraryfs.fs import schema as S
from libraryfs.fs.check import check
from libraryfs.fs.meta import SectionMeta
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView
from libraryfs.index.find import find


def _write(view: LibraryView, path: bytes, data: bytes) -> None:
    fh = view.create(path, S.S_IFREG | 0o644, os.O_WRONLY | os.O_CREAT, 0, 0)
    try:
        view.write(fh, data, 0)
    finally:
        view.release(fh)


def test_a_library_on_etcd_works_through_the_typed_layer(etcd_backend, tmp_path):
    st = Store.create(tmp_path / "lib", {"toc_max_tokens": 2000}, backend=etcd_backend)
    view = LibraryView(st)
    view.mkdir(b"/notes", 0o755, 0, 0)
    _write(view, b"/notes/apples.md", b"# Apples\n\nAbout apples.\n")
    _write(view, b"/notes/big.bin", os.urandom(150_000))  # three chunks
    view.symlink(b"/notes/link", b"apples.md", 0, 0)
    view.rename(b"/notes/apples.md", b"/notes/pears.md")
    Indexer(str(tmp_path / "lib"), store=st).run_once(full=True)
    with st.read() as t:
        assert [n for n, _c, _ty in t.iter_dir_typed(t.lookup(S.ROOT_INO, b"notes"))] == [
            b"big.bin",
            b"link",
            b"pears.md",
        ]
        assert find(t, "pears.md") == [b"/notes/pears.md"]
        assert isinstance(t.section_meta(t.lookup(S.ROOT_INO, b"notes")), SectionMeta)
    fh, _ = view.open(b"/notes/INDEX.md", os.O_RDONLY)
    try:
        toc = view.read(fh, 1 << 16, 0)
    finally:
        view.release(fh)
    assert b"[pears.md](pears.md)" in toc and b"big.bin" in toc
    assert check(st).problems == []
    again = Store(tmp_path / "lib", backend=etcd_backend)  # a second open checks the schema on etcd too
    assert again.schema_version == S.SCHEMA_VERSION
