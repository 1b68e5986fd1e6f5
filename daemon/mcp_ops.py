"""The file operations the MCP tools need, over the same :class:`~libraryfs.fs.view.LibraryView` the mount
serves: same names, errors (:mod:`libraryfs.errors`, so the same errno), permissions, journal and read
accounting. No FUSE: this module runs where ``/dev/fuse`` does not exist.

Paths arrive as agent-supplied strings and are confined to the library (:func:`clean_path`): relative or
``/``-rooted inside the library, or under the live mountpoint (stripped); ``..``, NUL bytes and paths longer
than PATH_MAX are refused before anything is resolved. Symbolic links are followed only inside the library
(:meth:`LibraryOps.follow`): a link whose target leaves it is an error, never a read of the host.

Writes replace a file atomically (a hidden temporary file in the same directory, then ``rename``): a
failure leaves the old content, never part of the new one. Concurrency: the view is used by one thread at a
time (:attr:`LibraryOps.lock`); other processes (a mount, the indexer, other MCP servers) write the same
LMDB environment, whose write transactions LMDB serialises across processes (one writer at a time).
"""

from __future__ import annotations

import itertools
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Container

from libraryfs.errors import (
    AccessDenied,
    Exists,
    FileTooBig,
    InvalidArgument,
    IsADir,
    LibraryError,
    NameTooLong,
    NotFound,
    TooManyLinks,
)
from libraryfs.fs import schema as S
from libraryfs.fs.generated import (
    INDEX_NAME,
    PAGES_DIR,
    RESERVED_NAMES,
    RESERVED_ROOT,
    index_alias_path,
    is_reserved,
)
from libraryfs.fs.meta import EntryMeta, SectionMeta
from libraryfs.fs.nameops import RENAME_NOREPLACE, add_child, check_new_name
from libraryfs.fs.nodes import Resolved
from libraryfs.fs.resolve import require_writable
from libraryfs.fs.store import Txn
from libraryfs.fs.view import LibraryView
from libraryfs.shown import is_escaped_control, show_name

PATH_MAX = 4096  #: bytes, with the terminating NUL (Linux ``PATH_MAX``): a path has at most 4,095
NAME_MAX = 255  #: bytes per component
SYMLOOP_MAX = 8  #: links followed while resolving one path (ELOOP past it)
READ_CHUNK_BYTES = 1 << 20
MOUNT_PROBE_S = 1.0  #: how long a probe of the mount state is reused (seconds)


class Loop(TooManyLinks):
    """Too many symbolic links while resolving a path (ELOOP; a domain error of :mod:`libraryfs.errors`, so
    the tools' error line says ELOOP, not EIO)."""


def _at(e: LibraryError, path: bytes) -> LibraryError:
    """``e`` naming the library path it concerns (``.path``, as :func:`mcp_registry.at_path` sets it)."""
    e.path = show(path)  # type: ignore[attr-defined]
    return e


class _Relinked(Exception):
    """Inside :meth:`LibraryOps.replace`'s transaction: the followed path is now a symbolic link (another
    process replaced the file by one since): follow again."""


class OutsideLibrary(InvalidArgument):
    """A path or a symbolic link's target leaves the library (EXDEV: it is on another filesystem)."""

    errno = 18  # EXDEV


def clean_path(path: str, mountpoint: str | None = None) -> bytes:
    """Absolute library path (bytes, ``b"/"`` for the root) of an agent-supplied path.

    Accepts ``notes/a.md``, ``/notes/a.md``, ``library://notes/a.md`` and, when ``mountpoint`` is given,
    ``<mountpoint>/notes/a.md``. ``.`` and empty components are dropped. Raises InvalidArgument (EINVAL) for
    a NUL byte, :class:`OutsideLibrary` (EXDEV) for a ``..`` component, NameTooLong (ENAMETOOLONG) for a path
    of PATH_MAX bytes or more or a component over NAME_MAX bytes.
    """
    if not isinstance(path, str):
        raise InvalidArgument("path must be a string")
    if "\x00" in path:
        raise InvalidArgument("path contains a NUL byte")
    raw = os.fsencode(path)
    if len(raw) >= PATH_MAX:
        raise NameTooLong(f"path is {len(raw)} bytes (PATH_MAX is {PATH_MAX})")
    if path.startswith("library://"):
        path = path[len("library://") :]
    elif mountpoint and (path == mountpoint or path.startswith(mountpoint.rstrip("/") + "/")):
        path = path[len(mountpoint.rstrip("/")) :]
    parts = [p for p in os.fsencode(path).split(b"/") if p not in (b"", b".")]
    if b".." in parts:
        raise InvalidArgument(f"'..' in {path!r}: paths stay inside the library")
    for p in parts:
        if len(p) > NAME_MAX:
            raise NameTooLong(f"a name of {len(p)} bytes (NAME_MAX is {NAME_MAX})")
    return b"/" + b"/".join(parts)


