"""LLMIndexBuilder over real HTTP with a real Store: jobs, batching, cache, fallbacks, filing, spend, status."""

from __future__ import annotations

import json

import pytest
from helpers.llm_server import Close, IndexModel, LLMServer, Reply, Status, refused_port

from libraryfs.fs.store import Store
from libraryfs.index.jobs import DeterministicBuilder, EntryDoc, SectionDoc, deterministic_summary
from libraryfs.llm import make_builder, report_line
from libraryfs.llm.builder import LLMIndexBuilder
from libraryfs.llm.cache import AnswerCache

# every fallback to the deterministic results is logged once per job (an unreachable or misbehaving endpoint
# is never silent); the tests here provoke them on purpose
pytestmark = pytest.mark.expect_log(r"deterministic results are used meanwhile")


@pytest.fixture
def store(tmp_path):
    st = Store.create(tmp_path / "lib")
    yield st
    st.close()


@pytest.fixture
def srv():
    with LLMServer(default=IndexModel()) as s:
        yield s


def builder(store: Store, url: str, **over) -> LLMIndexBuilder:
    b = make_builder(
        store.libdir,
        store,
        {
            "base_url": url,
            "model": "test-model",
            # no test here is about a timeout: a short one made a loaded machine's slow loopback answer a
            # transport retry, i.e. one request more than the test counts
            "timeout_s": 30,
            "max_backoff_s": 0.02,
            "transport_attempts": 2,
            **over,
        },
    )
    assert isinstance(b, LLMIndexBuilder)
    return b


def doc(i: int, text: str | None = None, name: str | None = None) -> EntryDoc:
    text = text if text is not None else f"# Topic {i}\n\nNotes about subject number {i}.\n"
    import hashlib

    return EntryDoc(
        path=f"notes/{name or f'n{i}.md'}",
        name=name or f"n{i}.md",
        content_hash=hashlib.sha256(text.encode()).hexdigest(),
        text=text,
        size_bytes=len(text),
    )


def test_no_endpoint_gives_deterministic_builder(store, monkeypatch):
    for v in ("LIBRARYFS_LLM_BASE_URL", "LIBRARYFS_LLM_MODEL"):
        monkeypatch.delenv(v, raising=False)
    b = make_builder(store.libdir, store)
    assert isinstance(b, DeterministicBuilder)
    assert "no LLM configured" in report_line(b.status())


def test_summaries_are_batched_and_are_the_models(store, srv):
    b = builder(store, srv.base_url, batch_size=8)
    docs = [doc(i) for i in range(20)]
    out = b.summarize(docs)
    assert out == [f"Model summary of n{i}.md" for i in range(20)]
    reqs = srv.chat_requests("summarize")
    assert sorted(len(r.payload["entries"]) for r in reqs) == [4, 8, 8]  # any arrival order
    st = b.status()
    assert st["requests"] == 3 and st["fallbacks"] == 0 and st["tokens"] > 0
    assert b.last_fallbacks == []


def test_second_run_makes_zero_requests_even_after_restart(store, srv, tmp_path):
    docs = [doc(i) for i in range(10)]
    b = builder(store, srv.base_url)
    first = b.summarize(docs)
    d1 = b.describe([SectionDoc("notes", [(d.name, s) for d, s in zip(docs, first, strict=False)])])
    b.close()
    n = len(srv.requests)
    libdir = store.libdir
    store.close()
    st2 = Store(libdir)  # a new process would open the library the same way
    try:
        b2 = builder(st2, srv.base_url)
        assert b2.summarize(docs) == first
        assert (
            b2.describe([SectionDoc("notes", [(d.name, s) for d, s in zip(docs, first, strict=False)])]) == d1
        )
        assert len(srv.requests) == n  # zero requests
        s = b2.status()
        assert s["cache_hits"] == 11 and s["requests"] == 0
        assert "11 cache hits" in report_line(s)
    finally:
        st2.close()


def test_cache_invalidated_by_content_model_and_only_that_entry(store, srv):
    docs = [doc(i) for i in range(5)]
    builder(store, srv.base_url).summarize(docs)
    n = len(srv.requests)
    docs[2] = doc(2, "# Changed\n\nCompletely new text.\n")
    b = builder(store, srv.base_url)
    b.summarize(docs)
    (req,) = srv.requests[n:]
    assert [e["name"] for e in req.payload["entries"]] == ["n2.md"]  # only the edited entry
    builder(store, srv.base_url, model="other-model").summarize(docs[:1])
    assert len(srv.requests) == n + 2  # another model is another cache key


def test_identical_content_asked_once(store, srv):
    same = "# Same\n\nIdentical body.\n"
    out = builder(store, srv.base_url).summarize([doc(1, same, "a.md"), doc(2, same, "b.md")])
    (req,) = srv.requests
    assert len(req.payload["entries"]) == 1 and out[0] == out[1]


