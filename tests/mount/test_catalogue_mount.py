"""The name catalogue through a real FUSE mount: ``/.catalogue/`` appears once names are defined, its pages
link the defining entries (the links open), its name is reserved, and a deleted entry's names leave it."""

from __future__ import annotations

import errno
import os
import posixpath

import pytest
from helpers.files import read_file

from libraryfs.index.toc import links


def _targets(mounted, page_rel: str) -> list[str]:
    """Absolute mount paths of the link targets of the page at ``page_rel``."""
    with open(mounted.p(page_rel), "rb") as f:
        page = f.read()
    base = posixpath.dirname(page_rel)
    return [mounted.p(posixpath.normpath(posixpath.join(base, os.fsdecode(lk)))) for lk in links(page)]


def test_catalogue_appears_links_open_and_follows_deletes(mounted):
    root_names = os.listdir(mounted.mnt)
    assert ".catalogue" not in root_names
    with pytest.raises(OSError) as e:  # reserved before it exists: the name is not the user's
        os.mkdir(mounted.p(".catalogue"))
    assert e.value.errno == errno.EACCES
    os.makedirs(mounted.p("docs"))
    with open(mounted.p("docs/shapes.rst"), "w") as f:
        f.write("Shapes\n======\n\n.. module:: shapes\n\n.. function:: area(shape)\n\n   The area.\n\n")
        f.write(".. class:: Polygon\n\n   .. method:: perimeter()\n\n      Its perimeter.\n")
    with open(mounted.p("docs/notes.md"), "w") as f:
        f.write("# Notes\n\nNothing is defined here.\n")
    mounted.wait_indexed()
    assert ".catalogue" not in os.listdir(mounted.mnt)  # generated names resolve, are never listed
    assert os.path.isdir(mounted.p(".catalogue"))
    with pytest.raises(OSError) as e:
        os.mkdir(mounted.p(".catalogue"))
    assert e.value.errno == errno.EEXIST
    master = read_file(mounted.p("INDEX.md"), "rb").decode()
    assert ".catalogue/" in master
    page = read_file(mounted.p(".catalogue/INDEX.md"), "rb").decode()
    for name in ("shapes.area", "shapes.Polygon", "shapes.Polygon.perimeter"):
        assert f"[{name}]" in page
    with pytest.raises(OSError) as e:  # its TOC belongs to no stored directory: not the user's to claim
        os.unlink(mounted.p(".catalogue/INDEX.md"))
    assert e.value.errno == errno.EACCES
    targets = _targets(mounted, ".catalogue/INDEX.md")
    assert targets and all(t == mounted.p("docs/shapes.rst") for t in targets)
    assert all(os.path.isfile(t) for t in targets)  # the links open through the mount
    os.unlink(mounted.p("docs/shapes.rst"))
    mounted.wait_indexed()
    page = read_file(mounted.p(".catalogue/INDEX.md"), "rb").decode()  # an empty catalogue keeps its page
    assert "shapes" not in page and "0 names" in page and _targets(mounted, ".catalogue/INDEX.md") == []
    assert ".catalogue/" not in read_file(mounted.p("INDEX.md"), "rb").decode()  # the master drops its line


def test_writing_generated_pages_is_eacces(mounted):
    """docs/posix.md: only a stored directory's ``INDEX.md`` may be opened for writing (it becomes the user's
    file); the catalogue's and the subject index's pages, control files and finder entries are EACCES for
    every writing open, even for root (mode 0444 is not checked by the kernel for root)."""
    os.makedirs(mounted.p("docs"))
    with open(mounted.p("docs/shapes.rst"), "w") as f:
        f.write(
            "Shapes\n======\n\n.. module:: shapes\n\n.. function:: area(shape)\n\n   The area of mulch.\n"
        )
    with open(mounted.p("docs/beds.md"), "w") as f:
        f.write("# Raised beds\n\nSpread a thick layer of mulch over the soil every spring.\n")
    mounted.wait_indexed()
    generated = [".catalogue/INDEX.md", ".subjects/INDEX.md", ".libraryfs/status.json"]
    before = {rel: read_file(mounted.p(rel), "rb") for rel in generated[:2]}
    writing = {
        "O_WRONLY": os.O_WRONLY,
        "O_RDWR": os.O_RDWR,
        "O_APPEND": os.O_WRONLY | os.O_APPEND,
        "O_CREAT": os.O_WRONLY | os.O_CREAT,
        "O_RDONLY|O_TRUNC": os.O_RDONLY | os.O_TRUNC,
    }
    for rel in generated:
        assert os.stat(mounted.p(rel)).st_mode & 0o777 == 0o444, rel
        for how, flags in writing.items():
            with pytest.raises(OSError) as e:
                os.close(os.open(mounted.p(rel), flags, 0o644))
            assert e.value.errno == errno.EACCES, (rel, how, e.value)
        with pytest.raises(OSError) as e:
            os.truncate(mounted.p(rel), 0)
        assert e.value.errno == errno.EACCES, (rel, "truncate", e.value)
    for rel, flags in (
        (".find/mulch/new.md", os.O_WRONLY | os.O_CREAT),
        (".libraryfs/new", os.O_WRONLY | os.O_CREAT),
    ):
        with pytest.raises(OSError) as e:  # nothing is created among generated names
            os.close(os.open(mounted.p(rel), flags, 0o644))
        assert e.value.errno == errno.EACCES, (rel, e.value)
    with pytest.raises(OSError) as e:  # a finder term is a directory
        os.close(os.open(mounted.p(".find/mulch"), os.O_WRONLY))
    assert e.value.errno == errno.EISDIR
    for rel, page in before.items():
        assert read_file(mounted.p(rel), "rb") == page, rel  # nothing written, the page still generated
    assert ".catalogue" not in os.listdir(mounted.mnt)
