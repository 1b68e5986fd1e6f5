"""`libraryfs copy` between two LMDB libraries whose source holds extension tables (the name catalogue an
indexer writes): every table is read from the source and made on the copy (a new user's copy of a library
that had been mounted once died of KeyError b'catalogue')."""

from __future__ import annotations

import os

from libraryfs.daemon.indexer import Indexer
from libraryfs.fs import schema as S
from libraryfs.fs.copy import copy_library, table_digests
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView


def test_copy_of_an_indexed_library_keeps_its_extension_tables(tmp_path):
    src = str(tmp_path / "src")
    st = Store.create(src)
    view = LibraryView(st)
    view.mkdir(b"/lib", 0o755, 0, 0)
    fh = view.create(b"/lib/mod.py", S.S_IFREG | 0o644, os.O_WRONLY | os.O_CREAT, 0, 0)
    view.write(fh, b'def parse_config(path):\n    """Read the config."""\n', 0)
    view.release(fh)
    Indexer(src, store=st).run_once(full=True)
    assert S.DB_CATALOGUE in st.backend.tables()
    st.close()

    report = copy_library(src, str(tmp_path / "dst"))

    assert report.check_problems == [] and report.records["catalogue"] > 0
    a, b = Store(src, readonly=True), Store(str(tmp_path / "dst"), readonly=True)
    try:
        assert table_digests(a.backend) == table_digests(b.backend)
        assert "catalogue" in table_digests(b.backend)
    finally:
        a.close()
        b.close()
