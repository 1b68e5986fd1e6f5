"""Shared CLI plumbing: the library option, domain errors as one-line messages, output helpers."""

from __future__ import annotations

import functools
import json
import os

import click

from libraryfs.errors import LibraryError
from libraryfs.fs.store import StoreError


def library_argument(f):
    """``LIBDIR`` argument (defaults to ``$LIBRARYFS_LIBRARY``)."""
    return click.argument("libdir", type=click.Path(file_okay=False), envvar="LIBRARYFS_LIBRARY")(f)


def handle_errors(f):
    """Turn domain errors and OS errors into ``click.ClickException`` (one line, exit status 1)."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except BrokenPipeError:  # `libraryfs status | head`: the reader left; not an error
            import sys

            sys.stderr.close()
            raise SystemExit(0) from None
        except LibraryError as e:
            raise click.ClickException(str(e)) from None
        except StoreError as e:
            raise click.ClickException(f"the library's store is corrupt or unreadable: {e}") from None
        except OSError as e:
            where = f": {e.filename}" if getattr(e, "filename", None) else ""
            raise click.ClickException(f"{e.strerror or e}{where}") from None

    return wrapper


def echo_json(obj) -> None:
    """Print ``obj`` as indented JSON."""
    click.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))


def display_path(p: bytes) -> str:
    """A path for a terminal: undecodable bytes as ``\\xNN``, control characters (newline…) escaped."""
    s = p.decode("utf-8", "backslashreplace")
    return "".join(f"\\x{ord(c):02x}" if ord(c) < 32 or ord(c) == 127 else c for c in s)


def resolve_libdir(arg: str) -> str:
    """A library directory from what a user typed: the library itself, or the mountpoint it is mounted at.

    Raises :class:`~libraryfs.errors.LibraryMissing` (one line) otherwise.
    """
    from libraryfs.daemon.launcher import _libdir_of_mount
    from libraryfs.errors import LibraryMissing
    from libraryfs.fs.store import is_library

    path = os.path.abspath(arg)
    if is_library(path):
        return path
    lib = _libdir_of_mount(path)
    if lib:
        return lib
    raise LibraryMissing(f"{path} is neither a libraryfs library nor the mountpoint of one")
