"""Shared CLI plumbing: domain errors as one-line messages, output helpers (options: :mod:`.options`)."""

from __future__ import annotations

import functools
import json
import os
from typing import TYPE_CHECKING, Any

import click

from libraryfs.errors import EXIT_DAMAGED, LibraryError
from libraryfs.fs.store import StoreError

if TYPE_CHECKING:
    from libraryfs.fs.tree import Tree


#: Exit status of a feature command whose pip extra is not installed (docs/architecture.md).
EXIT_MISSING_EXTRA = 3


def needs_feature(name: str):
    """Decorator of a feature command: when the feature's extra is missing, say which one to install in one
    line on stderr and exit with :data:`EXIT_MISSING_EXTRA` before anything runs (:mod:`libraryfs.hooks`)."""

    def deco(f):
        """Wrap command function ``f`` in the missing-extra check."""

        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            """Exit with :data:`EXIT_MISSING_EXTRA` and a one-line message on stderr when the feature's extra
            is missing, else run ``f`` (``functools.wraps`` keeps ``f``'s docstring as the command's help)."""
            from libraryfs.hooks import missing_extra

            why = missing_extra(_builtin_feature(name) or name)
            if why:
                click.echo(f"libraryfs: {why}", err=True)
                raise SystemExit(EXIT_MISSING_EXTRA)
            return f(*args, **kwargs)

        return wrapper

    return deco


def _builtin_feature(name: str):
    """The :class:`~libraryfs.hooks.Feature` of this package's feature ``name`` from its registration module
    (``libraryfs.features.<name>.feature``, what its entry point names), or None. Reading every installed
    distribution's entry points costs ~50 ms of CPU per process (issue 18); for a feature this package ships
    the module is known."""
    import importlib

    from libraryfs.hooks import Feature

    try:
        f = getattr(importlib.import_module(f"libraryfs.features.{name}.feature"), "FEATURE", None)
    except ImportError:
        return None
    return f if isinstance(f, Feature) and f.name == name else None


def _exit_with(message: str, code: int) -> click.ClickException:
    """A ``ClickException`` (``Error: <message>`` on one line) that exits with status ``code``."""
    e = click.ClickException(message)
    e.exit_code = code
    return e


def error_line(e: LibraryError | StoreError) -> tuple[str, int]:
    """``(one-line message, exit status)`` of a domain error (its own ``exit_code``) or of a storage engine
    error while reading (the store is damaged: :data:`~libraryfs.errors.EXIT_DAMAGED`)."""
    if isinstance(e, LibraryError):
        return str(e), e.exit_code
    return f"the library's store is damaged: {e}; run `libraryfs check`", EXIT_DAMAGED


