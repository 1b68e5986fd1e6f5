"""``python -m libraryfs_bench.findability``: see :mod:`libraryfs_bench.findability.cli`."""

from .cli import main

main()
