"""The one chat client over any OpenAI-compatible endpoint: the only module that builds an ``openai.OpenAI``.

Everything that talks to a model receives a :class:`ChatClient` (the indexer's LLM builder, episode
extraction, the card solver and curator, the benchmark's agent) instead of building its own. It owns the
wire, with one retry policy for all of them:

- **Transport faults, bounded:** 429 (waits ``Retry-After``/``retry-after-ms``, capped), 5xx, timeouts
  (a hung endpoint costs ``timeout_s`` per try), connection refused/reset, truncated or non-completion bodies
  are retried up to ``transport_attempts`` times (setting ``llm.transport_attempts``, default 3) with capped
  exponential backoff (``max_backoff_s``), then :class:`Unavailable`. The ``openai`` client's own retries are
  off (``max_retries=0``) so every try is counted here. 401/403/404 are not retried.
- **Spending:** with a :class:`~libraryfs.llm.spend.SpendLimiter` (the index builder's hourly limit) every
  request is admitted first; when the limit is reached nothing is sent and
  :class:`~libraryfs.llm.spend.SpendLimitReached` propagates.

Three ways to ask: :meth:`ChatClient.create` (a raw completion: tools, any parameter), :meth:`ChatClient.chat`
(the text of one reply) and :meth:`ChatClient.complete_json` (one index job answered as JSON):

- **Structured output, degrading:** ``response_format`` ``json_schema`` (strict) first; when the server
  rejects it (HTTP 400/422) the client falls back to ``json_object`` and then to a plain prompt (the schema is
  always in the system prompt) and remembers the mode that worked. ``structured_output =
  "json_object_schema"`` (never chosen by ``auto``) sends ``{"type": "json_object", "schema": …}``, which
  llama-cpp-python's server turns into a grammar (it answers ``json_schema`` with HTTP 500). ``max_tokens`` is swapped for
  ``max_completion_tokens`` and ``temperature`` dropped when a server rejects them.
- **Answers that are not JSON** (prose, fences, truncated by the length limit) raise :class:`BadAnswer`;
  the caller decides whether to ask again (bounded) — see :mod:`libraryfs.llm.builder`.
"""

from __future__ import annotations

import email.utils
import json
import random
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

import openai

from libraryfs.index.tokens import count_tokens
from libraryfs.llm.config import LLMConfig
from libraryfs.llm.health import EndpointHealth
from libraryfs.llm.prompts import Job
from libraryfs.llm.spend import SpendLimiter, SpendLimitReached

__all__ = [
    "ChatClient",
    "LLMError",
    "Unavailable",
    "Rejected",
    "BadAnswer",
    "SpendLimitReached",
    "Usage",
    "Reply",
]

_MODES = ("json_schema", "json_object", "prompt")


class LLMError(Exception):
    """A request did not produce a usable answer. ``kind`` is a short machine-readable reason."""

    kind = "error"

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        if kind:
            self.kind = kind


class Unavailable(LLMError):
    """The endpoint failed (HTTP error, timeout, connection, garbage body) after the bounded retries.

    ``retry_after_s`` is the server's Retry-After hint when it gave one (seconds), else ``None``.
    """

    kind = "unavailable"

    def __init__(self, message: str, kind: str | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message, kind)
        self.retry_after_s = retry_after_s


class BadAnswer(LLMError):
    """The server answered but the content is not a JSON object (prose, truncated, empty), or was cut at the
    token limit before a key the job's schema requires. ``usage`` (:class:`Usage`, when set): what the
    request spent all the same (a budget charges it)."""

    kind = "bad_answer"
    usage: Usage | None = None


@dataclass
class Usage:
    """Tokens of one request as the server reported them (estimated with o200k_base when it did not)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt + completion tokens."""
        return self.prompt_tokens + self.completion_tokens


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


