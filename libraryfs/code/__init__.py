"""libraryfs.code (see its modules)."""
