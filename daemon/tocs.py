"""Rendering one directory's TOC pages, a part of the indexer's pass (ARCHITECTURE §2, §4).

A directory's items come from its entries' ``meta`` (summaries, token counts) and its subsections' meta
(descriptions, totals); the builder describes the section (and groups it into named ranges when it has more
than 40 entries); :func:`libraryfs.index.toc.render` cuts the bounded pages; one write transaction stores
the pages and the section's own meta (description, totals, page facts) for its line in the parent's TOC.
"""

from __future__ import annotations

import bisect
import os
import time
from typing import TYPE_CHECKING

from libraryfs.daemon.filing import is_hidden
from libraryfs.fs import schema as S
from libraryfs.fs.exclude import GIT_DIR, Placement
from libraryfs.fs.generated import INDEX_FILE, PAGES_DIRNAME
from libraryfs.fs.meta import EntryMeta, SectionMeta
from libraryfs.fs.store import Txn, now_ns
from libraryfs.fs.virtual import dir_settled, page0_moved
from libraryfs.index import catalogue, subjects
from libraryfs.index.jobs import Group, SectionDoc
from libraryfs.index.lines import QUOTE_MAX_BYTES
from libraryfs.index.sections import Child, apply_children, child_of_entry, child_of_section
from libraryfs.index.toc import Item, render, whole_text
from libraryfs.index.tokens import count_tokens

REGROUP_FRACTION = 0.1  #: share of a large section's names that must change before it is grouped again
REGROUP_INTERVAL_S = 3600.0  #: a changed listing is grouped again at least this often, seconds
GROUP_MAX_ITEMS = 200  #: entries per named group

if TYPE_CHECKING:
    from libraryfs.daemon.indexer import PassReport


