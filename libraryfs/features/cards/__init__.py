"""libraryfs.features.cards (see its modules)."""
