"""A bad endpoint costs a bounded number of requests and says so (issue 13, item 5).

Real indexer on a real store, the LLM builder over the real ``openai`` client, a scripted OpenAI-compatible
server on loopback that counts every request it receives:

- a model that answers garbage (prose, no valid item) trips the circuit breaker: paused within 20 requests,
  ``libraryfs status`` (plain text) shows the endpoint failing and paused, and the log warns once;
- N writes into a big directory cost about one summary request each: no regrouping of the whole listing
  per write (amortised: only after 10 % of the listing changed);
- the plain ``status`` shows latency, error rate and the last error of a healthy and of a failing endpoint.
"""

from __future__ import annotations

import os

import pytest
from helpers.checklogs import assert_logs
from helpers.llm_server import IndexModel, LLMServer, Reply, Status
from helpers.view import mkfile
from helpers.wait import wait_until

from libraryfs.cli.query_cmds import endpoint_lines
from libraryfs.daemon.indexer import Indexer
from libraryfs.fs import schema as S
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView
from libraryfs.llm import make_builder
from libraryfs.llm.health import BREAKER_BAD_ANSWERS


def _overrides(url: str, **kw) -> dict:
    return {
        "base_url": url,
        "model": "m",
        "timeout_s": 5,
        "max_backoff_s": 0.02,
        "transport_attempts": 2,
        **kw,
    }


def _status(st: Store) -> dict:
    with st.read() as t:
        return t.cfg_json(S.CFG_INDEXER_STATUS)


@pytest.fixture
def store(libdir):
    st = Store(libdir)
    yield st
    st.close()


def test_garbage_answers_pause_the_endpoint_within_20_requests(store, run_cli):
    v = LibraryView(store)
    v.mkdir(b"/notes", 0o755, os.getuid(), os.getgid())
    for k in range(40):
        mkfile(v, b"/notes/n%02d.md" % k, b"# Note %d\n\nSomething distinct number %d.\n" % (k, k))
    prose = Reply("Sure! I would be glad to help you with your library. Here is what I think about it.")
    with LLMServer(default=prose) as srv:
        b = make_builder(store.libdir, store, _overrides(srv.base_url, batch_size=1, down_backoff_s=600))
        try:
            with assert_logs(r"is failing: .*deterministic results are used meanwhile", count=1):
                Indexer(store.libdir, builder=b, store=store, settle_s=0).run_once()
                Indexer(store.libdir, builder=b, store=store, settle_s=0).run_once(full=True)
        finally:
            b.close()
        asked = len(srv.chat_requests())
    # the breaker opens at the BREAKER_BAD_ANSWERS-th bad answer; at most the other requests already in flight
    # (max_concurrency - 1) are answered after it, and the second, full pass sends nothing while paused
    concurrency = b.config.max_concurrency
    assert BREAKER_BAD_ANSWERS <= asked <= BREAKER_BAD_ANSWERS + concurrency - 1 <= 20, (asked, concurrency)
    builder = _status(store)["builder"]
    assert builder["pause_reason"] == "bad_answers" and builder["endpoint"]["state"] == "failing"
    assert builder["endpoint"]["error_rate"] == 1.0
    with store.read() as t:  # every entry still has its deterministic line
        notes = t.lookup(S.ROOT_INO, b"notes")
        assert b"Something distinct number 39" in (t.toc_page(notes, 0) or b"")
    text = run_cli("status", store.libdir, check_rc=True).stdout
    line = next(ln for ln in text.splitlines() if ln.startswith("endpoint"))
    assert srv.base_url in line and "failing" in line and "paused" in line and "(bad_answers)" in line
    assert "latency p50" in line and "(100%)" in line and "bad_answer" in line


def test_a_healthy_endpoint_line_shows_latency_and_no_errors(store):
    v = LibraryView(store)
    mkfile(v, b"/a.md", b"# A\n\nAlpha.\n")
    with LLMServer(default=IndexModel()) as srv:
        b = make_builder(store.libdir, store, _overrides(srv.base_url))
        try:
            Indexer(store.libdir, builder=b, store=store, settle_s=0).run_once()
        finally:
            b.close()
    [line] = endpoint_lines(_status(store)["builder"])
    assert ": ok;" in line and "latency p50" in line and "0 errors in the last" in line and "(0%)" in line


