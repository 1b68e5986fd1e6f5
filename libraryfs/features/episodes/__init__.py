"""Episodic memory (S3Mem, PAPERS.md §4): steps.jsonl → units (``units`` DB) → anchor paths → budgeted recall.

Modules: :mod:`.units` (unit m_t, extraction), :mod:`.unitdb` (storage), :mod:`.views` (anchor files),
:mod:`.builder` (incremental build, watcher, ask/ → recall/), :mod:`.anchors` (question → anchor tuple),
:mod:`.recall` (BM25 candidates, re-ranking, packing), :mod:`.llm` (LLM extraction), :mod:`.crafter_data`
(real trajectories), :mod:`.questions` (QA with gold evidence), :mod:`.reader` (rule-based judge),
:mod:`.bench` (accuracy/tokens frontier).
"""
