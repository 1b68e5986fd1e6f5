"""In-process helpers over a :class:`~libraryfs.fs.view.LibraryView` (no mount): write, read, list."""

from __future__ import annotations

import os

from libraryfs.fs.view import LibraryView

UID, GID = os.getuid(), os.getgid()


def mkfile(v: LibraryView, path: bytes, data: bytes = b"", mode: int = 0o644) -> None:
    """Create ``path`` with ``data`` through the view (create, write, release)."""
    fh = v.create(path, mode, os.O_WRONLY | os.O_CREAT, UID, GID)
    if data:
        v.write(fh, data, 0)
    v.release(fh)


def cat(v: LibraryView, path: bytes) -> bytes:
    """The whole content of ``path`` (up to 16 MiB) through the view."""
    fh, _direct = v.open(path, os.O_RDONLY)
    try:
        return v.read(fh, 1 << 24, 0)
    finally:
        v.release(fh)


def names(v: LibraryView, path: bytes) -> list[bytes]:
    """Names listed by readdir of ``path`` (with ``.`` and ``..``)."""
    fh = v.opendir(path)
    try:
        return [n for n, _m, _i, _o in v.readdir(fh, 0)]
    finally:
        v.releasedir(fh)