def test_binary_and_empty_entries_are_not_sent(store, srv):
    b = builder(store, srv.base_url)
    bin_doc = EntryDoc("x/blob", "blob", "h1", "", 1000, is_binary=True)
    empty = EntryDoc("x/e", "e", "h2", "", 0)
    assert b.summarize([bin_doc, empty]) == ["binary data, 1,000 bytes", "empty file"]
    assert srv.requests == []


def test_missing_ids_are_asked_again_then_answered(store, srv):
    docs = [doc(i) for i in range(3)]
    srv.script(Reply({"summaries": [{"id": 1, "summary": "first only"}]}))
    b = builder(store, srv.base_url)
    out = b.summarize(docs)
    assert out[0] == "first only" and out[1:] == ["Model summary of n1.md", "Model summary of n2.md"]
    second = srv.requests[1]
    assert [e["name"] for e in second.payload["entries"]] == ["n1.md", "n2.md"]
    assert b.status()["invalid_answers"] == 1


def test_model_ignoring_schema_falls_back_after_bounded_attempts(store, srv):
    srv.default = Reply("I think these files are about various topics!")
    b = builder(store, srv.base_url, max_attempts=3)
    docs = [doc(i) for i in range(2)]
    out = b.summarize(docs)
    assert out == [deterministic_summary(d) for d in docs]
    assert len(srv.requests) == 3
    st = b.status()
    assert st["fallbacks"] == 2 and st["jobs"]["summarize"]["invalid_answers"] == 3
    assert st["last_error"]["kind"] == "bad_answer"
    assert b.last_fallbacks == [0, 1]
    assert "2 fallbacks" in report_line(st) and "bad_answer" in report_line(st)
    # fallbacks are not cached: once the model behaves, the entries get its summaries
    srv.default = IndexModel()
    assert b.summarize(docs) == ["Model summary of n0.md", "Model summary of n1.md"]


def test_model_text_is_cleaned(store, srv):
    long = " ".join(f"w{i}" for i in range(40))
    srv.script(Reply({"summaries": [{"id": 1, "summary": "evil\x1b[31m red\n\nline " + long}]}))
    (s,) = builder(store, srv.base_url).summarize([doc(1)])
    assert "\x1b" not in s and "\n" not in s
    assert len(s.split()) <= 21  # 20 words + the ellipsis


def test_endpoint_down_falls_back_and_pauses_then_resumes(store, srv):
    srv.default = Status(503)
    b = builder(store, srv.base_url, down_backoff_s=60)
    docs = [doc(i) for i in range(3)]
    assert b.summarize(docs) == [deterministic_summary(d) for d in docs]
    n = len(srv.requests)
    assert n == 2  # transport_attempts
    st = b.status()
    assert st["pause_reason"] == "http_503" and st["paused_until"] is not None
    assert "paused (http_503)" in report_line(st)
    # while paused: no requests at all, answers at once from the fallback
    assert b.summarize([doc(9)]) == [deterministic_summary(doc(9))]
    assert len(srv.requests) == n
    # the pause ends (forced here instead of waiting a minute): the builder tries again and recovers
    srv.default = IndexModel()
    b._paused_until = 0.0
    assert b.summarize(docs) == [f"Model summary of n{i}.md" for i in range(3)]
    assert b.status()["pause_reason"] is None


def test_connection_refused_falls_back(store):
    with refused_port() as port:
        b = builder(store, f"http://127.0.0.1:{port}/v1")
        assert b.summarize([doc(1)]) == [deterministic_summary(doc(1))]
    assert b.status()["last_error"]["kind"] == "connection"


def test_connection_dropped_midway_other_batches_still_answer(store, srv):
    first_batch = lambda r: r.task == "summarize" and r.payload["entries"][0]["name"] == "n0.md"  # noqa: E731
    srv.on(first_batch, Close(), times=2)  # the first batch fails both tries; later batches are answered
    b = builder(store, srv.base_url, batch_size=2, max_concurrency=1, down_backoff_s=0)
    out = b.summarize([doc(i) for i in range(4)])
    assert out[:2] == [deterministic_summary(doc(i)) for i in range(2)]
    assert out[2:] == ["Model summary of n2.md", "Model summary of n3.md"]


def test_spending_limit_stops_calls_and_says_so(store, srv):
    b = builder(store, srv.base_url, max_requests_per_hour=2, batch_size=1, max_concurrency=1)
    docs = [doc(i) for i in range(4)]
    out = b.summarize(docs)
    assert out[:2] == ["Model summary of n0.md", "Model summary of n1.md"]
    assert out[2:] == [deterministic_summary(d) for d in docs[2:]]
    assert len(srv.requests) == 2
    st = b.status()
    assert st["pause_reason"] == "spend_limit" and st["errors"]["spend_limit"] >= 1
    assert st["spend"]["requests_last_hour"] == 2 and st["spend"]["refusals"] >= 1
    assert "2 requests per hour" in st["last_error"]["message"]
    # the window survives a restart: a new builder on the same library makes no request either
    b2 = builder(store, srv.base_url, max_requests_per_hour=2)
    b2.summarize([doc(7)])
    assert len(srv.requests) == 2


