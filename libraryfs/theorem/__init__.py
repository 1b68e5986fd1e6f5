"""libraryfs.theorem (see its modules)."""
