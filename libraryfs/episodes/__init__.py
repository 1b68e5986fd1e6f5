"""libraryfs.episodes (see its modules)."""
