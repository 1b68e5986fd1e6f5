"""The LLM client over real HTTP (the real openai client → a scripted server on 127.0.0.1): each fault.

No patching: every request crosses a socket to :class:`llm_server.LLMServer`.
"""

from __future__ import annotations

import pytest
from helpers.llm_server import Close, Delay, Hang, LLMServer, Raw, Reply, Status, Truncated, refused_port

from libraryfs.llm import prompts as P
from libraryfs.llm.client import BadAnswer, ChatClient, Unavailable, parse_json_object, retry_after_s
from libraryfs.llm.config import load_config
from libraryfs.llm.prompts import SUMMARIZE
from libraryfs.llm.spend import SpendLimiter, SpendLimitReached

GOOD = {"summaries": [{"id": 1, "summary": "ok"}]}


def client(url: str, **over) -> ChatClient:
    cfg = load_config(
        None,
        {
            "base_url": url,
            "model": "test-model",
            # long: a loaded machine's slow loopback answer must not become a transport retry (the tests count
            # requests); the timeout tests pass their own
            "timeout_s": 30,
            "max_backoff_s": 0.05,
            "transport_attempts": 3,
            **over,
        },
        env={},
    )
    return ChatClient(cfg, SpendLimiter(cfg.max_requests_per_hour, cfg.max_tokens_per_hour))


@pytest.fixture
def srv():
    with LLMServer(default=Reply(GOOD)) as s:
        yield s


def ask(c: ChatClient):
    return c.complete_json(SUMMARIZE, '{"task":"summarize","entries":[{"id":1,"text":"x"}]}', 100)


def test_happy_path_sends_schema_and_reads_usage(srv):
    srv.script(Reply(GOOD, usage={"prompt_tokens": 123, "completion_tokens": 7}))
    obj, usage = ask(client(srv.base_url))
    assert obj == GOOD
    assert (usage.prompt_tokens, usage.completion_tokens) == (123, 7)
    (req,) = srv.requests
    body = req.json
    assert body["model"] == "test-model"
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == SUMMARIZE.schema
    assert req.payload["task"] == "summarize"
    assert "schema" in body["messages"][0]["content"]  # the contract is in the prompt too


@pytest.mark.parametrize(
    "fault",
    [
        Status(500),
        Status(503),
        Status(502, headers={"Retry-After": "0"}),
        Raw(b"<html>Bad gateway</html>", content_type="text/html"),  # 200 that is not a completion
        Raw(b'{"id": "chatcmpl-1", "object": "chat.comp'),  # 200 with truncated JSON
        Raw(b"{}"),  # JSON without choices
        Truncated(),  # connection closed mid-body
        Close(),  # connection closed before any response
        Hang(),  # never answers: the client's timeout ends it
        Delay(8.0, Reply(GOOD)),  # answers, but after the timeout
    ],
    ids=[
        "500",
        "503",
        "502-retry-after",
        "html",
        "truncated-json",
        "no-choices",
        "truncated-body",
        "close",
        "hang",
        "slow",
    ],
)
def test_transport_fault_then_recovery(srv, fault):
    srv.script(fault)
    c = client(srv.base_url, timeout_s=2.0)  # ends "hang" and "slow"; the answer after it comes in time
    obj, _ = ask(c)
    assert obj == GOOD
    assert len(srv.chat_requests()) == 2
    assert c.counters["transport_retries"] == 1


def test_429_waits_retry_after(srv):
    srv.script(Status(429, "slow down", headers={"Retry-After": "1"}))
    c = client(srv.base_url, max_backoff_s=5)
    obj, _ = ask(c)
    assert obj == GOOD
    first, second = srv.chat_requests()
    assert second.time - first.time >= 0.9  # the Retry-After was honoured (a lower bound, not a speed test)


def test_persistent_5xx_becomes_unavailable_after_bounded_tries(srv):
    srv.default = Status(500)
    with pytest.raises(Unavailable) as ei:
        ask(client(srv.base_url, transport_attempts=4))
    assert ei.value.kind == "http_500"
    assert len(srv.chat_requests()) == 4


def test_connection_refused_is_unavailable():
    with refused_port() as port, pytest.raises(Unavailable) as ei:
        ask(client(f"http://127.0.0.1:{port}/v1", transport_attempts=2))
    assert ei.value.kind == "connection"


def test_auth_error_is_not_retried(srv):
    srv.script(Status(401, "bad key"))
    with pytest.raises(Unavailable) as ei:
        ask(client(srv.base_url))
    assert ei.value.kind == "http_401" and len(srv.requests) == 1


def test_api_key_is_sent_as_bearer(srv):
    ask(client(srv.base_url, api_key="sk-secret-123456"))
    assert srv.requests[0].headers["authorization"] == "Bearer sk-secret-123456"


