"""libraryfs: an AI agent's external memory mounted as a real directory.

Layers (imports go one way, ARCHITECTURE §5): ``libraryfs.cli`` → ``libraryfs.daemon`` → ``libraryfs``.
Inside the core: FUSE adapter (:mod:`libraryfs.fs.fuse_adapter`) → view (:mod:`libraryfs.fs.view`) →
store (:mod:`libraryfs.fs.store`, layout in :mod:`libraryfs.fs.schema`).
"""

__version__ = "0.1.0"
