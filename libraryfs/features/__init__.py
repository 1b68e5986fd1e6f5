"""Optional memory kinds built over the same store: episodes (S3Mem), cards (KACE), code (CODE-AGENT).

Each is an installable extra (``libraryfs[episodes]``, ``[cards]``, ``[code]``) and registers itself with the
core through :mod:`libraryfs.hooks`; the core never imports these packages.
"""