def test_describe_sections(store, srv):
    b = builder(store, srv.base_url)
    out = b.describe(
        [
            SectionDoc("notes", [("a.md", "about a")]),
            SectionDoc("empty", []),
            SectionDoc("", [("notes", "x")]),
        ]
    )
    assert out == ["Model description of notes", "empty section", "Model description of (library root)"]
    (req,) = srv.requests
    assert [s["path"] for s in req.payload["sections"]] == ["notes", "(library root)"]


def test_filing_into_existing_and_new_sections(store, srv):
    sections = [
        SectionDoc("cooking", [("bread.md", "bread recipe")], "recipes"),
        SectionDoc("travel", [("rome.md", "trip")], "trips"),
    ]
    srv.default = IndexModel(file_to={"tax.md": "Finance/Taxes 2024"})
    b = builder(store, srv.base_url)
    docs = [doc(1, "A cooking note about soup.", "soup.md"), doc(2, "Forms to file", "tax.md")]
    out = b.file(docs, sections)
    assert out == ["cooking", "finance/taxes-2024"]  # the new name is made a safe directory name
    assert b.status()["new_sections"] == 1
    (req,) = srv.requests
    assert [s["path"] for s in req.payload["sections"]] == ["cooking", "travel"]


@pytest.mark.parametrize("bad", ["../../etc", ".libraryfs", "inbox", "a/b/c/d", "INDEX.md", "", "..", "/"])
def test_unsafe_section_names_fall_back(store, srv, bad):
    srv.default = IndexModel(file_to={"x.md": bad})
    b = builder(store, srv.base_url, max_attempts=2)  # the request count below: the validation's retries
    sections = [SectionDoc("cooking", [("bread.md", "bread")], "recipes")]
    d = doc(1, "bread and cooking notes", "x.md")
    out = b.file([d], sections)
    assert out == DeterministicBuilder().file([d], sections)
    assert b.status()["jobs"]["file"]["fallbacks"] == 1 and len(srv.requests) == 2


def test_group_covers_every_entry_once(store, srv):
    sect = SectionDoc("big", [(f"e{i:03}.md", f"line {i}") for i in range(25)])
    b = builder(store, srv.base_url)
    groups = b.group(sect, 10)
    assert [g.title for g in groups] == ["Group 1", "Group 2", "Group 3"]
    assert [n for g in groups for n in g.names] == [n for n, _ in sect.entries]
    assert b.group(sect, 10) == groups and len(srv.requests) == 1  # cached


@pytest.mark.parametrize(
    "answer",
    [
        {"groups": [{"title": "A", "ids": list(range(1, 25))}]},  # one entry missing
        {"groups": [{"title": "A", "ids": list(range(1, 26))}, {"title": "B", "ids": [3]}]},  # repeated
        {"groups": [{"title": "A", "ids": list(range(1, 26)) + [99]}]},  # unknown id
        {"groups": [{"title": "", "ids": list(range(1, 26))}]},  # no title
        {"groups": [{"title": "A", "ids": list(range(1, 14))}, {"title": "A", "ids": list(range(14, 26))}]},
    ],
)
def test_invalid_grouping_falls_back_to_none(store, srv, answer):
    srv.default = Reply(answer)
    sect = SectionDoc("big", [(f"e{i:03}.md", f"line {i}") for i in range(25)])
    b = builder(store, srv.base_url, max_attempts=2)
    assert b.group(sect, 30) is None
    assert len(srv.requests) == 2 and b.status()["jobs"]["group"]["fallbacks"] == 1


def test_group_too_large_groups_over_limit_rejected(store, srv):
    srv.default = Reply({"groups": [{"title": "All", "ids": list(range(1, 26))}]})
    sect = SectionDoc("big", [(f"e{i:03}.md", "x") for i in range(25)])
    assert builder(store, srv.base_url, max_attempts=1).group(sect, 10) is None


def test_cache_lives_in_llmcache_db(store, srv):
    builder(store, srv.base_url).summarize([doc(1), doc(2)])
    assert AnswerCache(store, "test-model").count("summarize") == 2
    assert AnswerCache(store, "test-model").count("describe") == 0


def test_status_is_json_names_the_model_and_never_the_key(store, srv):
    b = builder(store, srv.base_url, api_key="sk-very-secret-key-123456")
    b.summarize([doc(1)])
    st = json.loads(json.dumps(b.status()))
    assert st["builder"] == "llm:test-model" and st["model"] == "test-model"
    assert st["structured_output"] == "json_schema"
    assert "sk-very-secret" not in json.dumps(st)
    assert srv.requests[0].headers["authorization"].endswith("sk-very-secret-key-123456")
