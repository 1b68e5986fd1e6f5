"""The card tree's MCP tool ``cards_block`` (registered through ``Feature.mcp_tools``; ``libraryfs mcp``):
the exact, ordered cards a (tier, domain) block reads (KACE §2), with their text within the token budget."""

from __future__ import annotations

from typing import Any


def register(reg: Any) -> None:
    """Add ``cards_block`` to ``reg`` (a :class:`libraryfs.daemon.mcp_registry.ToolRegistry`)."""

    def cards_block(tier: str, domain: str, include_text: bool = True) -> Any:
        """The cards block (tier, domain) reads, in order: cards/<tier>/<domain>/*.md then
        cards/universal/*.md (tier: easy | medium | hard | fallback). With include_text, their text too."""
        from libraryfs.features.cards import cards as cardsmod

        with reg.ops.lock:
            tree = reg.tree()
            paths = cardsmod.block_paths(tree, tier, cardsmod.check_slug(domain, "domain"))
            texts = [tree.read_bytes(p).decode("utf-8", "replace") for p in paths] if include_text else []
        body = (
            "\n\n".join(f"## {p}\n{t}" for p, t in zip(paths, texts, strict=False))
            if texts
            else "\n".join(paths)
        )
        text, cut = reg.budget.fit(body or f"block ({tier}, {domain}) reads no cards")
        if cut:
            text += "\n[libraryfs: truncated to the token budget; read single cards with read_text_file]"
        return reg.result(text, tier=tier, domain=domain, paths=paths, truncated=cut)

    reg.add(cards_block, "cards_block", "The cards a (tier, domain) block reads", reg.READ)