def repair_truncated(s: str) -> str:
    """Close what a reply cut at the token limit left open, dropping the cut value: the open string (and
    its key), a dangling ``,``/``:``, then the open arrays and objects in reverse order. The items completed
    before the cut survive; the cut one loses its field and fails validation (refused, not guessed):
    ``'{"a":[{"id":1,"s":"ok"},{"id":2,"s":"one tw'`` → ``'{"a":[{"id":1,"s":"ok"},{"id":2}]}'``.
    Returns ``s`` unchanged when nothing is open."""
    stack: list[str] = []
    in_str = esc = False
    start = 0
    for i, c in enumerate(s):
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str, start = True, i
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
        elif c in "}]" and stack:
            stack.pop()
    if not stack:
        return s
    out = (s[:start] if in_str else s).rstrip()
    while True:
        if out.endswith((",", ":")):
            out = out[:-1].rstrip()
        elif (
            out.endswith('"')
            and stack[-1] == "}"
            and out[: out.rfind('"', 0, len(out) - 1)].rstrip().endswith((",", "{"))
        ):  # a key without its value
            out = out[: out.rfind('"', 0, len(out) - 1)].rstrip()
        else:
            break
    return out + "".join(reversed(stack))


def parse_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a model's reply: bare, in a ``` fence, the outermost ``{…}`` in prose, or — cut at
    the token limit — repaired by :func:`repair_truncated` (the validators then judge every item).

    Raises :class:`BadAnswer` when there is none.
    """
    s = text.strip()
    m = _FENCE.match(s)
    if m:
        s = m.group(1)
    head = s[s.find("{") :] if "{" in s else ""
    for candidate in (
        s,
        s[s.find("{") : s.rfind("}") + 1] if "{" in s else "",
        repair_truncated(head) if head else "",
    ):
        if not candidate:
            continue
        try:
            obj = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    raise BadAnswer(f"answer is not a JSON object: {text[:80]!r}")


def retry_after_s(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date); ``None`` if absent."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if not ra:
        return None
    try:
        return max(0.0, float(ra))
    except ValueError:
        pass
    try:
        dt = email.utils.parsedate_to_datetime(ra)
        return max(0.0, dt.timestamp() - time.time())
    except (TypeError, ValueError):
        return None


@dataclass
class Reply:
    """The text of one chat completion and its token usage as the server reported it (tokens)."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Rejected(Unavailable):
    """The server refused the request itself (HTTP 400/422): not retried by the transport policy; callers
    that can adapt the request (:meth:`ChatClient.complete_json`) catch it. ``status`` is the HTTP status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message, f"http_{status}")
        self.status = status


class ChatClient:
    """Chat completions over one endpoint with the retry policy above. Thread-safe; ``counters`` are read
    by the LLM builder's status.

    ``config`` supplies base URL, model, key, ``timeout_s``, ``transport_attempts``, ``max_backoff_s``,
    ``structured_output`` and ``temperature``; ``limiter`` enforces an hourly spend (the index builder passes
    one built from ``max_requests_per_hour``/``max_tokens_per_hour`` and persisted in the library; default:
    no limit). A ``base_url`` of None means the ``openai`` package's own default (``OPENAI_BASE_URL``, else
    OpenAI).
    """

    def __init__(self, config: LLMConfig, limiter: SpendLimiter | None = None) -> None:
        self.config = config
        self.limiter = limiter or SpendLimiter(0, 0)
        self._client = openai.OpenAI(
            base_url=config.base_url,
            api_key=config.api_key or "sk-no-key",
            timeout=config.timeout_s,
            max_retries=0,
        )
        self.mode = "json_schema" if config.structured_output == "auto" else config.structured_output
        self._tokens_param = "max_tokens"
        self._send_temperature = True
        self._lock = threading.Lock()
        self.health = EndpointHealth()  #: latencies of the HTTP tries (the builder records the outcomes)
        self.counters = {
            "requests": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "http_errors": 0,
            "transport_retries": 0,
            "downgrades": 0,
        }

    @property
    def model(self) -> str | None:
        """The model requests go to by default (``llm.model``)."""
        return self.config.model

    def _count(self, **inc: int) -> None:
        with self._lock:
            for k, v in inc.items():
                self.counters[k] += v

    # -- one request, the retry policy ------------------------------------------------------------------
    def create(self, messages: list[dict[str, Any]], est_tokens: int = 0, **params: Any) -> tuple[Any, Usage]:
        """One chat completion for ``messages`` with ``params`` (``model`` defaults to the config's; tools,
        ``max_tokens``, ``temperature``, ``response_format``, … as the ``openai`` client takes them).

        ``est_tokens`` is what the spend limiter reserves per try (prompt + completion, tokens). Returns the
        completion object and its :class:`Usage` (estimated with o200k_base when the server gives none).
        Raises :class:`Rejected` on HTTP 400/422 (at once), :class:`Unavailable` on 401/403/404 (at once)
        and after ``transport_attempts`` tries of a transport fault, :class:`SpendLimitReached` (nothing
        sent) when the hourly limit would be exceeded.
        """
        params.setdefault("model", self.config.model)
        failures = 0
        last: Exception
        while True:
            self.limiter.reserve(est_tokens)
            spent = 0
            t0 = time.monotonic()
            try:
                self._count(requests=1)
                try:
                    resp = self._client.chat.completions.create(messages=messages, **params)  # type: ignore[arg-type]
                finally:
                    self.health.record_latency(time.monotonic() - t0)
                usage = _usage(resp, messages)
                spent = usage.total_tokens
                self._count(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens)
                return resp, usage
            except (openai.BadRequestError, openai.UnprocessableEntityError) as e:
                self._count(http_errors=1)
                raise Rejected(f"HTTP {e.status_code}: {_short(e)}", e.status_code) from e
            except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as e:
                self._count(http_errors=1)
                raise Unavailable(
                    f"HTTP {e.status_code} {_where(e)}: {_short(e)}", f"http_{e.status_code}"
                ) from e
            except openai.RateLimitError as e:
                self._count(http_errors=1)
                last, kind, hint = e, "http_429", retry_after_s(e.response.headers)
            except openai.APIStatusError as e:  # 5xx and other statuses
                self._count(http_errors=1)
                last, kind, hint = e, f"http_{e.status_code}", retry_after_s(e.response.headers)
            except openai.APITimeoutError as e:
                last, kind, hint = e, "timeout", None
            except openai.APIConnectionError as e:
                last, kind, hint = e, "connection", None
            except (
                ValueError,
                TypeError,
                AttributeError,
                IndexError,
                openai.APIResponseValidationError,
            ) as e:
                last, kind, hint = e, "garbage_body", None  # 200 with a body that is not a completion
            finally:
                self.limiter.settle(est_tokens, spent)
            failures += 1
            if failures >= self.config.transport_attempts:
                raise Unavailable(f"{kind} after {failures} tries: {_short(last)}", kind, hint) from last
            self._count(transport_retries=1)
            wait = hint if hint is not None else 0.25 * 2 ** (failures - 1) * (1 + random.random())
            time.sleep(min(wait, self.config.max_backoff_s))

    def chat(
        self, messages: list[dict[str, Any]], temperature: float | None = None, max_tokens: int = 4096
    ) -> Reply:
        """The text of one completion of ``messages`` (``temperature`` default: the config's; ``max_tokens``
        bounds the reply). Raises :class:`LLMError` subclasses as :meth:`create` does."""
        est = sum(count_tokens(str(m.get("content") or "")) + 8 for m in messages) + max_tokens
        temp = self.config.temperature if temperature is None else temperature
        resp, usage = self.create(messages, est, temperature=temp, max_tokens=max_tokens)
        text = (resp.choices[0].message.content or "") if resp.choices else ""
        return Reply(text, usage.prompt_tokens, usage.completion_tokens)

    # -- JSON jobs ----------------------------------------------------------------------------------------
    def _kwargs(self, job: Job, max_output_tokens: int, mode: str) -> dict[str, Any]:
        kw: dict[str, Any] = {self._tokens_param: max_output_tokens}
        if self._send_temperature:
            kw["temperature"] = self.config.temperature
        if mode == "json_schema":
            kw["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": job.name, "schema": job.schema, "strict": True},
            }
        elif mode == "json_object":
            kw["response_format"] = {"type": "json_object"}
        elif mode == "json_object_schema":  # llama-cpp-python's server: a grammar built from the schema
            kw["response_format"] = {"type": "json_object", "schema": job.schema}
        return kw

    def _adjust_for_rejection(self, message: str, mode: str) -> str | None:
        """After a 400/422: the mode to try next (after fixing a rejected parameter), or ``None``."""
        low = message.lower()
        if self._tokens_param == "max_tokens" and "max_tokens" in low and "max_completion_tokens" in low:
            self._tokens_param = "max_completion_tokens"
            return mode
        if self._send_temperature and "temperature" in low:
            self._send_temperature = False
            return mode
        if self.config.structured_output == "auto" and mode != "prompt":
            nxt = _MODES[_MODES.index(mode) + 1]
            with self._lock:
                if _MODES.index(self.mode) < _MODES.index(nxt):
                    self.mode = nxt
            self._count(downgrades=1)
            return nxt
        return None

    def complete_json(
        self, job: Job, user: str, max_output_tokens: int, mode: str | None = None
    ) -> tuple[dict[str, Any], Usage]:
        """Send ``job``'s system prompt and the ``user`` message; return the answer object and its usage.

        ``max_output_tokens`` bounds the completion (tokens). ``mode`` forces a structured-output mode for
        this job (``"json_object"`` for a schema strict mode cannot express); default: the client's.
        Raises :class:`Unavailable` after the bounded transport retries or when no request form is
        accepted, :class:`BadAnswer` when the reply is not a JSON object, and :class:`SpendLimitReached`
        (nothing sent) when the hourly limit would be exceeded.
        """
        messages = [{"role": "system", "content": job.system_prompt()}, {"role": "user", "content": user}]
        est = (
            count_tokens(messages[0]["content"]) + count_tokens(user) + 8 * len(messages) + max_output_tokens
        )
        mode = mode or self.mode
        for _adjustment in range(5):
            try:
                resp, usage = self.create(messages, est, **self._kwargs(job, max_output_tokens, mode))
            except Rejected as e:
                nxt = self._adjust_for_rejection(str(e), mode)
                if nxt is None:
                    raise
                mode = nxt
                continue
            answer = _json_answer(resp, usage)
            if resp.choices[0].finish_reason == "length":  # repaired: did the cut lose a required key?
                lost = [k for k in job.schema.get("required", ()) if k not in answer]
                if lost:
                    err = BadAnswer(
                        f"answer cut at the token limit ({max_output_tokens} tokens) before its required "
                        f"{', '.join(map(repr, lost))}",
                        "truncated",
                    )
                    err.tokens, err.usage = usage.total_tokens, usage  # type: ignore[attr-defined]
                    raise err
            return answer, usage
        raise Unavailable("the endpoint rejected every form of the request", "rejected")


def _usage(resp: Any, messages: list[dict[str, Any]]) -> Usage:
    """Token usage of a completion: the server's, else estimated (o200k_base). Raises ``TypeError`` /
    ``AttributeError`` / ``IndexError`` when ``resp`` is not a completion (a garbage body)."""
    if isinstance(resp, str | bytes):
        raise TypeError(f"body is not a completion: {resp[:60]!r}")
    content = resp.choices[0].message.content or ""
    u = getattr(resp, "usage", None)
    if u is not None and (u.prompt_tokens or u.completion_tokens):
        return Usage(int(u.prompt_tokens or 0), int(u.completion_tokens or 0))
    prompt = sum(count_tokens(str(m.get("content") or "")) + 8 for m in messages)
    return Usage(prompt, count_tokens(content))


def _json_answer(resp: Any, usage: Usage) -> dict[str, Any]:
    """The JSON object of a completion; raises :class:`BadAnswer` (``truncated`` at the length limit)."""
    choice = resp.choices[0]
    content = choice.message.content or ""
    try:
        return parse_json_object(content)
    except BadAnswer as bad:
        err = bad
        if choice.finish_reason == "length":
            err = BadAnswer(f"answer truncated at the token limit: {content[:60]!r}", "truncated")
        err.tokens, err.usage = usage.total_tokens, usage  # type: ignore[attr-defined]
        raise err from None


def _where(e: openai.APIStatusError) -> str:
    """``from POST <url> (server: <Server header>)``: which endpoint answered (a wrong ``llm.base_url`` gives
    404s, and the URL says so; the ``Server`` header tells a proxy or another program from the model
    server)."""
    req, server = e.response.request, e.response.headers.get("server")
    return f"from {req.method} {req.url}" + (f" (server: {server})" if server else "")


def _short(e: BaseException | None, n: int = 160) -> str:
    s = " ".join(str(e).split()) if e is not None else ""
    return s[:n] or type(e).__name__