class TocWriter:
    """Mixin of :class:`libraryfs.daemon.indexer.Indexer`: the TOC part of a pass.

    Uses the indexer's ``store``, ``builder``, ``max_tokens`` (the page bound C, tokens), ``_call`` (a
    builder job with its deterministic fallback), ``call_deferred``, ``refresh`` (a description or grouping
    still on its way makes the section's lines provisional), ``_update_entries``, ``exclusion`` (entries
    an ignore file matches are left out) and ``_chains`` (the pass's :meth:`~libraryfs.fs.exclude.TocExclusion.chain`
    memo: a directory's path and placement from its parent's, so re-rendering the d ancestors of a change costs
    O(d) reads, not O(d²)). When ``INDEX.md`` is the user's (claimed, or a git work tree), page
    0 is rendered for ``.index/INDEX.md`` (:func:`libraryfs.fs.virtual.page0_moved`), and a section's line in
    its parent links there. A directory never indexed is rendered only once it has settled
    (:func:`libraryfs.fs.virtual.dir_settled`, ``settle_s``): until then it waits in ``_deferred``, so a
    copy still filling it can create its own ``INDEX.md`` (only in the daemon's passes, ``_settle``).
    """

    def _render_dir(self, ino: int, rep: PassReport, upto: int, _retry: bool = True) -> bool:
        """Re-render the TOC pages of directory ``ino`` from its entries' meta; False if it is gone or
        deferred (not settled). Entries without a current summary (never journaled to us) are examined
        first, once."""
        listed = self._toc_items(ino)
        if listed is None:
            self._deferred.discard(ino)
            return False
        if listed == "deferred":
            self._deferred.add(ino)
            return False
        self._deferred.discard(ino)
        node, path, items, children, missing, claimed = listed
        if missing and _retry:  # entries never journaled to us (e.g. a crash lost their record)
            self._update_entries(missing, [], rep)
            return self._render_dir(ino, rep, upto, _retry=False)
        title = "/" if ino == S.ROOT_INO else os.fsdecode(path.rsplit(b"/", 1)[-1])
        profile, names = apply_children(items, children, title, relative=self.builder.name == "deterministic")
        sect = SectionDoc(
            path=os.fsdecode(path.lstrip(b"/")),
            entries=[(os.fsdecode(i.name), i.summary) for i in items],
            profile=profile,
            names=names,
        )
        description = self._call("describe", [sect])[0] if items else "empty section"
        provisional = bool(self.call_deferred) and bool(items)
        groups, grouping = None, None
        if len(items) > 40:
            groups, grouping, waiting = self._grouping(ino, sect)
            provisional = provisional or waiting
        self.refresh.section(ino, provisional)
        total_tokens = sum(i.tokens for i in items)
        total_entries = sum((i.entries if i.is_dir else 1) for i in items)
        gen = node.generation
        extra = None
        if ino == S.ROOT_INO:
            with self.store.read() as t:
                # links written for where page 0 is served: .index/INDEX.md when the user owns INDEX.md
                up = "../" if claimed else ""
                extra = catalogue.master_lines(t, up) + subjects.master_lines(t, up)
        # dir_generation: this directory's change count (its inode's generation), not the TOC generation
        # `status` shows (one per indexer commit): the header once said "generation", read as the latter
        facts = f"dir_generation={gen} journal_seq={upto} builder={getattr(self.builder, 'name', '?')}"
        out = render(
            title,
            description,
            items,
            max_tokens=self.max_tokens,
            count_tokens=count_tokens,
            header_facts=facts,
            groups=groups,
            root_extra=extra,
            root_in_pages_dir=claimed,
        )

        def write(t: Txn) -> None:
            """The write transaction body: the directory's TOC pages and its section meta (totals, generation,
            page token counts), unless the directory is gone."""
            if t.inode(ino) is None:
                return
            t.put_toc_pages(ino, out.pages)
            old = t.section_meta(ino) or SectionMeta()
            m = SectionMeta(
                description=description,
                tokens_total=total_tokens,
                entries_total=total_entries,
                entries_direct=len(items),
                toc_generation=gen,
                toc_journal_seq=upto,
                toc_pages=len(out.pages),
                toc_levels=out.levels,
                toc_max_page_tokens=max(out.page_tokens),
                toc_page_tokens=list(out.page_tokens),
                profile=profile,
                names=names,
                extra={**old.extra, "grouping": grouping} if grouping else old.extra,
            )
            t.put_meta(ino, m)

        self.store.run_write(write)
        rep.pages_written += len(out.pages)
        return True

    def _grouping(self, ino: int, sect: SectionDoc) -> tuple[list[Group] | None, dict | None, bool]:
        """Named groups for a large section, amortised: ``(groups, record to store or None, waiting)``.

        The builder is asked only when the listing changed by :data:`REGROUP_FRACTION` of its names since
        the last grouping (or at all, after :data:`REGROUP_INTERVAL_S`); in between, the last grouping is
        kept, with new names placed beside their predecessor in name order (:func:`adapt_groups`) — so one
        write into a big directory never costs a regrouping of the whole listing. ``waiting``: the model's
        grouping is on its way (the section's lines are provisional)."""
        if getattr(self.builder, "name", "deterministic") == "deterministic":
            return None, None, False  # name ranges; nothing to amortise
        with self.store.read() as t:
            old = (t.section_meta(ino) or S.SectionMeta()).extra.get("grouping")
        names = [n for n, _line in sect.entries]
        now = time.time()
        if old:
            changed = len(set(old["names"]) ^ set(names))
            stale = changed and now - old["asked"] >= REGROUP_INTERVAL_S
            if changed < REGROUP_FRACTION * max(len(old["names"]), 1) and not stale:
                return adapt_groups(old["groups"], names, GROUP_MAX_ITEMS), None, False
        groups = self._call("group", sect, GROUP_MAX_ITEMS)
        if self.call_deferred:
            return (adapt_groups(old["groups"], names, GROUP_MAX_ITEMS) if old else None), None, True
        paused = getattr(self.builder, "is_paused", lambda: False)()
        if groups is None and paused:
            return None, None, False  # not asked: ask again after the pause
        record = {
            "names": names,
            "groups": [[g.title, g.names] for g in groups] if groups else None,
            "asked": now,
        }
        return groups, record, False

    def _toc_items(self, ino: int):  # -> tuple | None | "deferred": see the docstring
        """``(node, path, TOC items, what each item holds, entries missing a current summary, page 0 moved
        to .index/)`` of directory ``ino``; None if it is no longer a reachable directory, ``"deferred"`` if
        it was never indexed and has not settled. One read transaction. What an item holds (its terms and
        defined names, :mod:`libraryfs.index.sections`) is what its line is told apart by."""
        with self.store.read() as t:
            node = t.inode(ino)
            if node is None or not node.is_dir:
                return None
            chain = self.exclusion.chain(t, ino, self._chains)  # its path and placement, from its parent's
            if chain is None:
                return None
            path = chain.path
            if (
                self._settle
                and t.toc_page(ino, 0) is None
                and not dir_settled(t, ino, now_ns(), self.settle_s)
            ):
                return "deferred"
            place = chain.place
            items: list[Item] = []
            children: list[Child] = []
            missing: dict[int, tuple[int, bytes]] = {}
            ignored = chain.ignored
            for name, child in t.iter_dir(ino):
                if is_hidden(name):
                    continue
                cn = t.inode(child)
                if cn is None or ignored(name, cn.is_dir):
                    continue
                if cn.is_dir:
                    sm = t.section_meta(child) or SectionMeta()
                    desc = sm.description if sm.description is not None else "section"
                    item = Item(name, desc, sm.tokens_total, True, sm.entries_total, direct=sm.entries_direct)
                    child_place = Placement(False, place.work_tree or t.lookup(child, GIT_DIR) is not None)
                    if page0_moved(t, child_place, child):
                        item.toc_link = f"{PAGES_DIRNAME}/{INDEX_FILE}"
                    items.append(item)
                    children.append(
                        child_of_section(
                            os.fsdecode(name), sm.profile, sm.names, sm.entries_total, sm.tokens_total
                        )
                    )
                else:
                    em = t.entry_meta(child) or EntryMeta()
                    if em.summary is None or em.size != cn.size:
                        missing[child] = (ino, name)
                    # a tiny regular file's line may quote its whole text, read in this transaction: the quote
                    # is the content the page was rendered from (toc.whole_text)
                    quotable = cn.is_reg and 0 < cn.size <= QUOTE_MAX_BYTES
                    items.append(
                        Item(
                            name,
                            em.summary or "",
                            em.tokens or 0,
                            False,
                            is_link=cn.is_lnk,
                            approx=em.approx,
                            whole=whole_text(t.read_data(child, 0, cn.size, cn.size)) if quotable else None,
                        )
                    )
                    children.append(
                        child_of_entry(os.fsdecode(name), em.keywords, em.defines, em.tokens or 0)
                    )
            moved = page0_moved(t, place, ino)
        return node, path, items, children, missing, moved


def adapt_groups(groups: list | None, names: list[str], max_items: int) -> list[Group] | None:
    """A stored grouping ``[[title, [names]]]`` brought to today's ``names``: gone names dropped, each new
    name put in the group of its predecessor in name order (the first group if it sorts first), empty groups
    dropped. None when there is no grouping or a group would exceed ``max_items`` (name ranges then)."""
    if not groups:
        return None
    current = set(names)
    out = [[title, [n for n in members if n in current]] for title, members in groups]
    where = {n: k for k, (_t, members) in enumerate(out) for n in members}
    placed = sorted(where)
    for n in sorted(current - set(where)):
        i = bisect.bisect_left(placed, n)
        out[where[placed[i - 1]] if i > 0 and placed else (where[placed[0]] if placed else 0)][1].append(n)
    kept = [Group(title=t, names=m) for t, m in out if m]
    if not kept or any(len(g.names) > max_items for g in kept):
        return None
    return kept
