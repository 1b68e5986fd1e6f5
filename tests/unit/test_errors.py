"""The errno table: every domain error maps to its errno, and an unknown exception in a FUSE op becomes EIO."""

from __future__ import annotations

import contextlib
import errno
import inspect
import logging

import pytest
from helpers.checklogs import assert_logs

from libraryfs import errors as E
from libraryfs.errors import ERRNO_TABLE, to_errno

#: What each domain error must mean to the kernel (a change here is a user-visible change).
EXPECTED = {
    E.NotFound: errno.ENOENT,
    E.Exists: errno.EEXIST,
    E.NotADir: errno.ENOTDIR,
    E.IsADir: errno.EISDIR,
    E.NotEmpty: errno.ENOTEMPTY,
    E.NameTooLong: errno.ENAMETOOLONG,
    E.TooManyLinks: errno.ELOOP,
    E.AccessDenied: errno.EACCES,
    E.NotPermitted: errno.EPERM,
    E.InvalidArgument: errno.EINVAL,
    E.NoSpace: errno.ENOSPC,
    E.NoAttr: errno.ENODATA,
    E.NotSupported: errno.ENOTSUP,
    E.CrossDevice: errno.EXDEV,
    E.QuotaExceeded: errno.EDQUOT,
    E.FileTooBig: errno.EFBIG,
    E.BadHandle: errno.EBADF,
    E.NoSuchOffset: errno.ENXIO,
    E.RangeError: errno.ERANGE,
    E.Corrupt: errno.EIO,
    E.SchemaMismatch: errno.EIO,
    E.LibraryMissing: errno.EIO,
    E.Busy: errno.EBUSY,
    E.Unavailable: errno.EIO,
    E.Stale: errno.ESTALE,
    E.Compacted: errno.EIO,
    E.Damaged: errno.EIO,
    E.ServerStopped: errno.EAGAIN,
    E.IndexerStopping: errno.EBUSY,
}


@pytest.mark.parametrize("cls", list(EXPECTED), ids=lambda c: c.__name__)
def test_every_domain_error_maps_to_its_errno(cls):
    assert ERRNO_TABLE[cls] == EXPECTED[cls]
    assert to_errno(cls("message")) == EXPECTED[cls]


def test_the_table_covers_every_domain_error_class():
    defined = {
        c
        for _n, c in inspect.getmembers(E, inspect.isclass)
        if issubclass(c, E.LibraryError) and c is not E.LibraryError and c.__module__ == E.__name__
    }
    assert defined == set(ERRNO_TABLE) == set(EXPECTED)


def test_subclasses_inherit_or_refine_the_errno():
    from libraryfs.fs.resolve import ReadOnlyFS

    class Sub(E.NotFound):
        pass

    assert to_errno(Sub("x")) == errno.ENOENT
    assert to_errno(ReadOnlyFS("read-only mount")) == errno.EROFS


def test_os_errors_keep_their_errno_and_anything_else_is_unknown():
    assert to_errno(OSError(errno.ENOSPC, "full")) == errno.ENOSPC
    assert to_errno(FileNotFoundError(errno.ENOENT, "gone")) == errno.ENOENT
    assert to_errno(OSError("no errno")) is None
    assert to_errno(ValueError("bug")) is None
    assert to_errno(KeyError("bug")) is None


# ---- the adapter: every operation maps errors; an unknown exception becomes EIO (never mfusepy's EINVAL) ----
@pytest.fixture
def ops(tmp_path):
    from libraryfs.fs.fuse_adapter import FuseOps
    from libraryfs.fs.store import Store
    from libraryfs.fs.view import LibraryView

    st = Store.create(tmp_path / "lib")
    try:
        yield FuseOps(LibraryView(st))
    finally:
        st.close()


def _wrapped_ops():
    from libraryfs.fs.fuse_adapter import FuseOps

    return [n for n, f in vars(FuseOps).items() if callable(f) and hasattr(f, "__wrapped__")]


def test_every_fuse_operation_is_wrapped():
    import mfusepy

    from libraryfs.fs.fuse_adapter import OWN_CALLBACKS, FuseOps

    lifecycle = {"init_with_config", "destroy", "invalidate", "take_deferred", "_refresh", "__init__"}
    ours = {n for n, f in vars(FuseOps).items() if callable(f) and n not in lifecycle}
    assert ours - set(_wrapped_ops()) == set()
    assert {"getattr", "create", "write", "rename", "mknod", "setxattr", "utimens"} <= ours
    assert all(hasattr(mfusepy.Operations, n) for n in set(ours) - set(OWN_CALLBACKS))
    assert set(OWN_CALLBACKS) <= ours


@pytest.mark.parametrize("name", _wrapped_ops())
def test_an_unknown_exception_in_any_op_becomes_eio(ops, name):
    """Arguments of the wrong type make the view raise TypeError/AttributeError — bugs, not domain errors."""
    import mfusepy

    fn = getattr(ops, name)
    nargs = len(inspect.signature(fn).parameters)
    if name in (
        "statfs",
        "releasedir",
        "fsyncdir",
        "fsync",
    ):  # these ignore the arguments: they must just work
        fn(*[object()] * nargs)
        return
    # an unknown directory handle is a domain error (EBADF); everything else here is a bug → EIO, logged
    bug = name not in ("readdir_with_offset", "readdir_plus")
    logged = assert_logs(r"raised an unexpected exception; returning EIO", logging.ERROR, count=1)
    with logged if bug else contextlib.nullcontext(), pytest.raises(mfusepy.FuseOSError) as ei:
        r = fn(*[object()] * nargs)
        assert not inspect.isgenerator(r), "a generator would raise outside the errno mapping"
    assert ei.value.errno == (errno.EIO if bug else errno.EBADF)


def test_domain_errors_reach_the_kernel_as_their_errno(ops):
    import mfusepy

    with pytest.raises(mfusepy.FuseOSError) as ei:
        ops.getattr("/missing")
    assert ei.value.errno == errno.ENOENT
    ops.mkdir("/d", 0o755)
    with pytest.raises(mfusepy.FuseOSError) as ei:
        ops.mkdir("/d", 0o755)
    assert ei.value.errno == errno.EEXIST
    with pytest.raises(mfusepy.FuseOSError) as ei:
        ops.getattr("/" + "x" * 256)
    assert ei.value.errno == errno.ENAMETOOLONG
    with pytest.raises(mfusepy.FuseOSError) as ei:
        ops.getxattr("/d", "user.none")
    assert ei.value.errno == errno.ENODATA
    with pytest.raises(mfusepy.FuseOSError) as ei:
        ops.rename("/d", "/e", 7)
    assert ei.value.errno == errno.EINVAL
