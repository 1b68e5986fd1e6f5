"""The saved recall index of an episode: ``recall``/``answer`` load it instead of rebuilding the episode's
:class:`~libraryfs.features.episodes.index.EpisodeIndex` from every unit on every call (issue 18: at 10⁴
steps the rebuild — parse every unit, occurrence lists, names, BM25 statistics — was ~1 s of CPU).

Derived data, rebuildable at any time, never trusted: one file per episode under
``<state dir>/recall-index/`` (:func:`libraryfs.layout.state_dir`), written whole under a temporary name
and renamed. Its key is a digest of every stored unit record of the episode (the forked reader computes it
from the records it reads: any change of any unit changes it), of the source of the modules that derive
the index, and of the Python version (``marshal``'s format) and byte order (postings are ``array`` bytes).
A file is used only when its header (magic, payload length, CRC-32 of the payload), its format and its key
all match; anything else — a truncated, damaged, foreign or stale file — is ignored and replaced by a fresh
one. Units are kept as their stored JSON and parsed only for the steps a query shows.
"""

from __future__ import annotations

import functools
import hashlib
import marshal
import os
import sys
import zlib

FORMAT = 1
MAGIC = b"libraryfs recall index\n"
DIR_NAME = "recall-index"
KEY_SUFFIX = ".key"  #: the side file holding the key of the saved index (:func:`load_key`)
_DIGEST_BYTES = 32


def records_digest(records: list[bytes]) -> str:
    """A digest of an episode's unit records (their order and every byte)."""
    h = hashlib.blake2b(digest_size=_DIGEST_BYTES)
    for r in records:
        h.update(len(r).to_bytes(8, "big"))
        h.update(r)
    return f"{code_key()}:{h.hexdigest()}"


@functools.cache
def code_key() -> str:
    """Digest of the source of the modules that derive the index, and the Python version: a change of
    either makes every saved index stale."""
    from libraryfs.features.episodes import bm25, index, units

    h = hashlib.blake2b(digest_size=16)
    h.update(repr((FORMAT, sys.version_info[:2], sys.byteorder)).encode())
    for mod in (index, bm25, units):
        with open(mod.__file__ or "", "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def path_for(libdir: str, episode: str) -> str:
    """Where the saved index of ``episode`` lives (a name derived from the id: ids may hold any byte)."""
    from libraryfs.layout import state_dir

    name = hashlib.sha256(episode.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return os.path.join(state_dir(libdir), DIR_NAME, name)


def load(path: str) -> tuple[str, dict] | None:
    """``(key, state)`` of the saved index at ``path``; None when there is none or it is not intact."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    head = len(MAGIC) + 12
    if len(data) < head or not data.startswith(MAGIC):
        return None
    size, crc = (
        int.from_bytes(data[len(MAGIC) : head - 4], "big"),
        int.from_bytes(data[head - 4 : head], "big"),
    )
    payload = data[head:]
    if len(payload) != size or zlib.crc32(payload) != crc:
        return None
    try:
        out = marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return None
    if not isinstance(out, dict) or out.get("format") != FORMAT or not isinstance(out.get("state"), dict):
        return None
    key = out.get("key")
    return (key, out["state"]) if isinstance(key, str) else None


def save(path: str, key: str, state: dict) -> bool:
    """Write the index (atomically: a temporary file renamed over ``path``); False when the directory cannot
    be written (the next call rebuilds it again, nothing else changes)."""
    import tempfile  # here: loading (every other recall) needs neither it nor the shutil it imports

    payload = marshal.dumps({"format": FORMAT, "key": key, "state": state})
    data = MAGIC + len(payload).to_bytes(8, "big") + zlib.crc32(payload).to_bytes(4, "big") + payload
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return False
    return save_key(path, key)


def save_key(path: str, key: str) -> bool:
    """Write the side file of :func:`load_key` (atomically); False when it cannot be written."""
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(key.encode())
            os.replace(tmp, path + KEY_SUFFIX)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return False
    return True


def load_key(path: str) -> str | None:
    """The key the index at ``path`` was last saved under, from its small side file (``path`` +
    :data:`KEY_SUFFIX`, written after it), or None. A hint only — it lets the forked reader leave the
    records out when they are current while this process reads the index itself; the index is used only
    when its own key matches."""
    try:
        with open(path + KEY_SUFFIX, "rb") as f:
            return f.read(4096).decode("ascii")
    except (OSError, UnicodeDecodeError):
        return None
