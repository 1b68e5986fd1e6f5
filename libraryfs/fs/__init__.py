"""The filesystem core: the store and its schema, the view (POSIX semantics), the FUSE adapter, fsck.

Nothing here imports the index builders' models, the memory-kind features, the daemons or the CLI.
"""
