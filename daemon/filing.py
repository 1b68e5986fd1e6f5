"""Filing ``inbox/`` entries into sections (ARCHITECTURE §4), a part of the indexer's pass.

An entry is *settled* once it has not been written for ``settle_s`` seconds. The builder picks a target
section for each settled entry (an existing section, or a new name made safe by
:func:`libraryfs.index.jobs.safe_section_name`; ``unsorted`` otherwise); the move is a real rename — through the
mount when the library is mounted, so the kernel sees it — and journaled like any rename, so the next pass
re-renders the TOCs of both directories. Name clashes get ``-2``, ``-3`` … before the extension; the
generated ``INDEX.md`` is a clash too (filed under that name, an entry would become the section's own
``INDEX.md`` and move its TOC to ``.index/INDEX.md``, docs/posix.md).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from libraryfs.errors import LibraryError
from libraryfs.fs import schema as S
from libraryfs.fs.exclude import is_hidden as is_hidden  # the indexer's modules import it from here
from libraryfs.fs.generated import INDEX_NAME
from libraryfs.fs.meta import EntryMeta, SectionMeta
from libraryfs.fs.store import Txn, now_ns
from libraryfs.index.jobs import EntryDoc, SectionDoc, safe_section_name
from libraryfs.layout import is_live

if TYPE_CHECKING:
    from libraryfs.daemon.indexer import PassReport

log = logging.getLogger("libraryfs.indexer")

INBOX = b"inbox"
UNSORTED = "unsorted"


class InboxFiler:
    """Mixin of :class:`libraryfs.daemon.indexer.Indexer`: the inbox part of a pass.

    Uses the indexer's ``store``, ``settle_s``, ``mountpoint``, ``last_error``, ``_call`` and
    ``call_deferred`` (an entry whose filing answer is on its way in the background stays in the inbox until
    it arrives; with the endpoint paused the deterministic filing is used at once).
    """

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
        for name, target in moves:
            sect = safe_section_name(target or "") or UNSORTED
            try:
                final = self._move(b"inbox/" + name, os.fsencode(sect), name)
                rep.filed.append((os.fsdecode(name), os.fsdecode(final)))
                log.info("filed inbox/%s as %s", os.fsdecode(name), os.fsdecode(final))
            except (OSError, LibraryError) as e:
                self.last_error = f"filing {os.fsdecode(name)}: {e}"
                log.warning("could not file inbox/%s into %s: %s", os.fsdecode(name), sect, e)

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
            stem, dot, ext = name.rpartition(b".")
            if not dot or not stem:
                stem, ext = name, b""
            while final == INDEX_NAME or (
                ino and t.lookup(ino, final) is not None
            ):  # the TOC's name is taken
                final = stem + b"-%d" % k + (b"." + ext if ext else b"")
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
