"""The LLM builder inside the real indexer: TOCs carry the model's text, inbox entries land where the model
said, a second pass costs zero requests, a broken endpoint leaves deterministic TOCs and says why — in
process on a real store, and end to end through a real FUSE mount with the indexer daemon."""

from __future__ import annotations

import os

import pytest
from helpers.files import read_file
from helpers.llm_server import IndexModel, LLMServer, Raw
from helpers.mount import mount
from helpers.wait import wait_until

from libraryfs.daemon.indexer import Indexer
from libraryfs.fs import schema as S
from libraryfs.fs.check import check, describe
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView
from libraryfs.llm import make_builder


def _write(view: LibraryView, path: bytes, data: bytes) -> None:
    fh = view.create(path, 0o644, os.O_WRONLY, os.getuid(), os.getgid())
    view.write(fh, data, 0)
    view.release(fh)


def _toc(st: Store, path: bytes) -> str:
    with st.read() as t:
        ino = S.ROOT_INO
        for comp in [c for c in path.split(b"/") if c]:
            ino = t.lookup(ino, comp)
        return (t.toc_page(ino, 0) or b"").decode()


def _status(st: Store) -> dict:
    with st.read() as t:
        return t.cfg_json(S.CFG_INDEXER_STATUS)


@pytest.fixture
def lib(libdir):
    st = Store(libdir)
    v = LibraryView(st)
    uid, gid = os.getuid(), os.getgid()
    for d in (b"/notes", b"/cooking", b"/inbox"):
        v.mkdir(d, 0o755, uid, gid)
    _write(v, b"/notes/alpha.md", b"# Alpha\n\nThe first note.\n")
    _write(v, b"/notes/beta.md", b"# Beta\n\nThe second note.\n")
    _write(v, b"/cooking/bread.md", b"# Bread\n\nFlour, water, salt.\n")
    _write(v, b"/inbox/soup.md", b"A cooking note: leek soup.\n")
    _write(v, b"/inbox/tax.md", b"Forms for the 2024 tax return.\n")
    yield st
    assert check(st).problems == [], describe(check(st))
    st.close()


def overrides(url: str, **kw) -> dict:
    return {
        "base_url": url,
        "model": "idx-model",
        "timeout_s": 30,  # no test here is about a timeout (a slow loopback answer must not be retried)
        "max_backoff_s": 0.02,
        "transport_attempts": 2,
        **kw,
    }


def test_indexer_writes_the_models_toc_and_files_the_inbox(lib):
    with LLMServer(default=IndexModel(file_to={"tax.md": "Finance"})) as srv:
        b = make_builder(lib.libdir, lib, overrides(srv.base_url))
        idx = Indexer(lib.libdir, builder=b, store=lib, settle_s=0)
        idx.run_once()
        idx.run_once()  # the moves out of the inbox are journaled: the next pass indexes their new places
        notes = _toc(lib, b"/notes")
        assert "Model summary of alpha.md" in notes and "Model summary of beta.md" in notes
        assert "Model description of notes" in _toc(lib, b"/")
        with lib.read() as t:
            cooking = t.lookup(S.ROOT_INO, b"cooking")
            finance = t.lookup(S.ROOT_INO, b"finance")
            assert t.lookup(cooking, b"soup.md") is not None  # existing section chosen by the model
            assert finance is not None and t.lookup(finance, b"tax.md") is not None  # a new section
        # a one-line note's line quotes its whole text (TOC_FORMAT 7); the model's summary stays in its meta
        assert '- [tax.md](tax.md) — "Forms for the 2024 tax return."' in _toc(lib, b"/finance")
        with lib.read() as t:
            tax = t.entry_meta(t.lookup(finance, b"tax.md"))
            assert tax is not None and "Model summary of tax.md" in (tax.summary or "")
        st = _status(lib)["builder"]
        assert st["builder"] == "llm:idx-model" and st["requests"] > 0 and st["fallbacks"] == 0

        n = len(srv.requests)
        Indexer(
            lib.libdir, builder=make_builder(lib.libdir, lib, overrides(srv.base_url)), store=lib, settle_s=0
        ).run_once(full=True)
        assert len(srv.requests) == n  # unchanged content: zero requests, also for a new builder


@pytest.mark.expect_log(r"garbage_body .*deterministic results are used meanwhile")  # logged, never silent
def test_indexer_with_garbage_endpoint_keeps_deterministic_tocs_and_says_why(lib):
    with LLMServer(default=Raw(b"<html>502 Bad Gateway</html>", content_type="text/html")) as srv:
        b = make_builder(lib.libdir, lib, overrides(srv.base_url, down_backoff_s=60))
        Indexer(lib.libdir, builder=b, store=lib, settle_s=0).run_once()
        notes = _toc(lib, b"/notes")
        assert "Model summary" not in notes and "The first note." in notes  # the deterministic summary
        st = _status(lib)["builder"]
        assert st["fallbacks"] > 0 and st["last_error"]["kind"] == "garbage_body"
        assert st["pause_reason"] == "garbage_body"


# -- end to end through a mount ----------------------------------------------------------------------------


@pytest.fixture
def llm_mounted(libdir, tmp_path):
    """The library mounted with the indexer daemon using the LLM builder against a loopback server."""
    with LLMServer(default=IndexModel()) as srv:
        env = {
            "LIBRARYFS_LLM_BASE_URL": srv.base_url,
            "LIBRARYFS_LLM_MODEL": "mount-model",
            "LIBRARYFS_LLM_TIMEOUT_S": "2",
        }
        with mount(libdir, tmp_path / "mnt", llm=True, env=env) as m:
            yield m, srv


@pytest.mark.mount
def test_mounted_toc_shows_the_models_summaries(llm_mounted):
    m, srv = llm_mounted
    os.makedirs(m.p("notes"))
    with open(m.p("notes/first.md"), "w") as f:
        f.write("# Groceries\n\nBuy milk and eggs.\n")
    m.wait_indexed()
    wait_until(
        lambda: "Model summary of first.md" in read_file(m.p("notes/INDEX.md")), 30, "the model's summary"
    )
    # the daemon asks in the background: the section's line follows once its description arrived
    wait_until(
        lambda: "Model description of notes" in read_file(m.p("INDEX.md")), 30, "the model's description"
    )
    assert srv.chat_requests("summarize")
