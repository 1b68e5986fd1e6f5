"""The one place the cards package talks to an LLM (the ``openai`` client over any OpenAI-compatible
endpoint). Kept tiny so it can be switched to the shared ``libraryfs.llm.client`` later.

Configuration: arguments, else environment ``LIBRARYFS_LLM_BASE_URL``, ``LIBRARYFS_LLM_MODEL``,
``LIBRARYFS_LLM_API_KEY`` (a placeholder key is used for keyless local servers).
"""

from __future__ import annotations

import dataclasses
import os

import openai


class LLMConfigError(ValueError):
    """No base URL or model configured."""


@dataclasses.dataclass
class Reply:
    """One chat completion: ``text`` and token usage as the server reported it (tokens)."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ChatLLM:
    """Chat completions over the ``openai`` client. One :meth:`chat` = one solver call."""

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        temperature: float = 0.7,
        max_tokens: int = 4096,
        timeout_s: float = 120.0,
    ) -> None:
        base_url = base_url or os.environ.get("LIBRARYFS_LLM_BASE_URL")
        self.model = model or os.environ.get("LIBRARYFS_LLM_MODEL")
        if not base_url or not self.model:
            raise LLMConfigError(
                "no LLM configured: give --base-url/--model or set LIBRARYFS_LLM_BASE_URL and LIBRARYFS_LLM_MODEL"
            )
        key = api_key or os.environ.get("LIBRARYFS_LLM_API_KEY") or "sk-none"
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._client = openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout_s, max_retries=2)

    def chat(self, messages: list[dict[str, str]], temperature: float | None = None) -> Reply:
        """One completion for ``messages`` (``[{"role": ..., "content": ...}]``).

        Raises ``openai.OpenAIError`` subclasses on transport/HTTP errors (after the client's retries).
        """
        r = self._client.chat.completions.create(
            model=self.model,
            messages=messages,  # type: ignore[arg-type]
            temperature=self.temperature if temperature is None else temperature,
            max_tokens=self.max_tokens,
        )
        text = (r.choices[0].message.content or "") if r.choices else ""
        u = r.usage
        return Reply(text, getattr(u, "prompt_tokens", 0) or 0, getattr(u, "completion_tokens", 0) or 0)


#: Errors a caller may treat as "this call failed" (the attempt then has no answer).
CallError = openai.OpenAIError
