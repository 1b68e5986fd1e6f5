"""Long-running processes: the FUSE mount server and the indexer daemon (installed as ``libraryfs.daemon``)."""
