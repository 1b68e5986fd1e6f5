"""The ``libraryfs`` command line (click), one module per command group (installed as ``libraryfs.cli``)."""
