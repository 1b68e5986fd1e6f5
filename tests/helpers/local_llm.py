"""The real local model for tests: one ``llama_cpp.server`` per test session, started by the first test
that asks for it (``local_llm`` fixture) and stopped at the end of the session.

Tests that use it are marked ``llm_local`` and ``slow``. Without the ``llm-local`` extra they skip locally
and fail in CI (``CI=true``), where ``scripts/setup.sh`` installs it; an installed model whose server does not
start is an error everywhere. tests/conftest.py imports the fixture, so every test module sees the same one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from helpers.facility import unavailable
from libraryfs.llm import local


@pytest.fixture(scope="session")
def local_llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[local.LocalModel]:
    """The running local model (SmolLM2-135M-Instruct on a free 127.0.0.1 port), shared by the session.

    Its log is ``<session tmp>/local-llm*/server.log``; the server is stopped (SIGTERM) in teardown.
    """

    try:
        local.check_installed()
    except local.LocalModelError as e:
        unavailable(str(e))
    log_path = tmp_path_factory.mktemp("local-llm") / "server.log"
    server = local.start(log_path=str(log_path))
    try:
        yield server
    finally:
        server.stop()
