"""Read and token accounting for the Library Theorem benchmark, and its per-trial JSONL records.

Reads are counted as the paper counts them (Mainen 2026, ``experiment.py``): every ``read_page`` call is a
page read, every ``get_index`` an index read, every ``get_section_index`` a section-index read. For
libraryfs's own conditions a TOC page read (INDEX.md or a ``.index/`` page) is an index read and an entry
read a page read.

Tokens (o200k_base) follow the paper's protocol, where the whole history is re-sent on each call: turn i
sends the system prompt, the user message, the tool schemas and every earlier tool call and result, and
receives one tool call. ``total_tokens = Σ_i (prompt_i + completion_i)`` — the API's ``usage.total_tokens``
summed over calls, which is what makes FLAT quadratic. Chat framing adds :data:`TOKENS_PER_MESSAGE` per
message and :data:`REPLY_PRIMING` per reply (OpenAI's published counting recipe), plus tool-call framing
calibrated on the paper's logs (:data:`CALL_FRAMING_TOKENS`, :data:`TOOL_RESULT_ID_TOKENS`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

TOKENS_PER_MESSAGE = 3
REPLY_PRIMING = 3
#: Tool-call framing beyond the call's own text (ids, wrapper), per call, and the tool result's
#: ``tool_call_id``: calibrated by least squares on the paper's 236 correct FLAT trials (gpt-4o-mini),
#: whose tokens fit 181.8·turns + 99.9·turns(turns−1)/2; without them the model gives 176.8 and 91.9.
CALL_FRAMING_TOKENS = 5
TOOL_RESULT_ID_TOKENS = 3


@functools.lru_cache(maxsize=1)
def _encoder():  # type: ignore[no-untyped-def]
    import bpe_openai

    return bpe_openai.get_encoding("o200k_base")


@functools.lru_cache(maxsize=4096)
def _count_cached(text: str) -> int:
    return _count_uncached(text)


def count_tokens(text: str | bytes) -> int:
    """Tokens of ``text`` in o200k_base, memoised per text (a 10⁵-line TOC read by 20 trials is counted
    once)."""
    if isinstance(text, str):
        return _count_cached(text)
    return _count_uncached(text)


def _count_uncached(text: str | bytes) -> int:
    """Tokens of ``text`` in o200k_base. Uses ``libraryfs.index.tokens.count_tokens`` when the project helper
    exists, else ``bpe_openai`` directly (tiktoken cannot download its tables here)."""
    try:
        from libraryfs.index.tokens import count_tokens as project_count
    except ImportError:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return len(_encoder().encode(text))
    return int(project_count(text))


@dataclass
class Call:
    """One tool call of an agent and what it read. ``kind`` is page, index, section, toc, entry, submit
    or note (a write); ``result`` is the exact text returned to the model."""

    tool: str
    args: dict
    result: str
    kind: str
    path: str = ""

    def call_text(self) -> str:
        """The tool call as the model emits it: ``name({"arg": …})``."""
        return f"{self.tool}({json.dumps(self.args)})"


@dataclass
class Trace:
    """An agent's run on one trial: its tool calls in order and the answer it submitted (None: none)."""

    calls: list[Call] = field(default_factory=list)
    answer: str | None = None
    error: str = ""

    def count(self, *kinds: str) -> int:
        """Number of calls of the given kinds."""
        return sum(1 for c in self.calls if c.kind in kinds)


def tool_schema_tokens(tools: Sequence[dict]) -> int:
    """Prompt tokens that tool definitions add, rendered the way OpenAI presents functions to the model
    (a ``namespace functions`` block of typed signatures with their descriptions). 0 for no tools."""
    if not tools:
        return 0
    lines = ["# Tools", "", "## functions", "", "namespace functions {", ""]
    for tool in tools:
        fn = tool["function"]
        lines.append(f"// {fn.get('description', '')}")
        props = fn.get("parameters", {}).get("properties", {})
        if props:
            lines.append(f"type {fn['name']} = (_: {{")
            for name, spec in props.items():
                if spec.get("description"):
                    lines.append(f"// {spec['description']}")
                kind = {"integer": "number"}.get(spec.get("type", "string"), spec.get("type", "string"))
                lines.append(f"{name}: {kind},")
            lines.append("}) => any;")
        else:
            lines.append(f"type {fn['name']} = () => any;")
        lines.append("")
    lines.append("} // namespace functions")
    return count_tokens("\n".join(lines))