def test_schema_rejected_degrades_to_json_object_then_prompt(srv):
    srv.script(
        Status(400, "response_format json_schema is not supported"),
        Status(400, "response_format json_object is not supported"),
    )
    c = client(srv.base_url)
    obj, _ = ask(c)
    assert obj == GOOD
    assert [r.response_format for r in srv.requests] == ["json_schema", "json_object", None]
    assert c.mode == "prompt"
    ask(c)  # remembered: the next request goes straight to the mode that works
    assert srv.requests[-1].response_format is None


def test_max_tokens_rejected_switches_parameter(srv):
    srv.script(Status(400, "Unsupported parameter: 'max_tokens'. Use 'max_completion_tokens' instead."))
    c = client(srv.base_url)
    ask(c)
    assert "max_tokens" in srv.requests[0].json and "max_completion_tokens" in srv.requests[1].json
    assert srv.requests[1].response_format == "json_schema"  # structured output kept


def test_prose_answer_is_bad_answer(srv):
    srv.script(Reply("Sure! Here are your summaries: the file is about things."))
    with pytest.raises(BadAnswer):
        ask(client(srv.base_url))


def test_answer_cut_by_length_keeps_the_complete_items_and_refuses_the_cut_one(srv):
    """A reply cut at the token limit is repaired: the items it completed are kept, the cut one is refused."""
    cut = '{"summaries": [{"id": 1, "summary": "A whole line."}, {"id": 2, "summary": "an unfini'
    srv.script(Reply(cut, finish_reason="length"))
    answer, _usage = ask(client(srv.base_url))
    assert P.valid_summaries(answer, {1, 2}) == {1: "A whole line."}


def test_answer_cut_before_a_required_key_is_a_truncated_bad_answer_with_its_usage(srv):
    """Cut inside the key the schema requires: nothing is left to judge, and the error says it was the token
    limit (not a "missing key" further on); what the request spent travels with it (a budget charges it)."""
    srv.script(Reply('Here: {"summ', finish_reason="length"))
    with pytest.raises(BadAnswer) as e:
        ask(client(srv.base_url))
    assert e.value.kind == "truncated" and "token limit" in str(e.value) and "'summaries'" in str(e.value)
    assert e.value.usage is not None and e.value.usage.completion_tokens > 0


@pytest.mark.parametrize(
    "cut, repaired",
    [
        ('{"a": [1, 2', {"a": [1, 2]}),
        ('{"a": 1,', {"a": 1}),
        ('{"a": {"b": "x", "c', {"a": {"b": "x"}}),
        ('{"a": [{"id": 1, "s": "ok"}, {"id": 2, "s": "one tw', {"a": [{"id": 1, "s": "ok"}, {"id": 2}]}),
        ('{"a": "say \\"hi', {}),
    ],
)
def test_truncated_json_is_repaired_by_closing_and_dropping_the_cut_value(cut, repaired):
    assert parse_json_object(cut) == repaired


def test_fenced_and_wrapped_json_is_accepted():
    assert parse_json_object('```json\n{"a": 1}\n```') == {"a": 1}
    assert parse_json_object('Here you go: {"a": [1, 2]} hope it helps') == {"a": [1, 2]}
    with pytest.raises(BadAnswer):
        parse_json_object("[1, 2, 3]")


def test_retry_after_forms():
    assert retry_after_s({"retry-after": "3"}) == 3.0
    assert retry_after_s({"retry-after-ms": "250"}) == 0.25
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # in the past
    assert retry_after_s({}) is None


def test_spending_limit_stops_before_sending(srv):
    c = client(srv.base_url, max_requests_per_hour=2)
    ask(c)
    ask(c)
    with pytest.raises(SpendLimitReached) as ei:
        ask(c)
    assert "2 requests per hour" in str(ei.value)
    assert len(srv.requests) == 2  # the third was never sent


def test_token_limit_counts_reported_tokens(srv):
    srv.default = Reply(GOOD, usage={"prompt_tokens": 900, "completion_tokens": 100})
    c = client(srv.base_url, max_tokens_per_hour=2200)
    ask(c)
    ask(c)  # 2,000 reported; the next estimate (~250 prompt + 100 output) would pass 2,200
    with pytest.raises(SpendLimitReached):
        ask(c)
    assert len(srv.requests) == 2


def test_limiter_window_slides():
    now = [1000.0]
    lim = SpendLimiter(max_requests=1, max_tokens=0, window_s=3600, clock=lambda: now[0])
    lim.reserve(10)
    lim.settle(10, 10)
    with pytest.raises(SpendLimitReached) as ei:
        lim.reserve(10)
    assert ei.value.resumes_at == pytest.approx(4600.0)
    now[0] = 4601.0
    lim.reserve(10)  # the first request left the window
