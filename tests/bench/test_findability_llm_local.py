"""The findability LLM navigator against the real local model (SmolLM2-135M on llama_cpp.server).

Nothing is scripted: the ``local_llm`` session fixture serves the real model on loopback and the real
``openai`` client talks to it through :class:`LLMNavigator` (text protocol, as ``--local-model`` uses). What
the model answers is not fixed here (docs/findability.md reports it); what is checked is that every lookup
runs to its end — a reply per turn, usage counted, no transport error, reads counted by what was read.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

pytestmark = [pytest.mark.llm_local, pytest.mark.slow]


def test_llm_navigator_runs_on_the_local_model(tmp_path: Path, local_llm) -> None:
    from libraryfs_bench.findability.llmnav import LLMNavigator, make_client
    from libraryfs_bench.findability.reader import Lookup

    (tmp_path / "notes").mkdir()
    (tmp_path / "INDEX.md").write_text(
        "# /\n\n- [notes/](notes/INDEX.md) — 2 entries: compost, stock (2 entries, 40 tok)\n"
    )
    (tmp_path / "notes" / "INDEX.md").write_text(
        "# notes\n\n- [compost.md](compost.md) — Compost: layering scraps (20 tok)\n"
        "- [stock.md](stock.md) — Stock: simmer bones (20 tok)\n"
    )
    (tmp_path / "notes" / "compost.md").write_text("# Compost\n\nLayer scraps.\n")
    (tmp_path / "notes" / "stock.md").write_text("# Stock\n\nSimmer bones for six hours.\n")
    base_url, model = local_llm.endpoint
    nav = LLMNavigator(make_client(base_url, None, 120.0), model, protocol="text", max_turns=4, max_tokens=48)
    for query, kind in (("Stock", "name"), ("simmer bones for a broth", "topic")):
        lk = Lookup(str(tmp_path), {})
        out = nav.run(query, kind, lk)
        assert out.error is None, out.error
        assert out.api_tokens > 0 and out.trace and all("text" in t for t in out.trace)
        assert all(r.kind in ("toc", "entry") and r.tokens > 0 for r in lk.reads)
