"""Small real filesystems for full-disk and read-only tests: a size-limited tmpfs (root only) and a filler
that leaves it with no free block."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator

from helpers.facility import unavailable


@contextlib.contextmanager
def tmpfs(path: str, size: str) -> Iterator[str]:
    """A tmpfs of ``size`` (``"6m"``) mounted at ``path`` (made if missing) for the body; detached lazily
    after it. Fails the test (:func:`~helpers.facility.unavailable`) where mounting is not allowed."""
    os.makedirs(path, exist_ok=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", path],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        unavailable(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", path], capture_output=True)


def fill(fs: str) -> bool:
    """Fill the filesystem at ``fs`` completely (a file ``filler`` written in ever smaller writes until each
    size fails with ENOSPC); True when it is full, False on any other error."""
    fd = os.open(os.path.join(fs, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    return False
        return True
    finally:
        os.close(fd)
