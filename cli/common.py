"""Shared CLI plumbing: the library option, domain errors as one-line messages, output helpers."""

from __future__ import annotations

import functools
import json
import os

import click

from libraryfs.errors import LibraryError


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
        except OSError as e:
            where = f": {e.filename}" if getattr(e, "filename", None) else ""
            raise click.ClickException(f"{e.strerror or e}{where}") from None

    return wrapper


def echo_json(obj) -> None:
    """Print ``obj`` as indented JSON."""
    click.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))


def display_path(p: bytes) -> str:
    """A library path for a terminal (undecodable bytes as surrogate escapes shown with backslashes)."""
    return os.fsdecode(p).encode("utf-8", "backslashreplace").decode()
