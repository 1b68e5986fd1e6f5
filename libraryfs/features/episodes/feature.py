"""The episodes feature's registration (entry point ``libraryfs.features`` → :data:`FEATURE`) and its
indexer hook: steps appended to ``episodes/<id>/steps.jsonl`` through the mount become units and anchor
views, and ``ask/`` questions get answers, after each indexer pass.

The hook writes through the mount (so the kernel and the journal see the views; the next pass indexes them)
and only while the library is mounted. It shares the library's one episodes writer with ``libraryfs
episode build/watch`` (:meth:`~libraryfs.features.episodes.builder.EpisodeBuilder.writing`): when another
writer holds it, the hook does nothing and asks to be called again.
"""

from __future__ import annotations

from libraryfs.fs import schema as S
from libraryfs.hooks import Feature, HookContext, HookResult
from libraryfs.layout import is_live

FEATURE = Feature(
    name="episodes",
    extra="episodes",
    modules=("rank_bm25",),
    indexer_hook="libraryfs.features.episodes.feature:make_hook",
    mcp_tools="libraryfs.features.episodes.mcp_tools:register",
)


class EpisodesHook:
    """:class:`libraryfs.hooks.IndexerHook` building episodes after each pass (see module doc)."""

    name = "episodes"

    def __init__(self, ctx: HookContext) -> None:
        self.ctx = ctx
        self._builder = None

    def after_pass(self) -> HookResult:
        """Build grown episodes and answer questions through the mount; ``again`` if the lock was busy."""
        mp = self.ctx.mountpoint
        if not mp or not is_live(mp):
            return HookResult()
        with self.ctx.store.read() as t:
            if t.lookup(S.ROOT_INO, b"episodes") is None:
                return HookResult()
        if self._builder is None:
            from libraryfs.features.episodes.builder import EpisodeBuilder
            from libraryfs.fs.tree import DirTree

            self._builder = EpisodeBuilder(DirTree(mp), self.ctx.store)
        lines = self._builder.poll(wait=False)
        return HookResult(again=True) if lines is None else HookResult(lines)

    def close(self) -> None:
        """Nothing to release (the store belongs to the indexer)."""


def make_hook(ctx: HookContext) -> EpisodesHook:
    """The episodes indexer hook for one indexer (``FEATURE.indexer_hook``)."""
    return EpisodesHook(ctx)
