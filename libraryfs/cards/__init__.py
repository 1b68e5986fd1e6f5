"""libraryfs.cards (see its modules)."""
