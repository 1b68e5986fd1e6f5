"""Backend selection for a library: which store a library directory names, and opening or creating it.

A library directory holds the embedded LMDB store (``<libdir>/store``, :mod:`libraryfs.fs.lmdb_backend`)
unless its ``config.toml`` names a ``[store] url`` (``etcd://host:port,…/PREFIX``,
:mod:`libraryfs.fs.etcd_backend`; written by ``libraryfs init --store``/``--join`` and ``libraryfs copy``).
:func:`open_backend` is the one place that chooses between them; :mod:`libraryfs.fs.store` builds the typed
store on what it returns. The etcd client is imported only for a library that names an etcd URL.
"""

from __future__ import annotations

import os
import stat

from libraryfs.errors import Exists, InvalidArgument, LibraryMissing
from libraryfs.fs import lmdb_backend
from libraryfs.fs import schema as S
from libraryfs.fs.backend import Backend

#: The ``config.toml`` table naming a library's store when it is not the LMDB store in ``<libdir>/store``.
STORE_TABLE = "store"
#: URL schemes of the store backends a ``[store] url`` may name (LMDB needs none: it is the default).
STORE_SCHEMES = ("etcd://",)


#: Environment variable over ``[store] timeout_s``: the etcd client's bound on one request, seconds.
STORE_TIMEOUT_ENV = "LIBRARYFS_STORE_TIMEOUT_S"


MAX_CONFIG_BYTES = 1 << 20  #: a larger ``config.toml`` is refused (a settings file is a few hundred bytes)


