"""libraryfs.llm (see its modules)."""
