"""Shared test helpers (tests/ is on sys.path: ``from helpers.llm_server import LLMServer``)."""