def read_config_text(path: str) -> str | None:
    """The text of the settings file ``path`` (``<libdir>/config.toml``), None when there is none — the one
    reader of that file (``[store]`` here, every other table in :mod:`libraryfs.settings`). Raises
    :class:`InvalidArgument`, one line naming the file, when it is not a regular file (a FIFO would block the
    reader forever, a device never ends), cannot be read (a directory, no permission), is over
    :data:`MAX_CONFIG_BYTES` or is not UTF-8 (TOML files are)."""
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
            raise InvalidArgument(f"{path}: not a regular file")
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise InvalidArgument(f"{path}: cannot be read: {e.strerror or e}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise InvalidArgument(f"{path}: over 1 MiB is too large for a settings file")
    try:
        return raw.decode()  # as tomllib.load does
    except UnicodeDecodeError as e:
        raise InvalidArgument(f"{path}: not UTF-8 text (byte {e.start}); TOML files are UTF-8") from None


def _store_table(libdir: str | os.PathLike[str]) -> tuple[str, dict | None]:
    """(path of ``<libdir>/config.toml``, its ``[store]`` table or None). Raises InvalidArgument."""
    from libraryfs.layout import config_path  # layout imports this module: a late import

    path = config_path(os.fspath(libdir))
    text = read_config_text(path)
    if text is None:  # most libraries: no TOML parser imported (every command opens the store)
        return path, None
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InvalidArgument(f"{path}: {e}") from None
    return path, data.get(STORE_TABLE)


def store_timeout_s(libdir: str | os.PathLike[str]) -> float | None:
    """The etcd client's bound on one request (failover and backoff included) for this library, seconds:
    ``LIBRARYFS_STORE_TIMEOUT_S``, else ``[store] timeout_s`` in ``config.toml``, else None (the client's
    default, ``etcd_gateway.TIMEOUT_S``, 10 s). Without quorum every request of a mount fails with EIO after
    this long (docs/scale-out.md "Faults"). Raises :class:`InvalidArgument` (one line) unless it is a
    number > 0."""
    raw = os.environ.get(STORE_TIMEOUT_ENV)
    where = f"env:{STORE_TIMEOUT_ENV}"
    if raw is None:
        path, table = _store_table(libdir)
        raw = table.get("timeout_s") if isinstance(table, dict) else None
        where = f"file:{path} [{STORE_TABLE}] timeout_s"
        if raw is None:
            return None
    try:
        if isinstance(raw, bool):
            raise ValueError(raw)
        value = float(raw)
    except (TypeError, ValueError):
        value = -1.0
    if not 0 < value < float("inf"):
        raise InvalidArgument(f"store timeout_s from {where}: want a number of seconds > 0, got {raw!r}")
    return value


def store_url(libdir: str | os.PathLike[str]) -> str | None:
    """The store URL of a library whose store lives elsewhere (``[store] url`` in ``<libdir>/config.toml``,
    written by ``libraryfs init --store``), or None: the embedded LMDB store in ``<libdir>/store``.

    Raises :class:`InvalidArgument` (one line) when config.toml cannot be parsed or the URL is not one a
    backend serves (see :data:`STORE_SCHEMES`)."""
    path, table = _store_table(libdir)
    if table is None:
        return None
    url = table.get("url") if isinstance(table, dict) else None
    if not isinstance(url, str) or not url.startswith(STORE_SCHEMES):
        raise InvalidArgument(
            f"{path}: [{STORE_TABLE}] url must be a string starting with {STORE_SCHEMES[0]}"
        )
    return url


def is_library(libdir: str | os.PathLike[str]) -> bool:
    """Whether ``libdir`` holds an initialised library: an LMDB store, or a ``[store] url`` in its config."""
    if lmdb_backend.exists(libdir):
        return True
    try:
        return store_url(libdir) is not None
    except InvalidArgument:
        return True  # a library whose config is broken: opening it says why


def open_backend(
    libdir: str | os.PathLike[str],
    *,
    readonly: bool = False,
    map_size: int | None = None,
    verify: bool | None = None,
) -> Backend:
    """The backend of the library in ``libdir``: the one place that chooses between LMDB and etcd.

    LMDB (``<libdir>/store``; ``map_size``, ``verify``: :class:`~libraryfs.fs.lmdb_backend.LmdbBackend`) unless
    ``config.toml`` names a ``[store] url`` (:func:`store_url`): then the etcd backend on that URL
    (:class:`~libraryfs.fs.etcd_backend.EtcdBackend`; ``readonly`` refuses writes; its bound on one request
    is :func:`store_timeout_s`). Raises
    :class:`LibraryMissing`, :class:`Damaged` (LMDB), :class:`~libraryfs.errors.Unavailable` (the cluster
    does not answer within its timeout: exit status 8), :class:`InvalidArgument` (a bad URL)."""
    url = store_url(libdir)
    if url is None:
        if not lmdb_backend.exists(libdir):
            raise LibraryMissing(
                f"{os.path.abspath(libdir)} is not a libraryfs library (run `libraryfs init` first)"
            )
        return lmdb_backend.LmdbBackend(libdir, readonly=readonly, map_size=map_size, verify=verify)
    from libraryfs.fs.etcd_backend import EtcdBackend  # only etcd libraries load the client

    timeout_s = store_timeout_s(libdir)
    return EtcdBackend.open(url, readonly=readonly, **({} if timeout_s is None else {"timeout_s": timeout_s}))


make_libdir = lmdb_backend.make_libdir  #: a library directory for a store kept elsewhere (etcd)


def require_new_libdir(libdir: str, hint: str = "") -> str:
    """``libdir`` (absolute) if a new library may be made there: it does not exist or is an empty
    directory. Raises :class:`~libraryfs.errors.Exists` (it holds a library, or other files: ``hint`` says
    what else the user can do) or :class:`~libraryfs.errors.InvalidArgument` (not a directory). The one
    check behind ``init``, ``demo`` and ``copy``: a library is never made over someone's folder unasked."""
    libdir = os.path.abspath(libdir)
    if is_library(libdir):
        raise Exists(f"{libdir} already holds a library (it is not empty): give a new or empty directory")
    if os.path.exists(libdir) and not os.path.isdir(libdir):
        raise InvalidArgument(f"{libdir} exists and is not a directory")
    if os.path.isdir(libdir) and os.listdir(libdir):
        raise Exists(f"{libdir} is not empty: give a new or empty directory{hint}")
    return libdir


def holds_library(backend: Backend) -> bool:
    """Whether a backend's store already holds a library (its schema version is set)."""
    with backend.read() as kv:
        return kv.get(S.DB_CONFIG, S.CFG_SCHEMA_VERSION) is not None


def create_remote(libdir: str | os.PathLike[str], url: str) -> Backend:
    """An empty, writable backend at ``url`` for :meth:`Store.create`, and the library directory for it."""
    if is_library(libdir):
        raise FileExistsError(f"{os.path.abspath(libdir)} already holds a library")
    from libraryfs.fs.etcd_backend import EtcdBackend

    backend = EtcdBackend.open(url)
    if holds_library(backend):
        backend.close()
        raise FileExistsError(f"{url} already holds a library (give another prefix, or --join it)")
    make_libdir(libdir)
    return backend


def join_library(libdir: str | os.PathLike[str], url: str) -> None:
    """Make ``libdir`` a library directory of the existing library at ``url`` (another host's; several
    library directories, one per host, share one store). Raises ``FileExistsError`` if ``libdir`` already
    holds a library, :class:`LibraryMissing` if ``url`` holds none, Unavailable, InvalidArgument."""
    if is_library(libdir):
        raise FileExistsError(f"{os.path.abspath(libdir)} already holds a library")
    from libraryfs.fs.etcd_backend import EtcdBackend

    backend = EtcdBackend.open(url, readonly=True)
    try:
        if not holds_library(backend):
            raise LibraryMissing(f"{url} holds no library (create one with `libraryfs init --store {url}`)")
    finally:
        backend.close()
    make_libdir(libdir)
    write_store_url(libdir, url)


def write_store_url(libdir: str | os.PathLike[str], url: str) -> None:
    """Record ``url`` as the library's store in ``<libdir>/config.toml`` (appended as a ``[store]`` table;
    the file is made mode 0600 if new). Raises :class:`InvalidArgument` if the file already names a store."""
    from libraryfs.layout import config_path

    if store_url(libdir) is not None:
        raise InvalidArgument(f"{config_path(os.fspath(libdir))} already names a store")
    path = config_path(os.fspath(libdir))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a") as f:
        if f.tell():
            f.write("\n")
        f.write(f'[{STORE_TABLE}]\nurl = "{url}"   # the library\'s store (libraryfs init --store)\n')
        f.flush()
        os.fsync(f.fileno())