_ESCAPE = re.compile(rb"\\x([0-9a-fA-F]{2})([0-9a-fA-F]{2})?")


def unescape_shown(path: bytes, c1_chars: bool = False) -> bytes:
    """The bytes :func:`show` escaped, back: ``\\xHHHH`` (four hex digits) of a character
    :func:`~libraryfs.shown.escape_controls` escapes (zero-width, line/paragraph separators, bidi
    controls: ``zero\\x200bwidth.md``) becomes that character in UTF-8; ``\\xNN`` with NN ≥ 80 (a byte that
    is not UTF-8) or an ASCII control (NN < 20, 7f) becomes byte NN — ``caf\\xe9.txt`` → ``caf\xe9.txt``,
    ``new\\x0aline.md`` → ``new\nline.md``; ``\\x00`` stays as typed (no name holds a NUL byte).
    ``show`` writes a C1 control character (U+0080–U+009F) as ``\\x80``–``\\x9f`` too, like the lone byte:
    with ``c1_chars`` those become the characters (UTF-8 ``c2 NN``) instead of the bytes. Other text is kept as it is (``\\x20`` is never an escape: ``show``
    leaves a space alone, so ``\\x200b`` is unambiguous)."""

    def one(m: re.Match) -> bytes:
        """One ``\\xNN`` or ``\\xHHHH`` match, decoded."""
        hi, lo = m.group(1), m.group(2)
        if lo is not None:
            c = chr(int(hi + lo, 16))
            if ord(c) >= 0x100 and is_escaped_control(c):
                return c.encode()
        n = int(hi, 16)
        if n == 0 or not (n >= 0x80 or n < 0x20 or n == 0x7F):  # no name holds a NUL: show never writes \x00
            return m.group(0)
        first = chr(n).encode() if c1_chars and 0x80 <= n <= 0x9F else bytes([n])
        return first + (lo or b"")

    return _ESCAPE.sub(one, path)


def show(path: bytes) -> str:
    """A library path (or name) as text for messages and results: ``/notes/a.md``; bytes that are not UTF-8
    escaped as ``\\xNN``, as the TOC pages and ``libraryfs find`` show them. Never ``os.fsdecode``: its lone
    surrogates cannot be encoded as JSON, and the SDK's stdio writer then ends the whole server. Control
    characters are escaped as the TOCs escape them (:func:`~libraryfs.shown.show_name`,
    ``new\\x0aline.md``): a listing shows one name per line."""
    return show_name(path)


def is_dir(st: dict) -> bool:
    """Whether a ``stat`` dict is a directory's."""
    return st["st_mode"] & S.S_IFMT == S.S_IFDIR


def is_link(st: dict) -> bool:
    """Whether a ``stat`` dict is a symbolic link's."""
    return st["st_mode"] & S.S_IFMT == S.S_IFLNK