def resent_history_tokens(system: str, user: str, calls: Sequence[Call], tools_tokens: int = 0) -> list[int]:
    """Tokens of each API call under the re-sent-history model, one int per turn (prompt + completion).

    Turn i (one tool call per turn) re-sends system, user and calls[:i] with their results; its
    completion is calls[i]. The last call's result is not sent again (the paper stops on submit_answer).
    """
    base = count_tokens(system) + count_tokens(user) + 2 * TOKENS_PER_MESSAGE + REPLY_PRIMING + tools_tokens
    per_turn: list[int] = []
    history = 0
    for call in calls:
        completion = count_tokens(call.call_text()) + TOKENS_PER_MESSAGE + CALL_FRAMING_TOKENS
        per_turn.append(base + history + completion)
        history += completion + count_tokens(call.result) + TOKENS_PER_MESSAGE + TOOL_RESULT_ID_TOKENS
    return per_turn


@dataclass
class TrialRecord:
    """One trial, with the paper's field names first (``exp2_*.jsonl``) and libraryfs's extras after."""

    condition: str
    model: str
    n: int
    num_pages: int
    trial: int
    target_key: int | str
    target_val: int | str
    answer: str = ""
    correct: bool = False
    answered: bool = False
    page_reads: int = 0
    index_reads: int = 0
    section_index_reads: int = 0
    num_turns: int = 0
    total_tokens: int = 0
    wall_time_s: float = 0.0
    error: str = ""
    # libraryfs extras
    content: str = "hash"
    agent: str = ""
    key_low: int = 1000
    target_page: int = 0
    read_tokens: int = 0  # tokens of everything read (tool results), once each
    max_toc_tokens: int = 0  # largest TOC page read (tokens)
    max_fanout: int = 0  # most links on one TOC page read (AUTO)
    via: str = ""  # mount | dir

    def as_dict(self) -> dict:
        """Plain dict for JSON (field order kept)."""
        return dataclasses.asdict(self)


def score(answer: str | None, target_val: int | str, content: str) -> bool:
    """Paper scoring: hash answers are ``strip().upper()[:4]`` compared to the value; numeric compares
    integers; encyclopedia compares whitespace-normalised text (case-insensitive)."""
    if answer is None:
        return False
    if content == "hash":
        return answer.strip().upper()[:4] == str(target_val)
    if content == "numeric":
        try:
            return int(str(answer).strip()) == int(target_val)
        except ValueError:
            return False
    return " ".join(str(answer).split()).casefold() == " ".join(str(target_val).split()).casefold()


def fill_from_trace(rec: TrialRecord, trace: Trace, system: str, user: str, tools_tokens: int) -> TrialRecord:
    """Fill reads, turns, tokens, answer and correctness of ``rec`` from a scripted agent's ``trace``."""
    rec.page_reads = trace.count("page", "entry")
    rec.index_reads = trace.count("index", "toc")
    rec.section_index_reads = trace.count("section")
    rec.num_turns = len(trace.calls)
    rec.total_tokens = sum(resent_history_tokens(system, user, trace.calls, tools_tokens))
    rec.read_tokens = sum(count_tokens(c.result) for c in trace.calls if c.kind != "submit")
    tocs = [c for c in trace.calls if c.kind in ("index", "section", "toc")]
    rec.max_toc_tokens = max((count_tokens(c.result) for c in tocs), default=0)
    rec.answered = trace.answer is not None
    rec.answer = "" if trace.answer is None else str(trace.answer)
    rec.correct = score(trace.answer, rec.target_val, rec.content)
    rec.error = trace.error
    return rec


def write_jsonl(path: str | os.PathLike[str], records: Iterable[TrialRecord | dict]) -> int:
    """Write records one JSON object per line (UTF-8, overwrite). Returns the number written."""
    count = 0
    with open(path, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec.as_dict() if isinstance(rec, TrialRecord) else rec, ensure_ascii=False))
            f.write("\n")
            count += 1
    return count


def read_jsonl(path: str | os.PathLike[str]) -> list[dict]:
    """All JSON objects of a JSONL file (blank lines skipped)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
