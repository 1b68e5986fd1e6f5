"""libraryfs.features.code (see its modules)."""