def _requests_by_task(srv: LLMServer) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in srv.chat_requests():
        out[r.task or "?"] = out.get(r.task or "?", 0) + 1
    return out


def test_writes_into_a_big_directory_do_not_regroup_it_each_time(store):
    """120 entries (grouped: > 40), then 10 single writes, each followed by a pass: one summary request per
    write; the grouping of the whole listing is asked again only after 10 % of it changed."""
    v = LibraryView(store)
    v.mkdir(b"/big", 0o755, os.getuid(), os.getgid())
    for k in range(120):
        mkfile(v, b"/big/e%03d.md" % k, b"# Entry %d\n\nText of entry %d.\n" % (k, k))
    with LLMServer(default=IndexModel()) as srv:
        b = make_builder(store.libdir, store, _overrides(srv.base_url))
        idx = Indexer(store.libdir, builder=b, store=store, settle_s=0)
        try:
            idx.run_once()
            before = _requests_by_task(srv)
            assert before.get("group") == 1
            n = 10
            for k in range(n):
                mkfile(v, b"/big/z-new-%02d.md" % k, b"# New %d\n\nA new entry, number %d.\n" % (k, k))
                idx.run_once()
            after = _requests_by_task(srv)
        finally:
            b.close()
    added = {t: after.get(t, 0) - before.get(t, 0) for t in after}
    print(f"\nrequests for {n} writes into a 120-entry directory: {added}")
    assert added.get("summarize", 0) == n
    assert added.get("group", 0) <= 1  # 10 of 120 names changed: under the 10 % threshold
    assert sum(added.values()) <= n + 3, added
    with store.read() as t:
        big = t.lookup(S.ROOT_INO, b"big")
        n_pages = t.section_meta(big).toc_pages  # every page of its TOC, however the leaves are cut
        pages = b"".join(t.toc_page(big, p) or b"" for p in range(n_pages))
    assert b"z-new-09.md" in pages and b"Model summary of z-new-09.md" in pages


@pytest.mark.expect_log(r"is failing: http_503")
def test_background_answers_after_an_outage_replace_the_deterministic_lines(store):
    """The daemon's background mode in process: during an outage every line is deterministic at once; when
    the endpoint answers again the queued items are asked and a refresh pass puts the model's text in,
    without any new write."""
    v = LibraryView(store)
    v.mkdir(b"/notes", 0o755, os.getuid(), os.getgid())
    for k in range(3):
        mkfile(v, b"/notes/n%d.md" % k, b"# Note %d\n\nText %d.\n" % (k, k))
    down = {"on": True}
    with LLMServer(default=lambda req: Status(503) if down["on"] else IndexModel()(req)) as srv:
        b = make_builder(store.libdir, store, _overrides(srv.base_url, down_backoff_s=0.3))
        idx = Indexer(store.libdir, builder=b, store=store, settle_s=0)
        try:
            assert idx.ask_in_background()
            idx.run_once()
            assert b"Text 2." in _page(store, b"notes")  # deterministic, at once
            wait_until(lambda: b.is_paused(), 30, "the builder to pause on the outage")
            down["on"] = False
            wait_until(lambda: idx.refresh.ready(), 60, "the queued answers after the outage")

            def refreshed() -> bool:
                if idx.refresh.ready():
                    idx.run_once(refresh=True)
                return (
                    b"Model summary of n2.md" in _page(store, b"notes")
                    and b"Model description of notes" in _page(store, b"")  # asked from the model's lines
                    and not idx.refresh.entries
                    and not idx.refresh.dirs
                )

            wait_until(refreshed, 60, "the model's lines")
        finally:
            b.close()
    assert _status(store)["llm_refresh"]["refresh_passes"] >= 1


def _page(st: Store, path: bytes) -> bytes:
    with st.read() as t:
        ino = t.lookup(S.ROOT_INO, path) if path else S.ROOT_INO
        return t.toc_page(ino, 0) or b""
