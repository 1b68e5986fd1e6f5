"""Filing ``inbox/`` entries into sections (ARCHITECTURE §4), a part of the indexer's pass.

An entry is *settled* once it has not been written for ``settle_s`` seconds. The builder picks a target
section for each settled entry (an existing section, or a new name made safe by
:func:`libraryfs.index.jobs.safe_section_name`; ``unsorted`` otherwise); the move is a real rename — through the
mount when the library is mounted, so the kernel sees it — and journaled like any rename, so the next pass
re-renders the TOCs of both directories. Name clashes get ``-2``, ``-3`` … before the extension; the
generated ``INDEX.md`` is a clash too (filed under that name, an entry would become the section's own
``INDEX.md`` and move its TOC to ``.index/INDEX.md``, docs/posix.md); the stem is cut (by bytes, on a
UTF-8 boundary) so that the name with its suffix stays within NAME_MAX = 255 bytes (:func:`clash_name`).
A filing that fails is logged once and retried with a backoff (:class:`FilingFailure`), not every pass.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from libraryfs.errors import LibraryError
from libraryfs.fs import schema as S
from libraryfs.fs.exclude import is_hidden as is_hidden  # the indexer's modules import it from here
from libraryfs.fs.generated import INDEX_NAME
from libraryfs.fs.meta import EntryMeta, SectionMeta
from libraryfs.fs.store import Txn, now_ns
from libraryfs.index.jobs import EntryDoc, SectionDoc, safe_section_name
from libraryfs.layout import is_live
from libraryfs.shown import escape_controls, show_name

if TYPE_CHECKING:
    from libraryfs.daemon.indexer import PassReport

log = logging.getLogger("libraryfs.indexer")

INBOX = b"inbox"
UNSORTED = "unsorted"
#: the longest wait, seconds, before a failed filing is tried again
FILING_BACKOFF_MAX_S = 300.0


@dataclass
class FilingFailure:
    """An inbox entry whose filing failed: ``tries`` failures so far, ``retry_at`` (``time.monotonic()``
    seconds) before which it is not tried again, ``error`` the last message (logged when it first occurs)."""

    tries: int
    retry_at: float
    error: str


def clash_name(name: bytes, k: int) -> bytes:
    """``name`` with the clash suffix ``-k`` before its extension (``a.md`` → ``a-2.md``; no extension, or a
    dot-name: at the end), within NAME_MAX = 255 bytes (POSIX ``{NAME_MAX}``; ENAMETOOLONG past it): the stem
    is cut by bytes, back to a UTF-8 character boundary. An extension too long to leave room for a stem is
    treated as part of the stem."""
    stem, dot, ext = name.rpartition(b".")
    if not dot or not stem:
        stem, ext = name, b""
    suffix = b"-%d" % k
    tail = suffix + (b"." + ext if ext else b"")
    if len(tail) >= S.NAME_MAX:  # no room for a stem beside the extension
        stem, tail = name, suffix
    room = S.NAME_MAX - len(tail)
    if len(stem) > room:
        cut = room
        for _ in range(3):  # back off a UTF-8 continuation byte (at most 3 in a character)
            if cut > 1 and stem[cut] & 0xC0 == 0x80:
                cut -= 1
        stem = stem[:cut]
    return stem + tail


class InboxFiler:
    """Mixin of :class:`libraryfs.daemon.indexer.Indexer`: the inbox part of a pass.

    Uses the indexer's ``store``, ``settle_s``, ``mountpoint``, ``last_error``, ``_call`` and
    ``call_deferred`` (an entry whose filing answer is on its way in the background stays in the inbox until
    it arrives; with the endpoint paused the deterministic filing is used at once).
    """

    _filing_failed: dict[bytes, FilingFailure]  #: inbox names whose filing failed, set by the indexer

    # ------------------------------------------------------------------------------------------------
    def _inbox_ino(self, t: Txn) -> int | None:
        ino = t.lookup(S.ROOT_INO, INBOX)
        if ino is None:
            return None
        node = t.inode(ino)
        return ino if node is not None and node.is_dir else None

    def _file_inbox(self, rep: PassReport) -> None:
        now = now_ns()
        with self.store.read() as t:
            inbox = self._inbox_ino(t)
            if inbox is None:
                return
            ready: list[tuple[bytes, EntryDoc]] = []
            other: list[bytes] = []  # directories, symlinks, FIFOs…: never read, filed into unsorted/
            for name, child in t.iter_dir(inbox):
                node = t.inode(child)
                if node is None or is_hidden(name):
                    continue
                if now - max(node.mtime_ns, node.ctime_ns) < self.settle_s * 1e9:
                    continue  # still being written
                if not node.is_reg:
                    other.append(name)
                    continue
                data = t.read_data(child, 0, 8192, node.size)
                binary = b"\0" in data[:4096]
                ready.append(
                    (
                        name,
                        EntryDoc(
                            path="inbox/" + os.fsdecode(name),
                            name=os.fsdecode(name),
                            content_hash="",
                            text="" if binary else data.decode("utf-8", "replace"),
                            size_bytes=node.size,
                            is_binary=binary,
                        ),
                    )
                )
            if not ready and not other:
                self._filing_failed.clear()
                return
            sections = self._sections(t) if ready else []
        targets = self._call("file", [d for _n, d in ready], sections) if ready else []
        # the model's answer is on its way: the entry stays until it arrives (not while the endpoint is paused)
        paused = getattr(self.builder, "is_paused", lambda: False)()
        waiting = set() if paused else self.call_deferred
        moves = [
            (name, target)
            for k, ((name, _doc), target) in enumerate(zip(ready, targets, strict=False))
            if k not in waiting
        ]
        moves += [(name, UNSORTED) for name in other]
        failed: dict[bytes, FilingFailure] = self._filing_failed
        mono = time.monotonic()
        for name in [n for n in failed if n not in {m for m, _t in moves}]:
            del failed[name]  # gone from the inbox (or not settled): forget it
        for name, target in moves:
            prev = failed.get(name)
            if prev is not None and mono < prev.retry_at:
                continue  # backing off
            sect = safe_section_name(target or "") or UNSORTED
            try:
                final = self._move(b"inbox/" + name, os.fsencode(sect), name)
                failed.pop(name, None)
                rep.filed.append((os.fsdecode(name), os.fsdecode(final)))
                log.info("filed inbox/%s as %s", show_name(name), show_name(final))  # a name is one line
            except (OSError, LibraryError) as e:
                msg = str(e)
                tries = prev.tries + 1 if prev else 1
                delay = min(FILING_BACKOFF_MAX_S, max(1.0, self.settle_s) * 2**tries)
                failed[name] = FilingFailure(tries, mono + delay, msg)
                if prev is None or prev.error != msg:  # logged once, not every pass
                    self.last_error = f"filing {show_name(name)}: {escape_controls(msg)}"
                    log.warning(
                        "could not file inbox/%s into %s: %s (retried with a backoff, up to %.0f s)",
                        show_name(name),
                        show_name(sect),
                        escape_controls(msg),
                        FILING_BACKOFF_MAX_S,
                    )

    def _sections(self, t: Txn) -> list[SectionDoc]:
        out = []
        for name, child in t.iter_dir(S.ROOT_INO):
            node = t.inode(child)
            if node is None or not node.is_dir or name == INBOX or is_hidden(name):
                continue
            out.append(self._section_doc(t, child, os.fsdecode(name)))
            for sub, sc in t.iter_dir(child):
                sn = t.inode(sc)
                if sn is not None and sn.is_dir and not is_hidden(sub):
                    out.append(self._section_doc(t, sc, os.fsdecode(name + b"/" + sub)))
        return out

    def _section_doc(self, t: Txn, ino: int, path: str, limit: int = 200) -> SectionDoc:
        entries = []
        for k, (name, child) in enumerate(t.iter_dir(ino)):
            if k >= limit:
                break
            if not is_hidden(name):
                entries.append((os.fsdecode(name), _line(t.meta(child))))
        return SectionDoc(path=path, entries=entries, description=_line(t.meta(ino)))

    def _move(self, src_rel: bytes, section: bytes, name: bytes) -> bytes:
        """Move ``inbox/<name>`` into ``section`` (created if needed), avoiding name clashes and ``INDEX.md``."""
        from libraryfs.fs.view import LibraryView

        mounted = self.mountpoint and is_live(self.mountpoint)
        with self.store.read() as t:
            final = name
            ino = S.ROOT_INO
            for comp in section.split(b"/"):
                nxt = t.lookup(ino, comp) if ino else None
                ino = nxt or 0
            k = 2
            while final == INDEX_NAME or (
                ino and t.lookup(ino, final) is not None
            ):  # the TOC's name is taken
                final = clash_name(name, k)
                k += 1
        if mounted:
            mp = os.fsencode(self.mountpoint)  # type: ignore[arg-type]
            os.makedirs(mp + b"/" + section, exist_ok=True)
            os.rename(mp + b"/" + src_rel, mp + b"/" + section + b"/" + final)
        else:
            view = LibraryView(self.store)
            path = b""
            for comp in section.split(b"/"):
                path += b"/" + comp
                try:
                    view.mkdir(path, 0o755, os.getuid(), os.getgid())
                except LibraryError as e:
                    if e.errno != 17:
                        raise
            view.rename(b"/" + src_rel, path + b"/" + final, 0)
        return section + b"/" + final


def _line(m: EntryMeta | SectionMeta | None) -> str:
    """The TOC line of an entry (its summary) or of a section (its description); "" if none yet."""
    if isinstance(m, EntryMeta):
        return m.summary or ""
    return (m.description if m is not None else None) or ""
