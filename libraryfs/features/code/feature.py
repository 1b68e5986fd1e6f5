"""The code-index feature's registration (entry point ``libraryfs.features`` → :data:`FEATURE`): the
``libraryfs code`` commands need the ``code`` extra (tree-sitter grammars, BM25)."""

from __future__ import annotations

from libraryfs.hooks import Feature

FEATURE = Feature(
    name="code",
    extra="code",
    modules=("rank_bm25", "tree_sitter", "tree_sitter_python", "tree_sitter_javascript", "tree_sitter_go"),
    mcp_tools="libraryfs.features.code.mcp_tools:register",
)
