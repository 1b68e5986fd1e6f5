"""The index: bounded TOC pages, the index-construction seam (deterministic or LLM), the finder, tokens."""

#: Default token budget of one TOC page (``libraryfs init --toc-max-tokens``); here rather than in
#: :mod:`libraryfs.index.toc` so that the CLI's option does not import the TOC renderer.
DEFAULT_MAX_TOKENS = 2000
