"""The card tree's registration (entry point ``libraryfs.features`` → :data:`FEATURE`): ``libraryfs solve``
and ``libraryfs cards`` need the ``cards`` extra (math-verify, for answer equivalence)."""

from __future__ import annotations

from libraryfs.hooks import Feature

FEATURE = Feature(
    name="cards",
    extra="cards",
    modules=("math_verify",),
    mcp_tools="libraryfs.features.cards.mcp_tools:register",
)
