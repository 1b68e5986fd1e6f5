"""Chat completions returning JSON over any OpenAI-compatible endpoint. The only module importing ``openai``.

:meth:`ChatClient.complete_json` sends one job request and returns the parsed JSON answer with its token
usage. It owns everything about the wire:

- **Structured output, degrading:** ``response_format`` ``json_schema`` (strict) first; when the server
  rejects it (HTTP 400/422) the client falls back to ``json_object`` and then to a plain prompt (the schema is
  always in the system prompt) and remembers the mode that worked. ``structured_output =
  "json_object_schema"`` (never chosen by ``auto``) sends ``{"type": "json_object", "schema": …}``, which
  llama-cpp-python's server turns into a grammar (it answers ``json_schema`` with HTTP 500). ``max_tokens`` is swapped for
  ``max_completion_tokens`` and ``temperature`` dropped when a server rejects them.
- **Transport faults, bounded:** 429 (waits ``Retry-After``/``retry-after-ms``, capped), 5xx, timeouts
  (a hung endpoint costs ``timeout_s`` per try), connection refused/reset, truncated or non-JSON bodies are
  retried up to ``transport_attempts`` times with capped exponential backoff, then :class:`Unavailable`.
  The ``openai`` client's own retries are off (``max_retries=0``) so every try is counted here.
- **Answers that are not JSON** (prose, fences, truncated by the length limit) raise :class:`BadAnswer`;
  the caller decides whether to ask again (bounded) — see :mod:`libraryfs.llm.builder`.
- **Spending:** every request is admitted by the :class:`~libraryfs.llm.spend.SpendLimiter` first; when
  the limit is reached nothing is sent and :class:`~libraryfs.llm.spend.SpendLimitReached` propagates.
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
from libraryfs.llm.prompts import Job
from libraryfs.llm.spend import SpendLimiter, SpendLimitReached

__all__ = ["ChatClient", "LLMError", "Unavailable", "BadAnswer", "SpendLimitReached", "Usage"]

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
    """The server answered but the content is not a JSON object (prose, truncated, empty)."""

    kind = "bad_answer"


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


def parse_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a model's reply: bare, in a ``` fence, or the outermost ``{…}`` in prose.

    Raises :class:`BadAnswer` when there is none.
    """
    s = text.strip()
    m = _FENCE.match(s)
    if m:
        s = m.group(1)
    for candidate in (s, s[s.find("{") : s.rfind("}") + 1] if "{" in s else ""):
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


class ChatClient:
    """JSON chat completions for the index jobs. Thread-safe; counters are read by the builder's status.

    ``config`` supplies base URL, model, key, ``timeout_s``, ``transport_attempts``, ``max_backoff_s``,
    ``structured_output`` and ``temperature``; ``limiter`` enforces the hourly spend.
    """

    def __init__(self, config: LLMConfig, limiter: SpendLimiter) -> None:
        self.config = config
        self.limiter = limiter
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
        self.counters = {
            "requests": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "http_errors": 0,
            "transport_retries": 0,
            "downgrades": 0,
        }

    def _count(self, **inc: int) -> None:
        with self._lock:
            for k, v in inc.items():
                self.counters[k] += v

    def _kwargs(
        self, job: Job, messages: list[dict[str, str]], max_output_tokens: int, mode: str
    ) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            self._tokens_param: max_output_tokens,
        }
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

    def complete_json(self, job: Job, user: str, max_output_tokens: int) -> tuple[dict[str, Any], Usage]:
        """Send ``job``'s system prompt and the ``user`` message; return the answer object and its usage.

        ``max_output_tokens`` bounds the completion (tokens). Raises :class:`Unavailable` after the
        bounded transport retries, :class:`BadAnswer` when the reply is not a JSON object, and
        :class:`SpendLimitReached` (nothing sent) when the hourly limit would be exceeded.
        """
        messages = [{"role": "system", "content": job.system_prompt()}, {"role": "user", "content": user}]
        est_prompt = count_tokens(messages[0]["content"]) + count_tokens(user) + 8 * len(messages)
        mode = self.mode
        failures = 0
        adjustments = 0
        last: Exception | None = None
        while True:
            est = est_prompt + max_output_tokens
            self.limiter.reserve(est)  # raises SpendLimitReached: nothing is sent
            spent = 0
            try:
                self._count(requests=1)
                resp = self._client.chat.completions.create(
                    **self._kwargs(job, messages, max_output_tokens, mode)
                )
                obj, usage = self._read(resp, est_prompt)
                spent = usage.total_tokens
                self._count(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens)
                return obj, usage
            except BadAnswer as e:
                spent = getattr(e, "tokens", 0)
                raise
            except (openai.BadRequestError, openai.UnprocessableEntityError) as e:
                self._count(http_errors=1)
                adjustments += 1
                nxt = self._adjust_for_rejection(str(e), mode) if adjustments <= 4 else None
                if nxt is None:
                    raise Unavailable(f"HTTP {e.status_code}: {_short(e)}", f"http_{e.status_code}") from e
                mode = nxt
                continue
            except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as e:
                self._count(http_errors=1)
                raise Unavailable(f"HTTP {e.status_code}: {_short(e)}", f"http_{e.status_code}") from e
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
            except (ValueError, TypeError, AttributeError, openai.APIResponseValidationError) as e:
                last, kind, hint = e, "garbage_body", None  # 200 with a body that is not a completion
            finally:
                self.limiter.settle(est, spent)
            failures += 1
            if failures >= self.config.transport_attempts:
                raise Unavailable(f"{kind} after {failures} tries: {_short(last)}", kind, hint) from last
            self._count(transport_retries=1)
            wait = hint if hint is not None else 0.25 * 2 ** (failures - 1) * (1 + random.random())
            time.sleep(min(wait, self.config.max_backoff_s))

    def _read(self, resp: Any, est_prompt: int) -> tuple[dict[str, Any], Usage]:
        """Parse a completion object; raises ``AttributeError``/``TypeError`` on a non-completion body."""
        if isinstance(resp, str | bytes):
            raise TypeError(f"body is not a completion: {resp[:60]!r}")
        choice = resp.choices[0]
        content = choice.message.content or ""
        u = getattr(resp, "usage", None)
        if u is not None and (u.prompt_tokens or u.completion_tokens):
            usage = Usage(int(u.prompt_tokens or 0), int(u.completion_tokens or 0))
        else:
            usage = Usage(est_prompt, count_tokens(content))
        try:
            return parse_json_object(content), usage
        except BadAnswer as bad:
            err = bad
            if choice.finish_reason == "length":
                err = BadAnswer(f"answer truncated at the token limit: {content[:60]!r}", "truncated")
            err.tokens = usage.total_tokens  # type: ignore[attr-defined]
            self._count(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens)
            raise err from None


def _short(e: BaseException | None, n: int = 160) -> str:
    s = " ".join(str(e).split()) if e is not None else ""
    return s[:n] or type(e).__name__