def handle_errors(f):
    """Turn domain errors and OS errors into ``click.ClickException``: one line, exit status 1, or the
    error's own ``exit_code`` (4 for a damaged store, :data:`~libraryfs.errors.EXIT_DAMAGED`). A command run
    with ``--json`` (parameter ``as_json``) also prints ``{"error", "exit_code"[, "library"]}`` on stdout, so
    a script reading stdout always gets one JSON object."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        """Run ``f``; a domain, store or OS error becomes a one-line ``ClickException``, a broken pipe exit
        status 0 (``functools.wraps`` keeps ``f``'s docstring as the command's help)."""
        try:
            return f(*args, **kwargs)
        except BrokenPipeError:  # `libraryfs status | head`: the reader left; not an error
            import sys

            sys.stderr.close()
            raise SystemExit(0) from None
        except (LibraryError, *StoreError) as e:
            message, code = error_line(e)
        except OSError as e:
            where = f": {e.filename}" if getattr(e, "filename", None) else ""
            message, code = f"{e.strerror or e}{where}", 1
        if kwargs.get("as_json"):
            report = {"error": message, "exit_code": code}
            if isinstance(kwargs.get("libdir"), str):
                report["library"] = _library_of(kwargs["libdir"])
            echo_json(report)
        raise _exit_with(message, code) from None

    return wrapper


def _library_of(arg: str) -> str:
    """The library a command's argument names (a mountpoint → its library; never touches the mount), else
    the argument as an absolute path."""
    try:
        return resolve_libdir(arg)
    except (LibraryError, OSError):
        return os.path.abspath(arg)


def echo_json(obj) -> None:
    """Print ``obj`` as indented JSON."""
    click.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))


def display_path(p: bytes) -> str:
    """A path for a terminal: undecodable bytes as ``\\xNN``, control and invisible characters (newline, C1,
    zero-width, bidi controls such as U+202E) escaped (``\\x0a``, ``\\x202e``): as the TOCs and the MCP tools
    show names (:func:`libraryfs.shown.show_name`)."""
    from libraryfs.shown import show_name

    return show_name(p)


def resolve_libdir(arg: str) -> str:
    """A library directory from what a user typed: the mountpoint it is mounted at, or the library itself
    (in that order: through a mount, a file the library holds at ``store/data.mdb`` looks like a library).

    Raises :class:`~libraryfs.errors.LibraryMissing` (one line) otherwise.
    """
    from libraryfs.errors import LibraryMissing
    from libraryfs.fs.backends import is_library
    from libraryfs.layout import libdir_of_mount

    path = os.path.abspath(arg)
    lib = libdir_of_mount(path)  # first: a library's own content may hold a store/data.mdb file
    if lib:
        return lib
    if is_library(path):
        return path
    raise LibraryMissing(f"{path} is neither a libraryfs library nor the mountpoint of one")


def open_tree(
    library_dir: str | None, tree_dir: str | None, required: bool = True, what: str = "library"
) -> Tree | None:
    """The tree a feature command writes into: ``--tree`` as a plain directory, else the library's tree
    (:func:`libraryfs.fs.tree.open_tree`); None when neither is given and not ``required``. Raises
    ``click.ClickException`` (``no <what>: give --library …``) when neither is usable."""
    from libraryfs.fs.tree import DirTree
    from libraryfs.fs.tree import open_tree as open_library_tree

    if tree_dir:
        os.makedirs(tree_dir, exist_ok=True)
        return DirTree(tree_dir)
    if library_dir:
        try:
            return open_library_tree(library_dir)
        except (OSError, ValueError, LibraryError) as e:
            raise click.ClickException(f"cannot open library {library_dir}: {e}") from None
    if required:
        raise click.ClickException(f"no {what}: give --library DIR (or LIBRARYFS_LIBRARY) or --tree DIR")
    return None


def close_tree(tree: Tree | None) -> None:
    """Close a store-backed tree (``StoreTree.close``); a DirTree needs nothing."""
    close = getattr(tree, "close", None)
    if close is not None:
        close()


def write_json(path: str | None, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` (parents created) and say so; nothing when ``path`` is None."""
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2)
        click.echo(f"wrote {path}")


def verify_pages(libdir: str) -> None:
    """Check the library's LMDB store with plain reads before the caller opens it
    (:func:`libraryfs.fs.lmdb_pages.verify_since`): the meta pages always; nothing more while the data file
    is unchanged since the last clean walk; after a change, only the pages that changed since (its
    ledger), every page when there is no ledger or that walk finds anything. The commands that read the
    store read-only (``status``, ``find``, ``recall``, ``answer``) call it in their forked reader. Raises
    :class:`~libraryfs.errors.Damaged` for a damaged store (what it does not see: docs/reliability.md). A
    missing or empty data file, or an etcd store, is left to :class:`Store` (it says what is wrong)."""
    from libraryfs.fs.backends import is_library
    from libraryfs.fs.lmdb_backend import store_path
    from libraryfs.fs.lmdb_pages import verify_since
    from libraryfs.layout import VERIFIED_FILE, state_dir

    data = os.path.join(store_path(libdir), "data.mdb")
    if is_library(libdir) and os.path.exists(data) and os.path.getsize(data):
        verify_since(store_path(libdir), os.path.join(state_dir(libdir), VERIFIED_FILE))
