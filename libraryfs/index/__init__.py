"""The index: bounded TOC pages, the index-construction seam (deterministic or LLM), the finder, tokens."""
