"""A first end-to-end check: mount, write through the shell, see it in the TOCs."""

import os
import subprocess

from helpers.files import read_file

from libraryfs.index.toc import links


def test_write_appears_in_toc_and_links_open(mounted):
    os.makedirs(mounted.p("notes"))
    with open(mounted.p("notes/first.md"), "w") as f:
        f.write("# Groceries\n\nBuy milk and eggs.\n")
    mounted.wait_indexed()
    root = read_file(mounted.p("INDEX.md"), "rb")
    assert b"[notes/](notes/INDEX.md)" in root
    sect = read_file(mounted.p("notes/INDEX.md"), "rb")
    assert b"Groceries" in sect and b"first.md" in sect
    for target in links(sect):
        assert os.path.exists(os.path.join(mounted.p("notes"), os.fsdecode(target)))
    out = subprocess.run(["cat", mounted.p("notes/first.md")], capture_output=True, text=True).stdout
    assert "Buy milk" in out
