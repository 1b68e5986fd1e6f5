"""Whole-file reads and writes that close their file (``open(p).read()`` leaves the closing to the garbage
collector, and the suite treats the ResourceWarning that follows as an error)."""

from __future__ import annotations

from typing import Any


def read_file(*open_args: Any, **open_kw: Any) -> Any:
    """``open(*open_args, **open_kw).read()`` with the file closed afterwards (str or bytes by mode)."""
    with open(*open_args, **open_kw) as f:
        return f.read()


def write_file(data: Any, *open_args: Any, **open_kw: Any) -> int:
    """``open(*open_args, **open_kw).write(data)`` with the file closed afterwards; returns what write did."""
    with open(*open_args, **open_kw) as f:
        return f.write(data)
