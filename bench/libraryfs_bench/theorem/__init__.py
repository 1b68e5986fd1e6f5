"""The Library Theorem benchmark (Mainen 2026, PAPERS.md §1) run through a mounted library.

content → stores (files under a root) → agents (scripted, or the paper's LLM agent) → accounting →
compare (the paper's logs) / compounding (T-step) / plots; ``bench.run_benchmark`` ties them together
for ``libraryfs bench theorem``. See docs/theorem.md.
"""