class LibraryOps:
    """Whole-file operations on library paths (bytes, from :func:`clean_path`) over one view.

    Every method takes :attr:`lock` (the view's handle table and LMDB read transactions are per thread);
    errors are :class:`~libraryfs.errors.LibraryError` subclasses, as the mount would answer with errno.
    ``uid``/``gid`` own what is created (the server's). ``mount_probe() -> str | None`` says where the
    library is mounted now, if it is (paths and symbolic links may name the mountpoint); it is asked at
    most once per :data:`MOUNT_PROBE_S`.
    """

    def __init__(self, view: LibraryView, *, mount_probe: Callable[[], str | None] | None = None) -> None:
        self.view = view
        self._probe = mount_probe
        self._mount: tuple[float, str | None] = (-MOUNT_PROBE_S, None)
        self.lock = threading.RLock()
        self.uid, self.gid = os.getuid(), os.getgid()
        self.groups = {self.gid, *os.getgroups()}
        self.pid = os.getpid()
        self._tmp = itertools.count()

    @property
    def mountpoint(self) -> str | None:
        """Where the library is mounted (a live mount), or None."""
        if self._probe is None:
            return None
        at, mp = self._mount
        if time.monotonic() - at >= MOUNT_PROBE_S:
            mp = self._probe()
            self._mount = (time.monotonic(), mp)
        return mp

    @property
    def read_only(self) -> bool:
        """Whether every change is refused (EROFS)."""
        return self.view.read_only

    # -- resolution --------------------------------------------------------------------------------------
    def stat(self, path: bytes) -> dict:
        """``stat`` of ``path`` without following a final symlink. Raises NotFound, NotADir."""
        with self.lock:
            return self.view.getattr(path)

    def follow(self, path: bytes) -> bytes:
        """``path`` with every symbolic link resolved, confined to the library.

        Raises :class:`OutsideLibrary` (EXDEV) for a link that leaves the library, :class:`Loop` (ELOOP)
        after :data:`SYMLOOP_MAX` links, NotFound/NotADir for missing components.
        """
        with self.lock:
            hops = 0
            done: list[bytes] = []
            todo = [p for p in path.split(b"/") if p]
            while todo:
                comp = todo.pop(0)
                cur = b"/" + b"/".join([*done, comp])
                st = self.view.getattr(cur)
                if not is_link(st):
                    done.append(comp)
                    continue
                hops += 1
                if hops > SYMLOOP_MAX:
                    raise Loop(f"too many symbolic links at {show(cur)}")
                target = self.view.readlink(cur)
                todo = self._link_parts(target, done, cur) + todo
                done = []
            return b"/" + b"/".join(done)

    def _link_parts(self, target: bytes, base: list[bytes], where: bytes) -> list[bytes]:
        """Components (from the root) of a link's target; ``..`` applied; never above the root."""
        if target.startswith(b"/"):
            mp = os.fsencode(self.mountpoint.rstrip("/")) if self.mountpoint else None
            if not mp or not (target == mp or target.startswith(mp + b"/")):
                raise OutsideLibrary(f"symbolic link {show(where)} points outside the library")
            target, base = target[len(mp) :], []
        out = list(base)
        for p in target.split(b"/"):
            if p in (b"", b"."):
                continue
            if p == b"..":
                if not out:
                    raise OutsideLibrary(f"symbolic link {show(where)} points outside the library")
                out.pop()
            else:
                out.append(p)
        return out

    def access(self, path: bytes, want: int) -> None:
        """Raise AccessDenied (EACCES) unless this process may ``want`` (``os.R_OK | os.W_OK | os.X_OK``) the
        object at ``path`` by its mode bits, owner and group — the check the kernel makes on the mount
        (``default_permissions``, access(2)); root passes, as with CAP_DAC_OVERRIDE."""
        if self.uid == 0:
            return
        st = self.view.getattr(path)
        mode = st["st_mode"]
        if st["st_uid"] == self.uid:
            bits = (mode >> 6) & 7
        elif st["st_gid"] in self.groups:
            bits = (mode >> 3) & 7
        else:
            bits = mode & 7
        if want & ~bits:
            raise AccessDenied(f"{show(path)}: permission denied")

    def _may_change(self, parent: bytes) -> None:
        """Creating or removing a name in ``parent`` needs write and search permission on it."""
        self.access(parent or b"/", os.W_OK | os.X_OK)

    # -- reading -----------------------------------------------------------------------------------------
    def read(self, path: bytes, offset: int = 0, size: int | None = None) -> bytes:
        """Bytes of the file at ``path`` (links followed) from ``offset``, up to ``size`` (all if None), as
        :meth:`read_range` reads them (one snapshot).

        Counted in the view's read accounting under this process. Raises IsADir, NotFound, QuotaExceeded.
        """
        return self.read_range(path, offset, size)[0]

    def read_range(
        self, path: bytes, offset: int = 0, size: int | None = None, *, from_end: bool = False
    ) -> tuple[bytes, int, int]:
        """``(data, start, file size)``: up to ``size`` bytes (all when None) of the file at ``path`` (links
        followed) from byte ``offset`` — or, with ``from_end``, its last ``size`` bytes (``start`` says where
        they begin) — with the file's size, all read in ONE read transaction: a consistent snapshot of the
        file as it was when the read began, whatever other processes (another MCP server, the mount) write
        meanwhile. Before, the range was read through a file handle in 1 MiB chunks, each chunk its own
        transaction: another process replacing the file between two of them freed its inode, and the next
        chunk failed with EBADF (``file vanished``); a write in place could tear the answer. A generated file
        (a TOC page, ``.libraryfs/*``) is read from its handle's snapshot, which is taken once at open.

        The caller bounds ``size`` (the tools: what one answer can hold); the read holds one LMDB read
        transaction and the bytes in memory. Counted in the view's read accounting under this process (one
        read of the entry). Raises IsADir, NotFound, AccessDenied (mode bits), QuotaExceeded (EDQUOT)."""
        with self.lock:
            real = self.follow(path)
            if is_dir(self.view.getattr(real)):
                raise IsADir(f"{show(path)} is a directory")
            self.access(real, os.R_OK)
            with self.view.store.read() as t:
                r = self.view.resolve(t, real)
                node = r.node if r.is_real else None
                if node is not None:
                    if not node.is_reg:  # replaced by a directory or a link since the checks above
                        raise IsADir(f"{show(path)} is not a regular file")
                    start = max(0, node.size - size) if from_end and size is not None else offset
                    want = node.size - start if size is None else size
                    data = t.read_data(node.ino, start, want, node.size)
                    if data:
                        self.view.accounting.charge_entry(t, node.ino, node.size, len(data), self.pid, True)
                    return data, start, node.size
            fh, _direct = self.view.open(real, os.O_RDONLY)  # generated: a snapshot taken at open
            try:
                whole = bytearray()
                while chunk := self.view.read(fh, READ_CHUNK_BYTES, len(whole), self.pid):
                    whole += chunk
            finally:
                self.view.release(fh)
            start = max(0, len(whole) - size) if from_end and size is not None else offset
            end = len(whole) if size is None else start + size
            return bytes(whole[start:end]), start, len(whole)

    def listdir(self, path: bytes, stat: bool = True) -> list[tuple[bytes, dict]]:
        """``(name, stat)`` of every entry of the directory at ``path`` (links followed), ``.``/``..`` not;
        sorted by name. Unlike ``readdir`` on the mount, the generated names that resolve there now
        (:meth:`generated_here`) are included: an agent listing a directory over MCP learns where its TOC is.

        ``stat=False``: only ``{"st_mode": file type bits}`` from the listing itself (no lookup per entry:
        what a walk or one page of a large directory needs)."""
        with self.lock:
            real = self.follow(path)
            self.access(real, os.R_OK)
            fh = self.view.opendir(real)
            try:
                names = {n: m for n, m, _i, _o in self.view.readdir(fh, 0) if n not in (b".", b"..")}
            finally:
                self.view.releasedir(fh)
            base = real.rstrip(b"/")
            names.update(self.generated_here(base, names))
            listed = sorted(names.items())
            if not stat:
                return [(n, {"st_mode": m}) for n, m in listed]
            out = []
            for n, _m in listed:
                try:
                    out.append((n, self.view.getattr(base + b"/" + n)))
                except NotFound:  # removed by another process since the listing
                    continue
            return out

    def generated_here(self, base: bytes, listed: Container[bytes]) -> dict[bytes, int]:
        """Generated names of the real directory at ``base`` (no trailing ``/``; ``b""`` for the root) that
        resolve now but are not in ``listed``, as ``{name: file type bits}``: ``INDEX.md`` (once the
        directory has settled, and not where it is the user's), ``.index`` (paged TOC, or page 0 moved
        there), and at the root ``.libraryfs``, ``.find``, ``.catalogue``, ``.subjects`` (docs/posix.md "Generated files and
        tools"). Nothing in a dot-directory or an ignored path, nor inside a generated directory."""
        out: dict[bytes, int] = {}
        with self.view.store.read() as t:
            for name in sorted(RESERVED_NAMES | (RESERVED_ROOT if not base else frozenset())):
                if name in listed:
                    continue
                try:
                    r = self.view.resolve(t, base + b"/" + name)
                except LibraryError:
                    continue
                if not r.is_real:
                    out[name] = S.S_IFREG if r.kind.is_toc_page else S.S_IFDIR
        return out

    def page0_path(self, dir_path: bytes) -> bytes:
        """Where page 0 of the TOC of the directory at ``dir_path`` is served: ``<dir>/INDEX.md``, or
        ``<dir>/.index/INDEX.md`` where ``INDEX.md`` is the user's (stored or claimed, or in a git work tree;
        :func:`libraryfs.fs.generated.index_alias_path`). Links followed; a missing directory gives the
        ``INDEX.md`` path (reading it then says what is wrong)."""
        try:
            base = self.follow(dir_path).rstrip(b"/")
        except LibraryError:
            return dir_path.rstrip(b"/") + b"/" + INDEX_NAME
        alias = index_alias_path(base)
        with self.view.store.read() as t:
            try:
                if not self.view.resolve(t, alias).is_real:
                    return alias
            except LibraryError:
                pass
        return base + b"/" + INDEX_NAME

    def generated(self, name: bytes, parent: bytes) -> bool:
        """Whether ``name`` in the directory at ``parent`` is generated by libraryfs (a user's own stored
        ``INDEX.md`` is not)."""
        if not is_reserved(name, S.ROOT_INO if parent.rstrip(b"/") == b"" else 0):
            return False
        try:
            path = self.follow(parent).rstrip(b"/") + b"/" + name
            with self.view.store.read() as t:
                return not self.view.resolve(t, path).is_real
        except LibraryError:  # gone since the listing: what its name says
            return True

    # -- writing -----------------------------------------------------------------------------------------
    def write(self, path: bytes, data: bytes) -> bool:
        """Create or replace the file at ``path`` with ``data``, atomically; True if it was created.

        The parent must exist. An existing file keeps its permission bits; it must be a regular file
        (IsADir otherwise). Raises AccessDenied (a generated name), EROFS (read-only), NotFound, NoSpace.
        """
        created, _old = self.replace(path, lambda _old: data, read_old=False)
        return created

    def replace(
        self, path: bytes, make: Callable[[bytes | None], bytes], *, read_old: bool = True
    ) -> tuple[bool, bytes | None]:
        """Replace the file at ``path`` (links followed, confined) with ``make(old bytes)`` — ``None`` for
        a new name, or when ``read_old`` is False — in ONE write transaction: the read, ``make`` and the
        write (a hidden temporary file renamed over the target, journalled as such) commit together, so no
        write of another process (a mount, another MCP server) lands between them and is lost. LMDB runs
        one write transaction at a time across processes. ``make`` may run more than once (the store
        retries a transaction after growing its map) and must have no side effects; an exception from it
        aborts the transaction: nothing is written. Returns ``(created, old bytes)``.

        With ``read_old``, the file must exist (NotFound) and be readable (EACCES). Raises AccessDenied (a
        generated name, mode bits), IsADir, EROFS (read-only), NotFound/NotADir (parent), NoSpace.
        """
        with self.lock:
            require_writable(self.view.read_only)
            for _hop in range(SYMLOOP_MAX + 1):
                try:
                    real = self.follow(path)  # like open(2) for writing: through symbolic links (confined)
                except NotFound:
                    if read_old:
                        raise
                    real = path  # a new name (or a dangling link, which is replaced)
                parent, name = real.rsplit(b"/", 1)
                tmp = self._temp_name(parent or b"/", name)
                try:
                    out = self.view.store.run_write(
                        lambda t, real=real, tmp=tmp: self._replace_in(t, real, tmp, make, read_old)
                    )
                except _Relinked:
                    continue  # a symbolic link replaced the file since it was followed: follow again
                self.view.handles.links.rename(tmp, real)
                self.view.settle_orphans()
                if out[1] is not None:
                    self.view.accounting.count_bytes(self.pid, len(out[1]))
                return out
            raise Loop(f"too many symbolic links at {show(path)}")

    def _replace_in(
        self, t: Txn, real: bytes, tmp: bytes, make: Callable[[bytes | None], bytes], read_old: bool
    ) -> tuple[bool, bytes | None]:
        """The write transaction of :meth:`replace` on ``real`` (links already followed) through ``tmp``."""
        self.refuse_generated(t, real, "generated by libraryfs (read-only)")
        try:
            r: Resolved | None = self.view.resolve(t, real)
        except NotFound:
            if read_old:
                raise
            r = None
        old = None
        if r is None:
            mode, created = 0o644, True
        elif not r.is_real or r.node is None:
            raise AccessDenied(f"{show(real.rsplit(b'/', 1)[1])} is generated by libraryfs (read-only)")
        elif r.node.is_dir:
            raise IsADir(f"{show(real)} is a directory")
        elif read_old and r.node.is_lnk:
            raise _Relinked()
        else:
            node = r.node
            mode, created = node.mode & 0o7777, False
            self._check_node(node, (os.R_OK | os.W_OK) if read_old else os.W_OK, real)
            if read_old:
                old = t.read_data(node.ino, 0, node.size, node.size)
        new = make(old)
        if len(new) > S.MAX_FILE_SIZE:
            raise FileTooBig("file too large")
        pino, pnode, tname = self.view.resolver.parent_and_name(t, tmp)
        self._check_node(pnode, os.W_OK | os.X_OK, tmp.rsplit(b"/", 1)[0] or b"/")
        check_new_name(t, tname, pino, self.view.virtual)
        ino = add_child(t, pino, pnode, tname, S.S_IFREG | mode, self.uid, self.gid)
        if new:
            node = t.inode(ino)
            assert node is not None
            node.blocks += t.write_data(ino, 0, new, 0)  # a new file: no chunk to read
            node.size = len(new)
            node.generation += 1
            node.mode &= ~(stat.S_ISUID | stat.S_ISGID)  # as FileData.write: writing clears set-id bits
            t.put_inode(node)
        self.view.names.rename_in(t, tmp, real, 0)
        return created, old

    def generated_target(self, t: Txn, path: bytes) -> bool:
        """Whether writing ``path`` (no link followed) would take a name libraryfs generates, in transaction
        ``t``: a component with no stored dirent that is generated in its directory — ``INDEX.md`` (also
        before the directory's first TOC is built) unless the name is the user's (stored, claimed, a git
        work tree: page 0 is then ``.index/INDEX.md``), ``.index`` in a directory with TOCs, or
        ``.libraryfs``, ``.find``, ``.catalogue``, ``.subjects`` at the root. Over MCP such a write is
        refused (EACCES) rather than creating a user's file that shadows the TOC, or an ENOENT."""
        ino = S.ROOT_INO
        for name in (p for p in path.split(b"/") if p):
            child = t.lookup(ino, name)
            if child is None:
                if ino == S.ROOT_INO and name in RESERVED_ROOT:
                    return True
                virtual = self.view.virtual
                if name == PAGES_DIR:
                    return virtual.tocs_here(t, ino)
                if name == INDEX_NAME:
                    return virtual.tocs_here(t, ino) and not virtual.page0_moved(t, ino)
                return False
            node = t.inode(child)
            if node is None or not node.is_dir:
                return False
            ino = child
        return False

    def refuse_generated(self, t: Txn, path: bytes, why: str) -> None:
        """The one check every MCP tool that creates a name makes (``write_file``, ``edit_file``,
        ``create_directory``, ``move_file``'s destination), in its write transaction ``t``: raise
        AccessDenied (EACCES, ``why``, carrying ``.path``) when creating ``path`` would take, or go
        through, a name libraryfs generates (:meth:`generated_target`). On the mount the kernel already
        sees the generated ``INDEX.md`` (``mkdir`` gives EEXIST, ``mkdir -p INDEX.md/x`` ENOTDIR); over
        MCP, where nothing looks the name up first, a stored file or directory would shadow the TOC."""
        if self.generated_target(t, path):
            raise _at(AccessDenied(why), path)

    def _check_node(self, node: S.Inode, want: int, path: bytes) -> None:
        """:meth:`access` on an inode record already read (in the caller's transaction)."""
        if self.uid == 0:
            return
        if node.uid == self.uid:
            bits = (node.mode >> 6) & 7
        elif node.gid in self.groups:
            bits = (node.mode >> 3) & 7
        else:
            bits = node.mode & 7
        if want & ~bits:
            raise AccessDenied(f"{show(path)}: permission denied")

    def _temp_name(self, parent: bytes, name: bytes) -> bytes:
        stem = name[: NAME_MAX - 40]
        tmp = b".%s.mcp-%d-%d.tmp" % (stem, self.pid, next(self._tmp))
        return parent.rstrip(b"/") + b"/" + tmp

    def makedirs(self, path: bytes) -> list[bytes]:
        """Create the directory at ``path`` and its missing parents (``mkdir -p``); returns the created
        paths. An existing directory is fine; an existing non-directory raises Exists (EEXIST); a generated
        name on the way (``INDEX.md``, ``.index``…, :meth:`refuse_generated`) raises AccessDenied (EACCES),
        as writing one does. Each directory is made in one write transaction with its checks."""
        require_writable(self.view.read_only)
        created = []
        with self.lock:
            cur = b""
            for comp in [p for p in path.split(b"/") if p]:
                cur = cur + b"/" + comp
                try:
                    made = self.view.store.run_write(lambda t, cur=cur: self._mkdir_in(t, cur))
                except Exists:
                    made = False
                if made:
                    created.append(cur)
                elif not is_dir(self.view.getattr(self.follow(cur))):
                    raise _at(Exists(f"{show(cur)} exists and is not a directory"), cur)
        return created

    def _mkdir_in(self, t: Txn, path: bytes) -> bool:
        """The write transaction of one directory of :meth:`makedirs`: False if ``path`` has a stored
        dirent (the caller checks it is a directory), else make it (mode 0o755, journalled as OP_MKDIR, as
        :meth:`NameOps.mkdir`) and return True. Raises AccessDenied (generated name, parent's mode bits),
        Exists (a generated object there), NotFound/NotADir (parent), NameTooLong."""
        self.refuse_generated(t, path, "generated by libraryfs (read-only): no directory can take its name")
        pino, pnode, name = self.view.resolver.parent_and_name(t, path)
        if t.lookup(pino, name) is not None:
            return False
        check_new_name(t, name, pino, self.view.virtual)
        self._check_node(pnode, os.W_OK | os.X_OK, path.rsplit(b"/", 1)[0] or b"/")
        add_child(t, pino, pnode, name, S.S_IFDIR | 0o755, self.uid, self.gid, op=S.OP_MKDIR)
        return True

    def move(self, src: bytes, dst: bytes) -> None:
        """Rename ``src`` to ``dst`` in one write transaction; fails with Exists (EEXIST) when ``dst`` exists
        (RENAME_NOREPLACE), as the reference filesystem server's ``move_file`` does, and with AccessDenied
        (EACCES) when either is a generated name (``INDEX.md``, ``.index/``…: over MCP a move never shadows
        a TOC, as ``write_file`` never does). Every error carries (``.path``) the path it concerns: the
        source, or the destination (its parent missing, it exists, it is generated)."""
        require_writable(self.view.read_only)
        with self.lock:
            self.view.store.run_write(lambda t: self._move_in(t, src, dst))
            self.view.handles.links.rename(src, dst)

    def _move_in(self, t: Txn, src: bytes, dst: bytes) -> None:
        """The write transaction of :meth:`move`."""

        def end(path: bytes) -> Resolved | None:
            """What ``path`` names now (None: nothing), after checking its parent (an existing directory
            this process may change); errors name ``path``."""
            try:
                _pino, pnode, _name = self.view.resolver.parent_and_name(t, path)
                self._check_node(pnode, os.W_OK | os.X_OK, path.rsplit(b"/", 1)[0] or b"/")
            except LibraryError as e:
                raise _at(e, path) from None
            try:
                return self.view.resolve(t, path)
            except NotFound:
                return None

        s = end(src)
        if s is None:
            raise _at(NotFound("no such file or directory"), src)
        if not s.is_real:
            raise _at(AccessDenied("generated by libraryfs: it cannot be moved"), src)
        self.refuse_generated(t, dst, "generated by libraryfs (read-only): it cannot be replaced")
        d = end(dst)
        if d is not None:
            if not d.is_real:
                raise _at(AccessDenied("generated by libraryfs (read-only): it cannot be replaced"), dst)
            raise _at(Exists("file exists"), dst)
        try:
            self.view.names.rename_in(t, src, dst, RENAME_NOREPLACE)
        except LibraryError as e:
            raise _at(e, dst if isinstance(e, Exists | NameTooLong | AccessDenied) else src) from None

    def entry_meta(self, path: bytes) -> dict:
        """The indexer's facts about ``path``: ``{"summary", "tokens"}`` for an entry, ``{"summary"}`` for a
        section, ``{}`` when it has not been indexed (or is generated)."""
        with self.lock, self.view.store.read() as t:
            r = self.view.resolve(t, path)
            if not r.is_real:
                return {}
            m = t.meta(r.ino)
        if isinstance(m, EntryMeta):
            return {"summary": m.summary, "tokens": m.tokens}
        if isinstance(m, SectionMeta):
            return {
                "summary": m.description,
                "tokens_total": m.tokens_total,
                "entries_total": m.entries_total,
            }
        return {}
